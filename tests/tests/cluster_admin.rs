//! Operating the metadata group through the CLI, with real processes: a node started
//! alone grows into a three-node group (`admin cluster add-learner`, `promote`), loses one
//! (`remove`), and its metadata is backed up while serving and restored into a new data
//! folder (`admin backup`, `restore`) that `gateway fsck` finds consistent with the disks.

use std::path::Path;
use std::time::Duration;

use e2e::cluster::{
    CATCH_UP_TIMEOUT, CLUSTER_SECRET_ENV, ClusterStatus, Run, free_ports, pairs_toml, run_gateway,
};
use e2e::{Gateway, GatewayOptions, assert_same_body, poll_until, random_body, random_token};

const BUCKET: &str = "mail";

struct Group {
    secret: String,
    access_key: String,
    secret_key: String,
    admin_token: String,
    config: std::path::PathBuf,
    root: tempfile::TempDir,
}

impl Group {
    fn new() -> Group {
        let root = tempfile::Builder::new()
            .prefix("e2e-cluster-admin-")
            .tempdir()
            .expect("temp folder");
        let config = root.path().join("cluster.toml");
        std::fs::write(&config, pairs_toml(&root.path().join("disks"))).expect("config");
        Group {
            secret: random_token(32),
            access_key: format!("E2E{}", random_token(17).to_uppercase()),
            secret_key: random_token(40),
            admin_token: random_token(32),
            config,
            root,
        }
    }

    /// Starts node `id` on `port` with `--peers peers` (which may not list it).
    fn start(&self, id: u64, port: u16, peers: &str) -> Gateway {
        Gateway::start_opts(GatewayOptions {
            data_dir: Some(self.root.path().join(format!("node{id}"))),
            port,
            access_key: Some(self.access_key.clone()),
            secret_key: Some(self.secret_key.clone()),
            admin_token: Some(self.admin_token.clone()),
            args: vec![
                "--node-id".into(),
                id.to_string(),
                "--peers".into(),
                peers.into(),
                "--config".into(),
                self.config.display().to_string(),
            ],
            env: vec![(CLUSTER_SECRET_ENV.to_string(), self.secret.clone())],
            label: Some(format!("node {id}")),
            stderr_file: None,
            bin: None,
        })
    }

    fn cli(&self, node: &Gateway, args: &[&str]) -> Run {
        let endpoint = node.endpoint();
        let mut all = vec!["admin", "--endpoint", endpoint.as_str()];
        all.extend_from_slice(args);
        run_gateway(&all, &[("GATEWAY_ADMIN_TOKEN", self.admin_token.as_str())])
    }

    fn cli_ok(&self, node: &Gateway, args: &[&str]) -> String {
        let run = self.cli(node, args);
        assert_eq!(run.code, Some(0), "gateway admin {args:?}: {run}");
        run.stdout
    }

    /// The node's status; an error while it has not joined a group yet (no applied index).
    fn status(&self, node: &Gateway) -> Result<ClusterStatus, String> {
        ClusterStatus::parse(&self.cli_ok(node, &["cluster", "status"]))
    }

    /// Waits (bounded) until `node` reports `members` as voters and a leader.
    fn wait_members(&self, node: &Gateway, members: &[u64]) -> ClusterStatus {
        let mut last = None;
        let ok = poll_until(CATCH_UP_TIMEOUT, || {
            let Ok(st) = self.status(node) else {
                return false;
            };
            let done = st.members == members && st.leader.is_some();
            last = Some(st);
            done
        });
        assert!(ok, "members never became {members:?}: {last:?}");
        last.expect("a status was read")
    }
}

fn put(node: &Gateway, key: &str, body: &[u8]) {
    let r = node
        .signed("PUT", &format!("/{BUCKET}/{key}"))
        .body(body)
        .send();
    assert_eq!(
        r.status,
        200,
        "PUT {key} through {}: {}",
        node.port(),
        r.text()
    );
}

fn get(node: &Gateway, key: &str) -> Vec<u8> {
    let r = node.signed("GET", &format!("/{BUCKET}/{key}")).send();
    assert_eq!(
        r.status,
        200,
        "GET {key} through {}: {}",
        node.port(),
        r.text()
    );
    r.body
}

#[test]
fn a_single_node_grows_into_a_group_loses_a_member_and_is_backed_up_and_restored() {
    let group = Group::new();
    let ports = free_ports(3);
    let addr = |i: usize| format!("127.0.0.1:{}", ports[i]);

    // Node 1 alone: a one-voter group of its own.
    let n1 = group.start(1, ports[0], &format!("1={}", addr(0)));
    let st = group.wait_members(&n1, &[1]);
    assert_eq!(st.leader, Some(1));
    let r = n1.signed("PUT", &format!("/{BUCKET}")).send();
    assert_eq!(r.status, 200, "{}", r.text());
    let bodies: Vec<Vec<u8>> = (0..20).map(|i| random_body(7000 + i % 5, 3000)).collect();
    for (i, b) in bodies.iter().enumerate() {
        put(&n1, &format!("before/{i}"), b);
    }
    assert_eq!(root_group_replicas(&group, &n1), vec![1]);

    // Nodes 2 and 3 name the running group, not themselves: they wait to be added.
    let peers = format!("1={}", addr(0));
    let n2 = group.start(2, ports[1], &peers);
    let n3 = group.start(3, ports[2], &peers);
    group.cli_ok(&n1, &["cluster", "add-learner", "2", &addr(1)]);
    group.cli_ok(&n1, &["cluster", "promote", "2"]);
    // Asked through a follower: forwarded to the leader.
    group.cli_ok(&n2, &["cluster", "add-learner", "3", &addr(2)]);
    group.cli_ok(&n2, &["cluster", "promote", "3"]);
    for node in [&n1, &n2, &n3] {
        group.wait_members(node, &[1, 2, 3]);
    }

    // The new members serve what was written before they joined, and take writes.
    for (i, b) in bodies.iter().enumerate() {
        assert_same_body(&get(&n3, &format!("before/{i}")), b, "read through node 3");
    }
    let late = random_body(7100, 5000);
    put(&n3, "after/3", &late);
    assert_same_body(&get(&n1, "after/3"), &late, "written on 3, read on 1");

    // Node 3 leaves; the two others go on.
    group.cli_ok(&n2, &["cluster", "remove", "3"]);
    group.wait_members(&n1, &[1, 2]);
    group.wait_members(&n2, &[1, 2]);
    put(&n2, "after/2", b"two voters");
    assert_eq!(get(&n1, "after/2"), b"two voters");
    // The one metadata group follows the membership.
    assert_eq!(root_group_replicas(&group, &n2), vec![1, 2]);

    // A backup taken while serving holds every acknowledged write.
    let file = group.root.path().join("meta.backup");
    let out = group.cli_ok(&n2, &["backup", &file.display().to_string()]);
    assert!(out.contains("wrote"), "{out}");
    let restored = group.root.path().join("restored");
    let run = run_gateway(
        &[
            "restore",
            "--from",
            &file.display().to_string(),
            "--data",
            &restored.display().to_string(),
        ],
        &[],
    );
    assert_eq!(run.code, Some(0), "restore: {run}");
    // Restoring over existing metadata is refused.
    let again = run_gateway(
        &[
            "restore",
            "--from",
            &file.display().to_string(),
            "--data",
            &restored.display().to_string(),
        ],
        &[],
    );
    assert_eq!(again.code, Some(1), "a second restore: {again}");

    // The restored metadata and the shared disks agree: every object's content is there.
    let fsck = fsck(&restored);
    assert_eq!(fsck.code, Some(0), "{fsck}");
    assert!(
        fsck.stdout
            .contains(&format!("fsck: {} objects", bodies.len() + 2)),
        "{fsck}"
    );
    // A damaged backup is refused before anything is written.
    let mut bytes = std::fs::read(&file).expect("read backup");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    let damaged = group.root.path().join("damaged.backup");
    std::fs::write(&damaged, bytes).expect("write damaged copy");
    let target = group.root.path().join("from-damaged");
    let run = run_gateway(
        &[
            "restore",
            "--from",
            &damaged.display().to_string(),
            "--data",
            &target.display().to_string(),
        ],
        &[],
    );
    assert_eq!(run.code, Some(1), "{run}");
    assert!(!target.join("meta.redb").exists());
    drop((n1, n2, n3));
    std::thread::sleep(Duration::from_millis(10));
}

/// `gateway admin groups list` through `node`: the one group is the root, owning every
/// sha1 and key; its replicas.
fn root_group_replicas(group: &Group, node: &Gateway) -> Vec<u64> {
    let out = group.cli_ok(node, &["groups", "list"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("groups list prints JSON");
    let groups = v["groups"].as_array().expect("a groups list");
    assert_eq!(groups.len(), 1, "{v}");
    assert_eq!(groups[0]["kind"], "root", "{v}");
    assert!(groups[0]["records"].as_u64().is_some_and(|r| r > 0), "{v}");
    groups[0]["replicas"]
        .as_array()
        .expect("replicas")
        .iter()
        .filter_map(|r| r.as_u64())
        .collect()
}

fn fsck(data: &Path) -> Run {
    run_gateway(&["fsck", "--data", &data.display().to_string()], &[])
}

/// The election timeout, from the flag or from `[cluster]` in the config file, is checked
/// before the node starts: out of range, the node refuses to start and names the setting.
#[test]
fn an_election_timeout_out_of_range_is_refused_at_start() {
    let root = tempfile::Builder::new()
        .prefix("e2e-cluster-timeout-")
        .tempdir()
        .expect("temp folder");
    let data = root.path().join("data");
    let data = data.to_str().expect("utf-8 path");
    let peers = "1=127.0.0.1:1,2=127.0.0.1:2,3=127.0.0.1:3";
    let base = ["serve", "--data", data, "--listen", "127.0.0.1:0"];
    let env = [(CLUSTER_SECRET_ENV, "a-cluster-secret")];
    let flag = [
        &base[..],
        &[
            "--node-id",
            "1",
            "--peers",
            peers,
            "--election-timeout-ms",
            "10",
        ],
    ]
    .concat();
    let run = run_gateway(&flag, &env);
    assert_ne!(
        run.code,
        Some(0),
        "started with a 10 ms election timeout: {run}"
    );
    assert!(
        run.stderr
            .contains("--election-timeout-ms must be within 50..=60000 (got 10)"),
        "{run}"
    );

    let config = root.path().join("cluster.toml");
    std::fs::write(
        &config,
        format!("[cluster]\nnode_id = 1\npeers = \"{peers}\"\nelection_timeout_ms = 90000\n"),
    )
    .expect("write config");
    let config = config.to_str().expect("utf-8 path");
    let run = run_gateway(&[&base[..], &["--config", config]].concat(), &env);
    assert_ne!(
        run.code,
        Some(0),
        "started with a 90 s election timeout: {run}"
    );
    assert!(run.stderr.contains("(got 90000)"), "{run}");
    assert!(
        !Path::new(data).join("meta.redb").exists(),
        "a refused start created metadata"
    );
}

/// Valkyrie's grace must outlast the longest a metadata command can take to reach the log
/// (see `valkyrie::GRACE_SECS_MIN`): shorter, an upload still committing could be taken
/// for an orphan. Refused on one node, in a cluster, from the config file, and by the
/// `valkyrie` binary.
#[test]
fn a_grace_shorter_than_the_command_bound_is_refused_at_start() {
    let root = tempfile::Builder::new()
        .prefix("e2e-grace-")
        .tempdir()
        .expect("temp folder");
    let data = root.path().join("data");
    let data = data.to_str().expect("utf-8 path");
    let base = ["serve", "--data", data, "--listen", "127.0.0.1:0"];
    let env = [(CLUSTER_SECRET_ENV, "a-cluster-secret")];
    let want = "grace_secs = 10 is shorter than 300";

    let run = run_gateway(&[&base[..], &["--grace-secs", "10"]].concat(), &[]);
    assert_ne!(
        run.code,
        Some(0),
        "one node started with a 10 s grace: {run}"
    );
    assert!(run.stderr.contains(want), "{run}");

    let peers = "1=127.0.0.1:1,2=127.0.0.1:2,3=127.0.0.1:3";
    let cluster = [
        &base[..],
        &["--node-id", "1", "--peers", peers, "--grace-secs", "10"],
    ]
    .concat();
    let run = run_gateway(&cluster, &env);
    assert_ne!(
        run.code,
        Some(0),
        "a cluster node started with a 10 s grace: {run}"
    );
    assert!(run.stderr.contains(want), "{run}");

    let config = root.path().join("gateway.toml");
    std::fs::write(&config, "[valkyrie]\ngrace_secs = 10\n").expect("write config");
    let config = config.to_str().expect("utf-8 path");
    let run = run_gateway(&[&base[..], &["--config", config]].concat(), &[]);
    assert_ne!(
        run.code,
        Some(0),
        "started with grace_secs = 10 in its config: {run}"
    );
    assert!(run.stderr.contains(want), "{run}");

    // The worker binary, before it asks its catalog anything.
    let disk = root.path().join("disk");
    std::fs::create_dir_all(&disk).expect("disk folder");
    let out = std::process::Command::new(e2e::gateway_bin().with_file_name("valkyrie"))
        .args(["--disk", disk.to_str().expect("utf-8 path")])
        .args(["--pair", "0", "--index", "0"])
        .args(["--catalog", "http://127.0.0.1:1", "--grace-secs", "10"])
        .env("VALKYRIE_CATALOG_TOKEN", "t")
        .output()
        .expect("run valkyrie");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(want), "{stderr}");
}
