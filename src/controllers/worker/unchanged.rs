//! Is an object as we would apply it already in place? (pure) — so a reconcile writes only the
//! class secrets, classes and deployments that differ from what the API server holds, where
//! Gardener's generic actuator applies all of them on every reconcile (docs/benchmarks.md,
//! "Worker"). The I/O that lists the existing objects is in [`super::reconcile`].
//!
//! An object is unchanged when every field we would apply is there with the same value
//! ([`covers`]): fields others added (status, `uid`, other managers' labels) do not matter,
//! and a field we set to its zero value (`false`, `0`, `""`, empty list or map) may be absent,
//! because machine-controller-manager's Go types drop zero values (`omitempty`) when it
//! updates the object, and read an absent field as zero. Anything else that differs — a value
//! someone changed, a label someone removed — makes the object changed, and it is applied
//! (with force, taking the fields back).

use serde::Serialize;
use serde_json::Value;

/// Whether `existing` holds every field of `desired` (`metadata.resourceVersion` aside: it is
/// a precondition of our write, not content). Objects that do not serialise count as changed.
pub fn unchanged<K: Serialize>(existing: &K, desired: &K) -> bool {
    let (Ok(existing), Ok(mut desired)) = (
        serde_json::to_value(existing),
        serde_json::to_value(desired),
    ) else {
        return false;
    };
    if let Some(metadata) = desired.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("resourceVersion");
    }
    covers(&existing, &desired)
}

/// Whether `existing` contains `desired`: objects field by field (recursively), everything
/// else equal; a zero `desired` value matches an absent one.
pub fn covers(existing: &Value, desired: &Value) -> bool {
    match (existing, desired) {
        (Value::Object(existing), Value::Object(desired)) => {
            desired.iter().all(|(key, wanted)| match existing.get(key) {
                Some(found) => covers(found, wanted),
                None => is_zero(wanted),
            })
        }
        _ => existing == desired,
    }
}

/// The values Go's `omitempty` drops (and `null`, which we never mean as content).
fn is_zero(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.values().all(is_zero),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_others_added_do_not_matter_and_ours_must_match() {
        let desired = json!({"metadata": {"name": "a", "labels": {"l": "v"}}, "spec": {"x": 1}});
        let existing = json!({
            "metadata": {"name": "a", "uid": "u", "labels": {"l": "v", "other": "w"}},
            "spec": {"x": 1, "defaulted": true},
            "status": {"ready": true}
        });
        assert!(covers(&existing, &desired));
        let changed =
            json!({"metadata": {"name": "a", "labels": {"other": "w"}}, "spec": {"x": 1}});
        assert!(!covers(&changed, &desired), "our label removed");
        let changed = json!({"metadata": {"name": "a", "labels": {"l": "v"}}, "spec": {"x": 2}});
        assert!(!covers(&changed, &desired), "our value changed");
    }

    #[test]
    fn zero_values_may_be_absent_as_go_omits_them() {
        let desired = json!({"spec": {"replicas": 0, "paused": false, "name": "", "taints": [],
                                      "labels": {}, "template": {"spec": {"n": 0}}}});
        assert!(covers(&json!({"spec": {}}), &desired));
        assert!(!covers(&json!({"spec": {"replicas": 1}}), &desired));
        assert!(!covers(
            &json!({"spec": {}}),
            &json!({"spec": {"replicas": 1}})
        ));
    }

    #[test]
    fn lists_must_be_equal_and_the_resource_version_is_not_content() {
        let desired = json!({"metadata": {"name": "a", "resourceVersion": "1"},
                             "spec": {"zones": ["a", "b"]}});
        let existing = json!({"metadata": {"name": "a", "resourceVersion": "9"},
                              "spec": {"zones": ["a", "b"]}});
        assert!(unchanged(&existing, &desired));
        let reordered = json!({"metadata": {"name": "a"}, "spec": {"zones": ["b", "a"]}});
        assert!(!unchanged(&reordered, &desired));
    }
}
