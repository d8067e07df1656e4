//! Object and bucket tags through the Rust SDK: Put/Get/DeleteObjectTagging (by version
//! too), `x-amz-tagging` on PutObject, CopyObject (the COPY and REPLACE directives) and
//! CreateMultipartUpload, `x-amz-tagging-count` on GET and HEAD, Put/Get/DeleteBucketTagging,
//! S3's limits and error codes, tags that follow their version (overwrite, delete marker,
//! DeleteVersion), and a refused request that leaves the data as it was.

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketVersioningStatus, CompletedMultipartUpload, CompletedPart, Tag, Tagging,
    TaggingDirective, VersioningConfiguration,
};
use e2e::{Gateway, create_bucket, get_bytes, put_bytes, s3_error};

fn tagging(pairs: &[(&str, &str)]) -> Tagging {
    let tags = pairs
        .iter()
        .map(|(k, v)| Tag::builder().key(*k).value(*v).build().expect("tag"))
        .collect();
    Tagging::builder()
        .set_tag_set(Some(tags))
        .build()
        .expect("tagging")
}

async fn object_tags(
    s3: &Client,
    bucket: &str,
    key: &str,
    version: Option<&str>,
) -> Vec<(String, String)> {
    s3.get_object_tagging()
        .bucket(bucket)
        .key(key)
        .set_version_id(version.map(str::to_string))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GetObjectTagging {key}: {e:?}"))
        .tag_set()
        .iter()
        .map(|t| (t.key().to_string(), t.value().to_string()))
        .collect()
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn tag_count(s3: &Client, bucket: &str, key: &str) -> Option<i32> {
    s3.get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .expect("GET")
        .tag_count()
}

fn head_count(gw: &Gateway, target: &str) -> Option<String> {
    let resp = gw.signed("HEAD", target).send();
    assert_eq!(resp.status, 200, "HEAD {target}");
    resp.header("x-amz-tagging-count").map(str::to_string)
}

#[tokio::test]
async fn object_tags_are_kept_read_replaced_and_removed() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;

    // PutObject with x-amz-tagging (URL-encoded query parameters).
    s3.put_object()
        .bucket("bkt")
        .key("k")
        .tagging("project=blue&note=two%20words&empty=")
        .body(ByteStream::from_static(b"body"))
        .send()
        .await
        .expect("PUT with tags");
    assert_eq!(
        object_tags(&s3, "bkt", "k", None).await,
        pairs(&[("project", "blue"), ("note", "two words"), ("empty", "")])
    );
    assert_eq!(tag_count(&s3, "bkt", "k").await, Some(3));
    assert_eq!(head_count(&gw, "/bkt/k").as_deref(), Some("3"));

    // PutObjectTagging replaces the set; an unversioned bucket names no version.
    let put = s3
        .put_object_tagging()
        .bucket("bkt")
        .key("k")
        .tagging(tagging(&[("a", "1")]))
        .send()
        .await
        .expect("PutObjectTagging");
    assert_eq!(put.version_id(), None);
    assert_eq!(
        object_tags(&s3, "bkt", "k", None).await,
        pairs(&[("a", "1")])
    );
    assert_eq!(tag_count(&s3, "bkt", "k").await, Some(1));

    // DeleteObjectTagging: none left, no count header; the object is untouched.
    s3.delete_object_tagging()
        .bucket("bkt")
        .key("k")
        .send()
        .await
        .expect("DeleteObjectTagging");
    assert!(object_tags(&s3, "bkt", "k", None).await.is_empty());
    assert_eq!(tag_count(&s3, "bkt", "k").await, None);
    assert_eq!(head_count(&gw, "/bkt/k"), None);
    assert_eq!(get_bytes(&s3, "bkt", "k").await, b"body");

    // An overwrite without tags has none; a delete takes them with it.
    put_bytes(&s3, "bkt", "k2", b"x").await;
    s3.put_object_tagging()
        .bucket("bkt")
        .key("k2")
        .tagging(tagging(&[("a", "1")]))
        .send()
        .await
        .expect("PutObjectTagging k2");
    put_bytes(&s3, "bkt", "k2", b"y").await;
    assert!(object_tags(&s3, "bkt", "k2", None).await.is_empty());
    s3.put_object()
        .bucket("bkt")
        .key("k3")
        .tagging("t=1")
        .body(ByteStream::from_static(b"z"))
        .send()
        .await
        .expect("PUT k3");
    s3.delete_object()
        .bucket("bkt")
        .key("k3")
        .send()
        .await
        .expect("DELETE k3");
    put_bytes(&s3, "bkt", "k3", b"again").await;
    assert!(object_tags(&s3, "bkt", "k3", None).await.is_empty());

    // No object, no bucket.
    let (status, code) = s3_error(
        s3.get_object_tagging()
            .bucket("bkt")
            .key("none")
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (404, "NoSuchKey"));
    let (status, code) = s3_error(
        s3.put_object_tagging()
            .bucket("bkt")
            .key("none")
            .tagging(tagging(&[("a", "1")]))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (404, "NoSuchKey"));
    let (status, code) = s3_error(
        s3.get_object_tagging()
            .bucket("nobkt")
            .key("k")
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (404, "NoSuchBucket"));
}

#[tokio::test]
async fn s3s_limits_answer_s3s_codes_and_leave_the_data_as_it_was() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    s3.put_object()
        .bucket("bkt")
        .key("k")
        .tagging("keep=me")
        .body(ByteStream::from_static(b"kept"))
        .send()
        .await
        .expect("PUT");
    let eleven: Vec<(String, String)> = (0..11).map(|i| (format!("k{i}"), "v".into())).collect();
    let eleven_ref: Vec<(&str, &str)> = eleven
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let long_key = "k".repeat(129);
    let long_value = "v".repeat(257);
    let cases: Vec<(Tagging, u16, &str)> = vec![
        (tagging(&eleven_ref), 400, "BadRequest"),
        (tagging(&[(&long_key, "v")]), 400, "InvalidTag"),
        (tagging(&[("k", &long_value)]), 400, "InvalidTag"),
        (tagging(&[("a", "1"), ("a", "2")]), 400, "InvalidTag"),
        (tagging(&[("aws:reserved", "1")]), 400, "InvalidTag"),
    ];
    for (t, want_status, want_code) in cases {
        let (status, code) = s3_error(
            s3.put_object_tagging()
                .bucket("bkt")
                .key("k")
                .tagging(t)
                .send()
                .await,
        );
        assert_eq!((status, code.as_str()), (want_status, want_code));
    }
    // At the limits: 10 tags, 128 and 256 characters (not bytes: two-byte letters).
    let ten: Vec<(String, String)> = (0..10).map(|i| (format!("k{i}"), "v".into())).collect();
    let ten_ref: Vec<(&str, &str)> = ten.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    s3.put_object_tagging()
        .bucket("bkt")
        .key("k")
        .tagging(tagging(&ten_ref))
        .send()
        .await
        .expect("ten tags");
    let (key128, value256) = ("é".repeat(128), "ü".repeat(256));
    s3.put_object_tagging()
        .bucket("bkt")
        .key("k")
        .tagging(tagging(&[(&key128, &value256)]))
        .send()
        .await
        .expect("the longest key and value");
    assert_eq!(
        object_tags(&s3, "bkt", "k", None).await,
        vec![(key128.clone(), value256.clone())]
    );

    // A malformed document, and a PUT whose header breaks the rules: nothing changes.
    let resp = gw
        .signed("PUT", "/bkt/k?tagging")
        .body(b"<Tagging><TagSet><Tag><Value>1</Value></Tag></TagSet></Tagging>")
        .send();
    assert_eq!(resp.status, 400);
    assert!(
        resp.text().contains("<Code>MalformedXML</Code>"),
        "{}",
        resp.text()
    );
    let resp = gw
        .signed("PUT", "/bkt/k?tagging")
        .body(&vec![b'x'; 200 * 1024])
        .send();
    assert_eq!(resp.status, 400, "an oversized body");
    for header in ["a=1&a=2", "aws:x=1"] {
        let (status, _) = s3_error(
            s3.put_object()
                .bucket("bkt")
                .key("k")
                .tagging(header)
                .body(ByteStream::from_static(b"replaced?"))
                .send()
                .await,
        );
        assert_eq!(status, 400, "{header}");
    }
    let many = (0..11)
        .map(|i| format!("k{i}=v"))
        .collect::<Vec<_>>()
        .join("&");
    let (status, code) = s3_error(
        s3.put_object()
            .bucket("bkt")
            .key("k")
            .tagging(many)
            .body(ByteStream::from_static(b"replaced?"))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (400, "BadRequest"));
    assert_eq!(get_bytes(&s3, "bkt", "k").await, b"kept");
    assert_eq!(
        object_tags(&s3, "bkt", "k", None).await,
        vec![(key128, value256)]
    );
}

#[tokio::test]
async fn tags_follow_their_version() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "ver").await;
    s3.put_bucket_versioning()
        .bucket("ver")
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .expect("versioning");
    let put = |body: &'static [u8], tags: &'static str| {
        let s3 = s3.clone();
        async move {
            s3.put_object()
                .bucket("ver")
                .key("k")
                .tagging(tags)
                .body(ByteStream::from_static(body))
                .send()
                .await
                .expect("PUT")
                .version_id()
                .expect("version id")
                .to_string()
        }
    };
    let v1 = put(b"one", "v=1").await;
    let v2 = put(b"two", "v=2").await;
    assert_eq!(
        object_tags(&s3, "ver", "k", Some(&v1)).await,
        pairs(&[("v", "1")])
    );
    assert_eq!(
        object_tags(&s3, "ver", "k", None).await,
        pairs(&[("v", "2")])
    );
    let got = s3
        .get_object_tagging()
        .bucket("ver")
        .key("k")
        .send()
        .await
        .expect("GetObjectTagging");
    assert_eq!(got.version_id(), Some(v2.as_str()));

    // A noncurrent version's tags change by id; the answer names it.
    let set = s3
        .put_object_tagging()
        .bucket("ver")
        .key("k")
        .version_id(&v1)
        .tagging(tagging(&[("v", "one")]))
        .send()
        .await
        .expect("PutObjectTagging v1");
    assert_eq!(set.version_id(), Some(v1.as_str()));
    assert_eq!(
        object_tags(&s3, "ver", "k", Some(&v1)).await,
        pairs(&[("v", "one")])
    );
    assert_eq!(
        object_tags(&s3, "ver", "k", None).await,
        pairs(&[("v", "2")])
    );
    let del = s3
        .delete_object_tagging()
        .bucket("ver")
        .key("k")
        .version_id(&v2)
        .send()
        .await
        .expect("DeleteObjectTagging v2");
    assert_eq!(del.version_id(), Some(v2.as_str()));
    s3.put_object_tagging()
        .bucket("ver")
        .key("k")
        .tagging(tagging(&[("v", "two")]))
        .send()
        .await
        .expect("PutObjectTagging current");

    // A delete marker: the current version has no tags to read (404) nor to set; by id,
    // 405 as S3 answers.
    let marker = s3
        .delete_object()
        .bucket("ver")
        .key("k")
        .send()
        .await
        .expect("DELETE")
        .version_id()
        .expect("marker id")
        .to_string();
    let (status, _) = s3_error(s3.get_object_tagging().bucket("ver").key("k").send().await);
    assert_eq!(status, 404);
    let (status, code) = s3_error(
        s3.get_object_tagging()
            .bucket("ver")
            .key("k")
            .version_id(&marker)
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (405, "MethodNotAllowed"));
    let (status, code) = s3_error(
        s3.get_object_tagging()
            .bucket("ver")
            .key("k")
            .version_id("0000000000000099deadbeef")
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (404, "NoSuchVersion"));
    assert_eq!(
        object_tags(&s3, "ver", "k", Some(&v2)).await,
        pairs(&[("v", "two")])
    );

    // The marker and v2 go: v1 is current again, with its tags.
    for id in [&marker, &v2] {
        s3.delete_object()
            .bucket("ver")
            .key("k")
            .version_id(id)
            .send()
            .await
            .expect("DeleteObject by version");
    }
    assert_eq!(
        object_tags(&s3, "ver", "k", None).await,
        pairs(&[("v", "one")])
    );
    assert_eq!(tag_count(&s3, "ver", "k").await, Some(1));
    assert_eq!(get_bytes(&s3, "ver", "k").await, b"one");
}

#[tokio::test]
async fn copies_and_uploads_carry_tags() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    s3.put_object()
        .bucket("bkt")
        .key("src")
        .tagging("from=source")
        .body(ByteStream::from_static(b"source"))
        .send()
        .await
        .expect("PUT src");
    // COPY (the default): the source's tags, even when the request names some.
    s3.copy_object()
        .bucket("bkt")
        .key("copied")
        .copy_source("bkt/src")
        .send()
        .await
        .expect("copy");
    assert_eq!(
        object_tags(&s3, "bkt", "copied", None).await,
        pairs(&[("from", "source")])
    );
    s3.copy_object()
        .bucket("bkt")
        .key("copied2")
        .copy_source("bkt/src")
        .tagging("ignored=yes")
        .send()
        .await
        .expect("copy with COPY directive");
    assert_eq!(
        object_tags(&s3, "bkt", "copied2", None).await,
        pairs(&[("from", "source")])
    );
    // REPLACE: the request's (none without the header).
    s3.copy_object()
        .bucket("bkt")
        .key("replaced")
        .copy_source("bkt/src")
        .tagging_directive(TaggingDirective::Replace)
        .tagging("to=copy")
        .send()
        .await
        .expect("copy with REPLACE");
    assert_eq!(
        object_tags(&s3, "bkt", "replaced", None).await,
        pairs(&[("to", "copy")])
    );
    s3.copy_object()
        .bucket("bkt")
        .key("bare")
        .copy_source("bkt/src")
        .tagging_directive(TaggingDirective::Replace)
        .send()
        .await
        .expect("copy with REPLACE and no tags");
    assert!(object_tags(&s3, "bkt", "bare", None).await.is_empty());
    // An unknown directive is InvalidArgument, and nothing is copied.
    let resp = gw
        .signed("PUT", "/bkt/copied")
        .header("x-amz-copy-source", "/bkt/src")
        .header("x-amz-tagging-directive", "SIDEWAYS")
        .send();
    assert_eq!(resp.status, 400);
    assert!(resp.text().contains("InvalidArgument"), "{}", resp.text());
    assert_eq!(
        object_tags(&s3, "bkt", "copied", None).await,
        pairs(&[("from", "source")])
    );

    // CreateMultipartUpload's tags go to the completed object.
    let id = s3
        .create_multipart_upload()
        .bucket("bkt")
        .key("mp")
        .tagging("upload=yes&n=2")
        .send()
        .await
        .expect("CreateMultipartUpload")
        .upload_id()
        .expect("upload id")
        .to_string();
    let part = s3
        .upload_part()
        .bucket("bkt")
        .key("mp")
        .upload_id(&id)
        .part_number(1)
        .body(ByteStream::from_static(b"only part"))
        .send()
        .await
        .expect("UploadPart");
    s3.complete_multipart_upload()
        .bucket("bkt")
        .key("mp")
        .upload_id(&id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .parts(
                    CompletedPart::builder()
                        .part_number(1)
                        .e_tag(part.e_tag().expect("etag"))
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .expect("CompleteMultipartUpload");
    assert_eq!(
        object_tags(&s3, "bkt", "mp", None).await,
        pairs(&[("upload", "yes"), ("n", "2")])
    );
    assert_eq!(tag_count(&s3, "bkt", "mp").await, Some(2));
    let (status, _) = s3_error(
        s3.create_multipart_upload()
            .bucket("bkt")
            .key("mp2")
            .tagging("aws:no=1")
            .send()
            .await,
    );
    assert_eq!(status, 400);
}

#[tokio::test]
async fn bucket_tags_are_kept_until_removed_or_the_bucket_goes() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let (status, code) = s3_error(s3.get_bucket_tagging().bucket("bkt").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchTagSet"));
    s3.put_bucket_tagging()
        .bucket("bkt")
        .tagging(tagging(&[("team", "storage"), ("cost", "42")]))
        .send()
        .await
        .expect("PutBucketTagging");
    let got = s3
        .get_bucket_tagging()
        .bucket("bkt")
        .send()
        .await
        .expect("GetBucketTagging");
    let got: Vec<(String, String)> = got
        .tag_set()
        .iter()
        .map(|t| (t.key().to_string(), t.value().to_string()))
        .collect();
    assert_eq!(got, pairs(&[("team", "storage"), ("cost", "42")]));
    // Up to 50 tags on a bucket; 51 is refused and the old set stays.
    let keys: Vec<String> = (0..51).map(|i| format!("k{i}")).collect();
    let fifty_one: Vec<(&str, &str)> = keys.iter().map(|k| (k.as_str(), "")).collect();
    let (status, _) = s3_error(
        s3.put_bucket_tagging()
            .bucket("bkt")
            .tagging(tagging(&fifty_one))
            .send()
            .await,
    );
    assert_eq!(status, 400);
    s3.put_bucket_tagging()
        .bucket("bkt")
        .tagging(tagging(&fifty_one[..50]))
        .send()
        .await
        .expect("fifty tags");
    s3.delete_bucket_tagging()
        .bucket("bkt")
        .send()
        .await
        .expect("DeleteBucketTagging");
    let (status, code) = s3_error(s3.get_bucket_tagging().bucket("bkt").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchTagSet"));
    // A deleted bucket's tags go with it: the next bucket of the name has none.
    s3.put_bucket_tagging()
        .bucket("bkt")
        .tagging(tagging(&[("old", "1")]))
        .send()
        .await
        .expect("PutBucketTagging");
    s3.delete_bucket()
        .bucket("bkt")
        .send()
        .await
        .expect("DeleteBucket");
    let (status, code) = s3_error(s3.get_bucket_tagging().bucket("bkt").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchBucket"));
    create_bucket(&s3, "bkt").await;
    let (status, code) = s3_error(s3.get_bucket_tagging().bucket("bkt").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchTagSet"));
}
