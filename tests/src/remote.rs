//! The `valkyrie` binary beside a storage node's disk folder, as the article deploys it:
//! one worker per nginx folder, talking to the gateway's `/_catalog/` API.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::Gateway;

/// The `valkyrie` binary beside the gateway binary under test.
pub fn valkyrie_bin() -> PathBuf {
    let bin = crate::gateway_bin().with_file_name("valkyrie");
    assert!(
        bin.is_file(),
        "build it first: cargo build -p valkyrie (no {})",
        bin.display()
    );
    bin
}

/// Where content `sha1` (hex) lies in a disk folder: `<aa>/<bb>/<sha1>`.
pub fn content_at(disk: &Path, sha1: &str) -> PathBuf {
    disk.join(&sha1[0..2]).join(&sha1[2..4]).join(sha1)
}

/// Content files (`<aa>/<bb>/<40 hex>`) under a disk root, sorted by name.
pub fn content_names(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let hex2 = |n: &str| n.len() == 2 && n.bytes().all(|b| b.is_ascii_hexdigit());
    for a in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let an = a.file_name().to_string_lossy().into_owned();
        if !hex2(&an) || !a.path().is_dir() {
            continue;
        }
        for b in std::fs::read_dir(a.path()).into_iter().flatten().flatten() {
            for f in std::fs::read_dir(b.path()).into_iter().flatten().flatten() {
                let name = f.file_name().to_string_lossy().into_owned();
                if name.len() == 40 && name.bytes().all(|c| c.is_ascii_hexdigit()) {
                    out.push(name);
                }
            }
        }
    }
    out.sort();
    out
}

/// One worker process for one disk folder of pair 0, killed on drop.
pub struct RemoteWorker(Child);

impl RemoteWorker {
    /// A worker of disk `index` of pair 0 at `disk`, scrubbing every second, with `gw`'s
    /// catalog token `token` (all a worker needs) and the flags in `extra`.
    pub fn start<S: AsRef<OsStr>>(
        gw: &Gateway,
        token: &str,
        disk: &Path,
        index: u8,
        extra: &[S],
    ) -> RemoteWorker {
        Self::start_at(&gw.endpoint(), token, disk, index, extra)
    }

    /// As [`RemoteWorker::start`], with the catalog at `catalog` (an `https://` gateway).
    pub fn start_at<S: AsRef<OsStr>>(
        catalog: &str,
        token: &str,
        disk: &Path,
        index: u8,
        extra: &[S],
    ) -> RemoteWorker {
        let child = Command::new(valkyrie_bin())
            .arg("--disk")
            .arg(disk)
            .args(["--pair", "0", "--index", &index.to_string()])
            .args(["--catalog", catalog])
            .args(["--scrub-interval-secs", "1", "--grace-secs", "300"])
            .args(extra)
            .env("VALKYRIE_CATALOG_TOKEN", token)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn valkyrie");
        RemoteWorker(child)
    }
}

impl Drop for RemoteWorker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
