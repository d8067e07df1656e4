//! A certificate and key from PEM files, served to handshakes and reloaded when the files
//! change or on SIGHUP (see the module docs of `server::tls`); shared by the S3 side and the
//! cluster side.

use std::fmt;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use sha2::Digest as _;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::client::ResolvesClientCert;
use tokio_rustls::rustls::crypto::{CryptoProvider, aws_lc_rs};
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{ServerConfig, SignatureScheme, SupportedProtocolVersion, version};

/// How often the files are looked at for a change.
pub const POLL_SECS: u64 = 5;
/// Largest PEM file read: a chain of a few certificates is a few KiB.
pub const PEM_FILE_BYTES_MAX: u64 = 1 << 20;
/// ALPN protocols offered, preferred first.
const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// `--tls-cert` and `--tls-key`: the certificate chain (leaf first) and its private key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{0}: {1}")]
    Read(PathBuf, std::io::Error),
    #[error("{0}: larger than {PEM_FILE_BYTES_MAX} bytes: not a PEM certificate or key")]
    TooLarge(PathBuf),
    #[error("{0}: no PEM certificate (-----BEGIN CERTIFICATE-----) in it")]
    NoCertificate(PathBuf),
    #[error("{0}: not a PEM certificate chain: {1}")]
    BadCertificate(PathBuf, String),
    #[error("{0}: no PEM private key (PKCS#8, PKCS#1 or SEC1) in it: {1}")]
    BadKey(PathBuf, String),
    #[error("{key} does not match the certificate in {cert}: {why}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        why: String,
    },
    #[error("TLS setup: {0}")]
    Setup(String),
}

/// The certificate new handshakes get: the one loaded last.
pub struct Certificate {
    current: RwLock<Arc<CertifiedKey>>,
}

impl fmt::Debug for Certificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certificate")
            .field("sha256", &fingerprint(&self.get()))
            .finish()
    }
}

impl Certificate {
    /// Loads `files`; the error says which file is wrong and why.
    pub fn load(files: &TlsFiles) -> Result<Arc<Certificate>, TlsError> {
        Ok(Arc::new(Certificate {
            current: RwLock::new(Arc::new(load(files)?)),
        }))
    }

    fn get(&self) -> Arc<CertifiedKey> {
        // A poisoned lock still holds a whole Arc: the writer only swaps it.
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set(&self, key: CertifiedKey) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(key);
    }

    /// The SHA-256 of the leaf certificate in force, in hex (what `openssl x509
    /// -fingerprint -sha256` shows), for logs.
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.get())
    }
}

impl ResolvesServerCert for Certificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.get())
    }
}

/// The same certificate presented as a client's: a cluster node's, on its RPCs to peers.
impl ResolvesClientCert for Certificate {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.get())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

fn fingerprint(key: &CertifiedKey) -> String {
    key.cert
        .first()
        .map(|leaf| hex::encode(sha2::Sha256::digest(leaf.as_ref())))
        .unwrap_or_default()
}

pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(aws_lc_rs::default_provider())
}

/// TLS 1.3 and 1.2, on every listener and client of the gateway's own.
pub(crate) const VERSIONS: &[&SupportedProtocolVersion] = &[&version::TLS13, &version::TLS12];

/// The acceptor of the S3 listener: TLS 1.2 and 1.3, ALPN h2 and http/1.1, no client
/// certificates, the certificate from `certificate` at each handshake.
pub fn acceptor(certificate: Arc<Certificate>) -> Result<TlsAcceptor, TlsError> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(VERSIONS)
        .map_err(|e| TlsError::Setup(e.to_string()))?
        .with_no_client_auth()
        .with_cert_resolver(certificate);
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Reads a PEM file, bounded by [`PEM_FILE_BYTES_MAX`].
fn read_pem(path: &Path) -> Result<Vec<u8>, TlsError> {
    let file = std::fs::File::open(path).map_err(|e| TlsError::Read(path.to_owned(), e))?;
    let mut bytes = Vec::new();
    file.take(PEM_FILE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| TlsError::Read(path.to_owned(), e))?;
    if bytes.len() as u64 > PEM_FILE_BYTES_MAX {
        return Err(TlsError::TooLarge(path.to_owned()));
    }
    Ok(bytes)
}

/// Every certificate of a PEM file, in order; none is an error.
pub(crate) fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let chain = CertificateDer::pem_slice_iter(&read_pem(path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadCertificate(path.to_owned(), e.to_string()))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate(path.to_owned()));
    }
    Ok(chain)
}

/// The certificate chain and key of `files`, checked to belong together.
fn load(files: &TlsFiles) -> Result<CertifiedKey, TlsError> {
    let chain = certificates(&files.cert)?;
    let key = PrivateKeyDer::from_pem_slice(&read_pem(&files.key)?)
        .map_err(|e| TlsError::BadKey(files.key.clone(), e.to_string()))?;
    let provider = provider();
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| TlsError::BadKey(files.key.clone(), e.to_string()))?;
    let certified = CertifiedKey::new(chain, signing);
    // Strict, unlike rustls' `from_der`: a key whose public half is unknown is refused too,
    // since serving it would fail every handshake.
    certified.keys_match().map_err(|e| TlsError::Mismatch {
        cert: files.cert.clone(),
        key: files.key.clone(),
        why: e.to_string(),
    })?;
    Ok(certified)
}

/// What identifies a version of a file: a replaced file or a re-pointed symlink changes
/// at least one of these. `None`: the file cannot be looked at now.
type Stamp = Option<(SystemTime, u64, u64, u64)>;

fn stamp(path: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt as _;
    // `metadata` follows symlinks: the target's identity, which cert-manager swaps.
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino(), m.dev()))
}

fn stamps(files: &TlsFiles) -> [Stamp; 2] {
    [stamp(&files.cert), stamp(&files.key)]
}

/// Reloads `certificate` from `files` on SIGHUP and when the files change, until the
/// process ends. A failed reload keeps the certificate in force.
pub fn watch(certificate: Arc<Certificate>, files: TlsFiles) {
    tokio::spawn(async move {
        let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "no SIGHUP handler: TLS reload on file change only");
                None
            }
        };
        let mut seen = stamps(&files);
        let mut tick = tokio::time::interval(Duration::from_secs(POLL_SECS));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let hangup_received = async {
                match &mut hangup {
                    Some(s) => s.recv().await,
                    None => std::future::pending().await,
                }
            };
            let why = tokio::select! {
                _ = tick.tick() => "files changed",
                Some(()) = hangup_received => "SIGHUP",
            };
            let now = stamps(&files);
            // A SIGHUP reloads whatever the files hold; a tick only what changed.
            if why == "files changed" && now == seen {
                continue;
            }
            // Noted before the attempt: files that fail are not retried at every tick,
            // only when they change again (a key written after its certificate).
            seen = now;
            reload(&certificate, &files, why).await;
        }
    });
}

async fn reload(certificate: &Arc<Certificate>, files: &TlsFiles, why: &'static str) {
    let loaded = {
        let files = files.clone();
        tokio::task::spawn_blocking(move || load(&files)).await
    };
    match loaded {
        Ok(Ok(key)) => {
            let before = certificate.fingerprint();
            certificate.set(key);
            tracing::info!(
                reason = why,
                cert = %files.cert.display(),
                sha256 = %certificate.fingerprint(),
                previous_sha256 = %before,
                "TLS certificate reloaded: new connections get it"
            );
        }
        Ok(Err(e)) => tracing::error!(
            reason = why,
            error = %e,
            sha256 = %certificate.fingerprint(),
            "TLS certificate reload failed: keeping the certificate in force"
        ),
        Err(e) => tracing::error!(error = %e, "TLS certificate reload failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn unreadable_or_empty_files_are_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles {
            cert: dir.path().join("missing.pem"),
            key: dir.path().join("key.pem"),
        };
        let e = Certificate::load(&files).unwrap_err().to_string();
        assert!(e.starts_with(&files.cert.display().to_string()), "{e}");
        let files = TlsFiles {
            cert: write(dir.path(), "cert.pem", "not a certificate\n"),
            key: write(dir.path(), "key.pem", "not a key\n"),
        };
        let e = Certificate::load(&files).unwrap_err().to_string();
        assert!(e.contains("no PEM certificate"), "{e}");
    }

    #[test]
    fn a_file_too_large_is_refused_before_parsing() {
        let dir = tempfile::tempdir().unwrap();
        let big = "x".repeat(usize::try_from(PEM_FILE_BYTES_MAX).unwrap() + 1);
        let path = write(dir.path(), "big.pem", &big);
        assert!(matches!(read_pem(&path), Err(TlsError::TooLarge(_))));
    }

    #[test]
    fn a_stamp_changes_when_a_symlink_is_repointed() {
        let dir = tempfile::tempdir().unwrap();
        let a = write(dir.path(), "a.pem", "same length");
        let b = write(dir.path(), "b.pem", "same length");
        let link = dir.path().join("tls.crt");
        std::os::unix::fs::symlink(&a, &link).unwrap();
        let before = stamp(&link);
        assert!(before.is_some());
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(&b, &link).unwrap();
        assert_ne!(stamp(&link), before);
        assert_eq!(stamp(&dir.path().join("gone")), None);
    }
}
