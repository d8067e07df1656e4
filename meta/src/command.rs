//! The one way to change metadata: a [`Command`], applied by [`super::apply::apply`].
//!
//! Commands are plain serializable values that carry everything `apply` needs, including
//! timestamps and magics chosen by the caller, so that applying the same command to the same
//! state always gives the same result. That is what lets a later replication layer ship
//! commands through a Raft log instead of shipping database pages.

use placement::{Magic, PairFlags, PairId, PairRecord, Sha1};
use serde::{Deserialize, Serialize};

use crate::MetaError;
use crate::acl::CannedAcl;
use crate::bucket_copies::BucketCopy;
use crate::checksums::UploadChecksum;
use crate::groups::GroupId;
use crate::lifecycle::rules::{LifecycleRule, VersionActions};
use crate::tags::TagSet;
use crate::versions::{LockConfig, Retention, VersionId, Versioning};

use super::jobs::{JobOp, JobRecord, JobState};
use super::keys::{KeyRecord, Rights};
use super::tables::{Checksum, CorsRule, FileRecord, ObjectRecord, PartRecord, UploadRecord};

// Defined beside the rules that give it (`FileRecord::dec`); named here too, beside the
// responses that carry it.
pub use crate::filedb::DecOutcome;

/// Where the content of a new reference is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContentSource {
    /// The content was found in FileDB before the upload was committed: only increment.
    /// If it has gone meanwhile, `apply` answers [`Response::ContentGone`] and changes
    /// nothing, and the caller commits its own copies and retries with `Stored`.
    Existing,
    /// The caller wrote both copies to this pair: insert the record, or increment it if a
    /// racing loader got there first (its pair wins; ours become junk for Valkyrie).
    Stored(PairId),
}

/// An object as the caller has stored it; `apply` assigns its `seq`.
pub type NewObject = ObjectRecord;

/// A conditional write (`If-None-Match: *`, `If-Match: <etag>` or `If-Match: *` on PUT,
/// CompleteMultipartUpload, CopyObject and DeleteObject), checked in the same transaction
/// as the change, so that of two racing writers at most one passes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WritePrecondition {
    /// The key must not exist.
    NoneMatchAny,
    /// The key must exist with this ETag (quoted, as S3 shows it).
    Match(String),
    /// The key must exist (`If-Match: *`). Format version 3: appended, so the two
    /// variants above keep their encoding.
    MatchAny,
}

impl WritePrecondition {
    /// Whether the current object of the key (None: there is none) lets the write go on:
    /// `PreconditionFailed`, or `NoSuchKey` for an `If-Match` on a missing key (S3 answers
    /// 404 there, not 412).
    pub fn check(&self, current: Option<&ObjectRecord>) -> Result<(), MetaError> {
        match (self, current) {
            (WritePrecondition::NoneMatchAny, None) => Ok(()),
            (WritePrecondition::NoneMatchAny, Some(_)) => Err(MetaError::PreconditionFailed),
            (WritePrecondition::Match(_) | WritePrecondition::MatchAny, None) => {
                Err(MetaError::NoSuchKey)
            }
            (WritePrecondition::MatchAny, Some(_)) => Ok(()),
            (WritePrecondition::Match(etag), Some(o)) if o.etag() == *etag => Ok(()),
            (WritePrecondition::Match(_), Some(_)) => Err(MetaError::PreconditionFailed),
        }
    }
}

/// What `DeleteObjectsMatching` did with one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeleteOutcome {
    /// The object was removed and its content released.
    Deleted,
    /// There was no object and no condition: S3 reports it deleted all the same.
    Absent,
    /// The key's condition did not hold: the object stays.
    PreconditionFailed,
    /// The key carried a condition and has no object.
    NoSuchKey,
}

/// Every metadata mutation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Adds or replaces a disk pair in PairDB (configuration sync).
    PutPair {
        id: PairId,
        record: PairRecord,
    },
    /// Adds a pair under the next free id (one past the highest).
    AddPair {
        record: PairRecord,
    },
    /// Sets then clears flag bits of a pair, atomically.
    SetPairFlags {
        id: PairId,
        set: PairFlags,
        clear: PairFlags,
    },
    CreateBucket {
        bucket: String,
        created_ms: u64,
    },
    /// Sets (or with `None` removes) a bucket's CORS rules.
    SetBucketCors {
        bucket: String,
        rules: Option<Vec<CorsRule>>,
    },
    /// Refused while the bucket holds objects.
    DeleteBucket {
        bucket: String,
    },
    /// Creates or replaces `bucket/key`: the new content is referenced and the replaced
    /// object's content dereferenced in the same transaction.
    PutObject {
        bucket: String,
        key: String,
        object: NewObject,
        source: ContentSource,
        now_secs: u64,
        precondition: Option<WritePrecondition>,
    },
    /// A metadata-only copy: `object` references the content of `from_bucket/from_key`,
    /// which must still be the version (`from_seq`) the caller read.
    CopyObject {
        bucket: String,
        key: String,
        object: NewObject,
        from_bucket: String,
        from_key: String,
        from_seq: u64,
        now_secs: u64,
    },
    /// Removes up to 1000 keys of a bucket; missing keys are not errors.
    DeleteObjects {
        bucket: String,
        keys: Vec<String>,
        now_secs: u64,
    },
    CreateUpload {
        upload_id: String,
        upload: UploadRecord,
    },
    /// Adds or replaces part `part_number` of an upload.
    PutPart {
        upload_id: String,
        part_number: u32,
        part: PartRecord,
        source: ContentSource,
        now_secs: u64,
    },
    /// Ends an upload: `object` (the concatenated parts, stored by the caller) becomes
    /// `bucket/key`; every part is dereferenced. `parts` names the parts the caller read,
    /// which must be unchanged.
    CompleteUpload {
        upload_id: String,
        object: NewObject,
        parts: Vec<(u32, Sha1)>,
        source: ContentSource,
        now_secs: u64,
    },
    /// Drops an upload and dereferences its parts.
    AbortUpload {
        upload_id: String,
        now_secs: u64,
    },
    /// Removes `bucket/key` if present and dereferences its content.
    DeleteObject {
        bucket: String,
        key: String,
        now_secs: u64,
    },
    /// The article's `inc(sha1, magic)`: fails with NotFound when the content is absent.
    Inc {
        sha1: Sha1,
        magic: Magic,
    },
    /// The end of the article's `upload`: insert the record or increment it.
    InsertOrInc {
        sha1: Sha1,
        magic: Magic,
        pair: PairId,
    },
    /// Valkyrie dropped a `deleting` entry (only if it still names `pair`).
    RemoveDeleting {
        sha1: Sha1,
        pair: PairId,
    },
    /// UNMOVE copied the content to pair `to`, or an upload healed content with no good
    /// copy left on `from` by writing new copies to `to`: switch the record, only if it
    /// still names `from` (a concurrent dec or re-upload must not be lost).
    Relocate {
        sha1: Sha1,
        from: PairId,
        to: PairId,
    },
    /// The article's `dec(sha1, magic)`.
    Dec {
        sha1: Sha1,
        magic: Magic,
        now_secs: u64,
    },
    /// Sets (or with `None` removes) a bucket's lifecycle rules; the expiry pass over the
    /// bucket starts again from its first key.
    SetBucketLifecycle {
        bucket: String,
        rules: Option<Vec<LifecycleRule>>,
    },
    /// The lifecycle worker's batch: removes each `(key, seq)` that is still that version
    /// and that the bucket's current rules expire by `now_secs` (with lifecycle days of
    /// `day_secs`), releasing its content; then records `resume_after` as the pass's
    /// cursor (None: the pass is over). At most 1000 keys.
    ExpireObjects {
        bucket: String,
        objects: Vec<(String, u64)>,
        resume_after: Option<String>,
        day_secs: u64,
        now_secs: u64,
    },
    /// Adds an access key (id and secret chosen by the caller, so `apply` stays
    /// deterministic); refused if the id exists or [`super::keys::KEYS_MAX`] is reached.
    CreateKey {
        access_key: String,
        record: KeyRecord,
    },
    /// Removes an access key: its next request is refused. Buckets it owns stay (the
    /// bootstrap key and keys granted rights still reach them).
    DeleteKey {
        access_key: String,
    },
    /// Sets then clears rights of a key on an existing bucket.
    SetKeyRights {
        access_key: String,
        bucket: String,
        set: Rights,
        clear: Rights,
    },
    /// Creates a bucket owned by `owner` (`None`: the bootstrap key). `CreateBucket`
    /// stays for log entries written before owners, as a bucket of the bootstrap key.
    CreateOwnedBucket {
        bucket: String,
        created_ms: u64,
        owner: Option<String>,
    },
    /// Starts a background job; answers its id.
    CreateJob {
        op: JobOp,
        now_ms: u64,
    },
    /// One chunk of a running job (see [`super::jobs::chunk`]): the objects removed are
    /// released in the same transaction.
    JobChunk {
        id: u64,
        keys: Vec<String>,
        through: String,
        done: bool,
        now_ms: u64,
    },
    /// Ends a running job as cancelled or failed.
    EndJob {
        id: u64,
        state: JobState,
        now_ms: u64,
    },
    /// A delete-bucket job ends these uploads of its bucket (at most
    /// [`super::jobs::CHUNK_UPLOADS_MAX`]) and releases their parts; answers
    /// `JobChunkDone` with the count ended.
    JobAbortUploads {
        id: u64,
        upload_ids: Vec<String>,
        now_ms: u64,
    },
    /// The final command of a delete-bucket job: deletes the bucket (ending any upload
    /// left) if it holds no object, else marks the job failed (objects written after its
    /// start survive it); answers `Job` with the job as it is now.
    JobDeleteBucket {
        id: u64,
        now_ms: u64,
    },
    /// Raises the group's format version (see `cluster_version.rs`); proposed by the
    /// leader once every member knows `version`. New variants go after this one: a
    /// variant's index is its encoding.
    SetClusterVersion {
        version: u32,
    },
    /// `command` (a `CompleteUpload`, `CopyObject` or `DeleteObject` of `bucket/key`)
    /// applied only if the key's current object passes `precondition`, in the same
    /// transaction. Format version 3.
    Conditional {
        bucket: String,
        key: String,
        precondition: WritePrecondition,
        command: Box<Command>,
    },
    /// `DeleteObjects` where a key may carry a condition (the `ETag` of its `<Object>`):
    /// each key is removed only if its condition holds; answers `ObjectsDeletedMatching`.
    /// At most 1000 keys. Format version 3.
    DeleteObjectsMatching {
        bucket: String,
        objects: Vec<(String, Option<WritePrecondition>)>,
        now_secs: u64,
    },
    /// Sets a bucket's versioning state (see `docs/versions.md`). Format version 4.
    SetBucketVersioning {
        bucket: String,
        state: Versioning,
    },
    /// Removes one version (or delete marker) of `bucket/key`, releasing its content
    /// once; the next newest becomes current. Format version 4.
    DeleteVersion {
        bucket: String,
        key: String,
        version: VersionId,
        now_secs: u64,
        /// `x-amz-bypass-governance-retention` from a caller with the owner right.
        bypass_governance: bool,
    },
    /// `SetBucketLifecycle` whose rules act on versions: each rule's
    /// [`VersionActions`] travel beside it (`versions[i]` is `rules[i]`'s), since a rule's
    /// own encoding predates them. Format version 4.
    SetBucketLifecycleWithVersions {
        bucket: String,
        rules: Option<Vec<LifecycleRule>>,
        versions: Vec<VersionActions>,
    },
    /// The lifecycle worker's batch over a versioned bucket's `versions` table: removes
    /// each `(key, number)` that the bucket's current rules expire by `now_secs` (a
    /// noncurrent version past its NoncurrentDays and beyond its NewerNoncurrentVersions,
    /// or a delete marker that is its key's only version), releasing an object version's
    /// content once; then records `resume_after` as that pass's cursor. At most 1000
    /// entries. Answers `ObjectsDeleted`. Format version 4.
    ExpireVersions {
        bucket: String,
        versions: Vec<(String, u64)>,
        resume_after: Option<(String, u64)>,
        day_secs: u64,
        now_secs: u64,
    },
    /// `CreateOwnedBucket` with object lock enabled (and so versioning, for good).
    /// Format version 4.
    CreateLockedBucket {
        bucket: String,
        created_ms: u64,
        owner: Option<String>,
    },
    /// `PutObjectLockConfiguration`: the default retention of new versions; enables
    /// object lock on a bucket whose versioning is Enabled. Format version 4.
    SetObjectLockConfig {
        bucket: String,
        config: LockConfig,
    },
    /// `PutObjectRetention` / `PutObjectLegalHold` on one version (None: the current one),
    /// within S3's rules (an active COMPLIANCE retention is only extended; GOVERNANCE
    /// yields to the bypass). Format version 4.
    SetObjectLock {
        bucket: String,
        key: String,
        version: Option<VersionId>,
        change: LockChange,
        bypass_governance: bool,
        now_ms: u64,
    },
    /// `command` (a PutObject, CopyObject or CompleteUpload of `bucket/key`, possibly
    /// under a `Conditional`) with the object lock its request asked for set on the
    /// version it writes, in the same transaction. Format version 4.
    Locked {
        bucket: String,
        key: String,
        change: LockChange,
        command: Box<Command>,
    },
    /// `CreateUpload` of an upload that declared a checksum algorithm and type
    /// (`x-amz-checksum-algorithm`, `x-amz-checksum-type`), kept beside the upload record
    /// (see `checksums.rs`). Format version 4.
    CreateUploadWithChecksum {
        upload_id: String,
        upload: UploadRecord,
        checksum: UploadChecksum,
    },
    /// `PutPart` of a part whose checksum the gateway verified (or computed, for an
    /// upload that declared an algorithm), kept beside the part record. Format version 4.
    PutPartWithChecksum {
        upload_id: String,
        part_number: u32,
        part: PartRecord,
        source: ContentSource,
        now_secs: u64,
        checksum: Checksum,
    },
    /// `command` with the tags its request gave (`x-amz-tagging`, or a copy's source tags)
    /// on what it writes, in the same transaction: a PutObject, CopyObject or
    /// CompleteUpload of `bucket/key` (possibly under `Conditional` or `Locked`) tags the
    /// version it writes; a CreateUpload (or `CreateUploadWithChecksum`) keeps them for the
    /// object it completes into. Format version 4.
    Tagged {
        bucket: String,
        key: String,
        tags: TagSet,
        command: Box<Command>,
    },
    /// `PutObjectTagging` / `DeleteObjectTagging` (an empty set) on one version (None: the
    /// current one); answers `TagsSet`. Format version 4.
    SetObjectTags {
        bucket: String,
        key: String,
        version: Option<VersionId>,
        tags: TagSet,
    },
    /// `PutBucketTagging` / `DeleteBucketTagging` (an empty set). Format version 4.
    SetBucketTags {
        bucket: String,
        tags: TagSet,
    },
    /// `command` with the canned ACL its request gave (`x-amz-acl`) on what it writes, in
    /// the same transaction: as `Tagged` for a write of `bucket/key` or a new upload, and
    /// for a CreateBucket (`CreateOwnedBucket`, `CreateLockedBucket`) with an empty `key`,
    /// the bucket's. Format version 4.
    WithAcl {
        bucket: String,
        key: String,
        acl: CannedAcl,
        command: Box<Command>,
    },
    /// `PutObjectAcl` on one version (None: the current one); answers `AclSet`. Format
    /// version 4.
    SetObjectAcl {
        bucket: String,
        key: String,
        version: Option<VersionId>,
        acl: CannedAcl,
    },
    /// `PutBucketAcl`. Format version 4.
    SetBucketAcl {
        bucket: String,
        acl: CannedAcl,
    },
    /// Replaces the shard map (the root group's; see `shard_map.rs`): `map` must be well
    /// formed and carry the stored version + 1; answers `MapVersion`. Format version 5.
    SetShardMap {
        map: crate::groups::ShardMap,
    },
    /// The FileDB half of a cross-group PUT, copy or part (`docs/scaling.md`, section 3;
    /// format 5): takes reference `ref_id`, with `magic`, on `sha1` for the index entry of
    /// (`bucket`, `key`), recorded `Pending` in `ref_log` until `deadline_ms`. With `pair`,
    /// content just stored there (insert or increment); without, the content must exist
    /// (`NotFound`). A retry (the row is there) changes nothing and answers the record; an
    /// inc past its deadline (`now_ms`) is refused, and so is one of a reference already
    /// released. Answers `RefTaken`.
    RefInc {
        sha1: Sha1,
        magic: Magic,
        ref_id: u64,
        pair: Option<PairId>,
        bucket: String,
        key: String,
        deadline_ms: u64,
        now_ms: u64,
    },
    /// The reconciler's decisions on pending references (at most
    /// [`crate::ref_log::BATCH_MAX`]): each confirmed (row dropped, reference kept) or
    /// released (dec'd, row `Released`); a reference with no pending row is left alone.
    /// Answers `RefOutcomes`, one per settle. Format 5.
    Settle {
        settles: Vec<crate::ref_log::Settle>,
        now_ms: u64,
    },
    /// Decs sent from an index group's outbox (at most [`crate::ref_log::BATCH_MAX`]), each
    /// applied once by (sha1, ref_id): a released one is a duplicate and changes nothing,
    /// a pending one is settled by it, one with no row is a confirmed reference's first
    /// dec; a magic other than the recorded one changes nothing. Answers `RefOutcomes`, one
    /// per dec. Format 5.
    DecBatch {
        decs: Vec<crate::ref_log::RefDec>,
        now_ms: u64,
    },
    /// Removes at most `limit` (capped at [`crate::ref_log::EXPIRE_MAX`]) `Released` rows
    /// older than [`crate::ref_log::RELEASED_KEEP_MS`] at `now_ms`, oldest first. Answers
    /// `RefsExpired`. Format 5.
    ExpireReleased {
        now_ms: u64,
        limit: u32,
    },
    /// Tells a group's replicas what the group owns: its part of `map` (`ownership.rs`).
    /// A later map only; an older or equal one changes nothing. Answers `MapVersion`, the
    /// version the group owns under. Format 6.
    SetOwnership {
        group: crate::groups::GroupId,
        map: crate::groups::ShardMap,
    },
    /// `command` (a `PutObject`, `CopyObject`, `PutPart`, `PutPartWithChecksum` or
    /// `CompleteUpload`, possibly under `Conditional`, `Locked`, `Tagged` or `WithAcl`)
    /// writes an entry of (`bucket`, `key`) whose content another group owns and has
    /// referenced already under `ref_id` (`RefInc`): it is not referenced again here, and
    /// the entry keeps `ref_id` for its release (`outbox.rs`). Refused with `Moved` if
    /// this group owns the content, `Fenced` if the reconciler fenced the reference, and
    /// as invalid if the ref_id is held or owed under the key already or has the top bit.
    /// Answers the inner command's response. Format 6.
    ForeignRef {
        bucket: String,
        key: String,
        ref_id: u64,
        command: Box<Command>,
    },
    /// Drops outbox rows whose decs their FileDB groups applied (at most
    /// [`crate::ref_log::BATCH_MAX`]); a row already gone is skipped. Answers
    /// `OutboxDone`, the rows dropped. Format 6.
    OutboxDone {
        rows: Vec<crate::outbox::OutboxRow>,
    },
    /// The reconciler's question about a reference pending past its deadline: `Present`
    /// if (`bucket`, `key`) holds `ref_id` or owes its dec, else a fence that refuses its
    /// entry from now on, and `Fenced`. Answers `Fence`. Format 6.
    Fence {
        bucket: String,
        key: String,
        ref_id: u64,
        now_ms: u64,
    },
    /// Removes at most `limit` (capped at [`crate::ref_log::EXPIRE_MAX`]) fences older
    /// than [`crate::outbox::FENCE_KEEP_MS`] at `now_ms`, oldest first. Answers
    /// `FencesExpired`. Format 6.
    ExpireFences {
        now_ms: u64,
        limit: u32,
    },
    /// Root: `map`, the next version of the stored map, is what a change under way will
    /// commit: a split (`handoff.rs`) or a group's replicas moved (`split.rs`). Every node
    /// opens the replicas it places on it, and root's leader drives the change until
    /// `SetShardMap` commits it. The same plan again changes nothing; another is refused
    /// while one is under way. Answers `MapVersion`. Format 7.
    PlanMap {
        map: crate::groups::ShardMap,
    },
    /// A split's step in the group that gives intervals away (`handoff.rs`): `group` owns
    /// its part of `map` (the planned map) from now on, refuses every write of what it
    /// gives away with `Moved`, and keeps those rows, still read here, for the copy. A
    /// map it owns under already changes nothing. Answers `MapVersion`. Format 7.
    HandOff {
        group: crate::groups::GroupId,
        map: crate::groups::ShardMap,
    },
    /// Ends the reads of a hand-off's intervals here (their new owner owns them). Answers
    /// `MapVersion`. Format 7.
    EndHandOff {
        group: crate::groups::GroupId,
        map_version: u64,
    },
    /// Removes at most `limit` (capped at [`crate::handoff::ROWS_MAX`]) rows of an ended
    /// hand-off; the batch that finds none left ends it. Answers `Dropped`. Format 7.
    DropHandedOff {
        group: crate::groups::GroupId,
        map_version: u64,
        limit: u32,
    },
    /// Rows copied from the group that handed their sha1s to `group` (at most
    /// [`crate::handoff::ROWS_MAX`]), written as they were there; refused with `Moved`
    /// unless `group` owns every row's sha1. Answers `Ingested`, or `Sealed` with nothing
    /// written once the copy is sealed. Format 7.
    Ingest {
        group: crate::groups::GroupId,
        rows: Vec<crate::handoff::FileRow>,
    },
    /// Rows copied from the index group that handed their keys to `group` (at most
    /// [`crate::handoff::ROWS_MAX`], see [`crate::index_handoff`]), written as they were
    /// there; refused with `Moved` unless `group` owns every row's key. Answers
    /// `Ingested`, or `Sealed` with nothing written once the copy is sealed. Format 10.
    IngestIndex {
        group: crate::groups::GroupId,
        rows: Vec<crate::index_handoff::IndexRow>,
    },
    /// Ends the copy into `group`: no `Ingest` is taken from now on (a driver that lost
    /// root's leadership mid-copy cannot write stale rows after the commit). Answers
    /// `MapVersion`, the version sealed under. Format 7.
    Seal {
        group: crate::groups::GroupId,
        map_version: u64,
    },
    /// Root: node `node` is leaving the cluster (`leaving`), or no longer is. While it
    /// leaves, root's leader moves its replicas off (the rebalance's first moves), places
    /// nothing new on it, and removes it from root once it holds none
    /// (`gateway admin cluster remove`). Answers `Done`. Format 8.
    SetLeaving {
        node: crate::groups::NodeId,
        leaving: bool,
    },
    /// Root: cancels the move planned at `version` (`gateway admin groups cancel`). Not
    /// `done`: marks it, and root's leader then reverses the membership steps it took;
    /// `done`: drops the marked plan (the map stays as it is), and a `SetShardMap` of that
    /// plan is refused until the next plan. A split's plan is refused (it runs to its
    /// commit). Answers `MapVersion`. Format 8.
    CancelPlan {
        version: u64,
        done: bool,
    },
    /// The audit's alarm (`audit.rs`): FileDB counts fewer references to `sha1` than
    /// entries name it, confirmed over two passes. Sets DO_NOT_DELETE on its record if
    /// the record still has the `refs` and `magic` the audit read (a record that changed
    /// since is left for the next pass). Answers `Marked`. Format 8.
    AuditMark {
        sha1: Sha1,
        refs: u32,
        magic: u32,
    },
    /// An index group: root's records of buckets it holds keys of, each taken if newer
    /// than the copy it holds (`bucket_copies.rs`); refused in root. At most
    /// [`crate::bucket_copies::COPIES_MAX`]. Answers `Done`. Format 9.
    CopyBuckets {
        copies: Vec<BucketCopy>,
    },
    /// `CopyBuckets` with each bucket's lifecycle rules (`lifecycles[i]` is
    /// `copies[i]`'s: an encoded rules-only lifecycle record, None for none), which the
    /// group's own lifecycle sweep expires its keys by. Format 11.
    CopyBucketsWithRules {
        copies: Vec<BucketCopy>,
        lifecycles: Vec<Option<Vec<u8>>>,
    },
    /// `CreateJob` for a bucket whose keys index groups other than root own (in root):
    /// `fences` holds each such group's object sequence number, read in that group before
    /// (an object written there after the read has a higher one and survives the job), and
    /// `others` the objects under the job's prefix those groups held then (the estimate's
    /// share). Refused unless the groups are exactly the bucket's others in the committed
    /// map, with no change of them planned. Answers `JobCreated`. Format 12.
    CreateJobFenced {
        op: JobOp,
        now_ms: u64,
        fences: Vec<(GroupId, u64)>,
        others: u64,
    },
    /// A fenced job's page of keys in an index group other than root: each key whose
    /// object is not newer than `fence_seq` is removed, its content released as a
    /// DELETE's is; a key gone or newer is left. At most
    /// [`crate::jobs::CHUNK_KEYS_MAX`] keys. Answers `ObjectsDeleted`. Format 12.
    DeleteFenced {
        bucket: String,
        keys: Vec<String>,
        fence_seq: u64,
        now_secs: u64,
    },
    /// `JobChunk` of a fenced job (in root): `keys` are the page's keys root owns,
    /// `deleted_elsewhere` the objects the page's `DeleteFenced` removed in the other
    /// groups. Answers `JobChunkDone`. Format 12.
    JobChunkAcross {
        id: u64,
        bucket: String,
        keys: Vec<String>,
        through: String,
        done: bool,
        deleted_elsewhere: u64,
        now_ms: u64,
    },
}

/// A change to a version's object lock; None fields are left as they are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockChange {
    /// Some(None) removes the retention.
    pub retention: Option<Option<Retention>>,
    pub legal_hold: Option<bool>,
}

/// The content reference a write takes (see [`Command::content_reference`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContentRef {
    pub sha1: Sha1,
    pub magic: Magic,
    /// The pair the caller stored the content on; None: it must exist already.
    pub stored: Option<PairId>,
}

impl Command {
    /// The bucket whose record (in root's `buckets` table) this command may change, through
    /// the wrappers a bucket's creation comes in (`Tagged`, `WithAcl`): the index groups
    /// of that bucket get the new record (`bucket_copies.rs`). `JobDeleteBucket` names no
    /// bucket: its change reaches them by root's leader's round.
    pub fn changed_bucket(&self) -> Option<&str> {
        match self {
            Command::CreateBucket { bucket, .. }
            | Command::CreateOwnedBucket { bucket, .. }
            | Command::CreateLockedBucket { bucket, .. }
            | Command::SetBucketCors { bucket, .. }
            | Command::DeleteBucket { bucket }
            | Command::SetBucketVersioning { bucket, .. }
            | Command::SetObjectLockConfig { bucket, .. }
            | Command::SetBucketLifecycle { bucket, .. }
            | Command::SetBucketLifecycleWithVersions { bucket, .. } => Some(bucket),
            Command::Tagged { command, .. } | Command::WithAcl { command, .. } => {
                command.changed_bucket()
            }
            _ => None,
        }
    }

    /// The one key of the S3 index this command writes, where the command names it: the
    /// group owning the key applies it. None for a command of several keys, of an upload
    /// named only by id (its caller names the key: `Replicas::execute_at`), or outside
    /// the index.
    pub fn index_key(&self) -> Option<(&str, &str)> {
        match self {
            Command::PutObject { bucket, key, .. }
            | Command::CopyObject { bucket, key, .. }
            | Command::DeleteObject { bucket, key, .. }
            | Command::DeleteVersion { bucket, key, .. }
            | Command::SetObjectLock { bucket, key, .. }
            | Command::SetObjectTags { bucket, key, .. }
            | Command::SetObjectAcl { bucket, key, .. }
            | Command::Conditional { bucket, key, .. }
            | Command::Locked { bucket, key, .. }
            | Command::ForeignRef { bucket, key, .. } => Some((bucket, key)),
            Command::CreateUpload { upload, .. }
            | Command::CreateUploadWithChecksum { upload, .. } => {
                Some((&upload.bucket, &upload.key))
            }
            // Around a bucket's creation, the tags or ACL are the bucket's.
            Command::Tagged {
                bucket,
                key,
                command,
                ..
            }
            | Command::WithAcl {
                bucket,
                key,
                command,
                ..
            } => command.changed_bucket().is_none().then_some((bucket, key)),
            _ => None,
        }
    }

    /// Every key of the S3 index this command names (see [`Command::index_key`]), a
    /// DeleteObjects' and an expiry's included: a group applies it only if it owns them
    /// all.
    pub fn index_keys(&self) -> Vec<(&str, &str)> {
        match self {
            Command::DeleteObjects { bucket, keys, .. }
            | Command::DeleteFenced { bucket, keys, .. }
            | Command::JobChunkAcross { bucket, keys, .. } => {
                keys.iter().map(|k| (bucket.as_str(), k.as_str())).collect()
            }
            Command::DeleteObjectsMatching {
                bucket, objects, ..
            } => objects
                .iter()
                .map(|(k, _)| (bucket.as_str(), k.as_str()))
                .collect(),
            Command::ExpireObjects {
                bucket, objects, ..
            }
            | Command::ExpireVersions {
                bucket,
                versions: objects,
                ..
            } => objects
                .iter()
                .map(|(k, _)| (bucket.as_str(), k.as_str()))
                .collect(),
            other => other.index_key().into_iter().collect(),
        }
    }

    /// The content reference a write takes: the new object's or part's content, looked for
    /// through the wrappers a write may come in (`Conditional`, `Locked`, `Tagged`,
    /// `WithAcl`; not `ForeignRef`, whose reference is taken elsewhere). None for a
    /// command that takes none.
    pub fn content_reference(&self) -> Option<ContentRef> {
        let stored = |source: &ContentSource| match source {
            ContentSource::Existing => None,
            ContentSource::Stored(pair) => Some(*pair),
        };
        match self {
            Command::PutObject { object, source, .. }
            | Command::CompleteUpload { object, source, .. } => Some(ContentRef {
                sha1: object.sha1,
                magic: object.magic,
                stored: stored(source),
            }),
            Command::CopyObject { object, .. } => Some(ContentRef {
                sha1: object.sha1,
                magic: object.magic,
                stored: None,
            }),
            Command::PutPart { part, source, .. }
            | Command::PutPartWithChecksum { part, source, .. } => Some(ContentRef {
                sha1: part.sha1,
                magic: part.magic,
                stored: stored(source),
            }),
            Command::Conditional { command, .. }
            | Command::Locked { command, .. }
            | Command::Tagged { command, .. }
            | Command::WithAcl { command, .. } => command.content_reference(),
            _ => None,
        }
    }

    /// Whether applying the command twice leaves what applying it once does: the commands
    /// across groups, each applied once by its own keys (a `RefInc` by `(sha1, ref_id)`,
    /// a split's steps by the map version). Only these may be sent again when their
    /// outcome is unknown (a leader replaced while it held them).
    pub fn applies_once(&self) -> bool {
        matches!(
            self,
            Command::RefInc { .. }
                | Command::Settle { .. }
                | Command::DecBatch { .. }
                | Command::ForeignRef { .. }
                | Command::OutboxDone { .. }
                | Command::Fence { .. }
                | Command::SetOwnership { .. }
                | Command::HandOff { .. }
                | Command::EndHandOff { .. }
                | Command::Ingest { .. }
                | Command::IngestIndex { .. }
                | Command::Seal { .. }
        )
    }

    /// The one content a FileDB command acts on, which routes it to the content's group
    /// (`Inc`, `InsertOrInc`, `Dec`, `RemoveDeleting`, `Relocate`, `RefInc`, `AuditMark`). None for
    /// any other command, the batches of several contents (`Settle`, `DecBatch`) among them.
    pub fn filedb_sha1(&self) -> Option<Sha1> {
        match self {
            Command::Inc { sha1, .. }
            | Command::InsertOrInc { sha1, .. }
            | Command::Dec { sha1, .. }
            | Command::RemoveDeleting { sha1, .. }
            | Command::Relocate { sha1, .. }
            | Command::RefInc { sha1, .. }
            | Command::AuditMark { sha1, .. } => Some(*sha1),
            _ => None,
        }
    }

    /// Calls `f` with the content of each FileDB operation the command is (what a split
    /// of the group's sha1 space would move away): a command about one content or a
    /// write that references one in place is one, a batch (`Settle`, `DecBatch`) one per
    /// reference, the rest none.
    pub fn for_each_filedb_op(&self, mut f: impl FnMut(&Sha1)) {
        match self {
            Command::Settle { settles, .. } => settles.iter().for_each(|s| f(&Sha1(s.sha1))),
            Command::DecBatch { decs, .. } => decs.iter().for_each(|d| f(&Sha1(d.sha1))),
            other => {
                if let Some(sha1) = other
                    .filedb_sha1()
                    .or_else(|| other.content_reference().map(|c| c.sha1))
                {
                    f(&sha1);
                }
            }
        }
    }

    /// `command` (a write of `bucket/key`) with `tags` on what it writes: under
    /// [`Command::Tagged`] when there are some, else as it is (the command every release
    /// knows).
    pub fn tagged(bucket: &str, key: &str, tags: &TagSet, command: Command) -> Command {
        if tags.is_empty() {
            return command;
        }
        Command::Tagged {
            bucket: bucket.to_string(),
            key: key.to_string(),
            tags: tags.clone(),
            command: Box::new(command),
        }
    }

    /// `command` (a write of `bucket/key`, or with an empty `key` a CreateBucket) with
    /// `acl` on what it writes: under [`Command::WithAcl`] unless it is private, the
    /// default.
    pub fn with_acl(bucket: &str, key: &str, acl: CannedAcl, command: Command) -> Command {
        if acl == CannedAcl::Private {
            return command;
        }
        Command::WithAcl {
            bucket: bucket.to_string(),
            key: key.to_string(),
            acl,
            command: Box::new(command),
        }
    }

    /// The command that sets a bucket's lifecycle `rules` (None: removes them): the one
    /// every release knows unless a rule acts on versions, else the one whose version
    /// actions travel beside the rules (which is how they are encoded).
    pub fn set_lifecycle(bucket: String, rules: Option<Vec<LifecycleRule>>) -> Command {
        // Tag filters are variants older releases cannot decode: they go in the format-4
        // command too.
        let on_versions = rules.as_ref().is_some_and(|r| {
            r.iter()
                .any(|r| !r.versions.is_none() || !r.filter.tags().is_empty())
        });
        if !on_versions {
            return Command::SetBucketLifecycle { bucket, rules };
        }
        let mut rules = rules.unwrap_or_default();
        let versions = rules
            .iter_mut()
            .map(|r| std::mem::take(&mut r.versions))
            .collect();
        Command::SetBucketLifecycleWithVersions {
            bucket,
            rules: Some(rules),
            versions,
        }
    }

    /// Whether applying the command may change the `keys` table, whose in-memory copy
    /// must then be reloaded. DeleteBucket (and a delete-bucket job's end) drops the
    /// bucket's grants.
    pub fn touches_keys(&self) -> bool {
        matches!(
            self,
            Command::CreateKey { .. }
                | Command::DeleteKey { .. }
                | Command::SetKeyRights { .. }
                | Command::DeleteBucket { .. }
                | Command::JobDeleteBucket { .. }
        )
    }
}

/// The result of a successfully applied command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Done,
    /// The id and record of a pair after `AddPair` or `SetPairFlags`.
    Pair(PairId, PairRecord),
    /// The content record after an `Inc` or `InsertOrInc`.
    File(FileRecord),
    Dec(DecOutcome),
    /// `PutObject` stored the object with this sequence number; `replaced` is the object
    /// it overwrote and `released` what happened to that object's content.
    ObjectPut {
        seq: u64,
        replaced: Option<ObjectRecord>,
        released: Option<DecOutcome>,
    },
    /// `PutObject` with [`ContentSource::Existing`] found no live record: nothing changed.
    ContentGone,
    /// `DeleteObjects`: for each key, whether it existed.
    ObjectsDeleted(Vec<bool>),
    /// `Relocate`: whether the record was switched.
    Relocated(bool),
    /// `PutPart` stored the part.
    PartPut,
    /// `DeleteObject` removed this object (None: there was none).
    ObjectDeleted {
        removed: Option<ObjectRecord>,
        released: Option<DecOutcome>,
    },
    /// `CreateJob`: the new job's id.
    JobCreated(u64),
    /// `JobChunk`: objects deleted, and whether the job still runs.
    JobChunkDone {
        deleted: u32,
        running: bool,
    },
    /// `EndJob`: the job as it is now.
    Job(JobRecord),
    /// `SetClusterVersion`: the group's format version after it.
    ClusterVersion(u32),
    /// `DeleteObjectsMatching`: what happened to each key, in order.
    ObjectsDeletedMatching(Vec<DeleteOutcome>),
    /// A PUT, copy or completion in a versioned bucket stored this version.
    VersionStored {
        seq: u64,
        version_id: String,
    },
    /// A DELETE in a versioned bucket added this delete marker.
    MarkerAdded {
        version_id: String,
    },
    /// `DeleteVersion` removed this version (a delete marker if `marker`).
    VersionDeleted {
        version_id: String,
        marker: bool,
    },
    /// `SetObjectTags` set the tags of this version (None: the bucket is unversioned).
    TagsSet {
        version_id: Option<String>,
    },
    /// `SetObjectAcl` set the ACL of this version (None: the bucket is unversioned).
    AclSet {
        version_id: Option<String>,
    },
    /// `SetShardMap`: the map's version now.
    MapVersion(u64),
    /// `RefInc`: the content's record with the reference taken.
    RefTaken(FileRecord),
    /// `Settle` or `DecBatch`: what became of each reference, in order.
    RefOutcomes(Vec<crate::ref_log::RefOutcome>),
    /// `ExpireReleased`: the rows removed.
    RefsExpired(u32),
    /// `OutboxDone`: the rows dropped.
    OutboxDone(u32),
    /// `DropHandedOff`: the rows removed, and whether the hand-off is over.
    Dropped {
        removed: u32,
        done: bool,
    },
    /// `Ingest`: the rows written.
    Ingested(u32),
    /// `Ingest` into a group whose copy is sealed: nothing written.
    Sealed,
    /// `Fence`: what the index group found.
    Fence(crate::outbox::FenceOutcome),
    /// `ExpireFences`: the fences removed.
    FencesExpired(u32),
    /// `AuditMark`: whether the record was marked now (false: already marked, changed
    /// since the audit read it, or gone).
    Marked(bool),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command sent again after an unknown outcome must be one applied once by its keys:
    /// an inc or dec by content alone counts twice, a RefInc by its ref_id does not.
    #[test]
    fn only_the_commands_applied_once_by_their_keys_may_be_sent_again() {
        let sha1 = Sha1([7; 20]);
        let magic = Magic::new(3).unwrap();
        let once = Command::RefInc {
            sha1,
            magic,
            ref_id: 9,
            pair: None,
            bucket: "b".into(),
            key: "k".into(),
            deadline_ms: 1,
            now_ms: 0,
        };
        assert!(once.applies_once());
        assert!(
            Command::Seal {
                group: 1,
                map_version: 2
            }
            .applies_once()
        );
        for twice in [
            Command::Inc { sha1, magic },
            Command::Dec {
                sha1,
                magic,
                now_secs: 0,
            },
            Command::InsertOrInc {
                sha1,
                magic,
                pair: PairId(0),
            },
        ] {
            assert!(!twice.applies_once(), "{twice:?}");
        }
    }
}
