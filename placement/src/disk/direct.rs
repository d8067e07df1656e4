//! Writing a whole body past the page cache (`O_DIRECT`).
//!
//! Direct I/O wants the buffer's address, the file offset and the length aligned to the
//! device's logical block size; [`ALIGN`] (4 KiB) covers devices of 512-byte and 4 KiB
//! blocks. The body is copied into an aligned buffer and written from there: the last
//! block is padded with zeros and the file cut back to the body's length. Buffers come
//! from a small pool and go back to it, so their pages stay mapped: a page touched for the
//! first time costs a fault, and in a virtual machine as much again as the copy itself.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt as _;
use std::sync::Mutex;

use bytes::Bytes;

/// Alignment of buffers, offsets and lengths.
const ALIGN: usize = 4096;
/// Bytes written per `pwrite(2)` (and held per buffer).
const BUF_BYTES: usize = 1024 * 1024;
/// Buffers kept for reuse; more writers at once allocate and free their own.
const POOL_MAX: usize = 8;

static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// A pooled buffer with room for [`BUF_BYTES`] at an aligned address.
struct Buf(Vec<u8>);

impl Buf {
    fn take() -> Buf {
        let pooled = POOL.lock().unwrap_or_else(|e| e.into_inner()).pop();
        Buf(pooled.unwrap_or_else(|| vec![0; BUF_BYTES + ALIGN]))
    }

    fn aligned(&mut self) -> &mut [u8] {
        let at = self.0.as_ptr().align_offset(ALIGN);
        &mut self.0[at..at + BUF_BYTES]
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() < POOL_MAX {
            pool.push(std::mem::take(&mut self.0));
        }
    }
}

/// Whether `e` says the filesystem or device refuses direct I/O (or this alignment), so
/// that the body should be written through the page cache instead.
pub fn unsupported(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINVAL)
}

/// Writes `chunks` from offset 0 of `file`, opened with `O_DIRECT`, and leaves the file
/// exactly as long as the body.
pub fn write_all(file: &File, chunks: &[Bytes]) -> io::Result<()> {
    let len: u64 = chunks.iter().map(|c| c.len() as u64).sum();
    let mut buf = Buf::take();
    let block = buf.aligned();
    let (mut fill, mut offset) = (0usize, 0u64);
    for chunk in chunks {
        let mut rest = &chunk[..];
        while !rest.is_empty() {
            let n = rest.len().min(BUF_BYTES - fill);
            block[fill..fill + n].copy_from_slice(&rest[..n]);
            (fill, rest) = (fill + n, &rest[n..]);
            if fill == BUF_BYTES {
                file.write_all_at(block, offset)?;
                (fill, offset) = (0, offset + BUF_BYTES as u64);
            }
        }
    }
    if fill > 0 {
        let padded = fill.next_multiple_of(ALIGN);
        block[fill..padded].fill(0);
        file.write_all_at(&block[..padded], offset)?;
        if padded != fill {
            file.set_len(len)?;
        }
    }
    Ok(())
}
