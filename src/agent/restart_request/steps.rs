//! Honouring a restart request on the Node ([`super::rules`]): each unit restarted, one
//! `SystemDUnitRestart` event per outcome as for an apply's jobs, a Warning for refused names,
//! the annotation removed, then the agent's own unit restarted (systemd stops this process).

use tracing::{info, warn};

use super::rules::{self, ANNOTATION_RESTART_SERVICES};
use crate::agent::health::unit_events;
use crate::agent::metrics::Metrics;
use crate::agent::pipeline::apply::FailedJob;
use crate::agent::pipeline::journal::CommandEntry;
use crate::agent::ports::cluster::{self, NodeEvents};
use crate::agent::ports::host::Host;
use crate::api::operatingsystemconfig::UnitCommand;
use crate::error_chain::printable as error_chain;

/// Event reason for names in the annotation that are not unit names.
pub const REASON_REFUSED: &str = "RestartRequestRefused";

/// What the agent needs to honour a request.
pub struct Context<'a, H> {
    /// The node.
    pub host: &'a H,
    /// API client (the Node's annotation).
    pub client: &'a kube::Client,
    /// Events on the Node.
    pub events: &'a NodeEvents,
    /// Error counters.
    pub metrics: &'a Metrics,
    /// The agent's own unit.
    pub own_unit: &'a str,
}

/// Honours the annotation on the Node `name` as it is now (read again: a watch event seen after
/// the removal may still carry it), if any. `Ok(false)`: nothing asked. An error reading the
/// Node or removing the annotation is returned (the caller tries again; failed restarts are
/// reported and left to the user, as GNA does).
pub async fn honour<H: Host>(context: &Context<'_, H>, name: &str) -> Result<bool, kube::Error> {
    let Some(node) = cluster::get_node_meta(context.client, name).await? else {
        return Ok(false);
    };
    let Some(value) = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_RESTART_SERVICES))
    else {
        return Ok(false);
    };
    let request = rules::parse(value, context.own_unit);
    info!(units = ?request.units, own_unit = request.own_unit, refused = ?request.refused, "restart requested on the node");
    let (done, failed) = restart_all(context, &request.units).await;
    let mut events = unit_events::aggregate(&done, &failed);
    if !request.refused.is_empty() {
        events.push(unit_events::UnitEvent {
            warning: true,
            reason: REASON_REFUSED,
            note: format!(
                "not restarted, not a unit name: {}",
                request.refused.join(", ")
            ),
        });
    }
    for event in events {
        context
            .events
            .report(
                context.metrics,
                &node,
                event.warning,
                event.reason,
                event.note,
            )
            .await;
    }
    cluster::remove_node_annotation(context.client, name, ANNOTATION_RESTART_SERVICES).await?;
    if request.own_unit {
        info!(
            unit = context.own_unit,
            "restarting the agent's own unit, as requested"
        );
        if let Err(error) = context
            .host
            .unit_job(context.own_unit, UnitCommand::Restart)
            .await
        {
            warn!(error = %error_chain(&error), "restarting the agent's own unit failed");
        }
    }
    Ok(true)
}

/// Restarts `units` one after the other; returns the done and the failed ones.
async fn restart_all<H: Host>(
    context: &Context<'_, H>,
    units: &[String],
) -> (Vec<CommandEntry>, Vec<FailedJob>) {
    let (mut done, mut failed) = (Vec::new(), Vec::new());
    for unit in units {
        match context.host.unit_job(unit, UnitCommand::Restart).await {
            Ok(()) => done.push(CommandEntry {
                name: unit.clone(),
                command: UnitCommand::Restart,
            }),
            Err(error) => {
                context.metrics.error("restart-request", "unit-job");
                warn!(%unit, error = %error_chain(&error), "restarting a requested unit failed");
                failed.push(FailedJob {
                    unit: unit.clone(),
                    command: UnitCommand::Restart,
                    error: error_chain(&error),
                });
            }
        }
    }
    (done, failed)
}
