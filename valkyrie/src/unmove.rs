//! UNMOVE: when a disk fails, copy everything its surviving peer holds to other pairs.
//!
//! The article: "the problematic disk is put in service (read-only) mode, while on the
//! second disk, the UNMOVE operation is run. It effectively distributes all the files on
//! disk two among other disk pairs." [`drain`] does exactly that, beside the surviving
//! disk (it reads it as a local directory):
//!
//! 1. mark the failed pair READ_ONLY (no new content lands there);
//! 2. walk the survivor in sha1 order; for every content file whose record still names
//!    the failed pair: choose another pair, stream the file to both its disks (placement's
//!    write protocol: temp names, fsync, rename), checking on the way that the bytes hash
//!    to the name, then switch the record with `relocate(sha1, failed, new)`, a command
//!    guarded by the old pair id;
//! 3. if `relocate` answers `false`, the record changed meanwhile (a `dec`, a re-upload):
//!    the new copies are junk, which the new pair's scrubber verifies and removes.
//!
//! Progress (files and bytes done out of the totals counted up front, the last sha1 done)
//! is saved every few files to `<survivor>/unmove.json` (write, fsync, rename), so a
//! restarted UNMOVE resumes after the last saved sha1. Files redone after a crash are
//! harmless: their record already names the new pair and they are skipped, so every record
//! is relocated exactly once; at worst a copy made just before the crash is left as junk.
//!
//! What it cannot do: recover content whose only good copy was on the failed disk (a
//! copy missing or corrupt on the survivor is logged and counted in `files_failed`; a
//! re-upload or a backup is the only cure), or find records whose file is missing on the
//! survivor (the catalog API has no listing by pair).
//!
//! Cost: every byte is read once here and written twice on the receiving pair; a 1 TiB
//! survivor at the default 100 MiB/s takes ~3 h. The rate bound keeps the survivor, which
//! still serves every read of its pair, responsive.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use placement::disk::LocalDisk;
use placement::pairdb::PairTable;
use placement::write::{PROBE_ATTEMPTS_MAX, PairUpload, WriteError};
use placement::{Disk, DiskError, DiskRef, PairId, Sha1};
use serde::{Deserialize, Serialize};

use crate::catalog::Catalog;
use crate::clock::{Clock, Shutdown};
use crate::error::{ValkyrieError, blocking};
use crate::layout;
use crate::pace::Pacer;
use crate::rate::RateLimiter;
use crate::walk::Walk;

/// The progress file, at the survivor's root.
pub const PROGRESS_FILE: &str = "unmove.json";
const PROGRESS_TMP_FILE: &str = "unmove.json.tmp";
const BURST_BYTES: u64 = 1024 * 1024;
/// Files copied between two yields, and between two looks at the stop signal: one, as a
/// copy may take seconds.
const FILES_PER_BATCH: usize = 1;
/// Files counted (one `stat` each) between two yields and looks at the stop signal.
const COUNT_FILES_PER_BATCH: usize = 256;

/// How UNMOVE runs.
#[derive(Debug, Clone)]
pub struct UnmoveOptions {
    /// Bound on the bytes read from the survivor per second; 0 means unlimited.
    pub bytes_per_sec: u64,
    /// The n-th root of free space that weights the choice of the receiving pair.
    pub pair_choice_root: u32,
    /// The progress file is saved after this many files (and on stop and at the end).
    pub save_every_files: u64,
    /// Attempts per file for a copy or a catalog call before the file is counted failed.
    pub attempts_max: u32,
    /// Wait before a second attempt, doubled for each next one.
    pub backoff: Duration,
    pub clock: Clock,
}

impl Default for UnmoveOptions {
    fn default() -> Self {
        UnmoveOptions {
            bytes_per_sec: 100 * 1024 * 1024,
            pair_choice_root: 2,
            save_every_files: 32,
            attempts_max: 3,
            backoff: Duration::from_secs(1),
            clock: Clock::system(),
        }
    }
}

/// Where an UNMOVE stands; also the content of the progress file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnmoveProgress {
    /// The failed pair being drained.
    pub pair: u32,
    pub started_secs: u64,
    pub updated_secs: u64,
    /// Content files (and their bytes) on the survivor when the UNMOVE started.
    pub files_total: u64,
    pub bytes_total: u64,
    /// Content files walked so far, whatever became of them.
    pub files_done: u64,
    pub bytes_done: u64,
    /// Copied and switched to another pair.
    pub files_relocated: u64,
    /// Copied, but the record changed meanwhile: the copies are junk.
    pub files_conflict: u64,
    /// Not recorded on the failed pair (already moved, junk, orphans).
    pub files_skipped: u64,
    /// Corrupt on the survivor, or no pair would take them: still on the failed pair.
    pub files_failed: u64,
    /// The last sha1 walked; a restart resumes after it.
    pub last_sha1: Option<String>,
    pub finished: bool,
    /// Seconds left at the current run's pace; not saved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_secs: Option<u64>,
}

/// The live progress of one UNMOVE, shared with whoever reports it (the admin API).
#[derive(Debug, Default)]
pub struct UnmoveTracker {
    progress: Mutex<UnmoveProgress>,
    /// When this run started and how many bytes were done then: the pace for the ETA.
    run: Mutex<Option<(Instant, u64)>>,
}

impl UnmoveTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// The progress now, with its ETA.
    pub fn snapshot(&self) -> UnmoveProgress {
        let mut p = lock(&self.progress).clone();
        if let Some((started, bytes_at_start)) = *lock(&self.run) {
            let elapsed_secs = started.elapsed().as_secs_f64();
            let run_bytes = p.bytes_done.saturating_sub(bytes_at_start) as f64;
            if !p.finished && elapsed_secs > 0.0 && run_bytes > 0.0 {
                let left = p.bytes_total.saturating_sub(p.bytes_done) as f64;
                p.eta_secs = Some((left / (run_bytes / elapsed_secs)).ceil() as u64);
            }
        }
        p
    }

    fn set(&self, progress: UnmoveProgress) {
        *lock(&self.progress) = progress;
    }

    fn update(&self, f: impl FnOnce(&mut UnmoveProgress)) -> UnmoveProgress {
        let mut p = lock(&self.progress);
        f(&mut p);
        p.clone()
    }
}

// A poisoned lock only means a panic elsewhere while updating plain numbers.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What became of one file.
enum Outcome {
    Relocated,
    Conflict,
    Skipped,
    Failed,
}

/// Drains `failed` pair: copies every file of its surviving disk (a local directory at
/// `surviving_root`) whose record still names the pair to other pairs of `pairs`, and
/// relocates the records. Resumes from `<surviving_root>/unmove.json` when an unfinished
/// run of the same pair left one. Returns the final progress; `finished` is false when
/// `shutdown` stopped it.
///
/// `pairs` is the caller's in-memory PairDB ([`pair_table`] builds one
/// from the catalog); the failed pair is never chosen, whatever its flags say there, and
/// the free space of a receiving pair is lowered in `pairs` by every file it takes.
pub async fn drain<C: Catalog>(
    catalog: &C,
    pairs: &PairTable,
    failed: PairId,
    surviving_root: &Path,
    tracker: &UnmoveTracker,
    options: &UnmoveOptions,
    shutdown: &Shutdown,
) -> Result<UnmoveProgress, ValkyrieError> {
    catalog.set_read_only(failed).await?;
    let now = options.clock.now_secs();
    let progress = match load_progress(surviving_root).await? {
        Some(p) if p.pair == failed.0 && !p.finished => {
            tracing::info!(pair = %failed, last_sha1 = ?p.last_sha1, files_done = p.files_done, "UNMOVE resumes");
            p
        }
        _ => {
            let (files_total, bytes_total) = count(surviving_root, shutdown).await?;
            let fresh = UnmoveProgress {
                pair: failed.0,
                started_secs: now,
                updated_secs: now,
                files_total,
                bytes_total,
                ..UnmoveProgress::default()
            };
            if shutdown.is_set() {
                // Totals of a half-done count are wrong: save nothing, count again next time.
                return Ok(fresh);
            }
            tracing::info!(pair = %failed, files_total, bytes_total, "UNMOVE starts");
            fresh
        }
    };
    let after: Option<Sha1> = match &progress.last_sha1 {
        Some(hex) => Some(hex.parse().map_err(|e| ValkyrieError::Progress {
            path: surviving_root.join(PROGRESS_FILE),
            message: format!("last_sha1: {e}"),
        })?),
        None => None,
    };
    save_progress(surviving_root, &progress).await?;
    *lock(&tracker.run) = Some((Instant::now(), progress.bytes_done));
    tracker.set(progress);

    let run = Run {
        catalog,
        pairs,
        failed,
        own: Disk::Local(LocalDisk::new(
            DiskRef::local(surviving_root),
            surviving_root.to_path_buf(),
        )),
        limiter: RateLimiter::new(options.bytes_per_sec, BURST_BYTES),
        options,
    };
    let mut walk = Walk::new(surviving_root);
    if let Some(after) = after {
        walk = walk.after(after);
    }
    let mut pacer = Pacer::new(FILES_PER_BATCH, shutdown);
    let mut unsaved = 0u64;
    while let Some(found) = walk.next_content().await {
        let (sha1, path) = found?;
        if !pacer.admit().await {
            let p = tracker.update(|p| p.updated_secs = options.clock.now_secs());
            save_progress(surviving_root, &p).await?;
            tracing::info!(pair = %failed, files_done = p.files_done, "UNMOVE stopped; it will resume");
            return Ok(tracker.snapshot());
        }
        let size_bytes = layout::stat(&path).await?.map_or(0, |s| s.size_bytes);
        let outcome = run.one(sha1, size_bytes).await;
        let p = tracker.update(|p| {
            p.files_done += 1;
            p.bytes_done += size_bytes;
            match outcome {
                Outcome::Relocated => p.files_relocated += 1,
                Outcome::Conflict => p.files_conflict += 1,
                Outcome::Skipped => p.files_skipped += 1,
                Outcome::Failed => p.files_failed += 1,
            }
            p.last_sha1 = Some(sha1.to_hex());
            p.updated_secs = options.clock.now_secs();
        });
        unsaved += 1;
        if unsaved >= options.save_every_files.max(1) {
            save_progress(surviving_root, &p).await?;
            unsaved = 0;
        }
    }
    let p = tracker.update(|p| {
        p.finished = true;
        p.updated_secs = options.clock.now_secs();
    });
    save_progress(surviving_root, &p).await?;
    tracing::info!(pair = %failed, relocated = p.files_relocated, conflicts = p.files_conflict,
        failed = p.files_failed, "UNMOVE finished");
    Ok(tracker.snapshot())
}

struct Run<'a, C> {
    catalog: &'a C,
    pairs: &'a PairTable,
    failed: PairId,
    own: Disk,
    limiter: RateLimiter,
    options: &'a UnmoveOptions,
}

impl<C: Catalog> Run<'_, C> {
    async fn one(&self, sha1: Sha1, size_bytes: u64) -> Outcome {
        match self
            .with_retries("lookup", sha1, || self.catalog.lookup(sha1))
            .await
        {
            Some(Some(state)) if state.pair == self.failed => {}
            Some(_) => return Outcome::Skipped,
            None => return Outcome::Failed,
        }
        let mut backoff = self.options.backoff;
        let mut new_pair = None;
        for attempt in 1..=self.options.attempts_max.max(1) {
            match self.copy(sha1, size_bytes).await {
                Ok(pair) => {
                    new_pair = Some(pair);
                    break;
                }
                Err(e @ ValkyrieError::Corrupt { .. }) => {
                    tracing::error!(%sha1, error = %e, "UNMOVE: the surviving copy is corrupt; not copied");
                    return Outcome::Failed;
                }
                Err(e) if e.is_not_found() => return Outcome::Skipped,
                // No pair will free up within a backoff: count it and go on.
                Err(e @ ValkyrieError::Write(WriteError::NoSpace { .. })) => {
                    tracing::error!(%sha1, error = %e, "UNMOVE: no pair can take the file");
                    return Outcome::Failed;
                }
                Err(e) => {
                    tracing::warn!(%sha1, attempt, error = %e, "UNMOVE: copy failed");
                    tokio::time::sleep(backoff).await;
                    backoff = backoff.saturating_mul(2);
                }
            }
        }
        let Some(to) = new_pair else {
            return Outcome::Failed;
        };
        match self
            .with_retries("relocate", sha1, || {
                self.catalog.relocate(sha1, self.failed, to)
            })
            .await
        {
            Some(true) => Outcome::Relocated,
            // A retried relocate whose first answer was lost also says false: look.
            Some(false) => match self
                .with_retries("lookup", sha1, || self.catalog.lookup(sha1))
                .await
            {
                Some(Some(state)) if state.pair == to => Outcome::Relocated,
                _ => {
                    tracing::info!(%sha1, new_pair = %to, "UNMOVE: record changed meanwhile; the new copies are junk");
                    Outcome::Conflict
                }
            },
            None => Outcome::Failed,
        }
    }

    /// Copies the surviving file of `sha1` to both disks of another pair, verified on
    /// the way; returns that pair.
    async fn copy(&self, sha1: Sha1, size_bytes: u64) -> Result<PairId, ValkyrieError> {
        let mut upload = self.begin_upload(size_bytes).await?;
        let mut stream = self.own.read_range(&sha1, 0, size_bytes).await?;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk
                .map_err(|e| ValkyrieError::Disk(DiskError::io(self.own.disk_ref(), "read", e)))?;
            self.limiter.acquire(chunk.len() as u64).await;
            upload.write(chunk).await?;
        }
        let staged = upload.finish().await?;
        if staged.digests.sha1 != sha1 || staged.digests.size_bytes != size_bytes {
            let why = format!(
                "{} bytes hashing to {}",
                staged.digests.size_bytes, staged.digests.sha1
            );
            staged.discard().await;
            return Err(ValkyrieError::Corrupt {
                sha1,
                disk: self.own.disk_ref().to_string(),
                why,
            });
        }
        let pair = staged.pair;
        staged.commit().await?;
        if let Some(entry) = self.pairs.get(pair) {
            let free = entry
                .record
                .free_bytes
                .map(|f| f.saturating_sub(size_bytes));
            self.pairs
                .set_space(pair, free, entry.record.capacity_bytes);
        }
        Ok(pair)
    }

    /// `placement::write::begin_upload`, but never on the failed pair.
    async fn begin_upload(&self, size_bytes: u64) -> Result<PairUpload, ValkyrieError> {
        let mut exclude = vec![self.failed];
        let mut last_error = None;
        for _ in 0..PROBE_ATTEMPTS_MAX {
            let root = self.options.pair_choice_root;
            let Some(id) = self.pairs.choose(size_bytes, root, &exclude) else {
                break;
            };
            exclude.push(id);
            let Some(entry) = self.pairs.get(id) else {
                continue;
            };
            match PairUpload::begin(id, entry.disks).await {
                Ok(upload) => return Ok(upload),
                Err(e) => {
                    tracing::warn!(pair = %id, error = %e, "UNMOVE: probe failed, choosing another pair");
                    last_error = Some(e);
                }
            }
        }
        Err(last_error
            .unwrap_or(WriteError::NoSpace { size_bytes })
            .into())
    }

    /// A catalog call with bounded retries; `None` when every attempt failed.
    async fn with_retries<T, F, Fut>(&self, what: &str, sha1: Sha1, call: F) -> Option<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, crate::catalog::CatalogError>>,
    {
        let mut backoff = self.options.backoff;
        let attempts = self.options.attempts_max.max(1);
        for attempt in 1..=attempts {
            match call().await {
                Ok(v) => return Some(v),
                Err(e) => {
                    tracing::warn!(%sha1, attempt, error = %e, "UNMOVE: catalog {what} failed");
                    if attempt < attempts {
                        tokio::time::sleep(backoff).await;
                        backoff = backoff.saturating_mul(2);
                    }
                }
            }
        }
        None
    }
}

/// Content files and bytes on the survivor.
async fn count(root: &Path, shutdown: &Shutdown) -> Result<(u64, u64), ValkyrieError> {
    let (mut files, mut bytes) = (0u64, 0u64);
    let mut walk = Walk::new(root);
    let mut pacer = Pacer::new(COUNT_FILES_PER_BATCH, shutdown);
    while let Some(found) = walk.next_content().await {
        let (_, path) = found?;
        if !pacer.admit().await {
            break;
        }
        if let Some(stat) = layout::stat(&path).await? {
            files += 1;
            bytes += stat.size_bytes;
        }
    }
    Ok((files, bytes))
}

async fn load_progress(root: &Path) -> Result<Option<UnmoveProgress>, ValkyrieError> {
    let path = root.join(PROGRESS_FILE);
    let bytes = match tokio::fs::read(&path).await {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ValkyrieError::io("read", path, e)),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| ValkyrieError::Progress {
            path,
            message: e.to_string(),
        })
}

async fn save_progress(root: &Path, progress: &UnmoveProgress) -> Result<(), ValkyrieError> {
    let json = serde_json::to_vec_pretty(progress).map_err(|e| ValkyrieError::Progress {
        path: root.join(PROGRESS_FILE),
        message: e.to_string(),
    })?;
    let root = root.to_path_buf();
    blocking("save progress", root.join(PROGRESS_FILE), move || {
        use std::io::Write as _;
        let tmp = root.join(PROGRESS_TMP_FILE);
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&json)?;
        f.sync_all()?;
        std::fs::rename(&tmp, root.join(PROGRESS_FILE))?;
        layout::sync_dir(&root)
    })
    .await
}

/// Builds the in-memory pair table UNMOVE chooses target pairs from, opening every disk
/// with the default WebDAV settings.
pub async fn pair_table<C: Catalog>(catalog: &C) -> Result<PairTable, ValkyrieError> {
    let table = PairTable::new();
    for (id, record) in catalog.pairs().await? {
        table.upsert(id, record)?;
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use placement::PairFlags;

    use super::*;
    use crate::testkit::{MemCatalog, PAIR, PAIR_B, Rig, files_under, put_content};
    use crate::worker::Worker;

    /// Pair 0: disk 0 survives, disk 1 failed. Pair 1: two healthy disks. `n` files live
    /// on pair 0, present on the survivor only.
    struct Setup {
        rig: Rig,
        target: [tempfile::TempDir; 2],
        shas: Vec<(Sha1, Vec<u8>)>,
    }

    async fn setup(n: usize) -> Setup {
        let rig = Rig::new().await;
        let target = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        rig.catalog
            .add_pair(PAIR_B, [target[0].path(), target[1].path()]);
        let shas = (0..n)
            .map(|i| {
                // Sizes from a few bytes to ~40 KiB.
                let body: Vec<u8> = format!("attachment {i} ")
                    .into_bytes()
                    .repeat(1 + i * 37 % 2500);
                let sha1 = put_content(&rig.root(0), &body);
                rig.catalog.set_file(sha1, PAIR, 1, false);
                (sha1, body)
            })
            .collect();
        Setup { rig, target, shas }
    }

    fn options() -> UnmoveOptions {
        UnmoveOptions {
            bytes_per_sec: 0,
            save_every_files: 7,
            backoff: Duration::from_millis(1),
            ..UnmoveOptions::default()
        }
    }

    #[tokio::test]
    async fn a_stopped_unmove_resumes_and_relocates_each_file_exactly_once() {
        let s = setup(200).await;
        let catalog = s.rig.catalog.clone();
        let pairs = pair_table(&catalog).await.unwrap();
        let (stop, shutdown) = Shutdown::channel();
        let mut relocations = 0;
        catalog.on_relocate(move |_, _| {
            relocations += 1;
            if relocations == 80 {
                let _ = stop.send(true);
            }
        });
        let survivor = s.rig.root(0);

        let tracker = UnmoveTracker::new();
        let first = drain(
            &catalog,
            &pairs,
            PAIR,
            &survivor,
            &tracker,
            &options(),
            &shutdown,
        )
        .await
        .unwrap();
        assert!(!first.finished);
        assert_eq!(first.files_relocated, 80);
        assert_eq!((first.files_total, first.files_done), (200, 80));
        assert!(
            catalog.pairs.lock().unwrap()[&PAIR]
                .flags
                .contains(PairFlags::READ_ONLY)
        );
        let saved: UnmoveProgress =
            serde_json::from_slice(&std::fs::read(survivor.join(PROGRESS_FILE)).unwrap()).unwrap();
        assert_eq!(saved.last_sha1, first.last_sha1);

        // A new process: fresh tracker, progress from the file.
        let tracker = UnmoveTracker::new();
        let last = drain(
            &catalog,
            &pairs,
            PAIR,
            &survivor,
            &tracker,
            &options(),
            &Shutdown::never(),
        )
        .await
        .unwrap();
        assert!(last.finished, "{last:?}");
        assert_eq!(last.files_done, 200);
        assert_eq!(last.files_relocated, 200);
        assert_eq!(
            (last.files_conflict, last.files_failed, last.files_skipped),
            (0, 0, 0)
        );
        assert_eq!(last.bytes_done, last.bytes_total);
        assert_eq!(tracker.snapshot(), last);

        assert_eq!(catalog.relocate_calls.load(Ordering::SeqCst), 200);
        let relocated = catalog.relocated.lock().unwrap().clone();
        let unique: HashSet<Sha1> = relocated.iter().map(|(sha1, _, _)| *sha1).collect();
        assert_eq!((relocated.len(), unique.len()), (200, 200));
        assert!(
            relocated
                .iter()
                .all(|(_, from, to)| (*from, *to) == (PAIR, PAIR_B))
        );
        for (sha1, body) in &s.shas {
            assert_eq!(catalog.file(*sha1).unwrap().pair, PAIR_B);
            for disk in &s.target {
                let copy = std::fs::read(layout::content_file(disk.path(), sha1)).unwrap();
                assert_eq!(&copy, body);
            }
        }
        // Nothing half-written left on the receiving pair.
        for disk in &s.target {
            assert_eq!(
                std::fs::read_dir(disk.path().join("tmp")).unwrap().count(),
                0
            );
        }
        // The receiving pair's free space went down by what it took.
        let taken: u64 = s.shas.iter().map(|(_, b)| b.len() as u64).sum();
        assert_eq!(
            pairs.get(PAIR_B).unwrap().record.free_bytes[0],
            (1 << 40) - taken
        );

        // Running again after the end starts over and finds nothing left to move.
        let again = drain(
            &catalog,
            &pairs,
            PAIR,
            &survivor,
            &UnmoveTracker::new(),
            &options(),
            &Shutdown::never(),
        )
        .await
        .unwrap();
        assert_eq!((again.files_skipped, again.files_relocated), (200, 0));
        assert_eq!(catalog.relocate_calls.load(Ordering::SeqCst), 200);
    }

    #[tokio::test]
    async fn a_relocate_conflict_leaves_junk_for_the_scrubber() {
        let s = setup(3).await;
        let catalog: Arc<MemCatalog> = s.rig.catalog.clone();
        let pairs = pair_table(&catalog).await.unwrap();
        let victim = s.shas[1].0;
        // A dec and a re-upload to pair 7 land between the copy and the relocate.
        catalog.on_relocate(move |sha1, files| {
            if sha1 == victim {
                files.get_mut(&sha1).unwrap().pair = PairId(7);
            }
        });
        let p = drain(
            &catalog,
            &pairs,
            PAIR,
            &s.rig.root(0),
            &UnmoveTracker::new(),
            &options(),
            &Shutdown::never(),
        )
        .await
        .unwrap();
        assert_eq!((p.files_relocated, p.files_conflict), (2, 1), "{p:?}");
        assert_eq!(catalog.file(victim).unwrap().pair, PairId(7));
        let junk = layout::content_file(s.target[0].path(), &victim);
        assert!(junk.exists());

        // The receiving pair's scrubber leaves it alone while it is fresh (it could be a
        // copy whose switch is in flight), then verifies and removes it.
        crate::testkit::age(&junk, s.rig.settings.grace_secs + 5);
        let config = crate::worker::WorkerConfig {
            root: s.target[0].path().to_path_buf(),
            pair: PAIR_B,
            index: 0,
            peer: crate::testkit::local_disk(s.target[1].path()),
            settings: s.rig.settings.clone(),
        };
        let w = Worker::new(catalog.clone(), config, s.rig.clock.clock()).unwrap();
        let r = w.scrub_pass(&Shutdown::never()).await;
        assert_eq!((r.junk_removed, r.good), (1, 2), "{r:?}");
        assert!(!junk.exists());
    }

    #[tokio::test]
    async fn a_corrupt_survivor_is_not_copied_and_stays_recorded() {
        let s = setup(2).await;
        let catalog = s.rig.catalog.clone();
        let pairs = pair_table(&catalog).await.unwrap();
        let (bad, _) = &s.shas[0];
        let path = layout::content_file(&s.rig.root(0), bad);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[0] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        let p = drain(
            &catalog,
            &pairs,
            PAIR,
            &s.rig.root(0),
            &UnmoveTracker::new(),
            &options(),
            &Shutdown::never(),
        )
        .await
        .unwrap();
        assert_eq!((p.files_relocated, p.files_failed), (1, 1), "{p:?}");
        assert_eq!(catalog.file(*bad).unwrap().pair, PAIR);
        // The bad bytes were discarded, not committed, on the receiving pair.
        assert!(
            !files_under(s.target[0].path())
                .iter()
                .any(|f| f.contains(&bad.to_hex()))
        );
    }

    #[tokio::test]
    async fn no_other_pair_means_failed_files_not_a_crash() {
        let s = setup(2).await;
        s.rig.catalog.pairs.lock().unwrap().remove(&PAIR_B);
        let catalog = s.rig.catalog.clone();
        let pairs = pair_table(&catalog).await.unwrap();
        let p = drain(
            &catalog,
            &pairs,
            PAIR,
            &s.rig.root(0),
            &UnmoveTracker::new(),
            &options(),
            &Shutdown::never(),
        )
        .await
        .unwrap();
        assert!(p.finished);
        assert_eq!(p.files_failed, 2);
    }

    #[test]
    fn the_eta_follows_the_pace_of_this_run() {
        let tracker = UnmoveTracker::new();
        tracker.set(UnmoveProgress {
            bytes_total: 1000,
            bytes_done: 100,
            ..UnmoveProgress::default()
        });
        *lock(&tracker.run) = Some((Instant::now() - Duration::from_secs(10), 0));
        // 100 bytes in 10 s: 900 left take ~90 s.
        let eta = tracker.snapshot().eta_secs.unwrap();
        assert!((89..=91).contains(&eta), "{eta}");
    }
}
