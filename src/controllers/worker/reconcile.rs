//! Reconcile (and the second half of restore): classes → deployments → status → wait →
//! cleanup, as described in [`super`].
//!
//! The first run of a series applies every object and writes the status; the runs that poll
//! the rollout after it ([`super::Timings::poll`] apart) list and write only what changed
//! ([`super::poll`]). Replicas are decided per run from the deployments that exist
//! ([`super::replicas`]), and written under the listed `resourceVersion`, which is why an
//! autoscaled value survives.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;

use chrono::Utc;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::ListParams;
use serde_json::json;

use super::availability::{self, Rollout, Wanted};
use super::in_place;
use super::leftovers::{self, Unwanted};
use super::objects::{self, PARALLEL};
use super::poll::{self, RequestKey};
use super::render::{self, RenderedDeployment};
use super::replicas::{self, ReplicaInputs};
use super::validate::{self, WorkerInputs};
use super::wait::{SeriesRequest, UserData, WaitKind};
use super::{Error, WorkerActuator, unchanged};
use crate::api::constants::ANNOTATION_TIMESTAMP;
use crate::api::machine::{Machine, MachineClass, MachineDeployment, MachineSet};
use crate::api::{Worker, WorkerStatus};
use crate::extension::finalizer::is_conflict;
use crate::extension::{Outcome, Request};

/// A validated and rendered Worker.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The validated inputs.
    pub inputs: WorkerInputs,
    /// The objects of every pool and zone.
    pub rendered: Vec<RenderedDeployment>,
}

/// Runs `tasks`, [`PARALLEL`] at a time, stopping at the first error; returns their results
/// in completion order. (Callers collect the futures into a `Vec` first: a closure held
/// across the await would make the future's `Send` bound higher-ranked, which the compiler
/// cannot prove.)
pub(super) async fn run_all<T, Fut>(tasks: Vec<Fut>) -> Result<Vec<T>, Error>
where
    Fut: Future<Output = Result<T, Error>>,
{
    futures::stream::iter(tasks)
        .buffer_unordered(PARALLEL)
        .try_collect()
        .await
}

/// Validates, reads each pool's user data and renders.
pub async fn prepare(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
) -> Result<Prepared, Error> {
    let namespace = request.namespace();
    let inputs = validate::validate(
        request.object,
        namespace,
        request.cluster.map(|c| &c.shoot),
        request.cluster.map(|c| &c.cluster.spec.cloud_profile),
    )
    .map_err(Error::Validate)?;
    let user_data = series_user_data(actuator, request, &inputs).await?;
    let rendered = render::render(&inputs, &user_data);
    Ok(Prepared { inputs, rendered })
}

/// gardenlet's `gardener.cloud/timestamp` annotation of the request.
fn requested_at(worker: &Worker) -> Option<&str> {
    worker
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_TIMESTAMP))
        .map(String::as_str)
}

/// Each pool's user data: read from its Secret by the first run of a series, reused by the
/// runs that poll after it ([`SeriesRequest`]).
async fn series_user_data(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
    inputs: &WorkerInputs,
) -> Result<UserData, Error> {
    let (namespace, name) = (request.namespace(), request.name());
    let series = SeriesRequest {
        generation: request.object.metadata.generation,
        timestamp: requested_at(request.object).map(str::to_string),
    };
    if let Some(read) = actuator.waits.user_data(namespace, name, &series) {
        return Ok(read);
    }
    let mut user_data = UserData::new();
    for pool in &inputs.pools {
        let data = objects::user_data(&actuator.client, namespace, &pool.pool).await?;
        user_data.insert(pool.pool.name.clone(), data);
    }
    actuator
        .waits
        .note_user_data(namespace, name, series, user_data.clone());
    Ok(user_data)
}

/// The names of the class secrets and classes a run listed before applying its own: what a
/// cleanup in the same run looks at, instead of listing them again.
#[derive(Debug, Default)]
pub struct ListedClasses {
    /// Class secret names.
    pub secrets: Vec<String>,
    /// MachineClass names.
    pub classes: Vec<String>,
}

/// Applies the class secrets, then the classes. A Worker that deployed before
/// (`status.machineDeploymentsLastUpdateTime` is set) lists what is there and applies only
/// what differs ([`unchanged`]), and returns what it listed; a new one has nothing to compare
/// with, applies all and returns `None`.
pub async fn deploy_classes(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
    prepared: &Prepared,
) -> Result<Option<ListedClasses>, Error> {
    let namespace = request.namespace();
    let secrets = objects::api::<Secret>(&actuator.client, namespace);
    let classes = objects::api::<MachineClass>(&actuator.client, namespace);
    let deployed_before = request
        .object
        .status
        .as_ref()
        .is_some_and(|s| s.machine_deployments_last_update_time.is_some());
    let (existing_secrets, existing_classes) = if deployed_before {
        (
            objects::list(&secrets, &objects::class_secret_selector(), "Secret").await?,
            objects::list(&classes, &ListParams::default(), "MachineClass").await?,
        )
    } else {
        (Vec::new(), Vec::new())
    };
    let changed_secrets = changed(
        &existing_secrets,
        prepared.rendered.iter().map(|d| &d.class_secret),
    );
    let changed_classes = changed(
        &existing_classes,
        prepared.rendered.iter().map(|d| &d.class),
    );
    let tasks: Vec<_> = changed_secrets
        .iter()
        .map(|&secret| async { objects::apply(&secrets, secret, "Secret").await.map(drop) })
        .collect();
    run_all(tasks).await?;
    let tasks: Vec<_> = changed_classes
        .iter()
        .map(|&class| async {
            objects::apply(&classes, class, "MachineClass")
                .await
                .map(drop)
        })
        .collect();
    run_all(tasks).await?;
    let names: Vec<&str> = prepared
        .rendered
        .iter()
        .map(|d| d.class_name.as_str())
        .collect();
    actuator.steps.routine(
        request.object,
        "MachineClassesDeployed",
        format!(
            "Applied {} of {} machine class(es) and {} of their secrets (the others unchanged): {}",
            changed_classes.len(),
            names.len(),
            changed_secrets.len(),
            names.join(", ")
        ),
    );
    Ok(deployed_before.then(|| ListedClasses {
        secrets: existing_secrets.iter().map(ResourceExt::name_any).collect(),
        classes: existing_classes.iter().map(ResourceExt::name_any).collect(),
    }))
}

/// The objects of `desired` that `existing` lacks or holds differently.
fn changed<'a, K>(existing: &[K], desired: impl Iterator<Item = &'a K>) -> Vec<&'a K>
where
    K: kube::Resource + serde::Serialize + 'a,
{
    desired
        .filter(|wanted| {
            !existing.iter().any(|found| {
                found.meta().name == wanted.meta().name && unchanged::unchanged(found, *wanted)
            })
        })
        .collect()
}

/// Reconciles from scratch.
pub async fn reconcile(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
) -> Result<Outcome, Error> {
    let prepared = prepare(actuator, request).await?;
    run(actuator, request, &prepared, &BTreeMap::new()).await
}

/// The reconcile steps on a prepared Worker. `restored` holds the recorded replicas of
/// deployments that a restore brings back.
pub async fn run(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
    prepared: &Prepared,
    restored: &BTreeMap<String, i32>,
) -> Result<Outcome, Error> {
    let namespace = request.namespace();
    let client = &actuator.client;
    let hibernated = prepared.inputs.hibernation_enabled;
    let fingerprint = poll::fingerprint(
        &prepared.rendered,
        RequestKey {
            hibernated,
            generation: request.object.metadata.generation,
            timestamp: requested_at(request.object),
        },
    );
    // A poll of a running series: its first run deployed exactly this (see [`poll`]).
    let polling = actuator.waits.deployed(namespace, request.name()).as_ref() == Some(&fingerprint);

    let listed_classes = if polling {
        None
    } else {
        deploy_classes(actuator, request, prepared).await?
    };

    let deployments = objects::api::<MachineDeployment>(client, namespace);
    let existing = objects::list(&deployments, &ListParams::default(), "MachineDeployment").await?;
    if hibernated {
        let marked = objects::mark_machines_for_force_deletion(client, namespace).await?;
        actuator
            .steps
            .normal(
                request.object,
                request.operation,
                "MachinesMarkedForForceDeletion",
                format!("Shoot is hibernated: labelled {marked} machine(s) force-deletion=True"),
            )
            .await;
    }
    let all_rendered: Vec<&RenderedDeployment> = prepared.rendered.iter().collect();
    let wrote = deploy_deployments(
        actuator,
        request,
        &prepared.inputs,
        &all_rendered,
        &existing,
        restored,
        polling,
    )
    .await?;
    write_status(actuator, request, prepared, polling).await?;
    actuator
        .waits
        .note_deployed(namespace, request.name(), fingerprint);

    // Unless a deployment was just written, the list above is still what the check needs.
    let listed = (!wrote).then_some(existing);
    let deployments = match wait_for_rollout(actuator, request, prepared, listed).await? {
        RolledOut::Done(deployments) => deployments,
        RolledOut::Pending(pending) => return Ok(pending),
    };
    write_in_place_status(actuator, request, &deployments).await?;
    cleanup(
        actuator,
        request,
        prepared,
        &deployments,
        listed_classes.as_ref(),
    )
    .await?;
    if let Some(pending) =
        wait_for_unwanted_deletion(actuator, request, prepared, &deployments).await?
    {
        return Ok(pending);
    }
    let scaled = if hibernated {
        objects::scale_machine_controller_manager(client, namespace, 0).await?
    } else {
        None
    };
    if let Some(previous) = scaled {
        actuator
            .steps
            .normal(
                request.object,
                request.operation,
                "MachineControllerManagerScaled",
                format!(
                    "Shoot is hibernated: scaled machine-controller-manager from {previous} to 0"
                ),
            )
            .await;
    }
    Ok(Outcome::done())
}

/// Restore's step before machine-controller-manager is scaled up: applies the wanted
/// deployments named in `names` (those with restored machine sets) with their recorded
/// replicas (`restored`), as `RestoreWithoutReconcile` deploys them before scaling MCM.
/// `existing` is the deployments as listed before the restore created machine sets.
pub async fn deploy_restored(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
    prepared: &Prepared,
    names: &[&str],
    existing: &[MachineDeployment],
    restored: &BTreeMap<String, i32>,
) -> Result<(), Error> {
    let subset: Vec<&RenderedDeployment> = prepared
        .rendered
        .iter()
        .filter(|d| names.contains(&d.name.as_str()))
        .collect();
    deploy_deployments(
        actuator,
        request,
        &prepared.inputs,
        &subset,
        existing,
        restored,
        false,
    )
    .await
    .map(drop)
}

/// Applies the `rendered` deployments with their decided replicas; a poll writes only those
/// whose replicas change ([`poll::needs_write`]). An existing deployment is applied with its
/// listed `resourceVersion` as precondition, so a replica count changed by someone else (the
/// cluster-autoscaler) since the list is never written back: the conflict makes us read the
/// deployment again and decide anew. Returns whether any deployment was written.
async fn deploy_deployments(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
    inputs: &WorkerInputs,
    rendered: &[&RenderedDeployment],
    existing: &[MachineDeployment],
    restored: &BTreeMap<String, i32>,
    polling: bool,
) -> Result<bool, Error> {
    let all_existing_at_zero = existing
        .iter()
        .all(|d| d.spec.replicas.unwrap_or_default() == 0);
    let decide = |d: &RenderedDeployment, listed: Option<&MachineDeployment>| {
        replicas::decide(ReplicaInputs {
            hibernation_enabled: inputs.hibernation_enabled,
            autoscaler_used: inputs.autoscaler_used,
            existing: listed.map(|l| l.spec.replicas.unwrap_or_default()),
            restored: restored.get(&d.name).copied(),
            all_existing_at_zero,
            minimum: d.minimum,
            maximum: d.maximum,
        })
    };
    let api = objects::api::<MachineDeployment>(&actuator.client, request.namespace());
    let tasks: Vec<_> = rendered
        .iter()
        .filter_map(|&d| {
            let listed = existing
                .iter()
                .find(|l| l.metadata.name.as_deref() == Some(d.name.as_str()));
            let replicas = decide(d, listed).0;
            // A poll writes only a replica change; a first run also what differs otherwise.
            let write = poll::needs_write(listed, replicas)
                || (!polling
                    && !listed.is_some_and(|l| {
                        unchanged::unchanged(l, &d.deployment_with_replicas(replicas))
                    }));
            write.then(|| {
                let (api, decide, listed) = (&api, &decide, listed.cloned());
                async move { apply_deployment(api, d, listed, decide).await }
            })
        })
        .collect();
    let summary = run_all(tasks).await?;
    if summary.is_empty() {
        return Ok(false);
    }
    actuator.steps.routine(
        request.object,
        "MachineDeploymentsDeployed",
        format!(
            "Applied {} machine deployment(s): {}",
            summary.len(),
            summary.join(", ")
        ),
    );
    Ok(true)
}

/// How often a deployment apply is retried after a conflict with another writer.
const CONFLICT_ATTEMPTS: usize = 3;

/// Applies one deployment with the replicas `decide` picks from `listed`, under the listed
/// `resourceVersion`; returns `name=replicas (rule)`.
async fn apply_deployment(
    api: &kube::Api<MachineDeployment>,
    rendered: &RenderedDeployment,
    mut listed: Option<MachineDeployment>,
    decide: &(
         impl Fn(&RenderedDeployment, Option<&MachineDeployment>) -> (i32, replicas::ReplicaRule) + Sync
     ),
) -> Result<String, Error> {
    let mut attempt = 1;
    loop {
        let (replicas, rule) = decide(rendered, listed.as_ref());
        let mut deployment = rendered.deployment_with_replicas(replicas);
        deployment.metadata.resource_version = listed
            .as_ref()
            .and_then(|l| l.metadata.resource_version.clone());
        match objects::apply(api, &deployment, "MachineDeployment").await {
            Ok(_) => return Ok(format!("{}={replicas} ({})", rendered.name, rule.as_str())),
            Err(Error::Api { source, .. })
                if is_conflict(&source) && attempt < CONFLICT_ATTEMPTS =>
            {
                attempt += 1;
                listed = objects::get(api, &rendered.name, "MachineDeployment").await?;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Writes `status.machineDeployments` with a fresh `machineDeploymentsLastUpdateTime`; a
/// poll writes only when the entries changed ([`poll::status_changed`]).
async fn write_status(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
    prepared: &Prepared,
    polling: bool,
) -> Result<(), Error> {
    // The generic reconciler hands us the object as returned by its own Processing write
    // of this run, so this is the latest value (including our writes of earlier runs).
    let status = request.object.status.as_ref();
    let previous = status.and_then(|s: &WorkerStatus| s.machine_deployments_last_update_time);
    let entries = render::status_entries(&prepared.rendered);
    let provider_status = prepared.inputs.provider_status();
    let same_images =
        status.and_then(|s| s.default.provider_status.as_ref()) == Some(&provider_status);
    if polling
        && same_images
        && !poll::status_changed(
            status
                .map(|s| s.machine_deployments.as_slice())
                .unwrap_or_default(),
            previous.is_some(),
            &entries,
        )
    {
        return Ok(());
    }
    let at = render::status_update_time(previous, Utc::now());
    let message = format!(
        "Wrote {} machine deployment(s) to the Worker status",
        entries.len()
    );
    let status = json!({
        "machineDeployments": entries,
        "machineDeploymentsLastUpdateTime": at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "providerStatus": provider_status,
    });
    objects::patch_worker_status(&actuator.client, request.object, status).await?;
    actuator
        .steps
        .routine(request.object, "MachineDeploymentsReported", message);
    Ok(())
}

/// Merge-patches the Worker's status and records the step (event and log line).
async fn patch_status_and_report(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
    status: serde_json::Value,
    reason: &'static str,
    message: String,
) -> Result<(), Error> {
    objects::patch_worker_status(&actuator.client, request.object, status).await?;
    actuator
        .steps
        .normal(request.object, request.operation, reason, message)
        .await;
    Ok(())
}

/// Writes `status.inPlaceUpdates.workerPoolToHashMap` when it changes ([`in_place`];
/// `updateWorkerStatusInPlaceUpdateWorkerPoolHash`, after the rollout as upstream).
async fn write_in_place_status(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
    deployments: &[MachineDeployment],
) -> Result<(), Error> {
    let pools = &request.object.spec.pools;
    let credentials = request
        .cluster
        .and_then(|c| c.shoot.status.credentials.as_ref());
    let mut hashes = Vec::with_capacity(pools.len());
    for pool in pools {
        let hash = if in_place::is_in_place(pool.update_strategy) {
            Some(in_place::update_hash(pool, credentials).map_err(Error::InPlaceHash)?)
        } else {
            None
        };
        hashes.push(in_place::PoolHash {
            name: &pool.name,
            strategy: pool.update_strategy,
            hash,
        });
    }
    let empty = BTreeMap::new();
    let current = request
        .object
        .status
        .as_ref()
        .and_then(|s| s.in_place_updates.as_ref())
        .map_or(&empty, |u| &u.worker_pool_to_hash_map);
    let Some(map) = in_place::status_map(&hashes, deployments, current) else {
        return Ok(());
    };
    // A merge patch merges maps: dropped pools are sent as null.
    let mut patch = serde_json::Map::new();
    for pool in current.keys().filter(|k| !map.contains_key(*k)) {
        patch.insert(pool.clone(), serde_json::Value::Null);
    }
    for (pool, hash) in &map {
        patch.insert(pool.clone(), json!(hash));
    }
    let message = format!(
        "Wrote the in-place update hash of pool(s) [{}] to the Worker status",
        map.iter()
            .map(|(pool, hash)| format!("{pool}={hash}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    patch_status_and_report(
        actuator,
        request,
        json!({"inPlaceUpdates": {"workerPoolToHashMap": patch}}),
        "InPlaceUpdateHashesReported",
        message,
    )
    .await
}

/// How [`wait_for_rollout`] ended when it did not fail.
enum RolledOut {
    /// Complete; the deployments as listed for the check.
    Done(Vec<MachineDeployment>),
    /// Still running: the outcome to return.
    Pending(Outcome),
}

/// Checks the rollout; while it runs, the wait goes on by requeue. `listed` holds the
/// deployments when the caller's list is still current; otherwise they are listed here.
async fn wait_for_rollout(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
    prepared: &Prepared,
    listed: Option<Vec<MachineDeployment>>,
) -> Result<RolledOut, Error> {
    let namespace = request.namespace();
    let client = &actuator.client;
    let deployments = match listed {
        Some(deployments) => deployments,
        None => {
            objects::list(
                &objects::api::<MachineDeployment>(client, namespace),
                &ListParams::default(),
                "MachineDeployment",
            )
            .await?
        }
    };
    let sets = objects::list(
        &objects::api::<MachineSet>(client, namespace),
        &ListParams::default(),
        "MachineSet",
    )
    .await?;
    let wanted: Vec<Wanted<'_>> = prepared
        .rendered
        .iter()
        .map(|d| Wanted {
            name: &d.name,
            class_name: &d.class_name,
        })
        .collect();
    // Machines matter only to ManualInPlaceUpdate deployments; list them only then.
    let machines = if deployments.iter().any(in_place::is_manual_in_place) {
        objects::list(
            &objects::api::<Machine>(client, namespace),
            &ListParams::default(),
            "Machine",
        )
        .await?
    } else {
        Vec::new()
    };
    let message = match availability::evaluate(
        &wanted,
        &deployments,
        &sets,
        &machines,
        prepared.inputs.hibernation_enabled,
    ) {
        Rollout::Complete => {
            actuator.steps.routine(
                request.object,
                "MachinesRolledOut",
                if prepared.inputs.hibernation_enabled {
                    "All machines are hibernated".to_string()
                } else {
                    format!(
                        "All {} machine deployment(s) are rolled out and healthy",
                        wanted.len()
                    )
                },
            );
            return Ok(RolledOut::Done(deployments));
        }
        Rollout::Failed(message) => return Err(Error::MachinesFailed(message)),
        Rollout::Waiting(message) => actuator
            .machine_controller_down(request, WaitKind::Rollout)
            .await
            .map_or(message, |down| down.sentence()),
    };
    let waited = actuator
        .keep_waiting(
            request,
            WaitKind::Rollout,
            actuator.timings.rollout_timeout,
            (
                "WaitingForMachines",
                "waiting for the machine deployments to roll out",
            ),
            message,
        )
        .await;
    if waited.is_err() {
        restart_stuck_machine_controller(actuator, request, prepared, &deployments, &sets).await?;
    }
    waited.map(RolledOut::Pending)
}

/// After a rollout wait ran out: deletes machine-controller-manager's pods when it looks
/// stuck ([`leftovers::stuck_controller`]), so its Deployment starts a fresh one.
async fn restart_stuck_machine_controller(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
    prepared: &Prepared,
    deployments: &[MachineDeployment],
    sets: &[MachineSet],
) -> Result<(), Error> {
    let wanted_class = |name: &str| {
        prepared
            .rendered
            .iter()
            .find(|d| d.name == name)
            .map(|d| d.class_name.as_str())
    };
    let Some(why) = leftovers::stuck_controller(deployments, sets, wanted_class, Utc::now()) else {
        return Ok(());
    };
    let namespace = request.namespace();
    let deleted =
        objects::delete_pods(&actuator.client, namespace, leftovers::MCM_POD_SELECTOR).await?;
    tracing::warn!(%why, pods = ?deleted, "machine-controller-manager looks stuck; deleted its pods");
    actuator
        .steps
        .warning(
            request.object,
            request.operation,
            "MachineControllerManagerRestarted",
            format!(
                "machine-controller-manager looks stuck ({why}); deleted its pod(s) [{}]",
                deleted.join(", ")
            ),
        )
        .await;
    Ok(())
}

/// `None` once the deployments the cleanup deleted are gone (or nothing runs MCM), while
/// they remain `Some(Pending)`; fails with their failed machines' errors. `listed` is the
/// deployments as the rollout check listed them, before the cleanup: when all of them are
/// wanted there is nothing to wait for, and nothing is read.
async fn wait_for_unwanted_deletion(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
    prepared: &Prepared,
    listed: &[MachineDeployment],
) -> Result<Option<Outcome>, Error> {
    let namespace = request.namespace();
    let client = &actuator.client;
    let wanted: BTreeSet<&str> = prepared.rendered.iter().map(|d| d.name.as_str()).collect();
    if matches!(
        leftovers::unwanted_deployments(listed, &wanted),
        Unwanted::Gone
    ) {
        return Ok(None);
    }
    // Upstream waits only while MCM runs: without it (hibernated, scaled down by hand)
    // nothing would ever delete them.
    let mcm_running = objects::machine_controller_manager_replicas(client, namespace)
        .await?
        .is_some_and(|replicas| replicas > 0);
    if !mcm_running {
        return Ok(None);
    }
    let deployments = objects::list(
        &objects::api::<MachineDeployment>(client, namespace),
        &ListParams::default(),
        "MachineDeployment",
    )
    .await?;
    match leftovers::unwanted_deployments(&deployments, &wanted) {
        Unwanted::Gone => Ok(None),
        Unwanted::Failed(message) => Err(Error::MachinesFailed(message)),
        Unwanted::Remaining(names) => actuator
            .keep_waiting(
                request,
                WaitKind::UnwantedDeletion,
                actuator.timings.rollout_timeout,
                (
                    "WaitingForUnwantedMachineDeployments",
                    "waiting for the machine deployments no longer wanted to be deleted",
                ),
                format!(
                    "waiting until machine-controller-manager has deleted machine deployment(s) [{}]",
                    names.join(", ")
                ),
            )
            .await
            .map(Some),
    }
}

/// Deletes deployments (of `listed`, as the rollout check listed them), then classes, then
/// class secrets that are no longer wanted. The classes and secrets are those this run
/// listed before applying (`listed_classes`; only we create them), else listed here.
async fn cleanup(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
    prepared: &Prepared,
    listed: &[MachineDeployment],
    listed_classes: Option<&ListedClasses>,
) -> Result<(), Error> {
    let namespace = request.namespace();
    let client = &actuator.client;
    let wanted_deployments: BTreeSet<&str> =
        prepared.rendered.iter().map(|d| d.name.as_str()).collect();
    let wanted_classes: BTreeSet<&str> = prepared
        .rendered
        .iter()
        .map(|d| d.class_name.as_str())
        .collect();

    let deployments = objects::api::<MachineDeployment>(client, namespace);
    let mut deleted_deployments = Vec::new();
    for deployment in listed {
        let name = deployment.name_any();
        if !wanted_deployments.contains(name.as_str())
            && objects::delete(&deployments, &name, "MachineDeployment").await?
        {
            deleted_deployments.push(name);
        }
    }
    let classes = objects::api::<MachineClass>(client, namespace);
    let class_names = match listed_classes {
        Some(listed) => listed.classes.clone(),
        None => objects::list(&classes, &ListParams::default(), "MachineClass")
            .await?
            .iter()
            .map(ResourceExt::name_any)
            .collect(),
    };
    let deleted_classes =
        delete_unwanted(&classes, class_names, &wanted_classes, "MachineClass").await?;
    let secrets = objects::api::<Secret>(client, namespace);
    let secret_names = match listed_classes {
        Some(listed) => listed.secrets.clone(),
        None => objects::list(&secrets, &objects::class_secret_selector(), "Secret")
            .await?
            .iter()
            .map(ResourceExt::name_any)
            .collect(),
    };
    let deleted_secrets =
        delete_unwanted(&secrets, secret_names, &wanted_classes, "Secret").await?;
    if deleted_deployments.len() + deleted_classes.len() + deleted_secrets.len() > 0 {
        actuator
            .steps
            .normal(
                request.object,
                request.operation,
                "UnwantedObjectsDeleted",
                format!(
                    "Deleted machine deployment(s) [{}], machine class(es) [{}], class secret(s) [{}]",
                    deleted_deployments.join(", "),
                    deleted_classes.join(", "),
                    deleted_secrets.join(", ")
                ),
            )
            .await;
    }
    Ok(())
}

/// Deletes the objects of `names` that `wanted` does not hold; returns the names deleted
/// (an object already gone is not among them).
async fn delete_unwanted<K>(
    api: &kube::Api<K>,
    names: Vec<String>,
    wanted: &BTreeSet<&str>,
    kind: &'static str,
) -> Result<Vec<String>, Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut deleted = Vec::new();
    for name in names {
        if !wanted.contains(name.as_str()) && objects::delete(api, &name, kind).await? {
            deleted.push(name);
        }
    }
    Ok(deleted)
}
