//! In-place update pools (GEP-31), the Worker's part (pure).
//!
//! - [`update_hash`]: the hash of what an in-place pool's nodes must be updated to, as
//!   Gardener's `CalculateWorkerPoolHashForInPlaceUpdate` (`pkg/utils/gardener`, called by the
//!   generic actuator's `updateWorkerStatusInPlaceUpdateWorkerPoolHash`): Kubernetes
//!   major.minor, machine image version, the pool's last initiation time of the certificate
//!   authorities and service account key rotations, and the kubelet settings that need a
//!   node update (`kubeReserved`, `evictionHard`, `cpuManagerPolicy`; gardener v1.149.3's
//!   `KubeletConfig` has no `systemReserved`, so a pool's stray one is not hashed either);
//!   each part is SHA-256 hex, the concatenation is hashed again and cut to 16 characters.
//!   gardenlet computes the same value from the Shoot and compares it with ours
//!   (`SetInPlaceUpdatePendingWorkers`), so the construction is followed byte for byte.
//! - [`class_hash`]: which machine-class hash a pool gets ([`super::hash`]), in-place or not.
//! - [`status_map`]: `status.inPlaceUpdates.workerPoolToHashMap` as
//!   `updateWorkerStatusInPlaceUpdateWorkerPoolHash` writes it: every in-place pool with its
//!   hash, except `ManualInPlaceUpdate` pools with a deployment whose machines are not all
//!   updated yet (they keep their old entry); entries of pools that are no longer in-place
//!   pools are dropped.
//! - [`manual_rollout`]: the counts `waitUntilWantedMachineDeploymentsAvailable` takes for
//!   `ManualInPlaceUpdate` deployments: machines of old machine sets that the user has not
//!   selected yet are neither unavailable nor outdated; only machines that carry MCM's
//!   `InPlaceUpdate` condition with another reason than `CandidateForUpdate` are waited for.
//!
//! Timestamps enter the hash as Go prints a `metav1.Time` read from JSON in a process whose
//! local zone is UTC (gardenlet's image): `2006-01-02 15:04:05 +0000 UTC`.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Timelike, Utc};
use serde_json::Value;

use super::machine_sets::{belongs_to, set_class};
use crate::api::cluster::{ShootCredentialsView, ShootRotationView};
use crate::api::constants::{
    CONDITION_IN_PLACE_UPDATE, LABEL_WORKER_POOL, REASON_CANDIDATE_FOR_UPDATE,
};
use crate::api::machine::{
    Machine, MachineDeployment, MachineSet, ORCHESTRATION_MANUAL, STRATEGY_IN_PLACE_UPDATE,
};
use crate::api::quantity::Quantity;
use crate::api::worker::{MachineUpdateStrategy, WorkerPool};

/// Length of the in-place pool hash.
pub const HASH_LENGTH: usize = 16;

/// Whether `strategy` updates machines in place.
pub fn is_in_place(strategy: Option<MachineUpdateStrategy>) -> bool {
    matches!(
        strategy,
        Some(MachineUpdateStrategy::AutoInPlaceUpdate | MachineUpdateStrategy::ManualInPlaceUpdate)
    )
}

/// Why an in-place pool hash cannot be computed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum InPlaceHashError {
    /// `kubernetesVersion` is missing or no version.
    #[error(
        "pool {pool}: kubernetesVersion {version:?} is not a version (needed for the in-place pool hash)"
    )]
    KubernetesVersion {
        /// Pool.
        pool: String,
        /// The value.
        version: String,
    },
    /// A kubelet reservation is not a quantity.
    #[error("pool {pool}: kubelet {field} {value:?} is not a quantity")]
    Quantity {
        /// Pool.
        pool: String,
        /// The field, e.g. `kubeReserved.cpu`.
        field: String,
        /// The value.
        value: String,
    },
}

/// `major.minor` of a version as Masterminds semver reads it (`v` prefix allowed, missing
/// parts are 0).
fn major_minor(version: &str) -> Option<String> {
    let version = version.trim().strip_prefix('v').unwrap_or(version.trim());
    let core = version.split(['-', '+']).next()?;
    let mut parts = core.split('.');
    let major: u64 = parts.next()?.parse().ok()?;
    let minor: u64 = match parts.next() {
        Some(minor) => minor.parse().ok()?,
        None => 0,
    };
    Some(format!("{major}.{minor}"))
}

/// A time as Go's `time.Time.String()` prints it in UTC.
pub fn go_time_string(time: DateTime<Utc>) -> String {
    let mut text = time.format("%Y-%m-%d %H:%M:%S").to_string();
    let nanos = time.nanosecond() % 1_000_000_000;
    if nanos > 0 {
        let fraction = format!("{nanos:09}");
        text.push('.');
        text.push_str(fraction.trim_end_matches('0'));
    }
    text.push_str(" +0000 UTC");
    text
}

/// The rotation's initiation time for `pool`: its own pending rollout entry, else the global
/// one (`LastInitiationTimeForWorkerPool`).
fn initiation_for(pool: &str, rotation: &ShootRotationView) -> Option<DateTime<Utc>> {
    match rotation
        .pending_workers_rollouts
        .iter()
        .find(|r| r.name == pool)
    {
        Some(pending) => pending.last_initiation_time,
        None => rotation.last_initiation_time,
    }
}

/// The printed `kubeReserved` (`cpu-memory-pid-ephemeralStorage`, `<nil>` for a missing one),
/// `None` when it is not set. gardener v1.149.3's `KubeletConfig` has no `systemReserved` any
/// more (the field is tombstoned), so gardenlet never sees one in a pool and neither does the
/// hash.
fn kube_reserved(pool: &str, kubelet: &Value) -> Result<Option<String>, InPlaceHashError> {
    let Some(reserved) = kubelet.get("kubeReserved").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let mut printed = Vec::new();
    for key in ["cpu", "memory", "pid", "ephemeralStorage"] {
        let quantity = match reserved.get(key).filter(|v| !v.is_null()) {
            None => None,
            Some(value) => {
                let text = match value {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                Some(
                    Quantity::parse(&text).ok_or_else(|| InPlaceHashError::Quantity {
                        pool: pool.to_string(),
                        field: format!("kubeReserved.{key}"),
                        value: text,
                    })?,
                )
            }
        };
        printed.push(quantity.map_or_else(|| "<nil>".to_string(), |q| q.canonical()));
    }
    Ok(Some(printed.join("-")))
}

/// The kubelet part of the hash (`CalculateDataStringForKubeletConfiguration`).
fn kubelet_data(pool: &str, kubelet: Option<&Value>) -> Result<Vec<String>, InPlaceHashError> {
    let Some(kubelet) = kubelet.filter(|k| k.is_object()) else {
        return Ok(Vec::new());
    };
    let mut data = Vec::new();
    if let Some(reserved) = kube_reserved(pool, kubelet)? {
        data.push(reserved);
    }
    if let Some(eviction) = kubelet.get("evictionHard").filter(|v| v.is_object()) {
        let field = |key: &str| {
            eviction
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        data.push(format!(
            "{}-{}-{}-{}-{}",
            field("imageFSAvailable"),
            field("imageFSInodesFree"),
            field("memoryAvailable"),
            field("nodeFSAvailable"),
            field("nodeFSInodesFree"),
        ));
    }
    if let Some(policy) = kubelet.get("cpuManagerPolicy").and_then(Value::as_str) {
        data.push(policy.to_string());
    }
    Ok(data)
}

/// The machine-class hash of `pool` ([`super::hash`]): an in-place pool's has its
/// [`update_hash`] right after the node-agent secret name ([`super::hash::class_hash_in_place`]),
/// any other pool's is [`super::hash::class_hash`].
pub fn class_hash(
    pool: &WorkerPool,
    node_agent_secret_name: &str,
    extra: &[String],
    credentials: Option<&ShootCredentialsView>,
) -> Result<String, InPlaceHashError> {
    if !is_in_place(pool.update_strategy) {
        return Ok(super::hash::class_hash(node_agent_secret_name, extra));
    }
    let update = update_hash(pool, credentials)?;
    Ok(super::hash::class_hash_in_place(
        node_agent_secret_name,
        &update,
        extra,
    ))
}

/// The in-place hash of `pool` (see the module docs).
pub fn update_hash(
    pool: &WorkerPool,
    credentials: Option<&ShootCredentialsView>,
) -> Result<String, InPlaceHashError> {
    let version = pool.kubernetes_version.clone().unwrap_or_default();
    let major_minor = major_minor(&version).ok_or_else(|| InPlaceHashError::KubernetesVersion {
        pool: pool.name.clone(),
        version,
    })?;
    let mut data = vec![
        major_minor,
        pool.machine_image
            .as_ref()
            .map(|i| i.version.clone())
            .unwrap_or_default(),
    ];
    if let Some(rotation) = credentials.and_then(|c| c.rotation.as_ref()) {
        for one in [
            rotation.certificate_authorities.as_ref(),
            rotation.service_account_key.as_ref(),
        ]
        .into_iter()
        .flatten()
        {
            if let Some(time) = initiation_for(&pool.name, one) {
                data.push(go_time_string(time));
            }
        }
    }
    data.extend(kubelet_data(&pool.name, pool.kubelet_config.as_ref())?);
    Ok(super::hash::hash_of_hashes(
        data.iter().map(String::as_str),
        HASH_LENGTH,
    ))
}

/// One pool as [`status_map`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolHash<'a> {
    /// Pool name.
    pub name: &'a str,
    /// Its update strategy.
    pub strategy: Option<MachineUpdateStrategy>,
    /// Its in-place hash (`None` for pools that are not in-place).
    pub hash: Option<String>,
}

/// The new `workerPoolToHashMap`, or `None` when `current` is already right.
pub fn status_map(
    pools: &[PoolHash<'_>],
    deployments: &[MachineDeployment],
    current: &BTreeMap<String, String>,
) -> Option<BTreeMap<String, String>> {
    let in_place: BTreeSet<&str> = pools
        .iter()
        .filter(|p| is_in_place(p.strategy))
        .map(|p| p.name)
        .collect();
    let mut map: BTreeMap<String, String> = current
        .iter()
        .filter(|(pool, _)| in_place.contains(pool.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for pool in pools.iter().filter(|p| is_in_place(p.strategy)) {
        let Some(hash) = &pool.hash else { continue };
        if pool.strategy == Some(MachineUpdateStrategy::ManualInPlaceUpdate) {
            let outdated = deployments.iter().any(|d| {
                d.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_WORKER_POOL))
                    .is_some_and(|p| p == pool.name)
                    && d.status.as_ref().is_some_and(|s| {
                        s.updated_replicas.unwrap_or_default() < s.replicas.unwrap_or_default()
                    })
            });
            if outdated {
                continue;
            }
        }
        map.insert(pool.name.to_string(), hash.clone());
    }
    (map != *current).then_some(map)
}

/// Whether `deployment` updates in place with manual orchestration.
pub fn is_manual_in_place(deployment: &MachineDeployment) -> bool {
    deployment.spec.strategy.as_ref().is_some_and(|s| {
        s.type_.as_deref() == Some(STRATEGY_IN_PLACE_UPDATE)
            && s.in_place_update
                .as_ref()
                .and_then(|i| i.orchestration_type.as_deref())
                == Some(ORCHESTRATION_MANUAL)
    })
}

/// What a `ManualInPlaceUpdate` deployment contributes to the rollout check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ManualCounts {
    /// Machines of the deployment's old machine sets (still to be updated, when the user
    /// selects them).
    pub need_update: i32,
    /// Machines of old machine sets that are selected or being updated (waited for).
    pub in_progress: i32,
}

/// The counts of a manual in-place deployment: its machine sets other than the one of
/// `class_name` are old.
pub fn manual_rollout(
    deployment: &str,
    class_name: &str,
    sets: &[MachineSet],
    machines: &[Machine],
) -> ManualCounts {
    let mut counts = ManualCounts::default();
    for set in sets
        .iter()
        .filter(|s| belongs_to(s, deployment) && set_class(s) != Some(class_name))
    {
        counts.need_update += set
            .status
            .as_ref()
            .and_then(|s| s.replicas)
            .unwrap_or_default();
        let set_name = set.metadata.name.as_deref().unwrap_or_default();
        counts.in_progress += machines
            .iter()
            .filter(|m| {
                m.metadata
                    .owner_references
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .any(|o| o.kind == "MachineSet" && o.name == set_name)
            })
            .filter(|m| {
                m.status
                    .as_ref()
                    .and_then(|s| {
                        s.conditions
                            .iter()
                            .find(|c| c.type_ == CONDITION_IN_PLACE_UPDATE)
                    })
                    .is_some_and(|c| c.reason.as_deref() != Some(REASON_CANDIDATE_FOR_UPDATE))
            })
            .count() as i32;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(version: &str, strategy: &str) -> WorkerPool {
        serde_json::from_value(json!({
            "name": "pool1", "machineType": "m", "minimum": 1, "maximum": 1,
            "maxSurge": 1, "maxUnavailable": 0,
            "userDataSecretRef": {"name": "u", "key": "k"},
            "kubernetesVersion": version, "updateStrategy": strategy,
        }))
        .unwrap()
    }

    #[test]
    fn the_hash_matches_gardeners_for_the_same_inputs() {
        // Gardener's own test vectors (generic actuator tests): no image, no kubelet
        // config, no rotations.
        let hash = |v| update_hash(&pool(v, "AutoInPlaceUpdate"), None).unwrap();
        assert_eq!(hash("1.32.0"), "89e7871a154fd3d0");
        assert_eq!(hash("1.31.0"), "04863233bf6b9bb0");
        assert_eq!(hash("1.33.0"), "e1d8805194ff0b5e");
        // Only major.minor counts.
        assert_eq!(hash("1.32.7"), "89e7871a154fd3d0");
        assert_eq!(hash("v1.32"), "89e7871a154fd3d0");
    }

    #[test]
    fn image_kubelet_and_rotations_change_the_hash() {
        let base = pool("1.32.0", "AutoInPlaceUpdate");
        let plain = update_hash(&base, None).unwrap();
        let mut image = base.clone();
        image.machine_image =
            serde_json::from_value(json!({"name": "debian", "version": "1.1"})).unwrap();
        assert_ne!(update_hash(&image, None).unwrap(), plain);
        let mut kubelet = base.clone();
        kubelet.kubelet_config = Some(json!({"cpuManagerPolicy": "static"}));
        assert_ne!(update_hash(&kubelet, None).unwrap(), plain);
        // Settings that need no node update do not count.
        kubelet.kubelet_config = Some(json!({"maxPods": 50}));
        assert_eq!(update_hash(&kubelet, None).unwrap(), plain);
        let credentials: ShootCredentialsView = serde_json::from_value(json!({"rotation": {
            "certificateAuthorities": {"lastInitiationTime": "2026-01-02T03:04:05Z"}
        }}))
        .unwrap();
        let rotated = update_hash(&base, Some(&credentials)).unwrap();
        assert_ne!(rotated, plain);
        // A pending rollout of the pool carries its own time.
        let pending: ShootCredentialsView = serde_json::from_value(json!({"rotation": {
            "certificateAuthorities": {
                "lastInitiationTime": "2026-01-02T03:04:05Z",
                "pendingWorkersRollouts": [{"name": "pool1", "lastInitiationTime": "2026-01-01T00:00:00Z"}]
            }
        }}))
        .unwrap();
        assert_ne!(update_hash(&base, Some(&pending)).unwrap(), rotated);
    }

    #[test]
    fn the_kubelet_data_follows_gardeners_fields() {
        let data = kubelet_data(
            "p",
            Some(&json!({
                "kubeReserved": {"cpu": "80m", "memory": "1Gi", "pid": "10k"},
                "evictionHard": {"memoryAvailable": "100Mi", "nodeFSAvailable": "5%"},
                "cpuManagerPolicy": "none",
            })),
        )
        .unwrap();
        assert_eq!(
            data,
            vec![
                "80m-1Gi-10k-<nil>".to_string(),
                "--100Mi-5%-".to_string(),
                "none".to_string()
            ]
        );
        assert!(matches!(
            kubelet_data("p", Some(&json!({"kubeReserved": {"cpu": "lots"}}))),
            Err(InPlaceHashError::Quantity { .. })
        ));
        assert_eq!(
            update_hash(&pool("", "AutoInPlaceUpdate"), None),
            Err(InPlaceHashError::KubernetesVersion {
                pool: "pool1".into(),
                version: String::new()
            })
        );
    }

    #[test]
    fn system_reserved_is_not_part_of_gardeners_kubelet_config_and_not_hashed() {
        let kube = json!({"kubeReserved": {"cpu": "80m", "memory": "1Gi"}});
        let mut both = kube.clone();
        both["systemReserved"] = json!({"cpu": "20m", "memory": "512Mi"});
        assert_eq!(
            kubelet_data("p", Some(&both)).unwrap(),
            kubelet_data("p", Some(&kube)).unwrap()
        );
        assert_eq!(
            kubelet_data("p", Some(&json!({"systemReserved": {"cpu": "20m"}}))).unwrap(),
            Vec::<String>::new(),
            "no kubeReserved, nothing hashed"
        );
    }

    #[test]
    fn go_prints_times_like_this() {
        let time = DateTime::parse_from_rfc3339("2026-01-02T03:04:05Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(go_time_string(time), "2026-01-02 03:04:05 +0000 UTC");
        let time = DateTime::parse_from_rfc3339("2026-01-02T03:04:05.250Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(go_time_string(time), "2026-01-02 03:04:05.25 +0000 UTC");
    }

    fn deployment(pool: &str, replicas: i32, updated: i32) -> MachineDeployment {
        serde_json::from_value(json!({
            "metadata": {"name": format!("md-{pool}"), "labels": {LABEL_WORKER_POOL: pool}},
            "spec": {"template": {}},
            "status": {"replicas": replicas, "updatedReplicas": updated},
        }))
        .unwrap()
    }

    #[test]
    fn the_status_map_follows_gardener() {
        let pools = [
            PoolHash {
                name: "auto",
                strategy: Some(MachineUpdateStrategy::AutoInPlaceUpdate),
                hash: Some("a2".into()),
            },
            PoolHash {
                name: "manual",
                strategy: Some(MachineUpdateStrategy::ManualInPlaceUpdate),
                hash: Some("m2".into()),
            },
            PoolHash {
                name: "rolling",
                strategy: Some(MachineUpdateStrategy::AutoRollingUpdate),
                hash: None,
            },
        ];
        let current = BTreeMap::from([
            ("auto".to_string(), "a1".to_string()),
            ("manual".to_string(), "m1".to_string()),
            ("gone".to_string(), "g1".to_string()),
        ]);
        // The manual pool still has outdated machines: it keeps its old hash.
        let map = status_map(&pools, &[deployment("manual", 3, 2)], &current).unwrap();
        assert_eq!(
            map,
            BTreeMap::from([
                ("auto".to_string(), "a2".to_string()),
                ("manual".to_string(), "m1".to_string()),
            ])
        );
        let map = status_map(&pools, &[deployment("manual", 3, 3)], &current).unwrap();
        assert_eq!(map["manual"], "m2");
        assert_eq!(status_map(&pools, &[], &map), None, "unchanged");
    }
}
