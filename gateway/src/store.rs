//! The object store: S3 buckets and objects on top of FileDB and the disk pairs.
//!
//! This is where the article's loader lives. A PUT streams the body to temp files on a
//! chosen pair while hashing it; only then is FileDB asked whether the content exists. If
//! it does, the temp files are dropped and the object just references the existing file
//! (the newsletter PDF costs one file however many inboxes get it); if not, the copies
//! are renamed to their content address before the metadata command commits, so a record
//! never points at a file that is not there.
//!
//! Failures are [`StoreError`]s, in the store's own terms; the front ends (S3, native,
//! admin) each turn them into their own answers.

mod error;
mod versions;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::{Stream, StreamExt as _};
use placement::digest::ParallelHasher;
use placement::disk::ByteStream;
use placement::pairdb::PairTable;
use placement::read::{self, BadCopies, Expect, VERIFY_BEFORE_SEND_BYTES_MAX};
use placement::write::{self, StagedUpload, WriteError};
use placement::{ContentHasher, Digests, Disk, Magic, PairId, PairRecord, Sha1};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use meta::acl::CannedAcl;
use meta::command::LockChange;
use meta::raft::{Metadata, Replicas};
use meta::tags::TagSet;
use meta::{
    Answer, BucketRecord, Checksum, Command, ContentSource, DeleteOutcome, Deleted, FileRecord,
    ListPage, ListQuery, MetaError, MetaStore, NewObject, ObjectPut, ObjectRecord, Referenced,
    Response, WritePrecondition,
};

pub use error::{ContentReadError, PART_BYTES_MIN, PART_NUMBER_MAX, StoreError, UploadError};
pub use versions::{Stored, parse_version_id};

/// Free and total bytes assumed for a disk that cannot report them (a WebDAV node).
pub const UNKNOWN_DISK_BYTES: u64 = 1 << 40;

/// Limits on what a client may store.
#[derive(Clone, Debug)]
pub struct Limits {
    pub object_bytes_max: u64,
    /// Total bytes of bodies held in memory at once while their hash is computed (see
    /// [`ObjectStore::stage`]); past it, bodies stream to temp files on disk.
    pub memory_stage_bytes: u64,
    /// Total bytes of bodies being sent that reads may hold in memory at once (see
    /// [`ObjectStore::reserve_read`]); past it, a read waits. 0: no bound.
    pub memory_read_bytes: u64,
    pub key_bytes_max: usize,
    pub user_meta_bytes_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            object_bytes_max: 5 * 1024 * 1024 * 1024,
            memory_stage_bytes: 256 * 1024 * 1024,
            memory_read_bytes: 256 * 1024 * 1024,
            key_bytes_max: 1024,
            user_meta_bytes_max: 2048,
        }
    }
}

/// What a copy writes besides the source's content: replaced attributes (REPLACE
/// directive), the destination's condition, and the object lock it asks for.
#[derive(Clone, Debug, Default)]
pub struct CopyWrite {
    pub attrs: Option<ObjectAttrs>,
    pub precondition: Option<WritePrecondition>,
    pub lock: Option<LockChange>,
    /// The copy's tags: the source's (COPY directive) or the request's (REPLACE).
    pub tags: TagSet,
    /// The copy's canned ACL (`x-amz-acl`; a copy never takes its source's).
    pub acl: CannedAcl,
}

/// What a client asks to store besides the body.
#[derive(Clone, Debug, Default)]
pub struct PutRequest {
    pub bucket: String,
    pub key: String,
    pub attrs: ObjectAttrs,
    /// The decoded body length the client announced, if any.
    pub size_bytes: Option<u64>,
    /// `Content-MD5`, verified against the body.
    pub content_md5: Option<[u8; 16]>,
    pub precondition: Option<WritePrecondition>,
    /// Filled with the verified flexible checksum once the body has been read.
    pub checksum: Option<ChecksumSlot>,
    /// The object lock the request asks for (`x-amz-object-lock-*`), set on the version
    /// in the write's own command.
    pub lock: Option<LockChange>,
    /// The tags of the new version (`x-amz-tagging`), set in the write's own command.
    pub tags: TagSet,
    /// The canned ACL of the new version (`x-amz-acl`), set in the write's own command.
    pub acl: CannedAcl,
}

/// Where the S3 layer leaves a flexible checksum it verified while the body streamed
/// (a trailer's value is only known at the end of the body).
pub type ChecksumSlot = Arc<std::sync::Mutex<Option<Checksum>>>;

/// What a client says about an object besides its bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectAttrs {
    pub content_type: Option<String>,
    pub user_meta: Vec<(String, String)>,
    /// Stored standard headers (Content-Encoding, Content-Disposition, ...).
    pub headers: Vec<(String, String)>,
}

impl ObjectAttrs {
    pub fn of(record: &ObjectRecord) -> Self {
        ObjectAttrs {
            content_type: record.content_type.clone(),
            user_meta: record.user_meta.clone(),
            headers: record.headers.clone(),
        }
    }

    fn apply_to(self, record: &mut ObjectRecord) {
        record.content_type = self.content_type;
        record.user_meta = self.user_meta;
        record.headers = self.headers;
    }
}

/// A body being served.
pub enum ReadBody {
    /// Verified before sending.
    Buffered(Bytes),
    /// Verified while streaming (whole body) or size-checked (a range of a large body).
    Stream(ByteStream),
}

pub struct ObjectRead {
    pub record: ObjectRecord,
    /// The inclusive byte range served, when the client asked for one.
    pub range: Option<(u64, u64)>,
    pub body: ReadBody,
}

/// A requested byte range, before it is checked against the object's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeSpec {
    /// `bytes=a-b` or `bytes=a-`.
    From { first: u64, last: Option<u64> },
    /// `bytes=-n`: the last n bytes.
    Suffix(u64),
}

impl RangeSpec {
    /// The inclusive range within an object of `size` bytes; `None` if unsatisfiable.
    pub fn resolve(self, size: u64) -> Option<(u64, u64)> {
        match self {
            RangeSpec::From { first, last } if first < size => {
                Some((first, last.map_or(size - 1, |l| l.min(size - 1))))
            }
            RangeSpec::Suffix(n) if n > 0 && size > 0 => Some((size - n.min(size), size - 1)),
            _ => None,
        }
    }
}

/// Renames quarantined copies of `sha1` back on the local disks of a pair; whether any
/// disk now holds the content name.
async fn restore_quarantined(disks: &[Disk; 2], sha1: Sha1) -> bool {
    let mut restored = false;
    for disk in disks.iter() {
        let Disk::Local(d) = disk else { continue };
        match valkyrie::restore(d.root(), sha1).await {
            Ok(true) => {
                tracing::warn!(%sha1, disk = %disk.disk_ref(), "restored a quarantined copy for a read");
                restored = true;
            }
            Ok(false) => {}
            Err(e) => {
                tracing::error!(%sha1, disk = %disk.disk_ref(), error = %e, "cannot restore from quarantine")
            }
        }
    }
    restored
}

/// Stored content to be read, verified, whole.
pub struct ContentReader {
    disks: Arc<[Disk; 2]>,
    sha1: Sha1,
    expect: Expect,
    bad_copies: Arc<BadCopies>,
}

impl ContentReader {
    pub async fn open(self) -> Result<ReadBody, ContentReadError> {
        if self.expect.size_bytes <= VERIFY_BEFORE_SEND_BYTES_MAX {
            let whole =
                read::read_verified(&self.disks, self.sha1, self.expect, &self.bad_copies).await?;
            Ok(ReadBody::Buffered(whole))
        } else {
            let stream =
                read::stream_verified(&self.disks, self.sha1, self.expect, None, self.bad_copies)
                    .await?;
            Ok(ReadBody::Stream(stream))
        }
    }
}

/// Bodies announced at up to this size are held in memory until their hash is known, while
/// [`Limits::memory_stage_bytes`] has room for them.
pub const MEMORY_STAGE_BODY_BYTES_MAX: u64 = 16 * 1024 * 1024;
/// Bodies held in memory above this size still probe a pair (create and remove an empty
/// temp file on both its disks) before the first body byte is read, as streamed bodies do:
/// a client does not send megabytes to learn that no disk would take them. The probe's
/// temp files are not kept open while the body arrives: a storage node would time out an
/// idle PUT from a slow client.
const PROBE_FIRST_BYTES_MIN: u64 = 1024 * 1024;
/// Bodies held in memory up to this size are hashed in one call once received; larger
/// ones by [`ParallelHasher`] while they arrive.
const INLINE_HASH_BYTES_MAX: u64 = 64 * 1024;
/// Received chunks shorter than this are copied together (a client trickling tiny TCP
/// segments must not cost a list entry per segment); longer ones are kept as they came.
const CHUNK_COALESCE_BYTES: usize = 32 * 1024;

/// A received body whose digests are known, not yet referenced by any record.
pub struct Staged {
    pub digests: Digests,
    body: StagedBody,
}

enum StagedBody {
    /// Held in memory, nothing written yet; the permit is its share of the memory budget.
    Memory {
        chunks: Vec<Bytes>,
        _permit: OwnedSemaphorePermit,
    },
    /// Both copies under temp names on a pair.
    Disk(StagedUpload),
}

impl From<StagedUpload> for Staged {
    fn from(upload: StagedUpload) -> Self {
        Staged {
            digests: upload.digests,
            body: StagedBody::Disk(upload),
        }
    }
}

impl Staged {
    /// Drops the staged body (temp files removed).
    pub async fn discard(self) {
        if let StagedBody::Disk(upload) = self.body {
            upload.discard().await;
        }
    }
}

/// Bytes a streamed read holds in memory at most: the chunk queued for the socket, the
/// chunk held back until the CRC32 of the whole body is known, and the chunk read ahead
/// (1 MiB each from a local disk). A client that stops reading pins all three until the
/// send timeout closes its connection.
pub const STREAM_HELD_BYTES: u64 = 3 * 1024 * 1024;
/// How long a read waits for room in [`Limits::memory_read_bytes`] before it is refused
/// with SlowDown.
pub const READ_BUDGET_WAIT_SECS: u64 = 10;

/// A share of the read memory budget, released when the body that holds it is dropped
/// (sent, or its connection closed).
struct ReadShare {
    bytes: Bytes,
    _permit: OwnedSemaphorePermit,
}

impl AsRef<[u8]> for ReadShare {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl ReadBody {
    /// The body, holding `permit` until it is dropped.
    fn holding(self, permit: Option<OwnedSemaphorePermit>) -> ReadBody {
        let Some(permit) = permit else { return self };
        match self {
            ReadBody::Buffered(bytes) => ReadBody::Buffered(Bytes::from_owner(ReadShare {
                bytes,
                _permit: permit,
            })),
            ReadBody::Stream(stream) => ReadBody::Stream(Box::pin(stream.map(move |chunk| {
                let _held = &permit;
                chunk
            }))),
        }
    }
}

/// A body's chunks as received, small ones copied together.
#[derive(Default)]
struct ChunkList {
    chunks: Vec<Bytes>,
    small: bytes::BytesMut,
}

impl ChunkList {
    fn push(&mut self, chunk: Bytes) {
        if chunk.len() >= CHUNK_COALESCE_BYTES {
            self.flush_small();
            self.chunks.push(chunk);
        } else {
            self.small.extend_from_slice(&chunk);
            if self.small.len() >= CHUNK_COALESCE_BYTES {
                self.flush_small();
            }
        }
    }

    fn flush_small(&mut self) {
        if !self.small.is_empty() {
            self.chunks.push(self.small.split().freeze());
        }
    }

    fn into_chunks(mut self) -> Vec<Bytes> {
        self.flush_small();
        self.chunks
    }
}

/// Receives a body of exactly `size` bytes into memory, hashing it as it arrives.
async fn stage_in_memory<S, E>(
    size: u64,
    mut body: S,
    permit: OwnedSemaphorePermit,
) -> Result<Staged, UploadError<E>>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    let mut hasher = (size > INLINE_HASH_BYTES_MAX).then(ParallelHasher::new);
    let mut chunks = ChunkList::default();
    let mut received: u64 = 0;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(UploadError::Body)?;
        received += chunk.len() as u64;
        if received > size {
            return Err(StoreError::IncompleteBody.into());
        }
        if let Some(h) = &mut hasher {
            h.update(chunk.clone()).await.map_err(hasher_gone)?;
        }
        chunks.push(chunk);
    }
    if received != size {
        return Err(StoreError::IncompleteBody.into());
    }
    let chunks = chunks.into_chunks();
    let digests = match hasher {
        Some(h) => h.finish().await.map_err(hasher_gone)?,
        None => {
            let mut h = ContentHasher::new();
            chunks.iter().for_each(|c| h.update(c));
            h.finish()
        }
    };
    Ok(Staged {
        digests,
        body: StagedBody::Memory {
            chunks,
            _permit: permit,
        },
    })
}

fn hasher_gone(e: placement::digest::HasherGone) -> StoreError {
    StoreError::Internal(format!("hashing a body: {e}"))
}

/// Why staged content could not be committed.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error(transparent)]
    Meta(#[from] MetaError),
    #[error(transparent)]
    Write(#[from] WriteError),
}

impl CommitError {
    /// The failure of a commit into `bucket`, as the store reports it.
    pub fn in_bucket(self, bucket: &str) -> StoreError {
        match self {
            CommitError::Meta(e) => StoreError::meta(e, bucket),
            CommitError::Write(e) => e.into(),
        }
    }
}

pub struct ObjectStore {
    /// Every group this node holds a replica of, and the way to the others: commands and
    /// FileDB reads go to the group the shard map gives them.
    replicas: Arc<Replicas>,
    /// Root's replica: the S3 index, PairDB, buckets and keys (until index groups exist).
    meta: Arc<Metadata>,
    pairs: Arc<PairTable>,
    bad_copies: Arc<BadCopies>,
    limits: Limits,
    /// Permits are bytes of [`Limits::memory_stage_bytes`].
    stage_memory: Arc<Semaphore>,
    /// Permits are bytes of [`Limits::memory_read_bytes`]; None: no bound.
    read_memory: Option<Arc<Semaphore>>,
    choice_root: u32,
    /// Lifecycle rules as last read, for `x-amz-expiration`.
    pub(crate) lifecycle_rules: crate::lifecycle::cache::RulesCache,
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub(crate) fn now_secs() -> u64 {
    now_ms() / 1000
}

impl ObjectStore {
    pub fn new(
        replicas: Arc<Replicas>,
        pairs: Arc<PairTable>,
        limits: Limits,
        choice_root: u32,
    ) -> Self {
        let budget = usize::try_from(limits.memory_stage_bytes)
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        let read_memory = (limits.memory_read_bytes > 0).then(|| {
            let bytes = usize::try_from(limits.memory_read_bytes).unwrap_or(usize::MAX);
            Arc::new(Semaphore::new(bytes.min(Semaphore::MAX_PERMITS)))
        });
        ObjectStore {
            meta: replicas.root().clone(),
            replicas,
            pairs,
            bad_copies: Arc::new(BadCopies::new()),
            limits,
            stage_memory: Arc::new(Semaphore::new(budget)),
            read_memory,
            choice_root,
            lifecycle_rules: Default::default(),
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// A linearizable metadata read (it sees every write acknowledged before it, on any
    /// node), run on the blocking pool.
    async fn meta<T: Send + 'static>(
        &self,
        f: impl FnOnce(&MetaStore) -> Result<T, MetaError> + Send + 'static,
    ) -> Result<T, MetaError> {
        self.meta.read(f).await
    }

    /// Commits one command through the replicated log of the group the map gives it (a
    /// write that references content goes by its key: [`Replicas::execute_at`]).
    pub async fn execute(&self, cmd: Command) -> Result<Response, MetaError> {
        self.replicas.execute(cmd).await
    }

    /// Root's replica of the metadata.
    pub fn metadata(&self) -> &Arc<Metadata> {
        &self.meta
    }

    /// The groups: typed commands routed by the map.
    pub fn replicas(&self) -> &Arc<Replicas> {
        &self.replicas
    }

    /// A metadata read on the blocking pool, for the store's own calls: its failure is
    /// the store's ([`StoreError::Meta`]) unless the caller maps it with a bucket.
    pub(crate) async fn meta_read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&MetaStore) -> Result<T, MetaError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.meta(f).await.map_err(StoreError::from)
    }

    /// Runs a command on `bucket` whose only answer is success.
    async fn execute_in(&self, bucket: &str, cmd: Command) -> Result<(), StoreError> {
        self.execute(cmd)
            .await
            .map(drop)
            .map_err(|e| StoreError::meta(e, bucket))
    }

    /// Creates a bucket owned by the access key `owner` (`None`: the bootstrap key).
    pub async fn create_bucket(
        &self,
        bucket: &str,
        owner: Option<String>,
        acl: CannedAcl,
    ) -> Result<(), StoreError> {
        let cmd = Command::CreateOwnedBucket {
            bucket: bucket.to_string(),
            created_ms: now_ms(),
            owner,
        };
        let cmd = Command::with_acl(bucket, "", acl, cmd);
        let done = self.execute_in(bucket, cmd).await;
        self.lifecycle_rules.forget(bucket);
        done
    }

    pub async fn delete_bucket(&self, bucket: &str) -> Result<(), StoreError> {
        let cmd = Command::DeleteBucket {
            bucket: bucket.to_string(),
        };
        let done = self.execute_in(bucket, cmd).await;
        self.lifecycle_rules.forget(bucket);
        done
    }

    pub async fn bucket(&self, bucket: &str) -> Result<BucketRecord, StoreError> {
        let name = bucket.to_string();
        self.meta(move |m| m.bucket(&name))
            .await
            .map_err(|e| StoreError::meta(e, bucket))?
            .ok_or_else(|| StoreError::NoSuchBucket(bucket.to_string()))
    }

    /// The pre-check of a write that is about to stream a body: a bucket this node has
    /// applied is taken as it is (the write's command checks again, atomically, so a bucket
    /// deleted meanwhile still fails the write), which spares a cluster node a read-index
    /// round per PUT; a bucket missing here is looked up linearizably before the write is
    /// refused, so a bucket just created through another node is never refused by a node
    /// that lags.
    async fn bucket_before_write(&self, bucket: &str) -> Result<(), StoreError> {
        let name = bucket.to_string();
        self.meta
            .read_unless_settled(move |m| m.bucket(&name), Option::is_some)
            .await
            .map_err(|e| StoreError::meta(e, bucket))?
            .map(|_| ())
            .ok_or_else(|| StoreError::NoSuchBucket(bucket.to_string()))
    }

    pub async fn buckets(&self) -> Result<Vec<(String, BucketRecord)>, StoreError> {
        self.meta_read(|m| m.buckets()).await
    }

    pub async fn list(&self, bucket: &str, query: ListQuery) -> Result<ListPage, StoreError> {
        self.bucket(bucket).await?;
        self.replicas
            .list_objects(bucket, &query)
            .await
            .map_err(|e| StoreError::meta(e, bucket))
    }

    /// The object's record, or NoSuchBucket / NoSuchKey (a key whose current version is
    /// a delete marker: [`StoreError::CurrentIsDeleteMarker`]).
    pub async fn head(&self, bucket: &str, key: &str) -> Result<ObjectRecord, StoreError> {
        self.head_current(bucket, key).await.map(|head| head.record)
    }

    /// The content's FileDB record, linearizable (Valkyrie's "is this live?" and the
    /// native API ask this).
    pub async fn file(&self, sha1: Sha1) -> Result<Option<FileRecord>, MetaError> {
        self.replicas.file(sha1).await
    }

    /// The content's record for the dedup pre-check, whose answer the command checks
    /// again, and for reads that follow a linearizable read of the same request: in one
    /// group, this node's state machine (see [`Replicas::file_after_root_read`]).
    async fn file_local(&self, sha1: Sha1) -> Result<Option<FileRecord>, MetaError> {
        self.replicas.file_after_root_read(sha1).await
    }

    pub fn meta_store(&self) -> &Arc<MetaStore> {
        self.meta.store()
    }

    pub fn check_key(&self, key: &str) -> Result<(), StoreError> {
        if key.is_empty() {
            return Err(StoreError::EmptyKey);
        }
        if key.len() > self.limits.key_bytes_max {
            return Err(StoreError::KeyTooLong {
                max_bytes: self.limits.key_bytes_max,
            });
        }
        Ok(())
    }

    /// Stores a body under bucket/key. `body` yields the decoded bytes; an error item
    /// aborts the upload, nothing is stored, and the item's error is returned as
    /// [`UploadError::Body`].
    pub async fn put<S, E>(&self, req: PutRequest, body: S) -> Result<Stored, UploadError<E>>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
    {
        self.check_key(&req.key)?;
        self.check_attrs(&req.attrs)?;
        // Fail before streaming when the bucket is missing or a condition fails; the
        // command re-checks both atomically.
        self.bucket_before_write(&req.bucket).await?;
        if let Some(pre) = &req.precondition {
            self.check_write_precondition(&req.bucket, &req.key, pre)
                .await?;
        }
        let staged = self.stage(req.size_bytes, body).await?;
        if let Some(md5) = req.content_md5
            && md5 != staged.digests.md5
        {
            staged.discard().await;
            return Err(StoreError::Md5Mismatch.into());
        }
        let d = staged.digests;
        let mut object = NewObject::new(d.sha1, Magic::random(), d.size_bytes, d.crc32, d.md5);
        object.created_ms = now_ms();
        object.checksum = req
            .checksum
            .as_ref()
            .and_then(|slot| slot.lock().unwrap_or_else(|e| e.into_inner()).take());
        req.attrs.apply_to(&mut object);
        let (bucket, key, precondition, lock) = (req.bucket, req.key, req.precondition, req.lock);
        let (tags, acl) = (req.tags, req.acl);
        let command = |source| {
            let put = Command::PutObject {
                bucket: bucket.clone(),
                key: key.clone(),
                object: object.clone(),
                source,
                now_secs: now_secs(),
                precondition: precondition.clone(),
            };
            let put = match lock {
                Some(change) => Command::Locked {
                    bucket: bucket.clone(),
                    key: key.clone(),
                    change,
                    command: Box::new(put),
                },
                None => put,
            };
            let put = Command::tagged(&bucket, &key, &tags, put);
            Command::with_acl(&bucket, &key, acl, put)
        };
        match self
            .commit_content::<ObjectPut>(staged, Some((&bucket, &key)), command)
            .await
        {
            Ok(put) => Ok(Stored {
                record: object.into_record(put.seq),
                version_id: put.version_id,
            }),
            Err(CommitError::Meta(e)) => Err(StoreError::conditional(e, &bucket, &key).into()),
            Err(e) => Err(e.in_bucket(&bucket).into()),
        }
    }

    pub fn check_attrs(&self, attrs: &ObjectAttrs) -> Result<(), StoreError> {
        let meta_bytes: usize = attrs.user_meta.iter().map(|(k, v)| k.len() + v.len()).sum();
        if meta_bytes > self.limits.user_meta_bytes_max {
            return Err(StoreError::MetadataTooLarge {
                max_bytes: self.limits.user_meta_bytes_max,
            });
        }
        Ok(())
    }

    /// Checks a write's condition against the key's current object before the work of
    /// the write, so that a write bound to fail fails early; the command checks it again
    /// where it counts, atomically with the change.
    pub async fn check_write_precondition(
        &self,
        bucket: &str,
        key: &str,
        pre: &WritePrecondition,
    ) -> Result<(), StoreError> {
        let current = self
            .replicas
            .object(bucket, key)
            .await
            .map_err(|e| StoreError::meta(e, bucket))?;
        pre.check(current.as_ref())
            .map_err(|e| StoreError::conditional(e, bucket, key))
    }

    /// A metadata-only copy: the new object references the source's content, so no byte
    /// is read or written. `attrs` replaces the source's attributes (REPLACE directive).
    ///
    /// `precondition` is the destination's (`If-None-Match`, `If-Match` on CopyObject),
    /// checked in the copy's command. A source read by version id (`pinned`) is a record
    /// that never changes: the copy only needs its content to be still referenced (the
    /// dedup path's check), and a version deleted meanwhile is NoSuchVersion. Any other
    /// source must still be the key's current object when the command applies.
    pub async fn copy(
        &self,
        source: &ObjectRecord,
        from: (&str, &str),
        to: (&str, &str),
        write: CopyWrite,
        pinned: Option<&str>,
    ) -> Result<Stored, StoreError> {
        let CopyWrite {
            attrs,
            precondition,
            lock,
            tags,
            acl,
        } = write;
        self.check_key(to.1)?;
        if let Some(pre) = &precondition {
            self.check_write_precondition(to.0, to.1, pre).await?;
        }
        let mut object = source.clone();
        object.magic = Magic::random();
        object.created_ms = now_ms();
        if let Some(a) = attrs {
            self.check_attrs(&a)?;
            a.apply_to(&mut object);
        }
        let cmd = match pinned {
            Some(_) => Command::PutObject {
                bucket: to.0.to_string(),
                key: to.1.to_string(),
                object: object.clone(),
                source: ContentSource::Existing,
                now_secs: now_secs(),
                precondition: None,
            },
            None => Command::CopyObject {
                bucket: to.0.to_string(),
                key: to.1.to_string(),
                object: object.clone(),
                from_bucket: from.0.to_string(),
                from_key: from.1.to_string(),
                from_seq: source.seq,
                now_secs: now_secs(),
            },
        };
        let conditional = precondition.is_some();
        let cmd = match precondition {
            Some(precondition) => Command::Conditional {
                bucket: to.0.to_string(),
                key: to.1.to_string(),
                precondition,
                command: Box::new(cmd),
            },
            None => cmd,
        };
        let cmd = match lock {
            Some(change) => Command::Locked {
                bucket: to.0.to_string(),
                key: to.1.to_string(),
                change,
                command: Box::new(cmd),
            },
            None => cmd,
        };
        let cmd = Command::tagged(to.0, to.1, &tags, cmd);
        let cmd = Command::with_acl(to.0, to.1, acl, cmd);
        if let Some(id) = pinned {
            return match self.replicas.referencing::<ObjectPut>(Some(to), cmd).await {
                Ok(Referenced::Done(put)) => Ok(Stored {
                    record: object.into_record(put.seq),
                    version_id: put.version_id,
                }),
                // Its last reference went with the version: the version is gone.
                Ok(Referenced::ContentGone) => Err(StoreError::NoSuchVersion {
                    key: from.1.to_string(),
                    version_id: id.to_string(),
                }),
                Err(e) => Err(StoreError::conditional(e, to.0, to.1)),
            };
        }
        let raced = || StoreError::Raced(format!("{}/{}", from.0, from.1));
        match self.replicas.call_at::<ObjectPut>(to.0, to.1, cmd).await {
            Ok(put) => Ok(Stored {
                record: object.into_record(put.seq),
                version_id: put.version_id,
            }),
            // The command found another record at the source than the one read, or (with
            // a condition) the destination failed it: the source's sequence number, which
            // only grows, tells which.
            Err(MetaError::PreconditionFailed) if conditional => {
                match self.head(from.0, from.1).await {
                    Ok(now) if now.seq == source.seq => Err(StoreError::PreconditionFailed),
                    Ok(_) => Err(raced()),
                    Err(e) => Err(e),
                }
            }
            Err(MetaError::PreconditionFailed) => Err(raced()),
            Err(MetaError::NoSuchKey) if conditional => {
                // The source is gone, or the destination of an If-Match is.
                match self.head(from.0, from.1).await {
                    Ok(_) => Err(StoreError::NoSuchKey(to.1.to_string())),
                    Err(e) => Err(e),
                }
            }
            Err(MetaError::NoSuchKey) => Err(StoreError::NoSuchKey(from.1.to_string())),
            Err(e) => Err(StoreError::meta(e, to.0)),
        }
    }

    /// Deletes up to 1000 keys in one transaction, each only if its condition (if any)
    /// holds; what happened to each.
    pub async fn delete_many(
        &self,
        bucket: &str,
        objects: Vec<(String, Option<WritePrecondition>)>,
    ) -> Result<Vec<DeleteOutcome>, StoreError> {
        let result = if objects.iter().all(|(_, pre)| pre.is_none()) {
            // Without conditions, the command every release knows.
            let keys = objects.into_iter().map(|(k, _)| k).collect();
            self.replicas
                .delete_objects(bucket.to_string(), keys, now_secs())
                .await
                .map(|existed| {
                    existed
                        .into_iter()
                        .map(|e| {
                            if e {
                                DeleteOutcome::Deleted
                            } else {
                                DeleteOutcome::Absent
                            }
                        })
                        .collect()
                })
        } else {
            self.replicas
                .delete_objects_matching(bucket.to_string(), objects, now_secs())
                .await
        };
        result.map_err(|e| StoreError::meta(e, bucket))
    }

    /// Receives a body within the size limit. A body announced at up to
    /// [`MEMORY_STAGE_BODY_BYTES_MAX`] is held in memory until its hash is known, while the
    /// memory budget has room for it, so that a duplicate costs no disk write at all; any
    /// other streams to temp files on both disks of a chosen pair. Either way it is hashed
    /// as it arrives. An error item in `body` (returned as [`UploadError::Body`]), or a
    /// length that differs from `size_bytes`, aborts and leaves nothing behind.
    pub async fn stage<S, E>(
        &self,
        size_bytes: Option<u64>,
        mut body: S,
    ) -> Result<Staged, UploadError<E>>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
    {
        let too_large = || StoreError::EntityTooLarge {
            max_bytes: self.limits.object_bytes_max,
        };
        if size_bytes.is_some_and(|s| s > self.limits.object_bytes_max) {
            return Err(too_large().into());
        }
        if let Some(size) = size_bytes.filter(|s| *s <= MEMORY_STAGE_BODY_BYTES_MAX) {
            let permit = u32::try_from(size)
                .ok()
                .and_then(|n| self.stage_memory.clone().try_acquire_many_owned(n).ok());
            if let Some(permit) = permit {
                if size > PROBE_FIRST_BYTES_MIN {
                    self.probe(size).await?;
                }
                return stage_in_memory(size, body, permit).await;
            }
        }
        let mut upload =
            write::begin_upload(&self.pairs, size_bytes.unwrap_or(0), self.choice_root)
                .await
                .map_err(StoreError::from)?;
        let mut received: u64 = 0;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(UploadError::Body)?;
            received += chunk.len() as u64;
            if received > self.limits.object_bytes_max {
                return Err(too_large().into());
            }
            upload.write(chunk).await.map_err(StoreError::from)?;
        }
        if size_bytes.is_some_and(|s| s != received) {
            return Err(StoreError::IncompleteBody.into());
        }
        let staged = upload.finish().await.map_err(StoreError::from)?;
        Ok(Staged::from(staged))
    }

    /// Checks that some pair takes a body of `size_bytes` now: an empty temp file is
    /// created on both disks of a chosen pair (trying others, as an upload does) and removed.
    async fn probe(&self, size_bytes: u64) -> Result<(), StoreError> {
        let upload =
            write::begin_upload_unhashed(&self.pairs, size_bytes, self.choice_root).await?;
        upload.abandon().await;
        Ok(())
    }

    /// The dedup decision and the metadata commit of staged content.
    ///
    /// `command(source)` builds the command that references the content. If FileDB already
    /// has the content and one of its copies looks good (see [`Self::has_good_copy`]), the
    /// command runs with [`ContentSource::Existing`] and the staged copies are dropped (a
    /// body held in memory never touched a disk); if the content is absent (or vanished
    /// before the commit), both copies are given their content address first and the
    /// command runs with [`ContentSource::Stored`].
    ///
    /// If FileDB has the content but neither copy is there with its size, the upload heals
    /// it: our copies are written as for new content, the record is moved to their pair
    /// (`Relocate`, only if it still names the lost pair), and the command runs with
    /// `Stored`. An upload is never acknowledged onto content that has no good copy. `T` is
    /// the command's answer.
    pub async fn commit_content<T: Answer>(
        &self,
        staged: Staged,
        at: Option<(&str, &str)>,
        command: impl Fn(ContentSource) -> Command,
    ) -> Result<T, CommitError> {
        let sha1 = staged.digests.sha1;
        if staged.digests.collision_attack {
            // Named by its mitigated digest (see placement::digest): it deduplicates only
            // against the same bytes, never against its twin. Worth an operator's look.
            tracing::warn!(%sha1, "body carries a SHA-1 collision attack; stored under its collision-safe name");
        }
        let mut lost_on = None;
        if let Some(file) = self.file_local(sha1).await? {
            if self
                .has_good_copy(sha1, file.pair, staged.digests.size_bytes)
                .await
            {
                match self
                    .replicas
                    .referencing(at, command(ContentSource::Existing))
                    .await
                {
                    // The content went away between the lookup and the commit: store ours.
                    // (`Inc` says so with NotFound, the object and part commands with
                    // ContentGone.)
                    Ok(Referenced::ContentGone) | Err(MetaError::NotFound) => {}
                    Ok(Referenced::Done(answer)) => {
                        staged.discard().await;
                        return Ok(answer);
                    }
                    Err(e) => {
                        staged.discard().await;
                        return Err(e.into());
                    }
                }
            } else {
                tracing::warn!(%sha1, pair = %file.pair, "no good copy of uploaded content: healing it with the upload's copies");
                lost_on = Some(file.pair);
            }
        }
        let pair = self.store_copies(staged).await?;
        if let Some(from) = lost_on {
            if from != pair {
                // The record follows the new copies. Not switched: a racing heal or UNMOVE
                // moved it first (to copies of its own), or the content was deleted and
                // the command below inserts it again.
                let moved = self.replicas.relocate(sha1, from, pair).await?;
                tracing::info!(%sha1, %from, to = %pair, moved, "healed content record");
            }
            // The copies are new: reads may start from either disk again.
            if let Some(entry) = self.pairs.get(pair) {
                for d in entry.disks.iter() {
                    self.bad_copies.clear(sha1, d.disk_ref());
                }
            }
        }
        // On error our renamed copies are orphans without a record; Valkyrie removes them.
        // With our own copies the content cannot be gone: ContentGone here is a bug.
        match self
            .replicas
            .referencing(at, command(ContentSource::Stored(pair)))
            .await?
        {
            Referenced::Done(answer) => Ok(answer),
            Referenced::ContentGone => Err(MetaError::Unexpected("ContentGone".into()).into()),
        }
    }

    /// Gives staged content its content address on both disks of a pair (a body held in
    /// memory is written first); the pair.
    async fn store_copies(&self, staged: Staged) -> Result<PairId, CommitError> {
        let on_disk = match staged.body {
            StagedBody::Disk(upload) => upload,
            StagedBody::Memory { chunks, _permit } => {
                write::stage_whole(&self.pairs, staged.digests, chunks, self.choice_root).await?
            }
        };
        let pair: PairId = on_disk.pair;
        let size_bytes = on_disk.digests.size_bytes;
        on_disk.commit().await?;
        self.charge_space(pair, size_bytes);
        Ok(pair)
    }

    /// Whether stored content has a copy worth referencing: on a disk of `pair`, present
    /// with `size_bytes` and not known bad from a read. A stat per disk, no data read and
    /// nothing written, so that a duplicate still costs no disk write; a copy of the right
    /// size but wrong bytes passes until a read or the scrubber finds it, after which the
    /// next upload heals it. A disk that cannot answer does not count as good.
    async fn has_good_copy(&self, sha1: Sha1, pair: PairId, size_bytes: u64) -> bool {
        let Some(entry) = self.pairs.get(pair) else {
            return false;
        };
        // The master disk first: reads start there, and one good copy is enough.
        let first = sha1.master_disk();
        self.copy_looks_good(&entry.disks[first], sha1, size_bytes)
            .await
            || self
                .copy_looks_good(&entry.disks[1 - first], sha1, size_bytes)
                .await
    }

    async fn copy_looks_good(&self, disk: &Disk, sha1: Sha1, size_bytes: u64) -> bool {
        !self.bad_copies.contains(sha1, disk.disk_ref())
            && matches!(disk.size_of(&sha1).await, Ok(Some(s)) if s == size_bytes)
    }

    /// Reads an object whose record the caller already holds (after checking its
    /// conditions), whole or a range of it.
    pub async fn get_record(
        &self,
        bucket: &str,
        key: &str,
        record: ObjectRecord,
        range: Option<RangeSpec>,
    ) -> Result<ObjectRead, StoreError> {
        let range = match range {
            Some(spec) => Some(
                spec.resolve(record.size_bytes)
                    .ok_or_else(|| StoreError::InvalidRange(key.to_string()))?,
            ),
            None => None,
        };
        let expect = Expect {
            size_bytes: record.size_bytes,
            crc32: record.crc32,
        };
        let served_bytes = range.map_or(record.size_bytes, |(first, last)| last - first + 1);
        let share = self
            .reserve_read(served_bytes)
            .await
            .map_err(|_| StoreError::SlowDown)?;
        let body = match self.read_content(record.sha1, expect, range).await {
            Ok(body) => body.holding(share),
            Err(ContentReadError::NoRecord(sha1)) => {
                return Err(self.released(bucket, key, &record, sha1).await);
            }
            Err(ContentReadError::Meta(e)) => return Err(e.into()),
            Err(other) => {
                return Err(StoreError::Internal(format!(
                    "object {bucket}/{key}: {other}"
                )));
            }
        };
        Ok(ObjectRead {
            record,
            range,
            body,
        })
    }

    /// Why the content of `record` (read for `bucket/key`) has no FileDB record: the key
    /// was overwritten or deleted since the record was read ([`StoreError::Raced`]: read
    /// it again), or, if the key still holds this very record, the metadata is damaged.
    pub(crate) async fn released(
        &self,
        bucket: &str,
        key: &str,
        record: &ObjectRecord,
        sha1: Sha1,
    ) -> StoreError {
        match self.replicas.object(bucket, key).await {
            Ok(Some(now)) if now.seq == record.seq && now.sha1 == record.sha1 => {
                StoreError::Internal(format!(
                    "object {bucket}/{key}: no FileDB record for its content {sha1}"
                ))
            }
            Ok(_) => StoreError::Raced(format!("{bucket}/{key}")),
            Err(e) => StoreError::meta(e, bucket),
        }
    }

    /// Waits (up to [`READ_BUDGET_WAIT_SECS`]) for room in the read memory budget for a
    /// body of `size_bytes` being sent: all of it if it is read whole, else
    /// [`STREAM_HELD_BYTES`]. The share goes with the body ([`ReadBody::holding`]).
    async fn reserve_read(
        &self,
        size_bytes: u64,
    ) -> Result<Option<OwnedSemaphorePermit>, ContentReadError> {
        let Some(budget) = &self.read_memory else {
            return Ok(None);
        };
        let held = if size_bytes <= VERIFY_BEFORE_SEND_BYTES_MAX {
            size_bytes
        } else {
            STREAM_HELD_BYTES.min(size_bytes)
        };
        // A body larger than the whole budget takes all of it, and so is read alone.
        let budget_bytes = self
            .limits
            .memory_read_bytes
            .min(Semaphore::MAX_PERMITS as u64);
        let permits = u32::try_from(held.min(budget_bytes)).unwrap_or(u32::MAX);
        let wait = Duration::from_secs(READ_BUDGET_WAIT_SECS);
        match tokio::time::timeout(wait, budget.clone().acquire_many_owned(permits)).await {
            Ok(permit) => Ok(permit.ok()),
            Err(_) => Err(ContentReadError::Busy),
        }
    }

    pub fn choice_root(&self) -> u32 {
        self.choice_root
    }

    pub fn pair_table(&self) -> &Arc<PairTable> {
        &self.pairs
    }

    /// Measures free space on every disk, for the pair choice and the admin view.
    pub async fn refresh_space(&self) {
        for id in self.pairs.ids() {
            self.refresh_pair_space(id).await;
        }
    }

    async fn refresh_pair_space(&self, id: PairId) {
        let Some(entry) = self.pairs.get(id) else {
            return;
        };
        let (a, b) = tokio::join!(entry.disks[0].space(), entry.disks[1].space());
        let mut free = entry.record.free_bytes;
        let mut capacity = entry.record.capacity_bytes;
        for (i, measured) in [a, b].into_iter().enumerate() {
            match measured {
                Ok((f, c)) => (free[i], capacity[i]) = (f, c),
                // A WebDAV node (stock nginx) cannot say how full it is. Until its
                // Valkyrie reports it, assume the default so that the pair still takes
                // writes; a failing disk is caught by the probe, not by this figure.
                Err(e) if e.is_space_unknown() => {
                    if capacity[i] == 0 {
                        (free[i], capacity[i]) = (UNKNOWN_DISK_BYTES, UNKNOWN_DISK_BYTES);
                    }
                }
                Err(e) => tracing::warn!(pair = %id, error = %e, "cannot measure disk space"),
            }
        }
        self.pairs.set_space(id, free, capacity);
    }

    /// Counts a committed file against its pair's free space until the next measurement.
    fn charge_space(&self, pair: PairId, size_bytes: u64) {
        if let Some(e) = self.pairs.get(pair) {
            let free = e.record.free_bytes.map(|f| f.saturating_sub(size_bytes));
            self.pairs.set_space(pair, free, e.record.capacity_bytes);
        }
    }

    /// Runs a pair command (`AddPair`, `SetPairFlags`) and brings the in-memory PairDB
    /// up to date with its result.
    pub async fn change_pair(&self, cmd: Command) -> Result<(PairId, PairRecord), StoreError> {
        match self.replicas.change_pair(cmd).await {
            Ok((id, record)) => {
                self.note_pair(id, record.clone())
                    .await
                    .map_err(|e| StoreError::Internal(e.to_string()))?;
                let current = self.pairs.get(id).map_or(record, |e| e.record);
                Ok((id, current))
            }
            Err(MetaError::NoPair) => Err(StoreError::NoSuchPair),
            Err(e) => Err(e.into()),
        }
    }

    /// Brings one pair of the in-memory PairDB up to date with its record, keeping the
    /// free space measured here (a new pair is measured now).
    async fn note_pair(&self, id: PairId, record: PairRecord) -> Result<(), placement::DiskError> {
        for disk in &record.disks {
            if let Some(path) = disk.local_path() {
                std::fs::create_dir_all(path)
                    .map_err(|e| placement::DiskError::io(disk, "create the disk folder", e))?;
            }
        }
        if self.pairs.merge(id, record)? {
            self.refresh_pair_space(id).await;
        }
        Ok(())
    }

    /// Reloads the in-memory PairDB from this node's state machine (after a pair command
    /// applied here, whichever node proposed it, or a snapshot installed).
    pub async fn reload_pairs(&self) -> Result<(), StoreError> {
        let pairs = self.meta.read_local(|m| m.pairs()).await?;
        for (id, record) in pairs {
            self.note_pair(id, record)
                .await
                .map_err(|e| StoreError::Internal(e.to_string()))?;
        }
        Ok(())
    }

    /// The disks of the pair that holds `sha1`.
    async fn content_disks(&self, sha1: Sha1) -> Result<Arc<[Disk; 2]>, ContentReadError> {
        let file = self
            .file_local(sha1)
            .await?
            .ok_or(ContentReadError::NoRecord(sha1))?;
        if let Some(entry) = self.pairs.get(file.pair) {
            return Ok(entry.disks);
        }
        // The record was read after a pair command was applied here but before the
        // in-memory PairDB followed it (it reloads on a notification, asynchronously;
        // right after a restart it starts from the last checkpoint). The local PairDB is
        // at least as new as the record: load it now.
        self.reload_pairs()
            .await
            .map_err(|e| ContentReadError::Meta(MetaError::Storage(e.to_string())))?;
        self.pairs
            .get(file.pair)
            .map(|entry| entry.disks)
            .ok_or(ContentReadError::NoPair(file.pair))
    }

    /// The size of the stored content as its first readable copy reports it.
    pub async fn content_size(&self, sha1: Sha1) -> Result<Option<u64>, ContentReadError> {
        // The native API reads by sha1 with no index lookup before: linearize here.
        self.meta.linearize().await?;
        let disks = self.content_disks(sha1).await?;
        for disk in disks.iter() {
            if let Ok(Some(size)) = disk.size_of(&sha1).await {
                return Ok(Some(size));
            }
        }
        Ok(None)
    }

    /// A reader of stored content that owns what it needs, to be opened later (for
    /// streams that outlive a borrow of the store).
    pub async fn content_reader(
        &self,
        sha1: Sha1,
        expect: Expect,
    ) -> Result<ContentReader, ContentReadError> {
        Ok(ContentReader {
            disks: self.content_disks(sha1).await?,
            sha1,
            expect,
            bad_copies: self.bad_copies.clone(),
        })
    }

    /// Reads stored content, verified against `expect` (see `placement::read`): bodies up
    /// to 1 MiB before sending, larger ones while streaming. `range` is inclusive.
    pub async fn read_content(
        &self,
        sha1: Sha1,
        expect: Expect,
        range: Option<(u64, u64)>,
    ) -> Result<ReadBody, ContentReadError> {
        let disks = self.content_disks(sha1).await?;
        match self.read_from(&disks, sha1, expect, range).await {
            Err(ContentReadError::NoGoodCopy(e)) => {
                // Quarantine is reversible: a live file found only under its quarantine
                // name (a deletion raced a re-upload) is renamed back, then read.
                if restore_quarantined(&disks, sha1).await {
                    for d in disks.iter() {
                        self.bad_copies.clear(sha1, d.disk_ref());
                    }
                    self.read_from(&disks, sha1, expect, range).await
                } else {
                    Err(ContentReadError::NoGoodCopy(e))
                }
            }
            other => other,
        }
    }

    async fn read_from(
        &self,
        disks: &[Disk; 2],
        sha1: Sha1,
        expect: Expect,
        range: Option<(u64, u64)>,
    ) -> Result<ReadBody, ContentReadError> {
        if expect.size_bytes <= VERIFY_BEFORE_SEND_BYTES_MAX {
            let whole = read::read_verified(disks, sha1, expect, &self.bad_copies).await?;
            let part = match range {
                Some((first, last)) if last < expect.size_bytes => {
                    whole.slice(first as usize..=last as usize)
                }
                _ => whole,
            };
            Ok(ReadBody::Buffered(part))
        } else {
            let span = range.map(|(first, last)| (first, last - first + 1));
            let stream =
                read::stream_verified(disks, sha1, expect, span, self.bad_copies.clone()).await?;
            Ok(ReadBody::Stream(stream))
        }
    }

    /// The article's collision guard for the native `GET /sha1`: the content is served only
    /// if it has the size and CRC32 the caller recorded. A small copy is first checked
    /// against its own name (SHA-1), so a guard that does not match a good copy is the
    /// caller's mismatch (`Ok(None)`), not a corrupt disk; larger bodies are checked
    /// against the guard while they stream.
    pub async fn read_guarded(
        &self,
        sha1: Sha1,
        guard: Expect,
    ) -> Result<Option<ReadBody>, ContentReadError> {
        let share = self.reserve_read(guard.size_bytes).await?;
        if guard.size_bytes > VERIFY_BEFORE_SEND_BYTES_MAX {
            return self
                .read_content(sha1, guard, None)
                .await
                .map(|body| Some(body.holding(share)));
        }
        let disks = self.content_disks(sha1).await?;
        for i in self.bad_copies.read_order(sha1, &disks) {
            let disk = &disks[i];
            match disk.read_all(&sha1).await {
                Ok(bytes) if placement::NameHasher::name_of(&bytes) == sha1 => {
                    let matches = bytes.len() as u64 == guard.size_bytes
                        && crc32fast::hash(&bytes) == guard.crc32;
                    return Ok(matches.then(|| ReadBody::Buffered(bytes).holding(share)));
                }
                Ok(_) => {
                    tracing::error!(%sha1, disk = %disk.disk_ref(), "copy does not hash to its name");
                    self.bad_copies.mark(sha1, disk.disk_ref());
                }
                Err(e) => {
                    tracing::warn!(%sha1, disk = %disk.disk_ref(), error = %e, "copy unreadable");
                    self.bad_copies.mark(sha1, disk.disk_ref());
                }
            }
        }
        Err(ContentReadError::NoGoodCopy(read::ReadError::NoGoodCopy {
            sha1,
        }))
    }

    /// Deletes `bucket/key` (nothing to delete is no error), only if `precondition` (the
    /// `If-Match` of DeleteObject) holds when the command applies. In a versioned bucket
    /// this adds a delete marker, which the answer names.
    pub async fn delete(
        &self,
        bucket: &str,
        key: &str,
        precondition: Option<WritePrecondition>,
    ) -> Result<Deleted, StoreError> {
        let cmd = Command::DeleteObject {
            bucket: bucket.to_string(),
            key: key.to_string(),
            now_secs: now_secs(),
        };
        match precondition {
            None => self
                .replicas
                .call::<Deleted>(cmd)
                .await
                .map_err(|e| StoreError::meta(e, bucket)),
            Some(precondition) => {
                let cmd = Command::Conditional {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                    precondition,
                    command: Box::new(cmd),
                };
                self.replicas
                    .call::<Deleted>(cmd)
                    .await
                    .map_err(|e| StoreError::conditional(e, bucket, key))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use super::*;

    #[test]
    fn ranges_resolve_like_s3() {
        let from = |first, last| RangeSpec::From { first, last };
        assert_eq!(from(0, Some(9)).resolve(100), Some((0, 9)));
        assert_eq!(from(90, Some(200)).resolve(100), Some((90, 99)));
        assert_eq!(from(10, None).resolve(100), Some((10, 99)));
        assert_eq!(from(100, None).resolve(100), None);
        assert_eq!(RangeSpec::Suffix(10).resolve(100), Some((90, 99)));
        assert_eq!(RangeSpec::Suffix(1000).resolve(100), Some((0, 99)));
        assert_eq!(RangeSpec::Suffix(0).resolve(100), None);
        assert_eq!(from(0, None).resolve(0), None);
    }

    async fn store_with_two_pairs() -> (tempfile::TempDir, ObjectStore) {
        store_with_two_pairs_and(Limits::default()).await
    }

    /// A single node (one-voter group) on a temp folder with two pairs of local disks.
    async fn store_with_two_pairs_and(limits: Limits) -> (tempfile::TempDir, ObjectStore) {
        let dir = tempfile::tempdir().unwrap();
        let meta_dir = dir.path().join("meta");
        std::fs::create_dir(&meta_dir).unwrap();
        let meta = MetaStore::open(&meta_dir.join("meta.redb")).unwrap();
        let pairs = Arc::new(PairTable::new());
        for id in 0..2u32 {
            let disks =
                [0, 1].map(|d| placement::DiskRef::local(dir.path().join(format!("p{id}d{d}"))));
            let mut record = PairRecord::new(disks);
            record.free_bytes = [1 << 30, 1 << 30];
            meta.execute(&Command::PutPair {
                id: PairId(id),
                record: record.clone(),
            })
            .unwrap();
            pairs.upsert(PairId(id), record).unwrap();
        }
        drop(meta);
        let cluster = meta::raft::ClusterConfig::single("127.0.0.1:1".into());
        let replicas = Replicas::open(&meta_dir, cluster, Arc::new(meta::raft::network::NoPeers))
            .await
            .unwrap();
        (dir, ObjectStore::new(replicas, pairs, limits, 2))
    }

    async fn staged_on(store: &ObjectStore, pair: u32, body: &'static [u8]) -> StagedUpload {
        let disks = store.pairs.get(PairId(pair)).unwrap().disks;
        let mut up = placement::write::PairUpload::begin(PairId(pair), disks)
            .await
            .unwrap();
        up.write(Bytes::from_static(body)).await.unwrap();
        up.finish().await.unwrap()
    }

    #[tokio::test]
    async fn racing_loaders_on_two_pairs_both_succeed_and_leave_junk_on_one() {
        let (dir, store) = store_with_two_pairs().await;
        let body = b"the same newsletter attachment";
        // Both loaders found the content absent and stored it, each on its own pair.
        let a = staged_on(&store, 0, body).await;
        let b = staged_on(&store, 1, body).await;
        let sha1 = a.digests.sha1;
        a.commit().await.unwrap();
        b.commit().await.unwrap();
        let insert = |pair, magic| Command::InsertOrInc {
            sha1,
            magic: Magic::new(magic).unwrap(),
            pair: PairId(pair),
        };
        store.execute(insert(0, 11)).await.unwrap();
        store.execute(insert(1, 22)).await.unwrap();
        let rec = store.file(sha1).await.unwrap().unwrap();
        assert_eq!((rec.refs, rec.pair, rec.magic), (2, PairId(0), 33));
        // Pair 1 holds copies no record points to: junk for Valkyrie's scrub.
        let hex = sha1.to_hex();
        for d in 0..2 {
            let path = dir
                .path()
                .join(format!("p1d{d}"))
                .join(&hex[0..2])
                .join(&hex[2..4])
                .join(&hex);
            assert!(path.is_file(), "junk copy expected at {}", path.display());
        }
        // Reads use the record's pair.
        let expect = Expect {
            size_bytes: body.len() as u64,
            crc32: crc32fast::hash(body),
        };
        let ReadBody::Buffered(got) = store.read_content(sha1, expect, None).await.unwrap() else {
            panic!()
        };
        assert_eq!(&got[..], body);
    }

    #[tokio::test]
    async fn a_loader_that_finds_the_content_stored_writes_nothing() {
        let (dir, store) = store_with_two_pairs().await;
        let body = b"dedup hit";
        let first = staged_on(&store, 0, body).await;
        let sha1 = first.digests.sha1;
        let cmd = |src| match src {
            ContentSource::Existing => Command::Inc {
                sha1,
                magic: Magic::random(),
            },
            ContentSource::Stored(pair) => Command::InsertOrInc {
                sha1,
                magic: Magic::random(),
                pair,
            },
        };
        store
            .commit_content::<FileRecord>(first.into(), None, cmd)
            .await
            .unwrap();
        let second = staged_on(&store, 1, body).await;
        store
            .commit_content::<FileRecord>(second.into(), None, cmd)
            .await
            .unwrap();
        assert_eq!(store.file(sha1).await.unwrap().unwrap().refs, 2);
        let hex = sha1.to_hex();
        for d in 0..2 {
            assert!(!dir.path().join(format!("p1d{d}")).join(&hex[0..2]).exists());
            assert_eq!(
                std::fs::read_dir(dir.path().join(format!("p1d{d}/tmp")))
                    .unwrap()
                    .count(),
                0
            );
        }
    }

    /// Every file under a folder, recursively.
    fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(files_under(&p))
            } else {
                out.push(p)
            }
        }
        out
    }

    #[tokio::test]
    async fn a_small_body_shorter_or_longer_than_announced_is_refused() {
        let (_dir, store) = store_with_two_pairs().await;
        let body =
            || futures_util::stream::iter([Ok::<_, Infallible>(Bytes::from_static(b"12345"))]);
        let short = store.stage(Some(6), body()).await.err().unwrap();
        assert!(matches!(
            short,
            UploadError::Store(StoreError::IncompleteBody)
        ));
        let long = store.stage(Some(4), body()).await.err().unwrap();
        assert!(matches!(
            long,
            UploadError::Store(StoreError::IncompleteBody)
        ));
    }

    /// Files under the disks' temp folders.
    fn temp_files(dir: &std::path::Path) -> usize {
        files_under(dir)
            .iter()
            .filter(|p| {
                p.strip_prefix(dir)
                    .unwrap()
                    .components()
                    .any(|c| c.as_os_str() == placement::disk::TMP_DIR)
            })
            .count()
    }

    /// Every file under `dir` but the metadata, with its modification time.
    fn content_and_temp_files(dir: &std::path::Path) -> Vec<(std::path::PathBuf, SystemTime)> {
        files_under(dir)
            .into_iter()
            .filter(|p| !p.starts_with(dir.join("meta")))
            .map(|p| {
                let modified = std::fs::metadata(&p).unwrap().modified().unwrap();
                (p, modified)
            })
            .collect()
    }

    fn inc_or_insert(sha1: Sha1) -> impl Fn(ContentSource) -> Command {
        move |src| match src {
            ContentSource::Existing => Command::Inc {
                sha1,
                magic: Magic::random(),
            },
            ContentSource::Stored(pair) => Command::InsertOrInc {
                sha1,
                magic: Magic::random(),
                pair,
            },
        }
    }

    /// Stores `body` (sent in chunks of the sizes given, cycling), then sends it again: the
    /// second time no file on any disk is created, removed or touched.
    async fn assert_duplicate_touches_no_disk(body: Vec<u8>, chunk_sizes: &[usize]) {
        let (dir, store) = store_with_two_pairs().await;
        let chunks = || {
            let mut out = Vec::new();
            let mut rest = Bytes::from(body.clone());
            for n in chunk_sizes.iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                out.push(Ok::<_, Infallible>(rest.split_to((*n).min(rest.len()))));
            }
            futures_util::stream::iter(out)
        };
        let size = Some(body.len() as u64);
        let first = store.stage(size, chunks()).await.unwrap();
        assert_eq!(first.digests, ContentHasher::digest(&body));
        let sha1 = first.digests.sha1;
        store
            .commit_content::<FileRecord>(first, None, inc_or_insert(sha1))
            .await
            .unwrap();
        let before = content_and_temp_files(dir.path());
        assert_eq!(before.len(), 2, "one copy per disk, no temp: {before:?}");
        for (path, _) in &before {
            assert!(std::fs::read(path).unwrap() == body, "{path:?} differs");
        }
        let second = store.stage(size, chunks()).await.unwrap();
        store
            .commit_content::<FileRecord>(second, None, inc_or_insert(sha1))
            .await
            .unwrap();
        assert_eq!(content_and_temp_files(dir.path()), before);
        assert_eq!(store.file(sha1).await.unwrap().unwrap().refs, 2);
    }

    #[tokio::test]
    async fn a_duplicate_of_content_with_no_good_copy_heals_it() {
        let (dir, store) = store_with_two_pairs().await;
        let body = Bytes::from(vec![5u8; 100_000]);
        let size = Some(body.len() as u64);
        let stream = || futures_util::stream::iter([Ok::<_, Infallible>(body.clone())]);
        let first = store.stage(size, stream()).await.unwrap();
        let sha1 = first.digests.sha1;
        store
            .commit_content::<FileRecord>(first, None, inc_or_insert(sha1))
            .await
            .unwrap();
        for (path, _) in content_and_temp_files(dir.path()) {
            std::fs::remove_file(path).unwrap();
        }
        let again = store.stage(size, stream()).await.unwrap();
        let record = store
            .commit_content::<FileRecord>(again, None, inc_or_insert(sha1))
            .await
            .unwrap();
        assert_eq!(record.refs, 2);
        assert_eq!(
            content_and_temp_files(dir.path()).len(),
            2,
            "both copies again"
        );
        let expect = Expect {
            size_bytes: body.len() as u64,
            crc32: crc32fast::hash(&body),
        };
        let ReadBody::Buffered(got) = store.read_content(sha1, expect, None).await.unwrap() else {
            panic!("a small body is read whole")
        };
        assert_eq!(got, body);
    }

    #[tokio::test]
    async fn a_small_duplicate_never_touches_a_disk() {
        assert_duplicate_touches_no_disk(vec![7u8; 200_000], &[200_000]).await;
    }

    #[tokio::test]
    async fn a_large_duplicate_in_odd_chunks_never_touches_a_disk() {
        // Odd and tiny chunks, as a slow client's TCP segments arrive; over 1 MiB, so the
        // probe's empty temp files come and go.
        let body: Vec<u8> = (0..8 * 1024 * 1024 + 3).map(|i| (i % 239) as u8).collect();
        assert_duplicate_touches_no_disk(body, &[1, 7, 5000, 40_000, 1 << 20]).await;
    }

    #[tokio::test]
    async fn past_the_memory_budget_bodies_stream_to_disk() {
        let (dir, store) = store_with_two_pairs_and(Limits {
            memory_stage_bytes: 300_000,
            ..Limits::default()
        })
        .await;
        let body = |b: u8| {
            futures_util::stream::iter([Ok::<_, Infallible>(Bytes::from(vec![b; 200_000]))])
        };
        let temps = || temp_files(dir.path());
        let in_memory = store.stage(Some(200_000), body(1)).await.unwrap();
        assert_eq!(temps(), 0);
        // The budget holds 300 000 bytes: the second body does not fit beside the first.
        let on_disk = store.stage(Some(200_000), body(2)).await.unwrap();
        assert_eq!(
            temps(),
            2,
            "both copies of the second body under temp names"
        );
        on_disk.discard().await;
        assert_eq!(temps(), 0);
        // Committing the first gives its share back.
        let sha1 = in_memory.digests.sha1;
        store
            .commit_content::<FileRecord>(in_memory, None, inc_or_insert(sha1))
            .await
            .unwrap();
        let again = store.stage(Some(200_000), body(3)).await.unwrap();
        assert_eq!(temps(), 0);
        again.discard().await;
        // A budget of 0 sends every body to disk.
        let (dir0, store0) = store_with_two_pairs_and(Limits {
            memory_stage_bytes: 0,
            ..Limits::default()
        })
        .await;
        let staged = store0
            .stage(
                Some(5),
                futures_util::stream::iter([Ok::<_, Infallible>(Bytes::from_static(b"12345"))]),
            )
            .await
            .unwrap();
        let temps0 = temp_files(dir0.path());
        assert_eq!(temps0, 2);
        staged.discard().await;
    }
}
