//! Prometheus metrics of the extension controllers: reconciles by kind, operation and result,
//! errors by kind, operation and category, a duration histogram, and per kind the queue
//! depth, the runs in flight and the number of workers. Label values are bounded (three kinds, five operations, a fixed set of categories); object names are never
//! labels.

use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of the reconcile counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// Extension kind, e.g. `ContainerRuntime`.
    pub kind: &'static str,
    /// Operation: create, reconcile, delete, migrate, restore.
    pub operation: &'static str,
    /// `success`, `pending` or `error`.
    pub result: &'static str,
}

/// Labels of the error counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// Extension kind.
    pub kind: &'static str,
    /// Operation.
    pub operation: &'static str,
    /// Error category (bounded set chosen by the actuators).
    pub category: &'static str,
}

/// Labels of the duration histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DurationLabels {
    /// Extension kind.
    pub kind: &'static str,
    /// Operation.
    pub operation: &'static str,
}

/// Labels of per-kind gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// Extension kind.
    pub kind: &'static str,
}

/// The controller metric families (cheap to clone; clones share the values).
#[derive(Clone, Debug)]
pub struct ControllerMetrics {
    reconciles: Family<ReconcileLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    duration: Family<DurationLabels, Histogram>,
    queue_depth: Family<KindLabels, Gauge>,
    active_workers: Family<KindLabels, Gauge>,
    max_concurrent: Family<KindLabels, Gauge>,
}

impl ControllerMetrics {
    /// Registers the families under `controller_` in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = ControllerMetrics {
            reconciles: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.005, 2.0, 14))
            }),
            queue_depth: Family::default(),
            active_workers: Family::default(),
            max_concurrent: Family::default(),
        };
        let sub = registry.sub_registry_with_prefix("controller");
        sub.register(
            "reconciles",
            "Reconcile runs by kind, operation and result",
            metrics.reconciles.clone(),
        );
        sub.register(
            "errors",
            "Failed reconcile runs by kind, operation and error category",
            metrics.errors.clone(),
        );
        sub.register(
            "reconcile_duration_seconds",
            "Duration of reconcile runs",
            metrics.duration.clone(),
        );
        sub.register(
            "queue_depth",
            "Objects waiting in the work queue",
            metrics.queue_depth.clone(),
        );
        sub.register(
            "active_workers",
            "Reconcile runs in flight",
            metrics.active_workers.clone(),
        );
        sub.register(
            "max_concurrent_reconciles",
            "Workers of the kind (--max-concurrent-reconciles)",
            metrics.max_concurrent.clone(),
        );
        metrics
    }

    /// Starts timing one run; call [`RunTimer::finish`] with its result.
    pub fn start(&self, kind: &'static str) -> RunTimer<'_> {
        RunTimer {
            metrics: self,
            kind,
            started: Instant::now(),
        }
    }

    /// Sets the queue depth gauge of `kind`.
    pub fn set_queue_depth(&self, kind: &'static str, depth: usize) {
        self.queue_depth
            .get_or_create(&KindLabels { kind })
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }
}

impl ControllerMetrics {
    /// Sets the number of workers of `kind`.
    pub fn set_max_concurrent(&self, kind: &'static str, workers: usize) {
        self.max_concurrent
            .get_or_create(&KindLabels { kind })
            .set(i64::try_from(workers).unwrap_or(i64::MAX));
    }

    /// Counts one run of `kind` in flight until the returned guard is dropped.
    pub fn active_worker(&self, kind: &'static str) -> ActiveWorker {
        let gauge = self
            .active_workers
            .get_or_create(&KindLabels { kind })
            .clone();
        gauge.inc();
        ActiveWorker { gauge }
    }
}

/// One run in flight (see [`ControllerMetrics::active_worker`]).
#[derive(Debug)]
pub struct ActiveWorker {
    gauge: Gauge,
}

impl Drop for ActiveWorker {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// Times one reconcile run.
#[derive(Debug)]
pub struct RunTimer<'a> {
    metrics: &'a ControllerMetrics,
    kind: &'static str,
    started: Instant,
}

impl RunTimer<'_> {
    /// Records the run: its operation, `success`/`pending`/`error` and, for errors, the
    /// category.
    pub fn finish(
        self,
        operation: &'static str,
        result: &'static str,
        category: Option<&'static str>,
    ) {
        let kind = self.kind;
        self.metrics
            .duration
            .get_or_create(&DurationLabels { kind, operation })
            .observe(self.started.elapsed().as_secs_f64());
        self.metrics
            .reconciles
            .get_or_create(&ReconcileLabels {
                kind,
                operation,
                result,
            })
            .inc();
        if let Some(category) = category {
            self.metrics
                .errors
                .get_or_create(&ErrorLabels {
                    kind,
                    operation,
                    category,
                })
                .inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_runs_errors_and_durations() {
        let mut registry = Registry::default();
        let metrics = ControllerMetrics::register(&mut registry);
        metrics
            .start("ContainerRuntime")
            .finish("reconcile", "success", None);
        metrics
            .start("ContainerRuntime")
            .finish("reconcile", "error", Some("render"));
        metrics.set_queue_depth("ContainerRuntime", 3);
        metrics.set_max_concurrent("ContainerRuntime", 5);
        let first = metrics.active_worker("ContainerRuntime");
        let second = metrics.active_worker("ContainerRuntime");
        drop(first);
        let text = crate::metrics::encode(&registry).unwrap();
        assert!(text.contains(r#"controller_reconciles_total{kind="ContainerRuntime",operation="reconcile",result="success"} 1"#), "{text}");
        assert!(text.contains(r#"controller_errors_total{kind="ContainerRuntime",operation="reconcile",category="render"} 1"#), "{text}");
        assert!(
            text.contains("controller_reconcile_duration_seconds_count"),
            "{text}"
        );
        assert!(
            text.contains(r#"controller_queue_depth{kind="ContainerRuntime"} 3"#),
            "{text}"
        );
        assert!(
            text.contains(r#"controller_active_workers{kind="ContainerRuntime"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"controller_max_concurrent_reconciles{kind="ContainerRuntime"} 5"#),
            "{text}"
        );
        drop(second);
    }
}
