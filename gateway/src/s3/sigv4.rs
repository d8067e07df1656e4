//! AWS Signature Version 4 verification for incoming S3 requests.
//!
//! The gateway has to accept exactly what Amazon S3 accepts from real clients (aws-sdk-s3,
//! boto3, the aws cli, rclone, s3cmd), so the canonical request is rebuilt here with S3's own
//! rules (the path is decoded once and re-encoded once, never normalised; a raw `+` in the
//! query is a space, as the handlers read it, see [`super::request::form_decode`]) rather than
//! with a generic signer; only the two HMAC primitives of
//! `aws-sigv4` are reused. Both header (`Authorization`) and query-string (presigned URL)
//! authentication are handled. For streaming uploads only the seed signature can be checked
//! here: [`SigningContext`] carries what the `chunked` decoder needs to check the per-chunk
//! signatures while the body flows.

use std::borrow::Cow;
use std::fmt;
use std::time::{Duration, SystemTime};

use super::request::form_decode;
use aws_sigv4::sign::v4::{calculate_signature, generate_signing_key};
use http::{HeaderMap, Method, Uri};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode, percent_encode};
use sha2::{Digest, Sha256};
use time::macros::format_description;
use time::{OffsetDateTime, PrimitiveDateTime};

/// The only signing algorithm accepted (SigV4a and SigV2 are refused).
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";
/// How far `x-amz-date` may be from the server clock, as on S3.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(15 * 60);
/// Longest validity S3 allows for a presigned URL (seven days).
pub const MAX_PRESIGNED_EXPIRES: u64 = 604_800;
/// Hex SHA-256 of the empty string; part of every chunk's string-to-sign.
pub const EMPTY_SHA256_HEX: &str =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
/// `x-amz-content-sha256` value for a body that is not covered by the signature.
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";
/// `x-amz-content-sha256` value for an `aws-chunked` body with signed chunks.
pub const STREAMING_PAYLOAD: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";
/// `x-amz-content-sha256` value for signed chunks followed by signed trailers.
pub const STREAMING_PAYLOAD_TRAILER: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER";
/// `x-amz-content-sha256` value for unsigned chunks followed by (unsigned) trailers.
pub const STREAMING_UNSIGNED_PAYLOAD_TRAILER: &str = "STREAMING-UNSIGNED-PAYLOAD-TRAILER";

const SERVICE: &str = "s3";
const TERMINATOR: &str = "aws4_request";
const CONTENT_SHA256: &str = "x-amz-content-sha256";
const QUERY_PARAMS_REQUIRED: &str = "Query-string authentication version 4 requires the \
     X-Amz-Algorithm, X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, \
     and X-Amz-Expires parameters.";

/// S3 leaves only RFC 3986 unreserved characters unescaped in query names and values.
pub(crate) const QUERY_ENCODE_SET: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');
/// In the path, `/` separates segments and is kept as is.
pub(crate) const PATH_ENCODE_SET: &AsciiSet = &QUERY_ENCODE_SET.remove(b'/');

/// Why a request could not be authenticated; each variant is one S3 error code for the caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// Neither an `Authorization` header nor presigned query parameters: an anonymous request
    /// (`AccessDenied` unless the resource is public).
    #[error("request is not signed")]
    Missing,
    /// The signature material cannot be parsed (`AuthorizationHeaderMalformed`,
    /// `AuthorizationQueryParametersError` or `InvalidRequest`); the text says what is wrong.
    #[error("{0}")]
    Malformed(String),
    /// Some other scheme than AWS4-HMAC-SHA256 (SigV2, SigV4a, ...).
    #[error(
        "the authorization mechanism you have provided is not supported; please use AWS4-HMAC-SHA256"
    )]
    UnsupportedAlgorithm,
    /// `InvalidAccessKeyId`.
    #[error("the AWS access key Id you provided does not exist in our records")]
    UnknownAccessKey,
    /// `SignatureDoesNotMatch`.
    #[error("the request signature we calculated does not match the signature you provided")]
    SignatureMismatch,
    /// `RequestTimeTooSkewed`: the signing time is more than [`MAX_CLOCK_SKEW`] away.
    #[error("the difference between the request time and the current time is too large")]
    RequestTimeTooSkewed,
    /// `AccessDenied` "Request has expired" for a presigned URL.
    #[error("request has expired")]
    Expired,
    /// `AuthorizationQueryParametersError`: X-Amz-Expires above [`MAX_PRESIGNED_EXPIRES`].
    #[error(
        "X-Amz-Expires must be less than a week (in seconds); that is, the given X-Amz-Expires must be less than 604800 seconds"
    )]
    ExpiresTooLarge,
    /// `AccessDenied` "Request has expired": a V2 presigned URL whose `Expires` is further
    /// ahead than the gateway's cap (the seconds it allows).
    #[error("Expires is more than {0} seconds in the future")]
    ExpiresTooFar(u64),
    /// `AccessDenied`: no usable `x-amz-date` or `Date` header for header authentication.
    #[error("AWS authentication requires a valid Date or x-amz-date header")]
    MissingDate,
}

/// What the client declared about the body (`x-amz-content-sha256`), which tells the caller how
/// to read and check it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// `UNSIGNED-PAYLOAD`: the body is not covered by the signature.
    Unsigned,
    /// The body's SHA-256; the caller must hash the body and refuse it on a difference
    /// (`XAmzContentSHA256Mismatch`).
    Sha256([u8; 32]),
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD`: `aws-chunked` body with chained chunk signatures.
    StreamingSigned,
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`: signed chunks plus signed trailers.
    StreamingSignedTrailer,
    /// `STREAMING-UNSIGNED-PAYLOAD-TRAILER`: unsigned chunks plus trailers (usually a checksum).
    StreamingUnsignedTrailer,
}

impl Payload {
    /// Interprets an `x-amz-content-sha256` value; anything S3 would not accept is refused so
    /// that a typo cannot silently turn into an unchecked body.
    pub fn parse(value: &[u8]) -> Result<Payload, AuthError> {
        match value {
            b"UNSIGNED-PAYLOAD" => Ok(Payload::Unsigned),
            b"STREAMING-AWS4-HMAC-SHA256-PAYLOAD" => Ok(Payload::StreamingSigned),
            b"STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER" => Ok(Payload::StreamingSignedTrailer),
            b"STREAMING-UNSIGNED-PAYLOAD-TRAILER" => Ok(Payload::StreamingUnsignedTrailer),
            hex_digest if hex_digest.len() == 64 => {
                let mut digest = [0u8; 32];
                hex::decode_to_slice(hex_digest, &mut digest).map_err(|_| invalid_content_sha())?;
                Ok(Payload::Sha256(digest))
            }
            _ => Err(invalid_content_sha()),
        }
    }
}

fn invalid_content_sha() -> AuthError {
    AuthError::Malformed(
        "The provided 'x-amz-content-sha256' header does not contain a valid value".to_owned(),
    )
}

/// Everything needed to check signatures that chain from the request's own signature (the
/// chunks and trailers of a streaming upload), without keeping the secret key around.
#[derive(Clone)]
pub struct SigningContext {
    key: Vec<u8>,
    amz_date: String,
    region: String,
    scope: String,
    seed_signature: String,
}

impl SigningContext {
    /// Derives the signing key for `secret` on the day of `amz_date` (`yyyymmddThhmmssZ`) in
    /// `region`, service `s3`. Public so that tests and tools can sign as a client would.
    pub fn new(
        secret: &str,
        amz_date: &str,
        region: &str,
        seed_signature: &str,
    ) -> Result<SigningContext, AuthError> {
        let when = parse_amz_date(amz_date).ok_or_else(|| {
            AuthError::Malformed(format!("invalid ISO 8601 basic timestamp {amz_date:?}"))
        })?;
        Ok(SigningContext::derive(
            secret,
            when,
            region,
            seed_signature.to_owned(),
        ))
    }

    fn derive(
        secret: &str,
        when: OffsetDateTime,
        region: &str,
        seed_signature: String,
    ) -> SigningContext {
        let key = generate_signing_key(secret, SystemTime::from(when), region, SERVICE)
            .as_ref()
            .to_vec();
        SigningContext {
            key,
            amz_date: format_amz_date(when),
            region: region.to_owned(),
            scope: format!(
                "{}/{region}/{SERVICE}/{TERMINATOR}",
                format_scope_date(when)
            ),
            seed_signature,
        }
    }

    /// The signing timestamp as it appears in strings-to-sign (`yyyymmddThhmmssZ`).
    pub fn amz_date(&self) -> &str {
        &self.amz_date
    }

    /// The region named in the credential scope.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The credential scope `yyyymmdd/region/s3/aws4_request`.
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// The request's signature (lowercase hex); the first chunk's signature chains from it.
    pub fn seed_signature(&self) -> &str {
        &self.seed_signature
    }

    /// Lowercase hex HMAC-SHA256 of `string_to_sign` under the derived signing key.
    pub fn sign(&self, string_to_sign: &[u8]) -> String {
        calculate_signature(&self.key, string_to_sign)
    }
}

impl fmt::Debug for SigningContext {
    /// The key is a credential: never print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningContext")
            .field("key", &"<redacted>")
            .field("amz_date", &self.amz_date)
            .field("scope", &self.scope)
            .field("seed_signature", &self.seed_signature)
            .finish()
    }
}

/// A request whose signature checked out.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The access key id that signed the request.
    pub access_key: String,
    /// How the body must be read and checked.
    pub payload: Payload,
    /// For checking chunk and trailer signatures of a streaming body.
    pub context: SigningContext,
    /// Whether the signature came from the query string (presigned URL).
    pub presigned: bool,
}

/// Verifies the SigV4 signature of a request, header or presigned, against the secret that
/// `secret_for` returns for the access key, at server time `now`. With `expected_region`, a
/// credential scope naming another region is refused before anything else is checked, as S3
/// does (`None` accepts any region).
///
/// The body is not read: for [`Payload::Sha256`] the caller must compare the body's digest, and
/// for the streaming payloads decode it with the `chunked` module using [`Verified::context`].
/// The `host` value is taken from the `Host` header or, for HTTP/2, from the URI's authority.
/// Checks run in this order: parsing (`Malformed`, `UnsupportedAlgorithm`), date and expiry,
/// access key, signature, then that every `x-amz-*` header was signed.
pub fn verify(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    secret_for: impl Fn(&str) -> Option<String>,
    now: SystemTime,
    expected_region: Option<&str>,
) -> Result<Verified, AuthError> {
    let query = query_pairs(uri.query().unwrap_or(""));
    let presigned = query.iter().any(|(name, _)| {
        matches!(
            name.as_slice(),
            b"X-Amz-Signature" | b"X-Amz-Algorithm" | b"X-Amz-Credential"
        )
    });
    let request = Request {
        method,
        uri,
        headers,
        query: &query,
        expected_region,
    };
    match (headers.get(http::header::AUTHORIZATION), presigned) {
        (Some(_), true) => Err(AuthError::Malformed(
            "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter or the \
             Authorization header should be specified"
                .to_owned(),
        )),
        (Some(value), false) => {
            let value = value.to_str().map_err(|_| {
                AuthError::Malformed("the Authorization header is not ASCII".to_owned())
            })?;
            verify_header(&request, value, secret_for, now)
        }
        (None, true) => verify_presigned(&request, secret_for, now),
        (None, false) => {
            let has = |wanted: &[u8]| query.iter().any(|(name, _)| name.as_slice() == wanted);
            if has(b"AWSAccessKeyId") && has(b"Signature") {
                Err(AuthError::UnsupportedAlgorithm)
            } else {
                Err(AuthError::Missing)
            }
        }
    }
}

/// The signature fields of a POST form (a browser upload), each as the form sent it.
#[derive(Debug, Clone, Copy)]
pub struct PostForm<'a> {
    /// `x-amz-algorithm`.
    pub algorithm: &'a str,
    /// `x-amz-credential`: `access-key/yyyymmdd/region/s3/aws4_request`.
    pub credential: &'a str,
    /// `x-amz-date`: `yyyymmddThhmmssZ`, on the credential's day.
    pub amz_date: &'a str,
    /// `x-amz-signature`.
    pub signature: &'a str,
    /// `policy`: the base64 text, which is what is signed.
    pub policy: &'a str,
}

/// Verifies a POST form's signature: the hex HMAC-SHA256 of the base64 policy under the
/// signing key of the credential's day, region and `s3`, the key every SigV4 request
/// uses. Returns the access key. The date is not held against the clock: the policy's
/// `expiration` bounds how long a form is good, as on S3.
pub fn verify_post_policy(
    form: &PostForm<'_>,
    secret_for: impl Fn(&str) -> Option<String>,
    expected_region: Option<&str>,
) -> Result<String, AuthError> {
    if form.algorithm != ALGORITHM {
        return Err(AuthError::UnsupportedAlgorithm);
    }
    let credential = parse_credential(form.credential)?;
    check_region(&credential, expected_region, true)?;
    let when = parse_amz_date(form.amz_date).ok_or_else(|| {
        AuthError::Malformed("x-amz-date must be in the ISO8601 Long Format".to_owned())
    })?;
    check_scope_date(&credential, when)?;
    let signature = parse_signature(form.signature)?;
    let secret = secret_for(&credential.access_key).ok_or(AuthError::UnknownAccessKey)?;
    let context = SigningContext::derive(&secret, when, &credential.region, signature);
    let expected = context.sign(form.policy.as_bytes());
    if crate::bearer::constant_time_eq(expected.as_bytes(), context.seed_signature().as_bytes()) {
        Ok(credential.access_key)
    } else {
        Err(AuthError::SignatureMismatch)
    }
}

/// The parts of the request that the canonical request is built from.
struct Request<'a> {
    method: &'a Method,
    uri: &'a Uri,
    headers: &'a HeaderMap,
    /// Form-decoded query pairs, in request order.
    query: &'a [(Vec<u8>, Vec<u8>)],
    /// The gateway's region, when a credential scope must name it.
    expected_region: Option<&'a str>,
}

/// The parsed `Credential=` value.
#[derive(Debug, PartialEq, Eq)]
struct Credential {
    access_key: String,
    date: String,
    region: String,
}

fn verify_header(
    request: &Request<'_>,
    authorization: &str,
    secret_for: impl Fn(&str) -> Option<String>,
    now: SystemTime,
) -> Result<Verified, AuthError> {
    let auth = parse_authorization(authorization)?;
    check_region(&auth.credential, request.expected_region, false)?;
    let content_sha = request.headers.get(CONTENT_SHA256).ok_or_else(|| {
        AuthError::Malformed(
            "Missing required header for this request: x-amz-content-sha256".to_owned(),
        )
    })?;
    let payload = Payload::parse(content_sha.as_bytes())?;
    let when = request_date(request.headers)?;
    if abs_diff(SystemTime::from(when), now) > MAX_CLOCK_SKEW {
        return Err(AuthError::RequestTimeTooSkewed);
    }
    check_scope_date(&auth.credential, when)?;
    let secret = secret_for(&auth.credential.access_key).ok_or(AuthError::UnknownAccessKey)?;
    let context = SigningContext::derive(&secret, when, &auth.credential.region, auth.signature);
    let canonical = canonical_request(request, &auth.signed_headers, content_sha.as_bytes(), false);
    check_signature(&context, &canonical)?;
    check_amz_headers_signed(request.headers, &auth.signed_headers)?;
    Ok(Verified {
        access_key: auth.credential.access_key,
        payload,
        context,
        presigned: false,
    })
}

fn verify_presigned(
    request: &Request<'_>,
    secret_for: impl Fn(&str) -> Option<String>,
    now: SystemTime,
) -> Result<Verified, AuthError> {
    let required = |name: &str| {
        query_param(request.query, name)?
            .ok_or_else(|| AuthError::Malformed(QUERY_PARAMS_REQUIRED.to_owned()))
    };
    if required("X-Amz-Algorithm")? != ALGORITHM {
        return Err(AuthError::UnsupportedAlgorithm);
    }
    let credential = parse_credential(&required("X-Amz-Credential")?)?;
    check_region(&credential, request.expected_region, true)?;
    let amz_date = required("X-Amz-Date")?;
    let expires = parse_expires(&required("X-Amz-Expires")?)?;
    let signed_headers = parse_signed_headers(&required("X-Amz-SignedHeaders")?)?;
    let signature = parse_signature(&required("X-Amz-Signature")?)?;
    let when = parse_amz_date(&amz_date).ok_or_else(|| {
        AuthError::Malformed("X-Amz-Date must be in the ISO8601 Long Format".to_owned())
    })?;
    check_scope_date(&credential, when)?;

    let signed_at = SystemTime::from(when);
    if signed_at
        .duration_since(now)
        .is_ok_and(|ahead| ahead > MAX_CLOCK_SKEW)
    {
        return Err(AuthError::RequestTimeTooSkewed);
    }
    let expired = match signed_at.checked_add(Duration::from_secs(expires)) {
        Some(deadline) => now > deadline,
        None => false,
    };
    if expired {
        return Err(AuthError::Expired);
    }

    let (payload, payload_line): (Payload, &[u8]) = match request.headers.get(CONTENT_SHA256) {
        Some(value) => (Payload::parse(value.as_bytes())?, value.as_bytes()),
        None => (Payload::Unsigned, UNSIGNED_PAYLOAD.as_bytes()),
    };
    let secret = secret_for(&credential.access_key).ok_or(AuthError::UnknownAccessKey)?;
    let context = SigningContext::derive(&secret, when, &credential.region, signature);
    let canonical = canonical_request(request, &signed_headers, payload_line, true);
    check_signature(&context, &canonical)?;
    check_amz_headers_signed(request.headers, &signed_headers)?;
    Ok(Verified {
        access_key: credential.access_key,
        payload,
        context,
        presigned: true,
    })
}

/// The parsed `Authorization` header.
#[derive(Debug, PartialEq, Eq)]
struct AuthorizationHeader {
    credential: Credential,
    signed_headers: Vec<String>,
    signature: String,
}

/// Parses `AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...`, tolerating any
/// spacing around the commas as clients differ there.
fn parse_authorization(value: &str) -> Result<AuthorizationHeader, AuthError> {
    let value = value.trim_matches(' ');
    let (algorithm, rest) = value.split_once(' ').unwrap_or((value, ""));
    if algorithm.is_empty() {
        return Err(AuthError::Malformed(
            "the Authorization header is empty".to_owned(),
        ));
    }
    if algorithm != ALGORITHM {
        return Err(AuthError::UnsupportedAlgorithm);
    }
    let (mut credential, mut signed_headers, mut signature) = (None, None, None);
    for component in rest.split(',').map(|c| c.trim_matches(' ')) {
        if component.is_empty() {
            continue;
        }
        let (name, value) = component.split_once('=').ok_or_else(|| {
            AuthError::Malformed(format!(
                "the authorization header is malformed; incorrect component {component:?}"
            ))
        })?;
        let slot = match name.trim_matches(' ') {
            "Credential" => &mut credential,
            "SignedHeaders" => &mut signed_headers,
            "Signature" => &mut signature,
            other => {
                return Err(AuthError::Malformed(format!(
                    "the authorization header is malformed; unknown component {other:?}"
                )));
            }
        };
        if slot.replace(value.trim_matches(' ')).is_some() {
            return Err(AuthError::Malformed(format!(
                "the authorization header is malformed; {name} is given twice"
            )));
        }
    }
    let missing = |what: &str| {
        AuthError::Malformed(format!(
            "the authorization header is malformed; it must contain {what}"
        ))
    };
    Ok(AuthorizationHeader {
        credential: parse_credential(credential.ok_or_else(|| missing("Credential"))?)?,
        signed_headers: parse_signed_headers(
            signed_headers.ok_or_else(|| missing("SignedHeaders"))?,
        )?,
        signature: parse_signature(signature.ok_or_else(|| missing("Signature"))?)?,
    })
}

/// Parses `access-key/yyyymmdd/region/s3/aws4_request`. The scope is taken from the right so
/// that an access key containing `/` still parses.
fn parse_credential(value: &str) -> Result<Credential, AuthError> {
    let malformed = |why: &str| {
        AuthError::Malformed(format!(
            "the Credential {value:?} is malformed; {why}; expecting \
             \"<access-key>/<YYYYMMDD>/<region>/s3/aws4_request\""
        ))
    };
    let mut parts = value.rsplitn(5, '/');
    let (Some(terminator), Some(service), Some(region), Some(date), Some(access_key)) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(malformed("it has too few parts"));
    };
    if access_key.is_empty() {
        return Err(malformed("the access key is empty"));
    }
    if date.len() != 8 || !date.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed("the date is not YYYYMMDD"));
    }
    if region.is_empty() {
        return Err(malformed("the region is empty"));
    }
    if service != SERVICE {
        return Err(malformed("the service must be s3"));
    }
    if terminator != TERMINATOR {
        return Err(malformed("the terminator must be aws4_request"));
    }
    Ok(Credential {
        access_key: access_key.to_owned(),
        date: date.to_owned(),
        region: region.to_owned(),
    })
}

/// Parses the `;`-separated list of signed header names; `host` must be among them because
/// otherwise a signature could be replayed against another endpoint.
fn parse_signed_headers(value: &str) -> Result<Vec<String>, AuthError> {
    let names: Vec<String> = value.split(';').map(str::to_ascii_lowercase).collect();
    if names
        .iter()
        .any(|name| name.is_empty() || http::HeaderName::from_bytes(name.as_bytes()).is_err())
    {
        return Err(AuthError::Malformed(format!(
            "SignedHeaders {value:?} is not a ';'-separated list of header names"
        )));
    }
    if !names.iter().any(|name| name == "host") {
        return Err(AuthError::Malformed(
            "the host header must be signed (SignedHeaders must include host)".to_owned(),
        ));
    }
    Ok(names)
}

/// A signature is 32 bytes as hex; compared in lowercase.
fn parse_signature(value: &str) -> Result<String, AuthError> {
    if value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(value.to_ascii_lowercase())
    } else {
        Err(AuthError::Malformed(format!(
            "the signature {value:?} is not 64 hexadecimal characters"
        )))
    }
}

/// X-Amz-Expires is a count of seconds in `1..=604800`.
fn parse_expires(value: &str) -> Result<u64, AuthError> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(AuthError::Malformed(
            "X-Amz-Expires should be a number".to_owned(),
        ));
    }
    match value.parse::<u64>() {
        Ok(0) => Err(AuthError::Malformed(
            "X-Amz-Expires must be non-negative and non-zero".to_owned(),
        )),
        Ok(seconds) if seconds <= MAX_PRESIGNED_EXPIRES => Ok(seconds),
        // All digits, so the only failure is overflow: far too large.
        _ => Err(AuthError::ExpiresTooLarge),
    }
}

/// The credential scope's day must be the signing day, or the derived key would differ from
/// the client's for reasons the client cannot see.
fn check_scope_date(credential: &Credential, when: OffsetDateTime) -> Result<(), AuthError> {
    let signing_day = format_scope_date(when);
    if credential.date == signing_day {
        Ok(())
    } else {
        Err(AuthError::Malformed(format!(
            "the credential date {:?} does not match the signing date {signing_day:?}",
            credential.date
        )))
    }
}

/// The credential scope must name the gateway's region: S3 refuses a signature for another
/// region rather than answering SignatureDoesNotMatch, so that the client learns the region
/// (its SDK may retry there). `expected` is `None` when any region is accepted.
fn check_region(
    credential: &Credential,
    expected: Option<&str>,
    presigned: bool,
) -> Result<(), AuthError> {
    match expected {
        Some(expected) if credential.region != expected => {
            let context = if presigned {
                "Error parsing the X-Amz-Credential parameter"
            } else {
                "The authorization header is malformed"
            };
            Err(AuthError::Malformed(format!(
                "{context}; the region '{}' is wrong; expecting '{expected}'",
                credential.region
            )))
        }
        _ => Ok(()),
    }
}

/// The signing time of a header-authenticated request: `x-amz-date`, else `Date`.
fn request_date(headers: &HeaderMap) -> Result<OffsetDateTime, AuthError> {
    if let Some(value) = headers.get("x-amz-date") {
        return value
            .to_str()
            .ok()
            .and_then(parse_amz_date)
            .ok_or(AuthError::MissingDate);
    }
    headers
        .get(http::header::DATE)
        .and_then(|value| value.to_str().ok())
        .and_then(parse_http_date)
        .ok_or(AuthError::MissingDate)
}

/// Parses the ISO 8601 basic form `yyyymmddThhmmssZ` and nothing else.
fn parse_amz_date(value: &str) -> Option<OffsetDateTime> {
    let bytes = value.as_bytes();
    let shape_ok = bytes.len() == 16
        && bytes.iter().enumerate().all(|(i, b)| match i {
            8 => *b == b'T',
            15 => *b == b'Z',
            _ => b.is_ascii_digit(),
        });
    if !shape_ok {
        return None;
    }
    PrimitiveDateTime::parse(
        value,
        format_description!("[year][month][day]T[hour][minute][second]Z"),
    )
    .ok()
    .map(PrimitiveDateTime::assume_utc)
}

/// Parses an RFC 1123 `Date` header (`Fri, 24 May 2013 00:00:00 GMT`).
fn parse_http_date(value: &str) -> Option<OffsetDateTime> {
    PrimitiveDateTime::parse(
        value.trim_matches(' '),
        format_description!(
            "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
        ),
    )
    .ok()
    .map(PrimitiveDateTime::assume_utc)
}

fn format_amz_date(when: OffsetDateTime) -> String {
    format!(
        "{}T{:02}{:02}{:02}Z",
        format_scope_date(when),
        when.hour(),
        when.minute(),
        when.second()
    )
}

fn format_scope_date(when: OffsetDateTime) -> String {
    format!(
        "{:04}{:02}{:02}",
        when.year(),
        u8::from(when.month()),
        when.day()
    )
}

fn abs_diff(a: SystemTime, b: SystemTime) -> Duration {
    a.duration_since(b).unwrap_or_else(|e| e.duration())
}

/// Splits a raw query string on `&` and the first `=` and decodes each side once, as the
/// handlers will ([`form_decode`]): a raw `+` is a space and signs as `%20`, `%2B` is a plus
/// and signs as `%2B`. What is signed is then exactly what is executed.
fn query_pairs(raw: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    raw.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (
                form_decode(name).into_owned(),
                form_decode(value).into_owned(),
            )
        })
        .collect()
}

fn decode(text: &str) -> Vec<u8> {
    Cow::from(percent_decode(text.as_bytes())).into_owned()
}

/// The single value of a query parameter; a repeated authentication parameter is ambiguous and
/// refused.
fn query_param(query: &[(Vec<u8>, Vec<u8>)], name: &str) -> Result<Option<String>, AuthError> {
    let mut values = query
        .iter()
        .filter(|(n, _)| n.as_slice() == name.as_bytes());
    let Some((_, value)) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(AuthError::Malformed(format!(
            "the query parameter {name} is given more than once"
        )));
    }
    String::from_utf8(value.clone())
        .map(Some)
        .map_err(|_| AuthError::Malformed(format!("the query parameter {name} is not UTF-8")))
}

/// The path decoded once and re-encoded with S3's rules: no double encoding and no `.`/`//`
/// normalisation, so keys such as `a//b/../c` sign as they are sent.
fn canonical_uri(path: &str) -> String {
    let path = if path.is_empty() { "/" } else { path };
    percent_encode(&decode(path), PATH_ENCODE_SET).to_string()
}

/// Query pairs re-encoded (`/` included) and sorted by name, then value.
fn canonical_query(query: &[(Vec<u8>, Vec<u8>)], skip_signature: bool) -> String {
    let mut pairs: Vec<(String, String)> = query
        .iter()
        .filter(|(name, _)| !(skip_signature && name.as_slice() == b"X-Amz-Signature"))
        .map(|(name, value)| {
            (
                percent_encode(name, QUERY_ENCODE_SET).to_string(),
                percent_encode(value, QUERY_ENCODE_SET).to_string(),
            )
        })
        .collect();
    pairs.sort();
    let mut out = String::new();
    for (i, (name, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(name);
        out.push('=');
        out.push_str(value);
    }
    out
}

/// All values of a header joined with `,`, each trimmed of spaces with inner runs of spaces
/// collapsed (S3 touches spaces only, not tabs). A missing `host` header (HTTP/2) falls back
/// to the URI authority; any other missing header signs as empty and so fails to match.
fn canonical_header_value(request: &Request<'_>, name: &str, out: &mut Vec<u8>) {
    let mut any = false;
    for value in request.headers.get_all(name) {
        if any {
            out.push(b',');
        }
        any = true;
        push_trimmed(value.as_bytes(), out);
    }
    if !any
        && name == "host"
        && let Some(authority) = request.uri.authority()
    {
        out.extend_from_slice(authority.as_str().as_bytes());
    }
}

/// Appends `value` without leading or trailing spaces and with each inner run of spaces
/// collapsed to one.
fn push_trimmed(value: &[u8], out: &mut Vec<u8>) {
    let mut started = false;
    let mut space_pending = false;
    for &b in value {
        if b == b' ' {
            space_pending = started;
            continue;
        }
        if space_pending {
            out.push(b' ');
        }
        space_pending = false;
        started = true;
        out.push(b);
    }
}

/// Builds the canonical request as bytes (header values need not be UTF-8).
fn canonical_request(
    request: &Request<'_>,
    signed_headers: &[String],
    payload_line: &[u8],
    presigned: bool,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(request.method.as_str().as_bytes());
    out.push(b'\n');
    out.extend_from_slice(canonical_uri(request.uri.path()).as_bytes());
    out.push(b'\n');
    out.extend_from_slice(canonical_query(request.query, presigned).as_bytes());
    out.push(b'\n');
    for name in signed_headers {
        out.extend_from_slice(name.as_bytes());
        out.push(b':');
        canonical_header_value(request, name, &mut out);
        out.push(b'\n');
    }
    out.push(b'\n');
    out.extend_from_slice(signed_headers.join(";").as_bytes());
    out.push(b'\n');
    out.extend_from_slice(payload_line);
    out
}

fn string_to_sign(context: &SigningContext, canonical_request: &[u8]) -> String {
    format!(
        "{ALGORITHM}\n{}\n{}\n{}",
        context.amz_date(),
        context.scope(),
        hex::encode(Sha256::digest(canonical_request))
    )
}

fn check_signature(context: &SigningContext, canonical_request: &[u8]) -> Result<(), AuthError> {
    let expected = context.sign(string_to_sign(context, canonical_request).as_bytes());
    if crate::bearer::constant_time_eq(expected.as_bytes(), context.seed_signature().as_bytes()) {
        Ok(())
    } else {
        Err(AuthError::SignatureMismatch)
    }
}

/// Every `x-amz-*` header present must be signed, as S3 requires, so that whoever holds a
/// presigned URL (or sits on the wire) cannot add, say, `x-amz-acl` or `x-amz-copy-source` to a
/// signed request. S3 answers `AccessDenied` here; this is reported as `Malformed` to keep the
/// error set small, with S3's wording.
fn check_amz_headers_signed(headers: &HeaderMap, signed: &[String]) -> Result<(), AuthError> {
    let unsigned: Vec<&str> = headers
        .keys()
        .map(http::HeaderName::as_str)
        .filter(|name| name.starts_with("x-amz-") && !signed.iter().any(|s| s == name))
        .collect();
    if unsigned.is_empty() {
        Ok(())
    } else {
        Err(AuthError::Malformed(format!(
            "There were headers present in the request which were not signed: {}",
            unsigned.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AK: &str = "AKIAIOSFODNN7EXAMPLE";
    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

    fn secrets(access_key: &str) -> Option<String> {
        (access_key == AK).then(|| SECRET.to_owned())
    }

    /// The documents' examples come from several regions; the region check has its own
    /// tests ([`a_credential_for_another_region_is_refused`]), so here any region is accepted.
    fn verify(
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        secret_for: impl Fn(&str) -> Option<String>,
        now: SystemTime,
    ) -> Result<Verified, AuthError> {
        super::verify(method, uri, headers, secret_for, now, None)
    }

    fn at(amz_date: &str) -> SystemTime {
        SystemTime::from(parse_amz_date(amz_date).expect("test date"))
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).expect("test header name"),
                http::HeaderValue::from_str(value).expect("test header value"),
            );
        }
        map
    }

    fn uri(text: &str) -> Uri {
        text.parse().expect("test uri")
    }

    fn auth(signed: &str, signature: &str) -> String {
        format!(
            "AWS4-HMAC-SHA256 Credential={AK}/20130524/us-east-1/s3/aws4_request,\
             SignedHeaders={signed},Signature={signature}"
        )
    }

    /// The S3 documentation's "GET Object" example.
    fn get_object_example() -> (Method, Uri, HeaderMap) {
        let signature = "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";
        let headers = headers(&[
            ("host", "examplebucket.s3.amazonaws.com"),
            ("range", "bytes=0-9"),
            ("x-amz-content-sha256", EMPTY_SHA256_HEX),
            ("x-amz-date", "20130524T000000Z"),
            (
                "authorization",
                &auth("host;range;x-amz-content-sha256;x-amz-date", signature),
            ),
        ]);
        (Method::GET, uri("/test.txt"), headers)
    }

    #[test]
    fn aws_example_get_object() {
        let (method, uri, headers) = get_object_example();
        let verified = verify(&method, &uri, &headers, secrets, at("20130524T000000Z"))
            .expect("AWS example verifies");
        assert_eq!(verified.access_key, AK);
        assert_eq!(
            verified.payload,
            Payload::Sha256(Sha256::digest(b"").into())
        );
        assert!(!verified.presigned);
        assert_eq!(
            verified.context.scope(),
            "20130524/us-east-1/s3/aws4_request"
        );
        assert_eq!(verified.context.region(), "us-east-1");
        assert_eq!(verified.context.amz_date(), "20130524T000000Z");
        assert_eq!(
            verified.context.seed_signature(),
            "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    #[test]
    fn aws_example_get_object_over_http2_without_host_header() {
        let (method, _, mut headers) = get_object_example();
        headers.remove("host");
        let uri = uri("https://examplebucket.s3.amazonaws.com/test.txt");
        verify(&method, &uri, &headers, secrets, at("20130524T000000Z")).expect("verifies");
    }

    #[test]
    fn aws_example_put_object_with_date_header_and_dollar_in_key() {
        let signature = "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd";
        let headers = headers(&[
            ("host", "examplebucket.s3.amazonaws.com"),
            ("date", "Fri, 24 May 2013 00:00:00 GMT"),
            ("x-amz-date", "20130524T000000Z"),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
            (
                "x-amz-content-sha256",
                "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072",
            ),
            (
                "authorization",
                &auth(
                    "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
                    signature,
                ),
            ),
        ]);
        let verified = verify(
            &Method::PUT,
            &uri("/test$file.text"),
            &headers,
            secrets,
            at("20130524T000000Z"),
        )
        .expect("AWS example verifies");
        assert_eq!(
            verified.payload,
            Payload::Sha256(Sha256::digest(b"Welcome to Amazon S3.").into())
        );
    }

    #[test]
    fn aws_example_get_bucket_lifecycle_and_list_objects() {
        for (path, signature) in [
            (
                "/?lifecycle",
                "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543",
            ),
            (
                "/?max-keys=2&prefix=J",
                "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
            ),
        ] {
            let headers = headers(&[
                ("host", "examplebucket.s3.amazonaws.com"),
                ("x-amz-date", "20130524T000000Z"),
                ("x-amz-content-sha256", EMPTY_SHA256_HEX),
                (
                    "authorization",
                    &auth("host;x-amz-content-sha256;x-amz-date", signature),
                ),
            ]);
            verify(
                &Method::GET,
                &uri(path),
                &headers,
                secrets,
                at("20130524T000000Z"),
            )
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        }
    }

    const PRESIGNED_EXAMPLE: &str = "/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256\
        &X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request\
        &X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host\
        &X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";

    fn presigned_example_headers() -> HeaderMap {
        headers(&[("host", "examplebucket.s3.amazonaws.com")])
    }

    #[test]
    fn aws_example_presigned_get() {
        let verified = verify(
            &Method::GET,
            &uri(PRESIGNED_EXAMPLE),
            &presigned_example_headers(),
            secrets,
            at("20130524T120000Z"),
        )
        .expect("AWS presigned example verifies");
        assert!(verified.presigned);
        assert_eq!(verified.payload, Payload::Unsigned);
        assert_eq!(verified.access_key, AK);
    }

    #[test]
    fn presigned_expiry_and_future_dates() {
        let check = |now: &str| {
            verify(
                &Method::GET,
                &uri(PRESIGNED_EXAMPLE),
                &presigned_example_headers(),
                secrets,
                at(now),
            )
            .map(|_| ())
        };
        assert_eq!(check("20130525T000000Z"), Ok(()), "the last valid second");
        assert_eq!(check("20130525T000001Z"), Err(AuthError::Expired));
        assert_eq!(check("20130523T234600Z"), Ok(()), "14 minutes early");
        assert_eq!(
            check("20130523T234400Z"),
            Err(AuthError::RequestTimeTooSkewed),
            "16 minutes early"
        );
    }

    #[test]
    fn presigned_parameter_errors() {
        let now = at("20130524T120000Z");
        let run = |query: String| {
            verify(
                &Method::GET,
                &uri(&query),
                &presigned_example_headers(),
                secrets,
                now,
            )
            .map(|_| ())
        };
        let replace = |from: &str, to: &str| run(PRESIGNED_EXAMPLE.replacen(from, to, 1));
        assert_eq!(
            replace("X-Amz-Expires=86400", "X-Amz-Expires=604801"),
            Err(AuthError::ExpiresTooLarge)
        );
        assert_eq!(
            replace(
                "X-Amz-Expires=86400",
                "X-Amz-Expires=99999999999999999999999"
            ),
            Err(AuthError::ExpiresTooLarge)
        );
        for bad in [
            "X-Amz-Expires=0",
            "X-Amz-Expires=-5",
            "X-Amz-Expires=",
            "X-Amz-Expires=1h",
        ] {
            assert!(
                matches!(
                    replace("X-Amz-Expires=86400", bad),
                    Err(AuthError::Malformed(_))
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            replace("&X-Amz-Expires=86400", ""),
            Err(AuthError::Malformed(_))
        ));
        assert!(matches!(
            replace(
                "X-Amz-Date=20130524T000000Z",
                "X-Amz-Date=2013-05-24T00:00:00Z"
            ),
            Err(AuthError::Malformed(_))
        ));
        assert!(matches!(
            replace("X-Amz-SignedHeaders=host", "X-Amz-SignedHeaders=x-amz-date"),
            Err(AuthError::Malformed(_))
        ));
        assert_eq!(
            replace("AWS4-HMAC-SHA256", "AWS4-ECDSA-P256-SHA256"),
            Err(AuthError::UnsupportedAlgorithm)
        );
        assert!(matches!(
            replace("X-Amz-Algorithm=AWS4-HMAC-SHA256&", ""),
            Err(AuthError::Malformed(_))
        ));
        assert_eq!(
            replace("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7OTHERKEY"),
            Err(AuthError::UnknownAccessKey)
        );
        assert_eq!(
            replace("/test.txt", "/test2.txt"),
            Err(AuthError::SignatureMismatch)
        );
        assert!(matches!(
            run(format!("{PRESIGNED_EXAMPLE}&X-Amz-Date=20130524T000000Z")),
            Err(AuthError::Malformed(_))
        ));
        // An extra, unsigned parameter changes the canonical query string.
        assert_eq!(
            run(format!("{PRESIGNED_EXAMPLE}&versionId=1")),
            Err(AuthError::SignatureMismatch)
        );
        // Signature parameter order does not matter, only its exclusion.
        let reordered = PRESIGNED_EXAMPLE.replacen("X-Amz-Algorithm=AWS4-HMAC-SHA256&", "", 1)
            + "&X-Amz-Algorithm=AWS4-HMAC-SHA256";
        assert_eq!(run(reordered), Ok(()));
    }

    #[test]
    fn presigned_and_header_together_is_malformed() {
        let mut headers = presigned_example_headers();
        headers.insert(
            "authorization",
            http::HeaderValue::from_static("AWS4-HMAC-SHA256 Credential=x"),
        );
        let result = verify(
            &Method::GET,
            &uri(PRESIGNED_EXAMPLE),
            &headers,
            secrets,
            at("20130524T120000Z"),
        );
        assert!(matches!(result, Err(AuthError::Malformed(_))));
    }

    /// The request whose seed signature the S3 docs' streaming PUT example gives.
    fn streaming_example(content_sha: &str, trailer: bool) -> (Uri, HeaderMap) {
        let (signed, signature) = if trailer {
            (
                "content-encoding;host;x-amz-content-sha256;x-amz-date;\
                 x-amz-decoded-content-length;x-amz-storage-class;x-amz-trailer",
                "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e",
            )
        } else {
            (
                "content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;\
                 x-amz-decoded-content-length;x-amz-storage-class",
                "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9",
            )
        };
        let mut pairs = vec![
            ("host", "s3.amazonaws.com"),
            ("x-amz-date", "20130524T000000Z"),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
            ("x-amz-content-sha256", content_sha),
            ("content-encoding", "aws-chunked"),
            ("x-amz-decoded-content-length", "66560"),
            ("content-length", "66824"),
        ];
        if trailer {
            pairs.push(("x-amz-trailer", "x-amz-checksum-crc32c"));
        }
        let authorization = auth(signed, signature);
        pairs.push(("authorization", &authorization));
        (uri("/examplebucket/chunkObject.txt"), headers(&pairs))
    }

    #[test]
    fn aws_example_streaming_seed_signatures() {
        let (uri, headers) = streaming_example(STREAMING_PAYLOAD, false);
        let verified = verify(
            &Method::PUT,
            &uri,
            &headers,
            secrets,
            at("20130524T000000Z"),
        )
        .expect("streaming example verifies");
        assert_eq!(verified.payload, Payload::StreamingSigned);
        assert_eq!(
            verified.context.seed_signature(),
            "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
        );

        let (uri, headers) = streaming_example(STREAMING_PAYLOAD_TRAILER, true);
        let verified = verify(
            &Method::PUT,
            &uri,
            &headers,
            secrets,
            at("20130524T000000Z"),
        )
        .expect("streaming trailer example verifies");
        assert_eq!(verified.payload, Payload::StreamingSignedTrailer);
    }

    #[test]
    fn header_auth_time_checks() {
        let (method, uri, headers) = get_object_example();
        let run = |now: &str| verify(&method, &uri, &headers, secrets, at(now)).map(|_| ());
        assert_eq!(run("20130524T001500Z"), Ok(()));
        assert_eq!(run("20130523T234500Z"), Ok(()));
        assert_eq!(
            run("20130524T001501Z"),
            Err(AuthError::RequestTimeTooSkewed)
        );
        assert_eq!(
            run("20130523T234459Z"),
            Err(AuthError::RequestTimeTooSkewed)
        );
    }

    #[test]
    fn header_auth_date_errors() {
        let (method, uri, mut headers) = get_object_example();
        let now = at("20130524T000000Z");
        headers.insert("x-amz-date", http::HeaderValue::from_static("20130524"));
        assert_eq!(
            verify(&method, &uri, &headers, secrets, now).map(|_| ()),
            Err(AuthError::MissingDate)
        );
        headers.remove("x-amz-date");
        assert_eq!(
            verify(&method, &uri, &headers, secrets, now).map(|_| ()),
            Err(AuthError::MissingDate)
        );
        // Falling back to Date still has to match the signature (x-amz-date was signed).
        headers.insert(
            "date",
            http::HeaderValue::from_static("Fri, 24 May 2013 00:00:00 GMT"),
        );
        assert_eq!(
            verify(&method, &uri, &headers, secrets, now).map(|_| ()),
            Err(AuthError::SignatureMismatch)
        );
        // A scope date other than the signing date.
        let (method, uri, mut headers) = get_object_example();
        headers.insert(
            "x-amz-date",
            http::HeaderValue::from_static("20130525T000000Z"),
        );
        assert!(matches!(
            verify(&method, &uri, &headers, secrets, at("20130525T000000Z")),
            Err(AuthError::Malformed(_))
        ));
    }

    #[test]
    fn header_auth_errors() {
        let (method, uri, headers) = get_object_example();
        let now = at("20130524T000000Z");
        let with = |name: &'static str, value: &str| {
            let mut h = headers.clone();
            h.insert(
                name,
                http::HeaderValue::from_str(value).expect("test value"),
            );
            verify(&method, &uri, &h, secrets, now).map(|_| ())
        };
        assert_eq!(
            with("range", "bytes=0-10"),
            Err(AuthError::SignatureMismatch)
        );
        assert!(matches!(
            with("x-amz-content-sha256", "not-a-hash"),
            Err(AuthError::Malformed(_))
        ));
        assert!(matches!(
            with("x-amz-content-sha256", &"g".repeat(64)),
            Err(AuthError::Malformed(_))
        ));
        let signature = "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";
        let good = auth("host;range;x-amz-content-sha256;x-amz-date", signature);
        assert_eq!(
            with(
                "authorization",
                &good.replace("AKIAIOSFODNN7EXAMPLE", "NOPE")
            ),
            Err(AuthError::UnknownAccessKey)
        );
        assert_eq!(
            with(
                "authorization",
                &good.replace(signature, &signature.to_uppercase())
            ),
            Ok(()),
            "an uppercase hex signature is accepted"
        );
        for malformed in [
            good.replace("/s3/", "/ec2/"),
            good.replace("aws4_request", "aws5_request"),
            good.replace("host;", ""),
            good.replace(signature, "f0e8"),
            good.replace(",Signature=", ",Signature=x,Signature="),
            good.replace(",SignedHeaders", ",Foo=bar,SignedHeaders"),
            good.replace("Credential=AKIAIOSFODNN7EXAMPLE/", "Credential="),
            good.replace("20130524/", "2013052/"),
            good.replace(",Signature", ",Junk,Signature"),
            "AWS4-HMAC-SHA256 ".to_owned(),
            String::new(),
        ] {
            assert!(
                matches!(
                    with("authorization", &malformed),
                    Err(AuthError::Malformed(_))
                ),
                "{malformed}"
            );
        }
        for unsupported in [
            "AWS AKIAIOSFODNN7EXAMPLE:frJIUN8DYpKDtOLCwo//yllqDzg=",
            "AWS4-ECDSA-P256-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/s3/aws4_request, \
             SignedHeaders=host, Signature=3045",
        ] {
            assert_eq!(
                with("authorization", unsupported),
                Err(AuthError::UnsupportedAlgorithm)
            );
        }
        let mut h = headers.clone();
        h.remove("x-amz-content-sha256");
        assert_eq!(
            verify(&method, &uri, &h, secrets, now).map(|_| ()),
            Err(AuthError::Malformed(
                "Missing required header for this request: x-amz-content-sha256".to_owned()
            ))
        );
    }

    #[test]
    fn unsigned_amz_headers_are_refused() {
        let (method, uri, mut headers) = get_object_example();
        headers.insert("x-amz-acl", http::HeaderValue::from_static("public-read"));
        headers.insert("x-amz-meta-a", http::HeaderValue::from_static("1"));
        headers.insert(
            "x-other",
            http::HeaderValue::from_static("not x-amz-: ignored"),
        );
        assert_eq!(
            verify(&method, &uri, &headers, secrets, at("20130524T000000Z")).map(|_| ()),
            Err(AuthError::Malformed(
                "There were headers present in the request which were not signed: \
                 x-amz-acl, x-amz-meta-a"
                    .to_owned()
            ))
        );
        let mut headers = presigned_example_headers();
        headers.insert(
            "x-amz-copy-source",
            http::HeaderValue::from_static("/other/object"),
        );
        assert_eq!(
            verify(
                &Method::GET,
                &uri_presigned(),
                &headers,
                secrets,
                at("20130524T000000Z")
            )
            .map(|_| ()),
            Err(AuthError::Malformed(
                "There were headers present in the request which were not signed: \
                 x-amz-copy-source"
                    .to_owned()
            ))
        );
    }

    fn uri_presigned() -> Uri {
        uri(PRESIGNED_EXAMPLE)
    }

    #[test]
    fn authorization_spacing_variants() {
        let signature = "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";
        let (method, uri, headers) = get_object_example();
        for value in [
            format!(
                "AWS4-HMAC-SHA256 Credential={AK}/20130524/us-east-1/s3/aws4_request, \
                 SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature={signature}"
            ),
            format!(
                "AWS4-HMAC-SHA256   Credential={AK}/20130524/us-east-1/s3/aws4_request ,  \
                 SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature={signature}"
            ),
            format!(
                "AWS4-HMAC-SHA256 Signature={signature},Credential={AK}/20130524/us-east-1/s3/\
                 aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date"
            ),
        ] {
            let mut h = headers.clone();
            h.insert(
                "authorization",
                http::HeaderValue::from_str(&value).expect("test value"),
            );
            verify(&method, &uri, &h, secrets, at("20130524T000000Z"))
                .unwrap_or_else(|e| panic!("{value}: {e}"));
        }
    }

    #[test]
    fn missing_and_v2_query() {
        let now = at("20130524T000000Z");
        let h = headers(&[("host", "examplebucket.s3.amazonaws.com")]);
        assert_eq!(
            verify(
                &Method::GET,
                &uri("/test.txt?versionId=3"),
                &h,
                secrets,
                now
            )
            .map(|_| ()),
            Err(AuthError::Missing)
        );
        assert_eq!(
            verify(
                &Method::GET,
                &uri("/test.txt?AWSAccessKeyId=AK&Expires=1&Signature=abc%3D"),
                &h,
                secrets,
                now
            )
            .map(|_| ()),
            Err(AuthError::UnsupportedAlgorithm)
        );
    }

    /// Signs `canonical` (written out by hand in the test) as a client would, so the test checks
    /// canonicalisation against an independent expectation rather than against itself.
    fn sign_canonical(canonical: &str, amz_date: &str) -> String {
        let context = SigningContext::new(SECRET, amz_date, "us-east-1", "").expect("context");
        context.sign(string_to_sign(&context, canonical.as_bytes()).as_bytes())
    }

    #[test]
    fn canonicalisation_of_headers_query_and_path() {
        let canonical = "PUT\n\
            /b/a%20b/c%2Bd/%C3%BC/..//x%21%2A\n\
            A=upper&acl=&prefix=a%2Bb%2Fc&z=1&z=2\n\
            host:h.example:9000\n\
            x-amz-content-sha256:UNSIGNED-PAYLOAD\n\
            x-amz-date:20130524T000000Z\n\
            x-amz-meta-a:one,two\n\
            x-amz-meta-b:spaced out\tand tab\n\
            \n\
            host;x-amz-content-sha256;x-amz-date;x-amz-meta-a;x-amz-meta-b\n\
            UNSIGNED-PAYLOAD";
        let signature = sign_canonical(canonical, "20130524T000000Z");
        let h = headers(&[
            ("host", "h.example:9000"),
            ("x-amz-content-sha256", "UNSIGNED-PAYLOAD"),
            ("x-amz-date", "20130524T000000Z"),
            ("x-amz-meta-a", "one"),
            ("x-amz-meta-a", "two"),
            ("x-amz-meta-b", "  spaced    out\tand tab  "),
            (
                "authorization",
                &auth(
                    "host;x-amz-content-sha256;x-amz-date;x-amz-meta-a;x-amz-meta-b",
                    &signature,
                ),
            ),
        ]);
        // Raw '!' and '*' are re-encoded, '%2B' in the query is a plus, '/' in a value is
        // encoded, `..` and `//` are left alone, and `&&` yields nothing.
        let target = uri("/b/a%20b/c%2Bd/%c3%bc/..//x!*?z=2&prefix=a%2Bb/c&&acl&z=1&A=upper");
        let verified = verify(&Method::PUT, &target, &h, secrets, at("20130524T000000Z"))
            .expect("hand-written canonical request matches");
        assert_eq!(verified.payload, Payload::Unsigned);
    }

    /// A raw `+` in the query is a space, as the handlers read it: it signs as `%20` (as a
    /// space sent as `%20` does), never as `%2B`, which is the one spelling of a plus.
    #[test]
    fn a_raw_plus_in_the_query_signs_as_a_space() {
        let signed_for = |canonical_prefix: &str, sent_prefix: &str| {
            let canonical = format!(
                "GET\n/b\nlist-type=2&prefix={canonical_prefix}\nhost:h\n\
                 x-amz-content-sha256:UNSIGNED-PAYLOAD\nx-amz-date:20130524T000000Z\n\n\
                 host;x-amz-content-sha256;x-amz-date\nUNSIGNED-PAYLOAD"
            );
            let signature = sign_canonical(&canonical, "20130524T000000Z");
            let h = headers(&[
                ("host", "h"),
                ("x-amz-content-sha256", "UNSIGNED-PAYLOAD"),
                ("x-amz-date", "20130524T000000Z"),
                (
                    "authorization",
                    &auth("host;x-amz-content-sha256;x-amz-date", &signature),
                ),
            ]);
            let target = uri(&format!("/b?list-type=2&prefix={sent_prefix}"));
            verify(&Method::GET, &target, &h, secrets, at("20130524T000000Z")).map(|_| ())
        };
        assert_eq!(signed_for("a%20b", "a+b"), Ok(()));
        assert_eq!(signed_for("a%20b", "a%20b"), Ok(()));
        assert_eq!(signed_for("a%2Bb", "a%2Bb"), Ok(()));
        assert_eq!(
            signed_for("a%2Bb", "a+b"),
            Err(AuthError::SignatureMismatch)
        );
        assert_eq!(
            signed_for("a%20b", "a%2Bb"),
            Err(AuthError::SignatureMismatch)
        );
    }

    #[test]
    fn a_credential_for_another_region_is_refused() {
        let (method, uri_, headers_) = get_object_example();
        let now = at("20130524T000000Z");
        super::verify(&method, &uri_, &headers_, secrets, now, Some("us-east-1"))
            .expect("the example's own region");
        let wrong = super::verify(&method, &uri_, &headers_, secrets, now, Some("eu-west-1"));
        assert_eq!(
            wrong.map(|_| ()),
            Err(AuthError::Malformed(
                "The authorization header is malformed; the region 'us-east-1' is wrong; \
                 expecting 'eu-west-1'"
                    .into()
            ))
        );
        // Refused before the key or the signature is looked at, as S3 does.
        let mut forged = headers_.clone();
        forged.insert(
            "authorization",
            http::HeaderValue::from_str(&auth(
                "host;range;x-amz-content-sha256;x-amz-date",
                &"0".repeat(64),
            ))
            .expect("test value"),
        );
        assert!(matches!(
            super::verify(&method, &uri_, &forged, secrets, now, Some("eu-west-1")),
            Err(AuthError::Malformed(m)) if m.contains("the region 'us-east-1' is wrong")
        ));
        let presigned = uri_presigned();
        let h = headers(&[("host", "examplebucket.s3.amazonaws.com")]);
        assert!(matches!(
            super::verify(&Method::GET, &presigned, &h, secrets, now, Some("eu-west-1")),
            Err(AuthError::Malformed(m)) if m == "Error parsing the X-Amz-Credential parameter; \
                the region 'us-east-1' is wrong; expecting 'eu-west-1'"
        ));
        super::verify(
            &Method::GET,
            &presigned,
            &h,
            secrets,
            now,
            Some("us-east-1"),
        )
        .expect("presigned in the example's own region");
    }

    /// Requests captured from botocore 1.43 (boto3 / aws cli) with an access key and secret full
    /// of `+`, `/`, `=` and spaces and a UTF-8 key with every reserved character.
    mod boto {
        use super::*;

        const BOTO_AK: &str = "AKIDEXAMPLE+/=";
        const BOTO_SECRET: &str = "secret/with+chars=and space";
        const KEY_PATH: &str =
            "/bkt/dir/my%20file%2Bplus%3Deq/%C3%BC~%21%24%26%27%28%29%2A%2C%3B%3A%40%5B%5D.txt";

        fn boto_secrets(access_key: &str) -> Option<String> {
            (access_key == BOTO_AK).then(|| BOTO_SECRET.to_owned())
        }

        fn boto_auth(signed: &str, signature: &str) -> String {
            format!(
                "AWS4-HMAC-SHA256 Credential={BOTO_AK}/20261121/eu-west-3/s3/aws4_request, \
                 SignedHeaders={signed}, Signature={signature}"
            )
        }

        fn check(method: Method, target: &str, pairs: &[(&str, &str)]) -> Verified {
            let uri = uri(target);
            let h = headers(pairs);
            let date = h
                .get("x-amz-date")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("20261121T091802Z")
                .to_owned();
            verify(&method, &uri, &h, boto_secrets, at(&date))
                .unwrap_or_else(|e| panic!("{method} {target}: {e}"))
        }

        #[test]
        fn put_object_with_reserved_characters() {
            let verified = check(
                Method::PUT,
                KEY_PATH,
                &[
                    ("host", "127.0.0.1:9000"),
                    ("expect", "100-continue"),
                    ("x-amz-checksum-crc32", "6LiFlw=="),
                    ("x-amz-sdk-checksum-algorithm", "CRC32"),
                    ("x-amz-date", "20261121T091802Z"),
                    (
                        "x-amz-content-sha256",
                        "98f8892ddbfc92986d180809f0605787c75a5881583e8126746d8271e36cd782",
                    ),
                    (
                        "authorization",
                        &boto_auth(
                            "host;x-amz-checksum-crc32;x-amz-content-sha256;x-amz-date;\
                             x-amz-sdk-checksum-algorithm",
                            "5a939b160f74ebecc3235bcb47bb0699bbe471bf74acad21d267e3b081ddb6ef",
                        ),
                    ),
                    ("content-length", "110"),
                ],
            );
            assert_eq!(verified.access_key, BOTO_AK);
            assert_eq!(
                verified.payload,
                Payload::Sha256(Sha256::digest(b"hello world".repeat(10)).into())
            );
            assert_eq!(verified.context.region(), "eu-west-3");
        }

        #[test]
        fn get_and_list_with_reserved_characters() {
            let common = |signed: &str, signature: &str| {
                vec![
                    ("host".to_owned(), "127.0.0.1:9000".to_owned()),
                    ("x-amz-date".to_owned(), "20261121T091802Z".to_owned()),
                    (
                        "x-amz-content-sha256".to_owned(),
                        EMPTY_SHA256_HEX.to_owned(),
                    ),
                    ("authorization".to_owned(), boto_auth(signed, signature)),
                ]
            };
            let cases = [
                (
                    Method::GET,
                    KEY_PATH.to_owned(),
                    "host;range;x-amz-checksum-mode;x-amz-content-sha256;x-amz-date",
                    "9fb3834496b550f8255cdc14eda32412a1090f06668fe5856ec4614dea686555",
                    vec![("range", "bytes=0-3"), ("x-amz-checksum-mode", "ENABLED")],
                ),
                (
                    Method::GET,
                    "/bkt?list-type=2&prefix=a%20b%2Bc%2F%3Dd%26e&delimiter=%2F\
                     &start-after=x~y%2Az&encoding-type=url"
                        .to_owned(),
                    "host;x-amz-content-sha256;x-amz-date",
                    "1ef0e7a189bda6da385a27b374d897e3e778ab8b0347b3314298e4bf3643f4d3",
                    vec![],
                ),
                (
                    Method::GET,
                    "/bkt?prefix=%C3%BC%2F&marker=&encoding-type=url".to_owned(),
                    "host;x-amz-content-sha256;x-amz-date",
                    "07e70c5fa9a6322ccc2edd98ad5092d5389d7a499a89a886ed8f86e018bbf80b",
                    vec![],
                ),
                (
                    Method::POST,
                    "/bkt/k//double/./dot/../x?uploads".to_owned(),
                    "host;x-amz-content-sha256;x-amz-date",
                    "512a688be9c8b3a2d75ed79db583eb711a05cb8a79cb9b72fe126c2fe6ae0b97",
                    vec![("content-length", "0")],
                ),
            ];
            for (method, target, signed, signature, extra) in cases {
                let mut pairs = common(signed, signature);
                pairs.extend(
                    extra
                        .iter()
                        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned())),
                );
                let borrowed: Vec<(&str, &str)> = pairs
                    .iter()
                    .map(|(n, v)| (n.as_str(), v.as_str()))
                    .collect();
                check(method, &target, &borrowed);
            }
        }

        #[test]
        fn streaming_unsigned_trailer_put() {
            let verified = check(
                Method::PUT,
                "/bkt/big",
                &[
                    ("host", "127.0.0.1:9443"),
                    ("expect", "100-continue"),
                    ("transfer-encoding", "chunked"),
                    ("content-encoding", "aws-chunked"),
                    ("x-amz-trailer", "x-amz-checksum-crc32"),
                    ("x-amz-decoded-content-length", "100000"),
                    ("x-amz-sdk-checksum-algorithm", "CRC32"),
                    ("x-amz-date", "20261121T091807Z"),
                    ("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"),
                    (
                        "authorization",
                        &boto_auth(
                            "content-encoding;host;x-amz-content-sha256;x-amz-date;\
                             x-amz-decoded-content-length;x-amz-sdk-checksum-algorithm;\
                             x-amz-trailer",
                            "53b7f6b141164f6acd328a2d4fbb92974fc049dc35cfa39cf16c93e0b92f4ff5",
                        ),
                    ),
                ],
            );
            assert_eq!(verified.payload, Payload::StreamingUnsignedTrailer);
        }

        #[test]
        fn presigned_get_with_response_override() {
            let target = format!(
                "{KEY_PATH}?response-content-disposition=attachment%3B%20filename%3D%22a%20b%2Bc.txt%22\
                 &X-Amz-Algorithm=AWS4-HMAC-SHA256\
                 &X-Amz-Credential=AKIDEXAMPLE%2B%2F%3D%2F20261121%2Feu-west-3%2Fs3%2Faws4_request\
                 &X-Amz-Date=20261121T091802Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host\
                 &X-Amz-Signature=d2591e907069a46d11149dbc35d0d64570b5c9aeb1de9c983dbb961a4a4fb676"
            );
            let h = headers(&[("host", "127.0.0.1:9000")]);
            let now = at("20261121T095000Z");
            let verified = verify(&Method::GET, &uri(&target), &h, boto_secrets, now)
                .expect("boto presigned URL verifies");
            assert!(verified.presigned);
            assert_eq!(verified.access_key, BOTO_AK);
            assert_eq!(
                verify(
                    &Method::GET,
                    &uri(&target),
                    &h,
                    boto_secrets,
                    at("20261121T101803Z")
                )
                .map(|_| ()),
                Err(AuthError::Expired)
            );
        }
    }

    #[test]
    fn signing_context_new_and_sign() {
        let context =
            SigningContext::new(SECRET, "20130524T000000Z", "us-east-1", "seed").expect("ok");
        assert_eq!(context.amz_date(), "20130524T000000Z");
        assert_eq!(context.scope(), "20130524/us-east-1/s3/aws4_request");
        assert_eq!(context.region(), "us-east-1");
        assert_eq!(context.seed_signature(), "seed");
        // The first chunk of the S3 docs' streaming example.
        let string_to_sign = format!(
            "AWS4-HMAC-SHA256-PAYLOAD\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n\
             4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9\n{EMPTY_SHA256_HEX}\n{}",
            hex::encode(Sha256::digest(vec![b'a'; 65536]))
        );
        assert_eq!(
            context.sign(string_to_sign.as_bytes()),
            "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648"
        );
        assert!(!format!("{context:?}").contains(&hex::encode(&context.key)));
        for bad in [
            "20130524",
            "2013-05-24T00:00:00Z",
            "20131324T000000Z",
            "+0130524T000000Z",
        ] {
            assert!(matches!(
                SigningContext::new(SECRET, bad, "us-east-1", ""),
                Err(AuthError::Malformed(_))
            ));
        }
    }

    #[test]
    fn payload_parse() {
        assert_eq!(Payload::parse(b"UNSIGNED-PAYLOAD"), Ok(Payload::Unsigned));
        assert_eq!(
            Payload::parse(STREAMING_PAYLOAD.as_bytes()),
            Ok(Payload::StreamingSigned)
        );
        assert_eq!(
            Payload::parse(STREAMING_PAYLOAD_TRAILER.as_bytes()),
            Ok(Payload::StreamingSignedTrailer)
        );
        assert_eq!(
            Payload::parse(STREAMING_UNSIGNED_PAYLOAD_TRAILER.as_bytes()),
            Ok(Payload::StreamingUnsignedTrailer)
        );
        assert_eq!(
            Payload::parse(EMPTY_SHA256_HEX.to_uppercase().as_bytes()),
            Ok(Payload::Sha256(Sha256::digest(b"").into()))
        );
        for bad in [
            &b"unsigned-payload"[..],
            &b""[..],
            &b"abc"[..],
            &[b'0'; 63][..],
            &[b'0'; 65][..],
        ] {
            assert!(matches!(Payload::parse(bad), Err(AuthError::Malformed(_))));
        }
    }

    #[test]
    fn http_date_parsing() {
        assert_eq!(
            parse_http_date("Fri, 24 May 2013 00:00:00 GMT"),
            parse_amz_date("20130524T000000Z")
        );
        assert_eq!(parse_http_date("Fri, 24 May 2013 00:00:00 UTC"), None);
        assert_eq!(parse_http_date("2013-05-24"), None);
    }

    /// HMAC-SHA256 written with the `hmac` crate directly, so the expected POST signature
    /// does not come from the code under test.
    fn hmac256(key: &[u8], data: &[u8]) -> Vec<u8> {
        use hmac::{KeyInit as _, Mac as _};
        let mut mac = hmac::Hmac::<Sha256>::new_from_slice(key).unwrap();
        mac.update(data);
        mac.finalize().into_bytes().to_vec()
    }

    #[test]
    fn a_post_form_signs_its_base64_policy_with_the_days_signing_key() {
        let secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
        let policy = "eyJleHBpcmF0aW9uIjogIjIwMTUtMTItMzBUMTI6MDA6MDAuMDAwWiJ9";
        let mut key = hmac256(format!("AWS4{secret}").as_bytes(), b"20151229");
        for part in ["us-east-1", "s3", "aws4_request"] {
            key = hmac256(&key, part.as_bytes());
        }
        let signature = hex::encode(hmac256(&key, policy.as_bytes()));
        let secrets = |k: &str| (k == "AKIAIOSFODNN7EXAMPLE").then(|| secret.to_string());
        let form = PostForm {
            algorithm: ALGORITHM,
            credential: "AKIAIOSFODNN7EXAMPLE/20151229/us-east-1/s3/aws4_request",
            amz_date: "20151229T000000Z",
            signature: &signature,
            policy,
        };
        let region = Some("us-east-1");
        assert_eq!(
            verify_post_policy(&form, secrets, region).as_deref(),
            Ok("AKIAIOSFODNN7EXAMPLE")
        );
        let upper = signature.to_ascii_uppercase();
        let cases = [
            (
                PostForm {
                    signature: &upper,
                    ..form
                },
                Ok(()),
            ),
            (
                PostForm {
                    policy: "eyJ0YW1wZXJlZCI6IDF9",
                    ..form
                },
                Err(AuthError::SignatureMismatch),
            ),
            (
                PostForm {
                    credential: "NOBODY/20151229/us-east-1/s3/aws4_request",
                    ..form
                },
                Err(AuthError::UnknownAccessKey),
            ),
            (
                PostForm {
                    algorithm: "AWS4-ECDSA-P256-SHA256",
                    ..form
                },
                Err(AuthError::UnsupportedAlgorithm),
            ),
        ];
        for (f, want) in cases {
            let got = verify_post_policy(&f, secrets, region).map(|_| ());
            assert_eq!(got, want, "{f:?}");
        }
        for f in [
            PostForm {
                amz_date: "20151230T000000Z",
                ..form
            },
            PostForm {
                amz_date: "2015-12-29",
                ..form
            },
            PostForm {
                signature: "abc",
                ..form
            },
            PostForm {
                credential: "AKIAIOSFODNN7EXAMPLE/20151229/eu-west-1/s3/aws4_request",
                ..form
            },
        ] {
            assert!(
                matches!(
                    verify_post_policy(&f, secrets, region),
                    Err(AuthError::Malformed(_))
                ),
                "{f:?}"
            );
        }
    }
}
