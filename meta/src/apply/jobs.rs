//! Background job commands, applied by [`crate::jobs`]; the objects, uploads and bucket a
//! chunk removes release their references here, in the same transaction.

use redb::{ReadableTable, WriteTransaction};

use super::buckets::forget_bucket;
use super::refs::{Holder, release};
use super::uploads::drop_upload;
use crate::bucket_copies::LIFECYCLE_FORMAT;
use crate::groups::{ROOT, ShardMap};
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

/// `PlanMap`'s check, from format 11: a map that gives a key of a bucket with a running
/// job to a group other than root waits for the job's end (see [`create`]).
pub(super) fn check_plan(txn: &WriteTransaction, planned: &ShardMap) -> Result<(), MetaError> {
    if !splits_checked(txn)? {
        return Ok(());
    }
    // Jobs kept are bounded (`FINISHED_KEPT` and the running ones).
    for row in txn.open_table(JOBS)?.iter()? {
        let (id, v) = row?;
        let job: JobRecord = tables::decode_versioned("jobs", v.value())?;
        let (bucket, _) = job.op.scope();
        if job.state == JobState::Running && beyond_root(planned, bucket) {
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
    let format = crate::cluster_version::read_in(&txn.open_table(RAFT_STATE)?)?;
    Ok(format >= LIFECYCLE_FORMAT)
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
