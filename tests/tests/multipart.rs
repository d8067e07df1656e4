//! Multipart uploads: Create/UploadPart/Complete, the multipart ETag, dedup of the result
//! with a single PUT of the same bytes, partNumber reads, ListParts, ListMultipartUploads,
//! Abort, UploadPartCopy and the errors of CompleteMultipartUpload.

use aws_sdk_s3::Client;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use e2e::{
    AdminFile, Gateway, assert_same_body, create_bucket, etag_of, get_bytes, put_bytes,
    random_body, s3_error, sha1_hex,
};
use md5::Digest as _;

const MIB: usize = 1024 * 1024;

/// The ETag S3 gives a multipart object: the MD5 of the parts' binary MD5s, `-<count>`.
fn multipart_etag(parts: &[&[u8]]) -> String {
    let mut all = Vec::with_capacity(16 * parts.len());
    for p in parts {
        all.extend_from_slice(md5::Md5::digest(p).as_slice());
    }
    format!(
        "\"{}-{}\"",
        hex::encode(md5::Md5::digest(&all).as_slice()),
        parts.len()
    )
}

async fn create_upload(s3: &Client, bucket: &str, key: &str) -> String {
    let out = s3
        .create_multipart_upload()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateMultipartUpload {bucket}/{key}: {e:?}"));
    assert_eq!(out.bucket(), Some(bucket));
    assert_eq!(out.key(), Some(key));
    out.upload_id()
        .filter(|id| !id.is_empty())
        .expect("CreateMultipartUpload returns an UploadId")
        .to_string()
}

/// UploadPart; asserts the part's ETag is the MD5 of its bytes and returns it.
async fn upload_part(
    s3: &Client,
    bucket: &str,
    key: &str,
    id: &str,
    n: i32,
    body: &[u8],
) -> String {
    let out = s3
        .upload_part()
        .bucket(bucket)
        .key(key)
        .upload_id(id)
        .part_number(n)
        .body(body.to_vec().into())
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "UploadPart {n} of {bucket}/{key} ({} bytes): {e:?}",
                body.len()
            )
        });
    let etag = out.e_tag().expect("UploadPart returns an ETag").to_string();
    assert_eq!(etag, etag_of(body), "ETag of part {n}");
    etag
}

/// UploadPartCopy of `source` ("bucket/key", URL-encoded), whole or `bytes=FIRST-LAST`;
/// returns the part's ETag.
async fn upload_part_copy(
    s3: &Client,
    (bucket, key, id): (&str, &str, &str),
    n: i32,
    source: &str,
    range: Option<(usize, usize)>,
) -> String {
    let out = s3
        .upload_part_copy()
        .bucket(bucket)
        .key(key)
        .upload_id(id)
        .part_number(n)
        .copy_source(source)
        .set_copy_source_range(range.map(|(first, last)| format!("bytes={first}-{last}")))
        .send()
        .await
        .unwrap_or_else(|e| panic!("UploadPartCopy {n} of {source} {range:?}: {e:?}"));
    out.copy_part_result()
        .and_then(|r| r.e_tag())
        .unwrap_or_else(|| panic!("UploadPartCopy {n} of {source}: no ETag"))
        .to_string()
}

fn completed(parts: &[(i32, &str)]) -> CompletedMultipartUpload {
    CompletedMultipartUpload::builder()
        .set_parts(Some(
            parts
                .iter()
                .map(|(n, etag)| {
                    CompletedPart::builder()
                        .part_number(*n)
                        .e_tag(*etag)
                        .build()
                })
                .collect(),
        ))
        .build()
}

/// CompleteMultipartUpload that must succeed; returns the object's ETag.
async fn complete(s3: &Client, bucket: &str, key: &str, id: &str, parts: &[(i32, &str)]) -> String {
    let out = s3
        .complete_multipart_upload()
        .bucket(bucket)
        .key(key)
        .upload_id(id)
        .multipart_upload(completed(parts))
        .send()
        .await
        .unwrap_or_else(|e| panic!("CompleteMultipartUpload {bucket}/{key}: {e:?}"));
    assert_eq!(out.bucket(), Some(bucket));
    assert_eq!(out.key(), Some(key));
    out.e_tag()
        .expect("CompleteMultipartUpload returns an ETag")
        .to_string()
}

/// The 11 MiB body used by several tests and its three parts (5 MiB, 5 MiB, 1 MiB).
fn eleven_mib(seed: u64) -> (Vec<u8>, [std::ops::Range<usize>; 3]) {
    (
        random_body(seed, 11 * MIB),
        [0..5 * MIB, 5 * MIB..10 * MIB, 10 * MIB..11 * MIB],
    )
}

/// Uploads `body` as the three `ranges` and completes; returns the object's ETag.
async fn upload_in_three_parts(
    s3: &Client,
    bucket: &str,
    key: &str,
    body: &[u8],
    ranges: &[std::ops::Range<usize>; 3],
) -> String {
    let id = create_upload(s3, bucket, key).await;
    let mut etags = Vec::new();
    for (i, r) in ranges.iter().enumerate() {
        etags.push(upload_part(s3, bucket, key, &id, i as i32 + 1, &body[r.clone()]).await);
    }
    let parts: Vec<(i32, &str)> = etags
        .iter()
        .enumerate()
        .map(|(i, e)| (i as i32 + 1, e.as_str()))
        .collect();
    complete(s3, bucket, key, &id, &parts).await
}

#[track_caller]
fn admin(gw: &Gateway, sha1: &str) -> AdminFile {
    gw.admin_file(sha1)
        .unwrap_or_else(|| panic!("admin knows nothing of {sha1}"))
}

#[tokio::test]
async fn three_parts_round_trip_with_the_multipart_etag() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let (body, ranges) = eleven_mib(1);
    let parts: Vec<&[u8]> = ranges.iter().map(|r| &body[r.clone()]).collect();
    let want_etag = multipart_etag(&parts);
    assert!(want_etag.ends_with("-3\""), "{want_etag}");

    let etag = upload_in_three_parts(&s3, "bkt", "big/object.bin", &body, &ranges).await;
    assert_eq!(etag, want_etag, "CompleteMultipartUpload ETag");

    let got = s3
        .get_object()
        .bucket("bkt")
        .key("big/object.bin")
        .send()
        .await
        .expect("GetObject");
    assert_eq!(got.e_tag(), Some(want_etag.as_str()), "GetObject ETag");
    assert_eq!(got.content_length(), Some(body.len() as i64));
    let bytes = got.body.collect().await.expect("body").into_bytes();
    assert_same_body(&bytes, &body, "GetObject of the completed upload");

    let head = s3
        .head_object()
        .bucket("bkt")
        .key("big/object.bin")
        .send()
        .await
        .expect("HeadObject");
    assert_eq!(head.e_tag(), Some(want_etag.as_str()), "HeadObject ETag");
    assert_eq!(head.content_length(), Some(body.len() as i64));

    let listed = s3
        .list_objects_v2()
        .bucket("bkt")
        .send()
        .await
        .expect("ListObjectsV2");
    let obj = &listed.contents()[0];
    assert_eq!(obj.key(), Some("big/object.bin"));
    assert_eq!(obj.e_tag(), Some(want_etag.as_str()), "listed ETag");
    assert_eq!(obj.size(), Some(body.len() as i64));
}

#[tokio::test]
async fn three_parts_and_one_put_of_the_same_bytes_are_one_content() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let (body, ranges) = eleven_mib(2);
    let sha1 = sha1_hex(&body);

    upload_in_three_parts(&s3, "bkt", "multi", &body, &ranges).await;
    let after_mp = admin(&gw, &sha1);
    assert_eq!(
        (after_mp.state.as_str(), after_mp.refs),
        ("live", Some(1)),
        "the completed object is one content under sha1(body): {after_mp:?}"
    );
    // The parts were dereferenced by the completion: on their way out.
    for (i, r) in ranges.iter().enumerate() {
        let part_sha1 = sha1_hex(&body[r.clone()]);
        let f = admin(&gw, &part_sha1);
        assert_eq!(
            f.state,
            "deleting",
            "part {} ({part_sha1}) after completion: {f:?}",
            i + 1
        );
    }

    put_bytes(&s3, "bkt", "single", &body).await;
    let after_put = admin(&gw, &sha1);
    assert_eq!(
        (after_put.state.as_str(), after_put.refs, after_put.pair),
        ("live", Some(2), after_mp.pair),
        "a PUT of the same bytes references the same content: {after_put:?}"
    );
    // One file per disk holds the whole body.
    for disk in 0..2 {
        let path = gw.content_path(disk, &sha1);
        let stored =
            std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        assert_same_body(&stored, &body, &format!("{}", path.display()));
    }
    assert_same_body(&get_bytes(&s3, "bkt", "multi").await, &body, "multi");
    assert_same_body(&get_bytes(&s3, "bkt", "single").await, &body, "single");
}

#[tokio::test]
async fn get_and_head_by_part_number() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let (body, ranges) = eleven_mib(3);
    upload_in_three_parts(&s3, "bkt", "obj", &body, &ranges).await;
    let total = body.len();

    for (i, r) in ranges.iter().enumerate() {
        let n = i as i32 + 1;
        let got = s3
            .get_object()
            .bucket("bkt")
            .key("obj")
            .part_number(n)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GetObject partNumber={n}: {e:?}"));
        assert_eq!(
            got.content_length(),
            Some(r.len() as i64),
            "part {n} length"
        );
        assert_eq!(
            got.content_range(),
            Some(format!("bytes {}-{}/{total}", r.start, r.end - 1).as_str()),
            "part {n} Content-Range"
        );
        assert_eq!(got.parts_count(), Some(3), "part {n}: x-amz-mp-parts-count");
        let bytes = got.body.collect().await.expect("body").into_bytes();
        assert_same_body(&bytes, &body[r.clone()], &format!("GET partNumber={n}"));

        let head = s3
            .head_object()
            .bucket("bkt")
            .key("obj")
            .part_number(n)
            .send()
            .await
            .unwrap_or_else(|e| panic!("HeadObject partNumber={n}: {e:?}"));
        assert_eq!(
            head.content_length(),
            Some(r.len() as i64),
            "HEAD part {n} length"
        );
        assert_eq!(head.parts_count(), Some(3), "HEAD part {n}: parts count");
    }

    // The exact status through a raw request.
    let resp = gw.signed("GET", "/bkt/obj?partNumber=2").send();
    assert_eq!(resp.status, 206, "GET ?partNumber=2: {}", resp.text());
    assert_eq!(
        resp.header("content-range"),
        Some(format!("bytes {}-{}/{total}", 5 * MIB, 10 * MIB - 1).as_str())
    );
    assert_same_body(&resp.body, &body[ranges[1].clone()], "raw GET partNumber=2");
    let resp = gw.signed("HEAD", "/bkt/obj?partNumber=2").send();
    assert_eq!(resp.status, 206, "HEAD ?partNumber=2");
    assert_eq!(
        resp.header("content-length"),
        Some((5 * MIB).to_string().as_str())
    );
}

#[tokio::test]
async fn part_number_beyond_the_last_part_is_416_invalid_part_number() {
    // S3: GetObject/HeadObject with partNumber > the part count is
    // 416 InvalidPartNumber "The requested partnumber is not satisfiable".
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let id = create_upload(&s3, "bkt", "obj").await;
    let etag = upload_part(&s3, "bkt", "obj", &id, 1, b"only part").await;
    complete(&s3, "bkt", "obj", &id, &[(1, &etag)]).await;
    let resp = gw.signed("GET", "/bkt/obj?partNumber=2").send();
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (416, Some("InvalidPartNumber")),
        "GET /bkt/obj?partNumber=2 of a 1-part object: {}",
        resp.text()
    );
}

#[tokio::test]
async fn list_parts_paginates_and_list_uploads_follows_the_upload() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let parts: Vec<Vec<u8>> = (0..3)
        .map(|i| random_body(40 + i, 1000 * (i as usize + 1)))
        .collect();

    let id_a = create_upload(&s3, "bkt", "dir/a").await;
    let id_b = create_upload(&s3, "bkt", "dir/b").await;
    let mut etags = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        etags.push(upload_part(&s3, "bkt", "dir/a", &id_a, i as i32 + 1, p).await);
    }
    let etag_b = upload_part(&s3, "bkt", "dir/b", &id_b, 1, b"the only part of b").await;

    // All parts in one page.
    let all = s3
        .list_parts()
        .bucket("bkt")
        .key("dir/a")
        .upload_id(&id_a)
        .send()
        .await
        .expect("ListParts");
    assert_eq!(all.is_truncated(), Some(false));
    let listed: Vec<(Option<i32>, Option<&str>, Option<i64>)> = all
        .parts()
        .iter()
        .map(|p| (p.part_number(), p.e_tag(), p.size()))
        .collect();
    let want: Vec<(Option<i32>, Option<&str>, Option<i64>)> = parts
        .iter()
        .zip(&etags)
        .enumerate()
        .map(|(i, (p, e))| (Some(i as i32 + 1), Some(e.as_str()), Some(p.len() as i64)))
        .collect();
    assert_eq!(listed, want, "ListParts");

    // One part per page.
    let mut marker: Option<String> = None;
    let mut seen = Vec::new();
    for page in 0..5 {
        let mut req = s3
            .list_parts()
            .bucket("bkt")
            .key("dir/a")
            .upload_id(&id_a)
            .max_parts(1);
        if let Some(m) = &marker {
            req = req.part_number_marker(m);
        }
        let out = req.send().await.expect("ListParts max-parts=1");
        assert_eq!(out.max_parts(), Some(1));
        assert_eq!(out.parts().len(), 1, "page {page}: {out:?}");
        let p = &out.parts()[0];
        seen.push((p.part_number(), p.size()));
        if out.is_truncated() == Some(true) {
            marker = Some(
                out.next_part_number_marker()
                    .expect("a truncated page has NextPartNumberMarker")
                    .to_string(),
            );
        } else {
            break;
        }
    }
    assert_eq!(
        seen,
        [
            (Some(1), Some(1000)),
            (Some(2), Some(2000)),
            (Some(3), Some(3000))
        ],
        "ListParts one page at a time"
    );

    let uploads = |out: &aws_sdk_s3::operation::list_multipart_uploads::ListMultipartUploadsOutput| -> Vec<(String, String)> {
        out.uploads()
            .iter()
            .map(|u| (u.key().unwrap_or("").to_string(), u.upload_id().unwrap_or("").to_string()))
            .collect()
    };
    let out = s3
        .list_multipart_uploads()
        .bucket("bkt")
        .send()
        .await
        .expect("ListMultipartUploads");
    assert_eq!(
        uploads(&out),
        [
            ("dir/a".to_string(), id_a.clone()),
            ("dir/b".to_string(), id_b.clone())
        ],
        "both uploads in progress"
    );

    // Completing b and aborting a take them off the list.
    complete(&s3, "bkt", "dir/b", &id_b, &[(1, &etag_b)]).await;
    let out = s3
        .list_multipart_uploads()
        .bucket("bkt")
        .send()
        .await
        .expect("ListMultipartUploads");
    assert_eq!(
        uploads(&out),
        [("dir/a".to_string(), id_a.clone())],
        "after completing b"
    );
    s3.abort_multipart_upload()
        .bucket("bkt")
        .key("dir/a")
        .upload_id(&id_a)
        .send()
        .await
        .expect("AbortMultipartUpload");
    let out = s3
        .list_multipart_uploads()
        .bucket("bkt")
        .send()
        .await
        .expect("ListMultipartUploads");
    assert_eq!(uploads(&out), [], "after aborting a");
    assert_eq!(get_bytes(&s3, "bkt", "dir/b").await, b"the only part of b");
}

#[tokio::test]
async fn abort_then_upload_part_is_no_such_upload() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let id = create_upload(&s3, "bkt", "k").await;
    let part = random_body(50, 4000);
    let etag = upload_part(&s3, "bkt", "k", &id, 1, &part).await;
    assert_eq!(
        admin(&gw, &sha1_hex(&part)).refs,
        Some(1),
        "the part is referenced"
    );

    s3.abort_multipart_upload()
        .bucket("bkt")
        .key("k")
        .upload_id(&id)
        .send()
        .await
        .expect("AbortMultipartUpload");
    let f = admin(&gw, &sha1_hex(&part));
    assert_eq!(
        f.state, "deleting",
        "the aborted upload's part is released: {f:?}"
    );

    let (status, code) = s3_error(
        s3.upload_part()
            .bucket("bkt")
            .key("k")
            .upload_id(&id)
            .part_number(2)
            .body(b"too late".to_vec().into())
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (404, "NoSuchUpload"),
        "UploadPart after Abort"
    );
    let (status, code) = s3_error(
        s3.complete_multipart_upload()
            .bucket("bkt")
            .key("k")
            .upload_id(&id)
            .multipart_upload(completed(&[(1, &etag)]))
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (404, "NoSuchUpload"),
        "Complete after Abort"
    );
    let (status, code) = s3_error(
        s3.list_parts()
            .bucket("bkt")
            .key("k")
            .upload_id(&id)
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (404, "NoSuchUpload"),
        "ListParts after Abort"
    );
    let (status, code) = s3_error(s3.get_object().bucket("bkt").key("k").send().await);
    assert_eq!(
        (status, code.as_str()),
        (404, "NoSuchKey"),
        "no object after Abort"
    );
}

#[tokio::test]
async fn a_small_part_before_the_last_is_entity_too_small() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let id = create_upload(&s3, "bkt", "k").await;
    let e1 = upload_part(&s3, "bkt", "k", &id, 1, &random_body(60, MIB)).await;
    let e2 = upload_part(&s3, "bkt", "k", &id, 2, &random_body(61, 1000)).await;
    let (status, code) = s3_error(
        s3.complete_multipart_upload()
            .bucket("bkt")
            .key("k")
            .upload_id(&id)
            .multipart_upload(completed(&[(1, &e1), (2, &e2)]))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (400, "EntityTooSmall"));
    let (status, _) = s3_error(s3.head_object().bucket("bkt").key("k").send().await);
    assert_eq!(status, 404, "no object");
    // The upload is still there and can be fixed: a 1-part completion is fine.
    complete(&s3, "bkt", "k", &id, &[(1, &e1)]).await;
}

#[tokio::test]
async fn a_wrong_or_missing_part_is_invalid_part() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let id = create_upload(&s3, "bkt", "k").await;
    let e1 = upload_part(&s3, "bkt", "k", &id, 1, &random_body(70, 2000)).await;
    let wrong = etag_of(b"some other bytes");
    let (status, code) = s3_error(
        s3.complete_multipart_upload()
            .bucket("bkt")
            .key("k")
            .upload_id(&id)
            .multipart_upload(completed(&[(1, &wrong)]))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (400, "InvalidPart"), "wrong ETag");
    let (status, code) = s3_error(
        s3.complete_multipart_upload()
            .bucket("bkt")
            .key("k")
            .upload_id(&id)
            .multipart_upload(completed(&[(1, &e1), (2, &e1)]))
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (400, "InvalidPart"),
        "part 2 never uploaded"
    );
    // The right list still works.
    complete(&s3, "bkt", "k", &id, &[(1, &e1)]).await;
}

#[tokio::test]
async fn parts_out_of_order_are_invalid_part_order() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let id = create_upload(&s3, "bkt", "k").await;
    let e1 = upload_part(&s3, "bkt", "k", &id, 1, &random_body(80, 5 * MIB)).await;
    let e2 = upload_part(&s3, "bkt", "k", &id, 2, &random_body(81, 100)).await;
    let (status, code) = s3_error(
        s3.complete_multipart_upload()
            .bucket("bkt")
            .key("k")
            .upload_id(&id)
            .multipart_upload(completed(&[(2, &e2), (1, &e1)]))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (400, "InvalidPartOrder"));
}

#[tokio::test]
async fn an_empty_part_list_is_rejected() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let id = create_upload(&s3, "bkt", "k").await;
    upload_part(&s3, "bkt", "k", &id, 1, b"a part").await;
    let (status, code) = s3_error(
        s3.complete_multipart_upload()
            .bucket("bkt")
            .key("k")
            .upload_id(&id)
            .multipart_upload(CompletedMultipartUpload::builder().build())
            .send()
            .await,
    );
    assert!(
        status == 400 && (code == "MalformedXML" || code == "InvalidRequest"),
        "SDK Complete with no parts: {status} {code}"
    );
    let body = b"<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"></CompleteMultipartUpload>";
    let resp = gw
        .signed("POST", &format!("/bkt/k?uploadId={id}"))
        .body(body)
        .send();
    let code = resp.error_code().unwrap_or_default();
    assert!(
        resp.status == 400 && (code == "MalformedXML" || code == "InvalidRequest"),
        "raw Complete with no parts: {} {}",
        resp.status,
        resp.text()
    );
    let (status, _) = s3_error(s3.head_object().bucket("bkt").key("k").send().await);
    assert_eq!(status, 404, "no object");
}

#[tokio::test]
async fn upload_part_copy_of_a_whole_object_and_of_a_range() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "src").await;
    create_bucket(&s3, "dst").await;
    let source = random_body(90, 6 * MIB);
    put_bytes(&s3, "src", "source object", &source).await;

    let id = create_upload(&s3, "dst", "assembled").await;
    let whole_etag = upload_part_copy(
        &s3,
        ("dst", "assembled", &id),
        1,
        "src/source%20object",
        None,
    )
    .await;
    assert_eq!(
        whole_etag,
        etag_of(&source),
        "ETag of the whole-object part"
    );

    let range = 100..1100;
    let ranged_etag = upload_part_copy(
        &s3,
        ("dst", "assembled", &id),
        2,
        "src/source%20object",
        Some((range.start, range.end - 1)),
    )
    .await;
    assert_eq!(
        ranged_etag,
        etag_of(&source[range.clone()]),
        "ETag of the ranged part"
    );

    let listed = s3
        .list_parts()
        .bucket("dst")
        .key("assembled")
        .upload_id(&id)
        .send()
        .await
        .expect("ListParts");
    let sizes: Vec<Option<i64>> = listed.parts().iter().map(|p| p.size()).collect();
    assert_eq!(sizes, [Some(6 * MIB as i64), Some(1000)]);

    let etag = complete(
        &s3,
        "dst",
        "assembled",
        &id,
        &[(1, &whole_etag), (2, &ranged_etag)],
    )
    .await;
    let mut want = source.clone();
    want.extend_from_slice(&source[range.clone()]);
    assert_eq!(etag, multipart_etag(&[&source, &source[range]]));
    assert_same_body(
        &get_bytes(&s3, "dst", "assembled").await,
        &want,
        "the object assembled from copied parts",
    );
    // The source is untouched.
    assert_same_body(
        &get_bytes(&s3, "src", "source object").await,
        &source,
        "source",
    );
    assert_eq!(admin(&gw, &sha1_hex(&source)).refs, Some(1), "source refs");
}

#[tokio::test]
async fn completing_over_an_existing_key_releases_the_old_content() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let old = random_body(100, 30_000);
    put_bytes(&s3, "bkt", "k", &old).await;
    assert_eq!(admin(&gw, &sha1_hex(&old)).refs, Some(1));

    let new = random_body(101, 20_000);
    let id = create_upload(&s3, "bkt", "k").await;
    let e1 = upload_part(&s3, "bkt", "k", &id, 1, &new).await;
    // Until completion the old object is still served.
    assert_same_body(&get_bytes(&s3, "bkt", "k").await, &old, "before completion");
    let etag = complete(&s3, "bkt", "k", &id, &[(1, &e1)]).await;
    assert_eq!(etag, multipart_etag(&[&new]));
    assert_same_body(&get_bytes(&s3, "bkt", "k").await, &new, "after completion");

    let f = admin(&gw, &sha1_hex(&old));
    assert_eq!(
        f.state, "deleting",
        "the replaced content was the only reference: {f:?}"
    );
    let f = admin(&gw, &sha1_hex(&new));
    assert_eq!(
        (f.state.as_str(), f.refs),
        ("live", Some(1)),
        "the new object holds one reference (the part's was dropped): {f:?}"
    );
}

#[tokio::test]
async fn range_and_part_number_together_are_invalid_request() {
    // S3: "Cannot specify both Range header and partNumber query parameter", 400
    // InvalidRequest.
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let id = create_upload(&s3, "bkt", "obj").await;
    let etag = upload_part(&s3, "bkt", "obj", &id, 1, b"0123456789abcdef").await;
    complete(&s3, "bkt", "obj", &id, &[(1, &etag)]).await;
    let resp = gw
        .signed("GET", "/bkt/obj?partNumber=1")
        .header("range", "bytes=0-3")
        .send();
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (400, Some("InvalidRequest")),
        "GET /bkt/obj?partNumber=1 with Range: bytes=0-3: {} {:?}",
        resp.text(),
        resp.header("content-range")
    );
}

#[tokio::test]
async fn uploading_a_part_number_again_replaces_the_part() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let first = random_body(110, 3000);
    let second = random_body(111, 4000);
    let id = create_upload(&s3, "bkt", "k").await;
    let e_first = upload_part(&s3, "bkt", "k", &id, 1, &first).await;
    let e_second = upload_part(&s3, "bkt", "k", &id, 1, &second).await;
    let listed = s3
        .list_parts()
        .bucket("bkt")
        .key("k")
        .upload_id(&id)
        .send()
        .await
        .expect("ListParts");
    let parts: Vec<(Option<i32>, Option<&str>, Option<i64>)> = listed
        .parts()
        .iter()
        .map(|p| (p.part_number(), p.e_tag(), p.size()))
        .collect();
    assert_eq!(parts, [(Some(1), Some(e_second.as_str()), Some(4000))]);
    let f = admin(&gw, &sha1_hex(&first));
    assert_eq!(f.state, "deleting", "the replaced part is released: {f:?}");
    let (status, code) = s3_error(
        s3.complete_multipart_upload()
            .bucket("bkt")
            .key("k")
            .upload_id(&id)
            .multipart_upload(completed(&[(1, &e_first)]))
            .send()
            .await,
    );
    assert_eq!(
        (status, code.as_str()),
        (400, "InvalidPart"),
        "the replaced part's ETag"
    );
    complete(&s3, "bkt", "k", &id, &[(1, &e_second)]).await;
    assert_same_body(&get_bytes(&s3, "bkt", "k").await, &second, "k");
}

#[tokio::test]
async fn upload_part_copy_of_a_multipart_source() {
    // A multipart source has no single MD5 of its body: the gateway reads and stores it.
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let p1 = random_body(120, 5 * MIB);
    let p2 = random_body(121, 100);
    let id = create_upload(&s3, "bkt", "mp-source").await;
    let e1 = upload_part(&s3, "bkt", "mp-source", &id, 1, &p1).await;
    let e2 = upload_part(&s3, "bkt", "mp-source", &id, 2, &p2).await;
    complete(&s3, "bkt", "mp-source", &id, &[(1, &e1), (2, &e2)]).await;
    let mut source = p1.clone();
    source.extend_from_slice(&p2);

    let id = create_upload(&s3, "bkt", "copy").await;
    let whole_etag = upload_part_copy(&s3, ("bkt", "copy", &id), 1, "bkt/mp-source", None).await;
    assert_eq!(
        whole_etag,
        etag_of(&source),
        "the part's ETag is the MD5 of its bytes"
    );
    let tail_etag = upload_part_copy(
        &s3,
        ("bkt", "copy", &id),
        2,
        "bkt/mp-source",
        Some((5 * MIB - 10, 5 * MIB + 9)),
    )
    .await;
    let tail_bytes = &source[5 * MIB - 10..5 * MIB + 10];
    assert_eq!(tail_etag, etag_of(tail_bytes));
    complete(
        &s3,
        "bkt",
        "copy",
        &id,
        &[(1, &whole_etag), (2, &tail_etag)],
    )
    .await;
    let mut want = source.clone();
    want.extend_from_slice(tail_bytes);
    assert_same_body(&get_bytes(&s3, "bkt", "copy").await, &want, "copy");
}

/// An empty last part: HEAD and GET with its partNumber report Content-Length 0 (and no
/// byte), the parts before it their own lengths.
#[tokio::test]
async fn an_empty_last_part_has_length_zero() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let first = random_body(41, 5 * 1024 * 1024);
    let id = create_upload(&s3, "bkt", "obj").await;
    let e1 = upload_part(&s3, "bkt", "obj", &id, 1, &first).await;
    let e2 = upload_part(&s3, "bkt", "obj", &id, 2, b"").await;
    complete(&s3, "bkt", "obj", &id, &[(1, &e1), (2, &e2)]).await;
    let head = gw.signed("HEAD", "/bkt/obj?partNumber=2").send();
    assert!(head.status < 300, "{}", head.status);
    assert_eq!(head.header("content-length"), Some("0"));
    assert_eq!(head.header("x-amz-mp-parts-count"), Some("2"));
    let get = gw.signed("GET", "/bkt/obj?partNumber=2").send();
    assert!(get.status < 300, "{}", get.status);
    assert!(get.body.is_empty());
    let head1 = gw.signed("HEAD", "/bkt/obj?partNumber=1").send();
    assert_eq!(
        head1.header("content-length"),
        Some(first.len().to_string().as_str())
    );
}
