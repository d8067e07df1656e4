//! FileDB: one record per distinct content, and the article's reference rules on it.
//!
//! The rules are pure functions on a [`FileRecord`] (no redb, no clock): [`FileRecord::inc`],
//! [`FileRecord::dec`], [`insert_or_inc`] and [`FileRecord::is_deletable`]. `apply` reads a
//! record, asks these what becomes of it, and moves it in or out of the `files` and
//! `deleting` tables; it does no arithmetic of its own. Every record is checked
//! ([`FileRecord::check`]) right after it is decoded and right before it is encoded, so a
//! corrupt record is an error ([`MetaError::Corrupt`]) on both sides of the disk, never a
//! panic and never a silent deletion.
//!
//! The rules, kept exactly as the article has them:
//! - every reference carries a random non-zero 32-bit magic ([`Magic`] cannot be zero);
//!   `inc` adds it to the record's sum and `dec` subtracts it, both wrapping;
//! - `dec` to refs 0 and magic 0: the content is deletable, the record moves to `deleting`;
//! - refs 0 with a magic that is not 0, or a `dec` below zero: some reference was removed
//!   twice or with the wrong magic, so the record stays and gets `DO_NOT_DELETE`, for good;
//! - `inc` on absent content is `NotFound` (the caller then uploads); the end of an upload
//!   is "insert or increment", so two loaders racing on the same content both succeed.
//!
//! Back of the envelope (FileDB is the table that grows with every distinct attachment):
//! key 20 bytes (SHA-1) + value 16 bytes (refs, magic, flags, pair as little-endian u32s)
//! = 36 bytes of payload per record, as in the article's Tarantool space0. redb's B-tree
//! leaf adds a few bytes of offsets per entry and pages are not full after random inserts,
//! so the target is at most 64 bytes per file on disk, against the 69 bytes of RAM per file
//! Tarantool needed: 1 billion distinct files is about 64 GB of FileDB per replica. The
//! record is fixed-size with no serde so that reading one costs a copy, not a parse.

use placement::{Magic, PairId, Sha1};
use serde::{Deserialize, Serialize};

use crate::MetaError;

/// A file's reference arithmetic went wrong: never delete it automatically. Sticky: no
/// later `inc` or `dec` clears it, even one that brings the sums back to zero.
pub const FLAG_DO_NOT_DELETE: u32 = 1;

/// Every flag bit a record may carry; any other bit set means the record is corrupt.
const FLAGS_KNOWN: u32 = FLAG_DO_NOT_DELETE;

/// What a `dec` did to the content's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DecOutcome {
    /// References remain.
    Live { refs: u32 },
    /// refs and magic both reached zero: the record moved to `deleting`.
    Deleting,
    /// refs is zero (or went below it) but the magic is not: DO_NOT_DELETE is set and the
    /// record stays; the content is never deleted automatically.
    DoNotDelete { refs: u32, magic: u32 },
    /// The record was not found (only reported for the replaced/deleted object's content,
    /// where it means an inconsistency surfaced to the operator, not a client error).
    Missing,
    /// The content lives in another group: the dec waits in this group's outbox and is
    /// applied there later (`outbox.rs`).
    Outbox,
}

/// One FileDB record. On disk: refs, magic, flags, pair as little-endian u32s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    pub refs: u32,
    /// Wrapping sum of the magics of the live references.
    pub magic: u32,
    pub flags: u32,
    pub pair: PairId,
}

/// A broken invariant of a FileDB record (see [`FileRecord::check`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// A record whose references are all gone is either moved to `deleting` (magic 0) or
    /// flagged (magic not 0): `dec` never leaves one in `files` unflagged.
    #[error("refs 0 (magic {magic}) without DO_NOT_DELETE")]
    ZeroRefsUnflagged { magic: u32 },
    #[error("unknown flag bits {bits:#x}")]
    UnknownFlags { bits: u32 },
}

impl FileRecord {
    /// The record of content just stored on `pair`, holding its first reference.
    pub fn first(magic: Magic, pair: PairId) -> Self {
        FileRecord {
            refs: 1,
            magic: magic.get(),
            flags: 0,
            pair,
        }
    }

    /// The on-disk bytes. Writers go through [`FileRecord::encode_checked`].
    pub fn encode(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[0..4].copy_from_slice(&self.refs.to_le_bytes());
        out[4..8].copy_from_slice(&self.magic.to_le_bytes());
        out[8..12].copy_from_slice(&self.flags.to_le_bytes());
        out[12..16].copy_from_slice(&self.pair.0.to_le_bytes());
        out
    }

    /// The record in its on-disk bytes, unchecked (any 16 bytes decode). Readers that act
    /// on the record go through [`FileRecord::decode_checked`].
    pub fn decode(b: &[u8; 16]) -> Self {
        let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        FileRecord {
            refs: word(0),
            magic: word(4),
            flags: word(8),
            pair: PairId(word(12)),
        }
    }

    /// Decodes the stored record of `sha1` and checks it.
    pub fn decode_checked(sha1: &Sha1, b: &[u8; 16]) -> Result<Self, MetaError> {
        let rec = FileRecord::decode(b);
        rec.check().map_err(|e| corrupt(sha1, e))?;
        Ok(rec)
    }

    /// Checks the record of `sha1` and encodes it.
    pub fn encode_checked(&self, sha1: &Sha1) -> Result<[u8; 16], MetaError> {
        self.check().map_err(|e| corrupt(sha1, e))?;
        Ok(self.encode())
    }

    /// The invariants every record kept in `files` holds, whatever happened to it.
    ///
    /// Not checked, because they are not invariants: a live record's magic may sum to 0
    /// (one chance in 2^32), and `pair` is checked against PairDB by its readers.
    pub fn check(&self) -> Result<(), Invalid> {
        if self.flags & !FLAGS_KNOWN != 0 {
            return Err(Invalid::UnknownFlags {
                bits: self.flags & !FLAGS_KNOWN,
            });
        }
        if self.refs == 0 && !self.do_not_delete() {
            return Err(Invalid::ZeroRefsUnflagged { magic: self.magic });
        }
        Ok(())
    }

    pub fn do_not_delete(&self) -> bool {
        self.flags & FLAG_DO_NOT_DELETE != 0
    }

    /// Whether the content may go to `deleting`: every reference removed, each with the
    /// magic it was added with, and the record never flagged.
    pub fn is_deletable(&self) -> bool {
        self.refs == 0 && self.magic == 0 && !self.do_not_delete()
    }

    /// The article's `inc`: one more reference with `magic`. On overflow of the count the
    /// record is unchanged.
    pub fn inc(&mut self, magic: Magic) -> Result<(), MetaError> {
        self.refs = self.refs.checked_add(1).ok_or(MetaError::RefsOverflow)?;
        self.magic = self.magic.wrapping_add(magic.get());
        Ok(())
    }

    /// The article's `dec`: one reference with `magic` fewer. With
    /// [`DecOutcome::Deleting`] the record [`is_deletable`](Self::is_deletable) and
    /// belongs in `deleting`; otherwise it stays in `files` as it now is.
    pub fn dec(&mut self, magic: Magic) -> DecOutcome {
        self.magic = self.magic.wrapping_sub(magic.get());
        if self.refs == 0 {
            // A dec below zero: some reference was removed twice.
            self.flags |= FLAG_DO_NOT_DELETE;
            return DecOutcome::DoNotDelete {
                refs: 0,
                magic: self.magic,
            };
        }
        self.refs -= 1;
        if self.refs > 0 {
            return DecOutcome::Live { refs: self.refs };
        }
        if self.is_deletable() {
            return DecOutcome::Deleting;
        }
        self.flags |= FLAG_DO_NOT_DELETE;
        DecOutcome::DoNotDelete {
            refs: 0,
            magic: self.magic,
        }
    }
}

/// The end of the article's `upload`: the record of content just stored on `pair`, or, if
/// a racing loader recorded it first, that record incremented (its pair wins).
pub fn insert_or_inc(
    current: Option<FileRecord>,
    magic: Magic,
    pair: PairId,
) -> Result<FileRecord, MetaError> {
    match current {
        Some(mut rec) => {
            rec.inc(magic)?;
            Ok(rec)
        }
        None => Ok(FileRecord::first(magic, pair)),
    }
}

fn corrupt(sha1: &Sha1, e: Invalid) -> MetaError {
    MetaError::Corrupt(format!("files/{sha1}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(v: u32) -> Magic {
        Magic::new(v).unwrap()
    }

    fn first(magic: u32) -> FileRecord {
        FileRecord::first(m(magic), PairId(0))
    }

    #[test]
    fn records_round_trip_in_16_bytes() {
        let r = FileRecord {
            refs: 2,
            magic: 468,
            flags: FLAG_DO_NOT_DELETE,
            pair: PairId(7),
        };
        assert_eq!(FileRecord::decode(&r.encode()), r);
        let sha1 = Sha1([1; 20]);
        let bytes = r.encode_checked(&sha1).unwrap();
        assert_eq!(FileRecord::decode_checked(&sha1, &bytes).unwrap(), r);
    }

    #[test]
    fn the_articles_worked_example() {
        let mut rec = first(345);
        rec.inc(m(123)).unwrap();
        assert_eq!((rec.refs, rec.magic, rec.flags), (2, 468, 0));
        // The second email is deleted twice.
        assert_eq!(rec.dec(m(123)), DecOutcome::Live { refs: 1 });
        assert_eq!(
            rec.dec(m(123)),
            DecOutcome::DoNotDelete {
                refs: 0,
                magic: 222
            }
        );
        // Then the first: magic -123, still flagged, still kept.
        assert_eq!(
            rec.dec(m(345)),
            DecOutcome::DoNotDelete {
                refs: 0,
                magic: 123u32.wrapping_neg()
            }
        );
        assert!(rec.do_not_delete());
        assert!(!rec.is_deletable());
        assert_eq!(rec.check(), Ok(()));
    }

    #[test]
    fn exact_decs_make_the_content_deletable() {
        let mut rec = first(345);
        rec.inc(m(123)).unwrap();
        assert_eq!(rec.dec(m(123)), DecOutcome::Live { refs: 1 });
        assert!(!rec.is_deletable());
        assert_eq!(rec.dec(m(345)), DecOutcome::Deleting);
        assert!(rec.is_deletable());
        assert_eq!((rec.refs, rec.magic, rec.flags), (0, 0, 0));
    }

    #[test]
    fn a_dec_below_zero_flags_the_record_and_keeps_refs_at_zero() {
        let mut rec = first(5);
        // A wrong magic: refs 0, magic 5 - 7, flagged.
        assert_eq!(
            rec.dec(m(7)),
            DecOutcome::DoNotDelete {
                refs: 0,
                magic: 5u32.wrapping_sub(7)
            }
        );
        // Below zero: the count does not wrap, the magic does.
        assert_eq!(
            rec.dec(m(1)),
            DecOutcome::DoNotDelete {
                refs: 0,
                magic: 5u32.wrapping_sub(8)
            }
        );
        assert_eq!(rec.refs, 0);
        assert!(rec.do_not_delete());
    }

    #[test]
    fn do_not_delete_is_sticky_even_when_the_sums_recover() {
        let mut rec = first(10);
        // A wrong magic: refs 0, magic 10 - 7 = 3.
        assert!(matches!(rec.dec(m(7)), DecOutcome::DoNotDelete { .. }));
        // A new reference whose magic happens to cancel, then its exact removal.
        rec.inc(m(u32::MAX - 2)).unwrap();
        assert_eq!(
            rec.dec(m(u32::MAX - 2)),
            DecOutcome::DoNotDelete { refs: 0, magic: 3 }
        );
        rec.inc(m(4)).unwrap();
        assert!(matches!(rec.dec(m(7)), DecOutcome::DoNotDelete { .. }));
        assert_eq!((rec.refs, rec.magic), (0, 0));
        assert!(rec.do_not_delete());
        assert!(!rec.is_deletable());
    }

    #[test]
    fn magic_arithmetic_wraps() {
        let mut rec = first(u32::MAX);
        rec.inc(m(2)).unwrap();
        assert_eq!((rec.refs, rec.magic), (2, 1));
        assert_eq!(rec.dec(m(2)), DecOutcome::Live { refs: 1 });
        assert_eq!(rec.dec(m(u32::MAX)), DecOutcome::Deleting);
    }

    #[test]
    fn inc_refuses_to_overflow_and_changes_nothing() {
        let mut rec = FileRecord {
            refs: u32::MAX,
            ..first(1)
        };
        let before = rec;
        assert!(matches!(rec.inc(m(9)), Err(MetaError::RefsOverflow)));
        assert_eq!(rec, before);
    }

    #[test]
    fn insert_or_inc_inserts_once_and_the_first_pair_wins() {
        let rec = insert_or_inc(None, m(11), PairId(3)).unwrap();
        assert_eq!(rec, FileRecord::first(m(11), PairId(3)));
        let rec = insert_or_inc(Some(rec), m(22), PairId(4)).unwrap();
        assert_eq!((rec.refs, rec.magic, rec.pair), (2, 33, PairId(3)));
    }

    #[test]
    fn any_order_of_exact_decs_ends_deletable() {
        // Magics chosen to wrap; the sum is order-independent.
        let magics = [u32::MAX, 7, 1 << 31, 12345, (1 << 31) + 1, 3];
        let mut rec = first(magics[0]);
        for &v in &magics[1..] {
            rec.inc(m(v)).unwrap();
        }
        for (i, &v) in magics.iter().rev().enumerate() {
            let outcome = rec.dec(m(v));
            if i + 1 < magics.len() {
                assert!(matches!(outcome, DecOutcome::Live { .. }));
            } else {
                assert_eq!(outcome, DecOutcome::Deleting);
            }
        }
    }

    #[test]
    fn check_refuses_what_no_rule_produces() {
        let sha1 = Sha1([2; 20]);
        let unflagged = FileRecord {
            refs: 0,
            magic: 0,
            flags: 0,
            pair: PairId(1),
        };
        assert_eq!(
            unflagged.check(),
            Err(Invalid::ZeroRefsUnflagged { magic: 0 })
        );
        assert!(matches!(
            unflagged.encode_checked(&sha1),
            Err(MetaError::Corrupt(_))
        ));
        assert!(matches!(
            FileRecord::decode_checked(&sha1, &unflagged.encode()),
            Err(MetaError::Corrupt(_))
        ));
        let odd_flags = FileRecord {
            flags: 0x80 | FLAG_DO_NOT_DELETE,
            ..first(1)
        };
        assert_eq!(odd_flags.check(), Err(Invalid::UnknownFlags { bits: 0x80 }));
        // Every rule's result passes.
        let mut rec = first(1);
        assert_eq!(rec.check(), Ok(()));
        rec.dec(m(2));
        assert_eq!(rec.check(), Ok(()));
        // Arbitrary bytes are an error or a record, never a panic.
        for b in [[0u8; 16], [0xff; 16]] {
            let _ = FileRecord::decode_checked(&sha1, &b);
        }
    }
}
