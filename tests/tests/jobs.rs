//! Background jobs: `delete-prefix` removes a whole mailbox in chunks while clients keep
//! working, spares what was written after it started, releases each reference exactly
//! once, resumes after `kill -9`, and can be cancelled; through the admin API and
//! `gateway admin jobs`.
//!
//! `JOBS_TEST_OBJECTS` (default 1500) sets the mailbox's size.

use std::time::{Duration, Instant};

use e2e::cluster::run_gateway;
use e2e::{Gateway, create_bucket, get_bytes, parse_flat_json, put_bytes, random_body, sha1_hex};
use tokio::task::JoinSet;

const JOB_BOUND: Duration = Duration::from_secs(180);

fn objects() -> usize {
    std::env::var("JOBS_TEST_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500)
}

/// PUTs `n` keys `box/NNNNNN` with `body`, 16 at a time.
async fn fill(gw: &Gateway, n: usize, body: &[u8]) {
    let mut tasks = JoinSet::new();
    for chunk in (0..n).collect::<Vec<_>>().chunks(n.div_ceil(16).max(1)) {
        let (s3, body, keys) = (gw.client(), body.to_vec(), chunk.to_vec());
        tasks.spawn(async move {
            for i in keys {
                put_bytes(&s3, "mail", &format!("box/{i:06}"), &body).await;
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("fill task");
    }
}

/// `POST /_admin/jobs` for `delete-prefix`; the new job's id.
fn start_job(gw: &Gateway, bucket: &str, prefix: &str) -> u64 {
    let auth = format!("Bearer {}", gw.admin_token());
    let body = format!(r#"{{"op":"delete-prefix","bucket":"{bucket}","prefix":"{prefix}"}}"#);
    let r = gw
        .raw(
            "POST",
            "/_admin/jobs",
            &[
                ("authorization", auth.as_str()),
                ("content-type", "application/json"),
            ],
            body.as_bytes(),
        )
        .expect("POST /_admin/jobs");
    assert_eq!(r.status, 202, "{}", r.text());
    let fields = parse_flat_json(&r.text()).expect("job JSON");
    assert_eq!(fields.get("state").map(String::as_str), Some("running"));
    fields["id"].parse().expect("numeric id")
}

/// `GET /_admin/jobs/{id}` as flat JSON fields.
fn job(gw: &Gateway, id: u64) -> std::collections::BTreeMap<String, String> {
    let auth = format!("Bearer {}", gw.admin_token());
    let r = gw
        .raw(
            "GET",
            &format!("/_admin/jobs/{id}"),
            &[("authorization", auth.as_str())],
            b"",
        )
        .expect("GET job");
    assert_eq!(r.status, 200, "{}", r.text());
    parse_flat_json(&r.text()).expect("job JSON")
}

async fn wait_state(
    gw: &Gateway,
    id: u64,
    want: &str,
) -> std::collections::BTreeMap<String, String> {
    let deadline = Instant::now() + JOB_BOUND;
    loop {
        let j = job(gw, id);
        if j["state"] == want {
            return j;
        }
        assert!(
            Instant::now() < deadline,
            "job {id} not {want} in {JOB_BOUND:?}: {j:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn cli(gw: &Gateway, args: &[&str]) -> e2e::cluster::Run {
    let endpoint = gw.endpoint();
    let mut all = vec!["admin", "--endpoint", endpoint.as_str(), "jobs"];
    all.extend_from_slice(args);
    run_gateway(&all, &[("GATEWAY_ADMIN_TOKEN", gw.admin_token())])
}

async fn keys_under(gw: &Gateway, prefix: &str) -> Vec<String> {
    let s3 = gw.client();
    let mut out = Vec::new();
    let mut token = None;
    for _page in 0..1000 {
        let page = s3
            .list_objects_v2()
            .bucket("mail")
            .prefix(prefix)
            .set_continuation_token(token)
            .send()
            .await
            .expect("ListObjectsV2");
        out.extend(
            page.contents()
                .iter()
                .filter_map(|o| o.key().map(String::from)),
        );
        match page.next_continuation_token() {
            Some(t) => token = Some(t.to_string()),
            None => return out,
        }
    }
    panic!("listing did not end")
}

fn fsck_clean(gw: &Gateway) {
    let data = gw.data_dir().to_str().expect("utf-8").to_string();
    let run = run_gateway(&["fsck", "--data", &data], &[]);
    assert_eq!(run.code, Some(0), "fsck:\n{run}");
    assert!(run.stdout.contains("fsck: clean"), "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mailbox_is_deleted_in_the_background_while_clients_keep_working() {
    let n = objects();
    let mut gw = Gateway::start_with(&["--job-chunk-keys", "50", "--job-pause-ms", "2"], &[]);
    let s3 = gw.client();
    create_bucket(&s3, "mail").await;
    let newsletter = random_body(1, 3_000);
    fill(&gw, n, &newsletter).await;
    let keep = random_body(2, 5_000);
    put_bytes(&s3, "mail", "keep/k", &keep).await;

    let id = start_job(&gw, "mail", "box/");
    // Meanwhile a client writes into the mailbox and reads elsewhere: what it writes
    // after the job started survives it.
    let fresh = random_body(3, 4_000);
    for i in 0..20 {
        put_bytes(&s3, "mail", &format!("box/zz-new-{i}"), &fresh).await;
        assert_eq!(get_bytes(&s3, "mail", "keep/k").await, keep);
    }
    let done = wait_state(&gw, id, "done").await;
    assert_eq!(done["deleted"], n.to_string(), "{done:?}");
    assert_eq!(done["remaining"], "0");
    assert_ne!(done["finished"], "null");

    let left = keys_under(&gw, "box/").await;
    let want: Vec<String> = {
        let mut w: Vec<String> = (0..20).map(|i| format!("box/zz-new-{i}")).collect();
        w.sort();
        w
    };
    assert_eq!(left, want);
    assert_eq!(get_bytes(&s3, "mail", "keep/k").await, keep);
    // Each of the n references was released once: the newsletter is unreferenced.
    let f = gw
        .admin_file(&sha1_hex(&newsletter))
        .expect("known content");
    assert_eq!(f.state, "deleting", "{f:?}");
    let f = gw.admin_file(&sha1_hex(&fresh)).expect("known content");
    assert_eq!(f.refs, Some(20), "{f:?}");

    // The CLI shows it, and --watch ends (plain lines: not a terminal).
    let run = cli(&gw, &["status", &id.to_string()]);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        run.stdout.contains("done") && run.stdout.contains("mail/box/"),
        "{run}"
    );
    let run = cli(&gw, &["status", &id.to_string(), "--watch"]);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stderr.contains(&format!("job {id}: done")), "{run}");
    let run = cli(&gw, &["list"]);
    assert!(run.stdout.contains("done"), "{run}");
    let run = cli(&gw, &["delete-prefix", "nope", "x/"]);
    assert_ne!(run.code, Some(0), "a job on a missing bucket: {run}");

    gw.kill9();
    fsck_clean(&gw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_killed_midway_resumes_and_releases_nothing_twice() {
    let n = objects();
    let mut gw = Gateway::start_with(&["--job-chunk-keys", "20", "--job-pause-ms", "10"], &[]);
    let s3 = gw.client();
    create_bucket(&s3, "mail").await;
    let body = random_body(4, 2_000);
    fill(&gw, n, &body).await;
    let id = start_job(&gw, "mail", "box/");
    let deadline = Instant::now() + JOB_BOUND;
    let before_kill = loop {
        let j = job(&gw, id);
        let deleted: usize = j["deleted"].parse().expect("number");
        if deleted >= 100 {
            break deleted;
        }
        assert!(Instant::now() < deadline, "the job made no progress: {j:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    gw.kill9();
    gw.restart();
    let done = wait_state(&gw, id, "done").await;
    println!("killed after {before_kill} of {n} deleted; resumed: {done:?}");
    assert_eq!(done["deleted"], n.to_string(), "{done:?}");
    assert!(keys_under(&gw, "box/").await.is_empty());
    let f = gw.admin_file(&sha1_hex(&body)).expect("known content");
    assert_eq!(f.state, "deleting", "{f:?}");
    gw.kill9();
    fsck_clean(&gw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_job_stops_and_the_rest_stays() {
    let n = objects().min(600);
    let mut gw = Gateway::start_with(&["--job-chunk-keys", "5", "--job-pause-ms", "50"], &[]);
    let s3 = gw.client();
    create_bucket(&s3, "mail").await;
    let body = random_body(5, 2_000);
    fill(&gw, n, &body).await;
    let id = start_job(&gw, "mail", "box/");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let run = cli(&gw, &["cancel", &id.to_string()]);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.contains("cancelled"), "{run}");
    let j = wait_state(&gw, id, "cancelled").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let deleted: usize = job(&gw, id)["deleted"].parse().expect("number");
    assert_eq!(
        j["deleted"],
        deleted.to_string(),
        "deleting went on after cancel"
    );
    assert!(deleted < n, "everything was deleted before the cancel");
    let left = keys_under(&gw, "box/").await;
    assert_eq!(left.len(), n - deleted);
    let f = gw.admin_file(&sha1_hex(&body)).expect("known content");
    assert_eq!(f.refs, Some((n - deleted) as u64), "{f:?}");
    gw.kill9();
    fsck_clean(&gw);
}
