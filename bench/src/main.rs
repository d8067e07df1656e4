//! `bench`: how close the gateway comes to this machine's limits, and how far ahead of its
//! peers. Starts every server itself on 127.0.0.1 with a fresh temp data folder per
//! measured run, prints one table. `--quick` runs a reduced version of every workload.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bench::compare::{Contender, Kind, Op, Role};
use bench::filedb_report::{FiledbReport, JSON_PREFIX};
use bench::limits::{self, DiskRates, HashRates, Loopback, SmallFiles};
use bench::load::Outcome;
use bench::procs;
use bench::raft::{RaftBins, RaftPlan};
use bench::report::{Report, Row, fmt_ratio};
use bench::rng::Rng;
use bench::s3::Client;
use bench::scratch::{ScratchKind, Scratches};
use bench::stats::{bytes, cpu_time, mbps, us};
use bench::workloads::{self, BUCKET, Corpus, Gw, WriteCost};
use bytes::Bytes;
use clap::Parser;
use http::Method;

const MIB: usize = 1 << 20;
const KIB: usize = 1 << 10;

#[derive(Parser, Debug)]
#[command(
    name = "bench",
    about = "Benchmarks the gateway against this machine's limits and against peer S3 servers"
)]
struct Args {
    /// A reduced version of every workload (well under a minute): the CI smoke test.
    #[arg(long)]
    quick: bool,
    /// The gateway binary [default: `gateway` beside this binary, else target/debug/gateway]
    #[arg(long, env = "GATEWAY_BIN")]
    gateway_bin: Option<PathBuf>,
    /// Folder in which every measured run gets a fresh temp data folder; its filesystem is
    /// the one measured [default: the system temp folder]
    #[arg(long, env = "BENCH_DATA_ROOT")]
    data_root: Option<PathBuf>,
    /// Seed of every body, key, magic and of the corpus.
    #[arg(long, default_value_t = 20_260_601)]
    seed: u64,
    /// Do not run the peers even when they are installed.
    #[arg(long)]
    no_peers: bool,
    /// Folder searched first for the peers' binaries (garage, s3s-fs), before PATH and
    /// ~/.cargo/bin, e.g. the --root of their `cargo install` + `/bin`
    #[arg(long, env = "BENCH_PEERS_DIR")]
    peers_bin_dir: Option<PathBuf>,
    /// A second gateway binary measured in the same interleaved rounds of the side-by-side
    /// comparison (the before of a write-path change), rows labelled "gateway B"
    #[arg(long, env = "GATEWAY_B_BIN")]
    gateway_b: Option<PathBuf>,
    /// Interleaved rounds of the side-by-side comparison [default: 3; 1 with --quick]
    #[arg(long)]
    rounds: Option<usize>,
    /// Size of the sparse image of each measured run's fresh ext4 (loop device, as root)
    #[arg(long, default_value_t = 8)]
    fs_size_gib: u64,
    /// Fresh folders instead of a fresh ext4 per measured run, even as root
    #[arg(long)]
    no_loop_fs: bool,
    /// The `filedb` binary [default: `filedb` beside this binary; built with
    /// `cargo build --release -p bench --features filedb`]
    #[arg(long)]
    filedb_bin: Option<PathBuf>,
    /// A gateway built from the commit before replication (0a3ad8b), for the `raft` rows
    /// "1 node, before replication"; without it those rows are SKIPPED
    #[arg(long, env = "BASELINE_GATEWAY_BIN")]
    baseline_bin: Option<PathBuf>,
    /// The `load-objects` binary [default: `load-objects` beside this binary; built with
    /// `cargo build --release -p bench --features filedb`]
    #[arg(long)]
    load_objects_bin: Option<PathBuf>,
    /// Also write every figure as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Run only these workloads (the limits always run: every ratio needs them), e.g.
    /// `--only big` to profile the 8 MiB path [default: all]
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Workload>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Workload {
    /// 8 MiB objects: PUT, GET, dedup-hit PUT
    Big,
    /// 64 KiB objects: PUT, GET, dedup-hit PUT
    Small,
    /// CopyObject and native inc/dec
    Copy,
    /// the mail-like corpus
    Corpus,
    /// FileDB size and inc latency
    Filedb,
    /// side by side with garage, s3s-fs (and --gateway-b), interleaved rounds
    Peers,
    /// 8 MiB PUT with and without SHA-1 collision detection, interleaved rounds
    Sha1dc,
    /// replicated metadata: 1 node before/after and 3 nodes (64 KiB PUT, inc/dec),
    /// elections (kill -9, pause, heal), restart after kill -9 at 1 M / 10 M objects
    Raft,
    /// only the PUT and inc/dec rates of `raft`
    RaftRates,
    /// only the election trials of `raft`
    RaftElection,
    /// only the restart measurements of `raft`
    RaftRestart,
    /// foreground 64 KiB GET/PUT p99 with and without a delete-prefix job running
    Jobs,
    /// 64 KiB and 8 MiB PUT/GET over HTTPS against plain HTTP, interleaved rounds
    Tls,
    /// 64 KiB PUT/GET on a versioned bucket against an unversioned one, interleaved rounds
    Versioning,
    /// the splits of an index and a FileDB group of 1 M objects (loaded offline) while
    /// they serve
    GroupsSplit,
    /// metadata bytes per node on 1, 3, 5 and 6 nodes at replication factor 3
    GroupsSpread,
}

impl Args {
    fn runs(&self, w: Workload) -> bool {
        self.only.is_empty() || self.only.contains(&w)
    }

    /// The parts of the `raft` workload this run does (`raft` names all three).
    fn raft_parts(&self) -> bench::raft::RaftParts {
        let all = self.runs(Workload::Raft);
        bench::raft::RaftParts {
            rates: all || self.only.contains(&Workload::RaftRates),
            election: all || self.only.contains(&Workload::RaftElection),
            restart: all || self.only.contains(&Workload::RaftRestart),
        }
    }
}

/// How much of each workload a run does.
struct Plan {
    name: &'static str,
    hash_len: usize,
    disk_len: usize,
    loop_count: usize,
    big_count: usize,
    small_count: usize,
    copy_reps: usize,
    incdec_count: usize,
    corpus_distinct: usize,
    corpus_max_size: usize,
    corpus_item_cap: u64,
    filedb_sizes: Vec<u64>,
    filedb_inc_samples: usize,
    raft: RaftPlan,
    /// Interleaved rounds of the side-by-side comparison.
    rounds: usize,
    /// No workload runs longer than this (it stops early and reports what it did).
    limit: Duration,
}

impl Plan {
    fn quick() -> Plan {
        Plan {
            name: "quick",
            hash_len: 32 * MIB,
            disk_len: 128 * MIB,
            loop_count: 16,
            big_count: 16,
            small_count: 600,
            copy_reps: 5,
            incdec_count: 600,
            corpus_distinct: 60,
            corpus_max_size: 8 * MIB,
            corpus_item_cap: 32 << 20,
            filedb_sizes: vec![10_000, 100_000],
            filedb_inc_samples: 200,
            raft: RaftPlan {
                rounds: 1,
                put_count: 300,
                incdec_count: 600,
                election_trials: 2,
                restart_sizes: vec![10_000],
                restart_puts: 100,
                limit: Duration::from_secs(10),
                load_limit: Duration::from_secs(300),
            },
            rounds: 1,
            limit: Duration::from_secs(10),
        }
    }

    fn full() -> Plan {
        Plan {
            name: "full",
            hash_len: 256 * MIB,
            disk_len: 1024 * MIB,
            loop_count: 64,
            big_count: 64,
            small_count: 4000,
            copy_reps: 20,
            incdec_count: 3000,
            corpus_distinct: 400,
            corpus_max_size: 40 * MIB,
            corpus_item_cap: 256 << 20,
            filedb_sizes: vec![1_000_000, 10_000_000],
            filedb_inc_samples: 1000,
            raft: RaftPlan {
                rounds: 3,
                put_count: 4000,
                incdec_count: 6000,
                election_trials: 6,
                restart_sizes: vec![1_000_000, 10_000_000],
                restart_puts: 300,
                limit: Duration::from_secs(90),
                load_limit: Duration::from_secs(1800),
            },
            rounds: 3,
            limit: Duration::from_secs(90),
        }
    }
}

const BIG: usize = 8 * MIB;
const SMALL: usize = 64 * KIB;
const BIG_CONC: usize = 4;
const SMALL_CONC: usize = 32;

fn main() -> ExitCode {
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let json = args.json.clone();
    match rt.block_on(run(args)) {
        Ok(report) => {
            println!("{}", report.render());
            if let Some(path) = json {
                match serde_json::to_string_pretty(&report) {
                    Ok(text) => {
                        if let Err(e) = std::fs::write(&path, text) {
                            eprintln!("bench: {}: {e}", path.display());
                            return ExitCode::FAILURE;
                        }
                    }
                    Err(e) => {
                        eprintln!("bench: JSON: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
            if report.errors.is_empty() {
                ExitCode::SUCCESS
            } else {
                eprintln!("bench: {} workload(s) failed:", report.errors.len());
                for e in &report.errors {
                    eprintln!("  {e}");
                }
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn progress(msg: &str) {
    eprintln!("bench: {msg}");
}

/// `gateway` beside this binary (target/release), else the debug build.
fn find_gateway(arg: Option<PathBuf>) -> Result<(PathBuf, bool), String> {
    if let Some(p) = arg {
        return if p.is_file() {
            let debug = p.components().any(|c| c.as_os_str() == "debug");
            Ok((p, debug))
        } else {
            Err(format!("no gateway binary at {}", p.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let dir = exe
        .parent()
        .ok_or_else(|| "current_exe has no folder".to_string())?;
    let release = dir.join("gateway");
    if release.is_file() {
        return Ok((release, dir.ends_with("debug")));
    }
    let debug = dir.join("../debug/gateway");
    if debug.is_file() {
        return Ok((debug, true));
    }
    Err(format!(
        "no gateway binary at {}: build it with `cargo build --release -p gateway`, or pass --gateway-bin",
        release.display()
    ))
}

fn machine() -> Vec<String> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("unknown")
        .trim()
        .to_string();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("MemTotal"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map(|kb| bytes(kb * 1024))
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    vec![
        format!("cpu: {cores} x {model}"),
        format!("memory: {mem}"),
        format!(
            "load average at start: {}",
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        ),
    ]
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("blocking task: {e}"))?
}

fn cpu_us(o: &Outcome) -> String {
    format!("{:.0} us", o.client_us_per_op())
}

fn lat(o: &Outcome) -> String {
    format!("p50 {} p99 {}", us(o.latency.p50_us), us(o.latency.p99_us))
}

fn trunc(o: &Outcome, planned: usize) -> String {
    if o.truncated {
        format!(" [time limit: {} of {planned}]", o.ops)
    } else {
        String::new()
    }
}

/// The limits measured first, for the targets of the workloads.
#[derive(Default)]
struct Measured {
    hash: HashRates,
    disk: DiskRates,
    loopback: Option<Loopback>,
    /// The small-file limit's best group size (see [`limits::small_files`]).
    small_files: Option<SmallFiles>,
}

/// Group sizes the small-file limit tries: the gateway's pass at 32 connections takes up
/// to 32 uploads, and fewer or more may suit the disk better.
const SMALL_FILE_GROUPS: [usize; 5] = [8, 16, 32, 64, 128];

async fn run(args: Args) -> Result<Report, String> {
    let plan = if args.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    let started = Instant::now();
    let cpu_start = cpu_time();
    let (gateway_bin, debug_build) = find_gateway(args.gateway_bin.clone())?;
    let root = args.data_root.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    let root = root
        .canonicalize()
        .map_err(|e| format!("{}: {e}", root.display()))?;
    let mut rng = Rng::new(args.seed);
    let mut report = Report::default();
    let (kind, fallback) = ScratchKind::detect(args.fs_size_gib << 30, !args.no_loop_fs);
    let scratches = Scratches {
        root: root.clone(),
        kind,
    };
    report.note(format!(
        "run: {} plan, seed {}, gateway {}{}, data on {}{}",
        plan.name,
        args.seed,
        gateway_bin.display(),
        if debug_build {
            " (DEBUG BUILD: figures not representative)"
        } else {
            ""
        },
        scratches.describe(),
        fallback.map(|f| format!(" ({f})")).unwrap_or_default()
    ));
    for m in machine() {
        report.note(m);
    }
    let mut m = Measured::default();

    // ---- limits -------------------------------------------------------------------
    progress("limits: hashing, disk, loopback");
    let seed = rng.next_u64();
    let hash_len = plan.hash_len;
    m.hash = blocking(move || Ok(limits::hash_rates(hash_len, &mut Rng::new(seed)))).await?;
    let sec = "limits";
    report.info(sec, "SHA-1, 1 core", mbps(m.hash.sha1));
    report.info(
        sec,
        "SHA-1 with collision detection (sha1dc), 1 core",
        mbps(m.hash.sha1dc),
    );
    report.info(sec, "MD5, 1 core", mbps(m.hash.md5));
    report.info(sec, "CRC32, 1 core", mbps(m.hash.crc32));
    report.info(
        sec,
        "SHA-1(dc)+MD5+CRC32 one pass, 1 core (hash)",
        mbps(m.hash.combined),
    );
    report.info(
        sec,
        "the same pass with plain SHA-1 (no collision detection), 1 core",
        mbps(m.hash.combined_plain),
    );
    let probe_dir = scratches.fresh("limits")?;
    let (pd, disk_len, seed) = (
        probe_dir.path().to_path_buf(),
        plan.disk_len,
        rng.next_u64(),
    );
    let streams = 2 * BIG_CONC;
    match blocking(move || limits::disk_rates(&pd, disk_len, streams, &mut Rng::new(seed))).await {
        Ok(d) => {
            m.disk = d;
            report.info(
                sec,
                &format!(
                    "sequential write + fsync, 1 file of {}",
                    bytes(disk_len as u64)
                ),
                mbps(d.write_fsync),
            );
            report.info(
                sec,
                &format!(
                    "sequential write + fsync, {} streams of 8 MiB files",
                    d.streams
                ),
                mbps(d.write_fsync_parallel),
            );
            report.info(
                sec,
                "write / 2 (two copies; best of the two above)",
                mbps(d.write_best() / 2.0),
            );
            report.info(
                sec,
                "sequential read, cold (after DONTNEED)",
                mbps(d.read_cold),
            );
            report.info(
                sec,
                "sequential read, page cache, + CRC32, 1 core",
                mbps(d.read_cached_crc32),
            );
        }
        Err(e) => report.error(sec, "disk", e),
    }
    drop(probe_dir);
    for group in SMALL_FILE_GROUPS {
        // Each size on a filesystem of its own: no run inherits another's deletes.
        let dir = match scratches.fresh(&format!("limits-small-{group}")) {
            Ok(dir) => dir,
            Err(e) => {
                report.error(sec, "small files", e);
                continue;
            }
        };
        let (path, count, seed) = (dir.path().to_path_buf(), plan.small_count, rng.next_u64());
        let measured =
            blocking(move || limits::small_files(&path, count, SMALL, group, &mut Rng::new(seed)))
                .await;
        match measured {
            Ok(f) => {
                report.info(
                    sec,
                    &format!(
                        "64 KiB bodies x2, renamed into aa/bb, one syncfs per {group} uploads (1 thread)"
                    ),
                    format!("{:.0} uploads/s", f.uploads_per_sec),
                );
                if m.small_files
                    .is_none_or(|best| f.uploads_per_sec > best.uploads_per_sec)
                {
                    m.small_files = Some(f);
                }
            }
            Err(e) => report.error(sec, "small files", e),
        }
    }
    if let Some(best) = m.small_files {
        report.info(
            sec,
            "small-file limit (the best group size above)",
            format!(
                "{:.0} uploads/s (groups of {})",
                best.uploads_per_sec, best.group
            ),
        );
    }
    let mut lrng = Rng::new(rng.next_u64());
    match limits::loopback(BIG, plan.loop_count, BIG_CONC, plan.limit, &mut lrng).await {
        Ok(l) => {
            report.push(Row {
                section: sec.into(),
                figure: "loopback HTTP GET, 8 MiB, 4 connections".into(),
                measured: mbps(l.get.bytes_per_sec()),
                client_cpu: cpu_us(&l.get),
                ..Row::default()
            });
            report.push(Row {
                section: sec.into(),
                figure: "loopback HTTP PUT, 8 MiB, 4 connections".into(),
                measured: mbps(l.put.bytes_per_sec()),
                client_cpu: cpu_us(&l.put),
                ..Row::default()
            });
            m.loopback = Some(l);
        }
        Err(e) => report.error(sec, "loopback HTTP", e),
    }
    // The client's fixed cost per request: SigV4 signing.
    {
        let c = Client::new(
            "127.0.0.1:9".parse().map_err(|e| format!("{e}"))?,
            Some(("AKBENCH", "secretbench")),
            "us-east-1",
        );
        let n = 2000;
        let t = Instant::now();
        for i in 0..n {
            c.signed_headers(
                &Method::PUT,
                &format!("http://127.0.0.1:9/bench/k/{i}"),
                &[],
            )?;
        }
        report.info(
            sec,
            "client: SigV4 signing of one request",
            format!("{:.1} us", t.elapsed().as_secs_f64() * 1e6 / n as f64),
        );
    }

    // ---- 8 MiB objects --------------------------------------------------------------
    if args.runs(Workload::Big)
        && let Err(e) =
            big_objects(&gateway_bin, &scratches, &plan, &mut rng, &m, &mut report).await
    {
        report.error("8 MiB objects", "run", e);
    }
    // ---- 64 KiB objects ------------------------------------------------------------
    if args.runs(Workload::Small)
        && let Err(e) =
            small_objects(&gateway_bin, &scratches, &plan, &mut rng, &m, &mut report).await
    {
        report.error("64 KiB objects", "run", e);
    }
    // ---- CopyObject and the native API ---------------------------------------------
    if args.runs(Workload::Copy)
        && let Err(e) =
            copy_and_native(&gateway_bin, &scratches, &plan, &mut rng, &mut report).await
    {
        report.error("copy / native", "run", e);
    }
    // ---- storage efficiency ----------------------------------------------------------
    if args.runs(Workload::Corpus)
        && let Err(e) = corpus(
            &gateway_bin,
            &scratches,
            &plan,
            args.seed,
            &mut rng,
            &mut report,
        )
        .await
    {
        report.error("storage efficiency", "run", e);
    }
    // ---- FileDB ----------------------------------------------------------------------
    if args.runs(Workload::Filedb) {
        filedb(&args, &root, &plan, &mut report).await;
    }
    // ---- background jobs ------------------------------------------------------------
    if args.runs(Workload::Jobs) {
        progress("jobs: foreground latency with and without a delete-prefix job");
        let plan = bench::jobs::JobsPlan::new(args.quick);
        let run = async {
            let gw = start_gw(&gateway_bin, &scratches, "jobs", &mut rng).await?;
            bench::jobs::run(&gw, plan, &mut rng, &mut report).await
        };
        if let Err(e) = run.await {
            report.error("jobs", "run", e);
        }
    }
    // ---- replicated metadata -----------------------------------------------------------
    let parts = args.raft_parts();
    if parts.any() {
        match raft_bins(&args, &gateway_bin) {
            Ok(bins) => {
                if let Some(b) = &bins.baseline {
                    report.note(format!(
                        "raft baseline (before replication): {}",
                        b.display()
                    ));
                }
                bench::raft::run(
                    &bins,
                    &root,
                    &scratches,
                    &plan.raft,
                    parts,
                    &mut rng,
                    &mut report,
                )
                .await;
            }
            Err(e) => report.error(bench::raft::SEC_RATE, "binaries", e),
        }
    }
    if args.runs(Workload::GroupsSplit) {
        progress("groups-split: an index group's split while it serves");
        match raft_bins(&args, &gateway_bin) {
            Ok(bins) => {
                let plan = bench::groups::SplitPlan::new(args.quick);
                bench::groups::run(
                    &bins.gateway,
                    &bins.loader,
                    &scratches,
                    plan,
                    &mut rng,
                    &mut report,
                )
                .await;
            }
            Err(e) => report.error(bench::groups::SEC, "binaries", e),
        }
    }
    if args.runs(Workload::GroupsSpread) {
        progress("groups-spread: metadata bytes per node against node count");
        let plan = bench::spread::SpreadPlan::new(args.quick);
        bench::spread::run(&gateway_bin, &scratches, plan, &mut rng, &mut report).await;
    }
    // ---- side by side: peers, gateway B, SHA-1 collision detection off ---------------
    let compare = bench::compare::ComparePlan {
        rounds: args.rounds.unwrap_or(plan.rounds).max(1),
        small_count: plan.small_count,
        big_count: plan.big_count,
        limit: plan.limit,
    };
    match contenders(&args, &gateway_bin, &mut report) {
        Ok(list) if list.len() > 1 => {
            bench::compare::run(&list, &scratches, &compare, &mut rng, &mut report).await;
        }
        Ok(_) => {}
        Err(e) => report.error(bench::compare::SEC, "servers", e),
    }
    // ---- HTTPS against plain HTTP, interleaved rounds ------------------------------------
    if args.runs(Workload::Tls) {
        bench::tls::run(&gateway_bin, &scratches, &compare, &mut rng, &mut report).await;
    }
    // ---- a versioned bucket against an unversioned one, interleaved rounds --------------
    if args.runs(Workload::Versioning) {
        bench::versioning::run(&gateway_bin, &scratches, &compare, &mut rng, &mut report).await;
    }

    report.note(format!(
        "load average at end: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    ));
    report.note(format!(
        "harness: {:.0} s wall, {:.1} s CPU in total (client CPU/req is getrusage of the harness during each workload, divided by its requests)",
        started.elapsed().as_secs_f64(),
        cpu_time().saturating_sub(cpu_start).as_secs_f64()
    ));
    Ok(report)
}

/// The binaries of the `raft` workloads: the baseline must exist when it is named.
fn raft_bins(args: &Args, gateway: &Path) -> Result<RaftBins, String> {
    let baseline = match &args.baseline_bin {
        Some(p) if p.is_file() => Some(p.clone()),
        Some(p) => return Err(format!("no baseline gateway binary at {}", p.display())),
        None => None,
    };
    let loader = match &args.load_objects_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(|e| format!("current_exe: {e}"))?
            .with_file_name("load-objects"),
    };
    Ok(RaftBins {
        gateway: gateway.to_path_buf(),
        baseline,
        loader,
    })
}

fn write_cost_row(section: &str, figure: &str, c: &WriteCost, logical: u64) -> Row {
    Row {
        section: section.into(),
        figure: figure.into(),
        measured: format!(
            "server wrote {} = {:.2}x the bodies; disk folders {:+} files {:+} B; meta.redb {:+} B",
            bytes(c.written.max(0) as u64),
            c.written as f64 / logical.max(1) as f64,
            c.files_delta(),
            c.bytes_delta(),
            c.meta_after as i64 - c.meta_before as i64
        ),
        compared_with: "2 copies = 2.00x".into(),
        ..Row::default()
    }
}

/// The dedup-hit rows: rate against the unique PUT, and what reached the disk.
/// The bodies the unique PUT stored, again under new keys (`prefix`): the dedup-hit PUT,
/// and what it wrote.
async fn dedup_hit_put(
    gw: &Gw,
    sec: &str,
    bodies: &[Bytes],
    unique: &Outcome,
    (prefix, concurrency): (&str, usize),
    plan: &Plan,
    report: &mut Report,
) -> Result<(), String> {
    let dup_bodies = Arc::new(bodies[..unique.ops as usize].to_vec());
    let (dup, cost) = gw
        .measure_writes(|| {
            workloads::put_all(&gw.s3, BUCKET, prefix, &dup_bodies, concurrency, plan.limit)
        })
        .await?;
    dup.check(&format!("{sec}: dedup-hit PUT"))?;
    dedup_rows(report, sec, unique, &dup, &cost, dup_bodies.len());
    Ok(())
}

fn dedup_rows(
    report: &mut Report,
    section: &str,
    unique: &Outcome,
    dup: &Outcome,
    cost: &WriteCost,
    planned: usize,
) {
    let ratio = dup.ops_per_sec() / unique.ops_per_sec().max(1e-9);
    report.target(
        section,
        "dedup-hit PUT (same bodies, new keys)",
        format!(
            "{:.1} ops/s ({}, {}){}",
            dup.ops_per_sec(),
            mbps(dup.bytes_per_sec()),
            lat(dup),
            trunc(dup, planned)
        ),
        format!("unique PUT {:.1} ops/s", unique.ops_per_sec()),
        ratio,
        ">= 1.50x",
        ratio >= 1.5,
        cpu_us(dup),
    );
    let clean = cost.files_delta() == 0 && cost.bytes_delta() == 0;
    report.push(Row {
        section: section.into(),
        figure: "dedup-hit PUT: new bytes in disk folders".into(),
        measured: format!(
            "{:+} files, {:+} B (disk0+disk1, temp files included)",
            cost.files_delta(),
            cost.bytes_delta()
        ),
        compared_with: "0".into(),
        target: "= 0".into(),
        status: if clean { "MET" } else { "NOT MET" }.into(),
        ..Row::default()
    });
    // Bodies held in memory until hashed cost a duplicate no data write at all; a body
    // streamed to disk (over 16 MiB, or past the memory budget) costs two temp copies that
    // are removed unsynced (the kernel may still have written some of them).
    report.push(Row {
        section: section.into(),
        figure: "dedup-hit PUT: /proc/<gateway>/io write_bytes".into(),
        measured: format!(
            "{} for {} of duplicate bodies; meta.redb {:+} B",
            signed_bytes(cost.written),
            bytes(dup.bytes),
            cost.meta_after as i64 - cost.meta_before as i64
        ),
        compared_with: "the bodies".into(),
        ratio: fmt_ratio(cost.written as f64 / dup.bytes.max(1) as f64),
        ..Row::default()
    });
}

fn signed_bytes(n: i64) -> String {
    if n < 0 {
        format!("-{}", bytes(n.unsigned_abs()))
    } else {
        bytes(n as u64)
    }
}

async fn start_gw(
    bin: &Path,
    scratches: &Scratches,
    tag: &str,
    rng: &mut Rng,
) -> Result<Gw, String> {
    let dir = scratches.fresh(&format!("gw-{tag}"))?;
    let gw = tokio::task::block_in_place(|| Gw::start_in(bin, dir, &[], rng))?;
    gw.s3.create_bucket(BUCKET).await?;
    Ok(gw)
}

async fn big_objects(
    bin: &Path,
    scratches: &Scratches,
    plan: &Plan,
    rng: &mut Rng,
    m: &Measured,
    report: &mut Report,
) -> Result<(), String> {
    let sec = "8 MiB objects, 4 clients";
    progress("8 MiB objects: PUT, GET, dedup-hit PUT");
    let bodies = workloads::bodies(rng, plan.big_count, BIG);
    let gw = start_gw(bin, scratches, "8mib", rng).await?;
    let (put, put_cost) = gw
        .measure_writes(|| workloads::put_all(&gw.s3, BUCKET, "u8m", &bodies, BIG_CONC, plan.limit))
        .await?;
    put.check("8 MiB PUT")?;
    let limit = m.hash.combined.min(m.disk.write_best() / 2.0);
    let ratio = put.bytes_per_sec() / limit.max(1.0);
    report.target(
        sec,
        "PUT unique",
        format!(
            "{} ({:.1} ops/s, {}){}",
            mbps(put.bytes_per_sec()),
            put.ops_per_sec(),
            lat(&put),
            trunc(&put, plan.big_count)
        ),
        format!(
            "min(hash {}, write/2 {}) = {}",
            mbps(m.hash.combined),
            mbps(m.disk.write_best() / 2.0),
            mbps(limit)
        ),
        ratio,
        ">= 0.80x",
        ratio >= 0.8,
        cpu_us(&put),
    );
    report.push(write_cost_row(
        sec,
        "PUT unique: bytes the server wrote",
        &put_cost,
        put.bytes,
    ));
    let get = workloads::get_all(
        &gw.s3,
        BUCKET,
        "u8m",
        put.ops as usize,
        BIG as u64,
        BIG_CONC,
        plan.limit,
    )
    .await;
    get.check("8 MiB GET")?;
    let lb = m
        .loopback
        .as_ref()
        .map(|l| l.get.bytes_per_sec())
        .unwrap_or(0.0);
    let limit = m.disk.read_cached_crc32.min(lb);
    let ratio = get.bytes_per_sec() / limit.max(1.0);
    report.target(
        sec,
        "GET",
        format!(
            "{} ({:.1} ops/s, {}){}",
            mbps(get.bytes_per_sec()),
            get.ops_per_sec(),
            lat(&get),
            trunc(&get, put.ops as usize)
        ),
        format!(
            "min(read+CRC32 {}, loopback {}) = {}",
            mbps(m.disk.read_cached_crc32),
            mbps(lb),
            mbps(limit)
        ),
        ratio,
        ">= 0.80x",
        ratio >= 0.8,
        cpu_us(&get),
    );
    dedup_hit_put(&gw, sec, &bodies, &put, ("d8m", BIG_CONC), plan, report).await
}

async fn small_objects(
    bin: &Path,
    scratches: &Scratches,
    plan: &Plan,
    rng: &mut Rng,
    m: &Measured,
    report: &mut Report,
) -> Result<(), String> {
    let sec = "64 KiB objects, 32 connections";
    progress("64 KiB objects: PUT, GET, dedup-hit PUT");
    let bodies = workloads::bodies(rng, plan.small_count, SMALL);
    let gw = start_gw(bin, scratches, "64kib", rng).await?;
    let (put, put_cost) = gw
        .measure_writes(|| {
            workloads::put_all(&gw.s3, BUCKET, "u64k", &bodies, SMALL_CONC, plan.limit)
        })
        .await?;
    put.check("64 KiB PUT")?;
    let measured = format!(
        "{:.0} ops/s ({}, {}){}",
        put.ops_per_sec(),
        mbps(put.bytes_per_sec()),
        lat(&put),
        trunc(&put, plan.small_count)
    );
    match m.small_files {
        Some(limit) => {
            let ratio = put.ops_per_sec() / limit.uploads_per_sec.max(1e-9);
            report.target(
                sec,
                "PUT unique",
                measured,
                format!("small-file limit {:.0} uploads/s", limit.uploads_per_sec),
                ratio,
                ">= 0.90x",
                ratio >= 0.9,
                cpu_us(&put),
            );
        }
        None => report.push(Row {
            section: sec.into(),
            figure: "PUT unique".into(),
            measured,
            client_cpu: cpu_us(&put),
            ..Row::default()
        }),
    }
    report.push(write_cost_row(
        sec,
        "PUT unique: bytes the server wrote",
        &put_cost,
        put.bytes,
    ));
    let get = workloads::get_all(
        &gw.s3,
        BUCKET,
        "u64k",
        put.ops as usize,
        SMALL as u64,
        SMALL_CONC,
        plan.limit,
    )
    .await;
    get.check("64 KiB GET")?;
    report.push(Row {
        section: sec.into(),
        figure: "GET".into(),
        measured: format!(
            "{:.0} ops/s ({}, {}){}",
            get.ops_per_sec(),
            mbps(get.bytes_per_sec()),
            lat(&get),
            trunc(&get, put.ops as usize)
        ),
        client_cpu: cpu_us(&get),
        ..Row::default()
    });
    dedup_hit_put(&gw, sec, &bodies, &put, ("d64k", SMALL_CONC), plan, report).await
}

async fn copy_and_native(
    bin: &Path,
    scratches: &Scratches,
    plan: &Plan,
    rng: &mut Rng,
    report: &mut Report,
) -> Result<(), String> {
    let sec = "CopyObject, native API";
    progress("CopyObject 1 MiB / 100 MiB, native inc/dec");
    let gw = start_gw(bin, scratches, "copy", rng).await?;
    let c = workloads::copies(&gw, MIB, 100 * MIB, plan.copy_reps, rng).await?;
    report.info(
        sec,
        "CopyObject of a 1 MiB object",
        format!(
            "p50 {} p99 {} ({} copies)",
            us(c.small.p50_us),
            us(c.small.p99_us),
            c.small.count
        ),
    );
    let ratio = c.large.p50_us as f64 / c.small.p50_us.max(1) as f64;
    report.target(
        sec,
        "CopyObject of a 100 MiB object",
        format!(
            "p50 {} p99 {} ({} copies)",
            us(c.large.p50_us),
            us(c.large.p99_us),
            c.large.count
        ),
        format!("1 MiB copy p50 {}", us(c.small.p50_us)),
        ratio,
        "<= 2.00x (O(1))",
        ratio <= 2.0,
        String::new(),
    );
    report.info(
        sec,
        "CopyObject: what the copies wrote",
        format!(
            "disk folders {:+} files {:+} B; server wrote {} for {} of copied bodies",
            c.cost.files_delta(),
            c.cost.bytes_delta(),
            bytes(c.cost.written.max(0) as u64),
            bytes(((c.small_size + c.large_size) * plan.copy_reps) as u64)
        ),
    );
    let (inc, dec) =
        workloads::native_inc_dec(&gw, 16, plan.incdec_count, SMALL_CONC, plan.limit, rng).await?;
    inc.check("native inc")?;
    dec.check("native dec")?;
    for (name, o) in [
        ("native inc, 32 connections", &inc),
        ("native dec, 32 connections", &dec),
    ] {
        report.push(Row {
            section: sec.into(),
            figure: name.into(),
            measured: format!(
                "{:.0} ops/s ({}){}",
                o.ops_per_sec(),
                lat(o),
                trunc(o, plan.incdec_count)
            ),
            client_cpu: cpu_us(o),
            ..Row::default()
        });
    }
    Ok(())
}

async fn corpus(
    bin: &Path,
    scratches: &Scratches,
    plan: &Plan,
    seed: u64,
    rng: &mut Rng,
    report: &mut Report,
) -> Result<(), String> {
    let sec = "storage efficiency";
    progress("mail-like corpus");
    let corpus = Corpus::generate(
        seed,
        plan.corpus_distinct,
        plan.corpus_max_size,
        plan.corpus_item_cap,
    );
    let gw = start_gw(bin, scratches, "corpus", rng).await?;
    let limit = plan.limit * 3;
    let up = workloads::upload_corpus(&gw.s3, &corpus, BIG_CONC, limit).await;
    up.check("corpus upload")?;
    if up.truncated {
        return Err(format!(
            "corpus upload hit the time limit ({} of {} references)",
            up.ops,
            corpus.references()
        ));
    }
    let disks = gw.disks()?;
    let meta = gw.meta_bytes();
    let distinct = corpus.distinct_bytes();
    let ideal = 2 * distinct;
    report.info(
        sec,
        "corpus",
        format!(
            "{} attachments, {} distinct ({} to {}), {} references (up to {} copies of one), seed {}",
            corpus.sizes.len(),
            bytes(distinct),
            bytes(corpus.sizes.iter().copied().min().unwrap_or(0) as u64),
            bytes(corpus.sizes.iter().copied().max().unwrap_or(0) as u64),
            corpus.references(),
            corpus.max_copies(),
            seed
        ),
    );
    report.push(Row {
        section: sec.into(),
        figure: "logical bytes stored".into(),
        measured: format!(
            "{} ({:.1} MB/s upload, 4 clients)",
            bytes(corpus.logical_bytes()),
            up.bytes_per_sec() / 1e6
        ),
        client_cpu: cpu_us(&up),
        ..Row::default()
    });
    let r = disks.bytes as f64 / ideal as f64;
    report.target(
        sec,
        "physical bytes on the disks (file sizes)",
        format!(
            "{} in {} files; logical/physical {:.2}x",
            bytes(disks.bytes),
            disks.files,
            corpus.logical_bytes() as f64 / disks.bytes.max(1) as f64
        ),
        format!(
            "ideal 2 x distinct = {} in {} files",
            bytes(ideal),
            2 * corpus.sizes.len()
        ),
        r,
        "<= 1.01x",
        r <= 1.01 && disks.files == 2 * corpus.sizes.len() as u64,
        String::new(),
    );
    report.push(Row {
        section: sec.into(),
        figure: "physical bytes on the disks (allocated blocks)".into(),
        measured: bytes(disks.allocated),
        compared_with: format!("ideal {}", bytes(ideal)),
        ratio: fmt_ratio(disks.allocated as f64 / ideal as f64),
        ..Row::default()
    });
    report.push(Row {
        section: sec.into(),
        figure: "metadata bytes per distinct file".into(),
        measured: format!(
            "{:.0} B (meta.redb {} / {} files; allocated {}; {:.0} B per object key; the S3 index and redb's fixed overhead included)",
            meta as f64 / corpus.sizes.len().max(1) as f64,
            bytes(meta),
            corpus.sizes.len(),
            bytes(gw.meta_allocated()),
            meta as f64 / corpus.references().max(1) as f64
        ),
        ..Row::default()
    });
    Ok(())
}

async fn filedb(args: &Args, root: &Path, plan: &Plan, report: &mut Report) {
    let sec = "FileDB (redb, Command path)";
    let bin = match &args.filedb_bin {
        Some(p) => p.clone(),
        None => match std::env::current_exe() {
            Ok(exe) => exe.with_file_name("filedb"),
            Err(e) => {
                report.error(sec, "filedb binary", format!("current_exe: {e}"));
                return;
            }
        },
    };
    if !bin.is_file() {
        report.skipped(
            sec,
            "bytes per file, inc latency",
            format!(
                "no {}: build it with `cargo build --release -p bench --features filedb`",
                bin.display()
            ),
        );
        return;
    }
    progress(&format!(
        "FileDB: loading {} records",
        plan.filedb_sizes
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(", then ")
    ));
    let dir = match tempfile::Builder::new()
        .prefix("bench-filedb-")
        .tempdir_in(root)
    {
        Ok(d) => d,
        Err(e) => {
            report.error(sec, "temp folder", e.to_string());
            return;
        }
    };
    let sizes = plan
        .filedb_sizes
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let child = tokio::process::Command::new(&bin)
        .arg("--dir")
        .arg(dir.path())
        .args(["--sizes", &sizes])
        .args(["--inc-samples", &plan.filedb_inc_samples.to_string()])
        .args(["--seed", &args.seed.to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            report.error(sec, "filedb", format!("{}: {e}", bin.display()));
            return;
        }
    };
    let out = match tokio::time::timeout(Duration::from_secs(1800), child.wait_with_output()).await
    {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => {
            report.error(sec, "filedb", e.to_string());
            return;
        }
        Err(_) => {
            report.error(sec, "filedb", "no result within 30 minutes".into());
            return;
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let parsed: Option<FiledbReport> = stdout
        .lines()
        .find_map(|l| l.strip_prefix(JSON_PREFIX))
        .and_then(|j| serde_json::from_str(j).ok());
    let Some(fr) = parsed.filter(|_| out.status.success()) else {
        report.error(
            sec,
            "filedb",
            format!(
                "{} exited with {}: {}",
                bin.display(),
                out.status,
                stdout.trim()
            ),
        );
        return;
    };
    let human = |n: u64| {
        if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
            format!("{} M", n / 1_000_000)
        } else if n >= 1000 && n.is_multiple_of(1000) {
            format!("{} k", n / 1000)
        } else {
            n.to_string()
        }
    };
    for p in &fr.points {
        // On disk is what the file occupies: its allocated blocks. redb grows its file by
        // doubling (set_len, sparse) and writes pages as it needs them, so the length is
        // address space reserved, not space used; both are shown.
        let per = p.allocated_bytes as f64 / p.records.max(1) as f64;
        report.target(
            sec,
            &format!("bytes per file at {} records", human(p.records)),
            format!(
                "{:.1} B on disk (meta.redb allocated {}; length {} = {:.1} B/file, sparse; after compact {:.1} B/file); loaded at {:.0} records/s, {} per transaction",
                per,
                bytes(p.allocated_bytes),
                bytes(p.file_bytes),
                p.file_bytes as f64 / p.records.max(1) as f64,
                p.compacted_bytes as f64 / p.records.max(1) as f64,
                p.load_records as f64 / p.load_secs.max(1e-9),
                fr.batch
            ),
            "64 B".into(),
            per / 64.0,
            "<= 64 B",
            per <= 64.0,
            String::new(),
        );
        report.info(
            sec,
            &format!("inc at {} records", human(p.records)),
            format!(
                "durable execute: p50 {} p99 {} mean {} ({} samples); apply only: {:.2} us",
                us(p.inc_p50_us),
                us(p.inc_p99_us),
                us(p.inc_mean_us),
                p.inc_samples,
                p.apply_inc_ns / 1000.0
            ),
        );
    }
    if let (Some(a), Some(b)) = (fr.points.first(), fr.points.last())
        && fr.points.len() >= 2
    {
        let r = b.inc_p50_us as f64 / a.inc_p50_us.max(1) as f64;
        report.target(
            sec,
            &format!("inc p50 at {} vs {}", human(b.records), human(a.records)),
            format!(
                "{} vs {} (apply only: {:.2} vs {:.2} us)",
                us(b.inc_p50_us),
                us(a.inc_p50_us),
                b.apply_inc_ns / 1000.0,
                a.apply_inc_ns / 1000.0
            ),
            format!("{} records", human(a.records)),
            r,
            "<= 1.50x",
            r <= 1.5,
            String::new(),
        );
    }
}

/// The servers of the side-by-side comparison: the gateway, gateway B, the peers that
/// are installed (at their defaults; garage with fsync as an extra row), and the gateway
/// with SHA-1 collision detection off (its 8 MiB PUT only).
fn contenders(args: &Args, gateway: &Path, report: &mut Report) -> Result<Vec<Contender>, String> {
    let sec = bench::compare::SEC;
    let gw = |label: &str, bin: &Path, extra: &[&str], ops: &[Op], role| Contender {
        label: label.into(),
        kind: Kind::Gateway {
            bin: bin.to_path_buf(),
            args: extra.iter().map(|s| s.to_string()).collect(),
        },
        ops: ops.to_vec(),
        role,
    };
    let mut list = vec![gw("gateway", gateway, &[], &Op::ALL, Role::Gateway)];
    let peers = args.runs(Workload::Peers);
    if peers && let Some(b) = &args.gateway_b {
        if !b.is_file() {
            return Err(format!("no gateway B binary at {}", b.display()));
        }
        report.note(format!("gateway B: {}", b.display()));
        list.push(gw("gateway B", b, &[], &Op::ALL, Role::GatewayB));
    }
    if peers && args.no_peers {
        report.skipped(sec, "garage, s3s-fs", "--no-peers".into());
    } else if peers {
        let dir = args.peers_bin_dir.as_deref();
        let hint = |what: &str| {
            format!(
                "not installed ({what}; looked in {}PATH and ~/.cargo/bin)",
                dir.map(|d| format!("{}, ", d.display()))
                    .unwrap_or_default()
            )
        };
        match procs::find_binary_in(dir, "s3s-fs") {
            Some(bin) => list.push(Contender {
                label: "s3s-fs".into(),
                kind: Kind::S3sFs { bin },
                ops: Op::ALL.to_vec(),
                role: Role::Peer,
            }),
            None => report.skipped(
                sec,
                "s3s-fs",
                hint("cargo install s3s-fs@0.14.1 --features binary --locked"),
            ),
        }
        match procs::find_binary_in(dir, "garage") {
            Some(bin) => {
                for (label, fsync, role) in [
                    ("garage", false, Role::Peer),
                    ("garage, data_fsync + metadata_fsync", true, Role::PeerExtra),
                ] {
                    list.push(Contender {
                        label: label.into(),
                        kind: Kind::Garage {
                            bin: bin.clone(),
                            fsync,
                        },
                        ops: Op::ALL.to_vec(),
                        role,
                    });
                }
            }
            None => report.skipped(sec, "garage", hint("cargo install garage@2.5.0 --locked")),
        }
    }
    if args.runs(Workload::Sha1dc) {
        list.push(gw(
            "gateway, SHA-1 collision detection off",
            gateway,
            &["--sha1-collision-detection", "off"],
            &[Op::Put8],
            Role::NoDetection,
        ));
    }
    Ok(list)
}
