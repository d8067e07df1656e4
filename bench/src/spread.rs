//! The `groups-spread` workload: metadata bytes per node against node count, issue #28's
//! figure. The same M objects (40 000 in the full run, two per distinct 4 KiB body) are
//! written through S3 into fresh clusters of 1, 3, 5 and 6 nodes at replication factor 3,
//! each on its own fresh filesystem, with split thresholds scaled to M
//! (`--group-split-objects`, `--group-split-files`) so that the product's own automatic
//! splits make about [`GROUPS_PER_KIND`] index and FileDB groups: a node's share depends on
//! the groups and where they are placed, not on M (10 M objects split the same way at
//! thresholds 250 times higher). Once the splits and moves have settled,
//! each node's data folder is measured (its files' allocated blocks: root's and every
//! group's redb files and Raft logs; the content files are on the shared pair, outside
//! it), with the records its replicas hold (`GET /_admin/groups`, `held`). The objects are
//! then read (HEAD) through every node, a sample of them.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;

use crate::cluster::Cluster;
use crate::fsstat::dir_stat;
use crate::groups::{Groups, groups};
use crate::raft::{human, progress};
use crate::report::Report;
use crate::rng::Rng;
use crate::s3::Client;
use crate::scratch::Scratches;
use crate::stats::bytes;

pub const SEC: &str = "metadata per node";
const REPLICATION: usize = 3;
/// Index and FileDB groups each the thresholds aim at.
const GROUPS_PER_KIND: u64 = 4;
const BUCKET: &str = "spread";
const BODY: usize = 4 << 10;
/// PUTs in flight.
const CONC: usize = 16;
/// No change of the map and no lag for this long: the cluster has settled.
const SETTLED: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(250);
/// Objects read back through each node.
const CHECK_SAMPLE: usize = 200;

#[derive(Clone, Copy, Debug)]
pub struct SpreadPlan {
    pub objects: usize,
    /// The node counts measured.
    pub nodes: &'static [usize],
    /// Bound on each cluster's writes, and on its settling.
    pub limit: Duration,
}

impl SpreadPlan {
    /// 3 000 objects on 1 and 5 nodes in `--quick`; 40 000 on 1, 3, 5 and 6 otherwise.
    pub fn new(quick: bool) -> SpreadPlan {
        if quick {
            SpreadPlan {
                objects: 3_000,
                nodes: &[1, 5],
                limit: Duration::from_secs(120),
            }
        } else {
            SpreadPlan {
                objects: 40_000,
                nodes: &[1, 3, 5, 6],
                limit: Duration::from_secs(900),
            }
        }
    }
}

/// One node's share.
struct Share {
    allocated: u64,
    records: u64,
}

/// Runs the workload; each node count's failure is reported as its error.
pub async fn run(
    gateway: &Path,
    scratches: &Scratches,
    plan: SpreadPlan,
    rng: &mut Rng,
    report: &mut Report,
) {
    let mut one_node: Option<u64> = None;
    for &n in plan.nodes {
        match measure(gateway, scratches, plan, n, rng).await {
            Ok((shares, all_records, groups)) => {
                let mut alloc: Vec<u64> = shares.iter().map(|s| s.allocated).collect();
                alloc.sort_unstable();
                let mean = alloc.iter().sum::<u64>() / alloc.len().max(1) as u64;
                if n == 1 {
                    one_node = Some(mean);
                }
                // Against one node's only when that cluster was measured.
                let against = match one_node {
                    Some(base) => format!("{:.2}x one node's", mean as f64 / base.max(1) as f64),
                    None => "one node's not measured".into(),
                };
                let fractions: Vec<f64> = shares
                    .iter()
                    .map(|s| s.records as f64 / all_records.max(1) as f64)
                    .collect();
                let (lo, hi) = crate::stats::range(&fractions);
                report.info(
                    SEC,
                    &format!(
                        "{n} node{}, replication factor {REPLICATION}",
                        if n == 1 { "" } else { "s" }
                    ),
                    format!(
                        "{}: per node {} (min {}, max {}), {against}; records held per node {lo:.2}-{hi:.2} of all {all_records} (ideal {:.2})",
                        groups,
                        bytes(mean),
                        bytes(alloc[0]),
                        bytes(alloc[alloc.len() - 1]),
                        (REPLICATION.min(n) as f64 / n as f64),
                    ),
                );
            }
            Err(e) => report.error(SEC, &format!("{n} nodes"), e),
        }
    }
}

/// One fresh cluster of `n` nodes: the writes, the settling, the shares, the checks.
/// Answers each node's share, the records of all groups (each counted once) and a
/// description of the groups.
async fn measure(
    gateway: &Path,
    scratches: &Scratches,
    plan: SpreadPlan,
    n: usize,
    rng: &mut Rng,
) -> Result<(Vec<Share>, u64, String), String> {
    let m = plan.objects.max(2) as u64;
    // Index entries: one per object; FileDB records: one per two objects.
    let split_objects = (m / GROUPS_PER_KIND).max(16);
    let split_files = (m / 2 / GROUPS_PER_KIND).max(16);
    let dir = scratches.fresh(&format!("spread-{n}"))?;
    let args = [
        "--replication-factor".to_string(),
        REPLICATION.to_string(),
        "--group-split-objects".into(),
        split_objects.to_string(),
        "--group-split-files".into(),
        split_files.to_string(),
    ];
    progress(&format!("groups-spread: {n} node(s), {} objects", human(m)));
    let mut cluster =
        tokio::task::block_in_place(|| Cluster::start_with(gateway, dir.path(), n, &args, rng))?;
    cluster.wait_leader(Duration::from_secs(30), None).await?;
    let clients = cluster.s3_clients();
    // Each node takes a PUT before the clock starts: a node just started may not have
    // applied the cluster's disk pair yet.
    crate::workloads::warm_up(&clients[0], BUCKET, true).await?;
    for c in &clients[1..] {
        crate::workloads::warm_up(c, BUCKET, false).await?;
    }
    let seed = rng.next_u64();
    let writes = {
        let clients = clients.clone();
        crate::load::run(CONC, m as usize, plan.limit, move |i| {
            let c = clients[i % clients.len()].clone();
            async move {
                let body = Bytes::from(Rng::new(seed ^ (i as u64 / 2)).bytes(BODY));
                c.put_object(BUCKET, &key(i as u64), body).await
            }
        })
        .await
    };
    writes.check("PUT")?;
    if writes.ops < m {
        return Err(format!(
            "{} of {m} PUTs within {:?}",
            writes.ops, plan.limit
        ));
    }
    let admins: Vec<Client> = cluster.nodes.iter().map(|n| n.admin.clone()).collect();
    let views = settle(&admins, plan.limit).await?;
    // Every group's records once (from a node that holds it), and each node's share.
    let mut all = std::collections::BTreeMap::new();
    let mut shares = Vec::with_capacity(n);
    for (node, view) in cluster.nodes.iter().zip(&views) {
        let mut records = 0;
        for g in view.groups.iter().filter(|g| g.held) {
            records += g.records;
            all.insert(g.id, g.records);
        }
        let allocated = dir_stat(&node.data)?.allocated;
        shares.push(Share { allocated, records });
    }
    let count = |k: &str| views[0].groups.iter().filter(|g| g.kind == k).count();
    let groups = format!(
        "root, {} FileDB and {} index groups",
        count("filedb"),
        count("index")
    );
    check(&clients, m, rng).await?;
    drop(cluster);
    Ok((shares, all.values().sum(), groups))
}

fn key(i: u64) -> String {
    format!("mail/{i:08}")
}

/// Waits until every node answers the same map version for [`SETTLED`], every group has
/// its replicas and no held replica lags. Answers each node's last view.
async fn settle(admins: &[Client], limit: Duration) -> Result<Vec<Groups>, String> {
    let deadline = Instant::now() + limit;
    let mut stable_since: Option<(u64, Instant)> = None;
    loop {
        let mut views = Vec::with_capacity(admins.len());
        for a in admins {
            views.push(groups(a).await?);
        }
        let version = views[0].version;
        let quiet = views.iter().all(|v| {
            v.version == version
                && v.groups
                    .iter()
                    .all(|g| g.lag == 0 && !g.replicas.is_empty())
        });
        match (quiet, stable_since) {
            (true, Some((v, since))) if v == version && since.elapsed() >= SETTLED => {
                return Ok(views);
            }
            (true, Some((v, _))) if v == version => {}
            (true, _) => stable_since = Some((version, Instant::now())),
            (false, _) => stable_since = None,
        }
        if Instant::now() >= deadline {
            return Err(format!("the cluster did not settle within {limit:?}"));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A sample of the objects read (HEAD) through each node.
async fn check(clients: &[Client], m: u64, rng: &mut Rng) -> Result<(), String> {
    for c in clients {
        for _ in 0..CHECK_SAMPLE {
            let k = key(rng.below(m));
            c.send_ok(
                Method::HEAD,
                &format!("/{BUCKET}/{k}"),
                &[],
                Bytes::new(),
                false,
            )
            .await?;
        }
    }
    Ok(())
}
