//! The one walk over a local disk's layout: the scrubber, UNMOVE (its count up front and
//! its copy) and the gateway's `fsck` visit every file through it.
//!
//! Order: `tmp/` first when asked ([`Walk::with_temps`]), then every `<aa>/<bb>` folder in
//! sorted order, which is sha1 order, each folder's names sorted. Every name comes out
//! parsed ([`Entry`]): a temp, or a [`FileName`] of its folder, where a folder, a name
//! that is not UTF-8 or a sha1 in the wrong folder is [`FileName::Unknown`], never content.
//! Names directly under the root other than `tmp/` and the `<aa>` folders (UNMOVE's
//! progress file, an operator's notes) are not entries.
//!
//! Bounded: the walk holds the `<aa>` names (at most 256), the `<bb>` names of one `<aa>`
//! (at most 256) and the listing of one folder (~16 names at 1 M files per disk, ~1 500
//! at 100 M), and hands out one entry at a time; the caller paces itself
//! ([`crate::pace::Pacer`]). Resumable: [`Walk::after`] starts after a sha1 without
//! listing the folders before it, which is how UNMOVE resumes.
//!
//! An absent folder lists as empty (removed meanwhile, or a disk nothing was written to
//! yet). A folder that cannot be listed is a [`WalkError`], after which the walk goes on
//! with the next folder; only the root's failure ends it. Local disks only: a WebDAV disk
//! is walked by the `valkyrie` running beside it on its storage node.
//!
//! ```no_run
//! # async fn f() -> Result<(), valkyrie::ValkyrieError> {
//! use valkyrie::layout::FileName;
//! use valkyrie::walk::{Entry, Walk};
//! let mut walk = Walk::new("/srv/disk0");
//! while let Some(entry) = walk.next().await {
//!     if let Entry::Shard { name: FileName::Content(sha1), .. } = entry? {
//!         println!("{sha1}");
//!     }
//! }
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::vec;

use placement::Sha1;

use crate::error::ValkyrieError;
use crate::layout::{self, FileName, Listed};

/// One name found on the disk, with its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A name under `tmp/`: an upload in flight, an abandoned one, or anything else put
    /// there.
    Temp { path: PathBuf },
    /// A name in an `<aa>/<bb>` folder.
    Shard { path: PathBuf, name: FileName },
}

impl Entry {
    pub fn path(&self) -> &Path {
        match self {
            Entry::Temp { path } | Entry::Shard { path, .. } => path,
        }
    }
}

/// Which kind of folder a listing was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Folder {
    /// `tmp/`.
    Temps,
    /// The disk's root (its `<aa>` folders): nothing more can be walked.
    Root,
    /// An `<aa>` folder (its `<bb>` folders) or an `<aa>/<bb>` folder (its files).
    Fanout,
}

impl Folder {
    /// What was being done, for a log line or an error count.
    pub fn listing(self) -> &'static str {
        match self {
            Folder::Temps => "listing tmp/",
            Folder::Root => "listing the disk",
            Folder::Fanout => "listing a folder",
        }
    }
}

/// A folder the walk could not list.
#[derive(Debug)]
pub struct WalkError {
    pub folder: Folder,
    pub error: ValkyrieError,
}

impl WalkError {
    /// Whether the walk ended here (the root could not be listed).
    pub fn ends_walk(&self) -> bool {
        self.folder == Folder::Root
    }
}

impl From<WalkError> for ValkyrieError {
    fn from(e: WalkError) -> Self {
        e.error
    }
}

/// A walk over one disk; see the module doc.
#[derive(Debug)]
pub struct Walk {
    root: PathBuf,
    /// `tmp/` is still to be listed.
    temps_due: bool,
    /// The hex name of the sha1 after which the walk starts.
    after: Option<String>,
    /// The `<aa>` folders still to walk; `None` until the root is listed.
    aas: Option<vec::IntoIter<String>>,
    /// The `<aa>` folder being walked, and its `<bb>` folders still to walk.
    aa: String,
    bbs: vec::IntoIter<String>,
    /// The folder whose names are being handed out, and the names still to hand out.
    place: Place,
    dir: PathBuf,
    names: vec::IntoIter<Listed>,
}

/// Where the names being handed out come from.
#[derive(Debug)]
enum Place {
    Temps,
    Shard { aa: String, bb: String },
}

/// The next folder to list.
enum Listing {
    Temps,
    Root,
    Aa { aa: String },
    AaBb { aa: String, bb: String },
}

impl Walk {
    /// A walk over the `<aa>/<bb>` folders of the disk at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Walk {
            root: root.into(),
            temps_due: false,
            after: None,
            aas: None,
            aa: String::new(),
            bbs: Vec::new().into_iter(),
            place: Place::Temps,
            dir: PathBuf::new(),
            names: Vec::new().into_iter(),
        }
    }

    /// Walks `tmp/` first.
    pub fn with_temps(mut self) -> Self {
        self.temps_due = true;
        self
    }

    /// Starts after `sha1`: the folders before its own are not listed, and in its own
    /// folder only the names that sort after its content name come out.
    pub fn after(mut self, sha1: Sha1) -> Self {
        self.after = Some(sha1.to_hex());
        self
    }

    /// The next entry, `None` once the disk is walked. Every listing runs on the
    /// blocking pool.
    pub async fn next(&mut self) -> Option<Result<Entry, WalkError>> {
        loop {
            if let Some(listed) = self.names.next() {
                return Some(Ok(self.entry(listed)));
            }
            let listing = self.next_listing()?;
            let dir = match &listing {
                Listing::Temps => self.root.join(placement::disk::TMP_DIR),
                Listing::Root => self.root.clone(),
                Listing::Aa { aa } => self.root.join(aa),
                Listing::AaBb { aa, bb } => self.root.join(aa).join(bb),
            };
            match layout::list(&dir).await {
                Ok(names) => self.take(listing, dir, names),
                Err(error) => return Some(Err(self.failed(&listing, error))),
            }
        }
    }

    /// The next content file, as (sha1, path), passing over every other name: what
    /// UNMOVE copies and counts.
    pub async fn next_content(&mut self) -> Option<Result<(Sha1, PathBuf), WalkError>> {
        loop {
            match self.next().await? {
                Ok(Entry::Shard {
                    path,
                    name: FileName::Content(sha1),
                }) => return Some(Ok((sha1, path))),
                Ok(_) => continue,
                Err(e) => return Some(Err(e)),
            }
        }
    }

    fn next_listing(&mut self) -> Option<Listing> {
        if std::mem::take(&mut self.temps_due) {
            return Some(Listing::Temps);
        }
        let Some(aas) = self.aas.as_mut() else {
            return Some(Listing::Root);
        };
        if let Some(bb) = self.bbs.next() {
            let aa = self.aa.clone();
            return Some(Listing::AaBb { aa, bb });
        }
        aas.next().map(|aa| Listing::Aa { aa })
    }

    fn take(&mut self, listing: Listing, dir: PathBuf, names: Vec<Listed>) {
        // The resume point's `<aa>`, `<bb>` and content name.
        let after = self.after.as_deref().map(|h| (&h[0..2], &h[2..4], h));
        match listing {
            Listing::Temps => {
                self.place = Place::Temps;
                self.dir = dir;
                self.names = names.into_iter();
            }
            Listing::Root => {
                let mut aas = layout::hex_dir_names(names);
                aas.retain(|aa| after.is_none_or(|(a, _, _)| aa.as_str() >= a));
                self.aas = Some(aas.into_iter());
            }
            Listing::Aa { aa } => {
                let mut bbs = layout::hex_dir_names(names);
                bbs.retain(|bb| after.is_none_or(|(a, b, _)| (aa.as_str(), bb.as_str()) >= (a, b)));
                self.aa = aa;
                self.bbs = bbs.into_iter();
            }
            Listing::AaBb { aa, bb } => {
                let mut names = names;
                if let Some((a, b, hex)) = after
                    && (aa.as_str(), bb.as_str()) == (a, b)
                {
                    names.retain(|l| l.name.as_str() > hex);
                }
                self.place = Place::Shard { aa, bb };
                self.dir = dir;
                self.names = names.into_iter();
            }
        }
    }

    fn failed(&mut self, listing: &Listing, error: ValkyrieError) -> WalkError {
        let folder = match listing {
            Listing::Temps => Folder::Temps,
            Listing::Root => {
                self.aas = Some(Vec::new().into_iter());
                Folder::Root
            }
            Listing::Aa { .. } | Listing::AaBb { .. } => Folder::Fanout,
        };
        WalkError { folder, error }
    }

    fn entry(&self, listed: Listed) -> Entry {
        let path = self.dir.join(&listed.name);
        match &self.place {
            Place::Temps => Entry::Temp { path },
            Place::Shard { aa, bb } => {
                let name = if listed.utf8 && !listed.is_dir {
                    FileName::parse(&listed.name, aa, bb)
                } else {
                    FileName::Unknown
                };
                Entry::Shard { path, name }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{put_content, sha1_of};

    async fn all(mut walk: Walk) -> Vec<Result<Entry, WalkError>> {
        let mut out = Vec::new();
        while let Some(e) = walk.next().await {
            out.push(e);
        }
        out
    }

    /// The content sha1s an entry list holds, in order.
    fn contents(entries: &[Result<Entry, WalkError>]) -> Vec<Sha1> {
        entries
            .iter()
            .filter_map(|e| match e {
                Ok(Entry::Shard {
                    name: FileName::Content(sha1),
                    ..
                }) => Some(*sha1),
                _ => None,
            })
            .collect()
    }

    /// A disk holding `n` content files, and their sha1s sorted.
    fn disk_with(n: usize) -> (tempfile::TempDir, Vec<Sha1>) {
        let disk = tempfile::tempdir().unwrap();
        let mut shas: Vec<Sha1> = (0..n)
            .map(|i| put_content(disk.path(), format!("body {i}").as_bytes()))
            .collect();
        shas.sort();
        (disk, shas)
    }

    #[tokio::test]
    async fn temps_then_every_folder_in_sha1_order_parsed() {
        let (disk, shas) = disk_with(40);
        let root = disk.path();
        std::fs::create_dir_all(root.join("tmp/a-folder")).unwrap();
        std::fs::write(root.join("tmp/upload"), b"in flight").unwrap();
        std::fs::write(root.join("unmove.json"), b"{}").unwrap();
        std::fs::create_dir_all(root.join("zz/00")).unwrap();
        std::fs::write(root.join("zz/00/notes"), b"not walked").unwrap();
        let q = crate::quarantine::quarantine_file(root, &shas[3], 77)
            .await
            .unwrap()
            .unwrap();
        let dir = layout::shard_dir(root, &shas[5]);
        std::fs::create_dir(dir.join("sub")).unwrap();
        std::fs::write(dir.join(shas[5].to_hex().to_uppercase()), b"x").unwrap();

        let entries = all(Walk::new(root).with_temps()).await;
        assert_eq!(
            entries[..2]
                .iter()
                .map(|e| e.as_ref().unwrap())
                .collect::<Vec<_>>(),
            [
                &Entry::Temp {
                    path: root.join("tmp/a-folder")
                },
                &Entry::Temp {
                    path: root.join("tmp/upload")
                },
            ]
        );
        let mut expected = shas.clone();
        expected.remove(3);
        assert_eq!(contents(&entries), expected);
        let quarantined = Entry::Shard {
            path: q,
            name: FileName::Quarantined {
                sha1: shas[3],
                since_secs: 77,
            },
        };
        assert!(
            entries
                .iter()
                .any(|e| e.as_ref().ok() == Some(&quarantined))
        );
        let unknown = |e: &&Result<Entry, WalkError>| {
            matches!(
                e,
                Ok(Entry::Shard {
                    name: FileName::Unknown,
                    ..
                })
            )
        };
        assert_eq!(entries.iter().filter(unknown).count(), 2);
        assert_eq!(entries.len(), 2 + 40 + 2);
        // Without temps, the same walk less `tmp/`.
        assert_eq!(all(Walk::new(root)).await.len(), 40 + 2);
    }

    #[tokio::test]
    async fn a_walk_resumes_after_a_sha1() {
        let (disk, shas) = disk_with(300);
        let root = disk.path();
        // A name sorting before any sha1, in a folder after the resume point: still walked.
        let later = layout::shard_dir(root, &shas[200]);
        std::fs::write(later.join("0-notes"), b"x").unwrap();
        for at in [0, 1, 150, 298, 299] {
            let entries = all(Walk::new(root).after(shas[at])).await;
            assert_eq!(contents(&entries), shas[at + 1..], "after #{at}");
            let notes = entries
                .iter()
                .any(|e| e.as_ref().unwrap().path() == later.join("0-notes"));
            assert_eq!(notes, at < 200, "after #{at}");
        }
        let unstored = sha1_of(b"not stored");
        let entries = all(Walk::new(root).after(unstored)).await;
        assert_eq!(
            contents(&entries),
            shas.iter()
                .copied()
                .filter(|s| *s > unstored)
                .collect::<Vec<_>>()
        );
    }

    #[tokio::test]
    async fn an_unlistable_root_ends_the_walk_an_absent_one_is_empty() {
        let disk = tempfile::tempdir().unwrap();
        assert!(
            all(Walk::new(disk.path().join("absent")).with_temps())
                .await
                .is_empty()
        );
        let file = disk.path().join("a-file");
        std::fs::write(&file, b"not a folder").unwrap();
        let entries = all(Walk::new(&file).with_temps()).await;
        assert_eq!(entries.len(), 2, "{entries:?}");
        let folders: Vec<Folder> = entries
            .iter()
            .map(|e| e.as_ref().unwrap_err().folder)
            .collect();
        assert_eq!(folders, [Folder::Temps, Folder::Root]);
        assert!(entries[1].as_ref().unwrap_err().ends_walk());
    }
}
