//! `gateway`: the command line. Parsing and wiring only; the logic is in the library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use gateway::admin_buckets_client::BucketsCommand;
use gateway::admin_client::{
    AdminClient, ClusterCommand, DiskCommand, JobsCommand, PairsCommand, ScrubCommand,
};
use gateway::admin_keys_client::KeysCommand;
use gateway::config::{FileConfig, Switch};
use gateway::server::connections::{self, ConnectionLimits};
use gateway::server::{self, Config};
use gateway::state::RequestLogLevel;
use gateway::store::Limits;
use valkyrie::logging::LogFormat;

#[derive(Parser)]
#[command(
    name = "gateway",
    version,
    about = "Deduplicating S3-compatible object gateway"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
    /// How log lines on stderr are written: text (coloured only on a terminal) or json
    /// (one object per line)
    #[arg(long, global = true, value_enum, env = "GATEWAY_LOG_FORMAT", default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve the S3 API (embedded single node: metadata and one local disk pair under --data).
    Serve(Box<ServeArgs>),
    /// Check the invariants of a stopped gateway's data folder: every object's content on
    /// both disks of its pair with the right hash, every reference count exact, no file
    /// without a record outside quarantine and grace. Exit code 1 on any violation.
    Fsck {
        /// Data folder of the gateway (stop the gateway first: the database is locked).
        #[arg(long, default_value = "./data")]
        data: PathBuf,
        /// Files without a record younger than this are uploads in flight, not orphans.
        #[arg(long, default_value_t = 86_400)]
        grace_secs: u64,
    },
    /// Start a node from a backup (`gateway admin backup FILE`): builds DIR's metadata
    /// from it (DIR must hold no metadata yet); then `gateway serve --data DIR` as before.
    Restore {
        /// The backup file.
        #[arg(long)]
        from: PathBuf,
        /// The data folder to create the node's metadata in.
        #[arg(long, default_value = "./data")]
        data: PathBuf,
    },
    /// The configuration file: `example` prints a complete one, every setting with its
    /// default and a comment.
    Config {
        #[command(subcommand)]
        command: ConfigCmd,
    },
    /// Operate a running gateway through its admin API (token from GATEWAY_ADMIN_TOKEN).
    Admin {
        /// The gateway's address.
        #[arg(long, default_value = "http://127.0.0.1:9000")]
        endpoint: String,
        #[command(subcommand)]
        command: AdminCmd,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// TOML configuration file; command-line flags win over it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Data folder: meta.redb, credentials, and the default disk0/ and disk1/ [default: ./data]
    #[arg(long)]
    data: Option<PathBuf>,
    /// Address to listen on; port 0 picks a free port, printed at start [default: 127.0.0.1:9000]
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Region of the gateway: reported to clients, and the only region a signature's
    /// credential scope may name (see --any-region) [default: us-east-1]
    #[arg(long)]
    region: Option<String>,
    /// Accept signatures whose credential scope names any region, not only --region (for
    /// clients that cannot be told the region)
    #[arg(long)]
    any_region: bool,
    /// Longest time ahead a V2 presigned URL's Expires may be, in seconds [default: 604800
    /// = 7 days, as SigV4]
    #[arg(long)]
    presigned_v2_expires_max_secs: Option<u64>,
    /// Serve /_metrics without a token (it shows disk paths and the layout); otherwise it
    /// needs GATEWAY_METRICS_TOKEN or the admin token
    #[arg(long)]
    metrics_open: bool,
    /// Accept virtual-hosted-style requests for `<bucket>.<domain>`
    #[arg(long)]
    domain: Option<String>,
    /// Largest object a single PUT may store, in bytes [default: 5 GiB]
    #[arg(long)]
    max_object_bytes: Option<u64>,
    /// Bytes of bodies (each up to 16 MiB) held in memory at once until their hash is
    /// known, so that a duplicate costs no disk write; 0 streams every body to disk
    /// [default: 268435456 = 256 MiB]
    #[arg(long)]
    memory_stage_bytes: Option<u64>,
    /// Bytes of object bodies being sent that may be held in memory at once; a GET over
    /// it waits (up to 10 s, then 503 SlowDown) [default: 268435456 = 256 MiB]
    #[arg(long)]
    memory_read_bytes: Option<u64>,
    /// Seconds a client has to send a whole request head, from its connection or its first
    /// byte [default: 30]
    #[arg(long)]
    header_read_timeout_secs: Option<u64>,
    /// Seconds a connection with no request in progress is kept open [default: 60]
    #[arg(long)]
    keepalive_idle_secs: Option<u64>,
    /// Seconds an upload may wait for its next body bytes [default: 60]
    #[arg(long)]
    body_idle_timeout_secs: Option<u64>,
    /// Seconds a response may wait for a client that reads nothing [default: 60]
    #[arg(long)]
    send_timeout_secs: Option<u64>,
    /// Connections in flight; one more is answered 503 SlowDown and closed (lowered to fit
    /// the open files limit) [default: 4096]
    #[arg(long)]
    max_connections: Option<usize>,
    /// n of the n-th root of free space that weights the pair choice [default: 2]
    #[arg(long)]
    choice_root: Option<u32>,
    /// Valkyrie: how long a quarantined file is kept before it is deleted [default: 7 days]
    #[arg(long)]
    quarantine_secs: Option<u64>,
    /// Valkyrie: how long after the master disk the slave acts on a deletion [default: 1 hour]
    #[arg(long)]
    slave_delay_secs: Option<u64>,
    /// Valkyrie: a scrub pass starts at most this often [default: 1 day]
    #[arg(long)]
    scrub_interval_secs: Option<u64>,
    /// Valkyrie: a file without a record is left alone this long [default: 1 day]
    #[arg(long)]
    grace_secs: Option<u64>,
    /// Valkyrie: bound on the scrubber's disk reads, bytes per second [default: 50 MiB/s]
    #[arg(long)]
    scrub_bytes_per_sec: Option<u64>,
    /// This node's id in the metadata group (with --peers) [default: 1]
    #[arg(long)]
    node_id: Option<u64>,
    /// The voters of the metadata group by S3 listen address, this node included:
    /// `1=HOST:PORT,2=HOST:PORT,3=HOST:PORT`. Node-to-node RPCs use the same port under
    /// /_cluster/, authenticated with GATEWAY_CLUSTER_SECRET. Without it: a single node.
    #[arg(long)]
    peers: Option<String>,
    /// Log entries applied between two metadata snapshots (log compaction) [default: 20000]
    #[arg(long)]
    snapshot_logs: Option<u64>,
    /// The shortest Raft election timeout in milliseconds (the longest is twice it, the
    /// leader's heartbeat a fifth): a leader that stops answering is replaced after about
    /// three to four times this value [default: 500]
    #[arg(long)]
    election_timeout_ms: Option<u64>,
    /// Level of the one log line per S3 request (request id, method, bucket, key, status,
    /// bytes in and out, duration), or off [default: info]
    #[arg(long, value_enum)]
    request_log_level: Option<RequestLogLevel>,
    /// Seconds one lifecycle "day" lasts, so that tests and staging systems see rules act
    /// in seconds [default: 86400]
    #[arg(long)]
    lifecycle_day_secs: Option<u64>,
    /// A multipart upload older than this many seconds is aborted and its parts released,
    /// with or without a lifecycle rule [default: 604800 = 7 days]
    #[arg(long)]
    upload_max_age_secs: Option<u64>,
    /// Seconds between two scans of the metadata behind gateway_stored_* (a scan also
    /// waits at least 4 times its own duration) [default: 30]
    #[arg(long)]
    stats_scan_secs: Option<u64>,
    /// Keys per chunk of a background job (delete-prefix), 1 to 1000 [default: 200]
    #[arg(long)]
    job_chunk_keys: Option<usize>,
    /// Pause after each chunk of a background job, in milliseconds: the jobs' share of
    /// the metadata log against foreground writes [default: 5]
    #[arg(long)]
    job_pause_ms: Option<u64>,
    /// SHA-1 collision detection on content names; `off` names content by its plain SHA-1
    /// (only to measure the cost: two colliding bodies are then deduplicated into one
    /// file) [default: on]
    #[arg(long, value_enum)]
    sha1_collision_detection: Option<Switch>,
}

#[derive(Subcommand)]
enum AdminCmd {
    /// Disk pairs: list, add, lock, unlock, read-only, read-write.
    Pairs {
        #[command(subcommand)]
        command: PairsCommand,
    },
    /// Valkyrie scrubbers: `status` shows each disk's counters and pass progress.
    Scrub {
        #[command(subcommand)]
        command: ScrubCommand,
    },
    /// Disks: `fail DISK` starts UNMOVE of its pair; `status` shows UNMOVE progress.
    Disk {
        #[command(subcommand)]
        command: DiskCommand,
    },
    /// The metadata group: status, add-learner, promote, remove.
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Background jobs: delete-prefix (a whole mailbox), list, status [--watch], cancel.
    Jobs {
        #[command(subcommand)]
        command: JobsCommand,
    },
    /// Buckets: `delete B` (empty), `delete B --force [--watch]` (with its contents).
    Buckets {
        #[command(subcommand)]
        command: BucketsCommand,
    },
    /// Write a consistent snapshot of the metadata (every acknowledged write) to FILE,
    /// while the gateway serves; `gateway restore --from FILE` starts a node from it.
    Backup { file: PathBuf },
    /// Access keys: create, list, info, delete, allow, deny.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
}

#[derive(Subcommand)]
enum ConfigCmd {
    /// Print a complete configuration file (TOML) with every setting and its default.
    Example,
}

/// Below 50 ms a heartbeat (a fifth) would be under 10 ms, far below a loaded machine's
/// scheduling jitter; above a minute a dead leader would stall writes for minutes.
const ELECTION_TIMEOUT_MS_RANGE: std::ops::RangeInclusive<u64> = 50..=60_000;

fn env_token(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|t| !t.is_empty())
}

/// A token from its environment variable, else the config file; empty from either is off.
fn token(env_name: &str, file_value: &Option<String>) -> Option<String> {
    gateway::config::token(std::env::var(env_name).ok(), file_value.as_deref())
}

fn serve_config(args: ServeArgs) -> Result<Config, String> {
    let file = match &args.config {
        Some(path) => FileConfig::load(path).map_err(|e| e.to_string())?,
        None => FileConfig::default(),
    };
    let defaults = Limits::default();
    let cluster_file = file.cluster.clone().unwrap_or_default();
    let snapshot_logs = args
        .snapshot_logs
        .or(cluster_file.snapshot_logs)
        .unwrap_or(gateway::meta::raft::SNAPSHOT_LOGS_DEFAULT);
    let peers = args.peers.clone().or(cluster_file.peers.clone());
    let cluster = match peers {
        None => {
            if args.node_id.is_some() || cluster_file.node_id.is_some() {
                return Err("--node-id needs --peers (the voters of the group)".into());
            }
            None
        }
        Some(peers) => {
            let peers = gateway::config::parse_peers(&peers)?;
            let node_id = args
                .node_id
                .or(cluster_file.node_id)
                .ok_or("--peers needs --node-id (this node's id)")?;
            let secret = env_token(gateway::cluster::CLUSTER_SECRET_ENV)
                .or(cluster_file.cluster_secret.clone())
                .or(file.cluster_secret.clone())
                .filter(|s| !s.is_empty())
                .ok_or_else(|| {
                    format!(
                        "a cluster node needs the shared secret in {} (or cluster_secret in the config file)",
                        gateway::cluster::CLUSTER_SECRET_ENV
                    )
                })?;
            let election_timeout_ms = args
                .election_timeout_ms
                .or(cluster_file.election_timeout_ms)
                .unwrap_or(gateway::meta::raft::ELECTION_TIMEOUT_MS_DEFAULT);
            if !(ELECTION_TIMEOUT_MS_RANGE).contains(&election_timeout_ms) {
                return Err(format!(
                    "--election-timeout-ms must be within {}..={} (got {election_timeout_ms})",
                    ELECTION_TIMEOUT_MS_RANGE.start(),
                    ELECTION_TIMEOUT_MS_RANGE.end()
                ));
            }
            Some(gateway::meta::raft::ClusterConfig {
                node_id,
                peers,
                secret,
                snapshot_logs,
                election_timeout_ms,
            })
        }
    };
    let default_pace = gateway::jobs::JobPace::default();
    let job_pace = gateway::jobs::JobPace {
        chunk_keys: args
            .job_chunk_keys
            .or(file.job_chunk_keys)
            .unwrap_or(default_pace.chunk_keys),
        pause: args
            .job_pause_ms
            .or(file.job_pause_ms)
            .map_or(default_pace.pause, std::time::Duration::from_millis),
    };
    if !(1..=gateway::meta::jobs::CHUNK_KEYS_MAX).contains(&job_pace.chunk_keys) {
        return Err(format!(
            "--job-chunk-keys must be 1 to {}",
            gateway::meta::jobs::CHUNK_KEYS_MAX
        ));
    }
    let lifecycle = {
        let d = gateway::lifecycle::Settings::default();
        gateway::lifecycle::Settings {
            day_secs: args
                .lifecycle_day_secs
                .or(file.lifecycle_day_secs)
                .unwrap_or(d.day_secs),
            upload_max_age_secs: args
                .upload_max_age_secs
                .or(file.upload_max_age_secs)
                .unwrap_or(d.upload_max_age_secs),
            ..d
        }
    };
    if lifecycle.day_secs == 0 {
        return Err("--lifecycle-day-secs must be at least 1".into());
    }
    Ok(Config {
        sha1_collision_detection: args
            .sha1_collision_detection
            .or(file.sha1_collision_detection)
            .unwrap_or_default()
            .is_on(),
        lifecycle,
        job_pace,
        cluster,
        snapshot_logs,
        stats: gateway::telemetry::stored::Settings {
            interval_secs: args
                .stats_scan_secs
                .or(file.stats_scan_secs)
                .unwrap_or(gateway::telemetry::stored::Settings::default().interval_secs),
        },
        request_log: args
            .request_log_level
            .or(file.request_log_level)
            .unwrap_or_default(),
        data_dir: args
            .data
            .or(file.data.clone())
            .unwrap_or_else(|| PathBuf::from("./data")),
        listen: args
            .listen
            .or(file.listen)
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 9000))),
        region: args
            .region
            .or(file.region.clone())
            .unwrap_or_else(|| "us-east-1".into()),
        limits: Limits {
            object_bytes_max: args
                .max_object_bytes
                .or(file.max_object_bytes)
                .unwrap_or(defaults.object_bytes_max),
            memory_stage_bytes: args
                .memory_stage_bytes
                .or(file.memory_stage_bytes)
                .unwrap_or(defaults.memory_stage_bytes),
            memory_read_bytes: args
                .memory_read_bytes
                .or(file.memory_read_bytes)
                .unwrap_or(defaults.memory_read_bytes),
            ..defaults
        },
        connections: {
            let d = ConnectionLimits::default();
            ConnectionLimits {
                header_read_timeout_secs: args
                    .header_read_timeout_secs
                    .or(file.header_read_timeout_secs)
                    .unwrap_or(d.header_read_timeout_secs),
                keepalive_idle_secs: args
                    .keepalive_idle_secs
                    .or(file.keepalive_idle_secs)
                    .unwrap_or(d.keepalive_idle_secs),
                body_idle_timeout_secs: args
                    .body_idle_timeout_secs
                    .or(file.body_idle_timeout_secs)
                    .unwrap_or(d.body_idle_timeout_secs),
                send_timeout_secs: args
                    .send_timeout_secs
                    .or(file.send_timeout_secs)
                    .unwrap_or(d.send_timeout_secs),
                max_connections: args
                    .max_connections
                    .or(file.max_connections)
                    .unwrap_or(d.max_connections),
            }
        },
        domain: args.domain.or(file.domain.clone()),
        choice_root: args.choice_root.or(file.choice_root).unwrap_or(2),
        admin_token: token(gateway::admin::ADMIN_TOKEN_ENV, &file.admin_token),
        native_token: token(gateway::native::NATIVE_TOKEN_ENV, &file.native_token),
        internal: gateway::bearer::InternalAccess {
            metrics_token: token(gateway::bearer::METRICS_TOKEN_ENV, &file.metrics_token),
            metrics_open: args.metrics_open || file.metrics_open.unwrap_or(false),
            catalog_token: token(gateway::bearer::CATALOG_TOKEN_ENV, &file.catalog_token),
        },
        signatures: gateway::state::SignaturePolicy {
            any_region: args.any_region || file.any_region.unwrap_or(false),
            presigned_v2_expires_max_secs: args
                .presigned_v2_expires_max_secs
                .or(file.presigned_v2_expires_max_secs)
                .unwrap_or(gateway::state::PRESIGNED_V2_EXPIRES_MAX_SECS_DEFAULT),
        },
        pairs: file.checked_pairs()?,
        valkyrie: {
            let mut v = file.valkyrie.clone().unwrap_or_default();
            v.quarantine_secs = args.quarantine_secs.unwrap_or(v.quarantine_secs);
            v.slave_delay_secs = args.slave_delay_secs.unwrap_or(v.slave_delay_secs);
            v.scrub_interval_secs = args.scrub_interval_secs.unwrap_or(v.scrub_interval_secs);
            v.grace_secs = args.grace_secs.unwrap_or(v.grace_secs);
            v.scrub_bytes_per_sec = args.scrub_bytes_per_sec.unwrap_or(v.scrub_bytes_per_sec);
            v.checked().map_err(|e| e.to_string())?
        },
    })
}

/// Raises the open files limit to its hard limit and keeps the connection bound below
/// it, so that a flood of connections meets 503 SlowDown, not EMFILE.
fn fit_open_files_limit(limits: &mut ConnectionLimits) {
    match connections::raise_open_files_limit() {
        Ok(files) => {
            let room = files.saturating_sub(connections::RESERVED_FILES).max(1);
            let room = usize::try_from(room).unwrap_or(usize::MAX);
            if limits.max_connections > room {
                tracing::warn!(
                    max_connections = limits.max_connections,
                    open_files_limit = files,
                    lowered_to = room,
                    "max_connections does not fit the open files limit"
                );
                limits.max_connections = room;
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot raise the open files limit"),
    }
}

/// Blocking threads the runtime may start (on demand; idle ones end). More than tokio's
/// 512: the blocking tasks of many concurrent uploads and reads wait on disks.
const BLOCKING_THREADS_MAX: usize = 2048;

fn main() -> ExitCode {
    let cli = Cli::parse();
    valkyrie::logging::init(cli.log_format);
    // Disk writes, reads and hashing are short blocking tasks (a batch each), so the pool
    // fills only with work in progress; metadata calls queue behind them when it is full.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .max_blocking_threads(BLOCKING_THREADS_MAX)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gateway: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result: Result<(), String> = match cli.command {
        Cmd::Serve(args) => match serve_config(*args) {
            Ok(mut config) => {
                fit_open_files_limit(&mut config.connections);
                runtime
                    .block_on(server::serve(config))
                    .map_err(|e| e.to_string())
            }
            Err(e) => Err(e),
        },
        Cmd::Admin { endpoint, command } => {
            let token = env_token(gateway::admin::ADMIN_TOKEN_ENV);
            runtime.block_on(async {
                let client = AdminClient::new(&endpoint, token)?;
                let out = match command {
                    AdminCmd::Pairs { command } => client.pairs(command).await?,
                    AdminCmd::Scrub { command } => client.scrub(command).await?,
                    AdminCmd::Disk { command } => client.disk(command).await?,
                    AdminCmd::Cluster { command } => client.cluster(command).await?,
                    AdminCmd::Keys { command } => client.keys(command).await?,
                    AdminCmd::Jobs { command } => client.jobs(command).await?,
                    AdminCmd::Buckets { command } => client.buckets(command).await?,
                    AdminCmd::Backup { file } => {
                        let n = client.backup(&file).await?;
                        format!("wrote {} ({n} bytes)\n", file.display())
                    }
                };
                print!("{out}");
                Ok(())
            })
        }
        Cmd::Config {
            command: ConfigCmd::Example,
        } => {
            print!("{}", gateway::config_example::text());
            Ok(())
        }
        Cmd::Restore { from, data } => match gateway::meta::raft::restore(&from, &data) {
            Ok(report) => {
                print!("{report}");
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        },
        Cmd::Fsck { data, grace_secs } => match gateway::fsck::run(&data, grace_secs) {
            Ok(report) => {
                print!("{report}");
                if report.is_clean() {
                    Ok(())
                } else {
                    return ExitCode::FAILURE;
                }
            }
            Err(e) => Err(e.to_string()),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gateway: {e}");
            ExitCode::FAILURE
        }
    }
}
