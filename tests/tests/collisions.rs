//! SHA-1 collision attacks: two different bodies with one SHA-1 are never deduplicated
//! into one file. Real pairs: SHAttered's two PDFs (identical prefix, 2017) and Shambles's
//! chosen-prefix pair (2020), from `tests/data/`. Each body is stored under its
//! collision-safe name (sha1dc's mitigated digest), reads back as its own bytes through
//! S3 PUT, multipart, CopyObject and the native API, and `gateway fsck` finds the copies
//! consistent with their names.

use aws_sdk_s3::Client;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use e2e::cluster::run_gateway;
use e2e::{
    Gateway, assert_same_body, crc32, create_bucket, get_bytes, put_bytes, random_token, sha1_hex,
};

/// The two colliding bodies named `a` and `b` in `tests/data/`.
fn pair(a: &str, b: &str) -> [Vec<u8>; 2] {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    let read = |n: &str| {
        std::fs::read(dir.join(n)).unwrap_or_else(|e| panic!("{}: {e}", dir.join(n).display()))
    };
    let (one, two) = (read(a), read(b));
    assert_ne!(one, two, "{a} and {b} differ");
    assert_eq!(sha1_hex(&one), sha1_hex(&two), "{a} and {b} share a SHA-1");
    [one, two]
}

fn pairs() -> [[Vec<u8>; 2]; 2] {
    [
        pair("shattered-1.pdf", "shattered-2.pdf"),
        pair("sha-mbles-1.bin", "sha-mbles-2.bin"),
    ]
}

/// The name the gateway gives a body that carries a collision attack.
fn safe_name(body: &[u8]) -> String {
    match sha1dc::mitigate::digest(body) {
        Ok(_) => panic!("no collision attack detected in a body of a colliding pair"),
        Err(attack) => attack.digest().to_string(),
    }
}

/// Create, one part (the whole body), complete.
async fn multipart_put(s3: &Client, bucket: &str, key: &str, body: &[u8]) {
    let id = s3
        .create_multipart_upload()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateMultipartUpload {key}: {e:?}"))
        .upload_id()
        .expect("an upload id")
        .to_string();
    let etag = s3
        .upload_part()
        .bucket(bucket)
        .key(key)
        .upload_id(&id)
        .part_number(1)
        .body(body.to_vec().into())
        .send()
        .await
        .unwrap_or_else(|e| panic!("UploadPart {key}: {e:?}"))
        .e_tag()
        .expect("a part ETag")
        .to_string();
    let parts = CompletedMultipartUpload::builder()
        .parts(CompletedPart::builder().part_number(1).e_tag(etag).build())
        .build();
    s3.complete_multipart_upload()
        .bucket(bucket)
        .key(key)
        .upload_id(&id)
        .multipart_upload(parts)
        .send()
        .await
        .unwrap_or_else(|e| panic!("CompleteMultipartUpload {key}: {e:?}"));
}

#[tokio::test]
async fn colliding_bodies_read_back_as_their_own_bytes() {
    let mut gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let pairs = pairs();
    for (p, bodies) in pairs.iter().enumerate() {
        for (i, body) in bodies.iter().enumerate() {
            put_bytes(&s3, "bkt", &format!("put/{p}/{i}"), body).await;
            multipart_put(&s3, "bkt", &format!("mpu/{p}/{i}"), body).await;
            s3.copy_object()
                .bucket("bkt")
                .key(format!("copy/{p}/{i}"))
                .copy_source(format!("bkt/put/{p}/{i}"))
                .send()
                .await
                .unwrap_or_else(|e| panic!("CopyObject pair {p} body {i}: {e:?}"));
        }
    }
    // Uploaded again: each body deduplicates against its own bytes, never its twin's.
    for (p, bodies) in pairs.iter().enumerate() {
        for (i, body) in bodies.iter().enumerate() {
            put_bytes(&s3, "bkt", &format!("again/{p}/{i}"), body).await;
        }
    }
    for (p, bodies) in pairs.iter().enumerate() {
        for (i, body) in bodies.iter().enumerate() {
            for how in ["put", "mpu", "copy", "again"] {
                let key = format!("{how}/{p}/{i}");
                assert_same_body(&get_bytes(&s3, "bkt", &key).await, body, &key);
            }
        }
    }
    // One file per distinct body on each disk, at its collision-safe name, with its own
    // bytes; nothing under the SHA-1 the twins share.
    let all: Vec<&Vec<u8>> = pairs.iter().flatten().collect();
    for disk in 0..2 {
        let mut want: Vec<_> = all
            .iter()
            .map(|b| gw.content_path(disk, &safe_name(b)))
            .collect();
        want.sort();
        assert_eq!(gw.content_files(disk), want, "content files on disk{disk}");
        for body in &all {
            let path = gw.content_path(disk, &safe_name(body));
            let stored = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_same_body(&stored, body, &path.display().to_string());
        }
    }
    let shared = gw.admin_file(&sha1_hex(&pairs[0][0]));
    assert!(shared.is_none(), "FileDB has the shared SHA-1: {shared:?}");
    for body in &all {
        let f = gw
            .admin_file(&safe_name(body))
            .expect("FileDB knows the collision-safe name");
        // put, mpu, copy, again (the completed upload's part reference is dropped).
        assert_eq!(f.refs, Some(4), "{f:?}");
    }

    // fsck re-hashes every copy: a mitigated name must verify as the name of its bytes.
    gw.kill9();
    let data = gw.data_dir().display().to_string();
    let fsck = run_gateway(&["fsck", "--data", &data], &[]);
    assert_eq!(fsck.code, Some(0), "{fsck}");
    assert!(fsck.stdout.contains("fsck: clean"), "{fsck}");
}

#[tokio::test]
async fn native_upload_names_a_colliding_body_by_its_safe_name() {
    let token = random_token(24);
    let gw = Gateway::start_with(&[], &[("GATEWAY_NATIVE_TOKEN", &token)]);
    let auth = format!("Bearer {token}");
    let send = |method: &str, target: &str, body: &[u8]| {
        gw.raw(method, target, &[("authorization", auth.as_str())], body)
            .unwrap_or_else(|e| panic!("{method} {target}: {e}"))
    };
    for bodies in pairs() {
        let shared = sha1_hex(&bodies[0]);
        for (i, body) in bodies.iter().enumerate() {
            let name = safe_name(body);
            // Under the SHA-1 the twins share: refused, and the answer names the body.
            let refused = send("PUT", &format!("/_files/{shared}?magic={}", 7 + i), body);
            assert_eq!(refused.status, 400, "{}", refused.text());
            assert!(refused.text().contains(&name), "{}", refused.text());
            let stored = send("PUT", &format!("/_files/{name}?magic={}", 7 + i), body);
            assert_eq!(stored.status, 200, "{}", stored.text());
        }
        for body in &bodies {
            let q = format!("size={}&crc32={:08x}", body.len(), crc32(body));
            let got = send("GET", &format!("/_files/{}?{q}", safe_name(body)), b"");
            assert_eq!(got.status, 200, "{}", got.text());
            assert_same_body(&got.body, body, "native GET by safe name");
            let none = send("GET", &format!("/_files/{shared}?{q}"), b"");
            assert_eq!(none.status, 404, "the shared SHA-1 names nothing");
        }
    }
}

/// `--sha1-collision-detection off` (only to measure what detection costs): content is
/// named by its plain SHA-1, bodies held in memory and streamed alike store and read back
/// byte-exact, duplicates share one file, and (the documented risk) the two bodies of a
/// collision share one name, where detection keeps them apart (the test above).
#[tokio::test]
async fn without_detection_bodies_are_stored_under_their_plain_sha1() {
    let gw = Gateway::start_with(&["--sha1-collision-detection", "off"], &[]);
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    // In memory (64 KiB, 3 MiB) and streamed to disk (over 16 MiB).
    let bodies: Vec<Vec<u8>> = [64 << 10, 3 << 20, (17 << 20) + 5]
        .iter()
        .enumerate()
        .map(|(i, &len)| e2e::random_body(1300 + i as u64, len))
        .collect();
    for (i, body) in bodies.iter().enumerate() {
        put_bytes(&s3, "bkt", &format!("one/{i}"), body).await;
        put_bytes(&s3, "bkt", &format!("two/{i}"), body).await;
    }
    for (i, body) in bodies.iter().enumerate() {
        for k in [format!("one/{i}"), format!("two/{i}")] {
            assert_same_body(&get_bytes(&s3, "bkt", &k).await, body, &k);
        }
        let f = gw
            .admin_file(&sha1_hex(body))
            .expect("FileDB has the plain SHA-1");
        assert_eq!(f.refs, Some(2), "{f:?}");
    }
    let [one, two] = pair("shattered-1.pdf", "shattered-2.pdf");
    put_bytes(&s3, "bkt", "pdf/1", &one).await;
    put_bytes(&s3, "bkt", "pdf/2", &two).await;
    assert_same_body(&get_bytes(&s3, "bkt", "pdf/1").await, &one, "pdf/1");
    let plain = gw.content_path(0, &sha1_hex(&one));
    assert!(plain.is_file(), "{} missing", plain.display());
    assert!(!gw.content_path(0, &safe_name(&one)).exists());
    assert!(!gw.content_path(0, &safe_name(&two)).exists());
    let files: Vec<_> = gw.content_files(0);
    assert_eq!(files.len(), bodies.len() + 1, "{files:?}");
}
