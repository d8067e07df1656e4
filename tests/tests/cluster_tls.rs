//! Mutual TLS between the nodes, with real processes: `gateway admin tls` makes the cluster
//! CA and the node certificates; a three-node group started with `--cluster-ca`,
//! `--cluster-cert` and `--cluster-key` elects a leader, takes writes through every node
//! (followers forward them over TLS) and survives a leader's kill -9. A client with another
//! CA's certificate, with none, or with an expired one cannot get a request read on the
//! cluster side, and an RPC without cluster TLS (plain HTTP, or TLS without the cluster
//! ALPN) is refused even with the secret, and changes nothing. A relay between two nodes
//! sees neither the cluster secret nor an object key in plaintext (and, without cluster
//! TLS, both: the control).

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use e2e::cluster::{
    CLUSTER_SECRET_HEADER, Cluster, ClusterStatus, ELECTION_TIMEOUT, GroupKeys, REQUEST_TIMEOUT,
    free_ports, pairs_toml, run_gateway, start_nodes,
};
use e2e::pki::{Ca, Role};
use e2e::{Gateway, Placement, assert_same_body, poll_until, random_body, raw_request};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::crypto::aws_lc_rs;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

const BUCKET: &str = "mail";
const ALPN_CLUSTER: &[u8] = b"dedup-cluster/1";
/// The common name `gateway admin tls ca` gives a CA by default.
const CA_NAME: &str = "dedup-gateway cluster CA";

/// The files `gateway admin tls` made: the cluster CA (`ca/`), a certificate per node
/// (`node1/` ...), and another CA with a certificate of its own (`rogue/`).
struct ClusterPki {
    dir: tempfile::TempDir,
}

impl ClusterPki {
    fn new(nodes: usize) -> ClusterPki {
        let dir = tempfile::Builder::new()
            .prefix("cluster-pki-")
            .tempdir()
            .unwrap();
        let pki = ClusterPki { dir };
        pki.tool(&["ca", "--out", &pki.path("ca")]);
        for id in 1..=nodes {
            pki.node("ca", &format!("node{id}"));
        }
        pki.tool(&["ca", "--out", &pki.path("rogue-ca")]);
        pki.node("rogue-ca", "rogue");
        pki
    }

    fn path(&self, sub: &str) -> String {
        self.dir.path().join(sub).display().to_string()
    }

    fn tool(&self, args: &[&str]) {
        let run = run_gateway(&[&["admin", "tls"], args].concat(), &[]);
        assert_eq!(run.code, Some(0), "gateway admin tls {args:?}: {run}");
    }

    fn node(&self, ca: &str, name: &str) {
        let (ca_dir, out) = (self.path(ca), self.path(name));
        self.tool(&[
            "node",
            "--ca-dir",
            &ca_dir,
            "--name",
            name,
            "--ip",
            "127.0.0.1",
            "--dns",
            "localhost",
            "--out",
            &out,
        ]);
    }

    /// `--cluster-ca`, `--cluster-cert`, `--cluster-key` of node `id`.
    fn node_args(&self, id: usize) -> Vec<String> {
        let dir = self.dir.path().join(format!("node{id}"));
        let file = |f: &str| dir.join(f).display().to_string();
        vec![
            "--cluster-ca".into(),
            file("ca.crt"),
            "--cluster-cert".into(),
            file("tls.crt"),
            "--cluster-key".into(),
            file("tls.key"),
        ]
    }

    fn file(&self, sub: &str) -> PathBuf {
        self.dir.path().join(sub)
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_tls_cluster_forms_forwards_writes_and_fails_over() {
    let pki = ClusterPki::new(3);
    assert_eq!(mode(&pki.file("ca/ca.key")), 0o600);
    assert_eq!(mode(&pki.file("node2/tls.key")), 0o600);
    for f in ["tls.crt", "tls.key", "ca.crt"] {
        assert!(pki.file("node3").join(f).is_file(), "node3/{f}");
    }
    let mut cluster = Cluster::start_per_node(3, &[], &|id| pki.node_args(id));
    for id in cluster.ids() {
        let log = cluster.node(id).log_tail(200);
        assert!(log.contains("cluster TLS on"), "node {id}:\n{log}");
    }
    cluster.create_bucket(1, BUCKET);
    let mut written = Vec::new();
    for id in cluster.ids() {
        let (key, body) = (format!("before/{id}"), random_body(id as u64, 40_000));
        cluster
            .put_until_ok(id, BUCKET, &key, &body, REQUEST_TIMEOUT)
            .unwrap_or_else(|e| panic!("PUT through node {id}: {e}"));
        written.push((key, body));
    }
    let leader = cluster.wait_leader(ELECTION_TIMEOUT);
    cluster.kill9(leader);
    let survivors = cluster.live();
    let new_leader = cluster.wait_leader_among(&survivors, ELECTION_TIMEOUT);
    assert_ne!(new_leader, leader);
    for &id in &survivors {
        let (key, body) = (format!("after/{id}"), random_body(10 + id as u64, 40_000));
        cluster
            .put_until_ok(id, BUCKET, &key, &body, REQUEST_TIMEOUT)
            .unwrap_or_else(|e| panic!("PUT through node {id} after the failover: {e}"));
        written.push((key, body));
    }
    for &id in &survivors {
        for (key, body) in &written {
            let got = cluster.remote(id).get(BUCKET, key).unwrap();
            assert_eq!(got.status, 200, "GET {key} through node {id}");
            assert_same_body(&got.body, body, key);
        }
    }
}

/// A client of the cluster side: the cluster CA's roots, ALPN `dedup-cluster/1` (or
/// `alpn`), presenting `identity` (a `tls.crt`/`tls.key` folder) if any.
fn client(ca: &Path, identity: Option<&Path>, alpn: &[u8]) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = ClientConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some(dir) => {
            let chain = CertificateDer::pem_file_iter(dir.join("tls.crt"))
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_file(dir.join("tls.key")).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    TlsConnector::from(Arc::new(config))
}

/// One RPC over TLS: the status line's code, or the error that stopped it (a refused
/// handshake shows as an error at the connect, or at the first read under TLS 1.3).
async fn rpc_over_tls(
    port: u16,
    tls: &TlsConnector,
    path: &str,
    secret: Option<&str>,
) -> Result<u16, String> {
    let header = secret.map(|s| format!("{CLUSTER_SECRET_HEADER}: {s}"));
    let answer = request_over_tls(port, tls, "POST", path, header.as_deref()).await?;
    Ok(answer.0)
}

/// One HTTP/1.1 request over TLS with one extra header line, if any: the status and the
/// body, or the error that stopped it.
async fn request_over_tls(
    port: u16,
    tls: &TlsConnector,
    method: &str,
    path: &str,
    header: Option<&str>,
) -> Result<(u16, String), String> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let io = async {
        let mut stream = tls.connect(name, tcp).await?;
        let header = header.map(|h| format!("{h}\r\n")).unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n{header}content-length: 0\r\n\
             connection: close\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(Duration::from_secs(10), io)
        .await
        .map_err(|_| "no answer within 10 s".to_string())?
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("not an HTTP answer: {text:?}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    Ok((status, body.to_owned()))
}

/// `AddLearner { id: 9, addr: "127.0.0.1:1" }` as postcard: the body of a membership
/// change that, applied, would show learner 9 in the status.
fn add_learner_9() -> Vec<u8> {
    let addr = b"127.0.0.1:1";
    [&[0u8, 9, addr.len() as u8][..], addr].concat()
}

#[test]
fn only_peers_with_a_cluster_certificate_reach_the_rpcs() {
    let pki = ClusterPki::new(1);
    let ca = pki.file("ca");
    // The cluster CA as rcgen rebuilds it: a certificate it signs now is the control that
    // the expired one is refused for its dates, not for its issuer.
    let ca_again = Ca::from_key_pem(
        CA_NAME,
        &std::fs::read_to_string(ca.join("ca.key")).unwrap(),
    );
    let expired = ca_again.issue_expired("expired node", &pki.file("expired"));
    let current = ca_again.issue(Role::Client, "current client", &pki.file("current"));
    let cluster = Cluster::start_per_node(1, &[], &|id| pki.node_args(id));
    let port = cluster.node(1).port();
    let secret = cluster.secret().to_owned();
    let before = cluster.status(1).unwrap();
    let ca_crt = ca.join("ca.crt");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        // The control: a node's own certificate opens the RPCs, with the secret only.
        let node = client(&ca_crt, Some(&pki.file("node1")), ALPN_CLUSTER);
        assert_eq!(
            rpc_over_tls(port, &node, "/_cluster/state", Some(&secret)).await,
            Ok(200)
        );
        assert_eq!(
            rpc_over_tls(port, &node, "/_cluster/state", None).await,
            Ok(403)
        );
        let fresh = client(&ca_crt, current.cert.parent(), ALPN_CLUSTER);
        let answer = rpc_over_tls(port, &fresh, "/_cluster/state", Some(&secret)).await;
        assert_eq!(answer, Ok(200), "a current certificate of the same CA");
        let refused = [
            ("another CA's certificate", Some(pki.file("rogue"))),
            ("no certificate", None),
            (
                "an expired certificate",
                expired.cert.parent().map(Path::to_path_buf),
            ),
        ];
        for (what, identity) in refused {
            let tls = client(&ca_crt, identity.as_deref(), ALPN_CLUSTER);
            let answer = rpc_over_tls(port, &tls, "/_cluster/state", Some(&secret)).await;
            assert!(answer.is_err(), "{what}: answered {answer:?}");
        }
        // TLS without the cluster ALPN finds no S3 certificate (the S3 side is plain).
        let s3 = client(&ca_crt, Some(&pki.file("node1")), b"http/1.1");
        let answer = rpc_over_tls(port, &s3, "/_cluster/state", Some(&secret)).await;
        assert!(answer.is_err(), "TLS without the cluster ALPN: {answer:?}");
    });
    // Plain HTTP with the secret: refused before the body is read, nothing applied.
    let headers = [(CLUSTER_SECRET_HEADER.to_string(), secret.clone())];
    for path in [
        "/_cluster/membership",
        "/_cluster/state",
        "/_cluster/raft/vote",
    ] {
        let r = raw_request(port, "POST", path, &headers, &add_learner_9()).unwrap();
        assert_eq!(r.status, 403, "plain POST {path}: {}", r.text());
    }
    let after = cluster.status(1).unwrap();
    assert_eq!(after.learners, Vec::<u64>::new());
    assert_eq!(
        (after.members, after.term, after.leader),
        (before.members, before.term, before.leader)
    );
    // S3 over plain HTTP still works beside the cluster side.
    let health = raw_request(port, "GET", "/_health", &[], b"").unwrap();
    assert_eq!(health.status, 200);
}

/// Every byte a relay carried, both ways, kept for a look.
type Captured = Arc<std::sync::Mutex<Vec<u8>>>;

/// A TCP relay from `listener` to 127.0.0.1:`to` that keeps what it carries. Its threads
/// live until the test process ends (the nodes behind it are killed before).
fn relay(listener: std::net::TcpListener, to: u16) -> Captured {
    let captured = Captured::default();
    let kept = captured.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(from) = conn else { continue };
            let Ok(upstream) = std::net::TcpStream::connect(("127.0.0.1", to)) else {
                continue;
            };
            let (a, b) = (from.try_clone().unwrap(), upstream.try_clone().unwrap());
            let (k1, k2) = (kept.clone(), kept.clone());
            std::thread::spawn(move || pipe(from, upstream, &k1));
            std::thread::spawn(move || pipe(b, a, &k2));
        }
    });
    captured
}

fn pipe(mut from: std::net::TcpStream, mut to: std::net::TcpStream, kept: &Captured) {
    use std::io::{Read as _, Write as _};
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(n) if n > 0 => {
                kept.lock().unwrap().extend_from_slice(&buf[..n]);
                if to.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            _ => {
                let _ = to.shutdown(std::net::Shutdown::Write);
                return;
            }
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Three nodes started by hand (the harness's [`Cluster`] names each by its own port and
/// talks plain HTTP to them): node `id` listens on `ports[id - 1]`, all with `peers`, and
/// `extra(id)`.
struct Three {
    nodes: Vec<Gateway>,
    secret: String,
    admin_token: String,
    _root: tempfile::TempDir,
}

impl Three {
    fn start(ports: &[u16], peers: &str, extra: &dyn Fn(usize) -> Vec<String>) -> Three {
        let root = tempfile::tempdir().unwrap();
        let config = root.path().join("cluster.toml");
        std::fs::write(&config, pairs_toml(&root.path().join("disks"))).unwrap();
        let keys = GroupKeys::random();
        let options = (1..=3)
            .map(|id| {
                let opts =
                    keys.node_options(id, root.path(), ports[id - 1], peers, &config, extra(id));
                (opts, Placement::default())
            })
            .collect();
        let nodes = start_nodes(options);
        let GroupKeys {
            secret,
            admin_token,
            ..
        } = keys;
        Three {
            nodes,
            secret,
            admin_token,
            _root: root,
        }
    }
}

/// Three nodes whose peers name node 2 by a relay's port (node 2 listens behind it): a PUT
/// of `key` through node 1 reaches node 2 over the relay (a leader's append to it, or its
/// forwarded write when it leads). What the relay carried, and the cluster secret.
fn node_to_node_traffic(pki: Option<&ClusterPki>, key: &str) -> (Vec<u8>, String) {
    let ports = free_ports(3);
    let relay_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let relay_port = relay_listener.local_addr().unwrap().port();
    let captured = relay(relay_listener, ports[1]);
    let peers = format!(
        "1=127.0.0.1:{},2=127.0.0.1:{relay_port},3=127.0.0.1:{}",
        ports[0], ports[2]
    );
    let three = Three::start(&ports, &peers, &|id| {
        pki.map(|p| p.node_args(id)).unwrap_or_default()
    });
    let nodes = &three.nodes;
    let (one, two) = (nodes[0].remote(), nodes[1].remote());
    let created = poll_until(ELECTION_TIMEOUT, || {
        one.signed("PUT", &format!("/{BUCKET}"))
            .timeout(REQUEST_TIMEOUT)
            .try_send()
            .is_ok_and(|r| r.status == 200 || r.status == 409)
    });
    assert!(created, "no bucket through node 1");
    let body = random_body(7, 1000);
    let put = poll_until(ELECTION_TIMEOUT, || {
        one.put_timeout(BUCKET, key, &body, REQUEST_TIMEOUT)
            .is_ok_and(|r| r.status == 200)
    });
    assert!(put, "no PUT through node 1");
    // Node 2 serves the object once the entry reached it (or once it applied its own).
    let seen = poll_until(ELECTION_TIMEOUT, || {
        two.get(BUCKET, key).is_ok_and(|r| r.status == 200)
    });
    assert!(seen, "node 2 never served {key}");
    let secret = three.secret.clone();
    drop(three);
    let bytes = captured.lock().unwrap().clone();
    (bytes, secret)
}

#[test]
fn node_to_node_traffic_shows_no_secret_and_no_key_in_plaintext() {
    let key = "capture/a-very-recognisable-object-key";
    // The control: without cluster TLS the relay sees both.
    let (plain, secret) = node_to_node_traffic(None, key);
    assert!(
        contains(&plain, secret.as_bytes()),
        "the capture misses the plain secret"
    );
    assert!(
        contains(&plain, key.as_bytes()),
        "the capture misses the plain key"
    );
    let pki = ClusterPki::new(3);
    let (sealed, secret) = node_to_node_traffic(Some(&pki), key);
    assert!(sealed.len() > 1000, "{} bytes captured", sealed.len());
    assert_eq!(
        sealed[0], 0x16,
        "the first byte is not a TLS handshake record"
    );
    assert!(
        !contains(&sealed, secret.as_bytes()),
        "the secret crossed in plaintext"
    );
    assert!(
        !contains(&sealed, key.as_bytes()),
        "the object key crossed in plaintext"
    );
    assert!(
        !contains(&sealed, b"/_cluster/"),
        "an RPC path crossed in plaintext"
    );
}

#[test]
fn s3_tls_and_cluster_tls_share_the_port() {
    let pki = ClusterPki::new(3);
    let ports = free_ports(3);
    let peers = (1..=3)
        .map(|id| format!("{id}=127.0.0.1:{}", ports[id - 1]))
        .collect::<Vec<_>>()
        .join(",");
    // The node certificate serves S3 clients too here (it names 127.0.0.1).
    let three = Three::start(&ports, &peers, &|id| {
        let dir = pki.file(&format!("node{id}"));
        let file = |f: &str| dir.join(f).display().to_string();
        let s3 = [
            "--tls-cert".into(),
            file("tls.crt"),
            "--tls-key".into(),
            file("tls.key"),
        ];
        [pki.node_args(id), s3.to_vec()].concat()
    });
    let ca_crt = pki.file("ca/ca.crt");
    let s3 = client(&ca_crt, None, b"http/1.1");
    let bearer = format!("authorization: Bearer {}", three.admin_token);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // Every node, asked over S3 TLS, reports the same leader of all three: the Raft RPCs
    // went over cluster TLS on the same ports.
    let formed = poll_until(ELECTION_TIMEOUT, || {
        let statuses: Vec<Option<ClusterStatus>> = ports
            .iter()
            .map(|&port| {
                let answer = runtime.block_on(request_over_tls(
                    port,
                    &s3,
                    "GET",
                    "/_admin/cluster",
                    Some(&bearer),
                ));
                answer
                    .ok()
                    .filter(|(status, _)| *status == 200)
                    .and_then(|(_, body)| ClusterStatus::parse(&body).ok())
            })
            .collect();
        let leaders: Vec<Option<u64>> = statuses
            .iter()
            .map(|s| s.as_ref().and_then(|s| s.leader))
            .collect();
        leaders[0].is_some()
            && leaders.iter().all(|l| *l == leaders[0])
            && statuses.iter().flatten().all(|s| s.members == [1, 2, 3])
    });
    assert!(formed, "no leader agreed on over S3 TLS");
    runtime.block_on(async {
        // The cluster side still asks for a certificate; plain HTTP gets nothing.
        let anonymous = client(&ca_crt, None, ALPN_CLUSTER);
        let answer = rpc_over_tls(ports[0], &anonymous, "/_cluster/state", Some(&three.secret));
        assert!(
            answer.await.is_err(),
            "the cluster side without a certificate"
        );
    });
    let plain = raw_request(ports[0], "GET", "/_health", &[], b"");
    assert!(
        plain.is_err(),
        "plain HTTP answered on a TLS port: {plain:?}"
    );
}
