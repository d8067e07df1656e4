//! The start check of `https://` storage nodes: before `gateway serve` takes a request,
//! every configured `https://` disk must complete a TLS handshake both ways and a write
//! probe, so that a node whose certificate does not verify, or that refuses this gateway's
//! certificate, stops the start with the reason instead of failing uploads later.
//!
//! Only `https://` disks: a single node has always started with an `http://` node down (its
//! pair is skipped until it answers), and keeps doing so; a TLS mistake is configuration,
//! which waiting does not fix. A cluster node probes every disk anyway (`check_reachable`).

use placement::{Disk, DiskRef, PairId};

/// Bound on the disks probed at start, so a configuration error cannot make the start
/// crawl: far more than the pairs one gateway writes (the article: ~14 000 pairs spread
/// over many gateways; a probe is one PUT and one DELETE, a few ms on the storage network).
const HTTPS_DISKS_PROBED_MAX: usize = 100_000;

/// Probes each `https://` disk of `pairs` in turn; the first failure is the error, naming
/// the pair, the disk and the cause.
pub async fn check_https(pairs: &[(PairId, [DiskRef; 2])]) -> Result<(), String> {
    let https = pairs
        .iter()
        .flat_map(|(id, disks)| disks.iter().map(move |d| (*id, d)))
        .filter(|(_, d)| d.as_str().starts_with("https://"))
        .take(HTTPS_DISKS_PROBED_MAX);
    for (id, disk) in https {
        let refused = |e: placement::DiskError| {
            format!("pair {id}: storage node {disk} refused at start: {e}")
        };
        Disk::open(disk)
            .map_err(refused)?
            .probe_write()
            .await
            .map_err(refused)?;
    }
    Ok(())
}
