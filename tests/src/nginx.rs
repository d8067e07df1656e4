//! A real nginx with its `dav` module, as on a storage node, started for one test.
//!
//! [`Nginx::start`] writes its own `nginx.conf` into a fresh temp folder, listens on a free
//! port of 127.0.0.1 only, serves `<temp>/www/<disk>` for each disk name given, and waits
//! (bounded) until the port answers. Dropping it stops nginx (SIGTERM to its process group,
//! SIGKILL after a bound). When nginx is not installed the harness fails with the command
//! that installs it: tests that claim to run against nginx must not pass without it.
//!
//! [`Nginx::start_tls`] starts the same node on HTTPS, as a storage node on an untrusted
//! network: its server certificate, and client certificates required and checked against a
//! CA (`ssl_verify_client on`).

use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How to get nginx with the dav module (and dav-ext for PROPFIND) on Debian/Ubuntu.
pub const INSTALL_HINT: &str =
    "apt-get update && apt-get install -y nginx-full libnginx-mod-http-dav-ext";

/// Where the Debian packages put the dav-ext module; loaded only if present.
const DAV_EXT_MODULES: &[&str] = &[
    "/usr/lib/nginx/modules/ngx_http_dav_ext_module.so",
    "/usr/share/nginx/modules/ngx_http_dav_ext_module.so",
];

const READY_WAIT: Duration = Duration::from_secs(10);
const STOP_WAIT: Duration = Duration::from_secs(5);
const START_ATTEMPTS: usize = 5;

pub struct Nginx {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
    tls: Option<NodeTls>,
}

/// The TLS of a storage node: its certificate chain and key (PEM files), and the CA whose
/// client certificates it requires.
#[derive(Clone, Debug)]
pub struct NodeTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: PathBuf,
}

/// Finds the nginx binary: `explicit` (the `NGINX` environment variable), then
/// `/usr/sbin/nginx`, then `PATH`.
pub fn locate(explicit: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(path) = explicit {
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "NGINX={} is not a file. Install nginx with `{INSTALL_HINT}` or point NGINX at \
                 an nginx binary built with the dav module",
                path.display()
            ))
        };
    }
    let mut candidates = vec![PathBuf::from("/usr/sbin/nginx")];
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("nginx")));
    }
    candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| {
        format!(
            "nginx not found (looked at /usr/sbin/nginx and PATH). These tests run a real \
             nginx as the WebDAV storage node; install it with `{INSTALL_HINT}` (as root) or \
             set NGINX=/path/to/nginx"
        )
    })
}

/// The user nginx's workers run as when we are root (without a `user` line they would run
/// as `nobody`, who cannot write into our folders): www-data if it exists, else nobody.
fn worker_user() -> Option<(String, u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let passwd = fs::read_to_string("/etc/passwd").unwrap_or_default();
    for wanted in ["www-data", "nobody"] {
        for line in passwd.lines() {
            let f: Vec<&str> = line.split(':').collect();
            if f.len() > 3
                && f[0] == wanted
                && let (Ok(uid), Ok(gid)) = (f[2].parse(), f[3].parse())
            {
                return Some((wanted.to_string(), uid, gid));
            }
        }
    }
    panic!("running as root but neither www-data nor nobody exists for nginx's workers")
}

fn free_port() -> u16 {
    super::ports::free_port()
}

impl Nginx {
    /// Starts nginx serving one folder per name in `disks` (`<root>/<name>`, reachable at
    /// [`Nginx::url`]).
    pub fn start(disks: &[&str]) -> Nginx {
        Self::start_with(disks, None)
    }

    /// Like [`Nginx::start`], serving HTTPS only with `tls`: [`Nginx::url`] is then an
    /// `https://` URL, and a client without a certificate from `tls.client_ca` gets 400.
    pub fn start_tls(disks: &[&str], tls: NodeTls) -> Nginx {
        Self::start_with(disks, Some(tls))
    }

    fn start_with(disks: &[&str], tls: Option<NodeTls>) -> Nginx {
        let bin =
            locate(std::env::var_os("NGINX").map(PathBuf::from)).unwrap_or_else(|e| panic!("{e}"));
        let dir = tempfile::Builder::new()
            .prefix("placement-nginx-")
            .tempdir()
            .expect("temp dir");
        // The workers (www-data when we are root) must be able to walk into it.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
        let user = worker_user();
        let www = dir.path().join("www");
        let mut folders = vec![www.clone()];
        folders.extend(disks.iter().map(|d| www.join(d)));
        for f in &folders {
            fs::create_dir_all(f).expect("create disk folder");
            fs::set_permissions(f, fs::Permissions::from_mode(0o755)).expect("chmod");
            if let Some((_, uid, gid)) = &user {
                std::os::unix::fs::chown(f, Some(*uid), Some(*gid))
                    .expect("chown to the worker user");
            }
        }
        let mut nginx = Nginx {
            dir,
            port: 0,
            child: None,
            tls,
        };
        for _ in 0..START_ATTEMPTS {
            nginx.port = free_port();
            let conf = nginx.config(user.as_ref().map(|u| u.0.as_str()));
            let conf_path = nginx.dir.path().join("nginx.conf");
            fs::write(&conf_path, conf).expect("write nginx.conf");
            let _ = fs::remove_file(nginx.error_log_path());
            let stderr = fs::File::create(nginx.dir.path().join("stderr.log")).expect("stderr log");
            let child = Command::new(&bin)
                .arg("-p")
                .arg(nginx.dir.path())
                .arg("-c")
                .arg(&conf_path)
                .arg("-e")
                .arg(nginx.error_log_path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr)
                // Its own process group: stop() signals the master and its workers together.
                .process_group(0)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
            nginx.child = Some(child);
            match nginx.wait_ready() {
                Ok(()) => return nginx,
                Err(log) if log.contains("Address already in use") => {
                    nginx.stop();
                    continue;
                }
                Err(log) => {
                    nginx.stop();
                    panic!("nginx did not start:\n{log}");
                }
            }
        }
        panic!("nginx found no free port in {START_ATTEMPTS} attempts");
    }

    fn config(&self, user: Option<&str>) -> String {
        let d = self.dir.path().display();
        let module = DAV_EXT_MODULES
            .iter()
            .find(|p| Path::new(p).is_file())
            .copied();
        let load = module
            .map(|m| format!("load_module {m};\n"))
            .unwrap_or_default();
        let ext_methods = if module.is_some() {
            "            dav_ext_methods PROPFIND OPTIONS;\n"
        } else {
            ""
        };
        let user = user.map(|u| format!("user {u};\n")).unwrap_or_default();
        let (ssl, ssl_settings) = match &self.tls {
            None => ("", String::new()),
            Some(t) => (
                " ssl",
                format!(
                    "        ssl_certificate {};
        ssl_certificate_key {};
        ssl_client_certificate {};
        ssl_verify_client on;
",
                    t.cert.display(),
                    t.key.display(),
                    t.client_ca.display()
                ),
            ),
        };
        format!(
            "{load}{user}daemon off;
master_process on;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{
    worker_connections 256;
}}
http {{
    access_log {d}/access.log;
    default_type application/octet-stream;
    # Same filesystem as the root: a completed PUT and a MOVE are renames.
    client_body_temp_path {d}/body_temp;
    proxy_temp_path {d}/proxy_temp;
    fastcgi_temp_path {d}/fastcgi_temp;
    uwsgi_temp_path {d}/uwsgi_temp;
    scgi_temp_path {d}/scgi_temp;
    server {{
        listen 127.0.0.1:{port}{ssl};
{ssl_settings}        root {d}/www;
        location / {{
            dav_methods PUT DELETE MKCOL COPY MOVE;
{ext_methods}            create_full_put_path on;
            dav_access user:rw group:rw all:r;
            client_max_body_size 0;
            # Short, so that a test catches a PUT the gateway leaves idle (nginx: 60 s).
            client_body_timeout 5s;
        }}
    }}
}}
",
            port = self.port
        )
    }

    fn error_log_path(&self) -> PathBuf {
        self.dir.path().join("error.log")
    }

    /// nginx's error log (and stderr), for failure messages.
    pub fn logs(&self) -> String {
        let read = |name: &str| fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
        format!(
            "--- error.log\n{}--- stderr\n{}",
            read("error.log"),
            read("stderr.log")
        )
    }

    /// nginx's access log: one line per finished request, with its status.
    pub fn access_log(&self) -> String {
        fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default()
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let deadline = Instant::now() + READY_WAIT;
        loop {
            if let Some(child) = &mut self.child
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(format!("nginx exited with {status}\n{}", self.logs()));
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "port {} not answering after {READY_WAIT:?}\n{}",
                    self.port,
                    self.logs()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The base URL of a disk: `http://127.0.0.1:<port>/<disk>` (`https://` with TLS).
    pub fn url(&self, disk: &str) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}/{disk}", self.port)
    }

    /// The folder nginx serves a disk from, for checks and corruption behind its back.
    pub fn disk_dir(&self, disk: &str) -> PathBuf {
        self.dir.path().join("www").join(disk)
    }

    /// Where nginx keeps request bodies while they arrive.
    pub fn body_temp_dir(&self) -> PathBuf {
        self.dir.path().join("body_temp")
    }

    /// Stops nginx: SIGTERM to its process group (the master stops its workers), SIGKILL
    /// to the group if it is still there after a bound. Idempotent.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let Ok(group) = libc::pid_t::try_from(child.id()) else {
            let _ = child.kill();
            let _ = child.wait();
            return;
        };
        // SAFETY: signals our own child's process group (process_group(0) at spawn).
        unsafe { libc::kill(-group, libc::SIGTERM) };
        let deadline = Instant::now() + STOP_WAIT;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    // SAFETY: as above; the master is not reaped yet, so the group is ours.
                    unsafe { libc::kill(-group, libc::SIGKILL) };
                    let _ = child.wait();
                    break;
                }
            }
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.stop();
    }
}

#[test]
fn a_missing_nginx_says_how_to_install_it() {
    let err = locate(Some(PathBuf::from("/nonexistent/nginx"))).unwrap_err();
    assert!(err.contains("apt-get install -y nginx-full"), "{err}");
}
