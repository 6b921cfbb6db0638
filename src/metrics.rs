//! The Prometheus registry of the operator.
//!
//! One [`Registry`] is built at start-up; controllers register their own metric families in
//! it (under a per-kind prefix) and the HTTP server encodes it on `/metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels of the build-info gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildInfoLabels {
    version: String,
}

/// Creates the process-wide registry with the metrics every subcommand exposes
/// (`gardener_extension_node_build_info{version}` = 1).
pub fn new_registry() -> Registry {
    let mut registry = Registry::with_prefix("gardener_extension_node");
    let build_info = Family::<BuildInfoLabels, Gauge>::default();
    build_info
        .get_or_create(&BuildInfoLabels {
            version: env!("CARGO_PKG_VERSION").to_string(),
        })
        .set(1);
    registry.register(
        "build_info",
        "Build information of the running binary",
        build_info,
    );
    registry
}

/// Encodes the registry in the OpenMetrics text format.
pub fn encode(registry: &Registry) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry)?;
    Ok(out)
}
