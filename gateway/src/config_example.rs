//! `gateway config example`: a complete configuration file, every setting with its default
//! and a one-line comment, generated from the same defaults the server uses (so it cannot
//! drift from them). Settings with no neutral default (a domain, a cluster, extra pairs)
//! are shown commented out with an example value.
//!
//! The tests below check that the text parses as a [`FileConfig`] and names every key the
//! loader knows, read from the loader's own serde field lists.

use std::fmt::Write as _;

use crate::server::ConnectionLimits;
use crate::state::RequestLogLevel;
use crate::store::Limits;

/// The example file.
pub fn text() -> String {
    let l = Limits::default();
    let c = ConnectionLimits::default();
    let v = valkyrie::Settings::default();
    let stats = crate::telemetry::stored::Settings::default();
    let level = match RequestLogLevel::default() {
        RequestLogLevel::Off => "off",
        RequestLogLevel::Error => "error",
        RequestLogLevel::Warn => "warn",
        RequestLogLevel::Info => "info",
        RequestLogLevel::Debug => "debug",
    };
    let mut t = String::new();
    let mut line = |s: String| {
        let _ = writeln!(t, "{s}");
    };
    line(
        "# gateway configuration (TOML): `gateway serve --config FILE`. Command-line flags win"
            .into(),
    );
    line(
        "# over this file; GATEWAY_*_TOKEN environment variables win over the tokens here.".into(),
    );
    line(String::new());
    line("# Data folder: meta.redb, credentials, and the default disk0/ and disk1/ pair.".into());
    line("data = \"./data\"".into());
    line(
        "# Address to listen on (S3, admin, metrics, status, node-to-node); port 0 picks one."
            .into(),
    );
    line("listen = \"127.0.0.1:9000\"".into());
    line("# Region reported to clients and required in signatures (see any_region).".into());
    line("region = \"us-east-1\"".into());
    line("# Accept signatures whose credential scope names any region.".into());
    line("any_region = false".into());
    line(
        "# Virtual-hosted-style requests for <bucket>.<domain> (no default: path style only)."
            .into(),
    );
    line("# domain = \"s3.example.com\"".into());
    line("# Longest time ahead a V2 presigned URL's Expires may be, in seconds.".into());
    line(format!(
        "presigned_v2_expires_max_secs = {}",
        crate::state::PRESIGNED_V2_EXPIRES_MAX_SECS_DEFAULT
    ));
    line(String::new());
    line("# Largest object a single PUT may store, in bytes.".into());
    line(format!("max_object_bytes = {}", l.object_bytes_max));
    line(
        "# Bytes of bodies held in memory until their hash is known (0: stream every body).".into(),
    );
    line(format!("memory_stage_bytes = {}", l.memory_stage_bytes));
    line("# Bytes of object bodies being sent that may be held in memory at once.".into());
    line(format!("memory_read_bytes = {}", l.memory_read_bytes));
    line("# Seconds a client has to send a whole request head.".into());
    line(format!(
        "header_read_timeout_secs = {}",
        c.header_read_timeout_secs
    ));
    line("# Seconds an idle keep-alive connection is kept open.".into());
    line(format!("keepalive_idle_secs = {}", c.keepalive_idle_secs));
    line("# Seconds an upload may wait for its next body bytes.".into());
    line(format!(
        "body_idle_timeout_secs = {}",
        c.body_idle_timeout_secs
    ));
    line("# Seconds a response may wait for a client that reads nothing.".into());
    line(format!("send_timeout_secs = {}", c.send_timeout_secs));
    line("# Connections in flight; one more is answered 503 SlowDown.".into());
    line(format!("max_connections = {}", c.max_connections));
    line("# n of the n-th root of free space that weights the pair choice.".into());
    line("choice_root = 2".into());
    line(
        "# SHA-1 collision detection on content names (\"off\" only to measure its cost: two"
            .into(),
    );
    line("# colliding bodies would then be deduplicated into one file).".into());
    line("sha1_collision_detection = \"on\"".into());
    line(String::new());
    line("# Tokens; \"\" is no token (the API it guards is off, /_metrics then needs the admin one).".into());
    line("# /_admin/ (also opens /_metrics, /_status and /_catalog/).".into());
    line("admin_token = \"\"".into());
    line("# The native mail API under /_files/.".into());
    line("native_token = \"\"".into());
    line("# /_metrics and /_status only: a scraper's token.".into());
    line("metrics_token = \"\"".into());
    line("# Serve /_metrics and /_status to anyone (they show disk paths).".into());
    line("metrics_open = false".into());
    line("# /_catalog/ only: remote Valkyrie workers.".into());
    line("catalog_token = \"\"".into());
    line(
        "# Secret of node-to-node RPCs (GATEWAY_CLUSTER_SECRET wins); \"\" refuses them all."
            .into(),
    );
    line("cluster_secret = \"\"".into());
    line(String::new());
    line("# Level of the one log line per S3 request: off, error, warn, info, debug.".into());
    line(format!("request_log_level = \"{level}\""));
    line(
        "# Seconds between two scans of the metadata behind gateway_stored_* and /_status.".into(),
    );
    line(format!("stats_scan_secs = {}", stats.interval_secs));
    let lifecycle = crate::lifecycle::Settings::default();
    line(
        "# Seconds one lifecycle \"day\" lasts (a few seconds lets a staging system see rules act)."
            .into(),
    );
    line(format!("lifecycle_day_secs = {}", lifecycle.day_secs));
    let pace = crate::jobs::JobPace::default();
    line("# Keys per chunk of a background job (delete-prefix), 1 to 1000.".into());
    line(format!("job_chunk_keys = {}", pace.chunk_keys));
    line("# Pause after each chunk of a background job, milliseconds.".into());
    line(format!("job_pause_ms = {}", pace.pause.as_millis()));
    line(
        "# A multipart upload older than this is aborted and its parts released, rule or not."
            .into(),
    );
    line(format!(
        "upload_max_age_secs = {}",
        lifecycle.upload_max_age_secs
    ));
    line(String::new());
    line(
        "# Disk pairs (without any: the data folder's disk0/disk1). Disks: local:/abs/path or"
            .into(),
    );
    line("# a WebDAV base URL.".into());
    line("# [[pairs]]".into());
    line("# id = 1".into());
    line("# disks = [\"local:/srv/disk0\", \"http://storage1:8081/disk0\"]".into());
    line(String::new());
    line("# Several gateways as one metadata group (without it: an embedded single node).".into());
    line("# [cluster]".into());
    line("# This node's id among the peers.".into());
    line("# node_id = 1".into());
    line("# The voters by S3 listen address, this node included.".into());
    line("# peers = \"1=10.0.0.1:9000,2=10.0.0.2:9000,3=10.0.0.3:9000\"".into());
    line("# Same as cluster_secret above.".into());
    line("# cluster_secret = \"...\"".into());
    line("# Log entries applied between two metadata snapshots.".into());
    line(format!(
        "# snapshot_logs = {}",
        crate::meta::raft::SNAPSHOT_LOGS_DEFAULT
    ));
    line("# Shortest Raft election timeout in ms (longest: twice; heartbeat: a fifth).".into());
    line(format!(
        "# election_timeout_ms = {}",
        crate::meta::raft::ELECTION_TIMEOUT_MS_DEFAULT
    ));
    line(String::new());
    line("# The in-process Valkyrie workers (one per local disk).".into());
    line("[valkyrie]".into());
    line("# How long a quarantined file is kept before it is deleted for good.".into());
    line(format!("quarantine_secs = {}", v.quarantine_secs));
    line("# How long after the master disk the slave acts on a deletion.".into());
    line(format!("slave_delay_secs = {}", v.slave_delay_secs));
    line("# A scrub pass starts at most this often (start to start).".into());
    line(format!("scrub_interval_secs = {}", v.scrub_interval_secs));
    line("# A content file without a record is left alone this long (uploads in flight).".into());
    line(format!("grace_secs = {}", v.grace_secs));
    line("# Bound on the scrubber's disk reads, bytes per second (0: unlimited).".into());
    line(format!("scrub_bytes_per_sec = {}", v.scrub_bytes_per_sec));
    line("# A file under tmp/ older than this is an abandoned upload.".into());
    line(format!("temp_max_age_secs = {}", v.temp_max_age_secs));
    line("# Pause between two passes over the deleting entries.".into());
    line(format!(
        "deletion_interval_secs = {}",
        v.deletion_interval_secs
    ));
    line("# Deleting entries asked for per catalog call.".into());
    line(format!(
        "deletion_page_entries = {}",
        v.deletion_page_entries
    ));
    line("# Files handled between two yields of the scrubber.".into());
    line(format!("scrub_batch_files = {}", v.scrub_batch_files));
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ClusterSection, FileConfig, PairConfig};

    /// The field names serde's derive gives a struct, caught from its `deserialize_struct`
    /// call: the keys the loader knows, with no list kept by hand.
    fn fields_of<T: for<'de> serde::Deserialize<'de>>() -> &'static [&'static str] {
        struct Catch(Option<&'static [&'static str]>);
        #[derive(Debug)]
        struct Caught;
        impl std::fmt::Display for Caught {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("caught")
            }
        }
        impl std::error::Error for Caught {}
        impl serde::de::Error for Caught {
            fn custom<M: std::fmt::Display>(_: M) -> Self {
                Caught
            }
        }
        impl<'de> serde::Deserializer<'de> for &mut Catch {
            type Error = Caught;
            fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Caught> {
                Err(Caught)
            }
            fn deserialize_struct<V: serde::de::Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Caught> {
                self.0 = Some(fields);
                Err(Caught)
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
                bytes byte_buf option unit unit_struct newtype_struct seq tuple
                tuple_struct map enum identifier ignored_any
            }
        }
        let mut c = Catch(None);
        let _ = T::deserialize(&mut c);
        c.0.expect("a struct")
    }

    /// The keys of one section of the example, active or commented out (`# key = ...`).
    fn keys_in(text: &str, section: Option<&str>) -> Vec<String> {
        let mut current: Option<String> = None;
        let mut out = Vec::new();
        for line in text.lines() {
            let l = line.trim_start_matches("# ").trim();
            if l.starts_with('[') {
                current = Some(l.trim_matches(['[', ']']).to_owned());
                continue;
            }
            if let Some((k, _)) = l.split_once(" = ")
                && !k.contains(' ')
                && current.as_deref() == section
            {
                out.push(k.to_owned());
            }
        }
        out
    }

    #[test]
    fn the_example_parses_with_and_without_its_commented_settings() {
        let text = text();
        let c: FileConfig = toml::from_str(&text).expect("the example parses");
        assert_eq!(c.stats_scan_secs, Some(30));
        assert!(c.valkyrie.is_some());
        // Uncommented, the optional settings parse too.
        let all: String = text
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(rest) if rest.contains(" = ") || rest.starts_with('[') => rest,
                _ => l,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let c: FileConfig = toml::from_str(&all).unwrap_or_else(|e| panic!("{e}\n{all}"));
        assert_eq!(c.pairs.len(), 1);
        assert!(c.cluster.is_some_and(|s| s.node_id == Some(1)));
    }

    #[test]
    fn the_example_names_every_key_the_loader_knows() {
        let text = text();
        let sections: [(Option<&str>, &[&str]); 4] = [
            (None, fields_of::<FileConfig>()),
            (Some("cluster"), fields_of::<ClusterSection>()),
            (Some("valkyrie"), fields_of::<valkyrie::Settings>()),
            (Some("pairs"), fields_of::<PairConfig>()),
        ];
        for (section, fields) in sections {
            let keys = keys_in(&text, section);
            for f in fields {
                // Sections are keys of the top level, written as headers.
                if section.is_none() && ["pairs", "cluster", "valkyrie"].contains(f) {
                    assert!(text.contains(&format!("[{f}]")), "no [{f}] section");
                    continue;
                }
                assert!(
                    keys.iter().any(|k| k == f),
                    "the example has no `{f}` in {section:?}"
                );
            }
        }
    }
}
