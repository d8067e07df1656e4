//! An index split's commands (see [`crate::index_handoff`] for the rows and
//! [`crate::handoff`] for the order): `IngestIndex` in the group that receives key
//! intervals, and the drop of their rows in the group that handed them off (a part of
//! `DropHandedOff`).

use std::ops::Bound;

use redb::{ReadableTable, WriteTransaction};

use crate::MetaError;
use crate::checksums::{OBJECT_CHECKSUMS, UPLOAD_CHECKSUMS};
use crate::extras::UPLOAD_EXTRAS;
use crate::groups::GroupId;
use crate::handoff::{self, HandOff, ROWS_MAX};
use crate::index_handoff::{IndexRow, upload_inside};
use crate::outbox::{FENCE_AGES, FENCES, HELD, OBJECT_REF_IDS, OUTBOX, PART_REF_IDS};
use crate::ownership::{self, KeyInterval};
use crate::tables::{
    self, COUNTERS, NULL_VERSIONS, OBJECT_SEQ, OBJECTS, PARTS, UPLOADS, UploadRecord, VERSIONS,
};
use crate::versions::{VersionRecord, decode_object};

/// `IngestIndex`: writes rows copied from the group that handed their keys to `group`,
/// each as it was there (a row present already is replaced: the copy may run again from
/// its start). Refused with `Moved` unless the group owns each row's key (an upload's, for
/// the rows under an upload id, whose upload row must have come first). Answers the rows
/// written; None, with nothing written, once the copy is sealed.
pub(super) fn ingest(
    txn: &WriteTransaction,
    group: GroupId,
    rows: &[IndexRow],
) -> Result<Option<u32>, MetaError> {
    let Some(own) = ownership::read_in(txn)? else {
        return Err(MetaError::InvalidCommand(format!(
            "group {group} owns no range yet: it receives rows only once it owns theirs"
        )));
    };
    if own.group != group {
        return Err(MetaError::InvalidCommand(format!(
            "a command of group {group} reached group {}",
            own.group
        )));
    }
    if handoff::sealed(&txn.open_table(ownership::OWNERSHIP)?)?.is_some() {
        return Ok(None);
    }
    if rows.len() > ROWS_MAX as usize {
        return Err(MetaError::InvalidCommand(format!(
            "{} rows in one IngestIndex, at most {ROWS_MAX}",
            rows.len()
        )));
    }
    let moved = || MetaError::Moved {
        map_version: own.map_version,
    };
    let owned = |bucket: &str, key: &[u8]| {
        if own.owns_key(bucket, key) {
            Ok(())
        } else {
            Err(moved())
        }
    };
    let uploaded = |id: &str| -> Result<(), MetaError> {
        if txn.open_table(UPLOADS)?.get(id)?.is_some() {
            Ok(())
        } else {
            Err(MetaError::InvalidCommand(format!(
                "a row of upload {id} came before the upload"
            )))
        }
    };
    for row in rows {
        match row {
            IndexRow::Object { bucket, key, value } => {
                owned(bucket, key)?;
                txn.open_table(OBJECTS)?
                    .insert((bucket.as_str(), key.as_slice()), value.as_slice())?;
            }
            IndexRow::Version {
                bucket,
                key,
                order,
                value,
            } => {
                owned(bucket, key)?;
                txn.open_table(VERSIONS)?
                    .insert((bucket.as_str(), key.as_slice(), *order), value.as_slice())?;
            }
            IndexRow::NullVersion {
                bucket,
                key,
                number,
            } => {
                owned(bucket, key)?;
                txn.open_table(NULL_VERSIONS)?
                    .insert((bucket.as_str(), key.as_slice()), *number)?;
            }
            IndexRow::ObjectRefId {
                bucket,
                key,
                seq,
                ref_id,
            } => {
                owned(bucket, key)?;
                txn.open_table(OBJECT_REF_IDS)?
                    .insert((bucket.as_str(), key.as_slice(), *seq), *ref_id)?;
            }
            IndexRow::Held {
                bucket,
                key,
                ref_id,
            } => {
                owned(bucket, key)?;
                txn.open_table(HELD)?
                    .insert((bucket.as_str(), key.as_slice(), *ref_id), ())?;
            }
            IndexRow::Outbox {
                bucket,
                key,
                ref_id,
                owed,
            } => {
                owned(bucket, key)?;
                txn.open_table(OUTBOX)?
                    .insert((bucket.as_str(), key.as_slice(), *ref_id), *owed)?;
            }
            IndexRow::Fence {
                bucket,
                key,
                ref_id,
                fenced_ms,
            } => {
                owned(bucket, key)?;
                let at = (bucket.as_str(), key.as_slice(), *ref_id);
                let old = txn
                    .open_table(FENCES)?
                    .insert(at, *fenced_ms)?
                    .map(|v| v.value());
                let mut ages = txn.open_table(FENCE_AGES)?;
                if let Some(old) = old {
                    ages.remove((old, at.0, at.1, at.2))?;
                }
                ages.insert((*fenced_ms, at.0, at.1, at.2), ())?;
            }
            IndexRow::Upload { id, value } => {
                let upload: UploadRecord = tables::decode_versioned("uploads", value)?;
                owned(&upload.bucket, upload.key.as_bytes())?;
                txn.open_table(UPLOADS)?
                    .insert(id.as_str(), value.as_slice())?;
            }
            IndexRow::UploadExtras { id, value } => {
                uploaded(id)?;
                txn.open_table(UPLOAD_EXTRAS)?
                    .insert(id.as_str(), value.as_slice())?;
            }
            IndexRow::UploadChecksum { id, part, value } => {
                uploaded(id)?;
                txn.open_table(UPLOAD_CHECKSUMS)?
                    .insert((id.as_str(), *part), value.as_slice())?;
            }
            IndexRow::Part { id, part, value } => {
                uploaded(id)?;
                txn.open_table(PARTS)?
                    .insert((id.as_str(), *part), value.as_slice())?;
            }
            IndexRow::PartRefId { id, part, ref_id } => {
                uploaded(id)?;
                txn.open_table(PART_REF_IDS)?
                    .insert((id.as_str(), *part), *ref_id)?;
            }
            IndexRow::ObjectChecksums { sha1, magic, value } => {
                txn.open_table(OBJECT_CHECKSUMS)?
                    .insert((*sha1, *magic), value.as_slice())?;
            }
            IndexRow::Seq { value } => {
                let mut counters = txn.open_table(COUNTERS)?;
                let have = counters.get(OBJECT_SEQ)?.map_or(0, |v| v.value());
                if *value > have {
                    counters.insert(OBJECT_SEQ, *value)?;
                }
            }
        }
    }
    Ok(Some(rows.len() as u32))
}

/// Removes up to `left` rows (which it lowers) of the key intervals `h` handed off:
/// first every table keyed by (bucket, key), then the uploads of those keys, walked in
/// id order from where `h` says the last batch stopped (the batch that stops writes where
/// in `h`). Answers the rows removed and whether none is left.
pub(super) fn drop_keys(
    txn: &WriteTransaction,
    h: &mut HandOff,
    left: &mut u32,
) -> Result<(u32, bool), MetaError> {
    let mut removed = 0;
    for interval in &h.keys {
        removed += drain_objects(txn, interval, left)?;
        removed += drain_versions(txn, interval, left)?;
        removed += drain_pairs(&mut txn.open_table(NULL_VERSIONS)?, interval, left)?;
        removed += drain_triples(&mut txn.open_table(OBJECT_REF_IDS)?, interval, left)?;
        removed += drain_triples(&mut txn.open_table(HELD)?, interval, left)?;
        removed += drain_triples(&mut txn.open_table(OUTBOX)?, interval, left)?;
        removed += drain_fences(txn, interval, left)?;
        if *left == 0 {
            return Ok((removed, false));
        }
    }
    let (gone, done) = drain_uploads(txn, h, left)?;
    Ok((removed + gone, done))
}

/// The (bucket, key) range of `interval` for a table keyed by (bucket, key).
type PairBounds<'a> = (Bound<(&'a str, &'a [u8])>, Bound<(&'a str, &'a [u8])>);

fn pair_range(interval: &KeyInterval) -> PairBounds<'_> {
    let (start, end) = interval;
    (
        Bound::Included((start.bucket.as_str(), start.key.as_bytes())),
        end.as_ref().map_or(Bound::Unbounded, |e| {
            Bound::Excluded((e.bucket.as_str(), e.key.as_bytes()))
        }),
    )
}

type TripleBounds<'a> = (
    Bound<(&'a str, &'a [u8], u64)>,
    Bound<(&'a str, &'a [u8], u64)>,
);

/// The range of `interval` for a table keyed by (bucket, key, n).
fn triple_range(interval: &KeyInterval) -> TripleBounds<'_> {
    let (start, end) = interval;
    (
        Bound::Included((start.bucket.as_str(), start.key.as_bytes(), 0)),
        end.as_ref().map_or(Bound::Unbounded, |e| {
            Bound::Excluded((e.bucket.as_str(), e.key.as_bytes(), 0))
        }),
    )
}

/// Removes the objects of `interval` with the part checksums of their references.
fn drain_objects(
    txn: &WriteTransaction,
    interval: &KeyInterval,
    left: &mut u32,
) -> Result<u32, MetaError> {
    let mut table = txn.open_table(OBJECTS)?;
    let mut rows = Vec::new();
    for row in table.range::<(&str, &[u8])>(pair_range(interval))? {
        if rows.len() as u32 >= *left {
            break;
        }
        let (k, v) = row?;
        let (bucket, key) = k.value();
        let record = decode_object(v.value())?;
        rows.push((
            bucket.to_string(),
            key.to_vec(),
            record.sha1.0,
            record.magic.get(),
        ));
    }
    let mut sums = txn.open_table(OBJECT_CHECKSUMS)?;
    for (bucket, key, sha1, magic) in &rows {
        table.remove((bucket.as_str(), key.as_slice()))?;
        sums.remove((*sha1, *magic))?;
    }
    *left -= rows.len() as u32;
    Ok(rows.len() as u32)
}

/// Removes the versions of `interval` with the part checksums of their references.
fn drain_versions(
    txn: &WriteTransaction,
    interval: &KeyInterval,
    left: &mut u32,
) -> Result<u32, MetaError> {
    let mut table = txn.open_table(VERSIONS)?;
    let mut rows = Vec::new();
    for row in table.range::<(&str, &[u8], u64)>(triple_range(interval))? {
        if rows.len() as u32 >= *left {
            break;
        }
        let (k, v) = row?;
        let (bucket, key, order) = k.value();
        let reference = match VersionRecord::decode(v.value())? {
            VersionRecord::Object { record, .. } => Some((record.sha1.0, record.magic.get())),
            VersionRecord::DeleteMarker { .. } => None,
        };
        rows.push((bucket.to_string(), key.to_vec(), order, reference));
    }
    let mut sums = txn.open_table(OBJECT_CHECKSUMS)?;
    for (bucket, key, order, reference) in &rows {
        table.remove((bucket.as_str(), key.as_slice(), *order))?;
        if let Some((sha1, magic)) = reference {
            sums.remove((*sha1, *magic))?;
        }
    }
    *left -= rows.len() as u32;
    Ok(rows.len() as u32)
}

/// Removes the rows of `interval` from a table keyed by (bucket, key).
fn drain_pairs<V: redb::Value + 'static>(
    table: &mut redb::Table<'_, (&'static str, &'static [u8]), V>,
    interval: &KeyInterval,
    left: &mut u32,
) -> Result<u32, MetaError> {
    let mut keys = Vec::new();
    for row in table.range::<(&str, &[u8])>(pair_range(interval))? {
        if keys.len() as u32 >= *left {
            break;
        }
        let (guard, _) = row?;
        let (b, k) = guard.value();
        keys.push((b.to_string(), k.to_vec()));
    }
    for (b, k) in &keys {
        table.remove((b.as_str(), k.as_slice()))?;
    }
    *left -= keys.len() as u32;
    Ok(keys.len() as u32)
}

/// Removes the rows of `interval` from a table keyed by (bucket, key, n).
fn drain_triples<V: redb::Value + 'static>(
    table: &mut redb::Table<'_, (&'static str, &'static [u8], u64), V>,
    interval: &KeyInterval,
    left: &mut u32,
) -> Result<u32, MetaError> {
    let mut keys = Vec::new();
    for row in table.range::<(&str, &[u8], u64)>(triple_range(interval))? {
        if keys.len() as u32 >= *left {
            break;
        }
        let (guard, _) = row?;
        let (b, k, n) = guard.value();
        keys.push((b.to_string(), k.to_vec(), n));
    }
    for (b, k, n) in &keys {
        table.remove((b.as_str(), k.as_slice(), *n))?;
    }
    *left -= keys.len() as u32;
    Ok(keys.len() as u32)
}

/// Removes the fences of `interval` and their entries by age.
fn drain_fences(
    txn: &WriteTransaction,
    interval: &KeyInterval,
    left: &mut u32,
) -> Result<u32, MetaError> {
    let mut fences = txn.open_table(FENCES)?;
    let mut rows = Vec::new();
    for row in fences.range::<(&str, &[u8], u64)>(triple_range(interval))? {
        if rows.len() as u32 >= *left {
            break;
        }
        let (k, v) = row?;
        let (b, key, ref_id) = k.value();
        rows.push((b.to_string(), key.to_vec(), ref_id, v.value()));
    }
    let mut ages = txn.open_table(FENCE_AGES)?;
    for (b, key, ref_id, fenced_ms) in &rows {
        fences.remove((b.as_str(), key.as_slice(), *ref_id))?;
        ages.remove((*fenced_ms, b.as_str(), key.as_slice(), *ref_id))?;
    }
    *left -= rows.len() as u32;
    Ok(rows.len() as u32)
}

/// Uploads a batch may pass over without removing anything (uploads of keys kept), per
/// row it may remove.
const UPLOAD_VISITS_PER_ROW: u32 = 8;

/// Removes the uploads of the handed-off keys with their rows, in id order from
/// `h.uploads_dropped_to`; an upload's own row goes last, once nothing under its id is
/// left. Answers the rows removed and whether the walk reached the end.
fn drain_uploads(
    txn: &WriteTransaction,
    h: &mut HandOff,
    left: &mut u32,
) -> Result<(u32, bool), MetaError> {
    let mut visits = left.saturating_mul(UPLOAD_VISITS_PER_ROW);
    let mut removed = 0;
    loop {
        let next = {
            let uploads = txn.open_table(UPLOADS)?;
            let lower = match &h.uploads_dropped_to {
                Some(id) => Bound::Excluded(id.as_str()),
                None => Bound::Unbounded,
            };
            let mut range = uploads.range::<&str>((lower, Bound::Unbounded))?;
            match range.next() {
                Some(row) => {
                    let (k, v) = row?;
                    let upload: UploadRecord = tables::decode_versioned("uploads", v.value())?;
                    Some((k.value().to_string(), upload))
                }
                None => None,
            }
        };
        let Some((id, upload)) = next else {
            return Ok((removed, true));
        };
        if *left == 0 || visits == 0 {
            return Ok((removed, false));
        }
        visits -= 1;
        if h.keys.iter().any(|i| upload_inside(i, &upload)) {
            removed += drain_id(&mut txn.open_table(UPLOAD_CHECKSUMS)?, &id, left)?;
            removed += drain_id(&mut txn.open_table(PARTS)?, &id, left)?;
            removed += drain_id(&mut txn.open_table(PART_REF_IDS)?, &id, left)?;
            if *left == 0 {
                return Ok((removed, false));
            }
            txn.open_table(UPLOAD_EXTRAS)?.remove(id.as_str())?;
            txn.open_table(UPLOADS)?.remove(id.as_str())?;
            removed += 1;
            *left -= 1;
        }
        h.uploads_dropped_to = Some(id);
    }
}

/// Removes the rows under upload `id` of a table keyed by (upload id, part).
fn drain_id<V: redb::Value + 'static>(
    table: &mut redb::Table<'_, (&'static str, u32), V>,
    id: &str,
    left: &mut u32,
) -> Result<u32, MetaError> {
    let mut parts = Vec::new();
    for row in table.range::<(&str, u32)>((id, 0)..=(id, u32::MAX))? {
        if parts.len() as u32 >= *left {
            break;
        }
        parts.push(row?.0.value().1);
    }
    for part in &parts {
        table.remove((id, *part))?;
    }
    *left -= parts.len() as u32;
    Ok(parts.len() as u32)
}
