//! Object and bucket tags and canned ACLs as the store serves them: a version's are read
//! with the version ([`crate::versions::Head`]) and written by their own command, or with
//! the write that makes the version (`meta::Command::Tagged`, `meta::Command::WithAcl`).

use meta::acl::CannedAcl;
use meta::extras::Extras;
use meta::tags::TagSet;
use meta::{Command, MetaError, TagsSet};

use crate::store::{ObjectStore, StoreError, parse_version_id};

impl ObjectStore {
    /// Replaces the tags of the version `version` names (the current one without an id;
    /// an empty set removes them); the version's id where the bucket has versioning. A
    /// missing key or version, or a delete marker, answers as a read of it does.
    pub async fn set_object_tags(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        tags: TagSet,
    ) -> Result<Option<String>, StoreError> {
        let id = version.map(parse_version_id).transpose()?;
        let cmd = Command::SetObjectTags {
            bucket: bucket.to_string(),
            key: key.to_string(),
            version: id,
            tags,
        };
        self.change_version(bucket, key, version, cmd).await
    }

    /// Sets the canned ACL of the version `version` names, as [`Self::set_object_tags`].
    pub async fn set_object_acl(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        acl: CannedAcl,
    ) -> Result<Option<String>, StoreError> {
        let id = version.map(parse_version_id).transpose()?;
        let cmd = Command::SetObjectAcl {
            bucket: bucket.to_string(),
            key: key.to_string(),
            version: id,
            acl,
        };
        self.change_version(bucket, key, version, cmd).await
    }

    /// Runs `cmd`, a change of one version's extras.
    async fn change_version(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        cmd: Command,
    ) -> Result<Option<String>, StoreError> {
        // S3's answers for what has nothing to change: NoSuchKey, NoSuchVersion, a
        // marker's MethodNotAllowed. The command checks again where it counts.
        self.head_at(bucket, key, version).await?;
        match self.replicas().call::<TagsSet>(cmd).await {
            Ok(set) => Ok(set.version_id),
            Err(MetaError::NoSuchKey) => Err(StoreError::NoSuchKey(key.to_string())),
            Err(MetaError::NoSuchVersion) => Err(StoreError::NoSuchVersion {
                key: key.to_string(),
                version_id: version.unwrap_or_default().to_string(),
            }),
            Err(e) => Err(StoreError::meta(e, bucket)),
        }
    }

    /// A bucket's tags (empty when it has none). Linearizable.
    pub async fn bucket_tags(&self, bucket: &str) -> Result<TagSet, StoreError> {
        self.bucket_extras(bucket).await.map(|e| e.tags)
    }

    /// A bucket's canned ACL. Linearizable.
    pub async fn bucket_acl(&self, bucket: &str) -> Result<CannedAcl, StoreError> {
        self.bucket_extras(bucket).await.map(|e| e.acl)
    }

    async fn bucket_extras(&self, bucket: &str) -> Result<Extras, StoreError> {
        let b = bucket.to_string();
        self.meta_read(move |m| m.bucket_extras(&b))
            .await
            .map_err(|e| match e {
                StoreError::Meta(e) => StoreError::meta(e, bucket),
                other => other,
            })
    }

    /// Sets a bucket's canned ACL.
    pub async fn set_bucket_acl(&self, bucket: &str, acl: CannedAcl) -> Result<(), StoreError> {
        let cmd = Command::SetBucketAcl {
            bucket: bucket.to_string(),
            acl,
        };
        self.execute(cmd)
            .await
            .map(drop)
            .map_err(|e| StoreError::meta(e, bucket))
    }

    /// Replaces a bucket's tags (an empty set removes them).
    pub async fn set_bucket_tags(&self, bucket: &str, tags: TagSet) -> Result<(), StoreError> {
        let cmd = Command::SetBucketTags {
            bucket: bucket.to_string(),
            tags,
        };
        self.execute(cmd)
            .await
            .map(drop)
            .map_err(|e| StoreError::meta(e, bucket))
    }
}
