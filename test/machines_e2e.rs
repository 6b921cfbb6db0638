//! e2e (`make e2e-machines`): the real machine-controller-manager v0.62.1 drives our Worker's
//! objects, and the machines it creates become nodes of the shoot — real components only,
//! no stand-in for MCM (docs/contract.md#worker).
//!
//! ```text
//! Worker ─► our operator ─► MachineClass, MachineDeployment ─► MCM core ─► MachineSet, Machine
//!   OSCs (gardenlet's provision content) ─► our operator ─► user data ─┐
//!                MCM's machine controller + our driver (machine-provider-nspawn) ◄┘
//!                  │ fills <<BOOTSTRAP_TOKEN>>, <<MACHINE_NAME>>; PUT /machines/<name>
//!                  ▼
//!   node cloud (support::node_cloud): nspawn node boots, runs the user data ─► node-init pulls
//!   our agent from the loopback registry ─► `bootstrap` ─► CSR (GRM's approver finds the
//!   real Machine) ─► kubelet joins ─► Node Ready ─► Machine Running ─► Worker Succeeded
//! ```
//!
//! Then the Worker is deleted the way gardenlet does it, and nothing may be left: no
//! Machine, no finalizer, no Node, no node in the cloud.
//!
//! What stands in: the RBAC for GRM's node-agent authorizer webhook
//! (`support::node_agent_identity::allow_node_agents`, granted when the cloud announces a node).
//!
//! Needs root, the node components and a static build of our binary; `make e2e-machines`
//! provides them, and `cargo test` skips this file (`#[ignore]`).

#![allow(clippy::unwrap_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gardener_extension_node::api::machine::Machine as McmMachine;
use gardener_extension_node::api::{
    Cluster, LastOperationState, LastOperationType, OperatingSystemConfig, Worker,
};
use k8s_openapi::api::core::v1::{Node as KubeNode, Secret};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use support::gardenlet_osc::{PoolFacts, render};
use support::machine_controllers::{Driver, MachineControllers, Targets};
use support::node::{KubeletCredentials, Node, NodeOptions, NodeOsc};
use support::node_agent_identity::{
    allow_gardener_node_agent_extras, allow_node_agents, create_or_keep,
};
use support::node_cloud::{Boot, NodeCloud};
use support::oci::{Image, ImageFile};
use support::registry::Registry;
use support::shoot::Shoot;
use support::{Crds, fixtures, wait_for};

const SIGNING: Duration = Duration::from_secs(3600);
const STAGE_TIMEOUT: Duration = Duration::from_secs(300);
const KUBERNETES_VERSION: &str = "1.36.3";
const PAUSE_IMAGE: &str = "e2e.local/pause:e2e";
const POOL: &str = "rolling";

fn required_env(name: &str) -> PathBuf {
    PathBuf::from(
        std::env::var(name).unwrap_or_else(|_| {
            panic!("{name} is not set: run this test with `make e2e-machines`")
        }),
    )
}

fn since(started: Instant) -> f64 {
    started.elapsed().as_secs_f64()
}

fn base64(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// The seed, the shoot, the registry, our operator, the node cloud and the real MCM.
struct Landscape {
    env: support::TestEnv,
    shoot: Shoot,
    shoot_client: Client,
    registry: Registry,
    assets: PathBuf,
    cloud: NodeCloud,
    controllers: Option<MachineControllers>,
    _images: tempfile::TempDir,
    _operator: support::operator::OperatorProcess,
}

impl Landscape {
    async fn start() -> Self {
        let assets = required_env("ENVTEST_ASSETS");
        let static_binary = required_env("E2E_STATIC_BINARY");
        let env = support::env_with(Crds::Upstream).await;
        let shoot = Shoot::start_for_node_agents(&env, SIGNING).await;
        let shoot_client = shoot.client().await;
        let registry = Registry::start(&assets);
        registry.push(&Image {
            reference: format!("{}/gardener/node-agent:ours", registry.host()),
            entrypoint: vec!["/gardener-node-agent".into()],
            files: vec![ImageFile::executable(
                "/gardener-node-agent",
                &static_binary,
            )],
        });
        let images = tempfile::Builder::new()
            .prefix("gen-machines-images-")
            .tempdir()
            .unwrap();
        support::node::write_pause_archive(images.path(), PAUSE_IMAGE);
        let cluster: Cluster =
            serde_json::from_value(fixtures::cluster_json(&env.namespace)).unwrap();
        Api::<Cluster>::all(env.client.clone())
            .create(&PostParams::default(), &cluster)
            .await
            .unwrap();
        let operator = support::operator::OperatorProcess::start(
            &env.kubeconfig,
            &["--controllers=operatingsystemconfig,worker"],
        );
        let options = NodeOptions {
            assets: assets.clone(),
            agent_binary: static_binary,
            images: images.path().to_path_buf(),
            apiserver_port: shoot.plane.apiserver_port(),
        };
        let (registry_port, registry_host) = (registry.port(), registry.host());
        let boot: Boot = Arc::new(move |name| {
            let mut node = Node::boot_named(&options, name)?;
            node.forward(registry_port);
            node.prepare_node_image(&registry_host);
            Ok(node)
        });
        let cloud = NodeCloud::start(
            boot,
            &[fixtures::MACHINE_IMAGE_13_2, fixtures::MACHINE_IMAGE_13_3],
        )
        .await;
        Self {
            env,
            shoot,
            shoot_client,
            registry,
            assets,
            cloud,
            controllers: None,
            _images: images,
            _operator: operator,
        }
    }

    /// gardenlet's part for one pool: the node-agent RBAC of TLS bootstrapping, the provision
    /// and reconcile OSCs (gardenlet's own rendering); returns the user data Secret's name.
    async fn provision_pool(&self, pool: &str, key: &str) -> String {
        let (env, shoot_client) = (&self.env, &self.shoot_client);
        let repository = format!("{}/gardener/node-agent", self.registry.host());
        let gardenlet = render(
            &self.assets,
            &PoolFacts {
                namespace: &env.namespace,
                pool,
                key,
                server_url: &self.shoot.plane.server_url(),
                ca_pem: self.shoot.plane.ca_pem(),
                kubernetes_version: KUBERNETES_VERSION,
                node_agent_image: (&repository, "ours"),
            },
        );
        for binding in &gardenlet.rbac {
            let binding: ClusterRoleBinding = serde_json::from_value(binding.clone()).unwrap();
            create_or_keep(Api::all(shoot_client.clone()), &binding).await;
        }
        allow_gardener_node_agent_extras(shoot_client).await;
        let labels: BTreeMap<String, String> = [
            ("worker.gardener.cloud/pool", pool),
            ("worker.gardener.cloud/cri-name", "containerd"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let node_osc = NodeOsc {
            server_url: self.shoot.plane.server_url(),
            ca_pem: self.shoot.plane.ca_pem().to_string(),
            kubelet_credentials: KubeletCredentials::Bootstrap,
            labels,
            sandbox_image: PAUSE_IMAGE.into(),
        };
        let reconcile =
            gardenlet.reconcile(node_osc.cri_config(), &node_osc.files(), &node_osc.units());
        let oscs = Api::<OperatingSystemConfig>::namespaced(env.client.clone(), &env.namespace);
        for osc in [&gardenlet.provision, &reconcile] {
            oscs.create(
                &PostParams::default(),
                &serde_json::from_value(osc.clone()).unwrap(),
            )
            .await
            .unwrap();
        }
        support::agent::user_data(&env.client, &env.namespace, key, STAGE_TIMEOUT).await;
        format!("osc-result-{key}-init")
    }

    /// gardenlet's `cloudprovider` Secret (provider-local's form: a kubeconfig) and the Worker.
    async fn create_worker(&self, pools: Value) {
        let (client, ns) = (&self.env.client, &self.env.namespace);
        let secret: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "cloudprovider", "namespace": ns},
            "data": {"kubeconfig": base64(self.env.kubeconfig.as_bytes())}
        }))
        .unwrap();
        Api::<Secret>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        let mut worker = fixtures::worker_json(ns);
        worker["metadata"]["annotations"] = json!({
            "gardener.cloud/operation": "reconcile",
            "gardener.cloud/timestamp": chrono::Utc::now().to_rfc3339(),
        });
        worker["spec"]["pools"] = pools;
        Api::<Worker>::namespaced(client.clone(), ns)
            .create(
                &PostParams::default(),
                &serde_json::from_value(worker).unwrap(),
            )
            .await
            .unwrap();
    }

    /// Starts MCM core and its machine controller with our driver against the node cloud.
    fn start_machine_controllers(&mut self) {
        self.controllers = Some(MachineControllers::start(
            &Targets {
                assets: &self.assets,
                seed_kubeconfig: &self.env.kubeconfig,
                shoot_kubeconfig: Some(self.shoot.plane.kubeconfig()),
                namespace: &self.env.namespace,
            },
            Driver::Nspawn {
                url: self.cloud.url().to_string(),
            },
        ));
    }

    /// Grants each node the cloud announces what GRM's node-agent authorizer would.
    fn authorize_new_nodes(&self, key: String) -> tokio::task::JoinHandle<()> {
        let mut created = self.cloud.created();
        let shoot = self.shoot_client.clone();
        tokio::spawn(async move {
            while let Some(machine) = created.recv().await {
                allow_node_agents(&shoot, &machine.node, &key).await;
            }
        })
    }

    fn diagnostics(&self) -> String {
        let logs = self
            .controllers
            .as_ref()
            .map(|c| c.logs(20))
            .unwrap_or_default();
        let nodes: String = self
            .cloud
            .node_names()
            .iter()
            .filter_map(|n| {
                self.cloud.with_node(n, |node| {
                    format!(
                        "{}{}",
                        node.describe("gardener-node-init.service"),
                        node.describe("gardener-node-agent.service")
                    )
                })
            })
            .collect();
        format!("cloud: {:?}\n{logs}\n{nodes}", self.cloud.machines())
    }
}

fn pool(name: &str, key: &str, user_data_secret: &str, size: i32) -> Value {
    json!({
        "name": name,
        "machineType": "local",
        "machineImage": {"name": "debian", "version": "13.2"},
        "minimum": size,
        "maximum": size,
        "maxSurge": 1,
        "maxUnavailable": 0,
        "zones": ["0"],
        "userDataSecretRef": {"name": user_data_secret, "key": "cloud_config"},
        "nodeAgentSecretName": key,
        "kubernetesVersion": KUBERNETES_VERSION,
        "updateStrategy": "AutoRollingUpdate",
    })
}

fn last_operation(worker: &Worker) -> Option<(LastOperationType, LastOperationState, String)> {
    let operation = worker.status.as_ref()?.default.last_operation.as_ref()?;
    Some((
        operation.type_,
        operation.state,
        operation.description.clone(),
    ))
}

async fn ready_nodes(shoot: &Client) -> Vec<String> {
    Api::<KubeNode>::all(shoot.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .map(|n| n.name_any())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the node components: make e2e-machines"]
async fn machines_of_the_real_mcm_boot_join_and_leave() {
    let mut landscape = Landscape::start().await;
    let key = format!("gardener-node-agent-{POOL}");
    let user_data_secret = landscape.provision_pool(POOL, &key).await;
    let _authorizer = landscape.authorize_new_nodes(key.clone());
    landscape.start_machine_controllers();
    let applied = Instant::now();
    landscape
        .create_worker(json!([pool(POOL, &key, &user_data_secret, 1)]))
        .await;

    // Create: MCM's Machine boots, joins, and the Worker succeeds.
    let workers = Api::<Worker>::namespaced(landscape.env.client.clone(), &landscape.env.namespace);
    let shoot = landscape.shoot_client.clone();
    let first_ready = wait_for("the first Node Ready", STAGE_TIMEOUT, || async {
        match ready_nodes(&shoot).await.first() {
            Some(node) => Ok(node.clone()),
            None => Err(landscape.diagnostics()),
        }
    })
    .await;
    eprintln!(
        "machines e2e: Worker applied → Node {first_ready} Ready in {:.1} s",
        since(applied)
    );
    let worker = wait_for("the Worker Succeeded", STAGE_TIMEOUT, || async {
        let worker = workers.get("worker").await.map_err(|e| e.to_string())?;
        match last_operation(&worker) {
            Some((LastOperationType::Create, LastOperationState::Succeeded, _)) => Ok(worker),
            other => Err(format!("{other:?}\n{}", landscape.diagnostics())),
        }
    })
    .await;
    eprintln!(
        "machines e2e: Worker applied → Worker Succeeded in {:.1} s",
        since(applied)
    );
    let status = worker.status.unwrap();
    assert_eq!(status.machine_deployments.len(), 1);
    let machines =
        Api::<McmMachine>::namespaced(landscape.env.client.clone(), &landscape.env.namespace);
    let listed = machines.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(listed.len(), 1, "one machine for minimum 1");
    let machine = &listed[0];
    assert_eq!(
        machine.labels().get("node").map(String::as_str),
        Some(first_ready.as_str()),
        "MCM's node label names the Node kubelet registered"
    );
    assert_eq!(
        machine.spec.provider_id.as_deref(),
        Some(format!("nspawn:///{first_ready}").as_str())
    );

    // Delete as gardenlet does: nothing is left.
    let deleting = Instant::now();
    support::gardener::confirm_and_delete(&workers, "worker").await;
    wait_for("the Worker gone", STAGE_TIMEOUT, || async {
        match workers.get_opt("worker").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(w) => Err(format!(
                "{:?}\n{}",
                last_operation(&w),
                landscape.diagnostics()
            )),
        }
    })
    .await;
    eprintln!("machines e2e: Worker deleted in {:.1} s", since(deleting));
    assert!(
        machines
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let nodes = Api::<KubeNode>::all(shoot.clone());
    wait_for("the Node gone", Duration::from_secs(60), || async {
        let left: Vec<String> = nodes
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    })
    .await;
    assert!(
        landscape.cloud.machines().is_empty(),
        "the cloud powered every node off"
    );
    assert!(landscape.cloud.node_names().is_empty());
}
