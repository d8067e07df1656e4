//! HTTPS against plain HTTP (`--only tls`): the same gateway binary started twice per
//! round, once plain and once with `--tls-cert`/`--tls-key` (a certificate for 127.0.0.1
//! signed by a CA the harness makes with rcgen at the start of the run), each on its own
//! fresh filesystem. Both run 64 KiB PUT and GET (32 connections) and 8 MiB PUT and GET
//! (4 clients) with the same bodies in a round; the order alternates between rounds
//! (HTTP first in odd rounds, HTTPS first in even ones) so that a drifting machine weighs on
//! both alike. Reported: median (min-max) over the rounds of each, and HTTPS / HTTP of the
//! medians with the per-round ratios; the target is on the 8 MiB GET.
//!
//! The client is the harness's own ([`Client::new_tls`]): rustls with the aws-lc-rs
//! provider (AES-GCM on AES-NI), HTTP/1.1 by ALPN, pooled connections, so a handshake is
//! paid once per connection, not per request.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::crypto::aws_lc_rs;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};

use crate::ab;
use crate::compare::{ComparePlan, Op};
use crate::report::Report;
use crate::rng::Rng;
use crate::s3::Client;
use crate::scratch::Scratches;
use crate::workloads::{self, BUCKET, Gw};

pub const SEC: &str = "HTTPS against plain HTTP (interleaved rounds)";
/// The target: 8 MiB GET over HTTPS at least this fraction of plain HTTP.
const GET8_MIN: f64 = 0.7;
/// The workloads of a round, in this order.
const OPS: [Op; 4] = [Op::Put64, Op::Get64, Op::Put8, Op::Get8];

/// The certificate the HTTPS gateway serves (PEM files in a temp folder) and the client
/// configuration that trusts its CA, and nothing else.
pub struct Pki {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client: Arc<ClientConfig>,
    /// What the certificate is, for the notes.
    pub describe: String,
    _dir: tempfile::TempDir,
}

impl Pki {
    /// A CA and a server certificate for 127.0.0.1 (ECDSA P-256, rcgen's default key: the
    /// cheapest handshake), written under a temp folder in `root`.
    pub fn new(root: &Path) -> Result<Pki, String> {
        fn e(what: &'static str) -> impl Fn(rcgen::Error) -> String {
            move |err| format!("{what}: {err}")
        }
        let mut ca = CertificateParams::default();
        ca.distinguished_name.push(DnType::CommonName, "bench CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate().map_err(e("CA key"))?;
        let ca_cert = ca.self_signed(&ca_key).map_err(e("self-signed CA"))?;
        let issuer = Issuer::new(ca, ca_key);
        let mut leaf =
            CertificateParams::new(vec!["127.0.0.1".to_owned()]).map_err(e("server SAN"))?;
        leaf.distinguished_name
            .push(DnType::CommonName, "bench gateway");
        leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let leaf_key = KeyPair::generate().map_err(e("server key"))?;
        let leaf_cert = leaf
            .signed_by(&leaf_key, &issuer)
            .map_err(e("server certificate"))?;
        let dir = tempfile::Builder::new()
            .prefix("bench-tls-")
            .tempdir_in(root)
            .map_err(|e| format!("temp folder in {}: {e}", root.display()))?;
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        for (path, pem) in [(&cert, leaf_cert.pem()), (&key, leaf_key.serialize_pem())] {
            std::fs::write(path, pem).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let mut roots = RootCertStore::empty();
        roots
            .add(ca_cert.der().clone())
            .map_err(|e| format!("CA certificate: {e}"))?;
        let client = ClientConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS versions: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Pki {
            cert,
            key,
            client: Arc::new(client),
            describe: "certificate for IP 127.0.0.1, ECDSA P-256, signed by a CA made by rcgen in \
                       this run; the client trusts that CA only"
                .into(),
            _dir: dir,
        })
    }
}

/// The two setups of a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    Http = 0,
    Https = 1,
}

impl Transport {
    const fn label(self) -> &'static str {
        match self {
            Transport::Http => "plain HTTP",
            Transport::Https => "HTTPS",
        }
    }
}

/// Starts the gateway (with `--tls-cert`/`--tls-key` for HTTPS) on a fresh filesystem,
/// with a client of the matching scheme, and creates the bucket.
async fn start(
    bin: &Path,
    scratches: &Scratches,
    pki: &Pki,
    t: Transport,
    seed: u64,
) -> Result<Gw, String> {
    let dir = scratches.fresh(&format!("gw-tls-{}", t as u8))?;
    let args: Vec<String> = match t {
        Transport::Http => Vec::new(),
        Transport::Https => vec![
            "--tls-cert".into(),
            pki.cert.display().to_string(),
            "--tls-key".into(),
            pki.key.display().to_string(),
        ],
    };
    let mut rng = Rng::new(seed);
    let mut gw = tokio::task::block_in_place(|| Gw::start_in(bin, dir, &args, &mut rng))?;
    if t == Transport::Https {
        gw.s3 = Client::new_tls(
            gw.server.addr,
            Some((&gw.secrets.access, &gw.secrets.secret)),
            "us-east-1",
            Arc::clone(&pki.client),
        );
        gw.native = gw.s3.with_bearer(&gw.secrets.native);
    }
    workloads::warm_up(&gw.s3, BUCKET, true).await?;
    Ok(gw)
}

/// One handshake of the same client configuration, HTTP/1.1 by ALPN as the pool's: the
/// version and cipher suite the pool's connections use.
async fn negotiated(gw: &Gw, pki: &Pki) -> Result<String, String> {
    let mut config = (*pki.client).clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(gw.server.addr)
        .await
        .map_err(|e| format!("connect {}: {e}", gw.server.addr))?;
    let name = ServerName::from(gw.server.addr.ip());
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let c = tls.get_ref().1;
    let or_none = |v: Option<String>| v.unwrap_or_else(|| "none".into());
    Ok(format!(
        "{}, {}, ALPN {}",
        or_none(c.protocol_version().map(|v| format!("{v:?}"))),
        or_none(
            c.negotiated_cipher_suite()
                .map(|s| format!("{:?}", s.suite()))
        ),
        or_none(
            c.alpn_protocol()
                .map(|p| String::from_utf8_lossy(p).into_owned())
        )
    ))
}

/// Plain HTTP (setup 0) and HTTPS (setup 1); the first HTTPS gateway also tells the TLS
/// session its connections use.
struct TlsSetups<'a> {
    bin: &'a Path,
    scratches: &'a Scratches,
    pki: Pki,
    session: Option<String>,
}

impl ab::Setups for TlsSetups<'_> {
    const LABELS: [&'static str; 2] = [Transport::Http.label(), Transport::Https.label()];

    async fn start(&mut self, which: usize, seed: u64) -> Result<Gw, String> {
        let t = if which == 0 {
            Transport::Http
        } else {
            Transport::Https
        };
        let gw = start(self.bin, self.scratches, &self.pki, t, seed).await?;
        if t == Transport::Https && self.session.is_none() {
            self.session = Some(negotiated(&gw, &self.pki).await?);
        }
        Ok(gw)
    }
}

/// The rounds, then the rows.
pub async fn run(
    bin: &Path,
    scratches: &Scratches,
    plan: &ComparePlan,
    rng: &mut Rng,
    report: &mut Report,
) {
    let pki = match Pki::new(&scratches.root) {
        Ok(p) => p,
        Err(e) => {
            report.error(SEC, "certificate", e);
            return;
        }
    };
    report.note(format!("HTTPS: {}", pki.describe));
    let mut setups = TlsSetups {
        bin,
        scratches,
        pki,
        session: None,
    };
    let target = ab::Target {
        op: Op::Get8,
        min: GET8_MIN,
    };
    ab::run(&mut setups, &OPS, SEC, &[target], plan, rng, report).await;
    if let Some(s) = setups.session {
        report.info(SEC, "TLS session of the client's connections", s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pki_writes_pem_files_and_a_client_config() {
        let root = tempfile::tempdir().expect("temp dir");
        let pki = Pki::new(root.path()).expect("pki");
        let cert = std::fs::read_to_string(&pki.cert).expect("cert");
        let key = std::fs::read_to_string(&pki.key).expect("key");
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"), "{cert}");
        assert!(key.contains("PRIVATE KEY-----"), "{key}");
        let client = Client::new_tls(
            "127.0.0.1:9".parse().expect("addr"),
            None,
            "us-east-1",
            Arc::clone(&pki.client),
        );
        assert_eq!(client.scheme(), "https");
    }
}
