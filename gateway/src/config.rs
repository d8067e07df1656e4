//! The configuration file (TOML): what `gateway serve --config FILE` reads.
//!
//! Every setting can also be given on the command line, which wins over the file
//! ([`crate::settings`] declares each setting's flag, file key and default, and resolves
//! them). The file is where disk pairs are listed; without any, the data folder's own
//! `disk0`/`disk1` pair is used. Example:
//!
//! ```toml
//! data = "/var/lib/gateway"
//! listen = "0.0.0.0:9000"
//! choice_root = 2
//! send_timeout_secs = 60
//! max_connections = 4096
//!
//! [[pairs]]
//! id = 0
//! disks = ["local:/srv/disk0", "http://storage1:8081/disk0"]
//!
//! [[pairs]]
//! id = 1
//! disks = ["http://storage2:8081/disk0", "http://storage3:8081/disk0"]
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use placement::{DiskRef, PairId};
use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {0}: {1}")]
    Read(PathBuf, std::io::Error),
    #[error("config file {0}: {1}")]
    Parse(PathBuf, String),
}

/// The settings a config file may hold; all optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub data: Option<PathBuf>,
    pub listen: Option<SocketAddr>,
    /// The admin listener: health, metrics, status and the admin API only.
    pub admin_listen: Option<SocketAddr>,
    pub region: Option<String>,
    pub domain: Option<String>,
    pub max_object_bytes: Option<u64>,
    pub memory_stage_bytes: Option<u64>,
    pub memory_read_bytes: Option<u64>,
    pub header_read_timeout_secs: Option<u64>,
    pub keepalive_idle_secs: Option<u64>,
    pub body_idle_timeout_secs: Option<u64>,
    pub send_timeout_secs: Option<u64>,
    pub max_connections: Option<usize>,
    /// HTTPS: the certificate chain and its key (PEM files), both or neither.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub choice_root: Option<u32>,
    /// Tokens: `GATEWAY_*_TOKEN` in the environment wins; empty means off (see [`token`]).
    pub admin_token: Option<String>,
    pub native_token: Option<String>,
    /// The `/_metrics` token (a scraper's, no other right).
    pub metrics_token: Option<String>,
    /// `/_metrics` without any token (it shows disk paths: an explicit choice).
    pub metrics_open: Option<bool>,
    /// The `/_catalog/` token of remote Valkyrie workers (no other right).
    pub catalog_token: Option<String>,
    /// Accept SigV4 credential scopes of any region, not only `region`.
    pub any_region: Option<bool>,
    /// How far ahead a V2 presigned URL's `Expires` may be (default 7 days).
    pub presigned_v2_expires_max_secs: Option<u64>,
    /// Level of the per-S3-request log line: off, error, warn, info (default), debug.
    pub request_log_level: Option<crate::state::RequestLogLevel>,
    /// Seconds one lifecycle "day" lasts (default 86400).
    pub lifecycle_day_secs: Option<u64>,
    /// Age at which a multipart upload is aborted, rule or not (default 7 days).
    pub upload_max_age_secs: Option<u64>,
    /// Seconds between two scans behind `gateway_stored_*` (default 30).
    pub stats_scan_secs: Option<u64>,
    /// Keys per chunk of a background job (delete-prefix), 1 to 1000 (default 200).
    pub job_chunk_keys: Option<usize>,
    /// Pause after each chunk of a background job, milliseconds (default 5).
    pub job_pause_ms: Option<u64>,
    /// SHA-1 collision detection on content names: "on" (default) or "off".
    pub sha1_collision_detection: Option<Switch>,
    #[serde(default)]
    pub pairs: Vec<PairConfig>,
    /// The cluster secret (`GATEWAY_CLUSTER_SECRET` wins; also accepted in `[cluster]`).
    pub cluster_secret: Option<String>,
    /// `[cluster]`: node_id, peers, cluster_secret, snapshot_logs.
    pub cluster: Option<ClusterSection>,
    /// Settings of the in-process Valkyrie workers (`quarantine_secs`, `slave_delay_secs`,
    /// `scrub_interval_secs`, `grace_secs`, `scrub_bytes_per_sec`, ...).
    #[serde(default)]
    pub valkyrie: Option<valkyrie::Settings>,
    /// `[storage_tls]`: the CA of `https://` storage nodes and the client certificate
    /// presented to them (`--storage-ca`, `--storage-cert`, `--storage-key`).
    pub storage_tls: Option<StorageTlsSection>,
}

/// The `[storage_tls]` section: `ca`, `cert`, `key` (PEM files), as the flags
/// `--storage-ca`, `--storage-cert`, `--storage-key`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageTlsSection {
    #[serde(rename = "ca")]
    pub storage_ca: Option<PathBuf>,
    #[serde(rename = "cert")]
    pub storage_cert: Option<PathBuf>,
    #[serde(rename = "key")]
    pub storage_key: Option<PathBuf>,
}

/// A setting that is on or off (`"on"`/`"off"` in the file, `on|off` on the command line).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Switch {
    #[default]
    On,
    Off,
}

impl Switch {
    pub fn is_on(self) -> bool {
        self == Switch::On
    }
}

/// The `[cluster]` section: the same settings as `--node-id`, `--peers`, `--snapshot-logs`,
/// `--election-timeout-ms`, `--replication-factor`, `--group-split-files`, ...
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSection {
    pub node_id: Option<u64>,
    /// `"1=HOST:PORT,2=HOST:PORT,3=HOST:PORT"`, as `--peers`.
    pub peers: Option<String>,
    pub cluster_secret: Option<String>,
    /// Cluster TLS, as `--cluster-ca`, `--cluster-cert`, `--cluster-key`.
    pub cluster_ca: Option<PathBuf>,
    pub cluster_cert: Option<PathBuf>,
    pub cluster_key: Option<PathBuf>,
    pub snapshot_logs: Option<u64>,
    pub election_timeout_ms: Option<u64>,
    /// As `--replication-factor`.
    pub replication_factor: Option<u64>,
    /// As `--group-split-files`.
    pub group_split_files: Option<u64>,
    /// As `--group-split-objects`.
    pub group_split_objects: Option<u64>,
    /// As `--group-split-ops`.
    pub group_split_ops: Option<u64>,
    /// As `--no-rebalance`.
    pub no_rebalance: Option<bool>,
    /// As `--ref-deadline-ms`.
    pub ref_deadline_ms: Option<u64>,
    /// As `--reconcile-grace-ms`.
    pub reconcile_grace_ms: Option<u64>,
}

/// A token setting from its environment variable's value and the config file's: the
/// environment wins, and an empty value from either is no token, so the API it guards is
/// off. (An empty token must never be a token: `Authorization: Bearer ` would match it.)
pub fn token(env_value: Option<String>, file_value: Option<&str>) -> Option<String> {
    env_value
        .filter(|t| !t.is_empty())
        .or_else(|| file_value.map(str::to_owned))
        .filter(|t| !t.is_empty())
}

/// Parses `1=HOST:PORT,2=HOST:PORT`: ids unique, every address HOST:PORT.
pub fn parse_peers(text: &str) -> Result<std::collections::BTreeMap<u64, String>, String> {
    let mut out = std::collections::BTreeMap::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (id, addr) = item
            .split_once('=')
            .ok_or_else(|| format!("peer {item:?}: expected ID=HOST:PORT"))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| format!("peer {item:?}: the id must be a number"))?;
        let addr = addr.trim();
        let port_ok = addr
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !port_ok {
            return Err(format!("peer {item:?}: the address must be HOST:PORT"));
        }
        if out.insert(id, addr.to_string()).is_some() {
            return Err(format!("peer id {id} is listed twice"));
        }
    }
    if out.is_empty() {
        return Err("--peers lists no node".into());
    }
    Ok(out)
}

/// One configured disk pair.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairConfig {
    pub id: u32,
    /// Two disk references: `local:/abs/path` or a WebDAV base URL.
    pub disks: [String; 2],
}

impl FileConfig {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read(path.into(), e))?;
        Self::parse(&text).map_err(|m| ConfigError::Parse(path.into(), m))
    }

    fn parse(text: &str) -> Result<Self, String> {
        let config: FileConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        config.checked_pairs()?;
        Ok(config)
    }

    /// The configured pairs as vocabulary, refusing bad disk references and duplicate ids.
    pub fn checked_pairs(&self) -> Result<Vec<(PairId, [DiskRef; 2])>, String> {
        let mut out: Vec<(PairId, [DiskRef; 2])> = Vec::new();
        for p in &self.pairs {
            let disk = |s: &str| {
                s.parse::<DiskRef>()
                    .map_err(|e| format!("pair {}: {e}", p.id))
            };
            let disks = [disk(&p.disks[0])?, disk(&p.disks[1])?];
            if disks[0] == disks[1] {
                return Err(format!("pair {}: both disks are {}", p.id, disks[0]));
            }
            if out.iter().any(|(id, _)| id.0 == p.id) {
                return Err(format!("pair {} is listed twice", p.id));
            }
            out.push((PairId(p.id), disks));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_config_parses() {
        let c = FileConfig::parse(
            r#"
            data = "/d"
            listen = "127.0.0.1:9100"
            choice_root = 3
            header_read_timeout_secs = 5
            max_connections = 16
            memory_read_bytes = 1048576
            [[pairs]]
            id = 4
            disks = ["local:/srv/a", "http://127.0.0.1:8081/b"]
            "#,
        )
        .unwrap();
        assert_eq!(c.choice_root, Some(3));
        assert_eq!(c.header_read_timeout_secs, Some(5));
        assert_eq!(c.max_connections, Some(16));
        assert_eq!(c.memory_read_bytes, Some(1 << 20));
        let pairs = c.checked_pairs().unwrap();
        assert_eq!(pairs[0].0, PairId(4));
        assert_eq!(pairs[0].1[1].as_str(), "http://127.0.0.1:8081/b");
    }

    #[test]
    fn peers_parse_and_mistakes_are_refused() {
        let p = parse_peers("1=127.0.0.1:9001, 2=127.0.0.1:9002,3=h:9003").unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(p[&2], "127.0.0.1:9002");
        assert!(
            parse_peers("1=127.0.0.1:9001,1=127.0.0.1:9002")
                .unwrap_err()
                .contains("twice")
        );
        assert!(parse_peers("x=127.0.0.1:9001").is_err());
        assert!(parse_peers("1=127.0.0.1").is_err());
        assert!(parse_peers("").is_err());
        let c = FileConfig::parse(
            "[cluster]\nnode_id = 2\npeers = \"1=a:1,2=b:2\"\ncluster_secret = \"s\"",
        )
        .unwrap();
        assert_eq!(c.cluster.unwrap().node_id, Some(2));
    }

    #[test]
    fn an_empty_token_is_off_from_the_file_as_from_the_environment() {
        let c = FileConfig::parse(
            "admin_token = \"\"\nnative_token = \"n\"\nmetrics_token = \"\"\n\
             catalog_token = \"c\"\nmetrics_open = true\nany_region = true\n\
             presigned_v2_expires_max_secs = 3600",
        )
        .unwrap();
        assert_eq!(token(None, c.admin_token.as_deref()), None);
        assert_eq!(token(None, c.metrics_token.as_deref()), None);
        assert_eq!(token(Some(String::new()), None), None);
        assert_eq!(token(Some(String::new()), Some("")), None);
        assert_eq!(token(None, c.native_token.as_deref()), Some("n".to_owned()));
        assert_eq!(
            token(Some("e".into()), c.catalog_token.as_deref()),
            Some("e".to_owned())
        );
        // An empty environment value leaves the file's token in force, as before.
        assert_eq!(
            token(Some(String::new()), c.catalog_token.as_deref()),
            Some("c".to_owned())
        );
        assert_eq!(c.metrics_open, Some(true));
        assert_eq!(c.any_region, Some(true));
        assert_eq!(c.presigned_v2_expires_max_secs, Some(3600));
    }

    #[test]
    fn collision_detection_is_on_or_off() {
        let c = FileConfig::parse("sha1_collision_detection = \"off\"").unwrap();
        assert_eq!(c.sha1_collision_detection, Some(Switch::Off));
        assert!(!Switch::Off.is_on() && Switch::default().is_on());
        assert!(FileConfig::parse("sha1_collision_detection = \"maybe\"").is_err());
    }

    #[test]
    fn mistakes_are_refused_with_a_reason() {
        assert!(FileConfig::parse("colour = 1").is_err());
        let same = "[[pairs]]\nid = 1\ndisks = [\"local:/a\", \"local:/a\"]";
        assert!(FileConfig::parse(same).unwrap_err().contains("both disks"));
        let rel = "[[pairs]]\nid = 1\ndisks = [\"local:a\", \"local:/b\"]";
        assert!(FileConfig::parse(rel).is_err());
        let dup = "[[pairs]]\nid = 1\ndisks = [\"local:/a\", \"local:/b\"]\n[[pairs]]\nid = 1\ndisks = [\"local:/c\", \"local:/d\"]";
        assert!(FileConfig::parse(dup).unwrap_err().contains("twice"));
        // Valkyrie's keys are checked as strictly as the gateway's own.
        let e = FileConfig::parse("[valkyrie]\nquarantine_sec = 86400").unwrap_err();
        assert!(e.contains("quarantine_sec"), "{e}");
        assert!(FileConfig::parse("[valkyrie]\nquarantine_secs = 86400").is_ok());
    }
}
