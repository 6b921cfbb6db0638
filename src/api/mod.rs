//! Rust types of every Kubernetes kind and config file the project reads or writes.
//!
//! This is the bottom layer of the crate: plain serde/schemars types with no I/O. The operator,
//! the node agent and the CRD generator (`crds/`) all build on it. Field names follow the upstream
//! Gardener and machine-controller-manager APIs exactly; `test/crds_upstream.rs` compares our
//! generated CRD schemas with Gardener's own CRDs when those are available.
//!
//! - [`common`]: the common extension spec/status, conditions, error codes, serde helpers.
//! - [`constants`]: annotation/label keys, values and finalizers.
//! - [`cluster`], [`containerruntime`], [`operatingsystemconfig`], [`worker`]:
//!   `extensions.gardener.cloud/v1alpha1` kinds.
//! - [`managedresource`]: `resources.gardener.cloud/v1alpha1` ManagedResource.
//! - [`machine`]: `machine.sapcloud.io/v1alpha1` kinds.
//! - [`gvisor`], [`nodeagent`]: config file formats (not CRDs).
//! - [`quantity`], [`percent`]: Kubernetes value types (resource quantities, `IntOrString`
//!   percentages) as apimachinery parses and prints them.

pub mod cluster;
pub mod common;
pub mod constants;
pub mod containerruntime;
pub mod gvisor;
pub mod machine;
pub mod managedresource;
pub mod nodeagent;
pub mod operatingsystemconfig;
pub mod percent;
pub mod provider_config;
pub mod quantity;
pub mod worker;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceSubresourceStatus, CustomResourceSubresources,
};
use kube::CustomResourceExt;

pub use cluster::{Cluster, ClusterSpec, ShootView};
pub use common::{
    Condition, ConditionStatus, DefaultSpec, DefaultStatus, ErrorCode, ExtensionObject, LastError,
    LastOperation, LastOperationState, LastOperationType,
};
pub use containerruntime::{ContainerRuntime, ContainerRuntimeSpec, ContainerRuntimeStatus};
pub use gvisor::{GVisorConfiguration, GVisorProfile, GVisorProfileSettings};
pub use machine::{Machine, MachineClass, MachineDeployment, MachineSet};
pub use managedresource::{ManagedResource, ManagedResourceSpec, ManagedResourceStatus};
pub use nodeagent::NodeAgentConfiguration;
pub use operatingsystemconfig::{
    OperatingSystemConfig, OperatingSystemConfigSpec, OperatingSystemConfigStatus,
};
pub use worker::{Worker, WorkerSpec, WorkerStatus};

/// The CRDs of every custom resource kind in this module, in a stable order: Cluster,
/// ContainerRuntime, OperatingSystemConfig, Worker, ManagedResource, MachineClass,
/// MachineDeployment, MachineSet, Machine.
///
/// For tests and local development only; in a landscape gardenlet installs the upstream CRDs.
/// Cluster gets a `status` subresource like upstream even though it has no status fields.
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    vec![
        cluster_crd(),
        ContainerRuntime::crd(),
        OperatingSystemConfig::crd(),
        Worker::crd(),
        ManagedResource::crd(),
        MachineClass::crd(),
        MachineDeployment::crd(),
        MachineSet::crd(),
        Machine::crd(),
    ]
}

/// `Cluster::crd()` plus the (empty) status subresource that upstream declares.
fn cluster_crd() -> CustomResourceDefinition {
    let mut crd = Cluster::crd();
    for version in &mut crd.spec.versions {
        version
            .subresources
            .get_or_insert_with(CustomResourceSubresources::default)
            .status = Some(CustomResourceSubresourceStatus(serde_json::json!({})));
    }
    crd
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::crds::{schema_of, walk_schema};

    const RAW_OBJECT_FIELDS: [&str; 6] = [
        "providerConfig",
        "providerStatus",
        "shoot",
        "seed",
        "cloudProfile",
        "providerSpec",
    ];

    /// Formats the API server understands for CRD schemas (others produce warnings).
    const KNOWN_FORMATS: [&str; 6] = ["int32", "int64", "date-time", "byte", "double", "float"];

    fn is_true(node: &Value, key: &str) -> bool {
        node.get(key).and_then(Value::as_bool) == Some(true)
    }

    #[test]
    fn all_crds_are_in_stable_order() {
        let kinds: Vec<String> = all_crds().into_iter().map(|c| c.spec.names.kind).collect();
        assert_eq!(
            kinds,
            [
                "Cluster",
                "ContainerRuntime",
                "OperatingSystemConfig",
                "Worker",
                "ManagedResource",
                "MachineClass",
                "MachineDeployment",
                "MachineSet",
                "Machine"
            ]
        );
    }

    #[test]
    fn schemas_are_structural_and_raw_fields_preserve_unknown_fields() {
        let mut raw_fields = 0;
        for crd in all_crds() {
            let kind = crd.spec.names.kind.clone();
            let schema = schema_of(&crd);
            let text = serde_json::to_string(&schema).unwrap();
            assert!(!text.contains("$ref"), "{kind}: schema contains $ref");
            assert!(
                !text.contains("\"definitions\""),
                "{kind}: schema contains definitions"
            );
            walk_schema("", &schema, &mut |path, node| {
                let name = path.rsplit('.').next().unwrap_or_default();
                let is_raw = RAW_OBJECT_FIELDS.contains(&name) || path == ".status.state";
                if is_raw {
                    raw_fields += 1;
                    assert!(
                        is_true(node, "x-kubernetes-preserve-unknown-fields"),
                        "{kind}{path}: raw object without x-kubernetes-preserve-unknown-fields"
                    );
                }
                let int_or_string = is_true(node, "x-kubernetes-int-or-string");
                let preserve = is_true(node, "x-kubernetes-preserve-unknown-fields");
                assert!(
                    node.get("type").is_some() || int_or_string || preserve,
                    "{kind}{path}: node without type"
                );
                for key in ["oneOf", "allOf", "not", "$schema"] {
                    assert!(node.get(key).is_none(), "{kind}{path}: has {key}");
                }
                if let Some(any_of) = node.get("anyOf") {
                    assert!(
                        int_or_string,
                        "{kind}{path}: anyOf outside int-or-string: {any_of}"
                    );
                }
                if let Some(format) = node.get("format").and_then(Value::as_str) {
                    assert!(
                        KNOWN_FORMATS.contains(&format),
                        "{kind}{path}: format {format}"
                    );
                }
            });
        }
        // Cluster 3, three extension kinds with providerConfig/providerStatus/state, MachineClass.
        assert!(
            raw_fields >= 13,
            "only {raw_fields} raw object fields found"
        );
    }

    #[test]
    fn cluster_crd_has_status_subresource_but_no_status_schema() {
        let crd = all_crds().remove(0);
        let version = &crd.spec.versions[0];
        assert!(version.subresources.as_ref().unwrap().status.is_some());
        assert!(schema_of(&crd)["properties"].get("status").is_none());
    }
}
