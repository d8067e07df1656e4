//! `load-objects`: a gateway data folder holding N S3 objects, written offline through the
//! gateway's own metadata code (`gateway::meta`), for the restart-after-`kill -9` figure.
//!
//! The folder is what a gateway from before replication leaves: `meta.redb` with PairDB
//! (pair 0 = the folder's own `disk0`/`disk1`), one bucket and N objects referencing N/2
//! distinct contents (two objects per FileDB record), and no Raft state. Every command is
//! `Command::PutObject` with `ContentSource::Stored`, applied by
//! `gateway::meta::apply::apply`, many per durable redb write transaction: N HTTP PUTs (or
//! N durable transactions) would take hours at 10 M. The content files are not written:
//! the restart measurement reads only what the write load before the kill stored.
//!
//! Built only with `--features filedb` (it links the gateway library); the main harness runs
//! it and reads the `LOAD_OBJECTS_JSON` line it prints.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bench::filedb_report::record_key;
use bench::objects_report::{JSON_PREFIX, LOADED_BUCKET, LoadReport, loaded_key};
use bench::rng::Rng;
use clap::Parser;
use gateway::meta::{Command, ContentSource, MetaStore, ObjectRecord, apply::apply};
use placement::{DiskRef, Magic, PairId, PairRecord, Sha1};

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
    let io = |p: &std::path::Path, e: std::io::Error| format!("{}: {e}", p.display());
    for d in [
        args.data.clone(),
        args.data.join("disk0"),
        args.data.join("disk1"),
    ] {
        std::fs::create_dir_all(&d).map_err(|e| io(&d, e))?;
    }
    // The gateway names its default pair by the canonical folder.
    let data = args.data.canonicalize().map_err(|e| io(&args.data, e))?;
    let path = data.join("meta.redb");
    if path.exists() {
        return Err(format!("{} exists already", path.display()));
    }
    // The gateway's own open creates every table.
    drop(MetaStore::open(&path).map_err(err)?);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(err)?
        .as_secs();
    let batch = args.batch.max(1);
    let mut rng = Rng::new(args.seed ^ 0x00b1_ec75);
    let t = Instant::now();
    let db = redb::Database::create(&path).map_err(err)?;
    {
        let txn = db.begin_write().map_err(err)?;
        let pair = PairRecord::new([
            DiskRef::local(data.join("disk0")),
            DiskRef::local(data.join("disk1")),
        ]);
        for cmd in [
            Command::PutPair {
                id: PairId(0),
                record: pair,
            },
            Command::CreateBucket {
                bucket: LOADED_BUCKET.into(),
                created_ms: now * 1000,
            },
        ] {
            apply(&txn, &cmd).map_err(err)?;
        }
        txn.commit().map_err(err)?;
    }
    let mut loaded = 0u64;
    let mut next_report = 1_000_000u64;
    while loaded < args.count {
        let n = batch.min(args.count - loaded);
        let txn = db.begin_write().map_err(err)?;
        for i in loaded..loaded + n {
            let sha1 = record_key(args.seed, i / 2);
            let mut md5 = [0u8; 16];
            md5.copy_from_slice(&sha1[..16]);
            let object = ObjectRecord::new(
                Sha1(sha1),
                Magic::new(rng.magic()).map_err(err)?,
                4096,
                u32::from_le_bytes([sha1[16], sha1[17], sha1[18], sha1[19]]),
                md5,
            );
            let cmd = Command::PutObject {
                bucket: LOADED_BUCKET.into(),
                key: loaded_key(i),
                object,
                source: ContentSource::Stored(PairId(0)),
                now_secs: now,
                precondition: None,
            };
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
    let md = std::fs::metadata(&path).map_err(|e| io(&path, e))?;
    Ok(LoadReport {
        objects: loaded,
        contents: loaded.div_ceil(2),
        batch,
        load_secs,
        file_bytes: md.len(),
        allocated_bytes: md.blocks() * 512,
    })
}
