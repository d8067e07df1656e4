//! Tags (S3's object and bucket tagging): a set of key/value pairs and S3's limits on it.
//! Where they are kept (beside an object version's record, beside an upload or a bucket)
//! is [`crate::extras`]'s.
//!
//! Back of the envelope: at most 50 tags of 128 + 256 characters (4 bytes each at most)
//! is 77 KB for a bucket, 10 such pairs 15 KB for a version; real tag sets are tens of
//! bytes, written only when a client sets some.

use serde::{Deserialize, Serialize};

use crate::MetaError;
use crate::tables::{decode_versioned, encode_versioned};

/// S3's bound on the tags of an object version.
pub const OBJECT_TAGS_MAX: usize = 10;
/// S3's bound on the tags of a bucket.
pub const BUCKET_TAGS_MAX: usize = 50;
/// S3's bound on a tag key, in Unicode characters.
pub const KEY_CHARS_MAX: usize = 128;
/// S3's bound on a tag value, in Unicode characters.
pub const VALUE_CHARS_MAX: usize = 256;
/// Keys with this prefix are AWS's own: a client may not set them.
pub const RESERVED_PREFIX: &str = "aws:";

/// Tags in the order the client gave them (GetObjectTagging answers them in that order).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagSet(pub Vec<Tag>);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tag {
    pub key: String,
    pub value: String,
}

/// Why a tag set breaks S3's rules (S3's `InvalidTag`, 400).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TagError {
    #[error("Object tags cannot be greater than {max}")]
    TooMany { max: usize },
    #[error("The TagKey you have provided is too long, max {KEY_CHARS_MAX}")]
    KeyTooLong,
    #[error("The TagValue you have provided is too long, max {VALUE_CHARS_MAX}")]
    ValueTooLong,
    #[error("The TagKey you have provided is invalid")]
    InvalidKey,
    #[error("The TagValue you have provided is invalid")]
    InvalidValue,
    #[error("Cannot provide multiple Tags with the same key")]
    DuplicateKey,
    #[error("Your TagKey cannot be prefixed with aws:")]
    ReservedKey,
}

/// The characters S3 takes in tags: letters, digits and spaces of any script, and
/// `+ - = . _ : / @`.
fn allowed(c: char) -> bool {
    c.is_alphanumeric() || c.is_whitespace() || "+-=._:/@".contains(c)
}

impl TagSet {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Checks S3's rules for a set of at most `max` tags ([`OBJECT_TAGS_MAX`] or
    /// [`BUCKET_TAGS_MAX`]).
    pub fn check(&self, max: usize) -> Result<(), TagError> {
        if self.0.len() > max {
            return Err(TagError::TooMany { max });
        }
        for (i, tag) in self.0.iter().enumerate() {
            if tag.key.chars().count() > KEY_CHARS_MAX {
                return Err(TagError::KeyTooLong);
            }
            if tag.value.chars().count() > VALUE_CHARS_MAX {
                return Err(TagError::ValueTooLong);
            }
            if tag.key.is_empty() || !tag.key.chars().all(allowed) {
                return Err(TagError::InvalidKey);
            }
            if !tag.value.chars().all(allowed) {
                return Err(TagError::InvalidValue);
            }
            if tag.key.starts_with(RESERVED_PREFIX) {
                return Err(TagError::ReservedKey);
            }
            if self.0[..i].iter().any(|t| t.key == tag.key) {
                return Err(TagError::DuplicateKey);
            }
        }
        Ok(())
    }

    /// Whether the set holds `key` with `value`.
    pub fn has(&self, key: &str, value: &str) -> bool {
        self.0.iter().any(|t| t.key == key && t.value == value)
    }

    pub fn encode(&self) -> Result<Vec<u8>, MetaError> {
        encode_versioned(self)
    }

    pub fn decode(table: &'static str, bytes: &[u8]) -> Result<Self, MetaError> {
        decode_versioned(table, bytes)
    }
}

impl Tag {
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Tag {
        Tag {
            key: key.into(),
            value: value.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pairs: &[(&str, &str)]) -> TagSet {
        TagSet(pairs.iter().map(|(k, v)| Tag::new(*k, *v)).collect())
    }

    #[test]
    fn s3s_rules_hold() {
        assert_eq!(set(&[("a", "1"), ("b", "")]).check(OBJECT_TAGS_MAX), Ok(()));
        assert_eq!(set(&[("ключ é", "valeur @/:+-=._")]).check(10), Ok(()));
        let eleven: Vec<(String, String)> =
            (0..11).map(|i| (format!("k{i}"), String::new())).collect();
        let eleven = TagSet(eleven.iter().map(|(k, v)| Tag::new(k, v)).collect());
        assert_eq!(
            eleven.check(OBJECT_TAGS_MAX),
            Err(TagError::TooMany { max: 10 })
        );
        assert_eq!(eleven.check(BUCKET_TAGS_MAX), Ok(()));
        let long_key = "é".repeat(129);
        assert_eq!(set(&[(&long_key, "")]).check(10), Err(TagError::KeyTooLong));
        assert_eq!(set(&[(&"é".repeat(128), "")]).check(10), Ok(()));
        assert_eq!(
            set(&[("k", &"v".repeat(257))]).check(10),
            Err(TagError::ValueTooLong)
        );
        assert_eq!(
            set(&[("a", "1"), ("a", "2")]).check(10),
            Err(TagError::DuplicateKey)
        );
        assert_eq!(set(&[("aws:x", "1")]).check(10), Err(TagError::ReservedKey));
        assert_eq!(set(&[("", "1")]).check(10), Err(TagError::InvalidKey));
        assert_eq!(set(&[("a*", "1")]).check(10), Err(TagError::InvalidKey));
        assert_eq!(set(&[("a", "<")]).check(10), Err(TagError::InvalidValue));
    }

    #[test]
    fn a_tag_set_round_trips_through_its_own_type() {
        let t = set(&[("a", "1"), ("b", "")]);
        let bytes = t.encode().unwrap();
        assert_eq!(bytes, [1, 2, 1, b'a', 1, b'1', 1, b'b', 0]);
        assert_eq!(TagSet::decode("t", &bytes).unwrap(), t);
        assert!(TagSet::decode("t", &[2, 0]).is_err());
    }
}
