//! Process wiring: open the data folder, load PairDB, build the router, serve.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use placement::pairdb::PairTable;
use placement::{DiskRef, PairId, PairRecord};

use crate::credentials::{Credentials, CredentialsError, Origin};
use crate::meta::{Command, MetaError, MetaStore};
use crate::store::{Limits, ObjectStore};
use crate::workers::Workers;
use crate::{admin, catalog, native, s3};

/// How often disk fill is measured for the pair choice.
const SPACE_REFRESH_SECS: u64 = 30;

#[derive(Clone, Debug)]
pub struct Config {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub region: String,
    /// Virtual-hosted-style requests: `bucket.<domain>`.
    pub domain: Option<String>,
    pub limits: Limits,
    /// n of the n-th root that flattens the pair weights.
    pub choice_root: u32,
    pub admin_token: Option<String>,
    pub native_token: Option<String>,
    /// Disk pairs from the configuration file.
    pub pairs: Vec<(PairId, [DiskRef; 2])>,
    /// Settings of the in-process Valkyrie workers.
    pub valkyrie: valkyrie::Settings,
}

/// Everything a request handler needs.
pub struct AppState {
    pub store: ObjectStore,
    pub credentials: Credentials,
    pub admin_token: Option<String>,
    pub native_token: Option<String>,
    pub region: String,
    /// Virtual-hosted-style requests: `bucket.<domain>`.
    pub domain: Option<String>,
    /// Valkyrie workers of the local disks, and UNMOVE drains.
    pub workers: Workers,
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
    #[error("listen on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
    #[error("server: {0}")]
    Serve(std::io::Error),
}

/// The default single-node layout: one pair of local disks inside the data folder.
fn default_pair(data_dir: &Path) -> PairRecord {
    PairRecord::new([
        DiskRef::local(data_dir.join("disk0")),
        DiskRef::local(data_dir.join("disk1")),
    ])
}

/// Opens the metadata and PairDB of a data folder.
///
/// Configured pairs are added to PairDB (their flags, set by operators, are kept); a
/// configured pair whose disks differ from PairDB's is refused, since re-pointing a pair
/// would orphan every file on it. With no pair configured or stored, the data folder's
/// own `disk0`/`disk1` become pair 0.
pub fn open_data(
    data_dir: &Path,
    configured: &[(PairId, [DiskRef; 2])],
) -> Result<(Arc<MetaStore>, Arc<PairTable>), ServeError> {
    let io_err = |e| ServeError::DataDir(data_dir.to_path_buf(), e);
    std::fs::create_dir_all(data_dir).map_err(io_err)?;
    let data_dir = data_dir.canonicalize().map_err(io_err)?;
    let meta = Arc::new(MetaStore::open(&data_dir.join("meta.redb"))?);
    let stored = meta.pairs()?;
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
                meta.execute(&Command::PutPair { id: *id, record })?;
            }
        }
    }
    if meta.pairs()?.is_empty() {
        meta.execute(&Command::PutPair {
            id: PairId(0),
            record: default_pair(&data_dir),
        })?;
    }
    let pairs = Arc::new(PairTable::new());
    for (id, record) in meta.pairs()? {
        for disk in &record.disks {
            if let Some(path) = disk.local_path() {
                std::fs::create_dir_all(path).map_err(io_err)?;
            }
        }
        pairs.upsert(id, record)?;
    }
    Ok((meta, pairs))
}

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
        .with_state(state.clone());
    Router::new()
        .route("/_health", get(|| async { "ok\n" }))
        .route("/_admin/files/{sha1}", get(admin::file))
        .route(
            "/_admin/pairs",
            get(admin::list_pairs).post(admin::add_pair),
        )
        .route(
            "/_admin/pairs/{id}/{action}",
            axum::routing::post(admin::pair_action),
        )
        .route("/_admin/scrub", get(admin::scrub_status))
        .route("/_admin/unmove", get(admin::unmove_status))
        .route("/_admin/disks/fail", axum::routing::post(admin::fail_disk))
        .route("/_metrics", get(admin::metrics))
        .with_state(state.clone())
        .merge(native::router(state.clone()))
        .merge(catalog::router(state))
        .fallback_service(s3_api)
}

/// Runs the gateway until SIGINT or SIGTERM.
pub async fn serve(config: Config) -> Result<(), ServeError> {
    let (meta, pairs) = open_data(&config.data_dir, &config.pairs)?;
    let (credentials, origin) = Credentials::load_or_create(&config.data_dir)?;
    if let Origin::Generated = origin {
        println!(
            "generated credentials (stored in {}, shown only once):\n  access key: {}\n  secret key: {}",
            config.data_dir.join("credentials").display(),
            credentials.access_key(),
            credentials.secret_key()
        );
    }
    let state = Arc::new(AppState {
        store: ObjectStore::new(meta, pairs, config.limits.clone(), config.choice_root),
        credentials,
        admin_token: config.admin_token.clone(),
        native_token: config.native_token.clone(),
        region: config.region.clone(),
        domain: config.domain.clone(),
        workers: Workers::new(config.valkyrie.clone(), true),
    });
    state.workers.ensure(&state);
    state.workers.resume_drains(&state);
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
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| ServeError::Listen(config.listen, e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ServeError::Listen(config.listen, e))?;
    // Tests and scripts wait for exactly this line to learn the port.
    println!("listening on {addr}");
    tracing::info!(%addr, data = %config.data_dir.display(), "gateway serving");
    let served = axum::serve(listener, router(state.clone()))
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(ServeError::Serve);
    state.workers.stop();
    served
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
