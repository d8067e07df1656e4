//! Root's count of each bucket's record changes (`bucket_copies.rs`).

use redb::{ReadableTable, WriteTransaction};

use crate::MetaError;
use crate::bucket_copies::{BUCKET_REVISIONS, REVISIONS_FORMAT};
use crate::tables::RAFT_STATE;

/// Counts a change of `bucket`'s record (in root, from
/// [`REVISIONS_FORMAT`] on, so that replicas of two releases agree during a
/// rolling upgrade): its index groups take a copy only if newer than theirs.
pub(crate) fn count_change(txn: &WriteTransaction, bucket: &str) -> Result<(), MetaError> {
    count_change_from(txn, bucket, REVISIONS_FORMAT)
}

/// [`count_change`] of a change that counts from format `since` on (lifecycle rules,
/// which copies carry from format 11).
pub(crate) fn count_change_from(
    txn: &WriteTransaction,
    bucket: &str,
    since: u32,
) -> Result<(), MetaError> {
    let format = crate::cluster_version::read_in(&txn.open_table(RAFT_STATE)?)?;
    if format < since {
        return Ok(());
    }
    let mut table = txn.open_table(BUCKET_REVISIONS)?;
    let now = table.get(bucket)?.map_or(0, |v| v.value());
    table.insert(bucket, now + 1)?;
    Ok(())
}
