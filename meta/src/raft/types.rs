//! The metadata's Raft types: what a log entry carries ([`Batch`]) and what applying it
//! answers ([`BatchResult`]), node ids and addresses, and openraft's type configuration.

use openraft::{BasicNode, Raft};
use serde::{Deserialize, Serialize};

use crate::{Command, MetaError, Response};

pub use crate::groups::NodeId;
pub type Node = BasicNode;

/// Commands that travel in one log entry and are applied in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch(pub Vec<Command>);

/// One result per command of a [`Batch`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchResult(pub Vec<Result<Response, MetaError>>);

openraft::declare_raft_types!(
    /// The metadata's Raft types: batches of commands, nodes named by their S3 address,
    /// snapshots as files.
    pub TypeConfig:
        D = Batch,
        R = BatchResult,
        NodeId = NodeId,
        Node = Node,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = tokio::fs::File,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type MetaRaft = Raft<TypeConfig>;
