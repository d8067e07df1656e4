//! The S3 credentials of a single-node gateway.
//!
//! From `GATEWAY_ACCESS_KEY` / `GATEWAY_SECRET_KEY` when set; otherwise from
//! `<data>/credentials` (mode 0600), generated at the first start and printed once, so that
//! `gateway serve` works out of the box without ever printing a secret again.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rand::RngExt as _;

pub const ACCESS_KEY_ENV: &str = "GATEWAY_ACCESS_KEY";
pub const SECRET_KEY_ENV: &str = "GATEWAY_SECRET_KEY";
const FILE_NAME: &str = "credentials";

#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("set both {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}, or neither")]
    HalfSet,
    #[error("credentials file {0}: {1}")]
    File(String, io::Error),
    #[error("credentials file {0} is malformed: expected access_key and secret_key lines")]
    Malformed(String),
}

#[derive(Clone)]
pub struct Credentials {
    access_key: String,
    secret_key: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .finish_non_exhaustive()
    }
}

/// How the credentials were obtained.
pub enum Origin {
    Environment,
    File,
    /// Generated now: the caller prints them once.
    Generated,
}

pub(crate) fn random_string(alphabet: &[u8], len: usize) -> String {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| char::from(alphabet[rng.random_range(0..alphabet.len())]))
        .collect()
}

impl Credentials {
    pub fn new(access_key: String, secret_key: String) -> Self {
        Credentials {
            access_key,
            secret_key,
        }
    }

    pub fn access_key(&self) -> &str {
        &self.access_key
    }

    pub fn secret_key(&self) -> &str {
        &self.secret_key
    }

    /// The secret of `access_key`, if it is ours.
    pub fn secret_for(&self, access_key: &str) -> Option<String> {
        (access_key == self.access_key).then(|| self.secret_key.clone())
    }

    pub fn load_or_create(data_dir: &Path) -> Result<(Self, Origin), CredentialsError> {
        match (std::env::var(ACCESS_KEY_ENV), std::env::var(SECRET_KEY_ENV)) {
            (Ok(a), Ok(s)) if !a.is_empty() && !s.is_empty() => {
                return Ok((Credentials::new(a, s), Origin::Environment));
            }
            (Err(_), Err(_)) => {}
            _ => return Err(CredentialsError::HalfSet),
        }
        let path = data_dir.join(FILE_NAME);
        let shown = path.display().to_string();
        match fs::read_to_string(&path) {
            Ok(text) => Self::parse(&text)
                .map(|c| (c, Origin::File))
                .ok_or(CredentialsError::Malformed(shown)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let creds = Credentials::new(
                    format!(
                        "GK{}",
                        random_string(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", 18)
                    ),
                    random_string(
                        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                        40,
                    ),
                );
                let text = format!(
                    "access_key = {}\nsecret_key = {}\n",
                    creds.access_key, creds.secret_key
                );
                let mut f = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)
                    .map_err(|e| CredentialsError::File(shown.clone(), e))?;
                f.write_all(text.as_bytes())
                    .and_then(|_| f.sync_all())
                    .map_err(|e| CredentialsError::File(shown, e))?;
                Ok((creds, Origin::Generated))
            }
            Err(e) => Err(CredentialsError::File(shown, e)),
        }
    }

    fn parse(text: &str) -> Option<Self> {
        let mut access = None;
        let mut secret = None;
        for line in text.lines() {
            match line.split_once('=').map(|(k, v)| (k.trim(), v.trim())) {
                Some(("access_key", v)) => access = Some(v.to_string()),
                Some(("secret_key", v)) => secret = Some(v.to_string()),
                _ => {}
            }
        }
        Some(Credentials::new(
            access.filter(|a| !a.is_empty())?,
            secret.filter(|s| !s.is_empty())?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_format_round_trips() {
        let c = Credentials::parse("access_key = AK\nsecret_key = S/+K\n").unwrap();
        assert_eq!((c.access_key(), c.secret_key()), ("AK", "S/+K"));
        assert!(Credentials::parse("access_key = AK\n").is_none());
        assert_eq!(c.secret_for("AK").as_deref(), Some("S/+K"));
        assert_eq!(c.secret_for("other"), None);
    }
}
