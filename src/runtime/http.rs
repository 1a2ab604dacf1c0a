//! HTTP endpoints for the kubelet and Prometheus: /healthz, /readyz, /metrics.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::runtime::metrics::Metrics;

/// What the endpoints read: readiness flips once the watch caches have synced.
#[derive(Clone)]
pub(crate) struct HttpState {
    pub ready: Arc<AtomicBool>,
    /// A replica that waits for the leader lease while another process leads. It is ready
    /// too: it does what it should (stand by), and a Deployment rollout or a
    /// PodDisruptionBudget must count it as available.
    pub standby: Arc<AtomicBool>,
    pub metrics: Arc<Metrics>,
}

pub(crate) fn router(state: HttpState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn readyz(State(state): State<HttpState>) -> impl IntoResponse {
    if state.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ready")
    } else if state.standby.load(Ordering::Acquire) {
        (StatusCode::OK, "standby: another replica holds the leader lease")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not leading with synced caches yet",
        )
    }
}

async fn metrics(State(state): State<HttpState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
}

/// Binds first (so a taken port fails the start loudly), then serves until `shutdown`.
pub(crate) async fn serve(addr: SocketAddr, state: HttpState, shutdown: CancellationToken) -> Result<()> {
    let http_err = |source| Error::Http {
        addr: addr.to_string(),
        source,
    };
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(http_err)?;
    tracing::info!(%addr, "serving /healthz, /readyz and /metrics");
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
        .map_err(http_err)
}
