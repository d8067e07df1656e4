//! HTTPS on the S3 listener (`--tls-cert`, `--tls-key`): real clients (boto3, the aws cli,
//! rclone, s3cmd, rustls with hyper) against the real binary, with certificates made by
//! rcgen ([`e2e::pki`]: a CA and server certificates for 127.0.0.1).

use std::fs;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use e2e::Gateway;
use e2e::pki::{Ca, Role};
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::crypto::aws_lc_rs;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{
    ClientConfig, ProtocolVersion, RootCertStore, SupportedProtocolVersion, version,
};

/// The gateway looks at the files every 5 s (`tls::POLL_SECS`); a change is seen well
/// within this.
const RELOAD_WAIT: Duration = Duration::from_secs(15);
/// Every PEM file is padded to this length, so that a rewrite in place can keep the
/// file's length (and, with its modification time put back, its whole stamp).
const PEM_PADDED_BYTES: usize = 4096;

/// A test CA and the server certificates it signs, as PEM files in a temp dir.
struct Pki {
    dir: tempfile::TempDir,
    ca: Ca,
    ca_der: CertificateDer<'static>,
}

/// One server certificate: its DER (to compare with what a client is shown) and files.
struct ServerCert {
    der: CertificateDer<'static>,
    cert: PathBuf,
    key: PathBuf,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::Builder::new()
            .prefix("e2e-tls-")
            .tempdir()
            .unwrap();
        let ca = Ca::new("e2e test CA");
        let pem = ca.write_cert(&dir.path().join("ca.pem"));
        Pki {
            dir,
            ca,
            ca_der: CertificateDer::from_pem_file(pem).unwrap(),
        }
    }

    fn ca_pem(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// A new server certificate (a new key, serial and CN) for 127.0.0.1, written as
    /// `<name>/tls.crt` and `<name>/tls.key`, each padded to [`PEM_PADDED_BYTES`].
    fn server(&self, name: &str) -> ServerCert {
        let id = self.ca.issue(
            Role::Server,
            &format!("gateway {name}"),
            &self.dir.path().join(name),
        );
        for path in [&id.cert, &id.key] {
            fs::write(path, padded(fs::read_to_string(path).unwrap())).unwrap();
        }
        ServerCert {
            der: CertificateDer::from_pem_file(&id.cert).unwrap(),
            cert: id.cert,
            key: id.key,
        }
    }

    /// `live/tls.crt` and `live/tls.key`, symlinks to `to`'s files (as a Kubernetes secret
    /// volume or cert-manager lays them out), replaced atomically when called again.
    fn point_live(&self, to: &ServerCert) -> (PathBuf, PathBuf) {
        let live = self.dir.path().join("live");
        fs::create_dir_all(&live).unwrap();
        let link = |target: &Path, name: &str| {
            let next = live.join(format!(".{name}.next"));
            let _ = fs::remove_file(&next);
            std::os::unix::fs::symlink(target, &next).unwrap();
            fs::rename(&next, live.join(name)).unwrap();
            live.join(name)
        };
        (link(&to.cert, "tls.crt"), link(&to.key, "tls.key"))
    }
}

fn padded(mut pem: String) -> String {
    assert!(pem.len() < PEM_PADDED_BYTES, "a PEM of {} bytes", pem.len());
    pem.extend(std::iter::repeat_n('\n', PEM_PADDED_BYTES - pem.len()));
    pem
}

fn tls_args<'a>(cert: &'a Path, key: &'a Path) -> Vec<&'a str> {
    vec![
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]
}

fn client_config(
    ca: &CertificateDer<'static>,
    alpn: &[&[u8]],
    versions: &[&'static SupportedProtocolVersion],
) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let mut config = ClientConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// A TLS connection to the gateway, verified against the test CA for 127.0.0.1.
async fn connect(
    port: u16,
    ca: &CertificateDer<'static>,
    alpn: &[&[u8]],
    versions: &[&'static SupportedProtocolVersion],
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    TlsConnector::from(client_config(ca, alpn, versions))
        .connect(name, tcp)
        .await
}

/// The leaf certificate a new connection is shown.
async fn served_cert(port: u16, ca: &CertificateDer<'static>) -> CertificateDer<'static> {
    let stream = connect(port, ca, &[], &[&version::TLS13]).await.unwrap();
    stream.get_ref().1.peer_certificates().unwrap()[0].clone()
}

/// Waits until new connections are shown `want`; false if they are not within `limit`.
async fn wait_served(
    port: u16,
    ca: &CertificateDer<'static>,
    want: &CertificateDer<'static>,
    limit: Duration,
) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if &served_cert(port, ca).await == want {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// `GET /_health` over `stream` with HTTP/2 or HTTP/1.1: the status and body.
async fn health(stream: TlsStream<TcpStream>, port: u16, h2: bool) -> (u16, Bytes) {
    let request = hyper::Request::get(format!("https://127.0.0.1:{port}/_health"))
        .header("host", format!("127.0.0.1:{port}"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let io = TokioIo::new(stream);
    let response = if h2 {
        let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .unwrap();
        tokio::spawn(conn);
        send.send_request(request).await.unwrap()
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        send.send_request(request).await.unwrap()
    };
    let status = response.status().as_u16();
    (
        status,
        response.into_body().collect().await.unwrap().to_bytes(),
    )
}

/// Runs a python3 boto3 script with the arguments ENDPOINT CA ACCESS_KEY SECRET_KEY and
/// `extra`; None (the test is skipped) where python3 or boto3 is missing.
fn boto3(script: &str, gw: &Gateway, ca: &Path, extra: &[&str]) -> Option<std::process::Child> {
    let probe = Command::new("python3")
        .args(["-c", "import boto3"])
        .status();
    if !matches!(probe, Ok(s) if s.success()) {
        eprintln!("SKIPPED: python3 with boto3 is not available here");
        return None;
    }
    Some(
        Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(format!("https://127.0.0.1:{}", gw.port()))
            .arg(ca)
            .args([gw.access_key(), gw.secret_key()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// Waits for a child with a bound, killing it past the bound; its exit status and output.
fn finish(mut child: std::process::Child, limit: Duration) -> (bool, String) {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

const BOTO3_CRUD: &str = r#"
import sys, boto3, botocore
endpoint, ca, ak, sk = sys.argv[1:5]
def client(verify):
    return boto3.client("s3", endpoint_url=endpoint, verify=verify, aws_access_key_id=ak,
                        aws_secret_access_key=sk, region_name="us-east-1")
c = client(ca)
c.create_bucket(Bucket="tls")
c.put_object(Bucket="tls", Key="a", Body=b"over https")
assert c.get_object(Bucket="tls", Key="a")["Body"].read() == b"over https"
part = b"p" * (5 << 20)
up = c.create_multipart_upload(Bucket="tls", Key="mp")["UploadId"]
parts = []
for n, body in ((1, part), (2, b"tail")):
    etag = c.upload_part(Bucket="tls", Key="mp", UploadId=up, PartNumber=n, Body=body)["ETag"]
    parts.append({"ETag": etag, "PartNumber": n})
c.complete_multipart_upload(Bucket="tls", Key="mp", UploadId=up,
                            MultipartUpload={"Parts": parts})
assert c.get_object(Bucket="tls", Key="mp")["Body"].read() == part + b"tail"
keys = [o["Key"] for o in c.list_objects_v2(Bucket="tls")["Contents"]]
assert keys == ["a", "mp"], keys
# Without the CA, the certificate is not trusted: the client refuses before any request.
try:
    client(True).list_buckets()
    sys.exit("a client without the CA bundle was served")
except botocore.exceptions.SSLError:
    pass
print("boto3 ok")
"#;

#[test]
fn boto3_and_the_aws_cli_work_over_https_with_the_ca_bundle() {
    let pki = Pki::new();
    let server = pki.server("a");
    let gw = Gateway::start_with(&tls_args(&server.cert, &server.key), &[]);
    let endpoint = format!("https://127.0.0.1:{}", gw.port());
    let ca = pki.ca_pem();
    let Some(child) = boto3(BOTO3_CRUD, &gw, &ca, &[]) else {
        return;
    };
    let (ok, out) = finish(child, Duration::from_secs(120));
    assert!(ok, "boto3 over https: {out}");

    let aws = |args: &[&str]| {
        Command::new("aws")
            .args([
                "--endpoint-url",
                &endpoint,
                "--ca-bundle",
                ca.to_str().unwrap(),
            ])
            .args(["--region", "us-east-1"])
            .args(args)
            .env("AWS_ACCESS_KEY_ID", gw.access_key())
            .env("AWS_SECRET_ACCESS_KEY", gw.secret_key())
            .env("AWS_CONFIG_FILE", "/dev/null")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
            .output()
    };
    let Ok(listed) = aws(&["s3", "ls", "s3://tls/"]) else {
        eprintln!("SKIPPED (aws cli part): the aws cli is not available here");
        return;
    };
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.status.success() && text.contains(" a\n") && text.contains(" mp\n"),
        "aws s3 ls: {text}{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let local = pki.dir.path().join("upload.txt");
    fs::write(&local, b"from the aws cli").unwrap();
    let put = aws(&["s3", "cp", local.to_str().unwrap(), "s3://tls/cli"]).unwrap();
    assert!(
        put.status.success(),
        "aws s3 cp: {}",
        String::from_utf8_lossy(&put.stderr)
    );
    let got = aws(&["s3", "cp", "s3://tls/cli", "-"]).unwrap();
    assert_eq!(got.stdout, b"from the aws cli");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alpn_chooses_http2_or_http1() {
    let pki = Pki::new();
    let server = pki.server("a");
    let gw = Gateway::start_with(&tls_args(&server.cert, &server.key), &[]);
    let port = gw.port();
    let all = [&version::TLS13, &version::TLS12];
    for (offered, chosen) in [
        (vec![b"h2".as_slice(), b"http/1.1"], Some(b"h2".as_slice())),
        (vec![b"http/1.1".as_slice()], Some(b"http/1.1".as_slice())),
        (vec![], None),
    ] {
        let stream = connect(port, &pki.ca_der, &offered, &all).await.unwrap();
        assert_eq!(
            stream.get_ref().1.alpn_protocol(),
            chosen,
            "offered {offered:?}"
        );
        let (status, body) = health(stream, port, chosen == Some(b"h2")).await;
        assert_eq!((status, body.as_ref()), (200, b"ok\n".as_slice()));
    }
}

/// A TLS 1.1 ClientHello (record and handshake version 3.2, two TLS 1.1 cipher suites, no
/// extensions): rustls cannot build one, so it is written out here.
fn tls11_client_hello() -> Vec<u8> {
    let mut body = vec![0x03, 0x02];
    body.extend([0x11; 32]); // random
    body.push(0); // no session id
    body.extend([0x00, 0x04, 0xc0, 0x13, 0x00, 0x2f]);
    body.extend([0x01, 0x00]); // null compression
    let mut hello = vec![0x01, 0x00, 0x00, u8::try_from(body.len()).unwrap()];
    hello.extend(body);
    let mut record = vec![0x16, 0x03, 0x01, 0x00, u8::try_from(hello.len()).unwrap()];
    record.extend(hello);
    record
}

/// Sends `bytes` on a new connection and reads what comes back until the gateway closes
/// it (panics if it does not within 10 s).
async fn answer_to(port: u16, bytes: &[u8]) -> Vec<u8> {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    tcp.write_all(bytes).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 4096];
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the connection stayed open: {answer:?}");
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls12_is_served_and_tls11_plain_http_and_silence_are_refused() {
    let pki = Pki::new();
    let server = pki.server("a");
    let mut args = tls_args(&server.cert, &server.key);
    args.extend(["--header-read-timeout-secs", "2"]);
    let gw = Gateway::start_with(&args, &[]);
    let port = gw.port();

    let stream = connect(port, &pki.ca_der, &[], &[&version::TLS12])
        .await
        .unwrap();
    let tls = stream.get_ref().1;
    assert_eq!(tls.protocol_version(), Some(ProtocolVersion::TLSv1_2));
    assert_eq!(health(stream, port, false).await.0, 200);

    // TLS 1.1: a protocol_version alert (record type 21) or a bare close, never a
    // ServerHello (22).
    let answer = answer_to(port, &tls11_client_hello()).await;
    assert!(
        answer.is_empty() || answer[0] == 21,
        "TLS 1.1 answered {answer:?}"
    );
    // Plain HTTP: no HTTP answer, the connection closes.
    let answer = answer_to(port, b"GET /_health HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert!(
        !answer.starts_with(b"HTTP/") && !answer.windows(3).any(|w| w == b"ok\n"),
        "plain HTTP answered {:?}",
        String::from_utf8_lossy(&answer)
    );
    // A client that connects and says nothing is closed after the header read timeout.
    let start = Instant::now();
    assert!(answer_to(port, b"").await.is_empty());
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "{:?}",
        start.elapsed()
    );
}

/// Uploads in a loop on pooled keep-alive connections, and one slow upload streamed over
/// ~15 s, until the stop file exists; prints "slow upload started" when it starts, then
/// "ok N" at the end, or the first failure (boto3 retries nothing: any failure shows).
const BOTO3_UPLOAD_LOOP: &str = r#"
import io, os, sys, threading, time, boto3, botocore.config
endpoint, ca, ak, sk, stop = sys.argv[1:6]
config = botocore.config.Config(retries={"max_attempts": 1}, request_checksum_calculation="when_required",
                                response_checksum_validation="when_required")
def client():
    return boto3.client("s3", endpoint_url=endpoint, verify=ca, aws_access_key_id=ak,
                        aws_secret_access_key=sk, region_name="us-east-1", config=config)
class Slow(io.RawIOBase):
    def __init__(self, size, secs):
        self.size, self.sent, self.secs, self.start = size, 0, secs, time.monotonic()
    def readable(self):
        return True
    def seekable(self):
        return True
    def tell(self):
        return self.sent
    def seek(self, offset, whence=0):
        self.sent = {0: 0, 1: self.sent, 2: self.size}[whence] + offset
        return self.sent
    def readinto(self, b):
        if self.sent == self.size:
            return 0
        due = self.start + self.secs * self.sent / self.size
        time.sleep(max(0.0, due - time.monotonic()))
        n = min(len(b), self.size - self.sent, 16384)
        b[:n] = b"s" * n
        self.sent += n
        return n
failures = []
def slow():
    try:
        print("slow upload started", flush=True)
        client().put_object(Bucket="rot", Key="slow", Body=Slow(1 << 20, 15), ContentLength=1 << 20)
    except Exception as e:
        failures.append("slow upload: %r" % e)
c = client()
c.create_bucket(Bucket="rot")
t = threading.Thread(target=slow)
t.start()
n = 0
while not os.path.exists(stop) and not failures:
    body = os.urandom(64 << 10)
    try:
        c.put_object(Bucket="rot", Key="k%d" % (n % 8), Body=body)
        assert c.get_object(Bucket="rot", Key="k%d" % (n % 8))["Body"].read() == body
    except Exception as e:
        failures.append("upload %d: %r" % (n, e))
    n += 1
t.join()
if failures:
    sys.exit("\n".join(failures))
assert c.head_object(Bucket="rot", Key="slow")["ContentLength"] == 1 << 20
print("ok %d" % n)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_reaches_new_connections_and_uploads_continue() {
    let pki = Pki::new();
    let first = pki.server("v1");
    let second = pki.server("v2");
    let (cert, key) = pki.point_live(&first);
    let gw = Gateway::start_with(&tls_args(&cert, &key), &[]);
    let port = gw.port();
    assert_eq!(served_cert(port, &pki.ca_der).await, first.der);
    let stop = pki.dir.path().join("stop");
    let Some(mut child) = boto3(
        BOTO3_UPLOAD_LOOP,
        &gw,
        &pki.ca_pem(),
        &[stop.to_str().unwrap()],
    ) else {
        return;
    };
    let (started_tx, started_rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    let lines = std::thread::spawn(move || {
        let mut seen = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line == "slow upload started" {
                let _ = started_tx.send(());
            }
            seen.push_str(&line);
            seen.push('\n');
        }
        seen
    });
    started_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the upload loop did not start");
    tokio::time::sleep(Duration::from_secs(1)).await;

    // cert-manager's way: the symlinks re-pointed at new files while uploads stream.
    pki.point_live(&second);
    assert!(
        wait_served(port, &pki.ca_der, &second.der, RELOAD_WAIT).await,
        "new connections still get the first certificate\n{}",
        gw.log_tail(40)
    );
    fs::write(&stop, b"").unwrap();
    let (ok, err) = finish(child, Duration::from_secs(60));
    let out = lines.join().unwrap();
    assert!(
        ok && out.contains("ok "),
        "uploads across the rotation: {out}{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_and_bad_new_files_keep_the_old_certificate() {
    let pki = Pki::new();
    let first = pki.server("v1");
    let mismatched = pki.server("v3");
    let gw = Gateway::start_with(&tls_args(&first.cert, &first.key), &[]);
    let port = gw.port();
    assert_eq!(served_cert(port, &pki.ca_der).await, first.der);

    // Rewritten in place with the same length and modification time: the poll sees no
    // change, only SIGHUP reloads.
    let second = pki.server("v2");
    let rewrite_unseen = |from: &Path, to: &Path| {
        let modified = fs::metadata(to).unwrap().modified().unwrap();
        fs::write(to, fs::read(from).unwrap()).unwrap();
        let file = fs::File::options().write(true).open(to).unwrap();
        file.set_modified(modified).unwrap();
    };
    rewrite_unseen(&second.cert, &first.cert);
    rewrite_unseen(&second.key, &first.key);
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(
        served_cert(port, &pki.ca_der).await,
        first.der,
        "reloaded by the poll"
    );
    hangup(&gw);
    assert!(wait_served(port, &pki.ca_der, &second.der, Duration::from_secs(5)).await);

    // A key of another certificate: refused, the certificate in force stays.
    fs::write(&first.key, fs::read(&mismatched.key).unwrap()).unwrap();
    bump_mtime(&first.key);
    assert!(
        e2e::poll_until(RELOAD_WAIT, || gw
            .log_tail(50)
            .contains("TLS certificate reload failed")),
        "no reload error logged\n{}",
        gw.log_tail(40)
    );
    assert_eq!(served_cert(port, &pki.ca_der).await, second.der);
    // Not PEM at all, on SIGHUP: the same.
    fs::write(&first.cert, b"garbage").unwrap();
    hangup(&gw);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(served_cert(port, &pki.ca_der).await, second.der);
    let health_after = connect(port, &pki.ca_der, &[], &[&version::TLS13])
        .await
        .unwrap();
    assert_eq!(health(health_after, port, false).await.0, 200);
}

fn hangup(gw: &Gateway) {
    let pid = i32::try_from(gw.pid().unwrap()).unwrap();
    // SAFETY: kill(2) with a pid this test started and a valid signal.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
}

/// Moves a file's modification time a few seconds on, so that the change shows even on
/// a file system with coarse timestamps.
fn bump_mtime(path: &Path) {
    let file = fs::File::options().write(true).open(path).unwrap();
    file.set_modified(SystemTime::now() + Duration::from_secs(3))
        .unwrap();
}

#[test]
fn bad_tls_settings_stop_the_start_with_a_clear_error() {
    let pki = Pki::new();
    let a = pki.server("a");
    let b = pki.server("b");
    let garbage = pki.dir.path().join("garbage.pem");
    fs::write(&garbage, b"-----BEGIN CERTIFICATE-----\nnot base64\n").unwrap();
    let missing = pki.dir.path().join("missing.pem");
    let p = |path: &Path| path.to_str().unwrap().to_owned();
    let both =
        |cert: &Path, key: &Path| vec!["--tls-cert".into(), p(cert), "--tls-key".into(), p(key)];
    let cases: Vec<(Vec<String>, String)> = vec![
        (
            vec!["--tls-cert".into(), p(&a.cert)],
            "--tls-cert needs --tls-key".into(),
        ),
        (
            vec!["--tls-key".into(), p(&a.key)],
            "--tls-key needs --tls-cert".into(),
        ),
        (
            both(&missing, &a.key),
            format!("{}: No such file", missing.display()),
        ),
        (
            both(&garbage, &a.key),
            format!("{}: not a PEM certificate chain", garbage.display()),
        ),
        (
            both(&a.cert, &garbage),
            format!("{}: no PEM private key", garbage.display()),
        ),
        (
            both(&a.cert, &b.key),
            format!(
                "{} does not match the certificate in {}",
                b.key.display(),
                a.cert.display()
            ),
        ),
        (
            [
                both(&a.cert, &a.key),
                vec![
                    "--peers".into(),
                    "1=127.0.0.1:1".into(),
                    "--node-id".into(),
                    "1".into(),
                ],
            ]
            .concat(),
            "--tls-cert with --peers needs cluster TLS".into(),
        ),
    ];
    for (args, want) in cases {
        let data = tempfile::tempdir().unwrap();
        let child = Command::new(e2e::gateway_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(data.path())
            .args(&args)
            .env("GATEWAY_CLUSTER_SECRET", "s")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (ok, out) = finish(child, Duration::from_secs(30));
        assert!(
            !ok && out.contains(&want),
            "{args:?}: want {want:?}, got:\n{out}"
        );
        assert!(!out.contains("listening on"), "{args:?} started:\n{out}");
    }
}

/// Session settings that must not reach rclone and s3cmd: a CA bundle or proxy of the
/// environment (with `AWS_CA_BUNDLE` set Debian's rclone refuses to start), AWS profiles and
/// endpoints, an rclone config. What a client trusts comes from its own flags only.
const CLIENT_ENV_REMOVED: &[&str] = &[
    "AWS_CA_BUNDLE",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "RCLONE_CONFIG",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "http_proxy",
    "https_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "all_proxy",
];

/// Bound on one rclone or s3cmd command.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);
/// The multi-MiB file each client uploads: more than one 5 MiB part.
const BIG_FILE_BYTES: usize = 12 << 20;

/// A client command (rclone, s3cmd) with the session's settings removed.
fn client_command(program: &str) -> Command {
    let mut cmd = Command::new(program);
    for var in CLIENT_ENV_REMOVED {
        cmd.env_remove(var);
    }
    cmd.env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Runs `cmd` within [`CLIENT_TIMEOUT`]: its success and output (stdout then stderr).
fn run_client(mut cmd: Command) -> (bool, String) {
    let what = format!("{cmd:?}");
    let child = cmd.spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
    finish(child, CLIENT_TIMEOUT)
}

/// Panics, saying how to install it, where `program` is not installed: these tests claim
/// that the client works over HTTPS and must not pass without running it (as in
/// scripts/client-matrix.sh, a missing client is a failure, never a skip).
fn require_client(program: &str, version_arg: &str, install: &str) {
    match Command::new(program).arg(version_arg).output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "`{program} {version_arg}` failed ({}): {}{}\ninstall it with `{install}` (as .ci/run does)",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!(
            "{program} is not installed ({e}); these tests run it against the gateway over \
             HTTPS: install it with `{install}` (as .ci/run does)"
        ),
    }
}

/// A small and a multi-MiB file to upload, in `dir/up`: their names and contents.
fn upload_files(dir: &Path) -> Vec<(&'static str, Vec<u8>)> {
    let files = vec![
        ("small.txt", b"a small file over https\n".to_vec()),
        ("big.bin", e2e::random_body(0x715, BIG_FILE_BYTES)),
    ];
    fs::create_dir_all(dir.join("up")).unwrap();
    for (name, body) in &files {
        fs::write(dir.join("up").join(name), body).unwrap();
    }
    files
}

/// Asserts that a client's failed run failed on the server's certificate.
#[track_caller]
fn assert_refused_certificate(what: &str, (ok, out): (bool, String), marks: &[&str]) {
    assert!(!ok, "{what}: the client was served:\n{out}");
    assert!(
        marks.iter().any(|m| out.contains(m)),
        "{what}: failed, but not on the certificate (want one of {marks:?}):\n{out}"
    );
    eprintln!("{what}: refused as it should be:\n{out}");
}

#[test]
fn rclone_works_over_https_with_the_ca_cert_and_refuses_the_server_without() {
    require_client("rclone", "version", "apt-get install rclone");
    let pki = Pki::new();
    let server = pki.server("a");
    let gw = Gateway::start_with(&tls_args(&server.cert, &server.key), &[]);
    let dir = pki.dir.path().join("rclone");
    let files = upload_files(&dir);
    let config = dir.join("rclone.conf");
    fs::write(
        &config,
        format!(
            "[gw]\ntype = s3\nprovider = Other\naccess_key_id = {}\nsecret_access_key = {}\n\
             endpoint = https://127.0.0.1:{}\nregion = us-east-1\nforce_path_style = true\n",
            gw.access_key(),
            gw.secret_key(),
            gw.port()
        ),
    )
    .unwrap();
    let ca = pki.ca_pem();
    let other_ca = Ca::new("another CA").write_cert(&dir.join("other-ca.pem"));
    // `ca`: the file given with --ca-cert, or None for the system's roots.
    let rclone = |ca: Option<&Path>, args: &[&str]| {
        let mut cmd = client_command("rclone");
        cmd.arg("--config")
            .arg(&config)
            .args(["--retries", "1", "--low-level-retries", "1"])
            .args(["--contimeout", "10s", "--timeout", "60s"]);
        if let Some(ca) = ca {
            cmd.arg("--ca-cert").arg(ca);
        }
        cmd.args(args);
        run_client(cmd)
    };
    let ok = |args: &[&str]| {
        let (ok, out) = rclone(Some(&ca), args);
        assert!(ok, "rclone {args:?} over https:\n{out}");
        out
    };

    // Without the CA, and with another CA: refused on the certificate, nothing is sent.
    let x509 = ["x509: certificate signed by unknown authority"];
    assert_refused_certificate(
        "rclone lsd without --ca-cert",
        rclone(None, &["lsd", "gw:"]),
        &x509,
    );
    assert_refused_certificate(
        "rclone mkdir with another CA's --ca-cert",
        rclone(Some(&other_ca), &["mkdir", "gw:refused"]),
        &x509,
    );

    ok(&["mkdir", "gw:tls-rclone"]);
    let listed = ok(&["lsd", "gw:"]);
    assert!(listed.contains(" tls-rclone\n"), "rclone lsd: {listed}");
    assert!(!listed.contains("refused"), "rclone lsd: {listed}");
    // 5 MiB parts: the big file goes up as a multipart upload.
    let up = dir.join("up");
    ok(&[
        "copy",
        "--s3-upload-cutoff",
        "5M",
        "--s3-chunk-size",
        "5M",
        up.to_str().unwrap(),
        "gw:tls-rclone",
    ]);
    let listed = ok(&["lsf", "--format", "sp", "gw:tls-rclone"]);
    let mut lines: Vec<&str> = listed.lines().collect();
    lines.sort_unstable();
    let want: Vec<String> = [("big.bin", BIG_FILE_BYTES), ("small.txt", files[0].1.len())]
        .iter()
        .map(|(name, len)| format!("{len};{name}"))
        .collect();
    assert_eq!(lines, want, "rclone lsf: {listed}");
    let down = dir.join("down");
    ok(&["copy", "gw:tls-rclone", down.to_str().unwrap()]);
    for (name, body) in &files {
        e2e::assert_same_body(
            &fs::read(down.join(name)).unwrap(),
            body,
            &format!("rclone copy down {name}"),
        );
    }
    let checked = ok(&["check", up.to_str().unwrap(), "gw:tls-rclone"]);
    assert!(
        checked.contains(" 0 differences found"),
        "rclone check: {checked}"
    );

    ok(&["delete", "gw:tls-rclone"]);
    assert_eq!(
        ok(&["lsf", "gw:tls-rclone"]),
        "",
        "left after rclone delete"
    );
    ok(&["rmdir", "gw:tls-rclone"]);
    let listed = ok(&["lsd", "gw:"]);
    assert!(
        !listed.contains("tls-rclone"),
        "after rclone rmdir: {listed}"
    );
}

#[test]
fn s3cmd_works_over_https_with_the_ca_certs_and_refuses_the_server_without() {
    require_client("s3cmd", "--version", "pip install s3cmd");
    let pki = Pki::new();
    let server = pki.server("a");
    let gw = Gateway::start_with(&tls_args(&server.cert, &server.key), &[]);
    let dir = pki.dir.path().join("s3cmd");
    let files = upload_files(&dir);
    // Only the keys in the file; the endpoint, HTTPS and the CA are given on the command line.
    let config = dir.join("s3cfg");
    fs::write(
        &config,
        format!(
            "[default]\naccess_key = {}\nsecret_key = {}\nbucket_location = us-east-1\n\
             signature_v2 = False\nproxy_host =\n",
            gw.access_key(),
            gw.secret_key()
        ),
    )
    .unwrap();
    let host = format!("127.0.0.1:{}", gw.port());
    let ca = pki.ca_pem();
    let other_ca = Ca::new("another CA").write_cert(&dir.join("other-ca.pem"));
    // `ca`: the file given with --ca-certs, or None for the system's roots. Certificate and
    // host name checks on (they are s3cmd's defaults; said here so that no config turns them
    // off); host_bucket without %(bucket)s: path-style requests.
    let s3cmd = |ca: Option<&Path>, args: &[&str]| {
        let mut cmd = client_command("s3cmd");
        cmd.arg("-c")
            .arg(&config)
            .arg(format!("--host={host}"))
            .arg(format!("--host-bucket={host}"))
            .args(["--ssl", "--check-certificate", "--check-hostname"])
            .args(["--no-progress", "--max-retries=1"]);
        if let Some(ca) = ca {
            cmd.arg(format!("--ca-certs={}", ca.display()));
        }
        cmd.args(args);
        run_client(cmd)
    };
    let ok = |args: &[&str]| {
        let (ok, out) = s3cmd(Some(&ca), args);
        assert!(ok, "s3cmd {args:?} over https:\n{out}");
        out
    };

    let verify_failed = ["CERTIFICATE_VERIFY_FAILED"];
    assert_refused_certificate(
        "s3cmd ls without --ca-certs",
        s3cmd(None, &["ls"]),
        &verify_failed,
    );
    assert_refused_certificate(
        "s3cmd mb with another CA's --ca-certs",
        s3cmd(Some(&other_ca), &["mb", "s3://refused"]),
        &verify_failed,
    );

    ok(&["mb", "s3://tls-s3cmd"]);
    let listed = ok(&["ls"]);
    assert!(listed.contains("s3://tls-s3cmd\n"), "s3cmd ls: {listed}");
    assert!(!listed.contains("refused"), "s3cmd ls: {listed}");
    for (name, _) in &files {
        let local = dir.join("up").join(name);
        // 5 MB chunks: the big file goes up as a multipart upload.
        ok(&[
            "put",
            "--multipart-chunk-size-mb=5",
            local.to_str().unwrap(),
            &format!("s3://tls-s3cmd/{name}"),
        ]);
    }
    let listed = ok(&["ls", "s3://tls-s3cmd"]);
    for (name, body) in &files {
        let size = body.len().to_string();
        assert!(
            listed.lines().any(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                words.ends_with(&[size.as_str(), &format!("s3://tls-s3cmd/{name}")])
            }),
            "s3cmd ls: no {name} of {size} bytes in:\n{listed}"
        );
    }
    for (name, body) in &files {
        let local = dir.join(format!("{name}.down"));
        ok(&[
            "get",
            &format!("s3://tls-s3cmd/{name}"),
            local.to_str().unwrap(),
        ]);
        e2e::assert_same_body(
            &fs::read(&local).unwrap(),
            body,
            &format!("s3cmd get {name}"),
        );
    }

    ok(&["del", "s3://tls-s3cmd/small.txt", "s3://tls-s3cmd/big.bin"]);
    assert_eq!(
        ok(&["ls", "s3://tls-s3cmd"]).trim(),
        "",
        "left after s3cmd del"
    );
    ok(&["rb", "s3://tls-s3cmd"]);
    let listed = ok(&["ls"]);
    assert!(
        !listed.contains("s3://tls-s3cmd"),
        "after s3cmd rb: {listed}"
    );
}

#[test]
fn a_missing_client_says_how_to_install_it() {
    let panic = std::panic::catch_unwind(|| {
        require_client("e2e-no-such-client", "--version", "pip install s3cmd");
    })
    .expect_err("a missing client passed");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("e2e-no-such-client is not installed")
            && message.contains("install it with `pip install s3cmd`"),
        "{message}"
    );
}

// ---------------------------------------------------------------------------------------
// The admin listener (`--admin-listen`) and `gateway admin` over HTTPS
// ---------------------------------------------------------------------------------------

/// A gateway with `--tls-cert` from `cert`, `key` and an admin listener on a free port;
/// the admin listener's port.
fn start_with_admin(cert: &Path, key: &Path, extra: &[&str]) -> (Gateway, u16) {
    let mut args = tls_args(cert, key);
    args.extend(["--admin-listen", "127.0.0.1:0"]);
    args.extend(extra);
    let gw = Gateway::start_with(&args, &[]);
    let admin = gw
        .admin_addr()
        .unwrap_or_else(|| panic!("no `admin listening on` line\n{}", gw.log_tail(30)));
    (gw, admin.port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_serves_the_s3_certificate_and_refuses_plain_http() {
    let pki = Pki::new();
    let first = pki.server("v1");
    let second = pki.server("v2");
    let (cert, key) = pki.point_live(&first);
    let (gw, admin) = start_with_admin(&cert, &key, &["--header-read-timeout-secs", "2"]);
    assert_ne!(admin, gw.port());

    // HTTPS checked against the test CA for 127.0.0.1, HTTP/1.1 and HTTP/2.
    assert_eq!(served_cert(admin, &pki.ca_der).await, first.der);
    let all = [&version::TLS13, &version::TLS12];
    for (offered, h2) in [(b"http/1.1".as_slice(), false), (b"h2".as_slice(), true)] {
        let stream = connect(admin, &pki.ca_der, &[offered], &all).await.unwrap();
        let (status, body) = health(stream, admin, h2).await;
        assert_eq!(
            (status, body.as_ref()),
            (200, b"ok\n".as_slice()),
            "/_health over HTTPS on the admin listener (h2: {h2})"
        );
    }
    // Plain HTTP: no HTTP answer (the admin token would travel in clear text), the
    // connection closes.
    let answer = answer_to(admin, b"GET /_health HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert!(
        !answer.starts_with(b"HTTP/") && !answer.windows(3).any(|w| w == b"ok\n"),
        "plain HTTP on the admin listener answered {:?}",
        String::from_utf8_lossy(&answer)
    );

    // One certificate for both listeners: a reload reaches the admin listener too.
    pki.point_live(&second);
    hangup(&gw);
    assert!(
        wait_served(gw.port(), &pki.ca_der, &second.der, RELOAD_WAIT).await,
        "the S3 listener kept the first certificate\n{}",
        gw.log_tail(40)
    );
    assert!(
        wait_served(admin, &pki.ca_der, &second.der, RELOAD_WAIT).await,
        "the admin listener kept the first certificate\n{}",
        gw.log_tail(40)
    );
}

/// Bound on one `gateway admin` run.
const ADMIN_CLI_TIMEOUT: Duration = Duration::from_secs(60);

/// How `gateway admin` is told what to trust.
#[derive(Clone, Copy, Debug)]
enum Trust<'a> {
    /// `--ca FILE`.
    Flag(&'a Path),
    /// `GATEWAY_ADMIN_CA=FILE`.
    Env(&'a Path),
    /// Neither.
    Nothing,
}

/// `gateway admin --endpoint ENDPOINT [--ca] pairs list` with the admin token in the
/// environment; `system`: the system's trusted CAs (`SSL_CERT_FILE`; None: the platform's
/// own store). Its success and output (stdout then stderr).
fn admin_pairs_list(
    gw: &Gateway,
    endpoint: &str,
    trust: Trust<'_>,
    system: Option<&Path>,
) -> (bool, String) {
    let mut cmd = Command::new(e2e::gateway_bin());
    cmd.args(["admin", "--endpoint", endpoint]);
    for var in ["GATEWAY_ADMIN_CA", "SSL_CERT_FILE", "SSL_CERT_DIR"] {
        cmd.env_remove(var);
    }
    match trust {
        Trust::Flag(ca) => {
            cmd.arg("--ca").arg(ca);
        }
        Trust::Env(ca) => {
            cmd.env("GATEWAY_ADMIN_CA", ca);
        }
        Trust::Nothing => {}
    }
    if let Some(system) = system {
        cmd.env("SSL_CERT_FILE", system);
    }
    let child = cmd
        .args(["pairs", "list"])
        .env("GATEWAY_ADMIN_TOKEN", gw.admin_token())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    finish(child, ADMIN_CLI_TIMEOUT)
}

#[test]
fn gateway_admin_over_https_trusts_its_ca_only_and_names_an_untrusted_certificate() {
    let pki = Pki::new();
    let server = pki.server("a");
    let (gw, admin) = start_with_admin(&server.cert, &server.key, &[]);
    let ca = pki.ca_pem();
    let other_ca = Ca::new("another CA").write_cert(&pki.dir.path().join("other-ca.pem"));
    let s3_endpoint = format!("https://127.0.0.1:{}", gw.port());
    let admin_endpoint = format!("https://127.0.0.1:{admin}");

    // With the CA, on the S3 port and on the admin port: the single node's pair 0 listed.
    for endpoint in [&s3_endpoint, &admin_endpoint] {
        let (ok, out) = admin_pairs_list(&gw, endpoint, Trust::Flag(&ca), None);
        assert!(
            ok && out.starts_with("PAIR") && out.contains("disk0"),
            "gateway admin --endpoint {endpoint} --ca: {out}"
        );
    }
    let (ok, out) = admin_pairs_list(&gw, &admin_endpoint, Trust::Env(&ca), None);
    assert!(
        ok && out.contains("disk0"),
        "gateway admin with GATEWAY_ADMIN_CA: {out}"
    );

    // Another CA's file: refused on the certificate, named, even with the right CA among
    // the system's (those are not asked when --ca is given).
    for endpoint in [&s3_endpoint, &admin_endpoint] {
        let (ok, out) = admin_pairs_list(&gw, endpoint, Trust::Flag(&other_ca), Some(&ca));
        assert!(!ok, "served with another CA's --ca:\n{out}");
        assert!(
            out.contains("UnknownIssuer") && out.contains("not trusted") && !out.contains("disk0"),
            "another CA's --ca: the output does not name the untrusted certificate:\n{out}"
        );
    }

    // Without --ca the system's CAs are asked: the test CA among them is enough ...
    let (ok, out) = admin_pairs_list(&gw, &admin_endpoint, Trust::Nothing, Some(&ca));
    assert!(
        ok && out.contains("disk0"),
        "without --ca, with the test CA as the system's: {out}"
    );
    // ... and another one is not.
    let (ok, out) = admin_pairs_list(&gw, &admin_endpoint, Trust::Nothing, Some(&other_ca));
    assert!(!ok, "served without --ca:\n{out}");
    assert!(
        out.contains("UnknownIssuer") && out.contains("--ca FILE") && !out.contains("disk0"),
        "without --ca: the output does not name the untrusted certificate:\n{out}"
    );
    // The platform's own store (or none, on a machine without one) does not know the test
    // CA either.
    let (ok, out) = admin_pairs_list(&gw, &s3_endpoint, Trust::Nothing, None);
    assert!(!ok, "served without --ca by the platform's CAs:\n{out}");
    assert!(
        (out.contains("UnknownIssuer") || out.contains("the system's trusted CAs cannot be read"))
            && out.contains("--ca FILE"),
        "without --ca, the platform's CAs: {out}"
    );

    // Plain HTTP to the TLS ports: nothing answers; --ca with an http:// endpoint is a
    // mistake said at once (the token would go in clear text).
    let plain = format!("http://127.0.0.1:{admin}");
    let (ok, out) = admin_pairs_list(&gw, &plain, Trust::Nothing, None);
    assert!(
        !ok && !out.contains("disk0"),
        "plain HTTP to the admin port: {out}"
    );
    let (ok, out) = admin_pairs_list(&gw, &plain, Trust::Flag(&ca), None);
    assert!(
        !ok && out.contains("is for an https:// endpoint"),
        "--ca with http://: {out}"
    );
    // A CA file that is not one: named by the flag.
    let (ok, out) = admin_pairs_list(&gw, &admin_endpoint, Trust::Flag(&server.key), None);
    assert!(
        !ok && out.contains(&format!("--ca {}", server.key.display())),
        "a key as --ca: {out}"
    );
}
