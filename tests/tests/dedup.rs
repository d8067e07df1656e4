//! Deduplication: one file per disk per distinct body, reference counts, the move to
//! "deleting" when the last key goes, and the admin view of it all.

use std::time::Duration;

use e2e::{
    AdminFile, Gateway, assert_same_body, create_bucket, get_bytes, poll_until, put_bytes,
    random_body, s3_error, sha1_hex,
};

#[track_caller]
fn live(gw: &Gateway, sha1: &str) -> AdminFile {
    let f = gw
        .admin_file(sha1)
        .unwrap_or_else(|| panic!("admin knows nothing of {sha1}"));
    assert_eq!(f.sha1, sha1, "admin answer is about another sha1: {f:?}");
    assert_eq!(f.state, "live", "{f:?}");
    f
}

/// Asserts that each disk holds exactly one content file per body, at its content path,
/// with the body's bytes.
#[track_caller]
fn assert_exactly_these_contents(gw: &Gateway, bodies: &[&[u8]]) {
    for disk in 0..2 {
        let mut want: Vec<_> = bodies
            .iter()
            .map(|b| gw.content_path(disk, &sha1_hex(b)))
            .collect();
        want.sort();
        want.dedup();
        assert_eq!(gw.content_files(disk), want, "content files on disk{disk}");
        for body in bodies {
            let path = gw.content_path(disk, &sha1_hex(body));
            let stored =
                std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            assert_same_body(&stored, body, &format!("{}", path.display()));
        }
    }
}

#[tokio::test]
async fn same_body_under_two_keys_is_one_file_per_disk() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(100, 100_000);
    let sha1 = sha1_hex(&body);

    put_bytes(&s3, "bkt", "first", &body).await;
    let after_one = live(&gw, &sha1);
    assert_eq!(after_one.refs, Some(1), "{after_one:?}");
    assert!(after_one.magic.is_some() && after_one.flags.is_some() && after_one.pair.is_some());

    put_bytes(&s3, "bkt", "second", &body).await;
    let after_two = live(&gw, &sha1);
    assert_eq!(after_two.refs, Some(2), "{after_two:?}");
    assert_eq!(
        after_two.pair, after_one.pair,
        "the content stayed on its pair"
    );

    assert_exactly_these_contents(&gw, &[&body]);
    assert_same_body(&get_bytes(&s3, "bkt", "first").await, &body, "first");
    assert_same_body(&get_bytes(&s3, "bkt", "second").await, &body, "second");
}

/// Held in memory until hashed (the default, bodies up to 16 MiB) or streamed to temp files
/// (`--memory-stage-bytes 0`): the same contents, references and bytes either way, and no
/// temp file left behind.
#[tokio::test]
async fn duplicates_dedup_whether_held_in_memory_or_streamed() {
    for args in [&[][..], &["--memory-stage-bytes", "0"][..]] {
        let gw = Gateway::start_with(args, &[]);
        let s3 = gw.client();
        create_bucket(&s3, "bkt").await;
        let big = random_body(110, 3 * 1024 * 1024 + 5);
        let small = random_body(111, 64 * 1024);
        for body in [&big, &small] {
            put_bytes(&s3, "bkt", &format!("a{}", body.len()), body).await;
            put_bytes(&s3, "bkt", &format!("b{}", body.len()), body).await;
            assert_eq!(live(&gw, &sha1_hex(body)).refs, Some(2), "{args:?}");
            for key in ["a", "b"] {
                let got = get_bytes(&s3, "bkt", &format!("{key}{}", body.len())).await;
                assert_same_body(&got, body, &format!("{args:?} {key}"));
            }
        }
        assert_exactly_these_contents(&gw, &[&big, &small]);
        assert!(
            poll_until(Duration::from_secs(5), || {
                gw.temp_files(0).is_empty() && gw.temp_files(1).is_empty()
            }),
            "temp files left behind with {args:?}"
        );
    }
}

#[tokio::test]
async fn same_body_in_two_buckets_is_one_file_per_disk() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "one").await;
    create_bucket(&s3, "two").await;
    let body = random_body(101, 5000);
    put_bytes(&s3, "one", "k", &body).await;
    put_bytes(&s3, "two", "other-key", &body).await;
    assert_exactly_these_contents(&gw, &[&body]);
    assert_eq!(live(&gw, &sha1_hex(&body)).refs, Some(2));
}

#[tokio::test]
async fn distinct_bodies_are_distinct_files() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let bodies: Vec<Vec<u8>> = (0..3)
        .map(|i| random_body(200 + i, 3000 + i as usize))
        .collect();
    for (i, body) in bodies.iter().enumerate() {
        put_bytes(&s3, "bkt", &format!("k{i}"), body).await;
    }
    let refs: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
    assert_exactly_these_contents(&gw, &refs);
    for body in &bodies {
        assert_eq!(live(&gw, &sha1_hex(body)).refs, Some(1));
    }
}

#[tokio::test]
async fn deleting_one_key_keeps_the_other_readable() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(102, 70_000);
    let sha1 = sha1_hex(&body);
    put_bytes(&s3, "bkt", "keep", &body).await;
    put_bytes(&s3, "bkt", "drop", &body).await;

    s3.delete_object()
        .bucket("bkt")
        .key("drop")
        .send()
        .await
        .expect("DeleteObject");
    let (status, code) = s3_error(s3.get_object().bucket("bkt").key("drop").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchKey"));

    assert_same_body(&get_bytes(&s3, "bkt", "keep").await, &body, "the key left");
    assert_eq!(live(&gw, &sha1).refs, Some(1));
    assert_exactly_these_contents(&gw, &[&body]);
}

#[tokio::test]
async fn deleting_every_key_moves_the_content_to_deleting() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(103, 4096);
    let sha1 = sha1_hex(&body);
    put_bytes(&s3, "bkt", "x", &body).await;
    put_bytes(&s3, "bkt", "y", &body).await;
    let pair = live(&gw, &sha1).pair;

    for key in ["x", "y"] {
        s3.delete_object()
            .bucket("bkt")
            .key(key)
            .send()
            .await
            .expect("DeleteObject");
    }
    let f = gw
        .admin_file(&sha1)
        .expect("a content whose last key was deleted is still known (deleting)");
    assert_eq!(f.state, "deleting", "{f:?}");
    assert_eq!(f.sha1, sha1);
    assert_eq!(f.pair, pair, "deleting keeps the pair: {f:?}");
    assert!(f.since.is_some(), "deleting has a since: {f:?}");
    assert_eq!(f.refs, None, "deleting has no refs field: {f:?}");
    for key in ["x", "y"] {
        let (status, code) = s3_error(s3.get_object().bucket("bkt").key(key).send().await);
        assert_eq!((status, code.as_str()), (404, "NoSuchKey"), "{key}");
    }
}

#[tokio::test]
async fn overwriting_a_key_decrements_the_old_content() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let a = random_body(104, 20_000);
    let b = random_body(105, 30_000);
    let (sha_a, sha_b) = (sha1_hex(&a), sha1_hex(&b));

    put_bytes(&s3, "bkt", "k1", &a).await;
    put_bytes(&s3, "bkt", "k2", &a).await;
    assert_eq!(live(&gw, &sha_a).refs, Some(2));

    put_bytes(&s3, "bkt", "k1", &b).await;
    assert_eq!(
        live(&gw, &sha_a).refs,
        Some(1),
        "old content after one overwrite"
    );
    assert_eq!(live(&gw, &sha_b).refs, Some(1), "new content");
    assert_same_body(&get_bytes(&s3, "bkt", "k1").await, &b, "k1");
    assert_same_body(&get_bytes(&s3, "bkt", "k2").await, &a, "k2");

    put_bytes(&s3, "bkt", "k2", &b).await;
    let old = gw.admin_file(&sha_a).expect("old content still known");
    assert_eq!(
        old.state, "deleting",
        "old content lost its last key: {old:?}"
    );
    assert_eq!(live(&gw, &sha_b).refs, Some(2));
}

#[tokio::test]
async fn overwriting_a_key_with_the_same_body_keeps_one_ref() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(106, 8000);
    for _ in 0..3 {
        put_bytes(&s3, "bkt", "same", &body).await;
    }
    assert_eq!(live(&gw, &sha1_hex(&body)).refs, Some(1));
    assert_exactly_these_contents(&gw, &[&body]);
}

#[tokio::test]
async fn content_coming_back_after_deletion_is_live_again() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(107, 12_345);
    let sha1 = sha1_hex(&body);
    put_bytes(&s3, "bkt", "k", &body).await;
    s3.delete_object()
        .bucket("bkt")
        .key("k")
        .send()
        .await
        .expect("DeleteObject");
    assert_eq!(gw.admin_file(&sha1).expect("known").state, "deleting");

    put_bytes(&s3, "bkt", "again", &body).await;
    assert_eq!(live(&gw, &sha1).refs, Some(1));
    assert_same_body(&get_bytes(&s3, "bkt", "again").await, &body, "re-uploaded");
    assert_exactly_these_contents(&gw, &[&body]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_concurrent_clients_same_body_one_file_sixteen_refs() {
    let gw = Gateway::start();
    create_bucket(&gw.client(), "bkt").await;
    let body = random_body(108, 256 * 1024);
    let sha1 = sha1_hex(&body);

    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..16 {
        let s3 = gw.client();
        let body = body.clone();
        tasks.spawn(async move {
            s3.put_object()
                .bucket("bkt")
                .key(format!("copy-{i:02}"))
                .body(body.into())
                .send()
                .await
                .map_err(|e| format!("PutObject copy-{i:02}: {e:?}"))
        });
    }
    let mut failures = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        if let Err(e) = joined.expect("task panicked") {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "failed uploads: {failures:#?}");

    assert_exactly_these_contents(&gw, &[&body]);
    assert_eq!(live(&gw, &sha1).refs, Some(16));
    let s3 = gw.client();
    for i in 0..16 {
        assert_same_body(
            &get_bytes(&s3, "bkt", &format!("copy-{i:02}")).await,
            &body,
            &format!("copy-{i:02}"),
        );
    }
    // Every upload's temp files are gone once it was acknowledged (bounded poll, in case
    // the losing copies are removed just after the answer).
    let clean = poll_until(Duration::from_secs(5), || {
        gw.temp_files(0).is_empty() && gw.temp_files(1).is_empty()
    });
    assert!(
        clean,
        "temp files left: {:?} {:?}",
        gw.temp_files(0),
        gw.temp_files(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_overwrites_of_one_key_leave_one_live_content() {
    let gw = Gateway::start();
    create_bucket(&gw.client(), "bkt").await;
    let bodies: Vec<Vec<u8>> = (0..8).map(|i| random_body(300 + i, 40_000)).collect();

    let mut tasks = tokio::task::JoinSet::new();
    for body in bodies.iter().cloned() {
        let s3 = gw.client();
        tasks.spawn(async move {
            s3.put_object()
                .bucket("bkt")
                .key("contended")
                .body(body.into())
                .send()
                .await
                .map(|_| ())
                .map_err(|e| format!("PutObject: {e:?}"))
        });
    }
    let mut failures = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        if let Err(e) = joined.expect("task panicked") {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "failed uploads: {failures:#?}");

    let winner = get_bytes(&gw.client(), "bkt", "contended").await;
    let winner_sha1 = sha1_hex(&winner);
    assert!(
        bodies.iter().any(|b| sha1_hex(b) == winner_sha1),
        "the key holds none of the bodies written"
    );
    for body in &bodies {
        let sha1 = sha1_hex(body);
        let f = gw
            .admin_file(&sha1)
            .expect("every written content is known");
        if sha1 == winner_sha1 {
            assert_eq!(
                (f.state.as_str(), f.refs),
                ("live", Some(1)),
                "winner: {f:?}"
            );
        } else {
            assert_eq!(
                f.state, "deleting",
                "an overwritten content kept a ref: {f:?}"
            );
        }
    }
}

#[tokio::test]
async fn admin_unknown_sha1_is_404() {
    let gw = Gateway::start();
    assert_eq!(gw.admin_file(&sha1_hex(b"never stored")), None);
}
