//! Reads of the S3 index, typed so that any replica of the group owning their key can
//! answer them, over the network too (`docs/scaling.md`, "index groups"): an object, its
//! versions, an upload, and the part of a listing that lies in one group's interval.
//!
//! Each runs in one read transaction that first checks the group owns its key (or its
//! whole span), so a reader routed by a stale map gets `Moved` and asks again, never the
//! rows a split left behind.

use std::collections::BTreeMap;

use redb::ReadableDatabase;
use serde::{Deserialize, Serialize};

use super::MetaStore;
use super::objects::object_in;
use super::uploads::{UploadsPage, parts_in, upload_checksums_in, upload_in, uploads_span_in};
use super::versions::{CurrentVersion, current_version_in, version_in};
use crate::MetaError;
use crate::checksums::UploadChecksums;
use crate::list::{ListPage, ListQuery, Span, list_span};
use crate::list_versions::{Tables, VersionsPage, VersionsQuery, list_versions_span};
use crate::tables::{NULL_VERSIONS, OBJECTS, ObjectRecord, PartRecord, UploadRecord, VERSIONS};
use crate::versions::{VersionId, VersionView};
use crate::{handoff, ownership};

/// A read of the index at one key, or of one span of a bucket's keys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum IndexQuery {
    /// The current object (no version, tags or ACL).
    Object { bucket: String, key: String },
    /// What a GET without a version id finds (see [`CurrentVersion`]).
    Current { bucket: String, key: String },
    Version {
        bucket: String,
        key: String,
        id: VersionId,
    },
    /// An upload of `bucket/key` (none if `upload_id` is another key's).
    Upload {
        bucket: String,
        key: String,
        upload_id: String,
    },
    Parts {
        bucket: String,
        key: String,
        upload_id: String,
    },
    UploadChecksums {
        bucket: String,
        key: String,
        upload_id: String,
    },
    List {
        bucket: String,
        query: ListQuery,
        span: Span,
    },
    Versions {
        bucket: String,
        query: VersionsQuery,
        span: Span,
    },
    Uploads {
        bucket: String,
        prefix: String,
        /// The (key, upload id) marker.
        after: Option<(String, String)>,
        span: Span,
    },
}

/// The answer to an [`IndexQuery`], of the same variant.
// The current version is the common answer: boxing it would add an allocation per GET.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum IndexAnswer {
    Object(Option<ObjectRecord>),
    Current(CurrentVersion),
    Version(Option<VersionView>),
    Upload(Option<UploadRecord>),
    Parts(BTreeMap<u32, PartRecord>),
    UploadChecksums(UploadChecksums),
    List(ListPage),
    Versions(VersionsPage),
    Uploads(UploadsPage),
}

impl MetaStore {
    /// Answers `query` from this group's state, or `Moved` if the group does not own its
    /// key (or all of its span).
    pub fn index_read(&self, query: &IndexQuery) -> Result<IndexAnswer, MetaError> {
        let txn = self.db().begin_read()?;
        match query {
            IndexQuery::Object { bucket, key } => {
                check_key(&txn, bucket, key.as_bytes())?;
                object_in(&txn, bucket, key).map(IndexAnswer::Object)
            }
            IndexQuery::Current { bucket, key } => {
                check_key(&txn, bucket, key.as_bytes())?;
                current_version_in(&txn, bucket, key).map(IndexAnswer::Current)
            }
            IndexQuery::Version { bucket, key, id } => {
                check_key(&txn, bucket, key.as_bytes())?;
                version_in(&txn, bucket, key, *id).map(IndexAnswer::Version)
            }
            IndexQuery::Upload {
                bucket,
                key,
                upload_id,
            } => {
                check_key(&txn, bucket, key.as_bytes())?;
                let upload = upload_in(&txn, upload_id)?;
                Ok(IndexAnswer::Upload(
                    upload.filter(|u| &u.bucket == bucket && &u.key == key),
                ))
            }
            IndexQuery::Parts {
                bucket,
                key,
                upload_id,
            } => {
                check_key(&txn, bucket, key.as_bytes())?;
                parts_in(&txn, upload_id).map(IndexAnswer::Parts)
            }
            IndexQuery::UploadChecksums {
                bucket,
                key,
                upload_id,
            } => {
                check_key(&txn, bucket, key.as_bytes())?;
                upload_checksums_in(&txn, upload_id).map(IndexAnswer::UploadChecksums)
            }
            IndexQuery::List {
                bucket,
                query,
                span,
            } => {
                check_span(&txn, bucket, span)?;
                list_span(&txn.open_table(OBJECTS)?, bucket, query, span).map(IndexAnswer::List)
            }
            IndexQuery::Versions {
                bucket,
                query,
                span,
            } => {
                check_span(&txn, bucket, span)?;
                let tables = Tables {
                    objects: txn.open_table(OBJECTS)?,
                    versions: txn.open_table(VERSIONS)?,
                    null_versions: txn.open_table(NULL_VERSIONS)?,
                };
                list_versions_span(&tables, bucket, query, span).map(IndexAnswer::Versions)
            }
            IndexQuery::Uploads {
                bucket,
                prefix,
                after,
                span,
            } => {
                check_span(&txn, bucket, span)?;
                uploads_span_in(&txn, bucket, prefix, after.as_ref(), span)
                    .map(IndexAnswer::Uploads)
            }
        }
    }
}

/// What the group answers index reads of, in the snapshot `txn` reads: its own key
/// intervals and those it handed off in a split whose copy still reads them (None: it owns
/// everything). Outside them a read is `Moved`, so it never answers from rows a split left
/// behind.
fn readable(txn: &redb::ReadTransaction) -> Result<Option<ownership::Ownership>, MetaError> {
    let Some(own) = ownership::read_at(txn)? else {
        return Ok(None);
    };
    let handed = handoff::read(&txn.open_table(ownership::OWNERSHIP)?)?;
    Ok(Some(match handed {
        Some(h) if h.readable && !h.keys.is_empty() => own.with_keys(&h.keys),
        _ => own,
    }))
}

fn check_key(txn: &redb::ReadTransaction, bucket: &str, key: &[u8]) -> Result<(), MetaError> {
    match readable(txn)? {
        Some(own) if !own.owns_key(bucket, key) => Err(MetaError::Moved {
            map_version: own.map_version,
        }),
        _ => Ok(()),
    }
}

fn check_span(txn: &redb::ReadTransaction, bucket: &str, span: &Span) -> Result<(), MetaError> {
    match readable(txn)? {
        Some(own) if !own.owns_span(bucket, span.from.key(), span.until.as_deref()) => {
            Err(MetaError::Moved {
                map_version: own.map_version,
            })
        }
        _ => Ok(()),
    }
}
