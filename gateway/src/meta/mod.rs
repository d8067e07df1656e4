//! The metadata store: FileDB, PairDB and the S3 index in one embedded redb file.
//!
//! Writes happen only through [`MetaStore::execute`], which applies one [`Command`] in one
//! write transaction and commits it durably (fsync) before returning: an acknowledged S3
//! write survives `kill -9`. Reads use read transactions and never block writers.
//! All calls block; async callers go through `tokio::task::spawn_blocking`.

pub mod apply;
pub mod command;
pub mod list;
pub mod tables;

use std::path::Path;

use placement::{PairId, PairRecord, Sha1};
use redb::{Database, ReadableDatabase, ReadableTable};

pub use command::{Command, ContentSource, DecOutcome, NewObject, Response, WritePrecondition};
pub use list::{ListPage, ListQuery};
pub use tables::{
    BucketRecord, Checksum, CorsRule, DeletingRecord, FileRecord, ObjectRecord, PartRecord,
    UploadRecord,
};

use tables::{BUCKETS, COUNTERS, DELETING, FILES, OBJECTS, PAIRS, PARTS, UPLOADS};

#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error("no such bucket")]
    NoSuchBucket,
    #[error("bucket already exists")]
    BucketExists,
    #[error("bucket is not empty")]
    BucketNotEmpty,
    #[error("no such disk pair")]
    NoPair,
    #[error("no such key")]
    NoSuchKey,
    #[error("no such upload")]
    NoSuchUpload,
    #[error("precondition failed")]
    PreconditionFailed,
    #[error("invalid part: {0}")]
    InvalidPart(String),
    #[error("content not found")]
    NotFound,
    #[error("reference count would overflow")]
    RefsOverflow,
    #[error("corrupt metadata record: {0}")]
    Corrupt(String),
    #[error("metadata storage: {0}")]
    Storage(String),
}

macro_rules! storage_error {
    ($($t:ty),*) => {$(
        impl From<$t> for MetaError {
            fn from(e: $t) -> Self {
                MetaError::Storage(e.to_string())
            }
        }
    )*};
}
storage_error!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

/// The embedded metadata database.
pub struct MetaStore {
    db: Database,
}

impl MetaStore {
    /// Opens (or creates) the database and makes sure every table exists, so that read
    /// transactions never meet a missing table.
    pub fn open(path: &Path) -> Result<Self, MetaError> {
        let db = Database::create(path)?;
        let txn = db.begin_write()?;
        txn.open_table(FILES)?;
        txn.open_table(DELETING)?;
        txn.open_table(PAIRS)?;
        txn.open_table(BUCKETS)?;
        txn.open_table(OBJECTS)?;
        txn.open_table(COUNTERS)?;
        txn.open_table(UPLOADS)?;
        txn.open_table(PARTS)?;
        txn.commit()?;
        Ok(MetaStore { db })
    }

    /// Applies one command in its own durable transaction.
    pub fn execute(&self, cmd: &Command) -> Result<Response, MetaError> {
        let txn = self.db.begin_write()?;
        match apply::apply(&txn, cmd) {
            Ok(resp) => {
                txn.commit()?;
                Ok(resp)
            }
            Err(e) => {
                txn.abort()?;
                Err(e)
            }
        }
    }

    pub fn file(&self, sha1: &Sha1) -> Result<Option<FileRecord>, MetaError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(FILES)?;
        Ok(table.get(sha1.0)?.map(|v| FileRecord::decode(&v.value())))
    }

    pub fn deleting(&self, sha1: &Sha1) -> Result<Option<DeletingRecord>, MetaError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(DELETING)?;
        Ok(table
            .get(sha1.0)?
            .map(|v| DeletingRecord::decode(&v.value())))
    }

    /// `deleting` entries of `pair` with sha1 after `after`, at most `limit`, in sha1
    /// order. Entries of other pairs are skipped over; the table only holds content
    /// waiting for its Valkyrie, so it stays small.
    pub fn deleting_of_pair(
        &self,
        pair: PairId,
        after: Option<Sha1>,
        limit: usize,
    ) -> Result<Vec<(Sha1, DeletingRecord)>, MetaError> {
        use std::ops::Bound;
        let txn = self.db.begin_read()?;
        let table = txn.open_table(DELETING)?;
        let start = match after {
            Some(a) => Bound::Excluded(a.0),
            None => Bound::Unbounded,
        };
        let mut out = Vec::new();
        for entry in table.range::<[u8; 20]>((start, Bound::Unbounded))? {
            let (k, v) = entry?;
            let rec = DeletingRecord::decode(&v.value());
            if rec.pair == pair {
                out.push((Sha1(k.value()), rec));
                if out.len() >= limit {
                    break;
                }
            }
        }
        Ok(out)
    }

    pub fn bucket(&self, name: &str) -> Result<Option<BucketRecord>, MetaError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(BUCKETS)?;
        match table.get(name)? {
            Some(v) => Ok(Some(tables::decode_versioned("buckets", v.value())?)),
            None => Ok(None),
        }
    }

    pub fn buckets(&self) -> Result<Vec<(String, BucketRecord)>, MetaError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(BUCKETS)?;
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (k, v) = entry?;
            out.push((
                k.value().to_string(),
                tables::decode_versioned("buckets", v.value())?,
            ));
        }
        Ok(out)
    }

    pub fn object(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>, MetaError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(OBJECTS)?;
        match table.get((bucket, key.as_bytes()))? {
            Some(v) => Ok(Some(tables::decode_versioned("objects", v.value())?)),
            None => Ok(None),
        }
    }

    /// One page of a bucket listing.
    pub fn list_objects(&self, bucket: &str, query: &ListQuery) -> Result<ListPage, MetaError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(OBJECTS)?;
        list::list(&table, bucket, query)
    }

    pub fn upload(&self, upload_id: &str) -> Result<Option<UploadRecord>, MetaError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(UPLOADS)?;
        match table.get(upload_id)? {
            Some(v) => Ok(Some(tables::decode_versioned("uploads", v.value())?)),
            None => Ok(None),
        }
    }

    pub fn parts(
        &self,
        upload_id: &str,
    ) -> Result<std::collections::BTreeMap<u32, PartRecord>, MetaError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(PARTS)?;
        let mut out = std::collections::BTreeMap::new();
        for entry in table.range((upload_id, 0)..=(upload_id, u32::MAX))? {
            let (k, v) = entry?;
            out.insert(k.value().1, tables::decode_versioned("parts", v.value())?);
        }
        Ok(out)
    }

    /// Uploads in progress in `bucket` whose key starts with `prefix`, after the
    /// (key, upload id) marker, at most `max`; and whether more remain. Uploads are few
    /// (they end in minutes), so this scans the table.
    pub fn uploads(
        &self,
        bucket: &str,
        prefix: &str,
        after: Option<&(String, String)>,
        max: usize,
    ) -> Result<(Vec<(String, UploadRecord)>, bool), MetaError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(UPLOADS)?;
        let mut all = Vec::new();
        for entry in table.iter()? {
            let (k, v) = entry?;
            let u: UploadRecord = tables::decode_versioned("uploads", v.value())?;
            if u.bucket == bucket && u.key.starts_with(prefix) {
                all.push((k.value().to_string(), u));
            }
        }
        all.sort_by(|a, b| (&a.1.key, &a.0).cmp(&(&b.1.key, &b.0)));
        let mut page: Vec<_> = all
            .into_iter()
            .filter(|(id, u)| after.is_none_or(|(k, i)| (&u.key, id) > (k, i)))
            .take(max + 1)
            .collect();
        let truncated = page.len() > max;
        page.truncate(max);
        Ok((page, truncated))
    }

    /// Calls `f` with every object (bucket, key, record).
    pub fn for_each_object(
        &self,
        mut f: impl FnMut(&str, &str, ObjectRecord),
    ) -> Result<(), MetaError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(OBJECTS)?;
        for entry in table.iter()? {
            let (k, v) = entry?;
            let (bucket, key) = k.value();
            let record: ObjectRecord = tables::decode_versioned("objects", v.value())?;
            f(bucket, &String::from_utf8_lossy(key), record);
        }
        Ok(())
    }

    /// Calls `f` with every part of every upload in progress.
    pub fn for_each_part(&self, mut f: impl FnMut(&str, u32, PartRecord)) -> Result<(), MetaError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(PARTS)?;
        for entry in table.iter()? {
            let (k, v) = entry?;
            let (upload, number) = k.value();
            f(
                upload,
                number,
                tables::decode_versioned("parts", v.value())?,
            );
        }
        Ok(())
    }

    /// Calls `f` with every FileDB record.
    pub fn for_each_file(&self, mut f: impl FnMut(Sha1, FileRecord)) -> Result<(), MetaError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(FILES)?;
        for entry in table.iter()? {
            let (k, v) = entry?;
            f(Sha1(k.value()), FileRecord::decode(&v.value()));
        }
        Ok(())
    }

    pub fn pairs(&self) -> Result<Vec<(PairId, PairRecord)>, MetaError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(PAIRS)?;
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (k, v) = entry?;
            out.push((
                PairId(k.value()),
                tables::decode_versioned("pairs", v.value())?,
            ));
        }
        Ok(out)
    }
}
