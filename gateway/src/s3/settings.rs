//! Bucket and object settings this gateway does not keep, answered as S3 answers for a
//! bucket that never had them: clients (s3cmd info, rclone, SDK-based tools) ask for them
//! routinely and treat these answers as "not configured", where a NotImplemented would
//! be an error.

use axum::response::{IntoResponse, Response};
use http::header;

use super::error::{ErrorCode, S3Error};
use super::owner::Owner;
use super::xml::XmlWriter;
use crate::state::AppState;

fn xml(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/xml")], body).into_response()
}

/// A bucket's unkept setting `sub`, if it is one this module answers.
pub async fn bucket_setting(
    app: &AppState,
    bucket: &str,
    sub: &str,
) -> Option<Result<Response, S3Error>> {
    const ANSWERED: [&str; 4] = ["acl", "policy", "encryption", "object-lock"];
    if !ANSWERED.contains(&sub) {
        return None;
    }
    // The bucket must exist for any of these answers.
    let record = match app.store.bucket(bucket).await {
        Ok(r) => r,
        Err(e) => return Some(Err(e.into())),
    };
    let not_found = |code: ErrorCode, message: &'static str| {
        Err(S3Error::new(code, message).with_resource(bucket))
    };
    Some(match sub {
        "acl" => Ok(owner_full_control(&Owner::of_bucket(app, &record))),
        "policy" => not_found(
            ErrorCode::NoSuchBucketPolicy,
            "The bucket policy does not exist",
        ),
        "encryption" => not_found(
            ErrorCode::ServerSideEncryptionConfigurationNotFoundError,
            "The server side encryption configuration was not found",
        ),
        _ => Err(S3Error::not_implemented(&format!("?{sub}"))),
    })
}

/// An object's unkept setting `sub`, if it is one this module answers.
pub async fn object_setting(
    app: &AppState,
    bucket: &str,
    key: &str,
    sub: &str,
) -> Option<Result<Response, S3Error>> {
    if sub != "acl" {
        return None;
    }
    let record = match app.store.bucket(bucket).await {
        Ok(r) => r,
        Err(e) => return Some(Err(e.into())),
    };
    if let Err(e) = app.store.head(bucket, key).await {
        return Some(Err(e.into()));
    }
    // The object's owner is its bucket's: the key that wrote it is not recorded.
    Some(Ok(owner_full_control(&Owner::of_bucket(app, &record))))
}

/// The only access policy there is: the owner has full control.
fn owner_full_control(owner: &Owner) -> Response {
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
    w.close("AccessControlList");
    w.close("AccessControlPolicy");
    xml(w.finish())
}
