//! Test support: real directories and files, an in-memory catalog (the catalog is
//! metadata, not storage), an injected clock.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use placement::disk::LocalDisk;
use placement::{ContentHasher, Disk, DiskRef, PairId, PairRecord, Sha1};

use crate::catalog::{Catalog, CatalogError, DeletingEntry, FileState};
use crate::clock::{Clock, unix_secs};
use crate::layout;
use crate::settings::Settings;
use crate::worker::{Worker, WorkerConfig};

pub fn sha1_of(body: &[u8]) -> Sha1 {
    ContentHasher::digest(body).sha1
}

/// Writes `body` at its content address under `root`, as a committed upload would.
pub fn put_content(root: &Path, body: &[u8]) -> Sha1 {
    let sha1 = sha1_of(body);
    let path = layout::content_file(root, &sha1);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, body).unwrap();
    sha1
}

/// A body whose sha1 has `master` as its master disk.
pub fn body_with_master(master: usize, tag: &str) -> Vec<u8> {
    (0..)
        .map(|i| format!("{tag} #{i}").into_bytes())
        .find(|b| sha1_of(b).master_disk() == master)
        .unwrap()
}

/// Sets a file's mtime `secs` into the past.
pub fn age(path: &Path, secs: u64) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(secs))
        .unwrap();
}

/// Every regular file under `root`, relative, sorted.
pub fn files_under(root: &Path) -> Vec<String> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, root, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

/// A clock the test moves by hand; starts at the real time so that real mtimes compare.
#[derive(Clone)]
pub struct TestClock(Arc<AtomicU64>);

impl TestClock {
    pub fn new() -> Self {
        TestClock(Arc::new(AtomicU64::new(unix_secs(SystemTime::now()))))
    }

    pub fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    pub fn set(&self, secs: u64) {
        self.0.store(secs, Ordering::SeqCst);
    }

    pub fn clock(&self) -> Clock {
        let t = self.0.clone();
        Clock::from_fn(move || t.load(Ordering::SeqCst))
    }
}

type LookupHook = Box<dyn FnMut(Sha1, &mut HashMap<Sha1, FileState>) + Send>;
type RelocateHook = Box<dyn FnMut(Sha1, &mut HashMap<Sha1, FileState>) + Send>;

/// The catalog in memory, with hooks to change it between a worker's steps.
#[derive(Default)]
pub struct MemCatalog {
    pub files: Mutex<HashMap<Sha1, FileState>>,
    pub deleting: Mutex<BTreeMap<Sha1, DeletingEntry>>,
    pub pairs: Mutex<BTreeMap<PairId, PairRecord>>,
    /// Successful relocations, in order.
    pub relocated: Mutex<Vec<(Sha1, PairId, PairId)>>,
    pub relocate_calls: AtomicUsize,
    pub fail_lookups: AtomicBool,
    /// Lookups made through [`Catalog::lookup_fenced`].
    pub fenced_lookups: AtomicUsize,
    lookup_hook: Mutex<Option<LookupHook>>,
    relocate_hook: Mutex<Option<RelocateHook>>,
}

impl MemCatalog {
    pub fn set_file(&self, sha1: Sha1, pair: PairId, refs: u32, do_not_delete: bool) {
        self.files.lock().unwrap().insert(
            sha1,
            FileState {
                refs,
                pair,
                do_not_delete,
            },
        );
    }

    pub fn file(&self, sha1: Sha1) -> Option<FileState> {
        self.files.lock().unwrap().get(&sha1).copied()
    }

    /// `dec` to zero: the record moves from `files` to `deleting`.
    pub fn dec_to_zero(&self, sha1: Sha1, pair: PairId, since_secs: u64) {
        self.files.lock().unwrap().remove(&sha1);
        self.deleting.lock().unwrap().insert(
            sha1,
            DeletingEntry {
                sha1,
                pair,
                since_secs,
            },
        );
    }

    pub fn has_deleting(&self, sha1: Sha1) -> bool {
        self.deleting.lock().unwrap().contains_key(&sha1)
    }

    /// Called before each lookup answers; may change `files`.
    pub fn on_lookup(
        &self,
        hook: impl FnMut(Sha1, &mut HashMap<Sha1, FileState>) + Send + 'static,
    ) {
        *self.lookup_hook.lock().unwrap() = Some(Box::new(hook));
    }

    /// Called before each relocate is decided; may change `files`.
    pub fn on_relocate(
        &self,
        hook: impl FnMut(Sha1, &mut HashMap<Sha1, FileState>) + Send + 'static,
    ) {
        *self.relocate_hook.lock().unwrap() = Some(Box::new(hook));
    }

    pub fn add_pair(&self, id: PairId, disks: [&Path; 2]) {
        let mut record = PairRecord::new([DiskRef::local(disks[0]), DiskRef::local(disks[1])]);
        record.free_bytes = [1 << 40, 1 << 40];
        record.capacity_bytes = [1 << 40, 1 << 40];
        self.pairs.lock().unwrap().insert(id, record);
    }
}

impl Catalog for MemCatalog {
    async fn lookup(&self, sha1: Sha1) -> Result<Option<FileState>, CatalogError> {
        if self.fail_lookups.load(Ordering::SeqCst) {
            return Err(CatalogError::Unreachable("test: catalog down".into()));
        }
        let mut files = self.files.lock().unwrap();
        if let Some(hook) = self.lookup_hook.lock().unwrap().as_mut() {
            hook(sha1, &mut files);
        }
        Ok(files.get(&sha1).copied())
    }

    /// Nothing is in flight in memory: the plain lookup, counted.
    async fn lookup_fenced(&self, sha1: Sha1) -> Result<Option<FileState>, CatalogError> {
        self.fenced_lookups.fetch_add(1, Ordering::SeqCst);
        self.lookup(sha1).await
    }

    async fn deleting(
        &self,
        pair: PairId,
        after: Option<Sha1>,
        limit: usize,
    ) -> Result<Vec<DeletingEntry>, CatalogError> {
        let deleting = self.deleting.lock().unwrap();
        Ok(deleting
            .values()
            .filter(|e| e.pair == pair && after.is_none_or(|a| e.sha1 > a))
            .take(limit)
            .copied()
            .collect())
    }

    async fn remove_deleting(&self, sha1: Sha1, pair: PairId) -> Result<(), CatalogError> {
        let mut deleting = self.deleting.lock().unwrap();
        if deleting.get(&sha1).is_some_and(|e| e.pair == pair) {
            deleting.remove(&sha1);
        }
        Ok(())
    }

    async fn relocate(&self, sha1: Sha1, from: PairId, to: PairId) -> Result<bool, CatalogError> {
        self.relocate_calls.fetch_add(1, Ordering::SeqCst);
        let mut files = self.files.lock().unwrap();
        if let Some(hook) = self.relocate_hook.lock().unwrap().as_mut() {
            hook(sha1, &mut files);
        }
        match files.get_mut(&sha1) {
            Some(state) if state.pair == from => {
                state.pair = to;
                self.relocated.lock().unwrap().push((sha1, from, to));
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn set_read_only(&self, pair: PairId) -> Result<(), CatalogError> {
        let mut pairs = self.pairs.lock().unwrap();
        match pairs.get_mut(&pair) {
            Some(record) => {
                record.flags = record.flags.with(placement::PairFlags::READ_ONLY);
                Ok(())
            }
            None => Err(CatalogError::Store(format!("no {pair}"))),
        }
    }

    async fn pairs(&self) -> Result<Vec<(PairId, PairRecord)>, CatalogError> {
        Ok(self
            .pairs
            .lock()
            .unwrap()
            .iter()
            .map(|(id, r)| (*id, r.clone()))
            .collect())
    }
}

pub fn local_disk(root: &Path) -> Disk {
    Disk::Local(LocalDisk::new(DiskRef::local(root), root.to_path_buf()))
}

/// Short durations, tiny batches and pages (so that tests cross batch boundaries), no
/// rate limit.
pub fn test_settings() -> Settings {
    Settings {
        quarantine_secs: 1000,
        slave_delay_secs: 100,
        scrub_interval_secs: 3600,
        grace_secs: 500,
        scrub_bytes_per_sec: 0,
        temp_max_age_secs: 500,
        deletion_interval_secs: 3600,
        deletion_page_entries: 2,
        scrub_batch_files: 3,
    }
}

/// Pair 0 on two temp directories, one catalog, one clock.
pub struct Rig {
    pub dirs: [tempfile::TempDir; 2],
    pub catalog: Arc<MemCatalog>,
    pub clock: TestClock,
    pub settings: Settings,
}

pub const PAIR: PairId = PairId(0);
/// A second pair, for junk and UNMOVE targets.
pub const PAIR_B: PairId = PairId(1);

impl Rig {
    pub async fn new() -> Rig {
        let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let catalog = Arc::new(MemCatalog::default());
        catalog.add_pair(PAIR, [dirs[0].path(), dirs[1].path()]);
        Rig {
            dirs,
            catalog,
            clock: TestClock::new(),
            settings: test_settings(),
        }
    }

    pub fn root(&self, index: usize) -> PathBuf {
        self.dirs[index].path().to_path_buf()
    }

    pub fn config(&self, index: usize) -> WorkerConfig {
        WorkerConfig {
            root: self.root(index),
            pair: PAIR,
            index,
            peer: local_disk(&self.root(1 - index)),
            settings: self.settings.clone(),
        }
    }

    pub fn worker(&self, index: usize) -> Worker<Arc<MemCatalog>> {
        Worker::new(self.catalog.clone(), self.config(index), self.clock.clock()).unwrap()
    }

    /// Stores `body` on both disks with a live record on pair 0.
    pub fn put_live(&self, body: &[u8]) -> Sha1 {
        let sha1 = put_content(&self.root(0), body);
        put_content(&self.root(1), body);
        self.catalog.set_file(sha1, PAIR, 1, false);
        sha1
    }

    pub fn content(&self, index: usize, sha1: &Sha1) -> PathBuf {
        layout::content_file(&self.root(index), sha1)
    }

    pub fn quarantined(&self, index: usize, sha1: &Sha1) -> Vec<String> {
        let hex = sha1.to_hex();
        files_under(&self.root(index))
            .into_iter()
            .filter(|f| f.contains(&format!("{hex}.deleted.")))
            .collect()
    }
}
