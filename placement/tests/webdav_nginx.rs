//! The WebDAV disk against a real nginx with its dav module, as on a storage node.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt as _;
use placement::disk::{ByteStream, StorageTls, WebDavConfig, WebDavDisk};
use placement::pairdb::{PairRecord, PairTable};
use placement::read::{BadCopies, Expect, read_verified, stream_verified};
use placement::write::begin_upload;
use placement::{ContentHasher, Disk, DiskError, DiskRef, PairId, Sha1};
use support::nginx::{Nginx, NodeTls};
use support::pki::{Identity, StoragePki};

const WAIT: Duration = Duration::from_secs(10);

fn webdav(nginx: &Nginx, disk: &str) -> WebDavDisk {
    WebDavDisk::new(nginx.url(disk).parse().unwrap(), WebDavConfig::default()).unwrap()
}

fn body(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed) % 251) as u8)
        .collect()
}

fn sha1_of(body: &[u8]) -> Sha1 {
    ContentHasher::digest(body).sha1
}

/// Where nginx keeps a content file of `disk`.
fn stored_path(nginx: &Nginx, disk: &str, sha1: &Sha1) -> PathBuf {
    let hex = sha1.to_hex();
    nginx
        .disk_dir(disk)
        .join(&hex[0..2])
        .join(&hex[2..4])
        .join(&hex)
}

/// Every file under `dir`, recursively (a missing folder has none).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn temps(nginx: &Nginx, disk: &str) -> Vec<PathBuf> {
    files_under(&nginx.disk_dir(disk).join("tmp"))
}

/// Waits (bounded) until `cond` holds.
async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "still not true after {WAIT:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn upload(
    d: &WebDavDisk,
    body: &[u8],
    chunk: usize,
) -> placement::disk::webdav::WebDavTempFile {
    let mut w = d.begin_temp().await.unwrap();
    for c in body.chunks(chunk) {
        w.write(Bytes::copy_from_slice(c)).await.unwrap();
    }
    w.finish().await.unwrap()
}

async fn collect(mut s: ByteStream) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(chunk) = s.next().await {
        out.extend_from_slice(&chunk?);
    }
    Ok(out)
}

fn expect_err<T>(r: Result<T, DiskError>) -> DiskError {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    }
}

#[tokio::test]
async fn temp_then_move_lands_at_the_content_address() {
    let nginx = Nginx::start(&["d0"]);
    let d = webdav(&nginx, "d0");
    let body = body(300_000, 1);
    let sha1 = sha1_of(&body);
    let t = upload(&d, &body, 64 * 1024).await;
    let tmp_name = t.url().unwrap().rsplit('/').next().unwrap().to_string();
    assert_eq!(tmp_name.len(), 32);
    let in_tmp = temps(&nginx, "d0");
    assert_eq!(in_tmp.len(), 1, "{in_tmp:?}");
    assert!(in_tmp[0].ends_with(&tmp_name));
    assert_eq!(
        std::fs::read(&in_tmp[0]).unwrap(),
        body,
        "finish waits for the whole body"
    );
    assert!(!stored_path(&nginx, "d0", &sha1).exists());

    t.commit(&sha1).await.unwrap();
    assert_eq!(
        std::fs::read(stored_path(&nginx, "d0", &sha1)).unwrap(),
        body
    );
    assert!(temps(&nginx, "d0").is_empty(), "MOVE leaves no temp");
    assert_eq!(d.size_of(&sha1).await.unwrap(), Some(body.len() as u64));
    assert_eq!(d.read_all(&sha1).await.unwrap(), body);
    // Nothing but the content file: no partial bodies left in nginx's body temp folder.
    assert!(files_under(&nginx.body_temp_dir()).is_empty());
}

#[tokio::test]
async fn two_writers_of_the_same_content_both_succeed() {
    let nginx = Nginx::start(&["d0"]);
    let d = webdav(&nginx, "d0");
    let body = body(200_000, 2);
    let sha1 = sha1_of(&body);
    let (mut a, mut b) = (d.begin_temp().await.unwrap(), d.begin_temp().await.unwrap());
    assert_ne!(a.url(), b.url(), "each loader has its own temp name");
    for c in body.chunks(50_000) {
        a.write(Bytes::copy_from_slice(c)).await.unwrap();
        b.write(Bytes::copy_from_slice(c)).await.unwrap();
    }
    let (ta, tb) = (a.finish().await.unwrap(), b.finish().await.unwrap());
    assert_eq!(temps(&nginx, "d0").len(), 2);
    ta.commit(&sha1).await.unwrap();
    tb.commit(&sha1).await.unwrap(); // MOVE over the existing file
    assert_eq!(
        std::fs::read(stored_path(&nginx, "d0", &sha1)).unwrap(),
        body
    );
    assert!(temps(&nginx, "d0").is_empty());
    // Concurrently too, through the Disk enum.
    let disk = Disk::WebDav(d.clone());
    let one = async {
        let mut w = disk.begin_temp().await?;
        w.write(Bytes::from(body.clone())).await?;
        w.finish().await?.commit(&sha1).await
    };
    let (r1, r2) = tokio::join!(one, async {
        let mut w = disk.begin_temp().await?;
        w.write(Bytes::from(body.clone())).await?;
        w.finish().await?.commit(&sha1).await
    });
    r1.unwrap();
    r2.unwrap();
    assert_eq!(d.read_all(&sha1).await.unwrap(), body);
    assert!(temps(&nginx, "d0").is_empty());
}

#[tokio::test]
async fn discarded_and_abandoned_temps_leave_nothing() {
    let nginx = Nginx::start(&["d0"]);
    let d = webdav(&nginx, "d0");
    let body = body(500_000, 3);

    // Discarded after a complete upload.
    upload(&d, &body, 64 * 1024).await.discard().await.unwrap();
    assert!(temps(&nginx, "d0").is_empty());

    // Abandoned mid-body: the PUT is aborted, nginx never creates the file.
    let mut w = d.begin_temp().await.unwrap();
    for c in body[..300_000].chunks(64 * 1024) {
        w.write(Bytes::copy_from_slice(c)).await.unwrap();
    }
    drop(w);
    // Abandoned before the first byte.
    drop(d.begin_temp().await.unwrap());
    // Complete, then dropped without commit or discard: a spawned DELETE removes it.
    let t = upload(&d, &body, 64 * 1024).await;
    assert_eq!(temps(&nginx, "d0").len(), 1);
    drop(t);

    wait_until("temps removed", || temps(&nginx, "d0").is_empty()).await;
    wait_until("nginx dropped the partial bodies", || {
        files_under(&nginx.body_temp_dir()).is_empty()
    })
    .await;
    // Give an (incorrectly) completed PUT time to show up, then look again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        files_under(&nginx.disk_dir("d0")).is_empty(),
        "{:?}",
        files_under(&nginx.disk_dir("d0"))
    );
    // Only the two complete uploads ever became files: the abandoned PUTs were cut off
    // (nginx logs them as failed requests), not completed and deleted afterwards.
    let log = nginx.access_log();
    let puts: Vec<&str> = log.lines().filter(|l| l.contains("\"PUT ")).collect();
    assert_eq!(puts.len(), 4, "{log}");
    assert_eq!(
        puts.iter().filter(|l| l.contains("\" 201 ")).count(),
        2,
        "{log}"
    );
}

#[tokio::test]
async fn reads_of_present_and_missing_files() {
    let nginx = Nginx::start(&["d0"]);
    let d = webdav(&nginx, "d0");
    let body = body(100_000, 4);
    let sha1 = sha1_of(&body);
    upload(&d, &body, 30_000).await.commit(&sha1).await.unwrap();
    let missing = sha1_of(b"never stored");
    let len = body.len() as u64;

    assert_eq!(d.size_of(&sha1).await.unwrap(), Some(len));
    assert_eq!(d.size_of(&missing).await.unwrap(), None);
    assert_eq!(d.read_all(&sha1).await.unwrap(), body);
    assert!(d.read_all(&missing).await.unwrap_err().is_not_found());

    let range = |offset: u64, n: u64| d.read_range(&sha1, offset, n);
    assert_eq!(
        collect(range(10, 1000).await.unwrap()).await.unwrap(),
        &body[10..1010]
    );
    assert_eq!(collect(range(0, len).await.unwrap()).await.unwrap(), body);
    assert_eq!(
        collect(range(0, 7).await.unwrap()).await.unwrap(),
        &body[..7]
    );
    // Past the end: fewer bytes, as from a local file.
    assert_eq!(
        collect(range(len - 5, 100).await.unwrap()).await.unwrap(),
        &body[body.len() - 5..]
    );
    assert!(
        collect(range(len + 10, 5).await.unwrap())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        collect(range(3, 0).await.unwrap())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(expect_err(d.read_range(&missing, 0, 10).await).is_not_found());
    assert!(expect_err(d.read_range(&missing, 0, 0).await).is_not_found());

    // Through the Disk enum, as the read protocol sees it.
    let disk = Disk::open(&nginx.url("d0").parse().unwrap()).unwrap();
    assert!(matches!(disk, Disk::WebDav(_)));
    assert_eq!(disk.size_of(&sha1).await.unwrap(), Some(len));
    assert_eq!(
        collect(disk.read_range(&sha1, 99_000, 1000).await.unwrap())
            .await
            .unwrap(),
        &body[99_000..]
    );
    assert!(disk.space().await.unwrap_err().is_space_unknown());
}

/// A pair of one local disk and one WebDAV disk, with `body` uploaded through the write
/// protocol. Returns the disks ordered so that the WebDAV one is read first.
async fn stored_on_mixed_pair(
    nginx: &Nginx,
    local: &Path,
    body: &[u8],
) -> (Arc<[Disk; 2]>, [Disk; 2], Sha1, Expect) {
    let pairs = PairTable::new();
    let remote: DiskRef = nginx.url("d1").parse().unwrap();
    let mut rec = PairRecord::new([DiskRef::local(local), remote]);
    rec.free_bytes = [1 << 30, 1 << 30];
    pairs.upsert(PairId(7), rec).unwrap();
    let mut up = begin_upload(&pairs, body.len() as u64, 2).await.unwrap();
    assert_eq!(up.pair(), PairId(7));
    for c in body.chunks(64 * 1024) {
        up.write(Bytes::copy_from_slice(c)).await.unwrap();
    }
    let staged = up.finish().await.unwrap();
    let digests = staged.digests;
    assert_eq!(digests, ContentHasher::digest(body));
    let disks = staged.disks.clone();
    staged.commit().await.unwrap();
    let sha1 = digests.sha1;
    let [l, w] = [disks[0].clone(), disks[1].clone()];
    let webdav_first = if sha1.master_disk() == 0 {
        [w, l]
    } else {
        [l, w]
    };
    let expect = Expect {
        size_bytes: digests.size_bytes,
        crc32: digests.crc32,
    };
    (disks, webdav_first, sha1, expect)
}

fn webdav_index(disks: &[Disk; 2]) -> usize {
    disks
        .iter()
        .position(|d| matches!(d, Disk::WebDav(_)))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_over_a_local_and_a_webdav_disk_reads_back_verified() {
    let nginx = Nginx::start(&["d1"]);
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("d0");
    let body = body(3_000_000, 5);
    let (disks, webdav_first, sha1, expect) = stored_on_mixed_pair(&nginx, &local, &body).await;

    let hex = sha1.to_hex();
    let local_file = local.join(&hex[0..2]).join(&hex[2..4]).join(&hex);
    assert_eq!(std::fs::read(local_file).unwrap(), body);
    assert_eq!(
        std::fs::read(stored_path(&nginx, "d1", &sha1)).unwrap(),
        body
    );
    assert!(temps(&nginx, "d1").is_empty());
    assert!(files_under(&local.join("tmp")).is_empty());

    for order in [&*disks, &webdav_first] {
        let bad = Arc::new(BadCopies::new());
        assert_eq!(
            read_verified(order, sha1, expect, &bad).await.unwrap(),
            body
        );
        let s = stream_verified(order, sha1, expect, None, bad.clone())
            .await
            .unwrap();
        assert_eq!(collect(s).await.unwrap(), body);
        let s = stream_verified(order, sha1, expect, Some((1000, 5000)), bad.clone())
            .await
            .unwrap();
        assert_eq!(collect(s).await.unwrap(), &body[1000..6000]);
        assert!(!bad.contains(sha1, order[0].disk_ref()));
        assert!(!bad.contains(sha1, order[1].disk_ref()));
    }
}

#[tokio::test]
async fn verified_reads_fall_back_to_the_local_disk_when_nginx_is_stopped() {
    let mut nginx = Nginx::start(&["d1"]);
    let dir = tempfile::tempdir().unwrap();
    let body = body(2_000_000, 6);
    let (_, disks, sha1, expect) =
        stored_on_mixed_pair(&nginx, &dir.path().join("d0"), &body).await;
    let w = webdav_index(&disks);
    assert_eq!(w, sha1.master_disk(), "the WebDAV copy is read first");
    nginx.stop();

    let started = Instant::now();
    // A node that is down is an error, never "the file is missing".
    let e = disks[w].size_of(&sha1).await.unwrap_err();
    assert!(!e.is_not_found(), "{e}");
    let bad = Arc::new(BadCopies::new());
    assert_eq!(
        read_verified(&disks, sha1, expect, &bad).await.unwrap(),
        body
    );
    assert!(bad.contains(sha1, disks[w].disk_ref()));
    let bad = Arc::new(BadCopies::new());
    let s = stream_verified(&disks, sha1, expect, None, bad.clone())
        .await
        .unwrap();
    assert_eq!(collect(s).await.unwrap(), body);
    assert!(bad.contains(sha1, disks[w].disk_ref()));
    assert!(
        started.elapsed() < WAIT,
        "fallback took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn verified_reads_fall_back_when_the_webdav_copy_is_corrupt() {
    let nginx = Nginx::start(&["d1"]);
    let dir = tempfile::tempdir().unwrap();
    let body = body(2_000_000, 7);
    let (_, disks, sha1, expect) =
        stored_on_mixed_pair(&nginx, &dir.path().join("d0"), &body).await;
    let w = webdav_index(&disks);
    assert_eq!(w, sha1.master_disk());
    // Corrupt the copy behind nginx's back: same size, one byte flipped.
    let path = stored_path(&nginx, "d1", &sha1);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[1234] ^= 0xff;
    std::fs::write(&path, bytes).unwrap();

    let bad = Arc::new(BadCopies::new());
    assert_eq!(
        read_verified(&disks, sha1, expect, &bad).await.unwrap(),
        body
    );
    assert!(bad.contains(sha1, disks[w].disk_ref()));

    // Streamed: the first read comes from the bad copy and fails short of the end; the
    // next one starts from the good copy.
    let bad = Arc::new(BadCopies::new());
    let mut s = stream_verified(&disks, sha1, expect, None, bad.clone())
        .await
        .unwrap();
    let (mut got, mut failed) = (0u64, false);
    while let Some(item) = s.next().await {
        match item {
            Ok(c) => got += c.len() as u64,
            Err(_) => failed = true,
        }
    }
    assert!(failed && got < expect.size_bytes);
    assert!(bad.contains(sha1, disks[w].disk_ref()));
    let s = stream_verified(&disks, sha1, expect, None, bad.clone())
        .await
        .unwrap();
    assert_eq!(collect(s).await.unwrap(), body);
}

#[tokio::test]
async fn an_unreachable_node_fails_the_probe_and_leaves_no_local_temp() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port(); // closed again: nothing listens there
    let url = format!("http://127.0.0.1:{port}/d1");
    let d = WebDavDisk::new(url.parse().unwrap(), WebDavConfig::default()).unwrap();
    let started = Instant::now();
    let e = expect_err(d.begin_temp().await);
    assert!(matches!(e, DiskError::Remote { .. }), "{e}");
    assert!(started.elapsed() < WAIT);

    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("d0");
    let pairs = PairTable::new();
    let mut rec = PairRecord::new([DiskRef::local(&local), url.parse().unwrap()]);
    rec.free_bytes = [1 << 30, 1 << 30];
    pairs.upsert(PairId(0), rec).unwrap();
    assert!(begin_upload(&pairs, 10, 2).await.is_err());
    wait_until("local temp removed", || {
        files_under(&local.join("tmp")).is_empty()
    })
    .await;
}

#[tokio::test]
async fn a_silent_node_times_out() {
    // Accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hole = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock);
        }
    });
    let cfg = WebDavConfig {
        request_timeout: Duration::from_millis(300),
        stall_timeout: Duration::from_millis(300),
        ..WebDavConfig::default()
    };
    let d = WebDavDisk::new(format!("http://{addr}/d0").parse().unwrap(), cfg).unwrap();
    let sha1 = sha1_of(b"x");
    let started = Instant::now();
    let timed_out = |e: DiskError| matches!(e, DiskError::Timeout { .. });
    assert!(timed_out(d.size_of(&sha1).await.unwrap_err()));
    assert!(timed_out(d.read_all(&sha1).await.unwrap_err()));
    assert!(timed_out(expect_err(d.read_range(&sha1, 5, 10).await)));
    // The PUT's head goes out, so the probe passes; the answer never comes.
    let mut w = d.begin_temp().await.unwrap();
    w.write(Bytes::from_static(b"some bytes")).await.unwrap();
    assert!(timed_out(expect_err(w.finish().await)));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    hole.abort();
}

/// An HTTPS node with `server`'s certificate requiring client certificates of the storage CA.
fn tls_node(pki: &StoragePki, server: &Identity) -> Nginx {
    Nginx::start_tls(
        &["d0"],
        NodeTls {
            cert: server.cert.clone(),
            key: server.key.clone(),
            client_ca: pki.ca.clone(),
        },
    )
}

/// A disk of `nginx` trusting the storage CA and presenting `client`.
fn tls_disk(nginx: &Nginx, pki: &StoragePki, client: Option<&Identity>) -> WebDavDisk {
    let tls = StorageTls::from_files(&pki.ca, client.map(|c| (c.cert.as_path(), c.key.as_path())))
        .unwrap();
    let cfg = WebDavConfig {
        tls: Some(tls),
        ..WebDavConfig::default()
    };
    WebDavDisk::new(nginx.url("d0").parse().unwrap(), cfg).unwrap()
}

#[tokio::test]
async fn over_https_a_trusted_node_stores_and_serves_every_operation() {
    let pki = StoragePki::new();
    let nginx = tls_node(&pki, &pki.node);
    assert!(nginx.url("d0").starts_with("https://"));
    let d = tls_disk(&nginx, &pki, Some(&pki.client));
    let body = body(200_000, 7);
    let sha1 = sha1_of(&body);
    upload(&d, &body, 32 * 1024)
        .await
        .commit(&sha1)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(stored_path(&nginx, "d0", &sha1)).unwrap(),
        body
    );
    assert_eq!(d.size_of(&sha1).await.unwrap(), Some(body.len() as u64));
    assert_eq!(d.read_all(&sha1).await.unwrap(), body);
    let part = collect(d.read_range(&sha1, 1000, 5000).await.unwrap())
        .await
        .unwrap();
    assert_eq!(part, &body[1000..6000]);
    upload(&d, b"discarded", 4).await.discard().await.unwrap();
    assert!(temps(&nginx, "d0").is_empty());
    // Keep-alive over TLS: further requests reuse the pool.
    for _ in 0..3 {
        assert_eq!(d.size_of(&sha1).await.unwrap(), Some(body.len() as u64));
    }
}

#[tokio::test]
async fn over_https_a_node_with_a_certificate_of_another_ca_is_refused() {
    let pki = StoragePki::new();
    let nginx = tls_node(&pki, &pki.rogue_node);
    let d = tls_disk(&nginx, &pki, Some(&pki.client));
    let e = expect_err(d.begin_temp().await);
    let text = e.to_string();
    assert!(matches!(e, DiskError::Remote { .. }), "{text}");
    assert!(
        text.contains("certificate") && text.contains("UnknownIssuer"),
        "{text}"
    );
    assert!(d.size_of(&sha1_of(b"x")).await.is_err());
    assert!(
        files_under(&nginx.disk_dir("d0")).is_empty(),
        "nothing reached the node"
    );
}

#[tokio::test]
async fn over_https_a_client_without_an_accepted_certificate_is_told_why() {
    let pki = StoragePki::new();
    let nginx = tls_node(&pki, &pki.node);
    let sha1 = sha1_of(b"x");
    let none = tls_disk(&nginx, &pki, None);
    // The PUT's head goes out (the probe of begin_temp passes); nginx's refusal ends it.
    let e = expect_err(none.begin_temp().await.unwrap().finish().await);
    let text = e.to_string();
    assert!(matches!(e, DiskError::Remote { .. }), "{text}");
    assert!(text.contains("refused this client"), "{text}");
    assert!(
        text.contains("requires a client certificate and none is configured"),
        "{text}"
    );
    assert!(
        text.contains("No required SSL certificate was sent"),
        "{text}"
    );
    // A HEAD has no page: the cause is named as likely.
    let e = none.size_of(&sha1).await.unwrap_err();
    assert!(matches!(e, DiskError::Remote { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("likely it requires a client certificate"),
        "{e}"
    );
    assert!(
        none.read_all(&sha1)
            .await
            .unwrap_err()
            .to_string()
            .contains("refused this client")
    );

    let rogue = tls_disk(&nginx, &pki, Some(&pki.rogue_client));
    let e = rogue.read_all(&sha1).await.unwrap_err();
    assert!(e.to_string().contains("not one it trusts"), "{e}");
    assert!(
        files_under(&nginx.disk_dir("d0")).is_empty(),
        "nothing reached the node"
    );
}

#[tokio::test]
async fn https_is_never_sent_in_the_clear_nor_http_over_tls() {
    let pki = StoragePki::new();
    // An https:// disk without a CA is refused when opened.
    let e = WebDavDisk::new(
        "https://127.0.0.1:1/d0".parse().unwrap(),
        WebDavConfig::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("CA of the storage nodes"), "{e}");
    // A plain node named https:// fails the handshake; a TLS node named http:// gets a
    // plain request nginx refuses: neither stores anything.
    let plain = Nginx::start(&["d0"]);
    let as_https = plain.url("d0").replacen("http://", "https://", 1);
    let tls = StorageTls::from_files(&pki.ca, None).unwrap();
    let cfg = WebDavConfig {
        tls: Some(tls),
        ..WebDavConfig::default()
    };
    let d = WebDavDisk::new(as_https.parse().unwrap(), cfg).unwrap();
    assert!(matches!(
        expect_err(d.begin_temp().await),
        DiskError::Remote { .. }
    ));
    assert!(files_under(&plain.disk_dir("d0")).is_empty());
}
