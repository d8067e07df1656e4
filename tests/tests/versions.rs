//! Bucket versioning through a real S3 client (the Rust AWS SDK) and boto3: version ids on
//! every write, reads and copies of any version, delete markers, DELETE of one version
//! with the next newest made current, DeleteObjects with versions, and FileDB exact
//! throughout: every version holds its own reference to its (deduplicated) content, and
//! removing a version releases it once (`gateway fsck` counts every version).

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketVersioningStatus, CompletedMultipartUpload, CompletedPart, Delete, ObjectIdentifier,
    VersioningConfiguration,
};
use e2e::{Gateway, create_bucket, get_bytes, put_bytes, random_body, s3_error, sha1_hex};

const BUCKET: &str = "archive";

async fn enable_versioning(s3: &Client, bucket: &str) {
    s3.put_bucket_versioning()
        .bucket(bucket)
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .expect("enable versioning");
}

async fn put_version(s3: &Client, key: &str, body: &[u8]) -> String {
    let out = s3
        .put_object()
        .bucket(BUCKET)
        .key(key)
        .body(ByteStream::from(body.to_vec()))
        .send()
        .await
        .expect("put");
    out.version_id().expect("a version id").to_string()
}

async fn get_version(s3: &Client, key: &str, version: &str) -> Vec<u8> {
    let out = s3
        .get_object()
        .bucket(BUCKET)
        .key(key)
        .version_id(version)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {key} version {version}: {e:?}"));
    assert_eq!(out.version_id(), Some(version));
    out.body
        .collect()
        .await
        .expect("body")
        .into_bytes()
        .to_vec()
}

fn refs(gw: &Gateway, body: &[u8]) -> Option<u64> {
    gw.admin_file(&sha1_hex(body)).and_then(|f| f.refs)
}

/// The life of one key in a versioned bucket, with FileDB checked at each step.
#[tokio::test]
async fn versions_keep_every_write_and_each_holds_one_reference() {
    let mut gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, BUCKET).await;
    // Before versioning: no Status; the object written now is the null version.
    let before = s3
        .get_bucket_versioning()
        .bucket(BUCKET)
        .send()
        .await
        .expect("get versioning");
    assert_eq!(before.status(), None);
    let (b0, b1, b2) = (
        random_body(1, 3000),
        random_body(2, 4000),
        random_body(3, 5000),
    );
    put_bytes(&s3, BUCKET, "k", &b0).await;
    enable_versioning(&s3, BUCKET).await;
    let after = s3
        .get_bucket_versioning()
        .bucket(BUCKET)
        .send()
        .await
        .expect("get versioning");
    assert_eq!(after.status(), Some(&BucketVersioningStatus::Enabled));

    // Three versions on top of the null one; the same body twice is one file, two refs.
    let v1 = put_version(&s3, "k", &b1).await;
    let v2 = put_version(&s3, "k", &b2).await;
    let v3 = put_version(&s3, "k", &b1).await;
    assert!(v1 != v2 && v2 != v3 && v1 != v3, "{v1} {v2} {v3}");
    assert_eq!(refs(&gw, &b0), Some(1));
    assert_eq!(refs(&gw, &b1), Some(2));
    assert_eq!(refs(&gw, &b2), Some(1));

    // The current version, and every version by id.
    let current = s3
        .get_object()
        .bucket(BUCKET)
        .key("k")
        .send()
        .await
        .expect("get");
    assert_eq!(current.version_id(), Some(v3.as_str()));
    assert_eq!(get_bytes(&s3, BUCKET, "k").await, b1);
    assert_eq!(get_version(&s3, "k", "null").await, b0);
    assert_eq!(get_version(&s3, "k", &v1).await, b1);
    assert_eq!(get_version(&s3, "k", &v2).await, b2);
    let head = s3
        .head_object()
        .bucket(BUCKET)
        .key("k")
        .version_id(&v2)
        .send()
        .await
        .expect("head v2");
    assert_eq!(head.content_length(), Some(5000));
    assert_eq!(head.version_id(), Some(v2.as_str()));

    // Ids that name nothing: malformed is 400, unknown is 404 NoSuchVersion.
    let bad = s3
        .get_object()
        .bucket(BUCKET)
        .key("k")
        .version_id("not-an-id")
        .send()
        .await;
    assert_eq!(s3_error(bad), (400, "InvalidArgument".to_string()));
    let unknown = s3
        .get_object()
        .bucket(BUCKET)
        .key("k")
        .version_id("00000000000000630000abcd")
        .send()
        .await;
    assert_eq!(s3_error(unknown), (404, "NoSuchVersion".to_string()));

    // DELETE without an id adds a delete marker: GET is 404, every version stays.
    let marker = s3
        .delete_object()
        .bucket(BUCKET)
        .key("k")
        .send()
        .await
        .expect("delete");
    assert_eq!(marker.delete_marker(), Some(true));
    let marker_id = marker.version_id().expect("marker id").to_string();
    let gone = s3.get_object().bucket(BUCKET).key("k").send().await;
    assert_eq!(s3_error(gone), (404, "NoSuchKey".to_string()));
    let raw = gw.signed("GET", &format!("/{BUCKET}/k")).send();
    assert_eq!(raw.status, 404);
    assert_eq!(raw.header("x-amz-delete-marker"), Some("true"));
    assert_eq!(raw.header("x-amz-version-id"), Some(marker_id.as_str()));
    let on_marker = gw
        .signed("GET", &format!("/{BUCKET}/k?versionId={marker_id}"))
        .send();
    assert_eq!(on_marker.status, 405, "a marker has no content");
    assert_eq!(on_marker.header("x-amz-delete-marker"), Some("true"));
    assert_eq!(get_version(&s3, "k", &v3).await, b1);
    assert_eq!(refs(&gw, &b1), Some(2), "a marker releases nothing");

    // Removing the marker makes the newest version current again.
    let removed = s3
        .delete_object()
        .bucket(BUCKET)
        .key("k")
        .version_id(&marker_id)
        .send()
        .await
        .expect("delete marker");
    assert_eq!(removed.delete_marker(), Some(true));
    assert_eq!(get_bytes(&s3, BUCKET, "k").await, b1);

    // Removing the current version promotes the next newest, releasing its content once.
    s3.delete_object()
        .bucket(BUCKET)
        .key("k")
        .version_id(&v3)
        .send()
        .await
        .expect("delete v3");
    assert_eq!(refs(&gw, &b1), Some(1));
    let now = s3
        .get_object()
        .bucket(BUCKET)
        .key("k")
        .send()
        .await
        .expect("get");
    assert_eq!(now.version_id(), Some(v2.as_str()));
    let gone = s3
        .get_object()
        .bucket(BUCKET)
        .key("k")
        .version_id(&v3)
        .send()
        .await;
    assert_eq!(s3_error(gone), (404, "NoSuchVersion".to_string()));

    // Restoring an old version: copy it onto its own key, a new version with its bytes.
    let restored = s3
        .copy_object()
        .bucket(BUCKET)
        .key("k")
        .copy_source(format!("{BUCKET}/k?versionId=null"))
        .send()
        .await
        .expect("copy the null version");
    assert_eq!(restored.copy_source_version_id(), Some("null"));
    let v4 = restored.version_id().expect("new version").to_string();
    assert_eq!(get_bytes(&s3, BUCKET, "k").await, b0);
    assert_eq!(refs(&gw, &b0), Some(2));
    let on_marker_copy = s3
        .copy_object()
        .bucket(BUCKET)
        .key("other")
        .copy_source(format!("{BUCKET}/k?versionId={marker_id}"))
        .send()
        .await;
    assert_eq!(
        s3_error(on_marker_copy).0,
        404,
        "a removed marker is no version"
    );

    // A multipart upload stores one more version.
    let part = random_body(4, 5 * 1024 * 1024);
    let up = s3
        .create_multipart_upload()
        .bucket(BUCKET)
        .key("k")
        .send()
        .await
        .expect("create upload");
    let id = up.upload_id().expect("upload id");
    let p1 = s3
        .upload_part()
        .bucket(BUCKET)
        .key("k")
        .upload_id(id)
        .part_number(1)
        .body(ByteStream::from(part.clone()))
        .send()
        .await
        .expect("part");
    let done = s3
        .complete_multipart_upload()
        .bucket(BUCKET)
        .key("k")
        .upload_id(id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .parts(
                    CompletedPart::builder()
                        .part_number(1)
                        .e_tag(p1.e_tag().expect("etag"))
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .expect("complete");
    let v5 = done
        .version_id()
        .expect("version of the completion")
        .to_string();
    assert_eq!(get_version(&s3, "k", &v4).await, b0);
    assert_eq!(get_version(&s3, "k", &v5).await, part);

    // DeleteObjects: one version by id, and a key without one (a marker).
    let out = s3
        .delete_objects()
        .bucket(BUCKET)
        .delete(
            Delete::builder()
                .objects(
                    ObjectIdentifier::builder()
                        .key("k")
                        .version_id(&v1)
                        .build()
                        .expect("id"),
                )
                .objects(ObjectIdentifier::builder().key("k").build().expect("id"))
                .build()
                .expect("delete"),
        )
        .send()
        .await
        .expect("delete objects");
    assert!(out.errors().is_empty(), "{:?}", out.errors());
    let deleted = out.deleted();
    assert_eq!(deleted.len(), 2);
    assert_eq!(deleted[0].version_id(), Some(v1.as_str()));
    assert_eq!(deleted[1].delete_marker(), Some(true));
    assert!(deleted[1].delete_marker_version_id().is_some());
    assert_eq!(refs(&gw, &b1), None, "v1 was b1's last reference");

    // The bucket cannot be deleted while a version remains.
    let refused = s3.delete_bucket().bucket(BUCKET).send().await;
    assert_eq!(s3_error(refused), (409, "BucketNotEmpty".to_string()));
    gw.kill9();
    e2e::assert_fsck_clean(gw.data_dir());
}

/// A suspended bucket writes the null version, replacing the old one wherever it is (its
/// content released once), while the numbered versions stay; enabled again, new writes
/// are numbered and the null version stays until removed by id.
#[tokio::test]
async fn a_suspended_bucket_replaces_its_null_version() {
    let mut gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, BUCKET).await;
    enable_versioning(&s3, BUCKET).await;
    let (a, b, c, d) = (
        random_body(21, 1000),
        random_body(22, 2000),
        random_body(23, 3000),
        random_body(24, 4000),
    );
    let v1 = put_version(&s3, "k", &a).await;
    s3.put_bucket_versioning()
        .bucket(BUCKET)
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Suspended)
                .build(),
        )
        .send()
        .await
        .expect("suspend");
    let state = s3
        .get_bucket_versioning()
        .bucket(BUCKET)
        .send()
        .await
        .expect("get versioning");
    assert_eq!(state.status(), Some(&BucketVersioningStatus::Suspended));
    assert_eq!(put_version(&s3, "k", &b).await, "null");
    assert_eq!(put_version(&s3, "k", &c).await, "null");
    assert_eq!(
        refs(&gw, &b),
        None,
        "the replaced null version was released"
    );
    assert_eq!(get_bytes(&s3, BUCKET, "k").await, c);
    assert_eq!(get_version(&s3, "k", &v1).await, a);
    let ids: Vec<String> = list_all(&s3, BUCKET, "", 1000)
        .await
        .into_iter()
        .map(|l| l.1)
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(ids.contains(&"null".to_string()) && ids.contains(&v1));

    // DELETE writes a null delete marker, releasing the null object it replaces.
    let marker = s3
        .delete_object()
        .bucket(BUCKET)
        .key("k")
        .send()
        .await
        .expect("delete");
    assert_eq!(marker.delete_marker(), Some(true));
    assert_eq!(marker.version_id(), Some("null"));
    assert_eq!(refs(&gw, &c), None);
    let gone = s3.get_object().bucket(BUCKET).key("k").send().await;
    assert_eq!(s3_error(gone), (404, "NoSuchKey".to_string()));

    // Enabled again: numbered versions on top, the null marker kept until removed by id.
    enable_versioning(&s3, BUCKET).await;
    let v3 = put_version(&s3, "k", &d).await;
    assert_ne!(v3, "null");
    let listed = list_all(&s3, BUCKET, "", 1).await;
    assert_eq!(listed.len(), 3, "{listed:?}");
    s3.delete_object()
        .bucket(BUCKET)
        .key("k")
        .version_id("null")
        .send()
        .await
        .expect("remove the null marker");
    let listed = list_all(&s3, BUCKET, "", 1000).await;
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(get_bytes(&s3, BUCKET, "k").await, d);
    assert_eq!(refs(&gw, &a), Some(1));
    gw.kill9();
    e2e::assert_fsck_clean(gw.data_dir());
}

/// Without versioning, `versionId=null` names the one version there is; DELETE of it
/// removes the object. A bucket with lifecycle rules turns versioning on; a versioned
/// bucket takes no delete-prefix job (jobs do not remove versions yet).
#[tokio::test]
async fn the_null_version_and_what_versioning_refuses() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, BUCKET).await;
    let body = random_body(9, 1000);
    put_bytes(&s3, BUCKET, "plain", &body).await;
    let got = s3
        .get_object()
        .bucket(BUCKET)
        .key("plain")
        .version_id("null")
        .send()
        .await
        .expect("get null");
    assert_eq!(got.body.collect().await.expect("body").into_bytes(), body);
    // Asked for no version, an unversioned bucket names none.
    let raw = gw.signed("GET", &format!("/{BUCKET}/plain")).send();
    assert_eq!(raw.status, 200);
    assert_eq!(raw.header("x-amz-version-id"), None);
    s3.delete_object()
        .bucket(BUCKET)
        .key("plain")
        .version_id("null")
        .send()
        .await
        .expect("delete null");
    let gone = s3.get_object().bucket(BUCKET).key("plain").send().await;
    assert_eq!(s3_error(gone), (404, "NoSuchKey".to_string()));
    assert_eq!(refs(&gw, &body), None);

    // Lifecycle rules and versioning go together (the worker keeps versions by the rules,
    // see tests/tests/lifecycle.rs).
    let rules = r#"<LifecycleConfiguration><Rule><ID>x</ID><Filter><Prefix>tmp/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule></LifecycleConfiguration>"#;
    let set = gw
        .signed("PUT", &format!("/{BUCKET}?lifecycle"))
        .header("content-md5", &e2e::content_md5(rules.as_bytes()))
        .body(rules.as_bytes())
        .send();
    assert_eq!(set.status, 200, "{}", set.text());
    enable_versioning(&s3, BUCKET).await;
    create_bucket(&s3, "versioned").await;
    enable_versioning(&s3, "versioned").await;
    // Nor do delete-prefix jobs delete versions yet: refused at their start.
    put_bytes(&s3, "versioned", "tmp/a", b"kept").await;
    let auth = format!("Bearer {}", gw.admin_token());
    let job = gw
        .raw(
            "POST",
            "/_admin/jobs",
            &[
                ("authorization", auth.as_str()),
                ("content-type", "application/json"),
            ],
            br#"{"op":"delete-prefix","bucket":"versioned","prefix":"tmp/"}"#,
        )
        .expect("POST /_admin/jobs");
    assert_eq!(job.status, 400, "{}", job.text());
    assert!(job.text().contains("versioned"), "{}", job.text());
    assert_eq!(get_bytes(&s3, "versioned", "tmp/a").await, b"kept");
}

/// One listed version as the test compares it: key, version id, latest, delete marker.
type Listed = (String, String, bool, bool);

/// Every page of ListObjectVersions, `max_keys` at a time, following the markers.
async fn list_all(s3: &Client, bucket: &str, prefix: &str, max_keys: i32) -> Vec<Listed> {
    let mut out = Vec::new();
    let (mut key_marker, mut version_marker): (Option<String>, Option<String>) = (None, None);
    for _ in 0..10_000 {
        let page = s3
            .list_object_versions()
            .bucket(bucket)
            .prefix(prefix)
            .max_keys(max_keys)
            .set_key_marker(key_marker.clone())
            .set_version_id_marker(version_marker.clone())
            .send()
            .await
            .expect("list versions");
        // S3 lists versions and markers in one order; the SDK splits them in two lists.
        let mut page_items: Vec<Listed> = Vec::new();
        for v in page.versions() {
            page_items.push((
                v.key().expect("key").to_string(),
                v.version_id().expect("id").to_string(),
                v.is_latest() == Some(true),
                false,
            ));
        }
        for m in page.delete_markers() {
            page_items.push((
                m.key().expect("key").to_string(),
                m.version_id().expect("id").to_string(),
                m.is_latest() == Some(true),
                true,
            ));
        }
        assert!(page_items.len() <= max_keys as usize);
        out.extend(page_items);
        if page.is_truncated() != Some(true) {
            return out;
        }
        key_marker = page.next_key_marker().map(str::to_string);
        version_marker = page.next_version_id_marker().map(str::to_string);
        assert!(
            key_marker.is_some(),
            "a truncated page names where to go on"
        );
    }
    panic!("the listing did not end");
}

/// ListObjectVersions pages: every version and marker once, in (key, newest first)
/// order, with prefix, delimiter and the markers; and a listing paged one entry at a time
/// while writers add versions and markers lists every version that existed throughout
/// exactly once.
#[tokio::test]
async fn list_object_versions_pages_are_exact_under_writes() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, BUCKET).await;
    enable_versioning(&s3, BUCKET).await;
    let keys = ["a", "b/1", "b/2", "c"];
    let mut written: Vec<(String, String)> = Vec::new();
    for round in 0..3 {
        for (i, key) in keys.iter().enumerate() {
            let id = put_version(&s3, key, &random_body((round * 10 + i) as u64, 100)).await;
            written.push((key.to_string(), id));
        }
    }
    let marker = s3
        .delete_object()
        .bucket(BUCKET)
        .key("c")
        .send()
        .await
        .expect("marker");
    let marker_id = marker.version_id().expect("marker id").to_string();

    let whole = list_all(&s3, BUCKET, "", 1000).await;
    assert_eq!(whole.len(), 13);
    // The SDK splits versions from markers: the order is read from the XML itself.
    let xml = gw
        .signed("GET", &format!("/{BUCKET}?versions"))
        .send()
        .text();
    let in_order: Vec<&str> = xml
        .split("<VersionId>")
        .skip(1)
        .filter_map(|rest| rest.split("</VersionId>").next())
        .collect();
    let by_id = |id: &str| whole.iter().find(|l| l.1 == id).expect("listed").clone();
    let ordered: Vec<Listed> = in_order.iter().map(|id| by_id(id)).collect();
    assert!(
        ordered.windows(2).all(|w| w[0].0 <= w[1].0),
        "keys ascending"
    );
    // Keys ascending; within a key newest first: the reverse of the write order.
    for key in keys {
        let listed: Vec<&Listed> = ordered.iter().filter(|l| l.0 == key).collect();
        let mut ids: Vec<String> = written
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, id)| id.clone())
            .collect();
        ids.reverse();
        if key == "c" {
            ids.insert(0, marker_id.clone());
        }
        let got: Vec<String> = listed.iter().map(|l| l.1.clone()).collect();
        assert_eq!(got, ids, "{key}");
        // The newest is the latest, the marker for c.
        assert!(listed[0].2, "{key}: newest is latest");
        assert!(listed[1..].iter().all(|l| !l.2), "{key}: one latest");
        assert_eq!(listed[0].3, key == "c");
    }
    for max_keys in [1, 2, 5] {
        let mut paged = list_all(&s3, BUCKET, "", max_keys).await;
        let mut all = whole.clone();
        paged.sort();
        all.sort();
        assert_eq!(paged, all, "max-keys {max_keys}");
    }
    let under_b = list_all(&s3, BUCKET, "b/", 2).await;
    assert_eq!(under_b.len(), 6);
    let rolled = s3
        .list_object_versions()
        .bucket(BUCKET)
        .delimiter("/")
        .send()
        .await
        .expect("delimiter");
    let prefixes: Vec<&str> = rolled
        .common_prefixes()
        .iter()
        .filter_map(|p| p.prefix())
        .collect();
    assert_eq!(prefixes, ["b/"]);
    assert_eq!(rolled.versions().len() + rolled.delete_markers().len(), 7);
    let orphan = gw
        .signed("GET", &format!("/{BUCKET}?versions&version-id-marker=null"))
        .send();
    assert_eq!(orphan.status, 400, "a version marker needs a key marker");

    // Writers add versions and markers while a reader pages one entry at a time.
    let before: std::collections::BTreeSet<Listed> = whole.into_iter().collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..2u64 {
        let (s3, stop) = (s3.clone(), stop.clone());
        writers.spawn(async move {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) && n < 2000 {
                let key = ["a", "b/1", "b/2", "c"][(n % 4) as usize];
                if n % 5 == 4 {
                    s3.delete_object()
                        .bucket(BUCKET)
                        .key(key)
                        .send()
                        .await
                        .expect("marker");
                } else {
                    put_version(&s3, key, &random_body(1000 + w * 10_000 + n, 50)).await;
                }
                n += 1;
            }
        });
    }
    let during = list_all(&s3, BUCKET, "", 1).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    while writers.join_next().await.is_some() {}
    let ids: Vec<(&str, &str)> = during
        .iter()
        .map(|l| (l.0.as_str(), l.1.as_str()))
        .collect();
    let unique: std::collections::BTreeSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "no version listed twice");
    for (key, id, _, _) in &before {
        assert!(
            ids.contains(&(key.as_str(), id.as_str())),
            "{key} {id} existed throughout and was not listed"
        );
    }
}
