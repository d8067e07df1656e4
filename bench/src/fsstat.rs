//! What is on disk: file counts and sizes under a folder, and a process's I/O counters.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Files under a folder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DirStat {
    pub files: u64,
    /// Sum of file lengths.
    pub bytes: u64,
    /// Sum of allocated blocks (st_blocks * 512): what the files take on the disk.
    pub allocated: u64,
}

impl DirStat {
    pub fn plus(self, o: DirStat) -> DirStat {
        DirStat {
            files: self.files + o.files,
            bytes: self.bytes + o.bytes,
            allocated: self.allocated + o.allocated,
        }
    }
}

/// Walks `dir` (at most 16 levels, at most 10 million entries; a missing folder is empty).
pub fn dir_stat(dir: &Path) -> Result<DirStat, String> {
    let mut st = DirStat::default();
    let mut stack = vec![(dir.to_path_buf(), 0u32)];
    let mut budget = 10_000_000u64;
    while let Some((d, depth)) = stack.pop() {
        let rd = match std::fs::read_dir(&d) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("{}: {e}", d.display())),
        };
        for entry in rd {
            budget = budget
                .checked_sub(1)
                .ok_or_else(|| format!("{}: too many entries", dir.display()))?;
            let entry = entry.map_err(|e| format!("{}: {e}", d.display()))?;
            let md = match entry.path().symlink_metadata() {
                Ok(md) => md,
                // Removed between listing and stat (a temp file): not there any more.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(format!("{}: {e}", entry.path().display())),
            };
            if md.is_dir() {
                if depth < 16 {
                    stack.push((entry.path(), depth + 1));
                }
            } else if md.is_file() {
                st.files += 1;
                st.bytes += md.len();
                st.allocated += md.blocks() * 512;
            }
        }
    }
    Ok(st)
}

/// The counters of /proc/<pid>/io that matter here.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct ProcIo {
    /// Bytes the process caused to be sent to the storage layer.
    pub write_bytes: u64,
    /// Of those, bytes whose writeback was cancelled (truncated or deleted before flushing).
    pub cancelled_write_bytes: u64,
    pub read_bytes: u64,
}

impl ProcIo {
    pub fn read(pid: u32) -> Result<ProcIo, String> {
        let path = format!("/proc/{pid}/io");
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
        let mut io = ProcIo::default();
        for line in text.lines() {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let v: u64 = v.trim().parse().unwrap_or(0);
            match k.trim() {
                "write_bytes" => io.write_bytes = v,
                "cancelled_write_bytes" => io.cancelled_write_bytes = v,
                "read_bytes" => io.read_bytes = v,
                _ => {}
            }
        }
        Ok(io)
    }

    /// Bytes that reached (or will reach) the disk between `before` and `self`.
    pub fn written_since(&self, before: &ProcIo) -> i64 {
        (self.write_bytes as i64 - before.write_bytes as i64)
            - (self.cancelled_write_bytes as i64 - before.cancelled_write_bytes as i64)
    }
}

/// Type of the filesystem holding `path`, as /proc/self/mounts names it (longest mount
/// point that is a prefix of the canonical path).
pub fn fs_type(path: &Path) -> String {
    let Ok(canon) = path.canonicalize() else {
        return "unknown".into();
    };
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return "unknown".into();
    };
    let mut best: Option<(usize, String, String)> = None;
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 3 {
            continue;
        }
        let mp = Path::new(f[1]);
        if canon.starts_with(mp) && best.as_ref().is_none_or(|b| f[1].len() > b.0) {
            best = Some((f[1].len(), f[2].to_string(), f[0].to_string()));
        }
    }
    best.map(|(_, t, dev)| format!("{t} ({dev})"))
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_nested_files() {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(d.path().join("a/b")).expect("mkdir");
        std::fs::write(d.path().join("a/b/f"), vec![1u8; 5000]).expect("write");
        std::fs::write(d.path().join("g"), b"xy").expect("write");
        let st = dir_stat(d.path()).expect("stat");
        assert_eq!((st.files, st.bytes), (2, 5002));
        assert!(st.allocated >= 4096);
        assert_eq!(
            dir_stat(&d.path().join("none")).expect("missing"),
            DirStat::default()
        );
    }

    #[test]
    fn reads_own_io() {
        let io = ProcIo::read(std::process::id()).expect("/proc/self/io");
        assert!(io.written_since(&io) == 0);
    }
}
