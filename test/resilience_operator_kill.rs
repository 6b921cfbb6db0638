//! Resilience scenario 3: the operator is SIGKILLed at a random point of each operation —
//! create, migrate, restore, delete — of a shoot's ContainerRuntimes, OperatingSystemConfigs
//! and Worker, and started again. Every object converges to what the operation asks for:
//! ready with every child exactly once after create and restore (the restored machines are
//! the recorded ones, not new ones), nothing of ours left in the seed namespace but the
//! machines after migrate, nothing at all after delete.
//!
//! Each round has its own seed, printed as `RESILIENCE_SEED=<n>`; setting that variable runs
//! just that round again. The kill points are delays drawn from the seed; right after each
//! kill the test records how far the operation had got (`done_at_kill`), so the report shows
//! kills before, in the middle of and after the work. Rounds: 3 under `make test`, 20 with
//! `RESILIENCE_FULL=1` (`make test-resilience`). See `docs/reliability.md`.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use gardener_extension_node::api::machine::{Machine, MachineClass, MachineDeployment, MachineSet};
use gardener_extension_node::api::{
    ContainerRuntime, LastOperationState, LastOperationType, ManagedResource,
    OperatingSystemConfig, Worker,
};
use gardener_extension_node::extension::ExtensionKind;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use support::gardener::{GvisorRolloutStandIn, annotate, confirm_and_delete};
use support::load::{self, CREATED, Extra, Rng, Shoot, WORKER, list};
use support::mcm;
use support::operator::OperatorProcess;
use support::{TestEnv, wait_for};

const WAIT: Duration = Duration::from_secs(180);

/// One kill: the phase, the delay after the operation was requested, and how many objects
/// had reached the operation's goal when the operator died.
struct Kill {
    phase: &'static str,
    after_ms: u64,
    done: usize,
    total: usize,
}

fn api<K>(env: &TestEnv) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    Api::namespaced(env.client.clone(), &env.namespace)
}

/// Applies `what` to every extension object of the shoot, as gardenlet does to all of them.
async fn for_all(shoot: &Shoot, what: Action) {
    for name in shoot.runtime_names() {
        what.run(&api::<ContainerRuntime>(&shoot.env), &name).await;
    }
    for name in shoot.osc_names() {
        what.run(&api::<OperatingSystemConfig>(&shoot.env), &name)
            .await;
    }
    what.run(&api::<Worker>(&shoot.env), WORKER).await;
}

#[derive(Clone, Copy)]
enum Action {
    Annotate(&'static str),
    Delete,
}

impl Action {
    async fn run<K>(self, api: &Api<K>, name: &str)
    where
        K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
    {
        match self {
            Action::Annotate(operation) => {
                annotate(api, name, operation).await;
            }
            Action::Delete => confirm_and_delete(api, name).await,
        }
    }
}

/// SIGKILLs the operator `after_ms` from now, measures progress with `done` while it is
/// dead, and starts it again.
async fn kill_at<F, Fut>(
    operator: &mut OperatorProcess,
    phase: &'static str,
    after_ms: u64,
    total: usize,
    done: F,
) -> Kill
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = usize>,
{
    tokio::time::sleep(Duration::from_millis(after_ms)).await;
    operator.kill();
    let done = done().await;
    operator.restart();
    Kill {
        phase,
        after_ms,
        done,
        total,
    }
}

async fn ready_count(shoot: &Shoot, operations: &[LastOperationType]) -> usize {
    let (ready, _) = shoot.readiness(operations).await.unwrap_or_default();
    ready
}

fn migrated<K: ExtensionKind>(object: &K) -> Result<(), String> {
    load::ready_for(object, &[LastOperationType::Migrate])?;
    let ours = object.finalizers().iter().any(|f| f == K::FINALIZER);
    let all_removed = !K::MIGRATE_REMOVES_ALL_FINALIZERS || object.finalizers().is_empty();
    if ours || !all_removed {
        return Err(format!("finalizers left: {:?}", object.finalizers()));
    }
    Ok(())
}

/// Objects whose Migrate succeeded (status, annotation and finalizers as gardenlet expects).
async fn migrated_count(shoot: &Shoot) -> Result<(usize, Vec<String>), String> {
    let mut done = 0;
    let mut not = Vec::new();
    let mut tally = |name: String, r: Result<(), String>| match r {
        Ok(()) => done += 1,
        Err(e) => not.push(format!("{name}: {e}")),
    };
    for o in list::<ContainerRuntime>(&shoot.env).await? {
        tally(o.name_any(), migrated(&o));
    }
    for o in list::<OperatingSystemConfig>(&shoot.env).await? {
        tally(o.name_any(), migrated(&o));
    }
    for o in list::<Worker>(&shoot.env).await? {
        tally(o.name_any(), migrated(&o));
    }
    Ok((done, not))
}

/// Extension objects still present.
async fn remaining(shoot: &Shoot) -> Result<Vec<String>, String> {
    let mut names: Vec<String> = list::<ContainerRuntime>(&shoot.env)
        .await?
        .iter()
        .map(|o| o.name_any())
        .collect();
    names.extend(
        list::<OperatingSystemConfig>(&shoot.env)
            .await?
            .iter()
            .map(|o| o.name_any()),
    );
    names.extend(
        list::<Worker>(&shoot.env)
            .await?
            .iter()
            .map(|o| o.name_any()),
    );
    Ok(names)
}

/// `(name, providerID)` of every Machine.
async fn machine_identities(env: &TestEnv) -> BTreeSet<(String, String)> {
    list::<Machine>(env)
        .await
        .unwrap()
        .iter()
        .map(|m| (m.name_any(), m.spec.provider_id.clone().unwrap_or_default()))
        .collect()
}

/// Names of every object of ours in the namespace (ManagedResources, their and the user data
/// Secrets, machine objects), for "nothing left" and "nothing deleted" checks.
async fn owned_objects(env: &TestEnv) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for m in list::<ManagedResource>(env).await.unwrap() {
        names.insert(format!("ManagedResource/{}", m.name_any()));
    }
    for s in list::<Secret>(env).await.unwrap() {
        let name = s.name_any();
        let purpose = s.labels().get("gardener.cloud/purpose").cloned();
        if name.starts_with("managedresource-")
            || name.starts_with("osc-result-")
            || purpose.as_deref() == Some("machineclass")
        {
            names.insert(format!("Secret/{name}"));
        }
    }
    for o in list::<MachineClass>(env).await.unwrap() {
        names.insert(format!("MachineClass/{}", o.name_any()));
    }
    for o in list::<MachineDeployment>(env).await.unwrap() {
        names.insert(format!("MachineDeployment/{}", o.name_any()));
    }
    for o in list::<MachineSet>(env).await.unwrap() {
        names.insert(format!("MachineSet/{}", o.name_any()));
    }
    for o in list::<Machine>(env).await.unwrap() {
        names.insert(format!("Machine/{}", o.name_any()));
    }
    names
}

/// gardenlet after a successful migrate: persist the state, delete the extension objects
/// (no finalizer of ours left, so they go at once) and shallow-delete the machine objects.
async fn shallow_delete(shoot: &Shoot) {
    for_all(shoot, Action::Delete).await;
    wait_for("migrated objects gone", WAIT, || async {
        let left = remaining(shoot).await?;
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    })
    .await;
    let env = &shoot.env;
    for m in list::<Machine>(env).await.unwrap() {
        mcm::delete(&api::<Machine>(env), &m.name_any())
            .await
            .unwrap();
    }
    for s in list::<MachineSet>(env).await.unwrap() {
        mcm::delete(&api::<MachineSet>(env), &s.name_any())
            .await
            .unwrap();
    }
    for d in list::<MachineDeployment>(env).await.unwrap() {
        mcm::delete(&api::<MachineDeployment>(env), &d.name_any())
            .await
            .unwrap();
    }
}

async fn round(operator: &mut OperatorProcess, seed: u64, runtimes: usize) -> Vec<Kill> {
    let mut rng = Rng::new(seed);
    let mut kills = Vec::new();

    // Create.
    let source = Shoot::prepare(support::env().await, runtimes, |_| {}).await;
    let total = source.object_count();
    source.create_objects("reconcile", &Extra::default()).await;
    kills.push(
        kill_at(operator, "create", rng.range(0, 800), total, || {
            ready_count(&source, CREATED)
        })
        .await,
    );
    load::wait_all_ready(std::slice::from_ref(&source), CREATED, WAIT).await;
    source.check_children(1).await.unwrap();
    source.check_finalizers(&[]).await.unwrap();
    let machines_before = machine_identities(&source.env).await;
    let machine_objects_before: BTreeSet<String> = owned_objects(&source.env)
        .await
        .into_iter()
        .filter(|n| n.starts_with("Machine") || n.contains("machineclass"))
        .collect();

    // Migrate.
    for_all(&source, Action::Annotate("migrate")).await;
    kills.push(
        kill_at(operator, "migrate", rng.range(0, 300), total, || async {
            migrated_count(&source)
                .await
                .map(|(done, _)| done)
                .unwrap_or_default()
        })
        .await,
    );
    wait_for("every object migrated", WAIT, || async {
        let (done, not) = migrated_count(&source).await?;
        if done == total {
            Ok(())
        } else {
            Err(format!("{done}/{total}: {not:?}"))
        }
    })
    .await;
    let left = owned_objects(&source.env).await;
    let machine_objects_after: BTreeSet<String> = left
        .iter()
        .filter(|n| n.starts_with("Machine") || n.contains("machineclass"))
        .cloned()
        .collect();
    assert_eq!(
        machine_objects_after, machine_objects_before,
        "migrate deletes no machine object"
    );
    assert!(
        !left
            .iter()
            .any(|n| n.starts_with("ManagedResource/") || n.starts_with("Secret/managedresource-")),
        "ManagedResources of a migrated shoot are gone from the seed: {left:?}"
    );
    // gardenlet records the machine state itself; the Worker's own state stays empty.
    let own_state = api::<Worker>(&source.env)
        .get(WORKER)
        .await
        .unwrap()
        .status
        .and_then(|s| s.default.state);
    assert!(
        own_state.is_none_or(|s| s.is_null()),
        "status.state stays empty"
    );
    let state = support::gardener::machine_state(&source.env.client, &source.env.namespace).await;
    assert!(!state.is_null(), "there are machines to restore");
    shallow_delete(&source).await;

    // Restore in a new namespace of the same shoot.
    let technical_id = source.env.namespace.clone();
    let destination = Shoot::prepare(support::env().await, runtimes, |c| {
        c["spec"]["shoot"]["status"]["technicalID"] = json!(technical_id)
    })
    .await;
    destination
        .create_objects("wait-for-state", &Extra::default())
        .await;
    api::<Worker>(&destination.env)
        .patch_status(
            WORKER,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"state": state}})),
        )
        .await
        .unwrap();
    for_all(&destination, Action::Annotate("restore")).await;
    kills.push(
        kill_at(operator, "restore", rng.range(0, 600), total, || {
            ready_count(&destination, &[LastOperationType::Restore])
        })
        .await,
    );
    load::wait_all_ready(
        std::slice::from_ref(&destination),
        &[LastOperationType::Restore],
        WAIT,
    )
    .await;
    destination.check_children(1).await.unwrap();
    destination.check_finalizers(&[]).await.unwrap();
    assert_eq!(
        machine_identities(&destination.env).await,
        machines_before,
        "the recorded machines came back; none was created anew"
    );

    // Delete (the gVisor deletions uninstall first; GRM's rollout report comes from the
    // stand-in, whatever the operator's kill point).
    let _grm =
        GvisorRolloutStandIn::start(destination.env.client.clone(), &destination.env.namespace);
    for_all(&destination, Action::Delete).await;
    kills.push(
        kill_at(operator, "delete", rng.range(0, 800), total, || async {
            total
                - remaining(&destination)
                    .await
                    .map(|l| l.len())
                    .unwrap_or(total)
        })
        .await,
    );
    wait_for("every object deleted", WAIT, || async {
        destination.mcm.sync().await?;
        let left = remaining(&destination).await?;
        if left.is_empty() {
            Ok(())
        } else {
            let workers = list::<Worker>(&destination.env).await?;
            let state: Vec<Value> = workers
                .iter()
                .map(|w| {
                    json!(
                        w.status
                            .as_ref()
                            .and_then(|s| s.default.last_operation.as_ref())
                            .map(|l| (&l.description, l.state == LastOperationState::Error))
                    )
                })
                .collect();
            Err(format!("{left:?} {state:?}"))
        }
    })
    .await;
    let left = owned_objects(&destination.env).await;
    assert!(left.is_empty(), "left after delete: {left:?}");
    kills
}

/// The tests of this binary run their own operators, which watch all namespaces: they
/// take turns.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn sigkill_at_random_points_of_every_operation_converges() {
    let _turn = SERIAL.lock().await;
    let replay = std::env::var("RESILIENCE_SEED").is_ok();
    let rounds = if replay { 1 } else { load::pick(3, 20) };
    let runtimes = load::pick(3, 5);
    let env = support::env().await;
    let mut operator = OperatorProcess::start(&env.kubeconfig, &[]);
    let first = load::seed();
    let mut kills = Vec::new();
    for i in 0..rounds {
        let seed = first.wrapping_add(i);
        println!("round {i}: RESILIENCE_SEED={seed}");
        for kill in round(&mut operator, seed, runtimes).await {
            println!(
                "  SIGKILL in {} after {} ms: {}/{} objects done",
                kill.phase, kill.after_ms, kill.done, kill.total
            );
            kills.push(kill);
        }
    }
    let log = operator.log_text();
    assert!(!log.contains("panicked"), "the operator panicked:\n{log}");
    let mid = kills
        .iter()
        .filter(|k| k.done > 0 && k.done < k.total)
        .count();
    let before = kills.iter().filter(|k| k.done == 0).count();
    println!(
        "RESULT rounds={rounds} kills={} before_any_done={before} mid_operation={mid} after_all_done={} objects_per_round={} all converged",
        kills.len(),
        kills.len() - mid - before,
        runtimes + 3,
    );
}

/// Regression (found by the test above): an OperatingSystemConfig whose operator died after
/// its migrate removed the finalizers but before it removed the `migrate` annotation kept the
/// annotation forever — without our finalizer the migrate flow did nothing at all. The state
/// of that kill point is built directly here, so the case is checked on every run.
#[tokio::test]
async fn a_migrate_killed_before_its_last_step_is_finished_after_the_restart() {
    let _turn = SERIAL.lock().await;
    let env = support::env().await;
    let shoot = Shoot::prepare(env, 0, |_| {}).await;
    let name = format!("{}-original", support::fixtures::OSC_KEY);
    let mut osc =
        support::fixtures::operating_system_config_json(&shoot.env.namespace, &name, "reconcile");
    osc["metadata"]["annotations"] = json!({"gardener.cloud/operation": "migrate"});
    let oscs = api::<OperatingSystemConfig>(&shoot.env);
    oscs.create(
        &kube::api::PostParams::default(),
        &serde_json::from_value(osc).unwrap(),
    )
    .await
    .unwrap();
    oscs.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"observedGeneration": 1, "lastOperation": {
            "type": "Migrate", "state": "Succeeded", "progress": 100,
            "description": "Successfully migrated OperatingSystemConfig",
            "lastUpdateTime": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        }}})),
    )
    .await
    .unwrap();
    let operator = OperatorProcess::start(
        &shoot.env.kubeconfig,
        &["--controllers=operatingsystemconfig"],
    );
    wait_for("the migrate annotation removed", WAIT, || async {
        let osc = oscs.get(&name).await.map_err(|e| e.to_string())?;
        migrated(&osc)
    })
    .await;
    drop(operator);
}
