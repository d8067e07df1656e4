//! Placement: where content lives in the dedup store and how it gets there safely.
//!
//! This crate holds the vocabulary shared by every other crate ([`Sha1`], [`Magic`],
//! [`PairId`], [`DiskRef`]), the PairDB record ([`pairdb::PairRecord`]) and the weighted
//! pair choice ([`choose`]), the disk backends ([`disk`]), and the two protocols that touch
//! content: the write protocol ([`write`](mod@write): stream to temp names on both disks while hashing
//! in one pass, fsync, then rename to the content address) and the verified read
//! ([`read`]: check size and CRC32, fall back to the other copy).
//!
//! What it is not: a metadata store or an HTTP server. It knows nothing of redb, S3 or
//! reference counts; the gateway decides *whether* to write, this crate decides *where*
//! and does it without ever leaving a half-written file under a content address.

pub mod choose;
pub mod digest;
pub mod disk;
pub mod pairdb;
pub mod read;
pub mod vocab;
pub mod write;

pub use digest::{ContentHasher, ContentName, Digests, NameHasher};
pub use disk::{Disk, DiskError};
pub use pairdb::{PairFlags, PairRecord};
pub use vocab::{DiskRef, Magic, PairId, Sha1, VocabError};
