//! The `lifecycle` table: each bucket's lifecycle rules and where the expiry worker's pass
//! over the bucket stands, and the two commands that change it.
//!
//! The cursor lives beside the rules so that a restart (or a new Raft leader) resumes the
//! pass where the last committed batch left it; replacing the rules restarts the pass.

use redb::{ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};

use super::MetaError;
use super::tables::{self, OBJECTS, ObjectRecord, UPLOADS, UploadRecord};

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
    tables::check_bucket(txn, bucket)?;
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
                .map(|v| crate::versions::decode_object(v.value()))
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
