//! A disk that is a folder on a WebDAV storage node: stock nginx with its `dav` module.
//!
//! Why nginx: this is how the article's storage tier works ("on machines that contain the
//! disks, we set up Nginx and use the WebDAV protocol"). A storage node runs no code of
//! ours on the data path, only a web server every operator already knows how to run, tune
//! and monitor; the gateway streams bodies to it and reads them back with plain HTTP.
//!
//! The layout is the one every backend shares (see [`super`]): content at
//! `<base>/<aa>/<bb>/<sha1 hex>`, uploads in flight at `<base>/tmp/<random 32 hex>`.
//!
//! Why PUT to a temp name and then `MOVE`: the content address is the SHA-1 of the body,
//! known only once the last byte has gone by, and a name under a content address must
//! never hold a partial or unverified file. So the body is streamed with one chunked `PUT`
//! to a random temp name (nginx itself writes the request body to `client_body_temp_path`
//! and renames it into place only once it is complete: an aborted PUT leaves nothing), and
//! [`WebDavTempFile::commit`] then sends `MOVE` with `Destination: <content URL>` and
//! `Overwrite: T`. On the node that is a `rename(2)` (configure `client_body_temp_path` on
//! the same filesystem as the disk): atomic, so the content name holds the whole file or
//! nothing. nginx's `MOVE` creates the missing `<aa>/<bb>` folders (`COPY` does not, and
//! would write the bytes twice). Two loaders racing on the same content each PUT their own
//! random temp name and both MOVE; the second overwrites the first with identical bytes,
//! exactly as in the article.
//!
//! What nginx does not give us: it does not fsync, so durability of a committed file rests
//! on the node's filesystem (mount options, battery-backed cache); and it cannot report
//! free space, so [`WebDavDisk::space`] returns the figure from [`WebDavConfig::space`] or
//! [`DiskError::SpaceUnknown`], which the caller treats as "keep the figure you have"
//! (PairDB's recorded free space).
//!
//! Every request is bounded ([`WebDavConfig`]): connecting, a whole request without a
//! streamed body (`HEAD`, `MOVE`, `DELETE`, a [`WebDavDisk::read_all`]), the wait for the
//! answer to a streamed request, and any stall of a streamed body. A streamed body of
//! unknown length has no whole-request bound on purpose: that would be a size limit in
//! disguise.
//!
//! `https://` disks speak TLS with the [`StorageTls`] of [`WebDavConfig::tls`]: the node's
//! certificate is checked against the configured CA only, and the client certificate (if
//! any) is presented. An `https://` disk without one is refused when it is opened, never
//! sent in the clear; a handshake that fails, and a node that refuses this client's
//! certificate (nginx answers `400` to a request without a certificate it accepts), are
//! [`DiskError::Remote`] errors naming the cause, like any other broken connection.
//! `http://` disks use a plain connector, as before TLS existed.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{HeaderMap, Method, Request, Response, StatusCode, Uri};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::timeout;

use super::error::DiskError;
use super::layout::{ByteStream, TMP_DIR};
use super::tls::StorageTls;
use crate::vocab::{DiskRef, Sha1};

/// Chunks in flight per upload between the writer and the PUT body, as for local disks:
/// with hyper's chunks of up to 1 MiB this bounds an upload's buffered bytes per disk.
const WRITE_QUEUE_DEPTH: usize = 4;

const OP_CREATE: &str = "create temp";
const OP_WRITE: &str = "write temp";
const OP_FINISH: &str = "finish temp";
const OP_MOVE: &str = "move temp to content address";
const OP_REMOVE: &str = "remove temp";
const OP_STAT: &str = "stat";
const OP_READ: &str = "read";
const OP_READ_RANGE: &str = "read range";
const OP_OPEN: &str = "open";

/// Bound on the error page read from a node that answered 400 over TLS, to tell a refused
/// client certificate from another bad request (nginx's pages are about 300 bytes).
const TLS_ERROR_PAGE_BYTES_MAX: usize = 4096;

/// Timeouts, TLS and the space figure of WebDAV disks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebDavConfig {
    /// Bound on opening a TCP connection to the node.
    pub connect_timeout: Duration,
    /// Bound on a whole request without a streamed body (`HEAD`, `MOVE`, `DELETE`, a
    /// `read_all`), on the first byte of a `PUT` body being taken (the probe of
    /// [`WebDavDisk::begin_temp`]), on the node's answer once a `PUT` body has ended, and
    /// on the response headers of a ranged `GET`.
    pub request_timeout: Duration,
    /// Bound on a stall of a streamed body: a chunk not taken by the node (PUT) or not
    /// delivered by it (GET) within this time ends the transfer with an error.
    pub stall_timeout: Duration,
    /// Idle keep-alive connections are closed after this; keep it below nginx's
    /// `keepalive_timeout` (75 s by default) so that a request never lands on a connection
    /// nginx is closing.
    pub pool_idle_timeout: Duration,
    /// What [`WebDavDisk::space`] reports as (free, total) bytes. nginx has no way to
    /// report free space; `None` makes `space` fail with [`DiskError::SpaceUnknown`].
    pub space: Option<(u64, u64)>,
    /// The TLS client of `https://` disks; `None` refuses them (there is no fallback to
    /// the system roots, see [`super::tls`]).
    pub tls: Option<StorageTls>,
}

/// The configuration [`super::Disk::open`] gives WebDAV disks in this process.
static PROCESS_CONFIG: RwLock<Option<WebDavConfig>> = RwLock::new(None);

impl WebDavConfig {
    /// Sets the configuration of every WebDAV disk this process opens from now on through
    /// [`super::Disk::open`]. Process-wide because the storage TLS is the process's identity
    /// on the storage network: the gateway's PairDB, its admin API, its probes and its
    /// in-process Valkyrie workers, or the `valkyrie` binary, all open disks by name and must
    /// reach the same nodes the same way. Set once at start, before any disk is opened.
    pub fn set_process(config: WebDavConfig) {
        *PROCESS_CONFIG.write().unwrap_or_else(|e| e.into_inner()) = Some(config);
    }

    /// What [`WebDavConfig::set_process`] set, else the default.
    pub fn process() -> WebDavConfig {
        PROCESS_CONFIG
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_default()
    }
}

impl Default for WebDavConfig {
    fn default() -> Self {
        WebDavConfig {
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(30),
            stall_timeout: Duration::from_secs(30),
            pool_idle_timeout: Duration::from_secs(20),
            space: None,
            tls: None,
        }
    }
}

struct Inner {
    disk_ref: DiskRef,
    /// The base URL without a trailing slash.
    base: String,
    client: Transport,
    config: WebDavConfig,
}

/// The connection pool of one disk: plain for `http://`, TLS only for `https://`.
enum Transport {
    Plain(Client<HttpConnector, ReqBody>),
    Tls(Client<HttpsConnector<HttpConnector>, ReqBody>),
}

impl Transport {
    /// A pool with every bound of [`WebDavConfig`]; `tls` for an `https://` disk.
    fn new(config: &WebDavConfig, tls: Option<&StorageTls>) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(config.connect_timeout));
        connector.set_nodelay(true);
        let mut builder = Client::builder(TokioExecutor::new());
        builder
            .pool_idle_timeout(config.pool_idle_timeout)
            .pool_timer(TokioTimer::new());
        match tls {
            None => {
                connector.enforce_http(true);
                Transport::Plain(builder.build(connector))
            }
            Some(tls) => {
                // The TLS layer takes the `https` URLs; `https_only` refuses any other, so
                // a request can never leave this pool in the clear.
                connector.enforce_http(false);
                let https = HttpsConnectorBuilder::new()
                    .with_tls_config(tls.client_config().clone())
                    .https_only()
                    .enable_http1()
                    .wrap_connector(connector);
                Transport::Tls(builder.build(https))
            }
        }
    }

    fn request(&self, req: Request<ReqBody>) -> ResponseFuture {
        match self {
            Transport::Plain(client) => client.request(req),
            Transport::Tls(client) => client.request(req),
        }
    }

    fn is_tls(&self) -> bool {
        matches!(self, Transport::Tls(_))
    }
}

/// A disk that is a folder on a WebDAV node, e.g. `http://10.0.0.7:8081/disk0`.
///
/// Cheap to clone: clones share one connection pool.
#[derive(Clone)]
pub struct WebDavDisk {
    inner: Arc<Inner>,
}

impl fmt::Debug for WebDavDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebDavDisk")
            .field("base", &self.inner.base)
            .field("config", &self.inner.config)
            .finish()
    }
}

impl WebDavDisk {
    /// A disk at the base URL `disk_ref` names (`http://host[:port][/path]`, or `https://`
    /// with [`WebDavConfig::tls`] set). No request is made: a node that is down, or whose
    /// certificate does not verify, shows up on the first operation.
    pub fn new(disk_ref: DiskRef, config: WebDavConfig) -> Result<Self, DiskError> {
        let text = disk_ref.as_str();
        let tls = if text.starts_with("http://") {
            None
        } else if text.starts_with("https://") {
            let Some(tls) = config.tls.as_ref() else {
                return Err(DiskError::Remote {
                    disk: disk_ref,
                    op: OP_OPEN,
                    message: "an https:// disk needs the CA of the storage nodes (storage TLS \
                              `ca`); the system roots are never trusted for a storage node"
                        .into(),
                });
            };
            Some(tls)
        } else {
            return Err(DiskError::Unsupported(disk_ref));
        };
        let base = text.trim_end_matches('/').to_string();
        let bad = |why: &str| DiskError::Remote {
            disk: disk_ref.clone(),
            op: OP_OPEN,
            message: format!("bad base URL: {why}"),
        };
        let uri: Uri = base.parse().map_err(|e| bad(&format!("{e}")))?;
        if uri.authority().is_none() {
            return Err(bad("no host"));
        }
        if uri.query().is_some() || base.contains('#') {
            return Err(bad("a query or fragment has no place in a disk URL"));
        }
        let client = Transport::new(&config, tls);
        Ok(WebDavDisk {
            inner: Arc::new(Inner {
                disk_ref,
                base,
                client,
                config,
            }),
        })
    }

    pub fn disk_ref(&self) -> &DiskRef {
        &self.inner.disk_ref
    }

    /// The base URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.inner.base
    }

    pub fn config(&self) -> &WebDavConfig {
        &self.inner.config
    }

    /// The absolute URL of a content file: `<base>/<aa>/<bb>/<sha1 hex>`.
    pub fn content_url(&self, sha1: &Sha1) -> String {
        let hex = sha1.to_hex();
        format!("{}/{}/{}/{}", self.inner.base, &hex[0..2], &hex[2..4], hex)
    }

    /// Starts a streaming `PUT` to `<base>/tmp/<random>`.
    ///
    /// This is the probe of the write protocol: it returns once a connection to the node
    /// is open and the request head is on its way (hyper asks for the first body chunk),
    /// or fails (connection refused, timeout) before any body byte is consumed, so that the
    /// caller can try another pair. A node that accepts the connection but refuses the PUT
    /// (403, 507, ...) is reported by the first `write` or by `finish`.
    pub async fn begin_temp(&self) -> Result<WebDavTempWriter, DiskError> {
        let name = format!("{:032x}", rand::random::<u128>());
        let url = format!("{}/{TMP_DIR}/{name}", self.inner.base);
        let (tx, rx) = mpsc::channel(WRITE_QUEUE_DEPTH);
        let (started_tx, started_rx) = oneshot::channel();
        let req = self.build(
            OP_CREATE,
            Method::PUT,
            &url,
            &[],
            ReqBody::upload(rx, started_tx),
        )?;
        let put = tokio::spawn(put_task(self.clone(), req));
        let mut writer = WebDavTempWriter {
            disk: self.clone(),
            url: Some(url),
            tx: Some(tx),
            put: Some(put),
        };
        let after = self.inner.config.request_timeout;
        match timeout(after, started_rx).await {
            Ok(Ok(())) => Ok(writer),
            // The request ended before its body was asked for: nothing was created.
            Ok(Err(_)) => {
                writer.url = None;
                Err(writer.put_ended_early(OP_CREATE).await)
            }
            Err(_) => {
                writer.url = None;
                Err(self.timeout_error(OP_CREATE, after))
            }
        }
    }

    /// The size of the content file (`HEAD` -> `Content-Length`), `None` on 404.
    pub async fn size_of(&self, sha1: &Sha1) -> Result<Option<u64>, DiskError> {
        let req = self.build(
            OP_STAT,
            Method::HEAD,
            &self.content_url(sha1),
            &[],
            ReqBody::empty(),
        )?;
        let (status, headers) = self.exchange(OP_STAT, req).await?;
        match status {
            StatusCode::OK => content_length(&headers)
                .map(Some)
                .ok_or_else(|| self.remote(OP_STAT, "no valid Content-Length in the answer")),
            StatusCode::NOT_FOUND => Ok(None),
            s => Err(self.http_error(OP_STAT, s)),
        }
    }

    /// The whole content file (`GET`), within one request timeout.
    pub async fn read_all(&self, sha1: &Sha1) -> Result<Bytes, DiskError> {
        let req = self.build(
            OP_READ,
            Method::GET,
            &self.content_url(sha1),
            &[],
            ReqBody::empty(),
        )?;
        let after = self.inner.config.request_timeout;
        let exchange = async {
            let resp = self.send(OP_READ, req).await?;
            let status = resp.status();
            if status != StatusCode::OK {
                drain(resp.into_body()).await;
                return Err(self.http_error(OP_READ, status));
            }
            resp.into_body()
                .collect()
                .await
                .map(|c| c.to_bytes())
                .map_err(|e| self.remote(OP_READ, error_chain(&e)))
        };
        timeout(after, exchange)
            .await
            .map_err(|_| self.timeout_error(OP_READ, after))?
    }

    /// A stream of `len` bytes of the content file from `offset` (`GET` with
    /// `Range: bytes=<offset>-<offset+len-1>`).
    ///
    /// Accepts 206 whose `Content-Range` starts at `offset`, or a whole-file 200 when
    /// `offset` is 0. As for a local file, a range past the end yields fewer bytes (none
    /// on 416) and a missing file is an error that [`DiskError::is_not_found`].
    pub async fn read_range(
        &self,
        sha1: &Sha1,
        offset: u64,
        len: u64,
    ) -> Result<ByteStream, DiskError> {
        if len == 0 {
            return match self.size_of(sha1).await? {
                Some(_) => Ok(empty_stream()),
                None => Err(self.http_error(OP_READ_RANGE, StatusCode::NOT_FOUND)),
            };
        }
        let last = offset
            .checked_add(len - 1)
            .ok_or_else(|| self.remote(OP_READ_RANGE, "range past 2^64"))?;
        let range = format!("bytes={offset}-{last}");
        let req = self.build(
            OP_READ_RANGE,
            Method::GET,
            &self.content_url(sha1),
            &[(header::RANGE, &range)],
            ReqBody::empty(),
        )?;
        let after = self.inner.config.request_timeout;
        let resp = timeout(after, self.send(OP_READ_RANGE, req))
            .await
            .map_err(|_| self.timeout_error(OP_READ_RANGE, after))??;
        match resp.status() {
            StatusCode::PARTIAL_CONTENT => {
                let start = resp
                    .headers()
                    .get(header::CONTENT_RANGE)
                    .and_then(|v| v.to_str().ok())
                    .and_then(content_range_start);
                if start != Some(offset) {
                    return Err(self.remote(
                        OP_READ_RANGE,
                        format!("asked for {range}, got Content-Range {start:?}"),
                    ));
                }
            }
            StatusCode::OK if offset == 0 => {}
            StatusCode::OK => {
                return Err(self.remote(OP_READ_RANGE, "the node ignored the Range header"));
            }
            StatusCode::RANGE_NOT_SATISFIABLE => return Ok(empty_stream()),
            s => {
                // Not worth draining: dropping the body closes the connection.
                return Err(self.http_error(OP_READ_RANGE, s));
            }
        }
        Ok(body_stream(
            resp.into_body(),
            len,
            self.inner.config.stall_timeout,
            self.inner.disk_ref.clone(),
        ))
    }

    /// The configured (free, total) figure: nginx cannot report free space, so without one
    /// this is [`DiskError::SpaceUnknown`] and the caller keeps the figure it has.
    pub async fn space(&self) -> Result<(u64, u64), DiskError> {
        self.inner
            .config
            .space
            .ok_or_else(|| DiskError::SpaceUnknown(self.inner.disk_ref.clone()))
    }

    /// `MOVE from -> to`, overwriting: 201 (created) or 204 (replaced).
    async fn move_to(&self, from: &str, to: &str) -> Result<(), DiskError> {
        let method =
            Method::from_bytes(b"MOVE").map_err(|e| self.remote(OP_MOVE, e.to_string()))?;
        let req = self.build(
            OP_MOVE,
            method,
            from,
            &[
                (HeaderName::from_static("destination"), to),
                (HeaderName::from_static("overwrite"), "T"),
            ],
            ReqBody::empty(),
        )?;
        match self.exchange(OP_MOVE, req).await?.0 {
            StatusCode::CREATED | StatusCode::NO_CONTENT => Ok(()),
            s => Err(self.http_error(OP_MOVE, s)),
        }
    }

    /// `DELETE url`; a file already gone (404) counts as removed.
    async fn delete(&self, url: &str, op: &'static str) -> Result<(), DiskError> {
        let req = self.build(op, Method::DELETE, url, &[], ReqBody::empty())?;
        match self.exchange(op, req).await?.0 {
            StatusCode::OK | StatusCode::NO_CONTENT | StatusCode::NOT_FOUND => Ok(()),
            s => Err(self.http_error(op, s)),
        }
    }

    fn build(
        &self,
        op: &'static str,
        method: Method,
        url: &str,
        headers: &[(HeaderName, &str)],
        body: ReqBody,
    ) -> Result<Request<ReqBody>, DiskError> {
        let mut builder = Request::builder().method(method).uri(url);
        for (name, value) in headers {
            let value = HeaderValue::from_str(value).map_err(|e| self.remote(op, e.to_string()))?;
            builder = builder.header(name, value);
        }
        builder
            .body(body)
            .map_err(|e| self.remote(op, e.to_string()))
    }

    /// Sends a request and returns the response head (no timeout: callers bound it).
    async fn send(
        &self,
        op: &'static str,
        req: Request<ReqBody>,
    ) -> Result<Response<Incoming>, DiskError> {
        let resp = self
            .inner
            .client
            .request(req)
            .await
            .map_err(|e| self.remote(op, error_chain(&e)))?;
        if resp.status() == StatusCode::BAD_REQUEST && self.inner.client.is_tls() {
            return Err(self.refused_over_tls(op, resp).await);
        }
        Ok(resp)
    }

    /// A 400 over TLS: with TLS 1.3 the handshake ends before nginx checks the client
    /// certificate, so a missing or untrusted one comes back as a 400 page ("No required SSL
    /// certificate was sent", "The SSL certificate error"), which is named here instead of
    /// a bare status.
    async fn refused_over_tls(&self, op: &'static str, resp: Response<Incoming>) -> DiskError {
        let body = http_body_util::Limited::new(resp.into_body(), TLS_ERROR_PAGE_BYTES_MAX);
        let page = match body.collect().await {
            Ok(c) => String::from_utf8_lossy(&c.to_bytes()).into_owned(),
            Err(_) => String::new(),
        };
        let presented = if self
            .inner
            .config
            .tls
            .as_ref()
            .is_some_and(StorageTls::has_client_cert)
        {
            "the client certificate presented is not one it trusts"
        } else {
            "it requires a client certificate and none is configured (storage TLS `cert`, `key`)"
        };
        if let Some(said) = page.lines().find(|l| l.contains("SSL certificate")) {
            let said = said.replace("<center>", "").replace("</center>", "");
            return self.remote(
                op,
                format!(
                    "the storage node refused this client: {presented} (nginx: {})",
                    said.trim()
                ),
            );
        }
        // A HEAD answer has no page to tell; our requests are well formed, so a refused
        // certificate is the likely cause, and the message says it is likely, not sure.
        if page.is_empty() {
            return self.remote(
                op,
                format!("the storage node answered 400, as nginx does when it refuses a client: likely {presented}"),
            );
        }
        self.http_error(op, StatusCode::BAD_REQUEST)
    }

    /// A whole request whose answer body does not matter, within one request timeout.
    async fn exchange(
        &self,
        op: &'static str,
        req: Request<ReqBody>,
    ) -> Result<(StatusCode, HeaderMap), DiskError> {
        let after = self.inner.config.request_timeout;
        let exchange = async {
            let (parts, body) = self.send(op, req).await?.into_parts();
            drain(body).await;
            Ok((parts.status, parts.headers))
        };
        timeout(after, exchange)
            .await
            .map_err(|_| self.timeout_error(op, after))?
    }

    fn remote(&self, op: &'static str, message: impl Into<String>) -> DiskError {
        DiskError::Remote {
            disk: self.inner.disk_ref.clone(),
            op,
            message: message.into(),
        }
    }

    fn http_error(&self, op: &'static str, status: StatusCode) -> DiskError {
        DiskError::Http {
            disk: self.inner.disk_ref.clone(),
            op,
            status: status.as_u16(),
        }
    }

    fn timeout_error(&self, op: &'static str, after: Duration) -> DiskError {
        DiskError::Timeout {
            disk: self.inner.disk_ref.clone(),
            op,
            after,
        }
    }
}

/// The PUT of one upload; its answer is the status nginx gave once the body ended.
async fn put_task(disk: WebDavDisk, req: Request<ReqBody>) -> Result<StatusCode, DiskError> {
    let resp = disk.send(OP_WRITE, req).await?;
    let status = resp.status();
    // The answer body is a few bytes; reading it keeps the connection reusable.
    let _ = timeout(disk.inner.config.request_timeout, drain(resp.into_body())).await;
    Ok(status)
}

enum WriteMsg {
    Data(Bytes),
    /// The writer is done: end the body so that nginx completes the PUT. A channel closed
    /// without it means the upload was abandoned, and the body ends with an error instead.
    Finish,
}

enum UploadState {
    Streaming,
    Finished,
    Abandoned,
}

struct Upload {
    rx: mpsc::Receiver<WriteMsg>,
    /// Fired when hyper first asks for body data: the connection is up and the head sent.
    started: Option<oneshot::Sender<()>>,
    state: UploadState,
}

/// The request body of every WebDAV request: empty, or an upload fed by a bounded channel.
struct ReqBody {
    upload: Option<Upload>,
}

impl ReqBody {
    fn empty() -> Self {
        ReqBody { upload: None }
    }

    fn upload(rx: mpsc::Receiver<WriteMsg>, started: oneshot::Sender<()>) -> Self {
        ReqBody {
            upload: Some(Upload {
                rx,
                started: Some(started),
                state: UploadState::Streaming,
            }),
        }
    }
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let Some(up) = &mut self.get_mut().upload else {
            return Poll::Ready(None);
        };
        if let Some(started) = up.started.take() {
            let _ = started.send(());
        }
        match up.state {
            UploadState::Streaming => {}
            UploadState::Finished => return Poll::Ready(None),
            UploadState::Abandoned => return Poll::Ready(Some(Err(abandoned()))),
        }
        match up.rx.poll_recv(cx) {
            Poll::Ready(Some(WriteMsg::Data(chunk))) => Poll::Ready(Some(Ok(Frame::data(chunk)))),
            Poll::Ready(Some(WriteMsg::Finish)) => {
                up.state = UploadState::Finished;
                Poll::Ready(None)
            }
            // The writer went away without finishing: an error (never a clean end of the
            // chunked body) makes hyper drop the connection, and nginx discards the
            // incomplete body instead of creating the file.
            Poll::Ready(None) => {
                up.state = UploadState::Abandoned;
                Poll::Ready(Some(Err(abandoned())))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.upload {
            None => true,
            Some(up) => matches!(up.state, UploadState::Finished),
        }
    }

    fn size_hint(&self) -> SizeHint {
        if self.is_end_stream() {
            SizeHint::with_exact(0)
        } else {
            SizeHint::default()
        }
    }
}

fn abandoned() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "upload abandoned before its end",
    )
}

/// A temp file being uploaded by a streaming PUT.
///
/// Dropped before [`finish`](Self::finish) succeeds, it aborts the PUT (nginx discards an
/// incomplete body) and, if a Tokio runtime is available, removes the temp name in a
/// spawned task in case the node kept anything.
pub struct WebDavTempWriter {
    disk: WebDavDisk,
    /// The temp URL while this writer answers for it.
    url: Option<String>,
    tx: Option<mpsc::Sender<WriteMsg>>,
    put: Option<JoinHandle<Result<StatusCode, DiskError>>>,
}

impl WebDavTempWriter {
    /// The temp URL being written.
    pub fn url(&self) -> Option<&str> {
        self.url.as_deref()
    }

    /// Queues one chunk of the body; waits (at most the stall timeout) while the channel
    /// is full, so memory per upload stays bounded.
    pub async fn write(&mut self, chunk: Bytes) -> Result<(), DiskError> {
        let Some(tx) = &self.tx else {
            return Err(self.disk.remote(OP_WRITE, "the upload already failed"));
        };
        if chunk.is_empty() {
            return Ok(());
        }
        let stall = self.disk.inner.config.stall_timeout;
        match timeout(stall, tx.send(WriteMsg::Data(chunk))).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => {
                self.tx = None;
                Err(self.put_ended_early(OP_WRITE).await)
            }
            Err(_) => {
                self.tx = None;
                Err(self.disk.timeout_error(OP_WRITE, stall))
            }
        }
    }

    /// Ends the body and waits for nginx to acknowledge the complete file (201 or 204).
    pub async fn finish(mut self) -> Result<WebDavTempFile, DiskError> {
        let Some(tx) = self.tx.take() else {
            return Err(self.put_ended_early(OP_FINISH).await);
        };
        let stall = self.disk.inner.config.stall_timeout;
        match timeout(stall, tx.send(WriteMsg::Finish)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(self.put_ended_early(OP_FINISH).await),
            Err(_) => return Err(self.disk.timeout_error(OP_FINISH, stall)),
        }
        drop(tx);
        let status = self.join_put(OP_FINISH).await?;
        if status != StatusCode::CREATED && status != StatusCode::NO_CONTENT {
            return Err(self.disk.http_error(OP_FINISH, status));
        }
        let url = self
            .url
            .take()
            .ok_or_else(|| self.disk.remote(OP_FINISH, "temp name already handed over"))?;
        Ok(WebDavTempFile {
            disk: self.disk.clone(),
            url: Some(url),
        })
    }

    /// The PUT stopped taking the body (or never started): its outcome says why.
    async fn put_ended_early(&mut self, op: &'static str) -> DiskError {
        match self.join_put(op).await {
            Ok(status) if status.is_success() => self.disk.remote(
                op,
                format!("the node answered {status} before the body was complete"),
            ),
            Ok(status) => self.disk.http_error(op, status),
            Err(e) => e,
        }
    }

    /// Waits (at most the request timeout) for the PUT's answer. The handle stays in
    /// `self` while waiting, so that a caller who gives up (drops the future) leaves it to
    /// `Drop`, which waits for the PUT to end before removing the temp name.
    async fn join_put(&mut self, op: &'static str) -> Result<StatusCode, DiskError> {
        let Some(put) = self.put.as_mut() else {
            return Err(self.disk.remote(op, "the upload already failed"));
        };
        let after = self.disk.inner.config.request_timeout;
        let result = match timeout(after, &mut *put).await {
            Ok(Ok(result)) => result,
            Ok(Err(e)) => Err(self.disk.remote(op, format!("upload task failed: {e}"))),
            Err(_) => {
                put.abort();
                Err(self.disk.timeout_error(op, after))
            }
        };
        self.put = None;
        result
    }
}

impl Drop for WebDavTempWriter {
    fn drop(&mut self) {
        // Closing the channel without `Finish` ends the body with an error: hyper drops the
        // connection mid-body and nginx never creates the file.
        self.tx = None;
        let put = self.put.take();
        match self.url.take() {
            Some(url) => remove_in_background(self.disk.clone(), url, put),
            None => {
                if let Some(put) = put {
                    put.abort();
                }
            }
        }
    }
}

/// A temp file the node has acknowledged whole, waiting to be moved or discarded.
/// Dropped without either, it is removed by a spawned `DELETE` (if a runtime is available;
/// otherwise Valkyrie's scrub removes the stale temp).
pub struct WebDavTempFile {
    disk: WebDavDisk,
    url: Option<String>,
}

impl WebDavTempFile {
    /// The temp URL.
    pub fn url(&self) -> Option<&str> {
        self.url.as_deref()
    }

    /// `MOVE` to the content address, overwriting an existing copy (same content). On
    /// failure the temp is removed, as a failed local rename removes it.
    pub async fn commit(mut self, sha1: &Sha1) -> Result<(), DiskError> {
        let Some(tmp) = self.url.clone() else {
            return Ok(());
        };
        let target = self.disk.content_url(sha1);
        let result = self.disk.move_to(&tmp, &target).await;
        if result.is_err()
            && let Err(e) = self.disk.delete(&tmp, OP_REMOVE).await
        {
            tracing::warn!(error = %e, "could not remove temp file after a failed MOVE; Valkyrie will");
        }
        self.url = None;
        result
    }

    /// `DELETE`s the temp file (the content was already stored). A temp already gone
    /// counts as removed.
    pub async fn discard(mut self) -> Result<(), DiskError> {
        let Some(tmp) = self.url.clone() else {
            return Ok(());
        };
        let result = self.disk.delete(&tmp, OP_REMOVE).await;
        self.url = None;
        result
    }
}

impl Drop for WebDavTempFile {
    fn drop(&mut self) {
        if let Some(url) = self.url.take() {
            remove_in_background(self.disk.clone(), url, None);
        }
    }
}

/// Best effort: wait (bounded) for an abandoned PUT to end, then `DELETE` its temp name.
fn remove_in_background(
    disk: WebDavDisk,
    url: String,
    put: Option<JoinHandle<Result<StatusCode, DiskError>>>,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        if let Some(put) = put {
            put.abort();
        }
        tracing::warn!(
            url,
            "no runtime to remove an abandoned temp file; Valkyrie will"
        );
        return;
    };
    runtime.spawn(async move {
        if let Some(mut put) = put
            && timeout(disk.inner.config.request_timeout, &mut put)
                .await
                .is_err()
        {
            put.abort();
        }
        if let Err(e) = disk.delete(&url, OP_REMOVE).await {
            tracing::warn!(error = %e, "could not remove abandoned temp file; Valkyrie will");
        }
    });
}

/// Reads and discards a response body (nginx's error pages are small; callers bound time).
async fn drain(mut body: Incoming) {
    while let Some(Ok(_)) = body.frame().await {}
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The first byte of a `Content-Range: bytes <first>-<last>/<total>` value.
fn content_range_start(value: &str) -> Option<u64> {
    let rest = value.trim().strip_prefix("bytes")?.trim_start();
    let (first, _) = rest.split_once('-')?;
    first.trim().parse().ok()
}

fn empty_stream() -> ByteStream {
    Box::pin(futures_util::stream::empty())
}

/// A response body as a [`ByteStream`] of at most `limit` bytes, failing when no data
/// arrives within `stall`.
fn body_stream(body: Incoming, limit: u64, stall: Duration, disk: DiskRef) -> ByteStream {
    struct State {
        body: Incoming,
        left: u64,
        disk: DiskRef,
    }
    let state = State {
        body,
        left: limit,
        disk,
    };
    Box::pin(futures_util::stream::unfold(
        Some(state),
        move |state| async move {
            let mut st = state?;
            loop {
                if st.left == 0 {
                    return None;
                }
                let frame = match timeout(stall, st.body.frame()).await {
                    Err(_) => {
                        let msg = format!("disk {}: read: no data for {stall:?}", st.disk);
                        return Some((Err(io::Error::new(io::ErrorKind::TimedOut, msg)), None));
                    }
                    Ok(None) => return None,
                    Ok(Some(Err(e))) => {
                        let msg = format!("disk {}: read: {}", st.disk, error_chain(&e));
                        return Some((Err(io::Error::other(msg)), None));
                    }
                    Ok(Some(Ok(frame))) => frame,
                };
                let Ok(mut data) = frame.into_data() else {
                    continue; // trailers
                };
                if data.is_empty() {
                    continue;
                }
                if data.len() as u64 > st.left {
                    data.truncate(usize::try_from(st.left).unwrap_or(usize::MAX));
                }
                st.left -= data.len() as u64;
                return Some((Ok(data), Some(st)));
            }
        },
    ))
}

/// An error and its sources on one line: hyper's own messages ("client error (Connect)")
/// say little without them.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(url: &str) -> WebDavDisk {
        WebDavDisk::new(url.parse().unwrap(), WebDavConfig::default()).unwrap()
    }

    #[test]
    fn urls_follow_the_disk_layout() {
        let sha1: Sha1 = "da39a3ee5e6b4b0d3255bfef95601890afd80709".parse().unwrap();
        for base in [
            "http://127.0.0.1:8081/disk0",
            "http://127.0.0.1:8081/disk0/",
        ] {
            let d = disk(base);
            assert_eq!(d.base_url(), "http://127.0.0.1:8081/disk0");
            assert_eq!(
                d.content_url(&sha1),
                "http://127.0.0.1:8081/disk0/da/39/da39a3ee5e6b4b0d3255bfef95601890afd80709"
            );
        }
    }

    #[test]
    fn https_without_a_ca_and_bad_urls_are_refused() {
        let cfg = WebDavConfig::default();
        let https = "https://node/disk0".parse().unwrap();
        let e = WebDavDisk::new(https, cfg.clone()).unwrap_err();
        assert!(
            e.to_string().contains("needs the CA of the storage nodes"),
            "{e}"
        );
        let query = "http://node/disk0?x=1".parse().unwrap();
        assert!(matches!(
            WebDavDisk::new(query, cfg.clone()),
            Err(DiskError::Remote { .. })
        ));
        let spaces = "http://no de/disk0".parse().unwrap();
        assert!(WebDavDisk::new(spaces, cfg).is_err());
    }

    #[test]
    fn content_range_is_parsed() {
        assert_eq!(content_range_start("bytes 100-199/1000"), Some(100));
        assert_eq!(content_range_start("bytes 0-0/1"), Some(0));
        assert_eq!(content_range_start("bytes */1000"), None);
        assert_eq!(content_range_start("items 1-2/3"), None);
    }

    #[tokio::test]
    async fn space_is_unknown_unless_configured() {
        let d = disk("http://127.0.0.1:1/d");
        assert!(d.space().await.unwrap_err().is_space_unknown());
        let cfg = WebDavConfig {
            space: Some((10, 20)),
            ..WebDavConfig::default()
        };
        let d = WebDavDisk::new("http://127.0.0.1:1/d".parse().unwrap(), cfg).unwrap();
        assert_eq!(d.space().await.unwrap(), (10, 20));
    }

    #[test]
    fn http_404_is_not_found() {
        let e = DiskError::Http {
            disk: "http://x/d".parse().unwrap(),
            op: OP_READ,
            status: 404,
        };
        assert!(e.is_not_found());
        let e = DiskError::Http {
            disk: "http://x/d".parse().unwrap(),
            op: OP_READ,
            status: 500,
        };
        assert!(!e.is_not_found());
    }
}
