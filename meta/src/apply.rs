//! `apply`: the only code that writes to the metadata tables.
//!
//! Deterministic by construction: no clock, no randomness, no I/O besides the transaction.
//! A command either applies whole or returns an error, in which case the caller aborts the
//! transaction, so a half-applied command is never committed.
//!
//! The reference arithmetic is not here: [`super::filedb`] says what an `inc` or a
//! `dec` makes of a record, and this module only moves records in and out of the tables.

use placement::{Magic, PairId, PairRecord, Sha1};
use redb::{ReadableTable, Table, WriteTransaction};

use super::command::{Command, ContentSource, DecOutcome, NewObject, Response, WritePrecondition};
use super::jobs::JobState;
use super::tables::{
    self, BUCKETS, BucketRecord, COUNTERS, DELETING, DeletingRecord, FILES, FileRecord, OBJECT_SEQ,
    OBJECTS, ObjectRecord, PAIRS, PARTS, PartRecord, UPLOADS, UploadRecord,
};
use super::{MetaError, filedb, jobs, keys, lifecycle, native_refs};

type Files<'t> = Table<'t, [u8; 20], [u8; 16]>;
type Deleting<'t> = Table<'t, [u8; 20], [u8; 12]>;

/// Applies one command inside `txn`.
pub fn apply(txn: &WriteTransaction, cmd: &Command) -> Result<Response, MetaError> {
    match cmd {
        Command::PutPair { id, record } => {
            let bytes = tables::encode_pair(record)?;
            txn.open_table(PAIRS)?.insert(id.0, bytes.as_slice())?;
            Ok(Response::Done)
        }
        Command::AddPair { record } => {
            let mut pairs = txn.open_table(PAIRS)?;
            let next = match pairs.last()? {
                Some((k, _)) => k.value().checked_add(1).ok_or(MetaError::NoPair)?,
                None => 0,
            };
            pairs.insert(next, tables::encode_pair(record)?.as_slice())?;
            Ok(Response::Pair(PairId(next), record.clone()))
        }
        Command::SetPairFlags { id, set, clear } => {
            let mut pairs = txn.open_table(PAIRS)?;
            let mut record: PairRecord = match pairs.get(id.0)? {
                Some(v) => tables::decode_versioned("pairs", v.value())?,
                None => return Err(MetaError::NoPair),
            };
            record.flags = record.flags.with(*set).without(*clear);
            pairs.insert(id.0, tables::encode_pair(&record)?.as_slice())?;
            Ok(Response::Pair(*id, record))
        }
        Command::CreateBucket { bucket, created_ms } => {
            create_bucket(txn, bucket, *created_ms, &None)
        }
        Command::CreateOwnedBucket {
            bucket,
            created_ms,
            owner,
        } => create_bucket(txn, bucket, *created_ms, owner),
        Command::SetBucketCors { bucket, rules } => {
            let mut buckets = txn.open_table(BUCKETS)?;
            let mut record = match buckets.get(bucket.as_str())? {
                Some(v) => BucketRecord::decode(v.value())?,
                None => return Err(MetaError::NoSuchBucket),
            };
            record.cors = rules.clone();
            buckets.insert(bucket.as_str(), record.encode()?.as_slice())?;
            Ok(Response::Done)
        }
        Command::DeleteBucket { bucket } => {
            check_bucket(txn, bucket)?;
            if super::tables::first_key_of(txn, bucket)?.is_some() {
                return Err(MetaError::BucketNotEmpty);
            }
            // As S3: uploads in progress keep the bucket from being deleted, so that no
            // upload or part outlives its bucket.
            if !lifecycle::uploads_of(txn, bucket)?.is_empty() {
                return Err(MetaError::BucketNotEmpty);
            }
            forget_bucket(txn, bucket)?;
            Ok(Response::Done)
        }
        Command::PutObject {
            bucket,
            key,
            object,
            source,
            now_secs,
            precondition,
        } => put_object(txn, bucket, key, object, *source, *now_secs, precondition),
        Command::CopyObject {
            bucket,
            key,
            object,
            from_bucket,
            from_key,
            from_seq,
            now_secs,
        } => {
            check_bucket(txn, bucket)?;
            match read_object(txn, from_bucket, from_key)? {
                Some(src) if src.seq == *from_seq && src.sha1 == object.sha1 => {}
                Some(_) => return Err(MetaError::PreconditionFailed),
                None => return Err(MetaError::NoSuchKey),
            }
            // The source holds a reference, so its content is live: Existing cannot fail.
            if !reference(txn, &object.sha1, object.magic, ContentSource::Existing)? {
                return Err(MetaError::Corrupt(format!(
                    "{from_bucket}/{from_key}: content {} missing",
                    object.sha1
                )));
            }
            store_object(txn, bucket, key, object, *now_secs)
        }
        Command::DeleteObjects {
            bucket,
            keys,
            now_secs,
        } => {
            check_bucket(txn, bucket)?;
            let mut existed = Vec::with_capacity(keys.len());
            for key in keys {
                let removed = txn
                    .open_table(OBJECTS)?
                    .remove((bucket.as_str(), key.as_bytes()))?
                    .map(|v| tables::decode_versioned::<ObjectRecord>("objects", v.value()))
                    .transpose()?;
                if let Some(old) = &removed {
                    release(txn, &old.sha1, old.magic, *now_secs)?;
                }
                existed.push(removed.is_some());
            }
            Ok(Response::ObjectsDeleted(existed))
        }
        Command::CreateUpload { upload_id, upload } => {
            check_bucket(txn, &upload.bucket)?;
            let mut uploads = txn.open_table(UPLOADS)?;
            if uploads.get(upload_id.as_str())?.is_some() {
                return Err(MetaError::Corrupt(format!("upload id {upload_id} reused")));
            }
            uploads.insert(
                upload_id.as_str(),
                tables::encode_versioned(upload)?.as_slice(),
            )?;
            Ok(Response::Done)
        }
        Command::PutPart {
            upload_id,
            part_number,
            part,
            source,
            now_secs,
        } => {
            read_upload(txn, upload_id)?;
            if !reference(txn, &part.sha1, part.magic, *source)? {
                return Ok(Response::ContentGone);
            }
            let bytes = tables::encode_versioned(part)?;
            let replaced = txn
                .open_table(PARTS)?
                .insert((upload_id.as_str(), *part_number), bytes.as_slice())?
                .map(|v| tables::decode_versioned::<PartRecord>("parts", v.value()))
                .transpose()?;
            if let Some(old) = replaced {
                release(txn, &old.sha1, old.magic, *now_secs)?;
            }
            Ok(Response::PartPut)
        }
        Command::CompleteUpload {
            upload_id,
            object,
            parts,
            source,
            now_secs,
        } => {
            let upload = read_upload(txn, upload_id)?;
            check_bucket(txn, &upload.bucket)?;
            {
                let table = txn.open_table(PARTS)?;
                for (number, sha1) in parts {
                    let current = table
                        .get((upload_id.as_str(), *number))?
                        .map(|v| tables::decode_versioned::<PartRecord>("parts", v.value()))
                        .transpose()?;
                    if current.is_none_or(|p| p.sha1 != *sha1) {
                        return Err(MetaError::InvalidPart(format!(
                            "part {number} changed or vanished"
                        )));
                    }
                }
            }
            if !reference(txn, &object.sha1, object.magic, *source)? {
                return Ok(Response::ContentGone);
            }
            drop_upload(txn, upload_id, *now_secs)?;
            store_object(txn, &upload.bucket, &upload.key, object, *now_secs)
        }
        Command::AbortUpload {
            upload_id,
            now_secs,
        } => {
            read_upload(txn, upload_id)?;
            drop_upload(txn, upload_id, *now_secs)?;
            Ok(Response::Done)
        }
        Command::DeleteObject {
            bucket,
            key,
            now_secs,
        } => {
            if txn.open_table(BUCKETS)?.get(bucket.as_str())?.is_none() {
                return Err(MetaError::NoSuchBucket);
            }
            let removed = match txn
                .open_table(OBJECTS)?
                .remove((bucket.as_str(), key.as_bytes()))?
            {
                Some(v) => Some(tables::decode_versioned::<ObjectRecord>(
                    "objects",
                    v.value(),
                )?),
                None => None,
            };
            let released = match &removed {
                Some(old) => Some(release(txn, &old.sha1, old.magic, *now_secs)?),
                None => None,
            };
            Ok(Response::ObjectDeleted { removed, released })
        }
        Command::RemoveDeleting { sha1, pair } => {
            let mut deleting = txn.open_table(DELETING)?;
            let names_pair = deleting
                .get(sha1.0)?
                .is_some_and(|v| DeletingRecord::decode(&v.value()).pair == *pair);
            if names_pair {
                deleting.remove(sha1.0)?;
            }
            Ok(Response::Done)
        }
        Command::Relocate { sha1, from, to } => {
            let mut files = txn.open_table(FILES)?;
            match read_file(&files, sha1)? {
                Some(mut rec) if rec.pair == *from => {
                    rec.pair = *to;
                    write_file(&mut files, sha1, &rec)?;
                    Ok(Response::Relocated(true))
                }
                _ => Ok(Response::Relocated(false)),
            }
        }
        Command::Inc { sha1, magic } => {
            let rec = inc(&mut txn.open_table(FILES)?, sha1, *magic)?;
            native_refs::taken(txn, sha1, *magic)?;
            Ok(Response::File(rec))
        }
        Command::InsertOrInc { sha1, magic, pair } => {
            let rec = insert_or_inc(&mut txn.open_table(FILES)?, sha1, *magic, *pair)?;
            native_refs::taken(txn, sha1, *magic)?;
            Ok(Response::File(rec))
        }
        Command::Dec {
            sha1,
            magic,
            now_secs,
        } => {
            let outcome = {
                let mut files = txn.open_table(FILES)?;
                let mut deleting = txn.open_table(DELETING)?;
                dec(&mut files, &mut deleting, sha1, *magic, *now_secs)?
            };
            native_refs::released(txn, sha1, *magic)?;
            Ok(Response::Dec(outcome))
        }
        Command::SetBucketLifecycle { bucket, rules } => {
            lifecycle::set(txn, bucket, rules)?;
            Ok(Response::Done)
        }
        Command::ExpireObjects {
            bucket,
            objects,
            resume_after,
            day_secs,
            now_secs,
        } => {
            check_bucket(txn, bucket)?;
            if objects.len() > EXPIRE_KEYS_MAX {
                return Err(MetaError::Unexpected(format!(
                    "ExpireObjects of {} keys",
                    objects.len()
                )));
            }
            let due =
                lifecycle::expirable(txn, bucket, objects, resume_after, *day_secs, *now_secs)?;
            for ((key, _), due) in objects.iter().zip(&due) {
                if !due {
                    continue;
                }
                let removed = txn
                    .open_table(OBJECTS)?
                    .remove((bucket.as_str(), key.as_bytes()))?
                    .map(|v| tables::decode_versioned::<ObjectRecord>("objects", v.value()))
                    .transpose()?;
                if let Some(old) = removed {
                    release(txn, &old.sha1, old.magic, *now_secs)?;
                }
            }
            Ok(Response::ObjectsDeleted(due))
        }
        Command::CreateKey { access_key, record } => {
            keys::create_key(txn, access_key, record).map(|()| Response::Done)
        }
        Command::DeleteKey { access_key } => {
            keys::delete_key(txn, access_key).map(|()| Response::Done)
        }
        Command::SetKeyRights {
            access_key,
            bucket,
            set,
            clear,
        } => {
            check_bucket(txn, bucket)?;
            keys::change_grant(txn, access_key, bucket, *set, *clear).map(|()| Response::Done)
        }
        Command::CreateJob { op, now_ms } => {
            jobs::create(txn, op, *now_ms).map(Response::JobCreated)
        }
        Command::JobChunk {
            id,
            keys,
            through,
            done,
            now_ms,
        } => {
            let chunk = jobs::chunk(txn, *id, keys, through, *done, *now_ms)?;
            for old in &chunk.removed {
                release(txn, &old.sha1, old.magic, now_ms / 1000)?;
            }
            Ok(Response::JobChunkDone {
                deleted: chunk.removed.len() as u32,
                running: chunk.running,
            })
        }
        Command::EndJob { id, state, now_ms } => {
            jobs::end(txn, *id, state.clone(), *now_ms).map(Response::Job)
        }
        Command::JobAbortUploads {
            id,
            upload_ids,
            now_ms,
        } => {
            let ending = jobs::uploads_to_abort(txn, *id, upload_ids)?;
            for upload_id in &ending {
                drop_upload(txn, upload_id, now_ms / 1000)?;
            }
            let running = jobs::read(txn, *id)?.is_some_and(|j| j.state == JobState::Running);
            Ok(Response::JobChunkDone {
                deleted: ending.len() as u32,
                running,
            })
        }
        Command::SetClusterVersion { version } => Ok(Response::ClusterVersion(
            super::cluster_version::apply_raise(txn, *version)?,
        )),
        Command::JobDeleteBucket { id, now_ms } => match jobs::finish_bucket(txn, *id, *now_ms)? {
            jobs::BucketEnd::NotRunning => jobs::read(txn, *id)?
                .map(Response::Job)
                .ok_or(MetaError::NotFound),
            jobs::BucketEnd::Kept(job) => Ok(Response::Job(job)),
            jobs::BucketEnd::Delete(bucket) => {
                // Uploads begun after the last abort chunk: no upload outlives its bucket.
                for upload_id in lifecycle::uploads_of(txn, &bucket)? {
                    drop_upload(txn, &upload_id, now_ms / 1000)?;
                }
                // Deleted meanwhile by a plain DeleteBucket: the job's end is the same.
                if txn.open_table(BUCKETS)?.get(bucket.as_str())?.is_some() {
                    forget_bucket(txn, &bucket)?;
                }
                jobs::mark_done(txn, *id, *now_ms).map(Response::Job)
            }
        },
    }
}

/// Removes an empty bucket's record and what hangs on it: its lifecycle rules and the
/// keys' grants (a later bucket of the same name, perhaps another key's, starts with none).
fn forget_bucket(txn: &WriteTransaction, bucket: &str) -> Result<(), MetaError> {
    txn.open_table(BUCKETS)?.remove(bucket)?;
    lifecycle::forget(txn, bucket)?;
    keys::drop_grants(txn, bucket)?;
    Ok(())
}

/// Bound on the keys of one `ExpireObjects` (as DeleteObjects): one transaction stays short.
pub const EXPIRE_KEYS_MAX: usize = 1000;

/// A new bucket owned by `owner`; an existing one is the caller's (BucketExists) or
/// another key's (BucketOwnedByAnother), as S3 tells the two apart.
fn create_bucket(
    txn: &WriteTransaction,
    bucket: &str,
    created_ms: u64,
    owner: &Option<String>,
) -> Result<Response, MetaError> {
    let mut buckets = txn.open_table(BUCKETS)?;
    if let Some(v) = buckets.get(bucket)? {
        let existing = BucketRecord::decode(v.value())?;
        return Err(if existing.owner == *owner {
            MetaError::BucketExists
        } else {
            MetaError::BucketOwnedByAnother
        });
    }
    let record = BucketRecord {
        created_ms,
        cors: None,
        owner: owner.clone(),
    };
    buckets.insert(bucket, record.encode()?.as_slice())?;
    drop(buckets);
    // Uploads left by a bucket deleted before DeleteBucket refused them: a new bucket of
    // the same name must not inherit them.
    for upload_id in lifecycle::uploads_of(txn, bucket)? {
        drop_upload(txn, &upload_id, created_ms / 1000)?;
    }
    lifecycle::forget(txn, bucket)?;
    Ok(Response::Done)
}

fn check_bucket(txn: &WriteTransaction, bucket: &str) -> Result<(), MetaError> {
    match txn.open_table(BUCKETS)?.get(bucket)? {
        Some(_) => Ok(()),
        None => Err(MetaError::NoSuchBucket),
    }
}

fn read_object(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
) -> Result<Option<ObjectRecord>, MetaError> {
    match txn.open_table(OBJECTS)?.get((bucket, key.as_bytes()))? {
        Some(v) => Ok(Some(tables::decode_versioned("objects", v.value())?)),
        None => Ok(None),
    }
}

/// Adds the reference of a new object or part. `Ok(false)`: the `Existing` content has
/// gone and nothing changed.
fn reference(
    txn: &WriteTransaction,
    sha1: &Sha1,
    magic: Magic,
    source: ContentSource,
) -> Result<bool, MetaError> {
    let mut files = txn.open_table(FILES)?;
    match source {
        ContentSource::Existing => match inc(&mut files, sha1, magic) {
            Ok(_) => Ok(true),
            Err(MetaError::NotFound) => Ok(false),
            Err(e) => Err(e),
        },
        ContentSource::Stored(pair) => insert_or_inc(&mut files, sha1, magic, pair).map(|_| true),
    }
}

fn check_precondition(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
    precondition: &Option<WritePrecondition>,
) -> Result<(), MetaError> {
    match precondition {
        None => Ok(()),
        Some(WritePrecondition::NoneMatchAny) => match read_object(txn, bucket, key)? {
            Some(_) => Err(MetaError::PreconditionFailed),
            None => Ok(()),
        },
        Some(WritePrecondition::Match(etag)) => match read_object(txn, bucket, key)? {
            Some(o) if o.etag() == *etag => Ok(()),
            Some(_) => Err(MetaError::PreconditionFailed),
            None => Err(MetaError::NoSuchKey),
        },
    }
}

/// Stores `object` under bucket/key with the next sequence number and releases the
/// content of the object it replaces. The new content must already be referenced.
fn store_object(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
    object: &NewObject,
    now_secs: u64,
) -> Result<Response, MetaError> {
    let seq = {
        let mut counters = txn.open_table(COUNTERS)?;
        let next = counters.get(OBJECT_SEQ)?.map(|v| v.value()).unwrap_or(0) + 1;
        counters.insert(OBJECT_SEQ, next)?;
        next
    };
    let record = object.clone().into_record(seq);
    let bytes = tables::encode_versioned(&record)?;
    let replaced = match txn
        .open_table(OBJECTS)?
        .insert((bucket, key.as_bytes()), bytes.as_slice())?
    {
        Some(v) => Some(tables::decode_versioned::<ObjectRecord>(
            "objects",
            v.value(),
        )?),
        None => None,
    };
    let released = match &replaced {
        Some(old) => Some(release(txn, &old.sha1, old.magic, now_secs)?),
        None => None,
    };
    Ok(Response::ObjectPut {
        seq,
        replaced,
        released,
    })
}

fn put_object(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
    object: &NewObject,
    source: ContentSource,
    now_secs: u64,
    precondition: &Option<WritePrecondition>,
) -> Result<Response, MetaError> {
    check_bucket(txn, bucket)?;
    check_precondition(txn, bucket, key, precondition)?;
    if !reference(txn, &object.sha1, object.magic, source)? {
        return Ok(Response::ContentGone);
    }
    store_object(txn, bucket, key, object, now_secs)
}

fn read_upload(txn: &WriteTransaction, upload_id: &str) -> Result<UploadRecord, MetaError> {
    match txn.open_table(UPLOADS)?.get(upload_id)? {
        Some(v) => tables::decode_versioned("uploads", v.value()),
        None => Err(MetaError::NoSuchUpload),
    }
}

/// Removes an upload and its parts, dereferencing every part's content.
fn drop_upload(txn: &WriteTransaction, upload_id: &str, now_secs: u64) -> Result<(), MetaError> {
    let mut parts_gone = Vec::new();
    {
        let mut parts = txn.open_table(PARTS)?;
        for entry in parts.extract_from_if((upload_id, 0)..=(upload_id, u32::MAX), |_, _| true)? {
            let (_, v) = entry?;
            parts_gone.push(tables::decode_versioned::<PartRecord>("parts", v.value())?);
        }
    }
    for part in parts_gone {
        release(txn, &part.sha1, part.magic, now_secs)?;
    }
    txn.open_table(UPLOADS)?.remove(upload_id)?;
    Ok(())
}

/// Dereferences the content of a removed object. A missing record is reported, not fatal:
/// the object is gone either way and failing would leave the client unable to delete it.
fn release(
    txn: &WriteTransaction,
    sha1: &Sha1,
    magic: Magic,
    now_secs: u64,
) -> Result<DecOutcome, MetaError> {
    let mut files = txn.open_table(FILES)?;
    let mut deleting = txn.open_table(DELETING)?;
    match dec(&mut files, &mut deleting, sha1, magic, now_secs) {
        Err(MetaError::NotFound) => Ok(DecOutcome::Missing),
        other => other,
    }
}

fn read_file(files: &Files<'_>, sha1: &Sha1) -> Result<Option<FileRecord>, MetaError> {
    files
        .get(sha1.0)?
        .map(|v| FileRecord::decode_checked(sha1, &v.value()))
        .transpose()
}

fn write_file(files: &mut Files<'_>, sha1: &Sha1, rec: &FileRecord) -> Result<(), MetaError> {
    files.insert(sha1.0, rec.encode_checked(sha1)?)?;
    Ok(())
}

fn inc(files: &mut Files<'_>, sha1: &Sha1, magic: Magic) -> Result<FileRecord, MetaError> {
    let mut rec = read_file(files, sha1)?.ok_or(MetaError::NotFound)?;
    rec.inc(magic)?;
    write_file(files, sha1, &rec)?;
    Ok(rec)
}

fn insert_or_inc(
    files: &mut Files<'_>,
    sha1: &Sha1,
    magic: Magic,
    pair: PairId,
) -> Result<FileRecord, MetaError> {
    let rec = filedb::insert_or_inc(read_file(files, sha1)?, magic, pair)?;
    write_file(files, sha1, &rec)?;
    Ok(rec)
}

/// The article's `dec` (see [`FileRecord::dec`]): a deletable record moves from `files`
/// to `deleting`, stamped with `now_secs`; any other stays in `files` as `dec` left it.
fn dec(
    files: &mut Files<'_>,
    deleting: &mut Deleting<'_>,
    sha1: &Sha1,
    magic: Magic,
    now_secs: u64,
) -> Result<DecOutcome, MetaError> {
    let mut rec = read_file(files, sha1)?.ok_or(MetaError::NotFound)?;
    let outcome = rec.dec(magic);
    if outcome == DecOutcome::Deleting {
        files.remove(sha1.0)?;
        let entry = DeletingRecord {
            pair: rec.pair,
            since_secs: now_secs,
        };
        deleting.insert(sha1.0, entry.encode())?;
    } else {
        write_file(files, sha1, &rec)?;
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::super::MetaStore;
    use super::*;

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
