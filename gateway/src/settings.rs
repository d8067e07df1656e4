//! The settings of `gateway serve`, each declared once, and resolved in one place: the
//! command-line flag, then the configuration file, then the default.
//!
//! The `settings!` table below is the declaration: one row per setting with its flag's
//! help text, the file section it is read from (`[cluster]`, `[valkyrie]`, or the top
//! level), its type and its default (none for a setting that may stay unset, such as
//! `domain`). From it come [`Flags`] (the flags, clap), [`Settings`] (the values,
//! `Default` being the defaults, which `gateway config example` prints) and
//! [`Settings::resolve`]. The row of `--max-object-bytes`, for example:
//!
//! ```text
//! /// Largest object a single PUT may store, in bytes [default: 5 GiB]
//! max_object_bytes: u64 = Limits::default().object_bytes_max;
//! ```
//!
//! gives `Flags::max_object_bytes: Option<u64>` (`--max-object-bytes`), reads
//! `FileConfig::max_object_bytes` (the file key of the same name) and resolves to
//! `Settings::max_object_bytes: u64`.
//!
//! What has no flag is not declared here: the tokens and the cluster secret (from their
//! environment variable, then the file: [`crate::config::token`]; secrets stay out of
//! command lines), the disk pairs, and the `[valkyrie]` keys without a flag (the file, then
//! [`valkyrie::Settings::default`]). [`Settings::server_config`] joins them into the
//! server's [`Config`], with every check `gateway serve` makes before it starts.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::config::{FileConfig, Switch, parse_peers, token};
use crate::jobs::JobPace;
use crate::server::tls::TlsFiles;
use crate::server::tls::cluster::ClusterTlsFiles;
use crate::server::{Config, ConnectionLimits};
use crate::state::{PRESIGNED_V2_EXPIRES_MAX_SECS_DEFAULT, RequestLogLevel, SignaturePolicy};
use crate::store::Limits;
use meta::raft::{ClusterConfig, CrashPoint, ELECTION_TIMEOUT_MS_DEFAULT, SNAPSHOT_LOGS_DEFAULT};
use placement::disk::{StorageTls, WebDavConfig};

/// The data folder when none is given (also `gateway fsck` and `gateway restore`'s).
pub const DATA_DIR_DEFAULT: &str = "./data";

/// Below 50 ms a heartbeat (a fifth) would be under 10 ms, far below a loaded machine's
/// scheduling jitter; above a minute a dead leader would stall writes for minutes.
const ELECTION_TIMEOUT_MS_RANGE: std::ops::RangeInclusive<u64> = 50..=60_000;

/// A setting's value in the file: the top level's key of the same name, or the section's.
macro_rules! file_value {
    ($file:expr, $key:ident) => {
        $file.$key.clone()
    };
    ($file:expr, $key:ident, cluster) => {
        $file.cluster.as_ref().and_then(|c| c.$key.clone())
    };
    // A `[valkyrie]` section has every key: the ones it does not name take their default.
    ($file:expr, $key:ident, valkyrie) => {
        $file.valkyrie.as_ref().map(|v| v.$key)
    };
    ($file:expr, $key:ident, storage_tls) => {
        $file.storage_tls.as_ref().and_then(|s| s.$key.clone())
    };
}

/// A setting's resolved type: its own with a default, optional without one.
macro_rules! resolved_type {
    ($ty:ty) => { Option<$ty> };
    ($ty:ty, $default:expr) => { $ty };
}

/// A setting's default: the row's, or unset.
macro_rules! default_of {
    () => {
        None
    };
    ($default:expr) => {
        $default
    };
}

/// Generates [`Flags`], [`Settings`] with its `Default`, and [`Settings::resolve`] from the
/// rows. A row: the flag's help, its clap attributes if any, the file section if not the
/// top level, `key: Type = default;` (`key: Type;` for a setting with no default). The flag
/// is `--key` with dashes; the file key is `key`.
macro_rules! settings {
    ($(
        $(#[doc = $doc:literal])*
        $(#[arg($($arg:tt)*)])?
        $([$section:ident])? $key:ident: $ty:ty $(= $default:expr)?;
    )*) => {
        /// The flags of `gateway serve` that set a setting, `None` where the command line
        /// does not name it (the file's value or the default then applies).
        #[derive(Clone, Debug, Default, clap::Args)]
        pub struct Flags {
            $(
                $(#[doc = $doc])*
                #[arg(long $(, $($arg)*)?)]
                pub $key: Option<$ty>,
            )*
        }

        /// Every setting of `gateway serve` with a flag, resolved; `Settings::default()`
        /// holds the defaults.
        #[derive(Clone, Debug, PartialEq)]
        pub struct Settings {
            $(
                $(#[doc = $doc])*
                pub $key: resolved_type!($ty $(, $default)?),
            )*
        }

        impl Default for Settings {
            fn default() -> Self {
                Settings {
                    $($key: default_of!($($default)?),)*
                }
            }
        }

        impl Settings {
            /// Each setting from the first layer that gives it: the flag, then the file,
            /// then the default.
            pub fn resolve(flags: &Flags, file: &FileConfig) -> Settings {
                let mut settings = Settings::default();
                $(
                    if let Some(value) = flags
                        .$key
                        .clone()
                        .or_else(|| file_value!(file, $key $(, $section)?))
                    {
                        settings.$key = value.into();
                    }
                )*
                settings
            }
        }
    };
}

// The rows, in the order `gateway serve --help` lists the flags. A switch (`--any-region`)
// takes no value: given, it is `Some(true)`; absent, the file decides.
settings! {
    /// Data folder: meta.redb, credentials, and the default disk0/ and disk1/ [default: ./data]
    data: PathBuf = PathBuf::from(DATA_DIR_DEFAULT);
    /// Address to listen on; port 0 picks a free port, printed at start [default: 127.0.0.1:9000]
    listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 9000));
    /// A second listener serving only /_health, /_metrics, /_status and /_admin/, with its
    /// own connection bound, so that a flood of S3 connections cannot lock probes and
    /// scrapes out; HTTPS with --tls-cert's certificate when given, else plain HTTP;
    /// printed as `admin listening on ADDR`. Without it: none
    admin_listen: SocketAddr;
    /// Region of the gateway: reported to clients, and the only region a signature's
    /// credential scope may name (see --any-region) [default: us-east-1]
    region: String = "us-east-1".to_owned();
    /// Accept signatures whose credential scope names any region, not only --region (for
    /// clients that cannot be told the region)
    #[arg(num_args = 0, default_missing_value = "true")]
    any_region: bool = false;
    /// Longest time ahead a V2 presigned URL's Expires may be, in seconds [default: 604800
    /// = 7 days, as SigV4]
    presigned_v2_expires_max_secs: u64 = PRESIGNED_V2_EXPIRES_MAX_SECS_DEFAULT;
    /// Serve /_metrics without a token (it shows disk paths and the layout); otherwise it
    /// needs GATEWAY_METRICS_TOKEN or the admin token
    #[arg(num_args = 0, default_missing_value = "true")]
    metrics_open: bool = false;
    /// Accept virtual-hosted-style requests for `<bucket>.<domain>`
    domain: String;
    /// Largest object a single PUT may store, in bytes [default: 5 GiB]
    max_object_bytes: u64 = Limits::default().object_bytes_max;
    /// Bytes of bodies (each up to 16 MiB) held in memory at once until their hash is
    /// known, so that a duplicate costs no disk write; 0 streams every body to disk
    /// [default: 268435456 = 256 MiB]
    memory_stage_bytes: u64 = Limits::default().memory_stage_bytes;
    /// Bytes of object bodies being sent that may be held in memory at once; a GET over
    /// it waits (up to 10 s, then 503 SlowDown) [default: 268435456 = 256 MiB]
    memory_read_bytes: u64 = Limits::default().memory_read_bytes;
    /// Seconds a client has to send a whole request head, from its connection or its first
    /// byte [default: 30]
    header_read_timeout_secs: u64 = ConnectionLimits::default().header_read_timeout_secs;
    /// Seconds a connection with no request in progress is kept open [default: 60]
    keepalive_idle_secs: u64 = ConnectionLimits::default().keepalive_idle_secs;
    /// Seconds an upload may wait for its next body bytes [default: 60]
    body_idle_timeout_secs: u64 = ConnectionLimits::default().body_idle_timeout_secs;
    /// Seconds a response may wait for a client that reads nothing [default: 60]
    send_timeout_secs: u64 = ConnectionLimits::default().send_timeout_secs;
    /// Connections in flight; one more is answered 503 SlowDown and closed (lowered to fit
    /// the open files limit) [default: 4096]
    max_connections: usize = ConnectionLimits::default().max_connections;
    /// HTTPS: the certificate chain (PEM, leaf first), with --tls-key; reloaded on SIGHUP
    /// and when the file changes. Without it: plain HTTP
    tls_cert: PathBuf;
    /// HTTPS: the private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1)
    tls_key: PathBuf;
    /// n of the n-th root of free space that weights the pair choice [default: 2]
    choice_root: u32 = 2;
    /// https:// disks: the CA bundle (PEM) storage nodes' certificates must chain to;
    /// required for an https:// disk, the system roots are never used (`ca` in [storage_tls])
    [storage_tls] storage_ca: PathBuf;
    /// https:// disks: the client certificate chain (PEM) presented to storage nodes, with
    /// --storage-key (`cert` in [storage_tls])
    [storage_tls] storage_cert: PathBuf;
    /// https:// disks: the private key of --storage-cert (PEM) (`key` in [storage_tls])
    [storage_tls] storage_key: PathBuf;
    /// Valkyrie: how long a quarantined file is kept before it is deleted [default: 7 days]
    [valkyrie] quarantine_secs: u64 = valkyrie::Settings::default().quarantine_secs;
    /// Valkyrie: how long after the master disk the slave acts on a deletion [default: 1 hour]
    [valkyrie] slave_delay_secs: u64 = valkyrie::Settings::default().slave_delay_secs;
    /// Valkyrie: a scrub pass starts at most this often [default: 1 day]
    [valkyrie] scrub_interval_secs: u64 = valkyrie::Settings::default().scrub_interval_secs;
    /// Valkyrie: a file without a record is left alone this long [default: 1 day]
    [valkyrie] grace_secs: u64 = valkyrie::Settings::default().grace_secs;
    /// Valkyrie: bound on the scrubber's disk reads, bytes per second [default: 50 MiB/s]
    [valkyrie] scrub_bytes_per_sec: u64 = valkyrie::Settings::default().scrub_bytes_per_sec;
    /// This node's id in the metadata group (with --peers) [default: 1]
    [cluster] node_id: u64;
    /// The voters of the metadata group by S3 listen address, this node included:
    /// `1=HOST:PORT,2=HOST:PORT,3=HOST:PORT`. Node-to-node RPCs use the same port under
    /// /_cluster/, authenticated with GATEWAY_CLUSTER_SECRET (and over mutual TLS with
    /// --cluster-ca). Without it: a single node.
    [cluster] peers: String;
    /// Mutual TLS between the nodes: the CA (PEM) every node's certificate must chain to,
    /// with --cluster-cert and --cluster-key. Without: RPCs over plain HTTP
    [cluster] cluster_ca: PathBuf;
    /// Mutual TLS between the nodes: this node's certificate chain (PEM, leaf first; its
    /// SANs name the host of its --peers address), presented to peers both ways
    [cluster] cluster_cert: PathBuf;
    /// Mutual TLS between the nodes: the private key of --cluster-cert (PEM)
    [cluster] cluster_key: PathBuf;
    /// Log entries applied between two metadata snapshots (log compaction) [default: 20000]
    [cluster] snapshot_logs: u64 = SNAPSHOT_LOGS_DEFAULT;
    /// The shortest Raft election timeout in milliseconds (the longest is twice it, the
    /// leader's heartbeat a fifth): a leader that stops answering is replaced after about
    /// three to four times this value [default: 500]
    [cluster] election_timeout_ms: u64 = ELECTION_TIMEOUT_MS_DEFAULT;
    /// Replicas of each metadata group a split creates (`admin groups split`), at most
    /// the cluster's nodes [default: 3]
    [cluster] replication_factor: u64 = meta::raft::REPLICATION_FACTOR_DEFAULT;
    /// FileDB records a metadata group holds before its leader splits it in two
    /// [default: 5000000000, a group of 256 GiB per replica]
    [cluster] group_split_files: u64 = meta::raft::GROUP_SPLIT_FILES_DEFAULT;
    /// Index entries (objects, versions, parts) a metadata group holding S3 keys holds
    /// before its leader splits its keys in two [default: 1000000000, a group of 256 GiB
    /// per replica]
    [cluster] group_split_objects: u64 = meta::raft::GROUP_SPLIT_OBJECTS_DEFAULT;
    /// FileDB operations per second a metadata group may apply, over a minute, before
    /// its leader splits it where that divides the load (in a cluster of more than one
    /// node; never for one hot content); 0: never [default: 2000]
    [cluster] group_split_ops: u64 = meta::raft::GROUP_SPLIT_OPS_DEFAULT;
    /// Leave the metadata groups' replicas where they are: no automatic moves evening
    /// them out over the nodes (a node added then receives none; `admin groups move`
    /// still moves them) [default: off]
    [cluster] no_rebalance: bool = false;
    /// How long a cross-group write's reference may stay pending, in milliseconds: a later
    /// entry is refused, and the reconciler releases a reference with no entry once this
    /// and --reconcile-grace-ms have passed; at least 1000, and in production well beyond
    /// the longest write (20 s) [default: 300000]
    [cluster] ref_deadline_ms: u64 = meta::raft::REF_DEADLINE_MS_DEFAULT;
    /// How long past its deadline a pending reference waits before the reconciler settles
    /// it, in milliseconds (the leaders' clocks may disagree by this much) [default: 60000]
    [cluster] reconcile_grace_ms: u64 = meta::raft::RECONCILE_GRACE_MS_DEFAULT;
    /// Level of the one log line per S3 request (request id, method, bucket, key, status,
    /// bytes in and out, duration), or off [default: info]
    #[arg(value_enum)]
    request_log_level: RequestLogLevel = RequestLogLevel::default();
    /// Seconds one lifecycle "day" lasts, so that tests and staging systems see rules act
    /// in seconds [default: 86400]
    lifecycle_day_secs: u64 = crate::lifecycle::Settings::default().day_secs;
    /// A multipart upload older than this many seconds is aborted and its parts released,
    /// with or without a lifecycle rule [default: 604800 = 7 days]
    upload_max_age_secs: u64 = crate::lifecycle::Settings::default().upload_max_age_secs;
    /// Seconds between two scans of the metadata behind gateway_stored_* (a scan also
    /// waits at least 4 times its own duration) [default: 30]
    stats_scan_secs: u64 = crate::telemetry::stored::Settings::default().interval_secs;
    /// Keys per chunk of a background job (delete-prefix), 1 to 1000 [default: 200]
    job_chunk_keys: usize = JobPace::default().chunk_keys;
    /// Pause after each chunk of a background job, in milliseconds: the jobs' share of
    /// the metadata log against foreground writes [default: 5]
    job_pause_ms: u64 = u64::try_from(JobPace::default().pause.as_millis()).unwrap_or(u64::MAX);
    /// SHA-1 collision detection on content names; `off` names content by its plain SHA-1
    /// (only to measure the cost: two colliding bodies are then deduplicated into one
    /// file) [default: on]
    #[arg(value_enum)]
    sha1_collision_detection: Switch = Switch::default();
}

/// The server's configuration for `gateway serve`: the file at `config_file` if any, the
/// flags over it, the environment (`env`: a variable's value by name) for the secrets.
/// The storage TLS is set for the whole process here ([`WebDavConfig::set_process`]): every
/// disk the gateway opens from now on uses it.
pub fn serve_config(
    config_file: Option<&Path>,
    flags: &Flags,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, String> {
    let file = match config_file {
        Some(path) => FileConfig::load(path).map_err(|e| e.to_string())?,
        None => FileConfig::default(),
    };
    let settings = Settings::resolve(flags, &file);
    let storage_tls = settings.storage_tls()?;
    let config = settings.server_config(&file, env)?;
    WebDavConfig::set_process(WebDavConfig {
        tls: storage_tls,
        ..WebDavConfig::default()
    });
    Ok(config)
}

/// The shortest `--ref-deadline-ms`: a reference must outlive the round trip of its write.
const REF_DEADLINE_MS_MIN: u64 = 1000;

/// The environment variable naming a test's crash point (see [`CrashPoint`]).
pub const CRASH_POINT_ENV: &str = "GATEWAY_CRASH_POINT";

/// The crash point `GATEWAY_CRASH_POINT` names, if set (tests only).
fn crash_point(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<CrashPoint>, String> {
    env(CRASH_POINT_ENV)
        .filter(|v| !v.is_empty())
        .map(|v| CrashPoint::parse(&v).map_err(|e| format!("{CRASH_POINT_ENV}: {e}")))
        .transpose()
}

impl Settings {
    /// The server's configuration: these settings, the file's disk pairs and `[valkyrie]`
    /// keys without a flag, and the secrets from `env`, then the file. An error names the
    /// setting that is wrong; the checks run in this order: the cluster, the job pace, the
    /// lifecycle day, the disk pairs, Valkyrie's settings.
    pub fn server_config(
        self,
        file: &FileConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, String> {
        let cluster = self.cluster(file, env)?;
        let replication_factor = self.replication_factor()?;
        let ref_deadline_ms = self.ref_deadline_ms()?;
        let crash_point = crash_point(env)?;
        let tls = self.tls()?;
        let cluster_tls = self.cluster_tls()?;
        let job_pace = self.job_pace()?;
        let lifecycle = self.lifecycle()?;
        let secret =
            |name: &str, file_value: &Option<String>| token(env(name), file_value.as_deref());
        Ok(Config {
            data_dir: self.data,
            listen: self.listen,
            admin_listen: self.admin_listen,
            region: self.region,
            domain: self.domain,
            limits: Limits {
                object_bytes_max: self.max_object_bytes,
                memory_stage_bytes: self.memory_stage_bytes,
                memory_read_bytes: self.memory_read_bytes,
                ..Limits::default()
            },
            choice_root: self.choice_root,
            admin_token: secret(crate::api::admin::ADMIN_TOKEN_ENV, &file.admin_token),
            native_token: secret(crate::api::native::NATIVE_TOKEN_ENV, &file.native_token),
            internal: crate::bearer::InternalAccess {
                metrics_token: secret(crate::bearer::METRICS_TOKEN_ENV, &file.metrics_token),
                metrics_open: self.metrics_open,
                catalog_token: secret(crate::bearer::CATALOG_TOKEN_ENV, &file.catalog_token),
            },
            signatures: SignaturePolicy {
                any_region: self.any_region,
                presigned_v2_expires_max_secs: self.presigned_v2_expires_max_secs,
            },
            pairs: file.checked_pairs()?,
            valkyrie: valkyrie::Settings {
                quarantine_secs: self.quarantine_secs,
                slave_delay_secs: self.slave_delay_secs,
                scrub_interval_secs: self.scrub_interval_secs,
                grace_secs: self.grace_secs,
                scrub_bytes_per_sec: self.scrub_bytes_per_sec,
                ..file.valkyrie.clone().unwrap_or_default()
            }
            .checked()
            .map_err(|e| e.to_string())?,
            cluster,
            snapshot_logs: self.snapshot_logs,
            replication_factor,
            group_split_files: self.group_split_files,
            group_split_objects: self.group_split_objects,
            rebalance: !self.no_rebalance,
            ref_deadline_ms,
            reconcile_grace_ms: self.reconcile_grace_ms,
            crash_point,
            connections: ConnectionLimits {
                header_read_timeout_secs: self.header_read_timeout_secs,
                keepalive_idle_secs: self.keepalive_idle_secs,
                body_idle_timeout_secs: self.body_idle_timeout_secs,
                send_timeout_secs: self.send_timeout_secs,
                max_connections: self.max_connections,
            },
            tls,
            cluster_tls,
            request_log: self.request_log_level,
            lifecycle,
            stats: crate::telemetry::stored::Settings {
                interval_secs: self.stats_scan_secs,
            },
            job_pace,
            sha1_collision_detection: self.sha1_collision_detection.is_on(),
        })
    }

    /// `--ref-deadline-ms`, at least [`REF_DEADLINE_MS_MIN`].
    fn ref_deadline_ms(&self) -> Result<u64, String> {
        let ms = self.ref_deadline_ms;
        if ms < REF_DEADLINE_MS_MIN {
            return Err(format!(
                "--ref-deadline-ms must be at least {REF_DEADLINE_MS_MIN} (got {ms})"
            ));
        }
        Ok(ms)
    }

    /// `--replication-factor`, within 1..=[`meta::raft::REPLICATION_FACTOR_MAX`].
    fn replication_factor(&self) -> Result<u64, String> {
        let rf = self.replication_factor;
        let max = meta::raft::REPLICATION_FACTOR_MAX;
        if !(1..=max).contains(&rf) {
            return Err(format!(
                "--replication-factor must be within 1..={max} (got {rf})"
            ));
        }
        Ok(rf)
    }

    /// The metadata group with `peers`, which needs `node_id` and the cluster secret (the
    /// environment, then `[cluster]`, then the top level); without, the single node.
    fn cluster(
        &self,
        file: &FileConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<ClusterConfig>, String> {
        let Some(peers) = &self.peers else {
            if self.node_id.is_some() {
                return Err("--node-id needs --peers (the voters of the group)".into());
            }
            return Ok(None);
        };
        let peers = parse_peers(peers)?;
        let node_id = self
            .node_id
            .ok_or("--peers needs --node-id (this node's id)")?;
        let secret_env = crate::api::cluster::CLUSTER_SECRET_ENV;
        let section = file.cluster.as_ref().and_then(|c| c.cluster_secret.clone());
        let secret = env(secret_env)
            .filter(|s| !s.is_empty())
            .or(section)
            .or(file.cluster_secret.clone())
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                format!(
                    "a cluster node needs the shared secret in {secret_env} (or cluster_secret in \
                     the config file)"
                )
            })?;
        let election_timeout_ms = self.election_timeout_ms;
        if !ELECTION_TIMEOUT_MS_RANGE.contains(&election_timeout_ms) {
            return Err(format!(
                "--election-timeout-ms must be within {}..={} (got {election_timeout_ms})",
                ELECTION_TIMEOUT_MS_RANGE.start(),
                ELECTION_TIMEOUT_MS_RANGE.end()
            ));
        }
        Ok(Some(ClusterConfig {
            node_id,
            peers,
            secret,
            snapshot_logs: self.snapshot_logs,
            election_timeout_ms,
            reconcile_grace_ms: self.reconcile_grace_ms,
            ref_deadline_ms: self.ref_deadline_ms()?,
            crash_point: crash_point(env)?,
            replication_factor: self.replication_factor()?,
            split_page_rows: meta::handoff::ROWS_MAX,
            group_split_files: self.group_split_files,
            group_split_objects: self.group_split_objects,
            group_split_ops: self.group_split_ops,
            split_rate_window_ms: meta::raft::SPLIT_RATE_WINDOW_MS_DEFAULT,
            rebalance: !self.no_rebalance,
        }))
    }

    /// Cluster TLS with `cluster_ca`, `cluster_cert` and `cluster_key` (all three or none),
    /// for a cluster node only.
    pub fn cluster_tls(&self) -> Result<Option<ClusterTlsFiles>, String> {
        let files = match (&self.cluster_ca, &self.cluster_cert, &self.cluster_key) {
            (None, None, None) => return Ok(None),
            (Some(ca), Some(cert), Some(key)) => ClusterTlsFiles {
                ca: ca.clone(),
                cert: cert.clone(),
                key: key.clone(),
            },
            _ => {
                return Err(
                    "--cluster-ca, --cluster-cert and --cluster-key go together (all three or none)"
                        .into(),
                );
            }
        };
        if self.peers.is_none() {
            return Err("--cluster-ca needs --peers (TLS between the nodes of a cluster)".into());
        }
        Ok(Some(files))
    }

    /// HTTPS with both `tls_cert` and `tls_key`, plain HTTP with neither. In a cluster only
    /// with cluster TLS: without it, the peers reach each other over plain HTTP on this
    /// same port, which TLS would close to them.
    fn tls(&self) -> Result<Option<TlsFiles>, String> {
        let (cert, key) = match (&self.tls_cert, &self.tls_key) {
            (None, None) => return Ok(None),
            (Some(cert), Some(key)) => (cert.clone(), key.clone()),
            (Some(_), None) => {
                return Err("--tls-cert needs --tls-key (the certificate's private key)".into());
            }
            (None, Some(_)) => {
                return Err("--tls-key needs --tls-cert (the certificate chain)".into());
            }
        };
        if self.peers.is_some() && self.cluster_ca.is_none() {
            return Err(
                "--tls-cert with --peers needs cluster TLS (--cluster-ca, --cluster-cert, \
                 --cluster-key): without it the nodes reach each other on this port over \
                 plain HTTP"
                    .into(),
            );
        }
        Ok(Some(TlsFiles { cert, key }))
    }

    /// The TLS client of `https://` disks: `--storage-ca`, with `--storage-cert` and
    /// `--storage-key` both or neither; none without a CA.
    pub fn storage_tls(&self) -> Result<Option<StorageTls>, String> {
        StorageTls::from_settings(
            self.storage_ca.as_deref(),
            self.storage_cert.as_deref(),
            self.storage_key.as_deref(),
        )
    }

    fn job_pace(&self) -> Result<JobPace, String> {
        let chunk_keys_max = meta::jobs::CHUNK_KEYS_MAX;
        if !(1..=chunk_keys_max).contains(&self.job_chunk_keys) {
            return Err(format!("--job-chunk-keys must be 1 to {chunk_keys_max}"));
        }
        Ok(JobPace {
            chunk_keys: self.job_chunk_keys,
            pause: std::time::Duration::from_millis(self.job_pause_ms),
        })
    }

    fn lifecycle(&self) -> Result<crate::lifecycle::Settings, String> {
        if self.lifecycle_day_secs == 0 {
            return Err("--lifecycle-day-secs must be at least 1".into());
        }
        Ok(crate::lifecycle::Settings {
            day_secs: self.lifecycle_day_secs,
            upload_max_age_secs: self.upload_max_age_secs,
            ..crate::lifecycle::Settings::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[derive(clap::Parser)]
    struct Command {
        #[command(flatten)]
        flags: Flags,
    }

    fn flags(args: &[&str]) -> Flags {
        Command::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{e}"))
            .flags
    }

    fn file(text: &str) -> FileConfig {
        toml::from_str(text).unwrap_or_else(|e| panic!("{e}"))
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn a_flag_wins_over_the_file_which_wins_over_the_default() {
        let file = file(
            "max_object_bytes = 2000\nregion = \"eu\"\nrequest_log_level = \"warn\"\n\
             [cluster]\nsnapshot_logs = 7\nelection_timeout_ms = 900\nreplication_factor = 5\n\
             [valkyrie]\ngrace_secs = 600\nquarantine_secs = 700",
        );
        let flagged = flags(&[
            "--max-object-bytes",
            "1000",
            "--snapshot-logs",
            "5",
            "--grace-secs",
            "400",
            "--request-log-level",
            "off",
        ]);
        let s = Settings::resolve(&flagged, &file);
        let d = Settings::default();
        // Top level, [cluster] and [valkyrie]: the flag, else the file, else the default.
        assert_eq!((s.max_object_bytes, s.region.as_str()), (1000, "eu"));
        assert_eq!(s.memory_stage_bytes, d.memory_stage_bytes);
        assert_eq!((s.snapshot_logs, s.election_timeout_ms), (5, 900));
        assert_eq!(s.replication_factor, 5);
        assert_eq!((s.grace_secs, s.quarantine_secs), (400, 700));
        assert_eq!(s.slave_delay_secs, d.slave_delay_secs);
        assert_eq!(s.request_log_level, RequestLogLevel::Off);
        // Without flags, the file; without either, the defaults.
        let s = Settings::resolve(&Flags::default(), &file);
        assert_eq!(
            (s.max_object_bytes, s.snapshot_logs, s.grace_secs),
            (2000, 7, 600)
        );
        assert_eq!(s.request_log_level, RequestLogLevel::Warn);
        assert_eq!(
            Settings::resolve(&Flags::default(), &FileConfig::default()),
            d
        );
        assert_eq!(d.data, PathBuf::from("./data"));
        assert_eq!(d.listen, SocketAddr::from(([127, 0, 0, 1], 9000)));
        assert_eq!((d.region.as_str(), d.choice_root), ("us-east-1", 2));
        assert_eq!(d.max_object_bytes, 5 << 30);
        assert_eq!(d.quarantine_secs, 7 * 86_400);
        assert_eq!((d.snapshot_logs, d.election_timeout_ms), (20_000, 500));
        assert_eq!(d.replication_factor, 3);
        assert_eq!(d.group_split_files, 5_000_000_000);
        assert_eq!(d.group_split_objects, 1_000_000_000);
        assert_eq!(d.group_split_ops, 2_000);
        assert_eq!((d.job_chunk_keys, d.job_pause_ms), (200, 5));
    }

    #[test]
    fn a_switch_flag_can_only_turn_a_setting_on() {
        let on = file("any_region = true\nmetrics_open = false");
        // Absent, the flag leaves the file's value in force.
        let s = Settings::resolve(&flags(&[]), &on);
        assert!(s.any_region && !s.metrics_open);
        let s = Settings::resolve(&flags(&["--metrics-open"]), &on);
        assert!(s.any_region && s.metrics_open);
        assert!(!Settings::default().any_region && !Settings::default().metrics_open);
        // It takes no value, as a plain switch.
        assert!(Command::try_parse_from(["serve", "--any-region=false"]).is_err());
        let s = Settings::resolve(&flags(&["--sha1-collision-detection", "off"]), &on);
        assert_eq!(s.sha1_collision_detection, Switch::Off);
    }

    #[test]
    fn a_setting_without_default_stays_unset_unless_given() {
        let d = Settings::default();
        assert_eq!((d.domain, d.peers, d.node_id), (None, None, None));
        let f = file("domain = \"a.example\"\n[cluster]\npeers = \"1=a:1\"\nnode_id = 1");
        let s = Settings::resolve(&flags(&["--domain", "b.example"]), &f);
        assert_eq!(s.domain.as_deref(), Some("b.example"));
        assert_eq!((s.peers.as_deref(), s.node_id), (Some("1=a:1"), Some(1)));
    }

    #[test]
    fn secrets_come_from_the_environment_then_the_file() {
        let f = file(
            "admin_token = \"file\"\nnative_token = \"\"\ncluster_secret = \"top\"\n\
             [cluster]\npeers = \"1=a:1\"\nnode_id = 1",
        );
        let env = |name: &str| {
            (name == crate::api::native::NATIVE_TOKEN_ENV
                || name == crate::api::cluster::CLUSTER_SECRET_ENV)
                .then(|| "env".to_owned())
        };
        let c = Settings::resolve(&Flags::default(), &f)
            .server_config(&f, &env)
            .unwrap();
        assert_eq!(c.admin_token.as_deref(), Some("file"));
        assert_eq!(c.native_token.as_deref(), Some("env"));
        assert_eq!(c.internal.metrics_token, None);
        assert_eq!(c.cluster.unwrap().secret, "env");
        let c = Settings::resolve(&Flags::default(), &f)
            .server_config(&f, &no_env)
            .unwrap();
        assert_eq!(
            (c.native_token, c.cluster.unwrap().secret),
            (None, "top".to_owned())
        );
    }

    #[test]
    fn cluster_tls_comes_from_the_cluster_section_and_opens_tls_cert_to_a_cluster() {
        let f = file(
            "tls_cert = \"s3.crt\"\ntls_key = \"s3.key\"\n[cluster]\npeers = \"1=a:1\"\n\
             node_id = 1\ncluster_ca = \"ca.crt\"\ncluster_cert = \"tls.crt\"\n\
             cluster_key = \"tls.key\"",
        );
        let config = Settings::resolve(&flags(&["--cluster-key", "other.key"]), &f)
            .server_config(&f, &|name: &str| {
                (name != CRASH_POINT_ENV).then(|| "secret".to_owned())
            })
            .unwrap();
        let want = ClusterTlsFiles {
            ca: "ca.crt".into(),
            cert: "tls.crt".into(),
            key: "other.key".into(),
        };
        assert_eq!(config.cluster_tls, Some(want));
        assert!(config.tls.is_some());
    }

    #[test]
    fn the_reference_deadline_and_a_crash_point_reach_the_cluster_config() {
        let f = file(
            "[cluster]\npeers = \"1=a:1\"\nnode_id = 1\nref_deadline_ms = 4000\n\
             reconcile_grace_ms = 500",
        );
        let env = |point: &'static str| {
            move |name: &str| match name {
                crate::api::cluster::CLUSTER_SECRET_ENV => Some("s".to_owned()),
                CRASH_POINT_ENV => Some(point.to_owned()),
                _ => None,
            }
        };
        let c = Settings::resolve(&Flags::default(), &f)
            .server_config(&f, &env("after-ref-inc"))
            .unwrap();
        let cluster = c.cluster.unwrap();
        assert_eq!(
            (cluster.ref_deadline_ms, cluster.reconcile_grace_ms),
            (4000, 500)
        );
        assert_eq!(cluster.crash_point, Some(CrashPoint::AfterRefInc));
        let d = Settings::resolve(&Flags::default(), &file("")).server_config(&file(""), &no_env);
        let d = d.unwrap();
        assert_eq!(
            (d.ref_deadline_ms, d.reconcile_grace_ms, d.crash_point),
            (300_000, 60_000, None)
        );
        let bad = Settings::resolve(&Flags::default(), &f).server_config(&f, &env("later"));
        assert!(
            bad.unwrap_err()
                .starts_with("GATEWAY_CRASH_POINT: unknown crash point")
        );
    }

    #[test]
    fn bad_values_are_refused_with_the_flag_named() {
        let error = |args: &[&str], text: &str| {
            let f = file(text);
            let secret = |name: &str| {
                (name == crate::api::cluster::CLUSTER_SECRET_ENV).then(|| "secret".to_owned())
            };
            Settings::resolve(&flags(args), &f)
                .server_config(&f, &secret)
                .unwrap_err()
        };
        assert_eq!(
            error(&["--ref-deadline-ms", "999"], ""),
            "--ref-deadline-ms must be at least 1000 (got 999)"
        );
        assert_eq!(
            error(&["--node-id", "1"], ""),
            "--node-id needs --peers (the voters of the group)"
        );
        assert_eq!(
            error(&[], "[cluster]\npeers = \"1=a:1\""),
            "--peers needs --node-id (this node's id)"
        );
        assert!(
            error(
                &[
                    "--peers",
                    "1=a:1",
                    "--node-id",
                    "1",
                    "--election-timeout-ms",
                    "10"
                ],
                ""
            )
            .starts_with("--election-timeout-ms must be within 50..=60000")
        );
        for (flag, file) in [
            (["--replication-factor", "0"], ""),
            (
                ["--snapshot-logs", "5"],
                "[cluster]\nreplication_factor = 8",
            ),
        ] {
            assert!(
                error(&flag, file).starts_with("--replication-factor must be within 1..=7"),
                "{flag:?} {file}"
            );
        }
        assert_eq!(
            error(&["--job-chunk-keys", "0"], ""),
            "--job-chunk-keys must be 1 to 1000"
        );
        assert_eq!(
            error(&[], "lifecycle_day_secs = 0"),
            "--lifecycle-day-secs must be at least 1"
        );
        assert!(error(&["--grace-secs", "1"], "").contains("grace_secs = 1"));
        assert_eq!(
            error(&["--tls-cert", "c.pem"], ""),
            "--tls-cert needs --tls-key (the certificate's private key)"
        );
        assert_eq!(
            error(&[], "tls_key = \"k.pem\""),
            "--tls-key needs --tls-cert (the certificate chain)"
        );
        assert!(
            error(
                &["--tls-cert", "c.pem", "--peers", "1=a:1", "--node-id", "1"],
                "tls_key = \"k.pem\""
            )
            .starts_with("--tls-cert with --peers needs cluster TLS")
        );
        assert!(
            error(&["--cluster-ca", "ca.pem", "--cluster-cert", "c.pem"], "")
                .starts_with("--cluster-ca, --cluster-cert and --cluster-key go together")
        );
        assert!(
            error(
                &[],
                "[cluster]\ncluster_ca = \"a\"\ncluster_cert = \"b\"\ncluster_key = \"c\""
            )
            .starts_with("--cluster-ca needs --peers")
        );
        let f = file("[cluster]\npeers = \"1=a:1\"\nnode_id = 1");
        let e = Settings::resolve(&Flags::default(), &f)
            .server_config(&f, &no_env)
            .unwrap_err();
        assert_eq!(
            e,
            "a cluster node needs the shared secret in GATEWAY_CLUSTER_SECRET (or \
             cluster_secret in the config file)"
        );
    }
}
