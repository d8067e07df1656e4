//! The worker: one per disk, running the deletion loop and the scrub loop side by side
//! until its [`Shutdown`] fires.
//!
//! In-process (`gateway serve`):
//!
//! ```no_run
//! # async fn f<C: valkyrie::Catalog + 'static>(catalog: C, peer: placement::Disk) -> Result<(), valkyrie::ValkyrieError> {
//! use std::sync::Arc;
//! use valkyrie::{Clock, Settings, Shutdown, Worker, WorkerConfig};
//! let config = WorkerConfig {
//!     root: "/srv/disk0".into(),
//!     pair: placement::PairId(0),
//!     index: 0,
//!     peer,
//!     settings: Settings::default(),
//! };
//! let worker = Arc::new(Worker::new(catalog, config, Clock::system())?);
//! let (stop, shutdown) = Shutdown::channel();
//! let task = tokio::spawn({
//!     let worker = worker.clone();
//!     async move { worker.run(shutdown).await }
//! });
//! // ... worker.metrics().snapshot().to_json() ...
//! let _ = stop.send(true);
//! let _ = task.await;
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use placement::disk::LocalDisk;
use placement::{Disk, DiskRef, PairId, Sha1};

use crate::catalog::Catalog;
use crate::clock::{Clock, Shutdown};
use crate::error::ValkyrieError;
use crate::metrics::Metrics;
use crate::rate::RateLimiter;
use crate::settings::Settings;

/// Bytes the scrubber may read at once before the rate limiter makes it wait; one read
/// chunk of a local disk is 256 KiB, so this is a handful of chunks.
const SCRUB_BURST_BYTES: u64 = 1024 * 1024;

/// Where a worker runs and what it is told.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// This worker's own disk: a local directory.
    pub root: PathBuf,
    /// The pair the disk belongs to.
    pub pair: PairId,
    /// Which disk of the pair this is, 0 or 1: with the sha1's first bit it says whether
    /// this worker is the master for a file.
    pub index: usize,
    /// The other disk of the pair, local or WebDAV.
    pub peer: Disk,
    pub settings: Settings,
}

/// One disk's Valkyrie.
pub struct Worker<C> {
    pub(crate) catalog: C,
    pub(crate) root: PathBuf,
    /// The own disk as a [`Disk`], for placement's temp-then-rename protocol.
    pub(crate) own: Disk,
    pub(crate) pair: PairId,
    pub(crate) index: usize,
    pub(crate) peer: Disk,
    pub(crate) settings: Settings,
    pub(crate) clock: Clock,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) limiter: RateLimiter,
    /// False while the pair is READ_ONLY: no copies are written to the peer then.
    pub(crate) peer_writable: AtomicBool,
}

impl<C: Catalog> Worker<C> {
    pub fn new(catalog: C, config: WorkerConfig, clock: Clock) -> Result<Self, ValkyrieError> {
        if config.index > 1 {
            return Err(ValkyrieError::Config(format!(
                "disk index {} (a pair has disks 0 and 1)",
                config.index
            )));
        }
        let settings = config.settings.sanitized();
        let own = Disk::Local(LocalDisk::new(
            DiskRef::local(&config.root),
            config.root.clone(),
        ));
        Ok(Worker {
            catalog,
            limiter: RateLimiter::new(settings.scrub_bytes_per_sec, SCRUB_BURST_BYTES),
            root: config.root,
            own,
            pair: config.pair,
            index: config.index,
            peer: config.peer,
            settings,
            clock,
            metrics: Arc::new(Metrics::new()),
            peer_writable: AtomicBool::new(true),
        })
    }

    /// The live counters; `metrics().snapshot()` for a consistent copy.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn pair(&self) -> PairId {
        self.pair
    }

    pub fn index(&self) -> usize {
        self.index
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Whether this disk is the master for `sha1` (the sha1's first bit is its index).
    pub fn is_master(&self, sha1: &Sha1) -> bool {
        sha1.master_disk() == self.index
    }

    /// Runs both loops until `shutdown` fires; each loop stops at its next batch boundary.
    pub async fn run(&self, shutdown: Shutdown) {
        tracing::info!(disk = %self.root.display(), pair = %self.pair, index = self.index, "valkyrie worker started");
        tokio::join!(self.deletion_loop(&shutdown), self.scrub_loop(&shutdown));
        tracing::info!(disk = %self.root.display(), "valkyrie worker stopped");
    }

    async fn deletion_loop(&self, shutdown: &Shutdown) {
        let pause = Duration::from_secs(self.settings.deletion_interval_secs);
        while !shutdown.is_set() {
            let report = self.deletion_pass(shutdown).await;
            tracing::debug!(disk = %self.root.display(), ?report, "deletion pass");
            if shutdown.sleep(pause).await {
                break;
            }
        }
    }

    async fn scrub_loop(&self, shutdown: &Shutdown) {
        while !shutdown.is_set() {
            let started = self.clock.now_secs();
            let report = self.scrub_pass(shutdown).await;
            tracing::info!(disk = %self.root.display(), ?report, "scrub pass");
            let took = self.clock.now_secs().saturating_sub(started);
            let pause = self
                .settings
                .scrub_interval_secs
                .saturating_sub(took)
                .max(1);
            if shutdown.sleep(Duration::from_secs(pause)).await {
                break;
            }
        }
    }

    /// Counts and logs a failed operation; the loop goes on.
    pub(crate) fn failed(&self, what: &str, sha1: Option<Sha1>, error: &ValkyrieError) {
        Metrics::inc(&self.metrics.errors);
        match sha1 {
            Some(sha1) => {
                tracing::warn!(disk = %self.root.display(), %sha1, error = %error, "{what} failed")
            }
            None => tracing::warn!(disk = %self.root.display(), error = %error, "{what} failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::Rig;

    fn assert_send<T: Send>(_: &T) {}

    #[tokio::test]
    async fn run_passes_until_shutdown_and_is_spawnable() {
        let rig = Rig::new().await;
        let worker = Arc::new(rig.worker(0));
        let (stop, shutdown) = Shutdown::channel();
        let fut = {
            let worker = worker.clone();
            async move { worker.run(shutdown).await }
        };
        assert_send(&fut);
        let task = tokio::spawn(fut);
        for _ in 0..200 {
            if worker.metrics().snapshot().passes_done > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(worker.metrics().snapshot().passes_done > 0);
        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("worker stops on shutdown")
            .unwrap();
    }

    #[tokio::test]
    async fn an_index_past_one_is_refused() {
        let rig = Rig::new().await;
        let mut config = rig.config(0);
        config.index = 2;
        assert!(Worker::new(rig.catalog.clone(), config, rig.clock.clock()).is_err());
    }
}
