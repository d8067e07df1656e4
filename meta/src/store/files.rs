//! Reads of FileDB (`files`), of the content waiting for deletion (`deleting`) and of
//! the native references.

use placement::{PairId, Sha1};
use redb::{ReadTransaction, ReadableDatabase, ReadableTable};

use super::MetaStore;
use crate::MetaError;
use crate::native_refs;
use crate::tables::{DELETING, DeletingRecord, FILES, FileRecord};

impl MetaStore {
    pub fn file(&self, sha1: &Sha1) -> Result<Option<FileRecord>, MetaError> {
        file_in(&self.db().begin_read()?, sha1)
    }

    /// The `ref_log` row of reference `ref_id` of `sha1` (see [`crate::ref_log`]).
    pub fn ref_state(
        &self,
        sha1: &[u8; 20],
        ref_id: u64,
    ) -> Result<Option<crate::ref_log::RefState>, MetaError> {
        let txn = self.db().begin_read()?;
        crate::ref_log::read(&txn.open_table(crate::ref_log::REF_LOG)?, sha1, ref_id)
    }

    pub fn deleting(&self, sha1: &Sha1) -> Result<Option<DeletingRecord>, MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(DELETING)?;
        Ok(table
            .get(sha1.0)?
            .map(|v| DeletingRecord::decode(&v.value())))
    }

    /// `deleting` entries of `pair` with a sha1 in (`after`, `until`), at most `limit`, in sha1
    /// order. Entries of other pairs are skipped over; the table only holds content
    /// waiting for its Valkyrie, so it stays small.
    pub fn deleting_of_pair(
        &self,
        pair: PairId,
        (after, until): (Option<Sha1>, Option<Sha1>),
        limit: usize,
    ) -> Result<Vec<(Sha1, DeletingRecord)>, MetaError> {
        use std::ops::Bound;
        let txn = self.db().begin_read()?;
        let table = txn.open_table(DELETING)?;
        let start = match after {
            Some(a) => Bound::Excluded(a.0),
            None => Bound::Unbounded,
        };
        let end = match until {
            Some(u) => Bound::Excluded(u.0),
            None => Bound::Unbounded,
        };
        let mut out = Vec::new();
        for entry in table.range::<[u8; 20]>((start, end))? {
            let (k, v) = entry?;
            let rec = DeletingRecord::decode(&v.value());
            if rec.pair == pair {
                out.push((Sha1(k.value()), rec));
                if out.len() >= limit {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Calls `f` with the native references of every content that has some.
    pub fn for_each_native(
        &self,
        mut f: impl FnMut(Sha1, native_refs::NativeRefs),
    ) -> Result<(), MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(native_refs::NATIVE_REFS)?;
        for entry in table.iter()? {
            let (k, v) = entry?;
            f(Sha1(k.value()), native_refs::NativeRefs::decode(&v.value()));
        }
        Ok(())
    }

    /// Calls `f` with every FileDB record.
    pub fn for_each_file(&self, mut f: impl FnMut(Sha1, FileRecord)) -> Result<(), MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(FILES)?;
        for entry in table.iter()? {
            let (k, v) = entry?;
            let sha1 = Sha1(k.value());
            f(sha1, FileRecord::decode_checked(&sha1, &v.value())?);
        }
        Ok(())
    }
}

/// `sha1`'s record in `txn`.
pub(super) fn file_in(txn: &ReadTransaction, sha1: &Sha1) -> Result<Option<FileRecord>, MetaError> {
    txn.open_table(FILES)?
        .get(sha1.0)?
        .map(|v| FileRecord::decode_checked(sha1, &v.value()))
        .transpose()
}
