//! The Worker controller: machine classes and machine deployments per pool and zone, for
//! the Worker types in `--worker-types` (default `local`). machine-controller-manager (MCM)
//! turns what we write into machines; we own the `machine.sapcloud.io/v1alpha1` objects and
//! the Worker status. It plugs into [`crate::extension`], which handles the operation
//! annotations, the finalizer `extensions.gardener.cloud/worker`, `lastOperation`/`lastError`
//! and retries.
//!
//! Pipeline (pure steps first, then thin API I/O):
//!
//! 1. [`validate`]: Worker + Cluster → names, hash ([`hash`]), sizes per zone ([`zones`]),
//!    pool `providerConfig` ([`config`]); every user error stops here;
//! 2. [`render`]: → class secrets, MachineClasses, MachineDeployments;
//! 3. [`replicas`]: replicas of each deployment from what exists;
//! 4. [`availability`]: is the rollout done, failed or still running; [`leftovers`]: unwanted
//!    deployments and a stuck MCM; [`mcm_liveness`]: a MCM that stopped renewing its Lease;
//!    [`poll`]: what a poll may skip; [`unchanged`]: what a reconcile need not write again;
//!    [`in_place`] (with
//!    [`crate::api::quantity`]): in-place pool hashes and status; [`credentials`]: MCM's hold on the
//!    credentials secret;
//! 5. the operations, one file each: [`reconcile`], [`delete`], [`migrate`], [`restore`];
//!    bounded waits by requeue ([`wait`]), an event per step ([`step_events`]), machine state for
//!    migration ([`state`], [`state_objects`]);
//! 6. `gardener-extension-node render worker` prints the same objects as YAML
//!    (`render::worker`).
//!
//! # What follows which upstream function
//!
//! Gardener v1.149 `extensions/pkg/controller/worker/genericactuator/` unless noted:
//!
//! | Here | Upstream |
//! |---|---|
//! | [`hash::class_hash`] | `WorkerPoolHashV2` (`worker/machines.go`) |
//! | [`replicas::decide`] | `deployMachineDeployments` (replica rules) |
//! | [`reconcile`]: classes, deployments, status | `Reconcile`, `DeployMachineClasses`, `deployMachineDeployments`, `updateWorkerStatusMachineDeployments` |
//! | [`availability::evaluate`] (incl. preserved failed machines, `ManualInPlaceUpdate`) | `waitUntilWantedMachineDeploymentsAvailable` |
//! | [`poll`]: polls list only, status/replicas written on change | the 5-second `retry.UntilTimeout` loop of that wait, which only lists |
//! | [`leftovers::unwanted_deployments`] | `waitUntilUnwantedMachineDeploymentsDeleted` |
//! | [`leftovers::stuck_controller`] | `isMachineControllerStuck` (`actuator.go`) |
//! | [`in_place::update_hash`] | `CalculateWorkerPoolHashForInPlaceUpdate` (`pkg/utils/gardener`) |
//! | [`in_place::status_map`] | `updateWorkerStatusInPlaceUpdateWorkerPoolHash` |
//! | [`machine_watch`] | the Machine watch with `MachineConditionChangedPredicate` (`worker/controller.go`) |
//! | [`delete`] | `Delete` (`actuator_delete.go`), `waitUntilCredentialsSecretAcquiredOrReleased`, `WaitUntilMachineResourcesDeleted` (`pkg/utils/gardener`) |
//! | [`migrate`] | `Migrate` (a no-op upstream; gardenlet's `computeMachineState` records the machines) |
//! | [`restore`] | `Restore`, `RestoreWithoutReconcile` (`actuator_restore.go`) |
//!
//! # Reconcile (Gardener's generic actuator, `genericactuator/actuator_reconcile.go`)
//!
//! Class secrets and classes are applied, then the deployments (hibernated: replicas 0 and
//! every Machine labelled `force-deletion=True` first), then `status.machineDeployments` and
//! `status.machineDeploymentsLastUpdateTime` are written — **before** waiting, because
//! gardenlet's "worker status updated" step (and with it the cluster-autoscaler) waits for
//! that timestamp only. Then the rollout is polled every [`Timings::poll`] by returning
//! `Pending` (at most [`Timings::rollout_timeout`] per series, failing with the machines' own
//! errors when MCM reports failed machines). A poll lists and writes only what changed
//! ([`poll`]): no class or deployment is applied again, a deployment is written only when
//! its decided replicas differ from the listed ones, the status only when its entries
//! change. Existing deployments are applied under their listed `resourceVersion` (re-read
//! and decided anew on a conflict), so a replica count the cluster-autoscaler set since the
//! list is not written back. As many unavailable machines as MCM preserves as failed
//! (`autoPreserveFailedMachineMax`, `status.preservedFailedReplicas`) are tolerated. For
//! `ManualInPlaceUpdate` deployments, machines of old machine sets count as done until the
//! user selects them; selected ones are waited for ([`in_place`]).
//!
//! After the rollout, `status.inPlaceUpdates.workerPoolToHashMap` is written when it changes:
//! each in-place pool (`AutoInPlaceUpdate`, `ManualInPlaceUpdate`) with the hash gardenlet
//! compares against (Kubernetes minor version, machine image version, kubelet settings,
//! credentials rotations); a manual pool whose machines are not all updated yet keeps its
//! old entry ([`in_place`]). Only then are the deployments, classes and class secrets that are
//! no longer wanted deleted, in that order, so an old class outlives the machines that use
//! it. While machine-controller-manager runs (its Deployment has replicas), the operation
//! then waits until the deleted deployments are gone, failing at once with the errors of
//! their failed machines (`waitUntilUnwantedMachineDeploymentsDeleted`; [`leftovers`]).
//! Hibernated shoots finally get the `machine-controller-manager` Deployment scaled to 0
//! (when it exists).
//!
//! When a rollout wait runs out, machine-controller-manager is checked for being stuck — a
//! deployment it has taken over (finalizer), older than two minutes, without a machine set
//! of the wanted class — and its pods (`role=machine-controller-manager`) are deleted so
//! its Deployment starts a fresh one (`IsMachineControllerStuck`; [`leftovers`]).
//!
//! # Delete and force delete
//!
//! Delete re-deploys the class secrets and classes (fresh credentials for MCM), waits until
//! MCM's finalizer is on the Worker's credentials secret, labels every Machine
//! `force-deletion=True`, deletes every MachineDeployment, MachineClass and class secret of
//! the namespace, waits (bounded by [`Timings::deletion_timeout`], by requeue) until no
//! machine object and no class secret is left — failing at once with the errors of failed
//! machines — and finally until MCM's finalizer is off the credentials secret again
//! ([`delete`]). A wait that has lasted [`SLOW_WAIT`] while machine-controller-manager no longer
//! renews its leader Leases says so first in `lastOperation` ([`mcm_liveness`]), with a
//! Warning event. Force deletion does the same deletes but never waits (upstream's
//! `ForceDelete` deletes nothing; we still remove what we can).
//!
//! # Migrate and restore: where the machine state lives
//!
//! Upstream, since GEP-22, gardenlet computes the machine state itself during migration
//! (`computeMachineState`, `pkg/utils/gardener/shootstate/`), stores it in the ShootState, and
//! writes it into the destination Worker's `status.state` before it sets `restore`
//! (`RestoreWorkerState`, `pkg/extensions/customresources.go`); the generic actuator's
//! Migrate is a no-op. gardener v1.149.3 also copies each extension object's own
//! `status.state` back first and then *fails* the Worker's restore when both hold state
//! (`docs/contract.md#control-plane-migration`, rule 4). So:
//!
//! - Migrate deletes nothing and leaves `status.state` empty (clearing an older value), so
//!   the ShootState carries the machines once, as gardenlet's machine state. Machines, sets,
//!   deployments and classes stay; gardenlet's shallow delete removes them after it has
//!   persisted the ShootState.
//! - Restore reads `status.state` in gardenlet's format ([`state`]: gzip + base64 JSON of
//!   `machineDeployments` → replicas, machine sets, machines; also the older plain JSON
//!   form) in the order of `RestoreWithoutReconcile` (`actuator_restore.go`): classes and
//!   class secrets; for every wanted deployment with state that does not exist yet its
//!   MachineSets and Machines with their names, labels (the `node` label is the node
//!   reference) and `providerID`; then those deployments with the recorded replicas, so MCM
//!   adopts the machines instead of creating new ones; only then an existing
//!   `machine-controller-manager` Deployment is scaled to 1 (not when hibernated); then the
//!   reconcile. Skipping deployments that already exist keeps a requeued restore from
//!   resurrecting machines MCM has deleted since.
//!
//! Our own copy of the machine state is not needed, and none is kept: Migrate leaves
//! `status.state` empty (verified by `test/worker.rs`, which also plays gardenlet's
//! `computeMachineState` and restores from it), so the ShootState holds the machines once.
//! The generic actuator can also read the ShootState from the garden itself; we have no
//! garden client, so the `status.state` gardenlet writes before `restore` is our only source.
//! gardenlet clears `status.state` itself once the restored Worker is ready; we leave it
//! alone after a restore. [`state_objects::record`] mirrors gardenlet's `computeMachineState`
//! (the tests play gardenlet with it, and Migrate's event counts with it).
//!
//! # Machines wake the Worker
//!
//! A watch on Machines ([`machine_watch`]) runs a namespace's Worker again when
//! machine-controller-manager takes a machine past `CandidateForUpdate` (a node of a
//! `ManualInPlaceUpdate` pool selected by the user), as upstream's
//! `MachineConditionChangedPredicate` does, so the Worker follows the update and writes the
//! pool's new hash when it is done.
//!
//! # Machine images
//!
//! The MachineClass boots the image provider-local's Worker would pick
//! ([`machine_image`]); `status.providerStatus` is provider-local's `WorkerStatus` with every
//! image looked up, written with `machineDeployments`.

pub mod add;
pub mod availability;
pub mod config;
pub mod credentials;
pub mod delete;
pub mod hash;
pub mod in_place;
pub mod leftovers;
pub mod machine_image;
pub mod machine_sets;
pub mod machine_watch;
pub mod mcm_liveness;
pub mod migrate;
mod objects;
pub mod poll;
pub mod reconcile;
pub mod render;
pub mod replicas;
pub mod restore;
pub mod state;
pub mod state_objects;
pub mod step_events;
pub mod unchanged;
pub mod validate;
pub mod wait;
pub mod zones;

use std::time::Duration;

use kube::Client;

pub use objects::PARALLEL;

use crate::api::{ErrorCode, Worker};
use crate::extension::events::EventPublisher;
use crate::extension::{Classify, Outcome, Request};

/// The Worker type handled by default (`--worker-types`).
pub const DEFAULT_TYPE: &str = "local";

/// Label with a Secret's purpose; [`PURPOSE_MACHINE_CLASS`] on class secrets.
pub const LABEL_PURPOSE: &str = "gardener.cloud/purpose";
/// Value of [`LABEL_PURPOSE`] on class secrets.
pub const PURPOSE_MACHINE_CLASS: &str = "machineclass";
/// Data key of the user data in class secrets.
pub const DATA_KEY_USER_DATA: &str = "userData";
/// Selector/template label of a deployment's machines (= deployment name).
pub const LABEL_NAME: &str = "name";
/// Template label with the Worker name (in-place update strategies only).
pub const LABEL_WORKER_NAME: &str = "worker.gardener.cloud/name";
/// Label MCM reads to delete a machine without draining.
pub const LABEL_FORCE_DELETION: &str = "force-deletion";
/// Value of [`LABEL_FORCE_DELETION`].
pub const FORCE_DELETION_TRUE: &str = "True";
/// The MCM Deployment gardenlet runs in the shoot namespace.
pub const MCM_DEPLOYMENT: &str = "machine-controller-manager";
/// `minReadySeconds` of every deployment.
pub const MIN_READY_SECONDS: i32 = 500;
/// `revisionHistoryLimit` of every deployment.
pub const REVISION_HISTORY_LIMIT: i32 = 0;
/// cluster-autoscaler option annotations on deployments.
pub const ANNOTATION_SCALE_DOWN_UTILIZATION_THRESHOLD: &str =
    "autoscaler.gardener.cloud/scale-down-utilization-threshold";
/// See [`ANNOTATION_SCALE_DOWN_UTILIZATION_THRESHOLD`].
pub const ANNOTATION_SCALE_DOWN_GPU_UTILIZATION_THRESHOLD: &str =
    "autoscaler.gardener.cloud/scale-down-gpu-utilization-threshold";
/// See [`ANNOTATION_SCALE_DOWN_UTILIZATION_THRESHOLD`].
pub const ANNOTATION_SCALE_DOWN_UNNEEDED_TIME: &str =
    "autoscaler.gardener.cloud/scale-down-unneeded-time";
/// See [`ANNOTATION_SCALE_DOWN_UTILIZATION_THRESHOLD`].
pub const ANNOTATION_SCALE_DOWN_UNREADY_TIME: &str =
    "autoscaler.gardener.cloud/scale-down-unready-time";
/// See [`ANNOTATION_SCALE_DOWN_UTILIZATION_THRESHOLD`].
pub const ANNOTATION_MAX_NODE_PROVISION_TIME: &str =
    "autoscaler.gardener.cloud/max-node-provision-time";

/// How long a wait may last before it is out of the ordinary: from then on it publishes an
/// event ([`step_events`]) and the rollout and deletion waits look whether
/// machine-controller-manager still renews its Leases ([`mcm_liveness`]). MCM answers a new
/// deployment within seconds, so a normal rollout of a pool without machines, or of machines
/// that boot, costs neither.
pub const SLOW_WAIT: Duration = Duration::from_secs(30);

/// Poll interval and bounds of the waits. A wait is a series of runs [`Timings::poll`]
/// apart, each returning `Pending` (Processing with what it waits for, and the bound); a
/// series that lasts longer than its bound fails with `timed out after …` and is retried
/// with the controller's backoff, the retry starting a new series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// Requeue delay while waiting (upstream polls every 5 s).
    pub poll: Duration,
    /// Longest rollout wait per series (upstream: 5 min).
    pub rollout_timeout: Duration,
    /// Longest wait for machine objects to disappear per series (upstream: 5 min).
    pub deletion_timeout: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            poll: Duration::from_secs(5),
            rollout_timeout: Duration::from_secs(300),
            deletion_timeout: Duration::from_secs(300),
        }
    }
}

/// Errors of the Worker actuator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Worker is invalid (the user or gardenlet must fix it).
    #[error("invalid Worker")]
    Validate(#[source] validate::ValidationError),
    /// The user data Secret of a pool does not exist.
    #[error("pool {pool}: user data Secret {namespace}/{secret} not found")]
    UserDataSecretMissing {
        /// Pool.
        pool: String,
        /// Namespace.
        namespace: String,
        /// Secret name.
        secret: String,
    },
    /// The user data Secret lacks the key or it is empty.
    #[error("pool {pool}: user data Secret {secret} has no data key {key:?} or it is empty")]
    UserDataKeyMissing {
        /// Pool.
        pool: String,
        /// Secret name.
        secret: String,
        /// Key.
        key: String,
    },
    /// An API call failed.
    #[error("{action} {kind} {name}")]
    Api {
        /// What we tried.
        action: &'static str,
        /// Kind.
        kind: &'static str,
        /// namespace/name (or namespace for lists).
        name: String,
        /// Cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// MCM reports failed machines.
    #[error("{0}")]
    MachinesFailed(String),
    /// A wait exceeded its bound ([`Timings`]); the run fails and is retried with backoff,
    /// and the retry waits afresh.
    #[error(
        "timed out after {}s {what} (at most {}s per attempt; retried with backoff): {last}",
        waited.as_secs(),
        bound.as_secs()
    )]
    WaitTimedOut {
        /// What we waited for.
        what: &'static str,
        /// How long.
        waited: Duration,
        /// The bound that was exceeded.
        bound: Duration,
        /// The last observation.
        last: String,
    },
    /// The machine state in `status.state` cannot be read or written.
    #[error("machine state")]
    State(#[source] state::StateError),
    /// The in-place update hash of a pool cannot be computed (the pool is invalid).
    #[error("in-place update hash")]
    InPlaceHash(#[source] in_place::InPlaceHashError),
}

impl Classify for Error {
    fn codes(&self) -> Vec<ErrorCode> {
        match self {
            Error::Validate(_) | Error::InPlaceHash(_) => vec![ErrorCode::ConfigurationProblem],
            _ => Vec::new(),
        }
    }

    fn category(&self) -> &'static str {
        match self {
            Error::Validate(_) | Error::InPlaceHash(_) => "configuration",
            Error::UserDataSecretMissing { .. } | Error::UserDataKeyMissing { .. } => "user-data",
            Error::Api { .. } => "api",
            Error::MachinesFailed(_) => "machines",
            Error::WaitTimedOut { .. } => "timeout",
            Error::State(_) => "state",
        }
    }
}

/// The Worker actuator: the seed client, step events and the running waits.
pub struct WorkerActuator {
    client: Client,
    steps: step_events::StepEvents,
    waits: wait::WaitTracker,
    timings: Timings,
}

impl std::fmt::Debug for WorkerActuator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerActuator")
            .field("timings", &self.timings)
            .finish_non_exhaustive()
    }
}

impl WorkerActuator {
    /// An actuator with the default [`Timings`].
    pub fn new(client: Client, events: EventPublisher) -> Self {
        Self::with_timings(client, events, Timings::default())
    }

    /// An actuator with explicit timings (tests and benchmarks poll faster).
    pub fn with_timings(client: Client, events: EventPublisher, timings: Timings) -> Self {
        WorkerActuator {
            client,
            steps: step_events::StepEvents::new(events),
            waits: wait::WaitTracker::default(),
            timings,
        }
    }

    /// One look of a bounded wait ([`wait`]): within `bound` a Normal event `reason` with
    /// `message` and `Pending` (look again after the poll interval; the Processing
    /// description states the bound); beyond it `Error::WaitTimedOut` naming `what`.
    async fn keep_waiting(
        &self,
        request: &Request<'_, Worker>,
        kind: wait::WaitKind,
        bound: Duration,
        (reason, what): (&'static str, &'static str),
        message: String,
    ) -> Result<Outcome, Error> {
        let state = self.waits.waiting(
            request.namespace(),
            request.name(),
            kind,
            request.object.metadata.generation,
            std::time::Instant::now(),
            bound,
        );
        match state {
            wait::WaitState::Within(waited) => {
                if waited >= SLOW_WAIT {
                    self.steps
                        .normal(request.object, request.operation, reason, message.clone())
                        .await;
                } else {
                    self.steps.routine(request.object, reason, message.clone());
                }
                Ok(Outcome::Pending {
                    reason: format!("{message} (waiting at most {}s)", bound.as_secs()),
                    retry_after: self.timings.poll,
                })
            }
            wait::WaitState::Exceeded(waited) => Err(Error::WaitTimedOut {
                what,
                waited,
                bound,
                last: message,
            }),
        }
    }

    /// Once the Worker's `kind` wait has lasted [`SLOW_WAIT`]: the first of
    /// machine-controller-manager's processes that no longer renews its leader Lease
    /// ([`mcm_liveness`]), published once per wait as a Warning event
    /// `MachineControllerManagerNotRunning` (and logged); `None` before (nothing is read) or
    /// while both run.
    async fn machine_controller_down(
        &self,
        request: &Request<'_, Worker>,
        kind: wait::WaitKind,
    ) -> Option<mcm_liveness::Abandoned> {
        let waited = self.waits.waited(
            request.namespace(),
            request.name(),
            kind,
            request.object.metadata.generation,
            std::time::Instant::now(),
        );
        if waited < SLOW_WAIT {
            return None;
        }
        let down = objects::machine_controller_down(&self.client, request.namespace()).await?;
        self.steps
            .warning(
                request.object,
                request.operation,
                "MachineControllerManagerNotRunning",
                down.event_note(),
            )
            .await;
        Some(down)
    }

    /// Ends a series of runs unless the operation is still waiting.
    fn settle(&self, worker: &Worker, result: Result<Outcome, Error>) -> Result<Outcome, Error> {
        if !matches!(result, Ok(Outcome::Pending { .. })) {
            self.steps.forget(worker);
            self.waits.forget(
                worker.metadata.namespace.as_deref().unwrap_or_default(),
                worker.metadata.name.as_deref().unwrap_or_default(),
            );
        }
        result
    }
}

impl crate::extension::Actuator for WorkerActuator {
    type Object = Worker;
    type Error = Error;

    async fn reconcile(&self, request: &Request<'_, Worker>) -> Result<Outcome, Error> {
        let result = reconcile::reconcile(self, request).await;
        self.settle(request.object, result)
    }

    async fn delete(&self, request: &Request<'_, Worker>) -> Result<Outcome, Error> {
        let result = delete::delete(self, request, true).await;
        self.settle(request.object, result)
    }

    async fn force_delete(&self, request: &Request<'_, Worker>) -> Result<Outcome, Error> {
        let result = delete::delete(self, request, false).await;
        self.settle(request.object, result)
    }

    async fn migrate(&self, request: &Request<'_, Worker>) -> Result<Outcome, Error> {
        let result = migrate::migrate(self, request).await;
        self.settle(request.object, result)
    }

    async fn restore(&self, request: &Request<'_, Worker>) -> Result<Outcome, Error> {
        let result = restore::restore(self, request).await;
        self.settle(request.object, result)
    }
}
