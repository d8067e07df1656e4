//! What can go wrong on a disk, whichever backend it is.

use std::io;
use std::time::Duration;

use crate::vocab::DiskRef;

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
    /// A remote disk answered with a status the operation does not accept (404: the file
    /// is not there, see [`DiskError::is_not_found`]).
    #[error("disk {disk}: {op}: HTTP status {status}")]
    Http {
        disk: DiskRef,
        op: &'static str,
        status: u16,
    },
    /// A remote disk could not be reached, broke the connection or sent an answer that
    /// makes no sense for the request.
    #[error("disk {disk}: {op}: {message}")]
    Remote {
        disk: DiskRef,
        op: &'static str,
        message: String,
    },
    /// A remote disk did not answer within the configured bound.
    #[error("disk {disk}: {op}: no answer within {after:?}")]
    Timeout {
        disk: DiskRef,
        op: &'static str,
        after: Duration,
    },
    /// The backend cannot measure its free space (a WebDAV node has no way to report it)
    /// and none was configured: the caller keeps whatever figure it had.
    #[error("disk {0}: free space unknown (WebDAV cannot report it and none is configured)")]
    SpaceUnknown(DiskRef),
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
        match self {
            DiskError::Io { source, .. } => source.kind() == io::ErrorKind::NotFound,
            DiskError::Http { status, .. } => *status == 404,
            _ => false,
        }
    }

    /// Whether the disk refuses writes for lack of room or because it is read-only (a
    /// WebDAV node says so with 507 Insufficient Storage).
    pub fn is_unwritable(&self) -> bool {
        match self {
            DiskError::Io { source, .. } => matches!(
                source.kind(),
                io::ErrorKind::StorageFull
                    | io::ErrorKind::ReadOnlyFilesystem
                    | io::ErrorKind::QuotaExceeded
            ),
            DiskError::Http { status, .. } => *status == 507,
            _ => false,
        }
    }

    /// Whether the error only says that the disk cannot report its free space.
    pub fn is_space_unknown(&self) -> bool {
        matches!(self, DiskError::SpaceUnknown(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io_error(kind: io::ErrorKind) -> DiskError {
        DiskError::Io {
            disk: DiskRef::local("/d"),
            op: "write",
            source: io::Error::from(kind),
        }
    }

    #[test]
    fn full_and_read_only_disks_are_unwritable_other_errors_are_not() {
        for kind in [
            io::ErrorKind::StorageFull,
            io::ErrorKind::ReadOnlyFilesystem,
            io::ErrorKind::QuotaExceeded,
        ] {
            assert!(io_error(kind).is_unwritable(), "{kind:?}");
        }
        for kind in [io::ErrorKind::NotFound, io::ErrorKind::PermissionDenied] {
            assert!(!io_error(kind).is_unwritable(), "{kind:?}");
        }
        let http = |status| DiskError::Http {
            disk: DiskRef::local("/d"),
            op: "PUT",
            status,
        };
        assert!(http(507).is_unwritable());
        assert!(!http(500).is_unwritable());
    }
}
