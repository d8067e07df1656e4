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

use redb::{ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};

use super::MetaError;
use super::tables::{self, BUCKETS, COUNTERS, OBJECT_SEQ, OBJECTS, ObjectRecord};

/// Job id -> postcard [`JobRecord`].
pub const JOBS: TableDefinition<u64, &[u8]> = TableDefinition::new("jobs");

/// The last job id given, in `counters`.
const JOB_SEQ: &str = "job_seq";

/// Keys one chunk command may name: bounds the transaction and the log entry.
pub const CHUNK_KEYS_MAX: usize = 1000;

/// Finished jobs kept for `jobs list`/`status`; the oldest go beyond it.
pub const FINISHED_KEPT: usize = 1000;

/// What a job does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobOp {
    /// Delete every object of `bucket` whose key starts with `prefix` (all of them for an
    /// empty prefix) that existed when the job started.
    DeletePrefix { bucket: String, prefix: String },
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
    let JobOp::DeletePrefix { bucket, prefix } = op;
    if txn.open_table(BUCKETS)?.get(bucket.as_str())?.is_none() {
        return Err(MetaError::NoSuchBucket);
    }
    let mut counters = txn.open_table(COUNTERS)?;
    let fence_seq = counters.get(OBJECT_SEQ)?.map(|v| v.value()).unwrap_or(0);
    let id = counters.get(JOB_SEQ)?.map(|v| v.value()).unwrap_or(0) + 1;
    counters.insert(JOB_SEQ, id)?;
    drop(counters);
    let mut total = 0u64;
    for entry in txn
        .open_table(OBJECTS)?
        .range((bucket.as_str(), prefix.as_bytes())..)?
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

/// Drops the oldest finished jobs beyond [`FINISHED_KEPT`].
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
        for id in &finished[..finished.len() - FINISHED_KEPT] {
            table.remove(*id)?;
        }
    }
    Ok(())
}

/// What one chunk did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkDone {
    /// The objects the chunk removed (their contents are released by the caller of this
    /// function, in the same transaction).
    pub removed: Vec<ObjectRecord>,
    /// Whether the job is still running after it.
    pub running: bool,
}

/// `JobChunk`: removes `keys` (sorted, all after the job's cursor and under its prefix)
/// whose objects are not newer than the job's fence, and moves the cursor to `through`
/// (the last key the worker looked at). A job no longer running (cancelled meanwhile)
/// changes nothing. `done`: the worker found nothing after `through`; the job ends.
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
        });
    }
    let JobOp::DeletePrefix { bucket, prefix } = &job.op;
    let after_cursor = |k: &str| job.cursor.as_deref().is_none_or(|c| k > c);
    // An empty `through`: the worker found no key at all (the chunk names none).
    let through_ok =
        through.starts_with(prefix.as_str()) || (through.is_empty() && keys.is_empty());
    if !through_ok {
        return Err(MetaError::InvalidCommand(format!(
            "job {id}: {through:?} is not under the prefix {prefix:?}"
        )));
    }
    let mut removed = Vec::new();
    {
        let mut objects = txn.open_table(OBJECTS)?;
        for key in keys {
            if !key.starts_with(prefix.as_str()) || !after_cursor(key) || key.as_str() > through {
                return Err(MetaError::InvalidCommand(format!(
                    "job {id}: key {key:?} is outside the chunk"
                )));
            }
            let current = match objects.get((bucket.as_str(), key.as_bytes()))? {
                Some(v) => tables::decode_versioned::<ObjectRecord>("objects", v.value())?,
                // Deleted by a client meanwhile: nothing to release, and never twice.
                None => continue,
            };
            if current.seq > job.fence_seq {
                // Written (or overwritten) after the job started: not the job's.
                continue;
            }
            objects.remove((bucket.as_str(), key.as_bytes()))?;
            removed.push(current);
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
    Ok(ChunkDone { removed, running })
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
}
