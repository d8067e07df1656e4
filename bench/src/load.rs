//! The concurrent load loop: `concurrency` tasks take item indexes from one counter until
//! `count` items are done or `limit` has passed, timing each request.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::stats::{Latency, cpu_time};

/// What one workload did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Outcome {
    /// Items completed without error.
    pub ops: u64,
    /// Items that failed.
    pub errors: u64,
    pub first_error: Option<String>,
    /// Payload bytes moved by the successful items.
    pub bytes: u64,
    /// From the first request sent to the last answer received.
    pub wall: Duration,
    pub latency: Latency,
    /// CPU time (user + system) the harness process spent meanwhile.
    pub client_cpu: Duration,
    /// Whether the time limit cut the run short of `count`.
    pub truncated: bool,
}

impl Outcome {
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    pub fn bytes_per_sec(&self) -> f64 {
        self.bytes as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    /// Client CPU per request, in microseconds.
    pub fn client_us_per_op(&self) -> f64 {
        let n = (self.ops + self.errors).max(1);
        self.client_cpu.as_secs_f64() * 1e6 / n as f64
    }

    pub fn check(&self, what: &str) -> Result<(), String> {
        match &self.first_error {
            Some(e) => Err(format!(
                "{what}: {} of {} requests failed; first error: {e}",
                self.errors,
                self.errors + self.ops
            )),
            None if self.ops == 0 => Err(format!("{what}: no request completed")),
            None => Ok(()),
        }
    }
}

/// Runs `f(i)` for `i` in `0..count` with `concurrency` requests in flight, stopping early
/// once `limit` has passed (requests in flight then finish). `f` returns the payload bytes
/// it moved.
pub async fn run<F, Fut>(concurrency: usize, count: usize, limit: Duration, f: F) -> Outcome
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<u64, String>> + Send + 'static,
{
    let f = Arc::new(f);
    let next = Arc::new(AtomicUsize::new(0));
    let cpu0 = cpu_time();
    let start = Instant::now();
    let deadline = start + limit;
    let mut tasks = Vec::with_capacity(concurrency);
    for _ in 0..concurrency.max(1) {
        let f = Arc::clone(&f);
        let next = Arc::clone(&next);
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let (mut bytes, mut errors, mut first_error) = (0u64, 0u64, None);
            let mut truncated = false;
            loop {
                if Instant::now() >= deadline {
                    truncated = next.load(Ordering::Relaxed) < count;
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    break;
                }
                let t0 = Instant::now();
                match f(i).await {
                    Ok(n) => {
                        lat.push(t0.elapsed().as_micros() as u64);
                        bytes += n;
                    }
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert(e);
                    }
                }
            }
            (lat, bytes, errors, first_error, truncated, Instant::now())
        }));
    }
    let mut out = Outcome::default();
    let mut all = Vec::new();
    let mut end = start;
    for t in tasks {
        match t.await {
            Ok((lat, bytes, errors, first_error, truncated, done)) => {
                all.extend(lat);
                out.bytes += bytes;
                out.errors += errors;
                out.truncated |= truncated;
                if out.first_error.is_none() {
                    out.first_error = first_error;
                }
                end = end.max(done);
            }
            Err(e) => {
                out.errors += 1;
                out.first_error
                    .get_or_insert(format!("load task panicked: {e}"));
            }
        }
    }
    out.ops = all.len() as u64;
    out.wall = end - start;
    out.latency = Latency::of(&mut all);
    out.client_cpu = cpu_time().saturating_sub(cpu0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_every_item_once() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = Arc::clone(&seen);
        let o = run(4, 100, Duration::from_secs(10), move |i| {
            let s = Arc::clone(&s);
            async move {
                s.lock().map_err(|e| e.to_string())?.push(i);
                Ok(1)
            }
        })
        .await;
        assert_eq!((o.ops, o.bytes, o.errors), (100, 100, 0));
        let mut v = seen.lock().expect("lock").clone();
        v.sort();
        assert_eq!(v, (0..100).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn counts_errors() {
        let o = run(2, 10, Duration::from_secs(10), |i| async move {
            if i % 2 == 0 {
                Ok(1)
            } else {
                Err(format!("odd {i}"))
            }
        })
        .await;
        assert_eq!((o.ops, o.errors), (5, 5));
        assert!(o.check("x").is_err());
    }

    #[tokio::test]
    async fn stops_at_the_time_limit() {
        let o = run(1, 1_000_000, Duration::from_millis(50), |_| async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            Ok(0)
        })
        .await;
        assert!(o.truncated && o.ops < 100, "{}", o.ops);
    }
}
