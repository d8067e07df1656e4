//! Certificates for the TLS tests, made with rcgen in the test itself (no openssl script):
//! a CA, a storage node's server certificate for 127.0.0.1, client certificates, written
//! as the PEM files nginx, the gateway and `valkyrie` read (`ca.crt`, `tls.crt`, `tls.key`,
//! the names cert-manager gives them).

use std::fs;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A certificate authority: its certificate as PEM, and what signs its leaves.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
}

/// A certificate and its key, written as `<dir>/tls.crt` and `<dir>/tls.key`.
#[derive(Clone, Debug)]
pub struct Identity {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What a certificate is for: a storage node (server) or a gateway or worker (client).
#[derive(Clone, Copy, Debug)]
pub enum Role {
    Server,
    Client,
}

impl Ca {
    /// A new CA named `name`.
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("CA key");
        let cert_pem = params.self_signed(&key).expect("self-signed CA").pem();
        Ca {
            issuer: Issuer::new(params, key),
            cert_pem,
        }
    }

    /// The CA `gateway admin tls ca --name NAME` wrote, from its `ca.key`: the same name and
    /// key sign leaves its `ca.crt` verifies (rcgen here cannot read the certificate back).
    pub fn from_key_pem(name: &str, key_pem: &str) -> Ca {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::from_pem(key_pem).expect("CA key PEM");
        Ca {
            issuer: Issuer::new(params, key),
            cert_pem: String::new(),
        }
    }

    /// A certificate for 127.0.0.1 for server and client authentication, valid during 2020
    /// only, signed by this CA, written under `dir` (created).
    pub fn issue_expired(&self, name: &str, dir: &Path) -> Identity {
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("SAN");
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        self.write_leaf(params, dir)
    }

    /// Writes the CA certificate to `path` (a `ca.crt`).
    pub fn write_cert(&self, path: &Path) -> PathBuf {
        fs::write(path, &self.cert_pem).expect("write CA certificate");
        path.to_path_buf()
    }

    /// A certificate for 127.0.0.1 (`Role::Server`) or a client named `name`, signed by this
    /// CA, written under `dir` (created).
    pub fn issue(&self, role: Role, name: &str, dir: &Path) -> Identity {
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("SAN");
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![match role {
            Role::Server => ExtendedKeyUsagePurpose::ServerAuth,
            Role::Client => ExtendedKeyUsagePurpose::ClientAuth,
        }];
        self.write_leaf(params, dir)
    }

    /// Signs a new key's certificate of `params`, written as `dir/tls.crt`, `dir/tls.key`.
    fn write_leaf(&self, params: CertificateParams, dir: &Path) -> Identity {
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign leaf");
        fs::create_dir_all(dir).expect("create certificate folder");
        let identity = Identity {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        };
        fs::write(&identity.cert, cert.pem()).expect("write certificate");
        fs::write(&identity.key, key.serialize_pem()).expect("write key");
        identity
    }
}

/// The certificates of one TLS test, under a temp folder: the storage CA (`ca.crt`), a
/// node's server certificate (`node/`), the gateway's client certificate (`client/`), and
/// another CA's server and client certificates (`rogue/node/`, `rogue/client/`) that
/// nothing trusts.
pub struct StoragePki {
    _dir: tempfile::TempDir,
    pub ca: PathBuf,
    pub node: Identity,
    pub client: Identity,
    pub rogue_node: Identity,
    pub rogue_client: Identity,
}

impl StoragePki {
    pub fn new() -> StoragePki {
        let dir = tempfile::Builder::new()
            .prefix("storage-pki-")
            .tempdir()
            .expect("temp dir");
        let d = dir.path();
        let ca = Ca::new("storage CA");
        let rogue = Ca::new("another CA");
        StoragePki {
            ca: ca.write_cert(&d.join("ca.crt")),
            node: ca.issue(Role::Server, "storage node", &d.join("node")),
            client: ca.issue(Role::Client, "gateway", &d.join("client")),
            rogue_node: rogue.issue(Role::Server, "rogue node", &d.join("rogue/node")),
            rogue_client: rogue.issue(Role::Client, "rogue client", &d.join("rogue/client")),
            _dir: dir,
        }
    }
}

impl Default for StoragePki {
    fn default() -> Self {
        Self::new()
    }
}
