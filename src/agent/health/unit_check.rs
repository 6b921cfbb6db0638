//! The Node condition `SystemdUnitsReady` (`docs/agent.md#systemd-units-ready`), as
//! gardener-node-agent's systemd unit check computes it (gardener
//! `pkg/nodeagent/controller/systemdunitcheck/reconciler.go`): the units of the last applied
//! OSC — spec units, overlaid by extension units — are checked against systemd, and the result
//! becomes `False`/`UnhealthyUnits`, `True`/`ProgressingUnits` or `True`/`AllUnitsHealthy`,
//! messages joined with `"; "`.
//!
//! GNA patches the condition every minute; this agent checks every minute too (D-Bus only)
//! but writes the Node only when status, reason or message changed, so an idle node costs no
//! request. `lastHeartbeatTime` is therefore the time of the last change.
//!
//! Everything here is pure; the controller reads systemd through [`crate::agent::ports::host::Host`] and
//! patches `nodes/status`.

use std::time::Duration;

use crate::systemd::UnitHealth;

use crate::agent::pipeline::osc::NodeOsc;

/// The condition type.
pub const CONDITION_TYPE: &str = "SystemdUnitsReady";
/// Reason: every unit is as it should be.
pub const REASON_ALL_HEALTHY: &str = "AllUnitsHealthy";
/// Reason: some unit is not.
pub const REASON_UNHEALTHY: &str = "UnhealthyUnits";
/// Reason: some unit is starting or stopping, for less than the stuck threshold.
pub const REASON_PROGRESSING: &str = "ProgressingUnits";
/// The message when all units are healthy (GNA's text).
pub const MESSAGE_ALL_HEALTHY: &str =
    "All systemd units from the operating system config are running as expected.";
/// How often the units are checked (GNA's `systemdUnitCheck.syncPeriod` default).
pub const CHECK_INTERVAL: Duration = Duration::from_secs(60);
/// How long a unit may be activating/deactivating before it counts as stuck (GNA's
/// `systemdUnitCheck.stuckThreshold` default).
pub const STUCK_THRESHOLD: Duration = Duration::from_secs(300);

/// A unit of the OSC and whether it should run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedUnit {
    /// Unit name.
    pub name: String,
    /// `enable`, or when unset: whether the OSC carries content or drop-ins for it.
    pub enabled: bool,
}

/// The units to check, sorted by name: spec units, then extension units (an extension unit
/// of the same name overrides `enable` when it sets it). Pure.
pub fn managed_units(osc: &NodeOsc) -> Vec<ManagedUnit> {
    let carries = |unit: &crate::api::operatingsystemconfig::Unit| {
        unit.content.is_some() || !unit.drop_ins.is_empty()
    };
    let mut units: Vec<ManagedUnit> = osc
        .spec
        .units
        .iter()
        .map(|unit| ManagedUnit {
            name: unit.name.clone(),
            enabled: unit.enable.unwrap_or_else(|| carries(unit)),
        })
        .collect();
    for unit in &osc.status.extension_units {
        match units.iter_mut().find(|u| u.name == unit.name) {
            Some(existing) => {
                if let Some(enable) = unit.enable {
                    existing.enabled = enable;
                }
            }
            None => units.push(ManagedUnit {
                name: unit.name.clone(),
                enabled: unit.enable.unwrap_or_else(|| carries(unit)),
            }),
        }
    }
    units.sort_by(|a, b| a.name.cmp(&b.name));
    units
}

/// What one unit contributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// Nothing to report.
    Healthy,
    /// Unhealthy, with GNA's message.
    Unhealthy(String),
    /// Starting or stopping, with GNA's message.
    Progressing(String),
}

/// Judges one unit at `now_us` (µs since the epoch). Pure.
pub fn judge(unit: &ManagedUnit, health: &UnitHealth, now_us: u64) -> Finding {
    let name = &unit.name;
    match health.active_state.as_str() {
        "active" if !unit.enabled => {
            Finding::Unhealthy(format!("{name}: active but should be disabled"))
        }
        "failed" if unit.enabled => Finding::Unhealthy(format!("{name}: failed")),
        state @ ("activating" | "deactivating") if health.sub_state != "auto-restart" => {
            let since = Duration::from_micros(now_us.saturating_sub(health.state_change_timestamp));
            let since = Duration::from_secs(since.as_secs());
            if since >= STUCK_THRESHOLD {
                Finding::Unhealthy(format!(
                    "{name}: stuck in {state} for {}",
                    crate::go_duration::format(since)
                ))
            } else {
                Finding::Progressing(format!(
                    "{name}: {state} for {}",
                    crate::go_duration::format(since)
                ))
            }
        }
        "inactive" if unit.enabled => {
            let idle_by_design = health.sub_state == "dead"
                && (health.service_type.as_deref() == Some("oneshot")
                    || !health.triggered_by.is_empty());
            if idle_by_design {
                Finding::Healthy
            } else {
                Finding::Unhealthy(format!("{name}: inactive but should be enabled"))
            }
        }
        _ => Finding::Healthy,
    }
}

/// The condition's status, reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitsCondition {
    /// `True` or `False`.
    pub status: &'static str,
    /// One of the `REASON_*` constants.
    pub reason: &'static str,
    /// What is wrong, or [`MESSAGE_ALL_HEALTHY`].
    pub message: String,
}

/// The condition from the findings, in unit order: any unhealthy unit makes it `False`;
/// else any progressing unit makes it `ProgressingUnits`. Pure.
pub fn condition(findings: &[Finding]) -> UnitsCondition {
    let unhealthy: Vec<&str> = findings
        .iter()
        .filter_map(|f| match f {
            Finding::Unhealthy(message) => Some(message.as_str()),
            _ => None,
        })
        .collect();
    let progressing: Vec<&str> = findings
        .iter()
        .filter_map(|f| match f {
            Finding::Progressing(message) => Some(message.as_str()),
            _ => None,
        })
        .collect();
    if !unhealthy.is_empty() {
        UnitsCondition {
            status: "False",
            reason: REASON_UNHEALTHY,
            message: unhealthy.join("; "),
        }
    } else if !progressing.is_empty() {
        UnitsCondition {
            status: "True",
            reason: REASON_PROGRESSING,
            message: progressing.join("; "),
        }
    } else {
        UnitsCondition {
            status: "True",
            reason: REASON_ALL_HEALTHY,
            message: MESSAGE_ALL_HEALTHY.to_string(),
        }
    }
}

/// A `SystemdUnitsReady` condition found on the Node, as this agent would have written it (a
/// reason it does not write is none), to compare the next check with. Pure.
pub fn as_written(found: &k8s_openapi::api::core::v1::NodeCondition) -> UnitsCondition {
    UnitsCondition {
        status: if found.status == "True" {
            "True"
        } else {
            "False"
        },
        reason: match found.reason.as_deref() {
            Some(REASON_ALL_HEALTHY) => REASON_ALL_HEALTHY,
            Some(REASON_PROGRESSING) => REASON_PROGRESSING,
            Some(REASON_UNHEALTHY) => REASON_UNHEALTHY,
            _ => "",
        },
        message: found.message.clone().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::testing::unit;

    fn health(active: &str, sub: &str) -> UnitHealth {
        UnitHealth {
            active_state: active.into(),
            sub_state: sub.into(),
            ..UnitHealth::default()
        }
    }

    fn managed(name: &str, enabled: bool) -> ManagedUnit {
        ManagedUnit {
            name: name.into(),
            enabled,
        }
    }

    #[test]
    fn managed_units_follow_enable_content_and_extension_overrides() {
        let mut osc = NodeOsc::default();
        let mut with_content = unit("b.service");
        with_content.enable = None;
        with_content.content = Some("[Service]\n".into());
        let mut bare = unit("c.service");
        bare.enable = None;
        bare.content = None;
        bare.drop_ins.clear();
        let mut disabled = unit("a.service");
        disabled.enable = Some(false);
        osc.spec.units = vec![with_content, bare, disabled];
        let mut ext = unit("a.service");
        ext.enable = Some(true);
        let mut new = unit("d.service");
        new.enable = None;
        new.content = None;
        new.drop_ins = vec![crate::agent::testing::drop_in("x.conf", "")];
        osc.status.extension_units = vec![ext, new];
        assert_eq!(
            managed_units(&osc),
            vec![
                managed("a.service", true),
                managed("b.service", true),
                managed("c.service", false),
                managed("d.service", true),
            ]
        );
    }

    #[test]
    fn each_state_is_judged_as_gna_does() {
        let on = managed("u.service", true);
        let off = managed("u.service", false);
        let now = 1_000_000_000_000;
        assert_eq!(
            judge(&on, &health("active", "running"), now),
            Finding::Healthy
        );
        assert_eq!(
            judge(&off, &health("active", "running"), now),
            Finding::Unhealthy("u.service: active but should be disabled".into())
        );
        assert_eq!(
            judge(&on, &health("failed", "failed"), now),
            Finding::Unhealthy("u.service: failed".into())
        );
        assert_eq!(
            judge(&off, &health("failed", "failed"), now),
            Finding::Healthy
        );
        assert_eq!(
            judge(&on, &health("activating", "auto-restart"), now),
            Finding::Healthy
        );
        let mut starting = health("activating", "start");
        starting.state_change_timestamp = now - 12_500_000;
        assert_eq!(
            judge(&on, &starting, now),
            Finding::Progressing("u.service: activating for 12s".into())
        );
        starting.state_change_timestamp = now - 303_000_000;
        assert_eq!(
            judge(&on, &starting, now),
            Finding::Unhealthy("u.service: stuck in activating for 5m3s".into())
        );
        assert_eq!(
            judge(&on, &health("inactive", "dead"), now),
            Finding::Unhealthy("u.service: inactive but should be enabled".into())
        );
        let mut oneshot = health("inactive", "dead");
        oneshot.service_type = Some("oneshot".into());
        assert_eq!(judge(&on, &oneshot, now), Finding::Healthy);
        let mut timer = health("inactive", "dead");
        timer.triggered_by = vec!["u.timer".into()];
        assert_eq!(judge(&on, &timer, now), Finding::Healthy);
        assert_eq!(
            judge(&off, &health("inactive", "dead"), now),
            Finding::Healthy
        );
    }

    #[test]
    fn unhealthy_wins_over_progressing_and_messages_are_joined() {
        let all = condition(&[Finding::Healthy]);
        assert_eq!(
            (all.status, all.reason, all.message.as_str()),
            ("True", "AllUnitsHealthy", MESSAGE_ALL_HEALTHY)
        );
        let progressing = condition(&[
            Finding::Progressing("a: activating for 1s".into()),
            Finding::Progressing("b: deactivating for 2s".into()),
        ]);
        assert_eq!(
            (
                progressing.status,
                progressing.reason,
                progressing.message.as_str()
            ),
            (
                "True",
                "ProgressingUnits",
                "a: activating for 1s; b: deactivating for 2s"
            )
        );
        let bad = condition(&[
            Finding::Progressing("a: activating for 1s".into()),
            Finding::Unhealthy("b: failed".into()),
            Finding::Unhealthy("c: failed".into()),
        ]);
        assert_eq!(
            (bad.status, bad.reason, bad.message.as_str()),
            ("False", "UnhealthyUnits", "b: failed; c: failed")
        );
    }

    #[test]
    fn durations_print_like_go() {
        assert_eq!(crate::go_duration::format(Duration::ZERO), "0s");
        assert_eq!(crate::go_duration::format(Duration::from_secs(42)), "42s");
        assert_eq!(crate::go_duration::format(Duration::from_secs(303)), "5m3s");
        assert_eq!(
            crate::go_duration::format(Duration::from_secs(3605)),
            "1h0m5s"
        );
    }
}
