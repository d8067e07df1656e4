//! The index group's side of cross-group references (`docs/scaling.md`, section 3): which
//! references held under a key were taken in another group, the decs still owed to those
//! groups, and the fences that keep an orphaned reference's entry from ever being written.
//!
//! A PUT whose content lives in another FileDB group takes its reference there first
//! (`RefInc`, under a random `ref_id`), then writes its entry here under
//! [`Command::ForeignRef`](crate::Command::ForeignRef), which records the ref_id beside the
//! entry ([`OBJECT_REF_IDS`], [`PART_REF_IDS`]) and in [`HELD`]. Removing such an entry
//! (overwrite, delete, abort, completion) moves the reference to [`OUTBOX`] in the same
//! transaction; the index leader sends the outbox's decs to their groups (`DecBatch`) and
//! then drops the rows (`OutboxDone`). A ref_id exists only for references that cross
//! groups, so every record a single group writes stays the bytes it was, and the tables
//! here stay empty.
//!
//! An entry written before its sha1's range moved to another group has no ref_id; its dec
//! goes out under one derived from the entry ([`derived_object_ref`], [`derived_part_ref`]),
//! with the top bit set, which no taken reference has (`ForeignRef` refuses it). Its inc
//! never had a `ref_log` row, so that dec is its first.
//!
//! The reconciler of a FileDB group asks about a reference left pending past its deadline
//! with `Fence`: "present" if it is [`HELD`] or in the [`OUTBOX`] under its key (the entry
//! was written); otherwise a row in [`FENCES`] refuses the entry forever after, so that the
//! reconciler may release the reference. Fences are kept [`FENCE_KEEP_MS`], far past any
//! deadline.
//!
//! Every key is under (bucket, key), so that a range split moves these rows with their
//! entries (parts are under their upload, as `parts` is).

use placement::Magic;
use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use crate::MetaError;

/// (bucket, key, ref_id) -> (sha1, magic): decs owed to FileDB groups.
pub const OUTBOX: TableDefinition<(&str, &[u8], u64), [u8; 24]> = TableDefinition::new("outbox");
/// (bucket, key, ref_id): the cross-group references the entries and parts of a key hold.
pub const HELD: TableDefinition<(&str, &[u8], u64), ()> = TableDefinition::new("held_refs");
/// (bucket, key, seq) -> ref_id of an object version whose reference crosses groups.
pub const OBJECT_REF_IDS: TableDefinition<(&str, &[u8], u64), u64> =
    TableDefinition::new("object_ref_ids");
/// (upload_id, part number) -> ref_id of a part whose reference crosses groups.
pub const PART_REF_IDS: TableDefinition<(&str, u32), u64> = TableDefinition::new("part_ref_ids");
/// (bucket, key, ref_id) -> when fenced (ms): an entry that must never be written.
pub const FENCES: TableDefinition<(&str, &[u8], u64), u64> = TableDefinition::new("fences");
/// The fences by age, (fenced_ms, bucket, key, ref_id), for the expiry to read from the
/// front without a scan.
pub const FENCE_AGES: TableDefinition<(u64, &str, &[u8], u64), ()> =
    TableDefinition::new("fence_ages");

/// The bit no taken ref_id has: set on the ids derived for entries that never had one.
pub const DERIVED: u64 = 1 << 63;

/// How long a fence is kept: a week, far past any reference's deadline (minutes), so that
/// no late `ForeignRef` can arrive after it.
pub const FENCE_KEEP_MS: u64 = 7 * 24 * 3600 * 1000;

/// The ref_id an object version without one is released under: its `seq`, unique in its
/// group.
pub fn derived_object_ref(seq: u64) -> u64 {
    DERIVED | seq
}

/// The ref_id a part without one is released under: from its upload id and number.
pub fn derived_part_ref(upload_id: &str, number: u32) -> u64 {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    h.update(upload_id.as_bytes());
    h.update(number.to_be_bytes());
    let d = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    DERIVED | (u64::from_be_bytes(first) >> 1)
}

/// One dec the outbox owes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxEntry {
    pub bucket: String,
    pub key: String,
    pub ref_id: u64,
    pub sha1: [u8; 20],
    pub magic: Magic,
}

impl OutboxEntry {
    /// The dec this row owes, as its FileDB group takes it.
    pub fn dec(&self) -> crate::ref_log::RefDec {
        crate::ref_log::RefDec {
            sha1: self.sha1,
            ref_id: self.ref_id,
            magic: self.magic,
        }
    }

    /// The row, as `OutboxDone` names it.
    pub fn row(&self) -> OutboxRow {
        OutboxRow {
            bucket: self.bucket.clone(),
            key: self.key.clone(),
            ref_id: self.ref_id,
        }
    }
}

/// One row `OutboxDone` drops: its dec was applied in its FileDB group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxRow {
    pub bucket: String,
    pub key: String,
    pub ref_id: u64,
}

/// What `Fence` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FenceOutcome {
    /// The reference is an entry's or a part's, or its dec is in the outbox: keep it.
    Present,
    /// It is none of those, and now never will be: release it.
    Fenced,
}

pub fn encode_value(sha1: &[u8; 20], magic: Magic) -> [u8; 24] {
    let mut out = [0u8; 24];
    out[..20].copy_from_slice(sha1);
    out[20..].copy_from_slice(&magic.get().to_be_bytes());
    out
}

pub fn decode_value(v: &[u8; 24]) -> Result<([u8; 20], Magic), MetaError> {
    let mut sha1 = [0u8; 20];
    sha1.copy_from_slice(&v[..20]);
    let mut m = [0u8; 4];
    m.copy_from_slice(&v[20..]);
    let magic = Magic::new(u32::from_be_bytes(m))
        .map_err(|_| MetaError::Corrupt("outbox row with a zero magic".into()))?;
    Ok((sha1, magic))
}

/// The outbox's first `limit` rows, in (bucket, key, ref_id) order: the drain reads the
/// front, and a row leaves once its dec was applied.
pub fn read_front(
    table: &impl ReadableTable<(&'static str, &'static [u8], u64), [u8; 24]>,
    limit: usize,
) -> Result<Vec<OutboxEntry>, MetaError> {
    let mut out = Vec::new();
    for row in table.iter()?.take(limit) {
        let (k, v) = row?;
        let (bucket, key, ref_id) = k.value();
        let (sha1, magic) = decode_value(&v.value())?;
        out.push(OutboxEntry {
            bucket: bucket.to_string(),
            key: String::from_utf8(key.to_vec())
                .map_err(|_| MetaError::Corrupt("outbox key is not UTF-8".into()))?,
            ref_id,
            sha1,
            magic,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_derived_ids_never_look_taken() {
        let magic = Magic::new(0xdead_beef).unwrap();
        let sha1 = [7u8; 20];
        assert_eq!(
            decode_value(&encode_value(&sha1, magic)).unwrap(),
            (sha1, magic)
        );
        let mut zero = encode_value(&sha1, magic);
        zero[20..].copy_from_slice(&[0; 4]);
        assert!(decode_value(&zero).is_err());
        assert_ne!(derived_object_ref(5) & DERIVED, 0);
        assert_ne!(derived_part_ref("u", 1) & DERIVED, 0);
        assert_ne!(derived_part_ref("u", 1), derived_part_ref("u", 2));
        assert_ne!(derived_part_ref("u", 1), derived_part_ref("v", 1));
    }
}
