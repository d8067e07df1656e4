//! Pacing of a background sweep: the pieces every sweep over the metadata needs so that
//! foreground requests keep their latency (seed 003: a cleanup loop that never yields
//! stalls every request on its event loop).
//!
//! A sweep reads a bounded batch, acts on it with one command, then calls
//! [`Pacer::pace`] with the number of items it changed: the pacer always yields, and
//! sleeps as long as needed to keep the changes under a rate. Meant to be reused by any
//! sweep (lifecycle expiry, bulk deletes).

use std::time::{Duration, Instant};

/// Keeps a sweep under `per_sec` changes a second, measured over windows of this length
/// (a sweep idle for a while does not earn a burst larger than one window's worth).
const WINDOW: Duration = Duration::from_secs(10);
/// The least pause between two batches, so that even a sweep with nothing to change
/// leaves the runtime to requests between its reads.
const BATCH_PAUSE: Duration = Duration::from_millis(5);

/// Rate limit and yields between the batches of one sweep.
#[derive(Debug)]
pub struct Pacer {
    per_sec: u64,
    window_start: Instant,
    done_in_window: u64,
}

impl Pacer {
    /// A pacer allowing `per_sec` changes a second (0 is taken as 1).
    pub fn new(per_sec: u64) -> Self {
        Pacer {
            per_sec: per_sec.max(1),
            window_start: Instant::now(),
            done_in_window: 0,
        }
    }

    /// How long to wait after `done` more changes, from `now`.
    fn delay(&mut self, done: u64, now: Instant) -> Duration {
        if now.duration_since(self.window_start) > WINDOW {
            self.window_start = now;
            self.done_in_window = 0;
        }
        self.done_in_window = self.done_in_window.saturating_add(done);
        let due = Duration::from_secs_f64(self.done_in_window as f64 / self.per_sec as f64);
        let elapsed = now.duration_since(self.window_start);
        due.saturating_sub(elapsed).max(BATCH_PAUSE)
    }

    /// Called after each batch with the number of items it changed: yields, and sleeps
    /// long enough to keep the rate.
    pub async fn pace(&mut self, done: usize) {
        let wait = self.delay(done as u64, Instant::now());
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_kept_over_a_window() {
        let mut p = Pacer::new(100);
        let t0 = p.window_start;
        // 50 changes at once: half a second ahead of the rate.
        assert_eq!(p.delay(50, t0), Duration::from_millis(500));
        // Nothing changed: only the pause between batches.
        assert_eq!(p.delay(0, t0 + Duration::from_secs(1)), BATCH_PAUSE);
        // After a long idle time the window restarts: no burst is saved up.
        let later = t0 + Duration::from_secs(60);
        assert_eq!(p.delay(200, later), Duration::from_secs(2));
    }
}
