//! First step of every Worker operation (pure): check the Worker against its Cluster and
//! turn it into [`WorkerInputs`] — one entry per pool and zone with its names, hash and sizes.
//!
//! Everything a user can get wrong is caught here, before any object is written, with an
//! error that names the pool and the field: a missing `nodeAgentSecretName` or
//! `machineImage`, `minimum > maximum`, a negative size, duplicate pools or zones, a zone the
//! CloudProfile does not list for the Worker's region, a malformed percentage, a bad
//! `providerConfig` ([`super::config`]).
//!
//! Names (as Gardener's provider extensions): deployment `<technical id>-<pool>-z<n>` (n from
//! 1, in the pool's zone order), class and class secret `<deployment>-<pool hash>`. The
//! technical ID is `status.technicalID` of the Cluster's shoot (equal to the namespace in a
//! seed); without one, the namespace. A pool without zones gets one zone named after the
//! region.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use super::config::{self, ConfigError, PoolConfig};
use super::hash;
use super::in_place::{self, InPlaceHashError};
use super::machine_image::{self, ImageError, ResolvedImage, Sources};
use super::zones;
use crate::api::ShootView;
use crate::api::cluster::ShootCredentialsView;
use crate::api::common::SecretReference;
use crate::api::percent::PercentError;
use crate::api::worker::{MachineImage, Worker, WorkerPool};

/// A Worker that passed validation.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerInputs {
    /// Namespace of the Worker (where every machine object lives).
    pub namespace: String,
    /// Name of the Worker.
    pub worker_name: String,
    /// `spec.type`, the MachineClass `provider`.
    pub provider: String,
    /// `spec.region`.
    pub region: String,
    /// Prefix of the deployment names.
    pub technical_id: String,
    /// The cloud provider credentials (`spec.secretRef`, namespace defaulted).
    pub credentials: SecretReference,
    /// The shoot wants to be hibernated.
    pub hibernation_enabled: bool,
    /// Some pool has max > min, so the cluster-autoscaler owns replicas.
    pub autoscaler_used: bool,
    /// Where the driver creates the machines, as provider-local's Worker says it.
    pub machine_placement: MachinePlacement,
    /// The pools, in spec order.
    pub pools: Vec<PoolInputs>,
}

impl WorkerInputs {
    /// The Worker's `providerStatus`: every image looked up ([`machine_image::provider_status`]).
    pub fn provider_status(&self) -> Value {
        let images: Vec<ResolvedImage> = self
            .pools
            .iter()
            .filter_map(|p| match &p.boot_image {
                BootImage::LookedUp(image) => Some(image.clone()),
                BootImage::Override(_) => None,
            })
            .collect();
        machine_image::provider_status(&images)
    }
}

/// The `namespace` and IP pools of provider-local's `providerSpec`: namespace
/// `infra-<technical id>` (its Infrastructure controller's), one IP pool name per shoot IP
/// family, `shoot-machine-pods-<technical id>-<family in lower case>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachinePlacement {
    /// Namespace of the machine objects of the driver.
    pub namespace: String,
    /// `ipPoolNameV4`.
    pub ip_pool_v4: Option<String>,
    /// `ipPoolNameV6`.
    pub ip_pool_v6: Option<String>,
}

impl MachinePlacement {
    fn new(technical_id: &str, ip_families: &[String]) -> Self {
        let pool = |family: &str| {
            format!(
                "shoot-machine-pods-{technical_id}-{}",
                family.to_lowercase()
            )
        };
        let mut placement = MachinePlacement {
            namespace: format!("infra-{technical_id}"),
            ip_pool_v4: None,
            ip_pool_v6: None,
        };
        for family in ip_families {
            if family == "IPv6" {
                placement.ip_pool_v6 = Some(pool(family));
            } else {
                placement.ip_pool_v4 = Some(pool(family));
            }
        }
        placement
    }
}

/// One validated pool.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolInputs {
    /// The pool as in the spec.
    pub pool: WorkerPool,
    /// Its validated `providerConfig`.
    pub config: Option<PoolConfig>,
    /// The pool hash ([`hash::class_hash`]).
    pub hash: String,
    /// The machine image.
    pub image: MachineImage,
    /// What the machines boot.
    pub boot_image: BootImage,
    /// Types of the extra container runtimes the shoot configures for the pool (e.g.
    /// `gvisor`), for the `containerruntime.worker.gardener.cloud/<type>` node labels.
    pub container_runtimes: Vec<String>,
    /// One deployment per zone.
    pub deployments: Vec<DeploymentInputs>,
}

/// One MachineDeployment of a pool.
#[derive(Debug, Clone, PartialEq)]
pub struct DeploymentInputs {
    /// `<technical id>-<pool>-z<n>`.
    pub name: String,
    /// `<name>-<hash>`, also the class secret's name.
    pub class_name: String,
    /// The zone.
    pub zone: String,
    /// This zone's share of the pool minimum.
    pub minimum: i32,
    /// This zone's share of the pool maximum.
    pub maximum: i32,
    /// This zone's share of `maxSurge` (of the maximum).
    pub max_surge: IntOrString,
    /// This zone's share of `maxUnavailable` (of the minimum).
    pub max_unavailable: IntOrString,
    /// This zone's share of `autoPreserveFailedMachineMax`.
    pub auto_preserve_failed_machine_max: Option<i32>,
}

/// A Worker the user must fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// Two pools share a name.
    #[error("pool name {0:?} is used twice")]
    DuplicatePool(String),
    /// `nodeAgentSecretName` is missing.
    #[error(
        "pool {pool}: nodeAgentSecretName is not set; it is needed for the pool hash (is gardenlet's OperatingSystemConfig for the pool reconciled?)"
    )]
    MissingNodeAgentSecretName {
        /// Pool.
        pool: String,
    },
    /// `machineImage` is missing or incomplete.
    #[error("pool {pool}: machineImage with name and version is required")]
    MissingMachineImage {
        /// Pool.
        pool: String,
    },
    /// `minimum` is negative.
    #[error("pool {pool}: minimum {minimum} is negative")]
    NegativeMinimum {
        /// Pool.
        pool: String,
        /// Value.
        minimum: i32,
    },
    /// `minimum > maximum`.
    #[error("pool {pool}: minimum {minimum} is greater than maximum {maximum}")]
    MinimumAboveMaximum {
        /// Pool.
        pool: String,
        /// Minimum.
        minimum: i32,
        /// Maximum.
        maximum: i32,
    },
    /// A zone appears twice.
    #[error("pool {pool}: zone {zone:?} is listed twice")]
    DuplicateZone {
        /// Pool.
        pool: String,
        /// Zone.
        zone: String,
    },
    /// The CloudProfile does not list the Worker's region.
    #[error("region {region:?} is not offered by the CloudProfile (regions: {known})")]
    UnknownRegion {
        /// Region.
        region: String,
        /// Known regions, comma-separated.
        known: String,
    },
    /// The CloudProfile does not list a zone for the region.
    #[error(
        "pool {pool}: zone {zone:?} is not a zone of region {region:?} in the CloudProfile (zones: {known})"
    )]
    UnknownZone {
        /// Pool.
        pool: String,
        /// Zone.
        zone: String,
        /// Region.
        region: String,
        /// Known zones, comma-separated.
        known: String,
    },
    /// `maxSurge`/`maxUnavailable` is malformed.
    #[error("pool {pool}: {field} {source}")]
    IntOrPercent {
        /// Pool.
        pool: String,
        /// `maxSurge` or `maxUnavailable`.
        field: &'static str,
        /// Cause.
        #[source]
        source: PercentError,
    },
    /// The pool `providerConfig` is invalid.
    #[error("pool {pool}: invalid providerConfig")]
    ProviderConfig {
        /// Pool.
        pool: String,
        /// Cause.
        #[source]
        source: ConfigError,
    },
    /// No image to boot.
    #[error("pool {pool}: {source}")]
    MachineImage {
        /// Pool.
        pool: String,
        /// Cause.
        source: ImageError,
    },
    /// The in-place hash of an in-place pool cannot be computed.
    #[error("in-place update hash")]
    InPlaceHash(#[from] InPlaceHashError),
}

/// The zones a CloudProfile offers in `region`: `None` when the CloudProfile does not list
/// regions at all (nothing to check against), `Some(Err(known regions))` when it lists
/// regions but not this one.
fn offered_zones(
    cloud_profile: Option<&Value>,
    region: &str,
) -> Option<Result<Vec<String>, Vec<String>>> {
    let regions = cloud_profile?
        .pointer("/spec/regions")?
        .as_array()
        .filter(|r| !r.is_empty())?;
    let name_of = |v: &Value| v.get("name").and_then(Value::as_str).map(str::to_string);
    let Some(found) = regions
        .iter()
        .find(|r| name_of(r).as_deref() == Some(region))
    else {
        return Some(Err(regions.iter().filter_map(name_of).collect()));
    };
    let zones = found
        .get("zones")
        .and_then(Value::as_array)
        .map(|zones| zones.iter().filter_map(name_of).collect())
        .unwrap_or_default();
    Some(Ok(zones))
}

/// Validates `worker` in `namespace` against its shoot and CloudProfile (both optional: a
/// Worker outside a shoot namespace has neither).
pub fn validate(
    worker: &Worker,
    namespace: &str,
    shoot: Option<&ShootView>,
    cloud_profile: Option<&Value>,
) -> Result<WorkerInputs, ValidationError> {
    let spec = &worker.spec;
    let offered = match offered_zones(cloud_profile, &spec.region) {
        None => None,
        Some(Ok(zones)) => Some(zones),
        Some(Err(regions)) => {
            return Err(ValidationError::UnknownRegion {
                region: spec.region.clone(),
                known: regions.join(", "),
            });
        }
    };
    let technical_id = shoot
        .and_then(ShootView::technical_id)
        .filter(|id| !id.is_empty())
        .unwrap_or(namespace)
        .to_string();
    let context = PoolContext {
        technical_id: &technical_id,
        region: &spec.region,
        offered: offered.as_deref(),
        images: Sources {
            cloud_profile,
            provider_status: worker
                .status
                .as_ref()
                .and_then(|s| s.default.provider_status.as_ref()),
        },
        credentials: shoot.and_then(|s| s.status.credentials.as_ref()),
    };
    let mut seen = BTreeSet::new();
    let mut pools = Vec::with_capacity(spec.pools.len());
    for pool in &spec.pools {
        if !seen.insert(pool.name.as_str()) {
            return Err(ValidationError::DuplicatePool(pool.name.clone()));
        }
        let mut inputs = validate_pool(pool, &context)?;
        inputs.container_runtimes = shoot
            .and_then(|s| s.worker(&pool.name))
            .map(|w| w.container_runtime_types().map(str::to_string).collect())
            .unwrap_or_default();
        pools.push(inputs);
    }
    let credentials = SecretReference {
        name: spec.secret_ref.name.clone(),
        namespace: Some(
            spec.secret_ref
                .namespace
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| namespace.to_string()),
        ),
    };
    Ok(WorkerInputs {
        namespace: namespace.to_string(),
        worker_name: worker.metadata.name.clone().unwrap_or_default(),
        provider: spec.default.type_.clone(),
        region: spec.region.clone(),
        machine_placement: MachinePlacement::new(
            &technical_id,
            shoot.map(ShootView::ip_families).unwrap_or_default(),
        ),
        technical_id,
        credentials,
        hibernation_enabled: shoot.is_some_and(ShootView::is_hibernation_enabled),
        autoscaler_used: spec.pools.iter().any(|p| p.maximum > p.minimum),
        pools,
    })
}

/// What every pool is checked against.
struct PoolContext<'a> {
    technical_id: &'a str,
    region: &'a str,
    /// The CloudProfile's zones of the region, if it lists regions.
    offered: Option<&'a [String]>,
    images: Sources<'a>,
    credentials: Option<&'a ShootCredentialsView>,
}

fn validate_pool(
    pool: &WorkerPool,
    context: &PoolContext<'_>,
) -> Result<PoolInputs, ValidationError> {
    let PoolContext {
        technical_id,
        region,
        offered,
        ..
    } = *context;
    let name = || pool.name.clone();
    let node_agent_secret_name = pool
        .node_agent_secret_name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ValidationError::MissingNodeAgentSecretName { pool: name() })?;
    let image = pool
        .machine_image
        .clone()
        .filter(|i| !i.name.is_empty() && !i.version.is_empty())
        .ok_or_else(|| ValidationError::MissingMachineImage { pool: name() })?;
    if pool.minimum < 0 {
        return Err(ValidationError::NegativeMinimum {
            pool: name(),
            minimum: pool.minimum,
        });
    }
    if pool.minimum > pool.maximum {
        return Err(ValidationError::MinimumAboveMaximum {
            pool: name(),
            minimum: pool.minimum,
            maximum: pool.maximum,
        });
    }
    let config = config::validate(pool.provider_config.as_ref()).map_err(|source| {
        ValidationError::ProviderConfig {
            pool: name(),
            source,
        }
    })?;
    let zones: Vec<String> = if pool.zones.is_empty() {
        vec![region.to_string()]
    } else {
        let mut seen = BTreeSet::new();
        for zone in &pool.zones {
            if !seen.insert(zone) {
                return Err(ValidationError::DuplicateZone {
                    pool: name(),
                    zone: zone.clone(),
                });
            }
            if let Some(offered) = offered.filter(|offered| !offered.contains(zone)) {
                return Err(ValidationError::UnknownZone {
                    pool: name(),
                    zone: zone.clone(),
                    region: region.to_string(),
                    known: offered.join(", "),
                });
            }
        }
        pool.zones.clone()
    };
    let boot_image = boot_image(pool, &image, config.as_ref(), context)?;
    let extra = hash::provider_data(config.as_ref());
    let hash = in_place::class_hash(pool, node_agent_secret_name, &extra, context.credentials)?;
    let count = zones.len();
    let mut deployments = Vec::with_capacity(count);
    for (index, zone) in zones.into_iter().enumerate() {
        let percent_error = |field: &'static str| {
            move |source| ValidationError::IntOrPercent {
                pool: pool.name.clone(),
                field,
                source,
            }
        };
        let deployment = format!("{technical_id}-{}-z{}", pool.name, index + 1);
        deployments.push(DeploymentInputs {
            class_name: format!("{deployment}-{hash}"),
            name: deployment,
            zone,
            minimum: zones::distribute(index, pool.minimum, count),
            maximum: zones::distribute(index, pool.maximum, count),
            max_surge: zones::distribute_int_or_percent(
                index,
                &pool.max_surge,
                count,
                pool.maximum,
            )
            .map_err(percent_error("maxSurge"))?,
            max_unavailable: zones::distribute_int_or_percent(
                index,
                &pool.max_unavailable,
                count,
                pool.minimum,
            )
            .map_err(percent_error("maxUnavailable"))?,
            auto_preserve_failed_machine_max: pool
                .machine_controller_manager
                .as_ref()
                .and_then(|m| m.auto_preserve_failed_machine_max)
                .map(|max| zones::distribute(index, max, count)),
        });
    }
    Ok(PoolInputs {
        pool: pool.clone(),
        config,
        hash,
        image,
        boot_image,
        container_runtimes: Vec::new(),
        deployments,
    })
}

/// The image a pool's machines boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootImage {
    /// The pool's `providerConfig.image`.
    Override(String),
    /// Looked up for the pool's machine image and type ([`machine_image::resolve`]); it goes
    /// into the provider status.
    LookedUp(ResolvedImage),
}

impl BootImage {
    /// The image reference the driver boots.
    pub fn reference(&self) -> &str {
        match self {
            BootImage::Override(reference) => reference,
            BootImage::LookedUp(image) => &image.image,
        }
    }
}

/// The override of the pool's `providerConfig`, else the looked-up image.
fn boot_image(
    pool: &WorkerPool,
    image: &MachineImage,
    config: Option<&PoolConfig>,
    context: &PoolContext<'_>,
) -> Result<BootImage, ValidationError> {
    if let Some(reference) = config.and_then(|c| c.image.clone()) {
        return Ok(BootImage::Override(reference));
    }
    let resolved = machine_image::resolve(
        context.images,
        &image.name,
        &image.version,
        &pool.machine_type,
    )
    .map_err(|source| ValidationError::MachineImage {
        pool: pool.name.clone(),
        source,
    })?;
    Ok(BootImage::LookedUp(resolved))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn worker(pools: Value) -> Worker {
        serde_json::from_value(json!({
            "apiVersion": "extensions.gardener.cloud/v1alpha1",
            "kind": "Worker",
            "metadata": {"name": "worker", "namespace": "shoot--dev--a"},
            "spec": {
                "type": "local",
                "region": "eu-1",
                "secretRef": {"name": "cloudprovider"},
                "pools": pools,
            }
        }))
        .unwrap()
    }

    fn pool(extra: Value) -> Value {
        let mut pool = json!({
            "name": "a",
            "machineType": "m1",
            "machineImage": {"name": "debian", "version": "13.2"},
            "minimum": 3,
            "maximum": 7,
            "maxSurge": 1,
            "maxUnavailable": 0,
            "zones": ["eu-1a", "eu-1b", "eu-1c"],
            "userDataSecretRef": {"name": "osc-a", "key": "cloud_config"},
            "nodeAgentSecretName": "gna-a-1",
        });
        if let (Value::Object(pool), Value::Object(extra)) = (&mut pool, extra) {
            for (k, v) in extra {
                if v.is_null() {
                    pool.remove(&k);
                } else {
                    pool.insert(k, v);
                }
            }
        }
        pool
    }

    /// A CloudProfile that lists the image of the test pools (debian 13.2) and nothing else.
    pub(crate) fn images() -> Value {
        json!({"spec": {"providerConfig": {
            "apiVersion": "local.provider.extensions.gardener.cloud/v1alpha1",
            "kind": "CloudProfileConfig",
            "machineImages": [{"name": "debian", "versions": [
                {"version": "13.2", "image": "registry.local/node:13.2"}
            ]}]
        }}})
    }

    fn profile() -> Value {
        let mut profile = images();
        profile["spec"]["regions"] = json!([
            {"name": "eu-1", "zones": [{"name": "eu-1a"}, {"name": "eu-1b"}, {"name": "eu-1c"}]},
            {"name": "us-1"}
        ]);
        profile
    }

    fn shoot(technical_id: &str) -> ShootView {
        serde_json::from_value(json!({"status": {"technicalID": technical_id}})).unwrap()
    }

    #[test]
    fn names_sizes_and_defaults() {
        let w = worker(json!([pool(json!({}))]));
        let inputs = validate(&w, "ns", Some(&shoot("shoot--dev--a")), Some(&profile())).unwrap();
        assert_eq!(inputs.technical_id, "shoot--dev--a");
        assert_eq!(inputs.credentials.namespace.as_deref(), Some("ns"));
        assert!(inputs.autoscaler_used);
        let pool = &inputs.pools[0];
        let names: Vec<_> = pool.deployments.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "shoot--dev--a-a-z1",
                "shoot--dev--a-a-z2",
                "shoot--dev--a-a-z3"
            ]
        );
        assert_eq!(
            pool.deployments[0].class_name,
            format!("shoot--dev--a-a-z1-{}", pool.hash)
        );
        let mins: Vec<_> = pool.deployments.iter().map(|d| d.minimum).collect();
        let maxs: Vec<_> = pool.deployments.iter().map(|d| d.maximum).collect();
        assert_eq!(mins, [1, 1, 1]);
        assert_eq!(maxs, [3, 2, 2]);
        assert_eq!(pool.deployments[0].max_surge, IntOrString::Int(1));
        assert_eq!(pool.deployments[1].max_surge, IntOrString::Int(0));
    }

    #[test]
    fn without_zones_the_region_is_the_zone_and_without_shoot_the_namespace_the_prefix() {
        let w = worker(json!([pool(json!({"zones": null}))]));
        let inputs = validate(&w, "ns", None, Some(&images())).unwrap();
        let d = &inputs.pools[0].deployments;
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].zone, "eu-1");
        assert_eq!(d[0].name, "ns-a-z1");
        assert_eq!((d[0].minimum, d[0].maximum), (3, 7));
        assert!(!inputs.hibernation_enabled);
    }

    #[test]
    fn labels_taints_and_sizes_do_not_change_the_hash_but_the_secret_name_does() {
        let base = worker(json!([pool(json!({}))]));
        let hash = |w: &Worker| {
            validate(w, "ns", None, Some(&images())).unwrap().pools[0]
                .hash
                .clone()
        };
        let h = hash(&base);
        let relabelled = worker(json!([pool(json!({
            "labels": {"x": "y"},
            "annotations": {"a": "b"},
            "taints": [{"key": "k", "effect": "NoSchedule"}],
            "minimum": 1, "maximum": 9, "zones": ["eu-1a"],
        }))]));
        assert_eq!(hash(&relabelled), h);
        let rolled = worker(json!([pool(json!({"nodeAgentSecretName": "gna-a-2"}))]));
        assert_ne!(hash(&rolled), h);
        let reimaged = worker(json!([pool(json!({"providerConfig": {
            "apiVersion": config::API_VERSION, "kind": config::KIND, "image": "reg/m:2"
        }}))]));
        assert_ne!(hash(&reimaged), h);
    }

    #[test]
    fn bad_inputs_name_the_problem() {
        let cases: Vec<(Value, &str)> = vec![
            (
                json!([pool(json!({"nodeAgentSecretName": null}))]),
                "pool a: nodeAgentSecretName is not set",
            ),
            (
                json!([pool(json!({"machineImage": null}))]),
                "pool a: machineImage",
            ),
            (
                json!([pool(json!({"minimum": 5, "maximum": 2}))]),
                "pool a: minimum 5 is greater than maximum 2",
            ),
            (
                json!([pool(json!({"minimum": -1}))]),
                "pool a: minimum -1 is negative",
            ),
            (
                json!([pool(json!({"zones": ["eu-1a", "eu-1x"]}))]),
                "pool a: zone \"eu-1x\" is not a zone of region \"eu-1\" in the CloudProfile (zones: eu-1a, eu-1b, eu-1c)",
            ),
            (
                json!([pool(json!({"zones": ["eu-1a", "eu-1a"]}))]),
                "pool a: zone \"eu-1a\" is listed twice",
            ),
            (
                json!([pool(json!({"maxSurge": "lots"}))]),
                "pool a: maxSurge \"lots\" is neither a number nor a percentage",
            ),
            (
                json!([pool(json!({"providerConfig": {"kind": "Nope"}}))]),
                "pool a: invalid providerConfig",
            ),
            (
                json!([pool(json!({})), pool(json!({}))]),
                "pool name \"a\" is used twice",
            ),
        ];
        for (pools, expected) in cases {
            let error = validate(&worker(pools), "ns", None, Some(&profile())).unwrap_err();
            let text = crate::error_chain::chain(&error);
            assert!(
                text.contains(expected),
                "{text:?} should contain {expected:?}"
            );
        }
    }

    #[test]
    fn an_in_place_pool_gets_new_classes_when_its_image_version_changes() {
        let mut profile = images();
        profile["spec"]["providerConfig"]["machineImages"][0]["versions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"version": "13.3", "image": "registry.local/node:13.3"}));
        let hash = |strategy: &str, version: &str| {
            let w = worker(json!([pool(json!({
                "updateStrategy": strategy,
                "kubernetesVersion": "1.36.3",
                "machineImage": {"name": "debian", "version": version},
            }))]));
            let inputs = validate(&w, "ns", None, Some(&profile)).unwrap();
            let pool = &inputs.pools[0];
            (pool.hash.clone(), pool.boot_image.reference().to_string())
        };
        let (before, image_before) = hash("AutoInPlaceUpdate", "13.2");
        let (after, image_after) = hash("AutoInPlaceUpdate", "13.3");
        assert_ne!(before, after, "the in-place hash is part of the class name");
        assert_eq!(
            (image_before.as_str(), image_after.as_str()),
            ("registry.local/node:13.2", "registry.local/node:13.3")
        );
        // A rolling pool leaves that to gardenlet's node-agent secret name.
        assert_eq!(
            hash("AutoRollingUpdate", "13.2").0,
            hash("AutoRollingUpdate", "13.3").0
        );
    }

    #[test]
    fn an_image_the_cloud_profile_does_not_list_is_refused_and_an_override_needs_none() {
        let w = worker(json!([pool(
            json!({"machineImage": {"name": "debian", "version": "14.0"}})
        )]));
        let error = validate(&w, "ns", None, Some(&profile())).unwrap_err();
        assert_eq!(
            error.to_string(),
            "pool a: machine image \"debian\" in version \"14.0\" is not listed in the CloudProfile's providerConfig.machineImages (nor in the Worker's providerStatus)"
        );
        let w = worker(json!([pool(json!({
            "machineImage": {"name": "debian", "version": "14.0"},
            "providerConfig": {"apiVersion": "node.extensions.config.gardener.cloud/v1alpha1",
                "kind": "WorkerConfig", "image": "registry.local/custom:1"},
        }))]));
        let inputs = validate(&w, "ns", None, Some(&profile())).unwrap();
        assert_eq!(
            inputs.pools[0].boot_image,
            BootImage::Override("registry.local/custom:1".into())
        );
        assert_eq!(inputs.provider_status()["machineImages"], json!([]));
    }

    #[test]
    fn machines_are_placed_like_provider_local_places_them() {
        let w = worker(json!([pool(json!({}))]));
        let dual: ShootView = serde_json::from_value(json!({
            "spec": {"networking": {"ipFamilies": ["IPv6", "IPv4"]}},
            "status": {"technicalID": "shoot--dev--a"}
        }))
        .unwrap();
        let inputs = validate(&w, "ns", Some(&dual), Some(&profile())).unwrap();
        assert_eq!(
            inputs.machine_placement,
            MachinePlacement {
                namespace: "infra-shoot--dev--a".into(),
                ip_pool_v4: Some("shoot-machine-pods-shoot--dev--a-ipv4".into()),
                ip_pool_v6: Some("shoot-machine-pods-shoot--dev--a-ipv6".into()),
            }
        );
    }

    #[test]
    fn the_region_must_be_offered_when_the_profile_lists_regions() {
        let mut w = worker(json!([pool(json!({}))]));
        w.spec.region = "mars".into();
        let error = validate(&w, "ns", None, Some(&profile())).unwrap_err();
        assert_eq!(
            error.to_string(),
            "region \"mars\" is not offered by the CloudProfile (regions: eu-1, us-1)"
        );
        // A profile without regions checks nothing.
        assert!(validate(&w, "ns", None, Some(&images())).is_ok());
    }
}
