//! The machine state and the machine objects (pure): [`record`] builds the state from the
//! MachineDeployments, MachineSets and Machines of a namespace exactly as gardenlet's
//! `computeMachineState` (`pkg/utils/gardener/shootstate/machines.go`) does during a
//! control-plane migration, and [`restore_objects`] turns one deployment's state back into
//! the MachineSets and Machines a restore creates. The state's format is in [`super::state`].
//!
//! What is recorded: per deployment that has MachineSets, its `spec.replicas`, its sets (owner
//! reference, or label `name` when the set has no owner) and the machines of those sets
//! (owner reference; or label `name` = the deployment for machines without owner) that have
//! joined — a `node` label or a provider ID — in gardenlet's order: sets by name; machines
//! without owner first, then each set's, each group by name. Objects keep only name,
//! namespace, labels and annotations of their metadata, and no status; the `node` label
//! carries the node reference, `spec.providerID` the instance. The compatibility with
//! gardener's own code is tested in `test/worker.rs` (see `docs/contract.md`, Worker machine
//! state).

use kube::api::{DynamicObject, ObjectMeta};
use kube::core::TypeMeta;
use serde_json::Value;

use super::LABEL_NAME;
use super::state::{MACHINE_API_VERSION, MachineDeploymentState, MachineState, StateError};
use crate::api::machine::LABEL_NODE;

fn owners_of(
    object: &DynamicObject,
) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference] {
    object
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
}

fn label<'a>(object: &'a DynamicObject, key: &str) -> Option<&'a str> {
    object
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

fn owned_by(object: &DynamicObject, owner_kind: &str, owner: &str) -> bool {
    owners_of(object)
        .iter()
        .any(|o| o.kind == owner_kind && o.name == owner)
}

fn unowned_with_name_label(object: &DynamicObject, deployment: &str) -> bool {
    owners_of(object).is_empty() && label(object, LABEL_NAME) == Some(deployment)
}

fn joined(machine: &DynamicObject) -> bool {
    label(machine, LABEL_NODE).is_some()
        || machine
            .data
            .pointer("/spec/providerID")
            .and_then(Value::as_str)
            .is_some_and(|id| !id.is_empty())
}

/// Keeps name, namespace, labels, annotations and the spec; drops status and everything the
/// API server or a controller added.
fn strip(object: &DynamicObject, kind: &str) -> Value {
    let mut data = object.data.clone();
    if let Value::Object(fields) = &mut data {
        fields.remove("status");
    }
    let stripped = DynamicObject {
        types: Some(TypeMeta {
            api_version: MACHINE_API_VERSION.to_string(),
            kind: kind.to_string(),
        }),
        metadata: ObjectMeta {
            name: object.metadata.name.clone(),
            namespace: object.metadata.namespace.clone(),
            labels: object.metadata.labels.clone(),
            annotations: object.metadata.annotations.clone(),
            ..ObjectMeta::default()
        },
        data,
    };
    // A DynamicObject is string-keyed JSON all the way down, so this cannot fail.
    serde_json::to_value(stripped).unwrap_or(Value::Null)
}

fn by_name(objects: &mut [&DynamicObject]) {
    objects.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
}

/// The joined machines of deployment `deployment` in gardenlet's order: first those without
/// owner that carry its `name` label, then for each of its sets (in the given order) the
/// machines it owns, each group by name (`BuildOwnerToMachinesMap` over the machines sorted by
/// name, read per deployment and then per set).
fn machines_of<'a>(
    deployment: &str,
    own_sets: &[&DynamicObject],
    machines: &'a [DynamicObject],
) -> Vec<&'a DynamicObject> {
    let mut joined_machines: Vec<&DynamicObject> = machines.iter().filter(|m| joined(m)).collect();
    by_name(&mut joined_machines);
    let unowned = joined_machines
        .iter()
        .copied()
        .filter(|m| unowned_with_name_label(m, deployment));
    let owned = own_sets.iter().flat_map(|set| {
        let set = set.metadata.name.as_deref().unwrap_or_default();
        joined_machines
            .iter()
            .copied()
            .filter(move |m| owned_by(m, "MachineSet", set))
    });
    unowned.chain(owned).collect()
}

/// Records the state of the namespace's deployments, sets and machines.
pub fn record(
    deployments: &[DynamicObject],
    sets: &[DynamicObject],
    machines: &[DynamicObject],
) -> MachineState {
    let mut state = MachineState::default();
    for deployment in deployments {
        let Some(name) = deployment.metadata.name.as_deref() else {
            continue;
        };
        let mut own_sets: Vec<&DynamicObject> = sets
            .iter()
            .filter(|s| owned_by(s, "MachineDeployment", name) || unowned_with_name_label(s, name))
            .collect();
        if own_sets.is_empty() {
            continue;
        }
        by_name(&mut own_sets);
        let own_machines = machines_of(name, &own_sets, machines);
        let replicas = deployment
            .data
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .and_then(|r| i32::try_from(r).ok())
            .unwrap_or_default();
        state.machine_deployments.insert(
            name.to_string(),
            MachineDeploymentState {
                replicas,
                machine_sets: own_sets.iter().map(|s| strip(s, "MachineSet")).collect(),
                machines: own_machines.iter().map(|m| strip(m, "Machine")).collect(),
            },
        );
    }
    state
}

/// Objects to create on restore, moved into `namespace`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RestoreObjects {
    /// MachineSets.
    pub machine_sets: Vec<DynamicObject>,
    /// Machines.
    pub machines: Vec<DynamicObject>,
}

fn for_restore(
    value: &Value,
    kind: &'static str,
    index: usize,
    deployment: &str,
    namespace: &str,
) -> Result<DynamicObject, StateError> {
    let mut object: DynamicObject =
        serde_json::from_value(value.clone()).map_err(|source| StateError::Object {
            kind,
            index,
            deployment: deployment.to_string(),
            source,
        })?;
    // An older state kept the node name in `status.node`; today it is the `node` label.
    let legacy_node = object
        .data
        .pointer("/status/node")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(str::to_string);
    if let Value::Object(fields) = &mut object.data {
        fields.remove("status");
    }
    let metadata = object.metadata;
    let mut labels = metadata.labels.unwrap_or_default();
    if let Some(node) = legacy_node {
        labels.entry(LABEL_NODE.to_string()).or_insert(node);
    }
    object.metadata = ObjectMeta {
        name: metadata.name,
        namespace: Some(namespace.to_string()),
        labels: (!labels.is_empty()).then_some(labels),
        annotations: metadata.annotations,
        ..ObjectMeta::default()
    };
    object.types = Some(TypeMeta {
        api_version: MACHINE_API_VERSION.to_string(),
        kind: kind.to_string(),
    });
    Ok(object)
}

/// The sets and machines of one deployment's state, ready to create in `namespace`.
pub fn restore_objects(
    deployment: &str,
    state: &MachineDeploymentState,
    namespace: &str,
) -> Result<RestoreObjects, StateError> {
    let machine_sets = state
        .machine_sets
        .iter()
        .enumerate()
        .map(|(i, v)| for_restore(v, "MachineSet", i, deployment, namespace))
        .collect::<Result<_, _>>()?;
    let machines = state
        .machines
        .iter()
        .enumerate()
        .map(|(i, v)| for_restore(v, "Machine", i, deployment, namespace))
        .collect::<Result<_, _>>()?;
    Ok(RestoreObjects {
        machine_sets,
        machines,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use flate2::read::GzDecoder;
    use serde_json::json;

    use crate::controllers::worker::state::{decode, encode};

    fn object(value: Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    fn snapshot() -> (Vec<DynamicObject>, Vec<DynamicObject>, Vec<DynamicObject>) {
        let deployments = vec![
            object(json!({
                "apiVersion": MACHINE_API_VERSION, "kind": "MachineDeployment",
                "metadata": {"name": "md-a", "namespace": "src", "uid": "1"},
                "spec": {"replicas": 2, "template": {}},
                "status": {"replicas": 2}
            })),
            // No machine set yet: not recorded.
            object(json!({
                "metadata": {"name": "md-b", "namespace": "src"},
                "spec": {"replicas": 1, "template": {}}
            })),
        ];
        let sets = vec![object(json!({
            "metadata": {
                "name": "md-a-5d8f", "namespace": "src", "uid": "2", "resourceVersion": "9",
                "labels": {"name": "md-a"},
                "ownerReferences": [{"apiVersion": MACHINE_API_VERSION, "kind": "MachineDeployment", "name": "md-a", "uid": "1"}]
            },
            "spec": {"replicas": 2, "template": {"spec": {"class": {"kind": "MachineClass", "name": "md-a-abcde"}}}},
            "status": {"replicas": 2}
        }))];
        let machine = |name: &str, node: Option<&str>, provider_id: Option<&str>| {
            let mut labels = json!({"name": "md-a"});
            if let Some(node) = node {
                labels["node"] = json!(node);
            }
            object(json!({
                "metadata": {
                    "name": name, "namespace": "src", "uid": name, "labels": labels,
                    "ownerReferences": [{"apiVersion": MACHINE_API_VERSION, "kind": "MachineSet", "name": "md-a-5d8f", "uid": "2"}],
                    "finalizers": ["machine.sapcloud.io/machine-controller"]
                },
                "spec": {"class": {"kind": "MachineClass", "name": "md-a-abcde"}, "providerID": provider_id},
                "status": {"currentStatus": {"phase": "Running"}}
            }))
        };
        let machines = vec![
            machine("md-a-5d8f-y", Some("node-y"), Some("local:///y")),
            machine("md-a-5d8f-x", Some("node-x"), None),
            machine("md-a-5d8f-pending", None, None),
        ];
        (deployments, sets, machines)
    }

    #[test]
    fn records_joined_machines_of_each_deployment_with_sets() {
        let (deployments, sets, machines) = snapshot();
        let state = record(&deployments, &sets, &machines);
        assert_eq!(state.counts(), (1, 1, 2));
        let md = &state.machine_deployments["md-a"];
        assert_eq!(md.replicas, 2);
        let names: Vec<_> = md
            .machines
            .iter()
            .map(|m| m["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["md-a-5d8f-x", "md-a-5d8f-y"]);
        let machine = &md.machines[0];
        assert_eq!(machine["metadata"]["labels"]["node"], "node-x");
        assert!(machine.get("status").is_none());
        assert!(machine["metadata"].get("ownerReferences").is_none());
        assert!(machine["metadata"].get("uid").is_none());
        assert!(machine["metadata"].get("finalizers").is_none());
        assert_eq!(machine["kind"], "Machine");
        assert_eq!(md.machine_sets[0]["spec"]["replicas"], 2);
        assert!(
            md.machine_sets[0]["metadata"]
                .get("resourceVersion")
                .is_none()
        );
    }

    #[test]
    fn machines_are_recorded_in_gardenlets_order_unowned_first_then_per_set() {
        let (deployments, mut sets, mut machines) = snapshot();
        // An older set of the deployment, sorting before the current one, with a machine
        // whose name sorts after all others; and a joined machine without owner.
        let mut old_set = serde_json::to_value(&sets[0]).unwrap();
        old_set["metadata"]["name"] = json!("md-a-1old");
        sets.push(object(old_set));
        let mut old_machine = serde_json::to_value(&machines[0]).unwrap();
        old_machine["metadata"]["name"] = json!("md-a-zzz");
        old_machine["metadata"]["ownerReferences"][0]["name"] = json!("md-a-1old");
        machines.push(object(old_machine));
        let mut unowned = serde_json::to_value(&machines[0]).unwrap();
        unowned["metadata"]["name"] = json!("md-a-zz-unowned");
        unowned["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("ownerReferences");
        machines.push(object(unowned));
        let state = record(&deployments, &sets, &machines);
        let md = &state.machine_deployments["md-a"];
        let names = |objects: &[Value]| -> Vec<String> {
            objects
                .iter()
                .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(names(&md.machine_sets), ["md-a-1old", "md-a-5d8f"]);
        assert_eq!(
            names(&md.machines),
            ["md-a-zz-unowned", "md-a-zzz", "md-a-5d8f-x", "md-a-5d8f-y"]
        );
    }

    #[test]
    fn encode_decode_round_trip_in_gardenlets_format() {
        let (deployments, sets, machines) = snapshot();
        let state = record(&deployments, &sets, &machines);
        let encoded = encode(&state).unwrap().unwrap();
        let text = encoded["state"].as_str().unwrap();
        // Independently: base64 → gzip → JSON with the upstream field names.
        let bytes = STANDARD.decode(text).unwrap();
        let mut json = String::new();
        GzDecoder::new(bytes.as_slice())
            .read_to_string(&mut json)
            .unwrap();
        let raw: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(raw["machineDeployments"]["md-a"]["replicas"], 2);
        assert_eq!(
            raw["machineDeployments"]["md-a"]["machineSets"][0]["metadata"]["name"],
            "md-a-5d8f"
        );
        assert_eq!(decode(Some(&encoded)).unwrap(), state);
    }

    #[test]
    fn restore_objects_move_into_the_namespace_and_keep_node_references() {
        let (deployments, sets, machines) = snapshot();
        let state = record(&deployments, &sets, &machines);
        let objects = restore_objects("md-a", &state.machine_deployments["md-a"], "dst").unwrap();
        assert_eq!(objects.machine_sets.len(), 1);
        let machine = &objects.machines[1];
        assert_eq!(machine.metadata.namespace.as_deref(), Some("dst"));
        assert_eq!(machine.metadata.name.as_deref(), Some("md-a-5d8f-y"));
        assert_eq!(machine.metadata.labels.as_ref().unwrap()["node"], "node-y");
        assert_eq!(machine.data["spec"]["providerID"], "local:///y");
        assert_eq!(machine.types.as_ref().unwrap().kind, "Machine");
    }

    #[test]
    fn legacy_status_node_becomes_the_node_label() {
        let state = MachineDeploymentState {
            replicas: 1,
            machine_sets: vec![],
            machines: vec![json!({
                "metadata": {"name": "m", "namespace": "src"},
                "spec": {},
                "status": {"node": "node-1"}
            })],
        };
        let objects = restore_objects("md", &state, "dst").unwrap();
        let machine = &objects.machines[0];
        assert_eq!(machine.metadata.labels.as_ref().unwrap()["node"], "node-1");
        assert!(machine.data.get("status").is_none());
        let bad = MachineDeploymentState {
            machines: vec![json!("nope")],
            ..MachineDeploymentState::default()
        };
        assert!(matches!(
            restore_objects("md", &bad, "dst"),
            Err(StateError::Object {
                kind: "Machine",
                index: 0,
                ..
            })
        ));
    }
}
