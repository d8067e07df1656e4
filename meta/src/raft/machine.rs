//! The Raft state machine: `meta.redb`, changed by applying committed log entries with the
//! one [`apply`] function.
//!
//! Each command of an entry runs in its own redb write transaction (a command that fails
//! changes nothing, as before), committed **without fsync**: the log already holds the
//! entry durably on a majority. After each entry, `last_applied` is written in one more
//! transaction; every [`CHECKPOINT_INTERVAL`] (and before a snapshot and at shutdown) that
//! one is durable, which persists everything before it. After `kill -9`, redb opens at the
//! last durable commit, which is always an entry boundary with its `last_applied`, and
//! openraft re-applies the committed entries after it from the log. That is why the log is
//! never purged past a snapshot, and a snapshot is only built after a durable checkpoint.
//!
//! The same holds for a snapshot installed from the leader, which openraft 0.9 does not
//! order: it hands the install to the state machine's task and purges the log covered by
//! the snapshot at once, from its own task. A kill -9 between the two left a log purged
//! past a state machine still at its old checkpoint, and a node that could never restart
//! ("Failed to get log entries"). So the state machine publishes the index it holds
//! durably ([`DurableIndex`]) and the log store's purge waits for it (see `log.rs`).
//!
//! Back of the envelope: a non-durable redb commit costs tens of microseconds, a durable one
//! an fsync (milliseconds on this machine's disk): one per second is noise, one per command
//! was the single-node write path's largest cost.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::storage::RaftStateMachine;
use openraft::{
    Entry, EntryPayload, LogId, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership,
};
use redb::{Database, Durability, ReadableDatabase, WriteTransaction};
use tokio::sync::watch;

use super::snapshot;
use super::types::{BatchResult, Node, NodeId, TypeConfig};
use crate::tables::RAFT_STATE;
use crate::{Command, MetaError, MetaStore, apply::apply, cluster_version};

/// How often applied state is made durable (an fsync of `meta.redb`).
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
/// ... or after this many entries, whichever comes first.
const CHECKPOINT_ENTRIES: u64 = 20_000;

const KEY_APPLIED: &str = "last_applied";
const KEY_MEMBERSHIP: &str = "membership";

type StorageResult<T> = Result<T, StorageError<NodeId>>;

fn sm_read(e: impl std::fmt::Display) -> StorageError<NodeId> {
    StorageIOError::read_state_machine(&std::io::Error::other(e.to_string())).into()
}

fn sm_write(e: impl std::fmt::Display) -> StorageError<NodeId> {
    StorageIOError::write_state_machine(&std::io::Error::other(e.to_string())).into()
}

fn snap_err(e: impl std::fmt::Display) -> StorageError<NodeId> {
    StorageIOError::write_snapshot(None, &std::io::Error::other(e.to_string())).into()
}

/// The last applied log id and the membership it carries.
pub(crate) type AppliedState = (Option<LogId<NodeId>>, StoredMembership<NodeId, Node>);

/// What the state machine has applied, as stored beside the tables.
pub(crate) fn applied_state(db: &Database) -> Result<AppliedState, MetaError> {
    let txn = db.begin_read()?;
    let table = txn.open_table(RAFT_STATE)?;
    let decode = |key: &str| -> Result<Option<Vec<u8>>, MetaError> {
        Ok(table.get(key)?.map(|v| v.value().to_vec()))
    };
    let applied = match decode(KEY_APPLIED)? {
        Some(b) => postcard::from_bytes(&b).map_err(|e| MetaError::Corrupt(e.to_string()))?,
        None => None,
    };
    let membership = match decode(KEY_MEMBERSHIP)? {
        Some(b) => postcard::from_bytes(&b).map_err(|e| MetaError::Corrupt(e.to_string()))?,
        None => StoredMembership::default(),
    };
    Ok((applied, membership))
}

fn put_raft_state(
    txn: &WriteTransaction,
    applied: &Option<LogId<NodeId>>,
    membership: Option<&StoredMembership<NodeId, Node>>,
) -> Result<(), MetaError> {
    fn enc<T: serde::Serialize>(v: &T) -> Result<Vec<u8>, MetaError> {
        postcard::to_stdvec(v).map_err(|e| MetaError::Corrupt(e.to_string()))
    }
    let mut table = txn.open_table(RAFT_STATE)?;
    table.insert(KEY_APPLIED, enc(applied)?.as_slice())?;
    if let Some(m) = membership {
        table.insert(KEY_MEMBERSHIP, enc(m)?.as_slice())?;
    }
    Ok(())
}

/// Applies one command in its own non-durable transaction; an error changes nothing.
fn apply_one(db: &Database, cmd: &Command) -> Result<crate::Response, MetaError> {
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::None)?;
    match apply(&txn, cmd) {
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

/// Applies every command of `entries` in `txn`, then `state`, and commits: one result per
/// entry. `None`, with nothing committed, as soon as a command fails.
fn apply_together(
    txn: WriteTransaction,
    entries: &[Entry<TypeConfig>],
    state: impl Fn(&WriteTransaction) -> Result<(), MetaError>,
) -> Result<Option<Vec<BatchResult>>, MetaError> {
    let mut results = Vec::with_capacity(entries.len());
    for entry in entries {
        let mut out = Vec::new();
        if let EntryPayload::Normal(batch) = &entry.payload {
            for cmd in &batch.0 {
                match apply(&txn, cmd) {
                    Ok(resp) => out.push(Ok(resp)),
                    Err(_) => {
                        txn.abort()?;
                        return Ok(None);
                    }
                }
            }
        }
        results.push(BatchResult(out));
    }
    state(&txn)?;
    txn.commit()?;
    Ok(Some(results))
}

/// Whether a command changes PairDB (the in-memory pair table must follow).
fn touches_pairs(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::PutPair { .. } | Command::AddPair { .. } | Command::SetPairFlags { .. }
    )
}

/// Where snapshot files live, and the current one.
#[derive(Clone)]
pub(crate) struct SnapshotDir {
    dir: PathBuf,
}

impl SnapshotDir {
    pub(crate) fn new(dir: PathBuf) -> Self {
        SnapshotDir { dir }
    }

    /// The newest complete snapshot (built here or installed from the leader).
    fn current(&self) -> PathBuf {
        self.dir.join("current.snap")
    }

    fn temp(&self, what: &str) -> PathBuf {
        self.dir
            .join(format!("{what}-{}.tmp", rand::random::<u64>()))
    }

    /// Removes temp files a crash left behind.
    fn clean(&self) {
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                if e.path().extension().is_some_and(|x| x == "tmp") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }

    /// Makes `tmp` the current snapshot (atomic rename, then the folder fsynced).
    fn publish(&self, tmp: &Path) -> std::io::Result<()> {
        std::fs::rename(tmp, self.current())?;
        std::fs::File::open(&self.dir)?.sync_all()
    }
}

/// The highest log index whose effects `meta.redb` holds durably: what a restart after
/// kill -9 would find applied. Only rises.
#[derive(Clone)]
pub struct DurableIndex(Arc<watch::Sender<u64>>);

impl DurableIndex {
    fn new(index: u64) -> Self {
        DurableIndex(Arc::new(watch::channel(index).0))
    }

    /// Records that everything up to `log_id` is durable.
    fn reached(&self, log_id: Option<LogId<NodeId>>) {
        let index = log_id.map_or(0, |l| l.index);
        self.0.send_if_modified(|d| {
            let rises = index > *d;
            if rises {
                *d = index;
            }
            rises
        });
    }

    /// A receiver of the index, for the log store's purge.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.subscribe()
    }
}

/// Bookkeeping shared by the state machine and its snapshot builders.
pub struct StateMachine {
    meta: Arc<MetaStore>,
    snapshots: SnapshotDir,
    last_checkpoint: Instant,
    entries_since_checkpoint: u64,
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, Node>,
    /// Bumped after a command changed PairDB.
    pairs_changed: watch::Sender<u64>,
    /// Bumped after the shard map or the membership changed (see `Replicas::adopt`).
    map_changed: watch::Sender<u64>,
    /// The last applied log index, for readers waiting on a read index.
    applied_index: watch::Sender<u64>,
    durable: DurableIndex,
}

impl StateMachine {
    pub(crate) fn open(
        meta: Arc<MetaStore>,
        snapshots: SnapshotDir,
        pairs_changed: watch::Sender<u64>,
        map_changed: watch::Sender<u64>,
        applied_index: watch::Sender<u64>,
    ) -> Result<Self, MetaError> {
        std::fs::create_dir_all(&snapshots.dir).map_err(|e| MetaError::Storage(e.to_string()))?;
        snapshots.clean();
        let (last_applied, membership) = applied_state(&meta.db())?;
        applied_index.send_replace(last_applied.map_or(0, |l| l.index));
        // What a file just opened holds is what a crash now would leave.
        let durable = DurableIndex::new(last_applied.map_or(0, |l| l.index));
        Ok(StateMachine {
            meta,
            snapshots,
            last_checkpoint: Instant::now(),
            // The first apply after a start is a checkpoint: it is the replay of what the
            // last run applied without one, and a process killed again and again within a
            // checkpoint interval must not make that replay grow without end.
            entries_since_checkpoint: CHECKPOINT_ENTRIES,
            last_applied,
            membership,
            pairs_changed,
            map_changed,
            applied_index,
            durable,
        })
    }

    /// The index this state machine holds durably, for [`super::log::LogStore::gate_purges`].
    pub fn durable_index(&self) -> DurableIndex {
        self.durable.clone()
    }

    /// Applies entries in log order; one result per entry.
    ///
    /// All their commands first go into one transaction with the applied state: a redb
    /// commit, durable or not, rewrites the pages on the path to every key it changed, so
    /// one commit per command cost a group's worth of commits per log entry (on every
    /// replica). Only if some command fails is that transaction dropped and each command
    /// applied in its own, where a failure changes nothing; both ways give every command
    /// the same result, on every node.
    fn apply_blocking(
        db: &Database,
        entries: Vec<Entry<TypeConfig>>,
        mut last_applied: Option<LogId<NodeId>>,
        mut membership: StoredMembership<NodeId, Node>,
        durable: bool,
    ) -> Result<Applied, MetaError> {
        let mut pairs = false;
        let mut keys = false;
        let mut map = false;
        let mut membership_changed = false;
        for entry in &entries {
            match &entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(batch) => {
                    for cmd in &batch.0 {
                        // A format this binary does not know: stop here (openraft stops
                        // the node on a state machine error) rather than apply what
                        // follows differently from the nodes that know it.
                        if let Err(e) = cluster_version::check_known(cmd) {
                            tracing::error!("{e}");
                            return Err(MetaError::Storage(e.to_string()));
                        }
                        pairs |= touches_pairs(cmd);
                        map |= matches!(cmd, Command::SetShardMap { .. } | Command::PlanMap { .. });
                        keys |= cmd.touches_keys();
                    }
                }
                EntryPayload::Membership(m) => {
                    membership = StoredMembership::new(Some(entry.log_id), m.clone());
                    membership_changed = true;
                }
            }
            last_applied = Some(entry.log_id);
        }
        let changed_membership = membership_changed.then_some(&membership);
        let state = |txn: &WriteTransaction| put_raft_state(txn, &last_applied, changed_membership);
        let begin = || -> Result<WriteTransaction, MetaError> {
            let mut txn = db.begin_write()?;
            txn.set_durability(if durable {
                Durability::Immediate
            } else {
                Durability::None
            })?;
            // A durable commit records the allocator state, so that a restart after
            // kill -9 loads it instead of walking the whole file (seconds at 10 M objects).
            txn.set_quick_repair(durable);
            Ok(txn)
        };
        let results = match apply_together(begin()?, &entries, state)? {
            Some(results) => results,
            None => {
                let results = entries
                    .iter()
                    .map(|entry| match &entry.payload {
                        EntryPayload::Normal(batch) => {
                            BatchResult(batch.0.iter().map(|cmd| apply_one(db, cmd)).collect())
                        }
                        _ => BatchResult(Vec::new()),
                    })
                    .collect();
                let txn = begin()?;
                state(&txn)?;
                txn.commit()?;
                results
            }
        };
        Ok(Applied {
            results,
            last_applied,
            membership,
            pairs,
            keys,
            map: map || membership_changed,
        })
    }

    /// Applies entries offline (see [`super::replay_offline`]); the membership after them.
    pub(crate) fn replay_blocking(
        db: &Database,
        entries: Vec<Entry<TypeConfig>>,
        last_applied: Option<LogId<NodeId>>,
        membership: StoredMembership<NodeId, Node>,
    ) -> Result<StoredMembership<NodeId, Node>, MetaError> {
        Ok(Self::apply_blocking(db, entries, last_applied, membership, false)?.membership)
    }

    /// Makes everything applied so far durable.
    pub(crate) fn checkpoint(db: &Database) -> Result<(), MetaError> {
        let mut txn = db.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        txn.set_quick_repair(true);
        txn.commit()?;
        Ok(())
    }
}

struct Applied {
    results: Vec<BatchResult>,
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, Node>,
    pairs: bool,
    /// A command changed the `keys` table: the in-memory copy was reloaded.
    keys: bool,
    /// The shard map or the membership changed.
    map: bool,
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> StorageResult<AppliedState> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<BatchResult>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        let count = entries.len() as u64;

        self.entries_since_checkpoint += count;
        let durable = self.last_checkpoint.elapsed() >= CHECKPOINT_INTERVAL
            || self.entries_since_checkpoint >= CHECKPOINT_ENTRIES;
        let db = self.meta.db();
        let meta = self.meta.clone();
        let (last, membership) = (self.last_applied, self.membership.clone());
        let applied = tokio::task::spawn_blocking(move || {
            let commands = entries.iter().flat_map(|e| match &e.payload {
                EntryPayload::Normal(batch) => batch.0.as_slice(),
                _ => &[],
            });
            meta.count_filedb_ops(commands);
            let applied = Self::apply_blocking(&db, entries, last, membership, durable)?;
            // Before the results go back: a client told its key was created or deleted
            // finds it so on this node's next request.
            if applied.keys {
                meta.reload_keys()?;
            }
            Ok::<_, MetaError>(applied)
        })
        .await
        .map_err(sm_write)?
        .map_err(sm_write)?;
        if durable {
            self.last_checkpoint = Instant::now();
            self.entries_since_checkpoint = 0;
            self.durable.reached(applied.last_applied);
        }
        self.last_applied = applied.last_applied;
        self.membership = applied.membership;
        if applied.pairs {
            self.pairs_changed.send_modify(|v| *v += 1);
        }
        if applied.map {
            self.map_changed.send_modify(|v| *v += 1);
        }
        self.applied_index
            .send_replace(self.last_applied.map_or(0, |l| l.index));
        Ok(applied.results)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            meta: self.meta.clone(),
            snapshots: self.snapshots.clone(),
            durable: self.durable.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<tokio::fs::File>> {
        let path = self.snapshots.temp("receiving");
        let file = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .await
            .map_err(snap_err)?;
        // Unlinked at once: the handle is all openraft needs, and a crash leaves nothing.
        // install_snapshot copies it to a named file.
        let _ = tokio::fs::remove_file(&path).await;
        Ok(Box::new(file))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, Node>,
        snapshot: Box<tokio::fs::File>,
    ) -> StorageResult<()> {
        let received = self.snapshots.temp("received");
        let building = self.meta.path().with_extension("redb.install");
        let store = self.meta.clone();
        let snapshots = self.snapshots.clone();
        let want = meta.clone();
        let mut file = snapshot.into_std().await;
        tokio::task::spawn_blocking(move || -> Result<(), String> {
            use std::io::Seek;
            file.seek(std::io::SeekFrom::Start(0))
                .map_err(|e| e.to_string())?;
            let mut out = std::fs::File::create(&received).map_err(|e| e.to_string())?;
            std::io::copy(&mut file, &mut out).map_err(|e| e.to_string())?;
            out.sync_all().map_err(|e| e.to_string())?;
            let _ = std::fs::remove_file(&building);
            snapshot::load(&received, &building).map_err(|e| e.to_string())?;
            // The snapshot's own bookkeeping must match what the leader says it is.
            let db = Database::create(&building).map_err(|e| e.to_string())?;
            let (applied, _) = applied_state(&db).map_err(|e| e.to_string())?;
            if applied != want.last_log_id {
                return Err(format!(
                    "snapshot holds state at {applied:?}, the leader announced {:?}",
                    want.last_log_id
                ));
            }
            let txn = db.begin_write().map_err(|e| e.to_string())?;
            put_raft_state(&txn, &want.last_log_id, Some(&want.last_membership))
                .map_err(|e| e.to_string())?;
            txn.commit().map_err(|e| e.to_string())?;
            drop(db);
            store.replace_with(&building).map_err(|e| e.to_string())?;
            snapshots.publish(&received).map_err(|e| e.to_string())?;
            Ok(())
        })
        .await
        .map_err(snap_err)?
        .map_err(snap_err)?;
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.last_checkpoint = Instant::now();
        self.entries_since_checkpoint = 0;
        // The new file was fsynced and renamed into place (the folder fsynced too): only
        // now may the log covered by the snapshot go.
        self.durable.reached(meta.last_log_id);
        self.pairs_changed.send_modify(|v| *v += 1);
        self.map_changed.send_modify(|v| *v += 1);
        self.applied_index
            .send_replace(self.last_applied.map_or(0, |l| l.index));
        tracing::info!(last_log_id = ?meta.last_log_id, "installed a snapshot from the leader");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        let path = self.snapshots.current();
        // The header and the data come from one open file: a snapshot built or installed
        // meanwhile renames a new file over the path, and a meta read from one file sent
        // with the data of the next made the follower refuse the install and stop.
        let opened = tokio::task::spawn_blocking(move || snapshot::open_with_header(&path))
            .await
            .map_err(sm_read)?;
        let (header, file) = match opened {
            Ok(opened) => opened,
            Err(snapshot::SnapshotError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(None);
            }
            Err(e) => return Err(sm_read(e)),
        };
        let meta: SnapshotMeta<NodeId, Node> =
            postcard::from_bytes(&header.meta).map_err(sm_read)?;
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(tokio::fs::File::from_std(file)),
        }))
    }
}

/// Builds a snapshot from one consistent read transaction, while the state machine goes on
/// applying.
pub struct SnapshotBuilder {
    meta: Arc<MetaStore>,
    snapshots: SnapshotDir,
    durable: DurableIndex,
}

/// Writes a snapshot of `db` (one read transaction) to `path`; its metadata.
pub(crate) fn build_snapshot_file(
    db: &Database,
    path: &Path,
) -> Result<SnapshotMeta<NodeId, Node>, String> {
    let txn = db.begin_read().map_err(|e| e.to_string())?;
    let (last_log_id, last_membership) = {
        let table = txn.open_table(RAFT_STATE).map_err(|e| e.to_string())?;
        let get = |k: &str| -> Result<Option<Vec<u8>>, String> {
            Ok(table
                .get(k)
                .map_err(|e| e.to_string())?
                .map(|v| v.value().to_vec()))
        };
        let applied: Option<LogId<NodeId>> = match get(KEY_APPLIED)? {
            Some(b) => postcard::from_bytes(&b).map_err(|e| e.to_string())?,
            None => None,
        };
        let membership: StoredMembership<NodeId, Node> = match get(KEY_MEMBERSHIP)? {
            Some(b) => postcard::from_bytes(&b).map_err(|e| e.to_string())?,
            None => StoredMembership::default(),
        };
        (applied, membership)
    };
    // Everything this transaction sees becomes durable before the snapshot can let the
    // log be purged behind it.
    StateMachine::checkpoint(db).map_err(|e| e.to_string())?;
    let snapshot_id = format!(
        "{}-{}",
        last_log_id.map_or(0, |l| l.index),
        rand::random::<u32>()
    );
    let meta = SnapshotMeta {
        last_log_id,
        last_membership,
        snapshot_id,
    };
    let meta_bytes = postcard::to_stdvec(&meta).map_err(|e| e.to_string())?;
    let file = std::fs::File::create(path).map_err(|e| e.to_string())?;
    snapshot::write(&txn, meta_bytes, &file).map_err(|e| e.to_string())?;
    file.sync_all().map_err(|e| e.to_string())?;
    Ok(meta)
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        let db = self.meta.db();
        let snapshots = self.snapshots.clone();
        let tmp = snapshots.temp("building");
        let (meta, file) = tokio::task::spawn_blocking(move || {
            let meta = build_snapshot_file(&db, &tmp)?;
            // Opened before it is published: the handle is this snapshot's, whatever is
            // renamed over the current one later.
            let file = std::fs::File::open(&tmp).map_err(|e| e.to_string())?;
            snapshots.publish(&tmp).map_err(|e| e.to_string())?;
            Ok::<_, String>((meta, file))
        })
        .await
        .map_err(snap_err)?
        .map_err(snap_err)?;
        // build_snapshot_file checkpointed before writing: the snapshot's state is durable.
        self.durable.reached(meta.last_log_id);
        let file = tokio::fs::File::from_std(file);
        tracing::info!(last_log_id = ?meta.last_log_id, "built a snapshot");
        Ok(Snapshot {
            meta,
            snapshot: Box::new(file),
        })
    }
}

#[cfg(test)]
mod tests {
    use openraft::CommittedLeaderId;

    use super::super::Batch;
    use super::*;

    fn entry(index: u64, cmds: Vec<Command>) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(Batch(cmds)),
        }
    }

    fn create(bucket: &str) -> Command {
        Command::CreateBucket {
            bucket: bucket.into(),
            created_ms: 1,
        }
    }

    fn apply_entries(db: &Database, entries: Vec<Entry<TypeConfig>>) -> Vec<Vec<bool>> {
        let (last, membership) = applied_state(db).unwrap();
        let applied = StateMachine::apply_blocking(db, entries, last, membership, false).unwrap();
        applied
            .results
            .iter()
            .map(|r| r.0.iter().map(Result::is_ok).collect())
            .collect()
    }

    /// Entries applied together give each command the result it would get alone: a
    /// failing command (a bucket created twice) fails alone and changes nothing, the
    /// others are applied, and the applied state is the last entry's either way.
    #[test]
    fn a_failing_command_fails_alone_among_entries_applied_together() {
        let dir = tempfile::tempdir().unwrap();
        let meta = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
        let db = meta.db();
        let names = || -> Vec<String> {
            meta.buckets()
                .unwrap()
                .into_iter()
                .map(|(name, _)| name)
                .collect()
        };
        // No failure: one transaction.
        let oks = apply_entries(&db, vec![entry(1, vec![create("a"), create("b")])]);
        assert_eq!(oks, vec![vec![true, true]]);
        assert_eq!(applied_state(&db).unwrap().0.map(|l| l.index), Some(1));
        // A failure in the middle: each command on its own.
        let oks = apply_entries(
            &db,
            vec![
                entry(2, vec![create("c"), create("a")]),
                entry(3, vec![create("d")]),
                entry(4, vec![]),
            ],
        );
        assert_eq!(oks, vec![vec![true, false], vec![true], vec![]]);
        assert_eq!(names(), ["a", "b", "c", "d"]);
        assert_eq!(applied_state(&db).unwrap().0.map(|l| l.index), Some(4));
    }
    fn machine(dir: &Path) -> StateMachine {
        let meta = Arc::new(MetaStore::open(&dir.join("meta.redb")).unwrap());
        StateMachine::open(
            meta,
            SnapshotDir::new(dir.join("snapshots")),
            watch::channel(0).0,
            watch::channel(0).0,
            watch::channel(0).0,
        )
        .unwrap()
    }

    /// A follower's log purge after a snapshot from the leader waits until the state
    /// machine holds that snapshot durably: openraft 0.9 issues the purge as soon as it has
    /// handed the install over, and a kill -9 between the two left a node that could never
    /// restart (its log purged to the snapshot, its state machine at an older checkpoint).
    #[tokio::test]
    async fn a_purge_waits_for_the_installed_snapshot_to_be_durable() {
        use super::super::log::LogStore;
        use openraft::storage::RaftLogStorage;

        // The leader: nine entries applied, a snapshot at 9.
        let leader_dir = tempfile::tempdir().unwrap();
        let mut leader = machine(leader_dir.path());
        let entries: Vec<_> = (1..=9)
            .map(|i| entry(i, vec![create(&format!("b{i}"))]))
            .collect();
        leader.apply(entries).await.unwrap();
        let mut builder = leader.get_snapshot_builder().await;
        let snap = builder.build_snapshot().await.unwrap();
        assert_eq!(snap.meta.last_log_id.map(|l| l.index), Some(9));
        let bytes = std::fs::read(leader.snapshots.current()).unwrap();

        // The follower: nothing applied; its log store gated on its state machine.
        let follower_dir = tempfile::tempdir().unwrap();
        let mut follower = machine(follower_dir.path());
        let mut log = LogStore::open(&follower_dir.path().join("raft.redb")).unwrap();
        log.gate_purges(follower.durable_index().subscribe());
        let upto = snap.meta.last_log_id.unwrap();
        let mut purge = tokio::spawn({
            let mut log = log.clone();
            async move { log.purge(upto).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !purge.is_finished(),
            "purged before the snapshot was installed"
        );
        assert_eq!(log.get_log_state().await.unwrap().last_purged_log_id, None);

        // The install ends the wait, and a restart finds the snapshot's state.
        let mut file = follower.begin_receiving_snapshot().await.unwrap();
        use tokio::io::AsyncWriteExt;
        file.write_all(&bytes).await.unwrap();
        file.flush().await.unwrap();
        follower.install_snapshot(&snap.meta, file).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), &mut purge)
            .await
            .expect("the purge ends once the install is durable")
            .unwrap()
            .unwrap();
        assert_eq!(
            log.get_log_state().await.unwrap().last_purged_log_id,
            Some(upto)
        );
        drop(follower);
        let reopened = machine(follower_dir.path());
        assert_eq!(reopened.last_applied, Some(upto));

        // A purge of what the state machine already holds does not wait.
        let mut other = LogStore::open(&follower_dir.path().join("other.redb")).unwrap();
        other.gate_purges(reopened.durable_index().subscribe());
        tokio::time::timeout(Duration::from_secs(10), other.purge(upto))
            .await
            .expect("no wait for what is durable")
            .unwrap();
    }

    /// The snapshot sent to a follower is one file: its announced meta is the meta of the
    /// data sent. New snapshots are built (renamed over the current one) all the while; a
    /// meta read from one file and data from the next made the follower refuse the install
    /// and stop for good.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_snapshot_sent_is_the_snapshot_announced() {
        let dir = tempfile::tempdir().unwrap();
        let mut sm = machine(dir.path());
        sm.apply(vec![entry(1, vec![create("b1")])]).await.unwrap();
        let mut builder = sm.get_snapshot_builder().await;
        builder.build_snapshot().await.unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let builds = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut built = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && built < 5_000 {
                    builder.build_snapshot().await.unwrap();
                    built += 1;
                }
                built
            }
        });
        let mut checked = 0;
        while checked < 300 {
            let snap = sm.get_current_snapshot().await.unwrap().unwrap();
            let mut file = snap.snapshot.into_std().await;
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut file, &mut bytes).unwrap();
            let sent = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(sent.path(), &bytes).unwrap();
            let (header, _) = snapshot::open_with_header(sent.path()).unwrap();
            let sent_meta: SnapshotMeta<NodeId, Node> = postcard::from_bytes(&header.meta).unwrap();
            assert_eq!(
                sent_meta.snapshot_id, snap.meta.snapshot_id,
                "after {checked} reads"
            );
            checked += 1;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let built = builds.await.unwrap();
        assert!(built > 10, "only {built} snapshots built while reading");
    }
}
