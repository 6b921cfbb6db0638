//! The node agent's heartbeat (`docs/agent.md#node-agent-lease`): Lease
//! `kube-system/gardener-node-agent-<node>`, holder = the lease name, 40 s duration, renewed
//! every 10 s, owned by the Node. Gardener's shoot care marks the node's agent unhealthy
//! when it is missing or expired. Started once the Node is known.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::watch;

use super::cluster::{NAMESPACE, NodeMeta};
use super::metrics::Metrics;

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
            block_owner_deletion: None,
        }]);
    }
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = Some(name);
    spec.lease_duration_seconds = Some(LEASE_DURATION_SECONDS);
    spec.renew_time = Some(MicroTime(now));
    lease
}

/// One renewal: GET, then create or replace.
pub async fn renew(client: &Client, node: &NodeMeta) -> Result<(), kube::Error> {
    let api = Api::<Lease>::namespaced(client.clone(), NAMESPACE);
    let name = lease_name(&node.name_any());
    let existing = api.get_opt(&name).await?;
    let create = existing.is_none();
    let lease = renewed(existing, node, Timestamp::now());
    if create {
        api.create(&PostParams::default(), &lease).await?;
    } else {
        api.replace(&name, &PostParams::default(), &lease).await?;
    }
    Ok(())
}

/// Renews every [`RENEW_INTERVAL`] for the node in `node` (waits until there is one).
pub async fn run(client: Client, mut node: watch::Receiver<Option<NodeMeta>>, metrics: Metrics) {
    let mut ticker = tokio::time::interval(RENEW_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
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
            renew(&client, &current),
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
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("Node", "uid-1", Some(true))
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
