//! Who may call an internal API: one decision ([`Access::allows`]) over the configured
//! credentials, applied to a whole group of routes by one middleware ([`require`]) in
//! `server::router`, so that a refused request is answered before any extractor reads its
//! path, query or body.
//!
//! | routes | opened by | refused with |
//! |---|---|---|
//! | `/_admin/…` | `Authorization: Bearer` admin token | 403 `{"error":"admin token required"}` |
//! | `/_files/…` | `Bearer` native token (not the admin token) | 403 `{"error":"native API token required"}` |
//! | `/_catalog/…` | `Bearer` catalog token or admin token | 403 `{"error":"catalog token required"}` |
//! | `/_metrics`, `/_status` | anyone with `--metrics-open`, else `Bearer` metrics token or admin token | 403 `{"error":"metrics token required"}` |
//! | `/_cluster/…` | `x-cluster-secret` cluster secret, and with cluster TLS a connection of the cluster side | 403 `cluster secret required` (plain text) |
//!
//! With cluster TLS the secret is a second factor beside the peer's certificate: a request
//! that did not come over a cluster TLS connection (the
//! [`ClusterPeer`](crate::state::ClusterPeer) mark its connection put on it)
//! is refused, secret or not, and a stolen node certificate without the secret opens
//! nothing either.
//!
//! A token or secret configured empty is none: it opens nothing, not even `Bearer ` with
//! nothing after it. Every comparison runs in constant time
//! ([`constant_time_eq`](crate::bearer::constant_time_eq)).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode};

use super::ApiError;
use crate::bearer::{bearer_ok, constant_time_eq};
use crate::state::AppState;
use crate::state::ClusterPeer;
use meta::raft::network::SECRET_HEADER;

/// The credential a group of internal routes asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// `/_admin/`: the admin token.
    Admin,
    /// `/_files/`: the native token only; a mail back end and an operator hold different
    /// tokens, and the admin token opens no reference counts.
    Native,
    /// `/_catalog/`: the catalog token, or the admin token that older Valkyrie deployments
    /// hold.
    Catalog,
    /// `/_metrics` and `/_status`: open by the operator's choice, or the metrics token (a
    /// scraper holds no admin rights), or the admin token.
    Metrics,
    /// `/_cluster/`: the cluster secret in `x-cluster-secret`, which only the nodes hold.
    Cluster,
}

/// The credentials a gateway is configured with, as [`Access::allows`] reads them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Secrets<'a> {
    pub admin_token: Option<&'a str>,
    pub native_token: Option<&'a str>,
    pub catalog_token: Option<&'a str>,
    pub metrics_token: Option<&'a str>,
    /// `--metrics-open`: `/_metrics` and `/_status` answer anyone.
    pub metrics_open: bool,
    pub cluster_secret: Option<&'a str>,
    /// Cluster TLS is on: `/_cluster/` also needs the [`ClusterPeer`] mark.
    pub cluster_tls: bool,
}

impl<'a> Secrets<'a> {
    pub fn of(app: &'a AppState) -> Self {
        Secrets {
            admin_token: app.admin_token.as_deref(),
            native_token: app.native_token.as_deref(),
            catalog_token: app.internal.catalog_token.as_deref(),
            metrics_token: app.internal.metrics_token.as_deref(),
            metrics_open: app.internal.metrics_open,
            cluster_secret: app.cluster_secret.as_deref(),
            cluster_tls: app.cluster_tls,
        }
    }
}

impl Access {
    /// Whether a request with `headers` may call this group's routes.
    pub fn allows(self, secrets: &Secrets<'_>, headers: &HeaderMap) -> bool {
        let bearer = |token: Option<&str>| bearer_ok(token, headers);
        match self {
            Access::Admin => bearer(secrets.admin_token),
            Access::Native => bearer(secrets.native_token),
            Access::Catalog => bearer(secrets.catalog_token) || bearer(secrets.admin_token),
            Access::Metrics => {
                secrets.metrics_open || bearer(secrets.metrics_token) || bearer(secrets.admin_token)
            }
            Access::Cluster => cluster_secret_ok(secrets.cluster_secret, headers),
        }
    }

    /// Whether a request that came with `extensions` came the way this group needs: a
    /// cluster RPC over cluster TLS when the node has it; anything else as it came.
    pub fn transport_allows(self, secrets: &Secrets<'_>, extensions: &http::Extensions) -> bool {
        match self {
            Access::Cluster if secrets.cluster_tls => extensions.get::<ClusterPeer>().is_some(),
            _ => true,
        }
    }

    /// The answer to a request this group refuses: 403 (a missing credential and a wrong
    /// one alike). The node-to-node RPCs speak postcard, not JSON, so theirs is plain text.
    pub fn refusal(self) -> Response {
        let needed = match self {
            Access::Admin => "admin token required",
            Access::Native => "native API token required",
            Access::Catalog => "catalog token required",
            Access::Metrics => "metrics token required",
            Access::Cluster => {
                return (StatusCode::FORBIDDEN, "cluster secret required\n").into_response();
            }
        };
        ApiError::new(StatusCode::FORBIDDEN, needed).into_response()
    }
}

/// The middleware of a route group: `router.route_layer(from_fn_with_state((state,
/// access), require))`.
pub async fn require(
    State((app, access)): State<(Arc<AppState>, Access)>,
    req: Request,
    next: Next,
) -> Response {
    let secrets = Secrets::of(&app);
    if access.allows(&secrets, req.headers()) && access.transport_allows(&secrets, req.extensions())
    {
        next.run(req).await
    } else {
        access.refusal()
    }
}

/// Whether `headers` carry the configured cluster secret, as it is (no `Bearer `, no
/// trimming: only nodes send it).
fn cluster_secret_ok(configured: Option<&str>, headers: &HeaderMap) -> bool {
    let Some(secret) = configured.filter(|s| !s.is_empty()) else {
        return false;
    };
    headers
        .get(SECRET_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|given| constant_time_eq(given.as_bytes(), secret.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{AUTHORIZATION, CONTENT_TYPE};

    const ALL: [Access; 5] = [
        Access::Admin,
        Access::Native,
        Access::Catalog,
        Access::Metrics,
        Access::Cluster,
    ];

    fn configured() -> Secrets<'static> {
        Secrets {
            admin_token: Some("a"),
            native_token: Some("n"),
            catalog_token: Some("c"),
            metrics_token: Some("m"),
            metrics_open: false,
            cluster_secret: Some("s"),
            cluster_tls: false,
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        h
    }

    /// The groups that `headers` opens, in the order of [`ALL`].
    fn opened(secrets: &Secrets<'_>, headers: &HeaderMap) -> Vec<Access> {
        ALL.into_iter()
            .filter(|a| a.allows(secrets, headers))
            .collect()
    }

    #[test]
    fn each_credential_opens_its_own_groups() {
        use Access::*;
        let s = configured();
        let bearer = |t: &str| headers(&[(AUTHORIZATION.as_str(), &format!("Bearer {t}"))]);
        assert_eq!(opened(&s, &bearer("a")), vec![Admin, Catalog, Metrics]);
        assert_eq!(opened(&s, &bearer("n")), vec![Native]);
        assert_eq!(opened(&s, &bearer("c")), vec![Catalog]);
        assert_eq!(opened(&s, &bearer("m")), vec![Metrics]);
        assert_eq!(opened(&s, &headers(&[(SECRET_HEADER, "s")])), vec![Cluster]);
        // Nothing else opens anything: no credential, a wrong one, the secret as a bearer
        // token, a token in the secret header, a token without its scheme.
        for h in [
            headers(&[]),
            bearer("x"),
            bearer("s"),
            bearer(""),
            headers(&[(SECRET_HEADER, "a")]),
            headers(&[(SECRET_HEADER, "s ")]),
            headers(&[(AUTHORIZATION.as_str(), "a")]),
            headers(&[(AUTHORIZATION.as_str(), "Basic a")]),
        ] {
            assert_eq!(opened(&s, &h), vec![], "{h:?}");
        }
    }

    #[test]
    fn an_empty_or_missing_credential_opens_nothing() {
        let empty = Secrets {
            admin_token: Some(""),
            native_token: Some(""),
            catalog_token: Some(""),
            metrics_token: Some(""),
            metrics_open: false,
            cluster_secret: Some(""),
            cluster_tls: false,
        };
        for h in [
            headers(&[]),
            headers(&[(AUTHORIZATION.as_str(), "Bearer ")]),
            headers(&[(AUTHORIZATION.as_str(), "Bearer")]),
            headers(&[(AUTHORIZATION.as_str(), "Bearer \t")]),
            headers(&[(SECRET_HEADER, "")]),
        ] {
            assert_eq!(opened(&empty, &h), vec![], "{h:?}");
            assert_eq!(opened(&Secrets::default(), &h), vec![], "{h:?}");
        }
    }

    #[test]
    fn with_cluster_tls_a_cluster_rpc_needs_the_mark_as_well_as_the_secret() {
        let mut marked = http::Extensions::new();
        marked.insert(ClusterPeer);
        let unmarked = http::Extensions::new();
        let plain = configured();
        let tls = Secrets {
            cluster_tls: true,
            ..configured()
        };
        assert!(Access::Cluster.transport_allows(&plain, &unmarked));
        assert!(Access::Cluster.transport_allows(&tls, &marked));
        assert!(!Access::Cluster.transport_allows(&tls, &unmarked));
        // The other groups do not ask where a request came from.
        for access in [
            Access::Admin,
            Access::Native,
            Access::Catalog,
            Access::Metrics,
        ] {
            assert!(access.transport_allows(&tls, &unmarked), "{access:?}");
        }
    }

    #[test]
    fn metrics_open_opens_the_metrics_only() {
        let open = Secrets {
            metrics_open: true,
            ..Secrets::default()
        };
        assert_eq!(opened(&open, &headers(&[])), vec![Access::Metrics]);
    }

    #[tokio::test]
    async fn refusals_are_403_with_each_api_body() {
        let body = |r: Response| async move {
            let status = r.status();
            let content_type = r.headers()[CONTENT_TYPE].to_str().unwrap().to_string();
            let bytes = axum::body::to_bytes(r.into_body(), 1 << 10).await.unwrap();
            (
                status,
                content_type,
                String::from_utf8(bytes.to_vec()).unwrap(),
            )
        };
        let json = |m: &str| {
            (
                StatusCode::FORBIDDEN,
                "application/json".to_string(),
                format!(r#"{{"error":"{m}"}}"#),
            )
        };
        for (access, message) in [
            (Access::Admin, "admin token required"),
            (Access::Native, "native API token required"),
            (Access::Catalog, "catalog token required"),
            (Access::Metrics, "metrics token required"),
        ] {
            assert_eq!(body(access.refusal()).await, json(message), "{access:?}");
        }
        assert_eq!(
            body(Access::Cluster.refusal()).await,
            (
                StatusCode::FORBIDDEN,
                "text/plain; charset=utf-8".to_string(),
                "cluster secret required\n".to_string()
            )
        );
    }
}
