//! Valkyrie inside `gateway serve`: one worker per local disk, and UNMOVE of failed disks.
//!
//! Remote disks (WebDAV) get their workers from the `valkyrie` binary beside the storage
//! node, talking to `/_catalog/`; this module only runs what the gateway can see as a
//! local directory.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use placement::{PairFlags, PairId};
use valkyrie::{
    Clock, Metrics, Settings, Shutdown, UnmoveOptions, UnmoveProgress, UnmoveTracker, Worker,
    WorkerConfig,
};

use crate::catalog::LocalCatalog;
use crate::store::ObjectStore;
use meta::Command;

/// Left on the surviving disk by [`Workers::fail_disk`] before the pair is marked DRAINING:
/// UNMOVE saves its first progress only after counting every file of the survivor, and a
/// restart before that must still know which disk survived.
const SURVIVOR_MARK: &str = "unmove.survivor";

/// Writes [`SURVIVOR_MARK`] (the failed disk's ref) on a surviving local disk, durably.
fn mark_survivor(root: &Path, failed: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::File::create(root.join(SURVIVOR_MARK))?;
    f.write_all(format!("{failed}\n").as_bytes())?;
    f.sync_all()?;
    std::fs::File::open(root)?.sync_all()
}

/// One running worker, for the admin view.
#[derive(Clone)]
pub struct WorkerInfo {
    pub pair: PairId,
    pub index: usize,
    pub disk: String,
    pub metrics: Arc<Metrics>,
}

/// The workers and drains of this process.
///
/// In a cluster they run only on the leader, so that each disk has exactly one active
/// worker: [`Workers::stop`] ends them when this node stops leading, and `ensure` /
/// `resume_drains` start them again (with a fresh shutdown signal) when it leads again.
pub struct Workers {
    settings: Settings,
    enabled: bool,
    /// The trigger and signal of the workers started since the last stop.
    signal: Mutex<(tokio::sync::watch::Sender<bool>, Shutdown)>,
    running: Mutex<BTreeMap<(PairId, usize), WorkerInfo>>,
    drains: Mutex<BTreeMap<PairId, Arc<UnmoveTracker>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    #[error("no pair has the disk {0}")]
    UnknownDisk(String),
    #[error("the surviving disk {0} is not local: run `valkyrie --unmove` beside it")]
    RemoteSurvivor(String),
    #[error("{0}")]
    Store(String),
}

impl Workers {
    pub fn new(settings: Settings, enabled: bool) -> Self {
        let signal = Shutdown::channel();
        Workers {
            settings,
            enabled,
            signal: Mutex::new(signal),
            running: Mutex::new(BTreeMap::new()),
            drains: Mutex::new(BTreeMap::new()),
        }
    }

    /// Starts a worker for every local disk that has none yet (at start, and after a
    /// pair is added).
    pub fn ensure(&self, store: &Arc<ObjectStore>) {
        if !self.enabled {
            return;
        }
        let table = store.pair_table();
        for id in table.ids() {
            let Some(entry) = table.get(id) else { continue };
            for index in 0..2 {
                let Some(root) = entry.record.disks[index].local_path() else {
                    continue;
                };
                let mut running = lock(&self.running);
                if running.contains_key(&(id, index)) {
                    continue;
                }
                let config = WorkerConfig {
                    root: root.to_path_buf(),
                    pair: id,
                    index,
                    peer: entry.disks[1 - index].clone(),
                    settings: self.settings.clone(),
                };
                match Worker::new(LocalCatalog::new(store.clone()), config, Clock::system()) {
                    Ok(worker) => {
                        let worker = Arc::new(worker);
                        running.insert(
                            (id, index),
                            WorkerInfo {
                                pair: id,
                                index,
                                disk: entry.record.disks[index].to_string(),
                                metrics: worker.metrics(),
                            },
                        );
                        let shutdown = self.shutdown();
                        tokio::spawn(async move { worker.run(shutdown).await });
                    }
                    Err(e) => {
                        tracing::error!(pair = %id, index, error = %e, "cannot start Valkyrie worker")
                    }
                }
            }
        }
    }

    pub fn workers(&self) -> Vec<WorkerInfo> {
        lock(&self.running).values().cloned().collect()
    }

    pub fn drains(&self) -> Vec<UnmoveProgress> {
        lock(&self.drains).values().map(|t| t.snapshot()).collect()
    }

    /// The signal that workers and drains started now stop on.
    fn shutdown(&self) -> Shutdown {
        lock(&self.signal).1.clone()
    }

    /// Stops every worker and drain (they finish their current step); later `ensure`
    /// and `resume_drains` calls start new ones.
    pub fn stop(&self) {
        let old = std::mem::replace(&mut *lock(&self.signal), Shutdown::channel());
        let _ = old.0.send(true);
        lock(&self.running).clear();
        lock(&self.drains).clear();
    }

    /// Marks the pair of `disk` READ_ONLY and DRAINING and starts UNMOVE from its other
    /// disk; also used at start to resume drains of pairs still DRAINING.
    pub async fn fail_disk(
        &self,
        store: &Arc<ObjectStore>,
        disk: &str,
    ) -> Result<UnmoveProgress, DrainError> {
        let table = store.pair_table();
        let (pair, failed_index) = table
            .ids()
            .into_iter()
            .find_map(|id| {
                let e = table.get(id)?;
                e.record
                    .disks
                    .iter()
                    .position(|d| d.as_str() == disk)
                    .map(|i| (id, i))
            })
            .ok_or_else(|| DrainError::UnknownDisk(disk.to_string()))?;
        if let Some(root) = table.get(pair).and_then(|e| {
            e.record.disks[1 - failed_index]
                .local_path()
                .map(Path::to_path_buf)
        }) {
            let failed = disk.to_string();
            let shown = root.display().to_string();
            tokio::task::spawn_blocking(move || mark_survivor(&root, &failed))
                .await
                .map_err(|e| DrainError::Store(e.to_string()))?
                .map_err(|e| DrainError::Store(format!("{shown}: {e}")))?;
        }
        let cmd = Command::SetPairFlags {
            id: pair,
            set: PairFlags::READ_ONLY.with(PairFlags::DRAINING),
            clear: PairFlags::default(),
        };
        store
            .change_pair(cmd)
            .await
            .map_err(|e| DrainError::Store(e.to_string()))?;
        self.start_drain(store, pair, 1 - failed_index)
    }

    fn start_drain(
        &self,
        store: &Arc<ObjectStore>,
        pair: PairId,
        surviving: usize,
    ) -> Result<UnmoveProgress, DrainError> {
        let entry = store
            .pair_table()
            .get(pair)
            .ok_or_else(|| DrainError::UnknownDisk(pair.to_string()))?;
        let survivor = &entry.record.disks[surviving];
        let root = survivor
            .local_path()
            .ok_or_else(|| DrainError::RemoteSurvivor(survivor.to_string()))?
            .to_path_buf();
        let mut drains = lock(&self.drains);
        if let Some(t) = drains.get(&pair)
            && !t.snapshot().finished
        {
            return Ok(t.snapshot());
        }
        let tracker = Arc::new(UnmoveTracker::new());
        drains.insert(pair, tracker.clone());
        let (store, shutdown) = (store.clone(), self.shutdown());
        let options = UnmoveOptions {
            pair_choice_root: store.choice_root(),
            ..UnmoveOptions::default()
        };
        tokio::spawn(async move {
            let catalog = LocalCatalog::new(store.clone());
            let pairs = store.pair_table().clone();
            match valkyrie::drain(&catalog, &pairs, pair, &root, &tracker, &options, &shutdown)
                .await
            {
                Ok(p) if p.finished => {
                    tracing::info!(pair = %pair, relocated = p.files_relocated, failed = p.files_failed, "UNMOVE finished");
                    let cmd = Command::SetPairFlags {
                        id: pair,
                        set: PairFlags::default(),
                        clear: PairFlags::DRAINING,
                    };
                    if p.files_failed == 0
                        && let Err(e) = store.change_pair(cmd).await
                    {
                        tracing::error!(pair = %pair, error = %e, "cannot clear DRAINING");
                    }
                }
                Ok(_) => {
                    tracing::info!(pair = %pair, "UNMOVE stopped; it resumes at the next start")
                }
                Err(e) => {
                    tracing::error!(pair = %pair, error = %e, "UNMOVE failed; it resumes at the next start")
                }
            }
        });
        Ok(UnmoveProgress {
            pair: pair.0,
            ..UnmoveProgress::default()
        })
    }

    /// Resumes the drains of pairs that are still DRAINING (after a restart).
    pub fn resume_drains(&self, store: &Arc<ObjectStore>) {
        let table = store.pair_table();
        for id in table.ids() {
            let Some(e) = table.get(id) else { continue };
            if !e.record.flags.contains(PairFlags::DRAINING) {
                continue;
            }
            // The survivor is the local disk with UNMOVE's progress file or fail_disk's
            // mark; never a guess (disk 0 may be the failed one).
            let Some(surviving) = (0..2).find(|&i| {
                e.record.disks[i].local_path().is_some_and(|p| {
                    p.join(valkyrie::unmove::PROGRESS_FILE).exists()
                        || p.join(SURVIVOR_MARK).exists()
                })
            }) else {
                tracing::error!(pair = %id, "pair is DRAINING but no local disk is marked as its survivor: run `gateway admin disk fail DISK` again, or `valkyrie --unmove` beside a remote survivor");
                continue;
            };
            if let Err(err) = self.start_drain(store, id, surviving) {
                tracing::error!(pair = %id, error = %err, "cannot resume UNMOVE");
            }
        }
    }
}
