//! The drift check in the agent's loop (`docs/agent.md#drift-repair`): find what drifted
//! ([`drift::find`]), decide ([`drift::rules::decide`]), and act — report only, repair at once
//! (no unit restarted), or repair **in turn**: a repair that restarts units takes a rollout
//! slot of the pool first (the seed's budget, else 1), is held until the node is healthy like
//! a disruptive change (the hold runs in the reconcile's rollout gate, from the state file),
//! and waits while the seed pauses the pool. The Node condition
//! [`drift::rules::CONDITION_TYPE`] and the metric `drift_pending` say while drift stays on
//! the node; the condition is written only when it changes.

use std::time::Duration;

use k8s_openapi::api::core::v1::NodeCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use tokio::time::Instant;
use tracing::{info, warn};

use super::{Agent, LoopState, checksum_of};
use crate::agent::pipeline::drift::{self, Findings, rules::Action};
use crate::agent::pipeline::osc;
use crate::agent::ports::cluster::{self, ANNOTATION_NODE_CHECKSUM, NodeMeta};
use crate::agent::ports::host::Host;
use crate::agent::rollout::rules as rollout_rules;
use crate::agent::rollout::steering;
use crate::agent::rollout::steps::AllHeld;
use crate::error_chain::printable as error_chain;

/// How soon a repair that waits for its turn looks again (at the latest).
const WAIT_RETRY: Duration = Duration::from_secs(10);

/// Why a repair in turn did not start.
enum Waiting {
    /// Look again after this long (a slot may be free then, the node done applying …).
    Retry(Duration, String),
}

impl<H: Host + 'static> Agent<H> {
    /// One drift check (see the module docs). Skipped while the rollout holds or stopped this
    /// node (its state file is there): the hold decides about the node first.
    pub(super) async fn drift_check(&self, node: Option<&NodeMeta>, state: &mut LoopState) {
        if self.rollout().read_state().is_some() {
            return;
        }
        let Some(last) = self.last_applied(&mut state.last_applied) else {
            return;
        };
        let effective = osc::effective(last, &self.settings.hostname);
        let Some(findings) = drift::find(&self.ports, &effective, &self.settings.own_unit).await
        else {
            return;
        };
        let action = drift::rules::decide(self.settings.drift_mode, &findings);
        let mut waiting = None;
        match action {
            Action::Nothing => {}
            Action::Report => self.report_drift(node, &findings, state).await,
            Action::Repair => {
                let _ = drift::repair_and_report(&self.ports, node, &effective, &findings).await;
            }
            Action::RepairInTurn => {
                match self
                    .repair_in_turn(node, state.secret.as_ref(), &effective, &findings)
                    .await
                {
                    Ok(hold) => state.due = Some(Instant::now() + hold),
                    Err(Waiting::Retry(retry_in, why)) => {
                        info!(%why, retry_in = ?retry_in, drift = %findings.summary(), "drift repair waits for its turn");
                        state.drift_due = Instant::now() + retry_in;
                        waiting = Some(why);
                    }
                }
            }
        }
        let (status, reason) = drift::rules::condition(&action, waiting.is_some());
        self.ports
            .metrics
            .drift_pending
            .set(i64::from(status == "True"));
        let message = match (status, &waiting) {
            ("True", Some(why)) => format!("{}; waiting: {why}", findings.summary()),
            ("True", None) => findings.summary(),
            _ => "the node matches its applied configuration".to_string(),
        };
        self.keep_drift_condition(node, status, reason, message, state)
            .await;
    }

    /// Report mode: a log line and a Warning event (once per finding), nothing changed.
    async fn report_drift(
        &self,
        node: Option<&NodeMeta>,
        findings: &Findings,
        state: &mut LoopState,
    ) {
        let summary = findings.summary();
        warn!(files = ?findings.files, modes = ?findings.modes, unit_files = ?findings.unit_files, restart = ?findings.restart, "drift found; --drift-mode=report leaves it");
        if state.drift_reported.as_deref() == Some(summary.as_str()) {
            return;
        }
        if let Some(node) = node {
            self.ports
                .event(node, true, drift::rules::EVENT_DETECTED, summary.clone())
                .await;
        }
        state.drift_reported = Some(summary);
    }

    /// Takes a slot (unless paused or the node is not settled on its configuration), repairs
    /// and hands the node to the rollout's hold; returns when to look at the hold.
    async fn repair_in_turn(
        &self,
        node: Option<&NodeMeta>,
        secret: Option<&k8s_openapi::api::core::v1::Secret>,
        effective: &osc::Effective<'_>,
        findings: &Findings,
    ) -> Result<Duration, Waiting> {
        let wait = |why: &str| Waiting::Retry(WAIT_RETRY, why.to_string());
        let Some(node) = node else {
            return Err(wait("the Node is not known yet"));
        };
        let Some(secret) = secret else {
            return Err(wait("no node-agent secret"));
        };
        let checksum = checksum_of(secret);
        let reported = node
            .annotations()
            .get(ANNOTATION_NODE_CHECKSUM)
            .is_some_and(|c| *c == checksum);
        if !reported {
            return Err(wait(
                "the node has not applied its current configuration yet",
            ));
        }
        let steering = self.current_steering().await;
        if let Some(why) = steering.paused() {
            return Err(wait(&format!("the seed paused the pool's rollout ({why})")));
        }
        let merged = steering::merged(secret.metadata.annotations.as_ref(), &steering);
        let policy =
            rollout_rules::policy(Some(&merged)).unwrap_or_else(rollout_rules::drift_policy);
        let why = vec![format!(
            "drift repair: restart {}",
            findings.restart.join(", ")
        )];
        let rollout = self.rollout();
        let taken = rollout
            .take_slot(secret, node, &policy, &checksum, None, &why)
            .await
            .map_err(|error| Waiting::Retry(WAIT_RETRY, error_chain(&error)))?;
        let held = match taken {
            Ok(held) => held,
            Err(AllHeld { retry_in, slots }) => {
                return Err(Waiting::Retry(
                    retry_in.max(Duration::from_secs(1)),
                    format!("every one of the pool's {slots} rollout slot(s) is held"),
                ));
            }
        };
        match drift::repair_and_report(&self.ports, Some(node), effective, findings).await {
            Ok(_) => match rollout.applied(held) {
                Ok(crate::agent::outcome::Reconciled::Holding(hold)) => Ok(hold),
                Ok(_) => Ok(rollout_rules::HEALTH_POLL),
                Err(error) => Err(Waiting::Retry(WAIT_RETRY, error_chain(&error))),
            },
            Err(error) => {
                let message = format!("drift repair failed: {}", error_chain(&error));
                if let Err(error) = rollout
                    .stop(node, held, rollout_rules::REASON_APPLY_FAILED, message)
                    .await
                {
                    warn!(error = %error_chain(&error), "recording the stopped drift repair failed");
                }
                Ok(rollout_rules::RENEW_INTERVAL)
            }
        }
    }

    /// Writes the drift condition when its status, reason or message changed (and once after
    /// the agent starts, so a condition left from before is corrected).
    async fn keep_drift_condition(
        &self,
        node: Option<&NodeMeta>,
        status: &str,
        reason: &str,
        message: String,
        state: &mut LoopState,
    ) {
        let Some(node) = node else { return };
        let wanted = (status.to_string(), reason.to_string(), message.clone());
        if state.drift_condition.as_ref() == Some(&wanted) {
            return;
        }
        let now = Time(Timestamp::now());
        let condition = NodeCondition {
            type_: drift::rules::CONDITION_TYPE.to_string(),
            status: status.to_string(),
            reason: Some(reason.to_string()),
            message: Some(message),
            last_heartbeat_time: Some(now.clone()),
            last_transition_time: Some(now),
        };
        match cluster::patch_node_condition(&self.ports.client, &node.name_any(), &condition).await
        {
            Ok(()) => state.drift_condition = Some(wanted),
            Err(error) => {
                self.ports.metrics.error("drift", "api");
                warn!(error = %error_chain(&error), "patching the node's drift condition failed");
            }
        }
    }
}
