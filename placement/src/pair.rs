//! A disk pair's record in PairDB: its two disks, its flags and how full they are.
//!
//! Vocabulary, below both the pair choice ([`crate::choose`]) and the in-memory table
//! ([`crate::pairdb`]): it needs no I/O and is there without the `io` feature.

use serde::{Deserialize, Serialize};

use crate::vocab::DiskRef;

/// Flags of a pair; any of them takes the pair out of the choice for new writes.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
pub struct PairFlags(pub u32);

impl PairFlags {
    /// An operator stopped writes, for maintenance or while a peer is copied.
    pub const LOCKED: PairFlags = PairFlags(1);
    /// A disk failed: reads only, until UNMOVE has drained the survivor.
    pub const READ_ONLY: PairFlags = PairFlags(1 << 1);
    /// UNMOVE is copying this pair's files to other pairs.
    pub const DRAINING: PairFlags = PairFlags(1 << 2);

    pub fn contains(self, other: PairFlags) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn with(self, other: PairFlags) -> PairFlags {
        PairFlags(self.0 | other.0)
    }

    pub fn without(self, other: PairFlags) -> PairFlags {
        PairFlags(self.0 & !other.0)
    }

    /// Whether new content may be placed on the pair.
    pub fn writable(self) -> bool {
        self.0 & (Self::LOCKED.0 | Self::READ_ONLY.0 | Self::DRAINING.0) == 0
    }
}

/// One PairDB record.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct PairRecord {
    pub disks: [DiskRef; 2],
    pub flags: PairFlags,
    pub free_bytes: [u64; 2],
    pub capacity_bytes: [u64; 2],
}

impl PairRecord {
    /// A new writable pair whose fill is not known yet.
    pub fn new(disks: [DiskRef; 2]) -> Self {
        PairRecord {
            disks,
            flags: PairFlags::default(),
            free_bytes: [0, 0],
            capacity_bytes: [0, 0],
        }
    }

    /// Free space of the pair: the smaller disk bounds what both copies can take.
    pub fn free_bytes_min(&self) -> u64 {
        self.free_bytes[0].min(self.free_bytes[1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_gate_writes() {
        assert!(PairFlags::default().writable());
        for f in [PairFlags::LOCKED, PairFlags::READ_ONLY, PairFlags::DRAINING] {
            let flags = PairFlags::default().with(f);
            assert!(!flags.writable());
            assert!(flags.contains(f));
            assert!(flags.without(f).writable());
        }
    }
}
