//! Disk pairs on real storage nodes: nginx with its `dav` module, as in the article
//! ("on machines that contain the disks, we set up Nginx and use the WebDAV protocol"),
//! configured with `gateway serve --config FILE`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use e2e::aws_sdk_s3::config::Credentials;
use e2e::nginx::Nginx;
use e2e::{
    Gateway, REGION, RawResponse, all_files_under, assert_same_body, content_files_under, crc32,
    create_bucket, get_bytes, poll_until, put_bytes, random_body, random_body_read_first_from,
    random_token, s3_error, sha1_hex,
};

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;

/// A config file with the given pairs, in `dir`.
fn write_config(dir: &Path, pairs: &[(u32, [&str; 2])]) -> PathBuf {
    let mut text = String::new();
    for (id, [a, b]) in pairs {
        text.push_str(&format!(
            "[[pairs]]\nid = {id}\ndisks = [\"{a}\", \"{b}\"]\n\n"
        ));
    }
    let path = dir.join("gateway.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

fn start_gateway(config: &Path, env: &[(&str, &str)]) -> Gateway {
    Gateway::start_with(&["--config", config.to_str().expect("utf-8 path")], env)
}

/// Where nginx keeps the content file of `sha1` for `disk`.
fn node_content_path(nginx: &Nginx, disk: &str, sha1: &str) -> PathBuf {
    nginx
        .disk_dir(disk)
        .join(&sha1[0..2])
        .join(&sha1[2..4])
        .join(sha1)
}

/// Each node's disk folder holds exactly these bodies at their content paths, with their
/// bytes, no temp file under `tmp/`, and nginx holds no partial request body.
#[track_caller]
fn assert_nodes_hold(nodes: &[(&Nginx, &str)], bodies: &[&[u8]]) {
    for (nginx, disk) in nodes {
        let mut want: Vec<_> = bodies
            .iter()
            .map(|b| node_content_path(nginx, disk, &sha1_hex(b)))
            .collect();
        want.sort();
        want.dedup();
        assert_eq!(
            content_files_under(&nginx.disk_dir(disk)),
            want,
            "content files of {disk} on nginx :{}",
            nginx.port()
        );
        for b in bodies {
            let path = node_content_path(nginx, disk, &sha1_hex(b));
            let stored = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_same_body(&stored, b, &path.display().to_string());
        }
        assert_eq!(
            all_files_under(&nginx.disk_dir(disk).join("tmp")),
            Vec::<PathBuf>::new(),
            "temp files left on {disk}"
        );
        let body_temp = nginx.body_temp_dir();
        assert!(
            poll_until(Duration::from_secs(10), || all_files_under(&body_temp)
                .is_empty()),
            "nginx :{} kept partial bodies: {:?}",
            nginx.port(),
            all_files_under(&body_temp)
        );
    }
}

/// `GET /_admin/pairs` as text.
fn admin_pairs(gw: &Gateway) -> String {
    let auth = format!("Bearer {}", gw.admin_token());
    let resp = gw
        .raw(
            "GET",
            "/_admin/pairs",
            &[("authorization", auth.as_str())],
            b"",
        )
        .expect("admin pairs");
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.text()
}

/// A native API call with the bearer token.
fn native(gw: &Gateway, token: &str, method: &str, target: &str, body: &[u8]) -> RawResponse {
    let auth = format!("Bearer {token}");
    gw.raw(method, target, &[("authorization", auth.as_str())], body)
        .unwrap_or_else(|e| panic!("{method} {target}: {e}\n{}", gw.log_tail(50)))
}

/// `GET /_files/<sha1>?size=..&crc32=..` with the body's real guard.
fn native_get(gw: &Gateway, token: &str, body: &[u8]) -> RawResponse {
    let target = format!(
        "/_files/{}?size={}&crc32={:08x}",
        sha1_hex(body),
        body.len(),
        crc32(body)
    );
    native(gw, token, "GET", &target, b"")
}

/// Headers of a SigV4-signed request with an unsigned payload (host included).
fn signed_headers(
    gw: &Gateway,
    method: &str,
    target: &str,
    extra: &[(&str, &str)],
) -> Vec<(String, String)> {
    let host = format!("127.0.0.1:{}", gw.port());
    let uri = format!("http://{host}{target}");
    let mut headers = vec![("host".to_string(), host)];
    headers.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let identity: Identity = Credentials::new(
        gw.access_key(),
        gw.secret_key(),
        None,
        None,
        "e2e-head-only",
    )
    .into();
    let mut settings = SigningSettings::default();
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(REGION)
        .name("s3")
        .time(SystemTime::now())
        .settings(settings)
        .build()
        .expect("signing params")
        .into();
    let signable = SignableRequest::new(
        method,
        uri.as_str(),
        headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        SignableBody::Precomputed("UNSIGNED-PAYLOAD".into()),
    )
    .expect("signable request");
    let (instructions, _) = sign(signable, &params).expect("sign").into_parts();
    for (k, v) in instructions.headers() {
        headers.push((k.to_string(), v.to_string()));
    }
    headers
}

/// Sends only the head of a request that announces a body, and reads the answer: a
/// status line that comes back proves the gateway decided without consuming the body.
fn send_head_only(
    port: u16,
    method: &str,
    target: &str,
    headers: &[(String, String)],
) -> (u16, String) {
    send_in_parts(port, method, target, headers, &[], Duration::ZERO)
}

/// Sends the head, then each body part with `pause` before it, and reads the answer.
fn send_in_parts(
    port: u16,
    method: &str,
    target: &str,
    headers: &[(String, String)],
    parts: &[&[u8]],
    pause: Duration,
) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut head = format!("{method} {target} HTTP/1.1\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).expect("write head");
    for part in parts {
        std::thread::sleep(pause);
        stream.write_all(part).expect("write body part");
    }
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader
        .read_line(&mut status_line)
        .unwrap_or_else(|e| panic!("{method} {target}: no answer: {e}"));
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let mut length = 0usize;
    for _ in 0..100 {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':')
            && k.trim().eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length.min(64 * KIB)];
    let _ = reader.read_exact(&mut body);
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// A body held in memory until hashed (here 3 MiB) arrives from a slow client: the
/// storage nodes must not be kept waiting on an idle PUT meanwhile (the test nginx gives up
/// on a request body idle for 5 s; the client pauses 6.5 s halfway).
#[tokio::test]
async fn a_slow_client_does_not_leave_a_storage_node_waiting() {
    let n0 = Nginx::start(&["d0"]);
    let n1 = Nginx::start(&["d1"]);
    let cfg = tempfile::tempdir().expect("temp dir");
    let config = write_config(cfg.path(), &[(0, [&n0.url("d0"), &n1.url("d1")])]);
    let gw = start_gateway(&config, &[]);
    let s3 = gw.client();
    create_bucket(&s3, "mail").await;
    let body = random_body(3100, 3 * MIB);
    let length = body.len().to_string();
    let headers = signed_headers(&gw, "PUT", "/mail/slow", &[("content-length", &length)]);
    let (first, second) = body.split_at(body.len() / 2);
    let (status, text) = tokio::task::spawn_blocking({
        let port = gw.port();
        let (first, second) = (first.to_vec(), second.to_vec());
        move || {
            send_in_parts(
                port,
                "PUT",
                "/mail/slow",
                &headers,
                &[&first, &second],
                Duration::from_millis(6500),
            )
        }
    })
    .await
    .expect("slow client");
    assert_eq!(status, 200, "{text}");
    assert_same_body(&get_bytes(&s3, "mail", "slow").await, &body, "slow upload");
    assert_nodes_hold(&[(&n0, "d0"), (&n1, "d1")], &[&body]);
}

/// The done criterion: an S3 PUT lands on two nginx storage nodes through the
/// placement, and reads survive one node stopping.
#[tokio::test]
async fn puts_land_on_two_nginx_nodes_and_reads_survive_one_stopping() {
    let mut n0 = Nginx::start(&["d0"]);
    let mut n1 = Nginx::start(&["d1"]);
    let cfg = tempfile::tempdir().expect("temp dir");
    let config = write_config(cfg.path(), &[(0, [&n0.url("d0"), &n1.url("d1")])]);
    let token = random_token(24);
    let gw = start_gateway(&config, &[("GATEWAY_NATIVE_TOKEN", &token)]);
    // The configured pair replaces the data folder's own disks.
    assert!(!gw.disk_dir(0).exists() && !gw.disk_dir(1).exists());
    let pairs = admin_pairs(&gw);
    assert!(
        pairs.contains(&n0.url("d0")) && pairs.contains(&n1.url("d1")),
        "{pairs}"
    );
    assert!(
        !pairs.contains("\"id\":1"),
        "only the configured pair: {pairs}"
    );

    let s3 = gw.client();
    create_bucket(&s3, "mail").await;
    // 64 KiB (verified before sending) and 3 MiB (verified while streaming), each once
    // with disk 0 and once with disk 1 as the master that reads start from.
    let mut bodies = Vec::new();
    for (i, size) in [64 * KIB, 3 * MIB].into_iter().enumerate() {
        for master in 0..2 {
            let (_, body) = random_body_read_first_from(master, 1000 + 300 * i as u64, size);
            bodies.push((format!("att/{size}/{master}"), body));
        }
    }
    for (key, body) in &bodies {
        put_bytes(&s3, "mail", key, body).await;
    }
    let all: Vec<&[u8]> = bodies.iter().map(|(_, b)| b.as_slice()).collect();
    assert_nodes_hold(&[(&n0, "d0"), (&n1, "d1")], &all);
    for (key, body) in &bodies {
        let f = gw
            .admin_file(&sha1_hex(body))
            .unwrap_or_else(|| panic!("no record for {key}"));
        assert_eq!((f.refs, f.pair), (Some(1), Some(0)), "{key}: {f:?}");
        assert_same_body(&get_bytes(&s3, "mail", key).await, body, key);
    }

    // One node stops: every body is still served, whichever disk is its master.
    n1.stop();
    for (key, body) in &bodies {
        assert_same_body(
            &get_bytes(&s3, "mail", key).await,
            body,
            &format!("{key} with node 1 stopped"),
        );
        let head = s3
            .head_object()
            .bucket("mail")
            .key(key)
            .send()
            .await
            .unwrap_or_else(|e| panic!("HeadObject {key}: {e:?}"));
        assert_eq!(head.content_length(), Some(body.len() as i64), "{key}");
    }
    // Twice: the copy found missing is read last now, and still nothing goes wrong.
    for (key, body) in &bodies {
        assert_same_body(&get_bytes(&s3, "mail", key).await, body, key);
        // The native read with its size and CRC32 guard too.
        let got = native_get(&gw, &token, body);
        assert_eq!(got.status, 200, "native GET of {key}: {}", got.text());
        assert!(got.complete, "native GET of {key}: {:?}", got.body_error);
        assert_same_body(&got.body, body, &format!("native GET of {key}"));
    }

    // Both stop: an error, never wrong bytes.
    n0.stop();
    for (key, body) in &bodies {
        let (status, code) = s3_error(s3.get_object().bucket("mail").key(key).send().await);
        assert_eq!(
            (status, code.as_str()),
            (500, "InternalError"),
            "{key} with both nodes stopped"
        );
        // Not 409: nothing says the client's size and CRC32 are wrong, the storage is
        // unreachable. A mail back end must retry, not conclude the file is another one.
        let got = native_get(&gw, &token, body);
        assert_eq!(
            got.status,
            500,
            "native GET of {key} with both nodes stopped: {}",
            got.text()
        );
    }
}

#[tokio::test]
async fn a_pair_of_one_local_and_one_webdav_disk() {
    let nginx = Nginx::start(&["d1"]);
    let local = tempfile::tempdir().expect("temp dir");
    let local_disk = local.path().join("d0");
    let local_ref = format!("local:{}", local_disk.display());
    let cfg = tempfile::tempdir().expect("temp dir");
    let config = write_config(cfg.path(), &[(0, [&local_ref, &nginx.url("d1")])]);
    let gw = start_gateway(&config, &[]);

    let s3 = gw.client();
    create_bucket(&s3, "mixed").await;
    let mut bodies = Vec::new();
    for (i, size) in [64 * KIB, 2 * MIB + 5].into_iter().enumerate() {
        for master in 0..2 {
            let (_, body) = random_body_read_first_from(master, 2000 + 300 * i as u64, size);
            bodies.push((format!("k/{size}/{master}"), body));
        }
    }
    for (key, body) in &bodies {
        put_bytes(&s3, "mixed", key, body).await;
    }
    let all: Vec<&[u8]> = bodies.iter().map(|(_, b)| b.as_slice()).collect();
    assert_nodes_hold(&[(&nginx, "d1")], &all);
    let mut want: Vec<PathBuf> = all
        .iter()
        .map(|b| {
            let h = sha1_hex(b);
            local_disk.join(&h[0..2]).join(&h[2..4]).join(&h)
        })
        .collect();
    want.sort();
    assert_eq!(content_files_under(&local_disk), want, "local disk");
    for (path, body) in want.iter().zip({
        let mut sorted = all.clone();
        sorted.sort_by_key(|b| sha1_hex(b));
        sorted
    }) {
        assert_same_body(&std::fs::read(path).expect("read"), body, "local copy");
    }
    assert!(all_files_under(&local_disk.join("tmp")).is_empty());

    for (key, body) in &bodies {
        assert_same_body(&get_bytes(&s3, "mixed", key).await, body, key);
    }
    for (key, body) in &bodies {
        s3.delete_object()
            .bucket("mixed")
            .key(key)
            .send()
            .await
            .unwrap_or_else(|e| panic!("DeleteObject {key}: {e:?}"));
        let (status, code) = s3_error(s3.get_object().bucket("mixed").key(key).send().await);
        assert_eq!((status, code.as_str()), (404, "NoSuchKey"), "{key}");
        let f = gw.admin_file(&sha1_hex(body)).expect("deleting entry");
        assert_eq!((f.state.as_str(), f.pair), ("deleting", Some(0)), "{key}");
    }
}

#[tokio::test]
async fn a_put_with_a_node_down_fails_before_the_body_and_records_nothing() {
    let n0 = Nginx::start(&["d0"]);
    let mut n1 = Nginx::start(&["d1"]);
    let cfg = tempfile::tempdir().expect("temp dir");
    let config = write_config(cfg.path(), &[(0, [&n0.url("d0"), &n1.url("d1")])]);
    let token = random_token(24);
    let gw = start_gateway(&config, &[("GATEWAY_NATIVE_TOKEN", &token)]);
    let s3 = gw.client();
    create_bucket(&s3, "mail").await;
    n1.stop();

    // The probe fails before any body byte is asked for: the answer comes while the
    // client still holds back its whole body.
    let announced = (8 * MIB).to_string();
    let headers = signed_headers(
        &gw,
        "PUT",
        "/mail/held-back",
        &[("content-length", &announced)],
    );
    let (status, text) = send_head_only(gw.port(), "PUT", "/mail/held-back", &headers);
    assert!(
        (500..600).contains(&status),
        "S3 PUT with a node down: {status} {text}"
    );
    assert!(text.contains("<Code>"), "an S3 error body: {text}");
    let body = random_body(3000, 100);
    let native_headers = vec![
        ("host".to_string(), format!("127.0.0.1:{}", gw.port())),
        ("authorization".to_string(), format!("Bearer {token}")),
        ("content-length".to_string(), announced.clone()),
    ];
    let (status, text) = send_head_only(
        gw.port(),
        "PUT",
        &format!("/_files/{}?magic=1", sha1_hex(&body)),
        &native_headers,
    );
    assert!(
        (500..600).contains(&status),
        "native PUT with a node down: {status} {text}"
    );

    // Through the SDK: a clean 5xx.
    let body = random_body(3001, 64 * KIB);
    let result = s3
        .put_object()
        .bucket("mail")
        .key("k")
        .body(body.clone().into())
        .send()
        .await;
    let (status, code) = s3_error(result);
    assert!((500..600).contains(&status), "{status} {code}");
    assert_eq!(code, "InternalError");

    // Nothing recorded, nothing left on the node that was up.
    assert_eq!(gw.admin_file(&sha1_hex(&body)), None);
    let listed = s3
        .list_objects_v2()
        .bucket("mail")
        .send()
        .await
        .expect("ListObjectsV2");
    assert_eq!(listed.key_count(), Some(0), "{listed:?}");
    let disk = n0.disk_dir("d0");
    assert!(
        poll_until(Duration::from_secs(10), || all_files_under(&disk)
            .is_empty()
            && all_files_under(&n0.body_temp_dir()).is_empty()),
        "files left on the node that was up: {:?} {:?}",
        all_files_under(&disk),
        all_files_under(&n0.body_temp_dir())
    );
}

#[tokio::test]
async fn the_same_body_under_two_keys_is_one_file_per_node() {
    let n0 = Nginx::start(&["d0"]);
    let n1 = Nginx::start(&["d1"]);
    let cfg = tempfile::tempdir().expect("temp dir");
    let config = write_config(cfg.path(), &[(0, [&n0.url("d0"), &n1.url("d1")])]);
    let gw = start_gateway(&config, &[]);
    let s3 = gw.client();
    create_bucket(&s3, "one").await;
    create_bucket(&s3, "two").await;
    let body = random_body(4000, 1536 * KIB);
    put_bytes(&s3, "one", "inbox/1/newsletter.pdf", &body).await;
    put_bytes(&s3, "one", "inbox/2/newsletter.pdf", &body).await;
    put_bytes(&s3, "two", "x", &body).await;
    let f = gw.admin_file(&sha1_hex(&body)).expect("record");
    assert_eq!((f.refs, f.pair), (Some(3), Some(0)), "{f:?}");
    assert_nodes_hold(&[(&n0, "d0"), (&n1, "d1")], &[&body]);
    for (bucket, key) in [
        ("one", "inbox/1/newsletter.pdf"),
        ("one", "inbox/2/newsletter.pdf"),
        ("two", "x"),
    ] {
        assert_same_body(&get_bytes(&s3, bucket, key).await, &body, key);
    }
}

/// The article's two loaders on one pair of nginx nodes: each PUTs its own temp name and
/// MOVEs it over the same content name; all succeed and each node keeps one file.
#[test]
fn loaders_racing_on_the_same_content_over_nginx() {
    const LOADERS: usize = 8;
    let n0 = Nginx::start(&["d0"]);
    let n1 = Nginx::start(&["d1"]);
    let cfg = tempfile::tempdir().expect("temp dir");
    let config = write_config(cfg.path(), &[(0, [&n0.url("d0"), &n1.url("d1")])]);
    let token = random_token(24);
    let gw = start_gateway(&config, &[("GATEWAY_NATIVE_TOKEN", &token)]);
    // Above 1 MiB: streamed to the nodes while it arrives.
    let body = random_body(5000, 1536 * KIB + 11);
    let sha1 = sha1_hex(&body);
    let barrier = std::sync::Barrier::new(LOADERS);
    let answers: Vec<RawResponse> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..LOADERS)
            .map(|i| {
                let (gw, token, body, sha1, barrier) = (&gw, &token, &body, &sha1, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let target = format!("/_files/{sha1}?magic={}", 100 + i);
                    native(gw, token, "PUT", &target, body)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("loader thread"))
            .collect()
    });
    let mut refs: Vec<String> = answers
        .iter()
        .map(|r| {
            assert_eq!(r.status, 200, "a loader failed: {}", r.text());
            r.text()
        })
        .collect();
    refs.sort();
    let want: Vec<String> = (1..=LOADERS).map(|n| format!("{{\"refs\":{n}}}")).collect();
    assert_eq!(refs, want);
    let f = gw.admin_file(&sha1).expect("record");
    assert_eq!((f.refs, f.pair), (Some(LOADERS as u64), Some(0)), "{f:?}");
    let magic_sum: u64 = (0..LOADERS as u64).map(|i| 100 + i).sum();
    assert_eq!(f.magic, Some(magic_sum));
    assert_nodes_hold(&[(&n0, "d0"), (&n1, "d1")], &[&body]);
    let moves = |n: &Nginx| {
        n.access_log()
            .lines()
            .filter(|l| l.contains("\"MOVE "))
            .count()
    };
    let (m0, m1) = (moves(&n0), moves(&n1));
    eprintln!("MOVEs onto the content name: node 0 {m0}, node 1 {m1}");
    assert!(m0 >= 1 && m1 >= 1, "at least the first loader MOVEs");
    let got = native_get(&gw, &token, &body);
    assert_eq!(got.status, 200, "{}", got.text());
    assert_same_body(&got.body, &body, "after the race");
}

/// Sends the head and `first`, waits `pause`, sends `rest` (a write error is not a
/// failure: the gateway may answer and close early), then reads the status and body.
fn send_with_a_gap(
    port: u16,
    target: &str,
    headers: &[(String, String)],
    first: &[u8],
    pause: Duration,
    rest: &[u8],
) -> Result<(u16, String), String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(60)));
    let mut head = format!("PUT {target} HTTP/1.1\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .map_err(|e| e.to_string())?;
    let _ = stream.write_all(first);
    std::thread::sleep(pause);
    let _ = stream.write_all(rest);
    let mut answer = Vec::new();
    // Bounded by the read timeout; an answer without a body ends at EOF or the timeout.
    let mut buf = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&buf[..n]);
                if answer.len() > 64 * KIB || answer.windows(8).any(|w| w == b"</Error>") {
                    break;
                }
            }
            Err(_) if !answer.is_empty() => break,
            Err(e) => return Err(format!("no answer: {e}")),
        }
    }
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status line in {text:?}"))?;
    Ok((status, text))
}

/// A storage node stopped while an upload streams to it: the client gets a clear S3
/// error (the copy on the stopped node cannot be made durable), nothing is recorded, the
/// other node keeps no temp file, and stored objects are still served.
#[tokio::test]
async fn a_node_stopped_in_the_middle_of_an_upload_fails_it_cleanly() {
    let n0 = Nginx::start(&["d0"]);
    let mut n1 = Nginx::start(&["d1"]);
    let cfg = tempfile::tempdir().expect("temp dir");
    let config = write_config(cfg.path(), &[(0, [&n0.url("d0"), &n1.url("d1")])]);
    let gw = start_gateway(&config, &[]);
    let s3 = gw.client();
    create_bucket(&s3, "mail").await;
    let before = random_body(3100, 200 * KIB);
    put_bytes(&s3, "mail", "before", &before).await;

    // A body above the memory stage streams to both nodes as it arrives.
    let body = random_body(3101, 24 * MIB);
    let len = body.len().to_string();
    let headers = signed_headers(
        &gw,
        "PUT",
        "/mail/interrupted",
        &[("content-length", len.as_str())],
    );
    let port = gw.port();
    let sender = std::thread::spawn(move || {
        send_with_a_gap(
            port,
            "/mail/interrupted",
            &headers,
            &body[..8 * MIB],
            Duration::from_millis(1500),
            &body[8 * MIB..],
        )
    });
    std::thread::sleep(Duration::from_millis(700));
    n1.stop();
    let answer = sender.join().expect("sender thread");
    match &answer {
        Ok((status, text)) => {
            assert!(
                (500..600).contains(status) && text.contains("<Code>"),
                "an upload whose node stopped: {status} {text}"
            );
        }
        // The gateway may close the connection once it failed the upload; what matters
        // is that nothing says 200.
        Err(e) => println!("the interrupted upload got no answer: {e}"),
    }

    let (status, _) = s3_error(
        s3.head_object()
            .bucket("mail")
            .key("interrupted")
            .send()
            .await,
    );
    assert_eq!(status, 404, "a failed upload was recorded");
    assert_eq!(get_bytes(&s3, "mail", "before").await, before);
    let disk = n0.disk_dir("d0");
    assert!(
        poll_until(Duration::from_secs(20), || {
            let files = all_files_under(&disk);
            files.len() == 1 && all_files_under(&n0.body_temp_dir()).is_empty()
        }),
        "temp files left on the node that stayed up: {:?} {:?}",
        all_files_under(&disk),
        all_files_under(&n0.body_temp_dir())
    );
}
