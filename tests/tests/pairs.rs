//! Disk pairs: `gateway admin pairs ...` against a running gateway (list, add, lock,
//! unlock, read-only, read-write), how the flags steer new uploads, and pairs from a
//! configuration file.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_s3::Client;
use e2e::{
    Gateway, all_files_under, assert_same_body, content_files_under, create_bucket, gateway_bin,
    get_bytes, put_bytes, random_body, s3_error, sha1_hex,
};

use e2e::aws_sdk_s3;

/// What a CLI run printed and how it ended.
#[derive(Debug)]
struct CliRun {
    success: bool,
    stdout: String,
    stderr: String,
}

/// Runs `gateway admin --endpoint <gw> pairs <args>` with `token` (or none) as
/// GATEWAY_ADMIN_TOKEN; bounded.
fn cli(gw: &Gateway, token: Option<&str>, args: &[&str]) -> CliRun {
    let mut cmd = Command::new(gateway_bin());
    cmd.arg("admin")
        .arg("--endpoint")
        .arg(gw.endpoint())
        .arg("pairs")
        .args(args)
        .env_remove("GATEWAY_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(t) = token {
        cmd.env("GATEWAY_ADMIN_TOKEN", t);
    }
    let mut child = cmd.spawn().expect("spawn gateway admin");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("gateway admin pairs {args:?} did not finish within 60 s");
            }
        }
    }
    let out = child.wait_with_output().expect("collect output");
    CliRun {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs the CLI with the gateway's admin token and asserts it succeeded.
#[track_caller]
fn cli_ok(gw: &Gateway, args: &[&str]) -> String {
    let run = cli(gw, Some(gw.admin_token()), args);
    assert!(run.success, "pairs {args:?} failed: {run:?}");
    run.stdout
}

/// Runs the CLI and asserts it failed with `message` on stderr.
#[track_caller]
fn cli_fails(gw: &Gateway, token: Option<&str>, args: &[&str], message: &str) {
    let run = cli(gw, token, args);
    assert!(!run.success, "pairs {args:?} should fail: {run:?}");
    assert!(
        run.stderr.contains(message),
        "pairs {args:?}: stderr lacks {message:?}: {run:?}"
    );
}

/// One pair as the CLI's table shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    id: u32,
    flags: String,
    disks: [String; 2],
    fill: [String; 2],
}

/// Parses the table: a header, then two lines per pair (id, flags, disk, fill; disk, fill).
fn parse_table(text: &str) -> Vec<Row> {
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    assert!(header.starts_with("PAIR"), "no table header: {text}");
    let mut rows = Vec::new();
    while let Some(first) = lines.next() {
        let second = lines
            .next()
            .unwrap_or_else(|| panic!("a pair with one disk line: {text}"));
        let a: Vec<&str> = first.split_whitespace().collect();
        let b: Vec<&str> = second.split_whitespace().collect();
        assert!(a.len() >= 4 && b.len() >= 2, "odd table lines: {text}");
        rows.push(Row {
            id: a[0]
                .parse()
                .unwrap_or_else(|_| panic!("bad id in {first:?}")),
            flags: a[1].to_string(),
            disks: [a[2].to_string(), b[0].to_string()],
            fill: [a[3..].join(" "), b[1..].join(" ")],
        });
    }
    rows
}

fn list(gw: &Gateway) -> Vec<Row> {
    parse_table(&cli_ok(gw, &["list"]))
}

#[track_caller]
fn row(rows: &[Row], id: u32) -> Row {
    rows.iter()
        .find(|r| r.id == id)
        .cloned()
        .unwrap_or_else(|| panic!("no pair {id} in {rows:?}"))
}

fn local(path: &Path) -> String {
    format!("local:{}", path.display())
}

/// Uploads a fresh body under `key` and returns the pair its content landed on.
async fn upload_pair(gw: &Gateway, s3: &Client, key: &str, seed: u64) -> (u64, Vec<u8>) {
    let body = random_body(seed, 2048);
    put_bytes(s3, "bkt", key, &body).await;
    let f = gw
        .admin_file(&sha1_hex(&body))
        .unwrap_or_else(|| panic!("no record for {key}"));
    (f.pair.expect("a live record names its pair"), body)
}

/// Content files on all the given disk folders.
fn files_on(disks: &[PathBuf]) -> Vec<PathBuf> {
    disks.iter().flat_map(|d| content_files_under(d)).collect()
}

fn temps_on(disks: &[PathBuf]) -> Vec<PathBuf> {
    disks
        .iter()
        .flat_map(|d| all_files_under(&d.join("tmp")))
        .collect()
}

#[tokio::test]
async fn pairs_are_listed_added_locked_and_made_read_only_through_the_cli() {
    let gw = Gateway::start();
    let data = gw.data_dir().canonicalize().expect("data dir");
    let extra = tempfile::tempdir().expect("temp dir");
    let (p1a, p1b) = (extra.path().join("p1a"), extra.path().join("p1b"));
    let all_disks = vec![gw.disk_dir(0), gw.disk_dir(1), p1a.clone(), p1b.clone()];

    // The default pair: the data folder's two disks, with how full they are.
    let rows = list(&gw);
    assert_eq!(rows.len(), 1, "{rows:?}");
    let p0 = row(&rows, 0);
    assert_eq!(
        p0.disks,
        [local(&data.join("disk0")), local(&data.join("disk1"))]
    );
    assert_eq!(p0.flags, "-");
    for fill in &p0.fill {
        assert!(fill.contains("% used of"), "a fill figure: {p0:?}");
    }

    // Add a pair of two local folders: it becomes pair 1, folders created.
    let added = parse_table(&cli_ok(&gw, &["add", &local(&p1a), &local(&p1b)]));
    assert_eq!(added.len(), 1, "{added:?}");
    assert_eq!(added[0].id, 1);
    assert_eq!(added[0].disks, [local(&p1a), local(&p1b)]);
    assert!(p1a.is_dir() && p1b.is_dir());
    let rows = list(&gw);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(row(&rows, 1).flags, "-");
    assert!(row(&rows, 1).fill[0].contains("% used of"), "{rows:?}");

    // Locked: new uploads never land on pair 1.
    let locked = parse_table(&cli_ok(&gw, &["lock", "1"]));
    assert_eq!(locked[0].flags, "LOCKED", "{locked:?}");
    let rows = list(&gw);
    assert_eq!(
        (row(&rows, 0).flags.as_str(), row(&rows, 1).flags.as_str()),
        ("-", "LOCKED")
    );
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let mut seed = 100;
    let mut stored = Vec::new();
    for i in 0..30 {
        seed += 1;
        let (pair, body) = upload_pair(&gw, &s3, &format!("locked/{i}"), seed).await;
        assert_eq!(pair, 0, "upload {i} landed on the locked pair");
        stored.push(body);
    }
    assert!(files_on(&[p1a.clone(), p1b.clone()]).is_empty());

    // Unlocked: uploads can land there again (about one in two with equal free space).
    let rows = parse_table(&cli_ok(&gw, &["unlock", "1"]));
    assert_eq!(rows[0].flags, "-", "{rows:?}");
    let mut landed = None;
    for i in 0..200 {
        seed += 1;
        let (pair, body) = upload_pair(&gw, &s3, &format!("unlocked/{i}"), seed).await;
        stored.push(body.clone());
        if pair == 1 {
            landed = Some(body);
            break;
        }
    }
    let body = landed.expect("no upload landed on pair 1 in 200 tries after unlock");
    let sha1 = sha1_hex(&body);
    for d in [&p1a, &p1b] {
        let path = d.join(&sha1[0..2]).join(&sha1[2..4]).join(&sha1);
        assert_same_body(
            &std::fs::read(&path).expect("copy on pair 1"),
            &body,
            "pair 1",
        );
    }

    // Pair 0 read-only and pair 1 locked: no pair takes writes, so a PUT is refused with
    // 503 and stores nothing; reads go on.
    assert_eq!(
        parse_table(&cli_ok(&gw, &["read-only", "0"]))[0].flags,
        "READ_ONLY"
    );
    cli_ok(&gw, &["lock", "1"]);
    let rows = list(&gw);
    assert_eq!(
        (row(&rows, 0).flags.as_str(), row(&rows, 1).flags.as_str()),
        ("READ_ONLY", "LOCKED")
    );
    let files_before = files_on(&all_disks);
    let refused = random_body(9999, 4096);
    let result = s3
        .put_object()
        .bucket("bkt")
        .key("refused")
        .body(refused.clone().into())
        .send()
        .await;
    assert_eq!(s3_error(result), (503, "ServiceUnavailable".to_string()));
    assert_eq!(gw.admin_file(&sha1_hex(&refused)), None);
    let (status, code) = s3_error(s3.head_object().bucket("bkt").key("refused").send().await);
    assert_eq!(status, 404, "{code}");
    assert_eq!(files_on(&all_disks), files_before, "nothing stored");
    assert_eq!(temps_on(&all_disks), Vec::<PathBuf>::new(), "no temp files");
    assert_same_body(
        &get_bytes(&s3, "bkt", "locked/0").await,
        &stored[0],
        "read of a read-only pair",
    );

    // Both flags at once show; read-write brings pair 0 back.
    cli_ok(&gw, &["lock", "0"]);
    assert_eq!(row(&list(&gw), 0).flags, "LOCKED,READ_ONLY");
    cli_ok(&gw, &["unlock", "0"]);
    cli_ok(&gw, &["read-write", "0"]);
    assert_eq!(row(&list(&gw), 0).flags, "-");
    let (pair, _) = upload_pair(&gw, &s3, "after-read-write", 5000).await;
    assert_eq!(pair, 0, "pair 1 is still locked");

    // Mistakes: a wrong or missing token, an unknown pair, a pair of one disk twice, a
    // relative path.
    cli_fails(&gw, Some("not-the-token"), &["list"], "403");
    cli_fails(
        &gw,
        Some("not-the-token"),
        &["lock", "1"],
        "admin token required",
    );
    cli_fails(&gw, None, &["list"], "403");
    cli_fails(&gw, Some(gw.admin_token()), &["lock", "7"], "no pair 7");
    cli_fails(
        &gw,
        Some(gw.admin_token()),
        &["read-only", "7"],
        "no pair 7",
    );
    let same = local(&extra.path().join("same"));
    cli_fails(
        &gw,
        Some(gw.admin_token()),
        &["add", &same, &same],
        "must differ",
    );
    cli_fails(
        &gw,
        Some(gw.admin_token()),
        &["add", "local:relative/a", &local(&extra.path().join("b"))],
        "400",
    );
    // None of them changed anything.
    let rows = list(&gw);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(
        (row(&rows, 0).flags.as_str(), row(&rows, 1).flags.as_str()),
        ("-", "LOCKED")
    );
}

fn write_config(path: &Path, pairs: &[(u32, [&Path; 2])]) {
    let mut text = String::new();
    for (id, [a, b]) in pairs {
        text.push_str(&format!(
            "[[pairs]]\nid = {id}\ndisks = [\"{}\", \"{}\"]\n\n",
            local(a),
            local(b)
        ));
    }
    std::fs::write(path, text).expect("write config");
}

/// Runs `gateway serve` on `gw`'s data folder with `config` and expects it to refuse to
/// start; returns what it printed on stderr.
fn serve_refused(gw: &Gateway, config: &Path) -> String {
    let mut child = Command::new(gateway_bin())
        .arg("serve")
        .arg("--data")
        .arg(gw.data_dir())
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--config")
        .arg(config)
        .env("GATEWAY_ACCESS_KEY", gw.access_key())
        .env("GATEWAY_SECRET_KEY", gw.secret_key())
        .env("GATEWAY_ADMIN_TOKEN", gw.admin_token())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gateway serve");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("output");
                panic!(
                    "gateway serve did not exit within 30 s with a mismatched pair:\n{}\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    let out = child.wait_with_output().expect("output");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        !out.status.success(),
        "started with a mismatched pair: {stdout}\n{stderr}"
    );
    assert!(!stdout.contains("listening on"), "{stdout}");
    stderr
}

#[tokio::test]
async fn pairs_from_a_config_file_and_a_changed_pair_is_refused() {
    let disks = tempfile::tempdir().expect("temp dir");
    let d = |name: &str| disks.path().join(name);
    let cfg = tempfile::tempdir().expect("temp dir");
    let config = cfg.path().join("gateway.toml");
    write_config(
        &config,
        &[(0, [&d("a0"), &d("a1")]), (1, [&d("b0"), &d("b1")])],
    );
    let mut gw = Gateway::start_with(&["--config", config.to_str().expect("utf-8 path")], &[]);

    // Both configured pairs, and no default pair in the data folder.
    let rows = list(&gw);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(row(&rows, 0).disks, [local(&d("a0")), local(&d("a1"))]);
    assert_eq!(row(&rows, 1).disks, [local(&d("b0")), local(&d("b1"))]);
    assert!(!gw.disk_dir(0).exists() && !gw.disk_dir(1).exists());

    // Operator flags are PairDB's: they survive a restart with the same file.
    cli_ok(&gw, &["lock", "1"]);
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let (pair, body) = upload_pair(&gw, &s3, "k", 1).await;
    assert_eq!(pair, 0);
    assert_eq!(files_on(&[d("a0"), d("a1")]), {
        let h = sha1_hex(&body);
        vec![
            d("a0").join(&h[0..2]).join(&h[2..4]).join(&h),
            d("a1").join(&h[0..2]).join(&h[2..4]).join(&h),
        ]
    });
    gw.restart();
    assert_eq!(row(&list(&gw), 1).flags, "LOCKED");

    // Pair 0 re-pointed at another disk: the gateway refuses to start and says why.
    gw.kill9();
    write_config(
        &config,
        &[(0, [&d("c0"), &d("a1")]), (1, [&d("b0"), &d("b1")])],
    );
    let stderr = serve_refused(&gw, &config);
    let want = format!(
        "pair0: PairDB has disks [{}, {}] but the configuration says [{}, {}]",
        local(&d("a0")),
        local(&d("a1")),
        local(&d("c0")),
        local(&d("a1"))
    );
    assert!(stderr.contains(&want), "stderr lacks {want:?}:\n{stderr}");

    // A pair's id reused for other disks, even the same disks swapped, is refused too.
    write_config(
        &config,
        &[(0, [&d("a1"), &d("a0")]), (1, [&d("b0"), &d("b1")])],
    );
    serve_refused(&gw, &config);

    // The original file starts again, with everything in place.
    write_config(
        &config,
        &[(0, [&d("a0"), &d("a1")]), (1, [&d("b0"), &d("b1")])],
    );
    gw.restart();
    let s3 = gw.client();
    assert_same_body(
        &get_bytes(&s3, "bkt", "k").await,
        &body,
        "after the refused starts",
    );
    let rows = list(&gw);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(row(&rows, 1).flags, "LOCKED");
}
