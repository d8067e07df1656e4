//! Where a measured server keeps its data: a fresh filesystem per run.
//!
//! ext4 slows file creation in a folder reused after mass deletes, and an inode allocator
//! walking groups left fragmented by earlier runs showed in profiles (a quarter of the
//! samples of a 64 KiB PUT phase on a root filesystem that had seen millions of files come
//! and go). So every measured server gets its own ext4, made for it: when the harness runs
//! as root, a sparse image file (`truncate`), `mkfs.ext4 -q`, `mount -o loop`; unmounted and
//! removed when the run ends, by a drop guard, on success and on error alike. Without root
//! it falls back to a fresh temp folder on the folder's own filesystem, and the report says
//! which one was measured.
//!
//! Cost: `mkfs.ext4` of an 8 GiB sparse image writes a few MiB of metadata (lazy inode
//! table init) and takes well under a second here; the image grows only by what the run
//! writes.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How measured runs get their folder.
#[derive(Clone, Debug)]
pub enum ScratchKind {
    /// A fresh ext4 on a loop device per run, from a sparse image of this many bytes.
    LoopExt4 { size_bytes: u64 },
    /// A fresh temp folder per run on the filesystem of the data root.
    Folder,
}

impl ScratchKind {
    /// A loop-mounted ext4 when running as root and the tools are there, else folders;
    /// the reason for a fallback is returned with it, for the report.
    pub fn detect(size_bytes: u64, loop_wanted: bool) -> (ScratchKind, Option<String>) {
        if !loop_wanted {
            return (ScratchKind::Folder, Some("--no-loop-fs".into()));
        }
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return (
                ScratchKind::Folder,
                Some("not root: no loop device can be mounted".into()),
            );
        }
        for tool in ["mkfs.ext4", "mount", "umount"] {
            if crate::procs::find_binary(tool).is_none()
                && !Path::new("/usr/sbin").join(tool).is_file()
                && !Path::new("/sbin").join(tool).is_file()
            {
                return (ScratchKind::Folder, Some(format!("no {tool} on PATH")));
            }
        }
        (ScratchKind::LoopExt4 { size_bytes }, None)
    }

    /// For the report: what the measured runs were on.
    pub fn describe(&self, root: &Path) -> String {
        match self {
            ScratchKind::LoopExt4 { size_bytes } => format!(
                "a fresh ext4 per measured run (loop device, {} sparse image under {})",
                crate::stats::bytes(*size_bytes),
                root.display()
            ),
            ScratchKind::Folder => format!(
                "a fresh folder per measured run under {} ({}; NOT a fresh filesystem)",
                root.display(),
                crate::fsstat::fs_type(root)
            ),
        }
    }
}

/// Where measured runs go: the data root, and how each run gets its own folder there.
#[derive(Clone, Debug)]
pub struct Scratches {
    pub root: PathBuf,
    pub kind: ScratchKind,
}

impl Scratches {
    /// A fresh folder (or filesystem) for one measured run.
    pub fn fresh(&self, tag: &str) -> Result<Scratch, String> {
        Scratch::new(&self.kind, &self.root, tag)
    }

    pub fn describe(&self) -> String {
        self.kind.describe(&self.root)
    }
}

/// Bound on each mkfs, mount and umount.
const TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// One run's folder: removed (and its filesystem unmounted) when dropped.
pub struct Scratch {
    path: PathBuf,
    // Dropped after the unmount (see Drop): the folder holding the image and mount point.
    holder: Option<tempfile::TempDir>,
    mounted: Option<PathBuf>,
}

impl Scratch {
    /// A fresh folder (a fresh filesystem for [`ScratchKind::LoopExt4`]) under `root`.
    pub fn new(kind: &ScratchKind, root: &Path, tag: &str) -> Result<Scratch, String> {
        let holder = tempfile::Builder::new()
            .prefix(&format!("bench-{tag}-"))
            .tempdir_in(root)
            .map_err(|e| format!("temp folder in {}: {e}", root.display()))?;
        let ScratchKind::LoopExt4 { size_bytes } = kind else {
            return Ok(Scratch {
                path: holder.path().to_path_buf(),
                holder: Some(holder),
                mounted: None,
            });
        };
        let image = holder.path().join("fs.img");
        let mnt = holder.path().join("mnt");
        std::fs::create_dir(&mnt).map_err(|e| format!("{}: {e}", mnt.display()))?;
        let file =
            std::fs::File::create(&image).map_err(|e| format!("{}: {e}", image.display()))?;
        // Sparse: the image takes only what the run writes.
        file.set_len(*size_bytes)
            .map_err(|e| format!("{}: set_len: {e}", image.display()))?;
        drop(file);
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image))?;
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(&mnt))?;
        Ok(Scratch {
            path: mnt.clone(),
            holder: Some(holder),
            mounted: Some(mnt),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(mnt) = self.mounted.take() {
            // A server that was just stopped may still hold files for a moment (a child's
            // exit is reaped before the kernel drops its last reference): retry, bounded,
            // then detach lazily so the image can go.
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut done = false;
            while Instant::now() < deadline {
                if run(Command::new("umount").arg(&mnt)).is_ok() {
                    done = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            if !done {
                let r = run(Command::new("umount").arg("-l").arg(&mnt));
                if let Err(e) = r {
                    eprintln!("bench: cannot unmount {}: {e}", mnt.display());
                    // Removing the folder would walk into the mounted filesystem: leave
                    // it for the operator, said on stderr.
                    if let Some(h) = self.holder.take() {
                        let _ = h.keep();
                    }
                    return;
                }
            }
        }
        // The holder's TempDir removes the image (and the folder) as it drops.
        self.holder.take();
    }
}

/// Runs a system tool to completion (at most [`TOOL_TIMEOUT`]).
fn run(cmd: &mut Command) -> Result<(), String> {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{what}: {e}"))?;
    let deadline = Instant::now() + TOOL_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(st)) if st.success() => return Ok(()),
            Ok(Some(st)) => {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    use std::io::Read as _;
                    let _ = e.read_to_string(&mut err);
                }
                return Err(format!("{what}: {st}: {}", err.trim()));
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what}: no answer within {TOOL_TIMEOUT:?}"));
            }
            Err(e) => return Err(format!("{what}: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_scratch_is_removed_when_dropped() {
        let root = tempfile::tempdir().expect("tempdir");
        let s = Scratch::new(&ScratchKind::Folder, root.path(), "t").expect("scratch");
        let p = s.path().to_path_buf();
        std::fs::write(p.join("f"), b"x").expect("write");
        drop(s);
        assert!(!p.exists());
    }

    /// Root only (the loop mount needs it): a fresh ext4 that is gone after the drop.
    #[test]
    fn a_loop_scratch_is_a_fresh_ext4_and_goes_away() {
        let (kind, why) = ScratchKind::detect(64 << 20, true);
        if let Some(why) = why {
            eprintln!("skipped: {why}");
            return;
        }
        let root = tempfile::tempdir().expect("tempdir");
        let s = Scratch::new(&kind, root.path(), "t").expect("scratch");
        let p = s.path().to_path_buf();
        assert!(
            crate::fsstat::fs_type(&p).starts_with("ext4"),
            "{}",
            crate::fsstat::fs_type(&p)
        );
        std::fs::write(p.join("f"), b"x").expect("write");
        drop(s);
        assert!(!p.exists());
        assert_eq!(std::fs::read_dir(root.path()).expect("ls").count(), 0);
    }
}
