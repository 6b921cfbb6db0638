//! The disruptive rollout's I/O around one apply (`docs/agent.md#disruptive-rollout`): the
//! decisions are [`rules`]', the slots of the one Lease [`SerialLock`]'s; a [`Rollout`] reads and writes
//! the state file, the Node's condition and events, and asks the API server and kubelet how
//! the node is.
//!
//! Where it sits in the agent's reconcile: [`Rollout::gate`] runs first (a hold or a stop of the
//! secret's checksum is handled there and ends the reconcile), [`Rollout::take_slot`] between
//! computing the change set and applying it, [`Rollout::applied`] and [`Rollout::stop`] after
//! the apply.
//!
//! [`rules`]: crate::agent::rollout::rules

use std::sync::Mutex;

use k8s_openapi::api::core::v1::{NodeCondition, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use tracing::{info, warn};

use crate::agent::outcome::{ReconcileError, Reconciled};
use crate::agent::ports::Ports;
use crate::agent::ports::cluster::{self, NodeMeta};
use crate::agent::ports::host::Host;
use crate::agent::rollout::slots::{Acquired, SerialLock};
use crate::agent::rollout::{
    self,
    rules::{Phase, Policy, Resume, RolloutState, Verdict},
};
use crate::error_chain::printable as error_chain;

/// How long one probe of kubelet's health may take while a node is watched after a
/// disruptive change.
const KUBELET_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The rollout's I/O for one reconcile: the agent's ports and the rollout's own state.
pub struct Rollout<'a, H> {
    /// The agent's ports (the Node, its pods, the pool's Nodes; the state file; events).
    pub ports: &'a Ports<H>,
    /// The serial lock and the rollout's slots (one Lease).
    pub serial: &'a tokio::sync::Mutex<SerialLock>,
    /// The out-of-range budget last reported in an event (once per value in this process).
    pub reported_budget: &'a Mutex<Option<String>>,
}

/// [`Rollout::take_slot`] found every slot held by another node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllHeld {
    /// Until the next look at the latest.
    pub retry_in: std::time::Duration,
    /// How many slots the pool has now (what a watch of the Lease waits for).
    pub slots: u32,
}

/// What [`Rollout::gate`] leaves to the rest of the reconcile.
pub enum Gate {
    /// The reconcile ends with this.
    Done(Reconciled),
    /// Go on; the state found for this checksum or an earlier one (`Some`: this node holds a
    /// slot from it, so whatever it applies next is treated as disruptive).
    Go(Option<RolloutState>),
}

fn unix_now() -> i64 {
    Timestamp::now().as_second()
}

impl<H: Host> Rollout<'_, H> {
    /// The persisted rollout state, if any (an unreadable file is none).
    pub fn read_state(&self) -> Option<RolloutState> {
        let bytes = self
            .ports
            .host
            .read(&self.ports.paths.rollout_state())
            .ok()
            .flatten()?;
        RolloutState::parse(&bytes)
    }

    fn write_state(&self, state: &RolloutState) -> Result<(), ReconcileError> {
        self.ports
            .host
            .write(
                &self.ports.paths.rollout_state(),
                &state.to_bytes(),
                crate::agent::ports::paths::STATE_FILE_MODE,
            )
            .map_err(ReconcileError::RolloutState)
    }

    fn clear_state(&self) -> Result<(), ReconcileError> {
        self.ports
            .host
            .remove_file(&self.ports.paths.rollout_state())
            .map(drop)
            .map_err(ReconcileError::RolloutState)
    }

    /// First step of a reconcile with the rollout on: a resume asked on the Node is taken
    /// (and the annotation removed), a stop of this checksum stays (renewing the slot), a
    /// hold is checked. Anything else goes on.
    pub async fn gate(
        &self,
        secret: &Secret,
        node: &NodeMeta,
        policy: &Policy,
        checksum: &str,
    ) -> Result<Gate, ReconcileError> {
        self.report_invalid_budget(node, policy).await;
        let state = self.read_state();
        let node_name = node.name_any();
        let resume_asked = rollout::rules::resume_asked(node.metadata.annotations.as_ref());
        if resume_asked {
            cluster::remove_node_annotation(
                &self.ports.client,
                &node_name,
                rollout::rules::ANNOTATION_RESUME,
            )
            .await
            .map_err(|error| ReconcileError::Node(node_name.clone(), error))?;
        }
        // No state: nothing to resume, stay in or hold (`Resume::Fresh`).
        let Some(mut state) = state else {
            return Ok(Gate::Go(None));
        };
        match rollout::rules::resume(Some(&state), checksum, resume_asked) {
            Resume::Fresh | Resume::Continue => Ok(Gate::Go(Some(state))),
            Resume::Resumed => {
                info!(%checksum, "disruptive rollout resumed on request");
                self.ports
                    .event(
                        node,
                        false,
                        rollout::rules::EVENT_RESUMED,
                        format!(
                            "resuming the rollout of OSC {checksum} (annotation {} was set)",
                            rollout::rules::ANNOTATION_RESUME
                        ),
                    )
                    .await;
                // Back to `Applying`: the apply runs again (a finished one changes nothing)
                // and the node is held and checked again before the slot goes.
                state.phase = Phase::Applying;
                state.since = unix_now();
                state.reason = None;
                state.message = None;
                self.write_state(&state)?;
                Ok(Gate::Go(Some(state)))
            }
            Resume::Stay => {
                self.renew_slot(secret, node, policy).await?;
                Ok(Gate::Done(Reconciled::Stopped))
            }
            Resume::Hold => self.hold(secret, node, policy, state).await.map(Gate::Done),
        }
    }

    /// A Warning event when the budget annotation is out of range (once per value in this
    /// process; the rollout goes on with 1 slot).
    async fn report_invalid_budget(&self, node: &NodeMeta, policy: &Policy) {
        let first_sight = {
            let mut reported = self
                .reported_budget
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let first = policy.invalid_budget.is_some() && *reported != policy.invalid_budget;
            reported.clone_from(&policy.invalid_budget);
            first
        };
        let Some(value) = policy.invalid_budget.as_deref().filter(|_| first_sight) else {
            return;
        };
        let note = rollout::rules::invalid_budget_note(value);
        warn!(%note, "invalid rollout budget");
        self.ports
            .event(node, true, rollout::rules::EVENT_INVALID_BUDGET, note)
            .await;
    }

    /// How many slots the pool has ([`rollout::rules::slot_count`]): the budget, bounded by the
    /// number of Nodes with this Node's pool label (a LIST of at most `budget` of them, only
    /// when the budget is above 1; a Node without the label: the budget alone).
    async fn slot_count(&self, node: &NodeMeta, policy: &Policy) -> Result<u32, ReconcileError> {
        let pool = node
            .labels()
            .get(crate::api::constants::LABEL_WORKER_POOL)
            .filter(|_| policy.budget > 1);
        let Some(pool) = pool else {
            return Ok(rollout::rules::slot_count(policy.budget, None));
        };
        let nodes = cluster::count_pool_nodes(&self.ports.client, pool, policy.budget)
            .await
            .map_err(|error| ReconcileError::Node(node.name_any(), error))?;
        Ok(rollout::rules::slot_count(policy.budget, Some(nodes)))
    }

    /// Keeps the slot of a held or stopped node from expiring: renews it when the last write
    /// is older than [`rollout::rules::RENEW_INTERVAL`] (or unknown, after a restart). A slot
    /// lost meanwhile is replaced by a free one within the same bound as
    /// [`Rollout::take_slot`]'s ([`Rollout::slot_count`]).
    async fn renew_slot(
        &self,
        secret: &Secret,
        node: &NodeMeta,
        policy: &Policy,
    ) -> Result<(), ReconcileError> {
        if self
            .serial
            .lock()
            .await
            .renewed_within(rollout::rules::RENEW_INTERVAL)
        {
            return Ok(());
        }
        let slots = self.slot_count(node, policy).await?;
        let mut lock = self.serial.lock().await;
        match lock
            .acquire_slot(secret, slots)
            .await
            .map_err(|error| ReconcileError::SerialLock(secret.name_any(), error))?
        {
            Acquired::Held => {}
            Acquired::Busy { holder, .. } if holder.is_empty() => {
                warn!("renewing the slot lost every race with other nodes' writes; trying again");
            }
            Acquired::Busy { holder, .. } => {
                warn!(%holder, "the slot this node held was taken by another node (it expired)");
            }
        }
        Ok(())
    }

    /// Takes a slot for a disruptive apply of `checksum` and records `Applying` with the pods
    /// ready now. `Err`: every slot is held by another node; how long to wait at most.
    pub async fn take_slot(
        &self,
        secret: &Secret,
        node: &NodeMeta,
        policy: &Policy,
        checksum: &str,
        found: Option<RolloutState>,
        why: &[String],
    ) -> Result<Result<RolloutState, AllHeld>, ReconcileError> {
        let slots = self.slot_count(node, policy).await?;
        let slot = {
            let mut lock = self.serial.lock().await;
            let acquired = lock
                .acquire_slot(secret, slots)
                .await
                .map_err(|error| ReconcileError::SerialLock(secret.name_any(), error))?;
            if let Acquired::Busy { holder, retry_in } = acquired {
                info!(%holder, slots, retry_in = ?retry_in, why = ?why, "disruptive change: every slot is held; waiting");
                return Ok(Err(AllHeld { retry_in, slots }));
            }
            lock.held_slot().unwrap_or_default()
        };
        if let Some(state) = found.filter(|s| s.checksum == checksum && s.phase == Phase::Applying)
        {
            info!(%slot, why = ?why, "disruptive change: continuing with the slot");
            return Ok(Ok(state));
        }
        let node_name = node.name_any();
        let pods = cluster::pods_on_node(&self.ports.client, &node_name)
            .await
            .map_err(|error| ReconcileError::Node(node_name.clone(), error))?;
        let state = RolloutState {
            checksum: checksum.to_string(),
            phase: Phase::Applying,
            since: unix_now(),
            pods_ready_before: rollout::rules::ready_pods(&pods),
            reason: None,
            message: None,
        };
        self.write_state(&state)?;
        info!(%slot, why = ?why, pods_ready = state.pods_ready_before.len(), "disruptive change: holding a slot");
        Ok(Ok(state))
    }

    /// After a successful disruptive apply: hold the slot until the node is healthy.
    pub fn applied(&self, mut state: RolloutState) -> Result<Reconciled, ReconcileError> {
        state.phase = Phase::Holding;
        state.since = unix_now();
        self.write_state(&state)?;
        Ok(Reconciled::Holding(rollout::rules::HEALTH_POLL))
    }

    /// Stops the rollout on this node: the state says why, the slot stays, the Node gets the
    /// condition `False` and a Warning event. Failures to report are logged; the state file
    /// is what keeps the stop.
    pub async fn stop(
        &self,
        node: &NodeMeta,
        state: RolloutState,
        reason: &str,
        message: String,
    ) -> Result<(), ReconcileError> {
        warn!(reason, %message, checksum = %state.checksum, "disruptive rollout stopped on this node; the slot is kept");
        let note = format!(
            "rollout of OSC {} stopped: {message}; the slot is kept until a new OSC or the annotation {}",
            state.checksum,
            rollout::rules::ANNOTATION_RESUME
        );
        self.write_state(&state.stopped(reason, message, unix_now()))?;
        self.condition(node, "False", reason, note.clone()).await;
        self.ports
            .event(node, true, rollout::rules::EVENT_STOPPED, note)
            .await;
        Ok(())
    }

    /// One health check of a held node (see [`rollout::rules::judge`]). API errors while checking
    /// are logged and the check repeated: they say nothing about the node.
    async fn hold(
        &self,
        secret: &Secret,
        node: &NodeMeta,
        policy: &Policy,
        state: RolloutState,
    ) -> Result<Reconciled, ReconcileError> {
        self.renew_slot(secret, node, policy).await?;
        let elapsed = std::time::Duration::from_secs(
            u64::try_from(unix_now().saturating_sub(state.since)).unwrap_or_default(),
        );
        if elapsed < rollout::rules::MIN_HOLD {
            // `judge` holds whatever the node's health: nothing to ask yet.
            tracing::debug!(?elapsed, "disruptive change: holding the slot");
            return Ok(Reconciled::Holding(rollout::rules::HEALTH_POLL));
        }
        let node_name = node.name_any();
        let checking_failed = |error: kube::Error| {
            self.ports.metrics.error("rollout", "api");
            warn!(error = %error_chain(&error), "checking the node's health failed; checking again");
            Ok(Reconciled::Holding(rollout::rules::HEALTH_POLL))
        };
        let ready = match cluster::node_condition(&self.ports.client, &node_name, "Ready").await {
            Ok(ready) => ready,
            Err(error) => return checking_failed(error),
        };
        let mut health = rollout::rules::Health {
            node_ready: ready.is_some_and(|c| c.status == "True"),
            kubelet_healthy: self
                .ports
                .host
                .kubelet_health(KUBELET_PROBE_TIMEOUT)
                .await
                .is_ok(),
            pods_not_ready: Vec::new(),
        };
        // `judge` looks at the pods only on a Ready node with a healthy kubelet.
        if health.node_ready && health.kubelet_healthy {
            match cluster::pods_on_node(&self.ports.client, &node_name).await {
                Ok(pods) => {
                    health.pods_not_ready =
                        rollout::rules::not_ready_again(&state.pods_ready_before, &pods)
                }
                Err(error) => return checking_failed(error),
            }
        }
        match rollout::rules::judge(elapsed, policy, &health) {
            Verdict::Hold => {
                tracing::debug!(?health, ?elapsed, "disruptive change: holding the slot");
                Ok(Reconciled::Holding(rollout::rules::HEALTH_POLL))
            }
            Verdict::Fail(message) => {
                self.stop(node, state, rollout::rules::REASON_NOT_HEALTHY, message)
                    .await?;
                Ok(Reconciled::Stopped)
            }
            Verdict::Release { unsettled } => {
                self.release_slots(secret).await?;
                self.clear_state()?;
                let note = if unsettled.is_empty() {
                    format!(
                        "OSC {} applied, node healthy after {}s; slot released",
                        state.checksum,
                        elapsed.as_secs()
                    )
                } else {
                    format!(
                        "OSC {} applied, node healthy; slot released after the settle timeout with pods not ready: {}",
                        state.checksum,
                        unsettled.join(", ")
                    )
                };
                info!(%note, "disruptive change done");
                self.condition(node, "True", rollout::rules::REASON_HEALTHY, note.clone())
                    .await;
                self.ports
                    .event(node, false, rollout::rules::EVENT_RELEASED, note)
                    .await;
                Ok(Reconciled::UpToDate)
            }
        }
    }

    /// Releases a slot left from earlier (a restart between the Node report and the
    /// release) and forgets a state of another checksum (`state_found`: the gate read one).
    /// For an up-to-date node.
    pub async fn up_to_date(
        &self,
        secret: &Secret,
        state_found: bool,
    ) -> Result<(), ReconcileError> {
        self.release_slots(secret).await?;
        if state_found {
            self.clear_state()?;
        }
        Ok(())
    }

    /// Releases whichever slot of the pool this agent holds.
    async fn release_slots(&self, secret: &Secret) -> Result<(), ReconcileError> {
        self.serial
            .lock()
            .await
            .release(&secret.name_any())
            .await
            .map_err(|error| ReconcileError::SerialLock(secret.name_any(), error))
    }

    /// Writes the [`rollout::rules::CONDITION_TYPE`] condition (logged on failure).
    async fn condition(&self, node: &NodeMeta, status: &str, reason: &str, message: String) {
        let now = Time(Timestamp::now());
        let condition = NodeCondition {
            type_: rollout::rules::CONDITION_TYPE.to_string(),
            status: status.to_string(),
            reason: Some(reason.to_string()),
            message: Some(message),
            last_heartbeat_time: Some(now.clone()),
            last_transition_time: Some(now),
        };
        if let Err(error) =
            cluster::patch_node_condition(&self.ports.client, &node.name_any(), &condition).await
        {
            self.ports.metrics.error("rollout", "api");
            warn!(error = %error_chain(&error), "patching the node's rollout condition failed");
        }
    }
}
