//! Status writes of the generic reconciler, exactly as `docs/contract.md#status-writes`:
//! Processing (progress 1), Error (progress 50, `lastError` with codes, observedGeneration),
//! Succeeded (progress 100, `lastError: null`, observedGeneration).
//!
//! The patch bodies are built by pure functions; [`patch`] sends one as a JSON merge patch to
//! the `/status` subresource, without a resourceVersion precondition (as upstream).

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::api::constants::ANNOTATION_TIMESTAMP;
use crate::api::{ErrorCode, LastOperationType};

/// The time to write as `lastUpdateTime`: now, but never earlier than the object's
/// `gardener.cloud/timestamp` truncated to whole seconds, so gardenlet's readiness check
/// (`docs/contract.md#readiness`, rule 5) holds even if our clock is behind gardenlet's.
pub fn last_update_time(
    now: DateTime<Utc>,
    annotations: &BTreeMap<String, String>,
) -> DateTime<Utc> {
    let now = now.with_nanosecond_truncated().unwrap_or(now);
    match requested_at(annotations) {
        Some(requested) if requested > now => requested,
        _ => now,
    }
}

/// `gardener.cloud/timestamp` truncated to whole seconds, as gardenlet's readiness check reads
/// it; `None` when absent or not RFC 3339.
fn requested_at(annotations: &BTreeMap<String, String>) -> Option<DateTime<Utc>> {
    annotations
        .get(ANNOTATION_TIMESTAMP)
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
        .and_then(|t| t.with_nanosecond_truncated())
}

/// Whether an earlier success written at `last_update_time` would pass gardenlet's readiness
/// check for the run the annotations ask for, once the `reconcile` annotation is gone: it
/// would unless the `gardener.cloud/timestamp` says the request came in a later second
/// (`docs/contract.md#readiness`, rule 5). Then the run needs no Processing write to keep
/// gardenlet waiting.
pub fn earlier_success_passes(
    last_update_time: DateTime<Utc>,
    annotations: &BTreeMap<String, String>,
) -> bool {
    requested_at(annotations).is_none_or(|requested| last_update_time >= requested)
}

trait TruncateNanos: Sized {
    fn with_nanosecond_truncated(self) -> Option<Self>;
}

impl TruncateNanos for DateTime<Utc> {
    fn with_nanosecond_truncated(self) -> Option<Self> {
        use chrono::Timelike;
        self.with_nanosecond(0)
    }
}

fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The verb of an operation for descriptions: "reconciling", "deleting", ...
pub fn verb(operation: LastOperationType) -> &'static str {
    match operation {
        LastOperationType::Create | LastOperationType::Reconcile => "reconcil",
        LastOperationType::Delete => "delet",
        LastOperationType::Migrate => "migrat",
        LastOperationType::Restore => "restor",
        LastOperationType::LiveMigrate => "live-migrat",
    }
}

/// `lastOperation` with state Processing, progress 1. With a `detail` (what a run that did
/// not fail waits for) `lastError` is cleared too: the operation has moved past the error
/// it reported before, and a stale error next to "waiting for ..." misleads. At the start
/// of a run (no detail) an earlier `lastError` stays until the run succeeds or fails anew.
pub fn processing(
    operation: LastOperationType,
    kind: &str,
    detail: Option<&str>,
    at: DateTime<Utc>,
) -> Value {
    let mut description = format!("{}ing the {kind}", capitalize(verb(operation)));
    if let Some(detail) = detail {
        description.push_str(": ");
        description.push_str(detail);
    }
    let mut status = json!({
        "lastOperation": {
            "type": operation.as_str(),
            "state": "Processing",
            "progress": 1,
            "description": description,
            "lastUpdateTime": time(at),
        }
    });
    if detail.is_some() {
        status["lastError"] = Value::Null;
    }
    status
}

/// `lastOperation` Error + `lastError` + `observedGeneration`. The description is
/// "Error `<verb>`ing `<kind>`: `<error>`" with the first letter upper-cased.
pub fn error(
    operation: LastOperationType,
    kind: &str,
    message: &str,
    codes: &[ErrorCode],
    generation: Option<i64>,
    at: DateTime<Utc>,
) -> Value {
    let description = capitalize(&format!("Error {}ing {kind}: {message}", verb(operation)));
    let mut last_error = json!({
        "description": description,
        "lastUpdateTime": time(at),
    });
    if !codes.is_empty() {
        last_error["codes"] = json!(codes.iter().map(|c| c.as_str()).collect::<Vec<_>>());
    }
    json!({
        "lastOperation": {
            "type": operation.as_str(),
            "state": "Error",
            "progress": 50,
            "description": description,
            "lastUpdateTime": time(at),
        },
        "lastError": last_error,
        "observedGeneration": generation,
    })
}

/// `lastOperation` Succeeded, `lastError: null`, `observedGeneration`, plus `extra` fields an
/// actuator wants written in the same patch (e.g. an OSC's `cloudConfig`).
pub fn success(
    operation: LastOperationType,
    kind: &str,
    generation: Option<i64>,
    at: DateTime<Utc>,
    extra: Map<String, Value>,
) -> Value {
    let mut status = json!({
        "lastOperation": {
            "type": operation.as_str(),
            "state": "Succeeded",
            "progress": 100,
            "description": format!("Successfully {}ed {kind}", verb(operation)),
            "lastUpdateTime": time(at),
        },
        "lastError": null,
        "observedGeneration": generation,
    });
    if let Value::Object(fields) = &mut status {
        fields.extend(extra);
    }
    status
}

fn capitalize(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Sends `{"status": status}` as a merge patch to `/status` and returns the updated object.
pub async fn patch<K>(api: &Api<K>, object: &K, status: Value) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    api.patch_status(
        &object.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn waiting_clears_last_error_and_starting_keeps_it() {
        let now = at("2026-11-30T08:00:00Z");
        let waiting = processing(
            LastOperationType::Reconcile,
            "Worker",
            Some("waiting for machines"),
            now,
        );
        assert_eq!(waiting.get("lastError"), Some(&Value::Null));
        assert_eq!(
            waiting["lastOperation"]["description"],
            "Reconciling the Worker: waiting for machines"
        );
        let starting = processing(LastOperationType::Reconcile, "Worker", None, now);
        assert_eq!(starting.get("lastError"), None);
    }

    #[test]
    fn last_update_time_is_now_truncated_without_annotation() {
        let now = at("2026-11-30T08:00:00.900Z");
        assert_eq!(
            last_update_time(now, &BTreeMap::new()),
            at("2026-11-30T08:00:00Z")
        );
    }

    #[test]
    fn last_update_time_is_never_earlier_than_the_timestamp_annotation() {
        let annotations: BTreeMap<String, String> = [(
            ANNOTATION_TIMESTAMP.to_string(),
            "2026-11-30T08:00:05.123456789Z".to_string(),
        )]
        .into();
        // Our clock is behind gardenlet's: use gardenlet's time, truncated to seconds.
        let behind = Utc.with_ymd_and_hms(2026, 11, 30, 8, 0, 3).unwrap();
        assert_eq!(
            last_update_time(behind, &annotations),
            at("2026-11-30T08:00:05Z")
        );
        let ahead = Utc.with_ymd_and_hms(2026, 11, 30, 8, 0, 9).unwrap();
        assert_eq!(last_update_time(ahead, &annotations), ahead);
    }

    #[test]
    fn processing_status_has_progress_1() {
        let v = processing(
            LastOperationType::Create,
            "ContainerRuntime",
            None,
            at("2026-11-30T08:00:00Z"),
        );
        assert_eq!(v["lastOperation"]["state"], "Processing");
        assert_eq!(v["lastOperation"]["progress"], 1);
        assert_eq!(v["lastOperation"]["type"], "Create");
        assert_eq!(
            v["lastOperation"]["description"],
            "Reconciling the ContainerRuntime"
        );
        assert_eq!(v["lastOperation"]["lastUpdateTime"], "2026-11-30T08:00:00Z");
        assert!(
            v.get("lastError").is_none(),
            "processing leaves lastError unchanged"
        );
        assert!(v.get("observedGeneration").is_none());
    }

    #[test]
    fn error_status_carries_codes_and_generation() {
        let v = error(
            LastOperationType::Reconcile,
            "ContainerRuntime",
            "providerConfig: unknown flag",
            &[ErrorCode::ConfigurationProblem],
            Some(3),
            at("2026-11-30T08:00:00Z"),
        );
        assert_eq!(v["lastOperation"]["state"], "Error");
        assert_eq!(v["lastOperation"]["progress"], 50);
        assert_eq!(v["observedGeneration"], 3);
        assert_eq!(v["lastError"]["codes"][0], "ERR_CONFIGURATION_PROBLEM");
        assert_eq!(
            v["lastError"]["description"],
            "Error reconciling ContainerRuntime: providerConfig: unknown flag"
        );
        let no_codes = error(
            LastOperationType::Delete,
            "Worker",
            "x",
            &[],
            Some(1),
            at("2026-11-30T08:00:00Z"),
        );
        assert!(no_codes["lastError"].get("codes").is_none());
        assert_eq!(
            no_codes["lastError"]["description"],
            "Error deleting Worker: x"
        );
    }

    #[test]
    fn success_status_clears_last_error_and_merges_extras() {
        let mut extra = Map::new();
        extra.insert("extensionUnits".into(), json!([]));
        let v = success(
            LastOperationType::Restore,
            "OperatingSystemConfig",
            Some(2),
            at("2026-11-30T08:00:00Z"),
            extra,
        );
        assert_eq!(v["lastOperation"]["state"], "Succeeded");
        assert_eq!(v["lastOperation"]["progress"], 100);
        assert_eq!(
            v["lastOperation"]["description"],
            "Successfully restored OperatingSystemConfig"
        );
        assert!(v["lastError"].is_null() && v.get("lastError").is_some());
        assert_eq!(v["observedGeneration"], 2);
        assert_eq!(v["extensionUnits"], json!([]));
    }
}
