//! Mutual TLS between the nodes of a cluster, on the S3 port.
//!
//! The nodes reach each other at the S3 addresses of `--peers` (the Raft membership stores
//! them), so the listener tells a peer from an S3 client by the connection's first bytes:
//!
//! | first byte, ClientHello | served as |
//! |---|---|
//! | TLS (`0x16`), ALPN offers [`ALPN_CLUSTER`] | cluster TLS: the node's certificate, the peer's REQUIRED and verified against the cluster CA; requests marked [`ClusterPeer`](crate::state::ClusterPeer) |
//! | TLS, no [`ALPN_CLUSTER`] | S3 TLS (`--tls-cert`); refused when the S3 side is plain |
//! | anything else | plain HTTP when the S3 side is plain; refused (closed) when it is TLS |
//!
//! A peer without a certificate the cluster CA signed (none, another CA's, an expired one)
//! fails the handshake: no request of it is read. The `/_cluster/` routes then ask for the
//! [`ClusterPeer`](crate::state::ClusterPeer) mark and the cluster secret both ([`crate::api::auth`]): the secret stays
//! a second factor, so that a node certificate stolen from one machine's disk is not
//! enough to write to the metadata.
//!
//! Back of the envelope: reading the ClientHello costs one buffer of a few KiB before the
//! handshake; the peers pool their connections, so a handshake (two ECDSA P-256 signatures
//! and a chain check, ~0.2 ms) is paid once per peer connection, not per RPC.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls::server::{Acceptor, WebPkiClientVerifier};
use tokio_rustls::rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{LazyConfigAcceptor, TlsAcceptor, server::TlsStream};

use super::certificate::{Certificate, TlsError, TlsFiles, VERSIONS, certificates, provider};

/// The ALPN protocol id of node-to-node RPCs: what a peer offers, and the only protocol
/// the cluster side speaks (HTTP/1.1 inside).
pub const ALPN_CLUSTER: &[u8] = b"dedup-cluster/1";
/// The first byte of a TLS handshake record (a ClientHello starts with it).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// `--cluster-ca`, `--cluster-cert`, `--cluster-key`: the CA every node's certificate
/// chains to, and this node's certificate (leaf first) and key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterTlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl ClusterTlsFiles {
    /// The certificate and key, reloaded like the S3 listener's.
    pub fn identity(&self) -> TlsFiles {
        TlsFiles {
            cert: self.cert.clone(),
            key: self.key.clone(),
        }
    }
}

/// A node's cluster TLS: the server side (for peers' RPCs) and the client side (its own
/// RPCs), sharing one certificate that [`super::certificate::watch`] reloads.
pub struct ClusterTls {
    pub certificate: Arc<Certificate>,
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

impl std::fmt::Debug for ClusterTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterTls")
            .field("certificate", &self.certificate)
            .finish()
    }
}

impl ClusterTls {
    /// Loads the CA and the node's certificate; the error names the wrong file.
    pub fn load(files: &ClusterTlsFiles) -> Result<ClusterTls, TlsError> {
        let setup = |e: String| TlsError::Setup(e);
        let mut roots = RootCertStore::empty();
        for ca in certificates(&files.ca)? {
            roots.add(ca).map_err(|e| {
                TlsError::BadCertificate(files.ca.clone(), format!("not a CA rustls accepts: {e}"))
            })?;
        }
        let roots = Arc::new(roots);
        let certificate = Certificate::load(&files.identity())?;
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(|e| setup(e.to_string()))?;
        let mut server = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(VERSIONS)
            .map_err(|e| setup(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(certificate.clone());
        server.alpn_protocols = vec![ALPN_CLUSTER.to_vec()];
        let mut client = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(VERSIONS)
            .map_err(|e| setup(e.to_string()))?
            .with_root_certificates(roots)
            .with_client_cert_resolver(certificate.clone());
        client.alpn_protocols = vec![ALPN_CLUSTER.to_vec()];
        Ok(ClusterTls {
            certificate,
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }

    /// The client of the RPCs to peers: ALPN [`ALPN_CLUSTER`] only, this node's
    /// certificate, the peer's checked against the cluster CA and its address's host.
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.client.clone()
    }
}

/// What the first byte of a connection decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FirstByte {
    /// A TLS record: read the ClientHello ([`on_hello`]).
    Hello,
    /// Serve plain HTTP (the S3 side is plain).
    Plain,
    /// Close: not TLS, and the S3 side is TLS.
    Refuse,
}

/// The side a ClientHello is served by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelloSide {
    /// The cluster's ServerConfig: client certificate required.
    Cluster,
    /// The S3 listener's ServerConfig (`--tls-cert`).
    S3,
    /// Close: no cluster ALPN, and no S3 certificate to answer with.
    Refuse,
}

/// The decision on a connection's first byte; `s3_tls`: the S3 side has `--tls-cert`.
pub fn on_first_byte(first: u8, s3_tls: bool) -> FirstByte {
    match (first == TLS_HANDSHAKE_RECORD, s3_tls) {
        (true, _) => FirstByte::Hello,
        (false, false) => FirstByte::Plain,
        (false, true) => FirstByte::Refuse,
    }
}

/// The decision on a ClientHello's ALPN list (None: it has none).
pub fn on_hello<'a>(alpn: Option<impl Iterator<Item = &'a [u8]>>, s3_tls: bool) -> HelloSide {
    let cluster = alpn.is_some_and(|mut offered| offered.any(|p| p == ALPN_CLUSTER));
    match (cluster, s3_tls) {
        (true, _) => HelloSide::Cluster,
        (false, true) => HelloSide::S3,
        (false, false) => HelloSide::Refuse,
    }
}

/// The first byte of a connection, without taking it from the socket; None: closed
/// before any. The caller bounds the wait.
pub async fn peek_first_byte(stream: &TcpStream) -> io::Result<Option<u8>> {
    let mut first = [0u8; 1];
    let n = stream.peek(&mut first).await?;
    Ok((n == 1).then_some(first[0]))
}

/// A connection as the dispatch left it.
pub enum Accepted<IO> {
    Plain(IO),
    /// `cluster`: the cluster side, the peer's certificate verified. Boxed: a TLS stream
    /// is ~1 KiB beside a socket's few bytes.
    Tls {
        stream: Box<TlsStream<IO>>,
        cluster: bool,
    },
}

/// Dispatches a connection whose first byte is `first` (see the module doc): plain, S3
/// TLS (`s3`, None when the S3 side is plain) or cluster TLS. An error: refused, or the
/// handshake failed (no certificate, an unknown or expired one).
pub async fn accept<IO>(
    io: IO,
    first: u8,
    s3: Option<&TlsAcceptor>,
    cluster: &ClusterTls,
) -> io::Result<Accepted<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let refused = |why: &str| io::Error::new(io::ErrorKind::PermissionDenied, why.to_owned());
    match on_first_byte(first, s3.is_some()) {
        FirstByte::Plain => return Ok(Accepted::Plain(io)),
        FirstByte::Refuse => return Err(refused("not TLS on a TLS listener")),
        FirstByte::Hello => {}
    }
    let start = LazyConfigAcceptor::new(Acceptor::default(), io).await?;
    let side = on_hello(start.client_hello().alpn(), s3.is_some());
    let (config, cluster_side) = match (side, s3) {
        (HelloSide::Cluster, _) => (cluster.server.clone(), true),
        (HelloSide::S3, Some(s3)) => (s3.config().clone(), false),
        (HelloSide::S3 | HelloSide::Refuse, _) => {
            return Err(refused("TLS without the cluster ALPN, and no --tls-cert"));
        }
    };
    let stream = start.into_stream(config).await?;
    Ok(Accepted::Tls {
        stream: Box::new(stream),
        cluster: cluster_side,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use tokio_rustls::TlsConnector;
    use tokio_rustls::rustls::pki_types::ServerName;

    fn hello(offered: Option<&[&'static [u8]]>, s3_tls: bool) -> HelloSide {
        on_hello(offered.map(|list| list.iter().copied()), s3_tls)
    }

    #[test]
    fn the_first_byte_sends_tls_to_the_hello_and_plain_bytes_by_the_s3_side() {
        assert_eq!(on_first_byte(0x16, false), FirstByte::Hello);
        assert_eq!(on_first_byte(0x16, true), FirstByte::Hello);
        assert_eq!(on_first_byte(b'G', false), FirstByte::Plain);
        assert_eq!(on_first_byte(b'P', true), FirstByte::Refuse);
        // SSLv2-style hellos and other records are not TLS 1.2+ handshakes.
        assert_eq!(on_first_byte(0x80, true), FirstByte::Refuse);
        assert_eq!(on_first_byte(0x17, false), FirstByte::Plain);
    }

    #[test]
    fn only_the_cluster_alpn_reaches_the_cluster_side() {
        let cluster: &[&[u8]] = &[b"h2", ALPN_CLUSTER];
        assert_eq!(hello(Some(cluster), false), HelloSide::Cluster);
        assert_eq!(hello(Some(cluster), true), HelloSide::Cluster);
        let s3: &[&[u8]] = &[b"h2", b"http/1.1"];
        assert_eq!(hello(Some(s3), true), HelloSide::S3);
        assert_eq!(hello(Some(s3), false), HelloSide::Refuse);
        assert_eq!(hello(None, true), HelloSide::S3);
        assert_eq!(hello(None, false), HelloSide::Refuse);
        // A prefix or a later version is another protocol.
        let near: &[&[u8]] = &[b"dedup-cluster/", b"dedup-cluster/2"];
        assert_eq!(hello(Some(near), false), HelloSide::Refuse);
    }

    /// A cluster CA and one node certificate for 127.0.0.1 under `dir`, as
    /// `gateway admin tls` writes them.
    fn node_files(dir: &Path) -> ClusterTlsFiles {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let mut ca = CertificateParams::default();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
        let issuer = Issuer::new(ca, ca_key);
        let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
        leaf.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = leaf.signed_by(&key, &issuer).unwrap();
        let files = ClusterTlsFiles {
            ca: dir.join("ca.crt"),
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        };
        std::fs::write(&files.ca, ca_pem).unwrap();
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        files
    }

    /// A client handshake (`client`) against [`accept`] over an in-memory pipe: which side
    /// served it, or None when the server refused it.
    async fn side_of(
        client: Arc<ClientConfig>,
        s3: Option<&TlsAcceptor>,
        cluster: &ClusterTls,
    ) -> Option<bool> {
        let (near, far) = tokio::io::duplex(64 * 1024);
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let connect = async {
            let stream = TlsConnector::from(client).connect(name, near).await;
            // Held until the server decided: dropping it would end the pipe.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            drop(stream);
        };
        let served = async {
            match accept(far, TLS_HANDSHAKE_RECORD, s3, cluster).await {
                Ok(Accepted::Tls { cluster, .. }) => Some(cluster),
                Ok(Accepted::Plain(_)) => panic!("a ClientHello served as plain HTTP"),
                Err(_) => None,
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            tokio::join!(connect, served).1
        })
        .await
        .expect("the handshake ended")
    }

    #[tokio::test]
    async fn the_cluster_side_needs_the_alpn_and_a_certificate_of_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        let files = node_files(dir.path());
        let cluster = ClusterTls::load(&files).unwrap();
        let s3 = super::super::certificate::acceptor(Certificate::load(&files.identity()).unwrap())
            .unwrap();
        // A peer: ALPN dedup-cluster/1 and the node's certificate.
        assert_eq!(
            side_of(cluster.client_config(), Some(&s3), &cluster).await,
            Some(true)
        );
        assert_eq!(
            side_of(cluster.client_config(), None, &cluster).await,
            Some(true)
        );
        // An S3 client: no client certificate, ALPN http/1.1.
        let mut roots = RootCertStore::empty();
        roots
            .add(certificates(&files.ca).unwrap().remove(0))
            .unwrap();
        let anonymous = |alpn: &[u8]| {
            let mut config = ClientConfig::builder_with_provider(provider())
                .with_protocol_versions(VERSIONS)
                .unwrap()
                .with_root_certificates(roots.clone())
                .with_no_client_auth();
            config.alpn_protocols = vec![alpn.to_vec()];
            Arc::new(config)
        };
        assert_eq!(
            side_of(anonymous(b"http/1.1"), Some(&s3), &cluster).await,
            Some(false)
        );
        assert_eq!(side_of(anonymous(b"http/1.1"), None, &cluster).await, None);
        // The cluster ALPN without a certificate: the handshake fails.
        assert_eq!(
            side_of(anonymous(ALPN_CLUSTER), Some(&s3), &cluster).await,
            None
        );
    }
}
