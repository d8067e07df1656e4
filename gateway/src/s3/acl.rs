//! Canned ACLs as S3 speaks them, as far as public links need: `x-amz-acl` (`private`,
//! `public-read`; `bucket-owner-read` and `bucket-owner-full-control` are `private` here,
//! since an object's owner is its bucket's) on CreateBucket, PutObject, CopyObject,
//! CreateMultipartUpload and POST uploads; Put/Get{Bucket,Object}Acl with the header or an
//! `AccessControlPolicy` document whose grants are exactly a canned ACL's; and the
//! anonymous reads a public-read object or bucket allows. Any other grant
//! (`x-amz-grant-*`, `authenticated-read`, grants to other accounts) answers
//! NotImplemented: never accepted and ignored.

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use meta::acl::CannedAcl;
use serde::Deserialize;

use super::error::{ErrorCode, S3Error};
use super::owner::Owner;
use super::request::{Query, Target, header_str};
use super::xml::XmlWriter;
use crate::state::AppState;

/// Bound on an `AccessControlPolicy` body (a canned ACL's document is under 1 KB).
const ACL_BODY_BYTES_MAX: usize = 64 * 1024;
/// S3's group of everyone, signed or not.
pub const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";

fn xml(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/xml")], body).into_response()
}

/// A canned ACL by its S3 name.
pub fn parse_canned(name: &str) -> Result<CannedAcl, S3Error> {
    match name.trim() {
        // The object's owner is its bucket's: the bucket owner's grants are the owner's.
        "private" | "bucket-owner-read" | "bucket-owner-full-control" => Ok(CannedAcl::Private),
        "public-read" => Ok(CannedAcl::PublicRead),
        other @ ("public-read-write" | "authenticated-read" | "aws-exec-read"
        | "log-delivery-write") => {
            Err(S3Error::not_implemented(&format!("The canned ACL {other}")))
        }
        _ => Err(S3Error::new(
            ErrorCode::InvalidArgument,
            "The canned ACL is not one of S3's",
        )),
    }
}

/// The canned ACL a write asks for (`x-amz-acl`; private without it). Grant headers ask
/// for grants this gateway does not keep.
pub fn from_headers(headers: &HeaderMap) -> Result<CannedAcl, S3Error> {
    if headers
        .keys()
        .any(|k| k.as_str().starts_with("x-amz-grant-"))
    {
        return Err(S3Error::not_implemented("x-amz-grant-* headers"));
    }
    match header_str(headers, "x-amz-acl")? {
        Some(v) => parse_canned(v),
        None => Ok(CannedAcl::Private),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct PolicyXml {
    access_control_list: Option<ListXml>,
}

#[derive(Deserialize)]
struct ListXml {
    #[serde(rename = "Grant", default)]
    grants: Vec<GrantXml>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct GrantXml {
    grantee: Option<GranteeXml>,
    permission: Option<String>,
}

#[derive(Deserialize)]
struct GranteeXml {
    #[serde(rename = "ID")]
    id: Option<String>,
    #[serde(rename = "URI")]
    uri: Option<String>,
    #[serde(rename = "EmailAddress")]
    email: Option<String>,
}

fn malformed() -> S3Error {
    S3Error::new(
        ErrorCode::MalformedACLError,
        "The XML you provided was not well-formed or did not validate against our published schema",
    )
}

/// The canned ACL an `AccessControlPolicy` document's grants are, for a resource owned by
/// `owner_id`: the owner's FULL_CONTROL alone (private), or with AllUsers READ
/// (public-read). Any other set of grants is NotImplemented.
pub fn parse_policy(text: &str, owner_id: &str) -> Result<CannedAcl, S3Error> {
    let parsed: PolicyXml = quick_xml::de::from_str(text).map_err(|_| malformed())?;
    let grants = parsed.access_control_list.ok_or_else(malformed)?.grants;
    let mut owner_full = false;
    let mut all_read = false;
    let mut other = false;
    for g in &grants {
        let (Some(grantee), Some(permission)) = (&g.grantee, &g.permission) else {
            return Err(malformed());
        };
        let permission = permission.trim();
        match (&grantee.id, &grantee.uri, &grantee.email) {
            (Some(id), None, None) if id.trim() == owner_id && permission == "FULL_CONTROL" => {
                owner_full = true;
            }
            (None, Some(uri), None) if uri.trim() == ALL_USERS && permission == "READ" => {
                all_read = true;
            }
            (None, None, None) => return Err(malformed()),
            _ => other = true,
        }
    }
    match (owner_full, all_read, other, grants.len()) {
        (true, false, false, 1) => Ok(CannedAcl::Private),
        (true, true, false, 2) => Ok(CannedAcl::PublicRead),
        _ => Err(S3Error::not_implemented(
            "Grants other than a canned private or public-read ACL",
        )),
    }
}

/// The `AccessControlPolicy` document of a canned ACL on a resource of `owner`.
pub fn render(owner: &Owner, acl: CannedAcl) -> Vec<u8> {
    let mut w = XmlWriter::new();
    w.open_root("AccessControlPolicy");
    owner.write(&mut w, "Owner");
    w.open("AccessControlList");
    w.open("Grant");
    w.open_grantee();
    w.leaf("ID", &owner.id);
    w.leaf("DisplayName", &owner.display_name);
    w.close("Grantee");
    w.leaf("Permission", "FULL_CONTROL");
    w.close("Grant");
    if acl.is_public() {
        w.open("Grant");
        w.open_group_grantee();
        w.leaf("URI", ALL_USERS);
        w.close("Grantee");
        w.leaf("Permission", "READ");
        w.close("Grant");
    }
    w.close("AccessControlList");
    w.close("AccessControlPolicy");
    w.finish()
}

/// The ACL a PutBucketAcl or PutObjectAcl asks for: its `x-amz-acl`, or its document.
async fn requested(req: Request, owner: &Owner) -> Result<CannedAcl, S3Error> {
    let headers = req.headers().clone();
    let has_header = headers.contains_key("x-amz-acl");
    let acl = from_headers(&headers)?;
    let text = super::auth::read_xml_body(req.into_body(), ACL_BODY_BYTES_MAX).await?;
    match (has_header, text.trim().is_empty()) {
        (true, true) => Ok(acl),
        (false, false) => parse_policy(&text, &owner.id),
        (true, false) => Err(S3Error::new(
            ErrorCode::InvalidRequest,
            "Specifying both Canned ACLs and an AccessControlPolicy document is not allowed",
        )),
        (false, true) => Err(S3Error::new(
            ErrorCode::MissingSecurityHeader,
            "Your request was missing a required header",
        )),
    }
}

fn version_header(resp: &mut Response, version_id: Option<&str>) {
    if let Some(v) = version_id.and_then(|id| HeaderValue::from_str(id).ok()) {
        resp.headers_mut().insert("x-amz-version-id", v);
    }
}

/// `GetBucketAcl`.
pub async fn get_bucket(app: &AppState, bucket: &str) -> Result<Response, S3Error> {
    let record = app.store.bucket(bucket).await?;
    let acl = app.store.bucket_acl(bucket).await?;
    Ok(xml(render(&Owner::of_bucket(app, &record), acl)))
}

/// `PutBucketAcl`.
pub async fn put_bucket(app: &AppState, bucket: &str, req: Request) -> Result<Response, S3Error> {
    let record = app.store.bucket(bucket).await?;
    let acl = requested(req, &Owner::of_bucket(app, &record)).await?;
    app.store.set_bucket_acl(bucket, acl).await?;
    Ok(StatusCode::OK.into_response())
}

/// `GetObjectAcl`: the object's owner is its bucket's.
pub async fn get_object(
    app: &AppState,
    bucket: &str,
    key: &str,
    q: &Query,
) -> Result<Response, S3Error> {
    let record = app.store.bucket(bucket).await?;
    let head = app.store.head_at(bucket, key, q.get("versionId")).await?;
    let mut resp = xml(render(&Owner::of_bucket(app, &record), head.acl));
    version_header(&mut resp, head.version_id.as_deref());
    Ok(resp)
}

/// `PutObjectAcl`.
pub async fn put_object(
    app: &AppState,
    bucket: &str,
    key: &str,
    q: &Query,
    req: Request,
) -> Result<Response, S3Error> {
    let record = app.store.bucket(bucket).await?;
    let acl = requested(req, &Owner::of_bucket(app, &record)).await?;
    let version_id = app
        .store
        .set_object_acl(bucket, key, q.get("versionId"), acl)
        .await?;
    let mut resp = StatusCode::OK.into_response();
    version_header(&mut resp, version_id.as_deref());
    Ok(resp)
}

fn access_denied() -> S3Error {
    S3Error::new(ErrorCode::AccessDenied, "Access Denied")
}

/// Whether an unsigned request may go on: a GET or HEAD of an object that is public-read
/// or in a public-read bucket, a HEAD of a public-read bucket or a listing of it (GET
/// without a sub-resource). Everything else is AccessDenied, including a bucket or object
/// that does not exist (a public bucket's missing key is its handler's 404, as S3 answers
/// anyone who may list the bucket).
pub async fn allow_anonymous(
    app: &AppState,
    method: &Method,
    target: &Target,
    sub: Option<&str>,
    q: &Query,
) -> Result<(), S3Error> {
    if *method != Method::GET && *method != Method::HEAD {
        return Err(access_denied());
    }
    let public_bucket = |b: &str| {
        let b = b.to_string();
        async move { app.store.bucket_acl(&b).await.is_ok_and(|a| a.is_public()) }
    };
    match (target, sub) {
        (Target::Bucket(b), None) if public_bucket(b).await => Ok(()),
        (Target::Object { bucket, key }, None | Some("partNumber")) => {
            if public_bucket(bucket).await {
                return Ok(());
            }
            match app.store.head_at(bucket, key, q.get("versionId")).await {
                Ok(head) if head.acl.is_public() => Ok(()),
                _ => Err(access_denied()),
            }
        }
        _ => Err(access_denied()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWNER: &str = "0a1b";

    fn policy(grants: &str) -> String {
        format!(
            "<AccessControlPolicy><Owner><ID>{OWNER}</ID></Owner><AccessControlList>{grants}</AccessControlList></AccessControlPolicy>"
        )
    }

    fn owner_full() -> String {
        format!(
            "<Grant><Grantee xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xsi:type=\"CanonicalUser\"><ID>{OWNER}</ID></Grantee><Permission>FULL_CONTROL</Permission></Grant>"
        )
    }

    fn all_users(permission: &str) -> String {
        format!(
            "<Grant><Grantee xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xsi:type=\"Group\"><URI>{ALL_USERS}</URI></Grantee><Permission>{permission}</Permission></Grant>"
        )
    }

    #[test]
    fn documents_equal_to_a_canned_acl_are_taken_and_others_are_not() {
        assert_eq!(
            parse_policy(&policy(&owner_full()), OWNER).unwrap(),
            CannedAcl::Private
        );
        let public = policy(&format!("{}{}", all_users("READ"), owner_full()));
        assert_eq!(parse_policy(&public, OWNER).unwrap(), CannedAcl::PublicRead);
        // What we render parses back to itself.
        let owner = Owner {
            id: OWNER.into(),
            display_name: "k".into(),
        };
        for acl in [CannedAcl::Private, CannedAcl::PublicRead] {
            let doc = String::from_utf8(render(&owner, acl)).unwrap();
            assert_eq!(parse_policy(&doc, OWNER).unwrap(), acl, "{doc}");
        }
        for (doc, code) in [
            (policy(&all_users("READ")), ErrorCode::NotImplemented),
            (
                policy(&format!("{}{}", owner_full(), all_users("WRITE"))),
                ErrorCode::NotImplemented,
            ),
            (
                policy(&owner_full().replace(OWNER, "someone-else")),
                ErrorCode::NotImplemented,
            ),
            (
                policy(&owner_full().replace("FULL_CONTROL", "READ")),
                ErrorCode::NotImplemented,
            ),
            (policy(""), ErrorCode::NotImplemented),
            (
                "<AccessControlPolicy/>".to_string(),
                ErrorCode::MalformedACLError,
            ),
            ("not xml".to_string(), ErrorCode::MalformedACLError),
        ] {
            assert_eq!(parse_policy(&doc, OWNER).unwrap_err().code, code, "{doc}");
        }
    }

    #[test]
    fn canned_names_are_s3s() {
        assert_eq!(parse_canned("private").unwrap(), CannedAcl::Private);
        assert_eq!(parse_canned("public-read").unwrap(), CannedAcl::PublicRead);
        assert_eq!(
            parse_canned("bucket-owner-full-control").unwrap(),
            CannedAcl::Private
        );
        assert_eq!(
            parse_canned("authenticated-read").unwrap_err().code,
            ErrorCode::NotImplemented
        );
        assert_eq!(
            parse_canned("public-read-write").unwrap_err().code,
            ErrorCode::NotImplemented
        );
        assert_eq!(
            parse_canned("everyone").unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        let mut h = HeaderMap::new();
        assert_eq!(from_headers(&h).unwrap(), CannedAcl::Private);
        h.insert("x-amz-acl", HeaderValue::from_static("public-read"));
        assert_eq!(from_headers(&h).unwrap(), CannedAcl::PublicRead);
        h.insert("x-amz-grant-read", HeaderValue::from_static("uri=x"));
        assert_eq!(
            from_headers(&h).unwrap_err().code,
            ErrorCode::NotImplemented
        );
    }
}
