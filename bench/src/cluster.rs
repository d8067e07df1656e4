//! A group of `gateway serve` processes on 127.0.0.1 sharing one metadata Raft group
//! (`--node-id N --peers 1=ADDR,2=ADDR,3=ADDR`) and one disk pair every node reaches (two
//! local folders, listed in a config file), each node with its own fresh data folder.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;

use crate::procs::{GatewayLaunch, Secrets, Server, free_port, spawn_gateway};
use crate::rng::Rng;
use crate::s3::Client;

/// A node's view of the group, as `GET /_admin/cluster` answers it.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct ClusterView {
    pub node_id: u64,
    pub leader: Option<u64>,
    pub term: u64,
    pub state: String,
    /// The index of the node's last log entry (appended, not necessarily committed).
    #[serde(default)]
    pub last_log_index: Option<u64>,
}

/// Bound on one status request (loopback: an answer takes well under a millisecond).
const STATUS_TIMEOUT: Duration = Duration::from_secs(2);

/// `GET /_admin/cluster` on the node behind `admin` (a client with the admin token).
pub async fn view(admin: &Client) -> Result<ClusterView, String> {
    let r = tokio::time::timeout(
        STATUS_TIMEOUT,
        admin.send_ok(Method::GET, "/_admin/cluster", &[], Bytes::new(), true),
    )
    .await
    .map_err(|_| format!("{}: /_admin/cluster: no answer", admin.host()))??;
    serde_json::from_slice(&r.head).map_err(|e| format!("{}: /_admin/cluster: {e}", admin.host()))
}

/// One member: its fixed address and data folder, so that it can be killed and started
/// again as the same node.
pub struct Node {
    pub id: u64,
    pub addr: SocketAddr,
    pub data: PathBuf,
    pub server: Option<Server>,
    launch: GatewayLaunch,
    pub s3: Client,
    pub native: Client,
    pub admin: Client,
}

impl Node {
    fn clients(addr: SocketAddr, s: &Secrets) -> (Client, Client, Client) {
        let s3 = Client::new(addr, Some((&s.access, &s.secret)), "us-east-1");
        let native = s3.with_bearer(&s.native);
        let admin = s3.with_bearer(&s.admin);
        (s3, native, admin)
    }

    pub fn running(&mut self) -> bool {
        self.server.as_mut().is_some_and(|s| s.alive())
    }

    pub fn log_tail(&self, lines: usize) -> String {
        crate::procs::log_tail(&self.launch.log, lines)
    }
}

/// A group of gateway nodes; every process is stopped when it is dropped, then its folder
/// removed.
pub struct Cluster {
    pub nodes: Vec<Node>,
    pub secrets: Secrets,
    // Dropped last: the processes are stopped before their folders go.
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts `n` nodes (ids 1..=n) on fresh folders under `root` and waits (bounded) until
    /// every node names the same leader. Blocking.
    pub fn start(bin: &Path, root: &Path, n: usize, rng: &mut Rng) -> Result<Cluster, String> {
        Cluster::start_with(bin, root, n, &[], rng)
    }

    /// [`Cluster::start`] with `args` added to every node's flags.
    pub fn start_with(
        bin: &Path,
        root: &Path,
        n: usize,
        args: &[String],
        rng: &mut Rng,
    ) -> Result<Cluster, String> {
        let dir = tempfile::Builder::new()
            .prefix("bench-cluster-")
            .tempdir_in(root)
            .map_err(|e| format!("temp folder in {}: {e}", root.display()))?;
        let base = dir.path().to_path_buf();
        // The pair every node writes to: two local folders, as a shared mount would be.
        let shared = base.join("shared");
        let disks = [shared.join("disk0"), shared.join("disk1")];
        for d in &disks {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        let config = base.join("cluster.toml");
        let text = format!(
            "[[pairs]]\nid = 0\ndisks = [\"local:{}\", \"local:{}\"]\n",
            disks[0].display(),
            disks[1].display()
        );
        std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;
        // Ports first: every node must know every address before any starts.
        let mut addrs = Vec::with_capacity(n);
        while addrs.len() < n {
            let a = SocketAddr::from(([127, 0, 0, 1], free_port()?));
            if !addrs.contains(&a) {
                addrs.push(a);
            }
        }
        let peers = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}={a}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let secrets = Secrets::random(rng);
        let cluster_secret = hex::encode(rng.bytes(24));
        let mut cluster = Cluster {
            nodes: Vec::with_capacity(n),
            secrets: secrets.clone(),
            _dir: dir,
        };
        for (i, addr) in addrs.iter().enumerate() {
            let id = i as u64 + 1;
            let data = base.join(format!("node{id}"));
            let launch = GatewayLaunch {
                listen: *addr,
                args: vec![
                    "--node-id".into(),
                    id.to_string(),
                    "--peers".into(),
                    peers.clone(),
                    "--config".into(),
                    config.display().to_string(),
                ]
                .into_iter()
                .chain(args.iter().cloned())
                .collect(),
                cluster_secret: Some(cluster_secret.clone()),
                ..GatewayLaunch::single(bin, &data, &secrets, &base.join(format!("node{id}.log")))
            };
            let (s3, native, admin) = Node::clients(*addr, &secrets);
            cluster.nodes.push(Node {
                id,
                addr: *addr,
                data,
                server: None,
                launch,
                s3,
                native,
                admin,
            });
        }
        for i in 0..n {
            cluster.start_node(i)?;
        }
        Ok(cluster)
    }

    /// Starts node `idx` (again): same flags, address and data folder. Returns once it
    /// prints `listening on`. Blocking.
    pub fn start_node(&mut self, idx: usize) -> Result<(), String> {
        let node = &mut self.nodes[idx];
        let server = spawn_gateway(&node.launch).map_err(|e| format!("node {}: {e}", node.id))?;
        // Fresh connection pools: the old ones may hold sockets of the previous process.
        let (s3, native, admin) = Node::clients(node.addr, &self.secrets);
        (node.s3, node.native, node.admin) = (s3, native, admin);
        node.server = Some(server);
        Ok(())
    }

    /// `kill -9` of node `idx`.
    pub fn kill9(&mut self, idx: usize) {
        if let Some(mut s) = self.nodes[idx].server.take() {
            s.kill9();
        }
    }

    pub fn s3_clients(&self) -> Vec<Client> {
        self.nodes.iter().map(|n| n.s3.clone()).collect()
    }

    pub fn native_clients(&self) -> Vec<Client> {
        self.nodes.iter().map(|n| n.native.clone()).collect()
    }

    /// Waits until every running node (other than `except`) names the same leader, itself
    /// running; returns its index. Bounded by `limit`.
    pub async fn wait_leader(
        &mut self,
        limit: Duration,
        except: Option<usize>,
    ) -> Result<usize, String> {
        let deadline = Instant::now() + limit;
        let mut last: String;
        loop {
            match self.agreed_leader(except).await {
                Ok(i) => return Ok(i),
                Err(e) => last = e,
            }
            if Instant::now() >= deadline {
                let logs = self
                    .nodes
                    .iter()
                    .map(|n| format!("node {} log:\n{}", n.id, n.log_tail(10)))
                    .collect::<Vec<_>>()
                    .join("\n");
                return Err(format!(
                    "no leader agreed on within {limit:?}: {last}\n{logs}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The index of the leader every running node (but `except`) names, if they agree.
    pub async fn agreed_leader(&mut self, except: Option<usize>) -> Result<usize, String> {
        let mut leader: Option<u64> = None;
        for i in 0..self.nodes.len() {
            if Some(i) == except || !self.nodes[i].running() {
                continue;
            }
            let v = view(&self.nodes[i].admin).await?;
            let Some(l) = v.leader else {
                return Err(format!(
                    "node {} knows no leader (term {})",
                    v.node_id, v.term
                ));
            };
            if leader.is_some_and(|x| x != l) {
                return Err(format!("nodes disagree on the leader ({leader:?} vs {l})"));
            }
            leader = Some(l);
        }
        let l = leader.ok_or("no running node")?;
        let idx = self
            .nodes
            .iter()
            .position(|n| n.id == l)
            .ok_or_else(|| format!("leader {l} is not a node of this cluster"))?;
        if Some(idx) == except || !self.nodes[idx].running() {
            return Err(format!("leader {l} is not running"));
        }
        Ok(idx)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Every node is asked to stop at once, then each is waited for (killed after 5 s).
        for n in &mut self.nodes {
            if let Some(s) = &mut n.server {
                s.terminate();
            }
        }
        for n in &mut self.nodes {
            if let Some(mut s) = n.server.take() {
                s.stop();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_cluster_status() {
        // The shape of `GET /_admin/cluster` (meta::raft::ClusterStatus).
        let text = r#"{"node_id": 2, "leader": 3, "members": [1, 2, 3], "learners": [],
            "nodes": {"1": "127.0.0.1:1"}, "term": 4, "last_log_index": 9,
            "last_applied": 9, "snapshot": null, "state": "Follower"}"#;
        let v: ClusterView = serde_json::from_str(text).expect("parse");
        assert_eq!((v.node_id, v.leader, v.term), (2, Some(3), 4));
        let none: ClusterView = serde_json::from_str(
            r#"{"node_id": 1, "leader": null, "term": 5, "state": "Candidate"}"#,
        )
        .expect("parse");
        assert_eq!(none.leader, None);
    }
}
