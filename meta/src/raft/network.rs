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

/// Every node-to-node path starts with this.
pub const RPC_PREFIX: &str = "/_cluster/";
/// The header that carries the cluster secret.
pub const SECRET_HEADER: &str = "x-cluster-secret";
/// Bound on an RPC answer's body (a snapshot chunk answer or a batch's results are small;
/// append answers tiny): a transport refuses a longer one.
pub const RESPONSE_BYTES_MAX: usize = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    #[error("cannot reach {0}: {1}")]
    Unreachable(String, String),
    #[error("{0}: no answer within {1:?}")]
    Timeout(String, Duration),
    /// The peer answered with a status other than success (an HTTP status code).
    #[error("{0} answered {1}: {2}")]
    Status(String, u16, String),
    #[error("{0}: bad answer: {1}")]
    Decode(String, String),
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

/// The RPC client every peer connection shares.
#[derive(Clone)]
pub struct Rpc {
    transport: Arc<dyn Transport>,
}

impl Rpc {
    pub fn new(transport: Arc<dyn Transport>) -> Self {
        Rpc { transport }
    }

    /// Sends `body` (postcard) to `addr` + `path` and decodes the postcard answer, all
    /// within `timeout`.
    pub async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        addr: &str,
        path: &str,
        body: &Req,
        timeout: Duration,
    ) -> Result<Resp, RpcError> {
        let payload = postcard::to_stdvec(body)
            .map_err(|e| RpcError::Decode(addr.to_string(), e.to_string()))?;
        let work = async {
            let bytes = self.transport.post(addr, path, payload).await?;
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
        path: &str,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, Node, RaftError<NodeId, E>>>
    where
        E: std::error::Error + DeserializeOwned,
        Result<Resp, RaftError<NodeId, E>>: DeserializeOwned,
    {
        let answer: Result<Resp, RaftError<NodeId, E>> = self
            .rpc
            .call(&self.addr, path, req, option.hard_ttl())
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
        self.send("raft/append", &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, Node, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.send("raft/snapshot", &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        self.send("raft/vote", &rpc, &option).await
    }
}
