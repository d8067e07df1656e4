//! Typed metadata calls: each builds its [`Command`], runs it in its group through
//! [`Replicas::execute`] (or [`Replicas::execute_at`], a write of a key) and hands back
//! the answer its callers use.
//!
//! `execute` answers a [`Response`], one enum for every command, so that the Raft log and
//! the forwarding between nodes carry a single type. A caller of one command can only get
//! that command's variant, but the type does not say so; these calls are the one place
//! that turns "another variant" into an error ([`MetaError::Unexpected`]) instead of
//! every caller matching it.

use placement::{Magic, PairId, PairRecord, Sha1};

use super::MetaError;
use super::command::{Command, DecOutcome, DeleteOutcome, Response, WritePrecondition};
use super::raft::Replicas;
use super::tables::{FileRecord, ObjectRecord};

/// `PutObject`, `CopyObject` or `CompleteUpload` stored the object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectPut {
    /// The sequence number the object was stored under.
    pub seq: u64,
    /// The object it overwrote.
    pub replaced: Option<ObjectRecord>,
    /// What happened to the overwritten object's content.
    pub released: Option<DecOutcome>,
    /// The new version's id, in a versioned bucket (where nothing is overwritten).
    pub version_id: Option<String>,
}

/// What a DELETE of a key (`DeleteObject`) or of one version (`DeleteVersion`) did, as
/// S3 reports it: the version it added or removed, and whether that is a delete marker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Deleted {
    /// None in an unversioned bucket (nothing to name).
    pub version_id: Option<String>,
    pub marker: bool,
}

impl Answer for Deleted {
    fn take(response: Response) -> Result<Self, MetaError> {
        match response {
            Response::ObjectDeleted { .. } => Ok(Deleted::default()),
            Response::MarkerAdded { version_id } => Ok(Deleted {
                version_id: Some(version_id),
                marker: true,
            }),
            Response::VersionDeleted { version_id, marker } => Ok(Deleted {
                version_id: Some(version_id),
                marker,
            }),
            other => Err(unexpected(other)),
        }
    }
}

/// `PutPart` stored the part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartPut;

/// `SetObjectTags` (or `SetObjectAcl`) changed a version: its id, in a bucket with
/// versioning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TagsSet {
    pub version_id: Option<String>,
}

impl Answer for TagsSet {
    fn take(response: Response) -> Result<Self, MetaError> {
        match response {
            Response::TagsSet { version_id } | Response::AclSet { version_id } => {
                Ok(TagsSet { version_id })
            }
            other => Err(unexpected(other)),
        }
    }
}

/// The answer of a command that references content it expects to exist
/// ([`super::ContentSource::Existing`]): that content may have gone since the caller
/// looked, which is no error but a reason to store the content and try again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Referenced<T> {
    Done(T),
    ContentGone,
}

/// The answer of a command, taken out of its [`Response`]: implemented by the answers of
/// the commands that a caller may run on content ([`Metadata::referencing`]), where one
/// generic call serves several commands.
pub trait Answer: Sized {
    /// Fails with [`MetaError::Unexpected`] when the response belongs to another command.
    fn take(response: Response) -> Result<Self, MetaError>;
}

impl Answer for ObjectPut {
    fn take(response: Response) -> Result<Self, MetaError> {
        match response {
            Response::ObjectPut {
                seq,
                replaced,
                released,
            } => Ok(ObjectPut {
                seq,
                replaced,
                released,
                version_id: None,
            }),
            Response::VersionStored { seq, version_id } => Ok(ObjectPut {
                seq,
                replaced: None,
                released: None,
                version_id: Some(version_id),
            }),
            other => Err(unexpected(other)),
        }
    }
}

impl Answer for PartPut {
    fn take(response: Response) -> Result<Self, MetaError> {
        match response {
            Response::PartPut => Ok(PartPut),
            other => Err(unexpected(other)),
        }
    }
}

/// `Inc` and `InsertOrInc`: the content's record after the increment.
impl Answer for FileRecord {
    fn take(response: Response) -> Result<Self, MetaError> {
        match response {
            Response::File(f) => Ok(f),
            other => Err(unexpected(other)),
        }
    }
}

/// A command answered with a response of another command: a bug in `apply`, reported as
/// a metadata failure.
fn unexpected(response: Response) -> MetaError {
    MetaError::Unexpected(format!("{response:?}"))
}

impl Replicas {
    /// Runs `cmd`, whose answer is a `T`.
    pub async fn call<T: Answer>(&self, cmd: Command) -> Result<T, MetaError> {
        T::take(self.execute(cmd).await?)
    }

    /// Runs `cmd`, a write of `bucket`/`key`, whose answer is a `T`.
    pub async fn call_at<T: Answer>(
        &self,
        bucket: &str,
        key: &str,
        cmd: Command,
    ) -> Result<T, MetaError> {
        T::take(self.execute_at(bucket, key, cmd).await?)
    }

    /// Runs `cmd`, a command that references content it may expect to exist: a write of
    /// the key `at` (`PutObject`, `CopyObject`, `PutPart`, `CompleteUpload`), or with no
    /// key a FileDB command (`Inc`, `InsertOrInc`). Its answer is a `T` unless the content
    /// has gone.
    pub async fn referencing<T: Answer>(
        &self,
        at: Option<(&str, &str)>,
        cmd: Command,
    ) -> Result<Referenced<T>, MetaError> {
        let response = match at {
            Some((bucket, key)) => self.execute_at(bucket, key, cmd).await?,
            None => self.execute(cmd).await?,
        };
        match response {
            Response::ContentGone => Ok(Referenced::ContentGone),
            other => T::take(other).map(Referenced::Done),
        }
    }

    /// The article's `inc`: fails with [`MetaError::NotFound`] when the content is absent.
    pub async fn inc(&self, sha1: Sha1, magic: Magic) -> Result<FileRecord, MetaError> {
        self.call(Command::Inc { sha1, magic }).await
    }

    /// Inserts the content's record, or increments it if it exists.
    pub async fn insert_or_inc(
        &self,
        sha1: Sha1,
        magic: Magic,
        pair: PairId,
    ) -> Result<FileRecord, MetaError> {
        self.call(Command::InsertOrInc { sha1, magic, pair }).await
    }

    /// The article's `dec`.
    pub async fn dec(
        &self,
        sha1: Sha1,
        magic: Magic,
        now_secs: u64,
    ) -> Result<DecOutcome, MetaError> {
        match self
            .execute(Command::Dec {
                sha1,
                magic,
                now_secs,
            })
            .await?
        {
            Response::Dec(outcome) => Ok(outcome),
            other => Err(unexpected(other)),
        }
    }

    /// Switches the content's record from pair `from` to `to`; whether it still named
    /// `from` and was switched.
    pub async fn relocate(&self, sha1: Sha1, from: PairId, to: PairId) -> Result<bool, MetaError> {
        match self.execute(Command::Relocate { sha1, from, to }).await? {
            Response::Relocated(done) => Ok(done),
            other => Err(unexpected(other)),
        }
    }

    /// Removes keys of a bucket; for each key, whether it existed.
    pub async fn delete_objects(
        &self,
        bucket: String,
        keys: Vec<String>,
        now_secs: u64,
    ) -> Result<Vec<bool>, MetaError> {
        self.split_by_index_group(
            &bucket.clone(),
            keys,
            String::as_str,
            |keys| Command::DeleteObjects {
                bucket: bucket.clone(),
                keys,
                now_secs,
            },
            |answer| match answer {
                Response::ObjectsDeleted(existed) => Ok(existed),
                other => Err(unexpected(other)),
            },
        )
        .await
    }

    /// Removes keys of a bucket, each only if its condition (if any) holds; what happened
    /// to each key.
    pub async fn delete_objects_matching(
        &self,
        bucket: String,
        objects: Vec<(String, Option<WritePrecondition>)>,
        now_secs: u64,
    ) -> Result<Vec<DeleteOutcome>, MetaError> {
        self.split_by_index_group(
            &bucket.clone(),
            objects,
            |(key, _)| key.as_str(),
            |objects| Command::DeleteObjectsMatching {
                bucket: bucket.clone(),
                objects,
                now_secs,
            },
            |answer| match answer {
                Response::ObjectsDeletedMatching(outcomes) => Ok(outcomes),
                other => Err(unexpected(other)),
            },
        )
        .await
    }

    /// Runs a pair command (`AddPair`, `SetPairFlags`); the pair's id and record after it.
    pub async fn change_pair(&self, cmd: Command) -> Result<(PairId, PairRecord), MetaError> {
        match self.execute(cmd).await? {
            Response::Pair(id, record) => Ok((id, record)),
            other => Err(unexpected(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_commands_response_is_an_error_worded_as_before() {
        let e = PartPut::take(Response::Done).unwrap_err();
        assert_eq!(e, MetaError::Unexpected("Done".into()));
        assert_eq!(e.to_string(), "unexpected Done");
        assert!(matches!(
            ObjectPut::take(Response::ContentGone),
            Err(MetaError::Unexpected(_))
        ));
        assert_eq!(
            ObjectPut::take(Response::ObjectPut {
                seq: 7,
                replaced: None,
                released: None,
            }),
            Ok(ObjectPut {
                seq: 7,
                replaced: None,
                released: None,
                version_id: None,
            })
        );
    }
}
