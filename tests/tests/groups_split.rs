//! Splitting a FileDB group while a cluster serves S3, with real processes on loopback
//! (issue #28): three nodes, objects of many duplicate bodies; `gateway admin groups split
//! 0` plans the split of root's sha1 space while client threads keep writing and reading
//! through every node. Root's leader moves the rows and commits the map; every write
//! acknowledged before, during and after reads back byte-exact from every node, deletes
//! release their references wherever the content lives, and both groups' replicas end
//! identical.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use e2e::cluster::{Cluster, ELECTION_TIMEOUT};
use e2e::{assert_same_body, random_body};

const BUCKET: &str = "mail";
/// Distinct bodies: every object shares its content with many others.
const BODIES: u64 = 24;
/// How long the committed split may take to show on every node.
const SPLIT_TIMEOUT: Duration = Duration::from_secs(60);

fn body(i: u64) -> Vec<u8> {
    random_body(i % BODIES, 700 + (i % BODIES) as usize * 53)
}

#[test]
fn a_filedb_group_splits_under_s3_traffic_and_every_object_reads_back() {
    let cluster = Cluster::start(3, &["--snapshot-logs", "16"]);
    cluster.create_bucket(1, BUCKET);
    let acked: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    for i in 0..90u64 {
        let key = format!("before/{i}");
        let id = (i % 3) as usize + 1;
        cluster
            .put_until_ok(id, BUCKET, &key, &body(i), ELECTION_TIMEOUT)
            .unwrap_or_else(|e| panic!("PUT {key}: {e}"));
        acked.lock().unwrap().insert(key, i);
    }

    // Writers and readers through every node while the split runs.
    let stop = Arc::new(AtomicBool::new(false));
    let clients = cluster.put_get_clients(BUCKET, 90, body, &acked, &stop);
    thread::sleep(Duration::from_millis(500));

    let planned = cluster.split_and_wait(2, &["0"], "filedb", SPLIT_TIMEOUT);
    assert_eq!(planned["version"], 2, "{planned}");
    assert_eq!(planned["group"], 1, "{planned}");
    thread::sleep(Duration::from_millis(500));
    let slowest = clients.finish();
    let acked = acked.lock().unwrap().clone();
    println!(
        "{} objects acknowledged; the slowest PUT+GET round during the split took {slowest:?}",
        acked.len()
    );

    // Every acknowledged object reads back from every node; then half are deleted and
    // stay deleted, the rest still read back.
    cluster.assert_all_read_back(BUCKET, &acked, body);
    let (gone, kept): (Vec<_>, Vec<_>) = acked.iter().partition(|(_, i)| *i % 2 == 0);
    for (n, (key, _)) in gone.iter().enumerate() {
        let r = cluster
            .remote(n % 3 + 1)
            .delete(BUCKET, key)
            .expect("DELETE");
        assert_eq!(r.status, 204, "DELETE {key}: {}", r.text());
    }
    for id in cluster.ids() {
        for (key, _) in &gone {
            let r = cluster.remote(id).get(BUCKET, key).expect("GET");
            assert_eq!(
                r.status, 404,
                "GET {key} after its delete through node {id}"
            );
        }
        for &(key, &i) in &kept {
            let r = cluster.remote(id).get(BUCKET, key).expect("GET");
            assert_eq!(r.status, 200, "GET {key} through node {id}");
            assert_same_body(&r.body, &body(i), key);
        }
    }
    // Root's replicas agree; the new group holds records on each of its replicas (every
    // node: the replication factor is 3).
    cluster.wait_same_digest(&cluster.ids(), Duration::from_secs(30));
    for id in cluster.ids() {
        let v = cluster.groups(id);
        let new = &v["groups"][1];
        assert_eq!(new["held"], true, "{v}");
        assert!(new["records"].as_u64().is_some_and(|r| r > 0), "{v}");
    }
    // Each node's folder, both groups together, is consistent with the disks: every
    // record's refs are the entries, parts and references in flight naming it.
    let mut cluster = cluster;
    for (id, run) in cluster.stop_quiet_and_fsck() {
        assert!(
            run.stdout.contains("fsck: 2 metadata groups held here"),
            "fsck of node {id}:\n{run}"
        );
        println!(
            "node {id}: {}",
            run.stdout.lines().rev().nth(1).unwrap_or("")
        );
    }
}
