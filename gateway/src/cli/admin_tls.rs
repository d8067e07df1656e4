//! `gateway admin tls`: a cluster CA and node certificates for a test or a small
//! deployment, made with rcgen in the binary (no openssl script).
//!
//! - `ca --out DIR` writes `ca.crt` and `ca.key` (ECDSA P-256, valid `--days`, 10 years by
//!   default). An existing `ca.key` is never overwritten: the nodes' certificates chain to it.
//! - `node --ca-dir DIR --name NAME --ip IP [--dns NAME] --out DIR` writes `tls.crt`,
//!   `tls.key` and a copy of `ca.crt` (the names cert-manager gives a Secret's keys, so the
//!   same `--cluster-*` paths serve both). The certificate names the node's IPs and DNS
//!   names as SANs (a peer checks the one its address names) and is good for both ends of
//!   a connection (server and client authentication): a node accepts RPCs and sends them.
//!
//! Keys are written mode 0600. A larger deployment uses its own PKI (cert-manager with a
//! CA issuer); the gateway reads any PEM CA, certificate and key.

use std::io::Write as _;
use std::net::IpAddr;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use clap::Subcommand;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// Validity of a CA when `--days` is not given: ten years.
const CA_DAYS_DEFAULT: u32 = 3650;
/// Validity of a node certificate when `--days` is not given: one year.
const NODE_DAYS_DEFAULT: u32 = 365;
/// Longest validity accepted, either kind: 100 years.
const DAYS_MAX: u32 = 36_500;
/// SANs of one node certificate, at most.
const SANS_MAX: usize = 64;

#[derive(Subcommand)]
pub enum TlsCommand {
    /// Make a cluster CA: DIR/ca.crt and DIR/ca.key (mode 0600; never overwritten).
    Ca {
        /// Folder to write to (created).
        #[arg(long)]
        out: PathBuf,
        /// The CA's common name.
        #[arg(long, default_value = "dedup-gateway cluster CA")]
        name: String,
        /// Days the CA is valid.
        #[arg(long, default_value_t = CA_DAYS_DEFAULT)]
        days: u32,
    },
    /// Make a node certificate signed by the CA in --ca-dir: DIR/tls.crt, DIR/tls.key (mode
    /// 0600) and DIR/ca.crt, for --cluster-cert, --cluster-key and --cluster-ca.
    Node {
        /// Folder holding ca.crt and ca.key (from `gateway admin tls ca`).
        #[arg(long)]
        ca_dir: PathBuf,
        /// The node's common name (for logs; peers check the IPs and DNS names).
        #[arg(long)]
        name: String,
        /// An IP address the node is reached at (as its --peers address names it).
        #[arg(long = "ip")]
        ips: Vec<IpAddr>,
        /// A DNS name the node is reached at.
        #[arg(long = "dns")]
        dns_names: Vec<String>,
        /// Folder to write to (created).
        #[arg(long)]
        out: PathBuf,
        /// Days the certificate is valid.
        #[arg(long, default_value_t = NODE_DAYS_DEFAULT)]
        days: u32,
    },
}

impl TlsCommand {
    /// Writes the files; the text to print (what was written where).
    pub fn run(self) -> Result<String, String> {
        match self {
            TlsCommand::Ca { out, name, days } => make_ca(&out, &name, days),
            TlsCommand::Node {
                ca_dir,
                name,
                ips,
                dns_names,
                out,
                days,
            } => {
                let sans: Vec<SanType> = ips
                    .into_iter()
                    .map(SanType::IpAddress)
                    .chain(
                        dns_names
                            .into_iter()
                            .map(|d| {
                                d.as_str()
                                    .try_into()
                                    .map(SanType::DnsName)
                                    .map_err(|e| format!("--dns {d:?}: {e}"))
                            })
                            .collect::<Result<Vec<_>, _>>()?,
                    )
                    .collect();
                make_node(&ca_dir, &name, sans, &out, days)
            }
        }
    }
}

fn validity(params: &mut CertificateParams, days: u32) -> Result<(), String> {
    if days == 0 || days > DAYS_MAX {
        return Err(format!("--days must be within 1..={DAYS_MAX} (got {days})"));
    }
    // Back-dated by an hour: a peer whose clock is a little behind still accepts it.
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(i64::from(days));
    Ok(())
}

fn make_ca(out: &Path, name: &str, days: u32) -> Result<String, String> {
    let key_path = out.join("ca.key");
    if key_path.exists() {
        return Err(format!(
            "{}: exists; a new CA would orphan every node certificate it signed (remove it \
             first to start over)",
            key_path.display()
        ));
    }
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params, days)?;
    let key = KeyPair::generate().map_err(|e| format!("CA key: {e}"))?;
    let cert = params
        .self_signed(&key)
        .map_err(|e| format!("CA certificate: {e}"))?;
    create_dir(out)?;
    write_file(&key_path, &key.serialize_pem(), 0o600)?;
    let cert_path = out.join("ca.crt");
    write_file(&cert_path, &cert.pem(), 0o644)?;
    Ok(format!(
        "wrote {} and {} (keep ca.key off the nodes)\n",
        cert_path.display(),
        key_path.display()
    ))
}

fn make_node(
    ca_dir: &Path,
    name: &str,
    sans: Vec<SanType>,
    out: &Path,
    days: u32,
) -> Result<String, String> {
    if sans.is_empty() {
        return Err("a node certificate needs at least one --ip or --dns (peers check it)".into());
    }
    if sans.len() > SANS_MAX {
        return Err(format!("at most {SANS_MAX} --ip and --dns in all"));
    }
    let read = |file: &str| {
        let path = ca_dir.join(file);
        std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
    };
    let ca_pem = read("ca.crt")?;
    let ca_key = KeyPair::from_pem(&read("ca.key")?).map_err(|e| format!("ca.key: {e}"))?;
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).map_err(|e| format!("ca.crt: {e}"))?;
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.subject_alt_names = sans;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    validity(&mut params, days)?;
    let key = KeyPair::generate().map_err(|e| format!("node key: {e}"))?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|e| format!("node certificate: {e}"))?;
    create_dir(out)?;
    write_file(&out.join("tls.key"), &key.serialize_pem(), 0o600)?;
    write_file(&out.join("tls.crt"), &cert.pem(), 0o644)?;
    write_file(&out.join("ca.crt"), &ca_pem, 0o644)?;
    Ok(format!(
        "wrote {}/{{tls.crt,tls.key,ca.crt}}: --cluster-cert, --cluster-key, --cluster-ca\n",
        out.display()
    ))
}

fn create_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))
}

/// Writes `text` to `path` with `mode`, also when the file existed with another mode.
fn write_file(path: &Path, text: &str, mode: u32) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(fail)?;
    // `mode` applies only to a file created here; an old one keeps its own until this.
    file.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(fail)?;
    file.write_all(text.as_bytes()).map_err(fail)?;
    file.sync_all().map_err(fail)
}
