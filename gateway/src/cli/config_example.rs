//! `gateway config example`: a complete configuration file, every setting with its default
//! and a one-line comment. The defaults are those of the settings' declaration
//! ([`gateway::settings`]: `Settings::default()`), and for the `[valkyrie]` keys without a
//! flag `valkyrie::Settings::default()`, so the example cannot drift from what the server
//! uses. Settings with no neutral default (a domain, a cluster, extra pairs) are shown
//! commented out with an example value.
//!
//! The tests below check that the text parses as a [`gateway::config::FileConfig`] that
//! resolves to the defaults, and names every key the loader knows, read from the loader's
//! own serde field lists.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;

use gateway::config::Switch;
use gateway::settings::Settings;
use gateway::state::RequestLogLevel;

/// The example file.
pub fn text() -> String {
    let d = Settings::default();
    let mut t = Example::default();
    t.comment(
        "gateway configuration (TOML): `gateway serve --config FILE`. Command-line flags win",
    );
    t.comment("over this file; GATEWAY_*_TOKEN environment variables win over the tokens here.");
    let sections: [fn(&mut Example, &Settings); 8] = [
        server,
        limits,
        tokens,
        background,
        pairs,
        cluster,
        storage_tls,
        valkyrie,
    ];
    for section in sections {
        t.blank();
        section(&mut t, &d);
    }
    t.0
}

/// Where the gateway keeps its data and how clients reach it.
fn server(t: &mut Example, d: &Settings) {
    t.comment("Data folder: meta.redb, credentials, and the default disk0/ and disk1/ pair.");
    t.set("data", &d.data);
    t.comment("Address to listen on (S3, admin, metrics, status, node-to-node); port 0 picks one.");
    t.set("listen", &d.listen);
    t.comment("A second listener for /_health, /_metrics, /_status and /_admin/ only, with");
    t.comment("its own connection bound: probes answer while S3 connections are at their bound.");
    t.comment("HTTPS with the certificate of tls_cert when it is set, else plain HTTP.");
    t.example("admin_listen", &SocketAddr::from(([0, 0, 0, 0], 9001)));
    t.comment("Region reported to clients and required in signatures (see any_region).");
    t.set("region", &d.region);
    t.comment("Accept signatures whose credential scope names any region.");
    t.set("any_region", &d.any_region);
    t.comment("Virtual-hosted-style requests for <bucket>.<domain> (no default: path style only).");
    t.example("domain", &"s3.example.com");
    t.comment("Longest time ahead a V2 presigned URL's Expires may be, in seconds.");
    t.set(
        "presigned_v2_expires_max_secs",
        &d.presigned_v2_expires_max_secs,
    );
    t.comment(
        "HTTPS: certificate chain and key (PEM), both or neither; reloaded when they change.",
    );
    t.example("tls_cert", &PathBuf::from("/etc/gateway/tls/tls.crt"));
    t.example("tls_key", &PathBuf::from("/etc/gateway/tls/tls.key"));
}

/// Bounds on requests, bodies and connections; the pair choice; content names.
fn limits(t: &mut Example, d: &Settings) {
    t.comment("Largest object a single PUT may store, in bytes.");
    t.set("max_object_bytes", &d.max_object_bytes);
    t.comment("Bytes of bodies held in memory until their hash is known (0: stream every body).");
    t.set("memory_stage_bytes", &d.memory_stage_bytes);
    t.comment("Bytes of object bodies being sent that may be held in memory at once.");
    t.set("memory_read_bytes", &d.memory_read_bytes);
    t.comment("Seconds a client has to send a whole request head.");
    t.set("header_read_timeout_secs", &d.header_read_timeout_secs);
    t.comment("Seconds an idle keep-alive connection is kept open.");
    t.set("keepalive_idle_secs", &d.keepalive_idle_secs);
    t.comment("Seconds an upload may wait for its next body bytes.");
    t.set("body_idle_timeout_secs", &d.body_idle_timeout_secs);
    t.comment("Seconds a response may wait for a client that reads nothing.");
    t.set("send_timeout_secs", &d.send_timeout_secs);
    t.comment("Connections in flight; one more is answered 503 SlowDown.");
    t.set("max_connections", &d.max_connections);
    t.comment("n of the n-th root of free space that weights the pair choice.");
    t.set("choice_root", &d.choice_root);
    t.comment("SHA-1 collision detection on content names (\"off\" only to measure its cost: two");
    t.comment("colliding bodies would then be deduplicated into one file).");
    t.set("sha1_collision_detection", &d.sha1_collision_detection);
}

/// The tokens of the internal APIs and the cluster secret: none by default.
fn tokens(t: &mut Example, d: &Settings) {
    // A token's default is no token; "" says so in the file.
    let none = String::new();
    t.comment(
        "Tokens; \"\" is no token (the API it guards is off, /_metrics then needs the admin one).",
    );
    t.comment("/_admin/ (also opens /_metrics, /_status and /_catalog/).");
    t.set("admin_token", &none);
    t.comment("The native mail API under /_files/.");
    t.set("native_token", &none);
    t.comment("/_metrics and /_status only: a scraper's token.");
    t.set("metrics_token", &none);
    t.comment("Serve /_metrics and /_status to anyone (they show disk paths).");
    t.set("metrics_open", &d.metrics_open);
    t.comment("/_catalog/ only: remote Valkyrie workers.");
    t.set("catalog_token", &none);
    t.comment("Secret of node-to-node RPCs (GATEWAY_CLUSTER_SECRET wins); \"\" refuses them all.");
    t.set("cluster_secret", &none);
}

/// The request log and the pace of background work.
fn background(t: &mut Example, d: &Settings) {
    t.comment("Level of the one log line per S3 request: off, error, warn, info, debug.");
    t.set("request_log_level", &d.request_log_level);
    t.comment("Seconds between two scans of the metadata behind gateway_stored_* and /_status.");
    t.set("stats_scan_secs", &d.stats_scan_secs);
    t.comment(
        "Seconds one lifecycle \"day\" lasts (a few seconds lets a staging system see rules act).",
    );
    t.set("lifecycle_day_secs", &d.lifecycle_day_secs);
    t.comment("Keys per chunk of a background job (delete-prefix), 1 to 1000.");
    t.set("job_chunk_keys", &d.job_chunk_keys);
    t.comment("Pause after each chunk of a background job, milliseconds.");
    t.set("job_pause_ms", &d.job_pause_ms);
    t.comment("A multipart upload older than this is aborted and its parts released, rule or not.");
    t.set("upload_max_age_secs", &d.upload_max_age_secs);
}

/// Disk pairs: none by default, so an example commented out.
fn pairs(t: &mut Example, _: &Settings) {
    t.comment("Disk pairs (without any: the data folder's disk0/disk1). Disks: local:/abs/path or");
    t.comment("a WebDAV base URL.");
    t.comment("[[pairs]]");
    t.example("id", &1u32);
    t.comment("disks = [\"local:/srv/disk0\", \"http://storage1:8081/disk0\"]");
}

/// The metadata group: none by default, so an example commented out.
fn cluster(t: &mut Example, d: &Settings) {
    t.comment("Several gateways as one metadata group (without it: an embedded single node).");
    t.comment("[cluster]");
    t.comment("This node's id among the peers.");
    t.example("node_id", &1u64);
    t.comment("The voters by S3 listen address, this node included.");
    t.example("peers", &"1=10.0.0.1:9000,2=10.0.0.2:9000,3=10.0.0.3:9000");
    t.comment("Same as cluster_secret above.");
    t.example("cluster_secret", &"...");
    t.comment("Mutual TLS between the nodes (all three or none; `gateway admin tls` makes them):");
    t.comment("the CA every node's certificate chains to, this node's certificate and key (PEM).");
    t.example(
        "cluster_ca",
        &PathBuf::from("/etc/gateway/cluster-tls/ca.crt"),
    );
    t.example(
        "cluster_cert",
        &PathBuf::from("/etc/gateway/cluster-tls/tls.crt"),
    );
    t.example(
        "cluster_key",
        &PathBuf::from("/etc/gateway/cluster-tls/tls.key"),
    );
    t.comment("Log entries applied between two metadata snapshots.");
    t.example("snapshot_logs", &d.snapshot_logs);
    t.comment("Shortest Raft election timeout in ms (longest: twice; heartbeat: a fifth).");
    t.example("election_timeout_ms", &d.election_timeout_ms);
    t.comment("Replicas of each metadata group a split creates (`admin groups split`), 1 to 7.");
    t.example("replication_factor", &d.replication_factor);
    t.comment("FileDB records a metadata group holds before its leader splits it in two.");
    t.example("group_split_files", &d.group_split_files);
    t.comment("Index entries (objects, versions, parts) a group holds before its keys split.");
    t.example("group_split_objects", &d.group_split_objects);
    t.comment("FileDB operations per second a group may apply over a minute before it splits");
    t.comment("where that divides the load (a cluster only; 0: never).");
    t.example("group_split_ops", &d.group_split_ops);
    t.comment("Leave the groups' replicas where they are (no automatic moves between nodes).");
    t.example("no_rebalance", &d.no_rebalance);
    t.comment("How long a cross-group write's reference may stay pending (ms, at least 1000),");
    t.comment("and how long past that the reconciler waits before it settles one.");
    t.example("ref_deadline_ms", &d.ref_deadline_ms);
    t.example("reconcile_grace_ms", &d.reconcile_grace_ms);
}

/// TLS to `https://` storage nodes: none by default, so an example commented out.
fn storage_tls(t: &mut Example, _: &Settings) {
    t.comment("https:// disks: the storage nodes' CA (required; never the system roots), and the");
    t.comment("client certificate presented to them (optional, both or neither). PEM files.");
    t.comment("[storage_tls]");
    t.example("ca", &PathBuf::from("/etc/gateway/storage-tls/ca.crt"));
    t.example("cert", &PathBuf::from("/etc/gateway/storage-tls/tls.crt"));
    t.example("key", &PathBuf::from("/etc/gateway/storage-tls/tls.key"));
}

/// The `[valkyrie]` section: every key in force, the ones without a flag too.
fn valkyrie(t: &mut Example, d: &Settings) {
    let v = valkyrie::Settings::default();
    t.comment("The in-process Valkyrie workers (one per local disk).");
    t.section("valkyrie");
    t.comment("How long a quarantined file is kept before it is deleted for good.");
    t.set("quarantine_secs", &d.quarantine_secs);
    t.comment("How long after the master disk the slave acts on a deletion.");
    t.set("slave_delay_secs", &d.slave_delay_secs);
    t.comment("A scrub pass starts at most this often (start to start).");
    t.set("scrub_interval_secs", &d.scrub_interval_secs);
    t.comment("A content file without a record is left alone this long (uploads in flight).");
    t.set("grace_secs", &d.grace_secs);
    t.comment("Bound on the scrubber's disk reads, bytes per second (0: unlimited).");
    t.set("scrub_bytes_per_sec", &d.scrub_bytes_per_sec);
    t.comment("A file under tmp/ older than this is an abandoned upload.");
    t.set("temp_max_age_secs", &v.temp_max_age_secs);
    t.comment("Pause between two passes over the deleting entries.");
    t.set("deletion_interval_secs", &v.deletion_interval_secs);
    t.comment("Deleting entries asked for per catalog call.");
    t.set("deletion_page_entries", &v.deletion_page_entries);
    t.comment("Files handled between two yields of the scrubber.");
    t.set("scrub_batch_files", &v.scrub_batch_files);
}

/// The text being written, a line at a time.
#[derive(Default)]
struct Example(String);

impl Example {
    fn line(&mut self, line: std::fmt::Arguments<'_>) {
        let _ = writeln!(self.0, "{line}");
    }

    fn blank(&mut self) {
        self.line(format_args!(""));
    }

    fn comment(&mut self, text: &str) {
        self.line(format_args!("# {text}"));
    }

    fn section(&mut self, name: &str) {
        self.line(format_args!("[{name}]"));
    }

    /// `key = value`, in force.
    fn set(&mut self, key: &str, value: &dyn Toml) {
        self.line(format_args!("{key} = {}", value.toml()));
    }

    /// `# key = value`: shown, not in force.
    fn example(&mut self, key: &str, value: &dyn Toml) {
        self.line(format_args!("# {key} = {}", value.toml()));
    }
}

/// A value as TOML writes it.
trait Toml {
    fn toml(&self) -> String;
}

macro_rules! toml_display {
    ($($ty:ty),*) => {$(
        impl Toml for $ty {
            fn toml(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
toml_display!(bool, u32, u64, usize);

/// A string, quoted and escaped.
fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

impl Toml for &str {
    fn toml(&self) -> String {
        toml_string(self)
    }
}

impl Toml for String {
    fn toml(&self) -> String {
        toml_string(self)
    }
}

impl Toml for PathBuf {
    fn toml(&self) -> String {
        toml_string(&self.to_string_lossy())
    }
}

impl Toml for SocketAddr {
    fn toml(&self) -> String {
        toml_string(&self.to_string())
    }
}

/// An on/off or level setting: its name on the command line, which is the file's too.
fn value_name(value: &impl clap::ValueEnum) -> String {
    value
        .to_possible_value()
        .map_or_else(String::new, |v| toml_string(v.get_name()))
}

impl Toml for Switch {
    fn toml(&self) -> String {
        value_name(self)
    }
}

impl Toml for RequestLogLevel {
    fn toml(&self) -> String {
        value_name(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway::config::{ClusterSection, FileConfig, PairConfig, StorageTlsSection};
    use gateway::settings::Flags;

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
    fn the_example_read_back_gives_the_defaults() {
        let file: FileConfig = toml::from_str(&text()).expect("the example parses");
        assert_eq!(
            Settings::resolve(&Flags::default(), &file),
            Settings::default()
        );
        assert_eq!(file.valkyrie, Some(valkyrie::Settings::default()));
        let config = Settings::resolve(&Flags::default(), &file)
            .server_config(&file, &|_| None)
            .expect("the defaults are a valid configuration");
        assert_eq!((config.admin_token, config.native_token), (None, None));
        assert!(config.pairs.is_empty() && config.cluster.is_none());
    }

    #[test]
    fn the_example_names_every_key_the_loader_knows() {
        let text = text();
        let sections: [(Option<&str>, &[&str]); 5] = [
            (None, fields_of::<FileConfig>()),
            (Some("cluster"), fields_of::<ClusterSection>()),
            (Some("storage_tls"), fields_of::<StorageTlsSection>()),
            (Some("valkyrie"), fields_of::<valkyrie::Settings>()),
            (Some("pairs"), fields_of::<PairConfig>()),
        ];
        for (section, fields) in sections {
            let keys = keys_in(&text, section);
            for f in fields {
                // Sections are keys of the top level, written as headers.
                let sections = ["pairs", "cluster", "storage_tls", "valkyrie"];
                if section.is_none() && sections.contains(f) {
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
