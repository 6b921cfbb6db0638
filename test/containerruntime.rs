//! Integration: the gVisor ContainerRuntime controller (the real operator binary) against a
//! real kube-apiserver. gardenlet's part (annotations, deletion) is played by the test.
//! What reaches the shoot through the real gardener-resource-manager is checked in
//! `test/shoot_delivery.rs`; these tests run without it and, where they assert what the
//! operator does *while* GRM still deletes shoot objects (a state the real GRM passes in
//! milliseconds here), hold GRM's finalizer on the ManagedResource by hand (stand-in). GRM's
//! report that the uninstall DaemonSet of a deleted pool is rolled out is written by hand
//! (`report_rolled_out`) or by `GvisorRolloutStandIn`.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use gardener_extension_node::api::{ContainerRuntime, LastOperationType, ManagedResource};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use support::gardener::{
    GvisorRolloutStandIn, add_grm_finalizer, annotate, confirm_and_delete, remove_grm_finalizer,
    report_rolled_out, wait_gone, wait_migrated, wait_ready,
};
use support::operator::OperatorProcess;
use support::{TestEnv, fixtures, wait_for};

const SHARED_MR: &str = "extension-runtime-gvisor";

static OPERATOR: OnceLock<Mutex<OperatorProcess>> = OnceLock::new();

/// A test namespace with its Cluster, and the shared operator running.
async fn setup() -> TestEnv {
    setup_with_cluster(|_| {}).await
}

async fn setup_with_cluster(adjust: impl FnOnce(&mut Value)) -> TestEnv {
    let env = support::env().await;
    OPERATOR.get_or_init(|| {
        Mutex::new(OperatorProcess::start(
            &env.kubeconfig,
            &["--gvisor-kvm-machine-types=*.metal"],
        ))
    });
    create_cluster(&env.client, &env.namespace, adjust).await;
    env
}

async fn create_cluster(client: &Client, namespace: &str, adjust: impl FnOnce(&mut Value)) {
    let mut cluster = fixtures::cluster_json(namespace);
    adjust(&mut cluster);
    let api: Api<gardener_extension_node::api::Cluster> = Api::all(client.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(cluster).unwrap(),
    )
    .await
    .unwrap();
}

fn crs(env: &TestEnv) -> Api<ContainerRuntime> {
    Api::namespaced(env.client.clone(), &env.namespace)
}

fn mrs(env: &TestEnv) -> Api<ManagedResource> {
    Api::namespaced(env.client.clone(), &env.namespace)
}

fn pool_mr(pool: &str) -> String {
    format!("extension-runtime-gvisor-installation-{pool}")
}

/// Creates `gvisor-<pool>` with the reconcile annotation, as gardenlet does.
async fn create_cr(env: &TestEnv, pool: &str, flags: Value) -> String {
    let mut cr = fixtures::container_runtime_json(&env.namespace, pool);
    cr["spec"]["providerConfig"]["configFlags"] = flags;
    cr["metadata"]["annotations"] = json!({"gardener.cloud/operation": "reconcile"});
    let cr: ContainerRuntime = serde_json::from_value(cr).unwrap();
    crs(env).create(&PostParams::default(), &cr).await.unwrap();
    format!("gvisor-{pool}")
}

/// The manifests of a MR (its one secret's `config.yaml`).
async fn mr_manifests(env: &TestEnv, name: &str) -> String {
    let mr = mrs(env).get(name).await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.namespace);
    let secret = secrets.get(&mr.spec.secret_refs[0].name).await.unwrap();
    String::from_utf8(secret.data.unwrap()["config.yaml"].0.clone()).unwrap()
}

#[tokio::test]
async fn create_reaches_succeeded_with_managed_resources_for_the_shoot() {
    let env = setup().await;
    let name = create_cr(&env, "worker-a", json!({"net-raw": "true"})).await;
    let cr = wait_ready(&crs(&env), &name, LastOperationType::Create).await;
    assert!(
        cr.finalizers()
            .contains(&"extensions.gardener.cloud/containerruntime".to_string())
    );
    assert_eq!(
        cr.status.unwrap().default.last_operation.unwrap().progress,
        100
    );

    for mr_name in [SHARED_MR.to_string(), pool_mr("worker-a")] {
        let mr = mrs(&env).get(&mr_name).await.unwrap();
        assert_eq!(
            mr.spec.class, None,
            "{mr_name}: for the shoot's resource manager"
        );
        assert_eq!(mr.spec.keep_objects, Some(false));
        assert_eq!(
            mr.spec.inject_labels["shoot.gardener.cloud/no-cleanup"],
            "true"
        );
        assert_eq!(mr.labels()["origin"], "gardener-extension-node");
        let secret_name = &mr.spec.secret_refs[0].name;
        assert!(secret_name.starts_with(&format!("managedresource-{mr_name}-")));
        let refs: Vec<_> = mr
            .annotations()
            .iter()
            .filter(|(k, _)| k.starts_with("reference.resources.gardener.cloud/secret-"))
            .collect();
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0].1, secret_name);
        let secret = Api::<Secret>::namespaced(env.client.clone(), &env.namespace)
            .get(secret_name)
            .await
            .unwrap();
        assert_eq!(secret.immutable, Some(true));
        assert_eq!(
            secret.labels()["resources.gardener.cloud/garbage-collectable-reference"],
            "true"
        );
    }
    let installation = mr_manifests(&env, &pool_mr("worker-a")).await;
    assert!(
        installation.contains("containerd-gvisor-worker-a")
            && installation.contains("net-raw=true"),
        "{installation}"
    );
    assert!(
        mr_manifests(&env, SHARED_MR)
            .await
            .contains("handler: runsc")
    );
}

#[tokio::test]
async fn a_second_pool_shares_the_runtime_class_managed_resource() {
    let env = setup().await;
    let a = create_cr(&env, "pool-a", json!({})).await;
    let b = create_cr(&env, "pool-b", json!({"nvproxy": "true"})).await;
    wait_ready(&crs(&env), &a, LastOperationType::Create).await;
    wait_ready(&crs(&env), &b, LastOperationType::Create).await;
    let names: Vec<String> = mrs(&env)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|m| m.name_any())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [SHARED_MR.to_string(), pool_mr("pool-a"), pool_mr("pool-b")]
    );
}

/// Creates `gvisor-worker-a` and waits for its create to succeed; its name and the
/// `lastUpdateTime` of that success.
async fn create_ready(env: &TestEnv) -> (String, chrono::DateTime<chrono::Utc>) {
    let name = create_cr(env, "worker-a", json!({})).await;
    let created = wait_ready(&crs(env), &name, LastOperationType::Create).await;
    let last = created.status.unwrap().default.last_operation.unwrap();
    (name, last.last_update_time)
}

#[tokio::test]
async fn reconcile_annotation_is_removed_and_status_refreshed() {
    let env = setup().await;
    let (name, before) = create_ready(&env).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let requested = annotate(&crs(&env), &name, "reconcile").await;
    let cr = wait_ready(&crs(&env), &name, LastOperationType::Reconcile).await;
    let last = cr.status.unwrap().default.last_operation.unwrap();
    assert!(last.last_update_time > before, "status refreshed");
    assert!(last.last_update_time.timestamp() >= requested.timestamp());
}

/// Every state a watch shows of `name` while `act` runs and until the object passes
/// gardenlet's readiness check for a Reconcile: (lastOperation state, passes the check).
async fn states_until_reconciled(
    env: &TestEnv,
    name: &str,
    act: impl std::future::Future<Output = ()>,
) -> Vec<(String, bool)> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher::watcher(crs(env), config).applied_objects().boxed();
    // The current state first, so what `act` causes comes after it.
    stream.next().await.unwrap().unwrap();
    act.await;
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while let Ok(Some(Ok(cr))) = tokio::time::timeout_at(deadline, stream.next()).await {
        let state = cr
            .status
            .as_ref()
            .and_then(|s| s.default.last_operation.as_ref())
            .map(|l| format!("{:?} {:?}", l.type_, l.state))
            .unwrap_or_default();
        let ready = support::gardener::check_ready(&cr, LastOperationType::Reconcile).is_ok();
        let annotated = cr.annotations().contains_key("gardener.cloud/operation");
        seen.push((state, ready));
        if ready && !annotated {
            return seen;
        }
    }
    panic!("not reconciled within 60 s: {seen:?}");
}

/// docs/contract.md#reconcile-and-restore: a run gardenlet asks for over an earlier success
/// writes Processing at once only when that success could pass gardenlet's readiness check
/// for the new request (written in the second of the `gardener.cloud/timestamp`); when the
/// timestamp is in a later second, it goes straight to Succeeded (one status write fewer).
#[tokio::test]
async fn processing_comes_first_only_when_the_earlier_success_could_pass_for_the_request() {
    let env = setup().await;
    let (name, succeeded_at) = create_ready(&env).await;

    // gardenlet's request in the second the success was written.
    let same_second = states_until_reconciled(&env, &name, async {
        let patch = json!({"metadata": {"annotations": {
            "gardener.cloud/operation": "reconcile",
            "gardener.cloud/timestamp": succeeded_at.to_rfc3339(),
        }}});
        crs(&env)
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
    })
    .await;
    assert!(
        same_second
            .iter()
            .any(|(state, _)| state == "Reconcile Processing"),
        "Processing written: {same_second:?}"
    );

    tokio::time::sleep(Duration::from_millis(1100)).await;
    let later = states_until_reconciled(&env, &name, async {
        annotate(&crs(&env), &name, "reconcile").await;
    })
    .await;
    assert!(
        later
            .iter()
            .all(|(state, _)| !state.ends_with("Processing")),
        "no Processing: {later:?}"
    );
    let first_ready = later.iter().position(|(_, ready)| *ready);
    assert_eq!(
        first_ready,
        Some(later.len() - 1),
        "never ready before the run's own success: {later:?}"
    );
}

#[tokio::test]
async fn bad_provider_config_reports_a_configuration_problem_and_changes_nothing() {
    let env = setup().await;
    let name = create_cr(&env, "worker-a", json!({"net-raw": "true"})).await;
    wait_ready(&crs(&env), &name, LastOperationType::Create).await;
    let mr_before = mrs(&env).get(&pool_mr("worker-a")).await.unwrap();

    crs(&env)
        .patch(&name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"providerConfig": {"configFlags": {"net-raw": "maybe", "platform": "kvm"}}}})))
        .await
        .unwrap();
    annotate(&crs(&env), &name, "reconcile").await;
    let cr = wait_for(
        "lastError with a configuration problem",
        Duration::from_secs(30),
        || async {
            let cr = crs(&env).get(&name).await.map_err(|e| e.to_string())?;
            let status = cr.status.clone().ok_or("no status")?.default;
            match status.last_error {
                Some(e)
                    if e.codes
                        .iter()
                        .any(|c| c.as_str() == "ERR_CONFIGURATION_PROBLEM") =>
                {
                    Ok(cr)
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let status = cr.status.clone().unwrap().default;
    let error = status.last_error.unwrap();
    assert!(
        error.description.contains("configFlags"),
        "{}",
        error.description
    );
    assert_eq!(status.observed_generation, cr.metadata.generation);
    assert_eq!(status.last_operation.unwrap().progress, 50);
    assert!(
        cr.annotations().get("gardener.cloud/operation").is_none(),
        "reconcile annotation was consumed"
    );
    let mr_after = mrs(&env).get(&pool_mr("worker-a")).await.unwrap();
    assert_eq!(
        mr_after.resource_version(),
        mr_before.resource_version(),
        "the shoot's objects are untouched"
    );

    // The user fixes the shoot; gardenlet updates the spec and annotates.
    crs(&env)
        .patch(&name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"providerConfig": {"configFlags": {"net-raw": "false", "platform": null}}}})))
        .await
        .unwrap();
    annotate(&crs(&env), &name, "reconcile").await;
    wait_ready(&crs(&env), &name, LastOperationType::Reconcile).await;
    assert!(
        mr_manifests(&env, &pool_mr("worker-a"))
            .await
            .contains("net-raw=false")
    );
}

#[tokio::test]
async fn deleting_one_pool_keeps_the_shared_resource_and_the_last_removes_it() {
    let env = setup().await;
    let a = create_cr(&env, "pool-a", json!({})).await;
    let b = create_cr(&env, "pool-b", json!({})).await;
    wait_ready(&crs(&env), &a, LastOperationType::Create).await;
    wait_ready(&crs(&env), &b, LastOperationType::Create).await;
    let _grm = GvisorRolloutStandIn::start(env.client.clone(), &env.namespace);

    confirm_and_delete(&crs(&env), &a).await;
    wait_gone(&crs(&env), &a).await;
    assert!(
        mrs(&env)
            .get_opt(&pool_mr("pool-a"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        mrs(&env).get_opt(SHARED_MR).await.unwrap().is_some(),
        "pool-b still needs the RuntimeClass"
    );

    confirm_and_delete(&crs(&env), &b).await;
    wait_gone(&crs(&env), &b).await;
    assert_no_managed_resources_left(&env).await;
}

#[tokio::test]
async fn normal_deletion_waits_for_the_managed_resource_and_force_deletion_does_not() {
    // Normal deletion: the MR lingers (GRM still deleting) → the CR stays, Processing.
    let env = setup().await;
    let name = create_cr(&env, "worker-a", json!({})).await;
    wait_ready(&crs(&env), &name, LastOperationType::Create).await;
    add_grm_finalizer(&mrs(&env), &pool_mr("worker-a")).await;
    confirm_and_delete(&crs(&env), &name).await;
    wait_uninstall_written(&env, "worker-a").await;
    report_rolled_out(&mrs(&env), &pool_mr("worker-a"), None).await;
    wait_for("delete processing", Duration::from_secs(30), || async {
        let cr = crs(&env).get(&name).await.map_err(|e| e.to_string())?;
        let last = cr
            .status
            .and_then(|s| s.default.last_operation)
            .ok_or("no op")?;
        if last.type_ == LastOperationType::Delete
            && last.description.contains("waiting until ManagedResource")
        {
            Ok(())
        } else {
            Err(last.description)
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        crs(&env).get_opt(&name).await.unwrap().is_some(),
        "normal deletion waits"
    );
    remove_grm_finalizer(&mrs(&env), &pool_mr("worker-a")).await;
    wait_gone(&crs(&env), &name).await;

    // Force deletion (shoot annotated): gone although the MR is stuck.
    let env = setup_with_cluster(|c| {
        c["spec"]["shoot"]["metadata"]["annotations"] =
            json!({"confirmation.gardener.cloud/force-deletion": "true"});
    })
    .await;
    let name = create_cr(&env, "worker-a", json!({})).await;
    wait_ready(&crs(&env), &name, LastOperationType::Create).await;
    let installation = mrs(&env).get(&pool_mr("worker-a")).await.unwrap();
    add_grm_finalizer(&mrs(&env), &pool_mr("worker-a")).await;
    add_grm_finalizer(&mrs(&env), SHARED_MR).await;
    confirm_and_delete(&crs(&env), &name).await;
    wait_gone(&crs(&env), &name).await;
    let stuck = mrs(&env).get(&pool_mr("worker-a")).await.unwrap();
    assert!(
        stuck.metadata.deletion_timestamp.is_some(),
        "deleted, not waited for"
    );
    assert_eq!(
        stuck.spec.secret_refs, installation.spec.secret_refs,
        "force deletion does not uninstall"
    );
}

/// Waits until the pool's MR holds the uninstall DaemonSet (and still exists); returns the
/// DaemonSet.
async fn wait_uninstall_written(env: &TestEnv, pool: &str) -> Value {
    wait_for(
        &format!("the uninstall DaemonSet in {}", pool_mr(pool)),
        Duration::from_secs(30),
        || async {
            let mr = mrs(env)
                .get_opt(&pool_mr(pool))
                .await
                .map_err(|e| e.to_string())?
                .ok_or("ManagedResource gone")?;
            let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.namespace);
            let secret = secrets
                .get(&mr.spec.secret_refs[0].name)
                .await
                .map_err(|e| e.to_string())?;
            let text = String::from_utf8(secret.data.unwrap()["config.yaml"].0.clone()).unwrap();
            let ds: Value = serde_norway::from_str(&text).map_err(|e| e.to_string())?;
            let command = &ds["spec"]["template"]["spec"]["containers"][0]["command"];
            if command
                .as_array()
                .is_some_and(|c| c.iter().any(|a| a == "--uninstall"))
            {
                Ok(ds)
            } else {
                Err(format!("command {command}"))
            }
        },
    )
    .await
}

/// The status the CR shows while it waits for the uninstall.
async fn wait_waiting_for_uninstall(env: &TestEnv, name: &str) -> String {
    wait_for(
        "Delete Processing, waiting for the uninstall",
        Duration::from_secs(30),
        || async {
            let cr = crs(env).get(name).await.map_err(|e| e.to_string())?;
            let last = cr
                .status
                .and_then(|s| s.default.last_operation)
                .ok_or("no op")?;
            if last.type_ == LastOperationType::Delete
                && last.state == gardener_extension_node::api::LastOperationState::Processing
                && last
                    .description
                    .contains("waiting for the gVisor uninstall on the pool's nodes")
            {
                Ok(last.description)
            } else {
                Err(format!(
                    "{:?} {:?}: {}",
                    last.type_, last.state, last.description
                ))
            }
        },
    )
    .await
}

/// Deleting a ContainerRuntime first turns the pool's DaemonSet into the uninstall DaemonSet
/// (same MR, same DaemonSet name) and waits until GRM reports it rolled out for the MR's
/// current generation; only then are the MRs deleted and the finalizer removed.
#[tokio::test]
async fn deletion_uninstalls_gvisor_from_the_pools_nodes_before_removing_it() {
    let env = setup().await;
    let name = create_cr(&env, "worker-a", json!({"net-raw": "true"})).await;
    wait_ready(&crs(&env), &name, LastOperationType::Create).await;
    let installation = mrs(&env).get(&pool_mr("worker-a")).await.unwrap();
    // GRM had reported the installation rolled out: that report must not count.
    report_rolled_out(&mrs(&env), &pool_mr("worker-a"), None).await;

    confirm_and_delete(&crs(&env), &name).await;
    let ds = wait_uninstall_written(&env, "worker-a").await;
    assert_eq!(ds["metadata"]["name"], "containerd-gvisor-worker-a");
    assert_eq!(
        ds["spec"]["template"]["metadata"]["labels"]["runtime.gvisor.extensions.gardener.cloud/mode"],
        "uninstall"
    );
    let init = &ds["spec"]["template"]["spec"]["initContainers"][0]["command"];
    assert!(
        init.as_array()
            .unwrap()
            .ends_with(&[json!("--uninstall"), json!("--once")]),
        "{init}"
    );
    let description = wait_waiting_for_uninstall(&env, &name).await;
    assert!(
        description.contains("ManagedResource extension-runtime-gvisor-installation-worker-a"),
        "{description}"
    );
    let uninstall = mrs(&env).get(&pool_mr("worker-a")).await.unwrap();
    assert_eq!(uninstall.metadata.uid, installation.metadata.uid, "same MR");
    assert!(uninstall.metadata.generation > installation.metadata.generation);
    assert_eq!(
        mr_manifests(&env, &pool_mr("worker-a"))
            .await
            .matches("kind: DaemonSet")
            .count(),
        1
    );

    // GRM reports an older generation rolled out: still waiting.
    let old = uninstall.metadata.generation.unwrap() - 1;
    report_rolled_out(&mrs(&env), &pool_mr("worker-a"), Some(old)).await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    let cr = crs(&env).get(&name).await.unwrap();
    assert!(
        cr.finalizers()
            .contains(&"extensions.gardener.cloud/containerruntime".to_string()),
        "still waiting for the uninstall"
    );
    assert!(
        mrs(&env)
            .get_opt(&pool_mr("worker-a"))
            .await
            .unwrap()
            .is_some()
    );
    assert!(mrs(&env).get_opt(SHARED_MR).await.unwrap().is_some());

    // GRM reports the uninstall rolled out on every node: the MRs go, then the CR.
    report_rolled_out(&mrs(&env), &pool_mr("worker-a"), None).await;
    wait_gone(&crs(&env), &name).await;
    assert_no_managed_resources_left(&env).await;
    assert!(
        events_with_reason(&env, "GVisorUninstallIncomplete")
            .await
            .is_empty(),
        "no warning on success"
    );
}

/// No ManagedResource and no ManagedResource secret is left in the test's namespace.
async fn assert_no_managed_resources_left(env: &TestEnv) {
    assert!(
        mrs(env)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(
        Api::<Secret>::namespaced(env.client.clone(), &env.namespace)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .all(|s| !s.name_any().starts_with("managedresource-")),
        "MR secrets removed"
    );
}

/// The notes of the namespace's events with `reason` (all of them Warnings).
async fn events_with_reason(env: &TestEnv, reason: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(env.client.clone(), &env.namespace);
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .inspect(|e| assert_eq!(e.type_.as_deref(), Some("Warning"), "{e:?}"))
        .map(|e| e.note.unwrap_or_default())
        .collect()
}

/// A shoot being deleted or hibernated: the pool's nodes go away (and a hibernated shoot's
/// GRM does not run), so the deletion skips the uninstall and needs no GRM report.
#[tokio::test]
async fn a_deleted_or_hibernated_shoot_skips_the_uninstall() {
    let adjustments: [fn(&mut Value); 2] = [
        |c| c["spec"]["shoot"]["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z"),
        |c| c["spec"]["shoot"]["spec"]["hibernation"] = json!({"enabled": true}),
    ];
    for adjust in adjustments {
        let env = setup_with_cluster(adjust).await;
        let name = create_cr(&env, "worker-a", json!({})).await;
        wait_ready(&crs(&env), &name, LastOperationType::Create).await;
        let installation = mrs(&env).get(&pool_mr("worker-a")).await.unwrap();
        add_grm_finalizer(&mrs(&env), &pool_mr("worker-a")).await;
        confirm_and_delete(&crs(&env), &name).await;
        // Deleted at once with the installation in it, no uninstall written.
        let mr = wait_for("pool MR deleting", Duration::from_secs(30), || async {
            let mr = mrs(&env)
                .get(&pool_mr("worker-a"))
                .await
                .map_err(|e| e.to_string())?;
            mr.metadata
                .deletion_timestamp
                .is_some()
                .then_some(mr)
                .ok_or_else(|| "not deleting".to_string())
        })
        .await;
        assert_eq!(mr.spec.secret_refs, installation.spec.secret_refs);
        remove_grm_finalizer(&mrs(&env), &pool_mr("worker-a")).await;
        wait_gone(&crs(&env), &name).await;
    }
}

/// An uninstall that does not finish within `--gvisor-uninstall-timeout-seconds` is given
/// up: a `GVisorUninstallIncomplete` Warning event, then the deletion goes on. Runs its own
/// operator with a short timeout, for ContainerRuntimes of a class of their own (the shared
/// operator handles only `shoot`).
#[tokio::test]
async fn an_unfinished_uninstall_is_given_up_after_the_timeout_with_a_warning() {
    const CLASS: &str = "uninstall-timeout-test";
    let env = setup().await;
    let _operator = OperatorProcess::start(
        &env.kubeconfig,
        &[
            &format!("--extension-classes={CLASS}"),
            &format!("--heartbeat-namespace={}", env.namespace),
            "--gvisor-uninstall-timeout-seconds=8",
        ],
    );
    let mut cr = fixtures::container_runtime_json(&env.namespace, "worker-a");
    cr["spec"]["class"] = json!(CLASS);
    cr["metadata"]["annotations"] = json!({"gardener.cloud/operation": "reconcile"});
    let cr: ContainerRuntime = serde_json::from_value(cr).unwrap();
    crs(&env).create(&PostParams::default(), &cr).await.unwrap();
    let name = "gvisor-worker-a";
    wait_ready(&crs(&env), name, LastOperationType::Create).await;

    confirm_and_delete(&crs(&env), name).await;
    wait_uninstall_written(&env, "worker-a").await;
    wait_waiting_for_uninstall(&env, name).await;
    // Nobody reports the rollout.
    wait_gone(&crs(&env), name).await;
    assert!(
        mrs(&env)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let notes = events_with_reason(&env, "GVisorUninstallIncomplete").await;
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("did not finish within 8s")
            && notes[0].contains("DaemonSet kube-system/containerd-gvisor-worker-a")
            && notes[0].contains("not yet processed by gardener-resource-manager"),
        "{}",
        notes[0]
    );
}

#[tokio::test]
async fn migrate_keeps_shoot_objects_removes_managed_resources_and_all_finalizers() {
    let env = setup().await;
    let name = create_cr(&env, "worker-a", json!({})).await;
    wait_ready(&crs(&env), &name, LastOperationType::Create).await;
    // Another controller's finalizer on the CR: migrate removes all finalizers.
    crs(&env)
        .patch(&name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": ["extensions.gardener.cloud/containerruntime", "example.com/other"]}})))
        .await
        .unwrap();
    for mr in [pool_mr("worker-a"), SHARED_MR.to_string()] {
        add_grm_finalizer(&mrs(&env), &mr).await;
    }
    annotate(&crs(&env), &name, "migrate").await;
    // While GRM "deletes", keepObjects must already be true, so the shoot keeps its objects.
    for mr in [pool_mr("worker-a"), SHARED_MR.to_string()] {
        let found = wait_for(
            &format!("{mr} deleting with keepObjects"),
            Duration::from_secs(30),
            || async {
                let m = mrs(&env).get(&mr).await.map_err(|e| e.to_string())?;
                if m.metadata.deletion_timestamp.is_some() && m.spec.keep_objects == Some(true) {
                    Ok(m)
                } else {
                    Err(format!(
                        "keepObjects {:?}, deleting {}",
                        m.spec.keep_objects,
                        m.metadata.deletion_timestamp.is_some()
                    ))
                }
            },
        )
        .await;
        assert_eq!(found.spec.keep_objects, Some(true));
        remove_grm_finalizer(&mrs(&env), &mr).await;
    }
    wait_migrated(&crs(&env), &name).await;
    assert!(
        mrs(&env)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // A migrated object is left alone, even when annotated or deleted (gardenlet's shallow delete).
    annotate(&crs(&env), &name, "reconcile").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        mrs(&env)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "no reconcile after migrate"
    );
    confirm_and_delete(&crs(&env), &name).await;
    wait_gone(&crs(&env), &name).await;
}

#[tokio::test]
async fn restore_in_a_fresh_namespace_recreates_everything_after_wait_for_state() {
    let env = setup().await;
    let mut cr = fixtures::container_runtime_json(&env.namespace, "worker-a");
    cr["metadata"]["annotations"] = json!({"gardener.cloud/operation": "wait-for-state"});
    let cr: ContainerRuntime = serde_json::from_value(cr).unwrap();
    crs(&env).create(&PostParams::default(), &cr).await.unwrap();
    let name = "gvisor-worker-a";
    // gardenlet injects state while the object waits: the extension does nothing at all.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let waiting = crs(&env).get(name).await.unwrap();
    assert!(
        waiting.status.is_none(),
        "no status write during wait-for-state"
    );
    assert!(
        waiting.finalizers().is_empty(),
        "no finalizer during wait-for-state"
    );
    assert!(
        mrs(&env)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    annotate(&crs(&env), name, "restore").await;
    let restored = wait_ready(&crs(&env), name, LastOperationType::Restore).await;
    assert!(
        restored
            .finalizers()
            .contains(&"extensions.gardener.cloud/containerruntime".to_string())
    );
    for mr in [pool_mr("worker-a"), SHARED_MR.to_string()] {
        assert_eq!(
            mrs(&env).get(&mr).await.unwrap().spec.keep_objects,
            Some(false),
            "{mr}"
        );
    }
}

#[tokio::test]
async fn objects_of_a_failed_shoot_are_not_touched() {
    let env = setup_with_cluster(|c| {
        c["spec"]["shoot"]["status"]["lastOperation"]["state"] = json!("Failed");
    })
    .await;
    let name = create_cr(&env, "worker-a", json!({})).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cr = crs(&env).get(&name).await.unwrap();
    assert!(cr.status.is_none(), "no status write");
    assert!(cr.finalizers().is_empty(), "no finalizer");
    assert_eq!(
        cr.annotations()
            .get("gardener.cloud/operation")
            .map(String::as_str),
        Some("reconcile"),
        "annotation left for gardenlet's retry"
    );
    assert!(
        mrs(&env)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn objects_of_another_class_or_type_are_ignored() {
    let env = setup().await;
    let mut seed_class = fixtures::container_runtime_json(&env.namespace, "seed-pool");
    seed_class["spec"]["class"] = json!("seed");
    seed_class["metadata"]["annotations"] = json!({"gardener.cloud/operation": "reconcile"});
    let mut kata = fixtures::container_runtime_json(&env.namespace, "kata-pool");
    kata["metadata"]["name"] = json!("kata-kata-pool");
    kata["spec"]["type"] = json!("kata");
    kata["metadata"]["annotations"] = json!({"gardener.cloud/operation": "reconcile"});
    for object in [seed_class, kata] {
        let cr: ContainerRuntime = serde_json::from_value(object).unwrap();
        crs(&env).create(&PostParams::default(), &cr).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    for cr in crs(&env).list(&ListParams::default()).await.unwrap() {
        assert!(
            cr.status.is_none() && cr.finalizers().is_empty(),
            "{} was touched",
            cr.name_any()
        );
    }
}

#[tokio::test]
async fn operator_serves_health_readiness_and_metrics() {
    let env = setup().await;
    let name = create_cr(&env, "worker-a", json!({})).await;
    wait_ready(&crs(&env), &name, LastOperationType::Create).await;
    let operator = OPERATOR.get().unwrap();
    let address = operator.lock().unwrap().http_address.clone();
    let probe = OperatorProcess::http_get_at(&address, "/healthz")
        .await
        .unwrap();
    assert_eq!(probe.0, 200);
    let ready = OperatorProcess::http_get_at(&address, "/readyz")
        .await
        .unwrap();
    assert_eq!(ready.0, 200);
    let (status, metrics) = OperatorProcess::http_get_at(&address, "/metrics")
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert!(metrics.contains(r#"controller_reconciles_total{kind="ContainerRuntime",operation="create",result="success"}"#), "{metrics}");
    // Without leader election the one replica leads; it renewed the heartbeat.
    assert!(
        metrics.contains("\ngardener_extension_node_leader 1\n"),
        "{metrics}"
    );
    let renewed = OperatorProcess::metric_at(
        &address,
        "gardener_extension_node_heartbeat_last_renew_timestamp_seconds",
    )
    .await
    .unwrap();
    let now = chrono::Utc::now().timestamp() as f64;
    assert!(renewed > now - 120.0 && renewed <= now + 1.0, "{renewed}");
    // The object gauges count our ContainerRuntime once sampled (every 30 s).
    let succeeded = r#"gardener_extension_node_objects{kind="ContainerRuntime",state="Succeeded"}"#;
    wait_for(
        "the object gauges to count a succeeded ContainerRuntime",
        Duration::from_secs(45),
        || async {
            match OperatorProcess::metric_at(&address, succeeded).await {
                Some(count) if count >= 1.0 => Ok(()),
                other => Err(format!("{succeeded} = {other:?}")),
            }
        },
    )
    .await;
    // The heartbeat Lease is renewed in the heartbeat namespace.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(env.client.clone(), "default");
    let lease = leases.get("gardener-extension-heartbeat").await.unwrap();
    assert!(lease.spec.unwrap().renew_time.is_some());
    // A first create publishes no success event (lastOperation records it); a reconcile that
    // changes the shoot does.
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(env.client.clone(), &env.namespace);
    let reasons = |list: kube::core::ObjectList<k8s_openapi::api::events::v1::Event>| {
        list.items
            .into_iter()
            .filter_map(|e| e.reason)
            .collect::<Vec<_>>()
    };
    let after_create = reasons(events.list(&ListParams::default()).await.unwrap());
    assert!(
        !after_create.iter().any(|r| r == "Reconciled"),
        "{after_create:?}"
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    crs(&env)
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"annotations": {"gardener.cloud/operation": "reconcile"}},
                "spec": {"providerConfig": {"configFlags": {"net-raw": "true"}}},
            })),
        )
        .await
        .unwrap();
    wait_ready(&crs(&env), &name, LastOperationType::Reconcile).await;
    let after_change = reasons(events.list(&ListParams::default()).await.unwrap());
    assert!(
        after_change.iter().any(|r| r == "Reconciled"),
        "{after_change:?}"
    );
}

/// Creates `gvisor-<pool>` with `provider_config` fields (merged into the fixture's).
async fn create_cr_with(env: &TestEnv, pool: &str, fields: Value) -> String {
    let mut cr = fixtures::container_runtime_json(&env.namespace, pool);
    let config = cr["spec"]["providerConfig"].as_object_mut().unwrap();
    config.extend(fields.as_object().unwrap().clone());
    cr["metadata"]["annotations"] = json!({"gardener.cloud/operation": "reconcile"});
    let cr: ContainerRuntime = serde_json::from_value(cr).unwrap();
    crs(env).create(&PostParams::default(), &cr).await.unwrap();
    format!("gvisor-{pool}")
}

/// The RuntimeClasses in the shared MR: name to (handler, node selector, overhead).
async fn runtime_classes(
    env: &TestEnv,
) -> std::collections::BTreeMap<String, (Value, Value, Value)> {
    let text = mr_manifests(env, SHARED_MR).await;
    gardener_extension_node::devenv::apply::parse_documents(&text, "shared")
        .unwrap()
        .into_iter()
        .map(|o| serde_json::to_value(o).unwrap())
        .filter(|o| o["kind"] == "RuntimeClass")
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_string(),
                (
                    o["handler"].clone(),
                    o["scheduling"]["nodeSelector"].clone(),
                    o["overhead"].clone(),
                ),
            )
        })
        .collect()
}

/// Waits for a lastError with ERR_CONFIGURATION_PROBLEM on `name` whose description contains
/// `needle`; the description.
async fn wait_configuration_problem(env: &TestEnv, name: &str, needle: &str) -> String {
    wait_for(
        "a configuration problem",
        Duration::from_secs(30),
        || async {
            let cr = crs(env).get(name).await.map_err(|e| e.to_string())?;
            let status = cr.status.clone().ok_or("no status")?.default;
            match status.last_error {
                Some(e)
                    if e.codes
                        .iter()
                        .any(|c| c.as_str() == "ERR_CONFIGURATION_PROBLEM")
                        && e.description.contains(needle) =>
                {
                    Ok(e.description)
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}

/// Profiles (docs/usage.md, "gVisor profiles"): every pool's become the shoot's
/// RuntimeClasses; `kvm` only on a listed machine type; a conflict is the involved pool's
/// configuration error and leaves the RuntimeClasses as they were; a leaving pool takes its
/// profiles' RuntimeClasses with it.
#[tokio::test]
async fn profiles_of_every_pool_become_runtime_classes_and_go_with_their_pool() {
    let env = setup_with_cluster(|cluster| {
        let workers = &mut cluster["spec"]["shoot"]["spec"]["provider"]["workers"];
        let mut metal = workers[0].clone();
        metal["name"] = json!("metal");
        metal["machine"]["type"] = json!("m5.metal");
        let mut small = workers[0].clone();
        small["name"] = json!("small");
        small["machine"]["type"] = json!("m5.large");
        *workers = json!([metal, small]);
    })
    .await;
    let metal = create_cr_with(
        &env,
        "metal",
        json!({"overhead": {"memory": "64Mi"}, "profiles": [
            {"name": "debug", "configFlags": {"debug": "true"}},
            {"name": "fast", "platform": "kvm", "overhead": {"cpu": "0.25"}},
        ]}),
    )
    .await;
    let small = create_cr_with(
        &env,
        "small",
        json!({"overhead": {"memory": "64Mi"}, "profiles": [{"name": "debug"}]}),
    )
    .await;
    wait_ready(&crs(&env), &metal, LastOperationType::Create).await;
    wait_ready(&crs(&env), &small, LastOperationType::Create).await;
    let classes = wait_for("three RuntimeClasses", Duration::from_secs(30), || async {
        let classes = runtime_classes(&env).await;
        if classes.len() == 3 {
            Ok(classes)
        } else {
            Err(format!("{classes:?}"))
        }
    })
    .await;
    let gvisor_label = json!({"containerruntime.worker.gardener.cloud/gvisor": "true"});
    assert_eq!(
        classes["gvisor"],
        (
            json!("runsc"),
            gvisor_label.clone(),
            json!({"podFixed": {"memory": "64Mi"}})
        )
    );
    assert_eq!(classes["gvisor-debug"].0, "runsc-debug");
    assert_eq!(
        classes["gvisor-debug"].1, gvisor_label,
        "on every gVisor pool"
    );
    assert_eq!(classes["gvisor-fast"].0, "runsc-fast");
    assert_eq!(
        classes["gvisor-fast"].1["worker.gardener.cloud/pool"], "metal",
        "only on its pool: {:?}",
        classes["gvisor-fast"]
    );
    assert_eq!(
        classes["gvisor-fast"].2,
        json!({"podFixed": {"cpu": "250m"}})
    );
    let installation = mr_manifests(&env, &pool_mr("metal")).await;
    assert!(
        installation.contains("[fast]\\nplatform=kvm"),
        "{installation}"
    );

    // kvm on a machine type the landscape does not list: refused, nothing shipped.
    let shared_before = mrs(&env).get(SHARED_MR).await.unwrap().resource_version();
    crs(&env)
        .patch(
            &small,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"providerConfig": {"platform": "kvm"}}})),
        )
        .await
        .unwrap();
    annotate(&crs(&env), &small, "reconcile").await;
    let error = wait_configuration_problem(&env, &small, "kvm").await;
    assert!(
        error.contains("the default gVisor profile asks for platform kvm, but the machine type \"m5.large\" of pool small is not known to offer /dev/kvm")
            && error.contains("--gvisor-kvm-machine-types (listed: *.metal)"),
        "{error}"
    );

    // Another overhead for gvisor-debug on one pool: a conflict of both pools.
    crs(&env)
        .patch(&small, &PatchParams::default(), &Patch::Merge(json!({"spec": {"providerConfig": {"platform": null, "profiles": [{"name": "debug", "overhead": {"memory": "1Gi"}}]}}})))
        .await
        .unwrap();
    annotate(&crs(&env), &small, "reconcile").await;
    let error = wait_configuration_problem(&env, &small, "gvisor-debug").await;
    assert!(
        error.contains(
            "RuntimeClass \"gvisor-debug\" gets a different overhead from the pools metal, small"
        ),
        "{error}"
    );
    assert_eq!(
        mrs(&env).get(SHARED_MR).await.unwrap().resource_version(),
        shared_before,
        "the RuntimeClasses stay as they were"
    );

    // Fixed; then the metal pool leaves and takes gvisor-fast with it.
    crs(&env)
        .patch(
            &small,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"providerConfig": {"profiles": [{"name": "debug"}]}}})),
        )
        .await
        .unwrap();
    annotate(&crs(&env), &small, "reconcile").await;
    wait_ready(&crs(&env), &small, LastOperationType::Reconcile).await;
    let _grm = GvisorRolloutStandIn::start(env.client.clone(), &env.namespace);
    confirm_and_delete(&crs(&env), &metal).await;
    wait_gone(&crs(&env), &metal).await;
    let classes = runtime_classes(&env).await;
    assert_eq!(
        classes.keys().collect::<Vec<_>>(),
        ["gvisor", "gvisor-debug"],
        "gvisor-fast left with its pool"
    );
}

/// A `kvm` profile refused on a node without `/dev/kvm` is a Warning event on the Node: the
/// installer, run with what the operator ships (the pool's DaemonSet flags, the shared
/// resource's ServiceAccount, Role and RoleBinding applied as the shoot's resource manager
/// would) and a token of that ServiceAccount, publishes it; the token may do nothing else.
/// (The real node e2e cannot reach the API server from a pod: docs/usage.md.)
#[tokio::test]
async fn a_refused_kvm_profile_is_an_event_on_the_node_with_no_more_than_the_shipped_role() {
    let env = setup_with_cluster(|cluster| {
        let workers = &mut cluster["spec"]["shoot"]["spec"]["provider"]["workers"];
        workers[0]["name"] = json!("metal");
        workers[0]["machine"]["type"] = json!("m5.metal");
        *workers = json!([workers[0].clone()]);
    })
    .await;
    let name = create_cr_with(
        &env,
        "metal",
        json!({"profiles": [{"name": "fast", "platform": "kvm"}]}),
    )
    .await;
    wait_ready(&crs(&env), &name, LastOperationType::Create).await;

    // The shoot's resource manager's part: the shared resource's RBAC objects applied.
    let shared = mr_manifests(&env, SHARED_MR).await;
    let objects = gardener_extension_node::devenv::apply::parse_documents(&shared, "shared")
        .unwrap()
        .into_iter()
        .filter(|o| {
            let kind = o
                .types
                .as_ref()
                .map(|t| t.kind.as_str())
                .unwrap_or_default();
            matches!(kind, "ServiceAccount" | "Role" | "RoleBinding")
        })
        .collect::<Vec<_>>();
    assert_eq!(objects.len(), 3, "{shared}");
    gardener_extension_node::devenv::apply::apply_all(&env.client, &objects, "default")
        .await
        .unwrap();
    let installation: Value = serde_json::to_value(
        gardener_extension_node::devenv::apply::parse_documents(
            &mr_manifests(&env, &pool_mr("metal")).await,
            "installation",
        )
        .unwrap()
        .remove(0),
    )
    .unwrap();
    let container = &installation["spec"]["template"]["spec"]["containers"][0];
    let flags = container["env"][0]["value"].as_str().unwrap().to_string();
    assert_eq!(container["env"][1]["name"], "GVISOR_NODE_NAME");

    // The pod's token, as kubelet would mount it, in a kubeconfig for the installer.
    let request: k8s_openapi::api::authentication::v1::TokenRequest =
        serde_json::from_value(json!({"spec": {"expirationSeconds": 600}})).unwrap();
    let token = Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(
        env.client.clone(),
        "kube-system",
    )
    .create_token_request("gvisor", &PostParams::default(), &request)
    .await
    .unwrap()
    .status
    .and_then(|status| status.token)
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        gardener_extension_node::kubeconfig::render_token_kubeconfig(
            &env.server_url,
            &env.ca_pem,
            &token,
        ),
    )
    .unwrap();

    // A node without /dev/kvm: the installer refuses the profile and says so on the Node.
    let node = format!("node-{}", env.namespace);
    let root = dir.path().join("root");
    let content = dir.path().join("content");
    std::fs::create_dir_all(root.join("etc/containerd")).unwrap();
    std::fs::create_dir_all(&content).unwrap();
    for binary in ["runsc", "containerd-shim-runsc-v1"] {
        std::fs::write(content.join(binary), b"#!/bin/sh\nexit 1\n").unwrap();
    }
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_gardener-extension-node"))
        .env_clear()
        .env("KUBECONFIG", &kubeconfig)
        .env("GVISOR_RUNSC_FLAGS", &flags)
        .env("GVISOR_NODE_NAME", &node)
        .args(["--log-format", "json", "gvisor-install", "--once"])
        .arg(format!("--host-root={}", root.display()))
        .arg(format!("--source-dir={}", content.display()))
        .arg(format!(
            "--kvm-device={}",
            dir.path().join("no-kvm").display()
        ))
        .arg(format!(
            "--dbus-address=unix:path={}",
            dir.path().join("no-bus").display()
        ))
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    // Files written, the restart fails here (no systemd); the event went out before it.
    assert!(
        log.contains("restarting containerd.service through systemd"),
        "{log}"
    );
    assert!(log.contains("\"action\":\"reported\""), "{log}");
    let events =
        Api::<k8s_openapi::api::events::v1::Event>::namespaced(env.client.clone(), "default");
    let event = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node.as_str()))
        .unwrap_or_else(|| panic!("no event on {node}: {log}"));
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.reason.as_deref(), Some("GVisorProfileRefused"));
    let regarding = event.regarding.unwrap();
    assert_eq!(
        (regarding.kind.as_deref(), regarding.uid.as_deref()),
        (Some("Node"), Some(node.as_str())),
        "as kubelet refers to its Node"
    );
    assert_eq!(
        event.note.as_deref(),
        Some(format!("gVisor profile fast is not installed on this node: platform kvm needs {} (a character device), which this node does not have; pods of its RuntimeClass cannot start here", dir.path().join("no-kvm").display()).as_str())
    );
    assert_eq!(
        event.reporting_controller.as_deref(),
        Some("gardener-extension-node-gvisor-install")
    );

    // The token may create events in `default`, nothing else.
    let config = gardener_extension_node::kubeconfig::config_from_yaml(
        &std::fs::read_to_string(&kubeconfig).unwrap(),
    )
    .await
    .unwrap();
    let limited = Client::try_from(config).unwrap();
    let forbidden = |result: Result<_, kube::Error>| matches!(result, Err(kube::Error::Api(status)) if status.code == 403);
    assert!(forbidden(
        Api::<k8s_openapi::api::core::v1::Node>::all(limited.clone())
            .list(&ListParams::default())
            .await
            .map(|_| ())
    ));
    assert!(forbidden(
        Api::<k8s_openapi::api::events::v1::Event>::namespaced(limited.clone(), "kube-system")
            .list(&ListParams::default())
            .await
            .map(|_| ())
    ));
    assert!(forbidden(
        Api::<Secret>::namespaced(limited, "kube-system")
            .list(&ListParams::default())
            .await
            .map(|_| ())
    ));
}
