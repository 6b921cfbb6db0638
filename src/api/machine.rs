//! machine-controller-manager kinds (`machine.sapcloud.io/v1alpha1`): `MachineClass`,
//! `MachineDeployment`, `MachineSet` and `Machine`.
//!
//! The Worker controller writes MachineClasses and MachineDeployments and reads MachineSets and
//! Machines to wait for rollouts. Only the fields such a controller reads or writes are modelled;
//! their names follow the upstream CRDs. Unknown fields are ignored when reading.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{NodeCondition, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::common::{SecretReference, date_time_schema, raw_object_schema, rfc3339_seconds};

/// Label on a Machine with the name of its Node.
pub const LABEL_NODE: &str = "node";

/// Fields of a MachineClass. Upstream MachineClass has no `spec`: these fields sit at the top
/// level of the object (`#[kube(no_spec)]`), next to `metadata`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "machine.sapcloud.io",
    version = "v1alpha1",
    kind = "MachineClass",
    plural = "machineclasses",
    shortname = "mcc",
    namespaced,
    no_spec,
    derive = "PartialEq",
    doc = "MachineClass can be used to templatize and re-use provider configuration across multiple Machines / MachineSets / MachineDeployments."
)]
#[serde(rename_all = "camelCase")]
pub struct MachineClassFields {
    /// Provider-specific machine configuration.
    #[schemars(schema_with = "raw_object_schema")]
    pub provider_spec: Value,
    /// Secret with the user data (and, in older setups, the credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
    /// Secret with the cloud provider credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<SecretReference>,
    /// Provider name, e.g. `local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Machine description for the cluster-autoscaler's scale-from-zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_template: Option<MachineClassNodeTemplate>,
}

/// Node template of a MachineClass.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineClassNodeTemplate {
    /// Resources of one machine.
    pub capacity: BTreeMap<String, Quantity>,
    /// Virtual (extended) resources of one machine.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub virtual_capacity: BTreeMap<String, Quantity>,
    /// Instance type.
    pub instance_type: String,
    /// Region.
    pub region: String,
    /// Zone.
    pub zone: String,
    /// CPU architecture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
}

/// Spec of a MachineDeployment.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "machine.sapcloud.io",
    version = "v1alpha1",
    kind = "MachineDeployment",
    plural = "machinedeployments",
    shortname = "mcd",
    namespaced,
    status = "MachineDeploymentStatus",
    derive = "PartialEq",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas"
    ),
    doc = "MachineDeployment enables declarative updates for machines and MachineSets.",
    printcolumn = r#"{"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"}"#,
    printcolumn = r#"{"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"}"#,
    printcolumn = r#"{"name": "Up-to-date", "type": "integer", "jsonPath": ".status.updatedReplicas"}"#,
    printcolumn = r#"{"name": "Available", "type": "integer", "jsonPath": ".status.availableReplicas"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentSpec {
    /// Desired number of machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Label selector for the machines; must match the template's labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Template of the machines.
    pub template: MachineTemplateSpec,
    /// How machines are replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<MachineDeploymentStrategy>,
    /// Seconds a new machine must be ready before it counts as available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,
    /// Number of old MachineSets to keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history_limit: Option<i32>,
    /// Whether the deployment is paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// Seconds after which a stuck rollout is reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline_seconds: Option<i32>,
    /// Maximum number of failed machines preserved automatically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_preserve_failed_machine_max: Option<i32>,
}

/// [`MachineDeploymentStrategy::type_`] of a deployment that replaces machines.
pub const STRATEGY_ROLLING_UPDATE: &str = "RollingUpdate";
/// [`MachineDeploymentStrategy::type_`] of a deployment that updates machines in place.
pub const STRATEGY_IN_PLACE_UPDATE: &str = "InPlaceUpdate";
/// [`InPlaceUpdateMachineDeployment::orchestration_type`]: MCM selects the machines.
pub const ORCHESTRATION_AUTO: &str = "Auto";
/// [`InPlaceUpdateMachineDeployment::orchestration_type`]: a user selects the machines.
pub const ORCHESTRATION_MANUAL: &str = "Manual";

/// Replacement strategy of a MachineDeployment.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentStrategy {
    /// `RollingUpdate`, `Recreate` or `InPlaceUpdate`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Parameters of `RollingUpdate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdateMachineDeployment>,
    /// Parameters of `InPlaceUpdate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update: Option<InPlaceUpdateMachineDeployment>,
}

/// Parameters of a rolling update.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdateMachineDeployment {
    /// Machines that may exist above the desired count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
    /// Machines that may be unavailable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
}

/// Parameters of an in-place update.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceUpdateMachineDeployment {
    /// Machines that may exist above the desired count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
    /// Machines that may be unavailable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// `Auto` or `Manual`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orchestration_type: Option<String>,
}

/// Template of a Machine (in MachineDeployments and MachineSets).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineTemplateSpec {
    /// Labels and annotations of the machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// Spec of the machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<MachineSpec>,
}

/// Labels and annotations of a template (upstream: an `ObjectMeta` that keeps unknown fields).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct TemplateMetadata {
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// Spec of a Machine; also the `spec` of Machine templates in MachineSets and MachineDeployments.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "machine.sapcloud.io",
    version = "v1alpha1",
    kind = "Machine",
    plural = "machines",
    shortname = "mc",
    namespaced,
    status = "MachineStatus",
    derive = "PartialEq",
    doc = "Machine is the representation of a physical or virtual machine.",
    printcolumn = r#"{"name": "Status", "type": "string", "jsonPath": ".status.currentStatus.phase", "description": "Current status of the machine."}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "Node", "type": "string", "jsonPath": ".metadata.labels.node", "description": "Node backing the machine object"}"#,
    printcolumn = r#"{"name": "ProviderID", "type": "string", "jsonPath": ".spec.providerID", "description": "ProviderID of the infra instance backing the machine object", "priority": 1}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    /// The MachineClass of the machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<ClassSpec>,
    /// Provider ID of the backing instance.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// Labels, annotations and taints for the machine's Node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_template: Option<NodeTemplateSpec>,
    /// Timeouts and health settings (inlined, as upstream).
    #[serde(flatten)]
    pub configuration: MachineConfiguration,
}

/// Reference to a MachineClass.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassSpec {
    /// API group of the class (usually empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    /// Kind of the class, `MachineClass`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Name of the class.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// Node template of a Machine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeTemplateSpec {
    /// Labels and annotations for the Node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// Node spec fields for the Node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<NodeTemplateNodeSpec>,
}

/// The Node spec fields a Worker controller sets.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeTemplateNodeSpec {
    /// Taints for the Node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
}

/// Timeouts and health settings of a Machine (Go durations as strings, e.g. `2h0m0s`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfiguration {
    /// How long to drain before deleting forcefully.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_timeout: Option<String>,
    /// How long the machine may be unhealthy before it is replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_timeout: Option<String>,
    /// How long the machine may take to join before it is replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timeout: Option<String>,
    /// Timeout of an in-place update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update_timeout: Option<String>,
    /// Never replace the machine because of the health timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_health_timeout: Option<bool>,
    /// How long a failed machine is preserved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_preserve_timeout: Option<String>,
    /// Number of eviction retries during a drain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_evict_retries: Option<i32>,
    /// Comma-separated Node condition types that mark the machine unhealthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_conditions: Option<String>,
}

/// Status of a MachineDeployment.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentStatus {
    /// Generation observed by machine-controller-manager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Number of machines targeted by the deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Number of machines with the current template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,
    /// Number of ready machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Number of available machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Number of unavailable machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_replicas: Option<i32>,
    /// Machines in Failed phase that machine-controller-manager preserves (they count as
    /// unavailable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserved_failed_replicas: Option<i32>,
    /// Conditions such as `Available` and `Progressing`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<MachineDeploymentCondition>,
    /// Machines that failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_machines: Vec<MachineSummary>,
}

/// A MachineDeployment condition.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentCondition {
    /// Condition type, e.g. `Available`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Last time the condition was updated.
    #[serde(
        default,
        with = "rfc3339_seconds::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "date_time_schema")]
    pub last_update_time: Option<DateTime<Utc>>,
    /// Last time the status changed.
    #[serde(
        default,
        with = "rfc3339_seconds::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "date_time_schema")]
    pub last_transition_time: Option<DateTime<Utc>>,
    /// Reason of the last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Details of the last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Summary of a failed machine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSummary {
    /// Machine name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Provider ID of the machine.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// Last operation on the machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<MachineLastOperation>,
    /// Name of the owning MachineSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_ref: Option<String>,
}

/// Last operation on a machine, as reported by machine-controller-manager.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineLastOperation {
    /// Description, e.g. the provider's error message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Machine error code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// Last time the operation was updated.
    #[serde(
        default,
        with = "rfc3339_seconds::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "date_time_schema")]
    pub last_update_time: Option<DateTime<Utc>>,
    /// `Processing`, `Failed` or `Successful`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// `Create`, `Update`, `HealthCheck`, `Delete` or `InPlaceUpdate`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

/// Spec of a MachineSet.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "machine.sapcloud.io",
    version = "v1alpha1",
    kind = "MachineSet",
    plural = "machinesets",
    shortname = "mcs",
    namespaced,
    status = "MachineSetStatus",
    derive = "PartialEq",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas"
    ),
    doc = "MachineSet ensures that a specified number of machines replicas are running at any given time.",
    printcolumn = r#"{"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"}"#,
    printcolumn = r#"{"name": "Current", "type": "integer", "jsonPath": ".status.replicas"}"#,
    printcolumn = r#"{"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetSpec {
    /// Desired number of machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Label selector for the machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// The MachineClass of the machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_class: Option<ClassSpec>,
    /// Template of the machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<MachineTemplateSpec>,
    /// Seconds a new machine must be ready before it counts as available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,
}

/// Status of a MachineSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetStatus {
    /// Generation observed by machine-controller-manager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Number of machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Number of machines whose labels match the template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fully_labeled_replicas: Option<i32>,
    /// Number of ready machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Number of available machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Conditions of the MachineSet (upstream name `machineSetCondition`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub machine_set_condition: Vec<MachineSetCondition>,
    /// Last operation on the MachineSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<MachineLastOperation>,
    /// Machines that failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_machines: Vec<MachineSummary>,
}

/// A MachineSet condition.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetCondition {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Last time the status changed.
    #[serde(
        default,
        with = "rfc3339_seconds::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "date_time_schema")]
    pub last_transition_time: Option<DateTime<Utc>>,
    /// Reason of the last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Details of the last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Status of a Machine. The Node name is not in the status but in the `node` label
/// (see [`Machine::node_name`]).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    /// Conditions copied from the Node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<NodeCondition>,
    /// Current phase of the machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_status: Option<CurrentStatus>,
    /// Last operation on the machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<MachineLastOperation>,
    /// Last known state of the machine (provider specific).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_known_state: Option<String>,
}

/// Current phase of a machine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CurrentStatus {
    /// Phase: `Pending`, `Available`, `Running`, `Terminating`, `Unknown`, `Failed`,
    /// `CrashLoopBackOff`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Whether a timeout (creation or health) is running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_active: Option<bool>,
    /// Last time the phase was updated.
    #[serde(
        default,
        with = "rfc3339_seconds::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "date_time_schema")]
    pub last_update_time: Option<DateTime<Utc>>,
}

impl Machine {
    /// Name of the machine's Node, from the `node` label that machine-controller-manager sets.
    pub fn node_name(&self) -> Option<&str> {
        self.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_NODE))
            .map(String::as_str)
    }

    /// Current phase, if reported.
    pub fn phase(&self) -> Option<&str> {
        self.status
            .as_ref()
            .and_then(|s| s.current_status.as_ref())
            .and_then(|c| c.phase.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn machine_class_has_top_level_fields() {
        let yaml = r#"
apiVersion: machine.sapcloud.io/v1alpha1
kind: MachineClass
metadata:
  name: shoot--dev--local-worker-a-z1-2f3a1
  namespace: shoot--dev--local
provider: local
providerSpec:
  image: registry.example/machine:v1
  ipPoolNameV4: foo
secretRef:
  name: shoot--dev--local-worker-a-z1-2f3a1
  namespace: shoot--dev--local
credentialsSecretRef:
  name: cloudprovider
  namespace: shoot--dev--local
nodeTemplate:
  capacity: {cpu: "2", memory: 4Gi}
  instanceType: local
  region: local
  zone: "0"
  architecture: amd64
"#;
        let class: MachineClass = serde_norway::from_str(yaml).unwrap();
        assert_eq!(MachineClass::plural(&()), "machineclasses");
        assert_eq!(class.spec.provider.as_deref(), Some("local"));
        assert_eq!(class.spec.node_template.as_ref().unwrap().zone, "0");
        let json = serde_json::to_value(&class).unwrap();
        assert!(json.get("spec").is_none());
        assert_eq!(json["providerSpec"]["ipPoolNameV4"], "foo");
        assert_eq!(json["nodeTemplate"]["capacity"]["memory"], "4Gi");
        let back: MachineClass = serde_json::from_value(json).unwrap();
        assert_eq!(back, class);
    }

    #[test]
    fn machine_deployment_round_trips() {
        let yaml = r#"
apiVersion: machine.sapcloud.io/v1alpha1
kind: MachineDeployment
metadata:
  name: shoot--dev--local-worker-a-z1
  namespace: shoot--dev--local
spec:
  replicas: 2
  minReadySeconds: 500
  revisionHistoryLimit: 0
  selector:
    matchLabels: {name: shoot--dev--local-worker-a-z1}
  strategy:
    type: RollingUpdate
    rollingUpdate: {maxSurge: 1, maxUnavailable: 0}
  template:
    metadata:
      labels: {name: shoot--dev--local-worker-a-z1}
    spec:
      class: {kind: MachineClass, name: shoot--dev--local-worker-a-z1-2f3a1}
      drainTimeout: 2h0m0s
      healthTimeout: 10m0s
      creationTimeout: 10m0s
      maxEvictRetries: 30
      nodeConditions: KernelDeadlock,ReadonlyFilesystem
      nodeTemplate:
        metadata:
          labels: {worker.gardener.cloud/pool: worker-a}
          annotations: {a: b}
        spec:
          taints:
          - {key: k, value: v, effect: NoSchedule}
status:
  observedGeneration: 3
  replicas: 2
  updatedReplicas: 2
  readyReplicas: 1
  availableReplicas: 1
  unavailableReplicas: 1
  conditions:
  - type: Available
    status: "False"
    lastUpdateTime: "2024-05-01T10:00:00Z"
    lastTransitionTime: "2024-05-01T10:00:00Z"
    reason: MinimumReplicasUnavailable
    message: Deployment does not have minimum availability.
  failedMachines:
  - name: m1
    providerID: local:///m1
    ownerRef: ms1
    lastOperation:
      description: cannot create
      errorCode: ResourceExhausted
      lastUpdateTime: "2024-05-01T10:00:00Z"
      state: Failed
      type: Create
"#;
        let md: MachineDeployment = serde_norway::from_str(yaml).unwrap();
        let spec = md.spec.template.spec.as_ref().unwrap();
        assert_eq!(spec.class.as_ref().unwrap().kind, "MachineClass");
        assert_eq!(spec.configuration.max_evict_retries, Some(30));
        assert_eq!(
            spec.configuration.node_conditions.as_deref(),
            Some("KernelDeadlock,ReadonlyFilesystem")
        );
        let node_template = spec.node_template.as_ref().unwrap();
        assert_eq!(node_template.spec.as_ref().unwrap().taints[0].key, "k");
        let status = md.status.as_ref().unwrap();
        assert_eq!(status.unavailable_replicas, Some(1));
        assert_eq!(
            status.failed_machines[0]
                .last_operation
                .as_ref()
                .unwrap()
                .error_code
                .as_deref(),
            Some("ResourceExhausted")
        );

        let json = serde_json::to_value(&md).unwrap();
        assert_eq!(json["spec"]["template"]["spec"]["drainTimeout"], "2h0m0s");
        assert_eq!(
            json["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
            0
        );
        let back: MachineDeployment = serde_json::from_value(json).unwrap();
        assert_eq!(back, md);
    }

    #[test]
    fn machine_set_and_machine_round_trip() {
        let ms: MachineSet = serde_norway::from_str(
            r#"
apiVersion: machine.sapcloud.io/v1alpha1
kind: MachineSet
metadata: {name: ms1, namespace: ns}
spec:
  replicas: 1
  machineClass: {kind: MachineClass, name: c}
  template:
    spec:
      class: {kind: MachineClass, name: c}
status:
  replicas: 1
  readyReplicas: 1
  availableReplicas: 1
  fullyLabeledReplicas: 1
  observedGeneration: 1
  machineSetCondition:
  - {type: ReplicaFailure, status: "False"}
"#,
        )
        .unwrap();
        assert_eq!(ms.status.as_ref().unwrap().fully_labeled_replicas, Some(1));
        let back: MachineSet = serde_json::from_value(serde_json::to_value(&ms).unwrap()).unwrap();
        assert_eq!(back, ms);

        let machine: Machine = serde_norway::from_str(
            r#"
apiVersion: machine.sapcloud.io/v1alpha1
kind: Machine
metadata:
  name: m1
  namespace: ns
  labels: {node: node-1, name: md1}
spec:
  class: {kind: MachineClass, name: c}
  providerID: local:///m1
  healthTimeout: 10m0s
status:
  currentStatus:
    phase: Running
    timeoutActive: false
    lastUpdateTime: "2024-05-01T10:00:00Z"
  lastOperation:
    description: Machine m1 successfully joined the cluster
    state: Successful
    type: Create
    lastUpdateTime: "2024-05-01T10:00:00Z"
  conditions:
  - type: Ready
    status: "True"
    reason: KubeletReady
"#,
        )
        .unwrap();
        assert_eq!(machine.node_name(), Some("node-1"));
        assert_eq!(machine.phase(), Some("Running"));
        assert_eq!(machine.spec.provider_id.as_deref(), Some("local:///m1"));
        let json = serde_json::to_value(&machine).unwrap();
        assert_eq!(json["spec"]["healthTimeout"], "10m0s");
        let back: Machine = serde_json::from_value(json).unwrap();
        assert_eq!(back, machine);
    }
}
