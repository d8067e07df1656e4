//! A worker's counters: plain atomics, read as one [`MetricsSnapshot`] that serializes to
//! JSON (the binary's SIGUSR1 dump, the gateway's admin API). The gateway exports them to
//! Prometheus through its own registry (`gateway/src/telemetry/exposition.rs`).
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Live counters of one worker. Every field only grows, except the scrub-progress pair
/// (`pass_started_secs`, `pass_files_done`), which restarts with each pass.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Names visited by the scrubber (content, quarantined, temp, unknown).
    pub files_scanned: AtomicU64,
    /// Bytes read and found to hash to their name.
    pub bytes_verified: AtomicU64,
    /// Copies rewritten: a corrupt local copy replaced from the peer, or a missing or
    /// wrong-size peer copy uploaded.
    pub repaired: AtomicU64,
    /// Content files renamed to `<sha1>.deleted.<ts>`.
    pub quarantined: AtomicU64,
    /// Quarantined files deleted for good after `quarantine_secs`.
    pub deleted: AtomicU64,
    /// Verified duplicates of content recorded on another pair, removed.
    pub junk_removed: AtomicU64,
    /// Abandoned uploads under `tmp/` removed.
    pub temp_removed: AtomicU64,
    /// Quarantined copies renamed back because their content is live on this pair.
    pub restored: AtomicU64,
    /// `deleting` entries this worker removed from the catalog.
    pub deleting_removed: AtomicU64,
    /// Failures of any kind (catalog, disk, corrupt copies); each is also logged.
    pub errors: AtomicU64,
    /// Scrub passes finished.
    pub passes_done: AtomicU64,
    /// Unix seconds at which the current (or last) scrub pass started.
    pub pass_started_secs: AtomicU64,
    /// Names visited in the current (or last) scrub pass.
    pub pass_files_done: AtomicU64,
    /// Names visited by the last completed pass: the expected length of the current one,
    /// for progress bars and ETAs (0 before the first pass completes).
    pub last_pass_files: AtomicU64,
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricsSnapshot {
    pub files_scanned: u64,
    pub bytes_verified: u64,
    pub repaired: u64,
    pub quarantined: u64,
    pub deleted: u64,
    pub junk_removed: u64,
    pub temp_removed: u64,
    pub restored: u64,
    pub deleting_removed: u64,
    pub errors: u64,
    pub passes_done: u64,
    pub pass_started_secs: u64,
    pub pass_files_done: u64,
    /// Absent from the JSON of older workers: 0.
    #[serde(default)]
    pub last_pass_files: u64,
}

impl Metrics {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        MetricsSnapshot {
            files_scanned: get(&self.files_scanned),
            bytes_verified: get(&self.bytes_verified),
            repaired: get(&self.repaired),
            quarantined: get(&self.quarantined),
            deleted: get(&self.deleted),
            junk_removed: get(&self.junk_removed),
            temp_removed: get(&self.temp_removed),
            restored: get(&self.restored),
            deleting_removed: get(&self.deleting_removed),
            errors: get(&self.errors),
            passes_done: get(&self.passes_done),
            pass_started_secs: get(&self.pass_started_secs),
            pass_files_done: get(&self.pass_files_done),
            last_pass_files: get(&self.last_pass_files),
        }
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn inc(counter: &AtomicU64) {
        Self::add(counter, 1);
    }

    pub(crate) fn start_pass(&self, now_secs: u64) {
        self.pass_started_secs.store(now_secs, Ordering::Relaxed);
        self.pass_files_done.store(0, Ordering::Relaxed);
    }
}

impl MetricsSnapshot {
    pub fn to_json(&self) -> String {
        // A struct of integers always serializes.
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_serializes_to_json() {
        let m = Metrics::new();
        Metrics::add(&m.bytes_verified, 4096);
        Metrics::inc(&m.errors);
        m.start_pass(1_700_000_000);
        Metrics::inc(&m.pass_files_done);
        let s = m.snapshot();
        let json: serde_json::Value = serde_json::from_str(&s.to_json()).unwrap();
        assert_eq!(json["bytes_verified"], 4096);
        assert_eq!(json["errors"], 1);
        assert_eq!(json["pass_started_secs"], 1_700_000_000u64);
        assert_eq!(json["pass_files_done"], 1);
    }
}
