//! Disruptive OSC rollout (`docs/agent.md#disruptive-rollout`): the decisions between the
//! computed change set ([`crate::agent::pipeline::changes`]) and the apply ([`crate::agent::pipeline::apply`]) in the agent's
//! reconcile ([`crate::agent::controller`]). Everything here is pure; the controller does the I/O.
//!
//! - [`policy`]: the rollout is on when the OSC secret carries [`ANNOTATION_BUDGET`] (our
//!   operator writes it where it ships the secret; by hand elsewhere), with the budget, the
//!   units marked disruptive ([`ANNOTATION_DISRUPTIVE_UNITS`]) and the two timeouts;
//! - [`classify`]: a change set is **disruptive** when it restarts, stops or removes
//!   `kubelet.service`, `containerd.service` or a marked unit, or rewrites containerd's
//!   config; **quiet** otherwise (applied at once, as without the rollout);
//! - [`slot_count`]: how many slots there are: the budget, at most [`MAX_BUDGET`], bounded by
//!   the pool's size (the slots themselves live in one Lease, [`crate::agent::rollout::slots`],
//!   slot 0 being GNA's serial lock);
//! - [`ready_pods`], [`not_ready_again`], [`judge`]: when a node that applied a disruptive
//!   change is healthy again (release the slot), still settling (hold), or failed (stop);
//! - [`RolloutState`]: what is persisted on the node so a restarted agent keeps holding or
//!   stays stopped.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

use crate::agent::pipeline::journal::Journal;
use crate::api::operatingsystemconfig::UnitCommand;

/// OSC secret annotation that turns the rollout on, with the number of slots (an integer
/// `1..=`[`MAX_BUDGET`]; anything else counts as 1 and is reported).
pub const ANNOTATION_BUDGET: &str = crate::api::constants::ANNOTATION_ROLLOUT_BUDGET;
/// The most slots a pool has, whatever the annotation says: every slot is an annotation of
/// the one slot Lease, read by every waiting agent on each look (every
/// [`crate::agent::rollout::slots::POLL_INTERVAL`]), so the Lease stays small.
pub const MAX_BUDGET: u32 = crate::api::constants::MAX_ROLLOUT_BUDGET;
/// OSC secret annotation: more units whose restart is disruptive, comma-separated names.
pub const ANNOTATION_DISRUPTIVE_UNITS: &str = crate::api::constants::ANNOTATION_DISRUPTIVE_UNITS;
/// OSC secret annotation: seconds a node has after a disruptive apply to be Ready with kubelet
/// answering before the rollout stops ([`DEFAULT_HEALTH_TIMEOUT`]).
pub const ANNOTATION_HEALTH_TIMEOUT: &str =
    crate::api::constants::ANNOTATION_ROLLOUT_HEALTH_TIMEOUT;
/// OSC secret annotation: seconds the pods that were ready before the change are waited for
/// ([`DEFAULT_SETTLE_TIMEOUT`]); after that the slot is released anyway.
pub const ANNOTATION_SETTLE_TIMEOUT: &str =
    crate::api::constants::ANNOTATION_ROLLOUT_SETTLE_TIMEOUT;
/// Node annotation an operator sets to resume a stopped rollout on that node (any value);
/// the agent removes it when it acts on it.
pub const ANNOTATION_RESUME: &str = "node.extensions.gardener.cloud/rollout-resume";

/// The Node condition the rollout writes.
pub use crate::api::constants::NODE_CONDITION_DISRUPTIVE_ROLLOUT as CONDITION_TYPE;
/// Reason: the last disruptive change was applied and the node is healthy again.
pub const REASON_HEALTHY: &str = "Healthy";
/// Reason: applying a disruptive change failed; the rollout is stopped.
pub const REASON_APPLY_FAILED: &str = "ApplyFailed";
/// Reason: the node was not healthy within the bound after a disruptive change; stopped.
pub const REASON_NOT_HEALTHY: &str = "NotHealthy";

/// Event reason when the rollout stops on this node (Warning).
pub const EVENT_STOPPED: &str = "DisruptiveRolloutStopped";
/// Event reason when the slot is released after the node became healthy (Normal).
pub const EVENT_RELEASED: &str = "DisruptiveRolloutSlotReleased";
/// Event reason when a stopped rollout resumes (Normal).
pub const EVENT_RESUMED: &str = "DisruptiveRolloutResumed";
/// Event reason when the budget annotation is not an integer `1..=`[`MAX_BUDGET`] (Warning).
pub const EVENT_INVALID_BUDGET: &str = "DisruptiveRolloutBudgetInvalid";

/// Units whose restart is always disruptive.
pub const ALWAYS_DISRUPTIVE: [&str; 2] = ["kubelet.service", "containerd.service"];
/// Default of [`ANNOTATION_HEALTH_TIMEOUT`].
pub const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(300);
/// Default of [`ANNOTATION_SETTLE_TIMEOUT`].
pub const DEFAULT_SETTLE_TIMEOUT: Duration = Duration::from_secs(180);
/// The node is held at least this long after the apply: a restarted kubelet resets its pods'
/// readiness a moment after it starts, and the Node's status lags behind too.
pub const MIN_HOLD: Duration = Duration::from_secs(10);
/// How often a held node is checked.
pub const HEALTH_POLL: Duration = Duration::from_secs(2);
/// How often a stopped node renews its slot (the Lease lasts 600 s).
pub const RENEW_INTERVAL: Duration = Duration::from_secs(60);

/// The rollout settings of an OSC secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Number of slots asked for, `1..=`[`MAX_BUDGET`] (the pool's size bounds it further:
    /// [`slot_count`]).
    pub budget: u32,
    /// The budget annotation's value when it is out of range (then `budget` is 1).
    pub invalid_budget: Option<String>,
    /// Units besides [`ALWAYS_DISRUPTIVE`] whose restart is disruptive.
    pub marked_units: BTreeSet<String>,
    /// See [`ANNOTATION_HEALTH_TIMEOUT`].
    pub health_timeout: Duration,
    /// See [`ANNOTATION_SETTLE_TIMEOUT`].
    pub settle_timeout: Duration,
}

/// The rollout settings a drift repair goes by where neither the secret nor the seed turns
/// the rollout on: one slot, the default timeouts, no marked units.
pub fn drift_policy() -> Policy {
    Policy {
        budget: 1,
        invalid_budget: None,
        marked_units: BTreeSet::new(),
        health_timeout: DEFAULT_HEALTH_TIMEOUT,
        settle_timeout: DEFAULT_SETTLE_TIMEOUT,
    }
}

/// The rollout settings from the OSC secret's annotations; `None`: the rollout is off (no
/// [`ANNOTATION_BUDGET`]). A budget that is not an integer `1..=`[`MAX_BUDGET`] is 1 (and
/// kept in `invalid_budget` to be reported); a timeout that is not a positive number of
/// seconds is its default.
pub fn policy(annotations: Option<&BTreeMap<String, String>>) -> Option<Policy> {
    let annotations = annotations?;
    let value = annotations.get(ANNOTATION_BUDGET)?;
    let (budget, invalid_budget) = match value.trim().parse::<u32>() {
        Ok(budget) if (1..=MAX_BUDGET).contains(&budget) => (budget, None),
        _ => (1, Some(value.clone())),
    };
    let seconds = |key: &str, default: Duration| {
        annotations
            .get(key)
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|s| *s > 0)
            .map_or(default, Duration::from_secs)
    };
    Some(Policy {
        budget,
        invalid_budget,
        marked_units: annotations
            .get(ANNOTATION_DISRUPTIVE_UNITS)
            .map(|list| {
                list.split(',')
                    .map(str::trim)
                    .filter(|u| !u.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        health_timeout: seconds(ANNOTATION_HEALTH_TIMEOUT, DEFAULT_HEALTH_TIMEOUT),
        settle_timeout: seconds(ANNOTATION_SETTLE_TIMEOUT, DEFAULT_SETTLE_TIMEOUT),
    })
}

/// The note of the [`EVENT_INVALID_BUDGET`] event for the annotation value `value`.
pub fn invalid_budget_note(value: &str) -> String {
    format!(
        "annotation {ANNOTATION_BUDGET} is {value:?}, not an integer from 1 to {MAX_BUDGET}; the rollout uses 1 slot"
    )
}

/// How many slots the pool has: the policy's `budget`, bounded by the pool's size when it is
/// known (`pool_nodes`: how many Nodes the pool has, counted up to `budget`; a slot more than
/// nodes would never be taken). At least 1. Pure.
pub fn slot_count(budget: u32, pool_nodes: Option<usize>) -> u32 {
    let budget = budget.clamp(1, MAX_BUDGET);
    match pool_nodes {
        Some(nodes) => budget.min(u32::try_from(nodes).unwrap_or(u32::MAX)).max(1),
        None => budget,
    }
}

/// What kind of change an apply makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Needs no slot.
    Quiet,
    /// Needs a slot; why (e.g. `restart kubelet.service`).
    Disruptive(Vec<String>),
}

/// Classifies the work in `journal` (see the module docs). Only commands still in the journal
/// count, so a resumed apply whose kubelet restart is done is quiet.
pub fn classify(journal: &Journal, marked: &BTreeSet<String>) -> Change {
    let disruptive = |unit: &str| ALWAYS_DISRUPTIVE.contains(&unit) || marked.contains(unit);
    let mut why: Vec<String> = journal
        .units
        .commands
        .iter()
        .filter(|c| disruptive(&c.name))
        .map(|c| {
            let verb = match c.command {
                UnitCommand::Stop => "stop",
                UnitCommand::Start | UnitCommand::Restart => "restart",
            };
            format!("{verb} {}", c.name)
        })
        .collect();
    why.extend(
        journal
            .units
            .deleted
            .iter()
            .filter(|u| disruptive(&u.name))
            .map(|u| format!("remove {}", u.name)),
    );
    if journal.containerd.config_file_changed
        && !journal
            .units
            .commands
            .iter()
            .any(|c| c.name == ALWAYS_DISRUPTIVE[1])
    {
        why.push(format!("restart {} (config)", ALWAYS_DISRUPTIVE[1]));
    }
    if why.is_empty() {
        Change::Quiet
    } else {
        Change::Disruptive(why)
    }
}

/// The kind of an apply on a node, from its change set ([`classify`]) and where the node is: a
/// first apply (`first_apply`: no `last-applied-osc.yaml`) disrupts nothing, no workload runs
/// before it; a node that still holds a slot from an earlier change (`holds_slot`: a state file
/// is there) keeps it for whatever it applies, so a fix is health-checked before the slot goes.
pub fn change_for(
    journal: &Journal,
    marked: &BTreeSet<String>,
    first_apply: bool,
    holds_slot: bool,
) -> Change {
    match classify(journal, marked) {
        Change::Quiet if holds_slot => {
            Change::Disruptive(vec!["completing an earlier disruptive change".into()])
        }
        _ if first_apply && !holds_slot => Change::Quiet,
        change => change,
    }
}

/// `namespace/name` of the pods in `pods` whose `Ready` condition is `True`.
pub fn ready_pods(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter()
        .filter(|pod| is_ready(pod))
        .map(pod_key)
        .collect()
}

/// Those of `before` (ready before the change) that exist in `now` and are not ready. A pod
/// that is gone (deleted, evicted) is not waited for.
pub fn not_ready_again(before: &BTreeSet<String>, now: &[Pod]) -> Vec<String> {
    now.iter()
        .filter(|pod| !is_ready(pod))
        .map(pod_key)
        .filter(|key| before.contains(key))
        .collect()
}

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

/// How a held node looks at one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// The Node's `Ready` condition is `True`.
    pub node_ready: bool,
    /// kubelet answers on `/healthz`.
    pub kubelet_healthy: bool,
    /// Pods ready before the change that are not ready now ([`not_ready_again`]).
    pub pods_not_ready: Vec<String>,
}

/// What to do with a held slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Not yet: check again after [`HEALTH_POLL`].
    Hold,
    /// Healthy: release the slot. `unsettled` lists pods still not ready when the settle
    /// timeout released the node anyway.
    Release {
        /// Pods that did not become ready again within the settle timeout.
        unsettled: Vec<String>,
    },
    /// Not healthy within the bound: stop (keep the slot), with the reason.
    Fail(String),
}

/// Judges a node `elapsed` after its disruptive apply finished. Pure.
pub fn judge(elapsed: Duration, policy: &Policy, health: &Health) -> Verdict {
    if elapsed < MIN_HOLD {
        return Verdict::Hold;
    }
    if !health.node_ready || !health.kubelet_healthy {
        if elapsed < policy.health_timeout {
            return Verdict::Hold;
        }
        let mut what = Vec::new();
        if !health.node_ready {
            what.push("the Node is not Ready");
        }
        if !health.kubelet_healthy {
            what.push("kubelet does not answer on /healthz");
        }
        return Verdict::Fail(format!(
            "{} {}s after the change",
            what.join(" and "),
            policy.health_timeout.as_secs()
        ));
    }
    if health.pods_not_ready.is_empty() {
        return Verdict::Release {
            unsettled: Vec::new(),
        };
    }
    if elapsed >= policy.settle_timeout {
        return Verdict::Release {
            unsettled: health.pods_not_ready.clone(),
        };
    }
    Verdict::Hold
}

/// Where a node is in a disruptive rollout (`rollout-state.json`). Absent: not in one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutState {
    /// The checksum of the OSC being rolled out.
    pub checksum: String,
    /// The phase.
    pub phase: Phase,
    /// Unix seconds when the phase began (for `Holding`: when the apply finished).
    pub since: i64,
    /// `namespace/name` of the pods on the node that were ready before the change.
    #[serde(default)]
    pub pods_ready_before: BTreeSet<String>,
    /// Why it stopped (`Stopped` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What went wrong (`Stopped` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Phase of [`RolloutState`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub enum Phase {
    /// The slot is held and the apply runs (or a restart interrupted it).
    Applying,
    /// Applied; the slot is held until the node is healthy again.
    Holding,
    /// Failed; the slot is kept until the rollout is resumed.
    Stopped,
}

impl RolloutState {
    /// Parses the state file; anything that does not parse is no state.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice(bytes).ok()
    }

    /// The state file's content.
    pub fn to_bytes(&self) -> Vec<u8> {
        // A struct of strings, integers and a set of strings always serialises.
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// This state stopped with `reason` and `message` at `now`.
    pub fn stopped(mut self, reason: &str, message: String, now: i64) -> Self {
        self.phase = Phase::Stopped;
        self.since = now;
        self.reason = Some(reason.to_string());
        self.message = Some(message);
        self
    }
}

/// What a reconcile does with the state it found, for the secret's `checksum`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resume {
    /// No state, or one for another checksum (a new OSC resumes a stopped rollout): go on
    /// as usual (classify, take a slot when disruptive).
    Fresh,
    /// Applying this checksum was interrupted: take the slot (ours) and apply again.
    Continue,
    /// Holding for health: check it.
    Hold,
    /// Stopped for this checksum and not resumed: do nothing but keep the slot.
    Stay,
    /// Stopped for this checksum and the Node carries [`ANNOTATION_RESUME`]: apply again.
    Resumed,
}

/// Whether the Node's `annotations` ask for a resume ([`ANNOTATION_RESUME`], any value).
pub fn resume_asked(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations.is_some_and(|a| a.contains_key(ANNOTATION_RESUME))
}

/// Pure: see [`Resume`].
pub fn resume(state: Option<&RolloutState>, checksum: &str, resume_asked: bool) -> Resume {
    let Some(state) = state.filter(|s| s.checksum == checksum) else {
        return Resume::Fresh;
    };
    match state.phase {
        Phase::Applying => Resume::Continue,
        Phase::Holding => Resume::Hold,
        Phase::Stopped if resume_asked => Resume::Resumed,
        Phase::Stopped => Resume::Stay,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::pipeline::journal::{CommandEntry, ContainerdChanges, UnitChanges};
    use crate::agent::testing::unit;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use kube::api::ObjectMeta;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn journal(commands: &[(&str, UnitCommand)], deleted: &[&str], containerd: bool) -> Journal {
        Journal {
            units: UnitChanges {
                commands: commands
                    .iter()
                    .map(|(name, command)| CommandEntry {
                        name: name.to_string(),
                        command: *command,
                    })
                    .collect(),
                deleted: deleted.iter().map(|name| unit(name)).collect(),
                ..UnitChanges::default()
            },
            containerd: ContainerdChanges {
                config_file_changed: containerd,
                ..ContainerdChanges::default()
            },
            ..Journal::default()
        }
    }

    fn pod(name: &str, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        }
    }

    #[test]
    fn the_budget_annotation_turns_the_rollout_on() {
        assert_eq!(policy(None), None);
        assert_eq!(policy(Some(&annotations(&[]))), None);
        let p = policy(Some(&annotations(&[(ANNOTATION_BUDGET, "3")]))).unwrap();
        assert_eq!(p.budget, 3);
        assert!(p.marked_units.is_empty());
        assert_eq!(p.health_timeout, DEFAULT_HEALTH_TIMEOUT);
        assert_eq!(p.settle_timeout, DEFAULT_SETTLE_TIMEOUT);
        assert_eq!(p.invalid_budget, None);
        // Issue #26 item 2: "4294967295" made every agent allocate a name per slot and abort.
        for bad in [
            "0",
            "-1",
            "many",
            "",
            "33",
            "4294967295",
            "99999999999999999999",
        ] {
            let p = policy(Some(&annotations(&[(ANNOTATION_BUDGET, bad)]))).unwrap();
            assert_eq!(p.budget, 1, "{bad:?}");
            assert_eq!(p.invalid_budget.as_deref(), Some(bad));
        }
        let p = policy(Some(&annotations(&[(ANNOTATION_BUDGET, "32")]))).unwrap();
        assert_eq!((p.budget, p.invalid_budget), (MAX_BUDGET, None));
        assert_eq!(
            invalid_budget_note("4294967295"),
            "annotation node.extensions.gardener.cloud/rollout-budget is \"4294967295\", not an integer from 1 to 32; the rollout uses 1 slot"
        );
        let p = policy(Some(&annotations(&[
            (ANNOTATION_BUDGET, " 2 "),
            (ANNOTATION_DISRUPTIVE_UNITS, "a.service, b.service,,"),
            (ANNOTATION_HEALTH_TIMEOUT, "60"),
            (ANNOTATION_SETTLE_TIMEOUT, "zero"),
        ])))
        .unwrap();
        assert_eq!(p.budget, 2);
        assert_eq!(
            p.marked_units,
            ["a.service".to_string(), "b.service".to_string()].into()
        );
        assert_eq!(p.health_timeout, Duration::from_secs(60));
        assert_eq!(p.settle_timeout, DEFAULT_SETTLE_TIMEOUT);
    }

    #[test]
    fn the_pools_size_and_the_cap_bound_the_slots() {
        assert_eq!(slot_count(3, None), 3);
        assert_eq!(slot_count(3, Some(10)), 3);
        assert_eq!(slot_count(3, Some(2)), 2);
        assert_eq!(slot_count(3, Some(0)), 1);
        assert_eq!(slot_count(0, None), 1);
        assert_eq!(slot_count(u32::MAX, None), MAX_BUDGET);
        assert_eq!(slot_count(u32::MAX, Some(usize::MAX)), MAX_BUDGET);
    }

    #[test]
    fn kubelet_containerd_marked_units_and_containerd_config_are_disruptive() {
        let none = BTreeSet::new();
        let marked: BTreeSet<String> = ["app.service".to_string()].into();
        let r = UnitCommand::Restart;
        assert_eq!(classify(&Journal::default(), &none), Change::Quiet);
        assert_eq!(
            classify(
                &journal(&[("other.service", r)], &["x.service"], false),
                &none
            ),
            Change::Quiet
        );
        assert_eq!(
            classify(&journal(&[("kubelet.service", r)], &[], false), &none),
            Change::Disruptive(vec!["restart kubelet.service".into()])
        );
        assert_eq!(
            classify(
                &journal(&[("containerd.service", UnitCommand::Stop)], &[], true),
                &none
            ),
            Change::Disruptive(vec!["stop containerd.service".into()])
        );
        assert_eq!(
            classify(&journal(&[], &[], true), &none),
            Change::Disruptive(vec!["restart containerd.service (config)".into()])
        );
        assert_eq!(
            classify(
                &journal(&[("app.service", r)], &["kubelet.service"], false),
                &marked
            ),
            Change::Disruptive(vec![
                "restart app.service".into(),
                "remove kubelet.service".into()
            ])
        );
        assert_eq!(
            classify(&journal(&[("app.service", r)], &[], false), &none),
            Change::Quiet
        );
    }

    #[test]
    fn a_first_apply_is_quiet_and_a_held_slot_makes_any_apply_disruptive() {
        let none = BTreeSet::new();
        let kubelet = journal(&[("kubelet.service", UnitCommand::Restart)], &[], false);
        let quiet = journal(&[("other.service", UnitCommand::Restart)], &[], false);
        let restart = Change::Disruptive(vec!["restart kubelet.service".into()]);
        let held = Change::Disruptive(vec!["completing an earlier disruptive change".into()]);
        assert_eq!(change_for(&kubelet, &none, false, false), restart);
        assert_eq!(change_for(&kubelet, &none, true, false), Change::Quiet);
        assert_eq!(change_for(&quiet, &none, false, false), Change::Quiet);
        assert_eq!(change_for(&quiet, &none, false, true), held);
        assert_eq!(change_for(&quiet, &none, true, true), held);
        assert_eq!(change_for(&kubelet, &none, true, true), restart);
    }

    #[test]
    fn only_pods_ready_before_and_still_there_are_waited_for() {
        let before = ready_pods(&[pod("a", true), pod("b", false), pod("c", true)]);
        assert_eq!(
            before,
            ["default/a".to_string(), "default/c".to_string()].into()
        );
        // c is gone, b was not ready before, d is new.
        let now = [pod("a", false), pod("b", false), pod("d", false)];
        assert_eq!(not_ready_again(&before, &now), ["default/a"]);
        assert!(not_ready_again(&before, &[pod("a", true)]).is_empty());
    }

    #[test]
    fn a_held_node_is_released_when_healthy_held_while_settling_and_failed_after_the_bound() {
        let p = Policy {
            budget: 1,
            invalid_budget: None,
            marked_units: BTreeSet::new(),
            health_timeout: Duration::from_secs(60),
            settle_timeout: Duration::from_secs(30),
        };
        let healthy = Health {
            node_ready: true,
            kubelet_healthy: true,
            pods_not_ready: Vec::new(),
        };
        let s = Duration::from_secs;
        assert_eq!(judge(s(1), &p, &healthy), Verdict::Hold);
        assert_eq!(
            judge(MIN_HOLD, &p, &healthy),
            Verdict::Release {
                unsettled: Vec::new()
            }
        );
        let settling = Health {
            pods_not_ready: vec!["default/a".into()],
            ..healthy.clone()
        };
        assert_eq!(judge(s(20), &p, &settling), Verdict::Hold);
        assert_eq!(
            judge(s(30), &p, &settling),
            Verdict::Release {
                unsettled: vec!["default/a".into()]
            }
        );
        let broken = Health {
            node_ready: false,
            kubelet_healthy: false,
            pods_not_ready: Vec::new(),
        };
        assert_eq!(judge(s(59), &p, &broken), Verdict::Hold);
        assert_eq!(
            judge(s(60), &p, &broken),
            Verdict::Fail(
                "the Node is not Ready and kubelet does not answer on /healthz 60s after the change"
                    .into()
            )
        );
        let no_kubelet = Health {
            kubelet_healthy: false,
            ..healthy
        };
        assert_eq!(
            judge(s(61), &p, &no_kubelet),
            Verdict::Fail("kubelet does not answer on /healthz 60s after the change".into())
        );
    }

    #[test]
    fn a_stop_holds_until_resumed_or_a_new_checksum() {
        let state = |phase| RolloutState {
            checksum: "c1".into(),
            phase,
            since: 1,
            pods_ready_before: BTreeSet::new(),
            reason: None,
            message: None,
        };
        assert_eq!(resume(None, "c1", true), Resume::Fresh);
        let stopped = state(Phase::Stopped);
        assert_eq!(resume(Some(&stopped), "c1", false), Resume::Stay);
        assert_eq!(resume(Some(&stopped), "c1", true), Resume::Resumed);
        assert_eq!(resume(Some(&stopped), "c2", false), Resume::Fresh);
        assert_eq!(
            resume(Some(&state(Phase::Holding)), "c1", false),
            Resume::Hold
        );
        assert_eq!(
            resume(Some(&state(Phase::Applying)), "c1", false),
            Resume::Continue
        );
        let round = RolloutState::parse(&stopped.clone().stopped("R", "m".into(), 5).to_bytes());
        assert_eq!(round.as_ref().map(|s| s.phase), Some(Phase::Stopped));
        assert_eq!(round.and_then(|s| s.reason), Some("R".into()));
        assert_eq!(RolloutState::parse(b"garbage"), None);
    }
}
