//! Leader election on a `coordination.k8s.io/v1` Lease (default name
//! `gardener-extension-node-leader-election`), so that only one replica reconciles.
//!
//! Timings follow controller-runtime's defaults: lease 15 s, renew deadline 10 s, retry 2 s.
//! Acquiring waits until the Lease is free or expired; all writes carry the Lease's
//! resourceVersion, so two candidates never both win. Losing the Lease (no successful renew
//! within the deadline) is fatal for the process, as with controller-runtime: the controllers
//! stop and the pod restarts as a follower.
//!
//! On shutdown the leader goes on renewing until its caller says the controllers have
//! stopped ([`LeaderElector::keep`] returns when told to), and only then gives the Lease up
//! ([`LeaderElector::release`]), so a standby never reconciles while a run of the old leader
//! is still in flight. A caller whose controllers did not stop in time does not release: the
//! Lease then expires a lease duration after the last renewal, when the process is long gone.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

/// Timings of the election.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    /// How long a Lease is valid without renewal.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before giving up.
    pub renew_deadline: Duration,
    /// Pause between attempts.
    pub retry_period: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// One candidate.
#[derive(Debug, Clone)]
pub struct LeaderElector {
    leases: Api<Lease>,
    name: String,
    identity: String,
    timings: Timings,
}

/// Errors of the election.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The Lease could not be renewed within the renew deadline.
    #[error("lost leadership of Lease {0}")]
    Lost(String),
}

fn now_micro() -> MicroTime {
    // MicroTime wraps a jiff timestamp; go through RFC 3339 to stay independent of it.
    let text = Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true);
    serde_json::from_value(serde_json::Value::String(text))
        .unwrap_or_else(|_| MicroTime(Default::default()))
}

fn micro_to_chrono(time: &MicroTime) -> Option<DateTime<Utc>> {
    let text = serde_json::to_value(time).ok()?;
    DateTime::parse_from_rfc3339(text.as_str()?)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

impl LeaderElector {
    /// A candidate `identity` for Lease `namespace/name`.
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timings: Timings,
    ) -> Self {
        LeaderElector {
            leases: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            timings,
        }
    }

    /// Waits until this candidate holds the Lease (or `shutdown`; then `false`).
    pub async fn acquire(&self, shutdown: &CancellationToken) -> bool {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "became leader");
                    return true;
                }
                Ok(false) => tracing::debug!(lease = %self.name, "lease held by another candidate"),
                Err(error) => {
                    tracing::warn!(lease = %self.name, %error, "leader election attempt failed")
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return false,
                _ = tokio::time::sleep(self.timings.retry_period) => {}
            }
        }
    }

    /// Renews the Lease every retry period until `until` (then returns `Ok`, still holding
    /// it: give it up with [`Self::release`] once nothing reconciles any more) or until
    /// renewing failed for longer than the renew deadline (`Err`).
    pub async fn keep(&self, until: &CancellationToken) -> Result<(), LeaderError> {
        let mut last_renew = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = until.cancelled() => return Ok(()),
                _ = tokio::time::sleep(self.timings.retry_period) => {}
            }
            match self.try_acquire_or_renew().await {
                Ok(true) => last_renew = tokio::time::Instant::now(),
                Ok(false) => return Err(LeaderError::Lost(self.name.clone())),
                Err(error) => {
                    tracing::warn!(lease = %self.name, %error, "renewing the leader lease failed")
                }
            }
            if last_renew.elapsed() > self.timings.renew_deadline {
                return Err(LeaderError::Lost(self.name.clone()));
            }
        }
    }

    /// One attempt: `Ok(true)` if we hold the Lease afterwards.
    async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let duration = i32::try_from(self.timings.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = self.leases.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(duration),
                    acquire_time: Some(now_micro()),
                    renew_time: Some(now_micro()),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.leases.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(error) if super::finalizer::is_conflict(&error) => Ok(false),
                Err(error) => Err(error),
            };
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let ours = spec.holder_identity.as_deref() == Some(self.identity.as_str());
        if !ours {
            let free = spec.holder_identity.as_deref().is_none_or(str::is_empty);
            let expires = spec
                .renew_time
                .as_ref()
                .and_then(micro_to_chrono)
                .map(|renewed| {
                    let valid = spec.lease_duration_seconds.unwrap_or(duration).max(1);
                    renewed + chrono::Duration::seconds(i64::from(valid))
                });
            let expired = expires.is_none_or(|t| t < Utc::now());
            if !free && !expired {
                return Ok(false);
            }
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(now_micro());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.lease_duration_seconds = Some(duration);
        spec.renew_time = Some(now_micro());
        // `replace` sends the resourceVersion we read: a concurrent writer makes us lose.
        match self
            .leases
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(error) if super::finalizer::is_conflict(&error) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Gives the Lease up so a successor need not wait for it to expire; call it only once
    /// no run of this replica is in flight any more (a successor starts within a retry
    /// period).
    pub async fn release(&self) {
        let Ok(Some(mut lease)) = self.leases.get_opt(&self.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        if let Err(error) = self
            .leases
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            tracing::warn!(%error, "releasing the leader lease failed");
        } else {
            tracing::info!(lease = %self.name, "released leadership");
        }
    }
}
