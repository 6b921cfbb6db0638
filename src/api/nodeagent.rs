//! `NodeAgentConfiguration` (`nodeagent.config.gardener.cloud/v1alpha1`): the config file of
//! the node agent, `/var/lib/gardener-node-agent/config-<version>.yaml`.
//!
//! gardenlet renders it into the OperatingSystemConfig as a file; the node agent reads it at
//! start. Decoding is lenient (unknown fields ignored) and [`NodeAgentConfiguration::from_yaml`]
//! applies the same defaults as upstream. Not a CRD.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use kube::core::Duration;
use serde::{Deserialize, Serialize};

/// `apiVersion` of [`NodeAgentConfiguration`].
pub const NODE_AGENT_CONFIGURATION_API_VERSION: &str = "nodeagent.config.gardener.cloud/v1alpha1";
/// `kind` of [`NodeAgentConfiguration`].
pub const NODE_AGENT_CONFIGURATION_KIND: &str = "NodeAgentConfiguration";
/// Default port of the health probe server.
pub const DEFAULT_HEALTH_PROBES_PORT: u16 = 2751;
/// Default port of the metrics server.
pub const DEFAULT_METRICS_PORT: u16 = 2752;

/// Configuration of the node agent.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeAgentConfiguration {
    /// `nodeagent.config.gardener.cloud/v1alpha1`.
    pub api_version: String,
    /// `NodeAgentConfiguration`.
    pub kind: String,
    /// Kubeconfig and client settings for the shoot API server. An empty kubeconfig means the
    /// agent obtains credentials itself (bootstrap token, then a client certificate).
    pub client_connection: ClientConnectionConfiguration,
    /// Log level: `info` (default), `debug` or `error`.
    pub log_level: String,
    /// Log format: `json` (default) or `text`.
    pub log_format: String,
    /// HTTP servers.
    pub server: ServerConfiguration,
    /// Profiling settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debugging: Option<DebuggingConfiguration>,
    /// Feature gates by name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub feature_gates: BTreeMap<String, bool>,
    /// How to reach the shoot API server.
    pub api_server: ApiServer,
    /// Settings of the `bootstrap` subcommand (only in the provisioning copy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<BootstrapConfiguration>,
    /// Controller settings.
    pub controllers: ControllerConfiguration,
}

/// Client connection settings (component-base `ClientConnectionConfiguration`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ClientConnectionConfiguration {
    /// Path of a kubeconfig file; empty means none.
    pub kubeconfig: String,
    /// Accept header for requests.
    pub accept_content_types: String,
    /// Content type of requests (upstream defaults to protobuf; JSON clients ignore it).
    pub content_type: String,
    /// Queries per second towards the API server (default 50).
    pub qps: f32,
    /// Burst towards the API server (default 100).
    pub burst: i32,
}

/// Profiling settings (component-base `DebuggingConfiguration`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct DebuggingConfiguration {
    /// Serve profiling endpoints.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_profiling: Option<bool>,
    /// Enable lock contention profiling (needs `enableProfiling`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_contention_profiling: Option<bool>,
}

/// HTTP servers of the node agent.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct ServerConfiguration {
    /// Health probe server (`/healthz`, `/readyz`; default port 2751).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_probes: Option<Server>,
    /// Metrics server (`/metrics`; default port 2752).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Server>,
}

/// Listen address of one HTTP server.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct Server {
    /// IP address to bind to; empty means all addresses.
    pub bind_address: String,
    /// Port; 0 means the default.
    pub port: u16,
}

/// How to reach the shoot API server.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ApiServer {
    /// URL of the API server.
    pub server: String,
    /// Path of the CA bundle file on the node (current upstream field).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// CA bundle itself, base64 in YAML/JSON like Go `[]byte` (older upstream field).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<ByteString>,
}

/// Settings of the `bootstrap` subcommand.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct BootstrapConfiguration {
    /// Size in bytes of the unformatted disk to use for `/var/lib`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubelet_data_volume_size: Option<i64>,
}

/// Controller settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ControllerConfiguration {
    /// OperatingSystemConfig controller.
    pub operating_system_config: OperatingSystemConfigControllerConfig,
    /// Access token controller.
    pub token: TokenControllerConfig,
    /// systemd unit health check controller.
    pub systemd_unit_check: SystemdUnitCheckControllerConfig,
}

/// Settings of the OperatingSystemConfig controller.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct OperatingSystemConfigControllerConfig {
    /// How often the OSC is applied even without changes (default 10m).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_period: Option<Duration>,
    /// Name of the Secret in `kube-system` holding the OSC (`osc.yaml`).
    pub secret_name: String,
    /// kubelet's Kubernetes version (semver), reported on the Node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
}

/// Settings of the access token controller.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct TokenControllerConfig {
    /// Token Secrets to copy to disk.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sync_configs: Vec<TokenSecretSyncConfig>,
    /// How often tokens are synced (default 1h).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_period: Option<Duration>,
}

/// One token Secret to copy to disk.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct TokenSecretSyncConfig {
    /// Secret name in the shoot's `kube-system` namespace.
    pub secret_name: String,
    /// File path on the node.
    pub path: String,
}

/// Settings of the systemd unit health check controller.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct SystemdUnitCheckControllerConfig {
    /// How often units are checked (default 1m).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_period: Option<Duration>,
    /// How long a unit may stay activating/deactivating before it counts as stuck (default 5m).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stuck_threshold: Option<Duration>,
}

impl NodeAgentConfiguration {
    /// Parses the YAML config file leniently and applies the upstream defaults.
    pub fn from_yaml(yaml: &str) -> Result<Self, serde_norway::Error> {
        let mut config: NodeAgentConfiguration = serde_norway::from_str(yaml)?;
        config.apply_defaults();
        Ok(config)
    }

    /// Fills unset fields with upstream defaults (idempotent): type meta, log level/format,
    /// client QPS/burst/content type, server ports and controller periods.
    pub fn apply_defaults(&mut self) {
        fn set_if_empty(field: &mut String, value: &str) {
            if field.is_empty() {
                value.clone_into(field);
            }
        }
        fn set_if_none(field: &mut Option<Duration>, value: std::time::Duration) {
            field.get_or_insert_with(|| value.into());
        }
        const MINUTE: u64 = 60;

        set_if_empty(&mut self.api_version, NODE_AGENT_CONFIGURATION_API_VERSION);
        set_if_empty(&mut self.kind, NODE_AGENT_CONFIGURATION_KIND);
        set_if_empty(&mut self.log_level, "info");
        set_if_empty(&mut self.log_format, "json");

        let client = &mut self.client_connection;
        set_if_empty(
            &mut client.content_type,
            "application/vnd.kubernetes.protobuf",
        );
        if client.qps == 0.0 {
            client.qps = 50.0;
        }
        if client.burst == 0 {
            client.burst = 100;
        }

        for (server, port) in [
            (&mut self.server.health_probes, DEFAULT_HEALTH_PROBES_PORT),
            (&mut self.server.metrics, DEFAULT_METRICS_PORT),
        ] {
            let server = server.get_or_insert_with(Server::default);
            if server.port == 0 {
                server.port = port;
            }
        }

        let controllers = &mut self.controllers;
        let seconds = std::time::Duration::from_secs;
        set_if_none(
            &mut controllers.operating_system_config.sync_period,
            seconds(10 * MINUTE),
        );
        set_if_none(&mut controllers.token.sync_period, seconds(60 * MINUTE));
        set_if_none(
            &mut controllers.systemd_unit_check.sync_period,
            seconds(MINUTE),
        );
        set_if_none(
            &mut controllers.systemd_unit_check.stuck_threshold,
            seconds(5 * MINUTE),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What gardenlet renders for a `reconcile` OSC (plus one unknown field).
    const GARDENLET_YAML: &str = r#"
apiVersion: nodeagent.config.gardener.cloud/v1alpha1
kind: NodeAgentConfiguration
clientConnection:
  acceptContentTypes: ""
  burst: 0
  contentType: ""
  kubeconfig: ""
  qps: 0
logFormat: ""
logLevel: ""
server: {}
apiServer:
  server: https://api.local.dev.internal.local.gardener.cloud
  caFile: /var/lib/gardener-node-agent/cluster-ca.crt
controllers:
  operatingSystemConfig:
    secretName: gardener-node-agent-worker-a-77ac3
    kubernetesVersion: 1.33.1
  token:
    syncConfigs:
    - secretName: gardener-valitail
      path: /var/lib/valitail/auth-token
    syncPeriod: 12h0m0s
  systemdUnitCheck: {}
futureField: true
"#;

    #[test]
    fn parses_gardenlet_output_and_applies_defaults() {
        let config = NodeAgentConfiguration::from_yaml(GARDENLET_YAML).unwrap();
        assert_eq!(config.log_level, "info");
        assert_eq!(config.log_format, "json");
        assert_eq!(config.client_connection.qps, 50.0);
        assert_eq!(config.client_connection.burst, 100);
        assert_eq!(config.server.health_probes.as_ref().unwrap().port, 2751);
        assert_eq!(config.server.metrics.as_ref().unwrap().port, 2752);
        assert_eq!(
            config.api_server.ca_file.as_deref(),
            Some("/var/lib/gardener-node-agent/cluster-ca.crt")
        );
        let osc = &config.controllers.operating_system_config;
        assert_eq!(osc.secret_name, "gardener-node-agent-worker-a-77ac3");
        assert_eq!(osc.kubernetes_version.as_deref(), Some("1.33.1"));
        assert_eq!(
            osc.sync_period.unwrap(),
            std::time::Duration::from_secs(600)
        );
        let token = &config.controllers.token;
        assert_eq!(
            token.sync_period.unwrap(),
            std::time::Duration::from_secs(12 * 3600)
        );
        assert_eq!(token.sync_configs[0].path, "/var/lib/valitail/auth-token");
        let check = &config.controllers.systemd_unit_check;
        assert_eq!(
            check.stuck_threshold.unwrap(),
            std::time::Duration::from_secs(300)
        );

        // Defaulting is idempotent and the result round-trips.
        let mut again = config.clone();
        again.apply_defaults();
        assert_eq!(again, config);
        let yaml = serde_norway::to_string(&config).unwrap();
        assert_eq!(NodeAgentConfiguration::from_yaml(&yaml).unwrap(), config);
    }

    #[test]
    fn explicit_values_are_kept_and_ca_bundle_is_base64() {
        let config = NodeAgentConfiguration::from_yaml(
            r#"
logLevel: debug
server:
  healthProbes: {bindAddress: 127.0.0.1, port: 9000}
apiServer:
  server: https://api
  caBundle: LS0tLS1CRUdJTg==
debugging: {enableProfiling: true}
featureGates: {Foo: true}
bootstrap: {kubeletDataVolumeSize: 1073741824}
"#,
        )
        .unwrap();
        assert_eq!(config.kind, NODE_AGENT_CONFIGURATION_KIND);
        assert_eq!(config.log_level, "debug");
        let probes = config.server.health_probes.as_ref().unwrap();
        assert_eq!(
            (probes.bind_address.as_str(), probes.port),
            ("127.0.0.1", 9000)
        );
        assert_eq!(
            config.api_server.ca_bundle.as_ref().unwrap().0,
            b"-----BEGIN"
        );
        assert!(config.feature_gates["Foo"]);
        assert_eq!(
            config.bootstrap.as_ref().unwrap().kubelet_data_volume_size,
            Some(1 << 30)
        );
        let json = serde_json::to_value(&config).unwrap();
        assert_eq!(json["apiServer"]["caBundle"], "LS0tLS1CRUdJTg==");
    }
}
