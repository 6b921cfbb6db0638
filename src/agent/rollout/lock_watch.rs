//! Wakes an agent that waits for the serial lock or a rollout slot as soon as one is free
//! (`docs/agent.md#serial-osc-reconciliation`, `#slots`): a watch of the one Lease
//! `kube-system/<secret name>` that holds every slot ([`slots`]), open only while the agent
//! waits. gardener-node-agent watches the same Lease, so without this a waiting GNA took a
//! freed lock within a tenth of a second and this agent only at its next poll (up to
//! [`slots::POLL_INTERVAL`] later); the poll stays as the fallback for a watch that cannot be
//! opened.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::agent::metrics::Metrics;
use crate::agent::ports::cluster;
use crate::agent::rollout::slots::{self, Choice};
use crate::error_chain::printable as error_chain;

pub use crate::agent::rollout::slots::Awaited;

/// The watch of one lock; dropping it ends the watch.
pub struct LockWatch {
    awaited: Awaited,
    free: Arc<Notify>,
    task: JoinHandle<()>,
}

impl LockWatch {
    /// Watches the Lease `lease` for `identity` (the host name) waiting for `awaited`:
    /// [`LockWatch::signal`] wakes when [`slots::choose`] would
    /// take a slot — the Lease is gone, or one of the slots (0 in the spec, the others in
    /// annotations) has no holder, is held by `identity` or has expired. Also right after the
    /// watch starts if one is free then (a release between the agent's look and the watch is
    /// not missed).
    pub fn start(
        client: &Client,
        lease: &str,
        identity: &str,
        awaited: Awaited,
        metrics: &Metrics,
    ) -> Self {
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
                    let choice =
                        slots::choose(update.as_ref(), &identity, awaited, Timestamp::now());
                    if let Choice::Take(slot) = choice {
                        debug!(%lease, slot, "a slot of the lock is free");
                        free.notify_one();
                    }
                }
            })
        };
        LockWatch {
            awaited,
            free,
            task,
        }
    }

    /// What this watch waits for.
    pub fn awaited(&self) -> Awaited {
        self.awaited
    }

    /// Notified when a slot was seen free (a permit is kept until someone waits).
    pub fn signal(&self) -> Arc<Notify> {
        self.free.clone()
    }
}

impl Drop for LockWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
