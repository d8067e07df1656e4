//! One log line per S3 request, for operators and log shippers: the request id the client
//! got in `x-amz-request-id`, method, bucket and key, status, bytes in and out, duration.
//!
//! Cheap by design: nothing of the bodies is read or buffered; bytes in is the request's
//! `Content-Length` and bytes out the response body's known size (absent for a body whose
//! length is not known up front). The duration runs to the response's head: a GET's body
//! streams after it.
//!
//! The same observation feeds the request metrics (`telemetry/requests.rs`) and, for a
//! 5xx, the status page's ring of recent errors, whatever the log level.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http_body::Body as _;
use tracing::Level;

use super::request::Target;
use crate::state::{AppState, RequestLogLevel};
use crate::telemetry::recent_errors::RecentError;
use crate::telemetry::requests::Observed;

/// Target of the request lines, so that `RUST_LOG` can also pick them out.
pub const TARGET: &str = "s3_request";

/// What one request line says.
struct Line<'a> {
    request_id: &'a str,
    method: &'a str,
    bucket: Option<&'a str>,
    key: Option<&'a str>,
    /// The raw path, when it does not name a bucket and key (an undecodable one).
    path: Option<&'a str>,
    status: u16,
    bytes_in: Option<u64>,
    bytes_out: Option<u64>,
    duration_ms: f64,
}

/// Middleware on the S3 router, outside the one that sets the request id.
pub async fn log_request(State(app): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let level = app.request_log;
    let started = Instant::now();
    let method = req.method().clone();
    let host = req
        .headers()
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok());
    let target = Target::from_request(req.uri(), host, app.domain.as_deref()).ok();
    let path = target.is_none().then(|| req.uri().path().to_owned());
    let bytes_in = content_length(req.headers());
    let operation = super::operation::of(
        &method,
        req.uri(),
        target.as_ref(),
        req.headers().contains_key("x-amz-copy-source"),
    );
    let resp = next.run(req).await;
    let (bucket, key) = match &target {
        Some(Target::Bucket(b)) => (Some(b.as_str()), None),
        Some(Target::Object { bucket, key }) => (Some(bucket.as_str()), Some(key.as_str())),
        Some(Target::Service) | None => (None, None),
    };
    let line = Line {
        request_id: resp
            .headers()
            .get("x-amz-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or(""),
        method: method.as_str(),
        bucket,
        key,
        path: path.as_deref(),
        status: resp.status().as_u16(),
        bytes_in,
        bytes_out: resp
            .body()
            .size_hint()
            .exact()
            .or_else(|| content_length(resp.headers())),
        duration_ms: started.elapsed().as_micros() as f64 / 1000.0,
    };
    observe(&app, operation, &line);
    emit(level, &line);
    resp
}

fn observe(app: &AppState, operation: &'static str, l: &Line<'_>) {
    app.telemetry.requests.observe(&Observed {
        operation,
        status: l.status,
        bytes_in: l.bytes_in,
        bytes_out: l.bytes_out,
        duration_secs: l.duration_ms / 1000.0,
    });
    if l.status >= 500 {
        let target = match (l.bucket, l.key, l.path) {
            (Some(b), Some(k), _) => format!("{b}/{k}"),
            (Some(b), None, _) => b.to_owned(),
            (None, _, Some(p)) => p.to_owned(),
            (None, _, None) => "/".to_owned(),
        };
        app.telemetry.errors.push(RecentError {
            at_ms: crate::store::now_ms(),
            operation,
            status: l.status,
            request_id: l.request_id.to_owned(),
            target,
        });
    }
}

fn content_length(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// A tracing event's level is part of its static call site, hence one call per level.
fn emit(level: RequestLogLevel, l: &Line<'_>) {
    macro_rules! event {
        ($lvl:expr) => {
            tracing::event!(
                target: TARGET,
                $lvl,
                request_id = l.request_id,
                method = l.method,
                bucket = l.bucket,
                key = l.key,
                path = l.path,
                status = l.status,
                bytes_in = l.bytes_in,
                bytes_out = l.bytes_out,
                duration_ms = l.duration_ms,
                "s3 request"
            )
        };
    }
    match level {
        RequestLogLevel::Off => {}
        RequestLogLevel::Error => event!(Level::ERROR),
        RequestLogLevel::Warn => event!(Level::WARN),
        RequestLogLevel::Info => event!(Level::INFO),
        RequestLogLevel::Debug => event!(Level::DEBUG),
    }
}
