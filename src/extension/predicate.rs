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
mod tests {
    use super::*;
    use crate::api::{LastOperationState::*, LastOperationType};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn filter() -> Filter {
        Filter {
            classes: vec!["shoot".into()],
            types: vec!["gvisor".into()],
            ignore_operation_annotation: false,
        }
    }

    fn meta(annotation: Option<&str>, deleting: bool, generation: i64) -> ObjectMeta {
        ObjectMeta {
            annotations: annotation
                .map(|v| [(ANNOTATION_OPERATION.to_string(), v.to_string())].into()),
            deletion_timestamp: deleting.then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
            generation: Some(generation),
            ..Default::default()
        }
    }

    fn last(state: LastOperationState) -> Option<LastOperation> {
        Some(LastOperation {
            type_: LastOperationType::Reconcile,
            state,
            progress: 100,
            description: String::new(),
            last_update_time: chrono::Utc::now(),
        })
    }

    #[test]
    fn class_and_type_filter() {
        let spec = |type_: &str, class: Option<&str>| DefaultSpec {
            type_: type_.into(),
            class: class.map(Into::into),
            provider_config: None,
        };
        assert!(filter().accepts(&spec("gvisor", None)));
        assert!(filter().accepts(&spec("gvisor", Some(""))));
        assert!(filter().accepts(&spec("gvisor", Some("shoot"))));
        assert!(!filter().accepts(&spec("gvisor", Some("seed"))));
        assert!(!filter().accepts(&spec("kata", None)));
    }

    #[test]
    fn create_rule_table() {
        let rows = [
            (
                "reconcile annotation",
                meta(Some("reconcile"), false, 1),
                last(Succeeded),
                true,
            ),
            (
                "restore annotation",
                meta(Some("restore"), false, 1),
                last(Succeeded),
                true,
            ),
            (
                "migrate annotation",
                meta(Some("migrate"), false, 1),
                last(Succeeded),
                true,
            ),
            ("deleting", meta(None, true, 1), last(Succeeded), true),
            ("no status yet", meta(None, false, 1), None, true),
            ("last op failed", meta(None, false, 1), last(Error), true),
            (
                "last op processing",
                meta(None, false, 1),
                last(Processing),
                true,
            ),
            (
                "wait-for-state, succeeded",
                meta(Some("wait-for-state"), false, 1),
                last(Succeeded),
                false,
            ),
            (
                "nothing to do",
                meta(None, false, 1),
                last(Succeeded),
                false,
            ),
        ];
        for (name, m, l, expected) in rows {
            assert_eq!(on_create(&filter(), &m, l.as_ref()), expected, "{name}");
        }
    }

    #[test]
    fn update_rule_table() {
        let plain = Fingerprint::of(&meta(None, false, 1));
        let annotated = Fingerprint::of(&meta(Some("reconcile"), false, 1));
        let migrating = Fingerprint::of(&meta(Some("migrate"), false, 1));
        let deleting = Fingerprint::of(&meta(None, true, 1));
        let rows = [
            (
                "annotation added",
                &plain,
                meta(Some("reconcile"), false, 1),
                true,
            ),
            (
                "spec change without annotation",
                &plain,
                meta(None, false, 2),
                false,
            ),
            (
                "spec change with annotation",
                &annotated,
                meta(Some("reconcile"), false, 2),
                true,
            ),
            (
                "status-only write while annotated",
                &migrating,
                meta(Some("migrate"), false, 1),
                false,
            ),
            (
                "status-only write, plain",
                &plain,
                meta(None, false, 1),
                false,
            ),
            ("deletion starts", &plain, meta(None, true, 1), true),
            (
                "status-only write while deleting",
                &deleting,
                meta(None, true, 1),
                false,
            ),
            (
                "our annotation removal",
                &annotated,
                meta(None, false, 1),
                false,
            ),
            (
                "wait-for-state set",
                &plain,
                meta(Some("wait-for-state"), false, 1),
                false,
            ),
            (
                "our finalizer added during a restore",
                &Fingerprint::of(&meta(Some("restore"), false, 1)),
                ObjectMeta {
                    finalizers: Some(vec!["x".into()]),
                    ..meta(Some("restore"), false, 1)
                },
                false,
            ),
            (
                "restore after wait-for-state",
                &Fingerprint::of(&meta(Some("wait-for-state"), false, 1)),
                meta(Some("restore"), false, 1),
                true,
            ),
        ];
        for (name, old, new, expected) in rows {
            assert_eq!(on_update(&filter(), old, &new), expected, "{name}");
        }
    }

    #[test]
    fn ignore_operation_annotation_mode_uses_generation() {
        let mode = Filter {
            ignore_operation_annotation: true,
            ..filter()
        };
        let old = Fingerprint::of(&meta(None, false, 1));
        assert!(on_create(
            &mode,
            &meta(None, false, 1),
            last(Succeeded).as_ref()
        ));
        assert!(on_update(&mode, &old, &meta(None, false, 2)));
        assert!(!on_update(&mode, &old, &meta(Some("reconcile"), false, 1)));
        assert!(on_update(&mode, &old, &meta(None, true, 1)));
    }

    /// Regression (found by `test/resilience_operator_kill.rs`): an object created with
    /// `wait-for-state` and annotated `restore` at once was run twice — the second, stale
    /// entry ran a Reconcile that replaced the succeeded Restore in `lastOperation`.
    #[test]
    fn a_stale_entry_asks_for_nothing() {
        let rows = [
            // (name, annotation, deleting, generation, last state, observed, stale)
            (
                "restore done, entry left over",
                None,
                false,
                1,
                Some(Succeeded),
                Some(1),
                true,
            ),
            (
                "restore asked",
                Some("restore"),
                false,
                1,
                Some(Succeeded),
                Some(1),
                false,
            ),
            (
                "reconcile asked",
                Some("reconcile"),
                false,
                1,
                Some(Succeeded),
                Some(1),
                false,
            ),
            (
                "migrate asked",
                Some("migrate"),
                false,
                1,
                Some(Succeeded),
                Some(1),
                false,
            ),
            ("deleting", None, true, 1, Some(Succeeded), Some(1), false),
            (
                "last operation failed",
                None,
                false,
                1,
                Some(Error),
                Some(1),
                false,
            ),
            (
                "last operation processing",
                None,
                false,
                1,
                Some(Processing),
                Some(1),
                false,
            ),
            ("never reconciled", None, false, 1, None, None, false),
            (
                "new generation",
                None,
                false,
                2,
                Some(Succeeded),
                Some(1),
                false,
            ),
        ];
        for (name, annotation, deleting, generation, state, observed, stale) in rows {
            let last = state.and_then(last);
            assert_eq!(
                nothing_asked(
                    &filter(),
                    &meta(annotation, deleting, generation),
                    last.as_ref(),
                    observed
                ),
                stale,
                "{name}"
            );
        }
        let mode = Filter {
            ignore_operation_annotation: true,
            ..filter()
        };
        assert!(!nothing_asked(
            &mode,
            &meta(None, false, 1),
            last(Succeeded).as_ref(),
            Some(1)
        ));
    }
    #[test]
    fn a_spec_change_without_annotation_waits_for_it() {
        let old = Fingerprint::of(&meta(None, false, 1));
        assert!(waits_for_annotation(&filter(), &old, &meta(None, false, 2)));
        assert!(
            !waits_for_annotation(&filter(), &old, &meta(None, false, 1)),
            "same generation"
        );
        assert!(
            !waits_for_annotation(&filter(), &old, &meta(Some("reconcile"), false, 2)),
            "asks for work"
        );
        assert!(
            !waits_for_annotation(&filter(), &old, &meta(None, true, 2)),
            "deleting"
        );
        let ignoring = Filter {
            ignore_operation_annotation: true,
            ..filter()
        };
        assert!(!waits_for_annotation(
            &ignoring,
            &old,
            &meta(None, false, 2)
        ));
    }
}
