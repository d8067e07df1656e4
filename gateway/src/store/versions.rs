//! What a write of an object version answers, and version ids as clients give them (the
//! store's version operations are in `crate::versions`).

use meta::ObjectRecord;
use meta::versions::VersionId;

use super::error::StoreError;

/// An object as a write stored it: its record, and its version id in a bucket that has
/// versioning (None in an unversioned one, where S3 names no version).
#[derive(Clone, Debug)]
pub struct Stored {
    pub record: ObjectRecord,
    pub version_id: Option<String>,
}

/// Parses a client's version id: InvalidArgument (as S3) when no version can have it.
pub fn parse_version_id(id: &str) -> Result<VersionId, StoreError> {
    VersionId::parse(id).map_err(|e| StoreError::InvalidVersionId(e.0))
}
