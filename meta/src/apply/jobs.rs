//! Background job commands, applied by [`crate::jobs`]; the objects, uploads and bucket a
//! chunk removes release their references here, in the same transaction.

use std::collections::BTreeSet;

use redb::{ReadableTable, WriteTransaction};

use super::buckets::forget_bucket;
use super::refs::{Holder, release};
use super::uploads::drop_upload;
use crate::bucket_copies::LIFECYCLE_FORMAT;
use crate::groups::{GroupId, ROOT, ShardMap};
use crate::jobs::{self, BucketEnd, JOBS, JobOp, JobRecord, JobState};
use crate::shard_map::{self, SHARD_MAP};
use crate::tables::{self, BUCKETS, RAFT_STATE};
use crate::{MetaError, Response, lifecycle};

/// `CreateJob`: answers the new job's id. From format 11 (index splits) refused for a
/// bucket whose keys a group other than root owns or will own: a job's chunks delete
/// root's keys only (`docs/scaling.md`, "What comes next").
pub(super) fn create(
    txn: &WriteTransaction,
    op: &JobOp,
    now_ms: u64,
) -> Result<Response, MetaError> {
    let (bucket, _) = op.scope();
    if splits_checked(txn)? {
        let table = txn.open_table(SHARD_MAP)?;
        let maps = [shard_map::read(&table)?, shard_map::read_planned(&table)?];
        if maps.iter().flatten().any(|m| beyond_root(m, bucket)) {
            return Err(MetaError::InvalidBucketState(format!(
                "the keys of bucket {bucket} are split over index groups, and bulk-delete \
                 jobs do not run there yet"
            )));
        }
    }
    jobs::create(txn, op, now_ms).map(Response::JobCreated)
}

/// `CreateJobFenced`: answers the new job's id, if `fences` names exactly the groups
/// other than root that own keys of the job's bucket in the committed map, and no change
/// of the map planned gives the bucket other groups (a split between the fences' reads
/// and now would leave keys without a fence: the caller reads them again).
pub(super) fn create_fenced(
    txn: &WriteTransaction,
    op: &JobOp,
    now_ms: u64,
    fences: &[(GroupId, u64)],
    others: u64,
) -> Result<Response, MetaError> {
    let (bucket, _) = op.scope();
    let table = txn.open_table(SHARD_MAP)?;
    let committed = shard_map::read(&table)?;
    let planned = shard_map::read_planned(&table)?;
    drop(table);
    let fenced: BTreeSet<GroupId> = fences.iter().map(|(g, _)| *g).collect();
    let wanted = committed.as_ref().map(|m| groups_beyond_root(m, bucket));
    if fenced.len() != fences.len() || fenced.is_empty() || wanted.as_ref() != Some(&fenced) {
        return Err(MetaError::InvalidBucketState(format!(
            "the index groups of bucket {bucket} are not those the job was fenced in: \
             start it again"
        )));
    }
    if planned.is_some_and(|p| groups_beyond_root(&p, bucket) != fenced) {
        return Err(MetaError::InvalidBucketState(format!(
            "a change of the index groups of bucket {bucket} is under way: start the job \
             after it"
        )));
    }
    jobs::create_fenced(txn, op, now_ms, fences, others).map(Response::JobCreated)
}

/// The groups other than root that own keys of `bucket` in `map`.
fn groups_beyond_root(map: &ShardMap, bucket: &str) -> BTreeSet<GroupId> {
    map.index_groups_of(bucket)
        .into_iter()
        .filter(|g| *g != ROOT)
        .collect()
}

/// `DeleteFenced` in an index group: each of `keys` whose object is not newer than
/// `fence_seq` is removed and its content released; answers which were.
pub(super) fn delete_fenced(
    txn: &WriteTransaction,
    bucket: &str,
    keys: &[String],
    fence_seq: u64,
    now_secs: u64,
) -> Result<Response, MetaError> {
    if keys.len() > jobs::CHUNK_KEYS_MAX {
        return Err(MetaError::InvalidCommand(format!(
            "a job chunk names {} keys, at most {}",
            keys.len(),
            jobs::CHUNK_KEYS_MAX
        )));
    }
    tables::check_bucket(txn, bucket)?;
    // As a chunk in root: jobs do not delete versions yet.
    if super::versions::versioning_of(txn, bucket)? != crate::versions::Versioning::Unversioned {
        return Err(MetaError::InvalidCommand(format!(
            "a job chunk in the versioned bucket {bucket}"
        )));
    }
    let mut deleted = Vec::with_capacity(keys.len());
    for key in keys {
        let fenced =
            super::objects::read_object(txn, bucket, key)?.is_some_and(|o| o.seq <= fence_seq);
        let removed = match fenced {
            true => super::objects::remove_released(txn, bucket, key, now_secs)?,
            false => None,
        };
        deleted.push(removed.is_some());
    }
    Ok(Response::ObjectsDeleted(deleted))
}

/// `PlanMap`'s check, from format 11: a map that gives a key of a bucket with a running
/// job to a group other than root waits for the job's end (see [`create`]); from format
/// 12, a map that changes the groups owning keys of such a bucket (a job fenced in them
/// would leave the keys of a new group unfenced; a move of a replica changes no owner).
pub(super) fn check_plan(txn: &WriteTransaction, planned: &ShardMap) -> Result<(), MetaError> {
    if !splits_checked(txn)? {
        return Ok(());
    }
    let across = format(txn)? >= jobs::JOBS_ACROSS_FORMAT;
    let committed = shard_map::read(&txn.open_table(SHARD_MAP)?)?;
    // Jobs kept are bounded (`FINISHED_KEPT` and the running ones).
    for row in txn.open_table(JOBS)?.iter()? {
        let (id, v) = row?;
        let job: JobRecord = tables::decode_versioned("jobs", v.value())?;
        let (bucket, _) = job.op.scope();
        let changes = match (&committed, across) {
            (Some(now), true) => {
                groups_beyond_root(now, bucket) != groups_beyond_root(planned, bucket)
            }
            _ => beyond_root(planned, bucket),
        };
        if job.state == JobState::Running && changes {
            return Err(MetaError::InvalidCommand(format!(
                "bulk-delete job {} runs on bucket {bucket}: split its keys after it ends",
                id.value()
            )));
        }
    }
    Ok(())
}

/// Whether `map` gives a key of `bucket` to a group other than root.
fn beyond_root(map: &ShardMap, bucket: &str) -> bool {
    map.index_groups_of(bucket).iter().any(|g| *g != ROOT)
}

/// Whether the group's format checks jobs against index splits (11 on: replicas of two
/// releases must apply the same).
fn splits_checked(txn: &WriteTransaction) -> Result<bool, MetaError> {
    Ok(format(txn)? >= LIFECYCLE_FORMAT)
}

/// The group's format version as `txn` sees it.
fn format(txn: &WriteTransaction) -> Result<u32, MetaError> {
    crate::cluster_version::read_in(&txn.open_table(RAFT_STATE)?)
}

/// `JobChunk`: the objects the chunk removes are released.
pub(super) fn chunk(
    txn: &WriteTransaction,
    id: u64,
    keys: &[String],
    through: &str,
    done: bool,
    now_ms: u64,
) -> Result<Response, MetaError> {
    let chunk = jobs::chunk(txn, id, keys, through, done, now_ms)?;
    release_chunk(txn, chunk, now_ms)
}

/// Releases the contents of the objects a chunk removed; answers what it did.
fn release_chunk(
    txn: &WriteTransaction,
    chunk: jobs::ChunkDone,
    now_ms: u64,
) -> Result<Response, MetaError> {
    for (key, old) in &chunk.removed {
        let holder = Holder::Object {
            bucket: &chunk.bucket,
            key,
            seq: old.seq,
        };
        release(txn, &old.sha1, old.magic, now_ms / 1000, holder)?;
    }
    Ok(Response::JobChunkDone {
        deleted: chunk.removed.len() as u32,
        running: chunk.running,
    })
}

/// `EndJob`: answers the job as it is now.
pub(super) fn end(
    txn: &WriteTransaction,
    id: u64,
    state: &JobState,
    now_ms: u64,
) -> Result<Response, MetaError> {
    jobs::end(txn, id, state.clone(), now_ms).map(Response::Job)
}

/// `JobAbortUploads`: the uploads the job may end are dropped, their parts released.
pub(super) fn abort_uploads(
    txn: &WriteTransaction,
    id: u64,
    upload_ids: &[String],
    now_ms: u64,
) -> Result<Response, MetaError> {
    let ending = jobs::uploads_to_abort(txn, id, upload_ids)?;
    for upload_id in &ending {
        drop_upload(txn, upload_id, now_ms / 1000)?;
    }
    let running = jobs::read(txn, id)?.is_some_and(|j| j.state == JobState::Running);
    Ok(Response::JobChunkDone {
        deleted: ending.len() as u32,
        running,
    })
}

/// `JobDeleteBucket`: the bucket goes if the job's chunks emptied it.
pub(super) fn delete_bucket(
    txn: &WriteTransaction,
    id: u64,
    now_ms: u64,
) -> Result<Response, MetaError> {
    match jobs::finish_bucket(txn, id, now_ms)? {
        BucketEnd::NotRunning => jobs::read(txn, id)?
            .map(Response::Job)
            .ok_or(MetaError::NotFound),
        BucketEnd::Kept(job) => Ok(Response::Job(job)),
        BucketEnd::Delete(bucket) => {
            // Uploads begun after the last abort chunk: no upload outlives its bucket.
            for upload_id in lifecycle::uploads_of(txn, &bucket)? {
                drop_upload(txn, &upload_id, now_ms / 1000)?;
            }
            // Deleted meanwhile by a plain DeleteBucket: the job's end is the same.
            if txn.open_table(BUCKETS)?.get(bucket.as_str())?.is_some() {
                forget_bucket(txn, &bucket)?;
            }
            jobs::mark_done(txn, id, now_ms).map(Response::Job)
        }
    }
}
