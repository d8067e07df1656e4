//! Multipart checksums as the 2025 SDKs use them: each algorithm (and each checksum type
//! S3 allows with it) through the Rust SDK, from CreateMultipartUpload to GET/HEAD with
//! checksum mode ENABLED, ListParts, GET/HEAD of a part and GetObjectAttributes with
//! ObjectParts paging; S3's refusals (a wrong part checksum at completion, a part of
//! another algorithm, a composite completion without part checksums, a full-object
//! checksum that differs) leave the upload as it was.

use aws_sdk_s3::Client;
use aws_sdk_s3::types::{
    ChecksumAlgorithm, ChecksumMode, ChecksumType, CompletedMultipartUpload, CompletedPart,
    ObjectAttributes,
};
use e2e::{Gateway, base64_encode, create_bucket, random_body, s3_error};
use sha1::Digest as _;

/// A reflected CRC (init and xorout all ones), bit by bit: independent of the gateway's.
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

/// The binary checksum of `data`.
fn digest(alg: &ChecksumAlgorithm, data: &[u8]) -> Vec<u8> {
    match alg {
        ChecksumAlgorithm::Crc32 => crc32fast::hash(data).to_be_bytes().to_vec(),
        ChecksumAlgorithm::Crc32C => (crc_reflected(data, 0x82F6_3B78, 32) as u32)
            .to_be_bytes()
            .to_vec(),
        ChecksumAlgorithm::Crc64Nvme => crc_reflected(data, 0x9A6C_9329_AC4B_C9B5, 64)
            .to_be_bytes()
            .to_vec(),
        ChecksumAlgorithm::Sha1 => sha1::Sha1::digest(data).to_vec(),
        ChecksumAlgorithm::Sha256 => sha2::Sha256::digest(data).to_vec(),
        other => panic!("no reference for {other:?}"),
    }
}

fn b64(alg: &ChecksumAlgorithm, data: &[u8]) -> String {
    base64_encode(&digest(alg, data))
}

/// S3's composite checksum: of the concatenated binary part checksums, `-<parts>`.
fn composite(alg: &ChecksumAlgorithm, parts: &[&[u8]]) -> String {
    let binary: Vec<u8> = parts.iter().flat_map(|p| digest(alg, p)).collect();
    format!("{}-{}", b64(alg, &binary), parts.len())
}

macro_rules! value_of {
    ($out:expr, $alg:expr) => {
        match $alg {
            ChecksumAlgorithm::Crc32 => $out.checksum_crc32(),
            ChecksumAlgorithm::Crc32C => $out.checksum_crc32_c(),
            ChecksumAlgorithm::Crc64Nvme => $out.checksum_crc64_nvme(),
            ChecksumAlgorithm::Sha1 => $out.checksum_sha1(),
            ChecksumAlgorithm::Sha256 => $out.checksum_sha256(),
            _ => None,
        }
    };
}

fn completed_part(alg: &ChecksumAlgorithm, n: i32, etag: &str, value: &str) -> CompletedPart {
    let p = CompletedPart::builder().part_number(n).e_tag(etag);
    let p = match alg {
        ChecksumAlgorithm::Crc32 => p.checksum_crc32(value),
        ChecksumAlgorithm::Crc32C => p.checksum_crc32_c(value),
        ChecksumAlgorithm::Crc64Nvme => p.checksum_crc64_nvme(value),
        ChecksumAlgorithm::Sha1 => p.checksum_sha1(value),
        ChecksumAlgorithm::Sha256 => p.checksum_sha256(value),
        _ => p,
    };
    p.build()
}

const PART: usize = 5 * 1024 * 1024;

/// Creates an upload of `alg` (and `kind`, or S3's default) on `key`, uploads `parts`
/// with their checksums computed by the SDK, and returns the upload id and part ETags.
async fn upload(
    s3: &Client,
    key: &str,
    alg: &ChecksumAlgorithm,
    kind: Option<ChecksumType>,
    parts: &[&[u8]],
) -> (String, Vec<String>) {
    let created = s3
        .create_multipart_upload()
        .bucket("bkt")
        .key(key)
        .checksum_algorithm(alg.clone())
        .set_checksum_type(kind.clone())
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateMultipartUpload {key}: {e:?}"));
    assert_eq!(created.checksum_algorithm(), Some(alg), "{key}");
    let want_kind = kind.unwrap_or(if *alg == ChecksumAlgorithm::Crc64Nvme {
        ChecksumType::FullObject
    } else {
        ChecksumType::Composite
    });
    assert_eq!(created.checksum_type(), Some(&want_kind), "{key}");
    let id = created.upload_id().expect("upload id").to_string();
    let mut etags = Vec::new();
    for (i, body) in parts.iter().enumerate() {
        let n = i as i32 + 1;
        let out = s3
            .upload_part()
            .bucket("bkt")
            .key(key)
            .upload_id(&id)
            .part_number(n)
            .checksum_algorithm(alg.clone())
            .body(body.to_vec().into())
            .send()
            .await
            .unwrap_or_else(|e| panic!("UploadPart {n} of {key}: {e:?}"));
        assert_eq!(
            value_of!(out, alg),
            Some(b64(alg, body).as_str()),
            "UploadPart {n} of {key}"
        );
        etags.push(out.e_tag().expect("etag").to_string());
    }
    (id, etags)
}

#[tokio::test]
async fn every_algorithm_and_type_round_trips_through_the_sdk() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let p1 = random_body(1, PART);
    let p2 = random_body(2, PART);
    let p3 = random_body(3, 100_000);
    let parts: [&[u8]; 3] = [&p1, &p2, &p3];
    let whole: Vec<u8> = parts.concat();
    let cases = [
        (ChecksumAlgorithm::Crc32, None),
        (ChecksumAlgorithm::Crc32, Some(ChecksumType::FullObject)),
        (ChecksumAlgorithm::Crc32C, Some(ChecksumType::Composite)),
        (ChecksumAlgorithm::Crc32C, Some(ChecksumType::FullObject)),
        (ChecksumAlgorithm::Crc64Nvme, None),
        (ChecksumAlgorithm::Sha1, None),
        (ChecksumAlgorithm::Sha256, Some(ChecksumType::Composite)),
    ];
    for (alg, kind) in cases {
        let key = format!("{}-{:?}", alg.as_str(), kind);
        let (id, etags) = upload(&s3, &key, &alg, kind.clone(), &parts).await;
        let full = kind == Some(ChecksumType::FullObject) || alg == ChecksumAlgorithm::Crc64Nvme;
        let want = if full {
            b64(&alg, &whole)
        } else {
            composite(&alg, &parts)
        };
        let want_kind = if full {
            ChecksumType::FullObject
        } else {
            ChecksumType::Composite
        };

        // ListParts: the upload's algorithm and type, each part's checksum.
        let listed = s3
            .list_parts()
            .bucket("bkt")
            .key(&key)
            .upload_id(&id)
            .send()
            .await
            .unwrap_or_else(|e| panic!("ListParts {key}: {e:?}"));
        assert_eq!(listed.checksum_algorithm(), Some(&alg), "{key}");
        assert_eq!(listed.checksum_type(), Some(&want_kind), "{key}");
        for (i, p) in listed.parts().iter().enumerate() {
            assert_eq!(
                value_of!(p, &alg),
                Some(b64(&alg, parts[i]).as_str()),
                "{key} part {}",
                i + 1
            );
        }
        let uploads = s3
            .list_multipart_uploads()
            .bucket("bkt")
            .send()
            .await
            .expect("ListMultipartUploads");
        let u = uploads
            .uploads()
            .iter()
            .find(|u| u.upload_id() == Some(id.as_str()))
            .expect("the upload is listed");
        assert_eq!(u.checksum_algorithm(), Some(&alg), "{key}");

        let completed: Vec<CompletedPart> = etags
            .iter()
            .enumerate()
            .map(|(i, e)| completed_part(&alg, i as i32 + 1, e, &b64(&alg, parts[i])))
            .collect();
        let done = s3
            .complete_multipart_upload()
            .bucket("bkt")
            .key(&key)
            .upload_id(&id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(completed))
                    .build(),
            )
            .send()
            .await
            .unwrap_or_else(|e| panic!("CompleteMultipartUpload {key}: {e:?}"));
        assert_eq!(value_of!(done, &alg), Some(want.as_str()), "{key}");
        assert_eq!(done.checksum_type(), Some(&want_kind), "{key}");

        // GET and HEAD with checksum mode: the object's checksum and type (the SDK
        // checks a full-object one against the body it reads).
        let got = s3
            .get_object()
            .bucket("bkt")
            .key(&key)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GetObject {key}: {e:?}"));
        assert_eq!(value_of!(got, &alg), Some(want.as_str()), "GET {key}");
        assert_eq!(got.checksum_type(), Some(&want_kind), "GET {key}");
        let body = got.body.collect().await.expect("body").into_bytes();
        assert!(body[..] == whole[..], "GET {key}: body");
        let head = s3
            .head_object()
            .bucket("bkt")
            .key(&key)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .unwrap_or_else(|e| panic!("HeadObject {key}: {e:?}"));
        assert_eq!(value_of!(head, &alg), Some(want.as_str()), "HEAD {key}");
        assert_eq!(head.checksum_type(), Some(&want_kind), "HEAD {key}");

        // A part: its own checksum where the object's is composite, none where the
        // whole object's would not describe it.
        let part = s3
            .head_object()
            .bucket("bkt")
            .key(&key)
            .part_number(2)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .unwrap_or_else(|e| panic!("HeadObject part 2 of {key}: {e:?}"));
        let want_part = (!full).then(|| b64(&alg, parts[1]));
        assert_eq!(
            value_of!(part, &alg),
            want_part.as_deref(),
            "HEAD part 2 {key}"
        );
        let part = s3
            .get_object()
            .bucket("bkt")
            .key(&key)
            .part_number(3)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GetObject part 3 of {key}: {e:?}"));
        let want_part = (!full).then(|| b64(&alg, parts[2]));
        assert_eq!(
            value_of!(part, &alg),
            want_part.as_deref(),
            "GET part 3 {key}"
        );
        let body = part.body.collect().await.expect("body").into_bytes();
        assert!(body[..] == p3[..], "GET part 3 of {key}: body");

        // GetObjectAttributes, its parts two at a time.
        let mut marker = None;
        let mut seen = Vec::new();
        loop {
            let attrs = s3
                .get_object_attributes()
                .bucket("bkt")
                .key(&key)
                .object_attributes(ObjectAttributes::Etag)
                .object_attributes(ObjectAttributes::Checksum)
                .object_attributes(ObjectAttributes::ObjectParts)
                .object_attributes(ObjectAttributes::StorageClass)
                .object_attributes(ObjectAttributes::ObjectSize)
                .max_parts(2)
                .set_part_number_marker(marker.clone())
                .send()
                .await
                .unwrap_or_else(|e| panic!("GetObjectAttributes {key}: {e:?}"));
            assert_eq!(
                attrs.e_tag().map(|e| format!("\"{e}\"")),
                done.e_tag().map(str::to_string),
                "ETag of {key}, without quotes"
            );
            assert_eq!(attrs.object_size(), Some(whole.len() as i64));
            assert_eq!(attrs.storage_class().map(|s| s.as_str()), Some("STANDARD"));
            let c = attrs.checksum().expect("Checksum");
            assert_eq!(value_of!(c, &alg), Some(want.as_str()), "attributes {key}");
            assert_eq!(c.checksum_type(), Some(&want_kind));
            let op = attrs.object_parts().expect("ObjectParts");
            assert_eq!(op.total_parts_count(), Some(3));
            assert_eq!(op.max_parts(), Some(2));
            for p in op.parts() {
                let n = p.part_number().expect("PartNumber");
                assert_eq!(p.size(), Some(parts[n as usize - 1].len() as i64));
                // The object keeps its parts' checksums (it was completed from them).
                assert_eq!(
                    value_of!(p, &alg),
                    Some(b64(&alg, parts[n as usize - 1]).as_str()),
                    "{key} attributes part {n}"
                );
                seen.push(n);
            }
            if op.is_truncated() != Some(true) {
                break;
            }
            marker = op.next_part_number_marker().map(str::to_string);
        }
        assert_eq!(seen, [1, 2, 3], "{key}: every part once, in order");
    }
}

#[tokio::test]
async fn refused_completions_leave_the_upload_and_s3s_rules_hold() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    // Types S3 does not allow with an algorithm.
    for (alg, kind) in [
        (ChecksumAlgorithm::Sha1, ChecksumType::FullObject),
        (ChecksumAlgorithm::Sha256, ChecksumType::FullObject),
        (ChecksumAlgorithm::Crc64Nvme, ChecksumType::Composite),
    ] {
        let r = s3
            .create_multipart_upload()
            .bucket("bkt")
            .key("k")
            .checksum_algorithm(alg)
            .checksum_type(kind)
            .send()
            .await;
        assert_eq!(s3_error(r), (400, "InvalidRequest".to_string()));
    }
    let p1 = random_body(4, PART);
    let p2 = random_body(5, 1000);
    let parts: [&[u8]; 2] = [&p1, &p2];
    let alg = ChecksumAlgorithm::Crc32C;
    let (id, etags) = upload(&s3, "comp", &alg, None, &parts).await;

    // A part of another algorithm is refused.
    let r = s3
        .upload_part()
        .bucket("bkt")
        .key("comp")
        .upload_id(&id)
        .part_number(3)
        .checksum_algorithm(ChecksumAlgorithm::Sha256)
        .body(p2.clone().into())
        .send()
        .await;
    assert_eq!(s3_error(r), (400, "InvalidRequest".to_string()));

    let complete = |parts: Vec<CompletedPart>| {
        s3.complete_multipart_upload()
            .bucket("bkt")
            .key("comp")
            .upload_id(&id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            )
    };
    let good = |i: usize| completed_part(&alg, i as i32 + 1, &etags[i], &b64(&alg, parts[i]));
    // A part checksum that is not the stored one: InvalidPart.
    let wrong = completed_part(&alg, 2, &etags[1], &b64(&alg, b"other bytes"));
    let r = complete(vec![good(0), wrong]).send().await;
    assert_eq!(s3_error(r), (400, "InvalidPart".to_string()));
    // A composite completion must name every part's checksum.
    let bare = CompletedPart::builder()
        .part_number(2)
        .e_tag(&etags[1])
        .build();
    let r = complete(vec![good(0), bare]).send().await;
    assert_eq!(s3_error(r), (400, "InvalidRequest".to_string()));
    // The upload is as it was: completing it right works.
    let listed = s3
        .list_parts()
        .bucket("bkt")
        .key("comp")
        .upload_id(&id)
        .send()
        .await
        .expect("ListParts after refusals");
    assert_eq!(listed.parts().len(), 2);
    let done = complete(vec![good(0), good(1)])
        .send()
        .await
        .expect("completion");
    assert_eq!(
        done.checksum_crc32_c(),
        Some(composite(&alg, &parts).as_str())
    );

    // A full-object checksum that differs is BadDigest and keeps the upload.
    let alg = ChecksumAlgorithm::Crc64Nvme;
    let (id, etags) = upload(&s3, "full", &alg, None, &parts).await;
    let whole: Vec<u8> = parts.concat();
    let full_complete = |value: String| {
        s3.complete_multipart_upload()
            .bucket("bkt")
            .key("full")
            .upload_id(&id)
            .checksum_crc64_nvme(value)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .parts(
                        CompletedPart::builder()
                            .part_number(1)
                            .e_tag(&etags[0])
                            .build(),
                    )
                    .parts(
                        CompletedPart::builder()
                            .part_number(2)
                            .e_tag(&etags[1])
                            .build(),
                    )
                    .build(),
            )
            .send()
    };
    let r = full_complete(b64(&alg, b"not the object")).await;
    assert_eq!(s3_error(r), (400, "BadDigest".to_string()));
    let (status, _) = s3_error(s3.head_object().bucket("bkt").key("full").send().await);
    assert_eq!(status, 404, "nothing stored by the refused completion");
    let done = full_complete(b64(&alg, &whole))
        .await
        .expect("completion with the right full-object checksum");
    assert_eq!(done.checksum_crc64_nvme(), Some(b64(&alg, &whole).as_str()));
    assert_eq!(done.checksum_type(), Some(&ChecksumType::FullObject));
}

#[tokio::test]
async fn parts_without_a_checksum_get_one_and_copies_keep_or_compute_theirs() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let alg = ChecksumAlgorithm::Crc32C;
    let created = s3
        .create_multipart_upload()
        .bucket("bkt")
        .key("k")
        .checksum_algorithm(alg.clone())
        .send()
        .await
        .expect("create");
    let id = created.upload_id().expect("id").to_string();
    // A part sent without any checksum (a hand-signed request): S3 computes the
    // upload's algorithm for it.
    let p1 = random_body(6, PART);
    let resp = gw
        .signed("PUT", &format!("/bkt/k?partNumber=1&uploadId={id}"))
        .body(&p1)
        .send();
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(
        resp.header("x-amz-checksum-crc32c"),
        Some(b64(&alg, &p1).as_str())
    );
    // UploadPartCopy of a range of another object: the copied bytes' checksum.
    let source = random_body(7, 300_000);
    s3.put_object()
        .bucket("bkt")
        .key("src")
        .body(source.clone().into())
        .send()
        .await
        .expect("put source");
    let copied = s3
        .upload_part_copy()
        .bucket("bkt")
        .key("k")
        .upload_id(&id)
        .part_number(2)
        .copy_source("bkt/src")
        .copy_source_range("bytes=1000-200999")
        .send()
        .await
        .expect("UploadPartCopy");
    let p2 = &source[1000..201_000];
    let r = copied.copy_part_result().expect("CopyPartResult");
    assert_eq!(r.checksum_crc32_c(), Some(b64(&alg, p2).as_str()));
    let listed = s3
        .list_parts()
        .bucket("bkt")
        .key("k")
        .upload_id(&id)
        .send()
        .await
        .expect("ListParts");
    let values: Vec<_> = listed
        .parts()
        .iter()
        .map(|p| p.checksum_crc32_c())
        .collect();
    assert_eq!(
        values,
        [Some(b64(&alg, &p1).as_str()), Some(b64(&alg, p2).as_str())]
    );
    let completed = CompletedMultipartUpload::builder()
        .parts(completed_part(
            &alg,
            1,
            listed.parts()[0].e_tag().unwrap(),
            &b64(&alg, &p1),
        ))
        .parts(completed_part(
            &alg,
            2,
            listed.parts()[1].e_tag().unwrap(),
            &b64(&alg, p2),
        ))
        .build();
    s3.complete_multipart_upload()
        .bucket("bkt")
        .key("k")
        .upload_id(&id)
        .multipart_upload(completed)
        .send()
        .await
        .expect("complete");
    let want = composite(&alg, &[&p1, p2]);
    // CopyObject keeps the source's checksum, as S3 does.
    s3.copy_object()
        .bucket("bkt")
        .key("copy")
        .copy_source("bkt/k")
        .send()
        .await
        .expect("CopyObject");
    let head = s3
        .head_object()
        .bucket("bkt")
        .key("copy")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .expect("HEAD copy");
    assert_eq!(head.checksum_crc32_c(), Some(want.as_str()));
    assert_eq!(head.checksum_type(), Some(&ChecksumType::Composite));
}
