//! Three nodes in one process, each a [`Replicas`] on its own data folder, holding the root
//! group and two more; their calls go through [`Replicas::serve`], the function the
//! gateway's `/_cluster/` route calls, by the paths [`Call::path`] gives (the HTTP between
//! them is the only thing left out; the e2e cluster tests run it).
//!
//! Snapshots every 4 entries, so each group crosses many snapshots and log purges, and a
//! node restarted behind a purge can only catch up by a snapshot install.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use placement::{DiskRef, PairId, PairRecord};

use super::*;
use crate::Command;
use crate::raft::MembershipOp;
use crate::raft::network::{RpcError, TransportFuture};

const NODES: [NodeId; 3] = [1, 2, 3];
const GROUPS: [GroupId; 2] = [1, 2];
const SNAPSHOT_LOGS: u64 = 4;
const WAIT: Duration = Duration::from_secs(30);

/// Carries a call to the node registered at the address, as the gateway's route would.
#[derive(Default)]
struct Loopback {
    nodes: Mutex<HashMap<String, Weak<Replicas>>>,
}

impl Loopback {
    fn register(&self, addr: &str, node: &Arc<Replicas>) {
        self.nodes
            .lock()
            .unwrap()
            .insert(addr.to_string(), Arc::downgrade(node));
    }

    fn unregister(&self, addr: &str) {
        self.nodes.lock().unwrap().remove(addr);
    }
}

impl Transport for Loopback {
    fn post<'a>(&'a self, addr: &'a str, path: &'a str, payload: Vec<u8>) -> TransportFuture<'a> {
        Box::pin(async move {
            let node = self.nodes.lock().unwrap().get(addr).and_then(Weak::upgrade);
            let Some(node) = node else {
                return Err(RpcError::Unreachable(addr.into(), "down".into()));
            };
            let Some((group, call)) = Call::parse(path) else {
                return Err(RpcError::Status(addr.into(), 404, path.into()));
            };
            node.serve(group, call, &payload).await.map_err(|e| {
                let status = match e {
                    ServeError::NoReplica(_) => 404,
                    ServeError::BadBody(_) => 400,
                    ServeError::NoVote => 503,
                    ServeError::Encode(_) => 500,
                };
                RpcError::Status(addr.into(), status, e.to_string())
            })
        })
    }
}

fn addr(id: NodeId) -> String {
    format!("node-{id}")
}

fn voters() -> BTreeMap<NodeId, String> {
    NODES.iter().map(|&id| (id, addr(id))).collect()
}

fn config(id: NodeId) -> ClusterConfig {
    ClusterConfig {
        node_id: id,
        peers: voters(),
        secret: String::new(),
        snapshot_logs: SNAPSHOT_LOGS,
        election_timeout_ms: crate::raft::ELECTION_TIMEOUT_MS_DEFAULT,
        reconcile_grace_ms: 0,
        ref_deadline_ms: crate::raft::REF_DEADLINE_MS_DEFAULT,
        crash_point: None,
        replication_factor: 2,
        split_page_rows: crate::handoff::ROWS_MAX,
        group_split_files: crate::raft::GROUP_SPLIT_FILES_DEFAULT,
        group_split_objects: crate::raft::GROUP_SPLIT_OBJECTS_DEFAULT,
        group_split_ops: 0,
        split_rate_window_ms: 1_000,
        // The tests set the maps they check; `a_node_added_receives_its_share` turns it on.
        rebalance: false,
    }
}

/// Starts a node that forms root with the others ([`voters`]).
async fn start(dir: &Path, id: NodeId, net: &Arc<Loopback>) -> Arc<Replicas> {
    start_with(dir, config(id), voters(), net).await
}

/// Starts node `config.node_id` on its folder with `peers` as root's voters (none: it
/// waits to be added).
async fn start_with(
    dir: &Path,
    config: ClusterConfig,
    peers: BTreeMap<NodeId, String>,
    net: &Arc<Loopback>,
) -> Arc<Replicas> {
    let id = config.node_id;
    let config = ClusterConfig { peers, ..config };
    let node = Replicas::open(&dir.join(id.to_string()), config, net.clone())
        .await
        .unwrap();
    net.register(&addr(id), &node);
    crate::raft::reconciler::start(&node);
    node
}

fn pair(dir: &Path, id: u64) -> Command {
    Command::PutPair {
        id: PairId(u32::try_from(id).unwrap()),
        record: PairRecord::new([
            DiskRef::local(dir.join(format!("a{id}"))),
            DiskRef::local(dir.join(format!("b{id}"))),
        ]),
    }
}

/// The pair ids `group`'s replica on `node` holds.
async fn pairs_of(node: &Replicas, group: GroupId) -> Vec<u64> {
    let meta = node.get(group).unwrap();
    let pairs = meta.read_local(|s| s.pairs()).await.unwrap();
    pairs.into_iter().map(|(id, _)| u64::from(id.0)).collect()
}

/// Waits until every live node's replica of `group` has applied what its leader has, and
/// answers the leader's applied index.
async fn settle(nodes: &[&Arc<Replicas>], group: GroupId) -> u64 {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let applied: Vec<Option<u64>> = nodes
            .iter()
            .map(|n| n.get(group).unwrap().status().last_applied)
            .collect();
        let leader = nodes[0].get(group).unwrap().status().leader;
        if let (Some(first), Some(_)) = (applied[0], leader)
            && applied.iter().all(|a| *a == Some(first))
        {
            return first;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "group {group} did not settle: {applied:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn assert_same_digest(nodes: &[&Arc<Replicas>], group: GroupId) {
    // A group's leader may commit more (its reconciler's rounds) between two replicas'
    // digests: they are read again until they were taken at one index.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        settle(nodes, group).await;
        let mut digests = Vec::new();
        for n in nodes {
            let meta = n.get(group).unwrap();
            digests.push(meta.read_local(|s| s.digest()).await.unwrap());
        }
        if digests
            .iter()
            .all(|d| d.last_applied == digests[0].last_applied)
            || tokio::time::Instant::now() >= deadline
        {
            for d in &digests[1..] {
                assert_eq!(d.last_applied, digests[0].last_applied, "group {group}");
                assert_eq!(d.tables, digests[0].tables, "group {group}");
            }
            return;
        }
    }
}

/// Retries `cmd` on `meta` while it is refused as unavailable (an election, the format
/// not raised yet), within [`WAIT`].
async fn execute(meta: &Metadata, cmd: Command) -> Result<crate::Response, crate::MetaError> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match meta.execute(cmd.clone()).await {
            Err(crate::MetaError::Unavailable(why)) => {
                assert!(tokio::time::Instant::now() < deadline, "{why}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

/// `call` again while it is refused as unavailable (an election, a format raise), within
/// [`WAIT`]; its answer, which must be a success.
async fn retried<T, Fut: std::future::Future<Output = Result<T, crate::MetaError>>>(
    mut call: impl FnMut() -> Fut,
) -> T {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match call().await {
            Err(crate::MetaError::Unavailable(why)) => {
                assert!(tokio::time::Instant::now() < deadline, "{why}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other.unwrap(),
        }
    }
}

/// [`retried`] for a command that must not be applied twice: refused as unavailable (its
/// outcome may be unknown: a leader replaced while it held it), it is sent again only if
/// `applied` says it was not. None when it was, and its answer is lost.
async fn retried_unless<T, Fut, Done>(
    mut call: impl FnMut() -> Fut,
    mut applied: impl FnMut() -> Done,
) -> Option<T>
where
    Fut: std::future::Future<Output = Result<T, crate::MetaError>>,
    Done: std::future::Future<Output = Result<bool, crate::MetaError>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match call().await {
            Err(crate::MetaError::Unavailable(why)) => {
                assert!(tokio::time::Instant::now() < deadline, "{why}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                if retried(&mut applied).await {
                    return None;
                }
            }
            other => return Some(other.unwrap()),
        }
    }
}

/// Writes `count` pairs from `first` to `group`, one entry each, through `via` (a follower
/// forwards to the leader). A write refused as unavailable (the leader just stopped, an
/// election under way) is sent again, as a client would: a pair's write is idempotent.
async fn write(via: &Replicas, group: GroupId, dir: &Path, first: u64, count: u64) {
    let meta = via.get(group).unwrap();
    for id in first..first + count {
        if let Err(e) = execute(&meta, pair(dir, id)).await {
            panic!("pair {id} in group {group}: {e}");
        }
    }
}

/// Starts the three voters of root ([`NODES`]) on folders under a new temp folder.
async fn three_nodes() -> (tempfile::TempDir, Arc<Loopback>, Vec<Arc<Replicas>>) {
    three_nodes_with(config).await
}

/// [`three_nodes`], each node with `config(id)`.
async fn three_nodes_with(
    config: impl Fn(NodeId) -> ClusterConfig,
) -> (tempfile::TempDir, Arc<Loopback>, Vec<Arc<Replicas>>) {
    let dir = tempfile::tempdir().unwrap();
    let net = Arc::new(Loopback::default());
    let mut nodes = Vec::new();
    for id in NODES {
        nodes.push(start_with(dir.path(), config(id), voters(), &net).await);
    }
    (dir, net, nodes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn groups_elect_replicate_compact_and_survive_a_restart_behind_a_purge() {
    let (dir, net, mut nodes) = three_nodes().await;
    for node in &nodes {
        for group in GROUPS {
            node.open_group(group, voters(), true).await.unwrap();
        }
    }
    for node in &nodes {
        assert_eq!(node.ids(), vec![ROOT, 1, 2]);
        for group in [ROOT, 1, 2] {
            node.get(group).unwrap().wait_leader(WAIT).await.unwrap();
        }
    }
    // Root keeps the data folder's own files; each group has its folder.
    let home = dir.path().join("1");
    assert!(home.join("meta.redb").is_file() && home.join("raft.redb").is_file());
    for group in GROUPS {
        let g = home.join("groups").join(group.to_string());
        assert!(g.join("meta.redb").is_file() && g.join("raft.redb").is_file());
    }

    // Each group takes its own writes, through every node (followers forward).
    for (i, node) in nodes.iter().enumerate() {
        let i = i as u64;
        write(node, 1, dir.path(), 100 + 20 * i, 20).await;
        write(node, 2, dir.path(), 200 + 20 * i, 20).await;
    }
    for node in &nodes {
        assert_eq!(pairs_of(node, ROOT).await, Vec::<u64>::new());
    }
    let all: Vec<&Arc<Replicas>> = nodes.iter().collect();
    for group in GROUPS {
        assert_same_digest(&all, group).await;
        for node in &nodes {
            let ids = pairs_of(node, group).await;
            let base = 100 * u64::from(group);
            assert_eq!(ids, (base..base + 60).collect::<Vec<_>>(), "group {group}");
            let status = node.get(group).unwrap().status();
            // 60 entries, a snapshot every 4: many purges on every replica.
            assert!(
                status.purged.is_some_and(|p| p >= 40),
                "group {group} on node {}: {status:?}",
                node.root().node_id()
            );
        }
    }

    // A call to a group this node does not hold is refused, not served by another group.
    let refused = nodes[0].serve(9, Call::State, &[]).await;
    assert!(
        matches!(refused, Err(ServeError::NoReplica(9))),
        "{refused:?}"
    );

    // Stop the leader of group 1, write on (the survivors elect, snapshot and purge past
    // everything the stopped node has), then restart it on its folder.
    let leader = nodes[0].get(1).unwrap().wait_leader(WAIT).await.unwrap();
    let down = nodes
        .iter()
        .position(|n| n.root().node_id() == leader)
        .unwrap();
    let stopped = nodes.remove(down);
    let stopped_at = stopped.get(1).unwrap().status().last_applied.unwrap();
    net.unregister(&addr(leader));
    stopped.shutdown().await;
    drop(stopped);
    for group in GROUPS {
        write(
            &nodes[0],
            group,
            dir.path(),
            100 * u64::from(group) + 60,
            30,
        )
        .await;
    }
    let survivors: Vec<&Arc<Replicas>> = nodes.iter().collect();
    for group in GROUPS {
        settle(&survivors, group).await;
        // Purges follow snapshots in the background: wait (bounded) until every survivor's
        // log starts past what the stopped node has.
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let purged: Vec<Option<u64>> = survivors
                .iter()
                .map(|n| n.get(group).unwrap().status().purged)
                .collect();
            if purged.iter().all(|p| p.is_some_and(|p| p > stopped_at)) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "group {group}: purged {purged:?}, the stopped node had {stopped_at}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let restarted = start(dir.path(), leader, &net).await;
    assert_eq!(restarted.ids(), vec![ROOT, 1, 2], "groups found again");
    nodes.push(restarted);
    let all: Vec<&Arc<Replicas>> = nodes.iter().collect();
    for group in GROUPS {
        assert_same_digest(&all, group).await;
        let base = 100 * u64::from(group);
        for node in &nodes {
            assert_eq!(
                pairs_of(node, group).await,
                (base..base + 90).collect::<Vec<_>>()
            );
        }
    }
    for node in &nodes {
        node.shutdown().await;
    }
}

/// The nodes among `nodes` whose ids are in `ids`, in `nodes`' order.
/// Starts node 4 with `config` (no voter of root) and adds it to root as a learner, so
/// that it learns the map.
async fn add_fourth(
    dir: &Path,
    net: &Arc<Loopback>,
    root: &Metadata,
    config: ClusterConfig,
) -> Arc<Replicas> {
    let fourth = start_with(dir, config, BTreeMap::new(), net).await;
    let add = MembershipOp::AddLearner {
        id: 4,
        addr: addr(4),
    };
    retried(|| root.change_membership(add.clone())).await;
    fourth
}

fn members<'a>(nodes: &'a [Arc<Replicas>], ids: &[NodeId]) -> Vec<&'a Arc<Replicas>> {
    nodes
        .iter()
        .filter(|n| ids.contains(&n.root().node_id()))
        .collect()
}

/// Waits until `node` holds exactly `want` (root included), as the map's follower opens
/// them.
async fn wait_holds(node: &Replicas, want: &[GroupId]) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while node.ids() != want {
        assert!(
            tokio::time::Instant::now() < deadline,
            "node {} holds {:?}, not {want:?}",
            node.root().node_id(),
            node.ids()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_open_the_replicas_the_shard_map_places_on_them() {
    use crate::groups::{GroupKind, IndexStart, ShardMap, SplitAt};

    let (dir, net, mut nodes) = three_nodes().await;
    // Node 4 is no voter of root: it joins as a learner, and so learns the map.
    let root = nodes[0].root().clone();
    root.wait_leader(WAIT).await.unwrap();
    nodes.push(add_fourth(dir.path(), &net, &root, config(4)).await);

    // Node 4 opened group 3 (its only replica) before the map placed it there, and was
    // stopped before it initialized it: a blank replica, which the follower must start.
    let blank = nodes[3]
        .open_group(3, BTreeMap::from([(4, addr(4))]), false)
        .await
        .unwrap();
    assert!(blank.is_blank());
    drop(blank);

    let single = nodes[0].shard_map().await.unwrap();
    assert_eq!(*single, ShardMap::single(vec![1, 2, 3]).unwrap());
    let (one, g1) = single
        .split(ROOT, SplitAt::Sha1([0x80; 20]), vec![4, 1, 2])
        .unwrap();
    let (two, g2) = one
        .split(
            ROOT,
            SplitAt::Key(IndexStart::new("mail", "m")),
            vec![2, 3, 4],
        )
        .unwrap();
    let (three, g3) = two.split(1, SplitAt::Sha1([0xc0; 20]), vec![4]).unwrap();
    assert_eq!((g1, g2, g3), (1, 2, 3));
    // Through a follower: forwarded to root's leader, applied everywhere.
    let via = &nodes[2].root().clone();
    assert_eq!(
        execute(via, Command::SetShardMap { map: one.clone() }).await,
        Ok(crate::Response::MapVersion(2))
    );
    // A change planned from the map before is refused, by the leader, through the log.
    assert_eq!(
        execute(via, Command::SetShardMap { map: one.clone() }).await,
        Err(crate::MetaError::ShardMapVersion { have: 2, given: 2 })
    );
    assert_eq!(
        execute(via, Command::SetShardMap { map: two.clone() }).await,
        Ok(crate::Response::MapVersion(3))
    );
    assert_eq!(
        execute(via, Command::SetShardMap { map: three.clone() }).await,
        Ok(crate::Response::MapVersion(4))
    );

    wait_holds(&nodes[0], &[ROOT, 1]).await;
    wait_holds(&nodes[1], &[ROOT, 1, 2]).await;
    wait_holds(&nodes[2], &[ROOT, 2]).await;
    wait_holds(&nodes[3], &[ROOT, 1, 2, 3]).await;
    // Only node 4 could start group 3.
    nodes[3].get(3).unwrap().wait_leader(WAIT).await.unwrap();
    for (group, members) in [
        (1, members(&nodes, &[1, 2, 4])),
        (2, members(&nodes, &[2, 3, 4])),
    ] {
        members[0]
            .get(group)
            .unwrap()
            .wait_leader(WAIT)
            .await
            .unwrap();
        for (i, node) in members.iter().enumerate() {
            let first = 1000 * u64::from(group) + 10 * i as u64;
            write(node, group, dir.path(), first, 10).await;
        }
        assert_same_digest(&members, group).await;
        for node in &members {
            let held = pairs_of(node, group).await;
            assert_eq!(held.len(), 30, "group {group}");
            let mut voters = node
                .get(group)
                .unwrap()
                .replica_status()
                .await
                .unwrap()
                .voters;
            voters.sort_unstable();
            let mut placed = three.group(group).unwrap().replicas.clone();
            placed.sort_unstable();
            assert_eq!(voters, placed, "group {group}'s membership is the map's");
        }
    }
    assert!(pairs_of(&nodes[0], ROOT).await.is_empty());

    // What GET /_admin/groups shows, on node 3 (no replica of group 1).
    let status = nodes[2].groups().await.unwrap();
    assert_eq!(status.version, 4);
    let kinds: Vec<(GroupId, GroupKind, bool)> = status
        .groups
        .iter()
        .map(|g| (g.id, g.kind, g.held))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (ROOT, GroupKind::Root, true),
            (1, GroupKind::FileDb, false),
            (2, GroupKind::Index, true),
            (3, GroupKind::FileDb, false)
        ]
    );
    // Its leader as group 1's replicas say.
    let g1_leader = nodes[0].get(1).unwrap().wait_leader(WAIT).await.unwrap();
    let g1_status = &status.groups[1];
    assert_eq!((g1_status.leader, g1_status.records), (Some(g1_leader), 0));
    assert_eq!(g1_status.replicas, vec![4, 1, 2]);
    // Its 30 pairs and its Raft bookkeeping rows.
    assert!(status.groups[2].records >= 30, "{:?}", status.groups[2]);
    assert!(status.groups[2].leader.is_some());
    assert_eq!(status.groups[0].replicas, vec![1, 2, 3]);

    // Node 4, first replica of group 1, restarts: it opens both groups from its folders
    // and catches up with what was written meanwhile.
    let four = nodes.pop().unwrap();
    net.unregister(&addr(4));
    four.shutdown().await;
    drop(four);
    for group in [1, 2] {
        let via = members(&nodes, &[2])[0];
        write(via, group, dir.path(), 1000 * u64::from(group) + 500, 10).await;
    }
    let four = start_with(dir.path(), config(4), BTreeMap::new(), &net).await;
    assert_eq!(four.ids(), vec![ROOT, 1, 2, 3]);
    nodes.push(four);
    for (group, members) in [
        (1, members(&nodes, &[1, 2, 4])),
        (2, members(&nodes, &[2, 3, 4])),
    ] {
        assert_same_digest(&members, group).await;
        assert_eq!(pairs_of(members[2], group).await.len(), 40);
    }
    for node in &nodes {
        node.shutdown().await;
    }
}

/// Milliseconds since the epoch, as a gateway stamps a reference's deadline.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// [`Replicas::send`], again while refused as unavailable (an election, the format not
/// raised yet), within [`WAIT`].
async fn send(
    via: &Replicas,
    group: GroupId,
    cmd: Command,
) -> Result<crate::Response, crate::MetaError> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match via.send(group, cmd.clone()).await {
            Err(crate::MetaError::Unavailable(why)) => {
                assert!(tokio::time::Instant::now() < deadline, "{why}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

/// Waits until `check` holds, within [`WAIT`].
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until every node follows map `version`.
async fn wait_map_version(nodes: &[Arc<Replicas>], version: u64) {
    for node in nodes {
        eventually("every node follows the committed map", || {
            let node = node.clone();
            async move {
                node.refresh_map()
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|m| m.version == version)
            }
        })
        .await;
    }
}

/// Waits until each node's replica of its group has the ownership row of map `version`.
async fn wait_owned(replicas: &[(&Arc<Replicas>, GroupId)], version: u64) {
    for &(node, group) in replicas {
        eventually("the ownership rows follow the map", || {
            let node = node.clone();
            async move {
                let Some(meta) = node.get(group) else {
                    return false;
                };
                let own = meta.read_local(|s| s.ownership()).await.unwrap();
                own.is_some_and(|o| o.map_version == version)
            }
        })
        .await;
    }
}

/// Gives the sha1s from 0x80 up to a new FileDB group on nodes 2 and 3 (root keeps the
/// rest and the keys), once both groups follow the map; the map and the group.
/// Makes node `id` (of `nodes`, in id order) lead root: it calls elections until it wins.
async fn lead_root(nodes: &[Arc<Replicas>], id: NodeId) {
    let root = nodes[id as usize - 1].root().clone();
    eventually("the chosen node leads root", || {
        let root = root.clone();
        async move {
            if root.wait_leader(WAIT).await.ok() == Some(id) {
                return true;
            }
            let _ = root.raft().trigger().elect().await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            root.wait_leader(WAIT).await.ok() == Some(id)
        }
    })
    .await;
}

/// Three nodes with bucket `b` in root, once root has a leader.
async fn three_nodes_with_bucket_b() -> (tempfile::TempDir, Arc<Loopback>, Vec<Arc<Replicas>>) {
    let (dir, net, nodes) = three_nodes().await;
    let root = nodes[0].root().clone();
    root.wait_leader(WAIT).await.unwrap();
    execute(
        &root,
        Command::CreateBucket {
            bucket: "b".into(),
            created_ms: 1,
        },
    )
    .await
    .unwrap();
    (dir, net, nodes)
}

/// Three nodes with bucket `b` in root and root's sha1s from 0x80 on split off to a FileDB
/// group on nodes 2 and 3.
async fn bucket_b_split_at_0x80() -> (
    tempfile::TempDir,
    Arc<Loopback>,
    Vec<Arc<Replicas>>,
    crate::groups::ShardMap,
    GroupId,
) {
    let (dir, net, nodes) = three_nodes_with_bucket_b().await;
    let (map, filedb) = split_filedb_at_0x80(&nodes).await;
    (dir, net, nodes, map, filedb)
}

async fn split_filedb_at_0x80(nodes: &[Arc<Replicas>]) -> (crate::groups::ShardMap, GroupId) {
    use crate::groups::{ShardMap, SplitAt};
    let (map, filedb) = ShardMap::single(vec![1, 2, 3])
        .unwrap()
        .split(ROOT, SplitAt::Sha1([0x80; 20]), vec![2, 3])
        .unwrap();
    execute(nodes[0].root(), Command::SetShardMap { map: map.clone() })
        .await
        .unwrap();
    wait_owned(&[(&nodes[0], ROOT), (&nodes[1], filedb)], map.version).await;
    (map, filedb)
}

/// Cross-group references on real Rafts: root keeps the keys and the sha1s below 0x80, a
/// FileDB group on nodes 2 and 3 the rest (node 1 holds no replica of it, so its calls go
/// by [`Replicas::send`]). PUTs take their reference in the FileDB group and write their
/// entry in root; some "gateways" stop between the two. Each group's leader follows the
/// map into its ownership row, drains root's outbox and settles pending references, also
/// after root's leader is stopped and restarted behind a purge: in the end every content's
/// refs equal the entries naming it, a late entry of a settled reference is refused, and
/// the replicas of both groups are identical.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cross_group_references_settle_through_the_leaders_work() {
    use crate::groups::{ShardMap, SplitAt};
    use crate::outbox::FenceOutcome;
    use crate::{ContentSource, NewObject, Response};
    use placement::{Magic, Sha1};

    const CUT: [u8; 20] = [0x80; 20];
    const CONTENTS: [u8; 3] = [0x90, 0xa0, 0xb0];

    let (dir, net, mut nodes) = three_nodes().await;
    let root = nodes[0].root().clone();
    root.wait_leader(WAIT).await.unwrap();
    execute(
        &root,
        Command::CreateBucket {
            bucket: "b".into(),
            created_ms: 1,
        },
    )
    .await
    .unwrap();
    let (map, filedb) = ShardMap::single(vec![1, 2, 3])
        .unwrap()
        .split(ROOT, SplitAt::Sha1(CUT), vec![2, 3])
        .unwrap();
    execute(&root, Command::SetShardMap { map: map.clone() })
        .await
        .unwrap();
    // Both groups come to own what the map says, through their leaders' own logs.
    wait_owned(
        &[(&nodes[0], ROOT), (&nodes[1], filedb), (&nodes[2], filedb)],
        map.version,
    )
    .await;

    let magic = |n: u64| Magic::new(u32::try_from(n % 1_000_000 + 1).unwrap()).unwrap();
    let put = |key: &str, content: u8, m: Magic| Command::PutObject {
        bucket: "b".into(),
        key: key.into(),
        object: NewObject::new(Sha1([content; 20]), m, 1, 0, [content; 16]),
        source: ContentSource::Stored(PairId(0)),
        now_secs: now_ms() / 1000,
        precondition: None,
    };
    let ref_inc = |key: &str, content: u8, m: Magic, ref_id: u64| Command::RefInc {
        sha1: Sha1([content; 20]),
        magic: m,
        ref_id,
        pair: Some(PairId(0)),
        bucket: "b".into(),
        key: key.into(),
        deadline_ms: now_ms() + 1_500,
        now_ms: now_ms(),
    };
    let foreign = |key: &str, ref_id: u64, command: Command| Command::ForeignRef {
        bucket: "b".into(),
        key: key.into(),
        ref_id,
        command: Box::new(command),
    };
    // Node 1 leads root, so that its outbox is drained from a node that holds no replica of
    // the FileDB group, and it can stop while the FileDB group keeps its two replicas.
    lead_root(&nodes, 1).await;
    // 60 writes over 8 keys through every node: every fifth stops after its reference,
    // every seventh key is deleted after its write.
    let mut stalled = Vec::new();
    let write_round = |nodes: Vec<Arc<Replicas>>, from: u64, to: u64| async move {
        let mut stalled = Vec::new();
        for i in from..to {
            let via = &nodes[i as usize % nodes.len()];
            let key = format!("k{}", i % 8);
            let content = CONTENTS[i as usize % CONTENTS.len()];
            let ref_id = i + 1;
            send(via, filedb, ref_inc(&key, content, magic(i), ref_id))
                .await
                .unwrap();
            let write = foreign(&key, ref_id, put(&key, content, magic(i)));
            if i % 5 == 4 {
                stalled.push(write);
                continue;
            }
            send(via, ROOT, write).await.unwrap();
            if i % 7 == 6 {
                let delete = Command::DeleteObject {
                    bucket: "b".into(),
                    key,
                    now_secs: now_ms() / 1000,
                };
                send(via, ROOT, delete).await.unwrap();
            }
        }
        stalled
    };
    stalled.extend(write_round(nodes.clone(), 0, 30).await);

    // Root's leader, node 1 (made so above), stops; the writes go on through the others,
    // past its log.
    let leader = root.wait_leader(WAIT).await.unwrap();
    assert_eq!(leader, 1, "node 1 led root throughout the first round");
    let stopped = nodes.remove(0);
    net.unregister(&addr(leader));
    stopped.shutdown().await;
    drop((stopped, root));
    stalled.extend(write_round(nodes.clone(), 30, 60).await);
    let restarted = start_with(dir.path(), config(leader), BTreeMap::new(), &net).await;
    nodes.push(restarted);

    // The leaders' work ends with every reference counted once.
    let survivor = nodes[0].clone();
    let holder = members(&nodes, &[2, 3])[0].clone();
    eventually(
        "outbox drained, pending settled, refs equal entries",
        || {
            let survivor = survivor.clone();
            let holder = holder.clone();
            async move {
                let root = survivor.root();
                if root.linearize().await.is_err() {
                    return false;
                }
                let (outbox, objects) = root
                    .read_local(|s| Ok((s.outbox(10)?, s.objects_after("b", None, 100)?)))
                    .await
                    .unwrap();
                let group = holder.get(filedb).unwrap();
                if group.linearize().await.is_err() {
                    return false;
                }
                let pending = group
                    .read_local(|s| s.pending_refs(u64::MAX, 10))
                    .await
                    .unwrap();
                let mut exact = true;
                for content in CONTENTS {
                    let named = objects
                        .iter()
                        .filter(|(_, o)| o.sha1.0 == [content; 20])
                        .count();
                    let refs = group
                        .read_local(move |s| s.file(&Sha1([content; 20])))
                        .await
                        .unwrap()
                        .map_or(0, |f| f.refs as usize);
                    exact &= refs == named;
                }
                outbox.is_empty() && pending.is_empty() && exact
            }
        },
    )
    .await;
    // A stalled write arriving now: its reference was settled, its entry is refused.
    assert_eq!(stalled.len(), 12);
    assert_eq!(
        send(&nodes[0], ROOT, stalled[0].clone()).await,
        Err(crate::MetaError::Fenced)
    );
    // And the fence answers "fenced" to a second question, "present" for a held one.
    let Command::ForeignRef { key, ref_id, .. } = &stalled[0] else {
        unreachable!()
    };
    let ask = |key: &str, ref_id| Command::Fence {
        bucket: "b".into(),
        key: key.into(),
        ref_id,
        now_ms: now_ms(),
    };
    assert_eq!(
        send(&nodes[0], ROOT, ask(key, *ref_id)).await,
        Ok(Response::Fence(FenceOutcome::Fenced))
    );
    assert_eq!(
        send(&nodes[0], ROOT, ask("k0", 57)).await,
        Ok(Response::Fence(FenceOutcome::Present)),
        "k0's last write, ref 57 (i = 56)"
    );
    assert_same_digest(&nodes.iter().collect::<Vec<_>>(), ROOT).await;
    assert_same_digest(&members(&nodes, &[2, 3]), filedb).await;
    for node in &nodes {
        node.shutdown().await;
    }
}

/// Writes routed by the map (`route.rs`) from a node with no replica of the FileDB group
/// and from one with: a PUT of content the FileDB group owns takes its reference there
/// and writes its entry in root, content root owns stays one command; a write refused in
/// root (a precondition, a missing bucket) releases its reference at once, content that
/// had to exist and has gone answers `ContentGone` with nothing taken; copies, parts and
/// completions take their own references. Nothing is left pending, and every content's
/// refs equal the entries and parts naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_routed_by_the_map_take_their_reference_where_the_content_lives() {
    use crate::raft::route::referencing_write;
    use crate::{
        ContentSource, MetaError, NewObject, PartRecord, Response, UploadRecord, WritePrecondition,
    };
    use placement::{Magic, Sha1};

    let (_dir, net, nodes, map, filedb) = bucket_b_split_at_0x80().await;
    let root = nodes[0].root().clone();

    let m = |n: u32| Magic::new(n).unwrap();
    let put = |bucket: &str, key: &str, content: u8, magic: u32, source, precondition| {
        Command::PutObject {
            bucket: bucket.into(),
            key: key.into(),
            object: NewObject::new(Sha1([content; 20]), m(magic), 1, 0, [content; 16]),
            source,
            now_secs: now_ms() / 1000,
            precondition,
        }
    };
    let stored = ContentSource::Stored(PairId(0));
    // Retried while unavailable (the FileDB group's format raise, an election).
    let route = |via: Arc<Replicas>, bucket: &'static str, key: &'static str, cmd: Command| async move {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match referencing_write(&via, bucket, key, cmd.clone()).await {
                Err(MetaError::Unavailable(why)) => {
                    assert!(tokio::time::Instant::now() < deadline, "{why}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => return other,
            }
        }
    };
    let (n1, n2) = (nodes[0].clone(), nodes[1].clone());
    assert!(n1.get(filedb).is_none() && n2.get(filedb).is_some());

    // Foreign content, from node 1 (no replica of the FileDB group) and node 2; each read
    // back at once through the other, linearizable wherever its group lives.
    let r = route(n1.clone(), "b", "a", put("b", "a", 0x90, 5, stored, None)).await;
    assert!(matches!(r, Ok(Response::ObjectPut { .. })), "{r:?}");
    let read = n2.file(Sha1([0x90; 20])).await.unwrap().unwrap();
    assert_eq!((read.refs, read.magic), (1, 5));
    let r = route(n2.clone(), "b", "c", put("b", "c", 0x90, 6, stored, None)).await;
    assert!(matches!(r, Ok(Response::ObjectPut { .. })), "{r:?}");
    let read = n1.file(Sha1([0x90; 20])).await.unwrap().unwrap();
    assert_eq!((read.refs, read.magic), (2, 11));
    assert_eq!(n1.file(Sha1([0xff; 20])).await, Ok(None));
    // Content root owns: one command, in place.
    let r = route(
        n1.clone(),
        "b",
        "low",
        put("b", "low", 0x10, 7, stored, None),
    )
    .await;
    assert!(matches!(r, Ok(Response::ObjectPut { .. })), "{r:?}");
    assert_eq!(n2.file(Sha1([0x10; 20])).await.unwrap().unwrap().refs, 1);
    // A group asked about a sha1 it does not own answers Moved, over the call as here.
    let asked = crate::raft::network::Rpc::new(net.clone(), filedb)
        .call::<_, Result<ReadAnswer, MetaError>>(
            &addr(2),
            Call::Read,
            &ReadQuery::File(Sha1([0x10; 20])),
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(
        asked,
        Err(MetaError::Moved {
            map_version: map.version
        })
    );
    // Refused in root: the reference taken for it is released at once.
    let r = route(
        n1.clone(),
        "b",
        "a",
        put(
            "b",
            "a",
            0xa0,
            8,
            stored,
            Some(WritePrecondition::NoneMatchAny),
        ),
    )
    .await;
    assert_eq!(r, Err(MetaError::PreconditionFailed));
    let r = route(
        n2.clone(),
        "none",
        "k",
        put("none", "k", 0xa0, 9, stored, None),
    )
    .await;
    assert_eq!(r, Err(MetaError::NoSuchBucket));
    // Existing content that is not there: nothing taken.
    let r = route(
        n1.clone(),
        "b",
        "gone",
        put("b", "gone", 0xb0, 10, ContentSource::Existing, None),
    )
    .await;
    assert_eq!(r, Ok(Response::ContentGone));
    // A copy of "a" takes its own reference.
    let a = root.read(|s| s.object("b", "a")).await.unwrap().unwrap();
    let copy = Command::CopyObject {
        bucket: "b".into(),
        key: "copy".into(),
        object: NewObject::new(a.sha1, m(11), 1, 0, a.md5),
        from_bucket: "b".into(),
        from_key: "a".into(),
        from_seq: a.seq,
        now_secs: now_ms() / 1000,
    };
    let r = route(n1.clone(), "b", "copy", copy).await;
    assert!(matches!(r, Ok(Response::ObjectPut { .. })), "{r:?}");
    // A multipart upload: a foreign part, completed into foreign content.
    execute(
        &root,
        Command::CreateUpload {
            upload_id: "u".into(),
            upload: UploadRecord {
                bucket: "b".into(),
                key: "big".into(),
                content_type: None,
                user_meta: Vec::new(),
                headers: Vec::new(),
                created_ms: 1,
            },
        },
    )
    .await
    .unwrap();
    let part = Command::PutPart {
        upload_id: "u".into(),
        part_number: 1,
        part: PartRecord {
            sha1: Sha1([0xa0; 20]),
            magic: m(12),
            size_bytes: 1,
            md5: [0; 16],
            crc32: 0,
            created_ms: 1,
        },
        source: stored,
        now_secs: now_ms() / 1000,
    };
    assert_eq!(
        route(n1.clone(), "b", "big", part).await,
        Ok(Response::PartPut)
    );
    let complete = Command::CompleteUpload {
        upload_id: "u".into(),
        object: NewObject::new(Sha1([0xc0; 20]), m(13), 1, 0, [0; 16]),
        parts: vec![(1, Sha1([0xa0; 20]))],
        source: stored,
        now_secs: now_ms() / 1000,
    };
    let r = route(n2.clone(), "b", "big", complete).await;
    assert!(matches!(r, Ok(Response::ObjectPut { .. })), "{r:?}");

    // Every content's refs are its entries: 0x90 by a, c and the copy; 0xc0 by big; 0xa0
    // only by the completed upload's part, whose dec the outbox owes until it drains.
    let group = nodes[1].get(filedb).unwrap();
    eventually("the completed upload's part released", || {
        let group = group.clone();
        async move {
            let refs = |c: u8| {
                let group = group.clone();
                async move {
                    group
                        .read(move |s| s.file(&Sha1([c; 20])))
                        .await
                        .unwrap()
                        .map_or(0, |f| f.refs)
                }
            };
            refs(0x90).await == 3 && refs(0xc0).await == 1 && refs(0xa0).await == 0
        }
    })
    .await;
    assert_eq!(refs_in(&root, 0x10).await, 1);
    // None pending long before any deadline: the four entries' references confirmed by
    // the settler once their entries were written (the reconciler would only come after
    // the deadline), the part's settled by its dec, the refused ones released.
    eventually("the entries' references confirmed", || {
        let group = group.clone();
        async move {
            let pending = group.read(|s| s.pending_refs(u64::MAX, 10)).await.unwrap();
            pending.is_empty()
        }
    })
    .await;
    for node in &nodes {
        node.shutdown().await;
    }
}

/// The gateway's FileDB calls go where the map puts the content: `inc`, `dec`,
/// `insert_or_inc`, `relocate` and `RemoveDeleting` from a node with no replica of the
/// content's group land in that group and nowhere else; the fenced read and the routed
/// read answer from there; Valkyrie's `deleting` walk pages across both groups in sha1
/// order, every entry exactly once; a write that references content is refused without
/// its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn filedb_calls_and_reads_go_to_the_contents_group() {
    use crate::{ContentSource, DecOutcome, MetaError, NewObject};
    use placement::{Magic, Sha1};

    let (_dir, _net, nodes) = three_nodes().await;
    let root = nodes[0].root().clone();
    root.wait_leader(WAIT).await.unwrap();
    let (_, filedb) = split_filedb_at_0x80(&nodes).await;
    let (n1, n2) = (nodes[0].clone(), nodes[1].clone());
    assert!(n1.get(filedb).is_none());
    let group = n2.get(filedb).unwrap();
    let m = |n: u32| Magic::new(n).unwrap();
    let local = |meta: &Arc<Metadata>, content: u8| {
        let meta = meta.clone();
        async move {
            meta.read(move |s| s.file(&Sha1([content; 20])))
                .await
                .unwrap()
        }
    };

    // Contents on both sides of 0x80, each from the node without the other's replica.
    let (high, low) = ([0x90u8, 0xa0, 0xb0], [0x10u8, 0x20]);
    for c in high {
        let r = retried(|| n1.insert_or_inc(Sha1([c; 20]), m(3), PairId(0))).await;
        assert_eq!(r.refs, 1);
        assert!(local(&group, c).await.is_some() && local(&root, c).await.is_none());
    }
    for c in low {
        retried(|| n2.insert_or_inc(Sha1([c; 20]), m(3), PairId(0))).await;
        assert!(local(&root, c).await.is_some());
    }
    let r = retried(|| n1.inc(Sha1([0x90; 20]), m(4))).await;
    assert_eq!((r.refs, r.magic), (2, 7));
    assert!(retried(|| n1.relocate(Sha1([0x90; 20]), PairId(0), PairId(1))).await);
    assert_eq!(local(&group, 0x90).await.unwrap().pair, PairId(1));
    assert_eq!(
        n1.file(Sha1([0x90; 20])).await.unwrap().map(|f| f.refs),
        Some(2)
    );
    assert_eq!(
        n1.file_after_root_read(Sha1([0x90; 20]))
            .await
            .unwrap()
            .map(|f| f.refs),
        Some(2)
    );
    assert_eq!(
        n1.file_after_root_read(Sha1([0x10; 20]))
            .await
            .unwrap()
            .map(|f| f.refs),
        Some(1)
    );

    // Every content but 0x90 released: `deleting` rows in both groups, paged across.
    for c in [0xa0u8, 0xb0, 0x10, 0x20] {
        let out = retried(|| n1.dec(Sha1([c; 20]), m(3), 100)).await;
        assert_eq!(out, DecOutcome::Deleting);
    }
    assert_eq!(n1.file_fenced(Sha1([0xa0; 20])).await, Ok(None));
    assert_eq!(
        n1.file_fenced(Sha1([0x90; 20]))
            .await
            .unwrap()
            .map(|f| f.refs),
        Some(2)
    );
    let mut walked = Vec::new();
    let mut after = None;
    for _ in 0..10 {
        let page = n1.deleting_of_pair(PairId(0), after, 1).await.unwrap();
        let Some(last) = page.last() else { break };
        after = Some(last.0);
        walked.extend(page.into_iter().map(|(sha1, d)| (sha1.0[0], d.since_secs)));
    }
    assert_eq!(walked, [(0x10, 100), (0x20, 100), (0xa0, 100), (0xb0, 100)]);
    let all = n2.deleting_of_pair(PairId(0), None, 10).await.unwrap();
    assert_eq!(all.len(), 4);
    assert!(
        n1.deleting_of_pair(PairId(1), None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // RemoveDeleting goes to the content's group too.
    for c in [0xa0u8, 0x10] {
        let cmd = Command::RemoveDeleting {
            sha1: Sha1([c; 20]),
            pair: PairId(0),
        };
        retried(|| n1.execute(cmd.clone())).await;
    }
    let left: Vec<u8> = n1
        .deleting_of_pair(PairId(0), None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|(sha1, _)| sha1.0[0])
        .collect();
    assert_eq!(left, [0x20, 0xb0]);

    // A write that references content needs its key.
    let put = Command::PutObject {
        bucket: "b".into(),
        key: "k".into(),
        object: NewObject::new(Sha1([0x90; 20]), m(5), 1, 0, [0; 16]),
        source: ContentSource::Existing,
        now_secs: 1,
        precondition: None,
    };
    assert!(matches!(
        n1.execute(put).await,
        Err(MetaError::InvalidCommand(_))
    ));
    for node in &nodes {
        node.shutdown().await;
    }
}

/// The contents [`fill_all_over`] writes: 60 sha1s spread over the whole space.
fn spread_contents() -> Vec<u8> {
    (0..60u8).map(|i| i * 4 + 1).collect()
}

/// Through `node`, before any split: a record of each of [`spread_contents`], a third of
/// them released to `deleting`, a third with a pending reference. Answers the contents.
async fn fill_all_over(node: &Replicas) -> Vec<u8> {
    use crate::DecOutcome;
    use placement::{Magic, Sha1};
    let m = |n: u32| Magic::new(n).unwrap();
    let contents = spread_contents();
    for &c in &contents {
        let sha1 = Sha1([c; 20]);
        // Refused as unavailable, the insert may still have been applied (its outcome is
        // unknown): it is sent again only if the record is not there.
        retried_unless(
            || node.insert_or_inc(sha1, m(3), PairId(0)),
            || async move { node.file(sha1).await.map(|r| r.is_some()) },
        )
        .await;
    }
    for &c in contents.iter().filter(|c| *c % 3 == 0) {
        let sha1 = Sha1([c; 20]);
        let out = retried_unless(
            || node.dec(sha1, m(3), 100),
            || async move { node.file(sha1).await.map(|r| r.is_none()) },
        )
        .await;
        assert!(matches!(out, None | Some(DecOutcome::Deleting)), "{out:?}");
    }
    for (i, &c) in contents.iter().filter(|c| *c % 3 == 1).enumerate() {
        let inc = Command::RefInc {
            sha1: Sha1([c; 20]),
            magic: m(5),
            ref_id: i as u64 + 1,
            pair: None,
            bucket: "b".into(),
            key: format!("k{i}"),
            deadline_ms: now_ms() + 3_600_000,
            now_ms: now_ms(),
        };
        retried(|| node.execute(inc.clone())).await;
    }
    contents
}

/// Each content's record as `node` reads it now (linearizable, wherever it lives).
async fn records(node: &Replicas, contents: &[u8]) -> Vec<Option<crate::FileRecord>> {
    let mut out = Vec::new();
    for &c in contents {
        out.push(retried(|| node.file(placement::Sha1([c; 20]))).await);
    }
    out
}

/// The rows a split moves that `store` holds in `interval`.
fn rows_in(store: &crate::MetaStore, interval: ([u8; 20], Option<[u8; 20]>)) -> usize {
    crate::handoff::RowTable::ALL
        .iter()
        .map(|&table| store.file_rows(table, interval, None, 1024).unwrap().len())
        .sum()
}

/// A split's copy is cut in the middle by the stop of root's leader (pages of one row, so
/// that the stop lands mid-copy), which also holds a replica of the new group, so that
/// group loses its quorum until the node restarts behind root's purges: the next leader
/// starts the copy again, the restarted node catches up, and the split commits with
/// every record as before, the new group's replicas identical and holding exactly the
/// upper rows, and root's copy dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_split_goes_on_after_roots_leader_stops_in_the_middle_of_its_copy() {
    let slow = |id| ClusterConfig {
        split_page_rows: 1,
        ..config(id)
    };
    let (dir, net, mut nodes) = three_nodes_with(slow).await;
    // The new group goes on the two least loaded nodes, 1 and 2: one of them must lead
    // root for its stop to cut both the copy and the new group's quorum.
    let leader = 1;
    lead_root(&nodes, leader).await;
    let contents = fill_all_over(&nodes[0]).await;
    let before = records(&nodes[2], &contents).await;
    let rows_above = rows_in(nodes[0].root().store(), ([0x80; 20], None));
    let (plan, h) = retried(|| nodes[2].plan_split(ROOT, Some([0x80; 20]))).await;
    assert!(
        plan.group(h).unwrap().replicas.contains(&leader),
        "{plan:?}"
    );

    // Some rows copied, the map not committed: root's leader stops.
    let holder = nodes[leader as usize - 1].clone();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let copied = holder
            .get(h)
            .map_or(0, |g| rows_in(g.store(), ([0x80; 20], None)));
        if copied >= 3 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the copy never started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        holder.shard_map().await.unwrap().version < plan.version,
        "committed already"
    );
    net.unregister(&addr(leader));
    let stopped = nodes.remove(leader as usize - 1);
    stopped.shutdown().await;
    drop((stopped, holder));
    // The survivors go on writing to root (a new leader, snapshots and purges past the
    // stopped node's log) before it comes back.
    write(&nodes[0], ROOT, dir.path(), 1_000, 24).await;
    let restarted = start_with(dir.path(), slow(leader), BTreeMap::new(), &net).await;
    nodes.insert(leader as usize - 1, restarted);

    wait_map_version(&nodes, plan.version).await;
    for node in &nodes {
        eventually("root dropped the rows it handed off", || {
            let root = node.root().clone();
            async move { root.read_local(|s| s.handoff()).await.unwrap().is_none() }
        })
        .await;
    }
    for node in &nodes {
        assert_eq!(records(node, &contents).await, before);
    }
    let replicas: Vec<&Arc<Replicas>> = plan
        .group(h)
        .unwrap()
        .replicas
        .iter()
        .map(|&id| &nodes[id as usize - 1])
        .collect();
    assert_same_digest(&replicas, h).await;
    assert_same_digest(&members(&nodes, &NODES), ROOT).await;
    for node in &replicas {
        assert_eq!(
            rows_in(node.get(h).unwrap().store(), ([0x80; 20], None)),
            rows_above
        );
    }
    for node in &nodes {
        assert_eq!(rows_in(node.root().store(), ([0x80; 20], None)), 0);
    }
    for node in &nodes {
        node.shutdown().await;
    }
}

/// A FileDB group whose leader finds it past `--group-split-files` records splits by
/// itself, once: root with 40 records and a bound of 30 gives the upper half of the sha1s
/// to a new group, after which neither half is past the bound and the map stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_past_its_size_splits_by_itself() {
    let small = |id| ClusterConfig {
        group_split_files: 1_000,
        ..config(id)
    };
    let (dir, net, mut nodes) = three_nodes_with(small).await;
    nodes[0].root().wait_leader(WAIT).await.unwrap();
    let contents = fill_all_over(&nodes[0]).await;
    let before = records(&nodes[1], &contents).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(nodes[0].refresh_map().await.unwrap().unwrap().version, 1);
    // The same nodes with a bound of 30: root (40 records) splits at its middle.
    for (node, id) in nodes.drain(..).zip(NODES) {
        net.unregister(&addr(id));
        node.shutdown().await;
    }
    for id in NODES {
        let bound = ClusterConfig {
            group_split_files: 30,
            ..config(id)
        };
        nodes.push(start_with(dir.path(), bound, BTreeMap::new(), &net).await);
    }
    wait_map_version(&nodes, 2).await;
    let map = nodes[0].shard_map().await.unwrap();
    let bounds: Vec<_> = map.filedb_intervals().map(|(s, _, g)| (s[0], g)).collect();
    assert_eq!(bounds, [(0, ROOT), (0x80, 1)]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    for node in &nodes {
        assert_eq!(node.refresh_map().await.unwrap().unwrap().version, 2);
        assert_eq!(records(node, &contents).await, before);
    }
    for node in &nodes {
        node.shutdown().await;
    }
}

/// A group holding S3 keys whose leader finds it past `--group-split-objects` index
/// entries splits its keys by itself, once: root filled with bucket b's 40 objects under a
/// bound of 30 gives the keys from where its objects halved to a new index group, after
/// which neither half is past the bound and the map stays; every object reads back from
/// every node and root keeps none of the rows it handed off.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_past_its_index_size_splits_its_keys_by_itself() {
    use crate::groups::GroupKind;
    use crate::raft::route::referencing_write;
    use crate::{ContentSource, NewObject};
    use placement::{Magic, Sha1};

    let small = |id| ClusterConfig {
        group_split_objects: 30,
        ..config(id)
    };
    let (_dir, _net, nodes) = three_nodes_with(small).await;
    let root = nodes[0].root().clone();
    root.wait_leader(WAIT).await.unwrap();
    let create = Command::CreateBucket {
        bucket: "b".into(),
        created_ms: 1,
    };
    retried(|| nodes[0].execute(create.clone())).await;
    for n in 0..40u64 {
        let key = format!("k{n:02}");
        let put = Command::PutObject {
            bucket: "b".into(),
            key: key.clone(),
            object: NewObject::new(
                Sha1([n as u8 + 1; 20]),
                Magic::new(n as u32 + 1).unwrap(),
                n,
                0,
                [0; 16],
            ),
            source: ContentSource::Stored(PairId(0)),
            now_secs: 1,
            precondition: None,
        };
        let via = nodes[n as usize % 3].clone();
        retried(|| referencing_write(&via, "b", &key, put.clone())).await;
    }
    wait_map_version(&nodes, 2).await;
    let map = nodes[0].shard_map().await.unwrap();
    let intervals: Vec<_> = map
        .index_intervals()
        .map(|(s, _, g)| (s.clone(), g))
        .collect();
    assert_eq!(intervals.len(), 2, "{intervals:?}");
    let (at, new) = intervals[1].clone();
    assert_eq!(intervals[0].1, ROOT);
    assert_eq!(map.group(new).map(|g| g.kind), Some(GroupKind::Index));
    assert_eq!(at.bucket, "b");
    assert!(
        at.key.as_str() > "k00" && at.key.as_str() <= "k39",
        "{at:?}"
    );
    eventually("root dropped the index rows it handed off", || {
        let root = root.clone();
        async move { root.read_local(|s| s.handoff()).await.unwrap().is_none() }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for node in &nodes {
        assert_eq!(node.refresh_map().await.unwrap().unwrap().version, 2);
        for n in 0..40u64 {
            let key = format!("k{n:02}");
            let found = retried(|| node.object("b", &key)).await;
            assert_eq!(found.map(|o| o.size_bytes), Some(n), "b/{key}");
        }
    }
    let left = root.read_local(|s| s.index_entries()).await.unwrap();
    assert!((1..=30).contains(&left), "root keeps {left} entries");
    for node in &nodes {
        node.shutdown().await;
    }
}

/// A FileDB split on real Rafts while it serves: root holds records, `deleting` entries
/// and pending references all over the sha1 space; a split at 0x80 planned from one node
/// is driven by root's leader to its commit while another node keeps incrementing a
/// content of the moving interval. Every increment is acknowledged (they wait out the
/// copy), every record reads back the same from every node, the new group's replicas are
/// identical and hold exactly the upper rows, and root dropped its copy of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_filedb_group_splits_while_it_serves() {
    use crate::MetaError;
    use crate::handoff::RowTable;
    use placement::{Magic, Sha1};

    let (_dir, _net, nodes) = three_nodes().await;
    let root = nodes[0].root().clone();
    root.wait_leader(WAIT).await.unwrap();
    let m = |n: u32| Magic::new(n).unwrap();
    let (n1, n2, n3) = (nodes[0].clone(), nodes[1].clone(), nodes[2].clone());
    let contents = fill_all_over(&n1).await;
    let before = records(&n3, &contents).await;
    let rows_above = rows_in(root.store(), ([0x80; 20], None));

    // A content of the moving interval, incremented all along from node 2.
    let hot = Sha1([0xe9; 20]);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = tokio::spawn({
        let (n2, stop) = (n2.clone(), stop.clone());
        async move {
            let (mut done, mut slowest) = (0u32, Duration::ZERO);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && done < 2_000 {
                let t = tokio::time::Instant::now();
                n2.inc(hot, m(1)).await.unwrap();
                slowest = slowest.max(t.elapsed());
                done += 1;
            }
            (done, slowest)
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (plan, h) = retried(|| n1.plan_split(ROOT, Some([0x80; 20]))).await;
    // Another plan from the same map is refused, under way (another split) or committed
    // (not the next version any more).
    let other = crate::groups::ShardMap::single(vec![1, 2, 3])
        .unwrap()
        .split(ROOT, crate::groups::SplitAt::Sha1([0x40; 20]), vec![1, 2])
        .unwrap()
        .0;
    let again = execute(&root, Command::PlanMap { map: other }).await;
    assert!(
        matches!(
            again,
            Err(MetaError::InvalidCommand(_) | MetaError::ShardMapVersion { .. })
        ),
        "{again:?}"
    );
    wait_map_version(&nodes, plan.version).await;
    eventually("root dropped the rows it handed off", || {
        let root = root.clone();
        async move { root.read_local(|s| s.handoff()).await.unwrap().is_none() }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (done, slowest) = writer.await.unwrap();
    println!(
        "{done} increments during the split; the slowest took {slowest:?}; {rows_above} rows moved"
    );
    assert!(done > 0);

    // Every record reads the same from every node, the hot one with every increment.
    for (i, &c) in contents.iter().enumerate() {
        for node in &nodes {
            let mut want = before[i];
            if c == hot.0[0]
                && let Some(w) = want.as_mut()
            {
                w.refs += done;
                w.magic = w.magic.wrapping_add(done);
            }
            assert_eq!(node.file(Sha1([c; 20])).await.unwrap(), want, "{c:#x}");
            // What `GET /_admin/files/<sha1>` shows, from the content's group.
            let (file, deleting) = node.file_state(Sha1([c; 20])).await.unwrap();
            assert_eq!(file, want, "{c:#x}");
            assert_eq!(deleting.is_some(), c % 3 == 0, "{c:#x}");
        }
    }
    // The new group holds exactly the upper rows, on identical replicas; root none.
    let replicas: Vec<&Arc<Replicas>> = plan
        .group(h)
        .unwrap()
        .replicas
        .iter()
        .map(|&id| &nodes[id as usize - 1])
        .collect();
    assert_eq!(replicas.len(), 2);
    assert_same_digest(&replicas, h).await;
    assert_same_digest(&members(&nodes, &NODES), ROOT).await;
    let h_store = replicas[0].get(h).unwrap().store().clone();
    let mut held = 0;
    for table in RowTable::ALL {
        assert!(
            root.store()
                .file_rows(table, ([0x80; 20], None), None, 1024)
                .unwrap()
                .is_empty()
        );
        held += h_store
            .file_rows(table, ([0x80; 20], None), None, 1024)
            .unwrap()
            .len();
        assert!(
            h_store
                .file_rows(table, ([0; 20], Some([0x80; 20])), None, 1024)
                .unwrap()
                .is_empty()
        );
    }
    assert_eq!(held, rows_above);
    let pending = h_store.pending_refs(u64::MAX, 100).unwrap();
    assert_eq!(
        pending.len(),
        contents
            .iter()
            .filter(|c| **c % 3 == 1 && **c >= 0x80)
            .count()
    );
    let deleting = n1.deleting_of_pair(PairId(0), None, 100).await.unwrap();
    assert_eq!(
        deleting.len(),
        contents.iter().filter(|c| **c % 3 == 0).count()
    );
    for node in &nodes {
        node.shutdown().await;
    }
}

/// Moves of a FileDB group's replica on real Rafts while it serves: the group (on nodes
/// 2 and 3) moves from node 3 to node 1, which catches up behind the group's purges by a
/// snapshot install, and then from node 2 to node 3, which dropped its replica with the
/// first move and starts again from nothing; all the while node 2 increments a content of
/// the group. Every increment is acknowledged, every record reads the same from every
/// node, the replicas the map names are identical, a node the map no longer names holds
/// no replica and no folder of the group, and a restarted new replica rejoins.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_moves_between_nodes_while_it_serves() {
    use crate::MetaError;
    use placement::{Magic, Sha1};

    let (dir, net, mut nodes) = three_nodes().await;
    nodes[0].root().wait_leader(WAIT).await.unwrap();
    let (split, g) = split_filedb_at_0x80(&nodes).await;
    wait_map_version(&nodes, split.version).await;
    let contents = fill_all_over(&nodes[0]).await;
    let before = records(&nodes[2], &contents).await;
    let m = |n: u32| Magic::new(n).unwrap();

    let hot = Sha1([0xe9; 20]);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = tokio::spawn({
        let (n2, stop) = (nodes[1].clone(), stop.clone());
        async move {
            // Acknowledged, and refused as unavailable (a client tries again: such an
            // increment may or may not have been applied).
            let (mut done, mut unsure) = (0u32, 0u32);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && done < 5_000 {
                match n2.inc(hot, m(1)).await {
                    Ok(_) => done += 1,
                    Err(MetaError::Unavailable(why)) => {
                        println!("increment refused: {why}");
                        unsure += 1;
                        assert!(unsure < 20, "{why}");
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            (done, unsure)
        }
    });

    // Refused: root's replicas, a node without a replica, a node that holds one.
    for (group, from, to) in [(ROOT, 1, 2), (g, 1, 2), (g, 2, 3)] {
        let refused = nodes[1].plan_move(group, from, to).await;
        assert!(
            matches!(refused, Err(MetaError::InvalidCommand(_))),
            "{refused:?}"
        );
    }
    let first = retried(|| nodes[1].plan_move(g, 3, 1)).await;
    assert_eq!(first.group(g).unwrap().replicas, [2, 1]);
    wait_map_version(&nodes, first.version).await;
    wait_holds(&nodes[2], &[ROOT]).await;
    wait_holds(&nodes[0], &[ROOT, g]).await;
    let folder = dir.path().join("3").join(GROUPS_DIR);
    eventually("node 3 deletes the replica it dropped", || {
        let gone = std::fs::read_dir(&folder).unwrap().next().is_none();
        async move { gone }
    })
    .await;

    // The new replica restarts and rejoins from its own log.
    net.unregister(&addr(1));
    let one = nodes.remove(0);
    one.shutdown().await;
    drop(one);
    nodes.insert(
        0,
        start_with(dir.path(), config(1), BTreeMap::new(), &net).await,
    );
    wait_holds(&nodes[0], &[ROOT, g]).await;

    let second = retried(|| nodes[0].plan_move(g, 2, 3)).await;
    assert_eq!(second.group(g).unwrap().replicas, [3, 1]);
    wait_map_version(&nodes, second.version).await;
    wait_holds(&nodes[1], &[ROOT]).await;
    wait_holds(&nodes[2], &[ROOT, g]).await;

    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (done, unsure) = writer.await.unwrap();
    println!("{done} increments during two moves, {unsure} refused");
    assert!(done > 0);
    for (i, &c) in contents.iter().enumerate() {
        for node in &nodes {
            let mut want = before[i];
            let got = node.file(Sha1([c; 20])).await.unwrap();
            if c == hot.0[0]
                && let (Some(w), Some(got)) = (want.as_mut(), got)
            {
                // Every acknowledged increment, and perhaps some refused ones.
                let extra = got.refs.wrapping_sub(w.refs + done);
                assert!(extra <= unsure, "{got:?} after {done} + {unsure}");
                w.refs += done + extra;
                w.magic = w.magic.wrapping_add(done + extra);
            }
            assert_eq!(got, want, "{c:#x}");
        }
    }
    assert_same_digest(&members(&nodes, &[3, 1]), g).await;
    let voters = nodes[2]
        .get(g)
        .unwrap()
        .replica_status()
        .await
        .unwrap()
        .voters;
    assert_eq!(voters, [1, 3]);

    // With node 3 down, the group (on 3 and 1) has no majority: a move is refused, not
    // planned to stay under way for good; root (three voters) goes on.
    net.unregister(&addr(3));
    let three = nodes.remove(2);
    three.shutdown().await;
    let refused = nodes[1].plan_move(g, 3, 2).await;
    assert!(
        matches!(refused, Err(MetaError::Unavailable(_))),
        "{refused:?}"
    );
    let planned = nodes[1].root().read_local(|s| s.planned_map()).await;
    assert_eq!(planned.unwrap(), None);
    for node in &nodes {
        node.shutdown().await;
    }
}

/// The groups other than root each node holds, by node id, as `nodes` hold them now.
fn held(nodes: &[Arc<Replicas>]) -> BTreeMap<NodeId, Vec<GroupId>> {
    nodes
        .iter()
        .map(|n| {
            let ids = n.ids().into_iter().filter(|g| *g != ROOT).collect();
            (n.root().node_id(), ids)
        })
        .collect()
}

/// The rebalancer on real Rafts: two FileDB groups both placed on nodes 2 and 3 are
/// evened out over the three nodes (one replica moved to node 1); a fourth node added to
/// root as a learner then receives its share (one more move), while every record reads
/// back the same from every node. Node 4 then leaves: its replica moves off before root
/// removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_added_receives_its_share_of_the_replicas() {
    use crate::groups::SplitAt;

    let even = |id| ClusterConfig {
        rebalance: true,
        ..config(id)
    };
    let (dir, net, mut nodes) = three_nodes_with(even).await;
    let root = nodes[0].root().clone();
    root.wait_leader(WAIT).await.unwrap();
    let (one, g1) = split_filedb_at_0x80(&nodes).await;
    let (two, g2) = one
        .split(g1, SplitAt::Sha1([0xc0; 20]), vec![2, 3])
        .unwrap();
    execute(&root, Command::SetShardMap { map: two.clone() })
        .await
        .unwrap();
    let contents = fill_all_over(&nodes[0]).await;
    let before = records(&nodes[1], &contents).await;

    let spread = |want: usize| {
        move |nodes: &[Arc<Replicas>]| {
            let held = held(nodes);
            held.values().all(|g| g.len() == want) || {
                println!("held: {held:?}");
                false
            }
        }
    };
    wait_map_version(&nodes, two.version + 1).await;
    eventually("the two groups spread over three nodes", || {
        let counts: Vec<usize> = held(&nodes).values().map(Vec::len).collect();
        let ok = counts.iter().max() == Some(&2) && counts.iter().min() == Some(&1);
        async move { ok }
    })
    .await;
    let three = nodes[0].refresh_map().await.unwrap().unwrap();
    assert_eq!(
        three.version,
        two.version + 1,
        "one move evens three nodes out"
    );

    nodes.push(add_fourth(dir.path(), &net, &root, even(4)).await);
    wait_map_version(&nodes, three.version + 1).await;
    let one_each = spread(1);
    eventually("every node holds one replica", || {
        let ok = one_each(&nodes);
        async move { ok }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        nodes[0].refresh_map().await.unwrap().unwrap().version,
        three.version + 1,
        "one more move evens four nodes out"
    );
    for node in &nodes {
        assert_eq!(records(node, &contents).await, before);
    }
    for g in [g1, g2] {
        let replicas = nodes[0]
            .shard_map()
            .await
            .unwrap()
            .group(g)
            .unwrap()
            .replicas
            .clone();
        assert_same_digest(&members(&nodes, &replicas), g).await;
    }

    // Node 4 leaves: its replica moves to one of the three others first, then root
    // removes it; four replicas over three nodes stay within one of each other.
    let map = nodes[0].refresh_map().await.unwrap().unwrap();
    let left = nodes[0].leave(4).await.unwrap();
    let crate::raft::split::Leaving::Draining(groups) = left else {
        panic!("node 4 holds a replica: {left:?}");
    };
    assert_eq!(groups.len(), 1);
    let leaving = nodes[0].root().read(|s| s.leaving()).await.unwrap();
    assert_eq!(leaving, [4].into(), "listed as leaving");
    let refused = nodes[0].plan_move(groups[0], 4, 4).await;
    assert!(
        matches!(refused, Err(MetaError::InvalidCommand(_))),
        "{refused:?}"
    );
    eventually(
        "node 4 drained, its replica dropped, and removed from root",
        || {
            let root = nodes[0].root().clone();
            let held = held(&nodes);
            let placed = held[&4].is_empty()
                && held.values().map(Vec::len).sum::<usize>() == 4
                && held.values().take(3).all(|g| (1..=2).contains(&g.len()));
            async move {
                let status = root.status_with_leaving().await.unwrap();
                placed && !status.nodes.contains_key(&4) && status.leaving == Some(Vec::new())
            }
        },
    )
    .await;
    let after = nodes[0].refresh_map().await.unwrap().unwrap();
    assert_eq!(after.version, map.version + 1, "one move drains node 4");
    for node in &nodes[..3] {
        assert_eq!(records(node, &contents).await, before);
    }
    // A node that is no member is refused.
    assert_eq!(
        nodes[0].leave(4).await,
        Err(MetaError::InvalidCommand(
            "node 4 is not a member of the cluster".into()
        ))
    );
    for node in &nodes {
        node.shutdown().await;
    }
}

async fn refs_in(meta: &Metadata, content: u8) -> u32 {
    meta.read(move |s| s.file(&placement::Sha1([content; 20])))
        .await
        .unwrap()
        .map_or(0, |f| f.refs)
}

/// What travels over `/_cluster/g/<id>/read` decodes as it was sent, errors included.
#[test]
fn read_queries_and_answers_round_trip() {
    use placement::{PairId, Sha1};
    for query in [
        ReadQuery::File(Sha1([7; 20])),
        ReadQuery::FileFenced(Sha1([8; 20])),
        ReadQuery::Deleting {
            pair: PairId(3),
            after: Some(Sha1([1; 20])),
            until: None,
            limit: 17,
        },
        ReadQuery::Deleting {
            pair: PairId(u32::MAX),
            after: None,
            until: Some(Sha1([0xff; 20])),
            limit: u32::MAX,
        },
        ReadQuery::IndexRows {
            interval: (
                crate::groups::IndexStart::new("b", "k30"),
                Some(crate::groups::IndexStart::new("c", "")),
            ),
            from: Some(crate::index_handoff::IndexCursor {
                table: crate::index_handoff::IndexTable::Parts,
                at: Some(crate::index_handoff::IndexAt::Upload {
                    id: "up".into(),
                    part: 7,
                }),
            }),
            limit: 9,
        },
        ReadQuery::MiddleKey((crate::groups::IndexStart::default(), None)),
        ReadQuery::IndexRefs {
            slice: ([0; 20], Some([0x80; 20])),
            released: [(Sha1([1; 20]), 5)].into(),
            pending: vec![crate::audit::Pending {
                sha1: Sha1([2; 20]),
                ref_id: 6,
                magic: 7,
                bucket: "b".into(),
                key: "k".into(),
            }],
        },
        ReadQuery::FileState(Sha1([9; 20])),
        ReadQuery::JobFence {
            bucket: "b".into(),
            prefix: "mailbox/1/".into(),
        },
    ] {
        let bytes = postcard::to_stdvec(&query).unwrap();
        assert_eq!(postcard::from_bytes::<ReadQuery>(&bytes).unwrap(), query);
    }
    for answer in [
        Ok(ReadAnswer::Deleting(vec![(
            Sha1([2; 20]),
            crate::tables::DeletingRecord {
                pair: PairId(4),
                since_secs: u64::MAX,
            },
        )])),
        Ok(ReadAnswer::Deleting(Vec::new())),
        Ok(ReadAnswer::File(None)),
        Ok(ReadAnswer::File(Some(crate::FileRecord {
            refs: 3,
            magic: u32::MAX,
            flags: 1,
            pair: PairId(9),
        }))),
        Ok(ReadAnswer::MiddleKey(Some(crate::groups::IndexStart::new(
            "b", "m",
        )))),
        Ok(ReadAnswer::IndexRows(crate::index_handoff::IndexPage {
            rows: vec![crate::index_handoff::IndexRow::Seq { value: 3 }],
            next: None,
        })),
        Ok(ReadAnswer::IndexRefs(crate::audit::IndexRefs {
            named: [(Sha1([3; 20]), crate::audit::Tally { count: 2, magic: 9 })].into(),
            in_flight: 1,
        })),
        Ok(ReadAnswer::FileState(
            None,
            Some(crate::tables::DeletingRecord {
                pair: PairId(1),
                since_secs: 2,
            }),
        )),
        Ok(ReadAnswer::JobFence {
            seq: u64::MAX,
            objects: 0,
        }),
        Err(crate::MetaError::Moved { map_version: 4 }),
    ] {
        let bytes = postcard::to_stdvec(&answer).unwrap();
        assert_eq!(
            postcard::from_bytes::<Result<ReadAnswer, crate::MetaError>>(&bytes).unwrap(),
            answer
        );
    }
}

/// The audit on real Rafts, root keeping the keys and the sha1s below 0x80 and a FileDB
/// group on nodes 2 and 3 the rest: objects through every node, native references and a
/// reference pending with no entry audit clean; then a hand edit on every replica (a record counting one reference too
/// many in root, one too few in the FileDB group) is found by both reads of a pass and
/// confirmed: the leak reported, the danger marked DO_NOT_DELETE, which the next pass
/// counts as marked and leaves alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_audit_finds_a_leak_and_marks_a_danger_across_groups() {
    use crate::audit::Kind;
    use crate::{ContentSource, NewObject};
    use placement::{Magic, Sha1};

    let (_dir, _net, nodes, _, filedb) = bucket_b_split_at_0x80().await;
    let m = |n: u32| Magic::new(n).unwrap();
    // Two objects of each content, through every node; two native references.
    for (i, content) in [0x10u8, 0x20, 0x90, 0xa0].into_iter().enumerate() {
        for copy in 0..2u32 {
            let key = format!("k{i}-{copy}");
            let put = Command::PutObject {
                bucket: "b".into(),
                key: key.clone(),
                object: NewObject::new(Sha1([content; 20]), m(7 + copy), 1, 0, [content; 16]),
                source: ContentSource::Stored(PairId(0)),
                now_secs: now_ms() / 1000,
                precondition: None,
            };
            let via = &nodes[(i + copy as usize) % 3];
            retried(|| via.execute_at("b", &key, put.clone())).await;
        }
    }
    for content in [0x30u8, 0xb0] {
        retried(|| nodes[1].insert_or_inc(Sha1([content; 20]), m(3), PairId(0))).await;
    }
    // A third object of 0x90, deleted: its dec goes through root's outbox to the FileDB
    // group (owed, then applied and `Released`, then dropped): counted once throughout.
    let put = Command::PutObject {
        bucket: "b".into(),
        key: "gone".into(),
        object: NewObject::new(Sha1([0x90; 20]), m(9), 1, 0, [0x90; 16]),
        source: ContentSource::Existing,
        now_secs: now_ms() / 1000,
        precondition: None,
    };
    retried(|| nodes[0].execute_at("b", "gone", put.clone())).await;
    let delete = Command::DeleteObject {
        bucket: "b".into(),
        key: "gone".into(),
        now_secs: now_ms() / 1000,
    };
    retried(|| nodes[0].execute(delete.clone())).await;
    let mut in_flight = Vec::new();
    for _ in 0..20 {
        let r = nodes[0].audit(false).await.unwrap();
        assert_eq!((r.confirmed, r.unconfirmed), (0, 0), "{r:?}");
        in_flight.push(r.in_flight);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        in_flight.last(),
        Some(&0),
        "the dec was drained: {in_flight:?}"
    );
    let clean = nodes[2].audit(true).await.unwrap();
    assert_eq!(
        (
            clean.contents,
            clean.references,
            clean.confirmed,
            clean.unconfirmed
        ),
        (6, 10, 0, 0),
        "{clean:?}"
    );
    // A gateway stopped between its reference and its entry: FileDB counts the pending
    // reference, and so does the audit (in flight), until the reconciler releases it.
    let orphan = Command::RefInc {
        sha1: Sha1([0x90; 20]),
        magic: m(11),
        ref_id: 77,
        pair: None,
        bucket: "b".into(),
        key: "never-written".into(),
        deadline_ms: now_ms() + 3_600_000,
        now_ms: now_ms(),
    };
    retried(|| nodes[0].execute(orphan.clone())).await;
    let pending = nodes[0].audit(true).await.unwrap();
    assert_eq!(
        (pending.references, pending.in_flight, pending.confirmed),
        (11, 1, 0),
        "{pending:?}"
    );

    // The same hand edit on every replica of each group.
    let edit = |store: &crate::MetaStore, content: u8, refs: u32| {
        use crate::tables::FILES;
        let sha1 = Sha1([content; 20]);
        let mut rec = store.file(&sha1).unwrap().unwrap();
        rec.refs = refs;
        let db = store.db();
        let txn = db.begin_write().unwrap();
        txn.open_table(FILES)
            .unwrap()
            .insert(sha1.0, rec.encode_checked(&sha1).unwrap())
            .unwrap();
        txn.commit().unwrap();
    };
    for node in &nodes {
        edit(node.root().store(), 0x20, 3);
        if let Some(g) = node.get(filedb) {
            edit(g.store(), 0xa0, 1);
        }
    }
    let found = nodes[0].audit(true).await.unwrap();
    let kinds: Vec<(u8, Kind)> = found
        .findings
        .iter()
        .map(|f| (f.sha1.0[0], f.kind))
        .collect();
    assert_eq!(
        kinds,
        vec![(0x20, Kind::Leak), (0xa0, Kind::Danger)],
        "{found:?}"
    );
    assert_eq!(found.marked, vec![Sha1([0xa0; 20])]);
    let marked = retried(|| nodes[0].file(Sha1([0xa0; 20]))).await.unwrap();
    assert!(marked.do_not_delete(), "{marked:?}");
    let again = nodes[1].audit(true).await.unwrap();
    assert_eq!(
        (again.confirmed, again.do_not_delete, again.marked.len()),
        (1, 1, 0),
        "{again:?}"
    );
    assert_eq!(again.findings[0].kind, Kind::Leak);
    for node in &nodes {
        node.shutdown().await;
    }
}

/// A group splits by its rate of FileDB operations, where the split shares the load:
/// with a bound of 20 per second over a one-second window, increments as fast as they
/// commit, for 3 s each: a single node keeps its one group (a split would spread
/// nothing); three nodes split it when the load is spread over 64 contents, between
/// them, and split no more once the writes stop; nor while one content then takes all
/// the load (a split would move the load, not share it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_busy_group_splits_by_its_rate_where_that_shares_the_load() {
    use placement::{Magic, Sha1};
    let busy = |id| ClusterConfig {
        group_split_ops: 20,
        split_rate_window_ms: 1_000,
        ..config(id)
    };
    let m = Magic::new(1).unwrap();
    // Increments through `node` for 3 s over `contents` in turn, as fast as they commit.
    let hammer = |node: Arc<Replicas>, contents: Vec<u8>| async move {
        for &c in &contents {
            retried(|| node.insert_or_inc(Sha1([c; 20]), m, PairId(0))).await;
        }
        let (start, mut done) = (tokio::time::Instant::now(), 0usize);
        while start.elapsed() < Duration::from_secs(3) {
            let c = contents[done % contents.len()];
            retried(|| node.inc(Sha1([c; 20]), m)).await;
            done += 1;
        }
        println!("{done} increments in 3 s over {} contents", contents.len());
    };
    let spread: Vec<u8> = (0..64u8).map(|i| i * 4 + 1).collect();
    let version = |node: &Arc<Replicas>| {
        let node = node.clone();
        async move { node.refresh_map().await.unwrap().map_or(1, |m| m.version) }
    };

    let dir = tempfile::tempdir().unwrap();
    let net = Arc::new(Loopback::default());
    let one = start_with(dir.path(), busy(1), BTreeMap::from([(1, addr(1))]), &net).await;
    one.root().wait_leader(WAIT).await.unwrap();
    hammer(one.clone(), spread.clone()).await;
    assert_eq!(version(&one).await, 1, "one node keeps one group");
    one.shutdown().await;

    let (_dir, _net, nodes) = three_nodes_with(busy).await;
    nodes[0].root().wait_leader(WAIT).await.unwrap();
    hammer(nodes[1].clone(), spread).await;
    wait_map_version(&nodes, 2).await;
    // A window that began while the writes ran may still split once.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let at_rest = nodes[0].refresh_map().await.unwrap().unwrap();
    println!(
        "map version {} with {} FileDB intervals",
        at_rest.version,
        at_rest.filedb_intervals().count()
    );
    assert!(at_rest.filedb_intervals().count() >= 2, "{at_rest:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = nodes[0].refresh_map().await.unwrap().unwrap();
    assert_eq!(
        later.version, at_rest.version,
        "no split at rest: {later:?}"
    );
    hammer(nodes[1].clone(), vec![0xe1]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let hot = nodes[0].refresh_map().await.unwrap().unwrap();
    assert_eq!(
        hot.version, at_rest.version,
        "one hot content: no split: {hot:?}"
    );
    for node in &nodes {
        node.shutdown().await;
    }
}

/// A move planned to a node that is down holds back every later change until it is
/// cancelled: node 4, added to root, stops; group 1's replica on node 3 is planned to
/// move there and its driver cannot add the learner; the cancel reverses the steps taken
/// (node 4 out of the group's membership, node 3 a voter still) and drops the plan, the
/// map unchanged; a move to node 1 then commits, and a stale commit of the cancelled plan
/// is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_move_to_a_dead_node_is_cancelled_and_the_next_change_goes_through() {
    let (dir, net, mut nodes) = three_nodes().await;
    let root = nodes[0].root().clone();
    root.wait_leader(WAIT).await.unwrap();
    let (split, g) = split_filedb_at_0x80(&nodes).await;
    wait_map_version(&nodes, split.version).await;
    let fourth = add_fourth(dir.path(), &net, &root, config(4)).await;
    net.unregister(&addr(4));
    fourth.shutdown().await;

    let stuck = retried(|| nodes[0].plan_move(g, 3, 4)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(retried(|| nodes[1].cancel_plan()).await, stuck.version);
    // Taken once the step under way gives up on the learner (`CATCH_UP_WAIT`).
    let deadline = tokio::time::Instant::now() + 3 * WAIT;
    while root.read(|s| s.planned_map()).await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the cancelled plan dropped"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let map = nodes[0].refresh_map().await.unwrap().unwrap();
    assert_eq!(*map, split, "the map stays as it was");
    let members = |node: &Arc<Replicas>| {
        let m = node
            .get(g)
            .unwrap()
            .raft()
            .metrics()
            .borrow()
            .membership_config
            .clone();
        let voters: Vec<NodeId> = m.membership().voter_ids().collect();
        let learners: Vec<NodeId> = m.membership().learner_ids().collect();
        (voters, learners)
    };
    eventually("group 1 on nodes 2 and 3 only", || {
        let ok = members(&nodes[1]) == (vec![2, 3], vec![]);
        async move { ok }
    })
    .await;
    // The next change goes through; the cancelled plan cannot be committed any more.
    let stale = execute(&root, Command::SetShardMap { map: stuck.clone() }).await;
    assert!(
        matches!(stale, Err(crate::MetaError::InvalidCommand(_))),
        "{stale:?}"
    );
    let next = retried(|| nodes[0].plan_move(g, 3, 1)).await;
    wait_map_version(&nodes[..3], next.version).await;
    eventually("group 1 on nodes 2 and 1", || {
        let ok = members(&nodes[1]) == (vec![1, 2], vec![]);
        async move { ok }
    })
    .await;
    nodes.truncate(3);
    for node in &nodes {
        node.shutdown().await;
    }
}

/// Three nodes with bucket `b` (made in root) whose keys lie in three groups: root below
/// "m", an index group on `from_m` from "m", another on `from_t` from "t", once every
/// node follows the map; the map and the two index groups.
async fn bucket_b_over_three_index_groups(
    (on_m, on_t): (Vec<NodeId>, Vec<NodeId>),
) -> (
    tempfile::TempDir,
    Arc<Loopback>,
    Vec<Arc<Replicas>>,
    crate::groups::ShardMap,
    [GroupId; 2],
) {
    use crate::groups::{IndexStart, ShardMap, SplitAt};
    let (dir, net, nodes) = three_nodes_with_bucket_b().await;
    let root = nodes[0].root().clone();
    let (map, from_m) = ShardMap::single(vec![1, 2, 3])
        .unwrap()
        .split(ROOT, SplitAt::Key(IndexStart::new("b", "m")), on_m.clone())
        .unwrap();
    execute(&root, Command::SetShardMap { map: map.clone() })
        .await
        .unwrap();
    let (map, from_t) = map
        .split(
            from_m,
            SplitAt::Key(IndexStart::new("b", "t")),
            on_t.clone(),
        )
        .unwrap();
    execute(&root, Command::SetShardMap { map: map.clone() })
        .await
        .unwrap();
    wait_map_version(&nodes, map.version).await;
    let holder = |on: &[NodeId]| &nodes[on[0] as usize - 1];
    wait_owned(
        &[
            (&nodes[0], ROOT),
            (holder(&on_m), from_m),
            (holder(&on_t), from_t),
        ],
        map.version,
    )
    .await;
    for node in &nodes {
        let id = node.root().node_id();
        assert_eq!(node.get(from_m).is_some(), on_m.contains(&id));
        assert_eq!(node.get(from_t).is_some(), on_t.contains(&id));
    }
    (dir, net, nodes, map, [from_m, from_t])
}

/// Index reads by key on real Rafts. Bucket `b`'s keys lie in three groups: root below
/// "m", an index group on nodes 2 and 3 from "m", another on nodes 1 and 2 from "t" (so
/// nodes 1 and 3 each lack one and read it over [`Call::Read`]). PUTs are routed by key
/// (the content stays in root: each PUT from "m" on crosses groups). From every node:
/// each object reads back from its group; listings of objects, versions and uploads,
/// paged with every page size from 1 to 6, with and without a delimiter, equal the
/// expected order exactly once per key; a group asked about a key or a span it does not
/// own answers `Moved`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn index_reads_go_to_the_keys_group_and_listings_walk_across_groups() {
    use crate::list::{Cursor, ListQuery, Span};
    use crate::list_versions::VersionsQuery;
    use crate::raft::route::referencing_write;
    use crate::store::index::{IndexAnswer, IndexQuery};
    use crate::{ContentSource, MetaError, NewObject, UploadRecord};
    use placement::{Magic, Sha1};

    let (_dir, net, nodes, map, [from_m, from_t]) =
        bucket_b_over_three_index_groups((vec![2, 3], vec![1, 2])).await;
    // Root's leader's round copies bucket b's record to both index groups.
    for (node, group) in [(&nodes[1], from_m), (&nodes[1], from_t)] {
        let meta = node.get(group).unwrap();
        eventually("the bucket's record reaches its index groups", || {
            let meta = meta.clone();
            async move { meta.read_local(|s| s.bucket("b")).await.unwrap().is_some() }
        })
        .await;
    }

    let keys = [
        "a", "a/1", "a/2", "l", "l/x/1", "m", "m/1", "m/2", "n", "s/1", "s/2", "sz", "t", "t/1",
        "u", "zz",
    ];
    for (i, key) in keys.iter().enumerate() {
        let via = nodes[i % 3].clone();
        let put = Command::PutObject {
            bucket: "b".into(),
            key: key.to_string(),
            object: NewObject::new(
                Sha1([i as u8 + 1; 20]),
                Magic::new(i as u32 + 1).unwrap(),
                i as u64,
                0,
                [0; 16],
            ),
            source: ContentSource::Stored(PairId(0)),
            now_secs: 1,
            precondition: None,
        };
        retried(|| referencing_write(&via, "b", key, put.clone())).await;
        let upload = Command::CreateUpload {
            upload_id: format!("up{i:02}"),
            upload: UploadRecord {
                bucket: "b".into(),
                key: key.to_string(),
                content_type: None,
                user_meta: Vec::new(),
                headers: Vec::new(),
                created_ms: 1,
            },
        };
        retried(|| via.send(map.index_group("b", key), upload.clone())).await;
    }

    for node in &nodes {
        for (i, key) in keys.iter().enumerate() {
            let found = retried(|| node.object("b", key)).await.unwrap();
            assert_eq!(found.size_bytes, i as u64, "{key}");
            let id = format!("up{i:02}");
            let upload = retried(|| node.upload("b", key, &id)).await;
            assert!(upload.is_some_and(|u| u.key == *key));
            // An upload named with another key is none.
            assert_eq!(
                retried(|| node.upload("b", "a", &id)).await.is_some(),
                i == 0
            );
        }
        assert_eq!(retried(|| node.object("b", "mm")).await, None);

        for delimiter in [None, Some("/")] {
            let want: Vec<String> = {
                let mut out: Vec<String> = keys
                    .iter()
                    .map(|k| match (delimiter, k.find('/')) {
                        (Some(_), Some(at)) => k[..=at].to_string(),
                        _ => k.to_string(),
                    })
                    .collect();
                out.dedup();
                out
            };
            for max_keys in 1..=6 {
                let mut q = ListQuery {
                    delimiter: delimiter.map(Into::into),
                    max_keys,
                    ..ListQuery::default()
                };
                let mut seen = Vec::new();
                for _ in 0..keys.len() + 1 {
                    let page = retried(|| node.list_objects("b", &q)).await;
                    assert!(page.objects.len() + page.common_prefixes.len() <= max_keys);
                    let mut entries: Vec<String> =
                        page.objects.iter().map(|(k, _)| k.clone()).collect();
                    entries.extend(page.common_prefixes.iter().cloned());
                    entries.sort();
                    seen.extend(entries);
                    if !page.truncated {
                        break;
                    }
                    q.after = page.last;
                }
                assert_eq!(seen, want, "delimiter {delimiter:?}, max-keys {max_keys}");

                let mut q = VersionsQuery {
                    delimiter: delimiter.map(Into::into),
                    max_keys,
                    ..VersionsQuery::default()
                };
                let mut seen = Vec::new();
                for _ in 0..keys.len() + 1 {
                    let page = retried(|| node.list_versions("b", &q)).await;
                    let mut entries: Vec<String> =
                        page.versions.iter().map(|(k, _)| k.clone()).collect();
                    entries.extend(page.common_prefixes.iter().cloned());
                    entries.sort();
                    seen.extend(entries);
                    if !page.truncated {
                        assert_eq!(page.next_key_marker, None);
                        break;
                    }
                    q.key_marker = page.next_key_marker.clone();
                    q.version_marker = page
                        .next_version_marker
                        .as_deref()
                        .map(|v| crate::versions::VersionId::parse(v).unwrap());
                }
                assert_eq!(
                    seen, want,
                    "versions, delimiter {delimiter:?}, max-keys {max_keys}"
                );
            }
        }
        for max in 1..=6 {
            let mut after = None;
            let mut seen = Vec::new();
            for _ in 0..keys.len() + 1 {
                let page = retried(|| node.uploads("b", "", after.clone(), max)).await;
                assert!(page.uploads.len() <= max);
                seen.extend(
                    page.uploads
                        .iter()
                        .map(|(id, u, _)| (u.key.clone(), id.clone())),
                );
                if !page.truncated {
                    break;
                }
                after = page
                    .uploads
                    .last()
                    .map(|(id, u, _)| (u.key.clone(), id.clone()));
            }
            let want: Vec<(String, String)> = keys
                .iter()
                .enumerate()
                .map(|(i, k)| (k.to_string(), format!("up{i:02}")))
                .collect();
            assert_eq!(seen, want, "uploads, max {max}");
        }
    }

    // Asked directly, as a reader with a stale map would: a key or a span outside the
    // group's interval is refused, one inside answered.
    let ask = |group: GroupId, node: NodeId, query: IndexQuery| {
        let net = net.clone();
        async move {
            crate::raft::network::Rpc::new(net, group)
                .call::<_, Result<ReadAnswer, MetaError>>(
                    &addr(node),
                    Call::Read,
                    &ReadQuery::Index(query),
                    WAIT,
                )
                .await
                .unwrap()
        }
    };
    let object = |key: &str| IndexQuery::Object {
        bucket: "b".into(),
        key: key.into(),
    };
    let moved = Err(MetaError::Moved {
        map_version: map.version,
    });
    assert_eq!(ask(ROOT, 1, object("m")).await, moved);
    assert_eq!(ask(from_m, 2, object("t")).await, moved);
    assert_eq!(ask(from_t, 1, object("s")).await, moved);
    assert!(matches!(
        ask(from_m, 3, object("s/1")).await,
        Ok(ReadAnswer::Index(IndexAnswer::Object(Some(_))))
    ));
    let list = |from: &str, until: Option<&str>| IndexQuery::List {
        bucket: "b".into(),
        query: ListQuery {
            max_keys: 1000,
            ..ListQuery::default()
        },
        span: Span {
            from: Cursor::At(from.as_bytes().to_vec()),
            until: until.map(|u| u.as_bytes().to_vec()),
            room: 1000,
        },
    };
    // A write of a key, or of several, outside the group's keys: refused in its log.
    let refused = retried(|| async {
        match nodes[1]
            .send(
                from_m,
                Command::DeleteObjects {
                    bucket: "b".into(),
                    keys: vec!["n".into(), "zz".into()],
                    now_secs: 3,
                },
            )
            .await
        {
            Err(MetaError::Moved { map_version }) => Ok(map_version),
            other => panic!("{other:?}"),
        }
    })
    .await;
    assert_eq!(refused, map.version);
    assert!(retried(|| nodes[1].object("b", "n")).await.is_some());
    // A span running past the group's end (a map from before "t" was split off).
    assert_eq!(ask(from_m, 2, list("m", None)).await, moved);
    assert_eq!(ask(ROOT, 2, list("a", None)).await, moved);
    match ask(from_m, 2, list("m", Some("t"))).await {
        Ok(ReadAnswer::Index(IndexAnswer::List(page))) => {
            let got: Vec<&str> = page.objects.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(got, ["m", "m/1", "m/2", "n", "s/1", "s/2", "sz"]);
            assert_eq!(page.resume, Some(Cursor::At(b"t".to_vec())));
        }
        other => panic!("{other:?}"),
    }
    // Writes of one key go to the group owning it, from any node; an upload named by id
    // by the key its caller gives; DeleteObjects split by group, each key's answer in
    // the order asked.
    retried(|| {
        nodes[0].execute(Command::DeleteObject {
            bucket: "b".into(),
            key: "s/1".into(),
            now_secs: 2,
        })
    })
    .await;
    assert_eq!(retried(|| nodes[2].object("b", "s/1")).await, None);
    retried(|| {
        nodes[2].execute_at(
            "b",
            "zz",
            Command::AbortUpload {
                upload_id: "up15".into(),
                now_secs: 2,
            },
        )
    })
    .await;
    assert_eq!(retried(|| nodes[0].upload("b", "zz", "up15")).await, None);
    let keys: Vec<String> = ["a", "m", "u", "nope", "t/1"].map(String::from).to_vec();
    let existed = retried(|| nodes[2].delete_objects("b".into(), keys.clone(), 2)).await;
    assert_eq!(existed, [true, true, true, false, true]);
    for key in ["a", "m", "u", "t/1"] {
        assert_eq!(retried(|| nodes[1].object("b", key)).await, None, "{key}");
    }

    for group in [ROOT, from_m, from_t] {
        let holders: Vec<&Arc<Replicas>> =
            nodes.iter().filter(|n| n.get(group).is_some()).collect();
        assert_same_digest(&holders, group).await;
    }
}

/// Bucket records on their way to the index groups, on real Rafts (bucket `b` over root,
/// a group on all three nodes from "m" and one on nodes 1 and 3 from "t"), through node
/// 2, which holds no replica of the group from "t": a bucket created after the split, and
/// versioning enabled, are answered only once the bucket's index groups hold the new
/// record, so a PUT right after finds it; a change made straight in root's log (a saga
/// cut short) reaches them by root's leader's round; a stale copy changes nothing;
/// DeleteBucket is refused while an index group holds a key of the bucket, and an empty
/// bucket's deletion reaches its index group (a PUT there then finds no bucket). Then
/// node 2 is stopped, the others write on until their logs are purged past it, and node 2
/// restarted catches up by snapshot install, bucket copies included.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bucket_records_reach_their_index_groups_by_the_saga_and_by_roots_round() {
    use crate::bucket_copies::BucketCopy;
    use crate::list_versions::VersionsQuery;
    use crate::raft::route::referencing_write;
    use crate::versions::Versioning;
    use crate::{ContentSource, MetaError, NewObject, Response};
    use placement::{Magic, Sha1};

    // Node 2 holds no replica of the group from "t" (nor, perhaps, root's leader).
    let (dir, net, mut nodes, _map, [from_m, from_t]) =
        bucket_b_over_three_index_groups((vec![1, 2, 3], vec![1, 3])).await;
    let n3 = nodes[1].clone();
    let put = |bucket: &str, key: &str, n: u8| Command::PutObject {
        bucket: bucket.into(),
        key: key.into(),
        object: NewObject::new(
            Sha1([n; 20]),
            Magic::new(u32::from(n)).unwrap(),
            1,
            0,
            [0; 16],
        ),
        source: ContentSource::Stored(PairId(0)),
        now_secs: 1,
        precondition: None,
    };
    let write = |bucket: &'static str, key: &'static str, n: u8| {
        let n3 = n3.clone();
        async move {
            let deadline = tokio::time::Instant::now() + WAIT;
            loop {
                match referencing_write(&n3, bucket, key, put(bucket, key, n)).await {
                    Err(MetaError::Unavailable(why)) => {
                        assert!(tokio::time::Instant::now() < deadline, "{why}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    other => return other,
                }
            }
        }
    };
    let bucket_cmd = |cmd: Command| {
        let n3 = n3.clone();
        async move {
            let deadline = tokio::time::Instant::now() + WAIT;
            loop {
                match n3.execute(cmd.clone()).await {
                    Err(MetaError::Unavailable(why)) => {
                        assert!(tokio::time::Instant::now() < deadline, "{why}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    other => return other,
                }
            }
        }
    };
    let create = |bucket: &str| Command::CreateBucket {
        bucket: bucket.into(),
        created_ms: 2,
    };

    // Bucket c sorts after ("b", "t"): its keys lie in the group from "t".
    bucket_cmd(create("c")).await.unwrap();
    let r = write("c", "k", 1).await;
    assert!(matches!(r, Ok(Response::ObjectPut { .. })), "{r:?}");
    bucket_cmd(Command::SetBucketVersioning {
        bucket: "b".into(),
        state: Versioning::Enabled,
    })
    .await
    .unwrap();
    for n in [2, 3] {
        // Answered as a versioned PUT: the group from "m" has the new record.
        let r = write("b", "n", n).await;
        assert!(matches!(r, Ok(Response::VersionStored { .. })), "{r:?}");
    }
    let query = VersionsQuery {
        prefix: "n".into(),
        max_keys: 1000,
        ..VersionsQuery::default()
    };
    let versions = retried(|| n3.list_versions("b", &query)).await;
    assert_eq!(versions.versions.len(), 2, "both PUTs kept a version");

    // Straight into root's log: no saga.
    execute(
        nodes[0].root(),
        Command::SetBucketVersioning {
            bucket: "b".into(),
            state: Versioning::Suspended,
        },
    )
    .await
    .unwrap();
    for group in [from_m, from_t] {
        let meta = nodes[2].get(group).unwrap();
        eventually("root's leader's round copies the change", || {
            let meta = meta.clone();
            async move {
                let record = meta.read_local(|s| s.bucket("b")).await.unwrap();
                record.is_some_and(|r| r.versioning == Versioning::Suspended)
            }
        })
        .await;
    }
    // A stale copy (the record as created, revision 0) changes nothing.
    let stale = BucketCopy {
        bucket: "b".into(),
        record: Some(
            crate::tables::BucketRecord {
                created_ms: 1,
                cors: None,
                owner: None,
                versioning: Versioning::Unversioned,
                object_lock: None,
            }
            .encode()
            .unwrap(),
        ),
        revision: 0,
        lifecycle: None,
    };
    retried(|| {
        n3.send(
            from_m,
            Command::CopyBuckets {
                copies: vec![stale.clone()],
            },
        )
    })
    .await;
    let record = nodes[2]
        .get(from_m)
        .unwrap()
        .read(|s| s.bucket("b"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.versioning, Versioning::Suspended);

    // c holds c/k in the group from "t" (root holds none of its keys): not deleted.
    assert_eq!(
        bucket_cmd(Command::DeleteBucket { bucket: "c".into() }).await,
        Err(MetaError::BucketNotEmpty)
    );
    bucket_cmd(create("d")).await.unwrap();
    bucket_cmd(Command::DeleteBucket { bucket: "d".into() })
        .await
        .unwrap();
    assert_eq!(write("d", "x", 4).await, Err(MetaError::NoSuchBucket));
    assert!(retried(|| n3.object("c", "k")).await.is_some());
    drop(n3);

    // Node 2 stopped; through node 1, versioning enabled again and 24 PUTs in the group
    // from "m" (snapshots every 4 entries), until root's and that group's logs on both
    // survivors start past what node 2 holds; node 2 restarted on its folder catches up
    // by snapshot install, the bucket copies and their revisions with it.
    let stopped = nodes.remove(1);
    let stopped_at = [ROOT, from_m].map(|g| stopped.get(g).unwrap().status().last_applied.unwrap());
    net.unregister(&addr(2));
    stopped.shutdown().await;
    drop(stopped);
    let n1 = nodes[0].clone();
    retried(|| {
        n1.execute(Command::SetBucketVersioning {
            bucket: "b".into(),
            state: Versioning::Enabled,
        })
    })
    .await;
    for i in 0..24u8 {
        let key = format!("p/{i}");
        let r = retried(|| referencing_write(&n1, "b", &key, put("b", &key, 10 + i))).await;
        assert!(matches!(r, Response::VersionStored { .. }), "{r:?}");
    }
    let survivors: Vec<&Arc<Replicas>> = nodes.iter().collect();
    for (group, at) in [ROOT, from_m].into_iter().zip(stopped_at) {
        settle(&survivors, group).await;
        eventually("the survivors purge past the stopped node", || {
            let purged: Vec<Option<u64>> = survivors
                .iter()
                .map(|n| n.get(group).unwrap().status().purged)
                .collect();
            async move { purged.iter().all(|p| p.is_some_and(|p| p > at)) }
        })
        .await;
    }
    let restarted = start(dir.path(), 2, &net).await;
    nodes.insert(1, restarted.clone());
    let replica = restarted.get(from_m).unwrap();
    eventually("the restarted replica has the new record", || {
        let replica = replica.clone();
        async move {
            let record = replica.read_local(|s| s.bucket("b")).await.unwrap();
            record.is_some_and(|r| r.versioning == Versioning::Enabled)
        }
    })
    .await;
    for i in 0..24u8 {
        let key = format!("p/{i}");
        assert!(
            retried(|| restarted.object("b", &key)).await.is_some(),
            "{key}"
        );
    }

    for group in [ROOT, from_m, from_t] {
        let holders: Vec<&Arc<Replicas>> =
            nodes.iter().filter(|n| n.get(group).is_some()).collect();
        assert_same_digest(&holders, group).await;
    }
    for node in &nodes {
        node.shutdown().await;
    }
}

/// An index group's split on real Rafts while it serves (metadata format 10): root holds
/// every key of buckets `b` and `c`, with objects, a deleted one, uploads with parts, and
/// a writer putting new keys of `b` through node 2 all along; root's keys from `b/k30` on
/// go to a new index group. Every object acknowledged before, during or after reads back
/// from every node; a listing of each bucket walks root and the new group to exactly the
/// keys written; the new group holds the moved keys' objects and uploads (their parts
/// with them), on identical replicas, and root none of them once it dropped its rows; the
/// new group numbers versions above every one it received; writes of moved keys go to the
/// new group.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_index_group_splits_while_it_serves() {
    use crate::groups::IndexStart;
    use crate::index_handoff::IndexRow;
    use crate::list::ListQuery;
    use crate::raft::route::referencing_write;
    use crate::{ContentSource, NewObject, PartRecord, UploadRecord};
    use placement::{Magic, Sha1};

    let (_dir, _net, nodes) = three_nodes_with_bucket_b().await;
    let root = nodes[0].root().clone();
    execute(
        &root,
        Command::CreateBucket {
            bucket: "c".into(),
            created_ms: 1,
        },
    )
    .await
    .unwrap();
    let object = |n: u64| {
        NewObject::new(
            Sha1([(n % 251) as u8 + 1; 20]),
            Magic::new(n as u32 + 1).unwrap(),
            n,
            0,
            [0; 16],
        )
    };
    let put = |bucket: &str, key: &str, n: u64| Command::PutObject {
        bucket: bucket.into(),
        key: key.into(),
        object: object(n),
        source: ContentSource::Stored(PairId(0)),
        now_secs: 1,
        precondition: None,
    };
    // What every node must read: (bucket, key) -> size.
    let mut want: BTreeMap<(String, String), u64> = BTreeMap::new();
    for n in 0..40u64 {
        let key = format!("k{n:02}");
        let via = nodes[n as usize % 3].clone();
        retried(|| referencing_write(&via, "b", &key, put("b", &key, n))).await;
        want.insert(("b".into(), key), n);
    }
    for n in 0..10u64 {
        let key = format!("x{n}");
        retried(|| referencing_write(&nodes[0], "c", &key, put("c", &key, 100 + n))).await;
        want.insert(("c".into(), key), 100 + n);
    }
    let delete = Command::DeleteObject {
        bucket: "b".into(),
        key: "k33".into(),
        now_secs: 1,
    };
    retried(|| nodes[1].execute(delete.clone())).await;
    want.remove(&("b".to_string(), "k33".to_string()));
    let uploads = [
        ("b", "k05", "up-low"),
        ("b", "k35", "up-high"),
        ("c", "x1", "up-c"),
    ];
    for (bucket, key, id) in uploads {
        let create = Command::CreateUpload {
            upload_id: id.into(),
            upload: UploadRecord {
                bucket: bucket.into(),
                key: key.into(),
                content_type: None,
                user_meta: Vec::new(),
                headers: Vec::new(),
                created_ms: 1,
            },
        };
        retried(|| nodes[2].execute(create.clone())).await;
        for part_number in 1..=2u32 {
            let part = Command::PutPart {
                upload_id: id.into(),
                part_number,
                part: PartRecord {
                    sha1: Sha1([200 + part_number as u8; 20]),
                    magic: Magic::new(1000 + part_number).unwrap(),
                    size_bytes: 5,
                    md5: [0; 16],
                    crc32: 0,
                    created_ms: 1,
                },
                source: ContentSource::Stored(PairId(0)),
                now_secs: 1,
            };
            retried(|| referencing_write(&nodes[2], bucket, key, part.clone())).await;
        }
    }

    // A writer of new keys of b all along, through node 2: "w..." keys land above the cut.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = tokio::spawn({
        let (n2, stop) = (nodes[1].clone(), stop.clone());
        async move {
            let mut acked = Vec::new();
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && n < 5_000 {
                let key = format!("w{n:03}");
                let cmd = Command::PutObject {
                    bucket: "b".into(),
                    key: key.clone(),
                    object: NewObject::new(
                        Sha1([(n % 251) as u8 + 1; 20]),
                        Magic::new(5000 + n as u32).unwrap(),
                        1000 + n,
                        0,
                        [0; 16],
                    ),
                    source: ContentSource::Stored(PairId(0)),
                    now_secs: 1,
                    precondition: None,
                };
                if referencing_write(&n2, "b", &key, cmd).await.is_ok() {
                    acked.push((key, 1000 + n));
                }
                n += 1;
            }
            acked
        }
    });
    // A lister through node 3 all along: every page of b in order, and every key that
    // exists throughout (the k keys, but k33) listed exactly once per walk.
    let lister = tokio::spawn({
        let (n3, stop) = (nodes[2].clone(), stop.clone());
        let stable: Vec<String> = want
            .keys()
            .filter(|(b, _)| b == "b")
            .map(|(_, k)| k.clone())
            .collect();
        async move {
            let (mut walks, mut during) = (0u32, 0u32);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && walks < 10_000 {
                let planned = || async {
                    let root = n3.root().clone();
                    root.read_local(|s| s.planned_map())
                        .await
                        .is_ok_and(|p| p.is_some())
                };
                let began_planned = planned().await;
                let (mut listed, mut after) = (Vec::<String>::new(), None);
                let mut whole = true;
                for _ in 0..1_000 {
                    let q = ListQuery {
                        max_keys: 7,
                        after: after.clone(),
                        ..Default::default()
                    };
                    match n3.list_objects("b", &q).await {
                        Ok(page) => {
                            listed.extend(page.objects.into_iter().map(|(key, _)| key));
                            if !page.truncated {
                                break;
                            }
                            after = page.last;
                        }
                        // A walk cut short (a bound met during the copy) proves nothing.
                        Err(_) => {
                            whole = false;
                            break;
                        }
                    }
                }
                if !whole {
                    continue;
                }
                assert!(
                    listed.windows(2).all(|w| w[0] < w[1]),
                    "a walk out of order or twice: {listed:?}"
                );
                for key in &stable {
                    assert!(
                        listed.contains(key),
                        "{key} missing from a walk: {listed:?}"
                    );
                }
                walks += 1;
                if began_planned || planned().await {
                    during += 1;
                }
            }
            (walks, during)
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seq_before = root
        .store()
        .index_rows(&(IndexStart::default(), None), None, 1024)
        .unwrap()
        .rows
        .into_iter()
        .find_map(|r| match r {
            IndexRow::Seq { value } => Some(value),
            _ => None,
        });
    let cut = IndexStart::new("b", "k30");
    let (plan, h) = retried(|| nodes[0].plan_index_split(ROOT, Some(cut.clone()))).await;
    assert_eq!(plan.index_group("b", "k30"), h);
    assert_eq!(plan.index_group("b", "k29"), ROOT);
    wait_map_version(&nodes, plan.version).await;
    eventually("root dropped the index rows it handed off", || {
        let root = root.clone();
        async move { root.read_local(|s| s.handoff()).await.unwrap().is_none() }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = writer.await.unwrap();
    let (walks, during) = lister.await.unwrap();
    println!("{walks} whole listings of b, {during} of them while the split was planned");
    assert!(walks > 0);
    println!("{} PUTs acknowledged during the index split", acked.len());
    assert!(!acked.is_empty());
    for (key, size) in acked {
        want.insert(("b".into(), key), size);
    }
    // After the split: a moved key's write goes to the new group.
    retried(|| referencing_write(&nodes[0], "b", "k99", put("b", "k99", 99))).await;
    want.insert(("b".into(), "k99".into()), 99);

    for node in &nodes {
        for ((bucket, key), size) in &want {
            let found = retried(|| node.object(bucket, key)).await;
            assert_eq!(found.map(|o| o.size_bytes), Some(*size), "{bucket}/{key}");
        }
        assert_eq!(retried(|| node.object("b", "k33")).await, None);
        for bucket in ["b", "c"] {
            // Pages of 97 keys: several end inside each group, one across the cut.
            let mut listed: Vec<String> = Vec::new();
            let mut after = None;
            for _ in 0..1_000 {
                let q = ListQuery {
                    max_keys: 97,
                    after: after.clone(),
                    ..Default::default()
                };
                let page = retried(|| node.list_objects(bucket, &q)).await;
                listed.extend(page.objects.into_iter().map(|(key, _)| key));
                if !page.truncated {
                    break;
                }
                after = page.last;
            }
            let expected: Vec<String> = want
                .keys()
                .filter(|(b, _)| b == bucket)
                .map(|(_, k)| k.clone())
                .collect();
            assert_eq!(listed, expected, "listing of {bucket}");
        }
        for (bucket, key, id) in uploads {
            let parts = retried(|| node.parts(bucket, key, id)).await;
            assert_eq!(parts.len(), 2, "{bucket}/{key} {id}");
        }
    }

    // The new group holds the moved rows on identical replicas; root none of them.
    let replicas: Vec<&Arc<Replicas>> = plan
        .group(h)
        .unwrap()
        .replicas
        .iter()
        .map(|&id| &nodes[id as usize - 1])
        .collect();
    assert_same_digest(&replicas, h).await;
    assert_same_digest(&members(&nodes, &NODES), ROOT).await;
    let moved = (cut.clone(), None);
    // Every row of `interval` in `store`, page after page.
    let all_rows = |store: &crate::MetaStore, interval: &crate::ownership::KeyInterval| {
        let (mut rows, mut from) = (Vec::new(), None);
        for _ in 0..10_000 {
            let page = store.index_rows(interval, from.as_ref(), 1024).unwrap();
            rows.extend(page.rows);
            match page.next {
                Some(next) => from = Some(next),
                None => return rows,
            }
        }
        panic!("the pages never end");
    };
    let root_rows = all_rows(root.store(), &moved);
    assert!(
        root_rows.iter().all(|r| matches!(r, IndexRow::Seq { .. })),
        "{root_rows:?}"
    );
    let h_store = replicas[0].get(h).unwrap().store().clone();
    let h_rows = all_rows(&h_store, &moved);
    let count = |rows: &[IndexRow], f: fn(&IndexRow) -> bool| rows.iter().filter(|r| f(r)).count();
    let above = want
        .keys()
        .filter(|(b, k)| (b.as_str(), k.as_str()) >= ("b", "k30"))
        .count();
    assert_eq!(
        count(&h_rows, |r| matches!(r, IndexRow::Object { .. })),
        above
    );
    assert_eq!(count(&h_rows, |r| matches!(r, IndexRow::Upload { .. })), 2);
    assert_eq!(count(&h_rows, |r| matches!(r, IndexRow::Part { .. })), 4);
    let below = all_rows(&h_store, &(IndexStart::default(), Some(cut.clone())));
    assert!(
        below.iter().all(|r| matches!(r, IndexRow::Seq { .. })),
        "{below:?}"
    );
    let h_seq = h_rows.iter().find_map(|r| match r {
        IndexRow::Seq { value } => Some(*value),
        _ => None,
    });
    assert!(h_seq >= seq_before, "{h_seq:?} < {seq_before:?}");
    // Where a split of the new group would cut: inside its keys.
    let middle = h_store.middle_key(&moved).unwrap().unwrap();
    assert!(middle > cut, "{middle:?}");
    // A walk of the whole index (the statistics' scan) counts each object once.
    let objects = retried(|| async {
        let mut objects = 0usize;
        nodes[0]
            .each_index_row(100, |row| {
                objects += usize::from(matches!(row, IndexRow::Object { .. }));
            })
            .await
            .map(|()| objects)
    })
    .await;
    assert_eq!(objects, want.len());
    // The audit reads both groups: every reference FileDB counts is named once (root's
    // rows of the moved keys, dropped or not, are the new group's to count).
    let report = retried(|| nodes[2].audit(true)).await;
    assert_eq!(report.confirmed, 0, "{report:?}");
    assert!(report.marked.is_empty());
    assert_eq!(report.references, want.len() as u64 + 6, "{report:?}");
    for node in &nodes {
        node.shutdown().await;
    }
}

/// A bulk-delete job over bucket b split over root (keys before "m") and two index groups
/// ("m" to "t" on nodes 2 and 3, "t" on on nodes 1 and 2), format 12: created through node
/// 3, the job is fenced in both index groups; worked in pages of 4 keys (pages that cross
/// the groups' boundaries) through node 1, it deletes every object that existed when it
/// started, in each group, and none written after; the count is exact, every node reads
/// the same, and the audit across the groups finds every content's references equal to
/// the entries left. Then a delete-bucket job ends the 3 objects left and an upload in
/// their groups and deletes the bucket in root and in the index groups' copies.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_deletes_across_index_groups_fenced_in_each() {
    use crate::jobs::{JOBS_ACROSS_FORMAT, JobOp, JobState};
    use crate::raft::route::referencing_write;
    use crate::{ContentSource, NewObject};
    use placement::{Magic, Sha1};

    let (_dir, _net, nodes, _map, [from_m, from_t]) =
        bucket_b_over_three_index_groups((vec![2, 3], vec![1, 2])).await;
    let root = nodes[0].root().clone();
    eventually("root runs format 12", || {
        let root = root.clone();
        async move {
            root.read_local(|s| s.cluster_version())
                .await
                .is_ok_and(|v| v >= JOBS_ACROSS_FORMAT)
        }
    })
    .await;
    // Root's leader's round copies b's record to the index groups.
    for (node, group) in [(&nodes[1], from_m), (&nodes[0], from_t)] {
        let replica = node.get(group).unwrap();
        eventually("an index group holds b's copy", || {
            let replica = replica.clone();
            async move {
                replica
                    .read_local(|s| s.bucket("b"))
                    .await
                    .is_ok_and(|b| b.is_some())
            }
        })
        .await;
    }
    let put = |key: &str, n: u32| Command::PutObject {
        bucket: "b".into(),
        key: key.into(),
        object: NewObject::new(
            Sha1([(n % 7) as u8 + 1; 20]),
            Magic::new(n + 1).unwrap(),
            u64::from(n),
            0,
            [0; 16],
        ),
        source: ContentSource::Stored(PairId(0)),
        now_secs: 1,
        precondition: None,
    };
    let mut old = Vec::new();
    for (n, side) in ["a", "n", "u"].iter().cycle().take(27).enumerate() {
        let key = format!("{side}/{n:02}");
        let via = nodes[n % 3].clone();
        retried(|| referencing_write(&via, "b", &key, put(&key, n as u32))).await;
        old.push(key);
    }
    let map = nodes[0].shard_map().await.unwrap();
    let groups: std::collections::BTreeSet<GroupId> =
        old.iter().map(|k| map.index_group("b", k)).collect();
    assert_eq!(
        groups,
        std::collections::BTreeSet::from([ROOT, from_m, from_t])
    );

    let op = JobOp::DeletePrefix {
        bucket: "b".into(),
        prefix: String::new(),
    };
    let id = retried(|| nodes[2].create_job(op.clone(), now_ms())).await;
    let fences = nodes[0].job_fences(id).await.unwrap();
    assert_eq!(fences.keys().copied().collect::<Vec<_>>(), [from_m, from_t]);
    let job = retried(|| root.read(move |s| s.job(id))).await.unwrap();
    assert_eq!(job.total_estimate, 27);
    // Written after the job started, on each side: not the job's to delete.
    let new = ["a/new", "n/new", "u/new"];
    for (n, key) in new.iter().enumerate() {
        retried(|| referencing_write(&nodes[n], "b", key, put(key, 100 + n as u32))).await;
    }

    let mut pages = 0;
    loop {
        let job = retried(|| root.read(move |s| s.job(id))).await.unwrap();
        if job.state != JobState::Running {
            assert_eq!(job.state, JobState::Done);
            assert_eq!(job.deleted, 27, "{job:?}");
            break;
        }
        assert!(pages < 40, "the job never ends: {job:?}");
        retried(|| nodes[0].job_page_across(id, &job, &fences, 4, true)).await;
        pages += 1;
    }
    assert!(pages >= 7, "{pages} pages");
    for node in &nodes {
        for key in &old {
            assert_eq!(retried(|| node.object("b", key)).await, None, "b/{key}");
        }
        for key in new {
            assert!(retried(|| node.object("b", key)).await.is_some(), "b/{key}");
        }
    }
    // The outbox's decs drain; then every content's references are its entries'.
    let mut last = None;
    for _ in 0..100 {
        let r = retried(|| nodes[1].audit(false)).await;
        assert_eq!((r.confirmed, r.unconfirmed), (0, 0), "{r:?}");
        if r.in_flight == 0 {
            last = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let clean = last.expect("references still in flight after 10 s");
    assert_eq!(clean.references, 3, "{clean:?}");

    // A delete-bucket job: the 3 objects left and an upload in the group from "t", each
    // ended in its group, then the bucket deleted in root and in its copies.
    let create = Command::CreateUpload {
        upload_id: "up-u".into(),
        upload: crate::UploadRecord {
            bucket: "b".into(),
            key: "u/up".into(),
            content_type: None,
            user_meta: Vec::new(),
            headers: Vec::new(),
            created_ms: 1,
        },
    };
    retried(|| nodes[2].execute(create.clone())).await;
    let op = JobOp::DeleteBucket { bucket: "b".into() };
    let id = retried(|| nodes[1].create_job(op.clone(), now_ms())).await;
    let fences = nodes[0].job_fences(id).await.unwrap();
    assert_eq!(fences.keys().copied().collect::<Vec<_>>(), [from_m, from_t]);
    for step in 0.. {
        let job = retried(|| root.read(move |s| s.job(id))).await.unwrap();
        if job.state != JobState::Running {
            assert_eq!((&job.state, job.deleted), (&JobState::Done, 3), "{job:?}");
            break;
        }
        assert!(step < 20, "the job never ends: {job:?}");
        let objects_done = retried(|| nodes[0].job_page_across(id, &job, &fences, 2, false)).await;
        if objects_done {
            retried(|| nodes[0].job_bucket_end_across(id, "b")).await;
        }
    }
    for node in &nodes {
        assert!(
            retried(|| node.root().read(|s| s.bucket("b")))
                .await
                .is_none()
        );
        for group in [from_m, from_t] {
            if let Some(replica) = node.get(group) {
                eventually("the bucket's copy is gone", || {
                    let replica = replica.clone();
                    async move {
                        replica
                            .read_local(|s| s.bucket("b"))
                            .await
                            .is_ok_and(|b| b.is_none())
                    }
                })
                .await;
            }
        }
    }
    for node in &nodes {
        node.shutdown().await;
    }
}
