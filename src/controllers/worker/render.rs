//! Second step (pure): validated [`WorkerInputs`] plus each pool's user data → the
//! machine-controller-manager objects of every pool and zone.
//!
//! Per deployment:
//!
//! - a class **Secret** `<class>` labelled `gardener.cloud/purpose=machineclass` with
//!   `userData` (the bytes of the pool's `userDataSecretRef`);
//! - a **MachineClass** `<class>`: `provider` = the Worker type, `providerSpec` exactly as
//!   gardener's provider-local Worker writes it, so its driver (and ours in the tests) decodes
//!   it: `image` (the string [`super::machine_image`] looked up, or the pool's `providerConfig`
//!   override), `namespace` and `ipPoolNameV4`/`V6` ([`super::validate::MachinePlacement`]);
//!   region, zone and machine type are in the node template; `secretRef` → the class secret,
//!   `credentialsSecretRef` → the Worker's `secretRef`, `nodeTemplate` from the pool's
//!   `nodeTemplate` (capacity for the cluster-autoscaler's scale-from-zero; omitted when the
//!   pool has none);
//! - a **MachineDeployment** `<technical id>-<pool>-z<n>` without `replicas` (decided later
//!   by [`super::replicas`] from what exists): label `worker.gardener.cloud/pool`, the
//!   cluster-autoscaler annotations of the pool, `minReadySeconds: 500`,
//!   `revisionHistoryLimit: 0`, strategy `RollingUpdate` (or `InPlaceUpdate` with
//!   orchestration `Auto`/`Manual` for the in-place update strategies) with this zone's share
//!   of `maxSurge`/`maxUnavailable`, selector and template label `name=<deployment>`, class
//!   reference, the pool's timeouts, and a node template with the pool's labels, annotations
//!   and taints. The node labels always include `worker.gardener.cloud/pool`,
//!   `worker.gardener.cloud/gardener-node-agent-secret-name` and
//!   `containerruntime.worker.gardener.cloud/<type>=true` for each extra runtime the shoot
//!   configures for the pool (values given in the pool's labels win; gardenlet sends the
//!   same ones).
//!
//! The same function backs the operator and `gardener-extension-node render worker`.

use std::collections::BTreeMap;

use chrono::{DateTime, Timelike, Utc};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::ObjectMeta;
use serde_json::{Map, Value, json};

use super::validate::{DeploymentInputs, PoolInputs, WorkerInputs};
use super::{
    ANNOTATION_MAX_NODE_PROVISION_TIME, ANNOTATION_SCALE_DOWN_GPU_UTILIZATION_THRESHOLD,
    ANNOTATION_SCALE_DOWN_UNNEEDED_TIME, ANNOTATION_SCALE_DOWN_UNREADY_TIME,
    ANNOTATION_SCALE_DOWN_UTILIZATION_THRESHOLD, DATA_KEY_USER_DATA, LABEL_NAME, LABEL_PURPOSE,
    LABEL_WORKER_NAME, MIN_READY_SECONDS, PURPOSE_MACHINE_CLASS, REVISION_HISTORY_LIMIT,
};
use crate::api::common::SecretReference;
use crate::api::constants::{
    LABEL_NODE_AGENT_SECRET_NAME, LABEL_PREFIX_CONTAINER_RUNTIME, LABEL_WORKER_POOL,
};
use crate::api::machine::{
    ClassSpec, InPlaceUpdateMachineDeployment, MachineClass, MachineClassFields,
    MachineClassNodeTemplate, MachineConfiguration, MachineDeployment, MachineDeploymentSpec,
    MachineDeploymentStrategy, MachineSpec, MachineTemplateSpec, NodeTemplateNodeSpec,
    NodeTemplateSpec, ORCHESTRATION_AUTO, ORCHESTRATION_MANUAL, RollingUpdateMachineDeployment,
    STRATEGY_IN_PLACE_UPDATE, STRATEGY_ROLLING_UPDATE, TemplateMetadata,
};
use crate::api::worker::{MachineUpdateStrategy, WorkerMachineDeployment, WorkerPool};

/// Default CPU architecture of a MachineClass node template.
pub const DEFAULT_ARCHITECTURE: &str = "amd64";

/// Everything rendered for one pool and zone.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedDeployment {
    /// Deployment name.
    pub name: String,
    /// Pool name.
    pub pool: String,
    /// Zone.
    pub zone: String,
    /// MachineClass (and class secret) name.
    pub class_name: String,
    /// This zone's minimum.
    pub minimum: i32,
    /// This zone's maximum.
    pub maximum: i32,
    /// The pool priority.
    pub priority: Option<i32>,
    /// This zone's share of `autoPreserveFailedMachineMax`.
    pub auto_preserve_failed_machine_max: Option<i32>,
    /// The class secret.
    pub class_secret: Secret,
    /// The MachineClass.
    pub class: MachineClass,
    /// The MachineDeployment, `spec.replicas` unset.
    pub deployment: MachineDeployment,
}

impl RenderedDeployment {
    /// The deployment with `replicas` set, ready to apply.
    pub fn deployment_with_replicas(&self, replicas: i32) -> MachineDeployment {
        let mut deployment = self.deployment.clone();
        deployment.spec.replicas = Some(replicas);
        deployment
    }
}

/// Renders every pool and zone. `user_data` maps pool names to their user data; a pool
/// without an entry gets a class secret without data (only `render worker` does that, when
/// it has no access to the seed).
pub fn render(
    inputs: &WorkerInputs,
    user_data: &BTreeMap<String, Vec<u8>>,
) -> Vec<RenderedDeployment> {
    inputs
        .pools
        .iter()
        .flat_map(|pool| {
            let data = user_data.get(&pool.pool.name);
            pool.deployments
                .iter()
                .map(move |deployment| render_one(inputs, pool, deployment, data))
        })
        .collect()
}

/// The `status.machineDeployments` entries for `rendered`.
pub fn status_entries(rendered: &[RenderedDeployment]) -> Vec<WorkerMachineDeployment> {
    rendered
        .iter()
        .map(|d| WorkerMachineDeployment {
            name: d.name.clone(),
            minimum: d.minimum,
            maximum: d.maximum,
            priority: d.priority,
            auto_preserve_failed_machine_max: d.auto_preserve_failed_machine_max,
        })
        .collect()
}

fn render_one(
    inputs: &WorkerInputs,
    pool: &PoolInputs,
    deployment: &DeploymentInputs,
    user_data: Option<&Vec<u8>>,
) -> RenderedDeployment {
    let spec = &pool.pool;
    RenderedDeployment {
        name: deployment.name.clone(),
        pool: spec.name.clone(),
        zone: deployment.zone.clone(),
        class_name: deployment.class_name.clone(),
        minimum: deployment.minimum,
        maximum: deployment.maximum,
        priority: spec.priority,
        auto_preserve_failed_machine_max: deployment.auto_preserve_failed_machine_max,
        class_secret: class_secret(inputs, pool, deployment, user_data),
        class: machine_class(inputs, pool, deployment),
        deployment: machine_deployment(inputs, pool, deployment),
    }
}

fn class_secret(
    inputs: &WorkerInputs,
    pool: &PoolInputs,
    deployment: &DeploymentInputs,
    user_data: Option<&Vec<u8>>,
) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(deployment.class_name.clone()),
            namespace: Some(inputs.namespace.clone()),
            labels: Some(BTreeMap::from([
                (LABEL_PURPOSE.to_string(), PURPOSE_MACHINE_CLASS.to_string()),
                (LABEL_WORKER_POOL.to_string(), pool.pool.name.clone()),
            ])),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".to_string()),
        data: user_data.map(|data| {
            BTreeMap::from([(DATA_KEY_USER_DATA.to_string(), ByteString(data.clone()))])
        }),
        ..Secret::default()
    }
}

/// provider-local's `ProviderSpec`, as its Worker writes it: the image to boot, the namespace
/// of the machine objects and the IP pools of the shoot's IP families.
fn provider_spec(inputs: &WorkerInputs, pool: &PoolInputs) -> Value {
    let placement = &inputs.machine_placement;
    let mut spec = Map::new();
    spec.insert("image".into(), json!(pool.boot_image.reference()));
    spec.insert("namespace".into(), json!(placement.namespace));
    for (key, name) in [
        ("ipPoolNameV4", &placement.ip_pool_v4),
        ("ipPoolNameV6", &placement.ip_pool_v6),
    ] {
        if let Some(name) = name {
            spec.insert(key.into(), json!(name));
        }
    }
    Value::Object(spec)
}

fn machine_class(
    inputs: &WorkerInputs,
    pool: &PoolInputs,
    deployment: &DeploymentInputs,
) -> MachineClass {
    let spec = &pool.pool;
    let node_template = spec
        .node_template
        .as_ref()
        .map(|t| MachineClassNodeTemplate {
            capacity: t.capacity.clone(),
            virtual_capacity: t.virtual_capacity.clone(),
            instance_type: spec.machine_type.clone(),
            region: inputs.region.clone(),
            zone: deployment.zone.clone(),
            architecture: Some(
                spec.architecture
                    .clone()
                    .unwrap_or_else(|| DEFAULT_ARCHITECTURE.to_string()),
            ),
        });
    let mut class = MachineClass::new(
        &deployment.class_name,
        MachineClassFields {
            provider_spec: provider_spec(inputs, pool),
            secret_ref: Some(SecretReference {
                name: deployment.class_name.clone(),
                namespace: Some(inputs.namespace.clone()),
            }),
            credentials_secret_ref: Some(inputs.credentials.clone()),
            provider: Some(inputs.provider.clone()),
            node_template,
        },
    );
    class.metadata.namespace = Some(inputs.namespace.clone());
    class.metadata.labels = Some(BTreeMap::from([(
        LABEL_WORKER_POOL.to_string(),
        spec.name.clone(),
    )]));
    class
}

/// Node labels: the pool's, plus the well-known ones the nodes must carry.
fn node_labels(pool: &PoolInputs) -> BTreeMap<String, String> {
    let spec = &pool.pool;
    let mut labels = spec.labels.clone();
    let mut ensure = |key: String, value: String| {
        labels.entry(key).or_insert(value);
    };
    ensure(LABEL_WORKER_POOL.to_string(), spec.name.clone());
    if let Some(secret) = &spec.node_agent_secret_name {
        ensure(LABEL_NODE_AGENT_SECRET_NAME.to_string(), secret.clone());
    }
    for runtime in &pool.container_runtimes {
        ensure(
            format!("{LABEL_PREFIX_CONTAINER_RUNTIME}{runtime}"),
            "true".to_string(),
        );
    }
    labels
}

fn autoscaler_annotations(spec: &WorkerPool) -> BTreeMap<String, String> {
    let Some(options) = &spec.cluster_autoscaler else {
        return BTreeMap::new();
    };
    [
        (
            ANNOTATION_SCALE_DOWN_UTILIZATION_THRESHOLD,
            &options.scale_down_utilization_threshold,
        ),
        (
            ANNOTATION_SCALE_DOWN_GPU_UTILIZATION_THRESHOLD,
            &options.scale_down_gpu_utilization_threshold,
        ),
        (
            ANNOTATION_SCALE_DOWN_UNNEEDED_TIME,
            &options.scale_down_unneeded_time,
        ),
        (
            ANNOTATION_SCALE_DOWN_UNREADY_TIME,
            &options.scale_down_unready_time,
        ),
        (
            ANNOTATION_MAX_NODE_PROVISION_TIME,
            &options.max_node_provision_time,
        ),
    ]
    .into_iter()
    .filter_map(|(key, value)| value.as_ref().map(|v| (key.to_string(), v.clone())))
    .collect()
}

fn machine_configuration(spec: &WorkerPool) -> MachineConfiguration {
    let Some(settings) = &spec.machine_controller_manager else {
        return MachineConfiguration::default();
    };
    MachineConfiguration {
        drain_timeout: settings.machine_drain_timeout.clone(),
        health_timeout: settings.machine_health_timeout.clone(),
        creation_timeout: settings.machine_creation_timeout.clone(),
        in_place_update_timeout: settings.in_place_update_timeout.clone(),
        disable_health_timeout: settings.disable_health_timeout,
        machine_preserve_timeout: settings.machine_preserve_timeout.clone(),
        max_evict_retries: settings.max_evict_retries,
        node_conditions: (!settings.node_conditions.is_empty())
            .then(|| settings.node_conditions.join(",")),
    }
}

fn strategy(spec: &WorkerPool, deployment: &DeploymentInputs) -> MachineDeploymentStrategy {
    let (surge, unavailable) = (
        Some(deployment.max_surge.clone()),
        Some(deployment.max_unavailable.clone()),
    );
    let in_place = |orchestration: &str| MachineDeploymentStrategy {
        type_: Some(STRATEGY_IN_PLACE_UPDATE.to_string()),
        rolling_update: None,
        in_place_update: Some(InPlaceUpdateMachineDeployment {
            max_surge: surge.clone(),
            max_unavailable: unavailable.clone(),
            orchestration_type: Some(orchestration.to_string()),
        }),
    };
    match spec.update_strategy {
        Some(MachineUpdateStrategy::AutoInPlaceUpdate) => in_place(ORCHESTRATION_AUTO),
        Some(MachineUpdateStrategy::ManualInPlaceUpdate) => in_place(ORCHESTRATION_MANUAL),
        Some(MachineUpdateStrategy::AutoRollingUpdate) | None => MachineDeploymentStrategy {
            type_: Some(STRATEGY_ROLLING_UPDATE.to_string()),
            rolling_update: Some(RollingUpdateMachineDeployment {
                max_surge: surge.clone(),
                max_unavailable: unavailable.clone(),
            }),
            in_place_update: None,
        },
    }
}

fn machine_deployment(
    inputs: &WorkerInputs,
    pool: &PoolInputs,
    deployment: &DeploymentInputs,
) -> MachineDeployment {
    let spec = &pool.pool;
    let selector = BTreeMap::from([(LABEL_NAME.to_string(), deployment.name.clone())]);
    let mut template_labels = selector.clone();
    let strategy = strategy(spec, deployment);
    if strategy.type_.as_deref() == Some(STRATEGY_IN_PLACE_UPDATE) {
        template_labels.insert(LABEL_WORKER_NAME.to_string(), inputs.worker_name.clone());
    }
    let annotations = autoscaler_annotations(spec);
    let taints = spec.taints.clone();
    let mut object = MachineDeployment::new(
        &deployment.name,
        MachineDeploymentSpec {
            replicas: None,
            selector: Some(LabelSelector {
                match_labels: Some(selector),
                match_expressions: None,
            }),
            template: MachineTemplateSpec {
                metadata: Some(TemplateMetadata {
                    labels: template_labels,
                    annotations: BTreeMap::new(),
                }),
                spec: Some(MachineSpec {
                    class: Some(ClassSpec {
                        api_group: None,
                        kind: "MachineClass".to_string(),
                        name: deployment.class_name.clone(),
                    }),
                    provider_id: None,
                    node_template: Some(NodeTemplateSpec {
                        metadata: Some(TemplateMetadata {
                            labels: node_labels(pool),
                            annotations: spec.annotations.clone(),
                        }),
                        spec: (!taints.is_empty()).then_some(NodeTemplateNodeSpec { taints }),
                    }),
                    configuration: machine_configuration(spec),
                }),
            },
            strategy: Some(strategy),
            min_ready_seconds: Some(MIN_READY_SECONDS),
            revision_history_limit: Some(REVISION_HISTORY_LIMIT),
            paused: None,
            progress_deadline_seconds: None,
            auto_preserve_failed_machine_max: deployment.auto_preserve_failed_machine_max,
        },
    );
    object.metadata.namespace = Some(inputs.namespace.clone());
    object.metadata.labels = Some(BTreeMap::from([(
        LABEL_WORKER_POOL.to_string(),
        spec.name.clone(),
    )]));
    object.metadata.annotations = (!annotations.is_empty()).then_some(annotations);
    object
}

/// The `machineDeploymentsLastUpdateTime` to write: now (whole seconds, the precision of the
/// field), but strictly after `previous`, because gardenlet waits for the value to advance
/// past the one it saw before asking for a reconcile.
pub fn status_update_time(previous: Option<DateTime<Utc>>, now: DateTime<Utc>) -> DateTime<Utc> {
    let now = now.with_nanosecond(0).unwrap_or(now);
    match previous {
        Some(previous) if previous >= now => previous + chrono::Duration::seconds(1),
        _ => now,
    }
}

#[cfg(test)]
mod tests {
    use super::super::validate::tests::images;
    use super::super::validate::validate;
    use super::*;
    use crate::api::ShootView;
    use crate::api::worker::Worker;

    fn sample() -> (Worker, ShootView) {
        let worker: Worker = serde_norway::from_str(
            r#"
apiVersion: extensions.gardener.cloud/v1alpha1
kind: Worker
metadata: {name: worker, namespace: shoot--dev--a}
spec:
  type: local
  region: local
  secretRef: {name: cloudprovider, namespace: shoot--dev--a}
  pools:
  - name: pool-a
    machineType: m-small
    machineImage: {name: debian, version: "13.2"}
    minimum: 1
    maximum: 3
    maxSurge: 1
    maxUnavailable: 0
    zones: ["1", "2"]
    labels: {custom: label}
    annotations: {custom: annotation}
    taints: [{key: dedicated, value: gvisor, effect: NoSchedule}]
    userDataSecretRef: {name: osc-pool-a, key: cloud_config}
    nodeAgentSecretName: gardener-node-agent-pool-a-1a2b3
    nodeTemplate:
      capacity: {cpu: "2", memory: 4Gi, gpu: "0"}
    machineControllerManager:
      machineDrainTimeout: 2h0m0s
      maxEvictRetries: 10
      nodeConditions: [KernelDeadlock, ReadonlyFilesystem]
    clusterAutoscaler:
      scaleDownUtilizationThreshold: "0.4"
      maxNodeProvisionTime: 20m0s
    priority: 3
    providerConfig:
      apiVersion: node.extensions.config.gardener.cloud/v1alpha1
      kind: WorkerConfig
      image: registry.example/machine:v1
"#,
        )
        .unwrap();
        let shoot: ShootView = serde_json::from_value(serde_json::json!({
            "spec": {"provider": {"workers": [{
                "name": "pool-a",
                "cri": {"name": "containerd", "containerRuntimes": [{"type": "gvisor"}]}
            }]}},
            "status": {"technicalID": "shoot--dev--a"}
        }))
        .unwrap();
        (worker, shoot)
    }

    fn rendered() -> Vec<RenderedDeployment> {
        let (worker, shoot) = sample();
        let inputs = validate(&worker, "shoot--dev--a", Some(&shoot), Some(&images())).unwrap();
        let user_data = BTreeMap::from([("pool-a".to_string(), b"#!/bin/bash\n".to_vec())]);
        render(&inputs, &user_data)
    }

    #[test]
    fn one_deployment_class_and_secret_per_zone() {
        let rendered = rendered();
        assert_eq!(rendered.len(), 2);
        let first = &rendered[0];
        assert_eq!(first.name, "shoot--dev--a-pool-a-z1");
        assert!(first.class_name.starts_with("shoot--dev--a-pool-a-z1-"));
        assert_eq!(first.class.metadata.name, first.class_secret.metadata.name);
        assert_eq!((first.minimum, first.maximum), (1, 2));
        assert_eq!((rendered[1].minimum, rendered[1].maximum), (0, 1));
        let labels = &first
            .deployment
            .spec
            .template
            .spec
            .as_ref()
            .unwrap()
            .node_template
            .as_ref()
            .unwrap()
            .metadata
            .as_ref()
            .unwrap()
            .labels;
        assert_eq!(
            labels["containerruntime.worker.gardener.cloud/gvisor"],
            "true"
        );
        assert_eq!(
            labels["worker.gardener.cloud/gardener-node-agent-secret-name"],
            "gardener-node-agent-pool-a-1a2b3"
        );
        assert_eq!(labels["custom"], "label");
        assert_eq!(first.deployment.spec.replicas, None);
        assert_eq!(first.deployment_with_replicas(2).spec.replicas, Some(2));
    }

    #[test]
    fn status_entries_report_every_deployment() {
        let entries = status_entries(&rendered());
        let names: Vec<_> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            ["shoot--dev--a-pool-a-z1", "shoot--dev--a-pool-a-z2"]
        );
        assert_eq!(entries[0].priority, Some(3));
    }

    #[test]
    fn secret_has_no_data_without_user_data() {
        let (worker, shoot) = sample();
        let inputs = validate(&worker, "shoot--dev--a", Some(&shoot), Some(&images())).unwrap();
        let rendered = render(&inputs, &BTreeMap::new());
        assert!(rendered[0].class_secret.data.is_none());
    }

    #[test]
    fn in_place_pools_get_the_in_place_strategy_and_the_worker_label() {
        let (mut worker, shoot) = sample();
        worker.spec.pools[0].update_strategy = Some(MachineUpdateStrategy::ManualInPlaceUpdate);
        worker.spec.pools[0].kubernetes_version = Some("1.36.3".into());
        let inputs = validate(&worker, "shoot--dev--a", Some(&shoot), Some(&images())).unwrap();
        let rendered = render(&inputs, &BTreeMap::new());
        let spec = &rendered[0].deployment.spec;
        let strategy = spec.strategy.as_ref().unwrap();
        assert_eq!(strategy.type_.as_deref(), Some("InPlaceUpdate"));
        assert_eq!(
            strategy
                .in_place_update
                .as_ref()
                .unwrap()
                .orchestration_type
                .as_deref(),
            Some("Manual")
        );
        assert_eq!(
            spec.template.metadata.as_ref().unwrap().labels["worker.gardener.cloud/name"],
            "worker"
        );
    }

    #[test]
    fn the_status_time_always_advances() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let now = at("2026-01-01T10:00:00.700Z");
        assert_eq!(status_update_time(None, now), at("2026-01-01T10:00:00Z"));
        assert_eq!(
            status_update_time(Some(at("2026-01-01T09:00:00Z")), now),
            at("2026-01-01T10:00:00Z")
        );
        assert_eq!(
            status_update_time(Some(at("2026-01-01T10:00:00Z")), now),
            at("2026-01-01T10:00:01Z")
        );
    }

    #[test]
    fn machine_objects_snapshot() {
        let rendered = rendered();
        let first = &rendered[0];
        insta::assert_yaml_snapshot!("class_secret", &first.class_secret);
        insta::assert_yaml_snapshot!("machine_class", &first.class);
        insta::assert_yaml_snapshot!("machine_deployment", &first.deployment_with_replicas(1));
    }
}
