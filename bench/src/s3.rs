//! A lean S3 client: hyper 1 (pooled HTTP/1.1 connections) and aws-sigv4 header signing
//! with `UNSIGNED-PAYLOAD`, so the client never hashes a body. Bodies are `Bytes` (shared,
//! never copied) and responses are counted frame by frame, never collected.
//!
//! Plain HTTP by default; [`Client::new_tls`] speaks HTTPS (rustls, aws-lc-rs, HTTP/1.1 by
//! ALPN) trusting only the roots it is given. The two are separate pools of separate types,
//! so the plain path is the same code as before HTTPS existed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// No single request of the harness may take longer than this.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// How much of an error body is kept for the message.
const ERROR_BODY_KEEP: usize = 2048;
/// Bound on a body read whole ([`Client::get_whole`]).
const WHOLE_BODY_MAX: usize = 4 << 20;

/// The connection pool: plain TCP, or TLS over TCP (`https://` only).
#[derive(Clone)]
enum Transport {
    Plain(HyperClient<HttpConnector, Full<Bytes>>),
    Tls(HyperClient<HttpsConnector<HttpConnector>, Full<Bytes>>),
}

#[derive(Clone)]
pub struct Client {
    http: Transport,
    host: String,
    identity: Option<Identity>,
    region: String,
    bearer: Option<String>,
}

/// A finished response: status, body bytes received, and the start of the body when the
/// caller asked to keep it (or the status is an error).
pub struct Reply {
    pub status: StatusCode,
    pub body_len: u64,
    pub head: Vec<u8>,
}

/// `r` if its status is 2xx, else an error naming the request, the status and the start
/// of the body.
fn success(method: &Method, path_and_query: &str, r: Reply) -> Result<Reply, String> {
    if !r.status.is_success() {
        return Err(format!(
            "{method} {path_and_query}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.head).trim()
        ));
    }
    Ok(r)
}

impl Client {
    /// A client for the server at `addr`; `credentials` (access key, secret key) enable SigV4.
    pub fn new(addr: SocketAddr, credentials: Option<(&str, &str)>, region: &str) -> Self {
        let http = Transport::Plain(pool_builder().build(tcp_connector()));
        Client::with_transport(http, addr, credentials, region)
    }

    /// Like [`new`](Self::new), over HTTPS: `tls` says which roots are trusted (the server
    /// is named by its IP address, which its certificate must carry). HTTP/1.1 by ALPN, as
    /// the plain client.
    pub fn new_tls(
        addr: SocketAddr,
        credentials: Option<(&str, &str)>,
        region: &str,
        tls: Arc<rustls::ClientConfig>,
    ) -> Self {
        let mut tcp = tcp_connector();
        // The TLS layer takes the `https` URIs; `https_only` refuses any other.
        tcp.enforce_http(false);
        let https = HttpsConnectorBuilder::new()
            .with_tls_config((*tls).clone())
            .https_only()
            .enable_http1()
            .wrap_connector(tcp);
        let http = Transport::Tls(pool_builder().build(https));
        Client::with_transport(http, addr, credentials, region)
    }

    fn with_transport(
        http: Transport,
        addr: SocketAddr,
        credentials: Option<(&str, &str)>,
        region: &str,
    ) -> Self {
        Client {
            http,
            host: addr.to_string(),
            identity: credentials
                .map(|(ak, sk)| Credentials::new(ak, sk, None, None, "bench").into()),
            region: region.to_string(),
            bearer: None,
        }
    }

    /// The same connection pool, sending `Authorization: Bearer <token>` instead of SigV4
    /// (the gateway's native and admin APIs).
    pub fn with_bearer(&self, token: &str) -> Client {
        Client {
            identity: None,
            bearer: Some(token.to_string()),
            ..self.clone()
        }
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    /// `https` for a client made by [`new_tls`](Self::new_tls), else `http`.
    pub fn scheme(&self) -> &'static str {
        match self.http {
            Transport::Plain(_) => "http",
            Transport::Tls(_) => "https",
        }
    }

    /// The headers of a request as sent: host, `extra`, and SigV4 (or the bearer token).
    pub fn signed_headers(
        &self,
        method: &Method,
        uri: &str,
        extra: &[(&str, &str)],
    ) -> Result<Vec<(String, String)>, String> {
        let mut headers: Vec<(String, String)> = vec![("host".into(), self.host.clone())];
        headers.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        if let Some(token) = &self.bearer {
            headers.push(("authorization".into(), format!("Bearer {token}")));
            return Ok(headers);
        }
        let Some(identity) = &self.identity else {
            return Ok(headers);
        };
        let mut settings = SigningSettings::default();
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        // S3 signs the path as sent: single encoding, no normalization.
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        let params = v4::SigningParams::builder()
            .identity(identity)
            .region(&self.region)
            .name("s3")
            .time(SystemTime::now())
            .settings(settings)
            .build()
            .map_err(|e| format!("signing parameters: {e}"))?
            .into();
        let signable = SignableRequest::new(
            method.as_str(),
            uri,
            headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            SignableBody::UnsignedPayload,
        )
        .map_err(|e| format!("signable request: {e}"))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| format!("signing: {e}"))?
            .into_parts();
        for (k, v) in instructions.headers() {
            headers.push((k.to_string(), v.to_string()));
        }
        Ok(headers)
    }

    /// Sends one request and drains the response. `keep` keeps up to 2 KiB of a 2xx body.
    pub async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        extra_headers: &[(&str, &str)],
        body: Bytes,
        keep: bool,
    ) -> Result<Reply, String> {
        let keep = if keep { ERROR_BODY_KEEP } else { 0 };
        self.send_keeping(method, path_and_query, extra_headers, body, keep)
            .await
    }

    /// [`send`](Self::send), keeping up to `keep` bytes of a 2xx body, within
    /// [`REQUEST_TIMEOUT`].
    async fn send_keeping(
        &self,
        method: Method,
        path_and_query: &str,
        extra_headers: &[(&str, &str)],
        body: Bytes,
        keep: usize,
    ) -> Result<Reply, String> {
        let what = format!("{method} {path_and_query}");
        match tokio::time::timeout(
            REQUEST_TIMEOUT,
            self.send_inner(method, path_and_query, extra_headers, body, keep),
        )
        .await
        {
            Ok(r) => r.map_err(|e| format!("{what}: {e}")),
            Err(_) => Err(format!("{what}: no answer within {REQUEST_TIMEOUT:?}")),
        }
    }

    async fn send_inner(
        &self,
        method: Method,
        path_and_query: &str,
        extra_headers: &[(&str, &str)],
        body: Bytes,
        keep: usize,
    ) -> Result<Reply, String> {
        let uri = format!("{}://{}{}", self.scheme(), self.host, path_and_query);
        let headers = self.signed_headers(&method, &uri, extra_headers)?;
        let mut builder = http::Request::builder().method(method).uri(&uri);
        for (k, v) in &headers {
            builder = builder.header(k.as_str(), v.as_str());
        }
        let req = builder.body(Full::new(body)).map_err(|e| e.to_string())?;
        let resp = match &self.http {
            Transport::Plain(c) => c.request(req).await,
            Transport::Tls(c) => c.request(req).await,
        };
        let resp = resp.map_err(|e| {
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg.push_str(&format!(": {s}"));
                src = s.source();
            }
            msg
        })?;
        let status = resp.status();
        let keep = match status.is_success() {
            true => keep,
            false => keep.max(ERROR_BODY_KEEP),
        };
        let mut body = resp.into_body();
        let mut body_len = 0u64;
        let mut head = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| format!("reading the body: {e}"))?;
            if let Ok(data) = frame.into_data() {
                body_len += data.len() as u64;
                if head.len() < keep {
                    let n = data.len().min(keep - head.len());
                    head.extend_from_slice(&data[..n]);
                }
            }
        }
        Ok(Reply {
            status,
            body_len,
            head,
        })
    }

    /// A GET whose 2xx body is answered whole (a JSON document of the admin API); a body
    /// longer than 4 MiB is an error.
    pub async fn get_whole(&self, path_and_query: &str) -> Result<Vec<u8>, String> {
        let r = self
            .send_keeping(
                Method::GET,
                path_and_query,
                &[],
                Bytes::new(),
                WHOLE_BODY_MAX + 1,
            )
            .await?;
        let r = success(&Method::GET, path_and_query, r)?;
        if r.head.len() > WHOLE_BODY_MAX {
            return Err(format!(
                "GET {path_and_query}: a body over {WHOLE_BODY_MAX} bytes"
            ));
        }
        Ok(r.head)
    }

    /// Like [`send`](Self::send), but any status other than 2xx is an error.
    pub async fn send_ok(
        &self,
        method: Method,
        path_and_query: &str,
        extra_headers: &[(&str, &str)],
        body: Bytes,
        keep: bool,
    ) -> Result<Reply, String> {
        let m = method.clone();
        let r = self
            .send(method, path_and_query, extra_headers, body, keep)
            .await?;
        success(&m, path_and_query, r)
    }

    pub async fn create_bucket(&self, bucket: &str) -> Result<(), String> {
        self.send_ok(Method::PUT, &format!("/{bucket}"), &[], Bytes::new(), false)
            .await
            .map(|_| ())
    }

    /// PutObject; returns the body bytes sent.
    pub async fn put_object(&self, bucket: &str, key: &str, body: Bytes) -> Result<u64, String> {
        let n = body.len() as u64;
        self.send_ok(Method::PUT, &format!("/{bucket}/{key}"), &[], body, false)
            .await?;
        Ok(n)
    }

    /// GetObject; returns the body bytes received.
    pub async fn get_object(&self, bucket: &str, key: &str) -> Result<u64, String> {
        self.send_ok(
            Method::GET,
            &format!("/{bucket}/{key}"),
            &[],
            Bytes::new(),
            false,
        )
        .await
        .map(|r| r.body_len)
    }

    /// CopyObject (`x-amz-copy-source: /bucket/key`). S3 may answer 200 with an error
    /// document, so the body is checked too.
    pub async fn copy_object(
        &self,
        bucket: &str,
        key: &str,
        src_bucket: &str,
        src_key: &str,
    ) -> Result<(), String> {
        let src = format!("/{src_bucket}/{src_key}");
        let r = self
            .send_ok(
                Method::PUT,
                &format!("/{bucket}/{key}"),
                &[("x-amz-copy-source", src.as_str())],
                Bytes::new(),
                true,
            )
            .await?;
        let text = String::from_utf8_lossy(&r.head);
        if text.contains("<Error>") {
            return Err(format!("CopyObject {src} -> /{bucket}/{key}: {text}"));
        }
        Ok(())
    }
}

fn tcp_connector() -> HttpConnector {
    let mut conn = HttpConnector::new();
    conn.set_nodelay(true);
    conn.set_connect_timeout(Some(Duration::from_secs(10)));
    conn
}

fn pool_builder() -> hyper_util::client::legacy::Builder {
    let mut b = HyperClient::builder(TokioExecutor::new());
    b.pool_max_idle_per_host(256)
        .pool_idle_timeout(Duration::from_secs(60));
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signing_adds_sigv4_headers() {
        let c = Client::new(
            "127.0.0.1:9".parse().expect("addr"),
            Some(("AK", "SK")),
            "us-east-1",
        );
        let h = c
            .signed_headers(&Method::GET, "http://127.0.0.1:9/b/k", &[])
            .expect("sign");
        let names: Vec<&str> = h.iter().map(|(k, _)| k.as_str()).collect();
        assert!(names.contains(&"authorization"), "{names:?}");
        assert!(names.contains(&"x-amz-date"), "{names:?}");
        assert!(
            h.iter()
                .any(|(k, v)| k == "x-amz-content-sha256" && v == "UNSIGNED-PAYLOAD"),
            "{h:?}"
        );
        let b = c.with_bearer("T");
        let h = b
            .signed_headers(&Method::POST, "http://127.0.0.1:9/_files/x/inc", &[])
            .expect("bearer");
        assert!(
            h.iter()
                .any(|(k, v)| k == "authorization" && v == "Bearer T")
        );
    }
}
