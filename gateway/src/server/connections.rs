//! The accept loop, and the bounds on each connection: no client holds a socket, a file
//! descriptor or memory for longer than a timeout says.
//!
//! - **Header read** (`header_read_timeout_secs`): a request's head must arrive whole this
//!   long after the connection opened or its first byte came; a client that sends half a
//!   header and waits (slowloris) is disconnected.
//! - **Keep-alive idle** (`keepalive_idle_secs`): a connection with no request in progress
//!   is closed after this long without a new one.
//! - **Body idle** (`body_idle_timeout_secs`): while a handler waits for request body
//!   bytes, at most this long between two of them; the upload then fails and nothing is
//!   stored.
//! - **Send** (`send_timeout_secs`): a write that makes no progress this long (the client
//!   stopped reading) closes the connection, and frees what the response held.
//! - **Connections** (`max_connections`): connections in flight; one more is answered
//!   `503 SlowDown` (the S3 error clients retry with back-off, `Connection: close`) and
//!   closed, so a flood meets a clear refusal, never a silent close. A refusal waits for
//!   the request it refuses ([`REFUSAL_IO_SECS`]), answers, then reads whatever arrives
//!   until the client closes ([`REFUSAL_LINGER_SECS`]), so that a late request still finds
//!   the answer and the close is a FIN, not a reset; at most [`refusals_max`] of them run
//!   at once. Past that, a plain HTTP connection is answered at once from the accept loop
//!   (what the request sent so far is read without waiting, the answer written to the
//!   empty send buffer, the socket closed): no task, no wait. Over TLS the answer needs a
//!   handshake, so such a connection is closed unanswered.
//! - **Open files**: [`raise_open_files_limit`] raises `RLIMIT_NOFILE` to its hard limit at
//!   start and [`fit_open_files_limit`] lowers `max_connections` until the connections
//!   and their refusals fit beside [`reserved_files`].
//! - **Admin listener** (`--admin-listen`): the same bounds, with its own connection bound
//!   ([`ADMIN_CONNECTIONS_MAX`]), so that S3 connections cannot lock the health checks out.
//! - **TLS** ([`super::tls`]): the same bounds hold beneath the TLS layer, on the socket's
//!   bytes. The handshake counts as the start of the first request's head: it must end
//!   within the header read timeout (with the cluster side, so must the first byte and the
//!   ClientHello that choose the side). The refusal of a connection over the bound is sent
//!   over TLS (its handshake bounded like the refusal's IO).
//!
//! Back of the envelope: a connection costs one descriptor and hyper's buffers (a few KiB
//! idle, ~400 KiB at most while writing); 4096 connections are ~16 MiB idle.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http_body::Frame;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::{Instant, Sleep};
use tower::ServiceExt as _;

use super::tls::ListenerTls;
use super::tls::cluster::Accepted;
use crate::state::ClusterPeer;

/// The settings of every connection; see the module doc.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub header_read_timeout_secs: u64,
    pub keepalive_idle_secs: u64,
    pub body_idle_timeout_secs: u64,
    pub send_timeout_secs: u64,
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_read_timeout_secs: 30,
            keepalive_idle_secs: 60,
            body_idle_timeout_secs: 60,
            send_timeout_secs: 60,
            max_connections: 4096,
        }
    }
}

/// Descriptors kept for everything but client connections, at least: a single node's
/// metadata databases and log, a few dozen files of bodies in progress, the admin
/// listener's connections ([`ADMIN_CONNECTIONS_MAX`] and their refusals).
pub const RESERVED_FILES_MIN: u64 = 64;
/// Descriptors kept at most: as many disks, peers and WebDAV connections as a large node
/// has, with room to spare (the one fixed reserve of earlier versions).
pub const RESERVED_FILES_MAX: u64 = 1024;
/// Connections of the admin listener in flight (probes, scrapes, the admin CLI).
pub const ADMIN_CONNECTIONS_MAX: usize = 16;
/// Refusal tasks (`503 SlowDown`) in flight at once, at most; see [`refusals_max`].
const REFUSALS_IN_FLIGHT_MAX: usize = 256;
/// How long a refusal waits for the request it refuses (read so that closing does not
/// reset the connection before the client reads the answer), and for its answer to leave.
const REFUSAL_IO_SECS: u64 = 2;
/// How long a refusal keeps reading after its answer, until the client closes: a request
/// that comes late is read, and the close after it is not a reset.
const REFUSAL_LINGER_SECS: u64 = 5;
/// Bytes of the refused request read, at most.
const REFUSAL_READ_BYTES: usize = 16 * 1024;
/// Pause after an accept error (EMFILE, ENFILE): the listener stays readable, and a loop
/// retrying at once would take a whole core.
const ACCEPT_ERROR_PAUSE_MS: u64 = 100;
/// How long a shutdown waits for connections in progress to finish.
const SHUTDOWN_DRAIN_SECS: u64 = 30;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; the soft limit after it.
pub fn raise_open_files_limit() -> io::Result<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            },
        )?;
    }
    Ok(getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX))
}

/// Descriptors kept for everything but client connections and their refusals: a quarter
/// of the open files limit, within [`RESERVED_FILES_MIN`]..=[`RESERVED_FILES_MAX`]. A low
/// limit is a small node's (few disks, no peers): it needs little, and a fixed 1024 would
/// leave a limit of 1024 one connection. A high limit gives connections all but 1024.
pub fn reserved_files(open_files_limit: u64) -> u64 {
    (open_files_limit / 4).clamp(RESERVED_FILES_MIN, RESERVED_FILES_MAX)
}

/// Refusal tasks a listener with `max_connections` runs at once: a quarter of the
/// connections, within 1..=[`REFUSALS_IN_FLIGHT_MAX`] (each holds a descriptor for up to
/// [`REFUSAL_IO_SECS`] twice and [`REFUSAL_LINGER_SECS`]).
pub fn refusals_max(max_connections: usize) -> usize {
    (max_connections / 4).clamp(1, REFUSALS_IN_FLIGHT_MAX)
}

/// The most connections that fit `open_files_limit`: with their [`refusals_max`], they
/// take what [`reserved_files`] leaves (`c + refusals_max(c) <= room`), at least 1.
///
/// `c = max(4/5 room, room - 256)`: the first while a quarter of `c` is under 256
/// (`c + c/4 <= room`), the second past it. A limit of 1024 gives 614 connections and
/// 153 refusals; 20 000 gives 18 720 (beyond the default 4096).
pub fn connections_room(open_files_limit: u64) -> usize {
    let room = open_files_limit.saturating_sub(reserved_files(open_files_limit));
    let room = usize::try_from(room).unwrap_or(usize::MAX);
    (room - room.div_ceil(5))
        .max(room.saturating_sub(REFUSALS_IN_FLIGHT_MAX))
        .max(1)
}

/// Raises the open files limit to its hard limit and lowers `max_connections` to
/// [`connections_room`] if it does not fit, so that a flood of connections meets
/// `503 SlowDown`, not EMFILE. Logs the bound and why.
pub fn fit_open_files_limit(limits: &mut ConnectionLimits) {
    let files = match raise_open_files_limit() {
        Ok(files) => files,
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the open files limit");
            return;
        }
    };
    let room = connections_room(files);
    if limits.max_connections > room {
        tracing::warn!(
            max_connections = limits.max_connections,
            open_files_limit = files,
            reserved_files = reserved_files(files),
            refusals_max = refusals_max(room),
            lowered_to = room,
            "max_connections does not fit the open files limit beside the descriptors kept \
             for disks, databases and peers: lowered"
        );
        limits.max_connections = room;
    } else {
        tracing::info!(
            max_connections = limits.max_connections,
            open_files_limit = files,
            reserved_files = reserved_files(files),
            refusals_max = refusals_max(limits.max_connections),
            "connection bound"
        );
    }
}

/// Serves `app` on `listener` (over TLS and the cluster side as `tls` says) until `shutdown`
/// completes, then lets the connections in progress finish (bounded by
/// [`SHUTDOWN_DRAIN_SECS`]).
pub async fn serve(
    listener: TcpListener,
    tls: ListenerTls,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(
        limits.max_connections.clamp(1, Semaphore::MAX_PERMITS),
    ));
    let refusals = Arc::new(Semaphore::new(refusals_max(limits.max_connections)));
    let (stop_tx, stop_rx) = watch::channel(false);
    let refusal = Bytes::from(slow_down_response());
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(ACCEPT_ERROR_PAUSE_MS)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        match slots.clone().try_acquire_owned() {
            Ok(slot) => {
                tokio::spawn(serve_connection(
                    stream,
                    tls.clone(),
                    app.clone(),
                    limits.clone(),
                    slot,
                    stop_rx.clone(),
                ));
            }
            Err(_) => match refusals.clone().try_acquire_owned() {
                Ok(permit) => {
                    tokio::spawn(refuse(stream, tls.clone(), refusal.clone(), permit));
                }
                Err(_) if tls.is_plain() => refuse_at_once(stream, &refusal),
                Err(_) => drop(stream),
            },
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let all =
        u32::try_from(limits.max_connections.clamp(1, Semaphore::MAX_PERMITS)).unwrap_or(u32::MAX);
    let drained = tokio::time::timeout(
        Duration::from_secs(SHUTDOWN_DRAIN_SECS),
        slots.acquire_many(all),
    )
    .await;
    if drained.is_err() {
        tracing::warn!("connections still open at shutdown");
    }
    Ok(())
}

fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// The whole answer to a connection over the bound: S3's `SlowDown`, which SDKs retry.
fn slow_down_response() -> Vec<u8> {
    let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>\
                <Message>Please reduce your request rate.</Message></Error>";
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/xml\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

async fn refuse(stream: TcpStream, tls: ListenerTls, answer: Bytes, _permit: OwnedSemaphorePermit) {
    let io_bound = Duration::from_secs(REFUSAL_IO_SECS);
    match tokio::time::timeout(io_bound, tls.accept(stream, |s| s)).await {
        Ok(Ok(Accepted::Plain(stream))) => refuse_on(stream, &answer, io_bound).await,
        Ok(Ok(Accepted::Tls { stream, .. })) => refuse_on(stream, &answer, io_bound).await,
        Ok(Err(_)) | Err(_) => {}
    }
}

/// Answers a plain HTTP connection over the bound without a task or a wait: what the
/// request sent so far is read (so that the close is not a reset), the answer goes to the
/// socket's empty send buffer, the socket closes.
fn refuse_at_once(stream: TcpStream, answer: &[u8]) {
    use std::io::{Read as _, Write as _};
    // Off the reactor: its readiness of a socket just accepted is not known yet, and the
    // std socket stays non-blocking, so neither call waits.
    let Ok(mut stream) = stream.into_std() else {
        return;
    };
    let mut request = [0u8; 4096];
    let mut read = 0;
    while read < REFUSAL_READ_BYTES {
        match stream.read(&mut request) {
            Ok(n) if n > 0 => read += n,
            _ => break,
        }
    }
    if stream.write(answer).is_ok_and(|n| n == answer.len()) {
        let _ = stream.shutdown(std::net::Shutdown::Write);
    }
}

async fn refuse_on(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    answer: &[u8],
    io_bound: Duration,
) {
    let mut request = vec![0u8; REFUSAL_READ_BYTES];
    let _ = tokio::time::timeout(io_bound, stream.read(&mut request)).await;
    let answered = tokio::time::timeout(io_bound, async {
        stream.write_all(answer).await?;
        stream.shutdown().await
    })
    .await;
    if matches!(answered, Ok(Ok(()))) {
        // Whatever else the client sends (a request that came late) is read and dropped
        // until it closes, so that the close does not reset the answer away.
        let linger = Duration::from_secs(REFUSAL_LINGER_SECS);
        let _ = tokio::time::timeout(linger, async {
            while stream.read(&mut request).await.is_ok_and(|n| n > 0) {}
        })
        .await;
    }
}

async fn serve_connection(
    stream: TcpStream,
    tls: ListenerTls,
    app: Router,
    limits: ConnectionLimits,
    _slot: OwnedSemaphorePermit,
    stop: watch::Receiver<bool>,
) {
    let requests = Arc::new(Requests::default());
    let timed = |stream| TimedIo::new(stream, requests.clone(), &limits);
    if tls.is_plain() {
        let io = timed(stream);
        return serve_http(io, requests, app, &limits, stop, None).await;
    }
    // TimedIo bounds each read of the handshake; this bounds the whole of it.
    let handshake_bound = Duration::from_secs(limits.header_read_timeout_secs);
    let handshake = tokio::time::timeout(handshake_bound, tls.accept(stream, timed));
    let mut stopping = stop.clone();
    let accepted = tokio::select! {
        accepted = handshake => accepted,
        () = stopped(&mut stopping) => return,
    };
    match accepted {
        Ok(Ok(Accepted::Plain(io))) => serve_http(io, requests, app, &limits, stop, None).await,
        Ok(Ok(Accepted::Tls { stream, cluster })) => {
            let peer = cluster.then_some(ClusterPeer);
            serve_http(stream, requests, app, &limits, stop, peer).await;
        }
        // Plain HTTP to TLS, an old protocol version, an unknown, expired or missing client
        // certificate on the cluster side: nothing to serve.
        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
        Err(_) => tracing::debug!("no TLS handshake within the header read timeout"),
    }
}

/// Completes when the server stops.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

/// Serves HTTP/1.1 or HTTP/2 (hyper's auto-detection, which ALPN's choice agrees with) on
/// a connection's `io` until it ends or the server stops. `peer`: the connection is the
/// cluster side's, and each request carries the mark.
async fn serve_http(
    io: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
    requests: Arc<Requests>,
    app: Router,
    limits: &ConnectionLimits,
    mut stop: watch::Receiver<bool>,
    peer: Option<ClusterPeer>,
) {
    let io = TokioIo::new(io);
    let body_idle = Duration::from_secs(limits.body_idle_timeout_secs);
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let in_flight = InFlight::start(requests.clone());
        let app = app.clone();
        async move {
            let mut req = req.map(|b| Body::new(IdleTimedBody::new(b, body_idle)));
            if let Some(peer) = peer {
                req.extensions_mut().insert(peer);
            }
            let resp = match app.oneshot(req).await {
                Ok(resp) => resp,
                Err(never) => match never {},
            };
            Ok::<_, std::convert::Infallible>(resp.map(|b| {
                Body::new(CountedBody {
                    inner: b,
                    _in_flight: in_flight,
                })
            }))
        }
    });
    let builder = Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let mut stopping = *stop.borrow();
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "connection ended");
                }
                return;
            }
            changed = stop.changed(), if !stopping => {
                if changed.is_err() || *stop.borrow() {
                    stopping = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// Requests of one connection: in progress, and finished (so that the connection's IO
/// knows when it is idle and since when).
#[derive(Default)]
struct Requests {
    in_flight: AtomicUsize,
    finished: AtomicU64,
    /// A read left waiting with no deadline while a request was in progress: woken when
    /// the request ends, so that its idle deadline starts.
    idle_reader: AtomicWaker,
}

/// One request in progress, from its head until its response body is done or dropped.
struct InFlight(Arc<Requests>);

impl InFlight {
    fn start(requests: Arc<Requests>) -> Self {
        requests.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(requests)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.finished.fetch_add(1, Ordering::SeqCst);
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.0.idle_reader.wake();
    }
}

/// A response body that holds its request's [`InFlight`] until it is done.
struct CountedBody {
    inner: Body,
    _in_flight: InFlight,
}

impl http_body::Body for CountedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that fails when the handler waits longer than `idle` for its next bytes.
struct IdleTimedBody {
    inner: Incoming,
    idle: Duration,
    /// Armed while a poll waits for bytes.
    waiting: Option<Pin<Box<Sleep>>>,
}

impl IdleTimedBody {
    fn new(inner: Incoming, idle: Duration) -> Self {
        IdleTimedBody {
            inner,
            idle,
            waiting: None,
        }
    }
}

impl http_body::Body for IdleTimedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.waiting = None;
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                let idle = this.idle;
                let sleep = this
                    .waiting
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                ready!(sleep.as_mut().poll(cx));
                tracing::info!(idle_secs = idle.as_secs(), "request body idle: giving up");
                Poll::Ready(Some(Err(Box::new(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no request body bytes within the body idle timeout",
                )))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A client socket whose reads and writes have deadlines (see the module doc): reads
/// while no request is in progress (the next request's head, or keep-alive idle), and
/// every write that makes no progress.
struct TimedIo {
    inner: TcpStream,
    requests: Arc<Requests>,
    header_read: Duration,
    keepalive_idle: Duration,
    send: Duration,
    /// `requests.finished` when the current idle spell began.
    idle_epoch: u64,
    /// When the current idle spell began (the connection opened, or a response ended).
    idle_since: Instant,
    /// When the first byte of the next request came, in this idle spell.
    head_since: Option<Instant>,
    /// Whether any request has been served (the first wait is for a head, not idle).
    served_any: bool,
    read_deadline: Option<(Instant, Pin<Box<Sleep>>)>,
    write_deadline: Option<Pin<Box<Sleep>>>,
}

impl TimedIo {
    fn new(inner: TcpStream, requests: Arc<Requests>, limits: &ConnectionLimits) -> Self {
        TimedIo {
            inner,
            requests,
            header_read: Duration::from_secs(limits.header_read_timeout_secs),
            keepalive_idle: Duration::from_secs(limits.keepalive_idle_secs),
            send: Duration::from_secs(limits.send_timeout_secs),
            idle_epoch: 0,
            idle_since: Instant::now(),
            head_since: None,
            served_any: false,
            read_deadline: None,
            write_deadline: None,
        }
    }

    /// When a read must have completed, or None while a request is in progress (its body
    /// has its own bound, [`IdleTimedBody`]).
    fn current_read_deadline(&mut self) -> Option<Instant> {
        if self.requests.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let finished = self.requests.finished.load(Ordering::SeqCst);
        if finished != self.idle_epoch {
            // A response ended since the last look: a new idle spell starts now.
            self.idle_epoch = finished;
            self.idle_since = Instant::now();
            self.head_since = None;
            self.served_any = true;
        }
        Some(match self.head_since {
            Some(first_byte) => first_byte + self.header_read,
            None if self.served_any => self.idle_since + self.keepalive_idle,
            None => self.idle_since + self.header_read,
        })
    }

    /// Polls the write deadline of a write that returned Pending.
    fn poll_write_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let send = self.send;
        let sleep = self
            .write_deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(send)));
        ready!(sleep.as_mut().poll(cx));
        tracing::info!(
            send_timeout_secs = send.as_secs(),
            "client stopped reading: closing"
        );
        Poll::Ready(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client read nothing within the send timeout",
        ))
    }

    /// A write result: progress clears the deadline, Pending runs it.
    fn timed_write<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(r) => {
                self.write_deadline = None;
                Poll::Ready(r)
            }
            Poll::Pending => self.poll_write_deadline(cx).map(Err),
        }
    }
}

impl AsyncRead for TimedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let deadline = this.current_read_deadline();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                this.read_deadline = None;
                if deadline.is_some() && buf.filled().len() > before && this.head_since.is_none() {
                    this.head_since = Some(Instant::now());
                }
                Poll::Ready(r)
            }
            Poll::Pending => {
                let Some(deadline) = deadline else {
                    this.read_deadline = None;
                    this.requests.idle_reader.register(cx.waker());
                    // The request may have ended between the look and the registration.
                    if this.requests.in_flight.load(Ordering::SeqCst) == 0 {
                        cx.waker().wake_by_ref();
                    }
                    return Poll::Pending;
                };
                match &mut this.read_deadline {
                    Some((at, sleep)) => {
                        if *at != deadline {
                            *at = deadline;
                            sleep.as_mut().reset(deadline);
                        }
                    }
                    None => {
                        this.read_deadline =
                            Some((deadline, Box::pin(tokio::time::sleep_until(deadline))));
                    }
                }
                let Some((_, sleep)) = &mut this.read_deadline else {
                    return Poll::Pending;
                };
                ready!(sleep.as_mut().poll(cx));
                tracing::debug!("no request within the header or keep-alive timeout: closing");
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no complete request head within the timeout",
                )))
            }
        }
    }
}

impl AsyncWrite for TimedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.timed_write(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.timed_write(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.timed_write(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.timed_write(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_a_quarter_of_the_limit_within_its_bounds() {
        assert_eq!(reserved_files(100), RESERVED_FILES_MIN);
        assert_eq!(reserved_files(256), 64);
        assert_eq!(reserved_files(1024), 256);
        assert_eq!(reserved_files(4096), 1024);
        assert_eq!(reserved_files(1 << 20), RESERVED_FILES_MAX);
    }

    #[test]
    fn connections_and_their_refusals_fit_beside_the_reserve() {
        assert_eq!(connections_room(1024), 614);
        assert_eq!(refusals_max(614), 153);
        assert_eq!(connections_room(4096), 2816);
        assert_eq!(connections_room(20_000), 18_720);
        // Below the reserve and a refusal: one connection, never none.
        assert_eq!(connections_room(0), 1);
        assert_eq!(connections_room(65), 1);
        for limit in (66..5000).chain([65_536, 1 << 20, u64::MAX]) {
            let room = connections_room(limit);
            let used = (room + refusals_max(room)) as u128 + u128::from(reserved_files(limit));
            assert!(
                used <= u128::from(limit),
                "limit {limit}: {room} connections"
            );
            // Not more than rounding left unused either.
            assert!(
                u128::from(limit) - used <= 2,
                "limit {limit}: {room} connections"
            );
        }
    }

    #[test]
    fn refusals_are_a_quarter_of_the_connections_within_their_bound() {
        assert_eq!(refusals_max(1), 1);
        assert_eq!(refusals_max(ADMIN_CONNECTIONS_MAX), 4);
        assert_eq!(refusals_max(256), 64);
        assert_eq!(refusals_max(4096), REFUSALS_IN_FLIGHT_MAX);
    }
}
