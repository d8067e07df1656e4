//! `raft-files`: the Raft log in a redb file of its own beside the state machine's
//! `meta.redb` (what the gateway does), or in `meta.redb` itself: which one writes faster.
//!
//! Both layouts run the gateway's storage pattern with its real metadata code: an appender
//! thread commits each log entry (a postcard `Vec<Command>` of `--batch` S3 PUTs) durably,
//! at most three entries ahead of an applier thread (the proposer's bound), which applies
//! every command with `meta::apply::apply` in its own non-durable transaction,
//! records the applied index without fsync, and makes the state machine durable once a
//! second (with quick-repair state), as `meta/raft/machine.rs` does. With one file, the
//! log's fsync also writes the state machine's dirty pages, and appends and applies share
//! one write lock. The figure is commands applied per second; the layouts alternate
//! round by round, each on a fresh folder under `--dir`.
//!
//! Built only with `--features filedb` (it links the gateway library).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::mpsc::sync_channel;
use std::time::{Duration, Instant};

use bench::offline;
use bench::raft::median;
use clap::Parser;
use meta::{Command, apply::apply};
use redb::{Database, Durability, TableDefinition};

/// The log table (named apart from every metadata table, so one file can hold both).
const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("bench_raft_log");
const APPLIED: TableDefinition<&str, u64> = TableDefinition::new("bench_raft_applied");
/// Entries appended ahead of the applier (the proposer's in-flight bound).
const AHEAD: usize = 3;
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Parser, Debug)]
#[command(
    name = "raft-files",
    about = "Raft log and state machine in one redb file or two"
)]
struct Args {
    /// Folder in which every run gets a fresh folder (its filesystem is measured).
    #[arg(long)]
    dir: PathBuf,
    /// Log entries per run.
    #[arg(long, default_value_t = 2000)]
    entries: u64,
    /// Commands per entry (comma-separated: each is measured).
    #[arg(long, value_delimiter = ',', default_value = "1,32")]
    batch: Vec<u64>,
    /// Alternating rounds of (two files, one file).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    Two,
    One,
}

impl Layout {
    fn label(self) -> &'static str {
        match self {
            Layout::Two => "two files (raft.redb + meta.redb)",
            Layout::One => "one file (log inside meta.redb)",
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("raft-files: {e}");
            ExitCode::FAILURE
        }
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn run(args: &Args) -> Result<(), String> {
    println!(
        "raft-files: {} entries per run, {} rounds, on {}",
        args.entries,
        args.rounds,
        args.dir.display()
    );
    for &batch in &args.batch {
        let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        for round in 0..args.rounds {
            // Alternate which layout goes first, so that neither always runs on a
            // machine just warmed (or loaded) by the other.
            let order = if round % 2 == 0 {
                [Layout::Two, Layout::One]
            } else {
                [Layout::One, Layout::Two]
            };
            for layout in order {
                let folder = tempfile::Builder::new()
                    .prefix("raft-files-")
                    .tempdir_in(&args.dir)
                    .map_err(err)?;
                let rate = one_run(folder.path(), layout, args.entries, batch)?;
                rates[layout as usize].push(rate);
            }
        }
        for layout in [Layout::Two, Layout::One] {
            let v = &rates[layout as usize];
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(0.0, f64::max);
            println!(
                "batch {batch:>4}: {:<36} {:>8.0} commands/s (range {lo:.0}-{hi:.0})",
                layout.label(),
                median(v.clone()).unwrap_or(0.0)
            );
        }
        if let (Some(two), Some(one)) = (median(rates[0].clone()), median(rates[1].clone())) {
            println!("batch {batch:>4}: two files / one file = {:.2}x", two / one);
        }
    }
    Ok(())
}

/// Appends and applies `entries` entries of `batch` commands; commands applied per second.
fn one_run(dir: &Path, layout: Layout, entries: u64, batch: u64) -> Result<f64, String> {
    let (meta, seed_cmds) = offline::open_data_folder(dir)?;
    drop(meta);
    let db = Arc::new(Database::create(dir.join("meta.redb")).map_err(err)?);
    {
        let txn = db.begin_write().map_err(err)?;
        for cmd in &seed_cmds {
            apply(&txn, cmd).map_err(err)?;
        }
        txn.open_table(APPLIED).map_err(err)?;
        txn.commit().map_err(err)?;
    }
    let log = match layout {
        Layout::Two => Arc::new(Database::create(dir.join("raft.redb")).map_err(err)?),
        Layout::One => db.clone(),
    };
    let now = offline::now_secs()?;
    let (tx, rx) = sync_channel::<Vec<Command>>(AHEAD);
    let start = Instant::now();
    let appender = std::thread::spawn(move || -> Result<(), String> {
        for e in 0..entries {
            let cmds: Vec<Command> = (e * batch..(e + 1) * batch)
                .map(|i| offline::object_put(1, i, (i as u32) | 1, now))
                .collect::<Result<_, _>>()?;
            let bytes = postcard::to_stdvec(&cmds).map_err(err)?;
            let txn = log.begin_write().map_err(err)?;
            txn.open_table(LOG)
                .map_err(err)?
                .insert(e, bytes.as_slice())
                .map_err(err)?;
            // Durability::Immediate: an entry counts once it is on disk.
            txn.commit().map_err(err)?;
            if tx.send(cmds).is_err() {
                return Err("the applier stopped".into());
            }
        }
        Ok(())
    });
    let mut last_checkpoint = Instant::now();
    let mut applied = 0u64;
    for cmds in rx {
        for cmd in &cmds {
            let mut txn = db.begin_write().map_err(err)?;
            txn.set_durability(Durability::None).map_err(err)?;
            apply(&txn, cmd).map_err(err)?;
            txn.commit().map_err(err)?;
        }
        applied += 1;
        let durable = last_checkpoint.elapsed() >= CHECKPOINT_INTERVAL;
        let mut txn = db.begin_write().map_err(err)?;
        txn.set_durability(if durable {
            Durability::Immediate
        } else {
            Durability::None
        })
        .map_err(err)?;
        txn.set_quick_repair(durable);
        txn.open_table(APPLIED)
            .map_err(err)?
            .insert("applied", applied)
            .map_err(err)?;
        txn.commit().map_err(err)?;
        if durable {
            last_checkpoint = Instant::now();
        }
    }
    appender
        .join()
        .map_err(|_| "the appender panicked".to_string())??;
    if applied != entries {
        return Err(format!("applied {applied} of {entries} entries"));
    }
    Ok((entries * batch) as f64 / start.elapsed().as_secs_f64())
}
