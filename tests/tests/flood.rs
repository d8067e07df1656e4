//! A flood of connections: held open idle, more of them than `--max-connections`, they
//! must not lock the health checks out (`--admin-listen` has its own bound), and a client
//! over the bound gets `503 SlowDown`, never a silent close, until they go.
//!
//! The flood is [`FLOOD`] sockets held by this process: its soft `RLIMIT_NOFILE` is raised
//! to the hard limit first; under a hard limit too low for them, it holds what the limit
//! allows less [`OWN_FILES`] (still far over the gateway's bound of [`MAX_CONNECTIONS`]).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use e2e::{Gateway, RawResponse, Remote, poll_until, raw_request_at};

/// Idle connections held at once, as in the issue.
const FLOOD: usize = 5000;
/// The gateway's bound, well below the flood.
const MAX_CONNECTIONS: usize = 256;
/// Descriptors this test process keeps for itself: the gateway's pipes, the test's own
/// requests, the test harness.
const OWN_FILES: u64 = 64;
/// How long a probe may take while the flood is held (a kubelet's default timeout).
const PROBE_SECS: u64 = 1;

/// Raises this process's soft open files limit to its hard limit; the soft limit after.
fn raise_open_files_limit() -> u64 {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        },
    )
    .expect("raise RLIMIT_NOFILE to its hard limit");
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// `gw` as a [`Remote`] whose address is its admin listener's.
fn admin_remote(gw: &Gateway) -> Remote {
    let admin = gw
        .admin_addr()
        .unwrap_or_else(|| panic!("no 'admin listening on' line\n{}", gw.log_tail(30)));
    Remote {
        host: admin.ip(),
        port: admin.port(),
        ..gw.remote()
    }
}

/// Opens `count` connections to `addr` and leaves them idle; panics if a tenth of them
/// cannot be opened.
fn hold_idle(addr: SocketAddr, count: usize) -> Vec<TcpStream> {
    let held: Vec<TcpStream> = (0..count)
        .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(10)).ok())
        .collect();
    assert!(
        held.len() >= count - count / 10,
        "opened {} of {count} connections",
        held.len()
    );
    held
}

fn assert_slow_down(resp: &RawResponse) {
    assert_eq!(resp.status, 503, "{}", resp.text());
    assert_eq!(
        resp.error_code().as_deref(),
        Some("SlowDown"),
        "{}",
        resp.text()
    );
    assert_eq!(
        resp.header("connection"),
        Some("close"),
        "{:?}",
        resp.headers
    );
    assert!(resp.complete, "the answer was cut: {:?}", resp.body_error);
}

#[test]
fn a_flood_of_idle_connections_leaves_the_admin_listener_answering_and_s3_refusing_with_slow_down()
{
    let files = raise_open_files_limit();
    let flood = FLOOD.min(usize::try_from(files.saturating_sub(OWN_FILES)).unwrap_or(FLOOD));
    assert!(
        flood > 2 * MAX_CONNECTIONS,
        "an open files limit of {files} cannot hold a flood"
    );
    let max_connections = MAX_CONNECTIONS.to_string();
    let gw = Gateway::start_with(
        &[
            "--admin-listen",
            "127.0.0.1:0",
            "--max-connections",
            &max_connections,
            // The flood stays connected for the whole test.
            "--header-read-timeout-secs",
            "120",
        ],
        &[],
    );
    let admin = admin_remote(&gw);
    let s3 = gw.remote();
    assert_eq!(
        gw.signed("GET", "/")
            .try_send()
            .expect("list buckets")
            .status,
        200
    );

    let mut idle = hold_idle(s3.addr(), flood);

    let probe = Duration::from_secs(PROBE_SECS);
    let started = Instant::now();
    let health = admin
        .raw("GET", "/_health", &[], b"", probe)
        .unwrap_or_else(|e| panic!("/_health on the admin listener under the flood: {e}"));
    assert_eq!(health.status, 200, "{}", health.text());
    assert!(
        started.elapsed() < probe,
        "/_health took {:?}",
        started.elapsed()
    );
    let metrics = admin
        .admin_get("/_metrics", Duration::from_secs(5))
        .expect("/_metrics on the admin listener");
    assert_eq!(metrics.status, 200, "{}", metrics.text());
    assert!(metrics.text().contains("gateway_"), "{}", metrics.text());
    // The same authentication as on the S3 listener.
    let anonymous = admin
        .raw("GET", "/_metrics", &[], b"", Duration::from_secs(5))
        .expect("/_metrics without a token");
    assert!(
        matches!(anonymous.status, 401 | 403),
        "{}: {}",
        anonymous.status,
        anonymous.text()
    );

    // Behind the whole flood in the accept queue: over the bound.
    let refused = gw
        .signed("GET", "/")
        .try_send()
        .unwrap_or_else(|e| panic!("an S3 request over the bound got no answer: {e}"));
    assert_slow_down(&refused);

    // The flood's own sockets over the bound were answered too (some, at least: the ones
    // read here; none was closed unanswered).
    for (i, socket) in idle
        .iter_mut()
        .skip(MAX_CONNECTIONS)
        .step_by(97)
        .enumerate()
    {
        socket
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let mut answer = Vec::new();
        let _ = socket.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 503") && answer.contains("<Code>SlowDown</Code>"),
            "idle socket {i} over the bound: {answer:?}"
        );
    }

    drop(idle);
    assert!(
        poll_until(Duration::from_secs(30), || gw
            .signed("GET", "/")
            .try_send()
            .is_ok_and(|r| r.status == 200)),
        "S3 did not serve again once the flood closed\n{}",
        gw.log_tail(30)
    );
}

#[test]
fn a_request_that_comes_late_over_the_bound_still_gets_slow_down_and_the_admin_bound_is_its_own() {
    let gw = Gateway::start_with(
        &[
            "--admin-listen",
            "127.0.0.1:0",
            "--max-connections",
            "2",
            "--header-read-timeout-secs",
            "60",
        ],
        &[],
    );
    let admin = admin_remote(&gw);
    let s3 = gw.remote();
    let held = hold_idle(s3.addr(), 2);
    std::thread::sleep(Duration::from_millis(300));

    // Past the two seconds a refusal waits for its request before it answers.
    let mut late = TcpStream::connect(s3.addr()).expect("connect");
    std::thread::sleep(Duration::from_secs(3));
    late.write_all(b"GET /_health HTTP/1.1\r\nhost: gateway\r\n\r\n")
        .expect("a late request");
    late.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut answer = Vec::new();
    late.read_to_end(&mut answer)
        .unwrap_or_else(|e| panic!("the late request's answer ended in an error: {e}"));
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 503") && answer.contains("<Code>SlowDown</Code>"),
        "{answer:?}"
    );

    // The admin listener serves its routes only, and S3 connections do not count against
    // its bound (nor its connections against S3's).
    let s3_on_admin = raw_request_at(
        admin.addr(),
        "GET",
        "/bucket/key",
        &[],
        b"",
        Duration::from_secs(5),
    )
    .expect("S3 on the admin listener");
    assert_eq!(s3_on_admin.status, 404, "{}", s3_on_admin.text());
    assert_eq!(
        admin
            .admin_get("/_admin/pairs", Duration::from_secs(5))
            .expect("the admin API on the admin listener")
            .status,
        200
    );
    drop(held);
    // The two admin requests above may hold their slots a moment after their answers (the
    // server's side of the close): an idle connection arriving meanwhile is refused, not
    // held, and its slot is free again when the probe comes. So the 16 are held again,
    // after the refusals have closed, until the probe finds every slot taken.
    let mut over = None;
    for _ in 0..5 {
        let admin_idle = hold_idle(admin.addr(), 16);
        std::thread::sleep(Duration::from_millis(300));
        let probe = admin
            .raw("GET", "/_health", &[], b"", Duration::from_secs(10))
            .expect("/_health over the admin bound");
        if probe.status == 503 {
            over = Some((probe, admin_idle));
            break;
        }
        drop(admin_idle);
        std::thread::sleep(Duration::from_millis(2500));
    }
    let (over, admin_idle) = over.expect("16 idle connections never filled the admin bound");
    assert_slow_down(&over);
    assert!(
        poll_until(Duration::from_secs(10), || s3
            .raw("GET", "/_health", &[], b"", Duration::from_secs(5))
            .is_ok_and(|r| r.status == 200)),
        "the S3 listener did not answer while the admin listener was full\n{}",
        gw.log_tail(30)
    );
    drop(admin_idle);
}
