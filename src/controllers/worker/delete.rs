//! Delete and force delete (Gardener's `actuator_delete.go`, `Delete`):
//!
//! 1. (delete only) re-deploy the class secrets and classes, so machine-controller-manager
//!    deletes the machines with the current credentials and user data (`DeployMachineClasses`);
//! 2. (delete only) wait until MCM holds the Worker's credentials secret (its finalizer is
//!    on `spec.secretRef`; `waitUntilCredentialsSecretAcquiredOrReleased(acquired=true)`,
//!    [`super::credentials`]);
//! 3. label every Machine `force-deletion=True` (MCM then skips draining), delete every
//!    MachineDeployment, MachineClass and class secret of the namespace;
//! 4. (delete only) wait until no machine object and no class secret is left, failing at once
//!    with the errors of failed machines (`WaitUntilMachineResourcesDeleted`);
//! 5. (delete only) wait until MCM has let go of the credentials secret (`acquired=false`).
//!
//! The waits are series of runs by requeue, each bounded by
//! [`super::Timings::deletion_timeout`]; steps 1 and 2 are remembered for the series
//! ([`super::wait::Step`]) so a later run does not bring back the deleted classes.
//!
//! Nothing here needs the Worker to be valid: a Worker that cannot be rendered (it never
//! reconciled, its user data is gone) skips step 1 with a warning event, and the credentials
//! waits apply only when a class references the secret and the secret exists (otherwise
//! MCM would never take hold of it).

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::ListParams;

use super::wait::{Step, WaitKind};
use super::{Error, LABEL_PURPOSE, PURPOSE_MACHINE_CLASS, WorkerActuator};
use super::{availability, credentials, objects, reconcile};
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
    if wait {
        if let Some(pending) = redeploy_classes_and_wait_for_credentials(actuator, request).await? {
            return Ok(pending);
        }
    }
    delete_machine_objects(actuator, request).await?;
    if !wait {
        return Ok(Outcome::done());
    }
    wait_machine_objects_gone(actuator, request).await
}

/// Labels the machines for force deletion and deletes the deployments, classes and class
/// secrets not yet deleting; one event says how many of each.
async fn delete_machine_objects(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
) -> Result<(), Error> {
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
    Ok(())
}

/// Done (after the credentials release) once no machine object is left; else waits on, or
/// fails at once when a machine failed during the deletion.
async fn wait_machine_objects_gone(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
) -> Result<Outcome, Error> {
    let namespace = request.namespace();
    let client = &actuator.client;
    let deployments = objects::api::<MachineDeployment>(client, namespace);
    let classes = objects::api::<MachineClass>(client, namespace);
    let secrets = objects::api::<Secret>(client, namespace);
    // An operation that failed during the deletion fails the wait at once, with the
    // machines' own errors (`WaitUntilMachineResourcesDeleted`).
    let left_deployments =
        objects::list(&deployments, &ListParams::default(), "MachineDeployment").await?;
    if let Some(failed) = left_deployments
        .iter()
        .find_map(|d| availability::failed_machines(&d.name_any(), d.status.as_ref()?))
    {
        return Err(Error::MachinesFailed(failed));
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
        (left_deployments.len(), "machine deployment(s)"),
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
        return wait_for_credentials_release(actuator, request).await;
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

/// Steps 1 and 2: `Some(Pending)` while machine-controller-manager does not hold the
/// credentials secret yet.
async fn redeploy_classes_and_wait_for_credentials(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
) -> Result<Option<Outcome>, Error> {
    let (namespace, name) = (request.namespace(), request.name());
    if !actuator
        .waits
        .has_done(namespace, name, Step::ClassesRedeployed)
    {
        match reconcile::prepare(actuator, request).await {
            Ok(prepared) => reconcile::deploy_classes(actuator, request, &prepared).await?,
            Err(error @ (Error::Api { .. } | Error::State(_))) => return Err(error),
            Err(error) => {
                actuator
                    .steps
                    .warning(
                        request.object,
                        request.operation,
                        "MachineClassesNotRedeployed",
                        format!(
                            "Deleting with the existing machine classes: the Worker cannot be rendered ({})",
                            crate::error_chain::chain(&error)
                        ),
                    )
                    .await;
            }
        }
        actuator
            .waits
            .note_done(namespace, name, Step::ClassesRedeployed);
    }
    if actuator
        .waits
        .has_done(namespace, name, Step::CredentialsAcquired)
    {
        return Ok(None);
    }
    let held = credentials_held(actuator, request).await?;
    if held == Some(false) {
        return actuator
            .keep_waiting(
                request,
                WaitKind::CredentialsAcquired,
                actuator.timings.deletion_timeout,
                (
                    "WaitingForCredentialsAcquired",
                    "waiting for machine-controller-manager to acquire the credentials secret",
                ),
                format!(
                    "waiting until machine-controller-manager holds the credentials secret {} (its finalizer)",
                    request.object.spec.secret_ref.name
                ),
            )
            .await
            .map(Some);
    }
    actuator
        .waits
        .note_done(namespace, name, Step::CredentialsAcquired);
    Ok(None)
}

/// Step 5: done once machine-controller-manager has let go of the credentials secret.
async fn wait_for_credentials_release(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
) -> Result<Outcome, Error> {
    let secret = objects::get(
        &objects::api::<Secret>(&actuator.client, request.namespace()),
        &request.object.spec.secret_ref.name,
        "Secret",
    )
    .await?;
    if !secret.as_ref().is_some_and(credentials::held) {
        return Ok(Outcome::done());
    }
    actuator
        .keep_waiting(
            request,
            WaitKind::CredentialsReleased,
            actuator.timings.deletion_timeout,
            (
                "WaitingForCredentialsReleased",
                "waiting for machine-controller-manager to release the credentials secret",
            ),
            format!(
                "waiting until machine-controller-manager releases the credentials secret {} (its finalizer)",
                request.object.spec.secret_ref.name
            ),
        )
        .await
}

/// Whether machine-controller-manager holds the Worker's credentials secret; `None` when
/// there is nothing it would hold (the secret is missing, or no class references it).
async fn credentials_held(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
) -> Result<Option<bool>, Error> {
    let namespace = request.namespace();
    let name = &request.object.spec.secret_ref.name;
    let classes = objects::list(
        &objects::api::<MachineClass>(&actuator.client, namespace),
        &ListParams::default(),
        "MachineClass",
    )
    .await?;
    if !credentials::referenced_by(&classes, name) {
        return Ok(None);
    }
    let secret = objects::get(
        &objects::api::<Secret>(&actuator.client, namespace),
        name,
        "Secret",
    )
    .await?;
    Ok(secret.as_ref().map(credentials::held))
}
