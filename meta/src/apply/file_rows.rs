//! The moves of a FileDB record in and out of the `files` and `deleting` tables, beneath
//! every command that takes or releases a reference (`refs.rs`, `files.rs`, `ref_log.rs`).
//!
//! The arithmetic is [`crate::filedb`]'s: these functions read a record, ask it what an
//! `inc` or a `dec` makes of it, and write the answer back.

use placement::{Magic, PairId, Sha1};
use redb::{ReadableTable, Table, WriteTransaction};

use crate::tables::{DELETING, DeletingRecord, FILES, FileRecord};
use crate::{DecOutcome, MetaError, filedb};

pub(super) type Files<'t> = Table<'t, [u8; 20], [u8; 16]>;
type Deleting<'t> = Table<'t, [u8; 20], [u8; 12]>;

/// The `dec` of a released reference on the content's record; a missing record is
/// [`DecOutcome::Missing`] (see [`release`]).
pub(super) fn dec_content(
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

pub(super) fn read_file(files: &Files<'_>, sha1: &Sha1) -> Result<Option<FileRecord>, MetaError> {
    files
        .get(sha1.0)?
        .map(|v| FileRecord::decode_checked(sha1, &v.value()))
        .transpose()
}

pub(super) fn write_file(
    files: &mut Files<'_>,
    sha1: &Sha1,
    rec: &FileRecord,
) -> Result<(), MetaError> {
    files.insert(sha1.0, rec.encode_checked(sha1)?)?;
    Ok(())
}

pub(super) fn inc(
    files: &mut Files<'_>,
    sha1: &Sha1,
    magic: Magic,
) -> Result<FileRecord, MetaError> {
    let mut rec = read_file(files, sha1)?.ok_or(MetaError::NotFound)?;
    rec.inc(magic)?;
    write_file(files, sha1, &rec)?;
    Ok(rec)
}

pub(super) fn insert_or_inc(
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
pub(super) fn dec(
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
