//! The data folder of a stopped node: catching its state machine up with its log
//! ([`replay_offline`], for `gateway fsck`) and building it from a backup ([`restore`]).

use std::path::{Path, PathBuf};

use super::log::LogStore;
use super::machine::{self, StateMachine};
use super::snapshot;
use super::types::NodeId;
use crate::{MetaError, MetaStore};

/// Applies the committed log entries the state machine of a stopped node lacks (what a
/// restart would do first), so that offline tools (`gateway fsck`) see every
/// acknowledged write. A data folder without `raft.redb` is left as it is.
///
/// Which entries are committed: in a one-voter group every entry in the log is (it was
/// acknowledged once durable here); in a larger group, those up to the committed index the
/// log last saved, which may lag the leader's by the last few entries (it is saved without
/// fsync): a node stopped gracefully has applied everything it knew.
pub fn replay_offline(data_dir: &Path) -> Result<u64, MetaError> {
    use std::ops::Bound;
    let log_path = data_dir.join("raft.redb");
    if !log_path.exists() {
        return Ok(0);
    }
    let store = MetaStore::open(&data_dir.join("meta.redb"))?;
    let log = LogStore::open(&log_path)?;
    let db = store.db();
    let storage = |e: openraft::StorageError<NodeId>| MetaError::Storage(e.to_string());
    let (mut applied, mut membership) = machine::applied_state(&db)?;
    let last = LogStore::last_index(log.database()).map_err(storage)?;
    // The group's size as of the end of the log: its newest membership entry, else the
    // state machine's.
    let mut voters = membership.membership().voter_ids().count();
    let mut scan = applied.map_or(0, |a| a.index + 1);
    while let Some(last) = last
        && scan <= last
    {
        let entries = LogStore::entries(
            log.database(),
            (Bound::Included(scan), Bound::Included(last)),
        )
        .map_err(storage)?;
        let Some(end) = entries.last() else { break };
        scan = end.log_id.index + 1;
        for e in &entries {
            if let openraft::EntryPayload::Membership(m) = &e.payload {
                voters = m.voter_ids().count();
            }
        }
    }
    let upto = if voters == 1 {
        last
    } else {
        LogStore::committed(log.database())
            .map_err(storage)?
            .map(|c| c.index)
    };
    let Some(upto) = upto else {
        return Ok(0);
    };
    let mut replayed = 0u64;
    // Bounded by the log's length: each round applies at least one entry or stops.
    loop {
        let from = applied.map_or(0, |a| a.index + 1);
        if from > upto {
            break;
        }
        let entries = LogStore::entries(
            log.database(),
            (Bound::Included(from), Bound::Included(upto)),
        )
        .map_err(storage)?;
        let Some(last) = entries.last() else { break };
        let last = last.log_id;
        replayed += entries.len() as u64;
        membership = machine::StateMachine::replay_blocking(&db, entries, applied, membership)?;
        applied = Some(last);
    }
    StateMachine::checkpoint(&db)?;
    Ok(replayed)
}

#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("{0} already holds metadata; restore into a new data folder")]
    Exists(PathBuf),
    #[error("data folder {0}: {1}")]
    DataDir(PathBuf, std::io::Error),
    #[error("backup {0}: {1}")]
    Snapshot(PathBuf, snapshot::SnapshotError),
}

/// Builds a data folder's state machine from a backup (`gateway restore`). The node keeps
/// the backup's membership and applied index: started on this folder, it purges its log
/// up to that index and goes on as the node it was (a single node at once; a cluster
/// member once a majority of the group is back).
pub fn restore(from: &Path, data_dir: &Path) -> Result<String, RestoreError> {
    let io = |e| RestoreError::DataDir(data_dir.to_path_buf(), e);
    std::fs::create_dir_all(data_dir).map_err(io)?;
    let meta = data_dir.join("meta.redb");
    if meta.exists() || data_dir.join("raft.redb").exists() {
        return Err(RestoreError::Exists(data_dir.to_path_buf()));
    }
    let building = data_dir.join("meta.redb.restore");
    let _ = std::fs::remove_file(&building);
    let head = snapshot::load(from, &building)
        .map_err(|e| RestoreError::Snapshot(from.to_path_buf(), e))?;
    std::fs::rename(&building, &meta).map_err(io)?;
    std::fs::File::open(data_dir)
        .and_then(|d| d.sync_all())
        .map_err(io)?;
    let applied = applied_index_of(&meta);
    Ok(format!(
        "restored {} records into {} (state at log index {})\n",
        head.records,
        meta.display(),
        applied.map_or_else(|| "none".to_string(), |i| i.to_string())
    ))
}

/// The applied index of a state machine file, for reports.
fn applied_index_of(path: &Path) -> Option<u64> {
    let store = MetaStore::open(path).ok()?;
    machine::applied_state(&store.db()).ok()?.0.map(|l| l.index)
}
