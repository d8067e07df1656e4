//! Object operations: PutObject, CopyObject, GetObject, HeadObject, DeleteObject.

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use http::{HeaderMap, HeaderValue, StatusCode, header};

use super::auth::{BodyInfo, body_stream};
use super::checksum::{self, crc32_base64};
use super::chunked::TrailerSlot;
use super::dates::{http_date, iso8601};
use super::error::{ErrorCode, S3Error};
use super::request::{Query, copy_source, header_str};
use super::xml::XmlWriter;
use crate::state::AppState;
use crate::store::{
    ChecksumSlot, CopyWrite, ObjectAttrs, PutRequest, RangeSpec, ReadBody, StoreError,
};
use meta::tags::TagSet;
use meta::{ObjectRecord, WritePrecondition};

/// Bound on reading a key again when what a GET or copy read changed under it (an
/// overwrite or delete committed between reading the record and reading its content, or
/// before the copy's command): each attempt answers the key as of its own read. A copy on
/// a follower spends a read-index round and a forwarded command per attempt, a window in
/// which a key overwritten many times a second is often replaced: three attempts lost all
/// three now and then under the read-race test's load on three nodes; each attempt is one
/// metadata read and one command, so eight keep the 503 out of reach at little cost.
pub(crate) const READ_RACE_ATTEMPTS: usize = 8;

const META_PREFIX: &str = "x-amz-meta-";
/// Standard headers S3 stores with an object and returns on GET/HEAD.
const STORED_HEADERS: [&str; 5] = [
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "expires",
];

/// Content-Type, `x-amz-meta-*` and the stored standard headers of a request, whose
/// header section must be within S3's bound (the store checks the user metadata's).
/// A multipart upload that asks for a lock is refused, never stored without it: the
/// upload's record has no place for it (the bucket's default retention applies to every
/// write, and PutObjectRetention/LegalHold to any version).
pub fn refuse_lock_headers(headers: &HeaderMap, what: &str) -> Result<(), S3Error> {
    let asks = [
        "x-amz-object-lock-mode",
        "x-amz-object-lock-retain-until-date",
        "x-amz-object-lock-legal-hold",
    ]
    .iter()
    .any(|h| headers.contains_key(*h));
    if asks {
        return Err(S3Error::not_implemented(&format!(
            "x-amz-object-lock-* headers on {what}"
        )));
    }
    Ok(())
}

pub fn attrs_from(headers: &HeaderMap) -> Result<ObjectAttrs, S3Error> {
    super::request::check_header_section(headers)?;
    let mut user_meta = Vec::new();
    for (name, value) in headers {
        if let Some(n) = name.as_str().strip_prefix(META_PREFIX) {
            // S3 keeps a value sent as UTF-8 bytes and gives it back RFC 2047 encoded
            // (see `meta_value`); anything else is no text.
            let v = std::str::from_utf8(value.as_bytes()).map_err(|_| {
                S3Error::new(ErrorCode::InvalidArgument, "metadata values must be UTF-8")
            })?;
            user_meta.push((n.to_string(), v.to_string()));
        }
    }
    let mut stored = Vec::new();
    for name in STORED_HEADERS {
        if let Some(v) = header_str(headers, name)? {
            // aws-chunked is the transfer framing, not the object's encoding.
            let v = if name == "content-encoding" {
                v.split(',')
                    .map(str::trim)
                    .filter(|e| !e.eq_ignore_ascii_case("aws-chunked"))
                    .collect::<Vec<_>>()
                    .join(",")
            } else {
                v.to_string()
            };
            if !v.is_empty() {
                stored.push((name.to_string(), v));
            }
        }
    }
    Ok(ObjectAttrs {
        content_type: header_str(headers, "content-type")?.map(str::to_string),
        user_meta,
        headers: stored,
    })
}

pub fn content_md5_of(headers: &HeaderMap) -> Result<Option<[u8; 16]>, S3Error> {
    let Some(v) = header_str(headers, "content-md5")? else {
        return Ok(None);
    };
    let invalid = || {
        S3Error::new(
            ErrorCode::InvalidDigest,
            "The Content-MD5 you specified is not valid.",
        )
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(v.trim())
        .map_err(|_| invalid())?;
    bytes.try_into().map(Some).map_err(|_| invalid())
}

/// `If-None-Match: *`, `If-Match: <etag>` or `If-Match: *` on a write (PutObject,
/// CompleteMultipartUpload, CopyObject's destination). S3 takes only `*` in
/// `If-None-Match` there, and one of the two headers.
pub(crate) fn write_precondition(
    headers: &HeaderMap,
) -> Result<Option<WritePrecondition>, S3Error> {
    let none_match = header_str(headers, "if-none-match")?;
    let if_match = header_str(headers, "if-match")?;
    match (none_match, if_match) {
        (None, None) => Ok(None),
        (None, Some(v)) => Ok(Some(match_condition(v))),
        (Some(v), None) if v.trim() == "*" => Ok(Some(WritePrecondition::NoneMatchAny)),
        (Some(_), None) => Err(S3Error::new(
            ErrorCode::NotImplemented,
            "If-None-Match on writes supports only *",
        )),
        (Some(_), Some(_)) => Err(S3Error::new(
            ErrorCode::NotImplemented,
            "If-Match and If-None-Match together on a write are not supported",
        )),
    }
}

/// `If-Match` on DeleteObject (the current object must exist, `*`, or have this ETag).
/// The conditions S3 keeps for directory buckets are refused, never ignored.
pub(crate) fn delete_precondition(
    headers: &HeaderMap,
) -> Result<Option<WritePrecondition>, S3Error> {
    for name in [
        "if-none-match",
        "x-amz-if-match-last-modified-time",
        "x-amz-if-match-size",
    ] {
        if headers.contains_key(name) {
            return Err(S3Error::new(
                ErrorCode::NotImplemented,
                format!("{name} on DeleteObject is not supported"),
            ));
        }
    }
    Ok(header_str(headers, "if-match")?.map(match_condition))
}

/// An `If-Match` value (or a DeleteObjects `<ETag>`) as a condition.
pub(crate) fn match_condition(v: &str) -> WritePrecondition {
    if v.trim() == "*" {
        WritePrecondition::MatchAny
    } else {
        WritePrecondition::Match(normalize_etag(v))
    }
}

/// ETags compare with their quotes; clients sometimes send them bare.
fn normalize_etag(v: &str) -> String {
    let v = v.trim();
    let v = v.strip_prefix("W/").unwrap_or(v);
    if v.starts_with('"') {
        v.to_string()
    } else {
        format!("\"{v}\"")
    }
}

fn etag_matches(list: &str, etag: &str) -> bool {
    list.split(',')
        .any(|t| t.trim() == "*" || normalize_etag(t) == etag)
}

/// The decoded body length: `x-amz-decoded-content-length` for aws-chunked, else
/// Content-Length.
pub fn declared_length_of(parts: &http::request::Parts) -> Result<Option<u64>, S3Error> {
    if let Some(info) = parts.extensions.get::<BodyInfo>()
        && info.decoded_length.is_some()
    {
        return Ok(info.decoded_length);
    }
    header_str(&parts.headers, "content-length")?
        .map(|v| {
            v.parse::<u64>().map_err(|_| {
                S3Error::new(ErrorCode::InvalidArgument, "Content-Length is not a number")
            })
        })
        .transpose()
}

/// A request body as decoded bytes or the S3 error that ended it.
pub type BodyStream =
    Box<dyn futures_util::Stream<Item = Result<bytes::Bytes, S3Error>> + Unpin + Send>;

/// The body of a write as a stream, with its flexible checksum verified on the way.
pub fn checked_body(
    parts: &http::request::Parts,
    body: Body,
) -> Result<(BodyStream, Option<ChecksumSlot>), S3Error> {
    let trailers = parts
        .extensions
        .get::<BodyInfo>()
        .and_then(|i| i.trailers.clone());
    with_checksum(
        Box::new(body_stream(body)),
        &parts.headers,
        trailers.as_ref(),
    )
}

/// `stream` with the flexible checksum that `headers` (or `trailers`) ask for verified on
/// the way, and the slot the verified value is left in.
pub fn with_checksum(
    stream: BodyStream,
    headers: &HeaderMap,
    trailers: Option<&TrailerSlot>,
) -> Result<(BodyStream, Option<ChecksumSlot>), S3Error> {
    match checksum::requested(headers, trailers)? {
        Some((alg, expected)) => {
            let slot = ChecksumSlot::default();
            Ok((
                Box::new(checksum::verify(stream, alg, expected, slot.clone())),
                Some(slot),
            ))
        }
        None => Ok((stream, None)),
    }
}

pub async fn put(
    app: &AppState,
    bucket: &str,
    key: &str,
    req: Request,
) -> Result<Response, S3Error> {
    let (parts, body) = req.into_parts();
    let lock = super::object_lock::lock_change(&parts.headers)?;
    super::object_lock::check_lock_allowed(app, bucket, &lock).await?;
    let tags = super::tagging::from_headers(&parts.headers)?;
    let acl = super::acl::from_headers(&parts.headers)?;
    let (stream, checksum) = checked_body(&parts, body)?;
    let request = PutRequest {
        bucket: bucket.to_string(),
        key: key.to_string(),
        attrs: attrs_from(&parts.headers)?,
        size_bytes: declared_length_of(&parts)?,
        content_md5: content_md5_of(&parts.headers)?,
        precondition: write_precondition(&parts.headers)?,
        checksum,
        lock,
        tags: tags.clone(),
        acl,
    };
    let stored = app.store.put(request, stream).await?;
    let record = stored.record;
    let mut resp = StatusCode::OK.into_response();
    set(resp.headers_mut(), header::ETAG, &record.etag());
    version_header(resp.headers_mut(), stored.version_id.as_deref());
    checksum_headers(resp.headers_mut(), &record, true);
    super::lifecycle::expiration_header(app, bucket, key, (&record, &tags), resp.headers_mut())
        .await;
    Ok(resp)
}

/// `x-amz-copy-source-if-*` against the source object: any condition that does not hold
/// fails the copy with 412.
pub fn check_copy_conditions(headers: &HeaderMap, source: &ObjectRecord) -> Result<(), S3Error> {
    match conditions(headers, "x-amz-copy-source-", source)? {
        None => Ok(()),
        Some(_) => Err(S3Error::precondition_failed()),
    }
}

pub async fn copy(
    app: &AppState,
    bucket: &str,
    key: &str,
    headers: &HeaderMap,
) -> Result<Response, S3Error> {
    let (src_bucket, src_key, src_version) = copy_source(headers)?;
    // REPLACE takes the request's tags (none without `x-amz-tagging`), COPY the source's.
    let replace_tags = super::tagging::replaces(headers)?;
    // A copy's ACL is the request's (private by default), never its source's.
    let acl = super::acl::from_headers(headers)?;
    let request_tags = if replace_tags {
        super::tagging::from_headers(headers)?
    } else {
        meta::tags::TagSet::default()
    };
    let lock = super::object_lock::lock_change(headers)?;
    super::object_lock::check_lock_allowed(app, bucket, &lock).await?;
    let replace = match header_str(headers, "x-amz-metadata-directive")? {
        None | Some("COPY") => false,
        Some("REPLACE") => true,
        Some(_) => {
            return Err(S3Error::new(
                ErrorCode::InvalidArgument,
                "Unknown metadata directive.",
            ));
        }
    };
    // A version named by id may be copied onto its own key: that is how S3 restores it.
    if src_bucket == bucket && src_key == key && !replace && src_version.is_none() {
        return Err(S3Error::new(
            ErrorCode::InvalidRequest,
            "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes.",
        ));
    }
    let attrs = if replace {
        Some(attrs_from(headers)?)
    } else {
        None
    };
    let precondition = write_precondition(headers)?;
    let mut attempt = 0;
    let (stored, source_version) = loop {
        attempt += 1;
        let (source, source_version, source_tags) =
            copy_source_version(app, &src_bucket, &src_key, src_version.as_deref()).await?;
        check_copy_conditions(headers, &source)?;
        let tags = if replace_tags {
            request_tags.clone()
        } else {
            source_tags
        };
        match app
            .store
            .copy(
                &source,
                (&src_bucket, &src_key),
                (bucket, key),
                CopyWrite {
                    attrs: attrs.clone(),
                    precondition: precondition.clone(),
                    lock,
                    tags,
                    acl,
                },
                src_version.as_deref(),
            )
            .await
        {
            // The source was replaced between its read and the copy's command.
            Err(StoreError::Raced(_)) if attempt < READ_RACE_ATTEMPTS => continue,
            copied => break (copied?, source_version),
        }
    };
    let mut w = XmlWriter::new();
    w.open_root("CopyObjectResult");
    w.leaf("LastModified", &iso8601(stored.record.created_ms));
    w.leaf("ETag", &stored.record.etag());
    w.close("CopyObjectResult");
    let mut resp = ([(header::CONTENT_TYPE, "application/xml")], w.finish()).into_response();
    let h = resp.headers_mut();
    version_header(h, stored.version_id.as_deref());
    if let Some(id) = &source_version {
        set(h, "x-amz-copy-source-version-id", id);
    }
    Ok(resp)
}

/// A copy's source (CopyObject, UploadPartCopy): the version named, else the current
/// one, with its id and tags. A delete marker cannot be copied: named by id it is
/// InvalidRequest (S3's answer), as the current version it is NoSuchKey.
pub(crate) async fn copy_source_version(
    app: &AppState,
    bucket: &str,
    key: &str,
    version: Option<&str>,
) -> Result<(ObjectRecord, Option<String>, TagSet), S3Error> {
    match app
        .store
        .head_at(bucket, key, version)
        .await
        .map(|h| (h.record, h.version_id, h.tags))
    {
        Err(StoreError::VersionIsDeleteMarker { .. }) => Err(S3Error::new(
            ErrorCode::InvalidRequest,
            "The source of a copy request may not specifically refer to a delete marker by version id.",
        )),
        read => Ok(read?),
    }
}

/// `x-amz-version-id`, sent where the bucket has versioning.
fn version_header(headers: &mut HeaderMap, version_id: Option<&str>) {
    if let Some(id) = version_id {
        set(headers, "x-amz-version-id", id);
    }
}

fn set(headers: &mut HeaderMap, name: impl header::IntoHeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        headers.insert(name, v);
    }
}

/// The stored (or, for CRC32, always known) checksum, for `x-amz-checksum-mode: ENABLED`
/// and PUT answers.
fn checksum_headers(headers: &mut HeaderMap, record: &ObjectRecord, only_stored: bool) {
    match &record.checksum {
        Some(c) => {
            let name =
                http::HeaderName::from_bytes(format!("x-amz-checksum-{}", c.algorithm).as_bytes());
            if let (Ok(n), Ok(v)) = (name, HeaderValue::from_str(&c.value)) {
                headers.insert(n, v);
            }
        }
        None if !only_stored => set(headers, "x-amz-checksum-crc32", &crc32_base64(record.crc32)),
        None => {}
    }
    if only_stored {
        return;
    }
    match &record.checksum {
        Some(c) => set(
            headers,
            "x-amz-checksum-type",
            super::checksum::checksum_type(c),
        ),
        None if !record.part_sizes.is_empty() => {
            headers.insert(
                "x-amz-checksum-type",
                HeaderValue::from_static("FULL_OBJECT"),
            );
        }
        None => {}
    }
}

/// GET/HEAD of part `n` of a multipart object with `x-amz-checksum-mode: ENABLED`: the
/// whole object's checksum does not describe the part; the part's own does, where the
/// object keeps its parts' checksums (S3 answers it for composite checksums).
async fn part_checksum_headers(
    app: &AppState,
    headers: &mut HeaderMap,
    record: &ObjectRecord,
    n: u64,
    request: &HeaderMap,
) -> Result<(), S3Error> {
    let enabled = header_str(request, "x-amz-checksum-mode")?
        .is_some_and(|m| m.eq_ignore_ascii_case("ENABLED"));
    if !enabled || record.part_sizes.is_empty() {
        return Ok(());
    }
    for alg in checksum::Algorithm::ALL {
        headers.remove(alg.header());
    }
    headers.remove("x-amz-checksum-type");
    let composite = record
        .checksum
        .as_ref()
        .is_some_and(|c| c.value.contains('-'));
    if !composite {
        return Ok(());
    }
    let parts = app.store.object_part_checksums(record).await?;
    if let Some(p) = parts
        && let Some(v) = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| p.parts.get(i))
    {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(format!("x-amz-checksum-{}", p.algorithm).as_bytes()),
            HeaderValue::from_str(v),
        ) {
            headers.insert(name, value);
        }
        set(headers, "x-amz-checksum-type", "COMPOSITE");
    }
    Ok(())
}

/// The headers every GET and HEAD of an object carries.
fn object_headers(headers: &mut HeaderMap, record: &ObjectRecord) {
    set(headers, header::ETAG, &record.etag());
    set(
        headers,
        header::LAST_MODIFIED,
        &http_date(record.created_ms),
    );
    set(
        headers,
        header::CONTENT_TYPE,
        record
            .content_type
            .as_deref()
            .unwrap_or("application/octet-stream"),
    );
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    for (name, value) in &record.headers {
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.insert(n, v);
        }
    }
    for (name, value) in &record.user_meta {
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(format!("{META_PREFIX}{name}").as_bytes()),
            HeaderValue::from_str(&meta_value(value)),
        ) {
            headers.append(n, v);
        }
    }
}

/// A metadata value as S3 sends it back: as it is when it is printable US-ASCII, else
/// RFC 2047 encoded (`=?UTF-8?B?<base64>?=`), which every S3 SDK decodes.
fn meta_value(value: &str) -> std::borrow::Cow<'_, str> {
    use base64::Engine as _;
    if value
        .bytes()
        .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
    {
        return value.into();
    }
    let b64 = base64::engine::general_purpose::STANDARD.encode(value.as_bytes());
    format!("=?UTF-8?B?{b64}?=").into()
}

/// `response-*` query parameters of a signed GET override the stored headers: a webmail
/// hands out a link that downloads under the attachment's original name.
fn response_overrides(headers: &mut HeaderMap, q: &Query) {
    const OVERRIDES: [(&str, header::HeaderName); 6] = [
        ("response-content-type", header::CONTENT_TYPE),
        ("response-content-disposition", header::CONTENT_DISPOSITION),
        ("response-cache-control", header::CACHE_CONTROL),
        ("response-content-language", header::CONTENT_LANGUAGE),
        ("response-expires", header::EXPIRES),
        ("response-content-encoding", header::CONTENT_ENCODING),
    ];
    for (param, name) in OVERRIDES {
        if let Some(v) = q.get(param) {
            set(headers, name, v);
        }
    }
}

/// GET/HEAD conditions: `Ok(Some(304 response))`, `Err(412)`, or `Ok(None)` to serve.
fn read_conditions(
    headers: &HeaderMap,
    record: &ObjectRecord,
) -> Result<Option<Response>, S3Error> {
    Ok(conditions(headers, "", record)?.map(|_| not_modified(record)))
}

/// The conditional headers `<prefix>if-match`, `-if-none-match`, `-if-modified-since`,
/// `-if-unmodified-since`, evaluated in RFC 7232's order as S3 applies it: If-Match, else
/// If-Unmodified-Since (412 when false); then If-None-Match, else If-Modified-Since
/// (304 when false).
fn conditions(
    headers: &HeaderMap,
    prefix: &str,
    record: &ObjectRecord,
) -> Result<Option<StatusCode>, S3Error> {
    let etag = record.etag();
    let modified_secs = record.created_ms / 1000;
    let header = |name: &str| header_str(headers, &format!("{prefix}{name}"));
    let date = |name: &str| -> Result<Option<u64>, S3Error> {
        Ok(header(name)?
            .and_then(|v| httpdate::parse_http_date(v).ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs()))
    };
    match header("if-match")? {
        Some(m) if !etag_matches(m, &etag) => return Err(S3Error::precondition_failed()),
        Some(_) => {}
        None => {
            if let Some(t) = date("if-unmodified-since")?
                && modified_secs > t
            {
                return Err(S3Error::precondition_failed());
            }
        }
    }
    match header("if-none-match")? {
        Some(m) if etag_matches(m, &etag) => return Ok(Some(StatusCode::NOT_MODIFIED)),
        Some(_) => {}
        None => {
            if let Some(t) = date("if-modified-since")?
                && modified_secs <= t
            {
                return Ok(Some(StatusCode::NOT_MODIFIED));
            }
        }
    }
    Ok(None)
}

fn not_modified(record: &ObjectRecord) -> Response {
    let mut resp = StatusCode::NOT_MODIFIED.into_response();
    set(resp.headers_mut(), header::ETAG, &record.etag());
    set(
        resp.headers_mut(),
        header::LAST_MODIFIED,
        &http_date(record.created_ms),
    );
    resp
}

/// Parses a single-range `Range` header. Anything S3 would ignore (multiple ranges,
/// other units, bad syntax) yields `None` and the whole object is served.
pub fn parse_range(value: &str) -> Option<RangeSpec> {
    let spec = value.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (first, last) = spec.split_once('-')?;
    let (first, last) = (first.trim(), last.trim());
    if first.is_empty() {
        return last.parse().ok().map(RangeSpec::Suffix);
    }
    let first: u64 = first.parse().ok()?;
    let last: Option<u64> = if last.is_empty() {
        None
    } else {
        Some(last.parse().ok()?)
    };
    if last.is_some_and(|l| l < first) {
        return None;
    }
    Some(RangeSpec::From { first, last })
}

/// The byte range of part `n` (1-based) of an object.
fn part_range(record: &ObjectRecord, n: u64) -> Result<RangeSpec, S3Error> {
    let invalid = || {
        S3Error::new(
            ErrorCode::InvalidPartNumber,
            "The requested partnumber is not satisfiable",
        )
    };
    if record.part_sizes.is_empty() {
        return if n == 1 {
            Ok(RangeSpec::From {
                first: 0,
                last: None,
            })
        } else {
            Err(invalid())
        };
    }
    let index = usize::try_from(n)
        .ok()
        .filter(|&i| i >= 1 && i <= record.part_sizes.len())
        .ok_or_else(invalid)?;
    let first: u64 = record.part_sizes[..index - 1].iter().sum();
    let size = record.part_sizes[index - 1];
    Ok(RangeSpec::From {
        first,
        last: Some(first + size.saturating_sub(1)),
    })
}

/// Whether part `n` of the object holds no byte (an empty object's one part, or an empty
/// last part): it is answered whole, with a Content-Length of 0.
fn empty_part(record: &ObjectRecord, n: u64) -> bool {
    record.size_bytes == 0
        || usize::try_from(n)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| record.part_sizes.get(i))
            == Some(&0)
}

pub async fn get(
    app: &AppState,
    bucket: &str,
    key: &str,
    headers: &HeaderMap,
    q: &Query,
) -> Result<Response, S3Error> {
    let part = q.number("partNumber")?;
    if part.is_some() && headers.contains_key(header::RANGE) {
        return Err(S3Error::new(
            ErrorCode::InvalidRequest,
            "Cannot specify both Range header and partNumber query parameter",
        ));
    }
    let version = q.get("versionId");
    let mut attempt = 0;
    let (read, version_id, lock, tags) = loop {
        attempt += 1;
        let found = app.store.head_at(bucket, key, version).await?;
        let (record, version_id, lock, tags) =
            (found.record, found.version_id, found.lock, found.tags);
        if let Some(resp) = read_conditions(headers, &record)? {
            return Ok(resp);
        }
        let range = match part {
            Some(n) => Some(part_range(&record, n)?),
            None => header_str(headers, "range")?.and_then(parse_range),
        };
        if part.is_some_and(|n| empty_part(&record, n)) {
            // An empty part (an empty object's only one, or an empty last part): serve it
            // as it is, no byte.
            let mut resp = head_response(&record, q, headers, StatusCode::OK, Body::empty())?;
            version_header(resp.headers_mut(), version_id.as_deref());
            return Ok(resp);
        }
        match app.store.get_record(bucket, key, record, range).await {
            // Overwritten or deleted since its record was read: the new answer, with its
            // own conditions and range.
            Err(StoreError::Raced(_)) if attempt < READ_RACE_ATTEMPTS => continue,
            read => break (read?, version_id, lock, tags),
        }
    };
    let length = match read.range {
        Some((first, last)) => last - first + 1,
        None => read.record.size_bytes,
    };
    let body = match read.body {
        ReadBody::Buffered(bytes) => Body::from(bytes),
        ReadBody::Stream(stream) => Body::from_stream(stream),
    };
    let status = if read.range.is_some() {
        StatusCode::PARTIAL_CONTENT
    } else {
        StatusCode::OK
    };
    let mut resp = head_response(&read.record, q, headers, status, body)?;
    let h = resp.headers_mut();
    version_header(h, version_id.as_deref());
    super::object_lock::lock_headers(h, &lock);
    super::tagging::count_header(h, &tags);
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    if let Some((first, last)) = read.range {
        set(
            h,
            header::CONTENT_RANGE,
            &format!("bytes {first}-{last}/{}", read.record.size_bytes),
        );
        // A checksum of the whole body does not describe a range of it.
        for alg in checksum::Algorithm::ALL {
            h.remove(alg.header());
        }
        h.remove("x-amz-checksum-type");
    }
    if let Some(n) = part {
        part_checksum_headers(app, h, &read.record, n, headers).await?;
    }
    if version.is_none() {
        // Expiry rules apply to the current version, which one named by id may not be.
        super::lifecycle::expiration_header(app, bucket, key, (&read.record, &tags), h).await;
    }
    Ok(resp)
}

/// The response head shared by GET and HEAD.
fn head_response(
    record: &ObjectRecord,
    q: &Query,
    headers: &HeaderMap,
    status: StatusCode,
    body: Body,
) -> Result<Response, S3Error> {
    let mut resp = (status, body).into_response();
    let h = resp.headers_mut();
    object_headers(h, record);
    // S3 reports the parts count only to a request that names a part.
    if q.has("partNumber") {
        let parts = record.part_sizes.len().max(1);
        set(h, "x-amz-mp-parts-count", &parts.to_string());
    }
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(record.size_bytes));
    if header_str(headers, "x-amz-checksum-mode")?
        .is_some_and(|m| m.eq_ignore_ascii_case("ENABLED"))
    {
        checksum_headers(h, record, false);
    }
    response_overrides(h, q);
    Ok(resp)
}

pub async fn head(
    app: &AppState,
    bucket: &str,
    key: &str,
    headers: &HeaderMap,
    q: &Query,
) -> Result<Response, S3Error> {
    let found = app.store.head_at(bucket, key, q.get("versionId")).await?;
    let (record, version_id) = (found.record, found.version_id);
    if let Some(resp) = read_conditions(headers, &record)? {
        return Ok(resp);
    }
    if let Some(n) = q.number("partNumber")? {
        let (first, last) = match part_range(&record, n)? {
            RangeSpec::From { first, last } => {
                (first, last.unwrap_or(record.size_bytes.saturating_sub(1)))
            }
            RangeSpec::Suffix(_) => (0, record.size_bytes.saturating_sub(1)),
        };
        let mut resp = head_response(
            &record,
            q,
            headers,
            StatusCode::PARTIAL_CONTENT,
            Body::empty(),
        )?;
        let h = resp.headers_mut();
        let empty = empty_part(&record, n);
        h.insert(
            header::CONTENT_LENGTH,
            HeaderValue::from(if empty { 0 } else { last - first + 1 }),
        );
        if !empty {
            set(
                h,
                header::CONTENT_RANGE,
                &format!("bytes {first}-{last}/{}", record.size_bytes),
            );
        }
        part_checksum_headers(app, h, &record, n, headers).await?;
        version_header(resp.headers_mut(), version_id.as_deref());
        return Ok(resp);
    }
    let mut resp = head_response(&record, q, headers, StatusCode::OK, Body::empty())?;
    version_header(resp.headers_mut(), version_id.as_deref());
    super::object_lock::lock_headers(resp.headers_mut(), &found.lock);
    super::tagging::count_header(resp.headers_mut(), &found.tags);
    if !q.has("versionId") {
        // Expiry rules apply to the current version, which one named by id may not be.
        let (h, tags) = (resp.headers_mut(), &found.tags);
        super::lifecycle::expiration_header(app, bucket, key, (&record, tags), h).await;
    }
    Ok(resp)
}

pub async fn delete(
    app: &AppState,
    bucket: &str,
    key: &str,
    headers: &HeaderMap,
    q: &Query,
) -> Result<Response, S3Error> {
    let precondition = delete_precondition(headers)?;
    let deleted = match q.get("versionId") {
        // S3 checks no condition on a DELETE of one version: it changes no current
        // object but that one, named exactly.
        Some(_) if precondition.is_some() => {
            return Err(S3Error::not_implemented(
                "If-Match on a DELETE of a version",
            ));
        }
        // Authorized by `access::needs`: the bypass header asks for the owner right.
        Some(id) => {
            let bypass = super::object_lock::bypass_governance(headers);
            app.store.delete_version(bucket, key, id, bypass).await?
        }
        None => app.store.delete(bucket, key, precondition).await?,
    };
    let mut resp = StatusCode::NO_CONTENT.into_response();
    let h = resp.headers_mut();
    version_header(h, deleted.version_id.as_deref());
    if deleted.marker {
        set(h, "x-amz-delete-marker", "true");
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_ascii_metadata_goes_back_rfc2047_encoded() {
        assert_eq!(meta_value("plain value"), "plain value");
        assert_eq!(meta_value("Zürich"), "=?UTF-8?B?WsO8cmljaA==?=");
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-amz-meta-city",
            HeaderValue::from_bytes("Zürich".as_bytes()).unwrap(),
        );
        let attrs = attrs_from(&headers).unwrap();
        assert_eq!(
            attrs.user_meta,
            [("city".to_string(), "Zürich".to_string())]
        );
        headers.insert(
            "x-amz-meta-bad",
            HeaderValue::from_bytes(b"\xff\xfe").unwrap(),
        );
        assert_eq!(
            attrs_from(&headers).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
    }

    #[test]
    fn range_headers_parse_like_s3() {
        assert_eq!(
            parse_range("bytes=0-9"),
            Some(RangeSpec::From {
                first: 0,
                last: Some(9)
            })
        );
        assert_eq!(
            parse_range("bytes=5-"),
            Some(RangeSpec::From {
                first: 5,
                last: None
            })
        );
        assert_eq!(parse_range("bytes=-7"), Some(RangeSpec::Suffix(7)));
        assert_eq!(parse_range("bytes=0-1,4-5"), None);
        assert_eq!(parse_range("items=0-1"), None);
        assert_eq!(parse_range("bytes=9-3"), None);
        assert_eq!(parse_range("bytes=x-3"), None);
    }

    #[test]
    fn etags_compare_with_or_without_quotes() {
        assert!(etag_matches("\"abc\"", "\"abc\""));
        assert!(etag_matches("abc", "\"abc\""));
        assert!(etag_matches("\"x\", \"abc\"", "\"abc\""));
        assert!(etag_matches("*", "\"abc\""));
        assert!(!etag_matches("\"abd\"", "\"abc\""));
    }

    #[test]
    fn parts_map_to_byte_ranges() {
        let mut r = ObjectRecord::new(
            placement::Sha1([0; 20]),
            placement::Magic::random(),
            12,
            0,
            [0; 16],
        );
        r.part_sizes = vec![5, 5, 2];
        assert_eq!(
            part_range(&r, 1).unwrap(),
            RangeSpec::From {
                first: 0,
                last: Some(4)
            }
        );
        assert_eq!(
            part_range(&r, 3).unwrap(),
            RangeSpec::From {
                first: 10,
                last: Some(11)
            }
        );
        assert!(part_range(&r, 4).is_err());
        assert!(part_range(&r, 0).is_err());
    }
}
