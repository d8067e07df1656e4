//! Reads of the tables of cross-group references: what the group owns, the outbox its
//! leader drains, and the pending references its reconciler settles.

use redb::{ReadableDatabase, ReadableTable as _};

use super::MetaStore;
use crate::MetaError;
use crate::handoff::{self, FileRow, HandOff, RowCursor, RowTable};
use crate::outbox::{self, OUTBOX, OutboxEntry};
use crate::ownership::{self, OWNERSHIP, Ownership};
use crate::ref_log::{self, REF_LOG, REF_PENDING, REF_RELEASED, RefState};

/// A reference pending in `ref_log` (see [`MetaStore::pending_refs`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingRef {
    pub deadline_ms: u64,
    pub sha1: [u8; 20],
    pub ref_id: u64,
    pub state: RefState,
}

impl MetaStore {
    /// What the group owns (None: everything).
    pub fn ownership(&self) -> Result<Option<Ownership>, MetaError> {
        let txn = self.db().begin_read()?;
        ownership::read(&txn.open_table(OWNERSHIP)?)
    }

    /// `sha1`'s FileDB record, if this group owns `sha1` or still answers reads of it
    /// while it hands it off (else `Moved`), from one read transaction.
    pub fn file_if_owned(
        &self,
        sha1: &placement::Sha1,
    ) -> Result<Option<crate::FileRecord>, MetaError> {
        let txn = self.db().begin_read()?;
        check_sha1(&txn, sha1)?;
        super::files::file_in(&txn, sha1)
    }

    /// `sha1`'s FileDB record and its `deleting` entry, owned as for
    /// [`MetaStore::file_if_owned`], from one read transaction.
    pub fn file_state_if_owned(
        &self,
        sha1: &placement::Sha1,
    ) -> Result<
        (
            Option<crate::FileRecord>,
            Option<crate::tables::DeletingRecord>,
        ),
        MetaError,
    > {
        let txn = self.db().begin_read()?;
        check_sha1(&txn, sha1)?;
        let deleting = txn
            .open_table(crate::tables::DELETING)?
            .get(sha1.0)?
            .map(|v| crate::tables::DeletingRecord::decode(&v.value()));
        Ok((super::files::file_in(&txn, sha1)?, deleting))
    }

    /// Whether an entry or a part of (`bucket`, `key`) holds cross-group reference
    /// `ref_id`, or its dec is owed in the outbox.
    pub fn holds_ref(&self, bucket: &str, key: &str, ref_id: u64) -> Result<bool, MetaError> {
        let txn = self.db().begin_read()?;
        let at = (bucket, key.as_bytes(), ref_id);
        Ok(txn.open_table(outbox::HELD)?.get(at)?.is_some()
            || txn.open_table(OUTBOX)?.get(at)?.is_some())
    }

    /// The references this group's index names in `slice`, with those in flight that
    /// `filedb` still counts (the audit; one read transaction).
    pub fn index_refs(
        &self,
        slice: &crate::audit::Slice,
        released: &std::collections::BTreeSet<(placement::Sha1, u64)>,
        pending: &[crate::audit::Pending],
    ) -> Result<crate::audit::IndexRefs, MetaError> {
        let txn = self.db().begin_read()?;
        crate::audit::index_refs(&txn, slice, released, pending)
    }

    /// The index's entries that may name content (objects, versions, parts): the tables'
    /// lengths, no scan.
    pub fn index_entries(&self) -> Result<u64, MetaError> {
        use redb::ReadableTableMetadata as _;
        let txn = self.db().begin_read()?;
        Ok(txn.open_table(crate::tables::OBJECTS)?.len()?
            + txn.open_table(crate::tables::VERSIONS)?.len()?
            + txn.open_table(crate::tables::PARTS)?.len()?)
    }

    /// The FileDB records this group holds (the table's length: no scan).
    pub fn files_count(&self) -> Result<u64, MetaError> {
        use redb::ReadableTableMetadata as _;
        let txn = self.db().begin_read()?;
        Ok(txn.open_table(crate::tables::FILES)?.len()?)
    }

    /// The hand-off under way, if any (see [`crate::handoff`]).
    pub fn handoff(&self) -> Result<Option<HandOff>, MetaError> {
        let txn = self.db().begin_read()?;
        handoff::read(&txn.open_table(OWNERSHIP)?)
    }

    /// A page of the rows of `table` in `interval` after `after` (see
    /// [`handoff::rows`]): what a split copies.
    pub fn file_rows(
        &self,
        table: RowTable,
        interval: ([u8; 20], Option<[u8; 20]>),
        after: Option<RowCursor>,
        limit: u32,
    ) -> Result<Vec<FileRow>, MetaError> {
        let txn = self.db().begin_read()?;
        handoff::rows(&txn, table, interval, after, limit)
    }

    /// A page of the rows of the key interval `interval` from `from` (see
    /// [`crate::index_handoff::rows`]): what an index split copies.
    pub fn index_rows(
        &self,
        interval: &crate::ownership::KeyInterval,
        from: Option<&crate::index_handoff::IndexCursor>,
        limit: u32,
    ) -> Result<crate::index_handoff::IndexPage, MetaError> {
        let txn = self.db().begin_read()?;
        crate::index_handoff::rows(&txn, interval, from, limit)
    }

    /// Where a split of the key interval `interval` halves its objects (see
    /// [`crate::index_handoff::middle_key`]).
    pub fn middle_key(
        &self,
        interval: &crate::ownership::KeyInterval,
    ) -> Result<Option<crate::groups::IndexStart>, MetaError> {
        let txn = self.db().begin_read()?;
        crate::index_handoff::middle_key(&txn, interval)
    }

    /// The outbox's first `limit` rows, in (bucket, key, ref_id) order.
    pub fn outbox(&self, limit: usize) -> Result<Vec<OutboxEntry>, MetaError> {
        let txn = self.db().begin_read()?;
        outbox::read_front(&txn.open_table(OUTBOX)?, limit)
    }

    /// Whether the oldest `Released` row and the oldest fence are past their keep at
    /// `now_ms`: whether an expiry command would remove anything.
    pub fn expiry_due(&self, now_ms: u64) -> Result<(bool, bool), MetaError> {
        let txn = self.db().begin_read()?;
        let released = match txn.open_table(REF_RELEASED)?.first()? {
            Some((k, _)) => k.value().0.saturating_add(ref_log::RELEASED_KEEP_MS) < now_ms,
            None => false,
        };
        let fences = match txn.open_table(outbox::FENCE_AGES)?.first()? {
            Some((k, _)) => k.value().0.saturating_add(outbox::FENCE_KEEP_MS) < now_ms,
            None => false,
        };
        Ok((released, fences))
    }

    /// The references pending with a deadline before `before_ms`, oldest deadline first, at
    /// most `limit`: what the reconciler settles.
    pub fn pending_refs(&self, before_ms: u64, limit: usize) -> Result<Vec<PendingRef>, MetaError> {
        let txn = self.db().begin_read()?;
        let pending = txn.open_table(REF_PENDING)?;
        let log = txn.open_table(REF_LOG)?;
        let mut out = Vec::new();
        for row in pending.range(..(before_ms, [0u8; 20], 0))?.take(limit) {
            let (k, _) = row?;
            let (deadline_ms, sha1, ref_id) = k.value();
            let state = ref_log::read(&log, &sha1, ref_id)?.ok_or_else(|| {
                MetaError::Corrupt(format!("ref_pending row of {ref_id} with no ref_log row"))
            })?;
            out.push(PendingRef {
                deadline_ms,
                sha1,
                ref_id,
                state,
            });
        }
        Ok(out)
    }
}

/// Refuses with `Moved` a read of `sha1` in a group that neither owns it nor still answers
/// reads of it while it hands it off.
fn check_sha1(txn: &redb::ReadTransaction, sha1: &placement::Sha1) -> Result<(), MetaError> {
    let table = txn.open_table(OWNERSHIP)?;
    if let Some(own) = ownership::read(&table)?
        && !own.owns_sha1(&sha1.0)
        && !handoff::read(&table)?.is_some_and(|h| h.readable && h.contains(&sha1.0))
    {
        return Err(MetaError::Moved {
            map_version: own.map_version,
        });
    }
    Ok(())
}
