//! What the `load-objects` binary did, as it hands it to the main harness (one JSON line).

use serde::{Deserialize, Serialize};

/// The line prefix of the machine-readable result on the `load-objects` binary's stdout.
pub const JSON_PREFIX: &str = "LOAD_OBJECTS_JSON ";

/// The bucket the loaded objects are in.
pub const LOADED_BUCKET: &str = "bench";

/// The key of loaded object `i`.
pub fn loaded_key(i: u64) -> String {
    format!("obj/{i:09}")
}

/// A data folder filled offline with S3 objects.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LoadReport {
    pub objects: u64,
    /// Distinct contents (FileDB records) they reference.
    pub contents: u64,
    /// Commands applied per durable write transaction.
    pub batch: u64,
    pub load_secs: f64,
    /// Length of meta.redb after loading, and the blocks it occupies.
    pub file_bytes: u64,
    pub allocated_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_in_load_order_and_json_round_trips() {
        assert!(loaded_key(9) < loaded_key(10));
        assert!(loaded_key(999_999_999) > loaded_key(1_000_000));
        let r = LoadReport {
            objects: 3,
            ..LoadReport::default()
        };
        let back: LoadReport =
            serde_json::from_str(&serde_json::to_string(&r).expect("ser")).expect("de");
        assert_eq!(back.objects, 3);
    }
}
