//! The configuration file (TOML): what `gateway serve --config FILE` reads.
//!
//! Every setting can also be given on the command line, which wins over the file. The file
//! is where disk pairs are listed; without any, the data folder's own `disk0`/`disk1` pair
//! is used. Example:
//!
//! ```toml
//! data = "/var/lib/gateway"
//! listen = "0.0.0.0:9000"
//! choice_root = 2
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
    pub region: Option<String>,
    pub domain: Option<String>,
    pub max_object_bytes: Option<u64>,
    pub memory_stage_bytes: Option<u64>,
    pub choice_root: Option<u32>,
    pub admin_token: Option<String>,
    pub native_token: Option<String>,
    #[serde(default)]
    pub pairs: Vec<PairConfig>,
    /// Settings of the in-process Valkyrie workers (`quarantine_secs`, `slave_delay_secs`,
    /// `scrub_interval_secs`, `grace_secs`, `scrub_bytes_per_sec`, ...).
    #[serde(default)]
    pub valkyrie: Option<valkyrie::Settings>,
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
            [[pairs]]
            id = 4
            disks = ["local:/srv/a", "http://127.0.0.1:8081/b"]
            "#,
        )
        .unwrap();
        assert_eq!(c.choice_root, Some(3));
        let pairs = c.checked_pairs().unwrap();
        assert_eq!(pairs[0].0, PairId(4));
        assert_eq!(pairs[0].1[1].as_str(), "http://127.0.0.1:8081/b");
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
    }
}
