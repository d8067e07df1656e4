//! The replicated-metadata figures (`--only raft`):
//!
//! - 64 KiB unique PUT and native inc/dec, 32 connections, with one node before replication
//!   (a baseline binary), one node on the Raft log, three nodes (requests spread
//!   round-robin over them), and three nodes whose FileDB is split into four groups
//!   (`admin groups split` three times before the clock starts; leaders spread over the
//!   nodes), in interleaved rounds on fresh folders: median and range.
//! - Election time after `kill -9` and after SIGSTOP of the leader of three nodes, and
//!   the elections a follower paused then resumed (a healed partition) causes, over
//!   repeated trials.
//! - Restart after `kill -9` mid-write of a node holding 1 M / 10 M objects (loaded
//!   offline by the `load-objects` binary).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;

use crate::cluster::{Cluster, view};
use crate::load::{self, Outcome};
use crate::objects_report::{self, LOADED_BUCKET, LoadReport, loaded_key};
use crate::procs::{GatewayLaunch, Secrets, Server, free_port, spawn_gateway};
use crate::report::{Report, Row, fmt_ratio};
use crate::rng::Rng;
use crate::s3::Client;
use crate::scratch::Scratches;
pub use crate::stats::median;
use crate::stats::{bytes, med_range, us};
use crate::workloads::{self, BUCKET, Gw};

const SMALL: usize = 64 << 10;
const CONC: usize = 32;
/// Contents the inc/dec workload spreads its references over.
const INCDEC_CONTENTS: usize = 16;
/// The targets of the issue.
const ONE_NODE_MIN: f64 = 1.0;
const THREE_NODES_PUT_MIN: f64 = 0.7;
const THREE_NODES_INCDEC_MIN: f64 = 5000.0;
/// Bound on a group electing its first leader, and on a restarted node following again.
const LEADER_LIMIT: Duration = Duration::from_secs(60);
/// Bound on one election trial (kill to a PUT through a survivor).
const TRIAL_LIMIT: Duration = Duration::from_secs(60);
/// The restart figure's write load: body size and connections.
const RESTART_BODY: usize = 4096;
const RESTART_CONC: usize = 16;
/// The write load before the kill lasts at least this long: several of the state
/// machine's durable checkpoints (one a second) then happened while writing, as on a
/// node that has served for a while.
const RESTART_WRITE_MIN: Duration = Duration::from_secs(3);

pub const SEC_RATE: &str = "Raft: 1 node before/after, 3 nodes";
pub const SEC_ELECTION: &str = "Raft: elections (kill -9, pause, heal)";
pub const SEC_RESTART: &str = "Raft: restart after kill -9";

/// How much of each part a run does.
#[derive(Clone, Debug)]
pub struct RaftPlan {
    /// Interleaved rounds of (baseline, 1 node, 3 nodes).
    pub rounds: usize,
    pub put_count: usize,
    pub incdec_count: usize,
    pub election_trials: usize,
    /// Objects in the data folder of each restart measurement.
    pub restart_sizes: Vec<u64>,
    /// Acknowledged PUTs before the kill.
    pub restart_puts: usize,
    /// Bound on each load (it stops early and says so).
    pub limit: Duration,
    /// Bound on loading one restart folder.
    pub load_limit: Duration,
}

/// Which parts of the workload run (`--only raft-rates` and the like, for profiling one).
#[derive(Clone, Copy, Debug)]
pub struct RaftParts {
    pub rates: bool,
    pub election: bool,
    pub restart: bool,
}

impl RaftParts {
    pub fn any(self) -> bool {
        self.rates || self.election || self.restart
    }
}

/// The binaries under test.
#[derive(Clone, Debug)]
pub struct RaftBins {
    pub gateway: PathBuf,
    /// A gateway built from the commit before replication (none: those rows are SKIPPED).
    pub baseline: Option<PathBuf>,
    /// The `load-objects` binary (absent: the restart rows are SKIPPED).
    pub loader: PathBuf,
}

pub(crate) fn progress(msg: &str) {
    eprintln!("bench: {msg}");
}

/// 1 M, 10 k, ...
pub fn human(n: u64) -> String {
    if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{} M", n / 1_000_000)
    } else if n >= 1000 && n.is_multiple_of(1000) {
        format!("{} k", n / 1000)
    } else {
        n.to_string()
    }
}

fn secs(d: Duration) -> String {
    if d < Duration::from_secs(10) {
        format!("{:.2} s", d.as_secs_f64())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// Runs every part; a failing part is reported as ERROR and the others still run.
pub async fn run(
    bins: &RaftBins,
    root: &Path,
    scratches: &Scratches,
    plan: &RaftPlan,
    parts: RaftParts,
    rng: &mut Rng,
    report: &mut Report,
) {
    if parts.rates {
        rates(bins, scratches, plan, rng, report).await;
    }
    if parts.election
        && let Err(e) = election(&bins.gateway, root, plan, rng, report).await
    {
        report.error(SEC_ELECTION, "election trials", e);
    }
    if parts.restart {
        restarts(bins, root, plan, rng, report).await;
    }
}

// ---- PUT and inc/dec: baseline, 1 node, 3 nodes --------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Setup {
    Baseline,
    One,
    Three,
    ThreeGroups,
}

impl Setup {
    fn label(self) -> &'static str {
        match self {
            Setup::Baseline => "1 node, before replication (baseline)",
            Setup::One => "1 node, Raft",
            Setup::Three => "3 nodes, Raft (requests round-robin)",
            Setup::ThreeGroups => "3 nodes, FileDB in 4 groups (requests round-robin)",
        }
    }
}

/// The FileDB groups of [`Setup::ThreeGroups`]: root's sha1 space split at 0x80, then
/// each half at its middle.
const SPLITS: [(u64, u64); 3] = [(0, 2), (0, 3), (1, 4)];
/// Bound on one split's commit (a few rows: well under a second).
const SPLIT_LIMIT: Duration = Duration::from_secs(60);

struct Round {
    put: Outcome,
    inc: Outcome,
    dec: Outcome,
}

impl Round {
    /// inc and dec together: references added and taken back per second.
    fn incdec_rate(&self) -> f64 {
        (self.inc.ops + self.dec.ops) as f64
            / (self.inc.wall + self.dec.wall).as_secs_f64().max(1e-9)
    }
}

async fn rates(
    bins: &RaftBins,
    scratches: &Scratches,
    plan: &RaftPlan,
    rng: &mut Rng,
    report: &mut Report,
) {
    let mut setups = Vec::new();
    match &bins.baseline {
        Some(_) => setups.push(Setup::Baseline),
        None => report.skipped(
            SEC_RATE,
            Setup::Baseline.label(),
            "no --baseline-bin (or BASELINE_GATEWAY_BIN): a gateway built from commit 0a3ad8b, see bench/README.md".into(),
        ),
    }
    setups.extend([Setup::One, Setup::Three, Setup::ThreeGroups]);
    let bodies = workloads::bodies(rng, plan.put_count, SMALL);
    // results[setup][round]: None where that round failed.
    let mut results: Vec<Vec<Option<Round>>> = setups.iter().map(|_| Vec::new()).collect();
    for r in 0..plan.rounds {
        // The same bodies, keys and magics for every setup of a round.
        let seed = rng.next_u64();
        for (k, &setup) in setups.iter().enumerate() {
            progress(&format!(
                "raft round {}/{}: {}: 64 KiB PUT, inc/dec",
                r + 1,
                plan.rounds,
                setup.label()
            ));
            let bin = match setup {
                Setup::Baseline => bins.baseline.as_deref().unwrap_or(&bins.gateway),
                _ => &bins.gateway,
            };
            match round(setup, bin, scratches, plan, seed, &bodies).await {
                Ok(res) => results[k].push(Some(res)),
                Err(e) => {
                    report.error(SEC_RATE, &format!("{}, round {}", setup.label(), r + 1), e);
                    results[k].push(None);
                }
            }
        }
    }
    let of = |s: Setup| setups.iter().position(|&x| x == s).map(|k| &results[k]);
    for (k, &setup) in setups.iter().enumerate() {
        rate_rows(report, setup, &results[k], plan);
    }
    let put = |r: &Round| r.put.ops_per_sec();
    let incdec = |r: &Round| r.incdec_rate();
    if let (Some(base), Some(one)) = (of(Setup::Baseline), of(Setup::One)) {
        ratio_row(
            report,
            "64 KiB PUT: 1 node Raft / before",
            one,
            base,
            put,
            ONE_NODE_MIN,
            "before",
        );
        ratio_row(
            report,
            "inc/dec: 1 node Raft / before",
            one,
            base,
            incdec,
            ONE_NODE_MIN,
            "before",
        );
    } else {
        report.skipped(
            SEC_RATE,
            "1 node Raft / before (64 KiB PUT, inc/dec)",
            "no baseline binary".into(),
        );
    }
    if let (Some(one), Some(three)) = (of(Setup::One), of(Setup::Three)) {
        ratio_row(
            report,
            "64 KiB PUT: 3 nodes / 1 node",
            three,
            one,
            put,
            THREE_NODES_PUT_MIN,
            "1 node",
        );
        let r = median(three.iter().flatten().map(incdec).collect());
        let per: Vec<String> = three
            .iter()
            .flatten()
            .map(|x| format!("{:.0}", incdec(x)))
            .collect();
        if let Some(r) = r {
            report.target(
                SEC_RATE,
                "inc/dec, 3 nodes",
                format!("{r:.0} inc+dec/s (rounds: {})", per.join(", ")),
                format!("{THREE_NODES_INCDEC_MIN:.0} /s"),
                r / THREE_NODES_INCDEC_MIN,
                ">= 5000/s",
                r >= THREE_NODES_INCDEC_MIN,
                String::new(),
            );
        }
        ratio_row(
            report,
            "inc/dec: 3 nodes / 1 node",
            three,
            one,
            incdec,
            0.0,
            "1 node",
        );
    }
    if let (Some(three), Some(groups)) = (of(Setup::Three), of(Setup::ThreeGroups)) {
        ratio_row(
            report,
            "64 KiB PUT: 3 nodes, 4 FileDB groups / 1 group",
            groups,
            three,
            put,
            0.0,
            "3 nodes, 1 group",
        );
        ratio_row(
            report,
            "inc/dec: 3 nodes, 4 FileDB groups / 1 group",
            groups,
            three,
            incdec,
            0.0,
            "3 nodes, 1 group",
        );
    }
}

/// One setup of one round, on fresh folders.
async fn round(
    setup: Setup,
    bin: &Path,
    scratches: &Scratches,
    plan: &RaftPlan,
    seed: u64,
    bodies: &Arc<Vec<Bytes>>,
) -> Result<Round, String> {
    let mut rng = Rng::new(seed);
    // Each setup of each round on a fresh filesystem (as root): on a filesystem that has
    // seen many files come and go, ext4's inode allocator alone takes a fifth of the PUT
    // phase's CPU and makes later rounds slower than the first. Dropped after the servers.
    let scratch = scratches.fresh(match setup {
        Setup::Baseline => "base",
        Setup::One => "raft1",
        Setup::Three => "raft3",
        Setup::ThreeGroups => "raft3g",
    })?;
    let root = scratch.path();
    let (put, (inc, dec)) = match setup {
        Setup::Baseline | Setup::One => {
            let tag = if setup == Setup::Baseline {
                "base"
            } else {
                "raft1"
            };
            let gw = tokio::task::block_in_place(|| Gw::start(bin, root, tag, &mut rng))?;
            workloads::warm_up(&gw.s3, BUCKET, true).await?;
            let put = workloads::put_all(&gw.s3, BUCKET, "r64k", bodies, CONC, plan.limit).await;
            put.check("64 KiB PUT")?;
            let incdec = workloads::native_inc_dec(
                &gw,
                INCDEC_CONTENTS,
                plan.incdec_count,
                CONC,
                plan.limit,
                &mut rng,
            )
            .await?;
            (put, incdec)
        }
        Setup::Three | Setup::ThreeGroups => {
            let mut cl = tokio::task::block_in_place(|| Cluster::start(bin, root, 3, &mut rng))?;
            cl.wait_leader(LEADER_LIMIT, None).await?;
            if setup == Setup::ThreeGroups {
                split_filedb(&cl).await?;
            }
            workloads::warm_up(&cl.nodes[0].s3, BUCKET, true).await?;
            // Every node takes a PUT (its PairDB is loaded) before the clock starts.
            for n in &cl.nodes {
                workloads::warm_up(&n.s3, BUCKET, false).await?;
            }
            let put =
                workloads::put_all_rr(&cl.s3_clients(), BUCKET, "r64k", bodies, CONC, plan.limit)
                    .await;
            put.check("64 KiB PUT, 3 nodes")?;
            let incdec = workloads::native_inc_dec_rr(
                &cl.native_clients(),
                INCDEC_CONTENTS,
                plan.incdec_count,
                CONC,
                plan.limit,
                &mut rng,
            )
            .await?;
            (put, incdec)
        }
    };
    inc.check("native inc")?;
    dec.check("native dec")?;
    Ok(Round { put, inc, dec })
}

/// Splits the FileDB of `cl` into four groups ([`SPLITS`]), each split committed on
/// node 1 before the next is asked. A new cluster runs the first metadata format until
/// its leader has asked every member (a few seconds): a split is asked again until then.
async fn split_filedb(cl: &Cluster) -> Result<(), String> {
    let admin = &cl.nodes[0].admin;
    for (group, version) in SPLITS {
        let deadline = Instant::now() + SPLIT_LIMIT;
        loop {
            let body = Bytes::from(format!("{{\"group\": {group}}}"));
            match admin
                .send_ok(Method::POST, "/_admin/groups/split", &[], body, true)
                .await
            {
                Ok(_) => break,
                Err(e) if e.contains("503") && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(format!("groups split {group}: {e}")),
            }
        }
        loop {
            let r = admin
                .send_ok(Method::GET, "/_admin/groups", &[], Bytes::new(), true)
                .await?;
            let v: serde_json::Value =
                serde_json::from_slice(&r.head).map_err(|e| format!("/_admin/groups: {e}"))?;
            if v["version"].as_u64() == Some(version) {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("split of group {group} not committed: {v}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

fn lat_us(x: f64) -> String {
    us(x.round() as u64)
}

/// ops/s, p50 and p99 of one operation over rounds.
fn op_summary(outs: &[&Outcome]) -> String {
    let ops: Vec<f64> = outs.iter().map(|o| o.ops_per_sec()).collect();
    let p50: Vec<f64> = outs.iter().map(|o| o.latency.p50_us as f64).collect();
    let p99: Vec<f64> = outs.iter().map(|o| o.latency.p99_us as f64).collect();
    let cut = if outs.iter().any(|o| o.truncated) {
        " [a round hit the time limit]"
    } else {
        ""
    };
    format!(
        "{} ops/s, p50 {}, p99 {}{cut}",
        med_range(&ops, |x| format!("{x:.0}")),
        med_range(&p50, lat_us),
        med_range(&p99, lat_us),
    )
}

fn rate_rows(report: &mut Report, setup: Setup, rounds: &[Option<Round>], plan: &RaftPlan) {
    let ok: Vec<&Round> = rounds.iter().flatten().collect();
    if ok.is_empty() {
        return;
    }
    let n = format!("{} of {} rounds", ok.len(), plan.rounds);
    let cpu = |outs: &[&Outcome]| {
        median(outs.iter().map(|o| o.client_us_per_op()).collect())
            .map(|x| format!("{x:.0} us"))
            .unwrap_or_default()
    };
    let puts: Vec<&Outcome> = ok.iter().map(|r| &r.put).collect();
    report.push(Row {
        section: SEC_RATE.into(),
        figure: format!("64 KiB PUT, {CONC} conns: {}", setup.label()),
        measured: format!("{} ({n}; median (min-max))", op_summary(&puts)),
        client_cpu: cpu(&puts),
        ..Row::default()
    });
    let incs: Vec<&Outcome> = ok.iter().map(|r| &r.inc).collect();
    let decs: Vec<&Outcome> = ok.iter().map(|r| &r.dec).collect();
    let both: Vec<f64> = ok.iter().map(|r| r.incdec_rate()).collect();
    let all: Vec<&Outcome> = incs.iter().chain(decs.iter()).copied().collect();
    report.push(Row {
        section: SEC_RATE.into(),
        figure: format!("native inc/dec, {CONC} conns: {}", setup.label()),
        measured: format!(
            "{} inc+dec/s; inc: {}; dec: {} ({n})",
            med_range(&both, |x| format!("{x:.0}")),
            op_summary(&incs),
            op_summary(&decs)
        ),
        client_cpu: cpu(&all),
        ..Row::default()
    });
}

/// `a / b` of the medians, with the per-round ratios; a target when `min` > 0.
fn ratio_row(
    report: &mut Report,
    figure: &str,
    a: &[Option<Round>],
    b: &[Option<Round>],
    f: impl Fn(&Round) -> f64,
    min: f64,
    against: &str,
) {
    let (Some(ma), Some(mb)) = (
        median(a.iter().flatten().map(&f).collect()),
        median(b.iter().flatten().map(&f).collect()),
    ) else {
        return;
    };
    let per: Vec<String> = a
        .iter()
        .zip(b)
        .filter_map(|(x, y)| Some(fmt_ratio(f(x.as_ref()?) / f(y.as_ref()?).max(1e-9))))
        .collect();
    let r = ma / mb.max(1e-9);
    let measured = format!("{ma:.0} vs {mb:.0} /s (per round: {})", per.join(", "));
    let compared = format!("{against}, median {mb:.0} /s");
    if min > 0.0 {
        report.target(
            SEC_RATE,
            figure,
            measured,
            compared,
            r,
            &format!(">= {min:.2}x"),
            r >= min,
            String::new(),
        );
    } else {
        report.push(Row {
            section: SEC_RATE.into(),
            figure: figure.into(),
            measured,
            compared_with: compared,
            ratio: fmt_ratio(r),
            ..Row::default()
        });
    }
}

// ---- election ------------------------------------------------------------------------

fn p50_max(v: &[Duration]) -> String {
    let mut s = v.to_vec();
    s.sort();
    let p50 = median(s.iter().map(|d| d.as_secs_f64()).collect()).unwrap_or(0.0);
    format!(
        "p50 {}, max {} ({} trials: {})",
        ms(Duration::from_secs_f64(p50)),
        ms(s.last().copied().unwrap_or_default()),
        v.len(),
        v.iter().map(|d| ms(*d)).collect::<Vec<_>>().join(", ")
    )
}

/// The longest gaps of [`Writer`]s (p50, max, every trial) and their PUT counts.
fn written_summary<'a>(w: impl Iterator<Item = &'a Written>) -> String {
    let w: Vec<&Written> = w.collect();
    let gaps: Vec<Duration> = w.iter().map(|x| x.gap).collect();
    let outages: Vec<Duration> = w.iter().map(|x| x.outage).collect();
    format!(
        "longest: {}; all gaps over {}: {}; PUTs acknowledged {}, failed {}",
        p50_max(&gaps),
        ms(OUTAGE_GAP),
        p50_max(&outages),
        w.iter().map(|x| x.acked).sum::<usize>(),
        w.iter().map(|x| x.failed).sum::<u64>()
    )
}

/// How long a follower stays paused in a heal trial: longer than the election timeout
/// (500-1000 ms by default) plus the leader lease (1 s).
const HEAL_PAUSE: Duration = Duration::from_secs(3);
/// How long the group runs on after a paused node is resumed (and, for a paused leader,
/// has stepped down) before the terms are read again and the PUT loop stops.
const SETTLE: Duration = Duration::from_secs(3);

async fn election(
    bin: &Path,
    root: &Path,
    plan: &RaftPlan,
    rng: &mut Rng,
    report: &mut Report,
) -> Result<(), String> {
    progress(&format!(
        "raft: election after kill -9 of the leader, {} trials",
        plan.election_trials
    ));
    let mut cl = tokio::task::block_in_place(|| Cluster::start(bin, root, 3, rng))?;
    cl.wait_leader(LEADER_LIMIT, None).await?;
    workloads::warm_up(&cl.nodes[0].s3, BUCKET, true).await?;
    for n in &cl.nodes {
        workloads::warm_up(&n.s3, BUCKET, false).await?;
    }
    let body = Bytes::from(rng.bytes(RESTART_BODY));
    let mut steady = Trials::default();
    let mut lagging = Trials::default();
    let mut rejoined = Vec::new();
    for t in 0..plan.election_trials {
        // Even trials kill the leader of a steady group (every log alike); odd ones kill it
        // right after the previous trial's node came back, while that node may still lack
        // the last entries: its candidacy is then refused and the election takes longer.
        let is_steady = t % 2 == 0;
        if is_steady {
            logs_alike(&cl, LEADER_LIMIT).await?;
        }
        let leader = cl.wait_leader(LEADER_LIMIT, None).await?;
        let before = view(&cl.nodes[leader].admin).await?.term;
        let (elected, writable) = kill_leader_once(&mut cl, leader, t, &body).await?;
        let into = if is_steady { &mut steady } else { &mut lagging };
        into.elected.push(elected);
        into.writable.push(writable);
        // The killed node comes back on its folder and follows the new leader.
        let t1 = Instant::now();
        tokio::task::block_in_place(|| cl.start_node(leader))?;
        let now = cl.wait_leader(LEADER_LIMIT, None).await?;
        rejoined.push(t1.elapsed());
        let after = view(&cl.nodes[now].admin).await?.term;
        into.elections.push(after.saturating_sub(before));
    }
    for (trials, when) in [
        (&steady, "steady group"),
        (&lagging, "a follower just restarted"),
    ] {
        if trials.elected.is_empty() {
            continue;
        }
        report.info(
            SEC_ELECTION,
            &format!("kill -9: a surviving node names a new leader ({when})"),
            p50_max(&trials.elected),
        );
        report.info(
            SEC_ELECTION,
            &format!("kill -9: first PUT through a surviving follower succeeds ({when})"),
            p50_max(&trials.writable),
        );
        report.info(
            SEC_ELECTION,
            &format!("kill -9: elections per trial, kill to rejoin ({when})"),
            elections(&trials.elections),
        );
    }
    report.info(
        SEC_ELECTION,
        "kill -9: killed node restarted until it names the leader",
        p50_max(&rejoined),
    );
    // The same group: a paused leader, then paused followers. A failing kind is reported
    // and the next still runs (every node runs again whatever happened).
    if let Err(e) = paused_leaders(&mut cl, plan, &body, report).await {
        report.error(SEC_ELECTION, "leader paused (SIGSTOP) trials", e);
    }
    if let Err(e) = heals(&mut cl, plan, &body, report).await {
        report.error(
            SEC_ELECTION,
            "follower paused then resumed (heal) trials",
            e,
        );
    }
    Ok(())
}

#[derive(Default)]
struct Trials {
    elected: Vec<Duration>,
    writable: Vec<Duration>,
    /// Term increments from before the kill until the killed node follows again (1 when
    /// one election replaced the leader).
    elections: Vec<u64>,
}

/// `N in T trials (per trial: a, b, ...)` of term increments.
fn elections(per: &[u64]) -> String {
    format!(
        "{} in {} trials (per trial: {})",
        per.iter().sum::<u64>(),
        per.len(),
        per.iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Waits until every running node has appended the same last log entry. Bounded by `limit`.
async fn logs_alike(cl: &Cluster, limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    loop {
        let mut last = Vec::new();
        for n in cl.nodes.iter().filter(|n| n.server.is_some()) {
            last.push(view(&n.admin).await.ok().and_then(|v| v.last_log_index));
        }
        if last
            .first()
            .is_some_and(|f| f.is_some() && last.iter().all(|l| l == f))
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("logs still differ after {limit:?}: {last:?}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Kills the leader (index `leader`); returns the time until a survivor names a new
/// leader and until a PUT through a surviving follower succeeds.
async fn kill_leader_once(
    cl: &mut Cluster,
    leader: usize,
    t: usize,
    body: &Bytes,
) -> Result<(Duration, Duration), String> {
    tokio::task::block_in_place(|| cl.kill9(leader));
    let t0 = Instant::now();
    let f = failover(cl, leader, t0, &format!("election/{t}"), body)
        .await
        .map_err(|e| format!("trial {} (kill -9): {e}", t + 1))?;
    Ok((f.elected, f.writable))
}

/// What a survivor saw after the leader went away.
struct Failover {
    /// Until a survivor names a leader other than the old one.
    elected: Duration,
    /// Until a PUT through a surviving follower succeeds.
    writable: Duration,
    /// The new leader's index.
    new_leader: usize,
}

/// Polls the nodes other than `old_idx` (the leader, killed or paused at `t0`) every 5 ms
/// until one names another leader, then PUTs `key` through a survivor that does not lead
/// (forwarded to the new leader) until it succeeds. Bounded by [`TRIAL_LIMIT`] from `t0`.
async fn failover(
    cl: &Cluster,
    old_idx: usize,
    t0: Instant,
    key: &str,
    body: &Bytes,
) -> Result<Failover, String> {
    let old = cl.nodes[old_idx].id;
    let survivors: Vec<usize> = (0..cl.nodes.len()).filter(|&i| i != old_idx).collect();
    let deadline = t0 + TRIAL_LIMIT;
    let new_id = 'found: loop {
        for &i in &survivors {
            if let Ok(v) = view(&cl.nodes[i].admin).await
                && let Some(l) = v.leader
                && l != old
            {
                break 'found l;
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "no new leader within {TRIAL_LIMIT:?} after losing node {old}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let elected = t0.elapsed();
    let new_leader = cl
        .nodes
        .iter()
        .position(|n| n.id == new_id)
        .ok_or_else(|| format!("leader {new_id} is not a node of this cluster"))?;
    let via = survivors
        .iter()
        .copied()
        .find(|&i| i != new_leader)
        .unwrap_or(survivors[0]);
    let mut last: String;
    loop {
        let put = cl.nodes[via].s3.put_object(BUCKET, key, body.clone());
        match tokio::time::timeout(Duration::from_secs(5), put).await {
            Ok(Ok(_)) => break,
            Ok(Err(e)) => last = e,
            Err(_) => last = "no answer within 5 s".into(),
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "no PUT through node {} within {TRIAL_LIMIT:?}: {last}",
                cl.nodes[via].id
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(Failover {
        elected,
        writable: t0.elapsed(),
        new_leader,
    })
}

fn pause_node(cl: &mut Cluster, idx: usize) {
    if let Some(s) = cl.nodes[idx].server.as_mut() {
        s.pause();
    }
}

fn resume_node(cl: &mut Cluster, idx: usize) {
    if let Some(s) = cl.nodes[idx].server.as_mut() {
        s.resume();
    }
}

/// One trial with a paused leader.
struct PauseTrial {
    elected: Duration,
    writable: Duration,
    /// From SIGCONT until the old leader names another leader and no longer leads.
    stepped_down: Duration,
    /// The term before the pause, of the new leader once named, and of the leader every
    /// node agrees on after the old one stepped down.
    terms: (u64, u64, u64),
    /// Whether the leader after the step-down is another than the one first elected.
    moved_again: bool,
    /// PUTs through a survivor from the pause to [`SETTLE`] after the step-down.
    written: Written,
}

/// `n` trials of `once`, each started on a steady group (every node's log alike, a leader
/// known) and given that leader's index and the trial's number; a failure names the trial
/// and `what` it was.
async fn steady_trials<T>(
    cl: &mut Cluster,
    n: usize,
    what: &str,
    mut once: impl AsyncFnMut(&mut Cluster, usize, usize) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    let mut trials = Vec::with_capacity(n);
    for t in 0..n {
        logs_alike(cl, LEADER_LIMIT).await?;
        let leader = cl.wait_leader(LEADER_LIMIT, None).await?;
        let trial = once(cl, leader, t)
            .await
            .map_err(|e| format!("trial {} ({what}): {e}", t + 1))?;
        trials.push(trial);
    }
    Ok(trials)
}

/// `election_trials` trials: SIGSTOP of the leader of a steady group, a new leader and a
/// PUT through a surviving follower, then SIGCONT and the old leader's step-down.
async fn paused_leaders(
    cl: &mut Cluster,
    plan: &RaftPlan,
    body: &Bytes,
    report: &mut Report,
) -> Result<(), String> {
    progress(&format!(
        "raft: election after SIGSTOP of the leader, {} trials",
        plan.election_trials
    ));
    let trials = steady_trials(
        cl,
        plan.election_trials,
        "leader paused",
        async |cl: &mut Cluster, leader, t| pause_leader_once(cl, leader, t, body).await,
    )
    .await?;
    let all = |f: fn(&PauseTrial) -> Duration| trials.iter().map(f).collect::<Vec<_>>();
    report.info(
        SEC_ELECTION,
        "leader paused (SIGSTOP): a surviving node names a new leader",
        p50_max(&all(|p| p.elected)),
    );
    report.info(
        SEC_ELECTION,
        "leader paused (SIGSTOP): first PUT through a surviving follower succeeds",
        p50_max(&all(|p| p.writable)),
    );
    report.info(
        SEC_ELECTION,
        "paused leader resumed (SIGCONT) until it names the new leader",
        p50_max(&all(|p| p.stepped_down)),
    );
    report.info(
        SEC_ELECTION,
        &format!(
            "leader paused: time without an acknowledged PUT through a survivor (pause to {} s after the step-down)",
            SETTLE.as_secs()
        ),
        written_summary(trials.iter().map(|p| &p.written)),
    );
    let moved = trials.iter().filter(|p| p.moved_again).count();
    let extra: u64 = trials
        .iter()
        .map(|p| p.terms.2.saturating_sub(p.terms.1))
        .sum();
    report.info(
        SEC_ELECTION,
        "leader paused: term before -> new leader -> after the step-down",
        format!(
            "{} trials: {}; {extra} elections after the first new leader; leader moved again in {moved}",
            trials.len(),
            trials
                .iter()
                .map(|p| format!("{} -> {} -> {}", p.terms.0, p.terms.1, p.terms.2))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    Ok(())
}

async fn pause_leader_once(
    cl: &mut Cluster,
    leader: usize,
    t: usize,
    body: &Bytes,
) -> Result<PauseTrial, String> {
    let old = cl.nodes[leader].id;
    let before = view(&cl.nodes[leader].admin).await?.term;
    // Sequential PUTs through one survivor from the pause to SETTLE after the
    // step-down: the whole time without writes, elections after the first included.
    let through = (0..cl.nodes.len()).find(|&i| i != leader).unwrap_or(0);
    let mut writer = Writer::start(cl.nodes[through].s3.clone(), format!("pausew/{t}"), body);
    pause_node(cl, leader);
    let t0 = Instant::now();
    let found = failover(cl, leader, t0, &format!("pause/{t}"), body).await;
    let new_term = match &found {
        Ok(f) => view(&cl.nodes[f.new_leader].admin).await.map(|v| v.term),
        Err(e) => Err(e.clone()),
    };
    // Resumed whatever happened: the group goes on with three nodes.
    resume_node(cl, leader);
    let t1 = Instant::now();
    let (f, new_term) = (found?, new_term?);
    let deadline = t1 + TRIAL_LIMIT;
    let mut last: String;
    loop {
        match view(&cl.nodes[leader].admin).await {
            Ok(v) if v.state != "Leader" && v.leader.is_some_and(|l| l != old) => break,
            Ok(v) => last = format!("state {}, leader {:?}, term {}", v.state, v.leader, v.term),
            Err(e) => last = e,
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "node {old} resumed, still not following another leader after {TRIAL_LIMIT:?}: {last}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let stepped_down = t1.elapsed();
    tokio::time::sleep(SETTLE).await;
    let written = writer.finish().await?;
    let now = cl.wait_leader(LEADER_LIMIT, None).await?;
    let after = view(&cl.nodes[now].admin).await?.term;
    Ok(PauseTrial {
        elected: f.elected,
        writable: f.writable,
        stepped_down,
        terms: (before, new_term, after),
        moved_again: now != f.new_leader,
        written,
    })
}

/// One heal trial: a follower paused for [`HEAL_PAUSE`], then resumed.
struct HealTrial {
    /// Term increments seen by the leader from before the pause to [`SETTLE`] after
    /// the resume: elections (won or not) the heal caused.
    elections: u64,
    leader_changed: bool,
    /// PUTs through the leader during the trial.
    written: Written,
}

/// `election_trials` trials: with a steady leader and PUTs going through it, SIGSTOP of one
/// follower for [`HEAL_PAUSE`], SIGCONT, [`SETTLE`] more; the leader's term before
/// and after counts the elections the heal caused (none are needed).
async fn heals(
    cl: &mut Cluster,
    plan: &RaftPlan,
    body: &Bytes,
    report: &mut Report,
) -> Result<(), String> {
    progress(&format!(
        "raft: a follower paused {HEAL_PAUSE:?} then resumed, {} trials",
        plan.election_trials
    ));
    let trials = steady_trials(
        cl,
        plan.election_trials,
        "heal",
        async |cl: &mut Cluster, leader, t| heal_once(cl, leader, t, body).await,
    )
    .await?;
    let sum: u64 = trials.iter().map(|h| h.elections).sum();
    let changed = trials.iter().filter(|h| h.leader_changed).count();
    report.push(Row {
        section: SEC_ELECTION.into(),
        figure: format!(
            "follower paused {} s then resumed (a healed partition): extra elections",
            HEAL_PAUSE.as_secs()
        ),
        measured: format!(
            "{sum} in {} heals ({:.2} per heal; per trial: {}); leader changed in {changed}",
            trials.len(),
            sum as f64 / trials.len().max(1) as f64,
            trials
                .iter()
                .map(|h| h.elections.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        compared_with: "0".into(),
        target: "= 0".into(),
        status: if sum == 0 { "MET" } else { "NOT MET" }.into(),
        ..Row::default()
    });
    report.info(
        SEC_ELECTION,
        "heal: time without an acknowledged PUT through the leader",
        written_summary(trials.iter().map(|h| &h.written)),
    );
    Ok(())
}

async fn heal_once(
    cl: &mut Cluster,
    leader: usize,
    t: usize,
    body: &Bytes,
) -> Result<HealTrial, String> {
    let lid = cl.nodes[leader].id;
    let before = view(&cl.nodes[leader].admin).await?.term;
    // Each trial pauses another follower, in turn.
    let followers: Vec<usize> = (0..cl.nodes.len()).filter(|&i| i != leader).collect();
    let paused = followers[t % followers.len()];
    // One connection of sequential 4 KiB PUTs through the leader for the whole trial.
    let mut writer = Writer::start(cl.nodes[leader].s3.clone(), format!("heal/{t}"), body);
    tokio::time::sleep(Duration::from_millis(200)).await;
    pause_node(cl, paused);
    tokio::time::sleep(HEAL_PAUSE).await;
    resume_node(cl, paused);
    tokio::time::sleep(SETTLE).await;
    let written = writer.finish().await?;
    let now = cl.wait_leader(TRIAL_LIMIT, None).await?;
    let after = view(&cl.nodes[now].admin).await?.term;
    Ok(HealTrial {
        elections: after.saturating_sub(before),
        leader_changed: cl.nodes[now].id != lid,
        written,
    })
}

/// One connection of sequential 4 KiB PUTs (each bounded by 5 s) while a trial runs;
/// stopped by [`Writer::finish`], or at its next PUT when dropped.
struct Writer {
    stop: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<(Vec<Instant>, u64)>>,
}

/// What a [`Writer`] saw.
struct Written {
    acked: usize,
    failed: u64,
    /// The longest time without an acknowledgement (from the start, between two, or
    /// from the last to the stop).
    gap: Duration,
    /// The sum of the times without an acknowledgement longer than [`OUTAGE_GAP`]: every
    /// outage of the trial, not only the longest.
    outage: Duration,
}

/// A time without an acknowledged PUT longer than this counts as an outage (a PUT takes
/// a few ms here; the busiest machine's scheduling delays stay well under it).
const OUTAGE_GAP: Duration = Duration::from_millis(250);

impl Writer {
    fn start(c: Client, prefix: String, body: &Bytes) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, body) = (stop.clone(), body.clone());
        let task = tokio::spawn(async move {
            let (mut acks, mut failed, mut i) = (vec![Instant::now()], 0u64, 0usize);
            while !flag.load(Ordering::SeqCst) {
                let key = format!("{prefix}/{i}");
                let put = c.put_object(BUCKET, &key, body.clone());
                match tokio::time::timeout(Duration::from_secs(5), put).await {
                    Ok(Ok(_)) => acks.push(Instant::now()),
                    _ => {
                        failed += 1;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
                i += 1;
            }
            acks.push(Instant::now());
            (acks, failed)
        });
        Writer {
            stop,
            task: Some(task),
        }
    }

    async fn finish(&mut self) -> Result<Written, String> {
        self.stop.store(true, Ordering::SeqCst);
        let task = self.task.take().ok_or("the PUT loop was already stopped")?;
        let (acks, failed) = tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .map_err(|_| "the PUT loop did not stop within 10 s".to_string())?
            .map_err(|e| format!("PUT loop: {e}"))?;
        let gaps = || acks.windows(2).map(|w| w[1] - w[0]);
        Ok(Written {
            acked: acks.len().saturating_sub(2),
            failed,
            gap: gaps().max().unwrap_or_default(),
            outage: gaps().filter(|g| *g > OUTAGE_GAP).sum(),
        })
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

// ---- restart after kill -9 at N objects ----------------------------------------------

async fn restarts(
    bins: &RaftBins,
    root: &Path,
    plan: &RaftPlan,
    rng: &mut Rng,
    report: &mut Report,
) {
    if plan.restart_sizes.is_empty() {
        return;
    }
    if !bins.loader.is_file() {
        report.skipped(
            SEC_RESTART,
            "restart after kill -9",
            format!(
                "no {}: build it with `cargo build --release -p bench --features filedb`",
                bins.loader.display()
            ),
        );
        return;
    }
    for &n in &plan.restart_sizes {
        if let Err(e) = restart_at(bins, root, plan, n, rng, report).await {
            report.error(SEC_RESTART, &format!("at {} objects", human(n)), e);
        }
    }
}

/// Runs the loader on a fresh `data` folder.
pub(crate) async fn load_objects(
    loader: &Path,
    data: &Path,
    count: u64,
    seed: u64,
    limit: Duration,
) -> Result<LoadReport, String> {
    let child = tokio::process::Command::new(loader)
        .arg("--data")
        .arg(data)
        .args(["--count", &count.to_string()])
        .args(["--seed", &seed.to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("{}: {e}", loader.display()))?;
    let out = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .map_err(|_| format!("{}: not done within {limit:?}", loader.display()))?
        .map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(objects_report::JSON_PREFIX))
        .and_then(|j| serde_json::from_str(j).ok())
        .filter(|_| out.status.success())
        .ok_or_else(|| {
            format!(
                "{} exited with {}: {}",
                loader.display(),
                out.status,
                stdout.trim()
            )
        })
}

/// 200 to a HEAD of `key` (a loaded object has no content file: GET would fail, HEAD
/// reads only the index).
pub(crate) async fn head_ok(c: &Client, key: &str) -> Result<(), String> {
    c.send_ok(
        Method::HEAD,
        &format!("/{LOADED_BUCKET}/{key}"),
        &[],
        Bytes::new(),
        false,
    )
    .await
    .map(|_| ())
}

fn restart_body(seed: u64, i: usize) -> Bytes {
    Bytes::from(Rng::new(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).bytes(RESTART_BODY))
}

fn restart_key(i: usize) -> String {
    format!("w/{i:07}")
}

/// What the write load saw up to the kill.
struct KillResult {
    acked: Vec<usize>,
    sent: usize,
    errors: u64,
    /// From the first PUT to the kill.
    writing: Duration,
}

/// 4 KiB PUTs on `RESTART_CONC` connections until `target` are acknowledged and
/// [`RESTART_WRITE_MIN`] has passed, then `kill -9` of the server while PUTs are still in
/// flight.
async fn write_then_kill(
    s3: &Client,
    server: &mut Server,
    target: usize,
    seed: u64,
) -> Result<KillResult, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    let started = Instant::now();
    for _ in 0..RESTART_CONC {
        let (stop, next, errors, acked, c) = (
            stop.clone(),
            next.clone(),
            errors.clone(),
            acked.clone(),
            s3.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let key = restart_key(i);
                let put = c.put_object(LOADED_BUCKET, &key, restart_body(seed, i));
                match tokio::time::timeout(Duration::from_secs(10), put).await {
                    Ok(Ok(_)) => {
                        if let Ok(mut a) = acked.lock() {
                            a.push(i);
                        }
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::SeqCst);
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let count = || acked.lock().map(|a| a.len()).unwrap_or(0);
    while (count() < target || started.elapsed() < RESTART_WRITE_MIN) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let reached = count();
    let sent_at_kill = next.load(Ordering::SeqCst);
    tokio::task::block_in_place(|| server.kill9());
    let writing = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        // Each task ends at its next request (refused at once) or its 10 s timeout.
        let _ = tokio::time::timeout(Duration::from_secs(15), t).await;
    }
    if reached < target {
        return Err(format!(
            "only {reached} of {target} PUTs acknowledged within 120 s ({} errors)",
            errors.load(Ordering::SeqCst)
        ));
    }
    let acked = acked.lock().map(|a| a.clone()).unwrap_or_default();
    Ok(KillResult {
        acked,
        sent: sent_at_kill,
        errors: errors.load(Ordering::SeqCst),
        writing,
    })
}

/// GETs `key` until it answers whole, from the moment the process was started; takes the
/// server out of `spawn` once it prints `listening on`. Bounded: 60 s after that line (the
/// start itself is bounded by the launch's own timeout).
async fn poll_get(
    c: &Client,
    key: &str,
    spawn: &mut Option<tokio::task::JoinHandle<Result<(Server, Instant), String>>>,
    server: &mut Option<Server>,
    listening: &mut Option<Instant>,
) -> Result<Instant, String> {
    let mut last_err: String;
    loop {
        if spawn.as_ref().is_some_and(|h| h.is_finished())
            && let Some(h) = spawn.take()
        {
            let (s, at) = h.await.map_err(|e| format!("restart: {e}"))??;
            *server = Some(s);
            *listening = Some(at);
        }
        let get = c.get_object(LOADED_BUCKET, key);
        match tokio::time::timeout(Duration::from_secs(5), get).await {
            Ok(Ok(len)) if len == RESTART_BODY as u64 => return Ok(Instant::now()),
            Ok(Ok(len)) => return Err(format!("GET {key}: {len} bytes")),
            Ok(Err(e)) => last_err = e,
            Err(_) => last_err = "no answer within 5 s".into(),
        }
        if listening.is_some_and(|at| at.elapsed() > Duration::from_secs(60)) {
            return Err(format!(
                "serving for 60 s after the restart, but GET {key} fails: {last_err}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn restart_at(
    bins: &RaftBins,
    root: &Path,
    plan: &RaftPlan,
    n: u64,
    rng: &mut Rng,
    report: &mut Report,
) -> Result<(), String> {
    let dir = tempfile::Builder::new()
        .prefix("bench-restart-")
        .tempdir_in(root)
        .map_err(|e| format!("temp folder in {}: {e}", root.display()))?;
    let data = dir.path().join("data");
    progress(&format!(
        "raft restart: loading {} objects offline",
        human(n)
    ));
    let load = load_objects(&bins.loader, &data, n, rng.next_u64(), plan.load_limit).await?;
    let secrets = Secrets::random(rng);
    let port = free_port()?;
    let launch = GatewayLaunch {
        listen: ([127, 0, 0, 1], port).into(),
        start_timeout: plan.load_limit,
        ..GatewayLaunch::single(
            &bins.gateway,
            &data,
            &secrets,
            &dir.path().join("gateway.log"),
        )
    };
    // First start: the folder has the layout of a gateway from before replication, so the
    // node puts every table in a snapshot before it serves.
    progress(&format!(
        "raft restart: first start on {} objects",
        human(n)
    ));
    let t = Instant::now();
    let mut server = tokio::task::block_in_place(|| spawn_gateway(&launch))?;
    let first_start = t.elapsed();
    let s3 = Client::new(
        server.addr,
        Some((&secrets.access, &secrets.secret)),
        "us-east-1",
    );
    head_ok(&s3, &loaded_key(0)).await?;
    head_ok(&s3, &loaded_key(n - 1)).await?;
    let seed = rng.next_u64();
    progress(&format!(
        "raft restart: 4 KiB PUTs (at least {} and {:?}), then kill -9",
        plan.restart_puts, RESTART_WRITE_MIN
    ));
    let killed = write_then_kill(&s3, &mut server, plan.restart_puts, seed).await?;
    drop(server);
    let last = *killed.acked.last().ok_or("no PUT acknowledged")?;
    // Restart: time to `listening on` (stdout), and to the first GET of the last object
    // acknowledged before the kill, polled from the moment the process is started.
    progress(&format!("raft restart: restarting on {} objects", human(n)));
    let t0 = Instant::now();
    let l2 = launch.clone();
    let mut spawn = Some(tokio::task::spawn_blocking(move || {
        spawn_gateway(&l2).map(|s| (s, Instant::now()))
    }));
    let fresh = Client::new(
        launch.listen,
        Some((&secrets.access, &secrets.secret)),
        "us-east-1",
    );
    let mut server: Option<Server> = None;
    let mut listening: Option<Instant> = None;
    let polled = poll_get(
        &fresh,
        &restart_key(last),
        &mut spawn,
        &mut server,
        &mut listening,
    )
    .await;
    // The process is reaped (or kept) whatever the poll's outcome.
    if let Some(h) = spawn.take() {
        let (s, at) = h.await.map_err(|e| format!("restart: {e}"))??;
        server = Some(s);
        listening = Some(at);
    }
    let got = polled?;
    let _server = server;
    let to_listen = listening.map(|at| at - t0).unwrap_or_default();
    let to_get = got - t0;
    // Every acknowledged PUT survived; the loaded objects are there.
    let keys = Arc::new(killed.acked.clone());
    let c = fresh.clone();
    let check = load::run(16, keys.len(), Duration::from_secs(120), move |i| {
        let (c, key) = (c.clone(), restart_key(keys[i]));
        async move {
            let n = c.get_object(LOADED_BUCKET, &key).await?;
            if n != RESTART_BODY as u64 {
                return Err(format!("GET {key}: {n} bytes"));
            }
            Ok(n)
        }
    })
    .await;
    head_ok(&fresh, &loaded_key(0)).await?;
    head_ok(&fresh, &loaded_key(n - 1)).await?;
    let size = human(n);
    report.info(
        SEC_RESTART,
        &format!("restart after kill -9 mid-write at {size} objects"),
        format!(
            "`listening on` after {}; first GET of the last acknowledged object after {}",
            secs(to_listen),
            secs(to_get)
        ),
    );
    report.info(
        SEC_RESTART,
        &format!("{size} objects: the folder and the kill"),
        format!(
            "{} objects / {} contents loaded offline in {} ({:.0}/s, {} per transaction); meta.redb {} (allocated {}); first start on it {} (pre-replication layout: snapshot of every table); killed after {} of writing: {} acknowledged 4 KiB PUTs, {} sent",
            load.objects,
            load.contents,
            secs(Duration::from_secs_f64(load.load_secs)),
            load.objects as f64 / load.load_secs.max(1e-9),
            load.batch,
            bytes(load.file_bytes),
            bytes(load.allocated_bytes),
            secs(first_start),
            secs(killed.writing),
            killed.acked.len(),
            killed.sent,
        ),
    );
    let lost = check.errors;
    report.push(Row {
        section: SEC_RESTART.into(),
        figure: format!("{size} objects: acknowledged PUTs lost by kill -9"),
        measured: format!(
            "{lost} of {} ({} failed PUTs around the kill, not acknowledged){}",
            killed.acked.len(),
            killed.errors,
            check
                .first_error
                .as_ref()
                .map(|e| format!("; first: {e}"))
                .unwrap_or_default()
        ),
        compared_with: "0".into(),
        target: "= 0".into(),
        status: if lost == 0 && check.ops as usize == killed.acked.len() {
            "MET"
        } else {
            "NOT MET"
        }
        .into(),
        ..Row::default()
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human(10_000_000), "10 M");
        assert_eq!(human(10_000), "10 k");
        assert_eq!(human(1234), "1234");
    }

    #[test]
    fn incdec_rate_counts_both_operations() {
        let o = |ops, ms| Outcome {
            ops,
            wall: Duration::from_millis(ms),
            ..Outcome::default()
        };
        let r = Round {
            put: o(1, 1),
            inc: o(1000, 500),
            dec: o(1000, 500),
        };
        assert!((r.incdec_rate() - 2000.0).abs() < 1e-6);
    }
}
