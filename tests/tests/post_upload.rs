//! POST Object (browser uploads) against the real binary: forms signed by boto3's
//! `generate_presigned_post` (SigV4) and by the documented V2 algorithm (computed in
//! python with hmac/sha1), posted with `requests` as `multipart/form-data`; the stored
//! objects read back with the AWS SDK, a `tagging` field's tags on its object, an
//! `acl=public-read` object read without a signature. Every refusal (expired, tampered,
//! violated condition, too large, too small, extra field, unknown key, key without rights,
//! bad tags, an ACL not kept, anonymous form) answers S3's code and leaves nothing stored. Then headless Chromium submits real forms (a file input set over the DevTools protocol) and a page's
//! `fetch` of a `FormData` across origins, which only succeeds with the bucket's CORS
//! headers.
//!
//! Needs python3 with boto3 and requests, and Chromium for the browser test (`.ci/run`
//! installs them). Outside CI a missing one skips its test with a message; with `CI` set it
//! fails.
//!
//! Run: `cargo build -p gateway && cargo test -p e2e --test post_upload`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use aws_sdk_s3::Client;
use aws_sdk_s3::operation::head_object::HeadObjectOutput;
use aws_sdk_s3::types::CorsRule;
use e2e::cluster::run_gateway;
use e2e::{
    Gateway, assert_same_body, base64_encode, chromium_or_skip, create_bucket, etag_of, get_bytes,
    put_cors_rule, random_body, s3_error, xml_element,
};
use serde_json::{Value, json};

const BUCKET: &str = "post-bkt";

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("py").join(name)
}

/// Whether python3 has every module; if not, the test is skipped (failed with `CI` set).
fn python_has(modules: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but python3 lacks one of: {modules} (.ci/run installs them)"
        );
        eprintln!("SKIPPED: python3 with {modules} is not available here");
    }
    ok
}

/// Runs a python script of tests/py with `job` on stdin; one JSON value per output line.
fn run_python(name: &str, job: &Value) -> Vec<Value> {
    let mut child = Command::new("python3")
        .arg(script(name))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start python3 {name}: {e}"));
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(job.to_string().as_bytes())
        .expect("write the job");
    let out = child.wait_with_output().expect("python3 output");
    assert!(
        out.status.success(),
        "{name} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The answer to the case `name`.
fn named<'a>(answers: &'a [Value], name: &str) -> &'a Value {
    answers
        .iter()
        .find(|a| a["name"] == name)
        .unwrap_or_else(|| panic!("no answer for {name}: {answers:?}"))
}

fn job(gw: &Gateway, cases: Vec<Value>) -> Value {
    json!({
        "endpoint": gw.endpoint(),
        "region": e2e::REGION,
        "access_key": gw.access_key(),
        "secret_key": gw.secret_key(),
        "bucket": BUCKET,
        "cases": cases,
    })
}

fn file(name: &str, body: &[u8], content_type: &str) -> Value {
    json!([name, base64_encode(body), content_type])
}

/// The status and error code of an answer, with the whole answer on failure.
#[track_caller]
fn expect(answer: &Value, status: u64, code: Option<&str>) {
    let body = answer["body"].as_str().unwrap_or("");
    assert_eq!(
        answer["status"].as_u64(),
        Some(status),
        "{}: {answer}",
        answer["name"]
    );
    if let Some(code) = code {
        assert_eq!(
            xml_element(body, "Code").as_deref(),
            Some(code),
            "{}: {answer}",
            answer["name"]
        );
    }
}

/// The error's message, its XML quotes unescaped.
fn message(answer: &Value) -> String {
    xml_element(answer["body"].as_str().unwrap_or(""), "Message")
        .unwrap_or_default()
        .replace("&quot;", "\"")
}

/// Reads `key` back: its bytes must be `body`; its head, for what the form said about it.
async fn read_back(s3: &Client, key: &str, body: &[u8]) -> HeadObjectOutput {
    assert_same_body(&get_bytes(s3, BUCKET, key).await, body, key);
    s3.head_object()
        .bucket(BUCKET)
        .key(key)
        .send()
        .await
        .unwrap_or_else(|e| panic!("HEAD {key}: {e:?}"))
}

async fn absent(s3: &Client, key: &str) {
    let (status, _) = s3_error(s3.head_object().bucket(BUCKET).key(key).send().await);
    assert_eq!(status, 404, "{key} was stored");
}

/// No staging file was left behind on either disk.
fn no_temp_files(gw: &Gateway) {
    for disk in 0..2 {
        assert!(
            gw.temp_files(disk).is_empty(),
            "temp files left on disk {disk}: {:?}",
            gw.temp_files(disk)
        );
    }
}

/// `gateway admin keys create NAME`: a key with no rights on BUCKET.
fn create_key(gw: &Gateway, name: &str) -> (String, String) {
    let endpoint = gw.endpoint();
    let run = run_gateway(
        &["admin", "--endpoint", &endpoint, "keys", "create", name],
        &[("GATEWAY_ADMIN_TOKEN", gw.admin_token())],
    );
    assert_eq!(run.code, Some(0), "keys create: {run}");
    let line = |prefix: &str| {
        run.stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in {run}"))
            .to_string()
    };
    (line("access_key: "), line("secret_key: "))
}

#[tokio::test]
async fn forms_signed_v4_and_v2_upload_and_every_refusal_stores_nothing() {
    if !python_has("boto3, requests") {
        return;
    }
    let gw = Gateway::start_with(&["--domain", "s3.test"], &[]);
    let s3 = gw.client();
    create_bucket(&s3, BUCKET).await;
    let photo = random_body(71, 3 << 20);
    let small = random_body(72, 5000);
    let (other_key, other_secret) = create_key(&gw, "no-rights");
    let cases = vec![
        json!({
            "name": "v4 201", "key": "uploads/${filename}",
            "fields": {"Content-Type": "image/png", "success_action_status": "201",
                       "x-amz-meta-owner": "ann", "Cache-Control": "max-age=60",
                       "Content-Disposition": "inline; filename=\"photo.png\"", "acl": "private"},
            "conditions": [{"Content-Type": "image/png"}, {"success_action_status": "201"},
                           ["eq", "$x-amz-meta-owner", "ann"], ["starts-with", "$Cache-Control", ""],
                           ["starts-with", "$Content-Disposition", "inline"], {"acl": "private"},
                           ["content-length-range", 1, 10 << 20]],
            "file": file("photo.png", &photo, "image/png"),
        }),
        json!({
            "name": "v4 redirect", "key": "redirected.bin",
            "fields": {"success_action_redirect": "http://app.example/done?from=form"},
            "conditions": [["starts-with", "$success_action_redirect", "http://app.example/"]],
            "file": file("ignored-name.bin", &small, "application/octet-stream"),
        }),
        json!({
            "name": "v2 204", "sign": "v2", "key": "v2/${filename}",
            "fields": {"Content-Type": "text/plain"},
            "conditions": [["starts-with", "$Content-Type", "text/"]],
            "file": file("note.txt", &small, "application/octet-stream"),
        }),
        json!({
            "name": "virtual host", "key": "vhost.bin",
            "host": format!("{BUCKET}.s3.test:{}", gw.port()),
            "file": file("vhost.bin", &small, "application/octet-stream"),
        }),
        json!({"name": "expired", "key": "expired.bin", "expires_in": -60,
               "file": file("e.bin", &small, "application/octet-stream")}),
        json!({"name": "tampered", "key": "uploads/${filename}", "tamper_policy": true,
               "set": {"key": "elsewhere/tampered.bin", "x-amz-meta-evil": "1"},
               "file": file("t.bin", &small, "application/octet-stream")}),
        json!({"name": "v2 tampered", "sign": "v2", "key": "v2t.bin", "tamper_policy": true,
               "file": file("t.bin", &small, "application/octet-stream")}),
        json!({"name": "starts-with violated", "key": "uploads/${filename}",
               "set": {"key": "other/violated.bin"},
               "file": file("v.bin", &small, "application/octet-stream")}),
        json!({"name": "too large", "key": "large.bin",
               "conditions": [["content-length-range", 1, 1000]],
               "file": file("l.bin", &small, "application/octet-stream")}),
        json!({"name": "too small", "key": "small.bin",
               "conditions": [["content-length-range", 6000, 10000]],
               "file": file("s.bin", &small, "application/octet-stream")}),
        json!({"name": "extra field", "key": "extra.bin", "set": {"x-amz-meta-evil": "1"},
               "file": file("x.bin", &small, "application/octet-stream")}),
        json!({"name": "unknown key", "key": "unknown.bin", "as": ["NOSUCHKEY", "secret"],
               "file": file("u.bin", &small, "application/octet-stream")}),
        json!({"name": "key without rights", "key": "norights.bin",
               "as": [other_key, other_secret],
               "file": file("n.bin", &small, "application/octet-stream")}),
        json!({"name": "tagging", "key": "tagged.bin",
               "fields": {"tagging": "<Tagging><TagSet><Tag><Key>a</Key><Value>b</Value></Tag></TagSet></Tagging>"},
               "conditions": [["starts-with", "$tagging", ""]],
               "file": file("g.bin", &small, "application/octet-stream")}),
        json!({"name": "reserved tag", "key": "reserved-tag.bin",
               "fields": {"tagging": "<Tagging><TagSet><Tag><Key>aws:a</Key><Value>b</Value></Tag></TagSet></Tagging>"},
               "conditions": [["starts-with", "$tagging", ""]],
               "file": file("r.bin", &small, "application/octet-stream")}),
        json!({"name": "tagging as a query", "key": "query-tag.bin",
               "fields": {"tagging": "a=b"},
               "conditions": [["starts-with", "$tagging", ""]],
               "file": file("q.bin", &small, "application/octet-stream")}),
        json!({"name": "public acl", "key": "public.bin", "fields": {"acl": "public-read"},
               "conditions": [{"acl": "public-read"}],
               "file": file("p.bin", &small, "application/octet-stream")}),
        json!({"name": "unkept acl", "key": "authenticated.bin",
               "fields": {"acl": "authenticated-read"},
               "conditions": [{"acl": "authenticated-read"}],
               "file": file("p.bin", &small, "application/octet-stream")}),
        json!({"name": "anonymous", "sign": "none", "key": "anon.bin",
               "fields": {"key": "anon.bin"},
               "file": file("a.bin", &small, "application/octet-stream")}),
        json!({"name": "no file", "key": "nofile.bin"}),
        json!({"name": "no key", "key": "nokey.bin", "drop": ["key"],
               "file": file("k.bin", &small, "application/octet-stream")}),
        json!({"name": "bad policy", "key": "badpolicy.bin", "set": {"policy": "not-base64!"},
               "file": file("b.bin", &small, "application/octet-stream")}),
        json!({"name": "signed bad policy", "sign": "v2", "key": "badjson.bin",
               "policy_text": "{\"expiration\": \"2030-01-01T00:00:00Z\", \"conditions\": [",
               "file": file("j.bin", &small, "application/octet-stream")}),
    ];
    let answers = run_python("post_forms.py", &job(&gw, cases));
    assert_eq!(answers.len(), 23, "{answers:?}");
    let by = |name: &str| named(&answers, name);

    // SigV4, 201 with the PostResponse document; the object reads back byte for byte with
    // what the form said about it.
    let created = by("v4 201");
    expect(created, 201, None);
    let body = created["body"].as_str().unwrap_or("");
    assert_eq!(xml_element(body, "Bucket").as_deref(), Some(BUCKET));
    assert_eq!(
        xml_element(body, "Key").as_deref(),
        Some("uploads/photo.png")
    );
    let etag = etag_of(&photo);
    assert_eq!(
        xml_element(body, "ETag").map(|e| e.replace("&quot;", "\"")),
        Some(etag.clone())
    );
    assert_eq!(created["headers"]["etag"], etag.as_str());
    assert!(
        xml_element(body, "Location").is_some_and(|l| l.ends_with("/post-bkt/uploads/photo.png")),
        "{body}"
    );
    let head = read_back(&s3, "uploads/photo.png", &photo).await;
    assert_eq!(head.content_type(), Some("image/png"));
    assert_eq!(head.cache_control(), Some("max-age=60"));
    assert_eq!(
        head.content_disposition(),
        Some("inline; filename=\"photo.png\"")
    );
    assert_eq!(
        head.metadata()
            .and_then(|m| m.get("owner"))
            .map(String::as_str),
        Some("ann")
    );

    // 303 to the page's URL with the object named in the query.
    let redirected = by("v4 redirect");
    expect(redirected, 303, None);
    let small_etag = etag_of(&small).replace('"', "%22");
    assert_eq!(
        redirected["headers"]["location"],
        format!(
            "http://app.example/done?from=form&bucket={BUCKET}&key=redirected.bin&etag={small_etag}"
        )
        .as_str()
    );
    read_back(&s3, "redirected.bin", &small).await;

    // V2, 204 by default; the part's own Content-Type is not the object's, the field is.
    expect(by("v2 204"), 204, None);
    let head = read_back(&s3, "v2/note.txt", &small).await;
    assert_eq!(head.content_type(), Some("text/plain"));

    // Virtual-hosted style: the bucket comes from the Host, as the policy's bucket does.
    expect(by("virtual host"), 204, None);
    read_back(&s3, "vhost.bin", &small).await;

    // The `tagging` field, a <Tagging> document as S3 takes it: the object's tags.
    expect(by("tagging"), 204, None);
    read_back(&s3, "tagged.bin", &small).await;
    let tags = s3
        .get_object_tagging()
        .bucket(BUCKET)
        .key("tagged.bin")
        .send()
        .await
        .expect("GetObjectTagging");
    let tags: Vec<(&str, &str)> = tags
        .tag_set()
        .iter()
        .map(|t| (t.key(), t.value()))
        .collect();
    assert_eq!(tags, [("a", "b")]);

    // The `acl` field, a canned ACL: public-read reads without a signature.
    expect(by("public acl"), 204, None);
    let anonymous = gw
        .raw("GET", &format!("/{BUCKET}/public.bin"), &[], b"")
        .expect("GET");
    assert_eq!(anonymous.status, 200);
    assert_eq!(anonymous.body, small);

    // Refusals, each with S3's code, and nothing stored.
    let refused = [
        ("expired", 403, "AccessDenied", "expired.bin"),
        (
            "tampered",
            403,
            "SignatureDoesNotMatch",
            "elsewhere/tampered.bin",
        ),
        ("v2 tampered", 403, "SignatureDoesNotMatch", "v2t.bin"),
        (
            "starts-with violated",
            403,
            "AccessDenied",
            "other/violated.bin",
        ),
        ("too large", 400, "EntityTooLarge", "large.bin"),
        ("too small", 400, "EntityTooSmall", "small.bin"),
        ("extra field", 403, "AccessDenied", "extra.bin"),
        ("unknown key", 403, "InvalidAccessKeyId", "unknown.bin"),
        ("key without rights", 403, "AccessDenied", "norights.bin"),
        ("reserved tag", 400, "InvalidTag", "reserved-tag.bin"),
        ("tagging as a query", 400, "MalformedXML", "query-tag.bin"),
        ("unkept acl", 501, "NotImplemented", "authenticated.bin"),
        ("anonymous", 403, "AccessDenied", "anon.bin"),
        ("no file", 400, "InvalidArgument", "nofile.bin"),
        ("no key", 400, "InvalidArgument", "nokey.bin"),
        ("bad policy", 403, "SignatureDoesNotMatch", "badpolicy.bin"),
        (
            "signed bad policy",
            400,
            "InvalidPolicyDocument",
            "badjson.bin",
        ),
    ];
    for (name, status, code, key) in refused {
        expect(by(name), status, Some(code));
        absent(&s3, key).await;
    }
    for (name, said) in [
        ("expired", "Invalid according to Policy: Policy expired."),
        (
            "starts-with violated",
            "Invalid according to Policy: Policy Condition failed: [\"starts-with\", \"$key\", \"uploads/\"]",
        ),
        (
            "extra field",
            "Invalid according to Policy: Extra input fields: x-amz-meta-evil",
        ),
        (
            "no file",
            "POST requires exactly one file upload per request.",
        ),
    ] {
        assert_eq!(message(by(name)), said, "{name}");
    }
    let listed = s3
        .list_objects_v2()
        .bucket(BUCKET)
        .send()
        .await
        .expect("ListObjectsV2");
    let mut keys: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "public.bin",
            "redirected.bin",
            "tagged.bin",
            "uploads/photo.png",
            "v2/note.txt",
            "vhost.bin"
        ],
        "only the accepted forms stored"
    );
    no_temp_files(&gw);
}

/// The exemption from request signing is exactly a multipart/form-data POST on a bucket:
/// every other unsigned request is still refused before any handler runs.
#[tokio::test]
async fn only_a_form_post_on_a_bucket_goes_unsigned() {
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, BUCKET).await;
    let form = "multipart/form-data; boundary=B";
    let body = b"--B\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nk\r\n--B--\r\n";
    let target = format!("/{BUCKET}");
    for (method, path, content_type) in [
        ("POST", format!("{target}?delete"), form),
        ("POST", format!("{target}/k?uploads"), form),
        ("POST", format!("{target}/k"), form),
        ("POST", target.clone(), "application/xml"),
        ("PUT", format!("{target}/k"), form),
        ("GET", target.clone(), form),
        ("POST", "/".to_string(), form),
    ] {
        let resp = gw
            .raw(method, &path, &[("content-type", content_type)], body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        assert_eq!(
            resp.status,
            403,
            "{method} {path} {content_type}: {}",
            resp.text()
        );
        assert_eq!(
            resp.error_code().as_deref(),
            Some("AccessDenied"),
            "{method} {path}"
        );
    }
    // The form itself reaches the handler, which refuses it for what it lacks.
    let resp = gw
        .raw("POST", &target, &[("content-type", form)], body)
        .expect("POST form");
    assert_eq!(resp.status, 400, "{}", resp.text());
    assert_eq!(resp.error_code().as_deref(), Some("InvalidArgument"));
    let resp = gw
        .raw(
            "POST",
            &target,
            &[("content-type", "multipart/form-data")],
            body,
        )
        .expect("POST form without boundary");
    assert_eq!(resp.error_code().as_deref(), Some("MalformedPOSTRequest"));
    absent(&s3, "k").await;
}

// ---------------------------------------------------------------------------------------
// Headless Chromium
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn chromium_submits_signed_forms_and_a_cross_origin_fetch() {
    let Some(chromium) = chromium_or_skip() else {
        return;
    };
    if !python_has("boto3") {
        return;
    }
    let gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, BUCKET).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let upload = random_body(81, 700_000);
    let upload_path = dir.path().join("holiday photo.jpg");
    std::fs::write(&upload_path, &upload).expect("write the file to upload");
    // The page is served from another origin (the script's port) than the gateway's:
    // only that origin may POST from a script.
    let page_port = e2e::cluster::free_ports(1)[0];
    let rule = CorsRule::builder()
        .allowed_origins(format!("http://127.0.0.1:{page_port}"))
        .allowed_methods("POST")
        .expose_headers("ETag")
        .build()
        .expect("CORS rule");
    put_cors_rule(&s3, BUCKET, rule).await;

    let answers = run_python(
        "post_browser.py",
        &json!({
            "endpoint": gw.endpoint(),
            "region": e2e::REGION,
            "access_key": gw.access_key(),
            "secret_key": gw.secret_key(),
            "bucket": BUCKET,
            "chromium": chromium,
            "profile": dir.path().join("profile"),
            "file": upload_path,
            "page_port": page_port,
        }),
    );
    let by = |name: &str| named(&answers, name);

    // A real form with a file input: the browser follows the 303 to the page's own URL,
    // which names the object.
    let form = by("form");
    let landed = form["url"].as_str().unwrap_or("");
    let etag = etag_of(&upload).replace('"', "%22");
    assert!(
        landed.starts_with(&format!("http://127.0.0.1:{page_port}/done?"))
            && landed.contains(&format!("bucket={BUCKET}"))
            && landed.contains("key=browser%2Fholiday%20photo.jpg")
            && landed.contains(&format!("etag={etag}")),
        "the browser landed on {landed}: {form}"
    );
    let head = read_back(&s3, "browser/holiday photo.jpg", &upload).await;
    assert_eq!(head.content_type(), Some("image/jpeg"));

    // Expired and tampered forms: the browser shows S3's error document.
    for (name, code, key) in [
        ("expired", "AccessDenied", "browser/expired.jpg"),
        ("tampered", "SignatureDoesNotMatch", "browser/tampered.jpg"),
    ] {
        let shown = by(name)["text"].as_str().unwrap_or("");
        assert!(shown.contains(code), "{name}: the browser shows {shown}");
        absent(&s3, key).await;
    }

    // A page script's fetch of a FormData (a File made in JS): the bucket's CORS rule lets
    // the page read the 201 answer; from an origin no rule allows, the browser hides it
    // (the upload itself happens, as it would on S3: CORS guards reading, not sending).
    let fetched = by("fetch");
    assert_eq!(fetched["text"], "201 fetched.txt", "{fetched}");
    read_back(&s3, "browser/fetched.txt", b"made in the page").await;
    let denied = by("fetch other origin");
    assert!(
        denied["text"].as_str().unwrap_or("").starts_with("ERR"),
        "a page of another origin read the answer: {denied}"
    );
    no_temp_files(&gw);
}
