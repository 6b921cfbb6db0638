//! The serial lock and the rollout's slots (`docs/agent.md#serial-osc-reconciliation`,
//! `#slots`), all in the one Lease `kube-system/<secret name>` that Gardener's node-agent
//! authorizer lets a node agent read and update. Its `spec` is gardener-node-agent's serial
//! lock (gardener `pkg/nodeagent/controller/operatingsystemconfig/serial.go`, so GNA and this
//! agent serialise each other) and the rollout's slot 0; slot `i >= 1` is the annotation
//! [`slot_annotation`]`(i)` of the same Lease, a JSON [`SlotRecord`] with holder, duration,
//! acquire and renew time. Every write is a PUT of the Lease as read (its `resourceVersion`):
//! two writers never both win, a 409 re-reads and decides again. GNA's own writes are PUTs of
//! the Lease as read too, so they keep the annotations.
//!
//! [`slot`], [`decide`], [`choose`], [`taken`] and [`released`] are pure; [`SerialLock`] does
//! the API calls and holds at most one slot at a time.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::{Deserialize, Serialize};

use crate::agent::ports::cluster::NAMESPACE;
use crate::api::constants::MAX_ROLLOUT_BUDGET;

/// The OSC secret annotation that asks for serial reconciliation.
pub const ANNOTATION_SERIAL: &str = "reconciliation.osc.node-agent.gardener.cloud/serial";
/// `leaseDurationSeconds` of the lock, as GNA writes it, and of every slot.
pub const LOCK_DURATION_SECONDS: i32 = 600;
/// How often a lock held by another node is looked at again (at the latest).
pub const POLL_INTERVAL: Duration = Duration::from_secs(5);
/// The Lease annotation of slot `i >= 1` is this with `i` appended ([`slot_annotation`]).
pub const ANNOTATION_SLOT_PREFIX: &str = "node.extensions.gardener.cloud/rollout-slot-";
/// How often one take or release re-reads the Lease after a conflict before it gives up
/// (a take then reports the lock busy for [`CONFLICT_RETRY`]).
pub const MAX_WRITES: usize = 8;
/// Until the next try after a take lost [`MAX_WRITES`] races in a row.
pub const CONFLICT_RETRY: Duration = Duration::from_secs(1);

/// Whether `secret` asks for serial reconciliation (the annotation is exactly `"true"`).
pub fn is_serial(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|a| a.get(ANNOTATION_SERIAL))
        .is_some_and(|value| value == "true")
}

/// The Lease annotation that records slot `index` (`>= 1`; slot 0 is the Lease's `spec`).
pub fn slot_annotation(index: u32) -> String {
    format!("{ANNOTATION_SLOT_PREFIX}{index}")
}

/// The value of a slot annotation: the fields of a Lease `spec` that a slot needs, named as
/// there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlotRecord {
    /// The host name of the node that holds the slot.
    pub holder_identity: String,
    /// How long the slot lasts after `renewTime` ([`LOCK_DURATION_SECONDS`]).
    pub lease_duration_seconds: i32,
    /// When the holder took it.
    pub acquire_time: MicroTime,
    /// When the holder last wrote it.
    pub renew_time: MicroTime,
}

/// One slot as the Lease records it; the default is a free slot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Slot {
    /// The holder (empty: free).
    pub holder: String,
    /// `leaseDurationSeconds`.
    pub duration: Option<i32>,
    /// `acquireTime`.
    pub acquired: Option<Timestamp>,
    /// `renewTime`.
    pub renewed: Option<Timestamp>,
}

/// Slot `index` of `lease`: slot 0 from the `spec` (GNA's lock), the others from their
/// annotation. A missing or unreadable annotation is a free slot. Pure.
pub fn slot(lease: &Lease, index: u32) -> Slot {
    if index == 0 {
        let Some(spec) = lease.spec.as_ref() else {
            return Slot::default();
        };
        return Slot {
            holder: spec.holder_identity.clone().unwrap_or_default(),
            duration: spec.lease_duration_seconds,
            acquired: spec.acquire_time.as_ref().map(|t| t.0),
            renewed: spec.renew_time.as_ref().map(|t| t.0),
        };
    }
    lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(&slot_annotation(index)))
        .and_then(|value| serde_json::from_str::<SlotRecord>(value).ok())
        .map(|record| Slot {
            holder: record.holder_identity,
            duration: Some(record.lease_duration_seconds),
            acquired: Some(record.acquire_time.0),
            renewed: Some(record.renew_time.0),
        })
        .unwrap_or_default()
}

/// Every slot of `lease` with a holder, as `(index, holder)`, in slot order (slots up to
/// [`MAX_ROLLOUT_BUDGET`]; expired ones included). Pure.
pub fn holders(lease: &Lease) -> Vec<(u32, String)> {
    (0..MAX_ROLLOUT_BUDGET)
        .map(|index| (index, slot(lease, index).holder))
        .filter(|(_, holder)| !holder.is_empty())
        .collect()
}

/// The slot `identity` holds in `lease`, if any (the lowest, should there be more). Pure.
pub fn own_slot(lease: &Lease, identity: &str) -> Option<u32> {
    (0..MAX_ROLLOUT_BUDGET).find(|&index| slot(lease, index).holder == identity)
}

/// What to do with one slot as it is now.
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

/// Whether `identity` may take `slot` at `now`: free, its own, without a renew time or
/// a negative duration (as GNA's `renewedInTime`), or expired (`renewTime +
/// leaseDurationSeconds` passed). Pure.
pub fn decide(slot: &Slot, identity: &str, now: Timestamp) -> Decision {
    if slot.holder.is_empty() || slot.holder == identity {
        return Decision::Take;
    }
    let duration = slot.duration.unwrap_or(0);
    let Some(renewed) = slot.renewed else {
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
        holder: slot.holder.clone(),
        retry_in: left.min(POLL_INTERVAL).max(Duration::from_millis(500)),
    }
}

/// Which slot `identity` takes among the first `slots` of `lease` (`None`: the Lease does
/// not exist yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// Take (or renew) slot `index`.
    Take(u32),
    /// All are held by others; look again after this long.
    Wait {
        /// The holders, in slot order.
        holders: Vec<String>,
        /// Until the next look: the soonest of the slots' [`Decision::Wait`] times.
        retry_in: Duration,
    },
}

/// What an agent takes, or waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Awaited {
    /// The serial lock (slot 0; serial reconciliation).
    SerialLock,
    /// One of this many rollout slots (the disruptive rollout).
    Slots(u32),
}

impl Awaited {
    /// How many slots may be taken.
    pub fn slots(self) -> u32 {
        match self {
            Awaited::SerialLock => 1,
            Awaited::Slots(slots) => slots,
        }
    }
}

/// The slot `identity` takes for `awaited`: a rollout slot it holds, wherever it is (so an
/// agent never holds two, and a restarted one finds its own first, also beyond a budget that
/// shrank), else the first of the awaited slots that is free or expired, else wait. The serial
/// lock is slot 0 only: a rollout slot the agent still holds (its pool went from the rollout to
/// serial reconciliation) does not stand for it, and is cleared when slot 0 is taken
/// ([`taken`]). Pure.
pub fn choose(lease: Option<&Lease>, identity: &str, awaited: Awaited, now: Timestamp) -> Choice {
    let Some(lease) = lease else {
        return Choice::Take(0);
    };
    let own =
        own_slot(lease, identity).filter(|own| *own == 0 || matches!(awaited, Awaited::Slots(_)));
    if let Some(own) = own {
        return Choice::Take(own);
    }
    let mut holders = Vec::new();
    let mut retry = POLL_INTERVAL;
    for index in 0..bounded(awaited.slots()) {
        match decide(&slot(lease, index), identity, now) {
            Decision::Take => return Choice::Take(index),
            Decision::Wait { holder, retry_in } => {
                holders.push(holder);
                retry = retry.min(retry_in);
            }
        }
    }
    Choice::Wait {
        holders,
        retry_in: retry,
    }
}

/// The Lease `name` after `identity` took (or renewed) slot `index` at `now`: `existing`,
/// or a new Lease owned by the OSC `secret`. Any other slot `identity` held is cleared, so
/// it never holds two; every other slot and the rest of the Lease stay as read. Pure.
pub fn taken(
    existing: Option<Lease>,
    secret: &Secret,
    name: &str,
    index: u32,
    identity: &str,
    now: Timestamp,
) -> Lease {
    let mut lease = existing.unwrap_or_else(|| new_lease(secret, name));
    adopt(&mut lease, secret);
    let before = slot(&lease, index);
    let mut lease = clear_own(lease, identity, Some(index));
    let acquired = if before.holder == identity {
        before.acquired.unwrap_or(now)
    } else {
        now
    };
    if index == 0 {
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(identity) {
            spec.holder_identity = Some(identity.to_string());
            spec.lease_duration_seconds = Some(LOCK_DURATION_SECONDS);
            spec.acquire_time = Some(MicroTime(acquired));
        }
        spec.renew_time = Some(MicroTime(now));
        return lease;
    }
    let record = SlotRecord {
        holder_identity: identity.to_string(),
        lease_duration_seconds: LOCK_DURATION_SECONDS,
        acquire_time: MicroTime(acquired),
        renew_time: MicroTime(now),
    };
    if let Ok(value) = serde_json::to_string(&record) {
        lease
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(slot_annotation(index), value);
    }
    lease
}

/// Makes `secret` the owner of a Lease without owners — one the operator created to carry
/// the seed's steering before any agent took a slot ([`crate::agent::rollout::steering`]) —
/// so that it goes with the Secret as the Leases the agents create do. Without
/// `blockOwnerDeletion`: setting that on an existing object needs more than the node-agent
/// authorizer grants where owner-reference permissions are enforced.
fn adopt(lease: &mut Lease, secret: &Secret) {
    if lease
        .metadata
        .owner_references
        .as_ref()
        .is_some_and(|owners| !owners.is_empty())
    {
        return;
    }
    lease.metadata.owner_references = owner_of(secret, None);
}

/// The owner reference to the OSC `secret` (controller), when its uid is known.
fn owner_of(secret: &Secret, block_owner_deletion: Option<bool>) -> Option<Vec<OwnerReference>> {
    secret.metadata.uid.clone().map(|uid| {
        vec![OwnerReference {
            api_version: Secret::api_version(&()).to_string(),
            kind: Secret::kind(&()).to_string(),
            name: secret.name_any(),
            uid,
            controller: Some(true),
            block_owner_deletion,
        }]
    })
}

/// A new Lease `name` in kube-system, owned by `secret` (controller, `blockOwnerDeletion`,
/// as GNA creates its lock).
fn new_lease(secret: &Secret, name: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(NAMESPACE.to_string()),
            owner_references: owner_of(secret, Some(true)),
            ..ObjectMeta::default()
        },
        spec: None,
    }
}

/// `lease` after `identity` released whatever slot it held: slot 0 as GNA releases it
/// (holder, duration, acquire and renew time cleared), another by removing its annotation.
/// Slots of other holders stay. Pure.
pub fn released(lease: Lease, identity: &str) -> Lease {
    clear_own(lease, identity, None)
}

/// Clears every slot `identity` holds except `keep`.
fn clear_own(mut lease: Lease, identity: &str, keep: Option<u32>) -> Lease {
    for index in (0..MAX_ROLLOUT_BUDGET).filter(|&i| Some(i) != keep) {
        if slot(&lease, index).holder != identity {
            continue;
        }
        if index == 0 {
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            spec.holder_identity = None;
            spec.lease_duration_seconds = None;
            spec.acquire_time = None;
            spec.renew_time = None;
        } else if let Some(annotations) = lease.metadata.annotations.as_mut() {
            annotations.remove(&slot_annotation(index));
        }
    }
    lease
}

/// `slots` within `1..=`[`MAX_ROLLOUT_BUDGET`].
fn bounded(slots: u32) -> u32 {
    slots.clamp(1, MAX_ROLLOUT_BUDGET)
}

/// Outcome of [`SerialLock::acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// We hold it: apply.
    Held,
    /// Another node does (or won every race): try again after `retry_in`.
    Busy {
        /// The holders, as far as known (comma-separated).
        holder: String,
        /// Until the next try.
        retry_in: Duration,
    },
}

/// The Lease as this agent last wrote it, and which slot of it is ours.
struct Held {
    lease: Lease,
    slot: u32,
}

/// The serial lock (or a rollout slot) of one agent. Knows the Lease as its last write
/// returned it, so a release after an apply is a single request unless another node wrote
/// the Lease since.
pub struct SerialLock {
    client: Client,
    identity: String,
    /// What we last wrote while holding a slot; `None`: not held (or unknown).
    held: Option<Held>,
    /// Whether this process has looked at the lock yet (a restart may find a slot still ours).
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

    /// Whether this agent holds a slot as far as it knows.
    pub fn holds(&self) -> bool {
        self.held.is_some()
    }

    /// The slot this agent holds, as far as it knows (0: GNA's serial lock).
    pub fn held_slot(&self) -> Option<u32> {
        self.held.as_ref().map(|held| held.slot)
    }

    /// Whether this agent's last write of the slot it holds is younger than `within`.
    pub fn renewed_within(&self, within: Duration) -> bool {
        let within = SignedDuration::try_from(within).unwrap_or(SignedDuration::MAX);
        self.held
            .as_ref()
            .and_then(|held| slot(&held.lease, held.slot).renewed)
            .is_some_and(|renewed| Timestamp::now().duration_since(renewed) < within)
    }

    fn api(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), NAMESPACE)
    }

    /// Takes the serial lock for `secret` (slot 0 of the Lease named like it).
    pub async fn acquire(&mut self, secret: &Secret) -> Result<Acquired, kube::Error> {
        self.take(secret, Awaited::SerialLock).await
    }

    /// Takes one of the first `slots` slots of `secret`'s Lease, or renews the one this agent
    /// holds ([`choose`]), or says who holds them: reads the Lease, writes it with the slot
    /// taken ([`taken`]; a POST when it does not exist, else a PUT with the read
    /// `resourceVersion`). A write that lost a race (409) reads again and decides again, up to
    /// [`MAX_WRITES`] times; then the lock counts as busy for [`CONFLICT_RETRY`].
    pub async fn acquire_slot(
        &mut self,
        secret: &Secret,
        slots: u32,
    ) -> Result<Acquired, kube::Error> {
        self.take(secret, Awaited::Slots(slots)).await
    }

    /// [`SerialLock::acquire`] and [`SerialLock::acquire_slot`]. What this agent holds is known
    /// after each call: a slot it wrote, none (all held by others), or unknown (a write that
    /// kept conflicting or failed: the next release reads the Lease again).
    async fn take(&mut self, secret: &Secret, awaited: Awaited) -> Result<Acquired, kube::Error> {
        let api = self.api();
        let name = secret.name_any();
        self.looked = true;
        for _ in 0..MAX_WRITES {
            let lease = api.get_opt(&name).await?;
            let index = match choose(lease.as_ref(), &self.identity, awaited, Timestamp::now()) {
                Choice::Take(index) => index,
                Choice::Wait { holders, retry_in } => {
                    // A rollout slot this agent still holds while it waits for the serial lock
                    // stays its own: the next release reads the Lease and frees it.
                    match lease.as_ref().and_then(|l| own_slot(l, &self.identity)) {
                        Some(_) => self.forget(),
                        None => self.held = None,
                    }
                    return Ok(Acquired::Busy {
                        holder: holders.join(","),
                        retry_in,
                    });
                }
            };
            let create = lease.is_none();
            let lease = taken(
                lease,
                secret,
                &name,
                index,
                &self.identity,
                Timestamp::now(),
            );
            let pp = PostParams::default();
            let written = if create {
                api.create(&pp, &lease).await
            } else {
                api.replace(&name, &pp, &lease).await
            };
            match written {
                Ok(lease) => {
                    self.held = Some(Held { lease, slot: index });
                    return Ok(Acquired::Held);
                }
                Err(error) if is_conflict(&error) => {
                    tracing::debug!(lease = %name, slot = index, "another node wrote the lock first; reading it again");
                }
                Err(error) => {
                    self.forget();
                    return Err(error);
                }
            }
        }
        self.forget();
        Ok(Acquired::Busy {
            holder: String::new(),
            retry_in: CONFLICT_RETRY,
        })
    }

    /// What this agent holds is not known: a slot it held may still be written as its own
    /// (a renewal that kept conflicting, a write whose answer was lost), so the next release
    /// reads the Lease instead of taking "none" for granted.
    fn forget(&mut self) {
        self.held = None;
        self.looked = false;
    }

    /// Releases whichever slot of the Lease `lock` this agent holds ([`released`]); a no-op
    /// when it holds none. After a restart (nothing known yet) the Lease is read once to find
    /// out. The write is a PUT of the Lease as last known; a conflict reads it again and
    /// releases what is still ours (up to [`MAX_WRITES`] writes, then the last conflict is the
    /// error); a Lease that is gone or no longer ours is left alone.
    pub async fn release(&mut self, lock: &str) -> Result<(), kube::Error> {
        let api = self.api();
        let current = match self.held.take() {
            Some(held) => Some(held.lease),
            None if self.looked => return Ok(()),
            None => api.get_opt(lock).await?,
        };
        self.looked = true;
        let result = release_own(&api, lock, current, &self.identity).await;
        if result.is_err() {
            // Not known to be released: the next release reads the Lease again.
            self.looked = false;
        }
        result
    }
}

/// PUTs `current` (the Lease `lock` as last known) with `identity`'s slot released, while
/// it holds one; a conflict reads it again ([`SerialLock::release`]).
async fn release_own(
    api: &Api<Lease>,
    lock: &str,
    mut current: Option<Lease>,
    identity: &str,
) -> Result<(), kube::Error> {
    let pp = PostParams::default();
    let mut writes = 1;
    loop {
        let Some(lease) = current.take() else {
            return Ok(());
        };
        if own_slot(&lease, identity).is_none() {
            return Ok(());
        }
        match api.replace(lock, &pp, &released(lease, identity)).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(error) if is_conflict(&error) && writes < MAX_WRITES => {
                writes += 1;
                current = api.get_opt(lock).await?;
            }
            Err(error) => return Err(error),
        }
    }
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAME: &str = "gardener-node-agent-pool-a";

    fn at(t: &str) -> Timestamp {
        t.parse().unwrap()
    }

    fn secret() -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(NAME.into()),
                namespace: Some("kube-system".into()),
                uid: Some("uid-s".into()),
                annotations: Some([(ANNOTATION_SERIAL.to_string(), "true".to_string())].into()),
                ..ObjectMeta::default()
            },
            ..Secret::default()
        }
    }

    /// A Lease whose slots are `(index, holder, renewed)`, 600 s each, as this agent writes
    /// them (`taken` one after the other), plus what every Lease of the API server has.
    fn lease(slots: &[(u32, &str, &str)]) -> Lease {
        let mut lease = Lease {
            metadata: ObjectMeta {
                name: Some(NAME.into()),
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec::default()),
        };
        for (index, holder, renewed) in slots {
            lease = taken(Some(lease), &secret(), NAME, *index, holder, at(renewed));
        }
        lease
    }

    fn slot0(holder: Option<&str>, duration: Option<i32>, renewed: Option<&str>) -> Slot {
        Slot {
            holder: holder.unwrap_or_default().to_string(),
            duration,
            acquired: None,
            renewed: renewed.map(at),
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
    fn free_expired_or_own_slots_are_taken_and_others_waited_for() {
        let now = at("2025-01-01T00:10:00Z");
        assert_eq!(decide(&Slot::default(), "a", now), Decision::Take);
        let own = slot0(Some("a"), Some(600), Some("2025-01-01T00:09:00Z"));
        assert_eq!(decide(&own, "a", now), Decision::Take);
        // Expired: renewed 600 s ago exactly.
        let expired = slot0(Some("b"), Some(600), Some("2025-01-01T00:00:00Z"));
        assert_eq!(decide(&expired, "a", now), Decision::Take);
        // Held with time left: look again after the poll interval.
        let held = slot0(Some("b"), Some(600), Some("2025-01-01T00:09:00Z"));
        assert_eq!(
            decide(&held, "a", now),
            Decision::Wait {
                holder: "b".into(),
                retry_in: POLL_INTERVAL
            }
        );
        // Expiring sooner than the poll interval: look again at expiry.
        let expiring = slot0(Some("b"), Some(600), Some("2025-01-01T00:00:02Z"));
        assert_eq!(
            decide(&expiring, "a", now),
            Decision::Wait {
                holder: "b".into(),
                retry_in: Duration::from_secs(2)
            }
        );
        // No renew time or a negative duration: nothing to wait for (GNA's renewedInTime).
        assert_eq!(
            decide(&slot0(Some("b"), Some(600), None), "a", now),
            Decision::Take
        );
        let negative = slot0(Some("b"), Some(-1), Some("2025-01-01T00:09:00Z"));
        assert_eq!(decide(&negative, "a", now), Decision::Take);
    }

    #[test]
    fn taking_slot_zero_sets_the_spec_as_gna_and_the_secret_as_owner() {
        let now = at("2025-01-01T00:10:00.123456Z");
        let lease = taken(None, &secret(), NAME, 0, "host-a", now);
        assert_eq!(lease.metadata.name.as_deref(), Some(NAME));
        assert_eq!(lease.metadata.namespace.as_deref(), Some("kube-system"));
        assert_eq!(lease.metadata.annotations, None);
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

        // Taking it again (a renewal, a restart): only the renew time moves.
        let later = now + SignedDuration::from_secs(30);
        let again = taken(Some(lease.clone()), &secret(), NAME, 0, "host-a", later);
        let spec = again.spec.as_ref().unwrap();
        assert_eq!(spec.acquire_time.as_ref().map(|t| t.0), Some(now));
        assert_eq!(spec.renew_time.as_ref().map(|t| t.0), Some(later));

        // Taking over an expired lock of another holder: a new acquire time.
        let taken_over = taken(Some(lease), &secret(), NAME, 0, "host-b", later);
        let spec = taken_over.spec.as_ref().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("host-b"));
        assert_eq!(spec.acquire_time.as_ref().map(|t| t.0), Some(later));
    }

    #[test]
    fn a_lease_the_operator_created_is_adopted_by_the_secret_without_blocking_deletion() {
        let now = at("2025-01-01T00:10:00Z");
        let mut steered = lease(&[]);
        steered.metadata.owner_references = None;
        let lease = taken(Some(steered), &secret(), NAME, 1, "host-a", now);
        let owner = &lease.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (
                owner.uid.as_str(),
                owner.controller,
                owner.block_owner_deletion
            ),
            ("uid-s", Some(true), None)
        );
        let mut foreign = lease.clone();
        foreign.metadata.owner_references.as_mut().unwrap()[0].uid = "other".into();
        let kept = taken(Some(foreign), &secret(), NAME, 1, "host-a", now);
        assert_eq!(kept.metadata.owner_references.unwrap()[0].uid, "other");
    }

    #[test]
    fn a_slot_above_zero_is_an_annotation_and_leaves_the_spec_and_the_rest_alone() {
        let now = at("2025-01-01T00:10:00.5Z");
        let mut gna = lease(&[(0, "gna-host", "2025-01-01T00:09:00Z")]);
        gna.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert("other".into(), "kept".into());
        let lease = taken(Some(gna.clone()), &secret(), NAME, 2, "host-b", now);
        assert_eq!(lease.spec, gna.spec, "GNA's holder is untouched");
        assert_eq!(lease.metadata.resource_version.as_deref(), Some("7"));
        let annotations = lease.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations["other"], "kept");
        let value: serde_json::Value =
            serde_json::from_str(&annotations["node.extensions.gardener.cloud/rollout-slot-2"])
                .unwrap();
        assert_eq!(
            value,
            serde_json::json!({
                "holderIdentity": "host-b",
                "leaseDurationSeconds": 600,
                "acquireTime": "2025-01-01T00:10:00.500000Z",
                "renewTime": "2025-01-01T00:10:00.500000Z",
            })
        );
        assert_eq!(
            holders(&lease),
            [(0, "gna-host".to_string()), (2, "host-b".to_string())]
        );
        // A renewal keeps the acquire time.
        let later = now + SignedDuration::from_secs(60);
        let renewed = slot(&taken(Some(lease), &secret(), NAME, 2, "host-b", later), 2);
        assert_eq!(
            (renewed.acquired, renewed.renewed, renewed.duration),
            (Some(now), Some(later), Some(600))
        );
    }

    #[test]
    fn an_unreadable_slot_annotation_is_a_free_slot() {
        let mut lease = lease(&[]);
        lease.metadata.annotations = Some(
            [(slot_annotation(1), "host-x".to_string())]
                .into_iter()
                .collect(),
        );
        assert_eq!(slot(&lease, 1), Slot::default());
        let now = at("2025-01-01T00:10:00Z");
        assert_eq!(
            choose(Some(&lease), "a", Awaited::Slots(2), now),
            Choice::Take(0)
        );
        let lease = taken(Some(lease), &secret(), NAME, 0, "b", now);
        assert_eq!(
            choose(Some(&lease), "a", Awaited::Slots(2), now),
            Choice::Take(1)
        );
    }

    #[test]
    fn the_own_slot_wins_then_the_first_free_or_expired_one_else_the_soonest_expiry() {
        let now = at("2025-01-01T00:10:00Z");
        let recent = "2025-01-01T00:09:00Z";
        assert_eq!(choose(None, "a", Awaited::Slots(3), now), Choice::Take(0));
        assert_eq!(
            choose(Some(&lease(&[])), "a", Awaited::Slots(3), now),
            Choice::Take(0)
        );
        let b0 = lease(&[(0, "b", recent)]);
        assert_eq!(
            choose(Some(&b0), "a", Awaited::Slots(3), now),
            Choice::Take(1)
        );
        // Budget 1 (serial mode): slot 0 only.
        assert_eq!(
            choose(Some(&b0), "a", Awaited::Slots(1), now),
            Choice::Wait {
                holders: vec!["b".into()],
                retry_in: POLL_INTERVAL
            }
        );
        // A gap left by a release is filled first.
        let gap = lease(&[(0, "b", recent), (2, "c", recent)]);
        assert_eq!(
            choose(Some(&gap), "a", Awaited::Slots(3), now),
            Choice::Take(1)
        );
        // Our own slot, even with an earlier one free, and even beyond today's budget.
        let own = lease(&[(2, "a", recent)]);
        assert_eq!(
            choose(Some(&own), "a", Awaited::Slots(3), now),
            Choice::Take(2)
        );
        assert_eq!(
            choose(Some(&own), "a", Awaited::Slots(1), now),
            Choice::Take(2)
        );
        // The serial lock is slot 0 only: a rollout slot held from before does not stand for
        // it (and taking slot 0 clears it).
        assert_eq!(
            choose(Some(&own), "a", Awaited::SerialLock, now),
            Choice::Take(0)
        );
        let serial_busy = lease(&[(0, "b", recent), (2, "a", recent)]);
        assert!(matches!(
            choose(Some(&serial_busy), "a", Awaited::SerialLock, now),
            Choice::Wait { .. }
        ));
        let taken_serially = taken(Some(own.clone()), &Secret::default(), "l", 0, "a", now);
        assert_eq!(holders(&taken_serially), [(0, "a".to_string())]);
        // All held: the holders, and the soonest expiry if within the poll interval.
        let full = lease(&[(0, "b", recent), (1, "c", "2025-01-01T00:00:03Z")]);
        assert_eq!(
            choose(Some(&full), "a", Awaited::Slots(2), now),
            Choice::Wait {
                holders: vec!["b".into(), "c".into()],
                retry_in: Duration::from_secs(3)
            }
        );
        // An expired slot is taken over.
        let stale = lease(&[(0, "b", recent), (1, "c", "2025-01-01T00:00:00Z")]);
        assert_eq!(
            choose(Some(&stale), "a", Awaited::Slots(2), now),
            Choice::Take(1)
        );
        // However large the budget asked for, at most the cap.
        let crowded: Vec<(u32, String)> = (0..MAX_ROLLOUT_BUDGET)
            .map(|i| (i, format!("h{i}")))
            .collect();
        let crowded = lease(
            &crowded
                .iter()
                .map(|(i, h)| (*i, h.as_str(), recent))
                .collect::<Vec<_>>(),
        );
        assert!(matches!(
            choose(Some(&crowded), "a", Awaited::Slots(u32::MAX), now),
            Choice::Wait { holders, .. } if holders.len() == 32
        ));
    }

    #[test]
    fn taking_a_slot_clears_any_other_the_agent_held() {
        let now = at("2025-01-01T00:10:00Z");
        let both = lease(&[(0, "a", "2025-01-01T00:09:00Z")]);
        // Written by hand (or a bug elsewhere): `a` in slot 0 and slot 3.
        let both = {
            let mut l = both;
            let record = taken(Some(lease(&[])), &secret(), NAME, 3, "a", now);
            l.metadata.annotations = record.metadata.annotations;
            l
        };
        assert_eq!(own_slot(&both, "a"), Some(0));
        let one = taken(Some(both), &secret(), NAME, 0, "a", now);
        assert_eq!(holders(&one), [(0, "a".to_string())]);
    }

    #[test]
    fn releasing_clears_only_the_own_slot_as_gna_releases_slot_zero() {
        let recent = "2025-01-01T00:09:00Z";
        let both = lease(&[(0, "a", recent), (1, "b", recent)]);
        let a_gone = released(both.clone(), "a");
        assert_eq!(
            serde_json::to_value(&a_gone).unwrap()["spec"],
            serde_json::json!({})
        );
        assert_eq!(holders(&a_gone), [(1, "b".to_string())]);
        let b_gone = released(both.clone(), "b");
        assert_eq!(b_gone.spec, both.spec);
        assert_eq!(holders(&b_gone), [(0, "a".to_string())]);
        assert_eq!(b_gone.metadata.annotations, Some(BTreeMap::new()));
        // Nothing of ours: unchanged.
        assert_eq!(released(both.clone(), "c"), both);
    }

    #[test]
    fn slot_annotations_are_numbered() {
        assert_eq!(
            slot_annotation(1),
            "node.extensions.gardener.cloud/rollout-slot-1"
        );
        assert_eq!(
            slot_annotation(31),
            "node.extensions.gardener.cloud/rollout-slot-31"
        );
    }
}
