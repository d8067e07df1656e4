//! `ref_log`: the FileDB group's record of each reference a cross-group command took or
//! released, keyed by (sha1, ref_id) (`docs/scaling.md`, section 3).
//!
//! When the S3 index and FileDB live in different groups, a PUT takes its reference in the
//! FileDB group first ([`Command::RefInc`](crate::Command::RefInc)) and writes its index
//! entry in the index group second; an overwrite or a delete removes the entry first and
//! sends the dec later, from the index group's outbox
//! ([`Command::DecBatch`](crate::Command::DecBatch)). Either message may be sent twice (a
//! lost answer, a new leader resending), and a gateway may die between the two steps. This
//! table makes each reference counted once:
//!
//! - [`RefState::Pending`]: taken, its index entry not yet confirmed. A retried inc finds
//!   the row and changes nothing. The reconciler settles it once its deadline has passed:
//!   dropped if the entry exists, released (dec'd) if the entry never will.
//! - [`RefState::Released`]: dec'd once; a resent dec finds it and changes nothing. Kept
//!   [`RELEASED_KEEP_MS`], then expired in bounded batches.
//!
//! A reference confirmed by the reconciler has no row: its later dec is the first, and
//! leaves a `Released` row like any other.
//!
//! Record format: a format byte, then postcard ([`crate::tables::encode_versioned`]), so
//! that a field can be added under a new format byte.

use placement::Magic;
use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use crate::MetaError;

/// (sha1, ref_id) -> an encoded [`RefState`].
pub const REF_LOG: TableDefinition<([u8; 20], u64), &[u8]> = TableDefinition::new("ref_log");
/// The pending rows by deadline: (deadline_ms, sha1, ref_id), for the reconciler to find
/// those past their deadline without a scan of every row.
pub const REF_PENDING: TableDefinition<(u64, [u8; 20], u64), ()> =
    TableDefinition::new("ref_pending");
/// The released rows by release time: (released_ms, sha1, ref_id), for the expiry to find
/// the oldest without a scan.
pub const REF_RELEASED: TableDefinition<(u64, [u8; 20], u64), ()> =
    TableDefinition::new("ref_released");

/// How long a released reference's row stays, so that a dec resent within it is known as a
/// duplicate: a day, far past any resend (an outbox is drained within seconds of a leader
/// being elected).
pub const RELEASED_KEEP_MS: u64 = 24 * 3600 * 1000;

/// Bound on the references one settle or dec command carries (one command per group per
/// second in the design's figures; a larger backlog goes in several).
pub const BATCH_MAX: usize = 4096;

/// Bound on the rows one expiry command removes: a bounded transaction, so that foreground
/// writes behind it in the log wait little.
pub const EXPIRE_MAX: u32 = 10_000;

/// Bound on the bucket and key a pending row keeps (S3's own bounds: 63 and 1024 bytes).
const ORIGIN_BYTES_MAX: usize = 2048;

/// Where a reference stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RefState {
    /// Taken for the index entry of (`bucket`, `key`), not yet confirmed; the reconciler
    /// looks at it once `deadline_ms` has passed.
    Pending {
        magic: u32,
        bucket: String,
        key: String,
        deadline_ms: u64,
    },
    /// Released at `released_ms`; a dec of it now is a duplicate.
    Released { magic: u32, released_ms: u64 },
}

impl RefState {
    pub fn magic(&self) -> u32 {
        match self {
            RefState::Pending { magic, .. } | RefState::Released { magic, .. } => *magic,
        }
    }

    pub fn encode(&self) -> Result<Vec<u8>, MetaError> {
        if let RefState::Pending { bucket, key, .. } = self
            && bucket.len() + key.len() > ORIGIN_BYTES_MAX
        {
            return Err(MetaError::InvalidCommand(format!(
                "a reference's bucket and key exceed {ORIGIN_BYTES_MAX} bytes"
            )));
        }
        crate::tables::encode_versioned(self)
    }

    pub fn decode(bytes: &[u8]) -> Result<RefState, MetaError> {
        crate::tables::decode_versioned("ref_log", bytes)
    }
}

/// The row of (`sha1`, `ref_id`), if any.
pub fn read(
    table: &impl ReadableTable<([u8; 20], u64), &'static [u8]>,
    sha1: &[u8; 20],
    ref_id: u64,
) -> Result<Option<RefState>, MetaError> {
    table
        .get((*sha1, ref_id))?
        .map(|v| RefState::decode(v.value()))
        .transpose()
}

/// One reference a settle command decides (see [`Command::Settle`](crate::Command::Settle)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settle {
    pub sha1: [u8; 20],
    pub ref_id: u64,
    /// The index entry will never exist: release the reference. Otherwise it does: drop
    /// the row and keep the reference.
    pub release: bool,
}

/// One dec from an index group's outbox (see [`Command::DecBatch`](crate::Command::DecBatch)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefDec {
    pub sha1: [u8; 20],
    pub ref_id: u64,
    pub magic: Magic,
}

/// What became of one dec of a batch, or of one settle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RefOutcome {
    /// The reference was released: the record's answer.
    Released(crate::DecOutcome),
    /// Kept: a settle confirmed its index entry and dropped the row.
    Confirmed,
    /// Nothing to do: already released (a duplicate), or no pending row to settle.
    Unchanged,
    /// A dec whose magic is not the one the reference was taken with: a bug somewhere.
    /// Nothing changed (a leak at worst, never a release of another reference); the
    /// audit finds it.
    MagicMismatch { recorded: u32 },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_round_trips_and_damage_is_an_error() {
        for state in [
            RefState::Pending {
                magic: 7,
                bucket: "mail".into(),
                key: "inbox/1/a.pdf".into(),
                deadline_ms: 1_700_000_000_000,
            },
            RefState::Released {
                magic: u32::MAX,
                released_ms: 5,
            },
        ] {
            let bytes = state.encode().unwrap();
            assert_eq!(RefState::decode(&bytes).unwrap(), state);
            assert!(RefState::decode(&bytes[..bytes.len() - 1]).is_err());
        }
        assert!(RefState::decode(&[]).is_err());
        assert!(RefState::decode(&[9, 0]).is_err());
        let long = RefState::Pending {
            magic: 1,
            bucket: "b".into(),
            key: "k".repeat(ORIGIN_BYTES_MAX),
            deadline_ms: 0,
        };
        assert!(matches!(long.encode(), Err(MetaError::InvalidCommand(_))));
    }
}
