//! The names a worker finds on its disk, and the walk over them.
//!
//! The layout is a contract shared with [`placement::disk`]: content at
//! `<disk>/<aa>/<bb>/<sha1 hex>` (aa, bb: the first two bytes in lowercase hex), uploads in
//! flight at `<disk>/tmp/<random>`, and quarantined copies named
//! `<sha1 hex>.deleted.<unix secs>` in the content file's folder.
//!
//! The walk over them, one `<aa>/<bb>` folder at a time in sha1 order, is
//! [`crate::walk`]; this module names the files and lists one folder.

use std::path::{Path, PathBuf};

use placement::Sha1;

use crate::clock::unix_secs;
use crate::error::{ValkyrieError, blocking};

/// The infix of a quarantined file's name.
const DELETED_INFIX: &str = ".deleted.";

/// What a name inside a `<aa>/<bb>` folder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileName {
    /// `<sha1 hex>`, 40 lowercase hex digits: a content file.
    Content(Sha1),
    /// `<sha1 hex>.deleted.<unix secs>`: a quarantined copy, deleted for good once
    /// `since_secs + quarantine_secs` has passed.
    Quarantined { sha1: Sha1, since_secs: u64 },
    /// Anything else: not ours to touch; logged.
    Unknown,
}

impl FileName {
    /// Parses a name found in folder `<aa>/<bb>`; a sha1 in the wrong folder is
    /// [`FileName::Unknown`] (nothing would ever look for it there).
    pub fn parse(name: &str, aa: &str, bb: &str) -> FileName {
        let (hex, since) = match name.split_once(DELETED_INFIX) {
            Some((hex, secs)) => match secs.parse::<u64>() {
                Ok(s) if !secs.starts_with('+') => (hex, Some(s)),
                _ => return FileName::Unknown,
            },
            None => (name, None),
        };
        let Some(sha1) = parse_lower_hex(hex) else {
            return FileName::Unknown;
        };
        if &hex[0..2] != aa || &hex[2..4] != bb {
            return FileName::Unknown;
        }
        match since {
            Some(since_secs) => FileName::Quarantined { sha1, since_secs },
            None => FileName::Content(sha1),
        }
    }
}

/// The quarantined copies of `sha1` among `names`, the entries of its shard folder, as
/// (since_secs, name).
pub fn quarantined_names(
    sha1: &Sha1,
    names: impl IntoIterator<Item = String>,
) -> Vec<(u64, String)> {
    let hex = sha1.to_hex();
    names
        .into_iter()
        .filter_map(
            |name| match FileName::parse(&name, &hex[0..2], &hex[2..4]) {
                FileName::Quarantined {
                    sha1: s,
                    since_secs,
                } if s == *sha1 => Some((since_secs, name)),
                _ => None,
            },
        )
        .collect()
}

/// A sha1 written exactly as the store writes it: 40 lowercase hex digits.
fn parse_lower_hex(hex: &str) -> Option<Sha1> {
    let sha1 = hex.parse::<Sha1>().ok()?;
    (sha1.to_hex() == hex).then_some(sha1)
}

/// `<disk>/<aa>/<bb>/<sha1 hex>`.
pub fn content_file(root: &Path, sha1: &Sha1) -> PathBuf {
    root.join(placement::disk::content_path(sha1))
}

/// `<sha1 hex>.deleted.<since_secs>`.
pub fn quarantine_name(sha1: &Sha1, since_secs: u64) -> String {
    format!("{}{DELETED_INFIX}{since_secs}", sha1.to_hex())
}

/// The folder of a content file: `<disk>/<aa>/<bb>`.
pub fn shard_dir(root: &Path, sha1: &Sha1) -> PathBuf {
    let hex = sha1.to_hex();
    root.join(&hex[0..2]).join(&hex[2..4])
}

/// One name in a folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The name; a name that is not UTF-8 is shown lossily and is never [`FileName`]d.
    pub name: String,
    pub utf8: bool,
    pub is_dir: bool,
}

/// The names of `dir`, sorted; an absent folder is empty.
pub async fn list(dir: &Path) -> Result<Vec<Listed>, ValkyrieError> {
    let path = dir.to_path_buf();
    blocking("list", dir.to_path_buf(), move || list_blocking(&path)).await
}

/// [`list`] on the calling thread, for callers that are not async (the gateway's `fsck`).
pub fn list_blocking(dir: &Path) -> std::io::Result<Vec<Listed>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        let os_name = entry.file_name();
        let (name, utf8) = match os_name.to_str() {
            Some(s) => (s.to_string(), true),
            None => (os_name.to_string_lossy().into_owned(), false),
        };
        // A symlink is not followed: it is reported as a non-directory and, having no
        // content name, left alone.
        let is_dir = entry.file_type()?.is_dir();
        out.push(Listed { name, utf8, is_dir });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The `<aa>` (or `<bb>`) folders of `dir`: two lowercase hex digits, sorted.
pub async fn hex_dirs(dir: &Path) -> Result<Vec<String>, ValkyrieError> {
    Ok(hex_dir_names(list(dir).await?))
}

/// The `<aa>` (or `<bb>`) folders of a listing, in its order.
pub fn hex_dir_names(listing: Vec<Listed>) -> Vec<String> {
    listing
        .into_iter()
        .filter(|l| l.is_dir && l.utf8 && is_hex_byte(&l.name))
        .map(|l| l.name)
        .collect()
}

fn is_hex_byte(name: &str) -> bool {
    name.len() == 2
        && name
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Size and mtime of a file, `None` when it is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub size_bytes: u64,
    pub mtime_secs: u64,
    pub is_file: bool,
}

pub async fn stat(path: &Path) -> Result<Option<Stat>, ValkyrieError> {
    match tokio::fs::symlink_metadata(path).await {
        Ok(m) => Ok(Some(Stat {
            size_bytes: m.len(),
            mtime_secs: m.modified().map(unix_secs).unwrap_or(0),
            is_file: m.is_file(),
        })),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ValkyrieError::io("stat", path, e)),
    }
}

/// Removes a file; one that is already gone is fine (another loop got there first).
pub async fn remove(path: &Path) -> Result<bool, ValkyrieError> {
    match tokio::fs::remove_file(path).await {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(ValkyrieError::io("remove", path, e)),
    }
}

/// fsync of a folder, so that a rename in it survives a power cut.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "da39a3ee5e6b4b0d3255bfef95601890afd80709";

    #[test]
    fn names_are_classified() {
        let sha1: Sha1 = HEX.parse().unwrap();
        assert_eq!(FileName::parse(HEX, "da", "39"), FileName::Content(sha1));
        assert_eq!(
            FileName::parse(&quarantine_name(&sha1, 1_700_000_000), "da", "39"),
            FileName::Quarantined {
                sha1,
                since_secs: 1_700_000_000
            }
        );
        for bad in [
            &HEX.to_uppercase(),
            &format!("{HEX}.deleted."),
            &format!("{HEX}.deleted.+5"),
            &format!("{HEX}.deleted.x"),
            &format!("{HEX}.tmp"),
            "README",
            &HEX[..39],
        ] {
            assert_eq!(FileName::parse(bad, "da", "39"), FileName::Unknown, "{bad}");
        }
        // Right name, wrong folder.
        assert_eq!(FileName::parse(HEX, "da", "40"), FileName::Unknown);
        assert_eq!(
            content_file(Path::new("/d"), &sha1),
            Path::new("/d/da/39").join(HEX)
        );
        assert_eq!(shard_dir(Path::new("/d"), &sha1), Path::new("/d/da/39"));
    }

    #[tokio::test]
    async fn listings_are_sorted_and_hex_dirs_filtered() {
        let dir = tempfile::tempdir().unwrap();
        for d in ["ff", "0a", "tmp", "AB", "abc"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        std::fs::write(dir.path().join("ee"), b"a file, not a folder").unwrap();
        assert_eq!(hex_dirs(dir.path()).await.unwrap(), vec!["0a", "ff"]);
        assert!(list(&dir.path().join("absent")).await.unwrap().is_empty());
        let names: Vec<_> = list(dir.path())
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.name)
            .collect();
        assert_eq!(names, vec!["0a", "AB", "abc", "ee", "ff", "tmp"]);
    }
}
