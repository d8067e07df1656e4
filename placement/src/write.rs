//! The write protocol: stream a body to temp names on both disks of a pair while hashing
//! it, fsync, and only then give the copies their content address.
//!
//! ```text
//! choose pair -> open tmp/<random> on both disks (the probe: fails before any body byte
//! is consumed, so another pair can be tried) -> chunks go to disk0, disk1 and the hasher
//! concurrently -> fsync both -> the caller checks FileDB -> commit (rename + dir fsync)
//! or discard (the content already exists)
//! ```
//!
//! A crash anywhere leaves at most a temp file or an orphan content file without a
//! record, both of which Valkyrie cleans up; never a record without its file.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::digest::{ContentHasher, Digests};
use crate::disk::{Disk, DiskError, TempFile, TempWriter};
use crate::pairdb::PairTable;
use crate::vocab::PairId;

/// How many pairs an upload tries before it gives up.
pub const PROBE_ATTEMPTS_MAX: usize = 4;
const HASH_QUEUE_DEPTH: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("no writable disk pair has room for {size_bytes} bytes")]
    NoSpace { size_bytes: u64 },
    #[error(transparent)]
    Disk(#[from] DiskError),
    #[error("hashing thread failed")]
    Hasher,
}

/// Chooses a pair for a body of `size_bytes` and opens temp files on both its disks,
/// trying other pairs when a disk refuses (the article's probe before streaming).
pub async fn begin_upload(
    pairs: &PairTable,
    size_bytes: u64,
    root: u32,
) -> Result<PairUpload, WriteError> {
    let mut failed = Vec::new();
    let mut last_error = None;
    for _ in 0..PROBE_ATTEMPTS_MAX {
        let Some(id) = pairs.choose(size_bytes, root, &failed) else {
            break;
        };
        let Some(entry) = pairs.get(id) else {
            failed.push(id);
            continue;
        };
        match PairUpload::begin(id, entry.disks).await {
            Ok(upload) => return Ok(upload),
            Err(e) => {
                tracing::warn!(pair = %id, error = %e, "probe failed, choosing another pair");
                failed.push(id);
                last_error = Some(e);
            }
        }
    }
    Err(last_error.unwrap_or(WriteError::NoSpace { size_bytes }))
}

/// An upload in flight on one pair.
pub struct PairUpload {
    pair: PairId,
    disks: Arc<[Disk; 2]>,
    writers: [TempWriter; 2],
    hash_tx: mpsc::Sender<Bytes>,
    hash_join: JoinHandle<Digests>,
}

impl PairUpload {
    /// Opens temp files on both disks of `pair`.
    pub async fn begin(pair: PairId, disks: Arc<[Disk; 2]>) -> Result<Self, WriteError> {
        let (a, b) = tokio::join!(disks[0].begin_temp(), disks[1].begin_temp());
        let writers = [a?, b?];
        let (hash_tx, mut rx) = mpsc::channel::<Bytes>(HASH_QUEUE_DEPTH);
        let hash_join = tokio::task::spawn_blocking(move || {
            let mut h = ContentHasher::new();
            while let Some(chunk) = rx.blocking_recv() {
                h.update(&chunk);
            }
            h.finish()
        });
        Ok(PairUpload {
            pair,
            disks,
            writers,
            hash_tx,
            hash_join,
        })
    }

    pub fn pair(&self) -> PairId {
        self.pair
    }

    /// Sends one chunk to both disks and the hasher.
    pub async fn write(&mut self, chunk: Bytes) -> Result<(), WriteError> {
        let [w0, w1] = &mut self.writers;
        let (a, b, h) = tokio::join!(
            w0.write(chunk.clone()),
            w1.write(chunk.clone()),
            self.hash_tx.send(chunk)
        );
        a?;
        b?;
        h.map_err(|_| WriteError::Hasher)
    }

    /// Fsyncs both temp files and returns the digests of everything written.
    pub async fn finish(self) -> Result<StagedUpload, WriteError> {
        let PairUpload {
            pair,
            disks,
            writers,
            hash_tx,
            hash_join,
        } = self;
        drop(hash_tx);
        let [w0, w1] = writers;
        let (a, b, h) = tokio::join!(w0.finish(), w1.finish(), hash_join);
        let temps = [a?, b?];
        let digests = h.map_err(|_| WriteError::Hasher)?;
        Ok(StagedUpload {
            pair,
            disks,
            digests,
            temps,
        })
    }
}

/// Both copies on disk under temp names, fsynced, with their digests known.
pub struct StagedUpload {
    pub pair: PairId,
    pub disks: Arc<[Disk; 2]>,
    pub digests: Digests,
    temps: [TempFile; 2],
}

impl StagedUpload {
    /// Renames both copies to the content address. Both must succeed: a record may only
    /// point at a pair when both its disks hold the file.
    pub async fn commit(self) -> Result<(), WriteError> {
        let sha1 = self.digests.sha1;
        let [t0, t1] = self.temps;
        let (a, b) = tokio::join!(t0.commit(&sha1), t1.commit(&sha1));
        a?;
        b?;
        Ok(())
    }

    /// Removes both temp files: the content was already stored.
    pub async fn discard(self) {
        let [t0, t1] = self.temps;
        let (a, b) = tokio::join!(t0.discard(), t1.discard());
        for e in [a.err(), b.err()].into_iter().flatten() {
            tracing::warn!(error = %e, "could not remove temp file; Valkyrie will");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pairdb::PairRecord;
    use crate::vocab::DiskRef;

    #[tokio::test]
    async fn a_body_lands_on_both_disks_with_its_digests() {
        let dir = tempfile::tempdir().unwrap();
        let pairs = PairTable::new();
        let mut rec = PairRecord::new([
            DiskRef::local(dir.path().join("d0")),
            DiskRef::local(dir.path().join("d1")),
        ]);
        rec.free_bytes = [1 << 30, 1 << 30];
        pairs.upsert(PairId(0), rec).unwrap();
        let mut up = begin_upload(&pairs, 10, 2).await.unwrap();
        up.write(Bytes::from_static(b"hello ")).await.unwrap();
        up.write(Bytes::from_static(b"world")).await.unwrap();
        let staged = up.finish().await.unwrap();
        let expect = ContentHasher::digest(b"hello world");
        assert_eq!(staged.digests, expect);
        let disks = staged.disks.clone();
        staged.commit().await.unwrap();
        for d in disks.iter() {
            assert_eq!(&d.read_all(&expect.sha1).await.unwrap()[..], b"hello world");
        }
    }

    #[tokio::test]
    async fn no_writable_pair_is_no_space() {
        let pairs = PairTable::new();
        assert!(matches!(
            begin_upload(&pairs, 10, 2).await,
            Err(WriteError::NoSpace { .. })
        ));
    }
}
