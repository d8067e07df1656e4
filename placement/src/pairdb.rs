//! PairDB: the disk pairs, their flags and how full their disks are.
//!
//! One record describes two disks; every content file is written to both. The article
//! sizes it at ~14 000 records for 28 000 one-terabyte disks: negligible beside FileDB,
//! so records are encoded with serde and the whole table is kept in memory by the gateway.
//!
//! The record ([`PairRecord`], [`PairFlags`]) is vocabulary and lives below this module and
//! the pair choice, in [`crate::pair`]; this module adds the in-memory table with every
//! pair's disks opened (`PairTable`, with the `io` feature).

pub use crate::pair::{PairFlags, PairRecord};

#[cfg(feature = "io")]
use crate::disk::{Disk, DiskError};
#[cfg(feature = "io")]
use crate::vocab::PairId;

/// The in-memory PairDB: every pair's record and its opened disks.
///
/// The gateway loads it from the metadata store at start and updates it after each pair
/// command; readers take a cheap snapshot of one pair's disks.
#[cfg(feature = "io")]
#[derive(Default)]
pub struct PairTable {
    pairs: std::sync::RwLock<std::collections::BTreeMap<PairId, PairEntry>>,
}

/// One pair in memory.
#[cfg(feature = "io")]
#[derive(Clone)]
pub struct PairEntry {
    pub record: PairRecord,
    pub disks: std::sync::Arc<[Disk; 2]>,
}

#[cfg(feature = "io")]
impl PairTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces a pair, opening its disks.
    pub fn upsert(&self, id: PairId, record: PairRecord) -> Result<(), DiskError> {
        let disks = [Disk::open(&record.disks[0])?, Disk::open(&record.disks[1])?];
        let entry = PairEntry {
            record,
            disks: std::sync::Arc::new(disks),
        };
        self.write_lock().insert(id, entry);
        Ok(())
    }

    /// Adds a pair, or replaces its record while keeping the free space measured here (a
    /// record from PairDB carries the figures of whoever wrote it), in one step under the
    /// lock: two callers noting the same change cannot put back a stale measurement.
    /// Whether the pair is new here (its space is then still to be measured).
    pub fn merge(&self, id: PairId, mut record: PairRecord) -> Result<bool, DiskError> {
        let mut table = self.write_lock();
        if let Some(e) = table.get_mut(&id)
            && e.record.disks == record.disks
        {
            record.free_bytes = e.record.free_bytes;
            record.capacity_bytes = e.record.capacity_bytes;
            e.record = record;
            return Ok(false);
        }
        let disks = [Disk::open(&record.disks[0])?, Disk::open(&record.disks[1])?];
        table.insert(
            id,
            PairEntry {
                record,
                disks: std::sync::Arc::new(disks),
            },
        );
        Ok(true)
    }

    /// Updates the free/capacity figures of a pair, as measured on its disks.
    pub fn set_space(&self, id: PairId, free_bytes: [u64; 2], capacity_bytes: [u64; 2]) {
        if let Some(e) = self.write_lock().get_mut(&id) {
            e.record.free_bytes = free_bytes;
            e.record.capacity_bytes = capacity_bytes;
        }
    }

    pub fn get(&self, id: PairId) -> Option<PairEntry> {
        self.read_lock().get(&id).cloned()
    }

    pub fn ids(&self) -> Vec<PairId> {
        self.read_lock().keys().copied().collect()
    }

    /// A weighted random writable pair with room for `size_bytes`, avoiding `exclude`.
    pub fn choose(&self, size_bytes: u64, root: u32, exclude: &[PairId]) -> Option<PairId> {
        let pairs = self.read_lock();
        crate::choose::choose(
            pairs.iter().map(|(id, e)| crate::choose::Candidate {
                id: *id,
                record: &e.record,
            }),
            size_bytes,
            root,
            exclude,
        )
    }

    // A poisoned lock only means another thread panicked mid-update of plain data;
    // the map itself is still consistent, so keep serving.
    fn read_lock(
        &self,
    ) -> std::sync::RwLockReadGuard<'_, std::collections::BTreeMap<PairId, PairEntry>> {
        self.pairs.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_lock(
        &self,
    ) -> std::sync::RwLockWriteGuard<'_, std::collections::BTreeMap<PairId, PairEntry>> {
        self.pairs.write().unwrap_or_else(|e| e.into_inner())
    }
}
