//! The agent's heartbeat thread: an OS thread of its own, with a single-thread Tokio runtime and
//! an API client of its own, started by the main loop ([`crate::agent::controller`]). The agent's
//! main runtime has one thread, and an apply does blocking work on it (decoding the OSC,
//! writing files and rewriting the journal after each, fsync included); nothing that runs
//! here waits for it:
//!
//! - the node Lease ([`crate::agent::liveness::lease::run`]): renewed every 10 s whatever the apply is doing, so
//!   a long apply never looks like a dead agent to gardenlet (`docs/agent.md#node-agent-lease`);
//! - the stop deadline (`stop_deadline`): after SIGTERM or SIGINT the main loop stops at
//!   its next await point; should it still be inside a blocking step [`STOP_GRACE`] later, the
//!   process exits from here. Stopping in the middle of an apply is what a crash does, and the
//!   journal is made for that (the next start resumes it).

use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::agent::access::switching_client::Credentials;
use crate::agent::metrics::Metrics;
use crate::agent::ports::cluster::NodeMeta;

/// How long the main loop has to return after SIGTERM or SIGINT before the process exits
/// anyway.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// Starts the heartbeat thread: the Lease of the node in `node` (once known), renewed with a
/// client of `credentials` (built on the thread, so it follows a renewed certificate too),
/// and the stop deadline.
pub fn spawn(
    credentials: Credentials,
    node: watch::Receiver<Option<NodeMeta>>,
    metrics: Metrics,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("heartbeat".into())
        .spawn(move || run(credentials, node, metrics))
        .map(drop)
}

fn run(credentials: Credentials, node: watch::Receiver<Option<NodeMeta>>, metrics: Metrics) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "building the heartbeat's runtime failed; the node Lease is not renewed");
            return;
        }
    };
    runtime.block_on(async move {
        let lease = async {
            // The client's connections live on this thread's runtime.
            match credentials.client("agent") {
                Ok(client) => crate::agent::liveness::lease::run(client, node, metrics).await,
                Err(error) => {
                    tracing::error!(error = %crate::error_chain::printable(&error), "building the heartbeat's API client failed; the node Lease is not renewed");
                    // The stop deadline still holds.
                    std::future::pending::<()>().await;
                }
            }
        };
        // The Lease ends only when the main loop is gone (the process is ending, or an
        // in-process test stopped its agent): the thread ends with it.
        tokio::select! {
            () = lease => {}
            () = stop_deadline() => {}
        }
    });
}

/// Waits for SIGTERM or SIGINT, then [`STOP_GRACE`], then exits the process: reached only
/// when the main loop did not return in time (its return ends the process first).
async fn stop_deadline() {
    let (Ok(mut terminate), Ok(mut interrupt)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!(
            "installing the heartbeat's signal handlers failed; a stop waits for the main loop"
        );
        return;
    };
    let name = tokio::select! {
        _ = terminate.recv() => "SIGTERM",
        _ = interrupt.recv() => "SIGINT",
    };
    tokio::time::sleep(STOP_GRACE).await;
    tracing::warn!(
        signal = name,
        grace = ?STOP_GRACE,
        "the main loop did not stop in time (a blocking step); exiting now, the journal keeps the remaining work"
    );
    std::process::exit(0);
}
