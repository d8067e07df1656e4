//! The admin API of access keys under `/_admin/keys`, behind `gateway admin keys ...`.
//!
//! | call | answer |
//! |---|---|
//! | `POST /_admin/keys` `{"name": NAME}` | the new key: `access_key`, `secret_key` (the only time it is shown), `name`, `created_ms` |
//! | `GET /_admin/keys` | `{"keys": [...]}`: each key's `access_key`, `name`, `created_ms`, `grants` |
//! | `GET /_admin/keys/{key}` | the key as above, plus `owns` (the buckets it created) |
//! | `DELETE /_admin/keys/{key}` | `{"deleted": KEY}` |
//! | `POST /_admin/keys/{key}/{allow\|deny}` `{"bucket": B, "read": .., "write": .., "owner": ..}` | the key as in `GET` |
//!
//! Every change is a metadata command (replicated); the answer comes once this node has
//! applied it, so the node that answered already accepts or refuses the key.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use http::StatusCode;

use crate::api::{ApiError, ApiResult, json};
use crate::credentials::random_string;
use crate::state::AppState;
use meta::keys::{KeyRecord, Rights, Secret};
use meta::{Command, MetaError};

/// The routes of the table above.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/_admin/keys", get(list).post(create))
        .route("/_admin/keys/{key}", get(info).delete(delete))
        .route("/_admin/keys/{key}/{action}", post(grant))
}

/// Access key ids as the bootstrap key's: `GK` and 18 upper-case letters and digits.
const ACCESS_KEY_CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
const ACCESS_KEY_RANDOM_LEN: usize = 18;
/// 40 characters of 62: 238 bits.
const SECRET_CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const SECRET_LEN: usize = 40;

/// Runs a key command, then waits until this node has applied it (a follower applies
/// after the leader answered).
async fn run(app: &AppState, cmd: Command) -> Result<(), ApiError> {
    let meta = app.store.metadata();
    meta.execute(cmd).await?;
    Ok(meta.linearize().await?)
}

fn key_json(access_key: &str, r: &KeyRecord) -> serde_json::Value {
    let grants: serde_json::Map<String, serde_json::Value> = r
        .grants
        .iter()
        .map(|(b, rights)| (b.clone(), serde_json::json!(rights.names())))
        .collect();
    serde_json::json!({
        "access_key": access_key,
        "name": r.name,
        "created_ms": r.created_ms,
        "grants": grants,
    })
}

#[derive(serde::Deserialize)]
pub struct NewKey {
    name: String,
}

/// `POST /_admin/keys`.
pub async fn create(State(app): State<Arc<AppState>>, body: axum::body::Bytes) -> ApiResult {
    let new = serde_json::from_slice::<NewKey>(&body)
        .map_err(|_| ApiError::bad_request(r#"expected {"name": "NAME"}"#))?;
    let access_key = format!(
        "GK{}",
        random_string(ACCESS_KEY_CHARS, ACCESS_KEY_RANDOM_LEN)
    );
    let secret = random_string(SECRET_CHARS, SECRET_LEN);
    let record = KeyRecord {
        name: new.name,
        secret: Secret::new(secret.clone()),
        created_ms: crate::store::now_ms(),
        grants: Default::default(),
    };
    let cmd = Command::CreateKey {
        access_key: access_key.clone(),
        record: record.clone(),
    };
    run(&app, cmd).await?;
    let mut v = key_json(&access_key, &record);
    v["secret_key"] = serde_json::Value::String(secret);
    Ok(json(StatusCode::OK, &v))
}

/// `GET /_admin/keys`.
pub async fn list(State(app): State<Arc<AppState>>) -> ApiResult {
    app.store.metadata().linearize().await?;
    let keys = app.store.meta_store().keys();
    let mut all: Vec<_> = keys.iter().collect();
    all.sort_by(|a, b| (a.1.created_ms, a.0).cmp(&(b.1.created_ms, b.0)));
    let out: Vec<_> = all.into_iter().map(|(k, r)| key_json(k, r)).collect();
    Ok(json(StatusCode::OK, &serde_json::json!({ "keys": out })))
}

/// The key with the buckets it owns, read after every acknowledged write.
async fn info_of(app: &AppState, access_key: String) -> ApiResult {
    let meta = app.store.metadata();
    let owner = access_key.clone();
    let owned = meta
        .read(move |m| {
            Ok(m.buckets()?
                .into_iter()
                .filter(|(_, b)| b.owner.as_deref() == Some(owner.as_str()))
                .map(|(name, _)| name)
                .collect::<Vec<_>>())
        })
        .await?;
    let keys = app.store.meta_store().keys();
    let record = keys
        .get(&access_key)
        .ok_or(ApiError::from(MetaError::NoSuchAccessKey))?;
    let mut v = key_json(&access_key, record);
    v["owns"] = serde_json::json!(owned);
    Ok(json(StatusCode::OK, &v))
}

/// `GET /_admin/keys/{key}`.
pub async fn info(State(app): State<Arc<AppState>>, Path(access_key): Path<String>) -> ApiResult {
    info_of(&app, access_key).await
}

/// `DELETE /_admin/keys/{key}`.
pub async fn delete(State(app): State<Arc<AppState>>, Path(access_key): Path<String>) -> ApiResult {
    let cmd = Command::DeleteKey {
        access_key: access_key.clone(),
    };
    run(&app, cmd).await?;
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "deleted": access_key }),
    ))
}

#[derive(serde::Deserialize)]
pub struct Grant {
    bucket: String,
    #[serde(default)]
    read: bool,
    #[serde(default)]
    write: bool,
    #[serde(default)]
    owner: bool,
}

/// `POST /_admin/keys/{key}/{allow|deny}`.
pub async fn grant(
    State(app): State<Arc<AppState>>,
    Path((access_key, action)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> ApiResult {
    let g = serde_json::from_slice::<Grant>(&body).map_err(|_| {
        ApiError::bad_request(
            r#"expected {"bucket": "BUCKET", "read": true, "write": false, "owner": false}"#,
        )
    })?;
    let rights = Rights::from_flags(g.read, g.write, g.owner);
    if rights.is_empty() {
        return Err(ApiError::bad_request(
            "name at least one of read, write, owner",
        ));
    }
    let (set, clear) = match action.as_str() {
        "allow" => (rights, Rights::NONE),
        "deny" => (Rights::NONE, rights),
        other => return Err(ApiError::not_found(format!("unknown action {other}"))),
    };
    let cmd = Command::SetKeyRights {
        access_key: access_key.clone(),
        bucket: g.bucket,
        set,
        clear,
    };
    run(&app, cmd).await?;
    info_of(&app, access_key).await
}
