//! Delete and force delete (Gardener's `actuator_delete.go`, `Delete`):
//!
//! 1. (delete only) re-deploy the class secrets and classes, so machine-controller-manager
//!    deletes the machines with the current credentials and user data (`DeployMachineClasses`);
//! 2. (delete only) wait until MCM holds the Worker's credentials secret (its finalizer is
//!    on `spec.secretRef`; `waitUntilCredentialsSecretAcquiredOrReleased(acquired=true)`,
//!    [`super::credentials`]);
//! 3. label every Machine `force-deletion=True` (MCM then skips draining), delete every
//!    MachineDeployment, MachineClass and class secret of the namespace (deployments and
//!    classes with one `deletecollection` each, as upstream's `DeleteAllOf`);
//! 4. (delete only) wait until no machine object and no class secret is left, failing at once
//!    with the errors of failed machines (`WaitUntilMachineResourcesDeleted`); a poll lists
//!    kind by kind only until one has objects left;
//! 5. (delete only) wait until MCM has let go of the credentials secret (`acquired=false`).
//!
//! Once a wait has lasted [`super::SLOW_WAIT`], each look also reads machine-controller-manager's
//! leader Leases ([`super::mcm_liveness`]): with MCM gone nothing deletes the machines, and the
//! Worker says so first ("machine-controller-manager is not running: …; the deletion goes on
//! once it runs again (waiting until …)") instead of reading like a slow deletion until the
//! bound runs out.
//!
//! The waits are series of runs by requeue, each bounded by
//! [`super::Timings::deletion_timeout`]; steps 1 to 3 are remembered for the series
//! ([`super::wait::Step`]) so a later run does not bring back the deleted classes nor
//! delete again.
//!
//! Nothing here needs the Worker to be valid: a Worker that cannot be rendered (it never
//! reconciled, its user data is gone) skips step 1 with a warning event, and the credentials
//! waits apply only when a class references the secret and the secret exists (otherwise
//! MCM would never take hold of it).

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::ListParams;

use super::wait::{Step, WaitKind};
use super::{Error, WorkerActuator};
use super::{availability, credentials, mcm_liveness, objects, reconcile};
use crate::api::Worker;
use crate::api::machine::{Machine, MachineClass, MachineDeployment, MachineSet};
use crate::extension::{Outcome, Request};

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

/// Step 3, once per series: labels the machines for force deletion and deletes every
/// deployment and class of the namespace (one `deletecollection` each) and every class
/// secret.
/// Nobody but us creates these while the Worker is deleting, so the runs that poll after it
/// only wait.
async fn delete_machine_objects(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
) -> Result<(), Error> {
    let (namespace, name) = (request.namespace(), request.name());
    if actuator
        .waits
        .has_done(namespace, name, Step::MachineObjectsDeleted)
    {
        return Ok(());
    }
    let client = &actuator.client;
    let marked = objects::mark_machines_for_force_deletion(client, namespace).await?;
    let everything = ListParams::default();
    let deployments = objects::delete_all(
        &objects::api::<MachineDeployment>(client, namespace),
        &everything,
        "MachineDeployment",
        namespace,
    )
    .await?;
    let classes = objects::delete_all(
        &objects::api::<MachineClass>(client, namespace),
        &everything,
        "MachineClass",
        namespace,
    )
    .await?;
    // Class secrets one by one: a `deletecollection` of Secrets would need that verb on every
    // Secret of the seed, where a label selector is all that tells ours apart.
    let secrets = objects::api::<Secret>(client, namespace);
    let mut deleted_secrets = 0;
    for secret in objects::list(&secrets, &objects::class_secret_selector(), "Secret").await? {
        if secret.metadata.deletion_timestamp.is_none()
            && objects::delete(&secrets, &secret.name_any(), "Secret").await?
        {
            deleted_secrets += 1;
        }
    }
    actuator
        .waits
        .note_done(namespace, name, Step::MachineObjectsDeleted);
    actuator.steps.routine(
        request.object,
        "MachineObjectsDeleted",
        format!(
            "Labelled {marked} machine(s) force-deletion=True; deleted {deployments} machine deployment(s), {classes} machine class(es), {deleted_secrets} class secret(s)"
        ),
    );
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
    // An operation that failed during the deletion fails the wait at once, with the
    // machines' own errors (`WaitUntilMachineResourcesDeleted`).
    let deployments = objects::list(
        &objects::api::<MachineDeployment>(client, namespace),
        &ListParams::default(),
        "MachineDeployment",
    )
    .await?;
    if let Some(failed) = deployments
        .iter()
        .find_map(|d| availability::failed_machines(&d.name_any(), d.status.as_ref()?))
    {
        return Err(Error::MachinesFailed(failed));
    }
    let left = match deployments.len() {
        0 => first_kind_left(client, namespace).await?,
        count => Some(format!("{count} machine deployment(s)")),
    };
    let Some(left) = left else {
        actuator.steps.routine(
            request.object,
            "MachineObjectsGone",
            "All machine objects are deleted".to_string(),
        );
        return wait_for_credentials_release(actuator, request).await;
    };
    let message = explain(
        actuator,
        request,
        WaitKind::Deletion,
        format!("waiting until {left} are deleted"),
    )
    .await;
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

/// What is left besides deployments — machines, machine sets, classes, class secrets, in
/// the order machine-controller-manager lets go of them — as the count of the first kind
/// that has any, or `None` when all are gone. The wait ends only when every kind is empty, so
/// a poll lists kind by kind and stops at the first one with objects left.
async fn first_kind_left(client: &kube::Client, namespace: &str) -> Result<Option<String>, Error> {
    let everything = ListParams::default();
    let machines = objects::count::<Machine>(client, namespace, &everything, "Machine").await?;
    if machines > 0 {
        return Ok(Some(format!("{machines} machine(s)")));
    }
    let sets = objects::count::<MachineSet>(client, namespace, &everything, "MachineSet").await?;
    if sets > 0 {
        return Ok(Some(format!("{sets} machine set(s)")));
    }
    let classes =
        objects::count::<MachineClass>(client, namespace, &everything, "MachineClass").await?;
    if classes > 0 {
        return Ok(Some(format!("{classes} machine class(es)")));
    }
    let secrets = objects::count::<Secret>(
        client,
        namespace,
        &objects::class_secret_selector(),
        "Secret",
    )
    .await?;
    Ok((secrets > 0).then(|| format!("{secrets} class secret(s)")))
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
            Ok(prepared) => reconcile::deploy_classes(actuator, request, &prepared)
                .await
                .map(drop)?,
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
                explain(
                    actuator,
                    request,
                    WaitKind::CredentialsAcquired,
                    format!(
                        "waiting until machine-controller-manager holds the credentials secret {} (its finalizer)",
                        request.object.spec.secret_ref.name
                    ),
                )
                .await,
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
            explain(
                actuator,
                request,
                WaitKind::CredentialsReleased,
                format!(
                    "waiting until machine-controller-manager releases the credentials secret {} (its finalizer)",
                    request.object.spec.secret_ref.name
                ),
            )
            .await,
        )
        .await
}

/// `waiting`, led by the sentence that machine-controller-manager is not running once the
/// `kind` wait has lasted [`super::SLOW_WAIT`] and one of its leader Leases is abandoned.
async fn explain(
    actuator: &WorkerActuator,
    request: &Request<'_, Worker>,
    kind: WaitKind,
    waiting: String,
) -> String {
    match actuator.machine_controller_down(request, kind).await {
        Some(down) => mcm_liveness::deletion_stalled(&down, &waiting),
        None => waiting,
    }
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
