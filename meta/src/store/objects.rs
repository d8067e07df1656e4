//! Reads of the buckets and of the S3 index (`objects`).

use redb::{ReadTransaction, ReadableDatabase, ReadableTable};

use std::collections::BTreeMap;

use super::MetaStore;
use crate::bucket_copies::{self, BucketCopy};
use crate::tables::{BUCKETS, BucketRecord, OBJECTS, ObjectRecord};
use crate::{ListPage, ListQuery, MetaError, list};

impl MetaStore {
    pub fn bucket(&self, name: &str) -> Result<Option<BucketRecord>, MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(BUCKETS)?;
        match table.get(name)? {
            Some(v) => Ok(Some(BucketRecord::decode(v.value())?)),
            None => Ok(None),
        }
    }

    pub fn buckets(&self) -> Result<Vec<(String, BucketRecord)>, MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(BUCKETS)?;
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (k, v) = entry?;
            out.push((k.value().to_string(), BucketRecord::decode(v.value())?));
        }
        Ok(out)
    }

    pub fn object(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>, MetaError> {
        object_in(&self.db().begin_read()?, bucket, key)
    }

    /// `bucket`'s record and revision, for its index groups.
    pub fn bucket_copy(&self, bucket: &str) -> Result<BucketCopy, MetaError> {
        bucket_copies::read(&self.db().begin_read()?, bucket)
    }

    /// Every bucket's record and revision (the deleted ones' too).
    pub fn bucket_copies(&self) -> Result<Vec<BucketCopy>, MetaError> {
        bucket_copies::read_all(&self.db().begin_read()?)
    }

    /// The revision of every bucket copy this (index) group holds.
    pub fn bucket_revisions(&self) -> Result<BTreeMap<String, u64>, MetaError> {
        bucket_copies::revisions(&self.db().begin_read()?)
    }

    /// One page of a bucket listing.
    pub fn list_objects(&self, bucket: &str, query: &ListQuery) -> Result<ListPage, MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(OBJECTS)?;
        list::list(&table, bucket, query)
    }

    /// Calls `f` with every object (bucket, key, record).
    pub fn for_each_object(
        &self,
        mut f: impl FnMut(&str, &str, ObjectRecord),
    ) -> Result<(), MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(OBJECTS)?;
        for entry in table.iter()? {
            let (k, v) = entry?;
            let (bucket, key) = k.value();
            let record: ObjectRecord = crate::versions::decode_object(v.value())?;
            f(bucket, &String::from_utf8_lossy(key), record);
        }
        Ok(())
    }

    /// Up to `limit` keys of `bucket` under `prefix` after `cursor`, in order.
    pub fn keys_after(
        &self,
        bucket: &str,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(OBJECTS)?;
        let start = cursor.unwrap_or(prefix);
        let mut out = Vec::new();
        for entry in table.range((bucket, start.as_bytes())..)? {
            let (k, _) = entry?;
            let (b, key) = k.value();
            if b != bucket || !key.starts_with(prefix.as_bytes()) || out.len() >= limit {
                break;
            }
            if cursor.is_some_and(|c| key == c.as_bytes()) {
                continue;
            }
            // Keys are stored as the S3 key's bytes, always valid UTF-8.
            out.push(String::from_utf8_lossy(key).into_owned());
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
                crate::versions::decode_object(v.value())?,
            ));
        }
        Ok(out)
    }
}

/// The current object at `bucket/key` as `txn` sees it.
pub(crate) fn object_in(
    txn: &ReadTransaction,
    bucket: &str,
    key: &str,
) -> Result<Option<ObjectRecord>, MetaError> {
    let table = txn.open_table(OBJECTS)?;
    match table.get((bucket, key.as_bytes()))? {
        Some(v) => Ok(Some(crate::versions::decode_object(v.value())?)),
        None => Ok(None),
    }
}
