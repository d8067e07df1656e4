//! The cluster's format version: which commands and snapshot contents every member can
//! read, kept in the replicated state so that a rolling upgrade never meets a format some
//! node does not know.
//!
//! Each binary knows the formats up to [`FORMAT_VERSION`]. The group's version, stored in
//! `raft_state` under [`KEY`] (absent: 1, the format of every release before this
//! module), only moves forward, by a [`Command::SetClusterVersion`] that the leader
//! proposes once every member (voters and learners) says, over `/_cluster/version`, that
//! it knows the new format; a member that answers the question with an HTTP error (a binary
//! from before it takes the path for an S3 request and answers 403) counts as version 1,
//! one that cannot be reached holds the raise back. A
//! command that needs a newer format than the group's ([`Command::format_version`]) is
//! refused before it is proposed (`Unavailable`, and the caller's client sees a 503), so
//! an old member never receives an entry it cannot decode. A binary that applies a raise
//! past its own [`FORMAT_VERSION`] (it was downgraded, or started on a newer group's data)
//! stops its state machine with an error that says so, rather than applying the entries
//! that follow differently from the others.
//!
//! Version 2 adds nothing but the raise itself. Version 3 adds the write conditions of
//! CompleteMultipartUpload, CopyObject and the deletes (`Conditional`,
//! `DeleteObjectsMatching`, `If-Match: *`). Version 4 adds versions, object lock, tags
//! and ACLs; 5 the shard map and the FileDB group's `ref_log`; 6 what a group owns and the
//! index group's side of cross-group references (`ownership.rs`, `outbox.rs`); 7 a change
//! of the map planned and carried out while serving (splits, moves); 8 the nodes leaving
//! the cluster (`SetLeaving`), the audit's alarm (`AuditMark`) and the cancel of a move
//! (`CancelPlan`); 9 the bucket records' copies in index groups (`CopyBuckets`); 10 an
//! index group's split (`IngestIndex`, the hand-off of key intervals); 11 the lifecycle rules
//! in the bucket copies (`CopyBucketsWithRules`), each index group sweeping its own keys;
//! 12 bulk-delete jobs across index groups (`CreateJobFenced`, `DeleteFenced`,
//! `JobChunkAcross`).

use redb::WriteTransaction;

use super::MetaError;
use super::command::{Command, WritePrecondition};
use super::tables::RAFT_STATE;

/// The newest format this binary reads and writes.
pub const FORMAT_VERSION: u32 = 12;
/// The format of a group that never recorded one (every release before the raise).
pub const FORMAT_VERSION_INITIAL: u32 = 1;
/// Key of the group's version in `raft_state` (postcard `u32`).
pub const KEY: &str = "cluster_version";

impl Command {
    /// The format a command needs every member to know.
    pub fn format_version(&self) -> u32 {
        match self {
            Command::SetClusterVersion { .. } => 2,
            Command::Conditional { .. } | Command::DeleteObjectsMatching { .. } => 3,
            Command::SetBucketVersioning { .. }
            | Command::DeleteVersion { .. }
            | Command::SetBucketLifecycleWithVersions { .. }
            | Command::ExpireVersions { .. }
            | Command::CreateLockedBucket { .. }
            | Command::SetObjectLockConfig { .. }
            | Command::SetObjectLock { .. }
            | Command::Locked { .. }
            | Command::CreateUploadWithChecksum { .. }
            | Command::PutPartWithChecksum { .. }
            | Command::Tagged { .. }
            | Command::SetObjectTags { .. }
            | Command::SetBucketTags { .. }
            | Command::WithAcl { .. }
            | Command::SetObjectAcl { .. }
            | Command::SetBucketAcl { .. } => 4,
            Command::SetShardMap { .. }
            | Command::RefInc { .. }
            | Command::Settle { .. }
            | Command::DecBatch { .. }
            | Command::ExpireReleased { .. } => 5,
            Command::SetOwnership { .. }
            | Command::ForeignRef { .. }
            | Command::OutboxDone { .. }
            | Command::Fence { .. }
            | Command::ExpireFences { .. } => 6,
            Command::PlanMap { .. }
            | Command::HandOff { .. }
            | Command::EndHandOff { .. }
            | Command::DropHandedOff { .. }
            | Command::Ingest { .. }
            | Command::Seal { .. } => 7,
            Command::SetLeaving { .. } | Command::AuditMark { .. } | Command::CancelPlan { .. } => {
                8
            }
            Command::CopyBuckets { .. } => 9,
            Command::IngestIndex { .. } => 10,
            Command::CopyBucketsWithRules { .. } => 11,
            Command::CreateJobFenced { .. }
            | Command::DeleteFenced { .. }
            | Command::JobChunkAcross { .. } => 12,
            Command::PutObject {
                precondition: Some(WritePrecondition::MatchAny),
                ..
            } => 3,
            _ => FORMAT_VERSION_INITIAL,
        }
    }
}

/// Why a raise cannot be applied on this node.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "the cluster moved to format version {wanted}, and this binary knows only up to \
     {FORMAT_VERSION}: upgrade it to a release that knows {wanted}"
)]
pub struct TooNew {
    pub wanted: u32,
}

/// Whether this binary can apply `cmd`: only a raise past its own format is refused.
pub fn check_known(cmd: &Command) -> Result<(), TooNew> {
    match cmd {
        Command::SetClusterVersion { version } if *version > FORMAT_VERSION => {
            Err(TooNew { wanted: *version })
        }
        _ => Ok(()),
    }
}

/// The group's version as `txn` sees it.
pub(crate) fn read_in(
    table: &impl redb::ReadableTable<&'static str, &'static [u8]>,
) -> Result<u32, MetaError> {
    match table.get(KEY)? {
        Some(v) => postcard::from_bytes(v.value())
            .map_err(|e| MetaError::Corrupt(format!("raft_state `{KEY}`: {e}"))),
        None => Ok(FORMAT_VERSION_INITIAL),
    }
}

/// Applies a raise: the version only moves forward (an older raise is a no-op).
pub fn apply_raise(txn: &WriteTransaction, version: u32) -> Result<u32, MetaError> {
    let mut table = txn.open_table(RAFT_STATE)?;
    let now = read_in(&table)?.max(version);
    let bytes = postcard::to_stdvec(&now).map_err(|e| MetaError::Corrupt(e.to_string()))?;
    table.insert(KEY, bytes.as_slice())?;
    Ok(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MetaStore, Response};

    #[test]
    fn the_version_starts_at_one_moves_forward_only_and_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let store = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
        assert_eq!(store.cluster_version().unwrap(), FORMAT_VERSION_INITIAL);
        for (raise, want) in [(2, 2), (1, 2), (2, 2)] {
            let r = store
                .execute(&Command::SetClusterVersion { version: raise })
                .unwrap();
            assert_eq!(r, Response::ClusterVersion(want));
            assert_eq!(store.cluster_version().unwrap(), want);
        }
        // The command itself round-trips through the log's encoding.
        let cmd = Command::SetClusterVersion { version: 7 };
        let bytes = postcard::to_stdvec(&cmd).unwrap();
        assert_eq!(postcard::from_bytes::<Command>(&bytes).unwrap(), cmd);
    }

    #[test]
    fn a_raise_past_this_binary_is_refused_and_older_commands_need_version_one() {
        assert_eq!(
            check_known(&Command::SetClusterVersion {
                version: FORMAT_VERSION + 1
            }),
            Err(TooNew {
                wanted: FORMAT_VERSION + 1
            })
        );
        assert!(
            check_known(&Command::SetClusterVersion {
                version: FORMAT_VERSION
            })
            .is_ok()
        );
        let old = Command::DeleteBucket { bucket: "b".into() };
        assert_eq!(old.format_version(), FORMAT_VERSION_INITIAL);
        assert!(
            Command::SetClusterVersion { version: 2 }.format_version() <= FORMAT_VERSION,
            "a command this binary cannot apply"
        );
    }

    /// Commands of version 1 keep their encoding: the raise is appended at the end of the
    /// enum, so an existing variant's tag (its index) does not move.
    #[test]
    fn existing_commands_keep_their_encoding() {
        let bytes = postcard::to_stdvec(&Command::DeleteBucket { bucket: "b".into() }).unwrap();
        // DeleteBucket is variant 5 (PutPair, AddPair, SetPairFlags, CreateBucket,
        // SetBucketCors, DeleteBucket); postcard writes the index as a varint.
        assert_eq!(bytes[0], 5, "{bytes:?}");
    }
}
