//! Signature Version 2 presigned URLs (`AWSAccessKeyId`, `Expires`, `Signature`).
//!
//! botocore (boto3, aws cli v1) still presigns with V2 by default against a custom
//! endpoint, and webmail back ends hand those URLs to browsers, so the gateway accepts
//! them for GET and HEAD. Everything else must be signed with SigV4.

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

fn decode(s: &str) -> Result<String, AuthError> {
    percent_encoding::percent_decode_str(&s.replace('+', " "))
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| AuthError::Malformed("query parameter is not valid UTF-8".into()))
}

/// Verifies a V2 presigned request; returns the access key.
pub fn verify_presigned(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    secret_for: impl Fn(&str) -> Option<String>,
    now_secs: u64,
) -> Result<String, AuthError> {
    if method != Method::GET && method != Method::HEAD {
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
    let secret = secret_for(&access_key).ok_or(AuthError::UnknownAccessKey)?;
    sub.sort();
    let mut resource = uri.path().to_string();
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
    let mut mac = hmac::Hmac::<sha1::Sha1>::new_from_slice(secret.as_bytes())
        .map_err(|_| AuthError::Malformed("unusable secret".into()))?;
    mac.update(to_sign.as_bytes());
    let expected = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    if super::sigv4::constant_time_eq(expected.as_bytes(), signature.as_bytes()) {
        Ok(access_key)
    } else {
        Err(AuthError::SignatureMismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example from the S3 documentation on query string authentication (V2).
    #[test]
    fn the_documented_example_verifies() {
        let uri: Uri = "/johnsmith/photos/puppy.jpg?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D&Expires=1175139620".parse().unwrap();
        let secret = |_: &str| Some("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".to_string());
        let headers = HeaderMap::new();
        assert!(is_presigned_v2(&uri));
        assert_eq!(
            verify_presigned(&Method::GET, &uri, &headers, secret, 1_175_139_000).unwrap(),
            "AKIAIOSFODNN7EXAMPLE"
        );
        assert_eq!(
            verify_presigned(&Method::GET, &uri, &headers, secret, 1_175_139_621),
            Err(AuthError::Expired)
        );
        let tampered: Uri = "/johnsmith/photos/kitten.jpg?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D&Expires=1175139620".parse().unwrap();
        assert_eq!(
            verify_presigned(&Method::GET, &tampered, &headers, secret, 1_175_139_000),
            Err(AuthError::SignatureMismatch)
        );
        assert_eq!(
            verify_presigned(&Method::PUT, &uri, &headers, secret, 1_175_139_000),
            Err(AuthError::UnsupportedAlgorithm)
        );
    }
}
