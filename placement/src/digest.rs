//! One pass over a body computes everything the store needs to know about it.
//!
//! SHA-1 names the content, MD5 is the S3 ETag, CRC32 and the size guard reads (and a
//! SHA-1 collision, as the article's native `GET /sha1` does). Cost on this class of CPU,
//! per core: SHA-1 ~1.9 GB/s, MD5 ~0.64 GB/s, CRC32 ~24 GB/s, so MD5 bounds one pass at
//! ~0.45 GB/s. A body that arrives in chunks is therefore hashed by [`ParallelHasher`]:
//! MD5 on one blocking task, SHA-1 + CRC32 on another, batch by batch, so one upload is
//! bounded by MD5 alone and both cores work on it while the async threads receive the next
//! batch. Each task hashes one batch and ends: no blocking thread waits on a client, so no
//! number of slow uploads can take the whole blocking pool.

use std::sync::Arc;

use bytes::Bytes;
use md5::Digest as _;
use tokio::task::JoinHandle;

use crate::vocab::Sha1;

/// Chunks are hashed in batches of at least this many bytes: one blocking task per batch
/// and part instead of one per (often small) received chunk.
const HASH_BATCH_BYTES: usize = 512 * 1024;

/// What one pass over a body yields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Digests {
    pub sha1: Sha1,
    pub md5: [u8; 16],
    pub crc32: u32,
    pub size_bytes: u64,
}

/// Incremental SHA-1 + MD5 + CRC32 + size.
#[derive(Clone, Default)]
pub struct ContentHasher {
    sha1: sha1::Sha1,
    md5: md5::Md5,
    crc32: crc32fast::Hasher,
    size_bytes: u64,
}

impl ContentHasher {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn update(&mut self, buf: &[u8]) {
        self.sha1.update(buf);
        self.md5.update(buf);
        self.crc32.update(buf);
        self.size_bytes += buf.len() as u64;
    }

    pub fn finish(self) -> Digests {
        Digests {
            sha1: Sha1(self.sha1.finalize().into()),
            md5: self.md5.finalize().into(),
            crc32: self.crc32.finalize(),
            size_bytes: self.size_bytes,
        }
    }

    /// All digests of a buffer held in memory.
    pub fn digest(buf: &[u8]) -> Digests {
        let mut h = Self::new();
        h.update(buf);
        h.finish()
    }
}

/// The digests of a body fed chunk by chunk, computed batch by batch on two blocking tasks
/// at a time (MD5; SHA-1 + CRC32 + size) while the caller goes on receiving.
pub struct ParallelHasher {
    md5: Part<md5::Md5>,
    sha1: Part<Sha1Crc>,
    batch: Vec<Bytes>,
    batch_bytes: usize,
}

/// A hashing task failed (it panicked, or the runtime is shutting down).
#[derive(Debug, thiserror::Error)]
#[error("hashing task failed")]
pub struct HasherGone;

#[derive(Default)]
struct Sha1Crc {
    sha1: sha1::Sha1,
    crc32: crc32fast::Hasher,
    size_bytes: u64,
}

/// One half of the hashing: idle with its state, or hashing a batch on a blocking task.
enum Part<T> {
    Idle(T),
    Busy(JoinHandle<T>),
    Failed,
}

impl<T: Send + 'static> Part<T> {
    /// The state, once the batch in progress (if any) is done.
    async fn settle(&mut self) -> Result<T, HasherGone> {
        match std::mem::replace(self, Part::Failed) {
            Part::Idle(state) => Ok(state),
            Part::Busy(task) => task.await.map_err(|_| HasherGone),
            Part::Failed => Err(HasherGone),
        }
    }

    /// Starts hashing `batch` once the previous batch is done.
    async fn hash(
        &mut self,
        batch: Arc<[Bytes]>,
        update: fn(&mut T, &[u8]),
    ) -> Result<(), HasherGone> {
        let mut state = self.settle().await?;
        *self = Part::Busy(tokio::task::spawn_blocking(move || {
            batch.iter().for_each(|chunk| update(&mut state, chunk));
            state
        }));
        Ok(())
    }
}

impl Default for ParallelHasher {
    fn default() -> Self {
        ParallelHasher {
            md5: Part::Idle(md5::Md5::new()),
            sha1: Part::Idle(Sha1Crc::default()),
            batch: Vec::new(),
            batch_bytes: 0,
        }
    }
}

impl ParallelHasher {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one chunk; a full batch goes to the hashing tasks (waiting for the previous
    /// batch to be done: at most one batch per part is in flight).
    pub async fn update(&mut self, chunk: Bytes) -> Result<(), HasherGone> {
        self.batch_bytes += chunk.len();
        self.batch.push(chunk);
        if self.batch_bytes >= HASH_BATCH_BYTES {
            self.send_batch().await?;
        }
        Ok(())
    }

    async fn send_batch(&mut self) -> Result<(), HasherGone> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch: Arc<[Bytes]> = std::mem::take(&mut self.batch).into();
        self.batch_bytes = 0;
        let (a, b) = tokio::join!(
            self.md5.hash(batch.clone(), |h, c| h.update(c)),
            self.sha1.hash(batch, |h, c| {
                h.sha1.update(c);
                h.crc32.update(c);
                h.size_bytes += c.len() as u64;
            })
        );
        a.and(b)
    }

    /// The digests of everything added.
    pub async fn finish(mut self) -> Result<Digests, HasherGone> {
        self.send_batch().await?;
        let (md5, sha1) = tokio::join!(self.md5.settle(), self.sha1.settle());
        let (md5, sha1) = (md5?, sha1?);
        Ok(Digests {
            sha1: Sha1(sha1.sha1.finalize().into()),
            md5: md5.finalize().into(),
            crc32: sha1.crc32.finalize(),
            size_bytes: sha1.size_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        let d = ContentHasher::digest(b"abc");
        assert_eq!(d.sha1.to_hex(), "a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(hex::encode(d.md5), "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(d.crc32, 0x352441c2);
        assert_eq!(d.size_bytes, 3);
    }

    #[test]
    fn chunking_does_not_change_the_result() {
        let body: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut h = ContentHasher::new();
        for chunk in body.chunks(4093) {
            h.update(chunk);
        }
        assert_eq!(h.finish(), ContentHasher::digest(&body));
    }

    #[tokio::test]
    async fn the_parallel_hasher_matches_one_pass() {
        let body: Vec<u8> = (0..3_000_001u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut h = ParallelHasher::new();
        for chunk in body.chunks(65_537) {
            h.update(Bytes::copy_from_slice(chunk)).await.unwrap();
        }
        assert_eq!(h.finish().await.unwrap(), ContentHasher::digest(&body));
        let empty = ParallelHasher::new().finish().await.unwrap();
        assert_eq!(empty, ContentHasher::digest(b""));
    }
}
