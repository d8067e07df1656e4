//! Bucket records on their way from root to the index groups holding the bucket's keys
//! (`bucket_copies.rs`, `docs/scaling.md` "index groups", step b).
//!
//! Two ways, one for speed, one for certainty:
//! - *The saga*: a command that changes a bucket's record ([`Command::changed_bucket`])
//!   is answered only once root applied it and every index group of the bucket took the
//!   record as of then, so that a request sent after the answer finds it wherever its
//!   key lives (a PUT right after CreateBucket, after versioning was enabled).
//! - *Root's leader's round*: compares root's revisions with each index group's and sends
//!   what is behind, so a saga cut short (its node died, a group was unreachable), a
//!   change that names no bucket (a bulk-delete job's end) or an index group new to the
//!   map ends up with root's records.
//!
//! A copy carries root's revision, and a group takes only a newer one than it holds, so
//! the two ways may cross, repeat and arrive late: the newest record stays.

use std::collections::BTreeMap;

use super::metadata::Metadata;
use super::replicas::{ReadAnswer, ReadQuery, Replicas};
use crate::bucket_copies::{BucketCopy, COPIES_MAX, LIFECYCLE_FORMAT};
use crate::groups::{GroupId, ROOT, ShardMap};
use crate::{Command, MetaError};

impl Replicas {
    /// The saga's second half, after root applied a change of `bucket`'s record: the
    /// record as of now to each index group of the bucket other than root.
    pub(crate) async fn copy_bucket(&self, bucket: &str) -> Result<(), MetaError> {
        self.on_the_map(|map| async move {
            let groups: Vec<GroupId> = map
                .index_groups_of(bucket)
                .into_iter()
                .filter(|g| *g != ROOT)
                .collect();
            if groups.is_empty() {
                return Ok(());
            }
            let name = bucket.to_string();
            let copy = self.root().read(move |s| s.bucket_copy(&name)).await?;
            let format = self.root().read_local(|s| s.cluster_version()).await?;
            for &group in &groups {
                let cmd = copies_command(vec![copy.clone()], format);
                self.send_on(&map, group, cmd).await?;
            }
            // A group an index split under way creates takes copies once it owns its
            // keys, and the split copies the records itself after that: a refusal here
            // (too early) is the split's business, and no client's.
            if let Some(plan) = self.root().read_local(|s| s.planned_map()).await? {
                for group in plan.index_groups_of(bucket) {
                    if group == ROOT || map.group(group).is_some() {
                        continue;
                    }
                    let cmd = copies_command(vec![copy.clone()], format);
                    if let Err(e) = self.send_on(&plan, group, cmd).await {
                        tracing::debug!(group, error = %e, "a bucket record not yet copied to a group a split creates");
                    }
                }
            }
            Ok(())
        })
        .await
    }

    /// Whether `bucket` holds no object, version or upload in any index group other than
    /// root (root checks its own keys when it applies the delete). Asked before a
    /// DeleteBucket while index groups exist; a write racing it is not held back yet
    /// (`docs/scaling.md`, step d: closing the bucket in each group first).
    pub(crate) async fn empty_beyond_root(&self, bucket: &str) -> Result<bool, MetaError> {
        let map = self.shard_map().await?;
        if map.index_groups_of(bucket).iter().all(|g| *g == ROOT) {
            return Ok(true);
        }
        let one = crate::list::ListQuery {
            max_keys: 1,
            ..Default::default()
        };
        let versions = crate::list_versions::VersionsQuery {
            max_keys: 1,
            ..Default::default()
        };
        Ok(self.list_objects(bucket, &one).await?.objects.is_empty()
            && self
                .list_versions(bucket, &versions)
                .await?
                .versions
                .is_empty()
            && self.uploads(bucket, "", None, 1).await?.uploads.is_empty())
    }
}

/// Root's leader's round: each index group gets the records of its buckets that it holds
/// at an older revision than root's, or not at all.
pub(crate) async fn copy_where_behind(
    r: &Replicas,
    map: &ShardMap,
    root: &Metadata,
) -> Result<(), MetaError> {
    if map.index_only_in_root() {
        return Ok(());
    }
    let copies = root.read_local(|s| s.bucket_copies()).await?;
    let mut groups: BTreeMap<GroupId, Vec<&BucketCopy>> = BTreeMap::new();
    for copy in &copies {
        for group in map.index_groups_of(&copy.bucket) {
            if group != ROOT {
                groups.entry(group).or_default().push(copy);
            }
        }
    }
    // Each group on its own (logged here): one that cannot be reached holds back no
    // other, and is tried again next round.
    for (group, wanted) in groups {
        if let Err(e) = copy_to(r, map, group, wanted).await {
            tracing::warn!(group, error = %e, "copying bucket records to an index group");
        }
    }
    Ok(())
}

/// A split's step: `group`, which `plan` creates, gets the records of the buckets it
/// will hold keys of, before any write of them reaches it (the map is not committed).
pub(crate) async fn copy_to_new(
    r: &Replicas,
    plan: &ShardMap,
    root: &Metadata,
    group: GroupId,
) -> Result<(), MetaError> {
    let copies = root.read_local(|s| s.bucket_copies()).await?;
    let wanted: Vec<&BucketCopy> = copies
        .iter()
        .filter(|c| plan.index_groups_of(&c.bucket).contains(&group))
        .collect();
    copy_to(r, plan, group, wanted).await
}

/// The copies of `wanted` that `group` holds at an older revision, or not at all.
async fn copy_to(
    r: &Replicas,
    map: &ShardMap,
    group: GroupId,
    wanted: Vec<&BucketCopy>,
) -> Result<(), MetaError> {
    let held = match r.read_in(map, group, ReadQuery::BucketRevisions).await? {
        ReadAnswer::BucketRevisions(held) => held,
        other => {
            return Err(MetaError::Unexpected(format!(
                "bucket revisions answered {other:?}"
            )));
        }
    };
    let behind: Vec<BucketCopy> = wanted
        .into_iter()
        .filter(|c| held.get(&c.bucket).is_none_or(|h| *h < c.revision))
        .cloned()
        .collect();
    let format = r.root().read_local(|s| s.cluster_version()).await?;
    for chunk in behind.chunks(COPIES_MAX) {
        let cmd = copies_command(chunk.to_vec(), format);
        r.send_on(map, group, cmd).await?;
        tracing::info!(
            group,
            buckets = chunk.len(),
            "bucket records copied to an index group"
        );
    }
    Ok(())
}

/// The command that takes `copies` in an index group of a cluster at metadata `format`:
/// with their lifecycle rules from [`LIFECYCLE_FORMAT`] on.
fn copies_command(copies: Vec<BucketCopy>, format: u32) -> Command {
    if format < LIFECYCLE_FORMAT {
        return Command::CopyBuckets { copies };
    }
    let lifecycles = copies.iter().map(|c| c.lifecycle.clone()).collect();
    Command::CopyBucketsWithRules { copies, lifecycles }
}
