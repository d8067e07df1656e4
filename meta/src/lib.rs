//! The metadata store: FileDB, PairDB and the S3 index in one embedded redb file.
//!
//! A serving node changes it only through the Raft log ([`raft::Metadata::execute`]): a
//! [`Command`] is made durable in the log on a majority, then every node's state machine
//! applies it with [`apply::apply`]; [`calls`] gives each command its typed answer.
//! [`MetaStore::execute`] applies a command directly and durably, for offline tools only
//! (the benchmark's FileDB loader). Reads use read transactions and never block writers.
//! All calls block; async callers go through `tokio::task::spawn_blocking`.

pub mod apply;
pub mod calls;
pub mod cluster_version;
pub mod command;
pub mod filedb;
pub mod jobs;
pub mod keys;
pub mod lifecycle;
pub mod list;
pub mod native_refs;
pub mod raft;
pub mod tables;

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use placement::{PairId, PairRecord, Sha1};
use redb::{Database, ReadableDatabase, ReadableTable};

pub use calls::{Answer, ObjectPut, PartPut, Referenced};
pub use command::{Command, ContentSource, DecOutcome, NewObject, Response, WritePrecondition};
pub use list::{ListPage, ListQuery};
pub use tables::{
    BucketRecord, Checksum, CorsRule, DeletingRecord, FileRecord, ObjectRecord, PartRecord,
    UploadRecord,
};

use tables::{BUCKETS, COUNTERS, DELETING, FILES, OBJECTS, PAIRS, PARTS, RAFT_STATE, UPLOADS};

/// Serializable: a command's error travels back from the leader to the node that
/// forwarded it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
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
    /// The cluster cannot decide now (no leader, no quorum, leader unreachable): retry
    /// later. The command may or may not be applied later; it was not acknowledged.
    #[error("metadata unavailable: {0}")]
    Unavailable(String),
    /// A command was answered with the response of another command: a bug, found by the
    /// typed calls ([`calls`]).
    #[error("unexpected {0}")]
    Unexpected(String),
    /// `CreateOwnedBucket` of a name another key owns.
    #[error("bucket is owned by another key")]
    BucketOwnedByAnother,
    #[error("no such access key")]
    NoSuchAccessKey,
    #[error("access key already exists")]
    AccessKeyExists,
    /// A bound of the keys table ([`keys::KEYS_MAX`], [`keys::GRANTS_PER_KEY_MAX`]).
    #[error("{0}")]
    KeyLimit(String),
    /// A command that no caller of this version builds (a key outside a job's chunk).
    #[error("invalid command: {0}")]
    InvalidCommand(String),
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
    redb::CommitError,
    redb::SetDurabilityError
);

/// The embedded metadata database.
///
/// The handle can be swapped whole (a Raft snapshot installed from the leader replaces the
/// file): every call takes the current handle once and works on it.
pub struct MetaStore {
    path: PathBuf,
    db: RwLock<Arc<Database>>,
    /// The `keys` table in memory, reloaded by [`MetaStore::reload_keys`] whenever a
    /// command changed it or the database was replaced.
    keys: keys::KeyCache,
}

impl MetaStore {
    /// Opens (or creates) the database and makes sure every table exists, so that read
    /// transactions never meet a missing table.
    pub fn open(path: &Path) -> Result<Self, MetaError> {
        let db = Self::open_db(path)?;
        let store = MetaStore {
            path: path.to_path_buf(),
            db: RwLock::new(Arc::new(db)),
            keys: keys::KeyCache::default(),
        };
        store.reload_keys()?;
        Ok(store)
    }

    /// Every access key as of the last applied command: no redb read.
    pub fn keys(&self) -> Arc<keys::KeyMap> {
        self.keys.get()
    }

    /// Reads the `keys` table into memory again.
    pub fn reload_keys(&self) -> Result<(), MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(keys::KEYS)?;
        self.keys.set(keys::load(&table)?);
        Ok(())
    }

    fn open_db(path: &Path) -> Result<Database, MetaError> {
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
        txn.open_table(RAFT_STATE)?;
        txn.open_table(keys::KEYS)?;
        txn.open_table(jobs::JOBS)?;
        native_refs::build(&txn)?;
        txn.open_table(lifecycle::LIFECYCLE)?;
        txn.commit()?;
        Ok(db)
    }

    /// The current database handle, for read transactions over many tables (the stored-bytes
    /// scan); every change goes through a [`Command`].
    pub fn db(&self) -> Arc<Database> {
        match self.db.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the database with the complete file at `new` (renamed over this store's
    /// path). Calls in progress finish on the old handle; the old file is gone once they
    /// have.
    pub(crate) fn replace_with(&self, new: &Path) -> Result<(), MetaError> {
        let mut guard = match self.db.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        std::fs::rename(new, &self.path).map_err(|e| MetaError::Storage(e.to_string()))?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| MetaError::Storage(e.to_string()))?;
        }
        *guard = Arc::new(Self::open_db(&self.path)?);
        drop(guard);
        self.reload_keys()
    }

    /// Applies one command in its own durable transaction, outside any Raft log: for
    /// offline tools only (a serving node goes through [`raft::Metadata::execute`]).
    pub fn execute(&self, cmd: &Command) -> Result<Response, MetaError> {
        let txn = self.db().begin_write()?;
        match apply::apply(&txn, cmd) {
            Ok(resp) => {
                txn.commit()?;
                if cmd.touches_keys() {
                    self.reload_keys()?;
                }
                Ok(resp)
            }
            Err(e) => {
                txn.abort()?;
                Err(e)
            }
        }
    }

    /// A digest of every table (see [`raft::snapshot::digest`]).
    pub fn digest(&self) -> Result<raft::snapshot::Digest, MetaError> {
        raft::snapshot::digest(&self.db()).map_err(|e| MetaError::Storage(e.to_string()))
    }

    pub fn file(&self, sha1: &Sha1) -> Result<Option<FileRecord>, MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(FILES)?;
        table
            .get(sha1.0)?
            .map(|v| FileRecord::decode_checked(sha1, &v.value()))
            .transpose()
    }

    pub fn deleting(&self, sha1: &Sha1) -> Result<Option<DeletingRecord>, MetaError> {
        let txn = self.db().begin_read()?;
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
        let txn = self.db().begin_read()?;
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
        let txn = self.db().begin_read()?;
        let table = txn.open_table(BUCKETS)?;
        match table.get(name)? {
            Some(v) => Ok(Some(BucketRecord::decode(v.value())?)),
            None => Ok(None),
        }
    }

    pub fn buckets(&self) -> Result<Vec<(String, BucketRecord)>, MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(BUCKETS)?;
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (k, v) = entry?;
            out.push((k.value().to_string(), BucketRecord::decode(v.value())?));
        }
        Ok(out)
    }

    pub fn object(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>, MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(OBJECTS)?;
        match table.get((bucket, key.as_bytes()))? {
            Some(v) => Ok(Some(tables::decode_versioned("objects", v.value())?)),
            None => Ok(None),
        }
    }

    /// One page of a bucket listing.
    pub fn list_objects(&self, bucket: &str, query: &ListQuery) -> Result<ListPage, MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(OBJECTS)?;
        list::list(&table, bucket, query)
    }

    pub fn upload(&self, upload_id: &str) -> Result<Option<UploadRecord>, MetaError> {
        let txn = self.db().begin_read()?;
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
        let txn = self.db().begin_read()?;
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
        let txn = self.db().begin_read()?;
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
        let txn = self.db().begin_read()?;
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
        let txn = self.db().begin_read()?;
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

    /// One job.
    pub fn job(&self, id: u64) -> Result<Option<jobs::JobRecord>, MetaError> {
        let txn = self.db().begin_read()?;
        match txn.open_table(jobs::JOBS)?.get(id)? {
            Some(v) => Ok(Some(tables::decode_versioned("jobs", v.value())?)),
            None => Ok(None),
        }
    }

    /// Every job kept (at most the running ones and [`jobs::FINISHED_KEPT`] finished),
    /// by id.
    pub fn jobs(&self) -> Result<Vec<(u64, jobs::JobRecord)>, MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(jobs::JOBS)?;
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (k, v) = entry?;
            out.push((k.value(), tables::decode_versioned("jobs", v.value())?));
        }
        Ok(out)
    }

    /// Up to `limit` keys of `bucket` under `prefix` after `cursor`, in order.
    pub fn keys_after(
        &self,
        bucket: &str,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(OBJECTS)?;
        let start = cursor.unwrap_or(prefix);
        let mut out = Vec::new();
        for entry in table.range((bucket, start.as_bytes())..)? {
            let (k, _) = entry?;
            let (b, key) = k.value();
            if b != bucket || !key.starts_with(prefix.as_bytes()) || out.len() >= limit {
                break;
            }
            if cursor.is_some_and(|c| key == c.as_bytes()) {
                continue;
            }
            // Keys are stored as the S3 key's bytes, always valid UTF-8.
            out.push(String::from_utf8_lossy(key).into_owned());
        }
        Ok(out)
    }

    /// Calls `f` with the native references of every content that has some.
    pub fn for_each_native(
        &self,
        mut f: impl FnMut(Sha1, native_refs::NativeRefs),
    ) -> Result<(), MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(native_refs::NATIVE_REFS)?;
        for entry in table.iter()? {
            let (k, v) = entry?;
            f(Sha1(k.value()), native_refs::NativeRefs::decode(&v.value()));
        }
        Ok(())
    }

    /// Calls `f` with every FileDB record.
    pub fn for_each_file(&self, mut f: impl FnMut(Sha1, FileRecord)) -> Result<(), MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(FILES)?;
        for entry in table.iter()? {
            let (k, v) = entry?;
            let sha1 = Sha1(k.value());
            f(sha1, FileRecord::decode_checked(&sha1, &v.value())?);
        }
        Ok(())
    }

    pub fn pairs(&self) -> Result<Vec<(PairId, PairRecord)>, MetaError> {
        let txn = self.db().begin_read()?;
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
