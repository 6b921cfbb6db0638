//! Migrate (source seed): leave the machines and the machine state to gardenlet, and delete
//! nothing. The machines keep running; gardenlet computes the machine state from the machine
//! objects, persists it into the ShootState and then shallow-deletes the machine objects
//! (finalizers stripped first, so MCM — already deleted by gardenlet — never acts on the real
//! machines). `status.state` is left empty (an older value is cleared): gardener rejects the
//! restore of a Worker whose extension state and machine state both hold machines (see
//! [`super`]). The event says what gardenlet will find.

use kube::api::ListParams;
use serde_json::{Value, json};

use super::state_objects;
use super::{Error, WorkerActuator, objects};
use crate::api::machine::{Machine, MachineDeployment, MachineSet};
use crate::api::{ExtensionObject, Worker};
use crate::extension::{Outcome, Request};

/// Clears `status.state` if set and reports what stays for gardenlet.
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
    // What gardenlet's computeMachineState will record from the same objects.
    let kept = state_objects::record(&deployments, &sets, &machines);
    let has_state = request
        .object
        .default_status()
        .and_then(|status| status.state.as_ref())
        .is_some_and(|state| !state.is_null());
    if has_state {
        objects::patch_worker_status(client, request.object, json!({"state": Value::Null})).await?;
    }
    actuator
        .steps
        .normal(
            request.object,
            request.operation,
            "MachinesLeftForGardenlet",
            migrate_note(deployments.len(), kept.counts()),
        )
        .await;
    Ok(Outcome::done())
}

/// The note of the `MachinesLeftForGardenlet` event: what was found, and what of it
/// gardenlet's machine state will hold (deployments with machine sets, as gardenlet records
/// them); the others are counted too, so a deployment MCM has not acted on yet does not read
/// as "none found".
fn migrate_note(found: usize, (deployments, sets, machines): (usize, usize, usize)) -> String {
    let kept = if deployments == found {
        format!("{deployments} machine deployment(s)")
    } else {
        format!("{deployments} of {found} machine deployment(s)")
    };
    let skipped = found.saturating_sub(deployments);
    let without_sets = if skipped > 0 {
        format!(" ({skipped} without machine sets, so without machines to keep)")
    } else {
        String::new()
    };
    format!(
        "Left {kept}, {sets} machine set(s) and {machines} machine(s) for gardenlet to record as machine state{without_sets}; status.state stays empty; no machine object was deleted"
    )
}

#[cfg(test)]
mod tests {
    use super::migrate_note;

    #[test]
    fn the_note_counts_what_was_found_and_what_gardenlet_will_record() {
        assert_eq!(
            migrate_note(2, (2, 2, 3)),
            "Left 2 machine deployment(s), 2 machine set(s) and 3 machine(s) for gardenlet to record as machine state; status.state stays empty; no machine object was deleted"
        );
        assert_eq!(
            migrate_note(1, (0, 0, 0)),
            "Left 0 of 1 machine deployment(s), 0 machine set(s) and 0 machine(s) for gardenlet to record as machine state (1 without machine sets, so without machines to keep); status.state stays empty; no machine object was deleted"
        );
    }
}
