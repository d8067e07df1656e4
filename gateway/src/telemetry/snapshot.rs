//! Everything `/_metrics` and `/_status` show, read at one moment into plain values, so
//! that the page and the scrape render the same numbers from the same source.
//!
//! Gathering is cheap and never touches a table: the stored counts come from the cached
//! scan (`stored.rs`), the pairs from the in-memory PairDB, the workers' counters from
//! their atomics, the replication state from openraft's metrics channel.

use std::sync::Arc;

use placement::{PairFlags, PairId, PairRecord};
use valkyrie::{MetricsSnapshot, UnmoveProgress};

use super::Telemetry;
use super::recent_errors::RecentError;
use super::stored::StoredStats;
use crate::store::ObjectStore;
use crate::workers::Workers;
use meta::raft::NodeId;

/// One in-process Valkyrie worker.
pub struct WorkerView {
    pub pair: PairId,
    pub index: usize,
    pub disk: String,
    pub counters: MetricsSnapshot,
}

/// This node's view of the replicated metadata group.
pub struct RaftView {
    pub node_id: NodeId,
    /// `leader`, `follower`, `candidate`, `learner` or `shutdown`.
    pub role: &'static str,
    pub term: u64,
    pub leader: Option<NodeId>,
    pub voters: Vec<NodeId>,
    pub last_log_index: u64,
    /// On the leader: the highest index a majority of voters holds. Elsewhere openraft
    /// does not publish it, and the applied index (every applied entry was committed) is
    /// the best lower bound this node knows.
    pub commit_index: u64,
    pub applied_index: u64,
}

pub const ROLES: [&str; 5] = ["leader", "follower", "candidate", "learner", "shutdown"];

pub struct Snapshot {
    pub stored: Option<Arc<StoredStats>>,
    pub stats_scans: u64,
    pub pairs: Vec<(PairId, PairRecord)>,
    pub workers: Vec<WorkerView>,
    pub drains: Vec<UnmoveProgress>,
    pub raft: RaftView,
    /// S3 requests answered, and those answered with a 5xx.
    pub requests: (u64, u64),
    pub recent_errors: Vec<RecentError>,
    /// The metadata groups and this node's replica of each; None when they could not be
    /// read (the metadata store failed) or were not asked for.
    pub groups: Option<meta::raft::GroupsStatus>,
}

pub const PAIR_FLAGS: [(PairFlags, &str); 3] = [
    (PairFlags::LOCKED, "LOCKED"),
    (PairFlags::READ_ONLY, "READ_ONLY"),
    (PairFlags::DRAINING, "DRAINING"),
];

/// Reads the pairs and replication state of `store`, the counters of `telemetry` and the
/// in-process Valkyrie `workers` and drains.
pub fn gather(store: &ObjectStore, telemetry: &Telemetry, workers: &Workers) -> Snapshot {
    let table = store.pair_table();
    let pairs = table
        .ids()
        .into_iter()
        .filter_map(|id| table.get(id).map(|e| (id, e.record)))
        .collect();
    let views = workers
        .workers()
        .into_iter()
        .map(|w| WorkerView {
            pair: w.pair,
            index: w.index,
            disk: w.disk.clone(),
            counters: w.metrics.snapshot(),
        })
        .collect();
    Snapshot {
        stored: telemetry.stats.get(),
        stats_scans: telemetry.stats.scans(),
        pairs,
        workers: views,
        drains: workers.drains(),
        raft: raft_view(store),
        requests: telemetry.requests.totals(),
        recent_errors: telemetry.errors.snapshot(),
        groups: None,
    }
}

/// [`gather`], with the metadata groups (their record counts are read off the blocking
/// pool).
pub async fn gather_with_groups(
    store: &ObjectStore,
    replicas: &meta::raft::Replicas,
    telemetry: &Telemetry,
    workers: &Workers,
) -> Snapshot {
    let mut snapshot = gather(store, telemetry, workers);
    snapshot.groups = match replicas.groups().await {
        Ok(g) => Some(g),
        Err(e) => {
            tracing::warn!(error = %e, "metadata groups for the status page and metrics");
            None
        }
    };
    snapshot
}

fn raft_view(store: &ObjectStore) -> RaftView {
    use openraft::ServerState;
    let metadata = store.metadata();
    let m = metadata.raft().metrics().borrow().clone();
    let voters: Vec<NodeId> = m.membership_config.membership().voter_ids().collect();
    let applied_index = m.last_applied.map_or(0, |l| l.index);
    let commit_index = match &m.replication {
        Some(matched) if !voters.is_empty() => {
            let mut held: Vec<u64> = voters
                .iter()
                .map(|v| matched.get(v).copied().flatten().map_or(0, |l| l.index))
                .collect();
            held.sort_unstable_by(|a, b| b.cmp(a));
            // The (n/2+1)-th highest: held by a majority.
            held[voters.len() / 2].max(applied_index)
        }
        _ => applied_index,
    };
    RaftView {
        node_id: metadata.node_id(),
        role: match m.state {
            ServerState::Leader => "leader",
            ServerState::Follower => "follower",
            ServerState::Candidate => "candidate",
            ServerState::Learner => "learner",
            ServerState::Shutdown => "shutdown",
        },
        term: m.current_term,
        leader: m.current_leader,
        voters,
        last_log_index: m.last_log_index.unwrap_or(0),
        commit_index,
        applied_index,
    }
}
