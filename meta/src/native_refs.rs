//! The references taken through the native API, counted apart.
//!
//! FileDB's `refs` counts every reference to a content: S3 objects, parts of uploads in
//! progress, and the native API's `inc`/`upload` (released by `dec`). The S3 ones can be
//! recounted from the objects and parts; the native ones exist nowhere else (the mail back
//! end that holds them is another system). Without this table `fsck` could not tell a
//! leaked or lost reference from a native one, and no crash test could check that a
//! replayed `inc` was not applied twice.
//!
//! Invariant (checked by `fsck`): for every record not flagged DO_NOT_DELETE,
//! `refs == S3 references + native count` and `magic == S3 magics + native magic`
//! (wrapping sums).
//!
//! The table only follows `apply`; it never changes what a command does to FileDB, so a
//! state machine that builds it from the other tables (a data folder from before it
//! existed, see [`build`]) and one that kept it from the start agree.

use std::collections::HashMap;

use placement::{Magic, Sha1};
use redb::{ReadableTable, Table, TableDefinition, WriteTransaction};

use super::MetaError;
use super::tables::{self, COUNTERS, FILES, FileRecord, OBJECTS, ObjectRecord, PARTS, PartRecord};

/// sha1 -> count and wrapping magic sum of the native references, little-endian u32s.
/// An entry exists only while its count is not zero.
pub const NATIVE_REFS: TableDefinition<[u8; 20], [u8; 8]> = TableDefinition::new("native_refs");

/// Set in `counters` once [`NATIVE_REFS`] is complete for this data folder.
const BUILT: &str = "native_refs_built";

/// One content's native references.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NativeRefs {
    pub count: u32,
    /// Wrapping sum of their magics.
    pub magic: u32,
}

impl NativeRefs {
    pub fn encode(&self) -> [u8; 8] {
        let mut out = [0u8; 8];
        out[0..4].copy_from_slice(&self.count.to_le_bytes());
        out[4..8].copy_from_slice(&self.magic.to_le_bytes());
        out
    }

    pub fn decode(b: &[u8; 8]) -> Self {
        NativeRefs {
            count: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            magic: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
}

type Native<'t> = Table<'t, [u8; 20], [u8; 8]>;

fn read(table: &Native<'_>, sha1: &Sha1) -> Result<NativeRefs, MetaError> {
    Ok(table
        .get(sha1.0)?
        .map(|v| NativeRefs::decode(&v.value()))
        .unwrap_or_default())
}

/// A native `inc` or `upload` was applied to FileDB.
pub fn taken(txn: &WriteTransaction, sha1: &Sha1, magic: Magic) -> Result<(), MetaError> {
    let mut table = txn.open_table(NATIVE_REFS)?;
    let mut r = read(&table, sha1)?;
    // FileDB's own count overflowed first if this could (its inc refuses at u32::MAX).
    r.count = r.count.saturating_add(1);
    r.magic = r.magic.wrapping_add(magic.get());
    table.insert(sha1.0, r.encode())?;
    Ok(())
}

/// A native `dec` was applied to FileDB. Without a native reference to release, the dec
/// took an S3 one (FileDB's magic arithmetic then flags the record DO_NOT_DELETE when its
/// count runs out): nothing changes here, and `fsck` reports the count as short.
pub fn released(txn: &WriteTransaction, sha1: &Sha1, magic: Magic) -> Result<(), MetaError> {
    let mut table = txn.open_table(NATIVE_REFS)?;
    let r = read(&table, sha1)?;
    if r.count == 0 {
        return Ok(());
    }
    if r.count == 1 {
        table.remove(sha1.0)?;
    } else {
        let left = NativeRefs {
            count: r.count - 1,
            magic: r.magic.wrapping_sub(magic.get()),
        };
        table.insert(sha1.0, left.encode())?;
    }
    Ok(())
}

/// Makes sure the table exists and is complete: in a data folder from before it existed,
/// every reference FileDB counts beyond the objects and parts was taken through the
/// native API, so that excess is recorded (once; a marker in `counters` says it is done).
pub fn build(txn: &WriteTransaction) -> Result<(), MetaError> {
    let mut native = txn.open_table(NATIVE_REFS)?;
    let mut counters = txn.open_table(COUNTERS)?;
    if counters.get(BUILT)?.is_some() {
        return Ok(());
    }
    let mut s3: HashMap<Sha1, NativeRefs> = HashMap::new();
    let mut add = |sha1: Sha1, magic: Magic| {
        let e = s3.entry(sha1).or_default();
        e.count = e.count.saturating_add(1);
        e.magic = e.magic.wrapping_add(magic.get());
    };
    for entry in txn.open_table(OBJECTS)?.iter()? {
        let (_, v) = entry?;
        let o: ObjectRecord = crate::versions::decode_object(v.value())?;
        add(o.sha1, o.magic);
    }
    for entry in txn.open_table(PARTS)?.iter()? {
        let (_, v) = entry?;
        let p: PartRecord = tables::decode_versioned("parts", v.value())?;
        add(p.sha1, p.magic);
    }
    for entry in txn.open_table(FILES)?.iter()? {
        let (k, v) = entry?;
        let sha1 = Sha1(k.value());
        let rec = FileRecord::decode_checked(&sha1, &v.value())?;
        let known = s3.get(&sha1).copied().unwrap_or_default();
        let count = rec.refs.saturating_sub(known.count);
        if count > 0 {
            let r = NativeRefs {
                count,
                magic: rec.magic.wrapping_sub(known.magic),
            };
            native.insert(sha1.0, r.encode())?;
        }
    }
    counters.insert(BUILT, 1)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use placement::PairId;
    use redb::ReadableDatabase;

    use super::super::{Command, ContentSource, MetaStore, NewObject};
    use super::*;

    fn m(v: u32) -> Magic {
        Magic::new(v).unwrap()
    }

    fn native(s: &MetaStore) -> Vec<(Sha1, NativeRefs)> {
        let mut out = Vec::new();
        s.for_each_native(|sha1, n| out.push((sha1, n))).unwrap();
        out
    }

    /// S3 objects and native calls on the same contents, some of them released.
    fn history(s: &MetaStore) {
        let (a, b, c) = (Sha1([1; 20]), Sha1([2; 20]), Sha1([3; 20]));
        s.execute(&Command::CreateBucket {
            bucket: "bkt".into(),
            created_ms: 1,
        })
        .unwrap();
        let put = |key: &str, sha1, magic, source| Command::PutObject {
            bucket: "bkt".into(),
            key: key.into(),
            object: NewObject::new(sha1, m(magic), 1, 0, [0; 16]),
            source,
            now_secs: 1,
            precondition: None,
        };
        s.execute(&put("k1", a, 11, ContentSource::Stored(PairId(0))))
            .unwrap();
        s.execute(&put("k2", a, 12, ContentSource::Existing))
            .unwrap();
        for (sha1, magic) in [(a, 5), (a, 6), (b, 7), (b, 8), (c, 9)] {
            s.execute(&Command::InsertOrInc {
                sha1,
                magic: m(magic),
                pair: PairId(0),
            })
            .unwrap();
        }
        s.execute(&Command::Inc {
            sha1: c,
            magic: m(10),
        })
        .unwrap();
        for (sha1, magic) in [(a, 5), (b, 7), (b, 8)] {
            s.execute(&Command::Dec {
                sha1,
                magic: m(magic),
                now_secs: 2,
            })
            .unwrap();
        }
    }

    #[test]
    fn native_calls_are_counted_apart_from_s3_references() {
        let dir = tempfile::tempdir().unwrap();
        let s = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
        history(&s);
        let (a, c) = (Sha1([1; 20]), Sha1([3; 20]));
        // b's native references are all released: no entry (and b went to deleting).
        assert_eq!(
            native(&s),
            vec![
                (a, NativeRefs { count: 1, magic: 6 }),
                (
                    c,
                    NativeRefs {
                        count: 2,
                        magic: 19
                    }
                ),
            ]
        );
        // FileDB counts both kinds.
        assert_eq!(s.file(&a).unwrap().unwrap().refs, 3);
    }

    #[test]
    fn a_dec_without_a_native_reference_leaves_the_table_alone() {
        let dir = tempfile::tempdir().unwrap();
        let s = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
        history(&s);
        let a = Sha1([1; 20]);
        for magic in [6, 11] {
            s.execute(&Command::Dec {
                sha1: a,
                magic: m(magic),
                now_secs: 3,
            })
            .unwrap();
        }
        // The second dec took an S3 reference: fsck reports refs 1 against 1 object + 0.
        assert_eq!(
            native(&s),
            vec![(
                Sha1([3; 20]),
                NativeRefs {
                    count: 2,
                    magic: 19
                }
            )]
        );
        assert_eq!(s.file(&a).unwrap().unwrap().refs, 1);
    }

    #[test]
    fn a_folder_from_before_the_table_gets_the_same_table_built() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.redb");
        let kept = {
            let s = MetaStore::open(&path).unwrap();
            history(&s);
            native(&s)
        };
        assert!(!kept.is_empty());
        // As a data folder written before the table existed: no table, no marker.
        {
            let db = redb::Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            txn.delete_table(NATIVE_REFS).unwrap();
            txn.open_table(COUNTERS).unwrap().remove(BUILT).unwrap();
            txn.commit().unwrap();
            let read = db.begin_read().unwrap();
            assert!(read.open_table(NATIVE_REFS).is_err());
        }
        let s = MetaStore::open(&path).unwrap();
        assert_eq!(native(&s), kept);
        // Built once: a later open does not recount (the marker is set).
        drop(s);
        let s = MetaStore::open(&path).unwrap();
        assert_eq!(native(&s), kept);
    }

    #[test]
    fn records_round_trip_in_8_bytes() {
        let r = NativeRefs {
            count: 3,
            magic: 0xdead_beef,
        };
        assert_eq!(NativeRefs::decode(&r.encode()), r);
    }
}
