//! A gateway killed between a cross-group write's reference and its entry, again and again
//! (issue #28, failure behaviour 3), with real processes on loopback: three nodes with
//! `--ref-deadline-ms 3000 --reconcile-grace-ms 500`, root's sha1 space split so that
//! the contents from 0x80 on live in group 1 while every entry lives in root. Node 3 runs
//! with `GATEWAY_CRASH_POINT=after-ref-inc`: it aborts as soon as a PUT through it has
//! taken its reference in group 1, before the entry is written. Each cycle PUTs through
//! node 3 until it dies, half the time a body other objects already name, half the time a
//! body of its own, and restarts it. Then, once the deadline and the grace have passed:
//! no key of a killed PUT exists, every acknowledged object reads back byte-exact through
//! every node (no content was freed while an entry named it), and `gateway fsck` of every
//! node finds no reference pending and every content's references equal to the entries
//! naming it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use e2e::cluster::{Cluster, ELECTION_TIMEOUT};
use e2e::{poll_until, random_body};
use sha1::Digest as _;

const BUCKET: &str = "mail";
const CYCLES: usize = 6;
/// `--ref-deadline-ms` and `--reconcile-grace-ms`.
const DEADLINE_MS: u64 = 3000;
const GRACE_MS: u64 = 500;

/// Bodies whose SHA-1 is from 0x80 on (group 1's after the split at the middle), or below.
fn bodies(upper: bool, count: usize, seed: u64) -> Vec<Vec<u8>> {
    (seed..)
        .map(|s| random_body(s, 500 + (s % 50) as usize))
        .filter(|b| (sha1::Sha1::digest(b)[0] >= 0x80) == upper)
        .take(count)
        .collect()
}

#[test]
fn pending_references_of_killed_writes_settle_and_no_named_content_is_freed() {
    let deadline = DEADLINE_MS.to_string();
    let grace = GRACE_MS.to_string();
    let mut cluster = Cluster::start(
        3,
        &[
            "--snapshot-logs",
            "16",
            "--ref-deadline-ms",
            &deadline,
            "--reconcile-grace-ms",
            &grace,
        ],
    );
    cluster.create_bucket(1, BUCKET);
    // Refused until the cluster has raised its metadata format, right after it formed.
    let mut last = String::new();
    let planned = poll_until(Duration::from_secs(30), || {
        let run = cluster.admin_cli(1, &["groups", "split", "0"]);
        last = run.to_string();
        run.code == Some(0)
    });
    assert!(planned, "groups split 0: {last}");
    let split = poll_until(Duration::from_secs(60), || {
        cluster.ids().iter().all(|&id| {
            let run = cluster.admin_cli(id, &["groups", "list"]);
            serde_json::from_str::<serde_json::Value>(&run.stdout)
                .is_ok_and(|v| v["version"] == 2 && !v["groups"][1]["leader"].is_null())
        })
    });
    assert!(split, "the split never committed:\n{}", cluster.describe());

    // Shared bodies in group 1, each named by acknowledged objects; lower bodies in root.
    let shared = bodies(true, 4, 40_000);
    let lower = bodies(false, 4, 41_000);
    let mut acked: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (i, b) in shared.iter().chain(&lower).enumerate() {
        for copy in 0..2 {
            let key = format!("named/{i}/{copy}");
            cluster
                .put_until_ok(1 + copy, BUCKET, &key, b, ELECTION_TIMEOUT)
                .unwrap_or_else(|e| panic!("PUT {key}: {e}"));
            acked.insert(key, b.clone());
        }
    }

    let own = bodies(true, CYCLES, 42_000);
    let mut killed = Vec::new();
    for cycle in 0..CYCLES {
        cluster
            .node_mut(3)
            .restart_with_env("GATEWAY_CRASH_POINT", Some("after-ref-inc"));
        let remote = cluster.remote(3);
        // A lower body first: a write within root is no cross-group write, and stays.
        let key = format!("kept/{cycle}");
        let low = &lower[cycle % lower.len()];
        let started = Instant::now();
        loop {
            match remote.put(BUCKET, &key, low) {
                Ok(r) if r.status == 200 => break,
                _ if started.elapsed() < ELECTION_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(200))
                }
                other => panic!("PUT {key} through node 3: {other:?}"),
            }
        }
        acked.insert(key, low.clone());
        let body = if cycle % 2 == 0 {
            shared[cycle % shared.len()].clone()
        } else {
            own[cycle].clone()
        };
        let key = format!("killed/{cycle}");
        let answer = remote.put(BUCKET, &key, &body);
        assert!(
            !matches!(&answer, Ok(r) if r.status == 200),
            "PUT {key} through node 3 was acknowledged: no crash at the crash point"
        );
        let died = poll_until(Duration::from_secs(10), || {
            !cluster.node_mut(3).is_running()
        });
        assert!(died, "node 3 did not abort at the crash point ({answer:?})");
        killed.push(key);
    }
    cluster
        .node_mut(3)
        .restart_with_env("GATEWAY_CRASH_POINT", None);
    println!(
        "{} writes killed between their reference and their entry",
        killed.len()
    );

    // The reconciler settles each pending reference once its deadline and the grace have
    // passed, on group 1's leader, in its next rounds.
    std::thread::sleep(Duration::from_millis(DEADLINE_MS + GRACE_MS + 3_000));
    for id in cluster.ids() {
        for key in &killed {
            let r = cluster.remote(id).get(BUCKET, key).expect("GET");
            assert_eq!(r.status, 404, "GET {key} through node {id}: {}", r.text());
        }
        for (key, body) in &acked {
            let r = cluster.remote(id).get(BUCKET, key).expect("GET");
            assert_eq!(r.status, 200, "GET {key} through node {id}: {}", r.text());
            e2e::assert_same_body(&r.body, body, key);
        }
    }
    for (id, run) in cluster.stop_quiet_and_fsck() {
        assert!(
            run.stdout.contains(", 0 references pending,"),
            "node {id} still holds pending references past their deadline:\n{run}"
        );
    }
}
