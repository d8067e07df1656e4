//! Metadata written offline through the gateway's metadata crate (`meta`): the data
//! folders of the `load-objects` and `raft-files` binaries. Only with `--features filedb`.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use meta::{Command, ContentSource, MetaStore, ObjectRecord};
use placement::{DiskRef, Magic, PairId, PairRecord, Sha1};

use crate::filedb_report::record_key;
use crate::objects_report::{LOADED_BUCKET, loaded_key};

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Seconds since the epoch, as commands carry them.
pub fn now_secs() -> Result<u64, String> {
    Ok(SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(err)?
        .as_secs())
}

/// Makes `dir` a gateway data folder: `disk0`, `disk1` and a `meta.redb` with every table
/// (the gateway's own open creates them). Answers the store and the commands that give it
/// its pair 0 (the two folders, named canonically as the gateway names them) and the
/// bucket of the loaded objects, for the caller to apply in its own transaction.
pub fn open_data_folder(dir: &Path) -> Result<(MetaStore, [Command; 2]), String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    for d in [dir.to_path_buf(), dir.join("disk0"), dir.join("disk1")] {
        std::fs::create_dir_all(&d).map_err(|e| io(&d, e))?;
    }
    let data: PathBuf = dir.canonicalize().map_err(|e| io(dir, e))?;
    let path = data.join("meta.redb");
    if path.exists() {
        return Err(format!("{} exists already", path.display()));
    }
    let store = MetaStore::open(&path).map_err(err)?;
    let pair = PairRecord::new([
        DiskRef::local(data.join("disk0")),
        DiskRef::local(data.join("disk1")),
    ]);
    let seed = [
        Command::PutPair {
            id: PairId(0),
            record: pair,
        },
        Command::CreateBucket {
            bucket: LOADED_BUCKET.into(),
            created_ms: now_secs()? * 1000,
        },
    ];
    Ok((store, seed))
}

/// The PUT of loaded object `i` (4 KiB, on pair 0): objects `2k` and `2k+1` share content
/// `k`, so N objects reference N/2 FileDB records.
pub fn object_put(seed: u64, i: u64, magic: u32, now: u64) -> Result<Command, String> {
    let sha1 = record_key(seed, i / 2);
    let mut md5 = [0u8; 16];
    md5.copy_from_slice(&sha1[..16]);
    let object = ObjectRecord::new(
        Sha1(sha1),
        Magic::new(magic).map_err(err)?,
        4096,
        u32::from_le_bytes([sha1[16], sha1[17], sha1[18], sha1[19]]),
        md5,
    );
    Ok(Command::PutObject {
        bucket: LOADED_BUCKET.into(),
        key: loaded_key(i),
        object,
        source: ContentSource::Stored(PairId(0)),
        now_secs: now,
        precondition: None,
    })
}
