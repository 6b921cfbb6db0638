//! Serial OSC reconciliation (`docs/agent.md#serial-osc-reconciliation`): when the OSC secret
//! carries `reconciliation.osc.node-agent.gardener.cloud/serial: "true"`, an agent applies only
//! while it holds the Lease `kube-system/<secret name>`, so the nodes of the pool apply one at a
//! time. Compatible with gardener-node-agent's lock (gardener
//! `pkg/nodeagent/controller/operatingsystemconfig/serial.go`), so GNA and this agent serialise
//! each other in a mixed pool:
//!
//! - holder identity: the host name; `leaseDurationSeconds: 600`; the Secret is the Lease's
//!   controlling owner (`blockOwnerDeletion`, as `metav1.NewControllerRef` writes it);
//! - acquire: create the Lease, or update it when it has no holder, the holder is us, or the
//!   holder's `renewTime + leaseDurationSeconds` has passed; `acquireTime` is set when the
//!   holder changes, `renewTime` on every acquire;
//! - release (after a successful apply, or when the node is already up to date): an update that
//!   clears holder, duration, acquire and renew time;
//! - a lock held by another node is asked again when it expires, and meanwhile every
//!   [`POLL_INTERVAL`] (GNA watches the Lease instead; polling costs nothing while idle).
//!
//! The same lock serves the disruptive rollout ([`super::rollout`]) as its slot 0; slots
//! `1..budget` are Leases `<secret name>-<i>` taken and released by the same rules. So the
//! code here is written for a list of Lease names: [`choose`] picks one of them, and
//! [`SerialLock`] holds at most one at a time.
//!
//! [`decide`], [`choose`], [`acquired`] and [`released`] are pure; [`SerialLock`] does the
//! API calls.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client, Resource, ResourceExt};

use super::cluster::NAMESPACE;

/// The OSC secret annotation that asks for serial reconciliation.
pub const ANNOTATION_SERIAL: &str = "reconciliation.osc.node-agent.gardener.cloud/serial";
/// `leaseDurationSeconds` of the lock, as GNA writes it.
pub const LOCK_DURATION_SECONDS: i32 = 600;
/// How often a lock held by another node is looked at again (at the latest).
pub const POLL_INTERVAL: Duration = Duration::from_secs(5);

/// Whether `secret` asks for serial reconciliation (the annotation is exactly `"true"`).
pub fn is_serial(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|a| a.get(ANNOTATION_SERIAL))
        .is_some_and(|value| value == "true")
}

/// What to do with the lock as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Free, expired or ours: write it with us as holder.
    Take,
    /// Another node holds it; look again after this long.
    Wait {
        /// The holder.
        holder: String,
        /// Until the next look.
        retry_in: Duration,
    },
}

/// Whether `identity` may take `lease` at `now` (`None`: it does not exist). Pure.
pub fn decide(lease: Option<&Lease>, identity: &str, now: Timestamp) -> Decision {
    let Some(spec) = lease.and_then(|l| l.spec.as_ref()) else {
        return Decision::Take;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder.is_empty() || holder == identity {
        return Decision::Take;
    }
    let duration = spec.lease_duration_seconds.unwrap_or(0);
    let Some(renewed) = spec.renew_time.as_ref().map(|t| t.0) else {
        return Decision::Take;
    };
    if duration < 0 {
        return Decision::Take;
    }
    let expires = renewed + SignedDuration::from_secs(i64::from(duration));
    if expires <= now {
        return Decision::Take;
    }
    let left = Duration::try_from(expires.duration_since(now)).unwrap_or(Duration::ZERO);
    Decision::Wait {
        holder: holder.to_string(),
        retry_in: left.min(POLL_INTERVAL).max(Duration::from_millis(500)),
    }
}

/// Which of several Leases (slots) `identity` may take at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// Take (or renew) the Lease at this index.
    Take(usize),
    /// All are held by others; look again after this long.
    Wait {
        /// The holders, in slot order.
        holders: Vec<String>,
        /// Until the next look: the soonest of the slots' [`Decision::Wait`] times.
        retry_in: Duration,
    },
}

/// Picks a slot among `leases` (in slot order; `None`: does not exist yet). A slot this
/// identity already holds wins, so an agent never holds two and a restarted one finds its own
/// again; else the first free or expired slot. Pure.
pub fn choose(leases: &[Option<&Lease>], identity: &str, now: Timestamp) -> Choice {
    if let Some(own) = leases
        .iter()
        .position(|lease| lease.is_some_and(|l| held_by(l, identity)))
    {
        return Choice::Take(own);
    }
    let mut holders = Vec::new();
    let mut retry_in = POLL_INTERVAL;
    for (index, lease) in leases.iter().enumerate() {
        match decide(*lease, identity, now) {
            Decision::Take => return Choice::Take(index),
            Decision::Wait {
                holder,
                retry_in: wait,
            } => {
                holders.push(holder);
                retry_in = retry_in.min(wait);
            }
        }
    }
    Choice::Wait { holders, retry_in }
}

/// The Lease `name` after `identity` took it at `now`: `existing`, or a new Lease owned by
/// the OSC `secret`. Pure.
pub fn acquired(
    existing: Option<Lease>,
    secret: &Secret,
    name: &str,
    identity: &str,
    now: Timestamp,
) -> Lease {
    let mut lease = existing.unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(NAMESPACE.to_string()),
            owner_references: secret.metadata.uid.clone().map(|uid| {
                vec![OwnerReference {
                    api_version: Secret::api_version(&()).to_string(),
                    kind: Secret::kind(&()).to_string(),
                    name: secret.name_any(),
                    uid,
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]
            }),
            ..ObjectMeta::default()
        },
        spec: None,
    });
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if spec.holder_identity.as_deref() != Some(identity) {
        spec.holder_identity = Some(identity.to_string());
        spec.lease_duration_seconds = Some(LOCK_DURATION_SECONDS);
        spec.acquire_time = Some(MicroTime(now));
    }
    spec.renew_time = Some(MicroTime(now));
    lease
}

/// The lock after its holder released it. Pure.
pub fn released(mut lease: Lease) -> Lease {
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = None;
    spec.lease_duration_seconds = None;
    spec.acquire_time = None;
    spec.renew_time = None;
    lease
}

/// Whether `lease` names `identity` as its holder. Pure.
pub fn held_by(lease: &Lease, identity: &str) -> bool {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        == Some(identity)
}

/// Outcome of [`SerialLock::acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// We hold it: apply.
    Held,
    /// Another node does (or won a race): try again after `retry_in`.
    Busy {
        /// The holder, as far as known.
        holder: String,
        /// Until the next try.
        retry_in: Duration,
    },
}

/// The serial lock (or rollout slot) of one agent. Knows the Lease as its last write
/// returned it, so a release after an apply is a single request.
pub struct SerialLock {
    client: Client,
    identity: String,
    /// The Lease as we last wrote it while holding it; `None`: not held (or unknown).
    held: Option<Lease>,
    /// Whether this process has looked at the lock yet (a restart may find it still ours).
    looked: bool,
}

impl SerialLock {
    /// A lock taken as `identity` (the host name).
    pub fn new(client: &Client, identity: &str) -> Self {
        SerialLock {
            client: client.clone(),
            identity: identity.to_string(),
            held: None,
            looked: false,
        }
    }

    /// Whether this agent holds a lock as far as it knows.
    pub fn holds(&self) -> bool {
        self.held.is_some()
    }

    /// The name of the Lease this agent holds, as far as it knows.
    pub fn held_name(&self) -> Option<String> {
        self.held.as_ref().and_then(|l| l.metadata.name.clone())
    }

    /// Whether this agent's last write of the Lease it holds is younger than `within`.
    pub fn renewed_within(&self, within: Duration) -> bool {
        let within = SignedDuration::try_from(within).unwrap_or(SignedDuration::MAX);
        self.held
            .as_ref()
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.renew_time.as_ref())
            .is_some_and(|renewed| Timestamp::now().duration_since(renewed.0) < within)
    }

    fn api(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), NAMESPACE)
    }

    /// Takes the serial lock for `secret` (the Lease named like it).
    pub async fn acquire(&mut self, secret: &Secret) -> Result<Acquired, kube::Error> {
        self.acquire_any(secret, &[secret.name_any()]).await
    }

    /// Takes one of the Leases `names` (GET each, then POST or PUT the one [`choose`]
    /// picks), renewing it when it is already ours, or says who holds them. A race lost to
    /// another node (409) is reported as busy with a short retry.
    pub async fn acquire_any(
        &mut self,
        secret: &Secret,
        names: &[String],
    ) -> Result<Acquired, kube::Error> {
        let api = self.api();
        self.looked = true;
        let found = get_slots(&api, names).await?;
        let names = &names[..found.len()];
        let refs: Vec<Option<&Lease>> = found.iter().map(Option::as_ref).collect();
        let index = match choose(&refs, &self.identity, Timestamp::now()) {
            Choice::Take(index) => index,
            Choice::Wait { holders, retry_in } => {
                self.held = None;
                return Ok(Acquired::Busy {
                    holder: holders.join(","),
                    retry_in,
                });
            }
        };
        let (Some(name), Some(existing)) = (names.get(index), found.into_iter().nth(index)) else {
            // `choose` only returns indexes of `names`.
            return Ok(Acquired::Busy {
                holder: String::new(),
                retry_in: POLL_INTERVAL,
            });
        };
        let create = existing.is_none();
        let lease = acquired(existing, secret, name, &self.identity, Timestamp::now());
        let pp = PostParams::default();
        let written = if create {
            api.create(&pp, &lease).await
        } else {
            api.replace(name, &pp, &lease).await
        };
        match written {
            Ok(lease) => {
                self.held = Some(lease);
                Ok(Acquired::Held)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                self.held = None;
                Ok(Acquired::Busy {
                    holder: String::new(),
                    retry_in: Duration::from_secs(1),
                })
            }
            Err(error) => Err(error),
        }
    }

    /// Releases the serial lock of `secret_name` if this agent holds it (see
    /// [`SerialLock::release_any`]).
    pub async fn release(&mut self, secret_name: &str) -> Result<(), kube::Error> {
        self.release_any(&[secret_name.to_string()]).await
    }

    /// Releases whichever of the Leases `names` this agent holds; a no-op when it holds
    /// none. After a restart (nothing known yet) each is read once to find out. A conflict
    /// re-reads once; a Lease that is gone or held by another is left alone.
    pub async fn release_any(&mut self, names: &[String]) -> Result<(), kube::Error> {
        let api = self.api();
        let mut held: Vec<Lease> = Vec::new();
        match self.held.take() {
            Some(lease) => held.push(lease),
            None if !self.looked => {
                self.looked = true;
                held.extend(get_slots(&api, names).await?.into_iter().flatten());
            }
            None => {}
        }
        for lease in held.into_iter().filter(|l| held_by(l, &self.identity)) {
            let name = lease.name_any();
            release_one(&api, &name, lease, &self.identity).await?;
        }
        Ok(())
    }
}

/// The Leases `names` in order (`None`: not there). A refused read (403) of any but the first
/// ends the list there: Gardener's node-agent authorizer admits only the Lease named like the
/// OSC secret, so where it is not extended the rollout's budget shrinks to the slots the agent
/// may read (logged), instead of the agent failing every reconcile.
async fn get_slots(api: &Api<Lease>, names: &[String]) -> Result<Vec<Option<Lease>>, kube::Error> {
    let mut found = Vec::with_capacity(names.len());
    for (index, name) in names.iter().enumerate() {
        match api.get_opt(name).await {
            Ok(lease) => found.push(lease),
            Err(kube::Error::Api(status)) if status.code == 403 && index > 0 => {
                tracing::warn!(lease = %name, slots = index, "reading a rollout slot Lease is forbidden; using only the slots before it");
                break;
            }
            Err(error) => return Err(error),
        }
    }
    Ok(found)
}

/// One release PUT of `lease`, re-reading once on a conflict.
async fn release_one(
    api: &Api<Lease>,
    name: &str,
    lease: Lease,
    identity: &str,
) -> Result<(), kube::Error> {
    let pp = PostParams::default();
    match api.replace(name, &pp, &released(lease)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => match api.get_opt(name).await? {
            Some(current) if held_by(&current, identity) => {
                api.replace(name, &pp, &released(current)).await.map(drop)
            }
            _ => Ok(()),
        },
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAME: &str = "gardener-node-agent-pool-a";

    fn lease(holder: Option<&str>, duration: Option<i32>, renewed: Option<&str>) -> Lease {
        Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                lease_duration_seconds: duration,
                renew_time: renewed.map(|t| MicroTime(t.parse().unwrap())),
                ..LeaseSpec::default()
            }),
        }
    }

    fn secret() -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("gardener-node-agent-pool-a".into()),
                namespace: Some("kube-system".into()),
                uid: Some("uid-s".into()),
                annotations: Some([(ANNOTATION_SERIAL.to_string(), "true".to_string())].into()),
                ..ObjectMeta::default()
            },
            ..Secret::default()
        }
    }

    #[test]
    fn only_the_exact_value_true_asks_for_serial_reconciliation() {
        let with = |v: &str| Some([(ANNOTATION_SERIAL.to_string(), v.to_string())].into());
        assert!(is_serial(with("true").as_ref()));
        assert!(!is_serial(with("True").as_ref()));
        assert!(!is_serial(with("false").as_ref()));
        assert!(!is_serial(with("").as_ref()));
        assert!(!is_serial(None));
    }

    #[test]
    fn free_expired_or_own_locks_are_taken_and_others_waited_for() {
        let now: Timestamp = "2025-01-01T00:10:00Z".parse().unwrap();
        assert_eq!(decide(None, "a", now), Decision::Take);
        assert_eq!(
            decide(Some(&lease(None, None, None)), "a", now),
            Decision::Take
        );
        assert_eq!(
            decide(Some(&lease(Some(""), None, None)), "a", now),
            Decision::Take
        );
        assert_eq!(
            decide(
                Some(&lease(Some("a"), Some(600), Some("2025-01-01T00:09:00Z"))),
                "a",
                now
            ),
            Decision::Take
        );
        // Expired: renewed 600 s ago exactly.
        assert_eq!(
            decide(
                Some(&lease(Some("b"), Some(600), Some("2025-01-01T00:00:00Z"))),
                "a",
                now
            ),
            Decision::Take
        );
        // Held with time left: look again after the poll interval.
        assert_eq!(
            decide(
                Some(&lease(Some("b"), Some(600), Some("2025-01-01T00:09:00Z"))),
                "a",
                now
            ),
            Decision::Wait {
                holder: "b".into(),
                retry_in: POLL_INTERVAL
            }
        );
        // Expiring sooner than the poll interval: look again at expiry.
        assert_eq!(
            decide(
                Some(&lease(Some("b"), Some(600), Some("2025-01-01T00:00:02Z"))),
                "a",
                now
            ),
            Decision::Wait {
                holder: "b".into(),
                retry_in: Duration::from_secs(2)
            }
        );
        // No renew time: nothing to wait for (GNA's renewedInTime is false).
        assert_eq!(
            decide(Some(&lease(Some("b"), Some(600), None)), "a", now),
            Decision::Take
        );
    }

    #[test]
    fn acquiring_sets_holder_duration_times_and_the_secret_as_owner() {
        let now: Timestamp = "2025-01-01T00:10:00.123456Z".parse().unwrap();
        let lease = acquired(None, &secret(), NAME, "host-a", now);
        assert_eq!(
            lease.metadata.name.as_deref(),
            Some("gardener-node-agent-pool-a")
        );
        assert_eq!(lease.metadata.namespace.as_deref(), Some("kube-system"));
        let owner = &lease.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (
                owner.api_version.as_str(),
                owner.kind.as_str(),
                owner.uid.as_str(),
                owner.controller,
                owner.block_owner_deletion
            ),
            ("v1", "Secret", "uid-s", Some(true), Some(true))
        );
        let spec = lease.spec.as_ref().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("host-a"));
        assert_eq!(spec.lease_duration_seconds, Some(600));
        assert_eq!(spec.acquire_time.as_ref().map(|t| t.0), Some(now));
        assert_eq!(spec.renew_time.as_ref().map(|t| t.0), Some(now));

        // Taking it again (a restart): only the renew time moves.
        let later = now + SignedDuration::from_secs(30);
        let again = acquired(Some(lease.clone()), &secret(), NAME, "host-a", later);
        let spec = again.spec.as_ref().unwrap();
        assert_eq!(spec.acquire_time.as_ref().map(|t| t.0), Some(now));
        assert_eq!(spec.renew_time.as_ref().map(|t| t.0), Some(later));

        // Taking over an expired lock of another holder: a new acquire time.
        let taken = acquired(Some(lease), &secret(), NAME, "host-b", later);
        let spec = taken.spec.as_ref().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("host-b"));
        assert_eq!(spec.acquire_time.as_ref().map(|t| t.0), Some(later));
    }

    #[test]
    fn a_slot_of_our_own_wins_then_the_first_free_one_else_the_soonest_expiry() {
        let now: Timestamp = "2025-01-01T00:10:00Z".parse().unwrap();
        let busy = |holder: &str, renewed: &str| lease(Some(holder), Some(600), Some(renewed));
        let b = busy("b", "2025-01-01T00:09:00Z");
        let c = busy("c", "2025-01-01T00:00:03Z");
        let own = busy("a", "2025-01-01T00:09:00Z");
        let free = lease(None, None, None);
        assert_eq!(choose(&[None, None], "a", now), Choice::Take(0));
        assert_eq!(choose(&[Some(&b), None], "a", now), Choice::Take(1));
        assert_eq!(choose(&[Some(&b), Some(&free)], "a", now), Choice::Take(1));
        // Our own slot is renewed even when an earlier one is free.
        assert_eq!(choose(&[None, Some(&own)], "a", now), Choice::Take(1));
        assert_eq!(
            choose(&[Some(&b), Some(&c)], "a", now),
            Choice::Wait {
                holders: vec!["b".into(), "c".into()],
                retry_in: Duration::from_secs(3)
            }
        );
        // Expired slot of another holder: taken.
        let old = busy("c", "2025-01-01T00:00:00Z");
        assert_eq!(choose(&[Some(&b), Some(&old)], "a", now), Choice::Take(1));
    }

    #[test]
    fn releasing_clears_holder_duration_and_times() {
        let now: Timestamp = "2025-01-01T00:10:00Z".parse().unwrap();
        let lease = released(acquired(None, &secret(), NAME, "host-a", now));
        let json = serde_json::to_value(&lease).unwrap();
        assert_eq!(json["spec"], serde_json::json!({}));
        assert!(held_by(
            &acquired(None, &secret(), NAME, "host-a", now),
            "host-a"
        ));
        assert!(!held_by(&lease, "host-a"));
    }
}
