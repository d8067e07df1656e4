//! The command line of `gateway`: its arguments, and the clients behind `gateway admin ...`
//! and `gateway config example`. Part of the binary only: the server library knows nothing
//! of them. The settings of `gateway serve` are the library's ([`gateway::settings`]).
//!
//! - [`admin`]: the admin API's client (pairs, scrub, disks, cluster, jobs, backup).
//! - [`admin_keys`], [`admin_buckets`]: `gateway admin keys ...`, `... buckets ...`.
//! - [`progress`]: bars on a terminal, plain lines elsewhere, for `--watch`.
//! - [`config_example`]: the complete configuration file with its defaults.

pub mod admin;
pub mod admin_buckets;
pub mod admin_keys;
pub mod admin_tls;
pub mod config_example;
pub mod progress;

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};
use gateway::settings::{DATA_DIR_DEFAULT, Flags};
use valkyrie::logging::LogFormat;

use self::admin::{
    AdminClient, ClusterCommand, DiskCommand, GroupsCommand, JobsCommand, PairsCommand,
    ScrubCommand,
};
use self::admin_buckets::BucketsCommand;
use self::admin_keys::KeysCommand;
use self::admin_tls::TlsCommand;

#[derive(Parser)]
#[command(
    name = "gateway",
    version,
    about = "Deduplicating S3-compatible object gateway"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Cmd,
    /// How log lines on stderr are written: text (coloured only on a terminal) or json
    /// (one object per line)
    #[arg(long, global = true, value_enum, env = "GATEWAY_LOG_FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Serve the S3 API (embedded single node: metadata and one local disk pair under --data).
    Serve(Box<ServeArgs>),
    /// Check the invariants of a stopped gateway's data folder: every object's content on
    /// both disks of its pair with the right hash, every reference count exact, no file
    /// without a record outside quarantine and grace. Exit code 1 on any violation.
    Fsck {
        /// Data folder of the gateway (stop the gateway first: the database is locked).
        #[arg(long, default_value = DATA_DIR_DEFAULT)]
        data: PathBuf,
        /// Files without a record younger than this are uploads in flight, not orphans.
        #[arg(long, default_value_t = valkyrie::Settings::default().grace_secs)]
        grace_secs: u64,
        /// TLS to https:// storage nodes, as `gateway serve` has it.
        #[command(flatten)]
        storage_tls: valkyrie::storage_tls::StorageTlsArgs,
    },
    /// Start a node from a backup (`gateway admin backup FILE`): builds DIR's metadata
    /// from it (DIR must hold no metadata yet); then `gateway serve --data DIR` as before.
    Restore {
        /// The backup file.
        #[arg(long)]
        from: PathBuf,
        /// The data folder to create the node's metadata in.
        #[arg(long, default_value = DATA_DIR_DEFAULT)]
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
        /// The gateway's address: http://HOST:PORT, or https://HOST:PORT when it serves TLS
        /// (--tls-cert), on its S3 port or its --admin-listen port.
        #[arg(long, default_value = "http://127.0.0.1:9000")]
        endpoint: String,
        /// An https:// endpoint: the CA bundle (PEM) its certificate must chain to, and the
        /// only CAs trusted then. Without it: the system's trusted CAs.
        #[arg(long, env = admin::ADMIN_CA_ENV, value_name = "FILE")]
        ca: Option<PathBuf>,
        #[command(subcommand)]
        command: AdminCmd,
    },
}

#[derive(clap::Args)]
pub struct ServeArgs {
    /// TOML configuration file; command-line flags win over it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub flags: Flags,
}

#[derive(Subcommand)]
pub enum AdminCmd {
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
    /// The metadata groups: `list` (each group's kind, leader, replicas, records, ranges).
    Groups {
        #[command(subcommand)]
        command: GroupsCommand,
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
    /// Cluster TLS files, made here (no gateway is asked): `ca` (a cluster CA), `node` (a
    /// node certificate it signs).
    Tls {
        #[command(subcommand)]
        command: TlsCommand,
    },
}

impl AdminCmd {
    /// Runs the command against the gateway at `endpoint` (an https:// one checked against
    /// `ca`, else the system's CAs); the text to print.
    pub async fn run(
        self,
        endpoint: &str,
        ca: Option<&Path>,
        token: Option<String>,
    ) -> Result<String, String> {
        // Made here: no gateway is asked (one may not be running yet).
        let command = match self {
            AdminCmd::Tls { command } => return command.run(),
            other => other,
        };
        let client = AdminClient::new(endpoint, ca, token).map_err(|e| e.to_string())?;
        match command {
            AdminCmd::Pairs { command } => client.pairs(command).await,
            AdminCmd::Scrub { command } => client.scrub(command).await,
            AdminCmd::Disk { command } => client.disk(command).await,
            AdminCmd::Cluster { command } => client.cluster(command).await,
            AdminCmd::Groups { command } => client.groups(command).await,
            AdminCmd::Keys { command } => client.keys(command).await,
            AdminCmd::Jobs { command } => client.jobs(command).await,
            AdminCmd::Buckets { command } => client.buckets(command).await,
            AdminCmd::Backup { file } => {
                let n = client.backup(&file).await?;
                Ok(format!("wrote {} ({n} bytes)\n", file.display()))
            }
            // Answered above, before the client.
            AdminCmd::Tls { command } => command.run(),
        }
    }
}

#[derive(Subcommand)]
pub enum ConfigCmd {
    /// Print a complete configuration file (TOML) with every setting and its default.
    Example,
}
