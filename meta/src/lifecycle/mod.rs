//! The `lifecycle` table: each bucket's lifecycle rules and where the expiry worker's pass
//! over the bucket stands, and the two commands that change it.
//!
//! The cursor lives beside the rules so that a restart (or a new Raft leader) resumes the
//! pass where the last committed batch left it; replacing the rules restarts the pass.

use redb::{ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};

use super::tables::{self, BUCKETS, OBJECTS, ObjectRecord, UPLOADS, UploadRecord};
use super::{MetaError, MetaStore};

pub mod rules;

pub use rules::{Expiration, LifecycleRule, RuleFilter};

/// Bucket name -> postcard [`LifecycleRecord`].
pub const LIFECYCLE: TableDefinition<&str, &[u8]> = TableDefinition::new("lifecycle");

/// A bucket's lifecycle configuration and the expiry pass's progress over it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleRecord {
    pub rules: Vec<LifecycleRule>,
    /// The last key the expiry pass has dealt with; None: the next pass starts at the
    /// beginning of the bucket.
    pub resume_after: Option<String>,
}

/// `SetBucketLifecycle`.
pub(super) fn set(
    txn: &WriteTransaction,
    bucket: &str,
    rules: &Option<Vec<LifecycleRule>>,
) -> Result<(), MetaError> {
    if txn.open_table(BUCKETS)?.get(bucket)?.is_none() {
        return Err(MetaError::NoSuchBucket);
    }
    let mut table = txn.open_table(LIFECYCLE)?;
    match rules {
        Some(rules) => {
            let record = LifecycleRecord {
                rules: rules.clone(),
                resume_after: None,
            };
            table.insert(bucket, tables::encode_versioned(&record)?.as_slice())?;
        }
        None => {
            table.remove(bucket)?;
        }
    }
    Ok(())
}

/// Removes a deleted bucket's configuration.
pub(super) fn forget(txn: &WriteTransaction, bucket: &str) -> Result<(), MetaError> {
    txn.open_table(LIFECYCLE)?.remove(bucket)?;
    Ok(())
}

fn read(txn: &WriteTransaction, bucket: &str) -> Result<Option<LifecycleRecord>, MetaError> {
    match txn.open_table(LIFECYCLE)?.get(bucket)? {
        Some(v) => Ok(Some(tables::decode_versioned("lifecycle", v.value())?)),
        None => Ok(None),
    }
}

/// Which of `objects` (key, seq) `ExpireObjects` may remove: each must still be the
/// version the worker read, and the bucket's rules *as they are now* must expire it by
/// `now_secs` (a rule removed or changed since the worker read them expires nothing).
/// Also moves the cursor. The caller removes the keys returned.
pub(super) fn expirable(
    txn: &WriteTransaction,
    bucket: &str,
    objects: &[(String, u64)],
    resume_after: &Option<String>,
    day_secs: u64,
    now_secs: u64,
) -> Result<Vec<bool>, MetaError> {
    let Some(mut record) = read(txn, bucket)? else {
        return Ok(vec![false; objects.len()]);
    };
    let mut out = Vec::with_capacity(objects.len());
    {
        let table = txn.open_table(OBJECTS)?;
        for (key, seq) in objects {
            let current: Option<ObjectRecord> = table
                .get((bucket, key.as_bytes()))?
                .map(|v| tables::decode_versioned("objects", v.value()))
                .transpose()?;
            let due = current.is_some_and(|o| {
                o.seq == *seq
                    && rules::object_expiry(
                        &record.rules,
                        key,
                        o.size_bytes,
                        o.created_ms / 1000,
                        day_secs,
                    )
                    .is_some_and(|(at, _)| at <= now_secs)
            });
            out.push(due);
        }
    }
    record.resume_after = resume_after.clone();
    txn.open_table(LIFECYCLE)?
        .insert(bucket, tables::encode_versioned(&record)?.as_slice())?;
    Ok(out)
}

/// The ids of the uploads in progress in `bucket`. Uploads are few (they end in minutes,
/// or at `--upload-max-age-secs`), so this scans the table.
pub(super) fn uploads_of(txn: &WriteTransaction, bucket: &str) -> Result<Vec<String>, MetaError> {
    let table = txn.open_table(UPLOADS)?;
    let mut out = Vec::new();
    for entry in table.iter()? {
        let (k, v) = entry?;
        let u: UploadRecord = tables::decode_versioned("uploads", v.value())?;
        if u.bucket == bucket {
            out.push(k.value().to_string());
        }
    }
    Ok(out)
}

impl MetaStore {
    pub fn lifecycle(&self, bucket: &str) -> Result<Option<LifecycleRecord>, MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(LIFECYCLE)?;
        match table.get(bucket)? {
            Some(v) => Ok(Some(tables::decode_versioned("lifecycle", v.value())?)),
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
            out.push((
                k.value().to_string(),
                tables::decode_versioned("lifecycle", v.value())?,
            ));
        }
        Ok(out)
    }

    /// Up to `limit` objects of `bucket` after key `after`, in key order.
    pub fn objects_after(
        &self,
        bucket: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, ObjectRecord)>, MetaError> {
        use std::ops::Bound;
        let txn = self.db().begin_read()?;
        let table = txn.open_table(OBJECTS)?;
        let start = match after {
            Some(a) => Bound::Excluded((bucket, a.as_bytes())),
            None => Bound::Included((bucket, &[][..])),
        };
        let mut out = Vec::new();
        for entry in table.range::<(&str, &[u8])>((start, Bound::Unbounded))? {
            let (k, v) = entry?;
            let (b, key) = k.value();
            if b != bucket || out.len() >= limit {
                break;
            }
            out.push((
                String::from_utf8_lossy(key).into_owned(),
                tables::decode_versioned("objects", v.value())?,
            ));
        }
        Ok(out)
    }

    /// Up to `limit` uploads in progress (any bucket) after upload id `after`.
    pub fn uploads_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, UploadRecord)>, MetaError> {
        use std::ops::Bound;
        let txn = self.db().begin_read()?;
        let table = txn.open_table(UPLOADS)?;
        let start = match after {
            Some(a) => Bound::Excluded(a),
            None => Bound::Unbounded,
        };
        let mut out = Vec::new();
        for entry in table.range::<&str>((start, Bound::Unbounded))? {
            if out.len() >= limit {
                break;
            }
            let (k, v) = entry?;
            out.push((
                k.value().to_string(),
                tables::decode_versioned("uploads", v.value())?,
            ));
        }
        Ok(out)
    }
}
