//! An agent ([`Agent`]) running inside the test process on an in-memory node ([`FakeHost`])
//! against the test kube-apiserver, with the credentials GRM's node-agent authorizer would give
//! its node (RBAC-limited, [`super::agent::limited_kubeconfig`]); used by
//! `test/agent_in_process.rs` and `test/prometheus_e2e.rs`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gardener_extension_node::agent::access::switching_client::Credentials;
use gardener_extension_node::agent::config::Settings;
use gardener_extension_node::agent::controller::Agent;
use gardener_extension_node::agent::metrics::Metrics;
use gardener_extension_node::agent::metrics_server;
use gardener_extension_node::agent::ports::fake_host::FakeHost;
use gardener_extension_node::agent::ports::paths::Paths;
use gardener_extension_node::api::nodeagent::NodeAgentConfiguration;
use gardener_extension_node::http::{Readiness, ServerState};
use gardener_extension_node::kubeconfig::config_from_yaml;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::TestEnv;
use super::agent::{
    create_node, limited_kubeconfig, node_checksum, node_events, osc_yaml, put_osc_annotated,
    service,
};
use gardener_extension_node::agent::rollout::rules as rollout_rules;
use k8s_openapi::api::coordination::v1::Lease;

/// How long a test waits for the agent to do something it does at once.
pub const AT_ONCE: Duration = Duration::from_secs(20);

/// An agent running in this process for node `node`, on `host`.
pub struct RunningAgent {
    /// The Node's name (also the host name).
    pub node: String,
    /// The OSC secret's name.
    pub secret: String,
    /// The in-memory node.
    pub host: Arc<FakeHost>,
    /// When it started.
    pub started: Instant,
    /// The agent's metrics, as its `/metrics` serves them.
    pub registry: Arc<Registry>,
    /// Its metric families.
    pub metrics: Metrics,
    /// Its credentials (RBAC-limited to the node).
    pub credentials: Credentials,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    /// Its state folder (`--config-dir`).
    pub state: tempfile::TempDir,
    servers: Vec<JoinHandle<()>>,
}

impl RunningAgent {
    /// The agent of a new Node in `env` (named after the test's namespace) with its OSC secret
    /// ([`secret_name`]) and RBAC-limited credentials.
    pub async fn start(env: &TestEnv, host: FakeHost) -> RunningAgent {
        RunningAgent::start_node(env, &node_name(env), host).await
    }

    /// [`RunningAgent::start`] for Node `node`.
    pub async fn start_node(env: &TestEnv, node: &str, host: FakeHost) -> RunningAgent {
        let node = node.to_string();
        let secret = secret_name(&node);
        create_node(&env.client, &node).await;
        let kubeconfig = limited_kubeconfig(env, &node, &[&secret]).await;
        let credentials = Credentials::new(config_from_yaml(&kubeconfig).await.unwrap());
        let state = tempfile::tempdir().unwrap();
        let settings = settings(&node, &secret, state.path().to_path_buf());
        RunningAgent::run(settings, credentials, false, host, state)
    }

    /// Runs the agent of `settings` on `host` (state in `state`) until [`RunningAgent::stop`].
    pub fn run(
        settings: Settings,
        credentials: Credentials,
        renews_certificate: bool,
        host: FakeHost,
        state: tempfile::TempDir,
    ) -> RunningAgent {
        let (node, secret) = (settings.hostname.clone(), settings.secret_name.clone());
        let host = Arc::new(host);
        let mut registry = gardener_extension_node::metrics::new_registry();
        let metrics = Metrics::register(&mut registry);
        let agent = Agent::new(
            settings,
            credentials.clone(),
            renews_certificate,
            host.clone(),
            metrics.clone(),
        )
        .unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let stop = async move {
                let _ = stopped.await;
                Ok("test stop")
            };
            Arc::new(agent)
                .run_until(Default::default(), stop)
                .await
                .unwrap();
        });
        RunningAgent {
            node,
            secret,
            host,
            started: Instant::now(),
            registry: Arc::new(registry),
            metrics,
            credentials,
            stop: Some(stop),
            task,
            state,
            servers: Vec::new(),
        }
    }

    /// Serves the agent's `/metrics` on its Node's `InternalIP` at `port`, as the agent does
    /// by default (`metrics_server::serve_on_node_ip`, with the agent's own credentials).
    pub fn serve_on_node_ip(&mut self, port: u16) {
        let state = ServerState {
            registry: self.registry.clone(),
            readiness: Readiness::default(),
        };
        let client = self.credentials.client("agent").unwrap();
        self.servers
            .push(tokio::spawn(metrics_server::serve_on_node_ip(
                client,
                self.node.clone(),
                port,
                gardener_extension_node::http::router(state),
                self.metrics.clone(),
            )));
    }

    /// Stops the agent and waits for its loop to return.
    pub async fn stop(mut self) {
        for server in &self.servers {
            server.abort();
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), &mut self.task)
            .await
            .expect("the agent stops within 10 s")
            .unwrap();
    }

    /// Waits until the Node reports `checksum`; returns how long after the start.
    pub async fn wait_reported(&self, client: &Client, checksum: &str) -> Duration {
        let node = self.node.clone();
        crate::support::wait_for("the checksum on the Node", AT_ONCE, || {
            let (client, node) = (client.clone(), node.clone());
            async move {
                let reported = node_checksum(&client, &node).await;
                (reported.as_deref() == Some(checksum))
                    .then_some(())
                    .ok_or(format!("{reported:?}"))
            }
        })
        .await;
        self.started.elapsed()
    }

    /// Waits until `reason` is among the events on the Node; returns the first's note.
    pub async fn wait_event(&self, client: &Client, reason: &str, within: Duration) -> String {
        let node = self.node.clone();
        crate::support::wait_for(&format!("a {reason} event"), within, || {
            let (client, node) = (client.clone(), node.clone());
            async move {
                node_events(&client, &node, reason)
                    .await
                    .into_iter()
                    .next()
                    .map(|event| event.note.unwrap_or_default())
                    .ok_or("none yet".to_string())
            }
        })
        .await
    }
}

/// The Node of the test running in `env`'s namespace.
pub fn node_name(env: &TestEnv) -> String {
    format!("in-process-{}", env.namespace)
}

/// The OSC secret of `node`'s pool (gardenlet's `gardener-node-agent-<pool>-<hash>`; never the
/// name of the node's own Lease, `gardener-node-agent-<node>`).
pub fn secret_name(node: &str) -> String {
    format!("gardener-node-agent-pool-{node}")
}

/// The agent's settings, as `config::load` makes them from a config file: host name fixed,
/// state in `state`, the periods of a running node.
pub fn settings(node: &str, secret: &str, state: PathBuf) -> Settings {
    Settings {
        paths: Paths::new(state.clone()),
        config_file: state.join("config.yaml"),
        config: NodeAgentConfiguration::default(),
        secret_name: secret.to_string(),
        kubernetes_version: Some(super::agent::KUBERNETES_VERSION.to_string()),
        sync_period: Duration::from_secs(600),
        token_sync_configs: Vec::new(),
        token_sync_period: Duration::from_secs(3600),
        drift_check_interval: Duration::from_secs(600),
        drift_mode: gardener_extension_node::agent::pipeline::drift::rules::DriftMode::Repair,
        metrics_address: "127.0.0.1:0".parse().unwrap(),
        metrics_on_node_ip: false,
        hostname: node.to_string(),
        hostname_fixed: true,
        own_unit: "gardener-node-agent.service".to_string(),
        system_bus_address: String::new(),
        unit_job_timeout: Duration::from_secs(60),
        containerd_address: String::new(),
        containerd_namespace: String::new(),
        kubeconfig_flag: None,
    }
}

/// Sets the Node's `Ready` condition (kubelet's part in these tests).
pub async fn set_ready(client: &Client, node: &str, ready: bool) {
    set_condition(
        client,
        node,
        json!({"type": "Ready", "status": if ready { "True" } else { "False" }, "reason": "KubeletReady"}),
    )
    .await;
}

/// Adds or replaces one condition of the Node's status (a strategic merge on `type`).
pub async fn set_condition(client: &Client, node: &str, condition: Value) {
    let mut condition = condition;
    condition["lastTransitionTime"] = json!(k8s_openapi::jiff::Timestamp::now().to_string());
    Api::<Node>::all(client.clone())
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"conditions": [condition]}})),
        )
        .await
        .unwrap();
}

/// The Node's condition of `type_` as `(status, reason)`.
pub async fn condition(client: &Client, node: &str, type_: &str) -> Option<(String, String)> {
    let node = Api::<Node>::all(client.clone()).get(node).await.unwrap();
    node.status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason.unwrap_or_default()))
}

/// An OSC of `app.service` and kubelet's unit with `kubelet_flag` in its command line.
pub fn osc_with_kubelet(kubelet_flag: &str) -> String {
    let mut kubelet = service("kubelet.service", "kubelet");
    kubelet["content"] = json!(format!(
        "[Unit]\nDescription=kubelet\n[Service]\nExecStart=/opt/bin/kubelet {kubelet_flag}\n[Install]\nWantedBy=multi-user.target\n"
    ));
    osc_yaml(&[service("app.service", "app"), kubelet], &[], None)
}

/// The rollout annotations of a pool with budget 1 and a health timeout of one second.
pub const ROLLOUT: [(&str, &str); 2] = [
    (rollout_rules::ANNOTATION_BUDGET, "1"),
    (rollout_rules::ANNOTATION_HEALTH_TIMEOUT, "1"),
];

/// The holder of the rollout's slot 0 (the Lease's holder).
pub async fn slot_holder(client: &Client, secret: &str) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), "kube-system")
        .get_opt(secret)
        .await
        .unwrap()
        .and_then(|lease| lease.spec)
        .and_then(|spec| spec.holder_identity)
        .filter(|holder| !holder.is_empty())
}

/// Puts the pool's OSC with kubelet's `kubelet_flag`, the rollout's annotations on; its checksum.
pub async fn put_rollout_osc(client: &Client, secret: &str, kubelet_flag: &str) -> String {
    put_osc_annotated(client, secret, &osc_with_kubelet(kubelet_flag), &ROLLOUT).await
}

/// An agent of a Ready node in a pool with the rollout on, its first OSC (a quiet first
/// apply) applied and reported; with that OSC's checksum.
pub async fn start_in_rollout(env: &TestEnv) -> (RunningAgent, String) {
    start_node_in_rollout(env, &node_name(env)).await
}

/// [`start_in_rollout`] for Node `node`.
pub async fn start_node_in_rollout(env: &TestEnv, node: &str) -> (RunningAgent, String) {
    let agent = RunningAgent::start_node(env, node, FakeHost::default()).await;
    set_ready(&env.client, &agent.node, true).await;
    let first = put_rollout_osc(&env.client, &agent.secret, "--v=1").await;
    agent.wait_reported(&env.client, &first).await;
    (agent, first)
}
