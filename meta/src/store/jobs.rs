//! Reads of the jobs table.

use redb::{ReadableDatabase, ReadableTable};

use super::MetaStore;
use crate::MetaError;
use crate::jobs;
use crate::tables;

impl MetaStore {
    /// One job.
    pub fn job(&self, id: u64) -> Result<Option<jobs::JobRecord>, MetaError> {
        let txn = self.db().begin_read()?;
        match txn.open_table(jobs::JOBS)?.get(id)? {
            Some(v) => Ok(Some(tables::decode_versioned("jobs", v.value())?)),
            None => Ok(None),
        }
    }

    /// The fences of job `id` in index groups other than root (empty: a job of root's
    /// keys only; see [`jobs::create_fenced`]).
    pub fn job_fences(
        &self,
        id: u64,
    ) -> Result<std::collections::BTreeMap<crate::groups::GroupId, u64>, MetaError> {
        let txn = self.db().begin_read()?;
        jobs::fences(&txn.open_table(tables::COUNTERS)?, id)
    }

    /// Where a job starts in this index group: its object sequence number (objects
    /// written later have a higher one) and the objects of `bucket` under `prefix` it
    /// owns (one pass over them, as `CreateJob` counts root's).
    pub fn job_fence(&self, bucket: &str, prefix: &str) -> Result<(u64, u64), MetaError> {
        let txn = self.db().begin_read()?;
        let seq = txn
            .open_table(tables::COUNTERS)?
            .get(tables::OBJECT_SEQ)?
            .map_or(0, |v| v.value());
        let own = crate::ownership::read(&txn.open_table(crate::ownership::OWNERSHIP)?)?;
        let mut objects = 0u64;
        for entry in txn
            .open_table(tables::OBJECTS)?
            .range((bucket, prefix.as_bytes())..)?
        {
            let (k, _) = entry?;
            let (b, key) = k.value();
            if b != bucket || !key.starts_with(prefix.as_bytes()) {
                break;
            }
            // Rows a split left behind are the new owner's.
            if own.as_ref().is_none_or(|o| o.owns_key(bucket, key)) {
                objects += 1;
            }
        }
        Ok((seq, objects))
    }

    /// Every job kept (at most the running ones and [`jobs::FINISHED_KEPT`] finished),
    /// by id.
    pub fn jobs(&self) -> Result<Vec<(u64, jobs::JobRecord)>, MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(jobs::JOBS)?;
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (k, v) = entry?;
            out.push((k.value(), tables::decode_versioned("jobs", v.value())?));
        }
        Ok(out)
    }
}
