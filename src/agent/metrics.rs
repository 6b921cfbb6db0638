//! The agent's Prometheus metrics, served with `/healthz` and `/readyz` on a localhost port
//! (`--metrics-bind-address`, default `127.0.0.1:2752`). All names start with
//! `gardener_extension_node_agent_`; label values are bounded (results, commands, kinds,
//! error categories — never unit or file names).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// `result` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `applied`, `up-to-date`, `restart-self`, `waiting`, `awaiting-node`, `in-place-stopped`,
    /// `invalid`, `error`, `no-secret`.
    pub result: String,
}

/// Unit job labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    /// `restart`, `stop`, `start`.
    pub command: String,
    /// `apply` or `drift`.
    pub reason: String,
}

/// Drift repair labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DriftLabels {
    /// `file`, `mode`, `unit-file`.
    pub kind: String,
}

/// Error labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// Where: `apply`, `drift`, `lease`, `token`, `node`, `event`.
    pub component: String,
    /// The error category.
    pub category: String,
}

/// The agent's metric families; cheap to clone (shared atomics).
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// OSC reconciles by result.
    pub applies: Family<ResultLabels, Counter>,
    /// Unit jobs the agent ran.
    pub unit_jobs: Family<JobLabels, Counter>,
    /// Drift repairs by kind.
    pub drift_repairs: Family<DriftLabels, Counter>,
    /// Drift checks run.
    pub drift_checks: Counter,
    /// 1 while drift stays on the node (reported only, or its repair waits for its turn).
    pub drift_pending: Gauge,
    /// Errors by component and category.
    pub errors: Family<ErrorLabels, Counter>,
    /// Unix time of the last successful apply.
    pub last_applied_seconds: Gauge,
    /// Files written by applies.
    pub files_written: Counter,
    /// 1 while the node runs the configuration of the OSC secret (the last reconcile found it
    /// up to date or applied it), else 0.
    pub osc_current: Gauge,
    /// 1 while the disruptive rollout is stopped on this node, else 0.
    pub rollout_stopped: Gauge,
    /// 1 while the seed's pause keeps this node from applying its secret's content, else 0.
    pub rollout_paused: Gauge,
    /// Unix time the client certificate in use became valid (absent with a token).
    pub certificate_not_before_seconds: Gauge,
    /// Unix time the client certificate in use stops being valid (absent with a token).
    pub certificate_not_after_seconds: Gauge,
}

impl Metrics {
    /// Registers the families under `agent_` in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Metrics::default();
        let agent = registry.sub_registry_with_prefix("agent");
        agent.register(
            "applies",
            "OSC reconciles by result",
            metrics.applies.clone(),
        );
        agent.register(
            "unit_jobs",
            "systemd unit jobs run, by command and reason",
            metrics.unit_jobs.clone(),
        );
        agent.register(
            "drift_repairs",
            "Drifted files, modes and unit files repaired",
            metrics.drift_repairs.clone(),
        );
        agent.register(
            "drift_checks",
            "Drift checks run",
            metrics.drift_checks.clone(),
        );
        agent.register(
            "drift_pending",
            "1 while drift from the applied configuration stays on the node (reported only, or its repair waits for a rollout slot)",
            metrics.drift_pending.clone(),
        );
        agent.register(
            "errors",
            "Errors by component and category",
            metrics.errors.clone(),
        );
        agent.register(
            "last_applied_timestamp_seconds",
            "Unix time of the last successful OSC apply",
            metrics.last_applied_seconds.clone(),
        );
        agent.register(
            "files_written",
            "Files written by OSC applies",
            metrics.files_written.clone(),
        );
        agent.register(
            "osc_current",
            "1 while the node runs the configuration of its OSC secret, else 0",
            metrics.osc_current.clone(),
        );
        agent.register(
            "rollout_stopped",
            "1 while the disruptive rollout is stopped on this node, else 0",
            metrics.rollout_stopped.clone(),
        );
        agent.register(
            "rollout_paused",
            "1 while the seed's pause keeps this node from applying its configuration, else 0",
            metrics.rollout_paused.clone(),
        );
        metrics
    }

    /// Registers the client certificate's validity gauges (only an agent whose kubeconfig
    /// holds a certificate has them, so a token-based agent shows no series).
    pub fn register_certificate(&self, registry: &mut Registry) {
        let agent = registry.sub_registry_with_prefix("agent");
        agent.register(
            "client_certificate_not_before_timestamp_seconds",
            "Unix time the client certificate in use became valid",
            self.certificate_not_before_seconds.clone(),
        );
        agent.register(
            "client_certificate_not_after_timestamp_seconds",
            "Unix time the client certificate in use stops being valid",
            self.certificate_not_after_seconds.clone(),
        );
    }

    /// Records the result of one reconcile: the counter, and the gauges it decides
    /// ([`outcome_gauges`]).
    pub fn reconciled(&self, result: &str) {
        self.apply_result(result);
        let (current, stopped) = outcome_gauges(result);
        self.osc_current.set(current);
        if let Some(stopped) = stopped {
            self.rollout_stopped.set(stopped);
            self.rollout_paused.set(i64::from(result == "paused"));
        }
    }

    /// Records the validity of the client certificate in use.
    pub fn certificate(&self, not_before: i64, not_after: i64) {
        self.certificate_not_before_seconds.set(not_before);
        self.certificate_not_after_seconds.set(not_after);
    }

    /// Counts a reconcile result.
    pub fn apply_result(&self, result: &str) {
        self.applies
            .get_or_create(&ResultLabels {
                result: result.to_string(),
            })
            .inc();
    }

    /// Counts a unit job.
    pub fn unit_job(&self, command: &str, reason: &str) {
        self.unit_jobs
            .get_or_create(&JobLabels {
                command: command.to_string(),
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Counts drift repairs of one kind.
    pub fn drift(&self, kind: &str, count: usize) {
        if count > 0 {
            self.drift_repairs
                .get_or_create(&DriftLabels {
                    kind: kind.to_string(),
                })
                .inc_by(count as u64);
        }
    }

    /// Counts an error.
    pub fn error(&self, component: &str, category: &str) {
        self.errors
            .get_or_create(&ErrorLabels {
                component: component.to_string(),
                category: category.to_string(),
            })
            .inc();
    }
}

/// What a reconcile result says about the node (pure): `osc_current` (1 only when the node
/// runs the secret's configuration: `applied`, `up-to-date`) and `rollout_stopped` (`Some(1)`
/// for `stopped`, `Some(0)` for a result that passed the rollout's gate, `None` for a failure
/// before it — the stop, if any, stays as it was). `rollout_paused` follows the same rule with
/// `paused` for 1.
pub fn outcome_gauges(result: &str) -> (i64, Option<i64>) {
    let current = i64::from(matches!(result, "applied" | "up-to-date"));
    let stopped = match result {
        "stopped" => Some(1),
        "error" | "invalid" | "no-secret" => None,
        _ => Some(0),
    };
    (current, stopped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_exposed_with_the_agent_prefix() {
        let mut registry = crate::metrics::new_registry();
        let metrics = Metrics::register(&mut registry);
        metrics.apply_result("applied");
        metrics.unit_job("restart", "drift");
        metrics.drift("file", 2);
        metrics.drift("mode", 0);
        metrics.error("lease", "api");
        let text = crate::metrics::encode(&registry).unwrap();
        for line in [
            "gardener_extension_node_agent_applies_total{result=\"applied\"} 1",
            "gardener_extension_node_agent_unit_jobs_total{command=\"restart\",reason=\"drift\"} 1",
            "gardener_extension_node_agent_drift_repairs_total{kind=\"file\"} 2",
            "gardener_extension_node_agent_errors_total{component=\"lease\",category=\"api\"} 1",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        assert!(
            !text.contains("kind=\"mode\""),
            "zero repairs create no series"
        );
    }

    #[test]
    fn a_reconcile_result_sets_the_current_and_stopped_gauges() {
        let mut registry = crate::metrics::new_registry();
        let metrics = Metrics::register(&mut registry);
        metrics.reconciled("stopped");
        assert_eq!(
            (metrics.osc_current.get(), metrics.rollout_stopped.get()),
            (0, 1)
        );
        metrics.reconciled("error");
        assert_eq!(metrics.rollout_stopped.get(), 1, "a failure keeps the stop");
        metrics.reconciled("applied");
        assert_eq!(
            (metrics.osc_current.get(), metrics.rollout_stopped.get()),
            (1, 0)
        );
        metrics.reconciled("paused");
        assert_eq!(
            (metrics.osc_current.get(), metrics.rollout_paused.get()),
            (0, 1)
        );
        metrics.reconciled("error");
        assert_eq!(metrics.rollout_paused.get(), 1, "a failure keeps the pause");
        metrics.reconciled("waiting");
        assert_eq!(
            (metrics.osc_current.get(), metrics.rollout_paused.get()),
            (0, 0)
        );
        let text = crate::metrics::encode(&registry).unwrap();
        assert!(
            text.contains("gardener_extension_node_agent_osc_current 0"),
            "{text}"
        );
        assert!(
            text.contains("gardener_extension_node_agent_rollout_stopped 0"),
            "{text}"
        );
        assert!(
            text.contains("gardener_extension_node_agent_rollout_paused 0"),
            "{text}"
        );
        assert!(
            !text.contains("client_certificate"),
            "no certificate, no series: {text}"
        );
        metrics.register_certificate(&mut registry);
        metrics.certificate(100, 200);
        let text = crate::metrics::encode(&registry).unwrap();
        assert!(
            text.contains(
                "gardener_extension_node_agent_client_certificate_not_after_timestamp_seconds 200"
            ),
            "{text}"
        );
    }
}
