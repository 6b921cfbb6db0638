//! Gardener's node-agent authorizer between a local control plane ([`super::ControlPlane`])
//! and the real gardener-resource-manager ([`super::ResourceManager`]), wired the way
//! gardenlet v1.149.3 wires a shoot: kube-apiserver authorizes with `Node`, then `RBAC`, then
//! the webhook `node-agent-authorizer` (a structured `AuthorizationConfiguration`: only
//! requests of the group `gardener.cloud:node-agents` reach it, no decision is cached, and an
//! unreachable webhook denies), and GRM serves the webhook at `/webhooks/auth/nodeagent`,
//! deciding per machine from the Machines of the seed namespace it is given (or, without one,
//! from the Node named like the machine). docs/agent.md "What it may access" lists what it
//! admits.
//!
//! One [`NodeAgentAuthorizer`] value is handed to both sides: the control plane writes the
//! configuration and the webhook's kubeconfig from it, GRM serves on its port with its
//! certificate. The control plane starts first (a node agent's request is denied until GRM
//! answers), GRM second, since it needs the plane's kubeconfig.

use std::path::Path;

use super::controlplane::ControlPlaneError;

/// The group of node-agent client certificates; only its requests reach the webhook.
pub const NODE_AGENTS_GROUP: &str = "gardener.cloud:node-agents";
/// GRM's path of the node-agent authorizer.
pub const WEBHOOK_PATH: &str = "/webhooks/auth/nodeagent";
/// The authorizer's name in kube-apiserver's configuration (gardenlet's).
pub const WEBHOOK_NAME: &str = "node-agent-authorizer";

/// Where GRM serves the node-agent authorizer and for which Machines it decides.
#[derive(Debug, Clone)]
pub struct NodeAgentAuthorizer {
    /// GRM's webhook port on `127.0.0.1`.
    pub port: u16,
    /// GRM's serving certificate (PEM, self-signed for `127.0.0.1`); kube-apiserver trusts
    /// exactly this certificate.
    pub serving_cert: String,
    /// Its key (PEM).
    pub serving_key: String,
    /// The seed namespace of the shoot's Machines (`webhooks.nodeAgentAuthorizer.machineNamespace`):
    /// a node agent `gardener.cloud:node-agent:machine:<m>` is the Machine `<m>` there, its
    /// Node the Machine's `node` label, its OSC Secret the Machine's node-template label
    /// `worker.gardener.cloud/gardener-node-agent-secret-name`. `None`: the machine name is
    /// the node name.
    pub machine_namespace: Option<String>,
}

impl NodeAgentAuthorizer {
    /// A free loopback port and a new serving certificate.
    pub fn new(machine_namespace: Option<String>) -> Result<Self, ControlPlaneError> {
        let [port, _, _] = super::controlplane::free_ports()?;
        let (serving_cert, serving_key) =
            super::pki::self_signed_serving().map_err(ControlPlaneError::Pki)?;
        Ok(NodeAgentAuthorizer {
            port,
            serving_cert,
            serving_key,
            machine_namespace,
        })
    }

    /// The kubeconfig kube-apiserver calls the webhook with: GRM's URL, its certificate as
    /// the only trusted CA, no client credentials (as gardenlet renders it).
    pub fn webhook_kubeconfig(&self) -> String {
        use base64::Engine as _;
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.serving_cert);
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "authorization-webhook", "cluster": {
                "server": format!("https://127.0.0.1:{}{WEBHOOK_PATH}", self.port),
                "certificate-authority-data": ca,
            }}],
            "users": [{"name": "authorization-webhook", "user": {}}],
            "contexts": [{"name": "authorization-webhook", "context": {
                "cluster": "authorization-webhook", "user": "authorization-webhook",
            }}],
            "current-context": "authorization-webhook",
        })
        .to_string()
    }

    /// kube-apiserver's `--authorization-config` (JSON, pure): `Node`, `RBAC`, then the
    /// webhook for node agents only, uncached, failing closed, as gardenlet configures a
    /// shoot with workers.
    pub fn authorization_config(webhook_kubeconfig: &Path) -> String {
        serde_json::json!({
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AuthorizationConfiguration",
            "authorizers": [
                {"type": "Node", "name": "node"},
                {"type": "RBAC", "name": "rbac"},
                {"type": "Webhook", "name": WEBHOOK_NAME, "webhook": {
                    "timeout": "10s",
                    "cacheAuthorizedRequests": false,
                    "cacheUnauthorizedRequests": false,
                    "failurePolicy": "Deny",
                    "subjectAccessReviewVersion": "v1",
                    "matchConditionSubjectAccessReviewVersion": "v1",
                    "connectionInfo": {
                        "type": "KubeConfigFile",
                        "kubeConfigFile": webhook_kubeconfig.display().to_string(),
                    },
                    "matchConditions": [
                        {"expression": format!("'{NODE_AGENTS_GROUP}' in request.groups")},
                    ],
                }},
            ],
        })
        .to_string()
    }

    /// GRM's `webhooks` section with the authorizer on (pure). Field selectors are
    /// authorized (pods only with `spec.nodeName=<node>`), as gardenlet sets it for
    /// Kubernetes versions where kube-apiserver passes selectors to authorizers.
    pub fn resource_manager_webhooks(&self) -> serde_json::Value {
        let mut authorizer = serde_json::json!({"enabled": true, "authorizeWithSelectors": true});
        if let Some(namespace) = &self.machine_namespace {
            authorizer["machineNamespace"] = serde_json::json!(namespace);
        }
        serde_json::json!({"nodeAgentAuthorizer": authorizer})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authorizer(machine_namespace: Option<&str>) -> NodeAgentAuthorizer {
        NodeAgentAuthorizer {
            port: 4711,
            serving_cert: "CERT".into(),
            serving_key: "KEY".into(),
            machine_namespace: machine_namespace.map(str::to_string),
        }
    }

    #[test]
    fn kube_apiserver_asks_node_then_rbac_then_the_webhook_for_node_agents_only() {
        let config: serde_json::Value = serde_json::from_str(
            &NodeAgentAuthorizer::authorization_config(Path::new("/s/webhook.kubeconfig")),
        )
        .unwrap();
        let types: Vec<&str> = config["authorizers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["Node", "RBAC", "Webhook"]);
        let webhook = &config["authorizers"][2]["webhook"];
        assert_eq!(webhook["failurePolicy"], "Deny");
        assert_eq!(webhook["cacheAuthorizedRequests"], false);
        assert_eq!(
            webhook["matchConditions"][0]["expression"],
            "'gardener.cloud:node-agents' in request.groups"
        );
        assert_eq!(
            webhook["connectionInfo"]["kubeConfigFile"],
            "/s/webhook.kubeconfig"
        );
    }

    #[test]
    fn the_webhook_kubeconfig_names_grm_and_trusts_only_its_certificate() {
        let kubeconfig: serde_json::Value =
            serde_json::from_str(&authorizer(None).webhook_kubeconfig()).unwrap();
        let cluster = &kubeconfig["clusters"][0]["cluster"];
        assert_eq!(
            cluster["server"],
            "https://127.0.0.1:4711/webhooks/auth/nodeagent"
        );
        assert_eq!(cluster["certificate-authority-data"], "Q0VSVA==");
        assert_eq!(kubeconfig["users"][0]["user"], serde_json::json!({}));
    }

    #[test]
    fn grm_decides_by_the_machines_of_the_namespace_when_given_one() {
        assert_eq!(
            authorizer(Some("shoot--a--b")).resource_manager_webhooks(),
            serde_json::json!({"nodeAgentAuthorizer": {
                "enabled": true, "authorizeWithSelectors": true, "machineNamespace": "shoot--a--b",
            }})
        );
        assert_eq!(
            authorizer(None).resource_manager_webhooks()["nodeAgentAuthorizer"]
                .get("machineNamespace"),
            None
        );
    }
}
