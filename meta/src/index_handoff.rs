//! The rows that move with their (bucket, key) when an index group hands key intervals to
//! a new group in a split (`docs/scaling.md`, section 4; the order of the steps is
//! [`crate::handoff`]'s): read here in bounded pages from the group that hands them off,
//! written by `IngestIndex` in the group that receives them, dropped by `DropHandedOff`
//! once the map is committed.
//!
//! What moves: every table keyed by (bucket, key) — `objects`, `versions`,
//! `null_versions`, `object_ref_ids`, `held_refs`, `outbox`, `fences` — then the uploads
//! whose key lies in the interval with everything under their id (`upload_extras`,
//! `upload_checksums`, `parts`, `part_ref_ids`), the part checksums of each object or
//! version moved (`object_checksums`, keyed by the reference's (sha1, magic)), and last the
//! group's version counter, so that the receiving group numbers new versions above every
//! one it received. Values move as the bytes they are stored as: a row reads back exactly
//! as it was written, and replicas of the two groups stay comparable by digest.

use std::collections::BTreeMap;
use std::ops::Bound;

use redb::{ReadTransaction, TableDefinition};
use serde::{Deserialize, Serialize};

use crate::MetaError;
use crate::checksums::{OBJECT_CHECKSUMS, UPLOAD_CHECKSUMS};
use crate::extras::UPLOAD_EXTRAS;
use crate::groups::IndexStart;
use crate::handoff::ROWS_MAX;
use crate::outbox::{FENCES, HELD, OBJECT_REF_IDS, OUTBOX, PART_REF_IDS};
use crate::ownership::{KeyInterval, keys_within};
use crate::tables::{
    self, COUNTERS, NULL_VERSIONS, OBJECT_SEQ, OBJECTS, PARTS, UPLOADS, UploadRecord, VERSIONS,
};
use crate::versions::{VersionRecord, decode_object};

/// The tables of an index split's copy, in the order it reads them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum IndexTable {
    Objects,
    Versions,
    NullVersions,
    ObjectRefIds,
    Held,
    Outbox,
    Fences,
    Uploads,
    UploadExtras,
    UploadChecksums,
    Parts,
    PartRefIds,
    /// The version counter: one row, last.
    Seq,
}

impl IndexTable {
    pub const ALL: [IndexTable; 13] = [
        IndexTable::Objects,
        IndexTable::Versions,
        IndexTable::NullVersions,
        IndexTable::ObjectRefIds,
        IndexTable::Held,
        IndexTable::Outbox,
        IndexTable::Fences,
        IndexTable::Uploads,
        IndexTable::UploadExtras,
        IndexTable::UploadChecksums,
        IndexTable::Parts,
        IndexTable::PartRefIds,
        IndexTable::Seq,
    ];
}

/// One row that moves with its key, its value as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum IndexRow {
    Object {
        bucket: String,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Version {
        bucket: String,
        key: Vec<u8>,
        order: u64,
        value: Vec<u8>,
    },
    NullVersion {
        bucket: String,
        key: Vec<u8>,
        number: u64,
    },
    ObjectRefId {
        bucket: String,
        key: Vec<u8>,
        seq: u64,
        ref_id: u64,
    },
    Held {
        bucket: String,
        key: Vec<u8>,
        ref_id: u64,
    },
    Outbox {
        bucket: String,
        key: Vec<u8>,
        ref_id: u64,
        owed: [u8; 24],
    },
    Fence {
        bucket: String,
        key: Vec<u8>,
        ref_id: u64,
        fenced_ms: u64,
    },
    Upload {
        id: String,
        value: Vec<u8>,
    },
    UploadExtras {
        id: String,
        value: Vec<u8>,
    },
    UploadChecksum {
        id: String,
        part: u32,
        value: Vec<u8>,
    },
    Part {
        id: String,
        part: u32,
        value: Vec<u8>,
    },
    PartRefId {
        id: String,
        part: u32,
        ref_id: u64,
    },
    /// The part checksums of a moved object's or version's reference.
    ObjectChecksums {
        sha1: [u8; 20],
        magic: u32,
        value: Vec<u8>,
    },
    /// The group's version counter.
    Seq {
        value: u64,
    },
}

/// Where a page of a table ended: after this row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum IndexAt {
    /// A row of a table keyed by (bucket, key[, n]) (n is 0 for a table without one).
    Key {
        bucket: String,
        key: Vec<u8>,
        n: u64,
    },
    /// A row of a table keyed by upload id (part 0 for one without a part).
    Upload { id: String, part: u32 },
}

/// Where the next page starts: in `table`, after `at` (None: at its start).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexCursor {
    pub table: IndexTable,
    pub at: Option<IndexAt>,
}

/// A page of the copy: its rows, and where the next starts (None: the copy is read).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexPage {
    pub rows: Vec<IndexRow>,
    pub next: Option<IndexCursor>,
}

/// Rows a page may visit without taking them (uploads of other keys), per row it may
/// take: a page over a table of many uploads outside the interval still ends soon.
const VISITS_PER_ROW: usize = 8;

/// The rows of `interval` from `from` (None: the start), at most `limit` (capped at
/// [`ROWS_MAX`]; a page may hold none and still name a next cursor).
pub fn rows(
    txn: &ReadTransaction,
    interval: &KeyInterval,
    from: Option<&IndexCursor>,
    limit: u32,
) -> Result<IndexPage, MetaError> {
    let mut page = Page {
        rows: Vec::new(),
        limit: limit.clamp(2, ROWS_MAX) as usize,
        visits: 0,
        uploads: BTreeMap::new(),
    };
    let first = from.map_or(IndexTable::Objects, |c| c.table);
    let mut at = from.and_then(|c| c.at.clone());
    for table in IndexTable::ALL.into_iter().filter(|t| *t >= first) {
        if let Some(stopped) = page.table(txn, interval, table, at.take())? {
            return Ok(IndexPage {
                rows: page.rows,
                next: Some(IndexCursor { table, at: stopped }),
            });
        }
    }
    Ok(IndexPage {
        rows: page.rows,
        next: None,
    })
}

/// A page being filled.
struct Page {
    rows: Vec<IndexRow>,
    limit: usize,
    visits: usize,
    /// Whether each upload id met lies in the interval.
    uploads: BTreeMap<String, bool>,
}

/// How a table's pass ended: read to its end (None), or stopped for the page's bound
/// after a row (Some(where)).
type Pass = Option<Option<IndexAt>>;

impl Page {
    /// Whether the page takes no more: room for a row and the one it may bring along.
    fn full(&self) -> bool {
        self.rows.len() + 2 > self.limit || self.visits >= self.limit * VISITS_PER_ROW
    }

    fn table(
        &mut self,
        txn: &ReadTransaction,
        interval: &KeyInterval,
        table: IndexTable,
        at: Option<IndexAt>,
    ) -> Result<Pass, MetaError> {
        match table {
            IndexTable::Objects => self.pair_keyed(txn, OBJECTS, interval, at, |b, k, v, out| {
                let value = v.to_vec();
                let record = decode_object(&value)?;
                let sums = checksums_of(txn, record.sha1.0, record.magic.get())?;
                out.push(IndexRow::Object {
                    bucket: b.into(),
                    key: k.into(),
                    value,
                });
                out.extend(sums);
                Ok(())
            }),
            IndexTable::Versions => {
                self.triple_keyed(txn, VERSIONS, interval, at, |b, k, order, v, out| {
                    let value = v.to_vec();
                    let sums = match VersionRecord::decode(&value)? {
                        VersionRecord::Object { record, .. } => {
                            checksums_of(txn, record.sha1.0, record.magic.get())?
                        }
                        VersionRecord::DeleteMarker { .. } => None,
                    };
                    out.push(IndexRow::Version {
                        bucket: b.into(),
                        key: k.into(),
                        order,
                        value,
                    });
                    out.extend(sums);
                    Ok(())
                })
            }
            IndexTable::NullVersions => {
                self.pair_keyed(txn, NULL_VERSIONS, interval, at, |b, k, number, out| {
                    out.push(IndexRow::NullVersion {
                        bucket: b.into(),
                        key: k.into(),
                        number,
                    });
                    Ok(())
                })
            }
            IndexTable::ObjectRefIds => self.triple_keyed(
                txn,
                OBJECT_REF_IDS,
                interval,
                at,
                |b, k, seq, ref_id, out| {
                    out.push(IndexRow::ObjectRefId {
                        bucket: b.into(),
                        key: k.into(),
                        seq,
                        ref_id,
                    });
                    Ok(())
                },
            ),
            IndexTable::Held => {
                self.triple_keyed(txn, HELD, interval, at, |b, k, ref_id, (), out| {
                    out.push(IndexRow::Held {
                        bucket: b.into(),
                        key: k.into(),
                        ref_id,
                    });
                    Ok(())
                })
            }
            IndexTable::Outbox => {
                self.triple_keyed(txn, OUTBOX, interval, at, |b, k, ref_id, owed, out| {
                    out.push(IndexRow::Outbox {
                        bucket: b.into(),
                        key: k.into(),
                        ref_id,
                        owed,
                    });
                    Ok(())
                })
            }
            IndexTable::Fences => {
                self.triple_keyed(txn, FENCES, interval, at, |b, k, ref_id, fenced_ms, out| {
                    out.push(IndexRow::Fence {
                        bucket: b.into(),
                        key: k.into(),
                        ref_id,
                        fenced_ms,
                    });
                    Ok(())
                })
            }
            IndexTable::Uploads => self.id_keyed(txn, UPLOADS, interval, at, |id, v, out| {
                out.push(IndexRow::Upload {
                    id: id.into(),
                    value: v.to_vec(),
                });
                Ok(())
            }),
            IndexTable::UploadExtras => {
                self.id_keyed(txn, UPLOAD_EXTRAS, interval, at, |id, v, out| {
                    out.push(IndexRow::UploadExtras {
                        id: id.into(),
                        value: v.to_vec(),
                    });
                    Ok(())
                })
            }
            IndexTable::UploadChecksums => {
                self.part_keyed(txn, UPLOAD_CHECKSUMS, interval, at, |id, part, v, out| {
                    out.push(IndexRow::UploadChecksum {
                        id: id.into(),
                        part,
                        value: v.to_vec(),
                    });
                    Ok(())
                })
            }
            IndexTable::Parts => self.part_keyed(txn, PARTS, interval, at, |id, part, v, out| {
                out.push(IndexRow::Part {
                    id: id.into(),
                    part,
                    value: v.to_vec(),
                });
                Ok(())
            }),
            IndexTable::PartRefIds => {
                self.part_keyed(txn, PART_REF_IDS, interval, at, |id, part, ref_id, out| {
                    out.push(IndexRow::PartRefId {
                        id: id.into(),
                        part,
                        ref_id,
                    });
                    Ok(())
                })
            }
            IndexTable::Seq => {
                // The page may be exactly full: the counter then starts the next one.
                if self.rows.len() >= self.limit {
                    return Ok(Some(None));
                }
                if at.is_none() {
                    let value = txn
                        .open_table(COUNTERS)?
                        .get(OBJECT_SEQ)?
                        .map_or(0, |v| v.value());
                    self.rows.push(IndexRow::Seq { value });
                }
                Ok(None)
            }
        }
    }

    /// A pass over a table keyed by (bucket, key).
    fn pair_keyed<V: redb::Value + 'static>(
        &mut self,
        txn: &ReadTransaction,
        def: TableDefinition<(&'static str, &'static [u8]), V>,
        (start, end): &KeyInterval,
        at: Option<IndexAt>,
        mut take: impl for<'a> FnMut(
            &str,
            &[u8],
            V::SelfType<'a>,
            &mut Vec<IndexRow>,
        ) -> Result<(), MetaError>,
    ) -> Result<Pass, MetaError> {
        let table = txn.open_table(def)?;
        let after = key_after(&at);
        let lower = match &after {
            Some((b, k, _)) => Bound::Excluded((b.as_str(), k.as_slice())),
            None => Bound::Included((start.bucket.as_str(), start.key.as_bytes())),
        };
        let upper = end.as_ref().map_or(Bound::Unbounded, |e| {
            Bound::Excluded((e.bucket.as_str(), e.key.as_bytes()))
        });
        let mut last = at;
        for row in table.range::<(&str, &[u8])>((lower, upper))? {
            if self.full() {
                return Ok(Some(last));
            }
            let (k, v) = row?;
            let (bucket, key) = k.value();
            take(bucket, key, v.value(), &mut self.rows)?;
            self.visits += 1;
            last = Some(IndexAt::Key {
                bucket: bucket.into(),
                key: key.into(),
                n: 0,
            });
        }
        Ok(None)
    }

    /// A pass over a table keyed by (bucket, key, n).
    fn triple_keyed<V: redb::Value + 'static>(
        &mut self,
        txn: &ReadTransaction,
        def: TableDefinition<(&'static str, &'static [u8], u64), V>,
        (start, end): &KeyInterval,
        at: Option<IndexAt>,
        mut take: impl for<'a> FnMut(
            &str,
            &[u8],
            u64,
            V::SelfType<'a>,
            &mut Vec<IndexRow>,
        ) -> Result<(), MetaError>,
    ) -> Result<Pass, MetaError> {
        let table = txn.open_table(def)?;
        let after = key_after(&at);
        let lower = match &after {
            Some((b, k, n)) => Bound::Excluded((b.as_str(), k.as_slice(), *n)),
            None => Bound::Included((start.bucket.as_str(), start.key.as_bytes(), 0)),
        };
        let upper = end.as_ref().map_or(Bound::Unbounded, |e| {
            Bound::Excluded((e.bucket.as_str(), e.key.as_bytes(), 0))
        });
        let mut last = at;
        for row in table.range::<(&str, &[u8], u64)>((lower, upper))? {
            if self.full() {
                return Ok(Some(last));
            }
            let (k, v) = row?;
            let (bucket, key, n) = k.value();
            take(bucket, key, n, v.value(), &mut self.rows)?;
            self.visits += 1;
            last = Some(IndexAt::Key {
                bucket: bucket.into(),
                key: key.into(),
                n,
            });
        }
        Ok(None)
    }

    /// A pass over a table keyed by upload id: the rows of the uploads in the interval.
    fn id_keyed<V: redb::Value + 'static>(
        &mut self,
        txn: &ReadTransaction,
        def: TableDefinition<&'static str, V>,
        interval: &KeyInterval,
        at: Option<IndexAt>,
        mut take: impl for<'a> FnMut(&str, V::SelfType<'a>, &mut Vec<IndexRow>) -> Result<(), MetaError>,
    ) -> Result<Pass, MetaError> {
        let table = txn.open_table(def)?;
        let after = upload_after(&at);
        let lower = match &after {
            Some((id, _)) => Bound::Excluded(id.as_str()),
            None => Bound::Unbounded,
        };
        let mut last = at;
        for row in table.range::<&str>((lower, Bound::Unbounded))? {
            if self.full() {
                return Ok(Some(last));
            }
            let (k, v) = row?;
            let id = k.value();
            self.visits += 1;
            if self.moves(txn, interval, id)? {
                take(id, v.value(), &mut self.rows)?;
            }
            last = Some(IndexAt::Upload {
                id: id.into(),
                part: 0,
            });
        }
        Ok(None)
    }

    /// A pass over a table keyed by (upload id, part).
    fn part_keyed<V: redb::Value + 'static>(
        &mut self,
        txn: &ReadTransaction,
        def: TableDefinition<(&'static str, u32), V>,
        interval: &KeyInterval,
        at: Option<IndexAt>,
        mut take: impl for<'a> FnMut(
            &str,
            u32,
            V::SelfType<'a>,
            &mut Vec<IndexRow>,
        ) -> Result<(), MetaError>,
    ) -> Result<Pass, MetaError> {
        let table = txn.open_table(def)?;
        let after = upload_after(&at);
        let lower = match &after {
            Some((id, part)) => Bound::Excluded((id.as_str(), *part)),
            None => Bound::Unbounded,
        };
        let mut last = at;
        for row in table.range::<(&str, u32)>((lower, Bound::Unbounded))? {
            if self.full() {
                return Ok(Some(last));
            }
            let (k, v) = row?;
            let (id, part) = k.value();
            self.visits += 1;
            if self.moves(txn, interval, id)? {
                take(id, part, v.value(), &mut self.rows)?;
            }
            last = Some(IndexAt::Upload {
                id: id.into(),
                part,
            });
        }
        Ok(None)
    }

    /// Whether upload `id`'s key lies in `interval` (an id with no upload row: no).
    fn moves(
        &mut self,
        txn: &ReadTransaction,
        interval: &KeyInterval,
        id: &str,
    ) -> Result<bool, MetaError> {
        if let Some(known) = self.uploads.get(id) {
            return Ok(*known);
        }
        let inside = match txn.open_table(UPLOADS)?.get(id)? {
            Some(v) => {
                let upload: UploadRecord = tables::decode_versioned("uploads", v.value())?;
                upload_inside(interval, &upload)
            }
            None => false,
        };
        // Bounded: one page's ids.
        self.uploads.insert(id.to_string(), inside);
        Ok(inside)
    }
}

/// Whether `upload`'s key lies in `interval`.
pub fn upload_inside(interval: &KeyInterval, upload: &UploadRecord) -> bool {
    keys_within(
        std::slice::from_ref(interval),
        &upload.bucket,
        upload.key.as_bytes(),
    )
}

/// The part checksums of the reference (sha1, magic), as a row, if it has them.
fn checksums_of(
    txn: &ReadTransaction,
    sha1: [u8; 20],
    magic: u32,
) -> Result<Option<IndexRow>, MetaError> {
    Ok(txn
        .open_table(OBJECT_CHECKSUMS)?
        .get((sha1, magic))?
        .map(|v| IndexRow::ObjectChecksums {
            sha1,
            magic,
            value: v.value().to_vec(),
        }))
}

fn key_after(at: &Option<IndexAt>) -> Option<(String, Vec<u8>, u64)> {
    match at {
        Some(IndexAt::Key { bucket, key, n }) => Some((bucket.clone(), key.clone(), *n)),
        _ => None,
    }
}

fn upload_after(at: &Option<IndexAt>) -> Option<(String, u32)> {
    match at {
        Some(IndexAt::Upload { id, part }) => Some((id.clone(), *part)),
        _ => None,
    }
}

/// The first key of a key interval's start, for messages.
pub fn describe(interval: &KeyInterval) -> String {
    let show = |s: &IndexStart| format!("{}/{}", s.bucket, s.key);
    match &interval.1 {
        Some(end) => format!("[{}, {})", show(&interval.0), show(end)),
        None => format!("[{}, end)", show(&interval.0)),
    }
}

/// Bound on the objects [`middle_key`] counts: a split point from the first this many
/// keys of a larger interval is still a fair cut, and the read stays bounded.
pub const MIDDLE_VISITS_MAX: usize = 4_000_000;

/// The object key halfway through `interval` (of its first [`MIDDLE_VISITS_MAX`]), where
/// a split that halves the group's objects cuts; None with fewer than two objects, or if
/// the middle key is the interval's own start (nothing would move).
pub fn middle_key(
    txn: &ReadTransaction,
    (start, end): &KeyInterval,
) -> Result<Option<IndexStart>, MetaError> {
    let table = txn.open_table(OBJECTS)?;
    let range = || {
        (
            Bound::Included((start.bucket.as_str(), start.key.as_bytes())),
            end.as_ref().map_or(Bound::Unbounded, |e| {
                Bound::Excluded((e.bucket.as_str(), e.key.as_bytes()))
            }),
        )
    };
    let mut count = 0usize;
    for row in table.range::<(&str, &[u8])>(range())? {
        row?;
        count += 1;
        if count >= MIDDLE_VISITS_MAX {
            break;
        }
    }
    if count < 2 {
        return Ok(None);
    }
    let Some(row) = table.range::<(&str, &[u8])>(range())?.nth(count / 2) else {
        return Ok(None);
    };
    let (k, _) = row?;
    let (bucket, key) = k.value();
    let at = IndexStart::new(
        bucket,
        std::str::from_utf8(key)
            .map_err(|e| MetaError::Corrupt(format!("objects: a key that is not UTF-8: {e}")))?,
    );
    Ok((at != *start).then_some(at))
}
