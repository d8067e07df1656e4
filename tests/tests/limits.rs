//! Resource limits: no client holds a connection, a file descriptor or memory beyond a
//! timeout or a bound, and stored headers are bounded as S3 bounds them.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::FromRawFd;
use std::time::{Duration, Instant};

use aws_sdk_s3::presigning::PresigningConfig;
use e2e::{
    Gateway, create_bucket, poll_until, put_bytes, random_body, random_token, raw_request_timeout,
    sha1_hex,
};

const MIB: u64 = 1024 * 1024;

fn connect(gw: &Gateway) -> TcpStream {
    TcpStream::connect(("127.0.0.1", gw.port())).expect("connect")
}

/// How a connection the client leaves idle ends: `Ok(elapsed)` when the server closed it
/// (EOF or reset) within `limit`, `Err` when it was still open.
fn closed_by_server(stream: &mut TcpStream, limit: Duration) -> Result<Duration, String> {
    let start = Instant::now();
    stream.set_read_timeout(Some(limit)).expect("read timeout");
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(start.elapsed()),
            // An answer (a 408 or 400) before the close is fine; keep reading to the end.
            Ok(_) if start.elapsed() < limit => continue,
            Ok(_) => return Err("still sending".into()),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(start.elapsed()),
            Err(e) => return Err(format!("open after {:?}: {e}", start.elapsed())),
        }
    }
}

fn health(gw: &Gateway, io_timeout: Duration) -> io::Result<u16> {
    let host = vec![("host".to_string(), format!("127.0.0.1:{}", gw.port()))];
    raw_request_timeout(gw.port(), "GET", "/_health", &host, b"", io_timeout).map(|r| r.status)
}

#[test]
fn a_slowloris_client_is_disconnected_after_the_header_timeout() {
    let gw = Gateway::start_with(&["--header-read-timeout-secs", "2"], &[]);
    let mut slow = connect(&gw);
    slow.write_all(b"GET /_health HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: ")
        .expect("half a header");
    let after = closed_by_server(&mut slow, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("a half header kept its connection: {e}"));
    assert!(
        after >= Duration::from_millis(1500) && after < Duration::from_secs(10),
        "closed after {after:?}, expected about 2 s"
    );
    // A connection that sends nothing at all is closed the same way.
    let mut silent = connect(&gw);
    closed_by_server(&mut silent, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("a silent connection was kept: {e}"));
    assert_eq!(health(&gw, Duration::from_secs(10)).expect("health"), 200);
}

#[test]
fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let gw = Gateway::start_with(&["--keepalive-idle-secs", "2"], &[]);
    let mut conn = connect(&gw);
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    conn.write_all(b"GET /_health HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        .expect("request");
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"ok\n") {
        let n = conn.read(&mut buf).expect("response");
        assert!(n > 0, "closed before the response");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200"), "{got:?}");
    let after = closed_by_server(&mut conn, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("an idle keep-alive connection was kept: {e}"));
    assert!(after < Duration::from_secs(10), "closed after {after:?}");
}

#[test]
fn past_the_connection_bound_a_request_gets_slow_down_and_health_answers_once_idle_sockets_are_cut()
{
    let gw = Gateway::start_with(
        &["--max-connections", "16", "--header-read-timeout-secs", "3"],
        &[],
    );
    let mut idle: Vec<TcpStream> = (0..16).map(|_| connect(&gw)).collect();
    // The gateway accepts in order: the next connection is the 17th.
    std::thread::sleep(Duration::from_millis(300));
    let host = vec![("host".to_string(), format!("127.0.0.1:{}", gw.port()))];
    let resp = raw_request_timeout(
        gw.port(),
        "GET",
        "/_health",
        &host,
        b"",
        Duration::from_secs(10),
    )
    .unwrap_or_else(|e| panic!("a request past the bound hung or was dropped: {e}"));
    assert_eq!(resp.status, 503, "{}", resp.text());
    assert_eq!(
        resp.error_code().as_deref(),
        Some("SlowDown"),
        "{}",
        resp.text()
    );
    assert!(
        poll_until(Duration::from_secs(20), || health(
            &gw,
            Duration::from_secs(5)
        )
        .is_ok_and(|s| s == 200)),
        "GET /_health did not answer once the idle sockets were cut\n{}",
        gw.log_tail(30)
    );
    for (i, s) in idle.iter_mut().enumerate() {
        closed_by_server(s, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("idle socket {i}: {e}"));
    }
}

#[test]
fn an_upload_that_stops_sending_fails_after_the_body_idle_timeout_and_stores_nothing() {
    let token = random_token(24);
    let gw = Gateway::start_with(
        &["--body-idle-timeout-secs", "2"],
        &[("GATEWAY_NATIVE_TOKEN", &token)],
    );
    let body = random_body(7, 100_000);
    let sha1 = sha1_hex(&body);
    let mut conn = connect(&gw);
    let head = format!(
        "PUT /_files/{sha1}?magic=1 HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {token}\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).expect("head");
    conn.write_all(&body[..1000]).expect("some body");
    let started = Instant::now();
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut answer = Vec::new();
    let read = conn.read_to_end(&mut answer);
    let after = started.elapsed();
    assert!(
        read.is_ok()
            || read
                .as_ref()
                .is_err_and(|e| e.kind() == io::ErrorKind::ConnectionReset),
        "the stalled upload kept its connection: {read:?} after {after:?}"
    );
    assert!(after < Duration::from_secs(12), "ended after {after:?}");
    if !answer.is_empty() {
        let text = String::from_utf8_lossy(&answer);
        assert!(
            !text.starts_with("HTTP/1.1 2"),
            "a stalled upload succeeded: {text}"
        );
    }
    assert!(gw.admin_file(&sha1).is_none(), "content recorded");
}

/// A socket whose receive buffer is small, so that a response the client does not read
/// stays in the gateway rather than in this process's kernel buffers.
fn connect_small_window(port: u16) -> TcpStream {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    // SAFETY: plain socket calls on a descriptor this function owns until it is handed
    // to TcpStream.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0, "socket: {}", io::Error::last_os_error());
        let size: libc::c_int = 16 * 1024;
        let set = libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        assert_eq!(set, 0, "SO_RCVBUF: {}", io::Error::last_os_error());
        let stream = TcpStream::from_raw_fd(fd);
        let SocketAddr::V4(v4) = addr else {
            unreachable!()
        };
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: v4.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*v4.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        let r = libc::connect(
            fd,
            (&sin as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(r, 0, "connect: {}", io::Error::last_os_error());
        stream
    }
}

/// The gateway's resident set, from /proc.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kb * 1024
}

#[tokio::test(flavor = "multi_thread")]
async fn stalled_downloads_stay_within_the_read_budget_and_are_cut_after_the_send_timeout() {
    const BUDGET: u64 = 16 * MIB;
    const MARGIN: u64 = 48 * MIB;
    const STALLED: usize = 60;
    let budget = BUDGET.to_string();
    let gw = Gateway::start_with(
        &["--memory-read-bytes", &budget, "--send-timeout-secs", "3"],
        &[],
    );
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(9, 8 * MIB as usize);
    put_bytes(&s3, "bkt", "big", &body).await;
    let presigned = s3
        .get_object()
        .bucket("bkt")
        .key("big")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(600)).expect("config"))
        .await
        .expect("presign");
    let target = presigned
        .uri()
        .strip_prefix(&gw.endpoint())
        .expect("presigned URL on the gateway")
        .to_string();
    let pid = gw.pid().expect("gateway pid");
    let baseline = rss_bytes(pid);
    let request = format!(
        "GET {target} HTTP/1.1\r\nhost: 127.0.0.1:{}\r\n\r\n",
        gw.port()
    );
    let mut stalled: Vec<TcpStream> = (0..STALLED)
        .map(|_| {
            let mut s = connect_small_window(gw.port());
            s.write_all(request.as_bytes()).expect("GET");
            s
        })
        .collect();
    // Nothing is read for a while: the budget's reads stall, are cut after the send
    // timeout, and the waiting ones take their place or are refused.
    let mut peak = baseline;
    let watch_until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < watch_until {
        peak = peak.max(rss_bytes(pid));
        std::thread::sleep(Duration::from_millis(100));
    }
    let grown = peak.saturating_sub(baseline);
    assert!(
        grown < BUDGET + MARGIN,
        "RSS grew by {} MiB with {STALLED} stalled GETs (budget {} MiB)",
        grown / MIB,
        BUDGET / MIB
    );
    // Every connection ended without the whole body: cut after the send timeout, or
    // refused with SlowDown once the budget stayed full.
    let (mut cut, mut refused) = (0, 0);
    for (i, s) in stalled.iter_mut().enumerate() {
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        // To the end of a cut response, or of a whole SlowDown answer (whose connection
        // may stay open for the next request).
        let mut got = Vec::new();
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!("connection {i} still open: {e} after {} bytes", got.len()),
            }
            if got.starts_with(b"HTTP/1.1 503") && got.ends_with(b"</Error>") {
                break;
            }
        }
        let text = String::from_utf8_lossy(&got[..got.len().min(2000)]).into_owned();
        if text.starts_with("HTTP/1.1 503") {
            assert!(text.contains("SlowDown"), "{text}");
            refused += 1;
        } else {
            assert!(text.starts_with("HTTP/1.1 200"), "connection {i}: {text}");
            assert!(
                (got.len() as u64) < 8 * MIB,
                "connection {i} got the whole body although it stalled"
            );
            cut += 1;
        }
    }
    eprintln!(
        "{STALLED} stalled GETs of 8 MiB: RSS grew by {} MiB at most; {cut} cut after the send timeout, {refused} refused with SlowDown",
        grown / MIB
    );
    assert!(cut > 0, "no read was served at all ({refused} refused)");
    // The gateway still serves a reader that reads.
    let fresh = raw_request_timeout(
        gw.port(),
        "GET",
        &target,
        &[("host".into(), format!("127.0.0.1:{}", gw.port()))],
        b"",
        Duration::from_secs(30),
    )
    .expect("GET after the stalled ones");
    assert_eq!(fresh.status, 200);
    assert!(
        fresh.complete && fresh.body == body,
        "fresh GET body differs"
    );
}

#[tokio::test]
async fn oversized_stored_headers_are_refused_as_s3_does() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    put_bytes(&s3, "bkt", "src", b"source").await;
    let huge = "a".repeat(200 * 1024);
    let attachment = format!("attachment; filename=\"{huge}\"");
    let put = gw
        .signed("PUT", "/bkt/disposition")
        .header("content-disposition", &attachment)
        .body(b"body")
        .send();
    assert_eq!(put.status, 400, "{}", put.text());
    assert_eq!(
        put.error_code().as_deref(),
        Some("RequestHeaderSectionTooLarge")
    );
    let head = gw.signed("HEAD", "/bkt/disposition").send();
    assert_eq!(head.status, 404, "the refused object exists");

    let meta = "m".repeat(3 * 1024);
    let put = gw
        .signed("PUT", "/bkt/meta")
        .header("x-amz-meta-data", &meta)
        .body(b"body")
        .send();
    assert_eq!(put.status, 400, "{}", put.text());
    assert_eq!(put.error_code().as_deref(), Some("MetadataTooLarge"));

    let copy = gw
        .signed("PUT", "/bkt/copy")
        .header("x-amz-copy-source", "/bkt/src")
        .header("x-amz-metadata-directive", "REPLACE")
        .header("content-disposition", &attachment)
        .send();
    assert_eq!(copy.status, 400, "{}", copy.text());
    assert_eq!(
        copy.error_code().as_deref(),
        Some("RequestHeaderSectionTooLarge")
    );

    let create = gw
        .signed("POST", "/bkt/multi?uploads")
        .header("cache-control", &huge)
        .send();
    assert_eq!(create.status, 400, "{}", create.text());
    assert_eq!(
        create.error_code().as_deref(),
        Some("RequestHeaderSectionTooLarge")
    );

    // Headers of an ordinary size are still stored and served.
    let ok = gw
        .signed("PUT", "/bkt/fine")
        .header("content-disposition", "attachment; filename=\"report.pdf\"")
        .header("x-amz-meta-owner", "someone")
        .body(b"body")
        .send();
    assert_eq!(ok.status, 200, "{}", ok.text());
    let head = gw.signed("HEAD", "/bkt/fine").send();
    assert_eq!(
        head.header("content-disposition"),
        Some("attachment; filename=\"report.pdf\"")
    );
}
