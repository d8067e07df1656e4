//! What can go wrong in the object store, in the store's own terms.
//!
//! The store speaks no wire format: the S3 layer turns a [`StoreError`] into S3's XML error
//! (`impl From<StoreError> for S3Error` in `s3/error.rs`, the one place that knows the
//! codes), the native and admin APIs into their JSON answers. Variants that a client caused
//! name what was wrong with the request; the others (`Meta`, `Write`, `Read`, `Internal`)
//! carry the failure for the log, and every front end answers them as its internal error.

use placement::write::WriteError;
use placement::{PairId, Sha1, read};

use meta::MetaError;

/// S3's bounds on parts (the errors below name them).
pub const PART_NUMBER_MAX: u32 = 10_000;
pub const PART_BYTES_MIN: u64 = 5 * 1024 * 1024;

/// Why stored content could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ContentReadError {
    #[error("no FileDB record for {0}")]
    NoRecord(Sha1),
    #[error("{0} is not in PairDB")]
    NoPair(PairId),
    #[error(transparent)]
    NoGoodCopy(#[from] read::ReadError),
    #[error(transparent)]
    Meta(#[from] MetaError),
    /// The read memory budget stayed full for [`READ_BUDGET_WAIT_SECS`](super::READ_BUDGET_WAIT_SECS): a retry may
    /// succeed.
    #[error("too many reads in flight")]
    Busy,
}

/// Why an object store call failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("no such bucket {0}")]
    NoSuchBucket(String),
    /// The caller's own bucket already has this name.
    #[error("bucket {0} already exists")]
    BucketExists(String),
    /// Another access key owns a bucket of this name.
    #[error("bucket {0} belongs to another key")]
    BucketTaken(String),
    #[error("bucket {0} is not empty")]
    BucketNotEmpty(String),
    /// The key (or, for a copy, the source) that is not there.
    #[error("no such key {0}")]
    NoSuchKey(String),
    #[error("no such multipart upload")]
    NoSuchUpload,
    /// No disk pair with this id (or no id left for a new one).
    #[error("no such pair")]
    NoSuchPair,
    /// A conditional write's condition did not hold.
    #[error("precondition failed")]
    PreconditionFailed,
    #[error("object key is empty")]
    EmptyKey,
    #[error("object key is longer than {max_bytes} bytes")]
    KeyTooLong { max_bytes: usize },
    #[error("user metadata is larger than {max_bytes} bytes")]
    MetadataTooLarge { max_bytes: usize },
    #[error("object is larger than {max_bytes} bytes")]
    EntityTooLarge { max_bytes: u64 },
    /// The body was shorter or longer than the size the client announced.
    #[error("body length differs from the announced size")]
    IncompleteBody,
    /// The body does not have the MD5 the client announced (`Content-MD5`).
    #[error("body does not match its Content-MD5")]
    Md5Mismatch,
    /// The byte range asked of this key lies outside the object.
    #[error("range not satisfiable for {0}")]
    InvalidRange(String),
    #[error("part number {0} is outside 1..={PART_NUMBER_MAX}")]
    PartNumberOutOfRange(u32),
    /// A multipart upload completed with an empty list of parts.
    #[error("no parts named")]
    NoPartsNamed,
    #[error("parts not in ascending order")]
    PartsOutOfOrder,
    /// A part named at completion was not uploaded, or has another ETag.
    #[error("part {0} not uploaded with that ETag")]
    InvalidPart(u32),
    /// A multipart checksum that does not fit the upload's declaration (another
    /// algorithm, a part checksum missing at completion): S3's InvalidRequest.
    #[error("{0}")]
    ChecksumInvalid(String),
    /// The full-object checksum sent at completion is not the object's: BadDigest.
    #[error("{0}")]
    ChecksumMismatch(String),
    /// A part other than the last is smaller than S3's minimum.
    #[error("part {0} is smaller than {PART_BYTES_MIN} bytes")]
    PartTooSmall(u32),
    /// No disk pair takes writes now: a retry may succeed.
    #[error("no writable disk pair has room")]
    NoWritablePair,
    /// What a read or copy found changed under it: the content of the record it had read
    /// was released (an overwrite or delete committed in between), or the copy source was
    /// replaced before the copy's command. Reading the key again gives the new answer;
    /// handlers do so a bounded number of times (see `READ_RACE_ATTEMPTS`).
    #[error("{0} changed while it was read")]
    Raced(String),
    /// A version id that no version can have (not `null`, not this gateway's form).
    #[error("invalid version id {0:?}")]
    InvalidVersionId(String),
    /// The key has no version with this id (perhaps never, perhaps deleted).
    #[error("no version {version_id} of {key}")]
    NoSuchVersion { key: String, version_id: String },
    /// The key's current version is a delete marker: S3's 404 names it.
    #[error("the current version of {key} is delete marker {version_id}")]
    CurrentIsDeleteMarker { key: String, version_id: String },
    /// The version asked for by id is a delete marker, which has no content.
    #[error("version {version_id} is a delete marker")]
    VersionIsDeleteMarker { version_id: String, created_ms: u64 },
    /// The version is under object lock (or the retention change is not allowed).
    #[error("the object version is locked")]
    ObjectLocked,
    /// The bucket's state refuses the request (object lock present, or missing).
    #[error("{0}")]
    InvalidBucketState(String),
    /// A versioning change S3 does not allow (or this gateway does not yet support).
    #[error("{0}")]
    IllegalVersioning(String),
    /// Too many reads in flight hold the read memory budget: a retry may succeed.
    #[error("too many reads in flight")]
    SlowDown,
    /// The metadata cluster cannot decide now (no leader, no quorum): a retry may
    /// succeed. Nothing was acknowledged.
    #[error("metadata unavailable: {0}")]
    Unavailable(String),
    #[error(transparent)]
    Meta(MetaError),
    #[error(transparent)]
    Write(WriteError),
    #[error(transparent)]
    Read(ContentReadError),
    #[error("{0}")]
    Internal(String),
}

impl StoreError {
    /// A metadata failure of a command on `bucket`, with the bucket named where the client
    /// is told about it. Any other metadata error is this store's own failure.
    pub fn meta(e: MetaError, bucket: &str) -> Self {
        match e {
            MetaError::NoSuchBucket => StoreError::NoSuchBucket(bucket.to_string()),
            MetaError::BucketExists => StoreError::BucketExists(bucket.to_string()),
            MetaError::BucketOwnedByAnother => StoreError::BucketTaken(bucket.to_string()),
            MetaError::BucketNotEmpty => StoreError::BucketNotEmpty(bucket.to_string()),
            // A racing request ended the upload between the early check and the command
            // (two CompleteMultipartUploads at once): the loser's 404, not a 500.
            MetaError::NoSuchUpload => StoreError::NoSuchUpload,
            MetaError::ObjectLocked => StoreError::ObjectLocked,
            MetaError::InvalidBucketState(why) => StoreError::InvalidBucketState(why),
            other => other.into(),
        }
    }
}

impl StoreError {
    /// The failure of a write to `bucket/key` that carried a condition: a condition that
    /// did not hold when the command applied (a racing writer got there first) is the
    /// client's `412`, or `404` for an `If-Match` on a key that is gone.
    pub fn conditional(e: MetaError, bucket: &str, key: &str) -> Self {
        match e {
            MetaError::PreconditionFailed => StoreError::PreconditionFailed,
            MetaError::NoSuchKey => StoreError::NoSuchKey(key.to_string()),
            other => StoreError::meta(other, bucket),
        }
    }
}

impl From<MetaError> for StoreError {
    /// A metadata failure with no meaning to the client but "try again later" or "this
    /// store failed".
    fn from(e: MetaError) -> Self {
        match e {
            MetaError::Unavailable(why) => StoreError::Unavailable(why),
            // The range moved, or the reference taken for the write was settled: the
            // write did not happen and a retry takes a fresh map and reference.
            e @ (MetaError::Moved { .. } | MetaError::Fenced) => {
                StoreError::Unavailable(e.to_string())
            }
            other => StoreError::Meta(other),
        }
    }
}

impl From<WriteError> for StoreError {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::NoSpace { .. } => StoreError::NoWritablePair,
            // A disk that filled up behind the free-space figure, or went read-only: the
            // same answer as no pair with room (503, retry later), not an internal error.
            WriteError::Disk(d) if d.is_unwritable() => {
                tracing::warn!(error = %d, "a disk refused a write: full or read-only");
                StoreError::NoWritablePair
            }
            other => StoreError::Write(other),
        }
    }
}

/// Why a call that reads a client's body failed: the store refused it, or the body stream
/// itself ended in an error (a bad chunk signature, a checksum that does not match, a
/// dropped connection). The body's error is the caller's, in the caller's terms; the store
/// only stops reading, keeps nothing, and hands it back untouched.
#[derive(Debug, thiserror::Error)]
pub enum UploadError<E> {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("request body: {0}")]
    Body(E),
}

impl From<UploadError<StoreError>> for StoreError {
    /// A body read from stored content fails as the store does.
    fn from(e: UploadError<StoreError>) -> Self {
        match e {
            UploadError::Store(e) | UploadError::Body(e) => e,
        }
    }
}
