//! Bearer tokens of the gateway's internal APIs (native, admin, catalog, metrics).
//!
//! Each internal API has its own token so that a holder gets only the rights it needs: a
//! Prometheus scraper reads `/_metrics` and nothing else, a remote Valkyrie worker calls
//! `/_catalog/` and nothing else. The admin token is accepted on both as well, since an
//! operator may read metrics and older Valkyrie deployments hold the admin token. Which
//! credential opens which API is decided once, in [`crate::api::auth`].

use http::{HeaderMap, header};

/// Environment variable of the `/_metrics` token (config key `metrics_token`).
pub const METRICS_TOKEN_ENV: &str = "GATEWAY_METRICS_TOKEN";
/// Environment variable of the `/_catalog/` token (config key `catalog_token`).
pub const CATALOG_TOKEN_ENV: &str = "GATEWAY_CATALOG_TOKEN";

/// Compares two secrets (tokens, signatures) without an early exit, so that response
/// timing does not reveal how many leading bytes of a guess were right.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq as _;
    a.ct_eq(b).into()
}

/// Whether `headers` carry `Authorization: Bearer <token>` for the configured token,
/// compared in constant time so that it cannot be guessed byte by byte from timing.
///
/// An empty configured token is no token: it would otherwise match `Bearer ` with nothing
/// after it, opening the API to anyone.
pub fn bearer_ok(configured: Option<&str>, headers: &HeaderMap) -> bool {
    let Some(token) = configured.filter(|t| !t.is_empty()) else {
        return false;
    };
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|given| constant_time_eq(given.trim().as_bytes(), token.as_bytes()))
}

/// Who may call `/_metrics` and `/_catalog/`, besides the holder of the admin token.
#[derive(Clone, Debug, Default)]
pub struct InternalAccess {
    /// `GATEWAY_METRICS_TOKEN` / `metrics_token`.
    pub metrics_token: Option<String>,
    /// `--metrics-open` / `metrics_open`: `/_metrics` answers anyone (it shows disk paths
    /// and the layout, so this is an explicit choice).
    pub metrics_open: bool,
    /// `GATEWAY_CATALOG_TOKEN` / `catalog_token`.
    pub catalog_token: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_works() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(constant_time_eq(b"", b""));
    }

    fn with(authorization: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(v) = authorization {
            h.insert(header::AUTHORIZATION, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn an_empty_token_opens_nothing() {
        assert!(bearer_ok(Some("t"), &with(Some("Bearer t"))));
        assert!(!bearer_ok(Some("t"), &with(Some("Bearer u"))));
        assert!(!bearer_ok(Some(""), &with(Some("Bearer "))));
        assert!(!bearer_ok(Some(""), &with(Some("Bearer"))));
        assert!(!bearer_ok(None, &with(Some("Bearer "))));
    }
}
