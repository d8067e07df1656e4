//! The jobs worker: on the leader only, it works through every running job, one chunk at
//! a time, round robin between jobs, pausing between chunks so that foreground requests
//! keep their latency (seed 003: a cleanup loop that never yields stalls everyone).
//!
//! The worker keeps no state of its own: each step reads the jobs and their cursors from
//! the metadata (linearizable) and commits one chunk command, so a new leader, or this
//! node after a restart, resumes every job exactly where the last applied chunk left it.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::meta::jobs::{JobOp, JobState};
use crate::meta::{Command, MetaError};
use crate::server::AppState;

/// Poll interval when there is no running job (or this node does not lead).
const IDLE_POLL: Duration = Duration::from_millis(500);
/// Wait after a failed step (no quorum, leader change).
const ERROR_BACKOFF: Duration = Duration::from_secs(1);

/// How fast jobs go.
#[derive(Clone, Copy, Debug)]
pub struct JobPace {
    /// Keys per chunk command (at most [`crate::meta::jobs::CHUNK_KEYS_MAX`]).
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

/// Runs the worker for as long as the process lives.
pub fn spawn(state: Arc<AppState>, pace: JobPace) {
    let pace = JobPace {
        chunk_keys: pace.chunk_keys.clamp(1, crate::meta::jobs::CHUNK_KEYS_MAX),
        pause: pace.pause,
    };
    tokio::spawn(async move {
        let mut leading = state.store.metadata().leadership();
        loop {
            if !*leading.borrow_and_update() {
                // Bounded: woken by a leadership change, or polled again.
                let _ = tokio::time::timeout(IDLE_POLL * 4, leading.changed()).await;
                continue;
            }
            match step(&state, pace).await {
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
async fn step(state: &AppState, pace: JobPace) -> Result<bool, MetaError> {
    let meta = state.store.metadata();
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
        let JobOp::DeletePrefix { bucket, prefix } = &job.op;
        let (b, p, c, n) = (
            bucket.clone(),
            prefix.clone(),
            job.cursor.clone(),
            pace.chunk_keys,
        );
        let keys = meta
            .read(move |m| m.keys_after(&b, &p, c.as_deref(), n))
            .await?;
        // Fewer keys than asked for: nothing from before the job is left after them (a
        // linearizable read sees every object written before the job started).
        let done = keys.len() < pace.chunk_keys;
        let through = keys
            .last()
            .cloned()
            .or(job.cursor.clone())
            .unwrap_or_default();
        let count = keys.len();
        meta.execute(Command::JobChunk {
            id,
            keys,
            through,
            done,
            now_ms: now_ms(),
        })
        .await?;
        if done {
            tracing::info!(job = id, looked_at = count, "jobs: job done");
        }
        tokio::time::sleep(pace.pause).await;
    }
    Ok(true)
}
