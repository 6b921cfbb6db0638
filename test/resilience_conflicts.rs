//! Resilience scenario 4: a conflict storm. While the operator creates and then reconciles a
//! shoot's ContainerRuntimes, OperatingSystemConfigs and Worker, another writer keeps
//! updating labels and annotations of the same extension objects and of every object the
//! controllers write (ManagedResources, their Secrets, the user data Secret, the machine
//! class, its Secret, the machine deployment), and the extension objects carry another
//! controller's finalizer. Our writes (server-side apply with our field manager, status merge
//! patches, finalizer patches with a resourceVersion precondition) must never remove or
//! overwrite the other writer's fields, and the storm must not make the operator loop: the
//! reconcile count (`controller_reconciles_total` on `/metrics`) stays bounded, and metadata
//! writes to objects that are already ready cause no reconcile at all.
//!
//! Rounds of the storm: 30 under `make test`, 100 with `RESILIENCE_FULL=1`.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use gardener_extension_node::api::machine::{MachineClass, MachineDeployment};
use gardener_extension_node::api::{
    ContainerRuntime, LastOperationType, ManagedResource, OperatingSystemConfig, Worker,
};
use gardener_extension_node::extension::ExtensionKind;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;
use support::gardener::annotate;
use support::load::{self, CREATED, Extra, Shoot, WORKER, list, reconcile_counts, total};
use support::operator::OperatorProcess;
use support::{TestEnv, wait_for};

const WAIT: Duration = Duration::from_secs(180);
const ROUND_LABEL: &str = "foreign.example/round";
const OWNER_LABEL: &str = "foreign.example/owner";
const NOTE_ANNOTATION: &str = "foreign.example/note";
const FOREIGN_FINALIZER: &str = "foreign.example/protect";

fn api<K>(env: &TestEnv) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    Api::namespaced(env.client.clone(), &env.namespace)
}

/// Every object the other writer touches: `(kind, name)`.
async fn targets(shoot: &Shoot) -> Vec<(&'static str, String)> {
    let env = &shoot.env;
    let mut targets: Vec<(&'static str, String)> = Vec::new();
    targets.extend(
        shoot
            .runtime_names()
            .into_iter()
            .map(|n| ("ContainerRuntime", n)),
    );
    targets.extend(
        shoot
            .osc_names()
            .into_iter()
            .map(|n| ("OperatingSystemConfig", n)),
    );
    targets.push(("Worker", WORKER.to_string()));
    for mr in list::<ManagedResource>(env).await.unwrap_or_default() {
        targets.push(("ManagedResource", mr.name_any()));
    }
    for secret in list::<Secret>(env).await.unwrap_or_default() {
        let name = secret.name_any();
        let machine_class = secret
            .labels()
            .get("gardener.cloud/purpose")
            .is_some_and(|p| p == "machineclass");
        if name.starts_with("managedresource-") || name.starts_with("osc-result-") || machine_class
        {
            targets.push(("Secret", name));
        }
    }
    for class in list::<MachineClass>(env).await.unwrap_or_default() {
        targets.push(("MachineClass", class.name_any()));
    }
    for deployment in list::<MachineDeployment>(env).await.unwrap_or_default() {
        targets.push(("MachineDeployment", deployment.name_any()));
    }
    targets
}

/// The other writer: a blind merge patch of its own label and annotation (no
/// resourceVersion, like a controller that owns only these keys). NotFound is skipped (the
/// object is not there yet).
async fn write(env: &TestEnv, kind: &str, name: &str, round: usize) {
    let body = json!({"metadata": {
        "labels": {ROUND_LABEL: round.to_string()},
        "annotations": {ROUND_LABEL: round.to_string()},
    }});
    let patch = Patch::Merge(&body);
    let params = PatchParams::default();
    let resource = match kind {
        "ContainerRuntime" => ApiResource::erase::<ContainerRuntime>(&()),
        "OperatingSystemConfig" => ApiResource::erase::<OperatingSystemConfig>(&()),
        "Worker" => ApiResource::erase::<Worker>(&()),
        "ManagedResource" => ApiResource::erase::<ManagedResource>(&()),
        "Secret" => ApiResource::erase::<Secret>(&()),
        "MachineClass" => ApiResource::erase::<MachineClass>(&()),
        _ => ApiResource::erase::<MachineDeployment>(&()),
    };
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.namespace, &resource);
    let result = api.patch(name, &params, &patch).await.map(drop);
    match result {
        Ok(()) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(error) => panic!("foreign write to {kind} {name}: {error}"),
    }
}

/// `rounds` rounds over every current target, `pause` apart; returns the last round written.
async fn storm(shoot: &Shoot, first: usize, rounds: usize, pause: Duration) -> usize {
    let mut last = first;
    for round in first..first + rounds {
        for (kind, name) in targets(shoot).await {
            write(&shoot.env, kind, &name, round).await;
        }
        last = round;
        tokio::time::sleep(pause).await;
    }
    last
}

fn check_metadata<K: Resource>(
    object: &K,
    kind: &str,
    round: usize,
    extension: bool,
) -> Vec<String> {
    let mut problems = Vec::new();
    let name = format!(
        "{kind}/{}",
        object.meta().name.as_deref().unwrap_or_default()
    );
    let want = round.to_string();
    let labels = object.meta().labels.clone().unwrap_or_default();
    let annotations = object.meta().annotations.clone().unwrap_or_default();
    if labels.get(ROUND_LABEL) != Some(&want) {
        problems.push(format!("{name}: label {:?}", labels.get(ROUND_LABEL)));
    }
    if annotations.get(ROUND_LABEL) != Some(&want) {
        problems.push(format!(
            "{name}: annotation {:?}",
            annotations.get(ROUND_LABEL)
        ));
    }
    if extension {
        if labels.get(OWNER_LABEL).map(String::as_str) != Some("storm") {
            problems.push(format!("{name}: creation label lost"));
        }
        if annotations.get(NOTE_ANNOTATION).map(String::as_str) != Some("keep") {
            problems.push(format!("{name}: creation annotation lost"));
        }
        let finalizers = object.meta().finalizers.clone().unwrap_or_default();
        if !finalizers.iter().any(|f| f == FOREIGN_FINALIZER) {
            problems.push(format!("{name}: foreign finalizer lost: {finalizers:?}"));
        }
    }
    problems
}

async fn check_all<K>(env: &TestEnv, kind: &str, round: usize, extension: bool) -> Vec<String>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    list::<K>(env)
        .await
        .unwrap()
        .iter()
        .flat_map(|o| check_metadata(o, kind, round, extension))
        .collect()
}

/// The other writer's fields on every object it wrote.
async fn foreign_fields_intact(shoot: &Shoot, round: usize) -> Vec<String> {
    let env = &shoot.env;
    let mut problems = Vec::new();
    problems.extend(check_all::<ContainerRuntime>(env, "ContainerRuntime", round, true).await);
    problems.extend(
        check_all::<OperatingSystemConfig>(env, "OperatingSystemConfig", round, true).await,
    );
    problems.extend(check_all::<Worker>(env, "Worker", round, true).await);
    problems.extend(check_all::<ManagedResource>(env, "ManagedResource", round, false).await);
    problems.extend(check_all::<MachineClass>(env, "MachineClass", round, false).await);
    problems.extend(check_all::<MachineDeployment>(env, "MachineDeployment", round, false).await);
    let secrets: Vec<Secret> = list::<Secret>(env).await.unwrap();
    for (kind, name) in targets(shoot).await {
        if kind == "Secret" {
            let secret = secrets.iter().find(|s| s.name_any() == name).unwrap();
            problems.extend(check_metadata(secret, "Secret", round, false));
        }
    }
    problems
}

#[tokio::test]
async fn a_concurrent_writer_keeps_its_fields_and_causes_no_hot_loop() {
    let rounds = load::pick(30, 100);
    let runtimes = load::pick(4, 10);
    let env = support::env().await;
    let kubeconfig = env.kubeconfig.clone();
    let shoot = Shoot::prepare(env, runtimes, |_| {}).await;
    let objects = shoot.object_count();
    let operator = OperatorProcess::start(&kubeconfig, &[]);
    wait_for("operator ready", WAIT, || async {
        match operator.http_get("/readyz").await {
            Some((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // Create under the storm.
    let extra = Extra {
        labels: BTreeMap::from([(OWNER_LABEL.to_string(), "storm".to_string())]),
        annotations: BTreeMap::from([(NOTE_ANNOTATION.to_string(), "keep".to_string())]),
        finalizers: vec![FOREIGN_FINALIZER.to_string()],
    };
    shoot.create_objects("reconcile", &extra).await;
    let pause = Duration::from_millis(50);
    let (mut last, ()) = tokio::join!(
        storm(&shoot, 0, rounds, pause),
        load::wait_all_ready(std::slice::from_ref(&shoot), CREATED, WAIT),
    );
    load::wait_all_ready(std::slice::from_ref(&shoot), CREATED, WAIT).await;
    shoot.check_children(1).await.unwrap();
    last = storm(&shoot, last + 1, 1, pause).await;

    // gardenlet asks for a reconcile of everything: our controllers write every child
    // again (server-side apply, status) over the other writer's fields, still under the storm.
    for name in shoot.runtime_names() {
        annotate(&api::<ContainerRuntime>(&shoot.env), &name, "reconcile").await;
    }
    for name in shoot.osc_names() {
        annotate(
            &api::<OperatingSystemConfig>(&shoot.env),
            &name,
            "reconcile",
        )
        .await;
    }
    annotate(&api::<Worker>(&shoot.env), WORKER, "reconcile").await;
    let reconciled = [LastOperationType::Reconcile];
    let (storm_last, ()) = tokio::join!(
        storm(&shoot, last + 1, rounds, pause),
        load::wait_all_ready(std::slice::from_ref(&shoot), &reconciled, WAIT),
    );
    last = storm_last;
    load::wait_all_ready(std::slice::from_ref(&shoot), &reconciled, WAIT).await;
    shoot.check_children(1).await.unwrap();
    shoot
        .check_finalizers(&[FOREIGN_FINALIZER.to_string()])
        .await
        .unwrap();
    let problems = foreign_fields_intact(&shoot, last).await;
    assert!(
        problems.is_empty(),
        "our writes clobbered foreign fields: {problems:#?}"
    );
    for (kind, finalizer) in [
        ("ContainerRuntime", ContainerRuntime::FINALIZER),
        ("OperatingSystemConfig", OperatingSystemConfig::FINALIZER),
        ("Worker", Worker::FINALIZER),
    ] {
        println!("{kind}: finalizers ours {finalizer} and {FOREIGN_FINALIZER} both present");
    }

    // Bounded work: per object and requested operation a few runs (conflicts of the
    // finalizer patch retry; the Worker requeues while it waits for machines).
    let counts = reconcile_counts(&operator).await;
    let runs = total(&counts);
    let bound = u64::try_from(objects * 2 * 3).unwrap();
    assert!(
        runs <= bound,
        "{runs} reconcile runs for {objects} objects × 2 operations (bound {bound}): {counts:?}"
    );

    // No hot loop: with everything ready, a further storm of metadata writes (and the
    // operator's own status writes it saw) trigger no reconcile at all.
    let quiet_rounds = rounds / 2;
    last = storm(&shoot, last + 1, quiet_rounds, pause).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = reconcile_counts(&operator).await;
    assert_eq!(
        total(&after),
        runs,
        "foreign metadata writes to ready objects triggered reconciles: {counts:?} -> {after:?}"
    );
    let problems = foreign_fields_intact(&shoot, last).await;
    assert!(problems.is_empty(), "{problems:#?}");
    let log = operator.log_text();
    assert!(!log.contains("panicked"), "{log}");
    println!(
        "RESULT objects={objects} storm_rounds={} foreign_writes_per_round={} reconcile_runs={runs} (bound {bound}) {counts:?} quiet_storm_rounds={quiet_rounds} reconciles_during_quiet_storm={}",
        2 * rounds + 1 + quiet_rounds,
        targets(&shoot).await.len(),
        total(&after) - runs,
    );
}
