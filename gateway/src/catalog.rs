//! The gateway's side of Valkyrie's catalog seam: the metadata store answering the six
//! questions a worker asks, in process and over HTTP under `/_catalog/` for the
//! `valkyrie` binaries that run beside remote storage nodes.
//!
//! Every change goes through a `Command` like any other metadata mutation, so a deletion
//! or relocation decided by a worker is as durable (and, later, as replicated) as a PUT.

use std::sync::Arc;

use placement::{PairFlags, PairId, PairRecord, Sha1};
use valkyrie::{Catalog, CatalogError, DeletingEntry, FileState};

use crate::store::ObjectStore;
use meta::Command;

/// Bound on one page of `deleting` entries.
pub const DELETING_PAGE_MAX: usize = 1000;

/// The catalog over the gateway's own store.
#[derive(Clone)]
pub struct LocalCatalog {
    store: Arc<ObjectStore>,
}

impl LocalCatalog {
    pub fn new(store: Arc<ObjectStore>) -> Self {
        LocalCatalog { store }
    }
}

fn store_error(e: impl std::fmt::Display) -> CatalogError {
    CatalogError::Store(e.to_string())
}

pub(crate) fn file_state(r: meta::FileRecord) -> FileState {
    FileState {
        refs: r.refs,
        pair: r.pair,
        do_not_delete: r.do_not_delete(),
    }
}

impl Catalog for LocalCatalog {
    async fn lookup(&self, sha1: Sha1) -> Result<Option<FileState>, CatalogError> {
        let rec = self.store.file(sha1).await.map_err(store_error)?;
        Ok(rec.map(file_state))
    }

    async fn lookup_fenced(&self, sha1: Sha1) -> Result<Option<FileState>, CatalogError> {
        let rec = self
            .store
            .replicas()
            .file_fenced(sha1)
            .await
            .map_err(store_error)?;
        Ok(rec.map(file_state))
    }

    async fn deleting(
        &self,
        pair: PairId,
        after: Option<Sha1>,
        limit: usize,
    ) -> Result<Vec<DeletingEntry>, CatalogError> {
        let limit = limit.clamp(1, DELETING_PAGE_MAX);
        let entries = self
            .store
            .replicas()
            .deleting_of_pair(pair, after, limit)
            .await
            .map_err(store_error)?;
        Ok(entries
            .into_iter()
            .map(|(sha1, d)| DeletingEntry {
                sha1,
                pair: d.pair,
                since_secs: d.since_secs,
            })
            .collect())
    }

    async fn remove_deleting(&self, sha1: Sha1, pair: PairId) -> Result<(), CatalogError> {
        self.store
            .execute(Command::RemoveDeleting { sha1, pair })
            .await
            .map(drop)
            .map_err(store_error)
    }

    async fn relocate(&self, sha1: Sha1, from: PairId, to: PairId) -> Result<bool, CatalogError> {
        self.store
            .replicas()
            .relocate(sha1, from, to)
            .await
            .map_err(store_error)
    }

    async fn set_read_only(&self, pair: PairId) -> Result<(), CatalogError> {
        let cmd = Command::SetPairFlags {
            id: pair,
            set: PairFlags::READ_ONLY,
            clear: PairFlags::default(),
        };
        self.store
            .change_pair(cmd)
            .await
            .map(drop)
            .map_err(store_error)
    }

    async fn pairs(&self) -> Result<Vec<(PairId, PairRecord)>, CatalogError> {
        let table = self.store.pair_table();
        Ok(table
            .ids()
            .into_iter()
            .filter_map(|id| table.get(id).map(|e| (id, e.record)))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    /// A Valkyrie worker waits out its grace before it takes a file for an orphan; a
    /// metadata command must reach the log well within it (see `proposer::APPEND_BOUND`).
    #[test]
    fn the_append_bound_fits_well_within_the_shortest_grace() {
        let bound = meta::raft::proposer::APPEND_BOUND.as_secs();
        assert!(2 * bound <= valkyrie::GRACE_SECS_MIN);
    }
}
