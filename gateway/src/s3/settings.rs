//! Bucket and object settings this gateway does not keep, answered as S3 answers for a
//! bucket that never had them: clients (s3cmd info, rclone, SDK-based tools) ask for them
//! routinely and treat these answers as "not configured", where a NotImplemented would
//! be an error.

use axum::response::Response;

use super::error::{ErrorCode, S3Error};
use crate::state::AppState;

/// A bucket's unkept setting `sub`, if it is one this module answers.
pub async fn bucket_setting(
    app: &AppState,
    bucket: &str,
    sub: &str,
) -> Option<Result<Response, S3Error>> {
    const ANSWERED: [&str; 2] = ["policy", "encryption"];
    if !ANSWERED.contains(&sub) {
        return None;
    }
    // The bucket must exist for any of these answers.
    if let Err(e) = app.store.bucket(bucket).await {
        return Some(Err(e.into()));
    }
    let not_found = |code: ErrorCode, message: &'static str| {
        Err(S3Error::new(code, message).with_resource(bucket))
    };
    Some(match sub {
        "policy" => not_found(
            ErrorCode::NoSuchBucketPolicy,
            "The bucket policy does not exist",
        ),
        _ => not_found(
            ErrorCode::ServerSideEncryptionConfigurationNotFoundError,
            "The server side encryption configuration was not found",
        ),
    })
}
