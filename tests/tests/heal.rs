//! Heal on re-upload: when both stored copies of some content are gone or corrupt, a new
//! upload of the same bytes is never acknowledged onto the lost content. It writes new
//! copies and heals the record, so every object that references the content reads again.

use e2e::{
    Gateway, RawResponse, assert_same_body, crc32, create_bucket, get_bytes, put_bytes,
    random_body, random_token, sha1_hex,
};

const MIB: usize = 1024 * 1024;

fn remove_copy(gw: &Gateway, disk: usize, sha1: &str) {
    let path = gw.content_path(disk, sha1);
    std::fs::remove_file(&path).unwrap_or_else(|e| panic!("remove {}: {e}", path.display()));
}

fn write_over(path: &std::path::Path, data: &[u8]) {
    // The gateway may store content read-only.
    let mut perms = std::fs::metadata(path).expect("stat").permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(path, perms).expect("chmod");
    std::fs::write(path, data).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// Cuts the copy on `disk` to half its size.
fn truncate_copy(gw: &Gateway, disk: usize, sha1: &str) {
    let path = gw.content_path(disk, sha1);
    let data = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    write_over(&path, &data[..data.len() / 2]);
}

/// Flips bytes of the copy on `disk` in place (same size): only a content check can tell.
fn corrupt_in_place(gw: &Gateway, disk: usize, sha1: &str) {
    let path = gw.content_path(disk, sha1);
    let mut data = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let len = data.len();
    for at in [0, len / 3, len / 2, len - 1] {
        data[at] ^= 0x5a;
    }
    write_over(&path, &data);
}

/// A hand-signed GET; `Ok(body)` only for a 200 whose whole body arrived.
fn raw_get(gw: &Gateway, target: &str) -> Result<Vec<u8>, String> {
    let resp: RawResponse = gw.signed("GET", target).send();
    if resp.status != 200 {
        return Err(format!("status {}: {}", resp.status, resp.text()));
    }
    if !resp.complete {
        return Err(format!("body cut short after {} bytes", resp.body.len()));
    }
    Ok(resp.body)
}

/// PUT under `obj1`, damage both copies, PUT the same bytes under `obj2`: 200, and both
/// keys read back byte-exact (the first GETs before any other client read).
async fn reupload_heals(
    len: usize,
    seed: u64,
    damage: fn(&Gateway, usize, &str),
    read_first: bool,
) {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(seed, len);
    let sha1 = sha1_hex(&body);
    put_bytes(&s3, "bkt", "obj1", &body).await;
    for disk in 0..2 {
        damage(&gw, disk, &sha1);
    }
    if read_first {
        // A read meets the damage first (and remembers both copies as bad).
        assert!(
            raw_get(&gw, "/bkt/obj1").is_err(),
            "a GET of content with no good copy must fail"
        );
    }
    put_bytes(&s3, "bkt", "obj2", &body).await;
    for key in ["obj1", "obj2"] {
        let got = raw_get(&gw, &format!("/bkt/{key}")).unwrap_or_else(|e| {
            panic!("GET {key} after the healing PUT: {e}\n{}", gw.log_tail(40))
        });
        assert_same_body(&got, &body, key);
        assert_same_body(&get_bytes(&s3, "bkt", key).await, &body, key);
    }
    // The content has one record and both its copies again.
    let file = gw.admin_file(&sha1).expect("record of the healed content");
    assert_eq!(file.refs, Some(2), "{file:?}");
    let healed: Vec<_> = (0..2)
        .filter(|d| {
            gw.content_files(*d)
                .iter()
                .any(|p| std::fs::read(p).is_ok_and(|b| b == body))
        })
        .collect();
    assert_eq!(healed, vec![0, 1], "a good copy on both disks");
}

#[tokio::test]
async fn a_small_object_whose_copies_are_gone_is_healed_by_a_reupload() {
    reupload_heals(100_000, 1, remove_copy, false).await;
}

#[tokio::test]
async fn a_large_object_whose_copies_are_gone_is_healed_by_a_reupload() {
    // Above the memory staging bound of one body: staged on disk, not in memory.
    reupload_heals(17 * MIB, 2, remove_copy, false).await;
}

#[tokio::test]
async fn truncated_copies_are_healed_by_a_reupload() {
    reupload_heals(3 * MIB, 3, truncate_copy, false).await;
}

#[tokio::test]
async fn copies_corrupted_in_place_are_healed_by_a_reupload_once_a_read_found_them() {
    // Same-size garbage passes the dedup path's stat; the read that meets it marks both
    // copies bad, and the next upload heals.
    reupload_heals(200_000, 4, corrupt_in_place, true).await;
}

#[tokio::test]
async fn a_native_reupload_heals_lost_content() {
    let token = random_token(24);
    let gw = Gateway::start_with(&[], &[("GATEWAY_NATIVE_TOKEN", &token)]);
    let auth = format!("Bearer {token}");
    let send = |method: &str, target: &str, body: &[u8]| {
        gw.raw(method, target, &[("authorization", auth.as_str())], body)
            .unwrap_or_else(|e| panic!("{method} {target}: {e}"))
    };
    let body = random_body(5, 300_000);
    let sha1 = sha1_hex(&body);
    let put = send("PUT", &format!("/_files/{sha1}?magic=11"), &body);
    assert_eq!(put.status, 200, "{}", put.text());
    for disk in 0..2 {
        remove_copy(&gw, disk, &sha1);
    }
    let put = send("PUT", &format!("/_files/{sha1}?magic=22"), &body);
    assert_eq!(put.status, 200, "{}", put.text());
    let get = send(
        "GET",
        &format!(
            "/_files/{sha1}?size={}&crc32={:08x}",
            body.len(),
            crc32(&body)
        ),
        b"",
    );
    assert_eq!(get.status, 200, "{}\n{}", get.text(), gw.log_tail(40));
    assert_same_body(&get.body, &body, "native GET after the healing PUT");
}
