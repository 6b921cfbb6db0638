//! Which fields of a worker pool differ between the previous and the new Worker (pure): the
//! reasons `render worker --impact` ([`super::worker`]) gives for a pool's verdict, each with
//! the [`Group`] that says how the change reaches the machines.
//!
//! Two more questions about the same fields, from Gardener's own rules:
//!
//! - [`refused_for_in_place`]: the changes Gardener's Shoot validation refuses for an in-place
//!   pool (`ValidateProviderUpdate`, `ValidateWorkersUpdate`: machine type, image name, CRI,
//!   volume, data volumes, `providerConfig`, switching between rolling and in-place);
//! - [`derived_into_secret_name`]: the changed fields gardenlet derives a rolling pool's
//!   `nodeAgentSecretName` from (`KeyV2`: Kubernetes minor, machine type, image name and
//!   version, volume, CRI, rotations, kubelet reservations, eviction thresholds and CPU
//!   manager policy), so a hand-edited Worker that keeps the name can be told apart from the
//!   one gardenlet would write.

use std::collections::BTreeMap;

use crate::api::constants::{
    LABEL_CRI_NAME, LABEL_NODE_AGENT_SECRET_NAME, LABEL_PREFIX_CONTAINER_RUNTIME, LABEL_WORKER_POOL,
};
use crate::api::worker::{MachineUpdateStrategy, WorkerPool};
use crate::controllers::worker::in_place::is_in_place;
use crate::controllers::worker::validate::PoolInputs;

/// How a changed field reaches the machines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// Part of the machines themselves (what they boot, their size, what names their class).
    Machine,
    /// What the nodes run (Kubernetes, kubelet): the node-agent secret carries it.
    Nodes,
    /// Node labels, taints and annotations: machine-controller-manager applies them to the
    /// running machines.
    Running,
    /// How many machines there are and how they are replaced.
    Size,
    /// Anything else the pool says.
    Other,
}

/// One changed field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason {
    /// The field as printed (`machine image version`).
    pub field: String,
    /// How it reaches the machines.
    pub group: Group,
}

impl Reason {
    /// A reason with a fixed field name.
    pub fn new(field: impl Into<String>, group: Group) -> Self {
        Reason {
            field: field.into(),
            group,
        }
    }
}

impl serde::Serialize for Reason {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.field)
    }
}

/// One field comparison: `differs(previous, new)`.
struct Check {
    field: &'static str,
    group: Group,
    differs: fn(&PoolInputs, &PoolInputs) -> bool,
}

/// Every compared field, in the order they are printed (labels, taints and annotations
/// together: the text adds one remark after them).
const CHECKS: &[Check] = &[
    Check {
        field: "machine image name",
        group: Group::Machine,
        differs: |a, b| a.image.name != b.image.name,
    },
    Check {
        field: "machine image version",
        group: Group::Machine,
        differs: |a, b| a.image.version != b.image.version,
    },
    Check {
        field: "machine type",
        group: Group::Machine,
        differs: |a, b| a.pool.machine_type != b.pool.machine_type,
    },
    Check {
        field: "volume",
        group: Group::Machine,
        differs: |a, b| a.pool.volume != b.pool.volume,
    },
    Check {
        field: "data volumes",
        group: Group::Machine,
        differs: |a, b| a.pool.data_volumes != b.pool.data_volumes,
    },
    Check {
        field: "kubelet data volume",
        group: Group::Machine,
        differs: |a, b| a.pool.kubelet_data_volume_name != b.pool.kubelet_data_volume_name,
    },
    Check {
        field: "CRI",
        group: Group::Machine,
        differs: |a, b| a.pool.labels.get(LABEL_CRI_NAME) != b.pool.labels.get(LABEL_CRI_NAME),
    },
    Check {
        field: "node-agent secret name",
        group: Group::Machine,
        differs: |a, b| a.pool.node_agent_secret_name != b.pool.node_agent_secret_name,
    },
    Check {
        field: "providerConfig image override",
        group: Group::Machine,
        differs: |a, b| image_override(a) != image_override(b),
    },
    Check {
        field: "providerConfig",
        group: Group::Machine,
        differs: |a, b| {
            image_override(a) == image_override(b)
                && a.pool.provider_config != b.pool.provider_config
        },
    },
    Check {
        field: "update strategy",
        group: Group::Machine,
        differs: |a, b| strategy(&a.pool) != strategy(&b.pool),
    },
    Check {
        field: "architecture",
        group: Group::Machine,
        differs: |a, b| a.pool.architecture != b.pool.architecture,
    },
    Check {
        field: "Kubernetes version",
        group: Group::Nodes,
        differs: |a, b| a.pool.kubernetes_version != b.pool.kubernetes_version,
    },
    Check {
        field: "kubelet config",
        group: Group::Nodes,
        differs: |a, b| a.pool.kubelet_config != b.pool.kubelet_config,
    },
    Check {
        field: "container runtimes",
        group: Group::Running,
        differs: |a, b| runtime_labels(&a.pool) != runtime_labels(&b.pool),
    },
    Check {
        field: "labels",
        group: Group::Running,
        differs: |a, b| plain_labels(&a.pool) != plain_labels(&b.pool),
    },
    Check {
        field: "taints",
        group: Group::Running,
        differs: |a, b| a.pool.taints != b.pool.taints,
    },
    Check {
        field: "annotations",
        group: Group::Running,
        differs: |a, b| a.pool.annotations != b.pool.annotations,
    },
    Check {
        field: "minimum",
        group: Group::Size,
        differs: |a, b| a.pool.minimum != b.pool.minimum,
    },
    Check {
        field: "maximum",
        group: Group::Size,
        differs: |a, b| a.pool.maximum != b.pool.maximum,
    },
    Check {
        field: "maxSurge",
        group: Group::Size,
        differs: |a, b| a.pool.max_surge != b.pool.max_surge,
    },
    Check {
        field: "maxUnavailable",
        group: Group::Size,
        differs: |a, b| a.pool.max_unavailable != b.pool.max_unavailable,
    },
    Check {
        field: "zones",
        group: Group::Size,
        differs: |a, b| a.pool.zones != b.pool.zones,
    },
    Check {
        field: "priority",
        group: Group::Other,
        differs: |a, b| a.pool.priority != b.pool.priority,
    },
    Check {
        field: "node template",
        group: Group::Other,
        differs: |a, b| a.pool.node_template != b.pool.node_template,
    },
    Check {
        field: "machine-controller-manager settings",
        group: Group::Other,
        differs: |a, b| a.pool.machine_controller_manager != b.pool.machine_controller_manager,
    },
    Check {
        field: "cluster-autoscaler options",
        group: Group::Other,
        differs: |a, b| a.pool.cluster_autoscaler != b.pool.cluster_autoscaler,
    },
    Check {
        field: "user data secret",
        group: Group::Other,
        differs: |a, b| a.pool.user_data_secret_ref != b.pool.user_data_secret_ref,
    },
];

/// Fields Gardener refuses to change for an in-place pool, by their [`CHECKS`] names.
const REFUSED_FOR_IN_PLACE: [&str; 7] = [
    "machine image name",
    "machine type",
    "volume",
    "data volumes",
    "CRI",
    "providerConfig image override",
    "providerConfig",
];

/// Fields gardenlet derives a rolling pool's `nodeAgentSecretName` from, by their [`CHECKS`]
/// names (the Kubernetes minor and the kubelet reservations only count when the in-place hash
/// moved, see [`derived_into_secret_name`]).
const DERIVED_INTO_SECRET_NAME: [&str; 7] = [
    "machine image name",
    "machine image version",
    "machine type",
    "volume",
    "CRI",
    "Kubernetes version",
    "kubelet config",
];

/// The fields that differ between `previous` and `new`, in the order they are printed.
pub fn reasons(previous: &PoolInputs, new: &PoolInputs) -> Vec<Reason> {
    CHECKS
        .iter()
        .filter(|check| (check.differs)(previous, new))
        .map(|check| Reason::new(check.field, check.group))
        .collect()
}

/// `reasons` without the user data secret when the node-agent secret name changed too:
/// gardenlet names the user data after the node-agent secret, so it says nothing more.
pub fn without_derived(reasons: Vec<Reason>) -> Vec<Reason> {
    let renamed = reasons.iter().any(|r| r.field == "node-agent secret name");
    reasons
        .into_iter()
        .filter(|r| !(renamed && r.field == "user data secret"))
        .collect()
}

/// The changes among `reasons` that Gardener refuses for an in-place pool (`new` is one),
/// with a switch between rolling and in-place named as such.
pub fn refused_for_in_place(
    previous: &PoolInputs,
    new: &PoolInputs,
    reasons: &[Reason],
) -> Vec<String> {
    let mut refused: Vec<String> = reasons
        .iter()
        .filter(|r| REFUSED_FOR_IN_PLACE.contains(&r.field.as_str()))
        .map(|r| r.field.clone())
        .collect();
    if is_in_place(previous.pool.update_strategy) != is_in_place(new.pool.update_strategy) {
        refused.push("update strategy between rolling and in-place".to_string());
    }
    refused
}

/// The changes among `reasons` that gardenlet derives a rolling pool's node-agent secret name
/// from; `in_place_hash_moved` says whether the Kubernetes minor, image version or kubelet
/// reservations moved ([`crate::controllers::worker::in_place::update_hash`], which hashes
/// those as gardenlet does): a Kubernetes patch version or a kubelet setting outside the hash
/// is not derived into the name.
pub fn derived_into_secret_name(reasons: &[Reason], in_place_hash_moved: bool) -> Vec<String> {
    reasons
        .iter()
        .filter(|r| DERIVED_INTO_SECRET_NAME.contains(&r.field.as_str()))
        .filter(|r| in_place_hash_moved || r.group == Group::Machine)
        .map(|r| r.field.clone())
        .collect()
}

/// The pool's `providerConfig.image`, as the Worker controller validated it.
fn image_override(pool: &PoolInputs) -> Option<&str> {
    pool.config.as_ref().and_then(|c| c.image.as_deref())
}

/// The update strategy, absent meaning rolling (Gardener's default).
fn strategy(pool: &WorkerPool) -> MachineUpdateStrategy {
    pool.update_strategy
        .unwrap_or(MachineUpdateStrategy::AutoRollingUpdate)
}

/// The container runtime labels of the pool (`containerruntime.worker.gardener.cloud/<type>`:
/// gVisor and the like, which need no new machines).
fn runtime_labels(pool: &WorkerPool) -> BTreeMap<&str, &str> {
    pool.labels
        .iter()
        .filter(|(key, _)| key.starts_with(LABEL_PREFIX_CONTAINER_RUNTIME))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// The pool's own labels: without those gardenlet sets for the CRI, the container runtimes,
/// the pool and its node-agent secret (reported as their own reasons).
fn plain_labels(pool: &WorkerPool) -> BTreeMap<&str, &str> {
    pool.labels
        .iter()
        .filter(|(key, _)| {
            !key.starts_with(LABEL_PREFIX_CONTAINER_RUNTIME)
                && ![
                    LABEL_CRI_NAME,
                    LABEL_NODE_AGENT_SECRET_NAME,
                    LABEL_WORKER_POOL,
                ]
                .contains(&key.as_str())
        })
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::worker::config::PoolConfig;
    use crate::controllers::worker::validate::BootImage;
    use serde_json::json;

    fn pool(extra: serde_json::Value) -> PoolInputs {
        let mut spec = json!({
            "name": "a", "machineType": "m1", "minimum": 1, "maximum": 2,
            "maxSurge": 1, "maxUnavailable": 0,
            "machineImage": {"name": "debian", "version": "13.1"},
            "userDataSecretRef": {"name": "u", "key": "k"},
            "nodeAgentSecretName": "gna-a-1", "kubernetesVersion": "1.36.1",
            "labels": {
                LABEL_WORKER_POOL: "a", LABEL_NODE_AGENT_SECRET_NAME: "gna-a-1",
                LABEL_CRI_NAME: "containerd", "team": "x",
            },
        });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        let pool: WorkerPool = serde_json::from_value(spec).unwrap();
        let image = pool.machine_image.clone().unwrap();
        PoolInputs {
            pool,
            config: None,
            hash: "h".into(),
            image,
            boot_image: BootImage::Override("i".into()),
            container_runtimes: Vec::new(),
            deployments: Vec::new(),
        }
    }

    fn fields(reasons: &[Reason]) -> Vec<&str> {
        reasons.iter().map(|r| r.field.as_str()).collect()
    }

    #[test]
    fn each_field_is_its_own_reason() {
        let base = pool(json!({}));
        let cases = [
            (
                json!({"machineImage": {"name": "ubuntu", "version": "13.1"}}),
                "machine image name",
            ),
            (
                json!({"machineImage": {"name": "debian", "version": "13.2"}}),
                "machine image version",
            ),
            (json!({"machineType": "m2"}), "machine type"),
            (json!({"volume": {"size": "50Gi"}}), "volume"),
            (
                json!({"dataVolumes": [{"name": "d", "size": "10Gi"}]}),
                "data volumes",
            ),
            (json!({"kubeletDataVolumeName": "d"}), "kubelet data volume"),
            (
                json!({"nodeAgentSecretName": "gna-a-2"}),
                "node-agent secret name",
            ),
            (
                json!({"updateStrategy": "AutoInPlaceUpdate"}),
                "update strategy",
            ),
            (json!({"architecture": "arm64"}), "architecture"),
            (json!({"kubernetesVersion": "1.36.2"}), "Kubernetes version"),
            (json!({"kubeletConfig": {"maxPods": 50}}), "kubelet config"),
            (
                json!({"taints": [{"key": "k", "effect": "NoSchedule"}]}),
                "taints",
            ),
            (json!({"annotations": {"a": "b"}}), "annotations"),
            (json!({"minimum": 0}), "minimum"),
            (json!({"maximum": 3}), "maximum"),
            (json!({"maxSurge": "50%"}), "maxSurge"),
            (json!({"maxUnavailable": 1}), "maxUnavailable"),
            (json!({"zones": ["z1"]}), "zones"),
            (json!({"priority": 5}), "priority"),
            (
                json!({"nodeTemplate": {"capacity": {"cpu": "2"}}}),
                "node template",
            ),
            (
                json!({"machineControllerManager": {"machineDrainTimeout": "10m"}}),
                "machine-controller-manager settings",
            ),
            (
                json!({"clusterAutoscaler": {"scaleDownUtilizationThreshold": "0.4"}}),
                "cluster-autoscaler options",
            ),
            (
                json!({"userDataSecretRef": {"name": "u2", "key": "k"}}),
                "user data secret",
            ),
            (
                json!({"providerConfig": {"apiVersion": "x/v1", "kind": "WorkerConfig"}}),
                "providerConfig",
            ),
        ];
        for (change, field) in cases {
            assert_eq!(
                fields(&reasons(&base, &pool(change.clone()))),
                [field],
                "{change}"
            );
        }
        assert!(reasons(&base, &pool(json!({}))).is_empty());
        // An explicit rolling strategy is Gardener's default.
        let rolling = pool(json!({"updateStrategy": "AutoRollingUpdate"}));
        assert!(reasons(&base, &rolling).is_empty());
    }

    #[test]
    fn labels_gardenlet_sets_are_reported_as_what_they_stand_for() {
        let base = pool(json!({}));
        let mut other = pool(json!({"nodeAgentSecretName": "gna-a-2"}));
        other
            .pool
            .labels
            .insert(LABEL_NODE_AGENT_SECRET_NAME.into(), "gna-a-2".into());
        assert_eq!(fields(&reasons(&base, &other)), ["node-agent secret name"]);
        let mut gvisor = pool(json!({}));
        gvisor.pool.labels.insert(
            format!("{LABEL_PREFIX_CONTAINER_RUNTIME}gvisor"),
            "true".into(),
        );
        let found = reasons(&base, &gvisor);
        assert_eq!(fields(&found), ["container runtimes"]);
        assert_eq!(
            found[0].group,
            Group::Running,
            "gVisor needs no new machines"
        );
        let mut cri = pool(json!({}));
        cri.pool
            .labels
            .insert(LABEL_CRI_NAME.into(), "other".into());
        assert_eq!(fields(&reasons(&base, &cri)), ["CRI"]);
        let mut team = pool(json!({}));
        team.pool.labels.insert("team".into(), "y".into());
        let found = reasons(&base, &team);
        assert_eq!(fields(&found), ["labels"]);
        assert_eq!(found[0].group, Group::Running);
    }

    #[test]
    fn the_user_data_secret_named_after_a_new_node_agent_secret_is_not_repeated() {
        let base = pool(json!({}));
        let user_data = json!({"userDataSecretRef": {"name": "u2", "key": "k"}});
        let mut both = user_data.clone();
        both["nodeAgentSecretName"] = json!("gna-a-2");
        assert_eq!(
            fields(&without_derived(reasons(&base, &pool(both)))),
            ["node-agent secret name"]
        );
        assert_eq!(
            fields(&without_derived(reasons(&base, &pool(user_data)))),
            ["user data secret"]
        );
    }

    #[test]
    fn an_image_override_is_its_own_reason() {
        let base = pool(json!({}));
        let mut other = pool(json!({"providerConfig": {"image": "registry/machine:2"}}));
        other.config = Some(PoolConfig {
            image: Some("registry/machine:2".into()),
        });
        assert_eq!(
            fields(&reasons(&base, &other)),
            ["providerConfig image override"]
        );
    }

    #[test]
    fn gardener_refuses_these_changes_of_an_in_place_pool() {
        let base = pool(json!({"updateStrategy": "AutoInPlaceUpdate"}));
        let new = pool(
            json!({"updateStrategy": "ManualInPlaceUpdate", "machineType": "m2",
            "machineImage": {"name": "debian", "version": "13.2"}}),
        );
        let found = reasons(&base, &new);
        assert_eq!(
            fields(&found),
            ["machine image version", "machine type", "update strategy"]
        );
        assert_eq!(
            refused_for_in_place(&base, &new, &found),
            ["machine type"],
            "a new image version and a switch between the in-place strategies are allowed"
        );
        let rolling = pool(json!({}));
        assert_eq!(
            refused_for_in_place(&rolling, &base, &reasons(&rolling, &base)),
            ["update strategy between rolling and in-place"]
        );
    }

    #[test]
    fn gardenlet_derives_the_secret_name_from_machine_fields_and_the_in_place_hash_inputs() {
        let reasons = vec![
            Reason::new("machine image version", Group::Machine),
            Reason::new("Kubernetes version", Group::Nodes),
            Reason::new("labels", Group::Running),
        ];
        assert_eq!(
            derived_into_secret_name(&reasons, true),
            ["machine image version", "Kubernetes version"]
        );
        assert_eq!(
            derived_into_secret_name(&reasons, false),
            ["machine image version"],
            "a patch version alone is not derived into the name"
        );
    }
}
