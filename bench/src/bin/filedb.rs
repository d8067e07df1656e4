//! `filedb`: FileDB's size per file and `inc` latency at 1 M and 10 M records, through the
//! gateway's own metadata crate (`meta`).
//!
//! Loading: `Command::InsertOrInc` applied by `meta::apply::apply`, many commands
//! per redb write transaction (one durable commit per batch): the same code path as the
//! gateway, batched, because 10 M durable transactions of one command each would take
//! hours. Measuring, at every size in the same alternating rounds (so that a shared
//! machine's load weighs on each alike): `MetaStore::execute(&Command::Inc)`, one durable
//! transaction each, exactly as the gateway's native `inc` does; plus `apply(Command::Inc)`
//! inside one uncommitted transaction, which isolates the B-tree cost from the fsync. The
//! smaller sizes are measured on copies of the file taken when the loader passed them.
//!
//! Built only with `--features filedb` (it links the metadata crate); the main harness runs
//! it and reads the `FILEDB_JSON` line it prints.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use bench::filedb_report::{FiledbReport, JSON_PREFIX, Point, record_key};
use bench::rng::Rng;
use bench::stats::Latency;
use clap::Parser;
use meta::{Command, MetaStore, apply::apply};
use placement::{Magic, PairId, Sha1};

#[derive(Parser, Debug)]
#[command(
    name = "filedb",
    about = "FileDB size and inc latency at growing sizes"
)]
struct Args {
    /// Folder for meta.redb (must exist; the file is created in it).
    #[arg(long)]
    dir: PathBuf,
    /// Record counts to measure at, ascending: the database grows from one to the next.
    #[arg(long, value_delimiter = ',', default_value = "1000000,10000000")]
    sizes: Vec<u64>,
    /// Durable `inc` calls timed at each size.
    #[arg(long, default_value_t = 1000)]
    inc_samples: usize,
    /// Commands per durable write transaction while loading. The gateway commits every
    /// command on its own; a loader must batch to finish, but a large batch rewrites most
    /// of the B-tree's leaves per commit and leaves the file up to twice as long as the
    /// records need. 1000 keeps that copy-on-write overhead to what the gateway's own
    /// commits leave behind.
    #[arg(long, default_value_t = 1000)]
    batch: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(r) => match serde_json::to_string(&r) {
            Ok(j) => {
                println!("{JSON_PREFIX}{j}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("filedb: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("filedb: {e}");
            ExitCode::FAILURE
        }
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn run(args: &Args) -> Result<FiledbReport, String> {
    if args.sizes.is_empty() || args.sizes.windows(2).any(|w| w[0] >= w[1]) {
        return Err("--sizes must be ascending".into());
    }
    let batch = args.batch.max(1);
    let path = args.dir.join("meta.redb");
    // The gateway's own open creates every table.
    drop(MetaStore::open(&path).map_err(err)?);
    let mut rng = Rng::new(args.seed ^ 0x00f1_1edb);
    let magic = |rng: &mut Rng| Magic::new(rng.magic()).map_err(err);
    let mut loaded = 0u64;
    let mut points = Vec::new();
    // The database at each size: copies for the smaller sizes, the file itself for the last.
    let mut snapshots: Vec<PathBuf> = Vec::new();
    for (idx, &target) in args.sizes.iter().enumerate() {
        let t = Instant::now();
        let from = loaded;
        {
            let db = redb::Database::create(&path).map_err(err)?;
            let mut next_report = loaded + 1_000_000;
            while loaded < target {
                let n = batch.min(target - loaded);
                let txn = db.begin_write().map_err(err)?;
                for i in loaded..loaded + n {
                    let cmd = Command::InsertOrInc {
                        sha1: Sha1(record_key(args.seed, i)),
                        magic: magic(&mut rng)?,
                        pair: PairId(0),
                    };
                    apply(&txn, &cmd).map_err(err)?;
                }
                txn.commit().map_err(err)?;
                loaded += n;
                if loaded >= next_report {
                    eprintln!(
                        "filedb: {loaded} records ({:.0}/s)",
                        (loaded - from) as f64 / t.elapsed().as_secs_f64()
                    );
                    next_report += 1_000_000;
                }
            }
        }
        let load_secs = t.elapsed().as_secs_f64();
        let md = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let snapshot = if idx + 1 < args.sizes.len() {
            let copy = args.dir.join(format!("meta-{target}.redb"));
            std::fs::copy(&path, &copy).map_err(|e| format!("copy {}: {e}", path.display()))?;
            copy
        } else {
            path.clone()
        };
        snapshots.push(snapshot);
        points.push(Point {
            records: loaded,
            file_bytes: md.len(),
            allocated_bytes: md.blocks() * 512,
            load_secs,
            load_records: loaded - from,
            ..Point::default()
        });
    }

    // Every size is measured in the same rounds, alternating, so that the load of a shared
    // machine (other processes' fsyncs above all) weighs on every size alike.
    let rounds = 20usize;
    let per = args.inc_samples.div_ceil(rounds).max(1);

    // The B-tree cost alone: Inc applied inside a transaction that is then aborted.
    {
        let dbs = snapshots
            .iter()
            .map(|p| redb::Database::create(p).map_err(err))
            .collect::<Result<Vec<_>, _>>()?;
        let txns = dbs
            .iter()
            .map(|db| db.begin_write().map_err(err))
            .collect::<Result<Vec<_>, _>>()?;
        let mut spent = vec![(0u128, 0usize); txns.len()];
        for _ in 0..rounds {
            for (k, txn) in txns.iter().enumerate() {
                let cmds = (0..per * 10)
                    .map(|_| {
                        Ok(Command::Inc {
                            sha1: Sha1(record_key(args.seed, rng.below(points[k].records))),
                            magic: magic(&mut rng)?,
                        })
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                let t = Instant::now();
                for cmd in &cmds {
                    apply(txn, cmd).map_err(err)?;
                }
                spent[k].0 += t.elapsed().as_nanos();
                spent[k].1 += cmds.len();
            }
        }
        for txn in txns {
            txn.abort().map_err(err)?;
        }
        for (p, (ns, n)) in points.iter_mut().zip(spent) {
            p.apply_inc_ns = ns as f64 / n.max(1) as f64;
        }
    }

    // What the gateway does for a native inc: one durable transaction each.
    {
        let stores = snapshots
            .iter()
            .map(|p| MetaStore::open(p).map_err(err))
            .collect::<Result<Vec<_>, _>>()?;
        let mut lats = vec![Vec::with_capacity(rounds * per); stores.len()];
        for _ in 0..rounds {
            for (k, store) in stores.iter().enumerate() {
                for _ in 0..per {
                    let cmd = Command::Inc {
                        sha1: Sha1(record_key(args.seed, rng.below(points[k].records))),
                        magic: magic(&mut rng)?,
                    };
                    let t = Instant::now();
                    store.execute(&cmd).map_err(err)?;
                    lats[k].push(t.elapsed().as_micros() as u64);
                }
            }
        }
        for (p, lat) in points.iter_mut().zip(lats.iter_mut()) {
            let l = Latency::of(lat);
            p.inc_samples = l.count;
            p.inc_p50_us = l.p50_us;
            p.inc_p99_us = l.p99_us;
            p.inc_mean_us = l.mean_us;
        }
    }

    // Last, squeeze each database (nothing grows them any more).
    for (p, snap) in points.iter_mut().zip(&snapshots) {
        p.compacted_bytes = compacted_len(snap)?;
        if snap != &path {
            let _ = std::fs::remove_file(snap);
        }
        eprintln!(
            "filedb: {} records: {} bytes ({:.1} per record; compacted {:.1}), load {:.1} s, inc p50 {} us p99 {} us, apply {:.0} ns",
            p.records,
            p.file_bytes,
            p.file_bytes as f64 / p.records as f64,
            p.compacted_bytes as f64 / p.records as f64,
            p.load_secs,
            p.inc_p50_us,
            p.inc_p99_us,
            p.apply_inc_ns
        );
    }
    Ok(FiledbReport {
        batch: batch as usize,
        points,
    })
}

/// Compacts the database in place and returns its new length.
fn compacted_len(path: &std::path::Path) -> Result<u64, String> {
    let mut db = redb::Database::create(path).map_err(err)?;
    // compact() returns false once there is nothing left to do; bounded all the same.
    for _ in 0..1000 {
        if !db.compact().map_err(err)? {
            break;
        }
    }
    drop(db);
    std::fs::metadata(path)
        .map(|m| m.len())
        .map_err(|e| format!("{}: {e}", path.display()))
}
