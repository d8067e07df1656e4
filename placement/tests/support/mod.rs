//! Helpers shared by the integration tests of `placement`.

#![allow(dead_code)] // a harness: not every test binary uses every helper

pub mod nginx;
