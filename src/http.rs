//! The operator's HTTP endpoints: `/healthz`, `/readyz` and `/metrics` (axum).
//!
//! The server gets a small state of its own (the metrics registry and a readiness flag), not
//! the controllers' context. `/healthz` answers 200 while the process serves; `/readyz`
//! answers 200 once the controllers report that their caches have synced.
//!
//! The port is bound by [`bind`] before anything else starts, so a port in use stops the
//! process at once with a message naming the process that holds it, instead of controllers
//! running without probes.

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

/// Why the HTTP port could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// Another process listens on the address.
    #[error(
        "{address} is already in use{}; stop it{} or choose another address with --http-bind-address",
        holder.as_ref().map(|h| format!(" by {h}")).unwrap_or_default(),
        holder.as_ref().map(|h| format!(" (kill {})", h.pid)).unwrap_or_default()
    )]
    InUse {
        /// The address.
        address: SocketAddr,
        /// The process listening there, when it can be found (same user, Linux).
        holder: Option<PortHolder>,
    },
    /// Any other failure.
    #[error("binding {address}")]
    Other {
        /// The address.
        address: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// A process that listens on a TCP port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortHolder {
    /// Its process ID.
    pub pid: u32,
    /// Its command line (shortened).
    pub command: String,
}

impl std::fmt::Display for PortHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "process {} ({})", self.pid, self.command)
    }
}

/// Binds `address` for [`serve`]; call it before starting anything the server reports on.
pub fn bind(address: SocketAddr) -> Result<std::net::TcpListener, BindError> {
    let listener = std::net::TcpListener::bind(address).map_err(|source| {
        if source.kind() == std::io::ErrorKind::AddrInUse {
            BindError::InUse {
                address,
                holder: port_holder(address.port()),
            }
        } else {
            BindError::Other { address, source }
        }
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|source| BindError::Other { address, source })?;
    Ok(listener)
}

/// The process listening on TCP `port`, from `/proc/net/tcp{,6}` and the socket links in
/// `/proc/<pid>/fd` (only processes of the same user are visible; `None` otherwise).
pub fn port_holder(port: u16) -> Option<PortHolder> {
    let inodes: Vec<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|text| listening_inodes(&text, port))
        .collect();
    if inodes.is_empty() {
        return None;
    }
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|target| wanted.iter().any(|w| target.as_os_str() == w.as_str()))
        });
        if holds {
            let command = std::fs::read(entry.path().join("cmdline"))
                .map(|raw| {
                    raw.split(|b| *b == 0)
                        .filter(|part| !part.is_empty())
                        .map(|part| String::from_utf8_lossy(part).into_owned())
                        .collect::<Vec<_>>()
                        .join(" ")
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default();
            return Some(PortHolder {
                pid,
                command: crate::api::provider_config::shorten(&command),
            });
        }
    }
    None
}

/// Inodes of the listening sockets on `port` in a `/proc/net/tcp` table (pure).
fn listening_inodes(table: &str, port: u16) -> Vec<String> {
    const LISTEN: &str = "0A";
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local = fields.get(1)?;
            let local_port = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
            (local_port == port && *fields.get(3)? == LISTEN)
                .then(|| fields.get(9).map(|i| i.to_string()))?
        })
        .collect()
}

/// Serves the router on `listener` (from [`bind`]) until `shutdown` resolves.
pub async fn serve(
    listener: std::net::TcpListener,
    state: ServerState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
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

    #[test]
    fn listening_inodes_come_from_the_listen_rows_of_the_port() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1000        0 4343 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4444 1 0000000000000000 100 0 0 10 0
";
        assert_eq!(listening_inodes(table, 8080), ["4242"]);
        assert!(listening_inodes(table, 9090).is_empty());
    }

    #[test]
    fn a_port_in_use_names_this_process_as_its_holder() {
        let first = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let address = first.local_addr().unwrap();
        let error = bind(address).unwrap_err();
        let message = error.to_string();
        assert!(
            message.starts_with(&format!(
                "{address} is already in use by process {} (",
                std::process::id()
            )),
            "{message}"
        );
        assert!(
            message.ends_with(&format!(
                "; stop it (kill {}) or choose another address with --http-bind-address",
                std::process::id()
            )),
            "{message}"
        );
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
