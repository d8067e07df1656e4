//! The S3 operation a request names (`PutObject`, `ListObjectsV2`, ...), as a metrics label.
//!
//! It mirrors the routing in [`super::route`] but only classifies: it never fails, and a
//! request the router would refuse is named by its method and resource kind
//! (`GET bucket?acl` is `GetBucketAcl`, anything unknown is `Other`). The label set stays
//! small and fixed (every name is a `&'static str`), so a client cannot grow the metrics
//! without bound by sending odd query strings.

use http::Method;

use super::request::{Query, Target};

/// The operation of a request; `Other` when the path or query does not parse.
pub fn of(method: &Method, uri: &http::Uri, target: Option<&Target>, copy: bool) -> &'static str {
    let Some(target) = target else {
        return "Other";
    };
    let sub = Query::parse(uri).ok();
    let sub = sub.as_ref().and_then(|q| q.subresource());
    let list_v2 = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "list-type=2"));
    classify(method, target, sub, copy, list_v2)
}

fn classify(
    method: &Method,
    target: &Target,
    sub: Option<&str>,
    copy: bool,
    list_v2: bool,
) -> &'static str {
    match (method, target, sub) {
        (&Method::OPTIONS, _, _) => "PreflightRequest",
        (&Method::GET, Target::Service, _) => "ListBuckets",
        (&Method::PUT, Target::Bucket(_), None) => "CreateBucket",
        (&Method::HEAD, Target::Bucket(_), _) => "HeadBucket",
        (&Method::DELETE, Target::Bucket(_), None) => "DeleteBucket",
        (&Method::GET, Target::Bucket(_), None) if list_v2 => "ListObjectsV2",
        (&Method::GET, Target::Bucket(_), None) => "ListObjects",
        (&Method::GET, Target::Bucket(_), Some("location")) => "GetBucketLocation",
        (&Method::GET, Target::Bucket(_), Some("uploads")) => "ListMultipartUploads",
        (&Method::GET, Target::Bucket(_), Some("cors")) => "GetBucketCors",
        (&Method::PUT, Target::Bucket(_), Some("cors")) => "PutBucketCors",
        (&Method::DELETE, Target::Bucket(_), Some("cors")) => "DeleteBucketCors",
        (&Method::POST, Target::Bucket(_), Some("delete")) => "DeleteObjects",
        (&Method::GET, Target::Bucket(_), Some("versions")) => "ListObjectVersions",
        (&Method::GET, Target::Bucket(_), Some("versioning")) => "GetBucketVersioning",
        (&Method::PUT, Target::Bucket(_), Some("versioning")) => "PutBucketVersioning",
        // A browser's form upload (multipart/form-data on the bucket).
        (&Method::POST, Target::Bucket(_), None) => "PostObject",
        (&Method::GET, Target::Bucket(_), Some("tagging")) => "GetBucketTagging",
        (&Method::PUT, Target::Bucket(_), Some("tagging")) => "PutBucketTagging",
        (&Method::DELETE, Target::Bucket(_), Some("tagging")) => "DeleteBucketTagging",
        (&Method::GET, Target::Object { .. }, Some("tagging")) => "GetObjectTagging",
        (&Method::PUT, Target::Object { .. }, Some("tagging")) => "PutObjectTagging",
        (&Method::DELETE, Target::Object { .. }, Some("tagging")) => "DeleteObjectTagging",
        (&Method::GET, Target::Bucket(_), Some(_)) => "GetBucketSetting",
        (&Method::PUT, Target::Bucket(_), Some(_)) => "PutBucketSetting",
        (&Method::PUT, Target::Object { .. }, None) if copy => "CopyObject",
        (&Method::PUT, Target::Object { .. }, None) => "PutObject",
        (&Method::PUT, Target::Object { .. }, Some("partNumber" | "uploadId")) if copy => {
            "UploadPartCopy"
        }
        (&Method::PUT, Target::Object { .. }, Some("partNumber" | "uploadId")) => "UploadPart",
        (&Method::POST, Target::Object { .. }, Some("uploads")) => "CreateMultipartUpload",
        (&Method::POST, Target::Object { .. }, Some("uploadId")) => "CompleteMultipartUpload",
        (&Method::GET, Target::Object { .. }, None | Some("partNumber")) => "GetObject",
        (&Method::GET, Target::Object { .. }, Some("uploadId")) => "ListParts",
        (&Method::GET, Target::Object { .. }, Some("attributes")) => "GetObjectAttributes",
        (&Method::GET, Target::Object { .. }, Some(_)) => "GetObjectSetting",
        (&Method::HEAD, Target::Object { .. }, _) => "HeadObject",
        (&Method::DELETE, Target::Object { .. }, None) => "DeleteObject",
        (&Method::DELETE, Target::Object { .. }, Some("uploadId")) => "AbortMultipartUpload",
        _ => "Other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(method: Method, uri: &str, copy: bool) -> &'static str {
        let uri: http::Uri = uri.parse().unwrap();
        let target = Target::from_request(&uri, None, None).ok();
        of(&method, &uri, target.as_ref(), copy)
    }

    #[test]
    fn requests_are_named_as_s3_names_them() {
        assert_eq!(op(Method::GET, "/", false), "ListBuckets");
        assert_eq!(op(Method::PUT, "/b", false), "CreateBucket");
        assert_eq!(op(Method::GET, "/b?versions", false), "ListObjectVersions");
        assert_eq!(
            op(Method::PUT, "/b?versioning", false),
            "PutBucketVersioning"
        );
        assert_eq!(
            op(Method::GET, "/b?list-type=2&prefix=a", false),
            "ListObjectsV2"
        );
        assert_eq!(op(Method::GET, "/b", false), "ListObjects");
        assert_eq!(op(Method::PUT, "/b/k", false), "PutObject");
        assert_eq!(op(Method::PUT, "/b/k", true), "CopyObject");
        assert_eq!(op(Method::GET, "/b/k", false), "GetObject");
        assert_eq!(op(Method::HEAD, "/b/k", false), "HeadObject");
        assert_eq!(op(Method::DELETE, "/b/k", false), "DeleteObject");
        assert_eq!(op(Method::POST, "/b?delete", false), "DeleteObjects");
        assert_eq!(op(Method::POST, "/b", false), "PostObject");
        assert_eq!(
            op(Method::POST, "/b/k?uploads", false),
            "CreateMultipartUpload"
        );
        assert_eq!(
            op(Method::PUT, "/b/k?partNumber=1&uploadId=u", false),
            "UploadPart"
        );
        assert_eq!(op(Method::PUT, "/b/k?tagging", false), "PutObjectTagging");
        assert_eq!(
            op(Method::DELETE, "/b?tagging", false),
            "DeleteBucketTagging"
        );
        assert_eq!(op(Method::PATCH, "/b/k", false), "Other");
    }
}
