//! Conditional requests: If-Match, If-None-Match, If-Modified-Since, If-Unmodified-Since
//! on GET and HEAD (RFC 7232 precedence), and If-None-Match: * / If-Match on PUT.

use aws_sdk_s3::primitives::DateTime;
use e2e::{Gateway, create_bucket, etag_of, get_bytes, put_bytes, random_body, s3_error, sha1_hex};

const PAST: &str = "Mon, 01 Jan 2001 00:00:00 GMT";
const FUTURE: &str = "Fri, 01 Jan 2100 00:00:00 GMT";

/// One case: the conditional headers and the status they must give.
struct Case {
    headers: &'static [(&'static str, Cond)],
    status: u16,
}

#[derive(Clone, Copy)]
enum Cond {
    RightEtag,
    WrongEtag,
    Star,
    Past,
    Future,
}

fn value(c: Cond, etag: &str) -> String {
    match c {
        Cond::RightEtag => etag.to_string(),
        Cond::WrongEtag => "\"0123456789abcdef0123456789abcdef\"".to_string(),
        Cond::Star => "*".to_string(),
        Cond::Past => PAST.to_string(),
        Cond::Future => FUTURE.to_string(),
    }
}

const CASES: &[Case] = &[
    Case {
        headers: &[],
        status: 200,
    },
    Case {
        headers: &[("if-none-match", Cond::RightEtag)],
        status: 304,
    },
    Case {
        headers: &[("if-none-match", Cond::Star)],
        status: 304,
    },
    Case {
        headers: &[("if-none-match", Cond::WrongEtag)],
        status: 200,
    },
    Case {
        headers: &[("if-match", Cond::RightEtag)],
        status: 200,
    },
    Case {
        headers: &[("if-match", Cond::Star)],
        status: 200,
    },
    Case {
        headers: &[("if-match", Cond::WrongEtag)],
        status: 412,
    },
    Case {
        headers: &[("if-modified-since", Cond::Future)],
        status: 304,
    },
    Case {
        headers: &[("if-modified-since", Cond::Past)],
        status: 200,
    },
    Case {
        headers: &[("if-unmodified-since", Cond::Past)],
        status: 412,
    },
    Case {
        headers: &[("if-unmodified-since", Cond::Future)],
        status: 200,
    },
    // If-Match wins over If-Unmodified-Since (RFC 7232 section 6).
    Case {
        headers: &[
            ("if-match", Cond::RightEtag),
            ("if-unmodified-since", Cond::Past),
        ],
        status: 200,
    },
    Case {
        headers: &[
            ("if-match", Cond::WrongEtag),
            ("if-unmodified-since", Cond::Future),
        ],
        status: 412,
    },
    // If-None-Match wins over If-Modified-Since.
    Case {
        headers: &[
            ("if-none-match", Cond::RightEtag),
            ("if-modified-since", Cond::Past),
        ],
        status: 304,
    },
    Case {
        headers: &[
            ("if-none-match", Cond::WrongEtag),
            ("if-modified-since", Cond::Future),
        ],
        status: 200,
    },
    // A failing If-Match is 412 even when If-None-Match would give 304.
    Case {
        headers: &[
            ("if-match", Cond::WrongEtag),
            ("if-none-match", Cond::RightEtag),
        ],
        status: 412,
    },
];

fn describe(case: &Case, etag: &str) -> String {
    case.headers
        .iter()
        .map(|(n, c)| format!("{n}: {}", value(*c, etag)))
        .collect::<Vec<_>>()
        .join(", ")
}

#[tokio::test]
async fn get_and_head_conditions_give_200_304_412() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(1, 20_000);
    put_bytes(&s3, "bkt", "obj", &body).await;
    let etag = etag_of(&body);

    let mut failures = Vec::new();
    for method in ["GET", "HEAD"] {
        for case in CASES {
            let mut req = gw.signed(method, "/bkt/obj");
            for (name, cond) in case.headers {
                req = req.header(name, &value(*cond, &etag));
            }
            let resp = req.send();
            let what = format!("{method} /bkt/obj [{}]", describe(case, &etag));
            if resp.status != case.status {
                failures.push(format!(
                    "{what}: want {}, got {} {}",
                    case.status,
                    resp.status,
                    resp.text()
                ));
                continue;
            }
            match resp.status {
                200 if method == "GET" => {
                    assert_eq!(resp.body, body, "{what}: body");
                }
                304 => {
                    assert!(resp.body.is_empty(), "{what}: a 304 has no body");
                    assert_eq!(resp.header("etag"), Some(etag.as_str()), "{what}: ETag");
                }
                412 if method == "GET" => {
                    assert_eq!(
                        resp.error_code().as_deref(),
                        Some("PreconditionFailed"),
                        "{what}: {}",
                        resp.text()
                    );
                }
                _ => {}
            }
        }
    }
    assert!(
        failures.is_empty(),
        "conditional reads:\n{}",
        failures.join("\n")
    );
}

#[tokio::test]
async fn sdk_conditional_get_and_head() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = b"conditional through the SDK".to_vec();
    put_bytes(&s3, "bkt", "obj", &body).await;
    let etag = etag_of(&body);
    let past = DateTime::from_secs(978_307_200);
    let future = DateTime::from_secs(4_102_444_800);

    let (status, _) = s3_error(
        s3.get_object()
            .bucket("bkt")
            .key("obj")
            .if_none_match(&etag)
            .send()
            .await,
    );
    assert_eq!(status, 304, "GET If-None-Match: etag");
    let (status, code) = s3_error(
        s3.get_object()
            .bucket("bkt")
            .key("obj")
            .if_match("\"deadbeef\"")
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (412, "PreconditionFailed"),
        "GET If-Match wrong"
    );
    let (status, _) = s3_error(
        s3.get_object()
            .bucket("bkt")
            .key("obj")
            .if_modified_since(future)
            .send()
            .await,
    );
    assert_eq!(status, 304, "GET If-Modified-Since future");
    let (status, _) = s3_error(
        s3.get_object()
            .bucket("bkt")
            .key("obj")
            .if_unmodified_since(past)
            .send()
            .await,
    );
    assert_eq!(status, 412, "GET If-Unmodified-Since past");
    let got = s3
        .get_object()
        .bucket("bkt")
        .key("obj")
        .if_match(&etag)
        .if_unmodified_since(past)
        .send()
        .await
        .expect("GET If-Match right + If-Unmodified-Since past");
    let bytes = got.body.collect().await.expect("body").into_bytes();
    assert_eq!(&bytes[..], &body[..]);

    let (status, _) = s3_error(
        s3.head_object()
            .bucket("bkt")
            .key("obj")
            .if_none_match(&etag)
            .send()
            .await,
    );
    assert_eq!(status, 304, "HEAD If-None-Match: etag");
    let (status, _) = s3_error(
        s3.head_object()
            .bucket("bkt")
            .key("obj")
            .if_match("\"deadbeef\"")
            .send()
            .await,
    );
    assert_eq!(status, 412, "HEAD If-Match wrong");
    let (status, _) = s3_error(
        s3.head_object()
            .bucket("bkt")
            .key("obj")
            .if_modified_since(future)
            .send()
            .await,
    );
    assert_eq!(status, 304, "HEAD If-Modified-Since future");
    let (status, _) = s3_error(
        s3.head_object()
            .bucket("bkt")
            .key("obj")
            .if_unmodified_since(past)
            .send()
            .await,
    );
    assert_eq!(status, 412, "HEAD If-Unmodified-Since past");
    let head = s3
        .head_object()
        .bucket("bkt")
        .key("obj")
        .if_match(&etag)
        .if_unmodified_since(past)
        .send()
        .await
        .expect("HEAD If-Match right + If-Unmodified-Since past");
    assert_eq!(head.content_length(), Some(body.len() as i64));
}

#[tokio::test]
async fn if_modified_since_the_last_modified_time_is_304() {
    // Last-Modified has a resolution of seconds: asking with that exact date is "not
    // modified since", and If-Unmodified-Since with it holds.
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    put_bytes(&s3, "bkt", "obj", b"dated").await;
    let head = gw.signed("HEAD", "/bkt/obj").send();
    let last_modified = head
        .header("last-modified")
        .expect("HEAD has Last-Modified")
        .to_string();
    let resp = gw
        .signed("GET", "/bkt/obj")
        .header("if-modified-since", &last_modified)
        .send();
    assert_eq!(resp.status, 304, "If-Modified-Since: {last_modified}");
    let resp = gw
        .signed("GET", "/bkt/obj")
        .header("if-unmodified-since", &last_modified)
        .send();
    assert_eq!(resp.status, 200, "If-Unmodified-Since: {last_modified}");
}

#[tokio::test]
async fn put_if_none_match_star_only_creates() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let old = random_body(2, 10_000);
    put_bytes(&s3, "bkt", "taken", &old).await;
    let new = random_body(3, 12_000);

    let (status, code) = s3_error(
        s3.put_object()
            .bucket("bkt")
            .key("taken")
            .if_none_match("*")
            .body(new.clone().into())
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (412, "PreconditionFailed"),
        "SDK PUT If-None-Match: * on an existing key"
    );
    let resp = gw
        .signed("PUT", "/bkt/taken")
        .header("if-none-match", "*")
        .body(&new)
        .send();
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (412, Some("PreconditionFailed")),
        "raw PUT If-None-Match: * on an existing key: {}",
        resp.text()
    );
    // The old object is untouched and the new body was not stored.
    let head = s3
        .head_object()
        .bucket("bkt")
        .key("taken")
        .send()
        .await
        .expect("HeadObject");
    assert_eq!(head.e_tag(), Some(etag_of(&old).as_str()));
    assert_eq!(get_bytes(&s3, "bkt", "taken").await, old);
    assert_eq!(
        gw.admin_file(&sha1_hex(&new)),
        None,
        "the refused body is not stored"
    );
    assert_eq!(gw.admin_file(&sha1_hex(&old)).expect("admin").refs, Some(1));

    let put = s3
        .put_object()
        .bucket("bkt")
        .key("fresh")
        .if_none_match("*")
        .body(new.clone().into())
        .send()
        .await
        .expect("PUT If-None-Match: * on a new key");
    assert_eq!(put.e_tag(), Some(etag_of(&new).as_str()));
    assert_eq!(get_bytes(&s3, "bkt", "fresh").await, new);
    let resp = gw
        .signed("PUT", "/bkt/fresh-raw")
        .header("if-none-match", "*")
        .body(b"raw")
        .send();
    assert_eq!(
        resp.status,
        200,
        "raw PUT If-None-Match: * on a new key: {}",
        resp.text()
    );
}

#[tokio::test]
async fn put_if_match_needs_the_current_etag() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let v1 = b"version one".to_vec();
    put_bytes(&s3, "bkt", "k", &v1).await;

    let (status, code) = s3_error(
        s3.put_object()
            .bucket("bkt")
            .key("k")
            .if_match(etag_of(b"not the current version"))
            .body(b"version two".to_vec().into())
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (412, "PreconditionFailed"),
        "PUT If-Match wrong"
    );
    assert_eq!(
        get_bytes(&s3, "bkt", "k").await,
        v1,
        "untouched after a failed If-Match"
    );

    s3.put_object()
        .bucket("bkt")
        .key("k")
        .if_match(etag_of(&v1))
        .body(b"version two".to_vec().into())
        .send()
        .await
        .expect("PUT If-Match right");
    assert_eq!(get_bytes(&s3, "bkt", "k").await, b"version two");

    // S3: If-Match on a key that does not exist is 404 NoSuchKey.
    let (status, code) = s3_error(
        s3.put_object()
            .bucket("bkt")
            .key("never")
            .if_match(etag_of(&v1))
            .body(b"x".to_vec().into())
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (404, "NoSuchKey"),
        "PUT If-Match on a missing key"
    );
}
