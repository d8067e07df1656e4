//! Crash torture of one gateway: `kill -9` at random moments, again and again, under a
//! mixed load (PUT with many duplicate bodies, overwrite, copy, delete, multipart, native
//! upload/inc/dec/GET) with Valkyrie deleting on short settings; then every acknowledged
//! object reads back byte-exact, every native reference count lies within what the
//! acknowledged calls allow, and `gateway fsck` is clean.
//!
//! `CRASH_TORTURE_CYCLES` (default 50, the CI run) sets the number of kills,
//! `CRASH_TORTURE_SEED` the random seed (printed, to replay a failure). A longer run:
//! `CRASH_TORTURE_CYCLES=1000 cargo test -p e2e --release --test crash_torture -- --nocapture`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use e2e::cluster::run_gateway;
use e2e::torture::{self, Bodies, StopOnDrop, Workload};
use e2e::{ConfigFile, Gateway, Remote, poll_until, random_token};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

const BUCKET: &str = "torture";
/// Entries between two snapshots (and log purges).
const SNAPSHOT_LOGS: &str = "50";
/// How long the clients may take to get a few operations acknowledged after a restart.
const PROGRESS_TIMEOUT: Duration = Duration::from_secs(60);

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name)
        .ok()
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name} is a number")))
}

#[test]
fn kill9_loop_under_mixed_load_keeps_every_acknowledged_operation() {
    let cycles = env_number("CRASH_TORTURE_CYCLES").unwrap_or(50);
    let seed = env_number("CRASH_TORTURE_SEED").unwrap_or_else(|| rand::rng().random());
    println!("crash torture: {cycles} cycles, seed {seed} (CRASH_TORTURE_SEED to replay)");
    let mut rng = StdRng::seed_from_u64(seed);

    // Valkyrie on short settings: contents whose last reference goes are quarantined and
    // deleted within seconds, while the clients upload the same bytes again.
    let conf = ConfigFile::new("[valkyrie]\ndeletion_interval_secs = 1\n");
    let native_token = random_token(32);
    let mut gw = Gateway::start_with(
        &[
            "--config",
            conf.arg(),
            "--quarantine-secs",
            "2",
            "--slave-delay-secs",
            "2",
            "--scrub-interval-secs",
            "1",
            // A snapshot and a log purge every 50 entries: kills land before, during and
            // after them, and every restart starts from a purged log.
            "--snapshot-logs",
            SNAPSHOT_LOGS,
        ],
        &[("GATEWAY_NATIVE_TOKEN", native_token.as_str())],
    );
    let created = gw
        .remote()
        .signed("PUT", &format!("/{BUCKET}"))
        .try_send()
        .expect("CreateBucket: an answer");
    assert_eq!(created.status, 200, "CreateBucket: {}", created.text());

    let workload = Workload {
        bucket: BUCKET.to_string(),
        native_token: Some(native_token.clone()),
    };
    let remotes: Vec<Remote> = vec![gw.remote()];
    let bodies = Arc::new(Bodies::new());
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicUsize::new(0));
    let clients = torture::start_clients(4, seed, &remotes, &workload, &bodies, &stop, &acked);
    let _stop_on_panic = StopOnDrop(stop.clone());

    let started = Instant::now();
    for cycle in 1..=cycles {
        let base = acked.load(Ordering::Relaxed);
        assert!(
            poll_until(PROGRESS_TIMEOUT, || acked.load(Ordering::Relaxed)
                >= base + 5),
            "cycle {cycle}: no progress in {PROGRESS_TIMEOUT:?}\n{}",
            gw.log_tail(50)
        );
        // A random moment: inside a request, a group commit, a Valkyrie pass, a rename.
        thread::sleep(Duration::from_millis(rng.random_range(0..800)));
        gw.kill9();
        if rng.random_bool(0.3) {
            // Down for a while: clients see refused connections.
            thread::sleep(Duration::from_millis(rng.random_range(0..500)));
        }
        gw.restart();
        if cycle % 10 == 0 {
            println!(
                "cycle {cycle}/{cycles}: {} operations acknowledged so far",
                acked.load(Ordering::Relaxed)
            );
        }
    }
    let (settled, model, counts) =
        torture::settle_and_join(PROGRESS_TIMEOUT, &stop, &acked, clients);
    assert!(
        settled,
        "no progress after the last cycle\n{}",
        gw.log_tail(50)
    );
    println!(
        "{cycles} kills in {:?}: {} operations acknowledged ({} PUT, {} copies, {} DELETE, \
         {} multipart, {} native), {} failed, {} reads checked; {} keys ({} uncertain), {} \
         native contents",
        started.elapsed(),
        counts.acked(),
        counts.puts,
        counts.copies,
        counts.deletes,
        counts.multiparts,
        counts.natives,
        counts.failed,
        counts.reads,
        model.keys.len(),
        model.uncertain_keys(),
        model.natives.len()
    );
    assert!(
        counts.violations.is_empty(),
        "answers during the torture that no acknowledged operation explains:\n{}",
        counts.violations.join("\n")
    );
    assert!(
        counts.puts > 0 && counts.deletes > 0 && counts.natives > 0,
        "{counts:?}"
    );

    // One more kill at rest, then the whole model against the gateway.
    gw.restart();
    let status = gw
        .remote()
        .admin_get("/_admin/cluster", Duration::from_secs(5))
        .map(|r| r.text())
        .unwrap_or_default();
    let status = e2e::cluster::ClusterStatus::parse(&status).expect("/_admin/cluster");
    let every: u64 = SNAPSHOT_LOGS.parse().expect("a number");
    let snapshots = status.snapshot.unwrap_or(0) / every;
    println!(
        "log at {:?}, snapshot at {:?}: about {snapshots} snapshots and log purges crossed",
        status.last_log_index, status.snapshot
    );
    assert!(
        snapshots >= 3,
        "the torture crossed too few purges: {status:?}"
    );
    let remote = gw.remote();
    if let Err(e) = torture::verify_objects(&remote, BUCKET, &model, &bodies) {
        panic!("objects disagree with the acknowledged operations:\n{e}");
    }
    if let Err(e) = torture::verify_natives(&remote, &native_token, &model) {
        panic!("native contents disagree with the acknowledged calls:\n{e}");
    }

    gw.kill9();
    let data = gw.data_dir().to_str().expect("utf-8 temp path").to_string();
    let run = run_gateway(&["fsck", "--data", &data], &[]);
    assert_eq!(run.code, Some(0), "fsck:\n{run}");
    assert!(run.stdout.contains("fsck: clean"), "fsck:\n{run}");
}
