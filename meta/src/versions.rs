//! Object versions (see `docs/versions.md`): a bucket's versioning state, the stamp that
//! a version carries beside its [`ObjectRecord`], the records of the `versions` table and
//! the version ids clients see.
//!
//! [`ObjectRecord`] itself never changes shape: it travels inside commands in the Raft
//! log. What a version adds is kept beside it, and written only for versioned buckets, so
//! that a group that never turns versioning on stores exactly the bytes it stored before.

use placement::Magic;
use serde::{Deserialize, Serialize};

use crate::MetaError;
use crate::tables::ObjectRecord;
// Kept beside the bucket record it is part of; named here with the rest of versions.
pub use crate::tables::Versioning;

/// What a version of a key is besides its record: its key-local number (one more than the
/// highest the key had when it was written) and whether it is the key's `null` version.
/// Every record from before versioning is number 0, the null version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionStamp {
    pub number: u64,
    pub null: bool,
}

impl VersionStamp {
    /// The stamp of every object of an unversioned bucket.
    pub const UNVERSIONED: VersionStamp = VersionStamp {
        number: 0,
        null: true,
    };

    /// The id clients see: `null`, or 24 hex digits, the number then the magic of the
    /// version's reference, so that a number used again (its version deleted, the key
    /// written again) never names the new version.
    pub fn id(&self, magic: Magic) -> String {
        if self.null {
            "null".to_string()
        } else {
            format!("{:016x}{:08x}", self.number, magic.get())
        }
    }
}

/// A version id as a client gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum VersionId {
    Null,
    /// The number and the magic part of a non-null id.
    Numbered {
        number: u64,
        magic: u32,
    },
}

/// An id that no version can have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid version id {0:?}")]
pub struct BadVersionId(pub String);

impl VersionId {
    pub fn parse(id: &str) -> Result<VersionId, BadVersionId> {
        if id == "null" {
            return Ok(VersionId::Null);
        }
        let bad = || BadVersionId(id.chars().take(64).collect());
        if id.len() != 24 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let number = u64::from_str_radix(&id[..16], 16).map_err(|_| bad())?;
        let magic = u32::from_str_radix(&id[16..], 16).map_err(|_| bad())?;
        Ok(VersionId::Numbered { number, magic })
    }

    /// Whether a version with this stamp and magic is the one the id names.
    pub fn names(&self, stamp: VersionStamp, magic: Option<Magic>) -> bool {
        match self {
            VersionId::Null => stamp.null,
            VersionId::Numbered { number, magic: m } => {
                !stamp.null && stamp.number == *number && magic.is_some_and(|g| g.get() == *m)
            }
        }
    }
}

/// One entry of the `versions` table: a noncurrent object version, or a delete marker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum VersionRecord {
    /// An object version that is no longer current; it keeps its own reference.
    Object {
        /// Boxed: a marker is a tenth of its size (the encoding is the same).
        record: Box<ObjectRecord>,
        stamp: VersionStamp,
        /// When it stopped being current (NoncurrentDays counts from here).
        noncurrent_since_ms: u64,
    },
    /// A delete marker: no content, no reference. The markers of a suspended bucket are
    /// null versions.
    DeleteMarker {
        stamp: VersionStamp,
        created_ms: u64,
        /// The id's magic part, chosen by the caller (`apply` has no randomness).
        magic: Magic,
    },
}

/// One version as a read sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionView {
    /// The object version's record; None for a delete marker.
    pub record: Option<ObjectRecord>,
    pub stamp: VersionStamp,
    /// The magic of the id: the reference's, or the marker's.
    pub magic: Magic,
    /// When it was written.
    pub created_ms: u64,
    /// Whether it is the key's current version.
    pub latest: bool,
}

impl VersionView {
    /// The current object version (from `objects`).
    pub fn current(record: ObjectRecord, stamp: VersionStamp) -> VersionView {
        VersionView {
            magic: record.magic,
            created_ms: record.created_ms,
            record: Some(record),
            stamp,
            latest: true,
        }
    }

    /// A `versions` entry; `latest` only for a delete marker that is the newest version.
    pub fn of(entry: VersionRecord, latest: bool) -> VersionView {
        match entry {
            VersionRecord::Object { record, stamp, .. } => VersionView {
                magic: record.magic,
                created_ms: record.created_ms,
                record: Some(*record),
                stamp,
                latest,
            },
            VersionRecord::DeleteMarker {
                stamp,
                created_ms,
                magic,
            } => VersionView {
                record: None,
                stamp,
                magic,
                created_ms,
                latest,
            },
        }
    }

    /// The id clients see.
    pub fn id(&self) -> String {
        self.stamp.id(self.magic)
    }
}

/// Format byte of a `versions` value.
const VERSION_RECORD_V1: u8 = 1;
/// Format byte of an `objects` value with its stamp (a versioned bucket's current version);
/// 1 is a bare [`ObjectRecord`] with [`VersionStamp::UNVERSIONED`].
const CURRENT_WITH_STAMP: u8 = 2;

fn corrupt(table: &str, e: impl std::fmt::Display) -> MetaError {
    MetaError::Corrupt(format!("{table}: {e}"))
}

impl VersionRecord {
    pub fn stamp(&self) -> VersionStamp {
        match self {
            VersionRecord::Object { stamp, .. } | VersionRecord::DeleteMarker { stamp, .. } => {
                *stamp
            }
        }
    }

    /// The magic in the version's id.
    pub fn magic(&self) -> Magic {
        match self {
            VersionRecord::Object { record, .. } => record.magic,
            VersionRecord::DeleteMarker { magic, .. } => *magic,
        }
    }

    pub fn encode(&self) -> Result<Vec<u8>, MetaError> {
        let mut out = vec![VERSION_RECORD_V1];
        out.extend(postcard::to_stdvec(self).map_err(|e| corrupt("versions", e))?);
        Ok(out)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, MetaError> {
        match bytes.split_first() {
            Some((&VERSION_RECORD_V1, rest)) => {
                postcard::from_bytes(rest).map_err(|e| corrupt("versions", e))
            }
            Some((v, _)) => Err(corrupt("versions", format!("unknown record version {v}"))),
            None => Err(corrupt("versions", "empty record")),
        }
    }
}

/// An `objects` value: the record alone when its stamp is [`VersionStamp::UNVERSIONED`]
/// (today's bytes), else the record and its stamp.
pub fn encode_current(record: &ObjectRecord, stamp: VersionStamp) -> Result<Vec<u8>, MetaError> {
    if stamp == VersionStamp::UNVERSIONED {
        return crate::tables::encode_versioned(record);
    }
    let mut out = vec![CURRENT_WITH_STAMP];
    out.extend(postcard::to_stdvec(&(record, stamp)).map_err(|e| corrupt("objects", e))?);
    Ok(out)
}

/// Reads an `objects` value of either format.
pub fn decode_current(bytes: &[u8]) -> Result<(ObjectRecord, VersionStamp), MetaError> {
    match bytes.split_first() {
        Some((&CURRENT_WITH_STAMP, rest)) => {
            postcard::from_bytes(rest).map_err(|e| corrupt("objects", e))
        }
        _ => Ok((
            crate::tables::decode_versioned("objects", bytes)?,
            VersionStamp::UNVERSIONED,
        )),
    }
}

/// The record of an `objects` value of either format, without its stamp: what every
/// reader that is not about versions needs.
pub fn decode_object(bytes: &[u8]) -> Result<ObjectRecord, MetaError> {
    decode_current(bytes).map(|(record, _)| record)
}

/// The number of the key's null version in `versions` (from [`crate::tables::NULL_VERSIONS`]),
/// if it has one there.
pub fn null_number(
    table: &impl redb::ReadableTable<(&'static str, &'static [u8]), u64>,
    bucket: &str,
    key: &str,
) -> Result<Option<u64>, MetaError> {
    Ok(table.get((bucket, key.as_bytes()))?.map(|v| v.value()))
}

/// The `versions` key part that orders a key's versions newest first.
pub fn order_of(number: u64) -> u64 {
    u64::MAX - number
}

#[cfg(test)]
mod tests {
    use placement::Sha1;

    use super::*;

    fn record() -> ObjectRecord {
        let mut r = ObjectRecord::new(
            Sha1([7; 20]),
            Magic::new(0xdead_beef).unwrap(),
            5,
            1,
            [2; 16],
        );
        r.content_type = Some("text/plain".into());
        r.seq = 9;
        r
    }

    #[test]
    fn ids_round_trip_and_name_only_their_version() {
        let magic = Magic::new(0x0102_0304).unwrap();
        let stamp = VersionStamp {
            number: 0x1234,
            null: false,
        };
        let id = stamp.id(magic);
        assert_eq!(id, "000000000000123401020304");
        let parsed = VersionId::parse(&id).unwrap();
        assert!(parsed.names(stamp, Some(magic)));
        assert!(
            !parsed.names(stamp, Some(Magic::new(5).unwrap())),
            "same number, new magic"
        );
        assert!(!parsed.names(
            VersionStamp {
                number: 0x1235,
                ..stamp
            },
            Some(magic)
        ));
        assert_eq!(VersionStamp::UNVERSIONED.id(magic), "null");
        assert_eq!(VersionId::parse("null").unwrap(), VersionId::Null);
        assert!(VersionId::Null.names(VersionStamp::UNVERSIONED, None));
        assert!(!VersionId::Null.names(stamp, Some(magic)));
        for bad in [
            "",
            "NULL",
            "12",
            "00000000000012340102030g",
            &"0".repeat(25),
        ] {
            assert!(VersionId::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_unversioned_current_record_keeps_todays_bytes() {
        let r = record();
        let bytes = encode_current(&r, VersionStamp::UNVERSIONED).unwrap();
        assert_eq!(bytes, crate::tables::encode_versioned(&r).unwrap());
        assert_eq!(
            decode_current(&bytes).unwrap(),
            (r.clone(), VersionStamp::UNVERSIONED)
        );
        let stamp = VersionStamp {
            number: 3,
            null: false,
        };
        let bytes = encode_current(&r, stamp).unwrap();
        assert_eq!(bytes[0], CURRENT_WITH_STAMP);
        assert_eq!(decode_current(&bytes).unwrap(), (r, stamp));
        assert!(matches!(decode_current(&[]), Err(MetaError::Corrupt(_))));
        assert!(matches!(
            decode_current(&[9, 1]),
            Err(MetaError::Corrupt(_))
        ));
    }

    #[test]
    fn version_records_round_trip() {
        let object = VersionRecord::Object {
            record: Box::new(record()),
            stamp: VersionStamp {
                number: 4,
                null: false,
            },
            noncurrent_since_ms: 1_700_000_000_000,
        };
        let marker = VersionRecord::DeleteMarker {
            stamp: VersionStamp {
                number: 5,
                null: true,
            },
            created_ms: 1_700_000_000_001,
            magic: Magic::new(77).unwrap(),
        };
        for v in [object, marker] {
            assert_eq!(VersionRecord::decode(&v.encode().unwrap()).unwrap(), v);
        }
        assert!(matches!(
            VersionRecord::decode(&[2, 0]),
            Err(MetaError::Corrupt(_))
        ));
        for state in [
            Versioning::Unversioned,
            Versioning::Enabled,
            Versioning::Suspended,
        ] {
            let bytes = postcard::to_stdvec(&state).unwrap();
            assert_eq!(postcard::from_bytes::<Versioning>(&bytes).unwrap(), state);
        }
        assert!(order_of(2) < order_of(1), "newest first");
    }
}
