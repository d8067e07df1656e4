//! Repair: the two copies of a good file made whole again.
//!
//! A copy is verified by streaming it through SHA-1 and comparing with its name (and the
//! byte count with its size). A corrupt local copy is replaced from the peer: the peer's
//! bytes are streamed to a local temp file while being hashed, and renamed over the bad
//! copy only if they hash to the name. A missing or wrong-size peer copy is re-created the
//! same way in the other direction (temp on the peer, then commit: rename or WebDAV
//! `MOVE`). A copy is never written unless its bytes were verified on the way, so a
//! repair cannot spread corruption. If both copies are bad, nothing is written and the
//! error is logged loudly: only a human (or a re-upload) can fix that.
//!
//! Every byte read, for verification or for a copy, goes through the worker's rate
//! limiter: repairs come out of the scrubber's budget, not on top of it.

use bytes::Bytes;
use futures_util::StreamExt as _;
use placement::disk::TempWriter;
use placement::{Disk, DiskError, Sha1};

use crate::catalog::Catalog;
use crate::error::ValkyrieError;
use crate::layout;
use crate::metrics::Metrics;
use crate::worker::Worker;

/// What verifying a local copy found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The bytes hash to the name.
    Good { size_bytes: u64 },
    /// They do not (or the file is shorter than its size said).
    Corrupt { why: String },
    /// The file went away meanwhile (another loop quarantined it).
    Missing,
}

impl<C: Catalog> Worker<C> {
    /// Re-hashes the local copy of `sha1`.
    pub async fn verify_local(&self, sha1: Sha1) -> Result<Verdict, ValkyrieError> {
        let Some(stat) = layout::stat(&layout::content_file(&self.root, &sha1)).await? else {
            return Ok(Verdict::Missing);
        };
        match self
            .stream_checked(&self.own, &sha1, stat.size_bytes, None)
            .await
        {
            Ok(None) => {
                Metrics::add(&self.metrics.bytes_verified, stat.size_bytes);
                Ok(Verdict::Good {
                    size_bytes: stat.size_bytes,
                })
            }
            Ok(Some(why)) => Ok(Verdict::Corrupt { why }),
            Err(e) if e.is_not_found() => Ok(Verdict::Missing),
            Err(e) => Err(e),
        }
    }

    /// Replaces the local copy of `sha1` with the peer's, verified on the way; returns
    /// the bytes copied.
    pub async fn repair_local_from_peer(&self, sha1: Sha1) -> Result<u64, ValkyrieError> {
        let Some(size) = self.peer.size_of(&sha1).await? else {
            return Err(corrupt(&self.peer, sha1, "missing".into()));
        };
        let mut temp = self.own.begin_temp().await?;
        match self
            .stream_checked(&self.peer, &sha1, size, Some(&mut temp))
            .await?
        {
            None => {
                temp.finish().await?.commit(&sha1).await?;
                Ok(size)
            }
            // Dropping the writer removes the temp file.
            Some(why) => Err(corrupt(&self.peer, sha1, why)),
        }
    }

    /// Writes the local copy of `sha1` (`size_bytes` long) to the peer, verified on the
    /// way.
    pub async fn upload_to_peer(&self, sha1: Sha1, size_bytes: u64) -> Result<(), ValkyrieError> {
        let mut temp = self.peer.begin_temp().await?;
        match self
            .stream_checked(&self.own, &sha1, size_bytes, Some(&mut temp))
            .await?
        {
            None => {
                temp.finish().await?.commit(&sha1).await?;
                Ok(())
            }
            Some(why) => Err(corrupt(&self.own, sha1, why)),
        }
    }

    /// Streams `size_bytes` of `sha1` from `from` through the rate limiter and SHA-1,
    /// forwarding every chunk to `sink` if given. `Ok(None)` when the bytes hash to the
    /// name, `Ok(Some(why))` when they do not.
    async fn stream_checked(
        &self,
        from: &Disk,
        sha1: &Sha1,
        size_bytes: u64,
        mut sink: Option<&mut TempWriter>,
    ) -> Result<Option<String>, ValkyrieError> {
        let mut stream = from.read_range(sha1, 0, size_bytes).await?;
        // The name hasher, not plain SHA-1: a body carrying a collision attack is named by
        // its mitigated digest.
        let mut hasher = placement::NameHasher::new();
        let mut seen_bytes = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk: Bytes = chunk
                .map_err(|e| ValkyrieError::Disk(DiskError::io(from.disk_ref(), "read", e)))?;
            self.limiter.acquire(chunk.len() as u64).await;
            hasher.update(&chunk);
            seen_bytes += chunk.len() as u64;
            if let Some(sink) = sink.as_deref_mut() {
                sink.write(chunk).await?;
            }
        }
        if seen_bytes != size_bytes {
            return Ok(Some(format!(
                "{seen_bytes} bytes where {size_bytes} were expected"
            )));
        }
        let got = hasher.finish().sha1;
        if got != *sha1 {
            return Ok(Some(format!("the bytes hash to {got}")));
        }
        Ok(None)
    }
}

fn corrupt(disk: &Disk, sha1: Sha1, why: String) -> ValkyrieError {
    ValkyrieError::Corrupt {
        sha1,
        disk: disk.disk_ref().to_string(),
        why,
    }
}

#[cfg(test)]
mod tests {
    use placement::PairFlags;

    use crate::clock::Shutdown;
    use crate::testkit::{PAIR, Rig, local_disk, put_content};
    use crate::worker::Worker;

    fn rot(path: &std::path::Path) {
        let mut bytes = std::fs::read(path).unwrap();
        bytes[0] ^= 0x01;
        std::fs::write(path, bytes).unwrap();
    }

    #[tokio::test]
    async fn a_corrupt_local_copy_is_replaced_from_the_peer() {
        let rig = Rig::new().await;
        let body = vec![7u8; 600 * 1024];
        let sha1 = rig.put_live(&body);
        rot(&rig.content(0, &sha1));
        let w = rig.worker(0);
        let r = w.scrub_pass(&Shutdown::never()).await;
        assert_eq!((r.repaired_local, r.unrepairable), (1, 0), "{r:?}");
        assert_eq!(std::fs::read(rig.content(0, &sha1)).unwrap(), body);
        let m = w.metrics().snapshot();
        assert_eq!((m.repaired, m.errors), (1, 1));
        // No temp left behind, and the next pass finds it good.
        assert_eq!(
            std::fs::read_dir(rig.root(0).join("tmp")).unwrap().count(),
            0
        );
        assert_eq!(w.scrub_pass(&Shutdown::never()).await.good, 1);
    }

    #[tokio::test]
    async fn when_both_copies_are_bad_nothing_is_written() {
        let rig = Rig::new().await;
        let sha1 = rig.put_live(b"two bad copies");
        rot(&rig.content(0, &sha1));
        rot(&rig.content(1, &sha1));
        let before = std::fs::read(rig.content(0, &sha1)).unwrap();
        let r = rig.worker(0).scrub_pass(&Shutdown::never()).await;
        assert_eq!((r.repaired_local, r.unrepairable), (0, 1), "{r:?}");
        assert_eq!(std::fs::read(rig.content(0, &sha1)).unwrap(), before);
    }

    #[tokio::test]
    async fn a_missing_or_short_peer_copy_is_recreated_on_a_peer_elsewhere() {
        // The peer is a directory of its own, not a sibling of the worker's disk.
        let rig = Rig::new().await;
        let elsewhere = tempfile::tempdir().unwrap();
        let missing = put_content(&rig.root(0), b"the peer lost this one");
        rig.catalog.set_file(missing, PAIR, 1, false);
        let short = put_content(&rig.root(0), b"the peer has half of this one");
        put_content(elsewhere.path(), b"the peer has half of this one");
        std::fs::write(
            crate::layout::content_file(elsewhere.path(), &short),
            b"the peer has",
        )
        .unwrap();
        rig.catalog.set_file(short, PAIR, 1, false);

        let mut config = rig.config(0);
        config.peer = local_disk(elsewhere.path());
        let w = Worker::new(rig.catalog.clone(), config, rig.clock.clock()).unwrap();
        let r = w.scrub_pass(&Shutdown::never()).await;
        assert_eq!((r.good, r.repaired_peer), (2, 2), "{r:?}");
        assert_eq!(
            std::fs::read(crate::layout::content_file(elsewhere.path(), &missing)).unwrap(),
            b"the peer lost this one"
        );
        assert_eq!(
            std::fs::read(crate::layout::content_file(elsewhere.path(), &short)).unwrap(),
            b"the peer has half of this one"
        );
        assert_eq!(w.scrub_pass(&Shutdown::never()).await.repaired_peer, 0);
    }

    #[tokio::test]
    async fn nothing_is_written_to_a_read_only_pair() {
        let rig = Rig::new().await;
        let sha1 = put_content(&rig.root(0), b"peer failed");
        rig.catalog.set_file(sha1, PAIR, 1, false);
        rig.catalog
            .pairs
            .lock()
            .unwrap()
            .get_mut(&PAIR)
            .unwrap()
            .flags = PairFlags::READ_ONLY;
        let r = rig.worker(0).scrub_pass(&Shutdown::never()).await;
        assert_eq!((r.good, r.repaired_peer), (1, 0), "{r:?}");
        assert!(!rig.content(1, &sha1).exists());
    }

    #[tokio::test]
    async fn an_unreachable_peer_is_an_error_not_a_stop() {
        let rig = Rig::new().await;
        for i in 0..3 {
            let sha1 = put_content(&rig.root(0), format!("file {i}").as_bytes());
            rig.catalog.set_file(sha1, PAIR, 1, false);
        }
        let mut config = rig.config(0);
        // Nothing listens on port 9 of localhost.
        config.peer = placement::Disk::open(&"http://127.0.0.1:9/disk".parse().unwrap()).unwrap();
        let r = Worker::new(rig.catalog.clone(), config, rig.clock.clock())
            .unwrap()
            .scrub_pass(&Shutdown::never())
            .await;
        assert_eq!((r.good, r.errors), (3, 3), "{r:?}");
        assert!(r.completed);
    }
}
