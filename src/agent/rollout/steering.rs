//! Rollout settings and a pause carried from the seed (pure;
//! `docs/agent.md#steered-from-the-seed`): the operator writes the steering annotations
//! ([`crate::api::constants::ROLLOUT_STEERING_ANNOTATIONS`]) on the pool's Lease
//! `kube-system/<secret name>`, the one object Gardener's node-agent authorizer lets every
//! agent of the pool read whoever ships the node-agent Secret. [`Steering`] is what the agent
//! last saw there ([`crate::agent::rollout::steering_watch`] keeps it); [`merged`] lays it
//! over the Secret's own annotations (the Lease wins: it is the seed's current word, a Secret
//! shipped by gardenlet carries none); [`pause_holds`] says whether a pause keeps this node
//! from starting an apply.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;

use crate::api::constants::{ANNOTATION_ROLLOUT_PAUSED, ROLLOUT_STEERING_ANNOTATIONS};

/// What the agent knows of the pool Lease's steering annotations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Steering {
    /// Whether the Lease was read or watched at least once (before that nothing is known,
    /// and a reconcile reads it itself).
    pub known: bool,
    /// The Lease's steering annotations (nothing else of it).
    pub annotations: BTreeMap<String, String>,
}

impl Steering {
    /// The steering of `lease` as read (`None`: there is no Lease: nothing carried).
    pub fn of(lease: Option<&Lease>) -> Self {
        let annotations = lease
            .and_then(|l| l.metadata.annotations.as_ref())
            .map(|all| {
                all.iter()
                    .filter(|(key, _)| ROLLOUT_STEERING_ANNOTATIONS.contains(&key.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        Steering {
            known: true,
            annotations,
        }
    }

    /// The pause the Lease carries (its value), if any.
    pub fn paused(&self) -> Option<&str> {
        self.annotations
            .get(ANNOTATION_ROLLOUT_PAUSED)
            .map(String::as_str)
            .filter(|value| !value.trim().is_empty())
    }
}

/// The Secret's annotations with the Lease's steering annotations laid over them: what the
/// rollout's [`crate::agent::rollout::rules::policy`] reads.
pub fn merged(
    secret: Option<&BTreeMap<String, String>>,
    steering: &Steering,
) -> BTreeMap<String, String> {
    let mut merged = secret.cloned().unwrap_or_default();
    merged.extend(
        steering
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    merged
}

/// Whether a pause keeps this node from applying the secret's content now: it does unless
/// nothing runs on the node yet (`first_apply`: a new node joins whatever the pause, as
/// without an OSC it is no node) or an apply of this content is under way (`under_way`: the
/// journal has work left for it, or its disruptive change holds a slot) — those finish.
pub fn pause_holds(paused: bool, first_apply: bool, under_way: bool) -> bool {
    paused && !first_apply && !under_way
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::constants::ANNOTATION_ROLLOUT_BUDGET;
    use kube::api::ObjectMeta;

    fn lease(pairs: &[(&str, &str)]) -> Lease {
        Lease {
            metadata: ObjectMeta {
                annotations: Some(
                    pairs
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            spec: None,
        }
    }

    #[test]
    fn only_steering_keys_are_taken_and_the_lease_wins_over_the_secret() {
        let steering = Steering::of(Some(&lease(&[
            (ANNOTATION_ROLLOUT_BUDGET, "3"),
            ("node.extensions.gardener.cloud/rollout-slot-1", "{}"),
        ])));
        assert!(steering.known);
        assert_eq!(steering.annotations.len(), 1);
        let secret = BTreeMap::from([
            (ANNOTATION_ROLLOUT_BUDGET.to_string(), "1".to_string()),
            ("checksum/data-script".to_string(), "abc".to_string()),
        ]);
        let merged = merged(Some(&secret), &steering);
        assert_eq!(merged[ANNOTATION_ROLLOUT_BUDGET], "3");
        assert_eq!(merged["checksum/data-script"], "abc");
        assert_eq!(super::merged(None, &Steering::default()), BTreeMap::new());
    }

    #[test]
    fn a_pause_needs_a_value_and_no_lease_is_known_and_empty() {
        assert_eq!(
            Steering::of(Some(&lease(&[(ANNOTATION_ROLLOUT_PAUSED, "fixing")]))).paused(),
            Some("fixing")
        );
        assert_eq!(
            Steering::of(Some(&lease(&[(ANNOTATION_ROLLOUT_PAUSED, " ")]))).paused(),
            None
        );
        let none = Steering::of(None);
        assert!(none.known && none.annotations.is_empty() && none.paused().is_none());
        assert!(!Steering::default().known);
    }

    #[test]
    fn a_pause_holds_back_only_nodes_that_run_something_and_have_not_started() {
        assert!(pause_holds(true, false, false));
        assert!(!pause_holds(true, true, false), "a new node joins");
        assert!(
            !pause_holds(true, false, true),
            "an apply under way finishes"
        );
        assert!(!pause_holds(false, false, false));
    }
}
