//! Bucket commands: a bucket created (with its owner) or deleted, and its CORS and
//! lifecycle rules.

use redb::{ReadableTable, WriteTransaction};

use super::revisions;
use super::uploads::drop_upload;
use crate::acl::CannedAcl;
use crate::bucket_copies::LIFECYCLE_FORMAT;
use crate::extras::{self, BUCKET_EXTRAS, BUCKETS_OF};
use crate::lifecycle::{self, LifecycleRule};
use crate::tables::{self, BUCKETS, BucketRecord, CorsRule, check_bucket};
use crate::tags::{self, TagSet};
use crate::versions::{LockConfig, Versioning};
use crate::{MetaError, Response, keys};

/// A new bucket owned by `owner`; an existing one is the caller's (BucketExists) or
/// another key's (BucketOwnedByAnother), as S3 tells the two apart.
pub(super) fn create(
    txn: &WriteTransaction,
    bucket: &str,
    created_ms: u64,
    owner: &Option<String>,
    object_lock: bool,
) -> Result<Response, MetaError> {
    let mut buckets = txn.open_table(BUCKETS)?;
    if let Some(v) = buckets.get(bucket)? {
        let existing = BucketRecord::decode(v.value())?;
        return Err(if existing.owner == *owner {
            MetaError::BucketExists
        } else {
            MetaError::BucketOwnedByAnother
        });
    }
    let record = BucketRecord {
        created_ms,
        cors: None,
        owner: owner.clone(),
        // Object lock needs every version kept: on for good, with versioning.
        versioning: if object_lock {
            Versioning::Enabled
        } else {
            Versioning::Unversioned
        },
        object_lock: object_lock.then(LockConfig::default),
    };
    buckets.insert(bucket, record.encode()?.as_slice())?;
    drop(buckets);
    revisions::count_change(txn, bucket)?;
    // Uploads left by a bucket deleted before DeleteBucket refused them: a new bucket of
    // the same name must not inherit them.
    for upload_id in lifecycle::uploads_of(txn, bucket)? {
        drop_upload(txn, &upload_id, created_ms / 1000)?;
    }
    lifecycle::forget(txn, bucket)?;
    extras::forget(txn, BUCKET_EXTRAS, bucket)?;
    Ok(Response::Done)
}

/// `SetBucketCors`: sets (or with `None` removes) a bucket's CORS rules.
pub(super) fn set_cors(
    txn: &WriteTransaction,
    bucket: &str,
    rules: &Option<Vec<CorsRule>>,
) -> Result<Response, MetaError> {
    let mut buckets = txn.open_table(BUCKETS)?;
    let mut record = match buckets.get(bucket)? {
        Some(v) => BucketRecord::decode(v.value())?,
        None => return Err(MetaError::NoSuchBucket),
    };
    record.cors = rules.clone();
    buckets.insert(bucket, record.encode()?.as_slice())?;
    revisions::count_change(txn, bucket)?;
    Ok(Response::Done)
}

/// `SetBucketTags`: sets (an empty set: removes) a bucket's tags.
pub(super) fn set_tags(
    txn: &WriteTransaction,
    bucket: &str,
    tags: &TagSet,
) -> Result<Response, MetaError> {
    check_bucket(txn, bucket)?;
    tags.check(tags::BUCKET_TAGS_MAX)
        .map_err(|e| MetaError::InvalidCommand(e.to_string()))?;
    extras::update(txn, BUCKETS_OF, bucket, |e| e.tags = tags.clone())?;
    Ok(Response::Done)
}

/// `SetBucketAcl`: the bucket's canned ACL.
pub(super) fn set_acl(
    txn: &WriteTransaction,
    bucket: &str,
    acl: CannedAcl,
) -> Result<Response, MetaError> {
    check_bucket(txn, bucket)?;
    extras::update(txn, BUCKETS_OF, bucket, |e| e.acl = acl)?;
    Ok(Response::Done)
}

/// `SetBucketLifecycle`: sets (or with `None` removes) a bucket's lifecycle rules.
pub(super) fn set_lifecycle(
    txn: &WriteTransaction,
    bucket: &str,
    rules: &Option<Vec<LifecycleRule>>,
) -> Result<Response, MetaError> {
    lifecycle::set(txn, bucket, rules)?;
    revisions::count_change_from(txn, bucket, LIFECYCLE_FORMAT)?;
    Ok(Response::Done)
}

/// `DeleteBucket`: refused while the bucket holds objects or uploads in progress.
pub(super) fn delete(txn: &WriteTransaction, bucket: &str) -> Result<Response, MetaError> {
    check_bucket(txn, bucket)?;
    if tables::first_key_of(txn, bucket)?.is_some() || super::versions::any_in(txn, bucket)? {
        return Err(MetaError::BucketNotEmpty);
    }
    // As S3: uploads in progress keep the bucket from being deleted, so that no
    // upload or part outlives its bucket.
    if !lifecycle::uploads_of(txn, bucket)?.is_empty() {
        return Err(MetaError::BucketNotEmpty);
    }
    forget_bucket(txn, bucket)?;
    Ok(Response::Done)
}

/// Removes an empty bucket's record and what hangs on it: its lifecycle rules and the
/// keys' grants (a later bucket of the same name, perhaps another key's, starts with none).
pub(super) fn forget_bucket(txn: &WriteTransaction, bucket: &str) -> Result<(), MetaError> {
    txn.open_table(BUCKETS)?.remove(bucket)?;
    revisions::count_change(txn, bucket)?;
    extras::forget(txn, BUCKET_EXTRAS, bucket)?;
    lifecycle::forget(txn, bucket)?;
    keys::drop_grants(txn, bucket)?;
    Ok(())
}
