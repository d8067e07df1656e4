//! `apply`: the only code that writes to the metadata tables.
//!
//! Deterministic by construction: no clock, no randomness, no I/O besides the transaction.
//! A command either applies whole or returns an error, in which case the caller aborts the
//! transaction, so a half-applied command is never committed.
//!
//! The reference arithmetic is not here: [`crate::filedb`] says what an `inc` or a
//! `dec` makes of a record, and this module only moves records in and out of the tables.
//!
//! This file only dispatches: each command's body is in the file of its table family,
//! `pairs.rs`, `files.rs`, `buckets.rs`, `objects.rs`, `uploads.rs`, `keys.rs` and
//! `jobs.rs` (the cluster's format version in [`crate::cluster_version`]); `refs.rs` takes
//! and releases the references they all change; `cross.rs` checks that a command is about
//! what the group owns, and keeps the index group's side of references taken in another
//! group.

mod buckets;
mod cross;
mod file_rows;
mod files;
mod handoff;
mod index_handoff;
mod jobs;
mod keys;
mod objects;
mod pairs;
mod ref_log;
mod refs;
mod revisions;
mod uploads;
mod versions;

#[cfg(test)]
mod checksums_tests;
#[cfg(test)]
mod conditional_tests;
#[cfg(test)]
mod cross_tests;
#[cfg(test)]
mod handoff_tests;
#[cfg(test)]
mod index_handoff_tests;
#[cfg(test)]
mod ref_log_tests;
#[cfg(test)]
mod tags_tests;
#[cfg(test)]
mod versions_tests;

use redb::WriteTransaction;

use crate::extras::{self, Extras};
use crate::{Command, MetaError, Response, cluster_version};

pub use objects::{DELETE_KEYS_MAX, EXPIRE_KEYS_MAX};

/// Applies one command inside `txn`, if it is about what this group owns (`Moved`
/// otherwise, see [`crate::ownership`]).
pub fn apply(txn: &WriteTransaction, cmd: &Command) -> Result<Response, MetaError> {
    cross::check_owner(txn, cmd)?;
    dispatch(txn, cmd)
}

/// Applies one command, or the command inside a wrapper.
fn dispatch(txn: &WriteTransaction, cmd: &Command) -> Result<Response, MetaError> {
    match cmd {
        Command::PutPair { id, record } => pairs::put(txn, *id, record),
        Command::AddPair { record } => pairs::add(txn, record),
        Command::SetPairFlags { id, set, clear } => pairs::set_flags(txn, *id, *set, *clear),
        Command::CreateBucket { bucket, created_ms } => {
            buckets::create(txn, bucket, *created_ms, &None, false)
        }
        Command::CreateOwnedBucket {
            bucket,
            created_ms,
            owner,
        } => buckets::create(txn, bucket, *created_ms, owner, false),
        Command::SetBucketCors { bucket, rules } => buckets::set_cors(txn, bucket, rules),
        Command::DeleteBucket { bucket } => buckets::delete(txn, bucket),
        Command::PutObject {
            bucket,
            key,
            object,
            source,
            now_secs,
            precondition,
        } => objects::put(txn, bucket, key, object, *source, *now_secs, precondition),
        Command::CopyObject {
            bucket,
            key,
            object,
            from_bucket,
            from_key,
            from_seq,
            now_secs,
        } => {
            let from = objects::CopySource {
                bucket: from_bucket,
                key: from_key,
                seq: *from_seq,
            };
            objects::copy(txn, bucket, key, object, from, *now_secs)
        }
        Command::DeleteObjects {
            bucket,
            keys,
            now_secs,
        } => objects::delete_many(txn, bucket, keys, *now_secs),
        Command::CreateUpload { upload_id, upload } => uploads::create(txn, upload_id, upload),
        Command::PutPart {
            upload_id,
            part_number,
            part,
            source,
            now_secs,
        } => uploads::put_part_with_checksum(
            txn,
            upload_id,
            (*part_number, part),
            *source,
            *now_secs,
            None,
        ),
        Command::CompleteUpload {
            upload_id,
            object,
            parts,
            source,
            now_secs,
        } => uploads::complete(txn, upload_id, object, parts, *source, *now_secs),
        Command::AbortUpload {
            upload_id,
            now_secs,
        } => uploads::abort(txn, upload_id, *now_secs),
        Command::DeleteObject {
            bucket,
            key,
            now_secs,
        } => objects::delete(txn, bucket, key, *now_secs),
        Command::RemoveDeleting { sha1, pair } => files::remove_deleting(txn, sha1, *pair),
        Command::Relocate { sha1, from, to } => files::relocate(txn, sha1, *from, *to),
        Command::Inc { sha1, magic } => files::inc(txn, sha1, *magic),
        Command::InsertOrInc { sha1, magic, pair } => {
            files::insert_or_inc(txn, sha1, *magic, *pair)
        }
        Command::Dec {
            sha1,
            magic,
            now_secs,
        } => files::dec(txn, sha1, *magic, *now_secs),
        Command::SetBucketLifecycle { bucket, rules } => buckets::set_lifecycle(txn, bucket, rules),
        Command::SetBucketLifecycleWithVersions {
            bucket,
            rules,
            versions,
        } => {
            let rules = rules
                .clone()
                .map(|r| crate::lifecycle::with_versions(r, versions))
                .transpose()
                .map_err(|e| MetaError::InvalidCommand(e.to_string()))?;
            buckets::set_lifecycle(txn, bucket, &rules)
        }
        Command::CreateLockedBucket {
            bucket,
            created_ms,
            owner,
        } => buckets::create(txn, bucket, *created_ms, owner, true),
        Command::SetObjectLockConfig { bucket, config } => {
            versions::set_lock_config(txn, bucket, *config)
        }
        Command::SetObjectLock {
            bucket,
            key,
            version,
            change,
            bypass_governance,
            now_ms,
        } => versions::set_lock(
            txn,
            bucket,
            key,
            *version,
            *change,
            *bypass_governance,
            *now_ms,
        ),
        Command::Locked {
            bucket,
            key,
            change,
            command,
        } => {
            let (target_bucket, target_key) = locked_target(txn, command)?;
            if target_bucket != *bucket || target_key != *key {
                return Err(MetaError::Unexpected(format!(
                    "a lock on {bucket}/{key} goes with a write of {target_bucket}/{target_key}"
                )));
            }
            let response = dispatch(txn, command)?;
            // Nothing was written: nothing to lock.
            if response == Response::ContentGone {
                return Ok(response);
            }
            versions::lock_current(txn, bucket, key, *change)?;
            Ok(response)
        }
        Command::ExpireVersions {
            bucket,
            versions: entries,
            resume_after,
            day_secs,
            now_secs,
        } => versions::expire_versions(txn, bucket, entries, resume_after, *day_secs, *now_secs),
        Command::ExpireObjects {
            bucket,
            objects,
            resume_after,
            day_secs,
            now_secs,
        } => objects::expire(txn, bucket, objects, resume_after, *day_secs, *now_secs),
        Command::CreateKey { access_key, record } => keys::create(txn, access_key, record),
        Command::DeleteKey { access_key } => keys::delete(txn, access_key),
        Command::SetKeyRights {
            access_key,
            bucket,
            set,
            clear,
        } => keys::set_rights(txn, access_key, bucket, *set, *clear),
        Command::CreateJob { op, now_ms } => jobs::create(txn, op, *now_ms),
        Command::JobChunk {
            id,
            keys,
            through,
            done,
            now_ms,
        } => jobs::chunk(txn, *id, keys, through, *done, *now_ms),
        Command::EndJob { id, state, now_ms } => jobs::end(txn, *id, state, *now_ms),
        Command::JobAbortUploads {
            id,
            upload_ids,
            now_ms,
        } => jobs::abort_uploads(txn, *id, upload_ids, *now_ms),
        Command::SetClusterVersion { version } => {
            cluster_version::apply_raise(txn, *version).map(Response::ClusterVersion)
        }
        Command::RefInc {
            sha1,
            magic,
            ref_id,
            pair,
            bucket,
            key,
            deadline_ms,
            now_ms,
        } => ref_log::ref_inc(
            txn,
            ref_log::RefIncArgs {
                sha1,
                magic: *magic,
                ref_id: *ref_id,
                pair: *pair,
                bucket,
                key,
                deadline_ms: *deadline_ms,
                now_ms: *now_ms,
            },
        )
        .map(Response::RefTaken),
        Command::Settle { settles, now_ms } => {
            ref_log::settle(txn, settles, *now_ms).map(Response::RefOutcomes)
        }
        Command::DecBatch { decs, now_ms } => {
            ref_log::dec_batch(txn, decs, *now_ms).map(Response::RefOutcomes)
        }
        Command::ExpireReleased { now_ms, limit } => {
            ref_log::expire_released(txn, *now_ms, *limit).map(Response::RefsExpired)
        }
        Command::SetShardMap { map } => {
            crate::shard_map::apply_set(txn, map).map(Response::MapVersion)
        }
        Command::JobDeleteBucket { id, now_ms } => jobs::delete_bucket(txn, *id, *now_ms),
        Command::CreateJobFenced {
            op,
            now_ms,
            fences,
            others,
        } => jobs::create_fenced(txn, op, *now_ms, fences, *others),
        Command::DeleteFenced {
            bucket,
            keys,
            fence_seq,
            now_secs,
        } => jobs::delete_fenced(txn, bucket, keys, *fence_seq, *now_secs),
        Command::JobChunkAcross {
            id,
            bucket,
            keys,
            through,
            done,
            deleted_elsewhere,
            now_ms,
        } => {
            // Root's keys of the page, once the job is found to be of `bucket` (named so
            // that root checks it owns them); the page's `DeleteFenced` removals in other
            // groups counted too.
            crate::jobs::check_bucket(txn, *id, bucket)?;
            let out = jobs::chunk(txn, *id, keys, through, *done, *now_ms)?;
            crate::jobs::count_deleted(txn, *id, *deleted_elsewhere)?;
            Ok(out)
        }
        Command::Conditional {
            bucket,
            key,
            precondition,
            command,
        } => {
            let (target_bucket, target_key) = conditional_target(txn, command)?;
            if target_bucket != *bucket || target_key != *key {
                return Err(MetaError::Unexpected(format!(
                    "a condition on {bucket}/{key} guards a write of {target_bucket}/{target_key}"
                )));
            }
            crate::tables::check_bucket(txn, bucket)?;
            precondition.check(objects::read_object(txn, bucket, key)?.as_ref())?;
            dispatch(txn, command)
        }
        Command::DeleteObjectsMatching {
            bucket,
            objects,
            now_secs,
        } => objects::delete_matching(txn, bucket, objects, *now_secs),
        Command::SetBucketVersioning { bucket, state } => {
            versions::set_versioning(txn, bucket, *state)
        }
        Command::DeleteVersion {
            bucket,
            key,
            version,
            now_secs,
            bypass_governance,
        } => versions::delete_version(txn, bucket, key, *version, *now_secs, *bypass_governance),
        Command::CreateUploadWithChecksum {
            upload_id,
            upload,
            checksum,
        } => uploads::create_with_checksum(txn, upload_id, upload, checksum),
        Command::PutPartWithChecksum {
            upload_id,
            part_number,
            part,
            source,
            now_secs,
            checksum,
        } => uploads::put_part_with_checksum(
            txn,
            upload_id,
            (*part_number, part),
            *source,
            *now_secs,
            Some(checksum),
        ),
        Command::Tagged {
            bucket,
            key,
            tags,
            command,
        } => {
            tags.check(crate::tags::OBJECT_TAGS_MAX)
                .map_err(|e| MetaError::InvalidCommand(e.to_string()))?;
            with_extras(txn, (bucket, key), command, |e| e.tags = tags.clone())
        }
        Command::SetObjectTags {
            bucket,
            key,
            version,
            tags,
        } => {
            tags.check(crate::tags::OBJECT_TAGS_MAX)
                .map_err(|e| MetaError::InvalidCommand(e.to_string()))?;
            versions::set_extras(txn, bucket, key, *version, |e| e.tags = tags.clone())
                .map(|version_id| Response::TagsSet { version_id })
        }
        Command::SetBucketTags { bucket, tags } => buckets::set_tags(txn, bucket, tags),
        Command::WithAcl {
            bucket,
            key,
            acl,
            command,
        } => with_extras(txn, (bucket, key), command, |e| e.acl = *acl),
        Command::SetObjectAcl {
            bucket,
            key,
            version,
            acl,
        } => versions::set_extras(txn, bucket, key, *version, |e| e.acl = *acl)
            .map(|version_id| Response::AclSet { version_id }),
        Command::SetBucketAcl { bucket, acl } => buckets::set_acl(txn, bucket, *acl),
        Command::SetOwnership { group, map } => {
            crate::ownership::apply_set(txn, *group, map).map(Response::MapVersion)
        }
        Command::ForeignRef {
            bucket,
            key,
            ref_id,
            command,
        } => foreign_ref(txn, (bucket, key, *ref_id), command),
        Command::OutboxDone { rows } => cross::outbox_done(txn, rows).map(Response::OutboxDone),
        Command::Fence {
            bucket,
            key,
            ref_id,
            now_ms,
        } => cross::fence(txn, (bucket, key, *ref_id), *now_ms).map(Response::Fence),
        Command::ExpireFences { now_ms, limit } => {
            cross::expire_fences(txn, *now_ms, *limit).map(Response::FencesExpired)
        }
        Command::PlanMap { map } => {
            jobs::check_plan(txn, map)?;
            crate::shard_map::apply_plan(txn, map).map(Response::MapVersion)
        }
        Command::CancelPlan { version, done } => {
            crate::shard_map::apply_cancel(txn, *version, *done).map(Response::MapVersion)
        }
        Command::CopyBuckets { copies } => {
            crate::bucket_copies::apply(txn, copies, None).map(|_| Response::Done)
        }
        Command::CopyBucketsWithRules { copies, lifecycles } => {
            crate::bucket_copies::apply(txn, copies, Some(lifecycles)).map(|_| Response::Done)
        }
        Command::AuditMark { sha1, refs, magic } => {
            files::audit_mark(txn, sha1, *refs, *magic).map(Response::Marked)
        }
        Command::SetLeaving { node, leaving } => {
            crate::shard_map::apply_leaving(txn, *node, *leaving).map(|()| Response::Done)
        }
        Command::HandOff { group, map } => {
            handoff::hand_off(txn, *group, map).map(Response::MapVersion)
        }
        Command::EndHandOff { group, map_version } => {
            handoff::end_hand_off(txn, *group, *map_version).map(Response::MapVersion)
        }
        Command::DropHandedOff {
            group,
            map_version,
            limit,
        } => handoff::drop_handed_off(txn, *group, *map_version, *limit)
            .map(|(removed, done)| Response::Dropped { removed, done }),
        Command::Ingest { group, rows } => handoff::ingest(txn, *group, rows).map(|n| match n {
            Some(n) => Response::Ingested(n),
            None => Response::Sealed,
        }),
        Command::IngestIndex { group, rows } => {
            index_handoff::ingest(txn, *group, rows).map(|n| match n {
                Some(n) => Response::Ingested(n),
                None => Response::Sealed,
            })
        }
        Command::Seal { group, map_version } => {
            handoff::seal(txn, *group, *map_version).map(Response::MapVersion)
        }
    }
}

/// What a `Tagged` or `WithAcl` command's write makes.
enum Written<'a> {
    /// An object version of the key.
    Version,
    /// An upload, whose completed object gets the extras.
    Upload(&'a str),
    /// A bucket (`WithAcl` only, its key empty).
    Bucket,
}

/// The `bucket/key` a command under `Tagged` or `WithAcl` writes, and what it makes; a
/// `Tagged` or `WithAcl` inside is looked through (an upload created with tags and an ACL
/// is an upload under both).
fn written_by<'a>(
    txn: &WriteTransaction,
    command: &'a Command,
) -> Result<(String, String, Written<'a>), MetaError> {
    Ok(match command {
        Command::CreateUpload { upload_id, upload }
        | Command::CreateUploadWithChecksum {
            upload_id, upload, ..
        } => (
            upload.bucket.clone(),
            upload.key.clone(),
            Written::Upload(upload_id),
        ),
        Command::CreateBucket { bucket, .. }
        | Command::CreateOwnedBucket { bucket, .. }
        | Command::CreateLockedBucket { bucket, .. } => {
            (bucket.clone(), String::new(), Written::Bucket)
        }
        Command::Tagged { command, .. } | Command::WithAcl { command, .. } => {
            written_by(txn, command)?
        }
        Command::Locked { bucket, key, .. } => (bucket.clone(), key.clone(), Written::Version),
        _ => {
            let (b, k) = locked_target(txn, command)?;
            (b, k, Written::Version)
        }
    })
}

/// `Tagged` and `WithAcl`: the write, then `f` on the extras of what it wrote: the version
/// it wrote, a new upload (for the object it completes into) or a new bucket.
fn with_extras(
    txn: &WriteTransaction,
    (bucket, key): (&str, &str),
    command: &Command,
    f: impl FnOnce(&mut Extras),
) -> Result<Response, MetaError> {
    let (target_bucket, target_key, written) = written_by(txn, command)?;
    if target_bucket != bucket || target_key != key {
        return Err(MetaError::Unexpected(format!(
            "tags or an ACL on {bucket}/{key} go with a write of {target_bucket}/{target_key}"
        )));
    }
    let response = dispatch(txn, command)?;
    match written {
        Written::Upload(id) => extras::update(txn, extras::UPLOADS_OF, id, f)?,
        Written::Bucket => extras::update(txn, extras::BUCKETS_OF, bucket, f)?,
        // Nothing was written: nothing to change.
        Written::Version if response == Response::ContentGone => {}
        Written::Version => versions::update_current(txn, bucket, key, f)?,
    }
    Ok(response)
}

/// `ForeignRef`: the write, with the reference taken in another group kept beside what it
/// wrote (see [`crate::outbox`]).
fn foreign_ref(
    txn: &WriteTransaction,
    (bucket, key, ref_id): (&str, &str, u64),
    command: &Command,
) -> Result<Response, MetaError> {
    let (target_bucket, target_key, written) = foreign_target(txn, command)?;
    if target_bucket != bucket || target_key != key {
        return Err(MetaError::Unexpected(format!(
            "a reference of {bucket}/{key} goes with a write of {target_bucket}/{target_key}"
        )));
    }
    cross::check_foreign(txn, (bucket, key, ref_id))?;
    let response = dispatch(txn, command)?;
    cross::keep_foreign(txn, (bucket, key, ref_id), written, &response)?;
    Ok(response)
}

/// The `bucket/key` a `ForeignRef`'s command writes, and what it writes.
fn foreign_target(
    txn: &WriteTransaction,
    cmd: &Command,
) -> Result<(String, String, cross::Written), MetaError> {
    Ok(match cmd {
        Command::PutPart {
            upload_id,
            part_number,
            ..
        }
        | Command::PutPartWithChecksum {
            upload_id,
            part_number,
            ..
        } => {
            let upload = uploads::read_upload(txn, upload_id)?;
            let written = cross::Written::Part {
                upload_id: upload_id.clone(),
                number: *part_number,
            };
            (upload.bucket, upload.key, written)
        }
        Command::Tagged { command, .. } | Command::WithAcl { command, .. } => {
            foreign_target(txn, command)?
        }
        Command::Locked { bucket, key, .. } => {
            (bucket.clone(), key.clone(), cross::Written::Object)
        }
        _ => {
            let (bucket, key) = locked_target(txn, cmd)?;
            (bucket, key, cross::Written::Object)
        }
    })
}

/// The `bucket/key` that a command guarded by `Conditional` writes: only the writes S3
/// lets carry a condition (PutObject carries its own).
/// The `bucket/key` a write under `Locked` stores: a PUT, copy or completion, possibly
/// under a condition.
fn locked_target(txn: &WriteTransaction, cmd: &Command) -> Result<(String, String), MetaError> {
    match cmd {
        Command::PutObject { bucket, key, .. } | Command::CopyObject { bucket, key, .. } => {
            Ok((bucket.clone(), key.clone()))
        }
        Command::CompleteUpload { .. } => conditional_target(txn, cmd),
        Command::Conditional { bucket, key, .. } => Ok((bucket.clone(), key.clone())),
        _ => Err(MetaError::Unexpected(
            "a lock on a command that writes no object version".to_string(),
        )),
    }
}

fn conditional_target(
    txn: &WriteTransaction,
    cmd: &Command,
) -> Result<(String, String), MetaError> {
    match cmd {
        Command::CompleteUpload { upload_id, .. } => {
            let upload = uploads::read_upload(txn, upload_id)?;
            Ok((upload.bucket, upload.key))
        }
        Command::CopyObject { bucket, key, .. } | Command::DeleteObject { bucket, key, .. } => {
            Ok((bucket.clone(), key.clone()))
        }
        _ => Err(MetaError::Unexpected(
            "a write condition on a command that cannot carry one".to_string(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use placement::{Magic, PairId, PairRecord, Sha1};

    use super::*;
    use crate::tables::{BUCKETS, FILES};
    use crate::{
        ContentSource, DecOutcome, DeletingRecord, MetaStore, NewObject, PartRecord, UploadRecord,
    };

    fn store() -> (tempfile::TempDir, MetaStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
        (dir, store)
    }

    fn sha(n: u8) -> Sha1 {
        Sha1([n; 20])
    }

    fn m(v: u32) -> Magic {
        Magic::new(v).unwrap()
    }

    #[test]
    fn inc_on_absent_content_is_not_found() {
        let (_d, s) = store();
        let r = s.execute(&Command::Inc {
            sha1: sha(1),
            magic: m(5),
        });
        assert!(matches!(r, Err(MetaError::NotFound)));
        assert_eq!(s.file(&sha(1)).unwrap(), None);
    }

    #[test]
    fn a_do_not_delete_record_stays_in_files_and_never_reaches_deleting() {
        let (_d, s) = store();
        let g = sha(12);
        s.execute(&Command::InsertOrInc {
            sha1: g,
            magic: m(10),
            pair: PairId(0),
        })
        .unwrap();
        let r = s
            .execute(&Command::Dec {
                sha1: g,
                magic: m(7),
                now_secs: 12,
            })
            .unwrap();
        assert_eq!(
            r,
            Response::Dec(DecOutcome::DoNotDelete { refs: 0, magic: 3 })
        );
        let rec = s.file(&g).unwrap().unwrap();
        assert!(rec.do_not_delete());
        assert_eq!(s.deleting(&g).unwrap(), None);
    }

    #[test]
    fn a_corrupt_record_is_an_error_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let db = redb::Database::create(dir.path().join("meta.redb")).unwrap();
        let f = sha(13);
        // refs 0 and magic 0 without DO_NOT_DELETE: no rule leaves this in `files`.
        let bad = [0u8; 16];
        let txn = db.begin_write().unwrap();
        txn.open_table(FILES).unwrap().insert(f.0, bad).unwrap();
        txn.commit().unwrap();
        let commands = [
            Command::Inc {
                sha1: f,
                magic: m(1),
            },
            Command::InsertOrInc {
                sha1: f,
                magic: m(1),
                pair: PairId(0),
            },
            Command::Dec {
                sha1: f,
                magic: m(1),
                now_secs: 1,
            },
            Command::Relocate {
                sha1: f,
                from: PairId(0),
                to: PairId(1),
            },
        ];
        for cmd in &commands {
            let txn = db.begin_write().unwrap();
            let r = apply(&txn, cmd);
            assert!(matches!(r, Err(MetaError::Corrupt(_))), "{cmd:?}: {r:?}");
            txn.abort().unwrap();
        }
        let stored = redb::ReadableDatabase::begin_read(&db)
            .unwrap()
            .open_table(FILES)
            .unwrap()
            .get(f.0)
            .unwrap()
            .map(|v| v.value());
        assert_eq!(stored, Some(bad));
    }

    #[test]
    fn exact_decs_move_the_record_to_deleting() {
        let (_d, s) = store();
        let f = sha(3);
        s.execute(&Command::InsertOrInc {
            sha1: f,
            magic: m(345),
            pair: PairId(4),
        })
        .unwrap();
        s.execute(&Command::Inc {
            sha1: f,
            magic: m(123),
        })
        .unwrap();
        s.execute(&Command::Dec {
            sha1: f,
            magic: m(123),
            now_secs: 5,
        })
        .unwrap();
        let r = s
            .execute(&Command::Dec {
                sha1: f,
                magic: m(345),
                now_secs: 6,
            })
            .unwrap();
        assert_eq!(r, Response::Dec(DecOutcome::Deleting));
        assert_eq!(s.file(&f).unwrap(), None);
        assert_eq!(
            s.deleting(&f).unwrap(),
            Some(DeletingRecord {
                pair: PairId(4),
                since_secs: 6
            })
        );
    }

    #[test]
    fn racing_loaders_both_succeed_and_the_first_pair_wins() {
        let (_d, s) = store();
        let f = sha(6);
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8u32)
                .map(|i| {
                    let s = &s;
                    scope.spawn(move || {
                        s.execute(&Command::InsertOrInc {
                            sha1: f,
                            magic: m(i + 1),
                            pair: PairId(i),
                        })
                    })
                })
                .collect();
            for h in handles {
                assert!(h.join().unwrap().is_ok());
            }
        });
        let rec = s.file(&f).unwrap().unwrap();
        assert_eq!(rec.refs, 8);
        assert_eq!(rec.magic, (1..=8).sum::<u32>());
    }

    #[test]
    fn put_object_over_a_key_releases_the_old_content_atomically() {
        let (_d, s) = store();
        s.execute(&Command::CreateBucket {
            bucket: "b".into(),
            created_ms: 1,
        })
        .unwrap();
        let obj = |sha1: Sha1, magic: u32| NewObject::new(sha1, m(magic), 1, 0, [0; 16]);
        let put = |sha1, magic, source| Command::PutObject {
            bucket: "b".into(),
            key: "k".into(),
            object: obj(sha1, magic),
            source,
            now_secs: 9,
            precondition: None,
        };
        let r = s
            .execute(&put(sha(7), 11, ContentSource::Stored(PairId(0))))
            .unwrap();
        assert!(matches!(
            r,
            Response::ObjectPut {
                seq: 1,
                replaced: None,
                ..
            }
        ));
        let r = s
            .execute(&put(sha(8), 22, ContentSource::Stored(PairId(0))))
            .unwrap();
        assert!(matches!(
            r,
            Response::ObjectPut {
                seq: 2,
                released: Some(DecOutcome::Deleting),
                ..
            }
        ));
        assert_eq!(s.file(&sha(7)).unwrap(), None);
        assert!(s.deleting(&sha(7)).unwrap().is_some());
        // Existing content that has gone: nothing changes.
        let r = s
            .execute(&put(sha(9), 33, ContentSource::Existing))
            .unwrap();
        assert_eq!(r, Response::ContentGone);
        assert_eq!(s.object("b", "k").unwrap().unwrap().sha1, sha(8));
        // A missing bucket changes nothing either.
        let mut c = put(sha(9), 33, ContentSource::Stored(PairId(0)));
        if let Command::PutObject { bucket, .. } = &mut c {
            *bucket = "nope".into();
        }
        assert!(matches!(s.execute(&c), Err(MetaError::NoSuchBucket)));
        assert_eq!(s.file(&sha(9)).unwrap(), None);
        // Delete releases; deleting again is a no-op.
        let del = Command::DeleteObject {
            bucket: "b".into(),
            key: "k".into(),
            now_secs: 10,
        };
        let r = s.execute(&del).unwrap();
        assert!(matches!(
            r,
            Response::ObjectDeleted {
                removed: Some(_),
                released: Some(DecOutcome::Deleting)
            }
        ));
        let r = s.execute(&del).unwrap();
        assert_eq!(
            r,
            Response::ObjectDeleted {
                removed: None,
                released: None
            }
        );
    }

    #[test]
    fn buckets_are_created_once_and_deleted_only_when_empty() {
        let (_d, s) = store();
        let create = Command::CreateBucket {
            bucket: "b".into(),
            created_ms: 1,
        };
        s.execute(&create).unwrap();
        assert!(matches!(s.execute(&create), Err(MetaError::BucketExists)));
        s.execute(&Command::InsertOrInc {
            sha1: sha(1),
            magic: m(1),
            pair: PairId(0),
        })
        .unwrap();
        let put_k = Command::PutObject {
            bucket: "b".into(),
            key: "k".into(),
            object: NewObject::new(sha(1), m(2), 0, 0, [0; 16]),
            source: ContentSource::Existing,
            now_secs: 1,
            precondition: None,
        };
        s.execute(&put_k).unwrap();
        let delete = Command::DeleteBucket { bucket: "b".into() };
        assert!(matches!(s.execute(&delete), Err(MetaError::BucketNotEmpty)));
        // A bucket whose name sorts after "b" does not make "b" look non-empty.
        s.execute(&Command::DeleteObject {
            bucket: "b".into(),
            key: "k".into(),
            now_secs: 2,
        })
        .unwrap();
        s.execute(&Command::CreateBucket {
            bucket: "ba".into(),
            created_ms: 1,
        })
        .unwrap();
        let mut put_ba = put_k.clone();
        if let Command::PutObject { bucket, .. } = &mut put_ba {
            *bucket = "ba".into();
        }
        s.execute(&put_ba).unwrap();
        s.execute(&delete).unwrap();
        assert!(matches!(s.execute(&delete), Err(MetaError::NoSuchBucket)));
    }

    #[test]
    fn expiry_removes_only_the_version_read_and_only_what_the_rules_expire() {
        use crate::lifecycle::{Expiration, LifecycleRule, RuleFilter};
        let (_d, s) = store();
        s.execute(&Command::CreateBucket {
            bucket: "b".into(),
            created_ms: 1,
        })
        .unwrap();
        let put = |key: &str, sha1: Sha1, magic: u32| {
            let mut object = NewObject::new(sha1, m(magic), 1, 0, [0; 16]);
            object.created_ms = 10_000;
            let r = s
                .execute(&Command::PutObject {
                    bucket: "b".into(),
                    key: key.into(),
                    object,
                    source: ContentSource::Stored(PairId(0)),
                    now_secs: 10,
                    precondition: None,
                })
                .unwrap();
            match r {
                Response::ObjectPut { seq, .. } => seq,
                other => panic!("{other:?}"),
            }
        };
        let seq_a = put("logs/a", sha(1), 1);
        let seq_b = put("logs/b", sha(2), 2);
        let seq_c = put("other/c", sha(3), 3);
        // logs/b is overwritten after the sweep read it.
        put("logs/b", sha(4), 4);
        let rule = LifecycleRule {
            id: "r".into(),
            enabled: true,
            filter: RuleFilter::Prefix("logs/".into()),
            expiration: Some(Expiration::Days(1)),
            abort_upload_days: None,
            versions: Default::default(),
        };
        s.execute(&Command::SetBucketLifecycle {
            bucket: "b".into(),
            rules: Some(vec![rule]),
        })
        .unwrap();
        let expire = |now_secs| Command::ExpireObjects {
            bucket: "b".into(),
            objects: vec![
                ("logs/a".into(), seq_a),
                ("logs/b".into(), seq_b),
                ("other/c".into(), seq_c),
            ],
            resume_after: Some("other/c".into()),
            day_secs: 10,
            now_secs,
        };
        // Created at 10 s, 1 day of 10 s: due at 30 s.
        assert_eq!(
            s.execute(&expire(29)).unwrap(),
            Response::ObjectsDeleted(vec![false, false, false])
        );
        assert_eq!(
            s.lifecycle("b").unwrap().unwrap().resume_after.as_deref(),
            Some("other/c")
        );
        assert_eq!(
            s.execute(&expire(30)).unwrap(),
            Response::ObjectsDeleted(vec![true, false, false])
        );
        assert!(s.object("b", "logs/a").unwrap().is_none());
        assert!(s.deleting(&sha(1)).unwrap().is_some(), "released once");
        assert_eq!(s.object("b", "logs/b").unwrap().unwrap().sha1, sha(4));
        assert!(s.object("b", "other/c").unwrap().is_some());
        // Expired once only: a repeat removes nothing.
        assert_eq!(
            s.execute(&expire(30)).unwrap(),
            Response::ObjectsDeleted(vec![false, false, false])
        );
        // Without rules nothing expires.
        s.execute(&Command::SetBucketLifecycle {
            bucket: "b".into(),
            rules: None,
        })
        .unwrap();
        let mut late = expire(1_000);
        if let Command::ExpireObjects { objects, .. } = &mut late {
            objects[1].1 = s.object("b", "logs/b").unwrap().unwrap().seq;
        }
        assert_eq!(
            s.execute(&late).unwrap(),
            Response::ObjectsDeleted(vec![false, false, false])
        );
    }

    #[test]
    fn uploads_in_progress_keep_a_bucket_and_a_new_bucket_inherits_none() {
        let (_d, s) = store();
        let create = Command::CreateBucket {
            bucket: "b".into(),
            created_ms: 1,
        };
        s.execute(&create).unwrap();
        let upload = UploadRecord {
            bucket: "b".into(),
            key: "k".into(),
            content_type: None,
            user_meta: Vec::new(),
            headers: Vec::new(),
            created_ms: 1,
        };
        s.execute(&Command::CreateUpload {
            upload_id: "u1".into(),
            upload: upload.clone(),
        })
        .unwrap();
        let part = PartRecord {
            sha1: sha(5),
            magic: m(5),
            size_bytes: 1,
            md5: [0; 16],
            crc32: 0,
            created_ms: 1,
        };
        s.execute(&Command::PutPart {
            upload_id: "u1".into(),
            part_number: 1,
            part,
            source: ContentSource::Stored(PairId(0)),
            now_secs: 1,
        })
        .unwrap();
        let delete = Command::DeleteBucket { bucket: "b".into() };
        assert!(matches!(s.execute(&delete), Err(MetaError::BucketNotEmpty)));
        // An upload left behind by an older gateway (bucket deleted under it): the
        // bucket's re-creation ends it and releases its part.
        let txn = s.db().begin_write().unwrap();
        txn.open_table(BUCKETS).unwrap().remove("b").unwrap();
        txn.commit().unwrap();
        s.execute(&create).unwrap();
        assert!(s.upload("u1").unwrap().is_none());
        assert!(s.parts("u1").unwrap().is_empty());
        assert!(s.deleting(&sha(5)).unwrap().is_some());
        s.execute(&delete).unwrap();
    }

    #[test]
    fn commands_survive_a_serialization_round_trip() {
        let c = Command::Dec {
            sha1: sha(1),
            magic: m(9),
            now_secs: 3,
        };
        let bytes = postcard::to_stdvec(&c).unwrap();
        assert_eq!(postcard::from_bytes::<Command>(&bytes).unwrap(), c);
    }

    #[test]
    fn pairs_get_the_next_id_and_flags_change_atomically() {
        use placement::{DiskRef, PairFlags};
        let (_d, s) = store();
        let rec = PairRecord::new([DiskRef::local("/a"), DiskRef::local("/b")]);
        let add = Command::AddPair {
            record: rec.clone(),
        };
        assert!(matches!(
            s.execute(&add).unwrap(),
            Response::Pair(PairId(0), _)
        ));
        assert!(matches!(
            s.execute(&add).unwrap(),
            Response::Pair(PairId(1), _)
        ));
        let set = Command::SetPairFlags {
            id: PairId(1),
            set: PairFlags::LOCKED.with(PairFlags::READ_ONLY),
            clear: PairFlags::default(),
        };
        s.execute(&set).unwrap();
        let unlock = Command::SetPairFlags {
            id: PairId(1),
            set: PairFlags::default(),
            clear: PairFlags::LOCKED,
        };
        let Response::Pair(_, r) = s.execute(&unlock).unwrap() else {
            panic!()
        };
        assert_eq!(r.flags, PairFlags::READ_ONLY);
        assert_eq!(s.pairs().unwrap()[1].1.flags, PairFlags::READ_ONLY);
        let missing = Command::SetPairFlags {
            id: PairId(9),
            set: PairFlags::LOCKED,
            clear: PairFlags::default(),
        };
        assert!(matches!(s.execute(&missing), Err(MetaError::NoPair)));
    }

    #[test]
    fn relocate_and_remove_deleting_check_the_pair() {
        let (_d, s) = store();
        let f = sha(9);
        s.execute(&Command::InsertOrInc {
            sha1: f,
            magic: m(5),
            pair: PairId(1),
        })
        .unwrap();
        let relocate = |from, to| Command::Relocate {
            sha1: f,
            from: PairId(from),
            to: PairId(to),
        };
        assert_eq!(
            s.execute(&relocate(2, 3)).unwrap(),
            Response::Relocated(false)
        );
        assert_eq!(
            s.execute(&relocate(1, 3)).unwrap(),
            Response::Relocated(true)
        );
        assert_eq!(s.file(&f).unwrap().unwrap().pair, PairId(3));
        s.execute(&Command::Dec {
            sha1: f,
            magic: m(5),
            now_secs: 7,
        })
        .unwrap();
        s.execute(&Command::RemoveDeleting {
            sha1: f,
            pair: PairId(1),
        })
        .unwrap();
        assert!(
            s.deleting(&f).unwrap().is_some(),
            "entry of another pair is kept"
        );
        s.execute(&Command::RemoveDeleting {
            sha1: f,
            pair: PairId(3),
        })
        .unwrap();
        assert!(s.deleting(&f).unwrap().is_none());
    }
}
