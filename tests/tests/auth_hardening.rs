//! Authentication hardening (issue 13, items 5-8), each on the wire against the real binary:
//! V2 presigned URLs sign their bucket in virtual-hosted style and have a capped lifetime; a
//! raw `+` in the query means one thing to the signature check and to the operation; the
//! internal endpoints (`/_metrics`, `/_catalog/`) have their own tokens and an empty token
//! opens nothing; a credential scope must name the gateway's region.

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_s3::Client;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::presigning::PresigningConfig;
use e2e::{
    Gateway, GatewayOptions, RawResponse, base64_encode, create_bucket, get_bytes, put_bytes,
    random_body, random_token, s3_error, xml_element,
};
use sha1::{Digest as _, Sha1};

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// HMAC-SHA1 (RFC 2104) written out here, so the V2 signatures of these tests do not come
/// from the code under test.
fn hmac_sha1(key: &[u8], message: &[u8]) -> [u8; 20] {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..20].copy_from_slice(&Sha1::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| k.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
    let inner = Sha1::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha1::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode_component(s: &str) -> String {
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

/// The V2 query-string signature of a GET, by the documented algorithm:
/// `base64(HMAC-SHA1(secret, "GET\n\n\n<Expires>\n<CanonicalizedResource>"))`.
fn v2_signature(secret: &str, expires: u64, resource: &str) -> String {
    let to_sign = format!("GET\n\n\n{expires}\n{resource}");
    base64_encode(&hmac_sha1(secret.as_bytes(), to_sign.as_bytes()))
}

/// The query of a V2 presigned GET.
fn v2_query(access_key: &str, secret: &str, expires: u64, resource: &str) -> String {
    format!(
        "AWSAccessKeyId={}&Expires={expires}&Signature={}",
        encode_component(access_key),
        encode_component(&v2_signature(secret, expires, resource))
    )
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// A GET with this Host header (the connection goes to the gateway's port).
fn get_with_host(gw: &Gateway, host: &str, target: &str) -> RawResponse {
    let headers = [("host".to_owned(), host.to_owned())];
    e2e::raw_request(gw.port(), "GET", target, &headers, b"")
        .unwrap_or_else(|e| panic!("GET {target} (Host {host}): {e}"))
}

fn expect_status(resp: &RawResponse, status: u16, what: &str) {
    assert_eq!(resp.status, status, "{what}: {}", resp.text());
}

fn expect_error(resp: &RawResponse, status: u16, code: &str, what: &str) {
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (status, Some(code)),
        "{what}: {}",
        resp.text()
    );
}

/// The keys of a ListObjects(V2) answer, in order.
fn listed_keys(xml: &str) -> Vec<String> {
    xml.split("<Contents>")
        .skip(1)
        .filter_map(|c| xml_element(c, "Key"))
        .collect()
}

/// An SDK client of the gateway that signs for `region`.
fn client_in(gw: &Gateway, region: &str) -> Client {
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(gw.endpoint())
        .region(Region::new(region.to_owned()))
        .credentials_provider(Credentials::new(
            gw.access_key(),
            gw.secret_key(),
            None,
            None,
            "e2e-region",
        ))
        .force_path_style(true)
        .retry_config(RetryConfig::disabled())
        .build();
    Client::from_conf(conf)
}

fn write_config(dir: &tempfile::TempDir, text: &str) -> String {
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, text).expect("write config");
    path.to_str().expect("utf-8 path").to_owned()
}

// ---------------------------------------------------------------------------------------
// 5. SigV2 presigned URLs
// ---------------------------------------------------------------------------------------

const DOMAIN: &str = "s3.test";

/// `--domain s3.test`, two buckets holding different bytes under the same key.
async fn two_buckets(args: &[&str]) -> (Gateway, Vec<u8>, Vec<u8>) {
    let mut all = vec!["--domain", DOMAIN];
    all.extend_from_slice(args);
    let gw = Gateway::start_with(&all, &[]);
    let s3 = gw.client();
    let (alpha, beta) = (random_body(51, 3000), random_body(52, 4000));
    create_bucket(&s3, "alpha").await;
    create_bucket(&s3, "beta").await;
    put_bytes(&s3, "alpha", "dir/a b+c.txt", &alpha).await;
    put_bytes(&s3, "beta", "dir/a b+c.txt", &beta).await;
    (gw, alpha, beta)
}

#[test]
fn the_hand_hmac_matches_the_documented_v2_example() {
    assert_eq!(
        v2_signature(
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            1_175_139_620,
            "/johnsmith/photos/puppy.jpg"
        ),
        "NpgCjnDzrM+WFzoENXmpNDUsSn8="
    );
}

/// A virtual-hosted V2 URL signs `/bucket/key` (S3's CanonicalizedResource): it is
/// accepted on its own bucket's Host, and replayed on another bucket's Host it is refused.
#[tokio::test]
async fn a_virtual_hosted_v2_url_signs_its_bucket() {
    let (gw, alpha, _) = two_buckets(&[]).await;
    let port = gw.port();
    let path = "/dir/a%20b%2Bc.txt";
    let expires = now_secs() + 600;
    let query = v2_query(
        gw.access_key(),
        gw.secret_key(),
        expires,
        &format!("/alpha{path}"),
    );
    let target = format!("{path}?{query}");

    let resp = get_with_host(&gw, &format!("alpha.{DOMAIN}:{port}"), &target);
    expect_status(&resp, 200, "virtual-hosted V2 URL on its own bucket");
    assert_eq!(resp.body, alpha);

    let replay = get_with_host(&gw, &format!("beta.{DOMAIN}:{port}"), &target);
    expect_error(
        &replay,
        403,
        "SignatureDoesNotMatch",
        "the same URL on another bucket's Host",
    );

    // A URL signed over the key alone (the bucket left out) is not a valid signature.
    let keyless = format!(
        "{path}?{}",
        v2_query(gw.access_key(), gw.secret_key(), expires, path)
    );
    for bucket in ["alpha", "beta"] {
        let resp = get_with_host(&gw, &format!("{bucket}.{DOMAIN}:{port}"), &keyless);
        expect_error(
            &resp,
            403,
            "SignatureDoesNotMatch",
            "a signature without the bucket",
        );
    }

    // Path style signs the same resource.
    let path_style = format!("/alpha{target}");
    let resp = get_with_host(&gw, &format!("127.0.0.1:{port}"), &path_style);
    expect_status(&resp, 200, "path-style V2 URL");
    assert_eq!(resp.body, alpha);
}

/// Runs a python script with boto3, given the gateway's port, access key and secret as
/// arguments; its output, or None (the test skips, saying so) without python3 and boto3.
fn boto3(gw: &Gateway, script: &str) -> Option<std::process::Output> {
    match Command::new("python3")
        .args(["-c", script, &gw.port().to_string()])
        .args([gw.access_key(), gw.secret_key()])
        .output()
    {
        Ok(out) if out.status.success() => Some(out),
        Ok(out) if String::from_utf8_lossy(&out.stderr).contains("No module named") => {
            eprintln!("SKIPPED: python3 with boto3 is not available here");
            None
        }
        Err(e) => {
            eprintln!("SKIPPED: python3 is not available here: {e}");
            None
        }
        Ok(out) => panic!(
            "the boto3 script failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// What botocore generates (`signature_version='s3'`, `addressing_style='virtual'`) is
/// accepted, and only on its own bucket. Needs python3 with boto3 (CI installs it); without
/// it the test says so and checks nothing more than the hand-signed test above.
#[tokio::test]
async fn a_boto3_virtual_hosted_v2_url_is_accepted() {
    let (gw, alpha, _) = two_buckets(&[]).await;
    let script = r#"
import sys, boto3
from botocore.client import Config
port, ak, sk = sys.argv[1:4]
c = boto3.client("s3", endpoint_url="http://s3.test:" + port, aws_access_key_id=ak,
    aws_secret_access_key=sk, region_name="us-east-1",
    config=Config(signature_version="s3", s3={"addressing_style": "virtual"}))
print(c.generate_presigned_url("get_object",
    Params={"Bucket": "alpha", "Key": "dir/a b+c.txt"}, ExpiresIn=600))
"#;
    let Some(out) = boto3(&gw, script) else {
        return;
    };
    let url = String::from_utf8(out.stdout).expect("utf-8 URL");
    let url = url.trim();
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (host, target) = rest.split_at(rest.find('/').expect("a path"));
    assert_eq!(host, format!("alpha.{DOMAIN}:{}", gw.port()), "{url}");
    assert!(target.contains("Signature="), "{url}");

    let resp = get_with_host(&gw, host, target);
    expect_status(&resp, 200, &format!("boto3 URL {url}"));
    assert_eq!(resp.body, alpha);
    let replay = get_with_host(&gw, &format!("beta.{DOMAIN}:{}", gw.port()), target);
    expect_error(&replay, 403, "SignatureDoesNotMatch", "boto3 URL on beta");
}

/// A V2 presigned PUT (hand-signed by the documented algorithm, with its Content-Type and
/// Content-MD5 signed) uploads; the same URL for another key, another Content-Type, a body
/// that does not match the signed Content-MD5, an expired URL and a V2 DELETE are refused,
/// and none of them stores anything.
#[tokio::test]
async fn a_v2_presigned_put_uploads_and_only_what_it_signs() {
    let (gw, _, _) = two_buckets(&[]).await;
    let body = random_body(53, 5000);
    let md5 = base64_encode(&md5::Md5::digest(&body));
    let put = |path: &str, signed_path: &str, expires: u64, ctype: &str, bytes: &[u8]| {
        let to_sign = format!("PUT\n{md5}\ntext/plain\n{expires}\n{signed_path}");
        let signature = base64_encode(&hmac_sha1(gw.secret_key().as_bytes(), to_sign.as_bytes()));
        let target = format!(
            "{path}?AWSAccessKeyId={}&Expires={expires}&Signature={}",
            encode_component(gw.access_key()),
            encode_component(&signature)
        );
        let headers = [
            ("host".to_owned(), format!("127.0.0.1:{}", gw.port())),
            ("content-type".to_owned(), ctype.to_owned()),
            ("content-md5".to_owned(), md5.clone()),
        ];
        e2e::raw_request(gw.port(), "PUT", &target, &headers, bytes)
            .unwrap_or_else(|e| panic!("PUT {target}: {e}"))
    };
    let later = now_secs() + 300;
    let resp = put("/alpha/up", "/alpha/up", later, "text/plain", &body);
    expect_status(&resp, 200, "V2 presigned PUT");
    assert_eq!(get_bytes(&gw.client(), "alpha", "up").await, body);
    let head = gw
        .client()
        .head_object()
        .bucket("alpha")
        .key("up")
        .send()
        .await
        .expect("HEAD");
    assert_eq!(head.content_type(), Some("text/plain"));

    let refused = [
        (
            put("/alpha/other", "/alpha/up", later, "text/plain", &body),
            403,
            "SignatureDoesNotMatch",
            "another key",
        ),
        (
            put("/alpha/up2", "/alpha/up2", later, "text/html", &body),
            403,
            "SignatureDoesNotMatch",
            "another Content-Type",
        ),
        (
            put(
                "/alpha/up3",
                "/alpha/up3",
                later,
                "text/plain",
                b"not the body",
            ),
            400,
            "BadDigest",
            "a body unlike its Content-MD5",
        ),
        (
            put(
                "/alpha/up4",
                "/alpha/up4",
                now_secs() - 5,
                "text/plain",
                &body,
            ),
            403,
            "AccessDenied",
            "expired",
        ),
    ];
    for (resp, status, code, what) in &refused {
        expect_error(resp, *status, code, what);
    }
    let s3 = gw.client();
    for key in ["other", "up2", "up3", "up4"] {
        let (status, _) = s3_error(s3.head_object().bucket("alpha").key(key).send().await);
        assert_eq!(status, 404, "{key} was not stored");
    }
    let expires = now_secs() + 300;
    let to_sign = format!("DELETE\n\n\n{expires}\n/alpha/up");
    let signature = base64_encode(&hmac_sha1(gw.secret_key().as_bytes(), to_sign.as_bytes()));
    let target = format!(
        "/alpha/up?AWSAccessKeyId={}&Expires={expires}&Signature={}",
        encode_component(gw.access_key()),
        encode_component(&signature)
    );
    let headers = [("host".to_owned(), format!("127.0.0.1:{}", gw.port()))];
    let resp = e2e::raw_request(gw.port(), "DELETE", &target, &headers, b"").expect("DELETE");
    expect_error(&resp, 400, "InvalidArgument", "a V2 DELETE");
    assert_eq!(get_bytes(&s3, "alpha", "up").await, body);
}

/// What botocore generates for `put_object` with `signature_version='s3'` (a browser's
/// upload URL) stores the body PUT to it. Needs python3 with boto3 (CI installs it).
#[tokio::test]
async fn a_boto3_v2_presigned_put_uploads() {
    let (gw, _, _) = two_buckets(&[]).await;
    let script = r#"
import sys, urllib.request, boto3
from botocore.client import Config
port, ak, sk = sys.argv[1:4]
c = boto3.client("s3", endpoint_url="http://127.0.0.1:" + port, aws_access_key_id=ak,
    aws_secret_access_key=sk, region_name="us-east-1",
    config=Config(signature_version="s3", s3={"addressing_style": "path"}))
url = c.generate_presigned_url("put_object",
    Params={"Bucket": "alpha", "Key": "attachments/report 1.pdf",
            "ContentType": "application/pdf"}, ExpiresIn=600)
assert "Signature=" in url, url
req = urllib.request.Request(url, data=b"%PDF-1.7 boto3 v2 upload", method="PUT",
    headers={"Content-Type": "application/pdf"})
print(urllib.request.urlopen(req).status)
"#;
    let Some(out) = boto3(&gw, script) else {
        return;
    };
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "200");
    let s3 = gw.client();
    assert_eq!(
        get_bytes(&s3, "alpha", "attachments/report 1.pdf").await,
        b"%PDF-1.7 boto3 v2 upload"
    );
    let head = s3
        .head_object()
        .bucket("alpha")
        .key("attachments/report 1.pdf")
        .send()
        .await
        .expect("HEAD");
    assert_eq!(head.content_type(), Some("application/pdf"));
}

/// `Expires` further ahead than the cap (7 days by default, `--presigned-v2-expires-max-secs`)
/// is refused with AccessDenied.
#[tokio::test]
async fn a_v2_url_living_longer_than_the_cap_is_refused() {
    let path = "/alpha/dir/a%20b%2Bc.txt";
    let (gw, alpha, _) = two_buckets(&[]).await;
    let host = format!("127.0.0.1:{}", gw.port());
    let get = |gw: &Gateway, expires: u64| {
        let query = v2_query(gw.access_key(), gw.secret_key(), expires, path);
        get_with_host(gw, &host, &format!("{path}?{query}"))
    };
    let week = 7 * 86_400;
    let resp = get(&gw, now_secs() + week - 60);
    expect_status(&resp, 200, "just under 7 days");
    assert_eq!(resp.body, alpha);
    let resp = get(&gw, now_secs() + week + 3600);
    expect_error(&resp, 403, "AccessDenied", "7 days and an hour");
    let resp = get(&gw, now_secs() + 10 * 365 * 86_400);
    expect_error(&resp, 403, "AccessDenied", "ten years");
    let resp = get(&gw, now_secs() - 10);
    expect_error(&resp, 403, "AccessDenied", "expired");
    drop(gw);

    let (gw, alpha, _) = two_buckets(&["--presigned-v2-expires-max-secs", "120"]).await;
    let host = format!("127.0.0.1:{}", gw.port());
    let get = |expires: u64| {
        let query = v2_query(gw.access_key(), gw.secret_key(), expires, path);
        get_with_host(&gw, &host, &format!("{path}?{query}"))
    };
    let resp = get(now_secs() + 60);
    expect_status(&resp, 200, "a minute with a two-minute cap");
    assert_eq!(resp.body, alpha);
    expect_error(&get(now_secs() + 600), 403, "AccessDenied", "ten minutes");
}

// ---------------------------------------------------------------------------------------
// 6. `+` in the query
// ---------------------------------------------------------------------------------------

/// A raw `+` in the query is a space for the listing and for the signature alike: signed as
/// `%20` it lists `a b`; signed as `%2B` (a plus) but sent raw, it is refused rather than
/// executed as something else than what was signed. `%2B` and `%20` mean what they say.
#[tokio::test]
async fn a_raw_plus_in_a_listing_prefix_is_a_space_for_signature_and_listing() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "plus").await;
    for key in ["a b/1", "a+b/1", "ab/1"] {
        put_bytes(&s3, "plus", key, b"x").await;
    }
    let list = |signed: &str, sent: &str| {
        gw.signed("GET", &format!("/plus?list-type=2&prefix={signed}"))
            .tamper_target(&format!("/plus?list-type=2&prefix={sent}"))
            .send()
    };
    for (signed, sent, want) in [
        ("a%20b", "a+b", "a b/1"),
        ("a%20b", "a%20b", "a b/1"),
        ("a%2Bb", "a%2Bb", "a+b/1"),
    ] {
        let resp = list(signed, sent);
        expect_status(&resp, 200, &format!("prefix signed {signed}, sent {sent}"));
        assert_eq!(
            listed_keys(&resp.text()),
            vec![want.to_owned()],
            "prefix signed {signed}, sent {sent}: {}",
            resp.text()
        );
    }
    // Signed as a plus, sent as a raw '+' (a space): not what was signed.
    expect_error(
        &list("a%2Bb", "a+b"),
        403,
        "SignatureDoesNotMatch",
        "prefix signed %2B, sent +",
    );
    expect_error(
        &list("a%2Bb", "a%20b"),
        403,
        "SignatureDoesNotMatch",
        "prefix signed %2B, sent %20",
    );
}

/// A presigned GET: in the path a `+` is a plus (as `%2B`), never a space; in the query a
/// raw `+` of `response-content-disposition` is a space in the header served and in the
/// signature.
#[tokio::test]
async fn plus_in_a_presigned_get_key_and_override() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "plus").await;
    let (spaced, plussed) = (random_body(61, 500), random_body(62, 600));
    put_bytes(&s3, "plus", "a b", &spaced).await;
    put_bytes(&s3, "plus", "a+b", &plussed).await;

    let endpoint = gw.endpoint();
    let endpoint = endpoint.as_str();
    let presign = |key: &str, disposition: Option<&str>| {
        let mut req = s3.get_object().bucket("plus").key(key);
        if let Some(d) = disposition {
            req = req.response_content_disposition(d);
        }
        async move {
            let presigned = req
                .presigned(PresigningConfig::expires_in(Duration::from_secs(300)).expect("config"))
                .await
                .expect("presign");
            presigned
                .uri()
                .strip_prefix(endpoint)
                .expect("a URL of the gateway")
                .to_owned()
        }
    };
    let get = |target: &str| {
        gw.raw("GET", target, &[], b"")
            .unwrap_or_else(|e| panic!("GET {target}: {e}"))
    };

    let plus_url = presign("a+b", None).await;
    assert!(plus_url.starts_with("/plus/a%2Bb?"), "{plus_url}");
    let resp = get(&plus_url);
    expect_status(&resp, 200, "key a+b sent as %2B");
    assert_eq!(resp.body, plussed);
    let resp = get(&plus_url.replacen("a%2Bb", "a+b", 1));
    expect_status(&resp, 200, "key a+b sent with a raw +");
    assert_eq!(resp.body, plussed);
    let space_url = presign("a b", None).await;
    assert!(space_url.starts_with("/plus/a%20b?"), "{space_url}");
    let resp = get(&space_url);
    expect_status(&resp, 200, "key 'a b'");
    assert_eq!(resp.body, spaced);
    // In the path '+' is not a space: the URL for "a b" sent with '+' is another resource.
    expect_error(
        &get(&space_url.replacen("a%20b", "a+b", 1)),
        403,
        "SignatureDoesNotMatch",
        "key 'a b' sent as a+b",
    );

    let url = presign("a b", Some("attachment; filename=\"x y.txt\"")).await;
    assert!(url.contains("%20y.txt"), "{url}");
    let (path, query) = url.split_once('?').expect("a query");
    let raw_plus = format!("{path}?{}", query.replace("%20", "+"));
    for sent in [url.clone(), raw_plus] {
        let resp = get(&sent);
        expect_status(&resp, 200, &format!("override sent as {sent}"));
        assert_eq!(
            resp.header("content-disposition"),
            Some("attachment; filename=\"x y.txt\""),
            "{sent}"
        );
        assert_eq!(resp.body, spaced);
    }
    let url = presign("a b", Some("attachment; filename=\"x+y.txt\"")).await;
    assert!(url.contains("%2By.txt"), "{url}");
    let resp = get(&url);
    expect_status(&resp, 200, "override with %2B");
    assert_eq!(
        resp.header("content-disposition"),
        Some("attachment; filename=\"x+y.txt\"")
    );
    // Signed for a plus, sent as a raw '+' (a space): refused, not served as "x y.txt".
    expect_error(
        &get(&url.replace("%2By.txt", "+y.txt")),
        403,
        "SignatureDoesNotMatch",
        "override signed %2B, sent +",
    );
}

// ---------------------------------------------------------------------------------------
// 7. Internal endpoints
// ---------------------------------------------------------------------------------------

fn get_bearer(gw: &Gateway, path: &str, token: Option<&str>) -> u16 {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("authorization", a)])
        .unwrap_or_default();
    gw.raw("GET", path, &headers, b"")
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
        .status
}

#[test]
fn metrics_need_a_token_unless_opened() {
    let gw = Gateway::start();
    assert_eq!(get_bearer(&gw, "/_metrics", None), 403, "no token");
    assert_eq!(get_bearer(&gw, "/_metrics", Some("guess")), 403);
    assert_eq!(
        get_bearer(&gw, "/_metrics", Some(gw.admin_token())),
        200,
        "an admin may read the metrics"
    );
    drop(gw);

    let metrics = random_token(24);
    let gw = Gateway::start_with(&[], &[("GATEWAY_METRICS_TOKEN", &metrics)]);
    assert_eq!(get_bearer(&gw, "/_metrics", None), 403);
    assert_eq!(get_bearer(&gw, "/_metrics", Some(&metrics)), 200);
    // A scraper's token opens nothing else.
    assert_eq!(get_bearer(&gw, "/_admin/pairs", Some(&metrics)), 403);
    assert_eq!(get_bearer(&gw, "/_catalog/pairs", Some(&metrics)), 403);
    drop(gw);

    let gw = Gateway::start_with(&["--metrics-open"], &[]);
    assert_eq!(get_bearer(&gw, "/_metrics", None), 200, "--metrics-open");
    assert_eq!(get_bearer(&gw, "/_admin/pairs", None), 403);
    drop(gw);

    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(&dir, "metrics_open = true\n");
    let gw = Gateway::start_with(&["--config", &config], &[]);
    assert_eq!(
        get_bearer(&gw, "/_metrics", None),
        200,
        "metrics_open = true"
    );
}

#[test]
fn the_catalog_token_opens_the_catalog_only() {
    let catalog = random_token(24);
    let gw = Gateway::start_with(&[], &[("GATEWAY_CATALOG_TOKEN", &catalog)]);
    assert_eq!(get_bearer(&gw, "/_catalog/pairs", Some(&catalog)), 200);
    assert_eq!(get_bearer(&gw, "/_catalog/pairs", None), 403);
    assert_eq!(get_bearer(&gw, "/_catalog/pairs", Some("guess")), 403);
    assert_eq!(
        get_bearer(&gw, "/_catalog/pairs", Some(gw.admin_token())),
        200,
        "the admin token still works on the catalog"
    );
    assert_eq!(get_bearer(&gw, "/_admin/pairs", Some(&catalog)), 403);
    assert_eq!(get_bearer(&gw, "/_admin/scrub", Some(&catalog)), 403);
    assert_eq!(get_bearer(&gw, "/_metrics", Some(&catalog)), 403);
    drop(gw);

    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(&dir, &format!("catalog_token = \"{catalog}\"\n"));
    let gw = Gateway::start_with(&["--config", &config], &[]);
    assert_eq!(
        get_bearer(&gw, "/_catalog/pairs", Some(&catalog)),
        200,
        "catalog_token in the config file"
    );
}

/// `admin_token = ""` (and the others) in the config file is "no token", as an empty
/// environment value is: every internal API stays closed, even to `Bearer ` with nothing.
#[test]
fn an_empty_token_in_the_config_file_is_off() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(
        &dir,
        "admin_token = \"\"\nnative_token = \"\"\nmetrics_token = \"\"\ncatalog_token = \"\"\n",
    );
    let gw = Gateway::start_opts(GatewayOptions {
        args: vec!["--config".into(), config],
        env: vec![("GATEWAY_ADMIN_TOKEN".into(), String::new())],
        ..GatewayOptions::default()
    });
    let sha1 = "0123456789abcdef0123456789abcdef01234567";
    for auth in ["Bearer ", "Bearer", "Bearer \t"] {
        for (method, path) in [
            ("GET", "/_admin/pairs".to_owned()),
            ("GET", "/_metrics".to_owned()),
            ("GET", "/_catalog/pairs".to_owned()),
            ("POST", format!("/_files/{sha1}/inc?magic=1")),
        ] {
            let resp = gw
                .raw(method, &path, &[("authorization", auth)], b"")
                .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
            assert_eq!(
                resp.status,
                403,
                "{method} {path} with {auth:?}: {}",
                resp.text()
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// 8. Region of the credential scope
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_signature_for_another_region_is_refused() {
    let gw = Gateway::start();
    create_bucket(&gw.client(), "region").await;
    put_bytes(&gw.client(), "region", "k", b"hello").await;
    let eu = client_in(&gw, "eu-west-1");

    let err = eu
        .get_object()
        .bucket("region")
        .key("k")
        .send()
        .await
        .expect_err("a eu-west-1 signature on a us-east-1 gateway");
    let service = err.as_service_error().expect("an S3 error answer");
    assert_eq!(
        service.code(),
        Some("AuthorizationHeaderMalformed"),
        "{err:?}"
    );
    assert_eq!(
        service.message(),
        Some(
            "The authorization header is malformed; the region 'eu-west-1' is wrong; \
             expecting 'us-east-1'"
        )
    );
    let put = eu
        .put_object()
        .bucket("region")
        .key("k2")
        .body(b"x".to_vec().into())
        .send()
        .await;
    assert!(put.is_err(), "PUT signed for eu-west-1");
    assert!(
        gw.client()
            .head_object()
            .bucket("region")
            .key("k2")
            .send()
            .await
            .is_err(),
        "the refused PUT stored nothing"
    );

    let presigned = eu
        .get_object()
        .bucket("region")
        .key("k")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(300)).expect("config"))
        .await
        .expect("presign");
    let target = presigned
        .uri()
        .strip_prefix(&gw.endpoint())
        .expect("a URL of the gateway")
        .to_owned();
    let resp = gw.raw("GET", &target, &[], b"").expect("presigned GET");
    expect_error(
        &resp,
        400,
        "AuthorizationQueryParametersError",
        "presigned for eu-west-1",
    );
    assert!(
        resp.text()
            .replace("&apos;", "'")
            .contains("the region 'eu-west-1' is wrong; expecting 'us-east-1'"),
        "{}",
        resp.text()
    );
}

#[tokio::test]
async fn region_setting_and_any_region() {
    let gw = Gateway::start_with(&["--region", "eu-west-1"], &[]);
    let eu = client_in(&gw, "eu-west-1");
    create_bucket(&eu, "region").await;
    put_bytes(&eu, "region", "k", b"hello").await;
    let err = gw
        .client()
        .get_object()
        .bucket("region")
        .key("k")
        .send()
        .await
        .expect_err("us-east-1 on a eu-west-1 gateway");
    assert_eq!(err.code(), Some("AuthorizationHeaderMalformed"), "{err:?}");
    assert!(
        err.message()
            .is_some_and(|m| m.contains("the region 'us-east-1' is wrong; expecting 'eu-west-1'")),
        "{err:?}"
    );
    drop(gw);

    let gw = Gateway::start_with(&["--any-region"], &[]);
    for region in ["us-east-1", "eu-west-1", "ap-south-2"] {
        let s3 = client_in(&gw, region);
        let bucket = format!("any-{region}");
        create_bucket(&s3, &bucket).await;
        put_bytes(&s3, &bucket, "k", region.as_bytes()).await;
    }
    drop(gw);

    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(&dir, "any_region = true\n");
    let gw = Gateway::start_with(&["--config", &config], &[]);
    create_bucket(&client_in(&gw, "sa-east-1"), "anyfile").await;
}
