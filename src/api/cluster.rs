//! The `Cluster` resource (`extensions.gardener.cloud/v1alpha1`, cluster-scoped) and a lenient
//! typed view of the Shoot it carries.
//!
//! gardenlet writes one Cluster per shoot, named after the shoot's control-plane namespace, with
//! the full Shoot, CloudProfile and Seed as raw objects. Controllers read it to learn the shoot's
//! state (failed, hibernated, force-deletion requested) and worker pools. [`ShootView`] decodes
//! only the fields we need; everything is optional so newer or older Shoots never fail to parse.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::common::{LastOperationState, LastOperationType, parse_go_bool, raw_object_schema};
use super::constants::{
    ANNOTATION_CONFIRMATION_FORCE_DELETION, ANNOTATION_GENERIC_TOKEN_KUBECONFIG_SECRET_NAME,
    GENERIC_TOKEN_KUBECONFIG_SECRET_NAME,
};

/// Spec of a Cluster: the raw Shoot, CloudProfile and Seed objects.
///
/// The CRD declares a `status` subresource although there are no status fields; see
/// [`crate::api::all_crds`], which adds it (the derive only does so together with a status type).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "extensions.gardener.cloud",
    version = "v1alpha1",
    kind = "Cluster",
    plural = "clusters",
    derive = "PartialEq",
    doc = "Cluster is a specification for a Cluster resource.",
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp", "description": "creation timestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// The CloudProfile (core.gardener.cloud/v1beta1) referenced by the shoot; may be empty.
    #[schemars(schema_with = "raw_object_schema")]
    pub cloud_profile: Value,
    /// The Seed (core.gardener.cloud/v1beta1) hosting the control plane; absent for self-hosted shoots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "raw_object_schema")]
    pub seed: Option<Value>,
    /// The Shoot (core.gardener.cloud/v1beta1) that is being reconciled.
    #[schemars(schema_with = "raw_object_schema")]
    pub shoot: Value,
}

impl Cluster {
    /// Decodes `spec.shoot` into a [`ShootView`]. Fails only if `spec.shoot` is not a JSON object
    /// of the expected overall shape (unknown and missing fields are fine).
    pub fn shoot(&self) -> Result<ShootView, serde_json::Error> {
        ShootView::deserialize(&self.spec.shoot)
    }

    /// Name of the Secret with the generic token kubeconfig in the shoot namespace (from the
    /// Cluster annotation, falling back to `generic-token-kubeconfig`).
    pub fn generic_token_kubeconfig_secret_name(&self) -> &str {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_GENERIC_TOKEN_KUBECONFIG_SECRET_NAME))
            .map_or(GENERIC_TOKEN_KUBECONFIG_SECRET_NAME, String::as_str)
    }
}

/// The fields of a `core.gardener.cloud/v1beta1` Shoot that extensions read.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ShootView {
    /// Object metadata (subset).
    pub metadata: ShootMetadata,
    /// Shoot spec (subset).
    pub spec: ShootSpecView,
    /// Shoot status (subset).
    pub status: ShootStatusView,
}

/// Subset of the Shoot's metadata.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ShootMetadata {
    /// Shoot name.
    pub name: Option<String>,
    /// Project namespace of the shoot in the garden cluster.
    pub namespace: Option<String>,
    /// Shoot annotations.
    #[serde(deserialize_with = "lenient")]
    pub annotations: BTreeMap<String, String>,
    /// Shoot labels.
    #[serde(deserialize_with = "lenient")]
    pub labels: BTreeMap<String, String>,
    /// Set when the shoot is being deleted.
    #[serde(deserialize_with = "lenient")]
    pub deletion_timestamp: Option<DateTime<Utc>>,
}

/// Subset of the Shoot's spec.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ShootSpecView {
    /// Kubernetes settings.
    pub kubernetes: ShootKubernetes,
    /// Hibernation settings; absent means not hibernated.
    pub hibernation: Option<ShootHibernation>,
    /// Infrastructure provider settings including worker pools.
    pub provider: ShootProvider,
    /// Networking settings.
    pub networking: Option<ShootNetworking>,
}

/// `spec.networking` of a Shoot (subset).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ShootNetworking {
    /// IP families of the shoot network (`IPv4`, `IPv6`), in the shoot's order.
    pub ip_families: Vec<String>,
}

/// `spec.kubernetes` of a Shoot (subset).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ShootKubernetes {
    /// Control-plane Kubernetes version.
    pub version: Option<String>,
}

/// `spec.hibernation` of a Shoot (subset).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ShootHibernation {
    /// Whether the shoot should be hibernated.
    pub enabled: Option<bool>,
}

/// `spec.provider` of a Shoot (subset).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ShootProvider {
    /// Provider type, e.g. `local`.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// Worker pools.
    pub workers: Vec<ShootWorker>,
}

/// One worker pool of a Shoot (subset).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ShootWorker {
    /// Pool name.
    pub name: String,
    /// Container runtime interface settings; absent means no extra runtimes.
    pub cri: Option<ShootCri>,
    /// Machine type and image.
    pub machine: ShootMachine,
    /// Minimum number of machines.
    pub minimum: i32,
    /// Maximum number of machines.
    pub maximum: i32,
    /// How many machines may be unavailable during an update (a number or a percentage of
    /// the pool); absent: Gardener's default, 0.
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// Availability zones.
    pub zones: Vec<String>,
    /// Labels for the pool's nodes.
    #[serde(deserialize_with = "lenient")]
    pub labels: BTreeMap<String, String>,
    /// Annotations for the pool's nodes.
    #[serde(deserialize_with = "lenient")]
    pub annotations: BTreeMap<String, String>,
    /// Taints for the pool's nodes.
    #[serde(deserialize_with = "lenient")]
    pub taints: Vec<Taint>,
}

impl ShootWorker {
    /// Types of the additional container runtimes configured for this pool (e.g. `gvisor`).
    pub fn container_runtime_types(&self) -> impl Iterator<Item = &str> {
        self.cri
            .iter()
            .flat_map(|cri| cri.container_runtimes.iter())
            .map(|cr| cr.type_.as_str())
    }
}

/// `spec.provider.workers[].cri` of a Shoot.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ShootCri {
    /// CRI name (only `containerd`).
    pub name: Option<String>,
    /// Additional container runtimes for the pool.
    pub container_runtimes: Vec<ShootContainerRuntime>,
}

/// One additional container runtime of a Shoot worker pool.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ShootContainerRuntime {
    /// Runtime type, e.g. `gvisor`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Runtime configuration; copied into `ContainerRuntime.spec.providerConfig`.
    pub provider_config: Option<Value>,
}

/// `spec.provider.workers[].machine` of a Shoot.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ShootMachine {
    /// Machine type.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// Machine image.
    pub image: Option<ShootMachineImage>,
    /// CPU architecture, e.g. `amd64`.
    pub architecture: Option<String>,
}

/// `spec.provider.workers[].machine.image` of a Shoot.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ShootMachineImage {
    /// Image name (also the OperatingSystemConfig type).
    pub name: Option<String>,
    /// Image version.
    pub version: Option<String>,
}

/// Subset of the Shoot's status.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ShootStatusView {
    /// The last operation on the shoot.
    pub last_operation: Option<ShootLastOperation>,
    /// Whether the shoot is currently hibernated.
    pub is_hibernated: bool,
    /// Technical ID: the name of the control-plane namespace in the seed.
    #[serde(rename = "technicalID")]
    pub technical_id: Option<String>,
    /// Credentials state (rotations), read by the in-place pool hash.
    #[serde(deserialize_with = "lenient")]
    pub credentials: Option<ShootCredentialsView>,
}

/// `status.credentials` of a Shoot (subset).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ShootCredentialsView {
    /// Credentials rotations.
    pub rotation: Option<ShootCredentialsRotationView>,
}

/// `status.credentials.rotation` of a Shoot (the rotations that reach the nodes).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ShootCredentialsRotationView {
    /// Certificate authorities rotation.
    pub certificate_authorities: Option<ShootRotationView>,
    /// Service account key rotation.
    pub service_account_key: Option<ShootRotationView>,
}

/// One credentials rotation of a Shoot.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ShootRotationView {
    /// When the rotation was last initiated.
    #[serde(deserialize_with = "lenient")]
    pub last_initiation_time: Option<DateTime<Utc>>,
    /// Pools whose nodes still have to be rolled for the rotation, with their own time.
    #[serde(deserialize_with = "lenient")]
    pub pending_workers_rollouts: Vec<ShootPendingWorkersRollout>,
}

/// A pool still to be rolled for a rotation.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ShootPendingWorkersRollout {
    /// Pool name.
    pub name: String,
    /// When the rotation was initiated for the pool.
    #[serde(deserialize_with = "lenient")]
    pub last_initiation_time: Option<DateTime<Utc>>,
}

/// `status.lastOperation` of a Shoot; unknown enum values read as `None`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ShootLastOperation {
    /// Operation type.
    #[serde(rename = "type", deserialize_with = "lenient")]
    pub type_: Option<LastOperationType>,
    /// Operation state.
    #[serde(deserialize_with = "lenient")]
    pub state: Option<LastOperationState>,
    /// Progress in percent.
    #[serde(deserialize_with = "lenient")]
    pub progress: Option<i32>,
    /// Description.
    pub description: Option<String>,
}

impl ShootView {
    /// The shoot's last operation failed permanently; extensions must not act on it.
    pub fn is_failed(&self) -> bool {
        self.status
            .last_operation
            .as_ref()
            .is_some_and(|op| op.state == Some(LastOperationState::Failed))
    }

    /// The user asked for force deletion (`confirmation.gardener.cloud/force-deletion` parses as
    /// a Go bool `true`).
    pub fn needs_force_deletion(&self) -> bool {
        self.metadata
            .annotations
            .get(ANNOTATION_CONFIRMATION_FORCE_DELETION)
            .and_then(|v| parse_go_bool(v))
            .unwrap_or(false)
    }

    /// The shoot has a deletion timestamp (gardenlet is deleting it).
    pub fn is_being_deleted(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }

    /// `spec.hibernation.enabled` is true.
    pub fn is_hibernation_enabled(&self) -> bool {
        self.spec
            .hibernation
            .as_ref()
            .and_then(|h| h.enabled)
            .unwrap_or(false)
    }

    /// Hibernation is enabled and the shoot reports it is hibernated.
    pub fn is_hibernated(&self) -> bool {
        self.is_hibernation_enabled() && self.status.is_hibernated
    }

    /// Hibernation is being entered or left (desired and actual state differ).
    pub fn is_hibernating_or_waking_up(&self) -> bool {
        self.is_hibernation_enabled() != self.status.is_hibernated
    }

    /// `status.technicalID` if set.
    pub fn technical_id(&self) -> Option<&str> {
        self.status.technical_id.as_deref()
    }

    /// The worker pool with the given name.
    pub fn worker(&self, name: &str) -> Option<&ShootWorker> {
        self.spec.provider.workers.iter().find(|w| w.name == name)
    }

    /// `spec.networking.ipFamilies` (empty when not set).
    pub fn ip_families(&self) -> &[String] {
        self.spec
            .networking
            .as_ref()
            .map(|n| n.ip_families.as_slice())
            .unwrap_or_default()
    }
}

/// Deserialises a field, falling back to its default when the value has an unexpected shape.
fn lenient<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    let value = Value::deserialize(deserializer)?;
    Ok(serde_json::from_value(value).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    const CLUSTER_YAML: &str = r#"
apiVersion: extensions.gardener.cloud/v1alpha1
kind: Cluster
metadata:
  name: shoot--dev--local
  annotations:
    generic-token-kubeconfig.secret.gardener.cloud/name: generic-token-kubeconfig-abc
spec:
  cloudProfile: {}
  seed:
    apiVersion: core.gardener.cloud/v1beta1
    kind: Seed
    metadata: {name: local}
  shoot:
    apiVersion: core.gardener.cloud/v1beta1
    kind: Shoot
    metadata:
      name: local
      namespace: garden-dev
      annotations:
        confirmation.gardener.cloud/force-deletion: "T"
      deletionTimestamp: "2024-05-01T10:00:00Z"
      uid: 1234
    spec:
      kubernetes:
        version: 1.33.1
        kubelet: {maxPods: 110}
      hibernation:
        enabled: true
      provider:
        type: local
        workers:
        - name: worker-a
          cri:
            name: containerd
            containerRuntimes:
            - type: gvisor
              providerConfig:
                apiVersion: gvisor.runtime.extensions.config.gardener.cloud/v1alpha1
                kind: GVisorConfiguration
                configFlags: {net-raw: "true"}
          machine:
            type: local
            image: {name: ubuntu, version: "24.4"}
            architecture: amd64
          minimum: 1
          maximum: 3
          zones: [a, b]
          labels: {foo: bar}
          taints:
          - {key: k, value: v, effect: NoSchedule}
          futureField: 1
    status:
      isHibernated: true
      technicalID: shoot--dev--local
      lastOperation:
        type: Reconcile
        state: Failed
        progress: 10
        description: failed
        lastUpdateTime: "2024-05-01T10:00:00Z"
"#;

    #[test]
    fn cluster_round_trips_and_shoot_view_reads_fields() {
        let cluster: Cluster = serde_norway::from_str(CLUSTER_YAML).unwrap();
        assert_eq!(Cluster::kind(&()), "Cluster");
        assert_eq!(
            cluster.generic_token_kubeconfig_secret_name(),
            "generic-token-kubeconfig-abc"
        );
        let shoot = cluster.shoot().unwrap();
        assert_eq!(shoot.metadata.name.as_deref(), Some("local"));
        assert!(shoot.metadata.deletion_timestamp.is_some());
        assert!(shoot.is_being_deleted());
        assert_eq!(shoot.spec.kubernetes.version.as_deref(), Some("1.33.1"));
        assert!(shoot.is_failed());
        assert!(shoot.needs_force_deletion());
        assert!(shoot.is_hibernation_enabled());
        assert!(shoot.is_hibernated());
        assert!(!shoot.is_hibernating_or_waking_up());
        assert_eq!(shoot.technical_id(), Some("shoot--dev--local"));
        let worker = shoot.worker("worker-a").unwrap();
        assert_eq!(
            worker.container_runtime_types().collect::<Vec<_>>(),
            ["gvisor"]
        );
        assert_eq!(
            worker.machine.image.as_ref().unwrap().name.as_deref(),
            Some("ubuntu")
        );
        assert_eq!(worker.zones, ["a", "b"]);
        assert_eq!(worker.taints[0].effect, "NoSchedule");
        let runtime = &worker.cri.as_ref().unwrap().container_runtimes[0];
        assert_eq!(
            runtime.provider_config.as_ref().unwrap()["configFlags"]["net-raw"],
            "true"
        );

        let json = serde_json::to_value(&cluster).unwrap();
        let back: Cluster = serde_json::from_value(json).unwrap();
        assert_eq!(back, cluster);
    }

    #[test]
    fn shoot_view_tolerates_missing_and_odd_fields() {
        let shoot: ShootView = serde_json::from_value(serde_json::json!({
            "metadata": {"annotations": null, "deletionTimestamp": "not a time"},
            "status": {"lastOperation": {"type": "SomethingNew", "state": "Exploded"}},
        }))
        .unwrap();
        assert!(!shoot.is_failed());
        assert!(!shoot.needs_force_deletion());
        assert!(!shoot.is_hibernated());
        assert!(shoot.metadata.deletion_timestamp.is_none());
        assert!(!shoot.is_being_deleted());
        assert_eq!(shoot.technical_id(), None);

        let empty: ShootView = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(empty, ShootView::default());
    }

    #[test]
    fn force_deletion_annotation_parses_like_go() {
        let mut shoot = ShootView::default();
        for (value, expected) in [
            ("true", true),
            ("1", true),
            ("False", false),
            ("yes", false),
        ] {
            shoot
                .metadata
                .annotations
                .insert(ANNOTATION_CONFIRMATION_FORCE_DELETION.into(), value.into());
            assert_eq!(shoot.needs_force_deletion(), expected, "{value}");
        }
    }

    #[test]
    fn hibernation_helpers() {
        let mut shoot = ShootView::default();
        shoot.spec.hibernation = Some(ShootHibernation {
            enabled: Some(true),
        });
        assert!(shoot.is_hibernation_enabled());
        assert!(!shoot.is_hibernated());
        assert!(shoot.is_hibernating_or_waking_up());
    }
}
