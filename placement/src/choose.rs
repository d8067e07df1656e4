//! The pair choice: random, weighted by the n-th root of free space.
//!
//! Weighting by free space alone sends nearly every write to a freshly added empty pair
//! while the others are 90 % full, which then becomes the hot spot for reads of new mail.
//! Taking the n-th root flattens the weights (n = 2 by default): an empty 10 TB pair beside
//! nine 1 TB-free pairs gets 1/(1+9/sqrt(10)) ~ 26 % of writes instead of 53 %.

use rand::RngExt as _;

use crate::pairdb::PairRecord;
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
    use crate::pairdb::PairFlags;
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
}
