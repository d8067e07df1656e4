//! [`Metadata`]: the replicated metadata as the rest of the gateway sees it, and [`open`],
//! which starts this node's Raft on a data folder.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::{BasicNode, ChangeMembers, Config, Raft, ServerState, SnapshotPolicy};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::barrier::{self, ReadBarrier};
use super::config::ClusterConfig;
use super::elector::{self, Elector, LeaderContact, PreVoteRequest, PreVoteResponse};
use super::log::LogStore;
use super::machine::{self, SnapshotDir, StateMachine};
use super::members::{member_addr, member_leader};
use super::network::{self, Call, Network, Rpc};
use super::proposer::{self, Proposer};
use super::timeouts::{LEADER_WAIT, READ_TIMEOUT, WRITE_TIMEOUT};

/// Bound on waiting for an added learner to catch up before the answer says to ask again
/// (below the admin CLI's 30 s, so that an operator reads why).
pub const CATCH_UP_WAIT: std::time::Duration = std::time::Duration::from_secs(20);
use super::types::{Batch, BatchResult, MetaRaft, Node, NodeId, TypeConfig};
use crate::groups::{GroupId, GroupKind, IndexStart, ROOT};
use crate::{Command, MetaError, MetaStore, Response, cluster_version};

/// Bound on asking a peer, at the start of a fresh node, whether the group already runs.
const PEER_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A membership change asked through the admin API (run on the leader).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum MembershipOp {
    AddLearner { id: NodeId, addr: String },
    Promote { id: NodeId },
    Remove { id: NodeId },
}

/// What `GET /_admin/cluster` shows.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClusterStatus {
    pub node_id: NodeId,
    pub leader: Option<NodeId>,
    pub members: Vec<NodeId>,
    pub learners: Vec<NodeId>,
    pub nodes: BTreeMap<NodeId, String>,
    pub term: u64,
    pub last_log_index: Option<u64>,
    pub last_applied: Option<u64>,
    pub snapshot: Option<u64>,
    /// The last log index removed by a purge (log compaction), if any.
    pub purged: Option<u64>,
    pub state: String,
    /// The group's format version as this node has applied it (see `cluster_version.rs`).
    pub cluster_version: Option<u32>,
    /// The newest format this node's binary knows.
    pub format_version: u32,
    /// The nodes leaving the cluster (`gateway admin cluster remove` of a node holding
    /// replicas of groups: moved off, then removed), as this node has applied root; only
    /// in [`Metadata::status_with_leaving`] (`GET /_admin/cluster`): [`Metadata::status`]
    /// reads no table, it is on the path of every call to another node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaving: Option<Vec<NodeId>>,
}

/// The metadata groups as this node sees them (`GET /_admin/groups`; the field names are a
/// contract). Today's cluster is one root group holding everything ([`ShardMap::single`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GroupsStatus {
    /// The shard map's version.
    pub version: u64,
    pub groups: Vec<GroupStatus>,
}

/// One group of [`GroupsStatus`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GroupStatus {
    pub id: GroupId,
    /// `root`, `filedb` or `index`.
    pub kind: GroupKind,
    /// As this node's replica knows it; for a group it holds none of, as the group's
    /// replicas say (null while none names one).
    pub leader: Option<NodeId>,
    /// The voters: root's as its membership has them, ascending; another group's as the
    /// shard map places them, its first the preferred leader.
    pub replicas: Vec<NodeId>,
    /// Whether this node holds a replica of the group; the figures below are that
    /// replica's (0 and null where it holds none).
    pub held: bool,
    /// Records in every table of this node's replica.
    pub records: u64,
    /// This node's replica: the last log index it applied, and how far behind the last
    /// index it has in its log that is.
    pub last_applied: Option<u64>,
    pub lag: u64,
    /// The sha1 intervals it owns (hex; `end` null: to the highest sha1).
    pub filedb: Vec<Sha1Interval>,
    /// The (bucket, key) intervals it owns (`end` null: past the last key).
    pub index: Vec<KeyInterval>,
}

/// One replica's figures (see [`Metadata::replica_status`]).
#[derive(Clone, Debug)]
pub struct ReplicaStatus {
    pub leader: Option<NodeId>,
    /// The group's voters as this replica's membership has them, ascending.
    pub voters: Vec<NodeId>,
    pub records: u64,
    pub last_applied: Option<u64>,
    pub lag: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sha1Interval {
    pub start: String,
    pub end: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KeyInterval {
    pub start: IndexStart,
    pub end: Option<IndexStart>,
}

/// The replicated metadata as the rest of the gateway sees it: this node's replica of one
/// group.
pub struct Metadata {
    node_id: NodeId,
    group: GroupId,
    raft: MetaRaft,
    store: Arc<MetaStore>,
    rpc: Rpc,
    proposer: Proposer,
    barrier: ReadBarrier,
    applied: watch::Receiver<u64>,
    pairs_changed: watch::Receiver<u64>,
    /// Changes of the shard map or of the membership (root: what `Replicas::adopt` follows).
    map_changed: watch::Receiver<u64>,
    /// A fresh node that found the group already running (its data folder was emptied):
    /// it may have voted in a term before, and forgot; it grants no vote until it holds
    /// the group's state again.
    rejoining: bool,
    /// When a leader was last heard from (see [`elector`]).
    contact: Arc<LeaderContact>,
    /// The log, read for pre-vote answers.
    log: LogStore,
    /// openraft's leader lease (its longest election timeout).
    lease: Duration,
    /// The elector and the version raiser, stopped (and their handles on the stores
    /// dropped) at shutdown.
    tasks: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// What a node says of itself to a fresh peer asking (`/_cluster/state`).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct PeerState {
    pub last_applied: Option<u64>,
}

fn unavailable(e: impl std::fmt::Display) -> MetaError {
    MetaError::Unavailable(e.to_string())
}

/// Opens the state machine and the log of a data folder and starts this node's Raft.
///
/// A fresh node (nothing applied yet: a new data folder, or one from before replication)
/// that is listed in its own peers initializes the group with them; every voter of a new
/// group may do so with the same list (openraft allows it). A node restarted on its data
/// folder, or one waiting to be added as a learner, does not.
///
/// `transport` carries this node's RPCs to its peers (see [`network::Transport`]).
///
/// This is the root group, whose files are the data folder's own (a folder from before
/// groups existed is the root group holding everything); the other groups this node holds
/// a replica of are opened by [`Replicas`](super::Replicas).
pub async fn open(
    data_dir: &Path,
    cluster: ClusterConfig,
    transport: Arc<dyn network::Transport>,
) -> Result<Arc<Metadata>, MetaError> {
    open_replica(data_dir, ROOT, cluster, transport, true).await
}

/// Opens this node's replica of `group` on `dir` (created if missing) and starts its Raft.
/// `cluster.peers` are the group's voters, asked whether the group already runs if this
/// replica is fresh; with `initialize`, a fresh replica listed there and finding no running
/// group initializes it with them.
pub(super) async fn open_replica(
    data_dir: &Path,
    group: GroupId,
    cluster: ClusterConfig,
    transport: Arc<dyn network::Transport>,
    initialize: bool,
) -> Result<Arc<Metadata>, MetaError> {
    std::fs::create_dir_all(data_dir)
        .map_err(|e| MetaError::Storage(format!("cannot create {}: {e}", data_dir.display())))?;
    let store = Arc::new(MetaStore::open(&data_dir.join("meta.redb"))?);
    let mut log = LogStore::open(&data_dir.join("raft.redb"))?;
    let (pairs_tx, pairs_rx) = watch::channel(0u64);
    let (map_tx, map_rx) = watch::channel(0u64);
    let (applied_tx, applied_rx) = watch::channel(0u64);
    let fresh = machine::applied_state(&store.db())?.0.is_none();
    let has_data = fresh && !store.pairs()?.is_empty();
    let sm = StateMachine::open(
        store.clone(),
        SnapshotDir::new(data_dir.join("snapshots")),
        pairs_tx,
        map_tx,
        applied_tx,
    )?;
    log.gate_purges(sm.durable_index().subscribe());
    let config = Config {
        cluster_name: if group == ROOT {
            "dedup-gateway".into()
        } else {
            format!("dedup-gateway-group-{group}")
        },
        heartbeat_interval: (cluster.election_timeout_ms / 5).max(1),
        election_timeout_min: cluster.election_timeout_ms,
        election_timeout_max: cluster.election_timeout_ms * 2,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(cluster.snapshot_logs.max(1)),
        snapshot_max_chunk_size: 1 << 20,
        max_payload_entries: 256,
        // Entries kept behind a snapshot, for followers a little behind to catch up
        // without a snapshot install: at most one snapshot interval, so that a small
        // `--snapshot-logs` (tests) really purges the log at every snapshot.
        max_in_snapshot_log_to_keep: cluster.snapshot_logs.clamp(1, 1000),
        // Elections are called by the pre-vote elector (see `elector.rs`), never by
        // openraft's own timer: a node cut off by a partition must not raise its term.
        enable_elect: false,
        ..Default::default()
    };
    let config = Arc::new(
        config
            .validate()
            .map_err(|e| MetaError::Storage(e.to_string()))?,
    );
    let rpc = Rpc::new(transport, group);
    let network = Network { rpc: rpc.clone() };
    let lease = Duration::from_millis(config.election_timeout_max);
    let election_timeout_min = Duration::from_millis(config.election_timeout_min);
    let log_reader = log.clone();
    let raft = Raft::new(cluster.node_id, config, network, log, sm)
        .await
        .map_err(|e| MetaError::Storage(e.to_string()))?;
    // A fresh node whose peers already hold committed state is not forming a new group:
    // its own data folder was emptied. It must not initialize (a second initial
    // membership) nor vote before it has caught up.
    let rejoining = fresh && group_is_running(&rpc, cluster.node_id, &cluster.peers).await;
    if rejoining {
        tracing::warn!(
            group,
            "this node has no metadata but its peers run the group: waiting to be caught up from the leader"
        );
    }
    if initialize && fresh && !rejoining {
        initialize_group(&raft, group, cluster.node_id, &cluster.peers).await?;
    }
    let contact = Arc::new(LeaderContact::new());
    let elector = tokio::spawn(
        Elector {
            raft: raft.clone(),
            rpc: rpc.clone(),
            log: log_reader.clone(),
            me: cluster.node_id,
            contact: contact.clone(),
            election_timeout_min,
            lease,
        }
        .run(),
    );
    let metadata = Arc::new(Metadata {
        node_id: cluster.node_id,
        group,
        proposer: Proposer::start(raft.clone(), rpc.clone(), cluster.node_id),
        barrier: ReadBarrier::new(raft.clone(), rpc.clone(), cluster.node_id),
        raft,
        store,
        rpc,
        applied: applied_rx,
        pairs_changed: pairs_rx,
        map_changed: map_rx,
        rejoining,
        contact,
        log: log_reader,
        lease,
        tasks: std::sync::Mutex::new(vec![elector]),
    });
    let raiser = tokio::spawn(raise_cluster_version(Arc::downgrade(&metadata)));
    if let Ok(mut tasks) = metadata.tasks.lock() {
        tasks.push(raiser);
    }
    if has_data {
        // Tables written before replication are not in the log: a snapshot holds them,
        // and the log before it is purged, so that a node added later starts from the
        // snapshot rather than from an empty log that lacks them.
        metadata.snapshot_now().await?;
    }
    Ok(metadata)
}

/// How often a leader whose group is below this binary's format asks its members again,
/// after they could not all take the new one.
const RAISE_INTERVAL: Duration = Duration::from_secs(2);
/// How often the raiser looks whether this node leads: a new leader of a group below its
/// format asks its members at once, so that a fresh group serves the newest commands
/// within moments of its first election.
const RAISE_POLL: Duration = Duration::from_millis(100);

/// What one look at the group's format version did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raise {
    /// This node does not lead: the leader raises.
    NotLeader,
    /// The group already has this binary's format.
    Current,
    /// A member does not know a newer format than the group's, or cannot be asked.
    Waiting,
    /// The group's version is now this one.
    Raised(u32),
}

/// On the leader: raises the group's format version to the newest every member knows
/// (see `cluster_version.rs`). Ends when the metadata is dropped.
async fn raise_cluster_version(meta: std::sync::Weak<Metadata>) {
    let mut next = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(RAISE_POLL).await;
        let Some(meta) = meta.upgrade() else { return };
        if tokio::time::Instant::now() < next {
            continue;
        }
        match meta.raise_format().await {
            // Leadership is looked at again at the next poll; the rest waits.
            Ok(Raise::NotLeader) => {}
            Ok(Raise::Current | Raise::Waiting | Raise::Raised(_)) => {
                next = tokio::time::Instant::now() + RAISE_INTERVAL;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot raise the cluster's format version");
                next = tokio::time::Instant::now() + RAISE_INTERVAL;
            }
        }
    }
}

/// Initializes `group` with `cluster.peers` as its voters, if this node is one of them.
/// Every voter of a new group may do so with the same list; one whose log already holds
/// anything is refused by openraft, which is no error.
async fn initialize_group(
    raft: &MetaRaft,
    group: GroupId,
    me: NodeId,
    peers: &BTreeMap<NodeId, String>,
) -> Result<(), MetaError> {
    if !peers.contains_key(&me) {
        return Ok(());
    }
    let members: BTreeMap<NodeId, Node> = peers
        .iter()
        .map(|(id, addr)| (*id, BasicNode::new(addr)))
        .collect();
    match raft.initialize(members).await {
        Ok(()) => {
            tracing::info!(group, ?peers, "initialized the metadata group");
            Ok(())
        }
        Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
        Err(e) => Err(MetaError::Storage(e.to_string())),
    }
}

/// Whether any other peer has applied committed entries (a leader was elected there).
async fn group_is_running(rpc: &Rpc, me: NodeId, peers: &BTreeMap<NodeId, String>) -> bool {
    for (id, addr) in peers {
        if *id == me {
            continue;
        }
        let state: Result<PeerState, _> =
            rpc.call(addr, Call::State, &(), PEER_PROBE_TIMEOUT).await;
        if let Ok(PeerState {
            last_applied: Some(index),
        }) = state
            && index >= 1
        {
            return true;
        }
    }
    false
}

impl Metadata {
    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// Whether this replica has never held anything: no log entry, no membership (a
    /// replica opened but not yet initialized, nor reached by its group's leader).
    pub fn is_blank(&self) -> bool {
        let m = self.raft.metrics().borrow().clone();
        m.last_log_index.is_none()
            && m.last_applied.is_none()
            && m.membership_config
                .membership()
                .voter_ids()
                .next()
                .is_none()
    }

    /// Initializes a [blank](Self::is_blank) replica's group with `voters` (by S3
    /// address), unless one of them already runs it: for the replica that was to start
    /// the group and stopped before it did.
    pub async fn initialize_blank(
        &self,
        voters: BTreeMap<NodeId, String>,
    ) -> Result<(), MetaError> {
        if !self.is_blank() {
            return Ok(());
        }
        if group_is_running(&self.rpc, self.node_id, &voters).await {
            return Ok(());
        }
        initialize_group(&self.raft, self.group, self.node_id, &voters).await
    }

    /// Every applied change of the shard map or of the membership.
    pub fn map_changed(&self) -> watch::Receiver<u64> {
        self.map_changed.clone()
    }

    /// What this node tells a fresh peer.
    pub fn peer_state(&self) -> PeerState {
        PeerState {
            last_applied: self.raft.metrics().borrow().last_applied.map(|l| l.index),
        }
    }

    /// Whether this node may grant votes now: not while it rejoins with an emptied data
    /// folder and has not received the group's state yet.
    pub fn may_vote(&self) -> bool {
        !self.rejoining || *self.applied.borrow() > 0
    }

    pub fn store(&self) -> &Arc<MetaStore> {
        &self.store
    }

    /// openraft's append (entries or a heartbeat) from a leader; an accepted one is
    /// contact with a leader, which holds back this node's elector.
    ///
    /// The append runs in a task of its own: the leader gives up on an append after its
    /// heartbeat interval and drops the connection, which drops the request's handler. An
    /// append slowed past that by a busy disk is still accepted here, and must still count
    /// as contact; otherwise a leader whose followers all answer late is deposed by their
    /// electors although every one of them keeps accepting its entries.
    pub async fn append_entries(
        &self,
        req: openraft::raft::AppendEntriesRequest<TypeConfig>,
    ) -> Result<openraft::raft::AppendEntriesResponse<NodeId>, RaftError<NodeId>> {
        let (raft, contact) = (self.raft.clone(), self.contact.clone());
        let append = tokio::spawn(async move {
            let resp = raft.append_entries(req).await;
            if matches!(&resp, Ok(r) if !matches!(r, openraft::raft::AppendEntriesResponse::HigherVote(_)))
            {
                contact.touch();
            }
            resp
        });
        match append.await {
            Ok(resp) => resp,
            Err(e) => {
                tracing::error!(error = %e, "the append task of a leader's entries failed");
                Err(RaftError::Fatal(openraft::error::Fatal::Panicked))
            }
        }
    }

    /// openraft's snapshot chunk from a leader; an accepted one is contact too.
    pub async fn install_snapshot(
        &self,
        req: openraft::raft::InstallSnapshotRequest<TypeConfig>,
    ) -> Result<
        openraft::raft::InstallSnapshotResponse<NodeId>,
        RaftError<NodeId, openraft::error::InstallSnapshotError>,
    > {
        let vote = req.vote;
        let resp = self.raft.install_snapshot(req).await;
        if matches!(&resp, Ok(r) if r.vote <= vote) {
            self.contact.touch();
        }
        resp
    }

    /// Answers a candidate's pre-vote (see [`elector`]).
    pub async fn pre_vote(&self, req: PreVoteRequest) -> PreVoteResponse {
        let last_log_id = match self.log.last_log_id().await {
            Ok(l) => l,
            Err(e) => {
                return PreVoteResponse {
                    granted: false,
                    refused: Some(format!("cannot read the log: {e}")),
                };
            }
        };
        let m = self.raft.metrics().borrow().clone();
        let voters: BTreeSet<NodeId> = m.membership_config.membership().voter_ids().collect();
        elector::answer(
            &elector::Voter {
                state: m.state,
                current_term: m.current_term,
                last_log_id,
                silence: self.contact.silence(),
                lease: self.lease,
                may_vote: self.may_vote(),
                voters: &voters,
            },
            &req,
        )
    }

    pub fn raft(&self) -> &MetaRaft {
        &self.raft
    }

    pub fn rpc(&self) -> &Rpc {
        &self.rpc
    }

    /// Commits one command through the log and answers its result once it is applied.
    /// A command of a format the group has not reached yet (a rolling upgrade in
    /// progress) is refused before it is proposed: some member could not read it.
    pub async fn execute(&self, cmd: Command) -> Result<Response, MetaError> {
        self.execute_answer(cmd)
            .await
            .unwrap_or_else(|unsent| Err(unsent.into()))
    }

    /// [`Metadata::execute`], saying apart a command that reached no log (which another
    /// replica may take) from one whose outcome is unknown.
    pub(crate) async fn execute_answer(&self, cmd: Command) -> proposer::Answer {
        let need = cmd.format_version();
        if need > cluster_version::FORMAT_VERSION_INITIAL {
            let have = match self.read_local(|m| m.cluster_version()).await {
                Ok(have) => have,
                Err(e) => return Ok(Err(e)),
            };
            if need > have {
                return Ok(Err(unavailable(format!(
                    "this command needs format version {need} and the cluster runs {have}: \
                     a node of an older release is still a member (finish the upgrade)"
                ))));
            }
        }
        self.proposer.submit_answer(cmd).await
    }

    /// Whether this replica leads its group now (by its own metrics: a leader cut off
    /// from its group believes it until its lease runs out; what it proposes then fails).
    pub fn leads(&self) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow();
        m.state == ServerState::Leader && m.current_leader == Some(self.node_id)
    }

    /// Whether this replica's Raft has stopped (its node shuts down, or a move took the
    /// replica off this node and it is being dropped): a call that took it before then
    /// goes to the group's other replicas.
    pub fn stopped(&self) -> bool {
        self.raft.metrics().borrow().state == openraft::ServerState::Shutdown
    }

    /// The newest format every member knows now: this binary's, lowered by each other
    /// member's answer to `/_cluster/version`. A member that answers with an HTTP error
    /// is a release from before the question (its router takes the path for an S3
    /// request and answers 403): version 1. `None` while a member cannot be reached.
    /// If this node leads, raises the group's format version to the newest that every
    /// member knows. The server calls it once a single node leads, so that a new single
    /// node starts on the newest format; the raiser task calls it on every leader.
    pub async fn raise_format(&self) -> Result<Raise, MetaError> {
        if !self.raft.metrics().borrow().state.is_leader() {
            return Ok(Raise::NotLeader);
        }
        let have = self.read_local(|m| m.cluster_version()).await?;
        if have >= cluster_version::FORMAT_VERSION {
            return Ok(Raise::Current);
        }
        let Some(known) = self.members_format_version().await else {
            return Ok(Raise::Waiting);
        };
        if known <= have {
            return Ok(Raise::Waiting);
        }
        // The raise is the gate itself: proposed as is, past `execute`'s check.
        self.proposer
            .submit(Command::SetClusterVersion { version: known })
            .await?;
        tracing::info!(
            from = have,
            to = known,
            "raised the cluster's format version"
        );
        Ok(Raise::Raised(known))
    }

    async fn members_format_version(&self) -> Option<u32> {
        let membership = self.raft.metrics().borrow().membership_config.clone();
        let mut lowest = cluster_version::FORMAT_VERSION;
        for (id, node) in membership.membership().nodes() {
            if *id == self.node_id {
                continue;
            }
            let answer: Result<u32, _> = self
                .rpc
                .call(&node.addr, Call::Version, &(), PEER_PROBE_TIMEOUT)
                .await;
            let version = match answer {
                Ok(v) => v,
                Err(network::RpcError::Status(..)) => cluster_version::FORMAT_VERSION_INITIAL,
                Err(e) => {
                    tracing::debug!(node = id, error = %e, "format version not known");
                    return None;
                }
            };
            lowest = lowest.min(version);
        }
        Some(lowest)
    }

    /// Waits until this node's state machine holds every write acknowledged before the
    /// call (read index confirmed by the leader).
    pub async fn linearize(&self) -> Result<(), MetaError> {
        let index = self.barrier.read_index().await?;
        self.wait_applied(index).await
    }

    /// Waits until the local state machine has applied `index`.
    pub async fn wait_applied(&self, index: u64) -> Result<(), MetaError> {
        let mut applied = self.applied.clone();
        let wait = applied.wait_for(|a| *a >= index);
        match tokio::time::timeout(READ_TIMEOUT, wait).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(unavailable("metadata is shutting down")),
            Err(_) => Err(unavailable(format!(
                "this node has not applied index {index} within {READ_TIMEOUT:?}"
            ))),
        }
    }

    /// A read as of now: linearizable, then on the local state machine.
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&MetaStore) -> Result<T, MetaError> + Send + 'static,
    ) -> Result<T, MetaError> {
        self.linearize().await?;
        self.read_local(f).await
    }

    /// A read that settles on the local state machine when `settled` accepts its answer,
    /// and is otherwise run again as of now (linearizable): for answers a lagging node can
    /// only get wrong in one direction (a bucket it has applied exists until a command says
    /// otherwise; one it lacks may just have been created elsewhere), so the common case
    /// costs no read-index round.
    pub async fn read_unless_settled<T: Send + 'static>(
        &self,
        f: impl Fn(&MetaStore) -> Result<T, MetaError> + Clone + Send + 'static,
        settled: impl FnOnce(&T) -> bool,
    ) -> Result<T, MetaError> {
        let local = self.read_local(f.clone()).await?;
        if settled(&local) {
            return Ok(local);
        }
        self.read(f).await
    }

    /// A read of the local state machine, which may lag the leader: only where a stale
    /// answer is checked again by a command (the dedup pre-check), or right after a
    /// linearizable read in the same request.
    pub async fn read_local<T: Send + 'static>(
        &self,
        f: impl FnOnce(&MetaStore) -> Result<T, MetaError> + Send + 'static,
    ) -> Result<T, MetaError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| MetaError::Storage(e.to_string()))?
    }

    /// The leader's read index, answered only by the leader (a follower's barrier asks
    /// it over `/_cluster/read-index`).
    pub async fn leader_read_index(&self) -> Result<u64, MetaError> {
        // A leader whose log holds its own removal (a move takes its replica off this
        // node) may hold entries past it that will never commit: a read index raised to
        // its log's end (see `local_read_index`) would make the follower wait for an index
        // that the next leader reaches only with later writes, up to the read's timeout.
        // The follower asks the group's next leader instead.
        if member_leader(&self.raft.metrics().borrow()) != Some(self.node_id()) {
            return Err(unavailable(format!(
                "node {} leads group {} no more (a membership change removes it)",
                self.node_id(),
                self.rpc.group()
            )));
        }
        barrier::local_read_index(&self.raft).await
    }

    /// Runs a batch forwarded by a follower (this node leads): its commands join this
    /// node's own in the proposer, and each keeps its own result. Should leadership move
    /// meanwhile, the proposer takes them to the new leader like any local command.
    ///
    /// A command of a format the group has not reached is refused here too, in its slot:
    /// a node sending to a group it holds no replica of (`Replicas::send`) cannot check
    /// the group's format itself.
    pub async fn forwarded_write(&self, batch: Batch) -> proposer::WriteReply {
        if batch.0.is_empty() {
            // A fence (see `proposer::fence`): an entry of its own, appended now.
            return proposer::leader_write(&self.raft, batch).await;
        }
        let newest = batch.0.iter().map(Command::format_version).max();
        let have = if newest.is_some_and(|n| n > cluster_version::FORMAT_VERSION_INITIAL) {
            match self.read_local(|m| m.cluster_version()).await {
                Ok(have) => have,
                Err(e) => return proposer::WriteReply::Unavailable(e.to_string()),
            }
        } else {
            cluster_version::FORMAT_VERSION_INITIAL
        };
        let (admitted, refused): (Vec<_>, Vec<_>) = batch
            .0
            .into_iter()
            .enumerate()
            .partition(|(_, cmd)| cmd.format_version() <= have);
        let (slots, cmds): (Vec<usize>, Vec<Command>) = admitted.into_iter().unzip();
        let mut results: Vec<Result<Response, MetaError>> = Vec::new();
        results.resize_with(slots.len() + refused.len(), || {
            Err(unavailable("no answer"))
        });
        let none_refused = refused.is_empty();
        for (slot, cmd) in refused {
            let need = cmd.format_version();
            results[slot] = Err(unavailable(format!(
                "this command needs format version {need} and the group runs {have}"
            )));
        }
        let answers = self.proposer.submit_all(cmds).await;
        // Appended nowhere (this node stopped leading, or its replica is being dropped after
        // a move took it out of the group, between the sender's choice and the append):
        // the sender may send the batch again, to the leader it learns of next.
        if none_refused
            && !answers.is_empty()
            && answers
                .iter()
                .all(|a| matches!(a, Err(proposer::Unsent::NotAppended(_))))
        {
            return proposer::WriteReply::NotLeader(None);
        }
        for (slot, answer) in slots.into_iter().zip(answers) {
            results[slot] = answer.unwrap_or_else(|unsent| Err(unsent.into()));
        }
        proposer::WriteReply::Done(BatchResult(results))
    }

    /// A read as of now that no command submitted before it can still change later: a
    /// fence through the log, then a linearizable read. For deletion decisions: a file
    /// older than [`proposer::APPEND_BOUND`] whose record this finds missing will never
    /// get one from a command already in flight (a plain linearizable read can miss a
    /// command appended to the leader's log but not yet committed).
    pub async fn read_fenced<T: Send + 'static>(
        &self,
        f: impl FnOnce(&MetaStore) -> Result<T, MetaError> + Send + 'static,
    ) -> Result<T, MetaError> {
        proposer::fence(&self.raft, &self.rpc, self.node_id).await?;
        self.read(f).await
    }

    /// Changes after which PairDB must be reloaded.
    pub fn pairs_changed(&self) -> watch::Receiver<u64> {
        self.pairs_changed.clone()
    }

    /// Whether this node leads now, and every change of it.
    pub fn leadership(&self) -> watch::Receiver<bool> {
        let (tx, rx) = watch::channel(false);
        let mut metrics = self.raft.metrics();
        let me = self.node_id;
        tokio::spawn(async move {
            loop {
                let leading = {
                    let m = metrics.borrow_and_update();
                    m.state == ServerState::Leader && m.current_leader == Some(me)
                };
                tx.send_if_modified(|v| std::mem::replace(v, leading) != leading);
                if metrics.changed().await.is_err() || tx.is_closed() {
                    return;
                }
            }
        });
        rx
    }

    /// Waits (bounded) until some node leads.
    pub async fn wait_leader(&self, limit: Duration) -> Result<NodeId, MetaError> {
        let mut metrics = self.raft.metrics();
        let wait = metrics.wait_for(|m| m.current_leader.is_some());
        match tokio::time::timeout(limit, wait).await {
            Ok(Ok(m)) => m.current_leader.ok_or_else(|| unavailable("no leader")),
            Ok(Err(_)) => Err(unavailable("metadata is shutting down")),
            Err(_) => Err(unavailable(format!("no leader elected within {limit:?}"))),
        }
    }

    pub fn status(&self) -> ClusterStatus {
        let m = self.raft.metrics().borrow().clone();
        let membership = m.membership_config.membership();
        ClusterStatus {
            node_id: self.node_id,
            leader: m.current_leader,
            members: membership.voter_ids().collect(),
            learners: membership.learner_ids().collect(),
            nodes: membership
                .nodes()
                .map(|(id, n)| (*id, n.addr.clone()))
                .collect(),
            term: m.current_term,
            last_log_index: m.last_log_index,
            last_applied: m.last_applied.map(|l| l.index),
            snapshot: m.snapshot.map(|l| l.index),
            purged: m.purged.map(|l| l.index),
            state: format!("{:?}", m.state),
            cluster_version: self.store.cluster_version().ok(),
            format_version: cluster_version::FORMAT_VERSION,
            leaving: None,
        }
    }

    /// [`Metadata::status`] with the nodes leaving the cluster, read from this replica.
    pub async fn status_with_leaving(&self) -> Result<ClusterStatus, MetaError> {
        let leaving = self.read_local(|s| s.leaving()).await?;
        Ok(ClusterStatus {
            leaving: Some(leaving.into_iter().collect()),
            ..self.status()
        })
    }

    /// This replica's line of [`GroupsStatus`]: leader, records, applied index and lag.
    pub async fn replica_status(&self) -> Result<ReplicaStatus, MetaError> {
        let records = self.read_local(|s| s.record_count()).await?;
        let m = self.raft.metrics().borrow().clone();
        let last_applied = m.last_applied.map(|l| l.index);
        let mut voters: Vec<NodeId> = m.membership_config.membership().voter_ids().collect();
        voters.sort_unstable();
        Ok(ReplicaStatus {
            leader: m.current_leader,
            voters,
            records,
            last_applied,
            lag: m
                .last_log_index
                .unwrap_or(0)
                .saturating_sub(last_applied.unwrap_or(0)),
        })
    }

    /// Runs a membership change on the leader (forwarded there from a follower).
    pub async fn change_membership(&self, op: MembershipOp) -> Result<ClusterStatus, MetaError> {
        let leader = self.wait_leader(LEADER_WAIT).await?;
        if leader != self.node_id {
            let addr = self.node_addr(leader)?;
            let reply: Result<(), MetaError> = self
                .rpc
                .call(&addr, Call::Membership, &op, WRITE_TIMEOUT * 3)
                .await
                .map_err(unavailable)?;
            reply?;
            return Ok(self.status());
        }
        self.leader_change_membership(op).await?;
        Ok(self.status())
    }

    /// A membership change on this node, which must lead. An added learner is answered
    /// once it has caught up, within [`CATCH_UP_WAIT`] (else `Unavailable`: ask again).
    pub async fn leader_change_membership(&self, op: MembershipOp) -> Result<(), MetaError> {
        let map = |e: RaftError<NodeId, ClientWriteError<NodeId, Node>>| match e {
            RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
                unavailable(format!("not the leader (leader: {:?})", f.leader_id))
            }
            RaftError::APIError(ClientWriteError::ChangeMembershipError(c)) => {
                MetaError::InvalidPart(c.to_string())
            }
            other => unavailable(other),
        };
        // Only the leader's view of the membership decides that a change is done: a
        // follower that lags would answer a change it has not seen yet as done.
        let leader = self.raft.metrics().borrow().current_leader;
        if leader != Some(self.node_id) {
            return Err(unavailable(format!("not the leader (leader: {leader:?})")));
        }
        let (voters, learners): (BTreeSet<NodeId>, BTreeSet<NodeId>) = {
            let m = self.raft.metrics().borrow().membership_config.clone();
            (
                m.membership().voter_ids().collect(),
                m.membership().learner_ids().collect(),
            )
        };
        // Each change asked again once done changes nothing: a driver that lost its
        // answer (a move's steps, see `split.rs`) asks again.
        match op {
            MembershipOp::AddLearner { id, .. } if voters.contains(&id) => {}
            MembershipOp::Promote { id } if voters.contains(&id) => {}
            MembershipOp::Remove { id } if !voters.contains(&id) && !learners.contains(&id) => {}
            MembershipOp::AddLearner { id, addr } => {
                // Added once (adding it again would append another membership entry),
                // then answered once it has caught up with the log as it stands now, or
                // refused after `CATCH_UP_WAIT`: the caller asks again (a move's driver
                // next round, when it also sees a cancel; an operator), and the
                // replication goes on meanwhile. openraft's own blocking add waits for
                // ever, which a learner on a node that died never ends.
                if !learners.contains(&id) {
                    self.raft
                        .add_learner(id, BasicNode::new(addr), false)
                        .await
                        .map_err(map)?;
                }
                let target = self.raft.metrics().borrow().last_log_index;
                let me = self.node_id;
                let waited = self
                    .raft
                    .wait(Some(CATCH_UP_WAIT))
                    .metrics(
                        |m| {
                            m.current_leader != Some(me)
                                || m.replication.as_ref().is_some_and(|r| {
                                    r.get(&id).is_some_and(|matched| {
                                        matched.as_ref().map(|l| l.index) >= target
                                    })
                                })
                        },
                        "the new learner catches up",
                    )
                    .await;
                match waited {
                    Ok(m) if m.current_leader == Some(me) => {}
                    Ok(_) => {
                        return Err(unavailable(format!(
                            "node {me} stopped leading while node {id} caught up; ask again"
                        )));
                    }
                    Err(_) => {
                        return Err(unavailable(format!(
                            "node {id} is a learner and has not caught up within {CATCH_UP_WAIT:?}; ask again"
                        )));
                    }
                }
            }
            MembershipOp::Promote { id } => {
                self.raft
                    .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), true)
                    .await
                    .map_err(map)?;
            }
            MembershipOp::Remove { id } => {
                let change = if voters.contains(&id) {
                    ChangeMembers::RemoveVoters(BTreeSet::from([id]))
                } else {
                    ChangeMembers::RemoveNodes(BTreeSet::from([id]))
                };
                // retain=false: a removed voter is not kept as a learner.
                self.raft
                    .change_membership(change, false)
                    .await
                    .map_err(map)?;
            }
        }
        Ok(())
    }

    /// The S3 address of a member.
    pub fn node_addr(&self, id: NodeId) -> Result<String, MetaError> {
        member_addr(&self.raft, id)
    }

    /// Builds a snapshot now and purges the log behind it.
    pub async fn snapshot_now(&self) -> Result<(), MetaError> {
        self.wait_leader(LEADER_WAIT * 10).await?;
        self.raft.trigger().snapshot().await.map_err(unavailable)?;
        let applied = *self.applied.borrow();
        let mut metrics = self.raft.metrics();
        let built = metrics.wait_for(|m| m.snapshot.is_some_and(|s| s.index >= applied));
        let snap = match tokio::time::timeout(WRITE_TIMEOUT * 6, built).await {
            Ok(Ok(m)) => m.snapshot,
            _ => return Err(unavailable("snapshot not built in time")),
        };
        if let Some(s) = snap {
            self.raft
                .trigger()
                .purge_log(s.index)
                .await
                .map_err(unavailable)?;
        }
        Ok(())
    }

    /// Writes a consistent snapshot of the state machine (every acknowledged write) to
    /// `path`, while serving.
    pub async fn backup(&self, path: PathBuf) -> Result<u64, MetaError> {
        self.linearize().await?;
        let db = self.store.db();
        tokio::task::spawn_blocking(move || {
            machine::build_snapshot_file(&db, &path)
                .map(|m| m.last_log_id.map_or(0, |l| l.index))
                .map_err(MetaError::Storage)
        })
        .await
        .map_err(|e| MetaError::Storage(e.to_string()))?
    }

    /// Stops Raft and makes the applied state durable (a clean restart replays nothing).
    pub async fn shutdown(&self) {
        let tasks = match self.tasks.lock() {
            Ok(mut g) => std::mem::take(&mut *g),
            Err(p) => std::mem::take(&mut *p.into_inner()),
        };
        for task in tasks {
            task.abort();
            let _ = task.await;
        }
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
        let db = self.store.db();
        match tokio::task::spawn_blocking(move || StateMachine::checkpoint(&db)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "final checkpoint"),
            Err(e) => tracing::warn!(error = %e, "final checkpoint"),
        }
    }
}

#[cfg(test)]
mod tests {
    use placement::{DiskRef, Magic, PairId, PairRecord, Sha1};

    use super::*;
    use crate::raft::{RestoreError, restore};
    use crate::{ContentSource, ObjectRecord};

    fn pair(dir: &Path) -> Command {
        Command::PutPair {
            id: PairId(0),
            record: PairRecord::new([
                DiskRef::local(dir.join("d0")),
                DiskRef::local(dir.join("d1")),
            ]),
        }
    }

    fn object(n: u8) -> ObjectRecord {
        ObjectRecord {
            sha1: Sha1([n; 20]),
            magic: Magic::random(),
            size_bytes: 3,
            crc32: 7,
            md5: [n; 16],
            content_type: None,
            user_meta: vec![],
            created_ms: 1,
            seq: 0,
            headers: vec![],
            part_sizes: vec![],
            checksum: None,
        }
    }

    fn put(bucket: &str, key: &str, n: u8) -> Command {
        Command::PutObject {
            bucket: bucket.into(),
            key: key.into(),
            object: object(n),
            source: ContentSource::Stored(PairId(0)),
            now_secs: 1,
            precondition: None,
        }
    }

    async fn single(dir: &Path) -> Arc<Metadata> {
        open(
            dir,
            ClusterConfig::single("127.0.0.1:1".into()),
            Arc::new(network::NoPeers),
        )
        .await
        .unwrap()
    }

    /// Node 1 of a two-voter group whose other member cannot be reached: it never leads.
    async fn alone_of_two(dir: &Path) -> Arc<Metadata> {
        let cluster = ClusterConfig {
            node_id: 1,
            peers: std::collections::BTreeMap::from([
                (1, "127.0.0.1:1".to_string()),
                (2, "127.0.0.1:2".to_string()),
            ]),
            ..ClusterConfig::single("127.0.0.1:1".into())
        };
        open(dir, cluster, Arc::new(network::NoPeers))
            .await
            .unwrap()
    }

    /// A command of a format the group has not reached is refused before it is proposed:
    /// here a two-voter group whose other member cannot be reached, so the leader's raise
    /// can never happen and the group stays at format 1.
    #[tokio::test]
    async fn a_command_of_a_newer_format_is_refused_before_the_raise() {
        let dir = tempfile::tempdir().unwrap();
        let meta = alone_of_two(dir.path()).await;
        let version = || meta.read_local(|m| m.cluster_version());
        assert_eq!(version().await.unwrap(), 1);
        let cmd = Command::SetClusterVersion { version: 2 };
        assert_eq!(cmd.format_version(), 2);
        let refused = meta.execute(cmd).await;
        assert!(
            matches!(&refused, Err(MetaError::Unavailable(why)) if why.contains("needs format version 2")),
            "{refused:?}"
        );
        assert_eq!(version().await.unwrap(), 1, "nothing was applied");
        meta.shutdown().await;
    }

    /// A batch forwarded to a node that finds no leader before it appends it (a leader
    /// that stepped down between the sender's choice and the append: a move took its
    /// replica out of the group) is answered "not the leader", which the sender may send
    /// again to the leader it learns of next; before, each command failed, a 503 to the
    /// client. Here a node of two voters whose peer cannot be reached never has a leader.
    #[tokio::test]
    async fn a_batch_forwarded_to_a_node_without_a_leader_is_refused_as_not_appended() {
        let dir = tempfile::tempdir().unwrap();
        let meta = alone_of_two(dir.path()).await;
        let reply = meta
            .forwarded_write(Batch(vec![put("b", "k", 1), put("b", "l", 2)]))
            .await;
        assert!(
            matches!(reply, proposer::WriteReply::NotLeader(None)),
            "{reply:?}"
        );
        meta.shutdown().await;
    }

    /// Once every member knows the new format, the leader raises the group's version and
    /// the same command goes through.
    #[tokio::test]
    async fn a_command_of_a_newer_format_passes_after_the_raise() {
        let dir = tempfile::tempdir().unwrap();
        let meta = single(dir.path()).await;
        meta.wait_leader(Duration::from_secs(10)).await.unwrap();
        let mut raised = false;
        for _ in 0..100 {
            if meta.read_local(|m| m.cluster_version()).await.unwrap()
                == crate::cluster_version::FORMAT_VERSION
            {
                raised = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(raised, "the leader did not raise the format within 10 s");
        let answer = meta
            .execute(Command::SetClusterVersion { version: 2 })
            .await
            .unwrap();
        // An older raise is a no-op: the version stays where the leader raised it.
        assert_eq!(
            answer,
            Response::ClusterVersion(crate::cluster_version::FORMAT_VERSION)
        );
        meta.shutdown().await;
    }

    /// openraft's own storage suite (log state, purge, truncate, vote, membership from log
    /// and state machine, applied state, snapshots) against our log store and state
    /// machine, each on fresh files.
    struct Stores;

    impl openraft::testing::StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir>
        for Stores
    {
        async fn build(
            &self,
        ) -> Result<(tempfile::TempDir, LogStore, StateMachine), openraft::StorageError<NodeId>>
        {
            let io = |e: MetaError| {
                openraft::StorageError::from(openraft::StorageIOError::read(
                    &std::io::Error::other(e.to_string()),
                ))
            };
            let dir = tempfile::tempdir().map_err(|e| io(MetaError::Storage(e.to_string())))?;
            let store = Arc::new(MetaStore::open(&dir.path().join("meta.redb")).map_err(io)?);
            let log = LogStore::open(&dir.path().join("raft.redb"))
                .map_err(|e| io(MetaError::Storage(e.to_string())))?;
            let sm = StateMachine::open(
                store,
                SnapshotDir::new(dir.path().join("snapshots")),
                watch::channel(0).0,
                watch::channel(0).0,
                watch::channel(0).0,
            )
            .map_err(io)?;
            Ok((dir, log, sm))
        }
    }

    #[test]
    fn openraft_storage_suite_passes() {
        openraft::testing::Suite::test_all(Stores).unwrap();
    }

    #[tokio::test]
    async fn a_database_from_before_replication_is_upgraded_in_place() {
        let dir = tempfile::tempdir().unwrap();
        {
            // The layout of a gateway from before replication: tables, no Raft state.
            let old = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
            old.execute(&pair(dir.path())).unwrap();
            old.execute(&Command::CreateBucket {
                bucket: "mail".into(),
                created_ms: 1,
            })
            .unwrap();
            old.execute(&put("mail", "inbox/1", 1)).unwrap();
        }
        let meta = single(dir.path()).await;
        let found = meta.read(|m| m.object("mail", "inbox/1")).await.unwrap();
        assert_eq!(found.map(|o| o.sha1), Some(Sha1([1; 20])));
        // The old tables are in a snapshot and the log before it is purged: a node added
        // later starts from the snapshot, not from a log that lacks them.
        let m = meta.raft().metrics().borrow().clone();
        assert!(m.snapshot.is_some(), "{m:?}");
        assert!(m.purged.is_some(), "{m:?}");
        meta.execute(put("mail", "inbox/2", 2)).await.unwrap();
        meta.shutdown().await;
        drop(meta);
        // Restarted: nothing initialized twice, both objects there.
        let meta = single(dir.path()).await;
        meta.wait_leader(Duration::from_secs(10)).await.unwrap();
        for key in ["inbox/1", "inbox/2"] {
            let k = key.to_string();
            let found = meta.read(move |m| m.object("mail", &k)).await.unwrap();
            assert!(found.is_some(), "{key} lost");
        }
        meta.shutdown().await;
    }

    #[tokio::test]
    async fn concurrent_commands_share_log_entries_and_a_failure_stays_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let meta = single(dir.path()).await;
        meta.wait_leader(Duration::from_secs(10)).await.unwrap();
        let before = meta.status().last_log_index.unwrap_or(0);
        let n = 200;
        let mut tasks = Vec::new();
        for i in 0..n {
            let meta = meta.clone();
            // Bucket "b0" is created twice: exactly one of the two fails, alone.
            let name = format!("b{}", i % (n - 1));
            tasks.push(tokio::spawn(async move {
                meta.execute(Command::CreateBucket {
                    bucket: name,
                    created_ms: 1,
                })
                .await
            }));
        }
        let mut exists = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(_) => {}
                Err(MetaError::BucketExists) => exists += 1,
                Err(e) => panic!("unexpected {e}"),
            }
        }
        assert_eq!(exists, 1);
        let buckets = meta.read(|m| m.buckets()).await.unwrap();
        assert_eq!(buckets.len(), n - 1);
        let entries = meta.status().last_log_index.unwrap_or(0) - before;
        assert!(
            entries < n as u64 / 2,
            "{n} concurrent commands took {entries} log entries: no group commit"
        );
        meta.shutdown().await;
    }

    #[tokio::test]
    async fn a_snapshot_round_trips_every_table_and_damage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let meta = single(dir.path()).await;
        meta.wait_leader(Duration::from_secs(10)).await.unwrap();
        // The format raiser's command would otherwise land between the backup and the
        // digest it is compared with, at a moment of its own.
        let raised = tokio::time::Instant::now() + Duration::from_secs(10);
        while meta.store().cluster_version().unwrap() < cluster_version::FORMAT_VERSION {
            assert!(
                tokio::time::Instant::now() < raised,
                "the format was never raised"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        meta.execute(pair(dir.path())).await.unwrap();
        meta.execute(Command::CreateBucket {
            bucket: "mail".into(),
            created_ms: 1,
        })
        .await
        .unwrap();
        for i in 0..50u8 {
            meta.execute(put("mail", &format!("k{i}"), i % 7))
                .await
                .unwrap();
        }
        let file = dir.path().join("backup.snap");
        meta.backup(file.clone()).await.unwrap();
        let want = meta.store().digest().unwrap();
        meta.shutdown().await;

        let restored = tempfile::tempdir().unwrap();
        restore(&file, restored.path()).unwrap();
        let got = MetaStore::open(&restored.path().join("meta.redb"))
            .unwrap()
            .digest()
            .unwrap();
        assert_eq!(got.tables, want.tables);
        assert_eq!(got.last_applied, want.last_applied);
        assert!(matches!(
            restore(&file, restored.path()),
            Err(RestoreError::Exists(_))
        ));

        // One flipped byte in the middle: refused before anything is built.
        let mut bytes = std::fs::read(&file).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x40;
        let damaged = dir.path().join("damaged.snap");
        std::fs::write(&damaged, &bytes).unwrap();
        let target = tempfile::tempdir().unwrap();
        assert!(restore(&damaged, target.path()).is_err());
        assert!(!target.path().join("meta.redb").exists());
    }
}
