//! The lifecycle sweep: expires the objects bucket rules match and aborts abandoned
//! multipart uploads, continuously, in bounded and paced batches.
//!
//! Each metadata group that holds keys of the S3 index (root, and the index groups of a
//! split index) is swept by its own leader, over the keys its group owns, by the rules
//! as its group holds them: root's own, and in an index group the copies root's bucket
//! records bring (`meta::bucket_copies`, format 11). [`spawn`] keeps one sweep per such
//! group this node leads, so one node acts on each key at a time. Every change is an
//! ordinary command in that group: `ExpireObjects` removes an object only if it is still
//! the version the sweep read (its sequence number) and the rules as they are in that
//! transaction expire it, and releases its content exactly once; `AbortUpload` releases
//! an upload's parts in the same transaction that drops it.
//!
//! On a versioned bucket, expiring a current version adds a delete marker (the same
//! `ExpireObjects` command), and a second pass over the bucket's `versions` table sends
//! `ExpireVersions` batches for noncurrent versions past their NoncurrentDays (beyond the
//! NewerNoncurrentVersions kept) and delete markers left alone.
//!
//! Resuming: the object pass over each bucket keeps its cursor (the last key dealt with)
//! in the bucket's `lifecycle` record of its group (the version pass its (key, number)
//! beside it), written by the same `ExpireObjects` commands, so a restart or a new leader
//! continues where the last committed batch ended. The upload sweep keeps no cursor:
//! uploads are few (bounded by `--upload-max-age-secs`), and restarting it from the first
//! upload is cheap.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::Settings;
use super::pacing::Pacer;
use super::rules;
use meta::groups::{GroupId, GroupKind};
use meta::ownership::Ownership;
use meta::raft::{Metadata, Replicas};
use meta::versions::VersionRecord;
use meta::{Command, MetaError, Response};

/// Index entries read per batch of the object pass (also the command's key bound).
const SCAN_BATCH: usize = 1000;
/// Uploads read per batch of the upload sweep.
const UPLOAD_BATCH: usize = 100;
/// A cursor is committed at least every this many batches, even when nothing expired.
const CURSOR_SAVE_BATCHES: u32 = 16;
/// Pause after a failed pass (no leader, storage error) before the next.
const RETRY_PAUSE: Duration = Duration::from_secs(1);
/// How often [`spawn`]'s task looks at which groups this node leads. A sweep goes on for
/// at most this long after its node stopped leading: harmless, as every command is
/// checked again where it is applied.
const FOLLOW_INTERVAL: Duration = Duration::from_secs(1);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn now_secs() -> u64 {
    now_ms() / 1000
}

/// What one pass did, for the log.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PassReport {
    pub objects_expired: u64,
    /// Noncurrent versions and lone delete markers removed.
    pub versions_expired: u64,
    pub uploads_aborted: u64,
}

/// The sweep of one group, on the node that leads it.
pub struct LifecycleWorker {
    replicas: Arc<Replicas>,
    group: GroupId,
    /// This node's replica of the group: the sweep reads it, and proposes through it.
    meta: Arc<Metadata>,
    settings: Settings,
    pacer: Pacer,
}

/// Runs a sweep of every group holding index keys that this node leads, for as long as
/// it leads it.
pub fn spawn(replicas: Arc<Replicas>, settings: Settings) {
    tokio::spawn(async move {
        // Per group: the replica swept (a replica moved off and back is another one) and
        // its sweep.
        let mut sweeps: BTreeMap<GroupId, (Arc<Metadata>, tokio::task::JoinHandle<()>)> =
            BTreeMap::new();
        loop {
            let led = index_groups_led(&replicas).await;
            sweeps.retain(|id, (meta, task)| {
                let keep =
                    !task.is_finished() && led.get(id).is_some_and(|now| Arc::ptr_eq(now, meta));
                if !keep {
                    task.abort();
                }
                keep
            });
            for (id, meta) in led {
                if sweeps.contains_key(&id) {
                    continue;
                }
                let mut worker =
                    LifecycleWorker::new(replicas.clone(), id, meta.clone(), settings.clone());
                sweeps.insert(id, (meta, tokio::spawn(async move { worker.run().await })));
            }
            tokio::time::sleep(FOLLOW_INTERVAL).await;
        }
    });
}

/// The replicas this node holds of groups holding index keys (root, index groups) that
/// lead their group now.
async fn index_groups_led(replicas: &Replicas) -> BTreeMap<GroupId, Arc<Metadata>> {
    let map = match replicas.shard_map().await {
        Ok(map) => map,
        Err(e) => {
            tracing::debug!(error = %e, "no shard map yet: no lifecycle sweep");
            return BTreeMap::new();
        }
    };
    replicas
        .ids()
        .into_iter()
        .filter(|id| {
            map.group(*id)
                .is_some_and(|g| matches!(g.kind, GroupKind::Root | GroupKind::Index))
        })
        .filter_map(|id| replicas.get(id).map(|meta| (id, meta)))
        .filter(|(_, meta)| meta.leads())
        .collect()
}

/// Whether the group of `own` owns `bucket`/`key` (None: it owns every key).
fn owns(own: &Option<Ownership>, bucket: &str, key: &str) -> bool {
    own.as_ref()
        .is_none_or(|o| o.owns_key(bucket, key.as_bytes()))
}

impl LifecycleWorker {
    pub fn new(
        replicas: Arc<Replicas>,
        group: GroupId,
        meta: Arc<Metadata>,
        settings: Settings,
    ) -> Self {
        let pacer = Pacer::new(settings.deletes_per_sec);
        LifecycleWorker {
            replicas,
            group,
            meta,
            settings,
            pacer,
        }
    }

    /// Passes forever, one every [`Settings::pass_interval`].
    pub async fn run(&mut self) {
        loop {
            let started = Instant::now();
            match self.pass().await {
                Ok(r) if r != PassReport::default() => {
                    tracing::info!(
                        group = self.group,
                        expired = r.objects_expired,
                        versions_expired = r.versions_expired,
                        uploads_aborted = r.uploads_aborted,
                        "lifecycle pass"
                    );
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(group = self.group, error = %e, "lifecycle pass stopped; retrying");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
            let next = started + self.settings.pass_interval();
            tokio::time::sleep_until(next.into()).await;
        }
    }

    /// One pass: the upload sweep, then the object pass over every bucket with rules in
    /// this group.
    pub async fn pass(&mut self) -> Result<PassReport, MetaError> {
        let mut report = PassReport {
            uploads_aborted: self.sweep_uploads().await?,
            ..PassReport::default()
        };
        let configs = self.meta.read_local(|m| m.lifecycles()).await?;
        for (bucket, record) in configs {
            if record
                .rules
                .iter()
                .any(|r| r.enabled && r.expiration.is_some())
            {
                report.objects_expired += self
                    .expire_bucket(&bucket, record.resume_after.clone())
                    .await?;
            }
            if record
                .rules
                .iter()
                .any(|r| r.enabled && !r.versions.is_none())
            {
                report.versions_expired += self
                    .expire_versions(&bucket, record.versions_resume_after.clone())
                    .await?;
            }
        }
        Ok(report)
    }

    /// Aborts this group's uploads past the gateway's age bound, uploads a rule aborts,
    /// and uploads whose bucket is gone. Returns how many it aborted.
    async fn sweep_uploads(&mut self) -> Result<u64, MetaError> {
        let mut after: Option<String> = None;
        let mut aborted = 0;
        loop {
            let from = after.clone();
            let (batch, next) = self
                .meta
                .read_local(move |m| {
                    let uploads = m.uploads_after(from.as_deref(), UPLOAD_BATCH)?;
                    let next = match uploads.last() {
                        Some((id, _)) if uploads.len() == UPLOAD_BATCH => Some(id.clone()),
                        _ => None,
                    };
                    let own = m.ownership()?;
                    let mut out = Vec::with_capacity(uploads.len());
                    for (id, u) in uploads {
                        // Another group's (a split left it behind): its own sweep's.
                        if !owns(&own, &u.bucket, &u.key) {
                            continue;
                        }
                        let rules = m.lifecycle(&u.bucket)?.map(|r| r.rules);
                        let bucket_gone = m.bucket(&u.bucket)?.is_none();
                        out.push((id, u, rules, bucket_gone));
                    }
                    Ok((out, next))
                })
                .await?;
            let now_ms = now_ms();
            let now = now_ms / 1000;
            let mut done = 0;
            for (id, upload, rules, bucket_gone) in &batch {
                let created_secs = upload.created_ms / 1000;
                // In milliseconds: whole seconds would end an upload up to a second early.
                let too_old = now_ms.saturating_sub(upload.created_ms)
                    >= self.settings.upload_max_age_secs.saturating_mul(1000);
                let by_rule = rules.as_deref().is_some_and(|rules| {
                    rules::upload_abort(rules, &upload.key, created_secs, self.settings.day_secs)
                        .is_some_and(|at| at <= now)
                });
                if !(too_old || by_rule || *bucket_gone) {
                    continue;
                }
                let cmd = Command::AbortUpload {
                    upload_id: id.clone(),
                    now_secs: now,
                };
                let at = self.replicas.execute_at(&upload.bucket, &upload.key, cmd);
                match at.await {
                    Ok(_) => {
                        tracing::info!(
                            upload_id = %id,
                            bucket = %upload.bucket,
                            key = %upload.key,
                            reason = if *bucket_gone { "bucket gone" } else if by_rule { "lifecycle rule" } else { "upload-max-age-secs" },
                            "multipart upload aborted"
                        );
                        done += 1;
                    }
                    // Completed or aborted by its client meanwhile.
                    Err(MetaError::NoSuchUpload) => {}
                    Err(e) => return Err(e),
                }
            }
            aborted += done as u64;
            self.pacer.pace(done).await;
            match next {
                Some(id) => after = Some(id),
                None => return Ok(aborted),
            }
        }
    }

    /// Continues the pass over `bucket`'s noncurrent versions and delete markers from
    /// `resume_after` to its last entry: each batch sends the entries the rules may expire
    /// (the command decides, counting newer versions and checking a marker is alone, in
    /// its own transaction) and moves the cursor. Returns how many it removed.
    async fn expire_versions(
        &mut self,
        bucket: &str,
        mut resume_after: Option<(String, u64)>,
    ) -> Result<u64, MetaError> {
        let day_secs = self.settings.day_secs;
        let mut expired = 0;
        let mut unsaved_batches = 0u32;
        loop {
            let (b, from) = (bucket.to_string(), resume_after.clone());
            let (rules, entries, own) = self
                .meta
                .read_local(move |m| {
                    let rules = m.lifecycle(&b)?.map(|r| r.rules).unwrap_or_default();
                    let after = from.as_ref().map(|(k, n)| (k.as_str(), *n));
                    let entries = m.versions_after(&b, after, SCAN_BATCH)?;
                    Ok((rules, entries, m.ownership()?))
                })
                .await?;
            if rules.is_empty() {
                return Ok(expired);
            }
            let now = now_secs();
            let candidates: Vec<(String, u64)> = entries
                .iter()
                .filter(|(key, ..)| owns(&own, bucket, key))
                .filter(|(key, _, entry)| match entry {
                    // Due by its days if nothing newer were kept: the command counts.
                    VersionRecord::Object {
                        record,
                        noncurrent_since_ms,
                        ..
                    } => rules::noncurrent_due(
                        &rules,
                        key,
                        // Tags are not read here: the command checks the version's own.
                        (record.size_bytes, None),
                        noncurrent_since_ms / 1000,
                        u32::MAX,
                        day_secs,
                        now,
                    ),
                    VersionRecord::DeleteMarker { .. } => rules::lone_marker_due(&rules, key),
                })
                .map(|(key, number, _)| (key.clone(), *number))
                .collect();
            let next = match entries.last() {
                Some((key, number, _)) if entries.len() == SCAN_BATCH => {
                    Some((key.clone(), *number))
                }
                _ => None,
            };
            let batch = Batch {
                due: !candidates.is_empty(),
                last: next.is_none(),
                resumed: resume_after.is_some(),
            };
            let cmd = || Command::ExpireVersions {
                bucket: bucket.to_string(),
                versions: candidates,
                resume_after: next.clone(),
                day_secs,
                now_secs: now,
            };
            match self.finish_batch(batch, &mut unsaved_batches, cmd).await? {
                Some(done) => expired += done,
                // Deleted meanwhile: nothing left to expire in it.
                None => return Ok(expired),
            }
            match next {
                Some(_) => resume_after = next,
                None => return Ok(expired),
            }
        }
    }

    /// Continues the pass over `bucket` from `resume_after` to its last key. Returns how
    /// many objects it expired.
    async fn expire_bucket(
        &mut self,
        bucket: &str,
        mut resume_after: Option<String>,
    ) -> Result<u64, MetaError> {
        let day_secs = self.settings.day_secs;
        let mut expired = 0;
        let mut unsaved_batches = 0u32;
        loop {
            let (b, from) = (bucket.to_string(), resume_after.clone());
            let (rules, objects, own) = self
                .meta
                .read_local(move |m| {
                    let rules = m.lifecycle(&b)?.map(|r| r.rules).unwrap_or_default();
                    let objects = m.objects_after(&b, from.as_deref(), SCAN_BATCH)?;
                    Ok((rules, objects, m.ownership()?))
                })
                .await?;
            if rules.is_empty() {
                // The configuration was removed meanwhile: nothing to continue.
                return Ok(expired);
            }
            let now = now_secs();
            let due: Vec<(String, u64)> = objects
                .iter()
                .filter(|(key, _)| owns(&own, bucket, key))
                .filter(|(key, o)| {
                    // Tags are not read here: the command checks the object's own.
                    let object = (o.size_bytes, None);
                    rules::object_expiry(&rules, key, object, o.created_ms / 1000, day_secs)
                        .is_some_and(|(at, _)| at <= now)
                })
                .map(|(key, o)| (key.clone(), o.seq))
                .collect();
            let next = match objects.last() {
                Some((key, _)) if objects.len() == SCAN_BATCH => Some(key.clone()),
                _ => None,
            };
            let batch = Batch {
                due: !due.is_empty(),
                last: next.is_none(),
                resumed: resume_after.is_some(),
            };
            let cmd = || Command::ExpireObjects {
                bucket: bucket.to_string(),
                objects: due,
                resume_after: next.clone(),
                day_secs,
                now_secs: now,
            };
            match self.finish_batch(batch, &mut unsaved_batches, cmd).await? {
                Some(done) => expired += done,
                // Deleted meanwhile: nothing left to expire in it.
                None => return Ok(expired),
            }
            match next {
                Some(_) => resume_after = next,
                None => return Ok(expired),
            }
        }
    }

    /// The end of one batch of either pass: its command (the batch's removals and the
    /// cursor after it) is sent when it removes something, when the cursor has gone
    /// unsaved for [`CURSOR_SAVE_BATCHES`] batches, or when a resumed pass reaches the
    /// end (the cursor goes back to the start); then the pace. How many the command
    /// removed, or None when the bucket is gone.
    async fn finish_batch(
        &mut self,
        batch: Batch,
        unsaved_batches: &mut u32,
        cmd: impl FnOnce() -> Command,
    ) -> Result<Option<u64>, MetaError> {
        *unsaved_batches += 1;
        let save =
            batch.due || *unsaved_batches >= CURSOR_SAVE_BATCHES || (batch.last && batch.resumed);
        let mut done = 0;
        if save {
            // In this group, through its replica here: its keys and its cursor.
            match self.meta.execute(cmd()).await {
                Ok(Response::ObjectsDeleted(removed)) => {
                    done = removed.iter().filter(|r| **r).count();
                }
                Ok(other) => return Err(MetaError::Unexpected(format!("{other:?}"))),
                Err(MetaError::NoSuchBucket) => return Ok(None),
                Err(e) => return Err(e),
            }
            *unsaved_batches = 0;
        }
        self.pacer.pace(done).await;
        Ok(Some(done as u64))
    }
}

/// What one batch of a pass found, for [`LifecycleWorker::finish_batch`].
#[derive(Clone, Copy)]
struct Batch {
    /// It has something to remove.
    due: bool,
    /// It is the pass's last.
    last: bool,
    /// The pass started from a saved cursor.
    resumed: bool,
}
