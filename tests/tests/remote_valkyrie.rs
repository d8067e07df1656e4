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
