//! The pace of a Valkyrie loop: bounded batches, a yield to the runtime between them, and
//! the stop signal looked at on every batch boundary.
//!
//! Every loop that works through many items takes them through one [`Pacer`]: the
//! scrubber's names (`scrub_batch_files` a batch), the deletion loop's `deleting` pages
//! (`deletion_page_entries` a page, a page a batch), UNMOVE's files (one a batch: a copy
//! may take seconds) and its count. Between two batches the task yields, so the requests
//! sharing the runtime get their turn (seed 003: a cleanup fiber that never yielded
//! stalled every request), then stops if its [`Shutdown`] fired: a stop lands on a batch
//! boundary, never inside a batch. What the bytes of a batch cost is the read-rate
//! limiter's business ([`crate::rate`]); the pause between two passes is the worker's.
//!
//! ```
//! # async fn f(shutdown: valkyrie::Shutdown) {
//! use valkyrie::pace::Pacer;
//! let mut pacer = Pacer::new(256, &shutdown);
//! for item in 0..10_000 {
//!     if !pacer.admit().await {
//!         break; // stopped on a batch boundary
//!     }
//!     // ... work on `item` ...
//! }
//! # }
//! ```

use crate::clock::Shutdown;

/// Paces one loop; see the module doc.
#[derive(Debug)]
pub struct Pacer<'a> {
    shutdown: &'a Shutdown,
    batch_max: usize,
    /// Items admitted in the current batch; `None` before the first batch.
    taken: Option<usize>,
    /// The first batch starts without a look at the stop signal.
    first_batch_always: bool,
    stopped: bool,
}

impl<'a> Pacer<'a> {
    /// Batches of at most `batch_max` items (at least one); the stop signal is looked at
    /// before every batch, the first included.
    pub fn new(batch_max: usize, shutdown: &'a Shutdown) -> Self {
        Pacer {
            shutdown,
            batch_max: batch_max.max(1),
            taken: None,
            first_batch_always: false,
            stopped: false,
        }
    }

    /// The first batch runs even when the stop signal is already set: a pass that was
    /// started gets through one batch (the scrubber's).
    pub fn first_batch_always(mut self) -> Self {
        self.first_batch_always = true;
        self
    }

    /// The most items a batch holds: what a loop that fetches a page at a time asks for.
    pub fn batch_max(&self) -> usize {
        self.batch_max
    }

    /// Starts the next batch: yields to the runtime (not before the first batch), then
    /// looks at the stop signal. `false` means stop here, and stays so.
    pub async fn next_batch(&mut self) -> bool {
        if self.stopped {
            return false;
        }
        let first = self.taken.is_none();
        if !first {
            tokio::task::yield_now().await;
        }
        self.taken = Some(0);
        if !(first && self.first_batch_always) && self.shutdown.is_set() {
            self.stopped = true;
        }
        !self.stopped
    }

    /// Admits one more item, starting the next batch when the current one is full.
    /// `false` means stop before this item, and stays so.
    pub async fn admit(&mut self) -> bool {
        let full = self.taken.is_none_or(|n| n >= self.batch_max);
        if self.stopped || (full && !self.next_batch().await) {
            return false;
        }
        self.taken = Some(self.taken.unwrap_or(0) + 1);
        true
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A task that counts how often the runtime lets it run: on the current-thread
    /// runtime of a test it runs only when the task under test yields.
    fn turns_counter() -> Arc<AtomicUsize> {
        let turns = Arc::new(AtomicUsize::new(0));
        let counter = turns.clone();
        tokio::spawn(async move {
            loop {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
            }
        });
        turns
    }

    #[tokio::test(start_paused = true)]
    async fn yields_between_batches_only_and_never_sleeps() {
        let shutdown = Shutdown::never();
        let turns = turns_counter();
        let t0 = tokio::time::Instant::now();
        let mut pacer = Pacer::new(3, &shutdown);
        let mut turns_before_item = Vec::new();
        for _ in 0..10 {
            assert!(pacer.admit().await);
            turns_before_item.push(turns.load(Ordering::SeqCst));
        }
        // Items 1-3, 4-6, 7-9, 10: the other task ran once before items 4, 7 and 10.
        assert_eq!(turns_before_item, [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]);
        // The paused clock did not move: the pacer yields, it never sleeps.
        assert_eq!(t0.elapsed(), std::time::Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_lands_on_the_next_batch_boundary_and_stays() {
        let (stop, shutdown) = Shutdown::channel();
        let mut pacer = Pacer::new(4, &shutdown);
        assert!(pacer.admit().await);
        stop.send(true).unwrap();
        // The batch in progress is finished, the next one does not start.
        for _ in 0..3 {
            assert!(pacer.admit().await);
        }
        assert!(!pacer.admit().await);
        assert!(!pacer.admit().await);
        assert!(!pacer.next_batch().await);
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_batch_is_checked_unless_told_otherwise() {
        let (stop, shutdown) = Shutdown::channel();
        stop.send(true).unwrap();
        assert!(!Pacer::new(4, &shutdown).admit().await);
        let mut pacer = Pacer::new(4, &shutdown).first_batch_always();
        let admitted = {
            let mut n = 0;
            while pacer.admit().await {
                n += 1;
            }
            n
        };
        assert_eq!(admitted, 4);
    }

    #[tokio::test(start_paused = true)]
    async fn page_loops_take_batches_of_the_bound() {
        let shutdown = Shutdown::never();
        let turns = turns_counter();
        let pacer = Pacer::new(0, &shutdown);
        assert_eq!(
            pacer.batch_max(),
            1,
            "a zero bound would never make progress"
        );
        let mut pacer = Pacer::new(1000, &shutdown);
        let mut pages = 0;
        while pacer.next_batch().await {
            assert_eq!(pacer.batch_max(), 1000);
            assert_eq!(
                turns.load(Ordering::SeqCst),
                pages,
                "one yield before each next page"
            );
            pages += 1;
            if pages == 5 {
                break;
            }
        }
        assert_eq!(pages, 5);
    }
}
