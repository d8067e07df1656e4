//! Valkyrie: the per-disk daemon that keeps a disk of the dedup store honest.
//!
//! One worker runs per disk. It deletes content whose last reference is gone (through a
//! reversible quarantine, master disk first, the peer after a delay), scrubs every file
//! (re-hashes it, compares it with its name and its peer copy, repairs what is missing or
//! corrupt) and drains a failed disk to other pairs (UNMOVE). It reaches the metadata only
//! through the narrow [`Catalog`] seam, so the same worker runs inside `gateway serve` and
//! as the stand-alone `valkyrie` binary beside a storage node.
//!
//! What it is not: a metadata store or an HTTP server. It never decides that content is
//! unreferenced on its own; the catalog's `deleting` entries and `files` records do.
//!
//! Status: the seam is defined; the loops arrive with the Valkyrie issue.

use placement::{PairId, Sha1};

/// What Valkyrie needs to know about one content record, as the catalog reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileState {
    /// Number of live references (S3 objects, mail messages).
    pub refs: u32,
    /// The pair whose disks hold the authoritative copies.
    pub pair: PairId,
    /// Set when the reference arithmetic went wrong: never delete automatically.
    pub do_not_delete: bool,
}

/// The narrow view of the metadata that a Valkyrie worker needs.
///
/// The gateway implements it over its embedded store; remote workers reach the same
/// implementation over HTTP.
pub trait Catalog {
    /// The error a catalog call can fail with.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The live record of `sha1` in `files`, if any.
    fn lookup(&self, sha1: &Sha1) -> Result<Option<FileState>, Self::Error>;
}
