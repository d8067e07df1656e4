//! Logs that fit their destination: no terminal colour codes in a file, `--log-format json`
//! one JSON object per line, and one line per S3 request carrying the request id the client
//! got, the key and the status, at `--request-log-level` (or none with `off`).
//!
//! The gateway's stderr goes to a file here, as under a service manager.

use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use e2e::{Gateway, GatewayOptions};

/// How long a request line may take to reach the file after the response arrived (it is
/// written before the response is sent; the margin is for a slow machine's scheduling).
const LINE_WAIT: Duration = Duration::from_secs(5);
const KEY: &str = "dir/a b.txt";
const KEY_ENCODED: &str = "dir/a%20b.txt";

struct Logged {
    gw: Gateway,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
}

fn start(args: &[&str], env: &[(&str, &str)]) -> Logged {
    let dir = tempfile::tempdir().expect("temp dir");
    let stderr = dir.path().join("stderr.log");
    let gw = Gateway::start_opts(GatewayOptions {
        args: args.iter().map(|a| a.to_string()).collect(),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        stderr_file: Some(stderr.clone()),
        ..GatewayOptions::default()
    });
    Logged {
        gw,
        stderr,
        _dir: dir,
    }
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Creates a bucket, PUTs and GETs one object; the request ids of the PUT and the GET.
fn put_and_get(gw: &Gateway) -> (String, String) {
    let made = gw.signed("PUT", "/logbkt").send();
    assert_eq!(made.status, 200, "CreateBucket: {}", made.text());
    let target = format!("/logbkt/{KEY_ENCODED}");
    let put = gw.signed("PUT", &target).body(b"hello logs").send();
    assert_eq!(put.status, 200, "PUT: {}", put.text());
    let get = gw.signed("GET", &target).send();
    assert_eq!(get.status, 200, "GET: {}", get.text());
    assert_eq!(get.body, b"hello logs");
    let id = |r: &e2e::RawResponse| {
        r.header("x-amz-request-id")
            .expect("x-amz-request-id on the response")
            .to_string()
    };
    (id(&put), id(&get))
}

/// Every line of the file as JSON; panics on a line that is not an object.
fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    let text = String::from_utf8(read(path)).expect("stderr is UTF-8");
    text.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("stderr line is not JSON ({e}): {line:?}"));
            assert!(v.is_object(), "not a JSON object: {line:?}");
            v
        })
        .collect()
}

fn request_lines(lines: &[serde_json::Value]) -> Vec<&serde_json::Value> {
    lines
        .iter()
        .filter(|v| v["target"] == "s3_request")
        .collect()
}

#[test]
fn text_logs_in_a_file_carry_no_colour_codes() {
    let l = start(&[], &[]);
    put_and_get(&l.gw);
    // The request lines are there (written before each response was sent)...
    let deadline = Instant::now() + LINE_WAIT;
    let bytes = loop {
        let bytes = read(&l.stderr);
        let text = String::from_utf8_lossy(&bytes);
        if text.matches("s3 request").count() >= 3 || Instant::now() > deadline {
            break bytes;
        }
        thread::sleep(Duration::from_millis(50));
    };
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.matches("s3 request").count() >= 3,
        "expected the request lines in the text log:\n{text}"
    );
    // ...and nothing in the file is an escape sequence.
    assert!(
        !bytes.contains(&0x1b),
        "ESC byte in stderr written to a file:\n{text}"
    );
}

#[test]
fn json_request_lines_carry_the_clients_request_id_key_and_status() {
    let l = start(
        &["--log-format", "json", "--request-log-level", "warn"],
        &[],
    );
    let (put_id, get_id) = put_and_get(&l.gw);
    let deadline = Instant::now() + LINE_WAIT;
    let lines = loop {
        let lines = json_lines(&l.stderr);
        let ids: Vec<_> = request_lines(&lines)
            .iter()
            .map(|v| v["request_id"].clone())
            .collect();
        let both = ids.contains(&put_id.as_str().into()) && ids.contains(&get_id.as_str().into());
        if both || Instant::now() > deadline {
            break lines;
        }
        thread::sleep(Duration::from_millis(50));
    };
    assert!(!lines.is_empty(), "no log line at all");
    let requests = request_lines(&lines);
    for (id, method) in [(&put_id, "PUT"), (&get_id, "GET")] {
        let line = requests
            .iter()
            .find(|v| v["request_id"] == id.as_str())
            .unwrap_or_else(|| {
                panic!("no request line with the {method}'s id {id}: {requests:#?}")
            });
        assert_eq!(line["level"], "WARN", "{line}");
        assert_eq!(line["method"], method, "{line}");
        assert_eq!(line["bucket"], "logbkt", "{line}");
        assert_eq!(line["key"], KEY, "{line}");
        assert_eq!(line["status"], 200, "{line}");
        assert!(line["duration_ms"].is_number(), "{line}");
    }
    let put = requests
        .iter()
        .find(|v| v["request_id"] == put_id.as_str())
        .expect("the PUT's line");
    assert_eq!(put["bytes_in"], 10, "the PUT's Content-Length: {put}");
}

#[test]
fn request_log_level_off_writes_no_request_line() {
    // The format from the environment this time.
    let l = start(
        &["--request-log-level", "off"],
        &[("GATEWAY_LOG_FORMAT", "json")],
    );
    put_and_get(&l.gw);
    // A request after the ones that must not be logged: once its (admin) answer is back,
    // any line of the S3 requests before it would have been written.
    let health = l.gw.raw("GET", "/_health", &[], b"").expect("GET /_health");
    assert_eq!(health.status, 200);
    let lines = json_lines(&l.stderr);
    assert!(!lines.is_empty(), "no log line at all (startup logs)");
    let requests = request_lines(&lines);
    assert!(
        requests.is_empty(),
        "request lines with --request-log-level off: {requests:#?}"
    );
}
