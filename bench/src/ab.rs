//! Two setups of the same gateway binary measured against each other in interleaved rounds
//! (HTTPS against plain HTTP, a versioned bucket against an unversioned one): each round
//! starts both on fresh filesystems with the same bodies, the first setup first in odd
//! rounds and second in even ones, so that a drifting machine weighs on both alike.
//! Reported: median (min-max) over the rounds of each operation and setup, then B / A of
//! the medians with the per-round ratios.

use crate::compare::{Bodies, ComparePlan, Op, RoundOut, op_row, rates, ratio_of, run_ops};
use crate::report::{Report, Row, fmt_ratio};
use crate::rng::Rng;
use crate::workloads::Gw;

/// The two setups: how each is started, and its name in the report. Only this harness
/// implements it, awaiting on its own runtime: no `Send` bound is needed on the future.
#[allow(async_fn_in_trait)]
pub trait Setups {
    /// The names of setup 0 (the baseline) and setup 1.
    const LABELS: [&'static str; 2];

    /// Starts setup `which` (0 or 1) on a fresh filesystem, its bucket created.
    async fn start(&mut self, which: usize, seed: u64) -> Result<Gw, String>;
}

/// A target on one operation's ratio (setup 1 / setup 0): at least `min`.
pub struct Target {
    pub op: Op,
    pub min: f64,
}

/// The rounds, the per-setup rows and the ratio rows of `section`.
pub async fn run<S: Setups>(
    setups: &mut S,
    ops: &[Op],
    section: &str,
    targets: &[Target],
    plan: &ComparePlan,
    rng: &mut Rng,
    report: &mut Report,
) {
    let mut results: [Vec<Option<RoundOut>>; 2] = [Vec::new(), Vec::new()];
    for r in 0..plan.rounds {
        let bodies = Bodies::new(rng, plan);
        let seed = rng.next_u64();
        let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let label = S::LABELS[which];
            eprintln!("bench: {section}, round {}/{}: {label}", r + 1, plan.rounds);
            let out = async {
                let gw = setups.start(which, seed).await?;
                run_ops(&gw.s3, ops, &bodies, plan).await
            };
            match out.await {
                Ok(out) => results[which].push(Some(out)),
                Err(e) => {
                    report.error(section, &format!("{label}, round {}", r + 1), e);
                    results[which].push(None);
                }
            }
        }
    }
    for (which, label) in S::LABELS.iter().enumerate() {
        for &op in ops {
            op_row(report, section, label, op, &results[which], plan.rounds);
        }
    }
    for &op in ops {
        let Some((r, ma, mb, per)) = ratio_of(&rates(&results[1], op), &rates(&results[0], op))
        else {
            continue;
        };
        let [a, b] = S::LABELS;
        let figure = format!("{}: {b} / {a}", op.label());
        let measured = format!("{ma:.0} vs {mb:.0} {} (per round: {per})", op.unit());
        let compared_with = format!("{a}, median {mb:.0} {}", op.unit());
        match targets.iter().find(|t| t.op == op) {
            Some(t) => report.target(
                section,
                &figure,
                measured,
                compared_with,
                r,
                &format!(">= {:.2}x", t.min),
                r >= t.min,
                String::new(),
            ),
            _ => report.push(Row {
                section: section.into(),
                figure,
                measured,
                compared_with,
                ratio: fmt_ratio(r),
                ..Row::default()
            }),
        }
    }
}
