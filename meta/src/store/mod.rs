//! [`MetaStore`]: the embedded redb file that holds every table, and the handle on it.
//!
//! This file opens the database, swaps it whole (a snapshot installed from the leader) and
//! applies a command outside the Raft log (offline tools); the reads of each table family
//! are beside it: [`files`] (FileDB, `deleting`, native references), [`pairs`] (PairDB),
//! [`objects`] (buckets and the S3 index), [`uploads`] (multipart uploads and their
//! parts), [`jobs`], [`lifecycle`] and [`cross`] (ownership, the outbox, pending
//! references).

mod cross;
mod files;
pub mod index;
mod jobs;
mod lifecycle;
pub mod load;
mod objects;
mod pairs;
mod uploads;
mod versions;
pub use cross::PendingRef;
pub use uploads::UploadsPage;
pub use versions::CurrentVersion;

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use redb::{Database, ReadableDatabase};

use crate::jobs::JOBS;
use crate::lifecycle::LIFECYCLE;
use crate::tables::{
    BUCKETS, COUNTERS, DELETING, FILES, NULL_VERSIONS, OBJECTS, PAIRS, PARTS, RAFT_STATE, UPLOADS,
    VERSIONS,
};
use crate::{Command, MetaError, Response, apply, cluster_version, keys, native_refs, raft};

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
    /// The FileDB operations this replica applied ([`load`]): a group's leader splits it
    /// when their rate stays high (`raft/split.rs`).
    load: std::sync::Mutex<load::Load>,
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
            load: Default::default(),
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
        txn.open_table(VERSIONS)?;
        txn.open_table(NULL_VERSIONS)?;
        txn.open_table(COUNTERS)?;
        txn.open_table(UPLOADS)?;
        txn.open_table(PARTS)?;
        txn.open_table(RAFT_STATE)?;
        txn.open_table(keys::KEYS)?;
        txn.open_table(JOBS)?;
        native_refs::build(&txn)?;
        txn.open_table(LIFECYCLE)?;
        txn.open_table(crate::checksums::UPLOAD_CHECKSUMS)?;
        txn.open_table(crate::checksums::OBJECT_CHECKSUMS)?;
        txn.open_table(crate::extras::BUCKET_EXTRAS)?;
        txn.open_table(crate::extras::UPLOAD_EXTRAS)?;
        txn.open_table(crate::shard_map::SHARD_MAP)?;
        txn.open_table(crate::ref_log::REF_LOG)?;
        txn.open_table(crate::ref_log::REF_PENDING)?;
        txn.open_table(crate::ref_log::REF_RELEASED)?;
        txn.open_table(crate::ownership::OWNERSHIP)?;
        txn.open_table(crate::outbox::OUTBOX)?;
        txn.open_table(crate::outbox::HELD)?;
        txn.open_table(crate::outbox::OBJECT_REF_IDS)?;
        txn.open_table(crate::outbox::PART_REF_IDS)?;
        txn.open_table(crate::outbox::FENCES)?;
        txn.open_table(crate::outbox::FENCE_AGES)?;
        txn.open_table(crate::bucket_copies::BUCKET_REVISIONS)?;
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

    /// The records of every table (each table's length is in its header: no scan).
    pub fn record_count(&self) -> Result<u64, MetaError> {
        let txn = self.db().begin_read()?;
        raft::snapshot::count_records(&txn).map_err(|e| MetaError::Storage(e.to_string()))
    }

    /// A digest of every table (see [`raft::snapshot::digest`]).
    pub fn digest(&self) -> Result<raft::snapshot::Digest, MetaError> {
        raft::snapshot::digest(&self.db()).map_err(|e| MetaError::Storage(e.to_string()))
    }

    /// The group's format version as this node's state machine has applied it.
    pub fn cluster_version(&self) -> Result<u32, MetaError> {
        let db = self.db();
        let txn = db.begin_read()?;
        cluster_version::read_in(&txn.open_table(RAFT_STATE)?)
    }

    /// The stored shard map (None: the group never changed it, and runs
    /// [`ShardMap::single`](crate::groups::ShardMap::single)).
    pub fn shard_map(&self) -> Result<Option<crate::groups::ShardMap>, MetaError> {
        let db = self.db();
        let txn = db.begin_read()?;
        crate::shard_map::read(&txn.open_table(crate::shard_map::SHARD_MAP)?)
    }

    /// A copy of this store made through a snapshot file in `dir` (tests: every table
    /// travels in snapshots).
    #[cfg(test)]
    pub(crate) fn through_snapshot(&self, dir: &Path) -> MetaStore {
        let file = dir.join("snap");
        {
            let db = self.db();
            let read = db.begin_read().unwrap();
            raft::snapshot::write(&read, Vec::new(), std::fs::File::create(&file).unwrap())
                .unwrap();
        }
        let restored = dir.join("restored.redb");
        raft::snapshot::load(&file, &restored).unwrap();
        MetaStore::open(&restored).unwrap()
    }

    /// FileDB operations this store has applied since the process started.
    pub fn filedb_ops(&self) -> u64 {
        self.load
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .total()
    }

    /// Where the FileDB operations since the last call divide in two (see
    /// [`load::Load::take_split_point`]).
    pub fn take_load_split_point(&self) -> Option<[u8; 20]> {
        self.load
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take_split_point()
    }

    /// Counts the FileDB operations of `commands`, applied (the state machine, after each
    /// batch).
    pub(crate) fn count_filedb_ops<'c>(&self, commands: impl Iterator<Item = &'c Command>) {
        let mut load = self
            .load
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for cmd in commands {
            cmd.for_each_filedb_op(|sha1| load.count(sha1));
        }
    }

    /// The nodes leaving the cluster (root only; `SetLeaving`).
    pub fn leaving(&self) -> Result<std::collections::BTreeSet<crate::groups::NodeId>, MetaError> {
        let db = self.db();
        let txn = db.begin_read()?;
        crate::shard_map::read_leaving(&txn.open_table(crate::shard_map::SHARD_MAP)?)
    }

    /// The version of the plan a cancel was asked of (root only), if any.
    pub fn plan_cancel(&self) -> Result<Option<u64>, MetaError> {
        let db = self.db();
        let txn = db.begin_read()?;
        crate::shard_map::read_cancel(&txn.open_table(crate::shard_map::SHARD_MAP)?)
    }

    /// The map a split under way will commit (root only), if any.
    pub fn planned_map(&self) -> Result<Option<crate::groups::ShardMap>, MetaError> {
        let db = self.db();
        let txn = db.begin_read()?;
        crate::shard_map::read_planned(&txn.open_table(crate::shard_map::SHARD_MAP)?)
    }
}
