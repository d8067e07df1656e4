//! A small seeded generator (SplitMix64): reproducible bodies, keys and corpus across
//! machines and crate versions, and fast enough (several GB/s) to fill buffers before a run.

/// SplitMix64. Not for cryptography: only to make distinct, incompressible test bytes.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5851_f42d_4c95_7f2d)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Fills `buf` with pseudo-random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        let last = self.next_u64().to_le_bytes();
        let n = rest.len();
        rest.copy_from_slice(&last[..n]);
    }

    /// `len` pseudo-random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.fill(&mut v);
        v
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.unit().max(f64::MIN_POSITIVE);
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// A random non-zero 32-bit number (a reference's magic).
    pub fn magic(&mut self) -> u32 {
        loop {
            let m = self.next_u64() as u32;
            if m != 0 {
                return m;
            }
        }
    }
}

/// Integers in `1..=max` with P(k) proportional to k^-s: a truncated Zipf law, for
/// long-tailed duplicate counts.
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(max: u32, s: f64) -> Self {
        let max = max.max(1);
        let mut cdf = Vec::with_capacity(max as usize);
        let mut acc = 0.0;
        for k in 1..=max {
            acc += (k as f64).powf(-s);
            cdf.push(acc);
        }
        for c in &mut cdf {
            *c /= acc;
        }
        Zipf { cdf }
    }

    pub fn sample(&self, rng: &mut Rng) -> u32 {
        let u = rng.unit();
        let i = self.cdf.partition_point(|&c| c < u);
        (i.min(self.cdf.len() - 1) + 1) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_bytes() {
        assert_eq!(Rng::new(7).bytes(100), Rng::new(7).bytes(100));
        assert_ne!(Rng::new(7).bytes(100), Rng::new(8).bytes(100));
    }

    #[test]
    fn zipf_is_long_tailed() {
        let z = Zipf::new(1000, 2.0);
        let mut rng = Rng::new(1);
        let draws: Vec<u32> = (0..20_000).map(|_| z.sample(&mut rng)).collect();
        let ones = draws.iter().filter(|&&k| k == 1).count();
        // P(1) = 1 / zeta(2) ~ 0.61
        assert!((11_000..13_500).contains(&ones), "{ones}");
        assert!(draws.iter().any(|&k| k >= 50));
        assert!(draws.iter().all(|&k| (1..=1000).contains(&k)));
    }

    #[test]
    fn below_stays_in_range() {
        let mut rng = Rng::new(3);
        assert!((0..1000).all(|_| rng.below(10) < 10));
    }
}
