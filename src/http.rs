//! The operator's HTTP endpoints: `/healthz`, `/readyz` and `/metrics` (axum).
//!
//! The server gets a small state of its own (the metrics registry and a readiness flag), not
//! the controllers' context. `/healthz` answers 200 while the process serves; `/readyz`
//! answers 200 once the controllers report that their caches have synced.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;

/// Whether the process is ready to serve; shared between the controllers and the server.
#[derive(Clone, Debug, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Marks the process ready (idempotent).
    pub fn set_ready(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Marks the process not ready, e.g. while shutting down.
    pub fn set_not_ready(&self) {
        self.0.store(false, Ordering::SeqCst);
    }

    /// Reports the current state.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// State of the HTTP server.
#[derive(Clone)]
pub struct ServerState {
    /// The registry encoded on `/metrics`.
    pub registry: Arc<Registry>,
    /// The flag behind `/readyz`.
    pub readiness: Readiness,
}

/// Builds the router; used by [`serve`] and, without binding a port, by tests.
pub fn router(state: ServerState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// Serves the router on `address` until `shutdown` resolves.
pub async fn serve(
    address: SocketAddr,
    state: ServerState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    tracing::info!(address = %listener.local_addr()?, "serving /healthz, /readyz and /metrics");
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<ServerState>) -> Response {
    if state.readiness.is_ready() {
        (StatusCode::OK, "ok").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "controllers not synced yet",
        )
            .into_response()
    }
}

async fn metrics(State(state): State<ServerState>) -> Response {
    match crate::metrics::encode(&state.registry) {
        Ok(body) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(error) => {
            tracing::error!(%error, "encoding metrics failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "encoding metrics failed").into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    fn state() -> ServerState {
        ServerState {
            registry: Arc::new(crate::metrics::new_registry()),
            readiness: Readiness::default(),
        }
    }

    async fn get_path(router: Router, path: &str) -> (StatusCode, String) {
        let response = router
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn healthz_answers_ok_always() {
        let (status, body) = get_path(router(state()), "/healthz").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, "ok");
    }

    #[tokio::test]
    async fn readyz_follows_the_readiness_flag() {
        let state = state();
        let (status, _) = get_path(router(state.clone()), "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        state.readiness.set_ready();
        let (status, _) = get_path(router(state.clone()), "/readyz").await;
        assert_eq!(status, StatusCode::OK);
        state.readiness.set_not_ready();
        let (status, _) = get_path(router(state), "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    }

    #[tokio::test]
    async fn metrics_exposes_build_info() {
        let (status, body) = get_path(router(state()), "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            body.contains("gardener_extension_node_build_info"),
            "{body}"
        );
        assert!(body.trim_end().ends_with("# EOF"), "{body}");
    }
}
