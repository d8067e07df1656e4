//! Node-to-node RPCs: postcard requests to a peer under [`RPC_PREFIX`], each answered with
//! a postcard body, over a [`Transport`] that the embedding server provides (the gateway
//! posts them over HTTP to the peer's S3 port, with the cluster secret; this crate carries
//! no HTTP stack).
//!
//! The same client carries openraft's three RPCs (append, vote, snapshot chunks) and the
//! gateway's own: a follower's batch of commands forwarded to the leader, a follower's
//! read-index request, pre-votes and the format-version question.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::types::{Node, NodeId, TypeConfig};
use crate::groups::{GroupId, ROOT};

/// Every node-to-node path starts with this.
pub const RPC_PREFIX: &str = "/_cluster/";
/// A group other than root is addressed under this, then its id: `/_cluster/g/7/raft/vote`.
/// The root group keeps the paths it had before groups existed, so that nodes of an older
/// release and of this one still understand each other during a rolling upgrade.
const GROUP_SEGMENT: &str = "g/";

/// The node-to-node calls, by the path each is posted to (after [`RPC_PREFIX`] and, for a
/// group other than root, its [`GROUP_SEGMENT`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// openraft's append (entries or a heartbeat).
    Append,
    /// openraft's vote.
    Vote,
    /// openraft's snapshot chunk.
    Snapshot,
    /// The elector's pre-vote.
    PreVote,
    /// The newest metadata format the node's binary knows.
    Version,
    /// A follower's batch of commands, forwarded to the leader.
    Write,
    /// A follower's read-index request to the leader.
    ReadIndex,
    /// A membership change forwarded to the leader.
    Membership,
    /// What a node says of itself to a fresh peer.
    State,
    /// Which node leads the group, as this replica knows it (groups other than root: a
    /// node without a replica asks, for `GET /_admin/groups`).
    Leader,
    /// A linearizable read of the replica's state ([`super::replicas::ReadQuery`]), for a
    /// node that holds no replica of the group.
    Read,
}

impl Call {
    const ALL: [Call; 11] = [
        Call::Append,
        Call::Vote,
        Call::Snapshot,
        Call::PreVote,
        Call::Version,
        Call::Write,
        Call::ReadIndex,
        Call::Membership,
        Call::State,
        Call::Leader,
        Call::Read,
    ];

    /// The path of the call within its group (a contract between releases).
    pub fn name(self) -> &'static str {
        match self {
            Call::Append => "raft/append",
            Call::Vote => "raft/vote",
            Call::Snapshot => "raft/snapshot",
            Call::PreVote => "pre-vote",
            Call::Version => "version",
            Call::Write => "write",
            Call::ReadIndex => "read-index",
            Call::Membership => "membership",
            Call::State => "state",
            Call::Leader => "leader",
            Call::Read => "read",
        }
    }

    /// The path (after [`RPC_PREFIX`]) of this call to `group`.
    pub fn path(self, group: GroupId) -> String {
        if group == ROOT {
            self.name().to_string()
        } else {
            format!("{GROUP_SEGMENT}{group}/{}", self.name())
        }
    }

    /// The group and the call a path (after [`RPC_PREFIX`]) names; `None` for a path no
    /// release posts.
    pub fn parse(path: &str) -> Option<(GroupId, Call)> {
        let (group, name) = match path.strip_prefix(GROUP_SEGMENT) {
            Some(rest) => {
                let (id, name) = rest.split_once('/')?;
                // Digits only: "+7" or "07" would name group 7 by a second path.
                if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) || id.starts_with('0') {
                    return None;
                }
                let id: GroupId = id.parse().ok()?;
                (id, name)
            }
            None => (ROOT, path),
        };
        let call = Call::ALL.into_iter().find(|c| c.name() == name)?;
        Some((group, call))
    }
}
/// The header that carries the cluster secret.
pub const SECRET_HEADER: &str = "x-cluster-secret";
/// Bound on an RPC answer's body (a snapshot chunk answer or a batch's results are small;
/// append answers tiny): a transport refuses a longer one.
pub const RESPONSE_BYTES_MAX: usize = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// No connection to the peer could be made: the request never reached it.
    #[error("cannot reach {0}: {1}")]
    Unreachable(String, String),
    /// The connection broke off after the request left: the peer may have acted on it.
    #[error("{0}: the exchange broke off: {1}")]
    Lost(String, String),
    #[error("{0}: no answer within {1:?}")]
    Timeout(String, Duration),
    /// The peer answered with a status other than success (an HTTP status code).
    #[error("{0} answered {1}: {2}")]
    Status(String, u16, String),
    #[error("{0}: bad answer: {1}")]
    Decode(String, String),
}

impl RpcError {
    /// Whether the peer certainly did nothing with the request: it was never reached, it
    /// holds no replica of the group (404), or it could not read the request (400). A
    /// command so refused was appended nowhere and may be sent again; after any other
    /// failure (a timeout, a broken-off exchange, an unreadable answer) its outcome is
    /// unknown.
    pub fn delivered_nothing(&self) -> bool {
        matches!(
            self,
            RpcError::Unreachable(..) | RpcError::Status(_, 400 | 404, _)
        )
    }
}

/// What [`Transport::post`] returns.
pub type TransportFuture<'a> = Pin<Box<dyn Future<Output = Result<Vec<u8>, RpcError>> + Send + 'a>>;

/// One request-answer exchange with a peer. The caller bounds it in time; the transport
/// bounds the answer to [`RESPONSE_BYTES_MAX`] and says [`RpcError::Unreachable`] when the
/// peer cannot be reached, [`RpcError::Status`] when it refused the request.
pub trait Transport: Send + Sync + 'static {
    /// Sends `payload` to the node at `addr` under [`RPC_PREFIX`] + `path`, and returns the
    /// body of its successful answer.
    fn post<'a>(&'a self, addr: &'a str, path: &'a str, payload: Vec<u8>) -> TransportFuture<'a>;
}

/// The transport of a node that has no peers (an offline tool, a test): every peer is
/// unreachable.
pub struct NoPeers;

impl Transport for NoPeers {
    fn post<'a>(&'a self, addr: &'a str, _: &'a str, _: Vec<u8>) -> TransportFuture<'a> {
        Box::pin(async move { Err(RpcError::Unreachable(addr.to_string(), "no peers".into())) })
    }
}

/// The RPC client of one group's replica: every call goes to the same group on the peer.
#[derive(Clone)]
pub struct Rpc {
    transport: Arc<dyn Transport>,
    group: GroupId,
}

impl Rpc {
    /// The client of `group`'s replica.
    pub fn new(transport: Arc<dyn Transport>, group: GroupId) -> Self {
        Rpc { transport, group }
    }

    /// The group this client calls.
    pub fn group(&self) -> GroupId {
        self.group
    }

    /// Sends `body` (postcard) as `call` to this group's replica at `addr` and decodes the
    /// postcard answer, all within `timeout`.
    pub async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        addr: &str,
        call: Call,
        body: &Req,
        timeout: Duration,
    ) -> Result<Resp, RpcError> {
        let payload = postcard::to_stdvec(body)
            .map_err(|e| RpcError::Decode(addr.to_string(), e.to_string()))?;
        let path = call.path(self.group);
        let work = async {
            let bytes = self.transport.post(addr, &path, payload).await?;
            postcard::from_bytes(&bytes)
                .map_err(|e| RpcError::Decode(addr.to_string(), e.to_string()))
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(RpcError::Timeout(addr.to_string(), timeout)),
        }
    }
}

/// openraft's view of the network: one [`PeerClient`] per target.
pub struct Network {
    pub rpc: Rpc,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> Self::Network {
        PeerClient {
            rpc: self.rpc.clone(),
            target,
            addr: node.addr.clone(),
        }
    }
}

pub struct PeerClient {
    rpc: Rpc,
    target: NodeId,
    addr: String,
}

impl PeerClient {
    async fn send<Req: Serialize, Resp: DeserializeOwned, E>(
        &self,
        call: Call,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, Node, RaftError<NodeId, E>>>
    where
        E: std::error::Error + DeserializeOwned,
        Result<Resp, RaftError<NodeId, E>>: DeserializeOwned,
    {
        let answer: Result<Resp, RaftError<NodeId, E>> = self
            .rpc
            .call(&self.addr, call, req, option.hard_ttl())
            .await
            .map_err(|e| match e {
                RpcError::Unreachable(..) => RPCError::Unreachable(Unreachable::new(&e)),
                other => RPCError::Network(NetworkError::new(&other)),
            })?;
        answer.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        self.send(Call::Append, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, Node, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.send(Call::Snapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        self.send(Call::Vote, &rpc, &option).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_parses_back_from_its_path_in_root_and_in_a_group() {
        for call in Call::ALL {
            for group in [ROOT, 1, 7, 42, GroupId::MAX] {
                assert_eq!(Call::parse(&call.path(group)), Some((group, call)));
            }
        }
        // Root keeps the paths of releases from before groups.
        assert_eq!(Call::Append.path(ROOT), "raft/append");
        assert_eq!(Call::Vote.path(3), "g/3/raft/vote");
    }

    #[test]
    fn paths_no_release_posts_are_refused() {
        for bad in [
            "",
            "raft",
            "raft/append/x",
            "g/",
            "g//raft/vote",
            "g/0/raft/vote",
            "g/x/raft/vote",
            "g/+7/raft/vote",
            "g/07/raft/vote",
            "g/-1/raft/vote",
            "g/4294967296/raft/vote",
            "g/7",
            "g/7/",
            "g/7/nope",
            "g/7/g/8/raft/vote",
        ] {
            assert_eq!(Call::parse(bad), None, "{bad}");
        }
    }
}
