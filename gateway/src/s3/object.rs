//! Object operations: PutObject, GetObject, HeadObject, DeleteObject.

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use http::{HeaderMap, HeaderValue, StatusCode, header};

use super::auth::{BodyInfo, body_stream};
use super::error::{ErrorCode, S3Error};
use super::http_date;
use crate::meta::ObjectRecord;
use crate::server::AppState;
use crate::store::{PutRequest, RangeSpec, ReadBody};

const META_PREFIX: &str = "x-amz-meta-";

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, S3Error> {
    match headers.get(name) {
        None => Ok(None),
        Some(v) => v.to_str().map(Some).map_err(|_| {
            S3Error::new(
                ErrorCode::InvalidArgument,
                format!("header {name} is not valid text"),
            )
        }),
    }
}

fn user_meta(headers: &HeaderMap) -> Result<Vec<(String, String)>, S3Error> {
    let mut out = Vec::new();
    for (name, value) in headers {
        if let Some(n) = name.as_str().strip_prefix(META_PREFIX) {
            let v = value.to_str().map_err(|_| {
                S3Error::new(
                    ErrorCode::InvalidArgument,
                    "metadata values must be US-ASCII",
                )
            })?;
            out.push((n.to_string(), v.to_string()));
        }
    }
    Ok(out)
}

fn content_md5(headers: &HeaderMap) -> Result<Option<[u8; 16]>, S3Error> {
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

pub async fn put(
    app: &AppState,
    bucket: &str,
    key: &str,
    req: Request,
) -> Result<Response, S3Error> {
    let (parts, body) = req.into_parts();
    let headers = &parts.headers;
    let declared = match parts.extensions.get::<BodyInfo>() {
        Some(info) if info.decoded_length.is_some() => info.decoded_length,
        _ => header_str(headers, "content-length")?
            .map(|v| {
                v.parse::<u64>().map_err(|_| {
                    S3Error::new(ErrorCode::InvalidArgument, "Content-Length is not a number")
                })
            })
            .transpose()?,
    };
    let request = PutRequest {
        bucket: bucket.to_string(),
        key: key.to_string(),
        content_type: header_str(headers, "content-type")?.map(str::to_string),
        user_meta: user_meta(headers)?,
        size_bytes: declared,
        content_md5: content_md5(headers)?,
    };
    let record = app.store.put(request, body_stream(body)).await?;
    let mut resp = StatusCode::OK.into_response();
    set(resp.headers_mut(), header::ETAG, &record.etag());
    Ok(resp)
}

fn set(headers: &mut HeaderMap, name: impl header::IntoHeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        headers.insert(name, v);
    }
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
    for (name, value) in &record.user_meta {
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(format!("{META_PREFIX}{name}").as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.append(n, v);
        }
    }
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

pub async fn get(
    app: &AppState,
    bucket: &str,
    key: &str,
    headers: &HeaderMap,
) -> Result<Response, S3Error> {
    let range = header_str(headers, "range")?.and_then(parse_range);
    let read = app.store.get(bucket, key, range).await?;
    let length = match read.range {
        Some((first, last)) => last - first + 1,
        None => read.record.size_bytes,
    };
    let body = match read.body {
        ReadBody::Buffered(bytes) => Body::from(bytes),
        ReadBody::Stream(stream) => Body::from_stream(stream),
    };
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    object_headers(h, &read.record);
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    if let Some((first, last)) = read.range {
        *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
        let content_range = format!("bytes {first}-{last}/{}", read.record.size_bytes);
        set(resp.headers_mut(), header::CONTENT_RANGE, &content_range);
    }
    Ok(resp)
}

pub async fn head(app: &AppState, bucket: &str, key: &str) -> Result<Response, S3Error> {
    let record = app.store.head(bucket, key).await?;
    let mut resp = StatusCode::OK.into_response();
    let h = resp.headers_mut();
    object_headers(h, &record);
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(record.size_bytes));
    Ok(resp)
}

pub async fn delete(app: &AppState, bucket: &str, key: &str) -> Result<Response, S3Error> {
    app.store.delete(bucket, key).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
