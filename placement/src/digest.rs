//! One pass over a body computes everything the store needs to know about it.
//!
//! SHA-1 names the content, MD5 is the S3 ETag, CRC32 and the size guard reads (and a
//! SHA-1 collision, as the article's native `GET /sha1` does). Cost on this class of CPU,
//! per core: SHA-1 ~1.9 GB/s, MD5 ~0.64 GB/s, CRC32 ~24 GB/s, so MD5 bounds one pass at
//! ~0.45 GB/s.
//!
//! The SHA-1 is computed with collision detection ([`NameHasher`], the `sha1dc` crate:
//! Stevens and Shumow's counter-cryptanalysis, as Git uses, on SHA-NI; measured here at
//! 0.85-0.94 of plain SHA-1's throughput, still ~2.5x MD5, where `sha1collisiondetection`
//! ran at 0.17-0.3). Public
//! identical-prefix (SHAttered) and chosen-prefix (Shambles) collisions let two different
//! attachments share one SHA-1, which would deduplicate them into one file and serve one
//! user's bytes to another. A body that carries such an attack is named by sha1dc's
//! *mitigated* digest instead, a value no other known message shares: it is stored under
//! its own name and never deduplicated against its twin. Every body without an attack
//! keeps its plain SHA-1, so the names of everything stored before are unchanged. A body that arrives in chunks is therefore hashed by [`ParallelHasher`]:
//! MD5 on one blocking task, SHA-1 + CRC32 on another, batch by batch, so one upload is
//! bounded by MD5 alone and both cores work on it while the async threads receive the next
//! batch. Each task hashes one batch and ends: no blocking thread waits on a client, so no
//! number of slow uploads can take the whole blocking pool.
//!
//! Detection can be turned off for a whole process ([`set_collision_detection`], the
//! gateway's `--sha1-collision-detection off`), to measure what it costs: names are then the
//! plain SHA-1 (the `sha1` crate), identical for every body without an attack, and the
//! two bodies of a collision get one name and are deduplicated into one file.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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
    /// The content's name: its SHA-1, or its mitigated digest if `collision_attack`.
    pub sha1: Sha1,
    pub md5: [u8; 16],
    pub crc32: u32,
    pub size_bytes: u64,
    /// The body carries a SHA-1 collision attack (its `sha1` is not its plain SHA-1).
    pub collision_attack: bool,
}

/// Whether new [`NameHasher`]s detect collision attacks (on unless turned off at start).
static COLLISION_DETECTION: AtomicBool = AtomicBool::new(true);

/// Turns SHA-1 collision detection on or off for every [`NameHasher`] made after it. A
/// process-wide setting because every component that names content (uploads, the
/// scrubber, repair) must agree on the names; set once at start, before serving.
pub fn set_collision_detection(on: bool) {
    COLLISION_DETECTION.store(on, Ordering::Relaxed);
}

/// Whether new [`NameHasher`]s detect collision attacks.
pub fn collision_detection() -> bool {
    COLLISION_DETECTION.load(Ordering::Relaxed)
}

/// The name of a content: SHA-1 with collision detection (see the module doc), or plain
/// SHA-1 where detection is off.
#[derive(Clone)]
pub enum NameHasher {
    Detecting(sha1dc::mitigate::Hasher),
    Plain(sha1::Sha1),
}

impl Default for NameHasher {
    fn default() -> Self {
        Self::with_detection(collision_detection())
    }
}

/// A content's name and whether a collision attack was found while computing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContentName {
    pub sha1: Sha1,
    pub collision_attack: bool,
}

impl NameHasher {
    /// A hasher as the process is set ([`set_collision_detection`]).
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_detection(on: bool) -> Self {
        if on {
            NameHasher::Detecting(sha1dc::mitigate::Hasher::default())
        } else {
            NameHasher::Plain(sha1::Sha1::default())
        }
    }

    pub fn update(&mut self, buf: &[u8]) {
        match self {
            NameHasher::Detecting(h) => h.update(buf),
            NameHasher::Plain(h) => sha1::Digest::update(h, buf),
        }
    }

    pub fn finish(self) -> ContentName {
        let h = match self {
            NameHasher::Detecting(h) => h,
            NameHasher::Plain(h) => {
                return ContentName {
                    sha1: Sha1(sha1::Digest::finalize(h).into()),
                    collision_attack: false,
                };
            }
        };
        match h.finalize() {
            Ok(d) => ContentName {
                sha1: Sha1(d.to_bytes()),
                collision_attack: false,
            },
            Err(attack) => ContentName {
                sha1: Sha1(attack.digest().to_bytes()),
                collision_attack: true,
            },
        }
    }

    /// The name of a buffer held in memory: what a stored copy must hash to.
    pub fn name_of(buf: &[u8]) -> Sha1 {
        let mut h = Self::new();
        h.update(buf);
        h.finish().sha1
    }
}

/// Incremental SHA-1 (collision-detecting) + MD5 + CRC32 + size.
#[derive(Clone, Default)]
pub struct ContentHasher {
    sha1: NameHasher,
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
        let name = self.sha1.finish();
        Digests {
            sha1: name.sha1,
            md5: self.md5.finalize().into(),
            crc32: self.crc32.finalize(),
            size_bytes: self.size_bytes,
            collision_attack: name.collision_attack,
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
    sha1: NameHasher,
    crc32: crc32fast::Hasher,
    size_bytes: u64,
}

impl Sha1Crc {
    fn update(&mut self, chunk: &[u8]) {
        self.sha1.update(chunk);
        self.crc32.update(chunk);
        self.size_bytes += chunk.len() as u64;
    }
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
            self.sha1.hash(batch, Sha1Crc::update)
        );
        a.and(b)
    }

    /// The digests of everything added.
    ///
    /// The last, partial batch (for a body under a batch, the whole body) is hashed by one
    /// blocking task for both parts once the batches in flight are done: for a small body
    /// one hand-off instead of two, where the two halves in parallel would save less time
    /// than the second task's wake-up costs (32 connections keep both cores busy anyway).
    pub async fn finish(mut self) -> Result<Digests, HasherGone> {
        let (md5, sha1) = tokio::join!(self.md5.settle(), self.sha1.settle());
        let (mut md5, mut sha1) = (md5?, sha1?);
        let tail = std::mem::take(&mut self.batch);
        if !tail.is_empty() {
            (md5, sha1) = tokio::task::spawn_blocking(move || {
                for chunk in &tail {
                    md5.update(chunk);
                    sha1.update(chunk);
                }
                (md5, sha1)
            })
            .await
            .map_err(|_| HasherGone)?;
        }
        let name = sha1.sha1.finish();
        Ok(Digests {
            sha1: name.sha1,
            md5: md5.finalize().into(),
            crc32: sha1.crc32.finalize(),
            size_bytes: sha1.size_bytes,
            collision_attack: name.collision_attack,
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
        assert!(!d.collision_attack);
    }

    fn collision_pair(a: &str, b: &str) -> (Vec<u8>, Vec<u8>) {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data");
        let read = |n: &str| std::fs::read(dir.join(n)).expect("test data in tests/data");
        (read(a), read(b))
    }

    /// The two bodies of a real collision share a plain SHA-1 but get distinct names,
    /// both flagged, in one pass as in the parallel hasher.
    async fn names_a_collision_apart(a: &str, b: &str) {
        use sha1::Digest as _;
        let (one, two) = collision_pair(a, b);
        assert_ne!(one, two);
        assert_eq!(sha1::Sha1::digest(&one), sha1::Sha1::digest(&two));
        let (d1, d2) = (ContentHasher::digest(&one), ContentHasher::digest(&two));
        assert!(d1.collision_attack && d2.collision_attack);
        assert_ne!(d1.sha1, d2.sha1);
        assert_ne!(d1.sha1.0, <[u8; 20]>::from(sha1::Sha1::digest(&one)));
        assert_eq!(NameHasher::name_of(&one), d1.sha1);
        let mut h = ParallelHasher::new();
        for chunk in one.chunks(7_001) {
            h.update(Bytes::copy_from_slice(chunk)).await.unwrap();
        }
        assert_eq!(h.finish().await.unwrap(), d1);
    }

    /// Detection off: the plain SHA-1, so a collision's two bodies share one name (the
    /// risk `--sha1-collision-detection off` takes), and every other body keeps its name.
    #[test]
    fn without_detection_names_are_the_plain_sha1() {
        use sha1::Digest as _;
        let (one, two) = collision_pair("shattered-1.pdf", "shattered-2.pdf");
        let name = |b: &[u8]| {
            let mut h = NameHasher::with_detection(false);
            h.update(b);
            h.finish()
        };
        let (n1, n2) = (name(&one), name(&two));
        assert_eq!(n1, n2);
        assert!(!n1.collision_attack);
        assert_eq!(n1.sha1.0, <[u8; 20]>::from(sha1::Sha1::digest(&one)));
        let mut on = NameHasher::with_detection(true);
        on.update(b"abc");
        assert_eq!(on.finish(), name(b"abc"));
    }

    #[tokio::test]
    async fn shattered_pdfs_get_distinct_names() {
        names_a_collision_apart("shattered-1.pdf", "shattered-2.pdf").await;
    }

    #[tokio::test]
    async fn shambles_pair_gets_distinct_names() {
        names_a_collision_apart("sha-mbles-1.bin", "sha-mbles-2.bin").await;
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
        // Only a tail (a small body, hashed by one task), and no tail (whole batches).
        for (len, chunk) in [(100_000, 4_093), (2 * HASH_BATCH_BYTES, HASH_BATCH_BYTES)] {
            let body = &body[..len];
            let mut h = ParallelHasher::new();
            for c in body.chunks(chunk) {
                h.update(Bytes::copy_from_slice(c)).await.unwrap();
            }
            assert_eq!(
                h.finish().await.unwrap(),
                ContentHasher::digest(body),
                "{len}"
            );
        }
    }
}
