//! Node-to-node RPCs: HTTP/1.1 POSTs to a peer's S3 port under [`RPC_PREFIX`], each
//! carrying the shared cluster secret, with postcard bodies.
//!
//! The same client carries openraft's three RPCs (append, vote, snapshot chunks) and the
//! gateway's own two: a follower's batch of commands forwarded to the leader, and a
//! follower's read-index request.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
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

use super::{Node, NodeId, TypeConfig};

/// Every node-to-node path starts with this.
pub const RPC_PREFIX: &str = "/_cluster/";
/// The header that carries the cluster secret.
pub const SECRET_HEADER: &str = "x-cluster-secret";
/// Bound on an RPC answer's body (a snapshot chunk answer or a batch's results are small;
/// append answers tiny).
const RESPONSE_BYTES_MAX: usize = 64 << 20;
/// Bound on connecting to a peer: a dead peer must not hold a replication stream.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    #[error("cannot reach {0}: {1}")]
    Unreachable(String, String),
    #[error("{0}: no answer within {1:?}")]
    Timeout(String, Duration),
    #[error("{0} answered {1}: {2}")]
    Status(String, StatusCode, String),
    #[error("{0}: bad answer: {1}")]
    Decode(String, String),
}

/// A client shared by every peer connection (it pools connections per address).
#[derive(Clone)]
pub struct Rpc {
    client: Client<HttpConnector, Full<Bytes>>,
    secret: String,
}

impl Rpc {
    pub fn new(secret: String) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Rpc { client, secret }
    }

    /// POSTs `body` (postcard) to `addr` + `path` and decodes the postcard answer, all
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
        let req = Request::builder()
            .method(Method::POST)
            .uri(format!("http://{addr}{RPC_PREFIX}{path}"))
            .header(SECRET_HEADER, &self.secret)
            .header(http::header::CONTENT_TYPE, "application/octet-stream")
            .body(Full::new(Bytes::from(payload)))
            .map_err(|e| RpcError::Decode(addr.to_string(), e.to_string()))?;
        let work = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| RpcError::Unreachable(addr.to_string(), e.to_string()))?;
            let status = resp.status();
            let bytes = Limited::new(resp.into_body(), RESPONSE_BYTES_MAX)
                .collect()
                .await
                .map_err(|e| RpcError::Unreachable(addr.to_string(), e.to_string()))?
                .to_bytes();
            if !status.is_success() {
                let text = String::from_utf8_lossy(&bytes[..bytes.len().min(512)]).into_owned();
                return Err(RpcError::Status(addr.to_string(), status, text));
            }
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
