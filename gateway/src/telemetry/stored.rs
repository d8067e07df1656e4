//! What is stored, counted by a bounded periodic scan of the metadata and cached: the
//! numbers behind `gateway_stored_*` and the status page's dedup savings.
//!
//! Why a scan and not counters kept by `apply`: FileDB's record has no size (it is kept at
//! 16 bytes on purpose, see `meta/filedb.rs`), so the physical bytes of a content are only
//! known through the objects and parts that reference it. A scan joins them; a scrape
//! then reads the cached result in O(1) and never walks a table.
//!
//! Bounds and cost (back of the envelope): each batch is [`SCAN_BATCH`] records in its own
//! read transaction (a long scan never pins old pages for its whole length); redb reads a
//! few million small records per second per core, so 10 M objects take a few seconds. The
//! sizes of distinct contents are held in a map during the scan only, about 60 bytes per
//! distinct content (600 MB at 10 M distinct contents; freed when the scan ends). The next
//! scan starts [`Settings::interval_secs`] after the last one ended, and never sooner than
//! [`IDLE_FACTOR`] times the last scan's duration, so scanning takes at most a fifth of
//! one core however large the metadata grows. Content referenced only through the native
//! API (no object or part carries its size) has its size read from its disk, at most
//! [`SIZE_LOOKUPS_MAX`] per scan; any left over is counted in `unsized_contents`.
//!
//! The objects and parts are read across the index groups, each key interval in the group
//! the shard map gives it ([`Replicas::each_index_row`]), and FileDB and `deleting` across
//! the FileDB groups, each for the sha1s the map gives it ([`Replicas::each_filedb_row`]):
//! from this node's replicas or over the network, in linearizable pages of at most
//! [`SCAN_BATCH`] rows (a page of the index is at most `meta::handoff::ROWS_MAX`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use placement::Sha1;
use placement::pairdb::PairTable;

use meta::MetaError;
use meta::handoff::{FileRow, RowTable};
use meta::index_handoff::IndexRow;
use meta::raft::Replicas;
use meta::tables::{self, ObjectRecord, PartRecord};

/// Records read per read transaction.
pub const SCAN_BATCH: usize = 4096;
/// Sizes of native-only contents read from disk per scan.
pub const SIZE_LOOKUPS_MAX: usize = 10_000;
/// How many contents the "most duplicated" list keeps.
pub const TOP_CONTENTS: usize = 10;
/// The pause after a scan is at least this many times the scan's duration.
pub const IDLE_FACTOR: u32 = 4;
/// Every content is written twice, once on each disk of its pair.
pub const COPIES: u64 = 2;

/// How often the scan runs.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub interval_secs: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { interval_secs: 30 }
    }
}

/// One of the most referenced contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopContent {
    pub sha1: Sha1,
    pub refs: u32,
    /// None: referenced only through the native API and not looked up on disk.
    pub size_bytes: Option<u64>,
}

/// The result of one scan.
#[derive(Clone, Debug, Default)]
pub struct StoredStats {
    /// Sum of object sizes over all keys.
    pub logical_bytes: u64,
    /// Distinct contents' sizes times [`COPIES`].
    pub physical_bytes: u64,
    pub objects: u64,
    /// Parts of multipart uploads in progress.
    pub parts: u64,
    /// FileDB records: distinct contents.
    pub contents: u64,
    /// Sum of the references over FileDB.
    pub references: u64,
    pub do_not_delete: u64,
    /// Contents whose last reference is gone, waiting for Valkyrie.
    pub deleting: u64,
    /// Contents whose size is not known (neither in an object, a part, nor read from disk).
    pub unsized_contents: u64,
    /// The most referenced contents, most references first.
    pub top: Vec<TopContent>,
    /// Unix seconds at which the scan ended.
    pub scanned_at_secs: u64,
    pub scan_duration_secs: f64,
}

/// The cached result of the last scan, and how many scans ran.
#[derive(Debug, Default)]
pub struct StatsCache {
    last: Mutex<Option<Arc<StoredStats>>>,
    scans: std::sync::atomic::AtomicU64,
}

impl StatsCache {
    /// The last scan's result, None before the first scan ended.
    pub fn get(&self) -> Option<Arc<StoredStats>> {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn scans(&self) -> u64 {
        self.scans.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn put(&self, s: StoredStats) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(s));
        self.scans
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Scans forever (until the runtime stops), as [`Settings`] says.
    pub async fn run(self: Arc<Self>, replicas: Arc<Replicas>, pairs: Arc<PairTable>, s: Settings) {
        loop {
            let started = Instant::now();
            match scan(&replicas, &pairs).await {
                Ok(stats) => self.put(stats),
                Err(e) => tracing::warn!(error = %e, "stored-bytes scan failed"),
            }
            let took = started.elapsed();
            let pause = Duration::from_secs(s.interval_secs).max(took * IDLE_FACTOR);
            tokio::time::sleep(pause).await;
        }
    }
}

/// One full scan: the metadata in batches on a blocking thread, then the disk look-ups.
pub async fn scan(replicas: &Replicas, pairs: &PairTable) -> Result<StoredStats, MetaError> {
    scan_in_batches(replicas, pairs, SCAN_BATCH).await
}

async fn scan_in_batches(
    replicas: &Replicas,
    pairs: &PairTable,
    batch: usize,
) -> Result<StoredStats, MetaError> {
    let started = Instant::now();
    let (mut stats, sizes) = scan_index(replicas, batch).await?;
    let unsized_list = scan_filedb(replicas, &mut stats, &sizes, batch).await?;
    let mut found: HashMap<Sha1, u64> = HashMap::new();
    for (sha1, pair) in unsized_list {
        let Some(entry) = pairs.get(pair) else {
            continue;
        };
        for disk in entry.disks.iter() {
            if let Ok(Some(size)) = disk.size_of(&sha1).await {
                found.insert(sha1, size);
                break;
            }
        }
    }
    stats.unsized_contents -= found.len() as u64;
    stats.physical_bytes += found.values().sum::<u64>() * COPIES;
    for t in &mut stats.top {
        if t.size_bytes.is_none() {
            t.size_bytes = found.get(&t.sha1).copied();
        }
    }
    stats.scanned_at_secs = crate::store::now_ms() / 1000;
    stats.scan_duration_secs = started.elapsed().as_secs_f64();
    Ok(stats)
}

type Unsized = Vec<(Sha1, placement::PairId)>;

/// The objects and parts of every index group: their counts, logical bytes, and the size
/// of each content they reference. Each key interval is read in the group the map gives it
/// ([`Replicas::each_index_row`]), so a key a split moved counts once.
async fn scan_index(
    replicas: &Replicas,
    batch: usize,
) -> Result<(StoredStats, HashMap<Sha1, u64>), MetaError> {
    let mut stats = StoredStats::default();
    let mut sizes: HashMap<Sha1, u64> = HashMap::new();
    let mut bad: Option<MetaError> = None;
    let page = u32::try_from(batch).unwrap_or(u32::MAX);
    replicas
        .each_index_row(page, |row| {
            let decoded = match row {
                IndexRow::Object { value, .. } => {
                    meta::versions::decode_object(&value).map(|o: ObjectRecord| {
                        stats.objects += 1;
                        stats.logical_bytes += o.size_bytes;
                        sizes.insert(o.sha1, o.size_bytes);
                    })
                }
                // Parts of uploads in progress hold references (and sizes) too.
                IndexRow::Part { value, .. } => {
                    tables::decode_versioned::<PartRecord>("parts", &value).map(|p| {
                        stats.parts += 1;
                        sizes.insert(p.sha1, p.size_bytes);
                    })
                }
                _ => Ok(()),
            };
            if let Err(e) = decoded {
                bad.get_or_insert(e);
            }
        })
        .await?;
    match bad {
        Some(e) => Err(e),
        None => Ok((stats, sizes)),
    }
}

/// FileDB across its groups: distinct contents, references, flags, the physical bytes of
/// the contents whose size `sizes` knows, and the `deleting` entries. Answers the contents
/// of unknown size (at most [`SIZE_LOOKUPS_MAX`]) with their pairs.
async fn scan_filedb(
    replicas: &Replicas,
    stats: &mut StoredStats,
    sizes: &HashMap<Sha1, u64>,
    batch: usize,
) -> Result<Unsized, MetaError> {
    let page = u32::try_from(batch).unwrap_or(u32::MAX);
    let mut top: BinaryHeap<Reverse<(u32, [u8; 20])>> = BinaryHeap::new();
    let mut unsized_list = Vec::new();
    replicas
        .each_filedb_row(RowTable::Files, page, |row| {
            let FileRow::File { sha1, record: f } = row else {
                return;
            };
            stats.contents += 1;
            stats.references += u64::from(f.refs);
            if f.flags & tables::FLAG_DO_NOT_DELETE != 0 {
                stats.do_not_delete += 1;
            }
            match sizes.get(&sha1) {
                Some(size) => stats.physical_bytes += size * COPIES,
                None => {
                    stats.unsized_contents += 1;
                    if unsized_list.len() < SIZE_LOOKUPS_MAX {
                        unsized_list.push((sha1, f.pair));
                    }
                }
            }
            top.push(Reverse((f.refs, sha1.0)));
            if top.len() > TOP_CONTENTS {
                top.pop();
            }
        })
        .await?;
    let mut top: Vec<_> = top.into_iter().map(|Reverse(t)| t).collect();
    top.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    stats.top = top
        .into_iter()
        .map(|(refs, sha1)| TopContent {
            sha1: Sha1(sha1),
            refs,
            size_bytes: sizes.get(&Sha1(sha1)).copied(),
        })
        .collect();

    replicas
        .each_filedb_row(RowTable::Deleting, page, |_| stats.deleting += 1)
        .await?;
    Ok(unsized_list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use meta::{Command, ContentSource, NewObject};
    use placement::{Magic, PairId};

    #[tokio::test]
    async fn a_scan_counts_logical_per_key_and_physical_per_content() {
        let dir = tempfile::tempdir().unwrap();
        let meta = meta::MetaStore::open(&dir.path().join("meta.redb")).unwrap();
        let m = |v| Magic::new(v).unwrap();
        meta.execute(&Command::CreateBucket {
            bucket: "b".into(),
            created_ms: 1,
        })
        .unwrap();
        // Enough keys for several batches of 4, all on one content; one key on another.
        let batch = 4;
        let keys = batch as u32 * 3 + 1;
        for n in 0..=keys {
            let (sha1, size) = if n == keys {
                (Sha1([2; 20]), 7)
            } else {
                (Sha1([1; 20]), 100)
            };
            meta.execute(&Command::PutObject {
                bucket: "b".into(),
                key: format!("k{n}"),
                object: NewObject::new(sha1, m(n + 1), size, 0, [0; 16]),
                source: ContentSource::Stored(PairId(0)),
                now_secs: 1,
                precondition: None,
            })
            .unwrap();
        }
        // Native-only content: no size in the metadata, and no pair to read it from.
        meta.execute(&Command::InsertOrInc {
            sha1: Sha1([3; 20]),
            magic: m(9),
            pair: PairId(0),
        })
        .unwrap();
        // The node's replicas on that folder: a single node, root holding everything.
        drop(meta);
        let cluster = meta::raft::ClusterConfig::single("127.0.0.1:1".into());
        let network = Arc::new(meta::raft::network::NoPeers);
        let replicas = Replicas::open(dir.path(), cluster, network).await.unwrap();
        replicas
            .root()
            .wait_leader(Duration::from_secs(10))
            .await
            .unwrap();
        let s = scan_in_batches(&replicas, &PairTable::new(), batch)
            .await
            .unwrap();
        replicas.shutdown().await;
        assert_eq!(s.objects, u64::from(keys) + 1);
        assert_eq!(s.logical_bytes, u64::from(keys) * 100 + 7);
        assert_eq!(s.physical_bytes, (100 + 7) * COPIES);
        assert_eq!((s.contents, s.references), (3, u64::from(keys) + 2));
        assert_eq!(s.unsized_contents, 1);
        assert_eq!(s.top[0].sha1, Sha1([1; 20]));
        assert_eq!(s.top[0].refs, keys);
        assert_eq!(s.top.len(), 3);
    }
}
