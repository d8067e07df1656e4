//! A replicated cluster of three real gateway processes (one Raft group, shared disk pairs):
//! every node serves every request, acknowledged writes survive the loss of the leader
//! (`kill -9`, SIGSTOP), nothing is served or acknowledged without a quorum, a follower
//! with an empty data folder is rebuilt from a snapshot, replicas converge to identical
//! metadata after a crash loop, and node-to-node RPCs need the cluster secret.
//!
//! Each test starts its own cluster on random 127.0.0.1 ports and temp folders (see
//! `e2e::cluster`; the clusters run one at a time). `CLUSTER_CRASH_CYCLES` (default 8) sets
//! the length of the crash loop, `CLUSTER_CRASH_SEED` its random seed (printed),
//! `CLUSTER_KEEP_DIR=1` keeps the folders of a failed test.
//!
//! Run: `cargo build -p gateway && cargo test -p e2e --test cluster -- --nocapture`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use aws_sdk_s3::Client;
use e2e::cluster::{
    ADMIN_TIMEOUT, CATCH_UP_TIMEOUT, CLUSTER_SECRET_HEADER, Cluster, ClusterStatus,
    ELECTION_TIMEOUT, REQUEST_TIMEOUT, is_unavailable,
};
use e2e::torture::{self, StopOnDrop};
use e2e::{
    Remote, assert_same_body, etag_of, get_bytes, poll_until, put_bytes, random_body, random_token,
    s3_error,
};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

const BUCKET: &str = "bkt";
/// Bound on "the leader is gone" -> "a new leader acknowledged a write".
const FAILOVER_BOUND: Duration = Duration::from_secs(20);
/// Bound on the answer to a request sent to a node without a quorum.
const NO_QUORUM_ANSWER_BOUND: Duration = Duration::from_secs(30);
/// The gateway's bound on a read-index round, retries included
/// (`meta::raft::barrier::ROUND_BUDGET`): a read answers 503 only after it.
const READ_ROUND_BUDGET: Duration = Duration::from_secs(8);
/// How long client threads may take to show progress (acknowledged operations).
const PROGRESS_TIMEOUT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------
// Reads and writes that must succeed on a healthy cluster.
// ---------------------------------------------------------------------------------------

/// What a read of a key must find.
#[derive(Debug, Clone, Copy)]
enum Want<'a> {
    /// Exactly this body.
    Body(&'a [u8]),
    /// No such key.
    Absent,
    /// No such key, or one of these bodies (a key whose last operation was not
    /// acknowledged).
    AbsentOrOneOf(&'a [&'a [u8]]),
}

/// Reads `key` through `remote` and panics unless it is what `want` says.
#[track_caller]
fn check(remote: &Remote, node: usize, key: &str, want: Want<'_>) {
    let got = torture::read(remote, BUCKET, key).unwrap_or_else(|e| panic!("node {node}: {e}"));
    match (want, got) {
        (Want::Body(b), Some(got)) => assert_same_body(&got, b, &format!("node {node}: {key}")),
        (Want::Body(b), None) => {
            panic!(
                "node {node}: acknowledged {key} ({} bytes) is missing",
                b.len()
            )
        }
        (Want::Absent, None) => {}
        (Want::Absent, Some(got)) => panic!(
            "node {node}: {key} should not exist (its delete was acknowledged or its write \
             refused), it has {} bytes",
            got.len()
        ),
        (Want::AbsentOrOneOf(_), None) => {}
        (Want::AbsentOrOneOf(bodies), Some(got)) => assert!(
            bodies.contains(&got.as_slice()),
            "node {node}: {key} has {} bytes (sha1 {}) that were never written to it",
            got.len(),
            e2e::sha1_hex(&got)
        ),
    }
}

/// PutObject through `remote` that must be acknowledged; a 503 or no answer is retried
/// (bounded by [`ELECTION_TIMEOUT`]: an election may be under way); panics otherwise.
#[track_caller]
fn put_ok(remote: &Remote, key: &str, body: &[u8]) {
    let deadline = Instant::now() + ELECTION_TIMEOUT;
    for attempt in 1.. {
        let last = match remote.put(BUCKET, key, body) {
            Ok(r) if r.status == 200 => return,
            Ok(r) if r.status == 503 => format!("503 {:?}", r.error_code()),
            Ok(r) => panic!(
                "PUT {key} on port {}: status {}: {}",
                remote.port,
                r.status,
                r.text()
            ),
            Err(e) => format!("no answer: {e}"),
        };
        assert!(
            Instant::now() < deadline,
            "PUT {key} on port {}: {attempt} attempts, the last: {last}",
            remote.port
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// DeleteObject through `remote` that must be acknowledged (204); a 503 or no answer is
/// retried (bounded by [`ELECTION_TIMEOUT`]); panics otherwise.
#[track_caller]
fn delete_ok(remote: &Remote, key: &str) {
    let deadline = Instant::now() + ELECTION_TIMEOUT;
    for attempt in 1.. {
        let last = match remote.delete(BUCKET, key) {
            Ok(r) if r.status == 204 => return,
            Ok(r) if r.status == 503 => format!("503 {:?}", r.error_code()),
            Ok(r) => panic!(
                "DELETE {key} on port {}: status {}: {}",
                remote.port,
                r.status,
                r.text()
            ),
            Err(e) => format!("no answer: {e}"),
        };
        assert!(
            Instant::now() < deadline,
            "DELETE {key} on port {}: {attempt} attempts, the last: {last}",
            remote.port
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// Every key of the bucket listed through node `id`; panics on failure.
#[track_caller]
fn list(cluster: &Cluster, id: usize) -> Vec<String> {
    cluster
        .remote(id)
        .list_keys(BUCKET)
        .unwrap_or_else(|e| panic!("node {id}: {e}"))
}

/// Polls node `id`'s status (bounded) until it names a leader other than itself and is not
/// a leader; returns that status.
#[track_caller]
fn wait_stepped_down(cluster: &Cluster, id: usize, limit: Duration) -> ClusterStatus {
    let mut last = Err("not asked yet".to_string());
    let ok = poll_until(limit, || {
        last = cluster.status(id);
        matches!(&last, Ok(st) if st.state != "Leader" && st.leader.is_some_and(|l| l != id as u64))
    });
    assert!(
        ok,
        "node {id} did not step down within {limit:?}; its last status: {last:?}\n{}",
        cluster.describe()
    );
    last.expect("checked above")
}

// ---------------------------------------------------------------------------------------
// 1. Every node serves every request.
// ---------------------------------------------------------------------------------------

async fn list_all_keys(s3: &Client) -> Vec<String> {
    let mut keys = Vec::new();
    let mut token = None;
    for page in 0.. {
        assert!(page < 100, "listing did not end");
        let out = s3
            .list_objects_v2()
            .bucket(BUCKET)
            .set_continuation_token(token)
            .send()
            .await
            .expect("ListObjectsV2");
        keys.extend(
            out.contents()
                .iter()
                .filter_map(|o| o.key().map(String::from)),
        );
        match out.next_continuation_token() {
            Some(t) if out.is_truncated() == Some(true) => token = Some(t.to_string()),
            _ => break,
        }
    }
    keys
}

/// A bucket created while a follower was paused takes a PUT through that follower as soon
/// as it resumes, before it has applied the bucket: a node looks a bucket it lacks up
/// through the leader before it refuses a write.
#[tokio::test]
async fn a_follower_that_lags_does_not_refuse_a_put_into_a_new_bucket() {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(ELECTION_TIMEOUT);
    let lagging = cluster
        .ids()
        .into_iter()
        .find(|&id| id != leader)
        .expect("a follower");
    let s3 = cluster.client(lagging);
    for i in 0..5 {
        let bucket = format!("fresh-{i}");
        cluster.pause(lagging);
        cluster.create_bucket(leader, &bucket);
        cluster.resume(lagging);
        // At once: the leader's next append reaches the follower within a heartbeat.
        put_bytes(&s3, &bucket, "k", b"first write").await;
        assert_eq!(get_bytes(&s3, &bucket, "k").await, b"first write");
    }
}

#[tokio::test]
async fn writes_through_every_node_are_readable_from_every_node() {
    let cluster = Cluster::start(3, &[]);
    cluster.create_bucket(1, BUCKET);
    let clients: Vec<(usize, Client)> = cluster
        .ids()
        .into_iter()
        .map(|id| (id, cluster.client(id)))
        .collect();

    // Bodies shared by every node (dedup across writers), one empty body, one above 1 MiB.
    let shared_a = random_body(101, 100_000);
    let shared_b = random_body(102, 3_000);
    let mut want: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (n, (id, s3)) in clients.iter().enumerate() {
        for j in 0..6u64 {
            let key = format!("from-node{id}/obj-{j}");
            let body = match j {
                0 => shared_a.clone(),
                1 => shared_b.clone(),
                2 if *id == 1 => Vec::new(),
                3 => random_body(1000 + 10 * *id as u64 + j, 1_500_000),
                _ => random_body(1000 + 10 * *id as u64 + j, 20_000 * j as usize),
            };
            put_bytes(s3, BUCKET, &key, &body).await;
            // Linearizable reads: visible at once through another node.
            let (other, s3_other) = &clients[(n + 1) % clients.len()];
            assert_same_body(
                &get_bytes(s3_other, BUCKET, &key).await,
                &body,
                &format!("{key} written through node {id}, read at once through node {other}"),
            );
            want.insert(key, body);
        }
    }

    let want_keys: Vec<String> = want.keys().cloned().collect();
    for (id, s3) in &clients {
        for (key, body) in &want {
            assert_same_body(
                &get_bytes(s3, BUCKET, key).await,
                body,
                &format!("node {id}: {key}"),
            );
            let head = s3
                .head_object()
                .bucket(BUCKET)
                .key(key)
                .send()
                .await
                .unwrap_or_else(|e| panic!("node {id}: HeadObject {key}: {e:?}"));
            assert_eq!(
                head.e_tag(),
                Some(etag_of(body).as_str()),
                "node {id}: {key}"
            );
            assert_eq!(
                head.content_length(),
                Some(body.len() as i64),
                "node {id}: {key}"
            );
        }
        assert_eq!(list_all_keys(s3).await, want_keys, "LIST through node {id}");
    }

    // An overwrite through node 2 and a delete through node 3 are seen at once everywhere.
    let overwritten = "from-node1/obj-4";
    let new_body = random_body(2000, 33_333);
    put_bytes(&clients[1].1, BUCKET, overwritten, &new_body).await;
    want.insert(overwritten.to_string(), new_body.clone());
    let deleted = "from-node2/obj-5";
    clients[2]
        .1
        .delete_object()
        .bucket(BUCKET)
        .key(deleted)
        .send()
        .await
        .expect("DeleteObject through node 3");
    want.remove(deleted);
    let want_keys: Vec<String> = want.keys().cloned().collect();
    for (id, s3) in &clients {
        assert_same_body(
            &get_bytes(s3, BUCKET, overwritten).await,
            &new_body,
            &format!("node {id}: overwritten {overwritten}"),
        );
        let (status, code) = s3_error(s3.get_object().bucket(BUCKET).key(deleted).send().await);
        assert_eq!(
            (status, code.as_str()),
            (404, "NoSuchKey"),
            "node {id}: {deleted}"
        );
        assert_eq!(list_all_keys(s3).await, want_keys, "LIST through node {id}");
    }

    // Every node names the same leader and the full membership, through the admin API and
    // through the CLI.
    let leader = cluster.wait_leader(ELECTION_TIMEOUT);
    for id in cluster.ids() {
        let run = cluster.admin_cli(id, &["cluster", "status"]);
        assert_eq!(
            run.code,
            Some(0),
            "gateway admin cluster status, node {id}:\n{run}"
        );
        let st = ClusterStatus::parse(&run.stdout)
            .unwrap_or_else(|e| panic!("node {id}: the CLI did not print the status JSON: {e}"));
        assert_eq!(st.node_id, id as u64, "{st:?}");
        assert_eq!(st.members, vec![1, 2, 3], "{st:?}");
        assert!(st.learners.is_empty(), "{st:?}");
        assert_eq!(st.leader, Some(leader as u64), "{st:?}");
    }

    // The three replicas of the metadata are identical.
    let d = cluster.wait_same_digest(&cluster.ids(), CATCH_UP_TIMEOUT);
    println!(
        "converged at last_applied {}: {:?}",
        d.last_applied, d.tables
    );

    // One metadata group (the root, owning every sha1 and every key) on the three nodes,
    // each holding every record: the same figure through every node, from the CLI.
    let mut records = Vec::new();
    for id in cluster.ids() {
        let run = cluster.admin_cli(id, &["groups", "list"]);
        assert_eq!(
            run.code,
            Some(0),
            "gateway admin groups list, node {id}:\n{run}"
        );
        let v: serde_json::Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("node {id}: groups list is not JSON ({e}):\n{run}"));
        let groups = v["groups"].as_array().expect("a groups list");
        assert_eq!(groups.len(), 1, "node {id}: {v}");
        let g = &groups[0];
        assert_eq!(g["id"], 0, "node {id}: {g}");
        assert_eq!(g["kind"], "root", "node {id}: {g}");
        assert_eq!(g["leader"], leader as u64, "node {id}: {g}");
        assert_eq!(
            g["replicas"],
            serde_json::json!([1, 2, 3]),
            "node {id}: {g}"
        );
        assert_eq!(g["filedb"][0]["start"], "0".repeat(40), "node {id}: {g}");
        assert!(g["filedb"][0]["end"].is_null(), "node {id}: {g}");
        assert_eq!(
            g["index"][0]["start"],
            serde_json::json!({"bucket": "", "key": ""})
        );
        records.push(g["records"].as_u64().expect("records"));
    }
    assert!(records[0] > 0, "{records:?}");
    assert!(records.iter().all(|r| *r == records[0]), "{records:?}");
}

// ---------------------------------------------------------------------------------------
// 2. kill -9 of the leader under a stream of writes.
// ---------------------------------------------------------------------------------------

/// What one client thread of a write stream saw. Each PUT writes a key of its own; only
/// this thread deletes that key, and only after its PUT was acknowledged, so the last
/// acknowledged operation on a key is unambiguous.
#[derive(Default)]
struct Journal {
    /// Acknowledged PUTs not deleted since: key -> body.
    present: BTreeMap<String, Vec<u8>>,
    /// Acknowledged DELETEs (of an acknowledged PUT).
    deleted: BTreeSet<String>,
    /// Keys whose last operation failed: absent, or this body.
    uncertain: BTreeMap<String, Vec<u8>>,
    puts_acked: usize,
    deletes_acked: usize,
    failures: usize,
}

impl Journal {
    fn merge(&mut self, other: Journal) {
        self.present.extend(other.present);
        self.deleted.extend(other.deleted);
        self.uncertain.extend(other.uncertain);
        self.puts_acked += other.puts_acked;
        self.deletes_acked += other.deletes_acked;
        self.failures += other.failures;
    }

    /// Reads every key through node `id`.
    #[track_caller]
    fn verify(&self, cluster: &Cluster, id: usize) {
        let remote = cluster.remote(id);
        for (key, body) in &self.present {
            check(&remote, id, key, Want::Body(body));
        }
        for key in &self.deleted {
            check(&remote, id, key, Want::Absent);
        }
        for (key, body) in &self.uncertain {
            check(&remote, id, key, Want::AbsentOrOneOf(&[body.as_slice()]));
        }
    }
}

/// One client thread: PUTs of fresh keys and DELETEs of its acknowledged keys, through
/// `remotes[first]` and, after each failure, through the next node; until `stop`.
fn write_stream(
    thread_no: usize,
    remotes: Vec<Remote>,
    first: usize,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
) -> Journal {
    let mut rng = StdRng::seed_from_u64(0x5EED_0000 + thread_no as u64);
    let shared: Vec<Vec<u8>> = (0..3).map(|i| random_body(300 + i, 4096)).collect();
    let mut j = Journal::default();
    let mut node = first;
    // Bounded in count as well as by `stop`.
    for i in 0..100_000u64 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let remote = &remotes[node];
        let ok = if !j.present.is_empty() && rng.random_bool(0.25) {
            let pick = rng.random_range(0..j.present.len());
            let key = j.present.keys().nth(pick).expect("in range").clone();
            let body = j.present.remove(&key).expect("present");
            match remote.delete(BUCKET, &key) {
                Ok(r) if r.status == 204 => {
                    j.deleted.insert(key);
                    j.deletes_acked += 1;
                    true
                }
                _ => {
                    j.uncertain.insert(key, body);
                    false
                }
            }
        } else {
            let key = format!("t{thread_no}/k{i:05}");
            let body = if rng.random_bool(0.3) {
                shared[rng.random_range(0..shared.len())].clone()
            } else {
                let len = rng.random_range(1..64 * 1024);
                random_body(rng.random(), len)
            };
            match remote.put(BUCKET, &key, &body) {
                Ok(r) if r.status == 200 => {
                    j.present.insert(key, body);
                    j.puts_acked += 1;
                    true
                }
                _ => {
                    j.uncertain.insert(key, body);
                    false
                }
            }
        };
        if ok {
            acked.fetch_add(1, Ordering::Relaxed);
        } else {
            j.failures += 1;
            node = (node + 1) % remotes.len();
            // Not a wait for a condition: keeps a client from spinning on a dead node.
            thread::sleep(Duration::from_millis(50));
        }
    }
    j
}

#[test]
fn leader_kill9_mid_stream_loses_no_acknowledged_write() {
    let mut cluster = Cluster::start(3, &[]);
    cluster.create_bucket(1, BUCKET);
    let leader = cluster.wait_leader(ELECTION_TIMEOUT);
    let term_before = cluster.status(leader).expect("leader status").term;
    let remotes: Vec<Remote> = cluster.ids().iter().map(|&id| cluster.remote(id)).collect();

    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..4)
        .map(|t| {
            let (remotes, stop, acked) = (remotes.clone(), stop.clone(), acked.clone());
            // Threads start on nodes 1, 2, 3, 1: the leader and both followers.
            thread::spawn(move || write_stream(t, remotes, t % 3, stop, acked))
        })
        .collect();

    let _stop_on_panic = StopOnDrop(stop.clone());
    let progressed = poll_until(PROGRESS_TIMEOUT, || acked.load(Ordering::Relaxed) >= 40);
    assert!(
        progressed,
        "only {} operations acknowledged in {PROGRESS_TIMEOUT:?} before the kill",
        acked.load(Ordering::Relaxed)
    );
    let acked_before_kill = acked.load(Ordering::Relaxed);
    let killed_at = Instant::now();
    cluster.kill9(leader);
    let survivors = cluster.ids_except(&[leader]);

    // Time until a new leader acknowledges a write.
    let new_leader = cluster
        .try_wait_leader_among(&survivors, FAILOVER_BOUND)
        .unwrap_or_else(|last| panic!("no new leader within {FAILOVER_BOUND:?}:\n{last}"));
    cluster
        .put_until_ok(
            new_leader,
            BUCKET,
            "failover-probe",
            b"probe",
            FAILOVER_BOUND.saturating_sub(killed_at.elapsed()),
        )
        .unwrap_or_else(|e| panic!("the new leader {new_leader} acknowledged no write: {e}"));
    let failover = killed_at.elapsed();
    println!(
        "failover: node {new_leader} acknowledged a write {failover:?} after kill -9 of node {leader}"
    );
    assert!(failover < FAILOVER_BOUND, "failover took {failover:?}");
    let st = cluster.status(new_leader).expect("new leader status");
    assert!(
        st.term > term_before,
        "a new leader in the same term: {st:?}"
    );

    // The stream goes on with two nodes.
    let acked_at_failover = acked.load(Ordering::Relaxed);
    let progressed = poll_until(PROGRESS_TIMEOUT, || {
        acked.load(Ordering::Relaxed) >= acked_at_failover + 40
    });
    stop.store(true, Ordering::Relaxed);
    let mut journal = Journal::default();
    for c in clients {
        journal.merge(c.join().expect("client thread panicked"));
    }
    assert!(
        progressed,
        "only {} operations acknowledged in {PROGRESS_TIMEOUT:?} after the failover",
        acked.load(Ordering::Relaxed) - acked_at_failover
    );
    println!(
        "stream: {} PUTs and {} DELETEs acknowledged ({acked_before_kill} before the kill), {} failed",
        journal.puts_acked, journal.deletes_acked, journal.failures
    );
    assert!(
        journal.deletes_acked > 0,
        "the stream acknowledged no DELETE"
    );

    for &id in &survivors {
        journal.verify(&cluster, id);
        check(
            &cluster.remote(id),
            id,
            "failover-probe",
            Want::Body(b"probe"),
        );
    }

    // The killed leader comes back, catches up and serves the same data.
    cluster.restart(leader);
    let d = cluster.wait_same_digest(&cluster.ids(), CATCH_UP_TIMEOUT);
    println!("node {leader} caught up at last_applied {}", d.last_applied);
    journal.verify(&cluster, leader);
    check(
        &cluster.remote(leader),
        leader,
        "failover-probe",
        Want::Body(b"probe"),
    );
}

/// A leader killed right after acknowledging a write and restarted before the others
/// elect anyone comes back as leader of the same term, with a saved commit index that may
/// predate that write. Its first read must still see the write (the read index covers its
/// whole log, not only the commit index it remembers).
#[test]
fn a_leader_restarted_at_once_reads_its_last_acknowledged_write() {
    let mut cluster = Cluster::start(3, &[]);
    cluster.create_bucket(1, BUCKET);
    let mut same_leader_rounds = 0;
    for round in 0..6 {
        let leader = cluster.wait_leader(ELECTION_TIMEOUT);
        let key = format!("last-{round}");
        let body = random_body(9_000 + round, 3_000);
        put_ok(&cluster.remote(leader), &key, &body);
        // No other write follows: nothing makes the commit index durable before the kill.
        cluster.kill9(leader);
        cluster.restart(leader);
        check(&cluster.remote(leader), leader, &key, Want::Body(&body));
        if cluster.leader() == Some(leader) {
            same_leader_rounds += 1;
        }
    }
    println!("{same_leader_rounds} of 6 rounds read through a leader restarted in its own term");
    let d = cluster.wait_same_digest(&cluster.ids(), CATCH_UP_TIMEOUT);
    for id in cluster.ids() {
        for round in 0..6 {
            let body = random_body(9_000 + round, 3_000);
            check(
                &cluster.remote(id),
                id,
                &format!("last-{round}"),
                Want::Body(&body),
            );
        }
    }
    println!("converged at last_applied {}", d.last_applied);
}

// ---------------------------------------------------------------------------------------
// 3. A frozen leader (SIGSTOP) is replaced and, once thawed, serves nothing stale.
// ---------------------------------------------------------------------------------------

#[test]
fn paused_leader_steps_down_and_acknowledges_nothing_stale() {
    let mut cluster = Cluster::start(3, &[]);
    cluster.create_bucket(1, BUCKET);
    let old = cluster.wait_leader(ELECTION_TIMEOUT);
    let old_term = cluster.status(old).expect("leader status").term;
    let survivors = cluster.ids_except(&[old]);
    let before = random_body(3000, 10_000);
    put_ok(&cluster.remote(old), "before-pause", &before);

    cluster.pause(old);
    // A PUT sent to the frozen leader: the kernel accepts the connection, the request
    // waits until SIGCONT. Its socket timeout outlasts the pause.
    let stale_body = random_body(3001, 20_000);
    let stale_client = {
        let (remote, body) = (cluster.remote(old), stale_body.clone());
        thread::spawn(move || {
            remote
                .signed("PUT", &format!("/{BUCKET}/sent-to-paused-leader"))
                .body(&body)
                .timeout(Duration::from_secs(120))
                .try_send()
        })
    };

    // Reads through the survivors while they have no leader: each waits for the election
    // and is answered by the new leader's read index. A 503 is the answer only once the
    // gateway's bound on a read-index round (`meta::raft::barrier::ROUND_BUDGET`, 8 s) is
    // spent, never for the leader change itself.
    let readers: Vec<_> = survivors
        .iter()
        .map(|&id| {
            let remote = cluster.remote(id);
            thread::spawn(move || {
                let start = Instant::now();
                let r = remote
                    .signed("GET", &format!("/{BUCKET}/before-pause"))
                    .timeout(Duration::from_secs(60))
                    .try_send();
                (id, r, start.elapsed())
            })
        })
        .collect();
    let paused_at = Instant::now();
    let new = cluster.wait_leader_among(&survivors, ELECTION_TIMEOUT);
    let st = cluster.status(new).expect("new leader status");
    assert!(
        st.term > old_term,
        "new leader {new} in the old term: {st:?}"
    );
    let mut during = Vec::new();
    for i in 0..10u64 {
        let key = format!("during-pause-{i}");
        let body = random_body(3100 + i, 5_000 + 1_000 * i as usize);
        put_ok(&cluster.remote(survivors[i as usize % 2]), &key, &body);
        during.push((key, body));
    }
    println!(
        "node {new} took over from the frozen node {old} and acknowledged 10 writes in {:?}",
        paused_at.elapsed()
    );
    for reader in readers {
        let (id, r, took) = reader.join().expect("reader thread panicked");
        match r {
            Ok(r) if r.status == 200 => {
                assert_same_body(
                    &r.body,
                    &before,
                    &format!("node {id}: GET during the pause"),
                );
                println!("GET through node {id} during the election: 200 after {took:?}");
            }
            Ok(r) => assert!(
                is_unavailable(&r) && took >= READ_ROUND_BUDGET,
                "GET through node {id} during the election: {} after {took:?} (want 200, or \
                 503 only after {READ_ROUND_BUDGET:?}): {}",
                r.status,
                r.text()
            ),
            Err(e) => panic!("GET through node {id} during the election: no answer: {e}"),
        }
    }

    cluster.resume(old);
    // Reads through the thawed node must see every write acknowledged while it was frozen:
    // a 404 here is a stale read served from its own old state.
    let thawed = cluster.remote(old);
    for (key, body) in &during {
        check(&thawed, old, key, Want::Body(body));
    }
    check(&thawed, old, "before-pause", Want::Body(&before));
    let st = wait_stepped_down(&cluster, old, ELECTION_TIMEOUT);
    println!("node {old} stepped down: {st:?}");

    // The request it received while frozen: failed, or acknowledged and then durable.
    let stale = stale_client.join().expect("stale client thread panicked");
    let stale_acked = matches!(&stale, Ok(r) if r.status == 200);
    println!(
        "PUT sent to the frozen leader: {}",
        match &stale {
            Ok(r) => format!("status {} {:?}", r.status, r.error_code()),
            Err(e) => format!("no answer: {e}"),
        }
    );
    let candidates = [stale_body.as_slice()];
    let want = if stale_acked {
        Want::Body(&stale_body)
    } else {
        Want::AbsentOrOneOf(&candidates)
    };
    for id in cluster.ids() {
        check(&cluster.remote(id), id, "sent-to-paused-leader", want);
    }

    // The old leader serves new writes (through the new leader) and every node sees them.
    let after = random_body(3200, 7_000);
    put_ok(&thawed, "after-resume", &after);
    for id in cluster.ids() {
        check(&cluster.remote(id), id, "after-resume", Want::Body(&after));
    }
    cluster.wait_leader(ELECTION_TIMEOUT);
    cluster.wait_same_digest(&cluster.ids(), CATCH_UP_TIMEOUT);
}

// ---------------------------------------------------------------------------------------
// 4. Without a quorum, nothing is served or acknowledged.
// ---------------------------------------------------------------------------------------

/// Sends a PUT of `key` through `remote` and asserts it is refused with a 503 within
/// [`NO_QUORUM_ANSWER_BOUND`].
#[track_caller]
fn assert_put_refused(remote: &Remote, node: usize, key: &str, body: &[u8]) {
    let start = Instant::now();
    let r = remote.put_timeout(BUCKET, key, body, NO_QUORUM_ANSWER_BOUND);
    let took = start.elapsed();
    match r {
        Ok(r) => assert!(
            is_unavailable(&r),
            "PUT {key} through node {node} without a quorum: status {} {:?} (want 503 \
             ServiceUnavailable or SlowDown): {}",
            r.status,
            r.error_code(),
            r.text()
        ),
        Err(e) => {
            panic!("PUT {key} through node {node} without a quorum: no answer in {took:?}: {e}")
        }
    }
    assert!(took < NO_QUORUM_ANSWER_BOUND, "the 503 took {took:?}");
    println!("PUT {key} through node {node} without a quorum: 503 after {took:?}");
}

/// GETs `key` through `remote` until the answer is a 503 (bounded by
/// [`NO_QUORUM_ANSWER_BOUND`] from the start, each request too); a 200 before that (a
/// leader lease still running) must carry `body`.
#[track_caller]
fn assert_get_refused(remote: &Remote, node: usize, key: &str, body: &[u8]) {
    let start = Instant::now();
    for attempt in 1.. {
        let r = remote
            .signed("GET", &format!("/{BUCKET}/{key}"))
            .timeout(NO_QUORUM_ANSWER_BOUND)
            .try_send()
            .unwrap_or_else(|e| {
                panic!(
                    "GET {key} through node {node} without a quorum: no answer after {:?}: {e}",
                    start.elapsed()
                )
            });
        if is_unavailable(&r) {
            println!(
                "GET {key} through node {node} without a quorum: 503 after {:?} ({attempt} requests)",
                start.elapsed()
            );
            break;
        }
        assert_eq!(
            r.status,
            200,
            "GET {key} through node {node} without a quorum: status {} {:?}: {}",
            r.status,
            r.error_code(),
            r.text()
        );
        assert_same_body(&r.body, body, &format!("GET {key} through node {node}"));
        assert!(
            start.elapsed() < NO_QUORUM_ANSWER_BOUND,
            "GET {key} through node {node} still served after {:?} without a quorum",
            start.elapsed()
        );
        thread::sleep(Duration::from_millis(200));
    }
    assert!(
        start.elapsed() < NO_QUORUM_ANSWER_BOUND,
        "the 503 took {:?}",
        start.elapsed()
    );
}

#[test]
fn without_quorum_writes_and_reads_fail_with_503() {
    let mut cluster = Cluster::start(3, &[]);
    cluster.create_bucket(1, BUCKET);
    let before = random_body(4000, 12_345);
    put_ok(&cluster.remote(1), "before", &before);

    // Phase 1: the survivor is a follower (its leader and the other follower are killed).
    let leader = cluster.wait_leader(ELECTION_TIMEOUT);
    let followers = cluster.ids_except(&[leader]);
    let (survivor, other) = (followers[0], followers[1]);
    cluster.kill9(leader);
    cluster.kill9(other);
    let s = cluster.remote(survivor);
    let doomed = random_body(4001, 23_456);
    assert_put_refused(&s, survivor, "doomed", &doomed);
    assert_get_refused(&s, survivor, "before", &before);

    // One node back: a quorum again; writes resume within the failover bound.
    cluster.restart(other);
    let took = cluster
        .put_until_ok(survivor, BUCKET, "after", b"after", FAILOVER_BOUND)
        .unwrap_or_else(|e| panic!("no write acknowledged after the quorum came back: {e}"));
    println!("writes resumed {took:?} after node {other} restarted");
    for id in [survivor, other] {
        let r = cluster.remote(id);
        check(&r, id, "doomed", Want::Absent);
        check(&r, id, "before", Want::Body(&before));
        check(&r, id, "after", Want::Body(b"after"));
    }

    // Phase 2: the survivor is the leader (both followers killed). A leader without a
    // quorum commits nothing: the PUT is refused, and reads stop once any lease ran out.
    cluster.restart(leader);
    cluster.wait_same_digest(&cluster.ids(), CATCH_UP_TIMEOUT);
    let leader = cluster.wait_leader(ELECTION_TIMEOUT);
    let followers = cluster.ids_except(&[leader]);
    for &f in &followers {
        cluster.kill9(f);
    }
    let l = cluster.remote(leader);
    let doomed2 = random_body(4002, 34_567);
    assert_put_refused(&l, leader, "doomed-2", &doomed2);
    assert_get_refused(&l, leader, "before", &before);

    for &f in &followers {
        cluster.restart(f);
    }
    let took = cluster
        .put_until_ok(leader, BUCKET, "after-2", b"after-2", FAILOVER_BOUND)
        .unwrap_or_else(|e| panic!("no write acknowledged after the quorum came back: {e}"));
    println!("writes resumed {took:?} after the followers restarted");
    cluster.wait_same_digest(&cluster.ids(), CATCH_UP_TIMEOUT);
    for id in cluster.ids() {
        let r = cluster.remote(id);
        check(&r, id, "doomed", Want::Absent);
        // The old leader may have logged it before it noticed the lost quorum, and Raft may
        // commit such an entry later: absent or whole, never anything else.
        check(&r, id, "doomed-2", Want::AbsentOrOneOf(&[&doomed2]));
        check(&r, id, "before", Want::Body(&before));
        check(&r, id, "after", Want::Body(b"after"));
        check(&r, id, "after-2", Want::Body(b"after-2"));
    }
}

// ---------------------------------------------------------------------------------------
// 5. A follower that lost its data folder is rebuilt from a snapshot.
// ---------------------------------------------------------------------------------------

#[test]
fn follower_with_empty_data_is_rebuilt_from_a_snapshot() {
    let mut cluster = Cluster::start(3, &["--snapshot-logs", "50"]);
    cluster.create_bucket(1, BUCKET);
    let body_of = |i: u64| -> Vec<u8> {
        // Every 7th body is one of two shared bodies: dedup state in the snapshot too.
        match i % 7 {
            0 => random_body(5000, 3_000),
            3 => random_body(5001, 9_000),
            _ => random_body(5100 + i, 512 + (i as usize * 97) % 8192),
        }
    };
    // 300 objects, one writer per node.
    let writers: Vec<_> = cluster
        .ids()
        .into_iter()
        .map(|id| {
            let remote = cluster.remote(id);
            thread::spawn(move || {
                for i in (id as u64 - 1..300).step_by(3) {
                    put_ok(&remote, &format!("obj-{i:03}"), &body_of(i));
                }
            })
        })
        .collect();
    for w in writers {
        w.join().expect("writer thread panicked");
    }

    let leader = cluster.wait_leader(ELECTION_TIMEOUT);
    let follower = cluster.ids_except(&[leader])[0];
    cluster.kill9(follower);
    cluster.wipe_data(follower);
    // While it is away: 60 more objects and 30 deletes, through the leader and the other
    // follower.
    let up = cluster.ids_except(&[follower]);
    for i in 300..360u64 {
        put_ok(
            &cluster.remote(up[i as usize % 2]),
            &format!("obj-{i:03}"),
            &body_of(i),
        );
    }
    let deleted: BTreeSet<u64> = (0..300).step_by(10).collect();
    for &i in &deleted {
        delete_ok(&cluster.remote(up[i as usize % 2]), &format!("obj-{i:03}"));
    }
    let before = cluster.digest(leader).expect("leader digest");

    cluster.restart(follower);
    let started = Instant::now();
    let d = cluster.wait_same_digest(&cluster.ids(), CATCH_UP_TIMEOUT);
    println!(
        "node {follower} rebuilt from an empty folder in {:?}: last_applied {} (the leader was at {} when it restarted)",
        started.elapsed(),
        d.last_applied,
        before.last_applied
    );
    assert!(d.last_applied >= before.last_applied, "{d:?} vs {before:?}");
    let st = cluster
        .status(follower)
        .expect("status of the rebuilt node");
    assert_eq!(st.members, vec![1, 2, 3], "{st:?}");
    assert!(st.leader.is_some(), "{st:?}");

    let remote = cluster.remote(follower);
    let mut want_keys = Vec::new();
    for i in 0..360u64 {
        let key = format!("obj-{i:03}");
        if deleted.contains(&i) {
            check(&remote, follower, &key, Want::Absent);
        } else {
            check(&remote, follower, &key, Want::Body(&body_of(i)));
            want_keys.push(key);
        }
    }
    assert_eq!(
        list(&cluster, follower),
        want_keys,
        "LIST through the rebuilt node"
    );
    // It serves writes too.
    put_ok(&remote, "after-rebuild", b"x");
    for id in cluster.ids() {
        check(&cluster.remote(id), id, "after-rebuild", Want::Body(b"x"));
    }
}

// ---------------------------------------------------------------------------------------
// 6. A crash loop under a mixed workload.
// ---------------------------------------------------------------------------------------

#[test]
fn crash_loop_keeps_every_acknowledged_object() {
    let cycles: usize = std::env::var("CLUSTER_CRASH_CYCLES")
        .map(|v| v.parse().expect("CLUSTER_CRASH_CYCLES is a number"))
        .unwrap_or(8);
    let seed: u64 = std::env::var("CLUSTER_CRASH_SEED")
        .map(|v| v.parse().expect("CLUSTER_CRASH_SEED is a number"))
        .unwrap_or_else(|_| rand::rng().random());
    println!("crash loop: {cycles} cycles, seed {seed} (CLUSTER_CRASH_SEED to replay)");
    let mut rng = StdRng::seed_from_u64(seed);

    // A snapshot and a log purge every 50 entries: nodes are killed before, during and
    // after them, and restart on purged logs.
    let mut cluster = Cluster::start(3, &["--snapshot-logs", "50"]);
    cluster.create_bucket(1, BUCKET);
    let remotes: Vec<Remote> = cluster.ids().iter().map(|&id| cluster.remote(id)).collect();
    let workload = torture::Workload {
        bucket: BUCKET.to_string(),
        native_token: None,
    };
    let bodies = Arc::new(torture::Bodies::new());
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicUsize::new(0));
    let clients = torture::start_clients(3, seed, &remotes, &workload, &bodies, &stop, &acked);
    let _stop_on_panic = StopOnDrop(stop.clone());

    let started = Instant::now();
    for cycle in 1..=cycles {
        // Some progress since the last cycle, then a random moment.
        let base = acked.load(Ordering::Relaxed);
        assert!(
            poll_until(PROGRESS_TIMEOUT, || acked.load(Ordering::Relaxed)
                >= base + 5),
            "cycle {cycle}: no progress in {PROGRESS_TIMEOUT:?}\n{}",
            cluster.describe()
        );
        thread::sleep(Duration::from_millis(rng.random_range(0..2_000)));
        let victim = rng.random_range(1..=cluster.size());
        let was_leader = cluster.leader() == Some(victim);
        cluster.kill9(victim);
        // Down for a random while, the other two keep the quorum.
        thread::sleep(Duration::from_millis(rng.random_range(0..2_000)));
        cluster.restart(victim);
        // Every cycle starts with the three nodes in the group.
        let leader = cluster.wait_leader(ELECTION_TIMEOUT * 2);
        println!(
            "cycle {cycle}/{cycles}: kill -9 node {victim}{}, restarted; leader {leader}; {} operations acknowledged so far",
            if was_leader { " (the leader)" } else { "" },
            acked.load(Ordering::Relaxed)
        );
    }
    let (settled, model, counts) =
        torture::settle_and_join(PROGRESS_TIMEOUT, &stop, &acked, clients);
    assert!(
        settled,
        "no progress after the last cycle\n{}",
        cluster.describe()
    );
    println!(
        "{cycles} cycles in {:?}: {} operations acknowledged ({} PUT, {} copies, {} DELETE, {} multipart), {} failed, {} reads checked; {} keys, {} uncertain",
        started.elapsed(),
        counts.acked(),
        counts.puts,
        counts.copies,
        counts.deletes,
        counts.multiparts,
        counts.failed,
        counts.reads,
        model.keys.len(),
        model.uncertain_keys()
    );
    assert!(
        counts.violations.is_empty(),
        "reads during the crash loop found what no acknowledged operation left:\n{}",
        counts.violations.join("\n")
    );
    assert!(counts.puts > 0 && counts.deletes > 0, "{counts:?}");

    // Quiesce: one leader, the same applied index and tables everywhere.
    cluster.wait_leader(ELECTION_TIMEOUT);
    let d = cluster.wait_same_digest(&cluster.ids(), CATCH_UP_TIMEOUT);
    let snapshot = cluster
        .status(cluster.wait_leader(ELECTION_TIMEOUT))
        .ok()
        .and_then(|s| s.snapshot)
        .unwrap_or(0);
    println!(
        "converged at last_applied {}; snapshot at {snapshot}: about {} snapshots and log purges crossed",
        d.last_applied,
        snapshot / 50
    );
    assert!(snapshot / 50 >= 3, "the crash loop crossed too few purges");
    for id in cluster.ids() {
        if let Err(e) = torture::verify_objects(&cluster.remote(id), BUCKET, &model, &bodies) {
            panic!("node {id} disagrees with the acknowledged operations:\n{e}");
        }
    }
    let lists: Vec<Vec<String>> = cluster.ids().iter().map(|&id| list(&cluster, id)).collect();
    assert!(
        lists.iter().all(|l| *l == lists[0]),
        "the nodes list different keys"
    );
    cluster.wait_same_digest(&cluster.ids(), CATCH_UP_TIMEOUT);

    // Every node's data folder (with the same shared disks) passes fsck.
    cluster.kill_all_and_fsck();
}

// ---------------------------------------------------------------------------------------
// 7. Node-to-node RPCs need the cluster secret.
// ---------------------------------------------------------------------------------------

#[test]
fn rpcs_without_the_cluster_secret_are_refused() {
    let cluster = Cluster::start(3, &[]);
    cluster.create_bucket(1, BUCKET);
    let body = random_body(7000, 4_000);
    put_ok(&cluster.remote(1), "k", &body);
    let before = cluster.wait_same_digest(&cluster.ids(), CATCH_UP_TIMEOUT);

    let secret = cluster.secret().to_string();
    let wrong = random_token(secret.len());
    let truncated = secret[..secret.len() - 1].to_string();
    let admin = format!("Bearer {}", cluster.node(1).admin_token());
    // Bodies that would do harm if they were obeyed (in case the format matches).
    let rpcs: [(&str, &str); 3] = [
        (
            "/_cluster/raft/vote",
            r#"{"vote":{"leader_id":{"term":999999,"node_id":1},"committed":false},"last_log_id":null}"#,
        ),
        (
            "/_cluster/write",
            r#"{"CreateBucket":{"bucket":"evil","name":"evil"}}"#,
        ),
        // A group's calls are behind the same secret.
        (
            "/_cluster/g/1/write",
            r#"{"CreateBucket":{"bucket":"evil","name":"evil"}}"#,
        ),
    ];
    for id in cluster.ids() {
        let remote = cluster.remote(id);
        for (path, rpc_body) in rpcs {
            let attempts: [(&str, Vec<(&str, &str)>); 5] = [
                ("no secret", vec![]),
                (
                    "a wrong secret",
                    vec![(CLUSTER_SECRET_HEADER, wrong.as_str())],
                ),
                ("an empty secret", vec![(CLUSTER_SECRET_HEADER, "")]),
                (
                    "the secret but its last char",
                    vec![(CLUSTER_SECRET_HEADER, truncated.as_str())],
                ),
                ("the admin token", vec![("authorization", admin.as_str())]),
            ];
            for (what, mut headers) in attempts {
                headers.push(("content-type", "application/json"));
                let r = remote
                    .raw("POST", path, &headers, rpc_body.as_bytes(), ADMIN_TIMEOUT)
                    .unwrap_or_else(|e| {
                        panic!("node {id}: POST {path} with {what}: no answer: {e}")
                    });
                assert_eq!(
                    r.status,
                    403,
                    "node {id}: POST {path} with {what}: {}",
                    r.text()
                );
            }
            // S3 credentials are not the cluster secret either.
            let r = remote
                .signed("POST", path)
                .header("content-type", "application/json")
                .body(rpc_body.as_bytes())
                .timeout(ADMIN_TIMEOUT)
                .try_send()
                .unwrap_or_else(|e| panic!("node {id}: signed POST {path}: no answer: {e}"));
            assert_eq!(
                r.status,
                403,
                "node {id}: POST {path} signed with the S3 keys: {}",
                r.text()
            );
        }
        let with_secret = |path: &str, body: &[u8]| {
            remote
                .raw(
                    "POST",
                    path,
                    &[(CLUSTER_SECRET_HEADER, secret.as_str())],
                    body,
                    ADMIN_TIMEOUT,
                )
                .unwrap_or_else(|e| panic!("node {id}: POST {path} with the secret: {e}"))
        };
        // Control: with the secret, an (empty, unusable) vote is not refused for its secret.
        let r = with_secret("/_cluster/raft/vote", b"");
        assert_ne!(
            r.status,
            403,
            "node {id}: refused with the right secret: {}",
            r.text()
        );
        // With the secret: a call to a group this node holds no replica of, or a path no
        // release posts, is answered 404 and reaches no group; a body root cannot decode,
        // 400.
        for (path, want) in [
            ("/_cluster/g/1/raft/vote", 404),
            ("/_cluster/g/1/write", 404),
            ("/_cluster/g/0/raft/vote", 404),
            ("/_cluster/g/01/raft/vote", 404),
            ("/_cluster/g/x/raft/vote", 404),
            ("/_cluster/nope", 404),
            ("/_cluster/raft/vote/x", 404),
            ("/_cluster/write", 400),
        ] {
            let r = with_secret(path, b"\xff\xff\xff");
            assert_eq!(r.status, want, "node {id}: POST {path}: {}", r.text());
        }
        // The leader of a group is asked over its path; root's is known to every node.
        let r = with_secret("/_cluster/leader", b"");
        assert_eq!(r.status, 200, "node {id}: /_cluster/leader: {}", r.text());
    }

    // Nothing was written, and the cluster still works.
    let leader = cluster.wait_leader(ELECTION_TIMEOUT);
    let after = cluster.wait_same_digest(&cluster.ids(), CATCH_UP_TIMEOUT);
    for table in ["buckets", "objects", "files"] {
        if let (Some(a), Some(b)) = (before.tables.get(table), after.tables.get(table)) {
            assert_eq!(a, b, "table {table} changed: {before:?} -> {after:?}");
        }
    }
    for id in cluster.ids() {
        let remote = cluster.remote(id);
        let r = remote
            .signed("HEAD", "/evil")
            .timeout(REQUEST_TIMEOUT)
            .try_send()
            .expect("HEAD /evil answered");
        assert_eq!(r.status, 404, "node {id}: bucket evil exists");
        assert_eq!(list(&cluster, id), vec!["k".to_string()], "node {id}");
        check(&remote, id, "k", Want::Body(&body));
    }
    for id in cluster.ids() {
        let key = format!("after-{id}");
        put_ok(&cluster.remote(id), &key, key.as_bytes());
        check(
            &cluster.remote(leader),
            leader,
            &key,
            Want::Body(key.as_bytes()),
        );
    }
}
