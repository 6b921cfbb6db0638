//! The serial lock and the rollout's slot Leases (`docs/agent.md#serial-osc-reconciliation`,
//! `#slots`): Lease `kube-system/<secret name>` is gardener-node-agent's serial lock (gardener
//! `pkg/nodeagent/controller/operatingsystemconfig/serial.go`, so GNA and this agent serialise
//! each other) and the rollout's slot 0; slots `1..slots` are `<secret name>-<i>`
//! ([`slot_name`]).
//!
//! [`decide`], [`Scan`], [`acquired`] and [`released`] are pure; [`SerialLock`] does the API
//! calls and holds at most one slot at a time. A scan reads one Lease at a time and stops at
//! the first it may take (the one it holds first), so names are never made as a list.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client, Resource, ResourceExt};

use crate::agent::ports::cluster::NAMESPACE;
use crate::api::constants::MAX_ROLLOUT_BUDGET;

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

/// The Lease name of slot `index` of the lock `lock` (the OSC secret's name): `lock` itself
/// for slot 0 (GNA's serial lock), `<lock>-<index>` for the others.
pub fn slot_name(lock: &str, index: u32) -> String {
    if index == 0 {
        lock.to_string()
    } else {
        format!("{lock}-{index}")
    }
}

/// What a [`Scan`] ends with.
#[derive(Debug, Clone, PartialEq)]
pub enum Choice {
    /// Take (or renew) the Lease `name` (`lease`: as read; `None`: it does not exist yet).
    Take {
        /// The Lease's name.
        name: String,
        /// The Lease as read.
        lease: Option<Box<Lease>>,
    },
    /// All are held by others; look again after this long.
    Wait {
        /// The holders, in the order read.
        holders: Vec<String>,
        /// Until the next look: the soonest of the slots' [`Decision::Wait`] times.
        retry_in: Duration,
    },
}

/// Picks a slot among Leases read one at a time ([`Scan::see`]). A slot `identity` already
/// holds wins at once, so an agent never holds two and a restarted one finds its own again; a
/// free or expired slot wins at once unless the scan is `full`, which reads on (a later slot
/// may be ours) and takes the first free one at the end ([`Scan::finish`]). Pure.
#[derive(Debug)]
pub struct Scan<'a> {
    identity: &'a str,
    now: Timestamp,
    full: bool,
    first_free: Option<(String, Option<Lease>)>,
    holders: Vec<String>,
    retry_in: Duration,
}

impl<'a> Scan<'a> {
    /// A scan for `identity` at `now`; `full`: read every slot before taking a free one.
    pub fn new(identity: &'a str, now: Timestamp, full: bool) -> Self {
        Scan {
            identity,
            now,
            full,
            first_free: None,
            holders: Vec::new(),
            retry_in: POLL_INTERVAL,
        }
    }

    /// Looks at the Lease `name` as read (`None`: it does not exist); `Some`: take this
    /// slot now, read no further.
    pub fn see(&mut self, name: &str, lease: Option<Lease>) -> Option<Choice> {
        let take = |lease: Option<Lease>| Choice::Take {
            name: name.to_string(),
            lease: lease.map(Box::new),
        };
        if lease.as_ref().is_some_and(|l| held_by(l, self.identity)) {
            return Some(take(lease));
        }
        match decide(lease.as_ref(), self.identity, self.now) {
            Decision::Take if !self.full => return Some(take(lease)),
            Decision::Take => {
                if self.first_free.is_none() {
                    self.first_free = Some((name.to_string(), lease));
                }
            }
            Decision::Wait { holder, retry_in } => {
                self.holders.push(holder);
                self.retry_in = self.retry_in.min(retry_in);
            }
        }
        None
    }

    /// After the last slot: the first free one, else wait.
    pub fn finish(self) -> Choice {
        match self.first_free {
            Some((name, lease)) => Choice::Take {
                name,
                lease: lease.map(Box::new),
            },
            None => Choice::Wait {
                holders: self.holders,
                retry_in: self.retry_in,
            },
        }
    }
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
        self.acquire_slot(secret, 1).await
    }

    /// Takes one of the `slots` slot Leases of `secret` ([`slot_name`]), renewing the one it
    /// holds, or says who holds them: reads them one at a time ([`Scan`]; the held one first),
    /// then POSTs or PUTs the chosen one. A race lost to another node (409) is reported as busy
    /// with a short retry. A refused read (403) of any but slot 0 ends the scan there:
    /// Gardener's node-agent authorizer admits only the Lease named like the OSC secret, so
    /// where it is not extended the rollout's budget shrinks to the slots the agent may read
    /// (logged), instead of the agent failing every reconcile.
    pub async fn acquire_slot(
        &mut self,
        secret: &Secret,
        slots: u32,
    ) -> Result<Acquired, kube::Error> {
        let api = self.api();
        let lock = secret.name_any();
        let full = !self.looked;
        self.looked = true;
        let held = self.held_name();
        let mut scan = Scan::new(&self.identity, Timestamp::now(), full);
        let names = held.clone().into_iter().chain(
            (0..bounded(slots))
                .map(|index| slot_name(&lock, index))
                .filter(|name| Some(name) != held.as_ref()),
        );
        let mut chosen = None;
        for name in names {
            let lease = match api.get_opt(&name).await {
                Ok(lease) => lease,
                Err(kube::Error::Api(status)) if status.code == 403 && name != lock => {
                    tracing::warn!(lease = %name, "reading a rollout slot Lease is forbidden; using only the slots before it");
                    break;
                }
                Err(error) => return Err(error),
            };
            if let Some(choice) = scan.see(&name, lease) {
                chosen = Some(choice);
                break;
            }
        }
        let (name, existing) = match chosen.unwrap_or_else(|| scan.finish()) {
            Choice::Take { name, lease } => (name, lease.map(|lease| *lease)),
            Choice::Wait { holders, retry_in } => {
                self.held = None;
                return Ok(Acquired::Busy {
                    holder: holders.join(","),
                    retry_in,
                });
            }
        };
        let create = existing.is_none();
        let lease = acquired(existing, secret, &name, &self.identity, Timestamp::now());
        let pp = PostParams::default();
        let written = if create {
            api.create(&pp, &lease).await
        } else {
            api.replace(&name, &pp, &lease).await
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
    /// [`SerialLock::release_slot`]).
    pub async fn release(&mut self, secret_name: &str) -> Result<(), kube::Error> {
        self.release_slot(secret_name, 1).await
    }

    /// Releases whichever of the `slots` slot Leases of `lock` this agent holds; a no-op when
    /// it holds none. After a restart (nothing known yet) each is read once to find out (a
    /// refused read of any but slot 0 ends that, as in [`SerialLock::acquire_slot`]). A
    /// conflict re-reads once; a Lease that is gone or held by another is left alone.
    pub async fn release_slot(&mut self, lock: &str, slots: u32) -> Result<(), kube::Error> {
        let api = self.api();
        if let Some(lease) = self.held.take() {
            let name = lease.name_any();
            if held_by(&lease, &self.identity) {
                release_one(&api, &name, lease, &self.identity).await?;
            }
            return Ok(());
        }
        if self.looked {
            return Ok(());
        }
        self.looked = true;
        for index in 0..bounded(slots) {
            let name = slot_name(lock, index);
            let lease = match api.get_opt(&name).await {
                Ok(lease) => lease,
                Err(kube::Error::Api(status)) if status.code == 403 && index > 0 => break,
                Err(error) => return Err(error),
            };
            if let Some(lease) = lease.filter(|l| held_by(l, &self.identity)) {
                release_one(&api, &name, lease, &self.identity).await?;
            }
        }
        Ok(())
    }
}

/// `slots` within `1..=`[`MAX_ROLLOUT_BUDGET`]: however many slots a caller asks for, no more
/// Leases than that are ever read.
fn bounded(slots: u32) -> u32 {
    slots.clamp(1, MAX_ROLLOUT_BUDGET)
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

    /// Runs a scan over `leases` (slot `i` named `s<i>`): the chosen slot's name (or the
    /// wait) and how many were read.
    fn scan(
        leases: &[Option<&Lease>],
        full: bool,
        now: Timestamp,
    ) -> (Result<String, Choice>, usize) {
        let mut scan = Scan::new("a", now, full);
        for (index, lease) in leases.iter().enumerate() {
            if let Some(Choice::Take { name, .. }) = scan.see(&format!("s{index}"), lease.cloned())
            {
                return (Ok(name), index + 1);
            }
        }
        match scan.finish() {
            Choice::Take { name, .. } => (Ok(name), leases.len()),
            wait => (Err(wait), leases.len()),
        }
    }

    #[test]
    fn a_slot_of_our_own_wins_then_the_first_free_one_else_the_soonest_expiry() {
        let now: Timestamp = "2025-01-01T00:10:00Z".parse().unwrap();
        let busy = |holder: &str, renewed: &str| lease(Some(holder), Some(600), Some(renewed));
        let b = busy("b", "2025-01-01T00:09:00Z");
        let c = busy("c", "2025-01-01T00:00:03Z");
        let own = busy("a", "2025-01-01T00:09:00Z");
        let free = lease(None, None, None);
        let take = |name: &str, read: usize| (Ok(name.to_string()), read);
        // A full scan (first look of a process) reads every slot.
        assert_eq!(scan(&[None, None], true, now), take("s0", 2));
        assert_eq!(scan(&[Some(&b), None], true, now), take("s1", 2));
        assert_eq!(scan(&[Some(&b), Some(&free)], true, now), take("s1", 2));
        // Our own slot is renewed even when an earlier one is free.
        assert_eq!(scan(&[None, Some(&own)], true, now), take("s1", 2));
        assert_eq!(
            scan(&[Some(&b), Some(&c)], true, now),
            (
                Err(Choice::Wait {
                    holders: vec!["b".into(), "c".into()],
                    retry_in: Duration::from_secs(3)
                }),
                2
            )
        );
        // Expired slot of another holder: taken.
        let old = busy("c", "2025-01-01T00:00:00Z");
        assert_eq!(scan(&[Some(&b), Some(&old)], true, now), take("s1", 2));
        // Otherwise the scan stops at the first slot it may take.
        assert_eq!(scan(&[None, None, None], false, now), take("s0", 1));
        assert_eq!(
            scan(&[Some(&b), Some(&free), None], false, now),
            take("s1", 2)
        );
        assert_eq!(scan(&[Some(&own), None], false, now), take("s0", 1));
    }

    #[test]
    fn slot_zero_is_the_serial_lock_and_the_others_are_numbered() {
        assert_eq!(slot_name("gna-pool", 0), "gna-pool");
        assert_eq!(slot_name("gna-pool", 2), "gna-pool-2");
        assert_eq!(slot_name("gna-pool", u32::MAX), "gna-pool-4294967295");
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
