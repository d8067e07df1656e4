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
//! since is at revision 0.
//!
//! [`Command::CopyBuckets`]: crate::Command::CopyBuckets

use std::collections::BTreeMap;

use redb::{ReadTransaction, ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::MetaError;
use crate::groups::ROOT;
use crate::tables::{BUCKETS, BucketRecord};

/// bucket -> revision: in root, its record's; in an index group, its copy's.
pub const BUCKET_REVISIONS: TableDefinition<&str, u64> = TableDefinition::new("bucket_revisions");

/// The format from which root counts revisions.
pub const REVISIONS_FORMAT: u32 = 9;

/// Bound on the copies one command carries.
pub const COPIES_MAX: usize = 256;

/// One bucket's record as root holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketCopy {
    pub bucket: String,
    /// The encoded [`BucketRecord`]; None: the bucket was deleted.
    pub record: Option<Vec<u8>>,
    pub revision: u64,
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
                });
            copy.revision = v.value();
        }
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

/// Applies `CopyBuckets` in an index group: each copy newer than the one held (or the
/// first) replaces it. Refused in root, whose records they are, and in a group that
/// has no ownership row (a single group is root). Answers how many were taken.
pub fn apply(txn: &WriteTransaction, copies: &[BucketCopy]) -> Result<u32, MetaError> {
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
    let mut revisions = txn.open_table(BUCKET_REVISIONS)?;
    let mut buckets = txn.open_table(BUCKETS)?;
    let mut taken = 0;
    for copy in copies {
        let held = revisions.get(copy.bucket.as_str())?.map(|v| v.value());
        if held.is_some_and(|held| held >= copy.revision) {
            continue;
        }
        match &copy.record {
            Some(bytes) => {
                BucketRecord::decode(bytes)?;
                buckets.insert(copy.bucket.as_str(), bytes.as_slice())?;
            }
            None => {
                buckets.remove(copy.bucket.as_str())?;
            }
        }
        revisions.insert(copy.bucket.as_str(), copy.revision)?;
        taken += 1;
    }
    Ok(taken)
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
}
