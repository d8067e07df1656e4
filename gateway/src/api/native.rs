//! The article's own interface for mail back ends: `inc`, `upload`, `dec` and `GET /sha1`.
//!
//! A mail back end that already knows an attachment's SHA-1 calls `inc` first; only when
//! that answers 404 does it upload the bytes, which ends in an insert-or-increment so that
//! two loaders racing on the same attachment both succeed. Every call carries the
//! reference's magic, the random number the back end stores beside the sha1 in the email,
//! so that a double `dec` can never delete a file that is still referenced.
//!
//! Routes (on the S3 port, `Authorization: Bearer <GATEWAY_NATIVE_TOKEN>`, checked for
//! the whole group by [`Access::Native`](crate::api::Access); without a configured token
//! the native API is off and answers 403):
//!
//! | call | answer |
//! |---|---|
//! | `POST /_files/<sha1>/inc?magic=M` | 200 `{"refs":N}`, 404 if not stored |
//! | `PUT /_files/<sha1>?magic=M` + body | 200 `{"refs":N}`; 400 and nothing stored if the body does not hash to sha1 (for a body that carries a SHA-1 collision attack: its collision-safe name, given in the 400) |
//! | `POST /_files/<sha1>/dec?magic=M` | 200 `{"refs":N,"state":"live"\|"deleting"\|"do_not_delete"}`, 404 if not stored |
//! | `GET /_files/<sha1>?size=S&crc32=C` | the bytes if the file has that size and CRC32 (8 hex digits), 409 if not, 404 if not stored |

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::{HeaderValue, StatusCode, header};
use placement::read::Expect;
use placement::{Magic, Sha1};

use crate::api::{ApiError, ApiResult, json};
use crate::state::AppState;
use crate::store::{CommitError, ContentReadError, ReadBody, StoreError, UploadError, now_ms};
use meta::{Command, ContentSource, DecOutcome, FileRecord, MetaError};

pub const NATIVE_TOKEN_ENV: &str = "GATEWAY_NATIVE_TOKEN";

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/_files/{sha1}", get(read).put(upload))
        .route("/_files/{sha1}/inc", post(inc))
        .route("/_files/{sha1}/dec", post(dec))
}

/// The gateway's own failure, as a mail back end is told it: `internal error` (logged).
fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::internal(e).hide_internal()
}

/// A metadata failure: 404 for content not stored, 503 to retry (no leader or quorum, a
/// node still starting), else internal.
fn meta_error(e: MetaError) -> ApiError {
    match e {
        MetaError::NotFound => not_stored(),
        e => ApiError::from(e).hide_internal(),
    }
}

/// A store failure: 400 for a body the store refused, 503 to retry, else internal.
fn store_error(e: StoreError) -> ApiError {
    ApiError::from(e).hide_internal()
}

fn not_stored() -> ApiError {
    ApiError::not_found("not stored")
}

fn parse_sha1(s: &str) -> Result<Sha1, ApiError> {
    s.parse::<Sha1>().map_err(ApiError::bad_request)
}

fn parse_magic(q: &HashMap<String, String>) -> Result<Magic, ApiError> {
    let raw = q
        .get("magic")
        .ok_or_else(|| ApiError::bad_request("magic is required"))?;
    let n: u32 = raw
        .parse()
        .map_err(|_| ApiError::bad_request("magic must be a 32-bit unsigned number"))?;
    Magic::new(n).map_err(ApiError::bad_request)
}

/// `{"refs":N}`.
fn refs_answer(refs: u32) -> Response {
    json(StatusCode::OK, &serde_json::json!({ "refs": refs }))
}

async fn inc(
    State(app): State<Arc<AppState>>,
    Path(sha1): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult {
    let (sha1, magic) = (parse_sha1(&sha1)?, parse_magic(&q)?);
    match app.store.replicas().inc(sha1, magic).await {
        Ok(f) => Ok(refs_answer(f.refs)),
        Err(e) => Err(meta_error(e)),
    }
}

async fn dec(
    State(app): State<Arc<AppState>>,
    Path(sha1): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult {
    let (sha1, magic) = (parse_sha1(&sha1)?, parse_magic(&q)?);
    let now_secs = now_ms() / 1000;
    let outcome = match app.store.replicas().dec(sha1, magic, now_secs).await {
        Ok(o) => o,
        Err(e) => return Err(meta_error(e)),
    };
    let (refs, state) = match outcome {
        DecOutcome::Live { refs } => (refs, "live"),
        DecOutcome::Deleting => (0, "deleting"),
        DecOutcome::DoNotDelete { refs, .. } => (refs, "do_not_delete"),
        DecOutcome::Missing => return Err(not_stored()),
        // A native dec goes to the content's own group, which applies it in place.
        DecOutcome::Outbox => {
            return Err(internal(MetaError::Unexpected(
                "a native dec answered from an outbox".into(),
            )));
        }
    };
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "refs": refs, "state": state }),
    ))
}

async fn upload(
    State(app): State<Arc<AppState>>,
    Path(sha1): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    req: Request,
) -> ApiResult {
    let (sha1, magic) = (parse_sha1(&sha1)?, parse_magic(&q)?);
    let size_bytes = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let staged = app
        .store
        .stage(size_bytes, req.into_body().into_data_stream())
        .await
        .map_err(|e| match e {
            UploadError::Store(e) => store_error(e),
            // The connection broke or the client stopped sending.
            UploadError::Body(_) => {
                ApiError::bad_request("the request body ended before it was complete")
            }
        })?;
    // The sha1 is checked as the body streams by; a mismatch stores nothing.
    if staged.digests.sha1 != sha1 {
        let got = staged.digests;
        staged.discard().await;
        // A body carrying a collision attack is named by its mitigated digest, never by
        // the SHA-1 it shares with its twin: the back end must keep that name instead.
        let message = if got.collision_attack {
            format!(
                "body carries a SHA-1 collision attack: it is stored only under its \
                 collision-safe name {}, not {sha1}",
                got.sha1
            )
        } else {
            format!("body hashes to {}, not {sha1}", got.sha1)
        };
        return Err(ApiError::bad_request(message));
    }
    let command = |source| match source {
        ContentSource::Existing => Command::Inc { sha1, magic },
        ContentSource::Stored(pair) => Command::InsertOrInc { sha1, magic, pair },
    };
    match app
        .store
        .commit_content::<FileRecord>(staged, None, command)
        .await
    {
        Ok(f) => Ok(refs_answer(f.refs)),
        Err(CommitError::Meta(e)) => Err(meta_error(e)),
        // A body held in memory meets the pair choice only now: no writable pair is 503
        // here as it is for a streamed body.
        Err(CommitError::Write(e)) => Err(store_error(StoreError::from(e))),
    }
}

/// The article's collision guard: the file is served only if it has the size and CRC32
/// that the email recorded at upload.
async fn read(
    State(app): State<Arc<AppState>>,
    Path(sha1): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult {
    let sha1 = parse_sha1(&sha1)?;
    let bad = |m: &str| ApiError::bad_request(m);
    let size_bytes: u64 = q
        .get("size")
        .ok_or_else(|| bad("size is required"))?
        .parse()
        .map_err(|_| bad("size must be a number of bytes"))?;
    let crc32 = q
        .get("crc32")
        .filter(|c| c.len() == 8)
        .and_then(|c| u32::from_str_radix(c, 16).ok())
        .ok_or_else(|| bad("crc32 must be 8 hexadecimal digits"))?;
    let mismatch = || {
        ApiError::new(
            StatusCode::CONFLICT,
            "stored file has another size or crc32",
        )
    };
    // The size is known before any byte is read: a mismatch costs no read at all.
    match app.store.content_size(sha1).await {
        Ok(Some(actual)) if actual != size_bytes => return Err(mismatch()),
        Ok(_) => {}
        Err(ContentReadError::NoRecord(_)) => return Err(not_stored()),
        Err(e) => return Err(internal(e)),
    }
    let body = match app
        .store
        .read_guarded(sha1, Expect { size_bytes, crc32 })
        .await
    {
        Ok(Some(ReadBody::Buffered(bytes))) => Body::from(bytes),
        Ok(Some(ReadBody::Stream(stream))) => Body::from_stream(stream),
        Ok(None) => return Err(mismatch()),
        Err(ContentReadError::NoRecord(_)) => return Err(not_stored()),
        Err(ContentReadError::Busy) => {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many reads in flight, retry later",
            ));
        }
        // No readable copy at all (nodes down, files missing): nothing says the guard is
        // wrong, so this is not a 409.
        Err(e) => return Err(internal(e)),
    };
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(size_bytes));
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_become_native_statuses_and_hide_the_gateways_failures() {
        let told = |e: StoreError| {
            let e = store_error(e);
            (e.status(), e.to_string())
        };
        assert_eq!(
            told(StoreError::EntityTooLarge { max_bytes: 1 }),
            (
                StatusCode::BAD_REQUEST,
                "object is larger than 1 bytes".into()
            )
        );
        assert_eq!(
            told(StoreError::NoWritablePair).0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            told(StoreError::Meta(MetaError::RefsOverflow)),
            (StatusCode::INTERNAL_SERVER_ERROR, "internal error".into())
        );
    }

    /// A native upload, inc or dec that meets a group without a leader, or a node whose
    /// metadata is still starting, is told to retry (503), as the S3 API is; it was a 500
    /// (a crash-torture run caught it right after a restart).
    #[test]
    fn metadata_errors_become_native_statuses() {
        let told = |e: MetaError| {
            let e = meta_error(e);
            (e.status(), e.to_string())
        };
        assert_eq!(
            told(MetaError::Unavailable(
                "this node is not a member of the cluster yet".into()
            ))
            .0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(told(MetaError::NotFound).0, StatusCode::NOT_FOUND);
        assert_eq!(
            told(MetaError::Storage("disk".into())),
            (StatusCode::INTERNAL_SERVER_ERROR, "internal error".into())
        );
    }
}
