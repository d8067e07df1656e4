//! Object commands: puts (with their preconditions), server-side copies, deletes, and the
//! expiry of what a bucket's lifecycle rules say is due.

use redb::{ReadableTable, WriteTransaction};

use super::refs::{Holder, reference, release};
use super::versions;
use crate::command::{ContentSource, DeleteOutcome, NewObject, WritePrecondition};
use crate::tables::{self, OBJECTS, ObjectRecord, check_bucket};
use crate::versions::Versioning;
use crate::{MetaError, Response, lifecycle};

pub use crate::lifecycle::EXPIRE_KEYS_MAX;
/// Bound on the keys of one `DeleteObjectsMatching`: S3's 1000 keys per DeleteObjects.
pub const DELETE_KEYS_MAX: usize = 1000;

/// The object a `CopyObject` copies, as the caller read it.
pub(super) struct CopySource<'a> {
    pub bucket: &'a str,
    pub key: &'a str,
    pub seq: u64,
}

/// `PutObject`: checks the bucket and the precondition, references the content (unless
/// an `Existing` one has gone) and stores the object.
pub(super) fn put(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
    object: &NewObject,
    source: ContentSource,
    now_secs: u64,
    precondition: &Option<WritePrecondition>,
) -> Result<Response, MetaError> {
    check_bucket(txn, bucket)?;
    if let Some(pre) = precondition {
        pre.check(read_object(txn, bucket, key)?.as_ref())?;
    }
    if !reference(txn, &object.sha1, object.magic, source)? {
        return Ok(Response::ContentGone);
    }
    store_object(txn, bucket, key, object, now_secs)
}

/// `CopyObject`: stores `object` (the source's content under a new reference) if the
/// source is still the version the caller read.
pub(super) fn copy(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
    object: &NewObject,
    from: CopySource<'_>,
    now_secs: u64,
) -> Result<Response, MetaError> {
    let CopySource {
        bucket: from_bucket,
        key: from_key,
        seq: from_seq,
    } = from;
    check_bucket(txn, bucket)?;
    match read_object(txn, from_bucket, from_key)? {
        Some(src) if src.seq == from_seq && src.sha1 == object.sha1 => {}
        Some(_) => return Err(MetaError::PreconditionFailed),
        None => return Err(MetaError::NoSuchKey),
    }
    // The source holds a reference, so its content is live: Existing cannot fail.
    if !reference(txn, &object.sha1, object.magic, ContentSource::Existing)? {
        return Err(MetaError::Corrupt(format!(
            "{from_bucket}/{from_key}: content {} missing",
            object.sha1
        )));
    }
    store_object(txn, bucket, key, object, now_secs)
}

/// `DeleteObject`: removes one object and releases its content.
pub(super) fn delete(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
    now_secs: u64,
) -> Result<Response, MetaError> {
    let versioning = versions::versioning_of(txn, bucket)?;
    if versioning != Versioning::Unversioned {
        return versions::add_marker(txn, bucket, key, versioning, now_secs);
    }
    let removed = remove_object(txn, bucket, key)?;
    let released = match &removed {
        Some(old) => Some(release(
            txn,
            &old.sha1,
            old.magic,
            now_secs,
            Holder::object(bucket, key, old),
        )?),
        None => None,
    };
    Ok(Response::ObjectDeleted { removed, released })
}

/// `DeleteObjects`: removes each key and releases its content; for each, whether it
/// existed.
pub(super) fn delete_many(
    txn: &WriteTransaction,
    bucket: &str,
    keys: &[String],
    now_secs: u64,
) -> Result<Response, MetaError> {
    check_bucket(txn, bucket)?;
    refuse_versioned(txn, bucket)?;
    let mut existed = Vec::with_capacity(keys.len());
    for key in keys {
        existed.push(remove_released(txn, bucket, key, now_secs)?.is_some());
    }
    Ok(Response::ObjectsDeleted(existed))
}

/// Removes bucket/key from the S3 index and releases the content of the object it held;
/// that object, if there was one.
pub(super) fn remove_released(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
    now_secs: u64,
) -> Result<Option<ObjectRecord>, MetaError> {
    let removed = remove_object(txn, bucket, key)?;
    if let Some(old) = &removed {
        release(
            txn,
            &old.sha1,
            old.magic,
            now_secs,
            Holder::object(bucket, key, old),
        )?;
    }
    Ok(removed)
}

/// `DeleteObjectsMatching`: removes each key whose condition holds (or that has none)
/// and releases its content; what happened to each.
pub(super) fn delete_matching(
    txn: &WriteTransaction,
    bucket: &str,
    objects: &[(String, Option<WritePrecondition>)],
    now_secs: u64,
) -> Result<Response, MetaError> {
    check_bucket(txn, bucket)?;
    refuse_versioned(txn, bucket)?;
    if objects.len() > DELETE_KEYS_MAX {
        return Err(MetaError::Unexpected(format!(
            "DeleteObjectsMatching of {} keys",
            objects.len()
        )));
    }
    let mut outcomes = Vec::with_capacity(objects.len());
    for (key, precondition) in objects {
        if let Some(pre) = precondition {
            match pre.check(read_object(txn, bucket, key)?.as_ref()) {
                Ok(()) => {}
                Err(MetaError::PreconditionFailed) => {
                    outcomes.push(DeleteOutcome::PreconditionFailed);
                    continue;
                }
                Err(MetaError::NoSuchKey) => {
                    outcomes.push(DeleteOutcome::NoSuchKey);
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
        match remove_object(txn, bucket, key)? {
            Some(old) => {
                let holder = Holder::object(bucket, key, &old);
                release(txn, &old.sha1, old.magic, now_secs, holder)?;
                outcomes.push(DeleteOutcome::Deleted);
            }
            None => outcomes.push(DeleteOutcome::Absent),
        }
    }
    Ok(Response::ObjectsDeletedMatching(outcomes))
}

/// `ExpireObjects`: removes the objects the bucket's rules say are due, each only if it
/// is still the version the caller read (see [`lifecycle::expirable`]); in a versioned
/// bucket a delete marker goes on top of each instead.
pub(super) fn expire(
    txn: &WriteTransaction,
    bucket: &str,
    objects: &[(String, u64)],
    resume_after: &Option<String>,
    day_secs: u64,
    now_secs: u64,
) -> Result<Response, MetaError> {
    // A versioned bucket's expired current version is kept, behind a delete marker.
    let versioning = versions::versioning_of(txn, bucket)?;
    if objects.len() > EXPIRE_KEYS_MAX {
        return Err(MetaError::Unexpected(format!(
            "ExpireObjects of {} keys",
            objects.len()
        )));
    }
    let due = lifecycle::expirable(txn, bucket, objects, resume_after, day_secs, now_secs)?;
    for ((key, _), due) in objects.iter().zip(&due) {
        if !due {
            continue;
        }
        if versioning != Versioning::Unversioned {
            versions::add_marker(txn, bucket, key, versioning, now_secs)?;
        } else if let Some(old) = remove_object(txn, bucket, key)? {
            let holder = Holder::object(bucket, key, &old);
            release(txn, &old.sha1, old.magic, now_secs, holder)?;
        }
    }
    Ok(Response::ObjectsDeleted(due))
}

/// Stores `object` under bucket/key with the next sequence number and releases the
/// content of the object it replaces; in a versioned bucket the replaced version is kept
/// instead ([`versions::put`]). The new content must already be referenced.
pub(super) fn store_object(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
    object: &NewObject,
    now_secs: u64,
) -> Result<Response, MetaError> {
    let seq = versions::next_seq(txn)?;
    let record = object.clone().into_record(seq);
    let versioning = versions::versioning_of(txn, bucket)?;
    if versioning != Versioning::Unversioned {
        return versions::put(txn, bucket, key, &record, versioning, now_secs);
    }
    let bytes = tables::encode_versioned(&record)?;
    let replaced = match txn
        .open_table(OBJECTS)?
        .insert((bucket, key.as_bytes()), bytes.as_slice())?
    {
        Some(v) => Some(crate::versions::decode_object(v.value())?),
        None => None,
    };
    let released = match &replaced {
        Some(old) => Some(release(
            txn,
            &old.sha1,
            old.magic,
            now_secs,
            Holder::object(bucket, key, old),
        )?),
        None => None,
    };
    Ok(Response::ObjectPut {
        seq,
        replaced,
        released,
    })
}

/// The many-key deletes of a versioned bucket (markers per key, versions expiring) come
/// with ListObjectVersions and lifecycle on versions (`docs/versions.md`, steps 3 and 4);
/// until then they are refused, never applied as unversioned deletes.
fn refuse_versioned(txn: &WriteTransaction, bucket: &str) -> Result<(), MetaError> {
    match versions::versioning_of(txn, bucket)? {
        Versioning::Unversioned => Ok(()),
        _ => Err(MetaError::InvalidCommand(
            "a many-key delete in a versioned bucket".to_string(),
        )),
    }
}

pub(super) fn read_object(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
) -> Result<Option<ObjectRecord>, MetaError> {
    match txn.open_table(OBJECTS)?.get((bucket, key.as_bytes()))? {
        Some(v) => Ok(Some(crate::versions::decode_object(v.value())?)),
        None => Ok(None),
    }
}

/// Removes bucket/key from the S3 index; the object it held, if any. Its content is
/// still referenced: the caller releases it.
fn remove_object(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
) -> Result<Option<ObjectRecord>, MetaError> {
    txn.open_table(OBJECTS)?
        .remove((bucket, key.as_bytes()))?
        .map(|v| crate::versions::decode_object(v.value()))
        .transpose()
}
