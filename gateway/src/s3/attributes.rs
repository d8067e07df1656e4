//! GetObjectAttributes (`GET /bucket/key?attributes`): what `x-amz-object-attributes`
//! names of ETag, Checksum, ObjectParts, StorageClass and ObjectSize, without the body.

use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, header};

use super::checksum::{Algorithm, crc32_base64};
use super::dates::http_date;
use super::error::{ErrorCode, S3Error};
use super::request::{Query, header_str};
use super::xml::XmlWriter;
use crate::state::AppState;
use meta::ObjectRecord;

/// S3's bound on `x-amz-max-parts` (and its default).
const MAX_PARTS: u64 = 1000;

/// The attributes a request names.
#[derive(Default, Debug, PartialEq, Eq)]
struct Wanted {
    etag: bool,
    checksum: bool,
    parts: bool,
    storage_class: bool,
    size: bool,
}

fn wanted(headers: &HeaderMap) -> Result<Wanted, S3Error> {
    let invalid = || {
        S3Error::new(
            ErrorCode::InvalidArgument,
            "Invalid attribute name specified.",
        )
    };
    let mut w = Wanted::default();
    // The header may repeat, each a comma-separated list.
    for v in headers.get_all("x-amz-object-attributes") {
        let v = v.to_str().map_err(|_| invalid())?;
        for name in v.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "ETag" => w.etag = true,
                "Checksum" => w.checksum = true,
                "ObjectParts" => w.parts = true,
                "StorageClass" => w.storage_class = true,
                "ObjectSize" => w.size = true,
                _ => return Err(invalid()),
            }
        }
    }
    if w == Wanted::default() {
        return Err(S3Error::new(
            ErrorCode::InvalidRequest,
            "The x-amz-object-attributes header specifying the attributes to be retrieved is either missing or empty",
        ));
    }
    Ok(w)
}

fn number(headers: &HeaderMap, name: &str) -> Result<Option<u64>, S3Error> {
    header_str(headers, name)?
        .map(|v| {
            v.trim().parse::<u64>().map_err(|_| {
                S3Error::new(
                    ErrorCode::InvalidArgument,
                    format!("{name} is not a number"),
                )
            })
        })
        .transpose()
}

pub async fn get(
    app: &AppState,
    bucket: &str,
    key: &str,
    headers: &HeaderMap,
    q: &Query,
) -> Result<Response, S3Error> {
    let want = wanted(headers)?;
    let max = number(headers, "x-amz-max-parts")?.map_or(MAX_PARTS, |n| n.min(MAX_PARTS));
    let marker = number(headers, "x-amz-part-number-marker")?.unwrap_or(0);
    let head = app.store.head_at(bucket, key, q.get("versionId")).await?;
    let (record, version_id) = (head.record, head.version_id);
    let part_checksums = if want.parts && !record.part_sizes.is_empty() {
        app.store.object_part_checksums(&record).await?
    } else {
        None
    };
    let mut w = XmlWriter::new();
    w.open_root("GetObjectAttributesResponse");
    if want.etag {
        w.leaf("ETag", record.etag().trim_matches('"'));
    }
    if want.checksum {
        checksum(&mut w, &record);
    }
    if want.parts && !record.part_sizes.is_empty() {
        let total = record.part_sizes.len() as u64;
        let page: Vec<(u64, u64)> = (1..=total)
            .filter(|n| *n > marker)
            .take(usize::try_from(max).unwrap_or(usize::MAX))
            .map(|n| (n, record.part_sizes[(n - 1) as usize]))
            .collect();
        let truncated = page.last().is_some_and(|(n, _)| *n < total);
        w.open("ObjectParts");
        w.leaf("PartsCount", &total.to_string());
        w.leaf("PartNumberMarker", &marker.to_string());
        if let Some((n, _)) = page.last() {
            w.leaf("NextPartNumberMarker", &n.to_string());
        }
        w.leaf("MaxParts", &max.to_string());
        w.leaf("IsTruncated", if truncated { "true" } else { "false" });
        for (n, size) in page {
            w.open("Part");
            w.leaf("PartNumber", &n.to_string());
            w.leaf("Size", &size.to_string());
            if let Some(p) = &part_checksums
                && let Some(alg) = Algorithm::parse(&p.algorithm)
                && let Some(v) = p.parts.get((n - 1) as usize)
            {
                w.leaf(&alg.element(), v);
            }
            w.close("Part");
        }
        w.close("ObjectParts");
    }
    if want.storage_class {
        w.leaf("StorageClass", "STANDARD");
    }
    if want.size {
        w.leaf("ObjectSize", &record.size_bytes.to_string());
    }
    w.close("GetObjectAttributesResponse");
    let mut resp = ([(header::CONTENT_TYPE, "application/xml")], w.finish()).into_response();
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&http_date(record.created_ms)) {
        h.insert(header::LAST_MODIFIED, v);
    }
    if let Some(id) = version_id
        && let Ok(v) = HeaderValue::from_str(&id)
    {
        h.insert("x-amz-version-id", v);
    }
    Ok(resp)
}

/// The object's checksum as GET with `x-amz-checksum-mode: ENABLED` reports it: the one
/// kept with it, else the CRC32 every object has.
fn checksum(w: &mut XmlWriter, record: &ObjectRecord) {
    w.open("Checksum");
    match record
        .checksum
        .as_ref()
        .and_then(|c| Algorithm::parse(&c.algorithm).map(|a| (a, c)))
    {
        Some((alg, c)) => {
            w.leaf(&alg.element(), &c.value);
            w.leaf("ChecksumType", super::checksum::checksum_type(c));
        }
        None => {
            w.leaf("ChecksumCRC32", &crc32_base64(record.crc32));
            w.leaf("ChecksumType", "FULL_OBJECT");
        }
    }
    w.close("Checksum");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_names_are_s3s_and_one_is_needed() {
        let mut h = HeaderMap::new();
        assert!(wanted(&h).is_err());
        h.insert(
            "x-amz-object-attributes",
            HeaderValue::from_static("ETag, ObjectParts"),
        );
        h.append(
            "x-amz-object-attributes",
            HeaderValue::from_static("Checksum"),
        );
        let w = wanted(&h).unwrap();
        assert!(w.etag && w.parts && w.checksum && !w.size && !w.storage_class);
        h.insert("x-amz-object-attributes", HeaderValue::from_static("Body"));
        assert_eq!(wanted(&h).unwrap_err().code, ErrorCode::InvalidArgument);
    }
}
