//! The S3 API: routing, authentication, and the handlers of each operation.
//!
//! Handlers are thin: they read the request, call [`crate::store::ObjectStore`] and render
//! the result; every failure becomes an [`error::S3Error`] rendered as S3's XML error.
//! S3 routes on method, path *and* query (`?uploads`, `?location`, `list-type=2`), which
//! axum's path router cannot express, so one `dispatch` function does the routing.

pub mod auth;
mod bucket;
pub mod chunked;
pub mod error;
mod object;
pub mod request;
pub mod sigv4;
pub mod xml;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::Method;

use crate::server::AppState;
use error::{ErrorCode, S3Error};
use request::{Query, Target};

/// Routes one authenticated S3 request to its operation.
pub async fn dispatch(State(app): State<Arc<AppState>>, req: Request) -> Response {
    match route(&app, req).await {
        Ok(resp) => resp,
        Err(e) => e.into_response(),
    }
}

async fn route(app: &AppState, req: Request) -> Result<Response, S3Error> {
    let target = Target::from_uri(req.uri())?;
    let query = Query::parse(req.uri())?;
    let method = req.method().clone();
    let sub = query.subresource();
    match (&method, target) {
        (&Method::GET, Target::Service) => bucket::list_buckets(app).await,
        (&Method::PUT, Target::Bucket(b)) if sub.is_none() => bucket::create(app, &b).await,
        (&Method::HEAD, Target::Bucket(b)) => bucket::head(app, &b).await,
        (&Method::DELETE, Target::Bucket(b)) if sub.is_none() => bucket::delete(app, &b).await,
        (&Method::GET, Target::Bucket(b)) => match sub {
            Some("location") => bucket::location(app, &b).await,
            None => bucket::list_objects(app, &b, &query).await,
            Some(other) => Err(S3Error::not_implemented(&format!("?{other}"))),
        },
        (&Method::PUT, Target::Object { .. })
            if req.headers().contains_key("x-amz-copy-source") =>
        {
            Err(S3Error::not_implemented("CopyObject"))
        }
        (&Method::PUT, Target::Object { bucket, key }) if sub.is_none() => {
            object::put(app, &bucket, &key, req).await
        }
        (&Method::GET, Target::Object { bucket, key }) if sub.is_none() => {
            object::get(app, &bucket, &key, req.headers()).await
        }
        (&Method::HEAD, Target::Object { bucket, key }) if sub.is_none() => {
            object::head(app, &bucket, &key).await
        }
        (&Method::DELETE, Target::Object { bucket, key }) if sub.is_none() => {
            object::delete(app, &bucket, &key).await
        }
        (m, _)
            if [
                Method::GET,
                Method::PUT,
                Method::HEAD,
                Method::DELETE,
                Method::POST,
            ]
            .contains(m) =>
        {
            Err(S3Error::not_implemented(&format!(
                "{m} {}",
                sub.map(|s| format!("?{s}"))
                    .unwrap_or_else(|| "on this resource".into())
            )))
        }
        _ => Err(S3Error::new(
            ErrorCode::MethodNotAllowed,
            "The specified method is not allowed against this resource.",
        )),
    }
}

/// The ISO 8601 form S3 uses in XML (`2026-11-21T09:28:15.000Z`).
pub fn iso8601(ms: u64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    t.format(&fmt).unwrap_or_default()
}

/// The RFC 1123 form of HTTP headers (`Last-Modified`).
pub fn http_date(ms: u64) -> String {
    httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_format_like_s3() {
        assert_eq!(
            super::iso8601(1_700_000_000_123),
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(
            super::http_date(1_700_000_000_123),
            "Tue, 14 Nov 2023 22:13:20 GMT"
        );
    }
}
