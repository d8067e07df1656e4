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

pub use command::{Command, ContentSource, DecOutcome, NewObject, Response};
pub use list::{ListPage, ListQuery};
pub use tables::{BucketRecord, DeletingRecord, FileRecord, ObjectRecord};

use tables::{BUCKETS, COUNTERS, DELETING, FILES, OBJECTS, PAIRS};

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
