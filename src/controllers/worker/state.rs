//! The machine state that survives a control-plane migration, and its format (pure):
//! gardenlet records it, [`super::restore`] reads it; [`super::state_objects`] maps it to and
//! from machine objects.
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
//! with `UnmarshalMachineState`. Reading also accepts the older uncompressed form
//! (`{"machineDeployments": ...}` directly in `status.state`, as the former Worker state
//! reconciler of the extensions library wrote it) and `{"state": null}` (no state).

use std::collections::BTreeMap;
use std::io::{Read, Write};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
