//! Drift, safely (pure; `docs/agent.md#drift-repair`): what the agent does with what a drift
//! check found ([`decide`]) and what the Node condition [`CONDITION_TYPE`] says about it
//! ([`condition`]) — so a fleet-wide drift (a DaemonSet or a script rewriting a kubelet file
//! on every node) cannot restart kubelet on every node at once: a repair that restarts a unit
//! waits for a rollout slot and is held until the node is healthy, as a disruptive rollout.

use super::Findings;

/// The Node condition the agent keeps about drift (the seed counts it in `NodeAgentRollout`).
pub use crate::api::constants::NODE_CONDITION_DRIFT as CONDITION_TYPE;
/// Reason: nothing differs from the applied configuration (or the drift was repaired).
pub const REASON_NONE: &str = "NoDrift";
/// Reason: drift found and reported only (`--drift-mode=report`).
pub const REASON_REPORTED: &str = "DriftReported";
/// Reason: drift found whose repair restarts units; waiting for a rollout slot, a pause from
/// the seed, or the node's configuration apply.
pub const REASON_WAITING: &str = "DriftRepairWaiting";
/// Event reason when drift is found and only reported (Warning).
pub const EVENT_DETECTED: &str = "DriftDetected";

/// `--drift-mode`: what the agent does with drift.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum DriftMode {
    /// Repair it (restarts within the rollout's budget and health hold).
    #[default]
    Repair,
    /// Report it (log, metric, Warning event, Node condition) and leave the node as it is.
    Report,
}

/// What to do with a check's findings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Nothing drifted.
    Nothing,
    /// Report only (the mode says so).
    Report,
    /// Repair at once: files and modes only, no unit is restarted.
    Repair,
    /// Repair in turn: take a rollout slot, repair, hold until the node is healthy.
    RepairInTurn,
}

/// The action for `findings` in `mode`.
pub fn decide(mode: DriftMode, findings: &Findings) -> Action {
    match (findings.is_empty(), mode) {
        (true, _) => Action::Nothing,
        (false, DriftMode::Report) => Action::Report,
        (false, DriftMode::Repair) if findings.restart.is_empty() => Action::Repair,
        (false, DriftMode::Repair) => Action::RepairInTurn,
    }
}

/// The condition's status and reason for an action that leaves drift on the node
/// (`waiting`: a repair in turn that could not start yet); `("False", NoDrift)` otherwise.
pub fn condition(action: &Action, waiting: bool) -> (&'static str, &'static str) {
    match action {
        Action::Report => ("True", REASON_REPORTED),
        Action::RepairInTurn if waiting => ("True", REASON_WAITING),
        _ => ("False", REASON_NONE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(files: &[&str], restart: &[&str]) -> Findings {
        Findings {
            files: files.iter().map(|f| f.to_string()).collect(),
            restart: restart.iter().map(|u| u.to_string()).collect(),
            ..Findings::default()
        }
    }

    #[test]
    fn restarts_go_in_turn_quiet_repairs_at_once_and_report_mode_only_reports() {
        let none = Findings::default();
        assert_eq!(decide(DriftMode::Repair, &none), Action::Nothing);
        assert_eq!(decide(DriftMode::Report, &none), Action::Nothing);
        let quiet = Findings {
            modes: vec!["/etc/a".into()],
            ..Findings::default()
        };
        assert_eq!(decide(DriftMode::Repair, &quiet), Action::Repair);
        let kubelet = found(&["/var/lib/kubelet/config"], &["kubelet.service"]);
        assert_eq!(decide(DriftMode::Repair, &kubelet), Action::RepairInTurn);
        assert_eq!(decide(DriftMode::Report, &kubelet), Action::Report);
        assert_eq!(decide(DriftMode::Report, &quiet), Action::Report);
    }

    #[test]
    fn the_condition_is_true_while_drift_stays_on_the_node() {
        assert_eq!(condition(&Action::Report, false), ("True", REASON_REPORTED));
        assert_eq!(
            condition(&Action::RepairInTurn, true),
            ("True", REASON_WAITING)
        );
        assert_eq!(
            condition(&Action::RepairInTurn, false),
            ("False", REASON_NONE)
        );
        assert_eq!(condition(&Action::Repair, false), ("False", REASON_NONE));
        assert_eq!(condition(&Action::Nothing, false), ("False", REASON_NONE));
    }
}
