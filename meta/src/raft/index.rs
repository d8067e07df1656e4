//! The S3 index read by key through the shard map (`docs/scaling.md`, "index groups"):
//! each read goes to the group owning its (bucket, key), linearizable there (this node's
//! replica after its read barrier, or a replica elsewhere over [`Call::Read`]); a
//! listing walks the groups of its bucket in key order with one cursor
//! ([`crate::list::walk`]), each group reading its own interval only. A read routed by a
//! stale map is answered `Moved` by the group and asked again on the map root has
//! applied since.
//!
//! [`Call::Read`]: super::network::Call::Read

use super::replicas::{ReadAnswer, ReadQuery, Replicas};
use crate::MetaError;
use crate::checksums::UploadChecksums;
use crate::groups::{GroupId, ShardMap};
use crate::list::{self, ListPage, ListQuery, Span};
use crate::list_versions::{VersionsPage, VersionsQuery};
use crate::store::CurrentVersion;
use crate::store::UploadsPage;
use crate::store::index::{IndexAnswer, IndexQuery};
use crate::tables::{ObjectRecord, PartRecord, UploadRecord};
use crate::versions::{VersionId, VersionView};

/// An answer of another variant than the query's.
fn unexpected(answer: IndexAnswer) -> MetaError {
    MetaError::Unexpected(format!("an index read answered {answer:?}"))
}

impl Replicas {
    /// `query` in `group` as `map` places it.
    async fn index_in(
        &self,
        map: &ShardMap,
        group: GroupId,
        query: IndexQuery,
    ) -> Result<IndexAnswer, MetaError> {
        match self.read_in(map, group, ReadQuery::Index(query)).await? {
            ReadAnswer::Index(answer) => Ok(answer),
            other => Err(MetaError::Unexpected(format!(
                "an index read answered {other:?}"
            ))),
        }
    }

    /// `query`, about (`bucket`, `key`), in the group owning that key.
    async fn index_at(
        &self,
        bucket: &str,
        key: &str,
        query: IndexQuery,
    ) -> Result<IndexAnswer, MetaError> {
        let query = &query;
        self.on_the_map(|map| async move {
            let group = map.index_group(bucket, key);
            self.index_in(&map, group, query.clone()).await
        })
        .await
    }

    /// The current object at `bucket/key` (no version, tags or ACL).
    pub async fn object(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>, MetaError> {
        let query = IndexQuery::Object {
            bucket: bucket.into(),
            key: key.into(),
        };
        match self.index_at(bucket, key, query).await? {
            IndexAnswer::Object(found) => Ok(found),
            other => Err(unexpected(other)),
        }
    }

    /// What a GET of `bucket/key` without a version id finds.
    pub async fn current_version(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<CurrentVersion, MetaError> {
        let query = IndexQuery::Current {
            bucket: bucket.into(),
            key: key.into(),
        };
        match self.index_at(bucket, key, query).await? {
            IndexAnswer::Current(found) => Ok(found),
            other => Err(unexpected(other)),
        }
    }

    /// The version of `bucket/key` that `id` names.
    pub async fn version(
        &self,
        bucket: &str,
        key: &str,
        id: VersionId,
    ) -> Result<Option<VersionView>, MetaError> {
        let query = IndexQuery::Version {
            bucket: bucket.into(),
            key: key.into(),
            id,
        };
        match self.index_at(bucket, key, query).await? {
            IndexAnswer::Version(found) => Ok(found),
            other => Err(unexpected(other)),
        }
    }

    /// Upload `upload_id` of `bucket/key` (None if there is none, or it is another key's).
    pub async fn upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<Option<UploadRecord>, MetaError> {
        let query = IndexQuery::Upload {
            bucket: bucket.into(),
            key: key.into(),
            upload_id: upload_id.into(),
        };
        match self.index_at(bucket, key, query).await? {
            IndexAnswer::Upload(found) => Ok(found),
            other => Err(unexpected(other)),
        }
    }

    /// The parts of upload `upload_id` of `bucket/key`, by number.
    pub async fn parts(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<std::collections::BTreeMap<u32, PartRecord>, MetaError> {
        let query = IndexQuery::Parts {
            bucket: bucket.into(),
            key: key.into(),
            upload_id: upload_id.into(),
        };
        match self.index_at(bucket, key, query).await? {
            IndexAnswer::Parts(parts) => Ok(parts),
            other => Err(unexpected(other)),
        }
    }

    /// The checksum declaration and part checksums of upload `upload_id` of `bucket/key`.
    pub async fn upload_checksums(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<UploadChecksums, MetaError> {
        let query = IndexQuery::UploadChecksums {
            bucket: bucket.into(),
            key: key.into(),
            upload_id: upload_id.into(),
        };
        match self.index_at(bucket, key, query).await? {
            IndexAnswer::UploadChecksums(sums) => Ok(sums),
            other => Err(unexpected(other)),
        }
    }

    /// A page of ListObjects over every index group holding keys of `bucket`.
    pub async fn list_objects(
        &self,
        bucket: &str,
        query: &ListQuery,
    ) -> Result<ListPage, MetaError> {
        self.walk(
            bucket,
            query.start(),
            query.max(),
            |span| IndexQuery::List {
                bucket: bucket.into(),
                query: query.clone(),
                span,
            },
            |answer| match answer {
                IndexAnswer::List(page) => Ok(page),
                other => Err(unexpected(other)),
            },
        )
        .await
    }

    /// A page of ListObjectVersions over every index group holding keys of `bucket`.
    pub async fn list_versions(
        &self,
        bucket: &str,
        query: &VersionsQuery,
    ) -> Result<VersionsPage, MetaError> {
        let page = self
            .walk(
                bucket,
                query.start(),
                query.max(),
                |span| IndexQuery::Versions {
                    bucket: bucket.into(),
                    query: query.clone(),
                    span,
                },
                |answer| match answer {
                    IndexAnswer::Versions(page) => Ok(page),
                    other => Err(unexpected(other)),
                },
            )
            .await?;
        Ok(page.finish())
    }

    /// A page of ListMultipartUploads: at most `max` uploads of `bucket` under `prefix`
    /// after the (key, upload id) marker `after`, over every index group of the bucket.
    pub async fn uploads(
        &self,
        bucket: &str,
        prefix: &str,
        after: Option<(String, String)>,
        max: usize,
    ) -> Result<UploadsPage, MetaError> {
        let start = match &after {
            Some((key, _)) if key.as_str() >= prefix => list::Cursor::At(key.as_bytes().to_vec()),
            _ => list::Cursor::At(prefix.as_bytes().to_vec()),
        };
        let max = max.min(list::MAX_KEYS_LIMIT);
        let after = &after;
        self.walk(
            bucket,
            start,
            max,
            |span| IndexQuery::Uploads {
                bucket: bucket.into(),
                prefix: prefix.into(),
                after: after.clone(),
                span,
            },
            |answer| match answer {
                IndexAnswer::Uploads(page) => Ok(page),
                other => Err(unexpected(other)),
            },
        )
        .await
    }

    /// A page of at most `max` entries of `bucket` from `start`, walked over the index
    /// groups of the map root has applied; the walk starts over on a newer map if a
    /// group answers `Moved`.
    async fn walk<P: list::Walked>(
        &self,
        bucket: &str,
        start: list::Cursor,
        max: usize,
        query: impl Fn(Span) -> IndexQuery,
        page_of: impl Fn(IndexAnswer) -> Result<P, MetaError>,
    ) -> Result<P, MetaError> {
        let (start, query, page_of) = (&start, &query, &page_of);
        self.on_the_map(|map| async move {
            let span_of = |key: &[u8]| map.index_span(bucket, key);
            list::walk(start.clone(), max, span_of, |group, span| {
                let map = map.clone();
                async move { page_of(self.index_in(&map, group, query(span)).await?) }
            })
            .await
        })
        .await
    }
}
