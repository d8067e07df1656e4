//! ListObjectsV2: prefix, delimiter and CommonPrefixes, max-keys, continuation-token,
//! start-after.

use aws_sdk_s3::Client;
use e2e::{Gateway, create_bucket, etag_of, put_bytes, s3_error};

async fn put_keys(s3: &Client, bucket: &str, keys: &[&str]) {
    for key in keys {
        put_bytes(s3, bucket, key, format!("body of {key}").as_bytes()).await;
    }
}

fn keys_of(out: &aws_sdk_s3::operation::list_objects_v2::ListObjectsV2Output) -> Vec<String> {
    out.contents()
        .iter()
        .map(|o| o.key().expect("Contents without Key").to_string())
        .collect()
}

fn prefixes_of(out: &aws_sdk_s3::operation::list_objects_v2::ListObjectsV2Output) -> Vec<String> {
    out.common_prefixes()
        .iter()
        .map(|p| {
            p.prefix()
                .expect("CommonPrefixes without Prefix")
                .to_string()
        })
        .collect()
}

#[tokio::test]
async fn empty_bucket_lists_nothing() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let out = s3
        .list_objects_v2()
        .bucket("bkt")
        .send()
        .await
        .expect("ListObjectsV2");
    assert!(out.contents().is_empty(), "{:?}", out.contents());
    assert!(out.common_prefixes().is_empty());
    assert_eq!(out.key_count(), Some(0));
    assert_eq!(out.is_truncated(), Some(false));
}

#[tokio::test]
async fn listing_gives_sorted_keys_with_size_and_etag() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    put_keys(
        &s3,
        "bkt",
        &["zeta", "alpha", "Mid", "alpha/beta", "alpha-"],
    )
    .await;
    let out = s3
        .list_objects_v2()
        .bucket("bkt")
        .send()
        .await
        .expect("ListObjectsV2");
    // Byte order: uppercase before lowercase, '-' (0x2d) before '/' (0x2f).
    assert_eq!(
        keys_of(&out),
        ["Mid", "alpha", "alpha-", "alpha/beta", "zeta"]
    );
    assert_eq!(out.key_count(), Some(5));
    for o in out.contents() {
        let key = o.key().unwrap();
        let body = format!("body of {key}");
        assert_eq!(o.size(), Some(body.len() as i64), "Size of {key}");
        assert_eq!(
            o.e_tag(),
            Some(etag_of(body.as_bytes()).as_str()),
            "ETag of {key}"
        );
        assert!(o.last_modified().is_some(), "LastModified of {key}");
    }
}

#[tokio::test]
async fn prefix_filters_keys() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    put_keys(&s3, "bkt", &["a/1", "a/2", "a/sub/3", "ab", "b/1", "a"]).await;
    let out = s3
        .list_objects_v2()
        .bucket("bkt")
        .prefix("a/")
        .send()
        .await
        .expect("ListObjectsV2 prefix=a/");
    assert_eq!(keys_of(&out), ["a/1", "a/2", "a/sub/3"]);
    assert_eq!(out.prefix(), Some("a/"));

    let out = s3
        .list_objects_v2()
        .bucket("bkt")
        .prefix("zzz")
        .send()
        .await
        .expect("ListObjectsV2 prefix=zzz");
    assert!(keys_of(&out).is_empty());
}

#[tokio::test]
async fn delimiter_gives_common_prefixes() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    put_keys(
        &s3,
        "bkt",
        &[
            "photos/2024/a.jpg",
            "photos/2024/b.jpg",
            "photos/2025/c.jpg",
            "photos/index.html",
            "docs/x.txt",
            "readme.md",
            "zzz/",
        ],
    )
    .await;

    let out = s3
        .list_objects_v2()
        .bucket("bkt")
        .delimiter("/")
        .send()
        .await
        .expect("ListObjectsV2 delimiter=/");
    assert_eq!(keys_of(&out), ["readme.md"]);
    assert_eq!(prefixes_of(&out), ["docs/", "photos/", "zzz/"]);
    assert_eq!(out.delimiter(), Some("/"));
    assert_eq!(
        out.key_count(),
        Some(4),
        "KeyCount counts keys and prefixes"
    );

    let out = s3
        .list_objects_v2()
        .bucket("bkt")
        .prefix("photos/")
        .delimiter("/")
        .send()
        .await
        .expect("ListObjectsV2 prefix=photos/ delimiter=/");
    assert_eq!(keys_of(&out), ["photos/index.html"]);
    assert_eq!(prefixes_of(&out), ["photos/2024/", "photos/2025/"]);

    let out = s3
        .list_objects_v2()
        .bucket("bkt")
        .prefix("photos/2024/")
        .delimiter("/")
        .send()
        .await
        .expect("ListObjectsV2 prefix=photos/2024/ delimiter=/");
    assert_eq!(keys_of(&out), ["photos/2024/a.jpg", "photos/2024/b.jpg"]);
    assert!(prefixes_of(&out).is_empty());
}

#[tokio::test]
async fn pagination_with_max_keys_collects_every_key_once_in_order() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let keys: Vec<String> = (0..25).map(|i| format!("key-{i:03}")).collect();
    // Written in a scrambled order: listing order must not depend on write order.
    for i in 0..25 {
        let key = &keys[(i * 7) % 25];
        put_bytes(&s3, "bkt", key, key.as_bytes()).await;
    }

    let mut collected = Vec::new();
    let mut page_sizes = Vec::new();
    let mut token: Option<String> = None;
    for page in 0.. {
        assert!(page < 10, "more than 10 pages for 25 keys at max-keys 10");
        let out = s3
            .list_objects_v2()
            .bucket("bkt")
            .max_keys(10)
            .set_continuation_token(token.clone())
            .send()
            .await
            .expect("ListObjectsV2 page");
        assert_eq!(out.max_keys(), Some(10));
        let page_keys = keys_of(&out);
        assert_eq!(out.key_count(), Some(page_keys.len() as i32));
        page_sizes.push(page_keys.len());
        collected.extend(page_keys);
        if out.is_truncated() == Some(true) {
            token = Some(
                out.next_continuation_token()
                    .expect("IsTruncated without NextContinuationToken")
                    .to_string(),
            );
        } else {
            assert!(out.next_continuation_token().is_none());
            break;
        }
    }
    assert_eq!(page_sizes, [10, 10, 5]);
    assert_eq!(collected, keys, "every key exactly once, in order");
}

#[tokio::test]
async fn pagination_counts_common_prefixes() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    // 12 "directories" of 2 keys each plus 3 top-level keys.
    let mut keys = Vec::new();
    for d in 0..12 {
        keys.push(format!("dir{d:02}/one"));
        keys.push(format!("dir{d:02}/two"));
    }
    for k in ["top-a", "top-b", "top-c"] {
        keys.push(k.to_string());
    }
    for key in &keys {
        put_bytes(&s3, "bkt", key, b"x").await;
    }

    let mut entries = Vec::new();
    let mut token: Option<String> = None;
    for page in 0.. {
        assert!(page < 10, "more than 10 pages for 15 entries at max-keys 5");
        let out = s3
            .list_objects_v2()
            .bucket("bkt")
            .delimiter("/")
            .max_keys(5)
            .set_continuation_token(token.clone())
            .send()
            .await
            .expect("ListObjectsV2 page");
        let page_entries: Vec<String> =
            prefixes_of(&out).into_iter().chain(keys_of(&out)).collect();
        assert!(
            page_entries.len() <= 5,
            "page over max-keys: {page_entries:?}"
        );
        entries.extend(page_entries);
        if out.is_truncated() == Some(true) {
            token = Some(
                out.next_continuation_token()
                    .expect("IsTruncated without NextContinuationToken")
                    .to_string(),
            );
        } else {
            break;
        }
    }
    let mut want: Vec<String> = (0..12).map(|d| format!("dir{d:02}/")).collect();
    want.extend(["top-a", "top-b", "top-c"].map(String::from));
    entries.sort();
    assert_eq!(entries, want, "each prefix and key exactly once");
}

#[tokio::test]
async fn start_after_skips_keys_up_to_and_including_it() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let keys: Vec<String> = (0..10).map(|i| format!("k{i:02}")).collect();
    for key in &keys {
        put_bytes(&s3, "bkt", key, b"x").await;
    }
    let out = s3
        .list_objects_v2()
        .bucket("bkt")
        .start_after("k04")
        .send()
        .await
        .expect("ListObjectsV2 start-after=k04");
    assert_eq!(keys_of(&out), &keys[5..]);

    // A start-after that is not a key.
    let out = s3
        .list_objects_v2()
        .bucket("bkt")
        .start_after("k04x")
        .send()
        .await
        .expect("ListObjectsV2 start-after=k04x");
    assert_eq!(keys_of(&out), &keys[5..]);

    // start-after with max-keys, then continue with the token.
    let out = s3
        .list_objects_v2()
        .bucket("bkt")
        .start_after("k02")
        .max_keys(3)
        .send()
        .await
        .expect("ListObjectsV2 start-after=k02 max-keys=3");
    assert_eq!(keys_of(&out), &keys[3..6]);
    assert_eq!(out.is_truncated(), Some(true));
    let token = out.next_continuation_token().expect("token").to_string();
    let out = s3
        .list_objects_v2()
        .bucket("bkt")
        .start_after("k02")
        .max_keys(3)
        .continuation_token(token)
        .send()
        .await
        .expect("ListObjectsV2 second page");
    assert_eq!(keys_of(&out), &keys[6..9]);
}

#[tokio::test]
async fn list_missing_bucket_is_no_such_bucket() {
    let gw = Gateway::start();
    let s3 = gw.client();
    let (status, code) = s3_error(s3.list_objects_v2().bucket("absent").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchBucket"));
}
