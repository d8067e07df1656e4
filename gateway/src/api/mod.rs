//! What the gateway's internal HTTP APIs share: who may call them ([`auth`]) and how they
//! answer in JSON ([`error`]).
//!
//! The internal APIs sit beside S3 on the same port, each in its module here: the admin
//! API (`/_admin/`, handlers in [`admin`], [`keys`] and [`cluster`]), the metrics and
//! status page (`/_metrics`, `/_status`, in [`admin`]), the native API of mail back ends
//! (`/_files/`, [`native`]), Valkyrie's catalog (`/_catalog/`, [`catalog`]) and the
//! node-to-node RPCs (`/_cluster/`, [`cluster`]). `server::router` puts each group of routes behind one [`Access`]; the
//! handlers check no credential themselves.

pub mod admin;
pub mod auth;
pub mod catalog;
pub mod cluster;
pub mod error;
pub mod keys;
pub mod native;

pub use auth::{Access, Secrets};
pub use error::{ApiError, ApiResult, json, json_pretty};
