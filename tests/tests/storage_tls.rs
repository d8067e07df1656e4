//! `https://` storage nodes: nginx with a certificate of the storage CA, requiring client
//! certificates of it (`ssl_verify_client on`), and the gateway and `valkyrie` configured
//! with `[storage_tls]` / `--storage-ca --storage-cert --storage-key`. A node whose
//! certificate is from another CA, and a gateway without a client certificate, are refused
//! at start with the reason.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use e2e::nginx::{Nginx, NodeTls};
use e2e::pki::{Identity, StoragePki};
use e2e::remote::{RemoteWorker, content_at};
use e2e::{Gateway, create_bucket, get_bytes, poll_until, put_bytes, random_body, sha1_hex};

const START_EXIT_WAIT: Duration = Duration::from_secs(30);

/// Two disks on one HTTPS node presenting `server`, requiring client certificates of the
/// storage CA.
fn https_node(pki: &StoragePki, server: &Identity) -> Nginx {
    Nginx::start_tls(
        &["d0", "d1"],
        NodeTls {
            cert: server.cert.clone(),
            key: server.key.clone(),
            client_ca: pki.ca.clone(),
        },
    )
}

/// A config file with pair 0 on the node's two disks and `[storage_tls]` as given.
fn config_file(dir: &Path, nginx: &Nginx, pki: &StoragePki, client: Option<&Identity>) -> PathBuf {
    let mut text = format!(
        "[[pairs]]\nid = 0\ndisks = [\"{}\", \"{}\"]\n[storage_tls]\nca = {:?}\n",
        nginx.url("d0"),
        nginx.url("d1"),
        pki.ca
    );
    if let Some(c) = client {
        text.push_str(&format!("cert = {:?}\nkey = {:?}\n", c.cert, c.key));
    }
    let path = dir.join("gateway.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

/// Waits for `child` to exit (killed and a panic past `limit`); its output.
fn exited_within(mut child: Child, limit: Duration, what: &str) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

/// Runs `gateway serve` expecting it to stop at start; its stderr.
fn refused_start(config: &Path) -> String {
    let data = tempfile::tempdir().expect("temp dir");
    let child = Command::new(e2e::gateway_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data.path())
        .arg("--config")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gateway serve");
    let out = exited_within(child, START_EXIT_WAIT, "gateway serve");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "started: {stdout}");
    assert!(!stdout.contains("listening on"), "{stdout}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test]
async fn uploads_reads_and_scrub_go_to_https_storage_nodes() {
    let pki = StoragePki::new();
    let nginx = https_node(&pki, &pki.node);
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config_file(dir.path(), &nginx, &pki, Some(&pki.client));
    let token = e2e::random_token(32);
    let gw = Gateway::start_with(
        &["--config", config.to_str().expect("utf-8 path")],
        &[("GATEWAY_CATALOG_TOKEN", &token)],
    );
    let s3 = gw.client();
    create_bucket(&s3, "tls").await;
    let small = random_body(81, 10_000);
    let large = random_body(82, 3 << 20);
    put_bytes(&s3, "tls", "small", &small).await;
    put_bytes(&s3, "tls", "large", &large).await;
    assert_eq!(get_bytes(&s3, "tls", "small").await, small);
    assert_eq!(get_bytes(&s3, "tls", "large").await, large);
    let disks = [nginx.disk_dir("d0"), nginx.disk_dir("d1")];
    let sha1 = sha1_hex(&large);
    for d in &disks {
        assert_eq!(std::fs::read(content_at(d, &sha1)).expect("copy"), large);
    }
    assert!(
        nginx.access_log().contains("PUT "),
        "{}",
        nginx.access_log()
    );

    // Valkyrie beside disk 1 re-hashes its copy and fetches the good one from its peer
    // over HTTPS, with its own client certificate.
    let tls = [
        "--storage-ca".as_ref(),
        pki.ca.as_os_str(),
        "--storage-cert".as_ref(),
        pki.client.cert.as_os_str(),
        "--storage-key".as_ref(),
        pki.client.key.as_os_str(),
    ];
    let _worker = RemoteWorker::start::<&std::ffi::OsStr>(&gw, &token, &disks[1], 1, &tls);
    let victim = content_at(&disks[1], &sha1);
    let mut bad = large.clone();
    bad[1000] ^= 0xff;
    std::fs::write(&victim, &bad).expect("corrupt");
    let repaired = poll_until(Duration::from_secs(30), || {
        std::fs::read(&victim).is_ok_and(|b| b == large)
    });
    assert!(repaired, "the worker did not repair {}", victim.display());

    // `gateway fsck` reads both copies over HTTPS with the same three flags; without the
    // CA it cannot open the disks and says why.
    drop(_worker);
    let mut gw = gw;
    gw.kill9();
    let data = gw.data_dir().to_str().expect("utf-8 path").to_string();
    let data = data.as_str();
    let tls = [
        "--storage-ca",
        pki.ca.to_str().expect("utf-8 path"),
        "--storage-cert",
        pki.client.cert.to_str().expect("utf-8 path"),
        "--storage-key",
        pki.client.key.to_str().expect("utf-8 path"),
    ];
    let mut args = vec!["fsck", "--data", data];
    args.extend(tls);
    let run = e2e::cluster::run_gateway(&args, &[]);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.contains("fsck: clean"), "{run}");
    let run = e2e::cluster::run_gateway(&["fsck", "--data", data], &[]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stdout.contains("storage"), "{run}");
}

#[test]
fn a_node_with_a_certificate_of_another_ca_is_refused_at_start() {
    let pki = StoragePki::new();
    let nginx = https_node(&pki, &pki.rogue_node);
    let dir = tempfile::tempdir().expect("temp dir");
    let stderr = refused_start(&config_file(dir.path(), &nginx, &pki, Some(&pki.client)));
    assert!(stderr.contains("refused at start"), "{stderr}");
    assert!(
        stderr.contains("invalid peer certificate: UnknownIssuer"),
        "{stderr}"
    );
    assert!(!nginx.access_log().contains("PUT "), "nothing was sent");
}

#[test]
fn a_gateway_without_a_client_certificate_is_refused_by_the_node() {
    let pki = StoragePki::new();
    let nginx = https_node(&pki, &pki.node);
    let dir = tempfile::tempdir().expect("temp dir");
    let stderr = refused_start(&config_file(dir.path(), &nginx, &pki, None));
    assert!(stderr.contains("refused this client"), "{stderr}");
    assert!(
        stderr.contains("requires a client certificate and none is configured"),
        "{stderr}"
    );
    // Another CA's client certificate is refused as clearly.
    let stderr = refused_start(&config_file(
        dir.path(),
        &nginx,
        &pki,
        Some(&pki.rogue_client),
    ));
    assert!(stderr.contains("not one it trusts"), "{stderr}");
}

#[test]
fn an_https_disk_without_a_storage_ca_is_refused_at_start() {
    let pki = StoragePki::new();
    let nginx = https_node(&pki, &pki.node);
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("gateway.toml");
    let text = format!(
        "[[pairs]]\nid = 0\ndisks = [\"{}\", \"{}\"]\n",
        nginx.url("d0"),
        nginx.url("d1")
    );
    std::fs::write(&config, text).expect("write config");
    let stderr = refused_start(&config);
    assert!(
        stderr.contains("needs the CA of the storage nodes"),
        "{stderr}"
    );
}

/// Runs `gateway admin ARGS` against `gw`.
fn admin_cli(gw: &Gateway, args: &[&str]) -> e2e::cluster::Run {
    let endpoint = gw.endpoint();
    let mut all = vec!["admin", "--endpoint", endpoint.as_str()];
    all.extend_from_slice(args);
    e2e::cluster::run_gateway(&all, &[("GATEWAY_ADMIN_TOKEN", gw.admin_token())])
}

/// UNMOVE when both pairs are on HTTPS nodes: disk 0 of pair 0 fails, and `valkyrie
/// --unmove` beside the survivor copies every file to pair 1 over HTTPS with its client
/// certificate; the gateway then serves every object from pair 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmove_beside_a_survivor_relocates_to_an_https_pair() {
    const N: usize = 120;
    let pki = StoragePki::new();
    let nginx = Nginx::start_tls(
        &["d0", "d1", "d2", "d3"],
        NodeTls {
            cert: pki.node.cert.clone(),
            key: pki.node.key.clone(),
            client_ca: pki.ca.clone(),
        },
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config_file(dir.path(), &nginx, &pki, Some(&pki.client));
    let token = e2e::random_token(32);
    let gw = Gateway::start_with(
        &["--config", config.to_str().expect("utf-8 path")],
        &[("GATEWAY_CATALOG_TOKEN", &token)],
    );
    let run = admin_cli(&gw, &["pairs", "add", &nginx.url("d2"), &nginx.url("d3")]);
    assert_eq!(run.code, Some(0), "{run}");
    let run = admin_cli(&gw, &["pairs", "lock", "1"]);
    assert_eq!(run.code, Some(0), "{run}");
    let s3 = gw.client();
    create_bucket(&s3, "mail").await;
    let body = |i: usize| random_body(500 + i as u64, 700 + (i * 211) % 5000);
    for i in 0..N {
        put_bytes(&s3, "mail", &format!("m{i:03}"), &body(i)).await;
    }
    let run = admin_cli(&gw, &["pairs", "unlock", "1"]);
    assert_eq!(run.code, Some(0), "{run}");
    for d in ["d2", "d3"] {
        assert!(
            e2e::remote::content_names(&nginx.disk_dir(d)).is_empty(),
            "pair 1 was locked"
        );
    }

    // The survivor is remote: the gateway marks the pair and says where to run UNMOVE.
    let run = admin_cli(&gw, &["disk", "fail", &nginx.url("d0")]);
    assert_ne!(run.code, Some(0), "{run}");
    assert!(run.stderr.contains("valkyrie --unmove"), "{run}");
    let pairs = admin_cli(&gw, &["pairs", "list"]);
    assert!(pairs.stdout.contains("DRAINING"), "{pairs}");

    let survivor = nginx.disk_dir("d1");
    let child = Command::new(e2e::remote::valkyrie_bin())
        .arg("--disk")
        .arg(&survivor)
        .args(["--pair", "0", "--index", "1", "--unmove"])
        .args(["--catalog", &gw.endpoint()])
        .arg("--storage-ca")
        .arg(&pki.ca)
        .arg("--storage-cert")
        .arg(&pki.client.cert)
        .arg("--storage-key")
        .arg(&pki.client.key)
        .env("VALKYRIE_CATALOG_TOKEN", &token)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn valkyrie --unmove");
    let out = exited_within(child, Duration::from_secs(120), "valkyrie --unmove");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let progress: serde_json::Value = serde_json::from_str(stdout.trim()).expect("progress JSON");
    assert_eq!(progress["finished"], true, "{progress}");
    assert_eq!(progress["files_relocated"], N as u64, "{progress}");
    assert_eq!(progress["files_failed"], 0, "{progress}");

    // Every object now reads from pair 1, whose two HTTPS disks hold every file.
    let mut want: Vec<String> = (0..N).map(|i| sha1_hex(&body(i))).collect();
    want.sort();
    for d in ["d2", "d3"] {
        assert_eq!(e2e::remote::content_names(&nginx.disk_dir(d)), want, "{d}");
    }
    std::fs::remove_dir_all(nginx.disk_dir("d0")).expect("the failed disk goes");
    for i in 0..N {
        assert_eq!(get_bytes(&s3, "mail", &format!("m{i:03}")).await, body(i));
        let f = gw.admin_file(&sha1_hex(&body(i))).expect("record");
        assert_eq!(f.pair, Some(1), "{f:?}");
    }
}
