//! `/_catalog/`: Valkyrie's catalog seam over HTTP, for the `valkyrie` binaries that run
//! beside remote storage nodes; each call is answered by the in-process
//! [`LocalCatalog`](crate::catalog::LocalCatalog).

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use http::{HeaderMap, StatusCode, header};
use placement::{PairId, Sha1};
use valkyrie::{Catalog, CatalogError, FileState};

use crate::catalog::LocalCatalog;
use crate::state::AppState;

fn file_json(f: &FileState) -> serde_json::Value {
    serde_json::json!({"refs": f.refs, "pair": f.pair.0, "do_not_delete": f.do_not_delete})
}

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/_catalog/files/{sha1}", get(http_lookup))
        .route("/_catalog/files/{sha1}/fenced", post(http_lookup_fenced))
        .route("/_catalog/deleting", get(http_deleting))
        .route("/_catalog/deleting/{sha1}", delete(http_remove_deleting))
        .route("/_catalog/relocate/{sha1}", post(http_relocate))
        .route("/_catalog/pairs/{id}/read-only", post(http_read_only))
        .route("/_catalog/pairs", get(http_pairs))
        .with_state(state)
}

fn json(status: StatusCode, body: serde_json::Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A failed catalog call over HTTP: a status and a message.
#[derive(Debug)]
struct HttpError(StatusCode, String);

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        json(self.0, serde_json::json!({ "error": self.1 }))
    }
}

impl From<CatalogError> for HttpError {
    fn from(e: CatalogError) -> Self {
        HttpError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
    }
}

type Answer = Result<Response, HttpError>;

fn guard(app: &Arc<AppState>, headers: &HeaderMap) -> Result<LocalCatalog, HttpError> {
    // The catalog token (its own rights only), or the admin token older workers hold.
    if app.internal.catalog_ok(app.admin_token.as_deref(), headers) {
        Ok(LocalCatalog::new(app.store.clone()))
    } else {
        Err(HttpError(
            StatusCode::FORBIDDEN,
            "catalog token required".into(),
        ))
    }
}

fn sha1_of(s: &str) -> Result<Sha1, HttpError> {
    s.parse()
        .map_err(|e: placement::VocabError| HttpError(StatusCode::BAD_REQUEST, e.to_string()))
}

fn pair_param(q: &HashMap<String, String>, name: &str) -> Result<PairId, HttpError> {
    q.get(name)
        .and_then(|v| v.parse::<u32>().ok())
        .map(PairId)
        .ok_or_else(|| HttpError(StatusCode::BAD_REQUEST, format!("{name} must be a pair id")))
}

async fn http_lookup(
    State(app): State<Arc<AppState>>,
    Path(sha1): Path<String>,
    headers: HeaderMap,
) -> Answer {
    let catalog = guard(&app, &headers)?;
    match catalog.lookup(sha1_of(&sha1)?).await? {
        Some(f) => Ok(json(StatusCode::OK, file_json(&f))),
        None => Err(HttpError(StatusCode::NOT_FOUND, "no record".into())),
    }
}

/// `POST /_catalog/files/{sha1}/fenced`: the record after a fence through the metadata
/// log, 200 with the record or with `null` (never 404, which a gateway without fences
/// answers for the path).
async fn http_lookup_fenced(
    State(app): State<Arc<AppState>>,
    Path(sha1): Path<String>,
    headers: HeaderMap,
) -> Answer {
    let catalog = guard(&app, &headers)?;
    let found = catalog.lookup_fenced(sha1_of(&sha1)?).await?;
    Ok(json(
        StatusCode::OK,
        found.map_or(serde_json::Value::Null, |f| file_json(&f)),
    ))
}

async fn http_deleting(
    State(app): State<Arc<AppState>>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Answer {
    let catalog = guard(&app, &headers)?;
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
    Ok(json(StatusCode::OK, serde_json::json!({ "entries": list })))
}

async fn http_remove_deleting(
    State(app): State<Arc<AppState>>,
    Path(sha1): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Answer {
    let catalog = guard(&app, &headers)?;
    catalog
        .remove_deleting(sha1_of(&sha1)?, pair_param(&q, "pair")?)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn http_relocate(
    State(app): State<Arc<AppState>>,
    Path(sha1): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Answer {
    let catalog = guard(&app, &headers)?;
    let (sha1, from, to) = (
        sha1_of(&sha1)?,
        pair_param(&q, "from")?,
        pair_param(&q, "to")?,
    );
    let done = catalog.relocate(sha1, from, to).await?;
    Ok(json(
        StatusCode::OK,
        serde_json::json!({ "relocated": done }),
    ))
}

async fn http_read_only(
    State(app): State<Arc<AppState>>,
    Path(id): Path<u32>,
    headers: HeaderMap,
) -> Answer {
    let catalog = guard(&app, &headers)?;
    catalog.set_read_only(PairId(id)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn http_pairs(State(app): State<Arc<AppState>>, headers: HeaderMap) -> Answer {
    let catalog = guard(&app, &headers)?;
    let pairs = catalog.pairs().await?;
    let list: Vec<_> = pairs
        .iter()
        .map(|(id, r)| crate::admin::pair_json(*id, r))
        .collect();
    Ok(json(StatusCode::OK, serde_json::json!({ "pairs": list })))
}
