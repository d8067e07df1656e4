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
//! Record format: a format byte, then postcard. Format 1
//! ([`crate::tables::encode_versioned`]) holds the sha1 intervals only: root owns every
//! key, any other group none, as in every map before index groups. Format 2 adds the
//! (bucket, key) intervals, and is written only where they differ from that, so a row of
//! a cluster without index groups stays byte for byte what it was (replicas of two
//! versions keep equal digests through a rolling upgrade).

use redb::{ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::MetaError;
use crate::groups::{GroupId, IndexStart, ROOT, SHA1_MIN, ShardMap};
use crate::native_refs::NATIVE_REFS;
use crate::ref_log::REF_LOG;
use crate::tables::{DELETING, FILES};

/// `"row"` -> the encoded [`Ownership`].
pub const OWNERSHIP: TableDefinition<&str, &[u8]> = TableDefinition::new("ownership");
const KEY: &str = "row";

/// A (bucket, key) interval `[start, end)`; an `end` of None runs to the top.
pub type KeyInterval = (IndexStart, Option<IndexStart>);

/// The sha1 and key intervals one group owns, under one version of the map.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ownership {
    pub group: GroupId,
    pub map_version: u64,
    /// `[start, end)` in ascending order; an `end` of None runs to the top.
    pub sha1: Vec<([u8; 20], Option<[u8; 20]>)>,
    /// The index's (bucket, key) intervals, ascending.
    pub keys: Vec<KeyInterval>,
}

/// Whether (`bucket`, `key`) lies in one of `intervals`: bytes, as a listing's cursor
/// may be.
pub fn keys_within(intervals: &[KeyInterval], bucket: &str, key: &[u8]) -> bool {
    let at = (bucket, key);
    fn pair(s: &IndexStart) -> (&str, &[u8]) {
        (s.bucket.as_str(), s.key.as_bytes())
    }
    intervals
        .iter()
        .any(|(start, end)| pair(start) <= at && end.as_ref().is_none_or(|e| at < pair(e)))
}

/// Format 1 of the row: the sha1 intervals only.
#[derive(Serialize, Deserialize)]
struct OwnershipV1 {
    group: GroupId,
    map_version: u64,
    sha1: Vec<([u8; 20], Option<[u8; 20]>)>,
}

/// Format byte of a row with key intervals.
const OWNERSHIP_V2: u8 = 2;

/// The keys a group owned in every map before index groups: root all, any other none.
fn keys_before_index_groups(group: GroupId) -> Vec<KeyInterval> {
    if group == ROOT {
        vec![(IndexStart::default(), None)]
    } else {
        Vec::new()
    }
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
            keys: map
                .index_intervals()
                .filter(|(_, _, owner)| *owner == group)
                .map(|(start, end, _)| (start.clone(), end.cloned()))
                .collect(),
        })
    }

    /// Whether the group owns (`bucket`, `key`): bytes, as a listing's cursor may be.
    pub fn owns_key(&self, bucket: &str, key: &[u8]) -> bool {
        keys_within(&self.keys, bucket, key)
    }

    /// The group's key intervals with `more` (the key intervals it handed off and still
    /// reads), adjacent ones joined: so a listing's span across the cut is one interval.
    pub fn with_keys(mut self, more: &[KeyInterval]) -> Ownership {
        self.keys.extend(more.iter().cloned());
        self.keys.sort();
        let mut joined: Vec<KeyInterval> = Vec::with_capacity(self.keys.len());
        for (start, end) in std::mem::take(&mut self.keys) {
            match joined.last_mut() {
                Some((_, last_end)) if last_end.as_ref() == Some(&start) => *last_end = end,
                _ => joined.push((start, end)),
            }
        }
        self.keys = joined;
        self
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

    /// Whether one interval the group owns holds every key of `bucket` from `from` up to
    /// `until` (None: the bucket's last key): a listing's span read here.
    pub fn owns_span(&self, bucket: &str, from: &[u8], until: Option<&[u8]>) -> bool {
        fn pair(s: &IndexStart) -> (&str, &[u8]) {
            (s.bucket.as_str(), s.key.as_bytes())
        }
        let at = (bucket, from);
        self.keys.iter().any(|(start, end)| {
            pair(start) <= at
                && match (end, until) {
                    (None, _) => true,
                    (Some(end), None) => end.bucket.as_str() > bucket,
                    (Some(end), Some(until)) => (bucket, until) <= pair(end),
                }
                && end.as_ref().is_none_or(|e| at < pair(e))
        })
    }

    pub fn encode(&self) -> Result<Vec<u8>, MetaError> {
        if self.keys == keys_before_index_groups(self.group) {
            return crate::tables::encode_versioned(&OwnershipV1 {
                group: self.group,
                map_version: self.map_version,
                sha1: self.sha1.clone(),
            });
        }
        let mut out = vec![OWNERSHIP_V2];
        out.extend(postcard::to_stdvec(self).map_err(|e| MetaError::Corrupt(e.to_string()))?);
        Ok(out)
    }

    pub fn decode(bytes: &[u8]) -> Result<Ownership, MetaError> {
        if let Some((&OWNERSHIP_V2, rest)) = bytes.split_first() {
            return postcard::from_bytes(rest)
                .map_err(|e| MetaError::Corrupt(format!("ownership: {e}")));
        }
        let v1: OwnershipV1 = crate::tables::decode_versioned("ownership", bytes)?;
        Ok(Ownership {
            keys: keys_before_index_groups(v1.group),
            group: v1.group,
            map_version: v1.map_version,
            sha1: v1.sha1,
        })
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

/// What the group of a read transaction owns (None: everything).
pub(crate) fn read_at(txn: &redb::ReadTransaction) -> Result<Option<Ownership>, MetaError> {
    match txn.open_table(OWNERSHIP) {
        Ok(table) => read(&table),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groups::SplitAt;

    #[test]
    fn rows_round_trip_and_stay_format_1_without_index_groups() {
        let map = ShardMap::single(vec![1, 2, 3]).unwrap();
        let (map, filedb) = map
            .split(ROOT, SplitAt::Sha1([0x80; 20]), vec![2, 3])
            .unwrap();
        for group in [ROOT, filedb] {
            let own = Ownership::of(&map, group).unwrap();
            let bytes = own.encode().unwrap();
            assert_eq!(bytes[0], 1, "group {group}");
            assert_eq!(Ownership::decode(&bytes).unwrap(), own);
        }
        // Root owns every key, the FileDB group none.
        let root = Ownership::of(&map, ROOT).unwrap();
        assert!(root.owns_key("", b"") && root.owns_key("b", &[0xff]));
        assert!(!Ownership::of(&map, filedb).unwrap().owns_key("b", b"k"));

        let (map, index) = map
            .split(ROOT, SplitAt::Key(IndexStart::new("b", "m")), vec![1, 2])
            .unwrap();
        let (root, index) = (
            Ownership::of(&map, ROOT).unwrap(),
            Ownership::of(&map, index).unwrap(),
        );
        for own in [&root, &index] {
            let bytes = own.encode().unwrap();
            assert_eq!(bytes[0], OWNERSHIP_V2);
            assert_eq!(&Ownership::decode(&bytes).unwrap(), own);
        }
        // Each key has one owner, on either side of the cut and of a bucket boundary.
        for (bucket, key, root_owns) in [
            ("a", &b"zzz"[..], true),
            ("b", b"l\xff", true),
            ("b", b"m", false),
            ("b", b"\xff", false),
            ("c", b"", false),
        ] {
            assert_eq!(root.owns_key(bucket, key), root_owns, "{bucket}/{key:?}");
            assert_eq!(index.owns_key(bucket, key), !root_owns, "{bucket}/{key:?}");
        }
        // Spans: inside one interval, or across its end, or past a bucket's last key.
        assert!(root.owns_span("b", b"a", Some(b"m")));
        assert!(!root.owns_span("b", b"a", Some(b"n")));
        assert!(!root.owns_span("b", b"a", None));
        assert!(root.owns_span("a", b"", None));
        assert!(index.owns_span("b", b"m", None));
        assert!(index.owns_span("c", b"x", None));
        assert!(!index.owns_span("b", b"l", Some(b"n")));
        assert!(Ownership::decode(&[3, 0]).is_err());
        assert!(Ownership::decode(&[]).is_err());
    }
}
