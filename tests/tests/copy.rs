//! CopyObject: within and across buckets, metadata-only (no byte written), the metadata
//! directive, copies onto themselves, x-amz-copy-source-if-* conditions, missing sources and
//! keys that need encoding in x-amz-copy-source.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::DateTime;
use aws_sdk_s3::types::MetadataDirective;
use e2e::{
    Gateway, assert_same_body, create_bucket, encode_key, etag_of, get_bytes, put_bytes,
    random_body, s3_error, sha1_hex,
};

/// Every regular file under `dir` (recursively, `tmp/` at the top excluded) with its size
/// and modification time.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, SystemTime)> {
    fn walk(root: &Path, dir: &Path, depth: usize, out: &mut BTreeMap<PathBuf, (u64, SystemTime)>) {
        assert!(depth < 10, "directory tree too deep at {}", dir.display());
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            let meta = e.metadata().expect("metadata");
            if meta.is_dir() {
                if dir == root && e.file_name() == "tmp" {
                    continue;
                }
                walk(root, &path, depth + 1, out);
            } else {
                out.insert(path, (meta.len(), meta.modified().expect("mtime")));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, 0, &mut out);
    out
}

fn disks_snapshot(gw: &Gateway) -> [BTreeMap<PathBuf, (u64, SystemTime)>; 2] {
    [snapshot(&gw.disk_dir(0)), snapshot(&gw.disk_dir(1))]
}

async fn copy(s3: &Client, source: &str, bucket: &str, key: &str) -> String {
    let out = s3
        .copy_object()
        .copy_source(source)
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap_or_else(|e| panic!("CopyObject {source} -> {bucket}/{key}: {e:?}"));
    out.copy_object_result()
        .and_then(|r| r.e_tag())
        .expect("CopyObjectResult has an ETag")
        .to_string()
}

#[tokio::test]
async fn copy_within_a_bucket_and_across_buckets() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "one").await;
    create_bucket(&s3, "two").await;
    let body = random_body(1, 300_000);
    s3.put_object()
        .bucket("one")
        .key("src")
        .content_type("image/png")
        .metadata("color", "blue")
        .body(body.clone().into())
        .send()
        .await
        .expect("PutObject");

    assert_eq!(
        copy(&s3, "one/src", "one", "same-bucket").await,
        etag_of(&body)
    );
    assert_eq!(
        copy(&s3, "/one/src", "two", "other-bucket").await,
        etag_of(&body)
    );
    for (bucket, key) in [("one", "same-bucket"), ("two", "other-bucket")] {
        let got = s3
            .get_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GetObject {bucket}/{key}: {e:?}"));
        assert_eq!(got.e_tag(), Some(etag_of(&body).as_str()), "{bucket}/{key}");
        assert_eq!(got.content_type(), Some("image/png"), "{bucket}/{key}");
        assert_eq!(
            got.metadata()
                .and_then(|m| m.get("color"))
                .map(String::as_str),
            Some("blue"),
            "{bucket}/{key}"
        );
        let bytes = got.body.collect().await.expect("body").into_bytes();
        assert_same_body(&bytes, &body, &format!("{bucket}/{key}"));
    }
    let f = gw.admin_file(&sha1_hex(&body)).expect("admin record");
    assert_eq!(f.refs, Some(3), "source and two copies: {f:?}");
    // The copies are independent of the source.
    s3.delete_object()
        .bucket("one")
        .key("src")
        .send()
        .await
        .expect("DeleteObject of the source");
    assert_same_body(
        &get_bytes(&s3, "two", "other-bucket").await,
        &body,
        "copy after the source is gone",
    );
    assert_eq!(
        gw.admin_file(&sha1_hex(&body)).expect("admin").refs,
        Some(2)
    );
}

#[tokio::test]
async fn copy_is_metadata_only_no_byte_is_written() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    create_bucket(&s3, "other").await;
    let body = random_body(2, 3 * 1024 * 1024 + 7);
    let sha1 = sha1_hex(&body);
    put_bytes(&s3, "bkt", "src", &body).await;
    assert_eq!(gw.admin_file(&sha1).expect("admin").refs, Some(1));

    let before = disks_snapshot(&gw);
    assert!(
        before.iter().all(|d| !d.is_empty()),
        "the content is on both disks: {before:?}"
    );
    copy(&s3, "bkt/src", "bkt", "copy-1").await;
    let f = gw.admin_file(&sha1).expect("admin");
    assert_eq!((f.state.as_str(), f.refs), ("live", Some(2)), "{f:?}");
    copy(&s3, "bkt/src", "other", "copy-2").await;
    let f = gw.admin_file(&sha1).expect("admin");
    assert_eq!((f.state.as_str(), f.refs), ("live", Some(3)), "{f:?}");
    let after = disks_snapshot(&gw);
    assert_eq!(
        before, after,
        "files (path, size, mtime) on the disks changed during a metadata-only copy"
    );
    assert_same_body(&get_bytes(&s3, "other", "copy-2").await, &body, "copy-2");
}

#[tokio::test]
async fn metadata_directive_copy_keeps_and_replace_takes_the_request() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = b"metadata directive test".to_vec();
    s3.put_object()
        .bucket("bkt")
        .key("src")
        .content_type("text/plain")
        .cache_control("max-age=60")
        .metadata("color", "blue")
        .body(body.clone().into())
        .send()
        .await
        .expect("PutObject");

    // COPY (explicit): the request's content type and metadata are ignored.
    s3.copy_object()
        .copy_source("bkt/src")
        .bucket("bkt")
        .key("copied")
        .metadata_directive(MetadataDirective::Copy)
        .content_type("application/json")
        .metadata("shape", "round")
        .send()
        .await
        .expect("CopyObject COPY");
    let head = s3
        .head_object()
        .bucket("bkt")
        .key("copied")
        .send()
        .await
        .expect("HeadObject");
    assert_eq!(head.content_type(), Some("text/plain"));
    assert_eq!(head.cache_control(), Some("max-age=60"));
    let meta = head.metadata().cloned().unwrap_or_default();
    assert_eq!(
        meta.into_iter().collect::<BTreeMap<_, _>>(),
        BTreeMap::from([("color".to_string(), "blue".to_string())]),
        "COPY keeps the source's metadata"
    );

    // REPLACE: only what the request says.
    s3.copy_object()
        .copy_source("bkt/src")
        .bucket("bkt")
        .key("replaced")
        .metadata_directive(MetadataDirective::Replace)
        .content_type("application/json")
        .metadata("shape", "round")
        .send()
        .await
        .expect("CopyObject REPLACE");
    let head = s3
        .head_object()
        .bucket("bkt")
        .key("replaced")
        .send()
        .await
        .expect("HeadObject");
    assert_eq!(head.content_type(), Some("application/json"));
    assert_eq!(
        head.cache_control(),
        None,
        "REPLACE drops the source's Cache-Control"
    );
    let meta = head.metadata().cloned().unwrap_or_default();
    assert_eq!(
        meta.into_iter().collect::<BTreeMap<_, _>>(),
        BTreeMap::from([("shape".to_string(), "round".to_string())]),
        "REPLACE takes the request's metadata"
    );
    assert_eq!(get_bytes(&s3, "bkt", "replaced").await, body);
}

#[tokio::test]
async fn copy_onto_itself_needs_replace() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(3, 5000);
    s3.put_object()
        .bucket("bkt")
        .key("self")
        .metadata("version", "1")
        .body(body.clone().into())
        .send()
        .await
        .expect("PutObject");

    let (status, code) = s3_error(
        s3.copy_object()
            .copy_source("bkt/self")
            .bucket("bkt")
            .key("self")
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (400, "InvalidRequest"),
        "self-copy without REPLACE"
    );
    let (status, code) = s3_error(
        s3.copy_object()
            .copy_source("bkt/self")
            .bucket("bkt")
            .key("self")
            .metadata_directive(MetadataDirective::Copy)
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (400, "InvalidRequest"),
        "self-copy with COPY"
    );

    s3.copy_object()
        .copy_source("bkt/self")
        .bucket("bkt")
        .key("self")
        .metadata_directive(MetadataDirective::Replace)
        .metadata("version", "2")
        .content_type("text/x-new")
        .send()
        .await
        .expect("self-copy with REPLACE");
    let got = s3
        .get_object()
        .bucket("bkt")
        .key("self")
        .send()
        .await
        .expect("GetObject");
    assert_eq!(
        got.metadata()
            .and_then(|m| m.get("version"))
            .map(String::as_str),
        Some("2")
    );
    assert_eq!(got.content_type(), Some("text/x-new"));
    let bytes = got.body.collect().await.expect("body").into_bytes();
    assert_same_body(&bytes, &body, "self-copied object");
    let f = gw.admin_file(&sha1_hex(&body)).expect("admin");
    assert_eq!(
        (f.state.as_str(), f.refs),
        ("live", Some(1)),
        "one key, one reference: {f:?}"
    );
}

#[tokio::test]
async fn copy_source_conditions() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = b"conditional copy source".to_vec();
    put_bytes(&s3, "bkt", "src", &body).await;
    let etag = etag_of(&body);
    let wrong = etag_of(b"something else");
    let past = DateTime::from_secs(978_307_200); // 2001-01-01
    let future = DateTime::from_secs(4_102_444_800); // 2100-01-01

    let (status, code) = s3_error(
        s3.copy_object()
            .copy_source("bkt/src")
            .bucket("bkt")
            .key("d1")
            .copy_source_if_match(&wrong)
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (412, "PreconditionFailed"),
        "if-match wrong"
    );
    let (status, code) = s3_error(
        s3.copy_object()
            .copy_source("bkt/src")
            .bucket("bkt")
            .key("d2")
            .copy_source_if_none_match(&etag)
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (412, "PreconditionFailed"),
        "if-none-match right"
    );
    let (status, code) = s3_error(
        s3.copy_object()
            .copy_source("bkt/src")
            .bucket("bkt")
            .key("d3")
            .copy_source_if_unmodified_since(past)
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (412, "PreconditionFailed"),
        "if-unmodified-since past"
    );
    let (status, code) = s3_error(
        s3.copy_object()
            .copy_source("bkt/src")
            .bucket("bkt")
            .key("d4")
            .copy_source_if_modified_since(future)
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (412, "PreconditionFailed"),
        "if-modified-since future"
    );
    for key in ["d1", "d2", "d3", "d4"] {
        let (status, _) = s3_error(s3.head_object().bucket("bkt").key(key).send().await);
        assert_eq!(status, 404, "{key} must not exist after a failed condition");
    }

    // Conditions that hold.
    s3.copy_object()
        .copy_source("bkt/src")
        .bucket("bkt")
        .key("ok1")
        .copy_source_if_match(&etag)
        .send()
        .await
        .expect("if-match right");
    s3.copy_object()
        .copy_source("bkt/src")
        .bucket("bkt")
        .key("ok2")
        .copy_source_if_none_match(&wrong)
        .copy_source_if_modified_since(past)
        .send()
        .await
        .expect("if-none-match wrong, if-modified-since past");
    s3.copy_object()
        .copy_source("bkt/src")
        .bucket("bkt")
        .key("ok3")
        .copy_source_if_unmodified_since(future)
        .send()
        .await
        .expect("if-unmodified-since future");
    for key in ["ok1", "ok2", "ok3"] {
        assert_eq!(get_bytes(&s3, "bkt", key).await, body, "{key}");
    }
}

#[tokio::test]
async fn copy_of_a_missing_source_is_no_such_key() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let (status, code) = s3_error(
        s3.copy_object()
            .copy_source("bkt/absent")
            .bucket("bkt")
            .key("dst")
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (404, "NoSuchKey"),
        "missing source key"
    );
    let (status, code) = s3_error(
        s3.copy_object()
            .copy_source("no-such-bucket/k")
            .bucket("bkt")
            .key("dst")
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (404, "NoSuchBucket"),
        "missing source bucket"
    );
    put_bytes(&s3, "bkt", "src", b"x").await;
    let (status, code) = s3_error(
        s3.copy_object()
            .copy_source("bkt/src")
            .bucket("no-such-bucket")
            .key("dst")
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (404, "NoSuchBucket"),
        "missing destination bucket"
    );
}

#[tokio::test]
async fn copy_source_keys_with_spaces_utf8_and_plus() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let keys = [
        "dir/with space.txt",
        "plus+sign",
        "uni-ü-日本語/файл",
        "mixed + and space/x=1&y=2",
        "percent%20literal",
    ];
    for (i, key) in keys.iter().enumerate() {
        let body = format!("body {i} of {key}").into_bytes();
        put_bytes(&s3, "bkt", key, &body).await;
        let dst = format!("copies/{key}");
        let etag = copy(&s3, &format!("bkt/{}", encode_key(key)), "bkt", &dst).await;
        assert_eq!(etag, etag_of(&body), "{key:?}");
        assert_eq!(get_bytes(&s3, "bkt", &dst).await, body, "copy of {key:?}");
    }
    // A raw request with the encoded copy source, to pin the exact answer.
    let resp = gw
        .signed("PUT", &format!("/bkt/{}", encode_key("raw copy+1")))
        .header(
            "x-amz-copy-source",
            &format!("/bkt/{}", encode_key("plus+sign")),
        )
        .send();
    assert_eq!(resp.status, 200, "raw CopyObject: {}", resp.text());
    assert!(resp.text().contains("<CopyObjectResult"), "{}", resp.text());
    assert_eq!(
        get_bytes(&s3, "bkt", "raw copy+1").await,
        b"body 1 of plus+sign"
    );
}
