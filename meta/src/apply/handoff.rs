//! A split's commands in the FileDB groups (see [`crate::handoff`] for the order and
//! why each step is safe to run again): `HandOff`, `EndHandOff` and `DropHandedOff` in the
//! group that gives an interval away, `Ingest` in the one that receives it.

use redb::{ReadableTable, WriteTransaction};

use crate::groups::{GroupId, ShardMap};
use crate::handoff::{self, FileRow, HandOff, ROWS_MAX};
use crate::native_refs::{NATIVE_REFS, NativeRefs};
use crate::ownership::{self, Ownership};
use crate::ref_log::{REF_LOG, REF_PENDING, REF_RELEASED, RefState};
use crate::tables::{DELETING, FILES};
use crate::{MetaError, groups::SHA1_MIN};

/// `HandOff`: the group owns its part of `map` from now on and keeps the rows of what it
/// gives away, readable, for the copy. Answers the version it owns under. A map it owns
/// under already changes nothing (a resent step).
pub(super) fn hand_off(
    txn: &WriteTransaction,
    group: GroupId,
    map: &ShardMap,
) -> Result<u64, MetaError> {
    map.check()
        .map_err(|e| MetaError::InvalidCommand(e.to_string()))?;
    let new = Ownership::of(map, group)?;
    let have = ownership::read_in(txn)?;
    let (owned, owned_keys) = match &have {
        Some(have) if have.group != group => {
            return Err(MetaError::InvalidCommand(format!(
                "group {} cannot hand off group {group}'s ranges",
                have.group
            )));
        }
        Some(have) if have.map_version >= map.version => return Ok(have.map_version),
        Some(have) => (have.sha1.clone(), have.keys.clone()),
        None => (
            vec![(SHA1_MIN, None)],
            vec![(crate::groups::IndexStart::default(), None)],
        ),
    };
    if let Some(under_way) = handoff::read_in(txn)? {
        return Err(MetaError::InvalidCommand(format!(
            "group {group} has not finished the hand-off of map version {}",
            under_way.map_version
        )));
    }
    let given = handoff::given_away(&owned, &new.sha1);
    // An index split gives key intervals away; their writes are refused from here on as
    // any key the ownership row leaves out is (`check_owner`), their reads still answered.
    let given_keys = handoff::given_away(&owned_keys, &new.keys);
    ownership::write_in(txn, &new)?;
    if !given.is_empty() || !given_keys.is_empty() {
        let row = HandOff {
            map_version: map.version,
            sha1: given,
            readable: true,
            keys: given_keys,
            uploads_dropped_to: None,
        };
        handoff::write(txn, Some(&row))?;
    }
    Ok(new.map_version)
}

/// `EndHandOff`: reads of the handed-off intervals are `Moved` from now on (their new
/// owner owns them). Answers the hand-off's version; none under way changes nothing.
pub(super) fn end_hand_off(
    txn: &WriteTransaction,
    group: GroupId,
    map_version: u64,
) -> Result<u64, MetaError> {
    check_group(txn, group)?;
    match handoff::read_in(txn)? {
        Some(mut h) if h.map_version == map_version => {
            if h.readable {
                h.readable = false;
                handoff::write(txn, Some(&h))?;
            }
            Ok(map_version)
        }
        Some(h) => Err(MetaError::InvalidCommand(format!(
            "the hand-off under way is of map version {}, not {map_version}",
            h.map_version
        ))),
        None => Ok(map_version),
    }
}

/// `DropHandedOff`: removes up to `limit` (capped at [`ROWS_MAX`]) rows of the
/// handed-off intervals, after `EndHandOff`; the batch that finds none left removes the
/// hand-off row. Answers the rows removed and whether the hand-off is over.
pub(super) fn drop_handed_off(
    txn: &WriteTransaction,
    group: GroupId,
    map_version: u64,
    limit: u32,
) -> Result<(u32, bool), MetaError> {
    check_group(txn, group)?;
    let Some(h) = handoff::read_in(txn)? else {
        return Ok((0, true));
    };
    if h.map_version != map_version || h.readable {
        return Err(MetaError::InvalidCommand(format!(
            "the hand-off of map version {} is not ended (dropping {map_version})",
            h.map_version
        )));
    }
    let mut h = h;
    let mut left = limit.clamp(1, ROWS_MAX);
    let mut removed = 0;
    for &(start, end) in &h.sha1 {
        let upper = end.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
        let range = (std::ops::Bound::Included(start), upper);
        removed += drain_keys(&mut txn.open_table(FILES)?, range, &mut left)?;
        removed += drain_keys(&mut txn.open_table(DELETING)?, range, &mut left)?;
        removed += drain_keys(&mut txn.open_table(NATIVE_REFS)?, range, &mut left)?;
        removed += drain_ref_log(txn, (start, end), &mut left)?;
        if left == 0 {
            return Ok((removed, false));
        }
    }
    if !h.keys.is_empty() {
        let (gone, done) = super::index_handoff::drop_keys(txn, &mut h, &mut left)?;
        removed += gone;
        if !done {
            // Where the walk of the uploads has come to.
            handoff::write(txn, Some(&h))?;
            return Ok((removed, false));
        }
    }
    handoff::write(txn, None)?;
    Ok((removed, true))
}

/// Refuses a command meant for another group than the one whose ownership row `txn` holds.
fn check_group(txn: &WriteTransaction, group: GroupId) -> Result<(), MetaError> {
    match ownership::read_in(txn)? {
        Some(own) if own.group != group => Err(MetaError::InvalidCommand(format!(
            "a command of group {group} reached group {}",
            own.group
        ))),
        _ => Ok(()),
    }
}

/// Removes the keys of `range` from `table`, at most `left` (which it lowers).
fn drain_keys<V: redb::Value + 'static>(
    table: &mut redb::Table<'_, [u8; 20], V>,
    range: (std::ops::Bound<[u8; 20]>, std::ops::Bound<[u8; 20]>),
    left: &mut u32,
) -> Result<u32, MetaError> {
    let mut keys = Vec::new();
    for row in table.range::<[u8; 20]>(range)? {
        if keys.len() as u32 >= *left {
            break;
        }
        keys.push(row?.0.value());
    }
    for k in &keys {
        table.remove(k)?;
    }
    *left -= keys.len() as u32;
    Ok(keys.len() as u32)
}

/// Removes the `ref_log` rows of `[start, end)` and their index entries, at most `left`.
fn drain_ref_log(
    txn: &WriteTransaction,
    (start, end): ([u8; 20], Option<[u8; 20]>),
    left: &mut u32,
) -> Result<u32, MetaError> {
    let mut log = txn.open_table(REF_LOG)?;
    let upper = end.map_or(std::ops::Bound::Unbounded, |e| {
        std::ops::Bound::Excluded((e, 0))
    });
    let mut rows = Vec::new();
    for row in log.range::<([u8; 20], u64)>((std::ops::Bound::Included((start, 0)), upper))? {
        if rows.len() as u32 >= *left {
            break;
        }
        let (k, v) = row?;
        rows.push((k.value(), RefState::decode(v.value())?));
    }
    for ((sha1, ref_id), state) in &rows {
        log.remove((*sha1, *ref_id))?;
        unindex(txn, *sha1, *ref_id, state)?;
    }
    *left -= rows.len() as u32;
    Ok(rows.len() as u32)
}

/// The index entry of a `ref_log` row (by deadline or by release time).
fn index_key(sha1: [u8; 20], ref_id: u64, state: &RefState) -> (bool, (u64, [u8; 20], u64)) {
    match state {
        RefState::Pending { deadline_ms, .. } => (true, (*deadline_ms, sha1, ref_id)),
        RefState::Released { released_ms, .. } => (false, (*released_ms, sha1, ref_id)),
    }
}

fn unindex(
    txn: &WriteTransaction,
    sha1: [u8; 20],
    ref_id: u64,
    state: &RefState,
) -> Result<(), MetaError> {
    let (pending, key) = index_key(sha1, ref_id, state);
    if pending {
        txn.open_table(REF_PENDING)?.remove(key)?;
    } else {
        txn.open_table(REF_RELEASED)?.remove(key)?;
    }
    Ok(())
}

/// `Ingest`: writes rows copied from the group that handed them off, each as it was
/// there (a row present already is replaced by the copy: the copy may run again from its
/// start). `check_owner` refused the command unless this group owns every row's sha1.
/// Answers the rows written; None, with nothing written, once the copy is sealed.
pub(super) fn ingest(
    txn: &WriteTransaction,
    group: GroupId,
    rows: &[FileRow],
) -> Result<Option<u32>, MetaError> {
    if ownership::read_in(txn)?.is_none() {
        return Err(MetaError::InvalidCommand(format!(
            "group {group} owns no range yet: it receives rows only once it owns theirs"
        )));
    }
    check_group(txn, group)?;
    if handoff::sealed(&txn.open_table(crate::ownership::OWNERSHIP)?)?.is_some() {
        return Ok(None);
    }
    if rows.len() > ROWS_MAX as usize {
        return Err(MetaError::InvalidCommand(format!(
            "{} rows in one Ingest, at most {ROWS_MAX}",
            rows.len()
        )));
    }
    for row in rows {
        match row {
            FileRow::File { sha1, record } => {
                txn.open_table(FILES)?
                    .insert(sha1.0, record.encode_checked(sha1)?)?;
            }
            FileRow::Deleting { sha1, record } => {
                txn.open_table(DELETING)?.insert(sha1.0, record.encode())?;
            }
            FileRow::NativeRefs { sha1, count, magic } => {
                let refs = NativeRefs {
                    count: *count,
                    magic: *magic,
                };
                txn.open_table(NATIVE_REFS)?.insert(sha1.0, refs.encode())?;
            }
            FileRow::Ref {
                sha1,
                ref_id,
                state,
            } => {
                let mut log = txn.open_table(REF_LOG)?;
                let old = log
                    .get((sha1.0, *ref_id))?
                    .map(|v| RefState::decode(v.value()))
                    .transpose()?;
                if let Some(old) = old {
                    unindex(txn, sha1.0, *ref_id, &old)?;
                }
                log.insert((sha1.0, *ref_id), state.encode()?.as_slice())?;
                let (pending, key) = index_key(sha1.0, *ref_id, state);
                if pending {
                    txn.open_table(REF_PENDING)?.insert(key, ())?;
                } else {
                    txn.open_table(REF_RELEASED)?.insert(key, ())?;
                }
            }
        }
    }
    Ok(Some(rows.len() as u32))
}

/// `Seal`: the group takes no `Ingest` from now on (see [`crate::handoff`]). Answers the
/// version it was sealed under; sealing again changes nothing.
pub(super) fn seal(
    txn: &WriteTransaction,
    group: GroupId,
    map_version: u64,
) -> Result<u64, MetaError> {
    check_group(txn, group)?;
    if let Some(v) = handoff::sealed(&txn.open_table(crate::ownership::OWNERSHIP)?)? {
        return Ok(v);
    }
    handoff::seal(txn, map_version)?;
    Ok(map_version)
}
