//! The deletion loop: acts on the catalog's `deleting` entries of this worker's pair.
//!
//! Per entry (the article's protocol):
//!
//! 1. Due? The sha1's master disk (its first bit) acts as soon as `now >= since`; the
//!    other disk, the slave, only when `now >= since + slave_delay_secs`. A master that
//!    quarantined by mistake shows up in its log while reads still find the slave's copy.
//! 2. Live on this pair (re-uploaded since)? Drop the entry, keep the file.
//! 3. Otherwise quarantine the local copy (rename to `<sha1>.deleted.<now>`), then look
//!    again and rename it back if the content came back to life meanwhile
//!    ([`crate::quarantine`]). A missing local copy is simply done.
//! 4. The slave removes the entry; the master never does (unless the content is live):
//!    if the master crashes, the slave still finishes the job, and the master's copy is
//!    then an orphan that its own scrubber quarantines after the grace period.
//!
//! Entries come in sha1 order, in pages of `deletion_page_entries`, with a yield and a
//! look at the stop signal between pages ([`crate::pace`]), until an empty page; every
//! entry is looked at on every pass, as `since` says nothing about the order.

use placement::Sha1;

use crate::catalog::{Catalog, DeletingEntry};
use crate::clock::Shutdown;
use crate::error::ValkyrieError;
use crate::metrics::Metrics;
use crate::pace::Pacer;
use crate::quarantine::QuarantineOutcome;
use crate::worker::Worker;

/// What one deletion pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DeletionReport {
    pub entries_seen: u64,
    /// Not due yet on this disk (the slave's delay).
    pub not_due: u64,
    /// Live on this pair: the entry was dropped and the file kept.
    pub kept_live: u64,
    pub quarantined: u64,
    /// No local copy to quarantine.
    pub missing: u64,
    pub entries_removed: u64,
    pub errors: u64,
    /// Every page was read (no catalog failure, no shutdown).
    pub completed: bool,
}

impl<C: Catalog> Worker<C> {
    /// One pass over the `deleting` entries of this pair.
    pub async fn deletion_pass(&self, shutdown: &Shutdown) -> DeletionReport {
        let mut report = DeletionReport::default();
        let mut pacer = Pacer::new(self.settings.deletion_page_entries, shutdown);
        let mut after: Option<Sha1> = None;
        while pacer.next_batch().await {
            let limit = pacer.batch_max();
            let page = match self.catalog.deleting(self.pair, after, limit).await {
                Ok(page) => page,
                Err(e) => {
                    report.errors += 1;
                    self.failed("reading deleting entries", None, &e.into());
                    return report;
                }
            };
            for entry in &page {
                after = Some(entry.sha1);
                report.entries_seen += 1;
                // Checked on this side of the boundary too: another pair's entry is not
                // ours to act on.
                if entry.pair != self.pair {
                    report.errors += 1;
                    let e = ValkyrieError::Config(format!(
                        "catalog returned a deleting entry of {} for {}",
                        entry.pair, self.pair
                    ));
                    self.failed("deleting entry", Some(entry.sha1), &e);
                    continue;
                }
                if let Err(e) = self.delete_one(entry, &mut report).await {
                    report.errors += 1;
                    self.failed("deletion", Some(entry.sha1), &e);
                }
            }
            // Only an empty page ends the pass: a catalog that caps its pages below
            // `limit` must not hide the entries after its first page.
            if page.is_empty() {
                report.completed = true;
                return report;
            }
        }
        report
    }

    async fn delete_one(
        &self,
        entry: &DeletingEntry,
        report: &mut DeletionReport,
    ) -> Result<(), ValkyrieError> {
        let sha1 = entry.sha1;
        let master = self.is_master(&sha1);
        let due_secs = if master {
            entry.since_secs
        } else {
            entry
                .since_secs
                .saturating_add(self.settings.slave_delay_secs)
        };
        if self.clock.now_secs() < due_secs {
            report.not_due += 1;
            return Ok(());
        }
        if let Some(state) = self.catalog.lookup(sha1).await?
            && state.pair == self.pair
        {
            // Re-uploaded to this pair after the dec: the entry is stale.
            return self.drop_live_entry(sha1, report).await;
        }
        match self.quarantine_checked(sha1).await? {
            QuarantineOutcome::Missing => report.missing += 1,
            QuarantineOutcome::Quarantined(path) => {
                report.quarantined += 1;
                Metrics::inc(&self.metrics.quarantined);
                tracing::info!(%sha1, path = %path.display(), master, "quarantined (deleting entry)");
            }
            QuarantineOutcome::KeptLive => return self.drop_live_entry(sha1, report).await,
        }
        if !master {
            self.catalog.remove_deleting(sha1, self.pair).await?;
            report.entries_removed += 1;
            Metrics::inc(&self.metrics.deleting_removed);
        }
        Ok(())
    }

    async fn drop_live_entry(
        &self,
        sha1: Sha1,
        report: &mut DeletionReport,
    ) -> Result<(), ValkyrieError> {
        self.catalog.remove_deleting(sha1, self.pair).await?;
        report.kept_live += 1;
        report.entries_removed += 1;
        Metrics::inc(&self.metrics.deleting_removed);
        tracing::info!(%sha1, "content live again on this pair; deleting entry dropped");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::testkit::{PAIR, Rig, body_with_master, put_content};

    /// A stored file whose master is disk `master`, then `dec` to zero at `since`.
    fn dead(rig: &Rig, master: usize, tag: &str, since: u64) -> Sha1 {
        let sha1 = rig.put_live(&body_with_master(master, tag));
        rig.catalog.dec_to_zero(sha1, PAIR, since);
        sha1
    }

    #[tokio::test]
    async fn master_then_slave_then_the_quarantine_expires() {
        let rig = Rig::new().await;
        let t0 = rig.clock.now();
        let s = Shutdown::never();
        for master in [0, 1] {
            let slave = 1 - master;
            let sha1 = dead(&rig, master, &format!("mail {master}"), t0);
            let (wm, ws) = (rig.worker(master), rig.worker(slave));
            rig.clock.set(t0);

            // The master acts at once and keeps the entry.
            let r = wm.deletion_pass(&s).await;
            assert_eq!((r.quarantined, r.entries_removed), (1, 0), "{r:?}");
            assert!(!rig.content(master, &sha1).exists());
            assert_eq!(rig.quarantined(master, &sha1).len(), 1);
            assert!(rig.catalog.has_deleting(sha1));

            // The slave waits for its delay.
            let r = ws.deletion_pass(&s).await;
            assert_eq!(r.not_due, 1);
            assert!(rig.content(slave, &sha1).exists());
            rig.clock.set(t0 + rig.settings.slave_delay_secs);
            let r = ws.deletion_pass(&s).await;
            assert_eq!((r.quarantined, r.entries_removed), (1, 1), "{r:?}");
            assert!(!rig.content(slave, &sha1).exists());
            assert!(!rig.catalog.has_deleting(sha1));

            // Quarantine: the master's copy expires first, then the slave's.
            rig.clock.set(t0 + rig.settings.quarantine_secs);
            assert_eq!(wm.scrub_pass(&s).await.expired_deleted, 1);
            let r = ws.scrub_pass(&s).await;
            assert_eq!((r.expired_deleted, r.quarantine_kept), (0, 1), "{r:?}");
            assert_eq!(rig.quarantined(slave, &sha1).len(), 1);
            rig.clock
                .set(t0 + rig.settings.slave_delay_secs + rig.settings.quarantine_secs);
            assert_eq!(ws.scrub_pass(&s).await.expired_deleted, 1);
            assert!(rig.quarantined(master, &sha1).is_empty());
            assert!(rig.quarantined(slave, &sha1).is_empty());
            assert!(wm.metrics().snapshot().deleted >= 1);
        }
    }

    #[tokio::test]
    async fn an_entry_live_on_this_pair_is_dropped_and_the_file_kept() {
        let rig = Rig::new().await;
        let now = rig.clock.now();
        let sha1 = dead(&rig, 0, "reuploaded", now - 10);
        // Re-uploaded to the same pair after the dec.
        rig.catalog.set_file(sha1, PAIR, 1, false);
        let r = rig.worker(0).deletion_pass(&Shutdown::never()).await;
        assert_eq!((r.kept_live, r.entries_removed, r.quarantined), (1, 1, 0));
        assert!(rig.content(0, &sha1).exists());
        assert!(rig.content(1, &sha1).exists());
        assert!(!rig.catalog.has_deleting(sha1));
    }

    #[tokio::test]
    async fn an_entry_live_on_another_pair_still_quarantines_this_copy() {
        let rig = Rig::new().await;
        let now = rig.clock.now();
        let sha1 = dead(&rig, 1, "moved away", now - 1000);
        rig.catalog.set_file(sha1, crate::testkit::PAIR_B, 1, false);
        let r = rig.worker(0).deletion_pass(&Shutdown::never()).await;
        assert_eq!((r.quarantined, r.entries_removed), (1, 1), "{r:?}");
        assert!(!rig.content(0, &sha1).exists());
    }

    #[tokio::test]
    async fn a_reupload_racing_the_quarantine_survives() {
        let rig = Rig::new().await;
        let now = rig.clock.now();
        let sha1 = dead(&rig, 0, "raced", now);
        // The loader commits its record between the worker's two lookups.
        let mut lookups = 0;
        rig.catalog.on_lookup(move |s, files| {
            if s == sha1 {
                lookups += 1;
                if lookups == 2 {
                    files.insert(
                        s,
                        crate::catalog::FileState {
                            refs: 1,
                            pair: PAIR,
                            do_not_delete: false,
                        },
                    );
                }
            }
        });
        let w = rig.worker(0);
        let r = w.deletion_pass(&Shutdown::never()).await;
        assert_eq!(
            (r.kept_live, r.quarantined, r.entries_removed),
            (1, 0, 1),
            "{r:?}"
        );
        assert!(rig.content(0, &sha1).exists());
        assert!(rig.quarantined(0, &sha1).is_empty());
        assert_eq!(w.metrics().snapshot().restored, 1);
    }

    #[tokio::test]
    async fn a_catalog_failure_after_the_rename_undoes_it() {
        let rig = Rig::new().await;
        let now = rig.clock.now();
        let sha1 = dead(&rig, 0, "unsure", now);
        let catalog = rig.catalog.clone();
        let mut lookups = 0;
        rig.catalog.on_lookup(move |_, _| {
            lookups += 1;
            if lookups == 1 {
                // The second lookup (after the rename) fails.
                catalog.fail_lookups.store(true, Ordering::SeqCst);
            }
        });
        let r = rig.worker(0).deletion_pass(&Shutdown::never()).await;
        assert_eq!((r.errors, r.quarantined), (1, 0), "{r:?}");
        assert!(rig.content(0, &sha1).exists());
        assert!(rig.quarantined(0, &sha1).is_empty());
        assert!(rig.catalog.has_deleting(sha1));
    }

    #[tokio::test]
    async fn with_the_master_down_the_slave_still_deletes() {
        let rig = Rig::new().await;
        let t0 = rig.clock.now() - 10_000;
        let sha1 = dead(&rig, 0, "master crashed", t0);
        // Only the slave (disk 1) runs.
        let r = rig.worker(1).deletion_pass(&Shutdown::never()).await;
        assert_eq!((r.quarantined, r.entries_removed), (1, 1), "{r:?}");
        assert!(!rig.content(1, &sha1).exists());
        assert!(!rig.catalog.has_deleting(sha1));
        // The master comes back: its copy has no record and no entry, an orphan its
        // scrubber quarantines once past the grace period.
        crate::testkit::age(&rig.content(0, &sha1), rig.settings.grace_secs + 1);
        let r = rig.worker(0).scrub_pass(&Shutdown::never()).await;
        assert_eq!(r.orphans_quarantined, 1, "{r:?}");
        assert_eq!(rig.quarantined(0, &sha1).len(), 1);
    }

    #[tokio::test]
    async fn a_missing_copy_is_done_and_pages_are_followed() {
        let rig = Rig::new().await;
        let t0 = rig.clock.now() - 10_000;
        // Five entries (pages of two) whose slave is disk 1, which holds no copy.
        let mut shas = Vec::new();
        for i in 0..5 {
            let sha1 = put_content(&rig.root(0), &body_with_master(0, &format!("gone {i}")));
            rig.catalog.dec_to_zero(sha1, PAIR, t0);
            shas.push(sha1);
        }
        let r = rig.worker(1).deletion_pass(&Shutdown::never()).await;
        assert_eq!(
            (r.entries_seen, r.missing, r.entries_removed),
            (5, 5, 5),
            "{r:?}"
        );
        assert!(r.completed);
        assert!(shas.iter().all(|s| !rig.catalog.has_deleting(*s)));
    }
}
