//! One reconcile run of one extension object: the annotation wrapper, the dispatch and the
//! flows of `docs/contract.md` (`#annotation-wrapper`, `#dispatch`, `#flows`), around a kind's
//! [`Actuator`].
//!
//! Every API write returns the updated object and the run continues with it, so the
//! resourceVersion precondition of finalizer patches is always the one we just wrote.
//!
//! Reads: in the operator a run takes its object from the store the controller's watch keeps
//! (the watch event that queued the run has already updated it) and the Cluster from the
//! [`SeedCache`]. A store may trail our own last write; a finalizer patch made from such a
//! copy fails on its resourceVersion precondition, and a run after a failure reads the
//! object with a GET.
//!
//! Writes per run: the `reconcile` annotation goes in the same patch that adds the finalizer
//! when both are due; Processing is written at once for a run gardenlet asked for (the
//! `reconcile` annotation) over an earlier success that its readiness check could take for
//! this run's (written in the second of the request's timestamp, or no timestamp) — and
//! otherwise only when the
//! actuator has not finished after [`PROCESSING_AFTER`] (or waits, or fails): a first create
//! that finishes at once goes straight to Succeeded. Normal events: none for a first create
//! (`success_event_wanted`) and none for a reconcile that found nothing to change
//! ([`Outcome::Unchanged`]).

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use chrono::Utc;
use kube::api::{ApiResource, DynamicObject};
use kube::{Api, Client, Resource, ResourceExt};
use tracing::{Instrument, info_span};

use super::cache::{ObjectStore, SeedCache};
use super::cluster::{self, ClusterContext};
use super::error::{Failure, ReconcilerError};
use super::events::EventPublisher;
use super::finalizer;
use super::metrics::ControllerMetrics;
use super::operation::{self, Step};
use super::predicate::{self, Filter};
use super::status;
use super::{Actuator, ExtensionKind, Outcome, Request};
use crate::api::constants::{ANNOTATION_OPERATION, OPERATION_RECONCILE};
use crate::api::{ExtensionObject, LastOperationState, LastOperationType};

/// Everything a run needs; one per controller, shared by its workers.
pub struct Reconciler<A: Actuator> {
    /// Seed client.
    pub client: Client,
    /// The kind's logic.
    pub actuator: A,
    /// Class/type filter.
    pub filter: Filter,
    /// Event publisher.
    pub events: EventPublisher,
    /// Metrics.
    pub metrics: ControllerMetrics,
    /// The shared seed cache (Clusters, for kinds that may read them cached); `None` reads
    /// with GETs.
    pub cache: Option<SeedCache>,
    /// The store of this kind's objects kept by the controller's watch; `None` reads with GETs.
    pub objects: Option<ObjectStore>,
    /// Objects whose last run failed: the next run reads them with a GET, in case the store
    /// trails a write of ours (namespace, name).
    pub read_fresh: Mutex<HashSet<(String, String)>>,
    /// Objects a kind's own wake-up source queued (`controller::WakeNamespaces`): their next
    /// run counts as asked for, though the object itself asks for nothing (namespace, name).
    pub woken: Mutex<HashSet<(String, String)>>,
}

/// How long a run's actuator may take before the status says Processing.
pub const PROCESSING_AFTER: Duration = Duration::from_secs(1);

/// The longest a run may take before it is cut off and retried with backoff. kube's client
/// has no response timeout (kube-client 5 `Config::read_timeout` defaults to `None`), so a
/// request that the API server accepted but never answered — seen once when kube-apiserver
/// was restarted under load (docs/reliability.md) — would otherwise hold its worker and its
/// object forever. Runs wait inline for 10 s at most; everything longer is a requeue, and a
/// run cut off mid-way is safe (every step is idempotent).
pub const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// What the controller loop does after a successful run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Wait for the next event.
    Done,
    /// Run again after the delay (an actuator is waiting for something).
    After(Duration),
}

fn operation_label(step: Step) -> &'static str {
    match step {
        Step::Reconcile(LastOperationType::Create) => "create",
        Step::Reconcile(_) => "reconcile",
        Step::Delete => "delete",
        Step::Migrate => "migrate",
        Step::Restore => "restore",
        Step::SkipMigrated => "skip",
    }
}

fn step_operation(step: Step) -> LastOperationType {
    match step {
        Step::Reconcile(t) => t,
        Step::Delete => LastOperationType::Delete,
        Step::Migrate | Step::SkipMigrated => LastOperationType::Migrate,
        Step::Restore => LastOperationType::Restore,
    }
}

impl<A: Actuator> Reconciler<A> {
    /// Runs once for `namespace/name`. `Err` means "retry with backoff"; the failure has
    /// already been written to the status and published as an event where possible.
    pub async fn reconcile(&self, namespace: &str, name: &str) -> Result<Next, Failure> {
        let kind = A::Object::KIND;
        let span = info_span!(
            "reconcile",
            kind,
            namespace,
            name,
            operation = tracing::field::Empty
        );
        async move {
            let timer = self.metrics.start(kind);
            let (label, result) =
                match tokio::time::timeout(RUN_TIMEOUT, self.run(namespace, name)).await {
                    Ok(finished) => finished,
                    Err(_) => ("none", Err(Failure::timed_out(RUN_TIMEOUT))),
                };
            {
                let mut fresh = self.read_fresh.lock().unwrap_or_else(|p| p.into_inner());
                let key = (namespace.to_string(), name.to_string());
                if result.is_err() {
                    fresh.insert(key);
                } else {
                    fresh.remove(&key);
                }
            }
            let outcome = match &result {
                Ok(Next::Done) => "success",
                Ok(Next::After(_)) => "pending",
                Err(_) => "error",
            };
            if label != "none" {
                timer.finish(label, outcome, result.as_ref().err().map(|f| f.category));
            }
            result
        }
        .instrument(span)
        .await
    }

    /// The cache to read the Cluster from, if the kind may ([`ExtensionKind::CACHED_CLUSTER`]).
    fn cluster_cache(&self) -> Option<&SeedCache> {
        self.cache.as_ref().filter(|_| A::Object::CACHED_CLUSTER)
    }

    /// The object: from the store unless the last run failed or the store lacks it, else
    /// with a GET.
    async fn read(
        &self,
        api: &Api<A::Object>,
        namespace: &str,
        name: &str,
    ) -> Result<Option<A::Object>, kube::Error> {
        let fresh = self
            .read_fresh
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&(namespace.to_string(), name.to_string()));
        if let Some(store) = self.objects.as_ref().filter(|_| !fresh) {
            // Not in the store: gone, or (rarely) not seen yet; the API server tells.
            if let Some(stored) = store.get(namespace, name) {
                return stored.decode().map(Some).map_err(kube::Error::SerdeError);
            }
        }
        api.get_opt(name).await
    }

    /// Removes the object's wake-up mark; whether it had one.
    fn take_woken(&self, namespace: &str, name: &str) -> bool {
        self.woken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(namespace.to_string(), name.to_string()))
    }

    async fn run(&self, namespace: &str, name: &str) -> (&'static str, Result<Next, Failure>) {
        let api: Api<A::Object> = Api::namespaced(self.client.clone(), namespace);
        let object = match self.read(&api, namespace, name).await {
            Ok(Some(object)) => object,
            Ok(None) => {
                // Gone: a wake-up mark could never be used.
                self.take_woken(namespace, name);
                return ("none", Ok(Next::Done));
            }
            Err(kube::Error::SerdeError(source)) => {
                return self.report_undecodable(namespace, name, source).await;
            }
            Err(source) => return ("none", Err(get_error::<A::Object>(namespace, name, source))),
        };
        if !self.filter.accepts(object.default_spec()) {
            return ("none", Ok(Next::Done));
        }
        let annotations = object.annotations().clone();
        // Annotation wrapper, step 2: wait-for-state means hands off, even while deleting.
        if operation::is_waiting_for_state(&annotations) {
            tracing::debug!("waiting for state; nothing to do");
            return ("none", Ok(Next::Done));
        }
        let deleting = object.meta().deletion_timestamp.is_some();
        let last = object
            .default_status()
            .and_then(|s| s.last_operation.as_ref());
        let observed_generation = object.default_status().and_then(|s| s.observed_generation);
        let woken = self.take_woken(namespace, name);
        if !woken
            && predicate::nothing_asked(&self.filter, object.meta(), last, observed_generation)
        {
            tracing::debug!("nothing asked of the object; stale queue entry skipped");
            return ("none", Ok(Next::Done));
        }
        let planned = operation::decide(&annotations, deleting, last);
        let label = operation_label(planned);
        tracing::Span::current().record("operation", label);

        // Dispatch, steps 2-3: the Cluster, and the ShootNotFailed precondition (no writes at all
        // for failed shoots; gardenlet re-annotates the object when it retries the shoot).
        let cluster = match cluster::lookup(&self.client, self.cluster_cache(), namespace).await {
            Ok(cluster) => cluster,
            Err(error) => {
                let failure = Failure::of(&error);
                self.report_error(&api, &object, step_operation(planned), &failure)
                    .await;
                return (label, Err(failure));
            }
        };
        if cluster.as_ref().is_some_and(|c| c.shoot.is_failed()) {
            tracing::info!("shoot is failed; leaving the object alone");
            return ("none", Ok(Next::Done));
        }

        // Annotation wrapper, step 3: `reconcile` is removed before the work; together with
        // adding the finalizer when the reconcile flow would add it next.
        let strip =
            annotations.get(ANNOTATION_OPERATION).map(String::as_str) == Some(OPERATION_RECONCILE);
        let with_finalizer =
            matches!(planned, Step::Reconcile(_)) && !deleting && !has_our_finalizer(&object);
        let object = if strip && with_finalizer {
            match finalizer::add_removing_operation_annotation(&api, &object, A::Object::FINALIZER)
                .await
            {
                Ok(Some(object)) => object,
                Ok(None) => return ("none", Ok(Next::Done)),
                Err(source) => return (label, Err(metadata_error("finalizers", &object, source))),
            }
        } else if strip {
            match finalizer::remove_operation_annotation(&api, &object).await {
                Ok(Some(object)) => object,
                Ok(None) => return ("none", Ok(Next::Done)),
                Err(source) => return (label, Err(metadata_error("annotation", &object, source))),
            }
        } else {
            object
        };
        // gardenlet now waits for this object. Its readiness check compares
        // `lastOperation.lastUpdateTime` with the `gardener.cloud/timestamp` annotation at
        // second granularity, so a Succeeded status written in the same second as the
        // annotation (or without one) would read as "done" before this run did anything: a
        // run gardenlet asked for over such a success says Processing at once.
        let object = match planned {
            Step::Reconcile(operation) if strip && success_would_pass(&object) => {
                match self.processing(&api, &object, operation, None).await {
                    Ok(object) => object,
                    Err(failure) => return (label, Err(failure)),
                }
            }
            _ => object,
        };

        let result = match planned {
            Step::SkipMigrated => {
                tracing::debug!("object was migrated; skipping");
                return ("none", Ok(Next::Done));
            }
            Step::Reconcile(operation) => {
                let call = ActuatorCall::Reconcile { requested: strip };
                self.reconcile_flow(&api, object, cluster.as_ref(), operation, call)
                    .await
            }
            Step::Restore => {
                let (operation, call) = (LastOperationType::Restore, ActuatorCall::Restore);
                self.reconcile_flow(&api, object, cluster.as_ref(), operation, call)
                    .await
            }
            Step::Delete => self.delete_flow(&api, object, cluster.as_ref()).await,
            Step::Migrate => self.migrate_flow(&api, object, cluster.as_ref()).await,
        };
        (label, result)
    }

    /// The object is stored but does not decode as our type: report it as gardenlet expects
    /// (consume `reconcile`, Error status with `ERR_CONFIGURATION_PROBLEM`, Warning event),
    /// through untyped API calls, and wait for a spec change. Objects of other classes or
    /// types, waiting for state or of failed shoots are left alone as usual.
    async fn report_undecodable(
        &self,
        namespace: &str,
        name: &str,
        source: serde_json::Error,
    ) -> (&'static str, Result<Next, Failure>) {
        let failure = Failure::of(&ReconcilerError::Decode {
            kind: A::Object::KIND,
            name: format!("{namespace}/{name}"),
            source,
        });
        let resource = ApiResource::erase::<A::Object>(&());
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &resource);
        let object = match api.get_opt(name).await {
            Ok(Some(object)) => object,
            Ok(None) => return ("none", Ok(Next::Done)),
            Err(source) => return ("none", Err(get_error::<A::Object>(namespace, name, source))),
        };
        let spec: Option<crate::api::DefaultSpec> = object
            .data
            .get("spec")
            .and_then(|s| serde_json::from_value(s.clone()).ok());
        let annotations = object.annotations().clone();
        let failed_shoot =
            match cluster::lookup(&self.client, self.cluster_cache(), namespace).await {
                Ok(cluster) => cluster.is_some_and(|c| c.shoot.is_failed()),
                Err(_) => false,
            };
        if spec.is_none_or(|s| !self.filter.accepts(&s))
            || operation::is_waiting_for_state(&annotations)
            || failed_shoot
        {
            return ("none", Ok(Next::Done));
        }
        let last: Option<crate::api::LastOperation> = object
            .data
            .get("status")
            .and_then(|s| s.get("lastOperation"))
            .and_then(|l| serde_json::from_value(l.clone()).ok());
        let deleting = object.metadata.deletion_timestamp.is_some();
        let planned = operation::decide(&annotations, deleting, last.as_ref());
        let operation = step_operation(planned);
        tracing::warn!(error = %failure.message, "object does not decode");
        let object = if annotations.get(ANNOTATION_OPERATION).map(String::as_str)
            == Some(OPERATION_RECONCILE)
        {
            match finalizer::remove_operation_annotation(&api, &object).await {
                Ok(Some(object)) => object,
                Ok(None) => return ("none", Ok(Next::Done)),
                Err(source) => {
                    return (
                        "reconcile",
                        Err(metadata_error("annotation", &object, source)),
                    );
                }
            }
        } else {
            object
        };
        self.write_error(&api, &object, &resource, operation, &failure)
            .await;
        (operation_label(planned), Err(failure))
    }

    /// `docs/contract.md#reconcile-and-restore`: finalizer, Processing, actuator, Succeeded
    /// (and for restore the annotation removal). `call` is a reconcile or a restore.
    async fn reconcile_flow(
        &self,
        api: &Api<A::Object>,
        object: A::Object,
        cluster: Option<&ClusterContext>,
        operation: LastOperationType,
        call: ActuatorCall,
    ) -> Result<Next, Failure> {
        let object = finalizer::add(api, &object, A::Object::FINALIZER)
            .await
            .map_err(|source| metadata_error("finalizers", &object, source))?;
        let object = match self
            .run_actuator(api, &object, cluster, operation, call, false)
            .await?
        {
            Ran::Succeeded(object) => object,
            Ran::Pending(delay) => return Ok(Next::After(delay)),
        };
        if operation == LastOperationType::Restore {
            remove_operation_annotation(api, &object).await?;
        }
        Ok(Next::Done)
    }

    /// `docs/contract.md#delete`: only with our finalizer; force deletion per the shoot
    /// annotation; our finalizer is removed after success.
    async fn delete_flow(
        &self,
        api: &Api<A::Object>,
        object: A::Object,
        cluster: Option<&ClusterContext>,
    ) -> Result<Next, Failure> {
        if !has_our_finalizer(&object) {
            return Ok(Next::Done);
        }
        let operation = LastOperationType::Delete;
        let call = if cluster.is_some_and(|c| c.shoot.needs_force_deletion()) {
            ActuatorCall::ForceDelete
        } else {
            ActuatorCall::Delete
        };
        // With only our finalizer left, removing it deletes the object: a Succeeded status
        // and a success event would describe an object gone one request later (gardenlet
        // waits for it to be gone), so neither is written.
        let vanishes = object
            .finalizers()
            .iter()
            .all(|f| f == A::Object::FINALIZER);
        let object = match self
            .run_actuator(api, &object, cluster, operation, call, vanishes)
            .await?
        {
            Ran::Succeeded(object) => object,
            Ran::Pending(delay) => return Ok(Next::After(delay)),
        };
        finalizer::remove(api, &object, A::Object::FINALIZER)
            .await
            .map_err(|source| metadata_error("finalizers", &object, source))?;
        Ok(Next::Done)
    }

    /// `docs/contract.md#migrate`: Processing, actuator, Succeeded, then the finalizers (all
    /// or ours) and the annotation.
    async fn migrate_flow(
        &self,
        api: &Api<A::Object>,
        object: A::Object,
        cluster: Option<&ClusterContext>,
    ) -> Result<Next, Failure> {
        if A::Object::MIGRATE_REQUIRES_FINALIZER && !has_our_finalizer(&object) {
            // Nothing to migrate without our finalizer. But when a run before us finished the
            // migrate and stopped (e.g. killed) between removing the finalizers and removing
            // the annotation, finish that last step, or `migrate` stays on the object.
            let migrated = object
                .default_status()
                .and_then(|s| s.last_operation.as_ref())
                .is_some_and(|l| {
                    l.type_ == LastOperationType::Migrate
                        && l.state == LastOperationState::Succeeded
                });
            if migrated {
                remove_operation_annotation(api, &object).await?;
            }
            return Ok(Next::Done);
        }
        let operation = LastOperationType::Migrate;
        let call = ActuatorCall::Migrate;
        let object = match self
            .run_actuator(api, &object, cluster, operation, call, false)
            .await?
        {
            Ran::Succeeded(object) => object,
            Ran::Pending(delay) => return Ok(Next::After(delay)),
        };
        let removed = if A::Object::MIGRATE_REMOVES_ALL_FINALIZERS {
            finalizer::remove_all(api, &object).await
        } else {
            finalizer::remove(api, &object, A::Object::FINALIZER).await
        };
        let object = match removed {
            Ok(Some(object)) => object,
            Ok(None) => return Ok(Next::Done),
            Err(source) => return Err(metadata_error("finalizers", &object, source)),
        };
        remove_operation_annotation(api, &object).await?;
        Ok(Next::Done)
    }

    /// The middle of every flow: status Processing, the actuator `call`, then status
    /// Succeeded (or Processing with the pending reason, or the failure written).
    async fn run_actuator(
        &self,
        api: &Api<A::Object>,
        object: &A::Object,
        cluster: Option<&ClusterContext>,
        operation: LastOperationType,
        call: ActuatorCall,
        vanishes: bool,
    ) -> Result<Ran<A::Object>, Failure> {
        // A run asked for by `gardener.cloud/operation` says what it waits for at info level,
        // even when an earlier run waited for the same: the one who asked sees an answer.
        let before = match call {
            ActuatorCall::Reconcile { requested: true } => None,
            _ => last_description(object).map(String::from),
        };
        let request = Request {
            object,
            cluster,
            operation,
        };
        let work = async {
            match call {
                ActuatorCall::Reconcile { .. } => self.actuator.reconcile(&request).await,
                ActuatorCall::Restore => self.actuator.restore(&request).await,
                ActuatorCall::Delete => self.actuator.delete(&request).await,
                ActuatorCall::ForceDelete => self.actuator.force_delete(&request).await,
                ActuatorCall::Migrate => self.actuator.migrate(&request).await,
            }
        };
        let mut work = std::pin::pin!(work);
        // Processing only when the work takes a while; the work is not polled while the
        // status is written, so the two never race.
        let already_processing = object
            .default_status()
            .and_then(|s| s.last_operation.as_ref())
            .is_some_and(|l| l.type_ == operation && l.state == LastOperationState::Processing);
        let (object, result) = tokio::select! {
            result = &mut work => (object.clone(), result),
            _ = tokio::time::sleep(PROCESSING_AFTER), if !already_processing => {
                let updated = self.processing(api, object, operation, None).await?;
                (updated, work.await)
            }
        };
        match self.handle(api, &object, operation, result, before).await? {
            Finished::Succeeded { .. } if vanishes => {
                tracing::info!("succeeded");
                Ok(Ran::Succeeded(object))
            }
            Finished::Succeeded { extra, event } => Ok(Ran::Succeeded(
                self.succeeded(api, &object, operation, extra, event)
                    .await?,
            )),
            Finished::Pending(delay) => Ok(Ran::Pending(delay)),
        }
    }

    /// Turns the actuator result into extra success fields, a pending delay (status already
    /// updated) or a failure (status and event already written). `before` is the
    /// `lastOperation.description` from before the run.
    async fn handle(
        &self,
        api: &Api<A::Object>,
        object: &A::Object,
        operation: LastOperationType,
        result: Result<Outcome, A::Error>,
        before: Option<String>,
    ) -> Result<Finished, Failure> {
        match result {
            Ok(Outcome::Done { status }) => Ok(Finished::Succeeded {
                extra: status,
                event: success_event_wanted(operation),
            }),
            Ok(Outcome::Unchanged) => Ok(Finished::Succeeded {
                extra: serde_json::Map::new(),
                event: false,
            }),
            Ok(Outcome::Pending {
                reason,
                retry_after,
            }) => {
                let updated = self
                    .processing(api, object, operation, Some(&reason))
                    .await?;
                // One info line when what the operation waits for changes; the polls in
                // between log at debug level.
                if before.as_deref() == last_description(&updated) {
                    tracing::debug!(%reason, ?retry_after, "still waiting");
                } else {
                    tracing::info!(%reason, ?retry_after, "waiting");
                }
                Ok(Finished::Pending(retry_after))
            }
            Err(error) => {
                let failure = Failure::of(&error);
                self.report_error(api, object, operation, &failure).await;
                Err(failure)
            }
        }
    }

    async fn processing(
        &self,
        api: &Api<A::Object>,
        object: &A::Object,
        operation: LastOperationType,
        detail: Option<&str>,
    ) -> Result<A::Object, Failure> {
        let at = status::last_update_time(Utc::now(), object.annotations());
        let body = status::processing(operation, A::Object::KIND, detail, at);
        status::patch(api, object, body)
            .await
            .map_err(|source| status_error(object, source))
    }

    async fn succeeded(
        &self,
        api: &Api<A::Object>,
        object: &A::Object,
        operation: LastOperationType,
        extra: serde_json::Map<String, serde_json::Value>,
        event: bool,
    ) -> Result<A::Object, Failure> {
        let at = status::last_update_time(Utc::now(), object.annotations());
        let body = status::success(
            operation,
            A::Object::KIND,
            object.meta().generation,
            at,
            extra,
        );
        let updated = status::patch(api, object, body)
            .await
            .map_err(|source| status_error(object, source))?;
        tracing::info!("succeeded");
        if !event {
            return Ok(updated);
        }
        self.events
            .normal(
                &object.object_ref(&()),
                success_reason(operation),
                operation.as_str(),
                format!(
                    "Successfully {}ed {}",
                    status::verb(operation),
                    A::Object::KIND
                ),
            )
            .await;
        Ok(updated)
    }

    /// Writes the Error status (a failure of that write is only logged, as upstream) and a
    /// Warning event.
    async fn report_error(
        &self,
        api: &Api<A::Object>,
        object: &A::Object,
        operation: LastOperationType,
        failure: &Failure,
    ) {
        tracing::warn!(
            error = %failure.message,
            category = failure.category,
            configuration_problem = failure.configuration_problem,
            "operation failed"
        );
        self.write_error(api, object, &(), operation, failure).await;
    }

    /// The Error status and the Warning event of `failure`, for the typed object and for one
    /// that does not decode (written through the untyped API as `DynamicObject`).
    async fn write_error<K>(
        &self,
        api: &Api<K>,
        object: &K,
        resource: &K::DynamicType,
        operation: LastOperationType,
        failure: &Failure,
    ) where
        K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
    {
        let at = status::last_update_time(Utc::now(), object.annotations());
        let body = status::error(
            operation,
            A::Object::KIND,
            &failure.message,
            &failure.codes,
            object.meta().generation,
            at,
        );
        if let Err(error) = status::patch(api, object, body).await {
            tracing::warn!(%error, "writing the error status failed");
        }
        self.events
            .warning(
                &object.object_ref(resource),
                failure_reason(operation),
                operation.as_str(),
                failure.message.clone(),
            )
            .await;
    }
}

/// Which actuator method a flow calls.
#[derive(Clone, Copy)]
enum ActuatorCall {
    /// `requested`: the run was asked for by the `reconcile` operation annotation.
    Reconcile {
        requested: bool,
    },
    Restore,
    Delete,
    ForceDelete,
    Migrate,
}

/// How [`Reconciler::run_actuator`] ended when it did not fail.
enum Ran<K> {
    /// Status Succeeded written; the object as it is now.
    Succeeded(K),
    /// Not finished: run again after the delay (status Processing written).
    Pending(Duration),
}

/// The end of an actuator call that did not fail.
enum Finished {
    /// Extra status fields; whether to publish the success event.
    Succeeded {
        extra: serde_json::Map<String, serde_json::Value>,
        event: bool,
    },
    Pending(Duration),
}

/// Whether a successful run that changed something publishes a Normal event. A first create
/// does not: its `lastOperation` (Create, Succeeded) records it, and a shoot creation — or a
/// seed full of them — would otherwise add one event per object to etcd for nothing an
/// operator acts on. Gardener's own extension reconcilers publish no success events at all
/// (`extensions/pkg/controller/containerruntime/reconciler.go` builds its status updater
/// without an event recorder); we keep them where they tell a story: a reconcile that changed
/// the shoot, a delete, migrate or restore.
fn success_event_wanted(operation: LastOperationType) -> bool {
    operation != LastOperationType::Create
}

fn success_reason(operation: LastOperationType) -> &'static str {
    match operation {
        LastOperationType::Create | LastOperationType::Reconcile => "Reconciled",
        LastOperationType::Delete => "Deleted",
        LastOperationType::Migrate => "Migrated",
        LastOperationType::Restore => "Restored",
        LastOperationType::LiveMigrate => "LiveMigrated",
    }
}

fn failure_reason(operation: LastOperationType) -> &'static str {
    match operation {
        LastOperationType::Create | LastOperationType::Reconcile => "ReconcileFailed",
        LastOperationType::Delete => "DeleteFailed",
        LastOperationType::Migrate => "MigrateFailed",
        LastOperationType::Restore => "RestoreFailed",
        LastOperationType::LiveMigrate => "LiveMigrateFailed",
    }
}

fn status_error<K: Resource>(object: &K, source: kube::Error) -> Failure {
    ReconcilerError::Status {
        name: object_name(object),
        source: Box::new(source),
    }
    .into()
}

fn metadata_error<K: Resource>(what: &'static str, object: &K, source: kube::Error) -> Failure {
    ReconcilerError::Metadata {
        what,
        name: object_name(object),
        source: Box::new(source),
    }
    .into()
}

fn get_error<K: ExtensionKind>(namespace: &str, name: &str, source: kube::Error) -> Failure {
    ReconcilerError::Get {
        kind: K::KIND,
        name: format!("{namespace}/{name}"),
        source: Box::new(source),
    }
    .into()
}

/// `status.lastOperation.description` of `object`.
fn last_description<K: ExtensionObject>(object: &K) -> Option<&str> {
    object
        .default_status()
        .and_then(|s| s.last_operation.as_ref())
        .map(|l| l.description.as_str())
}

/// Whether the object's last operation succeeded.
/// Whether `object`'s last operation succeeded in a way gardenlet's readiness check would
/// take for the run its annotations ask for ([`status::earlier_success_passes`]).
fn success_would_pass<K: ExtensionObject + kube::Resource>(object: &K) -> bool {
    object
        .default_status()
        .and_then(|s| s.last_operation.as_ref())
        .is_some_and(|l| {
            l.state == LastOperationState::Succeeded
                && status::earlier_success_passes(l.last_update_time, object.annotations())
        })
}

/// Whether `object` carries this extension's finalizer for its kind.
fn has_our_finalizer<K: ExtensionKind>(object: &K) -> bool {
    object.finalizers().iter().any(|f| f == K::FINALIZER)
}

/// Removes `gardener.cloud/operation` after a finished flow.
async fn remove_operation_annotation<K>(api: &Api<K>, object: &K) -> Result<(), Failure>
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    finalizer::remove_operation_annotation(api, object)
        .await
        .map(|_| ())
        .map_err(|source| metadata_error("annotation", object, source))
}

fn object_name<K: Resource>(object: &K) -> String {
    format!(
        "{}/{}",
        object.meta().namespace.as_deref().unwrap_or_default(),
        object.meta().name.as_deref().unwrap_or_default()
    )
}
