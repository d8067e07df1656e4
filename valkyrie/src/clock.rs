//! Time and stopping, both injected so that tests decide what "now" is and when to stop.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

/// Unix seconds, from the system clock or from a test.
///
/// Every decision that depends on age (quarantine expiry, the slave's delay, the orphan
/// grace, stale temps) reads this clock, so tests move time instead of sleeping.
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> u64 + Send + Sync>);

impl Clock {
    /// The system's wall clock.
    pub fn system() -> Self {
        Clock(Arc::new(|| unix_secs(SystemTime::now())))
    }

    /// A clock that asks `f`.
    pub fn from_fn(f: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        Clock(Arc::new(f))
    }

    pub fn now_secs(&self) -> u64 {
        (self.0)()
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Clock(now = {})", self.now_secs())
    }
}

/// Seconds since the Unix epoch; 0 for a time before it (a file with a broken mtime is
/// then simply "very old", which only matters for temps and orphans, both recoverable).
pub fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The stop signal of a worker or an UNMOVE: checked between batches, and it cuts waits
/// short. Built on `tokio::sync::watch`; a dropped sender also means stop (the owner is
/// gone).
#[derive(Clone)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
    /// Keeps the sender of [`Shutdown::never`] alive.
    _sender: Option<Arc<watch::Sender<bool>>>,
}

impl fmt::Debug for Shutdown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Shutdown(set = {})", self.is_set())
    }
}

impl Shutdown {
    /// A signal and its trigger: `trigger.send(true)` stops every holder of a clone.
    pub fn channel() -> (watch::Sender<bool>, Shutdown) {
        let (tx, rx) = watch::channel(false);
        (tx, Shutdown { rx, _sender: None })
    }

    /// A signal that never fires, for one-off passes.
    pub fn never() -> Shutdown {
        let (tx, rx) = watch::channel(false);
        Shutdown {
            rx,
            _sender: Some(Arc::new(tx)),
        }
    }

    pub fn is_set(&self) -> bool {
        *self.rx.borrow() || self.rx.has_changed().is_err()
    }

    /// Waits until the signal fires.
    pub async fn wait(&self) {
        let mut rx = self.rx.clone();
        let _ = rx.wait_for(|stop| *stop).await;
    }

    /// Waits `duration` or until the signal fires; `true` when it fired.
    pub async fn sleep(&self, duration: Duration) -> bool {
        let mut rx = self.rx.clone();
        tokio::select! {
            _ = tokio::time::sleep(duration) => self.is_set(),
            _ = rx.wait_for(|stop| *stop) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn shutdown_cuts_a_sleep_short() {
        let (tx, stop) = Shutdown::channel();
        assert!(!stop.is_set());
        let waiter = {
            let stop = stop.clone();
            tokio::spawn(async move { stop.sleep(Duration::from_secs(3600)).await })
        };
        tx.send(true).unwrap();
        assert!(waiter.await.unwrap());
        assert!(stop.is_set());
        stop.wait().await;
        let never = Shutdown::never();
        assert!(!never.sleep(Duration::from_millis(1)).await);
        let (tx, dropped) = Shutdown::channel();
        drop(tx);
        assert!(dropped.is_set());
    }
}
