//! Who may do what: the access key that signed a request, and its rights on the buckets
//! the request touches.
//!
//! The authentication layer ([`super::auth`]) finds the secret of the signing key
//! ([`secret_for`]) and leaves a [`Caller`] in the request; the router asks
//! [`authorize`] before it runs any operation. The rules:
//! - the bootstrap key (`GATEWAY_ACCESS_KEY` or the generated one) may do everything;
//! - a bucket belongs to the key that created it, which may do everything on it;
//! - any other key needs a grant (`gateway admin keys allow`): read (GET, HEAD, listings,
//!   settings), write (PUT, copy onto, delete, multipart) or owner (also deleting the
//!   bucket and changing its CORS rules);
//! - a copy needs read on its source's bucket besides write on its destination's.
//!
//! Grants come from the in-memory keys map; ownership from the bucket record, read
//! locally (an owner never changes while its bucket lives) and again after a
//! linearizable barrier before a request is refused or let through to NoSuchBucket, so a
//! lagging node never decides on a bucket it has not yet seen.

use http::{HeaderMap, Method};

use super::error::{ErrorCode, S3Error};
use super::request::Target;
use crate::state::AppState;
use meta::BucketRecord;
use meta::keys::Rights;

/// The access key that signed a request, as the authentication layer found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// The bootstrap key: every right on every bucket.
    Bootstrap,
    /// A key of the `keys` table, by access key id.
    Key(String),
    /// An unsigned GET or HEAD: only what a public-read ACL opens to anyone
    /// ([`super::acl::allow_anonymous`]).
    Anonymous,
}

impl Caller {
    /// The owner recorded in a bucket this caller creates.
    pub fn owner(&self) -> Option<String> {
        match self {
            Caller::Bootstrap | Caller::Anonymous => None,
            Caller::Key(k) => Some(k.clone()),
        }
    }

    /// Whether ListBuckets shows this bucket to the caller: its own, or one it was
    /// granted any right on.
    pub fn sees(&self, app: &AppState, bucket: &str, record: &BucketRecord) -> bool {
        match self {
            Caller::Bootstrap => true,
            Caller::Anonymous => false,
            Caller::Key(k) => {
                record.owner.as_deref() == Some(k.as_str())
                    || app
                        .store
                        .meta_store()
                        .keys()
                        .get(k)
                        .is_some_and(|r| !r.granted(bucket).is_empty())
            }
        }
    }
}

/// The secret of `access_key`: the bootstrap key's, else the keys table's (from memory).
pub fn secret_for(app: &AppState, access_key: &str) -> Option<String> {
    app.credentials.secret_for(access_key).or_else(|| {
        app.store
            .meta_store()
            .keys()
            .get(access_key)
            .map(|r| r.secret.expose().to_string())
    })
}

/// The caller a verified signature names.
pub fn caller(app: &AppState, access_key: &str) -> Caller {
    if access_key == app.credentials.access_key() {
        Caller::Bootstrap
    } else {
        Caller::Key(access_key.to_string())
    }
}

/// The rights a request needs, on which buckets (none for ListBuckets, which is filtered,
/// and CreateBucket, which any key may do).
pub fn needs(
    method: &Method,
    target: &Target,
    sub: Option<&str>,
    headers: &HeaderMap,
) -> Result<Vec<(String, Rights)>, S3Error> {
    let m = method.clone();
    Ok(match target {
        Target::Service => Vec::new(),
        Target::Bucket(b) => {
            let rights = match (m, sub) {
                (Method::PUT, None) => return Ok(Vec::new()),
                (Method::GET | Method::HEAD, _) => Rights::READ,
                (Method::POST, _) if super::request::bypass_governance(headers) => Rights::OWNER,
                (Method::POST, _) => Rights::WRITE,
                // Tags are data more than settings: a key that may write the bucket's
                // objects may tag the bucket too.
                (Method::PUT | Method::DELETE, Some("tagging")) => Rights::WRITE,
                // DeleteBucket, Put/DeleteBucketCors and other settings.
                _ => Rights::OWNER,
            };
            vec![(b.clone(), rights)]
        }
        Target::Object { bucket, .. } => {
            let rights = match m {
                Method::GET | Method::HEAD => Rights::READ,
                // Bypassing GOVERNANCE retention takes the owner's right (S3's
                // s3:BypassGovernanceRetention), so handlers may take the header as granted.
                _ if super::request::bypass_governance(headers) => Rights::OWNER,
                _ => Rights::WRITE,
            };
            let mut out = vec![(bucket.clone(), rights)];
            // CopyObject and UploadPartCopy read their source.
            if m == Method::PUT && headers.contains_key("x-amz-copy-source") {
                let (source, _, _) = super::request::copy_source(headers)?;
                out.push((source, Rights::READ));
            }
            out
        }
    })
}

/// Refuses with AccessDenied unless `caller` has `rights` on `bucket`. A bucket that does
/// not exist is let through: the operation answers NoSuchBucket, as S3 does.
pub async fn authorize(
    app: &AppState,
    caller: &Caller,
    bucket: &str,
    rights: Rights,
) -> Result<(), S3Error> {
    let key = match caller {
        Caller::Bootstrap => return Ok(()),
        Caller::Anonymous => return Err(access_denied()),
        Caller::Key(k) => k,
    };
    let keys = app.store.meta_store().keys();
    // A key deleted since its signature was checked has no rights left.
    let Some(record) = keys.get(key) else {
        return Err(access_denied());
    };
    if record.granted(bucket).allows(rights) {
        return Ok(());
    }
    let owned = |r: &Option<BucketRecord>| match r {
        Some(r) => r.owner.as_deref() == Some(key.as_str()),
        None => false,
    };
    // Owned as this node has applied it: let through. Otherwise, before refusing (or
    // answering NoSuchBucket), see every write acknowledged so far.
    let name = bucket.to_string();
    let current = app
        .store
        .metadata()
        .read_unless_settled(move |m| m.bucket(&name), owned)
        .await
        .map_err(|e| S3Error::from(crate::store::StoreError::from(e)))?;
    if current.is_none() || owned(&current) {
        return Ok(());
    }
    Err(access_denied())
}

fn access_denied() -> S3Error {
    S3Error::new(ErrorCode::AccessDenied, "Access Denied")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asking to bypass GOVERNANCE retention takes the owner right, on a DELETE, a
    /// PutObjectRetention or a DeleteObjects; without the header WRITE is enough.
    #[test]
    fn the_bypass_header_asks_for_the_owner_right() {
        let object = Target::Object {
            bucket: "b".into(),
            key: "k".into(),
        };
        let mut bypass = HeaderMap::new();
        bypass.insert(
            "x-amz-bypass-governance-retention",
            "true".parse().expect("header"),
        );
        let plain = HeaderMap::new();
        let rights =
            |m: Method, t: &Target, sub, h: &HeaderMap| needs(&m, t, sub, h).expect("needs")[0].1;
        assert_eq!(rights(Method::DELETE, &object, None, &plain), Rights::WRITE);
        assert_eq!(
            rights(Method::DELETE, &object, None, &bypass),
            Rights::OWNER
        );
        assert_eq!(
            rights(Method::PUT, &object, Some("retention"), &bypass),
            Rights::OWNER
        );
        let bucket = Target::Bucket("b".into());
        assert_eq!(
            rights(Method::POST, &bucket, Some("delete"), &plain),
            Rights::WRITE
        );
        assert_eq!(
            rights(Method::POST, &bucket, Some("delete"), &bypass),
            Rights::OWNER
        );
        assert_eq!(rights(Method::GET, &object, None, &bypass), Rights::READ);
    }

    /// Tagging takes the write right to change tags and the read right to read them, on
    /// an object as on its bucket.
    #[test]
    fn tagging_takes_write_to_change_and_read_to_read() {
        let object = Target::Object {
            bucket: "b".into(),
            key: "k".into(),
        };
        let bucket = Target::Bucket("b".into());
        let plain = HeaderMap::new();
        let rights =
            |m: Method, t: &Target| needs(&m, t, Some("tagging"), &plain).expect("needs")[0].1;
        for target in [&object, &bucket] {
            assert_eq!(rights(Method::PUT, target), Rights::WRITE);
            assert_eq!(rights(Method::DELETE, target), Rights::WRITE);
            assert_eq!(rights(Method::GET, target), Rights::READ);
        }
        assert_eq!(
            rights(Method::PUT, &Target::Bucket("b".into())),
            Rights::WRITE
        );
        assert_eq!(
            needs(&Method::PUT, &bucket, Some("cors"), &plain).expect("needs")[0].1,
            Rights::OWNER
        );
    }
}
