//! Conditional writes checked inside the metadata command that makes the change:
//! racing `If-None-Match: *` PUTs (one node and across a three-node cluster), `If-Match`
//! compare-and-swap loops that lose no update, and the conditions of
//! CompleteMultipartUpload, CopyObject (destination), DeleteObject and DeleteObjects.
//! A refused write changes nothing and references nothing (`gateway fsck` exact).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart, Delete, ObjectIdentifier};
use e2e::cluster::Cluster;
use e2e::{Gateway, create_bucket, etag_of, get_bytes, put_bytes, random_body, s3_error, sha1_hex};

/// Writers racing on each key.
const RACERS: usize = 6;

/// `RACERS` clients PUT different bodies to each of `keys` with `If-None-Match: *`, each
/// through its own client of `clients`: exactly one wins per key, the others get 412,
/// and the key holds the winner's body.
async fn race_creates(clients: &[Client], bucket: &str, keys: usize) {
    for k in 0..keys {
        let key = format!("race-{k}");
        let wins = Arc::new(AtomicUsize::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for r in 0..RACERS {
            let s3 = clients[r % clients.len()].clone();
            let (bucket, key, wins) = (bucket.to_string(), key.clone(), wins.clone());
            tasks.spawn(async move {
                let body = random_body((k * 100 + r) as u64, 2_000 + r * 10);
                let result = s3
                    .put_object()
                    .bucket(&bucket)
                    .key(&key)
                    .if_none_match("*")
                    .body(ByteStream::from(body.clone()))
                    .send()
                    .await;
                match result {
                    Ok(_) => {
                        wins.fetch_add(1, Ordering::SeqCst);
                        Some(body)
                    }
                    Err(e) => {
                        let (status, code) = s3_error::<(), _>(Err(e));
                        assert_eq!((status, code.as_str()), (412, "PreconditionFailed"));
                        None
                    }
                }
            });
        }
        let mut winner = None;
        while let Some(joined) = tasks.join_next().await {
            if let Some(body) = joined.expect("racer") {
                winner = Some(body);
            }
        }
        assert_eq!(wins.load(Ordering::SeqCst), 1, "{key}: one winner");
        let winner = winner.expect("a winner");
        assert_eq!(get_bytes(&clients[0], bucket, &key).await, winner, "{key}");
    }
}

/// `writers` clients each add `rounds` increments to a counter object with read, then
/// PUT `If-Match: <etag read>`, retrying on 412: the final count is every increment.
async fn compare_and_swap(clients: &[Client], bucket: &str, writers: usize, rounds: usize) {
    put_bytes(&clients[0], bucket, "counter", b"0").await;
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..writers {
        let s3 = clients[w % clients.len()].clone();
        let bucket = bucket.to_string();
        tasks.spawn(async move {
            let mut conflicts = 0usize;
            for _ in 0..rounds {
                // Bounded: every lost round is another writer's success.
                for attempt in 0.. {
                    assert!(attempt < 1_000, "no progress");
                    let got = s3
                        .get_object()
                        .bucket(&bucket)
                        .key("counter")
                        .send()
                        .await
                        .expect("GET counter");
                    let etag = got.e_tag().expect("ETag").to_string();
                    let bytes = got.body.collect().await.expect("body").into_bytes();
                    let n: u64 = std::str::from_utf8(&bytes)
                        .expect("utf-8")
                        .parse()
                        .expect("a number");
                    let put = s3
                        .put_object()
                        .bucket(&bucket)
                        .key("counter")
                        .if_match(etag)
                        .body(ByteStream::from((n + 1).to_string().into_bytes()))
                        .send()
                        .await;
                    match put {
                        Ok(_) => break,
                        Err(e) => {
                            let (status, code) = s3_error::<(), _>(Err(e));
                            assert_eq!((status, code.as_str()), (412, "PreconditionFailed"));
                            conflicts += 1;
                        }
                    }
                }
            }
            conflicts
        });
    }
    let mut conflicts = 0;
    while let Some(joined) = tasks.join_next().await {
        conflicts += joined.expect("writer");
    }
    let total = get_bytes(&clients[0], bucket, "counter").await;
    assert_eq!(
        String::from_utf8(total).expect("utf-8"),
        (writers * rounds).to_string(),
        "no update lost ({conflicts} conflicts retried)"
    );
    println!("{writers} writers x {rounds} rounds: {conflicts} conflicts retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_creates_and_compare_and_swap_on_one_node() {
    let mut gw = Gateway::start();
    let clients: Vec<Client> = (0..RACERS).map(|_| gw.client()).collect();
    create_bucket(&clients[0], "bkt").await;
    race_creates(&clients, "bkt", 20).await;
    compare_and_swap(&clients, "bkt", 4, 15).await;
    gw.kill9();
    e2e::assert_fsck_clean(gw.data_dir());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_creates_and_compare_and_swap_across_a_cluster() {
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_leader(std::time::Duration::from_secs(30));
    // The new commands wait for the leader to raise the group's format version.
    let raised = e2e::poll_until(std::time::Duration::from_secs(30), || {
        cluster.ids().iter().all(|&n| {
            cluster
                .status(n)
                .is_ok_and(|s| s.cluster_version.is_some() && s.cluster_version == s.format_version)
        })
    });
    assert!(raised, "format not raised:\n{}", cluster.describe());
    let clients: Vec<Client> = cluster.ids().iter().map(|&n| cluster.client(n)).collect();
    create_bucket(&clients[0], "bkt").await;
    race_creates(&clients, "bkt", 10).await;
    compare_and_swap(&clients, "bkt", 3, 10).await;
    // A conditional delete through a follower, decided by the leader's log.
    let etag = etag_of(b"30");
    let (status, code) = s3_error(
        clients[1]
            .delete_object()
            .bucket("bkt")
            .key("counter")
            .if_match(etag_of(b"29"))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (412, "PreconditionFailed"));
    clients[2]
        .delete_object()
        .bucket("bkt")
        .key("counter")
        .if_match(etag)
        .send()
        .await
        .expect("DELETE If-Match right");
    cluster.kill_all_and_fsck();
}

async fn upload_two_parts(s3: &Client, key: &str) -> (String, CompletedMultipartUpload, Vec<u8>) {
    let create = s3
        .create_multipart_upload()
        .bucket("bkt")
        .key(key)
        .send()
        .await
        .expect("CreateMultipartUpload");
    let id = create.upload_id().expect("upload id").to_string();
    let parts = [random_body(71, 5 << 20), random_body(72, 1000)];
    let mut done = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let n = i as i32 + 1;
        let out = s3
            .upload_part()
            .bucket("bkt")
            .key(key)
            .upload_id(&id)
            .part_number(n)
            .body(ByteStream::from(p.clone()))
            .send()
            .await
            .expect("UploadPart");
        done.push(
            CompletedPart::builder()
                .part_number(n)
                .e_tag(out.e_tag().expect("part ETag"))
                .build(),
        );
    }
    let upload = CompletedMultipartUpload::builder()
        .set_parts(Some(done))
        .build();
    (id, upload, parts.concat())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_copy_and_deletes_honour_their_conditions() {
    let mut gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let old = random_body(70, 3000);
    put_bytes(&s3, "bkt", "mp", &old).await;

    // CompleteMultipartUpload: If-None-Match: * on a taken key is 412 and keeps the
    // upload; If-Match on a missing key is 404; If-Match with the current ETag swaps.
    let (id, upload, whole) = upload_two_parts(&s3, "mp").await;
    let complete = || {
        s3.complete_multipart_upload()
            .bucket("bkt")
            .key("mp")
            .upload_id(&id)
            .multipart_upload(upload.clone())
    };
    let (status, code) = s3_error(complete().if_none_match("*").send().await);
    assert_eq!((status, code.as_str()), (412, "PreconditionFailed"));
    let (status, code) = s3_error(complete().if_match(etag_of(b"other")).send().await);
    assert_eq!((status, code.as_str()), (412, "PreconditionFailed"));
    let parts = s3
        .list_parts()
        .bucket("bkt")
        .key("mp")
        .upload_id(&id)
        .send()
        .await
        .expect("the upload is still there");
    assert_eq!(parts.parts().len(), 2);
    assert_eq!(get_bytes(&s3, "bkt", "mp").await, old);
    assert_eq!(gw.admin_file(&sha1_hex(&whole)), None, "nothing referenced");
    complete()
        .if_match(etag_of(&old))
        .send()
        .await
        .expect("Complete If-Match right");
    assert_eq!(get_bytes(&s3, "bkt", "mp").await, whole);
    let (id2, upload2, _) = upload_two_parts(&s3, "mp-new").await;
    let (status, code) = s3_error(
        s3.complete_multipart_upload()
            .bucket("bkt")
            .key("mp-new")
            .upload_id(&id2)
            .multipart_upload(upload2.clone())
            .if_match(etag_of(&old))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (404, "NoSuchKey"));
    s3.complete_multipart_upload()
        .bucket("bkt")
        .key("mp-new")
        .upload_id(&id2)
        .multipart_upload(upload2)
        .if_none_match("*")
        .send()
        .await
        .expect("Complete If-None-Match: * on a new key");

    // CopyObject: the conditions are the destination's.
    let src = random_body(73, 4000);
    put_bytes(&s3, "bkt", "src", &src).await;
    let dst = random_body(74, 5000);
    put_bytes(&s3, "bkt", "dst", &dst).await;
    let copy = || {
        s3.copy_object()
            .bucket("bkt")
            .key("dst")
            .copy_source("bkt/src")
    };
    let (status, code) = s3_error(copy().if_none_match("*").send().await);
    assert_eq!((status, code.as_str()), (412, "PreconditionFailed"));
    let (status, code) = s3_error(copy().if_match(etag_of(&src)).send().await);
    assert_eq!((status, code.as_str()), (412, "PreconditionFailed"));
    assert_eq!(get_bytes(&s3, "bkt", "dst").await, dst);
    assert_eq!(gw.admin_file(&sha1_hex(&src)).expect("src").refs, Some(1));
    copy()
        .if_match(etag_of(&dst))
        .send()
        .await
        .expect("Copy If-Match right");
    assert_eq!(get_bytes(&s3, "bkt", "dst").await, src);
    assert_eq!(gw.admin_file(&sha1_hex(&src)).expect("src").refs, Some(2));
    s3.copy_object()
        .bucket("bkt")
        .key("dst-new")
        .copy_source("bkt/src")
        .if_none_match("*")
        .send()
        .await
        .expect("Copy If-None-Match: * to a new key");

    // DeleteObject If-Match: wrong is 412, on a missing key 404, `*` needs the key.
    let (status, code) = s3_error(
        s3.delete_object()
            .bucket("bkt")
            .key("dst")
            .if_match(etag_of(&dst))
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (412, "PreconditionFailed"));
    assert_eq!(get_bytes(&s3, "bkt", "dst").await, src);
    s3.delete_object()
        .bucket("bkt")
        .key("dst")
        .if_match("*")
        .send()
        .await
        .expect("DELETE If-Match: *");
    let (status, code) = s3_error(
        s3.delete_object()
            .bucket("bkt")
            .key("dst")
            .if_match("*")
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (404, "NoSuchKey"));
    let (status, code) = s3_error(
        s3.delete_object()
            .bucket("bkt")
            .key("src")
            .if_match_size(4000)
            .send()
            .await,
    );
    assert_eq!((status, code.as_str()), (501, "NotImplemented"));

    // DeleteObjects: each key's ETag, answered per key.
    let a = random_body(75, 100);
    let b = random_body(76, 100);
    put_bytes(&s3, "bkt", "a", &a).await;
    put_bytes(&s3, "bkt", "b", &b).await;
    let ident = |key: &str, etag: Option<String>| {
        ObjectIdentifier::builder()
            .key(key)
            .set_e_tag(etag)
            .build()
            .expect("identifier")
    };
    let out = s3
        .delete_objects()
        .bucket("bkt")
        .delete(
            Delete::builder()
                .objects(ident("a", Some(etag_of(&a))))
                .objects(ident("b", Some(etag_of(&a))))
                .objects(ident("gone", Some(etag_of(&a))))
                .objects(ident("never", None))
                .build()
                .expect("delete"),
        )
        .send()
        .await
        .expect("DeleteObjects");
    let mut deleted: Vec<&str> = out.deleted().iter().filter_map(|d| d.key()).collect();
    deleted.sort_unstable();
    assert_eq!(deleted, ["a", "never"]);
    let mut errors: Vec<(&str, &str)> = out
        .errors()
        .iter()
        .map(|e| (e.key().unwrap_or(""), e.code().unwrap_or("")))
        .collect();
    errors.sort_unstable();
    assert_eq!(errors, [("b", "PreconditionFailed"), ("gone", "NoSuchKey")]);
    assert_eq!(get_bytes(&s3, "bkt", "b").await, b);

    gw.kill9();
    e2e::assert_fsck_clean(gw.data_dir());
}

/// Several CompleteMultipartUploads of one upload at once, and one retried after the
/// first answer (as after a lost reply): every one answers 200 with the object's ETag
/// (S3 answers a completed upload's retry so), never a 5xx; a completion naming other
/// parts, or made after the key was overwritten, is 404 NoSuchUpload.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_and_retried_completes_of_one_upload_all_succeed() {
    let mut gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    for round in 0..3 {
        let key = format!("mp-{round}");
        let (id, upload, whole) = upload_two_parts(&s3, &key).await;
        let complete = |s3: Client, upload: CompletedMultipartUpload| {
            let (key, id) = (key.clone(), id.clone());
            async move {
                s3.complete_multipart_upload()
                    .bucket("bkt")
                    .key(&key)
                    .upload_id(&id)
                    .multipart_upload(upload)
                    .send()
                    .await
                    .map(|out| out.e_tag().map(str::to_string))
                    .map_err(|e| s3_error::<(), _>(Err(e)))
            }
        };
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..RACERS {
            tasks.spawn(complete(gw.client(), upload.clone()));
        }
        let mut etags = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            etags.push(
                joined
                    .expect("racer")
                    .expect("every completion answers 200"),
            );
        }
        let head = s3
            .head_object()
            .bucket("bkt")
            .key(&key)
            .send()
            .await
            .expect("HEAD");
        assert!(
            etags.iter().all(|e| e.as_deref() == head.e_tag()),
            "{etags:?}"
        );
        assert_eq!(get_bytes(&s3, "bkt", &key).await, whole);
        // The retry after a lost reply.
        let again = complete(gw.client(), upload.clone()).await;
        assert_eq!(again, Ok(head.e_tag().map(str::to_string)));
        // Other parts than the object's: not this upload's completion.
        let other = CompletedMultipartUpload::builder()
            .parts(
                CompletedPart::builder()
                    .part_number(1)
                    .e_tag(etag_of(b"another part"))
                    .build(),
            )
            .build();
        assert_eq!(
            complete(gw.client(), other).await,
            Err((404, "NoSuchUpload".to_string()))
        );
        put_bytes(&s3, "bkt", &key, b"overwritten").await;
        assert_eq!(
            complete(gw.client(), upload).await,
            Err((404, "NoSuchUpload".to_string()))
        );
    }
    gw.kill9();
    e2e::assert_fsck_clean(gw.data_dir());
}
