//! The article's native interface on the S3 port: `inc`, `upload`, `dec` and `GET /sha1`
//! with the size and CRC32 guard, authenticated with `GATEWAY_NATIVE_TOKEN`.

use std::sync::Barrier;
use std::time::Duration;

use e2e::{
    AdminFile, Gateway, RawResponse, assert_same_body, crc32, create_bucket, get_bytes, poll_until,
    put_bytes, random_body, random_token, sha1_hex,
};

const TOKEN_ENV: &str = "GATEWAY_NATIVE_TOKEN";

/// The text of a top-level field of a flat JSON answer (`{"refs":2,"state":"live"}`).
fn field(text: &str, key: &str) -> Option<String> {
    let pat = format!("\"{key}\":");
    let start = text.find(&pat)? + pat.len();
    let rest = text[start..].trim_start();
    if let Some(s) = rest.strip_prefix('"') {
        Some(s[..s.find('"')?].to_string())
    } else {
        let end = rest.find([',', '}']).unwrap_or(rest.len());
        Some(rest[..end].trim().to_string())
    }
}

/// A native API client: raw HTTP with `Authorization: Bearer <token>` (or none).
struct Native<'g> {
    gw: &'g Gateway,
    auth: Option<String>,
}

impl<'g> Native<'g> {
    fn new(gw: &'g Gateway, token: &str) -> Self {
        Native {
            gw,
            auth: Some(format!("Bearer {token}")),
        }
    }

    /// Sends `authorization: <value>` verbatim, or no authorization header at all.
    fn with_auth(gw: &'g Gateway, auth: Option<&str>) -> Self {
        Native {
            gw,
            auth: auth.map(String::from),
        }
    }

    fn send(&self, method: &str, target: &str, body: &[u8]) -> RawResponse {
        let mut headers = Vec::new();
        if let Some(a) = &self.auth {
            headers.push(("authorization", a.as_str()));
        }
        self.gw
            .raw(method, target, &headers, body)
            .unwrap_or_else(|e| {
                panic!(
                    "{method} {target}: no HTTP answer: {e}\n{}",
                    self.gw.log_tail(50)
                )
            })
    }

    fn put(&self, sha1: &str, magic: &str, body: &[u8]) -> RawResponse {
        self.send("PUT", &format!("/_files/{sha1}?magic={magic}"), body)
    }

    fn inc(&self, sha1: &str, magic: &str) -> RawResponse {
        self.send("POST", &format!("/_files/{sha1}/inc?magic={magic}"), b"")
    }

    fn dec(&self, sha1: &str, magic: &str) -> RawResponse {
        self.send("POST", &format!("/_files/{sha1}/dec?magic={magic}"), b"")
    }

    fn get(&self, sha1: &str, size: u64, crc: u32) -> RawResponse {
        self.get_query(sha1, &format!("size={size}&crc32={crc:08x}"))
    }

    fn get_query(&self, sha1: &str, query: &str) -> RawResponse {
        self.send("GET", &format!("/_files/{sha1}?{query}"), b"")
    }
}

/// Asserts a 200 JSON answer and returns its `refs`.
#[track_caller]
fn refs_of(resp: &RawResponse, what: &str) -> u64 {
    assert_eq!(resp.status, 200, "{what}: {}", resp.text());
    assert_eq!(
        resp.header("content-type"),
        Some("application/json"),
        "{what}"
    );
    field(&resp.text(), "refs")
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("{what}: no refs in {}", resp.text()))
}

/// Asserts a 200 dec answer and returns (refs, state).
#[track_caller]
fn dec_of(resp: &RawResponse, what: &str) -> (u64, String) {
    let refs = refs_of(resp, what);
    let state = field(&resp.text(), "state")
        .unwrap_or_else(|| panic!("{what}: no state in {}", resp.text()));
    (refs, state)
}

#[track_caller]
fn status(resp: &RawResponse, want: u16, what: &str) {
    assert_eq!(resp.status, want, "{what}: {}", resp.text());
}

#[track_caller]
fn admin(gw: &Gateway, sha1: &str) -> AdminFile {
    gw.admin_file(sha1)
        .unwrap_or_else(|| panic!("admin knows nothing of {sha1}"))
}

/// A gateway with the native API on, and its token.
fn gateway_with_token() -> (Gateway, String) {
    let token = random_token(24);
    (Gateway::start_with(&[], &[(TOKEN_ENV, &token)]), token)
}

/// Both disks hold exactly the given bodies at their content paths, and no temp file.
#[track_caller]
fn assert_disks_hold(gw: &Gateway, bodies: &[&[u8]]) {
    for disk in 0..2 {
        let mut want: Vec<_> = bodies
            .iter()
            .map(|b| gw.content_path(disk, &sha1_hex(b)))
            .collect();
        want.sort();
        want.dedup();
        assert_eq!(gw.content_files(disk), want, "content files on disk{disk}");
        for b in bodies {
            let path = gw.content_path(disk, &sha1_hex(b));
            let stored = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_same_body(&stored, b, &path.display().to_string());
        }
        assert_eq!(gw.temp_files(disk), Vec::<std::path::PathBuf>::new());
    }
}

#[test]
fn crc32_helper_is_the_ieee_crc() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    assert_eq!(crc32(b""), 0);
}

/// The article's example, over HTTP: magic 345 uploads, 123 references, the second email
/// deletes twice, and the file is flagged DO_NOT_DELETE for good. Valkyrie runs its
/// deletion pass every second here, and does delete a cleanly released file meanwhile.
#[test]
fn the_articles_worked_example() {
    let cfg = tempfile::tempdir().expect("temp dir");
    let cfg_path = cfg.path().join("gateway.toml");
    // The slave waits an hour: the master's quarantine is visible, the entry stays.
    std::fs::write(
        &cfg_path,
        "[valkyrie]\ndeletion_interval_secs = 1\nslave_delay_secs = 3600\n",
    )
    .expect("write config");
    let token = random_token(24);
    let gw = Gateway::start_with(
        &["--config", cfg_path.to_str().expect("utf-8 path")],
        &[(TOKEN_ENV, &token)],
    );
    let api = Native::new(&gw, &token);

    let attachment = random_body(4242, 40_000);
    let sha1 = sha1_hex(&attachment);

    // inc first, as a mail back end does: not stored yet, so upload.
    status(&api.inc(&sha1, "345"), 404, "inc before any upload");
    assert_eq!(
        refs_of(&api.put(&sha1, "345", &attachment), "upload 345"),
        1
    );
    let f = admin(&gw, &sha1);
    assert_eq!((f.refs, f.magic, f.flags), (Some(1), Some(345), Some(0)));

    // A second email with the same file: magic 123.
    assert_eq!(refs_of(&api.inc(&sha1, "123"), "inc 123"), 2);
    let f = admin(&gw, &sha1);
    assert_eq!((f.refs, f.magic), (Some(2), Some(468)), "{f:?}");

    // The second email is deleted...
    assert_eq!(
        dec_of(&api.dec(&sha1, "123"), "dec 123"),
        (1, "live".into())
    );
    assert_eq!(admin(&gw, &sha1).magic, Some(345));

    // ...and deleted again: no references left but the magic (222) says something is off.
    assert_eq!(
        dec_of(&api.dec(&sha1, "123"), "second dec 123"),
        (0, "do_not_delete".into())
    );
    let f = admin(&gw, &sha1);
    assert_eq!(f.state, "live", "the record stays: {f:?}");
    assert_eq!((f.refs, f.magic), (Some(0), Some(222)), "{f:?}");
    assert_eq!(f.flags.map(|x| x & 1), Some(1), "DO_NOT_DELETE: {f:?}");

    // The first email is deleted too: the magic is now -123, and the flag stays.
    assert_eq!(
        dec_of(&api.dec(&sha1, "345"), "dec 345"),
        (0, "do_not_delete".into())
    );
    let f = admin(&gw, &sha1);
    assert_eq!(f.state, "live", "{f:?}");
    assert_eq!(f.refs, Some(0), "{f:?}");
    assert_eq!(f.magic, Some(u64::from(222u32.wrapping_sub(345))), "{f:?}");
    assert_eq!(f.flags.map(|x| x & 1), Some(1), "{f:?}");

    // The flag is sticky: even when counter and magic both come back to zero later, the
    // file is not released.
    assert_eq!(refs_of(&api.inc(&sha1, "200"), "inc 200"), 1); // magic 77
    assert_eq!(
        dec_of(&api.dec(&sha1, "77"), "dec to refs 0, magic 0"),
        (0, "do_not_delete".into())
    );
    let f = admin(&gw, &sha1);
    assert_eq!(
        (f.state.as_str(), f.refs, f.magic),
        ("live", Some(0), Some(0))
    );
    assert_eq!(f.flags.map(|x| x & 1), Some(1), "{f:?}");

    // The normal course of events on another file: insert 345, inc 123, dec 123, dec 345.
    let clean = random_body(4243, 30_000);
    let clean_sha1 = sha1_hex(&clean);
    assert_eq!(refs_of(&api.put(&clean_sha1, "345", &clean), "upload"), 1);
    assert_eq!(refs_of(&api.inc(&clean_sha1, "123"), "inc"), 2);
    assert_eq!(
        dec_of(&api.dec(&clean_sha1, "123"), "dec"),
        (1, "live".into())
    );
    assert_eq!(
        dec_of(&api.dec(&clean_sha1, "345"), "last dec"),
        (0, "deleting".into())
    );
    let d = admin(&gw, &clean_sha1);
    assert_eq!(d.state, "deleting", "{d:?}");
    // Gone from FileDB: inc says so (the back end would upload again), and so does GET.
    status(&api.inc(&clean_sha1, "5"), 404, "inc of a released file");
    status(
        &api.get(&clean_sha1, clean.len() as u64, crc32(&clean)),
        404,
        "GET of a released file",
    );

    // Valkyrie's master disk for the released file quarantines its copy within seconds...
    let master = usize::from(u8::from_str_radix(&clean_sha1[0..2], 16).expect("hex") >> 7);
    let master_copy = gw.content_path(master, &clean_sha1);
    assert!(
        poll_until(Duration::from_secs(30), || !master_copy.exists()),
        "Valkyrie did not quarantine {} within 30 s\n{}",
        master_copy.display(),
        gw.log_tail(60)
    );
    let quarantined: Vec<_> = std::fs::read_dir(master_copy.parent().expect("parent"))
        .expect("read content folder")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{clean_sha1}.deleted."))
        })
        .collect();
    assert_eq!(quarantined.len(), 1, "one quarantined copy on the master");
    // ...while the slave waits for its delay.
    assert!(gw.content_path(1 - master, &clean_sha1).is_file());

    // The DO_NOT_DELETE file is never deleted: still on both disks, still served.
    for disk in 0..2 {
        let path = gw.content_path(disk, &sha1);
        let stored = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_same_body(&stored, &attachment, "the DO_NOT_DELETE file");
    }
    let got = api.get(&sha1, attachment.len() as u64, crc32(&attachment));
    status(&got, 200, "GET of the DO_NOT_DELETE file");
    assert_same_body(&got.body, &attachment, "GET of the DO_NOT_DELETE file");
    assert_eq!(admin(&gw, &sha1).flags.map(|x| x & 1), Some(1));
}

#[test]
fn inc_needs_a_stored_file_and_magic_must_be_a_nonzero_u32() {
    let (gw, token) = gateway_with_token();
    let api = Native::new(&gw, &token);
    let body = random_body(7, 5_000);
    let sha1 = sha1_hex(&body);

    status(&api.inc(&sha1, "1"), 404, "inc of an unknown sha1");
    status(&api.dec(&sha1, "1"), 404, "dec of an unknown sha1");
    assert_eq!(gw.admin_file(&sha1), None, "a 404 inc records nothing");

    // Bad magics are refused on every route, before anything is stored.
    for magic in ["0", "abc", "-1", "4294967296", "1.5", ""] {
        status(
            &api.put(&sha1, magic, &body),
            400,
            &format!("PUT magic={magic}"),
        );
        status(&api.inc(&sha1, magic), 400, &format!("inc magic={magic}"));
        status(&api.dec(&sha1, magic), 400, &format!("dec magic={magic}"));
    }
    status(
        &api.send("PUT", &format!("/_files/{sha1}"), &body),
        400,
        "PUT without magic",
    );
    status(
        &api.send("POST", &format!("/_files/{sha1}/inc"), b""),
        400,
        "inc without magic",
    );
    // Not a sha1.
    status(&api.inc("xyz", "1"), 400, "inc of a non-sha1");
    status(
        &api.put(&sha1[..39], "1", &body),
        400,
        "PUT to a short sha1",
    );
    assert_eq!(
        gw.admin_file(&sha1),
        None,
        "nothing stored by refused calls"
    );
    for disk in 0..2 {
        assert!(gw.content_files(disk).is_empty(), "disk{disk}");
        assert!(gw.temp_files(disk).is_empty(), "disk{disk}");
    }

    assert_eq!(refs_of(&api.put(&sha1, "9", &body), "upload"), 1);
    assert_eq!(refs_of(&api.inc(&sha1, "10"), "inc after upload"), 2);
    // The largest magic is fine.
    assert_eq!(refs_of(&api.inc(&sha1, "4294967295"), "inc u32::MAX"), 3);
    let f = admin(&gw, &sha1);
    assert_eq!(f.refs, Some(3));
    assert_eq!(f.magic, Some(u64::from(19u32.wrapping_add(u32::MAX))));
    // Uploading known content again is an inc, and stores no second file.
    assert_eq!(refs_of(&api.put(&sha1, "11", &body), "upload again"), 4);
    assert_disks_hold(&gw, &[&body]);
}

#[test]
fn the_token_is_required_on_every_route() {
    let (gw, token) = gateway_with_token();
    let body = random_body(8, 3_000);
    let sha1 = sha1_hex(&body);
    assert_eq!(
        refs_of(&Native::new(&gw, &token).put(&sha1, "1", &body), "upload"),
        1
    );

    let wrong = format!("Bearer {}", random_token(24));
    let almost = format!("Bearer {}x", token);
    let no_scheme = token.clone();
    let basic = format!("Basic {token}");
    for auth in [
        None,
        Some(wrong.as_str()),
        Some(almost.as_str()),
        Some(no_scheme.as_str()),
        Some(basic.as_str()),
    ] {
        let api = Native::with_auth(&gw, auth);
        let what = |route: &str| format!("{route} with authorization {auth:?}");
        let other = random_body(9, 100);
        status(&api.put(&sha1_hex(&other), "1", &other), 403, &what("PUT"));
        status(&api.inc(&sha1, "1"), 403, &what("inc"));
        status(&api.dec(&sha1, "1"), 403, &what("dec"));
        status(
            &api.get(&sha1, body.len() as u64, crc32(&body)),
            403,
            &what("GET"),
        );
        assert_eq!(gw.admin_file(&sha1_hex(&other)), None);
    }
    // Nothing changed.
    assert_eq!(admin(&gw, &sha1).refs, Some(1));
    assert_disks_hold(&gw, &[&body]);
}

#[test]
fn without_a_configured_token_the_native_api_is_off() {
    // An empty variable counts as unset.
    let gw = Gateway::start_with(&[], &[(TOKEN_ENV, "")]);
    let body = random_body(10, 2_000);
    let sha1 = sha1_hex(&body);
    for auth in [None, Some("Bearer "), Some("Bearer anything")] {
        let api = Native::with_auth(&gw, auth);
        status(&api.put(&sha1, "1", &body), 403, "PUT");
        status(&api.inc(&sha1, "1"), 403, "inc");
        status(&api.dec(&sha1, "1"), 403, "dec");
        status(&api.get(&sha1, 2_000, crc32(&body)), 403, "GET");
    }
    assert_eq!(gw.admin_file(&sha1), None);
    for disk in 0..2 {
        assert!(gw.content_files(disk).is_empty());
        assert!(gw.temp_files(disk).is_empty());
    }
}

#[test]
fn a_body_that_does_not_hash_to_the_sha1_is_refused_and_leaves_nothing() {
    let (gw, token) = gateway_with_token();
    let api = Native::new(&gw, &token);
    for (seed, len) in [(20u64, 10_000usize), (21, 2 * 1024 * 1024 + 17), (22, 0)] {
        let claimed = random_body(seed + 100, 1_000);
        let claimed_sha1 = sha1_hex(&claimed);
        let sent = random_body(seed, len);
        let resp = api.put(&claimed_sha1, "5", &sent);
        status(&resp, 400, &format!("{len}-byte body under another sha1"));
        assert!(
            resp.text().contains(&sha1_hex(&sent)),
            "the error names what the body hashes to: {}",
            resp.text()
        );
        assert_eq!(gw.admin_file(&claimed_sha1), None);
        assert_eq!(gw.admin_file(&sha1_hex(&sent)), None);
        status(
            &api.inc(&claimed_sha1, "5"),
            404,
            "inc after a refused upload",
        );
        for disk in 0..2 {
            assert!(gw.content_files(disk).is_empty(), "disk{disk}");
            assert!(gw.temp_files(disk).is_empty(), "no temp file on disk{disk}");
        }
    }
}

#[test]
fn reads_check_size_and_crc32() {
    let (gw, token) = gateway_with_token();
    let api = Native::new(&gw, &token);
    let small = random_body(30, 10_000);
    let large = random_body(31, 3 * 1024 * 1024);
    for b in [&small, &large] {
        assert_eq!(refs_of(&api.put(&sha1_hex(b), "3", b), "upload"), 1);
    }

    for (b, what) in [(&small, "small"), (&large, "3 MiB")] {
        let (sha1, size, crc) = (sha1_hex(b), b.len() as u64, crc32(b));
        let got = api.get(&sha1, size, crc);
        status(&got, 200, what);
        assert!(got.complete, "{what}: {:?}", got.body_error);
        assert_eq!(
            got.header("content-length"),
            Some(size.to_string().as_str())
        );
        assert_eq!(got.header("content-type"), Some("application/octet-stream"));
        assert_same_body(&got.body, b, what);
        // Upper-case hex is hex too.
        let upper = api.get_query(&sha1, &format!("size={size}&crc32={crc:08X}"));
        status(&upper, 200, what);
        assert_same_body(&upper.body, b, what);

        // Another size: refused before a byte is read.
        status(
            &api.get(&sha1, size + 1, crc),
            409,
            &format!("{what}, size + 1"),
        );
        status(
            &api.get(&sha1, size - 1, crc),
            409,
            &format!("{what}, size - 1"),
        );
        status(&api.get(&sha1, 0, crc), 409, &format!("{what}, size 0"));

        // Malformed guards.
        for q in [
            format!("size={size}"),
            format!("crc32={crc:08x}"),
            format!("size=x&crc32={crc:08x}"),
            format!("size={size}&crc32={:07x}", crc & 0x0fff_ffff),
            format!("size={size}&crc32=zzzzzzzz"),
        ] {
            status(&api.get_query(&sha1, &q), 400, &format!("{what}: {q}"));
        }
    }

    // Another CRC32, right size: 409 for a body verified before sending.
    status(
        &api.get(&sha1_hex(&small), small.len() as u64, crc32(&small) ^ 1),
        409,
        "small, wrong crc32",
    );
    // A streamed body cannot be refused before its end: it must never arrive complete.
    let wrong = api.get(&sha1_hex(&large), large.len() as u64, crc32(&large) ^ 1);
    assert!(
        wrong.status == 409 || (wrong.status == 200 && !wrong.complete),
        "3 MiB with a wrong crc32: status {} complete {} ({} bytes)",
        wrong.status,
        wrong.complete,
        wrong.body.len()
    );

    // Unknown content.
    let unknown = random_body(32, 10);
    status(
        &api.get(&sha1_hex(&unknown), 10, crc32(&unknown)),
        404,
        "unknown sha1",
    );

    // The refused reads did not spoil anything: the right guard still gets the bytes.
    for b in [&small, &large] {
        let got = api.get(&sha1_hex(b), b.len() as u64, crc32(b));
        status(&got, 200, "read after refused reads");
        assert!(got.complete);
        assert_same_body(&got.body, b, "read after refused reads");
    }
}

/// Two (here eight) loaders racing on the same new attachment, as in the article: all
/// succeed, the counter counts every one, and each disk holds one file.
#[test]
fn eight_loaders_racing_on_the_same_content() {
    const LOADERS: usize = 8;
    let (gw, token) = gateway_with_token();
    let body = random_body(40, 1024 * 1024 + 3);
    let sha1 = sha1_hex(&body);
    let magics: Vec<u32> = (0..LOADERS as u32).map(|i| 1000 + 7919 * i).collect();
    let barrier = Barrier::new(LOADERS);
    let answers: Vec<(u16, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = magics
            .iter()
            .map(|&m| {
                let (gw, token, body, sha1, barrier) = (&gw, &token, &body, &sha1, &barrier);
                s.spawn(move || {
                    let api = Native::new(gw, token);
                    barrier.wait();
                    let r = api.put(sha1, &m.to_string(), body);
                    (r.status, r.text())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("loader thread"))
            .collect()
    });
    let mut refs = Vec::new();
    for (status, text) in &answers {
        assert_eq!(*status, 200, "a loader failed: {text}");
        refs.push(
            field(text, "refs")
                .and_then(|r| r.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("no refs in {text}")),
        );
    }
    // Each commit is one transaction: the answers count 1..=8, each once.
    refs.sort_unstable();
    assert_eq!(
        refs,
        (1..=LOADERS as u64).collect::<Vec<_>>(),
        "{answers:?}"
    );
    let f = admin(&gw, &sha1);
    assert_eq!(f.refs, Some(LOADERS as u64), "{f:?}");
    let magic_sum = magics.iter().fold(0u32, |a, m| a.wrapping_add(*m));
    assert_eq!(f.magic, Some(u64::from(magic_sum)), "{f:?}");
    assert_disks_hold(&gw, &[&body]);

    // Every loader's email can release its reference; the last one releases the file.
    for (i, m) in magics.iter().enumerate() {
        let (left, state) = dec_of(&Native::new(&gw, &token).dec(&sha1, &m.to_string()), "dec");
        let want = if i + 1 == LOADERS { "deleting" } else { "live" };
        assert_eq!((left, state.as_str()), ((LOADERS - i - 1) as u64, want));
    }
}

#[tokio::test]
async fn s3_objects_and_native_references_share_content() {
    let (gw, token) = gateway_with_token();
    let api = Native::new(&gw, &token);
    let s3 = gw.client();
    create_bucket(&s3, "mail").await;

    // S3 first, then a native reference to the same bytes.
    let body = random_body(50, 200_000);
    let sha1 = sha1_hex(&body);
    put_bytes(&s3, "mail", "inbox/1/price-list.pdf", &body).await;
    assert_eq!(admin(&gw, &sha1).refs, Some(1));
    assert_eq!(
        refs_of(&api.inc(&sha1, "77"), "native inc of S3 content"),
        2
    );
    let got = api.get(&sha1, body.len() as u64, crc32(&body));
    status(&got, 200, "native GET of S3 content");
    assert_same_body(&got.body, &body, "native GET of S3 content");

    // The native reference goes; the S3 object stays readable.
    assert_eq!(
        dec_of(&api.dec(&sha1, "77"), "native dec"),
        (1, "live".into())
    );
    assert_same_body(
        &get_bytes(&s3, "mail", "inbox/1/price-list.pdf").await,
        &body,
        "S3 GET after native dec",
    );
    // Each side balanced its own magic: deleting the object releases the file cleanly.
    s3.delete_object()
        .bucket("mail")
        .key("inbox/1/price-list.pdf")
        .send()
        .await
        .expect("DeleteObject");
    assert_eq!(admin(&gw, &sha1).state, "deleting");

    // Native first, then S3: the object dedups onto the uploaded file.
    let other = random_body(51, 70_000);
    let other_sha1 = sha1_hex(&other);
    assert_eq!(
        refs_of(&api.put(&other_sha1, "5", &other), "native upload"),
        1
    );
    put_bytes(&s3, "mail", "inbox/2/logo.png", &other).await;
    assert_eq!(admin(&gw, &other_sha1).refs, Some(2));
    assert_same_body(
        &get_bytes(&s3, "mail", "inbox/2/logo.png").await,
        &other,
        "S3 GET of natively uploaded content",
    );
    assert_eq!(
        dec_of(&api.dec(&other_sha1, "5"), "native dec"),
        (1, "live".into())
    );
    assert_same_body(
        &get_bytes(&s3, "mail", "inbox/2/logo.png").await,
        &other,
        "S3 GET after the native reference went",
    );
    // One file per disk for both contents (the released one waits for Valkyrie).
    assert_disks_hold(&gw, &[&body, &other]);
}

/// With no pair taking writes, an upload is refused as unavailable (503, to be retried),
/// whether the body is held in memory first (up to 1 MiB) or streamed, and stores nothing.
#[test]
fn an_upload_with_no_writable_pair_is_unavailable() {
    let (gw, token) = gateway_with_token();
    let api = Native::new(&gw, &token);
    let admin_auth = format!("Bearer {}", gw.admin_token());
    let flagged = gw
        .raw(
            "POST",
            "/_admin/pairs/0/read-only",
            &[("authorization", admin_auth.as_str())],
            b"",
        )
        .expect("admin call");
    assert_eq!(flagged.status, 200, "{}", flagged.text());
    for (seed, len) in [(60u64, 10_000usize), (61, 2 * 1024 * 1024)] {
        let body = random_body(seed, len);
        let sha1 = sha1_hex(&body);
        let resp = api.put(&sha1, "1", &body);
        status(
            &resp,
            503,
            &format!("{len}-byte upload with no writable pair"),
        );
        assert_eq!(gw.admin_file(&sha1), None);
    }
    for disk in 0..2 {
        assert!(gw.content_files(disk).is_empty(), "disk{disk}");
        assert!(gw.temp_files(disk).is_empty(), "disk{disk}");
    }
}
