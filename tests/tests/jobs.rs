//! Background jobs: `delete-prefix` removes a whole mailbox in chunks while clients keep
//! working, spares what was written after it started, releases each reference exactly
//! once, resumes after `kill -9`, and can be cancelled; through the admin API and
//! `gateway admin jobs`.
//!
//! `delete-bucket` (`gateway admin buckets delete B --force`) does the same over a whole
//! bucket, ends its uploads, then deletes it, unless a client wrote into it meanwhile.
//!
//! `JOBS_TEST_OBJECTS` (default 1500) sets the mailbox's size.

use std::time::{Duration, Instant};

use aws_sdk_s3::primitives::ByteStream;
use e2e::cluster::run_gateway;
use e2e::{Gateway, create_bucket, get_bytes, parse_flat_json, put_bytes, random_body, sha1_hex};
use tokio::task::JoinSet;

/// Bound on a job's run: 180 s, or 10 ms an object for a larger mailbox (a debug build
/// on a shared 2-core machine deletes a few thousand a second).
fn job_bound() -> Duration {
    Duration::from_secs(180).max(Duration::from_millis(10) * objects() as u32)
}

fn objects() -> usize {
    std::env::var("JOBS_TEST_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500)
}

/// PUTs `n` keys `box/NNNNNN` with `body`, 32 at a time (the same body: after the first,
/// each PUT is a dedup hit that costs one metadata command, so 100 000 load in minutes).
async fn fill(gw: &Gateway, n: usize, body: &[u8]) {
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for chunk in (0..n).collect::<Vec<_>>().chunks(n.div_ceil(32).max(1)) {
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
    let secs = started.elapsed().as_secs_f64();
    println!(
        "loaded {n} objects in {secs:.1} s ({:.0}/s)",
        n as f64 / secs
    );
}

/// `POST /_admin/jobs` for `delete-prefix`; the new job's id.
fn start_job(gw: &Gateway, bucket: &str, prefix: &str) -> u64 {
    post_job(
        gw,
        &format!(r#"{{"op":"delete-prefix","bucket":"{bucket}","prefix":"{prefix}"}}"#),
    )
}

/// `POST /_admin/jobs` with `body`; the new job's id.
fn post_job(gw: &Gateway, body: &str) -> u64 {
    let auth = format!("Bearer {}", gw.admin_token());
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
    let deadline = Instant::now() + job_bound();
    loop {
        let j = job(gw, id);
        if j["state"] == want {
            return j;
        }
        assert!(
            Instant::now() < deadline,
            "job {id} not {want} in {:?}: {j:?}",
            job_bound()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn cli(gw: &Gateway, args: &[&str]) -> e2e::cluster::Run {
    let mut all = vec!["jobs"];
    all.extend_from_slice(args);
    admin_cli(gw, &all)
}

fn admin_cli(gw: &Gateway, args: &[&str]) -> e2e::cluster::Run {
    let endpoint = gw.endpoint();
    let mut all = vec!["admin", "--endpoint", endpoint.as_str()];
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

    let started = Instant::now();
    let id = start_job(&gw, "mail", "box/");
    // Meanwhile a client keeps writing into the mailbox and reading elsewhere, until the
    // job ends: what it writes after the job started survives it.
    let fresh = random_body(3, 4_000);
    let mut written = Vec::new();
    let deadline = Instant::now() + job_bound();
    let done = loop {
        let key = format!("box/zz-new-{:05}", written.len());
        put_bytes(&s3, "mail", &key, &fresh).await;
        written.push(key);
        assert_eq!(get_bytes(&s3, "mail", "keep/k").await, keep);
        let j = job(&gw, id);
        if j["state"] != "running" {
            break j;
        }
        assert!(
            Instant::now() < deadline,
            "job {id} not done in time: {j:?}"
        );
    };
    let secs = started.elapsed().as_secs_f64();
    println!(
        "job: {n} objects in {secs:.1} s ({:.0}/s) while a client did {} PUT+GET",
        n as f64 / secs,
        written.len()
    );
    assert_eq!(done["state"], "done", "{done:?}");
    assert_eq!(done["deleted"], n.to_string(), "{done:?}");
    assert_eq!(done["remaining"], "0");
    assert_ne!(done["finished"], "null");

    let left = keys_under(&gw, "box/").await;
    assert_eq!(left, written);
    assert_eq!(get_bytes(&s3, "mail", "keep/k").await, keep);
    // Each of the n references was released once: the newsletter is unreferenced.
    let f = gw
        .admin_file(&sha1_hex(&newsletter))
        .expect("known content");
    assert_eq!(f.state, "deleting", "{f:?}");
    let f = gw.admin_file(&sha1_hex(&fresh)).expect("known content");
    assert_eq!(f.refs, Some(written.len() as u64), "{f:?}");

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
    let deadline = Instant::now() + job_bound();
    let before_kill = loop {
        let j = job(&gw, id);
        let deleted: usize = j["deleted"].parse().expect("number");
        if deleted >= n / 2 {
            break deleted;
        }
        assert!(Instant::now() < deadline, "the job made no progress: {j:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(before_kill < n, "the job ended before the kill");
    gw.kill9();
    let restarted = Instant::now();
    gw.restart();
    let done = wait_state(&gw, id, "done").await;
    println!(
        "killed after {before_kill} of {n} deleted; restarted and done in {:.1} s: {done:?}",
        restarted.elapsed().as_secs_f64()
    );
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

/// Starts an upload of `key` in `bucket` with one part of `part`; the upload's id.
async fn upload_in_progress(gw: &Gateway, bucket: &str, key: &str, part: &[u8]) -> String {
    let s3 = gw.client();
    let up = s3
        .create_multipart_upload()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .expect("CreateMultipartUpload");
    let id = up.upload_id().expect("upload id").to_string();
    s3.upload_part()
        .bucket(bucket)
        .key(key)
        .upload_id(&id)
        .part_number(1)
        .body(ByteStream::from(part.to_vec()))
        .send()
        .await
        .expect("UploadPart");
    id
}

async fn bucket_exists(gw: &Gateway, bucket: &str) -> bool {
    let listed = gw
        .client()
        .list_buckets()
        .send()
        .await
        .expect("ListBuckets");
    listed.buckets().iter().any(|b| b.name() == Some(bucket))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_is_deleted_with_its_objects_and_uploads_on_force() {
    let n = objects().min(1500);
    let mut gw = Gateway::start_with(&["--job-chunk-keys", "50", "--job-pause-ms", "2"], &[]);
    let s3 = gw.client();
    create_bucket(&s3, "mail").await;
    let body = random_body(6, 3_000);
    fill(&gw, n, &body).await;
    let own = random_body(7, 4_000);
    put_bytes(&s3, "mail", "other/own", &own).await;
    let part = random_body(8, 100_000);
    upload_in_progress(&gw, "mail", "big", &part).await;
    create_bucket(&s3, "neighbour").await;
    put_bytes(&s3, "neighbour", "n", &own).await;

    // Without --force: a plain DeleteBucket, refused with a message that says why.
    let run = admin_cli(&gw, &["buckets", "delete", "mail"]);
    assert_ne!(run.code, Some(0), "{run}");
    assert!(
        run.stderr.contains("not empty") && run.stderr.contains("--force"),
        "{run}"
    );
    assert!(bucket_exists(&gw, "mail").await);

    let run = admin_cli(&gw, &["buckets", "delete", "mail", "--force", "--watch"]);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.contains("done"), "{run}");
    assert!(run.stderr.contains(": done"), "--watch lines: {run}");
    assert!(
        !bucket_exists(&gw, "mail").await,
        "the bucket is still listed"
    );
    assert!(bucket_exists(&gw, "neighbour").await);
    let run = cli(&gw, &["list"]);
    assert!(run.stdout.contains("mail/"), "{run}");

    // Every reference was released: the objects' content and the part's.
    for (what, content) in [("objects", &body), ("part", &part)] {
        let f = gw.admin_file(&sha1_hex(content)).expect("known content");
        assert_eq!(f.state, "deleting", "{what}: {f:?}");
    }
    let f = gw.admin_file(&sha1_hex(&own)).expect("known content");
    assert_eq!(
        f.refs,
        Some(1),
        "only the neighbour's reference is left: {f:?}"
    );
    // The name is free again, and the new bucket inherits nothing.
    create_bucket(&s3, "mail").await;
    assert!(keys_under(&gw, "").await.is_empty());
    let uploads = s3
        .list_multipart_uploads()
        .bucket("mail")
        .send()
        .await
        .expect("ListMultipartUploads");
    assert!(uploads.uploads().is_empty(), "{uploads:?}");
    // A plain delete of the empty bucket works; of a missing one, says so.
    let run = admin_cli(&gw, &["buckets", "delete", "mail"]);
    assert_eq!(run.code, Some(0), "{run}");
    let run = admin_cli(&gw, &["buckets", "delete", "mail", "--force"]);
    assert_ne!(run.code, Some(0), "{run}");
    gw.kill9();
    fsck_clean(&gw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_written_during_a_bucket_delete_keeps_the_bucket() {
    // Enough chunks (at 20 ms each) that the write below lands while the job runs.
    let n = objects().clamp(200, 600);
    let mut gw = Gateway::start_with(&["--job-chunk-keys", "10", "--job-pause-ms", "20"], &[]);
    let s3 = gw.client();
    create_bucket(&s3, "mail").await;
    let body = random_body(9, 2_000);
    fill(&gw, n, &body).await;
    let part = random_body(10, 100_000);
    upload_in_progress(&gw, "mail", "big", &part).await;

    let id = post_job(&gw, r#"{"op":"delete-bucket","bucket":"mail"}"#);
    assert_eq!(job(&gw, id)["op"], "delete-bucket");
    // A writer races the job: its object was written after the start, so it survives,
    // and the bucket with it.
    let late = random_body(11, 5_000);
    put_bytes(&s3, "mail", "box/000000-late", &late).await;
    let failed = wait_state(&gw, id, "failed").await;
    assert!(
        failed["error"].contains("written after the job started")
            && failed["error"].contains("box/000000-late"),
        "{failed:?}"
    );
    assert_eq!(failed["deleted"], n.to_string(), "{failed:?}");
    assert!(bucket_exists(&gw, "mail").await);
    assert_eq!(keys_under(&gw, "").await, ["box/000000-late"]);
    assert_eq!(get_bytes(&s3, "mail", "box/000000-late").await, late);
    // The uploads went all the same: they belong to no object anyone wrote.
    for content in [&body, &part] {
        let f = gw.admin_file(&sha1_hex(content)).expect("known content");
        assert_eq!(f.state, "deleting", "{f:?}");
    }
    // A prefix makes no sense for this op, and an unknown bucket is refused.
    let auth = format!("Bearer {}", gw.admin_token());
    for (body, status) in [
        (
            r#"{"op":"delete-bucket","bucket":"mail","prefix":"x"}"#,
            400,
        ),
        (r#"{"op":"delete-bucket","bucket":"nope"}"#, 404),
    ] {
        let r = gw
            .raw(
                "POST",
                "/_admin/jobs",
                &[("authorization", auth.as_str())],
                body.as_bytes(),
            )
            .expect("POST /_admin/jobs");
        assert_eq!(r.status, status, "{body}: {}", r.text());
    }
    gw.kill9();
    fsck_clean(&gw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_delete_killed_midway_resumes_and_finishes() {
    let n = objects();
    let mut gw = Gateway::start_with(&["--job-chunk-keys", "20", "--job-pause-ms", "10"], &[]);
    let s3 = gw.client();
    create_bucket(&s3, "mail").await;
    let body = random_body(12, 2_000);
    fill(&gw, n, &body).await;
    let part = random_body(13, 100_000);
    upload_in_progress(&gw, "mail", "big", &part).await;
    let run = admin_cli(&gw, &["buckets", "delete", "mail", "--force"]);
    assert_eq!(run.code, Some(0), "{run}");
    let id: u64 = run
        .stdout
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("job "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no job id: {run}"));
    let deadline = Instant::now() + job_bound();
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
    assert!(!bucket_exists(&gw, "mail").await);
    for content in [&body, &part] {
        let f = gw.admin_file(&sha1_hex(content)).expect("known content");
        assert_eq!(f.state, "deleting", "{f:?}");
    }
    gw.kill9();
    fsck_clean(&gw);
}
