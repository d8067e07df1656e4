//! FileDB commands: the native API's references (`Inc`, `InsertOrInc`, `Dec`), a record
//! moved to another pair (`Relocate`) and a `deleting` entry its Valkyrie is done with
//! (`RemoveDeleting`).

use placement::{Magic, PairId, Sha1};
use redb::{ReadableTable, WriteTransaction};

use super::file_rows;
use crate::native_refs;
use crate::tables::{DELETING, DeletingRecord, FILES};
use crate::{MetaError, Response};

/// `AuditMark`: DO_NOT_DELETE on `sha1`'s record if it still reads (`refs`, `magic`).
pub(super) fn audit_mark(
    txn: &WriteTransaction,
    sha1: &Sha1,
    refs: u32,
    magic: u32,
) -> Result<bool, MetaError> {
    let mut files = txn.open_table(FILES)?;
    let Some(mut rec) = file_rows::read_file(&files, sha1)? else {
        return Ok(false);
    };
    if rec.do_not_delete() || rec.refs != refs || rec.magic != magic {
        return Ok(false);
    }
    rec.flags |= crate::tables::FLAG_DO_NOT_DELETE;
    file_rows::write_file(&mut files, sha1, &rec)?;
    Ok(true)
}

/// `Inc`: the article's `inc`, counted as a native reference.
pub(super) fn inc(
    txn: &WriteTransaction,
    sha1: &Sha1,
    magic: Magic,
) -> Result<Response, MetaError> {
    let rec = file_rows::inc(&mut txn.open_table(FILES)?, sha1, magic)?;
    native_refs::taken(txn, sha1, magic)?;
    Ok(Response::File(rec))
}

/// `InsertOrInc`: the end of the article's `upload`, counted as a native reference.
pub(super) fn insert_or_inc(
    txn: &WriteTransaction,
    sha1: &Sha1,
    magic: Magic,
    pair: PairId,
) -> Result<Response, MetaError> {
    let rec = file_rows::insert_or_inc(&mut txn.open_table(FILES)?, sha1, magic, pair)?;
    native_refs::taken(txn, sha1, magic)?;
    Ok(Response::File(rec))
}

/// `Dec`: the article's `dec`, counted as a native reference released.
pub(super) fn dec(
    txn: &WriteTransaction,
    sha1: &Sha1,
    magic: Magic,
    now_secs: u64,
) -> Result<Response, MetaError> {
    let outcome = {
        let mut files = txn.open_table(FILES)?;
        let mut deleting = txn.open_table(DELETING)?;
        file_rows::dec(&mut files, &mut deleting, sha1, magic, now_secs)?
    };
    native_refs::released(txn, sha1, magic)?;
    Ok(Response::Dec(outcome))
}

/// `RemoveDeleting`: drops the `deleting` entry of `sha1` if it still names `pair`.
pub(super) fn remove_deleting(
    txn: &WriteTransaction,
    sha1: &Sha1,
    pair: PairId,
) -> Result<Response, MetaError> {
    let mut deleting = txn.open_table(DELETING)?;
    let names_pair = deleting
        .get(sha1.0)?
        .is_some_and(|v| DeletingRecord::decode(&v.value()).pair == pair);
    if names_pair {
        deleting.remove(sha1.0)?;
    }
    Ok(Response::Done)
}

/// `Relocate`: switches the record of `sha1` from pair `from` to `to`; whether it did.
pub(super) fn relocate(
    txn: &WriteTransaction,
    sha1: &Sha1,
    from: PairId,
    to: PairId,
) -> Result<Response, MetaError> {
    let mut files = txn.open_table(FILES)?;
    match file_rows::read_file(&files, sha1)? {
        Some(mut rec) if rec.pair == from => {
            rec.pair = to;
            file_rows::write_file(&mut files, sha1, &rec)?;
            Ok(Response::Relocated(true))
        }
        _ => Ok(Response::Relocated(false)),
    }
}
