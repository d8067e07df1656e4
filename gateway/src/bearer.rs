//! Bearer tokens of the gateway's internal APIs (native, admin, catalog).

use http::{HeaderMap, header};

/// Whether `headers` carry `Authorization: Bearer <token>` for the configured token,
/// compared in constant time so that it cannot be guessed byte by byte from timing.
pub fn bearer_ok(configured: Option<&str>, headers: &HeaderMap) -> bool {
    let Some(token) = configured else {
        return false;
    };
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|given| {
            crate::s3::sigv4::constant_time_eq(given.trim().as_bytes(), token.as_bytes())
        })
}
