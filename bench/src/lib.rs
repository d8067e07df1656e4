//! The benchmark harness of the deduplicating S3 gateway.
//!
//! It starts the real `gateway` binary (and, when installed, peer S3 servers) on 127.0.0.1
//! with a fresh temp data folder per measured run, drives it with a lean concurrent S3
//! client ([`s3`], [`load`]) and reports every figure beside the machine limit it is
//! compared with ([`limits`]), measured in the same run. See `bench/README.md`.

pub mod ab;
pub mod cluster;
pub mod compare;
pub mod filedb_report;
pub mod fsstat;
pub mod groups;
pub mod jobs;
pub mod limits;
pub mod load;
pub mod objects_report;
#[cfg(feature = "filedb")]
pub mod offline;
pub mod procs;
pub mod raft;
pub mod report;
pub mod rng;
pub mod s3;
pub mod scratch;
pub mod spread;
pub mod stats;
pub mod tls;
pub mod versioning;
pub mod workloads;
