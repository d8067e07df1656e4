//! Latency percentiles, CPU time of the harness process, and number formatting.

use std::time::Duration;

/// User + system CPU time of this process so far (getrusage RUSAGE_SELF): the load
/// generator's own cost, which shares the cores with the server under test.
pub fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes into the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if rc != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Percentiles of latencies in microseconds.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Latency {
    pub count: usize,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    pub mean_us: u64,
}

impl Latency {
    pub fn of(samples_us: &mut [u64]) -> Latency {
        if samples_us.is_empty() {
            return Latency::default();
        }
        samples_us.sort_unstable();
        let n = samples_us.len();
        let at = |q: f64| samples_us[((n as f64 * q).ceil() as usize).clamp(1, n) - 1];
        Latency {
            count: n,
            p50_us: at(0.50),
            p99_us: at(0.99),
            max_us: samples_us[n - 1],
            mean_us: samples_us.iter().sum::<u64>() / n as u64,
        }
    }
}

/// Bytes per second as decimal MB/s (10^6), the unit disks and links are quoted in.
pub fn mbps(bytes_per_sec: f64) -> String {
    format!("{:.0} MB/s", bytes_per_sec / 1e6)
}

pub fn us(v: u64) -> String {
    if v >= 10_000 {
        format!("{:.1} ms", v as f64 / 1000.0)
    } else {
        format!("{v} us")
    }
}

pub fn bytes(n: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// The median of `v` (the mean of the middle two for an even count).
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

pub fn range(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

/// "median X (range a-b)" of a figure over rounds.
pub fn med_range(v: &[f64], fmt: impl Fn(f64) -> String) -> String {
    let (lo, hi) = range(v);
    match median(v.to_vec()) {
        Some(m) if v.len() > 1 => format!("{} ({}-{})", fmt(m), fmt(lo), fmt(hi)),
        Some(m) => fmt(m),
        None => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let mut v: Vec<u64> = (1..=100).collect();
        let l = Latency::of(&mut v);
        assert_eq!((l.p50_us, l.p99_us, l.max_us, l.count), (50, 99, 100, 100));
        assert_eq!(Latency::of(&mut []).count, 0);
    }

    #[test]
    fn cpu_time_moves() {
        let a = cpu_time();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(cpu_time() >= a);
    }

    #[test]
    fn medians_and_ranges() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(range(&[2.0, 9.0, 4.0]), (2.0, 9.0));
        assert_eq!(
            med_range(&[3.0, 1.0, 2.0], |x| format!("{x:.0}")),
            "2 (1-3)"
        );
        assert_eq!(med_range(&[5.0], |x| format!("{x:.0}")), "5");
    }
}
