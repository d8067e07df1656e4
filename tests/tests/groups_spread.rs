//! Metadata spread over five nodes (issue #28, failure behaviour 1), with real processes
//! on loopback: five gateways at `--replication-factor 3`, `--group-split-files 16` and
//! `--group-split-objects 40`, so that the FileDB groups and the S3 index split by
//! themselves while objects of 120 distinct bodies are written through every node, each
//! new group placed on the three least loaded nodes and the rebalancer evening out the
//! rest. Once the map settles: every object reads back byte-exact and lists exactly
//! through every node, each FileDB and index group has exactly three replicas holding the
//! same records, and each node holds about three fifths of the records of those groups
//! (the figures are printed). Root, with the keys it kept, is on every node.

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::cluster::{Cluster, ELECTION_TIMEOUT};
use e2e::{poll_until, random_body};

const BUCKET: &str = "mail";
const NODES: usize = 5;
/// Distinct bodies, each under two keys.
const CONTENTS: u64 = 120;
/// How long the splits and moves may take to settle.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(120);

fn body(i: u64) -> Vec<u8> {
    random_body(11_000 + i % CONTENTS, 200 + (i % CONTENTS) as usize * 7)
}

/// `gateway admin groups list` through node `id`, as JSON.
fn groups(cluster: &Cluster, id: usize) -> Option<serde_json::Value> {
    let run = cluster.admin_cli(id, &["groups", "list"]);
    serde_json::from_str(&run.stdout).ok()
}

/// Every node's map version, if every node answers with every group led.
fn versions(cluster: &Cluster) -> Option<Vec<u64>> {
    cluster
        .ids()
        .into_iter()
        .map(|id| {
            let v = groups(cluster, id)?;
            let led = v["groups"]
                .as_array()?
                .iter()
                .all(|g| !g["leader"].is_null());
            led.then(|| v["version"].as_u64()).flatten()
        })
        .collect()
}

/// Bytes of the files under `dir`, recursively.
fn bytes_under(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => bytes_under(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

#[test]
fn five_nodes_each_hold_about_three_fifths_of_the_metadata() {
    let cluster = Cluster::start(
        NODES,
        &[
            "--group-split-files",
            "16",
            "--group-split-objects",
            "40",
            "--snapshot-logs",
            "64",
        ],
    );
    cluster.create_bucket(1, BUCKET);
    let mut keys = BTreeMap::new();
    for i in 0..CONTENTS * 2 {
        let key = format!("k/{i}");
        cluster
            .put_until_ok(
                (i % NODES as u64) as usize + 1,
                BUCKET,
                &key,
                &body(i),
                ELECTION_TIMEOUT,
            )
            .unwrap_or_else(|e| panic!("PUT {key}: {e}"));
        keys.insert(key, i);
    }

    // Settled: the same map version on every node, every group led, for 5 s in a row.
    let mut last = None;
    let mut since = std::time::Instant::now();
    let settled = poll_until(SETTLE_TIMEOUT, || {
        let now = versions(&cluster).filter(|v| v.iter().all(|x| *x == v[0]));
        if now.is_none() || now != last {
            last = now;
            since = std::time::Instant::now();
            return false;
        }
        std::thread::sleep(Duration::from_millis(500));
        since.elapsed() >= Duration::from_secs(5)
    });
    assert!(settled, "the map never settled:\n{}", cluster.describe());
    cluster.wait_groups_quiet(Duration::from_secs(60));
    cluster.assert_all_read_back(BUCKET, &keys, body);
    let all: std::collections::BTreeSet<String> = keys.keys().cloned().collect();
    for id in cluster.ids() {
        let listed: std::collections::BTreeSet<String> = cluster
            .remote(id)
            .list_keys(BUCKET)
            .expect("ListObjectsV2")
            .into_iter()
            .collect();
        assert_eq!(listed, all, "the listing through node {id}");
    }

    // Each FileDB and index group's records, as each of its replicas holds them.
    let mut held: BTreeMap<u64, BTreeMap<usize, u64>> = BTreeMap::new();
    let mut placed: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut kinds: BTreeMap<u64, String> = BTreeMap::new();
    for id in cluster.ids() {
        let v = groups(&cluster, id).expect("groups list");
        for g in v["groups"].as_array().expect("groups") {
            if g["kind"] == "root" {
                continue;
            }
            let gid = g["id"].as_u64().expect("id");
            kinds.insert(gid, g["kind"].as_str().unwrap_or_default().to_string());
            let replicas: Vec<u64> = g["replicas"]
                .as_array()
                .expect("replicas")
                .iter()
                .filter_map(|n| n.as_u64())
                .collect();
            placed.insert(gid, replicas);
            if g["held"] == true {
                let records = g["records"].as_u64().expect("records");
                held.entry(gid).or_default().insert(id, records);
            }
        }
    }
    let of_kind = |kind: &str| kinds.values().filter(|k| *k == kind).count();
    let (filedb, index) = (of_kind("filedb"), of_kind("index"));
    assert!(
        filedb >= 2 && index >= 2,
        "{filedb} FileDB and {index} index groups: {kinds:?}"
    );
    let mut total = 0u64;
    let mut per_node: BTreeMap<usize, u64> = BTreeMap::new();
    for (gid, replicas) in &placed {
        let holders = held.get(gid).cloned().unwrap_or_default();
        let on: Vec<u64> = holders.keys().map(|&n| n as u64).collect();
        let mut want = replicas.clone();
        want.sort_unstable();
        assert_eq!(
            on, want,
            "group {gid} is held where the map does not place it"
        );
        assert_eq!(replicas.len(), 3, "group {gid}: {replicas:?}");
        let counts: Vec<u64> = holders.values().copied().collect();
        assert!(
            counts.iter().all(|c| *c == counts[0]),
            "group {gid}'s replicas hold different counts: {holders:?}"
        );
        total += counts[0];
        for (&node, &records) in &holders {
            *per_node.entry(node).or_default() += records;
        }
    }
    let held_total: u64 = per_node.values().sum();
    assert_eq!(held_total, 3 * total, "every record on exactly three nodes");
    for id in cluster.ids() {
        let share = per_node.get(&id).copied().unwrap_or(0) as f64 / total as f64;
        let bytes = bytes_under(&cluster.node(id).data_dir().join("groups"));
        println!(
            "node {id}: {} of {total} records of the FileDB and index groups ({share:.2}; 3/5 = 0.60), group files {bytes} bytes",
            per_node.get(&id).copied().unwrap_or(0)
        );
        assert!(
            (0.4..=0.8).contains(&share),
            "node {id} holds {share:.2} of the groups' records: {per_node:?} of {total}"
        );
    }
    println!("{filedb} FileDB and {index} index groups: {placed:?} ({kinds:?})");
}
