//! `gateway fsck`: checks the invariants of a stopped gateway's data folder.
//!
//! - every object's content has a FileDB record, and is on both disks of its pair with
//!   the right hash;
//! - every FileDB record's refs equals the number of object versions (current and
//!   noncurrent) and upload parts that reference it (a DO_NOT_DELETE record is
//!   reported, not counted as an error: it is the article's own alarm, already raised);
//! - no content file lies on a local disk without a record, outside quarantine, the
//!   `deleting` queue and the grace period of uploads in flight.
//!
//! It reads every content file, so it is an offline tool for tests and incidents, not a
//! monitor; Valkyrie's scrub is the online check.
//!
//! Where the metadata is split over groups (`docs/scaling.md`), FileDB is the records each
//! group this node holds a replica of owns (`groups/<id>/`, each replayed like root), and
//! the references it counts include those in flight between groups: a dec owed in root's
//! outbox still counts, and so does a reference taken for an entry that does not exist
//! (pending: the reconciler releases it after its deadline). Objects whose content lies
//! in a group this node holds no replica of are counted as unchecked. The S3 index is, in
//! root and each index group held here, the keys the committed map gives that group (a
//! store may keep rows a split left behind, or hold a copy a split under way is still
//! making: neither is counted); when an index group is not held here, the references of
//! its keys are unknown, and the refs of FileDB records are not compared at all (reported:
//! the index groups not held), while records, copies and junk still are.

use std::collections::HashMap;
use std::fmt;
use std::io::Read as _;
use std::path::Path;
use std::time::{Duration, SystemTime};

use placement::{Disk, PairId, Sha1};
use valkyrie::layout::FileName;
use valkyrie::walk::{Entry, Walk};

use meta::groups::{GroupId, GroupKind, ROOT, ShardMap};
use meta::native_refs::NativeRefs;
use meta::ref_log::RefState;
use meta::versions::VersionRecord;
use meta::{MetaError, MetaStore};

/// Problems listed in full up to this many; beyond, only counted.
const LISTED_MAX: usize = 100;

#[derive(Debug, thiserror::Error)]
pub enum FsckError {
    #[error("cannot open {0}: {1} (is the gateway still running? stop it first)")]
    Open(String, MetaError),
    #[error("metadata: {0}")]
    Meta(#[from] MetaError),
}

#[derive(Debug, Default)]
pub struct Report {
    pub objects: u64,
    pub parts: u64,
    /// Object versions that are not current (each holds its own reference).
    pub noncurrent_versions: u64,
    pub delete_markers: u64,
    pub files: u64,
    pub copies_checked: u64,
    pub junk: u64,
    pub deleting: u64,
    pub quarantined: u64,
    pub young_orphans: u64,
    pub do_not_delete: u64,
    /// Contents with references taken through the native API.
    pub native_refs: u64,
    /// Copies of live contents found only in quarantine, with the right bytes (the next
    /// read or scrub restores them).
    pub restorable: u64,
    /// The metadata groups whose replicas this data folder holds (root included).
    pub groups: u64,
    /// References a FileDB group holds pending for an entry that does not exist.
    pub pending_refs: u64,
    /// Decs owed in root's outbox to a FileDB group.
    pub owed_decs: u64,
    /// Objects and parts whose content lies in a group this node holds no replica of.
    pub unchecked: u64,
    /// Index groups this folder holds no replica of: FileDB's refs are not compared.
    pub index_groups_not_held: Vec<GroupId>,
    pub errors: u64,
    pub problems: Vec<String>,
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.errors == 0
    }

    fn error(&mut self, what: String) {
        self.errors += 1;
        if self.problems.len() < LISTED_MAX {
            self.problems.push(what);
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.problems {
            writeln!(f, "error: {p}")?;
        }
        writeln!(
            f,
            "fsck: {} objects, {} parts, {} files, {} copies verified, {} junk, {} deleting, {} quarantined, {} young orphans, {} DO_NOT_DELETE, {} with native references, {} noncurrent versions, {} delete markers, {} live copies in quarantine, {} errors",
            self.objects,
            self.parts,
            self.files,
            self.copies_checked,
            self.junk,
            self.deleting,
            self.quarantined,
            self.young_orphans,
            self.do_not_delete,
            self.native_refs,
            self.noncurrent_versions,
            self.delete_markers,
            self.restorable,
            self.errors
        )?;
        if self.groups > 1 {
            writeln!(
                f,
                "fsck: {} metadata groups held here, {} references pending, {} decs owed, {} objects and parts in groups not held here",
                self.groups, self.pending_refs, self.owed_decs, self.unchecked
            )?;
        }
        if !self.index_groups_not_held.is_empty() {
            writeln!(
                f,
                "fsck: references not compared: index groups {:?} are not held here",
                self.index_groups_not_held
            )?;
        }
        writeln!(
            f,
            "fsck: {}",
            if self.is_clean() {
                "clean"
            } else {
                "VIOLATIONS FOUND"
            }
        )
    }
}

fn sha1_of_file(path: &Path) -> std::io::Result<Sha1> {
    let mut file = std::fs::File::open(path)?;
    let mut h = placement::NameHasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finish().sha1)
}

/// The bytes of a copy through its backend (local or WebDAV).
/// Whether a local disk holds a quarantined copy of `sha1` whose bytes hash to it.
fn quarantined_copy(disk: &Disk, sha1: &Sha1) -> bool {
    let Disk::Local(d) = disk else {
        return false;
    };
    let dir = valkyrie::layout::shard_dir(d.root(), sha1);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return false;
    };
    let names = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned());
    // Bounded: one shard folder, and at most a few quarantined copies of one sha1 in it.
    valkyrie::layout::quarantined_names(sha1, names)
        .iter()
        .any(|(_, name)| sha1_of_file(&dir.join(name)).is_ok_and(|got| got == *sha1))
}

fn read_copy(rt: &tokio::runtime::Runtime, disk: &Disk, sha1: &Sha1) -> Result<Sha1, String> {
    if let Disk::Local(d) = disk {
        return sha1_of_file(&d.content_file(sha1)).map_err(|e| e.to_string());
    }
    let bytes = rt
        .block_on(disk.read_all(sha1))
        .map_err(|e| e.to_string())?;
    Ok(placement::NameHasher::name_of(&bytes))
}

pub fn run(data_dir: &Path, grace_secs: u64) -> Result<Report, FsckError> {
    let db_path = data_dir.join("meta.redb");
    // What a restart would apply first: committed log entries past the last checkpoint.
    meta::raft::replay_offline(data_dir)
        .map_err(|e| FsckError::Open(db_path.display().to_string(), e))?;
    let meta =
        MetaStore::open(&db_path).map_err(|e| FsckError::Open(db_path.display().to_string(), e))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| MetaError::Storage(e.to_string()))?;
    let mut report = Report::default();
    let filedb = FileDb::open(data_dir, &meta)?;
    report.groups = filedb.stores.len() as u64 + 1;
    // Every reference FileDB counts: objects, parts, and the native API's (count and
    // wrapping magic sum each).
    let mut expected: HashMap<Sha1, NativeRefs> = HashMap::new();
    let mut add = |sha1: Sha1, count: u32, magic: u32| {
        let e = expected.entry(sha1).or_default();
        e.count = e.count.saturating_add(count);
        e.magic = e.magic.wrapping_add(magic);
    };
    let mut objects = Vec::new();
    report.index_groups_not_held = filedb.index_groups_not_held();
    for (group, store) in filedb.index_stores() {
        let owns = |b: &str, k: &str| filedb.map.index_group(b, k) == group;
        store.for_each_object(|b, k, o| {
            if owns(b, k) {
                add(o.sha1, 1, o.magic.get());
                objects.push((format!("object {b}/{k}"), o.sha1));
                report.objects += 1;
            }
        })?;
        store.for_each_version(|b, k, v| match v {
            _ if !owns(b, k) => {}
            VersionRecord::Object { record, stamp, .. } => {
                add(record.sha1, 1, record.magic.get());
                objects.push((
                    format!("object {b}/{k} version {}", stamp.id(record.magic)),
                    record.sha1,
                ));
                report.noncurrent_versions += 1;
            }
            VersionRecord::DeleteMarker { .. } => report.delete_markers += 1,
        })?;
        let mut parts = Vec::new();
        store.for_each_part(|upload, number, p| parts.push((upload.to_string(), number, p)))?;
        for (upload, number, p) in parts {
            // A part is its upload's key's: an upload whose record is gone has no owner
            // (the group's own mistake, counted where it lies).
            let owned = match store.upload(&upload)? {
                Some(u) => owns(&u.bucket, &u.key),
                None => true,
            };
            if owned {
                add(p.sha1, 1, p.magic.get());
                objects.push((format!("upload {upload} part {number}"), p.sha1));
                report.parts += 1;
            }
        }
    }
    let mut natives = Vec::new();
    let mut files = HashMap::new();
    // The cross-group references each content's count includes, for error messages.
    let mut in_flight: HashMap<Sha1, Vec<String>> = HashMap::new();
    for (group, store) in filedb.all() {
        store.for_each_native(|sha1, n| {
            if filedb.owner(&sha1) == Some(group) {
                add(sha1, n.count, n.magic);
                natives.push(sha1);
            }
        })?;
        store.for_each_file(|sha1, rec| {
            if filedb.owner(&sha1) == Some(group) {
                files.insert(sha1, rec);
            }
        })?;
        // References in flight between groups that the record counts.
        for p in store.pending_refs(u64::MAX, usize::MAX)? {
            let sha1 = Sha1(p.sha1);
            if filedb.owner(&sha1) != Some(group) {
                continue;
            }
            if let RefState::Pending {
                magic, bucket, key, ..
            } = &p.state
                && let Some(index) = filedb.index_store(bucket, key)
                && !index.holds_ref(bucket, key, p.ref_id)?
            {
                add(sha1, 1, *magic);
                report.pending_refs += 1;
                in_flight
                    .entry(sha1)
                    .or_default()
                    .push(format!("pending {} for {bucket}/{key}", p.ref_id));
            }
        }
    }
    let mut owed_rows = Vec::new();
    for (group, store) in filedb.index_stores() {
        owed_rows.extend(
            store
                .outbox(usize::MAX)?
                .into_iter()
                .filter(|o| filedb.map.index_group(&o.bucket, &o.key) == group),
        );
    }
    for owed in owed_rows {
        let sha1 = Sha1(owed.sha1);
        let Some(group) = filedb.owner(&sha1) else {
            continue;
        };
        // Applied already (a `Released` row) when only its `OutboxDone` is missing.
        let applied = matches!(
            filedb.store(group).ref_state(&owed.sha1, owed.ref_id)?,
            Some(RefState::Released { .. })
        );
        if !applied {
            add(sha1, 1, owed.magic.get());
            report.owed_decs += 1;
            in_flight.entry(sha1).or_default().push(format!(
                "dec {} owed by {}/{}",
                owed.ref_id, owed.bucket, owed.key
            ));
        }
    }
    report.native_refs = natives.len() as u64;
    report.files = files.len() as u64;
    objects.retain(|(_, sha1)| {
        let held = filedb.owner(sha1).is_some();
        if !held {
            report.unchecked += 1;
        }
        held
    });
    for (name, sha1) in &objects {
        if !files.contains_key(sha1) {
            report.error(format!("{name}: content {sha1} has no FileDB record"));
        }
    }
    for sha1 in &natives {
        if !files.contains_key(sha1) {
            report.error(format!(
                "native references to {sha1}, which has no FileDB record"
            ));
        }
    }
    let mut disks: HashMap<PairId, [Disk; 2]> = HashMap::new();
    for (id, record) in meta.pairs()? {
        match (Disk::open(&record.disks[0]), Disk::open(&record.disks[1])) {
            (Ok(a), Ok(b)) => {
                disks.insert(id, [a, b]);
            }
            (Err(e), _) | (_, Err(e)) => report.error(format!("{id}: {e}")),
        }
    }
    let mut sorted: Vec<_> = files.iter().collect();
    sorted.sort_by_key(|(s, _)| **s);
    for (sha1, rec) in sorted {
        let want = expected.get(sha1).copied().unwrap_or_default();
        let counted = report.index_groups_not_held.is_empty();
        if rec.do_not_delete() {
            report.do_not_delete += 1;
        } else if !counted {
            // Some of its references may be in an index group not held here.
        } else if rec.refs != want.count {
            let in_flight = filedb.in_flight(sha1, &in_flight)?;
            report.error(format!(
                "{sha1}: refs {} but {} references{in_flight}",
                rec.refs, want.count
            ));
        } else if rec.magic != want.magic {
            // The right number of references, not the ones that were taken: some reference
            // was released with another's magic.
            report.error(format!(
                "{sha1}: magic {} but its references' magics sum to {}",
                rec.magic, want.magic
            ));
        }
        let Some(pair) = disks.get(&rec.pair) else {
            report.error(format!(
                "{sha1}: record names {} which is not in PairDB",
                rec.pair
            ));
            continue;
        };
        for disk in pair {
            match read_copy(&rt, disk, sha1) {
                Ok(got) if got == *sha1 => report.copies_checked += 1,
                Ok(got) => report.error(format!(
                    "{sha1} on {}: bytes hash to {got}",
                    disk.disk_ref()
                )),
                // The deletion loop's check-then-rename raced a re-upload of the same
                // bytes (the design's reversible quarantine): the next read or scrub
                // renames the copy back. Not lost, so not a violation; counted.
                Err(_) if quarantined_copy(disk, sha1) => report.restorable += 1,
                Err(e) => report.error(format!("{sha1} on {}: {e}", disk.disk_ref())),
            }
        }
    }
    let now = SystemTime::now();
    for (id, pair) in &disks {
        for disk in pair {
            let Disk::Local(d) = disk else { continue };
            rt.block_on(walk_disk(
                &filedb,
                d.root(),
                *id,
                &files,
                now,
                Duration::from_secs(grace_secs),
                &mut report,
            ))?;
        }
    }
    Ok(report)
}

/// FileDB as this data folder holds it: root's store (the caller's) and the store of each
/// other group with a folder here, each answering for the sha1s the committed shard map
/// gives it.
struct FileDb<'a> {
    root: &'a MetaStore,
    map: ShardMap,
    /// The groups other than root, by id.
    stores: Vec<(GroupId, MetaStore)>,
}

impl<'a> FileDb<'a> {
    fn open(data_dir: &Path, root: &'a MetaStore) -> Result<FileDb<'a>, FsckError> {
        let map = match root.shard_map()? {
            Some(map) => map,
            None => ShardMap::single(vec![1]).map_err(|e| MetaError::Corrupt(e.to_string()))?,
        };
        let mut stores = Vec::new();
        for id in meta::raft::replicas::group_folders(data_dir)? {
            let dir = meta::raft::replicas::group_dir(data_dir, id);
            let path = dir.join("meta.redb");
            meta::raft::replay_offline(&dir)
                .map_err(|e| FsckError::Open(path.display().to_string(), e))?;
            let store = MetaStore::open(&path)
                .map_err(|e| FsckError::Open(path.display().to_string(), e))?;
            stores.push((id, store));
        }
        Ok(FileDb { root, map, stores })
    }

    /// The group that answers for `sha1`, if this folder holds it.
    fn owner(&self, sha1: &Sha1) -> Option<GroupId> {
        let group = self.map.filedb_group(&sha1.0);
        (group == ROOT || self.stores.iter().any(|(id, _)| *id == group)).then_some(group)
    }

    fn store(&self, group: GroupId) -> &MetaStore {
        self.stores
            .iter()
            .find(|(id, _)| *id == group)
            .map_or(self.root, |(_, s)| s)
    }

    /// The stores holding keys of the S3 index: root's and those of the index groups held
    /// here, with their groups.
    fn index_stores(&self) -> Vec<(GroupId, &MetaStore)> {
        self.all()
            .into_iter()
            .filter(|(id, _)| {
                self.map
                    .group(*id)
                    .is_some_and(|g| matches!(g.kind, GroupKind::Root | GroupKind::Index))
            })
            .collect()
    }

    /// The store of the index group owning `bucket`/`key`, if this folder holds it.
    fn index_store(&self, bucket: &str, key: &str) -> Option<&MetaStore> {
        let group = self.map.index_group(bucket, key);
        (group == ROOT || self.stores.iter().any(|(id, _)| *id == group)).then(|| self.store(group))
    }

    /// The index groups of the committed map this folder holds no replica of.
    fn index_groups_not_held(&self) -> Vec<GroupId> {
        let mut out: Vec<GroupId> = self
            .map
            .index_intervals()
            .map(|(_, _, g)| g)
            .filter(|g| *g != ROOT && !self.stores.iter().any(|(id, _)| id == g))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Every store with its group, root first.
    fn all(&self) -> Vec<(GroupId, &MetaStore)> {
        std::iter::once((ROOT, self.root))
            .chain(self.stores.iter().map(|(id, s)| (*id, s)))
            .collect()
    }

    /// For an error message: the references in flight counted for `sha1`, and the
    /// `ref_log` rows of its group, when the metadata is split over groups.
    fn in_flight(
        &self,
        sha1: &Sha1,
        counted: &HashMap<Sha1, Vec<String>>,
    ) -> Result<String, MetaError> {
        if self.stores.is_empty() {
            return Ok(String::new());
        }
        let Some(group) = self.owner(sha1) else {
            return Ok(String::new());
        };
        let next = meta::groups::sha1_after(&sha1.0);
        // Its rows in every group held here: the owner's, and any another group kept.
        let mut rows = Vec::new();
        for (id, store) in self.all() {
            for table in meta::handoff::RowTable::ALL {
                for r in store.file_rows(table, (sha1.0, next), None, meta::handoff::ROWS_MAX)? {
                    rows.push(match r {
                        meta::handoff::FileRow::Ref { ref_id, state, .. } => {
                            format!("group {id}: ref {ref_id}: {state:?}")
                        }
                        other => format!("group {id}: {other:?}"),
                    });
                }
            }
        }
        Ok(format!(
            " (owner group {group}; counted in flight: {:?}; its rows: {rows:?})",
            counted.get(sha1).cloned().unwrap_or_default()
        ))
    }

    /// Whether `sha1` waits in the `deleting` table of the group that answers for it.
    fn deleting(&self, sha1: &Sha1) -> Result<bool, MetaError> {
        match self.owner(sha1) {
            Some(group) => Ok(self.store(group).deleting(sha1)?.is_some()),
            None => Ok(false),
        }
    }
}

/// Checks every file under a local disk's `<aa>/<bb>/` folders, through Valkyrie's walk
/// (the names the scrubber sees, in the same order).
async fn walk_disk(
    filedb: &FileDb<'_>,
    root: &Path,
    pair: PairId,
    files: &HashMap<Sha1, meta::FileRecord>,
    now: SystemTime,
    grace: Duration,
    report: &mut Report,
) -> Result<(), FsckError> {
    let mut walk = Walk::new(root);
    // The walk takes an absent disk for an empty one; fsck reports it.
    let mut listable = root.is_dir();
    while listable && let Some(found) = walk.next().await {
        let (path, name) = match found {
            Ok(Entry::Shard { path, name }) => (path, name),
            Ok(Entry::Temp { .. }) => continue,
            // A folder that cannot be listed is passed over; the disk's root ends the walk.
            Err(e) => {
                listable = !e.ends_walk();
                continue;
            }
        };
        let sha1 = match name {
            FileName::Content(sha1) => sha1,
            FileName::Quarantined { .. } => {
                report.quarantined += 1;
                continue;
            }
            FileName::Unknown => {
                report.error(format!("{}: not a content name", path.display()));
                continue;
            }
        };
        match files.get(&sha1) {
            Some(rec) if rec.pair == pair => {}
            Some(_) => report.junk += 1,
            None if filedb.deleting(&sha1)? => report.deleting += 1,
            // Its group is not held here: nothing to say about it.
            None if filedb.owner(&sha1).is_none() => report.unchecked += 1,
            None => {
                let age = std::fs::symlink_metadata(&path)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|m| now.duration_since(m).ok())
                    .unwrap_or_default();
                if age < grace {
                    report.young_orphans += 1;
                } else {
                    report.error(format!("{}: no record (orphan)", path.display()));
                }
            }
        }
    }
    if !listable {
        report.error(format!("{}: cannot list", root.display()));
    }
    Ok(())
}
