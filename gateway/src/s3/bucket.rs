//! Bucket operations: list, create, head, delete, location, object listings.

use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use super::access::Caller;
use super::dates::iso8601;
use super::error::{ErrorCode, S3Error};
use super::owner::Owner;
use super::request::{Query, check_bucket_name};
use super::xml::XmlWriter;
use crate::state::AppState;
use meta::acl::CannedAcl;
use meta::{DeleteOutcome, ListQuery};

fn xml_response(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/xml")], body).into_response()
}

/// The caller's buckets: its own and those it was granted rights on (every bucket for the
/// bootstrap key).
pub async fn list_buckets(app: &AppState, caller: &Caller) -> Result<Response, S3Error> {
    let mut buckets = app.store.buckets().await?;
    buckets.retain(|(name, record)| caller.sees(app, name, record));
    let mut w = XmlWriter::new();
    w.open_root("ListAllMyBucketsResult");
    Owner::of_caller(app, caller).write(&mut w, "Owner");
    w.open("Buckets");
    for (name, record) in buckets {
        w.open("Bucket");
        w.leaf("Name", &name);
        w.leaf("CreationDate", &iso8601(record.created_ms));
        w.close("Bucket");
    }
    w.close("Buckets");
    w.close("ListAllMyBucketsResult");
    Ok(xml_response(w.finish()))
}

/// CreateBucket: the bucket belongs to `owner`, the access key that signed the request.
pub async fn create(
    app: &AppState,
    bucket: &str,
    owner: Option<String>,
    (object_lock, acl): (bool, CannedAcl),
) -> Result<Response, S3Error> {
    check_bucket_name(bucket)?;
    if object_lock {
        app.store.create_locked_bucket(bucket, owner, acl).await?;
    } else {
        app.store.create_bucket(bucket, owner, acl).await?;
    }
    Ok((StatusCode::OK, [(header::LOCATION, format!("/{bucket}"))]).into_response())
}

pub async fn head(app: &AppState, bucket: &str) -> Result<Response, S3Error> {
    app.store.bucket(bucket).await?;
    Ok((
        StatusCode::OK,
        [("x-amz-bucket-region", app.region.as_str())],
    )
        .into_response())
}

pub async fn delete(app: &AppState, bucket: &str) -> Result<Response, S3Error> {
    app.store.delete_bucket(bucket).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn location(app: &AppState, bucket: &str) -> Result<Response, S3Error> {
    app.store.bucket(bucket).await?;
    let mut w = XmlWriter::new();
    w.open_root("LocationConstraint");
    // us-east-1 is reported as an empty constraint, as S3 does.
    if app.region != "us-east-1" {
        w.leaf_text(&app.region);
    }
    w.close("LocationConstraint");
    Ok(xml_response(w.finish()))
}

/// What `encoding-type=url` leaves unescaped (RFC 3986 unreserved, plus '/').
const URL_ENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

/// Whether a listing asks for `encoding-type=url` (the only encoding S3 has).
pub(crate) fn url_encoding(q: &Query) -> Result<bool, S3Error> {
    match q.get("encoding-type") {
        None => Ok(false),
        Some("url") => Ok(true),
        Some(_) => Err(S3Error::new(
            ErrorCode::InvalidArgument,
            "Invalid Encoding Method specified in Request",
        )),
    }
}

/// A key or prefix as a listing shows it: URL-encoded when asked.
pub(crate) fn encode_name(url_encode: bool, name: &str) -> String {
    if url_encode {
        utf8_percent_encode(name, URL_ENCODE).to_string()
    } else {
        name.to_string()
    }
}

/// ListObjects (V1, `marker`) and ListObjectsV2 (`list-type=2`, continuation tokens).
pub async fn list_objects(app: &AppState, bucket: &str, q: &Query) -> Result<Response, S3Error> {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let v2 = match q.get("list-type") {
        None => false,
        Some("2") => true,
        Some(_) => {
            return Err(S3Error::new(
                ErrorCode::InvalidArgument,
                "Invalid list-type",
            ));
        }
    };
    let url_encode = url_encoding(q)?;
    let enc = |s: &str| encode_name(url_encode, s);
    let max_keys = q.number("max-keys")?.map_or(1000, |n| n.min(1000) as usize);
    let prefix = q.get("prefix").unwrap_or("").to_string();
    let delimiter = q
        .get("delimiter")
        .filter(|d| !d.is_empty())
        .map(str::to_string);
    let token = q.get("continuation-token");
    let after: Option<Vec<u8>> = if v2 {
        match token {
            Some(t) => Some(b64.decode(t).map_err(|_| {
                S3Error::new(
                    ErrorCode::InvalidArgument,
                    "The continuation token provided is incorrect",
                )
            })?),
            None => q.get("start-after").map(|s| s.as_bytes().to_vec()),
        }
    } else {
        q.get("marker")
            .filter(|m| !m.is_empty())
            .map(|s| s.as_bytes().to_vec())
    };
    let query = ListQuery {
        prefix: prefix.clone(),
        delimiter: delimiter.clone(),
        after,
        max_keys,
    };
    let page = app.store.list(bucket, query).await?;

    let mut w = XmlWriter::new();
    w.open_root("ListBucketResult");
    w.leaf("Name", bucket);
    w.leaf("Prefix", &enc(&prefix));
    if let Some(d) = &delimiter {
        w.leaf("Delimiter", &enc(d));
    }
    w.leaf("MaxKeys", &max_keys.to_string());
    if url_encode {
        w.leaf("EncodingType", "url");
    }
    w.leaf("IsTruncated", if page.truncated { "true" } else { "false" });
    let last = page
        .last
        .as_deref()
        .map(|l| String::from_utf8_lossy(l).into_owned());
    if v2 {
        w.leaf(
            "KeyCount",
            &(page.objects.len() + page.common_prefixes.len()).to_string(),
        );
        if let Some(t) = token {
            w.leaf("ContinuationToken", t);
        }
        if let Some(sa) = q.get("start-after") {
            w.leaf("StartAfter", &enc(sa));
        }
        if page.truncated
            && let Some(l) = &page.last
        {
            w.leaf("NextContinuationToken", &b64.encode(l));
        }
    } else {
        w.leaf("Marker", &enc(q.get("marker").unwrap_or("")));
        // S3 sends NextMarker only with a delimiter; without one, clients continue from
        // the last key listed.
        if page.truncated
            && delimiter.is_some()
            && let Some(l) = &last
        {
            w.leaf("NextMarker", &enc(l));
        }
    }
    let fetch_owner = !v2 || q.get("fetch-owner") == Some("true");
    let owner = if fetch_owner {
        Some(Owner::of_bucket(app, &app.store.bucket(bucket).await?))
    } else {
        None
    };
    for (key, record) in &page.objects {
        w.open("Contents");
        w.leaf("Key", &enc(key));
        w.leaf("LastModified", &iso8601(record.created_ms));
        w.leaf("ETag", &record.etag());
        w.leaf("Size", &record.size_bytes.to_string());
        if let Some(o) = &owner {
            o.write(&mut w, "Owner");
        }
        w.leaf("StorageClass", "STANDARD");
        w.close("Contents");
    }
    for cp in &page.common_prefixes {
        w.open("CommonPrefixes");
        w.leaf("Prefix", &enc(cp));
        w.close("CommonPrefixes");
    }
    w.close("ListBucketResult");
    Ok(xml_response(w.finish()))
}

/// Bound on a DeleteObjects body: 1000 keys of up to 1024 bytes, escaped.
const DELETE_BODY_BYTES_MAX: usize = 4 * 1024 * 1024;
const DELETE_KEYS_MAX: usize = 1000;

#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct DeleteBody {
    #[serde(default)]
    pub(crate) quiet: bool,
    #[serde(default, rename = "Object")]
    pub(crate) objects: Vec<DeleteKey>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct DeleteKey {
    pub(crate) key: String,
    /// The ETag the object must have (`*`: it must exist) to be deleted.
    #[serde(default, rename = "ETag")]
    pub(crate) etag: Option<String>,
    /// The version to remove (in an unversioned bucket only `null` names anything).
    #[serde(default)]
    pub(crate) version_id: Option<String>,
    /// Conditions S3 keeps for directory buckets: refused, never ignored.
    #[serde(default)]
    pub(crate) last_modified_time: Option<String>,
    #[serde(default)]
    pub(crate) size: Option<String>,
}

/// A DeleteObjects body: 1 to [`DELETE_KEYS_MAX`] keys.
pub(crate) fn parse_delete(text: &str) -> Result<DeleteBody, S3Error> {
    let malformed = || {
        S3Error::new(
            ErrorCode::MalformedXML,
            "The XML you provided was not well-formed or did not validate against our published schema",
        )
    };
    let parsed: DeleteBody = quick_xml::de::from_str(text).map_err(|_| malformed())?;
    if parsed.objects.is_empty() || parsed.objects.len() > DELETE_KEYS_MAX {
        return Err(malformed());
    }
    for o in &parsed.objects {
        if o.last_modified_time.is_some() || o.size.is_some() {
            return Err(S3Error::not_implemented(
                "LastModifiedTime or Size conditions in DeleteObjects",
            ));
        }
    }
    Ok(parsed)
}

/// DeleteObjects: up to 1000 keys in one request and one metadata transaction.
pub async fn delete_objects(
    app: &AppState,
    bucket: &str,
    req: axum::extract::Request,
) -> Result<Response, S3Error> {
    let md5 = super::object::content_md5_of(req.headers())?;
    // Authorized by `access::needs`: the bypass header asks for the owner right.
    let bypass = super::object_lock::bypass_governance(req.headers());
    let text = super::auth::read_xml_body(req.into_body(), DELETE_BODY_BYTES_MAX).await?;
    if let Some(m) = md5
        && m != <[u8; 16]>::from(<md5::Md5 as md5::Digest>::digest(text.as_bytes()))
    {
        return Err(S3Error::new(
            ErrorCode::BadDigest,
            "The Content-MD5 you specified did not match what we received.",
        ));
    }
    let parsed = parse_delete(&text)?;
    let record = app.store.bucket(bucket).await?;
    let by_version = parsed
        .objects
        .iter()
        .any(|o| o.version_id.as_deref().is_some_and(|v| v != "null"));
    if by_version || record.versioning != meta::versions::Versioning::Unversioned {
        return delete_versions(app, bucket, parsed, bypass).await;
    }
    let mut w = XmlWriter::new();
    w.open_root("DeleteResult");
    let (valid, invalid): (Vec<_>, Vec<_>) = parsed
        .objects
        .into_iter()
        .map(|o| {
            let condition = o.etag.as_deref().map(super::object::match_condition);
            (o.key, condition)
        })
        .partition(|(k, _)| app.store.check_key(k).is_ok());
    let keys: Vec<String> = valid.iter().map(|(k, _)| k.clone()).collect();
    let outcomes = if valid.is_empty() {
        Vec::new()
    } else {
        app.store.delete_many(bucket, valid).await?
    };
    let error = |w: &mut XmlWriter, key: &str, e: S3Error| {
        w.open("Error");
        w.leaf("Key", key);
        w.leaf("Code", e.code.as_str());
        w.leaf("Message", &e.message);
        w.close("Error");
    };
    for (key, outcome) in keys.iter().zip(outcomes) {
        match outcome {
            DeleteOutcome::Deleted | DeleteOutcome::Absent => {
                if !parsed.quiet {
                    w.open("Deleted");
                    w.leaf("Key", key);
                    w.close("Deleted");
                }
            }
            DeleteOutcome::PreconditionFailed => error(&mut w, key, S3Error::precondition_failed()),
            DeleteOutcome::NoSuchKey => error(&mut w, key, S3Error::no_such_key(key)),
        }
    }
    for (key, _) in &invalid {
        let e = match app.store.check_key(key) {
            Err(e) => S3Error::from(e),
            Ok(()) => S3Error::internal("key check"),
        };
        error(&mut w, key, e);
    }
    w.close("DeleteResult");
    Ok(xml_response(w.finish()))
}

/// How many keys of one DeleteObjects request are deleted at once in a versioned bucket.
const DELETE_VERSIONS_IN_FLIGHT: usize = 32;

/// DeleteObjects in a versioned bucket, or naming versions: each key is its own command
/// (a delete marker added, or one version removed), as S3 answers each key on its own.
/// The commands of one request travel to the leader in the same batches.
async fn delete_versions(
    app: &AppState,
    bucket: &str,
    parsed: DeleteBody,
    bypass: bool,
) -> Result<Response, S3Error> {
    use futures_util::StreamExt;
    let quiet = parsed.quiet;
    let results: Vec<_> = futures_util::stream::iter(parsed.objects)
        .map(|o| async move {
            let result = async {
                app.store.check_key(&o.key)?;
                match (&o.version_id, &o.etag) {
                    (Some(_), Some(_)) => Err(S3Error::not_implemented(
                        "an ETag condition on a DeleteObjects entry naming a version",
                    )),
                    (Some(id), None) => {
                        Ok(app.store.delete_version(bucket, &o.key, id, bypass).await?)
                    }
                    (None, etag) => {
                        let condition = etag.as_deref().map(super::object::match_condition);
                        Ok(app.store.delete(bucket, &o.key, condition).await?)
                    }
                }
            }
            .await;
            (o, result)
        })
        .buffered(DELETE_VERSIONS_IN_FLIGHT)
        .collect()
        .await;
    let mut w = XmlWriter::new();
    w.open_root("DeleteResult");
    for (o, result) in results {
        match result {
            Ok(deleted) => {
                if quiet {
                    continue;
                }
                w.open("Deleted");
                w.leaf("Key", &o.key);
                match (&o.version_id, deleted.version_id) {
                    // One version removed, named as asked; a marker says so.
                    (Some(asked), _) => {
                        w.leaf("VersionId", asked);
                        if deleted.marker {
                            w.leaf("DeleteMarker", "true");
                            w.leaf("DeleteMarkerVersionId", asked);
                        }
                    }
                    // A delete marker added.
                    (None, Some(marker)) if deleted.marker => {
                        w.leaf("DeleteMarker", "true");
                        w.leaf("DeleteMarkerVersionId", &marker);
                    }
                    (None, _) => {}
                }
                w.close("Deleted");
            }
            Err(e) => {
                w.open("Error");
                w.leaf("Key", &o.key);
                if let Some(id) = &o.version_id {
                    w.leaf("VersionId", id);
                }
                w.leaf("Code", e.code.as_str());
                w.leaf("Message", &e.message);
                w.close("Error");
            }
        }
    }
    w.close("DeleteResult");
    Ok(xml_response(w.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys are names byte for byte: the spaces around a key in a DeleteObjects body are
    /// part of it (a trimmed " a" would delete "a"), and an escaped character is the
    /// character.
    #[test]
    fn delete_keys_keep_their_spaces() {
        for key in [" a", "a ", "  ", " x y ", "a&amp;b"] {
            let body = format!("<Delete><Object><Key>{key}</Key></Object></Delete>");
            let parsed = parse_delete(&body).unwrap();
            let want = key.replace("&amp;", "&");
            assert_eq!(parsed.objects[0].key, want, "{key:?}");
        }
    }
}
