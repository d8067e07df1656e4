//! The admin API under `/_admin/`, for operators and tests: what FileDB says about a file.
//!
//! Authenticated with `Authorization: Bearer <GATEWAY_ADMIN_TOKEN>`; without a configured
//! token the admin API is off and answers 403.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode, header};
use placement::Sha1;

use crate::server::AppState;

pub const ADMIN_TOKEN_ENV: &str = "GATEWAY_ADMIN_TOKEN";

fn authorized(app: &AppState, headers: &HeaderMap) -> bool {
    crate::native::bearer_ok(app.admin_token.as_deref(), headers)
}

fn json(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// `GET /_admin/files/{sha1}`: the FileDB record or the `deleting` entry of a content.
pub async fn file(
    State(app): State<Arc<AppState>>,
    Path(sha1): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&app, &headers) {
        return json(
            StatusCode::FORBIDDEN,
            r#"{"error":"admin token required"}"#.into(),
        );
    }
    let Ok(sha1) = sha1.parse::<Sha1>() else {
        return json(StatusCode::BAD_REQUEST, r#"{"error":"not a sha1"}"#.into());
    };
    let meta = app.store.meta_store().clone();
    let found = tokio::task::spawn_blocking(move || {
        Ok::<_, crate::meta::MetaError>((meta.file(&sha1)?, meta.deleting(&sha1)?))
    })
    .await;
    match found {
        Ok(Ok((Some(f), _))) => json(
            StatusCode::OK,
            format!(
                r#"{{"sha1":"{sha1}","state":"live","refs":{},"magic":{},"flags":{},"pair":{}}}"#,
                f.refs, f.magic, f.flags, f.pair.0
            ),
        ),
        Ok(Ok((None, Some(d)))) => json(
            StatusCode::OK,
            format!(
                r#"{{"sha1":"{sha1}","state":"deleting","pair":{},"since":{}}}"#,
                d.pair.0, d.since_secs
            ),
        ),
        Ok(Ok((None, None))) => json(StatusCode::NOT_FOUND, r#"{"error":"not found"}"#.into()),
        Ok(Err(e)) => json(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(r#"{{"error":{:?}}}"#, e.to_string()),
        ),
        Err(e) => json(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(r#"{{"error":{:?}}}"#, e.to_string()),
        ),
    }
}
