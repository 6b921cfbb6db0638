//! The seed-side operator: connects to the seed's API server, serves `/healthz`, `/readyz`
//! and `/metrics`, and runs the extension controllers until SIGTERM or Ctrl-C.

use std::sync::Arc;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use crate::cli::OperatorArgs;
use crate::http::{Readiness, ServerState};

/// Runs the operator until a shutdown signal arrives.
pub async fn run(args: OperatorArgs) -> anyhow::Result<()> {
    let OperatorArgs {
        kubeconfig,
        http_bind_address,
    } = args;
    let client = crate::kubeconfig::client(kubeconfig.as_deref())
        .await
        .context("connecting to the seed API server")?;
    let version = client
        .apiserver_version()
        .await
        .context("reading the API server version")?;
    tracing::info!(server_version = %version.git_version, "connected to the seed API server");

    let registry = Arc::new(crate::metrics::new_registry());
    let readiness = Readiness::default();
    let shutdown = CancellationToken::new();
    tokio::spawn(forward_signals(shutdown.clone()));

    let server = {
        let state = ServerState {
            registry: registry.clone(),
            readiness: readiness.clone(),
        };
        let stop = shutdown.clone();
        tokio::spawn(async move {
            crate::http::serve(
                http_bind_address,
                state,
                async move { stop.cancelled().await },
            )
            .await
        })
    };

    readiness.set_ready();
    shutdown.cancelled().await;
    readiness.set_not_ready();
    tracing::info!("shutting down");
    server
        .await
        .context("HTTP server task")?
        .context("HTTP server")?;
    Ok(())
}

/// Cancels `token` on SIGINT or SIGTERM.
pub async fn forward_signals(token: CancellationToken) {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
    tracing::info!("shutdown signal received");
    token.cancel();
}
