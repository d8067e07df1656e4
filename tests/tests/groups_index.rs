//! Splitting an index group while a cluster serves S3, with real processes on loopback
//! (issue #28): three nodes; `gateway admin groups split 0 --index mail/during/2` gives the
//! keys of bucket `mail` from `during/2` on to a new index group while client threads
//! write and read through every node (node 1's writes land in root, nodes 2 and 3's in the
//! new group). Then, on both sides of the split:
//! - every acknowledged object reads back from every node, and listings walk both groups;
//! - a lifecycle rule set after the split expires exactly the matching keys in root and in
//!   the new group (each group's leader sweeps its own keys, by the rules root copied to
//!   it);
//! - a bulk-delete job over keys on both sides of the split deletes exactly them (fenced
//!   in the new group, each page deleted in the group owning its keys);
//! - the audit is clean, and `gateway fsck` of every node (each holds both groups) compares
//!   every content's references and finds the folder clean.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use aws_sdk_s3::types::{
    BucketLifecycleConfiguration, ExpirationStatus, LifecycleExpiration, LifecycleRule,
    LifecycleRuleFilter,
};
use e2e::cluster::{Cluster, ELECTION_TIMEOUT};
use e2e::{assert_same_body, poll_until, random_body};

const BUCKET: &str = "mail";
/// Distinct bodies: objects share their contents.
const BODIES: u64 = 24;
/// How long the committed split may take to show on every node.
const SPLIT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the expiry may take once the rules are set (lifecycle days of 1 s, a pass a
/// second on each group's leader).
const EXPIRY_TIMEOUT: Duration = Duration::from_secs(60);

fn body(i: u64) -> Vec<u8> {
    random_body(i % BODIES, 700 + (i % BODIES) as usize * 53)
}

/// The lifecycle rules: `a/tmp/` (root's keys) and `z/tmp/` (the new group's) expire a
/// lifecycle day after they were written.
fn set_rules(cluster: &Cluster, id: usize) {
    let rule = |id: &str, prefix: &str| {
        LifecycleRule::builder()
            .id(id)
            .filter(LifecycleRuleFilter::builder().prefix(prefix).build())
            .status(ExpirationStatus::Enabled)
            .expiration(LifecycleExpiration::builder().days(1).build())
            .build()
            .expect("rule")
    };
    let config = BucketLifecycleConfiguration::builder()
        .rules(rule("root-side", "a/tmp/"))
        .rules(rule("new-side", "z/tmp/"))
        .build()
        .expect("lifecycle configuration");
    let s3 = cluster.client(id);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(
        s3.put_bucket_lifecycle_configuration()
            .bucket(BUCKET)
            .lifecycle_configuration(config)
            .send(),
    )
    .expect("PutBucketLifecycleConfiguration");
}

/// Every node lists exactly `all` in the bucket, across its groups.
fn assert_every_node_lists(cluster: &Cluster, all: &BTreeSet<String>) {
    for id in cluster.ids() {
        let listed: BTreeSet<String> = cluster
            .remote(id)
            .list_keys(BUCKET)
            .expect("ListObjectsV2")
            .into_iter()
            .collect();
        assert_eq!(&listed, all, "the listing through node {id}");
    }
}

#[test]
fn an_index_group_splits_under_s3_traffic_and_each_side_expires_its_own_keys() {
    let cluster = Cluster::start(3, &["--snapshot-logs", "16", "--lifecycle-day-secs", "1"]);
    cluster.create_bucket(1, BUCKET);
    let acked: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let put = |key: String, i: u64| {
        let id = (i % 3) as usize + 1;
        cluster
            .put_until_ok(id, BUCKET, &key, &body(i), ELECTION_TIMEOUT)
            .unwrap_or_else(|e| panic!("PUT {key}: {e}"));
        acked.lock().unwrap().insert(key, i);
    };
    for i in 0..60u64 {
        put(format!("before/{i}"), i);
    }

    // Writers and readers through every node while the split runs.
    let stop = Arc::new(AtomicBool::new(false));
    let clients = cluster.put_get_clients(BUCKET, 60, body, &acked, &stop);
    thread::sleep(Duration::from_millis(500));

    let planned = cluster.split_and_wait(
        2,
        &["0", "--index", "mail/during/2"],
        "index",
        SPLIT_TIMEOUT,
    );
    assert_eq!(planned["version"], 2, "{planned}");
    assert_eq!(planned["group"], 1, "{planned}");
    thread::sleep(Duration::from_millis(500));
    let slowest = clients.finish();
    let v = cluster.groups(1);
    assert_eq!(
        v["groups"][1]["index"],
        serde_json::json!([{"start": {"bucket": "mail", "key": "during/2"},
                            "end": null}]),
        "{v:#}"
    );

    // Objects on both sides of the split, for the lifecycle rules set below.
    for i in 0..40u64 {
        let side = if i % 2 == 0 { "a" } else { "z" };
        let kind = if i % 4 < 2 { "tmp" } else { "keep" };
        put(format!("{side}/{kind}/{i}"), i);
    }
    let acked = acked.lock().unwrap().clone();
    let during = acked.keys().filter(|k| k.starts_with("during/")).count();
    let moved = acked
        .keys()
        .filter(|k| k.as_str() >= "during/2" && k.starts_with("during/"))
        .count();
    println!(
        "{} objects acknowledged, {during} during the split ({moved} of them in the new \
         group's keys); the slowest PUT+GET round during the split took {slowest:?}",
        acked.len()
    );
    assert!(moved > 0, "no write reached the new group's keys");

    // Every acknowledged object reads back from every node, and each node lists exactly
    // the acknowledged keys, across both groups.
    cluster.assert_all_read_back(BUCKET, &acked, body);
    let all: BTreeSet<String> = acked.keys().cloned().collect();
    assert_every_node_lists(&cluster, &all);

    // A bulk-delete job over keys on both sides of the split (`during/0...` in root,
    // `during/2...` in the new group), started through node 3: fenced in the new group,
    // it deletes every one of them, and nothing else.
    let run = cluster.admin_cli(3, &["jobs", "delete-prefix", BUCKET, "during/"]);
    assert_eq!(run.code, Some(0), "a job on a split bucket: {run}");
    let id = run
        .stdout
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_default()
        .to_string();
    let watched = cluster.admin_cli(1, &["jobs", "status", &id, "--watch"]);
    let end: Vec<&str> = watched
        .stdout
        .lines()
        .nth(1)
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    assert_eq!(
        (end.get(1).copied(), end.get(3).copied()),
        (Some("done"), Some(during.to_string().as_str())),
        "job {id}: {watched}"
    );
    let acked: BTreeMap<String, u64> = acked
        .into_iter()
        .filter(|(k, _)| !k.starts_with("during/"))
        .collect();
    let all: BTreeSet<String> = acked.keys().cloned().collect();
    assert_every_node_lists(&cluster, &all);
    println!("job {id} deleted the {during} keys under during/ across both groups");

    // The rules reach the new group; each side expires exactly its matching keys.
    set_rules(&cluster, 2);
    let expiring: BTreeSet<String> = all
        .iter()
        .filter(|k| k.contains("/tmp/"))
        .cloned()
        .collect();
    assert_eq!(expiring.len(), 20);
    let left: BTreeSet<String> = all.difference(&expiring).cloned().collect();
    let expired = poll_until(EXPIRY_TIMEOUT, || {
        cluster.ids().iter().all(|&id| {
            cluster
                .remote(id)
                .list_keys(BUCKET)
                .is_ok_and(|keys| keys.into_iter().collect::<BTreeSet<_>>() == left)
        })
    });
    assert!(
        expired,
        "the expiry did not end with exactly the other keys listed:\n{}",
        cluster.describe()
    );
    for id in cluster.ids() {
        for key in &expiring {
            let r = cluster.remote(id).get(BUCKET, key).expect("GET");
            assert_eq!(
                r.status, 404,
                "GET {key} through node {id} after its expiry"
            );
        }
    }
    let kept: BTreeMap<String, u64> = acked
        .iter()
        .filter(|(k, _)| left.contains(*k))
        .map(|(k, i)| (k.clone(), *i))
        .collect();
    cluster.assert_all_read_back(BUCKET, &kept, body);
    for (key, &i) in kept.iter().filter(|(k, _)| k.contains("/keep/")) {
        let r = cluster.remote(1).get(BUCKET, key).expect("GET");
        assert_same_body(&r.body, &body(i), key);
    }

    // The references agree across both groups, and each node's folder (both groups)
    // is consistent with the disks, every content's references compared.
    cluster.assert_audit_clean(1, true);
    let mut cluster = cluster;
    for (id, run) in cluster.stop_quiet_and_fsck() {
        assert!(
            run.stdout.contains("fsck: 2 metadata groups held here"),
            "fsck of node {id}:\n{run}"
        );
        assert!(
            !run.stdout.contains("references not compared"),
            "fsck of node {id} holds every index group:\n{run}"
        );
        println!(
            "node {id}: {}",
            run.stdout.lines().rev().nth(1).unwrap_or("")
        );
    }
}

/// `--group-split-objects 40`: root, past 40 index entries, splits its keys by itself
/// while objects are written through every node; the keys from where root's objects
/// halved on belong to a new index group, and every object reads back and lists exactly
/// through every node.
#[test]
fn root_past_its_index_size_splits_its_keys_by_itself() {
    let cluster = Cluster::start(3, &["--group-split-objects", "40"]);
    cluster.create_bucket(1, BUCKET);
    let mut acked = BTreeMap::new();
    for i in 0..80u64 {
        let key = format!("k/{i:03}");
        let id = (i % 3) as usize + 1;
        cluster
            .put_until_ok(id, BUCKET, &key, &body(i), ELECTION_TIMEOUT)
            .unwrap_or_else(|e| panic!("PUT {key}: {e}"));
        acked.insert(key, i);
    }
    let split = poll_until(SPLIT_TIMEOUT, || {
        let v = cluster.groups(1);
        v["groups"]
            .as_array()
            .is_some_and(|g| g.iter().any(|g| g["kind"] == "index"))
    });
    assert!(
        split,
        "no index group after 80 objects:\n{}",
        cluster.describe()
    );
    let v = cluster.groups(1);
    let index: Vec<&serde_json::Value> = v["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| g["kind"] == "index")
        .collect();
    assert_eq!(index.len(), 1, "one split, not more: {v:#}");
    let start = &index[0]["index"][0]["start"];
    assert_eq!(start["bucket"], BUCKET, "{v:#}");
    let at = start["key"].as_str().unwrap_or_default();
    assert!(at > "k/000" && at <= "k/079", "split at {at}: {v:#}");
    println!("root split its keys at {BUCKET}/{at}");
    cluster.assert_all_read_back(BUCKET, &acked, body);
    let all: BTreeSet<String> = acked.keys().cloned().collect();
    assert_every_node_lists(&cluster, &all);
}
