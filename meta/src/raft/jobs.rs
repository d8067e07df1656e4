//! Bulk-delete jobs across index groups (format 12; `docs/scaling.md`, "What comes next",
//! 1c). A job stays one record in root, worked by root's leader. In a bucket whose keys
//! other index groups own, it is fenced in each of them first: their object sequence
//! numbers, read before root creates the job, so that an object written there later has a
//! higher one and survives the job, as one written in root after its fence does. Each
//! page of the job's keys is then deleted where it lives: root's keys by the job's chunk,
//! another group's by `DeleteFenced` in that group (before the chunk moves the cursor past
//! them: after a crash between the two the page is sent again, and a key already gone is
//! left, never released twice). Splits and jobs refuse each other in root's log, so the
//! groups fenced are the bucket's groups for the whole job.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use super::replicas::{ReadAnswer, ReadQuery, Replicas};
use crate::groups::{GroupId, ROOT};
use crate::jobs::{CHUNK_UPLOADS_MAX, JOBS_ACROSS_FORMAT, JobOp, JobRecord, JobState};
use crate::list::ListQuery;
use crate::{Command, MetaError, Response};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn unexpected(answer: impl std::fmt::Debug) -> MetaError {
    MetaError::Unexpected(format!("{answer:?}"))
}

impl Replicas {
    /// Starts a job and answers its id: in root alone while root owns every key of the
    /// bucket (as before index groups), else fenced in each other index group of the
    /// bucket first, which needs format 12 in root (every node then runs a binary that
    /// deletes a job's keys in their groups). A split committed between the fences' reads
    /// and the job is refused by root (`InvalidBucketState`): the caller starts it again.
    pub async fn create_job(&self, op: JobOp, now_ms: u64) -> Result<u64, MetaError> {
        let map = self.shard_map().await?;
        let (bucket, prefix) = op.scope();
        let others: Vec<GroupId> = map
            .index_groups_of(bucket)
            .into_iter()
            .filter(|g| *g != ROOT)
            .collect();
        let cmd = if others.is_empty() {
            Command::CreateJob { op, now_ms }
        } else {
            let have = self.root().read_local(|m| m.cluster_version()).await?;
            if have < JOBS_ACROSS_FORMAT {
                return Err(MetaError::InvalidBucketState(format!(
                    "the keys of bucket {bucket} are split over index groups, where jobs \
                     need metadata format {JOBS_ACROSS_FORMAT} and the cluster runs {have}: \
                     finish the upgrade of every node first"
                )));
            }
            let (mut fences, mut estimate) = (Vec::with_capacity(others.len()), 0u64);
            for group in others {
                let query = ReadQuery::JobFence {
                    bucket: bucket.to_string(),
                    prefix: prefix.to_string(),
                };
                match self.read_in(&map, group, query).await? {
                    ReadAnswer::JobFence { seq, objects } => {
                        fences.push((group, seq));
                        estimate += objects;
                    }
                    other => return Err(unexpected(other)),
                }
            }
            Command::CreateJobFenced {
                op,
                now_ms,
                fences,
                others: estimate,
            }
        };
        match self.root().execute(cmd).await? {
            Response::JobCreated(id) => Ok(id),
            other => Err(unexpected(other)),
        }
    }

    /// The fences of job `id` in groups other than root (empty: root's keys only).
    pub async fn job_fences(&self, id: u64) -> Result<BTreeMap<GroupId, u64>, MetaError> {
        self.root().read(move |m| m.job_fences(id)).await
    }

    /// One page of at most `keys_max` keys of a running fenced job after its cursor, each
    /// deleted in its group (a listing's walk finds them, so every key that existed when
    /// the job started is met once); whether it was the last. `end_job`: the last page
    /// ends the job (a delete-prefix job); a delete-bucket job goes on to its uploads.
    pub async fn job_page_across(
        &self,
        id: u64,
        job: &JobRecord,
        fences: &BTreeMap<GroupId, u64>,
        keys_max: usize,
        end_job: bool,
    ) -> Result<bool, MetaError> {
        let (bucket, prefix) = job.op.scope();
        let query = ListQuery {
            prefix: prefix.to_string(),
            after: job.cursor.as_ref().map(|c| c.as_bytes().to_vec()),
            max_keys: keys_max,
            ..Default::default()
        };
        let page = self.list_objects(bucket, &query).await?;
        let keys: Vec<String> = page.objects.into_iter().map(|(key, _)| key).collect();
        let last = !page.truncated;
        if keys.is_empty() && !end_job {
            return Ok(true);
        }
        let map = self.shard_map().await?;
        let mut in_root = Vec::new();
        let mut elsewhere: BTreeMap<GroupId, Vec<String>> = BTreeMap::new();
        for key in &keys {
            match map.index_group(bucket, key) {
                ROOT => in_root.push(key.clone()),
                group => elsewhere.entry(group).or_default().push(key.clone()),
            }
        }
        let mut deleted_elsewhere = 0u64;
        for (group, group_keys) in elsewhere {
            // Root refuses a split of the bucket while the job runs: a group without a
            // fence means the map changed under the job, which must not go on blind.
            let fence_seq = *fences.get(&group).ok_or_else(|| {
                MetaError::Unexpected(format!(
                    "job {id}: keys of bucket {bucket} in group {group}, which it has no \
                     fence in"
                ))
            })?;
            let first = group_keys[0].clone();
            let cmd = Command::DeleteFenced {
                bucket: bucket.to_string(),
                keys: group_keys,
                fence_seq,
                now_secs: now_ms() / 1000,
            };
            match self.execute_at(bucket, &first, cmd).await? {
                Response::ObjectsDeleted(done) => {
                    deleted_elsewhere += done.iter().filter(|d| **d).count() as u64;
                }
                other => return Err(unexpected(other)),
            }
        }
        let through = keys
            .last()
            .cloned()
            .or_else(|| job.cursor.clone())
            .unwrap_or_default();
        self.root()
            .execute(Command::JobChunkAcross {
                id,
                bucket: bucket.to_string(),
                keys: in_root,
                through,
                done: last && end_job,
                deleted_elsewhere,
                now_ms: now_ms(),
            })
            .await?;
        Ok(last)
    }

    /// The rest of a fenced delete-bucket job once its objects are done: a page of the
    /// bucket's uploads ended, each in its group (while there are any); then, every group
    /// found empty, the bucket deleted in root and its copies in the index groups, or the
    /// job failed when objects written after its start keep the bucket. Whether the job
    /// ended.
    pub async fn job_bucket_end_across(&self, id: u64, bucket: &str) -> Result<bool, MetaError> {
        let uploads = self.uploads(bucket, "", None, CHUNK_UPLOADS_MAX).await?;
        if !uploads.uploads.is_empty() {
            for (upload_id, upload, _) in uploads.uploads {
                let abort = Command::AbortUpload {
                    upload_id,
                    now_secs: now_ms() / 1000,
                };
                match self.execute_at(bucket, &upload.key, abort).await {
                    // Ended by its client meanwhile.
                    Ok(_) | Err(MetaError::NoSuchUpload) => {}
                    Err(e) => return Err(e),
                }
            }
            return Ok(false);
        }
        if !self.empty_beyond_root(bucket).await? {
            let failed = JobState::Failed(
                "objects written after the job started keep the bucket (in another index \
                 group than root)"
                    .into(),
            );
            self.root()
                .execute(Command::EndJob {
                    id,
                    state: failed,
                    now_ms: now_ms(),
                })
                .await?;
            return Ok(true);
        }
        let job = match self
            .root()
            .execute(Command::JobDeleteBucket {
                id,
                now_ms: now_ms(),
            })
            .await?
        {
            Response::Job(job) => job,
            other => return Err(unexpected(other)),
        };
        if job.state == JobState::Done {
            self.copy_bucket(bucket).await?;
        }
        Ok(job.state != JobState::Running)
    }
}
