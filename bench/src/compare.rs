//! The side-by-side comparison (issue #11): the same PUT/GET workloads against the
//! gateway, a second gateway build (`--gateway-b`, the before of a write-path change), the
//! peers (s3s-fs, garage at their defaults; garage with fsync as an extra row) and the
//! gateway with SHA-1 collision detection off (issue #13's cost row: its 8 MiB PUT only).
//!
//! A shared 2-core machine drifts by tens of percent within minutes, so the servers run
//! in interleaved rounds (round 1: gateway, gateway B, peer A, peer B, ...; round 2: ...),
//! each on a fresh filesystem (see [`crate::scratch`]), with the same bodies in a round;
//! the report gives the median and range (min-max) over the rounds per server, and ratios
//! of medians with the per-round ratios beside them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::load::Outcome;
use crate::procs::{self, Peer};
use crate::report::{Report, Row, fmt_ratio};
use crate::rng::Rng;
use crate::s3::Client;
use crate::scratch::{Scratch, Scratches};
use crate::stats::{med_range, median, us};
use crate::workloads::{self, BUCKET, Gw};

pub const SEC: &str = "side by side (interleaved rounds)";
const SMALL: usize = 64 << 10;
const BIG: usize = 8 << 20;
const SMALL_CONC: usize = 32;
const BIG_CONC: usize = 4;

/// The targets of issue #11 (ratios in one run, against the peers at their defaults).
const SMALL_PUT_VS_BEST_PEER_MIN: f64 = 1.5;
const DUP_VS_UNIQUE_MIN: f64 = 2.0;
const BIG_PUT_VS_BEST_PEER_MIN: f64 = 1.0;
const GET_VS_BEFORE_MIN: f64 = 0.95;

/// One workload of a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Put64,
    Get64,
    Dup64,
    Put8,
    Get8,
}

impl Op {
    /// In the order a round runs them (a GET reads what the PUT before it wrote; the
    /// duplicate PUT sends the unique PUT's bodies again under new keys).
    pub const ALL: [Op; 5] = [Op::Put64, Op::Get64, Op::Dup64, Op::Put8, Op::Get8];

    pub fn label(self) -> &'static str {
        match self {
            Op::Put64 => "64 KiB unique PUT, 32 conns",
            Op::Get64 => "64 KiB GET, 32 conns",
            Op::Dup64 => "64 KiB duplicate PUT, 32 conns",
            Op::Put8 => "8 MiB unique PUT, 4 conns",
            Op::Get8 => "8 MiB GET, 4 conns",
        }
    }

    pub fn index(self) -> usize {
        Op::ALL.iter().position(|&o| o == self).unwrap_or(0)
    }

    /// ops/s for the small bodies, MB/s for the large ones (what each is quoted in).
    pub fn rate(self, o: &Outcome) -> f64 {
        match self {
            Op::Put64 | Op::Get64 | Op::Dup64 => o.ops_per_sec(),
            Op::Put8 | Op::Get8 => o.bytes_per_sec() / 1e6,
        }
    }

    pub fn unit(self) -> &'static str {
        match self {
            Op::Put64 | Op::Get64 | Op::Dup64 => "ops/s",
            Op::Put8 | Op::Get8 => "MB/s",
        }
    }
}

/// What a server is, and how to start it.
#[derive(Clone, Debug)]
pub enum Kind {
    /// `gateway serve` with these extra flags.
    Gateway {
        bin: PathBuf,
        args: Vec<String>,
    },
    S3sFs {
        bin: PathBuf,
    },
    Garage {
        bin: PathBuf,
        fsync: bool,
    },
}

/// One server of the comparison.
#[derive(Clone, Debug)]
pub struct Contender {
    pub label: String,
    pub kind: Kind,
    /// The workloads it runs each round.
    pub ops: Vec<Op>,
    pub role: Role,
}

/// What the ratios compare it with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The gateway under test: every ratio is against it.
    Gateway,
    /// A second gateway build: ratio gateway B / gateway.
    GatewayB,
    /// A peer at its defaults: in the targets' "best peer".
    Peer,
    /// A peer with non-default settings: ratio only, no target.
    PeerExtra,
    /// The gateway with SHA-1 collision detection off: ratio of its 8 MiB PUT.
    NoDetection,
}

/// How much each round does.
#[derive(Clone, Debug)]
pub struct ComparePlan {
    pub rounds: usize,
    pub small_count: usize,
    pub big_count: usize,
    /// Bound on each workload (it stops early and says so).
    pub limit: Duration,
}

/// A server started for one round, stopped before its filesystem goes.
struct Running {
    client: Client,
    needs_bucket: bool,
    setup: String,
    // Field order is drop order: the process first, then its folder.
    _gw: Option<Gw>,
    _peer: Option<Peer>,
    _dir: Option<Scratch>,
}

async fn start(c: &Contender, dir: Scratch, seed: u64) -> Result<Running, String> {
    let mut rng = Rng::new(seed);
    match &c.kind {
        Kind::Gateway { bin, args } => {
            let gw = tokio::task::block_in_place(|| Gw::start_in(bin, dir, args, &mut rng))?;
            Ok(Running {
                client: gw.s3.clone(),
                needs_bucket: true,
                setup: format!("{}: {} {}", c.label, bin.display(), args.join(" ")),
                _gw: Some(gw),
                _peer: None,
                _dir: None,
            })
        }
        Kind::S3sFs { bin } => {
            let p = tokio::task::block_in_place(|| procs::start_s3s_fs(bin, dir.path(), &mut rng))?;
            Ok(peer_running(p, dir))
        }
        Kind::Garage { bin, fsync } => {
            let p = tokio::task::block_in_place(|| {
                procs::start_garage(bin, dir.path(), BUCKET, *fsync, &mut rng)
            })?;
            Ok(peer_running(p, dir))
        }
    }
}

fn peer_running(p: Peer, dir: Scratch) -> Running {
    Running {
        client: Client::new(p.server.addr, Some((&p.access, &p.secret)), "us-east-1"),
        needs_bucket: p.needs_create_bucket,
        setup: p.setup.clone(),
        _gw: None,
        _peer: Some(p),
        _dir: Some(dir),
    }
}

/// One server's round: its outcomes by [`Op::index`].
pub type RoundOut = [Option<Outcome>; 5];

/// The bodies of one round, the same for every server.
pub struct Bodies {
    pub small: Arc<Vec<Bytes>>,
    pub big: Arc<Vec<Bytes>>,
}

impl Bodies {
    /// `plan.small_count` 64 KiB and `plan.big_count` 8 MiB bodies.
    pub fn new(rng: &mut Rng, plan: &ComparePlan) -> Bodies {
        Bodies {
            small: workloads::bodies(rng, plan.small_count, SMALL),
            big: workloads::bodies(rng, plan.big_count, BIG),
        }
    }
}

async fn round(
    c: &Contender,
    scratches: &Scratches,
    bodies: &Bodies,
    plan: &ComparePlan,
    seed: u64,
) -> Result<(RoundOut, String), String> {
    let tag = c.label.replace(|ch: char| !ch.is_ascii_alphanumeric(), "-");
    let dir = scratches.fresh(&tag)?;
    let run = start(c, dir, seed).await?;
    workloads::warm_up(&run.client, BUCKET, run.needs_bucket).await?;
    let out = run_ops(&run.client, &c.ops, bodies, plan).await?;
    Ok((out, run.setup.clone()))
}

/// Runs `ops` (in [`Op::ALL`]'s order) against a server that has the bucket.
pub async fn run_ops(
    cl: &Client,
    ops: &[Op],
    bodies: &Bodies,
    plan: &ComparePlan,
) -> Result<RoundOut, String> {
    let mut out: RoundOut = Default::default();
    let mut small_stored = 0usize;
    let mut big_stored = 0usize;
    for op in Op::ALL {
        if !ops.contains(&op) {
            continue;
        }
        let o = match op {
            Op::Put64 => {
                let o =
                    workloads::put_all(cl, BUCKET, "u64k", &bodies.small, SMALL_CONC, plan.limit)
                        .await;
                small_stored = o.ops as usize;
                o
            }
            Op::Get64 => {
                workloads::get_all(
                    cl,
                    BUCKET,
                    "u64k",
                    small_stored,
                    SMALL as u64,
                    SMALL_CONC,
                    plan.limit,
                )
                .await
            }
            Op::Dup64 => {
                let again = Arc::new(bodies.small[..small_stored].to_vec());
                workloads::put_all(cl, BUCKET, "d64k", &again, SMALL_CONC, plan.limit).await
            }
            Op::Put8 => {
                let o =
                    workloads::put_all(cl, BUCKET, "u8m", &bodies.big, BIG_CONC, plan.limit).await;
                big_stored = o.ops as usize;
                o
            }
            Op::Get8 => {
                workloads::get_all(
                    cl, BUCKET, "u8m", big_stored, BIG as u64, BIG_CONC, plan.limit,
                )
                .await
            }
        };
        o.check(op.label())?;
        if o.ops == 0 {
            return Err(format!("{}: nothing done", op.label()));
        }
        out[op.index()] = Some(o);
    }
    Ok(out)
}

fn progress(msg: &str) {
    eprintln!("bench: {msg}");
}

/// Runs every contender in `plan.rounds` interleaved rounds and reports.
pub async fn run(
    contenders: &[Contender],
    scratches: &Scratches,
    plan: &ComparePlan,
    rng: &mut Rng,
    report: &mut Report,
) {
    // results[contender][round]
    let mut results: Vec<Vec<Option<RoundOut>>> = contenders.iter().map(|_| Vec::new()).collect();
    let mut setups: Vec<Option<String>> = contenders.iter().map(|_| None).collect();
    for r in 0..plan.rounds {
        let bodies = Bodies::new(rng, plan);
        let seed = rng.next_u64();
        for (k, c) in contenders.iter().enumerate() {
            progress(&format!(
                "side by side, round {}/{}: {}",
                r + 1,
                plan.rounds,
                c.label
            ));
            match round(c, scratches, &bodies, plan, seed).await {
                Ok((out, setup)) => {
                    results[k].push(Some(out));
                    setups[k].get_or_insert(setup);
                }
                Err(e) => {
                    report.error(SEC, &format!("{}, round {}", c.label, r + 1), e);
                    results[k].push(None);
                }
            }
        }
    }
    for (k, c) in contenders.iter().enumerate() {
        if let Some(s) = &setups[k] {
            report.note(format!("side by side, {s}"));
        }
        for op in Op::ALL {
            if c.ops.contains(&op) {
                op_row(report, SEC, &c.label, op, &results[k], plan.rounds);
            }
        }
    }
    ratio_rows(contenders, &results, report);
}

/// The rates of `op` over the rounds that have it (None where a round failed).
pub fn rates(rounds: &[Option<RoundOut>], op: Op) -> Vec<Option<f64>> {
    rounds
        .iter()
        .map(|r| r.as_ref()?[op.index()].as_ref().map(|o| op.rate(o)))
        .collect()
}

/// `label`'s row for `op`: median (min-max) over the rounds of its rate, p50 and p99.
pub fn op_row(
    report: &mut Report,
    section: &str,
    label: &str,
    op: Op,
    rounds: &[Option<RoundOut>],
    planned: usize,
) {
    let outs: Vec<&Outcome> = rounds
        .iter()
        .filter_map(|r| r.as_ref()?[op.index()].as_ref())
        .collect();
    if outs.is_empty() {
        return;
    }
    let rate: Vec<f64> = outs.iter().map(|o| op.rate(o)).collect();
    let p50: Vec<f64> = outs.iter().map(|o| o.latency.p50_us as f64).collect();
    let p99: Vec<f64> = outs.iter().map(|o| o.latency.p99_us as f64).collect();
    let lat = |x: f64| us(x.round() as u64);
    let cut = if outs.iter().any(|o| o.truncated) {
        " [a round hit the time limit]"
    } else {
        ""
    };
    report.push(Row {
        section: section.into(),
        figure: format!("{}: {label}", op.label()),
        measured: format!(
            "{} {}, p50 {}, p99 {} ({} of {planned} rounds; median (min-max)){cut}",
            med_range(&rate, |x| format!("{x:.0}")),
            op.unit(),
            med_range(&p50, lat),
            med_range(&p99, lat),
            outs.len(),
        ),
        client_cpu: median(outs.iter().map(|o| o.client_us_per_op()).collect())
            .map(|x| format!("{x:.0} us"))
            .unwrap_or_default(),
        ..Row::default()
    });
}

/// `a / b` of the medians over the rounds, and each round's own ratio.
pub fn ratio_of(a: &[Option<f64>], b: &[Option<f64>]) -> Option<(f64, f64, f64, String)> {
    let ma = median(a.iter().flatten().copied().collect())?;
    let mb = median(b.iter().flatten().copied().collect())?;
    let per: Vec<String> = a
        .iter()
        .zip(b)
        .filter_map(|(x, y)| Some(fmt_ratio((*x)? / (*y)?.max(1e-9))))
        .collect();
    Some((ma / mb.max(1e-9), ma, mb, per.join(", ")))
}

fn ratio_rows(contenders: &[Contender], results: &[Vec<Option<RoundOut>>], report: &mut Report) {
    let Some(g) = contenders.iter().position(|c| c.role == Role::Gateway) else {
        return;
    };
    let gw = &results[g];
    let plain = |report: &mut Report,
                 figure: String,
                 a: &[Option<f64>],
                 b: &[Option<f64>],
                 op: Op,
                 against: &str| {
        if let Some((r, ma, mb, per)) = ratio_of(a, b) {
            report.push(Row {
                section: SEC.into(),
                figure,
                measured: format!("{ma:.0} vs {mb:.0} {} (per round: {per})", op.unit()),
                compared_with: format!("{against}, median {mb:.0} {}", op.unit()),
                ratio: fmt_ratio(r),
                ..Row::default()
            });
        }
    };
    // gateway / each peer, and gateway B / gateway, for every workload both ran.
    for (k, c) in contenders.iter().enumerate() {
        for op in Op::ALL {
            if !c.ops.contains(&op) || !contenders[g].ops.contains(&op) {
                continue;
            }
            let (a, b) = (rates(gw, op), rates(&results[k], op));
            match c.role {
                Role::Peer | Role::PeerExtra => plain(
                    report,
                    format!("{}: gateway / {}", op.label(), c.label),
                    &a,
                    &b,
                    op,
                    &c.label,
                ),
                Role::GatewayB => plain(
                    report,
                    format!("{}: gateway B / gateway", op.label()),
                    &b,
                    &a,
                    op,
                    "gateway",
                ),
                Role::NoDetection => {
                    if let Some((r, ma, mb, per)) = ratio_of(&a, &b) {
                        report.push(Row {
                            section: SEC.into(),
                            figure: format!(
                                "{}: SHA-1 collision detection on / off (#13)",
                                op.label()
                            ),
                            measured: format!(
                                "{ma:.0} MB/s with detection vs {mb:.0} MB/s without (per round: {per})"
                            ),
                            compared_with: format!("{}, median {mb:.0} MB/s", c.label),
                            ratio: fmt_ratio(r),
                            ..Row::default()
                        });
                    }
                }
                Role::Gateway => {}
            }
        }
    }
    targets(contenders, results, g, report);
}

/// Issue #11's targets, against the best peer at its defaults (by median).
fn targets(
    contenders: &[Contender],
    results: &[Vec<Option<RoundOut>>],
    g: usize,
    report: &mut Report,
) {
    let gw = &results[g];
    let med = |k: usize, op: Op| median(rates(&results[k], op).into_iter().flatten().collect());
    let peers: Vec<usize> = (0..contenders.len())
        .filter(|&k| contenders[k].role == Role::Peer)
        .collect();
    let best = |op: Op| {
        peers
            .iter()
            .filter_map(|&k| Some((k, med(k, op)?)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    };
    for (op, min) in [
        (Op::Put64, SMALL_PUT_VS_BEST_PEER_MIN),
        (Op::Put8, BIG_PUT_VS_BEST_PEER_MIN),
    ] {
        let (Some(ours), Some((k, theirs))) = (med(g, op), best(op)) else {
            continue;
        };
        let r = ours / theirs.max(1e-9);
        let mut measured = format!("{ours:.0} vs {theirs:.0} {}", op.unit());
        let mut ok = r >= min;
        if op == Op::Put64 {
            // ... with a p99 below every peer's (medians over the rounds).
            let p99 = |k: usize| {
                median(
                    results[k]
                        .iter()
                        .filter_map(|r| r.as_ref()?[op.index()].as_ref())
                        .map(|o| o.latency.p99_us as f64)
                        .collect(),
                )
            };
            if let Some(ours) = p99(g) {
                let theirs: Vec<(&str, f64)> = peers
                    .iter()
                    .filter_map(|&k| Some((contenders[k].label.as_str(), p99(k)?)))
                    .collect();
                for (name, p) in &theirs {
                    measured.push_str(&format!(
                        "; p99 {} vs {name} {}",
                        us(ours as u64),
                        us(*p as u64)
                    ));
                }
                let worst_ok = theirs.iter().all(|(_, p)| ours < *p);
                ok = ok && worst_ok;
            }
        }
        report.target(
            SEC,
            &format!("target: {} >= {min:.1}x the best peer", op.label()),
            measured,
            format!("best peer: {}", contenders[k].label),
            r,
            &if op == Op::Put64 {
                format!(">= {min:.2}x, p99 below every peer's")
            } else {
                format!(">= {min:.2}x")
            },
            ok,
            String::new(),
        );
    }
    if let (Some(dup), Some(unique)) = (med(g, Op::Dup64), med(g, Op::Put64)) {
        let r = dup / unique.max(1e-9);
        report.target(
            SEC,
            "target: 64 KiB duplicate PUT >= 2x our unique PUT",
            format!("{dup:.0} vs {unique:.0} ops/s"),
            "gateway, unique PUT".into(),
            r,
            &format!(">= {DUP_VS_UNIQUE_MIN:.2}x"),
            r >= DUP_VS_UNIQUE_MIN,
            String::new(),
        );
    }
    // Reads must not regress: against the before build, when there is one.
    if let Some(b) = contenders.iter().position(|c| c.role == Role::GatewayB) {
        for op in [Op::Get64, Op::Get8] {
            if let Some((r, ma, mb, per)) = ratio_of(&rates(gw, op), &rates(&results[b], op)) {
                report.target(
                    SEC,
                    &format!("target: {} not below gateway B's", op.label()),
                    format!("{ma:.0} vs {mb:.0} {} (per round: {per})", op.unit()),
                    "gateway B".into(),
                    r,
                    &format!(">= {GET_VS_BEFORE_MIN:.2}x"),
                    r >= GET_VS_BEFORE_MIN,
                    String::new(),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_of_medians_and_per_round() {
        let a = [Some(10.0), Some(30.0), Some(20.0)];
        let b = [Some(5.0), None, Some(10.0)];
        let (r, ma, mb, per) = ratio_of(&a, &b).expect("ratio");
        assert_eq!((ma, mb), (20.0, 7.5));
        assert!((r - 20.0 / 7.5).abs() < 1e-9);
        assert_eq!(per, "2.00x, 2.00x");
        assert!(ratio_of(&[None], &b).is_none());
    }
}
