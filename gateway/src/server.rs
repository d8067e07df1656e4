//! Process wiring: open the data folder, load PairDB, build the router, serve.

pub mod connections;
pub mod tls;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use placement::pairdb::PairTable;
use placement::{DiskRef, PairId, PairRecord};

pub use self::connections::ConnectionLimits;
use crate::api::{self, Access};
use crate::api::{admin, catalog, cluster, keys, native};
use crate::credentials::{Credentials, CredentialsError, Origin};
use crate::s3;
use crate::state::AppState;
use crate::store::{Limits, ObjectStore};
use crate::workers::Workers;
use meta::raft::{self, ClusterConfig, Metadata};
use meta::{Command, MetaError};

/// How often disk fill is measured for the pair choice.
const SPACE_REFRESH_SECS: u64 = 30;
/// Bound on a single node electing itself at start (a one-voter group needs no peer).
const SINGLE_NODE_START_SECS: u64 = 60;

#[derive(Clone, Debug)]
pub struct Config {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    /// `--admin-listen`: a second listener serving only the operators' routes
    /// ([`admin_router`]), with its own connection bound; over TLS with the S3 listener's
    /// certificate when `tls` is set, else plain HTTP. None: none.
    pub admin_listen: Option<SocketAddr>,
    pub region: String,
    /// Virtual-hosted-style requests: `bucket.<domain>`.
    pub domain: Option<String>,
    pub limits: Limits,
    /// n of the n-th root that flattens the pair weights.
    pub choice_root: u32,
    pub admin_token: Option<String>,
    pub native_token: Option<String>,
    /// Tokens of `/_metrics` and `/_catalog/`.
    pub internal: crate::bearer::InternalAccess,
    /// Region check and V2 expiry cap of the S3 signatures.
    pub signatures: crate::state::SignaturePolicy,
    /// Disk pairs from the configuration file.
    pub pairs: Vec<(PairId, [DiskRef; 2])>,
    /// Settings of the in-process Valkyrie workers.
    pub valkyrie: valkyrie::Settings,
    /// `--node-id`/`--peers`: this node is a voter of a multi-node group. None: the
    /// embedded single node (a one-voter group).
    pub cluster: Option<ClusterConfig>,
    /// `--snapshot-logs`: applied entries between two snapshots.
    pub snapshot_logs: u64,
    /// `--replication-factor`: replicas of each group a split creates.
    pub replication_factor: u64,
    /// `--group-split-files`: FileDB records of a group before its automatic split.
    pub group_split_files: u64,
    /// `--group-split-objects`: index entries of a group before its automatic index split.
    pub group_split_objects: u64,
    /// Not `--no-rebalance`: root's leader evens the groups' replicas out over the nodes.
    pub rebalance: bool,
    /// `--ref-deadline-ms`: how long a cross-group write's reference may stay pending.
    pub ref_deadline_ms: u64,
    /// `--reconcile-grace-ms`: how long past its deadline before the reconciler settles it.
    pub reconcile_grace_ms: u64,
    /// `GATEWAY_CRASH_POINT` (tests only): where this gateway aborts.
    pub crash_point: Option<meta::raft::CrashPoint>,
    /// Timeouts and the bound on connections in flight.
    pub connections: ConnectionLimits,
    /// `--tls-cert`/`--tls-key`: HTTPS on the listener (and on the admin listener), the
    /// certificate reloaded from these files. None: plain HTTP.
    pub tls: Option<tls::TlsFiles>,
    /// `--cluster-ca`/`--cluster-cert`/`--cluster-key`: mutual TLS between the nodes, on
    /// the same port ([`tls::cluster`]). None: RPCs over plain HTTP.
    pub cluster_tls: Option<tls::cluster::ClusterTlsFiles>,
    /// `--request-log-level`: the level of the per-request log line, or off.
    pub request_log: crate::state::RequestLogLevel,
    /// `--lifecycle-day-secs`, `--upload-max-age-secs`.
    pub lifecycle: crate::lifecycle::Settings,
    /// `--stats-scan-secs`: how often the stored-bytes scan behind `gateway_stored_*` runs.
    pub stats: crate::telemetry::stored::Settings,
    /// Pace of background jobs (`--job-chunk-keys`, `--job-pause-ms`).
    pub job_pace: crate::jobs::JobPace,
    /// `--sha1-collision-detection`: content names with collision detection (default), or
    /// the plain SHA-1, to measure what detection costs.
    pub sha1_collision_detection: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("data folder {0}: {1}")]
    DataDir(PathBuf, std::io::Error),
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
    #[error("metadata: {0}")]
    Meta(#[from] MetaError),
    #[error("disk: {0}")]
    Disk(#[from] placement::DiskError),
    #[error(
        "{0}: PairDB has disks [{stored0}, {stored1}] but the configuration says [{conf0}, {conf1}]",
        stored0 = .1[0], stored1 = .1[1], conf0 = .2[0], conf1 = .2[1]
    )]
    PairMismatch(PairId, [DiskRef; 2], [DiskRef; 2]),
    #[error("TLS certificate: {0}")]
    Tls(#[from] tls::TlsError),
    #[error("listen on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
    #[error("server: {0}")]
    Serve(std::io::Error),
    #[error(
        "a cluster node needs disk pairs every node reaches (WebDAV storage nodes or a shared \
         local path), listed under [[pairs]] in the config file; the data folder's own disks \
         are this machine's only"
    )]
    ClusterWithoutPairs,
    #[error("pair {0}: disk {1} is not reachable from this node: {2}")]
    Unreachable(PairId, DiskRef, String),
}

/// The default single-node layout: one pair of local disks inside the data folder.
fn default_pair(data_dir: &Path) -> PairRecord {
    PairRecord::new([
        DiskRef::local(data_dir.join("disk0")),
        DiskRef::local(data_dir.join("disk1")),
    ])
}

/// Brings PairDB in line with the configuration, through the log.
///
/// Configured pairs are added to PairDB (their flags, set by operators, are kept); a
/// configured pair whose disks differ from PairDB's is refused, since re-pointing a pair
/// would orphan every file on it. With no pair configured or stored, a single node's own
/// `disk0`/`disk1` become pair 0.
pub async fn sync_pairs(
    meta: &Metadata,
    data_dir: &Path,
    configured: &[(PairId, [DiskRef; 2])],
) -> Result<(), ServeError> {
    let stored = meta.read(|m| m.pairs()).await?;
    for (id, disks) in configured {
        match stored.iter().find(|(sid, _)| sid == id) {
            Some((_, record)) if &record.disks == disks => {}
            Some((_, record)) => {
                return Err(ServeError::PairMismatch(
                    *id,
                    record.disks.clone(),
                    disks.clone(),
                ));
            }
            None => {
                let record = PairRecord::new(disks.clone());
                meta.execute(Command::PutPair { id: *id, record }).await?;
            }
        }
    }
    if configured.is_empty() && stored.is_empty() {
        meta.execute(Command::PutPair {
            id: PairId(0),
            record: default_pair(data_dir),
        })
        .await?;
    }
    Ok(())
}

/// Checks that this node reaches every configured disk: a local path must be a folder it
/// can write, a WebDAV node must answer. In a cluster every node writes every pair.
async fn check_reachable(configured: &[(PairId, [DiskRef; 2])]) -> Result<(), ServeError> {
    for (id, disks) in configured {
        for disk in disks {
            let unreachable = |why: String| ServeError::Unreachable(*id, disk.clone(), why);
            if let Some(path) = disk.local_path()
                && !path.is_dir()
            {
                return Err(unreachable(
                    "no such folder here (mount the shared storage first)".into(),
                ));
            }
            // The probe of the write path: a temp file created and removed.
            placement::Disk::open(disk)
                .map_err(|e| unreachable(e.to_string()))?
                .probe_write()
                .await
                .map_err(|e| unreachable(e.to_string()))?;
        }
    }
    Ok(())
}

/// The gateway's routes: the internal APIs, each group behind the one credential it
/// accepts (see [`crate::api::auth`]), and S3 for everything else.
pub fn router(state: Arc<AppState>) -> Router {
    let s3_api = Router::new()
        .fallback(s3::dispatch)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            s3::auth::authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            s3::cors::cors_headers,
        ))
        .layer(axum::middleware::from_fn(s3::response_hygiene))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            s3::request_log::log_request,
        ))
        .with_state(state.clone());
    let guard =
        |access| axum::middleware::from_fn_with_state((state.clone(), access), api::auth::require);
    operations_routes(&state)
        .merge(native::routes().route_layer(guard(Access::Native)))
        .merge(catalog::routes().route_layer(guard(Access::Catalog)))
        .merge(cluster::rpc_routes().route_layer(guard(Access::Cluster)))
        .with_state(state)
        .fallback_service(s3_api)
}

/// The routes of the admin listener (`--admin-listen`): the operators' routes only, so
/// that a probe or a scrape never waits behind S3 connections.
pub fn admin_router(state: Arc<AppState>) -> Router {
    operations_routes(&state)
        .with_state(state)
        .fallback(|| async {
            (
                axum::http::StatusCode::NOT_FOUND,
                "not served on the admin listener: /_health, /_metrics, /_status, /_admin/\n",
            )
        })
}

/// `/_health`, `/_metrics`, `/_status` and the `/_admin/` API, each behind its credential:
/// served by the S3 listener and the admin listener alike.
fn operations_routes(state: &Arc<AppState>) -> Router<Arc<AppState>> {
    let guard =
        |access| axum::middleware::from_fn_with_state((state.clone(), access), api::auth::require);
    let admin = admin::routes()
        .merge(keys::routes())
        .merge(cluster::admin_routes());
    let metrics = Router::new()
        .route("/_metrics", get(admin::metrics))
        .route("/_status", get(admin::status));
    Router::new()
        .route("/_health", get(|| async { "ok\n" }))
        .merge(admin.route_layer(guard(Access::Admin)))
        .merge(metrics.route_layer(guard(Access::Metrics)))
}

/// The data folder holds the secrets of the access keys (`meta.redb`, `raft.redb`,
/// snapshots) and the bootstrap `credentials`: a folder this process creates is its
/// user's only (0700); an existing one others can read is left as the operator set it,
/// with a warning.
fn protect_data_dir(dir: &std::path::Path, fresh: bool) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    if fresh {
        return std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    let mode = std::fs::metadata(dir)?.permissions().mode();
    if mode & 0o077 != 0 {
        tracing::warn!(
            dir = %dir.display(),
            mode = format!("{:o}", mode & 0o777),
            "the data folder holds access key secrets and is open to other users; chmod 700 it"
        );
    }
    Ok(())
}

/// Runs the gateway until SIGINT or SIGTERM.
pub async fn serve(config: Config) -> Result<(), ServeError> {
    let io_err = |e| ServeError::DataDir(config.data_dir.clone(), e);
    // Before anything names content: every hasher of the process follows it.
    placement::digest::set_collision_detection(config.sha1_collision_detection);
    if !config.sha1_collision_detection {
        tracing::warn!(
            "SHA-1 collision detection is off: two bodies of a collision attack would be deduplicated into one file"
        );
    }
    let fresh = !config.data_dir.exists();
    std::fs::create_dir_all(&config.data_dir).map_err(io_err)?;
    let data_dir = config.data_dir.canonicalize().map_err(io_err)?;
    protect_data_dir(&data_dir, fresh).map_err(io_err)?;
    if config.cluster.is_some() {
        if config.pairs.is_empty() {
            return Err(ServeError::ClusterWithoutPairs);
        }
        check_reachable(&config.pairs).await?;
    }
    let (credentials, origin) = Credentials::load_or_create(&data_dir)?;
    // Before the port opens: a certificate that does not load stops the start.
    let tls = match &config.tls {
        Some(files) => {
            let certificate = tls::Certificate::load(files)?;
            let acceptor = tls::acceptor(certificate.clone())?;
            Some((files, certificate, acceptor))
        }
        None => None,
    };
    let cluster_tls = match &config.cluster_tls {
        Some(files) => Some((files, Arc::new(tls::cluster::ClusterTls::load(files)?))),
        None => None,
    };
    // Bound first: a single node names itself by the address it really listens on.
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| ServeError::Listen(config.listen, e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ServeError::Listen(config.listen, e))?;
    let admin_listener = match config.admin_listen {
        Some(at) => {
            let listener = tokio::net::TcpListener::bind(at)
                .await
                .map_err(|e| ServeError::Listen(at, e))?;
            let bound = listener
                .local_addr()
                .map_err(|e| ServeError::Listen(at, e))?;
            Some((listener, bound))
        }
        None => None,
    };
    let single = config.cluster.is_none();
    let cluster = config.cluster.clone().unwrap_or_else(|| ClusterConfig {
        snapshot_logs: config.snapshot_logs,
        replication_factor: config.replication_factor,
        group_split_files: config.group_split_files,
        group_split_objects: config.group_split_objects,
        rebalance: config.rebalance,
        ref_deadline_ms: config.ref_deadline_ms,
        reconcile_grace_ms: config.reconcile_grace_ms,
        crash_point: config.crash_point,
        ..ClusterConfig::single(addr.to_string())
    });
    let peers = Arc::new(match &cluster_tls {
        Some((_, tls)) => {
            crate::peers::HttpPeers::with_tls(cluster.secret.clone(), tls.client_config())
        }
        None => crate::peers::HttpPeers::new(cluster.secret.clone()),
    });
    let replicas = raft::Replicas::open(&data_dir, cluster, peers).await?;
    // Each group leader's cross-group work; a cluster of one group has none.
    raft::reconciler::start(&replicas);
    let metadata = replicas.root().clone();
    let pairs = Arc::new(PairTable::new());
    let state = Arc::new(AppState {
        store: Arc::new(ObjectStore::new(
            replicas.clone(),
            pairs,
            config.limits.clone(),
            config.choice_root,
        )),
        replicas: replicas.clone(),
        credentials,
        admin_token: config.admin_token.clone(),
        native_token: config.native_token.clone(),
        internal: config.internal.clone(),
        signatures: config.signatures.clone(),
        region: config.region.clone(),
        domain: config.domain.clone(),
        workers: Workers::new(config.valkyrie.clone(), true),
        cluster_secret: config.cluster.as_ref().map(|c| c.secret.clone()),
        cluster_tls: cluster_tls.is_some(),
        request_log: config.request_log,
        lifecycle: config.lifecycle.clone(),
        telemetry: Default::default(),
    });
    if let Err(e) = state.store.reload_pairs().await {
        tracing::warn!(error = ?e, "loading PairDB");
    }
    // Serving starts before the group has a leader: the peers' votes and appends arrive
    // on this port.
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    let server = tokio::spawn(connections::serve(
        listener,
        tls::ListenerTls {
            s3: tls.as_ref().map(|(_, _, acceptor)| acceptor.clone()),
            cluster: cluster_tls.as_ref().map(|(_, cluster)| cluster.clone()),
        },
        router(state.clone()),
        config.connections.clone(),
        stopped(stop.clone()),
    ));
    let admin_server = admin_listener.map(|(listener, bound)| {
        let limits = ConnectionLimits {
            max_connections: connections::ADMIN_CONNECTIONS_MAX,
            ..config.connections.clone()
        };
        // With --tls-cert, TLS here too (the admin token and the metrics travel on it), by
        // the S3 listener's own acceptor: one certificate, so a reload reaches both. Never
        // the cluster side: the peers call the S3 port only.
        let admin_tls = tls::ListenerTls {
            s3: tls.as_ref().map(|(_, _, acceptor)| acceptor.clone()),
            cluster: None,
        };
        let served = tokio::spawn(connections::serve(
            listener,
            admin_tls,
            admin_router(state.clone()),
            limits,
            stopped(stop.clone()),
        ));
        (served, bound)
    });
    if single {
        metadata
            .wait_leader(Duration::from_secs(SINGLE_NODE_START_SECS))
            .await?;
        // A single node is every member: it serves the newest commands from the start.
        if let Err(e) = metadata.raise_format().await {
            tracing::warn!(error = %e, "cannot raise the metadata format version");
        }
        sync_pairs(&metadata, &data_dir, &config.pairs).await?;
        if let Err(e) = state.store.reload_pairs().await {
            tracing::warn!(error = ?e, "loading PairDB");
        }
    } else {
        let (metadata, configured, data_dir) =
            (metadata.clone(), config.pairs.clone(), data_dir.clone());
        tokio::spawn(async move {
            // Bounded by the process: retried until a leader takes the configuration.
            loop {
                match sync_pairs(&metadata, &data_dir, &configured).await {
                    Ok(()) => return,
                    Err(ServeError::Meta(MetaError::Unavailable(why))) => {
                        tracing::info!(%why, "waiting for the metadata group to sync PairDB");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "PairDB does not match the configuration");
                        return;
                    }
                }
            }
        });
    }
    follow_pairs(&state);
    follow_leadership(&state);
    crate::lifecycle::worker::spawn(state.store.replicas().clone(), config.lifecycle.clone());
    crate::jobs::spawn(state.store.replicas().clone(), config.job_pace);
    state.store.refresh_space().await;
    {
        let state = state.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(SPACE_REFRESH_SECS));
            loop {
                tick.tick().await;
                state.store.refresh_space().await;
            }
        });
    }
    tokio::spawn(state.telemetry.stats.clone().run(
        state.store.replicas().clone(),
        state.store.pair_table().clone(),
        config.stats,
    ));
    if let Origin::Generated = origin {
        println!(
            "generated credentials (stored in {}, shown only once):\n  access key: {}\n  secret key: {}",
            data_dir.join("credentials").display(),
            credentials_of(&state).0,
            credentials_of(&state).1,
        );
    }
    if let Some((files, certificate, _)) = tls {
        tls::watch(certificate.clone(), files.clone());
        println!(
            "TLS on (1.2 and 1.3, HTTP/2 and HTTP/1.1): certificate {}, key {}, sha256 {}",
            files.cert.display(),
            files.key.display(),
            certificate.fingerprint()
        );
        tracing::info!(cert = %files.cert.display(), sha256 = %certificate.fingerprint(), "TLS on");
    }
    if let Some((files, cluster)) = &cluster_tls {
        tls::watch(cluster.certificate.clone(), files.identity());
        let sha256 = cluster.certificate.fingerprint();
        println!(
            "cluster TLS on (mutual, ALPN dedup-cluster/1): CA {}, certificate {}, key {}, \
             sha256 {sha256}",
            files.ca.display(),
            files.cert.display(),
            files.key.display(),
        );
        tracing::info!(ca = %files.ca.display(), cert = %files.cert.display(), %sha256, "cluster TLS on");
    }
    if let Some((_, admin_addr)) = &admin_server {
        // Before the line below: whoever waits for it has this one too.
        println!("admin listening on {admin_addr}");
        tracing::info!(addr = %admin_addr, "admin listener (health, metrics, status, admin API)");
    }
    // Tests and scripts wait for exactly this line to learn the port.
    println!("listening on {addr}");
    tracing::info!(%addr, data = %data_dir.display(), node = metadata.node_id(), "gateway serving");
    let served = joined(server.await);
    if let Some((admin_server, _)) = admin_server
        && let Err(e) = joined(admin_server.await)
    {
        tracing::warn!(error = %e, "admin listener");
    }
    state.workers.stop();
    replicas.shutdown().await;
    served
}

/// A listener's outcome, its task's failure included.
fn joined(outcome: Result<std::io::Result<()>, tokio::task::JoinError>) -> Result<(), ServeError> {
    match outcome {
        Ok(r) => r.map_err(ServeError::Serve),
        Err(e) => Err(ServeError::Serve(std::io::Error::other(e))),
    }
}

/// Completes once `stop` says true (or its sender is gone).
async fn stopped(mut stop: tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

fn credentials_of(state: &AppState) -> (&str, &str) {
    (
        state.credentials.access_key(),
        state.credentials.secret_key(),
    )
}

/// Reloads the in-memory PairDB whenever a pair command was applied here.
fn follow_pairs(state: &Arc<AppState>) {
    let mut changed = state.store.metadata().pairs_changed();
    let state = state.clone();
    tokio::spawn(async move {
        while changed.changed().await.is_ok() {
            if let Err(e) = state.store.reload_pairs().await {
                tracing::warn!(error = ?e, "reloading PairDB");
            }
            if state
                .store
                .metadata()
                .raft()
                .metrics()
                .borrow()
                .current_leader
                == Some(state.store.metadata().node_id())
            {
                state.workers.ensure(&state.store);
            }
        }
    });
}

/// Runs the in-process Valkyrie workers only while this node leads: each disk has one
/// active worker in the cluster at a time.
fn follow_leadership(state: &Arc<AppState>) {
    let mut leading = state.store.metadata().leadership();
    let state = state.clone();
    tokio::spawn(async move {
        loop {
            if *leading.borrow_and_update() {
                tracing::info!("leading the metadata group: starting Valkyrie workers");
                state.workers.ensure(&state.store);
                state.workers.resume_drains(&state.store);
            } else {
                state.workers.stop();
            }
            if leading.changed().await.is_err() {
                return;
            }
        }
    });
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}
