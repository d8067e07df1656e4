//! Objects: PutObject, GetObject (whole and ranged), HeadObject, DeleteObject, metadata,
//! ETags and the errors around them.

use aws_sdk_s3::primitives::ByteStream;
use e2e::{
    Gateway, assert_same_body, create_bucket, encode_key, etag_of, get_bytes, put_bytes,
    random_body, s3_error, sha1_hex,
};

const MIB: usize = 1024 * 1024;

#[tokio::test]
async fn put_get_head_keep_content_type_metadata_and_etag() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(1, 10_000);

    let put = s3
        .put_object()
        .bucket("bkt")
        .key("docs/report.txt")
        .content_type("text/plain; charset=utf-8")
        .metadata("color", "blue")
        .metadata("owner", "e2e-suite")
        .body(body.clone().into())
        .send()
        .await
        .expect("PutObject");
    assert_eq!(put.e_tag(), Some(etag_of(&body).as_str()), "PutObject ETag");

    let got = s3
        .get_object()
        .bucket("bkt")
        .key("docs/report.txt")
        .send()
        .await
        .expect("GetObject");
    assert_eq!(got.content_type(), Some("text/plain; charset=utf-8"));
    assert_eq!(got.content_length(), Some(body.len() as i64));
    assert_eq!(got.e_tag(), Some(etag_of(&body).as_str()), "GetObject ETag");
    let meta = got.metadata().cloned().unwrap_or_default();
    assert_eq!(
        meta.get("color").map(String::as_str),
        Some("blue"),
        "{meta:?}"
    );
    assert_eq!(
        meta.get("owner").map(String::as_str),
        Some("e2e-suite"),
        "{meta:?}"
    );
    let bytes = got
        .body
        .collect()
        .await
        .expect("GetObject body")
        .into_bytes();
    assert_same_body(&bytes, &body, "GetObject");

    let head = s3
        .head_object()
        .bucket("bkt")
        .key("docs/report.txt")
        .send()
        .await
        .expect("HeadObject");
    assert_eq!(head.content_type(), Some("text/plain; charset=utf-8"));
    assert_eq!(head.content_length(), Some(body.len() as i64));
    assert_eq!(
        head.e_tag(),
        Some(etag_of(&body).as_str()),
        "HeadObject ETag"
    );
    let meta = head.metadata().cloned().unwrap_or_default();
    assert_eq!(
        meta.get("color").map(String::as_str),
        Some("blue"),
        "{meta:?}"
    );
    assert_eq!(
        meta.get("owner").map(String::as_str),
        Some("e2e-suite"),
        "{meta:?}"
    );
    assert!(
        head.last_modified().is_some(),
        "HeadObject has Last-Modified"
    );
}

#[tokio::test]
async fn empty_object_round_trips() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let put = s3
        .put_object()
        .bucket("bkt")
        .key("empty")
        .body(Vec::new().into())
        .send()
        .await
        .expect("PutObject of 0 bytes");
    assert_eq!(put.e_tag(), Some(etag_of(b"").as_str()));
    assert_eq!(get_bytes(&s3, "bkt", "empty").await, b"");
    let head = s3
        .head_object()
        .bucket("bkt")
        .key("empty")
        .send()
        .await
        .expect("HeadObject");
    assert_eq!(head.content_length(), Some(0));
}

#[tokio::test]
async fn object_of_20_mib_round_trips_byte_exact() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "big").await;
    let body = random_body(20, 20 * MIB);
    let put = s3
        .put_object()
        .bucket("big")
        .key("twenty")
        .body(body.clone().into())
        .send()
        .await
        .expect("PutObject 20 MiB");
    assert_eq!(put.e_tag(), Some(etag_of(&body).as_str()));
    let got = get_bytes(&s3, "big", "twenty").await;
    assert_same_body(&got, &body, "GetObject 20 MiB");
    // The stored copies are the body itself, under its sha1.
    let sha1 = sha1_hex(&body);
    for disk in 0..2 {
        let path = gw.content_path(disk, &sha1);
        let meta = std::fs::metadata(&path)
            .unwrap_or_else(|e| panic!("content file {}: {e}", path.display()));
        assert_eq!(meta.len(), body.len() as u64, "size of {}", path.display());
    }
}

#[tokio::test]
async fn streaming_upload_from_a_file_round_trips() {
    // A body from a file is not in memory: the SDK sends it aws-chunked with a CRC32
    // trailer (its default checksum behaviour for streaming bodies).
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(77, 2 * MIB + 12_345);
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), &body).expect("write temp file");
    let stream = ByteStream::from_path(file.path())
        .await
        .expect("ByteStream::from_path");
    let put = s3
        .put_object()
        .bucket("bkt")
        .key("from-file")
        .body(stream)
        .send()
        .await
        .expect("PutObject of a streaming body");
    assert_eq!(put.e_tag(), Some(etag_of(&body).as_str()));
    assert_same_body(
        &get_bytes(&s3, "bkt", "from-file").await,
        &body,
        "GetObject",
    );
    let head = s3
        .head_object()
        .bucket("bkt")
        .key("from-file")
        .send()
        .await
        .expect("HeadObject");
    assert_eq!(head.content_length(), Some(body.len() as i64));
    // What is stored is the payload, not the aws-chunked framing.
    let sha1 = sha1_hex(&body);
    for disk in 0..2 {
        assert_eq!(
            gw.content_files(disk),
            [gw.content_path(disk, &sha1)],
            "disk{disk} holds exactly the payload's content file"
        );
    }
}

#[tokio::test]
async fn put_over_an_existing_key_replaces_it() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    put_bytes(&s3, "bkt", "k", b"first version").await;
    s3.put_object()
        .bucket("bkt")
        .key("k")
        .content_type("application/x-second")
        .body(b"second, longer version".to_vec().into())
        .send()
        .await
        .expect("PutObject over an existing key");
    let got = s3
        .get_object()
        .bucket("bkt")
        .key("k")
        .send()
        .await
        .expect("GetObject");
    assert_eq!(got.content_type(), Some("application/x-second"));
    assert_eq!(
        got.e_tag(),
        Some(etag_of(b"second, longer version").as_str())
    );
    let bytes = got.body.collect().await.expect("body").into_bytes();
    assert_eq!(&bytes[..], b"second, longer version");
}

#[tokio::test]
async fn get_missing_key_is_no_such_key() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let (status, code) = s3_error(s3.get_object().bucket("bkt").key("absent").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchKey"));
}

#[tokio::test]
async fn head_missing_key_is_404() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let (status, _) = s3_error(s3.head_object().bucket("bkt").key("absent").send().await);
    assert_eq!(status, 404);
}

#[tokio::test]
async fn delete_missing_key_is_204() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let resp = gw.signed("DELETE", "/bkt/never-written").send();
    assert_eq!(
        resp.status,
        204,
        "DeleteObject of a missing key: {}",
        resp.text()
    );
    s3.delete_object()
        .bucket("bkt")
        .key("never-written")
        .send()
        .await
        .expect("DeleteObject of a missing key through the SDK");
}

#[tokio::test]
async fn deleted_object_is_gone() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    put_bytes(&s3, "bkt", "k", b"short-lived").await;
    let resp = gw.signed("DELETE", "/bkt/k").send();
    assert_eq!(resp.status, 204, "DeleteObject: {}", resp.text());
    let (status, code) = s3_error(s3.get_object().bucket("bkt").key("k").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchKey"));
    let (status, _) = s3_error(s3.head_object().bucket("bkt").key("k").send().await);
    assert_eq!(status, 404);
}

#[tokio::test]
async fn keys_with_special_characters_round_trip() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let keys = [
        "with space.txt",
        "plus+sign",
        "dir/sub dir/file (1).bin",
        "uni-ü-日本語",
        "tilde~and=equals&amp",
        "percent%20literal",
        "semi;colon,comma",
        "trailing-slash/",
    ];
    for (i, key) in keys.iter().enumerate() {
        let body = format!("body of key {i}: {key}").into_bytes();
        put_bytes(&s3, "bkt", key, &body).await;
    }
    for (i, key) in keys.iter().enumerate() {
        let body = format!("body of key {i}: {key}").into_bytes();
        assert_eq!(get_bytes(&s3, "bkt", key).await, body, "GetObject {key:?}");
        // The same key through a hand-signed raw request.
        let resp = gw
            .signed("GET", &format!("/bkt/{}", encode_key(key)))
            .send();
        assert_eq!(resp.status, 200, "raw GET {key:?}: {}", resp.text());
        assert_eq!(resp.body, body, "raw GET {key:?}");
    }
    let listed = s3
        .list_objects_v2()
        .bucket("bkt")
        .send()
        .await
        .expect("ListObjectsV2");
    let mut listed_keys: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    listed_keys.sort_unstable();
    let mut want: Vec<&str> = keys.to_vec();
    want.sort_unstable();
    assert_eq!(listed_keys, want);
}

/// A hand-signed ranged GET: (status, Content-Range, body).
fn ranged_get(gw: &Gateway, target: &str, range: &str) -> (u16, Option<String>, Vec<u8>) {
    let resp = gw.signed("GET", target).header("range", range).send();
    assert!(
        resp.complete,
        "GET {target} {range}: body cut short: {:?}",
        resp.body_error
    );
    (
        resp.status,
        resp.header("content-range").map(str::to_string),
        resp.body,
    )
}

fn check_ranges(gw: &Gateway, target: &str, body: &[u8], ranges: &[(u64, u64)]) {
    let total = body.len();
    for &(a, b) in ranges {
        let range = format!("bytes={a}-{b}");
        let (status, content_range, got) = ranged_get(gw, target, &range);
        assert_eq!(status, 206, "{range}: status");
        assert_eq!(
            content_range.as_deref(),
            Some(format!("bytes {a}-{b}/{total}").as_str()),
            "{range}: Content-Range"
        );
        assert_same_body(&got, &body[a as usize..=b as usize], &range);
    }
}

#[tokio::test]
async fn range_get_on_small_object() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(5, 1000);
    put_bytes(&s3, "bkt", "small", &body).await;
    check_ranges(
        &gw,
        "/bkt/small",
        &body,
        &[(0, 0), (0, 99), (10, 19), (500, 500), (990, 999), (0, 999)],
    );

    // The same through the SDK.
    let got = s3
        .get_object()
        .bucket("bkt")
        .key("small")
        .range("bytes=100-199")
        .send()
        .await
        .expect("ranged GetObject");
    assert_eq!(got.content_range(), Some("bytes 100-199/1000"));
    assert_eq!(got.content_length(), Some(100));
    let bytes = got.body.collect().await.expect("body").into_bytes();
    assert_same_body(&bytes, &body[100..200], "SDK bytes=100-199");
}

#[tokio::test]
async fn range_get_on_large_object() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(6, 5 * MIB + 333);
    put_bytes(&s3, "bkt", "large", &body).await;
    let last = body.len() as u64 - 1;
    check_ranges(
        &gw,
        "/bkt/large",
        &body,
        &[
            (0, 0),
            (0, 99),
            (262_100, 262_200),     // across a 256 KiB boundary
            (1_048_000, 1_049_999), // across 1 MiB
            (2 * MIB as u64, 4 * MIB as u64 + 17),
            (last - 999, last),
            (last, last),
        ],
    );
    let got = s3
        .get_object()
        .bucket("bkt")
        .key("large")
        .range("bytes=3000000-3999999")
        .send()
        .await
        .expect("ranged GetObject");
    assert_eq!(got.content_length(), Some(1_000_000));
    let bytes = got.body.collect().await.expect("body").into_bytes();
    assert_same_body(
        &bytes,
        &body[3_000_000..4_000_000],
        "SDK bytes=3000000-3999999",
    );
}

#[tokio::test]
async fn open_ended_suffix_and_clamped_ranges() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(7, 1000);
    put_bytes(&s3, "bkt", "obj", &body).await;

    let (status, cr, got) = ranged_get(&gw, "/bkt/obj", "bytes=900-");
    assert_eq!(
        (status, cr.as_deref()),
        (206, Some("bytes 900-999/1000")),
        "bytes=900-"
    );
    assert_same_body(&got, &body[900..], "bytes=900-");

    let (status, cr, got) = ranged_get(&gw, "/bkt/obj", "bytes=-100");
    assert_eq!(
        (status, cr.as_deref()),
        (206, Some("bytes 900-999/1000")),
        "bytes=-100"
    );
    assert_same_body(&got, &body[900..], "bytes=-100");

    let (status, cr, got) = ranged_get(&gw, "/bkt/obj", "bytes=990-5000");
    assert_eq!(
        (status, cr.as_deref()),
        (206, Some("bytes 990-999/1000")),
        "bytes=990-5000"
    );
    assert_same_body(&got, &body[990..], "bytes=990-5000");
}

#[tokio::test]
async fn unsatisfiable_range_is_416_invalid_range() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    put_bytes(&s3, "bkt", "obj", &random_body(8, 1000)).await;
    for range in ["bytes=1000-1001", "bytes=5000-"] {
        let (status, code) = s3_error(
            s3.get_object()
                .bucket("bkt")
                .key("obj")
                .range(range)
                .send()
                .await,
        );
        assert_eq!((status, code.as_str()), (416, "InvalidRange"), "{range}");
    }
}
