//! Changing the shard map while the groups serve (`docs/scaling.md`, section 4): a
//! FileDB group split in two, or a group's replica moved to another node. The plan is
//! stored in root; root's leader drives it from its round (see [`crate::handoff`] for a
//! split's order and why each step may run again after any crash).
//!
//! [`Replicas::plan_split`] and [`Replicas::plan_move`] store the planned map in root
//! (`PlanMap`); every node's map follower opens the replicas it places there. Root's
//! leader then, each round until the plan is committed:
//! - for a split: has the new group own its interval, has the old group hand it off,
//!   copies the rows in pages, ends the hand-off; the old group's own leader drops the
//!   rows once the map is committed ([`drop_handed_off`]);
//! - for a move: has the group's leader add the new node as a learner (answered once it
//!   has caught up), make it a voter, and remove the old node, each a membership change in
//!   the group's own log (openraft's joint consensus); the old node drops its replica once
//!   the map is committed (`Replicas::drop_unplaced`);
//!
//! and commits the map.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use super::metadata::{MembershipOp, Metadata};
use super::network::{Call, Rpc, RpcError};
use super::replicas::{ReadAnswer, ReadQuery, Replicas};
use crate::groups::{
    Group, GroupId, GroupKind, IndexStart, NodeId, ROOT, ShardMap, SplitAt, rebalance,
    sha1_midpoint,
};
use crate::handoff::{ROWS_MAX, RowTable};
use crate::ownership::KeyInterval;
use crate::{Command, MetaError, Response};

/// What [`Replicas::leave`] decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leaving {
    /// The node holds no replica of another group: remove it from root now.
    Now,
    /// The node holds replicas of these groups: marked leaving, root's leader moves them
    /// off and then removes it.
    Draining(Vec<GroupId>),
}

/// Bound on asking a leaving node whether it still holds a group's replica.
const HOLDS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

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
            return Err(MetaError::InvalidCommand(format!(
                "group {group} is an index group: it splits at a key"
            )));
        }
        let first = map
            .filedb_intervals()
            .find(|(_, _, owner)| *owner == group)
            .ok_or_else(|| {
                MetaError::InvalidCommand(format!("group {group} owns no sha1 interval"))
            })?;
        let at = at.unwrap_or_else(|| sha1_midpoint(&first.0, first.1.as_ref()));
        let leaving = self.root().read_local(|s| s.leaving()).await?;
        let replicas = self.least_loaded(&map, &leaving);
        let (planned, new) = map
            .split(group, SplitAt::Sha1(at), replicas)
            .map_err(|e| MetaError::InvalidCommand(e.to_string()))?;
        self.root()
            .execute(Command::PlanMap {
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

    /// Plans the split of the index interval group `group` (root included, which owns every
    /// key it has not given away) holds first, at `at`, or where it halves the interval's
    /// objects: a new index group on `--replication-factor` nodes (the fewest-loaded first)
    /// owns the keys from there to the interval's end once root's leader has moved their
    /// rows ([`crate::index_handoff`]). Needs metadata format 11 in root (every node runs a
    /// binary that hands key intervals off, and copies the lifecycle rules each index
    /// group sweeps its keys by). Answers the planned map and the new group.
    pub async fn plan_index_split(
        &self,
        group: GroupId,
        at: Option<IndexStart>,
    ) -> Result<(ShardMap, GroupId), MetaError> {
        let map = self.refresh_map().await?.ok_or_else(|| {
            MetaError::Unavailable("this node is not a member of the cluster yet".into())
        })?;
        if map.group(group).is_none() {
            return Err(MetaError::InvalidCommand(format!("no group {group}")));
        }
        let have = self.root().read_local(|m| m.cluster_version()).await?;
        if have < crate::bucket_copies::LIFECYCLE_FORMAT {
            return Err(MetaError::InvalidCommand(format!(
                "an index split needs metadata format {} and the cluster runs {have}: \
                 finish the upgrade of every node first",
                crate::bucket_copies::LIFECYCLE_FORMAT
            )));
        }
        let first: KeyInterval = map
            .index_intervals()
            .find(|(_, _, owner)| *owner == group)
            .map(|(start, end, _)| (start.clone(), end.cloned()))
            .ok_or_else(|| {
                MetaError::InvalidCommand(format!("group {group} owns no key interval"))
            })?;
        let at = match at {
            Some(at) => at,
            None => match self
                .read_in(&map, group, ReadQuery::MiddleKey(first.clone()))
                .await?
            {
                ReadAnswer::MiddleKey(Some(at)) => at,
                ReadAnswer::MiddleKey(None) => {
                    return Err(MetaError::InvalidCommand(format!(
                        "group {group} holds too few objects in {} to split it",
                        crate::index_handoff::describe(&first)
                    )));
                }
                other => return Err(MetaError::Unexpected(format!("{other:?}"))),
            },
        };
        let leaving = self.root().read_local(|s| s.leaving()).await?;
        let replicas = self.least_loaded(&map, &leaving);
        let (planned, new) = map
            .split(group, SplitAt::Key(at.clone()), replicas)
            .map_err(|e| MetaError::InvalidCommand(e.to_string()))?;
        self.root()
            .execute(Command::PlanMap {
                map: planned.clone(),
            })
            .await?;
        tracing::info!(
            group,
            new,
            bucket = at.bucket,
            key = at.key,
            version = planned.version,
            "planned an index split"
        );
        Ok((planned, new))
    }

    /// Plans moving `group`'s replica on node `from` to node `to` (a member of root
    /// without one), in the same place of its replica list (a preferred leader moved stays
    /// the preferred leader). Root's replicas are its voters: `gateway admin cluster`
    /// changes them. Answers the planned map.
    pub async fn plan_move(
        &self,
        group: GroupId,
        from: NodeId,
        to: NodeId,
    ) -> Result<ShardMap, MetaError> {
        let map = self.refresh_map().await?.ok_or_else(|| {
            MetaError::Unavailable("this node is not a member of the cluster yet".into())
        })?;
        let replicas = map
            .group(group)
            .map(|g| g.replicas.clone())
            .ok_or_else(|| MetaError::InvalidCommand(format!("no group {group}")))?;
        if group == ROOT {
            return Err(MetaError::InvalidCommand(
                "root's replicas are its voters: `gateway admin cluster` adds and removes them"
                    .into(),
            ));
        }
        if !replicas.contains(&from) {
            return Err(MetaError::InvalidCommand(format!(
                "node {from} holds no replica of group {group}"
            )));
        }
        if replicas.contains(&to) {
            return Err(MetaError::InvalidCommand(format!(
                "node {to} already holds a replica of group {group}"
            )));
        }
        if !self.root().status().nodes.contains_key(&to) {
            return Err(MetaError::InvalidCommand(format!(
                "node {to} is not a member of the cluster"
            )));
        }
        if self.root().read_local(|s| s.leaving()).await?.contains(&to) {
            return Err(MetaError::InvalidCommand(format!(
                "node {to} is leaving the cluster"
            )));
        }
        // A group without a quorum cannot change its membership: the plan would stay
        // under way, and hold back every later change of the map, until a majority of its
        // replicas is back (a group of two replicas, one of them down, never moves). A
        // linearizable read in the group is answered only by a leader a quorum confirms.
        if let Some((start, _, _)) = map.filedb_intervals().find(|(_, _, g)| *g == group) {
            let read = self
                .read_in(&map, group, ReadQuery::File(placement::Sha1(start)))
                .await;
            if let Err(e) = read {
                return Err(MetaError::Unavailable(format!(
                    "group {group} has no leader now: a move needs a majority of its replicas up ({e})"
                )));
            }
        }
        let moved = replicas
            .iter()
            .map(|&n| if n == from { to } else { n })
            .collect();
        let planned = map
            .with_replicas(group, moved)
            .map_err(|e| MetaError::InvalidCommand(e.to_string()))?;
        self.root()
            .execute(Command::PlanMap {
                map: planned.clone(),
            })
            .await?;
        tracing::info!(group, from, to, version = planned.version, "planned a move");
        Ok(planned)
    }

    /// The first step of node `node`'s removal from the cluster (`gateway admin cluster
    /// remove`). A node that holds no replica of a group other than root (in the map or a
    /// change under way) leaves root at once: [`Leaving::Now`], the caller removes it. One
    /// that holds some is marked leaving in root (`SetLeaving`): root's leader moves its
    /// replicas to the other nodes one move at a time, then removes it from root
    /// ([`rebalance_when_uneven`]). Refused if the nodes left could not hold every group
    /// at its size. Decided on root's state read linearizably: a lagging copy of the map
    /// could remove a node that still holds replicas.
    pub async fn leave(&self, node: NodeId) -> Result<Leaving, MetaError> {
        let (map, planned, leaving) = self
            .root()
            .read(|s| Ok((s.shard_map()?, s.planned_map()?, s.leaving()?)))
            .await?;
        let members = self.root().status().nodes;
        if !members.contains_key(&node) {
            return Err(MetaError::InvalidCommand(format!(
                "node {node} is not a member of the cluster"
            )));
        }
        let Some(map) = map else {
            return Ok(Leaving::Now);
        };
        let mut held: Vec<GroupId> = map
            .groups()
            .chain(planned.iter().flat_map(|p| p.groups()))
            .filter(|g| g.id != ROOT && g.replicas.contains(&node))
            .map(|g| g.id)
            .collect();
        held.sort_unstable();
        held.dedup();
        if held.is_empty() {
            return Ok(Leaving::Now);
        }
        let staying: Vec<NodeId> = members
            .keys()
            .copied()
            .filter(|n| *n != node && !leaving.contains(n))
            .collect();
        rebalance(&replica_lists(&map), &staying).map_err(|e| {
            MetaError::InvalidCommand(format!(
                "node {node} cannot leave: the other nodes cannot hold its replicas ({e})"
            ))
        })?;
        self.root()
            .execute(Command::SetLeaving {
                node,
                leaving: true,
            })
            .await?;
        tracing::info!(node, groups = ?held, "a node is leaving: moving its replicas off");
        Ok(Leaving::Draining(held))
    }

    /// Asks the cancel of the move under way (`gateway admin groups cancel`): root's
    /// leader then reverses its membership steps and drops the plan, the map staying as
    /// it is. Answers the cancelled plan's version. Refused with no change under way, or
    /// for a split (it runs to its commit).
    pub async fn cancel_plan(&self) -> Result<u64, MetaError> {
        let plan = self
            .root()
            .read(|s| s.planned_map())
            .await?
            .ok_or_else(|| MetaError::InvalidCommand("no change of the map is under way".into()))?;
        self.root()
            .execute(Command::CancelPlan {
                version: plan.version,
                done: false,
            })
            .await?;
        tracing::info!(version = plan.version, "the cancel of a move was asked");
        Ok(plan.version)
    }

    /// Whether node `node`, reachable, still holds a replica of a group of `map` other
    /// than root: its replica drops once it reads a map that places the group elsewhere,
    /// which takes root's reads, so it must stay a member of root until then (removed
    /// earlier, it would keep the folder for good). A node that cannot be reached counts
    /// as holding none: a dead node must be removable.
    async fn still_holds(&self, node: NodeId, map: &ShardMap) -> bool {
        let Some(addr) = self.root().status().nodes.get(&node).cloned() else {
            return false;
        };
        for g in map.groups().filter(|g| g.id != ROOT) {
            let rpc = Rpc::new(self.transport(), g.id);
            match rpc
                .call::<(), Option<NodeId>>(&addr, Call::Leader, &(), HOLDS_TIMEOUT)
                .await
            {
                Err(RpcError::Status(_, 404, _)) => {}
                Err(RpcError::Unreachable(..) | RpcError::Lost(..) | RpcError::Timeout(..)) => {
                    return false;
                }
                Ok(_) | Err(_) => return true,
            }
        }
        false
    }

    /// `--replication-factor` nodes of root's members that are not leaving (all of them,
    /// if fewer), those holding the fewest replicas in `map` first (by id among equals):
    /// the first is the new group's preferred leader.
    fn least_loaded(&self, map: &ShardMap, leaving: &BTreeSet<NodeId>) -> Vec<u64> {
        let nodes = self.root().status().nodes;
        let load = |id: u64| map.groups().filter(|g| g.replicas.contains(&id)).count();
        let mut ids: Vec<u64> = nodes
            .keys()
            .copied()
            .filter(|n| !leaving.contains(n))
            .collect();
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
    if root.read_local(|s| s.plan_cancel()).await? == Some(plan.version) {
        return cancel(r, map, &plan, root).await.map(|()| None);
    }
    let started = Instant::now();
    let mut copied = 0;
    let new: Vec<&Group> = plan
        .groups()
        .filter(|g| map.group(g.id).is_none())
        .collect();
    for group in new {
        copied += move_rows(r, map, &plan, group.id).await?;
        copied += move_index_rows(r, map, &plan, root, group.id).await?;
    }
    // A step waits at most `CATCH_UP_WAIT` for a learner (one on a node that died never
    // catches up): a cancel asked meanwhile is taken next round.
    for (before, after) in map
        .groups()
        .filter_map(|g| Some((g, plan.group(g.id)?)))
        .filter(|(g, p)| g.replicas != p.replicas)
    {
        move_replicas(r, before, after).await?;
    }
    root.execute(Command::SetShardMap { map: plan.clone() })
        .await?;
    tracing::info!(
        version = plan.version,
        rows = copied,
        ms = started.elapsed().as_millis() as u64,
        "a change of the map committed: writes of the intervals a split moved waited this long at most"
    );
    Ok(Some(copied))
}

/// Reverses a cancelled move: each moved group's membership brought back to the map's
/// (the node it was to leave a voter again, the node it was to reach removed), then the
/// plan dropped. Run again each round until then, every step a no-op once done.
async fn cancel(
    r: &Replicas,
    map: &ShardMap,
    plan: &ShardMap,
    root: &Metadata,
) -> Result<(), MetaError> {
    for (before, after) in map
        .groups()
        .filter_map(|g| Some((g, plan.group(g.id)?)))
        .filter(|(g, p)| g.replicas != p.replicas)
    {
        move_replicas(r, after, before).await?;
    }
    root.execute(Command::CancelPlan {
        version: plan.version,
        done: true,
    })
    .await?;
    tracing::info!(
        version = plan.version,
        "a move was cancelled: the map stays as it was"
    );
    Ok(())
}

/// Brings `before`'s replicas to `after`'s through membership changes in the group's own
/// log: each new node a learner (answered once it has caught up), then a voter; then each
/// node that leaves removed. The group keeps at least its size of voters all along, and
/// every change asked again once done changes nothing. Each change is asked of the
/// replicas both before and after: the leader may be either (a move cancelled halfway
/// runs the other way).
async fn move_replicas(r: &Replicas, before: &Group, after: &Group) -> Result<(), MetaError> {
    let nodes = r.root().status().nodes;
    let id = before.id;
    let all: Vec<NodeId> = before
        .replicas
        .iter()
        .chain(&after.replicas)
        .copied()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for &to in after
        .replicas
        .iter()
        .filter(|n| !before.replicas.contains(n))
    {
        let addr = nodes.get(&to).cloned().ok_or_else(|| {
            MetaError::Unavailable(format!("node {to} has no address in root yet"))
        })?;
        r.change_membership_in(id, &all, MembershipOp::AddLearner { id: to, addr })
            .await?;
        r.change_membership_in(id, &all, MembershipOp::Promote { id: to })
            .await?;
        tracing::info!(group = id, node = to, "a moved replica caught up and votes");
    }
    for &from in before
        .replicas
        .iter()
        .filter(|n| !after.replicas.contains(n))
    {
        r.change_membership_in(id, &all, MembershipOp::Remove { id: from })
            .await?;
        tracing::info!(group = id, node = from, "a moved replica left its group");
    }
    Ok(())
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
    end_copy(r, plan, from, new).await?;
    tracing::info!(from, new, rows = copied, "rows of a split copied");
    Ok(copied)
}

/// Moves to `new` the rows of the key intervals `plan` gives it (an index split, see
/// [`crate::index_handoff`]): ownership in `new`, the records of the buckets it will hold
/// keys of, the hand-off in the group that owns them in `map`, the copy, the seal, the end
/// of the hand-off. Each step answers at once when it is done already.
async fn move_index_rows(
    r: &Replicas,
    map: &ShardMap,
    plan: &ShardMap,
    root: &Metadata,
    new: GroupId,
) -> Result<u64, MetaError> {
    let intervals: Vec<KeyInterval> = plan
        .index_intervals()
        .filter(|(_, _, owner)| *owner == new)
        .map(|(start, end, _)| (start.clone(), end.cloned()))
        .collect();
    let Some((first, _)) = intervals.first() else {
        return Ok(0);
    };
    let from = map.index_group(&first.bucket, &first.key);
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
    super::buckets::copy_to_new(r, plan, root, new).await?;
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
    'copy: for interval in &intervals {
        let mut cursor = None;
        loop {
            let query = ReadQuery::IndexRows {
                interval: interval.clone(),
                from: cursor.clone(),
                limit: r.split_page_rows(),
            };
            let page = match r.read_in(plan, from, query).await? {
                ReadAnswer::IndexRows(page) => page,
                other => return Err(MetaError::Unexpected(format!("{other:?}"))),
            };
            let count = page.rows.len() as u64;
            if count > 0 {
                let cmd = Command::IngestIndex {
                    group: new,
                    rows: page.rows,
                };
                match r.send_on(plan, new, cmd).await? {
                    Response::Ingested(_) => copied += count,
                    // An earlier run of this step finished the copy and sealed it.
                    Response::Sealed => break 'copy,
                    other => return Err(MetaError::Unexpected(format!("{other:?}"))),
                }
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
    }
    end_copy(r, plan, from, new).await?;
    tracing::info!(from, new, rows = copied, "index rows of a split copied");
    Ok(copied)
}

/// The end of a split's copy: `Seal` in `new` (no copy is taken after it), then
/// `EndHandOff` in `from` (its reads of the moved interval end).
async fn end_copy(
    r: &Replicas,
    plan: &ShardMap,
    from: GroupId,
    new: GroupId,
) -> Result<(), MetaError> {
    let map_version = plan.version;
    step(
        r,
        plan,
        new,
        Command::Seal {
            group: new,
            map_version,
        },
    )
    .await?;
    step(
        r,
        plan,
        from,
        Command::EndHandOff {
            group: from,
            map_version,
        },
    )
    .await
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
/// `--group-split-files` records, or that applied more than `--group-split-ops` FileDB
/// operations per second over a whole rate window, plans its split at the middle of its
/// first interval, unless a split is under way (one at a time, and this group's rows not
/// yet dropped after its last). The rate counts only in a cluster of more than one node:
/// a split pays off where the new group's leader can be on other cores, and on one node
/// it would only make each PUT two commands.
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
    if handoff.is_some() {
        // The load measured so far includes what the split took away.
        r.forget_rate_window(id);
        return Ok(());
    }
    let (ops_max, window) = r.group_split_rate();
    let ended = if ops_max > 0 && r.root().status().nodes.len() > 1 {
        r.rate_window(id, meta.store().filedb_ops(), window)
    } else {
        None
    };
    // At the end of each window: where that window's load divides (none: one content
    // takes most of it, and a split would move the load, not share it), if it was busy.
    let at = ended.and_then(|(since, ops)| {
        let rate = meta.store().filedb_ops().saturating_sub(ops) as f64
            / since.elapsed().as_secs_f64().max(f64::EPSILON);
        let at = meta.store().take_load_split_point();
        at.filter(|at| rate > ops_max as f64 && inside(map, id, at))
    });
    let busy = at.is_some();
    if files <= r.group_split_files() && at.is_none() {
        return Ok(());
    }
    if r.root().read_local(|s| s.planned_map()).await?.is_some() {
        return Ok(());
    }
    tracing::info!(
        group = id,
        files,
        busy,
        "the group passed its size or its rate of FileDB operations: splitting it"
    );
    match r.plan_split(id, at).await {
        // Another change of the map came first: the next round looks again.
        Ok(_) | Err(MetaError::ShardMapVersion { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The leader of a group holding S3 keys (root included) whose index entries (objects,
/// versions, parts) pass `--group-split-objects` plans an index split where its first key
/// interval's objects halve, unless a change of the map is under way, this group's last
/// hand-off is not yet dropped (its rows still count), or root's metadata format predates
/// index splits (a node of the previous release cannot hand keys off).
pub(super) async fn split_index_when_full(
    r: &Replicas,
    map: &ShardMap,
    id: GroupId,
    meta: &Metadata,
) -> Result<(), MetaError> {
    if map.group(id).is_none_or(|g| g.kind == GroupKind::FileDb)
        || !map.index_intervals().any(|(_, _, owner)| owner == id)
    {
        return Ok(());
    }
    let (entries, handoff) = meta
        .read_local(|s| Ok((s.index_entries()?, s.handoff()?)))
        .await?;
    if handoff.is_some() || entries <= r.group_split_objects() {
        return Ok(());
    }
    let (planned, format) = r
        .root()
        .read_local(|s| Ok((s.planned_map()?, s.cluster_version()?)))
        .await?;
    if planned.is_some() || format < crate::bucket_copies::LIFECYCLE_FORMAT {
        return Ok(());
    }
    tracing::info!(
        group = id,
        entries,
        "the group passed its size in index entries: splitting its keys"
    );
    match r.plan_index_split(id, None).await {
        // Another change of the map came first: the next round looks again.
        Ok(_) | Err(MetaError::ShardMapVersion { .. }) => Ok(()),
        // Not splittable now: its entries are versions or parts of few keys, or a bulk-
        // delete job runs on the keys that would move (root refuses the plan). The next
        // round looks again; a log line a second would only repeat this one.
        Err(MetaError::InvalidCommand(why)) => {
            tracing::debug!(group = id, %why, "an index split by size refused");
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Whether `at` lies inside one of `id`'s sha1 intervals, past its start (a split there
/// leaves the group something).
fn inside(map: &ShardMap, id: GroupId, at: &[u8; 20]) -> bool {
    map.filedb_intervals()
        .any(|(start, end, g)| g == id && start < *at && end.is_none_or(|end| *at < end))
}

/// Root's leader, with no change of the map under way: plans the first move of
/// [`rebalance`] over root's members that are not leaving, which moves the replicas of
/// the nodes leaving first; with `--no-rebalance`, those moves only. Then removes from
/// root each leaving node that holds no replica any more ([`remove_drained`]).
pub(super) async fn rebalance_when_uneven(
    r: &Replicas,
    map: &ShardMap,
    root: &Metadata,
) -> Result<(), MetaError> {
    let (planned, leaving) = root
        .read_local(|s| Ok((s.planned_map()?, s.leaving()?)))
        .await?;
    if planned.is_some() || (!r.rebalances() && leaving.is_empty()) {
        return Ok(());
    }
    let current = replica_lists(map);
    if !current.is_empty() {
        let nodes: Vec<NodeId> = root
            .status()
            .nodes
            .keys()
            .copied()
            .filter(|n| !leaving.contains(n))
            .collect();
        let moves =
            rebalance(&current, &nodes).map_err(|e| MetaError::Unavailable(e.to_string()))?;
        if let Some(m) = moves
            .iter()
            .find(|m| r.rebalances() || leaving.contains(&m.from))
        {
            tracing::info!(
                group = m.group,
                from = m.from,
                to = m.to,
                moves = moves.len(),
                leaving = leaving.contains(&m.from),
                "the groups' replicas are spread unevenly or a node is leaving: moving one"
            );
            // Another change of the map came first: the next round looks again.
            return match r.plan_move(m.group, m.from, m.to).await {
                Ok(_) | Err(MetaError::ShardMapVersion { .. }) => Ok(()),
                Err(e) => Err(e),
            };
        }
    }
    remove_drained(r, map, root, &leaving).await
}

/// Removes from root each leaving node the committed map places no replica on (no change
/// is under way: the caller checked) and that has dropped its replicas (or cannot be
/// reached: a dead node is removed too), then takes it off the leaving nodes. A node that
/// is no longer a member (removed by an earlier round whose leader stopped before the
/// second step) is only taken off.
async fn remove_drained(
    r: &Replicas,
    map: &ShardMap,
    root: &Metadata,
    leaving: &BTreeSet<NodeId>,
) -> Result<(), MetaError> {
    for &node in leaving {
        let placed = map
            .groups()
            .any(|g| g.id != ROOT && g.replicas.contains(&node));
        if placed || r.still_holds(node, map).await {
            continue;
        }
        if root.status().nodes.contains_key(&node) {
            root.change_membership(MembershipOp::Remove { id: node })
                .await?;
            tracing::info!(node, "a leaving node holds no replica any more: removed");
        }
        root.execute(Command::SetLeaving {
            node,
            leaving: false,
        })
        .await?;
    }
    Ok(())
}

/// Every group's replicas but root's (root's are its voters).
fn replica_lists(map: &ShardMap) -> BTreeMap<GroupId, Vec<NodeId>> {
    map.groups()
        .filter(|g| g.id != ROOT)
        .map(|g| (g.id, g.replicas.clone()))
        .collect()
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
