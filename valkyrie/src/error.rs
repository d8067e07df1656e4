//! The one error type of the worker's operations.
//!
//! Nothing here is fatal to a loop: an operation that fails is logged, counted in
//! [`crate::Metrics`] and retried on the next pass; the loop goes on with the next file.

use std::io;
use std::path::PathBuf;

use placement::write::WriteError;
use placement::{DiskError, PairId, Sha1};

use crate::catalog::CatalogError;

#[derive(Debug, thiserror::Error)]
pub enum ValkyrieError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Disk(#[from] DiskError),
    #[error(transparent)]
    Write(#[from] WriteError),
    /// The bytes of a copy do not hash to its name, or are not as long as announced.
    #[error("copy of {sha1} on {disk} is corrupt: {why}")]
    Corrupt {
        sha1: Sha1,
        disk: String,
        why: String,
    },
    /// UNMOVE's progress file cannot be read or written.
    #[error("progress file {path}: {message}")]
    Progress { path: PathBuf, message: String },
    #[error("{0} is not in the catalog's pair list")]
    UnknownPair(PairId),
    #[error("bad worker configuration: {0}")]
    Config(String),
}

impl ValkyrieError {
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        ValkyrieError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Whether the error only says that a file is not there (any more).
    pub fn is_not_found(&self) -> bool {
        match self {
            ValkyrieError::Io { source, .. } => source.kind() == io::ErrorKind::NotFound,
            ValkyrieError::Disk(e) => e.is_not_found(),
            _ => false,
        }
    }
}

/// Runs blocking file-system work off the async threads; a panicked task is an I/O error.
pub(crate) async fn blocking<T, F>(
    op: &'static str,
    path: PathBuf,
    f: F,
) -> Result<T, ValkyrieError>
where
    F: FnOnce() -> io::Result<T> + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(ValkyrieError::io(op, path, e)),
        Err(join) => Err(ValkyrieError::io(op, path, io::Error::other(join))),
    }
}
