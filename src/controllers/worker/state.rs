//! The machine state that survives a control-plane migration (pure): recorded by
//! [`super::migrate`], read by [`super::restore`].
//!
//! # Format (compatible with gardenlet)
//!
//! `status.state` of the Worker holds `{"state": "<base64>"}`, where the base64 text is the
//! gzip-compressed (best compression) JSON of
//!
//! ```json
//! {"machineDeployments": {"<deployment>": {
//!     "replicas": 2,
//!     "machineSets": [<MachineSet>, ...],
//!     "machines": [<Machine>, ...]}}}
//! ```
//!
//! This is byte-for-byte the structure gardenlet builds for the ShootState
//! (`MachineState`/`MachineDeploymentState` and `MarshalMachineState` in
//! `pkg/utils/gardener/shootstate/machines.go`) and the one it writes into the destination
//! Worker's `status.state` before it asks for `restore`; Gardener's generic actuator reads it
//! with `UnmarshalMachineState`. So a restore works whichever side recorded the state, and
//! gardenlet can read what we record. Reading also accepts the older uncompressed form
//! (`{"machineDeployments": ...}` directly in `status.state`, as the former Worker state
//! reconciler of the extensions library wrote it) and `{"state": null}` (no state).
//!
//! What is recorded mirrors gardenlet's `computeMachineState`: per deployment that has
//! MachineSets, its `spec.replicas`, its sets (owner reference, or label `name` when the set
//! has no owner) and the machines of those sets (owner reference; or label `name` = the
//! deployment for machines without owner) that have joined — a `node` label or a provider
//! ID. Objects keep only name, namespace, labels and annotations of their metadata, and no
//! status; the `node` label carries the node reference, `spec.providerID` the instance.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use kube::api::{DynamicObject, ObjectMeta};
use kube::core::TypeMeta;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::LABEL_NAME;
use crate::api::machine::LABEL_NODE;

/// `apiVersion` of the machine kinds.
pub const MACHINE_API_VERSION: &str = "machine.sapcloud.io/v1alpha1";

/// The machine state of a namespace.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineState {
    /// Per deployment name.
    #[serde(
        rename = "machineDeployments",
        default,
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub machine_deployments: BTreeMap<String, MachineDeploymentState>,
}

/// What a deployment needs to come back without new machines.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentState {
    /// `spec.replicas` of the deployment.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub replicas: i32,
    /// Its MachineSets, stripped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub machine_sets: Vec<Value>,
    /// Its joined Machines, stripped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub machines: Vec<Value>,
}

fn is_zero(value: &i32) -> bool {
    *value == 0
}

impl MachineState {
    /// Numbers of deployments, sets and machines (for events).
    pub fn counts(&self) -> (usize, usize, usize) {
        let deployments = self.machine_deployments.values();
        let sets = deployments.clone().map(|d| d.machine_sets.len()).sum();
        let machines = deployments.map(|d| d.machines.len()).sum();
        (self.machine_deployments.len(), sets, machines)
    }
}

/// Why a state cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// `status.state` has a shape we do not know.
    #[error(
        "status.state is neither {{\"state\": <compressed>}} nor {{\"machineDeployments\": ...}}"
    )]
    UnknownShape,
    /// The base64 text does not decode.
    #[error("status.state.state is not base64")]
    Base64(#[source] base64::DecodeError),
    /// The gzip stream is broken.
    #[error("status.state.state is not a gzip stream")]
    Gzip(#[source] std::io::Error),
    /// The decompressed state is larger than [`MAX_STATE_BYTES`] (a gzip bomb, or a state
    /// far beyond any real pool's).
    #[error(
        "status.state.state decompresses to more than {limit} bytes; refusing it (a real machine state is far smaller)"
    )]
    TooLarge {
        /// The limit in bytes.
        limit: u64,
    },
    /// The JSON does not decode.
    #[error("the machine state JSON does not decode")]
    Json(#[source] serde_json::Error),
    /// An object in the state is not a Kubernetes object.
    #[error("{kind} #{index} of deployment {deployment} in the machine state is not an object")]
    Object {
        /// MachineSet or Machine.
        kind: &'static str,
        /// Position in its list.
        index: usize,
        /// The deployment.
        deployment: String,
        /// Cause.
        #[source]
        source: serde_json::Error,
    },
    /// Compression failed (writing to memory; not expected).
    #[error("compressing the machine state")]
    Compress(#[source] std::io::Error),
}

/// Same shape as [`MachineState`] but tolerating `null` entries (a Go map of pointers may
/// hold them).
#[derive(Deserialize)]
struct LenientState {
    #[serde(rename = "machineDeployments", default)]
    machine_deployments: BTreeMap<String, Option<MachineDeploymentState>>,
}

fn parse_plain(value: Value) -> Result<MachineState, StateError> {
    let lenient: LenientState = serde_json::from_value(value).map_err(StateError::Json)?;
    Ok(MachineState {
        machine_deployments: lenient
            .machine_deployments
            .into_iter()
            .filter_map(|(name, state)| state.map(|s| (name, s)))
            .collect(),
    })
}

/// The most bytes the compressed `status.state` may expand to. A machine's entry is a few
/// KiB of JSON, so this holds thousands of machines, while a gzip bomb (1 MB of state can
/// expand to about 1 GiB) stops here instead of exhausting the operator's memory.
pub const MAX_STATE_BYTES: u64 = 16 * 1024 * 1024;

/// Reads `status.state` (see the module docs for the accepted forms). `None`, `null` and
/// `{"state": null}` are an empty state.
pub fn decode(state: Option<&Value>) -> Result<MachineState, StateError> {
    let Some(Value::Object(fields)) = state else {
        return match state {
            None | Some(Value::Null) => Ok(MachineState::default()),
            Some(_) => Err(StateError::UnknownShape),
        };
    };
    if let Some(compressed) = fields.get("state") {
        let text = match compressed {
            Value::Null => return Ok(MachineState::default()),
            Value::String(text) if text.is_empty() => return Ok(MachineState::default()),
            Value::String(text) => text,
            _ => return Err(StateError::UnknownShape),
        };
        let bytes = STANDARD.decode(text).map_err(StateError::Base64)?;
        let mut json = Vec::new();
        // One byte more than allowed tells "at the limit" from "above it".
        GzDecoder::new(bytes.as_slice())
            .take(MAX_STATE_BYTES + 1)
            .read_to_end(&mut json)
            .map_err(StateError::Gzip)?;
        if json.len() as u64 > MAX_STATE_BYTES {
            return Err(StateError::TooLarge {
                limit: MAX_STATE_BYTES,
            });
        }
        if json.is_empty() {
            return Ok(MachineState::default());
        }
        let value: Value = serde_json::from_slice(&json).map_err(StateError::Json)?;
        return parse_plain(value);
    }
    if fields.contains_key("machineDeployments") || fields.is_empty() {
        return parse_plain(Value::Object(fields.clone()));
    }
    Err(StateError::UnknownShape)
}

/// Writes a state as gardenlet does: `None` for an empty state (nothing to record).
pub fn encode(state: &MachineState) -> Result<Option<Value>, StateError> {
    if state.machine_deployments.is_empty() {
        return Ok(None);
    }
    let json = serde_json::to_vec(state).map_err(StateError::Json)?;
    let mut encoder = GzEncoder::new(Vec::new(), Compression::best());
    encoder.write_all(&json).map_err(StateError::Compress)?;
    let compressed = encoder.finish().map_err(StateError::Compress)?;
    Ok(Some(json!({"state": STANDARD.encode(compressed)})))
}

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
        let mut own_machines: Vec<&DynamicObject> = machines
            .iter()
            .filter(|m| joined(m))
            .filter(|m| {
                unowned_with_name_label(m, name)
                    || own_sets.iter().any(|s| {
                        s.metadata
                            .name
                            .as_deref()
                            .is_some_and(|set| owned_by(m, "MachineSet", set))
                    })
            })
            .collect();
        by_name(&mut own_machines);
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
    fn a_gzip_bomb_is_refused_at_the_limit() {
        // 64 MiB of zeros compress to about 64 KiB.
        let mut encoder = GzEncoder::new(Vec::new(), Compression::best());
        let zeros = vec![0u8; 1024 * 1024];
        for _ in 0..64 {
            encoder.write_all(&zeros).unwrap();
        }
        let bomb = encoder.finish().unwrap();
        assert!(bomb.len() < 1024 * 1024, "{}", bomb.len());
        let error = decode(Some(&json!({"state": STANDARD.encode(&bomb)}))).unwrap_err();
        assert!(
            matches!(error, StateError::TooLarge { limit } if limit == MAX_STATE_BYTES),
            "{error:?}"
        );
        assert!(
            error
                .to_string()
                .contains("decompresses to more than 16777216 bytes")
        );
        // Just below the limit is read (and then fails as JSON, not as too large).
        let mut encoder = GzEncoder::new(Vec::new(), Compression::best());
        encoder
            .write_all(&vec![b' '; MAX_STATE_BYTES as usize])
            .unwrap();
        let at_limit = encoder.finish().unwrap();
        assert!(matches!(
            decode(Some(&json!({"state": STANDARD.encode(&at_limit)}))),
            Ok(_) | Err(StateError::Json(_))
        ));
    }

    #[test]
    fn decodes_the_legacy_plain_form_and_empty_forms() {
        let plain = json!({"machineDeployments": {"md": {"replicas": 3, "machines": [{"metadata": {"name": "m"}}]}, "gone": null}});
        let state = decode(Some(&plain)).unwrap();
        assert_eq!(state.machine_deployments.len(), 1);
        assert_eq!(state.machine_deployments["md"].replicas, 3);
        for empty in [
            json!(null),
            json!({"state": null}),
            json!({"state": ""}),
            json!({}),
        ] {
            assert_eq!(
                decode(Some(&empty)).unwrap(),
                MachineState::default(),
                "{empty}"
            );
        }
        assert_eq!(decode(None).unwrap(), MachineState::default());
        assert!(matches!(
            decode(Some(&json!({"foo": 1}))),
            Err(StateError::UnknownShape)
        ));
        assert!(matches!(
            decode(Some(&json!({"state": "!!!"}))),
            Err(StateError::Base64(_))
        ));
        assert!(matches!(
            decode(Some(&json!({"state": STANDARD.encode(b"not gzip")}))),
            Err(StateError::Gzip(_))
        ));
        assert_eq!(encode(&MachineState::default()).unwrap(), None);
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
