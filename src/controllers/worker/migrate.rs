//! Migrate (source seed): record the machine state in `status.state`, in gardenlet's format
//! ([`super::state`]), and delete nothing. The machines keep running; gardenlet persists the
//! state into the ShootState and then shallow-deletes the machine objects (finalizers
//! stripped first, so MCM — already deleted by gardenlet — never acts on the real machines).
//! See [`super`] for why we write the state although gardenlet computes it too.

use kube::api::ListParams;
use serde_json::{Value, json};

use super::state;
use super::{Error, WorkerActuator, objects};
use crate::api::Worker;
use crate::api::machine::{Machine, MachineDeployment, MachineSet};
use crate::extension::{Outcome, Request};

/// Records the machine state.
pub async fn migrate(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
) -> Result<Outcome, Error> {
    let namespace = request.namespace();
    let client = &actuator.client;
    let params = ListParams::default();
    let deployments = objects::list(
        &objects::dynamic_api::<MachineDeployment>(client, namespace),
        &params,
        "MachineDeployment",
    )
    .await?;
    let sets = objects::list(
        &objects::dynamic_api::<MachineSet>(client, namespace),
        &params,
        "MachineSet",
    )
    .await?;
    let machines = objects::list(
        &objects::dynamic_api::<Machine>(client, namespace),
        &params,
        "Machine",
    )
    .await?;
    let recorded = state::record(&deployments, &sets, &machines);
    let (deployment_count, set_count, machine_count) = recorded.counts();
    let encoded = state::encode(&recorded).map_err(Error::State)?;
    objects::patch_worker_status(
        client,
        request.object,
        json!({"state": encoded.unwrap_or(Value::Null)}),
    )
    .await?;
    actuator
        .steps
        .normal(
            request.object,
            request.operation,
            "MachineStateRecorded",
            format!(
                "Recorded {deployment_count} machine deployment(s), {set_count} machine set(s) and {machine_count} machine(s) in status.state; no machine object was deleted"
            ),
        )
        .await;
    Ok(Outcome::done())
}
