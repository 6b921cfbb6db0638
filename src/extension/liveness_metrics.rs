//! The operator's liveness gauges, which the seed alerts read (docs/operations.md, "Seed
//! alerts and dashboard"):
//!
//! - `gardener_extension_node_leader`: 1 while this replica reconciles, that is from winning
//!   the leader Lease ([`super::leader`]), or from the start without leader election; 0 on a
//!   standby and once the Lease is lost (the process then exits). Set by `crate::operator`.
//! - `gardener_extension_node_heartbeat_last_renew_timestamp_seconds`: unix time of the last
//!   successful renewal of the heartbeat Lease ([`super::heartbeat`]); 0 until the first one
//!   (a standby never renews it).

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The liveness gauges (cheap to clone; clones share the values).
#[derive(Clone, Debug, Default)]
pub struct LivenessMetrics {
    leader: Gauge,
    heartbeat_renewed: Gauge<f64, AtomicU64>,
}

impl LivenessMetrics {
    /// Registers `leader` and `heartbeat_last_renew_timestamp_seconds` in `registry`, both 0.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = LivenessMetrics::default();
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease and reconciles (or runs without leader election), 0 otherwise",
            metrics.leader.clone(),
        );
        registry.register(
            "heartbeat_last_renew_timestamp_seconds",
            "Unix time of the last successful renewal of the heartbeat Lease (0: not renewed by this replica)",
            metrics.heartbeat_renewed.clone(),
        );
        metrics
    }

    /// Records whether this replica leads.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// Records a successful heartbeat renewal at `at`.
    pub fn heartbeat_renewed(&self, at: chrono::DateTime<chrono::Utc>) {
        // Milliseconds are all a Lease's renewTime precision is worth here.
        let seconds = at.timestamp_millis() as f64 / 1000.0;
        self.heartbeat_renewed.set(seconds);
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn leader_and_heartbeat_are_exported_at_the_top_level() {
        let mut registry = crate::metrics::new_registry();
        let metrics = LivenessMetrics::register(&mut registry);
        let text = crate::metrics::encode(&registry).unwrap();
        assert!(
            text.contains("\ngardener_extension_node_leader 0\n"),
            "{text}"
        );
        assert!(
            text.contains("\ngardener_extension_node_heartbeat_last_renew_timestamp_seconds 0.0\n"),
            "{text}"
        );

        metrics.set_leader(true);
        let renewed = chrono::Utc
            .with_ymd_and_hms(2026, 12, 1, 8, 0, 0)
            .unwrap()
            .checked_add_signed(chrono::Duration::milliseconds(250))
            .unwrap();
        metrics.heartbeat_renewed(renewed);
        let text = crate::metrics::encode(&registry).unwrap();
        assert!(
            text.contains("\ngardener_extension_node_leader 1\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "\ngardener_extension_node_heartbeat_last_renew_timestamp_seconds 1796112000.25\n"
            ),
            "{text}"
        );

        metrics.set_leader(false);
        let text = crate::metrics::encode(&registry).unwrap();
        assert!(
            text.contains("\ngardener_extension_node_leader 0\n"),
            "{text}"
        );
    }
}
