//! Automatic splits under kill -9, with real processes on loopback (issue #28, failure
//! behaviour 2): three nodes with `--group-split-files 24` and `--group-split-objects 250`,
//! so that FileDB groups and the S3 index split by themselves again and again while client
//! threads PUT objects of many duplicate bodies and DELETE some, and a random node is
//! killed and restarted every few seconds (root's leader included, in the middle of
//! splits). In the end every
//! acknowledged PUT reads back byte-exact from every node, every acknowledged DELETE
//! stays deleted, an unacknowledged one is either, root's replicas agree, and `gateway
//! fsck` of every stopped node (all its groups together) is clean.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use e2e::cluster::{Cluster, ELECTION_TIMEOUT};
use e2e::{assert_same_body, env_number, poll_until, random_body};
use rand::{RngExt, SeedableRng};

const BUCKET: &str = "mail";
/// Consecutive keys of a client that share a body (and the same keys of the other
/// clients): every content is named by many objects, and new contents keep coming, so
/// that groups keep passing their size all through the run.
const KEYS_PER_BODY: u64 = 8;
/// FileDB records per group before it splits: small, so that the run crosses many splits.
const SPLIT_FILES: &str = "24";
/// Index entries per group before its keys split: small too, so that index splits run
/// under the kills beside the FileDB ones.
const SPLIT_OBJECTS: &str = "250";

fn body(b: u64) -> Vec<u8> {
    random_body(7_000 + b, 300 + (b % 97) as usize * 11)
}

/// What a client knows of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Known {
    /// Acknowledged with this body.
    Stored(u64),
    /// The PUT was not acknowledged: absent, or this body.
    Maybe(u64),
    /// The DELETE was acknowledged.
    Deleted,
    /// The DELETE was not acknowledged: absent, or this body.
    MaybeDeleted(u64),
}

/// The map's version, and its FileDB and index groups, through node `id`.
fn groups_version(cluster: &Cluster, id: usize) -> Option<(u64, usize, usize)> {
    let run = cluster.admin_cli(id, &["groups", "list"]);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).ok()?;
    let groups = v["groups"].as_array()?;
    let of_kind = |kind: &str| groups.iter().filter(|g| g["kind"] == kind).count();
    Some((v["version"].as_u64()?, of_kind("filedb"), of_kind("index")))
}

#[test]
fn filedb_groups_split_by_themselves_through_kill9_and_nothing_acknowledged_is_lost() {
    let cycles = env_number("GROUPS_CRASH_CYCLES").unwrap_or(5) as usize;
    let seed = env_number("GROUPS_CRASH_SEED").unwrap_or_else(|| rand::rng().random());
    println!("{cycles} kill cycles, seed {seed} (GROUPS_CRASH_SEED to replay)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut cluster = Cluster::start(
        3,
        &[
            "--group-split-files",
            SPLIT_FILES,
            "--group-split-objects",
            SPLIT_OBJECTS,
            "--snapshot-logs",
            "16",
        ],
    );
    cluster.create_bucket(1, BUCKET);

    let model: Arc<Mutex<BTreeMap<String, Known>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (1..=3usize)
        .map(|id| {
            let (remote, stop, model) = (cluster.remote(id), stop.clone(), model.clone());
            thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) && n < 20_000 {
                    let i = n / KEYS_PER_BODY;
                    let key = format!("k{id}-{n}");
                    let acked =
                        matches!(remote.put(BUCKET, &key, &body(i)), Ok(r) if r.status == 200);
                    let known = if acked {
                        Known::Stored(i)
                    } else {
                        Known::Maybe(i)
                    };
                    model.lock().unwrap().insert(key.clone(), known);
                    // Every third key is deleted again.
                    if acked && n.is_multiple_of(3) {
                        let deleted =
                            matches!(remote.delete(BUCKET, &key), Ok(r) if r.status == 204);
                        let known = if deleted {
                            Known::Deleted
                        } else {
                            Known::MaybeDeleted(i)
                        };
                        model.lock().unwrap().insert(key, known);
                    }
                    n += 1;
                    if !acked {
                        thread::sleep(Duration::from_millis(100));
                    }
                }
            })
        })
        .collect();

    for cycle in 1..=cycles {
        thread::sleep(Duration::from_millis(rng.random_range(1_500..3_500)));
        let victim = rng.random_range(1..=cluster.size());
        let was_leader = cluster.leader() == Some(victim);
        cluster.kill9(victim);
        thread::sleep(Duration::from_millis(rng.random_range(0..1_000)));
        cluster.restart(victim);
        let leader = cluster.wait_leader(ELECTION_TIMEOUT * 2);
        let groups = groups_version(&cluster, leader);
        println!(
            "cycle {cycle}: kill -9 node {victim}{}, restarted; leader {leader}; map (version, FileDB groups, index groups) {groups:?}",
            if was_leader { " (root's leader)" } else { "" }
        );
    }
    thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().expect("client thread");
    }
    let model = model.lock().unwrap().clone();
    let acked = model
        .values()
        .filter(|k| matches!(k, Known::Stored(_) | Known::Deleted))
        .count();
    // Splits under way finish: every node on the same map, no plan left.
    let settled = poll_until(Duration::from_secs(60), || {
        let versions: Vec<_> = cluster
            .ids()
            .iter()
            .map(|&id| groups_version(&cluster, id))
            .collect();
        versions.iter().all(|v| v.is_some() && *v == versions[0])
    });
    assert!(
        settled,
        "the nodes do not agree on the map:\n{}",
        cluster.describe()
    );
    let (version, filedb, index) = groups_version(&cluster, 1).expect("groups list");
    println!(
        "{} keys written, {acked} acknowledged; the map reached version {version} with \
         {filedb} FileDB and {index} index groups",
        model.len()
    );
    // Splits of both kinds crossed under the kills (one at a time: the index splits take
    // turns with the FileDB ones).
    assert!(
        filedb >= 1 && index >= 1,
        "too few splits crossed: {filedb} FileDB and {index} index groups"
    );

    for (key, known) in &model {
        for id in cluster.ids() {
            let r = cluster.remote(id).get(BUCKET, key).expect("GET");
            match *known {
                Known::Stored(i) => {
                    assert_eq!(r.status, 200, "GET {key} through node {id}: {}", r.text());
                    assert_same_body(&r.body, &body(i), key);
                }
                Known::Deleted => {
                    assert_eq!(
                        r.status, 404,
                        "GET {key} after its delete through node {id}"
                    )
                }
                Known::Maybe(i) | Known::MaybeDeleted(i) => match r.status {
                    200 => assert_same_body(&r.body, &body(i), key),
                    404 => {}
                    s => panic!("GET {key} through node {id}: {s} {}", r.text()),
                },
            }
        }
    }
    let audit = cluster.assert_audit_clean(1, false);
    println!(
        "audit: {} contents, {} references ({} in flight), clean",
        audit["contents"], audit["references"], audit["in_flight"]
    );
    cluster.wait_same_digest(&cluster.ids(), Duration::from_secs(60));
    cluster.wait_groups_quiet(Duration::from_secs(60));
    cluster.stop_all();
    for id in cluster.ids() {
        let run = cluster.fsck(id);
        if !run.stdout.contains("fsck: clean") {
            let logs: Vec<String> = cluster
                .ids()
                .iter()
                .map(|&n| cluster.node(n).log_tail(60))
                .collect();
            panic!("fsck of node {id}:\n{run}\n{}", logs.join("\n"));
        }
        println!(
            "node {id}: {}",
            run.stdout.lines().rev().nth(1).unwrap_or("")
        );
    }
}
