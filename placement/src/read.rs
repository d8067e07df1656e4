//! The verified read: the bytes served must match the size and CRC32 recorded at upload.
//!
//! Small bodies (up to [`VERIFY_BEFORE_SEND_BYTES_MAX`]) are read whole and checked before
//! the first byte leaves; a bad or missing copy is skipped for the other one. Larger bodies
//! are checked while streaming: the last chunk is held back until the CRC32 of everything
//! before it is known, so a mismatch ends the response short of its Content-Length and the
//! client sees a failed transfer, never wrong bytes that look complete. The bad copy is
//! remembered in [`BadCopies`] so that the next read starts from the other disk.
//!
//! A ranged read of a large body cannot check a CRC32 over bytes it does not read; it
//! checks the size and relies on the scrubber for the content.

use std::collections::HashSet;
use std::io;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::StreamExt as _;

use crate::disk::{ByteStream, Disk, DiskError};
use crate::vocab::{DiskRef, Sha1};

/// Bodies up to this size are verified before the first byte is sent.
pub const VERIFY_BEFORE_SEND_BYTES_MAX: u64 = 1024 * 1024;
/// Bound on remembered bad copies; past it the set starts over (repair is Valkyrie's job,
/// this is only a hint for read order).
const BAD_COPIES_MAX: usize = 100_000;

/// What the metadata says a content file must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expect {
    pub size_bytes: u64,
    pub crc32: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("no good copy of {sha1} on either disk of its pair")]
    NoGoodCopy { sha1: Sha1 },
}

/// Copies found missing or corrupt, read last until repaired.
#[derive(Default)]
pub struct BadCopies(Mutex<HashSet<(Sha1, DiskRef)>>);

impl BadCopies {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn mark(&self, sha1: Sha1, disk: &DiskRef) {
        let mut set = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if set.len() >= BAD_COPIES_MAX {
            set.clear();
        }
        set.insert((sha1, disk.clone()));
    }

    pub fn contains(&self, sha1: Sha1, disk: &DiskRef) -> bool {
        let set = self.0.lock().unwrap_or_else(|e| e.into_inner());
        set.contains(&(sha1, disk.clone()))
    }

    /// Forgets a copy once it has been repaired.
    pub fn clear(&self, sha1: Sha1, disk: &DiskRef) {
        let mut set = self.0.lock().unwrap_or_else(|e| e.into_inner());
        set.remove(&(sha1, disk.clone()));
    }

    /// Disk order for a read: the sha1's master disk first, known bad copies last.
    pub fn read_order(&self, sha1: Sha1, disks: &[Disk; 2]) -> [usize; 2] {
        let first = sha1.master_disk();
        let order = [first, 1 - first];
        if self.contains(sha1, disks[first].disk_ref()) {
            [order[1], order[0]]
        } else {
            order
        }
    }
}

fn report_bad(bad: &BadCopies, sha1: Sha1, disk: &Disk, why: &str) {
    tracing::error!(%sha1, disk = %disk.disk_ref(), why, "bad copy, using the other disk");
    bad.mark(sha1, disk.disk_ref());
}

fn describe(e: &DiskError) -> String {
    if e.is_not_found() {
        "missing".into()
    } else {
        e.to_string()
    }
}

/// Reads a whole small body and verifies it before returning it.
pub async fn read_verified(
    disks: &[Disk; 2],
    sha1: Sha1,
    expect: Expect,
    bad: &BadCopies,
) -> Result<Bytes, ReadError> {
    for i in bad.read_order(sha1, disks) {
        match disks[i].read_all(&sha1).await {
            Ok(body)
                if body.len() as u64 == expect.size_bytes
                    && crc32fast::hash(&body) == expect.crc32 =>
            {
                return Ok(body);
            }
            Ok(_) => report_bad(bad, sha1, &disks[i], "size or crc32 mismatch"),
            Err(e) => report_bad(bad, sha1, &disks[i], &describe(&e)),
        }
    }
    Err(ReadError::NoGoodCopy { sha1 })
}

/// Opens a stream of a large body (or of `range` of it), choosing a copy with the right
/// size; a whole-body stream verifies the CRC32 as it goes.
pub async fn stream_verified(
    disks: &[Disk; 2],
    sha1: Sha1,
    expect: Expect,
    range: Option<(u64, u64)>,
    bad: Arc<BadCopies>,
) -> Result<ByteStream, ReadError> {
    for i in bad.read_order(sha1, disks) {
        let disk = &disks[i];
        match disk.size_of(&sha1).await {
            Ok(Some(size)) if size == expect.size_bytes => {}
            Ok(Some(_)) => {
                report_bad(&bad, sha1, disk, "size mismatch");
                continue;
            }
            Ok(None) => {
                report_bad(&bad, sha1, disk, "missing");
                continue;
            }
            Err(e) => {
                report_bad(&bad, sha1, disk, &e.to_string());
                continue;
            }
        }
        let (offset, len) = range.unwrap_or((0, expect.size_bytes));
        match disk.read_range(&sha1, offset, len).await {
            Ok(stream) if range.is_some() => return Ok(stream),
            Ok(stream) => {
                return Ok(crc_checked(
                    stream,
                    sha1,
                    expect,
                    disk.disk_ref().clone(),
                    bad,
                ));
            }
            Err(e) => report_bad(&bad, sha1, disk, &describe(&e)),
        }
    }
    Err(ReadError::NoGoodCopy { sha1 })
}

struct CrcState {
    inner: ByteStream,
    crc: crc32fast::Hasher,
    seen_bytes: u64,
    held: Option<Bytes>,
    done: bool,
}

/// Wraps a whole-body stream so that its last chunk is released only when the CRC32 and
/// size of the whole body match; otherwise the stream ends with an error.
fn crc_checked(
    inner: ByteStream,
    sha1: Sha1,
    expect: Expect,
    disk: DiskRef,
    bad: Arc<BadCopies>,
) -> ByteStream {
    let state = CrcState {
        inner,
        crc: crc32fast::Hasher::new(),
        seen_bytes: 0,
        held: None,
        done: false,
    };
    Box::pin(futures_util::stream::unfold(state, move |mut st| {
        let disk = disk.clone();
        let bad = bad.clone();
        async move {
            if st.done {
                return None;
            }
            loop {
                match st.inner.next().await {
                    Some(Ok(chunk)) => {
                        st.crc.update(&chunk);
                        st.seen_bytes += chunk.len() as u64;
                        if let Some(prev) = st.held.replace(chunk) {
                            return Some((Ok(prev), st));
                        }
                    }
                    Some(Err(e)) => {
                        st.done = true;
                        return Some((Err(e), st));
                    }
                    None => {
                        st.done = true;
                        let crc = std::mem::take(&mut st.crc).finalize();
                        if st.seen_bytes == expect.size_bytes && crc == expect.crc32 {
                            return st.held.take().map(|last| (Ok(last), st));
                        }
                        tracing::error!(%sha1, %disk, "crc32 mismatch while streaming; aborting");
                        bad.mark(sha1, &disk);
                        let err = io::Error::new(io::ErrorKind::InvalidData, "crc32 mismatch");
                        return Some((Err(err), st));
                    }
                }
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::ContentHasher;
    use crate::pairdb::{PairRecord, PairTable};
    use crate::vocab::PairId;
    use crate::write::begin_upload;

    async fn stored(body: &[u8]) -> (tempfile::TempDir, Arc<[Disk; 2]>, Sha1, Expect) {
        let dir = tempfile::tempdir().unwrap();
        let pairs = PairTable::new();
        let mut rec = PairRecord::new([
            DiskRef::local(dir.path().join("d0")),
            DiskRef::local(dir.path().join("d1")),
        ]);
        rec.free_bytes = [1 << 30, 1 << 30];
        pairs.upsert(PairId(0), rec).unwrap();
        let mut up = begin_upload(&pairs, body.len() as u64, 2).await.unwrap();
        for c in body.chunks(100_000) {
            up.write(Bytes::copy_from_slice(c)).await.unwrap();
        }
        let staged = up.finish().await.unwrap();
        let d = staged.digests;
        let disks = staged.disks.clone();
        staged.commit().await.unwrap();
        let expect = Expect {
            size_bytes: d.size_bytes,
            crc32: d.crc32,
        };
        (dir, disks, d.sha1, expect)
    }

    fn corrupt(disk: &Disk, sha1: &Sha1) {
        let Disk::Local(d) = disk else {
            panic!("corrupt() only knows local disks")
        };
        let path = d.content_file(sha1);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[0] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
    }

    #[tokio::test]
    async fn small_read_skips_a_corrupt_copy() {
        let body = b"attachment bytes".repeat(100);
        let (_dir, disks, sha1, expect) = stored(&body).await;
        let bad = BadCopies::new();
        corrupt(&disks[sha1.master_disk()], &sha1);
        assert_eq!(
            read_verified(&disks, sha1, expect, &bad).await.unwrap(),
            body
        );
        assert!(bad.contains(sha1, disks[sha1.master_disk()].disk_ref()));
        corrupt(&disks[1 - sha1.master_disk()], &sha1);
        assert!(read_verified(&disks, sha1, expect, &bad).await.is_err());
    }

    #[tokio::test]
    async fn streamed_read_aborts_on_corruption_and_next_read_switches() {
        let body: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
        let (_dir, disks, sha1, expect) = stored(&body).await;
        let bad = Arc::new(BadCopies::new());
        let master = sha1.master_disk();
        corrupt(&disks[master], &sha1);
        let mut s = stream_verified(&disks, sha1, expect, None, bad.clone())
            .await
            .unwrap();
        let mut got = 0u64;
        let mut failed = false;
        while let Some(item) = s.next().await {
            match item {
                Ok(c) => got += c.len() as u64,
                Err(_) => failed = true,
            }
        }
        assert!(failed && got < expect.size_bytes);
        let mut s = stream_verified(&disks, sha1, expect, None, bad.clone())
            .await
            .unwrap();
        let mut out = Vec::new();
        while let Some(item) = s.next().await {
            out.extend_from_slice(&item.unwrap());
        }
        assert_eq!(ContentHasher::digest(&out).sha1, sha1);
    }
}
