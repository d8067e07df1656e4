//! What an S3 request addresses: the service, a bucket or an object, and its query.

use std::collections::BTreeMap;

use std::borrow::Cow;

use http::{HeaderMap, Method, Uri, header};
use percent_encoding::{percent_decode, percent_decode_str};

use super::error::{ErrorCode, S3Error};

/// The resource a path-style request addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Service,
    Bucket(String),
    Object { bucket: String, key: String },
}

fn decode(raw: &str, what: &str) -> Result<String, S3Error> {
    percent_decode_str(raw)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| {
            S3Error::new(
                ErrorCode::InvalidArgument,
                format!("{what} is not valid UTF-8"),
            )
        })
}

/// One query name or value decoded as S3 executes it and as the signatures are checked:
/// form decoding, so a raw `+` is a space (as `%20` is) and only `%2B` is a plus.
///
/// The SigV4 and SigV2 checks and the handlers all decode with this one function: if the
/// signature were computed over one reading of a `+` and the request executed with
/// another, a URL signed for the prefix `a+b` would list `a b`.
pub fn form_decode(raw: &str) -> Cow<'_, [u8]> {
    if raw.contains('+') {
        Cow::Owned(percent_decode(raw.replace('+', " ").as_bytes()).collect())
    } else {
        percent_decode(raw.as_bytes()).into()
    }
}

/// The bucket named by a virtual-hosted-style Host (`bucket.<domain>`, any port), when a
/// domain is configured and the Host is a subdomain of it.
pub fn virtual_host_bucket<'h>(host: Option<&'h str>, domain: Option<&str>) -> Option<&'h str> {
    let (host, domain) = (host?, domain?);
    let host = host
        .rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
        .map_or(host, |(h, _)| h);
    host.strip_suffix(domain)
        .and_then(|b| b.strip_suffix('.'))
        .filter(|b| !b.is_empty())
}

impl Target {
    /// The target of a request: virtual-hosted style (`bucket.<domain>` in Host, the path
    /// is the key) when `domain` is configured and the Host is a subdomain of it, else
    /// path style.
    pub fn from_request(
        uri: &Uri,
        host: Option<&str>,
        domain: Option<&str>,
    ) -> Result<Self, S3Error> {
        let Some(bucket) = virtual_host_bucket(host, domain) else {
            return Self::from_uri(uri);
        };
        let key = uri.path().strip_prefix('/').unwrap_or(uri.path());
        if key.is_empty() {
            Ok(Target::Bucket(bucket.to_string()))
        } else {
            Ok(Target::Object {
                bucket: bucket.to_string(),
                key: decode(key, "key")?,
            })
        }
    }

    /// Parses a path-style request path: `/`, `/bucket`, `/bucket/key...`. The key is
    /// everything after the bucket's slash, decoded once, slashes and all.
    pub fn from_uri(uri: &Uri) -> Result<Self, S3Error> {
        let path = uri.path();
        let rest = path.strip_prefix('/').unwrap_or(path);
        if rest.is_empty() {
            return Ok(Target::Service);
        }
        match rest.split_once('/') {
            None => Ok(Target::Bucket(decode(rest, "bucket name")?)),
            Some((bucket, "")) => Ok(Target::Bucket(decode(bucket, "bucket name")?)),
            Some((bucket, key)) => Ok(Target::Object {
                bucket: decode(bucket, "bucket name")?,
                key: decode(key, "key")?,
            }),
        }
    }
}

/// Whether a request is a form upload: POST on a bucket (no sub-resource) with a
/// `multipart/form-data` body.
pub fn is_form_upload(
    method: &Method,
    target: &Target,
    sub: Option<&str>,
    headers: &HeaderMap,
) -> bool {
    let multipart = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("multipart/form-data"));
    method == Method::POST && matches!(target, Target::Bucket(_)) && sub.is_none() && multipart
}

/// [`is_form_upload`] from a request's head, reading its target as the router will.
pub fn is_form_upload_request(parts: &http::request::Parts, domain: Option<&str>) -> bool {
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok());
    let (Ok(target), Ok(query)) = (
        Target::from_request(&parts.uri, host, domain),
        Query::parse(&parts.uri),
    ) else {
        return false;
    };
    is_form_upload(&parts.method, &target, query.subresource(), &parts.headers)
}

/// Bound on a request's header section for the requests that store headers with an
/// object (PUT, CopyObject with REPLACE, CreateMultipartUpload), as S3's 8 KB: a stored
/// header of any size would be served back on every GET and HEAD, where clients (boto3,
/// the aws cli) refuse it.
pub const HEADER_SECTION_BYTES_MAX: usize = 8 * 1024;

/// Refuses a header section over [`HEADER_SECTION_BYTES_MAX`], counted as sent: each
/// `name: value` line with its CRLF.
pub fn check_header_section(headers: &http::HeaderMap) -> Result<(), S3Error> {
    let bytes: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    if bytes > HEADER_SECTION_BYTES_MAX {
        return Err(S3Error::new(
            ErrorCode::RequestHeaderSectionTooLarge,
            format!(
                "Your request header section exceeds the maximum allowed size ({HEADER_SECTION_BYTES_MAX} bytes)."
            ),
        ));
    }
    Ok(())
}

/// The decoded query parameters of a request; a name without `=` maps to "".
#[derive(Clone, Debug, Default)]
pub struct Query(BTreeMap<String, String>);

impl Query {
    pub fn parse(uri: &Uri) -> Result<Self, S3Error> {
        let mut map = BTreeMap::new();
        for pair in uri
            .query()
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
        {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let utf8 = |raw: &str| {
                String::from_utf8(form_decode(raw).into_owned()).map_err(|_| {
                    S3Error::new(
                        ErrorCode::InvalidArgument,
                        "query parameter is not valid UTF-8",
                    )
                })
            };
            map.insert(utf8(k)?, utf8(v)?);
        }
        Ok(Query(map))
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    pub fn has(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    /// The first sub-resource parameter present (`?acl`, `?uploads`, ...), which selects
    /// an operation other than the plain one.
    pub fn subresource(&self) -> Option<&str> {
        const SUBRESOURCES: &[&str] = &[
            "accelerate",
            "acl",
            "analytics",
            "attributes",
            "cors",
            "delete",
            "encryption",
            "intelligent-tiering",
            "inventory",
            "legal-hold",
            "lifecycle",
            "location",
            "logging",
            "metrics",
            "notification",
            "object-lock",
            "ownershipControls",
            "partNumber",
            "policy",
            "policyStatus",
            "publicAccessBlock",
            "replication",
            "requestPayment",
            "restore",
            "retention",
            "select",
            "tagging",
            "torrent",
            "uploadId",
            "uploads",
            "versioning",
            "versions",
            "website",
        ];
        SUBRESOURCES.iter().copied().find(|s| self.has(s))
    }

    /// A non-negative integer parameter, InvalidArgument when malformed.
    pub fn number(&self, name: &str) -> Result<Option<u64>, S3Error> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| {
                S3Error::new(
                    ErrorCode::InvalidArgument,
                    format!("{name} must be a non-negative integer"),
                )
            }),
        }
    }
}

/// S3's bucket naming rules: 3-63 characters of lowercase letters, digits, '.' and '-',
/// starting and ending with a letter or digit, no "..", not shaped like an IP address.
pub fn check_bucket_name(name: &str) -> Result<(), S3Error> {
    let b = name.as_bytes();
    let allowed = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'.' || *c == b'-';
    let edge = |c: Option<&u8>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let ip_like = name.split('.').count() == 4 && name.split('.').all(|p| p.parse::<u8>().is_ok());
    let ok = (3..=63).contains(&b.len())
        && b.iter().all(allowed)
        && edge(b.first())
        && edge(b.last())
        && !name.contains("..")
        && !name.contains(".-")
        && !name.contains("-.")
        && !ip_like;
    if ok {
        Ok(())
    } else {
        Err(S3Error::new(
            ErrorCode::InvalidBucketName,
            "The specified bucket is not valid.",
        )
        .with_resource(name))
    }
}

/// A header as text; one that is not is the client's error.
pub fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, S3Error> {
    match headers.get(name) {
        None => Ok(None),
        Some(v) => v.to_str().map(Some).map_err(|_| {
            S3Error::new(
                ErrorCode::InvalidArgument,
                format!("header {name} is not valid text"),
            )
        }),
    }
}

/// Whether the request asks to bypass GOVERNANCE retention. `access::needs` requires the
/// owner right of such a request, so a handler may take the header as granted.
pub fn bypass_governance(headers: &HeaderMap) -> bool {
    headers
        .get("x-amz-bypass-governance-retention")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// `x-amz-copy-source`: `[/]bucket/key[?versionId=...]`, URL-encoded: the bucket, the key
/// and the version named (None: the current one). Any other parameter is refused rather
/// than ignored.
pub fn copy_source(headers: &HeaderMap) -> Result<(String, String, Option<String>), S3Error> {
    let raw = header_str(headers, "x-amz-copy-source")?.unwrap_or("");
    let (raw, query) = raw.split_once('?').unwrap_or((raw, ""));
    let mut version = None;
    for param in query.split('&').filter(|p| !p.is_empty()) {
        match param.split_once('=') {
            Some(("versionId", id)) if version.is_none() => {
                let id = percent_encoding::percent_decode_str(id)
                    .decode_utf8()
                    .map_err(|_| {
                        S3Error::new(ErrorCode::InvalidArgument, "Invalid version id specified")
                    })?;
                version = Some(id.into_owned());
            }
            _ => {
                return Err(S3Error::not_implemented(&format!(
                    "the copy source parameter {:?}",
                    param.chars().take(64).collect::<String>()
                )));
            }
        }
    }
    let decoded = percent_encoding::percent_decode_str(raw.trim_start_matches('/'))
        .decode_utf8()
        .map_err(|_| {
            S3Error::new(
                ErrorCode::InvalidArgument,
                "x-amz-copy-source is not valid UTF-8",
            )
        })?;
    match decoded.split_once('/') {
        Some((b, k)) if !b.is_empty() && !k.is_empty() => {
            Ok((b.to_string(), k.to_string(), version))
        }
        _ => Err(S3Error::new(
            ErrorCode::InvalidArgument,
            "Copy Source must mention the source bucket and key: sourcebucket/sourcekey",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(content_type: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, content_type.parse().unwrap());
        h
    }

    #[test]
    fn only_a_multipart_post_on_a_bucket_is_a_form_upload() {
        let bucket = Target::Bucket("b".into());
        let form = headers("multipart/form-data; boundary=x");
        assert!(is_form_upload(&Method::POST, &bucket, None, &form));
        assert!(is_form_upload(
            &Method::POST,
            &bucket,
            None,
            &headers("Multipart/Form-Data;boundary=x")
        ));
        assert!(!is_form_upload(&Method::PUT, &bucket, None, &form));
        assert!(!is_form_upload(
            &Method::POST,
            &bucket,
            Some("delete"),
            &form
        ));
        let object = Target::Object {
            bucket: "b".into(),
            key: "k".into(),
        };
        assert!(!is_form_upload(&Method::POST, &object, None, &form));
        assert!(!is_form_upload(
            &Method::POST,
            &Target::Service,
            None,
            &form
        ));
        assert!(!is_form_upload(
            &Method::POST,
            &bucket,
            None,
            &headers("application/xml")
        ));
        assert!(!is_form_upload(
            &Method::POST,
            &bucket,
            None,
            &HeaderMap::new()
        ));
    }

    #[test]
    fn the_request_head_is_read_as_the_router_reads_it() {
        let head = |method: &str, uri: &str, host: &str| {
            let (parts, ()) = http::Request::builder()
                .method(method)
                .uri(uri)
                .header(header::HOST, host)
                .header(header::CONTENT_TYPE, "multipart/form-data; boundary=x")
                .body(())
                .unwrap()
                .into_parts();
            is_form_upload_request(&parts, Some("s3.test"))
        };
        assert!(head("POST", "/b", "127.0.0.1"));
        assert!(head("POST", "/", "b.s3.test"));
        assert!(!head("POST", "/b/k", "127.0.0.1"));
        assert!(!head("POST", "/k", "b.s3.test"));
        assert!(!head("POST", "/b?delete", "127.0.0.1"));
        assert!(!head("POST", "/b?uploads", "127.0.0.1"));
        assert!(!head("GET", "/b", "127.0.0.1"));
    }

    #[test]
    fn a_copy_source_names_its_version_and_unknown_parameters_are_refused() {
        let source = |v: &str| {
            let mut headers = http::HeaderMap::new();
            headers.insert("x-amz-copy-source", v.parse().unwrap());
            copy_source(&headers)
        };
        assert_eq!(
            source("/b/k%20x").unwrap(),
            ("b".into(), "k x".into(), None)
        );
        assert_eq!(
            source("b/k?versionId=null").unwrap(),
            ("b".into(), "k".into(), Some("null".into()))
        );
        assert_eq!(
            source("b/k?versionId=00000000000000020000abcd").unwrap().2,
            Some("00000000000000020000abcd".into())
        );
        for v in ["b/k?other=1", "b/k?versionId=a&versionId=b"] {
            assert_eq!(
                source(v).unwrap_err().code,
                ErrorCode::NotImplemented,
                "{v}"
            );
        }
    }

    #[test]
    fn a_header_section_over_8_kb_is_refused() {
        let mut headers = http::HeaderMap::new();
        headers.insert("content-type", "text/plain".parse().unwrap());
        assert!(check_header_section(&headers).is_ok());
        let big = "a".repeat(HEADER_SECTION_BYTES_MAX);
        headers.insert("content-disposition", big.parse().unwrap());
        let e = check_header_section(&headers).unwrap_err();
        assert_eq!(e.code, ErrorCode::RequestHeaderSectionTooLarge);
        assert_eq!(e.code.status().as_u16(), 400);
    }

    fn target(p: &str) -> Target {
        Target::from_uri(&p.parse().unwrap()).unwrap()
    }

    #[test]
    fn paths_map_to_targets() {
        assert_eq!(target("/"), Target::Service);
        assert_eq!(target("/b"), Target::Bucket("b".into()));
        assert_eq!(target("/b/"), Target::Bucket("b".into()));
        assert_eq!(
            target("/b/dir//a%20b+c%2Bd/%E2%9C%93/"),
            Target::Object {
                bucket: "b".into(),
                key: "dir//a b+c+d/✓/".into()
            }
        );
    }

    #[test]
    fn virtual_hosted_requests_take_the_bucket_from_host() {
        let uri: Uri = "/dir/a%20b".parse().unwrap();
        let t = |host| Target::from_request(&uri, Some(host), Some("s3.example.com")).unwrap();
        assert_eq!(
            t("mail.s3.example.com:9000"),
            Target::Object {
                bucket: "mail".into(),
                key: "dir/a b".into()
            }
        );
        let path_style = Target::Object {
            bucket: "dir".into(),
            key: "a b".into(),
        };
        assert_eq!(t("s3.example.com"), path_style);
        assert_eq!(t("other.org"), path_style);
        let root: Uri = "/".parse().unwrap();
        assert_eq!(
            Target::from_request(&root, Some("mail.s3.example.com"), Some("s3.example.com"))
                .unwrap(),
            Target::Bucket("mail".into())
        );
    }

    #[test]
    fn queries_decode_and_find_subresources() {
        let q = Query::parse(&"/b?list-type=2&prefix=a%2Fb+c&uploads".parse().unwrap()).unwrap();
        assert_eq!(q.get("prefix"), Some("a/b c"));
        assert_eq!(q.subresource(), Some("uploads"));
        assert_eq!(q.number("list-type").unwrap(), Some(2));
        assert!(
            Query::parse(&"/b?max-keys=x".parse().unwrap())
                .unwrap()
                .number("max-keys")
                .is_err()
        );
    }

    #[test]
    fn a_raw_plus_in_the_query_is_a_space_and_only_percent_2b_a_plus() {
        assert_eq!(&*form_decode("a+b"), b"a b");
        assert_eq!(&*form_decode("a%20b"), b"a b");
        assert_eq!(&*form_decode("a%2Bb"), b"a+b");
        assert_eq!(&*form_decode("a%2bb+%2B"), b"a+b +");
        assert_eq!(&*form_decode("%E2%9C%93"), "✓".as_bytes());
        let q = Query::parse(&"/b?prefix=x+y%2Bz%20w".parse().unwrap()).unwrap();
        assert_eq!(q.get("prefix"), Some("x y+z w"));
        assert!(Query::parse(&"/b?prefix=%FF".parse().unwrap()).is_err());
    }

    #[test]
    fn virtual_host_buckets() {
        let d = Some("s3.example.com");
        assert_eq!(
            virtual_host_bucket(Some("mail.s3.example.com:9000"), d),
            Some("mail")
        );
        assert_eq!(
            virtual_host_bucket(Some("mail.s3.example.com"), d),
            Some("mail")
        );
        assert_eq!(virtual_host_bucket(Some("s3.example.com"), d), None);
        assert_eq!(virtual_host_bucket(Some("mails3.example.com"), d), None);
        assert_eq!(virtual_host_bucket(Some("mail.s3.example.com"), None), None);
        assert_eq!(virtual_host_bucket(None, d), None);
    }

    #[test]
    fn bucket_names_follow_s3_rules() {
        for ok in ["abc", "my-bucket.2026", "a1b"] {
            assert!(check_bucket_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "ab",
            "Abc",
            "a_b",
            "-ab",
            "ab-",
            "a..b",
            "192.168.1.1",
            &"a".repeat(64),
        ] {
            assert!(check_bucket_name(bad).is_err(), "{bad}");
        }
    }
}
