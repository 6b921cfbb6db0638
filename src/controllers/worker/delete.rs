//! Delete and force delete (Gardener's `actuator_delete.go`): label every Machine
//! `force-deletion=True` (MCM then skips draining), delete every MachineDeployment,
//! MachineClass and class secret of the namespace, then — unless force-deleting — wait by
//! requeue, bounded by [`super::Timings::deletion_timeout`], until no machine object and no
//! class secret is left. MCM does the actual machine deletion; it keeps its finalizers on the
//! classes until their machines are gone, so deleting classes early is safe.
//!
//! Nothing here needs the Worker to be valid: a Worker that never reconciled can still be
//! deleted.

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::ListParams;

use super::objects;
use super::wait::WaitKind;
use super::{Error, LABEL_PURPOSE, PURPOSE_MACHINE_CLASS, WorkerActuator};
use crate::api::Worker;
use crate::api::machine::{Machine, MachineClass, MachineDeployment, MachineSet};
use crate::extension::{Outcome, Request};

fn class_secret_selector() -> ListParams {
    ListParams::default().labels(&format!("{LABEL_PURPOSE}={PURPOSE_MACHINE_CLASS}"))
}

/// Deletes everything; `wait = false` is force deletion.
pub async fn delete(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
    wait: bool,
) -> Result<Outcome, Error> {
    let namespace = request.namespace();
    let client = &actuator.client;
    let marked = objects::mark_machines_for_force_deletion(client, namespace).await?;

    let deployments = objects::api::<MachineDeployment>(client, namespace);
    let classes = objects::api::<MachineClass>(client, namespace);
    let secrets = objects::api::<Secret>(client, namespace);
    let mut deleted = (0usize, 0usize, 0usize);
    for d in objects::list(&deployments, &ListParams::default(), "MachineDeployment").await? {
        if d.metadata.deletion_timestamp.is_none()
            && objects::delete(&deployments, &d.name_any(), "MachineDeployment").await?
        {
            deleted.0 += 1;
        }
    }
    for c in objects::list(&classes, &ListParams::default(), "MachineClass").await? {
        if c.metadata.deletion_timestamp.is_none()
            && objects::delete(&classes, &c.name_any(), "MachineClass").await?
        {
            deleted.1 += 1;
        }
    }
    for s in objects::list(&secrets, &class_secret_selector(), "Secret").await? {
        if s.metadata.deletion_timestamp.is_none()
            && objects::delete(&secrets, &s.name_any(), "Secret").await?
        {
            deleted.2 += 1;
        }
    }
    if marked + deleted.0 + deleted.1 + deleted.2 > 0 {
        actuator
            .steps
            .normal(
                request.object,
                request.operation,
                "MachineObjectsDeleted",
                format!(
                    "Labelled {marked} machine(s) force-deletion=True; deleted {} machine deployment(s), {} machine class(es), {} class secret(s)",
                    deleted.0, deleted.1, deleted.2
                ),
            )
            .await;
    }
    if !wait {
        return Ok(Outcome::done());
    }

    let remaining = [
        (
            objects::list(
                &objects::api::<Machine>(client, namespace),
                &ListParams::default(),
                "Machine",
            )
            .await?
            .len(),
            "machine(s)",
        ),
        (
            objects::list(
                &objects::api::<MachineSet>(client, namespace),
                &ListParams::default(),
                "MachineSet",
            )
            .await?
            .len(),
            "machine set(s)",
        ),
        (
            objects::list(&deployments, &ListParams::default(), "MachineDeployment")
                .await?
                .len(),
            "machine deployment(s)",
        ),
        (
            objects::list(&classes, &ListParams::default(), "MachineClass")
                .await?
                .len(),
            "machine class(es)",
        ),
        (
            objects::list(&secrets, &class_secret_selector(), "Secret")
                .await?
                .len(),
            "class secret(s)",
        ),
    ];
    let left: Vec<String> = remaining
        .iter()
        .filter(|(count, _)| *count > 0)
        .map(|(count, what)| format!("{count} {what}"))
        .collect();
    if left.is_empty() {
        actuator
            .steps
            .normal(
                request.object,
                request.operation,
                "MachineObjectsGone",
                "All machine objects are deleted".to_string(),
            )
            .await;
        return Ok(Outcome::done());
    }
    let message = format!("waiting until {} are deleted", left.join(", "));
    actuator
        .keep_waiting(
            request,
            WaitKind::Deletion,
            actuator.timings.deletion_timeout,
            (
                "WaitingForMachineDeletion",
                "waiting for the machine objects to be deleted",
            ),
            message,
        )
        .await
}
