//! The nouns of the store: content addresses, reference magics, pair ids and disk references.

use std::fmt;
use std::num::NonZeroU32;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Errors from parsing the vocabulary out of text a client sent.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VocabError {
    #[error("a SHA-1 is 40 hexadecimal digits, got {0:?}")]
    BadSha1(String),
    #[error("a magic must be a non-zero 32-bit number")]
    ZeroMagic,
    #[error("a disk reference is `local:<path>` or an http(s) URL, got {0:?}")]
    BadDiskRef(String),
}

/// The SHA-1 of a body: the content address and the file name on disk.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Sha1(pub [u8; 20]);

impl Sha1 {
    /// Lowercase hex, the on-disk file name.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Which disk of a pair is the master for this content: the first bit of the sha1.
    ///
    /// The article uses it to order the two Valkyrie workers of a pair; reads use it to
    /// spread load over both disks deterministically.
    pub fn master_disk(&self) -> usize {
        usize::from(self.0[0] >> 7)
    }
}

impl fmt::Debug for Sha1 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sha1({})", self.to_hex())
    }
}

impl fmt::Display for Sha1 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl FromStr for Sha1 {
    type Err = VocabError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut out = [0u8; 20];
        if s.len() != 40 || hex::decode_to_slice(s, &mut out).is_err() {
            return Err(VocabError::BadSha1(s.chars().take(64).collect()));
        }
        Ok(Sha1(out))
    }
}

/// The random number each reference carries: `inc` adds it, `dec` subtracts it, and only a
/// sum of zero proves that every reference was removed exactly once.
///
/// Zero is not a magic: a reference with magic 0 would be invisible to the check.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct Magic(NonZeroU32);

impl Magic {
    /// A magic from a number a client sent; 0 is refused.
    pub fn new(value: u32) -> Result<Self, VocabError> {
        NonZeroU32::new(value)
            .map(Magic)
            .ok_or(VocabError::ZeroMagic)
    }

    /// A fresh random magic, as the gateway makes for each S3 object it stores.
    pub fn random() -> Self {
        loop {
            if let Some(v) = NonZeroU32::new(rand::random::<u32>()) {
                return Magic(v);
            }
        }
    }

    pub fn get(self) -> u32 {
        self.0.get()
    }
}

/// The id of a disk pair in PairDB.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize, Default,
)]
pub struct PairId(pub u32);

impl fmt::Display for PairId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pair{}", self.0)
    }
}

/// Where a disk is: a local directory (`local:/srv/disk0`) or a WebDAV base URL.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct DiskRef(String);

impl DiskRef {
    pub fn local(path: impl AsRef<std::path::Path>) -> Self {
        DiskRef(format!("local:{}", path.as_ref().display()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The directory of a local disk, `None` for a remote one.
    pub fn local_path(&self) -> Option<&std::path::Path> {
        self.0.strip_prefix("local:").map(std::path::Path::new)
    }
}

impl FromStr for DiskRef {
    type Err = VocabError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ok = match s.strip_prefix("local:") {
            Some(path) => path.starts_with('/'),
            None => s.starts_with("http://") || s.starts_with("https://"),
        };
        if ok {
            Ok(DiskRef(s.to_string()))
        } else {
            Err(VocabError::BadDiskRef(s.to_string()))
        }
    }
}

impl fmt::Display for DiskRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_round_trips_through_hex() {
        let s = "da39a3ee5e6b4b0d3255bfef95601890afd80709";
        let sha1: Sha1 = s.parse().unwrap();
        assert_eq!(sha1.to_hex(), s);
        assert_eq!(sha1.master_disk(), 1);
    }

    #[test]
    fn sha1_refuses_bad_text() {
        assert!("da39".parse::<Sha1>().is_err());
        assert!(
            "zz39a3ee5e6b4b0d3255bfef95601890afd80709"
                .parse::<Sha1>()
                .is_err()
        );
    }

    #[test]
    fn magic_zero_is_refused() {
        assert_eq!(Magic::new(0), Err(VocabError::ZeroMagic));
        assert_eq!(Magic::new(345).unwrap().get(), 345);
        assert_ne!(Magic::random().get(), 0);
    }

    #[test]
    fn disk_refs_are_checked() {
        assert!("local:/srv/d0".parse::<DiskRef>().is_ok());
        assert!("http://127.0.0.1:8080/d0".parse::<DiskRef>().is_ok());
        assert!("local:relative".parse::<DiskRef>().is_err());
        assert!("ftp://x".parse::<DiskRef>().is_err());
    }
}
