//! A group's load of FileDB operations, as its replica applies them: how many since the
//! process started, and the sha1s of the most recent ones, from which the leader of a
//! busy group picks the point that divides the load in two (`raft/split.rs`).
//!
//! A sample of recent operations rather than counters per range: a group's interval may
//! be narrower than any fixed prefix, and the sample follows it wherever it is. A split
//! that would leave nearly all the load on one side (one very hot content, the newsletter
//! sent to a million inboxes) is not worth making: [`Load::split_point`] says none.

use std::collections::VecDeque;

use placement::Sha1;

/// The recent operations kept.
pub const SAMPLE_MAX: usize = 1024;
/// The share of the sample each side of a split must get, in quarters.
const SIDE_MIN_QUARTERS: usize = 1;

#[derive(Debug, Default)]
pub struct Load {
    total: u64,
    recent: VecDeque<[u8; 20]>,
}

impl Load {
    /// One operation on `sha1` applied.
    pub fn count(&mut self, sha1: &Sha1) {
        self.total = self.total.saturating_add(1);
        if self.recent.len() == SAMPLE_MAX {
            self.recent.pop_front();
        }
        self.recent.push_back(sha1.0);
    }

    /// Operations applied since the process started.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// [`Load::split_point`] of the operations since the last call: the sample starts
    /// afresh, so that each rate window's point comes from that window's operations.
    pub fn take_split_point(&mut self) -> Option<[u8; 20]> {
        let at = self.split_point();
        self.recent.clear();
        at
    }

    /// The sha1 at which the recent operations divide in two, each side (below it, from
    /// it on) with at least a quarter of them; none if no such point exists (one content,
    /// or a few, take most of the load) or the sample is small.
    pub fn split_point(&self) -> Option<[u8; 20]> {
        let n = self.recent.len();
        if n < 16 {
            return None;
        }
        let mut sorted: Vec<[u8; 20]> = self.recent.iter().copied().collect();
        sorted.sort_unstable();
        let at = sorted[n / 2];
        let below = sorted.partition_point(|s| *s < at);
        let min = n * SIDE_MIN_QUARTERS / 4;
        (below >= min && n - below >= min).then_some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha1(first: u8, n: u8) -> Sha1 {
        let mut s = [first; 20];
        s[19] = n;
        Sha1(s)
    }

    #[test]
    fn an_even_load_splits_at_its_median_and_one_hot_content_does_not_split() {
        let mut spread = Load::default();
        for i in 0..2_000u32 {
            spread.count(&sha1((i % 200) as u8, 0));
        }
        assert_eq!(spread.total(), 2_000);
        let at = spread.split_point().unwrap();
        assert!((90..=110).contains(&at[0]), "{at:?}");

        let mut hot = Load::default();
        for i in 0..2_000u32 {
            // Nine in ten on one content.
            let s = if i % 10 == 0 {
                sha1((i % 250) as u8, 1)
            } else {
                sha1(0xe1, 7)
            };
            hot.count(&s);
        }
        assert_eq!(hot.split_point(), None);

        // Two hot contents apart: split between them.
        let mut two = Load::default();
        for i in 0..100u32 {
            two.count(&if i % 2 == 0 {
                sha1(0x20, 0)
            } else {
                sha1(0xd0, 0)
            });
        }
        assert_eq!(two.split_point(), Some(sha1(0xd0, 0).0));
        assert_eq!(Load::default().split_point(), None);
        // Taken, the sample starts afresh: an old spread load does not split a hot one.
        assert_eq!(two.take_split_point(), Some(sha1(0xd0, 0).0));
        for _ in 0..100 {
            two.count(&sha1(0x20, 0));
        }
        assert_eq!(two.take_split_point(), None);
        assert_eq!(two.total(), 200);
    }
}
