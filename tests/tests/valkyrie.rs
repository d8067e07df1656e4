//! Valkyrie inside `gateway serve`, end to end: deletion through quarantine (master, then
//! slave), the scrubber's repairs, junk and orphans, reads that restore a quarantined
//! copy, UNMOVE of a failed disk (and its resumption after `kill -9`), `gateway fsck` and
//! `gateway admin scrub status`.
//!
//! Every wait is a bounded poll; delays are seconds (the flags' unit), so each test takes
//! a few seconds. Bodies are chosen by the first bit of their sha1 where it matters which
//! disk is the master (`random_body_read_first_from`).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use e2e::remote::content_names;
use e2e::{
    ConfigFile, Gateway, assert_same_body, create_bucket, gateway_bin, get_bytes, poll_until,
    put_bytes, random_body, random_body_read_first_from, s3_error, sha1_hex,
};

// ---------------------------------------------------------------------------------------
// A small JSON reader for the admin API's nested answers (the harness only reads flat ones).

#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    /// The number as written.
    Num(String),
    Str(String),
    Arr(Vec<Json>),
    Obj(BTreeMap<String, Json>),
}

impl Json {
    fn parse(text: &str) -> Result<Json, String> {
        let bytes = text.as_bytes();
        let mut at = 0;
        let v = Self::value(bytes, &mut at, 0)?;
        Self::ws(bytes, &mut at);
        if at != bytes.len() {
            return Err(format!("trailing text at {at}: {text}"));
        }
        Ok(v)
    }

    fn ws(b: &[u8], at: &mut usize) {
        while *at < b.len() && b[*at].is_ascii_whitespace() {
            *at += 1;
        }
    }

    fn value(b: &[u8], at: &mut usize, depth: usize) -> Result<Json, String> {
        if depth > 32 {
            return Err("nested too deep".into());
        }
        Self::ws(b, at);
        match b.get(*at) {
            None => Err("unexpected end".into()),
            Some(b'{') => {
                *at += 1;
                let mut map = BTreeMap::new();
                Self::ws(b, at);
                if b.get(*at) == Some(&b'}') {
                    *at += 1;
                    return Ok(Json::Obj(map));
                }
                loop {
                    Self::ws(b, at);
                    let Json::Str(key) = Self::value(b, at, depth + 1)? else {
                        return Err(format!("object key expected at {at}"));
                    };
                    Self::ws(b, at);
                    if b.get(*at) != Some(&b':') {
                        return Err(format!("':' expected at {at}"));
                    }
                    *at += 1;
                    let v = Self::value(b, at, depth + 1)?;
                    map.insert(key, v);
                    Self::ws(b, at);
                    match b.get(*at) {
                        Some(b',') => *at += 1,
                        Some(b'}') => {
                            *at += 1;
                            return Ok(Json::Obj(map));
                        }
                        _ => return Err(format!("',' or '}}' expected at {at}")),
                    }
                }
            }
            Some(b'[') => {
                *at += 1;
                let mut items = Vec::new();
                Self::ws(b, at);
                if b.get(*at) == Some(&b']') {
                    *at += 1;
                    return Ok(Json::Arr(items));
                }
                loop {
                    items.push(Self::value(b, at, depth + 1)?);
                    Self::ws(b, at);
                    match b.get(*at) {
                        Some(b',') => *at += 1,
                        Some(b']') => {
                            *at += 1;
                            return Ok(Json::Arr(items));
                        }
                        _ => return Err(format!("',' or ']' expected at {at}")),
                    }
                }
            }
            Some(b'"') => {
                *at += 1;
                let mut s = Vec::new();
                loop {
                    match b.get(*at) {
                        None => return Err("unterminated string".into()),
                        Some(b'"') => {
                            *at += 1;
                            return String::from_utf8(s)
                                .map(Json::Str)
                                .map_err(|e| e.to_string());
                        }
                        Some(b'\\') => {
                            let esc = *b.get(*at + 1).ok_or("unterminated escape")?;
                            *at += 2;
                            match esc {
                                b'n' => s.push(b'\n'),
                                b't' => s.push(b'\t'),
                                b'r' => s.push(b'\r'),
                                b'u' => {
                                    let hex = b.get(*at..*at + 4).ok_or("short \\u escape")?;
                                    let code = u32::from_str_radix(
                                        std::str::from_utf8(hex).map_err(|e| e.to_string())?,
                                        16,
                                    )
                                    .map_err(|e| e.to_string())?;
                                    *at += 4;
                                    let ch = char::from_u32(code).unwrap_or('\u{fffd}');
                                    s.extend_from_slice(ch.to_string().as_bytes());
                                }
                                other => s.push(other),
                            }
                        }
                        Some(&c) => {
                            s.push(c);
                            *at += 1;
                        }
                    }
                }
            }
            Some(_) => {
                let start = *at;
                while *at < b.len() && !b",}] \t\r\n".contains(&b[*at]) {
                    *at += 1;
                }
                let word = std::str::from_utf8(&b[start..*at]).map_err(|e| e.to_string())?;
                match word {
                    "null" => Ok(Json::Null),
                    "true" => Ok(Json::Bool(true)),
                    "false" => Ok(Json::Bool(false)),
                    w if !w.is_empty() && w.parse::<f64>().is_ok() => Ok(Json::Num(w.into())),
                    w => Err(format!("unexpected {w:?} at {start}")),
                }
            }
        }
    }

    fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(m) => m.get(key),
            _ => None,
        }
    }

    #[track_caller]
    fn u64(&self, key: &str) -> u64 {
        match self.get(key) {
            Some(Json::Num(n)) => n
                .parse()
                .unwrap_or_else(|_| panic!("{key} is not a u64: {n}")),
            other => panic!("{key} is not a number: {other:?} in {self:?}"),
        }
    }

    #[track_caller]
    fn bool(&self, key: &str) -> bool {
        match self.get(key) {
            Some(Json::Bool(b)) => *b,
            other => panic!("{key} is not a bool: {other:?} in {self:?}"),
        }
    }

    #[track_caller]
    fn str(&self, key: &str) -> &str {
        match self.get(key) {
            Some(Json::Str(s)) => s,
            other => panic!("{key} is not a string: {other:?} in {self:?}"),
        }
    }

    #[track_caller]
    fn arr(&self, key: &str) -> &[Json] {
        match self.get(key) {
            Some(Json::Arr(a)) => a,
            other => panic!("{key} is not an array: {other:?} in {self:?}"),
        }
    }

    /// The strings of an array field.
    #[track_caller]
    fn strings(&self, key: &str) -> Vec<String> {
        self.arr(key)
            .iter()
            .map(|v| match v {
                Json::Str(s) => s.clone(),
                other => panic!("{key} holds a non-string {other:?}"),
            })
            .collect()
    }
}

#[test]
fn the_json_reader_reads_what_the_admin_api_writes() {
    let v = Json::parse(
        r#" {"drains":[{"pair":0,"last_sha1":null,"finished":true,"x":-1.5e3,"s":"a\"b\\c\u00e9"}],"e":[],"o":{}} "#,
    )
    .unwrap();
    let d = &v.arr("drains")[0];
    assert_eq!(d.u64("pair"), 0);
    assert!(d.bool("finished"));
    assert_eq!(d.get("last_sha1"), Some(&Json::Null));
    assert_eq!(d.str("s"), "a\"b\\cé");
    assert!(v.arr("e").is_empty());
    assert!(Json::parse("{\"a\":1").is_err());
    assert!(Json::parse("{\"a\":1} x").is_err());
    assert!(Json::parse("nope").is_err());
}

// ---------------------------------------------------------------------------------------
// Helpers.

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// The canonical data dir: disk refs are `local:<canonical data dir>/...`.
fn data_dir(gw: &Gateway) -> PathBuf {
    gw.data_dir().canonicalize().expect("canonical data dir")
}

fn disk_ref(path: &Path) -> String {
    format!("local:{}", path.display())
}

/// `<root>/<aa>/<bb>/<sha1>` of any disk root.
fn content_at(root: &Path, sha1: &str) -> PathBuf {
    root.join(&sha1[0..2]).join(&sha1[2..4]).join(sha1)
}

/// Every name in the content file's folder that starts with the sha1 (content name and
/// quarantined copies), sorted.
fn names_of(root: &Path, sha1: &str) -> Vec<String> {
    let dir = root.join(&sha1[0..2]).join(&sha1[2..4]);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(sha1))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The quarantined copies `<sha1>.deleted.<ts>` of a content on a disk, as (ts, path).
fn quarantined(root: &Path, sha1: &str) -> Vec<(u64, PathBuf)> {
    let prefix = format!("{sha1}.deleted.");
    let dir = root.join(&sha1[0..2]).join(&sha1[2..4]);
    names_of(root, sha1)
        .into_iter()
        .filter_map(|n| {
            let ts = n.strip_prefix(&prefix)?.parse().ok()?;
            Some((ts, dir.join(n)))
        })
        .collect()
}

/// Whether a file holds exactly these bytes (false if it is missing).
fn holds(path: &Path, body: &[u8]) -> bool {
    std::fs::read(path).is_ok_and(|b| b == body)
}

/// Puts a file (and its folders) in place with this mtime in the past, atomically: it is
/// written and dated beside the `<aa>/<bb>` folders (where no walk looks at plain files),
/// then renamed in, so a scrubber never sees it half-written.
fn write_aged(path: &Path, bytes: &[u8], age_secs: u64) {
    let shard = path.parent().expect("a shard folder");
    std::fs::create_dir_all(shard).expect("mkdir");
    let name = path.file_name().expect("a name").to_string_lossy();
    let staged = shard
        .parent()
        .expect("an <aa> folder")
        .join(format!(".e2e-staged-{name}"));
    std::fs::write(&staged, bytes).unwrap_or_else(|e| panic!("write {}: {e}", staged.display()));
    let when = SystemTime::now() - Duration::from_secs(age_secs);
    std::fs::File::options()
        .write(true)
        .open(&staged)
        .and_then(|f| f.set_modified(when))
        .unwrap_or_else(|e| panic!("set mtime of {}: {e}", staged.display()));
    std::fs::rename(&staged, path).unwrap_or_else(|e| panic!("rename to {}: {e}", path.display()));
}

/// Flips a few bytes of a file in place (same size, so only a hash can tell).
fn corrupt_in_place(path: &Path) {
    let mut data = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let len = data.len();
    for at in [0, len / 3, len / 2, len - 1] {
        data[at] ^= 0x5a;
    }
    std::fs::write(path, &data).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// An admin API call: status and parsed JSON body (`Null` for an empty body).
fn admin(gw: &Gateway, method: &str, path: &str, body: &str) -> (u16, Json) {
    let token = format!("Bearer {}", gw.admin_token());
    let resp = gw
        .raw(
            method,
            path,
            &[
                ("authorization", token.as_str()),
                ("content-type", "application/json"),
            ],
            body.as_bytes(),
        )
        .unwrap_or_else(|e| panic!("{method} {path}: {e}\n{}", gw.log_tail(50)));
    let text = resp.text();
    let json = if text.trim().is_empty() {
        Json::Null
    } else {
        Json::parse(&text).unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {text}"))
    };
    (resp.status, json)
}

#[track_caller]
fn admin_ok(gw: &Gateway, method: &str, path: &str, body: &str) -> Json {
    let (status, json) = admin(gw, method, path, body);
    assert_eq!(status, 200, "{method} {path}: {json:?}");
    json
}

/// `/_admin/scrub`: the workers' counters, keyed by (pair, index).
fn scrub_metrics(gw: &Gateway) -> BTreeMap<(u64, u64), Json> {
    admin_ok(gw, "GET", "/_admin/scrub", "")
        .arr("workers")
        .iter()
        .map(|w| {
            let metrics = w.get("metrics").cloned().expect("metrics of a worker");
            ((w.u64("pair"), w.u64("index")), metrics)
        })
        .collect()
}

/// The sum of one counter over the workers of a pair.
fn pair_counter(gw: &Gateway, pair: u64, counter: &str) -> u64 {
    scrub_metrics(gw)
        .iter()
        .filter(|((p, _), _)| *p == pair)
        .map(|(_, m)| m.u64(counter))
        .sum()
}

/// The `deleting` entries of a pair, through the catalog API the remote workers use.
fn deleting_of_pair(gw: &Gateway, pair: u64) -> Vec<String> {
    admin_ok(gw, "GET", &format!("/_catalog/deleting?pair={pair}"), "")
        .arr("entries")
        .iter()
        .map(|e| e.str("sha1").to_string())
        .collect()
}

/// The flags of a pair, from `/_admin/pairs`.
fn pair_flags(gw: &Gateway, pair: u64) -> Vec<String> {
    let pairs = admin_ok(gw, "GET", "/_admin/pairs", "");
    let p = pairs
        .arr("pairs")
        .iter()
        .find(|p| p.u64("id") == pair)
        .unwrap_or_else(|| panic!("no pair {pair} in {pairs:?}"));
    p.strings("flags")
}

/// The UNMOVE drain of a pair, from `/_admin/unmove`.
fn drain_of(gw: &Gateway, pair: u64) -> Option<Json> {
    admin_ok(gw, "GET", "/_admin/unmove", "")
        .arr("drains")
        .iter()
        .find(|d| d.u64("pair") == pair)
        .cloned()
}

/// Adds a pair of two fresh local disks inside the data dir; returns its id and roots.
fn add_pair(gw: &Gateway, name: &str) -> (u64, [PathBuf; 2]) {
    let data = data_dir(gw);
    let roots = [
        data.join(format!("{name}-a")),
        data.join(format!("{name}-b")),
    ];
    let body = format!(
        r#"{{"disks":["{}","{}"]}}"#,
        disk_ref(&roots[0]),
        disk_ref(&roots[1])
    );
    let pair = admin_ok(gw, "POST", "/_admin/pairs", &body);
    assert_eq!(
        pair.strings("disks"),
        vec![disk_ref(&roots[0]), disk_ref(&roots[1])]
    );
    (pair.u64("id"), roots)
}

/// What a `gateway` CLI run printed.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs the `gateway` binary to its end, killed if it takes more than a minute.
fn run_gateway(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut child = Command::new(gateway_bin())
        .args(args)
        .envs(env.iter().copied())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run gateway {args:?}: {e}"));
    let read_all = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = read_all(Box::new(child.stdout.take().expect("piped stdout")));
    let stderr = read_all(Box::new(child.stderr.take().expect("piped stderr")));
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        match child.try_wait().expect("wait for gateway") {
            Some(status) => break status,
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("gateway {args:?} did not end within a minute");
            }
        }
    };
    Run {
        code: status.code(),
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}

/// `gateway admin --endpoint <gw> ARGS` with the admin token in the environment.
fn admin_cli(gw: &Gateway, args: &[&str]) -> Run {
    let endpoint = gw.endpoint();
    let mut all = vec!["admin", "--endpoint", endpoint.as_str()];
    all.extend_from_slice(args);
    run_gateway(&all, &[("GATEWAY_ADMIN_TOKEN", gw.admin_token())])
}

/// `gateway fsck --data DIR ARGS` (the gateway must be stopped).
fn fsck(data: &Path, args: &[&str]) -> Run {
    let data = data.to_str().expect("utf-8 data dir");
    let mut all = vec!["fsck", "--data", data];
    all.extend_from_slice(args);
    run_gateway(&all, &[])
}

#[track_caller]
fn assert_fsck_clean(data: &Path, args: &[&str]) {
    let run = fsck(data, args);
    assert_eq!(run.code, Some(0), "fsck should be clean:\n{run}");
    assert!(run.stdout.contains("fsck: clean"), "{run}");
}

/// Polls (bounded) and panics with the gateway's log when the condition never held.
#[track_caller]
fn wait_for(gw: &Gateway, what: &str, limit_secs: u64, cond: impl FnMut() -> bool) {
    if !poll_until(Duration::from_secs(limit_secs), cond) {
        panic!(
            "timed out after {limit_secs} s waiting for: {what}\n{}",
            gw.log_tail(80)
        );
    }
}

/// A deletion pass every second: `deletion_interval_secs` has no flag, only a config key.
fn fast_deletion_config() -> ConfigFile {
    ConfigFile::new("[valkyrie]\ndeletion_interval_secs = 1\n")
}

// ---------------------------------------------------------------------------------------
// 1. Deletion through quarantine.

#[tokio::test]
async fn deleted_content_is_quarantined_then_gone_from_both_disks() {
    let conf = fast_deletion_config();
    let gw = Gateway::start_with(
        &[
            "--config",
            conf.arg(),
            "--quarantine-secs",
            "3",
            // Whole seconds and a pass a second: a delay of 3 s leaves the master at least
            // one pass before the slave is due (a slave that removes the entry first
            // leaves the master's copy to the orphan grace period).
            "--slave-delay-secs",
            "3",
            "--scrub-interval-secs",
            "1",
        ],
        &[],
    );
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(101, 10_000);
    let sha1 = sha1_hex(&body);
    put_bytes(&s3, "bkt", "doomed", &body).await;
    for disk in 0..2 {
        assert!(holds(&gw.content_path(disk, &sha1), &body), "disk{disk}");
    }

    let deleted_at = now_secs();
    s3.delete_object()
        .bucket("bkt")
        .key("doomed")
        .send()
        .await
        .expect("DeleteObject");
    let f = gw.admin_file(&sha1).expect("a deleting entry");
    assert_eq!(f.state, "deleting", "{f:?}");

    // Each disk first renames its copy to <sha1>.deleted.<ts> (seen at least once, with
    // the content's bytes), then the scrubber deletes it after the quarantine.
    let mut seen_quarantined = [false, false];
    wait_for(&gw, "no trace of the content on either disk", 30, || {
        for (disk, seen) in seen_quarantined.iter_mut().enumerate() {
            let root = gw.disk_dir(disk);
            let q = quarantined(&root, &sha1);
            if !gw.content_path(disk, &sha1).exists() && q.len() == 1 && holds(&q[0].1, &body) {
                let ts = q[0].0;
                assert!(
                    ts + 1 >= deleted_at && ts <= now_secs() + 1,
                    "quarantine stamp {ts}, deleted at {deleted_at}"
                );
                *seen = true;
            }
        }
        (0..2).all(|d| names_of(&gw.disk_dir(d), &sha1).is_empty())
    });
    assert_eq!(
        seen_quarantined,
        [true, true],
        "each copy must go through quarantine before it is deleted"
    );
    // The slave removed the entry: nothing is left in the metadata either.
    assert_eq!(gw.admin_file(&sha1), None);
    assert!(deleting_of_pair(&gw, 0).is_empty());
    let (status, code) = s3_error(s3.get_object().bucket("bkt").key("doomed").send().await);
    assert_eq!((status, code.as_str()), (404, "NoSuchKey"));
    let m = scrub_metrics(&gw);
    let total = |c: &str| m.values().map(|w| w.u64(c)).sum::<u64>();
    assert_eq!(total("quarantined"), 2, "{m:?}");
    assert_eq!(total("deleted"), 2, "{m:?}");
    assert_eq!(total("deleting_removed"), 1, "{m:?}");
}

// ---------------------------------------------------------------------------------------
// 2. Re-uploads racing a deletion.

#[tokio::test]
async fn content_reuploaded_before_the_master_acts_survives() {
    // No deletion pass after the one at start: the entry waits until the restart.
    let conf = ConfigFile::new("[valkyrie]\ndeletion_interval_secs = 3600\n");
    let mut gw = Gateway::start_with(
        &[
            "--config",
            conf.arg(),
            "--slave-delay-secs",
            "3600",
            "--quarantine-secs",
            "1",
        ],
        &[],
    );
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(201, 20_000);
    let sha1 = sha1_hex(&body);
    put_bytes(&s3, "bkt", "first", &body).await;
    s3.delete_object()
        .bucket("bkt")
        .key("first")
        .send()
        .await
        .expect("DeleteObject");
    assert_eq!(gw.admin_file(&sha1).expect("entry").state, "deleting");
    assert_eq!(deleting_of_pair(&gw, 0), vec![sha1.clone()]);
    for disk in 0..2 {
        assert!(
            holds(&gw.content_path(disk, &sha1), &body),
            "disk{disk}: nothing acted yet"
        );
    }

    // The same bytes under a new key while the entry waits.
    put_bytes(&s3, "bkt", "second", &body).await;
    let f = gw.admin_file(&sha1).expect("record");
    assert_eq!(
        (f.state.as_str(), f.refs, f.pair),
        ("live", Some(1), Some(0)),
        "{f:?}"
    );
    assert_eq!(deleting_of_pair(&gw, 0), vec![sha1.clone()], "stale entry");

    // A restart runs a deletion pass at once: the master finds the content live on its
    // pair and drops the entry, keeping both copies.
    gw.restart();
    let s3 = gw.client();
    wait_for(&gw, "the stale deleting entry dropped", 20, || {
        deleting_of_pair(&gw, 0).is_empty()
    });
    for disk in 0..2 {
        assert!(holds(&gw.content_path(disk, &sha1), &body), "disk{disk}");
        assert!(
            quarantined(&gw.disk_dir(disk), &sha1).is_empty(),
            "disk{disk}"
        );
    }
    assert_same_body(&get_bytes(&s3, "bkt", "second").await, &body, "second");
    let (status, _) = s3_error(s3.get_object().bucket("bkt").key("first").send().await);
    assert_eq!(status, 404);
    let f = gw.admin_file(&sha1).expect("record");
    assert_eq!((f.state.as_str(), f.refs), ("live", Some(1)), "{f:?}");

    gw.kill9();
    assert_fsck_clean(gw.data_dir(), &[]);
}

#[tokio::test]
async fn content_reuploaded_after_the_master_quarantined_it_survives() {
    let conf = fast_deletion_config();
    let mut gw = Gateway::start_with(
        &[
            "--config",
            conf.arg(),
            "--slave-delay-secs",
            "3600",
            "--quarantine-secs",
            "2",
            "--scrub-interval-secs",
            "1",
        ],
        &[],
    );
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    // Disk 0 is the master of this content.
    let (_, body) = random_body_read_first_from(0, 301, 30_000);
    let sha1 = sha1_hex(&body);
    let (master, slave) = (gw.disk_dir(0), gw.disk_dir(1));
    put_bytes(&s3, "bkt", "first", &body).await;
    s3.delete_object()
        .bucket("bkt")
        .key("first")
        .send()
        .await
        .expect("DeleteObject");

    wait_for(&gw, "the master's copy quarantined", 20, || {
        !content_at(&master, &sha1).exists() && quarantined(&master, &sha1).len() == 1
    });
    assert!(
        holds(&content_at(&slave, &sha1), &body),
        "the slave waits for its delay"
    );
    assert_eq!(gw.admin_file(&sha1).expect("entry").state, "deleting");

    put_bytes(&s3, "bkt", "second", &body).await;
    let f = gw.admin_file(&sha1).expect("record");
    assert_eq!((f.state.as_str(), f.refs), ("live", Some(1)), "{f:?}");

    // The master's next pass drops the entry; its quarantined copy expires and goes.
    wait_for(
        &gw,
        "entry dropped, both copies whole, quarantine gone",
        30,
        || {
            deleting_of_pair(&gw, 0).is_empty()
                && [&master, &slave]
                    .iter()
                    .all(|root| holds(&content_at(root, &sha1), &body))
                && quarantined(&master, &sha1).is_empty()
        },
    );
    assert_same_body(&get_bytes(&s3, "bkt", "second").await, &body, "second");
    // Still there a scrub pass later.
    let passes = pair_counter(&gw, 0, "passes_done");
    wait_for(&gw, "two more scrub passes", 20, || {
        pair_counter(&gw, 0, "passes_done") >= passes + 4
    });
    for root in [&master, &slave] {
        assert!(holds(&content_at(root, &sha1), &body), "{}", root.display());
    }
    assert_eq!(gw.admin_file(&sha1).expect("record").state, "live");

    gw.kill9();
    assert_fsck_clean(gw.data_dir(), &[]);
}

// ---------------------------------------------------------------------------------------
// 3, 4. Scrub repairs.

#[tokio::test]
async fn the_scrub_repairs_a_corrupted_copy_from_the_other_disk() {
    let gw = Gateway::start_with(&["--scrub-interval-secs", "1"], &[]);
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let a = random_body(401, 64 * 1024);
    let b = random_body(402, 300_000);
    put_bytes(&s3, "bkt", "a", &a).await;
    put_bytes(&s3, "bkt", "b", &b).await;
    let (sa, sb) = (sha1_hex(&a), sha1_hex(&b));
    // One corrupt copy on each disk, with the gateway running.
    corrupt_in_place(&gw.content_path(0, &sa));
    corrupt_in_place(&gw.content_path(1, &sb));

    wait_for(&gw, "both corrupt copies repaired", 30, || {
        holds(&gw.content_path(0, &sa), &a) && holds(&gw.content_path(1, &sb), &b)
    });
    for disk in 0..2 {
        assert!(holds(&gw.content_path(disk, &sa), &a), "a on disk{disk}");
        assert!(holds(&gw.content_path(disk, &sb), &b), "b on disk{disk}");
        assert!(gw.temp_files(disk).is_empty(), "temps left on disk{disk}");
    }
    let m = scrub_metrics(&gw);
    assert!(m[&(0, 0)].u64("repaired") >= 1, "{m:?}");
    assert!(m[&(0, 1)].u64("repaired") >= 1, "{m:?}");
    assert_same_body(&get_bytes(&s3, "bkt", "a").await, &a, "a");
    assert_same_body(&get_bytes(&s3, "bkt", "b").await, &b, "b");
}

#[tokio::test]
async fn the_scrub_recreates_a_copy_deleted_by_hand() {
    let gw = Gateway::start_with(&["--scrub-interval-secs", "1"], &[]);
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let a = random_body(501, 5_000);
    let b = random_body(502, 700_000);
    put_bytes(&s3, "bkt", "a", &a).await;
    put_bytes(&s3, "bkt", "b", &b).await;
    let (sa, sb) = (sha1_hex(&a), sha1_hex(&b));
    std::fs::remove_file(gw.content_path(1, &sa)).expect("remove a's copy on disk1");
    std::fs::remove_file(gw.content_path(0, &sb)).expect("remove b's copy on disk0");

    wait_for(&gw, "both lost copies re-created", 30, || {
        holds(&gw.content_path(1, &sa), &a) && holds(&gw.content_path(0, &sb), &b)
    });
    for disk in 0..2 {
        assert!(holds(&gw.content_path(disk, &sa), &a), "a on disk{disk}");
        assert!(holds(&gw.content_path(disk, &sb), &b), "b on disk{disk}");
    }
    assert!(pair_counter(&gw, 0, "repaired") >= 2);
    assert_same_body(&get_bytes(&s3, "bkt", "b").await, &b, "b");
}

// ---------------------------------------------------------------------------------------
// 5. Junk.

#[tokio::test]
async fn junk_copies_on_another_pair_are_verified_and_removed() {
    let gw = Gateway::start_with(&["--scrub-interval-secs", "1"], &[]);
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let (pair, roots) = add_pair(&gw, "pair1");
    assert_eq!(pair, 1);
    // Locked: the uploads land on pair 0.
    let locked = admin_ok(&gw, "POST", "/_admin/pairs/1/lock", "");
    assert_eq!(locked.strings("flags"), vec!["LOCKED"]);
    let good = random_body(601, 8_000);
    let rotten = random_body(602, 9_000);
    put_bytes(&s3, "bkt", "good", &good).await;
    put_bytes(&s3, "bkt", "rotten", &rotten).await;
    let (sg, sr) = (sha1_hex(&good), sha1_hex(&rotten));
    for sha1 in [&sg, &sr] {
        assert_eq!(gw.admin_file(sha1).expect("record").pair, Some(0));
    }

    // The loser of a loader race: a valid copy of pair 0's content on both disks of pair 1;
    // and a copy that does not even hash to its name. Both older than the grace period:
    // fresh junk is left alone (it may be UNMOVE's copy before its record switch).
    let mut rotten_bytes = rotten.clone();
    rotten_bytes[17] ^= 0xff;
    let past_grace = 2 * 86_400;
    let fresh = random_body(603, 7_000);
    let sf = sha1_hex(&fresh);
    put_bytes(&s3, "bkt", "fresh", &fresh).await;
    for root in &roots {
        write_aged(&content_at(root, &sg), &good, past_grace);
        write_aged(&content_at(root, &sr), &rotten_bytes, past_grace);
        write_aged(&content_at(root, &sf), &fresh, 0);
    }

    // Both kinds are removed for good (verified junk is not kept in quarantine; corrupt
    // junk is removed as well, and counted as an error).
    wait_for(&gw, "junk removed from pair 1", 30, || {
        roots
            .iter()
            .all(|r| names_of(r, &sg).is_empty() && names_of(r, &sr).is_empty())
    });
    assert_eq!(pair_counter(&gw, 1, "junk_removed"), 4);
    assert_eq!(
        pair_counter(&gw, 1, "errors"),
        2,
        "{:?}",
        scrub_metrics(&gw)
    );
    assert_eq!(pair_counter(&gw, 1, "quarantined"), 0);
    for root in &roots {
        assert_eq!(
            names_of(root, &sf).len(),
            1,
            "fresh junk kept within the grace period"
        );
    }
    // Pair 0's copies and the objects are untouched.
    for disk in 0..2 {
        assert!(holds(&gw.content_path(disk, &sg), &good));
        assert!(holds(&gw.content_path(disk, &sr), &rotten));
    }
    assert_same_body(&get_bytes(&s3, "bkt", "good").await, &good, "good");
    assert_same_body(&get_bytes(&s3, "bkt", "rotten").await, &rotten, "rotten");
    for sha1 in [&sg, &sr] {
        assert_eq!(gw.admin_file(sha1).expect("record").pair, Some(0));
    }
}

// ---------------------------------------------------------------------------------------
// 6. Orphans.

#[tokio::test]
async fn an_orphan_older_than_the_grace_period_is_quarantined() {
    let gw = Gateway::start_with(&["--grace-secs", "300", "--scrub-interval-secs", "1"], &[]);
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let live = random_body(701, 4_000);
    put_bytes(&s3, "bkt", "live", &live).await;
    // A crash between the rename and the commit: files on both disks, no record.
    let orphan = random_body(702, 6_000);
    let so = sha1_hex(&orphan);
    for disk in 0..2 {
        write_aged(&gw.content_path(disk, &so), &orphan, 3600);
    }
    assert_eq!(gw.admin_file(&so), None);

    wait_for(&gw, "the orphan quarantined on both disks", 30, || {
        (0..2).all(|d| {
            let q = quarantined(&gw.disk_dir(d), &so);
            !gw.content_path(d, &so).exists() && q.len() == 1 && holds(&q[0].1, &orphan)
        })
    });
    // Quarantine is not deletion (7 days by default): the copies wait, whole.
    let passes = pair_counter(&gw, 0, "passes_done");
    wait_for(&gw, "two more scrub passes", 20, || {
        pair_counter(&gw, 0, "passes_done") >= passes + 4
    });
    for disk in 0..2 {
        let q = quarantined(&gw.disk_dir(disk), &so);
        assert_eq!(q.len(), 1, "disk{disk}");
        assert!(holds(&q[0].1, &orphan));
        assert!(holds(&gw.content_path(disk, &sha1_hex(&live)), &live));
    }
    assert_eq!(pair_counter(&gw, 0, "quarantined"), 2);
    assert_same_body(&get_bytes(&s3, "bkt", "live").await, &live, "live");
}

// ---------------------------------------------------------------------------------------
// 7. The master crashes (or cannot act): the slave still deletes.

#[tokio::test]
async fn a_crash_right_after_the_delete_still_ends_with_both_copies_deleted() {
    // First run: no deletion pass after the one at start, so the crash comes before
    // either disk acted on the entry.
    let conf = ConfigFile::new("[valkyrie]\ndeletion_interval_secs = 3600\n");
    let mut gw = Gateway::start_with(
        &[
            "--config",
            conf.arg(),
            // Both disks run a deletion pass at start: the master first, the slave
            // only once its delay has passed (see the first test).
            "--slave-delay-secs",
            "3",
            "--quarantine-secs",
            "1",
            "--scrub-interval-secs",
            "1",
        ],
        &[],
    );
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let body = random_body(801, 12_000);
    let sha1 = sha1_hex(&body);
    put_bytes(&s3, "bkt", "k", &body).await;
    s3.delete_object()
        .bucket("bkt")
        .key("k")
        .send()
        .await
        .expect("DeleteObject");
    gw.kill9();
    for disk in 0..2 {
        assert!(
            holds(&gw.content_path(disk, &sha1), &body),
            "disk{disk} acted before the crash"
        );
    }

    conf.rewrite("[valkyrie]\ndeletion_interval_secs = 1\n");
    gw.restart();
    let f = gw.admin_file(&sha1).expect("the entry survived the crash");
    assert_eq!(f.state, "deleting", "{f:?}");
    wait_for(&gw, "both copies deleted and the entry removed", 30, || {
        (0..2).all(|d| names_of(&gw.disk_dir(d), &sha1).is_empty())
            && gw.admin_file(&sha1).is_none()
    });
}

#[tokio::test]
async fn with_the_master_unable_to_act_the_slave_still_deletes() {
    let conf = fast_deletion_config();
    let gw = Gateway::start_with(
        &[
            "--config",
            conf.arg(),
            // Long enough for the master to try (and fail) a few times first.
            "--slave-delay-secs",
            "3",
            "--grace-secs",
            "300",
            "--scrub-interval-secs",
            "1",
        ],
        &[],
    );
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    // Disk 0 is the master.
    let (_, body) = random_body_read_first_from(0, 901, 7_000);
    let sha1 = sha1_hex(&body);
    let (master, slave) = (gw.disk_dir(0), gw.disk_dir(1));
    put_bytes(&s3, "bkt", "k", &body).await;

    // The master cannot quarantine: every name its rename could use for the next 40 s is
    // taken by a directory (rename(2) of a file onto a directory fails), whoever runs
    // the test (root ignores a read-only folder).
    let shard = master.join(&sha1[0..2]).join(&sha1[2..4]);
    let from = now_secs() - 2;
    let until = from + 40;
    for ts in from..=until {
        std::fs::create_dir(shard.join(format!("{sha1}.deleted.{ts}"))).expect("blocker");
    }
    s3.delete_object()
        .bucket("bkt")
        .key("k")
        .send()
        .await
        .expect("DeleteObject");

    // The slave quarantines its copy after its delay and removes the entry.
    wait_for(
        &gw,
        "the slave quarantined and removed the entry",
        30,
        || {
            !content_at(&slave, &sha1).exists()
                && quarantined(&slave, &sha1).len() == 1
                && gw.admin_file(&sha1).is_none()
        },
    );
    assert!(
        now_secs() < until,
        "the blockers expired before the slave acted"
    );
    assert!(
        holds(&content_at(&master, &sha1), &body),
        "the master must not have acted"
    );
    assert!(
        scrub_metrics(&gw)[&(0, 0)].u64("errors") >= 1,
        "the master tried and failed"
    );

    // The master recovers: its copy is now an orphan (no record, no entry), which its
    // scrubber quarantines once past the grace period (aged here past it).
    for ts in from..=until {
        std::fs::remove_dir(shard.join(format!("{sha1}.deleted.{ts}"))).expect("unblock");
    }
    write_aged(&content_at(&master, &sha1), &body, 3600);
    wait_for(&gw, "the master's orphan copy quarantined", 30, || {
        !content_at(&master, &sha1).exists() && quarantined(&master, &sha1).len() == 1
    });
    for root in [&master, &slave] {
        let q = quarantined(root, &sha1);
        assert_eq!(q.len(), 1, "{}", root.display());
        assert!(holds(&q[0].1, &body));
    }
    assert_eq!(gw.admin_file(&sha1), None);
}

// ---------------------------------------------------------------------------------------
// 8, 9. UNMOVE.

fn unmove_body(i: usize) -> Vec<u8> {
    random_body(10_000 + i as u64, 1024 + (i * 131) % 3072)
}

/// Adds pair 1, locks it, uploads `n` objects (all on pair 0), unlocks pair 1.
async fn setup_unmove(gw: &Gateway, n: usize) -> [PathBuf; 2] {
    create_bucket(&gw.client(), "bkt").await;
    let (pair, roots) = add_pair(gw, "pair1");
    assert_eq!(pair, 1);
    admin_ok(gw, "POST", "/_admin/pairs/1/lock", "");
    let started = Instant::now();
    const TASKS: usize = 8;
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..TASKS {
        let s3 = gw.client();
        tasks.spawn(async move {
            for i in (t..n).step_by(TASKS) {
                put_bytes(&s3, "bkt", &format!("obj-{i:04}"), &unmove_body(i)).await;
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("upload task");
    }
    println!("{n} uploads took {:?}", started.elapsed());
    assert_eq!(content_names(&gw.disk_dir(0)).len(), n);
    assert_eq!(content_names(&gw.disk_dir(1)).len(), n);
    for root in &roots {
        assert!(content_names(root).is_empty(), "pair 1 was locked");
    }
    let unlocked = admin_ok(gw, "POST", "/_admin/pairs/1/unlock", "");
    assert!(unlocked.strings("flags").is_empty(), "{unlocked:?}");
    roots
}

/// Every object readable with its bytes, and its record on pair 1.
async fn assert_all_moved_to_pair_1(gw: &Gateway, n: usize, roots: &[PathBuf; 2]) {
    let started = Instant::now();
    const TASKS: usize = 8;
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..TASKS {
        let s3 = gw.client();
        tasks.spawn(async move {
            for i in (t..n).step_by(TASKS) {
                let key = format!("obj-{i:04}");
                assert_same_body(&get_bytes(&s3, "bkt", &key).await, &unmove_body(i), &key);
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("read task");
    }
    let mut on_pair_0 = Vec::new();
    for i in 0..n {
        let sha1 = sha1_hex(&unmove_body(i));
        let f = gw.admin_file(&sha1).expect("record");
        assert_eq!(f.state, "live", "{f:?}");
        if f.pair != Some(1) {
            on_pair_0.push((i, f));
        }
    }
    assert!(
        on_pair_0.is_empty(),
        "{} records not on pair 1: {:?}",
        on_pair_0.len(),
        &on_pair_0[..on_pair_0.len().min(5)]
    );
    let mut want: Vec<String> = (0..n).map(|i| sha1_hex(&unmove_body(i))).collect();
    want.sort();
    for root in roots {
        assert_eq!(content_names(root), want, "{}", root.display());
    }
    println!("checking {n} objects took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmove_of_a_failed_disk_relocates_a_thousand_files() {
    const N: usize = 1000;
    let mut gw = Gateway::start();
    let roots = setup_unmove(&gw, N).await;
    let total_bytes: u64 = (0..N).map(|i| unmove_body(i).len() as u64).sum();

    let data = data_dir(&gw);
    let unknown = admin_cli(&gw, &["disk", "fail", "local:/no/such/disk"]);
    assert_eq!(unknown.code, Some(1), "{unknown}");
    assert!(unknown.stderr.contains("no pair has the disk"), "{unknown}");
    let failed = disk_ref(&data.join("disk0"));
    let run = admin_cli(&gw, &["disk", "fail", &failed]);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.starts_with("UNMOVE started\n"), "{run}");
    assert!(
        run.stdout
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("PAIR")),
        "{run}"
    );
    let flags = pair_flags(&gw, 0);
    assert!(flags.contains(&"READ_ONLY".to_string()), "{flags:?}");

    let started = Instant::now();
    wait_for(&gw, "UNMOVE finished", 120, || {
        drain_of(&gw, 0).is_some_and(|d| d.bool("finished"))
    });
    println!("UNMOVE of {N} files took {:?}", started.elapsed());
    let d = drain_of(&gw, 0).expect("drain");
    assert_eq!(d.u64("files_total"), N as u64, "{d:?}");
    assert_eq!(d.u64("files_done"), N as u64, "{d:?}");
    assert_eq!(d.u64("files_relocated"), N as u64, "{d:?}");
    for c in ["files_failed", "files_conflict", "files_skipped"] {
        assert_eq!(d.u64(c), 0, "{c}: {d:?}");
    }
    assert_eq!(d.u64("bytes_total"), total_bytes, "{d:?}");
    assert_eq!(d.u64("bytes_done"), total_bytes, "{d:?}");

    let status = admin_cli(&gw, &["disk", "status"]);
    assert_eq!(status.code, Some(0), "{status}");
    let row = status
        .stdout
        .lines()
        .find(|l| l.starts_with("0 "))
        .unwrap_or_else(|| panic!("no row for pair 0:\n{status}"));
    assert!(row.contains(&format!("{N} / {N}")), "{row}");
    assert!(row.contains("done"), "{row}");

    // Done without failures: no longer DRAINING, still READ_ONLY for good.
    wait_for(&gw, "DRAINING cleared", 20, || {
        pair_flags(&gw, 0) == vec!["READ_ONLY".to_string()]
    });
    assert_all_moved_to_pair_1(&gw, N, &roots).await;

    // New content goes to the only writable pair.
    let fresh = random_body(1, 3000);
    put_bytes(&gw.client(), "bkt", "after", &fresh).await;
    assert_eq!(
        gw.admin_file(&sha1_hex(&fresh)).expect("record").pair,
        Some(1)
    );

    gw.kill9();
    assert_fsck_clean(gw.data_dir(), &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmove_resumes_after_a_kill9() {
    const N: usize = 1000;
    let mut gw = Gateway::start();
    let roots = setup_unmove(&gw, N).await;
    let data = data_dir(&gw);
    let survivor = data.join("disk1");

    let body = format!(r#"{{"disk":"{}"}}"#, disk_ref(&data.join("disk0")));
    admin_ok(&gw, "POST", "/_admin/disks/fail", &body);
    // Caught mid-way: past the first saved progress (every 32 files), not finished.
    let deadline = Instant::now() + Duration::from_secs(60);
    let done_at_kill = loop {
        let d = drain_of(&gw, 0).expect("a drain of pair 0");
        assert!(
            !d.bool("finished"),
            "UNMOVE finished before it could be interrupted: {d:?}"
        );
        if d.u64("files_done") >= 40 {
            gw.kill9();
            break d.u64("files_done");
        }
        assert!(Instant::now() < deadline, "UNMOVE does not progress: {d:?}");
        std::thread::sleep(Duration::from_millis(5));
    };
    let saved = std::fs::read_to_string(survivor.join("unmove.json")).expect("progress file");
    let saved = Json::parse(&saved).expect("progress JSON");
    assert!(!saved.bool("finished"), "{saved:?}");
    assert_eq!(saved.u64("pair"), 0);
    assert_eq!(saved.u64("files_total"), N as u64);
    // Saved every 32 files: 40 done means the first save is on disk.
    let saved_done = saved.u64("files_done");
    assert!(
        saved_done >= 32,
        "saved {saved_done}, {done_at_kill} done at the kill"
    );
    assert_eq!(saved.u64("files_relocated"), saved_done, "{saved:?}");
    let last = saved.str("last_sha1").to_string();

    gw.restart();
    // Still draining at start: the drain resumes from the progress file.
    let flags = pair_flags(&gw, 0);
    assert!(
        flags.contains(&"DRAINING".to_string()) && flags.contains(&"READ_ONLY".to_string()),
        "{flags:?}"
    );
    wait_for(&gw, "the resumed UNMOVE finished", 120, || {
        drain_of(&gw, 0).is_some_and(|d| d.bool("finished"))
    });
    let d = drain_of(&gw, 0).expect("drain");
    assert_eq!(
        d.u64("started_secs"),
        saved.u64("started_secs"),
        "resumed, not restarted: {d:?}"
    );
    assert_eq!(
        (d.u64("files_total"), d.u64("files_done")),
        (N as u64, N as u64),
        "{d:?}"
    );
    // Files relocated after the last save are walked again and skipped (their record
    // already names pair 1); nothing is relocated twice, nothing fails.
    let (relocated, skipped) = (d.u64("files_relocated"), d.u64("files_skipped"));
    assert_eq!(relocated + skipped, N as u64, "{d:?}");
    assert!(skipped <= 32, "more than one save interval redone: {d:?}");
    assert!(
        skipped < done_at_kill,
        "started over instead of resuming: {d:?}"
    );
    assert_eq!(
        (d.u64("files_failed"), d.u64("files_conflict")),
        (0, 0),
        "{d:?}"
    );
    assert!(d.str("last_sha1") > last.as_str(), "{d:?}");

    wait_for(&gw, "DRAINING cleared", 20, || {
        pair_flags(&gw, 0) == vec!["READ_ONLY".to_string()]
    });
    assert_all_moved_to_pair_1(&gw, N, &roots).await;
    gw.kill9();
    assert_fsck_clean(gw.data_dir(), &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill9_before_the_first_progress_save_resumes_from_the_survivor() {
    const N: usize = 200;
    let mut gw = Gateway::start();
    let roots = setup_unmove(&gw, N).await;
    let data = data_dir(&gw);
    let (failed, survivor) = (data.join("disk0"), data.join("disk1"));

    let body = format!(r#"{{"disk":"{}"}}"#, disk_ref(&failed));
    admin_ok(&gw, "POST", "/_admin/disks/fail", &body);
    gw.kill9();
    // UNMOVE saves its first progress only after counting the survivor's files (minutes
    // on a big disk): a crash then leaves the pair DRAINING and no progress file. Made
    // certain here by removing a progress file this fast drain may already have saved.
    for name in ["unmove.json", "unmove.json.tmp"] {
        let _ = std::fs::remove_file(survivor.join(name));
    }
    // And the failed disk is really gone: replaced by an empty one.
    std::fs::remove_dir_all(&failed).expect("remove the failed disk");
    std::fs::create_dir(&failed).expect("an empty disk in its place");

    gw.restart();
    let flags = pair_flags(&gw, 0);
    assert!(flags.contains(&"DRAINING".to_string()), "{flags:?}");
    wait_for(&gw, "the resumed UNMOVE finished", 120, || {
        drain_of(&gw, 0).is_some_and(|d| d.bool("finished"))
    });
    let d = drain_of(&gw, 0).expect("drain");
    assert_eq!(
        (d.u64("files_total"), d.u64("files_done")),
        (N as u64, N as u64),
        "the drain must read the surviving disk: {d:?}"
    );
    assert_eq!(
        d.u64("files_relocated") + d.u64("files_skipped"),
        N as u64,
        "{d:?}"
    );
    assert_eq!(
        (d.u64("files_failed"), d.u64("files_conflict")),
        (0, 0),
        "{d:?}"
    );
    assert!(survivor.join("unmove.json").exists());
    assert!(!failed.join("unmove.json").exists());
    wait_for(&gw, "DRAINING cleared", 20, || {
        pair_flags(&gw, 0) == vec!["READ_ONLY".to_string()]
    });
    assert_all_moved_to_pair_1(&gw, N, &roots).await;
    gw.kill9();
    assert_fsck_clean(gw.data_dir(), &[]);
}

// ---------------------------------------------------------------------------------------
// 10. fsck.

#[tokio::test]
async fn fsck_is_clean_after_normal_use_and_names_what_is_wrong() {
    let mut gw = Gateway::start();
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let shared = random_body(1001, 5_000);
    let single = random_body(1002, 70_000);
    let gone = random_body(1003, 2_000);
    put_bytes(&s3, "bkt", "shared-1", &shared).await;
    put_bytes(&s3, "bkt", "shared-2", &shared).await;
    put_bytes(&s3, "bkt", "shared-3", &shared).await;
    put_bytes(&s3, "bkt", "single", &single).await;
    put_bytes(&s3, "bkt", "gone", &gone).await;
    for key in ["shared-3", "gone"] {
        s3.delete_object()
            .bucket("bkt")
            .key(key)
            .send()
            .await
            .expect("DeleteObject");
    }

    // The database is locked while the gateway runs.
    let run = fsck(gw.data_dir(), &[]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stderr.contains("still running"), "{run}");

    gw.kill9();
    let run = fsck(gw.data_dir(), &[]);
    assert_eq!(run.code, Some(0), "{run}");
    // shared-1, shared-2 and single; the content of `gone` waits in `deleting` (one
    // copy on each disk).
    assert!(
        run.stdout
            .contains("fsck: 3 objects, 0 parts, 2 files, 4 copies verified"),
        "{run}"
    );
    assert!(run.stdout.contains(" 2 deleting"), "{run}");
    assert!(run.stdout.ends_with("fsck: clean\n"), "{run}");

    // A corrupt copy: exit 1, naming the content.
    let ss = sha1_hex(&single);
    let path = gw.content_path(1, &ss);
    corrupt_in_place(&path);
    let run = fsck(gw.data_dir(), &[]);
    assert_eq!(run.code, Some(1), "{run}");
    let line = run
        .stdout
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line:\n{run}"));
    assert!(line.contains(&ss) && line.contains("disk1"), "{line}");
    assert!(run.stdout.contains("1 errors"), "{run}");
    assert!(run.stdout.contains("VIOLATIONS FOUND"), "{run}");
    std::fs::write(&path, &single).expect("put the good bytes back");
    assert_fsck_clean(gw.data_dir(), &[]);

    // A live copy found only in quarantine (the deletion loop's rename raced a re-upload):
    // not lost, the next read or scrub restores it; counted, not an error. With the wrong
    // bytes it is a violation.
    let quarantined = path.with_file_name(format!("{ss}.deleted.1700000000"));
    std::fs::rename(&path, &quarantined).expect("quarantine a live copy");
    let run = fsck(gw.data_dir(), &[]);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.contains(" 1 live copies in quarantine"), "{run}");
    corrupt_in_place(&quarantined);
    let run = fsck(gw.data_dir(), &[]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stdout.contains(&ss), "{run}");
    std::fs::remove_file(&quarantined).expect("drop the quarantined copy");
    std::fs::write(&path, &single).expect("put the good bytes back");
    assert_fsck_clean(gw.data_dir(), &[]);

    // A content file without a record, two days old: an orphan past the default grace.
    let orphan = random_body(1004, 3_000);
    let so = sha1_hex(&orphan);
    write_aged(&gw.content_path(0, &so), &orphan, 2 * 86_400);
    let run = fsck(gw.data_dir(), &[]);
    assert_eq!(run.code, Some(1), "{run}");
    let line = run
        .stdout
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line:\n{run}"));
    assert!(line.contains(&so) && line.contains("orphan"), "{line}");
    // Within a longer grace it is an upload in flight, not an error.
    let run = fsck(gw.data_dir(), &["--grace-secs", "1000000"]);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.contains("1 young orphans"), "{run}");
    assert!(run.stdout.contains("fsck: clean"), "{run}");
}

// ---------------------------------------------------------------------------------------
// 11. `gateway admin scrub status`.

/// One row of `gateway admin scrub status`.
#[derive(Debug, Clone, PartialEq)]
struct ScrubRow {
    scanned: u64,
    /// Human bytes, e.g. "11.7 KiB".
    verified: String,
    repaired: u64,
    quarantined: u64,
    deleted: u64,
    junk: u64,
    errors: u64,
    passes: u64,
}

/// The rows of `gateway admin scrub status` by disk, checking the columns on the way.
fn scrub_table(gw: &Gateway) -> BTreeMap<String, ScrubRow> {
    let run = admin_cli(gw, &["scrub", "status"]);
    assert_eq!(run.code, Some(0), "{run}");
    let mut lines = run.stdout.lines();
    let header: Vec<&str> = lines.next().expect("a header").split_whitespace().collect();
    assert_eq!(
        header,
        [
            "PAIR",
            "DISK",
            "SCANNED",
            "VERIFIED",
            "REPAIRED",
            "QUARANTINED",
            "DELETED",
            "JUNK",
            "ERRORS",
            "PASSES"
        ],
        "{run}"
    );
    lines
        .map(|l| {
            // VERIFIED is "<n> <unit>": two words.
            let t: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(t.len(), 11, "{l}");
            assert_eq!(t[0], "0", "pair column: {l}");
            let n =
                |i: usize| -> u64 { t[i].parse().unwrap_or_else(|_| panic!("column {i}: {l}")) };
            assert!(t[3].parse::<f64>().is_ok(), "{l}");
            let row = ScrubRow {
                scanned: n(2),
                verified: format!("{} {}", t[3], t[4]),
                repaired: n(5),
                quarantined: n(6),
                deleted: n(7),
                junk: n(8),
                errors: n(9),
                passes: n(10),
            };
            (t[1].to_string(), row)
        })
        .collect()
}

#[tokio::test]
async fn scrub_status_shows_counters_that_move() {
    let gw = Gateway::start_with(&["--scrub-interval-secs", "1"], &[]);
    let data = data_dir(&gw);
    let disks: Vec<String> = (0..2)
        .map(|d| disk_ref(&data.join(format!("disk{d}"))))
        .collect();
    let before = scrub_table(&gw);
    assert_eq!(before.keys().cloned().collect::<Vec<_>>(), disks);
    for row in before.values() {
        // Nothing to scan yet but the empty disks.
        assert_eq!(
            (row.scanned, row.verified.as_str()),
            (0, "0.0 B"),
            "{row:?}"
        );
    }

    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    for i in 0..3 {
        put_bytes(&s3, "bkt", &format!("k{i}"), &random_body(1100 + i, 4_000)).await;
    }
    // Two more passes end after this: the second one started after the uploads.
    let after_put = scrub_table(&gw);
    let mut last = after_put.clone();
    wait_for(&gw, "two more scrub passes on every disk", 30, || {
        last = scrub_table(&gw);
        last.iter()
            .all(|(disk, row)| row.passes >= after_put[disk].passes + 2)
    });
    for (disk, row) in &last {
        assert!(
            row.scanned >= after_put[disk].scanned + 3,
            "{disk}: {row:?}"
        );
        assert!(human_bytes(&row.verified) >= 12_000.0, "{disk}: {row:?}");
        assert_eq!(
            (
                row.repaired,
                row.quarantined,
                row.deleted,
                row.junk,
                row.errors
            ),
            (0, 0, 0, 0, 0),
            "{disk}: {row:?}"
        );
    }
}

/// "11.7 KiB" -> 11980.8.
fn human_bytes(text: &str) -> f64 {
    let (n, unit) = text.split_once(' ').expect("<n> <unit>");
    let n: f64 = n.parse().expect("a number");
    let power = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
        .iter()
        .position(|u| *u == unit)
        .unwrap_or_else(|| panic!("unit of {text}"));
    n * 1024f64.powi(power as i32)
}

// ---------------------------------------------------------------------------------------
// 12. A read restores a quarantined copy.

#[tokio::test]
async fn a_read_restores_content_found_only_in_quarantine() {
    // The scrubber's only pass is at start: the restore below is the read's doing.
    let gw = Gateway::start();
    wait_for(&gw, "the first scrub passes done", 20, || {
        scrub_metrics(&gw)
            .values()
            .all(|m| m.u64("passes_done") >= 1)
    });
    let s3 = gw.client();
    create_bucket(&s3, "bkt").await;
    let small = random_body(1201, 10_000);
    let large = random_body(1202, 2 * 1024 * 1024 + 7);
    put_bytes(&s3, "bkt", "small", &small).await;
    put_bytes(&s3, "bkt", "large", &large).await;

    let now = now_secs();
    for body in [&small, &large] {
        let sha1 = sha1_hex(body);
        for disk in 0..2 {
            let content = gw.content_path(disk, &sha1);
            let q = content.with_file_name(format!("{sha1}.deleted.{now}"));
            std::fs::rename(&content, &q).expect("quarantine by hand");
        }
    }

    for (key, body) in [("small", &small), ("large", &large)] {
        assert_same_body(&get_bytes(&s3, "bkt", key).await, body, key);
        let sha1 = sha1_hex(body);
        for disk in 0..2 {
            assert!(
                holds(&gw.content_path(disk, &sha1), body),
                "{key}: content name back on disk{disk}"
            );
            assert!(
                quarantined(&gw.disk_dir(disk), &sha1).is_empty(),
                "{key}: quarantined copy left on disk{disk}"
            );
        }
    }
    assert!(
        gw.log_tail(2000)
            .contains("restored a quarantined copy for a read"),
        "{}",
        gw.log_tail(50)
    );
}
