//! Bucket versioning (see `docs/versions.md`): Get/PutBucketVersioning.

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};
use meta::versions::Versioning;
use serde::Deserialize;

use super::error::{ErrorCode, S3Error};
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
        Some(Versioning::Suspended) => {
            return Err(S3Error::not_implemented("suspending versioning"));
        }
        Some(state) => {
            // Expiry on a versioned bucket means delete markers and noncurrent versions,
            // which the lifecycle worker does not handle yet: refused rather than a worker
            // that cannot do its job.
            if app.store.lifecycle_local(bucket).await?.is_some() {
                return Err(S3Error::not_implemented(
                    "versioning on a bucket with lifecycle rules",
                ));
            }
            app.store.set_versioning(bucket, state).await?;
        }
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
