//! Background jobs in the metadata: a bulk delete by prefix (a whole mailbox) is a job
//! record, worked through in chunks by commands, so that it survives a crash, resumes
//! where it stopped, and replicates like everything else (seed 004: mass operations are
//! asynchronous and chunked, never one request that deletes a million keys).
//!
//! Each chunk is one command that deletes up to [`CHUNK_KEYS_MAX`] keys and moves the
//! job's cursor past them in the same transaction: after a crash the job resumes exactly
//! after the last chunk applied, and a key is never released twice (a chunk re-read after
//! a crash finds it gone). An object written under the prefix after the job started
//! carries a sequence number above the job's fence and survives it, whatever the order in
//! which the worker meets it.

use std::collections::BTreeMap;

use redb::{ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::groups::GroupId;

use super::MetaError;
use super::tables::{self, COUNTERS, OBJECT_SEQ, OBJECTS, ObjectRecord, UPLOADS, UploadRecord};

/// Job id -> postcard [`JobRecord`].
pub const JOBS: TableDefinition<u64, &[u8]> = TableDefinition::new("jobs");

/// The last job id given, in `counters`.
const JOB_SEQ: &str = "job_seq";

/// Keys one chunk command may name: bounds the transaction and the log entry.
pub const CHUNK_KEYS_MAX: usize = 1000;

/// Uploads one `JobAbortUploads` command may end: each holds up to 10 000 parts, so this
/// bounds the transaction at a million part releases in the worst case, a few in practice.
pub const CHUNK_UPLOADS_MAX: usize = 100;

/// The format of jobs across index groups (`CreateJobFenced`, `DeleteFenced`,
/// `JobChunkAcross`): from it, a change of the map may not change the groups of a bucket
/// with a running job, where before it could not give any of its keys beyond root.
pub const JOBS_ACROSS_FORMAT: u32 = 12;

/// Finished jobs kept for `jobs list`/`status`; the oldest go beyond it.
pub const FINISHED_KEPT: usize = 1000;

/// What a job does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobOp {
    /// Delete every object of `bucket` whose key starts with `prefix` (all of them for an
    /// empty prefix) that existed when the job started.
    DeletePrefix { bucket: String, prefix: String },
    /// Delete a bucket with its contents (`--force`): every object that existed when the
    /// job started (as `DeletePrefix` with an empty prefix), then every upload in
    /// progress (releasing its parts), then the bucket, in the job's final command
    /// ([`finish_bucket`]). An object written after the start survives and keeps the
    /// bucket: the job then fails, saying so.
    DeleteBucket { bucket: String },
}

impl JobOp {
    /// The bucket and the key prefix whose objects the job deletes.
    pub fn scope(&self) -> (&str, &str) {
        match self {
            JobOp::DeletePrefix { bucket, prefix } => (bucket, prefix),
            JobOp::DeleteBucket { bucket } => (bucket, ""),
        }
    }

    /// The name of the op in the admin API.
    pub fn name(&self) -> &'static str {
        match self {
            JobOp::DeletePrefix { .. } => "delete-prefix",
            JobOp::DeleteBucket { .. } => "delete-bucket",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobState {
    Running,
    Done,
    Cancelled,
    Failed(String),
}

impl JobState {
    pub fn name(&self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Cancelled => "cancelled",
            JobState::Failed(_) => "failed",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    pub op: JobOp,
    pub state: JobState,
    pub started_ms: u64,
    pub finished_ms: Option<u64>,
    /// Objects with a sequence number above this were written after the job started and
    /// are not the job's to delete.
    pub fence_seq: u64,
    /// The last key the job has dealt with (deleted, or found newer than the fence).
    pub cursor: Option<String>,
    pub deleted: u64,
    /// Objects under the prefix when the job started (the estimate of the total).
    pub total_estimate: u64,
}

impl JobRecord {
    /// Objects left to look at, as estimated at the start.
    pub fn remaining_estimate(&self) -> u64 {
        match self.state {
            JobState::Running => self.total_estimate.saturating_sub(self.deleted),
            _ => 0,
        }
    }
}

pub(crate) fn read(txn: &WriteTransaction, id: u64) -> Result<Option<JobRecord>, MetaError> {
    match txn.open_table(JOBS)?.get(id)? {
        Some(v) => Ok(Some(tables::decode_versioned("jobs", v.value())?)),
        None => Ok(None),
    }
}

fn write(txn: &WriteTransaction, id: u64, job: &JobRecord) -> Result<(), MetaError> {
    let bytes = tables::encode_versioned(job)?;
    txn.open_table(JOBS)?.insert(id, bytes.as_slice())?;
    Ok(())
}

/// `CreateJob`: a new running job with the next id, fenced at the current object sequence
/// number, its total estimated by counting the keys under the prefix (bounded by the
/// bucket's size; one pass in the creating transaction).
pub fn create(txn: &WriteTransaction, op: &JobOp, now_ms: u64) -> Result<u64, MetaError> {
    let (bucket, prefix) = op.scope();
    tables::check_bucket(txn, bucket)?;
    let mut counters = txn.open_table(COUNTERS)?;
    let fence_seq = counters.get(OBJECT_SEQ)?.map(|v| v.value()).unwrap_or(0);
    let id = counters.get(JOB_SEQ)?.map(|v| v.value()).unwrap_or(0) + 1;
    counters.insert(JOB_SEQ, id)?;
    drop(counters);
    let mut total = 0u64;
    for entry in txn
        .open_table(OBJECTS)?
        .range((bucket, prefix.as_bytes())..)?
    {
        let (k, _) = entry?;
        let (b, key) = k.value();
        if b != bucket || !key.starts_with(prefix.as_bytes()) {
            break;
        }
        total += 1;
    }
    write(
        txn,
        id,
        &JobRecord {
            op: op.clone(),
            state: JobState::Running,
            started_ms: now_ms,
            finished_ms: None,
            fence_seq,
            cursor: None,
            deleted: 0,
            total_estimate: total,
        },
    )?;
    forget_old(txn)?;
    Ok(id)
}

/// Where a fenced job's fence in an index group is kept: in `counters`, beside the
/// sequence numbers it was read from (no table of its own, so that a snapshot of a
/// cluster without such jobs is what it was).
fn fence_key(id: u64, group: GroupId) -> String {
    format!("{JOB_FENCE_PREFIX}{id}/{group}")
}

/// The prefix of a job's fence keys in `counters`; "1/" is not a prefix of "12/".
const JOB_FENCE_PREFIX: &str = "job_fence/";

fn fence_prefix(id: u64) -> String {
    format!("{JOB_FENCE_PREFIX}{id}/")
}

/// `CreateJobFenced`: a job as [`create`] makes it, with the object sequence number each
/// index group in `fences` had when the job started there, and `others` (the objects
/// those groups held under the prefix then) added to its estimate.
pub fn create_fenced(
    txn: &WriteTransaction,
    op: &JobOp,
    now_ms: u64,
    fences: &[(GroupId, u64)],
    others: u64,
) -> Result<u64, MetaError> {
    let id = create(txn, op, now_ms)?;
    let mut counters = txn.open_table(COUNTERS)?;
    for (group, seq) in fences {
        counters.insert(fence_key(id, *group).as_str(), *seq)?;
    }
    drop(counters);
    if let Some(mut job) = read(txn, id)? {
        job.total_estimate += others;
        write(txn, id, &job)?;
    }
    Ok(id)
}

/// The fences of job `id` in the index groups other than root, by group (empty: a job of
/// root's keys only).
pub fn fences(
    counters: &impl ReadableTable<&'static str, u64>,
    id: u64,
) -> Result<BTreeMap<GroupId, u64>, MetaError> {
    let prefix = fence_prefix(id);
    let mut out = BTreeMap::new();
    for entry in counters.range(prefix.as_str()..)? {
        let (k, v) = entry?;
        let Some(group) = k.value().strip_prefix(prefix.as_str()) else {
            break;
        };
        let group = group
            .parse()
            .map_err(|_| MetaError::Corrupt(format!("counters: a job fence {:?}", k.value())))?;
        out.insert(group, v.value());
    }
    Ok(out)
}

/// `JobChunkAcross`'s check before its [`chunk`]: the command names the job's bucket, so
/// that root checks it owns the page's keys; a bucket other than the job's is refused.
pub fn check_bucket(txn: &WriteTransaction, id: u64, bucket: &str) -> Result<(), MetaError> {
    let Some(job) = read(txn, id)? else {
        return Err(MetaError::NotFound);
    };
    if job.op.scope().0 != bucket {
        return Err(MetaError::InvalidCommand(format!(
            "job {id} is not of bucket {bucket}"
        )));
    }
    Ok(())
}

/// Adds to job `id`'s count the objects a page's `DeleteFenced` removed in other groups:
/// removed all the same, whether or not the job still runs, so the count says so.
pub fn count_deleted(txn: &WriteTransaction, id: u64, elsewhere: u64) -> Result<(), MetaError> {
    if elsewhere > 0
        && let Some(mut job) = read(txn, id)?
    {
        job.deleted += elsewhere;
        write(txn, id, &job)?;
    }
    Ok(())
}

/// Drops the oldest finished jobs beyond [`FINISHED_KEPT`], with their fences.
fn forget_old(txn: &WriteTransaction) -> Result<(), MetaError> {
    let mut table = txn.open_table(JOBS)?;
    let mut finished = Vec::new();
    for entry in table.iter()? {
        let (k, v) = entry?;
        let job: JobRecord = tables::decode_versioned("jobs", v.value())?;
        if job.state != JobState::Running {
            finished.push(k.value());
        }
    }
    if finished.len() > FINISHED_KEPT {
        let mut counters = txn.open_table(COUNTERS)?;
        for id in &finished[..finished.len() - FINISHED_KEPT] {
            table.remove(*id)?;
            let gone: Vec<String> = fences(&counters, *id)?
                .keys()
                .map(|g| fence_key(*id, *g))
                .collect();
            for key in gone {
                counters.remove(key.as_str())?;
            }
        }
    }
    Ok(())
}

/// What one chunk did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkDone {
    /// The objects the chunk removed (their contents are released by the caller of this
    /// function, in the same transaction), by key, in the job's `bucket`.
    pub removed: Vec<(String, ObjectRecord)>,
    pub bucket: String,
    /// Whether the job is still running after it.
    pub running: bool,
}

/// `JobChunk`: removes `keys` (sorted, all after the job's cursor and under its prefix)
/// whose objects are not newer than the job's fence, and moves the cursor to `through`
/// (the last key the worker looked at). A job no longer running (cancelled meanwhile)
/// changes nothing. `done`: the worker found nothing after `through`; the job ends (a
/// delete-bucket job ends with [`finish_bucket`] instead).
pub fn chunk(
    txn: &WriteTransaction,
    id: u64,
    keys: &[String],
    through: &str,
    done: bool,
    now_ms: u64,
) -> Result<ChunkDone, MetaError> {
    if keys.len() > CHUNK_KEYS_MAX {
        return Err(MetaError::InvalidCommand(format!(
            "a job chunk names {} keys, at most {CHUNK_KEYS_MAX}",
            keys.len()
        )));
    }
    let Some(mut job) = read(txn, id)? else {
        return Err(MetaError::NotFound);
    };
    if job.state != JobState::Running {
        return Ok(ChunkDone {
            removed: Vec::new(),
            running: false,
            bucket: String::new(),
        });
    }
    if done && matches!(job.op, JobOp::DeleteBucket { .. }) {
        return Err(MetaError::InvalidCommand(format!(
            "job {id} deletes a bucket: it ends with its final command, not a chunk"
        )));
    }
    let (bucket, prefix) = job.op.scope();
    // Jobs over versioned buckets come with versions in listings and lifecycle
    // (`docs/versions.md`); until then a chunk there is refused, never applied as an
    // unversioned delete.
    if let Some(v) = txn.open_table(tables::BUCKETS)?.get(bucket)?
        && tables::BucketRecord::decode(v.value())?.versioning != tables::Versioning::Unversioned
    {
        return Err(MetaError::InvalidCommand(format!(
            "job {id}: a chunk in the versioned bucket {bucket}"
        )));
    }
    let after_cursor = |k: &str| job.cursor.as_deref().is_none_or(|c| k > c);
    // An empty `through`: the worker found no key at all (the chunk names none).
    let through_ok = through.starts_with(prefix) || (through.is_empty() && keys.is_empty());
    if !through_ok {
        return Err(MetaError::InvalidCommand(format!(
            "job {id}: {through:?} is not under the prefix {prefix:?}"
        )));
    }
    let mut removed = Vec::new();
    {
        let mut objects = txn.open_table(OBJECTS)?;
        for key in keys {
            if !key.starts_with(prefix) || !after_cursor(key) || key.as_str() > through {
                return Err(MetaError::InvalidCommand(format!(
                    "job {id}: key {key:?} is outside the chunk"
                )));
            }
            let current = match objects.get((bucket, key.as_bytes()))? {
                Some(v) => crate::versions::decode_object(v.value())?,
                // Deleted by a client meanwhile: nothing to release, and never twice.
                None => continue,
            };
            if current.seq > job.fence_seq {
                // Written (or overwritten) after the job started: not the job's.
                continue;
            }
            objects.remove((bucket, key.as_bytes()))?;
            removed.push((key.clone(), current));
        }
    }
    job.deleted += removed.len() as u64;
    if !through.is_empty() && after_cursor(through) {
        job.cursor = Some(through.to_string());
    }
    if done {
        job.state = JobState::Done;
        job.finished_ms = Some(now_ms);
    }
    let running = job.state == JobState::Running;
    write(txn, id, &job)?;
    Ok(ChunkDone {
        removed,
        running,
        bucket: bucket.to_string(),
    })
}

/// The running delete-bucket job `id` and its bucket; `None` when the job no longer runs
/// (cancelled meanwhile: the command changes nothing).
fn running_bucket_job(
    txn: &WriteTransaction,
    id: u64,
) -> Result<Option<(JobRecord, String)>, MetaError> {
    let Some(job) = read(txn, id)? else {
        return Err(MetaError::NotFound);
    };
    if job.state != JobState::Running {
        return Ok(None);
    }
    match &job.op {
        JobOp::DeleteBucket { bucket } => {
            let bucket = bucket.clone();
            Ok(Some((job, bucket)))
        }
        JobOp::DeletePrefix { .. } => Err(MetaError::InvalidCommand(format!(
            "job {id} deletes by prefix, not a bucket"
        ))),
    }
}

/// `JobAbortUploads`: of `upload_ids` (at most [`CHUNK_UPLOADS_MAX`]), the uploads still
/// in progress in the job's bucket, which the caller drops (releasing their parts) in the
/// same transaction. Nothing while the job no longer runs; an upload already gone (ended
/// by its client meanwhile) is skipped, so its parts are never released twice.
pub fn uploads_to_abort(
    txn: &WriteTransaction,
    id: u64,
    upload_ids: &[String],
) -> Result<Vec<String>, MetaError> {
    if upload_ids.len() > CHUNK_UPLOADS_MAX {
        return Err(MetaError::InvalidCommand(format!(
            "a job chunk names {} uploads, at most {CHUNK_UPLOADS_MAX}",
            upload_ids.len()
        )));
    }
    let Some((_, bucket)) = running_bucket_job(txn, id)? else {
        return Ok(Vec::new());
    };
    let uploads = txn.open_table(UPLOADS)?;
    let mut out = Vec::new();
    for upload_id in upload_ids {
        let Some(v) = uploads.get(upload_id.as_str())? else {
            continue;
        };
        let upload: UploadRecord = tables::decode_versioned("uploads", v.value())?;
        if upload.bucket != bucket {
            return Err(MetaError::InvalidCommand(format!(
                "job {id}: upload {upload_id} is not in bucket {bucket}"
            )));
        }
        out.push(upload_id.clone());
    }
    Ok(out)
}

/// What the final command of a delete-bucket job may do.
#[derive(Debug, PartialEq, Eq)]
pub enum BucketEnd {
    /// The job no longer runs: nothing changes.
    NotRunning,
    /// The bucket still holds objects (written after the job started): the job is now
    /// failed and the bucket stays.
    Kept(JobRecord),
    /// The bucket is empty of objects: the caller drops what uploads remain and the
    /// bucket, then calls [`mark_done`].
    Delete(String),
}

/// `JobDeleteBucket`, first half: whether the bucket can go. An object left in it was
/// written after the job started (the chunks took every older one), and must survive: the
/// job fails with an error that says so, rather than deleting it or waiting for ever.
pub fn finish_bucket(txn: &WriteTransaction, id: u64, now_ms: u64) -> Result<BucketEnd, MetaError> {
    let Some((mut job, bucket)) = running_bucket_job(txn, id)? else {
        return Ok(BucketEnd::NotRunning);
    };
    let first_left = super::tables::first_key_of(txn, &bucket)?;
    match first_left {
        Some(key) => {
            job.state = JobState::Failed(format!(
                "bucket {bucket} was not deleted: it holds objects written after the job \
                 started (the first is {key:?}); they were kept"
            ));
            job.finished_ms = Some(now_ms);
            write(txn, id, &job)?;
            Ok(BucketEnd::Kept(job))
        }
        None => Ok(BucketEnd::Delete(bucket)),
    }
}

/// `JobDeleteBucket`, second half: the bucket is gone, the job is done.
pub fn mark_done(txn: &WriteTransaction, id: u64, now_ms: u64) -> Result<JobRecord, MetaError> {
    let Some(mut job) = read(txn, id)? else {
        return Err(MetaError::NotFound);
    };
    job.state = JobState::Done;
    job.finished_ms = Some(now_ms);
    write(txn, id, &job)?;
    Ok(job)
}

/// `EndJob`: cancels a running job or marks it failed; a finished job stays as it is.
pub fn end(
    txn: &WriteTransaction,
    id: u64,
    state: JobState,
    now_ms: u64,
) -> Result<JobRecord, MetaError> {
    let Some(mut job) = read(txn, id)? else {
        return Err(MetaError::NotFound);
    };
    if job.state == JobState::Running && state != JobState::Running {
        job.state = state;
        job.finished_ms = Some(now_ms);
        write(txn, id, &job)?;
    }
    Ok(job)
}

#[cfg(test)]
mod tests {
    use placement::{Magic, PairId, Sha1};

    use super::super::{Command, ContentSource, MetaStore, NewObject, Response};
    use super::*;

    fn store() -> (tempfile::TempDir, MetaStore) {
        let dir = tempfile::tempdir().unwrap();
        let s = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
        s.execute(&Command::CreateBucket {
            bucket: "mail".into(),
            created_ms: 1,
        })
        .unwrap();
        (dir, s)
    }

    const SHARED: Sha1 = Sha1([7; 20]);

    /// `key` referencing the shared content (stored by the first put).
    fn put(s: &MetaStore, key: &str) {
        let source = if s.file(&SHARED).unwrap().is_some() {
            ContentSource::Existing
        } else {
            ContentSource::Stored(PairId(0))
        };
        s.execute(&Command::PutObject {
            bucket: "mail".into(),
            key: key.into(),
            object: NewObject::new(SHARED, Magic::random(), 1, 0, [0; 16]),
            source,
            now_secs: 1,
            precondition: None,
        })
        .unwrap();
    }

    fn create(s: &MetaStore, prefix: &str) -> u64 {
        match s
            .execute(&Command::CreateJob {
                op: JobOp::DeletePrefix {
                    bucket: "mail".into(),
                    prefix: prefix.into(),
                },
                now_ms: 1000,
            })
            .unwrap()
        {
            Response::JobCreated(id) => id,
            other => panic!("{other:?}"),
        }
    }

    fn chunk(s: &MetaStore, id: u64, keys: &[&str], through: &str, done: bool) -> (u32, bool) {
        match s
            .execute(&Command::JobChunk {
                id,
                keys: keys.iter().map(|k| k.to_string()).collect(),
                through: through.into(),
                done,
                now_ms: 2000,
            })
            .unwrap()
        {
            Response::JobChunkDone { deleted, running } => (deleted, running),
            other => panic!("{other:?}"),
        }
    }

    fn refs(s: &MetaStore) -> u32 {
        s.file(&SHARED).unwrap().map_or(0, |f| f.refs)
    }

    #[test]
    fn a_job_deletes_what_existed_at_its_start_and_releases_each_reference_once() {
        let (_d, s) = store();
        for k in ["box/a", "box/b", "box/c", "other/x"] {
            put(&s, k);
        }
        let id = create(&s, "box/");
        let job = s.job(id).unwrap().unwrap();
        assert_eq!((job.total_estimate, job.state.name()), (3, "running"));
        // Meanwhile a client deletes box/a and overwrites box/b; box/d is new.
        s.execute(&Command::DeleteObject {
            bucket: "mail".into(),
            key: "box/a".into(),
            now_secs: 1,
        })
        .unwrap();
        put(&s, "box/b");
        put(&s, "box/d");
        assert_eq!(refs(&s), 4);
        let keys = s.keys_after("mail", "box/", None, 10).unwrap();
        assert_eq!(keys, ["box/b", "box/c", "box/d"]);
        // The worker names what it saw (and box/a, already gone): only box/c is the job's.
        assert_eq!(
            chunk(
                &s,
                id,
                &["box/a", "box/b", "box/c", "box/d"],
                "box/d",
                false
            ),
            (1, true)
        );
        assert_eq!(refs(&s), 3);
        // Replayed after a crash, the same chunk releases nothing more.
        assert_eq!(chunk(&s, id, &[], "box/d", false), (0, true));
        assert_eq!(
            s.keys_after("mail", "box/", Some("box/d"), 10).unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(chunk(&s, id, &[], "box/d", true), (0, false));
        let job = s.job(id).unwrap().unwrap();
        assert_eq!(
            (job.deleted, job.state.name(), job.remaining_estimate()),
            (1, "done", 0)
        );
        assert_eq!(
            s.keys_after("mail", "", None, 10).unwrap(),
            ["box/b", "box/d", "other/x"]
        );
    }

    #[test]
    fn a_cancelled_job_deletes_nothing_more_and_keys_outside_it_are_refused() {
        let (_d, s) = store();
        for k in ["box/a", "box/b"] {
            put(&s, k);
        }
        let id = create(&s, "box/");
        let r = s.execute(&Command::JobChunk {
            id,
            keys: vec!["other/x".into()],
            through: "box/b".into(),
            done: false,
            now_ms: 1,
        });
        assert!(matches!(r, Err(MetaError::InvalidCommand(_))), "{r:?}");
        match s
            .execute(&Command::EndJob {
                id,
                state: JobState::Cancelled,
                now_ms: 5,
            })
            .unwrap()
        {
            Response::Job(j) => assert_eq!(j.state, JobState::Cancelled),
            other => panic!("{other:?}"),
        }
        assert_eq!(chunk(&s, id, &["box/a"], "box/a", false), (0, false));
        assert_eq!(refs(&s), 2);
        // Cancelling again, or a finished job, changes nothing.
        let r = s.execute(&Command::EndJob {
            id,
            state: JobState::Failed("late".into()),
            now_ms: 6,
        });
        assert!(matches!(r, Ok(Response::Job(j)) if j.state == JobState::Cancelled));
        let r = s.execute(&Command::CreateJob {
            op: JobOp::DeletePrefix {
                bucket: "nope".into(),
                prefix: String::new(),
            },
            now_ms: 1,
        });
        assert_eq!(r, Err(MetaError::NoSuchBucket));
    }

    fn upload(s: &MetaStore, upload_id: &str, part: Sha1) {
        s.execute(&Command::CreateUpload {
            upload_id: upload_id.into(),
            upload: UploadRecord {
                bucket: "mail".into(),
                key: "big".into(),
                content_type: None,
                user_meta: Vec::new(),
                headers: Vec::new(),
                created_ms: 1,
            },
        })
        .unwrap();
        s.execute(&Command::PutPart {
            upload_id: upload_id.into(),
            part_number: 1,
            part: super::super::tables::PartRecord {
                sha1: part,
                magic: Magic::random(),
                size_bytes: 1,
                md5: [0; 16],
                crc32: 0,
                created_ms: 1,
            },
            source: ContentSource::Stored(PairId(0)),
            now_secs: 1,
        })
        .unwrap();
    }

    fn bucket_job(s: &MetaStore) -> u64 {
        match s
            .execute(&Command::CreateJob {
                op: JobOp::DeleteBucket {
                    bucket: "mail".into(),
                },
                now_ms: 1000,
            })
            .unwrap()
        {
            Response::JobCreated(id) => id,
            other => panic!("{other:?}"),
        }
    }

    fn finish(s: &MetaStore, id: u64) -> JobRecord {
        match s
            .execute(&Command::JobDeleteBucket { id, now_ms: 3000 })
            .unwrap()
        {
            Response::Job(j) => j,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_bucket_job_deletes_objects_then_uploads_then_the_bucket() {
        let (_d, s) = store();
        for k in ["a", "b"] {
            put(&s, k);
        }
        const PART: Sha1 = Sha1([9; 20]);
        upload(&s, "u1", PART);
        let id = bucket_job(&s);
        // Its chunks never end it: the final command does.
        let r = s.execute(&Command::JobChunk {
            id,
            keys: vec!["a".into(), "b".into()],
            through: "b".into(),
            done: true,
            now_ms: 2000,
        });
        assert!(matches!(r, Err(MetaError::InvalidCommand(_))), "{r:?}");
        assert_eq!(chunk(&s, id, &["a", "b"], "b", false), (2, true));
        assert_eq!(refs(&s), 0);
        assert_eq!(s.uploads_in("mail", 10).unwrap(), ["u1"]);
        let abort = Command::JobAbortUploads {
            id,
            upload_ids: vec!["u1".into(), "gone".into()],
            now_ms: 2000,
        };
        assert_eq!(
            s.execute(&abort).unwrap(),
            Response::JobChunkDone {
                deleted: 1,
                running: true
            }
        );
        assert!(s.deleting(&PART).unwrap().is_some());
        // Replayed, it releases nothing twice.
        assert_eq!(
            s.execute(&abort).unwrap(),
            Response::JobChunkDone {
                deleted: 0,
                running: true
            }
        );
        let job = finish(&s, id);
        assert_eq!((job.state, job.deleted), (JobState::Done, 2));
        assert!(s.bucket("mail").unwrap().is_none());
        // Replayed after the end, it changes nothing (and the name may be reused).
        assert_eq!(finish(&s, id).state, JobState::Done);
    }

    #[test]
    fn a_bucket_job_keeps_a_bucket_written_to_after_its_start() {
        let (_d, s) = store();
        put(&s, "a");
        let id = bucket_job(&s);
        put(&s, "new");
        assert_eq!(chunk(&s, id, &["a", "new"], "new", false), (1, true));
        let job = finish(&s, id);
        match &job.state {
            JobState::Failed(why) => assert!(why.contains("\"new\""), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(s.bucket("mail").unwrap().is_some());
        assert_eq!(s.keys_after("mail", "", None, 10).unwrap(), ["new"]);
        assert_eq!(refs(&s), 1);
        // A delete-prefix job has no final command.
        let other = create(&s, "");
        let r = s.execute(&Command::JobDeleteBucket {
            id: other,
            now_ms: 1,
        });
        assert!(matches!(r, Err(MetaError::InvalidCommand(_))), "{r:?}");
    }

    /// From format 11 a job deletes root's keys only: it is refused for a bucket whose keys
    /// a group other than root owns, or will own once the split under way commits; and a
    /// split that would give such a group keys of a bucket with a running job waits for
    /// the job's end. Before format 11 neither is checked (replicas of two releases apply
    /// alike).
    #[test]
    fn jobs_and_index_splits_keep_out_of_each_others_way() {
        use crate::groups::{IndexStart, ROOT, ShardMap, SplitAt};
        let (_dir, s) = store();
        s.execute(&Command::CreateBucket {
            bucket: "archive".into(),
            created_ms: 1,
        })
        .unwrap();
        let job = |bucket: &str| Command::CreateJob {
            op: JobOp::DeletePrefix {
                bucket: bucket.into(),
                prefix: "x/".into(),
            },
            now_ms: 1,
        };
        let one = ShardMap::single(vec![1]).unwrap();
        let (split_mail, _) = one
            .split(ROOT, SplitAt::Key(IndexStart::new("mail", "m")), vec![1])
            .unwrap();
        s.execute(&Command::SetShardMap {
            map: split_mail.clone(),
        })
        .unwrap();
        s.execute(&Command::SetClusterVersion { version: 10 })
            .unwrap();
        let old = s.execute(&job("mail"));
        assert!(matches!(old, Ok(Response::JobCreated(_))), "{old:?}");
        s.execute(&Command::SetClusterVersion { version: 11 })
            .unwrap();
        // The job created at format 10 still runs: a split of mail's keys waits for it.
        let (split_again, _) = split_mail
            .split(ROOT, SplitAt::Key(IndexStart::new("mail", "c")), vec![1])
            .unwrap();
        let refused = s.execute(&Command::PlanMap {
            map: split_again.clone(),
        });
        assert!(
            matches!(&refused, Err(MetaError::InvalidCommand(why)) if why.contains("bucket mail")),
            "{refused:?}"
        );
        assert!(matches!(
            s.execute(&job("mail")),
            Err(MetaError::InvalidBucketState(_))
        ));
        // A bucket root holds alone (before `mail/m`) takes jobs; a plan giving its keys
        // away is refused while one runs, and a job is refused once such a plan is under
        // way.
        let archive = match s.execute(&job("archive")).unwrap() {
            Response::JobCreated(id) => id,
            r => panic!("{r:?}"),
        };
        let (split_archive, _) = split_mail
            .split(ROOT, SplitAt::Key(IndexStart::new("archive", "k")), vec![1])
            .unwrap();
        assert!(
            s.execute(&Command::PlanMap {
                map: split_archive.clone()
            })
            .is_err()
        );
        for id in [1, archive] {
            s.execute(&Command::EndJob {
                id,
                state: JobState::Cancelled,
                now_ms: 2,
            })
            .unwrap();
        }
        s.execute(&Command::PlanMap { map: split_archive }).unwrap();
        assert!(matches!(
            s.execute(&job("archive")),
            Err(MetaError::InvalidBucketState(_))
        ));
    }
    /// Format 12, one store standing for root and for an index group: a fenced job is
    /// created only with a fence in exactly each group other than root that owns keys of
    /// its bucket (and no change of them planned); `DeleteFenced` removes the keys whose
    /// objects are not newer than the fence (once: replayed, it removes nothing), releasing
    /// their references; `JobChunkAcross` counts them and checks its bucket; a split of
    /// the bucket's keys waits for the job, a split beyond them does not. The new
    /// commands round-trip through their encoding.
    #[test]
    fn a_fenced_job_deletes_only_what_existed_at_its_start_in_each_group() {
        use crate::groups::{IndexStart, ROOT, ShardMap, SplitAt};
        let (_dir, s) = store();
        s.execute(&Command::CreateBucket {
            bucket: "archive".into(),
            created_ms: 1,
        })
        .unwrap();
        s.execute(&Command::SetClusterVersion {
            version: JOBS_ACROSS_FORMAT,
        })
        .unwrap();
        let (split, g) = ShardMap::single(vec![1])
            .unwrap()
            .split(ROOT, SplitAt::Key(IndexStart::new("mail", "m")), vec![1])
            .unwrap();
        s.execute(&Command::SetShardMap { map: split.clone() })
            .unwrap();
        for key in ["a", "n", "o"] {
            put(&s, key);
        }
        let fence = s.job_fence("mail", "").unwrap();
        assert_eq!(fence.1, 3, "no ownership row here: every key counts");
        put(&s, "p");
        assert_eq!(refs(&s), 4);
        let op = JobOp::DeletePrefix {
            bucket: "mail".into(),
            prefix: String::new(),
        };
        let fenced = |fences: Vec<(GroupId, u64)>| Command::CreateJobFenced {
            op: op.clone(),
            now_ms: 1000,
            fences,
            others: 2,
        };
        for wrong in [vec![], vec![(g + 1, fence.0)], vec![(g, 1), (g, 2)]] {
            let r = s.execute(&fenced(wrong.clone()));
            assert!(
                matches!(r, Err(MetaError::InvalidBucketState(_))),
                "{wrong:?}: {r:?}"
            );
        }
        let id = match s.execute(&fenced(vec![(g, fence.0)])).unwrap() {
            Response::JobCreated(id) => id,
            other => panic!("{other:?}"),
        };
        assert_eq!(s.job_fences(id).unwrap(), BTreeMap::from([(g, fence.0)]));
        assert_eq!(s.job(id).unwrap().unwrap().total_estimate, 4 + 2);

        // The index group's page: n and o are the job's, p was written after the fence,
        // q does not exist.
        let delete = Command::DeleteFenced {
            bucket: "mail".into(),
            keys: ["n", "o", "p", "q"].map(String::from).to_vec(),
            fence_seq: fence.0,
            now_secs: 2,
        };
        assert_eq!(
            s.execute(&delete).unwrap(),
            Response::ObjectsDeleted(vec![true, true, false, false])
        );
        assert_eq!(refs(&s), 2);
        assert_eq!(
            s.execute(&delete).unwrap(),
            Response::ObjectsDeleted(vec![false; 4])
        );
        assert_eq!(refs(&s), 2);
        let across = |bucket: &str, keys: &[&str], through: &str, done: bool| {
            s.execute(&Command::JobChunkAcross {
                id,
                bucket: bucket.into(),
                keys: keys.iter().map(|k| k.to_string()).collect(),
                through: through.into(),
                done,
                deleted_elsewhere: 2,
                now_ms: 2000,
            })
        };
        let r = across("archive", &["a"], "p", false);
        assert!(matches!(r, Err(MetaError::InvalidCommand(_))), "{r:?}");
        // While it runs, mail's groups stay as they are; the keys after mail's may move.
        let (split_mail, _) = split
            .split(g, SplitAt::Key(IndexStart::new("mail", "o")), vec![1])
            .unwrap();
        let refused = s.execute(&Command::PlanMap { map: split_mail });
        assert!(
            matches!(&refused, Err(MetaError::InvalidCommand(why)) if why.contains("bucket mail")),
            "{refused:?}"
        );
        let (split_beyond, _) = split
            .split(g, SplitAt::Key(IndexStart::new("zzz", "")), vec![1])
            .unwrap();
        s.execute(&Command::PlanMap { map: split_beyond }).unwrap();
        assert_eq!(
            across("mail", &["a"], "p", true).unwrap(),
            Response::JobChunkDone {
                deleted: 1,
                running: false
            }
        );
        let job = s.job(id).unwrap().unwrap();
        assert_eq!((job.state, job.deleted), (JobState::Done, 3));
        assert_eq!(refs(&s), 1);
        assert_eq!(s.keys_after("mail", "", None, 10).unwrap(), ["p"]);

        for cmd in [
            fenced(vec![(g, u64::MAX), (7, 0)]),
            delete,
            Command::JobChunkAcross {
                id: u64::MAX,
                bucket: "b".into(),
                keys: vec!["k".into()],
                through: "k".into(),
                done: true,
                deleted_elsewhere: u64::MAX,
                now_ms: 3,
            },
        ] {
            assert_eq!(cmd.format_version(), JOBS_ACROSS_FORMAT);
            let bytes = postcard::to_stdvec(&cmd).unwrap();
            assert_eq!(postcard::from_bytes::<Command>(&bytes).unwrap(), cmd);
        }
    }
}
