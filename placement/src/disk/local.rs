//! A disk that is a local directory.
//!
//! Writes go through one blocking thread per temp file fed by a bounded channel: the
//! async side never blocks on `write(2)`, both copies of a pair are written concurrently,
//! and memory per upload is bounded by the channel depth times the chunk size.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::io::ReaderStream;

use super::{ByteStream, DiskError, TMP_DIR, content_path};
use crate::vocab::{DiskRef, Sha1};

/// Chunks in flight per temp file; with hyper's chunks of up to 1 MiB this bounds an
/// upload's buffered bytes per disk to a few MiB.
const WRITE_QUEUE_DEPTH: usize = 4;
/// Read buffer for streaming a file out.
const READ_CHUNK_BYTES: usize = 256 * 1024;

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
        let dir = self.root.join(TMP_DIR);
        let name = format!("{:032x}", rand::random::<u128>());
        let path = dir.join(name);
        let (tx, rx) = mpsc::channel(WRITE_QUEUE_DEPTH);
        let file = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || {
                fs::create_dir_all(&dir)?;
                OpenOptions::new().write(true).create_new(true).open(&path)
            })
            .await
            .map_err(io::Error::other)
            .and_then(|r| r)
            .map_err(self.err("create temp"))?
        };
        let join = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || write_loop(file, &path, rx))
        };
        Ok(LocalTempWriter {
            disk: self.clone(),
            path,
            tx: Some(tx),
            join: Some(join),
        })
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

    pub async fn read_range(
        &self,
        sha1: &Sha1,
        offset: u64,
        len: u64,
    ) -> Result<ByteStream, DiskError> {
        let mut file = tokio::fs::File::open(self.content_file(sha1))
            .await
            .map_err(self.err("open"))?;
        if offset > 0 {
            file.seek(io::SeekFrom::Start(offset))
                .await
                .map_err(self.err("seek"))?;
        }
        Ok(Box::pin(ReaderStream::with_capacity(
            file.take(len),
            READ_CHUNK_BYTES,
        )))
    }

    pub async fn space(&self) -> Result<(u64, u64), DiskError> {
        let root = self.root.clone();
        tokio::task::spawn_blocking(move || statvfs_bytes(&root))
            .await
            .map_err(io::Error::other)
            .and_then(|r| r)
            .map_err(self.err("statvfs"))
    }
}

enum WriteMsg {
    Data(Bytes),
    /// The sender is done: fsync and keep the file. A channel closed without it means the
    /// upload was abandoned and the temp file is removed.
    Finish,
}

fn write_loop(mut file: File, path: &Path, mut rx: mpsc::Receiver<WriteMsg>) -> io::Result<()> {
    let result = (|| {
        while let Some(msg) = rx.blocking_recv() {
            match msg {
                WriteMsg::Data(chunk) => file.write_all(&chunk)?,
                WriteMsg::Finish => return file.sync_all(),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::Interrupted,
            "upload abandoned",
        ))
    })();
    if result.is_err() {
        drop(file);
        let _ = fs::remove_file(path);
    }
    result
}

/// A temp file being written by its blocking writer thread.
pub struct LocalTempWriter {
    disk: LocalDisk,
    path: PathBuf,
    tx: Option<mpsc::Sender<WriteMsg>>,
    join: Option<JoinHandle<io::Result<()>>>,
}

impl LocalTempWriter {
    pub async fn write(&mut self, chunk: Bytes) -> Result<(), DiskError> {
        let sent = match &self.tx {
            Some(tx) => tx.send(WriteMsg::Data(chunk)).await.is_ok(),
            None => false,
        };
        if sent {
            return Ok(());
        }
        // The writer thread stopped: its result says why.
        self.tx = None;
        Err(self.join_writer().await.err().unwrap_or_else(|| {
            DiskError::io(
                &self.disk.disk_ref,
                "write temp",
                io::Error::other("writer gone"),
            )
        }))
    }

    async fn join_writer(&mut self) -> Result<(), DiskError> {
        match self.join.take() {
            Some(join) => join
                .await
                .map_err(io::Error::other)
                .and_then(|r| r)
                .map_err(|e| DiskError::io(&self.disk.disk_ref, "write temp", e)),
            None => Err(DiskError::io(
                &self.disk.disk_ref,
                "write temp",
                io::Error::other("writer already joined"),
            )),
        }
    }

    pub async fn finish(mut self) -> Result<LocalTempFile, DiskError> {
        if let Some(tx) = self.tx.take() {
            // A failed send means the writer already stopped; joining reports why.
            let _ = tx.send(WriteMsg::Finish).await;
        }
        self.join_writer().await?;
        Ok(LocalTempFile {
            disk: self.disk.clone(),
            path: Some(std::mem::take(&mut self.path)),
        })
    }
}

/// A complete, fsynced temp file. Dropped without [`commit`](Self::commit) or
/// [`discard`](Self::discard), it removes itself.
pub struct LocalTempFile {
    disk: LocalDisk,
    path: Option<PathBuf>,
}

impl LocalTempFile {
    pub async fn commit(mut self, sha1: &Sha1) -> Result<(), DiskError> {
        let Some(tmp) = self.path.take() else {
            return Ok(());
        };
        let root = self.disk.root.clone();
        let target = self.disk.content_file(sha1);
        tokio::task::spawn_blocking(move || {
            let result = rename_durably(&root, &tmp, &target);
            if result.is_err() {
                let _ = fs::remove_file(&tmp);
            }
            result
        })
        .await
        .map_err(io::Error::other)
        .and_then(|r| r)
        .map_err(|e| DiskError::io(&self.disk.disk_ref, "rename", e))
    }

    pub async fn discard(mut self) -> Result<(), DiskError> {
        let Some(tmp) = self.path.take() else {
            return Ok(());
        };
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

/// `rename(tmp, target)` made durable: the target's directories are created (and their
/// parents fsynced when new) and the target directory is fsynced after the rename, so a
/// power cut after we return cannot lose the name.
fn rename_durably(root: &Path, tmp: &Path, target: &Path) -> io::Result<()> {
    let dir = target
        .parent()
        .ok_or_else(|| io::Error::other("content path has no parent"))?;
    if !dir.is_dir() {
        fs::create_dir_all(dir)?;
        let mut d = dir.parent();
        while let Some(p) = d {
            File::open(p)?.sync_all()?;
            if p == root {
                break;
            }
            d = p.parent();
        }
    }
    fs::rename(tmp, target)?;
    File::open(dir)?.sync_all()
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
}
