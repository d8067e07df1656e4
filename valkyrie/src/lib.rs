//! Valkyrie: the per-disk daemon that keeps a disk of the dedup store honest.
//!
//! One [`Worker`] runs per disk, beside it: the disk is always a local directory to its
//! worker (the `valkyrie` binary runs on the storage node next to nginx's folder; `gateway
//! serve` runs workers for its local disks in-process), and the *peer* disk (the other disk
//! of the pair) is reached through [`placement::Disk`], local or WebDAV. A worker runs two
//! loops:
//!
//! - [`deletion`]: walks the catalog's `deleting` entries of its pair and quarantines the
//!   local copy (`<sha1>.deleted.<unix secs>`, reversible), the sha1's master disk at once
//!   and the other one after `slave_delay_secs`; content that came back to life meanwhile
//!   is kept.
//! - [`scrub`]: walks every file of the disk in bounded, rate-limited batches: expired
//!   quarantine and stale temps are removed, orphans past a grace period quarantined, junk
//!   (a record on another pair) verified and removed, good files re-hashed and, with their
//!   peer copy, [`repair`]ed.
//!
//! Beside the loops: [`quarantine::restore`] (the gateway calls it when a read finds the
//! content name missing) and [`unmove::drain`], which copies every file of a failed pair's
//! surviving disk to other pairs. Every loop goes through the same two pieces: one
//! [`walk`] over the disk's `<aa>/<bb>` layout (the scrubber, UNMOVE, the gateway's
//! `fsck`) and one [`pace::Pacer`] for its bounded batches. The metadata is reached only
//! through the narrow [`Catalog`] seam: in-process through the gateway's store, remotely
//! through [`HttpCatalog`].
//!
//! What it is not: a metadata store or an HTTP server. It never decides on its own that
//! content is unreferenced: the catalog's `deleting` entries and `files` records do, and a
//! file is only ever removed for good after a quarantine or after it was proven to be a
//! verified duplicate of content recorded on another pair.
//!
//! # Back of the envelope
//!
//! - Scrub: 1 M files of 1 MiB per disk (1 TiB) at the default 50 MiB/s is
//!   1 048 576 MiB / 50 MiB/s = ~21 000 s, ~6 h per pass; the default pass interval of a day
//!   keeps the disk ~25 % of the time under that extra sequential read. SHA-1 runs at
//!   ~1.9 GB/s per core, so 50 MiB/s of hashing costs ~3 % of one core.
//! - Catalog: one `lookup` per file per pass, ~50/s for 1 MiB files at 50 MiB/s. Every
//!   file also costs 64 KiB of the byte budget ([`scrub::SCRUB_FILE_COST_BYTES`]), so even
//!   a disk of tiny files is scrubbed at most 800 files/s (1 M files of 4 KiB: ~21 min)
//!   and the catalog sees at most 800 lookups/s per disk.
//! - Deletion: if 1 % of the files die per day, a pair sees ~10 000 `deleting` entries a
//!   day: two lookups, a rename and a directory fsync each, seconds of work in total. The
//!   7-day quarantine then holds ~7 % of the disk in `*.deleted.*` files: the price of
//!   being able to undo a wrong deletion for a week.
//! - Memory: one `<aa>/<bb>` folder listing at a time: ~16 names at 1 M files per disk,
//!   ~1 500 at 100 M, plus one 256 KiB read buffer in flight.
//! - UNMOVE: a 1 TiB survivor at 100 MiB/s takes ~3 h, bounded by the two writes of every
//!   byte on the receiving pairs as much as by the read.

pub mod catalog;
pub mod clock;
pub mod deletion;
pub mod error;
pub mod layout;
pub mod logging;
pub mod metrics;
pub mod pace;
pub mod quarantine;
pub mod rate;
pub mod repair;
pub mod scrub;
pub mod settings;
pub mod storage_tls;
pub mod unmove;
pub mod walk;
pub mod worker;

#[cfg(test)]
mod testkit;

pub use catalog::http::{HttpCatalog, HttpCatalogConfig};
pub use catalog::{Catalog, CatalogError, DeletingEntry, FileState};
pub use clock::{Clock, Shutdown};
pub use error::ValkyrieError;
pub use metrics::{Metrics, MetricsSnapshot};
pub use quarantine::restore;
pub use settings::{GRACE_SECS_MIN, Settings, SettingsError};
pub use unmove::{UnmoveOptions, UnmoveProgress, UnmoveTracker, drain};
pub use worker::{Worker, WorkerConfig};
