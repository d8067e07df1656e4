//! A versioned bucket against an unversioned one (`--only versioning`): the same gateway
//! binary started twice per round on fresh filesystems, one bucket with versioning
//! Enabled (after its creation) and one without, both running 64 KiB PUT and GET (32
//! connections) with the same bodies, in interleaved rounds (see [`crate::ab`]). A
//! versioned PUT reads the bucket's state and writes a stamp beside the record; a GET reads
//! the state for its `x-amz-version-id`. The target: within 10 % of unversioned.

use std::path::Path;

use bytes::Bytes;
use http::Method;

use crate::ab;
use crate::compare::{ComparePlan, Op};
use crate::report::Report;
use crate::rng::Rng;
use crate::scratch::Scratches;
use crate::workloads::{self, BUCKET, Gw};

pub const SEC: &str = "versioned bucket against unversioned (interleaved rounds)";
/// Versioned at least this fraction of unversioned, on each operation.
const MIN_RATIO: f64 = 0.9;
const OPS: [Op; 2] = [Op::Put64, Op::Get64];
const ENABLE: &[u8] =
    b"<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>";

struct VersioningSetups<'a> {
    bin: &'a Path,
    scratches: &'a Scratches,
}

impl ab::Setups for VersioningSetups<'_> {
    const LABELS: [&'static str; 2] = ["unversioned", "versioned"];

    async fn start(&mut self, which: usize, seed: u64) -> Result<Gw, String> {
        let dir = self.scratches.fresh(&format!("gw-versioning-{which}"))?;
        let mut rng = Rng::new(seed);
        let gw = tokio::task::block_in_place(|| Gw::start_in(self.bin, dir, &[], &mut rng))?;
        workloads::warm_up(&gw.s3, BUCKET, true).await?;
        if which == 1 {
            gw.s3
                .send_ok(
                    Method::PUT,
                    &format!("/{BUCKET}?versioning"),
                    &[],
                    Bytes::from_static(ENABLE),
                    false,
                )
                .await?;
        }
        Ok(gw)
    }
}

pub async fn run(
    bin: &Path,
    scratches: &Scratches,
    plan: &ComparePlan,
    rng: &mut Rng,
    report: &mut Report,
) {
    let mut setups = VersioningSetups { bin, scratches };
    let targets = OPS.map(|op| ab::Target { op, min: MIN_RATIO });
    ab::run(&mut setups, &OPS, SEC, &targets, plan, rng, report).await;
}
