//! PairDB commands: a pair put under its id or the next free one, and its flags.

use placement::{PairFlags, PairId, PairRecord};
use redb::{ReadableTable, WriteTransaction};

use crate::tables::{self, PAIRS};
use crate::{MetaError, Response};

/// `PutPair`: adds or replaces a pair.
pub(super) fn put(
    txn: &WriteTransaction,
    id: PairId,
    record: &PairRecord,
) -> Result<Response, MetaError> {
    let bytes = tables::encode_pair(record)?;
    txn.open_table(PAIRS)?.insert(id.0, bytes.as_slice())?;
    Ok(Response::Done)
}

/// `AddPair`: adds a pair under the next free id (one past the highest).
pub(super) fn add(txn: &WriteTransaction, record: &PairRecord) -> Result<Response, MetaError> {
    let mut pairs = txn.open_table(PAIRS)?;
    let next = match pairs.last()? {
        Some((k, _)) => k.value().checked_add(1).ok_or(MetaError::NoPair)?,
        None => 0,
    };
    pairs.insert(next, tables::encode_pair(record)?.as_slice())?;
    Ok(Response::Pair(PairId(next), record.clone()))
}

/// `SetPairFlags`: sets then clears flag bits of a pair, atomically.
pub(super) fn set_flags(
    txn: &WriteTransaction,
    id: PairId,
    set: PairFlags,
    clear: PairFlags,
) -> Result<Response, MetaError> {
    let mut pairs = txn.open_table(PAIRS)?;
    let mut record: PairRecord = match pairs.get(id.0)? {
        Some(v) => tables::decode_versioned("pairs", v.value())?,
        None => return Err(MetaError::NoPair),
    };
    record.flags = record.flags.with(set).without(clear);
    pairs.insert(id.0, tables::encode_pair(&record)?.as_slice())?;
    Ok(Response::Pair(id, record))
}
