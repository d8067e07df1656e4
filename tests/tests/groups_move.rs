//! Moving a metadata group's replica between nodes while a cluster serves S3, with real
//! processes on loopback (issue #28): three nodes at `--replication-factor 2`, so the
//! FileDB group a split creates lives on two of them. `gateway admin groups move` then
//! sends it to the third node and back while client threads keep writing and reading
//! through every node. Each move commits on every node, the node it left deletes its
//! replica, every acknowledged object reads back byte-exact from every node, every node's
//! `gateway_stored_*` counts the contents of both groups, and `gateway fsck` of every node
//! is clean.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use e2e::cluster::{Cluster, ELECTION_TIMEOUT};
use e2e::{poll_until, random_body};

const BUCKET: &str = "mail";
/// Distinct bodies: every object shares its content with many others.
const BODIES: u64 = 24;
/// How long a committed change of the map may take to show on every node.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(60);

fn body(i: u64) -> Vec<u8> {
    random_body(3_000 + i % BODIES, 900 + (i % BODIES) as usize * 41)
}

/// `gateway admin groups list` through node `id`, as JSON.
fn groups(cluster: &Cluster, id: usize) -> serde_json::Value {
    let run = cluster.admin_cli(id, &["groups", "list"]);
    assert_eq!(run.code, Some(0), "groups list through node {id}: {run}");
    serde_json::from_str(&run.stdout).expect("groups list prints JSON")
}

/// `/_metrics` of node `id`, parsed.
fn scrape(cluster: &Cluster, id: usize) -> e2e::prom::Exposition {
    let r = cluster
        .node(id)
        .raw("GET", "/_metrics", &[], b"")
        .unwrap_or_else(|e| panic!("GET /_metrics: {e}"));
    assert_eq!(r.status, 200, "{}", r.text());
    e2e::prom::parse(&r.text()).unwrap_or_else(|e| panic!("not a valid exposition: {e}"))
}

/// Waits until every live node shows map `version`, group 1 with a leader on `replicas`.
fn wait_map(cluster: &Cluster, version: u64, replicas: &[u64]) {
    let shown = poll_until(CHANGE_TIMEOUT, || {
        cluster.live().iter().all(|&id| {
            let v = groups(cluster, id);
            let g = &v["groups"][1];
            v["version"] == version
                && !g["leader"].is_null()
                && g["replicas"].as_array().is_some_and(|r| {
                    r.iter()
                        .filter_map(|n| n.as_u64())
                        .eq(replicas.iter().copied())
                })
        })
    });
    assert!(
        shown,
        "map version {version} with group 1 on {replicas:?} never showed on every node:\n{}",
        cluster.describe()
    );
}

/// Waits until node `id`'s data folder holds no replica of group 1.
fn wait_dropped(cluster: &Cluster, id: usize) {
    let folder = cluster.node(id).data_dir().join("groups").join("1");
    assert!(
        poll_until(CHANGE_TIMEOUT, || !folder.exists()),
        "node {id} kept {} after its replica moved off",
        folder.display()
    );
}

/// `gateway admin groups move 1 FROM TO` through node `via`: answers the planned version.
/// Tried again while the group has no leader (refused: an election after a node died).
fn move_group(cluster: &Cluster, via: usize, from: u64, to: u64) -> u64 {
    let args = ["groups", "move", "1", &from.to_string(), &to.to_string()];
    let mut last = String::new();
    let mut planned = None;
    let done = poll_until(CHANGE_TIMEOUT, || {
        let run = cluster.admin_cli(via, &args);
        if run.code == Some(0) {
            planned = serde_json::from_str::<serde_json::Value>(&run.stdout).ok();
            return true;
        }
        assert!(
            run.stderr.contains("has no leader now"),
            "groups move 1 {from} {to}: {run}"
        );
        last = run.to_string();
        false
    });
    assert!(done, "groups move 1 {from} {to} never planned: {last}");
    let planned = planned.expect("JSON");
    assert_eq!(planned["group"], 1, "{planned}");
    planned["version"].as_u64().expect("a version")
}

/// A cluster of `nodes` at `--replication-factor rf` with `count` objects, after `groups
/// split 0` committed: group 1 on nodes 1 to rf (all hold root alone before: the fewest
/// replicas, lowest ids first).
fn split_cluster(
    nodes: usize,
    rf: u64,
    count: u64,
    extra: &[&str],
) -> (Cluster, BTreeMap<String, u64>) {
    let rf_arg = rf.to_string();
    let args: Vec<&str> = ["--snapshot-logs", "16", "--replication-factor", &rf_arg]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    let cluster = Cluster::start(nodes, &args);
    cluster.create_bucket(1, BUCKET);
    let mut acked = BTreeMap::new();
    for i in 0..count {
        let key = format!("before/{i}");
        put(&cluster, (i % nodes as u64) as usize + 1, &key, i);
        acked.insert(key, i);
    }
    let run = cluster.admin_cli(1, &["groups", "split", "0"]);
    assert_eq!(run.code, Some(0), "groups split 0: {run}");
    let placed: Vec<u64> = (1..=rf).collect();
    wait_map(&cluster, 2, &placed);
    (cluster, acked)
}

/// PUT of `key` with `body(i)` through node `id`, tried again through an election.
fn put(cluster: &Cluster, id: usize, key: &str, i: u64) {
    cluster
        .put_until_ok(id, BUCKET, key, &body(i), ELECTION_TIMEOUT)
        .unwrap_or_else(|e| panic!("PUT {key}: {e}"));
}

/// Four nodes at `--replication-factor 3`: the replica of a node killed with SIGKILL moves
/// off it to the fourth node while it is down (the group keeps a majority of both the old
/// and the new replicas through the joint configuration); restarted, the node deletes the
/// replica it no longer holds. Then root's leader is killed right after a move is planned
/// and restarted: the next leader drives the move to its commit. Last, node 4 leaves the
/// cluster with `cluster remove`: its replica moves off first, then root removes it.
/// Every acknowledged object reads back from every node and `fsck` of every node is clean.
#[test]
fn a_dead_nodes_replica_moves_off_and_a_move_outlives_roots_leader() {
    let (mut cluster, mut acked) = split_cluster(4, 3, 45, &[]);
    cluster.kill9(2);
    let first = move_group(&cluster, 1, 2, 4);
    wait_map(&cluster, first, &[1, 4, 3]);
    for i in 100..130u64 {
        let key = format!("while-2-is-down/{i}");
        put(&cluster, [1, 3, 4][i as usize % 3], &key, i);
        acked.insert(key, i);
    }
    cluster.restart(2);
    wait_dropped(&cluster, 2);
    wait_map(&cluster, first, &[1, 4, 3]);

    let leader = cluster.wait_leader(ELECTION_TIMEOUT);
    let via = cluster.ids_except(&[leader])[0];
    let second = move_group(&cluster, via, 1, 2);
    cluster.kill9(leader);
    cluster.restart(leader);
    wait_map(&cluster, second, &[2, 4, 3]);
    wait_dropped(&cluster, 1);
    for i in 200..230u64 {
        let key = format!("after/{i}");
        put(&cluster, (i % 4) as usize + 1, &key, i);
        acked.insert(key, i);
    }

    // Node 4 leaves the cluster: `cluster remove` marks it leaving (202), root's leader
    // moves its replica of group 1 to node 1 (the one without a replica), node 4 drops
    // it, and only then is node 4 removed from root.
    let run = cluster.admin_cli(2, &["cluster", "remove", "4"]);
    assert_eq!(run.code, Some(0), "cluster remove 4: {run}");
    let answer: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(answer["leaving"], true, "{answer}");
    assert_eq!(answer["groups"], serde_json::json!([1]), "{answer}");
    let mut last = String::new();
    let removed = poll_until(CHANGE_TIMEOUT, || {
        let run = cluster.admin_cli(1, &["cluster", "status"]);
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&run.stdout) else {
            return false;
        };
        last = v.to_string();
        v["nodes"].get("4").is_none() && v["leaving"] == serde_json::json!([])
    });
    assert!(removed, "node 4 never left root: {last}");
    let folder = cluster.node(4).data_dir().join("groups").join("1");
    assert!(
        !folder.exists(),
        "node 4 was removed before dropping its replica"
    );
    cluster.kill9(4);
    wait_map(&cluster, second + 1, &[2, 1, 3]);
    for i in 300..320u64 {
        let key = format!("after-4-left/{i}");
        put(&cluster, (i % 3) as usize + 1, &key, i);
        acked.insert(key, i);
    }

    cluster.assert_all_read_back(BUCKET, &acked, body);
    cluster.wait_same_digest(&[1, 2, 3], Duration::from_secs(30));
    cluster.stop_quiet_and_fsck();
}

#[test]
fn a_group_moves_between_nodes_under_s3_traffic_and_every_object_reads_back() {
    let (cluster, before) = split_cluster(3, 2, 60, &["--metrics-open", "--stats-scan-secs", "1"]);
    let acked = Arc::new(Mutex::new(before));

    // Refused: moving root, from a node without a replica, to a node with one; a cancel
    // with no change under way.
    for args in [["0", "1", "3"], ["1", "3", "2"], ["1", "1", "2"]] {
        let run = cluster.admin_cli(2, &["groups", "move", args[0], args[1], args[2]]);
        assert_ne!(
            run.code,
            Some(0),
            "groups move {args:?} was accepted: {run}"
        );
    }
    let run = cluster.admin_cli(2, &["groups", "cancel"]);
    assert!(
        run.code != Some(0) && run.stderr.contains("no change of the map is under way"),
        "groups cancel with nothing under way: {run}"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let clients = cluster.put_get_clients(BUCKET, 60, body, &acked, &stop);
    thread::sleep(Duration::from_millis(300));

    // Node 2's replica to node 3 (through node 1), then node 1's to node 2 (through node
    // 3): node 2 drops its replica with the first move and starts again from nothing.
    let first = move_group(&cluster, 1, 2, 3);
    assert_eq!(first, 3);
    wait_map(&cluster, first, &[1, 3]);
    wait_dropped(&cluster, 2);
    // The audit under traffic: writes between its reads are never confirmed.
    cluster.assert_audit_clean(2, true);
    let second = move_group(&cluster, 3, 1, 2);
    wait_map(&cluster, second, &[2, 3]);
    wait_dropped(&cluster, 1);

    thread::sleep(Duration::from_millis(300));
    // A move that takes a group's leader away costs one election in the group (1-1.5 s,
    // longer on a loaded machine): a PUT waits it out (up to the send budget, 8 s), and
    // none is answered 503.
    let slowest = clients.finish();
    let acked = acked.lock().unwrap().clone();
    println!(
        "{} objects acknowledged; the slowest PUT+GET round during two moves took {slowest:?}",
        acked.len()
    );
    cluster.assert_all_read_back(BUCKET, &acked, body);
    let audit = cluster.assert_audit_clean(3, false);
    assert_eq!(audit["contents"], BODIES, "{audit:#}");
    // The group's replicas hold its records; the node it left holds none.
    let v = groups(&cluster, 2);
    assert_eq!(v["groups"][1]["held"], true, "{v}");
    assert!(
        v["groups"][1]["records"].as_u64().is_some_and(|r| r > 0),
        "{v}"
    );
    assert_eq!(groups(&cluster, 1)["groups"][1]["held"], false);
    cluster.wait_same_digest(&cluster.ids(), Duration::from_secs(30));

    // Every node counts the contents of both groups, held here or not: each of the
    // BODIES bodies once, stored twice.
    let physical: u64 = (0..BODIES).map(|b| body(b).len() as u64 * 2).sum();
    for id in cluster.ids() {
        let mut last = String::new();
        let counted = poll_until(CHANGE_TIMEOUT, || {
            let e = scrape(&cluster, id);
            let got = (
                e.value("gateway_stored_contents", &[]),
                e.value("gateway_stored_physical_bytes", &[]),
            );
            last = format!("{got:?}");
            got == (Some(BODIES as f64), Some(physical as f64))
        });
        assert!(
            counted,
            "node {id} never counted {BODIES} contents of {physical} bytes across the groups: {last}"
        );
    }

    let mut cluster = cluster;
    cluster.stop_quiet_and_fsck();
}
