//! Where the agent's `/metrics`, `/healthz` and `/readyz` are served: the configured local
//! address (default `127.0.0.1:2752`) and, unless an address was given explicitly, the same
//! port on the Node's `InternalIP`, the address the API server's node proxy dials when the
//! shoot Prometheus scrapes `/api/v1/nodes/<node>:2752/proxy/metrics`
//! (`docs/agent.md#metrics-and-events` has the access decision and its threat model).
//!
//! [`rules`] picks the address (pure); [`limited`] bounds what a caller can hold (connections,
//! their lifetime); this file binds and serves. Started by [`crate::agent::run`]; the in-process
//! tests start it the same way.

pub mod limited;
pub mod rules;

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use k8s_openapi::api::core::v1::Node;
use kube::api::ListParams;
use kube::{Api, Client};
use tracing::{info, warn};

use crate::agent::metrics::Metrics;
use crate::agent::ports::cluster::LABEL_HOSTNAME;

/// How long to wait before looking for the Node's address again (no Node yet, no
/// `InternalIP`, the address not bindable yet).
pub const RETRY: Duration = Duration::from_secs(30);

/// Serves `router` on `listener` with the connection limits of [`limited`].
pub async fn serve(listener: tokio::net::TcpListener, router: Router) {
    let listener = limited::LimitedListener::new(listener);
    if let Err(error) = axum::serve(listener, router).await {
        tracing::error!(%error, "metrics server stopped");
    }
}

/// Serves `router` on the `InternalIP` of the Node with `kubernetes.io/hostname=<hostname>`
/// at `port`, for as long as the agent runs: finds the address (one label-selected list of
/// Nodes per try, every [`RETRY`] until there is one), binds it and serves. A failure is a log
/// line and the error counter (`component="metrics-server"`), then the next try.
pub async fn serve_on_node_ip(
    client: Client,
    hostname: String,
    port: u16,
    router: Router,
    metrics: Metrics,
) {
    loop {
        match node_address(&client, &hostname, port).await {
            Ok(Some(address)) => match tokio::net::TcpListener::bind(address).await {
                Ok(listener) => {
                    info!(%address, "serving /metrics, /healthz and /readyz on the node's InternalIP for the API server's node proxy");
                    serve(listener, router.clone()).await;
                }
                Err(error) => {
                    metrics.error("metrics-server", "bind");
                    warn!(%address, %error, retry_in = ?RETRY, "cannot serve metrics on the node's InternalIP");
                }
            },
            Ok(None) => {}
            Err(error) => {
                metrics.error("metrics-server", "api");
                warn!(%error, retry_in = ?RETRY, "looking up the node's InternalIP failed");
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// The Node's `InternalIP` with `port`; `None` while there is no such Node or address.
async fn node_address(
    client: &Client,
    hostname: &str,
    port: u16,
) -> Result<Option<SocketAddr>, kube::Error> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{LABEL_HOSTNAME}={hostname}")))
        .await?;
    Ok(rules::only_node(&nodes.items)
        .and_then(rules::internal_ip)
        .map(|ip| SocketAddr::new(ip, port)))
}
