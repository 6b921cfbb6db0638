//! Keeps [`Steering`] ([`crate::agent::rollout::steering`]) in step with the pool's Lease
//! `kube-system/<secret name>`: one watch of that Lease alone (field selector
//! `metadata.name`), for as long as the agent runs — gardener-node-agent watches the same
//! Lease all the time too. The main loop is woken by every change of the steering annotations
//! (a pause lifted applies at once); changes of the slots alone do not wake it (the
//! [`crate::agent::rollout::lock_watch`] does that while the agent waits for one).

use futures::StreamExt;
use kube::Client;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::agent::metrics::Metrics;
use crate::agent::ports::cluster;
use crate::agent::rollout::steering::Steering;
use crate::error_chain::printable as error_chain;

/// Follows the Lease `lease` until the task is aborted, publishing its steering into `tx`
/// when it changes.
pub async fn follow(client: Client, lease: String, tx: &watch::Sender<Steering>, metrics: Metrics) {
    let on_error = move |error: &kube::runtime::watcher::Error| {
        metrics.error("steering-watch", "api");
        warn!(error = %error_chain(error), "watching the pool's Lease for the rollout settings failed; retrying");
    };
    let updates = cluster::latest(cluster::watch_lease(&client, &lease), on_error);
    let mut updates = std::pin::pin!(updates);
    while let Some(update) = updates.next().await {
        let steering = Steering::of(update.as_ref());
        tx.send_if_modified(|known| {
            if *known == steering {
                return false;
            }
            if known.paused() != steering.paused() {
                match steering.paused() {
                    Some(why) => info!(%lease, reason = %why, "rollout paused from the seed"),
                    None => info!(%lease, "rollout resumed from the seed"),
                }
            }
            *known = steering.clone();
            true
        });
    }
}
