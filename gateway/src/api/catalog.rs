//! `/_catalog/`: Valkyrie's catalog seam over HTTP, for the `valkyrie` binaries that run
//! beside remote storage nodes; each call is answered by the in-process
//! [`LocalCatalog`](crate::catalog::LocalCatalog). The catalog token (or the admin token)
//! is checked for the whole group by [`Access::Catalog`](crate::api::Access).

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{FromRef, Path, Query, State};
use axum::response::IntoResponse;
use axum::routing::{delete, get, post};
use http::StatusCode;
use placement::{PairId, Sha1};
use valkyrie::{Catalog, FileState};

use crate::api::{ApiError, ApiResult, json};
use crate::catalog::LocalCatalog;
use crate::state::AppState;

fn file_json(f: &FileState) -> serde_json::Value {
    serde_json::json!({"refs": f.refs, "pair": f.pair.0, "do_not_delete": f.do_not_delete})
}

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/_catalog/files/{sha1}", get(http_lookup))
        .route("/_catalog/files/{sha1}/fenced", post(http_lookup_fenced))
        .route("/_catalog/deleting", get(http_deleting))
        .route("/_catalog/deleting/{sha1}", delete(http_remove_deleting))
        .route("/_catalog/relocate/{sha1}", post(http_relocate))
        .route("/_catalog/pairs/{id}/read-only", post(http_read_only))
        .route("/_catalog/pairs", get(http_pairs))
}

/// Each handler takes `State<LocalCatalog>`: the catalog over the gateway's store.
impl FromRef<Arc<AppState>> for LocalCatalog {
    fn from_ref(app: &Arc<AppState>) -> Self {
        LocalCatalog::new(app.store.clone())
    }
}

fn sha1_of(s: &str) -> Result<Sha1, ApiError> {
    s.parse::<Sha1>().map_err(ApiError::bad_request)
}

fn pair_param(q: &HashMap<String, String>, name: &str) -> Result<PairId, ApiError> {
    q.get(name)
        .and_then(|v| v.parse::<u32>().ok())
        .map(PairId)
        .ok_or_else(|| ApiError::bad_request(format!("{name} must be a pair id")))
}

async fn http_lookup(State(catalog): State<LocalCatalog>, Path(sha1): Path<String>) -> ApiResult {
    match catalog.lookup(sha1_of(&sha1)?).await? {
        Some(f) => Ok(json(StatusCode::OK, &file_json(&f))),
        None => Err(ApiError::not_found("no record")),
    }
}

/// `POST /_catalog/files/{sha1}/fenced`: the record after a fence through the metadata
/// log, 200 with the record or with `null` (never 404, which a gateway without fences
/// answers for the path).
async fn http_lookup_fenced(
    State(catalog): State<LocalCatalog>,
    Path(sha1): Path<String>,
) -> ApiResult {
    let found = catalog.lookup_fenced(sha1_of(&sha1)?).await?;
    Ok(json(
        StatusCode::OK,
        &found.map_or(serde_json::Value::Null, |f| file_json(&f)),
    ))
}

async fn http_deleting(
    State(catalog): State<LocalCatalog>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult {
    let pair = pair_param(&q, "pair")?;
    let limit = q
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .unwrap_or(crate::catalog::DELETING_PAGE_MAX);
    let after = match q.get("after") {
        Some(a) => Some(sha1_of(a)?),
        None => None,
    };
    let entries = catalog.deleting(pair, after, limit).await?;
    let list: Vec<_> = entries
        .iter()
        .map(|e| serde_json::json!({"sha1": e.sha1.to_hex(), "pair": e.pair.0, "since": e.since_secs}))
        .collect();
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "entries": list }),
    ))
}

async fn http_remove_deleting(
    State(catalog): State<LocalCatalog>,
    Path(sha1): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult {
    catalog
        .remove_deleting(sha1_of(&sha1)?, pair_param(&q, "pair")?)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn http_relocate(
    State(catalog): State<LocalCatalog>,
    Path(sha1): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult {
    let (sha1, from, to) = (
        sha1_of(&sha1)?,
        pair_param(&q, "from")?,
        pair_param(&q, "to")?,
    );
    let done = catalog.relocate(sha1, from, to).await?;
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "relocated": done }),
    ))
}

async fn http_read_only(State(catalog): State<LocalCatalog>, Path(id): Path<u32>) -> ApiResult {
    catalog.set_read_only(PairId(id)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn http_pairs(State(catalog): State<LocalCatalog>) -> ApiResult {
    let pairs = catalog.pairs().await?;
    let list: Vec<_> = pairs
        .iter()
        .map(|(id, r)| crate::api::admin::pair_json(*id, r))
        .collect();
    Ok(json(StatusCode::OK, &serde_json::json!({ "pairs": list })))
}
