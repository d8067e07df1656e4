//! The write protocol: stream a body to temp names on both disks of a pair while hashing
//! it, fsync, and only then give the copies their content address.
//!
//! ```text
//! choose pair -> open tmp/<random> on both disks (the probe: fails before any body byte
//! is consumed, so another pair can be tried) -> chunks go to disk0, disk1 and the hasher
//! concurrently -> the caller checks FileDB -> commit (fsync, rename, dir fsync) or
//! discard (the content already exists: the temp copies are removed, never fsynced)
//! ```
//!
//! A crash anywhere leaves at most a temp file or an orphan content file without a
//! record, both of which Valkyrie cleans up; never a record without its file.

use std::sync::Arc;

use bytes::Bytes;

use crate::digest::{Digests, HasherGone, ParallelHasher};
use crate::disk::{Disk, DiskError, TempFile, TempWriter};
use crate::pairdb::PairTable;
use crate::vocab::PairId;

/// How many pairs an upload tries before it gives up.
pub const PROBE_ATTEMPTS_MAX: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("no writable disk pair has room for {size_bytes} bytes")]
    NoSpace { size_bytes: u64 },
    #[error(transparent)]
    Disk(#[from] DiskError),
    #[error(transparent)]
    Hasher(#[from] HasherGone),
    #[error("{written} bytes written for a body hashed at {expected}")]
    LengthMismatch { expected: u64, written: u64 },
    #[error("a probe upload (begun without hashing) was written to or finished")]
    ProbeWritten,
}

/// Chooses a pair for a body of `size_bytes` and opens temp files on both its disks,
/// trying other pairs when a disk refuses (the article's probe before streaming).
pub async fn begin_upload(
    pairs: &PairTable,
    size_bytes: u64,
    root: u32,
) -> Result<PairUpload, WriteError> {
    on_some_pair(pairs, size_bytes, root, PairUpload::begin).await
}

/// [`begin_upload`] for a body hashed elsewhere that will never be written: an empty temp
/// file on both disks of the chosen pair, to [`PairUpload::abandon`] (the probe of a body
/// held in memory, before it is received).
pub async fn begin_upload_unhashed(
    pairs: &PairTable,
    size_bytes: u64,
    root: u32,
) -> Result<PairUpload, WriteError> {
    on_some_pair(pairs, size_bytes, root, PairUpload::begin_unhashed).await
}

/// Writes a body held in memory, hashed elsewhere (`digests`), to temp files on both disks
/// of a chosen pair, trying other pairs when a disk refuses, as [`begin_upload`] does.
/// Each disk gets the whole body at once (for a local disk: one blocking task that
/// creates, writes and starts the writeback of the file).
pub async fn stage_whole(
    pairs: &PairTable,
    digests: Digests,
    chunks: Vec<Bytes>,
    root: u32,
) -> Result<StagedUpload, WriteError> {
    let size_bytes = digests.size_bytes;
    let written: u64 = chunks.iter().map(|c| c.len() as u64).sum();
    if written != size_bytes {
        return Err(WriteError::LengthMismatch {
            expected: size_bytes,
            written,
        });
    }
    on_some_pair(pairs, size_bytes, root, |id, disks| {
        let chunks = chunks.clone();
        async move {
            let [a, b] = Disk::write_temp_pair(&disks, chunks, digests.sha1.master_disk()).await;
            match (a, b) {
                (Ok(t0), Ok(t1)) => Ok(StagedUpload {
                    pair: id,
                    disks,
                    digests,
                    temps: [t0, t1],
                }),
                (a, b) => {
                    let (kept, errors): (Vec<_>, Vec<_>) =
                        [a, b].into_iter().partition(Result::is_ok);
                    for t in kept.into_iter().flatten() {
                        if let Err(e) = t.discard().await {
                            tracing::warn!(error = %e, "could not remove temp file; Valkyrie will");
                        }
                    }
                    let mut errors = errors.into_iter().filter_map(Result::err);
                    let first = errors.next();
                    for other in errors {
                        tracing::warn!(pair = %id, error = %other, "writing a body failed");
                    }
                    Err(first.map_or(WriteError::NoSpace { size_bytes }, WriteError::Disk))
                }
            }
        }
    })
    .await
}

/// Runs `attempt` on pairs chosen for a body of `size_bytes`, trying another pair when it
/// fails (the article's probe before streaming), at most [`PROBE_ATTEMPTS_MAX`] times.
async fn on_some_pair<T, F, Fut>(
    pairs: &PairTable,
    size_bytes: u64,
    root: u32,
    mut attempt: F,
) -> Result<T, WriteError>
where
    F: FnMut(PairId, Arc<[Disk; 2]>) -> Fut,
    Fut: std::future::Future<Output = Result<T, WriteError>>,
{
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
        match attempt(id, entry.disks).await {
            Ok(done) => return Ok(done),
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
    /// `None` for a probe: begun only to be [`abandon`](PairUpload::abandon)ed.
    hasher: Option<Box<ParallelHasher>>,
}

impl PairUpload {
    /// Opens temp files on both disks of `pair`.
    pub async fn begin(pair: PairId, disks: Arc<[Disk; 2]>) -> Result<Self, WriteError> {
        let writers = Self::open_temps(&disks).await?;
        Ok(PairUpload {
            pair,
            disks,
            writers,
            hasher: Some(Box::default()),
        })
    }

    /// Opens temp files on both disks of `pair` for a probe, never written.
    pub async fn begin_unhashed(pair: PairId, disks: Arc<[Disk; 2]>) -> Result<Self, WriteError> {
        let writers = Self::open_temps(&disks).await?;
        Ok(PairUpload {
            pair,
            disks,
            writers,
            hasher: None,
        })
    }

    async fn open_temps(disks: &[Disk; 2]) -> Result<[TempWriter; 2], WriteError> {
        let (a, b) = tokio::join!(disks[0].begin_temp(), disks[1].begin_temp());
        Ok([a?, b?])
    }

    pub fn pair(&self) -> PairId {
        self.pair
    }

    /// Sends one chunk to both disks and to the hasher.
    pub async fn write(&mut self, chunk: Bytes) -> Result<(), WriteError> {
        let Some(h) = &mut self.hasher else {
            return Err(WriteError::ProbeWritten);
        };
        let [w0, w1] = &mut self.writers;
        let (a, b, h) = tokio::join!(
            w0.write(chunk.clone()),
            w1.write(chunk.clone()),
            h.update(chunk)
        );
        a?;
        b?;
        Ok(h?)
    }

    /// Completes both temp files and returns the digests of everything written (the fsync
    /// comes with [`StagedUpload::commit`]).
    pub async fn finish(self) -> Result<StagedUpload, WriteError> {
        let PairUpload {
            pair,
            disks,
            writers,
            hasher,
        } = self;
        let [w0, w1] = writers;
        let digests = async move {
            match hasher {
                Some(h) => h.finish().await.map_err(WriteError::from),
                None => Err(WriteError::ProbeWritten),
            }
        };
        let (a, b, h) = tokio::join!(w0.finish(), w1.finish(), digests);
        let temps = [a?, b?];
        match h {
            Ok(digests) => Ok(StagedUpload {
                pair,
                disks,
                digests,
                temps,
            }),
            Err(e) => {
                discard_temps(temps).await;
                Err(e)
            }
        }
    }

    /// Ends the upload without keeping anything: both temp files are completed and removed
    /// (a probe, or a body that will not be stored).
    pub async fn abandon(self) {
        let [w0, w1] = self.writers;
        let (a, b) = tokio::join!(w0.finish(), w1.finish());
        match (a, b) {
            (Ok(t0), Ok(t1)) => discard_temps([t0, t1]).await,
            // A writer that failed removes its file when dropped; so does a completed temp
            // file left without a name.
            (a, b) => {
                for e in [a.err(), b.err()].into_iter().flatten() {
                    tracing::warn!(error = %e, "abandoned upload: temp file not completed");
                }
            }
        }
    }
}

/// Removes both temp files, logging (not failing on) what could not be removed: Valkyrie
/// removes old temp files.
async fn discard_temps([t0, t1]: [TempFile; 2]) {
    let (a, b) = tokio::join!(t0.discard(), t1.discard());
    for e in [a.err(), b.err()].into_iter().flatten() {
        tracing::warn!(error = %e, "could not remove temp file; Valkyrie will");
    }
}

/// Both copies on disk under temp names, with their digests known.
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
        let [a, b] = TempFile::commit_pair(self.temps, &sha1).await;
        a?;
        b?;
        Ok(())
    }

    /// Removes both temp files: the content was already stored.
    pub async fn discard(self) {
        discard_temps(self.temps).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::ContentHasher;
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
    async fn a_whole_body_goes_to_another_pair_when_a_disk_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let pairs = PairTable::new();
        // Pair 0's second disk is a plain file: no temp file can be made in it.
        std::fs::write(dir.path().join("not-a-dir"), b"").unwrap();
        for (id, d1) in [(0, "not-a-dir"), (1, "b1")] {
            let mut rec = PairRecord::new([
                DiskRef::local(dir.path().join(format!("a{id}"))),
                DiskRef::local(dir.path().join(d1)),
            ]);
            rec.free_bytes = [1 << 30, 1 << 30];
            pairs.upsert(PairId(id), rec).unwrap();
        }
        // A small body (both copies by one task) and a large one (a task per disk).
        let large: Vec<u8> = (0..crate::disk::ONE_TASK_PAIR_BYTES + 1)
            .map(|i| (i % 251) as u8)
            .collect();
        for body in [b"held in memory".to_vec(), large] {
            let digests = ContentHasher::digest(&body);
            let (head, tail) = body.split_at(5);
            let chunks = vec![Bytes::copy_from_slice(head), Bytes::copy_from_slice(tail)];
            let mut landed = std::collections::HashSet::new();
            // Whichever pair is chosen first, every body ends on pair 1, and pair 0 keeps
            // no temp file.
            for root in 0..8 {
                let staged = stage_whole(&pairs, digests, chunks.clone(), root)
                    .await
                    .unwrap();
                landed.insert(staged.pair);
                let disks = staged.disks.clone();
                staged.commit().await.unwrap();
                for d in disks.iter() {
                    assert_eq!(&d.read_all(&digests.sha1).await.unwrap()[..], &body[..]);
                }
            }
            assert_eq!(landed, [PairId(1)].into());
            let temps = std::fs::read_dir(dir.path().join("a0").join(crate::disk::TMP_DIR))
                .map(|d| d.count())
                .unwrap_or(0);
            assert_eq!(temps, 0);
        }
        let digests = ContentHasher::digest(b"held in memory");
        // A body that is not the size its digests say is refused before any write.
        let short = vec![Bytes::from_static(b"held")];
        assert!(matches!(
            stage_whole(&pairs, digests, short, 0).await,
            Err(WriteError::LengthMismatch { .. })
        ));
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
