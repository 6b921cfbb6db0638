//! One reconcile of the agent as a sequence of gates, in the order GNA and our rollout need
//! (`docs/agent.md#apply-order`, `#disruptive-rollout`):
//!
//! read the secret's OSC (with the seed's steering) → rollout gate → up to date? → paused? →
//! serial lock → in-place before →
//! plan (and a rollout slot for a disruptive change) → apply → restart self? → in-place after →
//! report on the Node.
//!
//! Each gate returns a [`ControlFlow`]: `Break(outcome)` ends the reconcile with that outcome,
//! `Continue(value)` goes on with what the next gate needs. The decisions stay in the features'
//! pure modules; the gates only put them in order.

use std::ops::ControlFlow;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use tracing::{info, warn};

use super::{Agent, LastApplied, checksum_of, osc_data};
use crate::agent::client_certificate;
use crate::agent::health::unit_events;
use crate::agent::in_place;
use crate::agent::outcome::{ReconcileError, Reconciled};
use crate::agent::pipeline::apply::{self, Input, Outcome, Summary};
use crate::agent::pipeline::changes::Side;
use crate::agent::pipeline::journal::Journal;
use crate::agent::pipeline::osc::{self, InvalidOsc, NodeOsc};
use crate::agent::ports::cluster::{self, ANNOTATION_NODE_CHECKSUM, NodeMeta};
use crate::agent::ports::host::Host;
use crate::agent::rollout::rules::{self, Change, Policy, RolloutState};
use crate::agent::rollout::slots::{self, Acquired};
use crate::agent::rollout::steering::{self, Steering};
use crate::agent::rollout::steps::{AllHeld, Gate};
use crate::api::constants::DATA_KEY_OPERATING_SYSTEM_CONFIG;
use crate::error_chain::printable as error_chain;

/// Ends the reconcile with a gate's outcome, or goes on with what the gate hands over.
macro_rules! go_on {
    ($gate:expr) => {
        match $gate {
            ControlFlow::Break(outcome) => return Ok(outcome),
            ControlFlow::Continue(value) => value,
        }
    };
}

/// What the secret asks for, read once at the start of a reconcile.
struct Target<'a> {
    secret: &'a Secret,
    /// The secret's checksum (`checksum/data-script`), reported on the Node once applied.
    checksum: String,
    /// GNA's serial reconciliation: one node at a time through a Lease.
    serial: bool,
    /// The disruptive rollout's policy, when the secret or the seed asks for one and the
    /// Node is known (serial mode takes precedence: it serialises every change already).
    rollout: Option<(Policy, &'a NodeMeta)>,
    /// The seed paused the pool's rollout (the pause's value).
    paused: Option<String>,
}

/// What the apply hands over to the report.
struct Applied {
    outcome: Outcome,
    /// The rollout state of a disruptive change (its slot is held until the node is healthy).
    disruptive: Option<RolloutState>,
    /// The OSC runs a control plane (a kube-apiserver manifest): the Node gets its role label.
    control_plane: bool,
}

impl<H: Host + 'static> Agent<H> {
    /// One reconcile (see the module docs).
    pub async fn reconcile(
        &self,
        secret: Option<&Secret>,
        node: Option<&NodeMeta>,
        last_applied: &mut LastApplied,
    ) -> Result<Reconciled, ReconcileError> {
        let Some(secret) = secret else {
            return Ok(Reconciled::NoSecret);
        };
        let steering = self.current_steering().await;
        let held = self.rollout().read_state().is_some();
        let (target, osc) = read_target(secret, node, &steering, held)?;
        let found = go_on!(self.rollout_gate_of(&target).await?);
        go_on!(self.up_to_date_gate(&target, node, found.as_ref()).await?);
        go_on!(self.pause_gate(&target, found.as_ref(), last_applied));
        go_on!(self.serial_gate(&target).await?);
        let applied = go_on!(
            self.apply_gate(&target, &osc, node, last_applied, found)
                .await?
        );
        let summary = go_on!(self.restart_self_gate(applied.outcome));
        let node_name = node.map(ResourceExt::name_any);
        let in_place = in_place::steps::finish(
            &self.in_place_context(),
            &osc,
            &target.checksum,
            node_name.as_deref(),
            &self.token_trigger,
        )
        .await
        .map(in_place::steps::Finished::halt);
        *last_applied = LastApplied::Known(Some(Box::new(osc)));
        if let Some(halt) = in_place? {
            return Ok(halt.into());
        }
        self.record_applied(&target.checksum, &summary);
        match node {
            Some(node) => {
                self.report(
                    &target,
                    node,
                    &summary,
                    applied.disruptive,
                    applied.control_plane,
                )
                .await
            }
            None => {
                info!("node not registered yet; the checksum is reported once it is");
                Ok(Reconciled::Applied)
            }
        }
    }

    /// The rollout's own gate ([`crate::agent::rollout::steps::Rollout::gate`]): a hold or a stop of this checksum
    /// ends the reconcile; otherwise hands over the rollout state found on the node.
    async fn rollout_gate_of(
        &self,
        target: &Target<'_>,
    ) -> Result<ControlFlow<Reconciled, Option<RolloutState>>, ReconcileError> {
        let Some((policy, node)) = &target.rollout else {
            return Ok(ControlFlow::Continue(None));
        };
        Ok(
            match self
                .rollout()
                .gate(target.secret, node, policy, &target.checksum)
                .await?
            {
                Gate::Done(outcome) => ControlFlow::Break(outcome),
                Gate::Go(found) => ControlFlow::Continue(found),
            },
        )
    }

    /// Ends the reconcile when the Node reports this checksum, the journal is done and the
    /// last applied OSC is on disk — unless a disruptive change of this checksum is not
    /// finished (a restart between the Node report and the hold, or a resumed stop), which is
    /// held and checked instead. Releases what an earlier apply still holds.
    async fn up_to_date_gate(
        &self,
        target: &Target<'_>,
        node: Option<&NodeMeta>,
        found: Option<&RolloutState>,
    ) -> Result<ControlFlow<Reconciled>, ReconcileError> {
        let paths = &self.settings.paths;
        let host = self.ports.host.as_ref();
        let journal_done = self.journal().is_some_and(|journal| {
            journal.operating_system_config_checksum == target.checksum && journal.is_empty()
        });
        let reported = node
            .and_then(|n| n.metadata.annotations.as_ref())
            .and_then(|a| a.get(ANNOTATION_NODE_CHECKSUM))
            .is_some_and(|value| *value == target.checksum);
        let rollout_pending = found.is_some_and(|state| state.checksum == target.checksum);
        let up_to_date = reported
            && journal_done
            && !rollout_pending
            && host.mode(&paths.last_applied()).ok().flatten().is_some();
        if !up_to_date {
            return Ok(ControlFlow::Continue(()));
        }
        if target.serial {
            self.release_serial_lock(target.secret).await?;
        }
        if target.rollout.is_some() {
            self.rollout()
                .up_to_date(target.secret, found.is_some())
                .await?;
        }
        Ok(ControlFlow::Break(Reconciled::UpToDate))
    }

    /// The seed's pause ([`steering::pause_holds`]): a node that runs a configuration and has
    /// not started applying this one waits (no slot, no lock taken); one whose apply of it is
    /// under way — work left in the journal, a disruptive change holding its slot — finishes.
    fn pause_gate(
        &self,
        target: &Target<'_>,
        found: Option<&RolloutState>,
        last_applied: &mut LastApplied,
    ) -> ControlFlow<Reconciled> {
        let Some(why) = &target.paused else {
            return ControlFlow::Continue(());
        };
        let first_apply = self.last_applied(last_applied).is_none();
        let journal_has_work = self.journal().is_some_and(|journal| {
            journal.operating_system_config_checksum == target.checksum && !journal.is_empty()
        });
        let holding = found.is_some_and(|state| state.checksum == target.checksum);
        if !steering::pause_holds(true, first_apply, journal_has_work || holding) {
            return ControlFlow::Continue(());
        }
        info!(checksum = %target.checksum, reason = %why, "rollout paused from the seed; not starting this configuration until the pause is lifted");
        ControlFlow::Break(Reconciled::Paused)
    }

    /// The journal on disk, when there is one and it parses.
    fn journal(&self) -> Option<Journal> {
        self.ports
            .host
            .read(&self.settings.paths.journal())
            .ok()
            .flatten()
            .and_then(|bytes| Journal::parse(&String::from_utf8_lossy(&bytes)))
    }

    /// The seed's steering of the pool ([`Steering`]) as the Lease watch last saw it; before
    /// the watch has seen the Lease, one GET of it (shared with the watch). A failed read is
    /// logged and the secret's own annotations rule this reconcile.
    pub(super) async fn current_steering(&self) -> Steering {
        let known = self.steering.borrow().clone();
        if known.known {
            return known;
        }
        let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
            kube::Api::namespaced(self.ports.client.clone(), cluster::NAMESPACE);
        match leases.get_opt(&self.settings.secret_name).await {
            Ok(lease) => {
                let read = Steering::of(lease.as_ref());
                self.steering.send_if_modified(|current| {
                    let first = !current.known;
                    if first {
                        *current = read.clone();
                    }
                    first
                });
                read
            }
            Err(error) => {
                self.ports.metrics.error("steering-watch", "api");
                warn!(error = %error_chain(&error), "reading the pool's Lease for the seed's rollout settings failed; going by the secret alone");
                known
            }
        }
    }

    /// In serial mode, the lock: held by another node ends the reconcile until it is free.
    async fn serial_gate(
        &self,
        target: &Target<'_>,
    ) -> Result<ControlFlow<Reconciled>, ReconcileError> {
        if !target.serial {
            return Ok(ControlFlow::Continue(()));
        }
        let secret = target.secret;
        let acquired = self
            .serial
            .lock()
            .await
            .acquire(secret)
            .await
            .map_err(|error| ReconcileError::SerialLock(secret.name_any(), error))?;
        Ok(match acquired {
            Acquired::Held => {
                info!(lease = %secret.name_any(), "serial reconciliation: holding the lock");
                ControlFlow::Continue(())
            }
            Acquired::Busy { holder, retry_in } => {
                info!(lease = %secret.name_any(), %holder, retry_in = ?retry_in, "serial reconciliation: another node holds the lock; waiting");
                ControlFlow::Break(Reconciled::AwaitingLock(retry_in))
            }
        })
    }

    /// In-place before, the plan (which the rollout classifies first: a disruptive change
    /// takes a slot or waits for one) and the apply. A failed apply stops a disruptive rollout
    /// on this node and leaves the last applied OSC to be read again (the file may or may not
    /// have been rewritten).
    async fn apply_gate(
        &self,
        target: &Target<'_>,
        osc: &NodeOsc,
        node: Option<&NodeMeta>,
        last_applied: &mut LastApplied,
        mut found: Option<RolloutState>,
    ) -> Result<ControlFlow<Reconciled, Applied>, ReconcileError> {
        let host = self.ports.host.as_ref();
        let checksum = target.checksum.as_str();
        let effective = osc::effective(osc, &self.settings.hostname);
        let control_plane = effective.file(cluster::KUBE_APISERVER_MANIFEST).is_some();
        let mut disruptive = None;
        let outcome = {
            let last = self.last_applied(last_applied);
            let last_effective = last.map(|last| osc::effective(last, &self.settings.hostname));
            let new = Side {
                osc,
                effective: &effective,
            };
            let old = last
                .zip(last_effective.as_ref())
                .map(|(osc, effective)| Side { osc, effective });
            let node_name = node.map(ResourceExt::name_any);
            let prepared = in_place::steps::prepare(
                &self.in_place_context(),
                new,
                old,
                checksum,
                node_name.as_deref(),
            )
            .await?;
            if let Some(halt) = prepared.halt() {
                return Ok(ControlFlow::Break(halt.into()));
            }
            let input = Input {
                checksum,
                osc,
                effective: &effective,
                last_applied: last.zip(last_effective.as_ref()),
                own_unit: &self.settings.own_unit,
                paths: &self.settings.paths,
            };
            // The rollout classifies the plan first (a failed plan returns here); the apply
            // then goes on from that plan instead of reading the journal again.
            let mut planned = None;
            if let Some((policy, node)) = &target.rollout {
                let plan = planned.insert(apply::plan(host, input)?);
                let change = rules::change_for(
                    &plan.0,
                    &policy.marked_units,
                    last.is_none(),
                    found.is_some(),
                );
                if let Change::Disruptive(why) = change {
                    match self
                        .rollout()
                        .take_slot(target.secret, node, policy, checksum, found.take(), &why)
                        .await?
                    {
                        Ok(state) => disruptive = Some(state),
                        Err(AllHeld { retry_in, slots }) => {
                            return Ok(ControlFlow::Break(Reconciled::AwaitingSlot {
                                retry_in,
                                slots,
                            }));
                        }
                    }
                }
            }
            match planned {
                Some(planned) => {
                    apply::apply_planned(host, &self.ports.secrets, input, planned).await
                }
                None => apply::apply(host, &self.ports.secrets, input).await,
            }
        };
        match outcome {
            Ok(outcome) => Ok(ControlFlow::Continue(Applied {
                outcome,
                disruptive,
                control_plane,
            })),
            Err(error) => {
                *last_applied = LastApplied::Unread;
                if let (Some(state), Some((_, node))) = (disruptive, &target.rollout) {
                    self.rollout()
                        .stop(node, state, rules::REASON_APPLY_FAILED, error_chain(&error))
                        .await?;
                }
                Err(error.into())
            }
        }
    }

    /// The agent's own unit changed: the reconcile ends so the process exits and systemd
    /// starts the new one, which resumes from the journal.
    fn restart_self_gate(&self, outcome: Outcome) -> ControlFlow<Reconciled, Summary> {
        match outcome {
            Outcome::RestartSelf(summary) => {
                self.record(&summary);
                ControlFlow::Break(Reconciled::RestartSelf)
            }
            Outcome::Applied(summary) => ControlFlow::Continue(summary),
        }
    }

    /// Metrics and the log line of a finished apply; a deleted token file wakes the token sync.
    fn record_applied(&self, checksum: &str, summary: &Summary) {
        self.record(summary);
        info!(
            %checksum,
            resumed = summary.resumed,
            files_written = summary.files_written.len(),
            files_deleted = summary.files_deleted.len(),
            units_written = summary.units_written.len(),
            units_deleted = summary.units_deleted.len(),
            jobs = ?summary.commands.iter().map(|c| format!("{}:{:?}", c.name, c.command)).collect::<Vec<_>>(),
            containerd_config_written = summary.containerd_config_written,
            "OSC applied to the node"
        );
        self.ports
            .metrics
            .last_applied_seconds
            .set(chrono::Utc::now().timestamp());
        if summary.files_deleted.iter().any(|path| {
            self.settings
                .token_sync_configs
                .iter()
                .any(|c| &c.path == path)
        }) {
            self.token_trigger.notify_one();
        }
    }

    /// The Node reports the checksum (annotation, kubernetes-version and role labels) and
    /// gets `OSCApplied` and the unit events; then a disruptive change holds its slot until
    /// the node is healthy, and GNA's serial lock is released.
    async fn report(
        &self,
        target: &Target<'_>,
        node: &NodeMeta,
        summary: &Summary,
        disruptive: Option<RolloutState>,
        control_plane: bool,
    ) -> Result<Reconciled, ReconcileError> {
        let name = node.name_any();
        let checksum = &target.checksum;
        self.remove_bootstrap_files();
        cluster::mark_applied(
            &self.ports.client,
            &name,
            checksum,
            self.settings.kubernetes_version.as_deref(),
            control_plane,
        )
        .await
        .map_err(|error| ReconcileError::Node(name.clone(), error))?;
        let restarted: Vec<_> = summary.commands.iter().map(|c| c.name.as_str()).collect();
        self.ports
            .event(
                node,
                false,
                "OSCApplied",
                format!(
                    "applied OSC {checksum}; unit jobs: {}",
                    if restarted.is_empty() {
                        "none".to_string()
                    } else {
                        restarted.join(", ")
                    }
                ),
            )
            .await;
        for event in unit_events::aggregate(&summary.commands, &[]) {
            self.ports
                .event(node, event.warning, event.reason, event.note)
                .await;
        }
        if let Some(state) = disruptive {
            return self.rollout().applied(state);
        }
        // As GNA: the lock is released once the node reports the new checksum.
        if target.serial || self.serial.lock().await.holds() {
            self.release_serial_lock(target.secret).await?;
        }
        Ok(Reconciled::Applied)
    }
}

impl<H: Host + 'static> Agent<H> {
    /// Once an OSC is applied and the Node exists, the bootstrap token and kubelet's bootstrap
    /// kubeconfig have done their work (GNA removes them at the same point). A failure is
    /// logged; the next reconcile tries again.
    fn remove_bootstrap_files(&self) {
        let paths = &self.settings.paths;
        let removed = client_certificate::steps::remove_bootstrap_files(
            &paths.bootstrap_token(),
            &paths.kubelet_dir(),
        );
        match removed {
            Ok(removed) => {
                for path in removed {
                    info!(path = %path.display(), "bootstrap file removed: the node is bootstrapped");
                }
            }
            Err(error) => {
                self.ports.metrics.error("client-certificate", "files");
                warn!(error = %error_chain(&error), "removing the bootstrap files failed; trying again after the next apply");
            }
        }
    }
}

/// The secret's OSC, decoded and validated (nothing on the node is touched before this
/// passes), with the containerd drop-in every node gets, and what the secret and the seed's
/// `steering` ask for; `held`: a rollout state file is on the node (a slot is held).
fn read_target<'a>(
    secret: &'a Secret,
    node: Option<&'a NodeMeta>,
    steering: &Steering,
    held: bool,
) -> Result<(Target<'a>, NodeOsc), ReconcileError> {
    let data = osc_data(secret).ok_or(InvalidOsc::MissingData(DATA_KEY_OPERATING_SYSTEM_CONFIG))?;
    let mut osc = osc::decode(data)?;
    osc::validate(&osc)?;
    apply::inject_containerd_drop_in(&mut osc);
    let annotations = steering::merged(secret.metadata.annotations.as_ref(), steering);
    let serial = slots::is_serial(Some(&annotations));
    // A slot held from before (a drift repair's, or a rollout turned off since) is still
    // held, checked and released by the rollout's gate, with the defaults where nothing
    // turns the rollout on.
    let rollout = rules::policy(Some(&annotations))
        .or_else(|| held.then(rules::drift_policy))
        .filter(|_| !serial)
        .zip(node);
    let target = Target {
        secret,
        checksum: checksum_of(secret),
        serial,
        rollout,
        paused: steering.paused().map(str::to_string),
    };
    Ok((target, osc))
}
