//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`; not part of the API).
//!
//! Each function feeds arbitrary bytes to one parser that a client reaches before any
//! authentication or that reads what the disk gives back, and checks what must hold of
//! its answer. A panic here is a bug: the fuzzer reports it, and the fix gets a unit test
//! in the parser's module. Everything runs synchronously and is bounded by the input.

use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::Stream;
use http::{HeaderMap, HeaderValue, Method, Uri};

use crate::s3::chunked::{self, ChunkMode};
use crate::s3::sigv4::{self, SigningContext};
use crate::s3::{cors, sigv2};
use meta::{BucketRecord, Command, DeletingRecord, FileRecord, PartRecord, UploadRecord};

/// One fuzz target: arbitrary bytes in, a panic on a bug.
pub type Target = fn(&[u8]);

/// Every target by the name of its binary in `fuzz/fuzz_targets/` and its corpus folder.
pub const TARGETS: &[(&str, Target)] = &[
    ("sigv4_authorization", sigv4_authorization),
    ("presigned_query", presigned_query),
    ("aws_chunked", aws_chunked),
    ("complete_multipart_xml", complete_multipart_xml),
    ("delete_objects_xml", delete_objects_xml),
    ("cors_xml", cors_xml),
    ("lifecycle_xml", lifecycle_xml),
    ("range", range),
    ("object_lock_xml", object_lock_xml),
    ("post_policy", post_policy),
    ("tagging_xml", tagging_xml),
    ("command", command),
    ("records", records),
];

const ACCESS_KEY: &str = "AKIDFUZZ";
const SECRET: &str = "fuzz-secret";
const REGION: &str = "us-east-1";
/// The request time of every fuzzed request: the `x-amz-date` below, so that a parse that
/// gets through reaches the signature check.
const AMZ_DATE: &str = "20260101T000000Z";
const NOW_SECS: u64 = 1_767_225_600;

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(NOW_SECS)
}

fn secret_for(key: &str) -> Option<String> {
    (key == ACCESS_KEY).then(|| SECRET.to_string())
}

fn base_headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        http::header::HOST,
        HeaderValue::from_static("127.0.0.1:9000"),
    );
    h.insert("x-amz-date", HeaderValue::from_static(AMZ_DATE));
    h.insert(
        "x-amz-content-sha256",
        HeaderValue::from_static("UNSIGNED-PAYLOAD"),
    );
    h
}

/// A SigV4 `Authorization` header of arbitrary bytes.
pub fn sigv4_authorization(data: &[u8]) {
    let Ok(value) = HeaderValue::from_bytes(data) else {
        return;
    };
    let mut headers = base_headers();
    headers.insert(http::header::AUTHORIZATION, value);
    let uri = Uri::from_static("/bkt/key");
    for region in [Some(REGION), None] {
        let _ = sigv4::verify(&Method::PUT, &uri, &headers, secret_for, now(), region);
    }
}

/// A request target whose query is arbitrary: SigV4 presigned (`X-Amz-*`) and SigV2
/// presigned (`AWSAccessKeyId`, `Signature`, `Expires`) parameters.
pub fn presigned_query(data: &[u8]) {
    let Ok(query) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(uri) = Uri::try_from(format!("/bkt/key?{query}")) else {
        return;
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::HOST,
        HeaderValue::from_static("127.0.0.1:9000"),
    );
    let _ = sigv4::verify(
        &Method::GET,
        &uri,
        &headers,
        secret_for,
        now(),
        Some(REGION),
    );
    if sigv2::is_presigned_v2(&uri) {
        for host_bucket in [None, Some("bkt")] {
            let check = sigv2::Presigned {
                host_bucket,
                now_secs: NOW_SECS,
                expires_max_secs: 604_800,
            };
            let _ = sigv2::verify_presigned(&Method::GET, &uri, &headers, secret_for, check);
        }
    }
}

/// An `aws-chunked` body. The first byte picks the mode (unsigned with trailers, signed,
/// signed with trailers) and whether a decoded length is announced; the second how the
/// rest is cut into the pieces the network would deliver.
pub fn aws_chunked(data: &[u8]) {
    let [flags, cut, body @ ..] = data else {
        return;
    };
    let context = || {
        SigningContext::new(SECRET, AMZ_DATE, REGION, &"0".repeat(64))
            .unwrap_or_else(|e| panic!("a fixed signing context: {e}"))
    };
    let mode = match flags % 3 {
        0 => ChunkMode::UnsignedTrailer,
        1 => ChunkMode::Signed(context()),
        _ => ChunkMode::SignedTrailer(context()),
    };
    // Bit 2: announce a decoded length (half the body, rarely right: the check must fire).
    let decoded_length = (flags & 0b100 != 0).then_some(body.len() as u64 / 2);
    let piece = usize::from(*cut).max(1);
    let pieces: Vec<Result<Bytes, std::io::Error>> = body
        .chunks(piece)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let (mut stream, trailers) =
        chunked::decode(futures_util::stream::iter(pieces), mode, decoded_length);
    let mut cx = Context::from_waker(Waker::noop());
    let mut data_bytes = 0usize;
    // Every poll consumes input or ends the stream: a bound well above what it needs.
    for _ in 0..=body.len() + 2 {
        match Pin::new(&mut stream).poll_next(&mut cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                data_bytes += chunk.len();
                assert!(data_bytes <= body.len(), "more data out than body in");
            }
            Poll::Ready(Some(Err(_))) => return,
            Poll::Ready(None) => {
                if let Some(n) = decoded_length {
                    assert_eq!(data_bytes as u64, n, "a decoded length was not enforced");
                }
                let _ = trailers.take();
                return;
            }
            Poll::Pending => panic!("a decoder over a ready body is pending"),
        }
    }
    panic!("the decoder neither ended nor failed within its bound");
}

/// A CompleteMultipartUpload body.
pub fn complete_multipart_xml(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::s3::multipart::parse_complete(text);
    }
}

/// A DeleteObjects body: an accepted one names 1 to 1000 keys.
pub fn delete_objects_xml(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(body) = crate::s3::bucket::parse_delete(text)
    {
        assert!((1..=1000).contains(&body.objects.len()));
    }
}

/// A PutBucketCors body, and the rules it yields matched against an origin.
pub fn cors_xml(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(rules) = cors::parse_rules(text)
    {
        let _ = cors::matching_rule(&rules, "https://example.com", "GET", &["x-amz-date"]);
    }
}

/// A PutBucketLifecycleConfiguration body. An accepted one holds 1 to 1000 rules with
/// unique IDs of at most 255 characters, each with an action and any Date at a midnight;
/// what GetBucketLifecycleConfiguration renders of it parses back to the same rules (a
/// client that reads a configuration and puts it back must not change it); and the rules
/// decide expiries and aborts at the extremes of size, time and day length.
pub fn lifecycle_xml(data: &[u8]) {
    use crate::lifecycle::Expiration;
    use crate::lifecycle::rules::{self, RULE_ID_CHARS_MAX, RULES_MAX};
    use crate::s3::lifecycle::{parse_configuration, render_configuration};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(parsed) = parse_configuration(text) else {
        return;
    };
    assert!((1..=RULES_MAX).contains(&parsed.len()));
    let mut ids = std::collections::HashSet::new();
    for rule in &parsed {
        assert!(rule.id.chars().count() <= RULE_ID_CHARS_MAX);
        assert!(ids.insert(rule.id.as_str()), "duplicate ID {:?}", rule.id);
        assert!(
            rule.expiration.is_some()
                || rule.abort_upload_days.is_some()
                || !rule.versions.is_none()
        );
        if let Some(Expiration::Date(at)) = rule.expiration {
            assert_eq!(at % 86_400, 0, "a Date not at midnight");
        }
    }
    let rendered = render_configuration(&parsed);
    let rendered = std::str::from_utf8(&rendered).unwrap_or_else(|e| panic!("rendered: {e}"));
    let again = parse_configuration(rendered)
        .unwrap_or_else(|e| panic!("the rendered configuration is refused: {e:?}\n{rendered}"));
    assert_eq!(again, parsed, "\n{rendered}");
    for day_secs in [0, 1, 86_400, u64::MAX] {
        for (size, created) in [(0, 0), (u64::MAX, u64::MAX), (50, NOW_SECS)] {
            let key = parsed[0].filter.prefix();
            let _ = rules::object_expiry(&parsed, key, (size, None), created, day_secs);
            let tags = meta::tags::TagSet(parsed[0].filter.tags().to_vec());
            let _ = rules::object_expiry(&parsed, key, (size, Some(&tags)), created, day_secs);
            let _ = rules::upload_abort(&parsed, key, created, day_secs);
        }
    }
}

/// A PutObjectLockConfiguration body: an accepted one renders back to itself, and its
/// default retention gives a retention whatever the time.
pub fn object_lock_xml(data: &[u8]) {
    use crate::s3::object_lock::parse_configuration;
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = parse_configuration(text) else {
        return;
    };
    if let Some(d) = config.default_retention {
        for now in [0, NOW_SECS * 1000, u64::MAX] {
            let r = d.from(now);
            assert!(r.until_ms >= now, "{r:?} before {now}");
        }
    }
}

/// A POST upload's policy (base64 JSON, before any signature is checked): a parsed one
/// checks any form, and gives its length bounds, without a panic.
pub fn post_policy(data: &[u8]) {
    use crate::s3::post_policy::{FormFields, parse};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The first line is the policy, the next ones form fields `name=value`.
    let mut lines = text.lines();
    let Ok(policy) = parse(lines.next().unwrap_or("")) else {
        return;
    };
    let mut form = FormFields::default();
    for line in lines.take(64) {
        if let Some((name, value)) = line.split_once('=') {
            form.insert(name, value.to_string());
        }
    }
    let now = time::OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(NOW_SECS as i64);
    let _ = policy.check(&form, "bucket", now);
    let _ = policy.length_range();
}

/// A `Range` header, resolved against object sizes around its own numbers.
pub fn range(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Some(spec) = crate::s3::object::parse_range(text) else {
        return;
    };
    for size in [0, 1, 2, 1000, u64::MAX] {
        if let Some((first, last)) = spec.resolve(size) {
            assert!(
                first <= last && last < size,
                "{spec:?} in {size}: {first}-{last}"
            );
        }
    }
}

/// A `<Tagging>` body (PutObjectTagging, PutBucketTagging, a POST form's `tagging`), and
/// the same bytes as an `x-amz-tagging` header: an accepted set keeps S3's rules and
/// renders to a document that parses back to itself.
pub fn tagging_xml(data: &[u8]) {
    use crate::s3::tagging::{check, parse_header, parse_xml, render};
    use meta::tags::{BUCKET_TAGS_MAX, OBJECT_TAGS_MAX};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(tags) = parse_header(text)
        && check(&tags, OBJECT_TAGS_MAX).is_ok()
    {
        assert!(tags.len() <= OBJECT_TAGS_MAX);
    }
    let Ok(tags) = parse_xml(text) else {
        return;
    };
    if check(&tags, BUCKET_TAGS_MAX).is_err() {
        return;
    }
    let rendered = render(&tags);
    let rendered = std::str::from_utf8(&rendered).unwrap_or_else(|e| panic!("rendered: {e}"));
    let again = parse_xml(rendered).unwrap_or_else(|e| panic!("refused: {e:?}\n{rendered}"));
    assert_eq!(again, tags, "\n{rendered}");
}

/// A metadata command as the Raft log stores it: what decodes re-encodes to itself.
pub fn command(data: &[u8]) {
    if let Ok(cmd) = postcard::from_bytes::<Command>(data) {
        let bytes = postcard::to_stdvec(&cmd).unwrap_or_else(|e| panic!("re-encode: {e}"));
        let again: Command = postcard::from_bytes(&bytes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cmd, again);
    }
}

/// The records of the metadata tables, as read back from redb: a corrupt record is an
/// error, never a panic.
pub fn records(data: &[u8]) {
    use meta::tables::decode_versioned;
    let _ = meta::versions::decode_current_with(data);
    let _ = meta::versions::VersionRecord::decode_with(data);
    let _ = meta::tags::TagSet::decode("tags", data);
    let _ = meta::extras::Extras::decode("bucket_extras", data);
    let _ = decode_versioned::<UploadRecord>("uploads", data);
    let _ = decode_versioned::<PartRecord>("parts", data);
    let _ = decode_versioned::<BucketRecord>("buckets", data);
    let _ = BucketRecord::decode(data);
    let _ = meta::lifecycle::LifecycleRecord::decode(data);
    let _ = decode_versioned::<placement::PairRecord>("pairs", data);
    if let Some(fixed) = data.first_chunk::<16>() {
        let sha1 = placement::Sha1([0x5a; 20]);
        let _ = FileRecord::decode_checked(&sha1, fixed);
    }
    if let Some(fixed) = data.first_chunk::<12>() {
        let _ = DeletingRecord::decode(fixed);
    }
}

#[cfg(test)]
mod tests {
    /// Every seed of `fuzz/corpus/` through its target, without libFuzzer
    /// (`cargo test -p gateway --features fuzzing`).
    #[test]
    fn the_seed_corpora_pass() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
        for &(name, target) in super::TARGETS {
            let dir = root.join(name);
            let seeds =
                std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            let mut count = 0;
            for seed in seeds {
                let path = seed.unwrap().path();
                target(&std::fs::read(&path).unwrap());
                count += 1;
            }
            assert!(count > 0, "no seed for {name}");
        }
    }
}
