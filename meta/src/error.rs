//! The metadata's one error type, and the conversions from redb's errors.

/// Serializable: a command's error travels back from the leader to the node that
/// forwarded it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum MetaError {
    #[error("no such bucket")]
    NoSuchBucket,
    #[error("bucket already exists")]
    BucketExists,
    #[error("bucket is not empty")]
    BucketNotEmpty,
    #[error("no such disk pair")]
    NoPair,
    #[error("no such key")]
    NoSuchKey,
    #[error("no such upload")]
    NoSuchUpload,
    #[error("precondition failed")]
    PreconditionFailed,
    #[error("invalid part: {0}")]
    InvalidPart(String),
    #[error("content not found")]
    NotFound,
    #[error("reference count would overflow")]
    RefsOverflow,
    #[error("corrupt metadata record: {0}")]
    Corrupt(String),
    #[error("metadata storage: {0}")]
    Storage(String),
    /// The cluster cannot decide now (no leader, no quorum, leader unreachable): retry
    /// later. The command may or may not be applied later; it was not acknowledged.
    #[error("metadata unavailable: {0}")]
    Unavailable(String),
    /// A command was answered with the response of another command: a bug, found by the
    /// typed calls ([`crate::calls`]).
    #[error("unexpected {0}")]
    Unexpected(String),
    /// `CreateOwnedBucket` of a name another key owns.
    #[error("bucket is owned by another key")]
    BucketOwnedByAnother,
    #[error("no such access key")]
    NoSuchAccessKey,
    #[error("access key already exists")]
    AccessKeyExists,
    /// A bound of the keys table ([`crate::keys::KEYS_MAX`], [`crate::keys::GRANTS_PER_KEY_MAX`]).
    #[error("{0}")]
    KeyLimit(String),
    /// A command that no caller of this version builds (a key outside a job's chunk).
    #[error("invalid command: {0}")]
    InvalidCommand(String),
    /// A version id that names no version of the key (format 4: only commands of that
    /// format answer it).
    #[error("no such version")]
    NoSuchVersion,
    /// The version is under object lock (a retention or legal hold that holds now), or a
    /// retention change the lock does not allow (format 4).
    #[error("the object version is locked")]
    ObjectLocked,
    /// The bucket has no object lock (a lock asked of a version there), or it does and
    /// versioning cannot be suspended (format 4).
    #[error("{0}")]
    InvalidBucketState(String),
    /// A shard map change planned from another map than the stored one (format 5).
    #[error("shard map version {given} does not follow the stored version {have}")]
    ShardMapVersion { have: u64, given: u64 },
    /// A `RefInc` of a reference already released: its index entry must not be written
    /// (format 5).
    #[error("the reference was released")]
    RefReleased,
    /// A `RefInc` past its deadline: the reconciler may already be settling it (format 5).
    #[error("the reference's deadline has passed")]
    RefPastDeadline,
    /// A command about a sha1 this group does not own (`ownership.rs`): the caller's map
    /// is older than `map_version`, the one the group owns under; refresh it and retry
    /// (format 6).
    #[error("the range moved (shard map version {map_version})")]
    Moved { map_version: u64 },
    /// A `ForeignRef` whose reference the reconciler fenced: the entry must never be
    /// written, and the reference is being released (format 6).
    #[error("the reference was fenced")]
    Fenced,
}

/// `From` every redb error type into `$target::$variant(String)`: the metadata's and the
/// snapshot file's errors keep redb's message, never its types.
macro_rules! from_redb_errors {
    ($target:ident :: $variant:ident) => {
        $crate::error::from_redb_errors!(@each $target $variant:
            redb::Error,
            redb::DatabaseError,
            redb::TransactionError,
            redb::TableError,
            redb::StorageError,
            redb::CommitError,
            redb::SetDurabilityError
        );
    };
    (@each $target:ident $variant:ident: $($t:ty),*) => {$(
        impl From<$t> for $target {
            fn from(e: $t) -> Self {
                $target::$variant(e.to_string())
            }
        }
    )*};
}
pub(crate) use from_redb_errors;

from_redb_errors!(MetaError::Storage);
