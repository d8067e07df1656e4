//! Commands across groups (`docs/scaling.md`, sections 2 and 3): the check that a command
//! is about what this group owns, and the index group's half of cross-group references
//! (`ForeignRef`, `OutboxDone`, `Fence`, `ExpireFences`; the rows are in
//! [`crate::outbox`]).

use redb::{ReadableTable, WriteTransaction};

use crate::outbox::{
    DERIVED, FENCE_AGES, FENCE_KEEP_MS, FENCES, FenceOutcome, HELD, OBJECT_REF_IDS, OUTBOX,
    OutboxRow, PART_REF_IDS,
};
use crate::ownership;
use crate::ref_log::{BATCH_MAX, EXPIRE_MAX};
use crate::{Command, MetaError, Response};

/// Refuses with `Moved` a command about a sha1 or a key of the index this group does not
/// own: a FileDB command, a write that references content in place, a write naming keys
/// (or an upload by id, whose key its record gives). A `ForeignRef`'s content is the
/// other way round: it must be another group's, or the reference would be counted twice.
pub(super) fn check_owner(txn: &WriteTransaction, cmd: &Command) -> Result<(), MetaError> {
    let Some(own) = ownership::read_in(txn)? else {
        return Ok(());
    };
    let moved = || MetaError::Moved {
        map_version: own.map_version,
    };
    // The index's keys, named or an upload's, as a read checks them (`store/index.rs`).
    let keys_owned = cmd
        .index_keys()
        .iter()
        .all(|(bucket, key)| own.owns_key(bucket, key.as_bytes()));
    if !keys_owned {
        return Err(moved());
    }
    if let Some(upload_id) = upload_named(cmd)
        && let Some(upload) = super::uploads::find_upload(txn, upload_id)?
        && !own.owns_key(&upload.bucket, upload.key.as_bytes())
    {
        return Err(moved());
    }
    if let Command::ForeignRef { command, .. } = cmd {
        // None also for a ForeignRef inside: one reference, taken once.
        let Some(content) = command.content_reference() else {
            return Err(MetaError::InvalidCommand(
                "a ForeignRef around a command that references no content".into(),
            ));
        };
        if own.owns_sha1(&content.sha1.0) {
            return Err(moved());
        }
        return Ok(());
    }
    let named = filedb_sha1s(cmd)
        .chain(cmd.content_reference().map(|c| c.sha1.0))
        .any(|sha1| !own.owns_sha1(&sha1));
    if named {
        return Err(moved());
    }
    Ok(())
}

/// The upload a command names by id only (its parts, its completion, its abort).
fn upload_named(cmd: &Command) -> Option<&str> {
    match cmd {
        Command::PutPart { upload_id, .. }
        | Command::PutPartWithChecksum { upload_id, .. }
        | Command::CompleteUpload { upload_id, .. }
        | Command::AbortUpload { upload_id, .. } => Some(upload_id),
        Command::Tagged { command, .. }
        | Command::WithAcl { command, .. }
        | Command::Conditional { command, .. }
        | Command::Locked { command, .. }
        | Command::ForeignRef { command, .. } => upload_named(command),
        _ => None,
    }
}

/// The sha1s a FileDB command acts on.
fn filedb_sha1s(cmd: &Command) -> Box<dyn Iterator<Item = [u8; 20]> + '_> {
    if let Some(sha1) = cmd.filedb_sha1() {
        return Box::new(std::iter::once(sha1.0));
    }
    match cmd {
        Command::Settle { settles, .. } => Box::new(settles.iter().map(|s| s.sha1)),
        Command::DecBatch { decs, .. } => Box::new(decs.iter().map(|d| d.sha1)),
        Command::Ingest { rows, .. } => Box::new(rows.iter().map(|r| r.sha1().0)),
        _ => Box::new(std::iter::empty()),
    }
}

/// What a `ForeignRef`'s write stores the reference in.
pub(super) enum Written {
    /// The current version of (bucket, key).
    Object,
    /// A part of an upload of (bucket, key).
    Part { upload_id: String, number: u32 },
}

/// Before a `ForeignRef`'s write of (bucket, key) under `ref_id`: refused if the reference
/// was fenced, or is held or owed under the key already (a second entry under one
/// reference would let one dec release both).
pub(super) fn check_foreign(
    txn: &WriteTransaction,
    (bucket, key, ref_id): (&str, &str, u64),
) -> Result<(), MetaError> {
    if ref_id & DERIVED != 0 {
        return Err(MetaError::InvalidCommand(format!(
            "ref_id {ref_id:#x} has the bit of derived ids"
        )));
    }
    let at = (bucket, key.as_bytes(), ref_id);
    if txn.open_table(FENCES)?.get(at)?.is_some() {
        return Err(MetaError::Fenced);
    }
    if in_use(txn, at)? {
        return Err(MetaError::InvalidCommand(format!(
            "ref_id {ref_id} is used under {bucket}/{key} already"
        )));
    }
    Ok(())
}

/// Whether (bucket, key) holds reference `ref_id`, or owes its dec.
fn in_use(txn: &WriteTransaction, at: (&str, &[u8], u64)) -> Result<bool, MetaError> {
    Ok(txn.open_table(HELD)?.get(at)?.is_some() || txn.open_table(OUTBOX)?.get(at)?.is_some())
}

/// After a `ForeignRef`'s write, which answered `response`: the reference kept beside what
/// it wrote (an object version by the seq the answer gives it), and in `held_refs`.
pub(super) fn keep_foreign(
    txn: &WriteTransaction,
    (bucket, key, ref_id): (&str, &str, u64),
    written: Written,
    response: &Response,
) -> Result<(), MetaError> {
    match written {
        Written::Object => {
            let seq = match response {
                Response::ObjectPut { seq, .. } | Response::VersionStored { seq, .. } => *seq,
                other => {
                    return Err(MetaError::Unexpected(format!(
                        "{bucket}/{key}: a write answered {other:?}"
                    )));
                }
            };
            txn.open_table(OBJECT_REF_IDS)?
                .insert((bucket, key.as_bytes(), seq), ref_id)?;
        }
        Written::Part { upload_id, number } => {
            txn.open_table(PART_REF_IDS)?
                .insert((upload_id.as_str(), number), ref_id)?;
        }
    }
    txn.open_table(HELD)?
        .insert((bucket, key.as_bytes(), ref_id), ())?;
    Ok(())
}

/// `OutboxDone`: the rows whose decs were applied.
pub(super) fn outbox_done(txn: &WriteTransaction, rows: &[OutboxRow]) -> Result<u32, MetaError> {
    if rows.len() > BATCH_MAX {
        return Err(MetaError::InvalidCommand(format!(
            "{} outbox rows in one command, at most {BATCH_MAX}",
            rows.len()
        )));
    }
    let mut outbox = txn.open_table(OUTBOX)?;
    let mut dropped = 0;
    for r in rows {
        if outbox
            .remove((r.bucket.as_str(), r.key.as_bytes(), r.ref_id))?
            .is_some()
        {
            dropped += 1;
        }
    }
    Ok(dropped)
}

/// `Fence`: whether the reference is here, and if not, a fence so that it never will be.
pub(super) fn fence(
    txn: &WriteTransaction,
    (bucket, key, ref_id): (&str, &str, u64),
    now_ms: u64,
) -> Result<FenceOutcome, MetaError> {
    let at = (bucket, key.as_bytes(), ref_id);
    if in_use(txn, at)? {
        return Ok(FenceOutcome::Present);
    }
    let mut fences = txn.open_table(FENCES)?;
    // Asked again (a lost answer): the first fence stands, with its age.
    if fences.get(at)?.is_none() {
        fences.insert(at, now_ms)?;
        txn.open_table(FENCE_AGES)?
            .insert((now_ms, bucket, key.as_bytes(), ref_id), ())?;
    }
    Ok(FenceOutcome::Fenced)
}

/// `ExpireFences`: the oldest fences past [`FENCE_KEEP_MS`], at most `limit`.
pub(super) fn expire_fences(
    txn: &WriteTransaction,
    now_ms: u64,
    limit: u32,
) -> Result<u32, MetaError> {
    let limit = limit.min(EXPIRE_MAX) as usize;
    let before = now_ms.saturating_sub(FENCE_KEEP_MS);
    let mut ages = txn.open_table(FENCE_AGES)?;
    let mut due = Vec::new();
    for row in ages.range(..(before, "", &[][..], 0))?.take(limit) {
        let (k, _) = row?;
        let (fenced_ms, bucket, key, ref_id) = k.value();
        due.push((fenced_ms, bucket.to_string(), key.to_vec(), ref_id));
    }
    let mut fences = txn.open_table(FENCES)?;
    for (fenced_ms, bucket, key, ref_id) in &due {
        ages.remove((*fenced_ms, bucket.as_str(), key.as_slice(), *ref_id))?;
        fences.remove((bucket.as_str(), key.as_slice(), *ref_id))?;
    }
    Ok(due.len() as u32)
}
