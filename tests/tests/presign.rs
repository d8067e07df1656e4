//! Presigned URLs: GET, PUT and HEAD through a plain HTTP client, response-* overrides,
//! tampered and expired URLs, and the seven-day limit of X-Amz-Expires.

use std::time::{Duration, SystemTime};

use aws_sdk_s3::config::Credentials;
use aws_sdk_s3::presigning::{PresignedRequest, PresigningConfig};
use aws_sigv4::http_request::{
    PercentEncodingMode, SignableBody, SignableRequest, SignatureLocation, SigningSettings,
    UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use e2e::{
    Gateway, REGION, RawResponse, create_bucket, encode_key, etag_of, get_bytes, put_bytes,
    random_body, xml_element,
};

/// The request target (path and query) of a presigned URL for this gateway.
fn target_of(gw: &Gateway, uri: &str) -> String {
    let prefix = gw.endpoint();
    uri.strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("presigned URL {uri} is not under {prefix}"))
        .to_string()
}

/// Sends a presigned request as a plain HTTP client would: its method, its URL and the
/// headers the presigner says must go with it.
fn send(gw: &Gateway, req: &PresignedRequest, body: &[u8]) -> RawResponse {
    send_to(gw, req.method(), &target_of(gw, req.uri()), req, body)
}

fn send_to(
    gw: &Gateway,
    method: &str,
    target: &str,
    req: &PresignedRequest,
    body: &[u8],
) -> RawResponse {
    let headers: Vec<(&str, &str)> = req
        .headers()
        .filter(|(k, _)| !k.eq_ignore_ascii_case("host"))
        .collect();
    gw.raw(method, target, &headers, body)
        .unwrap_or_else(|e| panic!("{method} {target}: no response: {e}"))
}

fn presign_for(secs: u64) -> PresigningConfig {
    PresigningConfig::expires_in(Duration::from_secs(secs)).expect("presigning config")
}

/// Percent-encodes a query component (RFC 3986 unreserved characters stay).
fn encode_query(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A presigned GET made by hand with aws-sigv4, for an X-Amz-Expires the SDK's presigner
/// refuses to produce. Returns the request target.
fn hand_presigned_get(gw: &Gateway, path: &str, expires: Duration) -> String {
    let host = format!("127.0.0.1:{}", gw.port());
    let uri = format!("http://{host}{path}");
    let identity: Identity =
        Credentials::new(gw.access_key(), gw.secret_key(), None, None, "e2e-presign").into();
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(expires);
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(REGION)
        .name("s3")
        .time(SystemTime::now())
        .settings(settings)
        .build()
        .expect("signing params")
        .into();
    let signable = SignableRequest::new(
        "GET",
        uri.as_str(),
        [("host", host.as_str())].into_iter(),
        SignableBody::UnsignedPayload,
    )
    .expect("signable request");
    let (instructions, _) = sign(signable, &params).expect("sign").into_parts();
    let query: Vec<String> = instructions
        .params()
        .iter()
        .map(|(k, v)| format!("{}={}", encode_query(k), encode_query(v)))
        .collect();
    format!("{path}?{}", query.join("&"))
}

#[tokio::test]
async fn presigned_get_returns_the_bytes() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(1, 70_000);
    let keys = ["plain", "dir/a file+ü.txt"];
    for key in keys {
        put_bytes(&s3, "bkt", key, &body).await;
        let req = s3
            .get_object()
            .bucket("bkt")
            .key(key)
            .presigned(presign_for(300))
            .await
            .expect("presign GetObject");
        assert_eq!(req.method(), "GET");
        assert!(req.uri().contains("X-Amz-Signature="), "{}", req.uri());
        let resp = send(&gw, &req, b"");
        assert_eq!(
            resp.status,
            200,
            "presigned GET {key:?} ({}): {}",
            req.uri(),
            resp.text()
        );
        assert!(resp.complete, "{:?}", resp.body_error);
        assert_eq!(resp.body, body, "presigned GET {key:?}");
        assert_eq!(resp.header("etag"), Some(etag_of(&body).as_str()));
    }
}

#[tokio::test]
async fn presigned_get_overrides_response_headers() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    s3.put_object()
        .bucket("bkt")
        .key("attachments/7f3a")
        .content_type("application/octet-stream")
        .content_disposition("inline")
        .body(b"%PDF-1.4 price list".to_vec().into())
        .send()
        .await
        .expect("PutObject");
    let disposition = "attachment; filename=\"price-list.pdf\"";
    let req = s3
        .get_object()
        .bucket("bkt")
        .key("attachments/7f3a")
        .response_content_disposition(disposition)
        .response_content_type("application/pdf")
        .response_cache_control("no-store")
        .presigned(presign_for(300))
        .await
        .expect("presign GetObject with response-* overrides");
    let resp = send(&gw, &req, b"");
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.header("content-disposition"), Some(disposition));
    assert_eq!(resp.header("content-type"), Some("application/pdf"));
    assert_eq!(resp.header("cache-control"), Some("no-store"));
    assert_eq!(resp.body, b"%PDF-1.4 price list");

    // Without the overrides, the stored headers.
    let plain = s3
        .get_object()
        .bucket("bkt")
        .key("attachments/7f3a")
        .presigned(presign_for(300))
        .await
        .expect("presign GetObject");
    let resp = send(&gw, &plain, b"");
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.header("content-disposition"), Some("inline"));
    assert_eq!(
        resp.header("content-type"),
        Some("application/octet-stream")
    );
}

#[tokio::test]
async fn tampered_presigned_urls_are_signature_does_not_match() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    put_bytes(&s3, "bkt", "k", b"secret").await;
    put_bytes(&s3, "bkt", "other", b"other secret").await;
    let req = s3
        .get_object()
        .bucket("bkt")
        .key("k")
        .presigned(presign_for(300))
        .await
        .expect("presign");
    let target = target_of(&gw, req.uri());

    // One character of the signature changed.
    let sig_at =
        target.find("X-Amz-Signature=").expect("signature param") + "X-Amz-Signature=".len();
    let mut tampered = target.clone().into_bytes();
    tampered[sig_at] = if tampered[sig_at] == b'0' { b'1' } else { b'0' };
    let tampered = String::from_utf8(tampered).expect("ascii");
    // A parameter added.
    let added = format!("{target}&response-content-type=text%2Fhtml");
    // Another key.
    let other_key = target.replacen("/bkt/k?", "/bkt/other?", 1);
    assert_ne!(other_key, target);

    for (what, method, t) in [
        ("signature changed", "GET", tampered.as_str()),
        ("parameter added", "GET", added.as_str()),
        ("other key", "GET", other_key.as_str()),
        ("other method", "DELETE", target.as_str()),
    ] {
        let resp = send_to(&gw, method, t, &req, b"");
        assert_eq!(
            (resp.status, resp.error_code().as_deref()),
            (403, Some("SignatureDoesNotMatch")),
            "{what}: {method} {t}: {}",
            resp.text()
        );
    }
    // Nothing was deleted by the DELETE attempt.
    assert_eq!(get_bytes(&s3, "bkt", "k").await, b"secret");
}

#[tokio::test]
async fn expired_presigned_url_is_access_denied() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    put_bytes(&s3, "bkt", "k", b"stale").await;
    let config = PresigningConfig::builder()
        .start_time(SystemTime::now() - Duration::from_secs(3600))
        .expires_in(Duration::from_secs(60))
        .build()
        .expect("presigning config");
    let req = s3
        .get_object()
        .bucket("bkt")
        .key("k")
        .presigned(config)
        .await
        .expect("presign");
    let resp = send(&gw, &req, b"");
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (403, Some("AccessDenied")),
        "expired presigned GET: {}",
        resp.text()
    );
    let message = xml_element(&resp.text(), "Message").unwrap_or_default();
    assert!(
        message.to_ascii_lowercase().contains("expired"),
        "the message says the request expired: {message:?}"
    );
}

#[tokio::test]
async fn x_amz_expires_over_a_week_is_authorization_query_parameters_error() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    put_bytes(&s3, "bkt", "k", b"week").await;

    // The control: exactly seven days is allowed.
    let target = hand_presigned_get(&gw, "/bkt/k", Duration::from_secs(604_800));
    let resp = gw.raw("GET", &target, &[], b"").expect("raw GET");
    assert_eq!(
        resp.status,
        200,
        "X-Amz-Expires=604800: {target}: {}",
        resp.text()
    );
    assert_eq!(resp.body, b"week");

    let target = hand_presigned_get(&gw, "/bkt/k", Duration::from_secs(604_801));
    assert!(target.contains("X-Amz-Expires=604801"), "{target}");
    let resp = gw.raw("GET", &target, &[], b"").expect("raw GET");
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (400, Some("AuthorizationQueryParametersError")),
        "X-Amz-Expires=604801: {}",
        resp.text()
    );
}

#[tokio::test]
async fn presigned_put_then_get() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(2, 200_000);
    let req = s3
        .put_object()
        .bucket("bkt")
        .key("uploaded via url")
        .presigned(presign_for(300))
        .await
        .expect("presign PutObject");
    assert_eq!(req.method(), "PUT");
    let resp = send(&gw, &req, &body);
    assert_eq!(
        resp.status,
        200,
        "presigned PUT ({}): {}",
        req.uri(),
        resp.text()
    );
    assert_eq!(resp.header("etag"), Some(etag_of(&body).as_str()));
    assert_eq!(get_bytes(&s3, "bkt", "uploaded via url").await, body);

    let get = s3
        .get_object()
        .bucket("bkt")
        .key("uploaded via url")
        .presigned(presign_for(300))
        .await
        .expect("presign GetObject");
    let resp = send(&gw, &get, b"");
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.body, body);
    // The raw path of the key as the SDK encoded it.
    assert!(
        get.uri()
            .contains(&format!("/bkt/{}?", encode_key("uploaded via url"))),
        "{}",
        get.uri()
    );
}

#[tokio::test]
async fn presigned_head() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(3, 12_345);
    put_bytes(&s3, "bkt", "k", &body).await;
    let req = s3
        .head_object()
        .bucket("bkt")
        .key("k")
        .presigned(presign_for(300))
        .await
        .expect("presign HeadObject");
    assert_eq!(req.method(), "HEAD");
    let resp = send(&gw, &req, b"");
    assert_eq!(resp.status, 200, "presigned HEAD");
    assert_eq!(resp.header("content-length"), Some("12345"));
    assert_eq!(resp.header("etag"), Some(etag_of(&body).as_str()));
}
