//! The writes of versioned buckets (see `docs/versions.md`): a PUT keeps the version it
//! replaces, a DELETE without a version id adds a delete marker, a DELETE with one
//! removes that version and releases its content once.
//!
//! The current object version of a key stays in `objects`; noncurrent versions and
//! delete markers are in `versions`, newest first. Every function here keeps the
//! invariants of the design: the `objects` record (if any) is newer than every `versions`
//! entry of its key, and a noncurrent object is never the newest entry while `objects`
//! has none.

use placement::Magic;
use redb::{ReadableTable, WriteTransaction};

use super::refs::{Holder, release};
use crate::command::LockChange;
use crate::extras::Extras;
use crate::lifecycle::{self, rules};
use crate::tables::{
    BUCKETS, BucketRecord, COUNTERS, NULL_VERSIONS, OBJECT_SEQ, OBJECTS, ObjectRecord, VERSIONS,
};
use crate::versions::{
    LockConfig, ObjectLock, VersionId, VersionRecord, VersionStamp, Versioning, decode_current,
    decode_current_with, encode_current, encode_current_with, null_number, order_of,
};
use crate::{MetaError, Response};

/// The bucket's versioning state (NoSuchBucket if there is no bucket).
pub(super) fn versioning_of(txn: &WriteTransaction, bucket: &str) -> Result<Versioning, MetaError> {
    match txn.open_table(BUCKETS)?.get(bucket)? {
        Some(v) => Ok(BucketRecord::decode(v.value())?.versioning),
        None => Err(MetaError::NoSuchBucket),
    }
}

/// `SetBucketVersioning`: Enabled or Suspended, from any state; never back to Unversioned
/// (S3 has no way back: the versions a bucket keeps need their ids).
pub(super) fn set_versioning(
    txn: &WriteTransaction,
    bucket: &str,
    state: Versioning,
) -> Result<Response, MetaError> {
    if state == Versioning::Unversioned {
        return Err(MetaError::InvalidCommand(
            "a bucket cannot return to unversioned".to_string(),
        ));
    }
    let mut buckets = txn.open_table(BUCKETS)?;
    let mut record = match buckets.get(bucket)? {
        Some(v) => BucketRecord::decode(v.value())?,
        None => return Err(MetaError::NoSuchBucket),
    };
    if record.object_lock.is_some() && state != Versioning::Enabled {
        return Err(MetaError::InvalidBucketState(
            "An Object Lock configuration is present on this bucket, so the versioning state cannot be changed.".to_string(),
        ));
    }
    record.versioning = state;
    buckets.insert(bucket, record.encode()?.as_slice())?;
    super::revisions::count_change(txn, bucket)?;
    Ok(Response::Done)
}

/// The bucket's record (NoSuchBucket if there is none).
fn bucket_record(txn: &WriteTransaction, bucket: &str) -> Result<BucketRecord, MetaError> {
    match txn.open_table(BUCKETS)?.get(bucket)? {
        Some(v) => BucketRecord::decode(v.value()),
        None => Err(MetaError::NoSuchBucket),
    }
}

/// `SetObjectLockConfig`: the default retention; enables object lock on a bucket whose
/// versioning is Enabled (S3 refuses it otherwise).
pub(super) fn set_lock_config(
    txn: &WriteTransaction,
    bucket: &str,
    config: LockConfig,
) -> Result<Response, MetaError> {
    let mut record = bucket_record(txn, bucket)?;
    if record.object_lock.is_none() && record.versioning != Versioning::Enabled {
        return Err(MetaError::InvalidBucketState(
            "Versioning must be 'Enabled' on the bucket to apply a Object Lock configuration"
                .to_string(),
        ));
    }
    record.object_lock = Some(config);
    txn.open_table(BUCKETS)?
        .insert(bucket, record.encode()?.as_slice())?;
    super::revisions::count_change(txn, bucket)?;
    Ok(Response::Done)
}

/// `Locked`, after its write: the lock the request asked for on the key's current
/// version (the one just written).
pub(super) fn lock_current(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
    change: LockChange,
) -> Result<(), MetaError> {
    if bucket_record(txn, bucket)?.object_lock.is_none() {
        return Err(MetaError::InvalidBucketState(
            "Bucket is missing Object Lock Configuration".to_string(),
        ));
    }
    let mut objects = txn.open_table(OBJECTS)?;
    let current = objects
        .get((bucket, key.as_bytes()))?
        .map(|v| decode_current_with(v.value()))
        .transpose()?;
    let Some((record, mut stamp, extras)) = current else {
        return Err(MetaError::Unexpected(format!(
            "{bucket}/{key}: no current version after its write"
        )));
    };
    apply_change(&mut stamp.lock, change);
    objects.insert(
        (bucket, key.as_bytes()),
        encode_current_with(&record, stamp, &extras)?.as_slice(),
    )?;
    Ok(())
}

fn apply_change(lock: &mut ObjectLock, change: LockChange) {
    if let Some(retention) = change.retention {
        lock.retention = retention;
    }
    if let Some(hold) = change.legal_hold {
        lock.legal_hold = hold;
    }
}

/// `SetObjectTags` and `SetObjectAcl`: changes the extras of one version (the current one
/// without an id) with `f`. Answers the version's id where the bucket has versioning.
pub(super) fn set_extras(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
    version: Option<VersionId>,
    f: impl FnOnce(&mut Extras),
) -> Result<Option<String>, MetaError> {
    let versioning = versioning_of(txn, bucket)?;
    let id_of = |stamp: VersionStamp, magic| {
        (versioning != Versioning::Unversioned).then(|| stamp.id(magic))
    };
    let k = key.as_bytes();
    let current = txn
        .open_table(OBJECTS)?
        .get((bucket, k))?
        .map(|v| decode_current_with(v.value()))
        .transpose()?;
    if let Some((record, stamp, mut extras)) = current
        && version.is_none_or(|id| id.names(stamp, Some(record.magic)))
    {
        f(&mut extras);
        txn.open_table(OBJECTS)?.insert(
            (bucket, k),
            encode_current_with(&record, stamp, &extras)?.as_slice(),
        )?;
        return Ok(id_of(stamp, record.magic));
    }
    let Some(id) = version else {
        return Err(MetaError::NoSuchKey);
    };
    let number = match id {
        VersionId::Numbered { number, .. } => number,
        VersionId::Null => null_number(&txn.open_table(NULL_VERSIONS)?, bucket, key)?
            .ok_or(MetaError::NoSuchVersion)?,
    };
    let mut versions = txn.open_table(VERSIONS)?;
    let entry = versions
        .get((bucket, k, order_of(number)))?
        .map(|v| VersionRecord::decode_with(v.value()))
        .transpose()?;
    match entry {
        Some((entry @ VersionRecord::Object { .. }, mut extras))
            if id.names(entry.stamp(), Some(entry.magic())) =>
        {
            f(&mut extras);
            versions.insert(
                (bucket, k, order_of(number)),
                entry.encode_with(&extras)?.as_slice(),
            )?;
            Ok(id_of(entry.stamp(), entry.magic()))
        }
        // A delete marker has no tags nor ACL (S3: MethodNotAllowed; the gateway tells it
        // first).
        Some((VersionRecord::DeleteMarker { .. }, _)) => Err(MetaError::InvalidCommand(
            "a delete marker has no tags nor ACL".to_string(),
        )),
        _ => Err(MetaError::NoSuchVersion),
    }
}

/// A write under `Tagged` or `WithAcl` (or an upload's completion): `f` changes the
/// extras of the key's current version (the one just written).
pub(super) fn update_current(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
    f: impl FnOnce(&mut Extras),
) -> Result<(), MetaError> {
    let mut objects = txn.open_table(OBJECTS)?;
    let current = objects
        .get((bucket, key.as_bytes()))?
        .map(|v| decode_current_with(v.value()))
        .transpose()?;
    let Some((record, stamp, mut extras)) = current else {
        return Err(MetaError::Unexpected(format!(
            "{bucket}/{key}: no current version after its write"
        )));
    };
    f(&mut extras);
    objects.insert(
        (bucket, key.as_bytes()),
        encode_current_with(&record, stamp, &extras)?.as_slice(),
    )?;
    Ok(())
}

/// `SetObjectLock`: a retention or legal hold change on one version (the current one
/// without an id), within the rules of [`ObjectLock::may_set_retention`].
pub(super) fn set_lock(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
    version: Option<VersionId>,
    change: LockChange,
    bypass_governance: bool,
    now_ms: u64,
) -> Result<Response, MetaError> {
    if bucket_record(txn, bucket)?.object_lock.is_none() {
        return Err(MetaError::InvalidBucketState(
            "Bucket is missing Object Lock Configuration".to_string(),
        ));
    }
    let allowed = |lock: &ObjectLock| match change.retention {
        Some(new) => lock.may_set_retention(new, now_ms, bypass_governance),
        None => true,
    };
    let k = key.as_bytes();
    let current = txn
        .open_table(OBJECTS)?
        .get((bucket, k))?
        .map(|v| decode_current_with(v.value()))
        .transpose()?;
    if let Some((record, mut stamp, extras)) = current
        && version.is_none_or(|id| id.names(stamp, Some(record.magic)))
    {
        if !allowed(&stamp.lock) {
            return Err(MetaError::ObjectLocked);
        }
        apply_change(&mut stamp.lock, change);
        txn.open_table(OBJECTS)?.insert(
            (bucket, k),
            encode_current_with(&record, stamp, &extras)?.as_slice(),
        )?;
        return Ok(Response::Done);
    }
    let Some(id) = version else {
        return Err(MetaError::NoSuchKey);
    };
    let number = match id {
        VersionId::Numbered { number, .. } => number,
        VersionId::Null => null_number(&txn.open_table(NULL_VERSIONS)?, bucket, key)?
            .ok_or(MetaError::NoSuchVersion)?,
    };
    let mut versions = txn.open_table(VERSIONS)?;
    let entry = versions
        .get((bucket, k, order_of(number)))?
        .map(|v| VersionRecord::decode_with(v.value()))
        .transpose()?;
    match entry {
        Some((
            VersionRecord::Object {
                record,
                mut stamp,
                noncurrent_since_ms,
            },
            extras,
        )) if id.names(stamp, Some(record.magic)) => {
            if !allowed(&stamp.lock) {
                return Err(MetaError::ObjectLocked);
            }
            apply_change(&mut stamp.lock, change);
            let entry = VersionRecord::Object {
                record,
                stamp,
                noncurrent_since_ms,
            };
            versions.insert(
                (bucket, k, order_of(number)),
                entry.encode_with(&extras)?.as_slice(),
            )?;
            Ok(Response::Done)
        }
        // A delete marker has no content to lock (S3: MethodNotAllowed).
        Some((VersionRecord::DeleteMarker { .. }, _)) => Err(MetaError::InvalidCommand(
            "a delete marker cannot be locked".to_string(),
        )),
        _ => Err(MetaError::NoSuchVersion),
    }
}

/// The next object sequence number (also the source of a delete marker's magic: `apply`
/// has no randomness, and every node derives the same one).
pub(super) fn next_seq(txn: &WriteTransaction) -> Result<u64, MetaError> {
    let mut counters = txn.open_table(COUNTERS)?;
    let next = counters.get(OBJECT_SEQ)?.map(|v| v.value()).unwrap_or(0) + 1;
    counters.insert(OBJECT_SEQ, next)?;
    Ok(next)
}

/// The newest `versions` entry of a key, with its number and extras.
fn newest_entry(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
) -> Result<Option<(u64, VersionRecord, Extras)>, MetaError> {
    let table = txn.open_table(VERSIONS)?;
    let k = key.as_bytes();
    let mut range = table.range((bucket, k, 0)..=(bucket, k, u64::MAX))?;
    match range.next() {
        Some(entry) => {
            let (key, value) = entry?;
            let (_, _, order) = key.value();
            let (record, extras) = VersionRecord::decode_with(value.value())?;
            Ok(Some((u64::MAX - order, record, extras)))
        }
        None => Ok(None),
    }
}

/// Adds a `versions` entry (with its extras) under its number, indexing it when it is the
/// null version.
fn insert_entry(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
    entry: &VersionRecord,
    extras: &Extras,
) -> Result<(), MetaError> {
    let stamp = entry.stamp();
    txn.open_table(VERSIONS)?.insert(
        (bucket, key.as_bytes(), order_of(stamp.number)),
        entry.encode_with(extras)?.as_slice(),
    )?;
    if stamp.null {
        txn.open_table(NULL_VERSIONS)?
            .insert((bucket, key.as_bytes()), stamp.number)?;
    }
    Ok(())
}

/// Removes the `versions` entry with this number (and its null index).
fn remove_entry(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
    number: u64,
) -> Result<Option<VersionRecord>, MetaError> {
    let removed = txn
        .open_table(VERSIONS)?
        .remove((bucket, key.as_bytes(), order_of(number)))?
        .map(|v| VersionRecord::decode(v.value()))
        .transpose()?;
    if removed.as_ref().is_some_and(|e| e.stamp().null) {
        txn.open_table(NULL_VERSIONS)?
            .remove((bucket, key.as_bytes()))?;
    }
    Ok(removed)
}

/// A suspended bucket's write replaces the key's null version: it goes wherever it is
/// (the current object, or an entry of `versions`), releasing an object's content once.
fn drop_null(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
    now_secs: u64,
) -> Result<(), MetaError> {
    let current = txn
        .open_table(OBJECTS)?
        .get((bucket, key.as_bytes()))?
        .map(|v| decode_current(v.value()))
        .transpose()?;
    if let Some((record, stamp)) = current
        && stamp.null
    {
        if stamp.lock.holds(now_secs.saturating_mul(1000), false) {
            return Err(MetaError::ObjectLocked);
        }
        txn.open_table(OBJECTS)?.remove((bucket, key.as_bytes()))?;
        release(
            txn,
            &record.sha1,
            record.magic,
            now_secs,
            Holder::object(bucket, key, &record),
        )?;
        return Ok(());
    }
    let number = null_number(&txn.open_table(NULL_VERSIONS)?, bucket, key)?;
    if let Some(number) = number {
        let locked = txn
            .open_table(VERSIONS)?
            .get((bucket, key.as_bytes(), order_of(number)))?
            .map(|v| VersionRecord::decode(v.value()))
            .transpose()?
            .is_some_and(|e| e.stamp().lock.holds(now_secs.saturating_mul(1000), false));
        if locked {
            return Err(MetaError::ObjectLocked);
        }
        if let Some(VersionRecord::Object { record, .. }) = remove_entry(txn, bucket, key, number)?
        {
            release(
                txn,
                &record.sha1,
                record.magic,
                now_secs,
                Holder::object(bucket, key, &record),
            )?;
        }
    }
    Ok(())
}

/// The highest number the key has in either table.
fn highest_number(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
) -> Result<Option<u64>, MetaError> {
    if let Some(v) = txn.open_table(OBJECTS)?.get((bucket, key.as_bytes()))? {
        return Ok(Some(decode_current(v.value())?.1.number));
    }
    Ok(newest_entry(txn, bucket, key)?.map(|(n, _, _)| n))
}

/// The stamp of a new version: the next number, null in a suspended bucket (whose old
/// null version `drop_null` has removed first).
fn next_stamp(highest: Option<u64>, versioning: Versioning) -> VersionStamp {
    VersionStamp {
        number: highest.map_or(1, |n| n + 1),
        null: versioning == Versioning::Suspended,
        lock: ObjectLock::NONE,
    }
}

/// Moves the current object version of a key (if any) to `versions`, as noncurrent since
/// `now_ms`; the highest number the key has in either table after it.
fn retire_current(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
    now_ms: u64,
) -> Result<Option<u64>, MetaError> {
    let current = txn
        .open_table(OBJECTS)?
        .remove((bucket, key.as_bytes()))?
        .map(|v| decode_current_with(v.value()))
        .transpose()?;
    match current {
        Some((record, stamp, extras)) => {
            let entry = VersionRecord::Object {
                record: Box::new(record),
                stamp,
                noncurrent_since_ms: now_ms,
            };
            // Its tags go with it.
            insert_entry(txn, bucket, key, &entry, &extras)?;
            // It was newer than every entry there (invariant 1).
            Ok(Some(stamp.number))
        }
        None => Ok(newest_entry(txn, bucket, key)?.map(|(n, _, _)| n)),
    }
}

/// A versioned bucket's PUT (or copy, or completion) of `record`, whose content is
/// already referenced: the current version becomes noncurrent and `record` the current
/// one. In a suspended bucket `record` is the null version, replacing the old one.
pub(super) fn put(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
    record: &ObjectRecord,
    versioning: Versioning,
    now_secs: u64,
) -> Result<Response, MetaError> {
    if versioning == Versioning::Suspended {
        drop_null(txn, bucket, key, now_secs)?;
    }
    let now_ms = now_secs.saturating_mul(1000);
    retire_current(txn, bucket, key, now_ms)?;
    let mut stamp = next_stamp(highest_number(txn, bucket, key)?, versioning);
    // A write that names no lock gets the bucket's default retention (`Locked` then sets
    // what the request named, over it).
    if let Some(default) = bucket_record(txn, bucket)?
        .object_lock
        .and_then(|c| c.default_retention)
    {
        stamp.lock.retention = Some(default.from(now_ms));
    }
    txn.open_table(OBJECTS)?.insert(
        (bucket, key.as_bytes()),
        encode_current(record, stamp)?.as_slice(),
    )?;
    Ok(Response::VersionStored {
        seq: record.seq,
        version_id: stamp.id(record.magic),
    })
}

/// A versioned bucket's DELETE without a version id: the current version becomes
/// noncurrent and a delete marker the newest version (even where there was no object,
/// as S3 does). In a suspended bucket the marker is the null version, replacing the old.
pub(super) fn add_marker(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
    versioning: Versioning,
    now_secs: u64,
) -> Result<Response, MetaError> {
    let seq = next_seq(txn)?;
    if versioning == Versioning::Suspended {
        drop_null(txn, bucket, key, now_secs)?;
    }
    let now_ms = now_secs.saturating_mul(1000);
    retire_current(txn, bucket, key, now_ms)?;
    let stamp = next_stamp(highest_number(txn, bucket, key)?, versioning);
    // Any nonzero value: the seq's low bits differ between the markers of a key.
    let magic = Magic::new((seq as u32).max(1))
        .map_err(|e| MetaError::Unexpected(format!("marker magic: {e}")))?;
    let marker = VersionRecord::DeleteMarker {
        stamp,
        created_ms: now_ms,
        magic,
    };
    insert_entry(txn, bucket, key, &marker, &Extras::NONE)?;
    Ok(Response::MarkerAdded {
        version_id: stamp.id(magic),
    })
}

/// A DELETE with a version id: removes that version (releasing an object version's
/// content once) and makes the next newest current: an object moves back to `objects`, a
/// delete marker stays where it is. A version that does not exist is NoSuchVersion.
pub(super) fn delete_version(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
    id: VersionId,
    now_secs: u64,
    bypass_governance: bool,
) -> Result<Response, MetaError> {
    versioning_of(txn, bucket)?;
    let now_ms = now_secs.saturating_mul(1000);
    let k = key.as_bytes();
    let current = match txn.open_table(OBJECTS)?.get((bucket, k))? {
        Some(v) => Some(decode_current(v.value())?),
        None => None,
    };
    if let Some((record, stamp)) = &current
        && id.names(*stamp, Some(record.magic))
    {
        if stamp.lock.holds(now_ms, bypass_governance) {
            return Err(MetaError::ObjectLocked);
        }
        txn.open_table(OBJECTS)?.remove((bucket, k))?;
        release(
            txn,
            &record.sha1,
            record.magic,
            now_secs,
            Holder::object(bucket, key, record),
        )?;
        promote(txn, bucket, key)?;
        return Ok(Response::VersionDeleted {
            version_id: stamp.id(record.magic),
            marker: false,
        });
    }
    let number = match id {
        VersionId::Numbered { number, .. } => number,
        VersionId::Null => match null_number(&txn.open_table(NULL_VERSIONS)?, bucket, key)? {
            Some(number) => number,
            None => return Err(MetaError::NoSuchVersion),
        },
    };
    let entry = {
        let table = txn.open_table(VERSIONS)?;
        let found = table.get((bucket, k, order_of(number)))?;
        match found {
            Some(v) => VersionRecord::decode(v.value())?,
            None => return Err(MetaError::NoSuchVersion),
        }
    };
    let magic = entry.magic();
    if !id.names(entry.stamp(), Some(magic)) {
        return Err(MetaError::NoSuchVersion);
    }
    if entry.stamp().lock.holds(now_ms, bypass_governance) {
        return Err(MetaError::ObjectLocked);
    }
    let was_newest =
        current.is_none() && newest_entry(txn, bucket, key)?.is_some_and(|(n, _, _)| n == number);
    remove_entry(txn, bucket, key, number)?;
    let marker = match &entry {
        VersionRecord::Object { record, .. } => {
            release(
                txn,
                &record.sha1,
                record.magic,
                now_secs,
                Holder::object(bucket, key, record),
            )?;
            false
        }
        VersionRecord::DeleteMarker { .. } => true,
    };
    if was_newest {
        promote(txn, bucket, key)?;
    }
    Ok(Response::VersionDeleted {
        version_id: entry.stamp().id(magic),
        marker,
    })
}

/// After the current version went: the newest `versions` entry, if it is an object,
/// becomes the current one (a marker stays current where it is).
fn promote(txn: &WriteTransaction, bucket: &str, key: &str) -> Result<(), MetaError> {
    if let Some((number, VersionRecord::Object { record, stamp, .. }, extras)) =
        newest_entry(txn, bucket, key)?
    {
        remove_entry(txn, bucket, key, number)?;
        // Its tags come back with it.
        txn.open_table(OBJECTS)?.insert(
            (bucket, key.as_bytes()),
            encode_current_with(&record, stamp, &extras)?.as_slice(),
        )?;
    }
    Ok(())
}

/// Whether a bucket holds any version or marker (DeleteBucket refuses it then).
pub(super) fn any_in(txn: &WriteTransaction, bucket: &str) -> Result<bool, MetaError> {
    let table = txn.open_table(VERSIONS)?;
    let mut range = table.range((bucket, &[][..], 0)..)?;
    match range.next() {
        Some(entry) => {
            let (k, _) = entry?;
            Ok(k.value().0 == bucket)
        }
        None => Ok(false),
    }
}

/// `ExpireVersions`: removes each `(key, number)` of `versions` that the bucket's rules,
/// as they are in this transaction, expire by `now_secs` (see the command), and records
/// the pass's cursor; for each entry, whether it was removed.
pub(super) fn expire_versions(
    txn: &WriteTransaction,
    bucket: &str,
    entries: &[(String, u64)],
    resume_after: &Option<(String, u64)>,
    day_secs: u64,
    now_secs: u64,
) -> Result<Response, MetaError> {
    versioning_of(txn, bucket)?;
    if entries.len() > lifecycle::EXPIRE_KEYS_MAX {
        return Err(MetaError::Unexpected(format!(
            "ExpireVersions of {} entries",
            entries.len()
        )));
    }
    let Some(mut record) = lifecycle::read(txn, bucket)? else {
        return Ok(Response::ObjectsDeleted(vec![false; entries.len()]));
    };
    let mut out = Vec::with_capacity(entries.len());
    for (key, number) in entries {
        let found = txn
            .open_table(VERSIONS)?
            .get((bucket, key.as_bytes(), order_of(*number)))?
            .map(|v| VersionRecord::decode_with(v.value()))
            .transpose()?;
        let tags = found
            .as_ref()
            .map(|(_, extras)| extras.tags.clone())
            .unwrap_or_default();
        let entry = found.map(|(entry, _)| entry);
        let locked = entry
            .as_ref()
            .is_some_and(|e| e.stamp().lock.holds(now_secs.saturating_mul(1000), false));
        let due = match &entry {
            None => false,
            // Lifecycle never removes a locked version (nor bypasses GOVERNANCE).
            Some(_) if locked => false,
            Some(VersionRecord::Object {
                record: object,
                noncurrent_since_ms,
                ..
            }) => {
                let bound = rules::newer_noncurrent_bound(&record.rules, key);
                let newer = newer_noncurrent(txn, bucket, key, *number, bound)?;
                rules::noncurrent_due(
                    &record.rules,
                    key,
                    (object.size_bytes, Some(&tags)),
                    noncurrent_since_ms / 1000,
                    newer,
                    day_secs,
                    now_secs,
                )
            }
            Some(VersionRecord::DeleteMarker { .. }) => {
                rules::lone_marker_due(&record.rules, key) && is_lone(txn, bucket, key)?
            }
        };
        if due
            && let Some(VersionRecord::Object { record: object, .. }) =
                remove_entry(txn, bucket, key, *number)?
        {
            release(
                txn,
                &object.sha1,
                object.magic,
                now_secs,
                Holder::object(bucket, key, &object),
            )?;
        }
        out.push(due);
    }
    record.versions_resume_after = resume_after.clone();
    lifecycle::write(txn, bucket, &record)?;
    Ok(Response::ObjectsDeleted(out))
}

/// How many noncurrent versions of `key` are newer than `number`, counted up to `bound`
/// (a rule keeps at most [`rules::NEWER_NONCURRENT_MAX`]): every `versions` entry above
/// it but a delete marker that is the current version.
fn newer_noncurrent(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
    number: u64,
    bound: u32,
) -> Result<u32, MetaError> {
    let has_current = txn
        .open_table(OBJECTS)?
        .get((bucket, key.as_bytes()))?
        .is_some();
    let table = txn.open_table(VERSIONS)?;
    let k = key.as_bytes();
    let mut newer = 0u32;
    // Newest first, up to (not including) `number`.
    for (i, entry) in table
        .range((bucket, k, 0)..(bucket, k, order_of(number)))?
        .enumerate()
    {
        let (_, v) = entry?;
        let current_marker = i == 0
            && !has_current
            && matches!(
                VersionRecord::decode(v.value())?,
                VersionRecord::DeleteMarker { .. }
            );
        if !current_marker {
            newer += 1;
        }
        if newer > bound {
            break;
        }
    }
    Ok(newer)
}

/// Whether the key's only version is its newest `versions` entry (no current object, no
/// other entry).
fn is_lone(txn: &WriteTransaction, bucket: &str, key: &str) -> Result<bool, MetaError> {
    if txn
        .open_table(OBJECTS)?
        .get((bucket, key.as_bytes()))?
        .is_some()
    {
        return Ok(false);
    }
    let table = txn.open_table(VERSIONS)?;
    let k = key.as_bytes();
    Ok(table
        .range((bucket, k, 0)..=(bucket, k, u64::MAX))?
        .take(2)
        .count()
        == 1)
}
