//! The catalog: the narrow view of the metadata a Valkyrie worker needs.
//!
//! Six questions and commands, no more: the live record of a sha1 (`files`, space0), the
//! `deleting` entries of a pair (space1), dropping such an entry, switching a record's pair
//! (UNMOVE), marking a pair read-only, and the pair list. The gateway implements it over
//! its embedded store; remote workers reach the same implementation over HTTP
//! ([`http::HttpCatalog`]).
//!
//! Why a trait whose methods return `impl Future + Send` rather than `async fn`: the
//! gateway spawns workers on a multi-threaded runtime, which needs the worker's futures to
//! be `Send`, and an `async fn` in a trait says nothing about that. Implementations may
//! still write `async fn` in their `impl` block.

pub mod http;

use std::future::Future;
use std::time::Duration;

use placement::{PairId, PairRecord, Sha1};

/// What Valkyrie needs to know about one live content record (`files`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileState {
    /// Number of live references (S3 objects, mail messages).
    pub refs: u32,
    /// The pair whose disks hold the authoritative copies.
    pub pair: PairId,
    /// Set when the reference arithmetic went wrong: never delete automatically.
    pub do_not_delete: bool,
}

/// One `deleting` entry: content whose last reference went away at `since_secs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeletingEntry {
    pub sha1: Sha1,
    /// The pair whose disks hold the copies to quarantine.
    pub pair: PairId,
    /// Unix seconds at which the record moved to `deleting`.
    pub since_secs: u64,
}

/// Why a catalog call failed. Every variant but [`CatalogError::Config`] is transient from
/// a worker's point of view: the file in question is left alone and looked at again on
/// the next pass.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("catalog unreachable: {0}")]
    Unreachable(String),
    #[error("catalog did not answer {what} within {after:?}")]
    Timeout { what: String, after: Duration },
    #[error("catalog answered HTTP {status} to {what}")]
    Status { status: u16, what: String },
    #[error("catalog sent a bad answer to {what}: {message}")]
    BadAnswer { what: String, message: String },
    /// An in-process implementation failed (the gateway's store).
    #[error("catalog: {0}")]
    Store(String),
    /// The client was set up wrong (URL, token); retrying cannot help.
    #[error("catalog client misconfigured: {0}")]
    Config(String),
}

/// The narrow view of the metadata that a Valkyrie worker needs.
pub trait Catalog: Send + Sync {
    /// The live record of `sha1` in `files`, if any.
    fn lookup(
        &self,
        sha1: Sha1,
    ) -> impl Future<Output = Result<Option<FileState>, CatalogError>> + Send;

    /// Like [`Catalog::lookup`], after a fence: no metadata command submitted before this
    /// call can create or move the record afterwards. The last look before a file is
    /// quarantined asks this, so an upload whose command is still on its way (held up by
    /// an election or a partition) is not taken for an orphan once it lands. Costs a
    /// metadata write; ask it only where a deletion is decided.
    fn lookup_fenced(
        &self,
        sha1: Sha1,
    ) -> impl Future<Output = Result<Option<FileState>, CatalogError>> + Send;

    /// `deleting` entries of `pair` with sha1 > `after`, at most `limit`, in sha1 order.
    fn deleting(
        &self,
        pair: PairId,
        after: Option<Sha1>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<DeletingEntry>, CatalogError>> + Send;

    /// Removes the `deleting` entry of `sha1` if it still names `pair`; removing an entry
    /// that is already gone is not an error.
    fn remove_deleting(
        &self,
        sha1: Sha1,
        pair: PairId,
    ) -> impl Future<Output = Result<(), CatalogError>> + Send;

    /// Switches the record of `sha1` from pair `from` to pair `to`, only if it still names
    /// `from`; `false` otherwise (the record changed or went away meanwhile).
    fn relocate(
        &self,
        sha1: Sha1,
        from: PairId,
        to: PairId,
    ) -> impl Future<Output = Result<bool, CatalogError>> + Send;

    /// Sets the READ_ONLY flag of `pair` (idempotent).
    fn set_read_only(&self, pair: PairId) -> impl Future<Output = Result<(), CatalogError>> + Send;

    /// Every pair with its record.
    fn pairs(&self)
    -> impl Future<Output = Result<Vec<(PairId, PairRecord)>, CatalogError>> + Send;
}

/// A shared catalog is a catalog: the gateway hands the same store to every worker.
impl<C: Catalog> Catalog for std::sync::Arc<C> {
    fn lookup(
        &self,
        sha1: Sha1,
    ) -> impl Future<Output = Result<Option<FileState>, CatalogError>> + Send {
        (**self).lookup(sha1)
    }

    fn lookup_fenced(
        &self,
        sha1: Sha1,
    ) -> impl Future<Output = Result<Option<FileState>, CatalogError>> + Send {
        (**self).lookup_fenced(sha1)
    }

    fn deleting(
        &self,
        pair: PairId,
        after: Option<Sha1>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<DeletingEntry>, CatalogError>> + Send {
        (**self).deleting(pair, after, limit)
    }

    fn remove_deleting(
        &self,
        sha1: Sha1,
        pair: PairId,
    ) -> impl Future<Output = Result<(), CatalogError>> + Send {
        (**self).remove_deleting(sha1, pair)
    }

    fn relocate(
        &self,
        sha1: Sha1,
        from: PairId,
        to: PairId,
    ) -> impl Future<Output = Result<bool, CatalogError>> + Send {
        (**self).relocate(sha1, from, to)
    }

    fn set_read_only(&self, pair: PairId) -> impl Future<Output = Result<(), CatalogError>> + Send {
        (**self).set_read_only(pair)
    }

    fn pairs(
        &self,
    ) -> impl Future<Output = Result<Vec<(PairId, PairRecord)>, CatalogError>> + Send {
        (**self).pairs()
    }
}
