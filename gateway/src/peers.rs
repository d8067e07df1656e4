//! The metadata group's RPCs to peers, over HTTP/1.1: POSTs to a peer's S3 port under
//! `/_cluster/` carrying the cluster secret (the server side is in `cluster.rs`). With
//! cluster TLS, over mutual TLS: ALPN `dedup-cluster/1`, this node's certificate, the
//! peer's checked against the cluster CA and the host of its address
//! ([`crate::server::tls::cluster`]).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use meta::raft::network::{
    RESPONSE_BYTES_MAX, RPC_PREFIX, RpcError, SECRET_HEADER, Transport, TransportFuture,
};

/// Bound on connecting to a peer: a dead peer must not hold a replication stream.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// Longest part of a refusal's body kept in the error.
const REFUSAL_TEXT_MAX: usize = 512;

/// One HTTP client for every peer (it pools connections per address).
pub struct HttpPeers {
    client: PeerClient,
    secret: String,
}

enum PeerClient {
    Plain(Client<HttpConnector, Full<Bytes>>),
    Tls(Client<HttpsConnector<HttpConnector>, Full<Bytes>>),
}

impl HttpPeers {
    /// The peers' client over plain HTTP (a cluster without TLS).
    pub fn new(secret: String) -> Self {
        HttpPeers {
            client: PeerClient::Plain(pooled(connector())),
            secret,
        }
    }

    /// The peers' client over TLS with `tls`, the cluster's client configuration
    /// ([`crate::server::tls::cluster::ClusterTls::client_config`]).
    pub fn with_tls(secret: String, tls: Arc<rustls::ClientConfig>) -> Self {
        let mut http = connector();
        // The TCP connector under TLS sees `https://` URIs.
        http.enforce_http(false);
        let mut https = HttpsConnector::from((http, tls));
        https.enforce_https();
        HttpPeers {
            client: PeerClient::Tls(pooled(https)),
            secret,
        }
    }

    async fn exchange(
        &self,
        addr: &str,
        path: &str,
        payload: Vec<u8>,
    ) -> Result<Vec<u8>, RpcError> {
        let scheme = match self.client {
            PeerClient::Plain(_) => "http",
            PeerClient::Tls(_) => "https",
        };
        let req = Request::builder()
            .method(Method::POST)
            .uri(format!("{scheme}://{addr}{RPC_PREFIX}{path}"))
            .header(SECRET_HEADER, &self.secret)
            .header(http::header::CONTENT_TYPE, "application/octet-stream")
            .body(Full::new(Bytes::from(payload)))
            .map_err(|e| RpcError::Decode(addr.to_string(), e.to_string()))?;
        let resp = match &self.client {
            PeerClient::Plain(client) => client.request(req),
            PeerClient::Tls(client) => client.request(req),
        }
        .await
        .map_err(|e| {
            // Only a failed connection is certain to have delivered nothing; a request
            // that left may have been acted on (see `RpcError::delivered_nothing`).
            if e.is_connect() {
                RpcError::Unreachable(addr.to_string(), e.to_string())
            } else {
                RpcError::Lost(addr.to_string(), e.to_string())
            }
        })?;
        let status = resp.status();
        let bytes = Limited::new(resp.into_body(), RESPONSE_BYTES_MAX)
            .collect()
            .await
            .map_err(|e| RpcError::Lost(addr.to_string(), e.to_string()))?
            .to_bytes();
        if !status.is_success() {
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(REFUSAL_TEXT_MAX)]);
            return Err(RpcError::Status(
                addr.to_string(),
                status.as_u16(),
                text.into_owned(),
            ));
        }
        Ok(bytes.to_vec())
    }
}

fn connector() -> HttpConnector {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
    connector.set_nodelay(true);
    connector
}

fn pooled<C>(connector: C) -> Client<C, Full<Bytes>>
where
    C: hyper_util::client::legacy::connect::Connect + Clone,
{
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector)
}

impl Transport for HttpPeers {
    fn post<'a>(&'a self, addr: &'a str, path: &'a str, payload: Vec<u8>) -> TransportFuture<'a> {
        Box::pin(self.exchange(addr, path, payload))
    }
}
