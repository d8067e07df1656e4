//! The gateway: an S3-compatible, deduplicating object store in one process.
//!
//! It hashes every body with SHA-1 and keeps one physical file per distinct content on a
//! pair of disks (see the `placement` crate), counts references to it in FileDB with the
//! article's magic-sum check, and serves the S3 API over it. This crate holds the HTTP
//! front end ([`s3`], [`api`]), the metadata store ([`meta`]: redb tables changed only
//! through one `Command` enum), the object operations that join the two ([`store`]), and
//! the process wiring ([`server`], [`credentials`]).
//!
//! What it is not: it does not delete files from disk or repair them; the Valkyrie workers
//! do, through the catalog seam.

pub mod api;
pub mod bearer;
pub mod catalog;
pub mod checksums;
pub mod config;
pub mod credentials;
pub mod fsck;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod jobs;
pub mod lifecycle;
// The metadata crate, re-exported for the tests and fuzz targets that name `gateway::meta`.
pub use meta;
pub mod multipart;
pub mod peers;
pub mod s3;
pub mod server;
pub mod settings;
pub mod state;
pub mod storage_nodes;
pub mod store;
pub mod tags;
pub mod telemetry;
pub mod versions;
pub mod workers;
