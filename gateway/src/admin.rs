//! The admin API under `/_admin/`, for operators and tests: what FileDB says about a file,
//! and the disk pairs (list, add, lock, unlock, read-only, read-write).
//!
//! Authenticated with `Authorization: Bearer <GATEWAY_ADMIN_TOKEN>`; without a configured
//! token the admin API is off and answers 403.

use std::sync::Arc;

use axum::extract::{FromRequestParts, Path, State};
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use http::{StatusCode, header};
use placement::{Disk, DiskRef, PairFlags, PairId, PairRecord, Sha1};

use crate::meta::Command;
use crate::store::StoreError;

use crate::state::AppState;

pub const ADMIN_TOKEN_ENV: &str = "GATEWAY_ADMIN_TOKEN";

/// Proof that a request carried the admin token: taking it as an argument is how a handler
/// is restricted to operators (a request without the token is answered 403 before the
/// handler runs).
pub struct Admin;

impl FromRequestParts<Arc<AppState>> for Admin {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        app: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        if crate::bearer::bearer_ok(app.admin_token.as_deref(), &parts.headers) {
            Ok(Admin)
        } else {
            Err(error_json(StatusCode::FORBIDDEN, "admin token required"))
        }
    }
}

fn json(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// `GET /_admin/files/{sha1}`: the FileDB record or the `deleting` entry of a content.
pub async fn file(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(sha1): Path<String>,
) -> Response {
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
        Ok(Err(e)) => error_json(StatusCode::INTERNAL_SERVER_ERROR, e),
        Err(e) => error_json(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

fn flag_names(flags: PairFlags) -> Vec<&'static str> {
    [
        (PairFlags::LOCKED, "LOCKED"),
        (PairFlags::READ_ONLY, "READ_ONLY"),
        (PairFlags::DRAINING, "DRAINING"),
    ]
    .into_iter()
    .filter(|(f, _)| flags.contains(*f))
    .map(|(_, n)| n)
    .collect()
}

pub fn pair_json(id: PairId, r: &PairRecord) -> serde_json::Value {
    serde_json::json!({
        "id": id.0,
        "disks": [r.disks[0].as_str(), r.disks[1].as_str()],
        "flags": flag_names(r.flags),
        "writable": r.flags.writable(),
        "free_bytes": r.free_bytes,
        "capacity_bytes": r.capacity_bytes,
    })
}

pub(crate) fn error_json(status: StatusCode, message: impl std::fmt::Display) -> Response {
    json(
        status,
        serde_json::json!({ "error": message.to_string() }).to_string(),
    )
}

/// A change of pair `id` (None: a new pair) the store refused: an unknown pair is 404,
/// anything else is the gateway's failure, told to the operator as it is.
fn pair_error_json(e: StoreError, id: Option<u32>) -> Response {
    match (e, id) {
        (StoreError::NoSuchPair, Some(id)) => {
            error_json(StatusCode::NOT_FOUND, format!("no pair {id}"))
        }
        // Every pair id is taken (AddPair found none after the highest).
        (StoreError::NoSuchPair, None) => error_json(StatusCode::BAD_REQUEST, "no pair id left"),
        (e @ StoreError::Unavailable(_), _) => error_json(StatusCode::SERVICE_UNAVAILABLE, e),
        (e, _) => {
            tracing::error!(error = %e, "admin: pair change failed");
            error_json(StatusCode::INTERNAL_SERVER_ERROR, e)
        }
    }
}

/// `GET /_admin/pairs`: every pair with its flags and the fill of each disk.
pub async fn list_pairs(_: Admin, State(app): State<Arc<AppState>>) -> Response {
    let table = app.store.pair_table();
    let pairs: Vec<_> = table
        .ids()
        .into_iter()
        .filter_map(|id| table.get(id).map(|e| pair_json(id, &e.record)))
        .collect();
    json(
        StatusCode::OK,
        serde_json::json!({ "pairs": pairs }).to_string(),
    )
}

#[derive(serde::Deserialize)]
pub struct NewPair {
    disks: [String; 2],
}

/// `POST /_admin/pairs` with `{"disks": [DISK0, DISK1]}`: adds a writable pair.
pub async fn add_pair(
    _: Admin,
    State(app): State<Arc<AppState>>,
    body: axum::body::Bytes,
) -> Response {
    let Ok(new) = serde_json::from_slice::<NewPair>(&body) else {
        return error_json(
            StatusCode::BAD_REQUEST,
            r#"expected {"disks": ["DISK0", "DISK1"]}"#,
        );
    };
    let mut disks = Vec::with_capacity(2);
    for d in &new.disks {
        match d.parse::<DiskRef>() {
            // Opening checks that this build has the disk's backend.
            Ok(r) => match Disk::open(&r) {
                Ok(_) => disks.push(r),
                Err(e) => return error_json(StatusCode::BAD_REQUEST, e),
            },
            Err(e) => return error_json(StatusCode::BAD_REQUEST, e),
        }
    }
    let [a, b]: [DiskRef; 2] = match disks.try_into() {
        Ok(d) => d,
        Err(_) => return error_json(StatusCode::BAD_REQUEST, "two disks are needed"),
    };
    if a == b {
        return error_json(
            StatusCode::BAD_REQUEST,
            "the two disks of a pair must differ",
        );
    }
    for d in [&a, &b] {
        if let Some(path) = d.local_path()
            && let Err(e) = std::fs::create_dir_all(path)
        {
            return error_json(StatusCode::BAD_REQUEST, format!("{d}: {e}"));
        }
    }
    let record = PairRecord::new([a, b]);
    match app.store.change_pair(Command::AddPair { record }).await {
        Ok((id, r)) => {
            app.workers.ensure(&app.store);
            json(StatusCode::OK, pair_json(id, &r).to_string())
        }
        Err(e) => pair_error_json(e, None),
    }
}

/// `POST /_admin/pairs/{id}/{lock|unlock|read-only|read-write}`.
pub async fn pair_action(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path((id, action)): Path<(u32, String)>,
) -> Response {
    let none = PairFlags::default();
    let (set, clear) = match action.as_str() {
        "lock" => (PairFlags::LOCKED, none),
        "unlock" => (none, PairFlags::LOCKED),
        "read-only" => (PairFlags::READ_ONLY, none),
        "read-write" => (none, PairFlags::READ_ONLY),
        other => return error_json(StatusCode::NOT_FOUND, format!("unknown action {other}")),
    };
    let cmd = Command::SetPairFlags {
        id: PairId(id),
        set,
        clear,
    };
    match app.store.change_pair(cmd).await {
        Ok((id, r)) => json(StatusCode::OK, pair_json(id, &r).to_string()),
        Err(e) => pair_error_json(e, Some(id)),
    }
}

/// `GET /_admin/scrub`: each in-process Valkyrie worker's counters and scrub progress.
pub async fn scrub_status(_: Admin, State(app): State<Arc<AppState>>) -> Response {
    let workers: Vec<_> = app
        .workers
        .workers()
        .into_iter()
        .map(|w| {
            let snap = serde_json::to_value(w.metrics.snapshot()).unwrap_or_default();
            serde_json::json!({ "pair": w.pair.0, "index": w.index, "disk": w.disk, "metrics": snap })
        })
        .collect();
    json(
        StatusCode::OK,
        serde_json::json!({ "workers": workers }).to_string(),
    )
}

/// `GET /_metrics`: the gateway's metrics (see `telemetry`). It names disk paths and the
/// pair layout, so it needs the metrics token (a scraper holds no admin rights) or the
/// admin token, unless the operator opened it (`--metrics-open`).
pub async fn metrics(State(app): State<Arc<AppState>>, headers: http::HeaderMap) -> Response {
    use crate::telemetry::{exposition, snapshot};
    if !app
        .internal
        .metrics_ok(app.admin_token.as_deref(), &headers)
    {
        return error_json(StatusCode::FORBIDDEN, "metrics token required");
    }
    match exposition::render(
        &snapshot::gather(&app.store, &app.telemetry, &app.workers),
        &app.telemetry.requests,
    ) {
        Ok(text) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, exposition::CONTENT_TYPE)],
            text,
        )
            .into_response(),
        Err(e) => error_json(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// `GET /_status`: the status page, with the same access as `/_metrics` (it shows the
/// same numbers, disk paths included).
pub async fn status(State(app): State<Arc<AppState>>, headers: http::HeaderMap) -> Response {
    use crate::telemetry::{snapshot, status_page};
    if !app
        .internal
        .metrics_ok(app.admin_token.as_deref(), &headers)
    {
        return error_json(StatusCode::FORBIDDEN, "metrics token required");
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, status_page::CONTENT_TYPE)],
        status_page::render(&snapshot::gather(&app.store, &app.telemetry, &app.workers)),
    )
        .into_response()
}

/// `GET /_admin/unmove`: progress of the drains of failed disks.
pub async fn unmove_status(_: Admin, State(app): State<Arc<AppState>>) -> Response {
    let drains = serde_json::to_value(app.workers.drains()).unwrap_or_default();
    json(
        StatusCode::OK,
        serde_json::json!({ "drains": drains }).to_string(),
    )
}

#[derive(serde::Deserialize)]
pub struct FailDisk {
    disk: String,
}

/// `POST /_admin/disks/fail` with `{"disk": DISK}`: the disk's pair goes READ_ONLY and
/// UNMOVE copies the surviving disk's files to other pairs.
pub async fn fail_disk(
    _: Admin,
    State(app): State<Arc<AppState>>,
    body: axum::body::Bytes,
) -> Response {
    let Ok(req) = serde_json::from_slice::<FailDisk>(&body) else {
        return error_json(StatusCode::BAD_REQUEST, r#"expected {"disk": "DISK"}"#);
    };
    match app.workers.fail_disk(&app.store, &req.disk).await {
        Ok(p) => json(
            StatusCode::OK,
            serde_json::to_value(p).unwrap_or_default().to_string(),
        ),
        Err(e @ crate::workers::DrainError::UnknownDisk(_)) => error_json(StatusCode::NOT_FOUND, e),
        Err(e @ crate::workers::DrainError::RemoteSurvivor(_)) => {
            error_json(StatusCode::CONFLICT, e)
        }
        Err(e) => error_json(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// A job as the admin API shows it.
fn job_json(id: u64, job: &crate::meta::jobs::JobRecord) -> serde_json::Value {
    use crate::meta::jobs::JobState;
    let (bucket, prefix) = job.op.scope();
    let iso = |ms: u64| {
        time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
            .ok()
            .and_then(|t| {
                t.format(&time::format_description::well_known::Rfc3339)
                    .ok()
            })
    };
    serde_json::json!({
        "id": id,
        "op": job.op.name(),
        "bucket": bucket,
        "prefix": prefix,
        "state": job.state.name(),
        "error": match &job.state { JobState::Failed(why) => Some(why.as_str()), _ => None },
        "deleted": job.deleted,
        "remaining": job.remaining_estimate(),
        "total_estimate": job.total_estimate,
        "started": iso(job.started_ms),
        "finished": job.finished_ms.and_then(iso),
    })
}

#[derive(serde::Deserialize)]
pub struct NewJob {
    op: String,
    bucket: String,
    #[serde(default)]
    prefix: String,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A metadata failure told to the operator: unknown things are 404, no quorum 503.
fn meta_error_json(e: crate::meta::MetaError) -> Response {
    use crate::meta::MetaError as M;
    match e {
        M::NoSuchBucket | M::NotFound => error_json(StatusCode::NOT_FOUND, e),
        M::Unavailable(_) => error_json(StatusCode::SERVICE_UNAVAILABLE, e),
        other => error_json(StatusCode::INTERNAL_SERVER_ERROR, other),
    }
}

/// `POST /_admin/jobs` with `{"op": "delete-prefix", "bucket": B, "prefix": P}` or
/// `{"op": "delete-bucket", "bucket": B}`: starts the job and answers at once with its id.
pub async fn create_job(
    _: Admin,
    State(app): State<Arc<AppState>>,
    body: axum::body::Bytes,
) -> Response {
    const EXPECTED: &str = r#"expected {"op": "delete-prefix", "bucket": B, "prefix": P} or {"op": "delete-bucket", "bucket": B}"#;
    let Ok(req) = serde_json::from_slice::<NewJob>(&body) else {
        return error_json(StatusCode::BAD_REQUEST, EXPECTED);
    };
    let op = match req.op.as_str() {
        "delete-prefix" => crate::meta::jobs::JobOp::DeletePrefix {
            bucket: req.bucket,
            prefix: req.prefix,
        },
        // A prefix here would read as "delete only these", which this op does not do.
        "delete-bucket" if req.prefix.is_empty() => {
            crate::meta::jobs::JobOp::DeleteBucket { bucket: req.bucket }
        }
        "delete-bucket" => {
            return error_json(
                StatusCode::BAD_REQUEST,
                "delete-bucket takes no prefix: it deletes every object of the bucket",
            );
        }
        other => {
            return error_json(
                StatusCode::BAD_REQUEST,
                format!("unknown op {other:?}: {EXPECTED}"),
            );
        }
    };
    let meta = app.store.metadata();
    let id = match meta
        .execute(Command::CreateJob {
            op,
            now_ms: now_ms(),
        })
        .await
    {
        Ok(crate::meta::Response::JobCreated(id)) => id,
        Ok(other) => return error_json(StatusCode::INTERNAL_SERVER_ERROR, format!("{other:?}")),
        Err(e) => return meta_error_json(e),
    };
    match meta.read(move |m| m.job(id)).await {
        Ok(Some(job)) => json(StatusCode::ACCEPTED, job_json(id, &job).to_string()),
        Ok(None) => error_json(StatusCode::INTERNAL_SERVER_ERROR, "the new job is gone"),
        Err(e) => meta_error_json(e),
    }
}

/// `GET /_admin/jobs`: every job kept, by id.
pub async fn list_jobs(_: Admin, State(app): State<Arc<AppState>>) -> Response {
    match app.store.metadata().read(|m| m.jobs()).await {
        Ok(jobs) => {
            let all: Vec<_> = jobs.iter().map(|(id, j)| job_json(*id, j)).collect();
            json(
                StatusCode::OK,
                serde_json::json!({ "jobs": all }).to_string(),
            )
        }
        Err(e) => meta_error_json(e),
    }
}

/// `GET /_admin/jobs/{id}`.
pub async fn job_status(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(id): Path<u64>,
) -> Response {
    match app.store.metadata().read(move |m| m.job(id)).await {
        Ok(Some(job)) => json(StatusCode::OK, job_json(id, &job).to_string()),
        Ok(None) => error_json(StatusCode::NOT_FOUND, format!("no job {id}")),
        Err(e) => meta_error_json(e),
    }
}

/// `POST /_admin/jobs/{id}/cancel`: a running job stops after the chunk in progress.
pub async fn cancel_job(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(id): Path<u64>,
) -> Response {
    match app
        .store
        .metadata()
        .execute(Command::EndJob {
            id,
            state: crate::meta::jobs::JobState::Cancelled,
            now_ms: now_ms(),
        })
        .await
    {
        Ok(crate::meta::Response::Job(job)) => json(StatusCode::OK, job_json(id, &job).to_string()),
        Ok(other) => error_json(StatusCode::INTERNAL_SERVER_ERROR, format!("{other:?}")),
        Err(e) => meta_error_json(e),
    }
}

/// `DELETE /_admin/buckets/{bucket}`: a plain DeleteBucket, refused (409) while the
/// bucket holds objects or uploads in progress; `POST /_admin/jobs` with
/// `delete-bucket` deletes it with its contents.
pub async fn delete_bucket(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(bucket): Path<String>,
) -> Response {
    use crate::store::StoreError;
    match app.store.delete_bucket(&bucket).await {
        Ok(()) => json(
            StatusCode::OK,
            serde_json::json!({ "bucket": bucket, "deleted": true }).to_string(),
        ),
        Err(StoreError::BucketNotEmpty(_)) => error_json(
            StatusCode::CONFLICT,
            format!(
                "bucket {bucket} is not empty (it holds objects or multipart uploads in \
                 progress); --force deletes them with it"
            ),
        ),
        Err(e @ StoreError::NoSuchBucket(_)) => error_json(StatusCode::NOT_FOUND, e),
        Err(e) => error_json(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}
