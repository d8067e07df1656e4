//! The real `valkyrie` binary against a real HTTP catalog: it deletes what the catalog
//! says, prints its metrics on SIGUSR1 and stops on SIGTERM.

use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use placement::{ContentHasher, Sha1};
use tokio::net::TcpListener;

/// A gateway catalog with one pair and one `deleting` entry for `sha1`; records every
/// request line.
async fn catalog(d0: String, d1: String, sha1: Sha1) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let (log, d0, d1) = (log.clone(), d0.clone(), d1.clone());
            let service = service_fn(move |req: Request<Incoming>| {
                let line = format!("{} {}", req.method(), req.uri());
                let authorized = req
                    .headers()
                    .get("authorization")
                    .is_some_and(|v| v == "Bearer t0ken");
                log.lock().unwrap().push(line.clone());
                let hex = sha1.to_hex();
                let (status, body) = if !authorized {
                    (401, String::new())
                } else if line == "GET /_catalog/pairs" {
                    (
                        200,
                        format!(
                            r#"{{"pairs":[{{"id":0,"disks":["local:{d0}","local:{d1}"],"flags":[],"free_bytes":[0,0],"capacity_bytes":[0,0]}}]}}"#
                        ),
                    )
                } else if line.starts_with("GET /_catalog/deleting?pair=0&limit=") {
                    if line.contains("after=") {
                        (200, r#"{"entries":[]}"#.to_string())
                    } else {
                        (
                            200,
                            format!(r#"{{"entries":[{{"sha1":"{hex}","pair":0,"since":1}}]}}"#),
                        )
                    }
                } else if line.starts_with("GET /_catalog/files/") {
                    (404, String::new())
                } else if line == format!("POST /_catalog/files/{hex}/fenced") {
                    (200, "null".to_string())
                } else if line == format!("DELETE /_catalog/deleting/{hex}?pair=0") {
                    (204, String::new())
                } else {
                    (400, String::new())
                };
                async move {
                    Ok::<_, Infallible>(
                        Response::builder()
                            .status(status)
                            .body(Full::new(Bytes::from(body)))
                            .unwrap(),
                    )
                }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (base, seen)
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_quarantines_reports_and_stops() {
    let d0 = tempfile::tempdir().unwrap();
    let d1 = tempfile::tempdir().unwrap();
    // Content whose master is disk 0: disk 1, the slave, quarantines it and removes the
    // entry.
    let body = (0..)
        .map(|i| format!("attachment {i}").into_bytes())
        .find(|b| ContentHasher::digest(b).sha1.master_disk() == 0)
        .unwrap();
    let sha1 = ContentHasher::digest(&body).sha1;
    let hex = sha1.to_hex();
    let dir = d1.path().join(&hex[0..2]).join(&hex[2..4]);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(&hex), &body).unwrap();

    let (base, seen) = catalog(
        d0.path().display().to_string(),
        d1.path().display().to_string(),
        sha1,
    )
    .await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_valkyrie"))
        .args(["--disk", &d1.path().display().to_string()])
        .args(["--pair", "0", "--index", "1", "--catalog", &base])
        .args(["--slave-delay-secs", "0", "--scrub-bytes-per-sec", "0"])
        .env("VALKYRIE_CATALOG_TOKEN", "t0ken")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let stdout = child.stdout.take().unwrap();
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if lines_tx.send(line).is_err() {
                return;
            }
        }
    });

    let delete = format!("DELETE /_catalog/deleting/{hex}?pair=0");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !seen.lock().unwrap().contains(&delete) {
        assert!(
            Instant::now() < deadline,
            "no DELETE: {:?}",
            seen.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!dir.join(&hex).exists());
    let quarantined: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(quarantined.len(), 1);
    assert!(quarantined[0].starts_with(&format!("{hex}.deleted.")));

    signal(pid, "USR1");
    let line = lines_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let metrics: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(metrics["quarantined"], 1);
    assert_eq!(metrics["deleting_removed"], 1);

    signal(pid, "TERM");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "valkyrie did not stop on SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_missing_token_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_valkyrie"))
        .args(["--disk", &d.path().display().to_string()])
        .args([
            "--pair",
            "0",
            "--index",
            "0",
            "--catalog",
            "http://127.0.0.1:9",
        ])
        .env_remove("VALKYRIE_CATALOG_TOKEN")
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(2));
    let status = Command::new(env!("CARGO_BIN_EXE_valkyrie"))
        .args(["--disk", &d.path().display().to_string()])
        .args([
            "--pair",
            "0",
            "--index",
            "2",
            "--catalog",
            "http://127.0.0.1:9",
        ])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(2));
}
