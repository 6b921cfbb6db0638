//! Which operation Gardener asks of an extension object right now (pure).
//!
//! Ports the precedence of Gardener's `ComputeOperationType` and the "already migrated" rule
//! (`docs/contract.md#operation-type`, `#dispatch`). The reconciler calls [`decide`] once per
//! run, after the
//! `wait-for-state` check and the `reconcile`-annotation removal, and dispatches on the result.

use std::collections::BTreeMap;

use crate::api::constants::{
    ANNOTATION_OPERATION, OPERATION_MIGRATE, OPERATION_RESTORE, OPERATION_WAIT_FOR_STATE,
};
use crate::api::{LastOperation, LastOperationState, LastOperationType};

/// What the reconciler does with an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Run the reconcile flow, reporting the given type (`Create` or `Reconcile`).
    Reconcile(LastOperationType),
    /// Run the delete flow.
    Delete,
    /// Run the migrate flow (even if a deletion timestamp is set).
    Migrate,
    /// Run the restore flow.
    Restore,
    /// Do nothing: the object was migrated away and is not asked to migrate or restore.
    SkipMigrated,
}

/// The operation type per Gardener's `ComputeOperationType`: migrate annotation, deletion,
/// restore annotation, no last operation (`Create`), an unfinished Create/Migrate/Restore
/// keeps its type, otherwise `Reconcile`.
pub fn operation_type(
    annotations: &BTreeMap<String, String>,
    deleting: bool,
    last: Option<&LastOperation>,
) -> LastOperationType {
    let annotation = annotations.get(ANNOTATION_OPERATION).map(String::as_str);
    if annotation == Some(OPERATION_MIGRATE) {
        return LastOperationType::Migrate;
    }
    if deleting {
        return LastOperationType::Delete;
    }
    if annotation == Some(OPERATION_RESTORE) {
        return LastOperationType::Restore;
    }
    let Some(last) = last else {
        return LastOperationType::Create;
    };
    let unfinished = last.state != LastOperationState::Succeeded;
    match last.type_ {
        LastOperationType::Create if unfinished => LastOperationType::Create,
        LastOperationType::Migrate if unfinished => LastOperationType::Migrate,
        LastOperationType::Restore if unfinished => LastOperationType::Restore,
        _ => LastOperationType::Reconcile,
    }
}

/// Whether the last operation was a successful Migrate (`IsMigrated`).
pub fn is_migrated(last: Option<&LastOperation>) -> bool {
    last.is_some_and(|l| {
        l.type_ == LastOperationType::Migrate && l.state == LastOperationState::Succeeded
    })
}

/// Whether the object carries `gardener.cloud/operation=wait-for-state`; such objects are
/// left alone entirely (no status write, no finalizer change), even when being deleted.
pub fn is_waiting_for_state(annotations: &BTreeMap<String, String>) -> bool {
    annotations.get(ANNOTATION_OPERATION).map(String::as_str) == Some(OPERATION_WAIT_FOR_STATE)
}

/// The step for an object (`docs/contract.md#dispatch`): skip migrated objects unless asked
/// to migrate or restore; migrate before delete; delete before restore; otherwise reconcile.
pub fn decide(
    annotations: &BTreeMap<String, String>,
    deleting: bool,
    last: Option<&LastOperation>,
) -> Step {
    let operation = operation_type(annotations, deleting, last);
    let asked_to_move = matches!(
        operation,
        LastOperationType::Migrate | LastOperationType::Restore
    );
    if is_migrated(last) && !asked_to_move {
        return Step::SkipMigrated;
    }
    if operation == LastOperationType::Migrate {
        return Step::Migrate;
    }
    if deleting {
        return Step::Delete;
    }
    if operation == LastOperationType::Restore {
        return Step::Restore;
    }
    Step::Reconcile(operation)
}

#[cfg(test)]
mod tests {
    use super::*;
    use LastOperationState::*;
    use LastOperationType::*;
    use chrono::Utc;

    fn last(type_: LastOperationType, state: LastOperationState) -> Option<LastOperation> {
        Some(LastOperation {
            type_,
            state,
            progress: 0,
            description: String::new(),
            last_update_time: Utc::now(),
        })
    }

    /// name, annotation, deleting, last operation, expected.
    type Row<T> = (
        &'static str,
        Option<&'static str>,
        bool,
        Option<LastOperation>,
        T,
    );

    fn annotated(value: Option<&str>) -> BTreeMap<String, String> {
        value
            .map(|v| [(ANNOTATION_OPERATION.to_string(), v.to_string())].into())
            .unwrap_or_default()
    }

    /// One row per rule of the operation type precedence (in order), then the combinations
    /// that matter.
    #[test]
    fn operation_type_table() {
        let rows: Vec<Row<LastOperationType>> = vec![
            (
                "1 migrate annotation wins",
                Some("migrate"),
                false,
                None,
                Migrate,
            ),
            (
                "1 migrate annotation beats deletion",
                Some("migrate"),
                true,
                last(Reconcile, Succeeded),
                Migrate,
            ),
            ("2 deletion", None, true, last(Reconcile, Succeeded), Delete),
            (
                "2 deletion beats restore annotation",
                Some("restore"),
                true,
                None,
                Delete,
            ),
            (
                "2 deletion with reconcile annotation",
                Some("reconcile"),
                true,
                None,
                Delete,
            ),
            (
                "3 restore annotation",
                Some("restore"),
                false,
                last(Reconcile, Succeeded),
                Restore,
            ),
            (
                "3 restore annotation beats unfinished create",
                Some("restore"),
                false,
                last(Create, Error),
                Restore,
            ),
            ("4 no last operation", None, false, None, Create),
            (
                "4 no last operation, reconcile annotation",
                Some("reconcile"),
                false,
                None,
                Create,
            ),
            (
                "5 create processing",
                None,
                false,
                last(Create, Processing),
                Create,
            ),
            ("5 create error", None, false, last(Create, Error), Create),
            (
                "5 create succeeded",
                None,
                false,
                last(Create, Succeeded),
                Reconcile,
            ),
            (
                "6 migrate error",
                None,
                false,
                last(Migrate, Error),
                Migrate,
            ),
            (
                "6 migrate processing",
                None,
                false,
                last(Migrate, Processing),
                Migrate,
            ),
            (
                "6 migrate succeeded",
                None,
                false,
                last(Migrate, Succeeded),
                Reconcile,
            ),
            (
                "7 restore error",
                None,
                false,
                last(Restore, Error),
                Restore,
            ),
            (
                "7 restore succeeded",
                None,
                false,
                last(Restore, Succeeded),
                Reconcile,
            ),
            (
                "8 reconcile succeeded",
                None,
                false,
                last(Reconcile, Succeeded),
                Reconcile,
            ),
            (
                "8 reconcile error",
                None,
                false,
                last(Reconcile, Error),
                Reconcile,
            ),
            (
                "8 delete error (deletion gone)",
                None,
                false,
                last(Delete, Error),
                Reconcile,
            ),
            (
                "8 wait-for-state is not an operation",
                Some("wait-for-state"),
                false,
                last(Reconcile, Succeeded),
                Reconcile,
            ),
            (
                "8 unknown annotation value",
                Some("keepalive"),
                false,
                last(Reconcile, Succeeded),
                Reconcile,
            ),
        ];
        for (name, annotation, deleting, last_op, expected) in rows {
            let got = operation_type(&annotated(annotation), deleting, last_op.as_ref());
            assert_eq!(got, expected, "row {name:?}");
        }
    }

    #[test]
    fn decide_table_including_the_already_migrated_rule() {
        let migrated = last(Migrate, Succeeded);
        let rows: Vec<Row<Step>> = vec![
            ("new object", None, false, None, Step::Reconcile(Create)),
            (
                "reconcile",
                Some("reconcile"),
                false,
                last(Reconcile, Succeeded),
                Step::Reconcile(Reconcile),
            ),
            (
                "delete",
                None,
                true,
                last(Reconcile, Succeeded),
                Step::Delete,
            ),
            (
                "migrate while deleting",
                Some("migrate"),
                true,
                None,
                Step::Migrate,
            ),
            ("restore", Some("restore"), false, None, Step::Restore),
            (
                "unfinished restore continues",
                None,
                false,
                last(Restore, Error),
                Step::Restore,
            ),
            (
                "unfinished migrate continues",
                None,
                false,
                last(Migrate, Error),
                Step::Migrate,
            ),
            (
                "migrated: reconcile skipped",
                Some("reconcile"),
                false,
                migrated.clone(),
                Step::SkipMigrated,
            ),
            (
                "migrated: no annotation skipped",
                None,
                false,
                migrated.clone(),
                Step::SkipMigrated,
            ),
            (
                "migrated: delete skipped",
                None,
                true,
                migrated.clone(),
                Step::SkipMigrated,
            ),
            (
                "migrated: migrate again",
                Some("migrate"),
                false,
                migrated.clone(),
                Step::Migrate,
            ),
            (
                "migrated: restore",
                Some("restore"),
                false,
                migrated.clone(),
                Step::Restore,
            ),
            (
                "migrated: restore while deleting is a delete → skipped",
                Some("restore"),
                true,
                migrated,
                Step::SkipMigrated,
            ),
        ];
        for (name, annotation, deleting, last_op, expected) in rows {
            assert_eq!(
                decide(&annotated(annotation), deleting, last_op.as_ref()),
                expected,
                "row {name:?}"
            );
        }
    }

    #[test]
    fn wait_for_state_is_detected_only_for_its_exact_value() {
        assert!(is_waiting_for_state(&annotated(Some("wait-for-state"))));
        assert!(!is_waiting_for_state(&annotated(Some("reconcile"))));
        assert!(!is_waiting_for_state(&annotated(None)));
    }
}
