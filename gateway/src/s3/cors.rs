//! CORS for browser downloads: the bucket's rules (Put/Get/DeleteBucketCors), preflight
//! `OPTIONS` answers, and the `Access-Control-*` headers on actual requests.
//!
//! A webmail page on `https://mail.example` fetches an attachment from a presigned URL on
//! the gateway; the browser only hands the bytes to the page if the response carries an
//! `Access-Control-Allow-Origin` that a bucket rule grants.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use serde::Deserialize;

use super::error::{ErrorCode, S3Error};
use super::request::Target;
use super::xml::XmlWriter;
use crate::state::AppState;
use crate::store::StoreError;
use meta::{Command, CorsRule};

const CORS_BODY_BYTES_MAX: usize = 64 * 1024;
const CORS_RULES_MAX: usize = 100;

/// `*` matches any run of characters; at most one wildcard, as S3 allows.
fn wildcard_match(pattern: &str, value: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern.eq_ignore_ascii_case(value),
        Some((pre, post)) => {
            value.len() >= pre.len() + post.len()
                && value[..pre.len()].eq_ignore_ascii_case(pre)
                && value[value.len() - post.len()..].eq_ignore_ascii_case(post)
        }
    }
}

/// The first rule that allows `origin` to use `method` with `headers`.
pub fn matching_rule<'a>(
    rules: &'a [CorsRule],
    origin: &str,
    method: &str,
    headers: &[&str],
) -> Option<&'a CorsRule> {
    rules.iter().find(|r| {
        r.allowed_origins.iter().any(|o| wildcard_match(o, origin))
            && r.allowed_methods.iter().any(|m| m == method)
            && headers.iter().all(|h| {
                r.allowed_headers
                    .iter()
                    .any(|a| wildcard_match(a, h.trim()))
            })
    })
}

fn set(h: &mut HeaderMap, name: header::HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        h.insert(name, v);
    }
}

fn allow_headers(h: &mut HeaderMap, rule: &CorsRule, origin: &str, method: Option<&str>) {
    let any_origin = rule.allowed_origins.iter().any(|o| o == "*");
    set(
        h,
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        if any_origin { "*" } else { origin },
    );
    if !any_origin {
        h.append(header::VARY, HeaderValue::from_static("Origin"));
    }
    if let Some(m) = method {
        set(h, header::ACCESS_CONTROL_ALLOW_METHODS, m);
    }
    if !rule.expose_headers.is_empty() {
        set(
            h,
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            &rule.expose_headers.join(", "),
        );
    }
    if let Some(age) = rule.max_age_secs {
        set(h, header::ACCESS_CONTROL_MAX_AGE, &age.to_string());
    }
    if !any_origin {
        h.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
    }
}

fn bucket_of(app: &AppState, headers: &HeaderMap, uri: &http::Uri) -> Option<String> {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    match Target::from_request(uri, host, app.domain.as_deref()).ok()? {
        Target::Bucket(b) | Target::Object { bucket: b, .. } => Some(b),
        Target::Service => None,
    }
}

async fn rules_of(app: &AppState, bucket: &str) -> Option<Vec<CorsRule>> {
    app.store.bucket(bucket).await.ok().and_then(|b| b.cors)
}

/// Answers a preflight `OPTIONS` (never authenticated: browsers send no credentials).
pub async fn preflight(app: &AppState, req: Request) -> Result<Response, S3Error> {
    let (parts, _) = req.into_parts();
    let forbidden = || {
        S3Error::new(
            ErrorCode::AccessForbidden,
            "CORSResponse: This CORS request is not allowed. This is usually because the evalution of Origin, request method / Access-Control-Request-Method or Access-Control-Request-Headers are not whitelisted by the resource's CORS spec.",
        )
    };
    let h = &parts.headers;
    let text = |name: header::HeaderName| h.get(name).and_then(|v| v.to_str().ok());
    let (Some(origin), Some(method)) = (
        text(header::ORIGIN),
        text(header::ACCESS_CONTROL_REQUEST_METHOD),
    ) else {
        return Err(S3Error::new(
            ErrorCode::InvalidRequest,
            "Insufficient information. Origin request header needed.",
        ));
    };
    let requested: Vec<&str> = text(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let bucket = bucket_of(app, h, &parts.uri).ok_or_else(forbidden)?;
    let rules = rules_of(app, &bucket).await.ok_or_else(forbidden)?;
    let rule = matching_rule(&rules, origin, method, &requested).ok_or_else(forbidden)?;
    let mut resp = StatusCode::OK.into_response();
    let rh = resp.headers_mut();
    allow_headers(rh, rule, origin, Some(method));
    if !requested.is_empty() {
        set(
            rh,
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            &requested.join(", "),
        );
    }
    Ok(resp)
}

/// Middleware: adds `Access-Control-*` headers to actual cross-origin requests a bucket
/// rule allows (including error answers, so a browser can read the S3 error).
pub async fn cors_headers(State(app): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let (Some(origin), false) = (origin, req.method() == Method::OPTIONS) else {
        return next.run(req).await;
    };
    let method = req.method().as_str().to_string();
    let bucket = bucket_of(&app, req.headers(), req.uri());
    let mut resp = next.run(req).await;
    if let Some(bucket) = bucket
        && let Some(rules) = rules_of(&app, &bucket).await
        && let Some(rule) = matching_rule(&rules, &origin, &method, &[])
    {
        allow_headers(resp.headers_mut(), rule, &origin, None);
    }
    resp
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CorsConfiguration {
    #[serde(default, rename = "CORSRule")]
    rules: Vec<CorsRuleXml>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CorsRuleXml {
    #[serde(rename = "ID")]
    id: Option<String>,
    #[serde(default, rename = "AllowedOrigin")]
    allowed_origins: Vec<String>,
    #[serde(default, rename = "AllowedMethod")]
    allowed_methods: Vec<String>,
    #[serde(default, rename = "AllowedHeader")]
    allowed_headers: Vec<String>,
    #[serde(default, rename = "ExposeHeader")]
    expose_headers: Vec<String>,
    max_age_seconds: Option<u32>,
}

fn malformed(m: &str) -> S3Error {
    S3Error::new(ErrorCode::MalformedXML, m.to_string())
}

/// Parses and checks a CORSConfiguration document.
pub fn parse_rules(text: &str) -> Result<Vec<CorsRule>, S3Error> {
    let parsed: CorsConfiguration = quick_xml::de::from_str(text)
        .map_err(|_| malformed("The XML you provided was not well-formed or did not validate against our published schema"))?;
    if parsed.rules.is_empty() || parsed.rules.len() > CORS_RULES_MAX {
        return Err(malformed("A CORS configuration holds 1 to 100 rules"));
    }
    parsed
        .rules
        .into_iter()
        .map(|r| {
            if r.allowed_origins.is_empty() || r.allowed_methods.is_empty() {
                return Err(malformed(
                    "Each CORSRule needs an AllowedOrigin and an AllowedMethod",
                ));
            }
            if let Some(m) = r
                .allowed_methods
                .iter()
                .find(|m| !["GET", "PUT", "POST", "DELETE", "HEAD"].contains(&m.as_str()))
            {
                return Err(S3Error::new(
                    ErrorCode::InvalidRequest,
                    format!(
                        "Found unsupported HTTP method in CORS config. Unsupported method is {m}"
                    ),
                ));
            }
            if r.allowed_origins
                .iter()
                .chain(&r.allowed_headers)
                .any(|p| p.matches('*').count() > 1)
            {
                return Err(S3Error::new(
                    ErrorCode::InvalidRequest,
                    "A CORS pattern may contain at most one wildcard",
                ));
            }
            Ok(CorsRule {
                id: r.id,
                allowed_origins: r.allowed_origins,
                allowed_methods: r.allowed_methods,
                allowed_headers: r.allowed_headers,
                expose_headers: r.expose_headers,
                max_age_secs: r.max_age_seconds,
            })
        })
        .collect()
}

pub async fn put(app: &AppState, bucket: &str, req: Request) -> Result<Response, S3Error> {
    let text = super::auth::read_xml_body(req.into_body(), CORS_BODY_BYTES_MAX).await?;
    let rules = parse_rules(&text)?;
    app.store.set_cors(bucket, Some(rules)).await?;
    Ok(StatusCode::OK.into_response())
}

pub async fn delete(app: &AppState, bucket: &str) -> Result<Response, S3Error> {
    app.store.set_cors(bucket, None).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn get(app: &AppState, bucket: &str) -> Result<Response, S3Error> {
    let rules = app.store.bucket(bucket).await?.cors.ok_or_else(|| {
        S3Error::new(
            ErrorCode::NoSuchCORSConfiguration,
            "The CORS configuration does not exist",
        )
        .with_resource(bucket)
    })?;
    let mut w = XmlWriter::new();
    w.open_root("CORSConfiguration");
    for r in &rules {
        w.open("CORSRule");
        if let Some(id) = &r.id {
            w.leaf("ID", id);
        }
        for (tag, values) in [
            ("AllowedOrigin", &r.allowed_origins),
            ("AllowedMethod", &r.allowed_methods),
            ("AllowedHeader", &r.allowed_headers),
            ("ExposeHeader", &r.expose_headers),
        ] {
            for v in values {
                w.leaf(tag, v);
            }
        }
        if let Some(age) = r.max_age_secs {
            w.leaf("MaxAgeSeconds", &age.to_string());
        }
        w.close("CORSRule");
    }
    w.close("CORSConfiguration");
    Ok(([(header::CONTENT_TYPE, "application/xml")], w.finish()).into_response())
}

impl crate::store::ObjectStore {
    pub async fn set_cors(
        &self,
        bucket: &str,
        rules: Option<Vec<CorsRule>>,
    ) -> Result<(), StoreError> {
        let cmd = Command::SetBucketCors {
            bucket: bucket.to_string(),
            rules,
        };
        self.execute(cmd)
            .await
            .map(drop)
            .map_err(|e| StoreError::meta(e, bucket))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_match() {
        let rules = parse_rules(
            r#"<CORSConfiguration><CORSRule><AllowedOrigin>https://*.example.com</AllowedOrigin>
            <AllowedMethod>GET</AllowedMethod><AllowedMethod>HEAD</AllowedMethod>
            <AllowedHeader>x-amz-*</AllowedHeader><ExposeHeader>ETag</ExposeHeader>
            <MaxAgeSeconds>600</MaxAgeSeconds></CORSRule></CORSConfiguration>"#,
        )
        .unwrap();
        assert_eq!(rules[0].max_age_secs, Some(600));
        assert!(
            matching_rule(&rules, "https://mail.example.com", "GET", &["x-amz-date"]).is_some()
        );
        assert!(matching_rule(&rules, "https://mail.example.com", "PUT", &[]).is_none());
        assert!(matching_rule(&rules, "https://evil.org", "GET", &[]).is_none());
        assert!(
            matching_rule(
                &rules,
                "https://mail.example.com",
                "GET",
                &["authorization"]
            )
            .is_none()
        );
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert!(parse_rules("<CORSConfiguration></CORSConfiguration>").is_err());
        assert!(parse_rules("<CORSConfiguration><CORSRule><AllowedMethod>GET</AllowedMethod></CORSRule></CORSConfiguration>").is_err());
        assert!(parse_rules("<CORSConfiguration><CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>PATCH</AllowedMethod></CORSRule></CORSConfiguration>").is_err());
        assert!(parse_rules("not xml").is_err());
    }
}
