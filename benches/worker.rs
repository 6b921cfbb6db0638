//! Benchmark: reconcile time of the Worker actuator for a Worker with 20 pools × 3 zones
//! (60 MachineDeployments, 60 MachineClasses, 60 class secrets) on a real kube-apiserver.
//! Writes its section of `docs/benchmarks.md`.
//!
//! The actuator runs in this process (the operator's code, not a copy) so each reconcile run
//! is timed on its own:
//!
//! - **create**: the first run on a fresh Worker — reads 20 user data Secrets, applies 180
//!   objects, writes the status and finds the rollout not done (`Pending`); one sample per
//!   fresh namespace;
//! - **poll while rolling out**: a repeated run while MCM has not finished — what every poll
//!   costs (it lists; the objects and the status are unchanged, so none is written);
//! - **rolled out**: a run after the MCM stand-in has created a MachineSet per deployment and
//!   reported it available — the run ends `Done`, including the cleanup scan.
//!
//! Run: `cargo bench --bench worker`.

#![allow(clippy::unwrap_used, clippy::panic, dead_code)] // a measuring tool, not a controller

#[path = "../test/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use gardener_extension_node::api::machine::{MachineDeployment, MachineSet};
use gardener_extension_node::api::{Cluster, LastOperationType, Worker};
use gardener_extension_node::controllers::worker::{Timings, WorkerActuator};
use gardener_extension_node::extension::events::EventPublisher;
use gardener_extension_node::extension::{Actuator, ClusterContext, Outcome, Request};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use support::fixtures;

const POOLS: usize = 20;
const ZONES: usize = 3;
const CREATE_SAMPLES: usize = 5;
const RUN_SAMPLES: usize = 10;

async fn prepare_namespace(client: &Client, namespace: &str) -> (Worker, ClusterContext) {
    support::create_namespace(client, namespace).await;
    let cluster = Api::<Cluster>::all(client.clone())
        .create(&PostParams::default(), &fixtures::cluster(namespace))
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let template = fixtures::worker_json(namespace)["spec"]["pools"][0].clone();
    let mut pools = Vec::new();
    for i in 0..POOLS {
        let secret_name = format!("osc-result-pool-{i}-init");
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": secret_name, "namespace": namespace},
            "stringData": {"cloud_config": format!("#!/bin/bash\necho pool {i}\n")}
        }))
        .unwrap();
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        let mut pool = template.clone();
        pool["name"] = json!(format!("pool-{i:02}"));
        pool["zones"] = json!((0..ZONES).map(|z| z.to_string()).collect::<Vec<_>>());
        pool["minimum"] = json!(3);
        pool["maximum"] = json!(6);
        pool["userDataSecretRef"]["name"] = json!(secret_name);
        pool["nodeAgentSecretName"] =
            json!(format!("gardener-node-agent-pool-{i:02}-0123456789abcdef"));
        pool["nodeTemplate"] = json!({"capacity": {"cpu": "4", "memory": "16Gi"}});
        pools.push(pool);
    }
    let mut worker = fixtures::worker_json(namespace);
    worker["spec"]["pools"] = Value::Array(pools);
    let worker = Api::<Worker>::namespaced(client.clone(), namespace)
        .create(
            &PostParams::default(),
            &serde_json::from_value(worker).unwrap(),
        )
        .await
        .unwrap();
    (worker, ClusterContext::new(cluster).unwrap())
}

/// One timed reconcile run on the current Worker.
async fn timed_run(
    actuator: &WorkerActuator,
    client: &Client,
    namespace: &str,
    cluster: &ClusterContext,
    operation: LastOperationType,
) -> (Duration, Outcome) {
    let worker = Api::<Worker>::namespaced(client.clone(), namespace)
        .get("worker")
        .await
        .unwrap();
    let request = Request {
        object: &worker,
        cluster: Some(cluster),
        operation,
    };
    let started = Instant::now();
    let outcome = actuator.reconcile(&request).await.unwrap();
    (started.elapsed(), outcome)
}

/// What MCM would do: a MachineSet per deployment with its class, and an available status.
async fn roll_out(client: &Client, namespace: &str) {
    let deployments: Api<MachineDeployment> = Api::namespaced(client.clone(), namespace);
    let sets: Api<MachineSet> = Api::namespaced(client.clone(), namespace);
    for deployment in deployments.list(&ListParams::default()).await.unwrap() {
        let name = deployment.name_any();
        let value = serde_json::to_value(&deployment).unwrap();
        let set = fixtures::mcm_machine_set_json(
            namespace,
            &value,
            &deployment.uid().unwrap(),
            &format!("{name}-set"),
            deployment.spec.replicas.unwrap_or_default(),
        );
        sets.create(
            &PostParams::default(),
            &serde_json::from_value(set).unwrap(),
        )
        .await
        .unwrap();
        let status = fixtures::mcm_deployment_status_json(
            deployment.metadata.generation.unwrap_or_default(),
            deployment.spec.replicas.unwrap_or_default(),
        );
        deployments
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
            .unwrap();
    }
}

fn stats(samples: &mut [Duration]) -> String {
    samples.sort();
    let median = samples[samples.len() / 2];
    format!(
        "{median:.1?} | {:.1?} | {:.1?} | {}",
        samples[0],
        samples[samples.len() - 1],
        samples.len()
    )
}

#[tokio::main]
async fn main() {
    if !support::benchmarks::invoked_by_cargo_bench() {
        return;
    }
    let env = support::env().await;
    let client = env.client.clone();
    let actuator = WorkerActuator::with_timings(
        client.clone(),
        EventPublisher::new(client.clone()),
        Timings::default(),
    );

    let mut create = Vec::new();
    let mut namespaces = Vec::new();
    for sample in 0..CREATE_SAMPLES {
        let namespace = format!("shoot--bench--worker-{sample}");
        let (_, cluster) = prepare_namespace(&client, &namespace).await;
        let (took, outcome) = timed_run(
            &actuator,
            &client,
            &namespace,
            &cluster,
            LastOperationType::Create,
        )
        .await;
        assert!(matches!(outcome, Outcome::Pending { .. }), "{outcome:?}");
        create.push(took);
        namespaces.push((namespace, cluster));
    }
    let (namespace, cluster) = &namespaces[0];
    let deployments = Api::<MachineDeployment>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    assert_eq!(deployments, POOLS * ZONES);

    let mut polling = Vec::new();
    for _ in 0..RUN_SAMPLES {
        let (took, outcome) = timed_run(
            &actuator,
            &client,
            namespace,
            cluster,
            LastOperationType::Create,
        )
        .await;
        assert!(matches!(outcome, Outcome::Pending { .. }), "{outcome:?}");
        polling.push(took);
    }

    roll_out(&client, namespace).await;
    let mut done = Vec::new();
    for _ in 0..RUN_SAMPLES {
        let (took, outcome) = timed_run(
            &actuator,
            &client,
            namespace,
            cluster,
            LastOperationType::Reconcile,
        )
        .await;
        assert!(matches!(outcome, Outcome::Done { .. }), "{outcome:?}");
        done.push(took);
    }

    let section = format!(
        "## Worker: 20 pools × 3 zones\n\n\
         Command: `cargo bench --bench worker` (the Worker actuator in the bench process, release \
         profile, against a real kube-apiserver {kube} + etcd on loopback, {cores} cores; per run \
         {deployments} MachineDeployments, {deployments} MachineClasses and {deployments} class \
         secrets are server-side applied {parallel} at a time, and events are published).\n\n\
         | reconcile run | median | min | max | samples |\n|---|---|---|---|---|\n\
         | create: fresh Worker → 180 objects applied, status written, `Pending` | {create} |\n\
         | poll while rolling out (lists only; objects and status unchanged, `Pending`) | {polling} |\n\
         | rolled out → `Done` (rollout check and cleanup scan) | {done} |\n\n\
         Measured on {date}.\n",
        kube = "v1.36.3",
        cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        parallel = gardener_extension_node::controllers::worker::PARALLEL,
        create = stats(&mut create),
        polling = stats(&mut polling),
        done = stats(&mut done),
        date = chrono::Utc::now().format("%Y-%m-%d"),
    );
    println!("{section}");
    support::benchmarks::write_section("worker", &section);
}
