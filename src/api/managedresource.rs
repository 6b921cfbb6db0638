//! The `ManagedResource` resource (`resources.gardener.cloud/v1alpha1`, namespaced, short name
//! `mr`).
//!
//! Extensions deploy objects into a shoot (or the seed) by writing their manifests into Secrets
//! and referencing them from a ManagedResource; gardener-resource-manager applies them and
//! reports conditions. Optional fields are `Option` so that we never write what we did not set.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Condition, ConditionStatus, LocalObjectReference};

/// Condition type: the objects were applied.
pub const CONDITION_RESOURCES_APPLIED: &str = "ResourcesApplied";
/// Condition type: the applied objects are healthy.
pub const CONDITION_RESOURCES_HEALTHY: &str = "ResourcesHealthy";
/// Condition type: the applied objects are still rolling out.
pub const CONDITION_RESOURCES_PROGRESSING: &str = "ResourcesProgressing";

/// Spec of a ManagedResource.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "resources.gardener.cloud",
    version = "v1alpha1",
    kind = "ManagedResource",
    plural = "managedresources",
    shortname = "mr",
    namespaced,
    status = "ManagedResourceStatus",
    derive = "PartialEq",
    doc = "ManagedResource describes a list of managed resources.",
    printcolumn = r#"{"name": "Class", "type": "string", "jsonPath": ".spec.class", "description": "The class identifies which resource manager is responsible for this ManagedResource."}"#,
    printcolumn = r#"{"name": "Applied", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"ResourcesApplied\")].status", "description": "Indicates whether all resources have been applied."}"#,
    printcolumn = r#"{"name": "Healthy", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"ResourcesHealthy\")].status", "description": "Indicates whether all resources are healthy."}"#,
    printcolumn = r#"{"name": "Progressing", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"ResourcesProgressing\")].status", "description": "Indicates whether some resources are still progressing to be rolled out."}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp", "description": "creation timestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedResourceSpec {
    /// Resource manager class; absent means the shoot's resource manager (objects go into the
    /// shoot), `seed` means the seed's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Secrets in the same namespace whose data keys hold the manifests.
    pub secret_refs: Vec<LocalObjectReference>,
    /// Labels added to every managed object.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub inject_labels: BTreeMap<String, String>,
    /// Replace all labels of managed objects instead of merging.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_overwrite_labels: Option<bool>,
    /// Replace all annotations of managed objects instead of merging.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_overwrite_annotations: Option<bool>,
    /// Leave the managed objects in place when the ManagedResource is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_objects: Option<bool>,
    /// Groups of group/kinds that identify the same objects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub equivalences: Vec<Vec<GroupKind>>,
    /// Also delete PVCs created from managed StatefulSets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_persistent_volume_claims: Option<bool>,
}

/// An API group and kind.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupKind {
    /// API group (empty for the core group).
    pub group: String,
    /// Kind.
    pub kind: String,
}

/// Status of a ManagedResource, written by gardener-resource-manager.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedResourceStatus {
    /// Generation last processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `ResourcesApplied`, `ResourcesHealthy` and `ResourcesProgressing` conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The objects that were applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ManagedObjectReference>,
    /// Checksum of the data of all referenced Secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets_data_checksum: Option<String>,
}

/// Reference to an applied object, with the labels and annotations it was applied with.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedObjectReference {
    /// API version of the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name of the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Namespace of the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// UID of the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Resource version of the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// Field path within the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_path: Option<String>,
    /// Labels the object was applied with.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations the object was applied with.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl ManagedResource {
    /// The condition of the given type, if reported.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
    }

    /// Healthy as gardener defines it: the status is for the current generation and both
    /// `ResourcesApplied` and `ResourcesHealthy` are `True`. Missing conditions are unhealthy.
    pub fn is_healthy(&self) -> bool {
        let current = self.status.as_ref().and_then(|s| s.observed_generation)
            == self.metadata.generation
            && self.metadata.generation.is_some();
        let is_true = |t: &str| {
            self.condition(t)
                .is_some_and(|c| c.status == ConditionStatus::True)
        };
        current && is_true(CONDITION_RESOURCES_APPLIED) && is_true(CONDITION_RESOURCES_HEALTHY)
    }

    /// Healthy and `ResourcesProgressing` is `False`.
    pub fn is_healthy_and_not_progressing(&self) -> bool {
        self.is_healthy()
            && self
                .condition(CONDITION_RESOURCES_PROGRESSING)
                .is_some_and(|c| c.status == ConditionStatus::False)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    const YAML: &str = r#"
apiVersion: resources.gardener.cloud/v1alpha1
kind: ManagedResource
metadata:
  name: extension-runtime-gvisor
  namespace: shoot--dev--local
  generation: 2
  labels: {origin: extension-node}
spec:
  secretRefs:
  - name: managedresource-extension-runtime-gvisor-1a2b3c4d
  injectLabels:
    shoot.gardener.cloud/no-cleanup: "true"
  keepObjects: false
  equivalences:
  - - {group: apps, kind: Deployment}
    - {group: extensions, kind: Deployment}
status:
  observedGeneration: 2
  secretsDataChecksum: abc
  conditions:
  - type: ResourcesApplied
    status: "True"
    lastTransitionTime: "2024-05-01T10:00:00Z"
    lastUpdateTime: "2024-05-01T10:00:00Z"
    reason: ApplySucceeded
    message: All resources are applied.
  - type: ResourcesHealthy
    status: "True"
    lastTransitionTime: "2024-05-01T10:00:00Z"
    lastUpdateTime: "2024-05-01T10:00:00Z"
    reason: ResourcesHealthy
    message: All resources are healthy.
  - type: ResourcesProgressing
    status: "False"
    lastTransitionTime: "2024-05-01T10:00:00Z"
    lastUpdateTime: "2024-05-01T10:00:00Z"
    reason: ResourcesRolledOut
    message: All resources are rolled out.
  resources:
  - apiVersion: node.k8s.io/v1
    kind: RuntimeClass
    name: gvisor
    labels: {shoot.gardener.cloud/no-cleanup: "true"}
"#;

    #[test]
    fn managed_resource_round_trips() {
        let mr: ManagedResource = serde_norway::from_str(YAML).unwrap();
        assert_eq!(ManagedResource::group(&()), "resources.gardener.cloud");
        assert_eq!(mr.spec.keep_objects, Some(false));
        assert_eq!(mr.spec.equivalences[0][1].group, "extensions");
        assert!(mr.is_healthy());
        assert!(mr.is_healthy_and_not_progressing());

        let json = serde_json::to_value(&mr).unwrap();
        assert!(json["spec"].get("class").is_none());
        assert!(json["spec"].get("forceOverwriteLabels").is_none());
        assert_eq!(json["status"]["resources"][0]["kind"], "RuntimeClass");
        let back: ManagedResource = serde_json::from_value(json).unwrap();
        assert_eq!(back, mr);
    }

    #[test]
    fn new_managed_resource_writes_only_what_is_set() {
        let mr = ManagedResource::new(
            "x",
            ManagedResourceSpec {
                secret_refs: vec![LocalObjectReference { name: "s".into() }],
                keep_objects: Some(false),
                ..Default::default()
            },
        );
        assert!(!mr.is_healthy());
        let json = serde_json::to_value(&mr.spec).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"secretRefs": [{"name": "s"}], "keepObjects": false})
        );
    }
}
