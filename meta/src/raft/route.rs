//! Routing a write by the shard map (`docs/scaling.md`, sections 2 and 3): the writes that
//! reference content, to the index group of their key, with the reference taken first in
//! the content's FileDB group when that is another group.
//!
//! The order never loses data: the reference before the entry, and on a write refused for
//! good the reference released at once (`Settle`), so a crash anywhere leaves at worst a
//! pending reference for the reconciler (`reconciler.rs`), never an entry without its
//! reference. A `Moved` answer (the map changed under the write) is tried again on the
//! map root has applied since, a bounded number of times.

use std::collections::BTreeMap;
use std::time::Instant;

use rand::RngExt as _;

use super::config::CrashPoint;
use super::replicas::{MOVED_PAUSE_MAX, MOVED_PAUSE_MIN, MOVED_WAIT, Replicas};
use super::timeouts::now_ms;
use crate::command::ContentRef;
use crate::groups::{GroupId, ShardMap};
use crate::outbox::FenceOutcome;
use crate::ref_log::Settle;
use crate::{Command, MetaError, Response};

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
    let cmd = &cmd;
    replicas
        .on_the_map(|map| async move {
            let index = map.index_group(bucket, key);
            let filedb = map.filedb_group(&content.sha1.0);
            if index == filedb {
                replicas.send_on(&map, index, cmd.clone()).await
            } else {
                across(replicas, &map, (index, filedb), (bucket, key), cmd, content).await
            }
        })
        .await
}

impl Replicas {
    /// Runs `cmd` in the group the map gives it: a FileDB command (see
    /// [`Command::filedb_sha1`]) in its content's group; a change of a bucket's record in
    /// root, then copied to the bucket's index groups; a write of one key of the index
    /// ([`Command::index_key`]) in the group owning the key; any other in root (PairDB,
    /// buckets, keys, and the index's writes of several keys, which
    /// [`Replicas::split_by_index_group`] sends where index groups exist). A write that
    /// references content is routed by its key ([`Replicas::execute_at`]) and refused
    /// here.
    pub async fn execute(&self, cmd: Command) -> Result<Response, MetaError> {
        if cmd.content_reference().is_some() {
            return Err(MetaError::InvalidCommand(
                "a write that references content is routed by its key".into(),
            ));
        }
        let Some(sha1) = cmd.filedb_sha1() else {
            if let Some(bucket) = cmd.changed_bucket() {
                let bucket = bucket.to_string();
                // Boxed: its listings and copies would make every command's future large.
                return Box::pin(self.change_bucket(&bucket, cmd)).await;
            }
            if let Some((bucket, key)) = cmd.index_key() {
                let (bucket, key) = (bucket.to_string(), key.to_string());
                return self.execute_in_index(&bucket, &key, cmd).await;
            }
            return self.root().execute(cmd).await;
        };
        let cmd = &cmd;
        self.on_the_map(|map| async move {
            self.send_on(&map, map.filedb_group(&sha1.0), cmd.clone())
                .await
        })
        .await
    }

    /// Runs `cmd`, a change of `bucket`'s record, in root, then copies the record to the
    /// bucket's index groups before answering (`buckets.rs`). A DeleteBucket is refused
    /// while an index group other than root holds a key of the bucket.
    async fn change_bucket(&self, bucket: &str, cmd: Command) -> Result<Response, MetaError> {
        if matches!(cmd, Command::DeleteBucket { .. }) && !self.empty_beyond_root(bucket).await? {
            return Err(MetaError::BucketNotEmpty);
        }
        let answer = self.root().execute(cmd).await?;
        self.copy_bucket(bucket).await?;
        Ok(answer)
    }

    /// Runs `cmd`, a write of `bucket`/`key`, in the group the map gives the key; a write
    /// that references content takes its reference where the content lives
    /// ([`referencing_write`]).
    pub async fn execute_at(
        &self,
        bucket: &str,
        key: &str,
        cmd: Command,
    ) -> Result<Response, MetaError> {
        if cmd.content_reference().is_some() {
            referencing_write(self, bucket, key, cmd).await
        } else if cmd.filedb_sha1().is_some()
            || cmd.changed_bucket().is_some()
            || cmd.index_key().is_some()
        {
            self.execute(cmd).await
        } else {
            self.execute_in_index(bucket, key, cmd).await
        }
    }

    /// Runs `cmd`, a write of the index at (`bucket`, `key`), in the group owning the key.
    async fn execute_in_index(
        &self,
        bucket: &str,
        key: &str,
        cmd: Command,
    ) -> Result<Response, MetaError> {
        let cmd = &cmd;
        self.on_the_map(|map| async move {
            self.send_on(&map, map.index_group(bucket, key), cmd.clone())
                .await
        })
        .await
    }
}

impl Replicas {
    /// Runs a write of several keys of `bucket` (`items`, each naming its key by `key_of`)
    /// as one command per index group (`command` makes it from the group's items, in
    /// their order) and answers each item's result in the order given. Items a group
    /// answers `Moved` for are routed again on the newer map, the others are not sent
    /// again (a key deleted twice would report it was absent). With one index group, one
    /// command, as before index groups.
    pub(crate) async fn split_by_index_group<T, R>(
        &self,
        bucket: &str,
        items: Vec<T>,
        key_of: impl Fn(&T) -> &str,
        command: impl Fn(Vec<T>) -> Command,
        answer: impl Fn(Response) -> Result<Vec<R>, MetaError>,
    ) -> Result<Vec<R>, MetaError>
    where
        T: Clone,
    {
        let mut out: Vec<Option<R>> = items.iter().map(|_| None).collect();
        let mut left: Vec<usize> = (0..items.len()).collect();
        let deadline = Instant::now() + MOVED_WAIT;
        let mut pause = MOVED_PAUSE_MIN;
        loop {
            let map = self.shard_map().await?;
            let mut by_group: BTreeMap<GroupId, Vec<usize>> = BTreeMap::new();
            for i in left {
                by_group
                    .entry(map.index_group(bucket, key_of(&items[i])))
                    .or_default()
                    .push(i);
            }
            let mut moved = Vec::new();
            for (group, chunk) in by_group {
                let cmd = command(chunk.iter().map(|i| items[*i].clone()).collect());
                match self.send_on(&map, group, cmd).await {
                    Ok(response) => {
                        let results = answer(response)?;
                        if results.len() != chunk.len() {
                            return Err(MetaError::Unexpected(format!(
                                "{} answers for {} keys",
                                results.len(),
                                chunk.len()
                            )));
                        }
                        for (i, r) in chunk.into_iter().zip(results) {
                            out[i] = Some(r);
                        }
                    }
                    Err(MetaError::Moved { .. }) => moved.extend(chunk),
                    Err(e) => return Err(e),
                }
            }
            if moved.is_empty() {
                break;
            }
            if Instant::now() + pause >= deadline {
                return Err(MetaError::Moved {
                    map_version: map.version,
                });
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MOVED_PAUSE_MAX);
            self.refresh_map().await?;
            left = moved;
        }
        out.into_iter()
            .collect::<Option<Vec<R>>>()
            .ok_or_else(|| MetaError::Unexpected("a key got no answer".into()))
    }
}

/// The write across two groups: the reference in `filedb`, then the entry in `index`.
async fn across(
    replicas: &Replicas,
    map: &ShardMap,
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
        deadline_ms: now + replicas.ref_deadline_ms(),
        now_ms: now,
    };
    match replicas.send_on(map, filedb, inc).await {
        Ok(Response::RefTaken(_)) => replicas.crash_at(CrashPoint::AfterRefInc),
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
    match replicas.send_on(map, index, write).await {
        Ok(response) => {
            replicas.settle_later(content.sha1, ref_id);
            Ok(response)
        }
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
