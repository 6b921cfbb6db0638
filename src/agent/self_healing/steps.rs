//! One round of health checks ([`super::rules`]): probe, report, restart, for the components
//! the last applied OSC runs ([`super::rules::watched`]); with kubelet, also the Node's
//! `Ready` toggles and its lost internal IP ([`super::addresses`]).

use std::net::IpAddr;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use tracing::{info, warn};

use super::addresses::{self, AddressCheck};
use super::rules::{self, Component, ReadinessToggles, Tracker, Verdict};
use crate::agent::health::unit_events;
use crate::agent::pipeline::apply::FailedJob;
use crate::agent::pipeline::journal::CommandEntry;
use crate::agent::ports::Ports;
use crate::agent::ports::cluster::NodeMeta;
use crate::agent::ports::host::Host;
use crate::api::operatingsystemconfig::UnitCommand;
use crate::error_chain::printable as error_chain;

/// How long one probe may take (GNA's HTTP client timeout).
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The trackers of both components, kept by the main loop between rounds.
#[derive(Debug, Default)]
pub struct Trackers {
    kubelet: Tracker,
    containerd: Tracker,
    readiness: ReadinessToggles,
    /// The Node's resourceVersion and `Ready` condition at the last read.
    node_status: Option<(String, bool)>,
    /// The last internal IP the Node had.
    last_internal_ip: Option<IpAddr>,
    /// Whether a Node that never had an address here was reported already.
    told_no_address: bool,
}

/// Checks `components` once (one after the other: each probe is bounded).
pub async fn check<H: Host>(
    ports: &Ports<H>,
    node: &NodeMeta,
    components: &[Component],
    trackers: &mut Trackers,
) {
    for &component in components {
        let tracker = match component {
            Component::Kubelet => &mut trackers.kubelet,
            Component::Containerd => &mut trackers.containerd,
        };
        let probe = probe(ports, component).await;
        let verdict = tracker.observe(component, probe, Instant::now());
        act(ports, node, component, verdict).await;
    }
    if components.contains(&Component::Kubelet)
        && let Some(ready) = node_ready(ports, node, trackers).await
        && let Some(note) = trackers.readiness.observe(ready, Instant::now())
    {
        warn!(%note, "kubelet keeps falling out of Ready");
        ports
            .event(node, true, Component::Kubelet.reason(), note)
            .await;
    }
}

/// The Node's `Ready` condition, read again (GET) only when the Node's resourceVersion moved
/// since the last read: the agent's Node watch carries metadata only, and a Node's status
/// changes rarely (kubelet reports it every few minutes when nothing changes). Each read also
/// looks after the Node's internal IP ([`keep_internal_ip`]).
async fn node_ready<H: Host>(
    ports: &Ports<H>,
    node: &NodeMeta,
    trackers: &mut Trackers,
) -> Option<bool> {
    let last = &mut trackers.node_status;
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
    match Api::<Node>::all(ports.client.clone())
        .get(&node.name_any())
        .await
    {
        Ok(full) => {
            let ready = rules::node_ready(&full);
            *last = Some((full.resource_version().unwrap_or_default(), ready));
            if !keep_internal_ip(ports, node, &full, trackers).await {
                // Not settled: read the Node again next round, whether it moved or not.
                trackers.node_status = None;
            }
            Some(ready)
        }
        Err(error) => {
            ports.metrics.error("health-check", "api");
            warn!(error = %error_chain(&error), "reading the node's Ready condition failed");
            None
        }
    }
}

/// GNA's `ensureNodeInternalIP`: remembers the Node's internal IP; when the Node has no
/// address at all, says so and writes the remembered one back if it is still this machine's
/// (with GNA's events; a failed write restarts kubelet, as GNA does). `false` while an IP is
/// lost and not back yet. A Node that never had an address here (no IP to restore) is
/// reported once, not at every round as GNA does: nothing can be done about it.
async fn keep_internal_ip<H: Host>(
    ports: &Ports<H>,
    node: &NodeMeta,
    full: &Node,
    trackers: &mut Trackers,
) -> bool {
    match addresses::check(full) {
        AddressCheck::Remember(ip) => {
            trackers.last_internal_ip = Some(ip);
            return true;
        }
        AddressCheck::Fine => return true,
        AddressCheck::Lost => {}
    }
    let last = trackers.last_internal_ip;
    if last.is_none() && std::mem::replace(&mut trackers.told_no_address, true) {
        return true;
    }
    let report =
        |warning: bool, note: String| ports.event(node, warning, Component::Kubelet.reason(), note);
    warn!(last_internal_ip = ?last, "the Node has neither an internal nor an external IP");
    report(true, addresses::lost_note(last)).await;
    let Some(ip) = last.filter(|ip| ports.host.is_local_address(*ip)) else {
        return last.is_none();
    };
    let patch = addresses::restore_patch(ip, &full.resource_version().unwrap_or_default());
    let written = Api::<Node>::all(ports.client.clone())
        .patch_status(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await;
    match written {
        Ok(_) => {
            info!(%ip, "the Node's lost internal IP written back");
            report(false, addresses::restored_note(ip)).await;
            true
        }
        Err(kube::Error::Api(status)) if status.code == 409 => false,
        Err(error) => {
            ports.metrics.error("health-check", "api");
            let error = error_chain(&error);
            warn!(%error, "writing the Node's internal IP failed; restarting kubelet");
            report(true, addresses::restore_failed_note(&error)).await;
            restart(ports, node, Component::Kubelet).await;
            false
        }
    }
}

async fn probe<H: Host>(ports: &Ports<H>, component: Component) -> Result<(), String> {
    match component {
        Component::Kubelet => ports.host.kubelet_health(PROBE_TIMEOUT).await,
        Component::Containerd => ports.host.containerd_health(PROBE_TIMEOUT).await,
    }
}

async fn act<H: Host>(ports: &Ports<H>, node: &NodeMeta, component: Component, verdict: Verdict) {
    let report = |warning: bool, note: String| ports.event(node, warning, component.reason(), note);
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
            restart(ports, node, component).await;
        }
    }
}

/// Restarts the component's unit, with the `SystemDUnitRestart` event of any unit job.
async fn restart<H: Host>(ports: &Ports<H>, node: &NodeMeta, component: Component) {
    let unit = component.unit();
    let result = ports.host.unit_job(unit, UnitCommand::Restart).await;
    let (done, failed) = match result {
        Ok(()) => (
            vec![CommandEntry {
                name: unit.to_string(),
                command: UnitCommand::Restart,
            }],
            Vec::new(),
        ),
        Err(error) => {
            ports.metrics.error("health-check", "unit-job");
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
        ports
            .event(node, event.warning, event.reason, event.note)
            .await;
    }
}
