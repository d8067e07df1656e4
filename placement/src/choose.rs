//! The pair choice: random, weighted by the n-th root of free space.
//!
//! Weighting by free space alone sends nearly every write to a freshly added empty pair
//! while the others are 90 % full, which then becomes the hot spot for reads of new mail.
//! Taking the n-th root flattens the weights (n = 2 by default): an empty 10 TB pair beside
//! nine 1 TB-free pairs gets 1/(1+9/sqrt(10)) ~ 26 % of writes instead of 53 %.

use rand::RngExt as _;

use crate::pair::PairRecord;
use crate::vocab::PairId;

/// A candidate pair: its id and record.
pub struct Candidate<'a> {
    pub id: PairId,
    pub record: &'a PairRecord,
}

/// The weight of one pair for a body of `size_bytes`, 0 when it must not take it.
pub fn weight(record: &PairRecord, size_bytes: u64, root: u32) -> f64 {
    let free = record.free_bytes_min();
    if !record.flags.writable() || free < size_bytes {
        return 0.0;
    }
    (free as f64).powf(1.0 / f64::from(root.max(1)))
}

/// Picks one pair among `candidates` at random, weighted by [`weight`]; `None` when no
/// pair is writable with room for the body. `exclude` lists pairs that already failed a
/// probe for this upload.
pub fn choose<'a>(
    candidates: impl IntoIterator<Item = Candidate<'a>>,
    size_bytes: u64,
    root: u32,
    exclude: &[PairId],
) -> Option<PairId> {
    let weighted: Vec<(PairId, f64)> = candidates
        .into_iter()
        .filter(|c| !exclude.contains(&c.id))
        .map(|c| (c.id, weight(c.record, size_bytes, root)))
        .filter(|(_, w)| *w > 0.0)
        .collect();
    let total: f64 = weighted.iter().map(|(_, w)| w).sum();
    if total <= 0.0 {
        return None;
    }
    let mut point = rand::rng().random_range(0.0..total);
    for (id, w) in &weighted {
        if point < *w {
            return Some(*id);
        }
        point -= w;
    }
    weighted.last().map(|(id, _)| *id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pair::PairFlags;
    use crate::vocab::DiskRef;

    fn pair(free: u64) -> PairRecord {
        let mut r = PairRecord::new([DiskRef::local("/a"), DiskRef::local("/b")]);
        r.free_bytes = [free, free];
        r.capacity_bytes = [10 * free, 10 * free];
        r
    }

    #[test]
    fn unwritable_or_full_pairs_are_skipped() {
        let mut locked = pair(1 << 40);
        locked.flags = PairFlags::LOCKED;
        let small = pair(10);
        let ok = pair(1 << 30);
        let cands = || {
            [
                Candidate {
                    id: PairId(1),
                    record: &locked,
                },
                Candidate {
                    id: PairId(2),
                    record: &small,
                },
                Candidate {
                    id: PairId(3),
                    record: &ok,
                },
            ]
        };
        for _ in 0..100 {
            assert_eq!(choose(cands(), 1000, 2, &[]), Some(PairId(3)));
        }
        assert_eq!(choose(cands(), 1000, 2, &[PairId(3)]), None);
    }

    /// Shares of writes over `samples` choices.
    fn shares(pairs: &[PairRecord], root: u32, samples: usize) -> Vec<f64> {
        let mut counts = vec![0usize; pairs.len()];
        for _ in 0..samples {
            let cands = pairs.iter().enumerate().map(|(i, r)| Candidate {
                id: PairId(i as u32),
                record: r,
            });
            let id = choose(cands, 1, root, &[]).unwrap();
            counts[id.0 as usize] += 1;
        }
        counts.iter().map(|&c| c as f64 / samples as f64).collect()
    }

    #[test]
    fn an_empty_pair_beside_full_ones_gets_a_bounded_share() {
        const TB: u64 = 1 << 40;
        // Nine pairs 90 % full, one new and empty.
        let mut pairs: Vec<PairRecord> = (0..9).map(|_| pair(TB / 10)).collect();
        pairs.push(pair(TB));
        let samples = 200_000;
        for (root, expected) in [(1u32, 1.0 / 1.9), (2, 0.260), (3, 0.193)] {
            let share = shares(&pairs, root, samples)[9];
            println!(
                "n = {root}: the empty pair takes {:.1} % of writes",
                share * 100.0
            );
            // 200k samples: one standard deviation is ~0.1 %, so 1 % is a wide margin.
            assert!((share - expected).abs() < 0.01, "n = {root}: share {share}");
        }
    }

    #[test]
    fn choices_follow_the_weights() {
        // A chi-square goodness-of-fit test against the n-th root weights.
        let frees = [1u64, 2, 3, 5, 8, 13, 21, 34, 55, 89].map(|f| f << 30);
        let pairs: Vec<PairRecord> = frees.iter().map(|&f| pair(f)).collect();
        let samples = 100_000;
        let total: f64 = frees.iter().map(|&f| (f as f64).sqrt()).sum();
        let observed = shares(&pairs, 2, samples);
        let chi2: f64 = frees
            .iter()
            .zip(&observed)
            .map(|(&f, &o)| {
                let e = (f as f64).sqrt() / total * samples as f64;
                let o = o * samples as f64;
                (o - e) * (o - e) / e
            })
            .sum();
        // 9 degrees of freedom: P(chi2 > 45) is below 1e-6, so a failure means a bias.
        assert!(chi2 < 45.0, "chi2 = {chi2}");
    }
}
