//! Bucket and object settings this gateway does not keep, answered as S3 answers for a
//! bucket that never had them: clients (s3cmd info, rclone, SDK-based tools) ask for them
//! routinely and treat these answers as "not configured", where a NotImplemented would
//! be an error.

use axum::response::{IntoResponse, Response};
use http::header;

use super::error::{ErrorCode, S3Error};
use super::xml::XmlWriter;
use crate::state::AppState;

const OWNER_ID: &str = "dedup-gateway";

fn xml(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/xml")], body).into_response()
}

/// A bucket's unkept setting `sub`, if it is one this module answers.
pub async fn bucket_setting(
    app: &AppState,
    bucket: &str,
    sub: &str,
) -> Option<Result<Response, S3Error>> {
    let not_found = |code: ErrorCode, message: &'static str| {
        Some(Err(S3Error::new(code, message).with_resource(bucket)))
    };
    let answer = match sub {
        // Unversioned: an empty configuration, no Status element.
        "versioning" => {
            let mut w = XmlWriter::new();
            w.open_root("VersioningConfiguration");
            w.close("VersioningConfiguration");
            Some(Ok(xml(w.finish())))
        }
        "acl" => Some(Ok(owner_full_control())),
        "policy" => not_found(
            ErrorCode::NoSuchBucketPolicy,
            "The bucket policy does not exist",
        ),
        "encryption" => not_found(
            ErrorCode::ServerSideEncryptionConfigurationNotFoundError,
            "The server side encryption configuration was not found",
        ),
        "tagging" => not_found(ErrorCode::NoSuchTagSet, "The TagSet does not exist"),
        "object-lock" => not_found(
            ErrorCode::ObjectLockConfigurationNotFoundError,
            "Object Lock configuration does not exist for this bucket",
        ),
        _ => None,
    }?;
    // The bucket must exist for any of these answers.
    Some(match app.store.bucket(bucket).await {
        Ok(_) => answer,
        Err(e) => Err(e.into()),
    })
}

/// An object's unkept setting `sub`, if it is one this module answers.
pub async fn object_setting(
    app: &AppState,
    bucket: &str,
    key: &str,
    sub: &str,
) -> Option<Result<Response, S3Error>> {
    let answer = match sub {
        "acl" => owner_full_control(),
        // No tags are kept: an empty tag set.
        "tagging" => {
            let mut w = XmlWriter::new();
            w.open_root("Tagging");
            w.open("TagSet");
            w.close("TagSet");
            w.close("Tagging");
            xml(w.finish())
        }
        _ => return None,
    };
    Some(
        app.store
            .head(bucket, key)
            .await
            .map(|_| answer)
            .map_err(S3Error::from),
    )
}

/// The only access policy there is: the one owner has full control.
fn owner_full_control() -> Response {
    let mut w = XmlWriter::new();
    w.open_root("AccessControlPolicy");
    w.open("Owner");
    w.leaf("ID", OWNER_ID);
    w.leaf("DisplayName", OWNER_ID);
    w.close("Owner");
    w.open("AccessControlList");
    w.open("Grant");
    w.open_grantee();
    w.leaf("ID", OWNER_ID);
    w.leaf("DisplayName", OWNER_ID);
    w.close("Grantee");
    w.leaf("Permission", "FULL_CONTROL");
    w.close("Grant");
    w.close("AccessControlList");
    w.close("AccessControlPolicy");
    xml(w.finish())
}
