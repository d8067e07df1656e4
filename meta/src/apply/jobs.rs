//! Background job commands, applied by [`crate::jobs`]; the objects, uploads and bucket a
//! chunk removes release their references here, in the same transaction.

use redb::{ReadableTable, WriteTransaction};

use super::buckets::forget_bucket;
use super::refs::{Holder, release};
use super::uploads::drop_upload;
use crate::jobs::{self, BucketEnd, JobOp, JobState};
use crate::tables::BUCKETS;
use crate::{MetaError, Response, lifecycle};

/// `CreateJob`: answers the new job's id.
pub(super) fn create(
    txn: &WriteTransaction,
    op: &JobOp,
    now_ms: u64,
) -> Result<Response, MetaError> {
    jobs::create(txn, op, now_ms).map(Response::JobCreated)
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
