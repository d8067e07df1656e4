//! The one error of the internal APIs, `{"error": MESSAGE}` with a status, and the one way
//! they answer JSON.
//!
//! Every client reads the same field: `gateway admin` (`cli/admin.rs`, `cli/admin_keys.rs`)
//! prints `error`, Valkyrie's `HttpCatalog` goes by the status alone. The mapping of the
//! store's and the metadata's errors to statuses is here, once; a handler maps only what
//! it knows better (an unknown pair id named in its message, a bucket not empty).

use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};
use serde::Serialize;
use valkyrie::CatalogError;

use crate::store::StoreError;
use meta::MetaError;

/// What an internal API handler answers.
pub type ApiResult = Result<Response, ApiError>;

/// A refused or failed internal API call: `status` with `{"error": message}`.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl std::fmt::Display) -> Self {
        ApiError {
            status,
            message: message.to_string(),
        }
    }

    pub fn bad_request(message: impl std::fmt::Display) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl std::fmt::Display) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }

    /// A failure of the gateway itself: logged, and told as it is (operators read it).
    pub fn internal(e: impl std::fmt::Display) -> Self {
        tracing::error!(error = %e, "internal API call failed");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e)
    }

    /// The error as told to a caller that is not an operator (the native API's mail back
    /// ends): the gateway's own failure is only `internal error`; the log has the rest.
    pub fn hide_internal(self) -> Self {
        if self.status == StatusCode::INTERNAL_SERVER_ERROR {
            ApiError::new(self.status, "internal error")
        } else {
            self
        }
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        json(self.status, &serde_json::json!({ "error": self.message }))
    }
}

/// A metadata failure: what names something unknown is 404, a refused key change 400, no
/// quorum 503 (to be retried), anything else the gateway's failure.
impl From<MetaError> for ApiError {
    fn from(e: MetaError) -> Self {
        use MetaError as M;
        match e {
            M::NoSuchBucket | M::NotFound | M::NoSuchAccessKey => ApiError::not_found(e),
            M::AccessKeyExists | M::KeyLimit(_) | M::InvalidPart(_) => ApiError::bad_request(e),
            M::Unavailable(_) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e),
            M::InvalidBucketState(_) => ApiError::new(StatusCode::CONFLICT, e),
            other => ApiError::internal(other),
        }
    }
}

/// A store failure: a body the store refused is the client's mistake (400), an unknown
/// bucket or pair 404, a bucket still holding objects 409, no writable pair or no quorum
/// 503 (to be retried), anything else the gateway's failure.
impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        use StoreError as S;
        match e {
            S::EntityTooLarge { .. } | S::IncompleteBody => ApiError::bad_request(e),
            S::NoSuchBucket(_) | S::NoSuchPair => ApiError::not_found(e),
            S::BucketNotEmpty(_) => ApiError::new(StatusCode::CONFLICT, e),
            S::NoWritablePair | S::Unavailable(_) | S::SlowDown => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e)
            }
            other => ApiError::internal(other),
        }
    }
}

/// The in-process catalog fails only when the store does: the gateway's failure.
impl From<CatalogError> for ApiError {
    fn from(e: CatalogError) -> Self {
        ApiError::internal(e)
    }
}

/// A JSON answer, compact: `{"a":1}`.
pub fn json(status: StatusCode, value: &impl Serialize) -> Response {
    match serde_json::to_string(value) {
        Ok(text) => with_json_type(status, text),
        Err(e) => ApiError::internal(e).into_response(),
    }
}

/// A 200 JSON answer indented for an operator's terminal, with a final newline (the
/// cluster's status and digest).
pub fn json_pretty(value: &impl Serialize) -> Response {
    match serde_json::to_string_pretty(value) {
        Ok(text) => with_json_type(StatusCode::OK, format!("{text}\n")),
        Err(e) => ApiError::internal(e).into_response(),
    }
}

fn with_json_type(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answer(r: Response) -> (StatusCode, String, String) {
        let status = r.status();
        let content_type = r.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_string();
        let bytes = axum::body::to_bytes(r.into_body(), 1 << 10).await.unwrap();
        (
            status,
            content_type,
            String::from_utf8(bytes.to_vec()).unwrap(),
        )
    }

    #[tokio::test]
    async fn an_error_is_its_status_with_an_error_field() {
        let e = ApiError::new(StatusCode::CONFLICT, "say \"no\"\n");
        assert_eq!(
            answer(e.into_response()).await,
            (
                StatusCode::CONFLICT,
                "application/json".into(),
                r#"{"error":"say \"no\"\n"}"#.into()
            )
        );
    }

    #[tokio::test]
    async fn json_is_compact_and_json_pretty_indented() {
        let v = serde_json::json!({ "refs": 2, "state": "live" });
        assert_eq!(
            answer(json(StatusCode::ACCEPTED, &v)).await,
            (
                StatusCode::ACCEPTED,
                "application/json".into(),
                r#"{"refs":2,"state":"live"}"#.into()
            )
        );
        assert_eq!(
            answer(json_pretty(&v)).await.2,
            "{\n  \"refs\": 2,\n  \"state\": \"live\"\n}\n"
        );
    }

    #[test]
    fn metadata_errors_become_statuses() {
        let status = |e: MetaError| ApiError::from(e).status;
        for (e, want) in [
            (MetaError::NoSuchBucket, StatusCode::NOT_FOUND),
            (MetaError::NotFound, StatusCode::NOT_FOUND),
            (MetaError::NoSuchAccessKey, StatusCode::NOT_FOUND),
            (MetaError::AccessKeyExists, StatusCode::BAD_REQUEST),
            (
                MetaError::KeyLimit("64 keys".into()),
                StatusCode::BAD_REQUEST,
            ),
            (MetaError::InvalidPart("x".into()), StatusCode::BAD_REQUEST),
            (
                MetaError::Unavailable("no leader".into()),
                StatusCode::SERVICE_UNAVAILABLE,
            ),
            (MetaError::RefsOverflow, StatusCode::INTERNAL_SERVER_ERROR),
            (
                MetaError::Storage("disk".into()),
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
        ] {
            let what = e.to_string();
            assert_eq!(status(e), want, "{what}");
        }
        // The message is the error's own, as `gateway admin keys` prints it.
        assert_eq!(
            ApiError::from(MetaError::NoSuchAccessKey).message,
            "no such access key"
        );
    }

    #[test]
    fn store_errors_become_statuses() {
        let status = |e: StoreError| ApiError::from(e).status;
        for (e, want) in [
            (
                StoreError::EntityTooLarge { max_bytes: 1 },
                StatusCode::BAD_REQUEST,
            ),
            (StoreError::IncompleteBody, StatusCode::BAD_REQUEST),
            (StoreError::NoSuchBucket("b".into()), StatusCode::NOT_FOUND),
            (StoreError::NoSuchPair, StatusCode::NOT_FOUND),
            (StoreError::BucketNotEmpty("b".into()), StatusCode::CONFLICT),
            (StoreError::NoWritablePair, StatusCode::SERVICE_UNAVAILABLE),
            (StoreError::SlowDown, StatusCode::SERVICE_UNAVAILABLE),
            (
                StoreError::Unavailable("no leader".into()),
                StatusCode::SERVICE_UNAVAILABLE,
            ),
            (
                StoreError::Meta(MetaError::RefsOverflow),
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
            (
                StoreError::Internal("x".into()),
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
        ] {
            let what = e.to_string();
            assert_eq!(status(e), want, "{what}");
        }
        assert_eq!(
            ApiError::from(CatalogError::Store("x".into())).status,
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }

    #[test]
    fn hide_internal_hides_only_the_gateways_failures() {
        let hidden = ApiError::from(StoreError::Internal("disk 3 is gone".into())).hide_internal();
        assert_eq!(
            hidden,
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
        );
        let told = ApiError::from(StoreError::NoWritablePair).hide_internal();
        assert_eq!(told.message, "no writable disk pair has room");
    }
}
