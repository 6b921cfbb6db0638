//! One round of health checks ([`super::rules`]): probe, report, restart, for the components
//! the last applied OSC runs ([`super::rules::watched`]).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::{Api, ResourceExt};
use tracing::{info, warn};

use super::rules::{self, Component, ReadinessToggles, Tracker, Verdict};
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
    /// The API client (the Node's `Ready` condition).
    pub client: &'a kube::Client,
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
    readiness: ReadinessToggles,
    /// The Node's resourceVersion and `Ready` condition at the last read.
    node_status: Option<(String, bool)>,
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
    if components.contains(&Component::Kubelet)
        && let Some(ready) = node_ready(context, node, &mut trackers.node_status).await
        && let Some(note) = trackers.readiness.observe(ready, Instant::now())
    {
        warn!(%note, "kubelet keeps falling out of Ready");
        context
            .events
            .report(
                context.metrics,
                node,
                true,
                Component::Kubelet.reason(),
                note,
            )
            .await;
    }
}

/// The Node's `Ready` condition, read again (GET) only when the Node's resourceVersion moved
/// since the last read: the agent's Node watch carries metadata only, and a Node's status
/// changes rarely (kubelet reports it every few minutes when nothing changes).
async fn node_ready<H>(
    context: &Context<'_, H>,
    node: &NodeMeta,
    last: &mut Option<(String, bool)>,
) -> Option<bool> {
    let version = node
        .metadata
        .resource_version
        .as_deref()
        .unwrap_or_default();
    if let Some((seen, ready)) = last.as_ref()
        && seen == version
    {
        return Some(*ready);
    }
    match Api::<Node>::all(context.client.clone())
        .get(&node.name_any())
        .await
    {
        Ok(full) => {
            let ready = rules::node_ready(&full);
            *last = Some((full.resource_version().unwrap_or_default(), ready));
            Some(ready)
        }
        Err(error) => {
            context.metrics.error("health-check", "api");
            warn!(error = %error_chain(&error), "reading the node's Ready condition failed");
            None
        }
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
