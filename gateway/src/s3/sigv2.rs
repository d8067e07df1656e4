//! Signature Version 2 presigned URLs (`AWSAccessKeyId`, `Expires`, `Signature`).
//!
//! botocore (boto3, aws cli v1) still presigns with V2 by default against a custom
//! endpoint (and aws-sdk-js v2 does for every operation), and webmail back ends hand those
//! URLs to browsers, so the gateway accepts them for GET, HEAD and PUT (an upload straight
//! from the browser). Everything else must be signed with SigV4. A V2 signature covers no
//! body: a PUT's bytes are checked against its `Content-MD5` or `x-amz-content-sha256`
//! when it sends one (both are signed), as S3 does.
//!
//! The resource signed is S3's CanonicalizedResource: `/bucket/key` whatever the addressing
//! style, so a virtual-hosted URL (bucket in the Host) signs its bucket too and cannot be
//! replayed against another bucket's Host. A V2 URL carries an absolute `Expires`, which
//! S3 does not bound; the gateway refuses one further ahead than a configured cap (7 days
//! by default, as SigV4's `X-Amz-Expires`), so a leaked URL does not stay valid for years.

use base64::Engine as _;
use hmac::{KeyInit as _, Mac as _};
use http::{HeaderMap, Method, Uri};

use super::sigv4::AuthError;

/// Query parameters that are part of the V2 canonical resource, as botocore lists them.
const SUBRESOURCES: &[&str] = &[
    "accelerate",
    "acl",
    "analytics",
    "cors",
    "delete",
    "inventory",
    "lifecycle",
    "location",
    "logging",
    "metrics",
    "notification",
    "object-lock",
    "partNumber",
    "policy",
    "replication",
    "requestPayment",
    "response-cache-control",
    "response-content-disposition",
    "response-content-encoding",
    "response-content-language",
    "response-content-type",
    "response-expires",
    "restore",
    "select",
    "select-type",
    "storageClass",
    "tagging",
    "torrent",
    "uploadId",
    "uploads",
    "versionId",
    "versioning",
    "versions",
    "website",
];

/// Whether a request carries V2 query authentication.
pub fn is_presigned_v2(uri: &Uri) -> bool {
    let q = uri.query().unwrap_or("");
    q.split('&').any(|p| p.starts_with("AWSAccessKeyId="))
        && q.split('&').any(|p| p.starts_with("Signature="))
}

/// Decodes as the handlers do (a raw `+` is a space), so what is signed is what runs.
fn decode(s: &str) -> Result<String, AuthError> {
    String::from_utf8(super::request::form_decode(s).into_owned())
        .map_err(|_| AuthError::Malformed("query parameter is not valid UTF-8".into()))
}

/// What a V2 presigned request is checked against, besides the secret.
#[derive(Clone, Copy, Debug)]
pub struct Presigned<'a> {
    /// The bucket named by a virtual-hosted-style Host, if the request is one; it is then
    /// part of the signed resource (`/bucket` + path).
    pub host_bucket: Option<&'a str>,
    /// Server time, seconds since the epoch.
    pub now_secs: u64,
    /// Refuse an `Expires` more than this many seconds after `now_secs`.
    pub expires_max_secs: u64,
}

/// Verifies a V2 presigned request; returns the access key.
pub fn verify_presigned(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    secret_for: impl Fn(&str) -> Option<String>,
    check: Presigned<'_>,
) -> Result<String, AuthError> {
    let now_secs = check.now_secs;
    if method != Method::GET && method != Method::HEAD && method != Method::PUT {
        return Err(AuthError::UnsupportedAlgorithm);
    }
    let mut access_key = None;
    let mut signature = None;
    let mut expires = None;
    let mut sub: Vec<(String, Option<String>)> = Vec::new();
    for pair in uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (k, v) = match pair.split_once('=') {
            Some((k, v)) => (decode(k)?, Some(decode(v)?)),
            None => (decode(pair)?, None),
        };
        match k.as_str() {
            "AWSAccessKeyId" => access_key = v,
            "Signature" => signature = v,
            "Expires" => expires = v,
            name if SUBRESOURCES.contains(&name) => sub.push((k, v)),
            _ => {}
        }
    }
    let (Some(access_key), Some(signature), Some(expires)) = (access_key, signature, expires)
    else {
        return Err(AuthError::Malformed(
            "AWSAccessKeyId, Signature and Expires are required".into(),
        ));
    };
    let expires_secs: u64 = expires
        .parse()
        .map_err(|_| AuthError::Malformed("Expires must be a number of seconds".into()))?;
    if now_secs > expires_secs {
        return Err(AuthError::Expired);
    }
    if expires_secs.saturating_sub(now_secs) > check.expires_max_secs {
        return Err(AuthError::ExpiresTooFar(check.expires_max_secs));
    }
    let secret = secret_for(&access_key).ok_or(AuthError::UnknownAccessKey)?;
    sub.sort();
    let mut resource = match check.host_bucket {
        Some(bucket) => format!("/{bucket}{}", uri.path()),
        None => uri.path().to_string(),
    };
    for (i, (k, v)) in sub.iter().enumerate() {
        resource.push(if i == 0 { '?' } else { '&' });
        resource.push_str(k);
        if let Some(v) = v {
            resource.push('=');
            resource.push_str(v);
        }
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let mut amz: Vec<(String, String)> = headers
        .iter()
        .filter(|(n, _)| n.as_str().starts_with("x-amz-"))
        .map(|(n, v)| {
            (
                n.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).trim().to_string(),
            )
        })
        .collect();
    amz.sort();
    let mut to_sign = format!(
        "{}\n{}\n{}\n{}\n",
        method,
        header("content-md5"),
        header("content-type"),
        expires
    );
    for (n, v) in amz {
        to_sign.push_str(&format!("{n}:{v}\n"));
    }
    to_sign.push_str(&resource);
    check_signature(&secret, &to_sign, &signature)?;
    Ok(access_key)
}

/// Verifies a V2-signed POST form (a browser upload): `signature` must be the base64
/// HMAC-SHA1 of the base64 `policy` text under the secret of `access_key`, which is
/// returned. The policy's `expiration` bounds how long the form is good.
pub fn verify_post_policy(
    access_key: &str,
    policy: &str,
    signature: &str,
    secret_for: impl Fn(&str) -> Option<String>,
) -> Result<String, AuthError> {
    let secret = secret_for(access_key).ok_or(AuthError::UnknownAccessKey)?;
    check_signature(&secret, policy, signature)?;
    Ok(access_key.to_string())
}

/// `signature` must be the base64 HMAC-SHA1 of `to_sign` under `secret`.
fn check_signature(secret: &str, to_sign: &str, signature: &str) -> Result<(), AuthError> {
    let mut mac = hmac::Hmac::<sha1::Sha1>::new_from_slice(secret.as_bytes())
        .map_err(|_| AuthError::Malformed("unusable secret".into()))?;
    mac.update(to_sign.as_bytes());
    let expected = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    if crate::bearer::constant_time_eq(expected.as_bytes(), signature.as_bytes()) {
        Ok(())
    } else {
        Err(AuthError::SignatureMismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Path style, no cap on `Expires` beyond the test's own.
    fn at(now_secs: u64) -> Presigned<'static> {
        Presigned {
            host_bucket: None,
            now_secs,
            expires_max_secs: 7 * 86_400,
        }
    }

    /// The example from the S3 documentation on query string authentication (V2).
    #[test]
    fn the_documented_example_verifies() {
        let uri: Uri = "/johnsmith/photos/puppy.jpg?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D&Expires=1175139620".parse().unwrap();
        let secret = |_: &str| Some("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".to_string());
        let headers = HeaderMap::new();
        assert!(is_presigned_v2(&uri));
        assert_eq!(
            verify_presigned(&Method::GET, &uri, &headers, secret, at(1_175_139_000)).unwrap(),
            "AKIAIOSFODNN7EXAMPLE"
        );
        assert_eq!(
            verify_presigned(&Method::GET, &uri, &headers, secret, at(1_175_139_621)),
            Err(AuthError::Expired)
        );
        let tampered: Uri = "/johnsmith/photos/kitten.jpg?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D&Expires=1175139620".parse().unwrap();
        assert_eq!(
            verify_presigned(&Method::GET, &tampered, &headers, secret, at(1_175_139_000)),
            Err(AuthError::SignatureMismatch)
        );
        // The method is signed: a GET's URL does not upload.
        assert_eq!(
            verify_presigned(&Method::PUT, &uri, &headers, secret, at(1_175_139_000)),
            Err(AuthError::SignatureMismatch)
        );
        assert_eq!(
            verify_presigned(&Method::DELETE, &uri, &headers, secret, at(1_175_139_000)),
            Err(AuthError::UnsupportedAlgorithm)
        );
    }

    /// The documented example is virtual-hosted (`johnsmith.s3.amazonaws.com`): its
    /// signed resource is `/johnsmith/photos/puppy.jpg` while the path is only the key.
    #[test]
    fn a_virtual_hosted_url_signs_its_bucket() {
        let uri: Uri = "/photos/puppy.jpg?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D&Expires=1175139620".parse().unwrap();
        let secret = |_: &str| Some("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".to_string());
        let headers = HeaderMap::new();
        let in_bucket = |bucket| Presigned {
            host_bucket: bucket,
            ..at(1_175_139_000)
        };
        assert_eq!(
            verify_presigned(
                &Method::GET,
                &uri,
                &headers,
                secret,
                in_bucket(Some("johnsmith"))
            ),
            Ok("AKIAIOSFODNN7EXAMPLE".into())
        );
        for other in [Some("janesmith"), None] {
            assert_eq!(
                verify_presigned(&Method::GET, &uri, &headers, secret, in_bucket(other)),
                Err(AuthError::SignatureMismatch),
                "{other:?}"
            );
        }
    }

    #[test]
    fn expires_further_than_the_cap_is_refused() {
        let uri: Uri = "/johnsmith/photos/puppy.jpg?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D&Expires=1175139620".parse().unwrap();
        let secret = |_: &str| Some("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".to_string());
        let headers = HeaderMap::new();
        let capped = |now_secs, expires_max_secs| Presigned {
            host_bucket: None,
            now_secs,
            expires_max_secs,
        };
        let expires = 1_175_139_620;
        assert!(
            verify_presigned(
                &Method::GET,
                &uri,
                &headers,
                secret,
                capped(expires - 600, 600)
            )
            .is_ok()
        );
        assert_eq!(
            verify_presigned(
                &Method::GET,
                &uri,
                &headers,
                secret,
                capped(expires - 601, 600)
            ),
            Err(AuthError::ExpiresTooFar(600))
        );
    }

    /// A raw `+` in a signed sub-resource value is a space, as the handler will read it.
    #[test]
    fn a_raw_plus_in_a_subresource_signs_as_a_space() {
        use base64::Engine as _;
        use hmac::{KeyInit as _, Mac as _};
        let secret = |_: &str| Some("s".to_string());
        let sign = |resource: &str| {
            let mut mac = hmac::Hmac::<sha1::Sha1>::new_from_slice(b"s").unwrap();
            mac.update(format!("GET\n\n\n2000000000\n{resource}").as_bytes());
            let sig = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
            percent_encoding::utf8_percent_encode(&sig, percent_encoding::NON_ALPHANUMERIC)
                .to_string()
        };
        let run = |query_value: &str, signed_resource: &str| {
            let uri: Uri = format!(
                "/b/k?response-content-type={query_value}&AWSAccessKeyId=AK&Expires=2000000000&Signature={}",
                sign(signed_resource)
            )
            .parse()
            .unwrap();
            verify_presigned(
                &Method::GET,
                &uri,
                &HeaderMap::new(),
                secret,
                at(1_999_999_000),
            )
            .map(drop)
        };
        assert_eq!(run("a+b", "/b/k?response-content-type=a b"), Ok(()));
        assert_eq!(run("a%2Bb", "/b/k?response-content-type=a+b"), Ok(()));
        assert_eq!(
            run("a+b", "/b/k?response-content-type=a+b"),
            Err(AuthError::SignatureMismatch)
        );
    }

    #[test]
    fn a_v2_post_form_signs_its_base64_policy() {
        let (key, secret, policy) = ("AKID", "sec/ret+", "eyJjb25kaXRpb25zIjogW119");
        // HMAC-SHA1 from the `hmac` crate, not through the code under test.
        let mut mac = hmac::Hmac::<sha1::Sha1>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(policy.as_bytes());
        let signature =
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
        let secrets = |k: &str| (k == key).then(|| secret.to_string());
        assert_eq!(
            verify_post_policy(key, policy, &signature, secrets).as_deref(),
            Ok(key)
        );
        assert_eq!(
            verify_post_policy(key, "eyJ4IjogMX0=", &signature, secrets),
            Err(AuthError::SignatureMismatch)
        );
        assert_eq!(
            verify_post_policy("OTHER", policy, &signature, secrets),
            Err(AuthError::UnknownAccessKey)
        );
    }
}
