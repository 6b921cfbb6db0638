//! Honouring a restart request on the Node ([`super::rules`]). In the main loop, briefly: the
//! Node is read, the annotation removed (only if the Node is unchanged since the read, so the
//! value removed is the value acted on), and a Warning `RestartRequestRefused` reports what
//! is not restarted. Then a task of its own ([`Batch`]) restarts the units, all at once, each
//! waited for up to the job timeout, with one `SystemDUnitRestart` event per outcome as for an
//! apply's jobs, and last the agent's own unit (systemd stops this process). The main loop
//! goes on meanwhile: a slow unit delays no OSC change.
//!
//! Removing the annotation first means a request is acted on at most once: a restart that
//! takes the node or the agent down does not find the annotation again afterwards.

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tracing::{info, warn};

use super::rules::{self, ANNOTATION_RESTART_SERVICES, RestartRequest};
use crate::agent::health::unit_events;
use crate::agent::pipeline::apply::FailedJob;
use crate::agent::pipeline::journal::CommandEntry;
use crate::agent::ports::Ports;
use crate::agent::ports::cluster::{self, NodeMeta};
use crate::agent::ports::host::Host;
use crate::api::operatingsystemconfig::UnitCommand;
use crate::error_chain::printable as error_chain;

/// Event reason for names in the annotation that are not restarted (not unit names, units
/// that change the machine's state, template instances, names beyond the cap).
pub const REASON_REFUSED: &str = "RestartRequestRefused";
/// How soon a request that arrives while a batch still runs is looked at again.
pub const BUSY_RECHECK: Duration = Duration::from_secs(1);
/// How often the Node is read again when it changed between the read and the removal.
const REMOVAL_ATTEMPTS: usize = 3;

/// What the agent needs to honour a request; owned, as the restarts run on a task of their
/// own.
pub struct Restarter<H> {
    /// The agent's ports (the Node's annotation, events, unit jobs).
    pub ports: Ports<H>,
    /// The agent's own unit.
    pub own_unit: String,
}

/// The restarts of the last request, running on their own task (at most one batch at a time).
#[derive(Debug, Default)]
pub struct Batch {
    running: Option<tokio::task::JoinHandle<()>>,
}

impl Batch {
    /// Whether the last batch still runs.
    pub fn busy(&self) -> bool {
        self.running
            .as_ref()
            .is_some_and(|task| !task.is_finished())
    }
}

/// Honours the annotation on the Node `name` as it is now (read again: a watch event seen after
/// the removal may still carry it), if any. `Ok(None)`: done or nothing asked;
/// `Ok(Some(wait))`: a batch still runs, look again after `wait`. An error reading the Node or
/// removing the annotation is returned and nothing is restarted (the caller tries again);
/// failed restarts are reported and left to the user, as GNA does.
pub async fn honour<H: Host + 'static>(
    restarter: Restarter<H>,
    batch: &mut Batch,
    name: &str,
) -> Result<Option<Duration>, kube::Error> {
    if batch.busy() {
        return Ok(Some(BUSY_RECHECK));
    }
    let Some((node, request)) =
        take_request(&restarter.ports.client, name, &restarter.own_unit).await?
    else {
        return Ok(None);
    };
    info!(
        units = %rules::listing(&request.units),
        count = request.units.len(),
        own_unit = request.own_unit,
        invalid = request.invalid.len(),
        machine_state = request.machine_state.len(),
        templates = request.templates.len(),
        ignored = request.ignored.len(),
        "restart requested on the node; annotation removed"
    );
    for note in rules::refusal_notes(&request) {
        warn!(%note, "restart request: names refused");
        restarter
            .ports
            .event(&node, true, REASON_REFUSED, note)
            .await;
    }
    if !request.units.is_empty() || request.own_unit {
        batch.running = Some(tokio::spawn(run(restarter, node, request)));
    }
    Ok(None)
}

/// Reads the Node and removes the annotation from exactly that version of it (a merge patch
/// with its resourceVersion: if the Node changed in between, it is read again). Returns the
/// Node and the request it carried (read for an agent running as `own_unit`); `None` when there
/// is none.
async fn take_request(
    client: &kube::Client,
    name: &str,
    own_unit: &str,
) -> Result<Option<(NodeMeta, RestartRequest)>, kube::Error> {
    let mut attempt = 1;
    loop {
        let Some(node) = cluster::get_node_meta(client, name).await? else {
            return Ok(None);
        };
        let Some(value) = node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_RESTART_SERVICES))
        else {
            return Ok(None);
        };
        let request = rules::parse(value, own_unit);
        let patch = json!({ "metadata": {
            "resourceVersion": node.metadata.resource_version,
            "annotations": { ANNOTATION_RESTART_SERVICES: null },
        }});
        let removed = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
            .patch_metadata(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        match removed {
            Ok(_) => return Ok(Some((node, request))),
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < REMOVAL_ATTEMPTS => {
                attempt += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

/// The batch: every unit restarted at once, the outcomes reported, then the agent's own unit.
async fn run<H: Host>(restarter: Restarter<H>, node: NodeMeta, request: RestartRequest) {
    let (done, failed) = restart_all(&restarter, &request.units).await;
    for event in unit_events::aggregate(&done, &failed) {
        restarter
            .ports
            .event(&node, event.warning, event.reason, event.note)
            .await;
    }
    if request.own_unit {
        info!(
            unit = %restarter.own_unit,
            "restarting the agent's own unit, as requested"
        );
        if let Err(error) = restarter
            .ports
            .host
            .unit_job(&restarter.own_unit, UnitCommand::Restart)
            .await
        {
            warn!(error = %error_chain(&error), "restarting the agent's own unit failed");
        }
    }
}

/// Restarts `units` concurrently (systemd orders the jobs by the units' dependencies); returns
/// the done and the failed ones.
async fn restart_all<H: Host>(
    restarter: &Restarter<H>,
    units: &[String],
) -> (Vec<CommandEntry>, Vec<FailedJob>) {
    let jobs = units.iter().map(|unit| async move {
        let result = restarter
            .ports
            .host
            .unit_job(unit, UnitCommand::Restart)
            .await;
        (unit, result)
    });
    let (mut done, mut failed) = (Vec::new(), Vec::new());
    for (unit, result) in futures::future::join_all(jobs).await {
        match result {
            Ok(()) => done.push(CommandEntry {
                name: unit.clone(),
                command: UnitCommand::Restart,
            }),
            Err(error) => {
                restarter.ports.metrics.error("restart-request", "unit-job");
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
