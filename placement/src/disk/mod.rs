//! Disk backends: where the two copies of every file physically live.
//!
//! Every backend has the same layout, a contract other tools rely on:
//! `<disk>/<aa>/<bb>/<sha1 hex>` for content (aa, bb: the first two bytes in hex),
//! `<disk>/tmp/<random>` for uploads in flight, and `<sha1 hex>.deleted.<unix secs>`
//! beside the content name for quarantined files.
//!
//! [`Disk`] is an enum rather than a trait object: the set of backends is closed (a local
//! directory; WebDAV storage nodes arrive with their issue) and an enum keeps the async
//! methods free of boxing.

pub mod local;

use std::io;
use std::path::PathBuf;

use bytes::Bytes;
use futures_util::Stream;

use crate::vocab::{DiskRef, Sha1};

pub use local::LocalDisk;

/// Errors of a disk operation.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("disk {disk}: {op}: {source}")]
    Io {
        disk: DiskRef,
        op: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("disk {0}: backend not supported by this build")]
    Unsupported(DiskRef),
}

impl DiskError {
    pub fn io(disk: &DiskRef, op: &'static str, source: io::Error) -> Self {
        DiskError::Io {
            disk: disk.clone(),
            op,
            source,
        }
    }

    /// Whether the error says the file is simply not there.
    pub fn is_not_found(&self) -> bool {
        matches!(self, DiskError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

/// The relative path of a content file: `<aa>/<bb>/<sha1 hex>`.
pub fn content_path(sha1: &Sha1) -> PathBuf {
    let hex = sha1.to_hex();
    [&hex[0..2], &hex[2..4], hex.as_str()].iter().collect()
}

/// The directory for uploads in flight.
pub const TMP_DIR: &str = "tmp";

/// A byte stream read from a disk.
pub type ByteStream = std::pin::Pin<Box<dyn Stream<Item = io::Result<Bytes>> + Send>>;

/// One disk of a pair.
#[derive(Debug, Clone)]
pub enum Disk {
    Local(LocalDisk),
}

impl Disk {
    /// Opens the backend a [`DiskRef`] names.
    pub fn open(disk: &DiskRef) -> Result<Self, DiskError> {
        match disk.local_path() {
            Some(path) => Ok(Disk::Local(LocalDisk::new(
                disk.clone(),
                path.to_path_buf(),
            ))),
            None => Err(DiskError::Unsupported(disk.clone())),
        }
    }

    pub fn disk_ref(&self) -> &DiskRef {
        match self {
            Disk::Local(d) => d.disk_ref(),
        }
    }

    /// Starts a new temp file under `tmp/`.
    pub async fn begin_temp(&self) -> Result<TempWriter, DiskError> {
        match self {
            Disk::Local(d) => d.begin_temp().await.map(TempWriter::Local),
        }
    }

    /// The size of the content file, `None` if it is absent.
    pub async fn size_of(&self, sha1: &Sha1) -> Result<Option<u64>, DiskError> {
        match self {
            Disk::Local(d) => d.size_of(sha1).await,
        }
    }

    /// The whole content file, for bodies small enough to verify before sending.
    pub async fn read_all(&self, sha1: &Sha1) -> Result<Bytes, DiskError> {
        match self {
            Disk::Local(d) => d.read_all(sha1).await,
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
        }
    }

    /// Free and total bytes of the filesystem under the disk.
    pub async fn space(&self) -> Result<(u64, u64), DiskError> {
        match self {
            Disk::Local(d) => d.space().await,
        }
    }
}

/// A temp file being written.
pub enum TempWriter {
    Local(local::LocalTempWriter),
}

impl TempWriter {
    pub async fn write(&mut self, chunk: Bytes) -> Result<(), DiskError> {
        match self {
            TempWriter::Local(w) => w.write(chunk).await,
        }
    }

    /// Flushes and fsyncs the temp file.
    pub async fn finish(self) -> Result<TempFile, DiskError> {
        match self {
            TempWriter::Local(w) => w.finish().await.map(TempFile::Local),
        }
    }
}

/// A complete, fsynced temp file waiting to be named or discarded.
pub enum TempFile {
    Local(local::LocalTempFile),
}

impl TempFile {
    /// Renames the temp file to the content address and fsyncs the directory.
    pub async fn commit(self, sha1: &Sha1) -> Result<(), DiskError> {
        match self {
            TempFile::Local(t) => t.commit(sha1).await,
        }
    }

    /// Removes the temp file (the content was already stored).
    pub async fn discard(self) -> Result<(), DiskError> {
        match self {
            TempFile::Local(t) => t.discard().await,
        }
    }
}
