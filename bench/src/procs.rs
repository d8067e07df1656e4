//! Starting and stopping the servers under test: the gateway binary and the peers
//! (garage, s3s-fs), each on 127.0.0.1 with its own fresh temp folder.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::rng::Rng;

/// How long a server may take to start listening.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A child server process, stopped (SIGTERM, then SIGKILL after 5 s) when dropped.
pub struct Server {
    pub name: String,
    child: Option<Child>,
    pub addr: SocketAddr,
    pub pid: u32,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
}

impl Server {
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        // SAFETY: plain kill(2) on the pid of a child we started and have not reaped.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
            // A paused process (`pause`) handles its SIGTERM only once it runs again.
            libc::kill(child.id() as libc::pid_t, libc::SIGCONT);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// `kill -9`: SIGKILL, then reaped. The process gets no chance to flush anything.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends SIGTERM without waiting (several servers then stop at once; `stop` reaps).
    pub fn terminate(&mut self) {
        if let Some(child) = &mut self.child
            && let Ok(None) = child.try_wait()
        {
            // SAFETY: plain kill(2) on the pid of a child we started and have not reaped.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
                libc::kill(child.id() as libc::pid_t, libc::SIGCONT);
            }
        }
    }

    /// `kill -STOP`: the process stops where it is (its sockets stay open, nothing answers)
    /// until [`Server::resume`]; as a hung or partitioned node looks to its peers.
    pub fn pause(&mut self) {
        self.signal(libc::SIGSTOP);
    }

    /// `kill -CONT`: a paused process runs again.
    pub fn resume(&mut self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&mut self, sig: libc::c_int) {
        if let Some(child) = &mut self.child
            && let Ok(None) = child.try_wait()
        {
            // SAFETY: plain kill(2) on the pid of a child we started and have not reaped.
            unsafe {
                libc::kill(child.id() as libc::pid_t, sig);
            }
        }
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        match &mut self.child {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Random credentials and tokens for one run.
#[derive(Clone, Debug)]
pub struct Secrets {
    pub access: String,
    pub secret: String,
    pub native: String,
    pub admin: String,
}

impl Secrets {
    pub fn random(rng: &mut Rng) -> Secrets {
        let mut hexs = |n: usize| hex::encode(rng.bytes(n));
        Secrets {
            access: format!("BENCH{}", hexs(8).to_uppercase()),
            secret: hexs(20),
            native: hexs(16),
            admin: hexs(16),
        }
    }
}

/// Starts `gateway serve --data DIR --listen 127.0.0.1:0` and waits for
/// `listening on 127.0.0.1:PORT` on its stdout.
pub fn start_gateway(bin: &Path, data: &Path, s: &Secrets, log: &Path) -> Result<Server, String> {
    spawn_gateway(&GatewayLaunch::single(bin, data, s, log))
}

/// How to start one `gateway serve` process: a single node, or a member of a group.
#[derive(Clone, Debug)]
pub struct GatewayLaunch {
    pub bin: PathBuf,
    pub data: PathBuf,
    /// `--listen`: `127.0.0.1:0` (a free port, read from its stdout) or a fixed port.
    pub listen: SocketAddr,
    /// Flags after `serve --data DIR --listen ADDR` (`--node-id`, `--peers`, `--config`).
    pub args: Vec<String>,
    pub secrets: Secrets,
    /// `GATEWAY_CLUSTER_SECRET`, for a member of a group.
    pub cluster_secret: Option<String>,
    /// Appended to, so that a restarted node keeps the log of its earlier runs.
    pub log: PathBuf,
    /// Bound on the wait for `listening on`.
    pub start_timeout: Duration,
}

impl GatewayLaunch {
    pub fn single(bin: &Path, data: &Path, s: &Secrets, log: &Path) -> GatewayLaunch {
        GatewayLaunch {
            bin: bin.to_path_buf(),
            data: data.to_path_buf(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            args: Vec::new(),
            secrets: s.clone(),
            cluster_secret: None,
            log: log.to_path_buf(),
            start_timeout: START_TIMEOUT,
        }
    }
}

/// Starts `gateway serve` as `launch` says and waits for `listening on 127.0.0.1:PORT` on
/// its stdout (at most `launch.start_timeout`).
pub fn spawn_gateway(launch: &GatewayLaunch) -> Result<Server, String> {
    let (bin, log, s) = (&launch.bin, &launch.log, &launch.secrets);
    let log_file = File::options()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let err_file = log_file
        .try_clone()
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let mut cmd = Command::new(bin);
    cmd.arg("serve")
        .arg("--data")
        .arg(&launch.data)
        .arg("--listen")
        .arg(launch.listen.to_string())
        .args(&launch.args)
        .env("GATEWAY_ACCESS_KEY", &s.access)
        .env("GATEWAY_SECRET_KEY", &s.secret)
        .env("GATEWAY_NATIVE_TOKEN", &s.native)
        .env("GATEWAY_ADMIN_TOKEN", &s.admin)
        .env_remove("GATEWAY_CLUSTER_SECRET");
    if let Some(secret) = &launch.cluster_secret {
        cmd.env("GATEWAY_CLUSTER_SECRET", secret);
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(err_file))
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let pid = child.id();
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| "gateway: no stdout pipe".to_string())?;
    let (tx, rx) = mpsc::channel::<SocketAddr>();
    // Drains stdout for the life of the process (a full pipe would block the server).
    std::thread::spawn(move || {
        let mut log_file = log_file;
        let mut tx = Some(tx);
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = writeln!(log_file, "{line}");
            if let Some(rest) = line.trim().strip_prefix("listening on ")
                && let Ok(addr) = rest.trim().parse::<SocketAddr>()
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(addr);
            }
        }
    });
    let mut server = Server {
        name: "gateway".into(),
        child: Some(child),
        addr: launch.listen,
        pid,
        log: log.to_path_buf(),
    };
    let timeout = launch.start_timeout;
    match rx.recv_timeout(timeout) {
        Ok(addr) if addr.ip().is_loopback() => {
            server.addr = addr;
            Ok(server)
        }
        Ok(addr) => Err(format!("gateway listens on {addr}, not on loopback")),
        Err(_) => {
            let alive = server.alive();
            server.stop();
            Err(format!(
                "gateway did not print `listening on ...` within {timeout:?} (process {}); log:\n{}",
                if alive { "still running" } else { "exited" },
                server.log_tail(30)
            ))
        }
    }
}

/// A free TCP port on 127.0.0.1 (bound, then released for the child to take).
pub fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind 127.0.0.1:0: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("local_addr: {e}"))
}

/// Waits until `addr` accepts TCP connections or the server exits.
fn wait_port(server: &mut Server, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&server.addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if !server.alive() {
            return Err(format!(
                "{} exited before listening on {}; log:\n{}",
                server.name,
                server.addr,
                server.log_tail(30)
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!(
        "{} did not listen on {} within {timeout:?}; log:\n{}",
        server.name,
        server.addr,
        server.log_tail(30)
    ))
}

/// An installed program: in `first` (`--peers-bin-dir`), else on PATH, else in cargo's bin
/// folder (where `cargo install` puts it).
pub fn find_binary_in(first: Option<&Path>, name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = first.map(Path::to_path_buf).into_iter().collect();
    if let Some(p) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&p));
    }
    if let Some(h) = std::env::var_os("CARGO_HOME") {
        dirs.push(PathBuf::from(h).join("bin"));
    }
    if let Some(h) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(h).join(".cargo/bin"));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    })
}

/// [`find_binary_in`] without a folder of its own.
pub fn find_binary(name: &str) -> Option<PathBuf> {
    find_binary_in(None, name)
}

/// Runs a short command to completion (at most `timeout`); returns its stdout, or an error
/// with its stderr.
fn run_cmd(cmd: &mut Command, timeout: Duration) -> Result<String, String> {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{what}: {e}"))?;
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what}: no answer within {timeout:?}"));
            }
            Err(e) => return Err(format!("{what}: {e}")),
        }
    };
    let read = |r: Option<&mut dyn std::io::Read>| {
        let mut s = String::new();
        if let Some(r) = r {
            let _ = r.read_to_string(&mut s);
        }
        s
    };
    let out = read(child.stdout.as_mut().map(|r| r as &mut dyn std::io::Read));
    let err = read(child.stderr.as_mut().map(|r| r as &mut dyn std::io::Read));
    if status.success() {
        Ok(out)
    } else {
        Err(format!("{what}: {status}: {}{}", err.trim(), out.trim()))
    }
}

/// Retries `f` every 250 ms until it succeeds or `timeout` passes.
fn retry<T>(timeout: Duration, mut f: impl FnMut() -> Result<T, String>) -> Result<T, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(250)),
        }
    }
}

/// A peer S3 server ready for the workloads: its bucket exists and the key may write it.
pub struct Peer {
    pub server: Server,
    pub access: String,
    pub secret: String,
    /// Whether the harness must create the bucket over S3 (garage's is made by its CLI).
    pub needs_create_bucket: bool,
    /// How it was configured, for the report.
    pub setup: String,
}

/// `s3s-fs --host 127.0.0.1 --port P --access-key AK --secret-key SK ROOT` (s3s-fs 0.14,
/// `cargo install s3s-fs@0.14.1 --features binary --locked`). Buckets are folders of ROOT.
pub fn start_s3s_fs(bin: &Path, dir: &Path, rng: &mut Rng) -> Result<Peer, String> {
    let root = dir.join("root");
    std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    let log = dir.join("s3s-fs.log");
    let port = free_port()?;
    let s = Secrets::random(rng);
    let out = File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let child = Command::new(bin)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--access-key", &s.access, "--secret-key", &s.secret])
        .arg(&root)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let mut server = Server {
        name: "s3s-fs".into(),
        pid: child.id(),
        child: Some(child),
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        log,
    };
    wait_port(&mut server, START_TIMEOUT)?;
    Ok(Peer {
        server,
        access: s.access,
        secret: s.secret,
        needs_create_bucket: true,
        setup: "s3s-fs: one copy, files under ROOT/bucket/key, no fsync".into(),
    })
}

/// A single-node garage v2 (`cargo install garage@2.5.0 --locked`), following its quick
/// start: a config file, `garage server`, a one-node layout, a key and a bucket made with
/// its CLI. Its own defaults, as a user runs it (lmdb, no fsync of data or metadata, zstd
/// level 1 compression), unless `fsync`: then `data_fsync` and `metadata_fsync` are on, the
/// durability the gateway always has (an extra, labelled row). It keeps ONE copy
/// (replication_factor = 1, a single node) where the gateway keeps two.
pub fn start_garage(
    bin: &Path,
    dir: &Path,
    bucket: &str,
    fsync: bool,
    rng: &mut Rng,
) -> Result<Peer, String> {
    let (rpc, s3, admin) = (free_port()?, free_port()?, free_port()?);
    let cfg = dir.join("garage.toml");
    let fsync_lines = if fsync {
        "metadata_fsync = true\ndata_fsync = true\n"
    } else {
        ""
    };
    let text = format!(
        r#"metadata_dir = "{meta}"
data_dir = "{data}"
replication_factor = 1
{fsync_lines}
rpc_bind_addr = "127.0.0.1:{rpc}"
rpc_public_addr = "127.0.0.1:{rpc}"
rpc_secret = "{secret}"

[s3_api]
s3_region = "us-east-1"
api_bind_addr = "127.0.0.1:{s3}"
root_domain = ".s3.garage.localhost"

[admin]
api_bind_addr = "127.0.0.1:{admin}"
admin_token = "{token}"
"#,
        meta = dir.join("meta").display(),
        data = dir.join("data").display(),
        secret = hex::encode(rng.bytes(32)),
        token = hex::encode(rng.bytes(24)),
    );
    write_private(&cfg, &text)?;
    let log = dir.join("garage.log");
    let out = File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let child = Command::new(bin)
        .arg("-c")
        .arg(&cfg)
        .arg("server")
        .env("RUST_LOG", "garage=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let mut server = Server {
        name: "garage".into(),
        pid: child.id(),
        child: Some(child),
        addr: SocketAddr::from(([127, 0, 0, 1], s3)),
        log,
    };
    wait_port(&mut server, START_TIMEOUT)?;
    let cli = |args: &[&str]| {
        run_cmd(
            Command::new(bin)
                .arg("-c")
                .arg(&cfg)
                .args(args)
                .env("RUST_LOG", "garage=warn"),
            Duration::from_secs(30),
        )
    };
    let t = Duration::from_secs(30);
    let id_line = retry(t, || cli(&["node", "id", "-q"]))?;
    let node_id = parse_node_id(&id_line)
        .ok_or_else(|| format!("garage node id: unexpected output {id_line:?}"))?;
    retry(t, || {
        cli(&["layout", "assign", "-z", "dc1", "-c", "10G", &node_id])
    })?;
    retry(t, || cli(&["layout", "apply", "--version", "1"]))?;
    let key_out = retry(t, || cli(&["key", "create", "bench-key"]))?;
    let (access, secret) = parse_key(&key_out)
        .ok_or_else(|| format!("garage key create: no key ID and secret in {key_out:?}"))?;
    retry(t, || cli(&["bucket", "create", bucket]))?;
    retry(t, || {
        cli(&[
            "bucket",
            "allow",
            "--read",
            "--write",
            "--owner",
            bucket,
            "--key",
            "bench-key",
        ])
    })?;
    Ok(Peer {
        server,
        access,
        secret,
        needs_create_bucket: false,
        setup: if fsync {
            "garage: one copy (replication_factor 1), its defaults but data_fsync + metadata_fsync on"
        } else {
            "garage: one copy (replication_factor 1), its defaults (lmdb, no fsync of data or metadata, zstd level 1 compression)"
        }
        .into(),
    })
}

/// The node id from `garage node id -q` (`<hex id>@<address>`).
fn parse_node_id(out: &str) -> Option<String> {
    out.lines()
        .filter_map(|l| l.trim().split('@').next())
        .find(|id| id.len() >= 16 && id.chars().all(|c| c.is_ascii_hexdigit()))
        .map(str::to_string)
}

/// Key ID and secret from `garage key create` (a table of `Name:  value` lines).
fn parse_key(out: &str) -> Option<(String, String)> {
    let field = |name: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(name))
            .and_then(|l| l.split_whitespace().last())
            .map(str::to_string)
    };
    let (id, secret) = (field("Key ID:")?, field("Secret key:")?);
    (id.starts_with("GK") && secret.len() >= 32 && secret.chars().all(|c| c.is_ascii_hexdigit()))
        .then_some((id, secret))
}

fn write_private(path: &Path, text: &str) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(text.as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_sh_and_not_nonsense() {
        assert!(find_binary("sh").is_some());
        assert!(find_binary("no-such-binary-for-bench").is_none());
    }

    #[test]
    fn the_peers_folder_comes_first() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().expect("tempdir");
        let sh = d.path().join("sh");
        std::fs::write(&sh, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&sh, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert_eq!(find_binary_in(Some(d.path()), "sh"), Some(sh));
        let not_exec = d.path().join("peer-x");
        std::fs::write(&not_exec, "").expect("write");
        assert_eq!(find_binary_in(Some(d.path()), "peer-x"), None);
    }

    #[test]
    fn run_cmd_reports_failure_and_timeout() {
        assert_eq!(
            run_cmd(
                Command::new("sh").args(["-c", "echo hi"]),
                Duration::from_secs(5)
            )
            .expect("echo"),
            "hi\n"
        );
        assert!(
            run_cmd(
                Command::new("sh").args(["-c", "exit 3"]),
                Duration::from_secs(5)
            )
            .is_err()
        );
        assert!(run_cmd(Command::new("sleep").arg("5"), Duration::from_millis(100)).is_err());
    }

    #[test]
    fn parses_garage_cli_output() {
        // Shapes from garage's quick start and its CLI source (format_table alignment).
        let key = "==== ACCESS KEY INFORMATION ====\nKey ID:              GK3515373e4c851ebaad366558\nKey name:            bench-key\nSecret key:          7d37d093435a41f2aab8f13c19ba067d9776c90215f56614adad6ece597dbb34\nCreated:             2025-01-01\n";
        assert_eq!(
            parse_key(key),
            Some((
                "GK3515373e4c851ebaad366558".to_string(),
                "7d37d093435a41f2aab8f13c19ba067d9776c90215f56614adad6ece597dbb34".to_string()
            ))
        );
        assert_eq!(parse_key("Secret key: (redacted)\nKey ID: GK1\n"), None);
        let id =
            "563e1ac825ee3323aa441e72c26d1030d6d4414aeb3dd25287c531e7fc2bc95d@127.0.0.1:3901\n";
        assert_eq!(
            parse_node_id(id).as_deref(),
            Some("563e1ac825ee3323aa441e72c26d1030d6d4414aeb3dd25287c531e7fc2bc95d")
        );
        assert_eq!(parse_node_id("error: no node key\n"), None);
    }

    #[test]
    fn missing_gateway_binary_is_a_clear_error() {
        let d = tempfile::tempdir().expect("tempdir");
        let s = Secrets::random(&mut Rng::new(1));
        let e = start_gateway(
            Path::new("/nonexistent/gateway"),
            d.path(),
            &s,
            &d.path().join("log"),
        )
        .err()
        .expect("must fail");
        assert!(e.contains("cannot start"), "{e}");
    }
}
