//! `gateway`: the command line. It parses the arguments ([`cli`]), resolves the settings
//! (the library's [`gateway::settings`]), runs the server or a client command, and maps
//! the outcome to an exit code. The logic is in the library and in [`cli`].

mod cli;

use std::process::ExitCode;

use clap::Parser as _;
use cli::{Cli, Cmd, ConfigCmd};
use gateway::server::connections;

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
    match run(cli.command, &runtime) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gateway: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs one command; an error is printed by the caller, a report by the command.
fn run(command: Cmd, runtime: &tokio::runtime::Runtime) -> Result<ExitCode, String> {
    let env = |name: &str| std::env::var(name).ok();
    match command {
        Cmd::Serve(args) => {
            let mut config =
                gateway::settings::serve_config(args.config.as_deref(), &args.flags, &env)?;
            connections::fit_open_files_limit(&mut config.connections);
            runtime.block_on(gateway::storage_nodes::check_https(&config.pairs))?;
            runtime
                .block_on(gateway::server::serve(config))
                .map_err(|e| e.to_string())?;
        }
        Cmd::Admin {
            endpoint,
            ca,
            command,
        } => {
            let token = gateway::config::token(env(gateway::api::admin::ADMIN_TOKEN_ENV), None);
            print!(
                "{}",
                runtime.block_on(command.run(&endpoint, ca.as_deref(), token))?
            );
        }
        Cmd::Config {
            command: ConfigCmd::Example,
        } => print!("{}", cli::config_example::text()),
        Cmd::Restore { from, data } => {
            let report = meta::raft::restore(&from, &data).map_err(|e| e.to_string())?;
            print!("{report}");
        }
        Cmd::Fsck {
            data,
            grace_secs,
            storage_tls,
        } => {
            storage_tls.install()?;
            let report = gateway::fsck::run(&data, grace_secs).map_err(|e| e.to_string())?;
            print!("{report}");
            if !report.is_clean() {
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
