//! The rollout settings the seed carries to a pool's node agents (pure;
//! `docs/agent.md#steered-from-the-seed`): what the pool's Lease `kube-system/<key>` in the
//! shoot should carry ([`wanted`]) and the patch that brings it there ([`lease_patch`]). The
//! Lease is the one object of the pool that Gardener's node-agent authorizer lets every node
//! agent of the pool read, whoever ships the node-agent Secret (we or gardenlet), so the
//! budget, the other rollout settings and a pause reach the agents in every
//! `--node-agent-secrets` mode. The rollout watch ([`super::step`]) does the I/O.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::api::constants::{
    ANNOTATION_ROLLOUT_BUDGET, ANNOTATION_ROLLOUT_PAUSED, ROLLOUT_STEERING_ANNOTATIONS,
};

/// The Lease annotations the pool's agents should see: every steering annotation set on the
/// `reconcile` OSC (a landscape operator's word: a budget, disruptive units, timeouts, a
/// pause), and the budget from the Shoot (`budget`, [`super::super::nodeagent::rollout_budget`])
/// where the OSC sets none. Values are taken as they are: the agents judge them (a bad budget
/// counts as 1 and is reported on the Node). Empty values count as unset.
pub fn wanted(
    osc_annotations: Option<&BTreeMap<String, String>>,
    budget: Option<u32>,
) -> BTreeMap<String, String> {
    let mut wanted: BTreeMap<String, String> = ROLLOUT_STEERING_ANNOTATIONS
        .iter()
        .filter_map(|key| {
            let value = osc_annotations?.get(*key)?;
            (!value.trim().is_empty()).then(|| (key.to_string(), value.clone()))
        })
        .collect();
    if let Some(budget) = budget {
        wanted
            .entry(ANNOTATION_ROLLOUT_BUDGET.to_string())
            .or_insert_with(|| budget.to_string());
    }
    wanted
}

/// The pause asked for in `wanted` (its value), if any.
pub fn paused(wanted: &BTreeMap<String, String>) -> Option<&str> {
    wanted.get(ANNOTATION_ROLLOUT_PAUSED).map(String::as_str)
}

/// The JSON merge patch that makes the steering annotations of a Lease with `current`
/// annotations equal `wanted` (a value set, a key not wanted removed with `null`); other
/// annotations — the rollout's slots — and the Lease's `spec` are not touched. `None`: the
/// Lease carries `wanted` already.
pub fn lease_patch(
    current: Option<&BTreeMap<String, String>>,
    wanted: &BTreeMap<String, String>,
) -> Option<Value> {
    let mut changes = Map::new();
    for key in ROLLOUT_STEERING_ANNOTATIONS {
        let now = current.and_then(|c| c.get(key));
        match (now, wanted.get(key)) {
            (now, Some(value)) if now != Some(value) => {
                changes.insert(key.to_string(), Value::String(value.clone()));
            }
            (Some(_), None) => {
                changes.insert(key.to_string(), Value::Null);
            }
            _ => {}
        }
    }
    (!changes.is_empty()).then(|| json!({"metadata": {"annotations": changes}}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::constants::{ANNOTATION_DISRUPTIVE_UNITS, ANNOTATION_ROLLOUT_HEALTH_TIMEOUT};

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_shoots_budget_unless_the_osc_sets_one_and_only_steering_keys() {
        let osc = map(&[
            (ANNOTATION_ROLLOUT_PAUSED, "until the fix"),
            (ANNOTATION_DISRUPTIVE_UNITS, "app.service"),
            ("gardener.cloud/operation", "reconcile"),
            (ANNOTATION_ROLLOUT_HEALTH_TIMEOUT, "  "),
        ]);
        let wanted = wanted(Some(&osc), Some(3));
        assert_eq!(
            wanted,
            map(&[
                (ANNOTATION_ROLLOUT_PAUSED, "until the fix"),
                (ANNOTATION_DISRUPTIVE_UNITS, "app.service"),
                (ANNOTATION_ROLLOUT_BUDGET, "3"),
            ])
        );
        assert_eq!(paused(&wanted), Some("until the fix"));
        let own = map(&[(ANNOTATION_ROLLOUT_BUDGET, "1")]);
        assert_eq!(
            super::wanted(Some(&own), Some(3))[ANNOTATION_ROLLOUT_BUDGET],
            "1"
        );
        assert!(super::wanted(None, None).is_empty());
        assert_eq!(paused(&super::wanted(None, Some(2))), None);
    }

    #[test]
    fn the_patch_sets_and_removes_steering_keys_and_leaves_slots_alone() {
        let current = map(&[
            (ANNOTATION_ROLLOUT_BUDGET, "2"),
            (ANNOTATION_ROLLOUT_PAUSED, "yes"),
            ("node.extensions.gardener.cloud/rollout-slot-1", "{}"),
        ]);
        let wanted = map(&[(ANNOTATION_ROLLOUT_BUDGET, "3")]);
        assert_eq!(
            lease_patch(Some(&current), &wanted),
            Some(json!({"metadata": {"annotations": {
                ANNOTATION_ROLLOUT_BUDGET: "3",
                ANNOTATION_ROLLOUT_PAUSED: null,
            }}}))
        );
        let same = map(&[
            (ANNOTATION_ROLLOUT_BUDGET, "3"),
            ("node.extensions.gardener.cloud/rollout-slot-1", "{}"),
        ]);
        assert_eq!(lease_patch(Some(&same), &wanted), None);
        assert_eq!(lease_patch(None, &BTreeMap::new()), None);
        assert_eq!(
            lease_patch(None, &wanted),
            Some(json!({"metadata": {"annotations": {ANNOTATION_ROLLOUT_BUDGET: "3"}}}))
        );
    }
}
