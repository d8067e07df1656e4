//! Harness for end-to-end tests. the real `gateway` binary, started on a temp data dir,
//! driven by the AWS Rust SDK and by hand-signed raw HTTP requests.
//!
//! The harness never builds anything: it runs `<workspace>/target/debug/gateway` (or
//! `$GATEWAY_BIN`) and panics with "build it first: cargo build -p gateway" if the binary
//! is missing. Every wait is bounded; every address is 127.0.0.1, unless a test places a
//! gateway elsewhere (see [`Placement`] and [`netns`]).
//!
//! A gateway's log is kept in memory and its tail printed when a test fails. Set
//! `E2E_STDERR_DIR` to a folder to have each gateway write its whole log (stderr) to a file
//! there instead, named after its data folder: for a failure whose cause scrolled out of
//! the tail (`RUST_LOG` chooses the level, as for the gateway).

pub mod cluster;
pub mod netns;
pub mod nginx;
pub mod pki;
pub mod ports;
pub mod prom;
pub mod remote;
pub mod torture;

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Debug;
use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use aws_sdk_s3::Client;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use rand::{Rng, RngExt, SeedableRng};
use sha1::Digest;

pub use aws_sdk_s3;

/// The region every client and hand-signed request uses.
pub const REGION: &str = "us-east-1";
/// How long the gateway may take to print its `listening on` line.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How many log lines (stdout and stderr) are kept for failure messages.
const LOG_LINES_KEPT: usize = 2000;
/// A folder to write every gateway's whole log to (see the module's documentation).
const STDERR_DIR_ENV: &str = "E2E_STDERR_DIR";
/// Timeouts of a raw request's socket.
const RAW_IO_TIMEOUT: Duration = Duration::from_secs(60);

/// The gateway binary under test: `$GATEWAY_BIN`, else `<workspace>/target/debug/gateway`,
/// else `gateway` beside the test executable's profile dir (a custom `CARGO_TARGET_DIR`).
pub fn gateway_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("GATEWAY_BIN") {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "GATEWAY_BIN={} is not a file: build it first: cargo build -p gateway",
            p.display()
        );
        return p;
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent");
    let default = workspace.join("target").join("debug").join("gateway");
    if default.is_file() {
        return default;
    }
    // target/<profile>/deps/<test exe> -> target/<profile>/gateway
    if let Some(beside) = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("gateway")))
        && beside.is_file()
    {
        return beside;
    }
    panic!(
        "build it first: cargo build -p gateway (no gateway binary at {})",
        default.display()
    );
}

/// A running (or killed) gateway process with its own data dir.
pub struct Gateway {
    bin: PathBuf,
    dir: DataDir,
    port: u16,
    /// Where the process runs and listens (see [`Placement`]), kept across restarts.
    place: Placement,
    access_key: String,
    secret_key: String,
    admin_token: String,
    child: Option<Child>,
    /// Whether the process was stopped with SIGSTOP (and not continued since).
    paused: bool,
    /// Names the process in failure messages (`gateway`, `node 2`).
    label: String,
    log: Arc<Mutex<KeptLog>>,
    /// Extra `serve` flags and environment, kept across restarts.
    extra_args: Vec<String>,
    extra_env: Vec<(String, String)>,
    /// Where stderr goes instead of the kept log (see [`GatewayOptions::stderr_file`]).
    stderr_file: Option<PathBuf>,
}

/// Where a gateway keeps its data.
enum DataDir {
    /// A fresh temp dir, removed when the harness drops the gateway.
    Temp(tempfile::TempDir),
    /// A folder the caller owns (and removes).
    Given(PathBuf),
}

impl DataDir {
    fn path(&self) -> &Path {
        match self {
            DataDir::Temp(t) => t.path(),
            DataDir::Given(p) => p,
        }
    }
}

/// How [`Gateway::start_opts`] starts a gateway; every field has a default (see each).
#[derive(Debug, Clone, Default)]
pub struct GatewayOptions {
    /// Data folder (created if missing, kept on drop); `None`: a fresh temp dir removed on
    /// drop.
    pub data_dir: Option<PathBuf>,
    /// Port of `--listen 127.0.0.1:PORT`, kept across restarts; 0: the OS picks one.
    pub port: u16,
    /// S3 credentials (`GATEWAY_ACCESS_KEY` / `GATEWAY_SECRET_KEY`); `None`: random.
    pub access_key: Option<String>,
    pub secret_key: Option<String>,
    /// `GATEWAY_ADMIN_TOKEN`; `None`: random.
    pub admin_token: Option<String>,
    /// Extra `serve` flags, after `--data` and `--listen`; kept across restarts.
    pub args: Vec<String>,
    /// Extra environment variables; kept across restarts.
    pub env: Vec<(String, String)>,
    /// Names the process in failure messages; `None`: `gateway`.
    pub label: Option<String>,
    /// Append the process's stderr to this file, as a service manager would, instead of a
    /// pipe read into the kept log (so failure messages then show stdout only); `None`: the
    /// pipe.
    pub stderr_file: Option<PathBuf>,
    /// The gateway binary; `None`: [`gateway_bin`].
    pub bin: Option<PathBuf>,
}

/// Where a gateway process runs on the network (see [`Gateway::start_placed`]): the address
/// of `--listen ADDR:PORT` and the network namespace the process is started in, both kept
/// across restarts. The default is 127.0.0.1 in the test's own namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The listen address, which clients (and peers) connect to.
    pub host: IpAddr,
    /// A named network namespace (`ip netns`): the process is started as
    /// `ip netns exec NS <gateway> serve ...`. `ip netns exec` execs the command, so the
    /// process id (for SIGKILL, SIGSTOP) is the gateway's own. `None`: this namespace.
    pub netns: Option<String>,
}

impl Default for Placement {
    fn default() -> Self {
        Placement {
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            netns: None,
        }
    }
}

impl Gateway {
    /// Starts a gateway on a fresh temp data dir, random credentials and admin token, and a
    /// port the OS chooses.
    pub fn start() -> Gateway {
        Self::start_with(&[], &[])
    }

    /// Like [`Gateway::start`], with extra `serve` flags (e.g. `--quarantine-secs 2`, or
    /// `--config FILE`) and environment variables, kept across restarts.
    pub fn start_with(args: &[&str], env: &[(&str, &str)]) -> Gateway {
        Self::start_opts(GatewayOptions {
            args: args.iter().map(|a| a.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..GatewayOptions::default()
        })
    }

    /// Starts a gateway as `opts` says and waits for its `listening on` line; panics (with
    /// its output) if it does not start.
    pub fn start_opts(opts: GatewayOptions) -> Gateway {
        Self::start_placed(opts, Placement::default())
    }

    /// Like [`Gateway::start_opts`], listening on `place.host` inside `place.netns` (and
    /// restarted there).
    pub fn start_placed(opts: GatewayOptions, place: Placement) -> Gateway {
        let bin = opts.bin.clone().unwrap_or_else(gateway_bin);
        let dir = match opts.data_dir {
            Some(path) => {
                fs::create_dir_all(&path)
                    .unwrap_or_else(|e| panic!("create data dir {}: {e}", path.display()));
                DataDir::Given(path)
            }
            None => DataDir::Temp(
                tempfile::Builder::new()
                    .prefix("e2e-gateway-")
                    .tempdir()
                    .expect("create temp data dir"),
            ),
        };
        let mut gw = Gateway {
            bin,
            dir,
            port: opts.port,
            place,
            access_key: opts
                .access_key
                .unwrap_or_else(|| format!("E2E{}", random_token(17).to_uppercase())),
            secret_key: opts.secret_key.unwrap_or_else(|| random_token(40)),
            admin_token: opts.admin_token.unwrap_or_else(|| random_token(32)),
            child: None,
            paused: false,
            label: opts.label.unwrap_or_else(|| "gateway".to_string()),
            log: Arc::new(Mutex::new(KeptLog::default())),
            extra_args: opts.args,
            extra_env: opts.env,
            stderr_file: opts.stderr_file,
        };
        match gw.spawn(gw.port) {
            Ok(port) => gw.port = port,
            Err(why) => panic!("{} did not start: {why}\n{}", gw.label, gw.log_tail(200)),
        }
        gw
    }

    /// Spawns the binary listening on `HOST:port` (inside the placement's namespace, if any)
    /// and waits for its `listening on` line.
    fn spawn(&mut self, port: u16) -> Result<u16, String> {
        if self.stderr_file.is_none()
            && let Some(d) = std::env::var_os(STDERR_DIR_ENV)
        {
            let name = self.dir.path().to_string_lossy().replace('/', "_");
            self.stderr_file = Some(std::path::PathBuf::from(d).join(name));
        }
        let stderr_to = match &self.stderr_file {
            Some(path) => Stdio::from(
                fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .unwrap_or_else(|e| panic!("open stderr file {}: {e}", path.display())),
            ),
            None => Stdio::piped(),
        };
        let mut command = match &self.place.netns {
            // `ip netns exec` enters the namespace and execs the binary: same pid.
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns.as_str()]).arg(&self.bin);
                c
            }
            None => Command::new(&self.bin),
        };
        let mut child = command
            .arg("serve")
            .arg("--data")
            .arg(self.dir.path())
            .arg("--listen")
            .arg(SocketAddr::new(self.place.host, port).to_string())
            .env("GATEWAY_ACCESS_KEY", &self.access_key)
            .env("GATEWAY_SECRET_KEY", &self.secret_key)
            .env("GATEWAY_ADMIN_TOKEN", &self.admin_token)
            .args(&self.extra_args)
            .envs(self.extra_env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr_to)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {:?}: {e}", command.get_program()));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel::<u16>();
        drain(stdout, "stdout", self.log.clone(), Some(tx));
        if let Some(stderr) = child.stderr.take() {
            drain(stderr, "stderr", self.log.clone(), None);
        }
        match rx.recv_timeout(STARTUP_TIMEOUT) {
            Ok(bound) => {
                if port != 0 && bound != port {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "asked for port {port}, it says it listens on {bound}"
                    ));
                }
                self.child = Some(child);
                Ok(bound)
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(format!(
                    "no 'listening on ADDR:PORT' line on stdout within {STARTUP_TIMEOUT:?}"
                ))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // stdout closed without the line: the process is exiting.
                let status = wait_bounded(&mut child, Duration::from_secs(10));
                Err(format!(
                    "exited before printing 'listening on' (status: {status})"
                ))
            }
        }
    }

    /// Kills the process with SIGKILL (no graceful shutdown; a paused process too) and
    /// reaps it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            // std's Child::kill sends SIGKILL on Unix.
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// Stops the process gracefully with SIGTERM (it stops serving and checkpoints every
    /// metadata replica it holds) and reaps it; SIGKILL if it has not exited within
    /// `limit`. Answers how it ended.
    pub fn stop(&mut self, limit: Duration) -> String {
        if self.child.is_none() {
            return "not running".into();
        }
        if self.paused {
            self.resume();
        }
        self.signal(libc::SIGTERM, "SIGTERM");
        let ended = self
            .child
            .as_mut()
            .map_or_else(String::new, |child| wait_bounded(child, limit));
        self.child = None;
        ended
    }

    /// The process id, while the process was started and not killed.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Freezes the process with SIGSTOP: it keeps its sockets (connections are accepted by
    /// the kernel and then hang) but runs nothing until [`Gateway::resume`].
    pub fn pause(&mut self) {
        self.signal(libc::SIGSTOP, "SIGSTOP");
        self.paused = true;
    }

    /// Continues a paused process with SIGCONT.
    pub fn resume(&mut self) {
        self.signal(libc::SIGCONT, "SIGCONT");
        self.paused = false;
    }

    fn signal(&self, signal: libc::c_int, name: &str) {
        let pid = self
            .pid()
            .unwrap_or_else(|| panic!("{}: {name} to a process that is not running", self.label));
        let pid = libc::pid_t::try_from(pid).expect("pid fits pid_t");
        // SAFETY: kill(2) with the pid of our own, not yet reaped, child.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(
            rc,
            0,
            "{}: {name} to pid {pid}: {}",
            self.label,
            io::Error::last_os_error()
        );
    }

    /// Whether the process is stopped with SIGSTOP.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Whether the harness started the process and has not killed it since (it may have
    /// exited on its own: see [`Gateway::is_running`]).
    pub fn is_started(&self) -> bool {
        self.child.is_some()
    }

    /// Deletes everything inside the data dir (the process must be killed first): the next
    /// [`Gateway::restart`] starts from an empty folder.
    pub fn wipe_data(&mut self) {
        assert!(
            self.child.is_none(),
            "{}: wipe_data while the process runs",
            self.label
        );
        let dir = self.dir.path().to_path_buf();
        let entries =
            fs::read_dir(&dir).unwrap_or_else(|e| panic!("read data dir {}: {e}", dir.display()));
        for e in entries {
            let e = e.expect("data dir entry");
            let path = e.path();
            let result = if e.file_type().is_ok_and(|t| t.is_dir()) {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
            result.unwrap_or_else(|err| panic!("remove {}: {err}", path.display()));
        }
    }

    /// The name failure messages give the process.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The gateway's address and credentials, detached from the process: cheap to clone
    /// and to move to client threads while the harness kills and restarts the process.
    pub fn remote(&self) -> Remote {
        Remote {
            host: self.place.host,
            port: self.port,
            access_key: self.access_key.clone(),
            secret_key: self.secret_key.clone(),
            admin_token: self.admin_token.clone(),
        }
    }

    /// Starts the binary again on the same data dir, port and credentials (killing it with
    /// SIGKILL first if it still runs). Make new clients afterwards: pooled connections of
    /// old clients point at the dead process.
    pub fn restart(&mut self) {
        self.kill9();
        self.respawn();
    }

    /// Restarts the process with the environment variable `name` set to `value` (None:
    /// removed) from now on, on the same data folder, port and flags: SIGKILL first if it
    /// still runs.
    pub fn restart_with_env(&mut self, name: &str, value: Option<&str>) {
        self.kill9();
        self.extra_env.retain(|(k, _)| k != name);
        if let Some(v) = value {
            self.extra_env.push((name.to_string(), v.to_string()));
        }
        self.respawn();
    }

    /// Restarts the process with another binary on the same data folder, port and flags
    /// (an upgrade or a downgrade): SIGKILL first if it still runs.
    pub fn restart_with_bin(&mut self, bin: PathBuf) {
        self.kill9();
        self.bin = bin;
        self.respawn();
    }

    fn respawn(&mut self) {
        // The port was just released; binding it again can transiently fail. Bounded retry.
        self.paused = false;
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.spawn(self.port) {
                Ok(_) => return,
                Err(why) if Instant::now() < deadline && attempt < 40 => {
                    self.push_log(format!("[harness] restart attempt {attempt} failed: {why}"));
                    thread::sleep(Duration::from_millis(250));
                }
                Err(why) => panic!(
                    "{} did not restart on port {} after {attempt} attempts: {why}\n{}",
                    self.label,
                    self.port,
                    self.log_tail(200)
                ),
            }
        }
    }

    /// Whether the process is running (not killed, not exited).
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.host())
    }

    /// Where the process runs and listens.
    pub fn placement(&self) -> &Placement {
        &self.place
    }

    pub fn access_key(&self) -> &str {
        &self.access_key
    }

    pub fn secret_key(&self) -> &str {
        &self.secret_key
    }

    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// `DATA/disk<N>`.
    pub fn disk_dir(&self, disk: usize) -> PathBuf {
        self.dir.path().join(format!("disk{disk}"))
    }

    /// An SDK client with the gateway's credentials: path-style, us-east-1, the SDK's
    /// default checksum behaviour, no retries (one call is one HTTP request).
    pub fn client(&self) -> Client {
        self.client_with(&self.access_key, &self.secret_key)
    }

    /// An SDK client with the given credentials.
    pub fn client_with(&self, access_key: &str, secret_key: &str) -> Client {
        let conf = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(self.endpoint())
            .region(Region::new(REGION))
            .credentials_provider(Credentials::new(
                access_key,
                secret_key,
                None,
                None,
                "e2e-static",
            ))
            .force_path_style(true)
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(10))
                    .operation_timeout(Duration::from_secs(180))
                    .build(),
            )
            .build();
        Client::from_conf(conf)
    }

    /// All content files on a disk: every regular file under `DATA/disk<N>` except those
    /// under `tmp/` and those with `.deleted.` in their name. Sorted.
    pub fn content_files(&self, disk: usize) -> Vec<PathBuf> {
        let root = self.disk_dir(disk);
        let mut out = Vec::new();
        walk(&root, 0, &mut out);
        out.sort();
        out
    }

    /// Regular files under `DATA/disk<N>/tmp/`.
    pub fn temp_files(&self, disk: usize) -> Vec<PathBuf> {
        let tmp = self.disk_dir(disk).join("tmp");
        let mut out = Vec::new();
        if let Ok(entries) = fs::read_dir(&tmp) {
            for e in entries.flatten() {
                if e.file_type().map(|t| t.is_file()).unwrap_or(false) {
                    out.push(e.path());
                }
            }
        }
        out.sort();
        out
    }

    /// Where a content file lives: `DATA/disk<N>/<aa>/<bb>/<sha1hex>`.
    pub fn content_path(&self, disk: usize, sha1hex: &str) -> PathBuf {
        assert_eq!(sha1hex.len(), 40, "sha1 hex must be 40 chars: {sha1hex}");
        self.disk_dir(disk)
            .join(&sha1hex[0..2])
            .join(&sha1hex[2..4])
            .join(sha1hex)
    }

    /// `GET /_admin/files/<sha1hex>` with the admin token: `Some` on 200, `None` on 404,
    /// panics on anything else.
    pub fn admin_file(&self, sha1hex: &str) -> Option<AdminFile> {
        let token = format!("Bearer {}", self.admin_token);
        let resp = self
            .raw(
                "GET",
                &format!("/_admin/files/{sha1hex}"),
                &[("authorization", token.as_str())],
                b"",
            )
            .unwrap_or_else(|e| panic!("admin request failed: {e}\n{}", self.log_tail(50)));
        match resp.status {
            200 => Some(AdminFile::parse(&resp.text()).unwrap_or_else(|e| {
                panic!(
                    "admin answer is not the expected JSON ({e}): {}",
                    resp.text()
                )
            })),
            404 => None,
            s => panic!(
                "GET /_admin/files/{sha1hex}: unexpected status {s}: {}",
                resp.text()
            ),
        }
    }

    /// A raw HTTP/1.1 request to the gateway (no signing). `target` is the request target,
    /// already percent-encoded, e.g. `/bucket/key?x=y`.
    pub fn raw(
        &self,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<RawResponse> {
        let mut hs: Vec<(String, String)> = vec![("host".into(), self.host())];
        hs.extend(headers.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        raw_request_at(
            SocketAddr::new(self.place.host, self.port),
            method,
            target,
            &hs,
            body,
            RAW_IO_TIMEOUT,
        )
    }

    /// A request signed by hand with SigV4 (the gateway's credentials, now, the body's real
    /// SHA-256 as `x-amz-content-sha256`); the builder can change each of those.
    pub fn signed(&self, method: &str, target: &str) -> SignedRequest {
        let mut req = self.remote().signed(method, target);
        req.log = Some((self.log.clone(), self.label.clone()));
        req
    }

    /// `HOST:PORT`, as the `host` header and the endpoint name it.
    fn host(&self) -> String {
        SocketAddr::new(self.place.host, self.port).to_string()
    }

    fn push_log(&self, line: String) {
        push_line(&self.log, line);
    }

    /// The last `n` lines the gateway printed (stdout and stderr), for failure messages.
    pub fn log_tail(&self, n: usize) -> String {
        log_tail_of(&self.log, &self.label, n)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill9();
        if thread::panicking() {
            eprintln!(
                "{} ({}), data dir: {}\n{}",
                self.label,
                self.host(),
                self.dir.path().display(),
                self.log_tail(150)
            );
        }
    }
}

impl Gateway {
    /// The address of `--admin-listen`, from the `admin listening on ADDR` line printed
    /// before `listening on` (so known once the gateway started); None without the flag.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        log.tail.iter().rev().find_map(|line| {
            line.strip_prefix("[stdout] admin listening on ")?
                .parse()
                .ok()
        })
    }
}

/// A gateway's address, credentials and admin token without the process (see
/// [`Gateway::remote`]): `Send`, `Clone`, usable while the process is killed or restarted.
#[derive(Debug, Clone)]
pub struct Remote {
    /// The listen address (127.0.0.1 unless placed elsewhere, see [`Placement`]).
    pub host: IpAddr,
    pub port: u16,
    pub access_key: String,
    pub secret_key: String,
    pub admin_token: String,
}

impl Remote {
    /// `http://HOST:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// `HOST:PORT`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.host, self.port)
    }

    /// A SigV4-signed raw request, as [`Gateway::signed`].
    pub fn signed(&self, method: &str, target: &str) -> SignedRequest {
        SignedRequest {
            addr: self.addr(),
            log: None,
            method: method.to_string(),
            target: target.to_string(),
            headers: Vec::new(),
            body: Vec::new(),
            access_key: self.access_key.clone(),
            secret_key: self.secret_key.clone(),
            time: SystemTime::now(),
            claimed_payload: None,
            precomputed_payload: None,
            tampered_target: None,
            tampered_headers: Vec::new(),
            io_timeout: RAW_IO_TIMEOUT,
        }
    }

    /// An unsigned raw request (a `host` header is added) whose socket reads and writes
    /// time out after `io_timeout`.
    pub fn raw(
        &self,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        io_timeout: Duration,
    ) -> io::Result<RawResponse> {
        let mut hs: Vec<(String, String)> = vec![("host".into(), self.addr().to_string())];
        hs.extend(headers.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        raw_request_at(self.addr(), method, target, &hs, body, io_timeout)
    }

    /// `GET <path>` with `Authorization: Bearer <admin token>`.
    pub fn admin_get(&self, path: &str, io_timeout: Duration) -> io::Result<RawResponse> {
        let token = format!("Bearer {}", self.admin_token);
        self.raw(
            "GET",
            path,
            &[("authorization", token.as_str())],
            b"",
            io_timeout,
        )
    }
}

/// Reads lines of a child's pipe until EOF, keeping them in the log; the first
/// `listening on ADDR:PORT` line's port goes to `ready`.
fn drain<R: Read + Send + 'static>(
    pipe: R,
    tag: &'static str,
    log: Arc<Mutex<KeptLog>>,
    mut ready: Option<mpsc::Sender<u16>>,
) {
    thread::spawn(move || {
        let mut reader = BufReader::new(pipe);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let line = String::from_utf8_lossy(&buf);
            let line = line.trim_end_matches(['\r', '\n']);
            if let Some(port) = parse_listening(line)
                && let Some(tx) = ready.take()
            {
                let _ = tx.send(port);
            }
            push_line(&log, format!("[{tag}] {}", strip_ansi(line)));
        }
    });
}

/// Drops ANSI escape sequences (colored log output).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ ... final byte in @..~
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// How many of a process's first `ERROR` and panic lines (and the reasons of its 503s) are
/// kept apart from the tail: the first error is often the cause, and a failing node may
/// print thousands of lines after it.
const ERROR_LINES_KEPT: usize = 20;

/// A process's output as kept for failure messages: its last lines and its first errors.
#[derive(Default)]
struct KeptLog {
    tail: VecDeque<String>,
    first_errors: Vec<String>,
}

/// A number from the environment (a test's cycles or seed to replay), if set; panics on
/// one that is not a number.
pub fn env_number(name: &str) -> Option<u64> {
    std::env::var(name)
        .ok()
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name} is a number")))
}

/// The last `n` lines of a process's kept output, framed, for failure messages; its first
/// `ERROR` lines before them.
fn log_tail_of(log: &Mutex<KeptLog>, label: &str, n: usize) -> String {
    let log = log.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = String::new();
    if !log.first_errors.is_empty() {
        s.push_str(&format!("---- {label}: first ERROR lines ----\n"));
        for l in &log.first_errors {
            s.push_str(l);
            s.push('\n');
        }
    }
    let skip = log.tail.len().saturating_sub(n);
    s.push_str(&format!("---- {label} output (last lines) ----\n"));
    for l in log.tail.iter().skip(skip) {
        s.push_str(l);
        s.push('\n');
    }
    s.push_str(&format!("---- end of {label} output ----"));
    s
}

fn push_line(log: &Mutex<KeptLog>, line: String) {
    let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
    if log.first_errors.len() < ERROR_LINES_KEPT
        && (line.contains(" ERROR ")
            || line.contains("panicked at")
            // Why a request was answered 503.
            || line.contains("metadata unavailable"))
    {
        log.first_errors.push(line.clone());
    }
    if log.tail.len() >= LOG_LINES_KEPT {
        log.tail.pop_front();
    }
    log.tail.push_back(line);
}

/// `listening on ADDR:PORT` -> PORT.
fn parse_listening(line: &str) -> Option<u16> {
    let addr: SocketAddr = line.trim().strip_prefix("listening on ")?.parse().ok()?;
    Some(addr.port())
}

fn wait_bounded(child: &mut Child, limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.to_string(),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return "still running; killed".into();
            }
            Err(e) => return format!("wait failed: {e}"),
        }
    }
}

fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    if depth > 8 {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            if depth == 0 && e.file_name() == "tmp" {
                continue;
            }
            walk(&path, depth + 1, out);
        } else if ft.is_file() && !e.file_name().to_string_lossy().contains(".deleted.") {
            out.push(path);
        }
    }
}

/// A random lowercase alphanumeric token.
pub fn random_token(len: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..len)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// `len` pseudo-random bytes, the same for the same seed.
pub fn random_body(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut body = vec![0u8; len];
    rng.fill_bytes(&mut body);
    body
}

/// A seeded random body whose SHA-1 has `disk` (0 or 1) as its first bit, i.e. whose master
/// disk (read first) is `disk`. Returns (seed, body).
pub fn random_body_read_first_from(disk: usize, seed: u64, len: usize) -> (u64, Vec<u8>) {
    assert!(disk < 2);
    for s in seed..seed + 256 {
        let body = random_body(s, len);
        let first_bit = usize::from(sha1_bytes(&body)[0] >> 7);
        if first_bit == disk {
            return (s, body);
        }
    }
    unreachable!("256 seeds without a sha1 whose first bit is {disk}")
}

fn sha1_bytes(body: &[u8]) -> [u8; 20] {
    let d = sha1::Sha1::digest(body);
    let mut out = [0u8; 20];
    out.copy_from_slice(d.as_slice());
    out
}

/// Lowercase hex SHA-1 of a body: the content address.
pub fn sha1_hex(body: &[u8]) -> String {
    hex::encode(sha1_bytes(body))
}

/// `gateway fsck --data DATA` on a stopped gateway's data folder reports it clean (every
/// reference count exact, every copy there).
#[track_caller]
pub fn assert_fsck_clean(data: &Path) {
    let data = data.to_str().expect("utf-8 data dir");
    let run = cluster::run_gateway(&["fsck", "--data", data], &[]);
    assert_eq!(run.code, Some(0), "fsck should be clean:\n{run}");
    assert!(run.stdout.contains("fsck: clean"), "{run}");
}

/// Lowercase hex MD5 of a body (the ETag without its quotes).
pub fn md5_hex(body: &[u8]) -> String {
    hex::encode(md5::Md5::digest(body).as_slice())
}

/// The quoted ETag S3 gives a single-part upload of `body`.
pub fn etag_of(body: &[u8]) -> String {
    format!("\"{}\"", md5_hex(body))
}

/// Standard base64 with padding (Content-MD5, `x-amz-checksum-*` values).
pub fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The base64 `Content-MD5` of a body.
pub fn content_md5(body: &[u8]) -> String {
    base64_encode(md5::Md5::digest(body).as_slice())
}

/// Percent-encodes an object key for a path (everything but unreserved chars and `/`).
pub fn encode_key(key: &str) -> String {
    let mut s = String::with_capacity(key.len());
    for b in key.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                s.push(b as char)
            }
            _ => s.push_str(&format!("%{b:02X}")),
        }
    }
    s
}

/// The HTTP status and S3 error code of a failed SDK call; panics if the call succeeded or
/// failed without an HTTP response (a transport error, a timeout, a client-side error).
pub fn s3_error<T: Debug, E: ProvideErrorMetadata + Debug>(
    result: Result<T, SdkError<E, HttpResponse>>,
) -> (u16, String) {
    match result {
        Ok(v) => panic!("expected an S3 error response, the call succeeded: {v:?}"),
        Err(SdkError::ServiceError(ctx)) => {
            let status = ctx.raw().status().as_u16();
            let code = ctx.err().code().unwrap_or("").to_string();
            (status, code)
        }
        Err(other) => panic!("expected an S3 error response, got a non-service error: {other:?}"),
    }
}

/// The whole body of an object, through the SDK; panics on any error.
pub async fn get_bytes(client: &Client, bucket: &str, key: &str) -> Vec<u8> {
    let out = client
        .get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GetObject {bucket}/{key}: {e:?}"));
    out.body
        .collect()
        .await
        .unwrap_or_else(|e| panic!("GetObject {bucket}/{key}: reading the body: {e:?}"))
        .into_bytes()
        .to_vec()
}

/// PutObject of an in-memory body; panics on any error.
pub async fn put_bytes(client: &Client, bucket: &str, key: &str, body: &[u8]) {
    client
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(body.to_vec().into())
        .send()
        .await
        .unwrap_or_else(|e| panic!("PutObject {bucket}/{key} ({} bytes): {e:?}", body.len()));
}

/// CreateBucket; panics on any error.
pub async fn create_bucket(client: &Client, bucket: &str) {
    client
        .create_bucket()
        .bucket(bucket)
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateBucket {bucket}: {e:?}"));
}

/// Puts a CORS configuration of one rule on `bucket`.
pub async fn put_cors_rule(client: &Client, bucket: &str, rule: aws_sdk_s3::types::CorsRule) {
    let config = aws_sdk_s3::types::CorsConfiguration::builder()
        .cors_rules(rule)
        .build()
        .expect("CORS configuration");
    client
        .put_bucket_cors()
        .bucket(bucket)
        .cors_configuration(config)
        .send()
        .await
        .unwrap_or_else(|e| panic!("PutBucketCors {bucket}: {e:?}"));
}

/// The Chromium binary of the browser tests: `$CHROMIUM`, else `chromium`,
/// `chromium-browser` or `google-chrome` in PATH. None (the test then skips, saying so) when
/// there is none, but with `CI` set a missing browser fails the test (`.ci/run` installs
/// Debian's `chromium`).
pub fn chromium_or_skip() -> Option<PathBuf> {
    let found = match std::env::var_os("CHROMIUM") {
        Some(p) => Some(PathBuf::from(p)),
        None => std::env::var_os("PATH").and_then(|path| {
            ["chromium", "chromium-browser", "google-chrome"]
                .iter()
                .flat_map(|name| std::env::split_paths(&path).map(move |d| d.join(name)))
                .find(|p| p.is_file())
        }),
    };
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but no chromium was found (install Debian's chromium)"
        );
        eprintln!("SKIPPED: no chromium in PATH (set CHROMIUM=/path/to/chromium to run)");
    }
    found
}

/// Asserts two bodies are equal without printing megabytes on failure.
#[track_caller]
pub fn assert_same_body(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let first_diff = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "{what}: wrong bytes: got {} bytes (sha1 {}), want {} bytes (sha1 {}); first differing offset: {:?}",
            got.len(),
            sha1_hex(got),
            want.len(),
            sha1_hex(want),
            first_diff
        );
    }
}

/// What `GET /_admin/files/<sha1>` says about a content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminFile {
    pub sha1: String,
    /// "live" or "deleting".
    pub state: String,
    pub refs: Option<u64>,
    pub magic: Option<u64>,
    pub flags: Option<u64>,
    pub pair: Option<u64>,
    pub since: Option<u64>,
    /// Every field as text, as sent.
    pub fields: BTreeMap<String, String>,
}

impl AdminFile {
    /// Parses the flat JSON object the admin endpoint answers with.
    pub fn parse(text: &str) -> Result<AdminFile, String> {
        let fields = parse_flat_json(text)?;
        let num = |k: &str| -> Result<Option<u64>, String> {
            match fields.get(k) {
                None => Ok(None),
                Some(v) => v
                    .parse::<u64>()
                    .map(Some)
                    .map_err(|_| format!("field {k} is not an unsigned integer: {v}")),
            }
        };
        Ok(AdminFile {
            sha1: fields.get("sha1").cloned().ok_or("no sha1 field")?,
            state: fields.get("state").cloned().ok_or("no state field")?,
            refs: num("refs")?,
            magic: num("magic")?,
            flags: num("flags")?,
            pair: num("pair")?,
            since: num("since")?,
            fields,
        })
    }
}

/// A flat JSON object (string, number, bool and null values) as key -> text of the value.
pub fn parse_flat_json(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut chars = text.trim().chars().peekable();
    let mut out = BTreeMap::new();
    let skip_ws = |c: &mut std::iter::Peekable<std::str::Chars<'_>>| {
        while c.peek().is_some_and(|ch| ch.is_whitespace()) {
            c.next();
        }
    };
    fn string(c: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Result<String, String> {
        if c.next() != Some('"') {
            return Err("expected '\"'".into());
        }
        let mut s = String::new();
        loop {
            match c.next() {
                None => return Err("unterminated string".into()),
                Some('"') => return Ok(s),
                Some('\\') => match c.next() {
                    Some('n') => s.push('\n'),
                    Some('t') => s.push('\t'),
                    Some(other) => s.push(other),
                    None => return Err("unterminated escape".into()),
                },
                Some(ch) => s.push(ch),
            }
        }
    }
    if chars.next() != Some('{') {
        return Err("expected '{'".into());
    }
    skip_ws(&mut chars);
    if chars.peek() == Some(&'}') {
        return Ok(out);
    }
    // Bounded by the input length: every iteration consumes at least one char.
    loop {
        skip_ws(&mut chars);
        let key = string(&mut chars)?;
        skip_ws(&mut chars);
        if chars.next() != Some(':') {
            return Err(format!("expected ':' after {key}"));
        }
        skip_ws(&mut chars);
        let value = if chars.peek() == Some(&'"') {
            string(&mut chars)?
        } else {
            let mut v = String::new();
            while let Some(&ch) = chars.peek() {
                if ch == ',' || ch == '}' || ch.is_whitespace() {
                    break;
                }
                if ch == '{' || ch == '[' {
                    return Err(format!("nested value for {key}"));
                }
                v.push(ch);
                chars.next();
            }
            if v.is_empty() {
                return Err(format!("empty value for {key}"));
            }
            v
        };
        out.insert(key, value);
        skip_ws(&mut chars);
        match chars.next() {
            Some(',') => continue,
            Some('}') => return Ok(out),
            other => return Err(format!("expected ',' or '}}', got {other:?}")),
        }
    }
}

/// A raw HTTP response.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    /// Header names lowercased, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Whether the whole body arrived (all of Content-Length, or the last chunk).
    pub complete: bool,
    /// The I/O error that cut the body short, if any.
    pub body_error: Option<String>,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The `<Code>` of an S3 XML error body.
    pub fn error_code(&self) -> Option<String> {
        xml_element(&self.text(), "Code")
    }
}

/// The text of the first `<tag>…</tag>` in `xml`.
pub fn xml_element(xml: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = start + xml[start..].find(&close)?;
    Some(xml[start..end].to_string())
}

/// Sends one HTTP/1.1 request on a new connection (`connection: close`) to 127.0.0.1:port
/// and reads the response. An error before the status line is an `Err`; a body cut short
/// is a response with `complete == false`.
pub fn raw_request(
    port: u16,
    method: &str,
    target: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> io::Result<RawResponse> {
    raw_request_timeout(port, method, target, headers, body, RAW_IO_TIMEOUT)
}

/// [`raw_request`] whose connect, and each socket read and write, time out after
/// `io_timeout` (a frozen server makes it an `Err` within about that long).
pub fn raw_request_timeout(
    port: u16,
    method: &str,
    target: &str,
    headers: &[(String, String)],
    body: &[u8],
    io_timeout: Duration,
) -> io::Result<RawResponse> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    raw_request_at(addr, method, target, headers, body, io_timeout)
}

/// [`raw_request_timeout`] to any address (a gateway placed outside 127.0.0.1).
pub fn raw_request_at(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(String, String)],
    body: &[u8],
    io_timeout: Duration,
) -> io::Result<RawResponse> {
    let mut stream = TcpStream::connect_timeout(&addr, io_timeout.min(Duration::from_secs(10)))?;
    stream.set_read_timeout(Some(io_timeout))?;
    stream.set_write_timeout(Some(io_timeout))?;
    let mut head = format!("{method} {target} HTTP/1.1\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let has_len = headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-length"));
    if !has_len && (!body.is_empty() || method == "PUT" || method == "POST") {
        head.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    head.push_str("connection: close\r\n\r\n");
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    // The server may answer (and close) before reading the whole body: a write error is
    // not the end, the response may still be readable.
    let write_result = stream.write_all(&request).and_then(|_| stream.flush());

    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    if let Err(e) = reader.read_line(&mut status_line) {
        return Err(write_result.err().unwrap_or(e));
    }
    if status_line.is_empty() {
        return Err(write_result.err().unwrap_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before a status line",
            )
        }));
    }
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::other(format!("bad status line: {status_line:?}")))?;
    let mut resp_headers = Vec::new();
    for _ in 0..200 {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            resp_headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let mut resp = RawResponse {
        status,
        headers: resp_headers,
        body: Vec::new(),
        complete: true,
        body_error: None,
    };
    if method == "HEAD" || status == 204 || status == 304 || (100..200).contains(&status) {
        return Ok(resp);
    }
    let chunked = resp
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    let content_length = resp
        .header("content-length")
        .and_then(|v| v.parse::<u64>().ok());
    let result = if chunked {
        read_chunked(&mut reader, &mut resp.body)
    } else if let Some(n) = content_length {
        let r = (&mut reader).take(n).read_to_end(&mut resp.body);
        match r {
            Ok(_) if resp.body.len() as u64 == n => Ok(()),
            Ok(_) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("body has {} of {n} bytes", resp.body.len()),
            )),
            Err(e) => Err(e),
        }
    } else {
        reader.read_to_end(&mut resp.body).map(|_| ())
    };
    if let Err(e) = result {
        resp.complete = false;
        resp.body_error = Some(e.to_string());
    }
    Ok(resp)
}

fn read_chunked<R: BufRead>(reader: &mut R, out: &mut Vec<u8>) -> io::Result<()> {
    loop {
        let mut size_line = String::new();
        if reader.read_line(&mut size_line)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "eof before the last chunk",
            ));
        }
        let size_hex = size_line.trim().split(';').next().unwrap_or("");
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| io::Error::other(format!("bad chunk size line: {size_line:?}")))?;
        if size == 0 {
            // Trailers, then an empty line.
            for _ in 0..100 {
                let mut line = String::new();
                if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
                    break;
                }
            }
            return Ok(());
        }
        let before = out.len();
        reader.take(size as u64).read_to_end(out)?;
        if out.len() - before != size {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "eof inside a chunk",
            ));
        }
        let mut crlf = [0u8; 2];
        reader.read_exact(&mut crlf)?;
    }
}

/// A SigV4-signed raw request being built; see [`Gateway::signed`] and [`Remote::signed`].
pub struct SignedRequest {
    addr: SocketAddr,
    /// The gateway's output and label, for the panic message of [`SignedRequest::send`].
    log: Option<(Arc<Mutex<KeptLog>>, String)>,
    io_timeout: Duration,
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    access_key: String,
    secret_key: String,
    time: SystemTime,
    claimed_payload: Option<Vec<u8>>,
    precomputed_payload: Option<String>,
    tampered_target: Option<String>,
    tampered_headers: Vec<(String, String)>,
}

impl SignedRequest {
    /// Adds a header that is sent and signed. A `host` header replaces the default
    /// `HOST:PORT` (a virtual-hosted-style Host); the connection still goes to the
    /// gateway's address.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers
            .push((name.to_ascii_lowercase(), value.to_string()));
        self
    }

    /// The body sent.
    pub fn body(mut self, body: &[u8]) -> Self {
        self.body = body.to_vec();
        self
    }

    /// Signs with these credentials instead of the gateway's.
    pub fn credentials(mut self, access_key: &str, secret_key: &str) -> Self {
        self.access_key = access_key.to_string();
        self.secret_key = secret_key.to_string();
        self
    }

    /// Signs as of this time instead of now.
    pub fn time(mut self, time: SystemTime) -> Self {
        self.time = time;
        self
    }

    /// Puts the SHA-256 of `payload` (not of the body sent) in `x-amz-content-sha256`.
    pub fn claim_payload(mut self, payload: &[u8]) -> Self {
        self.claimed_payload = Some(payload.to_vec());
        self
    }

    /// Puts this literal value in `x-amz-content-sha256` (and signs with it), e.g.
    /// `UNSIGNED-PAYLOAD` or `STREAMING-UNSIGNED-PAYLOAD-TRAILER`.
    pub fn payload_hash(mut self, value: &str) -> Self {
        self.precomputed_payload = Some(value.to_string());
        self
    }

    /// After signing, sends this request target instead of the signed one.
    pub fn tamper_target(mut self, target: &str) -> Self {
        self.tampered_target = Some(target.to_string());
        self
    }

    /// After signing, replaces the value of a signed header (or adds the header).
    pub fn tamper_header(mut self, name: &str, value: &str) -> Self {
        self.tampered_headers
            .push((name.to_ascii_lowercase(), value.to_string()));
        self
    }

    /// Connect, and each socket read and write, time out after this (default 60 s).
    pub fn timeout(mut self, io_timeout: Duration) -> Self {
        self.io_timeout = io_timeout;
        self
    }

    /// Signs and sends; panics if no status line comes back.
    pub fn send(self) -> RawResponse {
        let what = format!("{} {}", self.method, self.target);
        let log = self.log.clone();
        self.try_send().unwrap_or_else(|e| {
            let tail = log.map_or_else(String::new, |(log, label)| log_tail_of(&log, &label, 50));
            panic!("{what}: no HTTP response: {e}\n{tail}")
        })
    }

    /// Signs and sends; an `Err` when no status line comes back (refused connection,
    /// timeout, connection closed).
    pub fn try_send(self) -> io::Result<RawResponse> {
        let host = self
            .headers
            .iter()
            .find(|(k, _)| k == "host")
            .map_or_else(|| self.addr.to_string(), |(_, v)| v.clone());
        let uri = format!("http://{host}{}", self.target);
        let mut headers = vec![("host".to_string(), host)];
        headers.extend(self.headers.iter().filter(|(k, _)| k != "host").cloned());

        let identity: Identity =
            Credentials::new(&self.access_key, &self.secret_key, None, None, "e2e-raw").into();
        let mut settings = SigningSettings::default();
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        // S3 signs the path as sent: single encoding, no normalization.
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(REGION)
            .name("s3")
            .time(self.time)
            .settings(settings)
            .build()
            .expect("signing params")
            .into();
        let claimed = self.claimed_payload.as_deref().unwrap_or(&self.body);
        let signable_body = match &self.precomputed_payload {
            Some(v) => SignableBody::Precomputed(v.clone()),
            None => SignableBody::Bytes(claimed),
        };
        let signable = SignableRequest::new(
            &self.method,
            uri.as_str(),
            headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            signable_body,
        )
        .expect("signable request");
        let (instructions, _signature) = sign(signable, &params).expect("sign").into_parts();
        for (k, v) in instructions.headers() {
            headers.push((k.to_string(), v.to_string()));
        }
        for (name, value) in &self.tampered_headers {
            headers.retain(|(k, _)| k != name);
            headers.push((name.clone(), value.clone()));
        }
        let target = self.tampered_target.as_deref().unwrap_or(&self.target);
        raw_request_at(
            self.addr,
            &self.method,
            target,
            &headers,
            &self.body,
            self.io_timeout,
        )
    }
}

/// Polls `cond` every 50 ms until it holds or `limit` passes; returns whether it held.
pub fn poll_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Content files under any disk folder (a pair added by hand, an nginx disk folder), as
/// [`Gateway::content_files`] finds them under `DATA/disk<N>`: not under `tmp/`, not
/// quarantined. Sorted.
pub fn content_files_under(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    walk(root, 0, &mut out);
    out.sort();
    out
}

/// Every regular file anywhere under `root` (temp folders, nginx's body temp). Sorted.
pub fn all_files_under(root: &Path) -> Vec<PathBuf> {
    fn go(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() && depth < 8 => go(&e.path(), depth + 1, out),
                Ok(t) if t.is_file() => out.push(e.path()),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    go(root, 0, &mut out);
    out.sort();
    out
}

/// CRC-32 (IEEE, as zlib and the gateway compute it) of a body.
pub fn crc32(data: &[u8]) -> u32 {
    let mut table = [0u32; 256];
    for (i, slot) in table.iter_mut().enumerate() {
        let mut c = i as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
        *slot = c;
    }
    let mut crc = !0u32;
    for &b in data {
        crc = table[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// A TOML config file for `serve --config`, kept as long as the value lives (restarts
/// read it again, so a test may rewrite it between runs).
pub struct ConfigFile {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl ConfigFile {
    pub fn new(toml: &str) -> ConfigFile {
        let dir = tempfile::Builder::new()
            .prefix("e2e-conf-")
            .tempdir()
            .expect("temp dir for the config");
        let path = dir.path().join("gateway.toml");
        std::fs::write(&path, toml).expect("write config");
        ConfigFile { _dir: dir, path }
    }

    pub fn rewrite(&self, toml: &str) {
        std::fs::write(&self.path, toml).expect("rewrite config");
    }

    pub fn arg(&self) -> &str {
        self.path.to_str().expect("utf-8 temp path")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_admin_json() {
        let live = AdminFile::parse(
            r#"{"sha1":"aabb","state":"live","refs":2,"magic":123,"flags":0,"pair":1}"#,
        )
        .unwrap();
        assert_eq!(live.state, "live");
        assert_eq!(live.refs, Some(2));
        assert_eq!(live.magic, Some(123));
        assert_eq!(live.pair, Some(1));
        let deleting =
            AdminFile::parse(r#"{ "sha1": "aabb", "state": "deleting", "pair": 0, "since": 17 }"#)
                .unwrap();
        assert_eq!(deleting.state, "deleting");
        assert_eq!(deleting.refs, None);
        assert_eq!(deleting.since, Some(17));
        assert!(AdminFile::parse("not json").is_err());
    }

    #[test]
    fn parses_listening_line() {
        assert_eq!(parse_listening("listening on 127.0.0.1:4242"), Some(4242));
        assert_eq!(parse_listening("INFO listening on 127.0.0.1:4242"), None);
    }

    #[test]
    fn strips_ansi() {
        assert_eq!(
            strip_ansi("\u{1b}[2mtime\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m x"),
            "time  INFO x"
        );
    }

    #[test]
    fn base64_matches_rfc4648() {
        for (input, want) in [
            (&b""[..], ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
            (b"fooba", "Zm9vYmE="),
            (b"foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64_encode(input), want);
        }
        assert_eq!(content_md5(b""), "1B2M2Y8AsgTpgAmY7PhCfg==");
    }

    #[test]
    fn keys_are_encoded() {
        assert_eq!(encode_key("a b/c+d~é"), "a%20b/c%2Bd~%C3%A9");
    }

    #[test]
    fn bodies_are_seeded() {
        assert_eq!(random_body(7, 100), random_body(7, 100));
        assert_ne!(random_body(7, 100), random_body(8, 100));
        let (_, b) = random_body_read_first_from(0, 1, 64);
        assert_eq!(sha1_bytes(&b)[0] >> 7, 0);
        let (_, b) = random_body_read_first_from(1, 1, 64);
        assert_eq!(sha1_bytes(&b)[0] >> 7, 1);
    }
}
