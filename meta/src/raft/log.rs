//! The Raft log and vote, in their own redb file (`raft.redb`).
//!
//! Why a file of its own beside `meta.redb` (the state machine): the log is small and
//! append-only at its tail, so its durable commits write a few pages, whatever the size of
//! the state machine (10 M objects is GBs of B-tree); and the two have separate write
//! locks, so appending entry n+1 does not wait for applying entry n. The state machine
//! commits without fsync and checkpoints now and then (see `machine.rs`): on a restart it
//! is at its last checkpoint and openraft re-applies the committed entries after it from
//! this log.
//!
//! Every append is one durable (fsynced) redb transaction, and openraft counts an entry as
//! appended only after it: [`LogFlushed`] is called once the commit has returned. Many
//! concurrent S3 commands share one append because the proposer packs them into one entry
//! (see `proposer.rs`): openraft 0.9's core waits for each append before the next.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{Entry, LogId, LogState, RaftLogReader, StorageError, StorageIOError, Vote};
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use tokio::sync::watch;

use super::types::{NodeId, TypeConfig};

/// Log index -> postcard [`Entry`].
const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
/// `vote`, `committed`, `purged` -> postcard values, each of the type its [`StateKey`] names.
const STATE: TableDefinition<&str, &[u8]> = TableDefinition::new("state");

/// A key of the `state` table and the one type stored under it: writes and reads go
/// through the same `T`, so a value can never be decoded as another type (the purged and
/// committed ids were once written as `Option<LogId>` and read back as `LogId`, every
/// field shifted by a byte, and a node whose log had been purged could not restart).
struct StateKey<T> {
    name: &'static str,
    _type: PhantomData<fn() -> T>,
}

impl<T: serde::Serialize + serde::de::DeserializeOwned> StateKey<T> {
    const fn new(name: &'static str) -> Self {
        StateKey {
            name,
            _type: PhantomData,
        }
    }

    fn encode(&self, value: &T) -> StorageResult<Vec<u8>> {
        postcard::to_stdvec(value).map_err(write_err)
    }

    fn decode(&self, bytes: &[u8]) -> StorageResult<T> {
        postcard::from_bytes(bytes).map_err(|e| {
            read_err(std::io::Error::other(format!(
                "raft.redb state `{}`: {e}",
                self.name
            )))
        })
    }
}

/// The last vote this node cast or saw.
const KEY_VOTE: StateKey<Vote<NodeId>> = StateKey::new("vote");
/// The last committed log id this node learnt (`None` before any); saved without fsync.
const KEY_COMMITTED: StateKey<Option<LogId<NodeId>>> = StateKey::new("committed");
/// The last log id removed from the log by a purge (`None` before the first).
const KEY_PURGED: StateKey<Option<LogId<NodeId>>> = StateKey::new("purged");

/// Bound on the entries one read of the offline replay returns (it reads on from there).
const READ_ENTRIES_MAX: usize = 4096;

/// Bound on the entries one openraft read returns. openraft wants exactly the range it
/// asks for (it checks, and stops the node on a short answer): replication asks for at
/// most `max_payload_entries`, but applying after a restart asks for every committed entry
/// since the state machine's last checkpoint, which may be up to the checkpoint's entry
/// bound (20 000) and more. This bound is far above that; it only keeps a damaged range
/// from exhausting memory.
const OPENRAFT_READ_MAX: usize = 1 << 20;

type StorageResult<T> = Result<T, StorageError<NodeId>>;

fn read_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::read_logs(&e).into()
}

fn write_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::write_logs(&e).into()
}

fn vote_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::write_vote(&e).into()
}

/// The log store; clones share the database (openraft wants a separate reader).
#[derive(Clone)]
pub struct LogStore {
    db: Arc<Database>,
    /// The index the state machine holds durably (see [`LogStore::gate_purges`]).
    durable: Option<watch::Receiver<u64>>,
}

/// How long a purge waits for the state machine to hold what it covers durably: the
/// install of the largest snapshot (hundreds of GiB at the design's group size) fits.
const PURGE_WAIT_MAX: Duration = Duration::from_secs(3600);
/// How often a waiting purge says so.
const PURGE_WAIT_LOG_EVERY: Duration = Duration::from_secs(10);

impl LogStore {
    pub fn open(path: &Path) -> Result<Self, redb::Error> {
        let db = Database::create(path)?;
        let txn = db.begin_write()?;
        txn.open_table(LOG)?;
        txn.open_table(STATE)?;
        txn.commit()?;
        Ok(LogStore {
            db: Arc::new(db),
            durable: None,
        })
    }

    /// Makes every purge wait until the state machine holds the purged entries' effects
    /// durably (`durable`: its [`super::machine::DurableIndex`]). openraft 0.9 purges the
    /// log a leader's snapshot covers as soon as it has handed the snapshot to the state
    /// machine, before the install has finished; a crash in between left a log with nothing
    /// to replay the state machine from. Waiting here also holds back the appends after the
    /// purge (openraft runs log commands one at a time), so the log never has a hole.
    pub fn gate_purges(&mut self, durable: watch::Receiver<u64>) {
        self.durable = Some(durable);
    }

    /// Waits until the state machine holds `index` durably (no-op without a gate).
    async fn wait_durable(&self, index: u64) -> StorageResult<()> {
        let Some(mut durable) = self.durable.clone() else {
            return Ok(());
        };
        let start = tokio::time::Instant::now();
        loop {
            let wait =
                tokio::time::timeout(PURGE_WAIT_LOG_EVERY, durable.wait_for(|d| *d >= index))
                    .await
                    .map(|r| r.map(|_| ()));
            match wait {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(_closed)) => {
                    return Err(write_err(std::io::Error::other(
                        "the state machine stopped before the purged entries were durable in it",
                    )));
                }
                Err(_elapsed) if start.elapsed() >= PURGE_WAIT_MAX => {
                    return Err(write_err(std::io::Error::other(format!(
                        "the state machine did not hold index {index} durably within {PURGE_WAIT_MAX:?}"
                    ))));
                }
                Err(_elapsed) => tracing::info!(
                    index,
                    durable = *durable.borrow(),
                    "a log purge waits for the state machine to hold what it covers durably"
                ),
            }
        }
    }

    /// Runs blocking redb work off the async runtime.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Database) -> StorageResult<T> + Send + 'static,
    ) -> StorageResult<T> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || f(&db))
            .await
            .map_err(write_err)?
    }

    /// The value stored under `key`, `None` if it was never written.
    fn get_state<T: serde::Serialize + serde::de::DeserializeOwned>(
        db: &Database,
        key: &StateKey<T>,
    ) -> StorageResult<Option<T>> {
        let txn = db.begin_read().map_err(read_err)?;
        let table = txn.open_table(STATE).map_err(read_err)?;
        match table.get(key.name).map_err(read_err)? {
            Some(v) => Ok(Some(key.decode(v.value())?)),
            None => Ok(None),
        }
    }

    fn put_state<T: serde::Serialize + serde::de::DeserializeOwned>(
        db: &Database,
        key: &StateKey<T>,
        value: &T,
        durability: Durability,
    ) -> StorageResult<()> {
        let bytes = key.encode(value)?;
        let mut txn = db.begin_write().map_err(write_err)?;
        txn.set_durability(durability).map_err(write_err)?;
        txn.open_table(STATE)
            .map_err(write_err)?
            .insert(key.name, bytes.as_slice())
            .map_err(write_err)?;
        txn.commit().map_err(write_err)
    }

    /// The last purged log id (`None` before the first purge).
    fn purged(db: &Database) -> StorageResult<Option<LogId<NodeId>>> {
        Ok(Self::get_state(db, &KEY_PURGED)?.flatten())
    }

    /// Entries with index in `range`, at most [`READ_ENTRIES_MAX`]; the committed entries
    /// after `from` up to `to` for an offline replay (see [`super::replay_offline`]).
    pub(crate) fn entries(
        db: &Database,
        range: (Bound<u64>, Bound<u64>),
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        Self::entries_upto(db, range, READ_ENTRIES_MAX)
    }

    /// Entries with index in `range`, at most `limit`.
    fn entries_upto(
        db: &Database,
        range: (Bound<u64>, Bound<u64>),
        limit: usize,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        let txn = db.begin_read().map_err(read_err)?;
        let table = txn.open_table(LOG).map_err(read_err)?;
        let mut out = Vec::new();
        for item in table.range::<u64>(range).map_err(read_err)? {
            let (_, v) = item.map_err(read_err)?;
            out.push(postcard::from_bytes(v.value()).map_err(read_err)?);
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    pub(crate) fn database(&self) -> &Database {
        &self.db
    }

    /// The index of the last entry in the log, if any.
    pub(crate) fn last_index(db: &Database) -> StorageResult<Option<u64>> {
        let txn = db.begin_read().map_err(read_err)?;
        let table = txn.open_table(LOG).map_err(read_err)?;
        Ok(table.last().map_err(read_err)?.map(|(k, _)| k.value()))
    }

    /// The id of the last entry in the log, or the last purged one when the log is empty
    /// (what openraft compares in a vote).
    pub(crate) async fn last_log_id(&self) -> StorageResult<Option<LogId<NodeId>>> {
        self.blocking(|db| {
            let txn = db.begin_read().map_err(read_err)?;
            let table = txn.open_table(LOG).map_err(read_err)?;
            match table.last().map_err(read_err)? {
                Some((_, v)) => {
                    let entry: Entry<TypeConfig> =
                        postcard::from_bytes(v.value()).map_err(read_err)?;
                    Ok(Some(entry.log_id))
                }
                None => Self::purged(db),
            }
        })
        .await
    }

    /// The last committed log id known to this store (may lag: it is saved without fsync).
    pub(crate) fn committed(db: &Database) -> StorageResult<Option<LogId<NodeId>>> {
        Ok(Self::get_state(db, &KEY_COMMITTED)?.flatten())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        let bounds = (range.start_bound().cloned(), range.end_bound().cloned());
        self.blocking(move |db| Self::entries_upto(db, bounds, OPENRAFT_READ_MAX))
            .await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let last = self.last_log_id().await?;
        let purged = self.blocking(Self::purged).await?;
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> StorageResult<()> {
        let vote = *vote;
        self.blocking(move |db| Self::put_state(db, &KEY_VOTE, &vote, Durability::Immediate))
            .await
            .map_err(|e| vote_err(std::io::Error::other(e.to_string())))
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<NodeId>>> {
        self.blocking(|db| Self::get_state(db, &KEY_VOTE)).await
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> StorageResult<()> {
        // Without fsync: the next append makes it durable, and a committed index that lags
        // only means openraft re-learns it from the leader (or, alone, re-commits it).
        self.blocking(move |db| Self::put_state(db, &KEY_COMMITTED, &committed, Durability::None))
            .await
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<NodeId>>> {
        self.blocking(Self::committed).await
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let mut encoded = Vec::new();
        for entry in entries {
            let bytes = postcard::to_stdvec(&entry).map_err(write_err)?;
            encoded.push((entry.log_id.index, bytes));
        }
        let result = self
            .blocking(move |db| {
                let txn = db.begin_write().map_err(write_err)?;
                {
                    let mut log = txn.open_table(LOG).map_err(write_err)?;
                    for (index, bytes) in &encoded {
                        log.insert(*index, bytes.as_slice()).map_err(write_err)?;
                    }
                }
                // Durability::Immediate (the default): the entry is on disk when this returns.
                txn.commit().map_err(write_err)
            })
            .await;
        match result {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(e)
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(write_err)?;
            txn.open_table(LOG)
                .map_err(write_err)?
                .retain_in(log_id.index.., |_, _| false)
                .map_err(write_err)?;
            txn.commit().map_err(write_err)
        })
        .await
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        self.wait_durable(log_id.index).await?;
        self.blocking(move |db| {
            let bytes = KEY_PURGED.encode(&Some(log_id))?;
            let txn = db.begin_write().map_err(write_err)?;
            txn.open_table(STATE)
                .map_err(write_err)?
                .insert(KEY_PURGED.name, bytes.as_slice())
                .map_err(write_err)?;
            txn.open_table(LOG)
                .map_err(write_err)?
                .retain_in(..=log_id.index, |_, _| false)
                .map_err(write_err)?;
            txn.commit().map_err(write_err)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload, Membership};

    use super::*;
    use crate::Command;

    fn log_id(term: u64, index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(term, 2), index)
    }

    /// Writes entries as `append` does (openraft's flush callback cannot be made outside
    /// it).
    fn write_entries(store: &LogStore, entries: &[Entry<TypeConfig>]) {
        let txn = store.db.begin_write().unwrap();
        {
            let mut log = txn.open_table(LOG).unwrap();
            for e in entries {
                log.insert(e.log_id.index, postcard::to_stdvec(e).unwrap().as_slice())
                    .unwrap();
            }
        }
        txn.commit().unwrap();
    }

    /// Every value this store persists (vote, committed, purged, entries of each payload
    /// kind) reads back as what was written, through a reopen of the file: the state a
    /// restarted node starts from.
    #[tokio::test]
    async fn every_persisted_value_round_trips_through_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raft.redb");
        let vote = Vote::new_committed(7, 3);
        let committed = log_id(7, 90);
        let entries: Vec<Entry<TypeConfig>> = (1..=100)
            .map(|i| Entry {
                log_id: log_id(if i < 40 { 5 } else { 7 }, i),
                payload: match i % 3 {
                    0 => EntryPayload::Blank,
                    1 => EntryPayload::Normal(super::super::Batch(vec![
                        Command::CreateBucket {
                            bucket: format!("b{i}"),
                            created_ms: i,
                        },
                        Command::DeleteBucket {
                            bucket: format!("b{i}"),
                        },
                    ])),
                    _ => EntryPayload::Membership(Membership::new(
                        vec![[1, 2, 3].into()],
                        Some([4].into()),
                    )),
                },
            })
            .collect();
        {
            let mut store = LogStore::open(&path).unwrap();
            // Nothing written yet: all empty.
            assert_eq!(store.read_vote().await.unwrap(), None);
            assert_eq!(store.read_committed().await.unwrap(), None);
            let state = store.get_log_state().await.unwrap();
            assert_eq!((state.last_purged_log_id, state.last_log_id), (None, None));

            store.save_vote(&vote).await.unwrap();
            store.save_committed(Some(committed)).await.unwrap();
            write_entries(&store, &entries);
            store.purge(log_id(7, 60)).await.unwrap();
        }
        let mut store = LogStore::open(&path).unwrap();
        assert_eq!(store.read_vote().await.unwrap(), Some(vote));
        assert_eq!(store.read_committed().await.unwrap(), Some(committed));
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(log_id(7, 60)));
        assert_eq!(state.last_log_id, Some(log_id(7, 100)));
        let got = store.try_get_log_entries(61..=100).await.unwrap();
        assert_eq!(got, entries[60..].to_vec());
        assert!(store.try_get_log_entries(1..=60).await.unwrap().is_empty());

        // A log purged to its end: the last log id is the purged one.
        store.purge(log_id(7, 100)).await.unwrap();
        drop(store);
        let mut store = LogStore::open(&path).unwrap();
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(log_id(7, 100)));
        assert_eq!(state.last_log_id, Some(log_id(7, 100)));

        // Committed back to none (openraft never does, but the type allows it).
        store.save_committed(None).await.unwrap();
        assert_eq!(store.read_committed().await.unwrap(), None);
        assert_eq!(LogStore::committed(&store.db).unwrap(), None);
    }

    /// A value of another type under a key is a clear read error naming the key, never a
    /// silently shifted value.
    #[tokio::test]
    async fn a_value_of_the_wrong_type_is_an_error_naming_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open(&dir.path().join("raft.redb")).unwrap();
        {
            let txn = store.db.begin_write().unwrap();
            txn.open_table(STATE)
                .unwrap()
                .insert(KEY_PURGED.name, [9u8].as_slice())
                .unwrap();
            txn.commit().unwrap();
        }
        let err = store.get_log_state().await.unwrap_err();
        assert!(err.to_string().contains("purged"), "{err}");
    }

    /// openraft applies every committed entry since the last checkpoint with one read and
    /// stops the node if the answer is short: a restart with more than one read's worth of
    /// entries to apply (4 096 once) must get them all.
    #[tokio::test]
    async fn openraft_gets_every_entry_of_a_wide_range() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open(&dir.path().join("raft.redb")).unwrap();
        let n = 10_000u64;
        {
            let txn = store.db.begin_write().unwrap();
            {
                let mut log = txn.open_table(LOG).unwrap();
                for i in 1..=n {
                    let entry: Entry<TypeConfig> = Entry {
                        log_id: LogId::new(CommittedLeaderId::new(1, 1), i),
                        payload: EntryPayload::Blank,
                    };
                    log.insert(i, postcard::to_stdvec(&entry).unwrap().as_slice())
                        .unwrap();
                }
            }
            txn.commit().unwrap();
        }
        let got = store.try_get_log_entries(2..=n).await.unwrap();
        assert_eq!(got.len() as u64, n - 1);
        assert_eq!(got.last().map(|e| e.log_id.index), Some(n));
        // The offline replay reads in bounded steps.
        let step = LogStore::entries(&store.db, (Bound::Included(1), Bound::Unbounded)).unwrap();
        assert_eq!(step.len(), READ_ENTRIES_MAX);
    }
}
