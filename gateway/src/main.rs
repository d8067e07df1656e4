//! `gateway`: the command line. Parsing and wiring only; the logic is in the library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
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
    Serve {
        /// Data folder: meta.redb, credentials, disk0/ and disk1/.
        #[arg(long, default_value = "./data")]
        data: PathBuf,
        /// Address to listen on (port 0 picks a free port; the chosen one is printed).
        #[arg(long, default_value = "127.0.0.1:9000")]
        listen: SocketAddr,
        /// Region reported to clients; any region is accepted in signatures.
        #[arg(long, default_value = "us-east-1")]
        region: String,
        /// Largest object a single PUT may store, in bytes.
        #[arg(long, default_value_t = 5 * 1024 * 1024 * 1024)]
        max_object_bytes: u64,
        /// n of the n-th root of free space that weights the pair choice.
        #[arg(long, default_value_t = 2)]
        choice_root: u32,
    },
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
    let result = match cli.command {
        Cmd::Serve {
            data,
            listen,
            region,
            max_object_bytes,
            choice_root,
        } => {
            let config = Config {
                data_dir: data,
                listen,
                region,
                limits: Limits {
                    object_bytes_max: max_object_bytes,
                    ..Limits::default()
                },
                choice_root,
                admin_token: std::env::var(gateway::admin::ADMIN_TOKEN_ENV)
                    .ok()
                    .filter(|t| !t.is_empty()),
                native_token: std::env::var(gateway::native::NATIVE_TOKEN_ENV)
                    .ok()
                    .filter(|t| !t.is_empty()),
            };
            runtime.block_on(server::serve(config))
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
