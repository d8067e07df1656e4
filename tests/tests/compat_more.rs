//! More S3 compatibility: bucket CORS (rules, preflight, headers on a presigned GET),
//! virtual-hosted-style requests, ListObjects V1 paging and `encoding-type=url`, the size
//! limits and unsupported requests, and `STREAMING-AWS4-HMAC-SHA256-PAYLOAD` uploads whose
//! chunk signatures are computed here.

use std::time::{Duration, SystemTime};

use aws_sdk_s3::Client;
use aws_sdk_s3::config::Credentials;
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::types::{CorsConfiguration, CorsRule, EncodingType};
use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use bytes::Bytes;
use e2e::{
    Gateway, REGION, RawResponse, assert_same_body, content_md5, create_bucket, etag_of, get_bytes,
    poll_until, put_bytes, put_cors_rule, random_body, raw_request, s3_error, xml_element,
};

const MAIL: &str = "https://mail.example";
const EVIL: &str = "https://evil.example";

/// Every `<tag>…</tag>` text of an XML document, in order.
fn xml_elements(xml: &str, tag: &str) -> Vec<String> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(at) = rest.find(&open) {
        let start = at + open.len();
        let Some(len) = rest[start..].find(&close) else {
            break;
        };
        out.push(rest[start..start + len].to_string());
        rest = &rest[start + len + close.len()..];
    }
    out
}

/// Decodes `%XX` escapes (no `+` as space: the gateway escapes `+` and space alike).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .unwrap_or_else(|| panic!("bad escape in {s:?}"));
            out.push(u8::from_str_radix(hex, 16).unwrap_or_else(|_| panic!("bad escape in {s:?}")));
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| panic!("{s:?} does not decode to UTF-8"))
}

/// Whether the bucket holds `key` (HeadObject 200; 404 is `false`, anything else panics).
async fn exists(s3: &Client, bucket: &str, key: &str) -> bool {
    match s3.head_object().bucket(bucket).key(key).send().await {
        Ok(_) => true,
        Err(e) => {
            let (status, code) = s3_error::<(), _>(Err(e));
            assert_eq!(status, 404, "HeadObject {bucket}/{key}: {code}");
            false
        }
    }
}

/// Every content file on both disks.
fn stored_files(gw: &Gateway) -> Vec<std::path::PathBuf> {
    let mut files = gw.content_files(0);
    files.extend(gw.content_files(1));
    files
}

// ---------------------------------------------------------------------------------------
// 1. CORS
// ---------------------------------------------------------------------------------------

fn preflight(gw: &Gateway, target: &str, origin: &str, method: &str) -> RawResponse {
    gw.raw(
        "OPTIONS",
        target,
        &[
            ("origin", origin),
            ("access-control-request-method", method),
            ("access-control-request-headers", "range"),
        ],
        b"",
    )
    .expect("preflight OPTIONS")
}

#[tokio::test]
async fn cors_rules_answer_preflights_and_label_presigned_downloads() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(11, 20_000);
    put_bytes(&s3, "bkt", "attachments/7f3a", &body).await;
    let target = "/bkt/attachments/7f3a";

    // Before any configuration: GetBucketCors 404, preflight refused.
    let (status, code) = s3_error(s3.get_bucket_cors().bucket("bkt").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchCORSConfiguration"));
    let resp = preflight(&gw, target, MAIL, "GET");
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (403, Some("AccessForbidden")),
        "preflight without rules: {}",
        resp.text()
    );

    let rule = CorsRule::builder()
        .allowed_origins(MAIL)
        .allowed_methods("GET")
        .allowed_methods("HEAD")
        .allowed_headers("*")
        .expose_headers("ETag")
        .max_age_seconds(600)
        .build()
        .expect("CORS rule");
    put_cors_rule(&s3, "bkt", rule).await;

    let got = s3
        .get_bucket_cors()
        .bucket("bkt")
        .send()
        .await
        .expect("GetBucketCors");
    let [r] = got.cors_rules() else {
        panic!("one rule expected: {:?}", got.cors_rules());
    };
    assert_eq!(r.allowed_origins(), [MAIL]);
    assert_eq!(r.allowed_methods(), ["GET", "HEAD"]);
    assert_eq!(r.allowed_headers(), ["*"]);
    assert_eq!(r.expose_headers(), ["ETag"]);
    assert_eq!(r.max_age_seconds(), Some(600));

    // The preflight of a webmail page: unsigned, as browsers send it.
    let ok = preflight(&gw, target, MAIL, "GET");
    assert_eq!(ok.status, 200, "preflight from {MAIL}: {}", ok.text());
    assert_eq!(ok.header("access-control-allow-origin"), Some(MAIL));
    assert_eq!(ok.header("access-control-allow-methods"), Some("GET"));
    assert_eq!(ok.header("access-control-allow-headers"), Some("range"));
    assert_eq!(ok.header("access-control-max-age"), Some("600"));
    // Another origin, or a method no rule allows: refused, without Allow-Origin.
    for (origin, method) in [(EVIL, "GET"), (MAIL, "PUT")] {
        let resp = preflight(&gw, target, origin, method);
        assert_eq!(
            (resp.status, resp.error_code().as_deref()),
            (403, Some("AccessForbidden")),
            "preflight {method} from {origin}: {}",
            resp.text()
        );
        assert_eq!(resp.header("access-control-allow-origin"), None);
    }

    // The actual download: a presigned GET fetched with the page's Origin.
    let presigned = s3
        .get_object()
        .bucket("bkt")
        .key("attachments/7f3a")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(300)).expect("config"))
        .await
        .expect("presign GetObject");
    let url_target = presigned
        .uri()
        .strip_prefix(&gw.endpoint())
        .unwrap_or_else(|| panic!("{} is not under {}", presigned.uri(), gw.endpoint()))
        .to_string();
    let fetch = |origin: Option<&str>| {
        let mut headers: Vec<(&str, &str)> = presigned
            .headers()
            .filter(|(k, _)| !k.eq_ignore_ascii_case("host"))
            .collect();
        if let Some(o) = origin {
            headers.push(("origin", o));
        }
        let resp = gw
            .raw("GET", &url_target, &headers, b"")
            .expect("presigned GET");
        assert_eq!(resp.status, 200, "presigned GET: {}", resp.text());
        assert!(resp.complete, "{:?}", resp.body_error);
        assert_same_body(&resp.body, &body, "presigned GET");
        resp
    };
    let resp = fetch(Some(MAIL));
    assert_eq!(resp.header("access-control-allow-origin"), Some(MAIL));
    assert_eq!(resp.header("access-control-expose-headers"), Some("ETag"));
    assert_eq!(resp.header("etag"), Some(etag_of(&body).as_str()));
    for origin in [None, Some(EVIL)] {
        let resp = fetch(origin);
        assert_eq!(
            resp.header("access-control-allow-origin"),
            None,
            "origin {origin:?}"
        );
    }

    // Deleted: GetBucketCors 404 again, preflight and actual requests unlabelled.
    s3.delete_bucket_cors()
        .bucket("bkt")
        .send()
        .await
        .expect("DeleteBucketCors");
    let (status, code) = s3_error(s3.get_bucket_cors().bucket("bkt").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchCORSConfiguration"));
    let resp = preflight(&gw, target, MAIL, "GET");
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (403, Some("AccessForbidden")),
        "preflight after DeleteBucketCors: {}",
        resp.text()
    );
    assert_eq!(
        fetch(Some(MAIL)).header("access-control-allow-origin"),
        None
    );

    // Malformed XML: 400 MalformedXML, nothing configured.
    let xml = b"<CORSConfiguration><CORSRule><AllowedOrigin>*</AllowedOrigin>";
    let resp = gw
        .signed("PUT", "/bkt?cors")
        .header("content-md5", &content_md5(xml))
        .body(xml)
        .send();
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (400, Some("MalformedXML")),
        "truncated CORS XML: {}",
        resp.text()
    );
    // A method CORS does not know.
    let patch = CorsRule::builder()
        .allowed_origins(MAIL)
        .allowed_methods("PATCH")
        .build()
        .expect("CORS rule");
    let (status, code) = s3_error(
        s3.put_bucket_cors()
            .bucket("bkt")
            .cors_configuration(
                CorsConfiguration::builder()
                    .cors_rules(patch)
                    .build()
                    .expect("CORS configuration"),
            )
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (400, "InvalidRequest"));
    let (status, code) = s3_error(s3.get_bucket_cors().bucket("bkt").send().await);
    assert_eq!(
        (status, code.as_str()),
        (404, "NoSuchCORSConfiguration"),
        "refused configurations are not stored"
    );
}

// ---------------------------------------------------------------------------------------
// 2. Virtual-hosted style
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn virtual_hosted_style_with_domain() {
    let gw = Gateway::start_with(&["--domain", "s3.test"], &[]);
    let s3 = gw.client();
    create_bucket(&s3, "mybucket").await;
    let vhost = format!("mybucket.s3.test:{}", gw.port());
    let body = random_body(21, 3_000);

    let resp = gw
        .signed("PUT", "/dir/a%20b.txt")
        .header("host", &vhost)
        .body(&body)
        .send();
    assert_eq!(resp.status, 200, "virtual-hosted PUT: {}", resp.text());
    assert_eq!(resp.header("etag"), Some(etag_of(&body).as_str()));

    // Read both ways: path style (the SDK, and raw), virtual-hosted.
    assert_same_body(
        &get_bytes(&s3, "mybucket", "dir/a b.txt").await,
        &body,
        "path-style SDK GET",
    );
    for (what, target, host) in [
        ("path-style", "/mybucket/dir/a%20b.txt", None),
        ("virtual-hosted", "/dir/a%20b.txt", Some(vhost.as_str())),
    ] {
        let mut req = gw.signed("GET", target);
        if let Some(h) = host {
            req = req.header("host", h);
        }
        let resp = req.send();
        assert_eq!(resp.status, 200, "{what} GET: {}", resp.text());
        assert_same_body(&resp.body, &body, what);
    }

    // Listing, virtual-hosted: the bucket is the host, the path is "/".
    put_bytes(&s3, "mybucket", "top.txt", b"top").await;
    let resp = gw
        .signed("GET", "/?list-type=2")
        .header("host", &vhost)
        .send();
    assert_eq!(resp.status, 200, "virtual-hosted list: {}", resp.text());
    let xml = resp.text();
    assert!(xml.contains("<ListBucketResult"), "{xml}");
    assert_eq!(xml_element(&xml, "Name").as_deref(), Some("mybucket"));
    assert_eq!(xml_elements(&xml, "Key"), ["dir/a b.txt", "top.txt"]);
    let resp = gw
        .signed("GET", "/?list-type=2&delimiter=%2F")
        .header("host", &vhost)
        .send();
    assert_eq!(resp.status, 200, "{}", resp.text());
    let xml = resp.text();
    assert_eq!(xml_elements(&xml, "Key"), ["top.txt"]);
    assert_eq!(xml_elements(&xml, "Prefix"), ["", "dir/"], "{xml}");

    // HEAD bucket and DELETE object, virtual-hosted.
    let resp = gw.signed("HEAD", "/").header("host", &vhost).send();
    assert_eq!(resp.status, 200);
    let resp = gw
        .signed("DELETE", "/top.txt")
        .header("host", &vhost)
        .send();
    assert_eq!(resp.status, 204, "{}", resp.text());
    assert!(!exists(&s3, "mybucket", "top.txt").await);

    // A bucket host of a bucket that does not exist.
    let resp = gw
        .signed("GET", "/dir/a%20b.txt")
        .header("host", &format!("nobucket.s3.test:{}", gw.port()))
        .send();
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (404, Some("NoSuchBucket")),
        "{}",
        resp.text()
    );
}

#[tokio::test]
async fn without_domain_a_bucket_host_is_path_style() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "mybucket").await;
    let vhost = format!("mybucket.s3.test:{}", gw.port());

    // The path's first segment is the bucket, whatever the Host.
    let resp = gw
        .signed("PUT", "/mybucket/k")
        .header("host", &vhost)
        .body(b"path style")
        .send();
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(get_bytes(&s3, "mybucket", "k").await, b"path style");

    // `/k` is the bucket "k", which does not exist.
    let resp = gw.signed("GET", "/k").header("host", &vhost).send();
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (404, Some("NoSuchBucket")),
        "{}",
        resp.text()
    );
    // `/` is the service: ListBuckets.
    let resp = gw
        .signed("GET", "/?list-type=2")
        .header("host", &vhost)
        .send();
    assert_eq!(resp.status, 200, "{}", resp.text());
    let xml = resp.text();
    assert!(xml.contains("<ListAllMyBucketsResult"), "{xml}");
    assert_eq!(xml_elements(&xml, "Name"), ["mybucket"]);
}

// ---------------------------------------------------------------------------------------
// 3. Listing
// ---------------------------------------------------------------------------------------

/// 15 keys: two "directories" and ten top-level keys, in byte order.
fn fifteen_keys() -> Vec<String> {
    let mut keys: Vec<String> = ["alpha/1", "alpha/2", "alpha/3", "beta/1", "beta/2"]
        .iter()
        .map(|k| k.to_string())
        .collect();
    keys.extend((0..10).map(|i| format!("key-{i:02}")));
    keys
}

#[tokio::test]
async fn list_objects_v1_pages_with_markers() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let keys = fifteen_keys();
    // Written in a scrambled order.
    for i in 0..keys.len() {
        let key = &keys[(i * 7) % keys.len()];
        put_bytes(&s3, "bkt", key, key.as_bytes()).await;
    }

    // No delimiter: S3 need not send NextMarker; clients take the last key as the marker.
    let mut collected = Vec::new();
    let mut page_sizes = Vec::new();
    let mut marker: Option<String> = None;
    for page in 0.. {
        assert!(page < 10, "more than 10 pages for 15 keys at max-keys 4");
        let out = s3
            .list_objects()
            .bucket("bkt")
            .max_keys(4)
            .set_marker(marker.clone())
            .send()
            .await
            .expect("ListObjects page");
        assert_eq!(out.max_keys(), Some(4));
        assert_eq!(out.marker().unwrap_or(""), marker.as_deref().unwrap_or(""));
        let page_keys: Vec<String> = out
            .contents()
            .iter()
            .map(|o| o.key().expect("Key").to_string())
            .collect();
        assert!(
            out.contents().iter().all(|o| o.owner().is_some()),
            "V1 lists owners"
        );
        let last = page_keys.last().cloned();
        if let Some(next) = out.next_marker() {
            assert_eq!(Some(next), last.as_deref(), "NextMarker is the last key");
        }
        page_sizes.push(page_keys.len());
        collected.extend(page_keys);
        if out.is_truncated() == Some(true) {
            marker = Some(last.expect("a truncated page has keys"));
        } else {
            break;
        }
    }
    assert_eq!(page_sizes, [4, 4, 4, 3]);
    assert_eq!(collected, keys, "every key once, in order");

    // With a delimiter, NextMarker is given, and may be a common prefix.
    let mut prefixes = Vec::new();
    let mut collected = Vec::new();
    let mut marker: Option<String> = None;
    let mut pages = 0;
    loop {
        pages += 1;
        assert!(pages <= 10, "more than 10 pages at max-keys 2");
        let out = s3
            .list_objects()
            .bucket("bkt")
            .delimiter("/")
            .max_keys(2)
            .set_marker(marker.clone())
            .send()
            .await
            .expect("ListObjects page with delimiter");
        let page_keys: Vec<String> = out
            .contents()
            .iter()
            .map(|o| o.key().expect("Key").to_string())
            .collect();
        let page_prefixes: Vec<String> = out
            .common_prefixes()
            .iter()
            .map(|p| p.prefix().expect("Prefix").to_string())
            .collect();
        assert_eq!(page_keys.len() + page_prefixes.len(), 2, "page {pages}");
        if pages == 1 {
            assert!(page_keys.is_empty(), "{page_keys:?}");
            assert_eq!(page_prefixes, ["alpha/", "beta/"]);
            assert_eq!(out.next_marker(), Some("beta/"));
        }
        prefixes.extend(page_prefixes);
        collected.extend(page_keys);
        if out.is_truncated() == Some(true) {
            let next = out
                .next_marker()
                .expect("a truncated V1 page with a delimiter has NextMarker");
            marker = Some(next.to_string());
        } else {
            assert_eq!(out.next_marker(), None);
            break;
        }
    }
    assert_eq!(pages, 6);
    assert_eq!(prefixes, ["alpha/", "beta/"]);
    assert_eq!(collected, keys[5..]);
}

#[tokio::test]
async fn list_objects_v2_url_encoding_owner_location_start_after() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let mut keys: Vec<String> = [
        "with space.txt",
        "plus+sign",
        "100% done",
        "naïve/日本語.txt",
        "a&b<c>d\"e'f",
        "dir with space/inner",
        "tilde~dash-under_dot.",
    ]
    .iter()
    .map(|k| k.to_string())
    .collect();
    for key in &keys {
        put_bytes(&s3, "bkt", key, key.as_bytes()).await;
    }
    keys.sort();

    // encoding-type=url: the Rust SDK hands the keys over as sent, still escaped.
    let out = s3
        .list_objects_v2()
        .bucket("bkt")
        .encoding_type(EncodingType::Url)
        .send()
        .await
        .expect("ListObjectsV2 encoding-type=url");
    assert_eq!(out.encoding_type(), Some(&EncodingType::Url));
    let raw: Vec<&str> = out
        .contents()
        .iter()
        .map(|o| o.key().expect("Key"))
        .collect();
    for k in &raw {
        assert!(
            k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"%-_.~/".contains(&b)),
            "an escaped key is unreserved characters and escapes only: {k:?}"
        );
    }
    assert!(raw.contains(&"plus%2Bsign"), "{raw:?}");
    assert!(raw.contains(&"with%20space.txt"), "{raw:?}");
    assert!(raw.contains(&"tilde~dash-under_dot."), "{raw:?}");
    let decoded: Vec<String> = raw.iter().map(|k| percent_decode(k)).collect();
    assert_eq!(decoded, keys);

    // Common prefixes are escaped too.
    let out = s3
        .list_objects_v2()
        .bucket("bkt")
        .delimiter("/")
        .encoding_type(EncodingType::Url)
        .send()
        .await
        .expect("ListObjectsV2 delimiter=/ encoding-type=url");
    let prefixes: Vec<String> = out
        .common_prefixes()
        .iter()
        .map(|p| percent_decode(p.prefix().expect("Prefix")))
        .collect();
    assert_eq!(prefixes, ["dir with space/", "naïve/"]);

    // Without encoding-type, the XML escaping alone round-trips the same keys.
    let out = s3
        .list_objects_v2()
        .bucket("bkt")
        .send()
        .await
        .expect("ListObjectsV2");
    let plain: Vec<&str> = out
        .contents()
        .iter()
        .map(|o| o.key().expect("Key"))
        .collect();
    assert_eq!(plain, keys);
    assert!(
        out.contents().iter().all(|o| o.owner().is_none()),
        "V2 lists owners only with fetch-owner"
    );

    let out = s3
        .list_objects_v2()
        .bucket("bkt")
        .fetch_owner(true)
        .send()
        .await
        .expect("ListObjectsV2 fetch-owner=true");
    assert_eq!(out.contents().len(), keys.len());
    for o in out.contents() {
        let owner = o.owner().unwrap_or_else(|| panic!("no Owner: {o:?}"));
        assert!(owner.id().is_some_and(|id| !id.is_empty()), "{owner:?}");
    }

    let loc = s3
        .get_bucket_location()
        .bucket("bkt")
        .send()
        .await
        .expect("GetBucketLocation");
    let constraint = loc.location_constraint().map_or("", |c| c.as_str());
    assert!(
        constraint.is_empty() || constraint == "us-east-1",
        "LocationConstraint of us-east-1: {constraint:?}"
    );

    let out = s3
        .list_objects_v2()
        .bucket("bkt")
        .start_after("zzzz")
        .send()
        .await
        .expect("ListObjectsV2 start-after past the end");
    assert!(out.contents().is_empty(), "{:?}", out.contents());
    assert_eq!(out.is_truncated(), Some(false));
    assert_eq!(out.key_count(), Some(0));
    assert_eq!(out.start_after(), Some("zzzz"));
    assert_eq!(out.next_continuation_token(), None);

    // max-keys=0: an empty page that is not truncated (a truncated page without a token or
    // a key would leave a pager nowhere to continue from).
    let out = s3
        .list_objects_v2()
        .bucket("bkt")
        .max_keys(0)
        .send()
        .await
        .expect("ListObjectsV2 max-keys=0");
    assert!(out.contents().is_empty(), "{:?}", out.contents());
    assert_eq!(out.key_count(), Some(0));
    assert_eq!(out.is_truncated(), Some(false));
    assert_eq!(out.next_continuation_token(), None);
    let out = s3
        .list_objects()
        .bucket("bkt")
        .max_keys(0)
        .send()
        .await
        .expect("ListObjects max-keys=0");
    assert!(out.contents().is_empty(), "{:?}", out.contents());
    assert_eq!(out.is_truncated(), Some(false));
    assert_eq!(out.next_marker(), None);
}

// ---------------------------------------------------------------------------------------
// 4. Limits and unsupported requests
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn limits_on_size_key_and_metadata() {
    const MAX: usize = 1024 * 1024;
    let gw = Gateway::start_with(&["--max-object-bytes", &MAX.to_string()], &[]);
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;

    // One byte of the limit too many is refused before the body is read.
    let before = stored_files(&gw);
    let big = random_body(41, 2 * MAX);
    let resp = gw.signed("PUT", "/bkt/big").body(&big).send();
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (400, Some("EntityTooLarge")),
        "2 MiB PUT over a 1 MiB limit: {}",
        resp.text()
    );
    assert!(!exists(&s3, "bkt", "big").await);
    assert_eq!(stored_files(&gw), before, "nothing stored");
    assert!(
        poll_until(Duration::from_secs(5), || gw.temp_files(0).is_empty()
            && gw.temp_files(1).is_empty()),
        "temp files left: {:?} {:?}",
        gw.temp_files(0),
        gw.temp_files(1)
    );
    // Exactly the limit is fine.
    let at_limit = random_body(42, MAX);
    put_bytes(&s3, "bkt", "at-limit", &at_limit).await;
    assert_same_body(
        &get_bytes(&s3, "bkt", "at-limit").await,
        &at_limit,
        "object at the size limit",
    );

    // Keys: 1024 bytes, not 1025.
    let long = "k".repeat(1024);
    put_bytes(&s3, "bkt", &long, b"long key").await;
    assert_eq!(get_bytes(&s3, "bkt", &long).await, b"long key");
    let too_long = "k".repeat(1025);
    let (status, code) = s3_error(
        s3.put_object()
            .bucket("bkt")
            .key(&too_long)
            .body(b"x".to_vec().into())
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (400, "KeyTooLongError"));
    // Multi-byte characters count in bytes: 342 * 3 = 1026.
    let (status, code) = s3_error(
        s3.put_object()
            .bucket("bkt")
            .key("€".repeat(342))
            .body(b"x".to_vec().into())
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (400, "KeyTooLongError"));

    // User metadata: names plus values, 2048 bytes at most.
    let at_limit = "v".repeat(2048 - "note".len());
    s3.put_object()
        .bucket("bkt")
        .key("meta-ok")
        .metadata("note", &at_limit)
        .body(b"m".to_vec().into())
        .send()
        .await
        .expect("PutObject with 2048 bytes of metadata");
    let head = s3
        .head_object()
        .bucket("bkt")
        .key("meta-ok")
        .send()
        .await
        .expect("HeadObject");
    assert_eq!(head.metadata().and_then(|m| m.get("note")), Some(&at_limit));
    let (status, code) = s3_error(
        s3.put_object()
            .bucket("bkt")
            .key("meta-big")
            .metadata("note", format!("{at_limit}v"))
            .body(b"m".to_vec().into())
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (400, "MetadataTooLarge"));
    let (status, code) = s3_error(
        s3.put_object()
            .bucket("bkt")
            .key("meta-big")
            .metadata("a", "x".repeat(1100))
            .metadata("b", "y".repeat(1100))
            .body(b"m".to_vec().into())
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (400, "MetadataTooLarge"),
        "the sum of all entries counts"
    );
    assert!(!exists(&s3, "bkt", "meta-big").await);

    // Bucket names at the length limits (64 and 2 are refused: buckets.rs).
    for name in ["a".repeat(63), "b2c".to_string()] {
        create_bucket(&s3, &name).await;
        put_bytes(&s3, &name, "k", b"in a bucket at a length limit").await;
        assert_eq!(
            get_bytes(&s3, &name, "k").await,
            b"in a bucket at a length limit"
        );
    }
}

#[tokio::test]
async fn unknown_subresources_and_bad_arguments() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    put_bytes(&s3, "bkt", "k", b"v").await;

    for (method, target) in [
        ("GET", "/bkt?website"),
        ("PUT", "/bkt?replication"),
        ("GET", "/bkt/k?torrent"),
    ] {
        let resp = gw.signed(method, target).send();
        assert_eq!(
            (resp.status, resp.error_code().as_deref()),
            (501, Some("NotImplemented")),
            "{method} {target}: {}",
            resp.text()
        );
        assert_eq!(resp.header("content-type"), Some("application/xml"));
        assert!(resp.text().contains("<Error>"), "{}", resp.text());
    }
    let (status, code) = s3_error(s3.get_bucket_website().bucket("bkt").send().await);
    assert_eq!((status, code.as_str()), (501, "NotImplemented"));

    for target in [
        "/bkt?list-type=2&max-keys=abc",
        "/bkt?max-keys=abc",
        "/bkt?list-type=2&max-keys=-1",
    ] {
        let resp = gw.signed("GET", target).send();
        assert_eq!(
            (resp.status, resp.error_code().as_deref()),
            (400, Some("InvalidArgument")),
            "GET {target}: {}",
            resp.text()
        );
    }
    // The object is untouched by all of it.
    assert_eq!(get_bytes(&s3, "bkt", "k").await, b"v");
}

// ---------------------------------------------------------------------------------------
// 5. aws-chunked with signed chunks
// ---------------------------------------------------------------------------------------

const STREAMING_SIGNED: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";

/// A PUT with `x-amz-content-sha256: STREAMING-AWS4-HMAC-SHA256-PAYLOAD`: the headers signed
/// with aws-sigv4 (the seed signature), then `data` in chunks of `chunk_size` and a final
/// empty chunk, each signed with `v4::sign_chunk` on the previous signature. The signature
/// sent for chunk `tamper` (0-based, the final chunk included) has one character changed.
fn streaming_signed_put(
    gw: &Gateway,
    target: &str,
    data: &[u8],
    chunk_size: usize,
    content_encoding: &str,
    tamper: Option<usize>,
) -> RawResponse {
    let mut chunks: Vec<&[u8]> = data.chunks(chunk_size).collect();
    chunks.push(b"");
    let frame_len =
        |c: &[u8]| format!("{:x};chunk-signature=", c.len()).len() + 64 + 2 + c.len() + 2;
    let encoded_len: usize = chunks.iter().map(|c| frame_len(c)).sum();

    let host = format!("127.0.0.1:{}", gw.port());
    let uri = format!("http://{host}{target}");
    let mut headers: Vec<(String, String)> = vec![
        ("host".into(), host),
        ("content-encoding".into(), content_encoding.into()),
        ("content-length".into(), encoded_len.to_string()),
        (
            "x-amz-decoded-content-length".into(),
            data.len().to_string(),
        ),
    ];
    let identity: Identity =
        Credentials::new(gw.access_key(), gw.secret_key(), None, None, "e2e-chunked").into();
    let time = SystemTime::now();
    let params = || {
        let mut settings = SigningSettings::default();
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        v4::SigningParams::builder()
            .identity(&identity)
            .region(REGION)
            .name("s3")
            .time(time)
            .settings(settings)
            .build()
            .expect("signing params")
    };
    let signable = SignableRequest::new(
        "PUT",
        uri.as_str(),
        headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        SignableBody::Precomputed(STREAMING_SIGNED.to_string()),
    )
    .expect("signable request");
    let (instructions, seed) = sign(signable, &params().into()).expect("sign").into_parts();
    for (k, v) in instructions.headers() {
        headers.push((k.to_string(), v.to_string()));
    }
    assert!(
        headers
            .iter()
            .any(|(k, v)| k == "x-amz-content-sha256" && v == STREAMING_SIGNED),
        "{headers:?}"
    );

    let chunk_params = params();
    let mut previous = seed;
    let mut body = Vec::with_capacity(encoded_len);
    for (i, chunk) in chunks.iter().enumerate() {
        let signature = v4::sign_chunk(&Bytes::copy_from_slice(chunk), &previous, &chunk_params)
            .expect("sign chunk")
            .signature()
            .to_string();
        let mut sent = signature.clone();
        if tamper == Some(i) {
            let flipped = if sent.starts_with('0') { "1" } else { "0" };
            sent.replace_range(0..1, flipped);
        }
        body.extend_from_slice(format!("{:x};chunk-signature={sent}\r\n", chunk.len()).as_bytes());
        body.extend_from_slice(chunk);
        body.extend_from_slice(b"\r\n");
        previous = signature;
    }
    assert_eq!(body.len(), encoded_len);
    raw_request(gw.port(), "PUT", target, &headers, &body)
        .unwrap_or_else(|e| panic!("streaming PUT {target}: no response: {e}"))
}

#[tokio::test]
async fn streaming_signed_chunks_store_the_decoded_bytes() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let data = random_body(51, 128 * 1024);

    let resp = streaming_signed_put(&gw, "/bkt/chunked", &data, 64 * 1024, "aws-chunked", None);
    assert_eq!(resp.status, 200, "signed streaming PUT: {}", resp.text());
    assert_eq!(resp.header("etag"), Some(etag_of(&data).as_str()));
    assert_same_body(
        &get_bytes(&s3, "bkt", "chunked").await,
        &data,
        "signed streaming PUT",
    );
    let head = s3
        .head_object()
        .bucket("bkt")
        .key("chunked")
        .send()
        .await
        .expect("HeadObject");
    assert_eq!(head.content_length(), Some(data.len() as i64));
    assert!(
        !head
            .content_encoding()
            .unwrap_or("")
            .to_ascii_lowercase()
            .contains("aws-chunked"),
        "stored Content-Encoding: {:?}",
        head.content_encoding()
    );
    // A real encoding beside aws-chunked is kept, without aws-chunked.
    let resp = streaming_signed_put(
        &gw,
        "/bkt/chunked-gzip",
        &data,
        64 * 1024,
        "aws-chunked,gzip",
        None,
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let resp = gw.signed("HEAD", "/bkt/chunked-gzip").send();
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("content-encoding"), Some("gzip"));
    assert_eq!(resp.header("content-length"), Some("131072"));

    // A bad signature on the second data chunk, or on the final empty chunk: refused, and
    // nothing is stored.
    let before = stored_files(&gw);
    let other = random_body(52, 128 * 1024);
    for tamper in [1, 2] {
        let resp = streaming_signed_put(
            &gw,
            "/bkt/tampered",
            &other,
            64 * 1024,
            "aws-chunked",
            Some(tamper),
        );
        assert_eq!(
            (resp.status, resp.error_code().as_deref()),
            (403, Some("SignatureDoesNotMatch")),
            "chunk {tamper} tampered: {}",
            resp.text()
        );
        assert!(!exists(&s3, "bkt", "tampered").await, "chunk {tamper}");
    }
    assert_eq!(stored_files(&gw), before, "nothing stored");
    assert!(
        poll_until(Duration::from_secs(5), || gw.temp_files(0).is_empty()
            && gw.temp_files(1).is_empty()),
        "temp files left"
    );
}

/// Settings the gateway does not keep answer as S3 does for a bucket that never had them.
#[tokio::test]
async fn unkept_settings_answer_as_never_configured() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "settings").await;
    put_bytes(&s3, "settings", "x", b"x").await;

    let v = s3
        .get_bucket_versioning()
        .bucket("settings")
        .send()
        .await
        .unwrap();
    assert!(v.status().is_none(), "unversioned: {v:?}");
    let acl = s3.get_bucket_acl().bucket("settings").send().await.unwrap();
    assert_eq!(acl.grants().len(), 1);
    assert_eq!(
        acl.grants()[0].permission().map(|p| p.as_str()),
        Some("FULL_CONTROL")
    );
    let acl = s3
        .get_object_acl()
        .bucket("settings")
        .key("x")
        .send()
        .await
        .unwrap();
    // The bucket's owner: the gateway's own key, by its access key id.
    assert_eq!(
        acl.owner().and_then(|o| o.display_name()),
        Some(gw.access_key())
    );
    let tags = s3
        .get_object_tagging()
        .bucket("settings")
        .key("x")
        .send()
        .await
        .unwrap();
    assert!(tags.tag_set().is_empty());

    let (status, code) = s3_error(s3.get_bucket_policy().bucket("settings").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchBucketPolicy"));
    let r = s3
        .get_bucket_lifecycle_configuration()
        .bucket("settings")
        .send()
        .await;
    let (status, code) = s3_error(r);
    assert_eq!(
        (status, code.as_str()),
        (404, "NoSuchLifecycleConfiguration")
    );
    let (status, code) = s3_error(s3.get_bucket_encryption().bucket("settings").send().await);
    assert_eq!(
        (status, code.as_str()),
        (404, "ServerSideEncryptionConfigurationNotFoundError")
    );
    let (status, code) = s3_error(s3.get_bucket_tagging().bucket("settings").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchTagSet"));

    // Only for buckets and objects that exist.
    let (status, code) = s3_error(s3.get_bucket_versioning().bucket("nobucket").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchBucket"));
    let r = s3
        .get_object_tagging()
        .bucket("settings")
        .key("nokey")
        .send()
        .await;
    let (status, code) = s3_error(r);
    assert_eq!((status, code.as_str()), (404, "NoSuchKey"));
}

/// A metadata value sent as UTF-8 bytes is stored and given back RFC 2047 encoded, as S3
/// does (SDKs decode it; a value that is not UTF-8 is refused, see the unit test).
#[tokio::test]
async fn non_ascii_metadata_round_trips_rfc2047_encoded() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let put = gw
        .signed("PUT", "/bkt/utf8")
        .header("x-amz-meta-city", "Zürich")
        .body(b"v")
        .send();
    assert_eq!(put.status, 200, "{}", put.text());
    let head = gw.signed("HEAD", "/bkt/utf8").send();
    assert_eq!(
        head.header("x-amz-meta-city"),
        Some("=?UTF-8?B?WsO8cmljaA==?=")
    );
    let got = s3
        .head_object()
        .bucket("bkt")
        .key("utf8")
        .send()
        .await
        .expect("head");
    let value = got
        .metadata()
        .and_then(|m| m.get("city"))
        .expect("the value");
    assert!(
        value == "Zürich" || value == "=?UTF-8?B?WsO8cmljaA==?=",
        "{value}"
    );
}
