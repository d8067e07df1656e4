//! The snapshot format: every metadata table of one consistent redb read transaction,
//! written as a stream of records, used for Raft snapshots (log compaction, a new or
//! lagging node), for `gateway admin backup` and for `gateway restore`.
//!
//! Layout (all integers little-endian):
//! ```text
//! "DGWSNAP1"                                  8 bytes
//! u32 header length, postcard SnapshotHeader  what the snapshot is (log id, membership)
//! records: u8 table tag, u32 key length, key bytes, u32 value length, value bytes
//! u8 END_TAG, u32 CRC32 of every byte before it
//! ```
//! Keys and values are redb's own byte forms of each table's types, so a record is copied
//! without decoding. The CRC32 covers the whole stream: a truncated or damaged file is
//! refused before anything is loaded. At 10 M objects a snapshot is about the size of the
//! tables' payload (~100 B per FileDB record and object, no B-tree pages): ~2 GB, written
//! and read sequentially in 1 MiB buffers.

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use redb::{
    Database, Key, ReadTransaction, ReadableDatabase, ReadableTable, ReadableTableMetadata,
    TableDefinition, TableHandle, Value, WriteTransaction,
};
use serde::{Deserialize, Serialize};

use super::super::checksums::{OBJECT_CHECKSUMS, UPLOAD_CHECKSUMS};
use super::super::extras::{BUCKET_EXTRAS, UPLOAD_EXTRAS};
use super::super::jobs::JOBS;
use super::super::keys::KEYS;
use super::super::lifecycle::LIFECYCLE;
use super::super::native_refs::{self, NATIVE_REFS};
use super::super::outbox::{FENCE_AGES, FENCES, HELD, OBJECT_REF_IDS, OUTBOX, PART_REF_IDS};
use super::super::ownership::OWNERSHIP;
use super::super::ref_log::{REF_LOG, REF_PENDING, REF_RELEASED};
use super::super::shard_map::SHARD_MAP;
use super::super::tables::{
    BUCKETS, COUNTERS, DELETING, FILES, NULL_VERSIONS, OBJECTS, PAIRS, PARTS, RAFT_STATE, UPLOADS,
    VERSIONS,
};
use crate::bucket_copies::BUCKET_REVISIONS;

const MAGIC: &[u8; 8] = b"DGWSNAP1";
const END_TAG: u8 = 0xff;
/// Bound on one key or value (the largest real ones are object records with metadata, a
/// few KB): a length above it is a damaged file, not an allocation to attempt.
const RECORD_BYTES_MAX: u32 = 16 << 20;
/// Bound on the header.
const HEADER_BYTES_MAX: u32 = 1 << 20;
/// Records loaded per (non-durable) write transaction while installing.
const LOAD_RECORDS_PER_TXN: u64 = 100_000;
const BUFFER_BYTES: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("snapshot database: {0}")]
    Db(String),
    #[error("not a snapshot file (bad magic)")]
    Magic,
    #[error("damaged snapshot: {0}")]
    Damaged(String),
}

crate::error::from_redb_errors!(SnapshotError::Db);

/// What a snapshot holds, written before its records. `meta` is the postcard of openraft's
/// `SnapshotMeta` (kept opaque here so that the format does not depend on openraft).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SnapshotHeader {
    pub meta: Vec<u8>,
    pub records: u64,
}

/// A writer that keeps the CRC32 of everything written.
struct Crc<W> {
    inner: W,
    crc: crc32fast::Hasher,
}

impl<W: Write> Write for Crc<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A reader that keeps the CRC32 of everything read.
struct CrcRead<R> {
    inner: R,
    crc: crc32fast::Hasher,
}

impl<R: Read> Read for CrcRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.crc.update(&buf[..n]);
        Ok(n)
    }
}

fn write_record(out: &mut impl Write, tag: u8, k: &[u8], v: &[u8]) -> std::io::Result<()> {
    out.write_all(&[tag])?;
    out.write_all(&(k.len() as u32).to_le_bytes())?;
    out.write_all(k)?;
    out.write_all(&(v.len() as u32).to_le_bytes())?;
    out.write_all(v)
}

fn dump_table<K: Key + 'static, V: Value + 'static>(
    txn: &ReadTransaction,
    def: TableDefinition<K, V>,
    tag: u8,
    out: &mut impl Write,
) -> Result<u64, SnapshotError> {
    let table = txn.open_table(def)?;
    let mut n = 0;
    for item in table.iter()? {
        let (k, v) = item?;
        write_record(
            out,
            tag,
            K::as_bytes(&k.value()).as_ref(),
            V::as_bytes(&v.value()).as_ref(),
        )?;
        n += 1;
    }
    Ok(n)
}

/// Every table of the state machine, with its tag in the stream. RAFT_STATE (last applied,
/// membership) travels too: a restored node knows where its state stands.
macro_rules! for_each_table {
    ($m:ident, $($args:tt)*) => {{
        $m!(0u8, FILES, $($args)*);
        $m!(1u8, DELETING, $($args)*);
        $m!(2u8, PAIRS, $($args)*);
        $m!(3u8, BUCKETS, $($args)*);
        $m!(4u8, OBJECTS, $($args)*);
        $m!(5u8, UPLOADS, $($args)*);
        $m!(6u8, PARTS, $($args)*);
        $m!(7u8, COUNTERS, $($args)*);
        $m!(8u8, RAFT_STATE, $($args)*);
        $m!(9u8, NATIVE_REFS, $($args)*);
        $m!(10u8, LIFECYCLE, $($args)*);
        $m!(11u8, KEYS, $($args)*);
        $m!(12u8, JOBS, $($args)*);
        $m!(13u8, VERSIONS, $($args)*);
        $m!(14u8, NULL_VERSIONS, $($args)*);
        $m!(15u8, UPLOAD_CHECKSUMS, $($args)*);
        $m!(16u8, OBJECT_CHECKSUMS, $($args)*);
        $m!(17u8, BUCKET_EXTRAS, $($args)*);
        $m!(18u8, UPLOAD_EXTRAS, $($args)*);
        $m!(19u8, SHARD_MAP, $($args)*);
        $m!(20u8, REF_LOG, $($args)*);
        $m!(21u8, REF_PENDING, $($args)*);
        $m!(22u8, REF_RELEASED, $($args)*);
        $m!(23u8, OWNERSHIP, $($args)*);
        $m!(24u8, OUTBOX, $($args)*);
        $m!(25u8, HELD, $($args)*);
        $m!(26u8, OBJECT_REF_IDS, $($args)*);
        $m!(27u8, PART_REF_IDS, $($args)*);
        $m!(28u8, FENCES, $($args)*);
        $m!(29u8, FENCE_AGES, $($args)*);
        $m!(30u8, BUCKET_REVISIONS, $($args)*);
    }};
}

/// The records of every table in `txn` (each table's length is kept in its header: no
/// scan).
pub fn count_records(txn: &ReadTransaction) -> Result<u64, SnapshotError> {
    let mut records = 0u64;
    macro_rules! count {
        ($tag:expr, $def:expr,) => {
            records += txn.open_table($def)?.len()?;
        };
    }
    for_each_table!(count,);
    Ok(records)
}

/// Writes every table of `txn` to `out` after a header carrying `meta`; returns the number
/// of records.
pub fn write(txn: &ReadTransaction, meta: Vec<u8>, out: impl Write) -> Result<u64, SnapshotError> {
    // Counted first so that the header can say how many records follow (a cheap check on
    // load, and a progress figure).
    let records = count_records(txn)?;
    let mut out = Crc {
        inner: BufWriter::with_capacity(BUFFER_BYTES, out),
        crc: crc32fast::Hasher::new(),
    };
    out.write_all(MAGIC)?;
    let header = postcard::to_stdvec(&SnapshotHeader { meta, records })
        .map_err(|e| SnapshotError::Damaged(e.to_string()))?;
    out.write_all(&(header.len() as u32).to_le_bytes())?;
    out.write_all(&header)?;
    let mut written = 0u64;
    macro_rules! dump {
        ($tag:expr, $def:expr, $out:expr) => {
            written += dump_table(txn, $def, $tag, $out)?;
        };
    }
    for_each_table!(dump, &mut out);
    out.write_all(&[END_TAG])?;
    let crc = out.crc.clone().finalize();
    let mut inner = out.inner;
    inner.write_all(&crc.to_le_bytes())?;
    inner.flush()?;
    Ok(written)
}

fn read_u32(r: &mut impl Read) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

fn read_bytes(r: &mut impl Read, what: &str) -> Result<Vec<u8>, SnapshotError> {
    let len = read_u32(r)?;
    if len > RECORD_BYTES_MAX {
        return Err(SnapshotError::Damaged(format!("{what} of {len} bytes")));
    }
    let mut buf = vec![0u8; len as usize];
    r.read_exact(&mut buf)?;
    Ok(buf)
}

/// Opens a snapshot file: its header, and the file positioned at its start. Both come
/// from the one open file, whatever is renamed over `path` meanwhile.
pub fn open_with_header(path: &Path) -> Result<(SnapshotHeader, std::fs::File), SnapshotError> {
    use std::io::Seek;
    let mut file = std::fs::File::open(path)?;
    let header = header(&mut BufReader::new(&mut file))?;
    file.seek(std::io::SeekFrom::Start(0))?;
    Ok((header, file))
}

fn header(r: &mut impl Read) -> Result<SnapshotHeader, SnapshotError> {
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic)?;
    if &magic != MAGIC {
        return Err(SnapshotError::Magic);
    }
    let len = read_u32(r)?;
    if len > HEADER_BYTES_MAX {
        return Err(SnapshotError::Damaged(format!("header of {len} bytes")));
    }
    let mut buf = vec![0u8; len as usize];
    r.read_exact(&mut buf)?;
    postcard::from_bytes(&buf).map_err(|e| SnapshotError::Damaged(e.to_string()))
}

/// Checks a snapshot file end to end (CRC32, record count) without loading it.
pub fn verify(path: &Path) -> Result<SnapshotHeader, SnapshotError> {
    scan(path, |_, _, _| Ok(()))
}

/// Reads every record of a snapshot file, checking the trailer.
fn scan(
    path: &Path,
    mut each: impl FnMut(u8, Vec<u8>, Vec<u8>) -> Result<(), SnapshotError>,
) -> Result<SnapshotHeader, SnapshotError> {
    let mut r = CrcRead {
        inner: BufReader::with_capacity(BUFFER_BYTES, std::fs::File::open(path)?),
        crc: crc32fast::Hasher::new(),
    };
    let head = header(&mut r)?;
    let mut seen = 0u64;
    loop {
        let mut tag = [0u8; 1];
        r.read_exact(&mut tag)?;
        if tag[0] == END_TAG {
            break;
        }
        if seen >= head.records {
            return Err(SnapshotError::Damaged("more records than announced".into()));
        }
        let k = read_bytes(&mut r, "key")?;
        let v = read_bytes(&mut r, "value")?;
        each(tag[0], k, v)?;
        seen += 1;
    }
    let crc = r.crc.clone().finalize();
    let stored = read_u32(&mut r.inner)?;
    if crc != stored {
        return Err(SnapshotError::Damaged(format!(
            "CRC32 {crc:08x}, trailer says {stored:08x}"
        )));
    }
    if seen != head.records {
        return Err(SnapshotError::Damaged(format!(
            "{seen} records, header says {}",
            head.records
        )));
    }
    Ok(head)
}

fn load_record<K: Key + 'static, V: Value + 'static>(
    txn: &WriteTransaction,
    def: TableDefinition<K, V>,
    k: &[u8],
    v: &[u8],
) -> Result<(), SnapshotError> {
    // redb's fixed-width types assume the right length; a wrong one is a damaged file.
    for (what, width, len) in [
        ("key", K::fixed_width(), k.len()),
        ("value", V::fixed_width(), v.len()),
    ] {
        if width.is_some_and(|w| w != len) {
            return Err(SnapshotError::Damaged(format!(
                "{} {what} of {len} bytes",
                def.name()
            )));
        }
    }
    txn.open_table(def)?
        .insert(K::from_bytes(k), V::from_bytes(v))?;
    Ok(())
}

/// Inserts one record into the table its tag names.
fn insert(t: &WriteTransaction, tag: u8, k: &[u8], v: &[u8]) -> Result<(), SnapshotError> {
    macro_rules! load {
        ($tag:expr, $def:expr,) => {
            if tag == $tag {
                return load_record(t, $def, k, v);
            }
        };
    }
    for_each_table!(load,);
    Err(SnapshotError::Damaged(format!("unknown table tag {tag}")))
}

/// Builds a fresh database at `dest` (which must not exist) from a snapshot file, checked
/// end to end first. Returns the header.
pub fn load(src: &Path, dest: &Path) -> Result<SnapshotHeader, SnapshotError> {
    verify(src)?;
    let db = Database::create(dest)?;
    let mut txn: Option<WriteTransaction> = None;
    let mut in_txn = 0u64;
    let head = scan(src, |tag, k, v| {
        if in_txn >= LOAD_RECORDS_PER_TXN {
            // Bounded transactions: memory stays flat whatever the snapshot's size; the
            // last commit below is durable and covers these.
            if let Some(mut full) = txn.take() {
                full.set_durability(redb::Durability::None)?;
                full.commit()?;
            }
            in_txn = 0;
        }
        let t = match txn.as_ref() {
            Some(t) => t,
            None => txn.insert(db.begin_write()?),
        };
        insert(t, tag, &k, &v)?;
        in_txn += 1;
        Ok(())
    })?;
    // Every table exists even if the snapshot had none of its records.
    let t = match txn.take() {
        Some(t) => t,
        None => db.begin_write()?,
    };
    macro_rules! open {
        ($tag:expr, $def:expr,) => {
            t.open_table($def)?;
        };
    }
    for_each_table!(open,);
    // A snapshot from a version without the native references table gets it built here.
    native_refs::build(&t).map_err(|e| SnapshotError::Db(e.to_string()))?;
    t.commit()?;
    drop(db);
    std::fs::File::open(dest)?.sync_all()?;
    Ok(head)
}

/// Writes a snapshot of the database at `db` to `path` (a backup of a stopped node, or
/// from an open database's read transaction).
pub fn write_file(db: &Database, meta: Vec<u8>, path: &Path) -> Result<u64, SnapshotError> {
    let txn = db.begin_read()?;
    let file = std::fs::File::create(path)?;
    let n = write(&txn, meta, &file)?;
    file.sync_all()?;
    Ok(n)
}

/// A digest of every table: replicas at the same `last_applied` must have the same.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Digest {
    pub last_applied: Option<u64>,
    /// Table name -> hex SHA-256 of its records in key order, in the snapshot's byte form.
    pub tables: std::collections::BTreeMap<String, String>,
}

/// Hashes what it is given, as a writer.
struct HashWriter(sha2::Sha256);

impl Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        sha2::Digest::update(&mut self.0, buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The digest of every table but the Raft bookkeeping (which says where the state stands,
/// reported as `last_applied`), from one read transaction.
pub fn digest(db: &Database) -> Result<Digest, SnapshotError> {
    let txn = db.begin_read()?;
    let mut tables = std::collections::BTreeMap::new();
    macro_rules! hash {
        ($tag:expr, $def:expr,) => {
            // A table added by a newer format is left out while it is empty, so that
            // the members of two releases agree during a rolling upgrade.
            let newer_and_empty = [
                VERSIONS.name(),
                NULL_VERSIONS.name(),
                UPLOAD_CHECKSUMS.name(),
                OBJECT_CHECKSUMS.name(),
                BUCKET_EXTRAS.name(),
                UPLOAD_EXTRAS.name(),
                SHARD_MAP.name(),
                REF_LOG.name(),
                REF_PENDING.name(),
                REF_RELEASED.name(),
                OWNERSHIP.name(),
                OUTBOX.name(),
                HELD.name(),
                OBJECT_REF_IDS.name(),
                PART_REF_IDS.name(),
                FENCES.name(),
                FENCE_AGES.name(),
                BUCKET_REVISIONS.name(),
            ]
            .contains(&$def.name())
                && txn.open_table($def)?.is_empty()?;
            if $def.name() != RAFT_STATE.name() && !newer_and_empty {
                let mut h = HashWriter(<sha2::Sha256 as sha2::Digest>::new());
                dump_table(&txn, $def, $tag, &mut h)?;
                tables.insert(
                    $def.name().to_string(),
                    hex::encode(sha2::Digest::finalize(h.0)),
                );
            }
        };
    }
    for_each_table!(hash,);
    let applied = {
        let table = txn.open_table(RAFT_STATE)?;
        match table.get("last_applied")? {
            Some(v) => postcard::from_bytes::<Option<openraft::LogId<u64>>>(v.value())
                .map_err(|e| SnapshotError::Damaged(e.to_string()))?
                .map(|l| l.index),
            None => None,
        }
    };
    Ok(Digest {
        last_applied: applied,
        tables,
    })
}

#[cfg(test)]
mod tests {
    use placement::Magic;

    use super::*;
    use crate::MetaStore;
    use crate::versions::{VersionRecord, VersionStamp, order_of};

    /// The `versions` and `null_versions` tables travel in snapshots, and stay out of the
    /// digest while empty (members of the release before them have no such tables).
    #[test]
    fn multipart_checksums_travel_in_snapshots_and_join_the_digest_once_written() {
        use crate::checksums::{ChecksumType, PartChecksums, UploadChecksum};
        let dir = tempfile::tempdir().unwrap();
        let store = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
        let before = store.digest().unwrap();
        assert!(!before.tables.contains_key("upload_checksums"));
        assert!(!before.tables.contains_key("object_checksums"));
        let declared = UploadChecksum {
            algorithm: "crc32".into(),
            kind: ChecksumType::Composite,
        };
        let parts = PartChecksums {
            algorithm: "crc32".into(),
            parts: vec!["AAAAAA==".into()],
        };
        let db = store.db();
        let txn = db.begin_write().unwrap();
        txn.open_table(UPLOAD_CHECKSUMS)
            .unwrap()
            .insert(("u", 0), declared.encode().unwrap().as_slice())
            .unwrap();
        txn.open_table(OBJECT_CHECKSUMS)
            .unwrap()
            .insert(([1; 20], 7), parts.encode().unwrap().as_slice())
            .unwrap();
        txn.commit().unwrap();
        let want = store.digest().unwrap();
        assert!(want.tables.contains_key("upload_checksums"));
        assert!(want.tables.contains_key("object_checksums"));

        let file = dir.path().join("snap");
        let read = db.begin_read().unwrap();
        write(&read, Vec::new(), std::fs::File::create(&file).unwrap()).unwrap();
        let restored = dir.path().join("restored.redb");
        load(&file, &restored).unwrap();
        let loaded = Database::open(&restored).unwrap();
        let txn = loaded.begin_read().unwrap();
        let got = txn.open_table(UPLOAD_CHECKSUMS).unwrap();
        let got = got.get(("u", 0)).unwrap().unwrap();
        assert_eq!(UploadChecksum::decode(got.value()).unwrap(), declared);
        let got = txn.open_table(OBJECT_CHECKSUMS).unwrap();
        let got = got.get(([1; 20], 7)).unwrap().unwrap();
        assert_eq!(PartChecksums::decode(got.value()).unwrap(), parts);
    }

    /// Bucket and upload extras (tags, ACL) travel in snapshots, and stay out of the
    /// digest while empty.
    #[test]
    fn extras_travel_in_snapshots_and_join_the_digest_once_written() {
        use crate::extras::Extras;
        use crate::tags::{Tag, TagSet};
        let dir = tempfile::tempdir().unwrap();
        let store = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
        let before = store.digest().unwrap();
        assert!(!before.tables.contains_key("bucket_extras"));
        assert!(!before.tables.contains_key("upload_extras"));
        let extras = Extras {
            tags: TagSet(vec![Tag::new("team", "a")]),
            acl: crate::acl::CannedAcl::PublicRead,
        };
        let db = store.db();
        let txn = db.begin_write().unwrap();
        for def in [BUCKET_EXTRAS, UPLOAD_EXTRAS] {
            txn.open_table(def)
                .unwrap()
                .insert("x", extras.encode().unwrap().as_slice())
                .unwrap();
        }
        txn.commit().unwrap();
        let want = store.digest().unwrap();
        assert!(want.tables.contains_key("bucket_extras"));
        assert!(want.tables.contains_key("upload_extras"));

        let file = dir.path().join("snap");
        let read = db.begin_read().unwrap();
        write(&read, Vec::new(), std::fs::File::create(&file).unwrap()).unwrap();
        let restored = dir.path().join("restored.redb");
        load(&file, &restored).unwrap();
        let loaded = Database::open(&restored).unwrap();
        let txn = loaded.begin_read().unwrap();
        for def in [BUCKET_EXTRAS, UPLOAD_EXTRAS] {
            let table = txn.open_table(def).unwrap();
            let got = table.get("x").unwrap().unwrap();
            assert_eq!(Extras::decode("t", got.value()).unwrap(), extras);
        }
    }

    #[test]
    fn versions_travel_in_snapshots_and_join_the_digest_once_written() {
        let dir = tempfile::tempdir().unwrap();
        let store = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
        assert!(!store.digest().unwrap().tables.contains_key("versions"));
        let record = VersionRecord::DeleteMarker {
            stamp: VersionStamp {
                number: 2,
                null: false,
                lock: crate::versions::ObjectLock::NONE,
            },
            created_ms: 5,
            magic: Magic::new(9).unwrap(),
        };
        let db = store.db();
        let txn = db.begin_write().unwrap();
        txn.open_table(VERSIONS)
            .unwrap()
            .insert(
                ("b", &b"k"[..], order_of(2)),
                record.encode().unwrap().as_slice(),
            )
            .unwrap();
        assert!(!store.digest().unwrap().tables.contains_key("null_versions"));
        txn.open_table(NULL_VERSIONS)
            .unwrap()
            .insert(("b", &b"k"[..]), 2)
            .unwrap();
        txn.commit().unwrap();
        let want = store.digest().unwrap();
        assert!(want.tables.contains_key("versions"));
        assert!(want.tables.contains_key("null_versions"));

        let file = dir.path().join("snap");
        let read = db.begin_read().unwrap();
        write(&read, Vec::new(), std::fs::File::create(&file).unwrap()).unwrap();
        let restored = dir.path().join("restored.redb");
        load(&file, &restored).unwrap();
        let loaded = Database::open(&restored).unwrap();
        let txn = loaded.begin_read().unwrap();
        let table = txn.open_table(VERSIONS).unwrap();
        let got = table.get(("b", &b"k"[..], order_of(2))).unwrap().unwrap();
        assert_eq!(VersionRecord::decode(got.value()).unwrap(), record);
        let index = txn.open_table(NULL_VERSIONS).unwrap();
        assert_eq!(index.get(("b", &b"k"[..])).unwrap().unwrap().value(), 2);
    }
}
