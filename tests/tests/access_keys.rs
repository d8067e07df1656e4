//! Access keys and bucket permissions (issue 14), against the real binary with AWS SDK
//! clients of two keys: `gateway admin keys create|list|info|delete|allow|deny` and the
//! same over `/_admin/keys`; a bucket belongs to the key that created it and every other
//! key is refused on it (each operation family, presigned URLs V4 and V2) until allowed;
//! ListBuckets shows a key its own buckets; a deleted key is refused at once; keys survive
//! a restart; a key created through one node of a cluster signs on the others.
//!
//! Run: `cargo build -p gateway && cargo test -p e2e --test access_keys`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_s3::Client;
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::types::{
    CompletedMultipartUpload, CompletedPart, CorsConfiguration, CorsRule, Delete, ObjectIdentifier,
};
use e2e::cluster::{Cluster, Run, run_gateway};
use e2e::{
    Gateway, RawResponse, base64_encode, create_bucket, get_bytes, put_bytes, random_body, s3_error,
};
use sha1::{Digest as _, Sha1};

const ADMIN_IO_TIMEOUT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// `gateway admin --endpoint <gw> ARGS` with the admin token.
fn cli(gw: &Gateway, args: &[&str]) -> Run {
    let endpoint = gw.endpoint();
    let mut all = vec!["admin", "--endpoint", endpoint.as_str()];
    all.extend_from_slice(args);
    run_gateway(&all, &[("GATEWAY_ADMIN_TOKEN", gw.admin_token())])
}

/// `keys create NAME` through the CLI: the `access_key:` and `secret_key:` lines.
fn create_key(gw: &Gateway, name: &str) -> (String, String) {
    let run = cli(gw, &["keys", "create", name]);
    assert_eq!(run.code, Some(0), "keys create {name}: {run}");
    parse_key(&run.stdout)
}

fn parse_key(stdout: &str) -> (String, String) {
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "two lines expected: {stdout}");
    let access = lines[0]
        .strip_prefix("access_key: ")
        .unwrap_or_else(|| panic!("first line is not access_key: {stdout}"));
    let secret = lines[1]
        .strip_prefix("secret_key: ")
        .unwrap_or_else(|| panic!("second line is not secret_key: {stdout}"));
    assert!(!access.is_empty() && !secret.is_empty(), "{stdout}");
    (access.to_string(), secret.to_string())
}

/// A request to the admin API with the admin token.
fn admin(gw: &Gateway, method: &str, path: &str, body: &str) -> RawResponse {
    let token = format!("Bearer {}", gw.admin_token());
    gw.remote()
        .raw(
            method,
            path,
            &[
                ("authorization", token.as_str()),
                ("content-type", "application/json"),
            ],
            body.as_bytes(),
            ADMIN_IO_TIMEOUT,
        )
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

fn json(resp: &RawResponse) -> serde_json::Value {
    serde_json::from_slice(&resp.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", resp.text()))
}

/// The HTTP status of a failed SDK call (HEAD answers carry no error code).
fn status_of<T: std::fmt::Debug, E: aws_sdk_s3::error::ProvideErrorMetadata + std::fmt::Debug>(
    r: Result<T, aws_sdk_s3::error::SdkError<E, aws_smithy_runtime_api::http::Response>>,
) -> u16 {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(aws_sdk_s3::error::SdkError::ServiceError(ctx)) => ctx.raw().status().as_u16(),
        Err(other) => panic!("not a service error: {other:?}"),
    }
}

#[track_caller]
fn denied(got: (u16, String), what: &str) {
    assert_eq!(got, (403, "AccessDenied".to_string()), "{what}");
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// HMAC-SHA1 (RFC 2104), so the V2 signatures here do not come from the code under test.
fn hmac_sha1(key: &[u8], message: &[u8]) -> [u8; 20] {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..20].copy_from_slice(&Sha1::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| k.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
    let inner = Sha1::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha1::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

fn encode_component(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A V2 presigned GET of `/bucket/key` (path style) with these credentials.
fn v2_get(gw: &Gateway, access: &str, secret: &str, path: &str) -> RawResponse {
    let expires = now_secs() + 300;
    let to_sign = format!("GET\n\n\n{expires}\n{path}");
    let sig = base64_encode(&hmac_sha1(secret.as_bytes(), to_sign.as_bytes()));
    let target = format!(
        "{path}?AWSAccessKeyId={}&Expires={expires}&Signature={}",
        encode_component(access),
        encode_component(&sig)
    );
    gw.raw("GET", &target, &[], b"")
        .unwrap_or_else(|e| panic!("V2 GET {target}: {e}"))
}

/// A V4 presigned GET of `bucket/key` made by `client`, sent as a plain HTTP client would.
async fn v4_get(gw: &Gateway, client: &Client, bucket: &str, key: &str) -> RawResponse {
    let req = client
        .get_object()
        .bucket(bucket)
        .key(key)
        .presigned(PresigningConfig::expires_in(Duration::from_secs(300)).expect("config"))
        .await
        .expect("presign");
    let target = req
        .uri()
        .strip_prefix(&gw.endpoint())
        .expect("URL under the endpoint")
        .to_string();
    let headers: Vec<(&str, &str)> = req
        .headers()
        .filter(|(k, _)| !k.eq_ignore_ascii_case("host"))
        .collect();
    gw.raw("GET", &target, &headers, b"")
        .unwrap_or_else(|e| panic!("V4 GET {target}: {e}"))
}

async fn bucket_names(client: &Client) -> Vec<String> {
    client
        .list_buckets()
        .send()
        .await
        .expect("ListBuckets")
        .buckets()
        .iter()
        .filter_map(|b| b.name().map(str::to_string))
        .collect()
}

fn cors() -> CorsConfiguration {
    CorsConfiguration::builder()
        .cors_rules(
            CorsRule::builder()
                .allowed_methods("GET")
                .allowed_origins("*")
                .build()
                .expect("cors rule"),
        )
        .build()
        .expect("cors configuration")
}

fn delete_of(key: &str) -> Delete {
    Delete::builder()
        .objects(ObjectIdentifier::builder().key(key).build().expect("id"))
        .build()
        .expect("delete")
}

/// A whole one-part multipart upload; the first failing call's error.
async fn multipart(client: &Client, bucket: &str, key: &str, body: &[u8]) -> Result<(), String> {
    let up = client
        .create_multipart_upload()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .map_err(|e| format!("{e:?}"))?;
    let id = up.upload_id().unwrap_or_default().to_string();
    let part = client
        .upload_part()
        .bucket(bucket)
        .key(key)
        .upload_id(&id)
        .part_number(1)
        .body(body.to_vec().into())
        .send()
        .await
        .map_err(|e| format!("{e:?}"))?;
    let done = CompletedMultipartUpload::builder()
        .parts(
            CompletedPart::builder()
                .part_number(1)
                .e_tag(part.e_tag().unwrap_or_default())
                .build(),
        )
        .build();
    client
        .complete_multipart_upload()
        .bucket(bucket)
        .key(key)
        .upload_id(&id)
        .multipart_upload(done)
        .send()
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Administration: CLI and API
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn keys_are_created_listed_shown_granted_and_deleted_by_cli_and_api() {
    let gw = Gateway::start();
    // The bootstrap key keeps working unchanged.
    create_bucket(&gw.client(), "shared").await;

    let (ak, sk) = create_key(&gw, "webmail");
    // Through the API as well; its secret is shown only in the creation's answer.
    let made = admin(&gw, "POST", "/_admin/keys", r#"{"name":"backup"}"#);
    assert_eq!(made.status, 200, "{}", made.text());
    let made = json(&made);
    let (ak2, sk2) = (
        made["access_key"].as_str().expect("access_key").to_string(),
        made["secret_key"].as_str().expect("secret_key").to_string(),
    );
    assert_eq!(made["name"], "backup");

    let list = cli(&gw, &["keys", "list"]);
    assert_eq!(list.code, Some(0), "{list}");
    for (a, s, name) in [(&ak, &sk, "webmail"), (&ak2, &sk2, "backup")] {
        assert!(list.stdout.contains(a.as_str()), "{list}");
        assert!(list.stdout.contains(name), "{list}");
        assert!(
            !list.stdout.contains(s.as_str()),
            "a secret in keys list: {list}"
        );
    }
    let listed = admin(&gw, "GET", "/_admin/keys", "");
    assert_eq!(listed.status, 200);
    assert!(!listed.text().contains(&sk) && !listed.text().contains(&sk2));
    assert_eq!(json(&listed)["keys"].as_array().map(Vec::len), Some(2));

    // allow takes the access key id; the new rights show in info, never the secret.
    let allow = cli(&gw, &["keys", "allow", "--read", "--write", "shared", &ak]);
    assert_eq!(allow.code, Some(0), "{allow}");
    assert!(allow.stdout.contains("shared=read,write"), "{allow}");
    let info = cli(&gw, &["keys", "info", &ak]);
    assert_eq!(info.code, Some(0), "{info}");
    assert!(info.stdout.contains("name: webmail"), "{info}");
    assert!(info.stdout.contains("shared=read,write"), "{info}");
    assert!(!info.stdout.contains(&sk), "a secret in keys info: {info}");
    let deny = cli(&gw, &["keys", "deny", "--write", "shared", &ak]);
    assert_eq!(deny.code, Some(0), "{deny}");
    assert!(deny.stdout.contains("shared=read\n"), "{deny}");

    // The same over the API.
    let path = format!("/_admin/keys/{ak2}/allow");
    let r = admin(&gw, "POST", &path, r#"{"bucket":"shared","owner":true}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(json(&r)["grants"]["shared"], serde_json::json!(["owner"]));
    let r = admin(&gw, "GET", &format!("/_admin/keys/{ak2}"), "");
    assert_eq!(json(&r)["grants"]["shared"], serde_json::json!(["owner"]));
    let path = format!("/_admin/keys/{ak2}/deny");
    let r = admin(&gw, "POST", &path, r#"{"bucket":"shared","owner":true}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(json(&r)["grants"], serde_json::json!({}));

    // Refusals an operator should see.
    let none = cli(&gw, &["keys", "allow", "shared", &ak]);
    assert_ne!(none.code, Some(0), "allow without a right: {none}");
    let nobucket = cli(&gw, &["keys", "allow", "--read", "missing", &ak]);
    assert_ne!(nobucket.code, Some(0), "{nobucket}");
    assert!(nobucket.stderr.contains("no such bucket"), "{nobucket}");
    let nokey = cli(&gw, &["keys", "info", "GKNOSUCHKEY"]);
    assert_ne!(nokey.code, Some(0), "{nokey}");
    let r = admin(&gw, "GET", "/_admin/keys/GKNOSUCHKEY", "");
    assert_eq!(r.status, 404);
    let tokenless = gw
        .raw("GET", "/_admin/keys", &[], b"")
        .expect("GET /_admin/keys");
    assert_eq!(tokenless.status, 403);

    // Both keys sign requests; a deleted key is refused at once.
    let webmail = gw.client_with(&ak, &sk);
    let backup = gw.client_with(&ak2, &sk2);
    create_bucket(&webmail, "webmail-b").await;
    create_bucket(&backup, "backup-b").await;
    let del = cli(&gw, &["keys", "delete", &ak]);
    assert_eq!(del.code, Some(0), "{del}");
    assert_eq!(
        s3_error(webmail.list_buckets().send().await),
        (403, "InvalidAccessKeyId".to_string())
    );
    let r = admin(&gw, "DELETE", &format!("/_admin/keys/{ak2}"), "");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        s3_error(backup.list_buckets().send().await),
        (403, "InvalidAccessKeyId".to_string())
    );
    assert_eq!(
        admin(&gw, "DELETE", &format!("/_admin/keys/{ak2}"), "").status,
        404
    );
    // Their buckets stay, reachable with the bootstrap key.
    let names = bucket_names(&gw.client()).await;
    assert!(names.contains(&"webmail-b".to_string()), "{names:?}");
}

// ---------------------------------------------------------------------------------------
// Permissions, one operation family at a time
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn another_key_is_refused_on_every_operation_until_allowed() {
    let gw = Gateway::start();
    let root = gw.client();
    let (a_key, a_secret) = create_key(&gw, "alice");
    let (b_key, b_secret) = create_key(&gw, "bob");
    let alice = gw.client_with(&a_key, &a_secret);
    let bob = gw.client_with(&b_key, &b_secret);
    create_bucket(&root, "root-b").await;
    create_bucket(&alice, "alice-b").await;
    create_bucket(&bob, "bob-b").await;
    let body = random_body(14, 5000);
    put_bytes(&alice, "alice-b", "doc", &body).await;
    put_bytes(&bob, "bob-b", "mine", &body).await;

    // Buckets: each key sees its own; the bootstrap key sees all.
    assert_eq!(bucket_names(&alice).await, vec!["alice-b".to_string()]);
    assert_eq!(bucket_names(&bob).await, vec!["bob-b".to_string()]);
    assert_eq!(
        bucket_names(&root).await,
        vec![
            "alice-b".to_string(),
            "bob-b".to_string(),
            "root-b".to_string()
        ]
    );
    assert_eq!(
        s3_error(bob.create_bucket().bucket("alice-b").send().await),
        (409, "BucketAlreadyExists".to_string())
    );
    assert_eq!(
        s3_error(alice.create_bucket().bucket("alice-b").send().await),
        (409, "BucketAlreadyOwnedByYou".to_string())
    );
    assert_eq!(
        s3_error(alice.create_bucket().bucket("root-b").send().await),
        (409, "BucketAlreadyExists".to_string())
    );
    // The bootstrap key has every right on every bucket.
    assert_eq!(get_bytes(&root, "alice-b", "doc").await, body);
    put_bytes(&root, "bob-b", "from-root", &body).await;

    // Bob has no right on alice-b: every family is refused.
    assert_eq!(
        status_of(bob.head_bucket().bucket("alice-b").send().await),
        403
    );
    denied(
        s3_error(bob.get_bucket_location().bucket("alice-b").send().await),
        "GetBucketLocation",
    );
    denied(
        s3_error(bob.list_objects_v2().bucket("alice-b").send().await),
        "ListObjectsV2",
    );
    denied(
        s3_error(bob.list_objects().bucket("alice-b").send().await),
        "ListObjects",
    );
    denied(
        s3_error(bob.get_object().bucket("alice-b").key("doc").send().await),
        "GetObject",
    );
    assert_eq!(
        status_of(bob.head_object().bucket("alice-b").key("doc").send().await),
        403
    );
    denied(
        s3_error(
            bob.put_object()
                .bucket("alice-b")
                .key("x")
                .body(body.clone().into())
                .send()
                .await,
        ),
        "PutObject",
    );
    denied(
        s3_error(
            bob.delete_object()
                .bucket("alice-b")
                .key("doc")
                .send()
                .await,
        ),
        "DeleteObject",
    );
    denied(
        s3_error(
            bob.delete_objects()
                .bucket("alice-b")
                .delete(delete_of("doc"))
                .send()
                .await,
        ),
        "DeleteObjects",
    );
    denied(
        s3_error(
            bob.create_multipart_upload()
                .bucket("alice-b")
                .key("mp")
                .send()
                .await,
        ),
        "CreateMultipartUpload",
    );
    denied(
        s3_error(bob.list_multipart_uploads().bucket("alice-b").send().await),
        "ListMultipartUploads",
    );
    denied(
        s3_error(bob.get_bucket_cors().bucket("alice-b").send().await),
        "GetBucketCors",
    );
    denied(
        s3_error(
            bob.put_bucket_cors()
                .bucket("alice-b")
                .cors_configuration(cors())
                .send()
                .await,
        ),
        "PutBucketCors",
    );
    denied(
        s3_error(bob.delete_bucket_cors().bucket("alice-b").send().await),
        "DeleteBucketCors",
    );
    denied(
        s3_error(bob.get_bucket_versioning().bucket("alice-b").send().await),
        "GetBucketVersioning",
    );
    denied(
        s3_error(bob.delete_bucket().bucket("alice-b").send().await),
        "DeleteBucket",
    );
    // A copy reads its source and writes its destination.
    denied(
        s3_error(
            bob.copy_object()
                .bucket("bob-b")
                .key("stolen")
                .copy_source("alice-b/doc")
                .send()
                .await,
        ),
        "CopyObject from a bucket bob may not read",
    );
    denied(
        s3_error(
            bob.copy_object()
                .bucket("alice-b")
                .key("planted")
                .copy_source("bob-b/mine")
                .send()
                .await,
        ),
        "CopyObject into a bucket bob may not write",
    );
    // Presigned URLs carry the signing key's rights, V4 and V2.
    assert_eq!(v4_get(&gw, &bob, "alice-b", "doc").await.status, 403);
    assert_eq!(v4_get(&gw, &alice, "alice-b", "doc").await.status, 200);
    let v2 = v2_get(&gw, &b_key, &b_secret, "/alice-b/doc");
    assert_eq!(
        (v2.status, v2.error_code().as_deref()),
        (403, Some("AccessDenied"))
    );
    let v2 = v2_get(&gw, &a_key, &a_secret, "/alice-b/doc");
    assert_eq!(v2.status, 200, "{}", v2.text());
    assert_eq!(v2.body, body);
    // Alice has no right on bob's bucket either, nor on the bootstrap key's.
    denied(
        s3_error(alice.get_object().bucket("bob-b").key("mine").send().await),
        "alice GetObject on bob-b",
    );
    denied(
        s3_error(alice.list_objects_v2().bucket("root-b").send().await),
        "alice ListObjectsV2 on root-b",
    );
    // A bucket that does not exist is NoSuchBucket for anyone.
    assert_eq!(
        s3_error(bob.list_objects_v2().bucket("nowhere").send().await),
        (404, "NoSuchBucket".to_string())
    );

    // Read: GET, HEAD, listings, and a copy out of alice-b; still no write.
    let run = cli(&gw, &["keys", "allow", "--read", "alice-b", &b_key]);
    assert_eq!(run.code, Some(0), "{run}");
    assert_eq!(get_bytes(&bob, "alice-b", "doc").await, body);
    bob.head_object()
        .bucket("alice-b")
        .key("doc")
        .send()
        .await
        .expect("HeadObject with read");
    bob.head_bucket()
        .bucket("alice-b")
        .send()
        .await
        .expect("HeadBucket with read");
    let listed = bob
        .list_objects_v2()
        .bucket("alice-b")
        .send()
        .await
        .expect("ListObjectsV2 with read");
    assert_eq!(listed.key_count(), Some(1));
    assert_eq!(
        bucket_names(&bob).await,
        vec!["alice-b".to_string(), "bob-b".to_string()]
    );
    bob.copy_object()
        .bucket("bob-b")
        .key("copied")
        .copy_source("alice-b/doc")
        .send()
        .await
        .expect("copy out of a readable bucket");
    assert_eq!(get_bytes(&bob, "bob-b", "copied").await, body);
    assert_eq!(v4_get(&gw, &bob, "alice-b", "doc").await.status, 200);
    assert_eq!(v2_get(&gw, &b_key, &b_secret, "/alice-b/doc").status, 200);
    denied(
        s3_error(
            bob.put_object()
                .bucket("alice-b")
                .key("x")
                .body(body.clone().into())
                .send()
                .await,
        ),
        "PutObject with read only",
    );
    denied(
        s3_error(
            bob.copy_object()
                .bucket("alice-b")
                .key("planted")
                .copy_source("bob-b/mine")
                .send()
                .await,
        ),
        "CopyObject into a read-only bucket",
    );

    // Write: PUT, copy into, multipart, deletes; not the owner's operations.
    let run = cli(&gw, &["keys", "allow", "--write", "alice-b", &b_key]);
    assert_eq!(run.code, Some(0), "{run}");
    put_bytes(&bob, "alice-b", "from-bob", &body).await;
    bob.copy_object()
        .bucket("alice-b")
        .key("planted")
        .copy_source("bob-b/mine")
        .send()
        .await
        .expect("copy into a writable bucket");
    multipart(&bob, "alice-b", "mp", &body)
        .await
        .expect("multipart upload with write");
    assert_eq!(get_bytes(&alice, "alice-b", "mp").await, body);
    bob.delete_object()
        .bucket("alice-b")
        .key("from-bob")
        .send()
        .await
        .expect("DeleteObject with write");
    bob.delete_objects()
        .bucket("alice-b")
        .delete(delete_of("planted"))
        .send()
        .await
        .expect("DeleteObjects with write");
    denied(
        s3_error(
            bob.put_bucket_cors()
                .bucket("alice-b")
                .cors_configuration(cors())
                .send()
                .await,
        ),
        "PutBucketCors with read and write",
    );
    denied(
        s3_error(bob.delete_bucket().bucket("alice-b").send().await),
        "DeleteBucket with read and write",
    );

    // Owner: the bucket's settings too.
    let run = cli(&gw, &["keys", "allow", "--owner", "alice-b", &b_key]);
    assert_eq!(run.code, Some(0), "{run}");
    bob.put_bucket_cors()
        .bucket("alice-b")
        .cors_configuration(cors())
        .send()
        .await
        .expect("PutBucketCors as owner");
    bob.delete_bucket_cors()
        .bucket("alice-b")
        .send()
        .await
        .expect("DeleteBucketCors as owner");

    // Denied again, everything.
    let run = cli(
        &gw,
        &[
            "keys", "deny", "--read", "--write", "--owner", "alice-b", &b_key,
        ],
    );
    assert_eq!(run.code, Some(0), "{run}");
    denied(
        s3_error(bob.get_object().bucket("alice-b").key("doc").send().await),
        "GetObject after deny",
    );
    assert_eq!(bucket_names(&bob).await, vec!["bob-b".to_string()]);

    // A deleted bucket's grants go with it: a new bucket of that name starts clean.
    let run = cli(&gw, &["keys", "allow", "--read", "bob-b", &a_key]);
    assert_eq!(run.code, Some(0), "{run}");
    for key in ["mine", "copied", "from-root"] {
        bob.delete_object()
            .bucket("bob-b")
            .key(key)
            .send()
            .await
            .expect("DeleteObject");
    }
    bob.delete_bucket()
        .bucket("bob-b")
        .send()
        .await
        .expect("owner deletes its bucket");
    create_bucket(&root, "bob-b").await;
    denied(
        s3_error(alice.list_objects_v2().bucket("bob-b").send().await),
        "a grant on a deleted bucket does not carry over",
    );
}

// ---------------------------------------------------------------------------------------
// Restart and cluster
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn keys_and_owners_survive_a_restart() {
    let mut gw = Gateway::start();
    let (ak, sk) = create_key(&gw, "app");
    let (other, other_secret) = create_key(&gw, "other");
    let app = gw.client_with(&ak, &sk);
    create_bucket(&app, "app-b").await;
    let body = random_body(3, 1000);
    put_bytes(&app, "app-b", "k", &body).await;
    let run = cli(&gw, &["keys", "allow", "--read", "app-b", &other]);
    assert_eq!(run.code, Some(0), "{run}");

    gw.restart();

    let app = gw.client_with(&ak, &sk);
    assert_eq!(get_bytes(&app, "app-b", "k").await, body);
    assert_eq!(bucket_names(&app).await, vec!["app-b".to_string()]);
    let reader = gw.client_with(&other, &other_secret);
    assert_eq!(get_bytes(&reader, "app-b", "k").await, body);
    denied(
        s3_error(
            reader
                .put_object()
                .bucket("app-b")
                .key("w")
                .body(body.clone().into())
                .send()
                .await,
        ),
        "read grant after restart",
    );
    let info = cli(&gw, &["keys", "info", &ak]);
    assert!(info.stdout.contains("owns: app-b"), "{info}");
}

#[test]
fn a_key_created_on_one_node_signs_on_the_others() {
    let cluster = Cluster::start(3, &[]);
    let run = cluster.admin_cli(1, &["keys", "create", "cluster-app"]);
    assert_eq!(run.code, Some(0), "{run}");
    let (ak, sk) = parse_key(&run.stdout);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        // At once on another node: no polling.
        let on2 = cluster.node(2).client_with(&ak, &sk);
        create_bucket(&on2, "cluster-app-b").await;
        put_bytes(&on2, "cluster-app-b", "k", b"replicated").await;
        let on3 = cluster.node(3).client_with(&ak, &sk);
        assert_eq!(get_bytes(&on3, "cluster-app-b", "k").await, b"replicated");
        assert_eq!(bucket_names(&on3).await, vec!["cluster-app-b".to_string()]);
    });
    // Deleted through node 3: refused by node 3 at once, and by the others once they
    // have applied the deletion (a few milliseconds; bounded here).
    let run = cluster.admin_cli(3, &["keys", "delete", &ak]);
    assert_eq!(run.code, Some(0), "{run}");
    rt.block_on(async {
        let on3 = cluster.node(3).client_with(&ak, &sk);
        assert_eq!(
            s3_error(on3.list_buckets().send().await),
            (403, "InvalidAccessKeyId".to_string())
        );
        for id in [1, 2] {
            let client = cluster.node(id).client_with(&ak, &sk);
            let mut refused = false;
            for _ in 0..50 {
                if client.list_buckets().send().await.is_err() {
                    refused = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert!(refused, "node {id} still accepts a deleted key after 5 s");
        }
    });
}

/// Each access key is a distinct owner: ListBuckets names the caller, GetBucketAcl,
/// GetObjectAcl, ListObjects and ListMultipartUploads the bucket's creator; the ID is 64
/// hex digits, the display name the access key id, and both hold across a restart.
#[tokio::test]
async fn each_key_is_a_distinct_owner() {
    let mut gw = Gateway::start();
    let (ak, sk) = create_key(&gw, "webmail");
    let root = gw.client();
    let webmail = gw.client_with(&ak, &sk);
    create_bucket(&webmail, "inbox").await;
    put_bytes(&webmail, "inbox", "m1", b"hello").await;
    create_bucket(&root, "admin").await;

    let caller_owner = |out: &aws_sdk_s3::operation::list_buckets::ListBucketsOutput| {
        let o = out.owner().expect("Owner");
        (
            o.id().expect("ID").to_string(),
            o.display_name().expect("DisplayName").to_string(),
        )
    };
    let (root_id, root_name) = caller_owner(&root.list_buckets().send().await.expect("list"));
    let (web_id, web_name) = caller_owner(&webmail.list_buckets().send().await.expect("list"));
    assert_ne!(root_id, web_id);
    assert_eq!(web_name, ak);
    assert_eq!(root_name, gw.access_key());
    for id in [&root_id, &web_id] {
        assert_eq!(id.len(), 64, "{id}");
        assert!(id.bytes().all(|c| c.is_ascii_hexdigit()), "{id}");
    }

    // The bucket's creator, whoever asks.
    let acl = root
        .get_bucket_acl()
        .bucket("inbox")
        .send()
        .await
        .expect("acl");
    assert_eq!(acl.owner().and_then(|o| o.id()), Some(web_id.as_str()));
    let grantee = acl.grants()[0].grantee().expect("grantee");
    assert_eq!(grantee.id(), Some(web_id.as_str()));
    let acl = root
        .get_object_acl()
        .bucket("inbox")
        .key("m1")
        .send()
        .await
        .expect("object acl");
    assert_eq!(acl.owner().and_then(|o| o.id()), Some(web_id.as_str()));
    let acl = root
        .get_bucket_acl()
        .bucket("admin")
        .send()
        .await
        .expect("acl");
    assert_eq!(acl.owner().and_then(|o| o.id()), Some(root_id.as_str()));
    let listed = root
        .list_objects_v2()
        .bucket("inbox")
        .fetch_owner(true)
        .send()
        .await
        .expect("list");
    assert_eq!(
        listed.contents()[0].owner().and_then(|o| o.id()),
        Some(web_id.as_str())
    );
    let upload = webmail
        .create_multipart_upload()
        .bucket("inbox")
        .key("big")
        .send()
        .await
        .expect("create upload");
    let uploads = root
        .list_multipart_uploads()
        .bucket("inbox")
        .send()
        .await
        .expect("uploads");
    let u = &uploads.uploads()[0];
    assert_eq!(u.upload_id(), upload.upload_id());
    assert_eq!(u.owner().and_then(|o| o.id()), Some(web_id.as_str()));
    assert_eq!(u.initiator().and_then(|o| o.id()), Some(web_id.as_str()));

    gw.restart();
    let webmail = gw.client_with(&ak, &sk);
    let again = caller_owner(&webmail.list_buckets().send().await.expect("list"));
    assert_eq!(again, (web_id, web_name), "stable across a restart");
}
