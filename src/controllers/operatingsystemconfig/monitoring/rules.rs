//! The shoot monitoring objects ([`super`]), rendered from the node-agent secret names (OSC
//! keys) whose agents run in the shoot and the shoot API server's CA (pure).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::api::constants::{LABEL_NODE_AGENT_SECRET_NAME, LABEL_WORKER_POOL};
use crate::api::nodeagent::DEFAULT_METRICS_PORT;

use super::super::nodeagent::MANAGED_RESOURCE_PREFIX;

/// The ManagedResource (for the seed) in the shoot namespace.
pub const MANAGED_RESOURCE: &str = "extension-node-monitoring";
/// The `job` label of the agents' series.
pub const JOB: &str = "gardener-extension-node-agent";
/// Name of the ScrapeConfig and of the PrometheusRule.
pub const SHOOT_OBJECTS: &str = "shoot-gardener-extension-node-agent";
/// Name of the dashboard ConfigMap.
pub const DASHBOARD: &str = "gardener-extension-node-agent-dashboard";
/// Name of the Secret with the shoot API server's CA for the scrape.
pub const CA_SECRET: &str = "gardener-extension-node-agent-scrape-ca";
/// The shoot Prometheus' own access Secret (gardenlet's; its token may `get nodes/proxy`).
pub const PROMETHEUS_ACCESS_SECRET: &str = "shoot-access-prometheus-shoot";
/// The shoot API server as the shoot Prometheus in the same namespace reaches it.
pub const API_SERVER: &str = "kube-apiserver:443";
/// The data key of the CA in [`CA_SECRET`].
pub const CA_KEY: &str = "bundle.crt";

/// The alert rules, as shipped (the PrometheusRule's `spec`).
pub const ALERTS_YAML: &str = include_str!("assets/alerts.yaml");
/// The dashboard, as shipped.
pub const DASHBOARD_JSON: &str = include_str!("assets/dashboard.json");

/// Why the objects could not be rendered (a broken asset: a build that cannot ship).
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// `assets/alerts.yaml` does not parse.
    #[error("the shipped alert rules do not parse")]
    Alerts(#[source] serde_norway::Error),
    /// A manifest does not serialize.
    #[error("serializing a monitoring manifest")]
    Json(#[source] serde_json::Error),
}

/// The OSC keys of the namespace's node-agent ManagedResources among `names` (ours are
/// `extension-osc-<key>`).
pub fn keys_of(names: &[String]) -> BTreeSet<String> {
    names
        .iter()
        .filter_map(|name| name.strip_prefix(MANAGED_RESOURCE_PREFIX))
        .filter(|key| !key.is_empty())
        .map(str::to_string)
        .collect()
}

/// The ManagedResource's data: ScrapeConfig, PrometheusRule, dashboard ConfigMap and CA
/// Secret in `namespace`, the scrape limited to Nodes whose node-agent secret label is one
/// of `keys`. `ca_data`: base64 of the PEM CA bundle of the shoot API server.
pub fn render(
    namespace: &str,
    keys: &BTreeSet<String>,
    ca_data: &str,
) -> Result<BTreeMap<String, Vec<u8>>, RenderError> {
    let objects = [
        ("scrapeconfig", scrape_config(namespace, keys)),
        ("prometheusrule", prometheus_rule(namespace)?),
        ("configmap", dashboard(namespace)),
        ("secret", ca_secret(namespace, ca_data)),
    ];
    objects
        .into_iter()
        .map(|(kind, object)| {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            let key = format!("{kind}__{namespace}__{name}.yaml");
            serde_json::to_vec(&object)
                .map(|bytes| (key, bytes))
                .map_err(RenderError::Json)
        })
        .collect()
}

/// The Prometheus label a Kubernetes node label becomes in service discovery
/// (`__meta_kubernetes_node_label_<name>`, every character outside `[a-zA-Z0-9_]` an `_`).
pub fn node_label_meta(label: &str) -> String {
    let sanitized: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("__meta_kubernetes_node_label_{sanitized}")
}

/// A regular expression matching exactly one of `values` (RE2, anchored by Prometheus);
/// every character outside `[a-zA-Z0-9_-]` escaped. No values: a regex that matches nothing
/// a label holds.
pub fn one_of(values: &BTreeSet<String>) -> String {
    if values.is_empty() {
        return "$^".to_string();
    }
    values
        .iter()
        .map(|value| {
            value
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                        c.to_string()
                    } else {
                        format!("\\{c}")
                    }
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("|")
}

fn credentials() -> Value {
    json!({"credentials": {"name": PROMETHEUS_ACCESS_SECRET, "key": "token"}})
}

fn tls() -> Value {
    json!({"ca": {"secret": {"name": CA_SECRET, "key": CA_KEY}}})
}

/// The ScrapeConfig (prometheus-operator `monitoring.coreos.com/v1alpha1`, `prometheus=shoot`):
/// the shoot's Nodes discovered through its API server, kept when their node-agent secret
/// label is one of `keys`, each scraped at `/api/v1/nodes/<node>:2752/proxy/metrics` on the
/// API server with the shoot Prometheus' token; only our metric families are kept.
pub fn scrape_config(namespace: &str, keys: &BTreeSet<String>) -> Value {
    let node_name = "__meta_kubernetes_node_name";
    json!({
        "apiVersion": "monitoring.coreos.com/v1alpha1",
        "kind": "ScrapeConfig",
        "metadata": {"name": SHOOT_OBJECTS, "namespace": namespace, "labels": {"prometheus": "shoot"}},
        "spec": {
            "honorLabels": false,
            "scheme": "HTTPS",
            "authorization": credentials(),
            "tlsConfig": tls(),
            "kubernetesSDConfigs": [{
                "role": "Node",
                "apiServer": format!("https://{API_SERVER}"),
                "followRedirects": false,
                "authorization": credentials(),
                "tlsConfig": tls(),
            }],
            "relabelings": [
                {"sourceLabels": [node_label_meta(LABEL_NODE_AGENT_SECRET_NAME)], "regex": one_of(keys), "action": "keep"},
                {"action": "replace", "replacement": JOB, "targetLabel": "job"},
                {"sourceLabels": [node_name], "targetLabel": "node"},
                {"sourceLabels": [node_label_meta(LABEL_WORKER_POOL)], "targetLabel": "pool"},
                {"targetLabel": "__address__", "replacement": API_SERVER},
                {"sourceLabels": [node_name], "regex": "(.+)", "targetLabel": "__metrics_path__",
                 "replacement": format!("/api/v1/nodes/${{1}}:{DEFAULT_METRICS_PORT}/proxy/metrics")},
                {"targetLabel": "type", "replacement": "shoot"},
            ],
            "metricRelabelings": [{
                "sourceLabels": ["__name__"],
                "regex": "gardener_extension_node_agent_.+|gardener_extension_node_build_info",
                "action": "keep",
            }],
        },
    })
}

/// The PrometheusRule (`prometheus=shoot`) with [`ALERTS_YAML`] as its spec.
pub fn prometheus_rule(namespace: &str) -> Result<Value, RenderError> {
    let spec: Value = serde_norway::from_str(ALERTS_YAML).map_err(RenderError::Alerts)?;
    Ok(json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": SHOOT_OBJECTS, "namespace": namespace, "labels": {"prometheus": "shoot"}},
        "spec": spec,
    }))
}

/// The dashboard ConfigMap (`dashboard.monitoring.gardener.cloud/shoot=true`).
pub fn dashboard(namespace: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": DASHBOARD, "namespace": namespace,
                     "labels": {"dashboard.monitoring.gardener.cloud/shoot": "true"}},
        "data": {"gardener-extension-node-agent.json": DASHBOARD_JSON},
    })
}

/// The Secret with the shoot API server's CA bundle (`ca_data`: base64 of PEM).
pub fn ca_secret(namespace: &str, ca_data: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": CA_SECRET, "namespace": namespace},
        "type": "Opaque",
        "data": {CA_KEY: ca_data},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(values: &[&str]) -> BTreeSet<String> {
        values.iter().map(|v| v.to_string()).collect()
    }

    #[test]
    fn keys_come_from_our_node_agent_managed_resources_only() {
        let names = [
            "extension-osc-gardener-node-agent-a-1".to_string(),
            "extension-osc-".to_string(),
            MANAGED_RESOURCE.to_string(),
            "extension-gvisor".to_string(),
        ];
        assert_eq!(keys_of(&names), keys(&["gardener-node-agent-a-1"]));
    }

    #[test]
    fn the_scrape_keeps_the_nodes_of_our_keys_through_the_node_proxy() {
        let config = scrape_config("shoot--p--s", &keys(&["gna-b", "gna-a.x"]));
        let relabelings = config["spec"]["relabelings"].as_array().unwrap();
        assert_eq!(
            relabelings[0]["sourceLabels"][0],
            "__meta_kubernetes_node_label_worker_gardener_cloud_gardener_node_agent_secret_name"
        );
        assert_eq!(relabelings[0]["regex"], r"gna-a\.x|gna-b");
        assert!(relabelings.iter().any(|r| r["replacement"]
            == "/api/v1/nodes/${1}:2752/proxy/metrics"
            && r["targetLabel"] == "__metrics_path__"));
        assert_eq!(config["metadata"]["labels"]["prometheus"], "shoot");
        assert_eq!(one_of(&BTreeSet::new()), "$^");
    }

    #[test]
    fn every_object_is_rendered_in_the_namespace() {
        let data = render("shoot--p--s", &keys(&["k"]), "Q0E=").unwrap();
        assert_eq!(data.len(), 4);
        for (key, bytes) in &data {
            let object: Value = serde_json::from_slice(bytes).unwrap();
            assert_eq!(object["metadata"]["namespace"], "shoot--p--s", "{key}");
        }
        let rule = prometheus_rule("ns").unwrap();
        let alerts: Vec<&str> = rule["spec"]["groups"][0]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r["alert"].as_str())
            .collect();
        assert!(alerts.contains(&"NodeAgentRolloutStopped"), "{alerts:?}");
        let dashboard: Value = serde_json::from_str(DASHBOARD_JSON).unwrap();
        assert!(
            dashboard["panels"]
                .as_array()
                .is_some_and(|p| !p.is_empty())
        );
    }

    #[test]
    fn every_alert_carries_gardeners_labels() {
        let rule = prometheus_rule("ns").unwrap();
        for alert in rule["spec"]["groups"][0]["rules"].as_array().unwrap() {
            for label in ["service", "severity", "type", "visibility"] {
                assert!(alert["labels"][label].is_string(), "{label} of {alert}");
            }
            assert_eq!(alert["labels"]["type"], "shoot");
            for annotation in ["summary", "description"] {
                assert!(alert["annotations"][annotation].is_string(), "{alert}");
            }
        }
    }

    #[test]
    fn every_agent_metric_the_alerts_and_the_dashboard_query_exists() {
        let mut registry = crate::metrics::new_registry();
        let metrics = crate::agent::metrics::Metrics::register(&mut registry);
        metrics.register_certificate(&mut registry);
        // A family without a series is not exposed: one of each.
        metrics.reconciled("applied");
        metrics.unit_job("restart", "apply");
        metrics.drift("file", 1);
        metrics.error("apply", "api");
        let exposed = crate::metrics::encode(&registry).unwrap();
        let shipped = format!("{ALERTS_YAML}{DASHBOARD_JSON}");
        let mut names: Vec<&str> = shipped
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|word| word.starts_with("gardener_extension_node_agent_"))
            .collect();
        names.sort_unstable();
        names.dedup();
        assert!(names.len() >= 8, "{names:?}");
        for name in names {
            let family = name.strip_suffix("_total").unwrap_or(name);
            assert!(
                exposed.contains(&format!("# TYPE {family} ")),
                "{name} is queried but the agent exposes no such family:\n{exposed}"
            );
        }
    }
}
