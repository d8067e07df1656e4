//! The machine's own limits, measured in the same run: the gateway's hashing cost on one
//! core, sequential disk write (with fsync) and read on the data folder's filesystem, and a
//! plain HTTP transfer over loopback with the same client the workloads use.

use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use md5::Digest as _;

use crate::load::{self, Outcome};
use crate::rng::Rng;
use crate::s3::Client;

/// Single-core hash rates in bytes per second.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct HashRates {
    pub sha1: f64,
    pub md5: f64,
    pub crc32: f64,
    /// SHA-1 with collision detection (sha1dc, mitigating), the gateway's content name.
    pub sha1dc: f64,
    /// One pass computing SHA-1 (with collision detection), MD5 and CRC32 of each chunk,
    /// as the gateway's PUT does.
    pub combined: f64,
    /// The same pass with plain SHA-1: what the collision detection costs the pass.
    pub combined_plain: f64,
}

const CHUNK: usize = 1 << 20;
/// Hash input granularity: the size of a body frame, small enough to stay in cache while
/// the three hashes read it in turn (as the gateway's hasher does per frame).
const HASH_CHUNK: usize = 64 << 10;

fn rate(bytes: usize, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64().max(1e-9)
}

/// Best of two passes over a `len`-byte buffer, in 64 KiB chunks, on the calling thread.
pub fn hash_rates(len: usize, rng: &mut Rng) -> HashRates {
    let buf = rng.bytes(len.max(CHUNK));
    let best = |f: &dyn Fn(&[u8]) -> u64| {
        (0..2)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f(&buf));
                rate(buf.len(), t.elapsed())
            })
            .fold(0.0, f64::max)
    };
    let sha1 = best(&|b| {
        let mut h = sha1::Sha1::new();
        for c in b.chunks(HASH_CHUNK) {
            h.update(c);
        }
        h.finalize()[0] as u64
    });
    let md5 = best(&|b| {
        let mut h = md5::Md5::new();
        for c in b.chunks(HASH_CHUNK) {
            h.update(c);
        }
        h.finalize()[0] as u64
    });
    let crc32 = best(&|b| {
        let mut h = crc32fast::Hasher::new();
        for c in b.chunks(HASH_CHUNK) {
            h.update(c);
        }
        h.finalize() as u64
    });
    let sha1dc = best(&|b| {
        let mut h = sha1dc::mitigate::Hasher::new();
        for c in b.chunks(HASH_CHUNK) {
            h.update(c);
        }
        h.finalize().unwrap_or_else(|m| m.digest()).as_bytes()[0] as u64
    });
    let combined = best(&|b| {
        let mut s = sha1dc::mitigate::Hasher::new();
        let (mut m, mut c) = (md5::Md5::new(), crc32fast::Hasher::new());
        for chunk in b.chunks(HASH_CHUNK) {
            s.update(chunk);
            m.update(chunk);
            c.update(chunk);
        }
        let s = s.finalize().unwrap_or_else(|m| m.digest());
        s.as_bytes()[0] as u64 ^ m.finalize()[0] as u64 ^ c.finalize() as u64
    });
    let combined_plain = best(&|b| {
        let (mut s, mut m, mut c) = (sha1::Sha1::new(), md5::Md5::new(), crc32fast::Hasher::new());
        for chunk in b.chunks(HASH_CHUNK) {
            s.update(chunk);
            m.update(chunk);
            c.update(chunk);
        }
        s.finalize()[0] as u64 ^ m.finalize()[0] as u64 ^ c.finalize() as u64
    });
    HashRates {
        sha1,
        md5,
        crc32,
        sha1dc,
        combined,
        combined_plain,
    }
}

/// Sequential disk rates in bytes per second.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct DiskRates {
    /// Write `len` bytes in 1 MiB chunks, then fsync; timed to the end of the fsync.
    pub write_fsync: f64,
    /// `streams` threads at once, each writing 8 MiB files in 1 MiB chunks and fsyncing
    /// each file (the pattern of 4 concurrent 8 MiB PUTs with 2 copies each), `len` bytes in
    /// all.
    pub write_fsync_parallel: f64,
    pub streams: usize,
    /// The same file read back after fsync and POSIX_FADV_DONTNEED (from the device).
    pub read_cold: f64,
    /// Read again from the page cache computing CRC32, one core: what a GET of data that
    /// was just written costs at best.
    pub read_cached_crc32: f64,
}

impl DiskRates {
    /// The best sequential write rate with fsync this filesystem showed.
    pub fn write_best(&self) -> f64 {
        self.write_fsync.max(self.write_fsync_parallel)
    }
}

/// Measures on temp files in `dir` (removed afterwards).
pub fn disk_rates(
    dir: &Path,
    len: usize,
    streams: usize,
    rng: &mut Rng,
) -> Result<DiskRates, String> {
    let path = dir.join("limit-probe.bin");
    let err = |e: std::io::Error| format!("{}: {e}", path.display());
    let pattern = rng.bytes(8 * CHUNK);
    let chunks = len.div_ceil(CHUNK).max(1);
    let total = chunks * CHUNK;
    let t = Instant::now();
    {
        let mut f = std::fs::File::create(&path).map_err(err)?;
        for i in 0..chunks {
            let off = (i % 8) * CHUNK;
            f.write_all(&pattern[off..off + CHUNK]).map_err(err)?;
        }
        f.sync_all().map_err(err)?;
    }
    let write_fsync = rate(total, t.elapsed());
    let drop_cache = || -> Result<(), String> {
        let f = std::fs::File::open(&path).map_err(err)?;
        // SAFETY: advisory call on a valid open descriptor.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            return Err(format!("posix_fadvise: error {rc}"));
        }
        Ok(())
    };
    drop_cache()?;
    let mut buf = vec![0u8; CHUNK];
    let read_all = |with_crc: bool, buf: &mut [u8]| -> Result<(usize, Duration), String> {
        let mut f = std::fs::File::open(&path).map_err(err)?;
        let mut h = crc32fast::Hasher::new();
        let t = Instant::now();
        let mut n = 0;
        for _ in 0..=chunks {
            let k = f.read(buf).map_err(err)?;
            if k == 0 {
                break;
            }
            if with_crc {
                h.update(&buf[..k]);
            }
            n += k;
        }
        std::hint::black_box(h.finalize());
        Ok((n, t.elapsed()))
    };
    let (n, d) = read_all(false, &mut buf)?;
    let read_cold = rate(n, d);
    // Warm the cache, then take the better of two cached passes.
    read_all(false, &mut buf)?;
    let mut read_cached_crc32: f64 = 0.0;
    for _ in 0..2 {
        let (n, d) = read_all(true, &mut buf)?;
        read_cached_crc32 = read_cached_crc32.max(rate(n, d));
    }
    let _ = std::fs::remove_file(&path);
    let write_fsync_parallel = write_parallel(dir, len, streams.max(1), &pattern)?;
    Ok(DiskRates {
        write_fsync,
        write_fsync_parallel,
        streams: streams.max(1),
        read_cold,
        read_cached_crc32,
    })
}

/// `streams` threads writing and fsyncing 8 MiB files, `len` bytes in all.
fn write_parallel(dir: &Path, len: usize, streams: usize, pattern: &[u8]) -> Result<f64, String> {
    const FILE: usize = 8 * CHUNK;
    let per_stream = (len / FILE / streams).max(1);
    let t = Instant::now();
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..streams)
            .map(|k| {
                s.spawn(move || -> Result<(), String> {
                    for j in 0..per_stream {
                        let p = dir.join(format!("limit-probe-{k}-{j}.bin"));
                        let err = |e: std::io::Error| format!("{}: {e}", p.display());
                        let mut f = std::fs::File::create(&p).map_err(err)?;
                        for c in 0..FILE / CHUNK {
                            let off = (c % 8) * CHUNK;
                            f.write_all(&pattern[off..off + CHUNK]).map_err(err)?;
                        }
                        f.sync_all().map_err(err)?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("writer thread panicked".into()))
            })
            .collect()
    });
    let elapsed = t.elapsed();
    for k in 0..streams {
        for j in 0..per_stream {
            let _ = std::fs::remove_file(dir.join(format!("limit-probe-{k}-{j}.bin")));
        }
    }
    for r in results {
        r?;
    }
    Ok(rate(per_stream * streams * FILE, elapsed))
}

/// Loopback HTTP rates: the same hyper client as the workloads against a trivial hyper
/// server in this process (on its own 2-thread runtime) that serves a ready `Bytes` body
/// or discards an uploaded one.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Loopback {
    pub get: Outcome,
    pub put: Outcome,
}

pub async fn loopback(
    object: usize,
    count: usize,
    concurrency: usize,
    limit: Duration,
    rng: &mut Rng,
) -> Result<Loopback, String> {
    let blob = Bytes::from(rng.bytes(object));
    let (addr, stop) = serve_sink(blob.clone())?;
    let client = Client::new(addr, None, "us-east-1");
    let c = client.clone();
    // As many GETs as the gateway's GET workload makes over its objects.
    let get = load::run(
        concurrency,
        count * crate::workloads::GET_ROUNDS,
        limit,
        move |_| {
            let c = c.clone();
            async move {
                let r = c
                    .send_ok(Method::GET, "/blob", &[], Bytes::new(), false)
                    .await?;
                Ok(r.body_len)
            }
        },
    )
    .await;
    let c = client.clone();
    let b = blob.clone();
    let put = load::run(concurrency, count, limit, move |_| {
        let (c, b) = (c.clone(), b.clone());
        async move {
            let n = b.len() as u64;
            c.send_ok(Method::PUT, "/sink", &[], b, false).await?;
            Ok(n)
        }
    })
    .await;
    let _ = stop.send(());
    get.check("loopback GET")?;
    put.check("loopback PUT")?;
    Ok(Loopback { get, put })
}

/// Starts the trivial server; dropping or firing the returned sender stops it.
fn serve_sink(blob: Bytes) -> Result<(SocketAddr, tokio::sync::oneshot::Sender<()>), String> {
    let std_listener =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("loopback bind: {e}"))?;
    std_listener
        .set_nonblocking(true)
        .map_err(|e| e.to_string())?;
    let addr = std_listener.local_addr().map_err(|e| e.to_string())?;
    let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("loopback runtime: {e}"))?;
    std::thread::spawn(move || {
        rt.block_on(async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(std_listener) else {
                return;
            };
            loop {
                let accepted = tokio::select! {
                    _ = &mut rx => break,
                    a = listener.accept() => a,
                };
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let blob = blob.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let blob = blob.clone();
                        async move {
                            let body = if req.method() == Method::GET {
                                blob
                            } else {
                                let mut b = req.into_body();
                                while let Some(Ok(_)) = b.frame().await {}
                                Bytes::new()
                            };
                            Ok::<_, Infallible>(Response::new(Full::new(body)))
                        }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
    });
    Ok((addr, tx))
}

/// The small-file limit of one group size: what the design does for small bodies, without
/// the gateway.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct SmallFiles {
    /// Uploads per pass: the files made durable by one `syncfs`.
    pub group: usize,
    /// Uploads (each body written twice) per second.
    pub uploads_per_sec: f64,
}

/// Writes `count` bodies of `len` bytes as the gateway's write path does for small
/// bodies, on one thread: each body to a temp file in two disk trees under `dir`, then per
/// group of `group` uploads every temp file renamed to its content address in the `aa/bb`
/// fan-out (directories made where missing, remembered) and one `syncfs` for the group
/// (see `placement::disk::durable`). The ceiling a 64 KiB unique PUT is held against:
/// everything a PUT must make durable, and nothing else (no HTTP, hashing or metadata).
pub fn small_files(
    dir: &Path,
    count: usize,
    len: usize,
    group: usize,
    rng: &mut Rng,
) -> Result<SmallFiles, String> {
    let err = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let group = group.max(1);
    let trees = [dir.join("disk-a"), dir.join("disk-b")];
    for tree in &trees {
        let tmp = tree.join("tmp");
        std::fs::create_dir_all(&tmp).map_err(|e| err(&tmp, e))?;
    }
    let names: Vec<String> = (0..count).map(|_| hex::encode(rng.bytes(20))).collect();
    let mut body = rng.bytes(len.max(8));
    let sync_handle = std::fs::File::open(dir).map_err(|e| err(dir, e))?;
    let mut known_dirs = std::collections::HashSet::new();
    let t = Instant::now();
    for (g, chunk) in names.chunks(group).enumerate() {
        // The bodies, as uploads stream them to temp files.
        for (i, _) in chunk.iter().enumerate() {
            body[..8].copy_from_slice(&((g * group + i) as u64).to_le_bytes());
            for tree in &trees {
                let p = tree.join("tmp").join(format!("{i}.tmp"));
                let mut f = std::fs::File::create(&p).map_err(|e| err(&p, e))?;
                f.write_all(&body[..len]).map_err(|e| err(&p, e))?;
            }
        }
        // The pass: directories, names, one syncfs.
        for (i, name) in chunk.iter().enumerate() {
            for tree in &trees {
                let parent = tree.join(&name[..2]).join(&name[2..4]);
                if known_dirs.insert(parent.clone()) {
                    std::fs::create_dir_all(&parent).map_err(|e| err(&parent, e))?;
                }
                let from = tree.join("tmp").join(format!("{i}.tmp"));
                let to = parent.join(name);
                std::fs::rename(&from, &to).map_err(|e| err(&to, e))?;
            }
        }
        // SAFETY: syncfs on a valid open descriptor of a folder on the filesystem.
        if unsafe { libc::syncfs(sync_handle.as_raw_fd()) } != 0 {
            return Err(err(dir, std::io::Error::last_os_error()));
        }
    }
    let elapsed = t.elapsed();
    for tree in &trees {
        let _ = std::fs::remove_dir_all(tree);
    }
    Ok(SmallFiles {
        group,
        uploads_per_sec: count as f64 / elapsed.as_secs_f64().max(1e-9),
    })
}
