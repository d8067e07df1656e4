//! POST Object: an upload from an HTML form, as a browser sends it (`multipart/form-data`
//! POSTed to the bucket's URL).
//!
//! The request carries no signature of its own: the form holds a `policy` that the page's
//! back end signed (SigV4 `x-amz-signature` or V2 `signature`), and the policy's conditions
//! bind every other field. The authentication layer lets exactly this request shape through
//! unsigned ([`super::request::is_form_upload_request`]); this handler reads the fields
//! before the file, checks the signature, the policy and the signer's rights, then streams
//! the file into the same store path as a PUT. Fields after the file are never read, as on S3.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{Stream, StreamExt as _};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use percent_encoding::utf8_percent_encode;

use super::access;
use super::auth::{auth_error, body_stream, catch_up};
use super::body_check::{EndCheck, check_at_end};
use super::error::{ErrorCode, S3Error};
use super::object::{BodyStream, attrs_from, with_checksum};
use super::post_policy::{self, FormFields};
use super::request::virtual_host_bucket;
use super::sigv4::{self, AuthError, PATH_ENCODE_SET, QUERY_ENCODE_SET};
use super::xml::XmlWriter;
use crate::state::AppState;
use crate::store::PutRequest;
use meta::acl::CannedAcl;
use meta::keys::Rights;
use meta::tags::TagSet;

/// Bound on the names and values of the fields before the file, as S3's 20 KB.
pub const FIELDS_BYTES_MAX: usize = 20 * 1024;
/// Bound on the number of fields before the file.
pub const FIELDS_MAX: usize = 100;
/// Bound on the bytes read before the file part starts: the fields, their part headers
/// (a part header with no end would otherwise be buffered whole by the parser) and the
/// one piece read ahead.
const PRELUDE_BYTES_MAX: u64 = 128 * 1024;
/// Before the file, the body is handed to the parser in pieces of at most this size, one
/// per poll, so that it reads ahead by one piece only.
const PRELUDE_PIECE_BYTES: usize = 4 * 1024;

/// Form fields copied to the object as the headers of a PUT would be: the stored standard
/// headers and the flexible checksums. `x-amz-meta-*` are copied too. The `tagging` field
/// is a `<Tagging>` document (not `x-amz-tagging`'s query form), read by [`form_tags`].
const HEADER_FIELDS: [&str; 10] = [
    "content-type",
    "cache-control",
    "content-disposition",
    "content-encoding",
    "expires",
    "x-amz-checksum-crc32",
    "x-amz-checksum-crc32c",
    "x-amz-checksum-crc64nvme",
    "x-amz-checksum-sha1",
    "x-amz-checksum-sha256",
];

/// Fields that ask for something this gateway does not do; refused rather than dropped,
/// so a page never believes an object was stored as it asked when it was not.
const REFUSED_PREFIXES: [&str; 5] = [
    "x-amz-server-side-encryption",
    "x-amz-object-lock-",
    "x-amz-grant-",
    "x-amz-website-redirect-location",
    "x-amz-security-token",
];

/// Errors of the body as the multipart parser reads it.
#[derive(Debug, thiserror::Error)]
enum FormBodyError {
    #[error("the fields before the file exceed {PRELUDE_BYTES_MAX} bytes")]
    PreludeTooLarge,
    #[error("{0}")]
    Body(S3Error),
}

/// The request body as the parser sees it: before the file (until `in_file` is set), in
/// small pieces with a yield between them and at most [`PRELUDE_BYTES_MAX`] in all; the
/// parser reads its input greedily, and this keeps what it buffers while it looks for the
/// end of a field small. From the file on, the body as it comes.
struct Paced<S> {
    inner: S,
    in_file: Arc<AtomicBool>,
    held: Option<Bytes>,
    read: u64,
    just_gave: bool,
}

impl<S> Stream for Paced<S>
where
    S: Stream<Item = Result<Bytes, S3Error>> + Unpin,
{
    type Item = Result<Bytes, FormBodyError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.in_file.load(Ordering::Relaxed) {
            if let Some(held) = this.held.take() {
                return Poll::Ready(Some(Ok(held)));
            }
            return this
                .inner
                .poll_next_unpin(cx)
                .map(|item| item.map(|r| r.map_err(FormBodyError::Body)));
        }
        if this.just_gave {
            this.just_gave = false;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let mut chunk = match this.held.take() {
            Some(held) => held,
            None => match this.inner.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(chunk))) => chunk,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(FormBodyError::Body(e)))),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            },
        };
        if chunk.len() > PRELUDE_PIECE_BYTES {
            this.held = Some(chunk.split_off(PRELUDE_PIECE_BYTES));
        }
        this.read += chunk.len() as u64;
        if this.read > PRELUDE_BYTES_MAX {
            return Poll::Ready(Some(Err(FormBodyError::PreludeTooLarge)));
        }
        this.just_gave = true;
        Poll::Ready(Some(Ok(chunk)))
    }
}

fn malformed() -> S3Error {
    S3Error::new(
        ErrorCode::MalformedPOSTRequest,
        "The body of your POST request is not well-formed multipart/form-data.",
    )
}

fn prelude_too_large() -> S3Error {
    S3Error::new(
        ErrorCode::MaxPostPreDataLengthExceededError,
        "Your POST request fields preceding the upload file were too large.",
    )
}

fn must_contain(field: &str) -> S3Error {
    S3Error::new(
        ErrorCode::InvalidArgument,
        format!(
            "Bucket POST must contain a field named '{field}'.  If it is specified, please check the order of the fields."
        ),
    )
}

/// A parser error as S3 answers it; `in_file`: the file was streaming (a cut body is then
/// an incomplete one, not a malformed form).
fn form_error(e: multer::Error, in_file: bool) -> S3Error {
    match e {
        multer::Error::StreamReadFailed(inner) => match inner.downcast::<FormBodyError>() {
            Ok(b) => match *b {
                FormBodyError::PreludeTooLarge => prelude_too_large(),
                FormBodyError::Body(e) => e,
            },
            Err(_) => malformed(),
        },
        multer::Error::IncompleteFieldData { .. } | multer::Error::IncompleteStream if in_file => {
            S3Error::new(
                ErrorCode::IncompleteBody,
                "The request body ended before the file was complete",
            )
        }
        _ => malformed(),
    }
}

/// The fields before the file, and the file part with the name the browser gave it.
async fn read_form(
    multipart: &mut multer::Multipart<'static>,
) -> Result<(FormFields, String, multer::Field<'static>), S3Error> {
    let mut fields = FormFields::default();
    let mut bytes = 0usize;
    loop {
        let Some(mut field) = multipart
            .next_field()
            .await
            .map_err(|e| form_error(e, false))?
        else {
            return Err(S3Error::new(
                ErrorCode::InvalidArgument,
                "POST requires exactly one file upload per request.",
            ));
        };
        let name = field.name().ok_or_else(malformed)?.to_ascii_lowercase();
        if name == "file" {
            let filename = field.file_name().unwrap_or_default().to_string();
            return Ok((fields, filename, field));
        }
        if fields.len() >= FIELDS_MAX {
            return Err(prelude_too_large());
        }
        bytes += name.len();
        let mut value = Vec::new();
        while let Some(chunk) = field.chunk().await.map_err(|e| form_error(e, false))? {
            bytes += chunk.len();
            if bytes > FIELDS_BYTES_MAX {
                return Err(prelude_too_large());
            }
            value.extend_from_slice(&chunk);
        }
        let value = String::from_utf8(value).map_err(|_| {
            S3Error::new(
                ErrorCode::InvalidArgument,
                format!("The POST form field {name} is not valid UTF-8."),
            )
        })?;
        if !fields.insert(&name, value) {
            return Err(S3Error::new(
                ErrorCode::InvalidArgument,
                format!("The POST form field {name} is given more than once."),
            ));
        }
    }
}

/// The access key whose signature the form carries, checked against its policy text.
/// A form with neither policy nor signature is anonymous, which no bucket here allows.
async fn signer(app: &AppState, form: &FormFields) -> Result<String, S3Error> {
    let field = |name: &str| form.get(name).ok_or_else(|| must_contain(name));
    let v4 = form.get("x-amz-algorithm").is_some() || form.get("x-amz-signature").is_some();
    let v2 = form.get("awsaccesskeyid").is_some() || form.get("signature").is_some();
    if !v4 && !v2 && form.get("policy").is_none() {
        return Err(S3Error::new(ErrorCode::AccessDenied, "Access Denied"));
    }
    let policy = field("policy")?;
    let verify = || -> Result<Result<String, AuthError>, S3Error> {
        let secret_for = |key: &str| access::secret_for(app, key);
        if v4 {
            let form = sigv4::PostForm {
                algorithm: field("x-amz-algorithm")?,
                credential: field("x-amz-credential")?,
                amz_date: field("x-amz-date")?,
                signature: field("x-amz-signature")?,
                policy,
            };
            let region = (!app.signatures.any_region).then_some(app.region.as_str());
            Ok(sigv4::verify_post_policy(&form, secret_for, region))
        } else {
            let (key, signature) = (field("awsaccesskeyid")?, field("signature")?);
            Ok(super::sigv2::verify_post_policy(
                key, policy, signature, secret_for,
            ))
        }
    };
    let mut verified = verify()?;
    // A key created a moment ago through another node.
    if matches!(verified, Err(AuthError::UnknownAccessKey)) && catch_up(app).await {
        verified = verify()?;
    }
    verified.map_err(|e| match e {
        // A form has no Authorization header to be malformed: the field is the argument.
        AuthError::Malformed(m) => S3Error::new(ErrorCode::InvalidArgument, m),
        e => auth_error(e, false),
    })
}

/// Refuses the fields that ask for what is not kept: a storage class other than STANDARD,
/// encryption, object lock, grants, session tokens (the `acl` field is read as `x-amz-acl`).
fn refuse_unsupported(form: &FormFields) -> Result<(), S3Error> {
    for (name, value) in form.iter() {
        let refused = match name {
            "x-amz-storage-class" => value != "STANDARD",
            _ => REFUSED_PREFIXES.iter().any(|p| name.starts_with(p)),
        };
        if refused {
            return Err(S3Error::not_implemented(&format!(
                "The POST form field {name}={value:?}"
            )));
        }
    }
    Ok(())
}

/// The fields that describe the object, as the request headers a PUT would carry, so the
/// object is described (and its metadata bounded and checked) exactly as by a PUT.
fn object_headers(form: &FormFields) -> Result<HeaderMap, S3Error> {
    let mut headers = HeaderMap::new();
    for (name, value) in form.iter() {
        let as_header = match name {
            "x-amz-checksum-algorithm" => "x-amz-sdk-checksum-algorithm",
            n if HEADER_FIELDS.contains(&n) || n.starts_with("x-amz-meta-") => n,
            _ => continue,
        };
        let invalid = || {
            S3Error::new(
                ErrorCode::InvalidArgument,
                format!("The POST form field {name} is not a valid header value."),
            )
        };
        let n = HeaderName::from_bytes(as_header.as_bytes()).map_err(|_| invalid())?;
        let v = HeaderValue::from_str(value).map_err(|_| invalid())?;
        headers.insert(n, v);
    }
    Ok(headers)
}

/// The `tagging` field: the object's tags as a `<Tagging>` document, as S3 takes it in a
/// form (none without the field).
fn form_tags(form: &FormFields) -> Result<TagSet, S3Error> {
    match form.get("tagging") {
        Some(doc) if doc.len() > super::tagging::TAGGING_BODY_BYTES_MAX => Err(S3Error::new(
            ErrorCode::MalformedXML,
            "The tagging field is too long",
        )),
        Some(doc) => super::tagging::from_form_field(doc),
        None => Ok(TagSet::default()),
    }
}

/// The file's size must lie within the policy's `content-length-range`: too large is
/// refused as soon as it is, too small when the file ends, before anything is committed.
fn within_length(stream: BodyStream, (min, max): (u64, u64)) -> BodyStream {
    let mut seen = 0u64;
    let capped = stream.map(move |item| {
        let chunk = item?;
        seen += chunk.len() as u64;
        if seen > max {
            return Err(S3Error::new(
                ErrorCode::EntityTooLarge,
                "Your proposed upload exceeds the maximum allowed size",
            ));
        }
        Ok(chunk)
    });
    Box::new(check_at_end(capped, AtLeast { seen: 0, min }))
}

struct AtLeast {
    seen: u64,
    min: u64,
}

impl EndCheck for AtLeast {
    type Error = S3Error;

    fn update(&mut self, chunk: &[u8]) {
        self.seen += chunk.len() as u64;
    }

    fn finish(self) -> Result<(), S3Error> {
        if self.seen >= self.min {
            return Ok(());
        }
        Err(S3Error::new(
            ErrorCode::EntityTooSmall,
            "Your proposed upload is smaller than the minimum allowed size",
        ))
    }
}

/// Handles a form upload to `bucket`.
pub async fn post(app: &AppState, bucket: &str, req: Request) -> Result<Response, S3Error> {
    let (parts, body) = req.into_parts();
    let boundary = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| multer::parse_boundary(v).ok())
        .ok_or_else(malformed)?;
    let in_file = Arc::new(AtomicBool::new(false));
    let paced = Paced {
        inner: body_stream(body),
        in_file: in_file.clone(),
        held: None,
        read: 0,
        just_gave: false,
    };
    let mut multipart = multer::Multipart::new(paced, boundary);
    let (form, filename, file) = read_form(&mut multipart).await?;
    in_file.store(true, Ordering::Relaxed);

    let key_field = form.get("key").ok_or_else(|| must_contain("key"))?;
    let access_key = signer(app, &form).await?;
    let policy_text = form.get("policy").unwrap_or_default();
    let policy = post_policy::parse(policy_text)
        .map_err(|e| S3Error::new(ErrorCode::InvalidPolicyDocument, e.to_string()))?;
    policy
        .check(&form, bucket, time::OffsetDateTime::now_utc())
        .map_err(|v| S3Error::new(ErrorCode::AccessDenied, v.to_string()))?;
    let caller = access::caller(app, &access_key);
    access::authorize(app, &caller, bucket, Rights::WRITE).await?;
    refuse_unsupported(&form)?;

    let headers = object_headers(&form)?;
    let attrs = attrs_from(&headers)?;
    let tags = form_tags(&form)?;
    // The `acl` field: a canned ACL, as `x-amz-acl`.
    let acl = match form.get("acl") {
        Some(name) => super::acl::parse_canned(name)?,
        None => CannedAcl::Private,
    };
    let key = post_policy::object_key(key_field, &filename);
    let file: BodyStream = Box::new(file.map(|r| r.map_err(|e| form_error(e, true))));
    let file = match policy.length_range() {
        Some(range) => within_length(file, range),
        None => file,
    };
    let (file, checksum) = with_checksum(file, &headers, None)?;
    let request = PutRequest {
        bucket: bucket.to_string(),
        key: key.clone(),
        attrs,
        size_bytes: None,
        content_md5: None,
        precondition: None,
        checksum,
        lock: None,
        tags,
        acl,
    };
    let stored = app.store.put(request, file).await?;
    // The rest of the body (fields after the file) is not read, as on S3.
    drop(multipart);
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok());
    let location = object_url(&parts.uri, host, app.domain.as_deref(), bucket, &key);
    let mut resp = answer(&form, bucket, &key, &stored.record.etag(), &location);
    if let Some(id) = stored.version_id
        && let Ok(v) = HeaderValue::from_str(&id)
    {
        resp.headers_mut().insert("x-amz-version-id", v);
    }
    Ok(resp)
}

/// The object's URL for `Location`, in the addressing style the request used.
fn object_url(
    uri: &http::Uri,
    host: Option<&str>,
    domain: Option<&str>,
    bucket: &str,
    key: &str,
) -> String {
    let scheme = uri.scheme_str().unwrap_or("http");
    let authority = uri
        .authority()
        .map(|a| a.as_str())
        .or(host)
        .unwrap_or("localhost");
    let key = utf8_percent_encode(key, PATH_ENCODE_SET);
    if virtual_host_bucket(host, domain).is_some() {
        format!("{scheme}://{authority}/{key}")
    } else {
        let bucket = utf8_percent_encode(bucket, PATH_ENCODE_SET);
        format!("{scheme}://{authority}/{bucket}/{key}")
    }
}

/// The success answer the form asked for: a 303 to `success_action_redirect` (or the
/// older `redirect`) with the object named in its query, else `success_action_status`
/// (200, 201 with a PostResponse document, 204 by default and for any other value).
fn answer(form: &FormFields, bucket: &str, key: &str, etag: &str, location: &str) -> Response {
    let redirect = form
        .get("success_action_redirect")
        .or_else(|| form.get("redirect"))
        .and_then(|url| redirect_url(url, bucket, key, etag));
    if let Some(url) = redirect {
        let mut resp = StatusCode::SEE_OTHER.into_response();
        if let Ok(v) = HeaderValue::from_str(&url) {
            resp.headers_mut().insert(header::LOCATION, v);
        }
        return resp;
    }
    let mut resp = match form.get("success_action_status") {
        Some("200") => StatusCode::OK.into_response(),
        Some("201") => {
            let mut w = XmlWriter::new();
            w.open("PostResponse");
            w.leaf("Location", location);
            w.leaf("Bucket", bucket);
            w.leaf("Key", key);
            w.leaf("ETag", etag);
            w.close("PostResponse");
            (
                StatusCode::CREATED,
                [(header::CONTENT_TYPE, "application/xml")],
                w.finish(),
            )
                .into_response()
        }
        _ => StatusCode::NO_CONTENT.into_response(),
    };
    for (name, value) in [(header::ETAG, etag), (header::LOCATION, location)] {
        if let Ok(v) = HeaderValue::from_str(value) {
            resp.headers_mut().insert(name, v);
        }
    }
    resp
}

/// `url` with `bucket`, `key` and `etag` appended to its query, if it is an absolute
/// http(s) URL; S3 ignores any other value and answers with the status instead.
fn redirect_url(url: &str, bucket: &str, key: &str, etag: &str) -> Option<String> {
    let uri: http::Uri = url.parse().ok()?;
    let web = matches!(uri.scheme_str(), Some("http" | "https"));
    if !web || uri.authority().is_none() {
        return None;
    }
    let q = |v: &str| utf8_percent_encode(v, QUERY_ENCODE_SET).to_string();
    let (base, fragment) = match url.split_once('#') {
        Some((b, f)) => (b, Some(f)),
        None => (url, None),
    };
    let sep = match base.find('?') {
        None => "?",
        Some(i) if i + 1 == base.len() || base.ends_with('&') => "",
        Some(_) => "&",
    };
    let mut out = format!(
        "{base}{sep}bucket={}&key={}&etag={}",
        q(bucket),
        q(key),
        q(etag)
    );
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_carry_the_object_in_their_query() {
        let r = |url| redirect_url(url, "up", "dir/a b.txt", "\"abc\"");
        assert_eq!(
            r("https://app.example/done").as_deref(),
            Some("https://app.example/done?bucket=up&key=dir%2Fa%20b.txt&etag=%22abc%22")
        );
        assert_eq!(
            r("http://app.example/done?x=1#top").as_deref(),
            Some("http://app.example/done?x=1&bucket=up&key=dir%2Fa%20b.txt&etag=%22abc%22#top")
        );
        assert!(r("/relative").is_none());
        assert!(r("javascript:alert(1)").is_none());
        assert!(r("not a url").is_none());
    }

    fn form(fields: &[(&str, &str)]) -> FormFields {
        let mut f = FormFields::default();
        for (n, v) in fields {
            f.insert(n, v.to_string());
        }
        f
    }

    #[test]
    fn the_answer_is_the_one_the_form_asks_for() {
        let at = "http://h/up/k";
        let status = |fields: &[(&str, &str)]| answer(&form(fields), "up", "k", "\"e\"", at);
        assert_eq!(status(&[]).status(), StatusCode::NO_CONTENT);
        assert_eq!(
            status(&[("success_action_status", "200")]).status(),
            StatusCode::OK
        );
        assert_eq!(
            status(&[("success_action_status", "404")]).status(),
            StatusCode::NO_CONTENT
        );
        let created = status(&[("success_action_status", "201")]);
        assert_eq!(created.status(), StatusCode::CREATED);
        assert_eq!(created.headers()[header::ETAG], "\"e\"");
        let moved = status(&[
            ("success_action_status", "201"),
            ("success_action_redirect", "https://app/ok"),
        ]);
        assert_eq!(moved.status(), StatusCode::SEE_OTHER);
        assert_eq!(
            moved.headers()[header::LOCATION],
            "https://app/ok?bucket=up&key=k&etag=%22e%22"
        );
        // An unusable redirect is ignored, as S3 ignores it.
        let ignored = status(&[("redirect", "nowhere")]);
        assert_eq!(ignored.status(), StatusCode::NO_CONTENT);
    }

    #[test]
    fn object_fields_become_put_headers_and_unkept_ones_are_refused() {
        let f = form(&[
            ("key", "k"),
            ("content-type", "image/png"),
            ("x-amz-meta-owner", "ann"),
            ("tagging", "<Tagging/>"),
            ("x-amz-checksum-algorithm", "CRC32"),
            ("policy", "p"),
        ]);
        let h = object_headers(&f).unwrap();
        assert_eq!(h["content-type"], "image/png");
        assert_eq!(h["x-amz-meta-owner"], "ann");
        assert!(!h.contains_key("x-amz-tagging"), "tagging is no header");
        assert_eq!(h["x-amz-sdk-checksum-algorithm"], "CRC32");
        assert!(!h.contains_key("key") && !h.contains_key("policy"));
        assert!(attrs_from(&h).is_ok());
        let doc = "<Tagging><TagSet><Tag><Key>a</Key><Value>1</Value></Tag></TagSet></Tagging>";
        assert_eq!(form_tags(&form(&[("tagging", doc)])).unwrap().len(), 1);
        assert_eq!(
            form_tags(&form(&[("tagging", "a=1")])).unwrap_err().code,
            ErrorCode::MalformedXML
        );
        assert!(form_tags(&form(&[])).unwrap().is_empty());
        assert!(object_headers(&form(&[("content-type", "a\nb")])).is_err());

        assert!(refuse_unsupported(&form(&[("acl", "public-read")])).is_ok());
        assert!(refuse_unsupported(&form(&[("x-amz-storage-class", "STANDARD")])).is_ok());
        for (n, v) in [
            ("x-amz-storage-class", "GLACIER"),
            ("x-amz-server-side-encryption", "AES256"),
            ("x-amz-security-token", "t"),
            ("x-amz-object-lock-mode", "GOVERNANCE"),
        ] {
            let e = refuse_unsupported(&form(&[(n, v)])).unwrap_err();
            assert_eq!(e.code, ErrorCode::NotImplemented, "{n}");
        }
    }

    #[test]
    fn object_urls_follow_the_addressing_style() {
        let uri: http::Uri = "/up".parse().unwrap();
        assert_eq!(
            object_url(&uri, Some("127.0.0.1:9000"), None, "up", "a b/c"),
            "http://127.0.0.1:9000/up/a%20b/c"
        );
        let root: http::Uri = "/".parse().unwrap();
        assert_eq!(
            object_url(&root, Some("up.s3.test"), Some("s3.test"), "up", "k"),
            "http://up.s3.test/k"
        );
    }

    fn multipart_body(parts: &[(&str, &str)], file: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        for (n, v) in parts {
            body.extend_from_slice(
                format!("--B\r\nContent-Disposition: form-data; name=\"{n}\"\r\n\r\n{v}\r\n")
                    .as_bytes(),
            );
        }
        body.extend_from_slice(
            b"--B\r\nContent-Disposition: form-data; name=\"File\"; filename=\"a.txt\"\r\n\
              Content-Type: text/plain\r\n\r\n",
        );
        body.extend_from_slice(file);
        body.extend_from_slice(
            b"\r\n--B\r\nContent-Disposition: form-data; name=\"after\"\r\n\r\nx\r\n--B--\r\n",
        );
        body
    }

    fn parse(body: Vec<u8>) -> Result<(FormFields, String, Vec<u8>), S3Error> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async move {
            let in_file = Arc::new(AtomicBool::new(false));
            let chunks: Vec<Result<Bytes, S3Error>> = body
                .chunks(7000)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect();
            let paced = Paced {
                inner: futures_util::stream::iter(chunks),
                in_file: in_file.clone(),
                held: None,
                read: 0,
                just_gave: false,
            };
            let mut multipart = multer::Multipart::new(paced, "B");
            let (form, name, mut file) = read_form(&mut multipart).await?;
            in_file.store(true, Ordering::Relaxed);
            let mut bytes = Vec::new();
            while let Some(c) = file.chunk().await.map_err(|e| form_error(e, true))? {
                bytes.extend_from_slice(&c);
            }
            Ok((form, name, bytes))
        })
    }

    #[test]
    fn the_form_is_read_up_to_the_file_and_the_file_streams_whole() {
        let file: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let (form, name, got) = parse(multipart_body(
            &[("Key", "up/${filename}"), ("policy", "p")],
            &file,
        ))
        .unwrap();
        assert_eq!(form.get("key"), Some("up/${filename}"));
        assert_eq!(
            form.get("after"),
            None,
            "fields after the file are not read"
        );
        assert_eq!(name, "a.txt");
        assert_eq!(got, file);
    }

    /// The error a form is refused with (the parsed form is not printed: it may be large).
    fn refused(body: Vec<u8>) -> S3Error {
        match parse(body) {
            Ok(_) => panic!("the form was accepted"),
            Err(e) => e,
        }
    }

    #[test]
    fn oversized_repeated_or_fileless_forms_are_refused() {
        let big = "v".repeat(FIELDS_BYTES_MAX);
        let e = refused(multipart_body(&[("x-amz-meta-a", &big)], b"f"));
        assert_eq!(e.code, ErrorCode::MaxPostPreDataLengthExceededError);
        let many: Vec<(String, &str)> = (0..=FIELDS_MAX).map(|i| (format!("f{i}"), "v")).collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let e = refused(multipart_body(&many, b"f"));
        assert_eq!(e.code, ErrorCode::MaxPostPreDataLengthExceededError);
        let e = refused(multipart_body(&[("key", "a"), ("KEY", "b")], b"f"));
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        // A part header that never ends is not buffered past the bound.
        let mut endless = b"--B\r\nContent-Disposition: form-data; name=\"".to_vec();
        endless.extend(std::iter::repeat_n(b'x', 10 << 20));
        let e = refused(endless);
        assert_eq!(e.code, ErrorCode::MaxPostPreDataLengthExceededError);
        let e = refused(
            b"--B\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nk\r\n--B--\r\n".to_vec(),
        );
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        assert_eq!(
            e.message,
            "POST requires exactly one file upload per request."
        );
        let e = refused(b"garbage".to_vec());
        assert!(
            matches!(
                e.code,
                ErrorCode::MalformedPOSTRequest | ErrorCode::InvalidArgument
            ),
            "{e}"
        );
        // A body cut inside the file is incomplete.
        let mut cut = multipart_body(&[("key", "k")], &[7u8; 50_000]);
        cut.truncate(cut.len() - 200);
        let e = refused(cut);
        assert_eq!(e.code, ErrorCode::IncompleteBody);
    }
}
