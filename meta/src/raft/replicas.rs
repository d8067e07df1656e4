//! [`Replicas`]: every group this node holds a replica of, each with its own Raft, and the
//! node side of the node-to-node calls ([`Replicas::serve`]).
//!
//! The root group's files are the data folder's own (`meta.redb`, `raft.redb`,
//! `snapshots/`), exactly where a node from before groups kept the one group; every other
//! group lives in `groups/<id>/` with the same three. Each replica has its own log, state
//! machine, elector, proposer and read barrier, and its calls travel under
//! `/_cluster/g/<id>/` (see [`Call::path`]), so one group's election or slow disk holds up
//! none of the others.
//!
//! Which replicas a node holds follows the shard map in root ([`crate::shard_map`]): a task
//! on every node ([`Replicas::adopt`], run on each change of the map or of root's
//! membership, and every second) opens the replicas the map places on this node, and each
//! replica of a new group initializes it with the map's replicas as voters, as every voter
//! of a new root does (openraft allows several nodes to with the same list; a replica
//! finding the group already running waits to be caught up instead, and votes only then).
//! Every node is a member of root (a voter or a learner), so every node has the map and
//! every node's address.
//!
//! A replica's membership is in its own log: after a restart this node opens again every
//! group folder it finds, and each rejoins its group without being told its peers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};

use placement::{PairId, Sha1};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::config::ClusterConfig;
use super::members::{member_leader, wait_member_leader_for};
use super::metadata::{
    self, GroupStatus, GroupsStatus, KeyInterval, MembershipOp, Metadata, Sha1Interval,
};
use super::network::{Call, Rpc, Transport};
use super::proposer::{Unsent, WriteReply};
use super::timeouts::{READ_TIMEOUT, WRITE_TIMEOUT};
use super::types::{Batch, BatchResult, NodeId};
use crate::cluster_version::FORMAT_VERSION;
use crate::groups::{Group, GroupId, ROOT, ShardMap, sha1_before};
use crate::handoff::{FileRow, ROWS_MAX, RowCursor, RowTable};
use crate::store::index::{IndexAnswer, IndexQuery};
use crate::tables::DeletingRecord;
use crate::{Command, FileRecord, MetaError, Response};

/// The folder under the data folder that holds the groups other than root.
pub const GROUPS_DIR: &str = "groups";
/// How often the map is looked at again when root applies nothing: a replica whose voters'
/// addresses were not known yet, or whose opening failed, is tried again.
const ADOPT_INTERVAL: Duration = Duration::from_secs(1);
/// Bound on asking a replica which node leads its group, for a group this node does not
/// hold (all its replicas are asked at once).
const LEADER_ASK_TIMEOUT: Duration = Duration::from_millis(500);
/// Bound on [`Replicas::send`] finding a leader of a group this node holds no replica of:
/// an election's length, as a read waits one out.
pub const SEND_BUDGET: Duration = Duration::from_secs(8);

/// Where cross-group writes leave the references whose entries were written, for the
/// settler (`settler.rs`) to confirm: (content, ref_id).
pub(crate) type SettleQueue = tokio::sync::mpsc::Sender<(Sha1, u64)>;
/// The pause between two tries of [`Replicas::send`] when no leader is named.
const SEND_RETRY: Duration = Duration::from_millis(100);
/// Bound on one membership change of a group (a learner's catch-up included: one longer
/// is asked again by the next round).
const MEMBERSHIP_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a node-to-node call was not answered. The server turns each into an HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// This node holds no replica of the group (not yet, or no longer).
    #[error("this node holds no replica of group {0}")]
    NoReplica(GroupId),
    #[error("bad rpc body: {0}")]
    BadBody(String),
    /// A node rejoining with an emptied data folder may have voted before and forgotten.
    #[error("rejoining with an emptied data folder: no vote before catching up")]
    NoVote,
    #[error("cannot encode the answer: {0}")]
    Encode(String),
}

/// A linearizable read of a group's state, answered by any replica of it (over
/// [`Call::Read`] for a node that holds none).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadQuery {
    /// The FileDB record of a sha1 the group owns (`Moved` if it does not).
    File(Sha1),
    /// The same after a fence through the group's log (see [`Metadata::read_fenced`]):
    /// for deletion decisions.
    FileFenced(Sha1),
    /// The first `limit` `deleting` entries of `pair` with a sha1 in (`after`, `until`).
    Deleting {
        pair: PairId,
        after: Option<Sha1>,
        until: Option<Sha1>,
        limit: u32,
    },
    /// A page of the rows a split copies (see [`crate::handoff::rows`]).
    Rows {
        table: RowTable,
        interval: ([u8; 20], Option<[u8; 20]>),
        after: Option<RowCursor>,
        limit: u32,
    },
    /// A read of the S3 index in the group owning its key (`Moved` if it does not).
    Index(IndexQuery),
    /// The revision of every bucket copy an index group holds (`bucket_copies.rs`).
    BucketRevisions,
    /// A page of the rows an index split copies (see [`crate::index_handoff::rows`]).
    IndexRows {
        interval: crate::ownership::KeyInterval,
        from: Option<crate::index_handoff::IndexCursor>,
        limit: u32,
    },
    /// Where a split of a key interval halves its objects (see
    /// [`crate::index_handoff::middle_key`]).
    MiddleKey(crate::ownership::KeyInterval),
    /// What an index group's entries name in an audit's slice (see
    /// [`crate::audit::index_refs`]): the slice, the references FileDB released, and the
    /// pending ones of keys the group owns.
    IndexRefs {
        slice: crate::audit::Slice,
        released: std::collections::BTreeSet<(Sha1, u64)>,
        pending: Vec<crate::audit::Pending>,
    },
    /// `sha1`'s FileDB record and its `deleting` entry (`GET /_admin/files/<sha1>`).
    FileState(Sha1),
    /// Where a bulk-delete job of `bucket`'s keys under `prefix` starts in an index group
    /// (see [`crate::MetaStore::job_fence`]).
    JobFence { bucket: String, prefix: String },
}

/// The answer to a [`ReadQuery`], of the same variant.
// An index answer is the common one (every GET's): boxing it would add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadAnswer {
    File(Option<FileRecord>),
    Deleting(Vec<(Sha1, DeletingRecord)>),
    Rows(Vec<FileRow>),
    Index(IndexAnswer),
    BucketRevisions(BTreeMap<String, u64>),
    IndexRows(crate::index_handoff::IndexPage),
    MiddleKey(Option<crate::groups::IndexStart>),
    IndexRefs(crate::audit::IndexRefs),
    FileState(Option<FileRecord>, Option<DeletingRecord>),
    /// The group's object sequence number, and its objects under the prefix.
    JobFence {
        seq: u64,
        objects: u64,
    },
}

/// How long a command answered `Moved` is tried again on newer maps: longer than a split's
/// copy of a group's interval at the design's sizes takes to reach its commit.
pub const MOVED_WAIT: Duration = Duration::from_secs(10);
/// The first pause before a command answered `Moved` is tried again (doubling up to
/// [`MOVED_PAUSE_MAX`]).
pub(crate) const MOVED_PAUSE_MIN: Duration = Duration::from_millis(20);
pub(crate) const MOVED_PAUSE_MAX: Duration = Duration::from_millis(500);

/// Bound on the entries of one [`ReadQuery::Deleting`].
pub const DELETING_READ_MAX: u32 = 1000;

/// Every replica this node holds.
pub struct Replicas {
    data_dir: PathBuf,
    cluster: ClusterConfig,
    transport: Arc<dyn Transport>,
    root: Arc<Metadata>,
    /// The groups other than root.
    groups: RwLock<BTreeMap<GroupId, Arc<Metadata>>>,
    /// Serializes [`Replicas::open_group`]: two opens of one group would open its files
    /// twice.
    opening: tokio::sync::Mutex<()>,
    /// The shard map as root last applied it (see [`Replicas::shard_map`]).
    map: RwLock<Option<Arc<ShardMap>>>,
    /// Groups whose replica here must not take routed calls: the committed map or the
    /// plan names the group and does not place it here (a move is taking it away, or
    /// bringing it here and the replica is not a member yet). Calls go to the group's
    /// leader from outside; a leaving replica would refuse them once removed.
    passing: RwLock<std::collections::BTreeSet<GroupId>>,
    /// Per group this node leads: when its rate window began, and the FileDB operations
    /// applied then (see `split::split_when_full`).
    rate_windows: std::sync::Mutex<BTreeMap<GroupId, (Instant, u64)>>,
    /// Where cross-group writes leave their references to confirm (`settler.rs`).
    settler: std::sync::OnceLock<SettleQueue>,
    /// The tasks that work on the replicas: the map's follower ([`follow_map`]), the
    /// cross-group rounds (`reconciler.rs`); stopped at shutdown.
    tasks: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// A group this node holds no replica of, as [`Replicas::remote`] finds it.
struct Remote {
    /// Its replicas as the map places them.
    replicas: Vec<NodeId>,
    /// Their addresses (every node's, from root's membership).
    nodes: BTreeMap<NodeId, String>,
    rpc: Rpc,
}

/// Answers a read on this node's replica, linearizable.
async fn read_query(meta: &Metadata, query: ReadQuery) -> Result<ReadAnswer, MetaError> {
    match query {
        ReadQuery::File(sha1) => meta
            .read(move |s| s.file_if_owned(&sha1))
            .await
            .map(ReadAnswer::File),
        ReadQuery::FileFenced(sha1) => meta
            .read_fenced(move |s| s.file_if_owned(&sha1))
            .await
            .map(ReadAnswer::File),
        ReadQuery::Deleting {
            pair,
            after,
            until,
            limit,
        } => {
            let limit = limit.clamp(1, DELETING_READ_MAX) as usize;
            meta.read(move |s| s.deleting_of_pair(pair, (after, until), limit))
                .await
                .map(ReadAnswer::Deleting)
        }
        ReadQuery::Rows {
            table,
            interval,
            after,
            limit,
        } => meta
            .read(move |s| s.file_rows(table, interval, after, limit))
            .await
            .map(ReadAnswer::Rows),
        ReadQuery::Index(query) => meta
            .read(move |s| s.index_read(&query))
            .await
            .map(ReadAnswer::Index),
        ReadQuery::BucketRevisions => meta
            .read(|s| s.bucket_revisions())
            .await
            .map(ReadAnswer::BucketRevisions),
        ReadQuery::IndexRows {
            interval,
            from,
            limit,
        } => meta
            .read(move |s| s.index_rows(&interval, from.as_ref(), limit))
            .await
            .map(ReadAnswer::IndexRows),
        ReadQuery::MiddleKey(interval) => meta
            .read(move |s| s.middle_key(&interval))
            .await
            .map(ReadAnswer::MiddleKey),
        ReadQuery::IndexRefs {
            slice,
            released,
            pending,
        } => meta
            .read(move |s| s.index_refs(&slice, &released, &pending))
            .await
            .map(ReadAnswer::IndexRefs),
        ReadQuery::FileState(sha1) => meta
            .read(move |s| s.file_state_if_owned(&sha1))
            .await
            .map(|(file, deleting)| ReadAnswer::FileState(file, deleting)),
        ReadQuery::JobFence { bucket, prefix } => meta
            .read(move |s| s.job_fence(&bucket, &prefix))
            .await
            .map(|(seq, objects)| ReadAnswer::JobFence { seq, objects }),
    }
}

/// `group`'s replicas by S3 address, from root's members (`nodes`); None while one of
/// them is not a member of root yet.
fn voters_of(group: &Group, nodes: &BTreeMap<NodeId, String>) -> Option<BTreeMap<NodeId, String>> {
    group
        .replicas
        .iter()
        .map(|id| nodes.get(id).map(|addr| (*id, addr.clone())))
        .collect()
}

/// Runs [`Replicas::adopt`] on every change of root's map or membership (not on every
/// entry: a busy root applies thousands a second), and every [`ADOPT_INTERVAL`]; ends when
/// the replicas are dropped or root stops.
async fn follow_map(replicas: Weak<Replicas>) {
    let mut changed = match replicas.upgrade() {
        Some(r) => r.root.map_changed(),
        None => return,
    };
    loop {
        {
            let Some(r) = replicas.upgrade() else { return };
            if let Err(e) = r.adopt().await {
                tracing::warn!(error = %e, "opening the replicas the shard map places here");
            }
        }
        if let Ok(Err(_)) = tokio::time::timeout(ADOPT_INTERVAL, changed.changed()).await {
            return;
        }
    }
}

/// The folder of `group`'s replica under `data_dir`.
pub fn group_dir(data_dir: &Path, group: GroupId) -> PathBuf {
    if group == ROOT {
        data_dir.to_path_buf()
    } else {
        data_dir.join(GROUPS_DIR).join(group.to_string())
    }
}

/// Where [`Replicas::drop_unplaced`] renames a replica's folder before it deletes it.
fn dropped_dir(data_dir: &Path, group: GroupId) -> PathBuf {
    data_dir.join(GROUPS_DIR).join(format!("{group}.dropped"))
}

/// Whether `map` or `planned` (a change under way) places a replica of `group` on `node`.
fn placed_here(map: &ShardMap, planned: Option<&ShardMap>, group: GroupId, node: NodeId) -> bool {
    std::iter::once(map)
        .chain(planned)
        .any(|m| m.group(group).is_some_and(|g| g.replicas.contains(&node)))
}

/// The groups whose folders are under `data_dir/groups/`, ascending. A name that is not a
/// group id is left alone (and reported): it is nothing this node wrote.
pub fn group_folders(data_dir: &Path) -> Result<Vec<GroupId>, MetaError> {
    let dir = data_dir.join(GROUPS_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(MetaError::Storage(format!(
                "cannot read {}: {e}",
                dir.display()
            )));
        }
    };
    let mut ids = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| MetaError::Storage(e.to_string()))?;
        let name = entry.file_name();
        if let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".dropped")) {
            // A drop cut short by a crash: its replica had left its group.
            let path = entry.path();
            std::fs::remove_dir_all(&path).map_err(|e| {
                MetaError::Storage(format!("cannot delete {}: {e}", path.display()))
            })?;
            tracing::info!(group = id, "finished deleting a dropped replica");
            continue;
        }
        match name.to_str().and_then(|n| n.parse::<GroupId>().ok()) {
            Some(id) if id != ROOT && name.to_str() == Some(&id.to_string()) => ids.push(id),
            _ => tracing::warn!(path = %entry.path().display(), "not a group folder: left alone"),
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// The map `root` has applied; a root that never stored one runs the map of before any
/// split, on its voters. None while this node's root has neither (a node waiting to be
/// added to the cluster).
async fn shard_map_of(root: &Metadata) -> Result<Option<ShardMap>, MetaError> {
    if let Some(map) = root.read_local(|s| s.shard_map()).await? {
        return Ok(Some(map));
    }
    // The membership's voters, ascending (no read of the tables).
    let voters = root.status().members;
    if voters.is_empty() {
        return Ok(None);
    }
    ShardMap::single(voters)
        .map(Some)
        .map_err(|e| MetaError::Storage(e.to_string()))
}

/// Asks `call` with `body` of `replicas` in turn (at their addresses in `nodes`), each
/// within `timeout(time left)`, until one gives an answer other than `Unavailable` (not
/// the leader, no leader yet, no quorum), within [`SEND_BUDGET`]. The answer, or why the
/// last one failed.
async fn ask_in_turn<B: Serialize, T: DeserializeOwned>(
    rpc: &Rpc,
    replicas: &[NodeId],
    nodes: &BTreeMap<NodeId, String>,
    call: Call,
    body: &B,
    timeout: impl Fn(Duration) -> Duration,
) -> Result<Result<T, MetaError>, String> {
    let deadline = Instant::now() + SEND_BUDGET;
    let mut last = String::from("no replica of the group has an address");
    for target in replicas.iter().cycle() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        if let Some(addr) = nodes.get(target) {
            let answer: Result<Result<T, MetaError>, _> =
                rpc.call(addr, call, body, timeout(left)).await;
            match answer {
                Ok(Err(MetaError::Unavailable(e))) => last = e,
                Ok(answer) => return Ok(answer),
                Err(e) => last = e.to_string(),
            }
        }
        tokio::time::sleep(SEND_RETRY).await;
    }
    Err(last)
}

fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, ServeError> {
    postcard::from_bytes(body).map_err(|e| ServeError::BadBody(e.to_string()))
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, ServeError> {
    postcard::to_stdvec(value).map_err(|e| ServeError::Encode(e.to_string()))
}

impl Replicas {
    /// Opens the root group on `data_dir` and every other group whose folder is there.
    /// `cluster.peers` are the root group's voters if it is new.
    pub async fn open(
        data_dir: &Path,
        cluster: ClusterConfig,
        transport: Arc<dyn Transport>,
    ) -> Result<Arc<Replicas>, MetaError> {
        let root = metadata::open(data_dir, cluster.clone(), transport.clone()).await?;
        let map = shard_map_of(&root).await?;
        let nodes = root.status().nodes;
        let placed = |id: GroupId| {
            map.as_ref()
                .and_then(|m| m.group(id))
                .and_then(|g| voters_of(g, &nodes))
        };
        let mut groups = BTreeMap::new();
        for id in group_folders(data_dir)? {
            // Restarted: the replica's log knows its members. The voters are only asked,
            // should the replica be fresh after all (its files lost), whether the group
            // runs: then it waits to be caught up before it votes. Initializing is left
            // to the map's follower.
            let voters = placed(id).unwrap_or_default();
            let rejoin = ClusterConfig {
                peers: voters,
                ..cluster.clone()
            };
            let dir = group_dir(data_dir, id);
            let replica =
                metadata::open_replica(&dir, id, rejoin, transport.clone(), false).await?;
            groups.insert(id, replica);
        }
        let replicas = Arc::new(Replicas {
            data_dir: data_dir.to_path_buf(),
            cluster,
            transport,
            root,
            groups: RwLock::new(groups),
            opening: tokio::sync::Mutex::new(()),
            map: RwLock::new(None),
            passing: RwLock::new(Default::default()),
            rate_windows: Default::default(),
            settler: std::sync::OnceLock::new(),
            tasks: std::sync::Mutex::new(Vec::new()),
        });
        replicas.keep_task(tokio::spawn(follow_map(Arc::downgrade(&replicas))));
        Ok(replicas)
    }

    /// Keeps a task that works on the replicas, to stop it at [`Replicas::shutdown`].
    pub fn keep_task(&self, task: tokio::task::JoinHandle<()>) {
        self.tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(task);
    }

    /// How long a reference may stay pending past its deadline (see
    /// [`ClusterConfig::reconcile_grace_ms`]).
    pub fn reconcile_grace_ms(&self) -> u64 {
        self.cluster.reconcile_grace_ms
    }

    /// How long a cross-group write's reference may stay pending (see
    /// [`ClusterConfig::ref_deadline_ms`]).
    pub fn ref_deadline_ms(&self) -> u64 {
        self.cluster.ref_deadline_ms
    }

    /// Aborts the process at `point` if it is this gateway's crash point (tests of what a
    /// crash there leaves behind; see [`super::config::CrashPoint`]).
    pub(crate) fn crash_at(&self, point: super::config::CrashPoint) {
        if self.cluster.crash_point == Some(point) {
            tracing::error!(?point, "GATEWAY_CRASH_POINT reached: aborting");
            std::process::abort();
        }
    }

    /// Replicas of each group a split creates (see [`ClusterConfig::replication_factor`]).
    pub fn replication_factor(&self) -> u64 {
        self.cluster.replication_factor
    }

    /// FileDB records a group holds before its leader plans its split (see
    /// [`ClusterConfig::group_split_files`]).
    pub fn group_split_files(&self) -> u64 {
        self.cluster.group_split_files
    }

    /// Index entries a group holding S3 keys holds before its leader plans an index split
    /// (see [`ClusterConfig::group_split_objects`]).
    pub fn group_split_objects(&self) -> u64 {
        self.cluster.group_split_objects
    }

    /// FileDB operations per second over a window past which a group splits (0: never;
    /// [`ClusterConfig::group_split_ops`]), and the window.
    pub fn group_split_rate(&self) -> (u64, Duration) {
        (
            self.cluster.group_split_ops,
            Duration::from_millis(self.cluster.split_rate_window_ms.max(1)),
        )
    }

    /// The rate window of group `id` this node leads: the window begun (when, FileDB
    /// operations applied then) if it is over, replaced by one beginning now at `ops`;
    /// none while it runs. A group this node starts leading begins a window.
    pub(super) fn rate_window(
        &self,
        id: GroupId,
        ops: u64,
        window: Duration,
    ) -> Option<(Instant, u64)> {
        let now = Instant::now();
        let mut windows = self
            .rate_windows
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let begun = *windows.entry(id).or_insert((now, ops));
        if now.duration_since(begun.0) < window {
            return None;
        }
        windows.insert(id, (now, ops));
        Some(begun)
    }

    /// Sets the settler's queue; false if one was set already.
    pub(super) fn set_settler(&self, queue: SettleQueue) -> bool {
        self.settler.set(queue).is_ok()
    }

    /// Leaves the reference `ref_id` on `sha1`, whose entry was written, for the settler
    /// to confirm (none running, or its queue full: the reconciler settles it later).
    pub(super) fn settle_later(&self, sha1: Sha1, ref_id: u64) {
        if let Some(queue) = self.settler.get() {
            let _ = queue.try_send((sha1, ref_id));
        }
    }

    /// Ends group `id`'s rate window: the next begins afresh.
    pub(super) fn forget_rate_window(&self, id: GroupId) {
        self.rate_windows
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
    }

    /// Whether root's leader evens out the groups' replicas over the nodes (see
    /// [`ClusterConfig::rebalance`]).
    pub fn rebalances(&self) -> bool {
        self.cluster.rebalance
    }

    /// Rows per page of a split's copy (see [`ClusterConfig::split_page_rows`]).
    pub fn split_page_rows(&self) -> u32 {
        self.cluster.split_page_rows
    }

    /// Runs `cmd` in `group` from this node: through this node's replica if it holds one
    /// (which forwards it to the leader), else at the leader among the group's replicas
    /// the map names, following redirects within [`SEND_BUDGET`].
    ///
    /// A replica that could not be reached is passed over for the next, so a command may
    /// reach a log twice when a node dies with it in flight: only for commands applied
    /// once by their own keys (the cross-group ones: `RefInc`, `ForeignRef`, `DecBatch`,
    /// `OutboxDone`, `Fence`, `Settle`, and a split's steps).
    pub async fn send(&self, group: GroupId, cmd: Command) -> Result<Response, MetaError> {
        self.send_on(&*self.shard_map().await?, group, cmd).await
    }

    /// [`Replicas::send`] to a group `map` places (a split's planned map names a group
    /// the committed one does not yet).
    pub(crate) async fn send_on(
        &self,
        map: &ShardMap,
        group: GroupId,
        cmd: Command,
    ) -> Result<Response, MetaError> {
        if let Some(replica) = self.routed_led(group).await? {
            match replica.execute_answer(cmd.clone()).await {
                Ok(answer) => return answer,
                // The replica was dropped under the call (a move took it off this node)
                // before the command reached a log: the group's other replicas take it.
                Err(Unsent::NotAppended(_)) if replica.stopped() => {}
                Err(unsent) => return Err(unsent.into()),
            }
        }
        let Remote {
            replicas,
            nodes,
            rpc,
        } = self.remote(map, group)?;
        let applies_once = cmd.applies_once();
        let batch = Batch(vec![cmd]);
        let deadline = Instant::now() + SEND_BUDGET;
        let mut next = 0usize;
        let mut hint: Option<NodeId> = None;
        let mut last = String::from("no replica of the group has an address");
        while Instant::now() < deadline {
            let target = match hint.take() {
                Some(h) => h,
                None => {
                    let t = replicas[next % replicas.len()];
                    next += 1;
                    t
                }
            };
            let Some(addr) = nodes.get(&target) else {
                last = format!("node {target} has no address in root yet");
                tokio::time::sleep(SEND_RETRY).await;
                continue;
            };
            let left = deadline.saturating_duration_since(Instant::now());
            match rpc
                .call::<Batch, WriteReply>(addr, Call::Write, &batch, left.min(WRITE_TIMEOUT))
                .await
            {
                Ok(WriteReply::Done(BatchResult(mut results))) => {
                    return results.pop().unwrap_or_else(|| {
                        Err(MetaError::Unexpected(
                            "an empty answer to one command".into(),
                        ))
                    });
                }
                Ok(WriteReply::NotLeader(leader)) => {
                    hint = leader.filter(|l| *l != target);
                    last = format!("node {target} does not lead group {group}");
                }
                // Its outcome unknown (a leader replaced while it held it, a replica that
                // left the group): sent again only if applying it twice changes nothing.
                Ok(WriteReply::Unavailable(e)) if !applies_once => {
                    return Err(MetaError::Unavailable(e));
                }
                Ok(WriteReply::Unavailable(e)) => last = e,
                // The same for a failed exchange: a replica that never received the batch
                // (unreachable, or it holds no replica any more) appended nothing.
                Err(e) if !applies_once && !e.delivered_nothing() => {
                    return Err(MetaError::Unavailable(e.to_string()));
                }
                Err(e) => last = e.to_string(),
            }
            if hint.is_none() {
                tokio::time::sleep(SEND_RETRY).await;
            }
        }
        Err(MetaError::Unavailable(format!(
            "group {group}: no leader took the command within {SEND_BUDGET:?} ({last})"
        )))
    }

    /// What calls a group this node holds no replica of need: its replicas as `map`
    /// places them, their addresses in root, and a client of the group; `Moved` when the
    /// map has no such group (the caller's group came from an older map).
    fn remote(&self, map: &ShardMap, group: GroupId) -> Result<Remote, MetaError> {
        match map.group(group).filter(|g| !g.replicas.is_empty()) {
            Some(g) => Ok(Remote {
                replicas: g.replicas.clone(),
                nodes: self.root.status().nodes,
                rpc: Rpc::new(self.transport.clone(), group),
            }),
            None => Err(MetaError::Moved {
                map_version: map.version,
            }),
        }
    }

    /// Runs a membership change of `group` on its leader, found among `replicas` (over
    /// [`Call::Membership`], this node's own replica included: a replica here may be one
    /// that is not a member yet). Within [`SEND_BUDGET`] of finding the leader; a
    /// learner's catch-up may take longer, and is asked again.
    pub(crate) async fn change_membership_in(
        &self,
        group: GroupId,
        replicas: &[NodeId],
        op: MembershipOp,
    ) -> Result<(), MetaError> {
        let rpc = Rpc::new(self.transport.clone(), group);
        let nodes = self.root.status().nodes;
        ask_in_turn(&rpc, replicas, &nodes, Call::Membership, &op, |_| {
            MEMBERSHIP_TIMEOUT
        })
        .await
        .map_err(|last| {
            MetaError::Unavailable(format!(
                "group {group}: no leader took a membership change within {SEND_BUDGET:?} ({last})"
            ))
        })?
    }

    /// `sha1`'s FileDB record as of now (linearizable), from the group the map gives it
    /// to: this node's replica if it holds one, else any replica of the group (each
    /// answers after its own read barrier), within [`SEND_BUDGET`].
    pub async fn file(&self, sha1: Sha1) -> Result<Option<FileRecord>, MetaError> {
        self.on_the_map(|map| async move { self.file_on(&map, sha1, ReadQuery::File(sha1)).await })
            .await
    }

    /// Runs `run` on the shard map root has applied, and again on the map root applies
    /// next when it is answered `Moved` (the map changed under it, or a split is moving
    /// its range), within [`MOVED_WAIT`]: a split's writes wait out its copy here.
    pub(crate) async fn on_the_map<T, F, Fut>(&self, mut run: F) -> Result<T, MetaError>
    where
        F: FnMut(Arc<ShardMap>) -> Fut,
        Fut: std::future::Future<Output = Result<T, MetaError>>,
    {
        let deadline = Instant::now() + MOVED_WAIT;
        let mut pause = MOVED_PAUSE_MIN;
        loop {
            match run(self.shard_map().await?).await {
                Err(MetaError::Moved { map_version }) if Instant::now() + pause < deadline => {
                    tracing::debug!(map_version, "the map moved under a command: trying again");
                    // Root may not have applied the newer map yet.
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MOVED_PAUSE_MAX);
                    self.refresh_map().await?;
                }
                other => return other,
            }
        }
    }

    /// `sha1`'s FileDB record for a caller that has just read the index linearizably (a
    /// GET after its index read) or whose answer a command checks again (the dedup
    /// pre-check): root's own state machine when root owns the content and the whole
    /// index, as the one group of a single-group cluster always does (no read-index
    /// round: the index read was root's); else as of now in the content's group
    /// ([`Replicas::file`]), whose replica here may lag the write that took the reference.
    pub async fn file_after_root_read(&self, sha1: Sha1) -> Result<Option<FileRecord>, MetaError> {
        self.on_the_map(|map| async move {
            if map.filedb_group(&sha1.0) == ROOT && map.index_only_in_root() {
                self.root.read_local(move |m| m.file_if_owned(&sha1)).await
            } else {
                self.file_on(&map, sha1, ReadQuery::File(sha1)).await
            }
        })
        .await
    }

    /// `sha1`'s FileDB record and its `deleting` entry as of now, from the group the map
    /// gives it to (`GET /_admin/files/<sha1>`).
    pub async fn file_state(
        &self,
        sha1: Sha1,
    ) -> Result<(Option<FileRecord>, Option<DeletingRecord>), MetaError> {
        self.on_the_map(|map| async move {
            let group = map.filedb_group(&sha1.0);
            match self
                .read_in(&map, group, ReadQuery::FileState(sha1))
                .await?
            {
                ReadAnswer::FileState(file, deleting) => Ok((file, deleting)),
                other => Err(MetaError::Unexpected(format!("{other:?}"))),
            }
        })
        .await
    }

    /// `sha1`'s FileDB record after a fence through its group's log (see
    /// [`Metadata::read_fenced`]): Valkyrie's question before it deletes a file.
    pub async fn file_fenced(&self, sha1: Sha1) -> Result<Option<FileRecord>, MetaError> {
        self.on_the_map(
            |map| async move { self.file_on(&map, sha1, ReadQuery::FileFenced(sha1)).await },
        )
        .await
    }

    /// A read of `sha1`'s record (`query`) in the group `map` gives it.
    async fn file_on(
        &self,
        map: &ShardMap,
        sha1: Sha1,
        query: ReadQuery,
    ) -> Result<Option<FileRecord>, MetaError> {
        match self.read_in(map, map.filedb_group(&sha1.0), query).await? {
            ReadAnswer::File(record) => Ok(record),
            other => Err(MetaError::Unexpected(format!("{other:?}"))),
        }
    }

    /// The first `limit` (at most [`DELETING_READ_MAX`]) `deleting` entries of `pair`
    /// after `after`, in sha1 order across the FileDB groups: each group is asked for its
    /// own interval only, so rows a group still holds of an interval it handed off are
    /// never read twice.
    pub async fn deleting_of_pair(
        &self,
        pair: PairId,
        after: Option<Sha1>,
        limit: usize,
    ) -> Result<Vec<(Sha1, DeletingRecord)>, MetaError> {
        let limit = limit.clamp(1, DELETING_READ_MAX as usize);
        let map = self.shard_map().await?;
        let mut out = Vec::new();
        for (start, end, group) in map.filedb_intervals() {
            if end.is_some_and(|end| after.is_some_and(|a| a.0 >= end)) {
                continue;
            }
            // The interval's first sha1 is its own: read from just before it.
            let from = match after {
                Some(a) if a.0 >= start => Some(a),
                _ => sha1_before(&start).map(Sha1),
            };
            let query = ReadQuery::Deleting {
                pair,
                after: from,
                until: end.map(Sha1),
                limit: (limit - out.len()) as u32,
            };
            match self.read_in(&map, group, query).await? {
                ReadAnswer::Deleting(rows) => out.extend(rows),
                other => return Err(MetaError::Unexpected(format!("{other:?}"))),
            }
            if out.len() >= limit {
                out.truncate(limit);
                break;
            }
        }
        Ok(out)
    }

    /// Visits every row of `table` across the FileDB groups, in sha1 order, each group
    /// read for the intervals the map gives it only (rows a group still holds of an
    /// interval it handed off are not seen twice), in linearizable pages of `page` rows
    /// (at most [`ROWS_MAX`]). Bounded by the rows there are; a split committed meanwhile
    /// may hide the rows it moved from this walk.
    pub async fn each_filedb_row(
        &self,
        table: RowTable,
        page: u32,
        visit: impl FnMut(FileRow),
    ) -> Result<(), MetaError> {
        self.each_filedb_row_in(table, ([0u8; 20], None), page, visit)
            .await
    }

    /// [`Replicas::each_filedb_row`] for the sha1s of `slice` only.
    pub async fn each_filedb_row_in(
        &self,
        table: RowTable,
        slice: crate::audit::Slice,
        page: u32,
        mut visit: impl FnMut(FileRow),
    ) -> Result<(), MetaError> {
        let map = self.shard_map().await?;
        let page = page.clamp(1, ROWS_MAX);
        for (start, end, group) in map.filedb_intervals() {
            // The interval's part in the slice (no end: the last sha1).
            let start = start.max(slice.0);
            let end = match (end, slice.1) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if end.is_some_and(|end| start >= end) {
                continue;
            }
            let mut after = None;
            loop {
                let query = ReadQuery::Rows {
                    table,
                    interval: (start, end),
                    after,
                    limit: page,
                };
                let rows = match self.read_in(&map, group, query).await? {
                    ReadAnswer::Rows(rows) => rows,
                    other => return Err(MetaError::Unexpected(format!("{other:?}"))),
                };
                let full = rows.len() >= page as usize;
                after = rows.last().map(FileRow::cursor);
                rows.into_iter().for_each(&mut visit);
                if !full {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Visits every row of the index (see [`crate::index_handoff::IndexRow`]), each key
    /// interval read in the group the map gives it, in linearizable pages of `page` rows
    /// (at most [`ROWS_MAX`]): rows a group still holds of keys it handed off are not seen
    /// twice. A split committed meanwhile may hide the rows it moved from this walk.
    pub async fn each_index_row(
        &self,
        page: u32,
        mut visit: impl FnMut(crate::index_handoff::IndexRow),
    ) -> Result<(), MetaError> {
        let map = self.shard_map().await?;
        let page = page.clamp(2, ROWS_MAX);
        let intervals: Vec<(crate::ownership::KeyInterval, GroupId)> = map
            .index_intervals()
            .map(|(start, end, group)| ((start.clone(), end.cloned()), group))
            .collect();
        for (interval, group) in intervals {
            let mut from = None;
            loop {
                let query = ReadQuery::IndexRows {
                    interval: interval.clone(),
                    from,
                    limit: page,
                };
                let answer = match self.read_in(&map, group, query).await? {
                    ReadAnswer::IndexRows(answer) => answer,
                    other => return Err(MetaError::Unexpected(format!("{other:?}"))),
                };
                answer.rows.into_iter().for_each(&mut visit);
                match answer.next {
                    Some(next) => from = Some(next),
                    None => break,
                }
            }
        }
        Ok(())
    }

    /// Answers `query` in `group`: here if this node holds a replica, else from the first
    /// replica of the group that answers.
    pub(crate) async fn read_in(
        &self,
        map: &ShardMap,
        group: GroupId,
        query: ReadQuery,
    ) -> Result<ReadAnswer, MetaError> {
        if let Some(replica) = self.routed_led(group).await? {
            match read_query(&replica, query.clone()).await {
                // Dropped under the read (a move took it off this node): a read is asked
                // again of the group's other replicas.
                Err(MetaError::Unavailable(_)) if replica.stopped() => {}
                answer => return answer,
            }
        }
        let Remote {
            replicas,
            nodes,
            rpc,
        } = self.remote(map, group)?;
        ask_in_turn(&rpc, &replicas, &nodes, Call::Read, &query, |left| {
            left.min(READ_TIMEOUT)
        })
        .await
        .map_err(|last| {
            MetaError::Unavailable(format!(
                "group {group}: no replica answered a read within {SEND_BUDGET:?} ({last})"
            ))
        })?
    }

    /// How this node reaches its peers (a group's calls take a [`Rpc`] over it).
    pub(super) fn transport(&self) -> Arc<dyn Transport> {
        self.transport.clone()
    }

    /// The root group's replica (today: every table).
    pub fn root(&self) -> &Arc<Metadata> {
        &self.root
    }

    /// This node's replica of `group` for a routed call: none while a move takes it away
    /// or brings it here (see `passing`).
    fn routed(&self, group: GroupId) -> Option<Arc<Metadata>> {
        let passing = self
            .passing
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&group);
        if passing { None } else { self.get(group) }
    }

    /// [`Replicas::routed`], once the replica knows a leader that is a member: waiting
    /// as long as the remote paths do for theirs ([`SEND_BUDGET`]). A group whose leader
    /// a move took away elects the next in one to three seconds, longer on a loaded
    /// machine; a call not yet sent anywhere loses nothing by waiting, where the replica's
    /// own proposer and read barrier would give up after [`super::LEADER_WAIT`].
    async fn routed_led(&self, group: GroupId) -> Result<Option<Arc<Metadata>>, MetaError> {
        let Some(replica) = self.routed(group) else {
            return Ok(None);
        };
        match wait_member_leader_for(replica.raft(), SEND_BUDGET).await {
            Some(_) => Ok(Some(replica)),
            None => Err(MetaError::Unavailable(format!(
                "group {group}: no leader within {SEND_BUDGET:?}"
            ))),
        }
    }

    /// This node's replica of `group`, if it holds one.
    pub fn get(&self, group: GroupId) -> Option<Arc<Metadata>> {
        if group == ROOT {
            return Some(self.root.clone());
        }
        self.groups
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&group)
            .cloned()
    }

    /// The groups this node holds a replica of, root first.
    pub fn ids(&self) -> Vec<GroupId> {
        let others: Vec<GroupId> = self
            .groups
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .copied()
            .collect();
        std::iter::once(ROOT).chain(others).collect()
    }

    /// Opens this node's replica of `group` (a new one in `groups/<id>/`) and starts its
    /// Raft. `voters` are the group's voters by S3 address; with `initialize`, a fresh
    /// replica listed there initializes the group with them unless one of them already
    /// runs it (each voter may, as for root). A replica already open is answered as it is.
    pub async fn open_group(
        &self,
        group: GroupId,
        voters: BTreeMap<NodeId, String>,
        initialize: bool,
    ) -> Result<Arc<Metadata>, MetaError> {
        let _one = self.opening.lock().await;
        if let Some(open) = self.get(group) {
            return Ok(open);
        }
        let cluster = ClusterConfig {
            peers: voters,
            ..self.cluster.clone()
        };
        let dir = group_dir(&self.data_dir, group);
        let replica =
            metadata::open_replica(&dir, group, cluster, self.transport.clone(), initialize)
                .await?;
        self.groups
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(group, replica.clone());
        Ok(replica)
    }

    /// The shard map as this node's root replica has applied it.
    ///
    /// Kept in memory: every routed write and read asks for it. The map's follower reads
    /// it again on each change of the map or of root's membership, as soon as root applies
    /// it, and [`Replicas::refresh_map`] does at once (after a `Moved`).
    pub async fn shard_map(&self) -> Result<Arc<ShardMap>, MetaError> {
        let cached = self
            .map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        match cached {
            Some(map) => Ok(map),
            None => self.refresh_map().await?.ok_or_else(|| {
                MetaError::Unavailable("this node is not a member of the cluster yet".into())
            }),
        }
    }

    /// Reads the map root has applied into memory again, and answers it (None: this node
    /// is not a member yet).
    pub async fn refresh_map(&self) -> Result<Option<Arc<ShardMap>>, MetaError> {
        Ok(self.refresh_maps().await?.0)
    }

    /// [`Replicas::refresh_map`], answering the map a change under way will commit too.
    async fn refresh_maps(&self) -> Result<(Option<Arc<ShardMap>>, Option<ShardMap>), MetaError> {
        let map = shard_map_of(&self.root).await?.map(Arc::new);
        let planned = self.root.read_local(|m| m.planned_map()).await?;
        let me = self.cluster.node_id;
        let passing = map
            .iter()
            .map(|m| &**m)
            .chain(planned.as_ref())
            .flat_map(|m| m.groups())
            .filter(|g| g.id != ROOT && !g.replicas.contains(&me))
            .map(|g| g.id)
            .collect();
        *self.passing.write().unwrap_or_else(PoisonError::into_inner) = passing;
        self.map
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .clone_from(&map);
        Ok((map, planned))
    }

    /// Opens every replica the shard map places on this node and does not hold yet, and
    /// initializes those that never started. The map's follower runs it on each change of
    /// the map or of root's membership, and every second.
    pub async fn adopt(&self) -> Result<(), MetaError> {
        let me = self.cluster.node_id;
        // A change under way (`planned`): the new group's replicas open before the map
        // names it, so that it can receive its rows, and a moved replica before its move.
        let (Some(map), planned) = self.refresh_maps().await? else {
            return Ok(());
        };
        let nodes = self.root.status().nodes;
        let placed: BTreeMap<GroupId, &Group> = map
            .groups()
            .chain(planned.iter().flat_map(|p| p.groups()))
            .map(|g| (g.id, g))
            .collect();
        for group in placed
            .into_values()
            .filter(|g| g.id != ROOT && g.replicas.contains(&me))
        {
            let Some(voters) = voters_of(group, &nodes) else {
                tracing::debug!(
                    group = group.id,
                    "a replica's node is not a member of root yet"
                );
                continue;
            };
            // A replica a planned move brings here joins its running group as a learner
            // (the move's driver adds it): it never starts the group, whatever its probe
            // of the voters finds.
            let joining = map
                .group(group.id)
                .is_some_and(|g| !g.replicas.contains(&me));
            let new = !joining;
            match self.get(group.id) {
                None => {
                    self.open_group(group.id, voters, new).await?;
                    tracing::info!(
                        group = group.id,
                        "opened a replica the shard map places here"
                    );
                }
                // Opened before a restart that came before it was initialized.
                Some(replica) if new && replica.is_blank() => {
                    replica.initialize_blank(voters).await?
                }
                Some(_) => {}
            }
        }
        let unplaced: Vec<GroupId> = self
            .ids()
            .into_iter()
            .filter(|id| *id != ROOT && !placed_here(&map, planned.as_ref(), *id, me))
            .collect();
        for id in unplaced {
            self.drop_unplaced(id).await?;
        }
        Ok(())
    }

    /// Drops this node's replica of `group` once root's committed map and plan both place
    /// it elsewhere (a move away from here committed): closes it, then deletes its folder.
    ///
    /// Decided on root's state read linearizably, twice: a node whose root lags (just
    /// restarted) must not drop a replica a newer map still places here; and the second
    /// read, after the replica is closed, makes sure no plan placed it here again while
    /// it could still answer its group (a replica that may have voted is deleted only
    /// when no membership needs it).
    async fn drop_unplaced(&self, group: GroupId) -> Result<(), MetaError> {
        let me = self.cluster.node_id;
        let placed_now = || async {
            let (map, planned) = self
                .root
                .read(|s| Ok((s.shard_map()?, s.planned_map()?)))
                .await?;
            Ok::<bool, MetaError>(map.is_none_or(|m| placed_here(&m, planned.as_ref(), group, me)))
        };
        if placed_now().await? {
            return Ok(());
        }
        let Some(replica) = self
            .groups
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&group)
        else {
            return Ok(());
        };
        replica.shutdown().await;
        drop(replica);
        if placed_now().await? {
            // Placed here again: the map's follower opens it again, as it was.
            tracing::info!(group, "a replica about to be dropped is placed here again");
            return Ok(());
        }
        let dir = group_dir(&self.data_dir, group);
        let doomed = dropped_dir(&self.data_dir, group);
        // Renamed first, so that a crash in the middle of the delete leaves no half
        // replica that a restart would open (`open` finishes the delete).
        std::fs::rename(&dir, &doomed)
            .and_then(|()| std::fs::remove_dir_all(&doomed))
            .map_err(|e| MetaError::Storage(format!("cannot delete {}: {e}", dir.display())))?;
        tracing::info!(group, "dropped the replica of a group moved off this node");
        Ok(())
    }

    /// The groups of the map, with this node's replica of each (see [`GroupsStatus`]).
    pub async fn groups(&self) -> Result<GroupsStatus, MetaError> {
        let map = self.shard_map().await?;
        let nodes = self.root.status().nodes;
        let mut groups = Vec::new();
        for g in map.groups() {
            let mut status = GroupStatus {
                id: g.id,
                kind: g.kind,
                leader: None,
                replicas: g.replicas.clone(),
                held: false,
                records: 0,
                last_applied: None,
                lag: 0,
                filedb: map
                    .filedb_intervals()
                    .filter(|(_, _, owner)| *owner == g.id)
                    .map(|(start, end, _)| Sha1Interval {
                        start: hex::encode(start),
                        end: end.map(hex::encode),
                    })
                    .collect(),
                index: map
                    .index_intervals()
                    .filter(|(_, _, owner)| *owner == g.id)
                    .map(|(start, end, _)| KeyInterval {
                        start: start.clone(),
                        end: end.cloned(),
                    })
                    .collect(),
            };
            let Some(replica) = self.get(g.id) else {
                status.leader = self.ask_leader(g, &nodes).await;
                groups.push(status);
                continue;
            };
            let r = replica.replica_status().await?;
            if g.id == ROOT {
                // Root's voters follow its membership changes, not the map.
                status.replicas = r.voters;
            }
            status.held = true;
            status.leader = r.leader;
            status.records = r.records;
            status.last_applied = r.last_applied;
            status.lag = r.lag;
            groups.push(status);
        }
        Ok(GroupsStatus {
            version: map.version,
            groups,
        })
    }

    /// The leader of `group`, which this node holds no replica of, as its replicas (at
    /// their addresses in `nodes`) say: the first answer naming one, within
    /// [`LEADER_ASK_TIMEOUT`]. None when none answers.
    async fn ask_leader(&self, group: &Group, nodes: &BTreeMap<NodeId, String>) -> Option<NodeId> {
        use futures_util::StreamExt as _;
        let rpc = Rpc::new(self.transport.clone(), group.id);
        let mut asks: futures_util::stream::FuturesUnordered<_> = group
            .replicas
            .iter()
            .filter_map(|id| nodes.get(id).cloned())
            .map(|addr| {
                let rpc = rpc.clone();
                async move {
                    rpc.call::<(), Option<NodeId>>(&addr, Call::Leader, &(), LEADER_ASK_TIMEOUT)
                        .await
                        .ok()
                        .flatten()
                }
            })
            .collect();
        while let Some(answer) = asks.next().await {
            if answer.is_some() {
                return answer;
            }
        }
        None
    }

    /// Stops every replica, the other groups first and root last.
    pub async fn shutdown(&self) {
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(PoisonError::into_inner));
        for task in tasks {
            task.abort();
            let _ = task.await;
        }
        let others: Vec<Arc<Metadata>> =
            std::mem::take(&mut *self.groups.write().unwrap_or_else(PoisonError::into_inner))
                .into_values()
                .collect();
        for replica in others {
            replica.shutdown().await;
        }
        self.root.shutdown().await;
    }

    /// Answers a peer's `call` to this node's replica of `group`, with the postcard
    /// `body`; the answer is postcard too.
    pub async fn serve(
        &self,
        group: GroupId,
        call: Call,
        body: &[u8],
    ) -> Result<Vec<u8>, ServeError> {
        // What the binary knows, whatever the group: a peer asks before it raises a group's
        // format, possibly before this node has opened its replica.
        if call == Call::Version {
            return encode(&FORMAT_VERSION);
        }
        let meta = self.get(group).ok_or(ServeError::NoReplica(group))?;
        match call {
            Call::Append => {
                let req = decode(body).inspect_err(|_| {
                    // Nothing is appended, so this node cannot diverge; it only falls behind.
                    tracing::error!(
                        group,
                        "entries from the leader cannot be decoded: the leader may write a \
                         metadata format this binary does not know (upgrade it)"
                    );
                })?;
                encode(&meta.append_entries(req).await)
            }
            Call::Vote => {
                if !meta.may_vote() {
                    return Err(ServeError::NoVote);
                }
                encode(&meta.raft().vote(decode(body)?).await)
            }
            Call::Snapshot => encode(&meta.install_snapshot(decode(body)?).await),
            Call::PreVote => encode(&meta.pre_vote(decode(body)?).await),
            Call::Write => {
                let batch = decode(body)?;
                // A replica a move removed may still name itself: it leads no more.
                let leader = member_leader(&meta.raft().metrics().borrow());
                if leader != Some(meta.node_id()) {
                    return encode(&WriteReply::NotLeader(leader));
                }
                encode(&meta.forwarded_write(batch).await)
            }
            Call::ReadIndex => encode(&meta.leader_read_index().await),
            Call::Membership => {
                let op = decode(body)?;
                let done: Result<(), MetaError> = meta.leader_change_membership(op).await;
                encode(&done)
            }
            Call::State => encode(&meta.peer_state()),
            Call::Leader => encode(&meta.raft().metrics().borrow().current_leader),
            Call::Read => encode(&read_query(&meta, decode(body)?).await),
            Call::Version => encode(&FORMAT_VERSION),
        }
    }
}

#[cfg(test)]
#[path = "replicas_tests.rs"]
mod tests;
