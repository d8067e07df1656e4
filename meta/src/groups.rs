//! Groups: how the metadata is split over many Raft groups (`docs/scaling.md`, section 2),
//! the versioned shard map every gateway routes by, and where each group's replicas live.
//!
//! - The **root** group holds the shard map, PairDB, buckets and access keys. A map of one
//!   group ([`ShardMap::single`]) is today's cluster: root owns every sha1 and every
//!   (bucket, key) as well.
//! - **FileDB** groups own intervals of sha1; **index** groups own intervals of
//!   (bucket, key), so that a listing walks consecutive groups in key order.
//! - Each interval runs from its start to the next interval's start; the first starts at the
//!   smallest value, so every sha1 and every (bucket, key) has exactly one owner. A split
//!   cuts one interval in two and gives the upper half to a new group; the map's version
//!   rises with every change, so a gateway holding an older map learns it is stale from the
//!   group that answers `Moved`.
//! - [`place`] spreads the replicas and the preferred leaders of the groups evenly over the
//!   nodes, never two replicas of a group on one node; [`rebalance`] plans the membership
//!   changes that bring a placement back to even after nodes were added or removed.
//!
//! This module is pure: no table, no I/O. The root group will keep the map as one record
//! (encoded by [`ShardMap::encode`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A node of the cluster (openraft's node id).
pub type NodeId = u64;
/// A metadata group.
pub type GroupId = u32;

/// The root group's id in every map.
pub const ROOT: GroupId = 0;

/// The lowest sha1: the start of the first FileDB interval.
pub const SHA1_MIN: [u8; 20] = [0; 20];

/// What a group holds besides its intervals. In JSON (`GET /_admin/groups`) by its
/// [`name`](GroupKind::name); postcard records keep the variant's index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupKind {
    Root,
    FileDb,
    Index,
}

impl GroupKind {
    /// The name `GET /_admin/groups` reports (a contract).
    pub fn name(self) -> &'static str {
        match self {
            GroupKind::Root => "root",
            GroupKind::FileDb => "filedb",
            GroupKind::Index => "index",
        }
    }
}

/// The start of an index interval: a bucket and a key in it. The first interval starts at
/// ("", ""), below every real bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct IndexStart {
    pub bucket: String,
    pub key: String,
}

impl IndexStart {
    pub fn new(bucket: &str, key: &str) -> Self {
        IndexStart {
            bucket: bucket.to_string(),
            key: key.to_string(),
        }
    }

    fn as_pair(&self) -> (&str, &str) {
        (&self.bucket, &self.key)
    }
}

/// One group: its kind and its replicas, the first of them its preferred leader.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    pub id: GroupId,
    pub kind: GroupKind,
    pub replicas: Vec<NodeId>,
}

/// Where a split cuts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SplitAt {
    /// A FileDB interval, at this sha1 (the new group owns it and what follows).
    Sha1([u8; 20]),
    /// An index interval, at this (bucket, key).
    Key(IndexStart),
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GroupsError {
    #[error("no group {0}")]
    NoSuchGroup(GroupId),
    #[error("group {group} does not own the interval where the split point lies")]
    NotOwner { group: GroupId },
    #[error("the split point is already the start of an interval")]
    AtStart,
    #[error("a group needs at least one replica")]
    NoReplicas,
    #[error("node {node} holds two replicas of group {group}")]
    DuplicateReplica { group: GroupId, node: NodeId },
    #[error("no node to place replicas on")]
    NoNodes,
    #[error("the shard map is not well formed: {0}")]
    Malformed(String),
    #[error("shard map record: {0}")]
    Encoding(String),
}

/// The versioned shard map: every group, and which group owns each sha1 and each
/// (bucket, key). Its invariants ([`ShardMap::check`]) hold for every map this module makes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMap {
    pub version: u64,
    groups: BTreeMap<GroupId, Group>,
    /// Interval starts, ascending, the first [`SHA1_MIN`].
    filedb: Vec<([u8; 20], GroupId)>,
    /// Interval starts, ascending, the first `("", "")`.
    index: Vec<(IndexStart, GroupId)>,
}

/// Format byte of an encoded map.
const MAP_V1: u8 = 1;

impl ShardMap {
    /// One root group owning everything, on `replicas`: the cluster before any split.
    pub fn single(replicas: Vec<NodeId>) -> Result<ShardMap, GroupsError> {
        let map = ShardMap {
            version: 1,
            groups: BTreeMap::from([(
                ROOT,
                Group {
                    id: ROOT,
                    kind: GroupKind::Root,
                    replicas,
                },
            )]),
            filedb: vec![(SHA1_MIN, ROOT)],
            index: vec![(IndexStart::default(), ROOT)],
        };
        map.check()?;
        Ok(map)
    }

    pub fn groups(&self) -> impl Iterator<Item = &Group> {
        self.groups.values()
    }

    pub fn group(&self, id: GroupId) -> Option<&Group> {
        self.groups.get(&id)
    }

    /// The FileDB intervals in order: (start, end (None: the last), owner).
    pub fn filedb_intervals(&self) -> impl Iterator<Item = ([u8; 20], Option<[u8; 20]>, GroupId)> {
        self.filedb
            .iter()
            .enumerate()
            .map(|(i, (start, g))| (*start, self.filedb.get(i + 1).map(|n| n.0), *g))
    }

    /// The index intervals in order: (start, end (None: the last), owner).
    pub fn index_intervals(
        &self,
    ) -> impl Iterator<Item = (&IndexStart, Option<&IndexStart>, GroupId)> {
        self.index
            .iter()
            .enumerate()
            .map(|(i, (start, g))| (start, self.index.get(i + 1).map(|n| &n.0), *g))
    }

    /// The group that owns `sha1`'s FileDB record.
    pub fn filedb_group(&self, sha1: &[u8; 20]) -> GroupId {
        let at = self.filedb.partition_point(|(start, _)| start <= sha1);
        // The first start is SHA1_MIN, so `at` >= 1.
        self.filedb[at.saturating_sub(1)].1
    }

    /// The group that owns the index entries of (`bucket`, `key`).
    pub fn index_group(&self, bucket: &str, key: &str) -> GroupId {
        // The first start is ("", ""), so the position is >= 1.
        self.index[self.index_after(bucket, key).saturating_sub(1)].1
    }

    /// The groups holding keys of `bucket`, ascending.
    pub fn index_groups_of(&self, bucket: &str) -> Vec<GroupId> {
        let mut out: Vec<GroupId> = self
            .index_intervals()
            .filter(|(start, end, _)| {
                start.bucket.as_str() <= bucket
                    && end.is_none_or(|e| {
                        e.bucket.as_str() > bucket || (e.bucket == bucket && !e.key.is_empty())
                    })
            })
            .map(|(_, _, g)| g)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Whether root owns every key of the index (no index group yet).
    pub fn index_only_in_root(&self) -> bool {
        self.index.iter().all(|(_, g)| *g == ROOT)
    }

    /// Where a listing of `bucket` at `key` (bytes: a listing's cursor need not be UTF-8)
    /// reads: the group owning that place, and the key its interval ends at in the bucket
    /// (None: it runs past the bucket's last key).
    pub fn index_span(&self, bucket: &str, key: &[u8]) -> (GroupId, Option<Vec<u8>>) {
        let at = self.index.partition_point(|(start, _)| {
            (start.bucket.as_str(), start.key.as_bytes()) <= (bucket, key)
        });
        // The first start is ("", ""), so `at` >= 1.
        let owner = self.index[at.saturating_sub(1)].1;
        let until = self
            .index
            .get(at)
            .filter(|(next, _)| next.bucket == bucket)
            .map(|(next, _)| next.key.as_bytes().to_vec());
        (owner, until)
    }

    /// The position of the first index interval that starts after (`bucket`, `key`).
    fn index_after(&self, bucket: &str, key: &str) -> usize {
        self.index
            .partition_point(|(start, _)| start.as_pair() <= (bucket, key))
    }

    /// A new map (version + 1) in which a new group, on `replicas`, owns the part of
    /// `group`'s interval from `at` on. The new group's kind follows the space: FileDB for a
    /// sha1, index for a key. Returns the map and the new group's id.
    pub fn split(
        &self,
        group: GroupId,
        at: SplitAt,
        replicas: Vec<NodeId>,
    ) -> Result<(ShardMap, GroupId), GroupsError> {
        if !self.groups.contains_key(&group) {
            return Err(GroupsError::NoSuchGroup(group));
        }
        let id = self.groups.keys().next_back().map_or(ROOT, |g| g + 1);
        let mut next = self.clone();
        next.version += 1;
        let kind = match at {
            SplitAt::Sha1(sha1) => {
                split_intervals(&mut next.filedb, group, sha1, id)?;
                GroupKind::FileDb
            }
            SplitAt::Key(start) => {
                split_intervals(&mut next.index, group, start, id)?;
                GroupKind::Index
            }
        };
        next.groups.insert(id, Group { id, kind, replicas });
        next.check()?;
        Ok((next, id))
    }

    /// A new map (version + 1) with `group`'s replicas replaced.
    pub fn with_replicas(
        &self,
        group: GroupId,
        replicas: Vec<NodeId>,
    ) -> Result<ShardMap, GroupsError> {
        let mut next = self.clone();
        next.version += 1;
        next.groups
            .get_mut(&group)
            .ok_or(GroupsError::NoSuchGroup(group))?
            .replicas = replicas;
        next.check()?;
        Ok(next)
    }

    /// The map's invariants: one root group; intervals ascending from the lowest value,
    /// each owned by a group that exists and may hold it (root, or a group of the
    /// interval's kind); every group's replicas present and distinct.
    pub fn check(&self) -> Result<(), GroupsError> {
        let bad = |why: String| Err(GroupsError::Malformed(why));
        let roots = self
            .groups
            .values()
            .filter(|g| g.kind == GroupKind::Root)
            .count();
        if roots != 1 || self.groups.get(&ROOT).map(|g| g.kind) != Some(GroupKind::Root) {
            return bad(format!(
                "{roots} root groups, group {ROOT} must be the root"
            ));
        }
        for (id, g) in &self.groups {
            if *id != g.id {
                return bad(format!("group {} filed under {id}", g.id));
            }
            if g.replicas.is_empty() {
                return Err(GroupsError::NoReplicas);
            }
            for (i, node) in g.replicas.iter().enumerate() {
                if g.replicas[..i].contains(node) {
                    return Err(GroupsError::DuplicateReplica {
                        group: g.id,
                        node: *node,
                    });
                }
            }
        }
        if self.filedb.first().map(|f| f.0) != Some(SHA1_MIN) {
            return bad("the FileDB intervals do not start at the lowest sha1".into());
        }
        if self.index.first().map(|f| &f.0) != Some(&IndexStart::default()) {
            return bad("the index intervals do not start at (\"\", \"\")".into());
        }
        if !self.filedb.windows(2).all(|w| w[0].0 < w[1].0)
            || !self.index.windows(2).all(|w| w[0].0 < w[1].0)
        {
            return bad("interval starts out of order".into());
        }
        let owners = self
            .filedb
            .iter()
            .map(|(_, g)| (*g, GroupKind::FileDb))
            .chain(self.index.iter().map(|(_, g)| (*g, GroupKind::Index)));
        for (g, space) in owners {
            match self.groups.get(&g).map(|g| g.kind) {
                None => return bad(format!("an interval names group {g}, which does not exist")),
                Some(kind) if kind != GroupKind::Root && kind != space => {
                    return bad(format!(
                        "group {g} ({}) owns a {} interval",
                        kind.name(),
                        space.name()
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// The map as the root group's record: a format byte, then postcard.
    pub fn encode(&self) -> Result<Vec<u8>, GroupsError> {
        let mut out = vec![MAP_V1];
        out.extend(postcard::to_stdvec(self).map_err(|e| GroupsError::Encoding(e.to_string()))?);
        Ok(out)
    }

    /// Reads an encoded map back, checked.
    pub fn decode(bytes: &[u8]) -> Result<ShardMap, GroupsError> {
        let map: ShardMap = match bytes.split_first() {
            Some((&MAP_V1, rest)) => {
                postcard::from_bytes(rest).map_err(|e| GroupsError::Encoding(e.to_string()))?
            }
            Some((v, _)) => return Err(GroupsError::Encoding(format!("unknown format {v}"))),
            None => return Err(GroupsError::Encoding("empty record".into())),
        };
        map.check()?;
        Ok(map)
    }
}

/// Cuts the interval of `intervals` that holds `at` (owned by `group`) at `at`, the upper
/// part going to `new`.
fn split_intervals<T: Ord>(
    intervals: &mut Vec<(T, GroupId)>,
    group: GroupId,
    at: T,
    new: GroupId,
) -> Result<(), GroupsError> {
    let pos = intervals.partition_point(|(start, _)| *start <= at);
    let holder = pos.saturating_sub(1);
    match intervals.get(holder) {
        Some((start, _)) if *start == at => Err(GroupsError::AtStart),
        Some((_, owner)) if *owner == group => {
            intervals.insert(pos, (at, new));
            Ok(())
        }
        _ => Err(GroupsError::NotOwner { group }),
    }
}

/// The midpoint of the sha1 interval [`start`, `end`) (`end` None: 2^160), where a FileDB
/// group splits: SHA-1 is uniform over contents, so the halves hold about equal counts, and
/// the point needs no scan.
pub fn sha1_midpoint(start: &[u8; 20], end: Option<&[u8; 20]>) -> [u8; 20] {
    // (start + end) / 2 over 161 bits, big-endian.
    let mut sum = [0u8; 21];
    let mut carry = 0u16;
    for i in (0..20).rev() {
        let e = end.map_or(0, |e| e[i]) as u16;
        let s = start[i] as u16 + e + carry;
        sum[i + 1] = (s & 0xff) as u8;
        carry = s >> 8;
    }
    // 2^160 as the end is a 1 just above the 20 bytes.
    sum[0] = carry as u8 + u8::from(end.is_none());
    let mut mid = [0u8; 20];
    for i in 0..20 {
        mid[i] = (sum[i + 1] >> 1) | (sum[i] << 7);
    }
    mid
}

/// The sha1 just before `sha1` (None before the lowest): an exclusive lower bound that
/// lets `sha1` itself through, as where a walk of an interval starts.
pub fn sha1_before(sha1: &[u8; 20]) -> Option<[u8; 20]> {
    let mut s = *sha1;
    for b in s.iter_mut().rev() {
        if *b > 0 {
            *b -= 1;
            return Some(s);
        }
        *b = 0xff;
    }
    None
}

/// The sha1 just after `sha1` (None after the highest): where a walk goes on from.
pub fn sha1_after(sha1: &[u8; 20]) -> Option<[u8; 20]> {
    let mut s = *sha1;
    for b in s.iter_mut().rev() {
        if *b < 0xff {
            *b += 1;
            return Some(s);
        }
        *b = 0;
    }
    None
}

/// Replicas of each of `groups` on `nodes`: `rf` each (fewer when there are fewer nodes),
/// never two on one node, the counts per node differing by at most one, and the first
/// replica of each group (its preferred leader) spread the same way. Deterministic.
pub fn place(
    nodes: &[NodeId],
    groups: &[GroupId],
    rf: usize,
) -> Result<BTreeMap<GroupId, Vec<NodeId>>, GroupsError> {
    if nodes.is_empty() {
        return Err(GroupsError::NoNodes);
    }
    let mut nodes: Vec<NodeId> = nodes.to_vec();
    nodes.sort_unstable();
    nodes.dedup();
    let rf = rf.clamp(1, nodes.len());
    // The replica slots fill the nodes round and round: consecutive slots are distinct
    // nodes (rf <= nodes), and the counts never differ by more than one.
    let sets: Vec<Vec<usize>> = (0..groups.len())
        .map(|i| (0..rf).map(|j| (i * rf + j) % nodes.len()).collect())
        .collect();
    let lead = balance_leaders(&sets, nodes.len());
    let mut out = BTreeMap::new();
    for ((group, set), lead) in groups.iter().zip(sets).zip(lead) {
        let replicas = std::iter::once(lead)
            .chain(set.into_iter().filter(|&s| s != lead))
            .map(|s| nodes[s])
            .collect();
        out.insert(*group, replicas);
    }
    Ok(out)
}

/// A leader for each group (an index into `nodes`), chosen from its replica `sets` so that
/// the nodes lead as evenly as the sets allow: greedily first, then by moving leadership
/// along chains (group led by x -> another replica y of it, whose own group -> ...) from a
/// node leading most to one leading at least two fewer, as a matching is augmented. Each
/// chain lowers the sum of squared counts, so the loop ends; it is bounded besides.
fn balance_leaders(sets: &[Vec<usize>], nodes: usize) -> Vec<usize> {
    let mut count = vec![0usize; nodes];
    let mut lead: Vec<usize> = sets
        .iter()
        .map(|set| {
            let l = set
                .iter()
                .copied()
                .min_by_key(|&s| (count[s], s))
                .unwrap_or(0);
            count[l] += 1;
            l
        })
        .collect();
    for _ in 0..sets.len() * nodes {
        let Some(path) = leader_chain(sets, &lead, &count) else {
            break;
        };
        // Each group on the path passes its leadership to the next node.
        for (group, to) in path {
            count[lead[group]] -= 1;
            count[to] += 1;
            lead[group] = to;
        }
    }
    lead
}

/// A chain of (group, new leader) from a node leading most to one leading at least two
/// fewer, found breadth first; None when there is none (the counts are as even as the sets
/// allow, or differ by at most one).
fn leader_chain(
    sets: &[Vec<usize>],
    lead: &[usize],
    count: &[usize],
) -> Option<Vec<(usize, usize)>> {
    let max = *count.iter().max()?;
    let nodes = count.len();
    // came[y] = (group, x): y was reached by moving `group` from x.
    let mut came: Vec<Option<(usize, usize)>> = vec![None; nodes];
    let mut seen = vec![false; nodes];
    let mut queue = std::collections::VecDeque::new();
    for (x, &c) in count.iter().enumerate() {
        if c == max {
            seen[x] = true;
            queue.push_back(x);
        }
    }
    while let Some(x) = queue.pop_front() {
        for (group, set) in sets.iter().enumerate() {
            if lead[group] != x {
                continue;
            }
            for &y in set {
                if seen[y] {
                    continue;
                }
                seen[y] = true;
                came[y] = Some((group, x));
                if count[y] + 2 <= max {
                    let mut path = Vec::new();
                    let mut at = y;
                    while let Some((g, from)) = came[at] {
                        path.push((g, at));
                        at = from;
                    }
                    path.reverse();
                    return Some(path);
                }
                queue.push_back(y);
            }
        }
    }
    None
}

/// One step of a rebalance: add a replica of `group` on `to` (a learner caught up, then a
/// voter), then remove the one on `from`. openraft makes both one membership change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    pub group: GroupId,
    pub from: NodeId,
    pub to: NodeId,
}

/// The moves that bring `current` to an even spread over `nodes`: every replica on a node
/// that is no longer in `nodes` moves first, then replicas go from the most loaded node to
/// the least loaded one that holds no replica of the group, until the counts differ by at
/// most one. Each move keeps every group at its size and never puts two replicas of a
/// group on one node. Bounded: each move lowers the imbalance or empties a removed node.
pub fn rebalance(
    current: &BTreeMap<GroupId, Vec<NodeId>>,
    nodes: &[NodeId],
) -> Result<Vec<Move>, GroupsError> {
    if nodes.is_empty() {
        return Err(GroupsError::NoNodes);
    }
    let mut assign = current.clone();
    let mut moves = Vec::new();
    let holds = |assign: &BTreeMap<GroupId, Vec<NodeId>>, node: NodeId| -> Vec<GroupId> {
        assign
            .iter()
            .filter(|(_, r)| r.contains(&node))
            .map(|(g, _)| *g)
            .collect()
    };
    let count = |assign: &BTreeMap<GroupId, Vec<NodeId>>, node: NodeId| {
        assign.values().filter(|r| r.contains(&node)).count()
    };
    // Replicas on nodes that left.
    let gone: Vec<(GroupId, NodeId)> = assign
        .iter()
        .flat_map(|(g, r)| r.iter().filter(|n| !nodes.contains(n)).map(|n| (*g, *n)))
        .collect();
    for (group, from) in gone {
        let replicas = assign.get(&group).cloned().unwrap_or_default();
        let to = nodes
            .iter()
            .filter(|n| !replicas.contains(n))
            .min_by_key(|n| (count(&assign, **n), **n))
            .copied();
        match to {
            Some(to) => {
                replace(&mut assign, group, from, to);
                moves.push(Move { group, from, to });
            }
            // Fewer nodes than replicas: this replica has nowhere to go.
            None => {
                return Err(GroupsError::Malformed(format!(
                    "group {group} has more replicas than there are nodes"
                )));
            }
        }
    }
    // Even out: at most one move per replica in the map.
    let bound = assign.values().map(Vec::len).sum::<usize>();
    for _ in 0..bound {
        let most = *nodes
            .iter()
            .max_by_key(|n| (count(&assign, **n), std::cmp::Reverse(**n)))
            .ok_or(GroupsError::NoNodes)?;
        let least = *nodes
            .iter()
            .min_by_key(|n| (count(&assign, **n), **n))
            .ok_or(GroupsError::NoNodes)?;
        if count(&assign, most) <= count(&assign, least) + 1 {
            break;
        }
        let on_least = holds(&assign, least);
        // A group of the most loaded node the least loaded one does not hold yet; a
        // follower replica first, so that leaders stay where they are.
        let candidates: Vec<GroupId> = holds(&assign, most)
            .into_iter()
            .filter(|g| !on_least.contains(g))
            .collect();
        let pick = candidates
            .iter()
            .find(|g| assign.get(g).and_then(|r| r.first()) != Some(&most))
            .or(candidates.first())
            .copied();
        let Some(group) = pick else {
            break;
        };
        replace(&mut assign, group, most, least);
        moves.push(Move {
            group,
            from: most,
            to: least,
        });
    }
    Ok(moves)
}

/// `from`'s replica of `group` becomes `to`'s, in the same position (a preferred leader
/// that moves stays its group's preferred leader).
fn replace(assign: &mut BTreeMap<GroupId, Vec<NodeId>>, group: GroupId, from: NodeId, to: NodeId) {
    if let Some(r) = assign.get_mut(&group) {
        for n in r.iter_mut() {
            if *n == from {
                *n = to;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sha1s_just_before_and_after_are_the_neighbours() {
        let mut x = [0u8; 20];
        x[19] = 0x10;
        x[18] = 0x01;
        let mut before = x;
        before[19] = 0x0f;
        assert_eq!(sha1_before(&x), Some(before));
        assert_eq!(sha1_after(&before), Some(x));
        let mut carry = [0u8; 20];
        carry[18] = 1;
        let mut low = [0u8; 20];
        low[19] = 0xff;
        assert_eq!(sha1_before(&carry), Some(low));
        assert_eq!(sha1_after(&low), Some(carry));
        assert_eq!(sha1_before(&SHA1_MIN), None);
        assert_eq!(sha1_after(&[0xff; 20]), None);
    }
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    fn sha(first: u8) -> [u8; 20] {
        let mut s = [0u8; 20];
        s[0] = first;
        s
    }

    #[test]
    fn a_single_group_owns_everything() {
        let map = ShardMap::single(vec![1, 2, 3]).unwrap();
        assert_eq!(map.filedb_group(&SHA1_MIN), ROOT);
        assert_eq!(map.filedb_group(&[0xff; 20]), ROOT);
        assert_eq!(map.index_group("", ""), ROOT);
        assert_eq!(map.index_group("zz", "\u{10ffff}"), ROOT);
        assert_eq!(map.index_span("a", b"b"), (ROOT, None));
        assert_eq!(map.groups().count(), 1);
        assert_eq!(map.group(ROOT).unwrap().kind.name(), "root");
    }

    #[test]
    fn splits_route_each_value_to_one_owner() {
        let map = ShardMap::single(vec![1, 2, 3]).unwrap();
        let (map, f1) = map
            .split(ROOT, SplitAt::Sha1(sha(0x80)), vec![2, 3, 1])
            .unwrap();
        let (map, f2) = map
            .split(f1, SplitAt::Sha1(sha(0xc0)), vec![3, 1, 2])
            .unwrap();
        let (map, i1) = map
            .split(
                ROOT,
                SplitAt::Key(IndexStart::new("mail", "m")),
                vec![1, 2, 3],
            )
            .unwrap();
        assert_eq!(map.version, 4);
        assert_eq!(map.filedb_group(&sha(0x7f)), ROOT);
        assert_eq!(map.filedb_group(&sha(0x80)), f1);
        assert_eq!(map.filedb_group(&sha(0xbf)), f1);
        assert_eq!(map.filedb_group(&sha(0xc0)), f2);
        assert_eq!(map.filedb_group(&[0xff; 20]), f2);
        assert_eq!(map.group(f2).unwrap().kind, GroupKind::FileDb);
        assert_eq!(map.index_group("mail", "l"), ROOT);
        assert_eq!(map.index_group("mail", "m"), i1);
        assert_eq!(map.index_group("photos", ""), i1);
        assert_eq!(map.group(i1).unwrap().kind, GroupKind::Index);
        // A listing's span: the owner and where its interval ends in the bucket.
        assert_eq!(map.index_span("mail", b"a"), (ROOT, Some(b"m".to_vec())));
        assert_eq!(map.index_span("mail", b"m"), (i1, None));
        assert_eq!(map.index_span("a", b"\xff"), (ROOT, None));
        let (map2, i2) = map
            .split(i1, SplitAt::Key(IndexStart::new("mail", "t")), vec![1])
            .unwrap();
        assert_eq!(map2.index_span("mail", b"p"), (i1, Some(b"t".to_vec())));
        assert_eq!(map2.index_span("mail", b"t\xff"), (i2, None));
        // Not the owner, an existing start, a missing group: refused, nothing changed.
        assert_eq!(
            map.split(ROOT, SplitAt::Sha1(sha(0x90)), vec![1]),
            Err(GroupsError::NotOwner { group: ROOT })
        );
        assert_eq!(
            map.split(f1, SplitAt::Sha1(sha(0x80)), vec![1]),
            Err(GroupsError::AtStart)
        );
        assert_eq!(
            map.split(9, SplitAt::Sha1(sha(0x10)), vec![1]),
            Err(GroupsError::NoSuchGroup(9))
        );
        assert_eq!(
            map.split(ROOT, SplitAt::Sha1(sha(0x10)), vec![1, 1]),
            Err(GroupsError::DuplicateReplica { group: 4, node: 1 })
        );
        // A FileDB group owns no index interval to cut.
        assert_eq!(
            map.split(f1, SplitAt::Key(IndexStart::new("a", "b")), vec![1]),
            Err(GroupsError::NotOwner { group: f1 })
        );
    }

    #[test]
    fn random_maps_agree_with_a_linear_scan_and_round_trip() {
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..50 {
            let mut map = ShardMap::single(vec![1, 2, 3]).unwrap();
            for _ in 0..rng.random_range(0..12) {
                let at = if rng.random_bool(0.5) {
                    let mut s = [0u8; 20];
                    rng.fill(&mut s[..]);
                    SplitAt::Sha1(s)
                } else {
                    let b = format!("b{}", rng.random_range(0..3));
                    let k = format!("k{:03}", rng.random_range(0..1000));
                    SplitAt::Key(IndexStart::new(&b, &k))
                };
                let owner = match &at {
                    SplitAt::Sha1(s) => map.filedb_group(s),
                    SplitAt::Key(k) => map.index_group(&k.bucket, &k.key),
                };
                if let Ok((next, _)) = map.split(owner, at, vec![1, 2, 3]) {
                    map = next;
                }
            }
            map.check().unwrap();
            for _ in 0..200 {
                let mut s = [0u8; 20];
                rng.fill(&mut s[..]);
                let scan = map
                    .filedb_intervals()
                    .find(|(start, end, _)| *start <= s && end.is_none_or(|e| s < e))
                    .map(|(_, _, g)| g);
                assert_eq!(scan, Some(map.filedb_group(&s)));
                let b = format!("b{}", rng.random_range(0..4));
                let k = format!("k{:03}", rng.random_range(0..1000));
                let scan = map
                    .index_intervals()
                    .find(|(start, end, _)| {
                        start.as_pair() <= (&b, &k)
                            && end.is_none_or(|e| (b.as_str(), k.as_str()) < e.as_pair())
                    })
                    .map(|(_, _, g)| g);
                assert_eq!(scan, Some(map.index_group(&b, &k)));
            }
            let bytes = map.encode().unwrap();
            assert_eq!(ShardMap::decode(&bytes).unwrap(), map);
        }
    }

    #[test]
    fn a_decoded_map_is_checked() {
        let map = ShardMap::single(vec![1]).unwrap();
        let mut bad = map.clone();
        bad.filedb.push((sha(1), 7));
        let bytes = bad.encode().unwrap();
        assert!(matches!(
            ShardMap::decode(&bytes),
            Err(GroupsError::Malformed(_))
        ));
        assert!(matches!(
            ShardMap::decode(&[9, 1, 2]),
            Err(GroupsError::Encoding(_))
        ));
        assert!(matches!(
            ShardMap::decode(&[]),
            Err(GroupsError::Encoding(_))
        ));
    }

    #[test]
    fn midpoints_halve_intervals() {
        assert_eq!(sha1_midpoint(&SHA1_MIN, None), sha(0x80));
        assert_eq!(sha1_midpoint(&sha(0x80), None), sha(0xc0));
        assert_eq!(sha1_midpoint(&SHA1_MIN, Some(&sha(0x80))), sha(0x40));
        let mut low = [0u8; 20];
        low[19] = 1;
        let mut three = [0u8; 20];
        three[19] = 3;
        let mut two = [0u8; 20];
        two[19] = 2;
        assert_eq!(sha1_midpoint(&low, Some(&three)), two);
        // Carries across bytes: [0x00ff..] + [0x0101..] = [0x0200..] + ...
        let a = [0xffu8; 20];
        assert_eq!(sha1_midpoint(&a, None)[0], 0xff);
    }

    fn counts(
        assign: &BTreeMap<GroupId, Vec<NodeId>>,
        nodes: &[NodeId],
    ) -> (Vec<usize>, Vec<usize>) {
        let replicas = nodes
            .iter()
            .map(|n| assign.values().filter(|r| r.contains(n)).count())
            .collect();
        let leaders = nodes
            .iter()
            .map(|n| assign.values().filter(|r| r.first() == Some(n)).count())
            .collect();
        (replicas, leaders)
    }

    fn spread(v: &[usize]) -> usize {
        v.iter().max().unwrap_or(&0) - v.iter().min().unwrap_or(&0)
    }

    #[test]
    fn placement_spreads_replicas_and_leaders_evenly() {
        for n in 1..=8u64 {
            for rf in 1..=5usize {
                for g in 1..=40u32 {
                    let nodes: Vec<NodeId> = (1..=n).collect();
                    let groups: Vec<GroupId> = (0..g).collect();
                    let assign = place(&nodes, &groups, rf).unwrap();
                    for r in assign.values() {
                        assert_eq!(r.len(), rf.min(n as usize));
                        let mut d = r.clone();
                        d.sort();
                        d.dedup();
                        assert_eq!(d.len(), r.len(), "two replicas on one node");
                    }
                    let (replicas, leaders) = counts(&assign, &nodes);
                    assert!(spread(&replicas) <= 1, "n {n} rf {rf} g {g}: {replicas:?}");
                    assert!(spread(&leaders) <= 1, "n {n} rf {rf} g {g}: {leaders:?}");
                }
            }
        }
        assert_eq!(place(&[], &[0], 3), Err(GroupsError::NoNodes));
    }

    #[test]
    fn rebalancing_after_nodes_come_and_go_ends_even() {
        let mut rng = StdRng::seed_from_u64(11);
        for _ in 0..300 {
            let n = rng.random_range(3..=7u64);
            let rf = rng.random_range(1..=3usize);
            let g = rng.random_range(1..=30u32);
            let nodes: Vec<NodeId> = (1..=n).collect();
            let groups: Vec<GroupId> = (0..g).collect();
            let before = place(&nodes, &groups, rf).unwrap();
            // Add one to three nodes, and maybe remove one of the old ones.
            let mut after: Vec<NodeId> = nodes.clone();
            for k in 0..rng.random_range(1..=3u64) {
                after.push(100 + k);
            }
            if rng.random_bool(0.5) {
                after.remove(rng.random_range(0..nodes.len()));
            }
            let moves = rebalance(&before, &after).unwrap();
            let mut assign = before.clone();
            for m in &moves {
                let r = assign.get_mut(&m.group).unwrap();
                assert!(r.contains(&m.from) && !r.contains(&m.to), "{m:?}");
                replace(&mut assign, m.group, m.from, m.to);
            }
            let (replicas, _) = counts(&assign, &after);
            assert!(spread(&replicas) <= 1, "{replicas:?} after {moves:?}");
            for (group, r) in &assign {
                assert_eq!(r.len(), before[group].len());
                assert!(
                    r.iter().all(|n| after.contains(n)),
                    "a replica left on a gone node"
                );
            }
            // No more moves than replicas that had to leave a node: those on removed
            // nodes, and each node's excess over the even share.
            let total: usize = assign.values().map(Vec::len).sum();
            let share = total / after.len();
            let (old_counts, _) = counts(&before, &after);
            let gone = before
                .values()
                .flatten()
                .filter(|n| !after.contains(n))
                .count();
            let excess: usize = old_counts.iter().map(|c| c.saturating_sub(share)).sum();
            assert!(moves.len() <= gone + excess, "{} moves", moves.len());
        }
    }
}
