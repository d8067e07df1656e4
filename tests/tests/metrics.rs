//! `/_metrics` against a real gateway: the exposition parses, the dedup savings are exact
//! (the same body under many keys is logical N times, physical once times two copies), and
//! the request counters, histograms and byte counters move with the requests made.

use std::time::Duration;

use e2e::prom::{self, Exposition};
use e2e::{Gateway, create_bucket, get_bytes, poll_until, put_bytes, random_body};

/// Bound on waiting for a stored-bytes scan that saw the uploads (scans run every second
/// here, `--stats-scan-secs 1`).
const SCAN_WAIT: Duration = Duration::from_secs(30);

pub fn scrape(gw: &Gateway) -> Exposition {
    let r = gw
        .raw("GET", "/_metrics", &[], b"")
        .unwrap_or_else(|e| panic!("GET /_metrics: {e}"));
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text();
    prom::parse(&text).unwrap_or_else(|e| panic!("not a valid exposition: {e}\n{text}"))
}

fn num(e: &Exposition, name: &str, labels: &[(&str, &str)]) -> f64 {
    e.value(name, labels)
        .unwrap_or_else(|| panic!("no sample {name}{labels:?}"))
}

#[tokio::test]
async fn metrics_show_the_dedup_savings_and_the_requests() {
    let gw = Gateway::start_with(&["--metrics-open", "--stats-scan-secs", "1"], &[]);
    let s3 = gw.client();
    create_bucket(&s3, "metrics-bkt").await;
    let shared = random_body(14, 10_000);
    let other = random_body(15, 3_000);
    let shared_keys = 20u64;
    for n in 0..shared_keys {
        put_bytes(&s3, "metrics-bkt", &format!("same/{n}"), &shared).await;
    }
    put_bytes(&s3, "metrics-bkt", "other/1", &other).await;
    put_bytes(&s3, "metrics-bkt", "other/2", &other).await;
    for n in 0..3 {
        assert_eq!(
            get_bytes(&s3, "metrics-bkt", &format!("same/{n}"))
                .await
                .len(),
            10_000
        );
    }
    let missing = s3
        .get_object()
        .bucket("metrics-bkt")
        .key("nothing")
        .send()
        .await;
    assert!(missing.is_err(), "GET of a missing key succeeded");

    // The scan that saw every upload: objects counted.
    let objects = shared_keys + 2;
    let mut last = None;
    let seen = poll_until(SCAN_WAIT, || {
        let e = scrape(&gw);
        let ok = e.value("gateway_stored_objects", &[]) == Some(objects as f64);
        last = Some(e);
        ok
    });
    let e = last.expect("scraped at least once");
    assert!(
        seen,
        "gateway_stored_objects never reached {objects}: {:?}",
        e.value("gateway_stored_objects", &[])
    );

    let logical = shared_keys * 10_000 + 2 * 3_000;
    let physical = (10_000 + 3_000) * 2;
    assert_eq!(num(&e, "gateway_stored_logical_bytes", &[]), logical as f64);
    assert_eq!(
        num(&e, "gateway_stored_physical_bytes", &[]),
        physical as f64
    );
    assert_eq!(num(&e, "gateway_stored_contents", &[]), 2.0);
    assert_eq!(num(&e, "gateway_stored_references", &[]), objects as f64);
    assert_eq!(num(&e, "gateway_stored_do_not_delete", &[]), 0.0);
    assert_eq!(num(&e, "gateway_stored_unsized_contents", &[]), 0.0);
    assert_eq!(e.families["gateway_stored_logical_bytes"], "gauge");

    // Requests by operation and status.
    let put_ok = [("operation", "PutObject"), ("status", "200")];
    assert_eq!(
        num(&e, "gateway_s3_requests_total", &put_ok),
        objects as f64
    );
    let get_ok = [("operation", "GetObject"), ("status", "200")];
    assert_eq!(num(&e, "gateway_s3_requests_total", &get_ok), 3.0);
    let get_404 = [("operation", "GetObject"), ("status", "404")];
    assert!(num(&e, "gateway_s3_requests_total", &get_404) >= 1.0);
    assert_eq!(
        num(
            &e,
            "gateway_s3_requests_total",
            &[("operation", "CreateBucket"), ("status", "200")]
        ),
        1.0
    );
    // Latency histograms: one observation per request, some time spent.
    let put = [("operation", "PutObject")];
    assert_eq!(
        num(&e, "gateway_s3_request_duration_seconds_count", &put),
        objects as f64
    );
    assert!(num(&e, "gateway_s3_request_duration_seconds_sum", &put) > 0.0);
    assert_eq!(
        e.families["gateway_s3_request_duration_seconds"],
        "histogram"
    );
    // Bytes in (request bodies as sent, framing included) and out (GET bodies).
    assert!(num(&e, "gateway_s3_received_bytes_total", &put) >= logical as f64);
    assert!(
        num(
            &e,
            "gateway_s3_sent_bytes_total",
            &[("operation", "GetObject")]
        ) >= 30_000.0
    );

    // Disks, Valkyrie and replication.
    for index in ["0", "1"] {
        let l = [("pair", "0"), ("index", index)];
        assert!(
            num(&e, "gateway_disk_capacity_bytes", &l) > 0.0,
            "disk {index}"
        );
        assert!(num(&e, "gateway_disk_free_bytes", &l) > 0.0, "disk {index}");
        // The in-process workers keep the names the Valkyrie binary uses.
        assert!(e.value("valkyrie_files_scanned_total", &l).is_some());
        assert!(e.value("valkyrie_errors_total", &l).is_some());
    }
    assert_eq!(num(&e, "gateway_pair_writable", &[("pair", "0")]), 1.0);
    assert_eq!(
        num(
            &e,
            "gateway_pair_flag",
            &[("pair", "0"), ("flag", "READ_ONLY")]
        ),
        0.0
    );
    assert_eq!(num(&e, "gateway_raft_role", &[("role", "leader")]), 1.0);
    assert_eq!(num(&e, "gateway_raft_role", &[("role", "follower")]), 0.0);
    let applied = num(&e, "gateway_raft_applied_index", &[]);
    assert!(
        applied >= objects as f64,
        "every put is an applied command: {applied}"
    );
    assert!(num(&e, "gateway_raft_commit_index", &[]) >= applied);
    assert!(num(&e, "gateway_raft_term", &[]) >= 1.0);
    // One metadata group, the root, holding every record on this node.
    let root = [("group", "0"), ("kind", "root")];
    assert!(num(&e, "gateway_group_records", &root) >= objects as f64);
    assert_eq!(num(&e, "gateway_group_replicas", &root), 1.0);
    assert_eq!(num(&e, "gateway_shard_map_version", &[]), 1.0);

    // Deleting every key of the shared body leaves only the other content.
    for n in 0..shared_keys {
        s3.delete_object()
            .bucket("metrics-bkt")
            .key(format!("same/{n}"))
            .send()
            .await
            .unwrap_or_else(|err| panic!("DeleteObject same/{n}: {err:?}"));
    }
    let drained = poll_until(SCAN_WAIT, || {
        let e = scrape(&gw);
        e.value("gateway_stored_objects", &[]) == Some(2.0)
            && e.value("gateway_stored_physical_bytes", &[]) == Some(6_000.0)
            && e.value("gateway_stored_logical_bytes", &[]) == Some(6_000.0)
    });
    assert!(drained, "after the deletes: {:?}", {
        let e = scrape(&gw);
        (
            e.value("gateway_stored_objects", &[]),
            e.value("gateway_stored_logical_bytes", &[]),
            e.value("gateway_stored_physical_bytes", &[]),
        )
    });
}

/// The metric names a PromQL expression selects: identifiers of ours (`gateway_*`,
/// `valkyrie_*`); label names and functions do not start so.
fn selected_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_string = false;
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c == '"' {
            in_string = !in_string;
            word.clear();
            continue;
        }
        if !in_string && (c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            word.push(c);
            continue;
        }
        if word.starts_with("gateway_") || word.starts_with("valkyrie_") {
            out.push(word.clone());
        }
        word.clear();
    }
    out
}

fn exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr", serde_json::Value::String(e)) => out.push(e.clone()),
                    _ => exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| exprs(v, out)),
        _ => {}
    }
}

#[tokio::test]
async fn every_metric_the_dashboard_queries_is_exported() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../helm/dashboards/gateway.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let dashboard: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path} is not JSON: {e}"));
    let mut all = Vec::new();
    exprs(&dashboard, &mut all);
    assert!(
        all.len() >= 10,
        "only {} queries in the dashboard",
        all.len()
    );

    // A gateway that has served requests, so that every family has samples.
    let gw = Gateway::start_with(&["--metrics-open", "--stats-scan-secs", "1"], &[]);
    let s3 = gw.client();
    create_bucket(&s3, "dash-bkt").await;
    put_bytes(&s3, "dash-bkt", "k", b"dashboard").await;
    assert!(
        poll_until(SCAN_WAIT, || scrape(&gw)
            .value("gateway_stored_objects", &[])
            .is_some()),
        "no stored-bytes scan finished"
    );
    // A failed disk, so that the UNMOVE families have a drain to report (with one pair,
    // it has nowhere to copy to: its files stay, counted as failed).
    let data = gw.data_dir().canonicalize().expect("canonical data dir");
    let body = format!(r#"{{"disk":"local:{}"}}"#, data.join("disk0").display());
    let auth = format!("Bearer {}", gw.admin_token());
    let failed = gw
        .raw(
            "POST",
            "/_admin/disks/fail",
            &[("authorization", &auth)],
            body.as_bytes(),
        )
        .expect("POST /_admin/disks/fail");
    assert_eq!(failed.status, 200, "{}", failed.text());
    assert!(
        poll_until(SCAN_WAIT, || scrape(&gw)
            .value("gateway_unmove_files", &[("pair", "0")])
            .is_some()),
        "no UNMOVE progress in /_metrics"
    );
    let exported = scrape(&gw).names();
    let mut queried: Vec<String> = all.iter().flat_map(|e| selected_names(e)).collect();
    queried.sort();
    queried.dedup();
    assert!(queried.contains(&"gateway_stored_logical_bytes".to_owned()));
    assert!(queried.contains(&"gateway_stored_physical_bytes".to_owned()));
    let unknown: Vec<_> = queried.iter().filter(|n| !exported.contains(*n)).collect();
    assert!(
        unknown.is_empty(),
        "the dashboard queries metrics the gateway does not export: {unknown:?}"
    );
}
