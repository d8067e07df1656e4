//! A rolling upgrade: a three-node group of the previous release is upgraded one node at
//! a time to this build while clients keep writing and reading through every node. At
//! every step the group serves, the members apply the same entries (identical table
//! digests), and the group's metadata format version stays at 1 until the last member
//! runs this build; only then does the leader raise it (see
//! `gateway/src/meta/cluster_version.rs`), so no member ever receives an entry it cannot
//! read.
//!
//! The previous release's binary comes from `GATEWAY_PREVIOUS_BIN`; `scripts/test.sh`
//! (the README's test command) builds it from the commit named in
//! `scripts/previous-release` and sets the variable. Without it the test fails and says
//! how to build it.
//!
//! Run: `GATEWAY_PREVIOUS_BIN=... cargo test -p e2e --test rolling_upgrade -- --nocapture`.

use std::path::PathBuf;
use std::time::Duration;

use e2e::cluster::{CATCH_UP_TIMEOUT, Cluster, ELECTION_TIMEOUT};
use e2e::{Remote, gateway_bin, poll_until, random_body, torture};

const BUCKET: &str = "upgrade";
/// Bound on the leader raising the format version once every member runs this build
/// (it checks every 2 s).
const RAISE_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on one PUT's retries while the group elects after a restart.
const PUT_TIMEOUT: Duration = Duration::from_secs(30);

fn previous_bin() -> PathBuf {
    let Ok(path) = std::env::var("GATEWAY_PREVIOUS_BIN") else {
        panic!(
            "GATEWAY_PREVIOUS_BIN is not set: build the previous release's gateway with \
             `bash scripts/previous-gateway.sh` (it prints the path), or run the tests with \
             `bash scripts/test.sh`"
        );
    };
    let path = PathBuf::from(path);
    assert!(
        path.is_file(),
        "GATEWAY_PREVIOUS_BIN: no file at {}",
        path.display()
    );
    path
}

fn put_until_ok(remote: &Remote, key: &str, body: &[u8]) {
    let ok = poll_until(
        PUT_TIMEOUT,
        || matches!(remote.put(BUCKET, key, body), Ok(r) if r.status == 200),
    );
    assert!(ok, "PUT {key} not acknowledged within {PUT_TIMEOUT:?}");
}

/// The group's format version as node `id` reports it (`None`: a release that does not
/// report one, i.e. version 1).
fn cluster_version(cluster: &Cluster, id: usize) -> Option<u64> {
    cluster.status(id).ok().and_then(|s| s.cluster_version)
}

/// Makes one of `upgraded` lead: the leader of another release is paused until one of
/// them leads, then resumed (it steps down). Bounded attempts.
fn lead_with_one_of(cluster: &mut Cluster, upgraded: &[usize]) -> usize {
    for _ in 0..5 {
        let leader = cluster.wait_leader(ELECTION_TIMEOUT);
        if upgraded.contains(&leader) {
            return leader;
        }
        cluster.pause(leader);
        let others: Vec<usize> = cluster.ids().into_iter().filter(|&n| n != leader).collect();
        let moved = cluster.try_wait_leader_among(&others, ELECTION_TIMEOUT);
        cluster.resume(leader);
        if let Ok(l) = moved
            && upgraded.contains(&l)
        {
            cluster.wait_leader(ELECTION_TIMEOUT);
            return l;
        }
    }
    panic!(
        "no node of this build came to lead in 5 attempts:\n{}",
        cluster.describe()
    );
}

#[test]
fn a_group_upgraded_one_node_at_a_time_keeps_serving() {
    let previous = previous_bin();
    let current = gateway_bin();
    let mut cluster = Cluster::start_bins(
        &[previous.clone(), previous.clone(), previous.clone()],
        &["--snapshot-logs", "40"],
    );
    cluster.create_bucket(1, BUCKET);
    let mut written: Vec<(String, Vec<u8>)> = Vec::new();
    let mut write_round = |cluster: &Cluster, round: usize| {
        for i in 0..30 {
            let key = format!("r{round}/k{i}");
            let body = random_body((round * 1000 + i) as u64, 500 + i * 97);
            let id = 1 + i % 3;
            put_until_ok(&cluster.remote(id), &key, &body);
            written.push((key, body));
        }
    };
    write_round(&cluster, 0);

    // Node by node: restarted on this build, on its own data folder.
    for (step, id) in [3usize, 1, 2].into_iter().enumerate() {
        cluster.node_mut(id).restart_with_bin(current.clone());
        cluster.wait_leader(ELECTION_TIMEOUT * 2);
        write_round(&cluster, step + 1);
        let d = cluster.wait_same_digest(&cluster.ids(), CATCH_UP_TIMEOUT);
        let upgraded = step + 1;
        println!(
            "{upgraded} of 3 nodes on this build (node {id} just upgraded): digests agree at {}",
            d.last_applied
        );
        if upgraded < 3 {
            // An older member remains: the version must not move, even under a leader of
            // this build (the one that would raise it). Give that leader a few of its
            // checks to (wrongly) raise it.
            let done: Vec<usize> = [3usize, 1, 2][..upgraded].to_vec();
            let leader = lead_with_one_of(&mut cluster, &done);
            println!("node {leader} (this build) leads a group with a previous release");
            std::thread::sleep(Duration::from_secs(6));
            let d = cluster.wait_same_digest(&cluster.ids(), CATCH_UP_TIMEOUT);
            println!("digests still agree at {}", d.last_applied);
            for n in cluster.ids() {
                let v = cluster_version(&cluster, n);
                assert!(
                    v.is_none_or(|v| v == 1),
                    "node {n} reports format version {v:?} with a previous release still a member"
                );
            }
        }
    }

    // Every member runs this build: the leader raises the version, every node applies it.
    let newest = cluster
        .status(cluster.ids()[0])
        .ok()
        .and_then(|s| s.format_version)
        .expect("this build reports the format it knows");
    assert!(newest >= 2, "{newest}");
    let raised = poll_until(RAISE_TIMEOUT, || {
        cluster
            .ids()
            .iter()
            .all(|&n| cluster_version(&cluster, n) == Some(newest))
    });
    assert!(
        raised,
        "the format version was not raised to {newest} on every node:\n{}",
        cluster.describe()
    );
    write_round(&cluster, 9);
    cluster.wait_same_digest(&cluster.ids(), CATCH_UP_TIMEOUT);
    for id in cluster.ids() {
        let remote = cluster.remote(id);
        for (key, body) in &written {
            let got = torture::read(&remote, BUCKET, key)
                .unwrap_or_else(|e| panic!("node {id}: GET {key}: {e}"));
            assert!(
                got.as_deref() == Some(body.as_slice()),
                "node {id}: {key} is not what was written"
            );
        }
    }
    println!(
        "{} objects written across the upgrade, all read back through every node",
        written.len()
    );
    cluster.kill_all_and_fsck();
}
