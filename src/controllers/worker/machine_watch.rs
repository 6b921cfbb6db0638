//! Wakes the Workers of a namespace when machine-controller-manager takes a machine of an
//! in-place pool past `CandidateForUpdate` (GEP-31): for a `ManualInPlaceUpdate` pool that
//! happens when the user selects nodes, possibly long after the Worker succeeded, and the
//! Worker must then follow the update and write the pool's new hash
//! ([`super::in_place::status_map`]). Upstream's Worker controller watches Machines for the
//! same transition (`extensions/pkg/controller/worker/controller.go`,
//! `MachineConditionChangedPredicate`).
//!
//! Differences, on purpose: the transition alone decides (upstream also reads the machine's
//! deployment to keep to manual pools — an extra GET per event; for an automatic in-place
//! pool the Worker is following the rollout anyway, so a wake-up costs one cached run that
//! writes nothing); a machine that shows up already past `CandidateForUpdate` wakes too, and
//! the initial list wakes nobody (a restart does not reconcile every Worker of the seed; a
//! selection made while the operator was down is picked up by the next Worker reconcile).
//!
//! [`progressed`] is the pure rule; [`namespaces_to_wake`] is the watch. The watch reads
//! machines as untyped objects, so one machine our types cannot decode does not stop it.

use std::collections::HashMap;

use futures::{Stream, StreamExt};
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;

use crate::api::constants::{CONDITION_IN_PLACE_UPDATE, REASON_CANDIDATE_FOR_UPDATE};
use crate::api::machine::Machine;
use crate::extension::watch_error::WatchErrorLog;

/// Whether a machine whose in-place reason went from `old` to `new` (`None`: no
/// `InPlaceUpdate` condition, or a machine not seen before) wakes its namespace's Workers:
/// when it leaves `CandidateForUpdate`, or shows up already past it.
pub fn progressed(old: Option<&str>, new: Option<&str>) -> bool {
    match new {
        Some(new) if new != REASON_CANDIDATE_FOR_UPDATE => {
            old.is_none_or(|old| old == REASON_CANDIDATE_FOR_UPDATE)
        }
        _ => false,
    }
}

/// The reason of a machine's `InPlaceUpdate` condition, read from the untyped object.
fn in_place_reason(object: &DynamicObject) -> Option<String> {
    object
        .data
        .get("status")?
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(CONDITION_IN_PLACE_UPDATE))?
        .get("reason")?
        .as_str()
        .map(str::to_string)
}

/// Namespaces whose Workers should run, from a watch on all Machines (see the module docs).
pub fn namespaces_to_wake(client: Client) -> impl Stream<Item = String> + Send + 'static {
    let resource = ApiResource::erase::<Machine>(&());
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let mut reasons: HashMap<(String, String), String> = HashMap::new();
    let mut errors = WatchErrorLog::new("Machine", &resource);
    watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .filter_map(move |event| {
            if let Ok(event) = &event {
                errors.observed(event);
            }
            let wake = match event {
                Ok(Event::Init) => {
                    reasons.clear();
                    None
                }
                Ok(Event::InitApply(machine)) => {
                    if let Some(reason) = in_place_reason(&machine) {
                        reasons.insert(key(&machine), reason);
                    }
                    None
                }
                // `Apply` only follows `InitDone`: a (re)list fills the table quietly.
                Ok(Event::InitDone) => None,
                Ok(Event::Apply(machine)) => {
                    let key = key(&machine);
                    let new = in_place_reason(&machine);
                    let old = match &new {
                        Some(reason) => reasons.insert(key.clone(), reason.clone()),
                        None => reasons.remove(&key),
                    };
                    progressed(old.as_deref(), new.as_deref()).then_some(key.0)
                }
                Ok(Event::Delete(machine)) => {
                    reasons.remove(&key(&machine));
                    None
                }
                Err(error) => {
                    errors.error(&error);
                    None
                }
            };
            futures::future::ready(wake)
        })
}

fn key(machine: &DynamicObject) -> (String, String) {
    (machine.namespace().unwrap_or_default(), machine.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaving_candidate_for_update_wakes_and_nothing_else_does() {
        let candidate = Some(REASON_CANDIDATE_FOR_UPDATE);
        assert!(progressed(candidate, Some("SelectedForUpdate")));
        assert!(progressed(candidate, Some("ReadyForUpdate")));
        assert!(
            progressed(None, Some("SelectedForUpdate")),
            "seen first past candidate"
        );
        assert!(!progressed(None, candidate));
        assert!(!progressed(candidate, candidate));
        assert!(!progressed(
            Some("SelectedForUpdate"),
            Some("ReadyForUpdate")
        ));
        assert!(!progressed(
            Some("ReadyForUpdate"),
            Some("UpdateSuccessful")
        ));
        assert!(!progressed(candidate, None));
        assert!(!progressed(None, None));
    }

    #[test]
    fn the_reason_is_read_from_the_untyped_machine() {
        let machine: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "Machine",
            "metadata": {"name": "m", "namespace": "shoot--a--b"},
            "status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
                {"type": "InPlaceUpdate", "status": "True", "reason": "SelectedForUpdate"},
            ]},
        }))
        .unwrap();
        assert_eq!(
            in_place_reason(&machine).as_deref(),
            Some("SelectedForUpdate")
        );
        let bare: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "Machine",
            "metadata": {"name": "m"},
            "status": {"conditions": "not a list"},
        }))
        .unwrap();
        assert_eq!(in_place_reason(&bare), None);
    }
}
