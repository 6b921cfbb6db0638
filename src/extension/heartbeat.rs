//! The heartbeat Lease `gardener-extension-heartbeat` (`docs/contract.md#heartbeat`):
//! gardenlet reads its `renewTime` to tell whether the extension is alive.
//!
//! Renewed every `--heartbeat-renew-interval-seconds` by the leader only; each success is
//! recorded in `gardener_extension_node_heartbeat_last_renew_timestamp_seconds`
//! ([`LivenessMetrics`]), which the seed alert `ExtensionNodeHeartbeatStale` reads.

use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::finalizer::{is_conflict, is_not_found};
use super::liveness_metrics::LivenessMetrics;

/// Name of the heartbeat Lease.
pub const HEARTBEAT_LEASE: &str = "gardener-extension-heartbeat";

/// Creates or renews the heartbeat Lease once.
pub async fn renew(
    client: &Client,
    namespace: &str,
    holder: &str,
    interval: Duration,
) -> Result<(), kube::Error> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let now = Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true);
    let seconds = i32::try_from(interval.as_secs()).unwrap_or(i32::MAX);
    let spec = json!({
        "holderIdentity": holder,
        "leaseDurationSeconds": seconds,
        "renewTime": now,
    });
    match leases
        .patch(
            HEARTBEAT_LEASE,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(error) if is_not_found(&error) => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(HEARTBEAT_LEASE.to_string()),
                    namespace: Some(namespace.to_string()),
                    ..Default::default()
                },
                spec: serde_json::from_value(spec).ok(),
            };
            match leases.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(()),
                // Created concurrently: the next tick renews it.
                Err(error) if is_conflict(&error) => Ok(()),
                Err(error) => Err(error),
            }
        }
        Err(error) => Err(error),
    }
}

/// Renews the heartbeat every `interval` until `shutdown`, recording each success in
/// `metrics`. Failures are logged and retried on the next tick.
pub async fn run(
    client: Client,
    namespace: String,
    holder: String,
    interval: Duration,
    metrics: LivenessMetrics,
    shutdown: CancellationToken,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {
                match renew(&client, &namespace, &holder, interval).await {
                    Ok(()) => {
                        metrics.heartbeat_renewed(Utc::now());
                        tracing::debug!(namespace, "heartbeat renewed");
                    }
                    Err(error) => tracing::warn!(namespace, %error, "renewing the heartbeat failed"),
                }
            }
        }
    }
}
