//! Network partitions of a three-node cluster: every node runs in its own network namespace
//! (see `e2e::netns`), and `iptables` rules inside the namespaces cut nodes off from each
//! other while client threads keep writing and reading through every node (a client talking
//! to a cut-off node sees what a real client would). The client history is then checked for
//! per-key linearizability: no acknowledged write lost, no stale read.
//!
//! The main test starts three gateways with `--snapshot-logs 50` (the Raft log is snapshotted
//! and purged many times during the run), then runs a fault schedule drawn from a random
//! seed: isolate the leader, isolate a follower, cut one link, SIGSTOP the leader (then
//! SIGCONT), `kill -9` a node (the leader half of the time) and restart it. Each fault is
//! held 1-6 s, then healed (rules flushed, SIGCONT, restart), then the cluster must agree on
//! one leader again, then a quiet period of 1-3 s. During each fault the test itself writes
//! probe keys through the nodes that keep a majority (one at a time, 50 ms apart), to time
//! the failover and the gaps after it; a watcher per node polls `/_admin/cluster` every
//! 100 ms for terms, leaders and snapshots. A cluster that does not recover (no leader, or
//! no acknowledged write, within 60 s of a heal; a node that does not restart or exits)
//! fails the test.
//!
//! A second test runs the same schedule (90 s by default) on nodes started with
//! `--group-split-files 8`: every PUT writes a new content, and a content released by an
//! overwrite keeps its FileDB record until Valkyrie deletes its files, so root's FileDB
//! splits into new groups again and again while the faults run (about 25 groups at the
//! end of a run), PUTs take their references in another group than their entries, and the
//! history is checked the same way (issue #28, failure behaviour 4); with
//! `--group-split-objects 8` the bucket's 28 keys split over index groups at the start of
//! the schedule (4-5 groups), so every key's operations go to its own index group.
//!
//! The history: each client thread owns its keys and sends PUT (a unique small body per
//! write), DELETE and GET through a random node, one operation at a time; every operation is
//! recorded with its invocation and completion times and its outcome: acknowledged (PUT 200,
//! DELETE 204), read (GET 200 with the whole body, or 404 NoSuchKey), or unknown (any other
//! answer, no answer, a socket timeout: a write may or may not have happened; a failed read
//! tells nothing). After the schedule the test heals everything, waits for one leader and for
//! identical metadata on all three nodes (`/_admin/digest`), reads every key through every
//! node and lists the bucket through every node.
//!
//! The check, for each key (a register whose values are unique): the key's operations are
//! sequential (one client), an acknowledged write takes effect between its invocation and
//! its completion, a write with an unknown outcome may take effect at any time after its
//! invocation, or never, at most once. A read (the final reads too) must return the current
//! value (that of the last acknowledged write or delete before it), or the value of an
//! unknown write (or the absence left by an unknown delete) invoked before it and not yet
//! superseded; anything else is a violation: a lost acknowledged write (final reads), a stale
//! read (a value superseded by a write acknowledged before the read was invoked), a value
//! never written (or written only after the read), an unexplained absence. Any answer
//! outside the protocol (a 500, a 404 without NoSuchKey, ...) fails the test too.
//!
//! Printed: the seed; each fault (what, on whom, how long; the first write acknowledged
//! through the majority side and the longest gap after it; the terms gained; the snapshot
//! and purged indexes before and at the heal; the leader and term before and after the
//! heal; when the majority side went through more than one election, or a gap over 1 s, its
//! state changes); then operations checked, violations (0, else the test panics with them),
//! faults of each kind, restarts, snapshots and log purges crossed per node (`snapshot`,
//! `purged` of `/_admin/cluster`) and the faults during which the majority side took one,
//! per fault kind the time from the fault to the first write acknowledged through a node of
//! the majority side (p50 and max) and the terms gained during the fault, the slowest write
//! acknowledged through the majority side during each fault, and the elections (term
//! increases, leader changes) seen when a fault heals while a healthy leader exists.
//!
//! Environment: `PARTITION_SEED` replays a schedule (the seed is printed, and named in every
//! failure message; the leader each fault hits depends on the run), `PARTITION_SECS` sets
//! the length of the fault schedule (default 120 s, about 2.5 min in all; a longer run is a
//! soak), `PARTITION_LOGS=1` prints the nodes' election, error and warning log lines after
//! a fault with extra elections or stalled writes (with `RUST_LOG=info,s3_request=off` they
//! stay in the kept log longer), `PARTITION_HISTORY=FILE` writes the history (one operation
//! a line) and the faults to FILE, `CLUSTER_KEEP_DIR=1` keeps the data folders of a failed
//! run. Needs root, `ip` (iproute2) and `iptables` (`.ci/run` installs them); the test
//! fails, never skips, without them.
//!
//! Run: `cargo build -p gateway && cargo test -p e2e --test partition -- --nocapture`
//! (soak: `PARTITION_SECS=1800`, replay: `PARTITION_SEED=<seed>`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use e2e::cluster::{CATCH_UP_TIMEOUT, Cluster, ClusterStatus};
use e2e::netns::NetLab;
use e2e::torture::StopOnDrop;
use e2e::{Gateway, GatewayOptions, RawResponse, Remote, encode_key, gateway_bin, poll_until};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

const BUCKET: &str = "part";
/// Client threads, and the keys each one owns.
const THREADS: usize = 4;
const KEYS_PER_THREAD: usize = 6;
/// Keys the fault thread's failover probes write.
const PROBE_KEYS: usize = 4;
/// Socket timeout of a client request (connect, each read, each write): above the
/// gateway's own write timeout (10 s), so a node without a quorum is seen answering 503.
const OP_TIMEOUT: Duration = Duration::from_secs(15);
/// Socket timeout of one failover probe (a probe stuck on one node does not hold up the
/// next, through the other).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Bound on the cluster agreeing on a leader, and on a write being acknowledged, after a
/// fault heals; past it the cluster did not recover and the test fails.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(60);
/// Socket timeout of the status monitor's requests.
const MONITOR_TIMEOUT: Duration = Duration::from_secs(1);
/// Bound on a final read (retried on 503 or no answer).
const FINAL_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// With `PARTITION_LOGS=1`, how many of a node's last log lines are searched for election,
/// error and warning lines after a fault with extra elections or stalled writes.
const LOG_TAIL: usize = 2000;
/// How many error, warning and panic lines of each node a recovery failure shows.
const NOTABLE_LINES: usize = 40;
/// `--snapshot-logs`: a snapshot (and a log purge) every this many entries.
const SNAPSHOT_LOGS: u64 = 50;

// ---------------------------------------------------------------------------------------
// The history.
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// PUT of this (unique) body.
    Put(String),
    Delete,
    Get,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// A PUT answered 200, a DELETE 204.
    Acked,
    /// A GET answered 200 with the whole body (`Some`) or 404 NoSuchKey (`None`).
    Read(Option<String>),
    /// A write without an acknowledgement (any other answer, or none): it may or may not
    /// take effect. A read without an answer tells nothing.
    Unknown(String),
}

/// One operation of the history.
#[derive(Debug, Clone)]
struct Op {
    /// `t<N>` (client thread N), `probe`, `final`.
    client: String,
    key: String,
    kind: Kind,
    node: usize,
    /// Since the run's epoch.
    invoke: Duration,
    complete: Duration,
    outcome: Outcome,
}

impl Op {
    fn describe(&self) -> String {
        let kind = match &self.kind {
            Kind::Put(v) => format!("PUT {}", short(v)),
            Kind::Delete => "DELETE".to_string(),
            Kind::Get => "GET".to_string(),
        };
        let outcome = match &self.outcome {
            Outcome::Acked => "acked".to_string(),
            Outcome::Read(Some(v)) => format!("read {}", short(v)),
            Outcome::Read(None) => "read absent".to_string(),
            Outcome::Unknown(why) => format!("unknown ({why})"),
        };
        format!(
            "{} {kind} via node {} [{:.3}s..{:.3}s] {outcome}",
            self.client,
            self.node,
            self.invoke.as_secs_f64(),
            self.complete.as_secs_f64()
        )
    }
}

/// The identifying head of a body (`key|client-seq|`), for messages.
fn short(v: &str) -> String {
    match v.match_indices('|').nth(1) {
        Some((i, _)) => format!("{}…", &v[..=i]),
        None => format!("{:?}", &v[..v.len().min(40)]),
    }
}

/// A unique body: `key|writer-seq|` and 10-250 letters.
fn unique_body(rng: &mut StdRng, key: &str, writer: &str, seq: usize) -> String {
    let pad = rng.random_range(10..=250);
    let mut s = format!("{key}|{writer}-{seq}|");
    s.extend((0..pad).map(|_| char::from(b'a' + rng.random_range(0..26u8))));
    s
}

/// An answer no protocol path explains (not a linearizability violation, a server error).
fn is_unexpected(r: &RawResponse, acked: u16) -> bool {
    r.status != acked
        && r.status != 503
        && !(r.status == 404 && r.error_code().as_deref() == Some("NoSuchKey"))
}

/// What one client operation (or probe) is, before it is sent.
struct Request<'a> {
    client: &'a str,
    key: &'a str,
    kind: Kind,
    node: usize,
    timeout: Duration,
}

/// Sends one operation and records it; an answer outside the protocol also goes to
/// `unexpected`.
fn perform(remote: &Remote, req: Request<'_>, epoch: Instant, unexpected: &mut Vec<String>) -> Op {
    let target = format!("/{BUCKET}/{}", encode_key(req.key));
    let invoke = epoch.elapsed();
    let (method, body, acked) = match &req.kind {
        Kind::Put(v) => ("PUT", v.as_bytes(), 200),
        Kind::Delete => ("DELETE", &b""[..], 204),
        Kind::Get => ("GET", &b""[..], 200),
    };
    let answer = remote
        .signed(method, &target)
        .body(body)
        .timeout(req.timeout)
        .try_send();
    let complete = epoch.elapsed();
    let outcome = match (&req.kind, &answer) {
        (Kind::Get, Ok(r)) if r.status == 200 && r.complete => {
            Outcome::Read(Some(String::from_utf8_lossy(&r.body).into_owned()))
        }
        (Kind::Get, Ok(r)) if r.status == 404 && r.error_code().as_deref() == Some("NoSuchKey") => {
            Outcome::Read(None)
        }
        (Kind::Put(_) | Kind::Delete, Ok(r)) if r.status == acked => Outcome::Acked,
        (_, Ok(r)) => Outcome::Unknown(format!(
            "status {} {}{}",
            r.status,
            r.error_code().unwrap_or_default(),
            if r.complete { "" } else { " (body cut short)" }
        )),
        (_, Err(e)) => Outcome::Unknown(format!("no answer: {e}")),
    };
    if let Ok(r) = &answer
        && is_unexpected(r, acked)
    {
        unexpected.push(format!(
            "{} {method} {} via node {} at {:.3}s: status {}: {}",
            req.client,
            req.key,
            req.node,
            invoke.as_secs_f64(),
            r.status,
            String::from_utf8_lossy(&r.body[..r.body.len().min(300)])
        ));
    }
    Op {
        client: req.client.to_string(),
        key: req.key.to_string(),
        kind: req.kind,
        node: req.node,
        invoke,
        complete,
        outcome,
    }
}

/// What a client thread hands back.
#[derive(Default)]
struct ClientResult {
    ops: Vec<Op>,
    unexpected: Vec<String>,
}

/// One client: PUT (45%), DELETE (10%) or GET (45%) of one of its keys through a random
/// node, one at a time, until `stop`.
fn client(
    t: usize,
    seed: u64,
    remotes: Vec<Remote>,
    epoch: Instant,
    stop: Arc<AtomicBool>,
) -> ClientResult {
    let mut rng = StdRng::seed_from_u64(seed);
    let name = format!("t{t}");
    let keys: Vec<String> = (0..KEYS_PER_THREAD).map(|k| format!("t{t}/k{k}")).collect();
    let mut out = ClientResult::default();
    // Bounded by `stop` (set after the schedule, or on a panic) and by a hard cap.
    for seq in 0..1_000_000 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let key = &keys[rng.random_range(0..keys.len())];
        let node = rng.random_range(1..=remotes.len());
        let dice = rng.random_range(0..100);
        let kind = if dice < 45 {
            Kind::Put(unique_body(&mut rng, key, &name, seq))
        } else if dice < 55 {
            Kind::Delete
        } else {
            Kind::Get
        };
        let req = Request {
            client: &name,
            key,
            kind,
            node,
            timeout: OP_TIMEOUT,
        };
        let op = perform(&remotes[node - 1], req, epoch, &mut out.unexpected);
        let failed = matches!(op.outcome, Outcome::Unknown(_));
        out.ops.push(op);
        if failed {
            // Not a wait for a condition: keeps a client from spinning on 503s.
            thread::sleep(Duration::from_millis(20));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// The check: per-key linearizability of a register with unique values.
// ---------------------------------------------------------------------------------------

/// What the check found.
#[derive(Debug, Default)]
struct Verdict {
    /// Operations whose outcome was checked or applied (acknowledged writes, reads).
    checked: usize,
    /// Writes with an unknown outcome.
    unknown_writes: usize,
    /// Reads explained only by a write whose outcome was unknown (it did take effect).
    reads_of_unknown_writes: usize,
    /// Of those, writes that took effect after a later write was acknowledged.
    late_unknown_writes: usize,
    violations: Vec<String>,
}

/// Checks every key's operations (see the module documentation).
fn check_history(ops: &[Op]) -> Verdict {
    let mut by_key: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        by_key.entry(op.key.as_str()).or_default().push(op);
    }
    let mut verdict = Verdict::default();
    for (key, mut ops) in by_key {
        ops.sort_by_key(|o| (o.invoke, o.complete));
        check_key(key, &ops, &mut verdict);
    }
    verdict
}

fn check_key(key: &str, ops: &[&Op], verdict: &mut Verdict) {
    // Every PUT of the key by its body, for messages.
    let puts: BTreeMap<&str, &Op> = ops
        .iter()
        .filter_map(|o| match &o.kind {
            Kind::Put(v) => Some((v.as_str(), *o)),
            _ => None,
        })
        .collect();
    for pair in ops.windows(2) {
        if pair[0].complete > pair[1].invoke {
            verdict.violations.push(format!(
                "{key}: the harness overlapped two operations of one key: {} / {}",
                pair[0].describe(),
                pair[1].describe()
            ));
            return;
        }
    }
    // The current value (None: absent) and the operation that set it.
    let mut current: Option<&str> = None;
    let mut set_by: Option<&Op> = None;
    // Unknown writes invoked so far and not yet seen: they may still take effect.
    let mut pending_puts: BTreeMap<&str, &Op> = BTreeMap::new();
    let mut pending_deletes: Vec<&Op> = Vec::new();
    // Whether an acknowledged write completed since each pending write was invoked.
    let mut acked_since: BTreeSet<&str> = BTreeSet::new();
    let mut acked_delete_since = false;
    for op in ops {
        match (&op.kind, &op.outcome) {
            (Kind::Put(v), Outcome::Acked) => {
                verdict.checked += 1;
                current = Some(v.as_str());
                set_by = Some(op);
                acked_since.extend(pending_puts.keys().copied());
                acked_delete_since = !pending_deletes.is_empty();
            }
            (Kind::Delete, Outcome::Acked) => {
                verdict.checked += 1;
                current = None;
                set_by = Some(op);
                acked_since.extend(pending_puts.keys().copied());
                acked_delete_since = !pending_deletes.is_empty();
            }
            (Kind::Put(v), Outcome::Unknown(_)) => {
                verdict.unknown_writes += 1;
                pending_puts.insert(v, op);
            }
            (Kind::Delete, Outcome::Unknown(_)) => {
                verdict.unknown_writes += 1;
                pending_deletes.push(op);
            }
            (Kind::Get, Outcome::Read(got)) => {
                verdict.checked += 1;
                let got = got.as_deref();
                if got == current {
                    continue;
                }
                // The only other explanation: an unknown write took effect just before.
                match got {
                    Some(v) if pending_puts.contains_key(v) => {
                        pending_puts.remove(v);
                        verdict.reads_of_unknown_writes += 1;
                        if acked_since.contains(v) {
                            verdict.late_unknown_writes += 1;
                        }
                        current = got;
                        set_by = puts.get(v).copied();
                        continue;
                    }
                    None if !pending_deletes.is_empty() => {
                        let d = pending_deletes.remove(0);
                        verdict.reads_of_unknown_writes += 1;
                        if acked_delete_since {
                            verdict.late_unknown_writes += 1;
                        }
                        current = None;
                        set_by = Some(d);
                        continue;
                    }
                    _ => {}
                }
                verdict
                    .violations
                    .push(explain(key, op, got, current, set_by, &puts));
            }
            // A read without an answer; a write kind cannot be "read".
            (Kind::Get, _) | (_, Outcome::Read(_)) => {}
        }
    }
}

/// Names the violation of a read of `key` that returned `got` while the register held
/// `current` (set by `set_by`).
fn explain(
    key: &str,
    read: &Op,
    got: Option<&str>,
    current: Option<&str>,
    set_by: Option<&Op>,
    puts: &BTreeMap<&str, &Op>,
) -> String {
    let what = if read.client == "final" {
        "LOST ACKNOWLEDGED WRITE (final read after healing)"
    } else {
        "STALE READ"
    };
    let want = match current {
        Some(v) => format!("the value {}", short(v)),
        None => "absent".to_string(),
    };
    let because = set_by.map_or("nothing was ever acknowledged".to_string(), |o| {
        format!("set by {}", o.describe())
    });
    let got_text = match got {
        None => "absent (no acknowledged or unknown delete explains it)".to_string(),
        Some(v) => match puts.get(v) {
            None => format!("{} that was never written to {key}", short(v)),
            Some(w) if w.invoke >= read.complete => format!(
                "{} whose write was invoked after the read completed: {}",
                short(v),
                w.describe()
            ),
            Some(w) => format!("{}, superseded, written by {}", short(v), w.describe()),
        },
    };
    format!(
        "{what}: {key}: {} returned {got_text}; the register held {want}, {because}",
        read.describe()
    )
}

// ---------------------------------------------------------------------------------------
// The fault schedule.
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum FaultKind {
    IsolateLeader,
    IsolateFollower,
    CutLink,
    PauseLeader,
    KillRestart,
}

impl FaultKind {
    const ALL: [FaultKind; 5] = [
        FaultKind::IsolateLeader,
        FaultKind::IsolateFollower,
        FaultKind::CutLink,
        FaultKind::PauseLeader,
        FaultKind::KillRestart,
    ];

    fn name(self) -> &'static str {
        match self {
            FaultKind::IsolateLeader => "isolate leader",
            FaultKind::IsolateFollower => "isolate follower",
            FaultKind::CutLink => "cut one link",
            FaultKind::PauseLeader => "SIGSTOP leader",
            FaultKind::KillRestart => "kill -9 + restart",
        }
    }
}

/// What happened during one fault.
#[derive(Debug, Clone)]
struct Fault {
    kind: FaultKind,
    /// The faulted node(s): one, or both ends of the cut link.
    targets: Vec<usize>,
    /// The leader when the fault began.
    leader: usize,
    /// The nodes the probes wrote through (they keep a majority).
    healthy: Vec<usize>,
    /// From the fault to the first write acknowledged through `healthy`.
    first_ack: Duration,
    /// Whether that acknowledgement came only after the heal.
    after_heal: bool,
    /// From the first acknowledgement to the heal, the longest time without one (`None`:
    /// none during the hold).
    gap_after_failover: Option<Duration>,
    /// The leader's term when the fault began, the highest term of the `healthy` nodes
    /// just before the heal.
    term_start: u64,
    term_at_heal: u64,
    /// The highest snapshot index of the `healthy` nodes when the fault began and when it
    /// healed.
    snapshot_before: u64,
    snapshot_at_heal: u64,
    /// The same of the purged index (the last log entry removed).
    purged_before: u64,
    purged_at_heal: u64,
    /// Set when the majority side had a leader (id, term) just before the heal.
    healthy_leader: Option<(usize, u64)>,
    /// The leader all nodes agree on after the quiet period, and its term.
    term_after: u64,
    leader_after: usize,
    /// When the fault began and when it was healed, since the epoch.
    fault_at: Duration,
    healed_at: Duration,
}

impl Fault {
    fn label(&self) -> String {
        fault_label(self.kind, &self.targets, self.leader)
    }

    /// Whether the fault takes the leader away (so a failover is due).
    fn hits_leader(&self) -> bool {
        match self.kind {
            FaultKind::IsolateLeader | FaultKind::PauseLeader => true,
            FaultKind::KillRestart => self.targets.contains(&self.leader),
            FaultKind::IsolateFollower | FaultKind::CutLink => false,
        }
    }

    /// The nodes that keep a majority: the `healthy` ones, and for a cut link both ends too
    /// (each still reaches the middle one).
    fn healthy_side(&self) -> Vec<usize> {
        let mut side = self.healthy.clone();
        if self.kind == FaultKind::CutLink {
            side.extend(&self.targets);
            side.sort_unstable();
        }
        side
    }
}

/// A fault's name in the figures (a kill names whom it hit).
fn fault_label(kind: FaultKind, targets: &[usize], leader: usize) -> String {
    match kind {
        FaultKind::KillRestart if targets.contains(&leader) => {
            "kill -9 leader + restart".to_string()
        }
        FaultKind::KillRestart => "kill -9 follower + restart".to_string(),
        k => k.name().to_string(),
    }
}

/// The fault thread's own writes (through the healthy nodes), in the history too.
struct Prober {
    epoch: Instant,
    rng: StdRng,
    seq: usize,
    ops: Vec<Op>,
    unexpected: Vec<String>,
}

impl Prober {
    /// Writes probe keys through `healthy` (in turn, one at a time, 50 ms apart) until
    /// `until`, or until the first acknowledgement if `first_only`; returns when each
    /// acknowledgement completed, since the epoch.
    fn probe(
        &mut self,
        cluster: &Cluster,
        healthy: &[usize],
        until: Instant,
        first_only: bool,
    ) -> Vec<Duration> {
        let mut acks = Vec::new();
        let mut turn = 0;
        while Instant::now() < until {
            let node = healthy[turn % healthy.len()];
            turn += 1;
            self.seq += 1;
            let key = format!("probe/k{}", self.seq % PROBE_KEYS);
            let body = unique_body(&mut self.rng, &key, "probe", self.seq);
            let left = until.saturating_duration_since(Instant::now());
            let req = Request {
                client: "probe",
                key: &key,
                kind: Kind::Put(body),
                node,
                timeout: left.clamp(Duration::from_millis(300), PROBE_TIMEOUT),
            };
            let op = perform(&cluster.remote(node), req, self.epoch, &mut self.unexpected);
            if op.outcome == Outcome::Acked {
                acks.push(op.complete);
            }
            self.ops.push(op);
            if first_only && !acks.is_empty() {
                break;
            }
            // Not a wait for a condition: paces the probes.
            thread::sleep(Duration::from_millis(50));
        }
        acks
    }
}

/// A change in what one node's `/_admin/cluster` says (state, term, leader or snapshot).
#[derive(Debug, Clone)]
struct Sample {
    /// Since the run's epoch.
    at: Duration,
    node: usize,
    state: String,
    term: u64,
    leader: Option<u64>,
    snapshot: Option<u64>,
    purged: Option<u64>,
}

/// Polls node `node`'s `/_admin/cluster` (1 s socket timeout, every 100 ms) until `stop`,
/// recording every change.
fn monitor(
    node: usize,
    remote: Remote,
    epoch: Instant,
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
) {
    let mut last = None;
    while !stop.load(Ordering::Relaxed) {
        if let Ok(r) = remote.admin_get("/_admin/cluster", MONITOR_TIMEOUT)
            && let Ok(st) = ClusterStatus::parse(&r.text())
        {
            let now = (st.state.clone(), st.term, st.leader, st.snapshot, st.purged);
            if last.as_ref() != Some(&now) {
                samples
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Sample {
                        at: epoch.elapsed(),
                        node,
                        state: st.state,
                        term: st.term,
                        leader: st.leader,
                        snapshot: st.snapshot,
                        purged: st.purged,
                    });
                last = Some(now);
            }
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// The changes of state, term or leader `nodes` went through between `from` and `to`, one
/// line.
fn timeline(samples: &[Sample], nodes: &[usize], from: Duration, to: Duration) -> String {
    let mut last: BTreeMap<usize, (&str, u64, Option<u64>)> = BTreeMap::new();
    let mut out = Vec::new();
    for s in samples
        .iter()
        .filter(|s| nodes.contains(&s.node) && s.at <= to)
    {
        let now = (s.state.as_str(), s.term, s.leader);
        if last.insert(s.node, now) != Some(now) && s.at >= from {
            out.push(format!(
                "+{:.2}s n{} {} T{} leader {}",
                (s.at - from).as_secs_f64(),
                s.node,
                s.state,
                s.term,
                s.leader.map_or("-".to_string(), |l| l.to_string())
            ));
        }
    }
    out.join(", ")
}

/// The longest time without an acknowledged write from the first acknowledgement to `end`
/// (acknowledgements in completion order).
fn longest_gap(acks: &[Duration], end: Duration) -> Option<Duration> {
    let first = *acks.first()?;
    let mut gap = Duration::ZERO;
    let mut prev = first;
    for &a in acks.iter().skip(1).chain(std::iter::once(&end)) {
        gap = gap.max(a.saturating_sub(prev));
        prev = prev.max(a);
    }
    Some(gap)
}

/// The leader of the side that keeps a majority and its term, if it has one: the leader
/// `healthy` agree on (two or more nodes), or, for a cut link (`healthy` is the node linked
/// to both ends), the leader that node follows, if that one says it leads.
fn majority_leader(cluster: &Cluster, healthy: &[usize]) -> Option<(usize, u64)> {
    let leader = if healthy.len() >= 2 {
        cluster.leader_among(healthy).ok()?
    } else {
        let middle = healthy[0];
        let follows = usize::try_from(cluster.status(middle).ok()?.leader?).ok()?;
        let side: Vec<usize> = BTreeSet::from([middle, follows]).into_iter().collect();
        cluster.leader_among(&side).ok()?
    };
    Some((leader, cluster.status(leader).ok()?.term))
}

/// The highest snapshot index and the highest purged index the nodes `among` report now
/// (0: none answered, or none yet).
fn max_snapshot_and_purge(cluster: &Cluster, among: &[usize]) -> (u64, u64) {
    let answers: Vec<ClusterStatus> = among
        .iter()
        .filter_map(|&id| cluster.status(id).ok())
        .collect();
    let max = |f: fn(&ClusterStatus) -> Option<u64>| answers.iter().filter_map(f).max();
    (
        max(|st| st.snapshot).unwrap_or(0),
        max(|st| st.purged).unwrap_or(0),
    )
}

/// The last errors, warnings and panics (request lines and "metadata unavailable" left
/// out) in each node's kept log, for failure messages: a node's own last lines are often
/// only the requests it refused since.
fn notable_lines(cluster: &Cluster) -> String {
    let mut out = String::new();
    for id in cluster.ids() {
        let tail = cluster.node(id).log_tail(usize::MAX);
        let lines: Vec<&str> = tail
            .lines()
            .filter(|l| l.contains("ERROR") || l.contains("WARN") || l.contains("panicked"))
            .filter(|l| !l.contains("s3_request") && !l.contains("metadata unavailable"))
            .collect();
        let keep = &lines[lines.len().saturating_sub(NOTABLE_LINES)..];
        out.push_str(&format!(
            "---- node {id}: its last {} errors, warnings and panics ----\n{}\n",
            keep.len(),
            keep.join("\n")
        ));
    }
    out
}

/// Panic messages (`panicked at` and the two lines after it) in the nodes' kept logs not
/// seen before, each prefixed with its node; they are added to `seen`.
fn new_panics(cluster: &Cluster, seen: &mut BTreeSet<String>) -> Vec<String> {
    let mut new = Vec::new();
    for id in cluster.ids() {
        let tail = cluster.node(id).log_tail(usize::MAX);
        let lines: Vec<&str> = tail.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.contains("panicked at") {
                let panic = format!(
                    "node {id}: {}",
                    lines[i..lines.len().min(i + 3)].join("\n    ")
                );
                if seen.insert(panic.clone()) {
                    new.push(panic);
                }
            }
        }
    }
    new
}

/// Prints the seed when the test fails (after the nodes' logs: dropped last).
struct SeedOnPanic(u64);

impl Drop for SeedOnPanic {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!(
                "partition test FAILED; replay the schedule: PARTITION_SEED={}",
                self.0
            );
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not an unsigned integer"))
    })
}

fn shuffled_kinds(rng: &mut StdRng) -> Vec<FaultKind> {
    let mut kinds = FaultKind::ALL.to_vec();
    for i in (1..kinds.len()).rev() {
        let j = rng.random_range(0..=i);
        kinds.swap(i, j);
    }
    kinds
}

fn secs(d: Duration) -> String {
    format!("{:.2}s", d.as_secs_f64())
}

/// The median and the maximum.
fn p50_max(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    (v[(v.len() - 1) / 2], v[v.len() - 1])
}

// ---------------------------------------------------------------------------------------
// The test.
// ---------------------------------------------------------------------------------------

/// The tests of this file that start processes run one at a time: on two cores, a stopped
/// gateway's probe and the partition schedule's timings must not compete with another
/// test's cluster.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn partitions_lose_no_acknowledged_write_and_serve_no_stale_read() {
    let groups = run_partitions(&[], 120);
    assert_eq!((groups.filedb, groups.index), (0, 0), "{groups:?}");
}

/// The same across metadata groups: FileDB groups split by themselves all through the
/// schedule (`--group-split-files 8`), so PUTs take their references in other groups than
/// their entries, and splits run, while nodes are cut off, paused and killed; the bucket's
/// 28 keys split over index groups too (`--group-split-objects 8`), so a client's PUT,
/// DELETE and GET go to the group of its key.
#[test]
fn partitions_across_metadata_groups_lose_no_acknowledged_write() {
    let groups = run_partitions(
        &["--group-split-files", "8", "--group-split-objects", "8"],
        90,
    );
    println!(
        "{} FileDB and {} index groups at the end",
        groups.filedb, groups.index
    );
    assert!(
        groups.filedb > 1,
        "the FileDB groups never split: {groups:?}"
    );
    assert!(groups.index > 1, "the index never split: {groups:?}");
}

/// The groups of each kind besides root in the map at the end of a run.
#[derive(Debug)]
struct GroupCounts {
    filedb: usize,
    index: usize,
}

/// Runs the fault schedule on three nodes started with `extra_args` for `PARTITION_SECS`
/// or `default_secs`, checks the history, and answers the map's groups at the end.
fn run_partitions(extra_args: &[&str], default_secs: u64) -> GroupCounts {
    let _alone = one_at_a_time();
    let seed = env_u64("PARTITION_SEED").unwrap_or_else(|| rand::rng().random());
    let _seed_on_panic = SeedOnPanic(seed);
    let run_for = Duration::from_secs(env_u64("PARTITION_SECS").unwrap_or(default_secs));
    let logs = env_u64("PARTITION_LOGS").is_some_and(|v| v != 0);
    println!("partition seed: {seed} (replay: PARTITION_SEED={seed}), schedule {run_for:?}");
    let started = Instant::now();

    // The lab outlives the cluster: the processes die before their namespaces go.
    let lab = NetLab::new(3);
    let snapshot_logs = SNAPSHOT_LOGS.to_string();
    let args: Vec<&str> = ["--snapshot-logs", snapshot_logs.as_str()]
        .into_iter()
        .chain(extra_args.iter().copied())
        .collect();
    let mut cluster = Cluster::start_in(&lab.placements(), &args);
    println!(
        "lab {}: subnet {}, namespaces {:?}",
        lab.tag(),
        lab.subnet(),
        cluster
            .ids()
            .iter()
            .map(|&id| lab.ns(id))
            .collect::<Vec<_>>()
    );
    let all = cluster.ids();
    let first_leader = cluster.wait_leader_among(&all, RECOVERY_TIMEOUT);
    cluster.create_bucket(first_leader, BUCKET);
    let first_term = cluster.status(first_leader).map_or(0, |st| st.term);

    let epoch = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_drop = StopOnDrop(stop.clone());
    let remotes: Vec<Remote> = all.iter().map(|&id| cluster.remote(id)).collect();
    let clients: Vec<_> = (0..THREADS)
        .map(|t| {
            let (remotes, stop) = (remotes.clone(), stop.clone());
            let seed = seed.wrapping_add(1 + t as u64);
            thread::spawn(move || client(t, seed, remotes, epoch, stop))
        })
        .collect();
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let monitors: Vec<_> = all
        .iter()
        .map(|&id| {
            let (remote, stop, samples) = (cluster.remote(id), stop.clone(), samples.clone());
            thread::spawn(move || monitor(id, remote, epoch, stop, samples))
        })
        .collect();

    let mut rng = StdRng::seed_from_u64(seed);
    let mut prober = Prober {
        epoch,
        rng: StdRng::seed_from_u64(seed ^ 0x5eed),
        seq: 0,
        ops: Vec::new(),
        unexpected: Vec::new(),
    };
    let mut faults: Vec<Fault> = Vec::new();
    let mut restart_times: Vec<Duration> = Vec::new();
    let mut panics_seen: BTreeSet<String> = BTreeSet::new();
    let mut kinds: Vec<FaultKind> = Vec::new();
    let schedule_start = Instant::now();
    while schedule_start.elapsed() < run_for {
        if kinds.is_empty() {
            kinds = shuffled_kinds(&mut rng);
        }
        let kind = kinds.pop().expect("refilled above");
        let hold = Duration::from_millis(rng.random_range(1_000..=6_000));
        let quiet = Duration::from_millis(rng.random_range(1_000..=3_000));
        let pick = rng.random_range(0..6usize);
        let kill_leader = rng.random_bool(0.5);

        let leader = cluster
            .try_wait_leader_among(&all, RECOVERY_TIMEOUT)
            .unwrap_or_else(|last| {
                panic!(
                    "seed {seed}: no leader agreed on by all nodes within {RECOVERY_TIMEOUT:?} \
                     before fault {}:\n{last}\n{}",
                    faults.len() + 1,
                    lab.describe()
                )
            });
        let followers: Vec<usize> = all.iter().copied().filter(|&n| n != leader).collect();
        let targets: Vec<usize> = match kind {
            FaultKind::IsolateLeader | FaultKind::PauseLeader => vec![leader],
            FaultKind::IsolateFollower => vec![followers[pick % 2]],
            FaultKind::KillRestart if kill_leader => vec![leader],
            FaultKind::KillRestart => vec![followers[pick % 2]],
            FaultKind::CutLink => {
                let (a, b) = [(1, 2), (1, 3), (2, 3)][pick % 3];
                vec![a, b]
            }
        };
        // Probes go through nodes that keep a majority: for a cut link, the node on
        // neither end (linked to both).
        let healthy: Vec<usize> = all
            .iter()
            .copied()
            .filter(|n| !targets.contains(n))
            .collect();
        let (snapshot_before, purged_before) = max_snapshot_and_purge(&cluster, &healthy);
        let term_start = cluster.status(leader).map_or(0, |st| st.term);

        let label = fault_label(kind, &targets, leader);
        let t0 = Instant::now();
        println!(
            "fault {:>2} at {:>6.1}s: {label} of {targets:?} (leader {leader}) for {}",
            faults.len() + 1,
            epoch.elapsed().as_secs_f64(),
            secs(hold)
        );
        match kind {
            FaultKind::IsolateLeader | FaultKind::IsolateFollower => lab.isolate(targets[0]),
            FaultKind::CutLink => lab.cut(targets[0], targets[1]),
            FaultKind::PauseLeader => cluster.pause(targets[0]),
            FaultKind::KillRestart => cluster.kill9(targets[0]),
        }
        let fault_at = epoch.elapsed();
        // The probes write all through the hold.
        let acks = prober.probe(&cluster, &healthy, t0 + hold, false);
        let rest = (t0 + hold).saturating_duration_since(Instant::now());
        // Not a wait for a condition: the fault is held for its drawn time.
        thread::sleep(rest);

        // Just before the heal: does the majority side have a leader?
        let healed_at = epoch.elapsed();
        let healthy_leader = majority_leader(&cluster, &healthy);
        let (snapshot_at_heal, purged_at_heal) = max_snapshot_and_purge(&cluster, &healthy);
        let term_at_heal = healthy
            .iter()
            .filter_map(|&id| cluster.status(id).ok())
            .map(|st| st.term)
            .max()
            .unwrap_or(term_start);
        match kind {
            FaultKind::IsolateLeader | FaultKind::IsolateFollower | FaultKind::CutLink => {
                lab.heal()
            }
            FaultKind::PauseLeader => cluster.resume(targets[0]),
            FaultKind::KillRestart => {
                let began = Instant::now();
                cluster.restart(targets[0]);
                restart_times.push(began.elapsed());
            }
        }
        let healed = Instant::now();
        let gap_after_failover = longest_gap(&acks, healed_at);
        let mut first_ack = acks.first().copied();
        let after_heal = first_ack.is_none();
        if after_heal {
            first_ack = prober
                .probe(&cluster, &healthy, healed + RECOVERY_TIMEOUT, true)
                .first()
                .copied();
        }
        let first_ack = first_ack.unwrap_or_else(|| {
            panic!(
                "seed {seed}: fault {} ({} of {targets:?}, held {}): no write acknowledged \
                 through nodes {healthy:?} within {RECOVERY_TIMEOUT:?} after the heal:\n{}\n{}{}",
                faults.len() + 1,
                kind.name(),
                secs(hold),
                cluster.describe(),
                lab.describe(),
                notable_lines(&cluster)
            )
        });
        // One leader again, bounded; a node that panics fails the test at once (its panic
        // would otherwise scroll out of the kept log while it refuses requests).
        let recovery_deadline = Instant::now() + RECOVERY_TIMEOUT;
        let new_leader = loop {
            let last = match cluster.leader_among(&all) {
                Ok(l) => break l,
                Err(last) => last,
            };
            let new = new_panics(&cluster, &mut panics_seen);
            assert!(
                new.is_empty() && Instant::now() < recovery_deadline,
                "seed {seed}: fault {} ({} of {targets:?}): no leader agreed on by all nodes \
                 within {RECOVERY_TIMEOUT:?} after the heal{}:\n{last}\n{}{}",
                faults.len() + 1,
                kind.name(),
                if new.is_empty() {
                    String::new()
                } else {
                    format!(", and a node panicked:\n{}\n", new.join("\n"))
                },
                lab.describe(),
                notable_lines(&cluster)
            );
            thread::sleep(Duration::from_millis(100));
        };
        // The quiet period, then the leader and its term: a higher term than the healthy
        // leader had before the heal means the heal caused an election.
        // Not a wait for a condition: the quiet period is part of the schedule.
        thread::sleep(quiet);
        let leader_after = cluster
            .try_wait_leader_among(&all, RECOVERY_TIMEOUT)
            .unwrap_or(new_leader);
        let term_after = cluster
            .status(leader_after)
            .map(|st| st.term)
            .unwrap_or_default();
        let new = new_panics(&cluster, &mut panics_seen);
        assert!(
            new.is_empty(),
            "seed {seed}: a node panicked during fault {} ({} of {targets:?}):\n{}\n{}",
            faults.len() + 1,
            kind.name(),
            new.join("\n"),
            notable_lines(&cluster)
        );
        for &id in &all {
            assert!(
                cluster.node_mut(id).is_running(),
                "seed {seed}: node {id} exited after fault {} ({} of {targets:?}):\n{}\n{}",
                faults.len() + 1,
                kind.name(),
                cluster.node(id).log_tail(80),
                notable_lines(&cluster)
            );
        }
        let fault = Fault {
            kind,
            targets: targets.clone(),
            leader,
            healthy,
            first_ack: first_ack.saturating_sub(fault_at),
            after_heal,
            gap_after_failover,
            term_start,
            term_at_heal,
            snapshot_before,
            snapshot_at_heal,
            purged_before,
            purged_at_heal,
            healthy_leader,
            term_after,
            leader_after,
            fault_at,
            healed_at,
        };
        println!(
            "          first write acked through {:?} after {}{}{}; terms {term_start} -> \
             {term_at_heal} during the fault; snapshot {} -> {}, purged {purged_before} -> \
             {purged_at_heal}; heal: {}",
            fault.healthy,
            secs(fault.first_ack),
            if after_heal { " (after the heal)" } else { "" },
            gap_after_failover.map_or(String::new(), |g| format!(
                ", then at most {} without one",
                secs(g)
            )),
            snapshot_before,
            snapshot_at_heal,
            match healthy_leader {
                Some((l, term)) => format!(
                    "healthy leader {l} term {term} -> leader {leader_after} term {term_after}"
                ),
                None => format!("no healthy leader -> leader {leader_after} term {term_after}"),
            }
        );
        // Elections beyond the one a lost leader needs, a lost leader again, or writes
        // stalled by a fault that leaves the leader and a majority alone: when, and why.
        let slow = Duration::from_secs(1);
        if term_at_heal > term_start + 1
            || gap_after_failover.is_some_and(|g| g > slow)
            || (!fault.hits_leader() && fault.first_ack > slow)
        {
            let samples = samples.lock().unwrap_or_else(|e| e.into_inner());
            println!(
                "          the majority side during the fault: {}",
                timeline(&samples, &fault.healthy_side(), fault_at, healed_at)
            );
            let mut refusals: BTreeMap<String, usize> = BTreeMap::new();
            for o in prober.ops.iter().filter(|o| o.invoke >= fault_at) {
                if let Outcome::Unknown(why) = &o.outcome {
                    let why: String = why.chars().take(100).collect();
                    *refusals
                        .entry(format!("node {}: {why}", o.node))
                        .or_default() += 1;
                }
            }
            println!("          probes not acknowledged: {refusals:?}");
            if logs {
                for id in all.iter().copied() {
                    let tail = cluster.node(id).log_tail(LOG_TAIL);
                    let lines: Vec<&str> = tail
                        .lines()
                        .filter(|l| {
                            l.contains("vote")
                                || l.contains("elect")
                                || l.contains("ERROR")
                                || l.contains("WARN")
                        })
                        .filter(|l| !l.contains("s3_request"))
                        .collect();
                    println!(
                        "          node {id}'s election, error and warning lines:\n{}",
                        lines.join("\n")
                    );
                }
            }
        }
        faults.push(fault);
    }

    // The end: stop the clients, everything healed, one leader, identical metadata.
    stop.store(true, Ordering::Relaxed);
    let mut ops: Vec<Op> = Vec::new();
    let mut unexpected: Vec<String> = Vec::new();
    for c in clients {
        let r = c.join().expect("client thread panicked");
        ops.extend(r.ops);
        unexpected.extend(r.unexpected);
    }
    for m in monitors {
        m.join().expect("monitor thread panicked");
    }
    ops.append(&mut prober.ops);
    unexpected.append(&mut prober.unexpected);
    lab.heal();
    let leader = cluster.wait_leader_among(&all, RECOVERY_TIMEOUT);
    let digest = cluster.wait_same_digest(&all, CATCH_UP_TIMEOUT);
    println!(
        "healed: leader {leader}, all three nodes applied up to {} with identical tables",
        digest.last_applied
    );

    // Final reads of every key through every node, and the listings.
    let keys: BTreeSet<String> = ops.iter().map(|o| o.key.clone()).collect();
    let mut final_failures = Vec::new();
    for &id in &all {
        let remote = cluster.remote(id);
        let mut present = BTreeSet::new();
        for key in &keys {
            let deadline = Instant::now() + FINAL_READ_TIMEOUT;
            let op = loop {
                let req = Request {
                    client: "final",
                    key,
                    kind: Kind::Get,
                    node: id,
                    timeout: OP_TIMEOUT,
                };
                let op = perform(&remote, req, epoch, &mut unexpected);
                if matches!(op.outcome, Outcome::Read(_)) || Instant::now() >= deadline {
                    break op;
                }
                thread::sleep(Duration::from_millis(200));
            };
            match &op.outcome {
                Outcome::Read(Some(_)) => {
                    present.insert(key.clone());
                }
                Outcome::Read(None) => {}
                Outcome::Unknown(why) => final_failures.push(format!(
                    "final GET {key} via node {id} failed for {FINAL_READ_TIMEOUT:?}: {why}"
                )),
                Outcome::Acked => unreachable!("a GET is never acknowledged as a write"),
            }
            ops.push(op);
        }
        match remote.list_keys(BUCKET) {
            Ok(listed) => {
                let listed: BTreeSet<String> = listed.into_iter().collect();
                if listed != present {
                    final_failures.push(format!(
                        "LIST via node {id} disagrees with its GETs: listed only {:?}, read only \
                         {:?}",
                        listed.difference(&present).collect::<Vec<_>>(),
                        present.difference(&listed).collect::<Vec<_>>()
                    ));
                }
            }
            Err(e) => final_failures.push(format!("LIST via node {id}: {e}")),
        }
    }

    let panicked = new_panics(&cluster, &mut panics_seen);
    if let Some(path) = std::env::var_os("PARTITION_HISTORY") {
        let mut text = String::new();
        for o in &ops {
            text.push_str(&format!("{} {}\n", o.key, o.describe()));
        }
        for (i, f) in faults.iter().enumerate() {
            text.push_str(&format!(
                "fault {} {} of {:?} (leader {}) [{:.3}s..{:.3}s]\n",
                i + 1,
                f.label(),
                f.targets,
                f.leader,
                f.fault_at.as_secs_f64(),
                f.healed_at.as_secs_f64()
            ));
        }
        fs::write(&path, text).unwrap_or_else(|e| panic!("write PARTITION_HISTORY: {e}"));
        println!("history written to {}", path.to_string_lossy());
    }
    let verdict = check_history(&ops);
    let last_term = cluster.status(leader).map_or(0, |st| st.term);
    let samples = samples.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let last_log: BTreeMap<usize, u64> = all
        .iter()
        .map(|&id| {
            let st = cluster.status(id).ok();
            (id, st.and_then(|st| st.last_log_index).unwrap_or(0))
        })
        .collect();
    report(&ops, &faults, &restart_times, &samples, &last_log, &verdict);
    println!(
        "terms: {first_term} at the start -> {last_term} at the end; the leader changed across \
         {} of {} faults",
        faults.iter().filter(|f| f.leader_after != f.leader).count(),
        faults.len()
    );
    println!(
        "wall time {} (schedule {}), {} faults",
        secs(started.elapsed()),
        secs(run_for),
        faults.len()
    );
    assert!(
        verdict.violations.is_empty(),
        "seed {seed}: {} linearizability violations:\n{}",
        verdict.violations.len(),
        verdict.violations.join("\n")
    );
    assert!(
        final_failures.is_empty(),
        "seed {seed}: the healed cluster failed final checks:\n{}",
        final_failures.join("\n")
    );
    assert!(
        panicked.is_empty(),
        "seed {seed}: a node panicked by the end:\n{}",
        panicked.join("\n")
    );
    assert!(
        unexpected.is_empty(),
        "seed {seed}: {} answers outside the protocol (server errors, not consistency \
         violations):\n{}",
        unexpected.len(),
        unexpected.join("\n")
    );
    let kinds_seen: BTreeSet<FaultKind> = faults.iter().map(|f| f.kind).collect();
    assert!(
        run_for < Duration::from_secs(60) || kinds_seen.len() == FaultKind::ALL.len(),
        "seed {seed}: only {kinds_seen:?} ran in {run_for:?}"
    );
    let run = cluster.admin_cli(leader, &["groups", "list"]);
    let groups: serde_json::Value =
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("groups list: {e}: {run}"));
    let of_kind = |kind: &str| {
        groups["groups"]
            .as_array()
            .map_or(0, |g| g.iter().filter(|g| g["kind"] == kind).count())
    };
    GroupCounts {
        filedb: of_kind("filedb"),
        index: of_kind("index"),
    }
}

/// Prints the figures of a run.
fn report(
    ops: &[Op],
    faults: &[Fault],
    restart_times: &[Duration],
    samples: &[Sample],
    last_log: &BTreeMap<usize, u64>,
    verdict: &Verdict,
) {
    let count = |f: &dyn Fn(&Op) -> bool| ops.iter().filter(|o| f(o)).count();
    println!(
        "operations: {} in all ({} PUT, {} DELETE, {} GET; {} final reads); acknowledged \
         writes {}, reads answered {}, writes with unknown outcome {}, reads failed {}",
        ops.len(),
        count(&|o| matches!(o.kind, Kind::Put(_))),
        count(&|o| o.kind == Kind::Delete),
        count(&|o| o.kind == Kind::Get),
        count(&|o| o.client == "final"),
        count(&|o| o.outcome == Outcome::Acked),
        count(&|o| matches!(o.outcome, Outcome::Read(_))),
        verdict.unknown_writes,
        count(&|o| o.kind == Kind::Get && matches!(o.outcome, Outcome::Unknown(_))),
    );
    println!(
        "checked: {} operations, {} violations; {} reads saw an unknown write take effect ({} \
         of them after a later write was acknowledged)",
        verdict.checked,
        verdict.violations.len(),
        verdict.reads_of_unknown_writes,
        verdict.late_unknown_writes
    );
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    for f in faults {
        *by_kind.entry(f.label()).or_default() += 1;
    }
    println!("faults: {} ({by_kind:?})", faults.len());
    if !restart_times.is_empty() {
        let (p50, max) = p50_max(restart_times.to_vec());
        println!(
            "restarts: {} (kill -9, then `listening on` again after p50 {} max {})",
            restart_times.len(),
            secs(p50),
            secs(max)
        );
    }

    // (first, last, distinct values seen) of an index over a node's samples.
    let span = |id: usize, f: fn(&Sample) -> Option<u64>| {
        let mut seen: Vec<u64> = samples
            .iter()
            .filter(|s| s.node == id)
            .filter_map(f)
            .collect();
        let first = seen.iter().copied().min().unwrap_or(0);
        let last = seen.iter().copied().max().unwrap_or(0);
        seen.sort_unstable();
        seen.dedup();
        (first, last, seen.len())
    };
    for (&id, &last_log) in last_log {
        let (s_first, s_last, s_seen) = span(id, |s| s.snapshot);
        let (p_first, p_last, p_seen) = span(id, |s| s.purged);
        println!(
            "node {id}: snapshot index {s_first} -> {s_last} (about {} snapshots; {s_seen} seen \
             polling every 100 ms), purged up to {p_first} -> {p_last} ({p_seen} purges seen), \
             last log index {last_log}",
            (s_last - s_first) / SNAPSHOT_LOGS,
        );
    }
    let snapshotted = faults
        .iter()
        .filter(|f| f.snapshot_at_heal > f.snapshot_before)
        .count();
    let purged = faults
        .iter()
        .filter(|f| f.purged_at_heal > f.purged_before)
        .count();
    println!(
        "faults during which the majority side took a snapshot: {snapshotted} of {}, purged its \
         log (the faulted node then had to catch up past the purge): {purged}",
        faults.len()
    );

    println!(
        "failover: fault -> first write acknowledged through a node of the majority side \
         (probes every 50 ms)"
    );
    let mut labels: Vec<String> = faults.iter().map(Fault::label).collect();
    labels.sort();
    labels.dedup();
    for label in &labels {
        let these: Vec<&Fault> = faults.iter().filter(|f| &f.label() == label).collect();
        let times: Vec<Duration> = these.iter().map(|f| f.first_ack).collect();
        let (p50, max) = p50_max(times);
        let after = these.iter().filter(|f| f.after_heal).count();
        let elections: Vec<u64> = these
            .iter()
            .map(|f| f.term_at_heal.saturating_sub(f.term_start))
            .collect();
        let gaps: Vec<Duration> = these.iter().filter_map(|f| f.gap_after_failover).collect();
        let gaps = if gaps.is_empty() {
            String::new()
        } else {
            let (g50, gmax) = p50_max(gaps);
            format!(
                "; then without a write at most p50 {} max {}",
                secs(g50),
                secs(gmax)
            )
        };
        println!(
            "  {label:<26} n={:<3} p50 {} max {} ({after} only after the heal); terms gained \
             during the fault {elections:?}{gaps}",
            these.len(),
            secs(p50),
            secs(max)
        );
    }

    println!(
        "writes (clients' and probes') invoked during the fault through the nodes probed: the \
         slowest acknowledged one per fault, and how many got no acknowledgement"
    );
    for label in &labels {
        let mut slowest = Vec::new();
        let (mut acked, mut unacked) = (0, 0);
        for f in faults.iter().filter(|f| &f.label() == label) {
            let writes = ops.iter().filter(|o| {
                matches!(o.kind, Kind::Put(_) | Kind::Delete)
                    && f.healthy.contains(&o.node)
                    && o.invoke >= f.fault_at
                    && o.invoke < f.healed_at
            });
            let mut worst = None;
            for o in writes {
                if o.outcome == Outcome::Acked {
                    acked += 1;
                    worst = worst.max(Some(o.complete - o.invoke));
                } else {
                    unacked += 1;
                }
            }
            slowest.extend(worst);
        }
        if slowest.is_empty() {
            println!("  {label:<26} none acknowledged; {unacked} not");
            continue;
        }
        let (p50, max) = p50_max(slowest);
        println!(
            "  {label:<26} slowest p50 {} max {}; {acked} acknowledged, {unacked} not",
            secs(p50),
            secs(max)
        );
    }

    // Faults that leave the leader a majority yet stalled writes: through which nodes did
    // writes still go?
    for (i, f) in faults.iter().enumerate() {
        if f.hits_leader() || f.first_ack <= Duration::from_secs(1) {
            continue;
        }
        let mut per_node: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
        for o in ops.iter().filter(|o| {
            matches!(o.kind, Kind::Put(_) | Kind::Delete)
                && o.invoke >= f.fault_at
                && o.invoke < f.healed_at
        }) {
            let e = per_node.entry(o.node).or_default();
            if o.outcome == Outcome::Acked {
                e.0 += 1;
            } else {
                e.1 += 1;
            }
        }
        println!(
            "  fault {} ({} of {:?}, leader {}) stalled writes {}: writes invoked during it per \
             node (acknowledged, not): {per_node:?}",
            i + 1,
            f.label(),
            f.targets,
            f.leader,
            secs(f.first_ack)
        );
    }

    println!("heals while a healthy leader existed: term increases / leader changes");
    for label in &labels {
        let heals: Vec<&Fault> = faults
            .iter()
            .filter(|f| &f.label() == label && f.healthy_leader.is_some())
            .collect();
        if heals.is_empty() {
            println!("  {label:<26} none with a healthy leader");
            continue;
        }
        let term_up = heals
            .iter()
            .filter(|f| f.healthy_leader.is_some_and(|(_, t)| f.term_after > t))
            .count();
        let changed = heals
            .iter()
            .filter(|f| f.healthy_leader.is_some_and(|(l, _)| f.leader_after != l))
            .count();
        println!(
            "  {label:<26} {} heals: {term_up} with a term increase, {changed} with a leader \
             change",
            heals.len()
        );
    }
}

// ---------------------------------------------------------------------------------------
// The check itself, on made-up histories.
// ---------------------------------------------------------------------------------------

/// A made-up history of one key: `(client, kind, outcome)` in order, one second each.
fn history(steps: &[(&str, Kind, Outcome)]) -> Vec<Op> {
    steps
        .iter()
        .enumerate()
        .map(|(i, (client, kind, outcome))| Op {
            client: client.to_string(),
            key: "k".to_string(),
            kind: kind.clone(),
            node: 1,
            invoke: Duration::from_secs(2 * i as u64),
            complete: Duration::from_secs(2 * i as u64 + 1),
            outcome: outcome.clone(),
        })
        .collect()
}

#[test]
fn the_check_finds_stale_reads_and_lost_writes_and_allows_unknown_writes() {
    let put = |v: &str| Kind::Put(v.to_string());
    let read = |v: Option<&str>| Outcome::Read(v.map(str::to_string));
    let unknown = || Outcome::Unknown("no answer".to_string());
    let (a, b, c) = ("k|t0-1|x", "k|t0-2|y", "k|t0-3|z");
    let ok = check_history(&history(&[
        ("t0", Kind::Get, read(None)),
        ("t0", put(a), Outcome::Acked),
        ("t0", Kind::Get, read(Some(a))),
        ("t0", put(b), unknown()),
        ("t0", Kind::Get, read(Some(a))),
        ("t0", put(c), Outcome::Acked),
        ("t0", Kind::Get, read(Some(c))),
        // The unknown write took effect late, after c was acknowledged: allowed.
        ("t0", Kind::Get, read(Some(b))),
        ("t0", Kind::Delete, unknown()),
        ("t0", Kind::Get, read(None)),
        ("final", Kind::Get, read(None)),
    ]));
    assert!(ok.violations.is_empty(), "{:?}", ok.violations);
    assert_eq!(
        (
            ok.checked,
            ok.unknown_writes,
            ok.reads_of_unknown_writes,
            ok.late_unknown_writes
        ),
        (9, 2, 2, 1)
    );

    let stale = check_history(&history(&[
        ("t0", put(a), Outcome::Acked),
        ("t0", put(b), Outcome::Acked),
        ("t0", Kind::Get, read(Some(a))),
    ]));
    assert_eq!(stale.violations.len(), 1, "{:?}", stale.violations);
    assert!(
        stale.violations[0].starts_with("STALE READ"),
        "{:?}",
        stale.violations
    );

    let lost = check_history(&history(&[
        ("t0", put(a), Outcome::Acked),
        ("t0", Kind::Delete, Outcome::Acked),
        ("t0", put(b), Outcome::Acked),
        ("final", Kind::Get, read(None)),
    ]));
    assert_eq!(lost.violations.len(), 1, "{:?}", lost.violations);
    assert!(
        lost.violations[0].starts_with("LOST ACKNOWLEDGED WRITE"),
        "{:?}",
        lost.violations
    );

    // An unknown write is seen at most once: once superseded it cannot come back.
    let twice = check_history(&history(&[
        ("t0", put(a), unknown()),
        ("t0", Kind::Get, read(Some(a))),
        ("t0", put(b), Outcome::Acked),
        ("t0", Kind::Get, read(Some(a))),
    ]));
    assert_eq!(twice.violations.len(), 1, "{:?}", twice.violations);

    // A value never written, and one read before its write was invoked.
    let bogus = check_history(&history(&[
        ("t0", Kind::Get, read(Some("k|t9-9|q"))),
        ("t0", Kind::Get, read(Some(c))),
        ("t0", put(c), Outcome::Acked),
    ]));
    assert_eq!(bogus.violations.len(), 2, "{:?}", bogus.violations);
    assert!(
        bogus.violations[0].contains("never written"),
        "{:?}",
        bogus.violations
    );
    assert!(
        bogus.violations[1].contains("invoked after"),
        "{:?}",
        bogus.violations
    );

    let s = Duration::from_secs;
    assert_eq!(longest_gap(&[s(1), s(2), s(5)], s(6)), Some(s(3)));
    assert_eq!(longest_gap(&[s(1)], s(4)), Some(s(3)));
    assert_eq!(longest_gap(&[], s(4)), None);
}

// ---------------------------------------------------------------------------------------
// The lab itself: partitions drop what they should, and only that.
// ---------------------------------------------------------------------------------------

#[test]
fn netns_partitions_drop_node_traffic_and_keep_the_test_path() {
    let _alone = one_at_a_time();
    let lab = NetLab::new(3);
    let tag = lab.tag().to_string();
    let port = 7000;
    let addr = |id: usize| SocketAddr::new(lab.addr(id).into(), port);
    let listeners: Vec<_> = (1..=3)
        .map(|id| {
            lab.listen_in(id, addr(id))
                .unwrap_or_else(|e| panic!("listen in node {id}'s namespace: {e}"))
        })
        .collect();
    let t = Duration::from_millis(700);
    let passes = |from: Option<usize>, to: usize| lab.connect_from(from, addr(to), t).is_ok();
    let expect = |what: &str, want: &[(Option<usize>, usize, bool)]| {
        for &(from, to, ok) in want {
            assert_eq!(
                passes(from, to),
                ok,
                "{what}: {from:?} -> node {to} should {}pass\n{}",
                if ok { "" } else { "not " },
                lab.describe()
            );
        }
    };
    let everything = |ok_between: bool| -> Vec<(Option<usize>, usize, bool)> {
        let mut v = Vec::new();
        for to in 1..=3 {
            v.push((None, to, true));
            for from in 1..=3 {
                if from != to {
                    v.push((Some(from), to, ok_between));
                }
            }
        }
        v
    };
    expect("no partition", &everything(true));
    // Nothing answers on a port without a listener: the path itself is up.
    lab.cut(1, 2);
    expect(
        "link 1-2 cut",
        &[
            (Some(1), 2, false),
            (Some(2), 1, false),
            (Some(1), 3, true),
            (Some(3), 1, true),
            (Some(2), 3, true),
            (Some(3), 2, true),
            (None, 1, true),
            (None, 2, true),
            (None, 3, true),
        ],
    );
    lab.heal();
    expect("healed", &everything(true));
    lab.isolate(3);
    expect(
        "node 3 isolated",
        &[
            (Some(1), 3, false),
            (Some(3), 1, false),
            (Some(2), 3, false),
            (Some(3), 2, false),
            (Some(1), 2, true),
            (Some(2), 1, true),
            (None, 3, true),
            (None, 1, true),
        ],
    );
    lab.heal();
    expect("healed again", &everything(true));
    drop(listeners);
    drop(lab);
    let leftovers: Vec<String> = [
        vec!["ip", "netns", "list"],
        vec!["ip", "link", "show"],
        vec!["iptables", "-w", "10", "-S"],
    ]
    .iter()
    .map(|cmd| e2e::netns::run(cmd))
    .flat_map(|out| out.lines().map(str::to_string).collect::<Vec<_>>())
    .filter(|l| l.contains(&tag))
    .collect();
    assert!(
        leftovers.is_empty(),
        "the lab {tag} left these behind: {leftovers:?}"
    );
}

/// The state letter (`R`, `S`, `T`, ...) of every thread of process `pid`, from
/// `/proc/PID/task/*/stat`; empty if the process is gone.
fn thread_states(pid: u32) -> String {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return String::new();
    };
    tasks
        .flatten()
        .filter_map(|t| fs::read_to_string(t.path().join("stat")).ok())
        // `pid (comm) S ...`: the state follows the last `)`.
        .filter_map(|stat| stat.rsplit_once(')')?.1.trim_start().chars().next())
        .collect()
}

#[test]
fn a_gateway_in_a_namespace_is_the_process_signalled_and_restarts_there() {
    let _alone = one_at_a_time();
    let lab = NetLab::new(1);
    let place = lab.placements().remove(0);
    let mut gw = Gateway::start_placed(
        GatewayOptions {
            label: Some("namespaced gateway".into()),
            ..GatewayOptions::default()
        },
        place.clone(),
    );
    let ns_inode = fs::metadata(format!("/run/netns/{}", lab.ns(1)))
        .expect("the namespace file")
        .ino();
    let bin = fs::canonicalize(gateway_bin()).expect("canonical gateway path");
    let check_pid = |gw: &Gateway, when: &str| {
        let pid = gw.pid().expect("running");
        let exe = fs::read_link(format!("/proc/{pid}/exe")).expect("/proc/PID/exe");
        assert_eq!(exe, bin, "{when}: pid {pid} is {exe:?}, not the gateway");
        let net = fs::metadata(format!("/proc/{pid}/ns/net"))
            .expect("/proc/PID/ns/net")
            .ino();
        assert_eq!(
            net,
            ns_inode,
            "{when}: pid {pid} is not in namespace {}",
            lab.ns(1)
        );
    };
    check_pid(&gw, "started");
    assert_eq!(gw.placement(), &place);
    let remote = gw.remote();
    assert_eq!(remote.addr().ip(), std::net::IpAddr::from(lab.addr(1)));
    let ok = |remote: &Remote| {
        remote
            .raw("GET", "/_health", &[], b"", Duration::from_secs(2))
            .is_ok_and(|r| r.status == 200)
    };
    assert!(
        ok(&remote),
        "the test reaches the gateway at {}",
        remote.addr()
    );
    // SIGSTOP reaches the gateway itself: every thread of that pid stops (state T), and it
    // answers nothing until SIGCONT.
    let pid = gw.pid().expect("running");
    gw.pause();
    let mut states = String::new();
    assert!(
        poll_until(Duration::from_secs(10), || {
            states = thread_states(pid);
            !states.is_empty() && states.chars().all(|c| c == 'T' || c == 't')
        }),
        "pid {pid} did not stop after SIGSTOP; its threads' states: {states}"
    );
    assert!(
        remote
            .raw("GET", "/_health", &[], b"", Duration::from_millis(700))
            .is_err(),
        "a SIGSTOPped gateway answered"
    );
    gw.resume();
    assert!(
        poll_until(Duration::from_secs(10), || !thread_states(pid)
            .contains('T')),
        "pid {pid} still stopped after SIGCONT: {}",
        thread_states(pid)
    );
    assert!(
        poll_until(Duration::from_secs(10), || ok(&remote)),
        "no answer after SIGCONT"
    );
    gw.restart();
    check_pid(&gw, "restarted");
    assert!(
        poll_until(Duration::from_secs(10), || ok(&remote)),
        "no answer after the restart"
    );
    gw.kill9();
    assert!(gw.pid().is_none());
    drop(gw);
}
