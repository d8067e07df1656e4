//! Lifecycle end to end: Put/Get/DeleteBucketLifecycleConfiguration and their validation,
//! `x-amz-expiration` on PUT, HEAD and GET, the background expiry with
//! `--lifecycle-day-secs 2` (exactly the matching objects go, their content leaves both
//! disks through Valkyrie's quarantine, fsck stays clean), abandoned multipart uploads
//! aborted by a rule and by `--upload-max-age-secs` (their part files leave the disks),
//! and DeleteBucket refused while uploads are in progress (as S3), so no upload outlives
//! its bucket.
//!
//! Every wait is a bounded poll.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::{ByteStream, DateTime};
use aws_sdk_s3::types::{
    AbortIncompleteMultipartUpload, BucketLifecycleConfiguration, ExpirationStatus,
    LifecycleExpiration, LifecycleRule, LifecycleRuleAndOperator, LifecycleRuleFilter,
};
use e2e::{
    Gateway, create_bucket, get_bytes, poll_until, put_bytes, random_body, s3_error, sha1_hex,
};

/// Short Valkyrie settings: a deletion pass and a scrub pass a second, quarantine and
/// slave delay of 3 s (as tests/tests/valkyrie.rs).
const FAST_VALKYRIE: &[&str] = &[
    "--quarantine-secs",
    "3",
    "--slave-delay-secs",
    "3",
    "--scrub-interval-secs",
    "1",
];

/// A config file for `serve --config`, kept while the value lives.
struct ConfigFile {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl ConfigFile {
    fn new(toml: &str) -> ConfigFile {
        let dir = tempfile::Builder::new()
            .prefix("e2e-lifecycle-conf-")
            .tempdir()
            .expect("temp dir for the config");
        let path = dir.path().join("gateway.toml");
        std::fs::write(&path, toml).expect("write config");
        ConfigFile { _dir: dir, path }
    }

    fn arg(&self) -> &str {
        self.path.to_str().expect("utf-8 temp path")
    }
}

fn start(config: &ConfigFile, extra: &[&str]) -> Gateway {
    let mut args = vec!["--config", config.arg()];
    args.extend_from_slice(FAST_VALKYRIE);
    args.extend_from_slice(extra);
    Gateway::start_with(&args, &[])
}

#[track_caller]
fn wait_for(gw: &Gateway, what: &str, limit_secs: u64, cond: impl FnMut() -> bool) {
    if !poll_until(Duration::from_secs(limit_secs), cond) {
        panic!(
            "timed out after {limit_secs} s waiting for: {what}\n{}",
            gw.log_tail(80)
        );
    }
}

/// `<root>/<aa>/<bb>/<sha1>` and its quarantined copies: every file of a content.
fn files_of(root: &Path, sha1: &str) -> Vec<String> {
    let dir = root.join(&sha1[0..2]).join(&sha1[2..4]);
    std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(sha1))
                .collect()
        })
        .unwrap_or_default()
}

fn on_no_disk(gw: &Gateway, sha1: &str) -> bool {
    (0..2).all(|d| files_of(&gw.disk_dir(d), sha1).is_empty())
}

fn on_both_disks(gw: &Gateway, sha1: &str) -> bool {
    (0..2).all(|d| gw.content_path(d, sha1).exists())
}

#[track_caller]
fn assert_fsck_clean(gw: &Gateway) {
    e2e::assert_fsck_clean(gw.data_dir());
}

fn rule(
    id: &str,
    filter: LifecycleRuleFilter,
) -> aws_sdk_s3::types::builders::LifecycleRuleBuilder {
    LifecycleRule::builder()
        .id(id)
        .filter(filter)
        .status(ExpirationStatus::Enabled)
}

fn days(n: i32) -> LifecycleExpiration {
    LifecycleExpiration::builder().days(n).build()
}

fn prefix(p: &str) -> LifecycleRuleFilter {
    LifecycleRuleFilter::builder().prefix(p).build()
}

async fn put_rules(s3: &Client, bucket: &str, rules: Vec<LifecycleRule>) {
    let config = BucketLifecycleConfiguration::builder()
        .set_rules(Some(rules))
        .build()
        .expect("lifecycle configuration");
    s3.put_bucket_lifecycle_configuration()
        .bucket(bucket)
        .lifecycle_configuration(config)
        .send()
        .await
        .expect("PutBucketLifecycleConfiguration");
}

async fn keys(s3: &Client, bucket: &str) -> Vec<String> {
    let out = s3
        .list_objects_v2()
        .bucket(bucket)
        .send()
        .await
        .expect("ListObjectsV2");
    out.contents()
        .iter()
        .filter_map(|o| o.key().map(str::to_string))
        .collect()
}

/// Lists keys without awaiting inside a sync poll.
fn keys_now(s3: &Client, bucket: &str) -> Vec<String> {
    let handle = tokio::runtime::Handle::current();
    tokio::task::block_in_place(|| handle.block_on(keys(s3, bucket)))
}

// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_removes_exactly_what_the_rules_match() {
    // The day length from the config file key (the flag is the same contract).
    let conf = ConfigFile::new("lifecycle_day_secs = 2\n[valkyrie]\ndeletion_interval_secs = 1\n");
    let mut gw = start(&conf, &[]);
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    create_bucket(&s3, "dated").await;

    let disabled = rule("off", prefix("keep/"))
        .status(ExpirationStatus::Disabled)
        .expiration(days(1))
        .build()
        .expect("rule");
    let and = LifecycleRuleFilter::builder()
        .and(
            LifecycleRuleAndOperator::builder()
                .prefix("big/")
                .object_size_greater_than(1000)
                .build(),
        )
        .build();
    put_rules(
        &s3,
        "bkt",
        vec![
            rule("logs", prefix("logs/"))
                .expiration(days(1))
                .build()
                .expect("rule"),
            rule("big", and).expiration(days(1)).build().expect("rule"),
            rule(
                "tiny",
                LifecycleRuleFilter::builder()
                    .object_size_less_than(20)
                    .build(),
            )
            .expiration(days(1))
            .build()
            .expect("rule"),
            disabled,
        ],
    )
    .await;
    let past = LifecycleExpiration::builder()
        .date(DateTime::from_secs(1_577_836_800)) // 2020-01-01T00:00:00Z
        .build();
    put_rules(
        &s3,
        "dated",
        vec![
            rule("past", prefix("d/"))
                .expiration(past)
                .build()
                .expect("rule"),
        ],
    )
    .await;

    // Expire: logs/a (prefix), big/x (And: prefix and size), tiny (size), dated d/1 (Date).
    // Keep: keep/a (disabled rule), big/y (too small for "big", too big for "tiny"),
    // other/z, dated e/1, and keep/dup which shares logs/a's content.
    let logs_body = random_body(1, 3000);
    let big_x = random_body(2, 5000);
    let dated_body = random_body(3, 700);
    let survivors_bkt = ["big/y", "keep/a", "keep/dup", "other/z"];
    let put = s3
        .put_object()
        .bucket("bkt")
        .key("logs/a")
        .body(ByteStream::from(logs_body.clone()))
        .send()
        .await
        .expect("PUT logs/a");
    let expiration = put
        .expiration()
        .expect("x-amz-expiration on PUT")
        .to_string();
    assert!(
        expiration.starts_with("expiry-date=\"") && expiration.ends_with("GMT\", rule-id=\"logs\""),
        "{expiration}"
    );
    put_bytes(&s3, "bkt", "keep/dup", &logs_body).await;
    put_bytes(&s3, "bkt", "big/x", &big_x).await;
    put_bytes(&s3, "bkt", "tiny", b"0123456789").await;
    put_bytes(&s3, "bkt", "big/y", &random_body(4, 500)).await;
    put_bytes(&s3, "bkt", "keep/a", &random_body(5, 500)).await;
    put_bytes(&s3, "bkt", "other/z", &random_body(6, 500)).await;
    let put = s3
        .put_object()
        .bucket("dated")
        .key("d/1")
        .body(ByteStream::from(dated_body.clone()))
        .send()
        .await
        .expect("PUT d/1");
    assert_eq!(
        put.expiration(),
        Some("expiry-date=\"Wed, 01 Jan 2020 00:00:00 GMT\", rule-id=\"past\"")
    );
    put_bytes(&s3, "dated", "e/1", &random_body(7, 700)).await;

    // HEAD and GET carry the header too (a lifecycle day is 2 s: logs/a lives at least
    // 2 s more); objects no rule matches carry none.
    let head = s3.head_object().bucket("bkt").key("logs/a").send().await;
    assert_eq!(
        head.expect("HEAD logs/a").expiration(),
        Some(expiration.as_str())
    );
    let get = s3.get_object().bucket("bkt").key("logs/a").send().await;
    assert_eq!(
        get.expect("GET logs/a").expiration(),
        Some(expiration.as_str())
    );
    let head = s3.head_object().bucket("bkt").key("keep/a").send().await;
    assert_eq!(head.expect("HEAD keep/a").expiration(), None);
    let head = s3.head_object().bucket("bkt").key("big/y").send().await;
    assert_eq!(head.expect("HEAD big/y").expiration(), None);

    wait_for(&gw, "the matching objects expired", 30, || {
        keys_now(&s3, "bkt") == survivors_bkt && keys_now(&s3, "dated") == ["e/1"]
    });
    let (status, code) = s3_error(s3.get_object().bucket("bkt").key("logs/a").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchKey"));
    // The shared content lives on for keep/dup; big/x's and d/1's content leaves both
    // disks through quarantine.
    assert_eq!(get_bytes(&s3, "bkt", "keep/dup").await, logs_body);
    let gone = [
        sha1_hex(&big_x),
        sha1_hex(&dated_body),
        sha1_hex(b"0123456789"),
    ];
    wait_for(&gw, "expired content gone from both disks", 40, || {
        gone.iter().all(|s| on_no_disk(&gw, s))
    });
    assert!(on_both_disks(&gw, &sha1_hex(&logs_body)));

    // A new object under an expiring prefix is there after it is written and carries
    // its own, later expiry.
    let put = s3
        .put_object()
        .bucket("bkt")
        .key("logs/new")
        .body(ByteStream::from_static(b"written after the pass"))
        .send()
        .await
        .expect("PUT logs/new");
    assert!(
        put.expiration()
            .is_some_and(|e| e.contains("rule-id=\"logs\""))
    );
    assert_eq!(
        get_bytes(&s3, "bkt", "logs/new").await,
        b"written after the pass"
    );
    for key in survivors_bkt {
        s3.head_object()
            .bucket("bkt")
            .key(key)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{key} must survive: {e:?}"));
    }

    gw.kill9();
    assert_fsck_clean(&gw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_uploads_are_aborted_by_a_rule_and_by_the_age_bound() {
    let conf = ConfigFile::new("[valkyrie]\ndeletion_interval_secs = 1\n");
    let mut gw = start(
        &conf,
        &["--lifecycle-day-secs", "1", "--upload-max-age-secs", "12"],
    );
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    put_rules(
        &s3,
        "bkt",
        vec![
            rule("abort", prefix("tmp/"))
                .abort_incomplete_multipart_upload(
                    AbortIncompleteMultipartUpload::builder()
                        .days_after_initiation(1)
                        .build(),
                )
                .build()
                .expect("rule"),
        ],
    )
    .await;

    let start_upload = |key: &'static str, seed: u64| {
        let s3 = s3.clone();
        async move {
            let up = s3
                .create_multipart_upload()
                .bucket("bkt")
                .key(key)
                .send()
                .await
                .expect("CreateMultipartUpload");
            let id = up.upload_id().expect("upload id").to_string();
            let body = random_body(seed, 200_000);
            s3.upload_part()
                .bucket("bkt")
                .key(key)
                .upload_id(&id)
                .part_number(1)
                .body(ByteStream::from(body.clone()))
                .send()
                .await
                .expect("UploadPart");
            (id, sha1_hex(&body))
        }
    };
    let started = Instant::now();
    let (_, by_rule_sha1) = start_upload("tmp/abandoned", 11).await;
    let (kept_id, by_age_sha1) = start_upload("keep/abandoned", 12).await;
    assert!(on_both_disks(&gw, &by_rule_sha1) && on_both_disks(&gw, &by_age_sha1));

    let uploads = |s3: &Client| {
        let handle = tokio::runtime::Handle::current();
        tokio::task::block_in_place(|| {
            handle.block_on(async {
                let out = s3
                    .list_multipart_uploads()
                    .bucket("bkt")
                    .send()
                    .await
                    .expect("ListMultipartUploads");
                out.uploads()
                    .iter()
                    .filter_map(|u| u.key().map(str::to_string))
                    .collect::<Vec<_>>()
            })
        })
    };
    // The rule (one 1-second day) aborts tmp/ within a few seconds; keep/ waits for the
    // 12 s bound, which cannot have acted on either before 12 s after `started`.
    wait_for(&gw, "the rule aborted tmp/abandoned", 20, || {
        uploads(&s3) == ["keep/abandoned"]
    });
    assert!(
        started.elapsed() < Duration::from_secs(12),
        "too slow to tell the rule from the age bound: {:?}",
        started.elapsed()
    );
    wait_for(&gw, "the age bound aborted keep/abandoned", 30, || {
        uploads(&s3).is_empty()
    });
    assert!(started.elapsed() >= Duration::from_secs(12));
    let (status, code) = s3_error(
        s3.upload_part()
            .bucket("bkt")
            .key("keep/abandoned")
            .upload_id(&kept_id)
            .part_number(2)
            .body(ByteStream::from_static(b"late"))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (404, "NoSuchUpload"));
    wait_for(
        &gw,
        "both uploads' part files gone from both disks",
        40,
        || on_no_disk(&gw, &by_rule_sha1) && on_no_disk(&gw, &by_age_sha1),
    );

    gw.kill9();
    assert_fsck_clean(&gw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_bucket_leaves_no_upload_behind() {
    let conf = ConfigFile::new("[valkyrie]\ndeletion_interval_secs = 1\n");
    let mut gw = start(&conf, &[]);
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let up = s3
        .create_multipart_upload()
        .bucket("bkt")
        .key("big")
        .send()
        .await
        .expect("CreateMultipartUpload");
    let id = up.upload_id().expect("upload id").to_string();
    let part = random_body(21, 100_000);
    let etag = s3
        .upload_part()
        .bucket("bkt")
        .key("big")
        .upload_id(&id)
        .part_number(1)
        .body(ByteStream::from(part.clone()))
        .send()
        .await
        .expect("UploadPart")
        .e_tag()
        .map(str::to_string);

    // As S3: uploads in progress keep the bucket from being deleted.
    let (status, code) = s3_error(s3.delete_bucket().bucket("bkt").send().await);
    assert_eq!((status, code.as_str()), (409, "BucketNotEmpty"));
    s3.abort_multipart_upload()
        .bucket("bkt")
        .key("big")
        .upload_id(&id)
        .send()
        .await
        .expect("AbortMultipartUpload");
    s3.delete_bucket()
        .bucket("bkt")
        .send()
        .await
        .expect("DeleteBucket once the upload is gone");

    // A bucket re-created under the same name inherits nothing.
    create_bucket(&s3, "bkt").await;
    let listed = s3
        .list_multipart_uploads()
        .bucket("bkt")
        .send()
        .await
        .expect("ListMultipartUploads");
    assert!(listed.uploads().is_empty(), "{listed:?}");
    let completed = aws_sdk_s3::types::CompletedMultipartUpload::builder()
        .parts(
            aws_sdk_s3::types::CompletedPart::builder()
                .part_number(1)
                .set_e_tag(etag)
                .build(),
        )
        .build();
    let (status, code) = s3_error(
        s3.complete_multipart_upload()
            .bucket("bkt")
            .key("big")
            .upload_id(&id)
            .multipart_upload(completed)
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (404, "NoSuchUpload"));
    assert_eq!(keys(&s3, "bkt").await, Vec::<String>::new());
    let sha1 = sha1_hex(&part);
    wait_for(&gw, "the part's files gone from both disks", 40, || {
        on_no_disk(&gw, &sha1)
    });

    gw.kill9();
    assert_fsck_clean(&gw);
}

#[tokio::test]
async fn lifecycle_configurations_are_validated_like_s3() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;

    let (status, code) = s3_error(
        s3.get_bucket_lifecycle_configuration()
            .bucket("bkt")
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (404, "NoSuchLifecycleConfiguration")
    );

    // A configuration reads back as written.
    let and = LifecycleRuleFilter::builder()
        .and(
            LifecycleRuleAndOperator::builder()
                .prefix("mail/")
                .object_size_greater_than(10)
                .object_size_less_than(1000)
                .build(),
        )
        .build();
    put_rules(
        &s3,
        "bkt",
        vec![
            rule("a", and.clone())
                .expiration(days(30))
                .build()
                .expect("rule"),
            rule("b", prefix("tmp/"))
                .expiration(
                    LifecycleExpiration::builder()
                        .date(DateTime::from_secs(1_893_456_000)) // 2030-01-01
                        .build(),
                )
                .abort_incomplete_multipart_upload(
                    AbortIncompleteMultipartUpload::builder()
                        .days_after_initiation(2)
                        .build(),
                )
                .build()
                .expect("rule"),
        ],
    )
    .await;
    let got = s3
        .get_bucket_lifecycle_configuration()
        .bucket("bkt")
        .send()
        .await
        .expect("GetBucketLifecycleConfiguration");
    let rules = got.rules();
    assert_eq!(rules.len(), 2);
    assert_eq!(rules[0].id(), Some("a"));
    assert_eq!(rules[0].filter(), Some(&and));
    assert_eq!(rules[0].expiration().and_then(|e| e.days()), Some(30));
    assert_eq!(
        rules[1].expiration().and_then(|e| e.date()),
        Some(&DateTime::from_secs(1_893_456_000))
    );
    assert_eq!(
        rules[1]
            .abort_incomplete_multipart_upload()
            .and_then(|a| a.days_after_initiation()),
        Some(2)
    );

    // Refusals, sent raw so that the SDK's own checks do not get in the way.
    let put_raw = |xml: String| {
        let body = format!(
            r#"<LifecycleConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">{xml}</LifecycleConfiguration>"#
        );
        let resp = gw
            .signed("PUT", "/bkt?lifecycle")
            .body(body.as_bytes())
            .send();
        (resp.status, resp.error_code().unwrap_or_default())
    };
    let with = |inner: &str| format!("<Rule><ID>r</ID><Status>Enabled</Status>{inner}</Rule>");
    let expire_days = |d: &str| {
        with(&format!(
            "<Filter><Prefix>x/</Prefix></Filter><Expiration><Days>{d}</Days></Expiration>"
        ))
    };
    let invalid = (400, "InvalidArgument".to_string());
    let malformed = (400, "MalformedXML".to_string());
    let not_implemented = (501, "NotImplemented".to_string());
    assert_eq!(put_raw(expire_days("0")), invalid, "Days 0");
    assert_eq!(
        put_raw(format!("{}{}", expire_days("1"), expire_days("2"))),
        invalid,
        "duplicate ID"
    );
    assert_eq!(
        put_raw(format!(
            "<Rule><ID>{}</ID><Status>Enabled</Status><Filter/><Expiration><Days>1</Days></Expiration></Rule>",
            "i".repeat(256)
        )),
        invalid,
        "ID over 255 characters"
    );
    assert_eq!(
        put_raw(with(
            "<Filter/><Expiration><Date>2030-01-01T12:00:00.000Z</Date></Expiration>"
        )),
        invalid,
        "Date not at midnight"
    );
    assert_eq!(
        put_raw(with(
            "<Filter/><Expiration><Date>someday</Date></Expiration>"
        )),
        invalid,
        "Date not a date"
    );
    assert_eq!(
        put_raw("<Rule><ID>r</ID><Status>Maybe</Status><Filter/><Expiration><Days>1</Days></Expiration></Rule>".into()),
        malformed,
        "bad Status"
    );
    assert_eq!(
        put_raw("<Rule><ID>r</ID>".into()),
        malformed,
        "not well-formed"
    );
    assert_eq!(put_raw(String::new()), malformed, "no rule");
    assert_eq!(
        put_raw(with(
            "<Filter/><Transition><Days>1</Days><StorageClass>GLACIER</StorageClass></Transition>"
        )),
        not_implemented,
        "Transition"
    );
    assert_eq!(
        put_raw(with(
            "<Filter/><NoncurrentVersionTransition><NoncurrentDays>1</NoncurrentDays><StorageClass>GLACIER</StorageClass></NoncurrentVersionTransition>"
        )),
        not_implemented,
        "noncurrent version transition"
    );
    assert_eq!(
        put_raw(with(
            "<Filter><Tag><Key>aws:k</Key><Value>v</Value></Tag></Filter><Expiration><Days>1</Days></Expiration>"
        )),
        (400, "InvalidTag".to_string()),
        "a reserved tag key in a filter"
    );
    assert_eq!(
        put_raw(with(
            "<Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter><AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation></AbortIncompleteMultipartUpload>"
        )),
        (400, "InvalidRequest".to_string()),
        "an upload abort with a tag filter"
    );
    assert_eq!(
        put_raw(with("<Filter/>")),
        (400, "InvalidRequest".to_string()),
        "no action"
    );
    // None of the refusals replaced the stored configuration.
    let got = s3
        .get_bucket_lifecycle_configuration()
        .bucket("bkt")
        .send()
        .await
        .expect("GetBucketLifecycleConfiguration");
    assert_eq!(got.rules().len(), 2);

    s3.delete_bucket_lifecycle()
        .bucket("bkt")
        .send()
        .await
        .expect("DeleteBucketLifecycle");
    let (status, code) = s3_error(
        s3.get_bucket_lifecycle_configuration()
            .bucket("bkt")
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (404, "NoSuchLifecycleConfiguration")
    );
    let (status, code) = s3_error(
        s3.get_bucket_lifecycle_configuration()
            .bucket("nobucket")
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (404, "NoSuchBucket"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_goes_on_after_kill_9() {
    let conf = ConfigFile::new("[valkyrie]\ndeletion_interval_secs = 1\n");
    let mut gw = start(&conf, &["--lifecycle-day-secs", "2"]);
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    put_rules(
        &s3,
        "bkt",
        vec![
            rule("logs", prefix("logs/"))
                .expiration(days(1))
                .build()
                .expect("rule"),
        ],
    )
    .await;
    for i in 0..50 {
        put_bytes(
            &s3,
            "bkt",
            &format!("logs/{i:02}"),
            &random_body(100 + i, 300),
        )
        .await;
    }
    put_bytes(&s3, "bkt", "kept", &random_body(99, 300)).await;
    // Killed (restart is kill -9, then start) while most are not due yet: the sweep
    // starts again on the restarted leader.
    gw.restart();
    let s3 = gw.client();
    wait_for(&gw, "the rules acting after the restart", 30, || {
        keys_now(&s3, "bkt") == ["kept"]
    });
    gw.kill9();
    assert_fsck_clean(&gw);
}

/// The versions of `key` (ids, newest first) and whether each is a delete marker.
fn versions_now(s3: &Client, bucket: &str, key: &str) -> Vec<(String, bool)> {
    let handle = tokio::runtime::Handle::current();
    tokio::task::block_in_place(|| {
        handle.block_on(async {
            let out = s3
                .list_object_versions()
                .bucket(bucket)
                .prefix(key)
                .send()
                .await
                .expect("ListObjectVersions");
            let mut all: Vec<(String, bool, i64)> = Vec::new();
            for v in out.versions().iter().filter(|v| v.key() == Some(key)) {
                let modified = v.last_modified().map_or(0, |t| t.to_millis().unwrap_or(0));
                all.push((v.version_id().unwrap_or("").to_string(), false, modified));
            }
            for m in out.delete_markers().iter().filter(|m| m.key() == Some(key)) {
                let modified = m.last_modified().map_or(0, |t| t.to_millis().unwrap_or(0));
                all.push((m.version_id().unwrap_or("").to_string(), true, modified));
            }
            // Newest first; numbered ids of one key sort by their number.
            all.sort_by(|a, b| b.0.cmp(&a.0));
            all.into_iter()
                .map(|(id, marker, _)| (id, marker))
                .collect()
        })
    })
}

/// Lifecycle on a versioned bucket, with days of 2 s: noncurrent versions go once their
/// NoncurrentDays have passed, beyond the newest NewerNoncurrentVersions kept (their
/// content released); a delete marker left alone goes (ExpiredObjectDeleteMarker); an
/// expired current version gets a delete marker on top and stays readable by id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_on_a_versioned_bucket_keeps_versions_by_the_rules() {
    use aws_sdk_s3::types::{
        BucketVersioningStatus, NoncurrentVersionExpiration, VersioningConfiguration,
    };
    let conf = ConfigFile::new("[valkyrie]\ndeletion_interval_secs = 1\n");
    let mut gw = start(&conf, &["--lifecycle-day-secs", "2"]);
    let s3 = gw.client();
    create_bucket(&s3, "vers").await;
    s3.put_bucket_versioning()
        .bucket("vers")
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .expect("enable versioning");
    let (b1, b2, b3, b4) = (
        random_body(71, 3000),
        random_body(72, 3100),
        random_body(73, 3200),
        random_body(74, 3300),
    );
    let put = |key: &'static str, body: Vec<u8>| {
        let s3 = s3.clone();
        async move {
            s3.put_object()
                .bucket("vers")
                .key(key)
                .body(ByteStream::from(body))
                .send()
                .await
                .expect("put")
                .version_id()
                .expect("version id")
                .to_string()
        }
    };
    let v1 = put("mail/a", b1.clone()).await;
    let v2 = put("mail/a", b2.clone()).await;
    let v3 = put("mail/a", b3.clone()).await;
    // A key whose only version will be a delete marker.
    let lone = put("mail/lone", b4.clone()).await;
    s3.delete_object()
        .bucket("vers")
        .key("mail/lone")
        .send()
        .await
        .expect("marker");
    s3.delete_object()
        .bucket("vers")
        .key("mail/lone")
        .version_id(&lone)
        .send()
        .await
        .expect("remove the version under the marker");
    let current = put("tmp/x", b4.clone()).await;

    let versions_rule = rule("versions", prefix("mail/"))
        .noncurrent_version_expiration(
            NoncurrentVersionExpiration::builder()
                .noncurrent_days(1)
                .newer_noncurrent_versions(1)
                .build(),
        )
        .expiration(
            LifecycleExpiration::builder()
                .expired_object_delete_marker(true)
                .build(),
        )
        .build()
        .expect("rule");
    let current_rule = rule("current", prefix("tmp/"))
        .expiration(days(1))
        .build()
        .expect("rule");
    put_rules(&s3, "vers", vec![versions_rule, current_rule]).await;
    let got = s3
        .get_bucket_lifecycle_configuration()
        .bucket("vers")
        .send()
        .await
        .expect("get rules");
    let versions_got = got.rules()[0]
        .noncurrent_version_expiration()
        .expect("noncurrent expiration kept");
    assert_eq!(versions_got.noncurrent_days(), Some(1));
    assert_eq!(versions_got.newer_noncurrent_versions(), Some(1));

    let started = Instant::now();
    wait_for(
        &gw,
        "v1 expired, v2 kept as the one newer noncurrent",
        30,
        || versions_now(&s3, "vers", "mail/a") == [(v3.clone(), false), (v2.clone(), false)],
    );
    wait_for(&gw, "the lone delete marker removed", 30, || {
        versions_now(&s3, "vers", "mail/lone").is_empty()
    });
    wait_for(&gw, "a delete marker on top of tmp/x", 30, || {
        let v = versions_now(&s3, "vers", "tmp/x");
        v.len() == 2 && v[0].1 && v[1] == (current.clone(), false)
    });
    println!("versions expired by the rules in {:?}", started.elapsed());
    let gone = s3.get_object().bucket("vers").key("tmp/x").send().await;
    assert_eq!(s3_error(gone), (404, "NoSuchKey".to_string()));
    let kept = s3
        .get_object()
        .bucket("vers")
        .key("tmp/x")
        .version_id(&current)
        .send()
        .await
        .expect("the expired version by id");
    assert_eq!(kept.body.collect().await.expect("body").into_bytes(), b4);
    let v1_gone = s3
        .get_object()
        .bucket("vers")
        .key("mail/a")
        .version_id(&v1)
        .send()
        .await;
    assert_eq!(s3_error(v1_gone).1, "NoSuchVersion");
    // v1's content had no other reference: released, and Valkyrie takes it off the disks.
    wait_for(&gw, "v1's content off both disks", 30, || {
        on_no_disk(&gw, &sha1_hex(&b1))
    });
    assert!(on_both_disks(&gw, &sha1_hex(&b2)));
    assert_eq!(get_bytes(&s3, "vers", "mail/a").await, b3);
    gw.kill9();
    assert_fsck_clean(&gw);
}

/// Tag filters, with days of 2 s: `<Tag>` and `<And>` of a prefix and tags expire exactly
/// the objects that have every tag of the rule (tags set after the PUT count, an object
/// with one of two tags or outside the prefix stays), and noncurrent versions alike;
/// GetBucketLifecycleConfiguration gives the filters back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tag_filters_expire_only_what_has_every_tag() {
    use aws_sdk_s3::types::{
        BucketVersioningStatus, NoncurrentVersionExpiration, Tag, Tagging, VersioningConfiguration,
    };
    let tag = |k: &str, v: &str| Tag::builder().key(k).value(v).build().expect("tag");
    let conf = ConfigFile::new("[valkyrie]\ndeletion_interval_secs = 1\n");
    let mut gw = start(&conf, &["--lifecycle-day-secs", "2"]);
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let one_tag = LifecycleRuleFilter::builder()
        .tag(tag("tier", "tmp"))
        .build();
    let and = LifecycleRuleFilter::builder()
        .and(
            LifecycleRuleAndOperator::builder()
                .prefix("logs/")
                .tags(tag("a", "1"))
                .tags(tag("b", "2"))
                .build(),
        )
        .build();
    put_rules(
        &s3,
        "bkt",
        vec![
            rule("tmp", one_tag)
                .expiration(days(1))
                .build()
                .expect("rule"),
            rule("logs", and).expiration(days(1)).build().expect("rule"),
        ],
    )
    .await;
    let got = s3
        .get_bucket_lifecycle_configuration()
        .bucket("bkt")
        .send()
        .await
        .expect("get rules");
    let filter = got.rules()[0].filter().expect("filter");
    assert_eq!(filter.tag().map(|t| t.key()), Some("tier"));
    let and_got = got.rules()[1]
        .filter()
        .and_then(|f| f.and())
        .expect("And kept");
    assert_eq!(and_got.prefix(), Some("logs/"));
    assert_eq!(and_got.tags().len(), 2);

    let put = |key: &'static str, tags: &'static str| {
        let s3 = s3.clone();
        async move {
            let mut req = s3
                .put_object()
                .bucket("bkt")
                .key(key)
                .body(ByteStream::from(random_body(key.len() as u64, 100)));
            if !tags.is_empty() {
                req = req.tagging(tags);
            }
            req.send().await.expect("put")
        }
    };
    let tmp = put("tmp", "tier=tmp&other=x").await;
    assert!(
        tmp.expiration()
            .is_some_and(|e| e.contains("rule-id=\"tmp\"")),
        "x-amz-expiration by the tag rule"
    );
    let kept = put("kept", "tier=keep").await;
    assert_eq!(kept.expiration(), None);
    put("logs/both", "a=1&b=2").await;
    put("logs/one", "a=1").await;
    put("other/both", "a=1&b=2").await;
    put("late", "").await;
    // Tagged after its PUT: the tags at expiry count.
    s3.put_object_tagging()
        .bucket("bkt")
        .key("late")
        .tagging(
            Tagging::builder()
                .tag_set(tag("tier", "tmp"))
                .build()
                .expect("tagging"),
        )
        .send()
        .await
        .expect("PutObjectTagging");

    // Noncurrent versions by their own tags.
    create_bucket(&s3, "vers").await;
    s3.put_bucket_versioning()
        .bucket("vers")
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .expect("enable versioning");
    let put_version = |key: &'static str, tags: &'static str, seed: u64| {
        let s3 = s3.clone();
        async move {
            let mut req = s3
                .put_object()
                .bucket("vers")
                .key(key)
                .body(ByteStream::from(random_body(seed, 100)));
            if !tags.is_empty() {
                req = req.tagging(tags);
            }
            req.send()
                .await
                .expect("put")
                .version_id()
                .expect("version id")
                .to_string()
        }
    };
    let _tagged_old = put_version("k", "tier=tmp", 81).await;
    let plain_new = put_version("k", "", 82).await;
    let plain_old = put_version("j", "", 83).await;
    let tagged_new = put_version("j", "tier=tmp", 84).await;
    let noncurrent = rule(
        "tmp",
        LifecycleRuleFilter::builder()
            .tag(tag("tier", "tmp"))
            .build(),
    )
    .noncurrent_version_expiration(
        NoncurrentVersionExpiration::builder()
            .noncurrent_days(1)
            .build(),
    )
    .build()
    .expect("rule");
    put_rules(&s3, "vers", vec![noncurrent]).await;

    wait_for(&gw, "the objects with every tag expired", 30, || {
        keys_now(&s3, "bkt") == ["kept", "logs/one", "other/both"]
    });
    wait_for(&gw, "the tagged noncurrent version expired", 30, || {
        versions_now(&s3, "vers", "k") == [(plain_new.clone(), false)]
    });
    // j's noncurrent version has no tags: it stays (its current one is not noncurrent).
    assert_eq!(
        versions_now(&s3, "vers", "j"),
        [(tagged_new.clone(), false), (plain_old.clone(), false)]
    );
    gw.kill9();
    assert_fsck_clean(&gw);
}
