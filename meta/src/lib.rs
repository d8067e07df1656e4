//! The metadata store: FileDB, PairDB and the S3 index in one embedded redb file.
//!
//! A serving node changes it only through the Raft log ([`raft::Metadata::execute`]): a
//! [`Command`] is made durable in the log on a majority, then every node's state machine
//! applies it with [`apply::apply`]; [`calls`] gives each command its typed answer.
//! [`MetaStore::execute`] applies a command directly and durably, for offline tools only
//! (the benchmark's FileDB loader). Reads use read transactions and never block writers.
//! All calls block; async callers go through `tokio::task::spawn_blocking`.
//!
//! The files, lowest first (none imports one above it; `scripts/layers.toml`): the error
//! type (`error.rs`); one file per table family with its records (`tables.rs`, `filedb.rs`,
//! `keys.rs`, `jobs.rs`, `lifecycle/`, `list.rs`, `native_refs.rs`); the commands
//! (`command.rs`, `cluster_version.rs`); [`apply`]; [`MetaStore`] (`store/`); the Raft
//! group ([`raft`]); the typed [`calls`].

pub mod acl;
pub mod apply;
pub mod audit;
pub mod bucket_copies;
pub mod calls;
pub mod checksums;
pub mod cluster_version;
pub mod command;
pub mod extras;
pub mod filedb;
pub mod groups;
pub mod handoff;
pub mod index_handoff;
pub mod jobs;
pub mod keys;
pub mod lifecycle;
pub mod list;
pub mod list_versions;
pub mod native_refs;
pub mod outbox;
pub mod ownership;
pub mod raft;
pub mod ref_log;
pub mod shard_map;
pub mod tables;
pub mod tags;
pub mod versions;

mod error;
mod store;

pub use calls::{Answer, Deleted, ObjectPut, PartPut, Referenced, TagsSet};
pub use command::{Command, ContentSource, DeleteOutcome, NewObject, Response, WritePrecondition};
pub use error::MetaError;
pub use filedb::DecOutcome;
pub use list::{ListPage, ListQuery};
pub use store::index::{IndexAnswer, IndexQuery};
pub use store::{CurrentVersion, MetaStore, PendingRef, UploadsPage};
pub use tables::{
    BucketRecord, Checksum, CorsRule, DeletingRecord, FileRecord, ObjectRecord, PartRecord,
    UploadRecord,
};
