//! Reads that race overwrites and deletes of the same key: a GET, HEAD or copy answers the
//! old object, the new one, or 404, never a 5xx, on one node and on three.
//!
//! Every write stores new content, so each overwrite releases the content the previous
//! record named (its FileDB record goes to `deleting`, and Valkyrie, on short settings
//! here, quarantines the file at once). A GET reads the key's record, then the content's
//! record and bytes: the release can land in between. The gateway then reads the key
//! again (a bounded number of times) instead of answering 500 "no FileDB record".
//!
//! A 503 `ServiceUnavailable` (a leader change on a busy machine, on three nodes) is not
//! an answer to the race: it is tried again, as SDKs do, for at most [`UNAVAILABLE_FOR`],
//! and counted. Any other 5xx fails the test.
//!
//! Run: `cargo build -p gateway && cargo test -p e2e --test read_races -- --nocapture`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use e2e::cluster::{Cluster, copy_acknowledged, is_unavailable};
use e2e::{ConfigFile, Gateway, RawResponse, Remote, random_body};

const BUCKET: &str = "races";
/// How long the writers and readers run per setup.
const RUN: Duration = Duration::from_secs(12);
const KEYS: u64 = 3;
/// How long one request is tried again while it answers 503.
const UNAVAILABLE_FOR: Duration = Duration::from_secs(30);

/// Body of generation `generation`: its number, then bytes derived from it (so a reader can tell
/// a whole, genuine generation from anything else).
fn body_of(generation: u64) -> Vec<u8> {
    let mut body = generation.to_le_bytes().to_vec();
    body.extend(random_body(
        generation,
        2_000 + (generation as usize * 7_919) % 30_000,
    ));
    body
}

/// Whether `body` is exactly some generation's body.
fn genuine(body: &[u8]) -> bool {
    body.len() >= 8 && body_of(u64::from_le_bytes(body[..8].try_into().expect("8 bytes"))) == body
}

#[derive(Default)]
struct Counts {
    writes: AtomicU64,
    gets: AtomicU64,
    heads: AtomicU64,
    copies: AtomicU64,
    absent: AtomicU64,
    unavailable: AtomicU64,
}

/// `send`, tried again 100 ms apart while it answers 503 `ServiceUnavailable`, for at most
/// [`UNAVAILABLE_FOR`]; each 503 is counted.
fn retrying(
    counts: &Counts,
    send: impl Fn() -> std::io::Result<RawResponse>,
) -> std::io::Result<RawResponse> {
    let deadline = Instant::now() + UNAVAILABLE_FOR;
    loop {
        let r = send()?;
        if !is_unavailable(&r) || Instant::now() >= deadline {
            return Ok(r);
        }
        counts.unavailable.fetch_add(1, Ordering::Relaxed);
        thread::sleep(Duration::from_millis(100));
    }
}

/// Overwriters, deleters and readers on `KEYS` keys through `remotes` for [`RUN`]; panics
/// on any answer that is not the old object, a new one or 404.
fn race(remotes: &[Remote], label: &str) {
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let gens = Arc::new(AtomicU64::new(1));
    let mut threads = Vec::new();
    // Two writers per key set: each PUT new content; one in ten is a DELETE.
    for w in 0..2usize {
        let (remote, stop, counts, gens) = (
            remotes[w % remotes.len()].clone(),
            stop.clone(),
            counts.clone(),
            gens.clone(),
        );
        threads.push(thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let key = format!("k{}", i % KEYS);
                let generation = gens.fetch_add(1, Ordering::Relaxed);
                let r = retrying(&counts, || {
                    if generation % 10 == 0 {
                        remote.delete(BUCKET, &key)
                    } else {
                        remote.put(BUCKET, &key, &body_of(generation))
                    }
                });
                match r {
                    Ok(r) if r.status == 200 || r.status == 204 => {
                        counts.writes.fetch_add(1, Ordering::Relaxed);
                    }
                    other => panic!("write {key}: {other:?}"),
                }
            }
        }));
    }
    // Readers: GET, HEAD and CopyObject of the raced keys.
    for r in 0..3usize {
        let (remote, stop, counts) = (
            remotes[(r + 1) % remotes.len()].clone(),
            stop.clone(),
            counts.clone(),
        );
        let label = label.to_string();
        threads.push(thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let key = format!("k{}", i % KEYS);
                match i % 4 {
                    0 => {
                        let dst = format!("copy-{r}");
                        let resp = retrying(&counts, || remote.copy(BUCKET, &key, &dst))
                            .unwrap_or_else(|e| panic!("{label}: COPY {key}: {e}"));
                        if resp.status == 404 {
                            counts.absent.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        assert!(
                            copy_acknowledged(&resp),
                            "{label}: COPY {key} -> {dst}: {} {}",
                            resp.status,
                            resp.text()
                        );
                        let got = retrying(&counts, || remote.get(BUCKET, &dst))
                            .unwrap_or_else(|e| panic!("{label}: GET {dst}: {e}"));
                        assert!(
                            got.status == 200 && genuine(&got.body),
                            "{label}: the copy of {key} is not a whole generation: {}",
                            got.status
                        );
                        counts.copies.fetch_add(1, Ordering::Relaxed);
                    }
                    1 => {
                        let resp = retrying(&counts, || {
                            remote
                                .signed("HEAD", &format!("/{BUCKET}/{key}"))
                                .try_send()
                        })
                        .unwrap_or_else(|e| panic!("{label}: HEAD {key}: {e}"));
                        assert!(
                            resp.status == 200 || resp.status == 404,
                            "{label}: HEAD {key}: {}",
                            resp.status
                        );
                        counts.heads.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        let resp = retrying(&counts, || remote.get(BUCKET, &key))
                            .unwrap_or_else(|e| panic!("{label}: GET {key}: {e}"));
                        match resp.status {
                            200 => assert!(
                                resp.complete && genuine(&resp.body),
                                "{label}: GET {key} answered bytes of no generation ({} bytes)",
                                resp.body.len()
                            ),
                            404 => {
                                counts.absent.fetch_add(1, Ordering::Relaxed);
                            }
                            s => panic!("{label}: GET {key}: {s} {}", resp.text()),
                        }
                        counts.gets.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    let started = Instant::now();
    while started.elapsed() < RUN && !threads.iter().any(|t| t.is_finished()) {
        thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        if let Err(panic) = t.join() {
            std::panic::resume_unwind(panic);
        }
    }
    println!(
        "{label}: {} writes raced {} GETs, {} HEADs, {} copies ({} answers 404, {} 503s \
         tried again), no other 5xx",
        counts.writes.load(Ordering::Relaxed),
        counts.gets.load(Ordering::Relaxed),
        counts.heads.load(Ordering::Relaxed),
        counts.copies.load(Ordering::Relaxed),
        counts.absent.load(Ordering::Relaxed),
        counts.unavailable.load(Ordering::Relaxed),
    );
    assert!(counts.gets.load(Ordering::Relaxed) > 100);
    assert!(counts.copies.load(Ordering::Relaxed) > 10);
}

/// Valkyrie acting at once on released content: the file is quarantined right after.
fn fast_valkyrie() -> ConfigFile {
    ConfigFile::new("[valkyrie]\ndeletion_interval_secs = 1\n")
}

#[test]
fn reads_racing_overwrites_on_one_node_answer_old_new_or_404() {
    let conf = fast_valkyrie();
    let gw = Gateway::start_with(
        &[
            "--config",
            conf.arg(),
            "--quarantine-secs",
            "1",
            "--slave-delay-secs",
            "1",
        ],
        &[],
    );
    let r = gw.signed("PUT", &format!("/{BUCKET}")).send();
    assert_eq!(r.status, 200, "{}", r.text());
    race(&[gw.remote()], "one node");
}

#[test]
fn reads_racing_overwrites_on_three_nodes_answer_old_new_or_404() {
    let cluster = Cluster::start(3, &[]);
    cluster.create_bucket(1, BUCKET);
    let remotes: Vec<Remote> = cluster.ids().iter().map(|&id| cluster.remote(id)).collect();
    race(&remotes, "three nodes");
}
