//! The node agent's heartbeat (`docs/agent.md#node-agent-lease`): Lease
//! `kube-system/gardener-node-agent-<node>`, holder = the lease name, 40 s duration, renewed
//! every 10 s, owned by the Node (controller, `blockOwnerDeletion`, as GNA writes it).
//! Gardener's shoot care marks the node's agent unhealthy when it is missing or expired.
//! Renewed from the heartbeat thread ([`crate::agent::liveness::heartbeat`]), with a client of its own, so that
//! the main loop's blocking work never delays it; the first renewal once the Node is known.
//!
//! One request per renewal: the object returned by the last write is kept, and the next
//! renewal replaces it directly (its resourceVersion makes the PUT a compare-and-swap). Only
//! at start, after a conflict (someone else wrote the Lease) or after it vanished is the Lease
//! read again — GNA reads it from its informer cache instead, which costs a watch.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::watch;

use crate::agent::metrics::Metrics;
use crate::agent::ports::cluster::{NAMESPACE, NodeMeta};

/// Lease duration.
pub const LEASE_DURATION_SECONDS: i32 = 40;
/// How often it is renewed (a quarter of the duration).
pub const RENEW_INTERVAL: Duration = Duration::from_secs(10);

/// `gardener-node-agent-<node>`.
pub fn lease_name(node: &str) -> String {
    format!("gardener-node-agent-{node}")
}

/// The lease as it must be after a renewal at `now`: `existing` (if any) with holder,
/// duration and renew time set and the Node as controlling owner. Pure.
pub fn renewed(existing: Option<Lease>, node: &NodeMeta, now: Timestamp) -> Lease {
    let name = lease_name(&node.name_any());
    let mut lease = existing.unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(NAMESPACE.to_string()),
            ..ObjectMeta::default()
        },
        spec: None,
    });
    if let Some(uid) = node.metadata.uid.clone() {
        lease.metadata.owner_references = Some(vec![OwnerReference {
            api_version: Node::api_version(&()).to_string(),
            kind: Node::kind(&()).to_string(),
            name: node.name_any(),
            uid,
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
    }
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = Some(name);
    spec.lease_duration_seconds = Some(LEASE_DURATION_SECONDS);
    spec.renew_time = Some(MicroTime(now));
    lease
}

/// Renews one node's Lease, remembering the object of the last successful write.
pub struct Renewer {
    api: Api<Lease>,
    /// The Lease as the last write returned it; `None`: read it first.
    last: Option<Lease>,
}

impl Renewer {
    /// A renewer that reads the Lease on its first renewal.
    pub fn new(client: &Client) -> Self {
        Renewer {
            api: Api::namespaced(client.clone(), NAMESPACE),
            last: None,
        }
    }

    /// One renewal. With the object of the last write at hand this is a single PUT; on a
    /// conflict the Lease is read again once and the PUT repeated, when it is gone it is
    /// created. Without one (start, or after a failure that left the state unknown) it is
    /// GET, then PUT or POST. On error the kept object is dropped, so the next renewal reads.
    pub async fn renew(&mut self, node: &NodeMeta) -> Result<(), kube::Error> {
        let result = self.write(node).await;
        match result {
            Ok(lease) => {
                self.last = Some(lease);
                Ok(())
            }
            Err(error) => {
                self.last = None;
                Err(error)
            }
        }
    }

    async fn write(&mut self, node: &NodeMeta) -> Result<Lease, kube::Error> {
        let name = lease_name(&node.name_any());
        let pp = PostParams::default();
        if let Some(last) = self.last.take() {
            match self
                .api
                .replace(&name, &pp, &renewed(Some(last), node, Timestamp::now()))
                .await
            {
                Ok(lease) => return Ok(lease),
                // Someone else wrote it (409), or it was deleted (404): read it again, once.
                Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {}
                Err(error) => return Err(error),
            }
        }
        match self.api.get_opt(&name).await? {
            Some(existing) => {
                self.api
                    .replace(&name, &pp, &renewed(Some(existing), node, Timestamp::now()))
                    .await
            }
            None => {
                self.api
                    .create(&pp, &renewed(None, node, Timestamp::now()))
                    .await
            }
        }
    }
}

/// Renews every [`RENEW_INTERVAL`] for the node in `node` (waits until there is one).
pub async fn run(client: Client, mut node: watch::Receiver<Option<NodeMeta>>, metrics: Metrics) {
    let mut renewer = Renewer::new(&client);
    let mut ticker = tokio::time::interval(RENEW_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if node.has_changed().is_err() {
            // The main loop is gone (the agent stops).
            return;
        }
        let current = node.borrow_and_update().clone();
        let Some(current) = current else {
            // Not known yet: wait for it, then renew at once.
            if node.changed().await.is_err() {
                return;
            }
            ticker.reset_immediately();
            continue;
        };
        let renewal = tokio::time::timeout(
            Duration::from_secs(LEASE_DURATION_SECONDS as u64),
            renewer.renew(&current),
        )
        .await;
        match renewal {
            Ok(Ok(())) => {
                tracing::debug!(lease = %lease_name(&current.name_any()), "lease renewed")
            }
            Ok(Err(error)) => {
                metrics.error("lease", "api");
                tracing::warn!(%error, lease = %lease_name(&current.name_any()), "renewing the lease failed");
            }
            Err(_) => {
                // The write may or may not have landed: read before the next one.
                renewer.last = None;
                metrics.error("lease", "timeout");
                tracing::warn!(lease = %lease_name(&current.name_any()), "renewing the lease timed out");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::PartialObjectMetaExt;

    #[test]
    fn renewal_sets_holder_duration_time_and_owner() {
        let node: NodeMeta = ObjectMeta {
            name: Some("node-a".into()),
            uid: Some("uid-1".into()),
            ..ObjectMeta::default()
        }
        .into_request_partial();
        let now: Timestamp = "2025-01-02T03:04:05.123456Z".parse().unwrap();
        let lease = renewed(None, &node, now);
        assert_eq!(
            lease.metadata.name.as_deref(),
            Some("gardener-node-agent-node-a")
        );
        assert_eq!(lease.metadata.namespace.as_deref(), Some("kube-system"));
        let spec = lease.spec.as_ref().unwrap();
        assert_eq!(
            spec.holder_identity.as_deref(),
            Some("gardener-node-agent-node-a")
        );
        assert_eq!(spec.lease_duration_seconds, Some(40));
        let owner = &lease.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (
                owner.kind.as_str(),
                owner.uid.as_str(),
                owner.controller,
                owner.block_owner_deletion
            ),
            ("Node", "uid-1", Some(true), Some(true))
        );
        let json = serde_json::to_value(&lease).unwrap();
        assert_eq!(json["spec"]["renewTime"], "2025-01-02T03:04:05.123456Z");

        // A later renewal keeps the object (resourceVersion) and moves the time.
        let mut existing = lease.clone();
        existing.metadata.resource_version = Some("7".into());
        let later = renewed(
            Some(existing),
            &node,
            now + k8s_openapi::jiff::SignedDuration::from_secs(10),
        );
        assert_eq!(later.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(
            serde_json::to_value(&later).unwrap()["spec"]["renewTime"],
            "2025-01-02T03:04:15.123456Z"
        );
    }
}
