//! Quarantine: deletion made reversible.
//!
//! A content file is never deleted straight away: it is renamed to
//! `<sha1 hex>.deleted.<unix secs>` in its folder (and the folder fsynced), and only the
//! scrubber deletes it for good once `quarantine_secs` have passed. Until then
//! [`restore`] renames it back: the gateway calls it when a read finds the content name
//! missing, and the scrubber does it for any quarantined copy whose content turned out to
//! be live on this pair with the content name missing.
//!
//! The race this guards against (the article's): a `files` lookup says "no record", and
//! before the rename a loader re-uploads the same content to this pair and commits its
//! record. So after every rename the record is looked up again, and a copy that came back
//! to life is renamed back at once ([`QuarantineOutcome::KeptLive`]). If the loader's
//! commit lands after that second look, the record is live with the content name
//! missing: reads restore it, and the peer's scrubber re-uploads its copy.

use std::io;
use std::path::{Path, PathBuf};

use placement::Sha1;

use crate::catalog::Catalog;
use crate::error::{ValkyrieError, blocking};
use crate::layout;
use crate::metrics::Metrics;
use crate::worker::Worker;

/// What became of a content file set out to be quarantined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuarantineOutcome {
    /// There was no content file: nothing to do.
    Missing,
    /// Renamed to this quarantine path.
    Quarantined(PathBuf),
    /// Renamed, then found live on this pair and renamed back.
    KeptLive,
}

/// Whether a copy quarantined at `since_secs` may be deleted for good at `now_secs`.
pub fn expired(since_secs: u64, quarantine_secs: u64, now_secs: u64) -> bool {
    since_secs.saturating_add(quarantine_secs) <= now_secs
}

/// Renames the content file of `sha1` to its quarantine name for `now_secs` and fsyncs
/// the folder; `None` when there is no content file.
pub async fn quarantine_file(
    root: &Path,
    sha1: &Sha1,
    now_secs: u64,
) -> Result<Option<PathBuf>, ValkyrieError> {
    let content = layout::content_file(root, sha1);
    let dir = layout::shard_dir(root, sha1);
    let target = dir.join(layout::quarantine_name(sha1, now_secs));
    let to = target.clone();
    blocking("quarantine", content.clone(), move || {
        match std::fs::rename(&content, &to) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        }
        layout::sync_dir(&dir)?;
        Ok(Some(to))
    })
    .await
}

/// Gives a quarantined copy its content name back, never over an existing content file
/// (a fresh upload may have put one there; it is at least as good). `true` when the
/// content name holds a file afterwards.
pub async fn unquarantine(
    root: &Path,
    sha1: &Sha1,
    quarantined: &Path,
) -> Result<bool, ValkyrieError> {
    let content = layout::content_file(root, sha1);
    let dir = layout::shard_dir(root, sha1);
    let from = quarantined.to_path_buf();
    blocking("restore", quarantined.to_path_buf(), move || {
        // link + unlink: atomic "rename unless the target exists".
        match std::fs::hard_link(&from, &content) {
            Ok(()) => std::fs::remove_file(&from)?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(content.exists()),
            // A filesystem without hard links: check, then rename.
            Err(_) if content.exists() => return Ok(true),
            Err(_) => std::fs::rename(&from, &content)?,
        }
        layout::sync_dir(&dir)?;
        Ok(true)
    })
    .await
}

/// Renames the newest quarantined copy of `sha1` back to its content name.
///
/// `Ok(true)` when the content name holds a file on return (restored now, or already
/// there), `Ok(false)` when there is no copy to restore. The gateway calls it when a read
/// of a local disk finds the content name missing, then reads again.
///
/// ```no_run
/// # async fn f(sha1: placement::Sha1) -> Result<(), valkyrie::ValkyrieError> {
/// if valkyrie::restore(std::path::Path::new("/srv/disk0"), sha1).await? {
///     // read the content file again
/// }
/// # Ok(()) }
/// ```
pub async fn restore(disk_root: &Path, sha1: Sha1) -> Result<bool, ValkyrieError> {
    if layout::stat(&layout::content_file(disk_root, &sha1))
        .await?
        .is_some()
    {
        return Ok(true);
    }
    let dir = layout::shard_dir(disk_root, &sha1);
    let names = layout::list(&dir).await?.into_iter().map(|l| l.name);
    let newest = layout::quarantined_names(&sha1, names).into_iter().max();
    match newest {
        Some((since_secs, name)) => {
            let restored = unquarantine(disk_root, &sha1, &dir.join(&name)).await?;
            tracing::warn!(%sha1, disk = %disk_root.display(), since_secs, "restored a quarantined copy");
            Ok(restored)
        }
        None => Ok(false),
    }
}

impl<C: Catalog> Worker<C> {
    /// Quarantines the local copy of `sha1`, then looks the record up again and undoes
    /// the rename if the content is live on this pair (or if it cannot tell: the next
    /// pass will try again). The caller counts and logs the outcome.
    pub(crate) async fn quarantine_checked(
        &self,
        sha1: Sha1,
    ) -> Result<QuarantineOutcome, ValkyrieError> {
        let now = self.clock.now_secs();
        let Some(path) = quarantine_file(&self.root, &sha1, now).await? else {
            return Ok(QuarantineOutcome::Missing);
        };
        // Fenced: a command in flight that would make it live lands before this answer.
        let still_dead = match self.catalog.lookup_fenced(sha1).await {
            Ok(Some(state)) => state.pair != self.pair,
            Ok(None) => true,
            Err(e) => {
                unquarantine(&self.root, &sha1, &path).await?;
                return Err(e.into());
            }
        };
        if still_dead {
            return Ok(QuarantineOutcome::Quarantined(path));
        }
        unquarantine(&self.root, &sha1, &path).await?;
        Metrics::inc(&self.metrics.restored);
        tracing::warn!(%sha1, disk = %self.root.display(), "content came back to life while being quarantined; kept");
        Ok(QuarantineOutcome::KeptLive)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{put_content, sha1_of};

    #[test]
    fn expiry_is_since_plus_quarantine() {
        assert!(!expired(1000, 60, 1059));
        assert!(expired(1000, 60, 1060));
        assert!(!expired(u64::MAX - 1, 60, u64::MAX - 1));
    }

    #[tokio::test]
    async fn restore_brings_back_the_newest_quarantined_copy() {
        let disk = tempfile::tempdir().unwrap();
        let root = disk.path();
        let body = b"the newest copy";
        let sha1 = put_content(root, body);
        let content = layout::content_file(root, &sha1);
        let dir = layout::shard_dir(root, &sha1);

        // Nothing quarantined: nothing to restore, and a present file is "restored".
        assert!(restore(root, sha1).await.unwrap());
        assert!(!restore(root, sha1_of(b"never stored")).await.unwrap());

        let q = quarantine_file(root, &sha1, 2000).await.unwrap().unwrap();
        assert_eq!(q, dir.join(layout::quarantine_name(&sha1, 2000)));
        assert!(!content.exists());
        // An older quarantined copy with other bytes: the newest one wins.
        std::fs::write(dir.join(layout::quarantine_name(&sha1, 1000)), b"older").unwrap();

        assert!(restore(root, sha1).await.unwrap());
        assert_eq!(std::fs::read(&content).unwrap(), body);
        assert!(!q.exists());
        assert!(dir.join(layout::quarantine_name(&sha1, 1000)).exists());

        // A missing content file has nothing to quarantine.
        let other = sha1_of(b"absent");
        assert_eq!(quarantine_file(root, &other, 1).await.unwrap(), None);
    }

    #[tokio::test]
    async fn unquarantine_never_overwrites_a_fresh_upload() {
        let disk = tempfile::tempdir().unwrap();
        let root = disk.path();
        let sha1 = put_content(root, b"fresh");
        let q = layout::shard_dir(root, &sha1).join(layout::quarantine_name(&sha1, 5));
        std::fs::write(&q, b"stale, maybe corrupt").unwrap();
        assert!(unquarantine(root, &sha1, &q).await.unwrap());
        assert_eq!(
            std::fs::read(layout::content_file(root, &sha1)).unwrap(),
            b"fresh"
        );
    }
}
