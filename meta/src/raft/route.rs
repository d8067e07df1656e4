//! Routing a write by the shard map (`docs/scaling.md`, sections 2 and 3): the writes that
//! reference content, to the index group of their key, with the reference taken first in
//! the content's FileDB group when that is another group.
//!
//! The order never loses data: the reference before the entry, and on a write refused for
//! good the reference released at once (`Settle`), so a crash anywhere leaves at worst a
//! pending reference for the reconciler (`reconciler.rs`), never an entry without its
//! reference. A `Moved` answer (the map changed under the write) is tried again on the
//! map root has applied since, a bounded number of times.

use rand::RngExt as _;

use super::replicas::Replicas;
use super::timeouts::now_ms;
use crate::command::ContentRef;
use crate::groups::GroupId;
use crate::outbox::FenceOutcome;
use crate::ref_log::Settle;
use crate::{Command, MetaError, Response};

/// How long a reference taken for a write may stay pending: past it, a late entry is
/// refused and the reconciler may release it. Far beyond any write's own bounds (the
/// append deadline is 20 s).
pub const REF_DEADLINE_MS: u64 = 5 * 60 * 1000;
/// Bound on the tries of a write answered `Moved` (each on the map root has applied
/// since).
const MOVED_TRIES: usize = 3;

/// Runs `cmd`, a write of (`bucket`, `key`) that references content (see
/// [`Command::content_reference`]), in the group that owns the key. When the content's
/// FileDB group is another, the reference is taken there first (`RefInc`, under a fresh
/// random ref_id) and the write goes as a `ForeignRef`. Answers as the write would in one
/// group: `ContentGone` when content that had to exist has gone.
pub async fn referencing_write(
    replicas: &Replicas,
    bucket: &str,
    key: &str,
    cmd: Command,
) -> Result<Response, MetaError> {
    let Some(content) = cmd.content_reference() else {
        return Err(MetaError::InvalidCommand(
            "a referencing write that references no content".into(),
        ));
    };
    let mut tries = 0;
    loop {
        tries += 1;
        let map = replicas.shard_map().await?;
        let index = map.index_group(bucket, key);
        let filedb = map.filedb_group(&content.sha1.0);
        let answer = if index == filedb {
            replicas.send(index, cmd.clone()).await
        } else {
            across(replicas, (index, filedb), (bucket, key), &cmd, content).await
        };
        match answer {
            Err(MetaError::Moved { map_version }) if tries < MOVED_TRIES => {
                tracing::debug!(map_version, "the map moved under a write: trying again");
                // Root may not have applied the newer map yet.
                tokio::time::sleep(std::time::Duration::from_millis(50 * tries as u64)).await;
                replicas.refresh_map().await?;
            }
            other => return other,
        }
    }
}

/// The write across two groups: the reference in `filedb`, then the entry in `index`.
async fn across(
    replicas: &Replicas,
    (index, filedb): (GroupId, GroupId),
    (bucket, key): (&str, &str),
    cmd: &Command,
    content: ContentRef,
) -> Result<Response, MetaError> {
    // A fresh id per try: a retried write never reuses a reference that may be settled.
    // The top bit is the derived ids' (`outbox.rs`).
    let ref_id = rand::rng().random::<u64>() >> 1;
    let now = now_ms();
    let inc = Command::RefInc {
        sha1: content.sha1,
        magic: content.magic,
        ref_id,
        pair: content.stored,
        bucket: bucket.to_string(),
        key: key.to_string(),
        deadline_ms: now + REF_DEADLINE_MS,
        now_ms: now,
    };
    match replicas.send(filedb, inc).await {
        Ok(Response::RefTaken(_)) => {}
        // Content that had to exist has gone: as in one group.
        Err(MetaError::NotFound) if content.stored.is_none() => {
            return Ok(Response::ContentGone);
        }
        Ok(other) => return Err(MetaError::Unexpected(format!("RefInc answered {other:?}"))),
        // Unknown (Unavailable): a reference may be pending; the reconciler settles it.
        Err(e) => return Err(e),
    }
    let write = Command::ForeignRef {
        bucket: bucket.to_string(),
        key: key.to_string(),
        ref_id,
        command: Box::new(cmd.clone()),
    };
    match replicas.send(index, write).await {
        Ok(response) => Ok(response),
        // The outcome is unknown: the entry may exist. The reconciler decides.
        Err(e @ MetaError::Unavailable(_)) => Err(e),
        // Refused (a precondition, no bucket, a fence, a moved range): the reference goes
        // now rather than after the deadline, the reconciler's way. A refusal may answer a
        // second delivery of a write whose first was applied (`Replicas::send` passes an
        // unreachable node over), so the index group is asked first, and its fence keeps
        // any later delivery out.
        Err(e) => match release_now(replicas, (index, filedb), bucket, key, ref_id, &content).await
        {
            Ok(true) => Err(e),
            // The entry exists after all: the write was applied, its answer lost.
            Ok(false) => Err(MetaError::Unavailable(
                "the write was applied by an earlier delivery whose answer was lost".into(),
            )),
            Err(s) => {
                tracing::warn!(error = %s, "a refused write's reference was not released now; the reconciler will");
                Err(e)
            }
        },
    }
}

/// Fences a refused write's reference in `index` and, if its entry does not exist,
/// releases it in `filedb`. Answers whether it was released.
async fn release_now(
    replicas: &Replicas,
    (index, filedb): (GroupId, GroupId),
    bucket: &str,
    key: &str,
    ref_id: u64,
    content: &ContentRef,
) -> Result<bool, MetaError> {
    let fence = Command::Fence {
        bucket: bucket.to_string(),
        key: key.to_string(),
        ref_id,
        now_ms: now_ms(),
    };
    match replicas.send(index, fence).await? {
        Response::Fence(FenceOutcome::Fenced) => {}
        Response::Fence(FenceOutcome::Present) => return Ok(false),
        other => return Err(MetaError::Unexpected(format!("Fence answered {other:?}"))),
    }
    let settle = Command::Settle {
        settles: vec![Settle {
            sha1: content.sha1.0,
            ref_id,
            release: true,
        }],
        now_ms: now_ms(),
    };
    replicas.send(filedb, settle).await?;
    Ok(true)
}
