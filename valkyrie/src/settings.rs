//! The knobs of a worker. The first five names are a contract: they are also the flags of
//! the `valkyrie` binary (`--quarantine-secs`, ...) and the keys of the gateway's config.

use serde::{Deserialize, Serialize};

const MIB: u64 = 1024 * 1024;
const HOUR_SECS: u64 = 3600;
const DAY_SECS: u64 = 24 * HOUR_SECS;

/// The shortest `grace_secs` a worker accepts. An upload writes its files, then submits
/// its metadata command; the metadata layer appends a command to its log within 40 s of
/// its submission or never (the gateway's `APPEND_BOUND`), and the worker's last look
/// before a quarantine is fenced behind every command already appended. A file older than
/// the grace by its mtime can then only be an orphan if the grace also covers the time
/// from its last data write to the command (the copies' fsync: tens of seconds for a
/// 5 GiB body on a slow disk) and the clock difference between the storage node that
/// set the mtime and the worker: five minutes leaves room for both.
pub const GRACE_SECS_MIN: u64 = 300;

/// A setting no worker may run with.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    #[error(
        "grace_secs = {0} is shorter than {GRACE_SECS_MIN}: a file whose upload's metadata \
         command is still on its way could be taken for an orphan and quarantined"
    )]
    GraceTooShort(u64),
}

/// Everything a worker can be told; [`Settings::default`] holds the production values.
/// Unknown keys are refused: these are also the keys of the gateway's `[valkyrie]` config
/// section, where a misspelt key silently kept its production default (a week of
/// quarantine, say, where the operator asked for a day).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// How long a quarantined `<sha1>.deleted.<ts>` file is kept before it is deleted for
    /// good: the window in which a wrong deletion can still be undone.
    pub quarantine_secs: u64,
    /// How long after the master the slave disk acts on a `deleting` entry: if the master
    /// quarantined by mistake, reads still find the slave's copy meanwhile.
    pub slave_delay_secs: u64,
    /// A scrub pass starts at most this often (start to start).
    pub scrub_interval_secs: u64,
    /// A content file without any record is left alone this long after its mtime: an
    /// upload renames its files before it commits the record.
    pub grace_secs: u64,
    /// Bound on the bytes the scrubber reads (and copies, when repairing) per second.
    /// 0 means unlimited.
    pub scrub_bytes_per_sec: u64,
    /// A file under `tmp/` older than this (by mtime) is an abandoned upload.
    pub temp_max_age_secs: u64,
    /// Pause between two passes over the `deleting` entries.
    pub deletion_interval_secs: u64,
    /// `deleting` entries asked for per catalog call.
    pub deletion_page_entries: usize,
    /// Files handled between two yields of the scrubber.
    pub scrub_batch_files: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            quarantine_secs: 7 * DAY_SECS,
            slave_delay_secs: HOUR_SECS,
            scrub_interval_secs: DAY_SECS,
            grace_secs: DAY_SECS,
            scrub_bytes_per_sec: 50 * MIB,
            temp_max_age_secs: DAY_SECS,
            deletion_interval_secs: 60,
            deletion_page_entries: 1000,
            scrub_batch_files: 256,
        }
    }
}

impl Settings {
    /// The settings if a worker may run with them.
    pub fn checked(self) -> Result<Self, SettingsError> {
        if self.grace_secs < GRACE_SECS_MIN {
            return Err(SettingsError::GraceTooShort(self.grace_secs));
        }
        Ok(self)
    }

    /// The same settings with every bound at least 1, so that a zero from a config file
    /// cannot turn a batch into an endless loop of empty pages.
    pub fn sanitized(mut self) -> Self {
        self.deletion_page_entries = self.deletion_page_entries.clamp(1, 100_000);
        self.scrub_batch_files = self.scrub_batch_files.clamp(1, 100_000);
        self.deletion_interval_secs = self.deletion_interval_secs.max(1);
        self.scrub_interval_secs = self.scrub_interval_secs.max(1);
        self
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_grace_below_the_minimum_is_refused() {
        let with = |grace_secs| Settings {
            grace_secs,
            ..Settings::default()
        };
        assert!(Settings::default().checked().is_ok());
        assert!(with(GRACE_SECS_MIN).checked().is_ok());
        assert_eq!(
            with(GRACE_SECS_MIN - 1).checked(),
            Err(SettingsError::GraceTooShort(GRACE_SECS_MIN - 1))
        );
        assert_eq!(with(0).checked(), Err(SettingsError::GraceTooShort(0)));
    }

    use super::*;

    #[test]
    fn defaults_are_the_production_values_and_missing_keys_take_them() {
        let s = Settings::default();
        assert_eq!(s.quarantine_secs, 604_800);
        assert_eq!(s.slave_delay_secs, 3_600);
        assert_eq!(s.scrub_interval_secs, 86_400);
        assert_eq!(s.grace_secs, 86_400);
        assert_eq!(s.scrub_bytes_per_sec, 52_428_800);
        let parsed: Settings = serde_json::from_str(r#"{"grace_secs": 5}"#).unwrap();
        assert_eq!(parsed.grace_secs, 5);
        assert_eq!(parsed.quarantine_secs, s.quarantine_secs);
        let zero = Settings {
            deletion_page_entries: 0,
            scrub_batch_files: 0,
            ..Settings::default()
        }
        .sanitized();
        assert_eq!((zero.deletion_page_entries, zero.scrub_batch_files), (1, 1));
    }

    #[test]
    fn a_misspelt_key_is_refused_not_ignored() {
        let e = serde_json::from_str::<Settings>(r#"{"quarantine_sec": 86400}"#).unwrap_err();
        assert!(e.to_string().contains("quarantine_sec"), "{e}");
    }
}
