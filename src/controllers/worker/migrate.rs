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
            recorded_note(deployments.len(), recorded.counts()),
        )
        .await;
    Ok(Outcome::done())
}

/// The note of the `MachineStateRecorded` event: what was found and what was recorded. Only
/// deployments with machine sets are recorded (as gardenlet does); the others are counted
/// too, so a deployment MCM has not acted on yet does not read as "none found".
fn recorded_note(found: usize, (deployments, sets, machines): (usize, usize, usize)) -> String {
    let recorded = if deployments == found {
        format!("Recorded {deployments} machine deployment(s)")
    } else {
        format!("Recorded {deployments} of {found} machine deployment(s)")
    };
    let skipped = found.saturating_sub(deployments);
    let without_sets = if skipped > 0 {
        format!(" ({skipped} without machine sets, so without machines to keep)")
    } else {
        String::new()
    };
    format!(
        "{recorded}, {sets} machine set(s) and {machines} machine(s) in status.state{without_sets}; no machine object was deleted"
    )
}

#[cfg(test)]
mod tests {
    use super::recorded_note;

    #[test]
    fn the_note_counts_what_was_found_and_what_was_recorded() {
        assert_eq!(
            recorded_note(2, (2, 2, 3)),
            "Recorded 2 machine deployment(s), 2 machine set(s) and 3 machine(s) in status.state; no machine object was deleted"
        );
        assert_eq!(
            recorded_note(1, (0, 0, 0)),
            "Recorded 0 of 1 machine deployment(s), 0 machine set(s) and 0 machine(s) in status.state (1 without machine sets, so without machines to keep); no machine object was deleted"
        );
    }
}
