//! The `jobs` workload: what a delete-prefix job over a whole mailbox costs the foreground
//! (issue 12's target: 64 KiB GET/PUT p99 grows by at most 20 % while it runs), and how
//! fast the job goes.
//!
//! N objects (100 000 in the full run) are loaded under one prefix as dedup hits of one
//! small body, so the load costs metadata only. The foreground is a mixed 64 KiB load on
//! 32 connections (even requests PUT a fresh body, odd ones GET one of a fixed set), run
//! for a fixed time in three phases: A (no job), B (the job over the N objects started
//! just before), A again. The baseline is both A phases together, so a drift over the run
//! (page cache, redb growth) does not pass for the job's cost.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;

use crate::load;
use crate::report::{Report, Row};
use crate::rng::Rng;
use crate::stats::{Latency, us};
use crate::workloads::{self, BUCKET, Gw};

/// Foreground connections, as the 64 KiB workload.
const CONC: usize = 32;
/// Foreground body size.
const BODY: usize = 64 << 10;
/// Objects the foreground GETs read (written before the phases).
const GET_SET: usize = 256;
/// Connections loading the mailbox.
const LOAD_CONC: usize = 32;
/// Foreground p99 with the job over without it: at most this.
pub const P99_RATIO_MAX: f64 = 1.20;
/// Polls of the job's state.
const POLL: Duration = Duration::from_millis(100);

/// How much the workload does.
#[derive(Clone, Copy, Debug)]
pub struct JobsPlan {
    /// Objects under the prefix the job deletes.
    pub objects: usize,
    /// Length of each foreground phase.
    pub phase: Duration,
    /// Bound on the load and on the job's run.
    pub limit: Duration,
}

impl JobsPlan {
    /// A few thousand objects and 2 s phases in `--quick`; 100 000 and 5 s otherwise.
    pub fn new(quick: bool) -> JobsPlan {
        if quick {
            JobsPlan {
                objects: 3_000,
                phase: Duration::from_secs(2),
                limit: Duration::from_secs(60),
            }
        } else {
            JobsPlan {
                objects: 100_000,
                phase: Duration::from_secs(5),
                limit: Duration::from_secs(600),
            }
        }
    }
}

/// Foreground latencies of one phase.
#[derive(Clone, Debug, Default)]
struct Phase {
    put_us: Vec<u64>,
    get_us: Vec<u64>,
    errors: u64,
    first_error: Option<String>,
}

impl Phase {
    fn merge(mut self, other: Phase) -> Phase {
        self.put_us.extend(other.put_us);
        self.get_us.extend(other.get_us);
        self.errors += other.errors;
        self.first_error = self.first_error.or(other.first_error);
        self
    }

    fn check(&self, what: &str) -> Result<(), String> {
        match &self.first_error {
            Some(e) => Err(format!(
                "{what}: {} requests failed; first: {e}",
                self.errors
            )),
            None if self.put_us.is_empty() || self.get_us.is_empty() => {
                Err(format!("{what}: no request completed"))
            }
            None => Ok(()),
        }
    }
}

/// Runs the workload on its own gateway and adds its rows.
pub async fn run(
    gw: &Gw,
    plan: JobsPlan,
    rng: &mut Rng,
    report: &mut Report,
) -> Result<(), String> {
    let sec = "jobs: delete-prefix under foreground load";
    let load = load_mailbox(gw, plan).await?;
    report.info(
        sec,
        &format!(
            "load {} objects under mbox/ ({LOAD_CONC} connections)",
            plan.objects
        ),
        format!("{:.0} PUT/s (dedup hits of one 1 KiB body)", load),
    );
    let bodies = workloads::bodies(rng, GET_SET, BODY);
    let put = workloads::put_all(&gw.s3, BUCKET, "fg-get", &bodies, CONC, plan.limit).await;
    put.check("foreground GET set")?;
    let fresh = workloads::bodies(rng, 64, BODY);

    let a1 = foreground(gw, &fresh, "a1", plan.phase).await;
    a1.check("phase A (no job)")?;
    let started = Instant::now();
    let id = start_job(gw).await?;
    let b = foreground(gw, &fresh, "b", plan.phase).await;
    b.check("phase B (job running)")?;
    let b_end = started.elapsed();
    let (deleted, job_secs) = wait_job(gw, id, started, plan.limit).await?;
    let a2 = foreground(gw, &fresh, "a2", plan.phase).await;
    a2.check("phase A again (no job)")?;
    let base = a1.merge(a2);

    let overlap = (job_secs / b_end.as_secs_f64()).min(1.0);
    for (what, base_us, job_us) in [
        ("PUT", &base.put_us, &b.put_us),
        ("GET", &base.get_us, &b.get_us),
    ] {
        let (base_l, job_l) = (
            Latency::of(&mut base_us.clone()),
            Latency::of(&mut job_us.clone()),
        );
        let ratio = job_l.p99_us as f64 / (base_l.p99_us.max(1)) as f64;
        report.target(
            sec,
            &format!("64 KiB {what} p99 during the job ({CONC} connections, mixed PUT/GET)"),
            format!(
                "p50 {} p99 {} ({} requests)",
                us(job_l.p50_us),
                us(job_l.p99_us),
                job_us.len()
            ),
            format!(
                "without: p50 {} p99 {} ({} requests, before and after)",
                us(base_l.p50_us),
                us(base_l.p99_us),
                base_us.len()
            ),
            ratio,
            "<= 1.20x",
            ratio <= P99_RATIO_MAX,
            String::new(),
        );
    }
    report.push(Row {
        section: sec.into(),
        figure: format!("job over {} objects", plan.objects),
        measured: format!(
            "{:.0} objects/s ({deleted} deleted in {job_secs:.1} s; default pace)",
            deleted as f64 / job_secs.max(1e-9)
        ),
        ..Row::default()
    });
    if overlap < 1.0 {
        report.note(format!(
            "jobs: the job ended {:.0} % of the way through phase B: the rest of B ran without it",
            overlap * 100.0
        ));
    }
    Ok(())
}

/// PUTs `plan.objects` keys `mbox/NNNNNNN`, all the same 1 KiB body; PUTs per second.
async fn load_mailbox(gw: &Gw, plan: JobsPlan) -> Result<f64, String> {
    let body = Bytes::from(vec![b'm'; 1024]);
    let c = gw.s3.clone();
    let out = load::run(LOAD_CONC, plan.objects, plan.limit, move |i| {
        let (c, body) = (c.clone(), body.clone());
        async move { c.put_object(BUCKET, &format!("mbox/{i:07}"), body).await }
    })
    .await;
    out.check("loading the mailbox")?;
    if out.truncated {
        return Err(format!(
            "loading the mailbox: {} of {} objects in {:?}",
            out.ops, plan.objects, plan.limit
        ));
    }
    Ok(out.ops_per_sec())
}

/// The mixed foreground for `phase`: even requests PUT `fresh[i]` under a new key, odd
/// ones GET one of the GET set.
async fn foreground(gw: &Gw, fresh: &Arc<Vec<Bytes>>, tag: &str, phase: Duration) -> Phase {
    let samples = Arc::new(Mutex::new(Phase::default()));
    let (c, s, f, tag) = (
        gw.s3.clone(),
        Arc::clone(&samples),
        Arc::clone(fresh),
        tag.to_string(),
    );
    // A count no phase reaches: the time bound ends it. The outcome's single latency
    // mixes PUT and GET; the samples above keep them apart.
    load::run(CONC, usize::MAX / 2, phase, move |i| {
        let (c, s, f, tag) = (c.clone(), Arc::clone(&s), Arc::clone(&f), tag.clone());
        async move {
            let t = Instant::now();
            let r = if i % 2 == 0 {
                c.put_object(
                    BUCKET,
                    &format!("fg-{tag}/{i:08}"),
                    f[i / 2 % f.len()].clone(),
                )
                .await
            } else {
                c.get_object(BUCKET, &format!("fg-get/{:07}", i / 2 % GET_SET))
                    .await
            };
            let took = t.elapsed().as_micros() as u64;
            if let Ok(mut p) = s.lock() {
                match (&r, i % 2 == 0) {
                    (Ok(_), true) => p.put_us.push(took),
                    (Ok(_), false) => p.get_us.push(took),
                    (Err(e), _) => {
                        p.errors += 1;
                        p.first_error.get_or_insert_with(|| e.clone());
                    }
                }
            }
            r
        }
    })
    .await;
    samples.lock().map(|p| p.clone()).unwrap_or_default()
}

async fn start_job(gw: &Gw) -> Result<u64, String> {
    let admin = gw.s3.with_bearer(&gw.secrets.admin);
    let body = r#"{"op":"delete-prefix","bucket":"bench","prefix":"mbox/"}"#;
    let r = admin
        .send_ok(
            Method::POST,
            "/_admin/jobs",
            &[("content-type", "application/json")],
            Bytes::from_static(body.as_bytes()),
            true,
        )
        .await?;
    let v: serde_json::Value =
        serde_json::from_slice(&r.head).map_err(|e| format!("the new job's JSON: {e}"))?;
    v.get("id")
        .and_then(|i| i.as_u64())
        .ok_or_else(|| format!("the new job has no id: {v}"))
}

/// Polls the job until it is done; (objects deleted, seconds since `started`).
async fn wait_job(
    gw: &Gw,
    id: u64,
    started: Instant,
    limit: Duration,
) -> Result<(u64, f64), String> {
    let admin = gw.s3.with_bearer(&gw.secrets.admin);
    let mut last = Instant::now();
    // Bounded by `limit`.
    loop {
        let r = admin
            .send_ok(
                Method::GET,
                &format!("/_admin/jobs/{id}"),
                &[],
                Bytes::new(),
                true,
            )
            .await?;
        let v: serde_json::Value =
            serde_json::from_slice(&r.head).map_err(|e| format!("job {id} JSON: {e}"))?;
        match v.get("state").and_then(|s| s.as_str()) {
            Some("running") => {}
            Some("done") => {
                let deleted = v.get("deleted").and_then(|d| d.as_u64()).unwrap_or(0);
                // The job ended between the previous poll and this one.
                let secs = (last.duration_since(started) + POLL / 2).as_secs_f64();
                return Ok((deleted, secs));
            }
            other => return Err(format!("job {id} ended {other:?}: {v}")),
        }
        if started.elapsed() > limit {
            return Err(format!("job {id} still running after {limit:?}"));
        }
        last = Instant::now();
        tokio::time::sleep(POLL).await;
    }
}
