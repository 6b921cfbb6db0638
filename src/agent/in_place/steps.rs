//! In-place node updates (GEP-31), the I/O half: the steps the controller runs before and
//! after [`crate::agent::pipeline::apply`] for an OSC with `spec.inPlaceUpdates`. The decisions are in
//! [`crate::agent::in_place::rules`]; the flow is gardener-node-agent's (gardener v1.149,
//! `pkg/nodeagent/controller/operatingsystemconfig/reconciler.go`: `Reconcile`,
//! `performInPlaceUpdate`, `updateOSInPlace`, `performCredentialsRotationInPlace`,
//! `deleteRemainingPods`, `patchNodeUpdateSuccessful`/`Failed`), described in
//! `docs/agent.md#in-place-updates`:
//!
//! - [`prepare`] (before the apply): compute the journal with its in-place flags (or resume it),
//!   clear the OS flag when the node already runs the wanted version (after the reboot), and
//!   with any flag set wait until machine-controller-manager made the node ready
//!   (`InPlaceUpdate`/`ReadyForUpdate`, or `update-result=failed` for a retry).
//! - the apply itself (files, units, kubelet binary and config, unit restarts).
//! - [`finish`] (after the apply): kubelet healthy again after kubelet changes; the OS update
//!   command (annotation first, retried on `network problems` up to 5 minutes, anything else
//!   fails the update); a node that came back on the old version after an attempt for the wanted
//!   one fails; service-account-key rotation wakes the token sync; a certificate authority
//!   rotation gives the node agent a new client certificate (one renewal of
//!   [`crate::agent::client_certificate`], without GNA's restart) and then bootstraps kubelet
//!   again (bootstrap kubeconfig from `kubeconfig-real`, `kubeconfig-real` and `pki/` removed,
//!   `kubelet.service` restarted, kubelet healthy), each flag cleared in the journal once done;
//!   finally the pods on the node are deleted and the Node labelled `update-result=successful`.
//!
//! A failure labels the Node `update-result=failed` with the reason in
//! `node.machine.sapcloud.io/update-failed-reason` and stops until the next reconcile.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::DeleteParams;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use crate::agent::access::credentials;
use crate::agent::client_certificate::lifecycle::{BootstrapError, Renewer};
use crate::agent::client_certificate::steps::{self as certificate_steps, CertificateError};
use crate::agent::in_place::rules::{self, Failure, Gate};
use crate::agent::pipeline::changes::{self, Side};
use crate::agent::pipeline::journal::{self, Journal, PersistError};
use crate::agent::pipeline::osc::NodeOsc;
use crate::agent::ports::Ports;
use crate::agent::ports::cluster;
use crate::agent::ports::host::{Host, HostError, KUBELET_UNIT};
use crate::api::nodeagent::NodeAgentConfiguration;
use crate::api::operatingsystemconfig::{OsUpdate, UnitCommand};
use crate::error_chain::printable as error_chain;

/// Longest one run of the OS update command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(600);
/// Longest one kubelet health probe may take while waiting for kubelet after the update.
const KUBELET_PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why an in-place step failed; the reconcile is retried.
#[derive(Debug, thiserror::Error)]
pub enum InPlaceError {
    /// The flags could not be computed.
    #[error("computing the in-place update flags")]
    Flags(#[from] rules::FlagsError),
    /// Reading or writing on the node failed.
    #[error("{0}")]
    Host(String, #[source] HostError),
    /// The journal could not be serialised.
    #[error("encoding the journal: {0}")]
    Encode(String),
    /// An API call failed.
    #[error("{0}")]
    Api(String, #[source] kube::Error),
    /// The OSC asks for an OS update but names no command.
    #[error("the OSC asks for OS version {0} but has no status.inPlaceUpdates.osUpdate command")]
    NoCommand(String),
}

impl InPlaceError {
    /// Metric label.
    pub fn category(&self) -> &'static str {
        match self {
            InPlaceError::Flags(_) => "in-place-flags",
            InPlaceError::Host(..) | InPlaceError::Encode(_) => "in-place-host",
            InPlaceError::Api(..) => "in-place-api",
            InPlaceError::NoCommand(_) => "in-place-no-command",
        }
    }
}

/// What the in-place steps need: the agent's ports and the in-place settings.
pub struct Context<'a, H> {
    /// The agent's ports (own Node, pods on it; the node; state paths).
    pub ports: &'a Ports<H>,
    /// How the OS update command is retried.
    pub retry: RetryPolicy,
    /// How long kubelet may take to be healthy after kubelet changes.
    pub kubelet_timeout: Duration,
    /// The renewal of the agent's client certificate (`None`: the agent's credentials are not
    /// `credentials/kubeconfig`).
    pub renewer: Option<&'a Renewer>,
    /// The agent's configuration (API server and CA for kubelet's bootstrap kubeconfig).
    pub config: &'a NodeAgentConfiguration,
}

/// How long kubelet may take to be healthy after kubelet changes (GNA's 5 minutes).
pub const KUBELET_TIMEOUT: Duration = Duration::from_secs(300);

/// Why the reconcile ends before or after the apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Halt {
    /// The node waits for machine-controller-manager to make it ready for the update.
    AwaitNode,
    /// The update failed (reported on the Node) or the node must reboot first.
    Stopped,
}

/// Retries of the OS update command on `network problems`.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Wait between attempts.
    pub interval: Duration,
    /// No new attempt after this long.
    pub timeout: Duration,
}

impl Default for RetryPolicy {
    /// gardener-node-agent's: every 30 s for up to 5 minutes.
    fn default() -> Self {
        RetryPolicy {
            interval: Duration::from_secs(30),
            timeout: Duration::from_secs(300),
        }
    }
}

/// Result of [`prepare`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepared {
    /// Apply (no in-place work flagged, or the node is ready for it).
    Apply,
    /// In-place work is flagged and the node is not ready: wait for the Node to change.
    Wait,
    /// The update failed and is reported on the Node; stop until the next reconcile.
    Stopped(String),
}

impl Prepared {
    /// Whether the reconcile ends before the apply (a stop is logged with its reason).
    pub fn halt(self) -> Option<Halt> {
        match self {
            Prepared::Apply => None,
            Prepared::Wait => Some(Halt::AwaitNode),
            Prepared::Stopped(reason) => {
                warn!(%reason, "in-place update stopped");
                Some(Halt::Stopped)
            }
        }
    }
}

/// Result of [`finish`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finished {
    /// Done (or nothing to do): report the checksum.
    Done,
    /// The update failed (reported on the Node), or the node must reboot into the new OS
    /// version first: stop until the next reconcile.
    Stopped(String),
}

impl Finished {
    /// Whether the reconcile ends after the apply, before the checksum is reported (a stop is
    /// logged with its reason).
    pub fn halt(self) -> Option<Halt> {
        match self {
            Finished::Done => None,
            Finished::Stopped(reason) => {
                warn!(%reason, "in-place update stopped");
                Some(Halt::Stopped)
            }
        }
    }
}

/// The journal on disk if it is for `checksum`.
fn load_journal<H: Host>(
    ctx: &Context<'_, H>,
    checksum: &str,
) -> Result<Option<Journal>, InPlaceError> {
    journal::load(ctx.ports.host.as_ref(), &ctx.ports.paths, checksum)
        .map_err(|e| InPlaceError::Host("reading the journal".into(), e))
}

fn persist<H: Host>(ctx: &Context<'_, H>, journal: &Journal) -> Result<(), InPlaceError> {
    journal::persist(ctx.ports.host.as_ref(), &ctx.ports.paths, journal).map_err(
        |error| match error {
            PersistError::Encode(e) => InPlaceError::Encode(e.to_string()),
            PersistError::Write(e) => InPlaceError::Host("writing the journal".into(), e),
        },
    )
}

/// The node's OS version (see [`rules::os_version`]), from os-release and debian_version
/// ([`Host::read_system_file`]: links followed, a FIFO refused).
pub fn current_os_version<H: Host>(host: &H) -> Result<Option<String>, InPlaceError> {
    let os_release = match read_system_file(host, rules::OS_RELEASE_PATH)? {
        Some(text) => text,
        None => read_system_file(host, rules::OS_RELEASE_FALLBACK_PATH)?.unwrap_or_default(),
    };
    let debian_version = read_system_file(host, rules::DEBIAN_VERSION_PATH)?;
    Ok(rules::os_version(&os_release, debian_version.as_deref()))
}

/// A small system file as text; `None` when it is missing.
fn read_system_file<H: Host>(host: &H, path: &str) -> Result<Option<String>, InPlaceError> {
    host.read_system_file(Path::new(path))
        .map(|bytes| bytes.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
        .map_err(|error| InPlaceError::Host(format!("reading {path}"), error))
}

/// What the Node says: `InPlaceUpdate` reason, `update-result`, the annotations.
#[derive(Debug, Default)]
struct NodeState {
    reason: Option<String>,
    result: Option<String>,
    attempted_os: Option<String>,
    failed_reason: Option<String>,
}

async fn node_state(client: &Client, node: &str) -> Result<NodeState, InPlaceError> {
    let node: Node = Api::<Node>::all(client.clone())
        .get(node)
        .await
        .map_err(|e| InPlaceError::Api(format!("reading node {node}"), e))?;
    let reason = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| {
            c.iter()
                .find(|c| c.type_ == rules::CONDITION_IN_PLACE_UPDATE)
        })
        .and_then(|c| c.reason.clone());
    let annotation = |key: &str| node.annotations().get(key).cloned();
    Ok(NodeState {
        reason,
        result: node.labels().get(rules::LABEL_UPDATE_RESULT).cloned(),
        attempted_os: annotation(rules::ANNOTATION_UPDATING_OS_VERSION),
        failed_reason: annotation(rules::ANNOTATION_FAILED_REASON),
    })
}

async fn patch_node(
    client: &Client,
    node: &str,
    patch: serde_json::Value,
    what: &str,
) -> Result<(), InPlaceError> {
    cluster::merge_patch_node_metadata(client, node, &patch)
        .await
        .map_err(|e| InPlaceError::Api(format!("{what} on node {node}"), e))
}

/// Labels the Node `update-result=failed` with `reason` (on one line without control
/// characters, truncated: [`rules::failure_reason`]); returns the reason as annotated.
pub async fn mark_failed(
    client: &Client,
    node: &str,
    reason: &str,
) -> Result<String, InPlaceError> {
    let reason = rules::failure_reason(reason);
    warn!(node, %reason, "in-place update failed");
    patch_node(
        client,
        node,
        json!({"metadata": {
            "labels": {rules::LABEL_UPDATE_RESULT: rules::RESULT_FAILED},
            "annotations": {rules::ANNOTATION_FAILED_REASON: &reason},
        }}),
        "labelling the update failed",
    )
    .await?;
    Ok(reason)
}

/// Labels the Node `update-result=successful` and removes the failure reason and the
/// OS-version annotations.
async fn mark_successful(client: &Client, node: &str) -> Result<(), InPlaceError> {
    info!(node, "in-place update successful");
    patch_node(
        client,
        node,
        json!({"metadata": {
            "labels": {rules::LABEL_UPDATE_RESULT: rules::RESULT_SUCCESSFUL},
            "annotations": {
                rules::ANNOTATION_FAILED_REASON: null,
                rules::ANNOTATION_UPDATING_OS_VERSION: null,
            },
        }}),
        "labelling the update successful",
    )
    .await
}

/// Before the apply (see the module docs). `node` is the Node's name when known.
pub async fn prepare<H: Host>(
    ctx: &Context<'_, H>,
    new: Side<'_>,
    old: Option<Side<'_>>,
    checksum: &str,
    node: Option<&str>,
) -> Result<Prepared, InPlaceError> {
    let Some(spec) = &new.osc.spec.in_place_updates else {
        return Ok(Prepared::Apply);
    };
    let current = current_os_version(ctx.ports.host.as_ref())?;
    let mut journal = match load_journal(ctx, checksum)? {
        Some(journal) => journal,
        None => {
            let mut journal = changes::compute(old, new, checksum);
            journal.in_place_updates =
                rules::flags(old.map(|s| s.osc), new.osc, current.as_deref())?;
            persist(ctx, &journal)?;
            journal
        }
    };
    // Back after the reboot on the wanted version: the OS part is done.
    if journal.in_place_updates.operating_system
        && current
            .as_deref()
            .is_some_and(|v| rules::same_version(v, &spec.operating_system_version))
    {
        journal.in_place_updates.operating_system = false;
        persist(ctx, &journal)?;
    }
    let flags = journal.in_place_updates.clone();
    if !rules::any(&flags) {
        return Ok(Prepared::Apply);
    }
    let Some(node) = node else {
        info!("in-place update pending; waiting for the node to be registered");
        return Ok(Prepared::Wait);
    };
    let state = node_state(&ctx.ports.client, node).await?;
    match rules::gate(state.reason.as_deref(), state.result.as_deref()) {
        Gate::Wait => {
            info!(node, flags = ?flags, condition_reason = ?state.reason, "in-place update pending; waiting for machine-controller-manager to make the node ready (InPlaceUpdate/ReadyForUpdate)");
            return Ok(Prepared::Wait);
        }
        Gate::Retry => info!(node, "update-result=failed; retrying the in-place update"),
        Gate::Ready => info!(node, flags = ?flags, "node ready for the in-place update"),
    }
    if flags.kubelet.cpu_manager_policy {
        // Before the apply restarts kubelet: a state of the old policy keeps it from starting.
        ctx.ports
            .host
            .as_ref()
            .remove_file(Path::new(rules::CPU_MANAGER_STATE_PATH))
            .map_err(|e| InPlaceError::Host("removing kubelet's CPU manager state".into(), e))?;
    }
    Ok(Prepared::Apply)
}

/// After the apply (see the module docs). `token_sync` is woken on a service-account-key
/// rotation.
pub async fn finish<H: Host>(
    ctx: &Context<'_, H>,
    osc: &NodeOsc,
    checksum: &str,
    node: Option<&str>,
    token_sync: &tokio::sync::Notify,
) -> Result<Finished, InPlaceError> {
    let (Some(spec), Some(node)) = (&osc.spec.in_place_updates, node) else {
        return Ok(Finished::Done);
    };
    let mut journal = load_journal(ctx, checksum)?.unwrap_or_else(|| Journal::done(checksum));
    let flags = journal.in_place_updates.clone();
    let state = node_state(&ctx.ports.client, node).await?;
    let desired = &spec.operating_system_version;

    if rules::kubelet(&flags) {
        if let Err(error) = wait_for_kubelet(ctx.ports.host.as_ref(), ctx.kubelet_timeout).await {
            let reason = format!("kubelet is not healthy after the in-place update: {error}");
            return Ok(Finished::Stopped(
                mark_failed(&ctx.ports.client, node, &reason).await?,
            ));
        }
        journal.in_place_updates.kubelet = Default::default();
        persist(ctx, &journal)?;
    }

    if rules::rolled_back(&flags, state.attempted_os.as_deref(), desired) {
        let current = current_os_version(ctx.ports.host.as_ref())?.unwrap_or_default();
        let reason = match &state.failed_reason {
            Some(reason) => rules::failure_reason(reason),
            None => {
                let reason = format!(
                    "the OS update to {desired} did not take (or rolled back): the node runs {current}"
                );
                mark_failed(&ctx.ports.client, node, &reason).await?
            }
        };
        return Ok(Finished::Stopped(reason));
    }

    if flags.operating_system {
        let command = osc
            .status
            .in_place_updates
            .as_ref()
            .and_then(|s| s.os_update.as_ref())
            .filter(|u| !u.command.is_empty())
            .ok_or_else(|| InPlaceError::NoCommand(desired.clone()))?;
        patch_node(
            &ctx.ports.client,
            node,
            json!({"metadata": {"annotations": {rules::ANNOTATION_UPDATING_OS_VERSION: desired}}}),
            "annotating the OS update",
        )
        .await?;
        info!(node, command = ?command.command, args = ?command.args, "running the OS update");
        if let Err(reason) = run_os_update(ctx.ports.host.as_ref(), command, ctx.retry).await {
            return Ok(Finished::Stopped(
                mark_failed(&ctx.ports.client, node, &reason).await?,
            ));
        }
        let current = current_os_version(ctx.ports.host.as_ref())?;
        if !current
            .as_deref()
            .is_some_and(|v| rules::same_version(v, desired))
        {
            // The versions come from the OSC and the node's files: one line, no control
            // characters, before they reach the log.
            let reason = rules::failure_reason(&format!(
                "the OS update command succeeded; waiting for the node to reboot into {desired} (it runs {})",
                current.unwrap_or_default()
            ));
            info!(node, %reason, "in-place update waits for the reboot");
            return Ok(Finished::Stopped(reason));
        }
        journal.in_place_updates.operating_system = false;
        persist(ctx, &journal)?;
    }

    if flags.service_account_key_rotation {
        info!("service account key rotated; syncing the tokens");
        token_sync.notify_one();
        journal.in_place_updates.service_account_key_rotation = false;
        persist(ctx, &journal)?;
    }

    if flags.certificate_authorities_rotation.node_agent {
        if let Err(reason) = reissue_agent_certificate(ctx).await {
            return Ok(Finished::Stopped(
                mark_failed(&ctx.ports.client, node, &reason).await?,
            ));
        }
        journal
            .in_place_updates
            .certificate_authorities_rotation
            .node_agent = false;
        persist(ctx, &journal)?;
    }

    if flags.certificate_authorities_rotation.kubelet {
        if let Err(reason) = rebootstrap_kubelet(ctx).await {
            return Ok(Finished::Stopped(
                mark_failed(&ctx.ports.client, node, &reason).await?,
            ));
        }
        journal
            .in_place_updates
            .certificate_authorities_rotation
            .kubelet = false;
        persist(ctx, &journal)?;
    }

    if rules::should_report_success(state.reason.as_deref(), state.result.as_deref()) {
        delete_pods(&ctx.ports.client, node).await?;
        mark_successful(&ctx.ports.client, node).await?;
    }
    Ok(Finished::Done)
}

/// The node agent's part of a certificate authority rotation (GNA's
/// `requestNewKubeConfigForNodeAgent`): a new client certificate asked for with the current one
/// and written into `credentials/kubeconfig`, which names the CA file the apply has just
/// rewritten; every API client switches to it (one renewal, [`Renewer::renew_once`]). GNA
/// restarts itself afterwards; this agent goes on without a restart. Credentials that are not a
/// client certificate of `credentials/kubeconfig` (a token) have nothing to re-issue. `Err` is
/// the failure reason.
async fn reissue_agent_certificate<H: Host>(ctx: &Context<'_, H>) -> Result<(), String> {
    let Some(renewer) = ctx.renewer else {
        info!(
            "certificate authority rotation: the agent's credentials are not a client certificate of credentials/kubeconfig; nothing to re-issue"
        );
        return Ok(());
    };
    info!("certificate authority rotation: asking for a new client certificate for the node agent");
    match renewer.renew_once().await {
        Ok(facts) => {
            info!(serial = %facts.serial, "certificate authority rotation: the node agent has a new client certificate (no restart)");
            Ok(())
        }
        Err(BootstrapError::Certificate(CertificateError::NoCertificate(path))) => {
            info!(%path, "certificate authority rotation: the agent's kubeconfig has no client certificate (a token); nothing to re-issue");
            Ok(())
        }
        Err(error) => Err(format!(
            "requesting a new client certificate for the node agent after the certificate authority rotation failed: {}",
            error_chain(&error)
        )),
    }
}

/// kubelet's part of a certificate authority rotation (GNA's `rebootstrapKubelet` and the
/// health check after it): its bootstrap kubeconfig written from `kubeconfig-real` with its
/// current certificate, `kubeconfig-real` and `pki/` removed
/// ([`certificate_steps::rebootstrap_kubelet_files`]), `kubelet.service` restarted, and kubelet
/// healthy again within the in-place kubelet timeout. `Err` is the failure reason.
async fn rebootstrap_kubelet<H: Host>(ctx: &Context<'_, H>) -> Result<(), String> {
    info!(kubelet_dir = %ctx.ports.paths.kubelet_dir().display(), "certificate authority rotation: bootstrapping kubelet again");
    let server = credentials::server(ctx.config, "kubelet's bootstrap kubeconfig")
        .map_err(|error| format!("bootstrapping kubelet again: {}", error_chain(&error)))?;
    let ca = credentials::ca_source(ctx.config, &ctx.ports.paths, |path| path.exists());
    let done =
        certificate_steps::rebootstrap_kubelet_files(&ctx.ports.paths.kubelet_dir(), server, &ca)
            .map_err(|error| {
            format!(
                "bootstrapping kubelet again after the certificate authority rotation failed: {}",
                error_chain(&error)
            )
        })?;
    info!(
        ?done,
        "kubelet's bootstrap kubeconfig ready, kubeconfig-real and pki removed; restarting kubelet"
    );
    ctx.ports
        .host
        .as_ref()
        .unit_job(KUBELET_UNIT, UnitCommand::Restart)
        .await
        .map_err(|error| {
            format!(
                "restarting {KUBELET_UNIT} after the certificate authority rotation failed: {}",
                error_chain(&error)
            )
        })?;
    wait_for_kubelet(ctx.ports.host.as_ref(), ctx.kubelet_timeout)
        .await
        .map_err(|error| {
            format!("kubelet is not healthy after the certificate authority rotation: {error}")
        })?;
    info!("certificate authority rotation: kubelet bootstrapped again and healthy");
    Ok(())
}

/// Deletes the pods on `node` (DaemonSet pods and pods with local storage stay through the
/// drain and are recreated fresh), listed with the field selector the node-agent authorizer
/// requires.
async fn delete_pods(client: &Client, node: &str) -> Result<(), InPlaceError> {
    let pods = Api::<Pod>::all(client.clone())
        .list_metadata(&cluster::pods_on_node_params(node))
        .await
        .map_err(|e| InPlaceError::Api(format!("listing the pods on node {node}"), e))?;
    info!(
        node,
        pods = pods.items.len(),
        "deleting the pods on the node"
    );
    for pod in pods.items {
        let (Some(namespace), Some(name)) = (pod.metadata.namespace, pod.metadata.name) else {
            continue;
        };
        match Api::<Pod>::namespaced(client.clone(), &namespace)
            .delete(&name, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => {
                return Err(InPlaceError::Api(
                    format!("deleting pod {namespace}/{name}"),
                    e,
                ));
            }
        }
    }
    Ok(())
}

/// Runs the OS update command (no shell, [`Host::run_program`]), retrying while its output
/// says `network problems`; `Err` carries the failure reason of the failed run
/// ([`rules::command_failure_reason`]: the command's last message first, then the end of
/// its output; one line, bounded).
pub async fn run_os_update<H: Host>(
    host: &H,
    command: &OsUpdate,
    retry: RetryPolicy,
) -> Result<(), String> {
    let started = tokio::time::Instant::now();
    loop {
        let Err(output) = host
            .run_program(&command.command, &command.args, COMMAND_TIMEOUT)
            .await
        else {
            return Ok(());
        };
        let reason = rules::command_failure_reason(&command.command, &output);
        match rules::classify(&output.combined()) {
            Failure::Retriable if started.elapsed() + retry.interval <= retry.timeout => {
                warn!(%reason, retry_in = ?retry.interval, "the OS update hit network problems; retrying");
                tokio::time::sleep(retry.interval).await;
            }
            _ => return Err(reason),
        }
    }
}

/// Polls kubelet's health every 5 s until it answers 200 or `timeout` passes.
async fn wait_for_kubelet<H: Host>(host: &H, timeout: Duration) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let error = match host.kubelet_health(KUBELET_PROBE_TIMEOUT).await {
            Ok(()) => return Ok(()),
            Err(error) => error,
        };
        if tokio::time::Instant::now() + Duration::from_secs(5) > deadline {
            return Err(format!("not healthy within {timeout:?}: {error}"));
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::ports::fake_host::FakeHost;
    use crate::agent::ports::host::SystemHost;

    /// The real node, for the reads and programs these tests make (no systemd is called).
    fn system_host() -> SystemHost {
        SystemHost::new(
            "unix:path=/nonexistent".into(),
            Duration::from_secs(1),
            String::new(),
            String::new(),
            std::env::temp_dir(),
        )
    }

    fn script(dir: &Path, body: &str) -> OsUpdate {
        let path = dir.join("update");
        std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        OsUpdate {
            command: path.display().to_string(),
            args: vec!["12.8".into(), "$HOME `id`".into()],
        }
    }

    /// Issue #41 item 9: a FIFO where os-release is expected is refused at once instead of
    /// blocking the in-place step; a link to os-release is followed, a missing file is none.
    #[test]
    fn os_release_is_read_through_links_but_never_from_a_fifo() {
        let (_dir, base) = crate::safe_fs::tests::temp();
        let fifo = base.join("os-release");
        crate::safe_fs::tests::mkfifo(&fifo);
        let shown = fifo.display().to_string();
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            send.send(read_system_file(&system_host(), &shown).map_err(|e| e.to_string()))
        });
        let read = receive.recv_timeout(Duration::from_secs(10));
        assert!(
            matches!(&read, Ok(Err(_))),
            "a FIFO as os-release: {read:?}"
        );

        let real = base.join("usr-lib-os-release");
        std::fs::write(&real, "ID=debian\nVERSION_ID=\"12\"\n").unwrap();
        let link = base.join("etc-os-release");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let text = read_system_file(&system_host(), &link.display().to_string()).unwrap();
        assert_eq!(text.as_deref(), Some("ID=debian\nVERSION_ID=\"12\"\n"));
        let missing = base.join("missing").display().to_string();
        assert_eq!(read_system_file(&system_host(), &missing).unwrap(), None);
    }

    const FAST: RetryPolicy = RetryPolicy {
        interval: Duration::from_millis(50),
        timeout: Duration::from_millis(400),
    };

    #[tokio::test]
    async fn the_command_gets_its_args_verbatim_without_a_shell() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("args");
        let command = script(
            dir.path(),
            &format!("printf '%s|' \"$@\" > {}\n", out.display()),
        );
        assert_eq!(run_os_update(&system_host(), &command, FAST).await, Ok(()));
        assert_eq!(std::fs::read_to_string(out).unwrap(), "12.8|$HOME `id`|");
    }

    #[tokio::test]
    async fn fatal_output_fails_at_once_and_network_problems_are_retried() {
        let dir = tempfile::tempdir().unwrap();
        let count = dir.path().join("count");
        let command = script(
            dir.path(),
            &format!(
                "echo x >> {c}\necho 'invalid arguments: 13 is not a point release' >&2\nexit 2\n",
                c = count.display()
            ),
        );
        let error = run_os_update(&system_host(), &command, FAST)
            .await
            .unwrap_err();
        assert!(error.contains("invalid arguments: 13"), "{error}");
        assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 1);

        // Network problems twice, then success.
        let command = script(
            dir.path(),
            &format!(
                "echo x >> {c}.2\n[ $(wc -l < {c}.2) -ge 3 ] && exit 0\necho 'network problems: mirror' >&2\nexit 1\n",
                c = count.display()
            ),
        );
        assert_eq!(run_os_update(&system_host(), &command, FAST).await, Ok(()));
        // Network problems for ever: gives up after the timeout with the output.
        let command = script(dir.path(), "echo 'network problems: down'\nexit 1\n");
        let started = std::time::Instant::now();
        let error = run_os_update(&system_host(), &command, FAST)
            .await
            .unwrap_err();
        assert!(error.contains("network problems: down"), "{error}");
        assert!(started.elapsed() < Duration::from_secs(5));
        // A command that is not there.
        let missing = OsUpdate {
            command: dir.path().join("nope").display().to_string(),
            args: vec![],
        };
        let error = run_os_update(&system_host(), &missing, FAST)
            .await
            .unwrap_err();
        assert!(error.starts_with("system failure: cannot run"), "{error}");
    }

    #[tokio::test]
    async fn output_is_bounded_to_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let command = script(
            dir.path(),
            "head -c 300000 /dev/zero | tr '\\0' a\necho 'system failure: the end' >&2\nexit 1\n",
        );
        let error = run_os_update(&system_host(), &command, FAST)
            .await
            .unwrap_err();
        assert!(
            error.chars().count() <= rules::MAX_REASON_CHARS,
            "{}",
            error.len()
        );
        assert!(error.starts_with("system failure: the end ("), "{error}");
    }

    /// Issue #26 item 8: a failed `apt-get full-upgrade` prints pages of progress on standard
    /// output; the reason starts with the script's own last message, not with apt's lines.
    #[tokio::test]
    async fn the_scripts_last_message_leads_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let command = script(
            dir.path(),
            "i=0; while [ $i -lt 500 ]; do echo \"Get:$i http://deb.debian.org/debian bookworm/main pkg$i [12 kB]\"; i=$((i+1)); done\n\
             echo 'E: Sub-process /usr/bin/dpkg returned an error code (1)' >&2\n\
             printf '\\033[31msystem failure: apt-get full-upgrade failed (see above)\\n' >&2\nexit 1\n",
        );
        let error = run_os_update(&system_host(), &command, FAST)
            .await
            .unwrap_err();
        assert!(
            error.starts_with("[31msystem failure: apt-get full-upgrade failed (see above) ("),
            "{error}"
        );
        assert!(
            error.contains(": exit status: 1); output before it: …"),
            "{error}"
        );
        assert!(
            error.ends_with(
                "pkg499 [12 kB] E: Sub-process /usr/bin/dpkg returned an error code (1)"
            ),
            "{error}"
        );
        assert!(!error.chars().any(char::is_control), "{error:?}");
    }

    #[tokio::test]
    async fn kubelet_health_is_polled_until_the_timeout() {
        let host = FakeHost::default();
        assert_eq!(
            wait_for_kubelet(&host, Duration::from_secs(5)).await,
            Ok(())
        );
        host.set_kubelet_health(Err("connection refused".into()));
        let error = wait_for_kubelet(&host, Duration::from_millis(10))
            .await
            .unwrap_err();
        assert!(error.contains("connection refused"), "{error}");
    }
}
