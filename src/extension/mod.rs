//! The generic Gardener extension reconciler, shared by the ContainerRuntime,
//! OperatingSystemConfig and Worker controllers.
//!
//! Pipeline of one controller ([`controller::run`]):
//!
//! 1. a watch on all objects of the kind feeds [`predicate`] (class/type filter, the
//!    annotation-driven enqueue rules) into a [`queue::WorkQueue`];
//! 2. up to `--max-concurrent-reconciles` workers take keys and run [`reconciler::Reconciler::reconcile`]:
//!    read the object, honour `wait-for-state`, read the [`cluster`] and skip failed shoots,
//!    strip the `reconcile` annotation, pick the step with [`operation::decide`] and run the
//!    flow around the kind's [`Actuator`]: [`finalizer`]s, [`status`] writes, events, metrics;
//! 3. failures are retried per [`error::RetryPolicy`]; successes wait for the next event.
//!
//! A kind plugs in by implementing [`ExtensionKind`] for its type and [`Actuator`] for its
//! logic. Liveness pieces live beside it: [`heartbeat`], [`leader`] and their gauges
//! ([`liveness_metrics`]); the object gauges ([`object_states`], [`object_metrics`]) read what
//! the controllers' watches keep; and the shoot delivery helpers are in [`managed_resource`].

pub mod cache;
pub mod cluster;
pub mod compact_store;
pub mod controller;
pub mod error;
pub mod events;
pub mod finalizer;
pub mod heartbeat;
pub mod leader;
pub mod liveness_metrics;
pub mod managed_resource;
pub mod metrics;
pub mod object_metrics;
pub mod object_states;
pub mod operation;
pub mod predicate;
pub mod queue;
pub mod reconciler;
pub mod start;
pub mod status;
pub mod watch_error;

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::api::constants::{
    FINALIZER_CONTAINER_RUNTIME, FINALIZER_OPERATING_SYSTEM_CONFIG, FINALIZER_WORKER,
};
use crate::api::{
    ContainerRuntime, ExtensionObject, LastOperationType, OperatingSystemConfig, Worker,
};

pub use cluster::ClusterContext;
pub use error::Classify;

/// An extension kind the generic reconciler can drive.
pub trait ExtensionKind:
    kube::Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + ExtensionObject
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The kind name, for status descriptions, events and metrics.
    const KIND: &'static str;
    /// Our finalizer on objects of this kind.
    const FINALIZER: &'static str;
    /// Whether a successful migrate removes all finalizers (ContainerRuntime, OSC) or only
    /// ours (Worker).
    const MIGRATE_REMOVES_ALL_FINALIZERS: bool;
    /// Whether migrate is a no-op when our finalizer is absent (OSC only).
    const MIGRATE_REQUIRES_FINALIZER: bool;
    /// Whether runs may take the Cluster from the operator's cache. gardenlet changes the
    /// Cluster and then annotates the extension objects, and the two watches do not deliver
    /// in a common order, so a store may still hold the Cluster from before the change. A
    /// kind may read it cached when a stale view corrects itself: the gVisor actuator reads
    /// only the failed, deleting, hibernated and force-delete markers of the shoot (a
    /// deletion that started on an old view is polled again and takes the new one then); the
    /// OSC actuator reads only the pools' rollout budgets, and its objects run again when
    /// those change (`controllers::operatingsystemconfig::budget_wake`). The Worker acts on
    /// the whole shoot spec (hibernation, pools, machine images) and reads it with a GET.
    const CACHED_CLUSTER: bool;
}

impl ExtensionKind for ContainerRuntime {
    const KIND: &'static str = "ContainerRuntime";
    const FINALIZER: &'static str = FINALIZER_CONTAINER_RUNTIME;
    const MIGRATE_REMOVES_ALL_FINALIZERS: bool = true;
    const MIGRATE_REQUIRES_FINALIZER: bool = false;
    const CACHED_CLUSTER: bool = true;
}

impl ExtensionKind for OperatingSystemConfig {
    const KIND: &'static str = "OperatingSystemConfig";
    const FINALIZER: &'static str = FINALIZER_OPERATING_SYSTEM_CONFIG;
    const MIGRATE_REMOVES_ALL_FINALIZERS: bool = true;
    const MIGRATE_REQUIRES_FINALIZER: bool = true;
    const CACHED_CLUSTER: bool = true;
}

impl ExtensionKind for Worker {
    const KIND: &'static str = "Worker";
    const FINALIZER: &'static str = FINALIZER_WORKER;
    const MIGRATE_REMOVES_ALL_FINALIZERS: bool = false;
    const MIGRATE_REQUIRES_FINALIZER: bool = false;
    const CACHED_CLUSTER: bool = false;
}

/// What an actuator is asked to act on.
#[derive(Debug)]
pub struct Request<'a, K> {
    /// The object as read at the start of this run (after our own metadata writes).
    pub object: &'a K,
    /// Its Cluster, when it has one.
    pub cluster: Option<&'a ClusterContext>,
    /// The operation type reported in the status.
    pub operation: LastOperationType,
}

impl<K: kube::Resource> Request<'_, K> {
    /// The object's namespace (extension objects are namespaced, so it is always set by the
    /// API server; empty only for hand-built objects in unit tests).
    pub fn namespace(&self) -> &str {
        self.object.meta().namespace.as_deref().unwrap_or_default()
    }

    /// The object's name.
    pub fn name(&self) -> &str {
        self.object.meta().name.as_deref().unwrap_or_default()
    }
}

/// How an operation ended, when it did not fail.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Finished; `status` holds extra status fields to write with the Succeeded status.
    Done {
        /// Extra status fields (merged into the success patch).
        status: Map<String, Value>,
    },
    /// Finished, and nothing had to be written: the run found everything as it should be.
    /// The status says Succeeded as after [`Outcome::Done`], but no event is published.
    Unchanged,
    /// Not finished yet (e.g. waiting for a rollout): keep the status Processing with
    /// `reason` and run again after `retry_after`.
    Pending {
        /// What we wait for, written into the Processing description.
        reason: String,
        /// When to look again.
        retry_after: Duration,
    },
}

impl Outcome {
    /// Finished, with no extra status fields.
    pub fn done() -> Self {
        Outcome::Done { status: Map::new() }
    }
}

/// The logic of one extension kind. Every operation must be idempotent: a run may be
/// interrupted at any point and repeated.
pub trait Actuator: Send + Sync + 'static {
    /// The kind.
    type Object: ExtensionKind;
    /// The actuator's error.
    type Error: Classify;

    /// Create or update everything the object asks for.
    fn reconcile(
        &self,
        request: &Request<'_, Self::Object>,
    ) -> impl Future<Output = Result<Outcome, Self::Error>> + Send;

    /// Remove everything created for the object and wait until it is gone.
    fn delete(
        &self,
        request: &Request<'_, Self::Object>,
    ) -> impl Future<Output = Result<Outcome, Self::Error>> + Send;

    /// Deletion when the shoot needs force deletion: best effort, never waits.
    fn force_delete(
        &self,
        request: &Request<'_, Self::Object>,
    ) -> impl Future<Output = Result<Outcome, Self::Error>> + Send;

    /// Leave the seed clean without touching the shoot (control-plane migration, source).
    fn migrate(
        &self,
        request: &Request<'_, Self::Object>,
    ) -> impl Future<Output = Result<Outcome, Self::Error>> + Send;

    /// Rebuild on the destination seed from the object's `status.state`, then reconcile.
    fn restore(
        &self,
        request: &Request<'_, Self::Object>,
    ) -> impl Future<Output = Result<Outcome, Self::Error>> + Send;
}
