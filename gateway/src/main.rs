//! `gateway`: the command line. Parsing and wiring only; the logic is in the library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use gateway::admin_client::{AdminClient, PairsCommand};
use gateway::config::FileConfig;
use gateway::server::{self, Config};
use gateway::store::Limits;

#[derive(Parser)]
#[command(
    name = "gateway",
    version,
    about = "Deduplicating S3-compatible object gateway"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve the S3 API (embedded single node: metadata and one local disk pair under --data).
    Serve(ServeArgs),
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
    /// Region reported to clients; signatures from any region are accepted [default: us-east-1]
    #[arg(long)]
    region: Option<String>,
    /// Accept virtual-hosted-style requests for `<bucket>.<domain>`
    #[arg(long)]
    domain: Option<String>,
    /// Largest object a single PUT may store, in bytes [default: 5 GiB]
    #[arg(long)]
    max_object_bytes: Option<u64>,
    /// n of the n-th root of free space that weights the pair choice [default: 2]
    #[arg(long)]
    choice_root: Option<u32>,
}

#[derive(Subcommand)]
enum AdminCmd {
    /// Disk pairs: list, add, lock, unlock, read-only, read-write.
    Pairs {
        #[command(subcommand)]
        command: PairsCommand,
    },
}

fn env_token(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|t| !t.is_empty())
}

fn serve_config(args: ServeArgs) -> Result<Config, String> {
    let file = match &args.config {
        Some(path) => FileConfig::load(path).map_err(|e| e.to_string())?,
        None => FileConfig::default(),
    };
    let defaults = Limits::default();
    Ok(Config {
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
            ..defaults
        },
        domain: args.domain.or(file.domain.clone()),
        choice_root: args.choice_root.or(file.choice_root).unwrap_or(2),
        admin_token: env_token(gateway::admin::ADMIN_TOKEN_ENV).or(file.admin_token.clone()),
        native_token: env_token(gateway::native::NATIVE_TOKEN_ENV).or(file.native_token.clone()),
        pairs: file.checked_pairs()?,
    })
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
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
        Cmd::Serve(args) => match serve_config(args) {
            Ok(config) => runtime
                .block_on(server::serve(config))
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        },
        Cmd::Admin {
            endpoint,
            command: AdminCmd::Pairs { command },
        } => {
            let token = env_token(gateway::admin::ADMIN_TOKEN_ENV);
            runtime.block_on(async {
                let client = AdminClient::new(&endpoint, token)?;
                let out = client.pairs(command).await?;
                print!("{out}");
                Ok(())
            })
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gateway: {e}");
            ExitCode::FAILURE
        }
    }
}
