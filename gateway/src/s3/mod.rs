//! The S3 API: routing, authentication, and the handlers of each operation.
//!
//! Handlers are thin: they read the request, call [`crate::store::ObjectStore`] and render
//! the result; every failure becomes an [`error::S3Error`] rendered as S3's XML error.
//! S3 routes on method, path *and* query (`?uploads`, `?location`, `list-type=2`), which
//! axum's path router cannot express, so one `dispatch` function does the routing.

pub mod access;
pub mod acl;
mod attributes;
pub mod auth;
mod body_check;
pub(crate) mod bucket;
pub mod checksum;
pub mod chunked;
pub mod cors;
pub mod dates;
pub mod error;
pub mod lifecycle;
pub(crate) mod multipart;
pub(crate) mod object;
pub mod object_lock;
pub mod operation;
mod owner;
pub(crate) mod post_object;
pub mod post_policy;
pub mod request;
pub mod request_log;
mod settings;
pub mod sigv2;
pub mod sigv4;
pub mod tagging;
mod versioning;
pub mod xml;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::Method;

use crate::state::AppState;
use error::{ErrorCode, S3Error};
use request::{Query, Target};

pub use dates::{http_date, iso8601};

/// Routes one authenticated S3 request to its operation.
pub async fn dispatch(State(app): State<Arc<AppState>>, req: Request) -> Response {
    match route(&app, req).await {
        Ok(resp) => resp,
        Err(e) => e.into_response(),
    }
}

async fn route(app: &AppState, req: Request) -> Result<Response, S3Error> {
    let host = req
        .headers()
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok());
    let target = Target::from_request(req.uri(), host, app.domain.as_deref())?;
    let query = Query::parse(req.uri())?;
    let method = req.method().clone();
    let sub = query.subresource();
    let copy = req.headers().contains_key("x-amz-copy-source");
    // A browser's form upload carries its credentials in the form (a signed policy), which
    // the handler checks: the authentication layer let it through unsigned.
    if let Target::Bucket(b) = &target
        && request::is_form_upload(&method, &target, sub, req.headers())
    {
        return post_object::post(app, b, req).await;
    }
    // A CORS preflight carries no credentials by design; every other request was
    // authenticated and names its caller.
    let caller = req.extensions().get::<access::Caller>().cloned();
    let caller = match (&method, caller) {
        (&Method::OPTIONS, _) => access::Caller::Bootstrap,
        (_, Some(c)) => c,
        (_, None) => return Err(S3Error::new(ErrorCode::AccessDenied, "Access Denied")),
    };
    if caller == access::Caller::Anonymous {
        acl::allow_anonymous(app, &method, &target, sub, &query).await?;
    } else if method != Method::OPTIONS {
        for (bucket, rights) in access::needs(&method, &target, sub, req.headers())? {
            access::authorize(app, &caller, &bucket, rights).await?;
        }
    }
    match (&method, target) {
        (&Method::OPTIONS, _) => cors::preflight(app, req).await,
        (&Method::GET, Target::Service) => bucket::list_buckets(app, &caller).await,
        (&Method::PUT, Target::Bucket(b)) if sub == Some("cors") => cors::put(app, &b, req).await,
        (&Method::GET, Target::Bucket(b)) if sub == Some("cors") => cors::get(app, &b).await,
        (&Method::DELETE, Target::Bucket(b)) if sub == Some("cors") => cors::delete(app, &b).await,
        (&Method::PUT, Target::Bucket(b)) if sub == Some("lifecycle") => {
            lifecycle::put(app, &b, req).await
        }
        (&Method::DELETE, Target::Bucket(b)) if sub == Some("lifecycle") => {
            lifecycle::delete(app, &b).await
        }
        (&Method::PUT, Target::Bucket(b)) if sub == Some("acl") => {
            acl::put_bucket(app, &b, req).await
        }
        (&Method::PUT, Target::Bucket(b)) if sub == Some("tagging") => {
            tagging::put_bucket(app, &b, req).await
        }
        (&Method::DELETE, Target::Bucket(b)) if sub == Some("tagging") => {
            tagging::delete_bucket(app, &b).await
        }
        (&Method::PUT, Target::Bucket(b)) if sub == Some("versioning") => {
            versioning::put(app, &b, req).await
        }
        (&Method::PUT, Target::Bucket(b)) if sub.is_none() => {
            let locked = req
                .headers()
                .get("x-amz-bucket-object-lock-enabled")
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
            let acl = acl::from_headers(req.headers())?;
            bucket::create(app, &b, caller.owner(), (locked, acl)).await
        }
        (&Method::PUT, Target::Bucket(b)) if sub == Some("object-lock") => {
            object_lock::put_config(app, &b, req).await
        }
        (&Method::HEAD, Target::Bucket(b)) => bucket::head(app, &b).await,
        (&Method::DELETE, Target::Bucket(b)) if sub.is_none() => bucket::delete(app, &b).await,
        (&Method::GET, Target::Bucket(b)) => match sub {
            Some("location") => bucket::location(app, &b).await,
            Some("uploads") => multipart::list_uploads(app, &b, &query).await,
            Some("lifecycle") => lifecycle::get(app, &b).await,
            Some("versioning") => versioning::get(app, &b).await,
            Some("tagging") => tagging::get_bucket(app, &b).await,
            Some("acl") => acl::get_bucket(app, &b).await,
            Some("object-lock") => object_lock::get_config(app, &b).await,
            Some("versions") => versioning::list(app, &b, &query).await,
            None => bucket::list_objects(app, &b, &query).await,
            Some(other) if let Some(answer) = settings::bucket_setting(app, &b, other).await => {
                answer
            }
            Some(other) => Err(S3Error::not_implemented(&format!("?{other}"))),
        },
        (&Method::POST, Target::Bucket(b)) if sub == Some("delete") => {
            bucket::delete_objects(app, &b, req).await
        }
        (&Method::PUT, Target::Object { bucket, key }) => match sub {
            None if copy => object::copy(app, &bucket, &key, req.headers()).await,
            None => object::put(app, &bucket, &key, req).await,
            Some("partNumber" | "uploadId") => {
                multipart::upload_part(app, &bucket, &key, &query, req).await
            }
            Some("retention") => object_lock::put_retention(app, &bucket, &key, &query, req).await,
            Some("legal-hold") => {
                object_lock::put_legal_hold(app, &bucket, &key, &query, req).await
            }
            Some("tagging") => tagging::put_object(app, &bucket, &key, &query, req).await,
            Some("acl") => acl::put_object(app, &bucket, &key, &query, req).await,
            Some(other) => Err(S3Error::not_implemented(&format!("PUT ?{other}"))),
        },
        (&Method::POST, Target::Object { bucket, key }) => match sub {
            Some("uploads") => multipart::create(app, &bucket, &key, req.headers()).await,
            Some("uploadId") => multipart::complete(app, &bucket, &key, &query, req).await,
            _ => Err(S3Error::not_implemented("POST on this resource")),
        },
        (&Method::GET, Target::Object { bucket, key }) => match sub {
            None | Some("partNumber") => {
                object::get(app, &bucket, &key, req.headers(), &query).await
            }
            Some("uploadId") => multipart::list_parts(app, &bucket, &key, &query).await,
            Some(lock @ ("retention" | "legal-hold")) => {
                object_lock::get_lock(app, &bucket, &key, &query, lock == "legal-hold").await
            }
            Some("attributes") => attributes::get(app, &bucket, &key, req.headers(), &query).await,
            Some("tagging") => tagging::get_object(app, &bucket, &key, &query).await,
            Some("acl") => acl::get_object(app, &bucket, &key, &query).await,
            Some(other) => Err(S3Error::not_implemented(&format!("GET ?{other}"))),
        },
        (&Method::HEAD, Target::Object { bucket, key }) => match sub {
            None | Some("partNumber") => {
                object::head(app, &bucket, &key, req.headers(), &query).await
            }
            Some(other) => Err(S3Error::not_implemented(&format!("HEAD ?{other}"))),
        },
        (&Method::DELETE, Target::Object { bucket, key }) => match sub {
            None => object::delete(app, &bucket, &key, req.headers(), &query).await,
            Some("uploadId") => multipart::abort(app, &bucket, &key, &query).await,
            Some("tagging") => tagging::delete_object(app, &bucket, &key, &query).await,
            Some(other) => Err(S3Error::not_implemented(&format!("DELETE ?{other}"))),
        },
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

/// Middleware on every S3 response: a request id, as S3 sends, and `Connection: close`
/// where a client sent `Expect: 100-continue` but got its final answer without a
/// `100 Continue` (an empty body, or an error before the body was read). Some botocore
/// versions (the aws cli's) would otherwise read that answer again as the reply to their
/// next request on the same connection.
pub async fn response_hygiene(req: Request, next: axum::middleware::Next) -> Response {
    let expects_continue = req
        .headers()
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let empty_body = req
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() == b"0");
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    if !h.contains_key("x-amz-request-id")
        && let Ok(v) = http::HeaderValue::from_str(&format!("{:016X}", rand::random::<u64>()))
    {
        h.insert("x-amz-request-id", v);
    }
    if expects_continue && (empty_body || resp.status().as_u16() >= 300) {
        resp.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
    resp
}
