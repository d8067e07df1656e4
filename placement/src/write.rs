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
    #[error("digests given to an upload that hashes, or missing for one that does not")]
    DigestsMisused,
}

/// Chooses a pair for a body of `size_bytes` and opens temp files on both its disks,
/// trying other pairs when a disk refuses (the article's probe before streaming).
pub async fn begin_upload(
    pairs: &PairTable,
    size_bytes: u64,
    root: u32,
) -> Result<PairUpload, WriteError> {
    begin_on_some_pair(pairs, size_bytes, root, true).await
}

/// [`begin_upload`] for a body hashed elsewhere (it is held in memory): the chunks go to
/// both disks without a hashing pass, and [`PairUpload::finish_hashed`] takes the digests
/// and checks that exactly their size was written.
pub async fn begin_upload_unhashed(
    pairs: &PairTable,
    size_bytes: u64,
    root: u32,
) -> Result<PairUpload, WriteError> {
    begin_on_some_pair(pairs, size_bytes, root, false).await
}

async fn begin_on_some_pair(
    pairs: &PairTable,
    size_bytes: u64,
    root: u32,
    hashing: bool,
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
        let begun = if hashing {
            PairUpload::begin(id, entry.disks).await
        } else {
            PairUpload::begin_unhashed(id, entry.disks).await
        };
        match begun {
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
    digesting: Digesting,
}

/// Where an upload's digests come from.
enum Digesting {
    /// Hashed as it is written.
    Hashing(Box<ParallelHasher>),
    /// Computed elsewhere (the body is hashed in memory) and given to
    /// [`PairUpload::finish_hashed`]; only the length written is counted, to be checked
    /// against them.
    Elsewhere { written: u64 },
}

impl PairUpload {
    /// Opens temp files on both disks of `pair`.
    pub async fn begin(pair: PairId, disks: Arc<[Disk; 2]>) -> Result<Self, WriteError> {
        let writers = Self::open_temps(&disks).await?;
        Ok(PairUpload {
            pair,
            disks,
            writers,
            digesting: Digesting::Hashing(Box::default()),
        })
    }

    /// Opens temp files on both disks of `pair` for a body hashed elsewhere.
    pub async fn begin_unhashed(pair: PairId, disks: Arc<[Disk; 2]>) -> Result<Self, WriteError> {
        let writers = Self::open_temps(&disks).await?;
        Ok(PairUpload {
            pair,
            disks,
            writers,
            digesting: Digesting::Elsewhere { written: 0 },
        })
    }

    async fn open_temps(disks: &[Disk; 2]) -> Result<[TempWriter; 2], WriteError> {
        let (a, b) = tokio::join!(disks[0].begin_temp(), disks[1].begin_temp());
        Ok([a?, b?])
    }

    pub fn pair(&self) -> PairId {
        self.pair
    }

    /// Sends one chunk to both disks (and to the hasher, if hashing).
    pub async fn write(&mut self, chunk: Bytes) -> Result<(), WriteError> {
        let [w0, w1] = &mut self.writers;
        let hashed = async {
            match &mut self.digesting {
                Digesting::Hashing(h) => h.update(chunk.clone()).await.map_err(WriteError::from),
                Digesting::Elsewhere { written } => {
                    *written += chunk.len() as u64;
                    Ok(())
                }
            }
        };
        let (a, b, h) = tokio::join!(w0.write(chunk.clone()), w1.write(chunk.clone()), hashed);
        a?;
        b?;
        h
    }

    /// Sends a whole body held in memory to both disks at once (one `writev` per local
    /// disk); only for an upload begun with [`Self::begin_unhashed`].
    pub async fn write_all(&mut self, chunks: Vec<Bytes>) -> Result<(), WriteError> {
        let Digesting::Elsewhere { written } = &mut self.digesting else {
            return Err(WriteError::DigestsMisused);
        };
        *written += chunks.iter().map(|c| c.len() as u64).sum::<u64>();
        let [w0, w1] = &mut self.writers;
        let (a, b) = tokio::join!(w0.write_many(chunks.clone()), w1.write_many(chunks));
        a?;
        b?;
        Ok(())
    }

    /// Completes both temp files and returns the digests of everything written (the fsync
    /// comes with [`StagedUpload::commit`]).
    pub async fn finish(self) -> Result<StagedUpload, WriteError> {
        self.finish_with(None).await
    }

    /// [`finish`](Self::finish) for an upload begun with [`Self::begin_unhashed`]: `digests`
    /// are the body's, computed elsewhere.
    pub async fn finish_hashed(self, digests: Digests) -> Result<StagedUpload, WriteError> {
        self.finish_with(Some(digests)).await
    }

    async fn finish_with(self, given: Option<Digests>) -> Result<StagedUpload, WriteError> {
        let PairUpload {
            pair,
            disks,
            writers,
            digesting,
        } = self;
        let [w0, w1] = writers;
        let digests = async move {
            match (digesting, given) {
                (Digesting::Hashing(h), None) => h.finish().await.map_err(WriteError::from),
                (Digesting::Elsewhere { written }, Some(d)) if written == d.size_bytes => Ok(d),
                (Digesting::Elsewhere { written }, Some(d)) => Err(WriteError::LengthMismatch {
                    expected: d.size_bytes,
                    written,
                }),
                (_, _) => Err(WriteError::DigestsMisused),
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
    async fn no_writable_pair_is_no_space() {
        let pairs = PairTable::new();
        assert!(matches!(
            begin_upload(&pairs, 10, 2).await,
            Err(WriteError::NoSpace { .. })
        ));
    }
}
