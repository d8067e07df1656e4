//! The scrub loop: every file of the disk, every `scrub_interval_secs`.
//!
//! The pass walks `tmp/` and then one `<aa>/<bb>` folder at a time in sha1 order
//! ([`crate::walk`]), in batches of `scrub_batch_files` names with a yield between two and
//! a stop on shutdown there ([`crate::pace`]); every byte it reads passes the worker's
//! token bucket (`scrub_bytes_per_sec`). What each name gets:
//!
//! | name | record in `files` | action |
//! |---|---|---|
//! | `tmp/<random>` | - | older than `temp_max_age_secs`: delete (an abandoned upload) |
//! | `<sha1>.deleted.<ts>` | live here, content name missing | restore it |
//! | `<sha1>.deleted.<ts>` | otherwise | `ts + quarantine_secs` passed: delete for good |
//! | `<sha1>` | none | older than `grace_secs`: quarantine (an orphan: a crash between rename and commit, or a slave that deleted while its master was down) |
//! | `<sha1>` | on another pair | junk (two loaders raced, or UNMOVE's target before its switch): older than `grace_secs`, verify, then delete; count an error if it was corrupt too |
//! | `<sha1>` | on this pair | good: re-hash, repair from the peer if corrupt, re-create the peer copy if it is missing or of the wrong size ([`crate::repair`]) |
//! | anything else | - | leave it, log it |
//!
//! A catalog error leaves the file alone until the next pass: nothing is ever removed on a
//! guess. DO_NOT_DELETE content is only ever repaired; even a junk copy of it is kept (the
//! reference arithmetic went wrong, a human looks at it).
//!
//! The peer is checked with one `size_of` (the article's `HEAD`): its own worker verifies
//! its bytes. After a run of peer failures the rest of the pass skips the peer instead of
//! waiting out a timeout per file, and no copy is written to a READ_ONLY pair.

use std::path::Path;
use std::sync::atomic::Ordering;

use placement::{PairFlags, Sha1};

use crate::catalog::Catalog;
use crate::clock::Shutdown;
use crate::error::ValkyrieError;
use crate::layout::{self, FileName};
use crate::metrics::Metrics;
use crate::pace::Pacer;
use crate::quarantine::{self, QuarantineOutcome};
use crate::repair::Verdict;
use crate::walk::{Entry, Walk};
use crate::worker::Worker;

/// Consecutive peer failures after which a pass stops asking the peer.
const PEER_ERRORS_IN_A_ROW_MAX: u32 = 16;
/// What a content file costs in the byte budget on top of its bytes: a catalog lookup and
/// a seek are not free. At 50 MiB/s this bounds a pass to 800 files/s (and the catalog to
/// 800 lookups/s), however small the files.
pub const SCRUB_FILE_COST_BYTES: u64 = 64 * 1024;

/// What one scrub pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ScrubReport {
    /// Names visited.
    pub files: u64,
    /// Content files on this pair that hash to their name.
    pub good: u64,
    pub bytes_verified: u64,
    pub expired_deleted: u64,
    pub quarantine_kept: u64,
    pub restored: u64,
    pub temp_removed: u64,
    pub temp_kept: u64,
    pub orphans_quarantined: u64,
    pub orphans_young: u64,
    pub junk_removed: u64,
    /// Junk that did not hash to its name (removed as well).
    pub junk_corrupt: u64,
    /// Junk of DO_NOT_DELETE content, left alone.
    pub junk_kept: u64,
    /// Junk younger than the grace period, left for a later pass.
    pub junk_young: u64,
    pub repaired_local: u64,
    pub repaired_peer: u64,
    /// Corrupt here and no good copy on the peer either.
    pub unrepairable: u64,
    pub unknown: u64,
    pub errors: u64,
    /// The whole disk was walked (no shutdown, no unreadable root).
    pub completed: bool,
}

struct Pass {
    report: ScrubReport,
    now_secs: u64,
    peer_writable: bool,
    peer_errors_in_a_row: u32,
}

impl Pass {
    fn peer_usable(&self) -> bool {
        self.peer_errors_in_a_row < PEER_ERRORS_IN_A_ROW_MAX
    }
}

impl<C: Catalog> Worker<C> {
    /// One pass over every file of the disk.
    pub async fn scrub_pass(&self, shutdown: &Shutdown) -> ScrubReport {
        let now_secs = self.clock.now_secs();
        self.metrics.start_pass(now_secs);
        let mut pass = Pass {
            report: ScrubReport::default(),
            now_secs,
            peer_writable: self.refresh_peer_writable().await,
            peer_errors_in_a_row: 0,
        };
        let mut walk = Walk::new(&self.root).with_temps();
        let mut pacer = Pacer::new(self.settings.scrub_batch_files, shutdown).first_batch_always();
        while let Some(found) = walk.next().await {
            let entry = match found {
                Ok(entry) => entry,
                Err(e) => {
                    self.count_failure(&mut pass, e.folder.listing(), None, &e.error);
                    if e.ends_walk() {
                        return pass.report;
                    }
                    continue;
                }
            };
            if !pacer.admit().await {
                return pass.report;
            }
            self.visited(&mut pass);
            match entry {
                Entry::Temp { path } => {
                    if let Err(e) = self.scrub_temp(&path, &mut pass).await {
                        self.count_failure(&mut pass, "stale temp", None, &e);
                    }
                }
                Entry::Shard { path, name } => self.scrub_name(&path, name, &mut pass).await,
            }
        }
        pass.report.completed = true;
        self.metrics
            .last_pass_files
            .store(pass.report.files, std::sync::atomic::Ordering::Relaxed);
        Metrics::inc(&self.metrics.passes_done);
        pass.report
    }

    fn visited(&self, pass: &mut Pass) {
        pass.report.files += 1;
        Metrics::inc(&self.metrics.files_scanned);
        Metrics::inc(&self.metrics.pass_files_done);
    }

    fn count_failure(&self, pass: &mut Pass, what: &str, sha1: Option<Sha1>, e: &ValkyrieError) {
        pass.report.errors += 1;
        self.failed(what, sha1, e);
    }

    /// Whether copies may be written to the peer: not while the pair is READ_ONLY. A
    /// catalog that cannot say keeps the previous answer.
    async fn refresh_peer_writable(&self) -> bool {
        match self.catalog.pairs().await {
            Ok(pairs) => match pairs.iter().find(|(id, _)| *id == self.pair) {
                Some((_, record)) => {
                    let writable = !record.flags.contains(PairFlags::READ_ONLY);
                    self.peer_writable.store(writable, Ordering::Relaxed);
                }
                None => tracing::warn!(pair = %self.pair, "own pair missing from the catalog"),
            },
            Err(e) => tracing::warn!(error = %e, "cannot read the pair flags"),
        }
        self.peer_writable.load(Ordering::Relaxed)
    }

    async fn scrub_temp(&self, path: &Path, pass: &mut Pass) -> Result<(), ValkyrieError> {
        let Some(stat) = layout::stat(path).await? else {
            return Ok(());
        };
        if !stat.is_file {
            pass.report.unknown += 1;
            tracing::warn!(path = %path.display(), "not a file in tmp/; left alone");
            return Ok(());
        }
        if pass.now_secs.saturating_sub(stat.mtime_secs) > self.settings.temp_max_age_secs {
            if layout::remove(path).await? {
                pass.report.temp_removed += 1;
                Metrics::inc(&self.metrics.temp_removed);
                tracing::info!(path = %path.display(), "stale temp removed");
            }
        } else {
            pass.report.temp_kept += 1;
        }
        Ok(())
    }

    async fn scrub_name(&self, path: &Path, name: FileName, pass: &mut Pass) {
        let (result, sha1) = match name {
            FileName::Content(sha1) => (self.scrub_content(sha1, pass).await, Some(sha1)),
            FileName::Quarantined { sha1, since_secs } => (
                self.scrub_quarantined(sha1, since_secs, path, pass).await,
                Some(sha1),
            ),
            FileName::Unknown => {
                pass.report.unknown += 1;
                tracing::warn!(path = %path.display(), "not a content name; left alone");
                (Ok(()), None)
            }
        };
        if let Err(e) = result {
            self.count_failure(pass, "scrub", sha1, &e);
        }
    }

    async fn scrub_quarantined(
        &self,
        sha1: Sha1,
        since_secs: u64,
        path: &Path,
        pass: &mut Pass,
    ) -> Result<(), ValkyrieError> {
        let content_missing = layout::stat(&layout::content_file(&self.root, &sha1))
            .await?
            .is_none();
        if content_missing
            && let Some(state) = self.catalog.lookup(sha1).await?
            && state.pair == self.pair
        {
            // Live here but only in quarantine: the race of a re-upload with a deletion
            // (see crate::quarantine). Give it its name back.
            if quarantine::unquarantine(&self.root, &sha1, path).await? {
                pass.report.restored += 1;
                Metrics::inc(&self.metrics.restored);
                tracing::warn!(%sha1, disk = %self.root.display(), "live content found only in quarantine; restored");
            }
            return Ok(());
        }
        if quarantine::expired(since_secs, self.settings.quarantine_secs, pass.now_secs) {
            if layout::remove(path).await? {
                pass.report.expired_deleted += 1;
                Metrics::inc(&self.metrics.deleted);
                tracing::info!(%sha1, path = %path.display(), "quarantine over; deleted");
            }
        } else {
            pass.report.quarantine_kept += 1;
        }
        Ok(())
    }

    async fn scrub_content(&self, sha1: Sha1, pass: &mut Pass) -> Result<(), ValkyrieError> {
        self.limiter.acquire(SCRUB_FILE_COST_BYTES).await;
        match self.catalog.lookup(sha1).await? {
            None => self.scrub_orphan(sha1, pass).await,
            Some(state) if state.pair != self.pair => {
                if state.do_not_delete {
                    pass.report.junk_kept += 1;
                    tracing::warn!(%sha1, record_pair = %state.pair, "junk copy of DO_NOT_DELETE content; left alone");
                    return Ok(());
                }
                self.scrub_junk(sha1, pass).await
            }
            Some(_) => self.scrub_good(sha1, pass).await,
        }
    }

    async fn scrub_orphan(&self, sha1: Sha1, pass: &mut Pass) -> Result<(), ValkyrieError> {
        let Some(stat) = layout::stat(&layout::content_file(&self.root, &sha1)).await? else {
            return Ok(());
        };
        if pass.now_secs.saturating_sub(stat.mtime_secs) <= self.settings.grace_secs {
            // Maybe an upload between its rename and its commit.
            pass.report.orphans_young += 1;
            return Ok(());
        }
        if let QuarantineOutcome::Quarantined(path) = self.quarantine_checked(sha1).await? {
            pass.report.orphans_quarantined += 1;
            Metrics::inc(&self.metrics.quarantined);
            tracing::info!(%sha1, path = %path.display(), "orphan (no record) quarantined");
        }
        Ok(())
    }

    /// A copy of content recorded on another pair: the article's "make sure these files
    /// can be read and match sha1; then they can be deleted at once". The removal goes
    /// through a quarantine rename and a second lookup, so a copy that became live on this
    /// pair meanwhile survives.
    async fn scrub_junk(&self, sha1: Sha1, pass: &mut Pass) -> Result<(), ValkyrieError> {
        let Some(stat) = layout::stat(&layout::content_file(&self.root, &sha1)).await? else {
            return Ok(());
        };
        if pass.now_secs.saturating_sub(stat.mtime_secs) <= self.settings.grace_secs {
            // A fresh copy is not junk yet: UNMOVE writes the new pair's copies a moment
            // before it switches the record to them, and deleting them in that gap would
            // leave the record pointing at nothing.
            pass.report.junk_young += 1;
            return Ok(());
        }
        let verdict = self.verify_local(sha1).await?;
        if verdict == Verdict::Missing {
            return Ok(());
        }
        let QuarantineOutcome::Quarantined(path) = self.quarantine_checked(sha1).await? else {
            return Ok(());
        };
        layout::remove(&path).await?;
        pass.report.junk_removed += 1;
        Metrics::inc(&self.metrics.junk_removed);
        match verdict {
            Verdict::Corrupt { why } => {
                pass.report.junk_corrupt += 1;
                Metrics::inc(&self.metrics.errors);
                tracing::error!(%sha1, disk = %self.root.display(), %why, "corrupt junk copy removed");
            }
            _ => {
                tracing::info!(%sha1, disk = %self.root.display(), "junk copy (recorded on another pair) removed")
            }
        }
        Ok(())
    }

    async fn scrub_good(&self, sha1: Sha1, pass: &mut Pass) -> Result<(), ValkyrieError> {
        let size_bytes = match self.verify_local(sha1).await? {
            Verdict::Good { size_bytes } => size_bytes,
            Verdict::Missing => return Ok(()),
            Verdict::Corrupt { why } => {
                Metrics::inc(&self.metrics.errors);
                pass.report.errors += 1;
                tracing::error!(%sha1, disk = %self.root.display(), %why, "corrupt copy; repairing from the peer");
                return match self.repair_local_from_peer(sha1).await {
                    Ok(copied) => {
                        pass.report.repaired_local += 1;
                        Metrics::inc(&self.metrics.repaired);
                        tracing::warn!(%sha1, copied, "corrupt copy replaced from the peer");
                        Ok(())
                    }
                    Err(e @ ValkyrieError::Corrupt { .. }) => {
                        pass.report.unrepairable += 1;
                        Metrics::inc(&self.metrics.errors);
                        tracing::error!(%sha1, disk = %self.root.display(), peer = %self.peer.disk_ref(), error = %e,
                            "NO GOOD COPY: both copies are bad; left as they are");
                        Ok(())
                    }
                    Err(e) => Err(e),
                };
            }
        };
        pass.report.good += 1;
        pass.report.bytes_verified += size_bytes;
        if !pass.peer_writable || !pass.peer_usable() {
            return Ok(());
        }
        let peer_size = match self.peer.size_of(&sha1).await {
            Ok(size) => {
                pass.peer_errors_in_a_row = 0;
                size
            }
            Err(e) => {
                pass.peer_errors_in_a_row += 1;
                if !pass.peer_usable() {
                    tracing::error!(peer = %self.peer.disk_ref(), "peer keeps failing; not asking it again this pass");
                }
                return Err(e.into());
            }
        };
        if peer_size == Some(size_bytes) {
            return Ok(());
        }
        self.upload_to_peer(sha1, size_bytes).await?;
        pass.report.repaired_peer += 1;
        Metrics::inc(&self.metrics.repaired);
        tracing::warn!(%sha1, peer = %self.peer.disk_ref(), ?peer_size, size_bytes, "peer copy missing or of the wrong size; re-created");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{PAIR_B, Rig, age, files_under, put_content, sha1_of};

    #[tokio::test]
    async fn stale_temps_go_and_fresh_ones_stay() {
        let rig = Rig::new().await;
        let tmp = rig.root(0).join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::write(tmp.join("stale"), b"abandoned upload").unwrap();
        std::fs::write(tmp.join("fresh"), b"upload in flight").unwrap();
        age(&tmp.join("stale"), rig.settings.temp_max_age_secs + 5);
        let w = rig.worker(0);
        let r = w.scrub_pass(&Shutdown::never()).await;
        assert_eq!((r.temp_removed, r.temp_kept), (1, 1), "{r:?}");
        assert!(!tmp.join("stale").exists());
        assert!(tmp.join("fresh").exists());
        assert_eq!(w.metrics().snapshot().temp_removed, 1);
    }

    #[tokio::test]
    async fn old_orphans_are_quarantined_and_young_ones_kept() {
        let rig = Rig::new().await;
        let old = put_content(&rig.root(0), b"crashed before commit");
        let young = put_content(&rig.root(0), b"commit in flight");
        age(&rig.content(0, &old), rig.settings.grace_secs + 5);
        let w = rig.worker(0);
        let r = w.scrub_pass(&Shutdown::never()).await;
        assert_eq!((r.orphans_quarantined, r.orphans_young), (1, 1), "{r:?}");
        assert!(!rig.content(0, &old).exists());
        assert_eq!(rig.quarantined(0, &old).len(), 1);
        assert!(rig.content(0, &young).exists());
        assert_eq!(w.metrics().snapshot().quarantined, 1);
        // The last look before the quarantine went through a fence (a command still on
        // its way would have landed first).
        let fenced = &rig.catalog.fenced_lookups;
        assert_eq!(fenced.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn junk_is_verified_and_removed_and_corrupt_junk_counted() {
        let rig = Rig::new().await;
        let good = put_content(&rig.root(0), b"the loser of a loader race");
        rig.catalog.set_file(good, PAIR_B, 1, false);
        let bad = put_content(&rig.root(0), b"junk that rotted");
        rig.catalog.set_file(bad, PAIR_B, 1, false);
        std::fs::write(rig.content(0, &bad), b"junk that rotteD").unwrap();
        let dnd = put_content(&rig.root(0), b"junk of a broken count");
        rig.catalog.set_file(dnd, PAIR_B, 0, true);
        let fresh = put_content(&rig.root(0), b"UNMOVE's copy before its switch");
        rig.catalog.set_file(fresh, PAIR_B, 1, false);
        for sha1 in [good, bad, dnd] {
            age(&rig.content(0, &sha1), rig.settings.grace_secs + 5);
        }
        let w = rig.worker(0);
        let r = w.scrub_pass(&Shutdown::never()).await;
        assert_eq!(
            (r.junk_removed, r.junk_corrupt, r.junk_kept, r.junk_young),
            (2, 1, 1, 1),
            "{r:?}"
        );
        assert!(
            rig.content(0, &fresh).exists(),
            "fresh junk waits for the grace period"
        );
        assert!(!rig.content(0, &good).exists());
        assert!(!rig.content(0, &bad).exists());
        assert!(rig.content(0, &dnd).exists());
        // Removed for good, not left in quarantine.
        assert_eq!(files_under(&rig.root(0)).len(), 2);
        let m = w.metrics().snapshot();
        assert_eq!((m.junk_removed, m.errors, m.quarantined), (2, 1, 0));
    }

    #[tokio::test]
    async fn live_content_found_only_in_quarantine_is_restored() {
        let rig = Rig::new().await;
        let sha1 = rig.put_live(b"lost the race with a deletion");
        quarantine::quarantine_file(&rig.root(0), &sha1, 1)
            .await
            .unwrap();
        // Long expired, but live: restored, not deleted.
        let r = rig.worker(0).scrub_pass(&Shutdown::never()).await;
        assert_eq!((r.restored, r.expired_deleted), (1, 0), "{r:?}");
        assert!(rig.content(0, &sha1).exists());
    }

    #[tokio::test]
    async fn unknown_names_are_left_alone() {
        let rig = Rig::new().await;
        let sha1 = sha1_of(b"x");
        let dir = layout::shard_dir(&rig.root(0), &sha1);
        std::fs::create_dir_all(dir.join("a-folder")).unwrap();
        std::fs::write(dir.join("notes.txt"), b"operator's notes").unwrap();
        std::fs::write(dir.join(sha1.to_hex().to_uppercase()), b"x").unwrap();
        std::fs::write(rig.root(0).join("unmove.json"), b"{}").unwrap();
        let r = rig.worker(0).scrub_pass(&Shutdown::never()).await;
        assert_eq!(r.unknown, 3, "{r:?}");
        assert!(r.completed);
        assert_eq!(files_under(&rig.root(0)).len(), 3);
    }

    #[tokio::test]
    async fn a_catalog_failure_touches_nothing() {
        let rig = Rig::new().await;
        let orphan = put_content(&rig.root(0), b"maybe an orphan");
        age(&rig.content(0, &orphan), rig.settings.grace_secs + 5);
        rig.catalog
            .fail_lookups
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let w = rig.worker(0);
        let r = w.scrub_pass(&Shutdown::never()).await;
        assert_eq!((r.errors, r.orphans_quarantined), (1, 0), "{r:?}");
        assert!(rig.content(0, &orphan).exists());
        assert_eq!(w.metrics().snapshot().errors, 1);
    }

    #[tokio::test]
    async fn a_pass_stops_at_a_batch_boundary_on_shutdown() {
        let rig = Rig::new().await;
        for i in 0..10 {
            rig.put_live(format!("file {i}").as_bytes());
        }
        let (stop, shutdown) = Shutdown::channel();
        stop.send(true).unwrap();
        let r = rig.worker(0).scrub_pass(&shutdown).await;
        assert!(!r.completed);
        assert_eq!(r.files, rig.settings.scrub_batch_files as u64);
        let r = rig.worker(0).scrub_pass(&Shutdown::never()).await;
        assert!(r.completed);
        assert_eq!((r.files, r.good), (10, 10));
    }
}
