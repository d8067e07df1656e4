//! Disk backends: where the two copies of every file physically live.
//!
//! Every backend has the same layout, a contract other tools rely on:
//! `<disk>/<aa>/<bb>/<sha1 hex>` for content (aa, bb: the first two bytes in hex),
//! `<disk>/tmp/<random>` for uploads in flight, and `<sha1 hex>.deleted.<unix secs>`
//! beside the content name for quarantined files.
//!
//! [`Disk`] is an enum rather than a trait object: the set of backends is closed (a local
//! directory, [`local`]; a folder on a WebDAV storage node, [`webdav`]) and an enum keeps
//! the async methods free of boxing.

mod direct;
mod durable;
mod error;
mod layout;
pub mod local;
pub mod tls;
pub mod webdav;

use bytes::Bytes;

use crate::vocab::{DiskRef, Sha1};

pub use error::DiskError;
pub use layout::{ByteStream, TMP_DIR, content_path};
pub use local::{LocalDisk, PageCache};
pub use tls::{StorageTls, StorageTlsError};
pub use webdav::{WebDavConfig, WebDavDisk};

/// Bodies up to this size are written to both local disks of a pair by one blocking task
/// (one after the other); larger ones by one task per disk, in parallel, where the copies'
/// time outweighs a hand-off.
pub const ONE_TASK_PAIR_BYTES: usize = 256 * 1024;

/// One disk of a pair.
#[derive(Debug, Clone)]
pub enum Disk {
    Local(LocalDisk),
    WebDav(WebDavDisk),
}

impl Disk {
    /// Opens the backend a [`DiskRef`] names: a local directory for `local:`, a WebDAV
    /// folder with the process's [`WebDavConfig`] ([`WebDavConfig::set_process`], else the
    /// default) for an `http://` or `https://` URL.
    pub fn open(disk: &DiskRef) -> Result<Self, DiskError> {
        Self::open_with(disk, &WebDavConfig::process())
    }

    /// Like [`Disk::open`], with the timeouts (and optional space figure) of WebDAV disks.
    pub fn open_with(disk: &DiskRef, webdav: &WebDavConfig) -> Result<Self, DiskError> {
        match disk.local_path() {
            Some(path) => Ok(Disk::Local(LocalDisk::new(
                disk.clone(),
                path.to_path_buf(),
            ))),
            None => WebDavDisk::new(disk.clone(), webdav.clone()).map(Disk::WebDav),
        }
    }

    pub fn disk_ref(&self) -> &DiskRef {
        match self {
            Disk::Local(d) => d.disk_ref(),
            Disk::WebDav(d) => d.disk_ref(),
        }
    }

    /// The probe of the write path: a temp file created, completed and removed. Over
    /// `https://` it also proves the TLS both ways (the node's certificate, and this
    /// process's, which nginx checks only once a request is sent).
    pub async fn probe_write(&self) -> Result<(), DiskError> {
        self.begin_temp().await?.finish().await?.discard().await
    }

    /// Starts a new temp file under `tmp/`.
    pub async fn begin_temp(&self) -> Result<TempWriter, DiskError> {
        match self {
            Disk::Local(d) => d.begin_temp().await.map(TempWriter::Local),
            Disk::WebDav(d) => d.begin_temp().await.map(TempWriter::WebDav),
        }
    }

    /// A new temp file holding a whole body held in memory (a local disk: one blocking
    /// task, through the page cache or past it as `cache` says; a WebDAV disk: streamed as
    /// any temp file).
    pub async fn write_temp(
        &self,
        chunks: Vec<Bytes>,
        cache: PageCache,
    ) -> Result<TempFile, DiskError> {
        match self {
            Disk::Local(d) => d.write_temp(chunks, cache).await.map(TempFile::Local),
            Disk::WebDav(_) => {
                let mut w = self.begin_temp().await?;
                w.write_many(chunks).await?;
                w.finish().await
            }
        }
    }

    /// [`write_temp`](Self::write_temp) on both disks of a pair; a body of at most
    /// [`ONE_TASK_PAIR_BYTES`] on two local disks is written by one blocking task. The copy
    /// on disk `cached` (the content's master disk, where reads start) goes through the
    /// page cache, the other one past it where the filesystem allows.
    pub async fn write_temp_pair(
        disks: &[Disk; 2],
        chunks: Vec<Bytes>,
        cached: usize,
    ) -> [Result<TempFile, DiskError>; 2] {
        let caches = [0, 1].map(|i| {
            if i == cached {
                PageCache::Keep
            } else {
                PageCache::Skip
            }
        });
        let len: usize = chunks.iter().map(Bytes::len).sum();
        if let [Disk::Local(a), Disk::Local(b)] = disks
            && len <= ONE_TASK_PAIR_BYTES
        {
            return LocalDisk::write_temp_both([a, b], chunks, caches)
                .await
                .map(|r| r.map(TempFile::Local));
        }
        let (a, b) = tokio::join!(
            disks[0].write_temp(chunks.clone(), caches[0]),
            disks[1].write_temp(chunks, caches[1])
        );
        [a, b]
    }

    /// The size of the content file, `None` if it is absent.
    pub async fn size_of(&self, sha1: &Sha1) -> Result<Option<u64>, DiskError> {
        match self {
            Disk::Local(d) => d.size_of(sha1).await,
            Disk::WebDav(d) => d.size_of(sha1).await,
        }
    }

    /// The whole content file, for bodies small enough to verify before sending.
    pub async fn read_all(&self, sha1: &Sha1) -> Result<Bytes, DiskError> {
        match self {
            Disk::Local(d) => d.read_all(sha1).await,
            Disk::WebDav(d) => d.read_all(sha1).await,
        }
    }

    /// A stream of `len` bytes of the content file from `offset`.
    pub async fn read_range(
        &self,
        sha1: &Sha1,
        offset: u64,
        len: u64,
    ) -> Result<ByteStream, DiskError> {
        match self {
            Disk::Local(d) => d.read_range(sha1, offset, len).await,
            Disk::WebDav(d) => d.read_range(sha1, offset, len).await,
        }
    }

    /// Free and total bytes of the filesystem under the disk.
    ///
    /// A WebDAV disk returns its configured figure, or [`DiskError::SpaceUnknown`] when
    /// there is none ([`DiskError::is_space_unknown`]): nginx cannot report free space.
    pub async fn space(&self) -> Result<(u64, u64), DiskError> {
        match self {
            Disk::Local(d) => d.space().await,
            Disk::WebDav(d) => d.space().await,
        }
    }
}

/// A temp file being written.
pub enum TempWriter {
    Local(local::LocalTempWriter),
    WebDav(webdav::WebDavTempWriter),
}

impl TempWriter {
    pub async fn write(&mut self, chunk: Bytes) -> Result<(), DiskError> {
        match self {
            TempWriter::Local(w) => w.write(chunk).await,
            TempWriter::WebDav(w) => w.write(chunk).await,
        }
    }

    /// Writes a whole body held in memory: a local disk takes it in one message (written
    /// with one `writev`), a WebDAV disk streams it chunk by chunk.
    pub async fn write_many(&mut self, chunks: Vec<Bytes>) -> Result<(), DiskError> {
        match self {
            TempWriter::Local(w) => w.write_many(chunks).await,
            TempWriter::WebDav(w) => {
                for chunk in chunks {
                    w.write(chunk).await?;
                }
                Ok(())
            }
        }
    }

    /// Flushes and fsyncs the temp file (a WebDAV disk: ends the PUT and waits for the
    /// node to acknowledge the whole body).
    pub async fn finish(self) -> Result<TempFile, DiskError> {
        match self {
            TempWriter::Local(w) => w.finish().await.map(TempFile::Local),
            TempWriter::WebDav(w) => w.finish().await.map(TempFile::WebDav),
        }
    }
}

/// A complete temp file waiting to be named (fsync, then rename) or discarded.
pub enum TempFile {
    Local(local::LocalTempFile),
    WebDav(webdav::WebDavTempFile),
}

impl TempFile {
    /// Renames the temp file to the content address and fsyncs the directory (a WebDAV
    /// disk: `MOVE`, a rename on the node).
    pub async fn commit(self, sha1: &Sha1) -> Result<(), DiskError> {
        match self {
            TempFile::Local(t) => t.commit(sha1).await,
            TempFile::WebDav(t) => t.commit(sha1).await,
        }
    }

    /// Commits both copies of a pair: two local files go to their group passes together
    /// (one pass when they share a filesystem).
    pub async fn commit_pair([t0, t1]: [TempFile; 2], sha1: &Sha1) -> [Result<(), DiskError>; 2] {
        match (t0, t1) {
            (TempFile::Local(a), TempFile::Local(b)) => {
                let mut r = local::LocalTempFile::commit_all(vec![a, b], sha1)
                    .await
                    .into_iter();
                let done = || Ok(());
                [r.next().unwrap_or_else(done), r.next().unwrap_or_else(done)]
            }
            (a, b) => {
                let (a, b) = tokio::join!(a.commit(sha1), b.commit(sha1));
                [a, b]
            }
        }
    }

    /// Removes the temp file (the content was already stored).
    pub async fn discard(self) -> Result<(), DiskError> {
        match self {
            TempFile::Local(t) => t.discard().await,
            TempFile::WebDav(t) => t.discard().await,
        }
    }
}
