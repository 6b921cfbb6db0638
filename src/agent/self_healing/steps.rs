//! One round of health checks ([`super::rules`]): probe, report, restart, for the components
//! the last applied OSC runs ([`super::rules::watched`]).

use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::rules::{Component, Tracker, Verdict};
use crate::agent::health::unit_events;
use crate::agent::metrics::Metrics;
use crate::agent::pipeline::apply::FailedJob;
use crate::agent::pipeline::journal::CommandEntry;
use crate::agent::ports::cluster::{NodeEvents, NodeMeta};
use crate::agent::ports::host::{self, Host};
use crate::api::operatingsystemconfig::UnitCommand;
use crate::error_chain::printable as error_chain;

/// How long one probe may take (GNA's HTTP client timeout).
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a round of checks needs from the running agent.
pub struct Context<'a, H> {
    /// The node.
    pub host: &'a H,
    /// Events on the Node.
    pub events: &'a NodeEvents,
    /// Error counters.
    pub metrics: &'a Metrics,
    /// containerd's socket.
    pub containerd_address: &'a str,
}

/// The trackers of both components, kept by the main loop between rounds.
#[derive(Debug, Default)]
pub struct Trackers {
    kubelet: Tracker,
    containerd: Tracker,
}

/// Checks `components` once (one after the other: each probe is bounded).
pub async fn check<H: Host>(
    context: &Context<'_, H>,
    node: &NodeMeta,
    components: &[Component],
    trackers: &mut Trackers,
) {
    for &component in components {
        let tracker = match component {
            Component::Kubelet => &mut trackers.kubelet,
            Component::Containerd => &mut trackers.containerd,
        };
        let probe = probe(context, component).await;
        let verdict = tracker.observe(component, probe, Instant::now());
        act(context, node, component, verdict).await;
    }
}

async fn probe<H: Host>(context: &Context<'_, H>, component: Component) -> Result<(), String> {
    match component {
        Component::Kubelet => host::http_healthz(host::KUBELET_HEALTHZ, PROBE_TIMEOUT).await,
        Component::Containerd => {
            let args = ["--address", context.containerd_address, "version"];
            let version = host::run_command("ctr", &args);
            match tokio::time::timeout(PROBE_TIMEOUT, version).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(error)) => Err(error_chain(&error)),
                Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
            }
        }
    }
}

async fn act<H: Host>(
    context: &Context<'_, H>,
    node: &NodeMeta,
    component: Component,
    verdict: Verdict,
) {
    let report = |warning: bool, note: String| {
        context
            .events
            .report(context.metrics, node, warning, component.reason(), note)
    };
    match verdict {
        Verdict::Healthy | Verdict::Waiting => {}
        Verdict::Recovered(note) => {
            info!(component = component.reason(), "healthy again");
            report(false, note).await;
        }
        Verdict::Failing(note) => {
            warn!(component = component.reason(), %note, "unhealthy");
            report(true, note).await;
        }
        Verdict::Restart(note) => {
            warn!(component = component.reason(), %note, "restarting");
            report(true, note).await;
            restart(context, node, component).await;
        }
    }
}

/// Restarts the component's unit, with the `SystemDUnitRestart` event of any unit job.
async fn restart<H: Host>(context: &Context<'_, H>, node: &NodeMeta, component: Component) {
    let unit = component.unit();
    let result = context.host.unit_job(unit, UnitCommand::Restart).await;
    let (done, failed) = match result {
        Ok(()) => (
            vec![CommandEntry {
                name: unit.to_string(),
                command: UnitCommand::Restart,
            }],
            Vec::new(),
        ),
        Err(error) => {
            context.metrics.error("health-check", "unit-job");
            (
                Vec::new(),
                vec![FailedJob {
                    unit: unit.to_string(),
                    command: UnitCommand::Restart,
                    error: error_chain(&error),
                }],
            )
        }
    };
    for event in unit_events::aggregate(&done, &failed) {
        context
            .events
            .report(
                context.metrics,
                node,
                event.warning,
                event.reason,
                event.note,
            )
            .await;
    }
}
