//! Object versions as the store serves them (see `docs/versions.md`): the current version
//! with its id, one version by id, the removal of one version, ListObjectVersions pages
//! and a bucket's versioning state.

use meta::acl::CannedAcl;
use meta::command::LockChange;
use meta::list_versions::{VersionsPage, VersionsQuery};
use meta::tags::TagSet;
use meta::versions::{LockConfig, ObjectLock, Versioning};
use meta::{Command, CurrentVersion, Deleted, MetaError, ObjectRecord};

use crate::store::{ObjectStore, StoreError, now_secs, parse_version_id};

/// A version as a read finds it: its record, its id where the bucket has versioning, its
/// object lock and its tags.
#[derive(Clone, Debug)]
pub struct Head {
    pub record: ObjectRecord,
    pub version_id: Option<String>,
    pub lock: ObjectLock,
    pub tags: TagSet,
    pub acl: CannedAcl,
}

impl ObjectStore {
    /// The current version of `bucket/key` and its id (in a versioned bucket), or
    /// NoSuchBucket, NoSuchKey, or [`StoreError::CurrentIsDeleteMarker`]. Linearizable.
    pub async fn head_current(&self, bucket: &str, key: &str) -> Result<Head, StoreError> {
        let found = self.replicas().current_version(bucket, key).await?;
        match found {
            CurrentVersion::Object {
                record,
                version_id,
                lock,
                tags,
                acl,
            } => Ok(Head {
                record,
                version_id,
                lock,
                tags,
                acl,
            }),
            CurrentVersion::NoBucket => Err(StoreError::NoSuchBucket(bucket.to_string())),
            CurrentVersion::Absent => Err(StoreError::NoSuchKey(key.to_string())),
            CurrentVersion::DeleteMarker { version_id } => Err(StoreError::CurrentIsDeleteMarker {
                key: key.to_string(),
                version_id,
            }),
        }
    }

    /// The version of `bucket/key` that `id` names, with its id; NoSuchVersion when there
    /// is none, [`StoreError::VersionIsDeleteMarker`] for a marker. Linearizable.
    pub async fn head_version(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
    ) -> Result<Head, StoreError> {
        let version = parse_version_id(id)?;
        let found = self
            .replicas()
            .version(bucket, key, version)
            .await
            .map_err(|e| StoreError::meta(e, bucket))?;
        if found.is_none() {
            // Tell a missing bucket from a missing version.
            self.bucket(bucket).await?;
        }
        let no_such_version = || StoreError::NoSuchVersion {
            key: key.to_string(),
            version_id: id.to_string(),
        };
        let view = found.ok_or_else(no_such_version)?;
        let version_id = view.id();
        match view.record {
            Some(record) => Ok(Head {
                record,
                version_id: Some(version_id),
                lock: view.stamp.lock,
                tags: view.tags,
                acl: view.acl,
            }),
            None => Err(StoreError::VersionIsDeleteMarker {
                version_id,
                created_ms: view.created_ms,
            }),
        }
    }

    /// Removes the version of `bucket/key` that `id` names (releasing its content once);
    /// the next newest becomes current. NoSuchVersion when there is none.
    pub async fn delete_version(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        bypass_governance: bool,
    ) -> Result<Deleted, StoreError> {
        let version = parse_version_id(id)?;
        let cmd = Command::DeleteVersion {
            bucket: bucket.to_string(),
            key: key.to_string(),
            version,
            now_secs: now_secs(),
            bypass_governance,
        };
        match self.replicas().call::<Deleted>(cmd).await {
            Ok(deleted) => Ok(deleted),
            // S3 answers a DELETE of a version that does not exist with 204 (it is gone,
            // which is what the client wants), naming the id it was asked for.
            Err(MetaError::NoSuchVersion) => Ok(Deleted {
                version_id: Some(id.to_string()),
                marker: false,
            }),
            Err(e) => Err(StoreError::meta(e, bucket)),
        }
    }

    /// One page of ListObjectVersions (linearizable).
    pub async fn list_versions(
        &self,
        bucket: &str,
        query: VersionsQuery,
    ) -> Result<VersionsPage, StoreError> {
        self.bucket(bucket).await?;
        self.replicas()
            .list_versions(bucket, &query)
            .await
            .map_err(|e| StoreError::meta(e, bucket))
    }

    /// The bucket's versioning state.
    pub async fn versioning(&self, bucket: &str) -> Result<Versioning, StoreError> {
        Ok(self.bucket(bucket).await?.versioning)
    }

    /// Sets the bucket's versioning: Enabled or Suspended (never back to unversioned).
    pub async fn set_versioning(&self, bucket: &str, state: Versioning) -> Result<(), StoreError> {
        if state == Versioning::Unversioned {
            return Err(StoreError::IllegalVersioning(
                "a bucket cannot return to unversioned".to_string(),
            ));
        }
        let cmd = Command::SetBucketVersioning {
            bucket: bucket.to_string(),
            state,
        };
        self.execute(cmd)
            .await
            .map(drop)
            .map_err(|e| StoreError::meta(e, bucket))
    }
}

impl ObjectStore {
    /// The version a read names: the one `version` names, else the current one; with
    /// its id where the bucket has versioning.
    pub async fn head_at(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
    ) -> Result<Head, StoreError> {
        match version {
            Some(id) => self.head_version(bucket, key, id).await,
            None => self.head_current(bucket, key).await,
        }
    }

    /// Creates a bucket with object lock (and versioning) enabled for good.
    pub async fn create_locked_bucket(
        &self,
        bucket: &str,
        owner: Option<String>,
        acl: CannedAcl,
    ) -> Result<(), StoreError> {
        let cmd = Command::CreateLockedBucket {
            bucket: bucket.to_string(),
            created_ms: crate::store::now_ms(),
            owner,
        };
        let cmd = Command::with_acl(bucket, "", acl, cmd);
        self.execute(cmd)
            .await
            .map(drop)
            .map_err(|e| StoreError::meta(e, bucket))
    }

    /// `PutObjectLockConfiguration`.
    pub async fn set_lock_config(
        &self,
        bucket: &str,
        config: LockConfig,
    ) -> Result<(), StoreError> {
        let cmd = Command::SetObjectLockConfig {
            bucket: bucket.to_string(),
            config,
        };
        self.execute(cmd)
            .await
            .map(drop)
            .map_err(|e| StoreError::meta(e, bucket))
    }

    /// `PutObjectRetention` / `PutObjectLegalHold` on a version (the current one without
    /// an id).
    pub async fn set_object_lock(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        change: LockChange,
        bypass_governance: bool,
    ) -> Result<(), StoreError> {
        let version = version.map(parse_version_id).transpose()?;
        let cmd = Command::SetObjectLock {
            bucket: bucket.to_string(),
            key: key.to_string(),
            version,
            change,
            bypass_governance,
            now_ms: crate::store::now_ms(),
        };
        match self.execute(cmd).await {
            Ok(_) => Ok(()),
            Err(MetaError::NoSuchKey) => Err(StoreError::NoSuchKey(key.to_string())),
            Err(MetaError::NoSuchVersion) => Err(StoreError::NoSuchVersion {
                key: key.to_string(),
                version_id: version.map_or_else(String::new, |_| "?".to_string()),
            }),
            Err(e) => Err(StoreError::meta(e, bucket)),
        }
    }
}
