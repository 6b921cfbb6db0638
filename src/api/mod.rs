//! Rust types of every Kubernetes kind and config file the project reads or writes.
//!
//! This is the bottom layer of the crate: plain serde/schemars types with no I/O. The operator,
//! the node agent and the CRD generator (`crds/`) all build on it. Field names follow the upstream
//! Gardener and machine-controller-manager APIs exactly; a unit test compares our generated CRD
//! schemas against the upstream CRDs in `../shared/gardener-crds/`.
//!
//! - [`common`]: the common extension spec/status, conditions, error codes, serde helpers.
//! - [`constants`]: annotation/label keys, values and finalizers.
//! - [`cluster`], [`containerruntime`], [`operatingsystemconfig`], [`worker`]:
//!   `extensions.gardener.cloud/v1alpha1` kinds.
//! - [`managedresource`]: `resources.gardener.cloud/v1alpha1` ManagedResource.
//! - [`machine`]: `machine.sapcloud.io/v1alpha1` kinds.
//! - [`gvisor`], [`nodeagent`]: config file formats (not CRDs).

pub mod cluster;
pub mod common;
pub mod constants;
pub mod containerruntime;
pub mod gvisor;
pub mod machine;
pub mod managedresource;
pub mod nodeagent;
pub mod operatingsystemconfig;
pub mod provider_config;
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
pub use gvisor::GVisorConfiguration;
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
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion;
    use serde_json::Value;

    use super::*;

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

    fn schema_of(crd: &CustomResourceDefinition) -> Value {
        let version = &crd.spec.versions[0];
        let validation = version.schema.as_ref().unwrap();
        serde_json::to_value(validation.open_api_v3_schema.as_ref().unwrap()).unwrap()
    }

    /// Calls `f(path, node, parent_path)` for every schema node below `node`.
    fn walk(path: &str, node: &Value, f: &mut dyn FnMut(&str, &Value)) {
        f(path, node);
        if let Some(props) = node.get("properties").and_then(Value::as_object) {
            for (name, child) in props {
                walk(&format!("{path}.{name}"), child, f);
            }
        }
        if let Some(items) = node.get("items") {
            walk(&format!("{path}[]"), items, f);
        }
        if let Some(additional) = node.get("additionalProperties").filter(|a| a.is_object()) {
            walk(&format!("{path}{{}}"), additional, f);
        }
    }

    /// Printer columns as (name, type, jsonPath).
    fn columns(version: &CustomResourceDefinitionVersion) -> Vec<(String, String, String)> {
        let columns = version.additional_printer_columns.iter().flatten();
        columns
            .map(|c| (c.name.clone(), c.type_.clone(), c.json_path.clone()))
            .collect()
    }

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
            walk("", &schema, &mut |path, node| {
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
    fn every_path_we_define_exists_upstream_with_a_compatible_type() {
        let dir = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../shared/gardener-crds"
        ));
        if !dir.is_dir() {
            println!(
                "note: {} is absent; skipping the upstream CRD comparison",
                dir.display()
            );
            return;
        }
        let mut checked = 0;
        let mut problems = Vec::new();
        for crd in all_crds() {
            let kind = crd.spec.names.kind.clone();
            let file: PathBuf = dir.join(format!(
                "10-crd-{}_{}.yaml",
                crd.spec.group, crd.spec.names.plural
            ));
            let text = std::fs::read_to_string(&file).unwrap();
            let upstream: CustomResourceDefinition = serde_norway::from_str(&text).unwrap();

            assert_eq!(crd.spec.group, upstream.spec.group, "{kind}");
            assert_eq!(crd.spec.scope, upstream.spec.scope, "{kind}: scope");
            assert_eq!(crd.spec.names.plural, upstream.spec.names.plural, "{kind}");
            assert_eq!(
                crd.spec.names.singular, upstream.spec.names.singular,
                "{kind}"
            );
            assert_eq!(
                crd.spec.names.short_names, upstream.spec.names.short_names,
                "{kind}"
            );
            let (ours, theirs) = (&crd.spec.versions[0], &upstream.spec.versions[0]);
            assert_eq!(ours.name, theirs.name, "{kind}: version");
            assert_eq!(
                ours.subresources, theirs.subresources,
                "{kind}: subresources"
            );
            assert_eq!(columns(ours), columns(theirs), "{kind}: printer columns");

            let upstream_schema = schema_of(&upstream);
            walk("", &schema_of(&crd), &mut |path, node| {
                checked += 1;
                compare_node(&kind, path, node, &upstream_schema, &mut problems);
            });
        }
        assert!(
            problems.is_empty(),
            "schema differences:\n{}",
            problems.join("\n")
        );
        assert!(checked > 300, "walked only {checked} schema nodes");
    }

    /// Finds the upstream node for `path`; `None` plus `true` if an ancestor preserves unknown
    /// fields without describing the child.
    fn upstream_node<'a>(root: &'a Value, path: &str) -> Result<&'a Value, bool> {
        let mut node = root;
        let mut rest = path;
        while !rest.is_empty() {
            let (step, next): (Option<&Value>, &str) = if let Some(r) = rest.strip_prefix("[]") {
                (node.get("items"), r)
            } else if let Some(r) = rest.strip_prefix("{}") {
                (node.get("additionalProperties"), r)
            } else {
                let r = rest.strip_prefix('.').unwrap();
                let end = r.find(['.', '[', '{']).unwrap_or(r.len());
                (
                    node.get("properties").and_then(|p| p.get(&r[..end])),
                    &r[end..],
                )
            };
            match step {
                Some(child) => node = child,
                None => return Err(is_true(node, "x-kubernetes-preserve-unknown-fields")),
            }
            rest = next;
        }
        Ok(node)
    }

    /// Appends to `problems` every way in which our node at `path` is incompatible upstream.
    fn compare_node(
        kind: &str,
        path: &str,
        ours: &Value,
        upstream_root: &Value,
        problems: &mut Vec<String>,
    ) {
        let theirs = match upstream_node(upstream_root, path) {
            Ok(node) => node,
            Err(true) => return, // below an upstream object that keeps unknown fields
            Err(false) => {
                problems.push(format!("{kind}{path}: not in the upstream schema"));
                return;
            }
        };
        let mut check = |ok: bool, what: String| {
            if !ok {
                problems.push(format!("{kind}{path}: {what}"));
            }
        };
        let int_or_string = |n: &Value| is_true(n, "x-kubernetes-int-or-string");
        check(
            int_or_string(ours) == int_or_string(theirs),
            "int-or-string differs".into(),
        );
        if let (Some(a), Some(b)) = (ours.get("type"), theirs.get("type")) {
            check(a == b, format!("type {a} here, {b} upstream"));
        } else if theirs.get("type").is_some() && !int_or_string(theirs) {
            // We left the type open (raw JSON value); then we must keep unknown fields.
            check(
                is_true(ours, "x-kubernetes-preserve-unknown-fields"),
                "untyped here but typed upstream".into(),
            );
        }
        if let (Some(a), Some(b)) = (ours.get("format"), theirs.get("format")) {
            check(a == b, format!("format {a} here, {b} upstream"));
        }
        if is_true(theirs, "x-kubernetes-preserve-unknown-fields")
            && theirs.get("properties").is_none()
        {
            check(
                is_true(ours, "x-kubernetes-preserve-unknown-fields"),
                "upstream keeps unknown fields, we would prune them".into(),
            );
        }
        // Everything we require must be required upstream too, or objects written by others
        // could fail our schema.
        let required = |n: &Value| -> BTreeSet<String> {
            n.get("required")
                .and_then(Value::as_array)
                .map(|r| {
                    r.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut extra: Vec<String> = required(ours)
            .difference(&required(theirs))
            .cloned()
            .collect();
        if path.is_empty() {
            // kube's derived root types always have a `spec`; upstream MCM/GRM CRDs do not
            // require it, but every writer sets it.
            extra.retain(|r| r != "spec");
        }
        check(
            extra.is_empty(),
            format!("required here but not upstream: {extra:?}"),
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
