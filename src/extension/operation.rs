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
mod tests;
