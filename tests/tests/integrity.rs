//! Verified reads: a corrupted copy is never served.
//!
//! Bodies up to 1 MiB are verified before sending, so a corrupt copy is skipped and the
//! GET succeeds from the other disk. Larger bodies are verified while streaming: the GET
//! that meets the corrupt copy may fail as a transfer error (body shorter than
//! Content-Length, connection error), and the next GET uses the other copy. Wrong bytes
//! are never acceptable. Bodies are chosen so that the corrupted disk is the one read first
//! (the sha1's first bit), so the corrupt copy is really met.

use e2e::{
    Gateway, RawResponse, assert_same_body, create_bucket, get_bytes, put_bytes,
    random_body_read_first_from, sha1_hex,
};

const MIB: usize = 1024 * 1024;

/// Flips bytes of the copy on `disk` in place (same size), so that only a content check
/// can tell.
fn corrupt_in_place(gw: &Gateway, disk: usize, sha1: &str) {
    let path = gw.content_path(disk, sha1);
    let mut data = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let len = data.len();
    assert!(len > 0);
    for at in [0, len / 3, len / 2, len - 1] {
        data[at] ^= 0x5a;
    }
    write_over(&path, &data);
}

/// Cuts the copy on `disk` to half its size.
fn truncate_copy(gw: &Gateway, disk: usize, sha1: &str) {
    let path = gw.content_path(disk, sha1);
    let data = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    write_over(&path, &data[..data.len() / 2]);
}

fn write_over(path: &std::path::Path, data: &[u8]) {
    // The gateway may store content read-only.
    let mut perms = std::fs::metadata(path).expect("stat").permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(path, perms).expect("chmod");
    std::fs::write(path, data).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// A hand-signed GET read with no client-side checksum validation, so wrong bytes would be
/// seen as wrong bytes. `Ok(body)` when a 200 with a complete body came back, `Err(why)`
/// for a failed transfer.
fn raw_get(gw: &Gateway, target: &str) -> Result<Vec<u8>, String> {
    let resp: RawResponse = gw.signed("GET", target).send();
    if resp.status != 200 {
        return Err(format!("status {}: {}", resp.status, resp.text()));
    }
    if !resp.complete {
        return Err(format!(
            "body cut short after {} bytes: {:?}",
            resp.body.len(),
            resp.body_error
        ));
    }
    Ok(resp.body)
}

/// Small bodies: every GET, the first included, succeeds with the right bytes.
async fn small_copy_damaged_is_skipped(disk: usize, len: usize, damage: fn(&Gateway, usize, &str)) {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let (_, body) = random_body_read_first_from(disk, 1000 + disk as u64 * 100, len);
    let sha1 = sha1_hex(&body);
    put_bytes(&s3, "bkt", "obj", &body).await;
    damage(&gw, disk, &sha1);

    for attempt in 0..3 {
        let got = raw_get(&gw, "/bkt/obj")
            .unwrap_or_else(|e| panic!("GET #{attempt} of a {len}-byte body failed: {e}"));
        assert_same_body(&got, &body, &format!("GET #{attempt}"));
    }
    assert_same_body(&get_bytes(&s3, "bkt", "obj").await, &body, "SDK GET");
}

/// Large bodies: at most one failed GET, then the right bytes; never wrong bytes.
async fn large_copy_damaged_is_never_served(disk: usize, damage: fn(&Gateway, usize, &str)) {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let (_, body) = random_body_read_first_from(disk, 2000 + disk as u64 * 100, 3 * MIB);
    let sha1 = sha1_hex(&body);
    put_bytes(&s3, "bkt", "obj", &body).await;
    damage(&gw, disk, &sha1);

    let mut failures = Vec::new();
    let mut successes = 0;
    for attempt in 0..4 {
        match raw_get(&gw, "/bkt/obj") {
            // Never wrong bytes, whatever the attempt.
            Ok(got) => {
                assert_same_body(&got, &body, &format!("GET #{attempt}"));
                successes += 1;
            }
            Err(why) => failures.push(format!("GET #{attempt}: {why}")),
        }
        if successes == 2 {
            break;
        }
    }
    println!("disk{disk} damaged: {successes} good GETs, failed GETs: {failures:?}");
    assert!(
        failures.len() <= 1,
        "more than one failed GET of a 3 MiB body with one corrupt copy: {failures:#?}"
    );
    assert_eq!(successes, 2, "failures: {failures:#?}");
    assert!(
        failures.is_empty() || failures[0].starts_with("GET #0"),
        "only the first GET may fail: {failures:#?}"
    );
}

#[tokio::test]
async fn small_body_corrupt_on_disk0_is_served_from_disk1() {
    small_copy_damaged_is_skipped(0, 64 * 1024, corrupt_in_place).await;
}

#[tokio::test]
async fn small_body_corrupt_on_disk1_is_served_from_disk0() {
    small_copy_damaged_is_skipped(1, 64 * 1024, corrupt_in_place).await;
}

#[tokio::test]
async fn one_mib_body_corrupt_on_disk0_is_verified_before_sending() {
    // Exactly 1 MiB is still "small": verified before the first byte goes out.
    small_copy_damaged_is_skipped(0, MIB, corrupt_in_place).await;
}

#[tokio::test]
async fn small_body_truncated_on_disk0_is_served_from_disk1() {
    small_copy_damaged_is_skipped(0, 200_000, truncate_copy).await;
}

#[tokio::test]
async fn large_body_corrupt_on_disk0_is_never_served() {
    large_copy_damaged_is_never_served(0, corrupt_in_place).await;
}

#[tokio::test]
async fn large_body_corrupt_on_disk1_is_never_served() {
    large_copy_damaged_is_never_served(1, corrupt_in_place).await;
}

#[tokio::test]
async fn large_body_truncated_on_disk0_is_never_served() {
    large_copy_damaged_is_never_served(0, truncate_copy).await;
}
