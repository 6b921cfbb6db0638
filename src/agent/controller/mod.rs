//! The agent's main loop: one task that owns the OSC apply and the drift check, fed by the
//! secret and Node watches, plus side tasks for the token sync, node discovery and the metrics
//! server, and the heartbeat thread ([`crate::agent::liveness::heartbeat`]: the node Lease and the stop
//! deadline, on a thread of their own). SIGTERM or SIGINT ends the loop at its next await
//! point, also in the middle of a reconcile (the journal keeps what is left).
//!
//! When the OSC is applied (`docs/agent.md#reconciliation-delay`, `#apply-order`):
//! - the first sight of the secret after start, and a secret that reappears, apply at once;
//! - a changed `osc.yaml` applies after the Node's reconciliation delay (a later change does
//!   not push an earlier due time back) — at once when the secret asks for serial
//!   reconciliation ([`crate::agent::rollout::slots`]), where the lock spaces the nodes out instead;
//! - the Node becoming known applies at once (to report the checksum);
//! - otherwise every `syncPeriod` (a no-op while the Node reports the checksum);
//! - after a failure: 2 s, doubling up to 5 min.
//!
//! Besides, every minute and right after an apply, the units of the last applied OSC are
//! checked ([`unit_report`]) and the Node's `SystemdUnitsReady` condition is patched when it
//! changed.
//!
//! A reconcile is a sequence of gates, in `controller/reconcile.rs` (an invalid OSC → Warning
//! event, nothing touched, retried only when the secret changes or on the sync period).

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::{Client, ResourceExt};
use sha2::Digest;
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::agent::access::switching_client::Credentials;
use crate::agent::client_certificate;
use crate::agent::config::Settings;
use crate::agent::health::hostname_check;
use crate::agent::health::unit_check;
use crate::agent::health::unit_events;
use crate::agent::health::unit_report;
use crate::agent::metrics::Metrics;
use crate::agent::outcome::{ReconcileError, Reconciled};
use crate::agent::pipeline::apply::{self, ApplyError};
use crate::agent::pipeline::osc::{self, NodeOsc};
use crate::agent::ports::Ports;
use crate::agent::ports::cluster::{
    self, ANNOTATION_SECRET_CHECKSUM, ApiSecrets, NodeEvents, NodeMeta,
};
use crate::agent::ports::host::Host;
use crate::agent::restart_request;
use crate::agent::rollout;
use crate::agent::rollout::delay;
use crate::agent::rollout::lock_watch::{Awaited, LockWatch};
use crate::agent::rollout::slots::{self, SerialLock};
use crate::agent::rollout::steering::{self, Steering};
use crate::agent::self_healing;
use crate::api::constants::DATA_KEY_OPERATING_SYSTEM_CONFIG;
use crate::error_chain::printable as error_chain;

mod drift_turn;
mod reconcile;

/// First retry after a failed apply.
const FIRST_RETRY: Duration = Duration::from_secs(2);
/// Longest wait between retries.
const MAX_RETRY: Duration = Duration::from_secs(300);
/// Longest wait between attempts to read the OSC secret after its watch reported a change.
const MAX_SECRET_RETRY: Duration = Duration::from_secs(30);
/// How often an unknown Node is looked up again.
const NODE_LOOKUP_INTERVAL: Duration = Duration::from_secs(5);

/// Shared pieces of the running agent.
pub struct Agent<H: Host> {
    /// Settings.
    pub settings: Settings,
    /// What the features use: API client, host, paths, events, metrics, secrets.
    pub ports: Ports<H>,
    /// The client configuration every API client of the agent follows.
    pub credentials: Credentials,
    /// The renewal of the client certificate of `credentials/kubeconfig`, when the agent's
    /// credentials are that kubeconfig (periodic, and on a CA rotation in place).
    pub renewer: Option<Arc<client_certificate::lifecycle::Renewer>>,
    /// Wakes the token sync.
    pub token_trigger: Arc<Notify>,
    /// The serial reconciliation lock (used only when the secret asks for it).
    pub serial: tokio::sync::Mutex<SerialLock>,
    /// The out-of-range rollout budget last reported in an event (once per value).
    pub reported_budget: std::sync::Mutex<Option<String>>,
    /// The rollout settings and pause the seed carries on the pool's Lease, as last seen
    /// ([`rollout::steering_watch`] keeps it while the agent runs).
    pub steering: watch::Sender<Steering>,
}

/// State of the main loop.
struct LoopState {
    secret: Option<Secret>,
    /// sha256 of the last seen `osc.yaml` (a digest, not a copy: it can be large).
    seen_data: Option<[u8; 32]>,
    due: Option<Instant>,
    retry: Duration,
    last_delay: Duration,
    drift_due: Instant,
    reported_invalid: Option<String>,
    last_applied: LastApplied,
    unit_check_due: Instant,
    /// The `SystemdUnitsReady` condition as last written (or found) on the Node.
    units_condition: unit_report::Written,
    /// Reconcile again when the Node changes (an in-place update waits for it).
    wake_on_node: bool,
    /// While another node holds the serial lock: the watch that says when it is free.
    lock_watch: Option<LockWatch>,
    /// When to look at a restart request on the Node (the annotation was seen; again after a
    /// failure).
    restart_request_due: Option<Instant>,
    /// The restarts of the last restart request (they run beside the loop).
    restart_batch: restart_request::steps::Batch,
    /// When to read the kernel's host name again (`None`: fixed by `--hostname`).
    hostname_check_due: Option<Instant>,
    /// When to probe kubelet and containerd next, and what the last probes found.
    health_check_due: Instant,
    health: self_healing::steps::Trackers,
    /// The drift condition as last written on the Node (status, reason, message).
    drift_condition: Option<(String, String, String)>,
    /// The drift last reported in an event (report mode: once per finding).
    drift_reported: Option<String>,
}

/// Why the agent exits for systemd to start it again.
enum Exit {
    /// Its own unit changed (the new process resumes from the journal).
    OwnUnit,
    /// The kernel's host name changed to this.
    Hostname(String),
}

/// The last applied OSC, decoded once: read from `last-applied-osc.yaml` on first use, then
/// replaced by each OSC this process applies (the file holds the same). A large OSC is then
/// not decoded again on every change and drift check.
pub enum LastApplied {
    /// Not read from disk yet.
    Unread,
    /// Read or applied (`None`: there is none, or the file does not decode).
    Known(Option<Box<NodeOsc>>),
}

impl<H: Host + 'static> Agent<H> {
    /// The agent of `settings` on `host`, its API clients following `credentials`.
    /// `renews_certificate`: the credentials are `credentials/kubeconfig`, whose client
    /// certificate the agent renews (GNA renews only that one).
    pub fn new(
        settings: Settings,
        credentials: Credentials,
        renews_certificate: bool,
        host: Arc<H>,
        metrics: Metrics,
    ) -> Result<Self, kube::Error> {
        let client = credentials.client("agent")?;
        let renewer = renews_certificate.then(|| {
            Arc::new(client_certificate::lifecycle::Renewer::new(
                credentials.clone(),
                client.clone(),
                settings.config.clone(),
                settings.paths.clone(),
            ))
        });
        Ok(Agent {
            serial: tokio::sync::Mutex::new(SerialLock::new(&client, &settings.hostname)),
            reported_budget: std::sync::Mutex::default(),
            steering: watch::Sender::new(Steering::default()),
            ports: Ports {
                events: Arc::new(NodeEvents::new(&client, &settings.hostname)),
                secrets: ApiSecrets::new(&client),
                paths: settings.paths.clone(),
                client,
                host,
                metrics,
            },
            credentials,
            renewer,
            token_trigger: Arc::new(Notify::new()),
            settings,
        })
    }

    /// Runs until SIGTERM/SIGINT (returns `Ok`) or until the agent must restart itself
    /// (returns `Ok` too: systemd's `Restart=always` starts the new process).
    /// The heartbeat thread builds its own API client of [`Agent::credentials`].
    pub async fn run(
        self: Arc<Self>,
        ready: crate::http::Readiness,
    ) -> Result<(), crate::agent::error::AgentError> {
        self.run_until(ready, stop_signal()).await
    }

    /// [`Agent::run`] until `stop` says why (the name of a signal; an error stops the agent
    /// with it): the in-process tests stop an agent this way without signalling the process.
    /// Every task the agent started ends with it; the heartbeat thread ends at its next
    /// renewal.
    pub async fn run_until(
        self: Arc<Self>,
        ready: crate::http::Readiness,
        stop: impl Future<Output = Result<&'static str, std::io::Error>>,
    ) -> Result<(), crate::agent::error::AgentError> {
        let (node_tx, node_rx) = watch::channel::<Option<NodeMeta>>(None);
        let (secret_tx, mut secret_rx) = mpsc::channel::<Option<Secret>>(16);
        crate::agent::liveness::heartbeat::spawn(
            self.credentials.clone(),
            node_rx.clone(),
            self.ports.metrics.clone(),
        )
        .map_err(crate::agent::error::AgentError::Heartbeat)?;

        let mut tasks = tokio::task::JoinSet::new();
        if let Some(renewer) = &self.renewer {
            let renewal = client_certificate::lifecycle::Renewal {
                renewer: renewer.clone(),
                events: self.ports.events.clone(),
                node: node_rx.clone(),
                metrics: self.ports.metrics.clone(),
            };
            tasks.spawn(client_certificate::lifecycle::renew_forever(renewal));
        }
        {
            let agent = self.clone();
            tasks.spawn(async move { agent.track_node(node_tx).await });
        }
        {
            let agent = self.clone();
            tasks.spawn(async move {
                rollout::steering_watch::follow(
                    agent.ports.client.clone(),
                    agent.settings.secret_name.clone(),
                    &agent.steering,
                    agent.ports.metrics.clone(),
                )
                .await;
            });
        }
        {
            let client = self.ports.client.clone();
            let name = self.settings.secret_name.clone();
            let metrics = self.ports.metrics.clone();
            tasks.spawn(async move { follow_secret(client, name, metrics, secret_tx).await });
        }
        {
            let agent = self.clone();
            tasks.spawn(async move {
                crate::agent::access::token::run(
                    agent.ports.secrets.clone(),
                    agent.ports.host.as_ref(),
                    agent.settings.token_sync_configs.clone(),
                    agent.settings.token_sync_period,
                    &agent.token_trigger,
                    agent.ports.metrics.clone(),
                )
                .await;
            });
        }

        let result = self.main_loop(&mut secret_rx, node_rx, ready, stop).await;
        tasks.abort_all();
        result
    }

    async fn main_loop(
        &self,
        secret_rx: &mut mpsc::Receiver<Option<Secret>>,
        mut node_rx: watch::Receiver<Option<NodeMeta>>,
        ready: crate::http::Readiness,
        stop: impl Future<Output = Result<&'static str, std::io::Error>>,
    ) -> Result<(), crate::agent::error::AgentError> {
        let mut stop = std::pin::pin!(stop.fuse());
        let mut state = LoopState {
            secret: None,
            seen_data: None,
            due: None,
            retry: FIRST_RETRY,
            last_delay: Duration::ZERO,
            drift_due: Instant::now() + self.settings.drift_check_interval,
            reported_invalid: None,
            last_applied: LastApplied::Unread,
            unit_check_due: Instant::now() + unit_check::CHECK_INTERVAL,
            units_condition: None,
            wake_on_node: false,
            lock_watch: None,
            restart_request_due: None,
            restart_batch: restart_request::steps::Batch::default(),
            hostname_check_due: (!self.settings.hostname_fixed)
                .then(|| Instant::now() + hostname_check::CHECK_INTERVAL),
            health_check_due: Instant::now() + self_healing::rules::CHECK_INTERVAL,
            health: self_healing::steps::Trackers::default(),
            drift_condition: None,
            drift_reported: None,
        };
        let mut node_known = false;
        let mut steering_rx = self.steering.subscribe();
        loop {
            let wake = match state.due {
                Some(due) => due.min(state.drift_due),
                None => state.drift_due,
            }
            .min(state.unit_check_due)
            .min(state.health_check_due);
            let wake = [state.restart_request_due, state.hostname_check_due]
                .into_iter()
                .flatten()
                .fold(wake, Instant::min);
            let lock_free = state.lock_watch.as_ref().map(LockWatch::signal);
            tokio::select! {
                () = notified(lock_free.as_deref()) => {
                    match state.lock_watch.as_ref().map(LockWatch::awaited) {
                        Some(Awaited::Slots(_)) => info!("disruptive rollout: a slot is free; taking it"),
                        _ => info!("serial reconciliation: the lock is free; taking it"),
                    }
                    state.due = Some(Instant::now());
                }
                changed = steering_rx.changed() => {
                    if changed.is_err() { return Ok(()); }
                    steering_rx.borrow_and_update();
                    // A pause lifted or new settings: look again now (a no-op when up to date).
                    if state.secret.is_some() {
                        state.due = Some(Instant::now());
                    }
                }
                update = secret_rx.recv() => {
                    let Some(update) = update else { return Ok(()) };
                    ready.set_ready();
                    self.on_secret(&mut state, update, node_rx.borrow().as_ref());
                }
                changed = node_rx.changed() => {
                    if changed.is_err() { return Ok(()); }
                    let known = node_rx.borrow_and_update().is_some();
                    let resume = rollout::rules::resume_asked(node_rx.borrow().as_ref().and_then(|n| n.metadata.annotations.as_ref()));
                    if resume {
                        info!(annotation = rollout::rules::ANNOTATION_RESUME, "resume asked on the node");
                        state.due = Some(Instant::now());
                    }
                    if known && !node_known {
                        info!(node = %node_rx.borrow().as_ref().map(ResourceExt::name_any).unwrap_or_default(), "node known; reporting");
                        state.due = Some(Instant::now());
                    }
                    node_known = known;
                    if restart_requested(node_rx.borrow().as_ref()) {
                        state.restart_request_due = Some(Instant::now());
                    }
                    if known && state.wake_on_node {
                        state.wake_on_node = false;
                        state.due = Some(Instant::now());
                    }
                }
                () = tokio::time::sleep_until(wake) => {
                    // The work is raced with the signals: a stop does not wait for an apply.
                    tokio::select! {
                        exit = self.run_due(&mut state, &node_rx) => match exit {
                            Some(Exit::OwnUnit) => {
                                info!(unit = %self.settings.own_unit, "own unit changed; exiting so systemd starts the new agent");
                                return Ok(());
                            }
                            Some(Exit::Hostname(now)) => {
                                info!(from = %self.settings.hostname, to = %now, "host name changed; exiting so systemd starts the agent with the new one");
                                return Ok(());
                            }
                            None => {}
                        },
                        signal = &mut stop => {
                            let signal = signal.map_err(crate::agent::error::AgentError::Signal)?;
                            info!(signal, "stopping in the middle of a reconcile; the journal keeps the remaining work");
                            return Ok(());
                        }
                    }
                }
                signal = &mut stop => {
                    let signal = signal.map_err(crate::agent::error::AgentError::Signal)?;
                    info!(signal, "stopping");
                    return Ok(());
                }
            }
        }
    }

    /// The work due now: the reconcile, the unit check, the drift check, each when its time
    /// has come. `Some`: the agent must exit.
    async fn run_due(
        &self,
        state: &mut LoopState,
        node_rx: &watch::Receiver<Option<NodeMeta>>,
    ) -> Option<Exit> {
        if state
            .hostname_check_due
            .is_some_and(|due| due <= Instant::now())
        {
            state.hostname_check_due = Some(Instant::now() + hostname_check::CHECK_INTERVAL);
            match self.ports.host.kernel_hostname() {
                Ok(text) => {
                    if let Some(now) = hostname_check::changed(&self.settings.hostname, &text) {
                        return Some(Exit::Hostname(now));
                    }
                }
                Err(error) => warn!(%error, "reading the host name failed; checking again"),
            }
        }
        if state
            .restart_request_due
            .is_some_and(|due| due <= Instant::now())
        {
            let node = node_rx.borrow().as_ref().map(ResourceExt::name_any);
            state.restart_request_due = self
                .honour_restart_request(node.as_deref(), &mut state.restart_batch)
                .await;
        }
        if state.due.is_some_and(|due| due <= Instant::now()) {
            state.due = None;
            let node = node_rx.borrow().clone();
            let outcome = self.reconcile_and_schedule(state, node).await;
            self.follow_lock(state, outcome);
            match outcome {
                Reconciled::RestartSelf => return Some(Exit::OwnUnit),
                // Units were just started or restarted: report how they are.
                Reconciled::Applied => state.unit_check_due = Instant::now(),
                _ => {}
            }
        }
        if state.health_check_due <= Instant::now() {
            let node = node_rx.borrow().clone();
            self.check_health(node.as_ref(), state).await;
            state.health_check_due = Instant::now() + self_healing::rules::CHECK_INTERVAL;
        }
        if state.unit_check_due <= Instant::now() {
            let node = node_rx.borrow().clone();
            self.check_units(node.as_ref(), state).await;
            state.unit_check_due = Instant::now() + unit_check::CHECK_INTERVAL;
        }
        if state.drift_due <= Instant::now() {
            let node = node_rx.borrow().clone();
            self.drift_check(node.as_ref(), state).await;
            state.drift_due = Instant::now() + self.settings.drift_check_interval;
        }
        None
    }

    /// One round of health checks ([`self_healing`]) of what the last applied OSC runs, once
    /// the Node is known.
    async fn check_health(&self, node: Option<&NodeMeta>, state: &mut LoopState) {
        let Some(node) = node else { return };
        let components = self
            .last_applied(&mut state.last_applied)
            .map(self_healing::rules::watched)
            .unwrap_or_default();
        self_healing::steps::check(&self.ports, node, &components, &mut state.health).await;
    }

    /// The restart request on the Node ([`restart_request`]); when to look again (`None`: done).
    async fn honour_restart_request(
        &self,
        node: Option<&str>,
        batch: &mut restart_request::steps::Batch,
    ) -> Option<Instant> {
        let node = node?;
        let restarter = restart_request::steps::Restarter {
            ports: self.ports.clone(),
            own_unit: self.settings.own_unit.clone(),
        };
        match restart_request::steps::honour(restarter, batch, node).await {
            Ok(wait) => wait.map(|wait| Instant::now() + wait),
            Err(error) => {
                self.ports.metrics.error("restart-request", "api");
                warn!(error = %error_chain(&error), "honouring the restart request failed; trying again");
                Some(Instant::now() + NODE_LOOKUP_INTERVAL)
            }
        }
    }

    /// Watches the Lease of the serial lock and the rollout's slots while the reconcile waits
    /// for one ([`LockWatch`]), and only then.
    fn follow_lock(&self, state: &mut LoopState, outcome: Reconciled) {
        let awaited = match outcome {
            Reconciled::AwaitingLock(_) => Awaited::SerialLock,
            Reconciled::AwaitingSlot { slots, .. } => Awaited::Slots(slots),
            _ => {
                state.lock_watch = None;
                return;
            }
        };
        if state.lock_watch.as_ref().map(LockWatch::awaited) != Some(awaited) {
            state.lock_watch = Some(LockWatch::start(
                &self.ports.client,
                &self.settings.secret_name,
                &self.settings.hostname,
                awaited,
                &self.ports.metrics,
            ));
        }
    }

    /// Schedules work for a secret update (create → now, changed data → after the delay).
    fn on_secret(&self, state: &mut LoopState, update: Option<Secret>, node: Option<&NodeMeta>) {
        let Some(secret) = update else {
            if state.secret.is_some() {
                info!(secret = %self.settings.secret_name, "OSC secret deleted; keeping the node as it is");
            }
            state.secret = None;
            state.seen_data = None;
            return;
        };
        let digest: [u8; 32] = sha2::Sha256::digest(osc_data(&secret).unwrap_or_default()).into();
        let now = Instant::now();
        let due = match delay::trigger(state.seen_data.as_ref(), &digest) {
            delay::Trigger::Now => Some(now),
            delay::Trigger::Nothing => None,
            // GNA skips the delay in serial mode: the lock spaces the nodes out.
            delay::Trigger::AfterDelay
                if slots::is_serial(secret.metadata.annotations.as_ref()) =>
            {
                info!("OSC changed; serial reconciliation, applying once the lock is free");
                Some(now)
            }
            // The rollout's slots space disruptive changes out; quiet ones apply at once.
            delay::Trigger::AfterDelay
                if rollout::rules::policy(Some(&steering::merged(
                    secret.metadata.annotations.as_ref(),
                    &self.steering.borrow(),
                )))
                .is_some() =>
            {
                info!(
                    "OSC changed; disruptive rollout on, applying at once (disruptive changes wait for a slot)"
                );
                Some(now)
            }
            delay::Trigger::AfterDelay => {
                let (delay, error) = delay::reconciliation_delay(
                    node.and_then(|n| n.metadata.annotations.as_ref()),
                    state.last_delay,
                );
                if let Some(error) = error {
                    warn!(%error, annotation = delay::ANNOTATION_RECONCILIATION_DELAY, "unparsable reconciliation delay; using the last good one");
                }
                state.last_delay = delay;
                info!(delay = ?delay, "OSC changed; applying after the reconciliation delay");
                Some(now + delay)
            }
        };
        // Remember the data even when it is absent, so a later key is seen as a change.
        state.seen_data = Some(digest);
        state.secret = Some(secret);
        if let Some(due) = due {
            state.due = Some(delay::earliest(state.due, due));
            state.retry = FIRST_RETRY;
        }
    }

    async fn reconcile_and_schedule(
        &self,
        state: &mut LoopState,
        node: Option<NodeMeta>,
    ) -> Reconciled {
        let started = std::time::Instant::now();
        let result = self
            .reconcile(
                state.secret.as_ref(),
                node.as_ref(),
                &mut state.last_applied,
            )
            .await;
        let elapsed = started.elapsed();
        let sync = Some(Instant::now() + self.settings.sync_period);
        match result {
            Ok(outcome) => {
                let label = match outcome {
                    Reconciled::NoSecret => "no-secret",
                    Reconciled::UpToDate => "up-to-date",
                    Reconciled::AwaitingNode => "awaiting-node",
                    Reconciled::InPlaceStopped => "in-place-stopped",
                    Reconciled::Applied => "applied",
                    Reconciled::RestartSelf => "restart-self",
                    Reconciled::AwaitingLock(_) | Reconciled::AwaitingSlot { .. } => "waiting",
                    Reconciled::Holding(_) => "holding",
                    Reconciled::Stopped => "stopped",
                    Reconciled::Paused => "paused",
                };
                self.ports.metrics.reconciled(label);
                state.wake_on_node = outcome == Reconciled::AwaitingNode;
                state.retry = FIRST_RETRY;
                state.reported_invalid = None;
                state.due = match outcome {
                    Reconciled::AwaitingLock(retry_in)
                    | Reconciled::AwaitingSlot { retry_in, .. }
                    | Reconciled::Holding(retry_in) => Some(Instant::now() + retry_in),
                    Reconciled::Stopped => Some(Instant::now() + rollout::rules::RENEW_INTERVAL),
                    _ => state.due.or(sync),
                };
                if outcome == Reconciled::Applied {
                    info!(elapsed_ms = elapsed.as_millis() as u64, "OSC applied");
                }
                outcome
            }
            Err(ReconcileError::Invalid(error)) => {
                self.ports.metrics.reconciled("invalid");
                self.ports.metrics.error("apply", "invalid-osc");
                let checksum = state.secret.as_ref().map(checksum_of).unwrap_or_default();
                warn!(%error, secret = %self.settings.secret_name, %checksum, "OSC rejected; nothing on the node was changed");
                // Reported once per checksum, and only once there is a Node to report on (a
                // secret seen before the Node is reported when the Node becomes known).
                if state.reported_invalid.as_deref() != Some(checksum.as_str())
                    && let Some(node) = &node
                {
                    self.ports.event(node, true, "OSCInvalid", format!("OSC secret {} (checksum {checksum}) rejected, nothing changed on the node: {error}", self.settings.secret_name)).await;
                    state.reported_invalid = Some(checksum);
                }
                state.due = state.due.or(sync);
                Reconciled::NoSecret
            }
            Err(error) => {
                self.ports.metrics.reconciled("error");
                self.ports.metrics.error("apply", error.category());
                let retry = state.retry;
                warn!(error = %error_chain(&error), retry_in = ?retry, "applying the OSC failed; the journal keeps the remaining work");
                if let Some(node) = &node {
                    self.ports
                        .event(node, true, "OSCApplyFailed", error_chain(&error))
                        .await;
                    if let ReconcileError::Apply(ApplyError::Commands(failed)) = &error {
                        for event in unit_events::aggregate(&[], failed) {
                            self.ports
                                .event(node, event.warning, event.reason, event.note)
                                .await;
                        }
                    }
                }
                state.due = Some(Instant::now() + retry);
                state.retry = (retry * 2).min(MAX_RETRY);
                // Jobs may have failed: report the units' state now, not in a minute.
                if matches!(error, ReconcileError::Apply(ApplyError::Commands(_))) {
                    state.unit_check_due = Instant::now();
                }
                Reconciled::NoSecret
            }
        }
    }

    /// Releases the serial lock when this agent holds it (see [`SerialLock::release`]).
    async fn release_serial_lock(&self, secret: &Secret) -> Result<(), ReconcileError> {
        let name = secret.name_any();
        self.serial
            .lock()
            .await
            .release(&name)
            .await
            .map_err(|error| ReconcileError::SerialLock(name, error))
    }

    fn record(&self, summary: &apply::Summary) {
        self.ports
            .metrics
            .files_written
            .inc_by(summary.files_written.len() as u64);
        for command in &summary.commands {
            let name = match command.command {
                crate::api::operatingsystemconfig::UnitCommand::Start => "start",
                crate::api::operatingsystemconfig::UnitCommand::Restart => "restart",
                crate::api::operatingsystemconfig::UnitCommand::Stop => "stop",
            };
            self.ports.metrics.unit_job(name, "apply");
        }
    }

    /// The last applied OSC from the cache, reading the file on first use.
    fn last_applied<'c>(&self, cache: &'c mut LastApplied) -> Option<&'c NodeOsc> {
        if let LastApplied::Unread = cache {
            *cache = LastApplied::Known(self.read_last_applied().map(Box::new));
        }
        match cache {
            LastApplied::Known(osc) => osc.as_deref(),
            LastApplied::Unread => None,
        }
    }

    /// The last applied OSC on disk, if it is there and decodes.
    fn read_last_applied(&self) -> Option<NodeOsc> {
        let bytes = self
            .ports
            .host
            .read(&self.settings.paths.last_applied())
            .ok()
            .flatten()?;
        match osc::decode(&bytes) {
            Ok(osc) => Some(osc),
            Err(error) => {
                warn!(%error, "last-applied-osc.yaml does not decode; applying everything as new");
                None
            }
        }
    }

    /// The unit check ([`unit_report`]) of the last applied OSC, once the Node is known.
    async fn check_units(&self, node: Option<&NodeMeta>, state: &mut LoopState) {
        let Some(node) = node else { return };
        let Some(last) = self.last_applied(&mut state.last_applied) else {
            return;
        };
        unit_report::check(&self.ports, node, last, &mut state.units_condition).await;
    }

    /// The disruptive rollout's I/O for one reconcile ([`rollout::steps`]).
    fn rollout(&self) -> rollout::steps::Rollout<'_, H> {
        rollout::steps::Rollout {
            ports: &self.ports,
            serial: &self.serial,
            reported_budget: &self.reported_budget,
        }
    }

    /// What the in-place steps need ([`crate::agent::in_place::steps`]).
    fn in_place_context(&self) -> crate::agent::in_place::steps::Context<'_, H> {
        crate::agent::in_place::steps::Context {
            ports: &self.ports,
            retry: crate::agent::in_place::steps::RetryPolicy::default(),
            kubelet_timeout: crate::agent::in_place::steps::KUBELET_TIMEOUT,
            renewer: self.renewer.as_deref(),
            config: &self.settings.config,
        }
    }

    /// Finds the Node by host name (retrying until it exists), then follows it with a watch
    /// scoped to its name.
    async fn track_node(&self, node_tx: watch::Sender<Option<NodeMeta>>) {
        let hostname = &self.settings.hostname;
        let node = loop {
            match cluster::find_node(&self.ports.client, hostname).await {
                Ok(Some(node)) => break node,
                Ok(None) => tracing::debug!(%hostname, "no node for this host yet"),
                Err(error) => {
                    self.ports.metrics.error("node", "lookup");
                    warn!(error = %error_chain(&error), "looking up the node failed");
                }
            }
            tokio::time::sleep(NODE_LOOKUP_INTERVAL).await;
        };
        let name = node.name_any();
        info!(node = %name, %hostname, "found the node");
        let _ = node_tx.send(Some(node));
        let metrics = self.ports.metrics.clone();
        let stream = cluster::latest(
            cluster::watch_node(&self.ports.client, &name),
            move |error| {
                metrics.error("watch", "node");
                warn!(error = %error_chain(error), "watching the node failed; retrying");
            },
        );
        futures::pin_mut!(stream);
        while let Some(update) = stream.next().await {
            // A deleted Node is kept as last seen: the agent stays on its host.
            if let Some(node) = update
                && node_tx.send(Some(node)).is_err()
            {
                return;
            }
        }
        // The watch retries for ever; should it end, the last Node stays known (the sender
        // lives on), so the heartbeat keeps renewing the node Lease.
        std::future::pending::<()>().await;
    }
}

/// Whether the Node carries a restart request ([`restart_request::rules`]).
fn restart_requested(node: Option<&NodeMeta>) -> bool {
    node.and_then(|n| n.metadata.annotations.as_ref())
        .is_some_and(|a| a.contains_key(restart_request::rules::ANNOTATION_RESTART_SERVICES))
}

/// Waits for `signal`; forever without one.
async fn notified(signal: Option<&Notify>) {
    match signal {
        Some(signal) => signal.notified().await,
        None => std::future::pending().await,
    }
}

/// Follows the OSC secret: a metadata-only watch, and a GET of the secret whenever its
/// resourceVersion differs from the one last read (a failed GET is retried with backoff). Sends
/// `Some(secret)` for every new version and `None` when it is gone.
async fn follow_secret(
    client: Client,
    name: String,
    metrics: Metrics,
    secret_tx: mpsc::Sender<Option<Secret>>,
) {
    let on_error = {
        let (metrics, name) = (metrics.clone(), name.clone());
        move |error: &kube::runtime::watcher::Error| {
            metrics.error("watch", "secret");
            warn!(error = %error_chain(error), secret = %name, "watching the OSC secret failed; retrying");
        }
    };
    let stream = cluster::latest(cluster::watch_secret(&client, &name), on_error);
    futures::pin_mut!(stream);
    let mut read_version: Option<String> = None;
    while let Some(update) = stream.next().await {
        let secret = match update {
            None => None,
            Some(meta)
                if !is_new_version(
                    meta.metadata.resource_version.as_deref(),
                    read_version.as_deref(),
                ) =>
            {
                continue;
            }
            Some(_) => {
                let mut retry = FIRST_RETRY;
                loop {
                    match cluster::get_secret(&client, &name).await {
                        Ok(secret) => break secret,
                        Err(error) => {
                            metrics.error("watch", "secret-read");
                            warn!(error = %error_chain(&error), secret = %name, retry_in = ?retry, "reading the OSC secret failed");
                            tokio::time::sleep(retry).await;
                            retry = (retry * 2).min(MAX_SECRET_RETRY);
                        }
                    }
                }
            }
        };
        read_version = secret
            .as_ref()
            .and_then(|s| s.metadata.resource_version.clone());
        if secret_tx.send(secret).await.is_err() {
            return;
        }
    }
}

/// Waits for SIGTERM or SIGINT; names the one that came.
async fn stop_signal() -> Result<&'static str, std::io::Error> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = terminate.recv() => Ok("SIGTERM"),
        result = tokio::signal::ctrl_c() => result.map(|()| "SIGINT"),
    }
}

/// Whether the secret's watch reports a version not read yet (a relist repeats the last one).
/// An object without a resourceVersion is always read.
fn is_new_version(watched: Option<&str>, read: Option<&str>) -> bool {
    watched.is_none() || watched != read
}

/// The `osc.yaml` bytes of the secret.
fn osc_data(secret: &Secret) -> Option<&[u8]> {
    secret
        .data
        .as_ref()
        .and_then(|data| data.get(DATA_KEY_OPERATING_SYSTEM_CONFIG))
        .map(|value| value.0.as_slice())
}

/// The secret's `checksum/data-script`, verbatim; sha256 of `osc.yaml` when it is missing.
pub fn checksum_of(secret: &Secret) -> String {
    if let Some(checksum) = secret
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_SECRET_CHECKSUM))
        .filter(|c| !c.is_empty())
    {
        return checksum.clone();
    }
    hex::encode(sha2::Sha256::digest(osc_data(secret).unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_is_read_again_only_for_a_new_version() {
        // First sight, and after the secret was gone.
        assert!(is_new_version(Some("7"), None));
        // A relist after a watch error repeats the version last read.
        assert!(!is_new_version(Some("7"), Some("7")));
        assert!(is_new_version(Some("8"), Some("7")));
        // Without a version there is nothing to compare: read.
        assert!(is_new_version(None, Some("7")));
        assert!(is_new_version(None, None));
    }
}
