//! Harness for a replicated cluster: `n` real `gateway serve` processes on 127.0.0.1 (or
//! each in its own network namespace, see [`Cluster::start_in`]) that form one Raft group,
//! share the S3 credentials, the admin token, the cluster secret and the disk pairs (local
//! folders every node reaches, listed in one configuration file).
//!
//! Layout of a cluster's temp folder (removed when the [`Cluster`] is dropped):
//!
//! ```text
//! <root>/cluster.toml      the --config file: the shared pairs
//! <root>/disks/pair<P>-<D> the shared disks (folders)
//! <root>/node<N>/          node N's --data folder
//! ```
//!
//! Set `CLUSTER_KEEP_DIR=1` to keep the folder of a failed test.
//!
//! Nodes are numbered from 1, as `--node-id` numbers them; every method takes that id.
//! Every wait is bounded; every request has a socket timeout. The clusters of one test
//! binary run one at a time.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use aws_sdk_s3::Client;
use serde_json::Value;

use crate::{
    Gateway, GatewayOptions, Placement, RawResponse, Remote, encode_key, gateway_bin, random_token,
};

/// The client threads of [`Cluster::put_get_clients`].
pub struct Clients {
    threads: Vec<thread::JoinHandle<(Duration, Vec<String>)>>,
    stop: Arc<AtomicBool>,
}

impl Clients {
    /// Stops the threads and waits for them; panics listing the failed requests if any
    /// failed. Answers the slowest PUT+GET round.
    pub fn finish(self) -> Duration {
        self.stop.store(true, Ordering::Relaxed);
        let mut slowest = Duration::ZERO;
        let mut failed = Vec::new();
        for t in self.threads {
            let (s, failures) = t.join().expect("client thread");
            failed.extend(failures);
            slowest = slowest.max(s);
        }
        assert!(failed.is_empty(), "{failed:#?}");
        slowest
    }
}

/// Bound on an election (a leader every live node agrees on), generous for a slow,
/// noisy machine running debug builds.
pub const ELECTION_TIMEOUT: Duration = Duration::from_secs(15);
/// Bound on a node catching up with the leader (log replay or a snapshot install).
pub const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(120);
/// Socket timeout (connect, each read, each write) of an S3 request made by the helpers
/// on [`Remote`]: a frozen or partitioned node makes it an error within about that long.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Socket timeout of an admin request (`/_admin/cluster`, `/_admin/digest`).
pub const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Environment variable carrying the node-to-node secret.
pub const CLUSTER_SECRET_ENV: &str = "GATEWAY_CLUSTER_SECRET";
/// Header carrying the node-to-node secret on `/_cluster/` RPCs.
pub const CLUSTER_SECRET_HEADER: &str = "x-cluster-secret";
/// How many disk pairs the configuration file lists.
pub const PAIRS: usize = 2;
/// When set, the temp folder of a cluster whose test failed is kept (and its path printed)
/// for `gateway fsck` and a look at the data.
pub const KEEP_ENV: &str = "CLUSTER_KEEP_DIR";
/// Bound on a `gateway fsck` or `gateway admin` run.
const CLI_TIMEOUT: Duration = Duration::from_secs(300);

/// Held by every live [`Cluster`]: the clusters of one test binary run one at a time
/// (three gateways each already load a 2-core machine), whatever `--test-threads` says.
static ONE_CLUSTER_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A running cluster of gateway processes; dropping it kills every node and removes its
/// temp folder.
pub struct Cluster {
    // Fields drop in order: the processes die before their folders are removed, and the
    // next cluster starts after both.
    nodes: Vec<Gateway>,
    secret: String,
    config: PathBuf,
    /// `None` once kept (see [`KEEP_ENV`]).
    root: Option<tempfile::TempDir>,
    _one_at_a_time: MutexGuard<'static, ()>,
}

impl Cluster {
    /// Starts `n` fresh nodes (ids 1..=n) with the same `--peers`, credentials, admin token
    /// and cluster secret, plus `extra_args` (e.g. `["--snapshot-logs", "50"]`) on every
    /// node; returns once every node reports the same leader (bounded by
    /// [`ELECTION_TIMEOUT`]) and the full membership.
    ///
    /// The ports are chosen first (bind 127.0.0.1:0, read the port, release it) since each
    /// node names its peers by their S3 listen address. The nodes are started concurrently:
    /// a node may wait for its peers before it prints `listening on`.
    pub fn start(n: usize, extra_args: &[&str]) -> Cluster {
        Self::start_in(&vec![Placement::default(); n], extra_args)
    }

    /// Like [`Cluster::start`], one node per placement (node `i + 1` listens on
    /// `places[i].host`, inside `places[i].netns` if set, and restarts there); the peers
    /// name those addresses. E.g. the placements of a [`crate::netns::NetLab`].
    pub fn start_in(places: &[Placement], extra_args: &[&str]) -> Cluster {
        Self::start_placed_bins(places, &[], extra_args, &|_| Vec::new())
    }

    /// Like [`Cluster::start`], node `id` also given `node_args(id)` (its own certificate
    /// files, for example), kept across its restarts.
    pub fn start_per_node(
        n: usize,
        extra_args: &[&str],
        node_args: &dyn Fn(usize) -> Vec<String>,
    ) -> Cluster {
        Self::start_placed_bins(&vec![Placement::default(); n], &[], extra_args, node_args)
    }

    /// Like [`Cluster::start`], node `i + 1` running binary `bins[i]` (a mixed-version
    /// group for an upgrade test; [`crate::Gateway::restart_with_bin`] changes one).
    pub fn start_bins(bins: &[PathBuf], extra_args: &[&str]) -> Cluster {
        Self::start_placed_bins(
            &vec![Placement::default(); bins.len()],
            bins,
            extra_args,
            &|_| Vec::new(),
        )
    }

    /// The placements and, where given, the binaries (`bins` empty: the default one), and
    /// each node's own arguments.
    fn start_placed_bins(
        places: &[Placement],
        bins: &[PathBuf],
        extra_args: &[&str],
        node_args: &dyn Fn(usize) -> Vec<String>,
    ) -> Cluster {
        let n = places.len();
        assert!(n >= 1, "a cluster has at least one node");
        // A test that panicked while holding it poisoned it; its cluster is gone all the same.
        let one_at_a_time = ONE_CLUSTER_AT_A_TIME
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let root = tempfile::Builder::new()
            .prefix("e2e-cluster-")
            .tempdir()
            .expect("create the cluster's temp folder");
        let config = root.path().join("cluster.toml");
        std::fs::write(&config, pairs_toml(&root.path().join("disks")))
            .expect("write the cluster's config file");
        let ports = free_ports(n);
        let peers = ports
            .iter()
            .enumerate()
            .map(|(i, &p)| format!("{}={}", i + 1, SocketAddr::new(places[i].host, p)))
            .collect::<Vec<_>>()
            .join(",");
        let keys = GroupKeys::random();
        let options: Vec<(GatewayOptions, Placement)> = (1..=n)
            .map(|id| {
                let args = extra_args
                    .iter()
                    .map(|a| a.to_string())
                    .chain(node_args(id));
                let opts = GatewayOptions {
                    bin: bins.get(id - 1).cloned(),
                    ..keys.node_options(id, root.path(), ports[id - 1], &peers, &config, args)
                };
                (opts, places[id - 1].clone())
            })
            .collect();
        let nodes = start_nodes(options);
        let secret = keys.secret;
        let cluster = Cluster {
            nodes,
            secret,
            config,
            root: Some(root),
            _one_at_a_time: one_at_a_time,
        };
        // Every node names itself right, knows the full membership, and agrees on a leader.
        let want: Vec<u64> = (1..=n as u64).collect();
        let mut last = String::new();
        let formed = crate::poll_until(ELECTION_TIMEOUT, || {
            let all_members = cluster
                .ids()
                .into_iter()
                .all(|id| match cluster.status(id) {
                    Ok(st) => {
                        assert_eq!(
                            st.node_id, id as u64,
                            "node {id} reports another id: {st:?}"
                        );
                        st.members == want
                    }
                    Err(_) => false,
                });
            match cluster.leader_among(&cluster.ids()) {
                Ok(_) if all_members => true,
                Ok(_) => {
                    last = cluster.describe();
                    false
                }
                Err(answers) => {
                    last = answers;
                    false
                }
            }
        });
        assert!(
            formed,
            "the {n} nodes did not form one group with a leader within {ELECTION_TIMEOUT:?}:\n{last}"
        );
        cluster
    }

    /// How many nodes the cluster has.
    pub fn size(&self) -> usize {
        self.nodes.len()
    }

    /// Every node id, 1..=n.
    pub fn ids(&self) -> Vec<usize> {
        (1..=self.nodes.len()).collect()
    }

    /// Every node id but `except`.
    pub fn ids_except(&self, except: &[usize]) -> Vec<usize> {
        self.ids()
            .into_iter()
            .filter(|id| !except.contains(id))
            .collect()
    }

    /// Ids of the nodes whose process runs and is not paused.
    pub fn live(&self) -> Vec<usize> {
        self.ids()
            .into_iter()
            .filter(|&id| self.node(id).is_started() && !self.node(id).is_paused())
            .collect()
    }

    /// Node `id`'s process harness.
    pub fn node(&self, id: usize) -> &Gateway {
        assert!(
            (1..=self.nodes.len()).contains(&id),
            "no node {id} in a cluster of {}",
            self.nodes.len()
        );
        &self.nodes[id - 1]
    }

    /// Node `id`'s process harness, to kill, pause or restart it.
    pub fn node_mut(&mut self, id: usize) -> &mut Gateway {
        assert!(
            (1..=self.nodes.len()).contains(&id),
            "no node {id} in a cluster of {}",
            self.nodes.len()
        );
        &mut self.nodes[id - 1]
    }

    /// Node `id`'s address and credentials, for client threads.
    pub fn remote(&self, id: usize) -> Remote {
        self.node(id).remote()
    }

    /// An SDK client of node `id` (no retries).
    pub fn client(&self, id: usize) -> Client {
        self.node(id).client()
    }

    /// Node `id`'s process id, while it runs.
    pub fn pid(&self, id: usize) -> Option<u32> {
        self.node(id).pid()
    }

    /// SIGKILL to node `id`.
    pub fn kill9(&mut self, id: usize) {
        self.node_mut(id).kill9();
    }

    /// SIGSTOP to node `id`.
    pub fn pause(&mut self, id: usize) {
        self.node_mut(id).pause();
    }

    /// SIGCONT to node `id`.
    pub fn resume(&mut self, id: usize) {
        self.node_mut(id).resume();
    }

    /// Starts node `id` again with the same data folder, port and flags (SIGKILL first if
    /// it still runs).
    pub fn restart(&mut self, id: usize) {
        self.node_mut(id).restart();
    }

    /// Empties node `id`'s data folder (not the shared disks); the node must be killed.
    pub fn wipe_data(&mut self, id: usize) {
        self.node_mut(id).wipe_data();
    }

    /// SIGKILL to every node.
    pub fn kill_all(&mut self) {
        for n in &mut self.nodes {
            n.kill9();
        }
    }

    /// Waits (at most `timeout`) until every replica of every metadata group, on every
    /// node, reports the same `last_applied` and no lag, twice in a row 500 ms apart: a
    /// node's groups are replicated apart, and one node's replica of a group may lag the
    /// write another group's entry followed. Before [`Cluster::stop_all`] and a per-node
    /// `fsck`.
    pub fn wait_groups_quiet(&self, timeout: Duration) {
        let mut last = None;
        let quiet = crate::poll_until(timeout, || {
            let now = self
                .groups_applied()
                .filter(|a| a.values().all(|v| v.iter().all(|x| *x == v[0])));
            let same = now.is_some() && now == last;
            last = now;
            if !same {
                thread::sleep(Duration::from_millis(500));
            }
            same
        });
        assert!(
            quiet,
            "the metadata groups did not settle:\n{}",
            self.describe()
        );
    }

    /// Every group's `last_applied` on every node that holds it (`admin groups list`);
    /// None if a node does not answer or a replica lags its leader.
    fn groups_applied(&self) -> Option<std::collections::BTreeMap<u64, Vec<u64>>> {
        let mut applied: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
        for id in self.live() {
            let run = self.admin_cli(id, &["groups", "list"]);
            let v: serde_json::Value = serde_json::from_str(&run.stdout).ok()?;
            for g in v["groups"].as_array()? {
                if g["held"] == true {
                    if g["lag"].as_u64()? != 0 {
                        return None;
                    }
                    applied
                        .entry(g["id"].as_u64()?)
                        .or_default()
                        .push(g["last_applied"].as_u64()?);
                }
            }
        }
        Some(applied)
    }

    /// Stops every node gracefully (see [`Gateway::stop`]): each checkpoints its replicas
    /// at what it has applied, so that an offline check of one node sees every group it
    /// holds at the same point (after SIGKILL, each group's log replays to its own last
    /// durable commit mark, and two groups' marks may stand at different moments).
    pub fn stop_all(&mut self) {
        for n in &mut self.nodes {
            let ended = n.stop(Duration::from_secs(30));
            assert!(
                !ended.contains("killed"),
                "a node did not stop on SIGTERM: {ended}"
            );
        }
    }

    /// The cluster's temp folder.
    pub fn root(&self) -> &Path {
        self.root.as_ref().expect("kept only on drop").path()
    }

    /// The `--config` file every node uses.
    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// The folder holding the shared disks.
    pub fn disks_dir(&self) -> PathBuf {
        self.root().join("disks")
    }

    /// The value of `GATEWAY_CLUSTER_SECRET` on every node.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// `GET /_admin/cluster` on node `id` (socket timeout [`ADMIN_TIMEOUT`]).
    pub fn status(&self, id: usize) -> Result<ClusterStatus, String> {
        let resp = self
            .remote(id)
            .admin_get("/_admin/cluster", ADMIN_TIMEOUT)
            .map_err(|e| format!("no answer: {e}"))?;
        if resp.status != 200 {
            return Err(format!("status {}: {}", resp.status, resp.text()));
        }
        ClusterStatus::parse(&resp.text())
    }

    /// The leader every live node agrees on right now (one round of status requests).
    pub fn leader(&self) -> Option<usize> {
        self.leader_among(&self.live()).ok()
    }

    /// One round: `Ok(L)` when node L (one of `among`) says it is the leader and every node
    /// of `among` answers with `leader: L`; otherwise what each node said.
    pub fn leader_among(&self, among: &[usize]) -> Result<usize, String> {
        let answers: Vec<(usize, Result<ClusterStatus, String>)> =
            among.iter().map(|&id| (id, self.status(id))).collect();
        let claimant = answers.iter().find_map(|(id, st)| match st {
            Ok(st) if st.state == "Leader" && st.leader == Some(*id as u64) => Some(*id),
            _ => None,
        });
        let agreed = claimant.filter(|&l| {
            answers
                .iter()
                .all(|(_, st)| st.as_ref().is_ok_and(|st| st.leader == Some(l as u64)))
        });
        agreed.ok_or_else(|| describe_answers(&answers))
    }

    /// Polls (every 100 ms, at most `timeout`) until the live nodes agree on a leader;
    /// panics with their last answers if they never do.
    pub fn wait_leader(&self, timeout: Duration) -> usize {
        self.wait_leader_among(&self.live(), timeout)
    }

    /// Like [`Cluster::wait_leader`], among the given nodes only (the leader is one of
    /// them).
    pub fn wait_leader_among(&self, among: &[usize], timeout: Duration) -> usize {
        self.try_wait_leader_among(among, timeout)
            .unwrap_or_else(|last| {
                panic!("no leader agreed on by nodes {among:?} within {timeout:?}:\n{last}")
            })
    }

    /// Like [`Cluster::wait_leader_among`]; `Err` with the last answers on timeout.
    pub fn try_wait_leader_among(
        &self,
        among: &[usize],
        timeout: Duration,
    ) -> Result<usize, String> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.leader_among(among) {
                Ok(l) => return Ok(l),
                Err(last) if Instant::now() >= deadline => return Err(last),
                Err(_) => thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// `GET /_admin/digest` on node `id`.
    pub fn digest(&self, id: usize) -> Result<Digest, String> {
        let resp = self
            .remote(id)
            .admin_get("/_admin/digest", ADMIN_TIMEOUT)
            .map_err(|e| format!("no answer: {e}"))?;
        if resp.status != 200 {
            return Err(format!("status {}: {}", resp.status, resp.text()));
        }
        Digest::parse(&resp.text())
    }

    /// Polls the digests of `among` (at most `timeout`) until they all report the same
    /// `last_applied`, and returns that digest. Whenever two nodes report the same
    /// `last_applied`, their tables must be identical: panics at once if not. Panics with
    /// the last answers on timeout.
    pub fn wait_same_digest(&self, among: &[usize], timeout: Duration) -> Digest {
        let deadline = Instant::now() + timeout;
        loop {
            let answers: Vec<(usize, Result<Digest, String>)> =
                among.iter().map(|&id| (id, self.digest(id))).collect();
            let ok: Vec<(usize, &Digest)> = answers
                .iter()
                .filter_map(|(id, d)| d.as_ref().ok().map(|d| (*id, d)))
                .collect();
            for (i, (a, da)) in ok.iter().enumerate() {
                for (b, db) in &ok[i + 1..] {
                    if da.last_applied == db.last_applied {
                        assert_eq!(
                            da.tables, db.tables,
                            "nodes {a} and {b} applied up to {} but their tables differ",
                            da.last_applied
                        );
                    }
                }
            }
            if ok.len() == among.len()
                && ok
                    .iter()
                    .all(|(_, d)| d.last_applied == ok[0].1.last_applied)
            {
                return ok[0].1.clone();
            }
            assert!(
                Instant::now() < deadline,
                "nodes {among:?} did not reach the same last_applied within {timeout:?}:\n{}",
                describe_answers(&answers)
            );
            thread::sleep(Duration::from_millis(200));
        }
    }

    /// Client threads, one per node, each writing and reading through its node until
    /// `stop` (at most 5 000 rounds): a round PUTs `during/<i>` (`i` = 1 000 × node + round)
    /// with `body(i)`, noting it in `acked` once acknowledged, then GETs `before/<round %
    /// before>` and checks it is `body(round % before)`. Each thread answers its slowest
    /// round and its failed requests.
    pub fn put_get_clients(
        &self,
        bucket: &str,
        before: u64,
        body: fn(u64) -> Vec<u8>,
        acked: &Arc<Mutex<BTreeMap<String, u64>>>,
        stop: &Arc<AtomicBool>,
    ) -> Clients {
        let threads = self
            .ids()
            .into_iter()
            .map(|id| {
                let (remote, stop, acked) = (self.remote(id), stop.clone(), acked.clone());
                let bucket = bucket.to_string();
                thread::spawn(move || {
                    let mut slowest = Duration::ZERO;
                    let mut failures = Vec::new();
                    for n in 0..5_000u64 {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let i = 1_000 * id as u64 + n;
                        let key = format!("during/{i}");
                        let t = Instant::now();
                        match remote.put(&bucket, &key, &body(i)) {
                            Ok(r) if r.status == 200 => {
                                acked
                                    .lock()
                                    .unwrap_or_else(|e| e.into_inner())
                                    .insert(key, i);
                            }
                            Ok(r) => failures.push(format!("PUT {key}: {} {}", r.status, r.text())),
                            Err(e) => failures.push(format!("PUT {key}: {e}")),
                        }
                        let read = format!("before/{}", n % before);
                        match remote.get(&bucket, &read) {
                            Ok(r) if r.status == 200 => {
                                crate::assert_same_body(&r.body, &body(n % before), &read);
                            }
                            Ok(r) => {
                                failures.push(format!("GET {read}: {} {}", r.status, r.text()))
                            }
                            Err(e) => failures.push(format!("GET {read}: {e}")),
                        }
                        slowest = slowest.max(t.elapsed());
                    }
                    (slowest, failures)
                })
            })
            .collect();
        Clients {
            threads,
            stop: stop.clone(),
        }
    }

    /// Checks that every key of `acked` reads back through every running node as `body`
    /// of its number.
    pub fn assert_all_read_back(
        &self,
        bucket: &str,
        acked: &BTreeMap<String, u64>,
        body: fn(u64) -> Vec<u8>,
    ) {
        for (key, &i) in acked {
            for id in self.live() {
                let r = self.remote(id).get(bucket, key).expect("GET");
                assert_eq!(r.status, 200, "GET {key} through node {id}: {}", r.text());
                crate::assert_same_body(&r.body, &body(i), key);
            }
        }
    }

    /// Polls (at most `timeout`) until node `id` acknowledges a PUT of `body` at
    /// `bucket/key` (any failure is retried every 100 ms); returns how long it took, or the
    /// last failure.
    pub fn put_until_ok(
        &self,
        id: usize,
        bucket: &str,
        key: &str,
        body: &[u8],
        timeout: Duration,
    ) -> Result<Duration, String> {
        let remote = self.remote(id);
        let start = Instant::now();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let last = match remote.put_timeout(bucket, key, body, ADMIN_TIMEOUT * 2) {
                Ok(r) if r.status == 200 => return Ok(start.elapsed()),
                Ok(r) => format!("status {} {:?}", r.status, r.error_code()),
                Err(e) => format!("no answer: {e}"),
            };
            if start.elapsed() >= timeout {
                return Err(format!("{attempts} attempts, the last: {last}"));
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// CreateBucket through node `id`, retried (at most [`ELECTION_TIMEOUT`]) while the
    /// answer is a 503 or no answer; a retry answered `BucketAlreadyOwnedByYou` counts as
    /// created (the earlier attempt was applied).
    pub fn create_bucket(&self, id: usize, bucket: &str) {
        let remote = self.remote(id);
        let deadline = Instant::now() + ELECTION_TIMEOUT;
        for attempt in 1.. {
            let last = match remote
                .signed("PUT", &format!("/{bucket}"))
                .timeout(REQUEST_TIMEOUT)
                .try_send()
            {
                Ok(r) if r.status == 200 => return,
                Ok(r)
                    if attempt > 1
                        && r.status == 409
                        && r.error_code().as_deref() == Some("BucketAlreadyOwnedByYou") =>
                {
                    return;
                }
                Ok(r) if r.status != 503 => {
                    panic!(
                        "CreateBucket {bucket} through node {id}: status {}: {}",
                        r.status,
                        r.text()
                    )
                }
                Ok(r) => format!("503 {}", r.text()),
                Err(e) => format!("no answer: {e}"),
            };
            assert!(
                Instant::now() < deadline,
                "CreateBucket {bucket} through node {id}: still failing after {attempt} attempts: {last}"
            );
            thread::sleep(Duration::from_millis(200));
        }
    }

    /// `gateway fsck --data <node id's data folder>` with the default grace (the node must
    /// be stopped).
    pub fn fsck(&self, id: usize) -> Run {
        let node = self.node(id);
        assert!(!node.is_started(), "fsck of node {id} while it runs");
        run_gateway(&["fsck", "--data", path_str(node.data_dir())], &[])
    }

    /// Waits until every group's replicas have caught up (see
    /// [`Cluster::wait_groups_quiet`]), stops every node gracefully and checks that `gateway
    /// fsck` finds each data folder, all its groups together, clean. Answers each node's
    /// run, for further checks of its report. A node stopped before (one removed from the
    /// cluster) is left out.
    pub fn stop_quiet_and_fsck(&mut self) -> Vec<(usize, Run)> {
        self.wait_groups_quiet(Duration::from_secs(60));
        let running: Vec<usize> = self
            .ids()
            .into_iter()
            .filter(|&id| self.node(id).is_started())
            .collect();
        self.stop_all();
        running
            .into_iter()
            .map(|id| {
                let run = self.fsck(id);
                assert!(
                    run.stdout.contains("fsck: clean"),
                    "fsck of node {id}:\n{run}\n{}",
                    self.node(id).log_tail(60)
                );
                (id, run)
            })
            .collect()
    }

    /// Stops every node and checks that `gateway fsck` finds each data folder clean.
    pub fn kill_all_and_fsck(&mut self) {
        self.kill_all();
        for id in self.ids() {
            let run = self.fsck(id);
            assert_eq!(run.code, Some(0), "fsck of node {id}:\n{run}");
            assert!(
                run.stdout.contains("fsck: clean"),
                "fsck of node {id}:\n{run}"
            );
        }
    }

    /// `gateway admin groups audit` through node `id` (with `--dry-run` if `dry_run`): its
    /// JSON report, checked clean (no confirmed difference between FileDB's references
    /// and those the index names).
    pub fn assert_audit_clean(&self, id: usize, dry_run: bool) -> Value {
        let mut args = vec!["groups", "audit"];
        if dry_run {
            args.push("--dry-run");
        }
        let run = self.admin_cli(id, &args);
        assert_eq!(run.code, Some(0), "groups audit through node {id}: {run}");
        let report: Value = serde_json::from_str(&run.stdout).expect("the audit prints JSON");
        assert_eq!(
            report["clean"], true,
            "the audit through node {id}: {report:#}"
        );
        assert_eq!(report["marked"], serde_json::json!([]), "{report:#}");
        report
    }

    /// `gateway admin --endpoint <node id> ARGS` with the admin token in the environment,
    /// e.g. `["cluster", "status"]`.
    pub fn admin_cli(&self, id: usize, args: &[&str]) -> Run {
        let node = self.node(id);
        let endpoint = node.endpoint();
        let mut all = vec!["admin", "--endpoint", endpoint.as_str()];
        all.extend_from_slice(args);
        run_gateway(&all, &[("GATEWAY_ADMIN_TOKEN", node.admin_token())])
    }

    /// `gateway admin groups list` through node `id`, as JSON.
    pub fn groups(&self, id: usize) -> Value {
        let run = self.admin_cli(id, &["groups", "list"]);
        assert_eq!(run.code, Some(0), "groups list through node {id}: {run}");
        serde_json::from_str(&run.stdout).expect("groups list prints JSON")
    }

    /// `gateway admin groups split ARGS` through node `via`, then a poll (at most
    /// `timeout`) until every node reports the planned map's version with the new group,
    /// of `kind`, led. Answers the plan (`version`, `group`, `from`).
    pub fn split_and_wait(
        &self,
        via: usize,
        args: &[&str],
        kind: &str,
        timeout: Duration,
    ) -> Value {
        let mut all = vec!["groups", "split"];
        all.extend_from_slice(args);
        let run = self.admin_cli(via, &all);
        assert_eq!(run.code, Some(0), "groups split {args:?}: {run}");
        let planned: Value = serde_json::from_str(&run.stdout).expect("groups split prints JSON");
        let committed = crate::poll_until(timeout, || {
            self.ids().iter().all(|&id| {
                let v = self.groups(id);
                v["version"] == planned["version"]
                    && v["groups"].as_array().is_some_and(|g| {
                        g.iter().any(|g| {
                            g["id"] == planned["group"]
                                && g["kind"] == kind
                                && !g["leader"].is_null()
                        })
                    })
            })
        });
        assert!(
            committed,
            "the split {planned} never showed on every node:\n{}",
            self.describe()
        );
        planned
    }

    /// What every node says, one line each (a paused node is not asked), for failure
    /// messages.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for id in self.ids() {
            let node = self.node(id);
            let line = if !node.is_started() {
                "stopped".to_string()
            } else if node.is_paused() {
                "paused".to_string()
            } else {
                match self.status(id) {
                    Ok(st) => format!("{st:?}"),
                    Err(e) => e,
                }
            };
            s.push_str(&format!("node {id} ({}): {line}\n", node.remote().addr()));
        }
        s
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill_all();
        if thread::panicking()
            && std::env::var_os(KEEP_ENV).is_some()
            && let Some(root) = self.root.take()
        {
            eprintln!(
                "cluster folder kept ({KEEP_ENV}): {}",
                root.keep().display()
            );
        }
    }
}

/// What `GET /_admin/cluster` (and `gateway admin cluster status`) says about a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterStatus {
    pub node_id: u64,
    /// The leader this node knows of, if any.
    pub leader: Option<u64>,
    /// Voters, sorted.
    pub members: Vec<u64>,
    /// Learners, sorted.
    pub learners: Vec<u64>,
    pub term: u64,
    pub last_applied: u64,
    /// `Leader`, `Follower`, `Candidate`, `Learner` or `Shutdown`.
    pub state: String,
    /// The index of the last log entry, if any (`None` also when not sent).
    pub last_log_index: Option<u64>,
    /// The last index of the latest snapshot, if any (`None` also when not sent); the log
    /// up to about there is purged after each one.
    pub snapshot: Option<u64>,
    /// The index of the last log entry removed by a purge, if any (`None` also when not
    /// sent).
    pub purged: Option<u64>,
    /// The group's metadata format version as the node applied it (`None`: not sent, a
    /// release from before it).
    pub cluster_version: Option<u64>,
    /// The newest format the node's binary knows (`None`: not sent, a release from
    /// before it).
    pub format_version: Option<u64>,
}

impl ClusterStatus {
    /// Parses the JSON object; every field is required.
    pub fn parse(text: &str) -> Result<ClusterStatus, String> {
        let v: Value =
            serde_json::from_str(text.trim()).map_err(|e| format!("not JSON ({e}): {text}"))?;
        let leader = match v.get("leader") {
            Some(Value::Null) => None,
            Some(l) => Some(
                l.as_u64()
                    .ok_or_else(|| format!("leader is neither null nor a node id: {text}"))?,
            ),
            None => return Err(format!("no leader field: {text}")),
        };
        let ids = |key: &str| -> Result<Vec<u64>, String> {
            let mut ids = v
                .get(key)
                .and_then(Value::as_array)
                .ok_or_else(|| format!("no {key} array: {text}"))?
                .iter()
                .map(|x| {
                    x.as_u64()
                        .ok_or_else(|| format!("{key}: not a node id: {text}"))
                })
                .collect::<Result<Vec<u64>, String>>()?;
            ids.sort_unstable();
            Ok(ids)
        };
        Ok(ClusterStatus {
            node_id: u64_field(&v, "node_id", text)?,
            leader,
            members: ids("members")?,
            learners: ids("learners")?,
            term: u64_field(&v, "term", text)?,
            last_applied: u64_field(&v, "last_applied", text)?,
            state: v
                .get("state")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("no state string: {text}"))?
                .to_string(),
            last_log_index: v.get("last_log_index").and_then(Value::as_u64),
            snapshot: v.get("snapshot").and_then(Value::as_u64),
            purged: v.get("purged").and_then(Value::as_u64),
            cluster_version: v.get("cluster_version").and_then(Value::as_u64),
            format_version: v.get("format_version").and_then(Value::as_u64),
        })
    }
}

/// What `GET /_admin/digest` says: a digest of each metadata table at an applied index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digest {
    pub last_applied: u64,
    /// Table name -> its digest (the JSON value's text, a hex string as sent).
    pub tables: BTreeMap<String, String>,
}

impl Digest {
    /// Parses the JSON object; `tables` must name at least one table.
    pub fn parse(text: &str) -> Result<Digest, String> {
        let v: Value =
            serde_json::from_str(text.trim()).map_err(|e| format!("not JSON ({e}): {text}"))?;
        let tables = v
            .get("tables")
            .and_then(Value::as_object)
            .ok_or_else(|| format!("no tables object: {text}"))?
            .iter()
            .map(|(k, d)| {
                let d = match d {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), d)
            })
            .collect::<BTreeMap<_, _>>();
        if tables.is_empty() {
            return Err(format!("no table digests: {text}"));
        }
        Ok(Digest {
            last_applied: u64_field(&v, "last_applied", text)?,
            tables,
        })
    }
}

fn u64_field(v: &Value, key: &str, text: &str) -> Result<u64, String> {
    v.get(key)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("no unsigned integer {key}: {text}"))
}

/// One line per node: its id and what it answered.
fn describe_answers<T: fmt::Debug>(answers: &[(usize, Result<T, String>)]) -> String {
    answers
        .iter()
        .map(|(id, a)| match a {
            Ok(v) => format!("node {id}: {v:?}\n"),
            Err(e) => format!("node {id}: {e}\n"),
        })
        .collect()
}

/// The credentials, admin token and cluster secret every node of a group shares.
#[derive(Debug, Clone)]
pub struct GroupKeys {
    pub secret: String,
    pub access_key: String,
    pub secret_key: String,
    pub admin_token: String,
}

impl GroupKeys {
    pub fn random() -> GroupKeys {
        GroupKeys {
            secret: random_token(32),
            access_key: format!("E2E{}", random_token(17).to_uppercase()),
            secret_key: random_token(40),
            admin_token: random_token(32),
        }
    }

    /// Node `id` of a group: data in `root/node{id}`, `--listen` on `port`, `--node-id`,
    /// `--peers peers`, `--config config`, then `args`.
    pub fn node_options(
        &self,
        id: usize,
        root: &Path,
        port: u16,
        peers: &str,
        config: &Path,
        args: impl IntoIterator<Item = String>,
    ) -> GatewayOptions {
        let mut all = vec![
            "--node-id".to_string(),
            id.to_string(),
            "--peers".to_string(),
            peers.to_owned(),
            "--config".to_string(),
            path_str(config).to_string(),
        ];
        all.extend(args);
        GatewayOptions {
            data_dir: Some(root.join(format!("node{id}"))),
            port,
            access_key: Some(self.access_key.clone()),
            secret_key: Some(self.secret_key.clone()),
            admin_token: Some(self.admin_token.clone()),
            args: all,
            env: vec![(CLUSTER_SECRET_ENV.to_string(), self.secret.clone())],
            label: Some(format!("node {id}")),
            stderr_file: None,
            bin: None,
        }
    }
}

/// Starts the nodes at once (a node may wait for its peers before it prints `listening
/// on`). A node that fails to start panics in its thread; the others are dropped (killed)
/// with the results, then this panics with the first failure.
pub fn start_nodes(options: Vec<(GatewayOptions, Placement)>) -> Vec<Gateway> {
    let started: Vec<thread::Result<Gateway>> = thread::scope(|s| {
        let handles: Vec<_> = options
            .into_iter()
            .map(|(o, place)| s.spawn(move || Gateway::start_placed(o, place)))
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    let mut nodes = Vec::with_capacity(started.len());
    let mut failure = None;
    for r in started {
        match r {
            Ok(gw) => nodes.push(gw),
            Err(panic) => failure = failure.or(Some(panic)),
        }
    }
    if let Some(panic) = failure {
        drop(nodes);
        std::panic::resume_unwind(panic);
    }
    nodes
}

/// How a CLI run ended and what it printed.
#[derive(Debug, Clone)]
pub struct Run {
    /// The exit code; `None` when killed by a signal (or by the harness's time bound).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "exit code {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs the gateway binary with `args` and extra environment, bounded by a 300 s limit
/// (killed past it: `code` is `None`).
pub fn run_gateway(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut child = Command::new(gateway_bin())
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn gateway {args:?}: {e}"));
    let read_all = |mut pipe: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let stdout = read_all(Box::new(child.stdout.take().expect("piped stdout")));
    let stderr = read_all(Box::new(child.stderr.take().expect("piped stderr")));
    let deadline = Instant::now() + CLI_TIMEOUT;
    let code = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status.code(),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    Run {
        code,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}

/// `n` distinct ports free right now on 127.0.0.1 (see [`crate::ports`]).
pub fn free_ports(n: usize) -> Vec<u16> {
    crate::ports::free_ports(n)
}

/// The TOML of [`PAIRS`] pairs of local disks under `disks` (created here).
/// A config file listing shared local disk pairs under `disks` (folders created).
pub fn pairs_toml(disks: &Path) -> String {
    let mut text = String::new();
    for pair in 0..PAIRS {
        let paths: Vec<PathBuf> = (0..2)
            .map(|d| disks.join(format!("pair{pair}-{d}")))
            .collect();
        for p in &paths {
            std::fs::create_dir_all(p)
                .unwrap_or_else(|e| panic!("create disk folder {}: {e}", p.display()));
        }
        text.push_str(&format!(
            "[[pairs]]\nid = {pair}\ndisks = [\"local:{}\", \"local:{}\"]\n\n",
            path_str(&paths[0]),
            path_str(&paths[1])
        ));
    }
    text
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("temp paths are UTF-8")
}

/// Percent-encodes a query parameter value (everything but unreserved characters).
pub fn encode_query_value(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for b in v.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                s.push(b as char)
            }
            _ => s.push_str(&format!("%{b:02X}")),
        }
    }
    s
}

/// How a multipart upload made by [`Remote::multipart_put`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultipartOutcome {
    /// CompleteMultipartUpload was acknowledged: the object is the parts' concatenation.
    Completed,
    /// A step before CompleteMultipartUpload failed: the object was not touched.
    NotCompleted(String),
    /// CompleteMultipartUpload was sent and not acknowledged: the object may or may not
    /// have been replaced.
    CompleteFailed(String),
}

/// Synchronous S3 calls by hand-signed raw requests (one connection each, socket timeout
/// [`REQUEST_TIMEOUT`]), for client threads: an `Err` is no HTTP answer at all (refused,
/// reset, timed out); an HTTP error is an `Ok` response with its status.
impl Remote {
    /// PutObject.
    pub fn put(&self, bucket: &str, key: &str, body: &[u8]) -> io::Result<RawResponse> {
        self.put_timeout(bucket, key, body, REQUEST_TIMEOUT)
    }

    /// PutObject with another socket timeout.
    pub fn put_timeout(
        &self,
        bucket: &str,
        key: &str,
        body: &[u8],
        io_timeout: Duration,
    ) -> io::Result<RawResponse> {
        self.signed("PUT", &object_target(bucket, key))
            .body(body)
            .timeout(io_timeout)
            .try_send()
    }

    /// GetObject.
    pub fn get(&self, bucket: &str, key: &str) -> io::Result<RawResponse> {
        self.signed("GET", &object_target(bucket, key))
            .timeout(REQUEST_TIMEOUT)
            .try_send()
    }

    /// DeleteObject (S3 acknowledges with 204).
    pub fn delete(&self, bucket: &str, key: &str) -> io::Result<RawResponse> {
        self.signed("DELETE", &object_target(bucket, key))
            .timeout(REQUEST_TIMEOUT)
            .try_send()
    }

    /// CopyObject `bucket/src` -> `bucket/dst`. Acknowledged when
    /// [`copy_acknowledged`] says so (a 200 may carry an error).
    pub fn copy(&self, bucket: &str, src: &str, dst: &str) -> io::Result<RawResponse> {
        let source = format!("/{bucket}/{}", encode_key(src));
        self.signed("PUT", &object_target(bucket, dst))
            .header("x-amz-copy-source", &source)
            .timeout(REQUEST_TIMEOUT)
            .try_send()
    }

    /// Create, UploadPart for each part (all but the last at least 5 MiB), Complete; every
    /// step through this node.
    pub fn multipart_put(&self, bucket: &str, key: &str, parts: &[&[u8]]) -> MultipartOutcome {
        let target = object_target(bucket, key);
        let created = match self
            .signed("POST", &format!("{target}?uploads"))
            .timeout(REQUEST_TIMEOUT)
            .try_send()
        {
            Ok(r) if r.status == 200 => r,
            Ok(r) => {
                return MultipartOutcome::NotCompleted(format!(
                    "CreateMultipartUpload: status {}: {}",
                    r.status,
                    r.text()
                ));
            }
            Err(e) => return MultipartOutcome::NotCompleted(format!("CreateMultipartUpload: {e}")),
        };
        let Some(upload_id) = crate::xml_element(&created.text(), "UploadId") else {
            return MultipartOutcome::NotCompleted(format!("no UploadId: {}", created.text()));
        };
        let upload_q = encode_query_value(&upload_id);
        let mut etags = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            let n = i + 1;
            match self
                .signed(
                    "PUT",
                    &format!("{target}?partNumber={n}&uploadId={upload_q}"),
                )
                .body(part)
                .timeout(REQUEST_TIMEOUT)
                .try_send()
            {
                Ok(r) if r.status == 200 => match r.header("etag") {
                    Some(etag) => etags.push(etag.to_string()),
                    None => return MultipartOutcome::NotCompleted(format!("part {n}: no ETag")),
                },
                Ok(r) => {
                    return MultipartOutcome::NotCompleted(format!(
                        "part {n}: status {}: {}",
                        r.status,
                        r.text()
                    ));
                }
                Err(e) => return MultipartOutcome::NotCompleted(format!("part {n}: {e}")),
            }
        }
        let mut xml = String::from("<CompleteMultipartUpload>");
        for (i, etag) in etags.iter().enumerate() {
            xml.push_str(&format!(
                "<Part><PartNumber>{}</PartNumber><ETag>{etag}</ETag></Part>",
                i + 1
            ));
        }
        xml.push_str("</CompleteMultipartUpload>");
        match self
            .signed("POST", &format!("{target}?uploadId={upload_q}"))
            .body(xml.as_bytes())
            .timeout(REQUEST_TIMEOUT)
            .try_send()
        {
            Ok(r)
                if r.status == 200
                    && r.text().contains("<CompleteMultipartUploadResult")
                    && !r.text().contains("<Error>") =>
            {
                MultipartOutcome::Completed
            }
            Ok(r) => MultipartOutcome::CompleteFailed(format!(
                "CompleteMultipartUpload: status {}: {}",
                r.status,
                r.text()
            )),
            Err(e) => MultipartOutcome::CompleteFailed(format!("CompleteMultipartUpload: {e}")),
        }
    }

    /// Every key of a bucket, in listing order (ListObjectsV2, page after page, at most
    /// 100 pages); `Err` on any failed page.
    pub fn list_keys(&self, bucket: &str) -> Result<Vec<String>, String> {
        let mut keys = Vec::new();
        let mut token: Option<String> = None;
        for _page in 0..100 {
            let mut target = format!("/{bucket}?list-type=2");
            if let Some(t) = &token {
                target.push_str(&format!("&continuation-token={}", encode_query_value(t)));
            }
            let r = self
                .signed("GET", &target)
                .timeout(REQUEST_TIMEOUT)
                .try_send()
                .map_err(|e| format!("ListObjectsV2 {bucket}: {e}"))?;
            if r.status != 200 {
                return Err(format!(
                    "ListObjectsV2 {bucket}: status {}: {}",
                    r.status,
                    r.text()
                ));
            }
            let text = r.text();
            keys.extend(xml_elements(&text, "Key"));
            let truncated = crate::xml_element(&text, "IsTruncated").as_deref() == Some("true");
            match crate::xml_element(&text, "NextContinuationToken") {
                Some(t) if truncated => token = Some(t),
                _ => return Ok(keys),
            }
        }
        Err(format!("ListObjectsV2 {bucket}: more than 100 pages"))
    }
}

/// Whether a CopyObject answer acknowledges the copy (200 with a `CopyObjectResult`).
pub fn copy_acknowledged(r: &RawResponse) -> bool {
    let text = r.text();
    r.status == 200 && text.contains("<CopyObjectResult") && !text.contains("<Error>")
}

/// Whether an answer is the "no quorum" refusal: HTTP 503 with the S3 code
/// `ServiceUnavailable` or `SlowDown`.
pub fn is_unavailable(r: &RawResponse) -> bool {
    r.status == 503
        && matches!(
            r.error_code().as_deref(),
            Some("ServiceUnavailable") | Some("SlowDown")
        )
}

/// `/<bucket>/<encoded key>`.
fn object_target(bucket: &str, key: &str) -> String {
    format!("/{bucket}/{}", encode_key(key))
}

/// The text of every `<tag>…</tag>` in `xml`, in order (the five XML entities decoded).
pub fn xml_elements(xml: &str, tag: &str) -> Vec<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let mut out = Vec::new();
    let mut rest = xml;
    // Bounded: every iteration consumes at least the opening tag.
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        let Some(end) = after.find(&close) else { break };
        out.push(
            after[..end]
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&quot;", "\"")
                .replace("&apos;", "'")
                .replace("&amp;", "&"),
        );
        rest = &after[end + close.len()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cluster_status() {
        let st = ClusterStatus::parse(
            r#"{"node_id": 1, "leader": 2, "members": [3,1,2], "learners": [],
                "term": 5, "last_applied": 123, "state": "Follower"}"#,
        )
        .unwrap();
        assert_eq!(st.node_id, 1);
        assert_eq!(st.leader, Some(2));
        assert_eq!(st.members, vec![1, 2, 3]);
        assert_eq!((st.term, st.last_applied), (5, 123));
        assert_eq!(st.state, "Follower");
        assert_eq!((st.last_log_index, st.snapshot), (None, None));
        let snap = ClusterStatus::parse(
            r#"{"node_id":1,"leader":1,"members":[1],"learners":[],"term":2,"last_applied":120,
                "last_log_index":121,"snapshot":100,"state":"Leader"}"#,
        )
        .unwrap();
        assert_eq!((snap.last_log_index, snap.snapshot), (Some(121), Some(100)));
        let none = ClusterStatus::parse(
            r#"{"node_id":3,"leader":null,"members":[1,2,3],"learners":[],"term":7,"last_applied":0,"state":"Candidate"}"#,
        )
        .unwrap();
        assert_eq!(none.leader, None);
        assert!(ClusterStatus::parse(r#"{"node_id":1}"#).is_err());
        assert!(ClusterStatus::parse("nope").is_err());
    }

    #[test]
    fn parses_digest() {
        let d = Digest::parse(r#"{"last_applied": 9, "tables": {"files": "ab", "objects": "cd"}}"#)
            .unwrap();
        assert_eq!(d.last_applied, 9);
        assert_eq!(d.tables.get("objects").map(String::as_str), Some("cd"));
        assert!(Digest::parse(r#"{"last_applied": 9, "tables": {}}"#).is_err());
    }

    #[test]
    fn finds_every_element() {
        let xml = "<R><Contents><Key>a&amp;b</Key></Contents><Contents><Key>c</Key></Contents></R>";
        assert_eq!(xml_elements(xml, "Key"), vec!["a&b", "c"]);
        assert_eq!(encode_query_value("a+b/c="), "a%2Bb%2Fc%3D");
    }

    #[test]
    fn free_ports_are_distinct() {
        let ports = free_ports(3);
        assert!(ports[0] != ports[1] && ports[1] != ports[2] && ports[0] != ports[2]);
    }
}
