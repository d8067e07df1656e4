//! The state every request handler shares, and the small settings types its fields need.
//!
//! It sits below the handlers and the server wiring: it imports no handler, so that the
//! handlers (which take `State<Arc<AppState>>`) and the router that the server builds over
//! them form no import circle. Background workers do not take it: they get the pieces they
//! use (`Arc<ObjectStore>`, the telemetry handles).

use std::sync::Arc;

use crate::bearer::InternalAccess;
use crate::credentials::Credentials;
use crate::store::ObjectStore;
use crate::workers::Workers;

/// Everything a request handler needs.
pub struct AppState {
    pub store: Arc<ObjectStore>,
    /// This node's replicas of the metadata groups (root is `store`'s metadata), which the
    /// node-to-node calls reach.
    pub replicas: Arc<meta::raft::Replicas>,
    pub credentials: Credentials,
    pub admin_token: Option<String>,
    pub native_token: Option<String>,
    /// Tokens of `/_metrics` and `/_catalog/`.
    pub internal: InternalAccess,
    /// Region check and V2 expiry cap of the S3 signatures.
    pub signatures: SignaturePolicy,
    pub region: String,
    /// Virtual-hosted-style requests: `bucket.<domain>`.
    pub domain: Option<String>,
    /// Valkyrie workers of the local disks, and UNMOVE drains.
    pub workers: Workers,
    /// The secret node-to-node RPCs must carry (none: they are all refused).
    pub cluster_secret: Option<String>,
    /// Cluster TLS is on: node-to-node RPCs must also have come over it (the
    /// [`ClusterPeer`] mark).
    pub cluster_tls: bool,
    /// `--request-log-level`: the level of the per-request log line, or off.
    pub request_log: RequestLogLevel,
    /// Lifecycle settings (the length of a lifecycle day for `x-amz-expiration`).
    pub lifecycle: crate::lifecycle::Settings,
    /// Request counters, recent errors and the cached stored-bytes scan.
    pub telemetry: crate::telemetry::Telemetry,
}

/// Seven days, the longest a SigV4 presigned URL may live (`X-Amz-Expires`), is also the
/// default bound on a V2 presigned URL's `Expires`.
pub const PRESIGNED_V2_EXPIRES_MAX_SECS_DEFAULT: u64 = 7 * 24 * 3600;

/// How strict signature checks are beyond the signature itself (flags of `gateway serve`).
#[derive(Clone, Debug)]
pub struct SignaturePolicy {
    /// `--any-region` / `any_region`: accept a credential scope naming any region instead of
    /// only the gateway's own (`--region`), for clients that cannot be told the region.
    pub any_region: bool,
    /// `--presigned-v2-expires-max-secs` / `presigned_v2_expires_max_secs`: how far ahead a
    /// V2 presigned URL's `Expires` may be.
    pub presigned_v2_expires_max_secs: u64,
}

impl Default for SignaturePolicy {
    fn default() -> Self {
        SignaturePolicy {
            any_region: false,
            presigned_v2_expires_max_secs: PRESIGNED_V2_EXPIRES_MAX_SECS_DEFAULT,
        }
    }
}

/// `--request-log-level`: the level of the per-request line, or `off`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestLogLevel {
    Off,
    Error,
    Warn,
    #[default]
    Info,
    Debug,
}

/// The mark of a request that came over cluster TLS: its peer presented a certificate the
/// cluster CA signed. An axum request extension, inserted by the connection's service
/// (`server::tls::cluster`) and checked by the cluster routes' authentication.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterPeer;
