//! Object lock (WORM retention for mail archives, see `docs/versions.md`): the bucket's
//! ObjectLockConfiguration, a version's retention and legal hold (`?retention`,
//! `?legal-hold`, the `x-amz-object-lock-*` headers of PUT and of GET/HEAD answers), and
//! `x-amz-bypass-governance-retention`.
//!
//! The rules themselves (what a lock keeps, which retention changes are allowed) are the
//! metadata's (`meta::versions::ObjectLock`), checked inside the commands.

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use meta::command::LockChange;
use meta::versions::{
    DefaultRetention, LockConfig, LockMode, ObjectLock, Retention, RetentionPeriod,
};
use serde::Deserialize;

use super::dates::iso8601;
use super::error::{ErrorCode, S3Error};
pub use super::request::bypass_governance;
use super::request::{Query, header_str};
use super::xml::XmlWriter;
use crate::state::AppState;

/// The lock documents are a few hundred bytes.
const LOCK_BODY_BYTES_MAX: usize = 4 * 1024;
/// S3's bound on a default retention: 100 years.
const YEARS_MAX: u32 = 100;
const DAYS_MAX: u32 = 36_500;

fn malformed() -> S3Error {
    S3Error::new(
        ErrorCode::MalformedXML,
        "The XML you provided was not well-formed or did not validate against our published schema",
    )
}

fn invalid(message: &'static str) -> S3Error {
    S3Error::new(ErrorCode::InvalidArgument, message)
}

fn xml(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/xml")], body).into_response()
}

fn mode(text: &str) -> Result<LockMode, S3Error> {
    match text.trim() {
        "GOVERNANCE" => Ok(LockMode::Governance),
        "COMPLIANCE" => Ok(LockMode::Compliance),
        _ => Err(invalid("Unknown wormMode directive.")),
    }
}

fn mode_name(mode: LockMode) -> &'static str {
    match mode {
        LockMode::Governance => "GOVERNANCE",
        LockMode::Compliance => "COMPLIANCE",
    }
}

/// An ISO 8601 instant in the future, as unix milliseconds.
fn until_ms(text: &str) -> Result<u64, S3Error> {
    use time::format_description::well_known::Rfc3339;
    let parsed = time::OffsetDateTime::parse(text.trim(), &Rfc3339)
        .map_err(|_| invalid("The retain until date must be provided in ISO 8601 format"))?;
    let ms = u64::try_from(parsed.unix_timestamp_nanos() / 1_000_000)
        .map_err(|_| invalid("The retain until date must be in the future!"))?;
    if ms <= crate::store::now_ms() {
        return Err(invalid("The retain until date must be in the future!"));
    }
    Ok(ms)
}

/// The `x-amz-object-lock-*` headers of a write: what it asks of its version's lock.
pub fn lock_change(headers: &HeaderMap) -> Result<Option<LockChange>, S3Error> {
    let m = header_str(headers, "x-amz-object-lock-mode")?;
    let d = header_str(headers, "x-amz-object-lock-retain-until-date")?;
    let hold = header_str(headers, "x-amz-object-lock-legal-hold")?;
    let retention = match (m, d) {
        (None, None) => None,
        (Some(m), Some(d)) => Some(Some(Retention {
            mode: mode(m)?,
            until_ms: until_ms(d)?,
        })),
        _ => {
            return Err(invalid(
                "x-amz-object-lock-retain-until-date and x-amz-object-lock-mode must both be supplied",
            ));
        }
    };
    let legal_hold = match hold.map(str::trim) {
        None => None,
        Some("ON") => Some(true),
        Some("OFF") => Some(false),
        Some(_) => return Err(invalid("Legal Hold must be either of 'ON' or 'OFF'")),
    };
    Ok(
        (retention.is_some() || legal_hold.is_some()).then_some(LockChange {
            retention,
            legal_hold,
        }),
    )
}

/// The lock of a version as GET and HEAD show it.
pub fn lock_headers(headers: &mut HeaderMap, lock: &ObjectLock) {
    if let Some(r) = lock.retention {
        headers.insert(
            "x-amz-object-lock-mode",
            HeaderValue::from_static(mode_name(r.mode)),
        );
        if let Ok(v) = HeaderValue::from_str(&iso8601(r.until_ms)) {
            headers.insert("x-amz-object-lock-retain-until-date", v);
        }
    }
    if lock.legal_hold {
        headers.insert(
            "x-amz-object-lock-legal-hold",
            HeaderValue::from_static("ON"),
        );
    }
}

/// A write that asks for a lock needs a bucket with object lock (S3's InvalidRequest).
pub async fn check_lock_allowed(
    app: &AppState,
    bucket: &str,
    change: &Option<LockChange>,
) -> Result<(), S3Error> {
    if change.is_some() && app.store.bucket(bucket).await?.object_lock.is_none() {
        return Err(S3Error::new(
            ErrorCode::InvalidRequest,
            "Bucket is missing Object Lock Configuration",
        ));
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ConfigurationXml {
    object_lock_enabled: Option<String>,
    rule: Option<RuleXml>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RuleXml {
    default_retention: Option<DefaultRetentionXml>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DefaultRetentionXml {
    mode: Option<String>,
    days: Option<String>,
    years: Option<String>,
}

fn positive(text: &str, max: u32) -> Result<u32, S3Error> {
    let n: i64 = text.trim().parse().map_err(|_| malformed())?;
    u32::try_from(n)
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| invalid("Default retention period must be a positive integer value"))
}

/// Parses an ObjectLockConfiguration document.
pub fn parse_configuration(text: &str) -> Result<LockConfig, S3Error> {
    let parsed: ConfigurationXml = quick_xml::de::from_str(text).map_err(|_| malformed())?;
    if parsed.object_lock_enabled.as_deref().map(str::trim) != Some("Enabled") {
        return Err(malformed());
    }
    let default_retention = match parsed.rule.and_then(|r| r.default_retention) {
        None => None,
        Some(d) => {
            let mode = mode(d.mode.as_deref().ok_or_else(malformed)?)?;
            let period = match (d.days, d.years) {
                (Some(days), None) => RetentionPeriod::Days(positive(&days, DAYS_MAX)?),
                (None, Some(years)) => RetentionPeriod::Years(positive(&years, YEARS_MAX)?),
                _ => return Err(malformed()),
            };
            Some(DefaultRetention { mode, period })
        }
    };
    Ok(LockConfig { default_retention })
}

fn render_configuration(config: &LockConfig) -> Vec<u8> {
    let mut w = XmlWriter::new();
    w.open_root("ObjectLockConfiguration");
    w.leaf("ObjectLockEnabled", "Enabled");
    if let Some(d) = config.default_retention {
        w.open("Rule");
        w.open("DefaultRetention");
        w.leaf("Mode", mode_name(d.mode));
        match d.period {
            RetentionPeriod::Days(n) => w.leaf("Days", &n.to_string()),
            RetentionPeriod::Years(n) => w.leaf("Years", &n.to_string()),
        }
        w.close("DefaultRetention");
        w.close("Rule");
    }
    w.close("ObjectLockConfiguration");
    w.finish()
}

/// `PutObjectLockConfiguration`.
pub async fn put_config(app: &AppState, bucket: &str, req: Request) -> Result<Response, S3Error> {
    let text = super::auth::read_xml_body(req.into_body(), LOCK_BODY_BYTES_MAX).await?;
    let config = parse_configuration(&text)?;
    app.store.set_lock_config(bucket, config).await?;
    Ok(StatusCode::OK.into_response())
}

/// `GetObjectLockConfiguration`.
pub async fn get_config(app: &AppState, bucket: &str) -> Result<Response, S3Error> {
    match app.store.bucket(bucket).await?.object_lock {
        Some(config) => Ok(xml(render_configuration(&config))),
        None => Err(S3Error::new(
            ErrorCode::ObjectLockConfigurationNotFoundError,
            "Object Lock configuration does not exist for this bucket",
        )
        .with_resource(bucket)),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RetentionXml {
    mode: Option<String>,
    retain_until_date: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct LegalHoldXml {
    status: Option<String>,
}

/// `PutObjectRetention` (an empty Retention removes it, where the lock allows).
pub async fn put_retention(
    app: &AppState,
    bucket: &str,
    key: &str,
    q: &Query,
    req: Request,
) -> Result<Response, S3Error> {
    let bypass = bypass_governance(req.headers());
    let text = super::auth::read_xml_body(req.into_body(), LOCK_BODY_BYTES_MAX).await?;
    let parsed: RetentionXml = quick_xml::de::from_str(&text).map_err(|_| malformed())?;
    let retention = match (parsed.mode, parsed.retain_until_date) {
        (None, None) => None,
        (Some(m), Some(d)) => Some(Retention {
            mode: mode(&m)?,
            until_ms: until_ms(&d)?,
        }),
        _ => return Err(malformed()),
    };
    let change = LockChange {
        retention: Some(retention),
        legal_hold: None,
    };
    app.store
        .set_object_lock(bucket, key, q.get("versionId"), change, bypass)
        .await?;
    Ok(StatusCode::OK.into_response())
}

/// `PutObjectLegalHold`.
pub async fn put_legal_hold(
    app: &AppState,
    bucket: &str,
    key: &str,
    q: &Query,
    req: Request,
) -> Result<Response, S3Error> {
    let text = super::auth::read_xml_body(req.into_body(), LOCK_BODY_BYTES_MAX).await?;
    let parsed: LegalHoldXml = quick_xml::de::from_str(&text).map_err(|_| malformed())?;
    let hold = match parsed.status.as_deref().map(str::trim) {
        Some("ON") => true,
        Some("OFF") => false,
        _ => return Err(malformed()),
    };
    let change = LockChange {
        retention: None,
        legal_hold: Some(hold),
    };
    app.store
        .set_object_lock(bucket, key, q.get("versionId"), change, false)
        .await?;
    Ok(StatusCode::OK.into_response())
}

/// `GetObjectRetention` and `GetObjectLegalHold`.
pub async fn get_lock(
    app: &AppState,
    bucket: &str,
    key: &str,
    q: &Query,
    legal_hold: bool,
) -> Result<Response, S3Error> {
    if app.store.bucket(bucket).await?.object_lock.is_none() {
        return Err(S3Error::new(
            ErrorCode::InvalidRequest,
            "Bucket is missing Object Lock Configuration",
        ));
    }
    let lock = app
        .store
        .head_at(bucket, key, q.get("versionId"))
        .await?
        .lock;
    let mut w = XmlWriter::new();
    if legal_hold {
        w.open_root("LegalHold");
        w.leaf("Status", if lock.legal_hold { "ON" } else { "OFF" });
        w.close("LegalHold");
        return Ok(xml(w.finish()));
    }
    let Some(r) = lock.retention else {
        return Err(S3Error::new(
            ErrorCode::NoSuchObjectLockConfiguration,
            "The specified object does not have a ObjectLock configuration",
        ));
    };
    w.open_root("Retention");
    w.leaf("Mode", mode_name(r.mode));
    w.leaf("RetainUntilDate", &iso8601(r.until_ms));
    w.close("Retention");
    Ok(xml(w.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_parse_and_render_back() {
        let doc = |rule: &str| {
            format!(
                "<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled>{rule}</ObjectLockConfiguration>"
            )
        };
        let c = parse_configuration(&doc(
            "<Rule><DefaultRetention><Mode>COMPLIANCE</Mode><Years>7</Years></DefaultRetention></Rule>",
        ))
        .unwrap();
        assert_eq!(
            c.default_retention,
            Some(DefaultRetention {
                mode: LockMode::Compliance,
                period: RetentionPeriod::Years(7),
            })
        );
        let again =
            parse_configuration(&String::from_utf8(render_configuration(&c)).unwrap()).unwrap();
        assert_eq!(again, c);
        assert_eq!(
            parse_configuration(&doc("")).unwrap(),
            LockConfig::default()
        );
        for (bad, code) in [
            (
                doc(
                    "<Rule><DefaultRetention><Mode>COMPLIANCE</Mode><Days>1</Days><Years>1</Years></DefaultRetention></Rule>",
                ),
                ErrorCode::MalformedXML,
            ),
            (
                doc(
                    "<Rule><DefaultRetention><Mode>COMPLIANCE</Mode><Days>0</Days></DefaultRetention></Rule>",
                ),
                ErrorCode::InvalidArgument,
            ),
            (
                doc(
                    "<Rule><DefaultRetention><Mode>FOREVER</Mode><Days>1</Days></DefaultRetention></Rule>",
                ),
                ErrorCode::InvalidArgument,
            ),
            (
                "<ObjectLockConfiguration/>".to_string(),
                ErrorCode::MalformedXML,
            ),
            ("nonsense".to_string(), ErrorCode::MalformedXML),
        ] {
            assert_eq!(parse_configuration(&bad).unwrap_err().code, code, "{bad}");
        }
    }

    #[test]
    fn write_headers_ask_for_a_lock_or_are_refused() {
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, v.parse().unwrap());
            }
            h
        };
        assert_eq!(lock_change(&HeaderMap::new()).unwrap(), None);
        let c = lock_change(&headers(&[
            ("x-amz-object-lock-mode", "GOVERNANCE"),
            (
                "x-amz-object-lock-retain-until-date",
                "2099-01-01T00:00:00Z",
            ),
            ("x-amz-object-lock-legal-hold", "ON"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(c.legal_hold, Some(true));
        assert_eq!(
            c.retention.flatten().map(|r| r.mode),
            Some(LockMode::Governance)
        );
        for bad in [
            headers(&[("x-amz-object-lock-mode", "GOVERNANCE")]),
            headers(&[
                ("x-amz-object-lock-mode", "GOVERNANCE"),
                (
                    "x-amz-object-lock-retain-until-date",
                    "2001-01-01T00:00:00Z",
                ),
            ]),
            headers(&[
                ("x-amz-object-lock-mode", "WORM"),
                (
                    "x-amz-object-lock-retain-until-date",
                    "2099-01-01T00:00:00Z",
                ),
            ]),
            headers(&[("x-amz-object-lock-legal-hold", "maybe")]),
        ] {
            assert_eq!(
                lock_change(&bad).unwrap_err().code,
                ErrorCode::InvalidArgument
            );
        }
        assert!(bypass_governance(&headers(&[(
            "x-amz-bypass-governance-retention",
            "true"
        )])));
    }
}
