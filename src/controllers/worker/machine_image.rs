//! Which image a pool's machines boot (pure): the provider-local way of turning a pool's
//! `machineImage` (name, version) into the image string of the MachineClass `providerSpec`,
//! and the `providerStatus` that remembers it.
//!
//! As gardener's provider-local Worker (`pkg/provider-local/controller/worker`,
//! `selectMachineImageForWorkerPool` and `appendMachineImage`):
//!
//! 1. The CloudProfile's `spec.providerConfig` (a `CloudProfileConfig` of
//!    `local.provider.extensions.gardener.cloud/v1alpha1`) lists `machineImages[].versions[]`.
//!    Without `spec.machineCapabilities` in the CloudProfile the version's `image` is taken;
//!    with them, the best of the version's `capabilityFlavors` that is compatible with the
//!    machine type's `capabilities` (as `FindBestImageFlavor`).
//! 2. Not found there: an entry of the Worker's own `status.providerStatus.machineImages`
//!    (a version the CloudProfile dropped keeps booting the image it booted).
//! 3. Neither: the pool is refused with the name and version.
//!
//! [`provider_status`] lists every resolved image once, the `WorkerStatus` provider-local
//! writes. A pool's `providerConfig` image override ([`super::config`]) is not looked up.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

/// `apiVersion` of provider-local's `CloudProfileConfig` and `WorkerStatus`.
pub const API_VERSION: &str = "local.provider.extensions.gardener.cloud/v1alpha1";

/// A capability name → its values (`gardencorev1beta1.Capabilities`).
pub type Capabilities = BTreeMap<String, Vec<String>>;

/// A resolved image of one name and version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedImage {
    /// Image name.
    pub name: String,
    /// Image version.
    pub version: String,
    /// What the driver boots (provider-local: a container image reference).
    pub image: String,
    /// The flavor's capabilities (empty without capability definitions).
    pub capabilities: Capabilities,
}

/// Why no image is found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// Neither the CloudProfile nor the Worker's provider status lists it.
    #[error(
        "machine image {name:?} in version {version:?} is not listed in the CloudProfile's providerConfig.machineImages (nor in the Worker's providerStatus){detail}"
    )]
    NotFound {
        /// Image name.
        name: String,
        /// Image version.
        version: String,
        /// Extra words (the capability problem), starting with "; " when set.
        detail: String,
    },
    /// The CloudProfile's `providerConfig` does not read as a `CloudProfileConfig`.
    #[error("the CloudProfile's providerConfig is not a CloudProfileConfig: {0}")]
    BadCloudProfileConfig(String),
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct CloudProfileConfig {
    machine_images: Vec<ImageVersions>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ImageVersions {
    name: String,
    versions: Vec<ImageVersion>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct ImageVersion {
    version: String,
    image: String,
    capability_flavors: Vec<Flavor>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(default)]
struct Flavor {
    image: String,
    capabilities: Capabilities,
}

#[derive(Deserialize)]
struct CapabilityDefinition {
    name: String,
    #[serde(default)]
    values: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct WorkerStatusImages {
    machine_images: Vec<StatusImage>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StatusImage {
    name: String,
    version: String,
    image: String,
    capabilities: Capabilities,
}

/// What the lookup reads from the CloudProfile and the Worker.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sources<'a> {
    /// The Cluster's CloudProfile.
    pub cloud_profile: Option<&'a Value>,
    /// The Worker's `status.providerStatus`.
    pub provider_status: Option<&'a Value>,
}

/// The image for `name`/`version` on `machine_type` (see the module docs).
pub fn resolve(
    sources: Sources<'_>,
    name: &str,
    version: &str,
    machine_type: &str,
) -> Result<ResolvedImage, ImageError> {
    let definitions = capability_definitions(sources.cloud_profile);
    let wanted = machine_type_capabilities(sources.cloud_profile, machine_type);
    let config = cloud_profile_config(sources.cloud_profile)?;
    let listed = config
        .machine_images
        .iter()
        .filter(|i| i.name == name)
        .flat_map(|i| &i.versions)
        .find(|v| v.version == version);
    let mut detail = String::new();
    if let Some(listed) = listed {
        if definitions.is_empty() {
            return Ok(resolved(
                name,
                version,
                listed.image.clone(),
                Capabilities::new(),
            ));
        }
        match best_flavor(&listed.capability_flavors, &wanted, &definitions) {
            Ok(flavor) => {
                return Ok(resolved(name, version, flavor.image, flavor.capabilities));
            }
            Err(problem) => detail = format!("; {problem}"),
        }
    }
    from_status(
        sources.provider_status,
        name,
        version,
        &wanted,
        &definitions,
    )
    .ok_or(ImageError::NotFound {
        name: name.to_string(),
        version: version.to_string(),
        detail,
    })
}

fn resolved(name: &str, version: &str, image: String, capabilities: Capabilities) -> ResolvedImage {
    ResolvedImage {
        name: name.to_string(),
        version: version.to_string(),
        image,
        capabilities,
    }
}

fn cloud_profile_config(cloud_profile: Option<&Value>) -> Result<CloudProfileConfig, ImageError> {
    let Some(config) = cloud_profile.and_then(|c| c.pointer("/spec/providerConfig")) else {
        return Ok(CloudProfileConfig::default());
    };
    serde_json::from_value(config.clone())
        .map_err(|e| ImageError::BadCloudProfileConfig(e.to_string()))
}

fn capability_definitions(cloud_profile: Option<&Value>) -> Vec<CapabilityDefinition> {
    cloud_profile
        .and_then(|c| c.pointer("/spec/machineCapabilities"))
        .and_then(|d| serde_json::from_value(d.clone()).ok())
        .unwrap_or_default()
}

fn machine_type_capabilities(cloud_profile: Option<&Value>, machine_type: &str) -> Capabilities {
    cloud_profile
        .and_then(|c| c.pointer("/spec/machineTypes"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|t| t.get("name").and_then(Value::as_str) == Some(machine_type))
        .and_then(|t| t.get("capabilities"))
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default()
}

fn from_status(
    provider_status: Option<&Value>,
    name: &str,
    version: &str,
    wanted: &Capabilities,
    definitions: &[CapabilityDefinition],
) -> Option<ResolvedImage> {
    let status: WorkerStatusImages = serde_json::from_value(provider_status?.clone()).ok()?;
    status
        .machine_images
        .into_iter()
        .filter(|i| i.name == name && i.version == version)
        .find(|i| definitions.is_empty() || compatible(&i.capabilities, wanted, definitions))
        .map(|i| {
            let capabilities = if definitions.is_empty() {
                Capabilities::new()
            } else {
                i.capabilities
            };
            resolved(name, version, i.image, capabilities)
        })
}

/// `capabilities` with every defined capability it lacks set to all the definition's values.
fn with_defaults(
    capabilities: &Capabilities,
    definitions: &[CapabilityDefinition],
) -> Capabilities {
    definitions
        .iter()
        .map(|d| {
            let values = capabilities.get(&d.name).unwrap_or(&d.values).clone();
            (d.name.clone(), values)
        })
        .collect()
}

/// Every defined capability has a value both sides support (`AreCapabilitiesCompatible`).
fn compatible(a: &Capabilities, b: &Capabilities, definitions: &[CapabilityDefinition]) -> bool {
    let (a, b) = (with_defaults(a, definitions), with_defaults(b, definitions));
    a.iter().all(|(name, values)| {
        let other = b.get(name).map(Vec::as_slice).unwrap_or_default();
        values.iter().any(|v| other.contains(v))
    })
}

/// The compatible flavor that wins on the first capability, in definition order, whose most
/// preferred value only some flavors have (`FindBestImageFlavor`).
fn best_flavor(
    flavors: &[Flavor],
    wanted: &Capabilities,
    definitions: &[CapabilityDefinition],
) -> Result<Flavor, &'static str> {
    let mut remaining: Vec<(Flavor, Capabilities)> = flavors
        .iter()
        .filter(|f| compatible(&f.capabilities, wanted, definitions))
        .map(|f| (f.clone(), with_defaults(&f.capabilities, definitions)))
        .collect();
    if remaining.is_empty() {
        return Err("no capability flavor of the version fits the machine type's capabilities");
    }
    for definition in definitions {
        for value in &definition.values {
            if remaining.len() == 1 {
                break;
            }
            let with_value: Vec<_> = remaining
                .iter()
                .filter(|(_, c)| c.get(&definition.name).is_some_and(|v| v.contains(value)))
                .cloned()
                .collect();
            if !with_value.is_empty() {
                remaining = with_value;
            }
        }
    }
    match <[_; 1]>::try_from(remaining) {
        Ok([(flavor, _)]) => Ok(flavor),
        Err(_) => Err(
            "no unique capability flavor fits the machine type (usually an invalid CloudProfile)",
        ),
    }
}

/// provider-local's `WorkerStatus` with each distinct image once, in pool order.
pub fn provider_status(images: &[ResolvedImage]) -> Value {
    let mut listed: Vec<&ResolvedImage> = Vec::new();
    for image in images {
        let same = |other: &&ResolvedImage| {
            other.name == image.name
                && other.version == image.version
                && other.capabilities == image.capabilities
        };
        if !listed.iter().any(same) {
            listed.push(image);
        }
    }
    let entries: Vec<Value> = listed
        .into_iter()
        .map(|i| {
            let mut entry = json!({"name": i.name, "version": i.version, "image": i.image});
            if !i.capabilities.is_empty() {
                entry["capabilities"] = json!(i.capabilities);
            }
            entry
        })
        .collect();
    json!({"apiVersion": API_VERSION, "kind": "WorkerStatus", "machineImages": entries})
}

#[cfg(test)]
mod tests;
