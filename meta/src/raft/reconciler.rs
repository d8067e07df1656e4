//! The work across groups that a group's leader does in the background (`docs/scaling.md`,
//! section 3): one round every [`ROUND_INTERVAL`] on every group this node leads.
//!
//! - **Ownership.** The group's `ownership` row follows the shard map root has applied: a
//!   leader whose row is older proposes `SetOwnership` (root too, once the map has changed
//!   from the single group of before; until then no row means everything, as before).
//! - **The outbox.** The decs owed by removed entries whose content another group owns go
//!   to their FileDB groups (`DecBatch`, one per group), then leave the outbox
//!   (`OutboxDone`, in this group's log).
//! - **The reconciler.** References this group took (`RefInc`) and still holds pending past
//!   their deadline and the grace (`ClusterConfig::reconcile_grace_ms`): the index group of
//!   each is asked (`Fence`), then each is settled: kept if its entry exists or its dec is
//!   owed, released if it never will exist (the fence makes sure of that).
//! - **Splits** (`split.rs`). A FileDB group's leader plans its split once it holds more
//!   than `--group-split-files` records, and a group holding S3 keys (root or an index
//!   group) plans an index split once its index entries pass `--group-split-objects`;
//!   root's leader drives a planned split to its
//!   commit; the leader of a group that handed rows off drops them once the map is
//!   committed.
//! - **Expiry.** `Released` rows past a day and fences past a week, in bounded batches,
//!   when there are any (a look at the front of their age index first, so that a group
//!   with nothing to expire proposes nothing).
//!
//! Every step may be cut short and run again, by this leader or the next: a resent dec
//! finds its `Released` row, a settle without a pending row changes nothing, a fence asked
//! twice keeps the first, a row already dropped is skipped. Reads are of this replica's
//! state machine, which a leader keeps current; a row it reads late is only sent again. A
//! cluster of one group (every gateway before groups) has no row in any of these tables,
//! and a round proposes nothing.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::metadata::Metadata;
use super::replicas::Replicas;
use super::split;
use super::timeouts::now_ms;
use crate::groups::{GroupId, ROOT, ShardMap};
use crate::outbox::{FenceOutcome, OutboxEntry};
use crate::ref_log::{BATCH_MAX, EXPIRE_MAX, RefOutcome, RefState, Settle};
use crate::shard_map::IMPLICIT_VERSION;
use crate::{Command, MetaError, Response};

/// How often a leader looks at its group's cross-group work.
pub const ROUND_INTERVAL: Duration = Duration::from_millis(500);
/// How often expired rows are looked for.
const EXPIRY_INTERVAL: Duration = Duration::from_secs(60);
/// Bound on the pending references one round settles (each costs a `Fence` in its index
/// group).
const PENDING_PER_ROUND: usize = 1024;

/// Starts the rounds on `replicas` (stopped by [`Replicas::shutdown`]).
pub fn start(replicas: &Arc<Replicas>) {
    let task = tokio::spawn(run(Arc::downgrade(replicas)));
    replicas.keep_task(task);
    super::settler::start(replicas);
}

/// Runs a round every [`ROUND_INTERVAL`] until the replicas are dropped.
async fn run(replicas: Weak<Replicas>) {
    let mut last_expiry: Option<Instant> = None;
    loop {
        tokio::time::sleep(ROUND_INTERVAL).await;
        let Some(r) = replicas.upgrade() else { return };
        let expire = last_expiry.is_none_or(|t| t.elapsed() >= EXPIRY_INTERVAL);
        round(&r, expire).await;
        if expire {
            last_expiry = Some(Instant::now());
        }
    }
}

/// One round on every group this node leads.
pub async fn round(r: &Replicas, expire: bool) {
    let map = match r.shard_map().await {
        Ok(map) => map,
        Err(e) => {
            tracing::debug!(error = %e, "no shard map yet: no cross-group work");
            return;
        }
    };
    for id in r.ids() {
        let Some(meta) = r.get(id) else { continue };
        if !meta.leads() {
            continue;
        }
        group_round(r, &map, id, &meta, expire).await;
    }
}

/// One round's steps on a group this node leads. Each stands alone (a FileDB group that
/// cannot be reached fails the outbox drain, and must not hold back a split or the
/// expiry): a failed step is logged and the next one runs.
async fn group_round(
    r: &Replicas,
    map: &ShardMap,
    id: GroupId,
    meta: &Arc<Metadata>,
    expire: bool,
) {
    let logged = |step: &'static str, done: Result<(), MetaError>| {
        if let Err(e) = done {
            tracing::warn!(group = id, step, error = %e, "cross-group work of a group this node leads");
        }
    };
    logged("ownership", follow_ownership(map, id, meta).await);
    logged("drop", split::drop_handed_off(map, id, meta).await);
    logged("size", split::split_when_full(r, map, id, meta).await);
    logged(
        "index size",
        split::split_index_when_full(r, map, id, meta).await,
    );
    logged("outbox", drain_outbox(r, map, meta).await);
    logged("reconcile", reconcile(r, map, meta).await);
    if expire {
        logged("expiry", expire_rows(meta).await);
    }
    if id == ROOT {
        logged(
            "buckets",
            super::buckets::copy_where_behind(r, map, meta).await,
        );
        logged("split", split::drive(r, map, meta).await.map(drop));
        logged(
            "rebalance",
            split::rebalance_when_uneven(r, map, meta).await,
        );
    }
}

/// `SetOwnership` when the map has moved past the group's row.
async fn follow_ownership(map: &ShardMap, id: GroupId, meta: &Metadata) -> Result<(), MetaError> {
    if map.version <= IMPLICIT_VERSION || map.group(id).is_none() {
        return Ok(());
    }
    let have = meta.read_local(|s| s.ownership()).await?;
    if have.is_some_and(|o| o.map_version >= map.version) {
        return Ok(());
    }
    meta.execute(Command::SetOwnership {
        group: id,
        map: map.clone(),
    })
    .await?;
    tracing::info!(
        group = id,
        version = map.version,
        "the group owns what the map says"
    );
    Ok(())
}

/// Sends the outbox's decs to their groups and drops the rows whose decs were applied.
async fn drain_outbox(r: &Replicas, map: &ShardMap, meta: &Metadata) -> Result<(), MetaError> {
    let rows = meta.read_local(|s| s.outbox(BATCH_MAX)).await?;
    if rows.is_empty() {
        return Ok(());
    }
    let mut by_group: BTreeMap<GroupId, Vec<OutboxEntry>> = BTreeMap::new();
    for row in rows {
        by_group
            .entry(map.filedb_group(&row.sha1))
            .or_default()
            .push(row);
    }
    let mut done = Vec::new();
    for (group, rows) in by_group {
        let decs = rows.iter().map(OutboxEntry::dec).collect();
        let cmd = Command::DecBatch {
            decs,
            now_ms: now_ms(),
        };
        match r.send(group, cmd).await {
            Ok(Response::RefOutcomes(outcomes)) => {
                for (row, outcome) in rows.iter().zip(&outcomes) {
                    if let RefOutcome::MagicMismatch { recorded } = outcome {
                        tracing::error!(
                            sha1 = %hex::encode(row.sha1),
                            ref_id = row.ref_id,
                            recorded,
                            "an outbox dec's magic is not the one its reference was taken \
                             with; nothing was released (the audit reports the leak)"
                        );
                    }
                }
                done.extend(rows.iter().map(OutboxEntry::row));
            }
            Ok(other) => {
                return Err(MetaError::Unexpected(format!(
                    "DecBatch answered {other:?}"
                )));
            }
            // Sent again next round (a new map, a new leader).
            Err(e) => tracing::debug!(group, error = %e, "outbox decs not applied yet"),
        }
    }
    if !done.is_empty() {
        meta.execute(Command::OutboxDone { rows: done }).await?;
    }
    Ok(())
}

/// Settles the references pending past their deadline and the grace.
async fn reconcile(r: &Replicas, map: &ShardMap, meta: &Metadata) -> Result<(), MetaError> {
    let before = now_ms().saturating_sub(r.reconcile_grace_ms());
    let due = meta
        .read_local(move |s| s.pending_refs(before, PENDING_PER_ROUND))
        .await?;
    let mut settles = Vec::new();
    for p in due {
        let RefState::Pending { bucket, key, .. } = p.state else {
            continue;
        };
        let group = map.index_group(&bucket, &key);
        let fence = Command::Fence {
            bucket,
            key,
            ref_id: p.ref_id,
            now_ms: now_ms(),
        };
        let release = match r.send(group, fence).await {
            Ok(Response::Fence(FenceOutcome::Present)) => false,
            Ok(Response::Fence(FenceOutcome::Fenced)) => true,
            Ok(other) => {
                return Err(MetaError::Unexpected(format!("Fence answered {other:?}")));
            }
            // Asked again next round.
            Err(e) => {
                tracing::debug!(group, error = %e, "a pending reference's index group did not answer");
                continue;
            }
        };
        settles.push(Settle {
            sha1: p.sha1,
            ref_id: p.ref_id,
            release,
        });
    }
    if !settles.is_empty() {
        let n = settles.len();
        meta.execute(Command::Settle {
            settles,
            now_ms: now_ms(),
        })
        .await?;
        tracing::info!(settled = n, "pending references settled");
    }
    Ok(())
}

/// Expires released rows and fences, when the front of either is due.
async fn expire_rows(meta: &Metadata) -> Result<(), MetaError> {
    let now = now_ms();
    let (released, fences) = meta.read_local(move |s| s.expiry_due(now)).await?;
    if released {
        meta.execute(Command::ExpireReleased {
            now_ms: now,
            limit: EXPIRE_MAX,
        })
        .await?;
    }
    if fences {
        meta.execute(Command::ExpireFences {
            now_ms: now,
            limit: EXPIRE_MAX,
        })
        .await?;
    }
    Ok(())
}
