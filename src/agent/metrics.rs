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
    /// Errors by component and category.
    pub errors: Family<ErrorLabels, Counter>,
    /// Unix time of the last successful apply.
    pub last_applied_seconds: Gauge,
    /// Files written by applies.
    pub files_written: Counter,
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
        metrics
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
}
