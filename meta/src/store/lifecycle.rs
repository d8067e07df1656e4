//! Reads of the buckets' lifecycle configurations.

use redb::{ReadableDatabase, ReadableTable};

use super::MetaStore;
use crate::MetaError;
use crate::lifecycle::{LIFECYCLE, LifecycleRecord};

impl MetaStore {
    pub fn lifecycle(&self, bucket: &str) -> Result<Option<LifecycleRecord>, MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(LIFECYCLE)?;
        match table.get(bucket)? {
            Some(v) => Ok(Some(LifecycleRecord::decode(v.value())?)),
            None => Ok(None),
        }
    }

    /// Every bucket's lifecycle configuration (one record per bucket that has rules).
    pub fn lifecycles(&self) -> Result<Vec<(String, LifecycleRecord)>, MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(LIFECYCLE)?;
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (k, v) = entry?;
            out.push((k.value().to_string(), LifecycleRecord::decode(v.value())?));
        }
        Ok(out)
    }
}
