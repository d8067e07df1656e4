//! Reads of object versions (see `docs/versions.md`): one version by id, and the versions
//! of one key, newest first.

use redb::ReadableDatabase;

use super::MetaStore;
use crate::MetaError;
use crate::tables::{OBJECTS, VERSIONS};
use crate::versions::{VersionId, VersionRecord, VersionView, decode_current, order_of};

impl MetaStore {
    /// The versions of `bucket/key`, newest first (the current object first), at most
    /// `limit`, in one read transaction.
    pub fn versions_of(
        &self,
        bucket: &str,
        key: &str,
        limit: usize,
    ) -> Result<Vec<VersionView>, MetaError> {
        let txn = self.db().begin_read()?;
        let k = key.as_bytes();
        let mut out = Vec::new();
        if let Some(v) = txn.open_table(OBJECTS)?.get((bucket, k))? {
            let (record, stamp) = decode_current(v.value())?;
            out.push(VersionView::current(record, stamp));
        }
        let table = txn.open_table(VERSIONS)?;
        for entry in table.range((bucket, k, 0)..=(bucket, k, u64::MAX))? {
            if out.len() >= limit {
                break;
            }
            let (_, v) = entry?;
            let latest = out.is_empty();
            out.push(VersionView::of(VersionRecord::decode(v.value())?, latest));
        }
        out.truncate(limit);
        Ok(out)
    }

    /// The version of `bucket/key` that `id` names, if there is one.
    pub fn version(
        &self,
        bucket: &str,
        key: &str,
        id: VersionId,
    ) -> Result<Option<VersionView>, MetaError> {
        let txn = self.db().begin_read()?;
        let k = key.as_bytes();
        let current = match txn.open_table(OBJECTS)?.get((bucket, k))? {
            Some(v) => Some(decode_current(v.value())?),
            None => None,
        };
        if let Some((record, stamp)) = &current
            && id.names(*stamp, Some(record.magic))
        {
            return Ok(current.map(|(r, s)| VersionView::current(r, s)));
        }
        let number = match id {
            VersionId::Numbered { number, .. } => number,
            VersionId::Null => 0,
        };
        let table = txn.open_table(VERSIONS)?;
        let entry = match table.get((bucket, k, order_of(number)))? {
            Some(v) => VersionRecord::decode(v.value())?,
            None => return Ok(None),
        };
        if !id.names(entry.stamp(), Some(entry.magic())) {
            return Ok(None);
        }
        // The newest entry is the current version only when there is no current object.
        let latest = current.is_none()
            && table
                .range((bucket, k, 0)..=(bucket, k, u64::MAX))?
                .next()
                .transpose()?
                .is_some_and(|(key, _)| key.value().2 == order_of(number));
        Ok(Some(VersionView::of(entry, latest)))
    }
}
