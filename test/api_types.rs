//! Integration: our API types against a real kube-apiserver with the CRDs from `crds/`.
//!
//! Creates a Cluster and one ContainerRuntime, OperatingSystemConfig and Worker, writes their
//! status through the status subresource and reads everything back.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use gardener_extension_node::api::{
    Cluster, ContainerRuntime, LastOperationState, OperatingSystemConfig, Worker,
};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use support::fixtures;

const MANAGER: &str = "api-types-test";

/// Creates `object`, patches its status (merge patch on `/status`) and returns what the
/// server then holds.
async fn create_and_patch_status<K>(api: &Api<K>, object: &K, status: serde_json::Value) -> K
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let created = api.create(&PostParams::default(), object).await.unwrap();
    let name = created.name_any();
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": status })),
    )
    .await
    .unwrap();
    api.get(&name).await.unwrap()
}

#[tokio::test]
async fn cluster_is_cluster_scoped_and_keeps_the_raw_shoot() {
    let env = support::env().await;
    let clusters: Api<Cluster> = Api::all(env.client.clone());
    clusters
        .create(&PostParams::default(), &fixtures::cluster(&env.namespace))
        .await
        .unwrap();
    let read = clusters.get(&env.namespace).await.unwrap();
    let shoot = read.shoot().unwrap();
    assert_eq!(shoot.technical_id(), Some(env.namespace.as_str()));
    assert!(!shoot.is_failed());
    let worker = shoot.worker("worker-a").unwrap();
    assert_eq!(
        worker.container_runtime_types().collect::<Vec<_>>(),
        ["gvisor"]
    );
    // Unknown fields of the embedded shoot survive the round trip (preserve-unknown-fields).
    assert_eq!(
        read.spec
            .shoot
            .pointer("/spec/provider/type")
            .and_then(|v| v.as_str()),
        Some("local")
    );
}

#[tokio::test]
async fn container_runtime_status_round_trips() {
    let env = support::env().await;
    let api: Api<ContainerRuntime> = Api::namespaced(env.client.clone(), &env.namespace);
    let object = fixtures::container_runtime(&env.namespace, "worker-a");
    let read = create_and_patch_status(&api, &object, fixtures::succeeded_status(1)).await;
    let status = read.status.as_ref().unwrap();
    assert_eq!(status.default.observed_generation, Some(1));
    let last = status.default.last_operation.as_ref().unwrap();
    assert_eq!(last.state, LastOperationState::Succeeded);
    assert_eq!(last.progress, 100);
    assert!(status.default.last_error.is_none());
    assert_eq!(read.spec.worker_pool.name, "worker-a");
    assert_eq!(read.spec.binary_path, "/var/bin/containerruntimes");

    // An error status carries the code, and a later success clears lastError (null).
    api.patch_status(
        &read.name_any(),
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": fixtures::error_status(1) })),
    )
    .await
    .unwrap();
    let failed = api.get(&read.name_any()).await.unwrap();
    let error = failed.status.unwrap().default.last_error.unwrap();
    assert_eq!(error.codes.len(), 1);
    assert_eq!(error.codes[0].as_str(), "ERR_CONFIGURATION_PROBLEM");
    api.patch_status(
        &read.name_any(),
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": fixtures::succeeded_status(1) })),
    )
    .await
    .unwrap();
    let recovered = api.get(&read.name_any()).await.unwrap();
    assert!(recovered.status.unwrap().default.last_error.is_none());
}

#[tokio::test]
async fn status_written_through_the_main_resource_is_ignored() {
    let env = support::env().await;
    let api: Api<ContainerRuntime> = Api::namespaced(env.client.clone(), &env.namespace);
    let created = api
        .create(
            &PostParams::default(),
            &fixtures::container_runtime(&env.namespace, "pool-x"),
        )
        .await
        .unwrap();
    let patched = api
        .patch(
            &created.name_any(),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": fixtures::succeeded_status(1) })),
        )
        .await
        .unwrap();
    assert!(
        patched.status.is_none(),
        "status must only change through /status: {:?}",
        patched.status
    );
}

#[tokio::test]
async fn operating_system_config_status_round_trips() {
    let env = support::env().await;
    let api: Api<OperatingSystemConfig> = Api::namespaced(env.client.clone(), &env.namespace);
    let object = fixtures::operating_system_config(&env.namespace, "osc-a-init", "provision");
    let mut status = fixtures::succeeded_status(1);
    status["cloudConfig"] = serde_json::json!({"secretRef": {"name": "osc-result-osc-a-init", "namespace": env.namespace}});
    status["extensionUnits"] = serde_json::json!([{"name": "containerd.service", "dropIns": [{"name": "override.conf", "content": "[Service]\nLimitNOFILE=1048576\n"}]}]);
    let read = create_and_patch_status(&api, &object, status).await;
    assert_eq!(read.spec.units.len(), 1);
    assert_eq!(read.spec.files.len(), 4);
    let status = read.status.unwrap();
    assert_eq!(
        status.cloud_config.unwrap().secret_ref.name,
        "osc-result-osc-a-init"
    );
    assert_eq!(status.extension_units[0].name, "containerd.service");
    assert_eq!(status.default.observed_generation, Some(1));
}

#[tokio::test]
async fn worker_status_round_trips_with_machine_deployments() {
    let env = support::env().await;
    let api: Api<Worker> = Api::namespaced(env.client.clone(), &env.namespace);
    let object = fixtures::worker(&env.namespace);
    let mut status = fixtures::succeeded_status(1);
    status["machineDeployments"] =
        serde_json::json!([{"name": "shoot-worker-a-z1", "minimum": 1, "maximum": 3}]);
    status["machineDeploymentsLastUpdateTime"] = serde_json::json!("2026-11-30T08:00:02Z");
    let read = create_and_patch_status(&api, &object, status).await;
    assert_eq!(read.spec.pools[0].name, "worker-a");
    let status = read.status.unwrap();
    assert_eq!(status.machine_deployments.len(), 1);
    assert_eq!(status.machine_deployments[0].maximum, 3);
    assert!(status.machine_deployments_last_update_time.is_some());
}

#[tokio::test]
async fn server_side_apply_of_typed_objects_is_idempotent() {
    let env = support::env().await;
    let api: Api<ContainerRuntime> = Api::namespaced(env.client.clone(), &env.namespace);
    let object = fixtures::container_runtime(&env.namespace, "pool-ssa");
    let params = PatchParams::apply(MANAGER).force();
    let first = api
        .patch("gvisor-pool-ssa", &params, &Patch::Apply(&object))
        .await
        .unwrap();
    let second = api
        .patch("gvisor-pool-ssa", &params, &Patch::Apply(&object))
        .await
        .unwrap();
    assert_eq!(
        first.resource_version(),
        second.resource_version(),
        "no-op apply must not write"
    );
    assert_eq!(second.metadata.generation, Some(1));
}
