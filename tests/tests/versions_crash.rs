//! Versions and delete markers through `kill -9`, on one node and on three: client threads
//! add versions (with many duplicate bodies), delete markers, and remove versions by id on
//! their own keys while nodes are killed and restarted across snapshots and log purges.
//! Every acknowledged version then reads back byte-exact by its id (an acknowledged marker
//! answers as a marker), every acknowledged removal stays removed, the nodes agree, and
//! `gateway fsck` is exact (each version's reference counted).
//!
//! `VERSIONS_CRASH_CYCLES` (default 6) sets the kills per setup, `VERSIONS_CRASH_SEED`
//! the seed (printed, to replay a failure).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use e2e::cluster::{Cluster, ELECTION_TIMEOUT, is_unavailable};
use e2e::env_number;
use e2e::torture::StopOnDrop;
use e2e::{Gateway, Remote, poll_until, random_body};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

const BUCKET: &str = "vcrash";
/// Entries between two snapshots (and log purges): small, so that kills land on every
/// side of them.
const SNAPSHOT_LOGS: &str = "20";
const KEYS_PER_CLIENT: usize = 3;
const CLIENTS: usize = 3;
const PROGRESS_TIMEOUT: Duration = Duration::from_secs(60);
/// How many times a read answered 503 is tried again, 250 ms apart (30 s in all).
const UNAVAILABLE_RETRIES: usize = 120;

/// What an acknowledged operation left: a version with its body, or a marker.
#[derive(Clone, Debug, PartialEq)]
enum Acked {
    Version(usize),
    Marker,
    /// Removed by an acknowledged DELETE of its id.
    Removed,
}

type Model = BTreeMap<(String, String), Acked>;

/// A few bodies, so that versions share content across keys and clients.
fn bodies() -> Vec<Vec<u8>> {
    [700, 3_000, 20_000, 70_000]
        .iter()
        .enumerate()
        .map(|(i, &len)| random_body(7700 + i as u64, len))
        .collect()
}

/// One client: its own keys, a random mix through random nodes until `stop`; what the
/// acknowledged operations left. An operation without an answer leaves its version (or
/// removal) uncertain: it is not in the model, and a removal's target leaves it.
fn client(
    n: usize,
    seed: u64,
    remotes: Vec<Remote>,
    bodies: Arc<Vec<Vec<u8>>>,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
) -> Model {
    let mut rng = StdRng::seed_from_u64(seed ^ (n as u64 * 7919));
    let mut model = Model::new();
    let keys: Vec<String> = (0..KEYS_PER_CLIENT).map(|k| format!("c{n}/k{k}")).collect();
    for _ in 0..100_000 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let remote = &remotes[rng.random_range(0..remotes.len())];
        let key = &keys[rng.random_range(0..keys.len())];
        let target = format!("/{BUCKET}/{key}");
        let roll = rng.random_range(0..10);
        if roll < 6 {
            let b = rng.random_range(0..bodies.len());
            let r = remote.signed("PUT", &target).body(&bodies[b]).try_send();
            if let Ok(r) = r
                && r.status == 200
            {
                let id = r
                    .header("x-amz-version-id")
                    .expect("a version id")
                    .to_string();
                model.insert((key.clone(), id), Acked::Version(b));
                acked.fetch_add(1, Ordering::Relaxed);
            }
        } else if roll < 8 {
            let r = remote.signed("DELETE", &target).try_send();
            if let Ok(r) = r
                && r.status == 204
            {
                assert_eq!(r.header("x-amz-delete-marker"), Some("true"));
                let id = r
                    .header("x-amz-version-id")
                    .expect("a marker id")
                    .to_string();
                model.insert((key.clone(), id), Acked::Marker);
                acked.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            let live: Vec<String> = model
                .iter()
                .filter(|((k, _), a)| k == key && **a != Acked::Removed)
                .map(|((_, id), _)| id.clone())
                .collect();
            if live.is_empty() {
                continue;
            }
            let id = live[rng.random_range(0..live.len())].clone();
            let r = remote
                .signed("DELETE", &format!("{target}?versionId={id}"))
                .try_send();
            match r {
                Ok(r) if r.status == 204 => {
                    model.insert((key.clone(), id), Acked::Removed);
                    acked.fetch_add(1, Ordering::Relaxed);
                }
                // Refused before it was applied: the version is as it was.
                Ok(r) if r.status < 500 => panic!("DELETE {target} {id}: {}", r.status),
                // No answer, or 503 with the outcome unknown: either way from now on.
                _ => {
                    model.remove(&(key.clone(), id));
                }
            }
        }
    }
    model
}

/// Every acknowledged version, marker and removal, read by id through `remote`. A 503
/// (an election under way: a node of a loaded machine missed heartbeats) is retried for a
/// while, as SDKs retry it; any other answer is final.
fn verify(remote: &Remote, model: &Model, bodies: &[Vec<u8>]) {
    for ((key, id), acked) in model {
        let target = format!("/{BUCKET}/{key}?versionId={id}");
        let mut r = remote.signed("GET", &target).send();
        for _ in 0..UNAVAILABLE_RETRIES {
            if !is_unavailable(&r) {
                break;
            }
            thread::sleep(Duration::from_millis(250));
            r = remote.signed("GET", &target).send();
        }
        match acked {
            Acked::Version(b) => {
                assert_eq!(r.status, 200, "{key} {id}: {}", r.text());
                assert!(r.body == bodies[*b], "{key} {id}: other bytes");
            }
            Acked::Marker => {
                assert_eq!(r.status, 405, "{key} marker {id}: {}", r.text());
                assert_eq!(r.header("x-amz-delete-marker"), Some("true"));
            }
            Acked::Removed => {
                assert_eq!(r.status, 404, "{key} {id} was removed: {}", r.text());
            }
        }
    }
}

/// PutBucketVersioning, retried while it answers 503: a new cluster's leader raises the
/// group to the format versioning needs once every member has answered it, a moment
/// after the first commands (SDKs retry a 503 the same way).
fn enable_versioning(remote: &Remote) {
    let body = br#"<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>"#;
    let mut last = String::new();
    let enabled = poll_until(ELECTION_TIMEOUT, || {
        let r = remote
            .signed("PUT", &format!("/{BUCKET}?versioning"))
            .body(body)
            .send();
        assert!(
            r.status == 200 || r.status == 503,
            "PutBucketVersioning: {}",
            r.text()
        );
        last = r.text();
        r.status == 200
    });
    assert!(enabled, "PutBucketVersioning still refused: {last}");
}

/// Runs the clients while `kill` kills and restarts a node `cycles` times; the merged
/// model of what was acknowledged.
fn crash_loop(
    remotes: Vec<Remote>,
    cycles: usize,
    seed: u64,
    mut kill: impl FnMut(&mut StdRng, usize),
) -> Model {
    let mut rng = StdRng::seed_from_u64(seed);
    let bodies = Arc::new(bodies());
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicUsize::new(0));
    let _stop_on_panic = StopOnDrop(stop.clone());
    let clients: Vec<_> = (0..CLIENTS)
        .map(|n| {
            let (remotes, bodies, stop, acked) =
                (remotes.clone(), bodies.clone(), stop.clone(), acked.clone());
            thread::spawn(move || client(n, seed, remotes, bodies, stop, acked))
        })
        .collect();
    for cycle in 1..=cycles {
        let base = acked.load(Ordering::Relaxed);
        assert!(
            poll_until(PROGRESS_TIMEOUT, || acked.load(Ordering::Relaxed)
                >= base + 10),
            "cycle {cycle}: no progress"
        );
        thread::sleep(Duration::from_millis(rng.random_range(0..1_500)));
        kill(&mut rng, cycle);
    }
    let base = acked.load(Ordering::Relaxed);
    assert!(
        poll_until(PROGRESS_TIMEOUT, || acked.load(Ordering::Relaxed)
            >= base + 10),
        "no progress after the last cycle"
    );
    stop.store(true, Ordering::SeqCst);
    let mut model = Model::new();
    for c in clients {
        model.extend(c.join().expect("client thread"));
    }
    let count = |want: fn(&Acked) -> bool| model.values().filter(|a| want(a)).count();
    println!(
        "{cycles} kills: {} operations acknowledged; model: {} versions, {} markers, {} removed",
        acked.load(Ordering::Relaxed),
        count(|a| matches!(a, Acked::Version(_))),
        count(|a| *a == Acked::Marker),
        count(|a| *a == Acked::Removed),
    );
    assert!(count(|a| *a == Acked::Removed) > 0 && count(|a| *a == Acked::Marker) > 0);
    model
}

#[test]
fn one_node_keeps_every_acknowledged_version_through_kill9() {
    let cycles = env_number("VERSIONS_CRASH_CYCLES").unwrap_or(6) as usize;
    let seed = env_number("VERSIONS_CRASH_SEED").unwrap_or_else(|| rand::rng().random());
    println!("one node: {cycles} cycles, seed {seed} (VERSIONS_CRASH_SEED to replay)");
    let mut gw = Gateway::start_with(&["--snapshot-logs", SNAPSHOT_LOGS], &[]);
    let created = gw.remote().signed("PUT", &format!("/{BUCKET}")).send();
    assert_eq!(created.status, 200, "{}", created.text());
    enable_versioning(&gw.remote());
    let remotes = vec![gw.remote()];
    let model = {
        let gw = &mut gw;
        crash_loop(remotes, cycles, seed, |_, cycle| {
            gw.kill9();
            gw.restart();
            println!("cycle {cycle}: kill -9, restarted");
        })
    };
    verify(&gw.remote(), &model, &bodies());
    gw.kill9();
    e2e::assert_fsck_clean(gw.data_dir());
}

#[test]
fn three_nodes_keep_every_acknowledged_version_through_kill9() {
    let cycles = env_number("VERSIONS_CRASH_CYCLES").unwrap_or(6) as usize;
    let seed = env_number("VERSIONS_CRASH_SEED").unwrap_or_else(|| rand::rng().random());
    println!("three nodes: {cycles} cycles, seed {seed} (VERSIONS_CRASH_SEED to replay)");
    let mut cluster = Cluster::start(3, &["--snapshot-logs", SNAPSHOT_LOGS]);
    cluster.create_bucket(1, BUCKET);
    enable_versioning(&cluster.remote(1));
    let remotes: Vec<Remote> = cluster.ids().iter().map(|&id| cluster.remote(id)).collect();
    let model = {
        let cluster = &mut cluster;
        crash_loop(remotes, cycles, seed, |rng, cycle| {
            let victim = rng.random_range(1..=cluster.size());
            let was_leader = cluster.leader() == Some(victim);
            cluster.kill9(victim);
            thread::sleep(Duration::from_millis(rng.random_range(0..1_500)));
            cluster.restart(victim);
            let leader = cluster.wait_leader(ELECTION_TIMEOUT * 2);
            println!(
                "cycle {cycle}: kill -9 node {victim}{}, restarted; leader {leader}",
                if was_leader { " (the leader)" } else { "" }
            );
        })
    };
    cluster.wait_leader(ELECTION_TIMEOUT);
    let d = cluster.wait_same_digest(&cluster.ids(), Duration::from_secs(60));
    let snapshot = cluster
        .status(cluster.wait_leader(ELECTION_TIMEOUT))
        .ok()
        .and_then(|s| s.snapshot)
        .unwrap_or(0);
    println!(
        "converged at last_applied {}; snapshot at {snapshot}: about {} snapshots and log purges crossed",
        d.last_applied,
        snapshot / 20
    );
    assert!(snapshot / 20 >= 3, "too few purges crossed");
    let bodies = bodies();
    for id in cluster.ids() {
        verify(&cluster.remote(id), &model, &bodies);
    }
    cluster.kill_all_and_fsck();
}
