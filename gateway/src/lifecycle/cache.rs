//! Each bucket's lifecycle rules as this node last read them, for the `x-amz-expiration`
//! header of every PUT, HEAD and GET: without it every one of those paid a metadata read
//! on a blocking thread (64 KiB GET 1.20x, duplicate 64 KiB PUT 1.09x with it, medians
//! of three interleaved rounds, every round faster).
//!
//! The header is informational and read from this node's own state anyway, so an entry
//! may be [`TTL`] old: a change made through another node shows within it, one made
//! through this node at once ([`RulesCache::forget`]). A read that races a change may
//! put back the rules from before it; they too are gone after [`TTL`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::LifecycleRule;

/// How long an entry is used.
pub const TTL: Duration = Duration::from_secs(1);
/// Buckets remembered at once; past it the cache starts over.
const ENTRIES_MAX: usize = 4096;

/// A bucket's rules (`None`: it has none).
pub type Rules = Option<Arc<Vec<LifecycleRule>>>;

#[derive(Default)]
pub struct RulesCache {
    entries: Mutex<HashMap<String, (Instant, Rules)>>,
}

impl RulesCache {
    /// The rules of `bucket` if they were read less than [`TTL`] before `now`.
    pub fn get(&self, bucket: &str, now: Instant) -> Option<Rules> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(bucket)
            .filter(|(at, _)| now.saturating_duration_since(*at) < TTL)
            .map(|(_, rules)| rules.clone())
    }

    /// Remembers the rules of `bucket` as read at `at`.
    pub fn put(&self, bucket: &str, rules: Rules, at: Instant) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= ENTRIES_MAX && !entries.contains_key(bucket) {
            entries.clear();
        }
        entries.insert(bucket.to_string(), (at, rules));
    }

    /// Drops what is known of `bucket`: its rules changed through this node, or the
    /// bucket was deleted or created.
    pub fn forget(&self, bucket: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.remove(bucket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_last_the_ttl_and_forget_drops_them_at_once() {
        let c = RulesCache::default();
        let t0 = Instant::now();
        assert!(c.get("b", t0).is_none());
        c.put("b", None, t0);
        assert_eq!(c.get("b", t0 + TTL / 2), Some(None));
        assert!(
            c.get("b", t0 + TTL).is_none(),
            "an entry as old as the TTL is not used"
        );
        c.put("b", Some(Arc::new(Vec::new())), t0);
        c.forget("b");
        assert!(c.get("b", t0).is_none());
    }

    #[test]
    fn the_cache_is_bounded() {
        let c = RulesCache::default();
        let t0 = Instant::now();
        for i in 0..=ENTRIES_MAX {
            c.put(&format!("b{i}"), None, t0);
        }
        let held = c.entries.lock().unwrap().len();
        assert!(held <= ENTRIES_MAX, "{held}");
        // The newest is there; the cache started over before it.
        assert_eq!(c.get(&format!("b{ENTRIES_MAX}"), t0), Some(None));
        assert!(c.get("b0", t0).is_none());
    }
}
