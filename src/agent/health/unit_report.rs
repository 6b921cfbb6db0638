//! The unit check's I/O ([`super::unit_check`] decides): every [`super::unit_check::CHECK_INTERVAL`]
//! and right after an apply the main loop ([`crate::agent::controller`]) has the units of the
//! last applied OSC read from systemd, and the Node's `SystemdUnitsReady` condition is patched
//! when it differs from what was last written. The first check of a process takes the
//! condition found on the Node (one GET), so a restart neither rewrites an unchanged condition
//! nor resets its transition time. Failures are logged, counted and retried at the next check.

use k8s_openapi::api::core::v1::NodeCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use tracing::{info, warn};

use super::unit_check::{self, UnitsCondition};
use crate::agent::pipeline::osc::NodeOsc;
use crate::agent::ports::Ports;
use crate::agent::ports::cluster::{self, NodeMeta};
use crate::agent::ports::host::Host;
use crate::error_chain::printable as error_chain;

/// The condition as last written (or found) on the Node, with its transition time; `None`:
/// not known in this process yet.
pub type Written = Option<(UnitsCondition, Timestamp)>;

/// Checks the units of `last` (the last applied OSC) and patches the condition of `node` when
/// it differs from `written`, which it updates.
pub async fn check<H: Host>(
    ports: &Ports<H>,
    node: &NodeMeta,
    last: &NodeOsc,
    written: &mut Written,
) {
    let Some(wanted) = judge_units(ports, last).await else {
        return;
    };
    let name = node.name_any();
    if written.is_none() {
        match found_on_node(ports, &name).await {
            Ok(found) => *written = found,
            Err(()) => return,
        }
    }
    if written.as_ref().is_some_and(|(was, _)| *was == wanted) {
        return;
    }
    let now = Timestamp::now();
    let transition = match written {
        Some((was, since)) if was.status == wanted.status => *since,
        _ => now,
    };
    let condition = NodeCondition {
        type_: unit_check::CONDITION_TYPE.to_string(),
        status: wanted.status.to_string(),
        reason: Some(wanted.reason.to_string()),
        message: Some(wanted.message.clone()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(transition)),
    };
    match cluster::patch_node_condition(&ports.client, &name, &condition).await {
        Ok(()) => {
            info!(condition = unit_check::CONDITION_TYPE, status = wanted.status, reason = wanted.reason, message = %wanted.message, "node condition updated");
            *written = Some((wanted, transition));
        }
        Err(error) => {
            ports.metrics.error("unit-check", "api");
            warn!(error = %error_chain(&error), "patching the node's SystemdUnitsReady condition failed");
        }
    }
}

/// The condition the units of `last` call for; `None` when a unit's state could not be read.
async fn judge_units<H: Host>(ports: &Ports<H>, last: &NodeOsc) -> Option<UnitsCondition> {
    let units = unit_check::managed_units(last);
    let now_us = u64::try_from(chrono::Utc::now().timestamp_micros()).unwrap_or_default();
    let mut findings = Vec::with_capacity(units.len());
    for unit in &units {
        match ports.host.unit_health(&unit.name).await {
            Ok(health) => findings.push(unit_check::judge(unit, &health, now_us)),
            Err(error) => {
                ports.metrics.error("unit-check", "systemd");
                warn!(error = %error_chain(&error), unit = %unit.name, "reading a unit's state failed; the unit check is skipped");
                return None;
            }
        }
    }
    Some(unit_check::condition(&findings))
}

/// The condition on the Node `name` as this agent would have written it; `Err` when it could
/// not be read (logged and counted).
async fn found_on_node<H: Host>(ports: &Ports<H>, name: &str) -> Result<Written, ()> {
    match cluster::node_condition(&ports.client, name, unit_check::CONDITION_TYPE).await {
        Ok(Some(found)) => {
            let transition = found
                .last_transition_time
                .as_ref()
                .map(|t| t.0)
                .unwrap_or_else(Timestamp::now);
            Ok(Some((unit_check::as_written(&found), transition)))
        }
        Ok(None) => Ok(None),
        Err(error) => {
            ports.metrics.error("unit-check", "api");
            warn!(error = %error_chain(&error), "reading the node's conditions failed");
            Err(())
        }
    }
}
