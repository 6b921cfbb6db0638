//! Which watch events enqueue an object (pure), per `docs/contract.md#watch-events`.
//!
//! The controller keeps a small [`Fingerprint`] of every object it has seen instead of the
//! object itself, and asks [`on_create`] (first sight, including every object listed at
//! start-up) or [`on_update`] (seen before) whether to enqueue. Class and type filters apply
//! first ([`Filter`]). Deletes never enqueue.
//!
//! Update rule: the new object must ask for work (operation annotation `reconcile`, `restore`
//! or `migrate`, or a deletion timestamp), *and* its annotations, generation or deletion state
//! must have changed. Upstream compares the status for deleting objects only; comparing the
//! fingerprint for all updates keeps our own writes during a `migrate`/`restore` (status,
//! finalizers) from re-triggering the object while its annotation is still set, which would
//! run a needless second reconcile right after the restore.
//!
//! In ignore-operation-annotation mode (`--ignore-operation-annotation`) creates always enqueue
//! and updates enqueue on a generation change or a deletion, like upstream's
//! generation-changed predicate.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use kube::api::ObjectMeta;

use crate::api::constants::{
    ANNOTATION_OPERATION, OPERATION_MIGRATE, OPERATION_RECONCILE, OPERATION_RESTORE,
};
use crate::api::{DefaultSpec, LastOperation, LastOperationState};

/// Class and type filter of one controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// Accepted classes (`--extension-classes`); an object without class counts as `shoot`.
    pub classes: Vec<String>,
    /// Accepted `spec.type` values.
    pub types: Vec<String>,
    /// Upstream's ignore-operation-annotation mode.
    pub ignore_operation_annotation: bool,
}

impl Filter {
    /// Whether the object's class and type are ours.
    pub fn accepts(&self, spec: &DefaultSpec) -> bool {
        self.classes.iter().any(|c| c == spec.class_or_default())
            && self.types.contains(&spec.type_)
    }
}

/// What the update rule compares between two versions of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    generation: Option<i64>,
    deleting: bool,
    annotations: u64,
}

impl Fingerprint {
    /// Fingerprint of an object's metadata.
    pub fn of(meta: &ObjectMeta) -> Self {
        Fingerprint {
            generation: meta.generation,
            deleting: meta.deletion_timestamp.is_some(),
            annotations: hash_of(&meta.annotations),
        }
    }
}

fn hash_of<T: Hash>(value: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

fn asks_for_work(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|a| a.get(ANNOTATION_OPERATION))
        .is_some_and(|v| {
            v == OPERATION_RECONCILE || v == OPERATION_RESTORE || v == OPERATION_MIGRATE
        })
}

/// Create rule: an operation annotation, a deletion timestamp, or a last operation that is
/// missing or not `Succeeded` (so unfinished work resumes after a restart).
pub fn on_create(filter: &Filter, meta: &ObjectMeta, last: Option<&LastOperation>) -> bool {
    if filter.ignore_operation_annotation {
        return true;
    }
    asks_for_work(meta.annotations.as_ref())
        || meta.deletion_timestamp.is_some()
        || last.is_none_or(|l| l.state != LastOperationState::Succeeded)
}

/// Run-time rule: whether a queued run finds nothing asked of the object — no operation
/// annotation, no deletion timestamp, and a last operation that succeeded for the current
/// generation. Such a queue entry is stale: it was added for a change that the run in flight
/// at that moment already handled (e.g. the `restore` annotation arriving while the run that
/// consumed it was reading the object). Running it would overwrite `lastOperation` (a
/// `Restore` becomes a `Reconcile`) for nothing. In ignore-operation-annotation mode nothing
/// is stale: Cluster changes enqueue objects that ask for nothing themselves.
pub fn nothing_asked(
    filter: &Filter,
    meta: &ObjectMeta,
    last: Option<&LastOperation>,
    observed_generation: Option<i64>,
) -> bool {
    !filter.ignore_operation_annotation
        && !asks_for_work(meta.annotations.as_ref())
        && meta.deletion_timestamp.is_none()
        && last.is_some_and(|l| l.state == LastOperationState::Succeeded)
        && observed_generation == meta.generation
}

/// Update rule; see the module documentation.
pub fn on_update(filter: &Filter, old: &Fingerprint, meta: &ObjectMeta) -> bool {
    let new = Fingerprint::of(meta);
    if filter.ignore_operation_annotation {
        return new.generation != old.generation || (new.deleting && !old.deleting);
    }
    let wants_work = asks_for_work(meta.annotations.as_ref()) || new.deleting;
    wants_work && new != *old
}

/// Whether an update changed the spec (a new generation) of an object that does not ask for
/// work, so that nothing runs until someone sets the operation annotation: worth one log line,
/// since a hand edit otherwise seems to be ignored. Never in ignore-operation-annotation mode,
/// where the generation change itself enqueues.
pub fn waits_for_annotation(filter: &Filter, old: &Fingerprint, meta: &ObjectMeta) -> bool {
    !filter.ignore_operation_annotation
        && meta.generation != old.generation
        && !asks_for_work(meta.annotations.as_ref())
        && meta.deletion_timestamp.is_none()
}

#[cfg(test)]
mod tests;
