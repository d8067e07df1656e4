//! The root group's record of the shard map (see [`crate::groups`]): one row of
//! [`SHARD_MAP`], the map encoded by [`ShardMap::encode`], changed only by
//! [`Command::SetShardMap`](crate::Command::SetShardMap).
//!
//! A third row, `"leaving"`, holds the nodes leaving the cluster ([`read_leaving`]).
//!
//! A group with no row runs the map of before any split: [`ShardMap::single`] at version 1,
//! root owning everything on the group's voters. Each change must carry the next version,
//! so that two changes planned from the same map cannot both apply: the second is refused
//! and planned again from the first's result.

use std::collections::BTreeSet;

use redb::{ReadableTable, TableDefinition, WriteTransaction};

use crate::MetaError;
use crate::groups::{NodeId, ShardMap};

/// `"map"` -> the encoded map; `"planned"` -> the map a split under way will commit.
pub const SHARD_MAP: TableDefinition<&str, &[u8]> = TableDefinition::new("shard_map");
const KEY: &str = "map";
const PLANNED: &str = "planned";
const LEAVING: &str = "leaving";
/// The version of the plan being cancelled (`CancelPlan`), little-endian.
const CANCEL: &str = "cancel";
/// The last plan cancelled: a driver that lost root's leadership may still try to commit
/// it. Cleared by the next plan.
const CANCELLED: &str = "cancelled";
/// Format byte of the `"leaving"` row (postcard of the ascending node ids after it).
const LEAVING_V1: u8 = 1;

/// The version of the map a group with no row runs.
pub const IMPLICIT_VERSION: u64 = 1;

/// The stored map, if a change was ever applied.
pub fn read(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<Option<ShardMap>, MetaError> {
    read_key(table, KEY)
}

/// The map a split under way will commit (see [`crate::handoff`]), if any.
pub fn read_planned(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<Option<ShardMap>, MetaError> {
    read_key(table, PLANNED)
}

/// The nodes leaving the cluster (`SetLeaving`), ascending; none when no row.
pub fn read_leaving(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<BTreeSet<NodeId>, MetaError> {
    let Some(v) = table.get(LEAVING)? else {
        return Ok(BTreeSet::new());
    };
    match v.value().split_first() {
        Some((&LEAVING_V1, rest)) => postcard::from_bytes(rest)
            .map_err(|e| MetaError::Corrupt(format!("leaving nodes: {e}"))),
        _ => Err(MetaError::Corrupt(
            "leaving nodes: unknown record format".into(),
        )),
    }
}

/// Applies `SetLeaving`: adds `node` to the nodes leaving, or takes it off. Either again
/// changes nothing; the row goes when the set is empty, so a cluster that never had a
/// node leave keeps the table (and its digest) as before.
pub fn apply_leaving(txn: &WriteTransaction, node: NodeId, leaving: bool) -> Result<(), MetaError> {
    let mut table = txn.open_table(SHARD_MAP)?;
    let mut nodes = read_leaving(&table)?;
    let changed = if leaving {
        nodes.insert(node)
    } else {
        nodes.remove(&node)
    };
    if !changed {
        return Ok(());
    }
    if nodes.is_empty() {
        table.remove(LEAVING)?;
        return Ok(());
    }
    let mut row = vec![LEAVING_V1];
    row.extend(postcard::to_stdvec(&nodes).map_err(|e| MetaError::InvalidCommand(e.to_string()))?);
    table.insert(LEAVING, row.as_slice())?;
    Ok(())
}

fn read_key(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &str,
) -> Result<Option<ShardMap>, MetaError> {
    match table.get(key)? {
        Some(v) => ShardMap::decode(v.value())
            .map(Some)
            .map_err(|e| MetaError::Corrupt(format!("shard map: {e}"))),
        None => Ok(None),
    }
}

/// Applies a new map: well formed, and the next version of the one stored. While a split
/// is planned, only its planned map, which ends the plan. Answers its version.
pub fn apply_set(txn: &WriteTransaction, map: &ShardMap) -> Result<u64, MetaError> {
    let mut table = txn.open_table(SHARD_MAP)?;
    next_of(&table, map)?;
    if read_key(&table, CANCELLED)?.is_some_and(|c| c == *map) {
        return Err(MetaError::InvalidCommand(format!(
            "the change to map version {} was cancelled",
            map.version
        )));
    }
    match read_planned(&table)? {
        Some(planned) if planned == *map => {
            // A cancel asked too late: the commit wins.
            table.remove(PLANNED)?;
            table.remove(CANCEL)?;
        }
        Some(planned) => {
            return Err(MetaError::InvalidCommand(format!(
                "a split to map version {} is under way",
                planned.version
            )));
        }
        None => {}
    }
    table.insert(KEY, encode(map)?.as_slice())?;
    Ok(map.version)
}

/// Applies `PlanMap`: `map`, the next version of the stored one, is what the split under
/// way will commit. The same plan again changes nothing; another is refused while one is
/// under way. Answers its version.
pub fn apply_plan(txn: &WriteTransaction, map: &ShardMap) -> Result<u64, MetaError> {
    let mut table = txn.open_table(SHARD_MAP)?;
    match read_planned(&table)? {
        Some(planned) if planned == *map => return Ok(map.version),
        Some(planned) => {
            return Err(MetaError::InvalidCommand(format!(
                "a split to map version {} is under way",
                planned.version
            )));
        }
        None => {}
    }
    next_of(&table, map)?;
    table.insert(PLANNED, encode(map)?.as_slice())?;
    table.remove(CANCELLED)?;
    Ok(map.version)
}

/// The version of the plan a cancel was asked of, if any (see [`apply_cancel`]).
pub fn read_cancel(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<Option<u64>, MetaError> {
    match table.get(CANCEL)? {
        Some(v) => <[u8; 8]>::try_from(v.value())
            .map(|b| Some(u64::from_le_bytes(b)))
            .map_err(|_| MetaError::Corrupt("shard map cancel: not 8 bytes".into())),
        None => Ok(None),
    }
}

/// Applies `CancelPlan`: marks the move planned at `version` (`done` false), or drops it
/// once marked (`done`), keeping it as the last cancelled. Either again changes nothing;
/// a cancel of another version than the one planned, or of a split, is refused.
pub fn apply_cancel(txn: &WriteTransaction, version: u64, done: bool) -> Result<u64, MetaError> {
    let mut table = txn.open_table(SHARD_MAP)?;
    let Some(planned) = read_planned(&table)? else {
        if done {
            return Ok(version);
        }
        return Err(MetaError::InvalidCommand(
            "no change of the map is under way".into(),
        ));
    };
    if planned.version != version {
        return Err(MetaError::InvalidCommand(format!(
            "the change under way is to map version {}, not {version}",
            planned.version
        )));
    }
    if !done {
        let map = read(&table)?;
        let split = planned
            .groups()
            .any(|g| map.as_ref().is_none_or(|m| m.group(g.id).is_none()));
        if split {
            return Err(MetaError::InvalidCommand(
                "a split runs to its commit; only a move can be cancelled".into(),
            ));
        }
        table.insert(CANCEL, version.to_le_bytes().as_slice())?;
        return Ok(version);
    }
    if read_cancel(&table)? != Some(version) {
        return Err(MetaError::InvalidCommand(format!(
            "the change to map version {version} was not cancelled"
        )));
    }
    table.remove(PLANNED)?;
    table.remove(CANCEL)?;
    table.insert(CANCELLED, encode(&planned)?.as_slice())?;
    Ok(version)
}

/// Refuses a map that is malformed or not the next version of the stored one.
fn next_of(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    map: &ShardMap,
) -> Result<(), MetaError> {
    map.check()
        .map_err(|e| MetaError::InvalidCommand(e.to_string()))?;
    let have = read(table)?.map_or(IMPLICIT_VERSION, |m| m.version);
    if map.version != have + 1 {
        return Err(MetaError::ShardMapVersion {
            have,
            given: map.version,
        });
    }
    Ok(())
}

fn encode(map: &ShardMap) -> Result<Vec<u8>, MetaError> {
    map.encode()
        .map_err(|e| MetaError::InvalidCommand(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groups::{IndexStart, SplitAt};
    use crate::raft::snapshot;
    use crate::{Command, MetaStore, Response};
    use redb::ReadableDatabase as _;

    fn two_splits() -> (ShardMap, ShardMap, ShardMap) {
        let single = ShardMap::single(vec![1, 2, 3]).unwrap();
        let (one, _) = single
            .split(0, SplitAt::Sha1([0x80; 20]), vec![2, 3, 1])
            .unwrap();
        let (two, _) = one
            .split(0, SplitAt::Key(IndexStart::new("mail", "m")), vec![3, 1, 2])
            .unwrap();
        (single, one, two)
    }

    #[test]
    fn a_map_is_stored_by_its_command_and_read_back_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let store = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
        assert_eq!(store.shard_map().unwrap(), None);
        let (single, one, two) = two_splits();
        assert_eq!(single.version, IMPLICIT_VERSION);
        let set = |map: &ShardMap| store.execute(&Command::SetShardMap { map: map.clone() });
        assert_eq!(set(&one).unwrap(), Response::MapVersion(2));
        assert_eq!(store.shard_map().unwrap(), Some(one.clone()));
        assert_eq!(set(&two).unwrap(), Response::MapVersion(3));
        assert_eq!(store.shard_map().unwrap(), Some(two.clone()));

        // The command travels in the log: it round-trips through its encoding.
        let cmd = Command::SetShardMap { map: two.clone() };
        let bytes = postcard::to_stdvec(&cmd).unwrap();
        assert_eq!(postcard::from_bytes::<Command>(&bytes).unwrap(), cmd);
        assert_eq!(cmd.format_version(), 5);
    }

    #[test]
    fn a_change_planned_from_another_version_or_malformed_is_refused_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
        let (single, one, two) = two_splits();
        let set = |map: &ShardMap| store.execute(&Command::SetShardMap { map: map.clone() });
        // Skipping a version, or the implicit map again.
        assert_eq!(
            set(&two),
            Err(MetaError::ShardMapVersion { have: 1, given: 3 })
        );
        assert_eq!(
            set(&single),
            Err(MetaError::ShardMapVersion { have: 1, given: 1 })
        );
        assert_eq!(store.shard_map().unwrap(), None);
        set(&one).unwrap();
        // The same change twice: the second was planned from the map before the first.
        assert_eq!(
            set(&one),
            Err(MetaError::ShardMapVersion { have: 2, given: 2 })
        );
        // A map that breaks an invariant (an interval owned by a group it does not have),
        // built the way a decoder would see it.
        let mut bad = serde_json::to_value(&two).unwrap();
        bad["groups"].as_object_mut().unwrap().remove("2");
        let bad: ShardMap = serde_json::from_value(bad).unwrap();
        assert!(matches!(set(&bad), Err(MetaError::InvalidCommand(_))));
        assert_eq!(store.shard_map().unwrap(), Some(one));
    }

    #[test]
    fn the_nodes_leaving_are_kept_by_their_command_and_travel_in_snapshots() {
        let dir = tempfile::tempdir().unwrap();
        let store = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
        let digest = store.digest().unwrap();
        let set = |node, leaving| store.execute(&Command::SetLeaving { node, leaving });
        assert_eq!(set(4, false).unwrap(), Response::Done);
        assert_eq!(
            store.digest().unwrap().tables,
            digest.tables,
            "nothing to take off: no row"
        );
        for node in [4, u64::MAX, 2, 4] {
            assert_eq!(set(node, true).unwrap(), Response::Done);
        }
        let want = BTreeSet::from([2, 4, u64::MAX]);
        assert_eq!(store.leaving().unwrap(), want);
        let copy = store.through_snapshot(dir.path());
        assert_eq!(copy.leaving().unwrap(), want);
        for node in [2, 4, u64::MAX] {
            set(node, false).unwrap();
        }
        assert!(store.leaving().unwrap().is_empty());
        assert_eq!(
            store.digest().unwrap().tables,
            digest.tables,
            "the row goes with the last node"
        );

        let cmd = Command::SetLeaving {
            node: u64::MAX,
            leaving: true,
        };
        let bytes = postcard::to_stdvec(&cmd).unwrap();
        assert_eq!(postcard::from_bytes::<Command>(&bytes).unwrap(), cmd);
        assert_eq!(cmd.format_version(), 8);
    }

    #[test]
    fn a_move_is_cancelled_in_two_steps_and_its_plan_never_commits_after() {
        let dir = tempfile::tempdir().unwrap();
        let store = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
        let (_, one, _) = two_splits();
        let cancel = |version, done| store.execute(&Command::CancelPlan { version, done });
        let plan = |map: &ShardMap| store.execute(&Command::PlanMap { map: map.clone() });
        let set = |map: &ShardMap| store.execute(&Command::SetShardMap { map: map.clone() });
        assert!(matches!(
            cancel(2, false),
            Err(MetaError::InvalidCommand(_))
        ));
        // A split's plan is not cancelled.
        plan(&one).unwrap();
        assert!(matches!(
            cancel(2, false),
            Err(MetaError::InvalidCommand(_))
        ));
        set(&one).unwrap();
        // A move: marked, then dropped; each step again changes nothing.
        let moved = one.with_replicas(1, vec![2, 1]).unwrap();
        plan(&moved).unwrap();
        assert!(matches!(
            cancel(4, false),
            Err(MetaError::InvalidCommand(_))
        ));
        assert!(matches!(cancel(3, true), Err(MetaError::InvalidCommand(_))));
        assert_eq!(cancel(3, false).unwrap(), Response::MapVersion(3));
        assert_eq!(cancel(3, false).unwrap(), Response::MapVersion(3));
        assert_eq!(store.plan_cancel().unwrap(), Some(3));
        assert_eq!(cancel(3, true).unwrap(), Response::MapVersion(3));
        assert_eq!(cancel(3, true).unwrap(), Response::MapVersion(3));
        assert_eq!(store.planned_map().unwrap(), None);
        assert_eq!(store.plan_cancel().unwrap(), None);
        assert_eq!(store.shard_map().unwrap(), Some(one.clone()));
        // A driver that lost root's leadership cannot commit it now; the next plan can
        // be the same move again, and commits.
        assert!(matches!(set(&moved), Err(MetaError::InvalidCommand(_))));
        plan(&moved).unwrap();
        assert_eq!(set(&moved).unwrap(), Response::MapVersion(3));
        // A cancel asked too late: the commit wins and clears it.
        let back = moved.with_replicas(1, vec![2, 3]).unwrap();
        plan(&back).unwrap();
        cancel(4, false).unwrap();
        set(&back).unwrap();
        assert_eq!(store.plan_cancel().unwrap(), None);
        let copy = store.through_snapshot(dir.path());
        assert_eq!(copy.shard_map().unwrap(), Some(back));

        let cmd = Command::CancelPlan {
            version: u64::MAX,
            done: true,
        };
        let bytes = postcard::to_stdvec(&cmd).unwrap();
        assert_eq!(postcard::from_bytes::<Command>(&bytes).unwrap(), cmd);
        assert_eq!(cmd.format_version(), 8);
    }

    #[test]
    fn the_map_travels_in_snapshots_and_joins_the_digest_once_written() {
        let dir = tempfile::tempdir().unwrap();
        let store = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
        assert!(!store.digest().unwrap().tables.contains_key("shard_map"));
        let (_, one, _) = two_splits();
        store
            .execute(&Command::SetShardMap { map: one.clone() })
            .unwrap();
        assert!(store.digest().unwrap().tables.contains_key("shard_map"));
        let file = dir.path().join("snap");
        let db = store.db();
        let read = db.begin_read().unwrap();
        snapshot::write(&read, Vec::new(), std::fs::File::create(&file).unwrap()).unwrap();
        let restored = dir.path().join("restored.redb");
        snapshot::load(&file, &restored).unwrap();
        drop(read);
        drop(db);
        drop(store);
        let loaded = MetaStore::open(&restored).unwrap();
        assert_eq!(loaded.shard_map().unwrap(), Some(one));
    }
}
