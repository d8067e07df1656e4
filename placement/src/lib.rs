//! Placement: where content lives in the dedup store and how it gets there safely.
//!
//! This crate holds the vocabulary shared by every other crate ([`Sha1`], [`Magic`],
//! [`PairId`], [`DiskRef`]), the PairDB record ([`PairRecord`]) and the weighted pair
//! choice ([`choose`]), the disk backends (`disk`), and the two protocols that touch
//! content: the write protocol (`write`: stream to temp names on both disks while hashing
//! in one pass, fsync, then rename to the content address) and the verified read (`read`:
//! check size and CRC32, fall back to the other copy).
//!
//! The disk backends, the protocols and the hashing (`disk`, `read`, `write`, `digest`)
//! are the `io` feature, on by default. A crate that needs only the vocabulary (a
//! metadata store, say) turns default features off and gets no async runtime, HTTP client
//! or system-call crate in its tree: `vocab`, [`pair`], [`pairdb`] (the records) and
//! [`choose`] are all there is then.
//!
//! What it is not: a metadata store or an HTTP server. It knows nothing of redb, S3 or
//! reference counts; the gateway decides *whether* to write, this crate decides *where*
//! and does it without ever leaving a half-written file under a content address.

pub mod choose;
#[cfg(feature = "io")]
pub mod digest;
#[cfg(feature = "io")]
pub mod disk;
pub mod pair;
pub mod pairdb;
#[cfg(feature = "io")]
pub mod read;
pub mod vocab;
#[cfg(feature = "io")]
pub mod write;

#[cfg(feature = "io")]
pub use digest::{ContentHasher, ContentName, Digests, NameHasher};
#[cfg(feature = "io")]
pub use disk::{Disk, DiskError};
pub use pair::{PairFlags, PairRecord};
pub use vocab::{DiskRef, Magic, PairId, Sha1, VocabError};
