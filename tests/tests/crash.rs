//! Crash safety: whatever was acknowledged survives `kill -9` and a restart on the same
//! data dir and port.

use aws_sdk_s3::Client;
use e2e::{
    Gateway, assert_same_body, create_bucket, get_bytes, put_bytes, random_body, s3_error, sha1_hex,
};

fn body_for(i: usize) -> Vec<u8> {
    // 1 KiB to ~600 KiB, a few of them above the 256 KiB read chunk.
    random_body(5000 + i as u64, 1024 + (i * 37 * 1024) % (600 * 1024))
}

async fn list_all_keys(s3: &Client, bucket: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut token = None;
    for page in 0.. {
        assert!(page < 100, "listing did not end");
        let out = s3
            .list_objects_v2()
            .bucket(bucket)
            .set_continuation_token(token)
            .send()
            .await
            .expect("ListObjectsV2");
        keys.extend(
            out.contents()
                .iter()
                .filter_map(|o| o.key().map(String::from)),
        );
        match out.next_continuation_token() {
            Some(t) if out.is_truncated() == Some(true) => token = Some(t.to_string()),
            _ => break,
        }
    }
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_after_acknowledged_puts_loses_nothing() {
    let mut gw = Gateway::start();
    create_bucket(&gw.client(), "durable").await;

    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..50 {
        let s3 = gw.client();
        tasks.spawn(async move {
            let key = format!("obj-{i:02}");
            s3.put_object()
                .bucket("durable")
                .key(&key)
                .body(body_for(i).into())
                .send()
                .await
                .map(|_| ())
                .map_err(|e| format!("PutObject {key}: {e:?}"))
        });
    }
    let mut failures = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        if let Err(e) = joined.expect("task panicked") {
            failures.push(e);
        }
    }
    // Right after the last 200: no graceful shutdown, no chance to flush anything more.
    gw.kill9();
    assert!(failures.is_empty(), "failed uploads: {failures:#?}");

    gw.restart();
    let s3 = gw.client();
    for i in 0..50 {
        let key = format!("obj-{i:02}");
        assert_same_body(&get_bytes(&s3, "durable", &key).await, &body_for(i), &key);
    }
    let want: Vec<String> = (0..50).map(|i| format!("obj-{i:02}")).collect();
    assert_eq!(list_all_keys(&s3, "durable").await, want);
    for i in 0..50 {
        let sha1 = sha1_hex(&body_for(i));
        let f = gw.admin_file(&sha1).expect("content known after restart");
        assert_eq!((f.state.as_str(), f.refs), ("live", Some(1)), "{f:?}");
    }
}

#[tokio::test]
async fn kill9_keeps_acknowledged_deletes_overwrites_and_refs() {
    let mut gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    create_bucket(&s3, "empty-then-deleted").await;
    let a = random_body(6001, 50_000);
    let b = random_body(6002, 70_000);
    let c = random_body(6003, 1000);
    for i in 0..6 {
        put_bytes(&s3, "bkt", &format!("a{i}"), &a).await;
    }
    put_bytes(&s3, "bkt", "c", &c).await;
    for key in ["a0", "a1"] {
        s3.delete_object()
            .bucket("bkt")
            .key(key)
            .send()
            .await
            .expect("DeleteObject");
    }
    put_bytes(&s3, "bkt", "a2", &b).await; // overwrite: a loses a ref
    s3.delete_object()
        .bucket("bkt")
        .key("c")
        .send()
        .await
        .expect("DeleteObject c");
    s3.delete_bucket()
        .bucket("empty-then-deleted")
        .send()
        .await
        .expect("DeleteBucket");

    gw.kill9();
    gw.restart();
    let s3 = gw.client();

    for key in ["a0", "a1", "c"] {
        let (status, code) = s3_error(s3.get_object().bucket("bkt").key(key).send().await);
        assert_eq!(
            (status, code.as_str()),
            (404, "NoSuchKey"),
            "deleted {key} came back"
        );
    }
    assert_same_body(&get_bytes(&s3, "bkt", "a2").await, &b, "overwritten a2");
    for key in ["a3", "a4", "a5"] {
        assert_same_body(&get_bytes(&s3, "bkt", key).await, &a, key);
    }
    let fa = gw.admin_file(&sha1_hex(&a)).expect("a known");
    assert_eq!((fa.state.as_str(), fa.refs), ("live", Some(3)), "{fa:?}");
    let fb = gw.admin_file(&sha1_hex(&b)).expect("b known");
    assert_eq!((fb.state.as_str(), fb.refs), ("live", Some(1)), "{fb:?}");
    let fc = gw.admin_file(&sha1_hex(&c)).expect("c known");
    assert_eq!(fc.state, "deleting", "{fc:?}");
    let (status, _) = s3_error(s3.head_bucket().bucket("empty-then-deleted").send().await);
    assert_eq!(status, 404, "deleted bucket came back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_mid_upload_never_exposes_a_partial_object() {
    let mut gw = Gateway::start();
    create_bucket(&gw.client(), "bkt").await;
    let body_of = |i: usize| random_body(7000 + i as u64, 200_000 + i * 10_000);

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, bool)>();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..30 {
        let s3 = gw.client();
        let tx = tx.clone();
        let body = body_of(i);
        tasks.spawn(async move {
            let ok = s3
                .put_object()
                .bucket("bkt")
                .key(format!("k{i:02}"))
                .body(body.into())
                .send()
                .await
                .is_ok();
            let _ = tx.send((i, ok));
        });
    }
    drop(tx);
    // Kill as soon as 10 uploads were acknowledged; the others are in flight or not started.
    let mut acked = Vec::new();
    let mut answered = 0;
    while let Some((i, ok)) = rx.recv().await {
        answered += 1;
        if ok {
            acked.push(i);
        }
        if acked.len() == 10 || answered == 30 {
            break;
        }
    }
    gw.kill9();
    // The remaining uploads now fail (or had succeeded just before the kill).
    while let Some((i, ok)) = rx.recv().await {
        if ok {
            acked.push(i);
        }
    }
    while tasks.join_next().await.is_some() {}
    assert!(
        acked.len() >= 10,
        "only {} uploads acknowledged",
        acked.len()
    );

    gw.restart();
    let s3 = gw.client();
    for i in 0..30 {
        let key = format!("k{i:02}");
        let got = s3.get_object().bucket("bkt").key(&key).send().await;
        if acked.contains(&i) {
            let bytes = got
                .unwrap_or_else(|e| panic!("acknowledged {key} lost: {e:?}"))
                .body
                .collect()
                .await
                .expect("body")
                .into_bytes();
            assert_same_body(&bytes, &body_of(i), &key);
        } else {
            // Not acknowledged: either absent or whole, never partial.
            match got {
                Ok(out) => {
                    let bytes = out.body.collect().await.expect("body").into_bytes();
                    assert_same_body(&bytes, &body_of(i), &format!("unacknowledged {key}"));
                }
                Err(e) => {
                    let (status, code) = s3_error::<(), _>(Err(e));
                    assert_eq!((status, code.as_str()), (404, "NoSuchKey"), "{key}");
                }
            }
        }
    }
    // Every content file on disk is whole: its name is the sha1 of its bytes.
    for disk in 0..2 {
        for path in gw.content_files(disk) {
            let data = std::fs::read(&path).expect("read content file");
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            assert_eq!(
                sha1_hex(&data),
                name,
                "content file {} is not whole",
                path.display()
            );
        }
    }
}
