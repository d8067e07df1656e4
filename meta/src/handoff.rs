//! A FileDB group handing sha1 intervals to a new group in a split (`docs/scaling.md`,
//! section 4), and the rows that move.
//!
//! A split of FileDB group G at a sha1 gives the upper part of one of G's intervals to a
//! new group H. The rows move by copy, in this order, each step idempotent so that the
//! driver (root's leader) can run it again after any crash:
//!
//! 1. `SetOwnership` in H: H owns the interval of the planned map (nobody routes to H
//!    yet: the committed map does not name it).
//! 2. `HandOff` in G: G owns only its part of the planned map and refuses every write of
//!    the interval (`Moved`), but keeps its rows and goes on answering reads of them: with
//!    no write applied to them they are exactly what H receives.
//! 3. The copy: pages of G's rows ([`RowTable`], read by any replica of G after its read
//!    barrier) go to H in bounded `Ingest` commands; then `Seal` in H, after which H
//!    takes no `Ingest`: a driver that lost root's leadership in the middle of its copy
//!    cannot write stale rows over what H has applied since the commit (every copy
//!    before the seal is of the same frozen rows).
//! 4. `EndHandOff` in G: reads of the interval are `Moved` too, and G may drop the rows.
//! 5. Root commits the planned map: gateways route the interval to H.
//! 6. G's leader drops the rows in bounded `DropHandedOff` batches; the last removes the
//!    hand-off row.
//!
//! Writes of the interval wait from step 2 to step 5 (the copy's length); reads only from
//! step 4 to step 5 (two commands).
//!
//! An index group's split moves (bucket, key) intervals the same way: the hand-off row
//! names them too, and their rows are [`crate::index_handoff`]'s.
//!
//! The hand-off is a second row of the `ownership` table, so that it travels in
//! snapshots and joins the digest with the ownership itself. Record format: a format
//! byte, then postcard. Format 1 ([`crate::tables::encode_versioned`]) holds sha1
//! intervals only; format 2 (metadata format 10) adds the key intervals and where the
//! drop of their uploads has come to, and is written only when key intervals are handed
//! off, so a FileDB split's row stays what it was.

use placement::Sha1;
use redb::{ReadTransaction, ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::MetaError;
use crate::native_refs::{NATIVE_REFS, NativeRefs};
use crate::ownership::{KeyInterval, OWNERSHIP};
use crate::ref_log::{REF_LOG, RefState};
use crate::tables::{DELETING, DeletingRecord, FILES, FileRecord};

/// The key of the hand-off row in the `ownership` table.
const KEY: &str = "handoff";
/// The key of the seal in the `ownership` table of a group that received a split's rows.
const SEALED: &str = "sealed";

/// Bound on the rows of one page read and of one `Ingest`, and on the rows one
/// `DropHandedOff` removes: bounded transactions, so that foreground writes behind them
/// in the log wait little.
pub const ROWS_MAX: u32 = 1024;

/// Sha1 intervals `[start, end)`, ascending; an `end` of None runs to the top.
pub type Intervals = Vec<([u8; 20], Option<[u8; 20]>)>;

/// The intervals a group handed off and whose rows it still holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandOff {
    /// The planned map's version, which the group owns under since the hand-off.
    pub map_version: u64,
    pub sha1: Intervals,
    /// Whether reads of the intervals are still answered here (until `EndHandOff`).
    pub readable: bool,
    /// The (bucket, key) intervals handed off (an index split), ascending.
    pub keys: Vec<KeyInterval>,
    /// The last upload the drop of the key intervals' rows has gone past (the uploads
    /// table is keyed by id, not by key: the drop walks it once, in id order).
    pub uploads_dropped_to: Option<String>,
}

/// Format 1 of the row: sha1 intervals only.
#[derive(Serialize, Deserialize)]
struct HandOffV1 {
    map_version: u64,
    sha1: Intervals,
    readable: bool,
}

/// Format byte of a row with key intervals.
const HANDOFF_V2: u8 = 2;

impl HandOff {
    pub fn contains(&self, sha1: &[u8; 20]) -> bool {
        within(&self.sha1, sha1)
    }

    /// Whether (`bucket`, `key`) lies in a handed-off key interval whose rows are still
    /// read here.
    pub fn reads_key(&self, bucket: &str, key: &[u8]) -> bool {
        self.readable && crate::ownership::keys_within(&self.keys, bucket, key)
    }

    pub fn encode(&self) -> Result<Vec<u8>, MetaError> {
        if self.keys.is_empty() && self.uploads_dropped_to.is_none() {
            return crate::tables::encode_versioned(&HandOffV1 {
                map_version: self.map_version,
                sha1: self.sha1.clone(),
                readable: self.readable,
            });
        }
        let mut out = vec![HANDOFF_V2];
        out.extend(postcard::to_stdvec(self).map_err(|e| MetaError::Corrupt(e.to_string()))?);
        Ok(out)
    }

    pub fn decode(bytes: &[u8]) -> Result<HandOff, MetaError> {
        match bytes.split_first() {
            Some((&HANDOFF_V2, rest)) => postcard::from_bytes(rest)
                .map_err(|e| MetaError::Corrupt(format!("ownership/handoff: {e}"))),
            _ => {
                let v1: HandOffV1 = crate::tables::decode_versioned("ownership/handoff", bytes)?;
                Ok(HandOff {
                    map_version: v1.map_version,
                    sha1: v1.sha1,
                    readable: v1.readable,
                    keys: Vec::new(),
                    uploads_dropped_to: None,
                })
            }
        }
    }
}

/// Whether `sha1` lies in one of `intervals`.
pub fn within(intervals: &[([u8; 20], Option<[u8; 20]>)], sha1: &[u8; 20]) -> bool {
    intervals
        .iter()
        .any(|(start, end)| start <= sha1 && end.is_none_or(|end| sha1 < &end))
}

/// The stored hand-off, if one is under way.
pub fn read(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<Option<HandOff>, MetaError> {
    table
        .get(KEY)?
        .map(|v| HandOff::decode(v.value()))
        .transpose()
}

pub(crate) fn read_in(txn: &WriteTransaction) -> Result<Option<HandOff>, MetaError> {
    read(&txn.open_table(OWNERSHIP)?)
}

pub(crate) fn write(txn: &WriteTransaction, handoff: Option<&HandOff>) -> Result<(), MetaError> {
    let mut table = txn.open_table(OWNERSHIP)?;
    match handoff {
        Some(h) => {
            table.insert(KEY, h.encode()?.as_slice())?;
        }
        None => {
            table.remove(KEY)?;
        }
    }
    Ok(())
}

/// The planned map's version under which the group's copy was sealed, if it was (see
/// `Command::Seal`).
pub fn sealed(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<Option<u64>, MetaError> {
    table
        .get(SEALED)?
        .map(|v| crate::tables::decode_versioned("ownership/sealed", v.value()))
        .transpose()
}

pub(crate) fn seal(txn: &WriteTransaction, map_version: u64) -> Result<(), MetaError> {
    txn.open_table(OWNERSHIP)?.insert(
        SEALED,
        crate::tables::encode_versioned(&map_version)?.as_slice(),
    )?;
    Ok(())
}

/// The tables whose rows move with their sha1 in a split.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RowTable {
    Files,
    Deleting,
    NativeRefs,
    RefLog,
}

impl RowTable {
    pub const ALL: [RowTable; 4] = [
        RowTable::Files,
        RowTable::Deleting,
        RowTable::NativeRefs,
        RowTable::RefLog,
    ];
}

/// One row that moves with its sha1, typed as its table stores it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileRow {
    File {
        sha1: Sha1,
        record: FileRecord,
    },
    Deleting {
        sha1: Sha1,
        record: DeletingRecord,
    },
    NativeRefs {
        sha1: Sha1,
        count: u32,
        magic: u32,
    },
    Ref {
        sha1: Sha1,
        ref_id: u64,
        state: RefState,
    },
}

impl FileRow {
    pub fn sha1(&self) -> Sha1 {
        match self {
            FileRow::File { sha1, .. }
            | FileRow::Deleting { sha1, .. }
            | FileRow::NativeRefs { sha1, .. }
            | FileRow::Ref { sha1, .. } => *sha1,
        }
    }

    /// Where a page that ended with this row goes on from.
    pub fn cursor(&self) -> RowCursor {
        match self {
            FileRow::Ref { sha1, ref_id, .. } => (sha1.0, *ref_id),
            other => (other.sha1().0, 0),
        }
    }
}

/// The last (sha1, ref_id) a page returned (ref_id 0 outside `ref_log`).
pub type RowCursor = ([u8; 20], u64);

/// The rows of `table` with a sha1 in `[start, end)` after `after`, at most `limit`
/// (capped at [`ROWS_MAX`]), in key order.
pub fn rows(
    txn: &ReadTransaction,
    table: RowTable,
    (start, end): ([u8; 20], Option<[u8; 20]>),
    after: Option<RowCursor>,
    limit: u32,
) -> Result<Vec<FileRow>, MetaError> {
    use std::ops::Bound;
    let limit = limit.clamp(1, ROWS_MAX) as usize;
    let from = |key: [u8; 20]| match after {
        Some((a, _)) if a >= key => Bound::Excluded(a),
        _ => Bound::Included(key),
    };
    let range = (from(start), end.map_or(Bound::Unbounded, Bound::Excluded));
    let mut out = Vec::new();
    match table {
        RowTable::Files => page(txn, FILES, range, limit, &mut out, |sha1, v| {
            let record = FileRecord::decode_checked(&sha1, &v)?;
            Ok(FileRow::File { sha1, record })
        })?,
        RowTable::Deleting => page(txn, DELETING, range, limit, &mut out, |sha1, v| {
            let record = DeletingRecord::decode(&v);
            Ok(FileRow::Deleting { sha1, record })
        })?,
        RowTable::NativeRefs => page(txn, NATIVE_REFS, range, limit, &mut out, |sha1, v| {
            let n = NativeRefs::decode(&v);
            Ok(FileRow::NativeRefs {
                sha1,
                count: n.count,
                magic: n.magic,
            })
        })?,
        // Its key is (sha1, ref_id): a page may end inside one sha1's references.
        RowTable::RefLog => {
            let lower = match after {
                Some(a) if a.0 >= start => Bound::Excluded(a),
                _ => Bound::Included((start, 0)),
            };
            let upper = end.map_or(Bound::Unbounded, |e| Bound::Excluded((e, 0)));
            for row in txn
                .open_table(REF_LOG)?
                .range::<([u8; 20], u64)>((lower, upper))?
            {
                let (k, v) = row?;
                let (sha1, ref_id) = k.value();
                out.push(FileRow::Ref {
                    sha1: Sha1(sha1),
                    ref_id,
                    state: RefState::decode(v.value())?,
                });
                if out.len() >= limit {
                    break;
                }
            }
        }
    }
    Ok(out)
}

/// Appends to `out` the rows of a table keyed by sha1 in `range`, each made by `row` from
/// its sha1 and value, until `out` holds `limit`.
fn page<const N: usize>(
    txn: &ReadTransaction,
    table: redb::TableDefinition<[u8; 20], [u8; N]>,
    range: (std::ops::Bound<[u8; 20]>, std::ops::Bound<[u8; 20]>),
    limit: usize,
    out: &mut Vec<FileRow>,
    row: impl Fn(Sha1, [u8; N]) -> Result<FileRow, MetaError>,
) -> Result<(), MetaError> {
    for entry in txn.open_table(table)?.range::<[u8; 20]>(range)? {
        if out.len() >= limit {
            break;
        }
        let (k, v) = entry?;
        out.push(row(Sha1(k.value()), v.value())?);
    }
    Ok(())
}

/// The part of `have` that `keep` leaves out: what a group gives away (sha1 or key
/// intervals, `[start, end)` ascending, an `end` of None running to the top).
pub fn given_away<T: Ord + Clone>(
    have: &[(T, Option<T>)],
    keep: &[(T, Option<T>)],
) -> Vec<(T, Option<T>)> {
    let mut out = Vec::new();
    for (start, end) in have {
        let mut at = start.clone();
        for (k_start, k_end) in keep {
            // The kept interval ends at or before `at`: nothing of it here.
            if k_end.as_ref().is_some_and(|e| *e <= at) {
                continue;
            }
            // It starts past the end of this interval: the rest is given away.
            if end.as_ref().is_some_and(|e| k_start >= e) {
                break;
            }
            if *k_start > at {
                out.push((at.clone(), Some(k_start.clone())));
            }
            match k_end {
                Some(e) => at = e.clone(),
                None => return out,
            }
            if end.as_ref().is_some_and(|e| at >= *e) {
                break;
            }
        }
        if end.as_ref().is_none_or(|e| at < *e) {
            out.push((at, end.clone()));
        }
    }
    out
}
