//! A crash-torture workload: client threads that each own their keys (and, optionally,
//! native contents), send a random mix of operations through random gateways while
//! gateways are killed, and model what the last acknowledged operation left. The model
//! tells a lost acknowledgement (a violation) from the honest uncertainty of an operation
//! that got no answer, so a check after any number of `kill -9` can be exact.
//!
//! Used by the single-node torture (`tests/tests/crash_torture.rs`) and the cluster crash
//! loop (`tests/tests/cluster.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::cluster::{ELECTION_TIMEOUT, MultipartOutcome, REQUEST_TIMEOUT, copy_acknowledged};
use crate::{RawResponse, Remote, random_body, sha1_hex};

/// Small bodies (many duplicates among keys) come first in [`Bodies::all`].
const SMALL_BODIES: usize = 5;
/// The first part of a multipart body (S3's minimum part size).
pub const MULTIPART_FIRST_PART: usize = 5 * 1024 * 1024;
/// Native contents each client owns (distinct from every S3 body and other clients').
const NATIVE_PER_CLIENT: usize = 3;
/// Operations per client thread at most (the loop ends earlier on `stop`).
const MAX_OPS: usize = 100_000;

/// The S3 bodies of a torture run: a few small ones (many duplicates) and two multipart
/// bodies (a 5 MiB part and a small last part).
pub struct Bodies {
    pub all: Vec<Vec<u8>>,
}

impl Default for Bodies {
    fn default() -> Self {
        Self::new()
    }
}

impl Bodies {
    pub fn new() -> Bodies {
        let mut all: Vec<Vec<u8>> = [1_024, 7_000, 64 * 1024, 200_000, 300_000]
            .iter()
            .enumerate()
            .map(|(i, &len)| random_body(6000 + i as u64, len))
            .collect();
        for (i, last) in [1_000, 70_000].iter().enumerate() {
            all.push(random_body(6100 + i as u64, MULTIPART_FIRST_PART + last));
        }
        Bodies { all }
    }

    fn small(&self, rng: &mut StdRng) -> usize {
        rng.random_range(0..SMALL_BODIES)
    }

    fn multipart(&self, rng: &mut StdRng) -> usize {
        rng.random_range(SMALL_BODIES..self.all.len())
    }
}

/// What a client knows about one of its keys.
#[derive(Debug, Clone, Default)]
pub struct KeyModel {
    /// Every body any operation (acknowledged or not) tried to give the key.
    pub ever: BTreeSet<usize>,
    pub now: Known,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Known {
    /// The last operation, acknowledged, left this body.
    Present(usize),
    /// The last operation, acknowledged, removed the key (or none ever wrote it).
    #[default]
    Absent,
    /// An operation failed: the key is retired (never touched again); absent or any of
    /// `ever`.
    Uncertain,
}

/// What a client knows about the reference count of one of its native contents: it lies
/// in `lo..=hi` (an acknowledged inc or upload moves both bounds, one without an answer
/// only the bound it could have moved).
#[derive(Debug, Clone)]
pub struct NativeModel {
    pub body: Vec<u8>,
    pub sha1: String,
    pub lo: u64,
    pub hi: u64,
}

/// Every key and native content of one client (or of all, merged).
#[derive(Debug, Clone, Default)]
pub struct Model {
    pub keys: BTreeMap<String, KeyModel>,
    pub natives: Vec<NativeModel>,
}

impl Model {
    pub fn merge(&mut self, other: Model) {
        self.keys.extend(other.keys);
        self.natives.extend(other.natives);
    }

    pub fn uncertain_keys(&self) -> usize {
        self.keys
            .values()
            .filter(|m| m.now == Known::Uncertain)
            .count()
    }
}

/// Operation counts of the clients.
#[derive(Debug, Default, Clone)]
pub struct Counts {
    pub puts: usize,
    pub copies: usize,
    pub deletes: usize,
    pub multiparts: usize,
    /// Acknowledged native uploads, incs and decs.
    pub natives: usize,
    pub reads: usize,
    pub failed: usize,
    /// Answers that no acknowledged operation can explain: each a lost acknowledgement or
    /// a linearizability violation.
    pub violations: Vec<String>,
}

impl Counts {
    pub fn acked(&self) -> usize {
        self.puts + self.copies + self.deletes + self.multiparts + self.natives
    }

    pub fn merge(&mut self, o: Counts) {
        self.puts += o.puts;
        self.copies += o.copies;
        self.deletes += o.deletes;
        self.multiparts += o.multiparts;
        self.natives += o.natives;
        self.reads += o.reads;
        self.failed += o.failed;
        self.violations.extend(o.violations);
    }
}

/// What the clients send.
#[derive(Debug, Clone)]
pub struct Workload {
    pub bucket: String,
    /// With a token, a share of the operations are native uploads, incs, decs and GETs.
    pub native_token: Option<String>,
}

/// What one operation did to the model.
enum Effect {
    /// A PUT, copy or multipart upload that tried to give `key` the body `body`.
    Wrote { key: String, body: usize, ok: bool },
    /// A DELETE of `key`.
    Deleted { key: String, ok: bool },
    /// A read, a native call (already applied to the model), or a write that cannot have
    /// touched any object.
    Nothing { failed: bool },
    /// Nothing sent (a copy without a source).
    Skipped,
}

/// Starts `threads` clients (thread `t` seeded with `seed + 1 + t`) against `remotes`.
pub fn start_clients(
    threads: usize,
    seed: u64,
    remotes: &[Remote],
    workload: &Workload,
    bodies: &Arc<Bodies>,
    stop: &Arc<AtomicBool>,
    acked: &Arc<AtomicUsize>,
) -> Vec<thread::JoinHandle<(Model, Counts)>> {
    (0..threads)
        .map(|t| {
            let remotes = remotes.to_vec();
            let (workload, bodies, stop, acked) = (
                workload.clone(),
                bodies.clone(),
                stop.clone(),
                acked.clone(),
            );
            let seed = seed.wrapping_add(1 + t as u64);
            thread::spawn(move || client(t, seed, remotes, workload, bodies, stop, acked))
        })
        .collect()
}

/// Stops the clients when dropped (a panicking test ends its client threads).
pub struct StopOnDrop(pub Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The end of a kill loop: waits (bounded by `limit`) for 10 more acknowledged operations,
/// stops the clients and joins them; whether they made that progress, and their merged
/// models and counts.
pub fn settle_and_join(
    limit: Duration,
    stop: &AtomicBool,
    acked: &AtomicUsize,
    clients: Vec<thread::JoinHandle<(Model, Counts)>>,
) -> (bool, Model, Counts) {
    let base = acked.load(Ordering::Relaxed);
    let settled = crate::poll_until(limit, || acked.load(Ordering::Relaxed) >= base + 10);
    stop.store(true, Ordering::Relaxed);
    let (model, counts) = join_clients(clients);
    (settled, model, counts)
}

/// Joins the clients and merges their models and counts.
pub fn join_clients(clients: Vec<thread::JoinHandle<(Model, Counts)>>) -> (Model, Counts) {
    let mut model = Model::default();
    let mut counts = Counts::default();
    for c in clients {
        let (m, cs) = c.join().expect("client thread panicked");
        model.merge(m);
        counts.merge(cs);
    }
    (model, counts)
}

/// One client: a random mix of PUT, CopyObject, DELETE, multipart upload, GET (and native
/// calls) on keys and contents only it touches, each through a random remote, until
/// `stop`. Returns its model and its counts.
pub fn client(
    thread_no: usize,
    seed: u64,
    remotes: Vec<Remote>,
    workload: Workload,
    bodies: Arc<Bodies>,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
) -> (Model, Counts) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = Model {
        keys: BTreeMap::new(),
        natives: (0..NATIVE_PER_CLIENT)
            .map(|i| {
                let body = random_body(
                    70_000 + (thread_no * 16 + i) as u64,
                    2_000 + i * 40_000 + thread_no * 17,
                );
                NativeModel {
                    sha1: sha1_hex(&body),
                    body,
                    lo: 0,
                    hi: 0,
                }
            })
            .collect(),
    };
    let mut counts = Counts::default();
    let mut next_key = 0usize;
    let bucket = workload.bucket.as_str();
    let ops = if workload.native_token.is_some() {
        120
    } else {
        100
    };

    for _op in 0..MAX_OPS {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let node = rng.random_range(0..remotes.len());
        let remote = &remotes[node];
        let keys = &mut model.keys;
        let dice = rng.random_range(0..ops);
        let effect = if dice < 40 {
            let key = pick_key(thread_no, &mut rng, keys, &mut next_key, false).expect("some key");
            let b = bodies.small(&mut rng);
            let ok = matches!(remote.put(bucket, &key, &bodies.all[b]), Ok(r) if r.status == 200);
            counts.puts += usize::from(ok);
            Effect::Wrote { key, body: b, ok }
        } else if dice < 55 {
            match pick_key(thread_no, &mut rng, keys, &mut next_key, true) {
                Some(src) => {
                    let Known::Present(b) = keys[&src].now else {
                        unreachable!("present_only")
                    };
                    let mut dst = pick_key(thread_no, &mut rng, keys, &mut next_key, false)
                        .expect("some key");
                    if dst == src {
                        // A copy onto itself is an error in S3 (without a new metadata).
                        dst = format!("c{thread_no}/copy-{next_key:04}");
                        next_key += 1;
                        keys.insert(dst.clone(), KeyModel::default());
                    }
                    let ok =
                        matches!(remote.copy(bucket, &src, &dst), Ok(r) if copy_acknowledged(&r));
                    counts.copies += usize::from(ok);
                    Effect::Wrote {
                        key: dst,
                        body: b,
                        ok,
                    }
                }
                None => Effect::Skipped,
            }
        } else if dice < 75 {
            let key = pick_key(thread_no, &mut rng, keys, &mut next_key, false).expect("some key");
            let ok = matches!(remote.delete(bucket, &key), Ok(r) if r.status == 204);
            counts.deletes += usize::from(ok);
            Effect::Deleted { key, ok }
        } else if dice < 80 {
            let key = pick_key(thread_no, &mut rng, keys, &mut next_key, false).expect("some key");
            let b = bodies.multipart(&mut rng);
            let body = &bodies.all[b];
            let parts = [&body[..MULTIPART_FIRST_PART], &body[MULTIPART_FIRST_PART..]];
            match remote.multipart_put(bucket, &key, &parts) {
                MultipartOutcome::Completed => {
                    counts.multiparts += 1;
                    Effect::Wrote {
                        key,
                        body: b,
                        ok: true,
                    }
                }
                MultipartOutcome::CompleteFailed(_) => Effect::Wrote {
                    key,
                    body: b,
                    ok: false,
                },
                // The object was not touched; an abandoned upload stays behind.
                MultipartOutcome::NotCompleted(_) => Effect::Nothing { failed: true },
            }
        } else if dice < 100 {
            // A read of a certain key must find exactly what the last acknowledged
            // operation left. Only a whole 200 or a 404 is an answer to check: no answer, a
            // body cut short by a kill, a 503 are not violations.
            let key = pick_key(thread_no, &mut rng, keys, &mut next_key, false).expect("some key");
            let want = keys[&key].now;
            match remote.get(bucket, &key) {
                Ok(r) if (r.status == 200 && r.complete) || r.status == 404 => {
                    let fine = match want {
                        Known::Present(b) => r.status == 200 && r.body == bodies.all[b],
                        Known::Absent => r.status == 404,
                        Known::Uncertain => unreachable!("only certain keys are picked"),
                    };
                    counts.reads += 1;
                    if !fine {
                        counts.violations.push(format!(
                            "GET {key} through remote {node}: status {}, {} bytes; the last \
                             acknowledged operation left {want:?}",
                            r.status,
                            r.body.len()
                        ));
                    }
                    Effect::Nothing { failed: false }
                }
                _ => Effect::Nothing { failed: true },
            }
        } else {
            let token = workload.native_token.as_deref().unwrap_or_default();
            let i = rng.random_range(0..model.natives.len());
            let failed = native_op(remote, token, &mut model.natives[i], &mut rng, &mut counts);
            Effect::Nothing { failed }
        };
        let failed = match effect {
            Effect::Wrote { key, body, ok } => {
                let m = model.keys.get_mut(&key).expect("picked");
                m.ever.insert(body);
                m.now = if ok {
                    Known::Present(body)
                } else {
                    Known::Uncertain
                };
                !ok
            }
            Effect::Deleted { key, ok } => {
                let m = model.keys.get_mut(&key).expect("picked");
                m.now = if ok { Known::Absent } else { Known::Uncertain };
                !ok
            }
            Effect::Nothing { failed } => failed,
            Effect::Skipped => continue,
        };
        if failed {
            counts.failed += 1;
            // Not a wait for a condition: keeps a client from spinning on a dead gateway.
            thread::sleep(Duration::from_millis(50));
        } else {
            acked.fetch_add(1, Ordering::Relaxed);
        }
    }
    (model, counts)
}

/// A certain key of this client (Present or Absent), or a new one.
fn pick_key(
    thread_no: usize,
    rng: &mut StdRng,
    keys: &mut BTreeMap<String, KeyModel>,
    next_key: &mut usize,
    present_only: bool,
) -> Option<String> {
    let certain: Vec<&String> = keys
        .iter()
        .filter(|(_, m)| match m.now {
            Known::Present(_) => true,
            Known::Absent => !present_only,
            Known::Uncertain => false,
        })
        .map(|(k, _)| k)
        .collect();
    if present_only || (!certain.is_empty() && rng.random_bool(0.6)) {
        if certain.is_empty() {
            return None;
        }
        return Some(certain[rng.random_range(0..certain.len())].clone());
    }
    *next_key += 1;
    let key = format!("c{thread_no}/key-{next_key:04}");
    keys.insert(key.clone(), KeyModel::default());
    Some(key)
}

/// One native call on content `n`, applied to its model; returns whether it failed (no
/// answer or a 503). An answer the model cannot explain is a violation.
fn native_op(
    remote: &Remote,
    token: &str,
    n: &mut NativeModel,
    rng: &mut StdRng,
    counts: &mut Counts,
) -> bool {
    let auth = format!("Bearer {token}");
    let call = |method: &str, target: &str, body: &[u8]| {
        remote.raw(
            method,
            target,
            &[("authorization", auth.as_str())],
            body,
            REQUEST_TIMEOUT,
        )
    };
    let sha1 = n.sha1.clone();
    let dice = rng.random_range(0..100);
    let mut violation = |what: String| counts.violations.push(format!("native {sha1}: {what}"));
    if n.hi == 0 || dice < 25 {
        // Upload: insert or increment.
        match call("PUT", &format!("/_files/{sha1}?magic=7"), &n.body) {
            Ok(r) if r.status == 200 => {
                n.lo += 1;
                n.hi += 1;
                check_refs(&r, n, &mut violation);
                counts.natives += 1;
                false
            }
            Ok(r) if r.status != 503 => {
                violation(format!("upload: status {}: {}", r.status, r.text()));
                n.hi += 1;
                false
            }
            _ => {
                n.hi += 1;
                true
            }
        }
    } else if dice < 55 || n.lo == 0 {
        match call("POST", &format!("/_files/{sha1}/inc?magic=7"), b"") {
            Ok(r) if r.status == 200 => {
                n.lo += 1;
                n.hi += 1;
                check_refs(&r, n, &mut violation);
                counts.natives += 1;
                false
            }
            Ok(r) if r.status == 404 => {
                if n.lo > 0 {
                    violation(format!("inc: 404 with {} acknowledged references", n.lo));
                } else {
                    // Not stored: no reference is left.
                    n.hi = 0;
                }
                false
            }
            Ok(r) if r.status != 503 => {
                violation(format!("inc: status {}: {}", r.status, r.text()));
                n.hi += 1;
                false
            }
            _ => {
                n.hi += 1;
                true
            }
        }
    } else if dice < 85 {
        // lo > 0: a reference certainly exists to release.
        match call("POST", &format!("/_files/{sha1}/dec?magic=7"), b"") {
            Ok(r) if r.status == 200 => {
                n.lo -= 1;
                n.hi -= 1;
                check_refs(&r, n, &mut violation);
                counts.natives += 1;
                false
            }
            Ok(r) if r.status != 503 => {
                violation(format!(
                    "dec: status {} with {} acknowledged references: {}",
                    r.status,
                    n.lo,
                    r.text()
                ));
                n.lo -= 1;
                false
            }
            _ => {
                n.lo -= 1;
                true
            }
        }
    } else {
        let crc = crc32fast::hash(&n.body);
        let target = format!("/_files/{sha1}?size={}&crc32={crc:08x}", n.body.len());
        match call("GET", &target, b"") {
            Ok(r) if r.status == 200 && r.complete => {
                counts.reads += 1;
                if r.body != n.body {
                    violation(format!("GET: {} bytes, not the content", r.body.len()));
                }
                false
            }
            Ok(r) if r.status != 503 && r.complete => {
                counts.reads += 1;
                violation(format!(
                    "GET: status {} with {} acknowledged references",
                    r.status, n.lo
                ));
                false
            }
            _ => true,
        }
    }
}

/// The `refs` of an acknowledged native answer must lie within the model's bounds.
fn check_refs(r: &RawResponse, n: &NativeModel, violation: &mut impl FnMut(String)) {
    let refs = crate::parse_flat_json(&r.text())
        .ok()
        .and_then(|f| f.get("refs").and_then(|v| v.parse::<u64>().ok()));
    match refs {
        Some(refs) if (n.lo..=n.hi).contains(&refs) => {}
        Some(refs) => violation(format!(
            "answered refs {refs}, the model says {}..={}",
            n.lo, n.hi
        )),
        None => violation(format!("no refs in {}", r.text())),
    }
}

/// GetObject through `remote`, retrying (bounded by [`ELECTION_TIMEOUT`]) while the answer
/// is a 503 or no answer: `Some(body)` on 200, `None` on 404 `NoSuchKey`, `Err` on any
/// other answer or when the retries run out.
pub fn read(remote: &Remote, bucket: &str, key: &str) -> Result<Option<Vec<u8>>, String> {
    let deadline = Instant::now() + ELECTION_TIMEOUT;
    for attempt in 1.. {
        let last = match remote.get(bucket, key) {
            Ok(r) if r.status == 200 && r.complete => return Ok(Some(r.body)),
            Ok(r) if r.status == 404 && r.error_code().as_deref() == Some("NoSuchKey") => {
                return Ok(None);
            }
            Ok(r) if r.status == 503 => format!("503 {:?}", r.error_code()),
            Ok(r) => {
                return Err(format!(
                    "GET {key} on port {}: status {} (complete: {}): {}",
                    remote.port,
                    r.status,
                    r.complete,
                    String::from_utf8_lossy(&r.body[..r.body.len().min(500)])
                ));
            }
            Err(e) => format!("no answer: {e}"),
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "GET {key} on port {}: {attempt} attempts, the last: {last}",
                remote.port
            ));
        }
        thread::sleep(Duration::from_millis(100));
    }
    unreachable!()
}

/// Every key of the model read through `remote`, and the bucket's listing, against the
/// model; `Err` lists every disagreement.
pub fn verify_objects(
    remote: &Remote,
    bucket: &str,
    model: &Model,
    bodies: &Bodies,
) -> Result<(), String> {
    let mut wrong = Vec::new();
    for (key, m) in &model.keys {
        let got = read(remote, bucket, key)?;
        let fine = match (m.now, &got) {
            (Known::Present(b), Some(got)) => *got == bodies.all[b],
            (Known::Present(_), None) => false,
            (Known::Absent, got) => got.is_none(),
            (Known::Uncertain, None) => true,
            (Known::Uncertain, Some(got)) => m.ever.iter().any(|&b| *got == bodies.all[b]),
        };
        if !fine {
            wrong.push(format!(
                "{key}: {} (sha1 {}); the last acknowledged operation left {:?}",
                got.as_ref()
                    .map_or("absent".to_string(), |b| format!("{} bytes", b.len())),
                got.as_ref().map_or("-".to_string(), |b| sha1_hex(b)),
                m.now
            ));
        }
    }
    let listed = remote.list_keys(bucket)?;
    let listed_set: BTreeSet<&String> = listed.iter().collect();
    for (key, m) in &model.keys {
        match m.now {
            Known::Present(_) if !listed_set.contains(key) => {
                wrong.push(format!("LIST lacks {key}"))
            }
            Known::Absent if listed_set.contains(key) => {
                wrong.push(format!("LIST has deleted {key}"))
            }
            _ => {}
        }
    }
    for key in &listed {
        if !model.keys.contains_key(key) {
            wrong.push(format!("LIST has {key}, never written"));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("\n"))
    }
}

/// Every native content of the model against the gateway: a content with acknowledged
/// references is live, its count within the model's bounds, and served byte-exact.
pub fn verify_natives(remote: &Remote, token: &str, model: &Model) -> Result<(), String> {
    let mut wrong = Vec::new();
    let auth = format!("Bearer {token}");
    for n in &model.natives {
        let r = remote
            .admin_get(&format!("/_admin/files/{}", n.sha1), REQUEST_TIMEOUT)
            .map_err(|e| format!("admin file {}: {e}", n.sha1))?;
        let (state, refs) = match r.status {
            200 => {
                let f = crate::AdminFile::parse(&r.text())?;
                (f.state, f.refs.unwrap_or(0))
            }
            404 => ("unknown".to_string(), 0),
            s => return Err(format!("admin file {}: status {s}: {}", n.sha1, r.text())),
        };
        let live_refs = if state == "live" { refs } else { 0 };
        if !(n.lo..=n.hi).contains(&live_refs) {
            wrong.push(format!(
                "native {}: {state} with {refs} references, the model says {}..={}",
                n.sha1, n.lo, n.hi
            ));
        }
        if n.lo > 0 {
            let crc = crc32fast::hash(&n.body);
            let target = format!("/_files/{}?size={}&crc32={crc:08x}", n.sha1, n.body.len());
            let r = remote
                .raw(
                    "GET",
                    &target,
                    &[("authorization", auth.as_str())],
                    b"",
                    REQUEST_TIMEOUT,
                )
                .map_err(|e| format!("native GET {}: {e}", n.sha1))?;
            if r.status != 200 || r.body != n.body {
                wrong.push(format!(
                    "native {}: GET status {}, {} bytes",
                    n.sha1,
                    r.status,
                    r.body.len()
                ));
            }
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("\n"))
    }
}
