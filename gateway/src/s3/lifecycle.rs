//! Put/Get/DeleteBucketLifecycleConfiguration with S3's XML, and the `x-amz-expiration`
//! header of objects a rule will expire.
//!
//! Validation answers as S3 does: MalformedXML for a document that does not fit the schema
//! (a bad Status, a rule with two filters, an Expiration with both Days and Date),
//! InvalidArgument for values out of range (Days 0, a Date not at midnight UTC, a duplicate
//! or too long ID), InvalidRequest for a rule with no action or an upload abort with a size
//! filter. NoncurrentVersionExpiration (NoncurrentDays, NewerNoncurrentVersions) and
//! Expiration/ExpiredObjectDeleteMarker act on versioned buckets. A `<Tag>` filter (alone
//! or in `<And>`) matches the versions that have every one of its tags. Elements this
//! gateway cannot honour (transitions to storage classes) are refused with
//! NotImplemented, never stored and ignored.

use std::collections::HashSet;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde::Deserialize;

use super::error::{ErrorCode, S3Error};
use super::xml::XmlWriter;
use crate::lifecycle::rules::{self, RULE_ID_CHARS_MAX, RULES_MAX};
use crate::lifecycle::{Expiration, LifecycleRule, RuleFilter, VersionActions};
use crate::state::AppState;
use crate::store::{ObjectStore, StoreError};
use meta::tags::{OBJECT_TAGS_MAX, Tag, TagSet};
use meta::{Command, ObjectRecord};

const LIFECYCLE_BODY_BYTES_MAX: usize = 1024 * 1024;

/// An element whose content is not read: only its presence matters.
#[derive(Deserialize)]
struct Present {}

#[derive(Deserialize)]
struct ConfigurationXml {
    #[serde(default, rename = "Rule")]
    rules: Vec<RuleXml>,
}

#[derive(Deserialize)]
struct RuleXml {
    #[serde(rename = "ID")]
    id: Option<String>,
    #[serde(rename = "Status")]
    status: Option<String>,
    #[serde(rename = "Prefix")]
    prefix: Option<String>,
    #[serde(rename = "Filter")]
    filter: Option<FilterXml>,
    #[serde(rename = "Expiration")]
    expiration: Option<ExpirationXml>,
    #[serde(rename = "AbortIncompleteMultipartUpload")]
    abort: Option<AbortXml>,
    #[serde(rename = "Transition")]
    transition: Option<Present>,
    #[serde(rename = "Transitions")]
    transitions: Option<Present>,
    #[serde(rename = "NoncurrentVersionTransition")]
    noncurrent_transition: Option<Present>,
    #[serde(rename = "NoncurrentVersionExpiration")]
    noncurrent_expiration: Option<NoncurrentXml>,
}

#[derive(Deserialize)]
struct NoncurrentXml {
    #[serde(rename = "NoncurrentDays")]
    days: Option<String>,
    #[serde(rename = "NewerNoncurrentVersions")]
    newer: Option<String>,
}

#[derive(Deserialize)]
struct FilterXml {
    #[serde(rename = "Prefix")]
    prefix: Option<String>,
    #[serde(rename = "Tag")]
    tag: Option<TagXml>,
    #[serde(rename = "ObjectSizeGreaterThan")]
    size_greater_than: Option<String>,
    #[serde(rename = "ObjectSizeLessThan")]
    size_less_than: Option<String>,
    #[serde(rename = "And")]
    and: Option<AndXml>,
}

#[derive(Deserialize)]
struct TagXml {
    #[serde(rename = "Key")]
    key: Option<String>,
    #[serde(rename = "Value")]
    value: Option<String>,
}

impl TagXml {
    fn parse(&self) -> Result<Tag, S3Error> {
        match &self.key {
            Some(key) => Ok(Tag::new(key, self.value.clone().unwrap_or_default())),
            None => Err(malformed()),
        }
    }
}

#[derive(Deserialize)]
struct AndXml {
    #[serde(rename = "Prefix")]
    prefix: Option<String>,
    #[serde(default, rename = "Tag")]
    tags: Vec<TagXml>,
    #[serde(rename = "ObjectSizeGreaterThan")]
    size_greater_than: Option<String>,
    #[serde(rename = "ObjectSizeLessThan")]
    size_less_than: Option<String>,
}

#[derive(Deserialize)]
struct ExpirationXml {
    #[serde(rename = "Days")]
    days: Option<String>,
    #[serde(rename = "Date")]
    date: Option<String>,
    #[serde(rename = "ExpiredObjectDeleteMarker")]
    delete_marker: Option<String>,
}

#[derive(Deserialize)]
struct AbortXml {
    #[serde(rename = "DaysAfterInitiation")]
    days: Option<String>,
}

fn malformed() -> S3Error {
    S3Error::new(
        ErrorCode::MalformedXML,
        "The XML you provided was not well-formed or did not validate against our published schema",
    )
}

fn invalid(message: &'static str) -> S3Error {
    S3Error::new(ErrorCode::InvalidArgument, message)
}

fn unsupported(what: &str) -> S3Error {
    S3Error::new(
        ErrorCode::NotImplemented,
        format!("{what} in a lifecycle rule is not supported by this gateway"),
    )
}

/// A positive day count: MalformedXML if not a number, InvalidArgument if not positive.
fn positive_days(text: &str, message: &'static str) -> Result<u32, S3Error> {
    let n: i64 = text.trim().parse().map_err(|_| malformed())?;
    if n <= 0 {
        return Err(invalid(message));
    }
    u32::try_from(n).map_err(|_| invalid(message))
}

fn size(text: &str) -> Result<u64, S3Error> {
    let n: i64 = text.trim().parse().map_err(|_| malformed())?;
    u64::try_from(n).map_err(|_| invalid("'ObjectSize' must be a non-negative integer"))
}

/// An ISO 8601 date at midnight UTC (`2026-12-01T00:00:00.000Z`, `2026-12-01T00:00:00Z`,
/// or without the zone, read as UTC), as unix seconds.
pub fn parse_midnight(text: &str) -> Result<u64, S3Error> {
    use time::format_description::well_known::Rfc3339;
    let text = text.trim();
    let parsed = time::OffsetDateTime::parse(text, &Rfc3339)
        .or_else(|_| time::OffsetDateTime::parse(&format!("{text}Z"), &Rfc3339))
        .or_else(|_| time::OffsetDateTime::parse(&format!("{text}T00:00:00Z"), &Rfc3339))
        .map_err(|_| invalid("Invalid date: 'Date' must be an ISO 8601 date"))?;
    let secs = parsed.unix_timestamp();
    if secs.rem_euclid(86_400) != 0 || parsed.nanosecond() != 0 {
        return Err(invalid("'Date' must be at midnight GMT"));
    }
    u64::try_from(secs).map_err(|_| invalid("Invalid date: 'Date' is before 1970"))
}

fn parse_filter(rule: &RuleXml) -> Result<RuleFilter, S3Error> {
    let f = match (&rule.prefix, &rule.filter) {
        (Some(_), Some(_)) | (None, None) => return Err(malformed()),
        (Some(p), None) => return Ok(RuleFilter::LegacyPrefix(p.clone())),
        (None, Some(f)) => f,
    };
    let given = [
        f.prefix.is_some(),
        f.tag.is_some(),
        f.size_greater_than.is_some(),
        f.size_less_than.is_some(),
        f.and.is_some(),
    ]
    .iter()
    .filter(|g| **g)
    .count();
    if given > 1 {
        return Err(malformed());
    }
    let filter = if let Some(p) = &f.prefix {
        RuleFilter::Prefix(p.clone())
    } else if let Some(t) = &f.tag {
        RuleFilter::Tag(t.parse()?)
    } else if let Some(g) = &f.size_greater_than {
        RuleFilter::SizeGreaterThan(size(g)?)
    } else if let Some(l) = &f.size_less_than {
        RuleFilter::SizeLessThan(size(l)?)
    } else if let Some(a) = &f.and {
        let prefix = a.prefix.clone();
        let size_greater_than = a.size_greater_than.as_deref().map(size).transpose()?;
        let size_less_than = a.size_less_than.as_deref().map(size).transpose()?;
        if a.tags.is_empty() {
            RuleFilter::And {
                prefix,
                size_greater_than,
                size_less_than,
            }
        } else {
            RuleFilter::AndTags {
                prefix,
                size_greater_than,
                size_less_than,
                tags: a.tags.iter().map(TagXml::parse).collect::<Result<_, _>>()?,
            }
        }
    } else {
        RuleFilter::All
    };
    // S3's rules on a tag set hold for a filter's tags too (an object has at most 10: a
    // filter needing more would match nothing).
    super::tagging::check(&TagSet(filter.tags().to_vec()), OBJECT_TAGS_MAX)?;
    if let (Some(g), Some(l)) = filter.size_bounds()
        && g >= l
    {
        return Err(invalid(
            "ObjectSizeGreaterThan must be less than ObjectSizeLessThan",
        ));
    }
    Ok(filter)
}

fn parse_rule(rule: RuleXml) -> Result<LifecycleRule, S3Error> {
    if rule.transition.is_some() || rule.transitions.is_some() {
        return Err(unsupported("Transition to another storage class"));
    }
    if rule.noncurrent_transition.is_some() {
        return Err(unsupported(
            "NoncurrentVersionTransition to another storage class",
        ));
    }
    let enabled = match rule.status.as_deref() {
        Some("Enabled") => true,
        Some("Disabled") => false,
        _ => return Err(malformed()),
    };
    let id = match rule.id.clone() {
        Some(id) if id.chars().count() > RULE_ID_CHARS_MAX => {
            return Err(invalid("ID length should not exceed allowed limit of 255"));
        }
        Some(id) => id,
        // S3 names a rule without an ID itself.
        None => format!("{:016x}", rand::random::<u64>()),
    };
    let filter = parse_filter(&rule)?;
    let mut versions = VersionActions::default();
    let expiration = match &rule.expiration {
        None => None,
        Some(e) => match (&e.days, &e.date, &e.delete_marker) {
            (Some(d), None, None) => Some(Expiration::Days(positive_days(
                d,
                "'Days' for Expiration action must be a positive integer",
            )?)),
            (None, Some(d), None) => Some(Expiration::Date(parse_midnight(d)?)),
            (None, None, Some(m)) => {
                versions.expired_object_delete_marker = match m.trim() {
                    "true" => true,
                    "false" => false,
                    _ => return Err(malformed()),
                };
                None
            }
            // S3: ExpiredObjectDeleteMarker cannot be specified with Days or Date.
            _ => return Err(malformed()),
        },
    };
    if let Some(n) = &rule.noncurrent_expiration {
        let days = n.days.as_deref().ok_or_else(malformed)?;
        versions.noncurrent_days = Some(positive_days(
            days,
            "'NoncurrentDays' for NoncurrentVersionExpiration action must be a positive integer",
        )?);
        versions.newer_noncurrent = match n.newer.as_deref() {
            None => None,
            Some(text) => {
                let message =
                    "'NewerNoncurrentVersions' must be a positive integer no greater than 100";
                let newer = positive_days(text, message)?;
                if newer > rules::NEWER_NONCURRENT_MAX {
                    return Err(invalid(message));
                }
                Some(newer)
            }
        };
    }
    let abort_upload_days = match &rule.abort {
        None => None,
        Some(AbortXml { days: Some(d) }) => Some(positive_days(
            d,
            "'DaysAfterInitiation' for AbortIncompleteMultipartUpload action must be a positive integer",
        )?),
        Some(AbortXml { days: None }) => return Err(malformed()),
    };
    if abort_upload_days.is_some() && filter.has_size() {
        return Err(S3Error::new(
            ErrorCode::InvalidRequest,
            "AbortIncompleteMultipartUpload cannot be specified with an object size filter",
        ));
    }
    // An upload and a delete marker have no tags: S3 refuses these actions with tags.
    if abort_upload_days.is_some() && !filter.tags().is_empty() {
        return Err(S3Error::new(
            ErrorCode::InvalidRequest,
            "AbortIncompleteMultipartUpload cannot be specified with Tags.",
        ));
    }
    if versions.expired_object_delete_marker && !filter.tags().is_empty() {
        return Err(S3Error::new(
            ErrorCode::InvalidRequest,
            "ExpiredObjectDeleteMarker cannot be specified with Tags.",
        ));
    }
    if expiration.is_none() && abort_upload_days.is_none() && versions.is_none() {
        return Err(S3Error::new(
            ErrorCode::InvalidRequest,
            "At least one action needs to be specified in a rule",
        ));
    }
    Ok(LifecycleRule {
        id,
        enabled,
        filter,
        expiration,
        abort_upload_days,
        versions,
    })
}

/// Parses and checks a LifecycleConfiguration document.
pub fn parse_configuration(text: &str) -> Result<Vec<LifecycleRule>, S3Error> {
    let parsed: ConfigurationXml = quick_xml::de::from_str(text).map_err(|_| malformed())?;
    if parsed.rules.is_empty() || parsed.rules.len() > RULES_MAX {
        return Err(malformed());
    }
    let rules = parsed
        .rules
        .into_iter()
        .map(parse_rule)
        .collect::<Result<Vec<_>, _>>()?;
    let mut ids = HashSet::new();
    if !rules.iter().all(|r| ids.insert(r.id.as_str())) {
        return Err(invalid(
            "Rule ID must be unique. Found same ID for more than one rule",
        ));
    }
    Ok(rules)
}

fn render_filter(w: &mut XmlWriter, filter: &RuleFilter) {
    if let RuleFilter::LegacyPrefix(p) = filter {
        w.leaf("Prefix", p);
        return;
    }
    w.open("Filter");
    match filter {
        RuleFilter::LegacyPrefix(_) | RuleFilter::All => {}
        RuleFilter::Prefix(p) => w.leaf("Prefix", p),
        RuleFilter::SizeGreaterThan(g) => w.leaf("ObjectSizeGreaterThan", &g.to_string()),
        RuleFilter::SizeLessThan(l) => w.leaf("ObjectSizeLessThan", &l.to_string()),
        RuleFilter::Tag(t) => render_tag(w, t),
        RuleFilter::And {
            prefix,
            size_greater_than,
            size_less_than,
        }
        | RuleFilter::AndTags {
            prefix,
            size_greater_than,
            size_less_than,
            ..
        } => {
            w.open("And");
            if let Some(p) = prefix {
                w.leaf("Prefix", p);
            }
            for t in filter.tags() {
                render_tag(w, t);
            }
            if let Some(g) = size_greater_than {
                w.leaf("ObjectSizeGreaterThan", &g.to_string());
            }
            if let Some(l) = size_less_than {
                w.leaf("ObjectSizeLessThan", &l.to_string());
            }
            w.close("And");
        }
    }
    w.close("Filter");
}

fn render_tag(w: &mut XmlWriter, t: &Tag) {
    w.open("Tag");
    w.leaf("Key", &t.key);
    w.leaf("Value", &t.value);
    w.close("Tag");
}

/// The LifecycleConfiguration document of `rules`.
pub fn render_configuration(rules: &[LifecycleRule]) -> Vec<u8> {
    let mut w = XmlWriter::new();
    w.open_root("LifecycleConfiguration");
    for r in rules {
        w.open("Rule");
        w.leaf("ID", &r.id);
        render_filter(&mut w, &r.filter);
        w.leaf("Status", if r.enabled { "Enabled" } else { "Disabled" });
        match r.expiration {
            Some(Expiration::Days(d)) => {
                w.open("Expiration");
                w.leaf("Days", &d.to_string());
                w.close("Expiration");
            }
            Some(Expiration::Date(at)) => {
                w.open("Expiration");
                w.leaf("Date", &super::dates::iso8601(at.saturating_mul(1000)));
                w.close("Expiration");
            }
            None if r.versions.expired_object_delete_marker => {
                w.open("Expiration");
                w.leaf("ExpiredObjectDeleteMarker", "true");
                w.close("Expiration");
            }
            None => {}
        }
        if let Some(days) = r.versions.noncurrent_days {
            w.open("NoncurrentVersionExpiration");
            w.leaf("NoncurrentDays", &days.to_string());
            if let Some(n) = r.versions.newer_noncurrent {
                w.leaf("NewerNoncurrentVersions", &n.to_string());
            }
            w.close("NoncurrentVersionExpiration");
        }
        if let Some(d) = r.abort_upload_days {
            w.open("AbortIncompleteMultipartUpload");
            w.leaf("DaysAfterInitiation", &d.to_string());
            w.close("AbortIncompleteMultipartUpload");
        }
        w.close("Rule");
    }
    w.close("LifecycleConfiguration");
    w.finish()
}

pub async fn put(app: &AppState, bucket: &str, req: Request) -> Result<Response, S3Error> {
    let text = super::auth::read_xml_body(req.into_body(), LIFECYCLE_BODY_BYTES_MAX).await?;
    let rules = parse_configuration(&text)?;
    app.store.set_lifecycle(bucket, Some(rules)).await?;
    Ok(StatusCode::OK.into_response())
}

pub async fn delete(app: &AppState, bucket: &str) -> Result<Response, S3Error> {
    app.store.set_lifecycle(bucket, None).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn get(app: &AppState, bucket: &str) -> Result<Response, S3Error> {
    let rules = app.store.lifecycle(bucket).await?.ok_or_else(|| {
        S3Error::new(
            ErrorCode::NoSuchLifecycleConfiguration,
            "The lifecycle configuration does not exist",
        )
        .with_resource(bucket)
    })?;
    Ok((
        [(header::CONTENT_TYPE, "application/xml")],
        render_configuration(&rules),
    )
        .into_response())
}

/// Adds `x-amz-expiration: expiry-date="<RFC 1123>", rule-id="<id>"` when a rule of the
/// bucket will expire this object. The rules are read from this node's state, without a
/// round to the leader: a header a moment stale after a configuration change is harmless.
pub async fn expiration_header(
    app: &AppState,
    bucket: &str,
    key: &str,
    (record, tags): (&ObjectRecord, &TagSet),
    headers: &mut HeaderMap,
) {
    let rules = match app.store.lifecycle_local(bucket).await {
        Ok(Some(r)) => r,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(bucket, error = %e, "reading lifecycle rules");
            return;
        }
    };
    let expiry = rules::object_expiry(
        &rules,
        key,
        (record.size_bytes, Some(tags)),
        record.created_ms / 1000,
        app.lifecycle.day_secs,
    );
    if let Some((at, rule_id)) = expiry {
        let value = format!(
            "expiry-date=\"{}\", rule-id=\"{}\"",
            super::dates::http_date(at.saturating_mul(1000)),
            rule_id.replace('"', "\\\"")
        );
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert("x-amz-expiration", v);
        }
    }
}

impl ObjectStore {
    pub async fn set_lifecycle(
        &self,
        bucket: &str,
        rules: Option<Vec<LifecycleRule>>,
    ) -> Result<(), StoreError> {
        let cmd = Command::set_lifecycle(bucket.to_string(), rules);
        let done = self
            .execute(cmd)
            .await
            .map(drop)
            .map_err(|e| StoreError::meta(e, bucket));
        self.lifecycle_rules.forget(bucket);
        done
    }

    /// The bucket's rules from this node's state, through the rules cache (see
    /// [`crate::lifecycle::cache`]): at most a moment stale, for `x-amz-expiration` only.
    pub async fn lifecycle_local(
        &self,
        bucket: &str,
    ) -> Result<crate::lifecycle::cache::Rules, StoreError> {
        // Taken before the read: the entry's age counts from a moment it could be stale.
        let now = std::time::Instant::now();
        if let Some(rules) = self.lifecycle_rules.get(bucket, now) {
            return Ok(rules);
        }
        let name = bucket.to_string();
        let rules = self
            .metadata()
            .read_local(move |m| m.lifecycle(&name))
            .await
            .map_err(|e| StoreError::meta(e, bucket))?
            .map(|r| std::sync::Arc::new(r.rules));
        self.lifecycle_rules.put(bucket, rules.clone(), now);
        Ok(rules)
    }

    /// The bucket's rules (linearizable), None if it has none; NoSuchBucket if it is gone.
    pub async fn lifecycle(&self, bucket: &str) -> Result<Option<Vec<LifecycleRule>>, StoreError> {
        let name = bucket.to_string();
        let (exists, record) = self
            .metadata()
            .read(move |m| Ok((m.bucket(&name)?.is_some(), m.lifecycle(&name)?)))
            .await
            .map_err(|e| StoreError::meta(e, bucket))?;
        if !exists {
            return Err(StoreError::NoSuchBucket(bucket.to_string()));
        }
        Ok(record.map(|r| r.rules))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(rules: &str) -> String {
        format!(
            r#"<LifecycleConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">{rules}</LifecycleConfiguration>"#
        )
    }

    fn code(rules: &str) -> ErrorCode {
        parse_configuration(&doc(rules)).unwrap_err().code
    }

    #[test]
    fn a_configuration_round_trips() {
        let text = doc(
            "<Rule><ID>a</ID><Filter><And><Prefix>logs/</Prefix><ObjectSizeGreaterThan>10</ObjectSizeGreaterThan>\
             <ObjectSizeLessThan>100</ObjectSizeLessThan></And></Filter><Status>Enabled</Status>\
             <Expiration><Days>3</Days></Expiration></Rule>\
             <Rule><ID>b</ID><Prefix>tmp/</Prefix><Status>Disabled</Status>\
             <Expiration><Date>2020-01-01T00:00:00.000Z</Date></Expiration>\
             <AbortIncompleteMultipartUpload><DaysAfterInitiation>2</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule>\
             <Rule><ID>c</ID><Filter></Filter><Status>Enabled</Status><AbortIncompleteMultipartUpload>\
             <DaysAfterInitiation>1</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule>",
        );
        let rules = parse_configuration(&text).unwrap();
        assert_eq!(rules.len(), 3);
        assert_eq!(rules[1].expiration, Some(Expiration::Date(1_577_836_800)));
        assert_eq!(rules[2].filter, RuleFilter::All);
        let again =
            parse_configuration(&String::from_utf8(render_configuration(&rules)).unwrap()).unwrap();
        assert_eq!(again, rules);
    }

    #[test]
    fn version_actions_round_trip() {
        let text = doc(
            "<Rule><ID>v</ID><Filter><Prefix>mail/</Prefix></Filter><Status>Enabled</Status>\
             <Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration>\
             <NoncurrentVersionExpiration><NoncurrentDays>30</NoncurrentDays>\
             <NewerNoncurrentVersions>3</NewerNoncurrentVersions></NoncurrentVersionExpiration></Rule>",
        );
        let rules = parse_configuration(&text).unwrap();
        assert_eq!(
            rules[0].versions,
            VersionActions {
                noncurrent_days: Some(30),
                newer_noncurrent: Some(3),
                expired_object_delete_marker: true,
            }
        );
        assert_eq!(rules[0].expiration, None);
        let again =
            parse_configuration(&String::from_utf8(render_configuration(&rules)).unwrap()).unwrap();
        assert_eq!(again, rules);
    }

    /// A prefix is matched byte for byte against keys: spaces around it are part of it,
    /// never trimmed (a trimmed " logs/" would expire every "logs/..." object).
    #[test]
    fn a_prefix_keeps_its_spaces() {
        for (prefix, legacy) in [
            (" logs/", false),
            ("tmp/ ", false),
            ("  ", false),
            (" a ", true),
        ] {
            let rule = if legacy {
                format!(
                    "<Rule><ID>x</ID><Prefix>{prefix}</Prefix><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>"
                )
            } else {
                format!(
                    "<Rule><ID>x</ID><Filter><Prefix>{prefix}</Prefix></Filter><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>"
                )
            };
            let rules = parse_configuration(&doc(&rule)).unwrap();
            let want = if legacy {
                RuleFilter::LegacyPrefix(prefix.into())
            } else {
                RuleFilter::Prefix(prefix.into())
            };
            assert_eq!(rules[0].filter, want, "{prefix:?}");
            let again =
                parse_configuration(&String::from_utf8(render_configuration(&rules)).unwrap())
                    .unwrap();
            assert_eq!(again, rules, "{prefix:?}");
        }
    }

    #[test]
    fn bad_configurations_get_s3s_codes() {
        let rule = |inner: &str| format!("<Rule><ID>x</ID><Status>Enabled</Status>{inner}</Rule>");
        let days = |d: &str| {
            rule(&format!(
                "<Filter><Prefix></Prefix></Filter><Expiration><Days>{d}</Days></Expiration>"
            ))
        };
        assert_eq!(code(&days("0")), ErrorCode::InvalidArgument);
        assert_eq!(code(&days("-1")), ErrorCode::InvalidArgument);
        assert_eq!(code(&days("x")), ErrorCode::MalformedXML);
        let date = |d: &str| {
            rule(&format!(
                "<Filter/><Expiration><Date>{d}</Date></Expiration>"
            ))
        };
        assert_eq!(
            code(&date("2020-01-01T10:00:00Z")),
            ErrorCode::InvalidArgument
        );
        assert_eq!(code(&date("yesterday")), ErrorCode::InvalidArgument);
        assert!(parse_configuration(&doc(&date("2020-01-01T00:00:00"))).is_ok());
        assert_eq!(code(""), ErrorCode::MalformedXML);
        assert_eq!(
            code(&format!("{}{}", days("1"), days("2"))),
            ErrorCode::InvalidArgument
        );
        let long = format!(
            "<Rule><ID>{}</ID><Status>Enabled</Status><Filter/><Expiration><Days>1</Days></Expiration></Rule>",
            "i".repeat(256)
        );
        assert_eq!(code(&long), ErrorCode::InvalidArgument);
        let status = "<Rule><ID>x</ID><Status>On</Status><Filter/><Expiration><Days>1</Days></Expiration></Rule>";
        assert_eq!(code(status), ErrorCode::MalformedXML);
        assert_eq!(code(&rule("<Filter/>")), ErrorCode::InvalidRequest);
        assert_eq!(
            code(&rule(
                "<Filter/><Transition><Days>1</Days><StorageClass>GLACIER</StorageClass></Transition>"
            )),
            ErrorCode::NotImplemented
        );
        assert_eq!(
            code(&rule(
                "<Filter/><NoncurrentVersionTransition><NoncurrentDays>1</NoncurrentDays><StorageClass>GLACIER</StorageClass></NoncurrentVersionTransition>"
            )),
            ErrorCode::NotImplemented
        );
        for (bad, want) in [
            (
                "<NoncurrentVersionExpiration><NoncurrentDays>0</NoncurrentDays></NoncurrentVersionExpiration>",
                ErrorCode::InvalidArgument,
            ),
            (
                "<NoncurrentVersionExpiration><NewerNoncurrentVersions>2</NewerNoncurrentVersions></NoncurrentVersionExpiration>",
                ErrorCode::MalformedXML,
            ),
            (
                "<NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays><NewerNoncurrentVersions>101</NewerNoncurrentVersions></NoncurrentVersionExpiration>",
                ErrorCode::InvalidArgument,
            ),
            (
                "<Expiration><Days>1</Days><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration>",
                ErrorCode::MalformedXML,
            ),
            (
                "<Expiration><ExpiredObjectDeleteMarker>yes</ExpiredObjectDeleteMarker></Expiration>",
                ErrorCode::MalformedXML,
            ),
        ] {
            assert_eq!(code(&rule(&format!("<Filter/>{bad}"))), want, "{bad}");
        }
        let one = "<Filter><Tag><Key>a</Key><Value>b</Value></Tag></Filter>";
        let and = "<Filter><And><Prefix>p/</Prefix><Tag><Key>a</Key><Value>b</Value></Tag>\
                   <Tag><Key>c</Key><Value></Value></Tag>\
                   <ObjectSizeLessThan>9</ObjectSizeLessThan></And></Filter>";
        for filter in [one, and] {
            let text = rule(&format!("{filter}<Expiration><Days>1</Days></Expiration>"));
            let rules = parse_configuration(&doc(&text)).unwrap();
            assert!(!rules[0].filter.tags().is_empty());
            // Rendered and read back: the same rule.
            let again = String::from_utf8(render_configuration(&rules)).unwrap();
            assert_eq!(parse_configuration(&again).unwrap(), rules, "{again}");
            for (action, want) in [
                (
                    "<AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation></AbortIncompleteMultipartUpload>",
                    ErrorCode::InvalidRequest,
                ),
                (
                    "<Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration>",
                    ErrorCode::InvalidRequest,
                ),
            ] {
                assert_eq!(code(&rule(&format!("{filter}{action}"))), want, "{action}");
            }
        }
        assert_eq!(
            code(&rule(
                "<Filter><Tag><Key>aws:a</Key><Value>b</Value></Tag></Filter><Expiration><Days>1</Days></Expiration>"
            )),
            ErrorCode::InvalidTag
        );
        assert_eq!(
            code(&rule(
                "<Filter><Tag><Value>b</Value></Tag></Filter><Expiration><Days>1</Days></Expiration>"
            )),
            ErrorCode::MalformedXML
        );
        assert_eq!(
            code(&rule(
                "<Filter><Prefix>a</Prefix><ObjectSizeLessThan>5</ObjectSizeLessThan></Filter><Expiration><Days>1</Days></Expiration>"
            )),
            ErrorCode::MalformedXML
        );
        assert_eq!(
            code(&rule(
                "<Filter><ObjectSizeLessThan>5</ObjectSizeLessThan></Filter><AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation></AbortIncompleteMultipartUpload>"
            )),
            ErrorCode::InvalidRequest
        );
        assert_eq!(
            code(&rule(
                "<Filter/><Expiration><Days>1</Days><Date>2020-01-01T00:00:00Z</Date></Expiration>"
            )),
            ErrorCode::MalformedXML
        );
        assert_eq!(
            code(&rule("<Expiration><Days>1</Days></Expiration>")),
            ErrorCode::MalformedXML
        );
        assert_eq!(
            parse_configuration("not xml").unwrap_err().code,
            ErrorCode::MalformedXML
        );
    }
}
