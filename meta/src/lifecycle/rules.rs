//! A bucket's lifecycle rules as this gateway keeps them, and what they decide: which
//! objects a rule matches and when they expire, which uploads it aborts.
//!
//! Pure functions of a rule, an object's key, size and creation time, and the length of a
//! lifecycle "day" (`--lifecycle-day-secs`, 86 400 s unless a test or staging system
//! shortens it). The S3 XML lives in the gateway's `s3/lifecycle.rs`; the background work
//! in its `lifecycle::worker`.

use serde::{Deserialize, Serialize};

use crate::tags::{Tag, TagSet};

/// At most this many rules per bucket, as S3.
pub const RULES_MAX: usize = 1000;
/// Longest rule ID S3 accepts.
pub const RULE_ID_CHARS_MAX: usize = 255;

/// One rule of a bucket's lifecycle configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleRule {
    pub id: String,
    pub enabled: bool,
    pub filter: RuleFilter,
    pub expiration: Option<Expiration>,
    /// `AbortIncompleteMultipartUpload/DaysAfterInitiation`.
    pub abort_upload_days: Option<u32>,
    /// What the rule does to the versions of a versioned bucket. Not in this struct's
    /// encoding: rules travel in `SetBucketLifecycle` commands written before versions
    /// existed, so these go beside them (`SetBucketLifecycleWithVersions`, and the
    /// record's format 2).
    #[serde(skip)]
    pub versions: VersionActions,
}

/// A rule's actions on versions: `NoncurrentVersionExpiration` and
/// `Expiration/ExpiredObjectDeleteMarker`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionActions {
    /// `NoncurrentDays`: a version expires these lifecycle days after it became
    /// noncurrent (rounded up to the next midnight, as Days).
    pub noncurrent_days: Option<u32>,
    /// `NewerNoncurrentVersions`: the newest this many noncurrent versions are kept.
    pub newer_noncurrent: Option<u32>,
    /// A delete marker that is a key's only version is removed.
    pub expired_object_delete_marker: bool,
}

impl VersionActions {
    pub fn is_none(&self) -> bool {
        *self == VersionActions::default()
    }
}

/// At most this many newer noncurrent versions kept by a rule, as S3.
pub const NEWER_NONCURRENT_MAX: u32 = 100;

/// The objects a rule applies to, in the form the client wrote it (GET gives it back).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RuleFilter {
    /// The legacy top-level `<Prefix>` of the rule.
    LegacyPrefix(String),
    /// `<Filter/>` or `<Filter></Filter>`: every object.
    All,
    Prefix(String),
    SizeGreaterThan(u64),
    SizeLessThan(u64),
    /// `<And>` of a prefix and size bounds.
    And {
        prefix: Option<String>,
        size_greater_than: Option<u64>,
        size_less_than: Option<u64>,
    },
    /// `<Tag>`: the objects that have this tag. The tag variants come after the others (a
    /// variant's index is its encoding): rules that use them travel only in the format-4
    /// `SetBucketLifecycleWithVersions` (see [`crate::Command::set_lifecycle`]).
    Tag(Tag),
    /// `<And>` with at least one `<Tag>`: the prefix, size bounds and every tag hold.
    AndTags {
        prefix: Option<String>,
        size_greater_than: Option<u64>,
        size_less_than: Option<u64>,
        tags: Vec<Tag>,
    },
}

/// When a rule expires the objects it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Expiration {
    /// Lifecycle days after creation, rounded up to the next midnight (UTC).
    Days(u32),
    /// At this instant (unix seconds, always a midnight UTC).
    Date(u64),
}

impl RuleFilter {
    /// The prefix every matching key starts with ("" for none).
    pub fn prefix(&self) -> &str {
        match self {
            RuleFilter::LegacyPrefix(p) | RuleFilter::Prefix(p) => p,
            RuleFilter::And {
                prefix: Some(p), ..
            }
            | RuleFilter::AndTags {
                prefix: Some(p), ..
            } => p,
            _ => "",
        }
    }

    /// The tags a matching object has (none for a filter without tags).
    pub fn tags(&self) -> &[Tag] {
        match self {
            RuleFilter::Tag(t) => std::slice::from_ref(t),
            RuleFilter::AndTags { tags, .. } => tags,
            _ => &[],
        }
    }

    /// Exclusive size bounds (greater than, less than).
    pub fn size_bounds(&self) -> (Option<u64>, Option<u64>) {
        match self {
            RuleFilter::SizeGreaterThan(g) => (Some(*g), None),
            RuleFilter::SizeLessThan(l) => (None, Some(*l)),
            RuleFilter::And {
                size_greater_than,
                size_less_than,
                ..
            }
            | RuleFilter::AndTags {
                size_greater_than,
                size_less_than,
                ..
            } => (*size_greater_than, *size_less_than),
            _ => (None, None),
        }
    }

    /// Whether an object of this key, size and tags is in the filter: it has every tag of
    /// the filter. `tags` None: not known (the worker's scan, which reads no tags), taken
    /// as matching; the command that expires checks again with the version's own.
    pub fn matches(&self, key: &str, size_bytes: u64, tags: Option<&TagSet>) -> bool {
        let (gt, lt) = self.size_bounds();
        key.starts_with(self.prefix())
            && gt.is_none_or(|g| size_bytes > g)
            && lt.is_none_or(|l| size_bytes < l)
            && tags.is_none_or(|set| self.tags().iter().all(|t| set.has(&t.key, &t.value)))
    }

    /// Whether the filter says anything about sizes (an upload has no size yet).
    pub fn has_size(&self) -> bool {
        self.size_bounds() != (None, None)
    }
}

/// The start of the lifecycle day `days` after the day of `created_secs`: S3's "creation
/// time plus the days, rounded up to the next midnight UTC", with days of `day_secs`.
pub fn after_days(created_secs: u64, days: u32, day_secs: u64) -> u64 {
    let day_secs = day_secs.max(1);
    let day_start = created_secs - created_secs % day_secs;
    day_start.saturating_add((u64::from(days) + 1).saturating_mul(day_secs))
}

impl LifecycleRule {
    /// When this rule expires an object of this key, size and creation time (unix
    /// seconds), if it applies to it at all.
    pub fn object_expiry_secs(
        &self,
        key: &str,
        (size_bytes, tags): (u64, Option<&TagSet>),
        created_secs: u64,
        day_secs: u64,
    ) -> Option<u64> {
        if !self.enabled || !self.filter.matches(key, size_bytes, tags) {
            return None;
        }
        match self.expiration? {
            Expiration::Days(d) => Some(after_days(created_secs, d, day_secs)),
            Expiration::Date(at) => Some(at),
        }
    }

    /// When this rule aborts an upload of this key initiated at `created_secs`.
    pub fn upload_abort_secs(&self, key: &str, created_secs: u64, day_secs: u64) -> Option<u64> {
        // An upload has no tags yet (S3 refuses the action in a rule with tags).
        if !self.enabled || !key.starts_with(self.filter.prefix()) || !self.filter.tags().is_empty()
        {
            return None;
        }
        self.abort_upload_days
            .map(|d| after_days(created_secs, d, day_secs))
    }
}

/// The earliest expiry any rule gives an object of this size and tags (None: not known,
/// see [`RuleFilter::matches`]), with the rule's ID: what `x-amz-expiration` reports and
/// what the worker acts on.
pub fn object_expiry<'r>(
    rules: &'r [LifecycleRule],
    key: &str,
    object: (u64, Option<&TagSet>),
    created_secs: u64,
    day_secs: u64,
) -> Option<(u64, &'r str)> {
    rules
        .iter()
        .filter_map(|r| {
            r.object_expiry_secs(key, object, created_secs, day_secs)
                .map(|at| (at, r.id.as_str()))
        })
        .min_by_key(|(at, _)| *at)
}

/// Whether the rules expire a noncurrent object version of this key and size, noncurrent
/// since `since_secs`, with `newer` noncurrent versions of the key newer than it: due by
/// `now_secs` under some rule's NoncurrentDays, and beyond its NewerNoncurrentVersions.
pub fn noncurrent_due(
    rules: &[LifecycleRule],
    key: &str,
    (size_bytes, tags): (u64, Option<&TagSet>),
    since_secs: u64,
    newer: u32,
    day_secs: u64,
    now_secs: u64,
) -> bool {
    rules.iter().any(|r| {
        let Some(days) = r.versions.noncurrent_days else {
            return false;
        };
        r.enabled
            && r.filter.matches(key, size_bytes, tags)
            && after_days(since_secs, days, day_secs) <= now_secs
            && newer >= r.versions.newer_noncurrent.unwrap_or(0)
    })
}

/// Whether the rules remove a delete marker of this key that is its only version. A
/// marker has no size: only the rule's prefix is matched, as S3 does; nor tags: a rule
/// with tags matches no marker (S3 refuses ExpiredObjectDeleteMarker with tags).
pub fn lone_marker_due(rules: &[LifecycleRule], key: &str) -> bool {
    rules.iter().any(|r| {
        r.enabled
            && r.versions.expired_object_delete_marker
            && key.starts_with(r.filter.prefix())
            && r.filter.tags().is_empty()
    })
}

/// The most newer noncurrent versions any rule keeps for this key: how far a check
/// needs to count.
pub fn newer_noncurrent_bound(rules: &[LifecycleRule], key: &str) -> u32 {
    rules
        .iter()
        .filter(|r| r.enabled && key.starts_with(r.filter.prefix()))
        .filter_map(|r| r.versions.newer_noncurrent)
        .max()
        .unwrap_or(0)
}

/// The earliest time any rule aborts an upload.
pub fn upload_abort(
    rules: &[LifecycleRule],
    key: &str,
    created_secs: u64,
    day_secs: u64,
) -> Option<u64> {
    rules
        .iter()
        .filter_map(|r| r.upload_abort_secs(key, created_secs, day_secs))
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(filter: RuleFilter, expiration: Expiration) -> LifecycleRule {
        LifecycleRule {
            id: "r".into(),
            enabled: true,
            filter,
            expiration: Some(expiration),
            abort_upload_days: None,
            versions: VersionActions::default(),
        }
    }

    #[test]
    fn noncurrent_versions_expire_after_their_days_beyond_the_newest_kept() {
        let mut r = rule(RuleFilter::Prefix("logs/".into()), Expiration::Days(9));
        r.expiration = None;
        r.versions = VersionActions {
            noncurrent_days: Some(2),
            newer_noncurrent: Some(3),
            expired_object_delete_marker: false,
        };
        let rules = [r];
        // Noncurrent since t=10 with days of 10 s: two days after, rounded up to the next
        // day's start, t=40.
        assert!(!noncurrent_due(&rules, "logs/a", (5, None), 10, 3, 10, 39));
        assert!(noncurrent_due(&rules, "logs/a", (5, None), 10, 3, 10, 40));
        // The three newest noncurrent versions stay.
        assert!(!noncurrent_due(
            &rules,
            "logs/a",
            (5, None),
            10,
            2,
            10,
            1000
        ));
        assert!(!noncurrent_due(
            &rules,
            "other/a",
            (5, None),
            10,
            3,
            10,
            1000
        ));
        assert_eq!(newer_noncurrent_bound(&rules, "logs/x"), 3);
        assert_eq!(newer_noncurrent_bound(&rules, "other"), 0);
        assert!(!lone_marker_due(&rules, "logs/a"));
        let mut m = rules[0].clone();
        m.versions.expired_object_delete_marker = true;
        assert!(lone_marker_due(&[m.clone()], "logs/a"));
        m.enabled = false;
        assert!(!lone_marker_due(&[m], "logs/a"));
    }

    #[test]
    fn days_round_up_to_the_next_midnight_as_s3() {
        const DAY: u64 = 86_400;
        // 2012-12-20 10:30 UTC + 3 days -> 2012-12-24 00:00 UTC.
        let created = 1_355_999_400;
        assert_eq!(after_days(created, 3, DAY), 1_356_307_200);
        // Created exactly at midnight: still the next day's midnight after the days.
        assert_eq!(after_days(1_356_307_200, 1, DAY), 1_356_307_200 + 2 * DAY);
        // Short test days.
        assert_eq!(after_days(11, 1, 2), 14);
    }

    #[test]
    fn filters_match_prefix_and_exclusive_sizes() {
        let f = RuleFilter::And {
            prefix: Some("logs/".into()),
            size_greater_than: Some(10),
            size_less_than: Some(100),
        };
        assert!(f.matches("logs/a", 50, None));
        assert!(!f.matches("logs/a", 10, None));
        assert!(!f.matches("logs/a", 100, None));
        assert!(!f.matches("other/a", 50, None));
        assert!(RuleFilter::All.matches("x", 0, None));
        assert!(RuleFilter::SizeLessThan(5).matches("x", 4, None));
        assert!(!RuleFilter::SizeGreaterThan(5).matches("x", 5, None));
    }

    /// A tag filter matches an object that has every one of its tags (and any others);
    /// unknown tags (the worker's scan) match.
    #[test]
    fn tag_filters_need_every_tag() {
        let tags =
            |pairs: &[(&str, &str)]| TagSet(pairs.iter().map(|(k, v)| Tag::new(*k, *v)).collect());
        let one = RuleFilter::Tag(Tag::new("tier", "tmp"));
        assert!(one.matches("k", 1, Some(&tags(&[("a", "b"), ("tier", "tmp")]))));
        assert!(!one.matches("k", 1, Some(&tags(&[("tier", "keep")]))));
        assert!(!one.matches("k", 1, Some(&TagSet::default())));
        assert!(one.matches("k", 1, None));
        let and = RuleFilter::AndTags {
            prefix: Some("logs/".into()),
            size_greater_than: None,
            size_less_than: Some(10),
            tags: vec![Tag::new("a", "1"), Tag::new("b", "2")],
        };
        let both = tags(&[("b", "2"), ("a", "1")]);
        assert!(and.matches("logs/x", 5, Some(&both)));
        assert!(!and.matches("logs/x", 5, Some(&tags(&[("a", "1")]))));
        assert!(!and.matches("other", 5, Some(&both)));
        assert!(!and.matches("logs/x", 50, Some(&both)));
        let mut r = rule(one, Expiration::Days(1));
        r.versions.expired_object_delete_marker = true;
        r.abort_upload_days = Some(1);
        assert!(!lone_marker_due(std::slice::from_ref(&r), "k"));
        assert_eq!(r.upload_abort_secs("k", 0, 10), None);
        assert_eq!(
            object_expiry(&[r], "k", (1, Some(&tags(&[("tier", "tmp")]))), 0, 10),
            Some((20, "r"))
        );
    }

    #[test]
    fn the_earliest_enabled_rule_wins() {
        let mut disabled = rule(RuleFilter::All, Expiration::Date(5));
        disabled.enabled = false;
        let rules = vec![
            disabled,
            LifecycleRule {
                id: "late".into(),
                ..rule(RuleFilter::All, Expiration::Days(30))
            },
            LifecycleRule {
                id: "date".into(),
                ..rule(RuleFilter::Prefix("a".into()), Expiration::Date(86_400))
            },
        ];
        assert_eq!(
            object_expiry(&rules, "abc", (1, None), 0, 86_400),
            Some((86_400, "date"))
        );
        assert_eq!(
            object_expiry(&rules, "xyz", (1, None), 0, 86_400),
            Some((31 * 86_400, "late"))
        );
        assert_eq!(
            object_expiry(&rules[..1], "xyz", (1, None), 0, 86_400),
            None
        );
    }
}
