//! End to end (`make e2e-prometheus`; root, for two addresses on the loopback interface): a real Prometheus
//! (built from its Go module by `hack/envtest.sh`), configured from the objects we ship,
//! scrapes the operator as the seed's PodMonitor `extensions` would, and two node agents
//! through the API server's node proxy as the shoot Prometheus does with our ScrapeConfig;
//! it evaluates our shoot alerts, and a disruptive rollout stopped on purpose fires
//! `NodeAgentRolloutStopped` for that node only.
//!
//! What stands in, and why: the agents run in-process on in-memory nodes
//! (`support::in_process_agent`, with the credentials the node-agent authorizer gives) and
//! serve on the `InternalIP`s of their Nodes, two TEST-NET-1 addresses this test puts on the
//! loopback interface (the API server's proxy refuses loopback addresses, not these); the ScrapeConfig
//! is translated to Prometheus' configuration by the test as prometheus-operator does (field
//! names, Secret keys as files) with the one substitution a seed makes by DNS: the shoot API
//! server's Service name `kube-apiserver:443` becomes this API server's address. The objects
//! are `monitoring::rules::render`'s, which `test/shoot_monitoring.rs` shows the operator ships.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gardener_extension_node::api::constants::{LABEL_NODE_AGENT_SECRET_NAME, LABEL_WORKER_POOL};
use gardener_extension_node::api::nodeagent::DEFAULT_METRICS_PORT;
use gardener_extension_node::controllers::operatingsystemconfig::monitoring::rules;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use support::in_process_agent::{RunningAgent, put_rollout_osc, start_node_in_rollout};
use support::operator::OperatorProcess;
use support::{TestEnv, wait_for};

/// The operator's `job`, as the seed's PodMonitor `extensions` derives it from
/// `prometheus.io/name` (the release name).
const OPERATOR_JOB: &str = "gardener-extension-node";
const NODE_ADDRESSES: [&str; 2] = ["192.0.2.10", "192.0.2.11"];
const WAIT: Duration = Duration::from_secs(120);

/// The nodes' addresses on the loopback interface (`/32` each, so nothing else routes there),
/// removed on drop. Loopback rather than a dummy interface: containers often lack the module.
struct NodeAddresses(Vec<String>);

impl NodeAddresses {
    fn add(addresses: &[&str]) -> Self {
        let ip = |args: &[&str]| Command::new("ip").args(args).output().expect("ip runs");
        let mut added = NodeAddresses(Vec::new());
        for address in addresses {
            let cidr = format!("{address}/32");
            // A run killed before its drop left it: take it back first.
            let _ = ip(&["addr", "del", &cidr, "dev", "lo"]);
            let output = ip(&["addr", "add", &cidr, "dev", "lo"]);
            assert!(
                output.status.success(),
                "ip addr add {cidr} dev lo (the test needs root): {}",
                String::from_utf8_lossy(&output.stderr)
            );
            added.0.push(cidr);
        }
        added
    }
}

impl Drop for NodeAddresses {
    fn drop(&mut self) {
        for cidr in &self.0 {
            let _ = Command::new("ip")
                .args(["addr", "del", cidr, "dev", "lo"])
                .output();
        }
    }
}

/// A Prometheus process, killed on drop.
struct Prometheus {
    child: Child,
    address: String,
    dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(dir: tempfile::TempDir) -> Self {
        let binary = gardener_extension_node::devenv::resolve_assets(None, &support::repo_root())
            .expect("the folder hack/envtest.sh prints")
            .join("prometheus");
        assert!(
            binary.is_file(),
            "{} missing: run hack/envtest.sh",
            binary.display()
        );
        let port = support::agent::free_port();
        let address = format!("127.0.0.1:{port}");
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new(binary)
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Prometheus {
            child,
            address,
            dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// `GET /api/v1/<path>`'s `data`.
    async fn api(&self, path: &str) -> Result<Value, String> {
        let (status, body) =
            OperatorProcess::http_get_at(&self.address, &format!("/api/v1/{path}"))
                .await
                .ok_or("Prometheus does not answer")?;
        let body: Value =
            serde_json::from_str(&body).map_err(|e| format!("{status}: {e}: {body}"))?;
        if status != 200 {
            return Err(format!("{status}: {body}"));
        }
        Ok(body["data"].clone())
    }

    async fn query(&self, query: &str) -> Result<Vec<Value>, String> {
        let data = self.api(&format!("query?query={}", encode(query))).await?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The shoot Prometheus' ServiceAccount with gardener's rules for it (its ClusterRole in the
/// shoot: read Nodes, Services, Endpoints and Pods, `get` their proxies and `/metrics`); a token.
async fn prometheus_token(client: &Client) -> String {
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "e2e-prometheus-shoot"},
        "rules": [
            {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["nodes", "services", "endpoints", "pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["nodes/metrics", "pods/log", "nodes/proxy", "services/proxy", "pods/proxy"], "verbs": ["get"]},
        ],
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "e2e-prometheus-shoot"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "e2e-prometheus-shoot"},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus-shoot", "namespace": "kube-system"}],
    });
    let apply = |value: Value| async move {
        let object: kube::api::DynamicObject = serde_json::from_value(value.clone()).unwrap();
        let gvk = kube::api::GroupVersionKind::gvk(
            "rbac.authorization.k8s.io",
            "v1",
            value["kind"].as_str().unwrap(),
        );
        let api: Api<kube::api::DynamicObject> =
            Api::all_with(client.clone(), &kube::api::ApiResource::from_gvk(&gvk));
        api.patch(
            object.metadata.name.as_deref().unwrap(),
            &PatchParams::apply("e2e").force(),
            &Patch::Apply(&object),
        )
        .await
        .unwrap();
    };
    apply(role).await;
    apply(binding).await;
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), "kube-system");
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "prometheus-shoot"}})).unwrap();
    accounts
        .patch(
            "prometheus-shoot",
            &PatchParams::apply("e2e").force(),
            &Patch::Apply(&account),
        )
        .await
        .unwrap();
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
            .unwrap();
    let issued = accounts
        .create_token_request("prometheus-shoot", &PostParams::default(), &request)
        .await
        .unwrap();
    issued.status.unwrap().token.unwrap()
}

/// The ScrapeConfig's spec as prometheus-operator writes it into Prometheus' configuration:
/// camel-case fields in snake case, roles in lower case, Secret keys as files; the shoot API
/// server's Service name replaced by `api_server` (host:port).
fn translate(spec: &Value, job_name: &str, api_server: &str, token: &Path, ca: &Path) -> Value {
    let relabel = |r: &Value| {
        let mut out = serde_json::Map::new();
        for (key, value) in r.as_object().unwrap() {
            let key = match key.as_str() {
                "sourceLabels" => "source_labels",
                "targetLabel" => "target_label",
                other => other,
            };
            let value = match value.as_str() {
                Some(text) => Value::String(text.replace(rules::API_SERVER, api_server)),
                None => value.clone(),
            };
            out.insert(key.to_string(), value);
        }
        if let Some(action) = out.get_mut("action") {
            *action = Value::String(action.as_str().unwrap().to_lowercase());
        }
        Value::Object(out)
    };
    let auth = json!({"type": "Bearer", "credentials_file": token});
    let tls = json!({"ca_file": ca});
    let sd = &spec["kubernetesSDConfigs"][0];
    json!({
        "job_name": job_name,
        "honor_labels": spec["honorLabels"],
        "scheme": spec["scheme"].as_str().unwrap().to_lowercase(),
        "authorization": auth,
        "tls_config": tls,
        "kubernetes_sd_configs": [{
            "role": sd["role"].as_str().unwrap().to_lowercase(),
            "api_server": sd["apiServer"].as_str().unwrap().replace(rules::API_SERVER, api_server),
            "follow_redirects": sd["followRedirects"],
            "authorization": auth,
            "tls_config": tls,
        }],
        "relabel_configs": spec["relabelings"].as_array().unwrap().iter().map(relabel).collect::<Vec<_>>(),
        "metric_relabel_configs": spec["metricRelabelings"].as_array().unwrap().iter().map(relabel).collect::<Vec<_>>(),
    })
}

/// Gives the agent's Node its `InternalIP`, pool and node-agent secret labels (what kubelet
/// and the Machine's node template put there).
async fn place_node(client: &Client, agent: &RunningAgent, address: &str) {
    let nodes = Api::<Node>::all(client.clone());
    nodes
        .patch(
            &agent.node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                LABEL_NODE_AGENT_SECRET_NAME: agent.secret,
                LABEL_WORKER_POOL: "worker-a",
            }}})),
        )
        .await
        .unwrap();
    nodes
        .patch_status(
            &agent.node,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"addresses": [{"type": "InternalIP", "address": address}]}}),
            ),
        )
        .await
        .unwrap();
}

fn show(result: &[Value]) -> String {
    result
        .iter()
        .map(|r| format!("  {} => {}", r["metric"], r["value"][1]))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
#[ignore = "make e2e-prometheus: root (node addresses) and the Prometheus of hack/envtest.sh --prometheus"]
async fn a_real_prometheus_scrapes_the_operator_and_two_agents_and_fires_the_rollout_alert() {
    let _addresses = NodeAddresses::add(&NODE_ADDRESSES);
    let env: TestEnv = support::env().await;
    let operator = OperatorProcess::start(&env.kubeconfig, &[]);

    let names = ["a", "b"].map(|n| format!("prom-{n}-{}", env.namespace));
    let (mut agent_a, _) = start_node_in_rollout(&env, &names[0]).await;
    let (mut agent_b, _) = start_node_in_rollout(&env, &names[1]).await;
    for (agent, address) in [
        (&mut agent_a, NODE_ADDRESSES[0]),
        (&mut agent_b, NODE_ADDRESSES[1]),
    ] {
        place_node(&env.client, agent, address).await;
        agent.serve_on_node_ip(DEFAULT_METRICS_PORT);
    }
    // The API server's node proxy reaches both.
    for agent in [&agent_a, &agent_b] {
        let path = format!(
            "/api/v1/nodes/{}:{DEFAULT_METRICS_PORT}/proxy/metrics",
            agent.node
        );
        wait_for(
            "the agent's metrics through the node proxy",
            Duration::from_secs(60),
            || {
                let (client, path) = (env.client.clone(), path.clone());
                async move {
                    let request = http::Request::get(&path).body(Vec::new()).unwrap();
                    let text = client
                        .request_text(request)
                        .await
                        .map_err(|e| e.to_string())?;
                    text.contains("gardener_extension_node_agent_osc_current 1")
                        .then_some(())
                        .ok_or(text)
                }
            },
        )
        .await;
    }

    // Prometheus, configured from what we ship.
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, prometheus_token(&env.client).await).unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, &env.ca_pem).unwrap();
    let keys: BTreeSet<String> = [&agent_a, &agent_b]
        .iter()
        .map(|a| a.secret.clone())
        .collect();
    let ca_data = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(&env.ca_pem)
    };
    let data = rules::render(&env.namespace, &keys, &ca_data).unwrap();
    let object = |kind: &str| -> Value {
        let (_, bytes) = data.iter().find(|(key, _)| key.starts_with(kind)).unwrap();
        serde_json::from_slice(bytes).unwrap()
    };
    let scrape_config = object("scrapeconfig");
    let rule = object("prometheusrule");
    std::fs::write(
        dir.path().join("shoot-rules.yaml"),
        serde_json::to_string(&rule["spec"]).unwrap(),
    )
    .unwrap();
    let api_server = env.server_url.trim_start_matches("https://").to_string();
    let job = format!("scrapeConfig/{}/{}", env.namespace, rules::SHOOT_OBJECTS);
    let config = json!({
        "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
        "rule_files": [dir.path().join("shoot-rules.yaml")],
        "scrape_configs": [
            {"job_name": OPERATOR_JOB, "static_configs": [{"targets": [operator.http_address]}]},
            translate(&scrape_config["spec"], &job, &api_server, &token, &ca),
        ],
    });
    std::fs::write(
        dir.path().join("prometheus.yml"),
        serde_json::to_string(&config).unwrap(),
    )
    .unwrap();
    let prometheus = Prometheus::start(dir);

    // Each agent's series, and the operator's.
    let agents = wait_for("both agents' series in Prometheus", WAIT, || async {
        let result = prometheus
            .query(
                "gardener_extension_node_agent_osc_current{job=\"gardener-extension-node-agent\"}",
            )
            .await?;
        (result.len() == 2)
            .then_some(result.clone())
            .ok_or(format!("{result:?}\n{}", prometheus.log()))
    })
    .await;
    println!(
        "prometheus_e2e: gardener_extension_node_agent_osc_current:\n{}",
        show(&agents)
    );
    let mut nodes: Vec<&str> = agents
        .iter()
        .map(|r| r["metric"]["node"].as_str().unwrap())
        .collect();
    nodes.sort();
    assert_eq!(nodes, [agent_a.node.as_str(), agent_b.node.as_str()]);
    let applies = prometheus
        .query("sum by (node, result) (gardener_extension_node_agent_applies_total)")
        .await
        .unwrap();
    println!(
        "prometheus_e2e: applies by node and result:\n{}",
        show(&applies)
    );
    let up = wait_for("the operator scraped", WAIT, || async {
        let result = prometheus
            .query(&format!("up{{job=\"{OPERATOR_JOB}\"}} == 1"))
            .await?;
        (!result.is_empty())
            .then_some(result.clone())
            .ok_or(format!("{result:?}"))
    })
    .await;
    let build = prometheus
        .query("gardener_extension_node_build_info")
        .await
        .unwrap();
    println!(
        "prometheus_e2e: operator up:\n{}\nbuild_info:\n{}",
        show(&up),
        show(&build)
    );
    let no_alert = prometheus.api("alerts").await.unwrap();
    assert!(
        !no_alert.to_string().contains("NodeAgentRolloutStopped"),
        "no rollout alert before the stop: {no_alert}"
    );

    // Node b's disruptive change leaves kubelet unhealthy: its agent stops the rollout.
    agent_b
        .host
        .set_kubelet_health(Err("connection refused".into()));
    put_rollout_osc(&env.client, &agent_b.secret, "--broken").await;
    let firing = wait_for("NodeAgentRolloutStopped firing", WAIT, || async {
        let alerts = prometheus.api("alerts").await?;
        let firing: Vec<Value> = alerts["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| {
                a["labels"]["alertname"] == "NodeAgentRolloutStopped" && a["state"] == "firing"
            })
            .cloned()
            .collect();
        (!firing.is_empty())
            .then_some(firing)
            .ok_or(alerts.to_string())
    })
    .await;
    println!(
        "prometheus_e2e: firing: {}",
        serde_json::to_string_pretty(&firing).unwrap()
    );
    assert_eq!(firing.len(), 1, "{firing:?}");
    assert_eq!(firing[0]["labels"]["node"], agent_b.node.as_str());
    assert_eq!(firing[0]["labels"]["severity"], "critical");
    let stopped = prometheus
        .query("gardener_extension_node_agent_rollout_stopped")
        .await
        .unwrap();
    println!(
        "prometheus_e2e: gardener_extension_node_agent_rollout_stopped:\n{}",
        show(&stopped)
    );

    agent_a.stop().await;
    agent_b.stop().await;
}
