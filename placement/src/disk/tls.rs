//! TLS to storage nodes: what an `https://` WebDAV disk trusts and which certificate this
//! process presents.
//!
//! Why a CA of its own and never the system roots: a storage node sits on the storage
//! network with a certificate from the operator's private CA (a mail provider does not buy
//! public certificates for its disk servers), and a node that a public CA vouches for is
//! not thereby one of ours. So an `https://` disk without a configured CA is refused when
//! it is opened, and the roots are exactly the certificates of the CA bundle.
//!
//! Why a client certificate: nginx's `ssl_verify_client on` lets only the gateway and the
//! Valkyrie workers write and delete on a node. It is optional here (a node may trust its
//! network instead); a node that requires one refuses a client without it, and
//! [`super::WebDavDisk`] reports that refusal by name.
//!
//! Sizes: a CA bundle or a certificate chain is a few KiB of PEM; [`PEM_FILE_BYTES_MAX`]
//! bounds what is read, so a wrong path (a disk image, `/dev/zero`) fails instead of
//! filling memory.

use std::fmt;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Bound on a PEM file read: bundles of hundreds of certificates fit in 1 MiB.
pub const PEM_FILE_BYTES_MAX: u64 = 1 << 20;

/// What goes wrong building the TLS client of the storage nodes; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum StorageTlsError {
    #[error("{what} {path}: {source}")]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what} {path}: larger than {PEM_FILE_BYTES_MAX} bytes, not a PEM file")]
    TooLarge { what: &'static str, path: PathBuf },
    #[error("{what} {path}: {message}")]
    Pem {
        what: &'static str,
        path: PathBuf,
        message: String,
    },
    #[error("client certificate {cert} with key {key}: {message}")]
    ClientIdentity {
        cert: PathBuf,
        key: PathBuf,
        message: String,
    },
    #[error("the storage TLS settings: {0}")]
    Rustls(String),
}

/// The TLS client of `https://` disks: the trusted CA and the optional client identity.
///
/// Cheap to clone (one shared rustls configuration). Two values are equal when they are
/// the same configuration, not merely built from equal files.
#[derive(Clone)]
pub struct StorageTls {
    config: Arc<rustls::ClientConfig>,
    ca: PathBuf,
    client_cert: Option<PathBuf>,
}

impl StorageTls {
    /// Trusts the certificates of the PEM bundle `ca` only, and presents the PEM chain
    /// `client.0` with its PEM key `client.1` when given.
    pub fn from_files(ca: &Path, client: Option<(&Path, &Path)>) -> Result<Self, StorageTlsError> {
        let roots = certificates("storage CA", ca)?;
        let identity = match client {
            Some((cert, key)) => Some((
                certificates("client certificate", cert)?,
                private_key(key)?,
                (cert, key),
            )),
            None => None,
        };
        let mut store = rustls::RootCertStore::empty();
        for root in roots {
            store.add(root).map_err(|e| StorageTlsError::Pem {
                what: "storage CA",
                path: ca.to_path_buf(),
                message: format!("not a CA certificate rustls accepts: {e}"),
            })?;
        }
        // The provider is named, not taken from the process default: another crate of the
        // process enabling a second provider must not change (or break) this client.
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| StorageTlsError::Rustls(e.to_string()))?
            .with_root_certificates(store);
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some((chain, key, (cert, key_path))) => builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| StorageTlsError::ClientIdentity {
                    cert: cert.to_path_buf(),
                    key: key_path.to_path_buf(),
                    message: e.to_string(),
                })?,
        };
        Ok(StorageTls {
            config: Arc::new(config),
            ca: ca.to_path_buf(),
            client_cert: client.map(|(cert, _)| cert.to_path_buf()),
        })
    }

    /// The storage TLS of a process from its three settings, as both binaries name them:
    /// `--storage-ca`, with `--storage-cert` and `--storage-key` both or neither; `None`
    /// without any (an `https://` disk is then refused when opened).
    pub fn from_settings(
        ca: Option<&Path>,
        cert: Option<&Path>,
        key: Option<&Path>,
    ) -> Result<Option<Self>, String> {
        let client = match (cert, key) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some((cert, key)),
            (Some(_), None) => return Err("--storage-cert needs --storage-key".into()),
            (None, Some(_)) => return Err("--storage-key needs --storage-cert".into()),
        };
        let Some(ca) = ca else {
            if client.is_some() {
                return Err("--storage-cert needs --storage-ca (the storage nodes' CA)".into());
            }
            return Ok(None);
        };
        Self::from_files(ca, client)
            .map(Some)
            .map_err(|e| format!("storage TLS: {e}"))
    }

    /// The rustls configuration every `https://` disk of the process connects with.
    pub fn client_config(&self) -> &rustls::ClientConfig {
        &self.config
    }

    /// Whether a client certificate is presented.
    pub fn has_client_cert(&self) -> bool {
        self.client_cert.is_some()
    }
}

impl PartialEq for StorageTls {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.config, &other.config)
    }
}

impl Eq for StorageTls {}

impl fmt::Debug for StorageTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StorageTls")
            .field("ca", &self.ca)
            .field("client_cert", &self.client_cert)
            .finish()
    }
}

/// A PEM file's bytes, at most [`PEM_FILE_BYTES_MAX`].
fn read_pem(what: &'static str, path: &Path) -> Result<Vec<u8>, StorageTlsError> {
    let read = |source| StorageTlsError::Read {
        what,
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read)?;
    let mut bytes = Vec::new();
    file.take(PEM_FILE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(read)?;
    if bytes.len() as u64 > PEM_FILE_BYTES_MAX {
        return Err(StorageTlsError::TooLarge {
            what,
            path: path.to_path_buf(),
        });
    }
    Ok(bytes)
}

/// Every certificate of a PEM file; none is an error.
fn certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, StorageTlsError> {
    let bytes = read_pem(what, path)?;
    let pem = |message: String| StorageTlsError::Pem {
        what,
        path: path.to_path_buf(),
        message,
    };
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem(e.to_string()))?;
    if certs.is_empty() {
        return Err(pem("no CERTIFICATE in the file".into()));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, StorageTlsError> {
    let what = "client key";
    let bytes = read_pem(what, path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| StorageTlsError::Pem {
        what,
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_empty_and_huge_files_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("ca.crt");
        let e = StorageTls::from_files(&missing, None).unwrap_err();
        assert!(e.to_string().starts_with("storage CA "), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let e = StorageTls::from_files(&empty, None).unwrap_err();
        assert!(e.to_string().contains("no CERTIFICATE"), "{e}");
        let huge = dir.path().join("huge.pem");
        std::fs::write(&huge, vec![b'a'; PEM_FILE_BYTES_MAX as usize + 1]).unwrap();
        let e = StorageTls::from_files(&huge, None).unwrap_err();
        assert!(matches!(e, StorageTlsError::TooLarge { .. }), "{e}");
    }

    #[test]
    fn settings_come_in_the_right_combinations() {
        let p = Path::new("x.pem");
        assert_eq!(StorageTls::from_settings(None, None, None), Ok(None));
        let e = StorageTls::from_settings(Some(p), Some(p), None).unwrap_err();
        assert_eq!(e, "--storage-cert needs --storage-key");
        let e = StorageTls::from_settings(Some(p), None, Some(p)).unwrap_err();
        assert_eq!(e, "--storage-key needs --storage-cert");
        let e = StorageTls::from_settings(None, Some(p), Some(p)).unwrap_err();
        assert!(e.starts_with("--storage-cert needs --storage-ca"), "{e}");
        let e = StorageTls::from_settings(Some(p), None, None).unwrap_err();
        assert!(e.starts_with("storage TLS: storage CA x.pem"), "{e}");
    }
}
