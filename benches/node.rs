//! What one shoot node of the test fixture (`test/support/node.rs`) costs on this machine:
//! boot time, time until the Node is Ready, and memory once idle. Two nodes, booted one
//! after the other, each running our agent (static build), containerd 2.x and kubelet from
//! a reconcile OSC the bench puts straight into the shoot (no seed-side operator: this
//! measures the node, not the delivery).
//!
//! `make bench-node` (needs root, `hack/envtest.sh --node` and the static binary); writes
//! the `node` section of docs/benchmarks.md.

#![allow(clippy::unwrap_used, clippy::panic)]

#[path = "../test/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node as KubeNode;
use kube::Api;
use support::agent::{AgentSetup, install_agent, limited_kubeconfig_in, osc_yaml, put_osc};
use support::node::{AGENT_BINARY, Node, NodeMemory, NodeOptions, NodeOsc};

const NODES: usize = 2;
const IDLE: Duration = Duration::from_secs(20);
const PAUSE_IMAGE: &str = "e2e.local/pause:e2e";

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if !support::benchmarks::invoked_by_cargo_bench() {
        return;
    }
    let assets = PathBuf::from(std::env::var("ENVTEST_ASSETS").expect("ENVTEST_ASSETS"));
    let static_binary = PathBuf::from(
        std::env::var("E2E_STATIC_BINARY").expect("E2E_STATIC_BINARY (make bench-node)"),
    );
    let env = support::env().await;
    let shoot = support::shoot::Shoot::start_with_scheduler(&env).await;
    let client = shoot.client().await;
    let server_url = shoot.plane.server_url();
    let ca_pem = shoot.plane.ca_pem().to_string();
    let port = shoot.plane.apiserver_port();
    let images = tempfile::tempdir().unwrap();
    support::node::write_pause_archive(images.path(), PAUSE_IMAGE);

    let nodes_api = Api::<KubeNode>::all(client.clone());
    let mut nodes = Vec::new();
    let mut rows = Vec::new();
    for n in 0..NODES {
        let started = Instant::now();
        let node = Node::boot(&NodeOptions {
            assets: assets.clone(),
            agent_binary: static_binary.clone(),
            images: images.path().to_path_buf(),
            apiserver_port: port,
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let booted = started.elapsed();
        let name = node.name().to_string();
        let secret = format!("gardener-node-agent-bench-{n}");
        let labels = BTreeMap::from([(
            "worker.gardener.cloud/pool".to_string(),
            "bench".to_string(),
        )]);
        let kubelet_token = support::node::kubelet_token(&client, &name).await;
        let osc = NodeOsc {
            server_url: server_url.clone(),
            ca_pem: ca_pem.clone(),
            kubelet_credentials: support::node::KubeletCredentials::Token(kubelet_token),
            labels,
            sandbox_image: PAUSE_IMAGE.into(),
        };
        put_osc(
            &client,
            &secret,
            &osc_yaml(&osc.units(), &osc.files(), Some(osc.cri_config())),
        )
        .await;
        let kubeconfig =
            limited_kubeconfig_in(&client, &server_url, &ca_pem, &name, &[&secret]).await;
        let agent_started = Instant::now();
        install_agent(
            &node.machine,
            &AgentSetup {
                secret_name: secret,
                kubeconfig,
                server_url: server_url.clone(),
                ca_pem: ca_pem.clone(),
                drift_interval: "10m".into(),
                token_sync: vec![],
                binary_in_machine: AGENT_BINARY.into(),
            },
        );
        loop {
            let ready = nodes_api
                .get_opt(&name)
                .await
                .ok()
                .flatten()
                .and_then(|node| node.status)
                .and_then(|status| status.conditions)
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            if ready {
                break;
            }
            assert!(
                agent_started.elapsed() < Duration::from_secs(300),
                "node {name} not Ready:\n{}\n{}",
                node.describe("kubelet.service"),
                node.describe("gardener-node-agent.service")
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        rows.push((booted, agent_started.elapsed()));
        nodes.push(node);
    }
    tokio::time::sleep(IDLE).await;
    let memory: Vec<NodeMemory> = nodes.iter().map(Node::memory).collect();

    let mut body = String::from(
        "## Shoot node fixture: systemd-nspawn machine with the agent, containerd 2.x and kubelet\n\n\
         Command: `make bench-node` (`cargo bench --bench node`: two nodes booted one after the other \
         against a real shoot control plane on loopback, each applying a reconcile OSC with our agent \
         (static debug build); memory read 20 s after both are Ready; 2 cores).\n\n\
         | node | boot (nspawn → systemd up, node prepared) | agent start → Node Ready | processes | VmRSS sum | cgroup anon (`total_rss`) | cgroup page cache |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for (n, ((booted, ready), memory)) in rows.iter().zip(&memory).enumerate() {
        body.push_str(&format!(
            "| {} | {:.2?} | {:.2?} | {} | {} | {} | {} |\n",
            n + 1,
            booted,
            ready,
            memory.processes,
            mib(memory.rss_sum_kib),
            mib(memory.cgroup_anon_kib),
            mib(memory.cgroup_cache_kib),
        ));
    }
    body.push_str(&format!(
        "\nMeasured on {}.\n",
        chrono::Utc::now().format("%Y-%m-%d")
    ));
    println!("{body}");
    support::benchmarks::write_section("node", &body);
    drop(nodes);
}
