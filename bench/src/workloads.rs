//! The workloads, each against a server the caller started on a fresh data folder.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;
use sha1::Digest as _;

use crate::fsstat::{DirStat, ProcIo, dir_stat};
use crate::load::{self, Outcome};
use crate::procs::{GatewayLaunch, Secrets, Server, spawn_gateway};
use crate::rng::{Rng, Zipf};
use crate::s3::Client;
use crate::scratch::{Scratch, ScratchKind};
use crate::stats::Latency;

pub const BUCKET: &str = "bench";

/// A running gateway with its own fresh folder (removed when dropped, after the process).
pub struct Gw {
    pub server: Server,
    pub data: PathBuf,
    pub s3: Client,
    pub native: Client,
    pub secrets: Secrets,
    // Dropped last: the process is stopped before its folder (or filesystem) goes.
    _dir: Scratch,
}

impl Gw {
    /// A gateway on a fresh temp folder under `root`.
    pub fn start(bin: &Path, root: &Path, tag: &str, rng: &mut Rng) -> Result<Gw, String> {
        let dir = Scratch::new(&ScratchKind::Folder, root, &format!("gw-{tag}"))?;
        Gw::start_in(bin, dir, &[], rng)
    }

    /// A gateway on `dir` (a fresh folder or filesystem), with `args` after
    /// `serve --data DIR --listen ADDR`.
    pub fn start_in(
        bin: &Path,
        dir: Scratch,
        args: &[String],
        rng: &mut Rng,
    ) -> Result<Gw, String> {
        let data = dir.path().join("data");
        let secrets = Secrets::random(rng);
        let mut launch =
            GatewayLaunch::single(bin, &data, &secrets, &dir.path().join("gateway.log"));
        launch.args = args.to_vec();
        let server = spawn_gateway(&launch)?;
        let s3 = Client::new(
            server.addr,
            Some((&secrets.access, &secrets.secret)),
            "us-east-1",
        );
        let native = s3.with_bearer(&secrets.native);
        Ok(Gw {
            server,
            data,
            s3,
            native,
            secrets,
            _dir: dir,
        })
    }

    /// Files on both disks of the pair (content files, temp files, anything).
    pub fn disks(&self) -> Result<DirStat, String> {
        Ok(dir_stat(&self.data.join("disk0"))?.plus(dir_stat(&self.data.join("disk1"))?))
    }

    pub fn meta_bytes(&self) -> u64 {
        std::fs::metadata(self.data.join("meta.redb"))
            .map(|m| m.len())
            .unwrap_or(0)
    }

    /// Blocks meta.redb takes on the disk (its length may include unallocated regions).
    pub fn meta_allocated(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(self.data.join("meta.redb"))
            .map(|m| m.blocks() * 512)
            .unwrap_or(0)
    }

    pub fn io(&self) -> Result<ProcIo, String> {
        ProcIo::read(self.server.pid)
    }

    /// Takes the state of the disks before `f`, and after it.
    pub async fn measure_writes<F, Fut>(&self, f: F) -> Result<(Outcome, WriteCost), String>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Outcome>,
    {
        let (d0, m0, io0) = (self.disks()?, self.meta_bytes(), self.io()?);
        let out = f().await;
        let (d1, m1, io1) = (self.disks()?, self.meta_bytes(), self.io()?);
        Ok((
            out,
            WriteCost {
                disks_before: d0,
                disks_after: d1,
                meta_before: m0,
                meta_after: m1,
                written: io1.written_since(&io0),
            },
        ))
    }
}

/// What a workload left on the disks.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct WriteCost {
    pub disks_before: DirStat,
    pub disks_after: DirStat,
    pub meta_before: u64,
    pub meta_after: u64,
    /// write_bytes - cancelled_write_bytes of the server process meanwhile.
    pub written: i64,
}

impl WriteCost {
    pub fn files_delta(&self) -> i64 {
        self.disks_after.files as i64 - self.disks_before.files as i64
    }
    pub fn bytes_delta(&self) -> i64 {
        self.disks_after.bytes as i64 - self.disks_before.bytes as i64
    }
}

/// `count` distinct pseudo-random bodies of `size` bytes, slices of one buffer.
pub fn bodies(rng: &mut Rng, count: usize, size: usize) -> Arc<Vec<Bytes>> {
    let all = Bytes::from(rng.bytes(count * size));
    Arc::new(
        (0..count)
            .map(|i| all.slice(i * size..(i + 1) * size))
            .collect(),
    )
}

/// PUTs `bodies[i]` as `bucket/prefix/i`.
pub async fn put_all(
    client: &Client,
    bucket: &str,
    prefix: &str,
    bodies: &Arc<Vec<Bytes>>,
    concurrency: usize,
    limit: Duration,
) -> Outcome {
    put_all_rr(
        std::slice::from_ref(client),
        bucket,
        prefix,
        bodies,
        concurrency,
        limit,
    )
    .await
}

/// [`put_all`] with request `i` sent to `clients[i % n]`: the load spread round-robin over
/// the nodes of a group.
pub async fn put_all_rr(
    clients: &[Client],
    bucket: &str,
    prefix: &str,
    bodies: &Arc<Vec<Bytes>>,
    concurrency: usize,
    limit: Duration,
) -> Outcome {
    let (cs, b) = (Arc::new(clients.to_vec()), Arc::clone(bodies));
    let (bucket, prefix) = (bucket.to_string(), prefix.to_string());
    load::run(concurrency, bodies.len(), limit, move |i| {
        let (c, body) = (cs[i % cs.len().max(1)].clone(), b[i].clone());
        let key = format!("{prefix}/{i:07}");
        let bucket = bucket.clone();
        async move { c.put_object(&bucket, &key, body).await }
    })
    .await
}

/// Passes a GET workload makes over its objects: one pass of 64 large objects lasts a
/// fraction of a second, too short for a steady figure.
pub const GET_ROUNDS: usize = 4;

/// GETs every object `prefix/0000000..count` [`GET_ROUNDS`] times, checking each length.
pub async fn get_all(
    client: &Client,
    bucket: &str,
    prefix: &str,
    count: usize,
    size: u64,
    concurrency: usize,
    limit: Duration,
) -> Outcome {
    let c = client.clone();
    let (bucket, prefix) = (bucket.to_string(), prefix.to_string());
    load::run(concurrency, count * GET_ROUNDS, limit, move |i| {
        let c = c.clone();
        let key = format!("{prefix}/{:07}", i % count.max(1));
        let bucket = bucket.clone();
        async move {
            let n = c.get_object(&bucket, &key).await?;
            if n != size {
                return Err(format!("GET {bucket}/{key}: {n} bytes, expected {size}"));
            }
            Ok(n)
        }
    })
    .await
}

/// Retries a small PUT until the server takes it (peers may need a moment after start).
pub async fn warm_up(client: &Client, bucket: &str, create: bool) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = String::new();
    while Instant::now() < deadline {
        let created = if create {
            match client.create_bucket(bucket).await {
                Ok(()) => true,
                Err(e) if e.contains("BucketAlreadyOwnedByYou") || e.contains("409") => true,
                Err(e) => {
                    last = e;
                    false
                }
            }
        } else {
            true
        };
        if created {
            match client
                .put_object(bucket, "warm-up", Bytes::from_static(b"hello"))
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) => last = e,
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(format!("the server does not take a PUT: {last}"))
}

/// CopyObject latency of a small and a large source, interleaved.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CopyResult {
    pub small_size: usize,
    pub large_size: usize,
    pub small: Latency,
    pub large: Latency,
    pub cost: WriteCost,
}

pub async fn copies(
    gw: &Gw,
    small_size: usize,
    large_size: usize,
    reps: usize,
    rng: &mut Rng,
) -> Result<CopyResult, String> {
    let c = &gw.s3;
    c.put_object(BUCKET, "copy-src/small", Bytes::from(rng.bytes(small_size)))
        .await?;
    c.put_object(BUCKET, "copy-src/large", Bytes::from(rng.bytes(large_size)))
        .await?;
    let (mut small, mut large) = (Vec::new(), Vec::new());
    let (d0, m0, io0) = (gw.disks()?, gw.meta_bytes(), gw.io()?);
    for r in 0..reps {
        for (src, lat) in [("small", &mut small), ("large", &mut large)] {
            let t = Instant::now();
            c.copy_object(
                BUCKET,
                &format!("copy-dst/{src}/{r}"),
                BUCKET,
                &format!("copy-src/{src}"),
            )
            .await?;
            lat.push(t.elapsed().as_micros() as u64);
        }
    }
    let (d1, m1, io1) = (gw.disks()?, gw.meta_bytes(), gw.io()?);
    Ok(CopyResult {
        small_size,
        large_size,
        small: Latency::of(&mut small),
        large: Latency::of(&mut large),
        cost: WriteCost {
            disks_before: d0,
            disks_after: d1,
            meta_before: m0,
            meta_after: m1,
            written: io1.written_since(&io0),
        },
    })
}

/// The native API: `inc` then `dec` with the same magics, over `contents` uploaded files.
pub async fn native_inc_dec(
    gw: &Gw,
    contents: usize,
    count: usize,
    concurrency: usize,
    limit: Duration,
    rng: &mut Rng,
) -> Result<(Outcome, Outcome), String> {
    native_inc_dec_rr(
        std::slice::from_ref(&gw.native),
        contents,
        count,
        concurrency,
        limit,
        rng,
    )
    .await
}

/// [`native_inc_dec`] with request `i` sent to `clients[i % n]` (native-token clients of
/// the nodes of a group).
pub async fn native_inc_dec_rr(
    clients: &[Client],
    contents: usize,
    count: usize,
    concurrency: usize,
    limit: Duration,
    rng: &mut Rng,
) -> Result<(Outcome, Outcome), String> {
    if clients.is_empty() {
        return Err("native inc/dec: no client".into());
    }
    let mut shas = Vec::with_capacity(contents);
    for k in 0..contents.max(1) {
        let body = Bytes::from(rng.bytes(4096));
        let sha = hex::encode(sha1::Sha1::digest(&body));
        let magic = rng.magic();
        clients[k % clients.len()]
            .send_ok(
                Method::PUT,
                &format!("/_files/{sha}?magic={magic}"),
                &[],
                body,
                false,
            )
            .await?;
        shas.push(sha);
    }
    let plan: Arc<Vec<(String, u32)>> = Arc::new(
        (0..count)
            .map(|i| (shas[i % shas.len()].clone(), rng.magic()))
            .collect(),
    );
    let cs = Arc::new(clients.to_vec());
    let op = |verb: &'static str| {
        let (cs, plan) = (Arc::clone(&cs), Arc::clone(&plan));
        move |i: usize| {
            let c = cs[i % cs.len()].clone();
            let (sha, magic) = plan[i].clone();
            async move {
                c.send_ok(
                    Method::POST,
                    &format!("/_files/{sha}/{verb}?magic={magic}"),
                    &[],
                    Bytes::new(),
                    false,
                )
                .await?;
                Ok(0)
            }
        }
    };
    let inc = load::run(concurrency, count, limit, op("inc")).await;
    // Only the references that were added are taken back.
    let dec = load::run(concurrency, inc.ops as usize, limit, op("dec")).await;
    Ok((inc, dec))
}

/// A mail-like corpus: attachment sizes log-normal around 64 KiB (2 KiB to `max_size`),
/// each with a duplicate count drawn from a Zipf law (P(k) ~ k^-2, k <= 1000), capped so
/// that one attachment's copies stay under `per_item_cap` bytes.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Corpus {
    pub seed: u64,
    pub sizes: Vec<usize>,
    pub copies: Vec<u32>,
}

impl Corpus {
    pub fn generate(seed: u64, distinct: usize, max_size: usize, per_item_cap: u64) -> Corpus {
        let mut rng = Rng::new(seed);
        let zipf = Zipf::new(1000, 2.0);
        let mut sizes = Vec::with_capacity(distinct);
        let mut copies = Vec::with_capacity(distinct);
        for _ in 0..distinct {
            let ln = (64.0f64 * 1024.0).ln() + 2.0 * rng.normal();
            let size = (ln.exp() as usize).clamp(2048, max_size.max(2048));
            let k = zipf
                .sample(&mut rng)
                .min((per_item_cap / size as u64).max(1) as u32);
            sizes.push(size);
            copies.push(k);
        }
        Corpus {
            seed,
            sizes,
            copies,
        }
    }

    pub fn distinct_bytes(&self) -> u64 {
        self.sizes.iter().map(|&s| s as u64).sum()
    }

    pub fn references(&self) -> u64 {
        self.copies.iter().map(|&c| c as u64).sum()
    }

    pub fn logical_bytes(&self) -> u64 {
        self.sizes
            .iter()
            .zip(&self.copies)
            .map(|(&s, &c)| s as u64 * c as u64)
            .sum()
    }

    pub fn max_copies(&self) -> u32 {
        self.copies.iter().copied().max().unwrap_or(0)
    }
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct CorpusResult {
    pub upload: Outcome,
    pub disks: DirStat,
    pub meta_bytes: u64,
}

/// Uploads every reference of the corpus (in a shuffled order) under its own key.
pub async fn upload_corpus(
    client: &Client,
    corpus: &Corpus,
    concurrency: usize,
    limit: Duration,
) -> Outcome {
    let mut rng = Rng::new(corpus.seed ^ 0xc0ffee);
    let bodies: Arc<Vec<Bytes>> = Arc::new(
        corpus
            .sizes
            .iter()
            .map(|&s| Bytes::from(rng.bytes(s)))
            .collect(),
    );
    let mut refs: Vec<usize> = corpus
        .copies
        .iter()
        .enumerate()
        .flat_map(|(i, &c)| std::iter::repeat_n(i, c as usize))
        .collect();
    for i in (1..refs.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        refs.swap(i, j);
    }
    let refs = Arc::new(refs);
    let c = client.clone();
    let n = refs.len();
    load::run(concurrency, n, limit, move |r| {
        let c = c.clone();
        let body = bodies[refs[r]].clone();
        async move {
            c.put_object(BUCKET, &format!("mail/{r:07}/attachment"), body)
                .await
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corpus_is_reproducible_and_long_tailed() {
        let a = Corpus::generate(9, 2000, 40 << 20, 256 << 20);
        let b = Corpus::generate(9, 2000, 40 << 20, 256 << 20);
        assert_eq!(a.sizes, b.sizes);
        assert_eq!(a.copies, b.copies);
        assert!(a.sizes.iter().all(|&s| (2048..=40 << 20).contains(&s)));
        assert!(a.sizes.iter().any(|&s| s < 16 << 10));
        assert!(a.sizes.iter().any(|&s| s > 4 << 20));
        let once = a.copies.iter().filter(|&&c| c == 1).count();
        assert!(once > 1000, "{once}");
        assert!(a.max_copies() >= 50, "{}", a.max_copies());
        assert!(a.logical_bytes() > a.distinct_bytes());
        assert!(
            a.sizes
                .iter()
                .zip(&a.copies)
                .all(|(&s, &c)| c == 1 || s as u64 * c as u64 <= 256 << 20)
        );
    }

    #[test]
    fn bodies_are_distinct() {
        let b = bodies(&mut Rng::new(1), 8, 1024);
        assert_eq!(b.len(), 8);
        assert!(b.iter().all(|x| x.len() == 1024));
        assert_ne!(b[0], b[1]);
    }
}
