//! Authentication: SigV4 signatures, access keys, clock skew, payload hashes; the admin
//! token.

use std::time::{Duration, SystemTime};

use e2e::{Gateway, create_bucket, get_bytes, poll_until, put_bytes, s3_error, sha1_hex};

/// Asserts that nothing of `body` reached the store.
#[track_caller]
fn assert_nothing_stored(gw: &Gateway, body: &[u8]) {
    for disk in 0..2 {
        assert!(
            gw.content_files(disk).is_empty(),
            "disk{disk} has content files: {:?}",
            gw.content_files(disk)
        );
    }
    assert_eq!(
        gw.admin_file(&sha1_hex(body)),
        None,
        "admin knows the rejected body"
    );
    let clean = poll_until(Duration::from_secs(5), || {
        gw.temp_files(0).is_empty() && gw.temp_files(1).is_empty()
    });
    assert!(
        clean,
        "temp files left by a rejected upload: {:?} {:?}",
        gw.temp_files(0),
        gw.temp_files(1)
    );
}

#[tokio::test]
async fn hand_signed_requests_are_accepted() {
    // The control for the raw-request tests below: a correct signature works.
    let gw = Gateway::start();
    create_bucket(&gw.client(), "bkt").await;
    let body = b"signed by hand".to_vec();
    let resp = gw
        .signed("PUT", "/bkt/raw-key")
        .header("content-type", "text/plain")
        .body(&body)
        .send();
    assert_eq!(resp.status, 200, "hand-signed PutObject: {}", resp.text());
    assert_eq!(get_bytes(&gw.client(), "bkt", "raw-key").await, body);
    let resp = gw.signed("GET", "/bkt/raw-key").send();
    assert_eq!(resp.status, 200, "hand-signed GetObject: {}", resp.text());
    assert_eq!(resp.body, body);
    assert_eq!(resp.header("content-type"), Some("text/plain"));
}

#[tokio::test]
async fn wrong_secret_is_signature_does_not_match() {
    let gw = Gateway::start();
    create_bucket(&gw.client(), "bkt").await;
    let bad = gw.client_with(gw.access_key(), "not-the-secret-key-0123456789abcdefghij");

    let (status, code) = s3_error(bad.list_buckets().send().await);
    assert_eq!(
        (status, code.as_str()),
        (403, "SignatureDoesNotMatch"),
        "ListBuckets"
    );

    let body = b"must not be stored".to_vec();
    let (status, code) = s3_error(
        bad.put_object()
            .bucket("bkt")
            .key("k")
            .body(body.clone().into())
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (403, "SignatureDoesNotMatch"),
        "PutObject"
    );

    let (status, code) = s3_error(bad.create_bucket().bucket("other").send().await);
    assert_eq!(
        (status, code.as_str()),
        (403, "SignatureDoesNotMatch"),
        "CreateBucket"
    );

    let s3 = gw.client();
    let (status, _) = s3_error(s3.head_object().bucket("bkt").key("k").send().await);
    assert_eq!(status, 404, "the rejected PutObject stored a key");
    let (status, _) = s3_error(s3.head_bucket().bucket("other").send().await);
    assert_eq!(status, 404, "the rejected CreateBucket made a bucket");
    assert_nothing_stored(&gw, &body);
}

#[tokio::test]
async fn tampered_request_is_signature_does_not_match() {
    let gw = Gateway::start();
    create_bucket(&gw.client(), "bkt").await;
    let body = b"tampered in flight".to_vec();

    // A signed header changed after signing.
    let resp = gw
        .signed("PUT", "/bkt/k")
        .header("x-amz-meta-owner", "alice")
        .body(&body)
        .tamper_header("x-amz-meta-owner", "mallory")
        .send();
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (403, Some("SignatureDoesNotMatch")),
        "changed header: {}",
        resp.text()
    );

    // The path changed after signing.
    let resp = gw
        .signed("PUT", "/bkt/k")
        .body(&body)
        .tamper_target("/bkt/other")
        .send();
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (403, Some("SignatureDoesNotMatch")),
        "changed path: {}",
        resp.text()
    );

    // A query parameter added after signing.
    let resp = gw
        .signed("GET", "/bkt")
        .tamper_target("/bkt?prefix=x")
        .send();
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (403, Some("SignatureDoesNotMatch")),
        "added query: {}",
        resp.text()
    );

    assert_nothing_stored(&gw, &body);
}

#[tokio::test]
async fn unknown_access_key_is_invalid_access_key_id() {
    let gw = Gateway::start();
    create_bucket(&gw.client(), "bkt").await;
    let stranger = gw.client_with("AKIDUNKNOWN000000000", gw.secret_key());
    let (status, code) = s3_error(stranger.list_buckets().send().await);
    assert_eq!(
        (status, code.as_str()),
        (403, "InvalidAccessKeyId"),
        "ListBuckets"
    );
    let (status, code) = s3_error(stranger.get_object().bucket("bkt").key("k").send().await);
    assert_eq!(
        (status, code.as_str()),
        (403, "InvalidAccessKeyId"),
        "GetObject"
    );
}

#[tokio::test]
async fn anonymous_requests_are_denied() {
    let gw = Gateway::start();
    create_bucket(&gw.client(), "bkt").await;
    for (method, target) in [
        ("GET", "/"),
        ("GET", "/bkt"),
        ("PUT", "/bkt/k"),
        ("GET", "/bkt/k"),
    ] {
        let resp = gw
            .raw(method, target, &[], b"anonymous")
            .expect("raw request");
        assert_eq!(
            resp.status,
            403,
            "anonymous {method} {target}: {}",
            resp.text()
        );
    }
    assert_nothing_stored(&gw, b"anonymous");
}

#[tokio::test]
async fn payload_hash_mismatch_is_rejected_and_nothing_stored() {
    let gw = Gateway::start();
    create_bucket(&gw.client(), "bkt").await;
    let sent = e2e::random_body(9001, 100_000);
    // The signature is valid, over a x-amz-content-sha256 that is not the body's.
    let resp = gw
        .signed("PUT", "/bkt/liar")
        .body(&sent)
        .claim_payload(b"some other body")
        .send();
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (400, Some("XAmzContentSHA256Mismatch")),
        "{}",
        resp.text()
    );
    let (status, _) = s3_error(
        gw.client()
            .head_object()
            .bucket("bkt")
            .key("liar")
            .send()
            .await,
    );
    assert_eq!(status, 404, "the rejected PutObject stored a key");
    assert_nothing_stored(&gw, &sent);
}

#[tokio::test]
async fn request_signed_20_minutes_ago_is_request_time_too_skewed() {
    let gw = Gateway::start();
    create_bucket(&gw.client(), "bkt").await;
    let past = SystemTime::now() - Duration::from_secs(20 * 60);
    let resp = gw.signed("GET", "/").time(past).send();
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (403, Some("RequestTimeTooSkewed")),
        "{}",
        resp.text()
    );
    let resp = gw
        .signed("PUT", "/bkt/old")
        .body(b"stale")
        .time(past)
        .send();
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (403, Some("RequestTimeTooSkewed")),
        "{}",
        resp.text()
    );
    assert_nothing_stored(&gw, b"stale");
}

#[tokio::test]
async fn request_signed_20_minutes_ahead_is_request_time_too_skewed() {
    let gw = Gateway::start();
    let future = SystemTime::now() + Duration::from_secs(20 * 60);
    let resp = gw.signed("GET", "/").time(future).send();
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (403, Some("RequestTimeTooSkewed")),
        "{}",
        resp.text()
    );
}

#[tokio::test]
async fn admin_requires_the_admin_token() {
    let gw = Gateway::start();
    let target = format!("/_admin/files/{}", sha1_hex(b"x"));
    let resp = gw.raw("GET", &target, &[], b"").expect("raw request");
    assert!(
        matches!(resp.status, 401 | 403),
        "admin without a token: {} {}",
        resp.status,
        resp.text()
    );
    let resp = gw
        .raw(
            "GET",
            &target,
            &[("authorization", "Bearer wrong-token")],
            b"",
        )
        .expect("raw request");
    assert!(
        matches!(resp.status, 401 | 403),
        "admin with a wrong token: {} {}",
        resp.status,
        resp.text()
    );
    // The S3 credentials are not the admin token either.
    let s3_secret = format!("Bearer {}", gw.secret_key());
    let resp = gw
        .raw(
            "GET",
            &target,
            &[("authorization", s3_secret.as_str())],
            b"",
        )
        .expect("raw request");
    assert!(
        matches!(resp.status, 401 | 403),
        "admin with the S3 secret: {}",
        resp.status
    );
    // Every admin endpoint, reading or changing: refused before it acts.
    let disk0 = format!("local:{}", gw.disk_dir(0).display());
    let fail = format!(r#"{{"disk":"{disk0}"}}"#);
    for (method, path, body) in [
        ("GET", "/_admin/pairs", ""),
        (
            "POST",
            "/_admin/pairs",
            r#"{"disks":["local:/tmp/x0","local:/tmp/x1"]}"#,
        ),
        ("POST", "/_admin/pairs/0/lock", ""),
        ("POST", "/_admin/pairs/not-a-number/lock", ""),
        ("GET", "/_admin/scrub", ""),
        ("GET", "/_admin/unmove", ""),
        ("POST", "/_admin/disks/fail", fail.as_str()),
    ] {
        let resp = gw
            .raw(
                method,
                path,
                &[("authorization", "Bearer wrong-token")],
                body.as_bytes(),
            )
            .expect("raw request");
        assert_eq!(resp.status, 403, "{method} {path}: {}", resp.text());
    }
    // Nothing changed: the embedded pair is still the only one, writable.
    let s3 = gw.client();
    create_bucket(&s3, "still-writable").await;
    put_bytes(&s3, "still-writable", "k", b"body").await;
}
