//! How a node takes part in a group ([`ClusterConfig`]) and the defaults of its settings.

use std::collections::BTreeMap;

use super::types::NodeId;

/// Default of `--snapshot-logs`: entries applied between two snapshots.
pub const SNAPSHOT_LOGS_DEFAULT: u64 = 20_000;

/// The shortest election timeout, in milliseconds. The longest is twice it, the leader's
/// heartbeat a fifth of it, and openraft's leader lease (during which a follower refuses to
/// vote) equals the longest: a follower that stops hearing from the leader starts an
/// election after lease + timeout, 1.5-2 s with this value. Five heartbeats fit in the
/// shortest timeout, so a heartbeat delayed by a busy machine does not depose a leader.
pub const ELECTION_TIMEOUT_MS_DEFAULT: u64 = 500;

/// How long past its deadline a reference may stay pending before the reconciler settles
/// it, in milliseconds (`docs/scaling.md`, section 3): the gateway that took it gave up on
/// its write by the deadline, and this covers the clocks of the two leaders disagreeing.
pub const RECONCILE_GRACE_MS_DEFAULT: u64 = 60_000;

/// How long a reference taken for a cross-group write may stay pending, in milliseconds
/// (`--ref-deadline-ms`): past it, a late entry is refused and the reconciler may release
/// it (after [`RECONCILE_GRACE_MS_DEFAULT`] more). Far beyond any write's own bounds (the
/// append deadline is 20 s).
pub const REF_DEADLINE_MS_DEFAULT: u64 = 5 * 60 * 1000;

/// A point where a gateway kills itself, for the tests of what a crash there leaves
/// behind (`GATEWAY_CRASH_POINT`; never set in production).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashPoint {
    /// A cross-group write's reference taken in its content's group, its entry not yet
    /// written (`after-ref-inc`).
    AfterRefInc,
}

impl CrashPoint {
    /// The point named `name` (`after-ref-inc`).
    pub fn parse(name: &str) -> Result<CrashPoint, String> {
        match name {
            "after-ref-inc" => Ok(CrashPoint::AfterRefInc),
            other => Err(format!(
                "unknown crash point {other:?} (known: after-ref-inc)"
            )),
        }
    }
}

/// Replicas of each group a split creates (`--replication-factor`), when the cluster has
/// as many nodes: a group survives the loss of one replica with a majority left.
pub const REPLICATION_FACTOR_DEFAULT: u64 = 3;
/// The largest replication factor: a group of more voters commits no safer and slower.
pub const REPLICATION_FACTOR_MAX: u64 = 7;

/// FileDB records a group holds before its leader plans its split (`--group-split-files`),
/// from the arithmetic of `docs/scaling.md`: a group of S_split = 256 GiB per replica (A5)
/// at 53.7 bytes per record on disk (S5) holds 5.1 × 10⁹ records; rounded down.
pub const GROUP_SPLIT_FILES_DEFAULT: u64 = 5_000_000_000;

/// Index entries (objects, versions, parts) a group holding S3 keys holds before its
/// leader plans an index split (`--group-split-objects`), from the arithmetic of
/// `docs/scaling.md`: S_split = 256 GiB per replica (A5) at about 270 bytes per entry on
/// disk (its estimate of an S3 index record) holds 1.02 × 10⁹ entries; rounded down.
pub const GROUP_SPLIT_OBJECTS_DEFAULT: u64 = 1_000_000_000;

/// FileDB operations per second a group may sustain over [`SPLIT_RATE_WINDOW_MS_DEFAULT`]
/// before its leader plans its split (`--group-split-ops`, 0: never), from the arithmetic
/// of `docs/scaling.md`: a group commits about G = 4 000 operations per second (S6), and
/// headroom 2 keeps half of that for a leader change's or a split's backlog.
pub const GROUP_SPLIT_OPS_DEFAULT: u64 = 2_000;
/// The window over which a group's rate of FileDB operations is measured: long enough
/// that a burst does not split a group, which is for good.
pub const SPLIT_RATE_WINDOW_MS_DEFAULT: u64 = 60_000;

/// How this node takes part in a group.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    pub node_id: NodeId,
    /// Every voter of a fresh group, by S3 listen address (this node included). Empty for
    /// a node that joins an existing group (added with `admin cluster add-learner`).
    pub peers: BTreeMap<NodeId, String>,
    pub secret: String,
    pub snapshot_logs: u64,
    /// The shortest election timeout in milliseconds (see [`ELECTION_TIMEOUT_MS_DEFAULT`]).
    pub election_timeout_ms: u64,
    /// See [`RECONCILE_GRACE_MS_DEFAULT`].
    pub reconcile_grace_ms: u64,
    /// See [`REF_DEADLINE_MS_DEFAULT`].
    pub ref_deadline_ms: u64,
    /// Tests only: where this gateway aborts (see [`CrashPoint`]).
    pub crash_point: Option<CrashPoint>,
    /// See [`REPLICATION_FACTOR_DEFAULT`].
    pub replication_factor: u64,
    /// See [`GROUP_SPLIT_FILES_DEFAULT`].
    pub group_split_files: u64,
    /// See [`GROUP_SPLIT_OBJECTS_DEFAULT`].
    pub group_split_objects: u64,
    /// See [`GROUP_SPLIT_OPS_DEFAULT`].
    pub group_split_ops: u64,
    /// See [`SPLIT_RATE_WINDOW_MS_DEFAULT`] (tests make it short).
    pub split_rate_window_ms: u64,
    /// Rows per page of a split's copy, at most [`crate::handoff::ROWS_MAX`] (the
    /// default); tests make it small, so that a crash lands in the middle of a copy.
    pub split_page_rows: u32,
    /// Whether root's leader moves replicas of the groups between nodes until each node
    /// holds about as many (a node added receives its share); `admin groups move` works
    /// either way.
    pub rebalance: bool,
}

impl ClusterConfig {
    /// The embedded single node: a one-voter group of node 1 at `addr`.
    pub fn single(addr: String) -> Self {
        ClusterConfig {
            node_id: 1,
            peers: BTreeMap::from([(1, addr)]),
            secret: String::new(),
            snapshot_logs: SNAPSHOT_LOGS_DEFAULT,
            election_timeout_ms: ELECTION_TIMEOUT_MS_DEFAULT,
            reconcile_grace_ms: RECONCILE_GRACE_MS_DEFAULT,
            ref_deadline_ms: REF_DEADLINE_MS_DEFAULT,
            crash_point: None,
            replication_factor: REPLICATION_FACTOR_DEFAULT,
            split_page_rows: crate::handoff::ROWS_MAX,
            group_split_files: GROUP_SPLIT_FILES_DEFAULT,
            group_split_objects: GROUP_SPLIT_OBJECTS_DEFAULT,
            group_split_ops: GROUP_SPLIT_OPS_DEFAULT,
            split_rate_window_ms: SPLIT_RATE_WINDOW_MS_DEFAULT,
            rebalance: true,
        }
    }
}
