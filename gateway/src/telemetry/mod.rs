//! What the gateway tells its operators about itself: `/_metrics` (Prometheus) and
//! `/_status` (an HTML page), both rendered from one [`snapshot::Snapshot`].
//!
//! - [`requests`]: S3 request counters and latency histograms, fed per request;
//! - [`stored`]: logical against physical bytes and the other stored counts, from a
//!   bounded periodic scan, cached;
//! - [`recent_errors`]: a bounded ring of the last server-side failures;
//! - [`snapshot`]: one read of all of it (and of pairs, Valkyrie, UNMOVE, Raft);
//! - [`exposition`] and [`status_page`]: the two renderings.

pub mod exposition;
pub mod recent_errors;
pub mod requests;
pub mod snapshot;
pub mod status_page;
pub mod stored;

use std::sync::Arc;

/// The shared live state of the telemetry, one per process (in `AppState`).
#[derive(Debug, Default)]
pub struct Telemetry {
    pub requests: requests::RequestMetrics,
    pub errors: recent_errors::RecentErrors,
    pub stats: Arc<stored::StatsCache>,
}
