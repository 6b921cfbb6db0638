//! The `ContainerRuntime` resource (`extensions.gardener.cloud/v1alpha1`, namespaced, short name
//! `cr`).
//!
//! gardenlet creates one per worker pool and additional runtime type (`<type>-<pool>`) in the
//! shoot namespace; the ContainerRuntime controller (gVisor here) installs the runtime on the
//! pool's nodes and reports through the common extension status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{DefaultSpec, DefaultStatus, ExtensionObject};

/// Spec of a ContainerRuntime. If the deletion timestamp is set, the spec is immutable.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "extensions.gardener.cloud",
    version = "v1alpha1",
    kind = "ContainerRuntime",
    plural = "containerruntimes",
    shortname = "cr",
    namespaced,
    status = "ContainerRuntimeStatus",
    derive = "PartialEq",
    doc = "ContainerRuntime is a specification for a container runtime resource.",
    printcolumn = r#"{"name": "Type", "type": "string", "jsonPath": ".spec.type", "description": "The type of the Container Runtime resource."}"#,
    printcolumn = r#"{"name": "Status", "type": "string", "jsonPath": ".status.lastOperation.state", "description": "status of the last operation, one of Aborted, Processing, Succeeded, Error, Failed"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp", "description": "creation timestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRuntimeSpec {
    /// Common extension spec fields (`type`, `class`, `providerConfig`).
    #[serde(flatten)]
    pub default: DefaultSpec,
    /// Directory on the worker machines into which the runtime binaries are copied
    /// (gardenlet always sets `/var/bin/containerruntimes`).
    pub binary_path: String,
    /// The worker pool the runtime is for.
    pub worker_pool: ContainerRuntimeWorkerPool,
}

/// Identifies the worker pool of a ContainerRuntime.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRuntimeWorkerPool {
    /// Name of the worker pool. Immutable.
    pub name: String,
    /// Label selector matching the nodes of the pool.
    pub selector: LabelSelector,
}

/// Status of a ContainerRuntime: only the common extension status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRuntimeStatus {
    /// Common extension status fields.
    #[serde(flatten)]
    pub default: DefaultStatus,
}

impl ExtensionObject for ContainerRuntime {
    fn default_spec(&self) -> &DefaultSpec {
        &self.spec.default
    }

    fn default_status(&self) -> Option<&DefaultStatus> {
        self.status.as_ref().map(|s| &s.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::LastOperationState;
    use kube::Resource;

    const YAML: &str = r#"
apiVersion: extensions.gardener.cloud/v1alpha1
kind: ContainerRuntime
metadata:
  name: gvisor-worker-a
  namespace: shoot--dev--local
  annotations:
    gardener.cloud/operation: reconcile
    gardener.cloud/timestamp: "2024-05-01T10:00:00.123456789Z"
spec:
  type: gvisor
  providerConfig:
    apiVersion: gvisor.runtime.extensions.config.gardener.cloud/v1alpha1
    kind: GVisorConfiguration
    configFlags:
      net-raw: "true"
  binaryPath: /var/bin/containerruntimes
  workerPool:
    name: worker-a
    selector:
      matchLabels:
        worker.gardener.cloud/pool: worker-a
        worker.garden.sapcloud.io/group: worker-a
  somethingNew: ignored
status:
  observedGeneration: 1
  lastOperation:
    type: Create
    state: Succeeded
    progress: 100
    description: Successfully reconciled ContainerRuntime
    lastUpdateTime: "2024-05-01T10:00:01Z"
"#;

    #[test]
    fn container_runtime_round_trips() {
        let cr: ContainerRuntime = serde_norway::from_str(YAML).unwrap();
        assert_eq!(ContainerRuntime::plural(&()), "containerruntimes");
        assert_eq!(cr.default_spec().type_, "gvisor");
        assert_eq!(cr.default_spec().class_or_default(), "shoot");
        assert_eq!(cr.spec.worker_pool.name, "worker-a");
        let labels = cr.spec.worker_pool.selector.match_labels.as_ref().unwrap();
        assert_eq!(labels["worker.gardener.cloud/pool"], "worker-a");
        let status = cr.default_status().unwrap();
        assert_eq!(
            status.last_operation.as_ref().unwrap().state,
            LastOperationState::Succeeded
        );

        let json = serde_json::to_value(&cr).unwrap();
        assert_eq!(json["spec"]["type"], "gvisor");
        assert_eq!(json["spec"]["binaryPath"], "/var/bin/containerruntimes");
        assert!(json["spec"].get("class").is_none());
        assert!(json["spec"].get("somethingNew").is_none());
        let back: ContainerRuntime = serde_json::from_value(json).unwrap();
        assert_eq!(back, cr);
    }
}
