//! `load-objects`: a gateway data folder holding N S3 objects, written offline through the
//! gateway's own metadata crate (`meta`), for the restart-after-`kill -9` figure.
//!
//! The folder is what a gateway from before replication leaves: `meta.redb` with PairDB
//! (pair 0 = the folder's own `disk0`/`disk1`), one bucket and N objects referencing N/2
//! distinct contents (two objects per FileDB record), and no Raft state. Every command is
//! `Command::PutObject` with `ContentSource::Stored`, applied by
//! `meta::apply::apply`, many per durable redb write transaction: N HTTP PUTs (or
//! N durable transactions) would take hours at 10 M. The content files are not written:
//! the restart measurement reads only what the write load before the kill stored.
//!
//! Built only with `--features filedb` (it links the gateway library); the main harness runs
//! it and reads the `LOAD_OBJECTS_JSON` line it prints.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use bench::objects_report::{JSON_PREFIX, LoadReport};
use bench::offline;
use bench::rng::Rng;
use clap::Parser;
use meta::apply::apply;

#[derive(Parser, Debug)]
#[command(
    name = "load-objects",
    about = "A gateway data folder with N objects, written offline"
)]
struct Args {
    /// The data folder to fill (created; must not hold meta.redb yet).
    #[arg(long)]
    data: PathBuf,
    /// Objects to write; they reference count/2 distinct contents.
    #[arg(long)]
    count: u64,
    /// Commands per durable write transaction.
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
                eprintln!("load-objects: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("load-objects: {e}");
            ExitCode::FAILURE
        }
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn run(args: &Args) -> Result<LoadReport, String> {
    let (store, seed_cmds) = offline::open_data_folder(&args.data)?;
    drop(store);
    let path = args.data.join("meta.redb");
    let now = offline::now_secs()?;
    let batch = args.batch.max(1);
    let mut rng = Rng::new(args.seed ^ 0x00b1_ec75);
    let t = Instant::now();
    let db = redb::Database::create(&path).map_err(err)?;
    {
        let txn = db.begin_write().map_err(err)?;
        for cmd in &seed_cmds {
            apply(&txn, cmd).map_err(err)?;
        }
        txn.commit().map_err(err)?;
    }
    let mut loaded = 0u64;
    let mut next_report = 1_000_000u64;
    while loaded < args.count {
        let n = batch.min(args.count - loaded);
        let txn = db.begin_write().map_err(err)?;
        for i in loaded..loaded + n {
            let cmd = offline::object_put(args.seed, i, rng.magic(), now)?;
            apply(&txn, &cmd).map_err(err)?;
        }
        txn.commit().map_err(err)?;
        loaded += n;
        if loaded >= next_report {
            eprintln!(
                "load-objects: {loaded} objects ({:.0}/s)",
                loaded as f64 / t.elapsed().as_secs_f64()
            );
            next_report += 1_000_000;
        }
    }
    drop(db);
    let load_secs = t.elapsed().as_secs_f64();
    let md = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(LoadReport {
        objects: loaded,
        contents: loaded.div_ceil(2),
        batch,
        load_secs,
        file_bytes: md.len(),
        allocated_bytes: md.blocks() * 512,
    })
}
