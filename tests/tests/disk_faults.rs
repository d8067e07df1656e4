//! Disk faults under a real gateway: a disk that fills up, a disk remounted read-only, a
//! disk folder removed while serving. Each time a client gets either a clear S3 error
//! (and nothing is recorded) or a success that is truly durable (both copies on disk,
//! read back byte-exact); objects stored before the fault keep being served from the other
//! copy; Valkyrie repairs what it can.
//!
//! The full and read-only disks are size-limited tmpfs mounts made by the test, so these
//! tests need root: without it they say so and pass only outside CI (`CI` unset).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use e2e::{
    ConfigFile, Gateway, content_files_under, create_bucket, get_bytes, poll_until, put_bytes,
    random_body, s3_error, sha1_hex,
};

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;

/// Whether the test may mount filesystems; panics in CI without root.
fn can_mount(test: &str) -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test} needs root (it mounts tmpfs disks) and CI is set"
    );
    eprintln!("{test}: skipped, it needs root to mount tmpfs disks");
    false
}

/// A size-limited tmpfs mounted on a temp folder, unmounted on drop.
struct Tmpfs {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Tmpfs {
    fn mount(size_bytes: usize) -> Tmpfs {
        let dir = tempfile::Builder::new()
            .prefix("e2e-tmpfs-")
            .tempdir()
            .expect("temp dir");
        let path = dir.path().join("disk");
        std::fs::create_dir(&path).expect("mount point");
        run(Command::new("mount").args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size_bytes}"),
            "tmpfs",
            path.to_str().expect("utf-8 path"),
        ]));
        Tmpfs { _dir: dir, path }
    }

    fn remount(&self, mode: &str) {
        run(Command::new("mount").args([
            "-o",
            &format!("remount,{mode}"),
            self.path.to_str().expect("utf-8 path"),
        ]));
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// A config with one pair of the two given local folders, Valkyrie on short settings.
fn one_pair_config(a: &Path, b: &Path) -> ConfigFile {
    ConfigFile::new(&format!(
        "[valkyrie]\ndeletion_interval_secs = 1\n\n[[pairs]]\nid = 0\ndisks = [\"local:{}\", \"local:{}\"]\n",
        a.display(),
        b.display()
    ))
}

fn start(conf: &ConfigFile) -> Gateway {
    Gateway::start_with(&["--config", conf.arg(), "--scrub-interval-secs", "1"], &[])
}

/// The copy of `body` under `root`, if any, is whole.
fn copy_on(root: &Path, body: &[u8]) -> bool {
    let hex = sha1_hex(body);
    std::fs::read(root.join(&hex[0..2]).join(&hex[2..4]).join(&hex)).is_ok_and(|b| b == body)
}

/// Files left in `<root>/tmp`.
fn temp_files(root: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(root.join("tmp")) {
        Ok(entries) => entries.flatten().map(|e| e.path()).collect(),
        Err(_) => Vec::new(),
    }
}

/// A PUT during a fault: a clear S3 error (5xx with an error code; the key stays absent)
/// or a 200 whose object is really there (read back, both copies whole).
async fn put_is_clear_or_durable(
    gw: &Gateway,
    disks: [&Path; 2],
    key: &str,
    body: &[u8],
) -> Result<(), (u16, String)> {
    let s3 = gw.client();
    let got = s3
        .put_object()
        .bucket("bkt")
        .key(key)
        .body(body.to_vec().into())
        .send()
        .await;
    match got {
        Ok(_) => {
            assert_eq!(get_bytes(&s3, "bkt", key).await, body, "{key}");
            for d in disks {
                assert!(
                    copy_on(d, body),
                    "acknowledged {key}: no whole copy on {d:?}"
                );
            }
            Ok(())
        }
        Err(e) => {
            let (status, code) = s3_error::<(), _>(Err(e));
            assert!(
                (500..600).contains(&status) && !code.is_empty(),
                "{key}: status {status} code {code:?}: not a clear S3 error\n{}",
                gw.log_tail(20)
            );
            let (head, _) = s3_error(s3.head_object().bucket("bkt").key(key).send().await);
            assert_eq!(head, 404, "{key} refused ({status} {code}) but recorded");
            Err((status, code))
        }
    }
}

#[tokio::test]
async fn a_full_disk_refuses_uploads_clearly_and_keeps_serving() {
    if !can_mount("a_full_disk_refuses_uploads_clearly_and_keeps_serving") {
        return;
    }
    let small = Tmpfs::mount(4 * MIB);
    let big = tempfile::tempdir().expect("temp dir");
    let conf = one_pair_config(&small.path, big.path());
    let gw = start(&conf);
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let before = random_body(1, 100 * KIB);
    put_bytes(&s3, "bkt", "before", &before).await;

    // Fill the small disk behind the gateway's back (its free-space figure is now stale).
    let filler = small.path.join("filler");
    let free = rustix::fs::statvfs(&small.path).expect("statvfs");
    let room = (free.f_bavail * free.f_frsize) as usize;
    std::fs::write(&filler, vec![0u8; room.saturating_sub(64 * KIB)]).ok();
    let disks = [small.path.as_path(), big.path()];
    let body = random_body(2, MIB);
    let refused = put_is_clear_or_durable(&gw, disks, "during", &body).await;
    let (status, code) = refused.expect_err("1 MiB cannot fit in 64 KiB");
    assert_eq!(
        (status, code.as_str()),
        (503, "ServiceUnavailable"),
        "a full disk"
    );
    assert!(
        temp_files(&small.path).is_empty() && temp_files(big.path()).is_empty(),
        "temp files left behind"
    );
    // Stored objects are still served.
    assert_eq!(get_bytes(&s3, "bkt", "before").await, before);

    // Room again: the same upload succeeds, durably.
    std::fs::remove_file(&filler).expect("remove filler");
    // Bounded: the pair's free-space figure is refreshed within 30 s.
    let mut resumed = false;
    for _attempt in 0..60 {
        if put_is_clear_or_durable(&gw, disks, "during", &body)
            .await
            .is_ok()
        {
            resumed = true;
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(resumed, "uploads did not resume once the disk had room");
}

#[tokio::test]
async fn a_read_only_disk_refuses_uploads_clearly_and_keeps_serving() {
    if !can_mount("a_read_only_disk_refuses_uploads_clearly_and_keeps_serving") {
        return;
    }
    let ro = Tmpfs::mount(64 * MIB);
    let other = tempfile::tempdir().expect("temp dir");
    let conf = one_pair_config(&ro.path, other.path());
    let gw = start(&conf);
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let before = random_body(3, 300 * KIB);
    put_bytes(&s3, "bkt", "before", &before).await;

    ro.remount("ro");
    let disks = [ro.path.as_path(), other.path()];
    let body = random_body(4, 200 * KIB);
    let (status, code) = put_is_clear_or_durable(&gw, disks, "during", &body)
        .await
        .expect_err("a read-only disk takes no copy");
    assert_eq!(
        (status, code.as_str()),
        (503, "ServiceUnavailable"),
        "a read-only disk"
    );
    assert_eq!(get_bytes(&s3, "bkt", "before").await, before);
    // A duplicate of stored content needs no write: still accepted.
    put_bytes(&s3, "bkt", "before-again", &before).await;
    assert_eq!(get_bytes(&s3, "bkt", "before-again").await, before);

    ro.remount("rw");
    put_is_clear_or_durable(&gw, disks, "during", &body)
        .await
        .expect("uploads resume on a writable disk");
}

#[tokio::test]
async fn a_disk_folder_removed_while_serving_is_read_around_and_repaired() {
    let root = tempfile::tempdir().expect("temp dir");
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    let conf = one_pair_config(&a, &b);
    let gw = start(&conf);
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let bodies: Vec<Vec<u8>> = (0..6)
        .map(|i| random_body(10 + i, 20 * KIB + i as usize * 90 * KIB))
        .collect();
    for (i, body) in bodies.iter().enumerate() {
        put_bytes(&s3, "bkt", &format!("k{i}"), body).await;
    }

    std::fs::remove_dir_all(&b).expect("remove a disk folder");
    for (i, body) in bodies.iter().enumerate() {
        assert_eq!(
            get_bytes(&s3, "bkt", &format!("k{i}")).await,
            *body,
            "k{i} with its disk b gone"
        );
    }
    let extra = random_body(30, 150 * KIB);
    let outcome = put_is_clear_or_durable(&gw, [a.as_path(), b.as_path()], "during", &extra).await;
    println!("a PUT with a disk folder gone: {outcome:?}");

    // The operator puts an empty disk in its place: the scrub copies every file back.
    std::fs::create_dir_all(&b).expect("recreate the disk folder");
    assert!(
        poll_until(Duration::from_secs(60), || bodies
            .iter()
            .all(|body| copy_on(&b, body))),
        "the scrub did not restore the copies on the new disk: {} files there\n{}",
        content_files_under(&b).len(),
        gw.log_tail(30)
    );
    for (i, body) in bodies.iter().enumerate() {
        assert!(copy_on(&a, body), "k{i} lost its copy on disk a");
    }
}
