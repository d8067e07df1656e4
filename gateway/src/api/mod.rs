//! What the gateway's internal HTTP APIs share: who may call them ([`auth`]) and how they
//! answer in JSON ([`error`]).
//!
//! The internal APIs sit beside S3 on the same port: the admin API (`/_admin/`, handlers
//! in [`admin`](crate::admin), [`admin_keys`](crate::admin_keys) and
//! [`cluster`](crate::cluster)), the metrics and status page (`/_metrics`, `/_status`),
//! the native API of mail back ends (`/_files/`, [`native`](crate::native)), Valkyrie's
//! catalog (`/_catalog/`, [`catalog_http`](crate::catalog_http)) and the node-to-node RPCs
//! (`/_cluster/`). `server::router` puts each group of routes behind one [`Access`]; the
//! handlers check no credential themselves.

pub mod auth;
pub mod error;

pub use auth::{Access, Secrets};
pub use error::{ApiError, ApiResult, json, json_pretty};
