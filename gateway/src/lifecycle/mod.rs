//! Lifecycle: expiry of objects by bucket rules, and the end of abandoned multipart
//! uploads (by an `AbortIncompleteMultipartUpload` rule or the gateway-wide
//! `--upload-max-age-secs`).
//!
//! - [`rules`]: what a rule matches and when it acts (pure functions, kept with the
//!   metadata that stores them).
//! - [`pacing`]: bounded batches, yields and a rate limit, for any background sweep.
//! - [`worker`]: the sweep itself, run by the Raft leader only.
//! - [`cache`]: each bucket's rules as last read, for the `x-amz-expiration` header.
//!
//! Back of the envelope: a pass reads 1000 index entries per batch (~100 B each, one read
//! transaction of ~1 ms) and expires at most [`Settings::deletes_per_sec`] objects a
//! second, each batch one Raft command of up to 1000 keys. A bucket of 10 million objects
//! is scanned in 10 000 batches; with nothing to expire that is a few seconds of one
//! core's time per pass, spread over the pass by the pacing.

pub mod cache;
pub mod pacing;
pub mod worker;

pub use meta::lifecycle::rules;
pub use rules::{Expiration, LifecycleRule, RuleFilter, VersionActions};

/// Default length of a lifecycle day.
pub const DAY_SECS_DEFAULT: u64 = 86_400;
/// Default bound on a multipart upload's age: 7 days.
pub const UPLOAD_MAX_AGE_SECS_DEFAULT: u64 = 7 * 86_400;
/// Default bound on expiries (and upload aborts) per second.
pub const DELETES_PER_SEC_DEFAULT: u64 = 1000;

/// Settings of lifecycle expiry and of the upload age bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `--lifecycle-day-secs`: how many seconds one lifecycle "day" lasts.
    pub day_secs: u64,
    /// `--upload-max-age-secs`: an upload older than this is aborted, rule or not.
    pub upload_max_age_secs: u64,
    /// Objects expired or uploads aborted per second, at most.
    pub deletes_per_sec: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            day_secs: DAY_SECS_DEFAULT,
            upload_max_age_secs: UPLOAD_MAX_AGE_SECS_DEFAULT,
            deletes_per_sec: DELETES_PER_SEC_DEFAULT,
        }
    }
}

impl Settings {
    /// How often a pass over every bucket starts: a lifecycle day, at most a minute, at
    /// least a second. A pass longer than that starts the next one when it ends.
    pub fn pass_interval(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.day_secs.clamp(1, 60))
    }
}
