//! The last few server-side failures, for the status page: a fixed-size ring, so a storm
//! of errors costs the same memory as one.
//!
//! Only answers the gateway owes an apology for (5xx) go in: a client's 4xx is its own
//! mistake and already in the request log and the requests counter.

use std::collections::VecDeque;
use std::sync::Mutex;

/// How many errors the ring keeps.
pub const RECENT_ERRORS_MAX: usize = 32;
/// Longest text kept of one error's target (bucket/key), in bytes.
const TARGET_CHARS_MAX: usize = 200;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecentError {
    pub at_ms: u64,
    pub operation: &'static str,
    pub status: u16,
    pub request_id: String,
    /// `bucket/key`, cut to a bounded length.
    pub target: String,
}

#[derive(Debug, Default)]
pub struct RecentErrors {
    ring: Mutex<VecDeque<RecentError>>,
}

impl RecentErrors {
    pub fn push(&self, mut e: RecentError) {
        if e.target.len() > TARGET_CHARS_MAX {
            let mut cut = TARGET_CHARS_MAX;
            while !e.target.is_char_boundary(cut) {
                cut -= 1;
            }
            e.target.truncate(cut);
            e.target.push('…');
        }
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        if ring.len() == RECENT_ERRORS_MAX {
            ring.pop_front();
        }
        ring.push_back(e);
    }

    /// Newest first.
    pub fn snapshot(&self) -> Vec<RecentError> {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        ring.iter().rev().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(n: u64) -> RecentError {
        RecentError {
            at_ms: n,
            operation: "GetObject",
            status: 500,
            request_id: n.to_string(),
            target: "é".repeat(150),
        }
    }

    #[test]
    fn the_ring_keeps_the_newest_and_cuts_long_targets() {
        let r = RecentErrors::default();
        for n in 0..(RECENT_ERRORS_MAX as u64 + 5) {
            r.push(err(n));
        }
        let s = r.snapshot();
        assert_eq!(s.len(), RECENT_ERRORS_MAX);
        assert_eq!(s[0].at_ms, RECENT_ERRORS_MAX as u64 + 4);
        assert_eq!(s.last().unwrap().at_ms, 5);
        assert!(s[0].target.len() <= TARGET_CHARS_MAX + '…'.len_utf8());
    }
}
