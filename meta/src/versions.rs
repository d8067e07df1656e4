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
use crate::acl::CannedAcl;
use crate::extras::{Extra, Extras};
use crate::tables::ObjectRecord;
use crate::tags::TagSet;
// Kept beside the bucket record it is part of; named here with the rest of versions.
pub use crate::tables::{DefaultRetention, LockConfig, LockMode, RetentionPeriod, Versioning};

/// What a version of a key is besides its record: its key-local number (one more than the
/// highest the key had when it was written) and whether it is the key's `null` version.
/// Every record from before versioning is number 0, the null version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionStamp {
    pub number: u64,
    pub null: bool,
    /// Object lock: the version's retention and legal hold.
    pub lock: ObjectLock,
}

/// A version's object lock (WORM): while it holds, no command removes the version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectLock {
    pub retention: Option<Retention>,
    pub legal_hold: bool,
}

/// Retention until an instant, in a mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    pub mode: LockMode,
    pub until_ms: u64,
}

impl ObjectLock {
    pub const NONE: ObjectLock = ObjectLock {
        retention: None,
        legal_hold: false,
    };

    /// Whether the lock keeps the version from being removed at `now_ms`.
    pub fn holds(&self, now_ms: u64, bypass_governance: bool) -> bool {
        self.legal_hold
            || self.retention.is_some_and(|r| {
                r.until_ms > now_ms && !(r.mode == LockMode::Governance && bypass_governance)
            })
    }

    /// Whether the retention may be replaced by `new` at `now_ms`: an active COMPLIANCE
    /// retention only extended (same mode, later or equal), an active GOVERNANCE one
    /// extended or, with the bypass, anything.
    pub fn may_set_retention(
        &self,
        new: Option<Retention>,
        now_ms: u64,
        bypass_governance: bool,
    ) -> bool {
        let Some(old) = self.retention.filter(|r| r.until_ms > now_ms) else {
            return true;
        };
        let extends = new.is_some_and(|n| n.mode == old.mode && n.until_ms >= old.until_ms);
        match old.mode {
            LockMode::Compliance => extends,
            LockMode::Governance => {
                extends
                    || bypass_governance
                    || new.is_some_and(|n| {
                        n.mode == LockMode::Compliance && n.until_ms >= old.until_ms
                    })
            }
        }
    }
}

impl DefaultRetention {
    /// The retention of a version written at `now_ms`.
    pub fn from(&self, now_ms: u64) -> Retention {
        let days = match self.period {
            RetentionPeriod::Days(d) => u64::from(d),
            RetentionPeriod::Years(y) => u64::from(y) * 365,
        };
        Retention {
            mode: self.mode,
            until_ms: now_ms.saturating_add(days.saturating_mul(86_400_000)),
        }
    }
}

impl VersionStamp {
    /// The stamp of every object of an unversioned bucket.
    pub const UNVERSIONED: VersionStamp = VersionStamp {
        number: 0,
        null: true,
        lock: ObjectLock::NONE,
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Its tags and canned ACL, where the read asked for them (none otherwise).
    pub tags: TagSet,
    pub acl: CannedAcl,
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
            tags: TagSet::default(),
            acl: CannedAcl::Private,
        }
    }

    /// The view with the version's tags and ACL.
    pub fn with_extras(self, extras: Extras) -> VersionView {
        VersionView {
            tags: extras.tags,
            acl: extras.acl,
            ..self
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
                tags: TagSet::default(),
                acl: CannedAcl::Private,
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
                tags: TagSet::default(),
                acl: CannedAcl::Private,
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
/// Format byte of a `versions` value with [`Extras`]: the record, then the items.
const VERSION_RECORD_WITH_EXTRAS: u8 = 2;
/// Format byte of an `objects` value with its stamp (a versioned bucket's current version);
/// 1 is a bare [`ObjectRecord`] with [`VersionStamp::UNVERSIONED`].
const CURRENT_WITH_STAMP: u8 = 2;
/// Format byte of an `objects` value with its stamp and [`Extras`] (of any bucket).
const CURRENT_WITH_EXTRAS: u8 = 3;

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
        self.encode_with(&Extras::NONE)
    }

    /// The value of a version with its extras (format 1 when it has none).
    pub fn encode_with(&self, extras: &Extras) -> Result<Vec<u8>, MetaError> {
        if extras.is_empty() {
            let mut out = vec![VERSION_RECORD_V1];
            out.extend(postcard::to_stdvec(self).map_err(|e| corrupt("versions", e))?);
            return Ok(out);
        }
        let mut out = vec![VERSION_RECORD_WITH_EXTRAS];
        out.extend(
            postcard::to_stdvec(&(self, extras.items())).map_err(|e| corrupt("versions", e))?,
        );
        Ok(out)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, MetaError> {
        Self::decode_with(bytes).map(|(record, _)| record)
    }

    /// A `versions` value of either format, with its extras.
    pub fn decode_with(bytes: &[u8]) -> Result<(Self, Extras), MetaError> {
        match bytes.split_first() {
            Some((&VERSION_RECORD_V1, rest)) => Ok((
                postcard::from_bytes(rest).map_err(|e| corrupt("versions", e))?,
                Extras::default(),
            )),
            Some((&VERSION_RECORD_WITH_EXTRAS, rest)) => {
                let (record, items): (VersionRecord, Vec<Extra>) =
                    postcard::from_bytes(rest).map_err(|e| corrupt("versions", e))?;
                Ok((record, Extras::from_items(items)))
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

/// An `objects` value with the version's extras: [`encode_current`]'s bytes when it has
/// none.
pub fn encode_current_with(
    record: &ObjectRecord,
    stamp: VersionStamp,
    extras: &Extras,
) -> Result<Vec<u8>, MetaError> {
    if extras.is_empty() {
        return encode_current(record, stamp);
    }
    let mut out = vec![CURRENT_WITH_EXTRAS];
    out.extend(
        postcard::to_stdvec(&(record, stamp, extras.items())).map_err(|e| corrupt("objects", e))?,
    );
    Ok(out)
}

/// Reads an `objects` value of any format.
pub fn decode_current(bytes: &[u8]) -> Result<(ObjectRecord, VersionStamp), MetaError> {
    decode_current_with(bytes).map(|(record, stamp, _)| (record, stamp))
}

/// Reads an `objects` value of any format, with the version's extras.
pub fn decode_current_with(
    bytes: &[u8],
) -> Result<(ObjectRecord, VersionStamp, Extras), MetaError> {
    match bytes.split_first() {
        Some((&CURRENT_WITH_STAMP, rest)) => {
            let (record, stamp) = postcard::from_bytes(rest).map_err(|e| corrupt("objects", e))?;
            Ok((record, stamp, Extras::default()))
        }
        Some((&CURRENT_WITH_EXTRAS, rest)) => {
            let (record, stamp, items): (ObjectRecord, VersionStamp, Vec<Extra>) =
                postcard::from_bytes(rest).map_err(|e| corrupt("objects", e))?;
            Ok((record, stamp, Extras::from_items(items)))
        }
        _ => Ok((
            crate::tables::decode_versioned("objects", bytes)?,
            VersionStamp::UNVERSIONED,
            Extras::default(),
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
            lock: ObjectLock::NONE,
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
    fn locks_hold_as_s3_says() {
        let r = |mode, until_ms| Some(Retention { mode, until_ms });
        let gov = ObjectLock {
            retention: r(LockMode::Governance, 100),
            legal_hold: false,
        };
        assert!(gov.holds(99, false));
        assert!(!gov.holds(99, true), "GOVERNANCE yields to the bypass");
        assert!(!gov.holds(100, false), "expired");
        let comp = ObjectLock {
            retention: r(LockMode::Compliance, 100),
            legal_hold: false,
        };
        assert!(comp.holds(99, true), "COMPLIANCE yields to nothing");
        let hold = ObjectLock {
            retention: None,
            legal_hold: true,
        };
        assert!(hold.holds(u64::MAX, true));
        // Retention changes: COMPLIANCE only extended; GOVERNANCE extended, made
        // COMPLIANCE, or anything with the bypass; an expired one anything.
        assert!(comp.may_set_retention(r(LockMode::Compliance, 200), 50, false));
        assert!(!comp.may_set_retention(r(LockMode::Compliance, 90), 50, true));
        assert!(!comp.may_set_retention(r(LockMode::Governance, 200), 50, true));
        assert!(!comp.may_set_retention(None, 50, true));
        assert!(comp.may_set_retention(None, 150, false));
        assert!(gov.may_set_retention(r(LockMode::Governance, 200), 50, false));
        assert!(gov.may_set_retention(r(LockMode::Compliance, 100), 50, false));
        assert!(!gov.may_set_retention(None, 50, false));
        assert!(gov.may_set_retention(None, 50, true));
        let default = DefaultRetention {
            mode: LockMode::Governance,
            period: RetentionPeriod::Years(1),
        };
        assert_eq!(default.from(5).until_ms, 5 + 365 * 86_400_000);
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
            lock: ObjectLock::NONE,
        };
        let bytes = encode_current(&r, stamp).unwrap();
        assert_eq!(bytes[0], CURRENT_WITH_STAMP);
        assert_eq!(decode_current(&bytes).unwrap(), (r.clone(), stamp));
        // A locked version keeps its lock through its bytes.
        let locked = VersionStamp {
            lock: ObjectLock {
                retention: Some(Retention {
                    mode: LockMode::Compliance,
                    until_ms: 99,
                }),
                legal_hold: true,
            },
            ..stamp
        };
        let bytes = encode_current(&r, locked).unwrap();
        assert_eq!(decode_current(&bytes).unwrap(), (r, locked));
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
                lock: ObjectLock::NONE,
            },
            noncurrent_since_ms: 1_700_000_000_000,
        };
        let marker = VersionRecord::DeleteMarker {
            stamp: VersionStamp {
                number: 5,
                null: true,
                lock: ObjectLock::NONE,
            },
            created_ms: 1_700_000_000_001,
            magic: Magic::new(77).unwrap(),
        };
        for v in [object, marker] {
            assert_eq!(VersionRecord::decode(&v.encode().unwrap()).unwrap(), v);
        }
        assert!(matches!(
            VersionRecord::decode(&[9, 0]),
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

    #[test]
    fn extras_travel_beside_the_record_and_only_when_set() {
        use crate::tags::Tag;
        let r = record();
        let extras = Extras {
            tags: TagSet(vec![Tag::new("a", "1"), Tag::new("b", "")]),
            acl: CannedAcl::PublicRead,
        };
        // None: the formats before extras, byte for byte.
        for stamp in [
            VersionStamp::UNVERSIONED,
            VersionStamp {
                number: 2,
                null: false,
                lock: ObjectLock::NONE,
            },
        ] {
            assert_eq!(
                encode_current_with(&r, stamp, &Extras::NONE).unwrap(),
                encode_current(&r, stamp).unwrap()
            );
            let bytes = encode_current_with(&r, stamp, &extras).unwrap();
            assert_eq!(bytes[0], CURRENT_WITH_EXTRAS);
            assert_eq!(
                decode_current_with(&bytes).unwrap(),
                (r.clone(), stamp, extras.clone())
            );
            assert_eq!(decode_current(&bytes).unwrap(), (r.clone(), stamp));
            assert_eq!(decode_object(&bytes).unwrap(), r);
        }
        let entry = VersionRecord::Object {
            record: Box::new(r),
            stamp: VersionStamp {
                number: 4,
                null: true,
                lock: ObjectLock::NONE,
            },
            noncurrent_since_ms: 5,
        };
        assert_eq!(
            entry.encode_with(&Extras::NONE).unwrap(),
            entry.encode().unwrap()
        );
        let bytes = entry.encode_with(&extras).unwrap();
        assert_eq!(bytes[0], VERSION_RECORD_WITH_EXTRAS);
        assert_eq!(
            VersionRecord::decode_with(&bytes).unwrap(),
            (entry.clone(), extras)
        );
        assert_eq!(VersionRecord::decode(&bytes).unwrap(), entry);
        assert!(decode_current_with(&[CURRENT_WITH_EXTRAS, 0]).is_err());
    }
}
