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
//!   `503 SlowDown` (the S3 error clients retry with back-off) and closed, so a flood meets
//!   a clear refusal and the file descriptors stay below `RLIMIT_NOFILE`, which
//!   [`raise_open_files_limit`] raises to its hard limit at start.
//! - **TLS** ([`super::tls`]): the same bounds hold beneath the TLS layer, on the socket's
//!   bytes. The handshake counts as the start of the first request's head: it must end
//!   within the header read timeout. The refusal of a connection over the bound is sent
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
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

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

/// Descriptors kept for everything but client connections (disks, the metadata database,
/// peers, WebDAV nodes): the connection bound is lowered to fit beside them.
pub const RESERVED_FILES: u64 = 1024;
/// Refusals (`503 SlowDown`) being written at once; past it, a connection over the bound
/// is closed without an answer.
const REFUSALS_IN_FLIGHT_MAX: usize = 256;
/// How long a refusal waits for the request it refuses (read so that closing does not
/// reset the connection before the client reads the answer), and for its answer to leave.
const REFUSAL_IO_SECS: u64 = 2;
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

/// Serves `app` on `listener` (over TLS with `tls`, plain HTTP without) until `shutdown`
/// completes, then lets the connections in progress finish (bounded by
/// [`SHUTDOWN_DRAIN_SECS`]).
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(
        limits.max_connections.clamp(1, Semaphore::MAX_PERMITS),
    ));
    let refusals = Arc::new(Semaphore::new(REFUSALS_IN_FLIGHT_MAX));
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

async fn refuse(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    answer: Bytes,
    _permit: OwnedSemaphorePermit,
) {
    let io_bound = Duration::from_secs(REFUSAL_IO_SECS);
    match tls {
        None => refuse_on(stream, &answer, io_bound).await,
        Some(tls) => {
            if let Ok(Ok(stream)) = tokio::time::timeout(io_bound, tls.accept(stream)).await {
                refuse_on(stream, &answer, io_bound).await;
            }
        }
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
        // Whatever else the client sends is read and dropped until it closes, briefly,
        // so that the close does not reset the answer away.
        let _ = tokio::time::timeout(io_bound, async {
            while stream.read(&mut request).await.is_ok_and(|n| n > 0) {}
        })
        .await;
    }
}

async fn serve_connection(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    app: Router,
    limits: ConnectionLimits,
    _slot: OwnedSemaphorePermit,
    stop: watch::Receiver<bool>,
) {
    let requests = Arc::new(Requests::default());
    let timed = TimedIo::new(stream, requests.clone(), &limits);
    let Some(tls) = tls else {
        return serve_http(timed, requests, app, &limits, stop).await;
    };
    // TimedIo bounds each read of the handshake; this bounds the whole of it.
    let handshake_bound = Duration::from_secs(limits.header_read_timeout_secs);
    let handshake = tokio::time::timeout(handshake_bound, tls.accept(timed));
    let mut stopping = stop.clone();
    let accepted = tokio::select! {
        accepted = handshake => accepted,
        () = stopped(&mut stopping) => return,
    };
    match accepted {
        Ok(Ok(stream)) => serve_http(stream, requests, app, &limits, stop).await,
        // Plain HTTP, an old protocol version, an unknown certificate: nothing to serve.
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
/// a connection's `io` until it ends or the server stops.
async fn serve_http(
    io: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
    requests: Arc<Requests>,
    app: Router,
    limits: &ConnectionLimits,
    mut stop: watch::Receiver<bool>,
) {
    let io = TokioIo::new(io);
    let body_idle = Duration::from_secs(limits.body_idle_timeout_secs);
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let in_flight = InFlight::start(requests.clone());
        let app = app.clone();
        async move {
            let req = req.map(|b| Body::new(IdleTimedBody::new(b, body_idle)));
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
