//! Replicated metadata: every [`Command`](crate::Command) goes through a Raft log
//! (openraft 0.9) and every node's state machine applies it with the one `apply` function.
//!
//! - One write path for one node or many: a gateway with no peers is a one-voter group.
//! - Group commit: concurrent commands are packed by the [`proposer`] into one log entry,
//!   so one durable append (one fsync of `raft.redb`, on each voter) serves them all.
//! - Followers do the data path themselves and forward only the commands (a batch) to the
//!   leader over `/_cluster/write`.
//! - Linearizable reads: a read waits for a read index confirmed by the leader with a
//!   heartbeat round to a quorum (see [`barrier`]), then reads the local state machine.
//!   Concurrent reads share one round.
//!
//! Files in the data folder: `meta.redb` (the state machine: the tables, `last_applied`,
//! membership), `raft.redb` (log, vote, committed), `snapshots/current.snap`. Those are the
//! root group's; a node holding replicas of other groups keeps each in `groups/<id>/`
//! with the same three (see [`replicas`]).
//!
//! Beside the pieces above: `types.rs` (what an entry carries, openraft's type
//! configuration), `timeouts.rs`, `members.rs` (a member's address, a leader's departure),
//! `config.rs` ([`ClusterConfig`]), `metadata.rs` ([`Metadata`] and [`open`]) and
//! `offline.rs` (the data folder of a stopped node: [`replay_offline`], [`restore`]).

pub mod barrier;
pub mod buckets;
pub mod elector;
pub mod index;
pub mod jobs;
// openraft's storage and RPC error types are large, and fixed by its traits.
pub mod audit;
#[allow(clippy::result_large_err)]
pub mod log;
#[allow(clippy::result_large_err)]
pub mod machine;
#[allow(clippy::result_large_err)]
pub mod network;
pub mod proposer;
pub mod reconciler;
pub mod replicas;
pub mod route;
pub mod settler;
pub mod snapshot;
pub mod split;

mod config;
mod members;
mod metadata;
mod offline;
mod timeouts;
mod types;

pub use config::{
    ClusterConfig, CrashPoint, ELECTION_TIMEOUT_MS_DEFAULT, GROUP_SPLIT_FILES_DEFAULT,
    GROUP_SPLIT_OBJECTS_DEFAULT, GROUP_SPLIT_OPS_DEFAULT, RECONCILE_GRACE_MS_DEFAULT,
    REF_DEADLINE_MS_DEFAULT, REPLICATION_FACTOR_DEFAULT, REPLICATION_FACTOR_MAX,
    SNAPSHOT_LOGS_DEFAULT, SPLIT_RATE_WINDOW_MS_DEFAULT,
};
pub use metadata::{
    ClusterStatus, GroupStatus, GroupsStatus, KeyInterval, MembershipOp, Metadata, PeerState,
    ReplicaStatus, Sha1Interval, open,
};
pub use offline::{RestoreError, replay_offline, restore};
pub use replicas::{Replicas, ServeError};
pub use timeouts::{LEADER_WAIT, READ_TIMEOUT, WRITE_TIMEOUT};
pub use types::{Batch, BatchResult, MetaRaft, Node, NodeId, TypeConfig};
