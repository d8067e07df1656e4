//! [`HttpCatalog`]: the catalog of a remote gateway, over its `/_catalog/` HTTP API.
//!
//! The API (every request carries `Authorization: Bearer <token>`; bodies are JSON):
//!
//! | request | answer |
//! |---|---|
//! | `GET /_catalog/files/{sha1}` | 200 `{"refs":N,"pair":P,"do_not_delete":bool}`, 404 when absent |
//! | `POST /_catalog/files/{sha1}/fenced` | the same after a fence through the metadata log: 200 with the record or `null`; any other answer is a failed lookup |
//! | `GET /_catalog/deleting?pair=P&limit=N[&after=SHA1]` | 200 `{"entries":[{"sha1":"..","pair":P,"since":S}]}` |
//! | `DELETE /_catalog/deleting/{sha1}?pair=P` | 204 (also accepted: 200, and 404 for an entry already gone) |
//! | `POST /_catalog/relocate/{sha1}?from=P&to=Q` | 200 `{"relocated":bool}` |
//! | `POST /_catalog/pairs/{id}/read-only` | 200 (or 204) |
//! | `GET /_catalog/pairs` | 200 `{"pairs":[{"id":0,"disks":["local:/..","http://.."],"flags":["LOCKED"],"free_bytes":[a,b],"capacity_bytes":[c,d]}]}` |
//!
//! Every request is bounded by [`HttpCatalogConfig::request_timeout`] (answer and body
//! together) and answers by [`HttpCatalogConfig::body_bytes_max`]. Transport errors,
//! timeouts, 5xx and 429 are retried up to [`HttpCatalogConfig::attempts_max`] times with
//! a doubling backoff; other statuses are final. Retrying `relocate` is safe because the
//! caller treats `false` as "look again" ([`crate::unmove`]): a relocation whose answer
//! was lost shows up as a record already on the new pair.
//!
//! Answers are checked as they are read (style: assert on both sides of a boundary): a
//! `deleting` page must hold only entries of the asked pair, after `after`, in strictly
//! increasing sha1 order and no more than `limit` of them.
//!
//! Only `http://`: the catalog sits on the cluster's private network and this build
//! carries no TLS client.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::rt::TokioExecutor;
use placement::{DiskRef, PairFlags, PairId, PairRecord, Sha1};
use serde::Deserialize;

use super::{Catalog, CatalogError, DeletingEntry, FileState};

/// Bounds of the catalog client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpCatalogConfig {
    /// Bound on one request: connecting, the answer and its whole body.
    pub request_timeout: Duration,
    /// Attempts per call, the first included.
    pub attempts_max: u32,
    /// Wait before the second attempt; doubled before each next one.
    pub backoff_base: Duration,
    /// Bound on an answer's body (a page of 1 000 `deleting` entries is ~80 KB).
    pub body_bytes_max: usize,
}

impl Default for HttpCatalogConfig {
    fn default() -> Self {
        HttpCatalogConfig {
            request_timeout: Duration::from_secs(10),
            attempts_max: 3,
            backoff_base: Duration::from_millis(200),
            body_bytes_max: 8 * 1024 * 1024,
        }
    }
}

/// The connection pool of the catalog client: plain for an `http://` gateway, TLS only for
/// an `https://` one (a request can never leave an `https://` pool in the clear).
#[derive(Clone)]
enum Pool {
    Plain(Client<HttpConnector, Full<Bytes>>),
    Tls(Client<HttpsConnector<HttpConnector>, Full<Bytes>>),
}

impl Pool {
    fn request(&self, req: Request<Full<Bytes>>) -> ResponseFuture {
        match self {
            Pool::Plain(c) => c.request(req),
            Pool::Tls(c) => c.request(req),
        }
    }
}

/// The gateway's catalog over HTTP or HTTPS.
#[derive(Clone)]
pub struct HttpCatalog {
    /// `http[s]://host:port[/prefix]`, without a trailing slash.
    base: String,
    authorization: HeaderValue,
    client: Pool,
    config: HttpCatalogConfig,
}

impl fmt::Debug for HttpCatalog {
    // Never print the token.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpCatalog")
            .field("base", &self.base)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl HttpCatalog {
    /// A client for the gateway at `base_url` (e.g. `http://127.0.0.1:9000`).
    pub fn new(
        base_url: &str,
        token: &str,
        config: HttpCatalogConfig,
    ) -> Result<Self, CatalogError> {
        Self::with_tls(base_url, token, config, None)
    }

    /// A client for the gateway at `base_url`: `http://host:port`, or `https://host:port`
    /// with `tls`, the client configuration that verifies the gateway's certificate
    /// (`--catalog-ca`). An `https://` URL without it, or `tls` with an `http://` URL, is
    /// refused: the catalog token never travels in the clear by mistake.
    pub fn with_tls(
        base_url: &str,
        token: &str,
        config: HttpCatalogConfig,
        tls: Option<rustls::ClientConfig>,
    ) -> Result<Self, CatalogError> {
        let base = base_url.trim_end_matches('/').to_string();
        let uri = Uri::from_str(&base)
            .map_err(|e| CatalogError::Config(format!("catalog URL {base_url:?}: {e}")))?;
        if uri.authority().is_none() {
            return Err(CatalogError::Config(format!(
                "catalog URL {base_url:?}: only http://host[:port] or https://host[:port] is supported"
            )));
        }
        let mut authorization = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| CatalogError::Config("the catalog token is not a valid header".into()))?;
        authorization.set_sensitive(true);
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(config.request_timeout));
        connector.set_nodelay(true);
        let mut builder = Client::builder(TokioExecutor::new());
        builder
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(4);
        let client = match (uri.scheme_str(), tls) {
            (Some("http"), None) => Pool::Plain(builder.build(connector)),
            (Some("https"), Some(tls)) => {
                connector.enforce_http(false);
                let https = HttpsConnectorBuilder::new()
                    .with_tls_config(tls)
                    .https_only()
                    .enable_http1()
                    .wrap_connector(connector);
                Pool::Tls(builder.build(https))
            }
            (Some("https"), None) => {
                return Err(CatalogError::Config(format!(
                    "catalog URL {base_url:?}: an https:// gateway needs the CA its certificate chains to (--catalog-ca)"
                )));
            }
            (Some("http"), Some(_)) => {
                return Err(CatalogError::Config(format!(
                    "catalog URL {base_url:?}: --catalog-ca is for an https:// gateway"
                )));
            }
            _ => {
                return Err(CatalogError::Config(format!(
                    "catalog URL {base_url:?}: only http://host[:port] or https://host[:port] is supported"
                )));
            }
        };
        Ok(HttpCatalog {
            base,
            authorization,
            client,
            config,
        })
    }

    /// One call with retries: the final status and body.
    async fn call(&self, method: Method, path: &str) -> Result<(StatusCode, Bytes), CatalogError> {
        let what = format!("{method} {path}");
        let attempts = self.config.attempts_max.max(1);
        let mut backoff = self.config.backoff_base;
        let mut attempt = 1;
        loop {
            let result = self.once(&method, path, &what).await;
            let retryable = match &result {
                Ok((status, _)) => {
                    status.is_server_error() || *status == StatusCode::TOO_MANY_REQUESTS
                }
                Err(CatalogError::Unreachable(_) | CatalogError::Timeout { .. }) => true,
                Err(_) => false,
            };
            if !retryable || attempt >= attempts {
                return match result {
                    Ok((status, _)) if retryable => Err(CatalogError::Status {
                        status: status.as_u16(),
                        what,
                    }),
                    other => other,
                };
            }
            match &result {
                Ok((status, _)) => {
                    tracing::debug!(%what, %status, attempt, "catalog call, retrying")
                }
                Err(e) => tracing::debug!(%what, error = %e, attempt, "catalog call, retrying"),
            }
            tokio::time::sleep(backoff).await;
            backoff = backoff.saturating_mul(2);
            attempt += 1;
        }
    }

    async fn once(
        &self,
        method: &Method,
        path: &str,
        what: &str,
    ) -> Result<(StatusCode, Bytes), CatalogError> {
        let request = Request::builder()
            .method(method.clone())
            .uri(format!("{}{path}", self.base))
            .header(header::AUTHORIZATION, self.authorization.clone())
            .header(header::ACCEPT, "application/json")
            .body(Full::new(Bytes::new()))
            .map_err(|e| CatalogError::Config(format!("{what}: {e}")))?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| CatalogError::Unreachable(format!("{what}: {}", chain(&e))))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), self.config.body_bytes_max)
                .collect()
                .await
                .map_err(|e| CatalogError::Unreachable(format!("{what}: reading the answer: {e}")))?
                .to_bytes();
            Ok((status, body))
        };
        tokio::time::timeout(self.config.request_timeout, exchange)
            .await
            .map_err(|_| CatalogError::Timeout {
                what: what.to_string(),
                after: self.config.request_timeout,
            })?
    }
}

/// An error with its causes: hyper's "client error (Connect)" alone hides why (a refused
/// connection, a certificate that does not verify).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn status_error(status: StatusCode, what: &str) -> CatalogError {
    CatalogError::Status {
        status: status.as_u16(),
        what: what.to_string(),
    }
}

fn parse<'a, T: Deserialize<'a>>(body: &'a [u8], what: &str) -> Result<T, CatalogError> {
    serde_json::from_slice(body).map_err(|e| CatalogError::BadAnswer {
        what: what.to_string(),
        message: e.to_string(),
    })
}

fn bad(what: &str, message: impl Into<String>) -> CatalogError {
    CatalogError::BadAnswer {
        what: what.to_string(),
        message: message.into(),
    }
}

#[derive(Deserialize)]
struct FileJson {
    refs: u32,
    pair: u32,
    #[serde(default)]
    do_not_delete: bool,
}

#[derive(Deserialize)]
struct DeletingPageJson {
    entries: Vec<DeletingJson>,
}

#[derive(Deserialize)]
struct DeletingJson {
    sha1: String,
    pair: u32,
    since: u64,
}

#[derive(Deserialize)]
struct RelocatedJson {
    relocated: bool,
}

#[derive(Deserialize)]
struct PairsJson {
    pairs: Vec<PairJson>,
}

#[derive(Deserialize)]
struct PairJson {
    id: u32,
    disks: [String; 2],
    #[serde(default)]
    flags: Vec<String>,
    #[serde(default)]
    free_bytes: [u64; 2],
    #[serde(default)]
    capacity_bytes: [u64; 2],
}

/// Flag names of the pairs answer. An unknown name is taken as LOCKED: a flag this build
/// does not know must not make a pair look writable to UNMOVE.
fn flags_from_names(names: &[String], id: u32) -> PairFlags {
    names
        .iter()
        .fold(PairFlags::default(), |flags, name| match name.as_str() {
            "LOCKED" => flags.with(PairFlags::LOCKED),
            "READ_ONLY" => flags.with(PairFlags::READ_ONLY),
            "DRAINING" => flags.with(PairFlags::DRAINING),
            other => {
                tracing::warn!(
                    pair = id,
                    flag = other,
                    "unknown pair flag, taken as LOCKED"
                );
                flags.with(PairFlags::LOCKED)
            }
        })
}

/// Checks a `deleting` page right after reading it.
fn check_page(
    entries: &[DeletingEntry],
    pair: PairId,
    after: Option<Sha1>,
    limit: usize,
    what: &str,
) -> Result<(), CatalogError> {
    if entries.len() > limit {
        return Err(bad(
            what,
            format!("{} entries, asked for {limit}", entries.len()),
        ));
    }
    let mut previous = after;
    for e in entries {
        if e.pair != pair {
            return Err(bad(what, format!("entry {} names {}", e.sha1, e.pair)));
        }
        if previous.is_some_and(|p| e.sha1 <= p) {
            return Err(bad(what, format!("entry {} out of sha1 order", e.sha1)));
        }
        previous = Some(e.sha1);
    }
    Ok(())
}

impl Catalog for HttpCatalog {
    async fn lookup(&self, sha1: Sha1) -> Result<Option<FileState>, CatalogError> {
        let path = format!("/_catalog/files/{sha1}");
        let (status, body) = self.call(Method::GET, &path).await?;
        match status {
            StatusCode::OK => {
                let f: FileJson = parse(&body, &path)?;
                Ok(Some(FileState {
                    refs: f.refs,
                    pair: PairId(f.pair),
                    do_not_delete: f.do_not_delete,
                }))
            }
            StatusCode::NOT_FOUND => Ok(None),
            other => Err(status_error(other, &path)),
        }
    }

    /// `POST /_catalog/files/{sha1}/fenced`: 200 with the record, or with `null` when
    /// there is none. Any other answer fails the lookup: a gateway without fences answers
    /// 404 for the path, which must not read as "no record", so nothing is quarantined
    /// until the gateway knows fences.
    async fn lookup_fenced(&self, sha1: Sha1) -> Result<Option<FileState>, CatalogError> {
        let path = format!("/_catalog/files/{sha1}/fenced");
        let (status, body) = self.call(Method::POST, &path).await?;
        if status != StatusCode::OK {
            return Err(status_error(status, &path));
        }
        let found: Option<FileJson> = parse(&body, &path)?;
        Ok(found.map(|f| FileState {
            refs: f.refs,
            pair: PairId(f.pair),
            do_not_delete: f.do_not_delete,
        }))
    }

    async fn deleting(
        &self,
        pair: PairId,
        after: Option<Sha1>,
        limit: usize,
    ) -> Result<Vec<DeletingEntry>, CatalogError> {
        let mut path = format!("/_catalog/deleting?pair={}&limit={limit}", pair.0);
        if let Some(after) = after {
            path.push_str(&format!("&after={after}"));
        }
        let (status, body) = self.call(Method::GET, &path).await?;
        if status != StatusCode::OK {
            return Err(status_error(status, &path));
        }
        let page: DeletingPageJson = parse(&body, &path)?;
        let entries = page
            .entries
            .into_iter()
            .map(|e| {
                let sha1 = e
                    .sha1
                    .parse::<Sha1>()
                    .map_err(|err| bad(&path, err.to_string()))?;
                Ok(DeletingEntry {
                    sha1,
                    pair: PairId(e.pair),
                    since_secs: e.since,
                })
            })
            .collect::<Result<Vec<_>, CatalogError>>()?;
        check_page(&entries, pair, after, limit, &path)?;
        Ok(entries)
    }

    async fn remove_deleting(&self, sha1: Sha1, pair: PairId) -> Result<(), CatalogError> {
        let path = format!("/_catalog/deleting/{sha1}?pair={}", pair.0);
        let (status, _) = self.call(Method::DELETE, &path).await?;
        match status {
            StatusCode::NO_CONTENT | StatusCode::OK | StatusCode::NOT_FOUND => Ok(()),
            other => Err(status_error(other, &path)),
        }
    }

    async fn relocate(&self, sha1: Sha1, from: PairId, to: PairId) -> Result<bool, CatalogError> {
        let path = format!("/_catalog/relocate/{sha1}?from={}&to={}", from.0, to.0);
        let (status, body) = self.call(Method::POST, &path).await?;
        if status != StatusCode::OK {
            return Err(status_error(status, &path));
        }
        let r: RelocatedJson = parse(&body, &path)?;
        Ok(r.relocated)
    }

    async fn set_read_only(&self, pair: PairId) -> Result<(), CatalogError> {
        let path = format!("/_catalog/pairs/{}/read-only", pair.0);
        let (status, _) = self.call(Method::POST, &path).await?;
        match status {
            StatusCode::OK | StatusCode::NO_CONTENT => Ok(()),
            other => Err(status_error(other, &path)),
        }
    }

    async fn pairs(&self) -> Result<Vec<(PairId, PairRecord)>, CatalogError> {
        let path = "/_catalog/pairs";
        let (status, body) = self.call(Method::GET, path).await?;
        if status != StatusCode::OK {
            return Err(status_error(status, path));
        }
        let answer: PairsJson = parse(&body, path)?;
        answer
            .pairs
            .into_iter()
            .map(|p| {
                let [d0, d1] = &p.disks;
                let disks = [
                    d0.parse::<DiskRef>()
                        .map_err(|e| bad(path, e.to_string()))?,
                    d1.parse::<DiskRef>()
                        .map_err(|e| bad(path, e.to_string()))?,
                ];
                let record = PairRecord {
                    disks,
                    flags: flags_from_names(&p.flags, p.id),
                    free_bytes: p.free_bytes,
                    capacity_bytes: p.capacity_bytes,
                };
                Ok((PairId(p.id), record))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use http::Response;
    use hyper::body::Incoming;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    use tokio::net::TcpListener;

    use super::*;

    /// One canned answer: status, JSON body, delay before answering.
    type Answer = (u16, String, Duration);
    type Handler = dyn Fn(&Method, &str) -> Answer + Send + Sync;

    /// A real HTTP/1.1 server on 127.0.0.1:0 answering with `handler`; it records every
    /// request as `(method, path?query, authorization)`.
    struct Server {
        base: String,
        seen: Arc<Mutex<Vec<(String, String, String)>>>,
    }

    async fn serve(handler: Arc<Handler>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let handler = handler.clone();
                let log = log.clone();
                let service = service_fn(move |req: Request<Incoming>| {
                    let handler = handler.clone();
                    let log = log.clone();
                    async move {
                        let path = req
                            .uri()
                            .path_and_query()
                            .map(|p| p.to_string())
                            .unwrap_or_default();
                        let auth = req
                            .headers()
                            .get(header::AUTHORIZATION)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_string();
                        log.lock()
                            .unwrap()
                            .push((req.method().to_string(), path.clone(), auth));
                        let (status, body, delay) = handler(req.method(), &path);
                        tokio::time::sleep(delay).await;
                        Ok::<_, Infallible>(
                            Response::builder()
                                .status(status)
                                .header(header::CONTENT_TYPE, "application/json")
                                .body(Full::new(Bytes::from(body)))
                                .unwrap(),
                        )
                    }
                });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Server { base, seen }
    }

    fn ok(body: &str) -> Answer {
        (200, body.to_string(), Duration::ZERO)
    }

    fn fast_config() -> HttpCatalogConfig {
        HttpCatalogConfig {
            request_timeout: Duration::from_millis(500),
            attempts_max: 3,
            backoff_base: Duration::from_millis(10),
            body_bytes_max: 64 * 1024,
        }
    }

    const A: &str = "0a0b0c0d0e0f101112131415161718191a1b1c1d";
    const B: &str = "8a0b0c0d0e0f101112131415161718191a1b1c1d";

    #[tokio::test]
    async fn every_call_speaks_the_documented_api() {
        let handler: Arc<Handler> = Arc::new(|method: &Method, path: &str| {
            match (method.as_str(), path) {
                ("GET", p) if p == format!("/_catalog/files/{A}") => {
                    ok(r#"{"refs":2,"pair":7,"do_not_delete":true}"#)
                }
                ("GET", p) if p.starts_with("/_catalog/files/") => {
                    (404, String::new(), Duration::ZERO)
                }
                ("POST", p) if p == format!("/_catalog/files/{A}/fenced") => {
                    ok(r#"{"refs":2,"pair":7,"do_not_delete":true}"#)
                }
                ("POST", p) if p == format!("/_catalog/files/{B}/fenced") => ok("null"),
                ("POST", p) if p.ends_with("/fenced") => (404, String::new(), Duration::ZERO),
                ("GET", "/_catalog/deleting?pair=7&limit=2") => ok(&format!(
                    r#"{{"entries":[{{"sha1":"{A}","pair":7,"since":100}},{{"sha1":"{B}","pair":7,"since":200}}]}}"#
                )),
                ("GET", p) if p == format!("/_catalog/deleting?pair=7&limit=2&after={B}") => {
                    ok(r#"{"entries":[]}"#)
                }
                ("DELETE", p) if p == format!("/_catalog/deleting/{A}?pair=7") => {
                    (204, String::new(), Duration::ZERO)
                }
                ("POST", p) if p == format!("/_catalog/relocate/{A}?from=7&to=8") => {
                    ok(r#"{"relocated":true}"#)
                }
                ("POST", p) if p == format!("/_catalog/relocate/{B}?from=7&to=8") => {
                    ok(r#"{"relocated":false}"#)
                }
                ("POST", "/_catalog/pairs/7/read-only") => ok("{}"),
                ("GET", "/_catalog/pairs") => ok(
                    r#"{"pairs":[{"id":7,"disks":["local:/srv/d0","http://10.0.0.2:8080/d1"],
                        "flags":["LOCKED","DRAINING"],"free_bytes":[1,2],"capacity_bytes":[3,4]}]}"#,
                ),
                _ => (400, String::new(), Duration::ZERO),
            }
        });
        let server = serve(handler).await;
        let catalog =
            HttpCatalog::new(&format!("{}/", server.base), "s3cret", fast_config()).unwrap();
        let a: Sha1 = A.parse().unwrap();
        let b: Sha1 = B.parse().unwrap();

        assert_eq!(
            catalog.lookup(a).await.unwrap(),
            Some(FileState {
                refs: 2,
                pair: PairId(7),
                do_not_delete: true
            })
        );
        assert_eq!(catalog.lookup(b).await.unwrap(), None);
        assert_eq!(
            catalog.lookup_fenced(a).await.unwrap(),
            catalog.lookup(a).await.unwrap()
        );
        assert_eq!(catalog.lookup_fenced(b).await.unwrap(), None);
        // A gateway without fences answers 404 for the path: a failed lookup, never
        // "no record" (which would let a worker quarantine live content).
        let c: Sha1 = "1a0b0c0d0e0f101112131415161718191a1b1c1d".parse().unwrap();
        assert!(catalog.lookup_fenced(c).await.is_err());

        let page = catalog.deleting(PairId(7), None, 2).await.unwrap();
        assert_eq!(
            page,
            vec![
                DeletingEntry {
                    sha1: a,
                    pair: PairId(7),
                    since_secs: 100
                },
                DeletingEntry {
                    sha1: b,
                    pair: PairId(7),
                    since_secs: 200
                }
            ]
        );
        assert!(
            catalog
                .deleting(PairId(7), Some(b), 2)
                .await
                .unwrap()
                .is_empty()
        );
        catalog.remove_deleting(a, PairId(7)).await.unwrap();
        assert!(catalog.relocate(a, PairId(7), PairId(8)).await.unwrap());
        assert!(!catalog.relocate(b, PairId(7), PairId(8)).await.unwrap());
        catalog.set_read_only(PairId(7)).await.unwrap();

        let pairs = catalog.pairs().await.unwrap();
        assert_eq!(pairs.len(), 1);
        let (id, record) = &pairs[0];
        assert_eq!(*id, PairId(7));
        assert_eq!(
            record.disks[0].local_path(),
            Some(std::path::Path::new("/srv/d0"))
        );
        assert_eq!(record.disks[1].as_str(), "http://10.0.0.2:8080/d1");
        assert!(record.flags.contains(PairFlags::LOCKED));
        assert!(record.flags.contains(PairFlags::DRAINING));
        assert!(!record.flags.contains(PairFlags::READ_ONLY));
        assert_eq!(record.free_bytes, [1, 2]);
        assert_eq!(record.capacity_bytes, [3, 4]);

        let seen = server.seen.lock().unwrap();
        assert_eq!(seen.len(), 13);
        assert!(seen.iter().all(|(_, _, auth)| auth == "Bearer s3cret"));
    }

    #[tokio::test]
    async fn server_errors_are_retried_a_bounded_number_of_times() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = calls.clone();
        let handler: Arc<Handler> = Arc::new(move |_: &Method, _: &str| {
            if counter.fetch_add(1, Ordering::SeqCst) == 0 {
                (503, String::new(), Duration::ZERO)
            } else {
                ok(r#"{"refs":1,"pair":0}"#)
            }
        });
        let server = serve(handler).await;
        let catalog = HttpCatalog::new(&server.base, "t", fast_config()).unwrap();
        let a: Sha1 = A.parse().unwrap();
        assert_eq!(catalog.lookup(a).await.unwrap().map(|f| f.refs), Some(1));
        assert_eq!(calls.load(Ordering::SeqCst), 2);

        let always: Arc<Handler> =
            Arc::new(|_: &Method, _: &str| (500, String::new(), Duration::ZERO));
        let server = serve(always).await;
        let catalog = HttpCatalog::new(&server.base, "t", fast_config()).unwrap();
        let err = catalog.lookup(a).await.unwrap_err();
        assert!(
            matches!(err, CatalogError::Status { status: 500, .. }),
            "{err}"
        );
        assert_eq!(server.seen.lock().unwrap().len(), 3);
    }

    #[tokio::test]
    async fn client_errors_are_final_and_bad_answers_refused() {
        let handler: Arc<Handler> = Arc::new(|_: &Method, path: &str| {
            if path.starts_with("/_catalog/deleting") {
                // An entry of another pair: must be refused, not acted upon.
                ok(&format!(
                    r#"{{"entries":[{{"sha1":"{A}","pair":9,"since":1}}]}}"#
                ))
            } else if path.starts_with("/_catalog/files") {
                ok("not json")
            } else {
                (403, String::new(), Duration::ZERO)
            }
        });
        let server = serve(handler).await;
        let catalog = HttpCatalog::new(&server.base, "t", fast_config()).unwrap();
        let a: Sha1 = A.parse().unwrap();
        assert!(matches!(
            catalog.deleting(PairId(7), None, 10).await,
            Err(CatalogError::BadAnswer { .. })
        ));
        assert!(matches!(
            catalog.lookup(a).await,
            Err(CatalogError::BadAnswer { .. })
        ));
        assert!(matches!(
            catalog.set_read_only(PairId(7)).await,
            Err(CatalogError::Status { status: 403, .. })
        ));
        // The 403 was not retried.
        assert_eq!(server.seen.lock().unwrap().len(), 3);
    }

    #[tokio::test]
    async fn a_slow_catalog_times_out() {
        let handler: Arc<Handler> =
            Arc::new(|_: &Method, _: &str| (200, "{}".into(), Duration::from_secs(5)));
        let server = serve(handler).await;
        let config = HttpCatalogConfig {
            request_timeout: Duration::from_millis(100),
            attempts_max: 2,
            ..fast_config()
        };
        let catalog = HttpCatalog::new(&server.base, "t", config).unwrap();
        let started = std::time::Instant::now();
        let err = catalog.pairs().await.unwrap_err();
        assert!(matches!(err, CatalogError::Timeout { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn only_plain_http_urls_are_accepted() {
        assert!(HttpCatalog::new("https://x:1", "t", HttpCatalogConfig::default()).is_err());
        assert!(HttpCatalog::new("127.0.0.1:9000", "t", HttpCatalogConfig::default()).is_err());
        assert!(
            HttpCatalog::new("http://x:1", "bad\ntoken", HttpCatalogConfig::default()).is_err()
        );
        let c = HttpCatalog::new("http://x:1", "s3cret", HttpCatalogConfig::default()).unwrap();
        assert!(!format!("{c:?}").contains("s3cret"));
    }
}
