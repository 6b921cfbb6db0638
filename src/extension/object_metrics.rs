//! The object gauges of the leader, kept current by a small task: every [`SAMPLE_EVERY`] it
//! reads each controller's [`ObjectIndex`] (what its watch keeps of the objects its class and
//! type filter accepts; no API request) and sets
//!
//! - `gardener_extension_node_objects{kind, state}`: objects by `status.lastOperation.state`
//!   (`Succeeded`, `Processing`, `Error`, `Failed`, `Pending`, `Aborted`, `None` for no
//!   `lastOperation`);
//! - `gardener_extension_node_objects_unfinished_seconds_max{kind, state}`: among the objects
//!   now in an unfinished `state` (all but `Succeeded`), the longest time one has gone
//!   without reaching `Succeeded`, in seconds (0 when none is in that state). See
//!   [`super::object_states`] for when that time starts and why it is not the age of
//!   `lastUpdateTime`.
//!
//! The values come from the pure [`object_states::tally`]; this module registers the
//! families, copies the indexes out and runs the task. Only the leader starts it (a standby
//! has no controllers), so a standby exports the families without series.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use super::controller::ObjectIndex;
use super::object_states::{self, Tally};

/// How often the gauges are recomputed (the seed Prometheus scrapes once a minute).
pub const SAMPLE_EVERY: Duration = Duration::from_secs(30);

/// Labels of the object gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    /// Extension kind, e.g. `Worker`.
    pub kind: &'static str,
    /// `status.lastOperation.state`, or `None`.
    pub state: &'static str,
}

/// The object gauge families (cheap to clone; clones share the values).
#[derive(Clone, Debug, Default)]
pub struct ObjectMetrics {
    objects: Family<StateLabels, Gauge>,
    unfinished_seconds_max: Family<StateLabels, Gauge>,
}

impl ObjectMetrics {
    /// Registers `objects` and `objects_unfinished_seconds_max` in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = ObjectMetrics::default();
        registry.register(
            "objects",
            "Objects of our kinds and types in the leader's watch caches, by kind and status.lastOperation.state (None: no lastOperation)",
            metrics.objects.clone(),
        );
        registry.register(
            "objects_unfinished_seconds_max",
            "By kind and state: the longest time an object now in that unfinished state has gone without reaching Succeeded (retries and polls do not restart it)",
            metrics.unfinished_seconds_max.clone(),
        );
        metrics
    }

    /// Sets every gauge `tally` has a value for.
    pub fn publish(&self, tally: &Tally) {
        for (&(kind, state), &count) in &tally.objects {
            let labels = StateLabels {
                kind,
                state: state.as_str(),
            };
            self.objects
                .get_or_create(&labels)
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        for (&(kind, state), &seconds) in &tally.unfinished_seconds_max {
            let labels = StateLabels {
                kind,
                state: state.as_str(),
            };
            self.unfinished_seconds_max
                .get_or_create(&labels)
                .set(seconds);
        }
    }
}

/// The objects of one kind, as its controller's watch indexes them.
#[derive(Debug, Clone)]
pub struct Source {
    /// The kind.
    pub kind: &'static str,
    /// Its controller's index.
    pub index: ObjectIndex,
}

/// The gauge values of `sources` at `now` (unix seconds).
pub fn sample(sources: &[Source], now: i64) -> Tally {
    let kinds: Vec<&'static str> = sources.iter().map(|s| s.kind).collect();
    let objects = sources.iter().flat_map(|source| {
        source
            .index
            .tracked()
            .into_iter()
            .map(move |tracked| (source.kind, tracked))
    });
    object_states::tally(&kinds, objects, now)
}

/// Publishes a sample of `sources` at once and then every [`SAMPLE_EVERY`] until `shutdown`.
/// Start it once the controllers have listed their objects, or the first sample undercounts.
pub async fn run(sources: Vec<Source>, metrics: ObjectMetrics, shutdown: CancellationToken) {
    let mut ticker = tokio::time::interval(SAMPLE_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {
                metrics.publish(&sample(&sources, chrono::Utc::now().timestamp()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extension::object_states::{State, Tracked};

    #[test]
    fn a_published_tally_is_exported_by_kind_and_state() {
        let mut registry = crate::metrics::new_registry();
        let metrics = ObjectMetrics::register(&mut registry);
        let objects = [
            (
                "Worker",
                Tracked {
                    state: State::Processing,
                    unfinished_since: Some(100),
                },
            ),
            (
                "Worker",
                Tracked {
                    state: State::Succeeded,
                    unfinished_since: None,
                },
            ),
        ];
        metrics.publish(&object_states::tally(&["Worker"], objects, 2_000));
        let text = crate::metrics::encode(&registry).unwrap();
        for line in [
            r#"gardener_extension_node_objects{kind="Worker",state="Processing"} 1"#,
            r#"gardener_extension_node_objects{kind="Worker",state="Succeeded"} 1"#,
            r#"gardener_extension_node_objects{kind="Worker",state="None"} 0"#,
            r#"gardener_extension_node_objects_unfinished_seconds_max{kind="Worker",state="Processing"} 1900"#,
            r#"gardener_extension_node_objects_unfinished_seconds_max{kind="Worker",state="Error"} 0"#,
        ] {
            assert!(text.contains(line), "{line} missing in\n{text}");
        }
        assert!(
            !text.contains(r#"objects_unfinished_seconds_max{kind="Worker",state="Succeeded"}"#),
            "{text}"
        );
    }

    #[test]
    fn an_empty_index_still_yields_zeros_for_its_kind() {
        let sources = [Source {
            kind: "OperatingSystemConfig",
            index: ObjectIndex::default(),
        }];
        let tally = sample(&sources, 0);
        assert_eq!(tally.objects.len(), State::ALL.len());
        assert!(tally.objects.values().all(|&count| count == 0));
    }
}
