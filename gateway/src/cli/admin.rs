//! The client side of the admin API, behind `gateway admin ...`.
//!
//! The endpoint is `http://HOST:PORT`, or `https://HOST:PORT` when the gateway serves TLS
//! (`--tls-cert`, on its S3 and admin listeners alike). Over HTTPS the gateway's
//! certificate is checked against `--ca FILE` (`GATEWAY_ADMIN_CA`) only, and against the
//! system's trusted CAs only when no `--ca` is given: a gateway certificate of a private CA
//! is not vouched for by a public one, and the other way round. HTTP/1.1 only (no ALPN).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::progress::{Display, Item, drain_items, scrub_items};
use bytes::Bytes;
use http::{Method, Request, Uri, header};
use http_body_util::{BodyExt as _, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use placement::disk::{StorageTls, StorageTlsError};

/// Whole-request bound for an admin call.
const REQUEST_TIMEOUT_SECS: u64 = 30;
/// Environment variable of `--ca`.
pub const ADMIN_CA_ENV: &str = "GATEWAY_ADMIN_CA";

#[derive(Clone, Debug, clap::Subcommand)]
pub enum PairsCommand {
    /// Every pair with its flags and the fill of each disk.
    List,
    /// Add a writable pair of two disks (`local:/abs/path` or a WebDAV URL).
    Add { disk0: String, disk1: String },
    /// Stop new writes to a pair.
    Lock { id: u32 },
    /// Allow new writes again.
    Unlock { id: u32 },
    /// Mark a pair read-only (a disk failed).
    ReadOnly { id: u32 },
    /// Clear the read-only flag.
    ReadWrite { id: u32 },
}

/// Why `gateway admin` cannot set up its client; each names the flag or file at fault.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("--endpoint {0:?}: only http://HOST:PORT or https://HOST:PORT is supported")]
    Url(String),
    #[error(
        "--ca {ca} is for an https:// endpoint, and {endpoint} is plain HTTP (the admin token \
         would travel in clear text)"
    )]
    CaWithoutTls { ca: PathBuf, endpoint: String },
    #[error("--ca {path}: {source}")]
    CaRead {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--ca {path}: larger than {max} bytes, not a PEM CA bundle", max = placement::disk::tls::PEM_FILE_BYTES_MAX)]
    CaTooLarge { path: PathBuf },
    #[error("--ca {path}: {message}")]
    CaPem { path: PathBuf, message: String },
    #[error(
        "{endpoint}: no --ca given, and the system's trusted CAs cannot be read ({why}): give \
         the CA bundle the gateway's certificate chains to with --ca FILE"
    )]
    NoSystemRoots { endpoint: String, why: String },
    #[error("TLS client setup: {0}")]
    Setup(String),
}

impl EndpointError {
    /// The CA file's error, named by the admin client's flag (the loader is the storage
    /// nodes' and says "storage CA").
    fn of_ca(e: StorageTlsError) -> Self {
        match e {
            StorageTlsError::Read { path, source, .. } => EndpointError::CaRead { path, source },
            StorageTlsError::TooLarge { path, .. } => EndpointError::CaTooLarge { path },
            StorageTlsError::Pem { path, message, .. } => EndpointError::CaPem { path, message },
            other => EndpointError::Setup(other.to_string()),
        }
    }
}

/// What the gateway's certificate is checked against.
#[derive(Debug)]
enum Trust {
    /// `http://`: no TLS.
    Plain,
    /// `--ca FILE`: its certificates only.
    Ca(PathBuf),
    /// No `--ca`: the system's trusted CAs.
    System,
}

enum Connector {
    Plain(Client<HttpConnector, Full<Bytes>>),
    Tls(Client<HttpsConnector<HttpConnector>, Full<Bytes>>),
}

pub struct AdminClient {
    base: String,
    token: Option<String>,
    client: Connector,
    trust: Trust,
}

impl AdminClient {
    /// A client of the gateway at `endpoint` (`http://` or `https://`); `ca`: the PEM CA
    /// bundle an `https://` gateway's certificate is checked against (None: the system's).
    pub fn new(
        endpoint: &str,
        ca: Option<&Path>,
        token: Option<String>,
    ) -> Result<Self, EndpointError> {
        let base = endpoint.trim_end_matches('/').to_string();
        let uri: Uri = base
            .parse()
            .map_err(|_| EndpointError::Url(endpoint.to_string()))?;
        if uri.authority().is_none() {
            return Err(EndpointError::Url(endpoint.to_string()));
        }
        let builder = Client::builder(TokioExecutor::new());
        let (client, trust) = match (uri.scheme_str(), ca) {
            (Some("http"), None) => (Connector::Plain(builder.build_http()), Trust::Plain),
            (Some("http"), Some(ca)) => {
                return Err(EndpointError::CaWithoutTls {
                    ca: ca.to_path_buf(),
                    endpoint: base,
                });
            }
            (Some("https"), ca) => {
                let (config, trust) = match ca {
                    Some(ca) => {
                        let tls = StorageTls::from_files(ca, None).map_err(EndpointError::of_ca)?;
                        (tls.client_config().clone(), Trust::Ca(ca.to_path_buf()))
                    }
                    None => (system_client_config(&base)?, Trust::System),
                };
                let mut http = HttpConnector::new();
                // The TCP connector under TLS sees `https://` URIs.
                http.enforce_http(false);
                let mut https = HttpsConnector::from((http, Arc::new(config)));
                https.enforce_https();
                (Connector::Tls(builder.build(https)), trust)
            }
            _ => return Err(EndpointError::Url(endpoint.to_string())),
        };
        Ok(AdminClient {
            base,
            token,
            client,
            trust,
        })
    }

    /// Sends a request to `path` with the token, if any (JSON when it has a body).
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<http::Response<hyper::body::Incoming>, String> {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        if body.is_some() {
            req = req.header(header::CONTENT_TYPE, "application/json");
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| e.to_string())?;
        match &self.client {
            Connector::Plain(client) => client.request(req).await,
            Connector::Tls(client) => client.request(req).await,
        }
        .map_err(|e| self.exchange_error(&e))
    }

    /// A failed exchange in words: every cause (hyper's "client error (Connect)" alone
    /// hides a refused connection or a certificate that does not verify), and, for a
    /// certificate that does not verify, what it was checked against.
    fn exchange_error(&self, e: &hyper_util::client::legacy::Error) -> String {
        let mut text = format!("{}: {e}", self.base);
        let mut untrusted = false;
        let mut source = std::error::Error::source(e);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            untrusted |= matches!(
                rustls_error(cause),
                Some(rustls::Error::InvalidCertificate(_))
            );
            source = cause.source();
        }
        if untrusted {
            text.push_str(&match &self.trust {
                Trust::Ca(ca) => format!(
                    " (the gateway's certificate is not trusted: it does not verify against --ca {})",
                    ca.display()
                ),
                Trust::System | Trust::Plain => " (the gateway's certificate is not trusted by \
                     the system's CAs: give the CA it chains to with --ca FILE)"
                    .to_string(),
            });
        }
        text
    }

    /// One admin call and its JSON answer; an error status is an error with the answer's
    /// `error` field.
    pub(crate) async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<serde_json::Value, String> {
        let call = async {
            let resp = self.send(method, path, body).await?;
            let status = resp.status();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            let value: serde_json::Value = serde_json::from_slice(&bytes)
                .map_err(|_| format!("{status}: {}", String::from_utf8_lossy(&bytes)))?;
            if status.is_success() {
                Ok(value)
            } else {
                let msg = value
                    .get("error")
                    .and_then(|e| e.as_str())
                    .unwrap_or("error");
                Err(format!("{status}: {msg}"))
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(REQUEST_TIMEOUT_SECS), call)
            .await
            .map_err(|_| format!("{}: no answer within {REQUEST_TIMEOUT_SECS} s", self.base))?
    }

    /// Runs a pairs command and returns the text to print.
    pub async fn pairs(&self, cmd: PairsCommand) -> Result<String, String> {
        let (path, body) = match &cmd {
            PairsCommand::List => {
                let v = self.call(Method::GET, "/_admin/pairs", None).await?;
                return Ok(render(items(&v, "pairs")));
            }
            PairsCommand::Add { disk0, disk1 } => (
                "/_admin/pairs".to_string(),
                Some(serde_json::json!({ "disks": [disk0, disk1] }).to_string()),
            ),
            PairsCommand::Lock { id } => (format!("/_admin/pairs/{id}/lock"), None),
            PairsCommand::Unlock { id } => (format!("/_admin/pairs/{id}/unlock"), None),
            PairsCommand::ReadOnly { id } => (format!("/_admin/pairs/{id}/read-only"), None),
            PairsCommand::ReadWrite { id } => (format!("/_admin/pairs/{id}/read-write"), None),
        };
        let v = self.call(Method::POST, &path, body).await?;
        Ok(render(&[v]))
    }
}

/// The rustls error inside `e`, if it is one: it arrives wrapped in io::Errors (tokio-rustls
/// wraps it, and hyper-rustls wraps that again), whose `source` skips it.
fn rustls_error<'a>(mut e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    loop {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        e = e.downcast_ref::<std::io::Error>()?.get_ref()?;
    }
}

/// The TLS client of an `https://` endpoint without `--ca`: the system's trusted CAs
/// (rustls-native-certs: the platform store, or `SSL_CERT_FILE` / `SSL_CERT_DIR` when
/// set), TLS 1.2 and 1.3 with the aws-lc-rs provider as every TLS client of the process.
fn system_client_config(endpoint: &str) -> Result<rustls::ClientConfig, EndpointError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _unusable) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = if found.errors.is_empty() {
            "none found".to_string()
        } else {
            let errors: Vec<String> = found.errors.iter().map(|e| e.to_string()).collect();
            errors.join("; ")
        };
        return Err(EndpointError::NoSystemRoots {
            endpoint: endpoint.to_string(),
            why,
        });
    }
    // The provider is named, not taken from the process default, as in StorageTls.
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| EndpointError::Setup(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// A table: one line per disk, with its pair's id and flags on the first.
pub fn render(pairs: &[serde_json::Value]) -> String {
    let mut out = format!("{:<6} {:<28} {:<48} {}\n", "PAIR", "FLAGS", "DISK", "FILL");
    for p in pairs {
        let id = p.get("id").and_then(|v| v.as_u64()).unwrap_or_default();
        let flags: Vec<&str> = p
            .get("flags")
            .and_then(|f| f.as_array())
            .map(|a| a.iter().filter_map(|f| f.as_str()).collect())
            .unwrap_or_default();
        let flags = if flags.is_empty() {
            "-".to_string()
        } else {
            flags.join(",")
        };
        for i in 0..2 {
            let at = |field: &str| {
                p.get(field)
                    .and_then(|v| v.get(i))
                    .and_then(|v| v.as_u64())
                    .unwrap_or(0)
            };
            let disk = p
                .get("disks")
                .and_then(|d| d.get(i))
                .and_then(|d| d.as_str())
                .unwrap_or("?");
            let (free, cap) = (at("free_bytes"), at("capacity_bytes"));
            let fill = if cap == 0 {
                "unknown".to_string()
            } else {
                format!(
                    "{:.1} % used of {}",
                    100.0 * (cap - free.min(cap)) as f64 / cap as f64,
                    human_bytes(cap)
                )
            };
            let (id_col, flags_col) = if i == 0 {
                (id.to_string(), flags.clone())
            } else {
                (String::new(), String::new())
            };
            out.push_str(&format!("{id_col:<6} {flags_col:<28} {disk:<48} {fill}\n"));
        }
    }
    out
}

#[derive(Clone, Debug, clap::Subcommand)]
pub enum ScrubCommand {
    /// Each local disk's Valkyrie counters and the progress of its current scrub pass.
    Status(Watch),
}

/// `--watch`: follow the progress (bars with ETA on a terminal, plain lines otherwise).
#[derive(Clone, Copy, Debug, Default, clap::Args)]
pub struct Watch {
    /// Follow the progress until it ends (or --watch-max-secs)
    #[arg(long)]
    pub watch: bool,
    /// Seconds between two polls with --watch
    #[arg(long, default_value_t = 2)]
    pub interval_secs: u64,
    /// Longest time --watch follows, in seconds
    #[arg(long, default_value_t = 86_400)]
    pub watch_max_secs: u64,
}

#[derive(Clone, Debug, clap::Subcommand)]
pub enum DiskCommand {
    /// Declare a disk failed: its pair goes READ_ONLY and UNMOVE copies every file of the
    /// surviving disk to other pairs.
    Fail { disk: String },
    /// Progress of UNMOVE drains: files and bytes done / total, ETA.
    Status(Watch),
}

fn num(v: &serde_json::Value, field: &str) -> u64 {
    v.get(field).and_then(|x| x.as_u64()).unwrap_or(0)
}

/// The array `field` of an answer; none when the field is missing or not an array.
fn items<'a>(v: &'a serde_json::Value, field: &str) -> &'a [serde_json::Value] {
    v.get(field)
        .and_then(|x| x.as_array())
        .map_or(&[], |a| a.as_slice())
}

/// One line per drain: pair, files and bytes done of total, relocated/failed, ETA.
pub fn render_drains(drains: &[serde_json::Value]) -> String {
    let mut out = format!(
        "{:<6} {:>22} {:>28} {:>10} {:>8} {:>8} {:>10}\n",
        "PAIR", "FILES", "BYTES", "RELOCATED", "FAILED", "STATE", "ETA"
    );
    for d in drains {
        let eta = d
            .get("eta_secs")
            .and_then(|e| e.as_u64())
            .map_or("-".to_string(), |s| format!("{s} s"));
        let state = if d.get("finished").and_then(|f| f.as_bool()).unwrap_or(false) {
            "done"
        } else {
            "running"
        };
        out.push_str(&format!(
            "{:<6} {:>22} {:>28} {:>10} {:>8} {:>8} {:>10}\n",
            num(d, "pair"),
            format!("{} / {}", num(d, "files_done"), num(d, "files_total")),
            format!(
                "{} / {}",
                human_bytes(num(d, "bytes_done")),
                human_bytes(num(d, "bytes_total"))
            ),
            num(d, "files_relocated"),
            num(d, "files_failed"),
            state,
            eta
        ));
    }
    out
}

impl AdminClient {
    /// Polls `path` every `w.interval_secs` and shows what `items` makes of it, until
    /// `done` says so or `w.watch_max_secs` have passed.
    async fn watch(
        &self,
        w: Watch,
        path: &str,
        items: impl Fn(&serde_json::Value) -> Vec<Item>,
        done: impl Fn(&[Item], &[Item]) -> bool,
    ) -> Result<String, String> {
        let mut display = Display::for_stdout();
        let interval = std::time::Duration::from_secs(w.interval_secs.max(1));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(w.watch_max_secs);
        let mut first: Option<Vec<Item>> = None;
        loop {
            let v = self.call(Method::GET, path, None).await?;
            let now = items(&v);
            if first.is_none() && now.is_empty() {
                return Ok("nothing in progress\n".into());
            }
            display.update(&now);
            let start = first.get_or_insert_with(|| now.clone());
            if done(start, &now) || std::time::Instant::now() >= deadline {
                display.finish();
                return Ok(String::new());
            }
            tokio::time::sleep(interval).await;
        }
    }

    pub async fn scrub(&self, cmd: ScrubCommand) -> Result<String, String> {
        let ScrubCommand::Status(w) = cmd;
        if w.watch {
            let workers = |v: &serde_json::Value| scrub_items(items(v, "workers"));
            // Until every worker has finished the pass it was in when the watch began.
            let passes = |items: &[Item]| -> Vec<(String, String)> {
                items
                    .iter()
                    .map(|i| {
                        (
                            i.key.clone(),
                            i.note.split(',').next().unwrap_or("").to_owned(),
                        )
                    })
                    .collect()
            };
            return self
                .watch(w, "/_admin/scrub", workers, |start, now| {
                    let before = passes(start);
                    now.is_empty()
                        || passes(now)
                            .iter()
                            .all(|p| before.iter().any(|b| b.0 == p.0 && b.1 != p.1))
                })
                .await;
        }
        let v = self.call(Method::GET, "/_admin/scrub", None).await?;
        let mut out = format!(
            "{:<5} {:<40} {:>9} {:>12} {:>9} {:>11} {:>8} {:>6} {:>7} {:>7}\n",
            "PAIR",
            "DISK",
            "SCANNED",
            "VERIFIED",
            "REPAIRED",
            "QUARANTINED",
            "DELETED",
            "JUNK",
            "ERRORS",
            "PASSES"
        );
        for w in items(&v, "workers") {
            let m = w.get("metrics").cloned().unwrap_or_default();
            out.push_str(&format!(
                "{:<5} {:<40} {:>9} {:>12} {:>9} {:>11} {:>8} {:>6} {:>7} {:>7}\n",
                num(w, "pair"),
                w.get("disk").and_then(|d| d.as_str()).unwrap_or("?"),
                num(&m, "files_scanned"),
                human_bytes(num(&m, "bytes_verified")),
                num(&m, "repaired"),
                num(&m, "quarantined"),
                num(&m, "deleted"),
                num(&m, "junk_removed"),
                num(&m, "errors"),
                num(&m, "passes_done"),
            ));
        }
        Ok(out)
    }

    pub async fn disk(&self, cmd: DiskCommand) -> Result<String, String> {
        match cmd {
            DiskCommand::Fail { disk } => {
                let body = serde_json::json!({ "disk": disk }).to_string();
                let v = self
                    .call(Method::POST, "/_admin/disks/fail", Some(body))
                    .await?;
                Ok(format!("UNMOVE started\n{}", render_drains(&[v])))
            }
            DiskCommand::Status(w) if w.watch => {
                let drains = |v: &serde_json::Value| drain_items(items(v, "drains"));
                self.watch(w, "/_admin/unmove", drains, |_, now| {
                    now.iter().all(|d| d.finished)
                })
                .await
            }
            DiskCommand::Status(_) => {
                let v = self.call(Method::GET, "/_admin/unmove", None).await?;
                Ok(render_drains(items(&v, "drains")))
            }
        }
    }
}

#[derive(Clone, Debug, clap::Subcommand)]
pub enum GroupsCommand {
    /// The metadata groups (JSON, as `GET /_admin/groups`: version, and per group id,
    /// kind, leader, replicas, records, last_applied, lag and its intervals).
    List,
    /// Split FileDB group GROUP (0, root, owns every sha1 before any split) at AT (40 hex
    /// digits; default: the middle of its first interval): a new group on
    /// --replication-factor nodes takes the sha1s from AT on. With --index, or for an
    /// index group, split its first key interval at AT, `BUCKET/KEY` (default: where it
    /// halves the interval's objects). Answers once planned; root's leader moves the rows
    /// and commits the map (see `groups list`).
    Split {
        group: meta::groups::GroupId,
        at: Option<String>,
        /// Split the group's keys (root holds both sha1s and keys).
        #[arg(long)]
        index: bool,
    },
    /// Move group GROUP's replica from node FROM to node TO (a node of the cluster that
    /// holds none): TO catches up as a learner, becomes a voter, FROM leaves the group and
    /// drops its replica. Answers once planned; root's leader drives the move and commits
    /// the map (see `groups list`). Root's replicas are its voters (`cluster` commands).
    Move {
        group: meta::groups::GroupId,
        from: u64,
        to: u64,
    },
    /// Cancel the move under way (one planned to a node that died holds back every later
    /// change of the map): root's leader reverses its membership steps and drops the plan;
    /// the map stays as it was. A split runs to its commit and is not cancelled.
    Cancel,
    /// One pass of the audit: every content's FileDB references (count and magic sum)
    /// against those the S3 index and the native API name, across the groups; a
    /// difference is confirmed when a second read finds it again. FileDB counting fewer
    /// (danger) marks the record DO_NOT_DELETE unless --dry-run; counting more (a leak) is
    /// reported. JSON: clean, counts, findings, marked.
    Audit {
        /// Report only: mark nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

impl AdminClient {
    /// Runs a groups command and returns the JSON to print.
    pub async fn groups(&self, cmd: GroupsCommand) -> Result<String, String> {
        let v = match cmd {
            GroupsCommand::List => self.call(Method::GET, "/_admin/groups", None).await?,
            GroupsCommand::Split { group, at, index } => {
                let body = serde_json::json!({ "group": group, "at": at, "index": index });
                self.call(Method::POST, "/_admin/groups/split", Some(body.to_string()))
                    .await?
            }
            GroupsCommand::Move { group, from, to } => {
                let body = serde_json::json!({ "group": group, "from": from, "to": to });
                self.call(Method::POST, "/_admin/groups/move", Some(body.to_string()))
                    .await?
            }
            GroupsCommand::Cancel => {
                self.call(Method::POST, "/_admin/groups/cancel", None)
                    .await?
            }
            GroupsCommand::Audit { dry_run } => {
                let body = serde_json::json!({ "dry_run": dry_run });
                self.call(Method::POST, "/_admin/groups/audit", Some(body.to_string()))
                    .await?
            }
        };
        serde_json::to_string_pretty(&v)
            .map(|s| format!("{s}\n"))
            .map_err(|e| e.to_string())
    }
}

#[derive(Clone, Debug, clap::Subcommand)]
pub enum ClusterCommand {
    /// This node's view of the metadata group (JSON: node_id, leader, members, ...).
    Status,
    /// Add a node (started with `--node-id ID`, not listed in its own `--peers`) as a
    /// learner; returns once it has caught up.
    AddLearner {
        id: u64,
        /// The node's S3 listen address, HOST:PORT.
        addr: String,
    },
    /// Make a learner a voter.
    Promote { id: u64 },
    /// Remove a voter or learner from the cluster. A node holding replicas of metadata
    /// groups is answered `202` with `"leaving": true`: root's leader moves them to the
    /// other nodes, then removes it (`cluster status` lists it under `leaving` until then).
    Remove { id: u64 },
}

impl AdminClient {
    /// Runs a cluster command and returns the JSON to print.
    pub async fn cluster(&self, cmd: ClusterCommand) -> Result<String, String> {
        let v = match cmd {
            ClusterCommand::Status => self.call(Method::GET, "/_admin/cluster", None).await?,
            ClusterCommand::AddLearner { id, addr } => {
                let body = serde_json::json!({ "id": id, "addr": addr }).to_string();
                self.call(Method::POST, "/_admin/cluster/learners", Some(body))
                    .await?
            }
            ClusterCommand::Promote { id } => {
                self.call(Method::POST, &format!("/_admin/cluster/promote/{id}"), None)
                    .await?
            }
            ClusterCommand::Remove { id } => {
                self.call(Method::POST, &format!("/_admin/cluster/remove/{id}"), None)
                    .await?
            }
        };
        serde_json::to_string_pretty(&v)
            .map(|s| format!("{s}\n"))
            .map_err(|e| e.to_string())
    }

    /// Downloads a consistent metadata snapshot into `file` (written beside it, then
    /// renamed, so a failed download leaves no partial backup under the name); its size.
    pub async fn backup(&self, file: &std::path::Path) -> Result<u64, String> {
        use tokio::io::AsyncWriteExt as _;
        let resp = self.send(Method::GET, "/_admin/backup", None).await?;
        let status = resp.status();
        let mut body = resp.into_body();
        if !status.is_success() {
            let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
            return Err(format!("{status}: {}", String::from_utf8_lossy(&bytes)));
        }
        let tmp = file.with_extension("partial");
        let mut out = tokio::fs::File::create(&tmp)
            .await
            .map_err(|e| format!("{}: {e}", tmp.display()))?;
        let mut written = 0u64;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| e.to_string())?;
            if let Ok(data) = frame.into_data() {
                out.write_all(&data).await.map_err(|e| e.to_string())?;
                written += data.len() as u64;
            }
        }
        out.sync_all().await.map_err(|e| e.to_string())?;
        drop(out);
        gateway_snapshot_check(&tmp)?;
        tokio::fs::rename(&tmp, file)
            .await
            .map_err(|e| format!("{}: {e}", file.display()))?;
        Ok(written)
    }
}

/// A downloaded backup is checked end to end (CRC32) before it takes its name.
fn gateway_snapshot_check(path: &std::path::Path) -> Result<(), String> {
    meta::raft::snapshot::verify(path)
        .map(drop)
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[derive(Clone, Debug, clap::Subcommand)]
pub enum JobsCommand {
    /// Delete every object of BUCKET whose key starts with PREFIX (a whole mailbox), in
    /// the background; prints the new job.
    DeletePrefix { bucket: String, prefix: String },
    /// Every job kept, running and finished.
    List,
    /// One job; with --watch, follow it until it ends (a progress bar on a terminal).
    Status {
        id: u64,
        #[arg(long)]
        watch: bool,
    },
    /// Stop a running job after the chunk in progress.
    Cancel { id: u64 },
}

/// One line per job.
pub fn render_jobs(jobs: &[serde_json::Value]) -> String {
    let text = |j: &serde_json::Value, k: &str| {
        j.get(k).and_then(|v| v.as_str()).unwrap_or("-").to_string()
    };
    let mut out = format!(
        "{:<6} {:<10} {:<24} {:>10} {:>10}  {:<25} {:<25}\n",
        "ID", "STATE", "BUCKET/PREFIX", "DELETED", "REMAINING", "STARTED", "FINISHED"
    );
    for j in jobs {
        out.push_str(&format!(
            "{:<6} {:<10} {:<24} {:>10} {:>10}  {:<25} {:<25}\n",
            num(j, "id"),
            text(j, "state"),
            format!("{}/{}", text(j, "bucket"), text(j, "prefix")),
            num(j, "deleted"),
            num(j, "remaining"),
            text(j, "started"),
            text(j, "finished"),
        ));
        if let Some(e) = j.get("error").and_then(|e| e.as_str()) {
            out.push_str(&format!("       error: {e}\n"));
        }
    }
    out
}

/// Polls between two looks at a watched job.
const WATCH_POLL: std::time::Duration = std::time::Duration::from_secs(1);

impl AdminClient {
    /// Runs a jobs command and returns the text to print (`status --watch` prints its
    /// progress as it goes).
    pub async fn jobs(&self, cmd: JobsCommand) -> Result<String, String> {
        match cmd {
            JobsCommand::DeletePrefix { bucket, prefix } => {
                let body = serde_json::json!({
                    "op": "delete-prefix",
                    "bucket": bucket,
                    "prefix": prefix,
                })
                .to_string();
                let v = self.call(Method::POST, "/_admin/jobs", Some(body)).await?;
                Ok(render_jobs(&[v]))
            }
            JobsCommand::List => {
                let v = self.call(Method::GET, "/_admin/jobs", None).await?;
                Ok(render_jobs(items(&v, "jobs")))
            }
            JobsCommand::Status { id, watch: false } => {
                let v = self
                    .call(Method::GET, &format!("/_admin/jobs/{id}"), None)
                    .await?;
                Ok(render_jobs(&[v]))
            }
            JobsCommand::Status { id, watch: true } => self.watch_job(id).await,
            JobsCommand::Cancel { id } => {
                let v = self
                    .call(Method::POST, &format!("/_admin/jobs/{id}/cancel"), None)
                    .await?;
                Ok(render_jobs(&[v]))
            }
        }
    }

    /// Follows a job until it is no longer running: a bar with the deleted count and an
    /// ETA on a terminal, one plain line per poll otherwise (a log file or a pipe).
    async fn watch_job(&self, id: u64) -> Result<String, String> {
        self.watch_job_end(id).await.map(|v| render_jobs(&[v]))
    }

    /// [`Self::watch_job`], answering the job as it ended.
    pub(crate) async fn watch_job_end(&self, id: u64) -> Result<serde_json::Value, String> {
        use std::io::IsTerminal as _;
        let terminal = std::io::stderr().is_terminal();
        let mut bar: Option<indicatif::ProgressBar> = None;
        // Bounded by the job: it ends (done, cancelled, failed) or the call fails.
        loop {
            let v = self
                .call(Method::GET, &format!("/_admin/jobs/{id}"), None)
                .await?;
            let deleted = num(&v, "deleted");
            let total = deleted + num(&v, "remaining");
            let state = v
                .get("state")
                .and_then(|s| s.as_str())
                .unwrap_or("?")
                .to_string();
            if terminal {
                let b = bar.get_or_insert_with(|| {
                    let b = indicatif::ProgressBar::new(total);
                    if let Ok(style) = indicatif::ProgressStyle::with_template(
                        "job {prefix}: [{bar:40}] {pos}/{len} deleted, {per_sec}, ETA {eta}",
                    ) {
                        b.set_style(style.progress_chars("=> "));
                    }
                    b.set_prefix(id.to_string());
                    b
                });
                b.set_length(total.max(deleted));
                b.set_position(deleted);
            } else {
                eprintln!("job {id}: {state}, {deleted} deleted, {total} in all (estimate)");
            }
            if state != "running" {
                if let Some(b) = bar {
                    b.finish();
                }
                return Ok(v);
            }
            tokio::time::sleep(WATCH_POLL).await;
        }
    }
}
