//! Live counters of the S3 requests: how many by operation and status, how long they took,
//! how many bytes came in and went out. Fed by the per-request middleware
//! (`s3/request_log.rs`), read by `/_metrics` and `/_status`.
//!
//! Label sets are bounded: the operation is one of a fixed list of names
//! (`s3/operation.rs`) and the status is an HTTP status code, so the families hold at most
//! a few hundred series whatever clients send.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationStatus {
    pub operation: &'static str,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Operation {
    pub operation: &'static str,
}

/// Latency buckets: 0.5 ms doubling to about 16 s (16 buckets), from a cached small GET
/// to a multi-GiB upload's head.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// One request as the middleware saw it.
pub struct Observed {
    pub operation: &'static str,
    pub status: u16,
    pub bytes_in: Option<u64>,
    pub bytes_out: Option<u64>,
    pub duration_secs: f64,
}

/// The request families. Cloning is cheap (each family is an `Arc` inside), which is how
/// a scrape registers them in its own registry.
#[derive(Clone, Debug)]
pub struct RequestMetrics {
    requests: Family<OperationStatus, Counter>,
    duration: Family<Operation, Histogram, fn() -> Histogram>,
    bytes_in: Family<Operation, Counter>,
    bytes_out: Family<Operation, Counter>,
    answered: Arc<AtomicU64>,
    server_errors: Arc<AtomicU64>,
}

impl Default for RequestMetrics {
    fn default() -> Self {
        RequestMetrics {
            requests: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            bytes_in: Family::default(),
            bytes_out: Family::default(),
            answered: Arc::default(),
            server_errors: Arc::default(),
        }
    }
}

impl RequestMetrics {
    pub fn observe(&self, o: &Observed) {
        let op = Operation {
            operation: o.operation,
        };
        self.requests
            .get_or_create(&OperationStatus {
                operation: o.operation,
                status: o.status,
            })
            .inc();
        self.duration.get_or_create(&op).observe(o.duration_secs);
        if let Some(n) = o.bytes_in {
            self.bytes_in.get_or_create(&op).inc_by(n);
        }
        if let Some(n) = o.bytes_out {
            self.bytes_out.get_or_create(&op).inc_by(n);
        }
        self.answered.fetch_add(1, Ordering::Relaxed);
        if o.status >= 500 {
            self.server_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Requests answered so far, and those answered with a 5xx (for the status page).
    pub fn totals(&self) -> (u64, u64) {
        (
            self.answered.load(Ordering::Relaxed),
            self.server_errors.load(Ordering::Relaxed),
        )
    }

    pub fn register(&self, r: &mut Registry) {
        r.register(
            "gateway_s3_requests",
            "S3 requests answered, by operation and HTTP status",
            self.requests.clone(),
        );
        r.register(
            "gateway_s3_request_duration_seconds",
            "Time from the request to the response's head, by operation",
            self.duration.clone(),
        );
        r.register(
            "gateway_s3_received_bytes",
            "Request body bytes (Content-Length), by operation",
            self.bytes_in.clone(),
        );
        r.register(
            "gateway_s3_sent_bytes",
            "Response body bytes (known length), by operation",
            self.bytes_out.clone(),
        );
    }
}
