//! Integration: the Worker controller — the real operator binary with `--controllers=worker`
//! — against a real kube-apiserver with the machine.sapcloud.io CRDs.
//!
//! # Who plays machine-controller-manager
//!
//! There is no MCM (and no garbage collector) in the test control plane. Its part is played
//! by `support::mcm::Mcm`, through the same API and in the way MCM does it:
//!
//! - for each MachineDeployment it keeps one MachineSet `<deployment>-<class hash>` with the
//!   deployment's template, owned by the deployment — adopting an unowned set of that name
//!   (label `name=<deployment>`), as MCM does after a restore;
//! - it scales that set's Machines to the deployment's `spec.replicas`, adopting unowned
//!   machines with the deployment's `name` label and class, creating `<set>-<i>` (joined at
//!   once: label `node=node-<machine>`, a provider ID) or deleting surplus ones;
//! - sets of other classes of the deployment are deleted with their machines (a rolling
//!   update that has finished);
//! - it reports the status MCM reports: on the set `replicas`/`readyReplicas`/…, on the
//!   deployment `observedGeneration`, `replicas`, `updatedReplicas`, `availableReplicas`,
//!   `unavailableReplicas: 0` and the conditions `Available=True`, `Progressing=True`;
//! - once a deployment is gone it deletes its sets and machines (MCM's job through its
//!   finalizers), remembering the labels each machine had;
//! - it puts its finalizer on the credentials secret a MachineClass references and removes it
//!   when no class references it any more (`Mcm::sync_credentials`).
//!
//! gardenlet's part (annotations, deletion confirmation, `status.state` on restore, the
//! shallow delete after migrate, hibernation in the Cluster) is played by the tests; the
//! machine state it records and restores comes from gardener's own code (the `machine-state`
//! program of `hack/envtest/components`, `support::gardener::gardenlet_machine_state`).

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use gardener_extension_node::api::machine::{Machine, MachineClass, MachineDeployment, MachineSet};
use gardener_extension_node::api::{Cluster, LastOperationState, LastOperationType, Worker};
use gardener_extension_node::controllers::worker::state;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};
use support::gardener::{annotate, check_ready, confirm_and_delete};
use support::mcm::{Mcm, class_of, delete, err, names};
use support::operator::OperatorProcess;
use support::{TestEnv, fixtures, wait_for};

const WORKER: &str = "worker";
const USER_DATA_SECRET: &str = "osc-result-pool-a-init";
const USER_DATA: &[u8] = b"#!/bin/bash\necho provisioned\n";
const WAIT: Duration = Duration::from_secs(90);

static OPERATOR: OnceLock<Mutex<OperatorProcess>> = OnceLock::new();

// ---------------------------------------------------------------------------------------
// Setup

/// A namespace with its Cluster (adjusted by `cluster`), the pool's user data Secret, and the
/// shared operator running.
async fn setup(cluster: impl FnOnce(&mut Value)) -> TestEnv {
    // The rollout poll test counts the operator's requests in its namespace.
    support::enable_audit_log();
    let env = support::env().await;
    OPERATOR.get_or_init(|| {
        Mutex::new(OperatorProcess::start(
            &env.kubeconfig,
            &["--controllers=worker"],
        ))
    });
    let mut value = fixtures::cluster_json(&env.namespace);
    cluster(&mut value);
    Api::<Cluster>::all(env.client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(value).unwrap(),
        )
        .await
        .unwrap();
    create_user_data(&env.client, &env.namespace).await;
    env
}

async fn create_user_data(client: &Client, namespace: &str) {
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": USER_DATA_SECRET, "namespace": namespace},
        "data": {"cloud_config": base64(USER_DATA)}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

fn base64(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn api<K>(env: &TestEnv) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    Api::namespaced(env.client.clone(), &env.namespace)
}

/// Creates the Worker as gardenlet does: with the `reconcile` annotation and a timestamp.
async fn create_worker(env: &TestEnv, adjust: impl FnOnce(&mut Value)) {
    let mut worker = fixtures::worker_json(&env.namespace);
    worker["metadata"]["annotations"] = json!({
        "gardener.cloud/operation": "reconcile",
        "gardener.cloud/timestamp": chrono::Utc::now().to_rfc3339(),
    });
    adjust(&mut worker);
    api::<Worker>(env)
        .create(
            &PostParams::default(),
            &serde_json::from_value(worker).unwrap(),
        )
        .await
        .unwrap();
}

async fn patch_worker_spec(env: &TestEnv, spec: Value) {
    api::<Worker>(env)
        .patch(
            WORKER,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": spec})),
        )
        .await
        .unwrap();
}

/// Patches the pool list (merge patches replace lists, so the whole pool is sent).
async fn patch_pool(env: &TestEnv, adjust: impl FnOnce(&mut Value)) {
    let mut pool = fixtures::worker_json(&env.namespace)["spec"]["pools"][0].clone();
    adjust(&mut pool);
    patch_worker_spec(env, json!({"pools": [pool]})).await;
}

fn class_secrets() -> ListParams {
    ListParams::default().labels("gardener.cloud/purpose=machineclass")
}

fn last_operation(worker: &Worker) -> Option<(LastOperationType, LastOperationState, String)> {
    worker
        .status
        .as_ref()
        .and_then(|s| s.default.last_operation.as_ref())
        .map(|l| (l.type_, l.state, l.description.clone()))
}

/// Waits until gardenlet's readiness check holds for `operation`, letting `mcm` act on
/// every poll.
async fn until_ready(env: &TestEnv, mcm: &Mcm, operation: LastOperationType) -> Worker {
    let workers = api::<Worker>(env);
    wait_for(
        &format!("Worker ready after {operation:?}"),
        WAIT,
        || async {
            mcm.sync().await?;
            let worker = workers.get(WORKER).await.map_err(|e| e.to_string())?;
            check_ready(&worker, operation).map(|()| worker)
        },
    )
    .await
}

/// Waits until the Worker's last operation is `Processing` (of `operation`, or of any type)
/// with a description containing `needle`, running `each_poll` first on every poll (e.g. to
/// let the MCM stand-in act).
async fn until_processing<F, Fut>(
    env: &TestEnv,
    operation: Option<LastOperationType>,
    needle: &str,
    mut each_poll: F,
) -> Worker
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let workers = api::<Worker>(env);
    wait_for(&format!("Processing: {needle}"), WAIT, || {
        let poll = each_poll();
        let workers = workers.clone();
        async move {
            poll.await?;
            let worker = workers.get(WORKER).await.map_err(err)?;
            match last_operation(&worker) {
                Some((kind, LastOperationState::Processing, d))
                    if operation.is_none_or(|wanted| wanted == kind) && d.contains(needle) =>
                {
                    Ok(worker)
                }
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await
}

/// No action between polls, for [`until_processing`].
async fn nothing() -> Result<(), String> {
    Ok(())
}

/// Puts MCM's finalizer on a MachineDeployment, as MCM does when it takes one over.
async fn take_over(env: &TestEnv, deployment: &str) {
    set_deployment_finalizers(
        env,
        deployment,
        json!([gardener_extension_node::controllers::worker::leftovers::MCM_FINALIZER]),
    )
    .await;
}

/// Removes the finalizers of a MachineDeployment, as MCM does once its machines are gone.
async fn let_go(env: &TestEnv, deployment: &str) {
    set_deployment_finalizers(env, deployment, Value::Null).await;
}

async fn set_deployment_finalizers(env: &TestEnv, deployment: &str, finalizers: Value) {
    api::<MachineDeployment>(env)
        .patch(
            deployment,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
        )
        .await
        .unwrap();
}

/// Waits until the Worker is gone, running `each_poll` first on every poll.
async fn until_worker_deleted<F, Fut>(env: &TestEnv, mut each_poll: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let workers = api::<Worker>(env);
    wait_for("Worker deleted", WAIT, || {
        let poll = each_poll();
        let workers = workers.clone();
        async move {
            poll.await?;
            match workers.get_opt(WORKER).await.map_err(err)? {
                None => Ok(()),
                Some(w) => Err(format!("{:?}", last_operation(&w))),
            }
        }
    })
    .await
}

/// Waits until `lastError` mentions `needle`.
async fn until_last_error(env: &TestEnv, needle: &str) -> Worker {
    let workers = api::<Worker>(env);
    wait_for(&format!("lastError with {needle:?}"), WAIT, || async {
        let worker = workers.get(WORKER).await.map_err(|e| e.to_string())?;
        let error = worker
            .status
            .as_ref()
            .and_then(|s| s.default.last_error.clone())
            .ok_or("no lastError")?;
        if error.description.contains(needle) {
            Ok(worker)
        } else {
            Err(error.description)
        }
    })
    .await
}

async fn event_reasons(env: &TestEnv) -> BTreeSet<String> {
    api::<Event>(env)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect()
}

/// Notes of the events with `reason`.
async fn event_notes(env: &TestEnv, reason: &str) -> Vec<String> {
    api::<Event>(env)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.note)
        .collect()
}

/// The operator's log lines at INFO level or above about `namespace`.
fn info_lines(log: &str, namespace: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains(namespace) && !l.contains(" DEBUG ") && !l.contains(" TRACE "))
        .map(String::from)
        .collect()
}

fn operator_log() -> String {
    OPERATOR.get().unwrap().lock().unwrap().log_text()
}

// ---------------------------------------------------------------------------------------
// Tests

/// A user error (the user data Secret is not there yet) is reported; once the Secret comes
/// and the run waits for machine-controller-manager instead, `lastError` is cleared. While
/// it waits, the 5-second polls log nothing at INFO level. Migrate without
/// machine-controller-manager (no machine sets yet) says it found the deployment.
#[tokio::test]
async fn waiting_clears_an_old_error_polls_quietly_and_migrate_counts_what_it_found() {
    const LATER: &str = "osc-result-pool-a-later";
    let env = setup(|_| {}).await;
    create_worker(&env, |w| {
        w["spec"]["pools"][0]["userDataSecretRef"]["name"] = json!(LATER)
    })
    .await;
    until_last_error(
        &env,
        &format!("user data Secret {}/{LATER} not found", env.namespace),
    )
    .await;

    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": LATER, "namespace": env.namespace},
        "data": {"cloud_config": base64(USER_DATA)}
    }))
    .unwrap();
    api::<Secret>(&env)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let worker = wait_for("Processing without lastError", WAIT, || async {
        let worker = api::<Worker>(&env).get(WORKER).await.map_err(err)?;
        let status = worker.status.clone().ok_or("no status")?.default;
        match (last_operation(&worker), &status.last_error) {
            (Some((_, LastOperationState::Processing, d)), None) if d.contains("waiting for") => {
                Ok(worker)
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (_, _, description) = last_operation(&worker).unwrap();
    assert!(
        description.ends_with("(waiting at most 300s)"),
        "{description}"
    );

    // Steady state (from the second poll on, when the deployment exists and its replicas are
    // kept): the same wait, poll after poll, at debug level only.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let before = info_lines(&operator_log(), &env.namespace).len();
    tokio::time::sleep(Duration::from_secs(12)).await;
    let lines = info_lines(&operator_log(), &env.namespace);
    assert_eq!(lines.len(), before, "{:#?}", &lines[before..]);
    let (_, _, still) = last_operation(&api::<Worker>(&env).get(WORKER).await.unwrap()).unwrap();
    assert!(still.contains("waiting for"), "still waiting: {still}");

    // A run asked for while it waits (what `make start`'s banner tells a user to do) answers
    // at INFO level with what it waits for, though the poll before waited for the same.
    annotate(&api::<Worker>(&env), WORKER, "reconcile").await;
    let answer = wait_for("an INFO line for the requested run", WAIT, || async {
        let lines = info_lines(&operator_log(), &env.namespace);
        lines[before..]
            .iter()
            .find(|l| l.contains(" INFO ") && l.contains(" waiting reason=waiting for"))
            .cloned()
            .ok_or_else(|| format!("{:#?}", &lines[before..]))
    })
    .await;
    assert!(answer.contains("machine-controller-manager"), "{answer}");

    annotate(&api::<Worker>(&env), WORKER, "migrate").await;
    let note = wait_for("MachinesLeftForGardenlet event", WAIT, || async {
        event_notes(&env, "MachinesLeftForGardenlet")
            .await
            .into_iter()
            .next()
            .ok_or_else(|| "no event yet".to_string())
    })
    .await;
    assert!(
        note.starts_with("Left 0 of 1 machine deployment(s), 0 machine set(s) and 0 machine(s) for gardenlet to record as machine state (1 without machine sets"),
        "{note}"
    );
}

#[tokio::test]
async fn create_writes_classes_secrets_deployments_and_status_before_the_machines_are_ready() {
    let env = setup(|_| {}).await;
    create_worker(&env, |w| {
        let pool = &mut w["spec"]["pools"][0];
        pool["annotations"] = json!({"node.example/annotated": "yes"});
        pool["clusterAutoscaler"] = json!({"scaleDownUtilizationThreshold": "0.4"});
        pool["machineControllerManager"] =
            json!({"machineDrainTimeout": "1h0m0s", "nodeConditions": ["A", "B"]});
        pool["nodeTemplate"] = json!({"capacity": {"cpu": "2", "memory": "4Gi"}});
    })
    .await;

    // Without MCM the rollout cannot finish, yet the status is already written.
    let worker = wait_for(
        "status.machineDeployments while Processing",
        WAIT,
        || async {
            let worker = api::<Worker>(&env).get(WORKER).await.map_err(err)?;
            let status = worker.status.clone().ok_or("no status")?;
            // The machine deployments are written first, then the Processing status that
            // says what the run waits for; wait for both.
            let processing = matches!(
                last_operation(&worker),
                Some((_, LastOperationState::Processing, ref d)) if d.contains("waiting for")
            );
            if !status.machine_deployments.is_empty()
                && status.machine_deployments_last_update_time.is_some()
                && processing
            {
                Ok(worker)
            } else {
                Err(format!(
                    "{:?} {:?}",
                    status.machine_deployments,
                    last_operation(&worker)
                ))
            }
        },
    )
    .await;
    let (_, _, description) = last_operation(&worker).unwrap();
    assert!(
        description.contains("waiting for machine-controller-manager"),
        "{description}"
    );
    let status = worker.status.unwrap();
    let md_name = format!("{}-worker-a-z1", env.namespace);
    assert_eq!(status.machine_deployments.len(), 1);
    assert_eq!(status.machine_deployments[0].name, md_name);
    assert_eq!(
        (
            status.machine_deployments[0].minimum,
            status.machine_deployments[0].maximum
        ),
        (1, 3)
    );

    let deployment = api::<MachineDeployment>(&env).get(&md_name).await.unwrap();
    let class_name = class_of(&deployment);
    assert!(
        class_name.starts_with(&format!("{md_name}-")) && class_name.len() == md_name.len() + 6
    );
    assert_eq!(
        deployment.spec.replicas,
        Some(1),
        "new deployment starts at minimum"
    );
    assert_eq!(
        deployment.labels()["worker.gardener.cloud/pool"],
        "worker-a"
    );
    assert_eq!(
        deployment.annotations()["autoscaler.gardener.cloud/scale-down-utilization-threshold"],
        "0.4"
    );
    let spec = &deployment.spec;
    assert_eq!(spec.min_ready_seconds, Some(500));
    assert_eq!(spec.revision_history_limit, Some(0));
    assert_eq!(
        spec.strategy.as_ref().unwrap().type_.as_deref(),
        Some("RollingUpdate")
    );
    let machine = spec.template.spec.as_ref().unwrap();
    assert_eq!(
        machine.configuration.drain_timeout.as_deref(),
        Some("1h0m0s")
    );
    assert_eq!(
        machine.configuration.node_conditions.as_deref(),
        Some("A,B")
    );
    let node = machine.node_template.as_ref().unwrap();
    let labels = &node.metadata.as_ref().unwrap().labels;
    assert_eq!(
        labels["containerruntime.worker.gardener.cloud/gvisor"],
        "true"
    );
    assert_eq!(
        labels["worker.gardener.cloud/gardener-node-agent-secret-name"],
        "gardener-node-agent-worker-a-0123456789abcdef"
    );
    assert_eq!(
        node.metadata.as_ref().unwrap().annotations["node.example/annotated"],
        "yes"
    );
    assert_eq!(node.spec.as_ref().unwrap().taints[0].key, "dedicated");

    let class = api::<MachineClass>(&env).get(&class_name).await.unwrap();
    assert_eq!(class.spec.provider.as_deref(), Some("local"));
    // provider-local's ProviderSpec: the image the CloudProfile lists for debian 13.2.
    assert_eq!(
        class.spec.provider_spec,
        json!({"image": fixtures::MACHINE_IMAGE_13_2, "namespace": format!("infra-{}", env.namespace)})
    );
    assert_eq!(class.spec.secret_ref.as_ref().unwrap().name, class_name);
    assert_eq!(
        class.spec.credentials_secret_ref.as_ref().unwrap().name,
        "cloudprovider"
    );
    assert_eq!(
        class.spec.node_template.as_ref().unwrap().instance_type,
        "local"
    );
    let secret = api::<Secret>(&env).get(&class_name).await.unwrap();
    assert_eq!(secret.labels()["gardener.cloud/purpose"], "machineclass");
    assert_eq!(secret.data.unwrap()["userData"].0, USER_DATA);

    // MCM arrives: the rollout completes and the Worker is ready.
    let mcm = Mcm::new(&env);
    let worker = until_ready(&env, &mcm, LastOperationType::Create).await;
    assert_eq!(
        worker.status.as_ref().unwrap().default.provider_status,
        Some(json!({
            "apiVersion": "local.provider.extensions.gardener.cloud/v1alpha1",
            "kind": "WorkerStatus",
            "machineImages": [{"name": "debian", "version": "13.2", "image": fixtures::MACHINE_IMAGE_13_2}],
        })),
        "provider-local's WorkerStatus with the image looked up"
    );
    assert!(
        worker
            .finalizers()
            .contains(&"extensions.gardener.cloud/worker".to_string())
    );
    // The routine steps of a create, and a wait shorter than `SLOW_WAIT`, are logged, not
    // published; neither is the success of a first create: lastOperation (Create, Succeeded)
    // records it.
    let reasons = event_reasons(&env).await;
    assert!(
        reasons.is_empty(),
        "no events for a plain create: {reasons:?}"
    );
}

#[tokio::test]
async fn scaling_within_limits_keeps_the_autoscalers_replicas_and_limits_clamp_it() {
    let env = setup(|_| {}).await;
    create_worker(&env, |_| {}).await;
    let mcm = Mcm::new(&env);
    until_ready(&env, &mcm, LastOperationType::Create).await;
    let md_name = format!("{}-worker-a-z1", env.namespace);

    // The cluster-autoscaler scales up through the scale subresource (another field manager).
    api::<MachineDeployment>(&env)
        .patch_scale(
            &md_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    annotate(&api::<Worker>(&env), WORKER, "reconcile").await;
    until_ready(&env, &mcm, LastOperationType::Reconcile).await;
    let replicas = api::<MachineDeployment>(&env)
        .get(&md_name)
        .await
        .unwrap()
        .spec
        .replicas;
    assert_eq!(
        replicas,
        Some(3),
        "the autoscaler's value within [min, max] stays"
    );
    assert_eq!(
        names(&api::<Machine>(&env), &ListParams::default())
            .await
            .len(),
        3
    );

    // A lower maximum clamps it.
    patch_pool(&env, |p| p["maximum"] = json!(2)).await;
    annotate(&api::<Worker>(&env), WORKER, "reconcile").await;
    let worker = until_ready(&env, &mcm, LastOperationType::Reconcile).await;
    let replicas = api::<MachineDeployment>(&env)
        .get(&md_name)
        .await
        .unwrap()
        .spec
        .replicas;
    assert_eq!(replicas, Some(2));
    assert_eq!(worker.status.unwrap().machine_deployments[0].maximum, 2);
}

#[tokio::test]
async fn a_new_node_agent_secret_rolls_to_a_new_class_and_cleans_up_only_after_the_rollout() {
    let env = setup(|_| {}).await;
    create_worker(&env, |_| {}).await;
    let mcm = Mcm::new(&env);
    until_ready(&env, &mcm, LastOperationType::Create).await;
    let md_name = format!("{}-worker-a-z1", env.namespace);
    let old_class = class_of(&api::<MachineDeployment>(&env).get(&md_name).await.unwrap());
    let old_machines = names(&api::<Machine>(&env), &ListParams::default()).await;

    // Labels/taints alone do not roll.
    patch_pool(&env, |p| p["labels"]["extra"] = json!("label")).await;
    annotate(&api::<Worker>(&env), WORKER, "reconcile").await;
    until_ready(&env, &mcm, LastOperationType::Reconcile).await;
    let deployment = api::<MachineDeployment>(&env).get(&md_name).await.unwrap();
    assert_eq!(
        class_of(&deployment),
        old_class,
        "a label change keeps the class"
    );
    assert_eq!(
        names(&api::<Machine>(&env), &ListParams::default()).await,
        old_machines
    );

    patch_pool(&env, |p| {
        p["labels"]["extra"] = json!("label");
        p["nodeAgentSecretName"] = json!("gardener-node-agent-worker-a-fedcba9876543210");
    })
    .await;
    annotate(&api::<Worker>(&env), WORKER, "reconcile").await;
    let new_class = wait_for("deployment on a new class", WAIT, || async {
        let deployment = api::<MachineDeployment>(&env)
            .get(&md_name)
            .await
            .map_err(err)?;
        let class = class_of(&deployment);
        if class != old_class {
            Ok(class)
        } else {
            Err(class)
        }
    })
    .await;
    assert!(
        api::<MachineClass>(&env)
            .get_opt(&new_class)
            .await
            .unwrap()
            .is_some()
    );
    // MCM has not rolled yet: the operator waits and keeps the old class and secret.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let worker = api::<Worker>(&env).get(WORKER).await.unwrap();
    let (_, state, description) = last_operation(&worker).unwrap();
    assert_eq!(state, LastOperationState::Processing, "{description}");
    assert!(
        api::<MachineClass>(&env)
            .get_opt(&old_class)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        api::<Secret>(&env)
            .get_opt(&old_class)
            .await
            .unwrap()
            .is_some()
    );

    // MCM rolls the machines; then the old class and its secret go.
    until_ready(&env, &mcm, LastOperationType::Reconcile).await;
    let classes = names(&api::<MachineClass>(&env), &ListParams::default()).await;
    assert_eq!(classes, BTreeSet::from([new_class.clone()]));
    let secrets = names(&api::<Secret>(&env), &class_secrets()).await;
    assert_eq!(secrets, BTreeSet::from([new_class.clone()]));
    let machines = names(&api::<Machine>(&env), &ListParams::default()).await;
    assert!(
        machines.is_disjoint(&old_machines),
        "machines were replaced: {machines:?}"
    );
}

#[tokio::test]
async fn hibernation_scales_to_zero_marks_machines_and_waking_up_returns_to_the_minimum() {
    let env = setup(|_| {}).await;
    api::<Deployment>(&env)
        .create(
            &PostParams::default(),
            &serde_json::from_value(fixtures::mcm_deployment_json(&env.namespace, 1)).unwrap(),
        )
        .await
        .unwrap();
    create_worker(&env, |_| {}).await;
    let mcm = Mcm::new(&env);
    until_ready(&env, &mcm, LastOperationType::Create).await;
    let md_name = format!("{}-worker-a-z1", env.namespace);
    let machine = names(&api::<Machine>(&env), &ListParams::default())
        .await
        .into_iter()
        .next()
        .unwrap();

    let clusters: Api<Cluster> = Api::all(env.client.clone());
    let hibernate =
        |enabled: bool| json!({"spec": {"shoot": {"spec": {"hibernation": {"enabled": enabled}}}}});
    clusters
        .patch(
            &env.namespace,
            &PatchParams::default(),
            &Patch::Merge(hibernate(true)),
        )
        .await
        .unwrap();
    annotate(&api::<Worker>(&env), WORKER, "reconcile").await;
    // Before MCM acts: replicas 0 and the machine labelled for forceful deletion.
    wait_for("replicas 0 and force-deletion label", WAIT, || async {
        let deployment = api::<MachineDeployment>(&env)
            .get(&md_name)
            .await
            .map_err(err)?;
        let machine = api::<Machine>(&env).get(&machine).await.map_err(err)?;
        let label = machine.labels().get("force-deletion").cloned();
        if deployment.spec.replicas == Some(0) && label.as_deref() == Some("True") {
            Ok(())
        } else {
            Err(format!("{:?} {label:?}", deployment.spec.replicas))
        }
    })
    .await;
    until_ready(&env, &mcm, LastOperationType::Reconcile).await;
    assert!(
        names(&api::<Machine>(&env), &ListParams::default())
            .await
            .is_empty()
    );
    let mcm_replicas = api::<Deployment>(&env)
        .get("machine-controller-manager")
        .await
        .unwrap()
        .spec
        .unwrap()
        .replicas;
    assert_eq!(
        mcm_replicas,
        Some(0),
        "machine-controller-manager scaled down"
    );

    clusters
        .patch(
            &env.namespace,
            &PatchParams::default(),
            &Patch::Merge(hibernate(false)),
        )
        .await
        .unwrap();
    annotate(&api::<Worker>(&env), WORKER, "reconcile").await;
    until_ready(&env, &mcm, LastOperationType::Reconcile).await;
    let replicas = api::<MachineDeployment>(&env)
        .get(&md_name)
        .await
        .unwrap()
        .spec
        .replicas;
    assert_eq!(replicas, Some(1), "waking up goes to the minimum");
    assert_eq!(
        names(&api::<Machine>(&env), &ListParams::default())
            .await
            .len(),
        1
    );
}

#[tokio::test]
async fn delete_removes_every_machine_object_and_then_the_finalizer() {
    let env = setup(|_| {}).await;
    create_worker(&env, |w| w["spec"]["pools"][0]["minimum"] = json!(2)).await;
    let mcm = Mcm::new(&env);
    until_ready(&env, &mcm, LastOperationType::Create).await;
    assert_eq!(
        names(&api::<Machine>(&env), &ListParams::default())
            .await
            .len(),
        2
    );

    confirm_and_delete(&api::<Worker>(&env), WORKER).await;
    until_worker_deleted(&env, || mcm.sync_deleted()).await;
    assert!(
        names(&api::<MachineDeployment>(&env), &ListParams::default())
            .await
            .is_empty()
    );
    assert!(
        names(&api::<MachineSet>(&env), &ListParams::default())
            .await
            .is_empty()
    );
    assert!(
        names(&api::<Machine>(&env), &ListParams::default())
            .await
            .is_empty()
    );
    assert!(
        names(&api::<MachineClass>(&env), &ListParams::default())
            .await
            .is_empty()
    );
    assert!(
        names(&api::<Secret>(&env), &class_secrets())
            .await
            .is_empty()
    );
    assert!(
        api::<Secret>(&env)
            .get_opt(USER_DATA_SECRET)
            .await
            .unwrap()
            .is_some(),
        "the user data Secret is gardenlet's, not ours"
    );
    let deleted = mcm.deleted_machine_labels.lock().unwrap().clone();
    assert_eq!(deleted.len(), 2);
    assert!(
        deleted
            .iter()
            .all(|l| l.get("force-deletion").map(String::as_str) == Some("True")),
        "machines were marked for forceful deletion first: {deleted:?}"
    );
}

#[tokio::test]
async fn migrate_leaves_the_state_to_gardenlet_and_restore_elsewhere_brings_back_the_same_machines()
{
    // Source seed.
    let source = setup(|_| {}).await;
    let two_zones = |w: &mut Value| {
        let pool = &mut w["spec"]["pools"][0];
        pool["zones"] = json!(["0", "1"]);
        pool["minimum"] = json!(2);
        pool["maximum"] = json!(4);
    };
    create_worker(&source, two_zones).await;
    let source_mcm = Mcm::new(&source);
    until_ready(&source, &source_mcm, LastOperationType::Create).await;
    let z1 = format!("{}-worker-a-z1", source.namespace);
    // The autoscaler has scaled zone 1 up; the state must carry that.
    api::<MachineDeployment>(&source)
        .patch_scale(
            &z1,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    source_mcm.sync().await.unwrap();
    let machines_before: Vec<Machine> = api::<Machine>(&source)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(machines_before.len(), 3);
    let objects_before = (
        names(&api::<MachineDeployment>(&source), &ListParams::default()).await,
        names(&api::<MachineClass>(&source), &ListParams::default()).await,
        names(&api::<Secret>(&source), &class_secrets()).await,
        names(&api::<MachineSet>(&source), &ListParams::default()).await,
    );

    // A state an earlier version of this extension wrote on a previous migration.
    api::<Worker>(&source)
        .patch_status(
            WORKER,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"state": {"state": "left over"}}})),
        )
        .await
        .unwrap();
    annotate(&api::<Worker>(&source), WORKER, "migrate").await;
    let migrated = wait_for("Migrate succeeded", WAIT, || async {
        let worker = api::<Worker>(&source).get(WORKER).await.map_err(err)?;
        match last_operation(&worker) {
            Some((LastOperationType::Migrate, LastOperationState::Succeeded, _))
                if !worker
                    .annotations()
                    .contains_key("gardener.cloud/operation") =>
            {
                Ok(worker)
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(
        !migrated
            .finalizers()
            .contains(&"extensions.gardener.cloud/worker".to_string()),
        "our finalizer is removed after migrate"
    );
    // Nothing was deleted by us.
    assert_eq!(
        (
            names(&api::<MachineDeployment>(&source), &ListParams::default()).await,
            names(&api::<MachineClass>(&source), &ListParams::default()).await,
            names(&api::<Secret>(&source), &class_secrets()).await,
            names(&api::<MachineSet>(&source), &ListParams::default()).await,
        ),
        objects_before
    );
    assert_eq!(
        api::<Machine>(&source)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        3
    );
    // The Worker's own state stays empty: gardener v1.149.3 fails the restore of a Worker
    // whose extension state and machine state both hold machines.
    let own_state = migrated.status.as_ref().unwrap().default.state.clone();
    assert!(
        own_state.as_ref().is_none_or(Value::is_null),
        "status.state stays empty: {own_state:?}"
    );
    assert!(
        event_notes(&source, "MachinesLeftForGardenlet").await.contains(
            &"Left 2 machine deployment(s), 2 machine set(s) and 3 machine(s) for gardenlet to record as machine state; status.state stays empty; no machine object was deleted".to_string()
        ),
        "{:?}",
        event_notes(&source, "MachinesLeftForGardenlet").await
    );
    // gardenlet computes the machine state from the objects Migrate left (computeMachineState).
    let recorded_value = support::gardener::machine_state(&source.client, &source.namespace).await;
    let recorded = state::decode(Some(&recorded_value)).unwrap();
    assert_eq!(recorded.counts(), (2, 2, 3));
    assert!(recorded_value["state"].is_string(), "{recorded_value}");
    assert_eq!(recorded.machine_deployments[&z1].replicas, 2);
    let recorded_machines: BTreeMap<String, (String, String)> = machines_before
        .iter()
        .map(|m| {
            (
                m.name_any(),
                (
                    m.node_name().unwrap().to_string(),
                    m.spec.provider_id.clone().unwrap(),
                ),
            )
        })
        .collect();

    // gardenlet: persist the ShootState, delete the Worker, shallow-delete the machine objects.
    confirm_and_delete(&api::<Worker>(&source), WORKER).await;
    support::gardener::wait_gone(&api::<Worker>(&source), WORKER).await;
    for name in names(&api::<Machine>(&source), &ListParams::default()).await {
        delete(&api::<Machine>(&source), &name).await.unwrap();
    }
    for name in objects_before.3 {
        delete(&api::<MachineSet>(&source), &name).await.unwrap();
    }
    for name in objects_before.0 {
        delete(&api::<MachineDeployment>(&source), &name)
            .await
            .unwrap();
    }

    // Destination seed: another namespace of the same shoot (same technical ID).
    let technical_id = source.namespace.clone();
    let destination =
        setup(|c| c["spec"]["shoot"]["status"]["technicalID"] = json!(technical_id)).await;
    api::<Deployment>(&destination)
        .create(
            &PostParams::default(),
            &serde_json::from_value(fixtures::mcm_deployment_json(&destination.namespace, 0))
                .unwrap(),
        )
        .await
        .unwrap();
    let mut worker = fixtures::worker_json(&destination.namespace);
    two_zones(&mut worker);
    let workers = api::<Worker>(&destination);
    support::gardener::create_waiting_for_state(&workers, worker, recorded_value).await;
    let mut audit = support::audit::AuditLog::from_end(support::audit_log_path());
    annotate(&workers, WORKER, "restore").await;

    // The machines come back before MCM does anything, with names and node references.
    let destination_machines = |machines: Vec<Machine>| -> BTreeMap<String, (String, String)> {
        machines
            .iter()
            .map(|m| {
                (
                    m.name_any(),
                    (
                        m.node_name().unwrap_or_default().to_string(),
                        m.spec.provider_id.clone().unwrap_or_default(),
                    ),
                )
            })
            .collect()
    };
    wait_for("machines restored", WAIT, || async {
        let machines = api::<Machine>(&destination)
            .list(&ListParams::default())
            .await
            .map_err(err)?
            .items;
        let restored = destination_machines(machines);
        if restored == recorded_machines {
            Ok(())
        } else {
            Err(format!("{restored:?}"))
        }
    })
    .await;
    let z1_replicas = wait_for("zone 1 deployment", WAIT, || async {
        let deployment = api::<MachineDeployment>(&destination)
            .get_opt(&z1)
            .await
            .map_err(err)?
            .ok_or("not yet")?;
        deployment
            .spec
            .replicas
            .ok_or_else(|| "no replicas".to_string())
    })
    .await;
    assert_eq!(z1_replicas, 2, "the recorded replicas, not the minimum");

    let destination_mcm = Mcm::new(&destination);
    let restored = until_ready(&destination, &destination_mcm, LastOperationType::Restore).await;
    assert!(
        restored
            .finalizers()
            .contains(&"extensions.gardener.cloud/worker".to_string())
    );
    let after = api::<Machine>(&destination)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(
        destination_machines(after),
        recorded_machines,
        "no machine was recreated"
    );
    let mcm_replicas = api::<Deployment>(&destination)
        .get("machine-controller-manager")
        .await
        .unwrap()
        .spec
        .unwrap()
        .replicas;
    assert_eq!(
        mcm_replicas,
        Some(1),
        "machine-controller-manager scaled up after restore"
    );
    // RestoreWithoutReconcile's order: machine sets, machines, the deployments, and only then
    // machine-controller-manager scaled up.
    let sequence = audit.take_sequence_in_namespace(&destination.namespace);
    let first = |key: &str| {
        sequence
            .iter()
            .position(|k| k == key)
            .unwrap_or_else(|| panic!("no {key:?} in {sequence:?}"))
    };
    let order = [
        first("create machinesets"),
        first("create machines"),
        first("patch machinedeployments"),
        first("patch deployments"),
    ];
    assert!(order.is_sorted(), "{order:?} in {sequence:?}");
    assert!(
        event_reasons(&destination)
            .await
            .contains("MachinesRestored")
    );
}

#[tokio::test]
async fn failed_machines_fail_the_reconcile_with_their_errors() {
    let env = setup(|_| {}).await;
    create_worker(&env, |_| {}).await;
    let md_name = format!("{}-worker-a-z1", env.namespace);
    wait_for("deployment", WAIT, || async {
        api::<MachineDeployment>(&env)
            .get_opt(&md_name)
            .await
            .map_err(err)?
            .map(drop)
            .ok_or_else(|| "not yet".to_string())
    })
    .await;
    let mcm = Mcm::new(&env);
    mcm.fail(
        &md_name,
        "machine-x",
        "quota exceeded for instance type local",
    )
    .await;
    let worker = until_last_error(&env, "quota exceeded for instance type local").await;
    let error = worker.status.unwrap().default.last_error.unwrap();
    assert!(
        error
            .description
            .contains(&format!("machine(s) of {md_name} failed: \"machine-x\"")),
        "{}",
        error.description
    );
}

/// Every bad input ends in a `lastError` that names it, and a configuration error writes no
/// machine object.
#[tokio::test]
async fn bad_inputs_are_reported_in_last_error() {
    struct Case {
        name: &'static str,
        cluster: fn(&mut Value),
        worker: fn(&mut Value),
        expected: &'static str,
        configuration: bool,
    }
    let cases = [
        Case {
            name: "unknown zone",
            cluster: |c| {
                c["spec"]["cloudProfile"]["spec"]["regions"] =
                    json!([{"name": "local", "zones": [{"name": "0"}, {"name": "1"}]}])
            },
            worker: |w| w["spec"]["pools"][0]["zones"] = json!(["0", "9"]),
            expected: "zone \"9\" is not a zone of region \"local\" in the CloudProfile (zones: 0, 1)",
            configuration: true,
        },
        Case {
            name: "missing user data secret",
            cluster: |_| {},
            worker: |w| w["spec"]["pools"][0]["userDataSecretRef"]["name"] = json!("osc-missing"),
            expected: "pool worker-a: user data Secret",
            configuration: false,
        },
        Case {
            name: "missing user data key",
            cluster: |_| {},
            worker: |w| w["spec"]["pools"][0]["userDataSecretRef"]["key"] = json!("other"),
            expected: "has no data key \"other\" or it is empty",
            configuration: false,
        },
        Case {
            name: "bad providerConfig",
            cluster: |_| {},
            worker: |w| {
                w["spec"]["pools"][0]["providerConfig"] = json!({
                    "apiVersion": "node.extensions.config.gardener.cloud/v1alpha1",
                    "kind": "WorkerConfig",
                    "imageName": "x"
                })
            },
            expected: "pool worker-a: invalid providerConfig: providerConfig has unknown field \"imageName\"",
            configuration: true,
        },
        Case {
            name: "min > max",
            cluster: |_| {},
            worker: |w| {
                w["spec"]["pools"][0]["minimum"] = json!(4);
                w["spec"]["pools"][0]["maximum"] = json!(2);
            },
            expected: "pool worker-a: minimum 4 is greater than maximum 2",
            configuration: true,
        },
        Case {
            name: "missing nodeAgentSecretName",
            cluster: |_| {},
            worker: |w| {
                w["spec"]["pools"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("nodeAgentSecretName");
            },
            expected: "pool worker-a: nodeAgentSecretName is not set",
            configuration: true,
        },
    ];
    let runs = cases.iter().map(|case| async move {
        let env = setup(case.cluster).await;
        create_worker(&env, case.worker).await;
        let worker = until_last_error(&env, case.expected).await;
        let status = worker.status.unwrap().default;
        let error = status.last_error.unwrap();
        let codes: Vec<&str> = error.codes.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            codes.contains(&"ERR_CONFIGURATION_PROBLEM"),
            case.configuration,
            "{}: codes {codes:?}",
            case.name
        );
        assert_eq!(
            status.last_operation.unwrap().state,
            LastOperationState::Error,
            "{}",
            case.name
        );
        if case.configuration {
            assert!(
                names(&api::<MachineDeployment>(&env), &ListParams::default())
                    .await
                    .is_empty()
                    && names(&api::<MachineClass>(&env), &ListParams::default())
                        .await
                        .is_empty(),
                "{}: nothing is written for a configuration error",
                case.name
            );
        }
    });
    futures::future::join_all(runs).await;
}

#[test]
fn render_worker_prints_the_machine_objects_without_a_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let worker = dir.path().join("worker.yaml");
    let cluster = dir.path().join("cluster.yaml");
    std::fs::write(
        &worker,
        serde_norway::to_string(&fixtures::worker_json("shoot--dev--a")).unwrap(),
    )
    .unwrap();
    std::fs::write(
        &cluster,
        serde_norway::to_string(&fixtures::cluster_json("shoot--dev--a")).unwrap(),
    )
    .unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_gardener-extension-node"))
        .args(["render", "worker", "-f"])
        .arg(&worker)
        .arg("--cluster")
        .arg(&cluster)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    let documents: Vec<Value> = serde_norway::Deserializer::from_str(&text)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
        .collect();
    let kinds: Vec<&str> = documents
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["Secret", "MachineClass", "MachineDeployment"]);
    assert_eq!(
        documents[2]["metadata"]["name"],
        "shoot--dev--a-worker-a-z1"
    );
    assert_eq!(documents[2]["spec"]["replicas"], 1);
    assert!(
        text.contains("# userData comes from Secret shoot--dev--a/osc-result-pool-a-init"),
        "{text}"
    );

    // A bad Worker fails with the reason.
    let mut bad = fixtures::worker_json("shoot--dev--a");
    bad["spec"]["pools"][0]["minimum"] = json!(9);
    std::fs::write(&worker, serde_norway::to_string(&bad).unwrap()).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_gardener-extension-node"))
        .args(["render", "worker", "-f"])
        .arg(&worker)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("minimum 9 is greater than maximum 3"),
        "{stderr}"
    );
}

/// Item 6 of the Worker's gaps (`waitUntilUnwantedMachineDeploymentsDeleted`): while
/// machine-controller-manager runs, the Worker is not Succeeded before the deployments the
/// cleanup deleted are gone, and a failed machine of such a deployment fails the operation
/// with its own error. The test plays MCM's finalizer (it keeps the old deployment while
/// MCM drains it) and MCM's Deployment (replicas 1, so the wait applies).
#[tokio::test]
async fn unwanted_deployments_are_waited_for_and_their_failed_machines_fail_the_reconcile() {
    let env = setup(|_| {}).await;
    create_worker(&env, |_| {}).await;
    let mcm = Mcm::new(&env);
    until_ready(&env, &mcm, LastOperationType::Create).await;
    let mcm_deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "machine-controller-manager", "namespace": env.namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"role": "machine-controller-manager"}},
            "template": {"metadata": {"labels": {"role": "machine-controller-manager"}},
                         "spec": {"containers": [{"name": "mcm", "image": "mcm"}]}},
        },
    }))
    .unwrap();
    Api::<Deployment>::namespaced(env.client.clone(), &env.namespace)
        .create(&PostParams::default(), &mcm_deployment)
        .await
        .unwrap();
    let old = format!("{}-worker-a-z1", env.namespace);
    let deployments = api::<MachineDeployment>(&env);
    take_over(&env, &old).await;
    mcm.fail(&old, "old-machine", "draining old-machine failed: PDB")
        .await;

    // The pool is renamed: its deployment is no longer wanted.
    patch_pool(&env, |p| p["name"] = json!("worker-b")).await;
    annotate(&api::<Worker>(&env), WORKER, "reconcile").await;
    let workers = api::<Worker>(&env);
    wait_for(
        "the old deployment's failed machine in lastError",
        WAIT,
        || async {
            mcm.sync().await?;
            let worker = workers.get(WORKER).await.map_err(err)?;
            let error = worker
                .status
                .as_ref()
                .and_then(|s| s.default.last_error.as_ref())
                .map(|e| e.description.clone())
                .unwrap_or_default();
            if error.contains("draining old-machine failed: PDB") {
                Ok(())
            } else {
                Err(format!("lastError: {error}"))
            }
        },
    )
    .await;
    let terminating = deployments.get(&old).await.unwrap();
    assert!(
        terminating.metadata.deletion_timestamp.is_some(),
        "the cleanup deleted the old deployment"
    );

    // MCM finishes: the failed machine is gone and its finalizer released.
    deployments
        .patch_status(
            &old,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"failedMachines": null}})),
        )
        .await
        .unwrap();
    // Still waiting for the old deployment.
    let worker = until_processing(&env, None, &old, || mcm.sync()).await;
    assert!(check_ready(&worker, LastOperationType::Reconcile).is_err());
    let_go(&env, &old).await;
    until_ready(&env, &mcm, LastOperationType::Reconcile).await;
    assert!(deployments.get_opt(&old).await.unwrap().is_none());
}

/// Item 10 of issue 20: while the rollout is polled, the operator only lists — no apply of
/// classes, secrets or deployments, no new `machineDeploymentsLastUpdateTime` — and a
/// replica count the cluster-autoscaler sets meanwhile is not written back.
#[tokio::test]
async fn rollout_polls_only_list_and_keep_the_autoscalers_replicas() {
    let env = setup(|_| {}).await;
    create_worker(&env, |_| {}).await;
    let workers = api::<Worker>(&env);
    // Without MCM the rollout waits for the machine set.
    until_processing(&env, None, "machine set", nothing).await;
    let md_name = format!("{}-worker-a-z1", env.namespace);
    let deployments = api::<MachineDeployment>(&env);
    // The cluster-autoscaler scales up (1 → 2, within [1, 3]) between two polls.
    deployments
        .patch_scale(
            &md_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    let before = workers.get(WORKER).await.unwrap().status.unwrap();
    let mut audit = support::audit::AuditLog::from_end(support::audit_log_path());
    tokio::time::sleep(Duration::from_secs(12)).await;
    let mix = audit.take_in_namespace(&env.namespace);
    let described = support::audit::describe(&mix);
    let count = |key: &str| mix.get(key).copied().unwrap_or_default();
    assert!(
        count("list machinedeployments") >= 2,
        "two polls list: {described}"
    );
    for write in [
        "patch machinedeployments",
        "patch machineclasses",
        "patch secrets",
        "patch machinesets",
    ] {
        assert_eq!(count(write), 0, "{write}: {described}");
    }
    let after = workers.get(WORKER).await.unwrap().status.unwrap();
    assert_eq!(
        after.machine_deployments_last_update_time, before.machine_deployments_last_update_time,
        "the status is written once per change: {described}"
    );
    assert_eq!(
        deployments.get(&md_name).await.unwrap().spec.replicas,
        Some(2),
        "the autoscaler's value stays"
    );

    let mcm = Mcm::new(&env);
    until_ready(&env, &mcm, LastOperationType::Create).await;
    assert_eq!(
        deployments.get(&md_name).await.unwrap().spec.replicas,
        Some(2)
    );
}

/// Issue #30: a reconcile gardenlet asks for on an unchanged Worker writes no class secret,
/// class or deployment (Gardener's generic actuator applies all of them every time); one
/// that someone else changed is applied again, and only that one.
#[tokio::test]
async fn a_reconcile_writes_only_the_machine_objects_that_differ() {
    let env = setup(|_| {}).await;
    create_worker(&env, |_| {}).await;
    let mcm = Mcm::new(&env);
    until_ready(&env, &mcm, LastOperationType::Create).await;
    let workers = api::<Worker>(&env);
    let class_name = api::<MachineClass>(&env)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items[0]
        .name_any();

    let mut audit = support::audit::AuditLog::from_end(support::audit_log_path());
    annotate(&workers, WORKER, "reconcile").await;
    until_ready(&env, &mcm, LastOperationType::Reconcile).await;
    let mix = audit.take_in_namespace(&env.namespace);
    let described = support::audit::describe(&mix);
    let count = |key: &str| mix.get(key).copied().unwrap_or_default();
    for write in [
        "patch machinedeployments",
        "patch machineclasses",
        "patch secrets",
    ] {
        assert_eq!(count(write), 0, "{write}: {described}");
    }

    // Someone else changes a field we own: the next reconcile takes it back, and writes
    // nothing else.
    api::<MachineClass>(&env)
        .patch(
            &class_name,
            &PatchParams::apply("someone-else").force(),
            &Patch::Apply(json!({
                "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
                "metadata": {"name": class_name}, "provider": "someone-else"
            })),
        )
        .await
        .unwrap();
    audit.take_in_namespace(&env.namespace);
    annotate(&workers, WORKER, "reconcile").await;
    until_ready(&env, &mcm, LastOperationType::Reconcile).await;
    let mix = audit.take_in_namespace(&env.namespace);
    let described = support::audit::describe(&mix);
    let count = |key: &str| mix.get(key).copied().unwrap_or_default();
    assert_eq!(count("patch machineclasses"), 1, "{described}");
    assert_eq!(count("patch secrets"), 0, "{described}");
    assert_eq!(count("patch machinedeployments"), 0, "{described}");
    let class = api::<MachineClass>(&env).get(&class_name).await.unwrap();
    assert_eq!(
        class.spec.provider.as_deref(),
        Some("local"),
        "our value is back"
    );
}

/// Item 8 of issue 20: failed machines that machine-controller-manager preserves
/// (`autoPreserveFailedMachineMax`) are unavailable on purpose; the rollout tolerates as many
/// unavailable machines as are preserved, and waits for any beyond that.
#[tokio::test]
async fn preserved_failed_machines_do_not_block_the_rollout() {
    let env = setup(|_| {}).await;
    create_worker(&env, |w| {
        let pool = &mut w["spec"]["pools"][0];
        pool["minimum"] = json!(2);
        pool["machineControllerManager"] = json!({"autoPreserveFailedMachineMax": 1});
    })
    .await;
    let mcm = Mcm::new(&env);
    let worker = until_ready(&env, &mcm, LastOperationType::Create).await;
    assert_eq!(
        worker.status.unwrap().machine_deployments[0].auto_preserve_failed_machine_max,
        Some(1)
    );
    let md_name = format!("{}-worker-a-z1", env.namespace);

    // One machine failed and is preserved: the reconcile succeeds. The stand-in writes the
    // status before the annotation asks for a run, so the run reads what the test set.
    mcm.set_unavailable(&md_name, 1, 1);
    mcm.sync().await.unwrap();
    annotate(&api::<Worker>(&env), WORKER, "reconcile").await;
    until_ready(&env, &mcm, LastOperationType::Reconcile).await;

    // A second unavailable machine is not preserved: the reconcile waits for it.
    mcm.set_unavailable(&md_name, 2, 1);
    mcm.sync().await.unwrap();
    annotate(&api::<Worker>(&env), WORKER, "reconcile").await;
    until_processing(
        &env,
        Some(LastOperationType::Reconcile),
        "1 machine(s) pending",
        || mcm.sync(),
    )
    .await;
    mcm.set_unavailable(&md_name, 0, 0);
    until_ready(&env, &mcm, LastOperationType::Reconcile).await;
}

/// Item 7 of issue 20: delete re-deploys the classes, waits until machine-controller-manager
/// holds the credentials secret before deleting anything, and after the machine objects are
/// gone waits until it has let go of the secret.
#[tokio::test]
async fn delete_redeploys_classes_and_waits_for_mcm_to_acquire_and_release_the_credentials() {
    let env = setup(|_| {}).await;
    let credentials: Secret = serde_json::from_value(json!({
        "metadata": {"name": "cloudprovider", "namespace": env.namespace},
        "data": {"token": base64(b"t")}
    }))
    .unwrap();
    let secrets = api::<Secret>(&env);
    secrets
        .create(&PostParams::default(), &credentials)
        .await
        .unwrap();
    create_worker(&env, |_| {}).await;
    let mcm = Mcm::new(&env);
    until_ready(&env, &mcm, LastOperationType::Create).await;
    let held = |secret: &Secret| {
        secret
            .finalizers()
            .iter()
            .any(|f| f == "machine.sapcloud.io/machine-controller")
    };
    assert!(held(&secrets.get("cloudprovider").await.unwrap()));

    // MCM has not taken hold of the secret yet, and a class went missing.
    secrets
        .patch(
            "cloudprovider",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    let classes = api::<MachineClass>(&env);
    let class = names(&classes, &ListParams::default())
        .await
        .into_iter()
        .next()
        .unwrap();
    delete(&classes, &class).await.unwrap();

    confirm_and_delete(&api::<Worker>(&env), WORKER).await;
    until_processing(
        &env,
        Some(LastOperationType::Delete),
        "holds the credentials secret",
        nothing,
    )
    .await;
    assert!(
        classes.get_opt(&class).await.unwrap().is_some(),
        "the class is deployed again before deleting"
    );
    let deployments = api::<MachineDeployment>(&env);
    assert_eq!(
        names(&deployments, &ListParams::default()).await.len(),
        1,
        "nothing is deleted before MCM holds the credentials"
    );

    // MCM takes hold; the deletion proceeds, and then waits for MCM to let go.
    mcm.sync_credentials().await.unwrap();
    until_processing(
        &env,
        Some(LastOperationType::Delete),
        "releases the credentials secret",
        || mcm.sync_deleted(),
    )
    .await;
    assert!(names(&deployments, &ListParams::default()).await.is_empty());
    assert!(names(&classes, &ListParams::default()).await.is_empty());
    mcm.sync_credentials().await.unwrap();
    until_worker_deleted(&env, nothing).await;
    assert!(!held(&secrets.get("cloudprovider").await.unwrap()));
}

/// What machine-controller-manager's two processes leave in the namespace with leader
/// election on: their Leases `machine-controller-manager` and `machine-controller`, last
/// renewed at `renewed` (15 s lease duration, their default).
async fn mcm_leases(env: &TestEnv, renewed: chrono::DateTime<chrono::Utc>) {
    let leases = api::<k8s_openapi::api::coordination::v1::Lease>(env);
    for name in ["machine-controller-manager", "machine-controller"] {
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": env.namespace},
            "spec": {
                "holderIdentity": "mcm-0",
                "leaseDurationSeconds": 15,
                "renewTime": renewed.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
            }
        });
        leases
            .patch(
                name,
                &PatchParams::apply("test-mcm").force(),
                &Patch::Apply(lease),
            )
            .await
            .unwrap();
    }
}

/// Item 7 of issue 42: a Worker deleted while machine-controller-manager is gone says so,
/// instead of reading like a slow deletion until the 5-minute bound runs out; once MCM is
/// back the deletion completes. The MCM stand-in has no leader election, so the test leaves
/// the Leases as a stopped MCM leaves them: last renewed minutes ago (the real MCM is stopped
/// in the same way mid-roll by `machines_e2e`'s lifecycle test).
#[tokio::test]
async fn a_deletion_while_mcm_is_gone_says_so_and_completes_once_it_is_back() {
    let env = setup(|_| {}).await;
    create_worker(&env, |_| {}).await;
    let mcm = Mcm::new(&env);
    until_ready(&env, &mcm, LastOperationType::Create).await;
    mcm_leases(&env, chrono::Utc::now() - chrono::Duration::minutes(10)).await;

    // MCM is gone: nothing acts on the deletion.
    confirm_and_delete(&api::<Worker>(&env), WORKER).await;
    let worker = until_processing(
        &env,
        Some(LastOperationType::Delete),
        "machine-controller-manager is not running: ",
        nothing,
    )
    .await;
    let (_, _, said) = last_operation(&worker).unwrap();
    eprintln!("the Worker says: {said}");
    assert!(
        said.starts_with(&format!(
            "Deleting the Worker: machine-controller-manager is not running: its leader Lease {}/machine-controller-manager was last renewed ",
            env.namespace
        )),
        "{said}"
    );
    assert!(
        said.contains(
            "; the deletion goes on once it runs again (waiting until 1 machine(s) are deleted)"
        ),
        "{said}"
    );
    assert_eq!(
        event_notes(&env, "MachineControllerManagerNotRunning").await,
        vec![format!(
            "machine-controller-manager is not running: its leader Lease {}/machine-controller-manager is no longer renewed",
            env.namespace
        )],
        "one Warning event for the wait"
    );

    // MCM is back (renewing its Leases again) and deletes the machines.
    until_worker_deleted(&env, || async {
        mcm_leases(&env, chrono::Utc::now()).await;
        mcm.sync_deleted().await
    })
    .await;
    assert!(
        names(&api::<Machine>(&env), &ListParams::default())
            .await
            .is_empty()
    );
}

/// Item 1 of issue 20: in-place pools (GEP-31). The Worker reports
/// `status.inPlaceUpdates.workerPoolToHashMap` for its in-place pools only, with the hash
/// gardenlet computes from the pool (Kubernetes minor version, image version, kubelet
/// settings, credentials rotations); a version bump changes the in-place pool's hash and
/// nothing for the rolling pool.
#[tokio::test]
async fn in_place_pools_report_their_hash_and_a_version_bump_changes_it() {
    use gardener_extension_node::api::cluster::ShootCredentialsView;
    use gardener_extension_node::api::worker::WorkerPool;
    use gardener_extension_node::controllers::worker::in_place;

    let rotation = json!({"rotation": {"certificateAuthorities": {
        "lastInitiationTime": "2026-11-01T10:00:00Z"
    }}});
    let credentials: ShootCredentialsView = serde_json::from_value(rotation.clone()).unwrap();
    let env = setup(|c| c["spec"]["shoot"]["status"]["credentials"] = rotation).await;
    let pools = |version: &str| {
        let base = fixtures::worker_json(&env.namespace)["spec"]["pools"][0].clone();
        let mut in_place = base.clone();
        in_place["updateStrategy"] = json!("AutoInPlaceUpdate");
        in_place["kubernetesVersion"] = json!(version);
        in_place["kubeletConfig"] = json!({"cpuManagerPolicy": "static"});
        let mut rolling = base;
        rolling["name"] = json!("worker-b");
        rolling["updateStrategy"] = json!("AutoRollingUpdate");
        rolling["kubernetesVersion"] = json!(version);
        json!([in_place, rolling])
    };
    let expected = |pools: &Value| {
        let pool: WorkerPool = serde_json::from_value(pools[0].clone()).unwrap();
        in_place::update_hash(&pool, Some(&credentials)).unwrap()
    };
    let first = pools("1.35.2");
    create_worker(&env, |w| w["spec"]["pools"] = first.clone()).await;
    let mcm = Mcm::new(&env);
    let worker = until_ready(&env, &mcm, LastOperationType::Create).await;
    let map = worker
        .status
        .unwrap()
        .in_place_updates
        .unwrap()
        .worker_pool_to_hash_map;
    assert_eq!(
        map,
        BTreeMap::from([("worker-a".to_string(), expected(&first))]),
        "only the in-place pool"
    );
    let classes_before = names(&api::<MachineClass>(&env), &ListParams::default()).await;

    // A patch release changes nothing; a minor version bump changes the in-place hash.
    let patch_release = pools("1.35.3");
    patch_worker_spec(&env, json!({"pools": patch_release})).await;
    annotate(&api::<Worker>(&env), WORKER, "reconcile").await;
    let worker = until_ready(&env, &mcm, LastOperationType::Reconcile).await;
    assert_eq!(
        worker
            .status
            .unwrap()
            .in_place_updates
            .unwrap()
            .worker_pool_to_hash_map["worker-a"],
        expected(&first)
    );
    assert_eq!(
        names(&api::<MachineClass>(&env), &ListParams::default()).await,
        classes_before,
        "a patch release keeps the classes"
    );
    let bumped = pools("1.36.3");
    patch_worker_spec(&env, json!({"pools": bumped})).await;
    annotate(&api::<Worker>(&env), WORKER, "reconcile").await;
    let worker = until_ready(&env, &mcm, LastOperationType::Reconcile).await;
    let map = worker
        .status
        .unwrap()
        .in_place_updates
        .unwrap()
        .worker_pool_to_hash_map;
    assert_ne!(expected(&bumped), expected(&first));
    assert_eq!(
        map,
        BTreeMap::from([("worker-a".to_string(), expected(&bumped))])
    );
    // The in-place pool gets new classes (`WorkerPoolHashInPlace`: gardenlet keeps the
    // version out of its nodeAgentSecretName, the in-place hash is in the class name), and
    // its deployment's template points at them: that is what makes machine-controller-manager
    // start an in-place update. The rolling pool keeps its classes (its secret name is the
    // same in this test; gardenlet would change it).
    let classes_after = names(&api::<MachineClass>(&env), &ListParams::default()).await;
    let of_pool = |classes: &BTreeSet<String>, pool: &str| -> Vec<String> {
        classes
            .iter()
            .filter(|c| c.contains(&format!("-{pool}-z")))
            .cloned()
            .collect()
    };
    assert_eq!(
        of_pool(&classes_after, "worker-b"),
        of_pool(&classes_before, "worker-b")
    );
    let new_classes = of_pool(&classes_after, "worker-a");
    assert!(!new_classes.is_empty());
    assert!(
        new_classes
            .iter()
            .all(|c| !of_pool(&classes_before, "worker-a").contains(c)),
        "{new_classes:?} vs {classes_before:?}"
    );
    for deployment in api::<MachineDeployment>(&env)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|d| d.name_any().contains("-worker-a-z"))
    {
        let class = deployment
            .spec
            .template
            .spec
            .and_then(|s| s.class)
            .map(|c| c.name)
            .unwrap_or_default();
        assert!(new_classes.contains(&class), "{class} in {new_classes:?}");
    }

    // The pool turns into a rolling pool: its entry is dropped.
    let mut rolling_only = bumped.clone();
    rolling_only[0]["updateStrategy"] = json!("AutoRollingUpdate");
    patch_worker_spec(&env, json!({"pools": rolling_only})).await;
    annotate(&api::<Worker>(&env), WORKER, "reconcile").await;
    let worker = until_ready(&env, &mcm, LastOperationType::Reconcile).await;
    assert!(
        worker
            .status
            .unwrap()
            .in_place_updates
            .is_none_or(|u| u.worker_pool_to_hash_map.is_empty())
    );
}

/// Issue 20, item 6 for delete (`WaitUntilMachineResourcesDeleted`): a machine that fails
/// while being deleted fails the delete at once with its own error.
#[tokio::test]
async fn delete_fails_with_the_errors_of_failed_machines() {
    let env = setup(|_| {}).await;
    create_worker(&env, |_| {}).await;
    let mcm = Mcm::new(&env);
    until_ready(&env, &mcm, LastOperationType::Create).await;
    let md_name = format!("{}-worker-a-z1", env.namespace);
    take_over(&env, &md_name).await;
    mcm.fail(&md_name, "stuck-machine", "deleting the VM failed: locked")
        .await;
    confirm_and_delete(&api::<Worker>(&env), WORKER).await;
    until_last_error(&env, "deleting the VM failed: locked").await;
    let_go(&env, &md_name).await;
    until_worker_deleted(&env, || mcm.sync_deleted()).await;
}

/// Issue 20, item 1 (`MachineConditionChangedPredicate` upstream): machine-controller-manager
/// taking a machine past `CandidateForUpdate` — a user selecting a node of a
/// `ManualInPlaceUpdate` pool — runs the Worker again without gardenlet's annotation, so it
/// follows the update; a machine merely becoming a candidate does not.
#[tokio::test]
async fn a_machine_leaving_candidate_for_update_runs_the_worker_again() {
    let env = setup(|_| {}).await;
    create_worker(&env, |w| {
        w["spec"]["pools"][0]["updateStrategy"] = json!("ManualInPlaceUpdate");
    })
    .await;
    let mcm = Mcm::new(&env);
    let worker = until_ready(&env, &mcm, LastOperationType::Create).await;
    let stamp = |w: &Worker| {
        w.status
            .as_ref()
            .and_then(|s| s.default.last_operation.as_ref())
            .map(|l| l.last_update_time)
    };
    let created = stamp(&worker);
    let machines = api::<Machine>(&env);
    let machine = names(&machines, &ListParams::default())
        .await
        .into_iter()
        .next()
        .unwrap();
    let set_reason = |reason: &'static str| {
        let machines = machines.clone();
        let machine = machine.clone();
        async move {
            machines
                .patch_status(
                    &machine,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"conditions": [{
                        "type": "InPlaceUpdate", "status": "True", "reason": reason,
                        "lastTransitionTime": "2026-12-01T00:00:00Z",
                    }]}})),
                )
                .await
                .unwrap();
        }
    };
    // Runs write a new lastUpdateTime (whole seconds): leave a second between them.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    set_reason("CandidateForUpdate").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let workers = api::<Worker>(&env);
    assert_eq!(
        stamp(&workers.get(WORKER).await.unwrap()),
        created,
        "a candidate alone does not run the Worker"
    );
    set_reason("SelectedForUpdate").await;
    wait_for("the Worker to run again", WAIT, || async {
        let worker = workers.get(WORKER).await.map_err(err)?;
        if stamp(&worker) != created {
            Ok(())
        } else {
            Err(format!("{:?}", last_operation(&worker)))
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// The machine state of a control-plane migration, gardener's and ours

/// Labels an in-place update puts on a machine (machine-controller-manager's
/// `LabelKeyNodeCandidateForUpdate`, `LabelKeyNodeSelectedForUpdate`).
const IN_PLACE_LABELS: [(&str, &str); 2] = [
    ("node.machine.sapcloud.io/candidate-for-update", "true"),
    ("node.machine.sapcloud.io/selected-for-update", "true"),
];

fn dynamic(env: &TestEnv, namespace: &str, kind: &str) -> Api<kube::api::DynamicObject> {
    let resource = kube::api::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "machine.sapcloud.io",
        "v1alpha1",
        kind,
    ));
    Api::namespaced_with(env.client.clone(), namespace, &resource)
}

/// Creates `object` with its status (the status subresource is written separately, as the
/// controller that owns it does); returns its uid.
async fn create_with_status(api: &Api<kube::api::DynamicObject>, mut object: Value) -> String {
    let status = object
        .as_object_mut()
        .unwrap()
        .remove("status")
        .unwrap_or(Value::Null);
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    let created = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(object).unwrap(),
        )
        .await
        .unwrap();
    if !status.is_null() {
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .unwrap();
    }
    created.uid().unwrap()
}

fn owner(kind: &str, name: &str, uid: &str) -> Value {
    json!([{"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": kind, "name": name, "uid": uid,
        "controller": true, "blockOwnerDeletion": true}])
}

/// A pool's machine objects as machine-controller-manager leaves them in a running seed:
/// deployment `deployment` (3 replicas) with an old and a new MachineSet, joined machines
/// (node label and provider ID, or only one of them; one in the middle of an in-place
/// update; one without owner, as MCM's adoption after a restore finds them), one machine
/// still creating, and a second deployment `<namespace>-worker-b-z1` with a set and a
/// machine of its own (recorded, but wanted by no restore here). Everything with the status
/// MCM reports, finalizers and owner references.
async fn create_pool_objects(env: &TestEnv, deployment: &str) {
    let ns = env.namespace.as_str();
    let class = format!("{deployment}-0a1b2");
    let spec = |provider_id: Option<&str>| {
        let mut spec = json!({
            "class": {"kind": "MachineClass", "name": class},
            "nodeTemplate": {
                "metadata": {"labels": {"worker.gardener.cloud/pool": "worker-a"},
                    "annotations": {"example.com/note": "kept"}},
                "spec": {"taints": [{"key": "dedicated", "value": "gvisor", "effect": "NoSchedule"}]}
            },
            "drainTimeout": "2h0m0s",
            "creationTimeout": "20m0s"
        });
        if let Some(id) = provider_id {
            spec["providerID"] = json!(id);
        }
        spec
    };
    let deployments = dynamic(env, ns, "MachineDeployment");
    let deployment_uid = create_with_status(&deployments, json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
        "metadata": {"name": deployment, "namespace": ns,
            "labels": {"worker.gardener.cloud/pool": "worker-a"},
            "annotations": {"cluster-autoscaler.kubernetes.io/scale-down-disabled": "false"},
            "finalizers": ["machine.sapcloud.io/machine-controller-manager"]},
        "spec": {"replicas": 3, "minReadySeconds": 500,
            "selector": {"matchLabels": {"name": deployment}},
            "template": {"metadata": {"labels": {"name": deployment}}, "spec": spec(None)}},
        "status": {"replicas": 3, "readyReplicas": 2, "availableReplicas": 2, "updatedReplicas": 3}
    }))
    .await;
    let other = format!("{ns}-worker-b-z1");
    let other_uid = create_with_status(
        &deployments,
        json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
            "metadata": {"name": other, "namespace": ns},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"name": other}},
                "template": {"metadata": {"labels": {"name": other}}, "spec": spec(None)}}
        }),
    )
    .await;

    let sets = dynamic(env, ns, "MachineSet");
    let set = |name: &str, replicas: i64| {
        json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
            "metadata": {"name": name, "namespace": ns, "labels": {"name": deployment},
                "annotations": {"deployment.kubernetes.io/revision": "2"},
                "ownerReferences": owner("MachineDeployment", deployment, &deployment_uid),
                "finalizers": ["machine.sapcloud.io/machine-controller-manager"]},
            "spec": {"replicas": replicas, "minReadySeconds": 500,
                "selector": {"matchLabels": {"name": deployment}},
                "template": {"metadata": {"labels": {"name": deployment}}, "spec": spec(None)}},
            "status": {"replicas": replicas, "readyReplicas": replicas, "observedGeneration": 1}
        })
    };
    let new_set = format!("{deployment}-new22");
    let old_set = format!("{deployment}-old11");
    let new_uid = create_with_status(&sets, set(&new_set, 3)).await;
    let old_uid = create_with_status(&sets, set(&old_set, 0)).await;
    // The second deployment's set.
    let stray_set = format!("{other}-abcde");
    let stray_uid = create_with_status(
        &sets,
        json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
            "metadata": {"name": stray_set, "namespace": ns, "labels": {"name": other},
                "ownerReferences": owner("MachineDeployment", &other, &other_uid)},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"name": other}},
                "template": {"metadata": {"labels": {"name": other}}, "spec": spec(None)}}
        }),
    )
    .await;
    let machines = dynamic(env, ns, "Machine");
    let machine = |name: String,
                   owner_set: Option<(&str, &str)>,
                   node: Option<&str>,
                   provider_id: Option<&str>,
                   extra_labels: &[(&str, &str)]| {
        let mut labels = json!({"name": deployment});
        if let Some(node) = node {
            labels["node"] = json!(node);
        }
        for (key, value) in extra_labels {
            labels[*key] = json!(value);
        }
        let mut object = json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {"name": name, "namespace": ns, "labels": labels,
                "annotations": {"machinepriority.machine.sapcloud.io": "3"},
                "finalizers": ["machine.sapcloud.io/machine-controller-manager"]},
            "spec": spec(provider_id),
            "status": {
                "currentStatus": {"phase": if node.is_some() { "Running" } else { "Pending" },
                    "lastUpdateTime": "2026-12-01T10:00:00Z", "timeoutActive": false},
                "lastOperation": {"description": "Machine is now ready", "state": "Successful",
                    "type": "Create", "lastUpdateTime": "2026-12-01T10:00:00Z"},
                "conditions": [{"type": "Ready", "status": "True",
                    "lastTransitionTime": "2026-12-01T10:00:00Z"}]
            }
        });
        if let Some((set, uid)) = owner_set {
            object["metadata"]["ownerReferences"] = owner("MachineSet", set, uid);
        }
        object
    };
    for object in [
        machine(
            format!("{new_set}-aaaaa"),
            Some((&new_set, &new_uid)),
            Some("node-a"),
            Some("local:///machine-a"),
            &IN_PLACE_LABELS,
        ),
        // Joined by provider ID only (the node label comes later).
        machine(
            format!("{new_set}-bbbbb"),
            Some((&new_set, &new_uid)),
            None,
            Some("local:///machine-b"),
            &[],
        ),
        // Still creating: neither; not recorded.
        machine(
            format!("{new_set}-ccccc"),
            Some((&new_set, &new_uid)),
            None,
            None,
            &[],
        ),
        // The old set's last machine, joined by node label only.
        machine(
            format!("{old_set}-zzzzz"),
            Some((&old_set, &old_uid)),
            Some("node-z"),
            None,
            &[],
        ),
        // Without owner: found by its `name` label (gardener lists these first).
        machine(
            format!("{deployment}-x-unowned"),
            None,
            Some("node-x"),
            Some("local:///machine-x"),
            &[],
        ),
    ] {
        create_with_status(&machines, object).await;
    }
    let mut stray = machine(
        format!("{stray_set}-qqqqq"),
        Some((&stray_set, &stray_uid)),
        Some("node-q"),
        Some("local:///machine-q"),
        &[],
    );
    stray["metadata"]["labels"]["name"] = json!(other);
    create_with_status(&machines, stray).await;
}

/// JSON without `null`s and zero values (`0`, `false`, `""`) and without the empty objects
/// and lists that remain: equal for what Go's `omitempty` of gardener's typed objects and the
/// API server's pruning consider the same (a MachineSet's `replicas: 0` is absent in
/// gardener's encoding, as are its empty nested structs).
fn without_empty(value: &Value) -> Option<Value> {
    match value {
        Value::Null | Value::Bool(false) => None,
        Value::Number(n) if n.as_f64() == Some(0.0) => None,
        Value::String(text) if text.is_empty() => None,
        Value::Object(fields) => {
            let kept: serde_json::Map<String, Value> = fields
                .iter()
                .filter_map(|(k, v)| without_empty(v).map(|v| (k.clone(), v)))
                .collect();
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
        Value::Array(items) => {
            let kept: Vec<Value> = items.iter().filter_map(without_empty).collect();
            (!kept.is_empty()).then_some(Value::Array(kept))
        }
        other => Some(other.clone()),
    }
}

/// What a restore must bring back of a MachineSet or Machine: name, labels, annotations and
/// spec (namespace, owner, status and the rest are the destination's).
fn restorable(object: &Value) -> (String, Value) {
    let metadata = &object["metadata"];
    (
        metadata["name"].as_str().unwrap_or_default().to_string(),
        without_empty(&json!({
            "labels": metadata["labels"],
            "annotations": metadata["annotations"],
            "spec": object["spec"],
        }))
        .unwrap_or(Value::Null),
    )
}

/// Per deployment: replicas, and the restorable sets and machines in the recorded order.
type StateShape = BTreeMap<String, (i32, Vec<(String, Value)>, Vec<(String, Value)>)>;

fn shape(state: &state::MachineState) -> StateShape {
    state
        .machine_deployments
        .iter()
        .map(|(name, d)| {
            (
                name.clone(),
                (
                    d.replicas,
                    d.machine_sets.iter().map(restorable).collect(),
                    d.machines.iter().map(restorable).collect(),
                ),
            )
        })
        .collect()
}

async fn restorable_in(
    env: &TestEnv,
    namespace: &str,
    kind: &str,
) -> BTreeMap<String, (Value, String)> {
    dynamic(env, namespace, kind)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|o| {
            let (name, value) = restorable(&serde_json::to_value(o).unwrap());
            (name, (value, o.namespace().unwrap_or_default()))
        })
        .collect()
}

/// The machine state both ways between gardener v1.149.3's own code (the `machine-state`
/// program) and ours, on the real API server: gardenlet's recorded state (ShootState entry
/// and the destination Worker's `status.state`) is what our `state_objects::record` +
/// `state::encode` produce from the same objects, our Worker's restore brings gardenlet's
/// state back as the same MachineSets and Machines, and gardener's generic actuator restores
/// our encoded state into the same objects. A drifted field name, compression or nesting on
/// either side leaves a restore without machines or with other ones, and fails here.
#[tokio::test]
async fn the_machine_state_of_gardener_and_ours_restore_the_same_machines_both_ways() {
    use gardener_extension_node::controllers::worker::state_objects;

    let source = setup(|_| {}).await;
    let deployment = format!("{}-worker-a-z1", source.namespace);
    create_pool_objects(&source, &deployment).await;
    let technical_id = source.namespace.clone();
    let destination =
        setup(|c| c["spec"]["shoot"]["status"]["technicalID"] = json!(technical_id)).await;

    // gardenlet records (source seed) and writes the Worker's state (destination seed).
    let recorded =
        support::gardener::gardenlet_machine_state(&source.namespace, &destination.namespace).await;
    let machine_state_entry = recorded.shoot_state["spec"]["gardener"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "machine-state")
        .unwrap_or_else(|| panic!("no machine-state in {}", recorded.shoot_state));
    assert_eq!(machine_state_entry["type"], "machine-state");
    assert_eq!(machine_state_entry["data"], recorded.machine_state);
    assert!(
        recorded.shoot_state["spec"]["extensions"].is_null(),
        "no extension state: {}",
        recorded.shoot_state
    );
    // Both forms are {"state": <base64 of gzip>} only.
    for form in [&recorded.machine_state, &recorded.worker_state] {
        let fields = form.as_object().unwrap_or_else(|| panic!("{form}"));
        assert_eq!(fields.keys().collect::<Vec<_>>(), ["state"], "{form}");
        assert!(fields["state"].is_string(), "{form}");
    }
    let theirs = state::decode(Some(&recorded.machine_state)).unwrap();
    let theirs_for_worker = state::decode(Some(&recorded.worker_state)).unwrap();

    // Ours from the same objects.
    let list = |kind: &'static str| {
        let api = dynamic(&source, &source.namespace, kind);
        async move { api.list(&ListParams::default()).await.unwrap().items }
    };
    let ours = state_objects::record(
        &list("MachineDeployment").await,
        &list("MachineSet").await,
        &list("Machine").await,
    );
    let other = format!("{}-worker-b-z1", source.namespace);
    let names = |s: &StateShape, d: &str| -> (i32, Vec<String>, Vec<String>) {
        let (replicas, sets, machines) = &s[d];
        (
            *replicas,
            sets.iter().map(|(n, _)| n.clone()).collect(),
            machines.iter().map(|(n, _)| n.clone()).collect(),
        )
    };
    let expected_names = (
        3,
        vec![format!("{deployment}-new22"), format!("{deployment}-old11")],
        vec![
            format!("{deployment}-x-unowned"),
            format!("{deployment}-new22-aaaaa"),
            format!("{deployment}-new22-bbbbb"),
            format!("{deployment}-old11-zzzzz"),
        ],
    );
    assert_eq!(names(&shape(&theirs), &deployment), expected_names);
    assert_eq!(
        shape(&theirs).keys().collect::<Vec<_>>(),
        [&deployment, &other]
    );
    assert_eq!(shape(&ours), shape(&theirs), "our record is gardenlet's");
    assert_eq!(shape(&theirs_for_worker), shape(&theirs));
    for (kind, objects) in [
        (
            "MachineSet",
            &theirs.machine_deployments[&deployment].machine_sets,
        ),
        ("Machine", &theirs.machine_deployments[&deployment].machines),
    ] {
        for object in objects {
            assert_eq!(object["metadata"]["namespace"], source.namespace.as_str());
            assert!(
                object["metadata"].get("ownerReferences").is_none(),
                "{kind}"
            );
            assert!(object["metadata"].get("finalizers").is_none(), "{kind}");
        }
    }
    for machine in &theirs_for_worker.machine_deployments[&deployment].machines {
        assert_eq!(
            machine["metadata"]["namespace"],
            destination.namespace.as_str(),
            "gardenlet moves the state into the Worker's namespace"
        );
    }
    // What a restore must bring back: the source objects' names, labels, annotations, specs.
    let source_sets = restorable_in(&source, &source.namespace, "MachineSet").await;
    let source_machines = restorable_in(&source, &source.namespace, "Machine").await;
    let expected = |names: &[String], from: &BTreeMap<String, (Value, String)>| {
        names
            .iter()
            .map(|n| (n.clone(), from[n].0.clone()))
            .collect::<BTreeMap<_, _>>()
    };
    let expected_sets = expected(&expected_names.1, &source_sets);
    let expected_machines = expected(&expected_names.2, &source_machines);
    let in_place = &expected_machines[&format!("{deployment}-new22-aaaaa")]["labels"];
    for (key, value) in IN_PLACE_LABELS {
        assert_eq!(in_place[key], value, "{in_place}");
    }
    let restored = |found: BTreeMap<String, (Value, String)>, namespace: &str| {
        found
            .into_iter()
            .map(|(name, (value, ns))| {
                assert_eq!(ns, namespace);
                (name, value)
            })
            .collect::<BTreeMap<_, _>>()
    };

    // gardenlet's state through our Worker's restore.
    let mut worker = fixtures::worker_json(&destination.namespace);
    worker["spec"]["pools"][0]["maximum"] = json!(4);
    let workers = api::<Worker>(&destination);
    support::gardener::create_waiting_for_state(&workers, worker, recorded.worker_state.clone())
        .await;
    annotate(&workers, WORKER, "restore").await;
    let by_us = wait_for("our restore of gardenlet's state", WAIT, || async {
        let machines = restorable_in(&destination, &destination.namespace, "Machine").await;
        let sets = restorable_in(&destination, &destination.namespace, "MachineSet").await;
        let deployment_replicas = api::<MachineDeployment>(&destination)
            .get_opt(&deployment)
            .await
            .map_err(err)?
            .and_then(|d| d.spec.replicas);
        if machines.len() == expected_machines.len() && deployment_replicas.is_some() {
            Ok((sets, machines, deployment_replicas))
        } else {
            Err(format!("{:?} {deployment_replicas:?}", machines.keys()))
        }
    })
    .await;
    assert_eq!(restored(by_us.0, &destination.namespace), expected_sets);
    assert_eq!(restored(by_us.1, &destination.namespace), expected_machines);
    assert_eq!(by_us.2, Some(3), "the recorded replicas");

    // Our state as the ShootState's machine state: gardenlet's RestoreWorkerState moves it
    // into the Worker of another namespace (decoding and encoding it with gardener's code),
    // and gardener's generic actuator restores from there (RestoreWithoutReconcile).
    let ours_encoded = state::encode(&ours).unwrap().unwrap();
    let by_gardener_ns = format!("{}-by-gardener", source.namespace);
    support::create_namespace(&source.client, &by_gardener_ns).await;
    let state_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(state_file.path(), ours_encoded.to_string()).unwrap();
    // Read by gardener's decoder (UnmarshalMachineState) as it is.
    let decoded_by_gardener = support::gardener::run_machine_state(&[
        "decode",
        "--state-file",
        state_file.path().to_str().unwrap(),
    ])
    .await;
    let decoded_by_gardener: state::MachineState =
        serde_json::from_value(decoded_by_gardener).unwrap();
    assert_eq!(shape(&decoded_by_gardener), shape(&ours));
    let class = format!("{deployment}-0a1b2");
    let by_gardener = support::gardener::run_machine_state(&[
        "restore",
        "--namespace",
        &by_gardener_ns,
        "--state-file",
        state_file.path().to_str().unwrap(),
        "--from-shoot-state",
        "--pool",
        "worker-a",
        "--deployment",
        &format!("{deployment}={class}"),
    ])
    .await;
    assert_eq!(
        by_gardener["machineDeployments"][0]["spec"]["replicas"], 3,
        "{by_gardener}"
    );
    assert_eq!(
        restored(
            restorable_in(&source, &by_gardener_ns, "MachineSet").await,
            &by_gardener_ns
        ),
        expected_sets
    );
    assert_eq!(
        restored(
            restorable_in(&source, &by_gardener_ns, "Machine").await,
            &by_gardener_ns
        ),
        expected_machines
    );
}
