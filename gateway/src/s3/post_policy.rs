//! The policy of an S3 POST Object (browser upload) form: parsing the base64 JSON document
//! and checking a form against it.
//!
//! A page's form carries a policy its back end signed: an `expiration` and a list of
//! `conditions` that every field the browser sends must meet. The signature covers only
//! the policy, so the policy is what binds the form: a field no condition names is
//! refused ("Extra input fields"), or a page could add, say, `x-amz-meta-*` or a
//! `success_action_redirect` of its own to a form it was handed. Pure functions over
//! strings; the handler (`post_object`) turns the errors into S3's codes.

use base64::Engine as _;
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Fields that no condition has to name: the signature material and the file itself, as
/// S3 documents for V4 (`x-amz-signature`) and V2 (`AWSAccessKeyId`, `signature`), and
/// anything prefixed `x-ignore-`.
const UNCONDITIONED: [&str; 5] = [
    "policy",
    "x-amz-signature",
    "signature",
    "awsaccesskeyid",
    "file",
];
const IGNORED_PREFIX: &str = "x-ignore-";

/// Why a policy document is not one (S3's InvalidPolicyDocument).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("Invalid Policy: Invalid Base64 Encoding.")]
    Base64,
    #[error("Invalid Policy: Invalid JSON.")]
    Json,
    #[error("Invalid Policy: Policy missing expiration.")]
    MissingExpiration,
    #[error("Invalid Policy: Invalid 'expiration' value: {0}")]
    BadExpiration(String),
    #[error("Invalid Policy: Policy missing conditions.")]
    MissingConditions,
    #[error("Invalid Policy: Invalid Condition: {0}")]
    BadCondition(String),
    #[error("Invalid Policy: Unexpected field in the policy: {0}")]
    UnknownKey(String),
}

/// Why a well-formed policy refuses a form (S3's AccessDenied, with these messages).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    #[error("Invalid according to Policy: Policy expired.")]
    Expired,
    #[error("Invalid according to Policy: Policy Condition failed: {0}")]
    ConditionFailed(String),
    #[error("Invalid according to Policy: Extra input fields: {}", .0.join(", "))]
    ExtraFields(Vec<String>),
}

/// One condition of a policy. Field names are kept lowercase: S3 compares them
/// case-insensitively, values exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// `{"field": "value"}` or `["eq", "$field", "value"]`.
    Eq { field: String, value: String },
    /// `["starts-with", "$field", "prefix"]`; an empty prefix allows any value.
    StartsWith { field: String, prefix: String },
    /// `["content-length-range", min, max]`: the file's size, inclusive bounds.
    LengthRange { min: u64, max: u64 },
}

impl std::fmt::Display for Condition {
    /// As S3 quotes a failed condition: `["eq", "$key", "a.txt"]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let quoted = |s: &str| Value::from(s).to_string();
        match self {
            Condition::Eq { field, value } => {
                write!(
                    f,
                    "[\"eq\", {}, {}]",
                    quoted(&format!("${field}")),
                    quoted(value)
                )
            }
            Condition::StartsWith { field, prefix } => write!(
                f,
                "[\"starts-with\", {}, {}]",
                quoted(&format!("${field}")),
                quoted(prefix)
            ),
            Condition::LengthRange { min, max } => {
                write!(f, "[\"content-length-range\", {min}, {max}]")
            }
        }
    }
}

/// A parsed policy document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub expiration: OffsetDateTime,
    pub conditions: Vec<Condition>,
}

/// The text fields of a form (everything before the file), names lowercased, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FormFields(Vec<(String, String)>);

impl FormFields {
    /// Adds a field; false (and nothing added) if a field of that name is already there.
    pub fn insert(&mut self, name: &str, value: String) -> bool {
        let name = name.to_ascii_lowercase();
        if self.get(&name).is_some() {
            return false;
        }
        self.0.push((name, value));
        true
    }

    /// The value of a field, by name in any case.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every field, name (lowercase) and value, in the order sent.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The key an object is stored under: the form's `key` with every `${filename}` replaced by
/// the file's name as the browser sent it (S3 replaces each occurrence).
pub fn object_key(key_field: &str, filename: &str) -> String {
    key_field.replace("${filename}", filename)
}

/// Decodes and parses the `policy` field.
pub fn parse(policy_b64: &str) -> Result<Policy, PolicyError> {
    // Browsers and form libraries may wrap long values; whitespace is not base64.
    let compact: String = policy_b64
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(compact.as_bytes())
        .map_err(|_| PolicyError::Base64)?;
    let doc: Value = serde_json::from_slice(&bytes).map_err(|_| PolicyError::Json)?;
    let Value::Object(doc) = doc else {
        return Err(PolicyError::Json);
    };
    let mut expiration = None;
    let mut conditions = None;
    for (k, v) in doc {
        match k.as_str() {
            "expiration" => expiration = Some(parse_expiration(&v)?),
            "conditions" => conditions = Some(parse_conditions(&v)?),
            other => return Err(PolicyError::UnknownKey(other.to_string())),
        }
    }
    Ok(Policy {
        expiration: expiration.ok_or(PolicyError::MissingExpiration)?,
        conditions: conditions.ok_or(PolicyError::MissingConditions)?,
    })
}

fn parse_expiration(v: &Value) -> Result<OffsetDateTime, PolicyError> {
    let text = v
        .as_str()
        .ok_or_else(|| PolicyError::BadExpiration(v.to_string()))?;
    OffsetDateTime::parse(text, &Rfc3339).map_err(|_| PolicyError::BadExpiration(text.to_string()))
}

fn parse_conditions(v: &Value) -> Result<Vec<Condition>, PolicyError> {
    let Value::Array(items) = v else {
        return Err(PolicyError::BadCondition(v.to_string()));
    };
    let mut out = Vec::new();
    for item in items {
        let bad = || PolicyError::BadCondition(item.to_string());
        match item {
            // `{"bucket": "b"}`: an exact match on each member.
            Value::Object(map) if !map.is_empty() => {
                for (field, value) in map {
                    out.push(Condition::Eq {
                        field: field_name(field, false).ok_or_else(bad)?,
                        value: value.as_str().ok_or_else(bad)?.to_string(),
                    });
                }
            }
            Value::Array(parts) if parts.len() == 3 => {
                let op = parts[0].as_str().ok_or_else(bad)?.to_ascii_lowercase();
                match op.as_str() {
                    "content-length-range" => {
                        let (min, max) = (length(&parts[1]), length(&parts[2]));
                        let (Some(min), Some(max)) = (min, max) else {
                            return Err(bad());
                        };
                        out.push(Condition::LengthRange { min, max });
                    }
                    "eq" | "starts-with" => {
                        let field = parts[1]
                            .as_str()
                            .and_then(|f| field_name(f, true))
                            .ok_or_else(bad)?;
                        let value = parts[2].as_str().ok_or_else(bad)?.to_string();
                        out.push(if op == "eq" {
                            Condition::Eq { field, value }
                        } else {
                            Condition::StartsWith {
                                field,
                                prefix: value,
                            }
                        });
                    }
                    _ => return Err(bad()),
                }
            }
            _ => return Err(bad()),
        }
    }
    Ok(out)
}

/// A condition's field: `$name` in the array forms, `name` in the object form; lowercase.
fn field_name(raw: &str, dollar: bool) -> Option<String> {
    let name = if dollar { raw.strip_prefix('$')? } else { raw };
    (!name.is_empty()).then(|| name.to_ascii_lowercase())
}

/// A bound of `content-length-range`: a non-negative integer, as a number or digits.
fn length(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

impl Policy {
    /// Checks a form, posted to `bucket` at `now`, against the policy, in S3's order:
    /// expiry, then each condition, then the fields no condition names. The file's size is
    /// checked while it streams ([`Policy::length_range`]).
    pub fn check(
        &self,
        form: &FormFields,
        bucket: &str,
        now: OffsetDateTime,
    ) -> Result<(), Violation> {
        if now >= self.expiration {
            return Err(Violation::Expired);
        }
        // `bucket` is the URL's, whatever the form says.
        let value_of = |field: &str| -> String {
            if field == "bucket" {
                bucket.to_string()
            } else {
                form.get(field).unwrap_or("").to_string()
            }
        };
        for c in &self.conditions {
            let holds = match c {
                Condition::Eq { field, value } => value_of(field) == *value,
                Condition::StartsWith { field, prefix } => {
                    let v = value_of(field);
                    // S3 checks each type of a comma-separated Content-Type list.
                    if field == "content-type" {
                        v.split(',').all(|t| t.trim_start().starts_with(prefix))
                    } else {
                        v.starts_with(prefix.as_str())
                    }
                }
                Condition::LengthRange { .. } => true,
            };
            if !holds {
                return Err(Violation::ConditionFailed(c.to_string()));
            }
        }
        let extra: Vec<String> = form
            .iter()
            .map(|(name, _)| name)
            .filter(|name| !UNCONDITIONED.contains(name) && !name.starts_with(IGNORED_PREFIX))
            .filter(|name| {
                !self.conditions.iter().any(|c| match c {
                    Condition::Eq { field, .. } | Condition::StartsWith { field, .. } => {
                        field == name
                    }
                    Condition::LengthRange { .. } => false,
                })
            })
            .map(str::to_string)
            .collect();
        if !extra.is_empty() {
            return Err(Violation::ExtraFields(extra));
        }
        Ok(())
    }

    /// The bounds every `content-length-range` puts on the file together, if any.
    pub fn length_range(&self) -> Option<(u64, u64)> {
        self.conditions
            .iter()
            .filter_map(|c| match c {
                Condition::LengthRange { min, max } => Some((*min, *max)),
                _ => None,
            })
            .reduce(|(a, b), (c, d)| (a.max(c), b.min(d)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    const BEFORE: OffsetDateTime = datetime!(2026-03-01 12:00:00 UTC);

    fn encode(json: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(json)
    }

    fn policy(conditions: &str) -> Policy {
        parse(&encode(&format!(
            r#"{{"expiration": "2026-03-01T12:30:00.000Z", "conditions": {conditions}}}"#
        )))
        .unwrap()
    }

    fn form(fields: &[(&str, &str)]) -> FormFields {
        let mut f = FormFields::default();
        for (n, v) in fields {
            assert!(f.insert(n, v.to_string()), "{n} twice");
        }
        f
    }

    #[test]
    fn every_condition_form_parses() {
        let p = policy(
            r#"[{"bucket": "up"}, ["eq", "$Key", "a.txt"], ["starts-with", "$Content-Type", "image/"],
                ["content-length-range", 1, "1048576"], ["STARTS-WITH", "$x-amz-meta-tag", ""]]"#,
        );
        assert_eq!(p.expiration, datetime!(2026-03-01 12:30:00 UTC));
        assert_eq!(
            p.conditions,
            vec![
                Condition::Eq {
                    field: "bucket".into(),
                    value: "up".into()
                },
                Condition::Eq {
                    field: "key".into(),
                    value: "a.txt".into()
                },
                Condition::StartsWith {
                    field: "content-type".into(),
                    prefix: "image/".into()
                },
                Condition::LengthRange {
                    min: 1,
                    max: 1_048_576
                },
                Condition::StartsWith {
                    field: "x-amz-meta-tag".into(),
                    prefix: String::new()
                },
            ]
        );
        assert_eq!(p.length_range(), Some((1, 1_048_576)));
        assert_eq!(
            p.conditions[1].to_string(),
            r#"["eq", "$key", "a.txt"]"#,
            "quoted as S3 quotes it"
        );
    }

    #[test]
    fn malformed_documents_are_refused_with_their_reason() {
        assert_eq!(parse("not base64!"), Err(PolicyError::Base64));
        assert_eq!(parse(&encode("{not json")), Err(PolicyError::Json));
        assert_eq!(parse(&encode("[1]")), Err(PolicyError::Json));
        assert_eq!(
            parse(&encode(r#"{"conditions": []}"#)),
            Err(PolicyError::MissingExpiration)
        );
        assert_eq!(
            parse(&encode(r#"{"expiration": "2026-03-01T12:30:00Z"}"#)),
            Err(PolicyError::MissingConditions)
        );
        assert!(matches!(
            parse(&encode(r#"{"expiration": "tomorrow", "conditions": []}"#)),
            Err(PolicyError::BadExpiration(_))
        ));
        assert!(matches!(
            parse(&encode(
                r#"{"expiration": "2026-03-01T12:30:00Z", "conditions": [], "x": 1}"#
            )),
            Err(PolicyError::UnknownKey(_))
        ));
        for bad in [
            r#"[["eq", "key", "a"]]"#,
            r#"[["eq", "$key"]]"#,
            r#"[["matches", "$key", "a"]]"#,
            r#"[["content-length-range", -1, 5]]"#,
            r#"[["content-length-range", "x", 5]]"#,
            r#"[{"key": 5}]"#,
            r#"[{}]"#,
            r#"["key"]"#,
            r#"{"key": "a"}"#,
        ] {
            let doc = format!(r#"{{"expiration": "2026-03-01T12:30:00Z", "conditions": {bad}}}"#);
            assert!(
                matches!(parse(&encode(&doc)), Err(PolicyError::BadCondition(_))),
                "{bad}"
            );
        }
        // Whitespace a form library wrapped the value with is not part of it.
        let wrapped = encode(r#"{"expiration": "2026-03-01T12:30:00Z", "conditions": []}"#);
        let (a, b) = wrapped.split_at(10);
        assert!(parse(&format!("{a}\r\n{b}\n")).is_ok());
    }

    #[test]
    fn an_elapsed_policy_is_expired() {
        let p = policy(r#"[{"key": "k"}]"#);
        let f = form(&[("key", "k")]);
        assert_eq!(p.check(&f, "b", BEFORE), Ok(()));
        let at = datetime!(2026-03-01 12:30:00 UTC);
        assert_eq!(p.check(&f, "b", at), Err(Violation::Expired));
        assert_eq!(
            Violation::Expired.to_string(),
            "Invalid according to Policy: Policy expired."
        );
    }

    #[test]
    fn exact_conditions_compare_values_exactly_and_names_in_any_case() {
        let p = policy(r#"[{"Key": "a.txt"}, ["eq", "$X-Amz-Meta-Owner", "Ann"]]"#);
        let ok = form(&[("KEY", "a.txt"), ("x-amz-meta-owner", "Ann")]);
        assert_eq!(p.check(&ok, "b", BEFORE), Ok(()));
        let other_case = form(&[("key", "A.txt"), ("x-amz-meta-owner", "Ann")]);
        assert_eq!(
            p.check(&other_case, "b", BEFORE),
            Err(Violation::ConditionFailed(
                r#"["eq", "$key", "a.txt"]"#.into()
            ))
        );
        // A field the form lacks is empty, which an exact condition on a value fails.
        let missing = form(&[("key", "a.txt")]);
        assert!(matches!(
            p.check(&missing, "b", BEFORE),
            Err(Violation::ConditionFailed(_))
        ));
    }

    #[test]
    fn the_bucket_condition_is_the_urls_bucket() {
        let p = policy(r#"[{"bucket": "up"}, {"key": "k"}]"#);
        let f = form(&[("key", "k")]);
        assert_eq!(p.check(&f, "up", BEFORE), Ok(()));
        assert!(matches!(
            p.check(&f, "other", BEFORE),
            Err(Violation::ConditionFailed(_))
        ));
        // A `bucket` field in the form does not change which bucket is checked.
        let p = policy(r#"[{"bucket": "up"}, {"key": "k"}, ["starts-with", "$bucket", ""]]"#);
        let f = form(&[("key", "k"), ("bucket", "up")]);
        assert!(p.check(&f, "other", BEFORE).is_err());
    }

    #[test]
    fn starts_with_checks_the_prefix_and_an_empty_prefix_allows_anything() {
        let p = policy(
            r#"[["starts-with", "$key", "user/ann/"], ["starts-with", "$x-amz-meta-note", ""]]"#,
        );
        let ok = form(&[
            ("key", "user/ann/${filename}"),
            ("x-amz-meta-note", "anything"),
        ]);
        assert_eq!(p.check(&ok, "b", BEFORE), Ok(()));
        let absent = form(&[("key", "user/ann/x")]);
        assert_eq!(p.check(&absent, "b", BEFORE), Ok(()));
        let bad = form(&[("key", "user/bob/x"), ("x-amz-meta-note", "")]);
        assert_eq!(
            p.check(&bad, "b", BEFORE),
            Err(Violation::ConditionFailed(
                r#"["starts-with", "$key", "user/ann/"]"#.into()
            ))
        );
    }

    #[test]
    fn starts_with_on_content_type_checks_every_listed_type() {
        let p = policy(r#"[{"key": "k"}, ["starts-with", "$Content-Type", "image/"]]"#);
        let ok = form(&[("key", "k"), ("content-type", "image/png, image/jpeg")]);
        assert_eq!(p.check(&ok, "b", BEFORE), Ok(()));
        let mixed = form(&[("key", "k"), ("content-type", "image/png, text/html")]);
        assert!(p.check(&mixed, "b", BEFORE).is_err());
    }

    #[test]
    fn every_field_but_the_signature_the_file_and_x_ignore_needs_a_condition() {
        let p = policy(r#"[{"key": "k"}, ["starts-with", "$Content-Type", ""]]"#);
        let ok = form(&[
            ("key", "k"),
            ("Content-Type", "text/plain"),
            ("policy", "..."),
            ("X-Amz-Signature", "..."),
            ("AWSAccessKeyId", "..."),
            ("signature", "..."),
            ("x-ignore-submit", "Upload"),
        ]);
        assert_eq!(p.check(&ok, "b", BEFORE), Ok(()));
        let extra = form(&[
            ("key", "k"),
            ("x-amz-meta-evil", "1"),
            ("success_action_redirect", "http://elsewhere/"),
        ]);
        let e = p.check(&extra, "b", BEFORE).unwrap_err();
        assert_eq!(
            e,
            Violation::ExtraFields(vec![
                "x-amz-meta-evil".into(),
                "success_action_redirect".into()
            ])
        );
        assert_eq!(
            e.to_string(),
            "Invalid according to Policy: Extra input fields: x-amz-meta-evil, success_action_redirect"
        );
        // A length range names no field.
        let p = policy(r#"[{"key": "k"}, ["content-length-range", 0, 10]]"#);
        let f = form(&[("key", "k"), ("content-length-range", "5")]);
        assert!(matches!(
            p.check(&f, "b", BEFORE),
            Err(Violation::ExtraFields(_))
        ));
    }

    #[test]
    fn length_ranges_intersect() {
        assert_eq!(policy(r#"[{"key": "k"}]"#).length_range(), None);
        let p = policy(r#"[["content-length-range", 10, 100], ["content-length-range", 0, 50]]"#);
        assert_eq!(p.length_range(), Some((10, 50)));
    }

    #[test]
    fn fields_repeat_in_no_case_and_filename_fills_the_key() {
        let mut f = FormFields::default();
        assert!(f.insert("Key", "a".into()));
        assert!(!f.insert("KEY", "b".into()));
        assert_eq!(f.get("key"), Some("a"));
        assert_eq!(f.len(), 1);
        assert_eq!(
            object_key("up/${filename}/${filename}", "a b.png"),
            "up/a b.png/a b.png"
        );
        assert_eq!(object_key("fixed", "x"), "fixed");
    }
}
