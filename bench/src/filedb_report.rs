//! What the `filedb` binary measures, as it hands it to the main harness (one JSON line).

use serde::{Deserialize, Serialize};

/// The line prefix of the machine-readable result on the `filedb` binary's stdout.
pub const JSON_PREFIX: &str = "FILEDB_JSON ";

/// FileDB at one size.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Point {
    pub records: u64,
    /// Length of meta.redb.
    pub file_bytes: u64,
    /// Blocks meta.redb takes on the disk.
    pub allocated_bytes: u64,
    /// Length of meta.redb after `Database::compact`, once everything else was measured (0:
    /// not measured): what the records need once redb's free pages are squeezed out.
    #[serde(default)]
    pub compacted_bytes: u64,
    /// Seconds the batched loader took to reach this size from the previous one.
    pub load_secs: f64,
    pub load_records: u64,
    /// `MetaStore::execute(&Command::Inc)`: one durable transaction each.
    pub inc_samples: usize,
    pub inc_p50_us: u64,
    pub inc_p99_us: u64,
    pub inc_mean_us: u64,
    /// `apply(Command::Inc)` inside one transaction, never committed: the B-tree cost
    /// without the commit's fsync.
    pub apply_inc_ns: f64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FiledbReport {
    /// Commands applied per write transaction by the loader.
    pub batch: usize,
    pub points: Vec<Point>,
}

/// The sha1 of record `i` of a run: 20 pseudo-random bytes, uniform like real SHA-1s, and
/// recomputable so that an existing record can be picked without storing the keys.
pub fn record_key(seed: u64, i: u64) -> [u8; 20] {
    let mut r = crate::rng::Rng::new(seed ^ i.wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mut k = [0u8; 20];
    r.fill(&mut k);
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable_and_distinct() {
        assert_eq!(record_key(1, 5), record_key(1, 5));
        let keys: std::collections::HashSet<[u8; 20]> =
            (0..10_000).map(|i| record_key(1, i)).collect();
        assert_eq!(keys.len(), 10_000);
    }

    #[test]
    fn json_round_trip() {
        let r = FiledbReport {
            batch: 10,
            points: vec![Point {
                records: 3,
                ..Point::default()
            }],
        };
        let s = serde_json::to_string(&r).expect("ser");
        let back: FiledbReport = serde_json::from_str(&s).expect("de");
        assert_eq!(back.points[0].records, 3);
    }
}
