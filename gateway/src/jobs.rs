//! The jobs worker: on the leader only, it works through every running job, one chunk at
//! a time, round robin between jobs, pausing between chunks so that foreground requests
//! keep their latency (seed 003: a cleanup loop that never yields stalls everyone).
//!
//! The worker keeps no state of its own: each step reads the jobs and their cursors from
//! the metadata (linearizable) and commits one chunk command, so a new leader, or this
//! node after a restart, resumes every job exactly where the last applied chunk left it.
//! A job of a bucket split over index groups (fenced in each: `meta::raft::jobs`) deletes
//! each page of keys in the groups that own them before its chunk moves the cursor.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use meta::jobs::{CHUNK_UPLOADS_MAX, JobOp, JobRecord, JobState};
use meta::raft::Metadata;
use meta::raft::replicas::Replicas;
use meta::{Command, MetaError, Response};

/// Poll interval when there is no running job (or this node does not lead).
const IDLE_POLL: Duration = Duration::from_millis(500);
/// Wait after a failed step (no quorum, leader change).
const ERROR_BACKOFF: Duration = Duration::from_secs(1);

/// How fast jobs go.
#[derive(Clone, Copy, Debug)]
pub struct JobPace {
    /// Keys per chunk command (at most [`meta::jobs::CHUNK_KEYS_MAX`]).
    pub chunk_keys: usize,
    /// Pause after each chunk.
    pub pause: Duration,
}

impl Default for JobPace {
    fn default() -> Self {
        JobPace {
            chunk_keys: 200,
            pause: Duration::from_millis(5),
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Runs the worker for as long as the process lives, on root's leader.
pub fn spawn(replicas: Arc<Replicas>, pace: JobPace) {
    let meta = replicas.root().clone();
    let pace = JobPace {
        chunk_keys: pace.chunk_keys.clamp(1, meta::jobs::CHUNK_KEYS_MAX),
        pause: pace.pause,
    };
    tokio::spawn(async move {
        let mut leading = meta.leadership();
        loop {
            if !*leading.borrow_and_update() {
                // Bounded: woken by a leadership change, or polled again.
                let _ = tokio::time::timeout(IDLE_POLL * 4, leading.changed()).await;
                continue;
            }
            match step(&replicas, &meta, pace).await {
                Ok(true) => {}
                Ok(false) => tokio::time::sleep(IDLE_POLL).await,
                Err(e) => {
                    tracing::warn!(error = %e, "jobs: a step failed; retrying");
                    tokio::time::sleep(ERROR_BACKOFF).await;
                }
            }
        }
    });
}

/// One chunk of every running job; whether there was any.
async fn step(replicas: &Replicas, meta: &Metadata, pace: JobPace) -> Result<bool, MetaError> {
    let running: Vec<_> = meta
        .read(|m| m.jobs())
        .await?
        .into_iter()
        .filter(|(_, j)| j.state == JobState::Running)
        .collect();
    if running.is_empty() {
        return Ok(false);
    }
    for (id, job) in running {
        // Read with the job (not inferred from this node's map, which may lag root's log):
        // a fenced job's keys must never be taken for root's.
        let fences = replicas.job_fences(id).await?;
        let ended = match (&job.op, fences.is_empty()) {
            (JobOp::DeletePrefix { .. }, true) => delete_chunk(meta, id, &job, pace, true).await?,
            (JobOp::DeleteBucket { bucket }, true) => {
                bucket_step(meta, id, &job, bucket, pace).await?
            }
            (JobOp::DeletePrefix { .. }, false) => {
                replicas
                    .job_page_across(id, &job, &fences, pace.chunk_keys, true)
                    .await?
            }
            (JobOp::DeleteBucket { bucket }, false) => {
                // A full page: more keys may follow it, and the next step takes them.
                replicas
                    .job_page_across(id, &job, &fences, pace.chunk_keys, false)
                    .await?
                    && replicas.job_bucket_end_across(id, bucket).await?
            }
        };
        if ended {
            tracing::info!(job = id, op = job.op.name(), "jobs: job ended");
        }
        tokio::time::sleep(pace.pause).await;
    }
    Ok(true)
}

/// One chunk of deletes after the job's cursor; whether it was the last (fewer keys than
/// asked for: nothing from before the job is left after them, since a linearizable read
/// sees every object written before the job started). `end_job`: the last chunk ends the
/// job (a delete-prefix job); otherwise the caller goes on to the next phase.
async fn delete_chunk(
    meta: &Metadata,
    id: u64,
    job: &JobRecord,
    pace: JobPace,
    end_job: bool,
) -> Result<bool, MetaError> {
    let (bucket, prefix) = job.op.scope();
    let (b, p, c, n) = (
        bucket.to_string(),
        prefix.to_string(),
        job.cursor.clone(),
        pace.chunk_keys,
    );
    let keys = meta
        .read(move |m| m.keys_after(&b, &p, c.as_deref(), n))
        .await?;
    let last = keys.len() < pace.chunk_keys;
    if keys.is_empty() && !end_job {
        return Ok(true);
    }
    let through = keys
        .last()
        .cloned()
        .or(job.cursor.clone())
        .unwrap_or_default();
    meta.execute(Command::JobChunk {
        id,
        keys,
        through,
        done: last && end_job,
        now_ms: now_ms(),
    })
    .await?;
    Ok(last)
}

/// One step of a delete-bucket job: a chunk of objects while there are any after the
/// cursor, then a chunk of uploads to abort while there are any, then the final command.
/// The phase is not stored: each step finds it from the metadata, so a restart resumes
/// in the right one. Whether the job ended.
async fn bucket_step(
    meta: &Metadata,
    id: u64,
    job: &JobRecord,
    bucket: &str,
    pace: JobPace,
) -> Result<bool, MetaError> {
    // A full chunk: more keys may follow it, and the next step takes them.
    if !delete_chunk(meta, id, job, pace, false).await? {
        return Ok(false);
    }
    let b = bucket.to_string();
    let uploads = meta
        .read(move |m| m.uploads_in(&b, CHUNK_UPLOADS_MAX))
        .await?;
    if !uploads.is_empty() {
        meta.execute(Command::JobAbortUploads {
            id,
            upload_ids: uploads,
            now_ms: now_ms(),
        })
        .await?;
        return Ok(false);
    }
    match meta
        .execute(Command::JobDeleteBucket {
            id,
            now_ms: now_ms(),
        })
        .await?
    {
        Response::Job(j) => {
            if let JobState::Failed(why) = &j.state {
                tracing::warn!(job = id, bucket, error = %why, "jobs: bucket kept");
            }
            Ok(j.state != JobState::Running)
        }
        other => Err(MetaError::Corrupt(format!(
            "job {id}: unexpected answer {other:?}"
        ))),
    }
}
