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

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};

use crate::admin::{Admin, error_json};
use crate::credentials::random_string;
use crate::meta::keys::{KeyRecord, Rights, Secret};
use crate::meta::{Command, MetaError};
use crate::state::AppState;

/// Access key ids as the bootstrap key's: `GK` and 18 upper-case letters and digits.
const ACCESS_KEY_CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
const ACCESS_KEY_RANDOM_LEN: usize = 18;
/// 40 characters of 62: 238 bits.
const SECRET_CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const SECRET_LEN: usize = 40;

fn json(status: StatusCode, value: serde_json::Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// A refused key command, as the operator should read it.
fn meta_error(e: MetaError) -> Response {
    match e {
        MetaError::NoSuchAccessKey => error_json(StatusCode::NOT_FOUND, "no such access key"),
        MetaError::NoSuchBucket => error_json(StatusCode::NOT_FOUND, "no such bucket"),
        e @ (MetaError::AccessKeyExists | MetaError::KeyLimit(_)) => {
            error_json(StatusCode::BAD_REQUEST, e)
        }
        e @ MetaError::Unavailable(_) => error_json(StatusCode::SERVICE_UNAVAILABLE, e),
        e => {
            tracing::error!(error = %e, "admin: key command failed");
            error_json(StatusCode::INTERNAL_SERVER_ERROR, e)
        }
    }
}

/// Runs a key command, then waits until this node has applied it (a follower applies
/// after the leader answered).
async fn run(app: &AppState, cmd: Command) -> Result<(), Response> {
    let meta = app.store.metadata();
    meta.execute(cmd).await.map_err(meta_error)?;
    meta.linearize().await.map_err(meta_error)
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
pub async fn create(
    _: Admin,
    State(app): State<Arc<AppState>>,
    body: axum::body::Bytes,
) -> Response {
    let Ok(new) = serde_json::from_slice::<NewKey>(&body) else {
        return error_json(StatusCode::BAD_REQUEST, r#"expected {"name": "NAME"}"#);
    };
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
    if let Err(resp) = run(&app, cmd).await {
        return resp;
    }
    let mut v = key_json(&access_key, &record);
    v["secret_key"] = serde_json::Value::String(secret);
    json(StatusCode::OK, v)
}

/// `GET /_admin/keys`.
pub async fn list(_: Admin, State(app): State<Arc<AppState>>) -> Response {
    if let Err(e) = app.store.metadata().linearize().await {
        return meta_error(e);
    }
    let keys = app.store.meta_store().keys();
    let mut all: Vec<_> = keys.iter().collect();
    all.sort_by(|a, b| (a.1.created_ms, a.0).cmp(&(b.1.created_ms, b.0)));
    let out: Vec<_> = all.into_iter().map(|(k, r)| key_json(k, r)).collect();
    json(StatusCode::OK, serde_json::json!({ "keys": out }))
}

/// The key with the buckets it owns, read after every acknowledged write.
async fn info_of(app: &AppState, access_key: String) -> Response {
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
        .await;
    let owned = match owned {
        Ok(o) => o,
        Err(e) => return meta_error(e),
    };
    let keys = app.store.meta_store().keys();
    let Some(record) = keys.get(&access_key) else {
        return meta_error(MetaError::NoSuchAccessKey);
    };
    let mut v = key_json(&access_key, record);
    v["owns"] = serde_json::json!(owned);
    json(StatusCode::OK, v)
}

/// `GET /_admin/keys/{key}`.
pub async fn info(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(access_key): Path<String>,
) -> Response {
    info_of(&app, access_key).await
}

/// `DELETE /_admin/keys/{key}`.
pub async fn delete(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(access_key): Path<String>,
) -> Response {
    let cmd = Command::DeleteKey {
        access_key: access_key.clone(),
    };
    match run(&app, cmd).await {
        Ok(()) => json(StatusCode::OK, serde_json::json!({ "deleted": access_key })),
        Err(resp) => resp,
    }
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
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path((access_key, action)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    let Ok(g) = serde_json::from_slice::<Grant>(&body) else {
        return error_json(
            StatusCode::BAD_REQUEST,
            r#"expected {"bucket": "BUCKET", "read": true, "write": false, "owner": false}"#,
        );
    };
    let rights = Rights::from_flags(g.read, g.write, g.owner);
    if rights.is_empty() {
        return error_json(
            StatusCode::BAD_REQUEST,
            "name at least one of read, write, owner",
        );
    }
    let (set, clear) = match action.as_str() {
        "allow" => (rights, Rights::NONE),
        "deny" => (Rights::NONE, rights),
        other => return error_json(StatusCode::NOT_FOUND, format!("unknown action {other}")),
    };
    let cmd = Command::SetKeyRights {
        access_key: access_key.clone(),
        bucket: g.bucket,
        set,
        clear,
    };
    if let Err(resp) = run(&app, cmd).await {
        return resp;
    }
    info_of(&app, access_key).await
}
