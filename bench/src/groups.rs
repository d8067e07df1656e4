//! The `groups-split` workload: the splits of an index group holding N objects (1 M in the
//! full run) and of a FileDB group holding their N/2 contents while they serve, issue #28's
//! figure: how long each split takes to its commit and to the end of its clean-up, the
//! foreground's latency before, during and after it, and the pause, the slowest write to
//! what moves.
//!
//! The N objects are loaded offline (`load-objects`, as the restart figure's folders) into
//! a single node's fresh data folder, so root holds them all. For each split the foreground
//! runs on [`CONC`] connections from before the split to a while after its commit: each
//! request is a HEAD of a random loaded object or a 4 KiB PUT of a new key beside one and
//! of a new body, about half of them in what moves (the keys after the middle loaded key;
//! the contents whose SHA-1 is at or past 0x80). The split is `POST /_admin/groups/split`
//! of root's keys at that key, then of root's sha1 interval at 0x80...; its commit is the
//! first `GET /_admin/groups` with the planned map's version. The clean-up (root dropping
//! the rows it handed off) ends when root's record count stops falling, the foreground
//! stopped. Every acknowledged PUT and a sample of the loaded objects are read back
//! afterwards; any failed request is an error of the workload, never a figure.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;
use sha1::Digest as _;

use crate::objects_report::{LOADED_BUCKET, loaded_key};
use crate::raft::{head_ok, human, load_objects, progress};
use crate::report::Report;
use crate::rng::Rng;
use crate::s3::Client;
use crate::scratch::Scratches;
use crate::stats::{Latency, us};
use crate::workloads::Gw;

/// The section of the report.
pub const SEC: &str = "group split while serving";
/// Foreground connections.
const CONC: usize = 16;
/// Foreground PUT body.
const BODY: usize = 4 << 10;
/// Bound on one foreground request: a request slower than this is an error.
const REQUEST_MAX: Duration = Duration::from_secs(30);
/// Polls of `GET /_admin/groups`.
const POLL: Duration = Duration::from_millis(50);
/// Root's record count unchanged this long, the foreground stopped: the clean-up is over.
const SETTLED: Duration = Duration::from_secs(2);
/// The gateway's log line at a split's commit, with the hand-off's length (`ms=`).
const WINDOW_LINE: &str = "writes of the intervals a split moved waited this long at most";
/// Lines of the gateway's log searched for it (its request lines come after).
const LOG_LINES: usize = 100_000;
/// Loaded objects read back after the run.
const CHECK_SAMPLE: u64 = 2_000;

/// How much the workload does.
#[derive(Clone, Copy, Debug)]
pub struct SplitPlan {
    pub objects: u64,
    /// Foreground before the split, and after its commit.
    pub before: Duration,
    pub after: Duration,
    /// Bound on the split (to its commit) and on its clean-up, each.
    pub limit: Duration,
    /// Bound on the offline load and the first start.
    pub load_limit: Duration,
}

impl SplitPlan {
    /// 50 000 objects in `--quick`; 1 M otherwise.
    pub fn new(quick: bool) -> SplitPlan {
        if quick {
            SplitPlan {
                objects: 50_000,
                before: Duration::from_secs(2),
                after: Duration::from_secs(2),
                limit: Duration::from_secs(120),
                load_limit: Duration::from_secs(120),
            }
        } else {
            SplitPlan {
                objects: 1_000_000,
                before: Duration::from_secs(5),
                after: Duration::from_secs(5),
                limit: Duration::from_secs(900),
                load_limit: Duration::from_secs(900),
            }
        }
    }
}

/// What a split moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Root's keys from the middle loaded key on, to a new index group.
    Index,
    /// Root's sha1 interval from 0x80 on, to a new FileDB group.
    Filedb,
}

impl Kind {
    /// Its name in the report, and the kind of group it makes as `/_admin/groups` says.
    fn name(self) -> &'static str {
        match self {
            Kind::Index => "index",
            Kind::Filedb => "filedb",
        }
    }
}

/// The first sha1 the FileDB split gives away.
const FILEDB_AT: &str = "8000000000000000000000000000000000000000";

/// One foreground request.
#[derive(Clone, Copy, Debug)]
struct Sample {
    /// Its start and end, from the run's start.
    start: Duration,
    end: Duration,
    put: bool,
    /// Whether its key is in the interval that moves.
    moving: bool,
}

/// `GET /_admin/groups`, the fields the `groups-*` workloads read.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct Groups {
    pub version: u64,
    pub groups: Vec<GroupRow>,
}

#[derive(Debug, serde::Deserialize)]
pub(crate) struct GroupRow {
    pub id: u64,
    pub kind: String,
    pub held: bool,
    pub records: u64,
    pub lag: u64,
    pub replicas: Vec<u64>,
}

/// `POST /_admin/groups/split`'s answer.
#[derive(Debug, serde::Deserialize)]
struct Planned {
    version: u64,
    group: u64,
}

/// Runs the workload; a failure is reported as the section's error.
pub async fn run(
    gateway: &Path,
    loader: &Path,
    scratches: &Scratches,
    plan: SplitPlan,
    rng: &mut Rng,
    report: &mut Report,
) {
    if let Err(e) = split_under_load(gateway, loader, scratches, plan, rng, report).await {
        report.error(SEC, &format!("{} objects", human(plan.objects)), e);
    }
}

async fn split_under_load(
    gateway: &Path,
    loader: &Path,
    scratches: &Scratches,
    plan: SplitPlan,
    rng: &mut Rng,
    report: &mut Report,
) -> Result<(), String> {
    let n = plan.objects.max(2);
    let dir = scratches.fresh("groups-split")?;
    progress(&format!(
        "groups-split: loading {} objects offline",
        human(n)
    ));
    let load = load_objects(
        loader,
        &dir.path().join("data"),
        n,
        rng.next_u64(),
        plan.load_limit,
    )
    .await?;
    let gw = tokio::task::block_in_place(|| Gw::start_in(gateway, dir, &[], rng))?;
    let sec = format!("{SEC} ({} objects, 1 node)", human(n));
    report.info(
        &sec,
        "the folder",
        format!(
            "{} objects / {} contents loaded offline in {:.1} s, all in root",
            load.objects, load.contents, load.load_secs,
        ),
    );
    for kind in [Kind::Index, Kind::Filedb] {
        measure(&gw, kind, n, plan, rng, report, &sec).await?;
    }
    Ok(())
}

/// One split of root, `kind`, under the foreground; its rows in `report`.
async fn measure(
    gw: &Gw,
    kind: Kind,
    n: u64,
    plan: SplitPlan,
    rng: &mut Rng,
    report: &mut Report,
    sec: &str,
) -> Result<(), String> {
    let admin = gw.s3.with_bearer(&gw.secrets.admin);
    let root_before = root_records(&groups(&admin).await?)?;
    let at = loaded_key(n / 2);

    // The foreground, from before the split to a while after its commit.
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(Mutex::new(Vec::new()));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let failed = Arc::new(Mutex::new(Vec::<String>::new()));
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::with_capacity(CONC);
    for c in 0..CONC {
        let fg = Foreground {
            s3: gw.s3.clone(),
            n,
            at: at.clone(),
            kind,
            t0,
            seed: rng.next_u64() ^ c as u64,
            stop: stop.clone(),
            samples: samples.clone(),
            acked: acked.clone(),
            failed: failed.clone(),
            next: next.clone(),
        };
        tasks.push(tokio::spawn(fg.run()));
    }
    tokio::time::sleep(plan.before).await;
    let body = match kind {
        Kind::Index => {
            serde_json::json!({"group": 0, "index": true, "at": format!("{LOADED_BUCKET}/{at}")})
        }
        Kind::Filedb => serde_json::json!({"group": 0, "at": FILEDB_AT}),
    };
    progress(&format!("groups-split: splitting root: {body}"));
    let split_start = t0.elapsed();
    // Plan and commit; the outcome waits until the foreground is stopped and joined, so
    // that a failed split leaves no requests running into the workloads after it.
    let split = async {
        let r = admin
            .send_ok(
                Method::POST,
                "/_admin/groups/split",
                &[("content-type", "application/json")],
                Bytes::from(body.to_string()),
                true,
            )
            .await?;
        let planned: Planned =
            serde_json::from_slice(&r.head).map_err(|e| format!("the split's answer: {e}"))?;
        wait(plan.limit, "the split's commit", || async {
            Ok(groups(&admin).await?.version >= planned.version)
        })
        .await
        .map(|()| planned)
    }
    .await;
    let split_end = t0.elapsed();
    if split.is_ok() {
        tokio::time::sleep(plan.after).await;
    }
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        let _ = t.await;
    }
    let planned = split?;
    let fg_end = t0.elapsed();
    if let Some(e) = failed.lock().map_err(|_| "poisoned")?.first() {
        return Err(format!("a foreground request failed: {e}"));
    }

    // The clean-up: root's record count stops falling, the foreground stopped.
    progress("groups-split: waiting for root to drop the rows it handed off");
    let mut last = root_records(&groups(&admin).await?)?;
    let mut last_change = Instant::now();
    let deadline = Instant::now() + plan.limit;
    while last_change.elapsed() < SETTLED {
        if Instant::now() >= deadline {
            return Err(format!(
                "the clean-up: root still at {last} records after {:?}",
                plan.limit
            ));
        }
        tokio::time::sleep(POLL).await;
        let now = root_records(&groups(&admin).await?)?;
        if now != last {
            (last, last_change) = (now, Instant::now());
        }
    }
    // Measured from the commit; a clean-up over before the foreground stopped is bounded
    // by the foreground's end (PUTs changed the count until then).
    let cleanup_end = last_change.duration_since(t0).max(fg_end);
    let cleanup_within = last_change.duration_since(t0) <= fg_end + POLL * 2;
    let after = groups(&admin).await?;

    // Read back: every acknowledged PUT, a sample of the loaded objects.
    let acked = acked.lock().map_err(|_| "poisoned")?.clone();
    for key in &acked {
        head_ok(&gw.s3, key).await?;
    }
    let mut check = Rng::new(rng.next_u64());
    for _ in 0..CHECK_SAMPLE.min(n) {
        head_ok(&gw.s3, &loaded_key(check.below(n))).await?;
    }
    let new = after
        .groups
        .iter()
        .find(|g| g.id == planned.group)
        .ok_or_else(|| format!("group {} is not in the map after the split", planned.group))?;
    if new.kind != kind.name() {
        return Err(format!("the new group {} is of kind {}", new.id, new.kind));
    }

    let samples = samples.lock().map_err(|_| "poisoned")?.clone();
    let k = kind.name();
    report.info(
        sec,
        &format!("{k}: records"),
        format!(
            "root {root_before} before the split, {} after its clean-up; the new group {}",
            root_records(&after)?,
            new.records
        ),
    );
    let took = split_end - split_start;
    report.info(
        sec,
        &format!("{k}: split, from the plan to the commit"),
        format!(
            "{:.2} s ({:.0} {} moved per second)",
            took.as_secs_f64(),
            moved(kind, n) as f64 / took.as_secs_f64().max(1e-6),
            match kind {
                Kind::Index => "objects",
                Kind::Filedb => "FileDB records",
            }
        ),
    );
    let cleanup = (cleanup_end - split_end).as_secs_f64();
    report.info(
        sec,
        &format!("{k}: clean-up, root drops the handed-off rows"),
        if cleanup_within {
            format!("over within {cleanup:.2} s of the commit, under the foreground")
        } else {
            format!(
                "{cleanup:.2} s from the commit ({:.2} s of it under the foreground)",
                (fg_end - split_end).as_secs_f64()
            )
        },
    );
    let phase = |from: Duration, to: Duration, put: bool, moving: Option<bool>| {
        let mut v: Vec<u64> = samples
            .iter()
            .filter(|s| s.start >= from && s.start < to && s.put == put)
            .filter(|s| moving.is_none_or(|m| s.moving == m))
            .map(|s| (s.end - s.start).as_micros() as u64)
            .collect();
        Latency::of(&mut v)
    };
    let fmt = |l: Latency| {
        format!(
            "p50 {}, p99 {}, max {} ({} requests)",
            us(l.p50_us),
            us(l.p99_us),
            us(l.max_us),
            l.count
        )
    };
    let rows: &[(&str, bool, Option<bool>)] = match kind {
        Kind::Index => &[
            ("PUT, keys that stay", true, Some(false)),
            ("PUT, keys that move", true, Some(true)),
            ("HEAD, keys that stay", false, Some(false)),
            ("HEAD, keys that move", false, Some(true)),
        ],
        Kind::Filedb => &[
            ("PUT, contents that stay", true, Some(false)),
            ("PUT, contents that move", true, Some(true)),
            ("HEAD (the index only)", false, None),
        ],
    };
    for &(what, put, moving) in rows {
        report.info(
            sec,
            &format!("{k}: {what}: before / during the split / after its commit"),
            format!(
                "{} / {} / {}",
                fmt(phase(Duration::ZERO, split_start, put, moving)),
                fmt(phase(split_start, split_end, put, moving)),
                fmt(phase(split_end, fg_end, put, moving))
            ),
        );
    }
    // The pause: the slowest write to the moving keys that was in flight during the split.
    let pause = samples
        .iter()
        .filter(|s| s.put && s.moving && s.end > split_start && s.start < split_end)
        .map(|s| s.end - s.start)
        .max()
        .unwrap_or_default();
    // The gateway's own figure: from the hand-off to the commit, the window in which a
    // write of what moves is answered `Moved` and waits.
    let window = handoff_ms(&gw.server.log_tail(LOG_LINES));
    report.info(
        sec,
        &format!("{k}: the hand-off to the commit, as the gateway logs it"),
        match window {
            Some(ms) => format!("{ms} ms"),
            None => format!("not found in the last {LOG_LINES} lines of its log"),
        },
    );
    report.info(
        sec,
        &format!("{k}: pause, the slowest PUT of what moves in flight during the split"),
        format!(
            "{} ({} PUTs acknowledged in all, 0 failed)",
            us(pause.as_micros() as u64),
            acked.len()
        ),
    );
    Ok(())
}

/// What a split of `kind` moves out of `n` loaded objects: the objects past the middle key,
/// or the contents (n / 2, uniform SHA-1s) past 0x80.
fn moved(kind: Kind, n: u64) -> u64 {
    match kind {
        Kind::Index => n - n / 2,
        Kind::Filedb => n / 4,
    }
}

/// One foreground connection's loop.
struct Foreground {
    s3: Client,
    n: u64,
    at: String,
    kind: Kind,
    t0: Instant,
    seed: u64,
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    acked: Arc<Mutex<Vec<String>>>,
    failed: Arc<Mutex<Vec<String>>>,
    next: Arc<AtomicU64>,
}

impl Foreground {
    async fn run(self) {
        let mut rng = Rng::new(self.seed);
        while !self.stop.load(Ordering::SeqCst) {
            let i = rng.below(self.n);
            let put = rng.below(2) == 0;
            let base = loaded_key(i);
            let body = Bytes::from(rng.bytes(BODY));
            let moving = match self.kind {
                Kind::Index => base >= self.at,
                Kind::Filedb => put && sha1::Sha1::digest(&body)[0] >= 0x80,
            };
            let start = self.t0.elapsed();
            let (key, outcome) = if put {
                // A new key right after a loaded one: in the same half.
                let key = format!("{base}/w{}", self.next.fetch_add(1, Ordering::SeqCst));
                let r = tokio::time::timeout(
                    REQUEST_MAX,
                    self.s3.put_object(LOADED_BUCKET, &key, body),
                )
                .await;
                (key, r.map(|r| r.map(|_| ())))
            } else {
                let r = tokio::time::timeout(REQUEST_MAX, head_ok(&self.s3, &base)).await;
                (base, r)
            };
            let end = self.t0.elapsed();
            let error = match outcome {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(_) => Some(format!("no answer within {REQUEST_MAX:?}")),
            };
            if let Some(e) = error {
                if let Ok(mut f) = self.failed.lock() {
                    f.push(format!("{} {key}: {e}", if put { "PUT" } else { "HEAD" }));
                }
                return;
            }
            if put && let Ok(mut a) = self.acked.lock() {
                a.push(key);
            }
            if let Ok(mut s) = self.samples.lock() {
                s.push(Sample {
                    start,
                    end,
                    put,
                    moving,
                });
            }
        }
    }
}

/// `GET /_admin/groups`.
pub(crate) async fn groups(admin: &Client) -> Result<Groups, String> {
    let body = admin.get_whole("/_admin/groups").await?;
    serde_json::from_slice(&body).map_err(|e| format!("/_admin/groups: {e}"))
}

fn root_records(g: &Groups) -> Result<u64, String> {
    g.groups
        .iter()
        .find(|g| g.kind == "root")
        .map(|g| g.records)
        .ok_or_else(|| "no root group in /_admin/groups".into())
}

/// Polls `done` every [`POLL`] until it answers true, at most `limit`.
async fn wait<F, Fut>(limit: Duration, what: &str, mut done: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, String>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if done().await? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("{what}: not within {limit:?}"));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The length of the last split's hand-off in a gateway's log: the `ms=` of its last
/// [`WINDOW_LINE`].
fn handoff_ms(log: &str) -> Option<u64> {
    log.lines()
        .rev()
        .find(|l| l.contains(WINDOW_LINE))
        .and_then(|l| l.split("ms=").nth(1))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_last_hand_off_in_the_log() {
        // As the gateway writes it (meta::raft::split), then a request line after it.
        let line = |ms: u64| {
            format!(
                "2026-11-28T13:03:41.767344Z  INFO meta::raft::split: a change of the map \
                 committed: {WINDOW_LINE} version=2 rows=500042 ms={ms}"
            )
        };
        let log = [
            line(2168),
            line(7385),
            "2026-11-28T13:03:42Z  INFO s3_request: method=\"PUT\" ms=3".into(),
        ]
        .join("\n");
        assert_eq!(handoff_ms(&log), Some(7385));
        assert_eq!(handoff_ms("nothing here"), None);
        assert_eq!(handoff_ms(&format!("{WINDOW_LINE} ms=x")), None);
    }
}
