//! Restore (destination seed): bring the machines back from `status.state` without new
//! machines, then reconcile (see [`super`] for the state's origin and format).
//!
//! 1. validate and render as reconcile does, and apply the classes and class secrets (the
//!    restored machines reference them);
//! 2. for every wanted deployment that has recorded machine sets and does not exist yet:
//!    create its MachineSets and Machines in this namespace under their recorded names,
//!    with their labels (the `node` label is the node reference) and `providerID`; objects
//!    that already exist are left alone;
//! 3. create those deployments with the recorded replicas, so MCM adopts the restored sets
//!    (matching `name` label) instead of creating machines;
//! 4. only then scale an existing `machine-controller-manager` Deployment to 1 unless
//!    hibernated — MCM starts on a namespace where every deployment with state already has
//!    its sets and machines;
//! 5. reconcile.
//!
//! This is the order of Gardener's `RestoreWithoutReconcile` (`actuator_restore.go`).
//! Deployments that already exist are skipped in step 2 because a requeued restore must not
//! resurrect machines that MCM deleted after the first run.

use std::collections::{BTreeMap, BTreeSet};

use kube::ResourceExt;
use kube::api::{DynamicObject, ListParams, PostParams};

use super::reconcile::{self, run_all};
use super::state;
use super::state_objects::{self, RestoreObjects};
use super::{Error, WorkerActuator, objects};
use crate::api::Worker;
use crate::api::machine::{Machine, MachineDeployment, MachineSet};
use crate::extension::finalizer::is_conflict;
use crate::extension::{Outcome, Request};

/// Creates `object`; an existing one counts as done.
async fn create(
    api: &kube::Api<DynamicObject>,
    object: &DynamicObject,
    kind: &'static str,
) -> Result<(), Error> {
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(error) if is_conflict(&error) => Ok(()),
        Err(source) => Err(Error::Api {
            action: "restoring",
            kind,
            name: object.name_any(),
            source: Box::new(source),
        }),
    }
}

/// Restores machine sets and machines from `status.state`, then reconciles.
pub async fn restore(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
) -> Result<Outcome, Error> {
    let namespace = request.namespace();
    let client = &actuator.client;
    let recorded = state::decode(
        request
            .object
            .status
            .as_ref()
            .and_then(|s| s.default.state.as_ref()),
    )
    .map_err(Error::State)?;
    let prepared = reconcile::prepare(actuator, request).await?;

    let listed = objects::list(
        &objects::api::<MachineDeployment>(client, namespace),
        &ListParams::default(),
        "MachineDeployment",
    )
    .await?;
    let existing: BTreeSet<String> = listed.iter().map(|d| d.name_any()).collect();
    let mut replicas = BTreeMap::new();
    let mut to_create: Vec<(String, RestoreObjects)> = Vec::new();
    for deployment in &prepared.rendered {
        let Some(recorded) = recorded
            .machine_deployments
            .get(&deployment.name)
            .filter(|s| !s.machine_sets.is_empty())
        else {
            continue;
        };
        replicas.insert(deployment.name.clone(), recorded.replicas);
        if !existing.contains(&deployment.name) {
            let objects = state_objects::restore_objects(&deployment.name, recorded, namespace)
                .map_err(Error::State)?;
            to_create.push((deployment.name.clone(), objects));
        }
    }

    if !to_create.is_empty() {
        reconcile::deploy_classes(actuator, request, &prepared)
            .await
            .map(drop)?;
        let sets_api = objects::dynamic_api::<MachineSet>(client, namespace);
        let machines_api = objects::dynamic_api::<Machine>(client, namespace);
        let sets: Vec<&DynamicObject> = to_create
            .iter()
            .flat_map(|(_, o)| o.machine_sets.iter())
            .collect();
        let machines: Vec<&DynamicObject> = to_create
            .iter()
            .flat_map(|(_, o)| o.machines.iter())
            .collect();
        let tasks: Vec<_> = sets
            .iter()
            .map(|set| create(&sets_api, set, "MachineSet"))
            .collect();
        run_all(tasks).await?;
        let tasks: Vec<_> = machines
            .iter()
            .map(|machine| create(&machines_api, machine, "Machine"))
            .collect();
        run_all(tasks).await?;
        let names: Vec<&str> = to_create.iter().map(|(n, _)| n.as_str()).collect();
        reconcile::deploy_restored(actuator, request, &prepared, &names, &listed, &replicas)
            .await?;
        actuator
            .steps
            .normal(
                request.object,
                request.operation,
                "MachinesRestored",
                format!(
                    "Restored {} machine set(s) and {} machine(s) of {} from status.state",
                    sets.len(),
                    machines.len(),
                    names.join(", ")
                ),
            )
            .await;
    }

    let scaled = if prepared.inputs.hibernation_enabled {
        None
    } else {
        objects::scale_machine_controller_manager(client, namespace, 1).await?
    };
    if let Some(previous) = scaled {
        actuator
            .steps
            .normal(
                request.object,
                request.operation,
                "MachineControllerManagerScaled",
                format!("Scaled machine-controller-manager from {previous} to 1"),
            )
            .await;
    }

    reconcile::run(actuator, request, &prepared, &replicas).await
}
