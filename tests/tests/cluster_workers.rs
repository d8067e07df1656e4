//! The background workers in a cluster of three real gateway processes: the lifecycle
//! expiry sweep and the delete-prefix jobs run on the Raft leader only, act exactly once
//! on what they cover, and go on on the new leader after the old one is killed (`kill -9`).
//!
//! Which node did the work is read from each node's own log (`--log-format json`): the
//! sweep logs a `lifecycle pass` line with the count it expired, the job worker a `jobs:
//! job ended` line. The commands they commit are applied on every node, so these lines are
//! the only trace of who ran them.
//!
//! Each test starts its own cluster on random 127.0.0.1 ports and temp folders (see
//! `e2e::cluster`; the clusters run one at a time). Run: `cargo build -p gateway && cargo
//! test -p e2e --test cluster_workers`.

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use e2e::cluster::{ADMIN_TIMEOUT, CATCH_UP_TIMEOUT, Cluster, ELECTION_TIMEOUT, REQUEST_TIMEOUT};
use e2e::{AdminFile, Remote, parse_flat_json, random_body, sha1_hex};

/// Bound on the objects a rule matches being gone: with 2-second lifecycle days an object
/// is due 2 to 4 s after it was written and a pass starts every 2 s; the rest is slack for
/// a loaded machine.
const EXPIRY_BOUND: Duration = Duration::from_secs(30);
/// Bound on a delete-prefix job finishing.
const JOB_BOUND: Duration = Duration::from_secs(60);
/// Every node's log lines kept by the harness are searched; this many at most.
const LOG_LINES: usize = 2000;
/// How long a node may take to write a pass's summary line after its commands applied.
const LOG_SETTLE: Duration = Duration::from_secs(10);

/// Flags of every node: short lifecycle days, and logs that are few (no request lines)
/// and machine-readable.
const QUIET_JSON_LOGS: [&str; 4] = ["--request-log-level", "off", "--log-format", "json"];

fn ok(what: &str, r: std::io::Result<e2e::RawResponse>, want: u16) -> e2e::RawResponse {
    match r {
        Ok(r) if r.status == want => r,
        Ok(r) => panic!("{what}: status {} (want {want}): {}", r.status, r.text()),
        Err(e) => panic!("{what}: no answer: {e}"),
    }
}

fn put(remote: &Remote, bucket: &str, key: &str, body: &[u8]) {
    ok(&format!("PUT {key}"), remote.put(bucket, key, body), 200);
}

/// PUTs every `(key, body)` through the given nodes, spread over 8 client threads.
fn put_all(remotes: &[Remote], bucket: &str, objects: &[(String, Vec<u8>)]) {
    thread::scope(|s| {
        for (t, chunk) in objects.chunks(objects.len().div_ceil(8).max(1)).enumerate() {
            let remote = &remotes[t % remotes.len()];
            s.spawn(move || {
                for (key, body) in chunk {
                    put(remote, bucket, key, body);
                }
            });
        }
    });
}

fn keys(remote: &Remote, bucket: &str) -> Vec<String> {
    remote
        .list_keys(bucket)
        .unwrap_or_else(|e| panic!("listing {bucket}: {e}"))
}

/// Polls the listing of `bucket` on node `remote` until it is `want` (sorted).
fn wait_keys(remote: &Remote, bucket: &str, want: &[String], limit: Duration, what: &str) {
    let mut last = Vec::new();
    let held = e2e::poll_until(limit, || {
        last = keys(remote, bucket);
        last == want
    });
    assert!(
        held,
        "{what}: the keys of {bucket} are not as expected within {limit:?}\n want {want:?}\n  got {last:?}"
    );
}

/// The sum of `"field":N` over node `id`'s log lines that carry `message`.
fn logged_sum(cluster: &Cluster, id: usize, message: &str, field: &str) -> u64 {
    let needle = format!("\"message\":\"{message}\"");
    let field = format!("\"{field}\":");
    cluster
        .node(id)
        .log_tail(LOG_LINES)
        .lines()
        .filter(|l| l.contains(&needle))
        .map(|l| {
            let at = l
                .find(&field)
                .unwrap_or_else(|| panic!("no {field} in a log line: {l}"));
            let digits: String = l[at + field.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("{field} is not a number: {l}"))
        })
        .sum()
}

/// [`logged_sum`] once it reaches `want` or stops changing: a pass logs its summary after
/// its last command is applied, so the keys can be gone a moment before the line is
/// written. Bounded by [`LOG_SETTLE`]; a sum above `want` is returned at once.
fn settled_logged_sum(cluster: &Cluster, id: usize, message: &str, field: &str, want: u64) -> u64 {
    let deadline = Instant::now() + LOG_SETTLE;
    loop {
        let sum = logged_sum(cluster, id, message, field);
        if sum >= want || Instant::now() >= deadline {
            return sum;
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// How many of node `id`'s log lines carry `message` and `needle`.
fn logged_count(cluster: &Cluster, id: usize, message: &str, needle: &str) -> usize {
    let message = format!("\"message\":\"{message}\"");
    cluster
        .node(id)
        .log_tail(LOG_LINES)
        .lines()
        .filter(|l| l.contains(&message) && l.contains(needle))
        .count()
}

/// The current leader and its term, as the live nodes agree.
fn leader_and_term(cluster: &Cluster) -> (usize, u64) {
    let leader = cluster.wait_leader(ELECTION_TIMEOUT);
    let term = cluster
        .status(leader)
        .unwrap_or_else(|e| panic!("status of node {leader}: {e}"))
        .term;
    (leader, term)
}

/// `GET /_admin/files/<sha1>` on node `id`: `None` once the content is gone from FileDB.
fn admin_file(cluster: &Cluster, id: usize, sha1hex: &str) -> Option<AdminFile> {
    let r = cluster
        .remote(id)
        .admin_get(&format!("/_admin/files/{sha1hex}"), ADMIN_TIMEOUT)
        .unwrap_or_else(|e| panic!("GET /_admin/files/{sha1hex}: {e}"));
    match r.status {
        200 => Some(AdminFile::parse(&r.text()).unwrap_or_else(|e| panic!("{e}: {}", r.text()))),
        404 => None,
        s => panic!("GET /_admin/files/{sha1hex}: status {s}: {}", r.text()),
    }
}

/// A content still referenced by `refs` objects: live, the count exact, no
/// `DO_NOT_DELETE` (which a release too many would set).
fn assert_refs(cluster: &Cluster, id: usize, body: &[u8], refs: u64, what: &str) {
    let f = admin_file(cluster, id, &sha1_hex(body))
        .unwrap_or_else(|| panic!("{what}: its content is gone from FileDB"));
    assert_eq!(f.state, "live", "{what}: {f:?}");
    assert_eq!(f.refs, Some(refs), "{what}: {f:?}");
    assert_eq!(f.flags, Some(0), "{what}: {f:?}");
}

/// A content whose every reference is gone: waiting for Valkyrie, or already deleted.
fn assert_released(cluster: &Cluster, id: usize, body: &[u8], what: &str) {
    if let Some(f) = admin_file(cluster, id, &sha1_hex(body)) {
        assert_eq!(f.state, "deleting", "{what}: {f:?}");
    }
}

/// Brings node `dead` back, waits until every node applied the same log, stops them all
/// and runs `gateway fsck` on every node's data folder.
fn converge_and_fsck(cluster: &mut Cluster, dead: usize) {
    cluster.restart(dead);
    cluster.wait_same_digest(&cluster.ids(), CATCH_UP_TIMEOUT);
    cluster.kill_all_and_fsck();
}

fn lifecycle_xml() -> String {
    "<LifecycleConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
     <Rule><ID>logs</ID><Filter><Prefix>logs/</Prefix></Filter><Status>Enabled</Status>\
     <Expiration><Days>1</Days></Expiration></Rule>\
     <Rule><ID>big-mail</ID><Filter><And><Prefix>mail/</Prefix>\
     <ObjectSizeGreaterThan>1000</ObjectSizeGreaterThan></And></Filter>\
     <Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>\
     </LifecycleConfiguration>"
        .to_string()
}

#[test]
fn lifecycle_expiry_runs_on_the_leader_only_and_goes_on_after_it_is_killed() {
    let mut args = vec!["--lifecycle-day-secs", "2"];
    args.extend(QUIET_JSON_LOGS);
    let mut cluster = Cluster::start(3, &args);
    let (leader, term) = leader_and_term(&cluster);
    let followers: Vec<usize> = cluster.ids().into_iter().filter(|&i| i != leader).collect();
    let (f1, f2) = (followers[0], followers[1]);
    let via = [cluster.remote(f1), cluster.remote(f2)];

    cluster.create_bucket(f1, "bkt");
    let r = via[0]
        .signed("PUT", "/bkt?lifecycle")
        .body(lifecycle_xml().as_bytes())
        .timeout(REQUEST_TIMEOUT)
        .try_send();
    ok("PutBucketLifecycleConfiguration", r, 200);

    // Round 1, through the followers: 20 logs/ keys and 5 big mail/ keys expire; small
    // mail/, other/ and keep/dup (logs/a00's content) stay.
    let body = |seed: u64, len: usize| random_body(seed, len);
    let mut round1: Vec<(String, Vec<u8>)> = Vec::new();
    let mut survivors: Vec<String> = Vec::new();
    for i in 0..20u64 {
        round1.push((format!("logs/a{i:02}"), body(100 + i, 300)));
    }
    for i in 0..5u64 {
        round1.push((format!("mail/big{i}"), body(200 + i, 2000)));
        round1.push((format!("mail/small{i}"), body(300 + i, 500)));
        round1.push((format!("other/a{i}"), body(400 + i, 500)));
        survivors.push(format!("mail/small{i}"));
        survivors.push(format!("other/a{i}"));
    }
    let shared_a = body(100, 300);
    round1.push(("keep/dup".to_string(), shared_a.clone()));
    survivors.push("keep/dup".to_string());
    put_all(&via, "bkt", &round1);
    survivors.sort();
    wait_keys(&via[1], "bkt", &survivors, EXPIRY_BOUND, "round 1");

    // The leader expired all 25, each once; the followers ran no pass at all.
    let (still, term_now) = leader_and_term(&cluster);
    assert_eq!(
        (still, term_now),
        (leader, term),
        "the leadership changed during round 1: which node swept is not known"
    );
    assert_eq!(
        settled_logged_sum(&cluster, leader, "lifecycle pass", "expired", 25),
        25
    );
    for f in [f1, f2] {
        assert_eq!(
            logged_count(&cluster, f, "lifecycle pass", ""),
            0,
            "follower {f} ran the sweep:\n{}",
            cluster.node(f).log_tail(50)
        );
    }
    assert_refs(&cluster, leader, &shared_a, 1, "keep/dup");
    assert_released(&cluster, leader, &body(101, 300), "logs/a01");
    assert_released(&cluster, leader, &body(200, 2000), "mail/big0");

    // Round 2: the leader is killed; the new one takes the sweep over.
    cluster.kill9(leader);
    let new_leader = cluster.wait_leader_among(&followers, ELECTION_TIMEOUT);
    let other = if new_leader == f1 { f2 } else { f1 };
    let mut round2: Vec<(String, Vec<u8>)> = Vec::new();
    for i in 0..20u64 {
        round2.push((format!("logs/b{i:02}"), body(500 + i, 300)));
    }
    for i in 0..5u64 {
        round2.push((format!("other/b{i}"), body(600 + i, 500)));
        survivors.push(format!("other/b{i}"));
    }
    let shared_b = body(500, 300);
    round2.push(("keep/dup-b".to_string(), shared_b.clone()));
    survivors.push("keep/dup-b".to_string());
    survivors.sort();
    put_all(&[cluster.remote(other)], "bkt", &round2);
    wait_keys(
        &cluster.remote(other),
        "bkt",
        &survivors,
        EXPIRY_BOUND,
        "round 2",
    );
    assert_eq!(
        settled_logged_sum(&cluster, new_leader, "lifecycle pass", "expired", 20),
        20
    );
    assert_eq!(logged_count(&cluster, other, "lifecycle pass", ""), 0);
    assert_refs(&cluster, new_leader, &shared_a, 1, "keep/dup");
    assert_refs(&cluster, new_leader, &shared_b, 1, "keep/dup-b");
    assert_released(&cluster, new_leader, &body(501, 300), "logs/b01");

    converge_and_fsck(&mut cluster, leader);
}

/// `POST /_admin/jobs` (delete-prefix) through `remote`; the job's id.
fn start_job(remote: &Remote, bucket: &str, prefix: &str) -> u64 {
    let auth = format!("Bearer {}", remote.admin_token);
    let body = format!(r#"{{"op":"delete-prefix","bucket":"{bucket}","prefix":"{prefix}"}}"#);
    let r = remote.raw(
        "POST",
        "/_admin/jobs",
        &[
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ],
        body.as_bytes(),
        REQUEST_TIMEOUT,
    );
    let r = ok("POST /_admin/jobs", r, 202);
    let fields = parse_flat_json(&r.text()).expect("job JSON");
    fields["id"].parse().expect("numeric job id")
}

/// `GET /_admin/jobs/{id}` through `remote`, as flat JSON fields.
fn job(remote: &Remote, id: u64) -> BTreeMap<String, String> {
    let r = remote.admin_get(&format!("/_admin/jobs/{id}"), ADMIN_TIMEOUT);
    let r = ok(&format!("GET /_admin/jobs/{id}"), r, 200);
    parse_flat_json(&r.text()).expect("job JSON")
}

fn deleted(job: &BTreeMap<String, String>) -> u64 {
    job["deleted"].parse().expect("numeric deleted")
}

#[test]
fn a_delete_prefix_job_finishes_on_the_new_leader_and_spares_later_writes() {
    const MAILBOX: usize = 400;
    // Chunks of 10 keys 100 ms apart: the job takes seconds, so the leader dies midway.
    let mut args = vec!["--job-chunk-keys", "10", "--job-pause-ms", "100"];
    args.extend(QUIET_JSON_LOGS);
    let mut cluster = Cluster::start(3, &args);
    let leader = cluster.wait_leader(ELECTION_TIMEOUT);
    let followers: Vec<usize> = cluster.ids().into_iter().filter(|&i| i != leader).collect();
    let (f1, f2) = (followers[0], followers[1]);
    let (r1, r2) = (cluster.remote(f1), cluster.remote(f2));

    // The mailbox: 400 keys over 20 contents, one of them also under keep/ (outside the
    // prefix), so the counts of shared contents must come out exact.
    cluster.create_bucket(f1, "mail");
    let content = |i: usize| random_body(1000 + (i % 20) as u64, 700);
    let mailbox: Vec<(String, Vec<u8>)> = (0..MAILBOX)
        .map(|i| (format!("box/{i:06}"), content(i)))
        .collect();
    put_all(&[r1.clone(), r2.clone()], "mail", &mailbox);
    put(&r2, "mail", "keep/shared", &content(0));
    put(&r2, "mail", "keep/own", &random_body(2000, 700));

    let id = start_job(&r1, "mail", "box/");
    // Written after the job started: it must spare them (its fence), before and after the
    // leader's death. One shares a content the job releases 20 times.
    let mut late: Vec<(String, Vec<u8>)> = (0..10)
        .map(|i| (format!("box/late-{i:02}"), random_body(3000 + i, 600)))
        .collect();
    late.push(("box/late-shared".to_string(), content(1)));
    for (key, body) in &late {
        put(&r2, "mail", key, body);
    }

    // Kill the leader once the job is under way, not done.
    let mut last = BTreeMap::new();
    let midway = e2e::poll_until(JOB_BOUND, || {
        last = job(&r1, id);
        deleted(&last) >= 40 || last["state"] != "running"
    });
    assert!(
        midway,
        "job {id} did not start within {JOB_BOUND:?}: {last:?}"
    );
    assert_eq!(
        last["state"], "running",
        "the job ended before the kill: {last:?}"
    );
    cluster.kill9(leader);
    let at_kill = deleted(&last);
    assert!(
        (at_kill as usize) < MAILBOX,
        "the job was done when the leader died: {last:?}"
    );

    let new_leader = cluster.wait_leader_among(&followers, ELECTION_TIMEOUT);
    for i in 10..20 {
        let (key, body) = (format!("box/late-{i:02}"), random_body(3000 + i, 600));
        put(&r1, "mail", &key, &body);
        late.push((key, body));
    }

    let deadline = Instant::now() + JOB_BOUND;
    let done = loop {
        let j = job(&r2, id);
        if j["state"] != "running" {
            break j;
        }
        assert!(
            Instant::now() < deadline,
            "job {id} not done within {JOB_BOUND:?} after the leader died: {j:?}\n{}",
            cluster.describe()
        );
        thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(done["state"], "done", "{done:?}");
    assert_eq!(deleted(&done), MAILBOX as u64, "{done:?}");
    assert_eq!(job(&r1, id), done, "the job reads the same on both nodes");
    let needle = format!("\"job\":{id}");
    let deadline = Instant::now() + LOG_SETTLE;
    // The line is written after the job's last command applied: give it a moment.
    while logged_count(&cluster, new_leader, "jobs: job ended", &needle) == 0
        && Instant::now() < deadline
    {
        thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        logged_count(&cluster, new_leader, "jobs: job ended", &needle),
        1,
        "the new leader finished the job:\n{}",
        cluster.node(new_leader).log_tail(50)
    );
    for id2 in cluster.ids().into_iter().filter(|&n| n != new_leader) {
        assert_eq!(logged_count(&cluster, id2, "jobs: job ended", ""), 0);
    }

    // Exactly the later writes and what is outside the prefix are left, each its own bytes.
    let mut want: Vec<String> = late.iter().map(|(k, _)| k.clone()).collect();
    want.extend(["keep/own".to_string(), "keep/shared".to_string()]);
    want.sort();
    assert_eq!(keys(&r2, "mail"), want);
    for (key, body) in &late {
        let r = ok(&format!("GET {key}"), r2.get("mail", key), 200);
        assert!(r.body == *body, "{key} does not read back as written");
    }
    // Each content's references: what is left, never one released twice.
    assert_refs(&cluster, new_leader, &content(0), 1, "keep/shared");
    assert_refs(&cluster, new_leader, &content(1), 1, "box/late-shared");
    for i in 2..20 {
        assert_released(&cluster, new_leader, &content(i), "a mailbox content");
    }

    converge_and_fsck(&mut cluster, leader);
}
