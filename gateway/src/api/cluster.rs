//! The cluster's HTTP surface, on the S3 port.
//!
//! - Node-to-node RPCs under `/_cluster/` (openraft's append, vote and snapshot chunks; a
//!   follower's forwarded batch; a follower's read-index request; a membership change
//!   forwarded to the leader), to the root group under `/_cluster/<call>` and to any other
//!   group under `/_cluster/g/<id>/<call>`, all answered by `meta`'s
//!   [`Replicas::serve`](meta::raft::Replicas::serve). Each must carry the cluster secret in
//!   `x-cluster-secret`; without one (or on a node with no secret) it is refused with 403
//!   before its body is read, by [`Access::Cluster`](crate::api::Access) over
//!   [`rpc_routes`].
//! - Operator endpoints under `/_admin/` (admin token): `GET /_admin/cluster` (status),
//!   `POST /_admin/cluster/learners`, `POST /_admin/cluster/{promote,remove}/{id}` (a node
//!   holding replicas of groups leaves once root's leader has moved them off),
//!   `GET /_admin/groups` (the metadata groups, their ranges and this node's replicas),
//!   `POST /_admin/groups/audit` (FileDB's references against the index's, across groups),
//!   `GET /_admin/digest` (a digest of every table, to compare replicas) and
//!   `GET /_admin/backup` (a consistent snapshot, streamed).

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::{StatusCode, header};

use crate::api::{ApiError, ApiResult, json_pretty};
use crate::state::AppState;
use meta::MetaError;
use meta::raft::network::Call;
use meta::raft::split::Leaving;
use meta::raft::{MembershipOp, ServeError};

/// The env variable holding the cluster secret (also `cluster_secret` in the config file).
pub const CLUSTER_SECRET_ENV: &str = "GATEWAY_CLUSTER_SECRET";
/// Bound on one RPC body: a replication batch of at most 256 entries of at most 512
/// commands each stays well under it; snapshot chunks are 1 MiB.
const RPC_BODY_BYTES_MAX: usize = 64 << 20;

/// The node-to-node calls, each body bounded by [`RPC_BODY_BYTES_MAX`]: root's under
/// `/_cluster/<call>` as before groups, every other group's under `/_cluster/g/<id>/<call>`
/// (see [`Call::parse`]).
pub fn rpc_routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/_cluster/{*call}", post(rpc))
        .layer(DefaultBodyLimit::max(RPC_BODY_BYTES_MAX))
}

async fn rpc(State(app): State<Arc<AppState>>, Path(path): Path<String>, body: Bytes) -> Response {
    let Some((group, call)) = Call::parse(&path) else {
        return (StatusCode::NOT_FOUND, "no such cluster call\n").into_response();
    };
    match app.replicas.serve(group, call, &body).await {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response(),
        Err(e) => {
            let status = match e {
                ServeError::NoReplica(_) => StatusCode::NOT_FOUND,
                ServeError::BadBody(_) => StatusCode::BAD_REQUEST,
                ServeError::NoVote => StatusCode::SERVICE_UNAVAILABLE,
                ServeError::Encode(_) => StatusCode::INTERNAL_SERVER_ERROR,
            };
            (status, format!("{e}\n")).into_response()
        }
    }
}

/// The operator's endpoints, part of the admin API.
pub fn admin_routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/_admin/cluster", get(status))
        .route("/_admin/cluster/learners", post(add_learner))
        .route("/_admin/cluster/promote/{id}", post(promote))
        .route("/_admin/cluster/remove/{id}", post(remove))
        .route("/_admin/groups", get(groups))
        .route("/_admin/groups/split", post(split))
        .route("/_admin/groups/move", post(move_replica))
        .route("/_admin/groups/audit", post(audit))
        .route("/_admin/groups/cancel", post(cancel))
        .route("/_admin/digest", get(digest))
        .route("/_admin/backup", get(backup))
}

/// `GET /_admin/cluster`: this node's view of the group.
async fn status(State(app): State<Arc<AppState>>) -> ApiResult {
    Ok(json_pretty(
        &app.store.metadata().status_with_leaving().await?,
    ))
}

#[derive(serde::Deserialize)]
struct LearnerBody {
    id: u64,
    addr: String,
}

async fn change(app: &AppState, op: MembershipOp) -> ApiResult {
    Ok(json_pretty(
        &app.store.metadata().change_membership(op).await?,
    ))
}

/// `POST /_admin/cluster/learners` with `{"id": N, "addr": "HOST:PORT"}`: adds a node as
/// a learner; answers once it has caught up.
async fn add_learner(State(app): State<Arc<AppState>>, body: Bytes) -> ApiResult {
    let b = serde_json::from_slice::<LearnerBody>(&body).map_err(ApiError::bad_request)?;
    change(
        &app,
        MembershipOp::AddLearner {
            id: b.id,
            addr: b.addr,
        },
    )
    .await
}

/// `POST /_admin/cluster/promote/{id}`: a learner becomes a voter.
async fn promote(State(app): State<Arc<AppState>>, Path(id): Path<u64>) -> ApiResult {
    change(&app, MembershipOp::Promote { id }).await
}

/// `POST /_admin/cluster/remove/{id}`: a voter or learner leaves the cluster. One that
/// holds no replica of a group other than root leaves at once (the answer is the
/// cluster's status after it); one that holds some is marked leaving and answered
/// `202 Accepted` with `{"node", "leaving": true, "groups"}`: root's leader moves those
/// replicas to the other nodes, then removes it (`GET /_admin/cluster` lists it under
/// `leaving` until then).
async fn remove(State(app): State<Arc<AppState>>, Path(id): Path<u64>) -> ApiResult {
    match app.replicas.leave(id).await.map_err(plan_error)? {
        Leaving::Now => change(&app, MembershipOp::Remove { id }).await,
        Leaving::Draining(groups) => {
            let mut answer = json_pretty(&serde_json::json!({
                "node": id,
                "leaving": true,
                "groups": groups,
            }));
            *answer.status_mut() = StatusCode::ACCEPTED;
            Ok(answer)
        }
    }
}

/// `GET /_admin/groups`: the metadata groups (id, kind, leader, replicas, records, ...).
async fn groups(State(app): State<Arc<AppState>>) -> ApiResult {
    Ok(json_pretty(&app.replicas.groups().await?))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SplitBody {
    group: meta::groups::GroupId,
    /// The first sha1 (40 hex digits) the new group owns, or with `index` its first key
    /// (`BUCKET/KEY`); none: the middle of the group's first interval (by objects, for
    /// keys).
    at: Option<String>,
    /// Split the group's key interval rather than its sha1 interval (root holds both; an
    /// index group only keys, so it needs no `index`).
    #[serde(default)]
    index: bool,
}

/// `POST /_admin/groups/split` with `{"group": N, "at": "HEX"}` (`at` optional): plans the
/// split of FileDB group N (root included); with `"index": true` and `"at":
/// "BUCKET/KEY"`, or of an index group, the split of its first key interval. Answers at
/// once with the planned map's `version` and the new `group`; root's leader moves the
/// rows and commits the map (`GET /_admin/groups` shows it).
async fn split(State(app): State<Arc<AppState>>, body: Bytes) -> ApiResult {
    let b = serde_json::from_slice::<SplitBody>(&body).map_err(ApiError::bad_request)?;
    let kind = app
        .replicas
        .shard_map()
        .await?
        .group(b.group)
        .map(|g| g.kind);
    let (map, new) = if b.index || kind == Some(meta::groups::GroupKind::Index) {
        let at = match &b.at {
            Some(at) => Some(parse_key_start(at).map_err(ApiError::bad_request)?),
            None => None,
        };
        app.replicas.plan_index_split(b.group, at).await
    } else {
        let at = match &b.at {
            Some(hex) => Some(parse_sha1(hex).map_err(ApiError::bad_request)?),
            None => None,
        };
        app.replicas.plan_split(b.group, at).await
    }
    .map_err(plan_error)?;
    Ok(json_pretty(&serde_json::json!({
        "version": map.version,
        "group": new,
        "from": b.group,
    })))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct MoveBody {
    group: meta::groups::GroupId,
    from: u64,
    to: u64,
}

/// `POST /_admin/groups/move` with `{"group": N, "from": A, "to": B}`: plans moving group
/// N's replica from node A to node B and answers at once with the planned map's
/// `version`; root's leader has B catch up as a learner, makes it a voter, removes A and
/// commits the map, and A then drops its replica (`GET /_admin/groups` shows it).
async fn move_replica(State(app): State<Arc<AppState>>, body: Bytes) -> ApiResult {
    let b = serde_json::from_slice::<MoveBody>(&body).map_err(ApiError::bad_request)?;
    let map = app
        .replicas
        .plan_move(b.group, b.from, b.to)
        .await
        .map_err(plan_error)?;
    Ok(json_pretty(&serde_json::json!({
        "version": map.version,
        "group": b.group,
        "from": b.from,
        "to": b.to,
    })))
}

/// A plan of the map refused: the operator's mistake (400), or another change first (409).
/// `POST /_admin/groups/cancel`: cancels the move under way; answers `{"version",
/// "cancelling": true}` (the plan's version) at once, and root's leader reverses the
/// move's membership steps and drops the plan (`GET /_admin/groups` then shows the map as
/// it was). 400 with no change under way or for a split (it runs to its commit).
async fn cancel(State(app): State<Arc<AppState>>) -> ApiResult {
    let version = app.replicas.cancel_plan().await.map_err(plan_error)?;
    Ok(json_pretty(&serde_json::json!({
        "version": version,
        "cancelling": true,
    })))
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct AuditBody {
    /// Report only: no record is marked DO_NOT_DELETE.
    #[serde(default)]
    dry_run: bool,
}

/// `POST /_admin/groups/audit` (body optional: `{"dry_run": true}`): one pass of the
/// audit over every content, FileDB's references against those the index names
/// (`meta::audit`); each confirmed danger is marked DO_NOT_DELETE unless `dry_run`.
/// Answers the report: `clean`, the counts, `findings` (`sha1` in hex, `kind`: `leak`,
/// `danger`, `magic` or `no_record`, FileDB's `refs` and `magic`, the `named` count and
/// `named_magic`) and the `marked` sha1s.
async fn audit(State(app): State<Arc<AppState>>, body: Bytes) -> ApiResult {
    let b = if body.is_empty() {
        AuditBody::default()
    } else {
        serde_json::from_slice::<AuditBody>(&body).map_err(ApiError::bad_request)?
    };
    let r = app.replicas.audit(!b.dry_run).await?;
    let findings: Vec<serde_json::Value> = r
        .findings
        .iter()
        .map(|f| {
            serde_json::json!({
                "sha1": f.sha1.to_string(),
                "kind": f.kind,
                "refs": f.refs,
                "magic": f.magic,
                "named": f.named.count,
                "named_magic": f.named.magic,
            })
        })
        .collect();
    let marked: Vec<String> = r.marked.iter().map(ToString::to_string).collect();
    Ok(json_pretty(&serde_json::json!({
        "clean": r.confirmed == 0,
        "slices": r.slices,
        "contents": r.contents,
        "references": r.references,
        "in_flight": r.in_flight,
        "do_not_delete": r.do_not_delete,
        "unconfirmed": r.unconfirmed,
        "confirmed": r.confirmed,
        "findings": findings,
        "marked": marked,
    })))
}

fn plan_error(e: MetaError) -> ApiError {
    match e {
        // No such group, a node without a replica, a change under way, a bad point.
        MetaError::InvalidCommand(_) => ApiError::bad_request(e),
        // Another change of the map came first: plan again.
        MetaError::ShardMapVersion { .. } => ApiError::new(StatusCode::CONFLICT, e),
        other => other.into(),
    }
}

/// 40 hex digits as a sha1.
/// The first key an index split gives the new group: `BUCKET/KEY` (a bucket name holds no
/// `/`; KEY may be empty: the bucket's first key).
fn parse_key_start(at: &str) -> Result<meta::groups::IndexStart, String> {
    let Some((bucket, key)) = at.split_once('/') else {
        return Err(format!("at: {at:?} is not BUCKET/KEY"));
    };
    if bucket.is_empty() {
        return Err("at: the bucket is empty (BUCKET/KEY)".into());
    }
    // S3's own bounds on a bucket name and a key.
    if bucket.len() > 63 || key.len() > 1024 {
        return Err("at: a bucket name is at most 63 bytes and a key 1024".into());
    }
    Ok(meta::groups::IndexStart::new(bucket, key))
}

fn parse_sha1(hex: &str) -> Result<[u8; 20], String> {
    let bytes = hex::decode(hex).map_err(|e| format!("at: {e}"))?;
    <[u8; 20]>::try_from(bytes.as_slice()).map_err(|_| "at: a sha1 is 40 hex digits".to_string())
}

/// `GET /_admin/digest`: a SHA-256 of every table of this node's state machine at its
/// `last_applied`, from one read transaction. Replicas at the same index must agree.
async fn digest(State(app): State<Arc<AppState>>) -> ApiResult {
    Ok(json_pretty(
        &app.store.metadata().read_local(|m| m.digest()).await?,
    ))
}

/// `GET /_admin/backup`: a consistent snapshot of the metadata (every write acknowledged
/// before the request), written to a temp file while serving and streamed from it.
async fn backup(State(app): State<Arc<AppState>>) -> ApiResult {
    let dir = match app.store.meta_store().path().parent() {
        Some(d) => d.join("snapshots"),
        None => return Err(ApiError::internal("no data folder")),
    };
    let path = dir.join(format!("backup-{}.tmp", rand::random::<u64>()));
    if let Err(e) = app.store.metadata().backup(path.clone()).await {
        let _ = std::fs::remove_file(&path);
        return Err(e.into());
    }
    let file = tokio::fs::File::open(&path)
        .await
        .map_err(ApiError::internal)?;
    // Unlinked now: the open handle streams it, and nothing is left behind.
    let _ = std::fs::remove_file(&path);
    let stream = tokio_util::io::ReaderStream::with_capacity(file, 1 << 20);
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/octet-stream")],
        Body::from_stream(stream),
    )
        .into_response())
}
