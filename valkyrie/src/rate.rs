//! The scrubber's read-rate bound: a token bucket, kept as pure arithmetic over a clock the
//! caller passes so that tests check the numbers, not the wall clock.
//!
//! The bucket is a "virtual scheduling" bucket (GCRA): instead of a token count it keeps
//! the time at which it will be full again. Taking `n` bytes pushes that time forward by
//! `n / rate`; the caller waits for whatever lies beyond `now + burst / rate`. So over any
//! window of `t` seconds at most `burst + rate * t` bytes pass, a single take larger than
//! the burst is allowed (it just waits longer), and an idle bucket never saves up more
//! than the burst.

use std::sync::Mutex;
use std::time::Duration;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// The arithmetic of the bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBucket {
    bytes_per_sec: u64,
    burst_nanos: u64,
    /// Nanoseconds (from the caller's origin) at which the bucket is full again.
    full_at_nanos: u64,
}

impl TokenBucket {
    /// A bucket passing `bytes_per_sec` on average and up to `burst_bytes` at once;
    /// `bytes_per_sec == 0` means unlimited.
    pub fn new(bytes_per_sec: u64, burst_bytes: u64) -> Self {
        TokenBucket {
            bytes_per_sec,
            burst_nanos: nanos_for(burst_bytes, bytes_per_sec),
            full_at_nanos: 0,
        }
    }

    /// Takes `bytes` at `now_nanos`; returns the nanoseconds to wait before using them.
    pub fn take(&mut self, now_nanos: u64, bytes: u64) -> u64 {
        if self.bytes_per_sec == 0 {
            return 0;
        }
        let base = self.full_at_nanos.max(now_nanos);
        self.full_at_nanos = base.saturating_add(nanos_for(bytes, self.bytes_per_sec));
        self.full_at_nanos
            .saturating_sub(now_nanos.saturating_add(self.burst_nanos))
    }
}

fn nanos_for(bytes: u64, bytes_per_sec: u64) -> u64 {
    if bytes_per_sec == 0 {
        return 0;
    }
    let nanos = u128::from(bytes) * NANOS_PER_SEC / u128::from(bytes_per_sec);
    u64::try_from(nanos).unwrap_or(u64::MAX)
}

/// A [`TokenBucket`] on tokio's clock, shared by the tasks of one worker.
#[derive(Debug)]
pub struct RateLimiter {
    bucket: Mutex<TokenBucket>,
    origin: tokio::time::Instant,
}

impl RateLimiter {
    pub fn new(bytes_per_sec: u64, burst_bytes: u64) -> Self {
        RateLimiter {
            bucket: Mutex::new(TokenBucket::new(bytes_per_sec, burst_bytes)),
            origin: tokio::time::Instant::now(),
        }
    }

    /// Waits until `bytes` more may be read.
    pub async fn acquire(&self, bytes: u64) {
        let now_nanos = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let wait_nanos = {
            // A poisoned lock only means a panic elsewhere mid-arithmetic; the numbers are
            // still numbers.
            let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
            bucket.take(now_nanos, bytes)
        };
        if wait_nanos > 0 {
            tokio::time::sleep(Duration::from_nanos(wait_nanos)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;
    const SEC: u64 = 1_000_000_000;

    /// A reader that takes `chunk` bytes `count` times, waiting as told: returns the
    /// simulated nanoseconds it took.
    fn simulate(bucket: &mut TokenBucket, start: u64, chunk: u64, count: u64) -> u64 {
        let mut now = start;
        for _ in 0..count {
            now += bucket.take(now, chunk);
        }
        now - start
    }

    #[test]
    fn sustained_rate_is_the_configured_rate() {
        let mut b = TokenBucket::new(50 * MIB, MIB);
        // 500 MiB in 1 MiB reads: the first MiB is the burst, the rest paced at 50 MiB/s.
        let took = simulate(&mut b, 0, MIB, 500);
        assert_eq!(took, 499 * SEC / 50);
    }

    #[test]
    fn idle_time_saves_up_at_most_the_burst() {
        let mut b = TokenBucket::new(MIB, 256 * 1024);
        simulate(&mut b, 0, 256 * 1024, 40);
        // An hour idle, then 8 MiB at once: only 256 KiB come free.
        let start = 3600 * SEC;
        let took = simulate(&mut b, start, 256 * 1024, 32);
        assert_eq!(took, 31 * SEC / 4);
    }

    #[test]
    fn any_window_passes_at_most_burst_plus_rate_times_time() {
        let rate = 10 * MIB;
        let burst = MIB;
        let mut b = TokenBucket::new(rate, burst);
        let mut now = 0u64;
        let mut granted = Vec::new();
        // Uneven reads with idle gaps.
        for i in 0..2_000u64 {
            let bytes = 4096 + (i * 7919) % (3 * MIB);
            now += b.take(now, bytes);
            granted.push((now, bytes));
            now += (i % 5) * SEC / 100;
        }
        for start in (0..granted.len()).step_by(97) {
            for end in (start..granted.len()).step_by(89) {
                let bytes: u64 = granted[start..=end].iter().map(|(_, n)| n).sum();
                let window = granted[end].0 - granted[start].0;
                // A first read larger than the burst is granted whole at its start;
                // 1 KiB covers the nanosecond rounding of 2 000 costs.
                let allowed = burst.max(granted[start].1)
                    + (u128::from(rate) * u128::from(window) / u128::from(SEC)) as u64
                    + 1024;
                assert!(bytes <= allowed, "{bytes} > {allowed} over {window} ns");
            }
        }
    }

    #[test]
    fn zero_rate_is_unlimited() {
        let mut b = TokenBucket::new(0, 0);
        assert_eq!(simulate(&mut b, 0, 1 << 40, 1000), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn limiter_sleeps_for_the_debt() {
        let limiter = RateLimiter::new(MIB, MIB);
        let t0 = tokio::time::Instant::now();
        for _ in 0..5 {
            limiter.acquire(MIB).await;
        }
        // The paused clock advances exactly by the sleeps.
        assert_eq!(t0.elapsed(), Duration::from_secs(4));
    }
}
