//! The admin API under `/_admin/`, for operators and tests: what FileDB says about a file,
//! and the disk pairs (list, add, lock, unlock, read-only, read-write).
//!
//! Authenticated with `Authorization: Bearer <GATEWAY_ADMIN_TOKEN>`, checked for every
//! route of [`routes`] by [`Access::Admin`](crate::api::Access); without a configured
//! token the admin API is off and answers 403.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use http::{StatusCode, header};
use placement::{Disk, DiskRef, PairFlags, PairId, PairRecord, Sha1};

use crate::api::{ApiError, ApiResult, json};
use crate::state::AppState;
use crate::store::StoreError;
use meta::Command;

pub const ADMIN_TOKEN_ENV: &str = "GATEWAY_ADMIN_TOKEN";

/// The routes of this module under `/_admin/`: files, pairs, Valkyrie's scrub and
/// UNMOVE, jobs and buckets (the keys' are `keys::routes`, the cluster's
/// `cluster::admin_routes`).
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/_admin/files/{sha1}", get(file))
        .route("/_admin/pairs", get(list_pairs).post(add_pair))
        .route("/_admin/pairs/{id}/{action}", post(pair_action))
        .route("/_admin/scrub", get(scrub_status))
        .route("/_admin/unmove", get(unmove_status))
        .route("/_admin/disks/fail", post(fail_disk))
        .route("/_admin/jobs", get(list_jobs).post(create_job))
        .route("/_admin/jobs/{id}", get(job_status))
        .route("/_admin/jobs/{id}/cancel", post(cancel_job))
        .route("/_admin/buckets/{bucket}", delete(delete_bucket))
}

/// `GET /_admin/files/{sha1}` of a live content, fields in their wire order.
#[derive(serde::Serialize)]
struct LiveFile {
    sha1: String,
    state: &'static str,
    refs: u32,
    magic: u32,
    flags: u32,
    pair: u32,
}

/// `GET /_admin/files/{sha1}` of a content being deleted, fields in their wire order.
#[derive(serde::Serialize)]
struct DeletingFile {
    sha1: String,
    state: &'static str,
    pair: u32,
    since: u64,
}

/// `GET /_admin/files/{sha1}`: the FileDB record or the `deleting` entry of a content.
pub async fn file(State(app): State<Arc<AppState>>, Path(sha1): Path<String>) -> ApiResult {
    let sha1 = sha1
        .parse::<Sha1>()
        .map_err(|_| ApiError::bad_request("not a sha1"))?;
    // From the content's FileDB group, wherever it is (this node may hold no replica).
    let found = app.store.replicas().file_state(sha1).await?;
    let sha1 = sha1.to_hex();
    match found {
        (Some(f), _) => Ok(json(
            StatusCode::OK,
            &LiveFile {
                sha1,
                state: "live",
                refs: f.refs,
                magic: f.magic,
                flags: f.flags,
                pair: f.pair.0,
            },
        )),
        (None, Some(d)) => Ok(json(
            StatusCode::OK,
            &DeletingFile {
                sha1,
                state: "deleting",
                pair: d.pair.0,
                since: d.since_secs,
            },
        )),
        (None, None) => Err(ApiError::not_found("not found")),
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

/// A change of pair `id` (None: a new pair) the store refused: an unknown pair is 404
/// and named; anything else as the store's errors are told.
fn pair_error(e: StoreError, id: Option<u32>) -> ApiError {
    match (e, id) {
        (StoreError::NoSuchPair, Some(id)) => ApiError::not_found(format!("no pair {id}")),
        // Every pair id is taken (AddPair found none after the highest).
        (StoreError::NoSuchPair, None) => ApiError::bad_request("no pair id left"),
        (e, _) => e.into(),
    }
}

/// `GET /_admin/pairs`: every pair with its flags and the fill of each disk.
pub async fn list_pairs(State(app): State<Arc<AppState>>) -> Response {
    let table = app.store.pair_table();
    let pairs: Vec<_> = table
        .ids()
        .into_iter()
        .filter_map(|id| table.get(id).map(|e| pair_json(id, &e.record)))
        .collect();
    json(StatusCode::OK, &serde_json::json!({ "pairs": pairs }))
}

#[derive(serde::Deserialize)]
pub struct NewPair {
    disks: [String; 2],
}

/// `POST /_admin/pairs` with `{"disks": [DISK0, DISK1]}`: adds a writable pair.
pub async fn add_pair(State(app): State<Arc<AppState>>, body: axum::body::Bytes) -> ApiResult {
    let new = serde_json::from_slice::<NewPair>(&body)
        .map_err(|_| ApiError::bad_request(r#"expected {"disks": ["DISK0", "DISK1"]}"#))?;
    let mut disks = Vec::with_capacity(2);
    for d in &new.disks {
        let r = d.parse::<DiskRef>().map_err(ApiError::bad_request)?;
        // Opening checks that this build has the disk's backend.
        Disk::open(&r).map_err(ApiError::bad_request)?;
        disks.push(r);
    }
    let [a, b]: [DiskRef; 2] = disks
        .try_into()
        .map_err(|_| ApiError::bad_request("two disks are needed"))?;
    if a == b {
        return Err(ApiError::bad_request("the two disks of a pair must differ"));
    }
    for d in [&a, &b] {
        if let Some(path) = d.local_path() {
            std::fs::create_dir_all(path)
                .map_err(|e| ApiError::bad_request(format!("{d}: {e}")))?;
        }
    }
    let record = PairRecord::new([a, b]);
    let (id, r) = app
        .store
        .change_pair(Command::AddPair { record })
        .await
        .map_err(|e| pair_error(e, None))?;
    app.workers.ensure(&app.store);
    Ok(json(StatusCode::OK, &pair_json(id, &r)))
}

/// `POST /_admin/pairs/{id}/{lock|unlock|read-only|read-write}`.
pub async fn pair_action(
    State(app): State<Arc<AppState>>,
    Path((id, action)): Path<(u32, String)>,
) -> ApiResult {
    let none = PairFlags::default();
    let (set, clear) = match action.as_str() {
        "lock" => (PairFlags::LOCKED, none),
        "unlock" => (none, PairFlags::LOCKED),
        "read-only" => (PairFlags::READ_ONLY, none),
        "read-write" => (none, PairFlags::READ_ONLY),
        other => return Err(ApiError::not_found(format!("unknown action {other}"))),
    };
    let cmd = Command::SetPairFlags {
        id: PairId(id),
        set,
        clear,
    };
    let (id, r) = app
        .store
        .change_pair(cmd)
        .await
        .map_err(|e| pair_error(e, Some(id)))?;
    Ok(json(StatusCode::OK, &pair_json(id, &r)))
}

/// `GET /_admin/scrub`: each in-process Valkyrie worker's counters and scrub progress.
pub async fn scrub_status(State(app): State<Arc<AppState>>) -> Response {
    let workers: Vec<_> = app
        .workers
        .workers()
        .into_iter()
        .map(|w| {
            let snap = serde_json::to_value(w.metrics.snapshot()).unwrap_or_default();
            serde_json::json!({ "pair": w.pair.0, "index": w.index, "disk": w.disk, "metrics": snap })
        })
        .collect();
    json(StatusCode::OK, &serde_json::json!({ "workers": workers }))
}

/// `GET /_metrics`: the gateway's metrics (see `telemetry`). It names disk paths and the
/// pair layout, so it sits behind [`Access::Metrics`](crate::api::Access): the metrics
/// token (a scraper holds no admin rights) or the admin token, unless the operator opened
/// it (`--metrics-open`).
pub async fn metrics(State(app): State<Arc<AppState>>) -> ApiResult {
    use crate::telemetry::{exposition, snapshot};
    let text = exposition::render(
        &snapshot::gather_with_groups(&app.store, &app.replicas, &app.telemetry, &app.workers)
            .await,
        &app.telemetry.requests,
    )
    .map_err(ApiError::internal)?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, exposition::CONTENT_TYPE)],
        text,
    )
        .into_response())
}

/// `GET /_status`: the status page, with the same access as `/_metrics` (it shows the
/// same numbers, disk paths included).
pub async fn status(State(app): State<Arc<AppState>>) -> Response {
    use crate::telemetry::{snapshot, status_page};
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, status_page::CONTENT_TYPE)],
        status_page::render(
            &snapshot::gather_with_groups(&app.store, &app.replicas, &app.telemetry, &app.workers)
                .await,
        ),
    )
        .into_response()
}

/// `GET /_admin/unmove`: progress of the drains of failed disks.
pub async fn unmove_status(State(app): State<Arc<AppState>>) -> Response {
    let drains = serde_json::to_value(app.workers.drains()).unwrap_or_default();
    json(StatusCode::OK, &serde_json::json!({ "drains": drains }))
}

#[derive(serde::Deserialize)]
pub struct FailDisk {
    disk: String,
}

/// `POST /_admin/disks/fail` with `{"disk": DISK}`: the disk's pair goes READ_ONLY and
/// UNMOVE copies the surviving disk's files to other pairs.
pub async fn fail_disk(State(app): State<Arc<AppState>>, body: axum::body::Bytes) -> ApiResult {
    use crate::workers::DrainError;
    let req = serde_json::from_slice::<FailDisk>(&body)
        .map_err(|_| ApiError::bad_request(r#"expected {"disk": "DISK"}"#))?;
    match app.workers.fail_disk(&app.store, &req.disk).await {
        Ok(p) => Ok(json(
            StatusCode::OK,
            &serde_json::to_value(p).unwrap_or_default(),
        )),
        Err(e @ DrainError::UnknownDisk(_)) => Err(ApiError::not_found(e)),
        Err(e @ DrainError::RemoteSurvivor(_)) => Err(ApiError::new(StatusCode::CONFLICT, e)),
        Err(e) => Err(ApiError::internal(e)),
    }
}

/// A job as the admin API shows it.
fn job_json(id: u64, job: &meta::jobs::JobRecord) -> serde_json::Value {
    use meta::jobs::JobState;
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

/// `POST /_admin/jobs` with `{"op": "delete-prefix", "bucket": B, "prefix": P}` or
/// `{"op": "delete-bucket", "bucket": B}`: starts the job and answers at once with its id.
pub async fn create_job(State(app): State<Arc<AppState>>, body: axum::body::Bytes) -> ApiResult {
    const EXPECTED: &str = r#"expected {"op": "delete-prefix", "bucket": B, "prefix": P} or {"op": "delete-bucket", "bucket": B}"#;
    let req =
        serde_json::from_slice::<NewJob>(&body).map_err(|_| ApiError::bad_request(EXPECTED))?;
    let op = match req.op.as_str() {
        "delete-prefix" => meta::jobs::JobOp::DeletePrefix {
            bucket: req.bucket,
            prefix: req.prefix,
        },
        // A prefix here would read as "delete only these", which this op does not do.
        "delete-bucket" if req.prefix.is_empty() => {
            meta::jobs::JobOp::DeleteBucket { bucket: req.bucket }
        }
        "delete-bucket" => {
            return Err(ApiError::bad_request(
                "delete-bucket takes no prefix: it deletes every object of the bucket",
            ));
        }
        other => {
            return Err(ApiError::bad_request(format!(
                "unknown op {other:?}: {EXPECTED}"
            )));
        }
    };
    // A job deletes current objects as an unversioned bucket does; in a versioned bucket
    // it would have to add markers and remove versions, which jobs do not do yet (their
    // chunks are refused there too, see `meta::jobs`).
    let (bucket, _) = op.scope();
    if let Ok(record) = app.store.bucket(bucket).await
        && record.versioning != meta::versions::Versioning::Unversioned
    {
        return Err(ApiError::bad_request(format!(
            "bucket {bucket} is versioned: jobs do not delete versions yet"
        )));
    }
    // Fenced in each index group of the bucket first, when it is split over several
    // (`meta::raft::jobs`); root refuses a job whose groups changed meanwhile (409).
    let id = app.replicas.create_job(op, now_ms()).await?;
    match app.store.metadata().read(move |m| m.job(id)).await? {
        Some(job) => Ok(json(StatusCode::ACCEPTED, &job_json(id, &job))),
        None => Err(ApiError::internal("the new job is gone")),
    }
}

/// `GET /_admin/jobs`: every job kept, by id.
pub async fn list_jobs(State(app): State<Arc<AppState>>) -> ApiResult {
    let jobs = app.store.metadata().read(|m| m.jobs()).await?;
    let all: Vec<_> = jobs.iter().map(|(id, j)| job_json(*id, j)).collect();
    Ok(json(StatusCode::OK, &serde_json::json!({ "jobs": all })))
}

/// `GET /_admin/jobs/{id}`.
pub async fn job_status(State(app): State<Arc<AppState>>, Path(id): Path<u64>) -> ApiResult {
    match app.store.metadata().read(move |m| m.job(id)).await? {
        Some(job) => Ok(json(StatusCode::OK, &job_json(id, &job))),
        None => Err(ApiError::not_found(format!("no job {id}"))),
    }
}

/// `POST /_admin/jobs/{id}/cancel`: a running job stops after the chunk in progress.
pub async fn cancel_job(State(app): State<Arc<AppState>>, Path(id): Path<u64>) -> ApiResult {
    let ended = app
        .store
        .metadata()
        .execute(Command::EndJob {
            id,
            state: meta::jobs::JobState::Cancelled,
            now_ms: now_ms(),
        })
        .await?;
    match ended {
        meta::Response::Job(job) => Ok(json(StatusCode::OK, &job_json(id, &job))),
        other => Err(ApiError::internal(format!("{other:?}"))),
    }
}

/// `DELETE /_admin/buckets/{bucket}`: a plain DeleteBucket, refused (409) while the
/// bucket holds objects or uploads in progress; `POST /_admin/jobs` with
/// `delete-bucket` deletes it with its contents.
pub async fn delete_bucket(
    State(app): State<Arc<AppState>>,
    Path(bucket): Path<String>,
) -> ApiResult {
    match app.store.delete_bucket(&bucket).await {
        Ok(()) => Ok(json(
            StatusCode::OK,
            &serde_json::json!({ "bucket": bucket, "deleted": true }),
        )),
        Err(StoreError::BucketNotEmpty(_)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "bucket {bucket} is not empty (it holds objects or multipart uploads in \
                 progress); --force deletes them with it"
            ),
        )),
        Err(e) => Err(e.into()),
    }
}
