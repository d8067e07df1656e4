//! A connection storm right after a restart (the seed's outage: every client reconnecting
//! at once): 2 000 connections opened together, each with a presigned GET, are each served
//! byte-exact or refused with a clean 503 SlowDown, and the gateway stays up. Also: the
//! gateway raises its own open-files limit at start (started here with a low soft limit).
//!
//! Its own test binary: it lowers this process's soft `RLIMIT_NOFILE` while the gateway
//! starts (the child inherits it), which must not race other tests' processes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use aws_sdk_s3::presigning::PresigningConfig;
use e2e::{Gateway, create_bucket, put_bytes, random_body};
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

const CONNECTIONS: usize = 2_000;
/// The soft open-files limit the gateway is started with: far below the storm.
const LOW_SOFT_LIMIT: u64 = 512;
/// Bound on one connection: connect (SYN retries while the accept queue is full take
/// seconds), send, and read the whole answer.
const CONNECTION_BOUND: Duration = Duration::from_secs(90);

/// What one connection of the storm got.
#[derive(Debug)]
enum Outcome {
    Served,
    SlowDown,
    Wrong(String),
}

fn set_soft_nofile(soft: u64) {
    let hard = getrlimit(Resource::Nofile).maximum;
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(soft),
            maximum: hard,
        },
    )
    .expect("setrlimit NOFILE");
}

/// (soft, hard) "Max open files" of a running process.
fn open_files_limits(pid: u32) -> (String, String) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("/proc limits");
    let line = text
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a Max open files line");
    let mut fields = line["Max open files".len()..].split_whitespace();
    (
        fields.next().unwrap_or_default().to_string(),
        fields.next().unwrap_or_default().to_string(),
    )
}

/// One connection: a GET of `target` with `Connection: close`, the answer read to EOF.
fn one(port: u16, target: &str, want: &[u8]) -> Outcome {
    let started = Instant::now();
    let mut s = match TcpStream::connect(("127.0.0.1", port)) {
        Ok(s) => s,
        Err(e) => return Outcome::Wrong(format!("connect: {e}")),
    };
    let left = CONNECTION_BOUND.saturating_sub(started.elapsed());
    if left.is_zero() {
        return Outcome::Wrong("connected after the bound".into());
    }
    let _ = s.set_read_timeout(Some(left));
    let _ = s.set_write_timeout(Some(left));
    let req =
        format!("GET {target} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nconnection: close\r\n\r\n");
    if let Err(e) = s.write_all(req.as_bytes()) {
        return Outcome::Wrong(format!("send: {e}"));
    }
    let mut answer = Vec::with_capacity(want.len() + 1024);
    if let Err(e) = s.read_to_end(&mut answer) {
        return Outcome::Wrong(format!("read after {} bytes: {e}", answer.len()));
    }
    let Some(split) = answer.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Outcome::Wrong(format!("no header end in {} bytes", answer.len()));
    };
    let head = String::from_utf8_lossy(&answer[..split]).to_string();
    let body = &answer[split + 4..];
    let status = head.split_whitespace().nth(1).unwrap_or_default();
    match status {
        "200" if body == want => Outcome::Served,
        "200" => Outcome::Wrong(format!("200 with {} bytes, not the object", body.len())),
        "503" if String::from_utf8_lossy(body).contains("<Code>SlowDown</Code>") => {
            Outcome::SlowDown
        }
        _ => Outcome::Wrong(format!(
            "{head}\n{}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        )),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_connections_right_after_a_restart_are_served_or_refused_cleanly() {
    let hard = getrlimit(Resource::Nofile)
        .maximum
        .expect("a finite hard NOFILE limit");
    assert!(
        hard >= (CONNECTIONS as u64) * 2 + 256,
        "this test needs a hard open-files limit of at least {}, the machine has {hard}",
        CONNECTIONS * 2 + 256
    );

    // The gateway inherits a low soft limit and must raise it itself.
    set_soft_nofile(LOW_SOFT_LIMIT);
    let mut gw = Gateway::start();
    set_soft_nofile(hard);
    let s3 = gw.client();
    create_bucket(&s3, "storm").await;
    let body = random_body(2_000, 64 * 1024);
    put_bytes(&s3, "storm", "newsletter.pdf", &body).await;
    let url = s3
        .get_object()
        .bucket("storm")
        .key("newsletter.pdf")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(3600)).expect("presign"))
        .await
        .expect("presigned GET")
        .uri()
        .to_string();
    let target = url[url.find("/storm/").expect("path-style URL")..].to_string();

    // Right after a restart, as after the seed's outage.
    gw.kill9();
    set_soft_nofile(LOW_SOFT_LIMIT);
    gw.restart();
    set_soft_nofile(hard);
    let pid = gw.pid().expect("running gateway");
    let (soft, gw_hard) = open_files_limits(pid);
    assert_eq!(
        soft, gw_hard,
        "the gateway did not raise its soft open-files limit (started with {LOW_SOFT_LIMIT})"
    );

    let port = gw.port();
    let target = Arc::new(target);
    let want = body.clone();
    let body = Arc::new(body);
    let start = Arc::new(Barrier::new(CONNECTIONS));
    let started = Instant::now();
    let outcomes: Vec<Outcome> = tokio::task::spawn_blocking(move || {
        let threads: Vec<_> = (0..CONNECTIONS)
            .map(|_| {
                let (target, body, start) = (target.clone(), body.clone(), start.clone());
                thread::Builder::new()
                    .stack_size(128 * 1024)
                    .spawn(move || {
                        start.wait();
                        one(port, &target, &body)
                    })
                    .expect("spawn a storm thread")
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("storm thread"))
            .collect()
    })
    .await
    .expect("storm");
    let elapsed = started.elapsed();

    let served = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Served))
        .count();
    let slow_down = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::SlowDown))
        .count();
    let wrong: Vec<String> = outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Wrong(w) => Some(w.clone()),
            _ => None,
        })
        .collect();
    println!(
        "{CONNECTIONS} connections at once: {served} served, {slow_down} SlowDown, {} other, in {elapsed:?}",
        wrong.len()
    );
    assert!(
        wrong.is_empty(),
        "{} of {CONNECTIONS} connections got neither the object nor a SlowDown, e.g.:\n{}\n{}",
        wrong.len(),
        wrong[..wrong.len().min(5)].join("\n"),
        gw.log_tail(20)
    );
    assert!(served > 0, "nothing was served");

    // Still up and serving.
    assert_eq!(
        e2e::get_bytes(&gw.client(), "storm", "newsletter.pdf").await,
        want
    );
}
