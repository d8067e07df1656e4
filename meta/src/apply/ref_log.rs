//! The FileDB group's side of cross-group references: `RefInc`, `Settle`, `DecBatch` and
//! `ExpireReleased` (see [`crate::ref_log`] for the rows and why each is applied once).

use placement::{Magic, PairId, Sha1};
use redb::{ReadableTable, WriteTransaction};

use super::file_rows::{Files, dec_content, inc, insert_or_inc, read_file};
use crate::ref_log::{
    self, BATCH_MAX, EXPIRE_MAX, REF_LOG, REF_PENDING, REF_RELEASED, RELEASED_KEEP_MS, RefDec,
    RefOutcome, RefState, Settle,
};
use crate::tables::{FILES, FileRecord};
use crate::{DecOutcome, MetaError};

/// What `RefInc` carries besides the content.
pub(super) struct RefIncArgs<'a> {
    pub sha1: &'a Sha1,
    pub magic: Magic,
    pub ref_id: u64,
    pub pair: Option<PairId>,
    pub bucket: &'a str,
    pub key: &'a str,
    pub deadline_ms: u64,
    pub now_ms: u64,
}

pub(super) fn ref_inc(txn: &WriteTransaction, a: RefIncArgs<'_>) -> Result<FileRecord, MetaError> {
    let mut log = txn.open_table(REF_LOG)?;
    let mut files = txn.open_table(FILES)?;
    match ref_log::read(&log, &a.sha1.0, a.ref_id)? {
        // A retry: the reference is taken already.
        Some(RefState::Pending { magic, .. }) if magic == a.magic.get() => {
            return current(&files, a.sha1);
        }
        Some(RefState::Pending { .. }) => {
            return Err(MetaError::InvalidCommand(format!(
                "reference {} of {} was taken with another magic",
                a.ref_id, a.sha1
            )));
        }
        // Settled as an orphan (or dec'd): its index entry must never be written.
        Some(RefState::Released { .. }) => return Err(MetaError::RefReleased),
        None => {}
    }
    if a.now_ms > a.deadline_ms {
        return Err(MetaError::RefPastDeadline);
    }
    let rec = match a.pair {
        Some(pair) => insert_or_inc(&mut files, a.sha1, a.magic, pair)?,
        None => inc(&mut files, a.sha1, a.magic)?,
    };
    let state = RefState::Pending {
        magic: a.magic.get(),
        bucket: a.bucket.to_string(),
        key: a.key.to_string(),
        deadline_ms: a.deadline_ms,
    };
    log.insert((a.sha1.0, a.ref_id), state.encode()?.as_slice())?;
    txn.open_table(REF_PENDING)?
        .insert((a.deadline_ms, a.sha1.0, a.ref_id), ())?;
    Ok(rec)
}

fn current(files: &Files<'_>, sha1: &Sha1) -> Result<FileRecord, MetaError> {
    // A pending reference holds the record: it cannot have gone.
    read_file(files, sha1)?
        .ok_or_else(|| MetaError::Corrupt(format!("{sha1} has a pending reference and no record")))
}

fn bounded<T>(items: &[T], what: &str) -> Result<(), MetaError> {
    if items.len() > BATCH_MAX {
        return Err(MetaError::InvalidCommand(format!(
            "{} {what} in one command, at most {BATCH_MAX}",
            items.len()
        )));
    }
    Ok(())
}

/// Releases reference `ref_id` of `sha1` with `magic`: the dec, and its row `Released`
/// (replacing a pending row and its deadline entry).
fn release(
    txn: &WriteTransaction,
    sha1: &Sha1,
    ref_id: u64,
    magic: Magic,
    pending_deadline: Option<u64>,
    now_ms: u64,
) -> Result<DecOutcome, MetaError> {
    let outcome = dec_content(txn, sha1, magic, now_ms / 1000)?;
    if let Some(deadline) = pending_deadline {
        txn.open_table(REF_PENDING)?
            .remove((deadline, sha1.0, ref_id))?;
    }
    let state = RefState::Released {
        magic: magic.get(),
        released_ms: now_ms,
    };
    txn.open_table(REF_LOG)?
        .insert((sha1.0, ref_id), state.encode()?.as_slice())?;
    txn.open_table(REF_RELEASED)?
        .insert((now_ms, sha1.0, ref_id), ())?;
    Ok(outcome)
}

pub(super) fn settle(
    txn: &WriteTransaction,
    settles: &[Settle],
    now_ms: u64,
) -> Result<Vec<RefOutcome>, MetaError> {
    bounded(settles, "settles")?;
    let mut out = Vec::with_capacity(settles.len());
    for s in settles {
        let sha1 = Sha1(s.sha1);
        let row = ref_log::read(&txn.open_table(REF_LOG)?, &s.sha1, s.ref_id)?;
        let Some(RefState::Pending {
            magic, deadline_ms, ..
        }) = row
        else {
            out.push(RefOutcome::Unchanged);
            continue;
        };
        if s.release {
            let magic = Magic::new(magic)
                .map_err(|e| MetaError::Corrupt(format!("ref_log magic of {sha1}: {e}")))?;
            let outcome = release(txn, &sha1, s.ref_id, magic, Some(deadline_ms), now_ms)?;
            out.push(RefOutcome::Released(outcome));
        } else {
            txn.open_table(REF_LOG)?.remove((s.sha1, s.ref_id))?;
            txn.open_table(REF_PENDING)?
                .remove((deadline_ms, s.sha1, s.ref_id))?;
            out.push(RefOutcome::Confirmed);
        }
    }
    Ok(out)
}

pub(super) fn dec_batch(
    txn: &WriteTransaction,
    decs: &[RefDec],
    now_ms: u64,
) -> Result<Vec<RefOutcome>, MetaError> {
    bounded(decs, "decs")?;
    let mut out = Vec::with_capacity(decs.len());
    for d in decs {
        let sha1 = Sha1(d.sha1);
        let row = ref_log::read(&txn.open_table(REF_LOG)?, &d.sha1, d.ref_id)?;
        let outcome = match row {
            Some(RefState::Released { .. }) => RefOutcome::Unchanged,
            Some(state) if state.magic() != d.magic.get() => RefOutcome::MagicMismatch {
                recorded: state.magic(),
            },
            // A pending reference is settled by its dec; one with no row was confirmed,
            // and this is its first dec.
            pending => {
                let deadline = match pending {
                    Some(RefState::Pending { deadline_ms, .. }) => Some(deadline_ms),
                    _ => None,
                };
                RefOutcome::Released(release(txn, &sha1, d.ref_id, d.magic, deadline, now_ms)?)
            }
        };
        out.push(outcome);
    }
    Ok(out)
}

pub(super) fn expire_released(
    txn: &WriteTransaction,
    now_ms: u64,
    limit: u32,
) -> Result<u32, MetaError> {
    let before = now_ms.saturating_sub(RELEASED_KEEP_MS);
    let limit = limit.min(EXPIRE_MAX) as usize;
    let mut released = txn.open_table(REF_RELEASED)?;
    let mut old = Vec::new();
    for item in released.range(..(before, [0u8; 20], 0u64))? {
        if old.len() >= limit {
            break;
        }
        old.push(item?.0.value());
    }
    let mut log = txn.open_table(REF_LOG)?;
    for (at, sha1, ref_id) in &old {
        released.remove((*at, *sha1, *ref_id))?;
        // Only the row this entry indexes: a reference released again after its row
        // expired (a very late duplicate) has a newer row with an entry of its own.
        if let Some(RefState::Released { released_ms, .. }) = ref_log::read(&log, sha1, *ref_id)?
            && released_ms == *at
        {
            log.remove((*sha1, *ref_id))?;
        }
    }
    Ok(old.len() as u32)
}
