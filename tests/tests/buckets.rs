//! Buckets: ListBuckets, CreateBucket, HeadBucket, DeleteBucket and their errors; /_health.

use e2e::{Gateway, create_bucket, put_bytes, s3_error};

#[tokio::test]
async fn health_answers_200_without_credentials() {
    let gw = Gateway::start();
    let resp = gw.raw("GET", "/_health", &[], b"").expect("GET /_health");
    assert_eq!(resp.status, 200, "GET /_health: {}", resp.text());
}

#[tokio::test]
async fn create_list_head_delete_buckets() {
    let gw = Gateway::start();
    let s3 = gw.client();

    let listed = s3.list_buckets().send().await.expect("ListBuckets");
    assert!(
        listed.buckets().is_empty(),
        "a new gateway has no buckets: {:?}",
        listed.buckets()
    );

    create_bucket(&s3, "beta-bucket").await;
    create_bucket(&s3, "alpha-bucket").await;

    let listed = s3.list_buckets().send().await.expect("ListBuckets");
    let names: Vec<&str> = listed.buckets().iter().filter_map(|b| b.name()).collect();
    assert_eq!(names, ["alpha-bucket", "beta-bucket"], "sorted by name");
    for b in listed.buckets() {
        assert!(
            b.creation_date().is_some(),
            "bucket {:?} has no CreationDate",
            b.name()
        );
    }

    s3.head_bucket()
        .bucket("alpha-bucket")
        .send()
        .await
        .expect("HeadBucket of an existing bucket");

    s3.delete_bucket()
        .bucket("alpha-bucket")
        .send()
        .await
        .expect("DeleteBucket of an empty bucket");
    let (status, _) = s3_error(s3.head_bucket().bucket("alpha-bucket").send().await);
    assert_eq!(status, 404, "HeadBucket after DeleteBucket");

    let listed = s3.list_buckets().send().await.expect("ListBuckets");
    let names: Vec<&str> = listed.buckets().iter().filter_map(|b| b.name()).collect();
    assert_eq!(names, ["beta-bucket"]);
}

#[tokio::test]
async fn delete_bucket_answers_204() {
    let gw = Gateway::start();
    create_bucket(&gw.client(), "to-delete").await;
    let resp = gw.signed("DELETE", "/to-delete").send();
    assert_eq!(resp.status, 204, "DeleteBucket: {}", resp.text());
}

#[tokio::test]
async fn create_existing_bucket_is_bucket_already_owned_by_you() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "twice").await;
    let (status, code) = s3_error(s3.create_bucket().bucket("twice").send().await);
    assert_eq!((status, code.as_str()), (409, "BucketAlreadyOwnedByYou"));
}

#[tokio::test]
async fn invalid_bucket_names_are_invalid_bucket_name() {
    let gw = Gateway::start();
    let too_long = "a".repeat(64);
    let names = [
        "ab",                // shorter than 3
        too_long.as_str(),   // longer than 63
        "Upper-Case",        // uppercase
        "under_score",       // underscore
        "-starts-with-dash", // must start with a letter or digit
        "ends-with-dash-",   // must end with a letter or digit
        "two..dots",         // adjacent dots
        "192.168.10.20",     // formatted as an IP address
    ];
    for name in names {
        // Raw and hand-signed, so that no client-side validation can get in the way.
        let resp = gw.signed("PUT", &format!("/{name}")).send();
        assert_eq!(
            (resp.status, resp.error_code().as_deref()),
            (400, Some("InvalidBucketName")),
            "CreateBucket {name:?}: {}",
            resp.text()
        );
    }
    let listed = gw
        .client()
        .list_buckets()
        .send()
        .await
        .expect("ListBuckets");
    assert!(
        listed.buckets().is_empty(),
        "no invalid bucket was created: {:?}",
        listed.buckets()
    );
}

#[tokio::test]
async fn delete_non_empty_bucket_is_bucket_not_empty() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "full").await;
    put_bytes(&s3, "full", "k", b"content").await;

    let (status, code) = s3_error(s3.delete_bucket().bucket("full").send().await);
    assert_eq!((status, code.as_str()), (409, "BucketNotEmpty"));

    // Nothing was lost by the refused delete.
    s3.head_bucket()
        .bucket("full")
        .send()
        .await
        .expect("HeadBucket");
    assert_eq!(e2e::get_bytes(&s3, "full", "k").await, b"content");

    s3.delete_object()
        .bucket("full")
        .key("k")
        .send()
        .await
        .expect("DeleteObject");
    s3.delete_bucket()
        .bucket("full")
        .send()
        .await
        .expect("DeleteBucket once empty");
}

#[tokio::test]
async fn missing_bucket_is_no_such_bucket() {
    let gw = Gateway::start();
    let s3 = gw.client();

    let (status, _) = s3_error(s3.head_bucket().bucket("nope").send().await);
    assert_eq!(status, 404, "HeadBucket of a missing bucket");

    let (status, code) = s3_error(s3.delete_bucket().bucket("nope").send().await);
    assert_eq!(
        (status, code.as_str()),
        (404, "NoSuchBucket"),
        "DeleteBucket"
    );

    let (status, code) = s3_error(
        s3.put_object()
            .bucket("nope")
            .key("k")
            .body(b"x".to_vec().into())
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (404, "NoSuchBucket"), "PutObject");

    let (status, code) = s3_error(s3.get_object().bucket("nope").key("k").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchBucket"), "GetObject");

    let (status, code) = s3_error(s3.list_objects_v2().bucket("nope").send().await);
    assert_eq!(
        (status, code.as_str()),
        (404, "NoSuchBucket"),
        "ListObjectsV2"
    );

    // A PutObject into a missing bucket stores nothing.
    assert!(gw.content_files(0).is_empty() && gw.content_files(1).is_empty());
}
