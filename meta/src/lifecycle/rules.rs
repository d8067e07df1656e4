//! A bucket's lifecycle rules as this gateway keeps them, and what they decide: which
//! objects a rule matches and when they expire, which uploads it aborts.
//!
//! Pure functions of a rule, an object's key, size and creation time, and the length of a
//! lifecycle "day" (`--lifecycle-day-secs`, 86 400 s unless a test or staging system
//! shortens it). The S3 XML lives in the gateway's `s3/lifecycle.rs`; the background work
//! in its `lifecycle::worker`.

use serde::{Deserialize, Serialize};

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
            } => p,
            _ => "",
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
            } => (*size_greater_than, *size_less_than),
            _ => (None, None),
        }
    }

    /// Whether an object of this key and size is in the filter.
    pub fn matches(&self, key: &str, size_bytes: u64) -> bool {
        let (gt, lt) = self.size_bounds();
        key.starts_with(self.prefix())
            && gt.is_none_or(|g| size_bytes > g)
            && lt.is_none_or(|l| size_bytes < l)
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
        size_bytes: u64,
        created_secs: u64,
        day_secs: u64,
    ) -> Option<u64> {
        if !self.enabled || !self.filter.matches(key, size_bytes) {
            return None;
        }
        match self.expiration? {
            Expiration::Days(d) => Some(after_days(created_secs, d, day_secs)),
            Expiration::Date(at) => Some(at),
        }
    }

    /// When this rule aborts an upload of this key initiated at `created_secs`.
    pub fn upload_abort_secs(&self, key: &str, created_secs: u64, day_secs: u64) -> Option<u64> {
        if !self.enabled || !key.starts_with(self.filter.prefix()) {
            return None;
        }
        self.abort_upload_days
            .map(|d| after_days(created_secs, d, day_secs))
    }
}

/// The earliest expiry any rule gives an object, with the rule's ID: what
/// `x-amz-expiration` reports and what the worker acts on.
pub fn object_expiry<'r>(
    rules: &'r [LifecycleRule],
    key: &str,
    size_bytes: u64,
    created_secs: u64,
    day_secs: u64,
) -> Option<(u64, &'r str)> {
    rules
        .iter()
        .filter_map(|r| {
            r.object_expiry_secs(key, size_bytes, created_secs, day_secs)
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
    size_bytes: u64,
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
            && r.filter.matches(key, size_bytes)
            && after_days(since_secs, days, day_secs) <= now_secs
            && newer >= r.versions.newer_noncurrent.unwrap_or(0)
    })
}

/// Whether the rules remove a delete marker of this key that is its only version. A
/// marker has no size: only the rule's prefix is matched, as S3 does.
pub fn lone_marker_due(rules: &[LifecycleRule], key: &str) -> bool {
    rules.iter().any(|r| {
        r.enabled && r.versions.expired_object_delete_marker && key.starts_with(r.filter.prefix())
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
        assert!(!noncurrent_due(&rules, "logs/a", 5, 10, 3, 10, 39));
        assert!(noncurrent_due(&rules, "logs/a", 5, 10, 3, 10, 40));
        // The three newest noncurrent versions stay.
        assert!(!noncurrent_due(&rules, "logs/a", 5, 10, 2, 10, 1000));
        assert!(!noncurrent_due(&rules, "other/a", 5, 10, 3, 10, 1000));
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
        assert!(f.matches("logs/a", 50));
        assert!(!f.matches("logs/a", 10));
        assert!(!f.matches("logs/a", 100));
        assert!(!f.matches("other/a", 50));
        assert!(RuleFilter::All.matches("x", 0));
        assert!(RuleFilter::SizeLessThan(5).matches("x", 4));
        assert!(!RuleFilter::SizeGreaterThan(5).matches("x", 5));
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
            object_expiry(&rules, "abc", 1, 0, 86_400),
            Some((86_400, "date"))
        );
        assert_eq!(
            object_expiry(&rules, "xyz", 1, 0, 86_400),
            Some((31 * 86_400, "late"))
        );
        assert_eq!(object_expiry(&rules[..1], "xyz", 1, 0, 86_400), None);
    }
}
