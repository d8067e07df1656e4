//! Flexible checksums: PutObject with CRC32, CRC32C, CRC64NVME, SHA-1 and SHA-256 (in a
//! header for in-memory bodies, in an aws-chunked trailer for streaming ones), returned on
//! GET/HEAD with checksum mode ENABLED; wrong checksums and wrong Content-MD5 are BadDigest
//! and store nothing; objects stored without a checksum report their CRC32.

use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, ChecksumMode};
use e2e::{
    Gateway, base64_encode, content_md5, create_bucket, etag_of, get_bytes, poll_until,
    random_body, s3_error, sha1_hex,
};
use sha1::Digest as _;

// ---- Reference implementations, independent of the SDK and of the gateway ----

/// A reflected CRC (init and xorout all ones) of `width` bits with the reflected `poly`.
fn crc_reflected(data: &[u8], poly: u64, width: u32) -> u64 {
    let mask = if width == 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    let mut crc = mask;
    for &b in data {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ poly
            } else {
                crc >> 1
            };
        }
    }
    crc ^ mask
}

fn crc32(data: &[u8]) -> u32 {
    crc_reflected(data, 0xEDB8_8320, 32) as u32
}

fn crc32c(data: &[u8]) -> u32 {
    crc_reflected(data, 0x82F6_3B78, 32) as u32
}

fn crc64nvme(data: &[u8]) -> u64 {
    crc_reflected(data, 0x9A6C_9329_AC4B_C9B5, 64)
}

/// SHA-256 (FIPS 180-4).
fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in msg.chunks(64) {
        let mut w = [0u32; 64];
        for i in 0..16 {
            w[i] = u32::from_be_bytes(block[4 * i..4 * i + 4].try_into().expect("4 bytes"));
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 32];
    for (i, word) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&word.to_be_bytes());
    }
    out
}

/// The base64 value S3 gives `alg` over `data`.
fn checksum(alg: &ChecksumAlgorithm, data: &[u8]) -> String {
    match alg {
        ChecksumAlgorithm::Crc32 => base64_encode(&crc32(data).to_be_bytes()),
        ChecksumAlgorithm::Crc32C => base64_encode(&crc32c(data).to_be_bytes()),
        ChecksumAlgorithm::Crc64Nvme => base64_encode(&crc64nvme(data).to_be_bytes()),
        ChecksumAlgorithm::Sha1 => base64_encode(sha1::Sha1::digest(data).as_slice()),
        ChecksumAlgorithm::Sha256 => base64_encode(&sha256(data)),
        other => panic!("no reference implementation for {other:?}"),
    }
}

fn header_name(alg: &ChecksumAlgorithm) -> &'static str {
    match alg {
        ChecksumAlgorithm::Crc32 => "x-amz-checksum-crc32",
        ChecksumAlgorithm::Crc32C => "x-amz-checksum-crc32c",
        ChecksumAlgorithm::Crc64Nvme => "x-amz-checksum-crc64nvme",
        ChecksumAlgorithm::Sha1 => "x-amz-checksum-sha1",
        ChecksumAlgorithm::Sha256 => "x-amz-checksum-sha256",
        other => panic!("no header for {other:?}"),
    }
}

const ALGORITHMS: [ChecksumAlgorithm; 5] = [
    ChecksumAlgorithm::Crc32,
    ChecksumAlgorithm::Crc32C,
    ChecksumAlgorithm::Crc64Nvme,
    ChecksumAlgorithm::Sha1,
    ChecksumAlgorithm::Sha256,
];

#[test]
fn reference_checksums_match_known_values() {
    // The CRC catalogue's check values over "123456789".
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    assert_eq!(crc64nvme(b"123456789"), 0xAE8B_1486_0A79_9888);
    assert_eq!(
        hex::encode(sha256(b"abc")),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(
        base64_encode(&sha256(b"")),
        "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
    );
    let long = vec![b'a'; 1000];
    assert_eq!(
        hex::encode(sha256(&long)),
        "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3"
    );
}

/// The checksum of `alg` in a GetObject/HeadObject/PutObject output.
macro_rules! value_of {
    ($out:expr, $alg:expr) => {
        match $alg {
            ChecksumAlgorithm::Crc32 => $out.checksum_crc32(),
            ChecksumAlgorithm::Crc32C => $out.checksum_crc32_c(),
            ChecksumAlgorithm::Crc64Nvme => $out.checksum_crc64_nvme(),
            ChecksumAlgorithm::Sha1 => $out.checksum_sha1(),
            ChecksumAlgorithm::Sha256 => $out.checksum_sha256(),
            other => panic!("unexpected {other:?}"),
        }
    };
}

/// Asserts GET and HEAD with checksum mode ENABLED (SDK and raw) report `want` for `alg`.
async fn assert_reported(
    gw: &Gateway,
    s3: &Client,
    key: &str,
    alg: &ChecksumAlgorithm,
    want: &str,
    body: &[u8],
) {
    let got = s3
        .get_object()
        .bucket("bkt")
        .key(key)
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GetObject {key} checksum mode ENABLED: {e:?}"));
    assert_eq!(value_of!(got, alg), Some(want), "GetObject {key}: {alg:?}");
    let bytes = got.body.collect().await.expect("body").into_bytes();
    assert_eq!(&bytes[..], body, "GetObject {key}: body");
    let head = s3
        .head_object()
        .bucket("bkt")
        .key(key)
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap_or_else(|e| panic!("HeadObject {key} checksum mode ENABLED: {e:?}"));
    assert_eq!(
        value_of!(head, alg),
        Some(want),
        "HeadObject {key}: {alg:?}"
    );
    for method in ["GET", "HEAD"] {
        let resp = gw
            .signed(method, &format!("/bkt/{key}"))
            .header("x-amz-checksum-mode", "ENABLED")
            .send();
        assert_eq!(resp.status, 200, "raw {method} {key}: {}", resp.text());
        assert_eq!(
            resp.header(header_name(alg)),
            Some(want),
            "raw {method} {key}: {} in {:?}",
            header_name(alg),
            resp.headers
        );
    }
}

#[tokio::test]
async fn every_algorithm_round_trips_in_a_header_and_in_a_trailer() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let dir = tempfile::tempdir().expect("temp dir");
    for (i, alg) in ALGORITHMS.iter().enumerate() {
        let body = random_body(10 + i as u64, 100_000 + i);
        let want = checksum(alg, &body);

        // In memory: the SDK computes the checksum and sends it as a header.
        let key = format!("header-{}", alg.as_str());
        let put = s3
            .put_object()
            .bucket("bkt")
            .key(&key)
            .checksum_algorithm(alg.clone())
            .body(body.clone().into())
            .send()
            .await
            .unwrap_or_else(|e| panic!("PutObject {key}: {e:?}"));
        assert_eq!(put.e_tag(), Some(etag_of(&body).as_str()), "{key}");
        assert_eq!(
            value_of!(put, alg),
            Some(want.as_str()),
            "PutObject {key} answer"
        );
        assert_reported(&gw, &s3, &key, alg, &want, &body).await;

        // From a file: aws-chunked with the checksum in a trailer.
        let key = format!("trailer-{}", alg.as_str());
        let path = dir.path().join(&key);
        std::fs::write(&path, &body).expect("write temp file");
        let put = s3
            .put_object()
            .bucket("bkt")
            .key(&key)
            .checksum_algorithm(alg.clone())
            .body(
                ByteStream::from_path(&path)
                    .await
                    .expect("ByteStream::from_path"),
            )
            .send()
            .await
            .unwrap_or_else(|e| panic!("PutObject {key}: {e:?}"));
        assert_eq!(put.e_tag(), Some(etag_of(&body).as_str()), "{key}");
        assert_eq!(
            value_of!(put, alg),
            Some(want.as_str()),
            "PutObject {key} answer"
        );
        assert_reported(&gw, &s3, &key, alg, &want, &body).await;
    }
}

/// Asserts that nothing of `body` reached the store and no object `key` exists.
async fn assert_nothing_stored(gw: &Gateway, s3: &Client, key: &str, body: &[u8]) {
    let (status, _) = s3_error(s3.head_object().bucket("bkt").key(key).send().await);
    assert_eq!(status, 404, "{key} must not exist");
    assert_eq!(
        gw.admin_file(&sha1_hex(body)),
        None,
        "admin knows the rejected body of {key}"
    );
    for disk in 0..2 {
        assert_eq!(
            gw.content_files(disk),
            Vec::<std::path::PathBuf>::new(),
            "content files on disk{disk} after the rejected {key}"
        );
    }
    let clean = poll_until(Duration::from_secs(5), || {
        gw.temp_files(0).is_empty() && gw.temp_files(1).is_empty()
    });
    assert!(
        clean,
        "temp files left by the rejected {key}: {:?} {:?}",
        gw.temp_files(0),
        gw.temp_files(1)
    );
}

#[tokio::test]
async fn a_wrong_checksum_is_bad_digest_and_stores_nothing() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(20, 50_000);

    let (status, code) = s3_error(
        s3.put_object()
            .bucket("bkt")
            .key("crc32")
            .checksum_crc32("AAAAAA==")
            .body(body.clone().into())
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (400, "BadDigest"),
        "x-amz-checksum-crc32: AAAAAA=="
    );
    assert_nothing_stored(&gw, &s3, "crc32", &body).await;

    let (status, code) = s3_error(
        s3.put_object()
            .bucket("bkt")
            .key("sha256")
            .checksum_sha256(checksum(&ChecksumAlgorithm::Sha256, b"other bytes"))
            .body(body.clone().into())
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (400, "BadDigest"),
        "x-amz-checksum-sha256 of other bytes"
    );
    assert_nothing_stored(&gw, &s3, "sha256", &body).await;
}

#[tokio::test]
async fn a_wrong_checksum_in_a_trailer_is_bad_digest_and_stores_nothing() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(21, 40_000);
    let aws_chunked = |trailer_value: &str| -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in body.chunks(16 * 1024) {
            out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
            out.extend_from_slice(chunk);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(
            format!("0\r\nx-amz-checksum-crc32c:{trailer_value}\r\n\r\n").as_bytes(),
        );
        out
    };
    let send = |key: &str, trailer_value: &str| {
        gw.signed("PUT", &format!("/bkt/{key}"))
            .payload_hash("STREAMING-UNSIGNED-PAYLOAD-TRAILER")
            .header("content-encoding", "aws-chunked")
            .header("x-amz-decoded-content-length", &body.len().to_string())
            .header("x-amz-trailer", "x-amz-checksum-crc32c")
            .body(&aws_chunked(trailer_value))
            .send()
    };
    let resp = send("bad", "AAAAAA==");
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (400, Some("BadDigest")),
        "aws-chunked PUT with trailer x-amz-checksum-crc32c:AAAAAA==: {}",
        resp.text()
    );
    assert_nothing_stored(&gw, &s3, "bad", &body).await;

    // The control: the right trailer value is accepted and kept.
    let want = checksum(&ChecksumAlgorithm::Crc32C, &body);
    let resp = send("good", &want);
    assert_eq!(
        resp.status,
        200,
        "aws-chunked PUT with the right trailer: {}",
        resp.text()
    );
    assert_eq!(get_bytes(&s3, "bkt", "good").await, body);
    assert_reported(&gw, &s3, "good", &ChecksumAlgorithm::Crc32C, &want, &body).await;
}

#[tokio::test]
async fn a_wrong_content_md5_is_bad_digest_and_stores_nothing() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(30, 30_000);

    let (status, code) = s3_error(
        s3.put_object()
            .bucket("bkt")
            .key("sdk")
            .content_md5(content_md5(b"not the body"))
            .body(body.clone().into())
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (400, "BadDigest"),
        "SDK PUT with a wrong Content-MD5"
    );
    assert_nothing_stored(&gw, &s3, "sdk", &body).await;

    let resp = gw
        .signed("PUT", "/bkt/raw")
        .header("content-md5", &content_md5(b"not the body"))
        .body(&body)
        .send();
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (400, Some("BadDigest")),
        "raw PUT with a wrong Content-MD5: {}",
        resp.text()
    );
    assert_nothing_stored(&gw, &s3, "raw", &body).await;

    // The control: the right Content-MD5 is accepted.
    s3.put_object()
        .bucket("bkt")
        .key("right")
        .content_md5(content_md5(&body))
        .body(body.clone().into())
        .send()
        .await
        .expect("PUT with the right Content-MD5");
    assert_eq!(get_bytes(&s3, "bkt", "right").await, body);
}

#[tokio::test]
async fn an_object_stored_without_a_checksum_reports_its_crc32() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(40, 77_777);
    // A hand-signed PUT sends no x-amz-checksum-* and no x-amz-sdk-checksum-algorithm.
    let resp = gw.signed("PUT", "/bkt/plain").body(&body).send();
    assert_eq!(resp.status, 200, "raw PUT: {}", resp.text());
    let want = base64_encode(&crc32(&body).to_be_bytes());
    assert_reported(&gw, &s3, "plain", &ChecksumAlgorithm::Crc32, &want, &body).await;
    // Without checksum mode, no checksum header.
    let resp = gw.signed("HEAD", "/bkt/plain").send();
    assert_eq!(
        resp.header("x-amz-checksum-crc32"),
        None,
        "{:?}",
        resp.headers
    );
}
