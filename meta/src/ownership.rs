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
//! Record format: a format byte, then postcard. The (bucket, key) intervals an index group
//! owns join the row, under a new format byte, when index groups are built.

use redb::{ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::MetaError;
use crate::groups::{GroupId, ShardMap};

/// `"row"` -> the encoded [`Ownership`].
pub const OWNERSHIP: TableDefinition<&str, &[u8]> = TableDefinition::new("ownership");
const KEY: &str = "row";
const FORMAT_V1: u8 = 1;

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

    pub fn encode(&self) -> Result<Vec<u8>, MetaError> {
        let mut out = vec![FORMAT_V1];
        out.extend(
            postcard::to_stdvec(self)
                .map_err(|e| MetaError::Storage(format!("ownership record: {e}")))?,
        );
        Ok(out)
    }

    pub fn decode(bytes: &[u8]) -> Result<Ownership, MetaError> {
        match bytes.split_first() {
            Some((&FORMAT_V1, rest)) => postcard::from_bytes(rest)
                .map_err(|e| MetaError::Corrupt(format!("ownership record: {e}"))),
            Some((v, _)) => Err(MetaError::Corrupt(format!(
                "ownership record of unknown format {v}"
            ))),
            None => Err(MetaError::Corrupt("empty ownership record".into())),
        }
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

/// Whether `txn`'s group owns `sha1`.
pub(crate) fn owns_sha1(txn: &WriteTransaction, sha1: &[u8; 20]) -> Result<bool, MetaError> {
    Ok(read_in(txn)?.is_none_or(|o| o.owns_sha1(sha1)))
}

/// Applies `SetOwnership`: the group's part of `map`. A replica never changes its group,
/// and the map only moves forward (an older or equal version changes nothing, so a
/// resent change is harmless). Answers the version the group owns under.
pub fn apply_set(txn: &WriteTransaction, group: GroupId, map: &ShardMap) -> Result<u64, MetaError> {
    map.check()
        .map_err(|e| MetaError::InvalidCommand(e.to_string()))?;
    let new = Ownership::of(map, group)?;
    let mut table = txn.open_table(OWNERSHIP)?;
    if let Some(have) = read(&table)? {
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
    table.insert(KEY, new.encode()?.as_slice())?;
    Ok(new.map_version)
}
