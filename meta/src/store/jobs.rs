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
