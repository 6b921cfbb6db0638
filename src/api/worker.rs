//! The `Worker` resource (`extensions.gardener.cloud/v1alpha1`, namespaced).
//!
//! gardenlet creates one Worker per shoot describing every worker pool; the Worker controller
//! turns the pools into machine-controller-manager objects (see [`crate::api::machine`]) and
//! reports the resulting MachineDeployments in the status, which gardenlet waits for.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::common::{
    DefaultSpec, DefaultStatus, ExtensionObject, SecretKeySelector, SecretReference,
    date_time_schema, raw_object_schema, rfc3339_seconds,
};

/// Spec of a Worker. If the deletion timestamp is set, the spec is immutable.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "extensions.gardener.cloud",
    version = "v1alpha1",
    kind = "Worker",
    plural = "workers",
    namespaced,
    status = "WorkerStatus",
    derive = "PartialEq",
    doc = "Worker is a specification for a Worker resource.",
    printcolumn = r#"{"name": "Type", "type": "string", "jsonPath": ".spec.type", "description": "The type of the cloud provider for this resource."}"#,
    printcolumn = r#"{"name": "Region", "type": "string", "jsonPath": ".spec.region", "description": "The region into which the worker should be deployed."}"#,
    printcolumn = r#"{"name": "Status", "type": "string", "jsonPath": ".status.lastOperation.state", "description": "Status of the worker."}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp", "description": "creation timestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct WorkerSpec {
    /// Common extension spec fields; `type` is the infrastructure provider type.
    #[serde(flatten)]
    pub default: DefaultSpec,
    /// Status of the Infrastructure object, as written by the infrastructure controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "raw_object_schema")]
    pub infrastructure_provider_status: Option<Value>,
    /// Region of the machines.
    pub region: String,
    /// Secret with the cloud provider credentials.
    pub secret_ref: SecretReference,
    /// Public SSH key for the machines (base64 in JSON, like Go `[]byte`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "byte_string_schema")]
    pub ssh_public_key: Option<ByteString>,
    /// The worker pools.
    pub pools: Vec<WorkerPool>,
}

/// One worker pool of a Worker.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerPool {
    /// Pool name.
    pub name: String,
    /// Machine type.
    pub machine_type: String,
    /// Machine image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_image: Option<MachineImage>,
    /// Minimum number of machines.
    pub minimum: i32,
    /// Maximum number of machines.
    pub maximum: i32,
    /// Maximum number of machines above the desired count during a rolling update.
    pub max_surge: IntOrString,
    /// Maximum number of unavailable machines during a rolling update.
    pub max_unavailable: IntOrString,
    /// Annotations for the pool's nodes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Labels for the pool's nodes (gardenlet adds the well-known pool labels).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Taints for the pool's nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Availability zones; empty means no zones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
    /// Secret key with the machines' user data (`osc-result-...`, key `cloud_config`).
    pub user_data_secret_ref: SecretKeySelector,
    /// Name of the gardener-node-agent Secret of the pool; changes roll the machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_agent_secret_name: Option<String>,
    /// Kubernetes version of the pool's kubelets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    /// kubelet configuration of the pool (Shoot `KubeletConfig`), kept as a raw object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "raw_object_schema")]
    pub kubelet_config: Option<Value>,
    /// Resource capacity of one machine, used by the cluster-autoscaler when scaling from zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_template: Option<NodeTemplate>,
    /// Root volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<Volume>,
    /// Additional data volumes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data_volumes: Vec<DataVolume>,
    /// Name of the data volume that holds kubelet's data directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet_data_volume_name: Option<String>,
    /// machine-controller-manager settings for the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_controller_manager: Option<MachineControllerManagerSettings>,
    /// CPU architecture of the machines, e.g. `amd64`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    /// Scale-up priority for the cluster-autoscaler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// How machines are updated: `AutoRollingUpdate`, `AutoInPlaceUpdate` or `ManualInPlaceUpdate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<MachineUpdateStrategy>,
    /// cluster-autoscaler options for the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_autoscaler: Option<ClusterAutoscalerOptions>,
    /// Provider-specific pool configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "raw_object_schema")]
    pub provider_config: Option<Value>,
}

/// Name and version of a machine image.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineImage {
    /// Image name.
    pub name: String,
    /// Image version.
    pub version: String,
}

/// Resource capacity of a machine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeTemplate {
    /// Resources of one machine (`cpu`, `memory`, `gpu`, ...).
    pub capacity: BTreeMap<String, Quantity>,
    /// Virtual (extended) resources of one machine.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub virtual_capacity: BTreeMap<String, Quantity>,
}

/// Root volume of a machine.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    /// Volume name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Volume type.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Volume size, e.g. `20Gi`.
    pub size: String,
    /// Whether the volume is encrypted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
}

/// Additional data volume of a machine.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataVolume {
    /// Volume name.
    pub name: String,
    /// Volume type.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Volume size, e.g. `50Gi`.
    pub size: String,
    /// Whether the volume is encrypted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
}

/// machine-controller-manager settings of a pool (durations as Go duration strings).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineControllerManagerSettings {
    /// How long to drain a machine before it is deleted forcefully.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_drain_timeout: Option<String>,
    /// How long a machine may be unhealthy before it is replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_health_timeout: Option<String>,
    /// How long a machine may take to join before it is replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_creation_timeout: Option<String>,
    /// Number of eviction retries during a drain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_evict_retries: Option<i32>,
    /// Node conditions that mark a machine unhealthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_conditions: Vec<String>,
    /// Timeout of an in-place update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update_timeout: Option<String>,
    /// Never replace unhealthy machines because of the health timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_health_timeout: Option<bool>,
    /// How long failed machines are preserved for analysis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_preserve_timeout: Option<String>,
    /// Maximum number of failed machines preserved automatically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_preserve_failed_machine_max: Option<i32>,
}

/// Update strategy of a worker pool.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum MachineUpdateStrategy {
    /// Replace machines (the default).
    AutoRollingUpdate,
    /// Update machines in place, automatically.
    AutoInPlaceUpdate,
    /// Update machines in place when a user labels the node.
    ManualInPlaceUpdate,
}

/// cluster-autoscaler options of a worker pool (become MachineDeployment annotations).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAutoscalerOptions {
    /// Utilisation below which a node may be scaled down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_utilization_threshold: Option<String>,
    /// GPU utilisation below which a node may be scaled down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_gpu_utilization_threshold: Option<String>,
    /// How long a node must be unneeded before it is scaled down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_unneeded_time: Option<String>,
    /// How long an unready node must be unneeded before it is scaled down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_unready_time: Option<String>,
    /// Maximum time to wait for a node to be provisioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_node_provision_time: Option<String>,
}

/// Status of a Worker.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerStatus {
    /// Common extension status fields.
    #[serde(flatten)]
    pub default: DefaultStatus,
    /// The MachineDeployments generated for the pools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub machine_deployments: Vec<WorkerMachineDeployment>,
    /// When `machineDeployments` was last written; gardenlet waits for it to advance.
    #[serde(
        default,
        with = "rfc3339_seconds::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "date_time_schema")]
    pub machine_deployments_last_update_time: Option<DateTime<Utc>>,
    /// In-place update state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_updates: Option<WorkerInPlaceUpdatesStatus>,
}

/// One generated MachineDeployment as reported in the Worker status.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerMachineDeployment {
    /// MachineDeployment name.
    pub name: String,
    /// Minimum replicas.
    pub minimum: i32,
    /// Maximum replicas.
    pub maximum: i32,
    /// Scale-up priority for the cluster-autoscaler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Maximum number of failed machines preserved automatically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_preserve_failed_machine_max: Option<i32>,
}

/// In-place update part of a Worker status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerInPlaceUpdatesStatus {
    /// Hash of each in-place pool's configuration, by pool name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub worker_pool_to_hash_map: BTreeMap<String, String>,
}

impl ExtensionObject for Worker {
    fn default_spec(&self) -> &DefaultSpec {
        &self.spec.default
    }

    fn default_status(&self) -> Option<&DefaultStatus> {
        self.status.as_ref().map(|s| &s.default)
    }
}

/// Schema of a Go `[]byte` field: base64 string.
fn byte_string_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "format": "byte",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    const YAML: &str = r#"
apiVersion: extensions.gardener.cloud/v1alpha1
kind: Worker
metadata:
  name: local
  namespace: shoot--dev--local
spec:
  type: local
  region: local
  secretRef:
    name: cloudprovider
    namespace: shoot--dev--local
  sshPublicKey: c3NoLXJzYSBBQUFB
  infrastructureProviderStatus:
    apiVersion: local.provider.extensions.gardener.cloud/v1alpha1
    kind: InfrastructureStatus
  pools:
  - name: worker-a
    machineType: local
    machineImage: {name: ubuntu, version: "24.4"}
    minimum: 1
    maximum: 3
    maxSurge: 1
    maxUnavailable: 0%
    labels:
      worker.gardener.cloud/pool: worker-a
    taints:
    - {key: k, value: v, effect: NoSchedule}
    zones: ["0"]
    userDataSecretRef:
      name: osc-result-worker-a-init
      key: cloud_config
    nodeAgentSecretName: gardener-node-agent-worker-a-77ac3
    kubernetesVersion: 1.33.1
    kubeletConfig:
      maxPods: 110
      kubeReserved: {cpu: 80m}
    nodeTemplate:
      capacity: {cpu: "2", memory: 4Gi, gpu: "0"}
    volume: {size: 20Gi}
    dataVolumes:
    - {name: data, size: 50Gi, type: ssd, encrypted: true}
    machineControllerManager:
      machineDrainTimeout: 2h0m0s
      maxEvictRetries: 30
      nodeConditions: [KernelDeadlock]
    architecture: amd64
    priority: 5
    updateStrategy: AutoRollingUpdate
    clusterAutoscaler:
      scaleDownUtilizationThreshold: "0.5"
    providerConfig: {foo: bar}
    unknownPoolField: 1
status:
  observedGeneration: 2
  machineDeployments:
  - {name: shoot--dev--local-worker-a-z1, minimum: 1, maximum: 3, priority: 5}
  machineDeploymentsLastUpdateTime: "2024-05-01T10:00:00Z"
  inPlaceUpdates:
    workerPoolToHashMap: {worker-a: abc}
  providerStatus: {machineImages: []}
"#;

    #[test]
    fn worker_round_trips() {
        let worker: Worker = serde_norway::from_str(YAML).unwrap();
        assert_eq!(Worker::plural(&()), "workers");
        assert_eq!(worker.spec.default.type_, "local");
        assert_eq!(
            worker.spec.ssh_public_key.as_ref().unwrap().0,
            b"ssh-rsa AAAA"
        );
        let pool = &worker.spec.pools[0];
        assert_eq!(pool.max_surge, IntOrString::Int(1));
        assert_eq!(pool.max_unavailable, IntOrString::String("0%".into()));
        assert_eq!(pool.user_data_secret_ref.key, "cloud_config");
        assert_eq!(
            pool.node_template.as_ref().unwrap().capacity["memory"],
            Quantity("4Gi".into())
        );
        assert_eq!(
            pool.update_strategy,
            Some(MachineUpdateStrategy::AutoRollingUpdate)
        );
        assert_eq!(
            pool.machine_controller_manager
                .as_ref()
                .unwrap()
                .max_evict_retries,
            Some(30)
        );
        let status = worker.status.as_ref().unwrap();
        assert_eq!(status.default.observed_generation, Some(2));
        assert_eq!(status.machine_deployments[0].priority, Some(5));

        let json = serde_json::to_value(&worker).unwrap();
        assert_eq!(json["spec"]["sshPublicKey"], "c3NoLXJzYSBBQUFB");
        assert_eq!(json["spec"]["pools"][0]["maxSurge"], 1);
        assert_eq!(
            json["status"]["machineDeploymentsLastUpdateTime"],
            "2024-05-01T10:00:00Z"
        );
        assert!(json["spec"]["pools"][0].get("unknownPoolField").is_none());
        let back: Worker = serde_json::from_value(json).unwrap();
        assert_eq!(back, worker);
    }
}
