//! Bucket versioning (see `docs/versions.md`): Get/PutBucketVersioning and
//! ListObjectVersions.

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};
use meta::list_versions::VersionsQuery;
use meta::versions::{VersionId, Versioning};
use serde::Deserialize;

use super::bucket::{encode_name, url_encoding};
use super::dates::iso8601;
use super::error::{ErrorCode, S3Error};
use super::owner::Owner;
use super::request::Query;
use super::xml::XmlWriter;
use crate::state::AppState;

/// A VersioningConfiguration document is a few dozen bytes.
const VERSIONING_BODY_BYTES_MAX: usize = 4 * 1024;

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ConfigurationXml {
    status: Option<String>,
    mfa_delete: Option<String>,
}

fn malformed() -> S3Error {
    S3Error::new(
        ErrorCode::MalformedXML,
        "The XML you provided was not well-formed or did not validate against our published schema",
    )
}

/// The state a VersioningConfiguration asks for; None leaves it as it is (no Status).
pub fn parse_configuration(text: &str) -> Result<Option<Versioning>, S3Error> {
    let parsed: ConfigurationXml = quick_xml::de::from_str(text).map_err(|_| malformed())?;
    match parsed.mfa_delete.as_deref() {
        None | Some("Disabled") => {}
        Some("Enabled") => return Err(S3Error::not_implemented("MFA delete")),
        Some(_) => return Err(malformed()),
    }
    match parsed.status.as_deref() {
        None => Ok(None),
        Some("Enabled") => Ok(Some(Versioning::Enabled)),
        Some("Suspended") => Ok(Some(Versioning::Suspended)),
        Some(_) => Err(malformed()),
    }
}

pub async fn put(app: &AppState, bucket: &str, req: Request) -> Result<Response, S3Error> {
    let text = super::auth::read_xml_body(req.into_body(), VERSIONING_BODY_BYTES_MAX).await?;
    let state = parse_configuration(&text)?;
    let current = app.store.versioning(bucket).await?;
    match state {
        None => {}
        Some(s) if s == current => {}
        Some(state) => app.store.set_versioning(bucket, state).await?,
    }
    Ok(StatusCode::OK.into_response())
}

pub async fn get(app: &AppState, bucket: &str) -> Result<Response, S3Error> {
    let state = app.store.versioning(bucket).await?;
    let mut w = XmlWriter::new();
    w.open_root("VersioningConfiguration");
    match state {
        // Never versioned: an empty configuration, no Status element.
        Versioning::Unversioned => {}
        Versioning::Enabled => w.leaf("Status", "Enabled"),
        Versioning::Suspended => w.leaf("Status", "Suspended"),
    }
    w.close("VersioningConfiguration");
    Ok(([(header::CONTENT_TYPE, "application/xml")], w.finish()).into_response())
}

/// ListObjectVersions: every version and delete marker, key by key, newest first.
pub async fn list(app: &AppState, bucket: &str, q: &Query) -> Result<Response, S3Error> {
    let url_encode = url_encoding(q)?;
    let enc = |s: &str| encode_name(url_encode, s);
    let max_keys = q.number("max-keys")?.map_or(1000, |n| n.min(1000) as usize);
    let prefix = q.get("prefix").unwrap_or("").to_string();
    let delimiter = q
        .get("delimiter")
        .filter(|d| !d.is_empty())
        .map(str::to_string);
    let key_marker = q.get("key-marker").filter(|k| !k.is_empty());
    let version_marker = q.get("version-id-marker").filter(|v| !v.is_empty());
    let invalid = |message: &'static str| S3Error::new(ErrorCode::InvalidArgument, message);
    let parsed_marker = match (key_marker, version_marker) {
        (None, Some(_)) => {
            return Err(invalid(
                "A version-id marker cannot be specified without a key marker.",
            ));
        }
        (_, Some(v)) => {
            Some(VersionId::parse(v).map_err(|_| invalid("Invalid version id specified"))?)
        }
        (_, None) => None,
    };
    let query = VersionsQuery {
        prefix: prefix.clone(),
        delimiter: delimiter.clone(),
        key_marker: key_marker.map(str::to_string),
        version_marker: parsed_marker,
        max_keys,
    };
    let page = app.store.list_versions(bucket, query).await?;
    let owner = Owner::of_bucket(app, &app.store.bucket(bucket).await?);

    let mut w = XmlWriter::new();
    w.open_root("ListVersionsResult");
    w.leaf("Name", bucket);
    w.leaf("Prefix", &enc(&prefix));
    w.leaf("KeyMarker", &enc(key_marker.unwrap_or("")));
    w.leaf("VersionIdMarker", version_marker.unwrap_or(""));
    if let Some(k) = &page.next_key_marker {
        w.leaf("NextKeyMarker", &enc(k));
    }
    if let Some(v) = &page.next_version_marker {
        w.leaf("NextVersionIdMarker", v);
    }
    w.leaf("MaxKeys", &max_keys.to_string());
    if let Some(d) = &delimiter {
        w.leaf("Delimiter", &enc(d));
    }
    if url_encode {
        w.leaf("EncodingType", "url");
    }
    w.leaf("IsTruncated", if page.truncated { "true" } else { "false" });
    for (key, version) in &page.versions {
        let latest = if version.latest { "true" } else { "false" };
        match &version.record {
            Some(record) => {
                w.open("Version");
                w.leaf("Key", &enc(key));
                w.leaf("VersionId", &version.id());
                w.leaf("IsLatest", latest);
                w.leaf("LastModified", &iso8601(record.created_ms));
                w.leaf("ETag", &record.etag());
                w.leaf("Size", &record.size_bytes.to_string());
                owner.write(&mut w, "Owner");
                w.leaf("StorageClass", "STANDARD");
                w.close("Version");
            }
            None => {
                w.open("DeleteMarker");
                w.leaf("Key", &enc(key));
                w.leaf("VersionId", &version.id());
                w.leaf("IsLatest", latest);
                w.leaf("LastModified", &iso8601(version.created_ms));
                owner.write(&mut w, "Owner");
                w.close("DeleteMarker");
            }
        }
    }
    for cp in &page.common_prefixes {
        w.open("CommonPrefixes");
        w.leaf("Prefix", &enc(cp));
        w.close("CommonPrefixes");
    }
    w.close("ListVersionsResult");
    Ok(([(header::CONTENT_TYPE, "application/xml")], w.finish()).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_parse_as_s3_reads_them() {
        let doc = |inner: &str| {
            format!(
                r#"<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">{inner}</VersioningConfiguration>"#
            )
        };
        assert_eq!(
            parse_configuration(&doc("<Status>Enabled</Status>")).unwrap(),
            Some(Versioning::Enabled)
        );
        assert_eq!(
            parse_configuration(&doc("<Status>Suspended</Status>")).unwrap(),
            Some(Versioning::Suspended)
        );
        assert_eq!(parse_configuration(&doc("")).unwrap(), None);
        assert_eq!(
            parse_configuration(&doc(
                "<Status>Enabled</Status><MfaDelete>Disabled</MfaDelete>"
            ))
            .unwrap(),
            Some(Versioning::Enabled)
        );
        for bad in [
            doc("<Status>enabled</Status>"),
            doc("<Status>Unversioned</Status>"),
            "<VersioningConfiguration>".to_string(),
            "not xml".to_string(),
        ] {
            assert_eq!(
                parse_configuration(&bad).unwrap_err().code,
                ErrorCode::MalformedXML,
                "{bad}"
            );
        }
        assert_eq!(
            parse_configuration(&doc("<MfaDelete>Enabled</MfaDelete>"))
                .unwrap_err()
                .code,
            ErrorCode::NotImplemented
        );
    }
}
