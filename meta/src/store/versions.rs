//! Reads of object versions (see `docs/versions.md`): one version by id, and the versions
//! of one key, newest first.

use redb::{ReadTransaction, ReadableDatabase, ReadableTable};

use super::MetaStore;
use crate::MetaError;
use crate::acl::CannedAcl;
use crate::extras::{self, BUCKET_EXTRAS, Extras};
use crate::list_versions::{Tables, VersionsPage, VersionsQuery, list_versions};
use crate::tables::{BUCKETS, BucketRecord, NULL_VERSIONS, OBJECTS, ObjectRecord, VERSIONS};
use crate::tags::TagSet;
use crate::versions::{
    ObjectLock, VersionId, VersionRecord, VersionView, Versioning, decode_current_with,
    null_number, order_of,
};

/// What a GET or HEAD without a version id finds at a key.
// The object is the common answer: boxing it would add an allocation to every GET.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CurrentVersion {
    NoBucket,
    /// No version at all, or only noncurrent ones.
    Absent,
    /// `version_id` is given in a bucket that has (or had) versioning, as S3 sends it.
    Object {
        record: ObjectRecord,
        version_id: Option<String>,
        lock: ObjectLock,
        tags: TagSet,
        acl: CannedAcl,
    },
    /// The newest version is a delete marker: S3 answers 404 naming it.
    DeleteMarker {
        version_id: String,
    },
}

impl MetaStore {
    /// The current version of `bucket/key`, in one read transaction. An unversioned
    /// bucket costs one lookup more than [`MetaStore::object`]: its record's first byte.
    pub fn current_version(&self, bucket: &str, key: &str) -> Result<CurrentVersion, MetaError> {
        current_version_in(&self.db().begin_read()?, bucket, key)
    }

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
            let (record, stamp, extras) = decode_current_with(v.value())?;
            out.push(VersionView::current(record, stamp).with_extras(extras));
        }
        let table = txn.open_table(VERSIONS)?;
        for entry in table.range((bucket, k, 0)..=(bucket, k, u64::MAX))? {
            if out.len() >= limit {
                break;
            }
            let (_, v) = entry?;
            let latest = out.is_empty();
            let (entry, extras) = VersionRecord::decode_with(v.value())?;
            out.push(VersionView::of(entry, latest).with_extras(extras));
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
        version_in(&self.db().begin_read()?, bucket, key, id)
    }
}

impl MetaStore {
    /// A bucket's tags and ACL (none when it has none); NoSuchBucket when there is no
    /// bucket.
    pub fn bucket_extras(&self, bucket: &str) -> Result<Extras, MetaError> {
        let txn = self.db().begin_read()?;
        if txn.open_table(BUCKETS)?.get(bucket)?.is_none() {
            return Err(MetaError::NoSuchBucket);
        }
        extras::get(&txn.open_table(BUCKET_EXTRAS)?, "bucket_extras", bucket)
    }

    /// A bucket's tags (empty when it has none); NoSuchBucket when there is no bucket.
    pub fn bucket_tags(&self, bucket: &str) -> Result<TagSet, MetaError> {
        self.bucket_extras(bucket).map(|e| e.tags)
    }
}

impl MetaStore {
    /// Every `versions` entry (noncurrent object versions and delete markers), for fsck.
    pub fn for_each_version(
        &self,
        mut f: impl FnMut(&str, &str, VersionRecord),
    ) -> Result<(), MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(VERSIONS)?;
        for entry in table.iter()? {
            let (k, v) = entry?;
            let (bucket, key, _) = k.value();
            f(
                bucket,
                &String::from_utf8_lossy(key),
                VersionRecord::decode(v.value())?,
            );
        }
        Ok(())
    }
}

impl MetaStore {
    /// Up to `limit` entries of `bucket`'s `versions` table after `after` (key, number),
    /// in table order (key ascending, newest first): the lifecycle worker's version pass.
    pub fn versions_after(
        &self,
        bucket: &str,
        after: Option<(&str, u64)>,
        limit: usize,
    ) -> Result<Vec<(String, u64, VersionRecord)>, MetaError> {
        use std::ops::Bound;
        let txn = self.db().begin_read()?;
        let table = txn.open_table(VERSIONS)?;
        let start = match after {
            Some((key, number)) => Bound::Excluded((bucket, key.as_bytes(), order_of(number))),
            None => Bound::Included((bucket, &[][..], 0)),
        };
        let mut out = Vec::new();
        for entry in table.range::<(&str, &[u8], u64)>((start, Bound::Unbounded))? {
            let (k, v) = entry?;
            let (b, key, order) = k.value();
            if b != bucket || out.len() >= limit {
                break;
            }
            out.push((
                String::from_utf8_lossy(key).into_owned(),
                u64::MAX - order,
                VersionRecord::decode(v.value())?,
            ));
        }
        Ok(out)
    }
}

impl MetaStore {
    /// One page of ListObjectVersions, in one read transaction.
    pub fn list_versions(
        &self,
        bucket: &str,
        query: &VersionsQuery,
    ) -> Result<VersionsPage, MetaError> {
        let txn = self.db().begin_read()?;
        let tables = Tables {
            objects: txn.open_table(OBJECTS)?,
            versions: txn.open_table(VERSIONS)?,
            null_versions: txn.open_table(NULL_VERSIONS)?,
        };
        list_versions(&tables, bucket, query)
    }
}

/// The current version of `bucket/key` as `txn` sees it.
pub(crate) fn current_version_in(
    txn: &ReadTransaction,
    bucket: &str,
    key: &str,
) -> Result<CurrentVersion, MetaError> {
    let versioning = match txn.open_table(BUCKETS)?.get(bucket)? {
        Some(v) => BucketRecord::versioning_of(v.value())?,
        None => return Ok(CurrentVersion::NoBucket),
    };
    let k = key.as_bytes();
    if let Some(v) = txn.open_table(OBJECTS)?.get((bucket, k))? {
        let (record, stamp, extras) = decode_current_with(v.value())?;
        let version_id = (versioning != Versioning::Unversioned).then(|| stamp.id(record.magic));
        return Ok(CurrentVersion::Object {
            record,
            version_id,
            lock: stamp.lock,
            tags: extras.tags,
            acl: extras.acl,
        });
    }
    if versioning == Versioning::Unversioned {
        return Ok(CurrentVersion::Absent);
    }
    let table = txn.open_table(VERSIONS)?;
    let newest = table.range((bucket, k, 0)..=(bucket, k, u64::MAX))?.next();
    match newest {
        Some(entry) => match VersionRecord::decode(entry?.1.value())? {
            marker @ VersionRecord::DeleteMarker { .. } => Ok(CurrentVersion::DeleteMarker {
                version_id: marker.stamp().id(marker.magic()),
            }),
            VersionRecord::Object { .. } => Ok(CurrentVersion::Absent),
        },
        None => Ok(CurrentVersion::Absent),
    }
}

/// The version of `bucket/key` that `id` names as `txn` sees it.
pub(crate) fn version_in(
    txn: &ReadTransaction,
    bucket: &str,
    key: &str,
    id: VersionId,
) -> Result<Option<VersionView>, MetaError> {
    let k = key.as_bytes();
    let current = match txn.open_table(OBJECTS)?.get((bucket, k))? {
        Some(v) => Some(decode_current_with(v.value())?),
        None => None,
    };
    if let Some((record, stamp, _)) = &current
        && id.names(*stamp, Some(record.magic))
    {
        return Ok(current.map(|(r, s, e)| VersionView::current(r, s).with_extras(e)));
    }
    let number = match id {
        VersionId::Numbered { number, .. } => number,
        VersionId::Null => match null_number(&txn.open_table(NULL_VERSIONS)?, bucket, key)? {
            Some(number) => number,
            None => return Ok(None),
        },
    };
    let table = txn.open_table(VERSIONS)?;
    let (entry, extras) = match table.get((bucket, k, order_of(number)))? {
        Some(v) => VersionRecord::decode_with(v.value())?,
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
    Ok(Some(VersionView::of(entry, latest).with_extras(extras)))
}
