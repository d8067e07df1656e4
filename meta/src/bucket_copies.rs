//! The bucket records an index group keeps (`docs/scaling.md`, "index groups", step b).
//!
//! A write in an index group reads its bucket's record (does it exist, its versioning, its
//! object lock), which root owns. So each index group keeps a copy of the records of the
//! buckets it holds keys of, with the revision it was copied at: root counts a revision
//! per bucket (`bucket_revisions`), one more on every change of its record, deletion
//! included (the row stays, so that a bucket created again goes on from it). A copy is
//! taken only if its revision is newer than the one the group holds, so copies sent in
//! any order, twice or late leave the newest.
//!
//! Root counts revisions from metadata format 9 on (the format of [`Command::CopyBuckets`]),
//! so that replicas of two releases agree during a rolling upgrade; a bucket unchanged
//! since is at revision 0. From format 11 a copy also carries the bucket's lifecycle rules
//! ([`Command::CopyBucketsWithRules`]) and a change of them counts a revision: each index
//! group's leader expires its own keys by them, keeping its own cursors (`lifecycle.rs`).
//!
//! [`Command::CopyBuckets`]: crate::Command::CopyBuckets
//! [`Command::CopyBucketsWithRules`]: crate::Command::CopyBucketsWithRules

use std::collections::BTreeMap;

use redb::{ReadTransaction, ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::MetaError;
use crate::groups::ROOT;
use crate::lifecycle::{self, LIFECYCLE, LifecycleRecord};
use crate::tables::{BUCKETS, BucketRecord};

/// bucket -> revision: in root, its record's; in an index group, its copy's.
pub const BUCKET_REVISIONS: TableDefinition<&str, u64> = TableDefinition::new("bucket_revisions");

/// The format from which root counts revisions.
pub const REVISIONS_FORMAT: u32 = 9;

/// The format from which copies carry lifecycle rules and their changes count revisions.
pub const LIFECYCLE_FORMAT: u32 = 11;

/// Bound on the copies one command carries.
pub const COPIES_MAX: usize = 256;

/// One bucket's record as root holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketCopy {
    pub bucket: String,
    /// The encoded [`BucketRecord`]; None: the bucket was deleted.
    pub record: Option<Vec<u8>>,
    pub revision: u64,
    /// The bucket's lifecycle rules: an encoded [`LifecycleRecord`] without cursors (None:
    /// it has none). Not in this struct's encoding, which `CopyBuckets` of format 9 fixed:
    /// it travels beside the copies in `CopyBucketsWithRules`.
    #[serde(skip)]
    pub lifecycle: Option<Vec<u8>>,
}

/// `bucket`'s lifecycle rules as a copy carries them.
fn rules_of(
    table: Option<&redb::ReadOnlyTable<&'static str, &'static [u8]>>,
    bucket: &str,
) -> Result<Option<Vec<u8>>, MetaError> {
    let Some(table) = table else { return Ok(None) };
    let Some(v) = table.get(bucket)? else {
        return Ok(None);
    };
    let rules = LifecycleRecord {
        rules: LifecycleRecord::decode(v.value())?.rules,
        ..LifecycleRecord::default()
    };
    Ok(Some(rules.encode()?))
}

fn lifecycle_table(
    txn: &ReadTransaction,
) -> Result<Option<redb::ReadOnlyTable<&'static str, &'static [u8]>>, MetaError> {
    match txn.open_table(LIFECYCLE) {
        Ok(table) => Ok(Some(table)),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// `bucket`'s record and revision as `txn` sees them.
pub fn read(txn: &ReadTransaction, bucket: &str) -> Result<BucketCopy, MetaError> {
    let record = txn
        .open_table(BUCKETS)?
        .get(bucket)?
        .map(|v| v.value().to_vec());
    let revision = revisions_table(txn)?
        .map(|t| t.get(bucket).map(|v| v.map_or(0, |v| v.value())))
        .transpose()?
        .unwrap_or(0);
    Ok(BucketCopy {
        bucket: bucket.to_string(),
        record,
        revision,
        lifecycle: rules_of(lifecycle_table(txn)?.as_ref(), bucket)?,
    })
}

/// Every bucket's record and revision, the deleted ones that have a revision included.
/// Buckets are few (a store holds thousands, not millions).
pub fn read_all(txn: &ReadTransaction) -> Result<Vec<BucketCopy>, MetaError> {
    let mut out: BTreeMap<String, BucketCopy> = BTreeMap::new();
    for row in txn.open_table(BUCKETS)?.iter()? {
        let (k, v) = row?;
        out.insert(
            k.value().to_string(),
            BucketCopy {
                bucket: k.value().to_string(),
                record: Some(v.value().to_vec()),
                revision: 0,
                lifecycle: None,
            },
        );
    }
    if let Some(table) = revisions_table(txn)? {
        for row in table.iter()? {
            let (k, v) = row?;
            let copy = out
                .entry(k.value().to_string())
                .or_insert_with(|| BucketCopy {
                    bucket: k.value().to_string(),
                    record: None,
                    revision: 0,
                    lifecycle: None,
                });
            copy.revision = v.value();
        }
    }
    let rules = lifecycle_table(txn)?;
    for copy in out.values_mut() {
        copy.lifecycle = rules_of(rules.as_ref(), &copy.bucket)?;
    }
    Ok(out.into_values().collect())
}

/// The revision of every bucket copy an index group holds.
pub fn revisions(txn: &ReadTransaction) -> Result<BTreeMap<String, u64>, MetaError> {
    let mut out = BTreeMap::new();
    if let Some(table) = revisions_table(txn)? {
        for row in table.iter()? {
            let (k, v) = row?;
            out.insert(k.value().to_string(), v.value());
        }
    }
    Ok(out)
}

fn revisions_table(
    txn: &ReadTransaction,
) -> Result<Option<redb::ReadOnlyTable<&'static str, u64>>, MetaError> {
    match txn.open_table(BUCKET_REVISIONS) {
        Ok(table) => Ok(Some(table)),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Applies `CopyBuckets` (`lifecycles` None) or `CopyBucketsWithRules` (one entry per
/// copy) in an index group: each copy newer than the one held (or the first) replaces it,
/// and with its rules, the bucket's lifecycle rules (their cursors kept if the rules are
/// the same, restarted otherwise). Refused in root, whose records they are, and in a
/// group that has no ownership row (a single group is root). Answers how many were taken.
pub fn apply(
    txn: &WriteTransaction,
    copies: &[BucketCopy],
    lifecycles: Option<&[Option<Vec<u8>>]>,
) -> Result<u32, MetaError> {
    if crate::ownership::read_in(txn)?.is_none_or(|own| own.group == ROOT) {
        return Err(MetaError::InvalidCommand(
            "bucket copies go to index groups, not to root".into(),
        ));
    }
    if copies.len() > COPIES_MAX {
        return Err(MetaError::InvalidCommand(format!(
            "{} bucket copies in one command, at most {COPIES_MAX}",
            copies.len()
        )));
    }
    if lifecycles.is_some_and(|l| l.len() != copies.len()) {
        return Err(MetaError::InvalidCommand(
            "bucket copies and their lifecycle rules differ in number".into(),
        ));
    }
    let mut revisions = txn.open_table(BUCKET_REVISIONS)?;
    let mut buckets = txn.open_table(BUCKETS)?;
    let mut taken = 0;
    for (i, copy) in copies.iter().enumerate() {
        let held = revisions.get(copy.bucket.as_str())?.map(|v| v.value());
        if held.is_some_and(|held| held >= copy.revision) {
            continue;
        }
        let bucket = copy.bucket.as_str();
        match &copy.record {
            Some(bytes) => {
                BucketRecord::decode(bytes)?;
                buckets.insert(bucket, bytes.as_slice())?;
            }
            None => {
                buckets.remove(bucket)?;
            }
        }
        if let Some(lifecycles) = lifecycles {
            take_rules(txn, bucket, copy.record.is_some(), &lifecycles[i])?;
        }
        revisions.insert(bucket, copy.revision)?;
        taken += 1;
    }
    Ok(taken)
}

/// A copy's lifecycle rules in the group's own `lifecycle` table.
fn take_rules(
    txn: &WriteTransaction,
    bucket: &str,
    exists: bool,
    rules: &Option<Vec<u8>>,
) -> Result<(), MetaError> {
    let rules = match rules {
        Some(bytes) if exists => LifecycleRecord::decode(bytes)?.rules,
        _ => return lifecycle::forget(txn, bucket),
    };
    let held = lifecycle::read(txn, bucket)?;
    if held.as_ref().is_some_and(|h| h.rules == rules) {
        return Ok(());
    }
    let record = LifecycleRecord {
        rules,
        ..LifecycleRecord::default()
    };
    lifecycle::write(txn, bucket, &record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groups::{IndexStart, ShardMap, SplitAt};
    use crate::versions::Versioning;
    use crate::{Command, MetaStore};
    use redb::ReadableDatabase as _;

    fn store(dir: &std::path::Path, name: &str) -> MetaStore {
        MetaStore::open(&dir.join(name)).unwrap()
    }

    fn copy_of(s: &MetaStore, bucket: &str) -> BucketCopy {
        read(&s.db().begin_read().unwrap(), bucket).unwrap()
    }

    /// Root counts a revision per change of a bucket's record from format 9 on (not
    /// before: replicas of two releases must agree), a deletion included; an index group
    /// takes a copy only when newer than the one it holds, refuses in root, and a
    /// deleted bucket's copy removes its record there.
    #[test]
    fn revisions_count_changes_and_only_newer_copies_are_taken() {
        let dir = tempfile::tempdir().unwrap();
        let root = store(dir.path(), "root.redb");
        let create = |bucket: &str| Command::CreateBucket {
            bucket: bucket.into(),
            created_ms: 1,
        };
        root.execute(&create("old")).unwrap();
        assert_eq!(copy_of(&root, "old").revision, 0);
        root.execute(&Command::SetClusterVersion { version: 9 })
            .unwrap();
        root.execute(&create("b")).unwrap();
        let first = copy_of(&root, "b");
        assert_eq!(first.revision, 1);
        root.execute(&Command::SetBucketVersioning {
            bucket: "b".into(),
            state: Versioning::Enabled,
        })
        .unwrap();
        let second = copy_of(&root, "b");
        assert_eq!(second.revision, 2);
        // A refused change counts nothing.
        assert!(root.execute(&create("b")).is_err());
        assert_eq!(copy_of(&root, "b").revision, 2);
        root.execute(&create("gone")).unwrap();
        root.execute(&Command::DeleteBucket {
            bucket: "gone".into(),
        })
        .unwrap();
        let all = root.bucket_copies().unwrap();
        let names: Vec<(&str, bool, u64)> = all
            .iter()
            .map(|c| (c.bucket.as_str(), c.record.is_some(), c.revision))
            .collect();
        assert_eq!(
            names,
            [("b", true, 2), ("gone", false, 2), ("old", true, 0)]
        );

        // Root refuses copies, as does a store with no ownership row (a single group).
        let copies = |c: &[BucketCopy]| Command::CopyBuckets { copies: c.to_vec() };
        assert!(matches!(
            root.execute(&copies(&all)),
            Err(crate::MetaError::InvalidCommand(_))
        ));
        let index = store(dir.path(), "index.redb");
        let (map, group) = ShardMap::single(vec![1])
            .unwrap()
            .split(ROOT, SplitAt::Key(IndexStart::new("b", "m")), vec![1])
            .unwrap();
        assert!(index.execute(&copies(&all)).is_err());
        index
            .execute(&Command::SetOwnership { group, map })
            .unwrap();
        // Newest first, then the older one: the newer stays.
        index
            .execute(&copies(std::slice::from_ref(&second)))
            .unwrap();
        index.execute(&copies(&[first])).unwrap();
        assert_eq!(copy_of(&index, "b"), second);
        assert_eq!(
            index.bucket("b").unwrap().unwrap().versioning,
            Versioning::Enabled
        );
        // A deleted bucket's copy removes it; revision 0 is taken when none is held.
        index.execute(&copies(&all)).unwrap();
        assert!(index.bucket("gone").unwrap().is_none());
        assert!(index.bucket("old").unwrap().is_some());
        assert_eq!(
            index.bucket_revisions().unwrap(),
            BTreeMap::from([("b".into(), 2), ("gone".into(), 2), ("old".into(), 0)])
        );
        // A record that does not decode, or too many copies, change nothing.
        let bad = BucketCopy {
            bucket: "bad".into(),
            record: Some(vec![0xee]),
            revision: 9,
            lifecycle: None,
        };
        assert!(index.execute(&copies(std::slice::from_ref(&bad))).is_err());
        assert!(index.bucket("bad").unwrap().is_none());
        let many = vec![copy_of(&root, "b"); COPIES_MAX + 1];
        assert!(index.execute(&copies(&many)).is_err());
        // The command and its table round-trip.
        let cmd = copies(&[bad]);
        let bytes = postcard::to_stdvec(&cmd).unwrap();
        assert_eq!(postcard::from_bytes::<Command>(&bytes).unwrap(), cmd);
        assert_eq!(cmd.format_version(), 9);
    }

    /// From format 11 a change of a bucket's lifecycle rules counts a revision in root (not
    /// before), and its copies carry the rules: an index group takes them into its own
    /// `lifecycle` table, keeps its sweep's cursors while the rules stay the same, restarts
    /// them when they change, and drops them with the rules or the bucket.
    #[test]
    fn copies_carry_the_lifecycle_rules_and_groups_keep_their_own_cursors() {
        use crate::lifecycle::{Expiration, LifecycleRule, RuleFilter};
        let dir = tempfile::tempdir().unwrap();
        let root = store(dir.path(), "root.redb");
        root.execute(&Command::SetClusterVersion { version: 10 })
            .unwrap();
        root.execute(&Command::CreateBucket {
            bucket: "b".into(),
            created_ms: 1,
        })
        .unwrap();
        let rule = |days| LifecycleRule {
            id: "r".into(),
            enabled: true,
            filter: RuleFilter::Prefix("logs/".into()),
            expiration: Some(Expiration::Days(days)),
            abort_upload_days: None,
            versions: Default::default(),
        };
        let set = |rules: Option<Vec<LifecycleRule>>| Command::SetBucketLifecycle {
            bucket: "b".into(),
            rules,
        };
        root.execute(&set(Some(vec![rule(1)]))).unwrap();
        assert_eq!(copy_of(&root, "b").revision, 1, "format 10 counts no rules");
        root.execute(&Command::SetClusterVersion { version: 11 })
            .unwrap();
        root.execute(&set(Some(vec![rule(2)]))).unwrap();
        let with_rules = copy_of(&root, "b");
        assert_eq!(with_rules.revision, 2);
        let carried = LifecycleRecord::decode(with_rules.lifecycle.as_deref().unwrap()).unwrap();
        assert_eq!(carried.rules, vec![rule(2)]);
        assert_eq!(root.bucket_copies().unwrap(), vec![with_rules.clone()]);

        let index = store(dir.path(), "index.redb");
        let (map, group) = ShardMap::single(vec![1])
            .unwrap()
            .split(ROOT, SplitAt::Key(IndexStart::new("b", "m")), vec![1])
            .unwrap();
        index
            .execute(&Command::SetOwnership { group, map })
            .unwrap();
        let take = |copies: Vec<BucketCopy>| {
            let lifecycles = copies.iter().map(|c| c.lifecycle.clone()).collect();
            index.execute(&Command::CopyBucketsWithRules { copies, lifecycles })
        };
        take(vec![with_rules.clone()]).unwrap();
        assert_eq!(index.lifecycle("b").unwrap().unwrap().rules, vec![rule(2)]);
        // The group's sweep moves its own cursor.
        let sweep = Command::ExpireObjects {
            bucket: "b".into(),
            objects: vec![],
            resume_after: Some("n".into()),
            day_secs: 1,
            now_secs: 1,
        };
        index.execute(&sweep).unwrap();
        let cursor = |s: &MetaStore| s.lifecycle("b").unwrap().unwrap().resume_after;
        assert_eq!(cursor(&index), Some("n".into()));
        // Another change of the bucket, the same rules: the cursor stays.
        root.execute(&Command::SetBucketCors {
            bucket: "b".into(),
            rules: None,
        })
        .unwrap();
        let cors = copy_of(&root, "b");
        assert_eq!(cors.revision, 3);
        take(vec![cors]).unwrap();
        assert_eq!(cursor(&index), Some("n".into()));
        // New rules restart it; an older copy arriving late changes nothing.
        root.execute(&set(Some(vec![rule(3)]))).unwrap();
        take(vec![copy_of(&root, "b")]).unwrap();
        assert_eq!(cursor(&index), None);
        take(vec![with_rules]).unwrap();
        assert_eq!(index.lifecycle("b").unwrap().unwrap().rules, vec![rule(3)]);
        // Copies and rules that differ in number, or rules that do not decode, change
        // nothing.
        root.execute(&set(None)).unwrap();
        let removed = copy_of(&root, "b");
        assert!(removed.lifecycle.is_none());
        let cmd = Command::CopyBucketsWithRules {
            copies: vec![removed.clone()],
            lifecycles: vec![],
        };
        assert!(index.execute(&cmd).is_err());
        let cmd = Command::CopyBucketsWithRules {
            copies: vec![removed.clone()],
            lifecycles: vec![Some(vec![0xee])],
        };
        assert!(index.execute(&cmd).is_err());
        assert!(index.lifecycle("b").unwrap().is_some());
        // Removed rules go, and so do a deleted bucket's.
        take(vec![removed]).unwrap();
        assert!(index.lifecycle("b").unwrap().is_none());
        root.execute(&set(Some(vec![rule(4)]))).unwrap();
        take(vec![copy_of(&root, "b")]).unwrap();
        assert!(index.lifecycle("b").unwrap().is_some());
        root.execute(&Command::DeleteBucket { bucket: "b".into() })
            .unwrap();
        take(vec![copy_of(&root, "b")]).unwrap();
        assert!(index.lifecycle("b").unwrap().is_none());
        assert!(index.bucket("b").unwrap().is_none());
        // The command round-trips, at format 11.
        let cmd = Command::CopyBucketsWithRules {
            copies: vec![copy_of(&root, "b")],
            lifecycles: vec![Some(carried.encode().unwrap())],
        };
        let bytes = postcard::to_stdvec(&cmd).unwrap();
        assert_eq!(postcard::from_bytes::<Command>(&bytes).unwrap(), cmd);
        assert_eq!(cmd.format_version(), 11);
    }
}
