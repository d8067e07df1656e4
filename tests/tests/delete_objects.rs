//! DeleteObjects: several keys in one request, missing keys, Quiet mode, reference counts
//! released, the 1000-key limit, Content-MD5 and a missing bucket.

use aws_sdk_s3::Client;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use e2e::{
    Gateway, content_md5, create_bucket, get_bytes, put_bytes, random_body, s3_error, sha1_hex,
};

fn delete_of(keys: &[&str], quiet: bool) -> Delete {
    let mut d = Delete::builder();
    for k in keys {
        d = d.objects(
            ObjectIdentifier::builder()
                .key(*k)
                .build()
                .expect("object id"),
        );
    }
    if quiet {
        d = d.quiet(true);
    }
    d.build().expect("Delete")
}

/// Puts three objects with distinct bodies plus a fourth key sharing the first body;
/// returns the three bodies.
async fn setup(s3: &Client) -> Vec<Vec<u8>> {
    create_bucket(s3, "bkt").await;
    let bodies: Vec<Vec<u8>> = (0..3)
        .map(|i| random_body(10 + i, 5000 + i as usize))
        .collect();
    for (i, b) in bodies.iter().enumerate() {
        put_bytes(s3, "bkt", &format!("obj-{i}"), b).await;
    }
    put_bytes(s3, "bkt", "keeper", &bodies[0]).await;
    bodies
}

/// Checks the objects are gone and their references released.
async fn assert_deleted(gw: &Gateway, s3: &Client, bodies: &[Vec<u8>]) {
    for i in 0..3 {
        let (status, code) = s3_error(
            s3.get_object()
                .bucket("bkt")
                .key(format!("obj-{i}"))
                .send()
                .await,
        );
        assert_eq!(
            (status, code.as_str()),
            (404, "NoSuchKey"),
            "obj-{i} after DeleteObjects"
        );
    }
    // obj-0's content is still referenced by "keeper".
    let f = gw.admin_file(&sha1_hex(&bodies[0])).expect("admin");
    assert_eq!(
        (f.state.as_str(), f.refs),
        ("live", Some(1)),
        "shared content: {f:?}"
    );
    assert_eq!(get_bytes(s3, "bkt", "keeper").await, bodies[0]);
    for (i, b) in bodies.iter().enumerate().skip(1) {
        let f = gw.admin_file(&sha1_hex(b)).expect("admin");
        assert_eq!(
            f.state, "deleting",
            "obj-{i}'s only reference was released: {f:?}"
        );
    }
    let listed = s3
        .list_objects_v2()
        .bucket("bkt")
        .send()
        .await
        .expect("ListObjectsV2");
    let keys: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, ["keeper"]);
}

#[tokio::test]
async fn delete_objects_reports_every_key_and_releases_references() {
    let gw = Gateway::start();
    let s3 = gw.client();
    let bodies = setup(&s3).await;
    let out = s3
        .delete_objects()
        .bucket("bkt")
        .delete(delete_of(
            &["obj-0", "obj-1", "obj-2", "never-existed"],
            false,
        ))
        .send()
        .await
        .expect("DeleteObjects");
    let mut deleted: Vec<&str> = out.deleted().iter().filter_map(|d| d.key()).collect();
    deleted.sort_unstable();
    // S3 reports a key that did not exist as deleted too.
    assert_eq!(
        deleted,
        ["never-existed", "obj-0", "obj-1", "obj-2"],
        "{out:?}"
    );
    assert!(out.errors().is_empty(), "errors: {:?}", out.errors());
    assert_deleted(&gw, &s3, &bodies).await;
}

#[tokio::test]
async fn quiet_delete_objects_lists_no_deleted_keys() {
    let gw = Gateway::start();
    let s3 = gw.client();
    let bodies = setup(&s3).await;
    let out = s3
        .delete_objects()
        .bucket("bkt")
        .delete(delete_of(
            &["obj-0", "obj-1", "obj-2", "never-existed"],
            true,
        ))
        .send()
        .await
        .expect("DeleteObjects Quiet");
    assert!(
        out.deleted().is_empty(),
        "Quiet mode lists no <Deleted>: {out:?}"
    );
    assert!(out.errors().is_empty(), "errors: {:?}", out.errors());
    assert_deleted(&gw, &s3, &bodies).await;
}

/// The XML body of a DeleteObjects request for `n` keys.
fn delete_xml(n: usize, quiet: bool) -> Vec<u8> {
    let mut xml = String::from("<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
    if quiet {
        xml.push_str("<Quiet>true</Quiet>");
    }
    for i in 0..n {
        xml.push_str(&format!("<Object><Key>key-{i:05}</Key></Object>"));
    }
    xml.push_str("</Delete>");
    xml.into_bytes()
}

#[tokio::test]
async fn more_than_1000_keys_is_malformed_xml() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    put_bytes(&s3, "bkt", "key-00000", b"must survive").await;

    let body = delete_xml(1001, false);
    let resp = gw
        .signed("POST", "/bkt?delete")
        .header("content-md5", &content_md5(&body))
        .header("content-type", "application/xml")
        .body(&body)
        .send();
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (400, Some("MalformedXML")),
        "DeleteObjects with 1001 keys: {}",
        resp.text()
    );
    assert_eq!(
        get_bytes(&s3, "bkt", "key-00000").await,
        b"must survive",
        "nothing deleted"
    );

    // Exactly 1000 is allowed.
    let body = delete_xml(1000, false);
    let resp = gw
        .signed("POST", "/bkt?delete")
        .header("content-md5", &content_md5(&body))
        .header("content-type", "application/xml")
        .body(&body)
        .send();
    assert_eq!(
        resp.status,
        200,
        "DeleteObjects with 1000 keys: {}",
        resp.text()
    );
    assert_eq!(
        resp.text().matches("<Deleted>").count(),
        1000,
        "1000 <Deleted> entries"
    );
    let (status, _) = s3_error(s3.head_object().bucket("bkt").key("key-00000").send().await);
    assert_eq!(status, 404, "key-00000 deleted");
}

#[tokio::test]
async fn a_wrong_content_md5_is_bad_digest() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    put_bytes(&s3, "bkt", "key-00000", b"must survive").await;
    let body = delete_xml(1, false);
    let resp = gw
        .signed("POST", "/bkt?delete")
        .header("content-md5", &content_md5(b"another body"))
        .body(&body)
        .send();
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (400, Some("BadDigest")),
        "DeleteObjects with a wrong Content-MD5: {}",
        resp.text()
    );
    assert_eq!(get_bytes(&s3, "bkt", "key-00000").await, b"must survive");
}

#[tokio::test]
async fn delete_objects_in_a_missing_bucket_is_no_such_bucket() {
    let gw = Gateway::start();
    let s3 = gw.client();
    let (status, code) = s3_error(
        s3.delete_objects()
            .bucket("no-such-bucket")
            .delete(delete_of(&["a", "b"], false))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (404, "NoSuchBucket"));
    let body = delete_xml(2, true);
    let resp = gw
        .signed("POST", "/no-such-bucket?delete")
        .header("content-md5", &content_md5(&body))
        .body(&body)
        .send();
    assert_eq!(
        (resp.status, resp.error_code().as_deref()),
        (404, Some("NoSuchBucket")),
        "{}",
        resp.text()
    );
}

#[tokio::test]
async fn keys_needing_xml_escapes_are_deleted_and_reported_exactly() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let keys = [
        "a&b",
        "x<y>z",
        "quote\"'s",
        "ü space/日本語",
        "plus+percent%41",
    ];
    for k in keys {
        put_bytes(&s3, "bkt", k, k.as_bytes()).await;
    }
    let out = s3
        .delete_objects()
        .bucket("bkt")
        .delete(delete_of(&keys, false))
        .send()
        .await
        .expect("DeleteObjects");
    let mut deleted: Vec<&str> = out.deleted().iter().filter_map(|d| d.key()).collect();
    deleted.sort_unstable();
    let mut want = keys.to_vec();
    want.sort_unstable();
    assert_eq!(deleted, want, "{out:?}");
    for k in keys {
        let (status, _) = s3_error(s3.head_object().bucket("bkt").key(k).send().await);
        assert_eq!(status, 404, "{k:?} after DeleteObjects");
    }
}
