//! Splitting a FileDB group while it serves (`docs/scaling.md`, section 4): the plan in
//! root, and the steps root's leader drives from its round (see [`crate::handoff`] for
//! the order and why each step may run again after any crash).
//!
//! [`Replicas::plan_split`] stores the planned map in root (`PlanSplit`); every node's
//! map follower opens the replicas it places there. Root's leader then, each round until
//! the plan is committed: has the new group own its interval, has the old group hand it
//! off, copies the rows in pages, ends the hand-off and commits the map. The old group's
//! own leader drops the rows afterwards ([`drop_handed_off`]).

use std::time::Instant;

use super::metadata::Metadata;
use super::replicas::{ReadAnswer, ReadQuery, Replicas};
use crate::groups::{Group, GroupId, GroupKind, ShardMap, SplitAt, sha1_midpoint};
use crate::handoff::{ROWS_MAX, RowTable};
use crate::{Command, MetaError, Response};

/// Bound on the batches one round drops (each of [`ROWS_MAX`] rows).
const DROP_BATCHES_PER_ROUND: usize = 16;

impl Replicas {
    /// Plans the split of FileDB group `group` (root included, which owns every sha1 it
    /// has not given away) at `at`, or at the middle of its first interval: a new FileDB
    /// group on `--replication-factor` nodes (the fewest-loaded first) owns the interval
    /// from there on once root's leader has moved its rows. Answers the planned map and the
    /// new group.
    pub async fn plan_split(
        &self,
        group: GroupId,
        at: Option<[u8; 20]>,
    ) -> Result<(ShardMap, GroupId), MetaError> {
        let map = self.refresh_map().await?.ok_or_else(|| {
            MetaError::Unavailable("this node is not a member of the cluster yet".into())
        })?;
        let kind = map
            .group(group)
            .map(|g| g.kind)
            .ok_or_else(|| MetaError::InvalidCommand(format!("no group {group}")))?;
        if kind == GroupKind::Index {
            return Err(MetaError::InvalidCommand(
                "splitting an index group is not built yet".into(),
            ));
        }
        let first = map
            .filedb_intervals()
            .find(|(_, _, owner)| *owner == group)
            .ok_or_else(|| {
                MetaError::InvalidCommand(format!("group {group} owns no sha1 interval"))
            })?;
        let at = at.unwrap_or_else(|| sha1_midpoint(&first.0, first.1.as_ref()));
        let replicas = self.least_loaded(&map);
        let (planned, new) = map
            .split(group, SplitAt::Sha1(at), replicas)
            .map_err(|e| MetaError::InvalidCommand(e.to_string()))?;
        self.root()
            .execute(Command::PlanSplit {
                map: planned.clone(),
            })
            .await?;
        tracing::info!(
            group,
            new,
            at = %hex::encode(at),
            version = planned.version,
            "planned a split"
        );
        Ok((planned, new))
    }

    /// `--replication-factor` nodes of root's members (all of them, if fewer), those
    /// holding the fewest replicas in `map` first (by id among equals): the first is the
    /// new group's preferred leader.
    fn least_loaded(&self, map: &ShardMap) -> Vec<u64> {
        let nodes = self.root().status().nodes;
        let load = |id: u64| map.groups().filter(|g| g.replicas.contains(&id)).count();
        let mut ids: Vec<u64> = nodes.keys().copied().collect();
        ids.sort_by_key(|&id| (load(id), id));
        let rf = usize::try_from(self.replication_factor()).unwrap_or(usize::MAX);
        ids.truncate(rf.max(1));
        ids
    }
}

/// Root's leader: drives the split root has planned, if any, up to its commit. Every step
/// is asked again each round until the commit; each answers at once when it is done
/// already. Answers the rows copied, if the plan was committed.
pub(super) async fn drive(
    r: &Replicas,
    map: &ShardMap,
    root: &Metadata,
) -> Result<Option<u64>, MetaError> {
    let Some(plan) = root.read_local(|s| s.planned_map()).await? else {
        return Ok(None);
    };
    if plan.version != map.version + 1 {
        // This node's copy of the map lags root's (the map's follower refreshes it).
        tracing::debug!(
            planned = plan.version,
            map = map.version,
            "the planned map does not follow the map held here yet"
        );
        return Ok(None);
    }
    let started = Instant::now();
    let mut copied = 0;
    let new: Vec<&Group> = plan
        .groups()
        .filter(|g| map.group(g.id).is_none())
        .collect();
    for group in new {
        copied += move_rows(r, map, &plan, group.id).await?;
    }
    root.execute(Command::SetShardMap { map: plan.clone() })
        .await?;
    tracing::info!(
        version = plan.version,
        rows = copied,
        ms = started.elapsed().as_millis() as u64,
        "split committed: writes of the moved intervals waited this long at most"
    );
    Ok(Some(copied))
}

/// Moves to `new` the rows of the intervals `plan` gives it: ownership in `new`, the
/// hand-off in the group that owns them in `map`, the copy, the end of the hand-off.
async fn move_rows(
    r: &Replicas,
    map: &ShardMap,
    plan: &ShardMap,
    new: GroupId,
) -> Result<u64, MetaError> {
    let intervals: Vec<([u8; 20], Option<[u8; 20]>)> = plan
        .filedb_intervals()
        .filter(|(_, _, owner)| *owner == new)
        .map(|(start, end, _)| (start, end))
        .collect();
    let Some(&(first, _)) = intervals.first() else {
        return Ok(0);
    };
    let from = map.filedb_group(&first);
    step(
        r,
        plan,
        new,
        Command::SetOwnership {
            group: new,
            map: plan.clone(),
        },
    )
    .await?;
    step(
        r,
        plan,
        from,
        Command::HandOff {
            group: from,
            map: plan.clone(),
        },
    )
    .await?;
    let mut copied = 0u64;
    'copy: for &interval in &intervals {
        for table in RowTable::ALL {
            let mut after = None;
            loop {
                let query = ReadQuery::Rows {
                    table,
                    interval,
                    after,
                    limit: r.split_page_rows(),
                };
                let rows = match r.read_in(plan, from, query).await? {
                    ReadAnswer::Rows(rows) => rows,
                    other => return Err(MetaError::Unexpected(format!("{other:?}"))),
                };
                let Some(last) = rows.last() else { break };
                after = Some(last.cursor());
                let count = rows.len() as u64;
                match r
                    .send_on(plan, new, Command::Ingest { group: new, rows })
                    .await?
                {
                    Response::Ingested(_) => copied += count,
                    // An earlier run of this step finished the copy and sealed it.
                    Response::Sealed => break 'copy,
                    other => return Err(MetaError::Unexpected(format!("{other:?}"))),
                }
            }
        }
    }
    step(
        r,
        plan,
        new,
        Command::Seal {
            group: new,
            map_version: plan.version,
        },
    )
    .await?;
    step(
        r,
        plan,
        from,
        Command::EndHandOff {
            group: from,
            map_version: plan.version,
        },
    )
    .await?;
    tracing::info!(from, new, rows = copied, "rows of a split copied");
    Ok(copied)
}

/// One step of a split in `group`: a command whose answer is the version it holds under,
/// which must be at least the plan's.
async fn step(
    r: &Replicas,
    plan: &ShardMap,
    group: GroupId,
    cmd: Command,
) -> Result<(), MetaError> {
    match r.send_on(plan, group, cmd).await? {
        Response::MapVersion(v) if v >= plan.version => Ok(()),
        other => Err(MetaError::Unexpected(format!("{other:?}"))),
    }
}

/// The leader of a FileDB group (root included) that holds more than
/// `--group-split-files` records plans its split at the middle of its first interval,
/// unless a split is under way (one at a time, and this group's rows not yet dropped
/// after its last).
pub(super) async fn split_when_full(
    r: &Replicas,
    map: &ShardMap,
    id: GroupId,
    meta: &Metadata,
) -> Result<(), MetaError> {
    if map.group(id).is_none_or(|g| g.kind == GroupKind::Index) {
        return Ok(());
    }
    let (files, handoff) = meta
        .read_local(|s| Ok((s.files_count()?, s.handoff()?)))
        .await?;
    if files <= r.group_split_files() || handoff.is_some() {
        return Ok(());
    }
    if r.root().read_local(|s| s.planned_map()).await?.is_some() {
        return Ok(());
    }
    tracing::info!(group = id, files, "the group passed its size: splitting it");
    match r.plan_split(id, None).await {
        // Another change of the map came first: the next round looks again.
        Ok(_) | Err(MetaError::ShardMapVersion { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The leader of a group that handed intervals off: once root's map has committed the
/// split, drops their rows, a bounded number of batches per round.
pub(super) async fn drop_handed_off(
    map: &ShardMap,
    id: GroupId,
    meta: &Metadata,
) -> Result<(), MetaError> {
    let Some(h) = meta.read_local(|s| s.handoff()).await? else {
        return Ok(());
    };
    if h.readable || map.version < h.map_version {
        return Ok(());
    }
    for _ in 0..DROP_BATCHES_PER_ROUND {
        let cmd = Command::DropHandedOff {
            group: id,
            map_version: h.map_version,
            limit: ROWS_MAX,
        };
        match meta.execute(cmd).await? {
            Response::Dropped { done: true, .. } => {
                tracing::info!(group = id, "the rows of a split are dropped here");
                return Ok(());
            }
            Response::Dropped { .. } => {}
            other => return Err(MetaError::Unexpected(format!("{other:?}"))),
        }
    }
    Ok(())
}
