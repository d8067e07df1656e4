//! Group durability of content files: one pass makes every upload that is ready at that
//! moment durable, as the metadata's group commit does for commands.
//!
//! The write protocol's promise is that a content name is durable, and names durable
//! data, before the upload is acknowledged and its record committed. Done per upload with
//! fsync, that is four journal commits per PUT (two copies, each with its file and its
//! directory), and they dominate a small PUT. Here one thread per filesystem takes every
//! upload waiting at that moment and runs one pass for the group:
//!
//! 1. the `aa/bb` directories the group needs are made where missing (remembered
//!    afterwards instead of checked per upload);
//! 2. each temp file is renamed to its content address **without replacing** anything
//!    (`RENAME_NOREPLACE`);
//! 3. one `syncfs` writes back and commits all of it: the data, the new directories and
//!    the new names, in one journal commit and one device flush.
//!
//! Naming before the data is durable is safe only because no existing name is replaced:
//! a file some record points at is never touched. A crash before the syncfs leaves at
//! worst a new content file without a record (the upload was not acknowledged: its record
//! commits after the pass; Valkyrie removes the orphan), or, where a record's copy was
//! missing anyway (an upload healing it, a repair), a copy that still fails the size and
//! CRC32 checks of every read, as it did before. A name that already exists (a
//! racing upload of the same content, a crash leftover, a copy being healed) or a
//! filesystem without `RENAME_NOREPLACE` takes the careful order instead: the pass's
//! syncfs has made its data durable, then it is renamed over the old file, then a second
//! syncfs.
//!
//! Disks of a pair on one filesystem share the thread and its passes; disks on different
//! devices sync in parallel. While a pass runs, the next uploads queue up and form the
//! next group, so the cost per upload falls as load rises, and a lone upload waits for
//! nothing but its own syncfs. `syncfs` also writes whatever else is dirty on the
//! filesystem (it would be written soon anyway): content disks are meant to be dedicated.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::{mpsc, oneshot};

/// Uploads waiting for a pass before a new one waits for room (a bound on the queue; the
/// uploads themselves are bounded by the gateway's connection and staging limits).
const QUEUE_MAX: usize = 4096;
/// Most uploads one pass takes: a bound on the time a pass holds its group.
const GROUP_MAX: usize = 512;
/// `aa/bb` directories remembered per syncer (every one of 65 536 per disk, a few disks).
const KNOWN_DIRS_MAX: usize = 1 << 20;

/// A temp file, complete, to be given its content address durably.
pub struct Durable {
    pub file: File,
    pub tmp: PathBuf,
    pub target: PathBuf,
}

/// Files of one upload on one filesystem (both copies, when the pair's disks share it):
/// they travel together so that one pass covers them all.
struct Job {
    works: Vec<Durable>,
    done: oneshot::Sender<Vec<io::Result<()>>>,
}

/// Makes every file of `works` durable under its target name with the next group pass of
/// its filesystem; one result per file, in order. A file that failed has its temp file
/// removed (its name may have been given but not made durable: the caller acknowledges
/// nothing, and Valkyrie removes a content file without a record).
pub async fn commit(works: Vec<Durable>) -> Vec<io::Result<()>> {
    let mut results: Vec<Option<io::Result<()>>> = works.iter().map(|_| None).collect();
    // (device, positions in `works`, files)
    let mut by_device: Vec<(u64, Vec<usize>, Vec<Durable>)> = Vec::new();
    for (i, work) in works.into_iter().enumerate() {
        match work.file.metadata() {
            Ok(meta) => match by_device.iter_mut().find(|(dev, ..)| *dev == meta.dev()) {
                Some((_, at, group)) => {
                    at.push(i);
                    group.push(work);
                }
                None => by_device.push((meta.dev(), vec![i], vec![work])),
            },
            Err(e) => {
                let _ = fs::remove_file(&work.tmp);
                results[i] = Some(Err(e));
            }
        }
    }
    let passes = by_device
        .into_iter()
        .map(|(dev, at, works)| async move { (at, on_device(dev, works).await) });
    for (at, answers) in futures_util::future::join_all(passes).await {
        for (i, answer) in at.into_iter().zip(answers) {
            results[i] = Some(answer);
        }
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(stopped())))
        .collect()
}

fn stopped() -> io::Error {
    io::Error::other("durability thread stopped")
}

/// Sends `works` (all on device `dev`) to its syncer and waits for the pass.
async fn on_device(dev: u64, works: Vec<Durable>) -> Vec<io::Result<()>> {
    let count = works.len();
    let tmps: Vec<PathBuf> = works.iter().map(|w| w.tmp.clone()).collect();
    let (done, answer) = oneshot::channel();
    let sent = match syncer_for(dev) {
        Ok(syncer) => syncer
            .send(Job { works, done })
            .await
            .map_err(|_| stopped()),
        Err(e) => Err(e),
    };
    let answers = match sent {
        Ok(()) => answer.await.ok().filter(|a: &Vec<_>| a.len() == count),
        Err(_) => None,
    };
    answers.unwrap_or_else(|| {
        for tmp in &tmps {
            let _ = fs::remove_file(tmp);
        }
        (0..count).map(|_| Err(stopped())).collect()
    })
}

/// The queue of the thread that syncs device `dev`, started on first use.
fn syncer_for(dev: u64) -> io::Result<mpsc::Sender<Job>> {
    static SYNCERS: OnceLock<Mutex<HashMap<u64, mpsc::Sender<Job>>>> = OnceLock::new();
    let mut syncers = SYNCERS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(tx) = syncers.get(&dev).filter(|tx| !tx.is_closed()) {
        return Ok(tx.clone());
    }
    let (tx, rx) = mpsc::channel(QUEUE_MAX);
    std::thread::Builder::new()
        .name(format!("durable-{dev:x}"))
        .spawn(move || run(rx))?;
    syncers.insert(dev, tx.clone());
    Ok(tx)
}

fn run(mut rx: mpsc::Receiver<Job>) {
    let mut known = KnownDirs::default();
    let mut jobs = Vec::new();
    while let Some(first) = rx.blocking_recv() {
        let mut files = first.works.len();
        jobs.push(first);
        while files < GROUP_MAX {
            match rx.try_recv() {
                Ok(job) => {
                    files += job.works.len();
                    jobs.push(job);
                }
                Err(_) => break,
            }
        }
        let mut group = Vec::with_capacity(files);
        let mut replies = Vec::with_capacity(jobs.len());
        for job in jobs.drain(..) {
            replies.push((job.works.len(), job.done));
            group.extend(job.works);
        }
        let mut results = pass(&group, &mut known).into_iter();
        for (count, done) in replies {
            // The upload may have given up waiting (its client went away): nothing to tell.
            let _ = done.send(results.by_ref().take(count).collect());
        }
    }
}

/// One group pass over `group`, one result per file. A file that failed has its temp file
/// removed.
fn pass(group: &[Durable], known: &mut KnownDirs) -> Vec<io::Result<()>> {
    // 1. Directories.
    let mut results: Vec<io::Result<()>> = group.iter().map(|work| make_dir(work, known)).collect();
    // 2. New names.
    let mut replacing = vec![false; group.len()];
    for ((work, result), replace) in group.iter().zip(&mut results).zip(&mut replacing) {
        if result.is_ok() {
            match name_new(work, known) {
                Ok(Named::New) => {}
                Ok(Named::Taken) => *replace = true,
                Err(e) => *result = Err(e),
            }
        }
    }
    // 3. Data, directories and new names, at once.
    sync_into(group, &mut results, |_| true);
    // The careful order for names that replace a file: their data is durable now.
    if replacing.iter().any(|r| *r) {
        for ((work, result), replace) in group.iter().zip(&mut results).zip(&replacing) {
            if *replace && result.is_ok() {
                *result = fs::rename(&work.tmp, &work.target);
            }
        }
        sync_into(group, &mut results, |i| replacing[i]);
    }
    for (work, result) in group.iter().zip(&results) {
        if result.is_err() {
            let _ = fs::remove_file(&work.tmp);
        }
    }
    results
}

/// Syncs the filesystem of the group if any upload chosen by `which` is still on its way;
/// a failure fails each of them.
fn sync_into(group: &[Durable], results: &mut [io::Result<()>], which: impl Fn(usize) -> bool) {
    let pending = |i: usize, r: &io::Result<()>| r.is_ok() && which(i);
    let Some(at) = results.iter().enumerate().position(|(i, r)| pending(i, r)) else {
        return;
    };
    if let Err(e) = rustix::fs::syncfs(&group[at].file) {
        let e = io::Error::from(e);
        for (i, r) in results.iter_mut().enumerate() {
            if pending(i, r) {
                *r = Err(copy_error(&e));
            }
        }
    }
}

fn copy_error(e: &io::Error) -> io::Error {
    io::Error::new(e.kind(), e.to_string())
}

/// Creates the directory of `work`'s target if this syncer has not seen it (no fsync: the
/// pass's syncfs makes it durable before any name is given in it).
fn make_dir(work: &Durable, known: &mut KnownDirs) -> io::Result<()> {
    let dir = target_dir(work)?;
    if !known.contains(dir) {
        fs::create_dir_all(dir)?;
        known.insert(dir);
    }
    Ok(())
}

fn target_dir(work: &Durable) -> io::Result<&Path> {
    work.target
        .parent()
        .ok_or_else(|| io::Error::other("content path has no parent"))
}

/// How [`name_new`] went.
enum Named {
    /// The content address is the temp file's name now.
    New,
    /// Not named: the address is taken, or the filesystem cannot rename without
    /// replacing. The careful order names it.
    Taken,
}

/// `rename(tmp, target)` unless `target` exists. A directory removed behind the syncer's
/// back since it was made (an operator, a disk swapped under a mount point) is made again.
fn name_new(work: &Durable, known: &mut KnownDirs) -> io::Result<Named> {
    let rename = || {
        rustix::fs::renameat_with(
            rustix::fs::CWD,
            &work.tmp,
            rustix::fs::CWD,
            &work.target,
            rustix::fs::RenameFlags::NOREPLACE,
        )
    };
    let renamed = match rename() {
        Err(rustix::io::Errno::NOENT) if work.tmp.exists() => {
            let dir = target_dir(work)?;
            known.forget(dir);
            fs::create_dir_all(dir)?;
            known.insert(dir);
            rename()
        }
        other => other,
    };
    match renamed {
        Ok(()) => Ok(Named::New),
        Err(rustix::io::Errno::EXIST | rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
            Ok(Named::Taken)
        }
        Err(e) => Err(e.into()),
    }
}

/// Directories known to exist, so that a rename does not stat its directory first.
#[derive(Default)]
struct KnownDirs(HashSet<Arc<Path>>);

impl KnownDirs {
    fn contains(&self, dir: &Path) -> bool {
        self.0.contains(dir)
    }

    fn insert(&mut self, dir: &Path) {
        if self.0.len() >= KNOWN_DIRS_MAX {
            // Many disks come and went: start over rather than grow without end.
            self.0.clear();
        }
        self.0.insert(Arc::from(dir));
    }

    fn forget(&mut self, dir: &Path) {
        self.0.remove(dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn temp(root: &Path, name: &str, body: &[u8]) -> Durable {
        let tmp = root.join("tmp").join(name);
        fs::create_dir_all(tmp.parent().unwrap()).unwrap();
        let mut file = File::create(&tmp).unwrap();
        file.write_all(body).unwrap();
        let target = root.join("aa").join("bb").join(name);
        Durable { file, tmp, target }
    }

    async fn one(work: Durable) -> io::Result<()> {
        commit(vec![work]).await.pop().unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_commits_land_under_their_names_and_leave_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let mut tasks = Vec::new();
        for i in 0..200u32 {
            let root = root.clone();
            tasks.push(tokio::spawn(async move {
                let mut a = temp(&root, &format!("a{i}"), &i.to_le_bytes());
                a.target = root
                    .join(format!("{:02x}", i % 7))
                    .join("ab")
                    .join(format!("c{i}"));
                let b = temp(&root, &format!("b{i}"), &i.to_be_bytes());
                let targets = [a.target.clone(), b.target.clone()];
                for r in commit(vec![a, b]).await {
                    r.unwrap();
                }
                assert_eq!(fs::read(&targets[0]).unwrap(), i.to_le_bytes());
                assert_eq!(fs::read(&targets[1]).unwrap(), i.to_be_bytes());
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(fs::read_dir(root.join("tmp")).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn a_directory_removed_behind_its_back_is_made_again() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        one(temp(root, "one", b"1")).await.unwrap();
        fs::remove_dir_all(root.join("aa")).unwrap();
        let two = temp(root, "two", b"2");
        let target = two.target.clone();
        one(two).await.unwrap();
        assert_eq!(fs::read(target).unwrap(), b"2");
    }

    #[tokio::test]
    async fn an_existing_name_is_replaced_only_by_durable_data() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        // A leftover under the content name (a crash before the pass's syncfs, or a bad
        // copy being healed): the careful order replaces it.
        let work = temp(root, "c", b"the content");
        fs::create_dir_all(work.target.parent().unwrap()).unwrap();
        fs::write(&work.target, b"garbage").unwrap();
        let (target, tmp) = (work.target.clone(), work.tmp.clone());
        one(work).await.unwrap();
        assert_eq!(fs::read(target).unwrap(), b"the content");
        assert!(!tmp.exists());
    }

    #[tokio::test]
    async fn a_failed_rename_fails_its_file_only_and_removes_its_temp() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        // A target whose "directory" is a file: the rename cannot succeed.
        fs::write(root.join("blocker"), b"").unwrap();
        let mut bad = temp(root, "bad", b"x");
        bad.target = root.join("blocker").join("x");
        let bad_tmp = bad.tmp.clone();
        let good = temp(root, "good", b"y");
        let good_target = good.target.clone();
        let results = commit(vec![bad, good]).await;
        assert!(results[0].is_err());
        assert!(results[1].is_ok());
        assert!(!bad_tmp.exists());
        assert_eq!(fs::read(good_target).unwrap(), b"y");
    }
}
