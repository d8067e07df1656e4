//! Helpers shared by the integration tests of `placement`.

#![allow(dead_code)] // a harness: not every test binary uses every helper

/// The nginx harness lives with the end-to-end tests, which start nginx storage nodes
/// too; one file serves both.
#[path = "../../../tests/src/nginx.rs"]
pub mod nginx;

/// The ports nginx listens on, chosen as the end-to-end tests choose theirs.
#[path = "../../../tests/src/ports.rs"]
pub mod ports;

/// The certificates of the TLS tests, shared with the end-to-end tests as nginx is.
#[path = "../../../tests/src/pki.rs"]
pub mod pki;
