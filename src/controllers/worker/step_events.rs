//! The steps of a Worker operation ("machine classes deployed", "waiting for machines", ...):
//! a log line each, and an event for those worth one, on top of the generic reconciler's
//! event per failure.
//!
//! Routine steps, which every reconcile or delete of every Worker goes through (classes
//! applied, status written, rolled out, machine objects deleted), are logged only
//! ([`StepEvents::routine`]): the Worker's `lastOperation` records how the operation went,
//! gardener's own Worker controller publishes no events for them, and an event each would be
//! several API requests per Worker and operation (docs/benchmarks.md, "Worker"). Steps out of
//! the ordinary publish a Normal or Warning event ([`StepEvents::normal`],
//! [`StepEvents::warning`]): hibernation, unwanted objects deleted, machine-controller-manager
//! restarted, a wait that lasts ([`super::SLOW_WAIT`]).
//!
//! A wait is a series of runs a few seconds apart that repeat the same steps, so a step is
//! logged and published once per series: [`StepEvents`] remembers what it reported for a
//! Worker until the operation finishes or fails ([`StepEvents::forget`]). Publishing is best
//! effort, like [`EventPublisher`] itself.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use kube::Resource;

use crate::api::{LastOperationType, Worker};
use crate::extension::events::EventPublisher;

/// namespace/name of a Worker.
type WorkerKey = (String, String);
/// Whether it was published (not only logged), reason and note of a step.
type Published = HashSet<(bool, String, String)>;

/// Step event publisher with per-series de-duplication.
pub struct StepEvents {
    publisher: EventPublisher,
    published: Mutex<HashMap<WorkerKey, Published>>,
}

impl std::fmt::Debug for StepEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepEvents").finish_non_exhaustive()
    }
}

fn key(worker: &Worker) -> WorkerKey {
    (
        worker.metadata.namespace.clone().unwrap_or_default(),
        worker.metadata.name.clone().unwrap_or_default(),
    )
}

impl StepEvents {
    /// Publishes through `publisher`.
    pub fn new(publisher: EventPublisher) -> Self {
        StepEvents {
            publisher,
            published: Mutex::default(),
        }
    }

    fn first_time(&self, worker: &Worker, event: bool, reason: &str, note: &str) -> bool {
        let mut published = self.published.lock().unwrap_or_else(|p| p.into_inner());
        published.entry(key(worker)).or_default().insert((
            event,
            reason.to_string(),
            note.to_string(),
        ))
    }

    /// A routine step: logged at info level the first time in this series, at debug level
    /// on the repeats; no event.
    pub fn routine(&self, worker: &Worker, reason: &str, note: String) {
        if self.first_time(worker, false, reason, &note) {
            tracing::info!(reason, %note, "step");
        } else {
            tracing::debug!(reason, %note, "step (unchanged)");
        }
    }

    /// A Normal event for a step of `operation`, unless the same one was published in this
    /// series. Logged at info level the first time, at debug level on the repeats of a wait
    /// (one line per change, not one per poll).
    pub async fn normal(
        &self,
        worker: &Worker,
        operation: LastOperationType,
        reason: &str,
        note: String,
    ) {
        self.publish(worker, operation, reason, note, false).await;
    }

    /// A Warning event for a step, with the same de-duplication as [`Self::normal`].
    pub async fn warning(
        &self,
        worker: &Worker,
        operation: LastOperationType,
        reason: &str,
        note: String,
    ) {
        self.publish(worker, operation, reason, note, true).await;
    }

    async fn publish(
        &self,
        worker: &Worker,
        operation: LastOperationType,
        reason: &str,
        note: String,
        warning: bool,
    ) {
        if !self.first_time(worker, true, reason, &note) {
            tracing::debug!(reason, %note, "step (unchanged)");
            return;
        }
        let regarding = worker.object_ref(&());
        if warning {
            tracing::warn!(reason, %note, "step");
            self.publisher
                .warning(&regarding, reason, operation.as_str(), note)
                .await;
        } else {
            tracing::info!(reason, %note, "step");
            self.publisher
                .normal(&regarding, reason, operation.as_str(), note)
                .await;
        }
    }

    /// Forgets the series of `worker` (its operation finished or failed).
    pub fn forget(&self, worker: &Worker) {
        self.published
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key(worker));
    }
}
