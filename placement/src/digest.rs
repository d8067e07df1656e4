//! One pass over a body computes everything the store needs to know about it.
//!
//! SHA-1 names the content, MD5 is the S3 ETag, CRC32 and the size guard reads (and a
//! SHA-1 collision, as the article's native `GET /sha1` does). Cost on this class of CPU,
//! per core: SHA-1 ~1.9 GB/s, MD5 ~0.64 GB/s, CRC32 ~24 GB/s, so MD5 bounds one pass at
//! ~0.45 GB/s. A streamed body is therefore hashed by [`HashingThreads`]: MD5 on one
//! blocking thread, SHA-1 + CRC32 on another, so one upload is bounded by MD5 alone and
//! both cores work on it while the async threads receive the next chunks.

use std::sync::Arc;

use bytes::Bytes;
use md5::Digest as _;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::vocab::Sha1;

/// Batches queued per hashing thread: bounds the memory a slow hasher can hold back.
const HASH_QUEUE_DEPTH: usize = 4;
/// Chunks are handed to the threads in batches of at least this many bytes: one wake-up
/// per batch instead of one per (often small) received chunk.
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

/// The digests of a body fed chunk by chunk, computed on two blocking threads (MD5;
/// SHA-1 + CRC32 + size) while the caller goes on receiving.
pub struct HashingThreads {
    md5_tx: mpsc::Sender<Arc<[Bytes]>>,
    sha1_tx: mpsc::Sender<Arc<[Bytes]>>,
    batch: Vec<Bytes>,
    batch_bytes: usize,
    md5: JoinHandle<[u8; 16]>,
    sha1: JoinHandle<(Sha1, u32, u64)>,
}

/// A hashing thread went away (it panicked, or the runtime is shutting down).
#[derive(Debug, thiserror::Error)]
#[error("hashing thread failed")]
pub struct HasherGone;

impl HashingThreads {
    pub fn start() -> Self {
        let (md5_tx, mut md5_rx) = mpsc::channel::<Arc<[Bytes]>>(HASH_QUEUE_DEPTH);
        let (sha1_tx, mut sha1_rx) = mpsc::channel::<Arc<[Bytes]>>(HASH_QUEUE_DEPTH);
        let md5 = tokio::task::spawn_blocking(move || {
            let mut h = md5::Md5::new();
            while let Some(batch) = md5_rx.blocking_recv() {
                batch.iter().for_each(|c| h.update(c));
            }
            h.finalize().into()
        });
        let sha1 = tokio::task::spawn_blocking(move || {
            let (mut h, mut crc, mut size) = (sha1::Sha1::new(), crc32fast::Hasher::new(), 0u64);
            while let Some(batch) = sha1_rx.blocking_recv() {
                for chunk in batch.iter() {
                    h.update(chunk);
                    crc.update(chunk);
                    size += chunk.len() as u64;
                }
            }
            (Sha1(h.finalize().into()), crc.finalize(), size)
        });
        HashingThreads {
            md5_tx,
            sha1_tx,
            batch: Vec::new(),
            batch_bytes: 0,
            md5,
            sha1,
        }
    }

    /// Adds one chunk; a full batch goes to both threads (waiting while their queues are
    /// full).
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
        let (a, b) = tokio::join!(self.md5_tx.send(batch.clone()), self.sha1_tx.send(batch));
        a.and(b).map_err(|_| HasherGone)
    }

    /// The digests of everything added.
    pub async fn finish(mut self) -> Result<Digests, HasherGone> {
        self.send_batch().await?;
        let HashingThreads {
            md5_tx,
            sha1_tx,
            md5,
            sha1,
            ..
        } = self;
        drop((md5_tx, sha1_tx));
        let (md5, sha1) = tokio::join!(md5, sha1);
        let (md5, (sha1, crc32, size_bytes)) =
            (md5.map_err(|_| HasherGone)?, sha1.map_err(|_| HasherGone)?);
        Ok(Digests {
            sha1,
            md5,
            crc32,
            size_bytes,
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
    async fn hashing_threads_match_one_pass() {
        let body: Vec<u8> = (0..3_000_001u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut h = HashingThreads::start();
        for chunk in body.chunks(65_537) {
            h.update(Bytes::copy_from_slice(chunk)).await.unwrap();
        }
        assert_eq!(h.finish().await.unwrap(), ContentHasher::digest(&body));
        let empty = HashingThreads::start().finish().await.unwrap();
        assert_eq!(empty, ContentHasher::digest(b""));
    }
}
