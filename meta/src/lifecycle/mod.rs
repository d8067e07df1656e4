//! The `lifecycle` table: each bucket's lifecycle rules and where the expiry worker's pass
//! over the bucket stands, and the two commands that change it.
//!
//! The cursor lives beside the rules so that a restart (or a new Raft leader) resumes the
//! pass where the last committed batch left it; replacing the rules restarts the pass.

use redb::{ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};

use super::MetaError;
use super::tables::{self, OBJECTS, UPLOADS, UploadRecord};

pub mod rules;

pub use rules::{Expiration, LifecycleRule, RuleFilter, VersionActions};

/// Bound on the keys of one `ExpireObjects` (as DeleteObjects): one transaction stays short.
pub const EXPIRE_KEYS_MAX: usize = 1000;

/// Bucket name -> postcard [`LifecycleRecord`].
pub const LIFECYCLE: TableDefinition<&str, &[u8]> = TableDefinition::new("lifecycle");

/// A bucket's lifecycle configuration and the expiry passes' progress over it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LifecycleRecord {
    pub rules: Vec<LifecycleRule>,
    /// The last key the expiry pass has dealt with; None: the next pass starts at the
    /// beginning of the bucket.
    pub resume_after: Option<String>,
    /// The last (key, version number) the pass over a versioned bucket's noncurrent
    /// versions has dealt with.
    pub versions_resume_after: Option<(String, u64)>,
}

/// The record as written before versions (format byte 1): the rules without their
/// version actions, and the object pass's cursor.
#[derive(Serialize, Deserialize)]
struct RecordV1 {
    rules: Vec<LifecycleRule>,
    resume_after: Option<String>,
}

/// Format byte 2: the same, then each rule's version actions (in order) and the version
/// pass's cursor. Written only when a rule acts on versions or that pass has a cursor,
/// so that a group that never uses them keeps format 1.
#[derive(Serialize, Deserialize)]
struct RecordV2 {
    v1: RecordV1,
    versions: Vec<VersionActions>,
    versions_resume_after: Option<(String, u64)>,
}

const RECORD_V1: u8 = 1;
const RECORD_V2: u8 = 2;

impl LifecycleRecord {
    pub fn encode(&self) -> Result<Vec<u8>, MetaError> {
        let corrupt = |e: postcard::Error| MetaError::Corrupt(format!("lifecycle: {e}"));
        let v1 = RecordV1 {
            rules: self.rules.clone(),
            resume_after: self.resume_after.clone(),
        };
        if self.rules.iter().all(|r| r.versions.is_none()) && self.versions_resume_after.is_none() {
            return tables::encode_versioned(&v1);
        }
        let v2 = RecordV2 {
            v1,
            versions: self.rules.iter().map(|r| r.versions).collect(),
            versions_resume_after: self.versions_resume_after.clone(),
        };
        let mut out = vec![RECORD_V2];
        out.extend(postcard::to_stdvec(&v2).map_err(corrupt)?);
        Ok(out)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, MetaError> {
        let corrupt = |e: postcard::Error| MetaError::Corrupt(format!("lifecycle: {e}"));
        match bytes.split_first() {
            Some((&RECORD_V2, rest)) => {
                let v2: RecordV2 = postcard::from_bytes(rest).map_err(corrupt)?;
                Ok(LifecycleRecord {
                    rules: with_versions(v2.v1.rules, &v2.versions)?,
                    resume_after: v2.v1.resume_after,
                    versions_resume_after: v2.versions_resume_after,
                })
            }
            Some((&RECORD_V1, _)) => {
                let v1: RecordV1 = tables::decode_versioned("lifecycle", bytes)?;
                Ok(LifecycleRecord {
                    rules: v1.rules,
                    resume_after: v1.resume_after,
                    versions_resume_after: None,
                })
            }
            Some((v, _)) => Err(MetaError::Corrupt(format!(
                "lifecycle: unknown record version {v}"
            ))),
            None => Err(MetaError::Corrupt("lifecycle: empty record".into())),
        }
    }
}

/// The rules with their version actions put back (one per rule, in order).
pub fn with_versions(
    mut rules: Vec<LifecycleRule>,
    versions: &[VersionActions],
) -> Result<Vec<LifecycleRule>, MetaError> {
    if versions.len() != rules.len() {
        return Err(MetaError::Corrupt(format!(
            "lifecycle: {} rules but {} version actions",
            rules.len(),
            versions.len()
        )));
    }
    for (rule, v) in rules.iter_mut().zip(versions) {
        rule.versions = *v;
    }
    Ok(rules)
}

/// `SetBucketLifecycle` (and `SetBucketLifecycleWithVersions`, whose rules carry their
/// version actions again): replaces the rules and restarts both passes.
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
                ..LifecycleRecord::default()
            };
            table.insert(bucket, record.encode()?.as_slice())?;
        }
        None => {
            table.remove(bucket)?;
        }
    }
    Ok(())
}

/// Removes a deleted bucket's configuration.
pub(crate) fn forget(txn: &WriteTransaction, bucket: &str) -> Result<(), MetaError> {
    txn.open_table(LIFECYCLE)?.remove(bucket)?;
    Ok(())
}

pub(crate) fn write(
    txn: &WriteTransaction,
    bucket: &str,
    record: &LifecycleRecord,
) -> Result<(), MetaError> {
    txn.open_table(LIFECYCLE)?
        .insert(bucket, record.encode()?.as_slice())?;
    Ok(())
}

pub(crate) fn read(
    txn: &WriteTransaction,
    bucket: &str,
) -> Result<Option<LifecycleRecord>, MetaError> {
    match txn.open_table(LIFECYCLE)?.get(bucket)? {
        Some(v) => Ok(Some(LifecycleRecord::decode(v.value())?)),
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
            let current = table
                .get((bucket, key.as_bytes()))?
                .map(|v| crate::versions::decode_current_with(v.value()))
                .transpose()?;
            let due = current.is_some_and(|(o, _, extras)| {
                o.seq == *seq
                    && rules::object_expiry(
                        &record.rules,
                        key,
                        (o.size_bytes, Some(&extras.tags)),
                        o.created_ms / 1000,
                        day_secs,
                    )
                    .is_some_and(|(at, _)| at <= now_secs)
            });
            out.push(due);
        }
    }
    record.resume_after = resume_after.clone();
    write(txn, bucket, &record)?;
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
