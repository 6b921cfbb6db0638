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
        annotations: annotation.map(|v| [(ANNOTATION_OPERATION.to_string(), v.to_string())].into()),
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
