//! Multipart upload operations: Create, UploadPart(Copy), Complete, Abort, ListParts,
//! ListMultipartUploads.

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode, header};
use serde::Deserialize;

use super::auth::{BodyInfo, body_stream, read_xml_body};
use super::checksum::{self, Algorithm, Expected};
use super::dates::iso8601;
use super::error::{ErrorCode, S3Error};
use super::object::{READ_RACE_ATTEMPTS, attrs_from, check_copy_conditions, copy_source_version};
use super::owner::Owner;
use super::request::{Query, copy_source, header_str};
use super::xml::XmlWriter;
use crate::multipart::{PartRef, PartTarget};
use crate::state::AppState;
use crate::store::{ChecksumSlot, StoreError};
use meta::Checksum;
use meta::checksums::{ChecksumType, UploadChecksum};

/// Bound on a CompleteMultipartUpload body: 10 000 parts of about 100 bytes each.
const COMPLETE_BODY_BYTES_MAX: usize = 2 * 1024 * 1024;

fn xml(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/xml")], body).into_response()
}

fn upload_id(q: &Query) -> Result<&str, S3Error> {
    q.get("uploadId")
        .filter(|u| !u.is_empty())
        .ok_or_else(|| S3Error::new(ErrorCode::InvalidArgument, "uploadId must be given"))
}

fn part_number(q: &Query) -> Result<u32, S3Error> {
    q.number("partNumber")?
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| {
            S3Error::new(
                ErrorCode::InvalidArgument,
                "Part number must be an integer between 1 and 10000, inclusive",
            )
        })
}

fn invalid_request(message: impl Into<std::borrow::Cow<'static, str>>) -> S3Error {
    S3Error::new(ErrorCode::InvalidRequest, message)
}

/// `x-amz-checksum-algorithm` and `x-amz-checksum-type` of a CreateMultipartUpload, with
/// S3's defaults (FULL_OBJECT for CRC64NVME, COMPOSITE for the others) and rules
/// (FULL_OBJECT for CRCs only, CRC64NVME FULL_OBJECT only, no type without an algorithm).
pub(crate) fn upload_checksum(headers: &HeaderMap) -> Result<Option<UploadChecksum>, S3Error> {
    let algorithm = header_str(headers, "x-amz-checksum-algorithm")?;
    let kind = header_str(headers, "x-amz-checksum-type")?;
    let Some(algorithm) = algorithm else {
        return match kind {
            None => Ok(None),
            Some(_) => Err(invalid_request(
                "The x-amz-checksum-type header can only be used with the x-amz-checksum-algorithm header.",
            )),
        };
    };
    let alg = Algorithm::parse(algorithm)
        .filter(|_| !algorithm.trim().is_empty())
        .ok_or_else(|| invalid_request("Value for x-amz-checksum-algorithm header is invalid."))?;
    let kind = match kind.map(|k| k.trim().to_ascii_uppercase()).as_deref() {
        None if alg == Algorithm::Crc64Nvme => ChecksumType::FullObject,
        None | Some("COMPOSITE") => ChecksumType::Composite,
        Some("FULL_OBJECT") => ChecksumType::FullObject,
        Some(_) => {
            return Err(invalid_request(
                "Value for x-amz-checksum-type header is invalid.",
            ));
        }
    };
    if kind == ChecksumType::FullObject && !alg.is_crc() {
        return Err(invalid_request(format!(
            "The FULL_OBJECT checksum type cannot be used with the {} checksum algorithm.",
            alg.name()
        )));
    }
    if kind == ChecksumType::Composite && alg == Algorithm::Crc64Nvme {
        return Err(invalid_request(
            "The COMPOSITE checksum type cannot be used with the crc64nvme checksum algorithm.",
        ));
    }
    Ok(Some(UploadChecksum {
        algorithm: alg.name().to_string(),
        kind,
    }))
}

/// The algorithm an upload declared.
fn algorithm_of(declared: &UploadChecksum) -> Result<Algorithm, S3Error> {
    Algorithm::parse(&declared.algorithm).ok_or_else(|| {
        S3Error::new(
            ErrorCode::InternalError,
            "the upload's checksum algorithm is unknown",
        )
    })
}

fn set_header(headers: &mut HeaderMap, name: &str, value: &str) {
    if let (Ok(n), Ok(v)) = (
        http::HeaderName::from_bytes(name.as_bytes()),
        http::HeaderValue::from_str(value),
    ) {
        headers.insert(n, v);
    }
}

/// A `<ChecksumCRC32>`... element for a stored checksum.
fn checksum_element(w: &mut XmlWriter, c: &Checksum) {
    if let Some(alg) = Algorithm::parse(&c.algorithm) {
        w.leaf(&alg.element(), &c.value);
    }
}

pub async fn create(
    app: &AppState,
    bucket: &str,
    key: &str,
    headers: &HeaderMap,
) -> Result<Response, S3Error> {
    super::object::refuse_lock_headers(headers, "CreateMultipartUpload")?;
    let declared = upload_checksum(headers)?;
    let tags = super::tagging::from_headers(headers)?;
    let acl = super::acl::from_headers(headers)?;
    let id = app
        .store
        .create_upload(
            bucket,
            key,
            attrs_from(headers)?,
            declared.clone(),
            (&tags, acl),
        )
        .await?;
    let mut w = XmlWriter::new();
    w.open_root("InitiateMultipartUploadResult");
    w.leaf("Bucket", bucket);
    w.leaf("Key", key);
    w.leaf("UploadId", &id);
    w.close("InitiateMultipartUploadResult");
    let mut resp = xml(w.finish());
    if let Some(d) = &declared {
        let h = resp.headers_mut();
        set_header(h, "x-amz-checksum-algorithm", algorithm_of(d)?.s3_name());
        set_header(h, "x-amz-checksum-type", d.kind.name());
    }
    Ok(resp)
}

pub async fn upload_part(
    app: &AppState,
    bucket: &str,
    key: &str,
    q: &Query,
    req: Request,
) -> Result<Response, S3Error> {
    let (id, number) = (upload_id(q)?.to_string(), part_number(q)?);
    if req.headers().contains_key("x-amz-copy-source") {
        return upload_part_copy(app, bucket, key, &id, number, req.headers()).await;
    }
    let declared = app.store.upload_checksums(bucket, key, &id).await?.declared;
    let declared = declared.as_ref().map(algorithm_of).transpose()?;
    let (parts, body) = req.into_parts();
    let trailers = parts
        .extensions
        .get::<BodyInfo>()
        .and_then(|i| i.trailers.clone());
    let requested = checksum::requested(&parts.headers, trailers.as_ref())?;
    let stream: super::object::BodyStream = Box::new(body_stream(body));
    // A part of an upload that declared an algorithm carries that algorithm's checksum,
    // verified, or gets it computed here (as S3 does); a part of another one is refused.
    // Parts of an upload that declared none are verified, their checksum not kept.
    let (stream, slot): (super::object::BodyStream, Option<ChecksumSlot>) = match (
        declared, requested,
    ) {
        (Some(want), Some((got, _))) if want != got => {
            return Err(invalid_request(format!(
                "Checksum Type mismatch occurred, expected checksum Type: {}, actual checksum Type: {}",
                want.name(),
                got.name()
            )));
        }
        (Some(want), requested) => {
            let expected = requested.map_or(Expected::Compute, |(_, e)| e);
            let slot = ChecksumSlot::default();
            let stream = checksum::verify(stream, want, expected, slot.clone());
            (Box::new(stream), Some(slot))
        }
        (None, Some((got, expected))) => {
            let stream = checksum::verify(stream, got, expected, ChecksumSlot::default());
            (Box::new(stream), None)
        }
        (None, None) => (stream, None),
    };
    let size = super::object::declared_length_of(&parts)?;
    let md5 = super::object::content_md5_of(&parts.headers)?;
    let (part, checksum) = app
        .store
        .put_part(
            PartTarget {
                bucket,
                key,
                upload_id: &id,
                number,
            },
            size,
            md5,
            stream,
            slot,
        )
        .await?;
    let mut resp = (StatusCode::OK, [(header::ETAG, part.etag())]).into_response();
    if let Some(c) = &checksum {
        set_header(
            resp.headers_mut(),
            &format!("x-amz-checksum-{}", c.algorithm),
            &c.value,
        );
    }
    Ok(resp)
}

/// `x-amz-copy-source-range: bytes=first-last`, both required, inside the source.
fn copy_range(headers: &HeaderMap, size: u64) -> Result<Option<(u64, u64)>, S3Error> {
    let Some(v) = header_str(headers, "x-amz-copy-source-range")? else {
        return Ok(None);
    };
    let invalid = || {
        S3Error::new(
            ErrorCode::InvalidArgument,
            "The x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy",
        )
    };
    let (a, b) = v
        .trim()
        .strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .ok_or_else(invalid)?;
    let (first, last): (u64, u64) = (
        a.trim().parse().map_err(|_| invalid())?,
        b.trim().parse().map_err(|_| invalid())?,
    );
    if first > last || last >= size {
        return Err(S3Error::new(
            ErrorCode::InvalidRange,
            "The requested range is not satisfiable",
        ));
    }
    Ok(Some((first, last)))
}

async fn upload_part_copy(
    app: &AppState,
    bucket: &str,
    key: &str,
    id: &str,
    number: u32,
    headers: &HeaderMap,
) -> Result<Response, S3Error> {
    let (src_bucket, src_key, src_version) = copy_source(headers)?;
    let declared = app.store.upload_checksums(bucket, key, id).await?.declared;
    let algorithm = declared.as_ref().map(algorithm_of).transpose()?;
    let mut attempt = 0;
    let (modified, (part, checksum), source_version) = loop {
        attempt += 1;
        let (source, source_version, _) =
            copy_source_version(app, &src_bucket, &src_key, src_version.as_deref()).await?;
        check_copy_conditions(headers, &source)?;
        let range = copy_range(headers, source.size_bytes)?;
        let modified = source.created_ms;
        match app
            .store
            .put_part_copy(
                PartTarget {
                    bucket,
                    key,
                    upload_id: id,
                    number,
                },
                source,
                (&src_bucket, &src_key),
                range,
                algorithm,
            )
            .await
        {
            // The source was overwritten or deleted while it was read.
            Err(StoreError::Raced(_)) if attempt < READ_RACE_ATTEMPTS => continue,
            part => break (modified, part?, source_version),
        }
    };
    let mut w = XmlWriter::new();
    w.open_root("CopyPartResult");
    w.leaf("LastModified", &iso8601(modified.max(part.created_ms)));
    w.leaf("ETag", &part.etag());
    if let Some(c) = &checksum {
        checksum_element(&mut w, c);
    }
    w.close("CopyPartResult");
    let mut resp = xml(w.finish());
    if let Some(id) = source_version
        && let Ok(v) = http::HeaderValue::from_str(&id)
    {
        resp.headers_mut().insert("x-amz-copy-source-version-id", v);
    }
    Ok(resp)
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CompleteBody {
    #[serde(default, rename = "Part")]
    parts: Vec<CompletePart>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CompletePart {
    part_number: u32,
    #[serde(rename = "ETag")]
    etag: String,
    #[serde(rename = "ChecksumCRC32")]
    crc32: Option<String>,
    #[serde(rename = "ChecksumCRC32C")]
    crc32c: Option<String>,
    #[serde(rename = "ChecksumCRC64NVME")]
    crc64nvme: Option<String>,
    #[serde(rename = "ChecksumSHA1")]
    sha1: Option<String>,
    #[serde(rename = "ChecksumSHA256")]
    sha256: Option<String>,
}

impl CompletePart {
    /// The part's checksum as named; more than one is refused.
    fn checksum(&self) -> Result<Option<Checksum>, S3Error> {
        let named = [
            (Algorithm::Crc32, &self.crc32),
            (Algorithm::Crc32c, &self.crc32c),
            (Algorithm::Crc64Nvme, &self.crc64nvme),
            (Algorithm::Sha1, &self.sha1),
            (Algorithm::Sha256, &self.sha256),
        ];
        let mut found = named.into_iter().filter_map(|(alg, v)| {
            v.as_ref().map(|v| Checksum {
                algorithm: alg.name().to_string(),
                value: v.trim().to_string(),
            })
        });
        let first = found.next();
        if found.next().is_some() {
            return Err(invalid_request(format!(
                "Part {} names more than one checksum",
                self.part_number
            )));
        }
        Ok(first)
    }
}

/// The parts a CompleteMultipartUpload body lists, in its order.
pub(crate) fn parse_complete(text: &str) -> Result<Vec<PartRef>, S3Error> {
    let parsed: CompleteBody = quick_xml::de::from_str(text).map_err(|_| {
        S3Error::new(ErrorCode::MalformedXML, "The XML you provided was not well-formed or did not validate against our published schema")
    })?;
    parsed
        .parts
        .into_iter()
        .map(|p| {
            Ok(PartRef {
                number: p.part_number,
                checksum: p.checksum()?,
                etag: p.etag,
            })
        })
        .collect()
}

/// The full-object checksum a CompleteMultipartUpload carries in a header, if any.
fn whole_checksum(headers: &HeaderMap) -> Result<Option<Checksum>, S3Error> {
    let mut found = None;
    for alg in Algorithm::ALL {
        if let Some(v) = header_str(headers, &alg.header())? {
            if found.is_some() {
                return Err(invalid_request("Expecting a single x-amz-checksum- header"));
            }
            found = Some(Checksum {
                algorithm: alg.name().to_string(),
                value: v.trim().to_string(),
            });
        }
    }
    Ok(found)
}

pub async fn complete(
    app: &AppState,
    bucket: &str,
    key: &str,
    q: &Query,
    req: Request,
) -> Result<Response, S3Error> {
    let id = upload_id(q)?.to_string();
    let precondition = super::object::write_precondition(req.headers())?;
    let whole = whole_checksum(req.headers())?;
    if let Some(kind) = header_str(req.headers(), "x-amz-checksum-type")? {
        let declared = app.store.upload_checksums(bucket, key, &id).await?.declared;
        if declared.is_some_and(|d| !d.kind.name().eq_ignore_ascii_case(kind.trim())) {
            return Err(invalid_request(format!(
                "The upload was created with another checksum type than {}",
                kind.trim()
            )));
        }
    }
    let text = read_xml_body(req.into_body(), COMPLETE_BODY_BYTES_MAX).await?;
    let parts = parse_complete(&text)?;
    let stored = app
        .store
        .complete_upload(bucket, key, &id, parts, precondition, whole)
        .await?;
    let mut w = XmlWriter::new();
    w.open_root("CompleteMultipartUploadResult");
    w.leaf("Location", &format!("/{bucket}/{key}"));
    w.leaf("Bucket", bucket);
    w.leaf("Key", key);
    w.leaf("ETag", &stored.record.etag());
    if let Some(c) = &stored.record.checksum {
        checksum_element(&mut w, c);
        w.leaf("ChecksumType", checksum::checksum_type(c));
    }
    w.close("CompleteMultipartUploadResult");
    let mut resp = xml(w.finish());
    if let Some(id) = stored.version_id
        && let Ok(v) = http::HeaderValue::from_str(&id)
    {
        resp.headers_mut().insert("x-amz-version-id", v);
    }
    Ok(resp)
}

pub async fn abort(
    app: &AppState,
    bucket: &str,
    key: &str,
    q: &Query,
) -> Result<Response, S3Error> {
    app.store.abort_upload(bucket, key, upload_id(q)?).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Uploads report their bucket's owner as owner and initiator: the key that started an
/// upload is not recorded.
fn owner_and_initiator(w: &mut XmlWriter, owner: &Owner) {
    owner.write(w, "Initiator");
    owner.write(w, "Owner");
}

pub async fn list_parts(
    app: &AppState,
    bucket: &str,
    key: &str,
    q: &Query,
) -> Result<Response, S3Error> {
    let id = upload_id(q)?;
    app.store.check_upload(bucket, key, id).await?;
    let max = q.number("max-parts")?.map_or(1000, |n| n.min(1000)) as usize;
    let marker = q.number("part-number-marker")?.unwrap_or(0);
    let parts = app.store.parts(bucket, key, id).await?;
    let sums = app.store.upload_checksums(bucket, key, id).await?;
    let page: Vec<_> = parts
        .iter()
        .filter(|(n, _)| u64::from(**n) > marker)
        .take(max + 1)
        .collect();
    let truncated = page.len() > max;
    let page = &page[..page.len().min(max)];
    let owner = Owner::of_bucket(app, &app.store.bucket(bucket).await?);
    let mut w = XmlWriter::new();
    w.open_root("ListPartsResult");
    w.leaf("Bucket", bucket);
    w.leaf("Key", key);
    w.leaf("UploadId", id);
    owner_and_initiator(&mut w, &owner);
    w.leaf("StorageClass", "STANDARD");
    w.leaf("PartNumberMarker", &marker.to_string());
    if let Some((n, _)) = page.last() {
        w.leaf("NextPartNumberMarker", &n.to_string());
    }
    w.leaf("MaxParts", &max.to_string());
    w.leaf("IsTruncated", if truncated { "true" } else { "false" });
    if let Some(d) = &sums.declared {
        w.leaf("ChecksumAlgorithm", algorithm_of(d)?.s3_name());
        w.leaf("ChecksumType", d.kind.name());
    }
    for (n, p) in page {
        w.open("Part");
        w.leaf("PartNumber", &n.to_string());
        w.leaf("LastModified", &iso8601(p.created_ms));
        w.leaf("ETag", &p.etag());
        w.leaf("Size", &p.size_bytes.to_string());
        if let Some(c) = sums.parts.get(n) {
            checksum_element(&mut w, c);
        }
        w.close("Part");
    }
    w.close("ListPartsResult");
    Ok(xml(w.finish()))
}

pub async fn list_uploads(app: &AppState, bucket: &str, q: &Query) -> Result<Response, S3Error> {
    let max = q.number("max-uploads")?.map_or(1000, |n| n.min(1000)) as usize;
    let prefix = q.get("prefix").unwrap_or("");
    let key_marker = q.get("key-marker").filter(|k| !k.is_empty());
    let id_marker = q.get("upload-id-marker").unwrap_or("");
    // Without an upload-id-marker, S3 lists uploads of keys strictly after key-marker.
    let after = key_marker.map(|k| {
        if id_marker.is_empty() {
            (k.to_string(), "\u{10FFFF}".to_string())
        } else {
            (k.to_string(), id_marker.to_string())
        }
    });
    let page = app.store.uploads(bucket, prefix, after, max).await?;
    let (uploads, truncated) = (page.uploads, page.truncated);
    let owner = Owner::of_bucket(app, &app.store.bucket(bucket).await?);
    let mut w = XmlWriter::new();
    w.open_root("ListMultipartUploadsResult");
    w.leaf("Bucket", bucket);
    w.leaf("KeyMarker", key_marker.unwrap_or(""));
    w.leaf("UploadIdMarker", id_marker);
    if truncated && let Some((id, u, _)) = uploads.last() {
        w.leaf("NextKeyMarker", &u.key);
        w.leaf("NextUploadIdMarker", id);
    }
    w.leaf("Prefix", prefix);
    w.leaf("MaxUploads", &max.to_string());
    w.leaf("IsTruncated", if truncated { "true" } else { "false" });
    for (id, u, declared) in &uploads {
        w.open("Upload");
        w.leaf("Key", &u.key);
        w.leaf("UploadId", id);
        owner_and_initiator(&mut w, &owner);
        w.leaf("StorageClass", "STANDARD");
        w.leaf("Initiated", &iso8601(u.created_ms));
        if let Some(d) = declared {
            w.leaf("ChecksumAlgorithm", algorithm_of(d)?.s3_name());
            w.leaf("ChecksumType", d.kind.name());
        }
        w.close("Upload");
    }
    w.close("ListMultipartUploadsResult");
    Ok(xml(w.finish()))
}
