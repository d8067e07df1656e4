//! `valkyrie`: the worker of one disk, run on the storage node beside nginx's folder.
//!
//! ```text
//! VALKYRIE_CATALOG_TOKEN=... valkyrie --disk /srv/disk0 --pair 3 --index 0 \
//!     --catalog http://10.0.0.1:9000 [--quarantine-secs 604800 ...] \
//!     [--storage-ca ca.crt --storage-cert tls.crt --storage-key tls.key]
//! ```
//!
//! `VALKYRIE_CATALOG_TOKEN` is the gateway's catalog token (`GATEWAY_CATALOG_TOKEN`), which
//! opens the `/_catalog/` API only; the gateway's admin token is still accepted there.
//!
//! Runs the worker until SIGTERM (or SIGINT). Metrics: SIGUSR1 prints a JSON snapshot on
//! stdout, and one is logged every `--metrics-log-secs`. With `--unmove` it drains the pair
//! from this (surviving) disk instead, prints the final progress as JSON and exits: 0 when
//! finished, 1 when stopped or failed, 2 on bad arguments.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use placement::{Disk, PairId};
use tokio::signal::unix::{Signal, SignalKind, signal};
use valkyrie::logging::LogFormat;
use valkyrie::unmove::pair_table;
use valkyrie::{
    Catalog, Clock, HttpCatalog, HttpCatalogConfig, Settings, Shutdown, UnmoveOptions,
    UnmoveTracker, Worker, WorkerConfig,
};

const TOKEN_ENV: &str = "VALKYRIE_CATALOG_TOKEN";
/// Startup waits for the catalog this many times, two seconds apart, then gives up (the
/// service manager restarts us).
const STARTUP_ATTEMPTS_MAX: u32 = 30;

/// The per-disk scrubber and garbage collector of the dedup store.
#[derive(Parser, Debug)]
#[command(name = "valkyrie", version)]
struct Args {
    /// The disk's directory (the folder nginx serves).
    #[arg(long)]
    disk: PathBuf,
    /// The id of the disk's pair.
    #[arg(long)]
    pair: u32,
    /// Which disk of the pair this is.
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=1))]
    index: u8,
    /// The gateway's base URL (its `/_catalog/` API); the token is read from
    /// VALKYRIE_CATALOG_TOKEN: the gateway's GATEWAY_CATALOG_TOKEN (or its admin token).
    #[arg(long)]
    catalog: String,
    /// An https:// --catalog: the CA bundle (PEM) the gateway's certificate must chain to
    /// (never the system roots).
    #[arg(long)]
    catalog_ca: Option<PathBuf>,
    #[arg(long, default_value_t = Settings::default().quarantine_secs)]
    quarantine_secs: u64,
    #[arg(long, default_value_t = Settings::default().slave_delay_secs)]
    slave_delay_secs: u64,
    #[arg(long, default_value_t = Settings::default().scrub_interval_secs)]
    scrub_interval_secs: u64,
    #[arg(long, default_value_t = Settings::default().grace_secs)]
    grace_secs: u64,
    /// 0 means unlimited.
    #[arg(long, default_value_t = Settings::default().scrub_bytes_per_sec)]
    scrub_bytes_per_sec: u64,
    #[arg(long, default_value_t = Settings::default().temp_max_age_secs)]
    temp_max_age_secs: u64,
    #[arg(long, default_value_t = Settings::default().deletion_interval_secs)]
    deletion_interval_secs: u64,
    #[arg(long, default_value_t = Settings::default().deletion_page_entries)]
    deletion_page_entries: usize,
    #[arg(long, default_value_t = Settings::default().scrub_batch_files)]
    scrub_batch_files: usize,
    /// Log a metrics snapshot this often.
    #[arg(long, default_value_t = 300)]
    metrics_log_secs: u64,
    /// Bound on one catalog request.
    #[arg(long, default_value_t = 10)]
    catalog_timeout_secs: u64,
    /// Drain the pair from this surviving disk to other pairs (UNMOVE), then exit.
    #[arg(long)]
    unmove: bool,
    /// UNMOVE's read rate; 0 means unlimited.
    #[arg(long, default_value_t = UnmoveOptions::default().bytes_per_sec)]
    unmove_bytes_per_sec: u64,
    #[command(flatten)]
    storage_tls: valkyrie::storage_tls::StorageTlsArgs,
    /// How log lines on stderr are written: text (coloured only on a terminal) or json
    /// (one object per line).
    #[arg(long, value_enum, env = "VALKYRIE_LOG_FORMAT", default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

impl Args {
    fn settings(&self) -> Settings {
        Settings {
            quarantine_secs: self.quarantine_secs,
            slave_delay_secs: self.slave_delay_secs,
            scrub_interval_secs: self.scrub_interval_secs,
            grace_secs: self.grace_secs,
            scrub_bytes_per_sec: self.scrub_bytes_per_sec,
            temp_max_age_secs: self.temp_max_age_secs,
            deletion_interval_secs: self.deletion_interval_secs,
            deletion_page_entries: self.deletion_page_entries,
            scrub_batch_files: self.scrub_batch_files,
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    valkyrie::logging::init(args.log_format);
    let Ok(token) = std::env::var(TOKEN_ENV) else {
        tracing::error!("{TOKEN_ENV} is not set");
        return ExitCode::from(2);
    };
    if !args.disk.is_dir() {
        tracing::error!(disk = %args.disk.display(), "--disk is not a directory");
        return ExitCode::from(2);
    }
    if let Err(e) = args.settings().checked() {
        tracing::error!("{e}");
        return ExitCode::from(2);
    }
    // Before any disk is opened: the peer and, for UNMOVE, every pair's disks.
    if let Err(e) = args.storage_tls.install() {
        tracing::error!("{e}");
        return ExitCode::from(2);
    }
    let config = HttpCatalogConfig {
        request_timeout: Duration::from_secs(args.catalog_timeout_secs.max(1)),
        ..HttpCatalogConfig::default()
    };
    let catalog_tls = match &args.catalog_ca {
        None => None,
        Some(ca) => match placement::disk::StorageTls::from_files(ca, None) {
            Ok(tls) => Some(tls.client_config().clone()),
            Err(e) => {
                tracing::error!("--catalog-ca: {e}");
                return ExitCode::from(2);
            }
        },
    };
    let catalog = match HttpCatalog::with_tls(&args.catalog, &token, config, catalog_tls) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "bad --catalog");
            return ExitCode::from(2);
        }
    };
    let (stop, shutdown) = Shutdown::channel();
    // Handlers are installed before any work starts: a signal that arrives early must not
    // meet the default action (which would kill the process on SIGUSR1).
    let (Ok(term), Ok(int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install the SIGTERM/SIGINT handlers");
        return ExitCode::from(1);
    };
    tokio::spawn(stop_on_signals(term, int, stop));
    if args.unmove {
        unmove(&args, catalog, shutdown).await
    } else {
        run(&args, catalog, shutdown).await
    }
}

async fn stop_on_signals(
    mut term: Signal,
    mut int: Signal,
    stop: tokio::sync::watch::Sender<bool>,
) {
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: stopping at the next batch boundary"),
        _ = int.recv() => tracing::info!("SIGINT: stopping at the next batch boundary"),
    }
    let _ = stop.send(true);
    // Keep the sender alive: a dropped sender also reads as "stop", which is fine, but
    // waiting here keeps the intent obvious.
    std::future::pending::<()>().await;
}

/// The pair list, waiting a bounded time for the catalog to come up.
async fn pairs_at_startup(
    catalog: &HttpCatalog,
    shutdown: &Shutdown,
) -> Option<Vec<(PairId, placement::PairRecord)>> {
    for attempt in 1..=STARTUP_ATTEMPTS_MAX {
        match catalog.pairs().await {
            Ok(pairs) => return Some(pairs),
            Err(e) => tracing::warn!(attempt, error = %e, "catalog not reachable yet"),
        }
        if shutdown.sleep(Duration::from_secs(2)).await {
            return None;
        }
    }
    None
}

async fn run(args: &Args, catalog: HttpCatalog, shutdown: Shutdown) -> ExitCode {
    let pair = PairId(args.pair);
    let index = usize::from(args.index);
    let Some(pairs) = pairs_at_startup(&catalog, &shutdown).await else {
        tracing::error!("no pair list from the catalog; giving up");
        return ExitCode::from(1);
    };
    let Some((_, record)) = pairs.into_iter().find(|(id, _)| *id == pair) else {
        tracing::error!(%pair, "the catalog does not know this pair");
        return ExitCode::from(2);
    };
    let peer_ref = &record.disks[1 - index];
    let peer = match Disk::open(peer_ref) {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(peer = %peer_ref, error = %e, "cannot open the peer disk");
            return ExitCode::from(2);
        }
    };
    // A TLS mistake (a node's certificate from another CA, ours refused) is configuration:
    // refused at start by name. Only https://, so an http:// peer that is down at start is
    // still waited for by the worker, as before.
    if peer_ref.as_str().starts_with("https://")
        && let Err(e) = peer.probe_write().await
    {
        tracing::error!(peer = %peer_ref, error = %e, "the https:// peer disk refused this worker");
        return ExitCode::from(2);
    }
    let config = WorkerConfig {
        root: args.disk.clone(),
        pair,
        index,
        peer,
        settings: args.settings(),
    };
    let worker = match Worker::new(catalog, config, Clock::system()) {
        Ok(w) => Arc::new(w),
        Err(e) => {
            tracing::error!(error = %e, "bad configuration");
            return ExitCode::from(2);
        }
    };
    let usr1 = match signal(SignalKind::user_defined1()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "no SIGUSR1 handler; metrics are only logged");
            None
        }
    };
    tokio::spawn(report_metrics(
        worker.clone(),
        usr1,
        Duration::from_secs(args.metrics_log_secs.max(1)),
        shutdown.clone(),
    ));
    worker.run(shutdown).await;
    println!("{}", worker.metrics().snapshot().to_json());
    ExitCode::SUCCESS
}

/// SIGUSR1 prints a snapshot on stdout; one is logged every `every`.
async fn report_metrics(
    worker: Arc<Worker<HttpCatalog>>,
    mut usr1: Option<Signal>,
    every: Duration,
    shutdown: Shutdown,
) {
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        let usr1_recv = async {
            match usr1.as_mut() {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = usr1_recv => println!("{}", worker.metrics().snapshot().to_json()),
            _ = tick.tick() => tracing::info!(metrics = %worker.metrics().snapshot().to_json(), "metrics"),
            _ = shutdown.wait() => return,
        }
    }
}

async fn unmove(args: &Args, catalog: HttpCatalog, shutdown: Shutdown) -> ExitCode {
    let pair = PairId(args.pair);
    if pairs_at_startup(&catalog, &shutdown).await.is_none() {
        tracing::error!("no pair list from the catalog; giving up");
        return ExitCode::from(1);
    }
    let pairs = match pair_table(&catalog).await {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the pair table");
            return ExitCode::from(1);
        }
    };
    let options = UnmoveOptions {
        bytes_per_sec: args.unmove_bytes_per_sec,
        ..UnmoveOptions::default()
    };
    let tracker = Arc::new(UnmoveTracker::new());
    let logger = {
        let tracker = tracker.clone();
        let every = Duration::from_secs(args.metrics_log_secs.max(1));
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            while !shutdown.sleep(every).await {
                let p = tracker.snapshot();
                tracing::info!(progress = %serde_json::to_string(&p).unwrap_or_default(), "UNMOVE progress");
            }
        })
    };
    let result = valkyrie::drain(
        &catalog, &pairs, pair, &args.disk, &tracker, &options, &shutdown,
    )
    .await;
    logger.abort();
    match result {
        Ok(p) => {
            println!("{}", serde_json::to_string(&p).unwrap_or_default());
            if p.finished {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "UNMOVE failed");
            ExitCode::from(1)
        }
    }
}
