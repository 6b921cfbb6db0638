//! Wakes an agent that waits for the serial lock as soon as the lock is free
//! (`docs/agent.md#serial-osc-reconciliation`): a watch of the one Lease
//! `kube-system/<secret name>`, open only while the agent waits. gardener-node-agent watches
//! the same Lease, so without this a waiting GNA took a freed lock within a tenth of a second
//! and this agent only at its next poll (up to [`slots::POLL_INTERVAL`] later); the poll stays
//! as the fallback for a watch that cannot be opened.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::agent::metrics::Metrics;
use crate::agent::ports::cluster;
use crate::agent::rollout::slots::{self, Decision};
use crate::error_chain::printable as error_chain;

/// The watch of one lock; dropping it ends the watch.
pub struct LockWatch {
    free: Arc<Notify>,
    task: JoinHandle<()>,
}

impl LockWatch {
    /// Watches the Lease `lease` for `identity` (the host name): [`LockWatch::signal`] wakes
    /// when the Lease is gone, has no holder, is held by `identity` or has expired — when
    /// [`slots::decide`] would take it. Also right after the watch starts if it is free then
    /// (a release between the agent's look and the watch is not missed).
    pub fn start(client: &Client, lease: &str, identity: &str, metrics: &Metrics) -> Self {
        let free = Arc::new(Notify::new());
        let updates = cluster::watch_lease(client, lease);
        let on_error = {
            let metrics = metrics.clone();
            move |error: &kube::runtime::watcher::Error| {
                metrics.error("serial-lock-watch", "api");
                warn!(error = %error_chain(error), "watching the serial lock failed; polling it meanwhile");
            }
        };
        let task = {
            let (free, identity, lease) = (free.clone(), identity.to_string(), lease.to_string());
            tokio::spawn(async move {
                let mut updates = std::pin::pin!(cluster::latest(updates, on_error));
                while let Some(update) = updates.next().await {
                    if slots::decide(update.as_ref(), &identity, Timestamp::now()) == Decision::Take
                    {
                        debug!(%lease, "the serial lock is free");
                        free.notify_one();
                    }
                }
            })
        };
        LockWatch { free, task }
    }

    /// Notified when the lock was seen free (a permit is kept until someone waits).
    pub fn signal(&self) -> Arc<Notify> {
        self.free.clone()
    }
}

impl Drop for LockWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
