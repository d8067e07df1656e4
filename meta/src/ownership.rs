//! What a group owns, as its own log says (`docs/scaling.md`, sections 2 and 4).
//!
//! Every gateway routes by a cached shard map that may be stale. So that a stale map costs
//! a retry and never a wrong answer, each group keeps the part of the map it owns in its
//! own state machine, changed only by
//! [`Command::SetOwnership`](crate::Command::SetOwnership) through its own log, and refuses
//! a command about a sha1 outside it with [`MetaError::Moved`]: `apply` decides, so every
//! replica decides alike, at the same place in the log.
//!
//! A group with no row owns everything: root before any split, and every data folder of
//! before this module. So a single group keeps today's write path: a reference whose sha1
//! the group owns is taken and released in place, in one command.
//!
//! Record format: a format byte, then postcard ([`crate::tables::encode_versioned`]). The
//! (bucket, key) intervals an index group owns join the row, under a new format byte, when
//! index groups are built.

use redb::{ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::MetaError;
use crate::groups::{GroupId, SHA1_MIN, ShardMap};
use crate::native_refs::NATIVE_REFS;
use crate::ref_log::REF_LOG;
use crate::tables::{DELETING, FILES};

/// `"row"` -> the encoded [`Ownership`].
pub const OWNERSHIP: TableDefinition<&str, &[u8]> = TableDefinition::new("ownership");
const KEY: &str = "row";

/// The sha1 intervals one group owns, under one version of the map.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ownership {
    pub group: GroupId,
    pub map_version: u64,
    /// `[start, end)` in ascending order; an `end` of None runs to the top.
    pub sha1: Vec<([u8; 20], Option<[u8; 20]>)>,
}

impl Ownership {
    /// What `group` owns in `map`; the map must hold the group.
    pub fn of(map: &ShardMap, group: GroupId) -> Result<Ownership, MetaError> {
        if map.group(group).is_none() {
            return Err(MetaError::InvalidCommand(format!(
                "map version {} has no group {group}",
                map.version
            )));
        }
        Ok(Ownership {
            group,
            map_version: map.version,
            sha1: map
                .filedb_intervals()
                .filter(|(_, _, owner)| *owner == group)
                .map(|(start, end, _)| (start, end))
                .collect(),
        })
    }

    pub fn owns_sha1(&self, sha1: &[u8; 20]) -> bool {
        self.sha1
            .iter()
            .any(|(start, end)| start <= sha1 && end.is_none_or(|end| sha1 < &end))
    }

    /// The sha1 intervals the group does not own, ascending.
    pub fn gaps(&self) -> Vec<([u8; 20], Option<[u8; 20]>)> {
        let mut out = Vec::new();
        let mut at = Some(SHA1_MIN);
        for &(start, end) in &self.sha1 {
            if let Some(a) = at
                && a < start
            {
                out.push((a, Some(start)));
            }
            at = end;
        }
        if let Some(a) = at {
            out.push((a, None));
        }
        out
    }

    pub fn encode(&self) -> Result<Vec<u8>, MetaError> {
        crate::tables::encode_versioned(self)
    }

    pub fn decode(bytes: &[u8]) -> Result<Ownership, MetaError> {
        crate::tables::decode_versioned("ownership", bytes)
    }
}

/// The stored row, if a `SetOwnership` was ever applied.
pub fn read(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<Option<Ownership>, MetaError> {
    table
        .get(KEY)?
        .map(|v| Ownership::decode(v.value()))
        .transpose()
}

/// What `txn`'s group owns (None: everything).
pub(crate) fn read_in(txn: &WriteTransaction) -> Result<Option<Ownership>, MetaError> {
    read(&txn.open_table(OWNERSHIP)?)
}

/// Stores what `txn`'s group owns.
pub(crate) fn write_in(txn: &WriteTransaction, own: &Ownership) -> Result<(), MetaError> {
    txn.open_table(OWNERSHIP)?
        .insert(KEY, own.encode()?.as_slice())?;
    Ok(())
}

/// Whether `txn`'s group owns `sha1`.
pub(crate) fn owns_sha1(txn: &WriteTransaction, sha1: &[u8; 20]) -> Result<bool, MetaError> {
    Ok(read_in(txn)?.is_none_or(|o| o.owns_sha1(sha1)))
}

/// Applies `SetOwnership`: the group's part of `map`. A replica never changes its group,
/// and the map only moves forward (an older or equal version changes nothing, so a
/// resent change is harmless). A group gives up no interval where it holds FileDB rows:
/// moving rows is a split's work (`docs/scaling.md`, section 4), and a group that let
/// them go without would strand references nobody could release. Answers the version the
/// group owns under.
pub fn apply_set(txn: &WriteTransaction, group: GroupId, map: &ShardMap) -> Result<u64, MetaError> {
    map.check()
        .map_err(|e| MetaError::InvalidCommand(e.to_string()))?;
    let new = Ownership::of(map, group)?;
    let table = txn.open_table(OWNERSHIP)?;
    let have = read(&table)?;
    if let Some(have) = &have {
        if have.group != group {
            return Err(MetaError::InvalidCommand(format!(
                "group {} cannot take group {group}'s ranges",
                have.group
            )));
        }
        if have.map_version >= map.version {
            return Ok(have.map_version);
        }
    }
    // Rows lie only where the group owned: any in a gap of the new ownership are lost.
    for gap in new.gaps() {
        if let Some(sha1) = first_row(txn, gap)? {
            return Err(MetaError::InvalidCommand(format!(
                "group {group} holds FileDB rows in a range map version {} gives away \
                 (first {}): a split must move them first",
                map.version,
                hex::encode(sha1)
            )));
        }
    }
    drop(table);
    write_in(txn, &new)?;
    Ok(new.map_version)
}

/// The first sha1 in `[start, end)` with a row in `files`, `deleting`, `native_refs` or
/// `ref_log`: one key read per table.
fn first_row(
    txn: &WriteTransaction,
    (start, end): ([u8; 20], Option<[u8; 20]>),
) -> Result<Option<[u8; 20]>, MetaError> {
    let top = end.unwrap_or([0xff; 20]);
    let within = |sha1: &[u8; 20]| end.is_none_or(|e| sha1 < &e);
    let mut first: Option<[u8; 20]> = None;
    let mut keep = |sha1: [u8; 20]| {
        if within(&sha1) && first.is_none_or(|f| sha1 < f) {
            first = Some(sha1);
        }
    };
    if let Some(row) = txn.open_table(FILES)?.range(start..=top)?.next() {
        keep(row?.0.value());
    }
    if let Some(row) = txn.open_table(DELETING)?.range(start..=top)?.next() {
        keep(row?.0.value());
    }
    if let Some(row) = txn.open_table(NATIVE_REFS)?.range(start..=top)?.next() {
        keep(row?.0.value());
    }
    if let Some(row) = txn
        .open_table(REF_LOG)?
        .range((start, 0)..=(top, u64::MAX))?
        .next()
    {
        keep(row?.0.value().0);
    }
    Ok(first)
}
