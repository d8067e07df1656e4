//! Log setup shared by the `valkyrie` and `gateway` binaries: one place decides how a log
//! line looks, so both fit the same destinations.
//!
//! Lines go to stderr. Colour codes are written only when stderr is a terminal: in a file,
//! a pipe or a container's log they would be noise that every reader has to strip. `json`
//! writes one JSON object per line for log shippers. `RUST_LOG` chooses what is logged
//! (default `info`).

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;

/// `--log-format`: how each log line is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (coloured on a terminal only).
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the process's log subscriber; call once, first thing after parsing arguments.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        // Fields at the top level (not under "fields"): what shippers index directly.
        LogFormat::Json => builder.json().flatten_event(true).with_ansi(false).init(),
    }
}
