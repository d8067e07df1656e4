//! A disk that is a local directory.
//!
//! Writes and reads go through short blocking tasks, a batch or a chunk each: the async
//! side never blocks on `write(2)` or `pread(2)`, no thread waits on a slow client, both
//! copies of a pair are written concurrently, and memory per upload and per read stream
//! is bounded by two batches or chunks.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::task::JoinHandle;

use super::direct;
use super::durable::{self, Durable};
use super::error::DiskError;
use super::layout::{ByteStream, TMP_DIR, content_path};
use crate::vocab::{DiskRef, Sha1};

/// Bytes gathered before they are written with one `writev`: with one batch in flight,
/// an upload buffers at most about two of these per disk.
const WRITE_BATCH_BYTES: usize = 1024 * 1024;
/// Most buffers one `writev` call is given (Linux's IOV_MAX).
const IOV_MAX: usize = 1024;
/// Chunk of a streamed read; a stream holds at most two (one sent, one read ahead).
const READ_CHUNK_BYTES: u64 = 1024 * 1024;

#[derive(Debug, Clone)]
pub struct LocalDisk {
    disk_ref: DiskRef,
    root: PathBuf,
}

impl LocalDisk {
    pub fn new(disk_ref: DiskRef, root: PathBuf) -> Self {
        LocalDisk { disk_ref, root }
    }

    pub fn disk_ref(&self) -> &DiskRef {
        &self.disk_ref
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The absolute path of a content file.
    pub fn content_file(&self, sha1: &Sha1) -> PathBuf {
        self.root.join(content_path(sha1))
    }

    fn err(&self, op: &'static str) -> impl FnOnce(io::Error) -> DiskError + '_ {
        move |e| DiskError::io(&self.disk_ref, op, e)
    }

    pub async fn begin_temp(&self) -> Result<LocalTempWriter, DiskError> {
        let (dir, path) = self.temp_path();
        let file = {
            let path = path.clone();
            self.blocking("create temp", move || open_temp(&dir, &path, 0))
                .await?
        };
        Ok(LocalTempWriter {
            disk: self.clone(),
            path: Some(path),
            file: FileSlot::Idle(file),
            batch: Vec::new(),
            batch_bytes: 0,
            written: 0,
        })
    }

    /// A new temp file holding `chunks`, created, written and its writeback started by one
    /// blocking task: a body held in memory costs one hand-off per disk, not three.
    pub async fn write_temp(
        &self,
        chunks: Vec<Bytes>,
        cache: PageCache,
    ) -> Result<LocalTempFile, DiskError> {
        let (dir, path) = self.temp_path();
        let file = {
            let path = path.clone();
            self.blocking("write temp", move || {
                write_temp_file(&dir, &path, &chunks, cache)
            })
            .await?
        };
        Ok(self.temp_file(path, file))
    }

    /// [`write_temp`](Self::write_temp) on both disks of a pair by one blocking task, one
    /// copy after the other: for a small body the second hand-off and wake-up cost more
    /// than writing the copies in parallel saves. Each disk's outcome is its own.
    pub async fn write_temp_both(
        disks: [&LocalDisk; 2],
        chunks: Vec<Bytes>,
        caches: [PageCache; 2],
    ) -> [Result<LocalTempFile, DiskError>; 2] {
        let [(dir0, path0), (dir1, path1)] = [disks[0].temp_path(), disks[1].temp_path()];
        let (p0, p1) = (path0.clone(), path1.clone());
        let [w0, w1] = tokio::task::spawn_blocking(move || {
            [
                write_temp_file(&dir0, &p0, &chunks, caches[0]),
                write_temp_file(&dir1, &p1, &chunks, caches[1]),
            ]
        })
        .await
        .unwrap_or_else(|_| [0, 1].map(|_| Err(io::Error::other("the write task failed"))));
        let done = |disk: &LocalDisk, written: io::Result<File>, path: PathBuf| match written {
            Ok(file) => Ok(disk.temp_file(path, file)),
            Err(e) => Err(disk.err("write temp")(e)),
        };
        [done(disks[0], w0, path0), done(disks[1], w1, path1)]
    }

    fn temp_file(&self, path: PathBuf, file: File) -> LocalTempFile {
        LocalTempFile {
            disk: self.clone(),
            path: Some(path),
            file: Some(file),
        }
    }

    /// The temp folder and a new random name in it.
    fn temp_path(&self) -> (PathBuf, PathBuf) {
        let dir = self.root.join(TMP_DIR);
        let path = dir.join(format!("{:032x}", rand::random::<u128>()));
        (dir, path)
    }

    pub async fn size_of(&self, sha1: &Sha1) -> Result<Option<u64>, DiskError> {
        match tokio::fs::metadata(self.content_file(sha1)).await {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.err("stat")(e)),
        }
    }

    pub async fn read_all(&self, sha1: &Sha1) -> Result<Bytes, DiskError> {
        tokio::fs::read(self.content_file(sha1))
            .await
            .map(Bytes::from)
            .map_err(self.err("read"))
    }

    /// Streams `len` bytes from `offset`. Each chunk is read by its own blocking task
    /// straight into the buffer that is sent (no intermediate copy), and the next chunk is
    /// read while the previous one is being sent; no thread waits on a slow client.
    pub async fn read_range(
        &self,
        sha1: &Sha1,
        offset: u64,
        len: u64,
    ) -> Result<ByteStream, DiskError> {
        let path = self.content_file(sha1);
        let file = self.blocking("open", move || File::open(path)).await?;
        Ok(read_ahead_stream(Arc::new(file), offset, len))
    }

    pub async fn space(&self) -> Result<(u64, u64), DiskError> {
        let root = self.root.clone();
        self.blocking("statvfs", move || statvfs_bytes(&root)).await
    }

    /// Runs `f` on a blocking thread; its error (or the task's) is the disk's `op` error.
    async fn blocking<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce() -> io::Result<T> + Send + 'static,
    ) -> Result<T, DiskError> {
        tokio::task::spawn_blocking(f)
            .await
            .map_err(io::Error::other)
            .and_then(|r| r)
            .map_err(self.err(op))
    }
}

/// Whether a copy written whole goes through the page cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageCache {
    /// Buffered, as any write: the copy reads start from (the content's master disk), so
    /// that a just-written object is read from memory.
    Keep,
    /// `O_DIRECT` from a reused aligned buffer where the filesystem takes it, else
    /// buffered: the other copy, read only when the first is bad. The kernel's copy into
    /// the page cache costs far more per byte than a copy into a buffer that stays mapped
    /// (an 8 MiB unique PUT went 1.14-1.18x faster, a 64 KiB one did not change), and the
    /// page cache then holds one copy of a fresh object, not two.
    Skip,
}

/// Creates the temp file at `path`, writes `chunks` and starts their writeback; on a
/// failed write the file is removed.
fn write_temp_file(
    dir: &Path,
    path: &Path,
    chunks: &[Bytes],
    cache: PageCache,
) -> io::Result<File> {
    if cache == PageCache::Skip {
        match write_temp_direct(dir, path, chunks) {
            // Not this filesystem's (tmpfs, some FUSE) or not this alignment: the file is
            // gone again; written as any other below.
            Err(e) if direct::unsupported(&e) => {}
            done => return done,
        }
    }
    let mut file = open_temp(dir, path, 0)?;
    let len: u64 = chunks.iter().map(|c| c.len() as u64).sum();
    match write_all_vectored(&mut file, chunks) {
        Ok(()) => {
            start_writeback(&file, 0, len);
            Ok(file)
        }
        Err(e) => {
            let _ = fs::remove_file(path);
            Err(e)
        }
    }
}

/// A temp file being written batch by batch: received chunks are gathered up to
/// [`WRITE_BATCH_BYTES`] and each batch is written with one `writev(2)` by a short blocking
/// task, while the next batch gathers. No thread waits on a slow client, and the page cache
/// takes large folios for large writes, a fraction of the cost per byte of many small ones.
///
/// The file is not fsynced here: that waits for the dedup decision, so a duplicate's temp
/// copy is removed without ever being forced to the device. Dropped before
/// [`finish`](Self::finish), the writer removes its file.
pub struct LocalTempWriter {
    disk: LocalDisk,
    /// `None` once the file has been handed on.
    path: Option<PathBuf>,
    file: FileSlot,
    batch: Vec<Bytes>,
    batch_bytes: usize,
    /// Bytes handed to the file so far: where the next batch starts.
    written: u64,
}

/// The temp file: idle between batches, or being written by a blocking task.
enum FileSlot {
    Idle(File),
    Writing(JoinHandle<io::Result<File>>),
    Failed,
}

impl LocalTempWriter {
    pub async fn write(&mut self, chunk: Bytes) -> Result<(), DiskError> {
        self.write_many(vec![chunk]).await
    }

    /// Adds chunks to the batch; a full batch goes to the disk (waiting for the previous
    /// one to be written first: one batch in flight at most).
    pub async fn write_many(&mut self, chunks: Vec<Bytes>) -> Result<(), DiskError> {
        for chunk in chunks {
            self.batch_bytes += chunk.len();
            self.batch.push(chunk);
        }
        if self.batch_bytes >= WRITE_BATCH_BYTES {
            self.send_batch().await?;
        }
        Ok(())
    }

    fn write_error(&self, e: io::Error) -> DiskError {
        DiskError::io(&self.disk.disk_ref, "write temp", e)
    }

    /// The file, once the batch being written (if any) is on it.
    async fn settle(&mut self) -> Result<File, DiskError> {
        match std::mem::replace(&mut self.file, FileSlot::Failed) {
            FileSlot::Idle(file) => Ok(file),
            FileSlot::Writing(task) => task
                .await
                .map_err(io::Error::other)
                .and_then(|r| r)
                .map_err(|e| self.write_error(e)),
            FileSlot::Failed => Err(self.write_error(io::Error::other("an earlier write failed"))),
        }
    }

    async fn send_batch(&mut self) -> Result<(), DiskError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let mut file = self.settle().await?;
        let batch = std::mem::take(&mut self.batch);
        let (start, len) = (self.written, self.batch_bytes as u64);
        self.written += len;
        self.batch_bytes = 0;
        self.file = FileSlot::Writing(tokio::task::spawn_blocking(move || {
            write_all_vectored(&mut file, &batch)?;
            start_writeback(&file, start, len);
            Ok(file)
        }));
        Ok(())
    }

    /// Writes what is left and hands the complete (unsynced) file on.
    pub async fn finish(mut self) -> Result<LocalTempFile, DiskError> {
        self.send_batch().await?;
        let file = self.settle().await?;
        Ok(LocalTempFile {
            disk: self.disk.clone(),
            path: self.path.take(),
            file: Some(file),
        })
    }
}

impl Drop for LocalTempWriter {
    fn drop(&mut self) {
        // An abandoned upload; a batch still being written goes to an unlinked file.
        if let Some(path) = self.path.take() {
            let _ = fs::remove_file(path);
        }
    }
}

/// A complete temp file, written but not yet fsynced. Dropped without
/// [`commit`](Self::commit) or [`discard`](Self::discard), it removes itself.
pub struct LocalTempFile {
    disk: LocalDisk,
    path: Option<PathBuf>,
    file: Option<File>,
}

impl LocalTempFile {
    /// Gives the file its content address durably, with the next group pass of its
    /// filesystem (see [`durable`](super::durable)).
    pub async fn commit(self, sha1: &Sha1) -> Result<(), DiskError> {
        let mut results = Self::commit_all(vec![self], sha1).await;
        results.pop().unwrap_or(Ok(()))
    }

    /// [`commit`](Self::commit) of several copies of one content (both disks of a pair)
    /// together, so that one pass covers them when they share a filesystem.
    pub async fn commit_all(files: Vec<LocalTempFile>, sha1: &Sha1) -> Vec<Result<(), DiskError>> {
        let mut works = Vec::with_capacity(files.len());
        let mut disks = Vec::with_capacity(files.len());
        for mut t in files {
            // Both are taken together, by `commit_all` or `discard`, so neither is
            // missing here; a file already handed on has nothing left to do.
            if let (Some(tmp), Some(file)) = (t.path.take(), t.file.take()) {
                works.push(Durable {
                    file,
                    tmp,
                    target: t.disk.content_file(sha1),
                });
                disks.push(t.disk.disk_ref.clone());
            }
        }
        durable::commit(works)
            .await
            .into_iter()
            .zip(disks)
            .map(|(r, disk)| r.map_err(|e| DiskError::io(&disk, "rename", e)))
            .collect()
    }

    pub async fn discard(mut self) -> Result<(), DiskError> {
        let Some(tmp) = self.path.take() else {
            return Ok(());
        };
        self.file = None;
        tokio::fs::remove_file(&tmp)
            .await
            .map_err(|e| DiskError::io(&self.disk.disk_ref, "remove temp", e))
    }
}

impl Drop for LocalTempFile {
    fn drop(&mut self) {
        if let Some(tmp) = self.path.take() {
            let _ = fs::remove_file(tmp);
        }
    }
}

/// [`write_temp_file`] past the page cache; on any error the file is removed.
fn write_temp_direct(dir: &Path, path: &Path, chunks: &[Bytes]) -> io::Result<File> {
    let written = open_temp(dir, path, libc::O_DIRECT)
        .and_then(|file| direct::write_all(&file, chunks).map(|()| file));
    if written.is_err() {
        let _ = fs::remove_file(path);
    }
    written
}

/// Creates a new temp file (`flags`: extra `open(2)` flags). The folder exists but on a
/// disk's first upload (or after an operator removed it): no stat per upload.
fn open_temp(dir: &Path, path: &Path, flags: i32) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let open = || {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(flags)
            .open(path)
    };
    match open() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(dir)?;
            open()
        }
        other => other,
    }
}

/// Starts writing a batch just written to the device, without waiting. The group pass's
/// syncfs then finds little left to write: a large upload never piles up dirty pages that
/// every other upload's pass would have to wait for, and its writes overlap its receiving.
/// (A streamed body that turns out to be a duplicate has been written for nothing: that
/// is the price of bodies too large to hold in memory until their hash is known.)
fn start_writeback(file: &File, start: u64, len: u64) {
    use std::os::unix::io::AsRawFd as _;
    let (Ok(start), Ok(len)) = (i64::try_from(start), i64::try_from(len)) else {
        return;
    };
    // SAFETY: a valid open descriptor; the call only schedules writeback. Its failure (a
    // filesystem without it) is harmless: the pass's syncfs writes the data anyway.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), start, len, libc::SYNC_FILE_RANGE_WRITE);
    }
}

fn statvfs_bytes(path: &Path) -> io::Result<(u64, u64)> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: `c` is a valid NUL-terminated path and `st` a properly sized out-parameter.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let frsize = st.f_frsize as u64;
    Ok((st.f_bavail as u64 * frsize, st.f_blocks as u64 * frsize))
}

/// Writes every byte of `chunks` in as few `writev` calls as the kernel allows.
fn write_all_vectored(file: &mut File, chunks: &[Bytes]) -> io::Result<()> {
    for group in chunks.chunks(IOV_MAX) {
        let mut slices: Vec<io::IoSlice<'_>> = group
            .iter()
            .filter(|c| !c.is_empty())
            .map(|c| io::IoSlice::new(c))
            .collect();
        let mut rest = &mut slices[..];
        while !rest.is_empty() {
            match file.write_vectored(rest) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => io::IoSlice::advance_slices(&mut rest, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

struct ReadAhead {
    file: Arc<File>,
    offset: u64,
    left: u64,
    next: Option<JoinHandle<io::Result<Bytes>>>,
}

impl ReadAhead {
    /// Starts reading the next chunk, if any is left.
    fn start_next(&mut self) {
        if self.left == 0 {
            self.next = None;
            return;
        }
        let want = self.left.min(READ_CHUNK_BYTES);
        let (file, offset) = (self.file.clone(), self.offset);
        self.offset += want;
        self.left -= want;
        self.next = Some(tokio::task::spawn_blocking(move || {
            read_chunk(&file, offset, want as usize)
        }));
    }
}

fn read_ahead_stream(file: Arc<File>, offset: u64, len: u64) -> ByteStream {
    let mut state = ReadAhead {
        file,
        offset,
        left: len,
        next: None,
    };
    state.start_next();
    Box::pin(futures_util::stream::unfold(state, |mut st| async move {
        let pending = st.next.take()?;
        let chunk = match pending.await {
            Ok(Ok(chunk)) => chunk,
            Ok(Err(e)) => return Some((Err(e), st)),
            Err(e) => return Some((Err(io::Error::other(e)), st)),
        };
        st.start_next();
        Some((Ok(chunk), st))
    }))
}

/// Full-size read buffers, given back once the response has sent them: a fresh 1 MiB
/// allocation per chunk costs page faults on every GET (about a tenth of its CPU here).
static READ_BUFFERS: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
/// Buffers kept for reuse; beyond these, freed ones go back to the allocator.
const READ_BUFFERS_KEPT: usize = 32;

/// A read buffer that returns to [`READ_BUFFERS`] when the last `Bytes` of it is dropped.
struct PooledBuffer(Vec<u8>);

impl AsRef<[u8]> for PooledBuffer {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for PooledBuffer {
    fn drop(&mut self) {
        let mut buf = std::mem::take(&mut self.0);
        buf.clear();
        let mut pool = READ_BUFFERS.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() < READ_BUFFERS_KEPT {
            pool.push(buf);
        }
    }
}

/// Reads exactly `want` bytes at `offset` (into a pooled buffer for a full chunk); a file
/// shorter than that is an error (the caller asked for bytes the size check said were
/// there).
fn read_chunk(file: &File, offset: u64, want: usize) -> io::Result<Bytes> {
    let full = want as u64 == READ_CHUNK_BYTES;
    let mut buf = if full {
        let pooled = READ_BUFFERS.lock().unwrap_or_else(|e| e.into_inner()).pop();
        pooled.unwrap_or_else(|| Vec::with_capacity(want))
    } else {
        Vec::with_capacity(want)
    };
    while buf.len() < want {
        let at = offset + buf.len() as u64;
        // Reads into the spare capacity and extends the length by what was read.
        let n = rustix::io::pread(file, rustix::buffer::spare_capacity(&mut buf), at)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "content file shorter than expected",
            ));
        }
    }
    // The allocator may have given more capacity than asked for: drop what lies beyond.
    buf.truncate(want);
    Ok(if full {
        Bytes::from_owner(PooledBuffer(buf))
    } else {
        Bytes::from(buf)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::ContentHasher;

    fn disk(dir: &Path) -> LocalDisk {
        LocalDisk::new(DiskRef::local(dir), dir.to_path_buf())
    }

    #[tokio::test]
    async fn temp_then_commit_lands_at_the_content_address() {
        let dir = tempfile::tempdir().unwrap();
        let d = disk(dir.path());
        let body = Bytes::from_static(b"hello dedup");
        let sha1 = ContentHasher::digest(&body).sha1;
        let mut w = d.begin_temp().await.unwrap();
        w.write(body.clone()).await.unwrap();
        let t = w.finish().await.unwrap();
        t.commit(&sha1).await.unwrap();
        let hex = sha1.to_hex();
        let path = dir.path().join(&hex[0..2]).join(&hex[2..4]).join(&hex);
        assert_eq!(fs::read(path).unwrap(), body);
        assert_eq!(fs::read_dir(dir.path().join(TMP_DIR)).unwrap().count(), 0);
        assert_eq!(d.size_of(&sha1).await.unwrap(), Some(body.len() as u64));
        assert_eq!(d.read_all(&sha1).await.unwrap(), body);
    }

    #[tokio::test]
    async fn abandoned_and_discarded_temps_leave_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let d = disk(dir.path());
        let mut w = d.begin_temp().await.unwrap();
        w.write(Bytes::from_static(b"partial")).await.unwrap();
        drop(w);
        let t = d.begin_temp().await.unwrap().finish().await.unwrap();
        t.discard().await.unwrap();
        let t = d.begin_temp().await.unwrap().finish().await.unwrap();
        drop(t);
        // The abandoned writer removes its file from its own thread.
        for _ in 0..100 {
            if fs::read_dir(dir.path().join(TMP_DIR)).unwrap().count() == 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("temp files left behind");
    }

    #[tokio::test]
    async fn missing_content_reports_none_and_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let d = disk(dir.path());
        let sha1 = ContentHasher::digest(b"x").sha1;
        assert_eq!(d.size_of(&sha1).await.unwrap(), None);
        assert!(d.read_all(&sha1).await.unwrap_err().is_not_found());
        let (free, total) = d.space().await.unwrap();
        assert!(total >= free && total > 0);
    }

    async fn collect(mut s: ByteStream) -> io::Result<Vec<u8>> {
        use futures_util::StreamExt as _;
        let mut out = Vec::new();
        while let Some(chunk) = s.next().await {
            out.extend_from_slice(&chunk?);
        }
        Ok(out)
    }

    #[tokio::test]
    async fn ranges_across_chunk_boundaries_and_a_short_file() {
        let dir = tempfile::tempdir().unwrap();
        let d = disk(dir.path());
        let chunk = READ_CHUNK_BYTES as usize;
        let body: Vec<u8> = (0..3 * chunk + 17).map(|i| (i % 251) as u8).collect();
        let sha1 = ContentHasher::digest(&body).sha1;
        let mut w = d.begin_temp().await.unwrap();
        w.write(Bytes::from(body.clone())).await.unwrap();
        w.finish().await.unwrap().commit(&sha1).await.unwrap();
        let len = body.len() as u64;
        for (offset, n) in [
            (0, len),
            (0, 0),
            (1, READ_CHUNK_BYTES),
            (READ_CHUNK_BYTES - 1, 2),
            (2 * READ_CHUNK_BYTES, len - 2 * READ_CHUNK_BYTES),
            (len - 1, 1),
        ] {
            let got = collect(d.read_range(&sha1, offset, n).await.unwrap())
                .await
                .unwrap();
            assert_eq!(
                got,
                body[offset as usize..(offset + n) as usize],
                "{offset}+{n}"
            );
        }
        // Asking past the end (a file cut short behind the metadata's back) is an error,
        // never a quietly short body.
        let err = collect(d.read_range(&sha1, 0, len + 1).await.unwrap())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }

    /// Pages of the file at `path` in the page cache: `mincore(2)` over a mapping that is
    /// never touched. `None` on tmpfs, whose pages are the file itself.
    fn cached_pages(path: &Path) -> Option<usize> {
        use std::os::unix::io::AsRawFd as _;
        let file = File::open(path).unwrap();
        // SAFETY: statfs of an open descriptor into a zeroed, properly sized struct.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) }, 0);
        if st.f_type == libc::TMPFS_MAGIC {
            return None;
        }
        let len = file.metadata().unwrap().len() as usize;
        let pages = len.div_ceil(4096);
        let mut vec = vec![0u8; pages];
        // SAFETY: a read-only shared mapping of the whole file, never dereferenced; mincore
        // writes one byte per page into `vec`, which has one per page; unmapped after.
        unsafe {
            let at = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            );
            assert_ne!(at, libc::MAP_FAILED);
            assert_eq!(libc::mincore(at, len, vec.as_mut_ptr()), 0);
            libc::munmap(at, len);
        }
        Some(vec.iter().filter(|b| *b & 1 == 1).count())
    }

    /// Both copies hold the body exactly, whatever its length against the alignment and the
    /// buffer; the copy written past the page cache leaves none of its pages there, the
    /// other keeps them (reads start from it).
    #[tokio::test]
    async fn a_copy_past_the_page_cache_is_exact_and_not_cached() {
        let dir = tempfile::tempdir().unwrap();
        let d = disk(dir.path());
        let mib = 1024 * 1024;
        for len in [
            0,
            1,
            4095,
            4096,
            4097,
            300_000,
            mib,
            mib + 1,
            2 * mib + mib / 2,
        ] {
            let body: Vec<u8> = (0..len).map(|_| rand::random::<u8>()).collect();
            // Uneven chunks: a small one, then the rest in pieces that straddle blocks.
            let first = len.min(1000);
            let mut chunks = vec![Bytes::copy_from_slice(&body[..first])];
            chunks.extend(body[first..].chunks(70_001).map(Bytes::copy_from_slice));
            let [keep, skip] =
                LocalDisk::write_temp_both([&d, &d], chunks, [PageCache::Keep, PageCache::Skip])
                    .await
                    .map(Result::unwrap);
            let paths = [&keep, &skip].map(|t| t.path.clone().unwrap());
            // Before anything reads them back (which would bring the pages in).
            if len >= 4 * 4096
                && let (Some(kept), Some(skipped)) =
                    (cached_pages(&paths[0]), cached_pages(&paths[1]))
            {
                assert!(kept > 0, "{len} bytes: the read copy left the page cache");
                assert_eq!(
                    skipped, 0,
                    "{len} bytes: the other copy is in the page cache"
                );
            }
            for p in &paths {
                assert_eq!(fs::read(p).unwrap(), body, "{len} bytes, {}", p.display());
            }
            keep.discard().await.unwrap();
            skip.discard().await.unwrap();
        }
    }
}
