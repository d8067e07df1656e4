//! The authentication layer: SigV4 on every S3 request, and the body decoding it implies.
//!
//! A tower middleware (not code in each handler) verifies the signature from the headers
//! and query alone, then replaces the body with one that enforces what the signature
//! promised: a hex `x-amz-content-sha256` is checked when the body ends, `aws-chunked`
//! bodies are decoded and their chunk signatures checked as they stream. A body that
//! breaks its promise ends in an error, which aborts the upload before anything is stored.

use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{Stream, TryStreamExt as _};
use sha2::{Digest as _, Sha256};

use super::access;
use super::body_check::{EndCheck, check_at_end};
use super::chunked::{self, ChunkError, ChunkMode, TrailerSlot};
use super::error::{ErrorCode, S3Error};
use super::sigv4::{self, AuthError, Payload};
use crate::state::{AppState, PRESIGNED_V2_EXPIRES_MAX_SECS_DEFAULT};

// The V2 presigned bound defaults to SigV4's own longest expiry.
const _: () = assert!(PRESIGNED_V2_EXPIRES_MAX_SECS_DEFAULT == sigv4::MAX_PRESIGNED_EXPIRES);

/// What the handlers learn about the body from the authentication layer.
#[derive(Clone, Default)]
pub struct BodyInfo {
    /// The decoded length of an `aws-chunked` body (`x-amz-decoded-content-length`).
    pub decoded_length: Option<u64>,
    /// Trailing headers of an `aws-chunked` body, filled when the body has been read.
    pub trailers: Option<TrailerSlot>,
}

/// An error carried inside a body stream, so that handlers can answer with its S3 code.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BodyError(pub S3Error);

pub(crate) fn auth_error(e: AuthError, presigned: bool) -> S3Error {
    use ErrorCode::*;
    let (code, msg): (ErrorCode, String) = match &e {
        AuthError::Missing => (AccessDenied, "Access Denied".into()),
        AuthError::Malformed(m) if presigned => (AuthorizationQueryParametersError, m.clone()),
        AuthError::Malformed(m) => (AuthorizationHeaderMalformed, m.clone()),
        AuthError::UnsupportedAlgorithm => (
            InvalidArgument,
            "Only AWS4-HMAC-SHA256 signatures are supported".into(),
        ),
        AuthError::UnknownAccessKey => (
            InvalidAccessKeyId,
            "The AWS Access Key Id you provided does not exist in our records.".into(),
        ),
        AuthError::SignatureMismatch => (
            SignatureDoesNotMatch,
            "The request signature we calculated does not match the signature you provided. \
             Check your key and signing method."
                .into(),
        ),
        AuthError::RequestTimeTooSkewed => (
            RequestTimeTooSkewed,
            "The difference between the request time and the current time is too large.".into(),
        ),
        AuthError::Expired => (AccessDenied, "Request has expired".into()),
        AuthError::ExpiresTooFar(max_secs) => (
            AccessDenied,
            format!(
                "Request has expired: Expires is more than {max_secs} seconds in the future, \
                 the longest this gateway allows"
            ),
        ),
        AuthError::ExpiresTooLarge => (
            AuthorizationQueryParametersError,
            "X-Amz-Expires must be less than a week (in seconds) that is 604800".into(),
        ),
        AuthError::MissingDate => (
            AccessDenied,
            "AWS authentication requires a valid Date or x-amz-date header".into(),
        ),
    };
    S3Error::new(code, msg)
}

fn chunk_error(e: ChunkError) -> S3Error {
    match e {
        ChunkError::SignatureMismatch => S3Error::new(
            ErrorCode::SignatureDoesNotMatch,
            "The chunk signature we calculated does not match the signature you provided.",
        ),
        ChunkError::TooLarge => S3Error::new(
            ErrorCode::EntityTooLarge,
            "An aws-chunked chunk or its trailers exceed the allowed size",
        ),
        ChunkError::DecodedLengthMismatch => S3Error::new(
            ErrorCode::IncompleteBody,
            "The decoded body length does not match x-amz-decoded-content-length",
        ),
        ChunkError::Malformed(m) => S3Error::new(ErrorCode::IncompleteBody, m),
        ChunkError::Io(_) => incomplete_body(),
    }
}

fn incomplete_body() -> S3Error {
    S3Error::new(
        ErrorCode::IncompleteBody,
        "The request body ended before it was complete",
    )
}

/// The middleware: verify, then wrap the body.
pub async fn authenticate(State(app): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    // A CORS preflight carries no credentials by design; it only reads the bucket's rules.
    if req.method() == http::Method::OPTIONS {
        return next.run(req).await;
    }
    let (mut parts, body) = req.into_parts();
    let policy = &app.signatures;
    if super::sigv2::is_presigned_v2(&parts.uri) {
        // The same Host reading as the router's, so the bucket signed is the one served.
        let host = parts
            .headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok());
        let check = super::sigv2::Presigned {
            host_bucket: super::request::virtual_host_bucket(host, app.domain.as_deref()),
            now_secs: crate::store::now_ms() / 1000,
            expires_max_secs: policy.presigned_v2_expires_max_secs,
        };
        let verify = || {
            super::sigv2::verify_presigned(
                &parts.method,
                &parts.uri,
                &parts.headers,
                |key| access::secret_for(&app, key),
                check,
            )
        };
        let mut verified = verify();
        if matches!(verified, Err(AuthError::UnknownAccessKey)) && catch_up(&app).await {
            verified = verify();
        }
        let key = match verified {
            Ok(key) => key,
            Err(e) => return auth_error(e, true).into_response(),
        };
        parts.extensions.insert(access::caller(&app, &key));
        // A V2 signature covers no body (a PUT's): checked against its signed
        // x-amz-content-sha256 when it sends a hash (and by the handler against its
        // Content-MD5); never streamed aws-chunked.
        let raw = body.into_data_stream().map_err(std::io::Error::other);
        let payload = match parts.headers.get("x-amz-content-sha256") {
            None => Ok(Payload::Unsigned),
            Some(v) => Payload::parse(v.as_bytes()),
        };
        let body = match payload {
            Ok(Payload::Unsigned) => Body::from_stream(raw.map_err(BodyError::from_io)),
            Ok(Payload::Sha256(expected)) => Body::from_stream(sha256_checked(raw, expected)),
            Ok(_) => {
                return S3Error::new(
                    ErrorCode::InvalidArgument,
                    "aws-chunked bodies need a SigV4 signature",
                )
                .into_response();
            }
            Err(e) => return auth_error(e, true).into_response(),
        };
        parts.extensions.insert(BodyInfo::default());
        return next.run(Request::from_parts(parts, body)).await;
    }
    let verify = || {
        sigv4::verify(
            &parts.method,
            &parts.uri,
            &parts.headers,
            |key| access::secret_for(&app, key),
            SystemTime::now(),
            (!policy.any_region).then_some(app.region.as_str()),
        )
    };
    let mut verified = verify();
    if matches!(verified, Err(AuthError::UnknownAccessKey)) && catch_up(&app).await {
        verified = verify();
    }
    let verified = match verified {
        Ok(v) => v,
        // A browser's form upload (POST Object) signs a policy inside its body, which the
        // handler checks; only that request shape goes on without a signature here.
        Err(AuthError::Missing)
            if super::request::is_form_upload_request(&parts, app.domain.as_deref()) =>
        {
            return next.run(Request::from_parts(parts, body)).await;
        }
        // An unsigned read goes on as anonymous: the router lets through only what a
        // public-read ACL opens to anyone.
        Err(AuthError::Missing)
            if parts.method == http::Method::GET || parts.method == http::Method::HEAD =>
        {
            parts.extensions.insert(access::Caller::Anonymous);
            parts.extensions.insert(BodyInfo::default());
            return next.run(Request::from_parts(parts, body)).await;
        }
        Err(e) => {
            let presigned = parts
                .uri
                .query()
                .is_some_and(|q| q.contains("X-Amz-Signature"));
            return auth_error(e, presigned).into_response();
        }
    };
    parts
        .extensions
        .insert(access::caller(&app, &verified.access_key));
    let raw = body.into_data_stream().map_err(std::io::Error::other);
    let mut info = BodyInfo::default();
    let body = match verified.payload {
        Payload::Unsigned => Body::from_stream(raw.map_err(BodyError::from_io)),
        Payload::Sha256(expected) => Body::from_stream(sha256_checked(raw, expected)),
        streaming => {
            let decoded = match parts.headers.get("x-amz-decoded-content-length") {
                None => None,
                Some(v) => match v.to_str().ok().and_then(|s| s.parse::<u64>().ok()) {
                    Some(n) => Some(n),
                    None => {
                        return S3Error::new(
                            ErrorCode::InvalidArgument,
                            "x-amz-decoded-content-length is not a number",
                        )
                        .into_response();
                    }
                },
            };
            let mode = match streaming {
                Payload::StreamingSigned => ChunkMode::Signed(verified.context),
                Payload::StreamingSignedTrailer => ChunkMode::SignedTrailer(verified.context),
                _ => ChunkMode::UnsignedTrailer,
            };
            let (stream, trailers) = chunked::decode(Box::pin(raw), mode, decoded);
            info.decoded_length = decoded;
            info.trailers = Some(trailers);
            Body::from_stream(stream.map_err(|e| BodyError(chunk_error(e))))
        }
    };
    parts.extensions.insert(info);
    next.run(Request::from_parts(parts, body)).await
}

/// An access key this node does not know may have been created an instant ago through
/// another node: wait until this node has applied every acknowledged write, then the
/// caller looks again. False if that could not be done (no quorum).
pub(crate) async fn catch_up(app: &AppState) -> bool {
    app.store.metadata().linearize().await.is_ok()
}

impl BodyError {
    fn from_io(_: std::io::Error) -> Self {
        BodyError(incomplete_body())
    }
}

fn sha256_checked(
    raw: impl Stream<Item = std::io::Result<Bytes>> + Send + Unpin + 'static,
    expected: [u8; 32],
) -> impl Stream<Item = Result<Bytes, BodyError>> + Send + 'static {
    check_at_end(
        raw.map_err(BodyError::from_io),
        PayloadSha256 {
            hasher: Sha256::new(),
            expected,
        },
    )
}

/// `x-amz-content-sha256` as a hex digest: the body must hash to it.
struct PayloadSha256 {
    hasher: Sha256,
    expected: [u8; 32],
}

impl EndCheck for PayloadSha256 {
    type Error = BodyError;

    fn update(&mut self, chunk: &[u8]) {
        self.hasher.update(chunk);
    }

    fn finish(self) -> Result<(), BodyError> {
        if <[u8; 32]>::from(self.hasher.finalize()) == self.expected {
            return Ok(());
        }
        Err(BodyError(S3Error::new(
            ErrorCode::XAmzContentSHA256Mismatch,
            "The provided 'x-amz-content-sha256' header does not match what was computed.",
        )))
    }
}

/// The body of an authenticated request as a stream of bytes or S3 errors.
pub fn body_stream(body: Body) -> impl Stream<Item = Result<Bytes, S3Error>> + Unpin {
    body.into_data_stream()
        .map_err(|e| carried_error(e.into_inner()).unwrap_or_else(incomplete_body))
}

/// Finds the [`BodyError`] inside an error from the body. axum boxes a stream's error once
/// per body wrapper, so it may sit a few `axum::Error` layers deep.
fn carried_error(mut e: axum::BoxError) -> Option<S3Error> {
    const WRAPPERS_MAX: usize = 8;
    for _ in 0..WRAPPERS_MAX {
        match e.downcast::<BodyError>() {
            Ok(b) => return Some(b.0),
            Err(other) => match other.downcast::<axum::Error>() {
                Ok(wrapped) => e = wrapped.into_inner(),
                Err(_) => return None,
            },
        }
    }
    None
}

/// Reads a small XML request body whole, at most `max_bytes`, as text.
pub async fn read_xml_body(body: axum::body::Body, max_bytes: usize) -> Result<String, S3Error> {
    use futures_util::StreamExt as _;
    let mut stream = body_stream(body);
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if out.len() + chunk.len() > max_bytes {
            return Err(S3Error::new(
                ErrorCode::MalformedXML,
                "The XML you provided was too large",
            ));
        }
        out.extend_from_slice(&chunk);
    }
    String::from_utf8(out).map_err(|_| {
        S3Error::new(
            ErrorCode::MalformedXML,
            "The XML you provided was not valid UTF-8",
        )
    })
}
