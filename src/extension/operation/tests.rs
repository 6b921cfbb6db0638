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
