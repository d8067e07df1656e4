//! Helpers shared by the integration tests of `placement`.

#![allow(dead_code)] // a harness: not every test binary uses every helper

/// The nginx harness lives with the end-to-end tests, which start nginx storage nodes
/// too; one file serves both.
#[path = "../../../tests/src/nginx.rs"]
pub mod nginx;
