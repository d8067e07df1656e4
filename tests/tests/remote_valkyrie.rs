//! The `valkyrie` binary beside a storage node's disk, talking to the real gateway's
//! `/_catalog/` API: the article's deployment, where the gateway has no local disk and
//! each nginx folder has its own worker.

use std::path::Path;
use std::time::Duration;

use e2e::nginx::Nginx;
use e2e::remote::{RemoteWorker, content_at};
use e2e::{Gateway, create_bucket, get_bytes, poll_until, put_bytes, random_body, sha1_hex};

/// Quarantine, the slave's delay and the deletion pass in seconds, not hours.
const FAST: [&str; 6] = [
    "--quarantine-secs",
    "2",
    "--slave-delay-secs",
    "2",
    "--deletion-interval-secs",
    "1",
];

#[tokio::test]
async fn remote_workers_delete_and_repair_through_the_catalog() {
    let nginx = Nginx::start(&["d0", "d1"]);
    let cfg = tempfile::tempdir().expect("temp dir");
    let config = cfg.path().join("gateway.toml");
    let text = format!(
        "[[pairs]]\nid = 0\ndisks = [\"{}\", \"{}\"]\n",
        nginx.url("d0"),
        nginx.url("d1")
    );
    std::fs::write(&config, text).expect("write config");
    let catalog_token = e2e::random_token(32);
    let gw = Gateway::start_with(
        &["--config", config.to_str().expect("utf-8 path")],
        &[("GATEWAY_CATALOG_TOKEN", &catalog_token)],
    );
    let disks = [nginx.disk_dir("d0"), nginx.disk_dir("d1")];
    let _workers = [
        RemoteWorker::start(&gw, &catalog_token, &disks[0], 0, &FAST),
        RemoteWorker::start(&gw, &catalog_token, &disks[1], 1, &FAST),
    ];

    let s3 = gw.client();
    create_bucket(&s3, "remote").await;
    let kept = random_body(71, 30_000);
    let gone = random_body(72, 40_000);
    put_bytes(&s3, "remote", "kept", &kept).await;
    put_bytes(&s3, "remote", "gone", &gone).await;
    let (sk, sg) = (sha1_hex(&kept), sha1_hex(&gone));
    for d in &disks {
        assert!(content_at(d, &sk).is_file() && content_at(d, &sg).is_file());
    }

    // Repair: one node's copy is corrupted on its disk; that disk's worker re-hashes it
    // and fetches the good copy from its peer over WebDAV.
    let victim = content_at(&disks[1], &sk);
    let mut bad = kept.clone();
    bad[100] ^= 0xff;
    std::fs::write(&victim, &bad).expect("corrupt");
    let repaired = poll_until(Duration::from_secs(30), || {
        std::fs::read(&victim).is_ok_and(|b| b == kept)
    });
    assert!(
        repaired,
        "the remote worker did not repair {}",
        victim.display()
    );

    // Deletion: the last reference goes; the master quarantines at once, the slave after
    // its delay, and both copies are deleted after the quarantine.
    s3.delete_object()
        .bucket("remote")
        .key("gone")
        .send()
        .await
        .expect("delete");
    assert!(gw.admin_file(&sg).is_some_and(|f| f.state == "deleting"));
    let both_gone = poll_until(Duration::from_secs(40), || {
        disks.iter().all(|d| {
            let folder = content_at(d, &sg)
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default();
            std::fs::read_dir(folder)
                .map(|entries| {
                    entries
                        .flatten()
                        .all(|e| !e.file_name().to_string_lossy().starts_with(&sg))
                })
                .unwrap_or(true)
        })
    });
    assert!(
        both_gone,
        "copies of the deleted content are still on the nodes"
    );
    let entry_gone = poll_until(Duration::from_secs(10), || gw.admin_file(&sg).is_none());
    assert!(entry_gone, "the slave did not remove the deleting entry");

    // The live object was never touched.
    assert_eq!(get_bytes(&s3, "remote", "kept").await, kept);
    for d in &disks {
        assert_eq!(std::fs::read(content_at(d, &sk)).expect("kept copy"), kept);
    }
}

/// Puts `body` as `bucket/key` with boto3 over HTTPS, trusting only `ca`.
fn boto3_put(gw: &Gateway, ca: &Path, bucket: &str, key: &str, body: &Path) {
    const PUT: &str = r#"
import sys, boto3
endpoint, ca, ak, sk, bucket, key, path = sys.argv[1:]
s3 = boto3.client("s3", endpoint_url=endpoint, verify=ca, aws_access_key_id=ak,
                  aws_secret_access_key=sk, region_name="us-east-1")
s3.create_bucket(Bucket=bucket)
with open(path, "rb") as f:
    s3.put_object(Bucket=bucket, Key=key, Body=f.read())
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", PUT])
        .arg(format!("https://127.0.0.1:{}", gw.port()))
        .arg(ca)
        .args([gw.access_key(), gw.secret_key(), bucket, key])
        .arg(body)
        .output()
        .expect("python3 (scripts/test.sh installs boto3)");
    assert!(
        out.status.success(),
        "boto3 PUT over https (python3 with boto3 is needed: scripts/test.sh installs it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A gateway that serves HTTPS: a worker given `--catalog https://... --catalog-ca` reaches
/// its catalog over TLS and repairs a corrupted copy; without the CA, or with another CA's,
/// it refuses to start instead of sending its token anywhere.
#[tokio::test]
async fn a_worker_reaches_an_https_gateway_with_its_ca() {
    use e2e::pki::{Ca, Role};
    let nginx = Nginx::start(&["d0", "d1"]);
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = Ca::new("gateway CA");
    let ca_file = ca.write_cert(&dir.path().join("ca.crt"));
    let rogue_file = Ca::new("rogue CA").write_cert(&dir.path().join("rogue.crt"));
    let server = ca.issue(Role::Server, "gateway", &dir.path().join("server"));
    let config = dir.path().join("gateway.toml");
    let text = format!(
        "[[pairs]]\nid = 0\ndisks = [\"{}\", \"{}\"]\n",
        nginx.url("d0"),
        nginx.url("d1")
    );
    std::fs::write(&config, text).expect("write config");
    let token = e2e::random_token(32);
    let path = |p: &Path| p.to_str().expect("utf-8 path").to_string();
    let gw = Gateway::start_with(
        &[
            "--config",
            &path(&config),
            "--tls-cert",
            &path(&server.cert),
            "--tls-key",
            &path(&server.key),
        ],
        &[("GATEWAY_CATALOG_TOKEN", &token)],
    );
    let catalog = format!("https://127.0.0.1:{}", gw.port());
    let body = random_body(73, 50_000);
    let body_file = dir.path().join("body");
    std::fs::write(&body_file, &body).expect("write body");
    boto3_put(&gw, &ca_file, "secure", "kept", &body_file);

    // Without the CA the worker stops at start (exit code 2); with another CA's, every
    // handshake fails (it says why while it waits for the catalog) and no token is sent.
    let disk = nginx.disk_dir("d1");
    let worker = |extra: &[String], stderr: std::process::Stdio| {
        std::process::Command::new(e2e::remote::valkyrie_bin())
            .arg("--disk")
            .arg(&disk)
            .args(["--pair", "0", "--index", "1", "--catalog", &catalog])
            .args(["--grace-secs", "300"])
            .args(extra)
            .env("VALKYRIE_CATALOG_TOKEN", &token)
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("run valkyrie")
    };
    let out = worker(&[], std::process::Stdio::piped())
        .wait_with_output()
        .expect("valkyrie output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--catalog-ca"), "{stderr}");
    let log = dir.path().join("rogue.log");
    let mut rogue = worker(
        &["--catalog-ca".to_string(), path(&rogue_file)],
        std::fs::File::create(&log).expect("log file").into(),
    );
    let refused = poll_until(Duration::from_secs(20), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("UnknownIssuer"))
    });
    let _ = rogue.kill();
    let _ = rogue.wait();
    assert!(
        refused,
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );

    let victim = content_at(&disk, &sha1_hex(&body));
    let mut bad = body.clone();
    bad[10] ^= 0xff;
    std::fs::write(&victim, &bad).expect("corrupt");
    let _worker = RemoteWorker::start_at(
        &catalog,
        &token,
        &disk,
        1,
        &["--catalog-ca", &path(&ca_file)],
    );
    let repaired = poll_until(Duration::from_secs(30), || {
        std::fs::read(&victim).is_ok_and(|b| b == body)
    });
    assert!(repaired, "the worker did not repair {}", victim.display());
}
