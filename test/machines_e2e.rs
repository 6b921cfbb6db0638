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
//! Machine, no class Secret, no MCM finalizer on the `cloudprovider` Secret, no Node, no node
//! in the cloud. A class whose image the cloud refuses
//! fails the Worker with the driver's sentence.
//!
//! What the nodes apply: in the create → join test
//! (`machines_of_the_real_mcm_boot_join_and_leave`) the whole reconcile OSC gardenlet ships —
//! rendered by gardener v1.149.3's `original` components (`reconcile-osc` of
//! `hack/envtest/components`, via `support::gardenlet_osc::render_reconcile`): kubelet's unit,
//! flags, configuration and CA with the binary from a hyperkube image in the loopback registry,
//! containerd's log rotation, kernel settings, journald, root certificates, sshd-ensurer and
//! the node agent — with only what an nspawn node cannot run replaced (its doc comment names
//! each piece and why); the test prints the lifecycle timeline. The other tests' nodes apply
//! gardenlet's node-agent component plus the tests' own containerd and kubelet units
//! (`support::node::NodeOsc`).
//!
//! The `lifecycle` tests (`make e2e-machines-lifecycle`) run longer, with the Machines sampled
//! every 500 ms: a rolling pool rolled by a new node-agent key (MCM core killed for 20 s in the
//! middle) and scaled up and down; an `AutoInPlaceUpdate` pool whose kubelet reservation
//! changes, updated by MCM's real in-place flow (candidate, selected, drained,
//! `ReadyForUpdate`, our agent's `update-result`, the machine moved to the new class's
//! MachineSet) on the same machines, the Worker's new `workerPoolToHashMap` entry only after;
//! and the driver killed in the middle of its create call (the cloud boots the machine, MCM
//! never got the answer): the restarted driver finds it, MCM adopts it, no second node; and a
//! control-plane migration: MCM stopped, Migrate, gardenlet's machine state and shallow delete,
//! Restore in another seed namespace, MCM started there adopts the same running machines; and
//! a slow cloud with provider-local's blocking create (the create call blocks for more than a
//! minute): the Worker reports it as a pending machine, and its delete in the middle of the
//! create completes. The Machines are sampled on a fixed schedule and the sampled extremes
//! (most machines, most unavailable) are asserted against the pool's budget; waits are bounded
//! by the progress they see, not by the clock (`support::progress`).
//!
//! The shoot authorizes node agents as a Gardener shoot does: no RBAC for them, GRM's
//! node-agent authorizer webhook decides by the Machines MCM creates from our Worker (the
//! node-agent Secret named by the node template's label, the Node by the Machine's `node`
//! label).
//!
//! Needs root, the node components and a static build of our binary; `make e2e-machines`
//! provides them, and `cargo test` skips those tests (`#[ignore]`); it runs only the two
//! checks of the harness itself (the sampler's schedule, the progress-bounded waits), in
//! paused time.

#![allow(clippy::unwrap_used, clippy::panic)]

mod support;

#[path = "machines_e2e/in_place_rollout.rs"]
mod in_place_rollout;
#[path = "machines_e2e/timeline.rs"]
mod timeline;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gardener_extension_node::api::machine::{Machine as McmMachine, MachineSet};
use gardener_extension_node::api::{
    Cluster, LastOperationState, LastOperationType, OperatingSystemConfig, Worker,
};
use gardener_extension_node::controllers::worker::credentials;
use gardener_extension_node::controllers::worker::hash::{class_hash, class_hash_in_place};
use k8s_openapi::api::core::v1::{Node as KubeNode, Secret};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use support::gardenlet_osc::{GardenletOsc, PoolFacts, ShootFacts, render, render_reconcile};
use support::machine_controllers::{Driver, MachineControllers, Targets};
use support::node::{Node, NodeOptions, NodeOsc, fit_gardenlet_reconcile};
use support::node_cloud::{Boot, NodeCloud};
use support::oci::{Image, ImageFile};
use support::progress::{Gaps, Observed, on_schedule, wait_while_progressing};
use support::registry::Registry;
use support::shoot::Shoot;
use support::{Crds, fixtures, wait_for};
use timeline::{Sampler, Timeline};

const SIGNING: Duration = Duration::from_secs(3600);
/// How long a landscape wait may see no progress ([`Landscape::wait`]), and the bound of the
/// few waits that observe nothing that could progress.
const STAGE_TIMEOUT: Duration = Duration::from_secs(300);
/// The samplers look every 500 ms, on a fixed schedule.
const SAMPLE_PERIOD: Duration = Duration::from_millis(500);
/// The longest time between two samples a sampler's extremes may rest on: anything that
/// lasts longer (a surge machine, a machine not Running) is seen.
const MAX_SAMPLE_GAP: Duration = Duration::from_secs(5);
const KUBERNETES_VERSION: &str = "1.36.3";
const PAUSE_IMAGE: &str = "e2e.local/pause:e2e";
const POOL: &str = "rolling";
/// The shoot's cluster DNS address (in the service range of the shoot's kube-apiserver).
const CLUSTER_DNS: &str = "10.0.0.10";
/// Where the test's registry has the hyperkube image (tag `v<KUBERNETES_VERSION>`).
const HYPERKUBE_REPOSITORY: &str = "gardener/hyperkube";
/// Where the test's registry has the pause image, and its tag.
const PAUSE_REPOSITORY: &str = "gardener/pause";
const PAUSE_TAG: &str = "e2e";

/// Where a pool's reconcile OSC comes from.
#[derive(Debug, Clone, Copy)]
enum NodeContent {
    /// gardenlet's node-agent component plus the tests' own containerd and kubelet
    /// ([`NodeOsc`]: cgroupfs, `AlwaysAllow`, the image preload).
    TestsKubelet,
    /// gardenlet's whole reconcile OSC, fitted to the nspawn node
    /// ([`Landscape::provision_pool_from_gardenlet`]).
    Gardenlets,
}

/// The pool as the Shoot's `spec.provider.workers[]` entry gardenlet renders the reconcile
/// OSC from: the Worker's machine image, containerd, and kubelet's `KubeletInUserNamespace`
/// feature gate (the node runs in a user namespace: `support::node`'s module docs) set the
/// way a shoot owner sets a pool's kubelet feature gates.
fn gardenlets_pool(name: &str) -> Value {
    json!({
        "name": name,
        "machine": {"type": "local", "image": {"name": "debian", "version": "13.2"}},
        "cri": {"name": "containerd"},
        "minimum": 1,
        "maximum": 1,
        "kubernetes": {"kubelet": {"featureGates": {"KubeletInUserNamespace": true}}},
    })
}

/// The rolling pool of [`Landscape::with_rolling_pool`].
struct RollingPool {
    key: String,
    user_data_secret: String,
}

/// What gardenlet provisioned for a pool.
struct Provisioned {
    user_data_secret: String,
    /// The reconcile OSC without in-place content.
    reconcile: Value,
}

/// gardenlet's in-place content of a pool's reconcile OSC: `spec.inPlaceUpdates` and the
/// kubelet reservation that the in-place hash (and the agent's `kubelet.config` flag) reads.
#[derive(Debug, Clone)]
struct InPlace {
    /// The version the nodes run (the node image is the host's `/usr`), so that only the
    /// kubelet configuration needs an update.
    os_version: String,
    kube_reserved_memory: String,
}

impl InPlace {
    fn apply_to(&self, reconcile: &Value) -> Value {
        let mut osc = reconcile.clone();
        osc["spec"]["inPlaceUpdates"] = json!({
            "operatingSystemVersion": self.os_version,
            "kubelet": KUBERNETES_VERSION,
        });
        for file in osc["spec"]["files"].as_array_mut().unwrap() {
            if file["path"] == "/var/lib/kubelet/config/kubelet" {
                let text = file["content"]["inline"]["data"]
                    .as_str()
                    .unwrap()
                    .to_string();
                let memory = &self.kube_reserved_memory;
                file["content"]["inline"]["data"] =
                    json!(format!("{text}kubeReserved: {{memory: \"{memory}\"}}\n"));
            }
        }
        osc
    }

    /// The pool's `kubeletConfig` with the same reservation.
    fn kubelet_config(&self) -> Value {
        json!({"kubeReserved": {"memory": self.kube_reserved_memory}})
    }
}

/// The OS version the agent reads on a node of this host (its `/usr/lib/os-release`; the
/// nodes have no `/etc/debian_version`).
fn nodes_os_version() -> String {
    let os_release = std::fs::read_to_string("/usr/lib/os-release").unwrap();
    gardener_extension_node::agent::in_place::rules::os_version(&os_release, None)
        .expect("an OS version in /usr/lib/os-release")
}

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
    /// The seed namespace the Worker and MCM are in (the test's, or a restore's destination).
    namespace: String,
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
            namespace: env.namespace.clone(),
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

    /// A landscape with gardenlet's content for the rolling pool [`POOL`]; MCM is not started
    /// yet.
    async fn with_rolling_pool() -> (Self, RollingPool) {
        Self::with_rolling_pool_of(NodeContent::TestsKubelet).await
    }

    /// [`Self::with_rolling_pool`], the pool's reconcile OSC from `content`.
    async fn with_rolling_pool_of(content: NodeContent) -> (Self, RollingPool) {
        let landscape = Self::start().await;
        let key = format!("gardener-node-agent-{POOL}");
        let user_data_secret = match content {
            NodeContent::TestsKubelet => landscape.provision_pool(POOL, &key).await,
            NodeContent::Gardenlets => {
                landscape.push_gardenlets_node_images();
                landscape
                    .provision_pool_from_gardenlet(POOL, &key)
                    .await
                    .user_data_secret
            }
        };
        let pool = RollingPool {
            key,
            user_data_secret,
        };
        (landscape, pool)
    }

    /// gardenlet's part for one pool: the node-agent RBAC of TLS bootstrapping, the provision
    /// and reconcile OSCs (gardenlet's own rendering); returns the user data Secret's name.
    async fn provision_pool(&self, pool: &str, key: &str) -> String {
        self.provision_pool_with(pool, key, None)
            .await
            .user_data_secret
    }

    /// [`Self::provision_pool`], for an in-place pool with gardenlet's in-place content.
    async fn provision_pool_with(
        &self,
        pool: &str,
        key: &str,
        in_place: Option<&InPlace>,
    ) -> Provisioned {
        let gardenlet = self.gardenlets_provision_content(pool, key).await;
        let node_osc = NodeOsc::bootstrapping(
            self.shoot.plane.server_url(),
            self.shoot.plane.ca_pem(),
            pool,
            key,
            PAUSE_IMAGE,
        );
        let base = gardenlet.reconcile(node_osc.cri_config(), &node_osc.files(), &node_osc.units());
        let created = match in_place {
            Some(in_place) => in_place.apply_to(&base),
            None => base.clone(),
        };
        self.create_pool_oscs(&gardenlet, key, &created, base).await
    }

    /// Creates gardenlet's provision OSC and the reconcile OSC `created` of a pool and waits
    /// for the provision OSC's user data; `reconcile` is the reconcile OSC the test keeps.
    async fn create_pool_oscs(
        &self,
        gardenlet: &GardenletOsc,
        key: &str,
        created: &Value,
        reconcile: Value,
    ) -> Provisioned {
        let env = &self.env;
        gardenlet
            .create_oscs(&env.client, &env.namespace, created)
            .await;
        support::agent::user_data(&env.client, &env.namespace, key, STAGE_TIMEOUT).await;
        Provisioned {
            user_data_secret: format!("osc-result-{key}-init"),
            reconcile,
        }
    }

    /// Where the loopback registry serves the node-agent image.
    fn node_agent_repository(&self) -> String {
        format!("{}/gardener/node-agent", self.registry.host())
    }

    /// gardenlet's provision content for `pool` (its own rendering, the node agent from the
    /// registry), with its TLS-bootstrapping RBAC installed in the shoot.
    async fn gardenlets_provision_content(&self, pool: &str, key: &str) -> GardenletOsc {
        let repository = self.node_agent_repository();
        let server_url = self.shoot.plane.server_url();
        let gardenlet = render(
            &self.assets,
            &self.pool_facts(pool, key, &repository, &server_url),
        );
        gardenlet.install_shoot_rbac(&self.shoot_client).await;
        gardenlet
    }

    fn pool_facts<'a>(
        &'a self,
        pool: &'a str,
        key: &'a str,
        repository: &'a str,
        server_url: &'a str,
    ) -> PoolFacts<'a> {
        PoolFacts {
            namespace: &self.env.namespace,
            pool,
            key,
            server_url,
            ca_pem: self.shoot.plane.ca_pem(),
            kubernetes_version: KUBERNETES_VERSION,
            node_agent_image: (repository, "ours"),
        }
    }

    /// Pushes what gardenlet's reconcile OSC pulls besides the node agent: the hyperkube image
    /// whose `/kubelet` the OSC installs as `/opt/bin/kubelet` (the kubelet `hack/envtest.sh`
    /// builds) and the pause image containerd's sandboxes run.
    fn push_gardenlets_node_images(&self) {
        let host = self.registry.host();
        self.registry.push(&Image {
            reference: format!("{host}/{HYPERKUBE_REPOSITORY}:v{KUBERNETES_VERSION}"),
            entrypoint: vec!["/kubelet".into()],
            files: vec![ImageFile::executable(
                "/kubelet",
                self.assets.join("kubelet"),
            )],
        });
        self.registry.push(&Image {
            reference: format!("{host}/{PAUSE_REPOSITORY}:{PAUSE_TAG}"),
            entrypoint: vec!["/bin/busybox".into(), "sleep".into(), "2147483647".into()],
            files: vec![ImageFile::executable("/bin/busybox", "/bin/busybox")],
        });
    }

    /// gardenlet's part for one pool with gardenlet's whole reconcile OSC: the provision OSC
    /// and RBAC as [`Self::provision_pool`], the reconcile OSC rendered by gardener's
    /// components (`support::gardenlet_osc::render_reconcile`, the pool as
    /// [`gardenlets_pool`]), fitted to the nspawn node (`support::node::fit_gardenlet_reconcile`).
    async fn provision_pool_from_gardenlet(&self, pool: &str, key: &str) -> Provisioned {
        let gardenlet = self.gardenlets_provision_content(pool, key).await;
        let host = self.registry.host();
        let node_agent = self.node_agent_repository();
        let hyperkube = format!("{host}/{HYPERKUBE_REPOSITORY}");
        let pause = format!("{host}/{PAUSE_REPOSITORY}");
        let kubelet_tag = format!("v{KUBERNETES_VERSION}");
        let worker = gardenlets_pool(pool);
        let server_url = self.shoot.plane.server_url();
        let rendered = render_reconcile(
            &self.assets,
            &self.pool_facts(pool, key, &node_agent, &server_url),
            &ShootFacts {
                worker: &worker,
                cluster_dns: CLUSTER_DNS,
                kubelet_ca_pem: self.shoot.plane.ca_pem(),
                hyperkube_image: (&hyperkube, &kubelet_tag),
                pause_image: (&pause, PAUSE_TAG),
            },
        );
        let reconcile = fit_gardenlet_reconcile(&rendered);
        self.create_pool_oscs(&gardenlet, key, &reconcile, reconcile.clone())
            .await
    }

    /// Writes gardenlet's changed reconcile OSC (spec and the `reconcile` operation).
    async fn change_reconcile_osc(&self, reconcile: &Value) {
        let oscs =
            Api::<OperatingSystemConfig>::namespaced(self.env.client.clone(), &self.env.namespace);
        let name = reconcile["metadata"]["name"].as_str().unwrap().to_string();
        let patch = json!({"spec": reconcile["spec"].clone(),
                           "metadata": {"annotations": {"gardener.cloud/operation": "reconcile"}}});
        oscs.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
    }

    /// Adds `worker` (a Shoot's `spec.provider.workers` entry) to the Shoot in the Cluster, as
    /// gardenlet's Cluster lists every pool of the Shoot.
    async fn list_pool_in_cluster(&self, worker: Value) {
        let mut workers =
            fixtures::shoot_json(&self.namespace)["spec"]["provider"]["workers"].clone();
        workers.as_array_mut().unwrap().push(worker);
        let patch = json!({"spec": {"shoot": {"spec": {"provider": {"workers": workers}}}}});
        Api::<Cluster>::all(self.env.client.clone())
            .patch(
                &self.env.namespace,
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .unwrap();
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
        self.start_machine_controllers_with(false);
    }

    /// [`Self::start_machine_controllers`], with provider-local's blocking create or not.
    fn start_machine_controllers_with(&mut self, blocking_create: bool) {
        self.controllers = Some(MachineControllers::start(
            &Targets {
                assets: &self.assets,
                seed_kubeconfig: &self.env.kubeconfig,
                shoot_kubeconfig: Some(self.shoot.plane.kubeconfig()),
                namespace: &self.namespace,
            },
            Driver::Nspawn {
                url: self.cloud.url().to_string(),
                blocking_create,
            },
        ));
    }

    fn workers(&self) -> Api<Worker> {
        self.api()
    }

    fn machines(&self) -> Api<McmMachine> {
        self.api()
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    {
        Api::namespaced(self.env.client.clone(), &self.namespace)
    }

    /// What counts as progress in a wait on the landscape: each Machine's phase, node and
    /// deletion, the Ready Nodes, the Worker's last operation.
    async fn progress(&self) -> String {
        let machines = self.machines().list(&ListParams::default()).await;
        let mut parts: Vec<String> = machines
            .map(|l| l.items)
            .unwrap_or_default()
            .iter()
            .map(|m| {
                format!(
                    "{}={}/{}{}",
                    m.name_any(),
                    phase(m).unwrap_or("-"),
                    m.labels().get("node").map_or("-", String::as_str),
                    if m.metadata.deletion_timestamp.is_some() {
                        "/deleting"
                    } else {
                        ""
                    }
                )
            })
            .collect();
        parts.sort();
        let worker = self.workers().get_opt("worker").await.ok().flatten();
        let operation = worker
            .as_ref()
            .and_then(last_operation)
            .map(|(kind, state, _)| format!("{kind:?} {state:?}"));
        format!(
            "machines [{}], Ready Nodes {:?}, Worker {operation:?}",
            parts.join(", "),
            ready_nodes(&self.shoot_client).await
        )
    }

    /// Polls `check` until it holds, failing only once the landscape has shown no progress
    /// ([`Self::progress`]) for [`STAGE_TIMEOUT`]: a busy machine makes a stage slower, not
    /// a failure.
    async fn wait<T, F, Fut>(&self, what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, String>>,
    {
        wait_while_progressing(what, STAGE_TIMEOUT, || {
            let look = check();
            async move {
                match look.await {
                    Ok(value) => Ok(value),
                    Err(last) => Err(Observed {
                        progress: self.progress().await,
                        last,
                    }),
                }
            }
        })
        .await
    }

    /// Waits until gardenlet would call the Worker ready after `operation`.
    async fn worker_ready(&self, operation: LastOperationType) -> Worker {
        let workers = self.workers();
        self.wait(&format!("the Worker ready after {operation:?}"), || async {
            let worker = workers.get("worker").await.map_err(|e| e.to_string())?;
            match support::gardener::check_ready(&worker, operation) {
                Ok(()) => Ok(worker),
                Err(why) => Err(format!("{why}\n{}", self.diagnostics())),
            }
        })
        .await
    }

    /// Deletes the Worker as gardenlet does and checks that nothing is left: no Worker, no
    /// Machine, no class Secret, no MCM finalizer on the `cloudprovider` Secret, no Node, no
    /// node in the cloud. Returns how long it took.
    async fn delete_worker_and_check_nothing_is_left(&self) -> f64 {
        let deleting = Instant::now();
        let workers = self.workers();
        support::gardener::confirm_and_delete(&workers, "worker").await;
        self.check_deleted(deleting).await
    }

    /// The checks of [`Self::delete_worker_and_check_nothing_is_left`] once the Worker is
    /// being deleted (since `deleting`).
    async fn check_deleted(&self, deleting: Instant) -> f64 {
        let workers = self.workers();
        self.wait("the Worker gone", || async {
            match workers.get_opt("worker").await.map_err(|e| e.to_string())? {
                None => Ok(()),
                Some(w) => Err(format!("{:?}\n{}", last_operation(&w), self.diagnostics())),
            }
        })
        .await;
        let took = since(deleting);
        let machines = self.machines().list(&ListParams::default()).await.unwrap();
        assert!(machines.items.is_empty(), "{:?}", machines.items);
        // The Worker's finalizer went only after MCM let go of the credentials and every
        // class Secret was gone (`WaitUntilMachineResourcesDeleted`, then
        // `waitUntilCredentialsSecretAcquiredOrReleased`).
        let secrets = self.api::<Secret>();
        let cloudprovider = secrets.get("cloudprovider").await.unwrap();
        assert!(
            !credentials::held(&cloudprovider),
            "no MCM finalizer left on the cloudprovider Secret: {:?}",
            cloudprovider.finalizers()
        );
        let class_secrets = secrets
            .list(&ListParams::default().labels("gardener.cloud/purpose=machineclass"))
            .await
            .unwrap();
        assert!(
            class_secrets.items.is_empty(),
            "no class Secret left: {:?}",
            class_secrets
                .items
                .iter()
                .map(ResourceExt::name_any)
                .collect::<Vec<_>>()
        );
        let nodes = Api::<KubeNode>::all(self.shoot_client.clone());
        wait_for("the Nodes gone", Duration::from_secs(60), || async {
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
            self.cloud.machines().is_empty(),
            "the cloud powered every node off: {:?}",
            self.cloud.machines()
        );
        assert!(self.cloud.node_names().is_empty());
        took
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

/// Create → join → delete with gardenlet's whole reconcile OSC (`NodeContent::Gardenlets`):
/// the machine MCM creates boots from gardenlet's provision content, our agent bootstraps and
/// applies the reconcile OSC gardener v1.149.3's `original` components render for the pool —
/// kubelet (gardenlet's unit, flags, configuration and CA; the binary an `imageRef` file of
/// the hyperkube image the test pushes to its registry, built from the kubelet of
/// `hack/envtest.sh`), containerd (log rotation, CA-triggered restart; sandbox image from the
/// registry), kernel settings, journald, root certificates, sshd-ensurer and the node agent —
/// and kubelet joins with gardenlet's configuration. Checked on the node: the kubelet
/// configuration file is gardenlet's (webhook authentication and authorization, anonymous
/// off, `protectKernelDefaults`, `serverTLSBootstrap`, kube reservation, eviction, the
/// critical-components taint, cluster DNS), kubelet runs `/opt/bin/kubelet` with gardenlet's
/// flags, every file and unit of the OSC is on the node; and on the Node: gardenlet's labels
/// and taint (removed by the shoot GRM's real node-critical-components controller, read from
/// GRM's log; MCM keeps a tainted machine `Pending`; the timeline shows when), allocatable =
/// capacity − kubeReserved − evictionHard, and kubelet's serving
/// CSR (`serverTLSBootstrap`; the test shoot signs no serving certificates, so kubelet's
/// `configz` is not reachable and not read).
///
/// What the test changes in gardenlet's output, each because the nspawn node cannot run it
/// (`support::node::fit_gardenlet_reconcile` has the details): the cgroup driver (`cgroupfs`,
/// criConfig and kubelet), `failCgroupV1: false` (the host's hybrid layout is v1 to kubelet),
/// the CNI (the bridge plugin as file and criConfig patch: a landscape's network extension
/// brings one), `--node-ip` in kubelet's `extra_args` file (no default route on the node), and
/// `restrict_oom_score_adj` (no `CAP_SYS_RESOURCE` here). The pool's kubelet feature gate
/// `KubeletInUserNamespace` is input to gardenlet's rendering, not an override
/// ([`gardenlets_pool`]); the shoot has SSH access and node logging off (gardenlet then renders
/// the sshd-ensurer that masks sshd, and no log shipper, whose OpenTelemetry collector image
/// and ingress the test does not have). The kernel settings file is written, but the values
/// kubelet checks are the node fixture's (`support::node`).
///
/// Prints the lifecycle timeline (`timeline`) in seconds since the Worker's creation and
/// deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the node components: make e2e-machines"]
async fn machines_of_the_real_mcm_boot_join_and_leave() {
    let (
        mut landscape,
        RollingPool {
            key,
            user_data_secret,
            ..
        },
    ) = Landscape::with_rolling_pool_of(NodeContent::Gardenlets).await;
    landscape.start_machine_controllers();
    let sampler = |deleting| {
        let timeline = Timeline::starting_now();
        let task = Sampler {
            machines: landscape.machines(),
            workers: landscape.workers(),
            shoot: landscape.shoot_client.clone(),
        }
        .spawn(timeline.clone(), deleting);
        (timeline, task)
    };
    let (timeline, sampling) = sampler(false);
    timeline.record("Worker created");
    landscape
        .create_worker(json!([pool(POOL, &key, &user_data_secret, 1)]))
        .await;

    // Create: MCM's Machine boots, joins, and the Worker succeeds.
    let shoot = landscape.shoot_client.clone();
    let first_ready = landscape
        .wait("the first Node Ready", || async {
            match ready_nodes(&shoot).await.first() {
                Some(node) => Ok(node.clone()),
                None => Err(landscape.diagnostics()),
            }
        })
        .await;
    // The sampler looks every 250 ms; the wait above has seen it for sure (the first record
    // of a step is kept).
    timeline.record("Node Ready");
    let worker = landscape.worker_ready(LastOperationType::Create).await;
    timeline.record("Worker Succeeded");
    sampling.abort();
    // The agent logs its apply once every job of it is done, which may be after the Node is
    // Ready (kubelet is one of the jobs).
    let agent_log = |node: &Node| {
        let journal = ["journalctl", "--no-pager", "-o", "cat"];
        let out = node
            .machine
            .run(&[&journal[..], &["-u", "gardener-node-agent.service"]].concat());
        format!("{}{}", out.stdout, out.stderr)
    };
    let applied = wait_for("the agent's apply logged", STAGE_TIMEOUT, || async {
        let Some(log) = landscape.cloud.with_node(&first_ready, agent_log) else {
            return Err(format!(
                "{first_ready} not among the cloud's nodes (its user data still running?): {:?}",
                landscape.cloud.machines()
            ));
        };
        if log.contains("OSC applied to the node") {
            Ok(())
        } else {
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            Err(format!("agent's journal ends: {tail:#?}"))
        }
    });
    applied.await;
    let log = landscape
        .cloud
        .with_node(&first_ready, agent_log)
        .unwrap_or_default();
    for line in log.lines().filter(|l| {
        l.contains("OSC applied")
            || l.contains("WARN")
            || l.contains("job")
            || l.contains("exiting")
    }) {
        eprintln!("machines e2e: agent: {line}");
    }
    landscape
        .cloud
        .with_node(&first_ready, |node| timeline.read_node_journal(node))
        .expect("the Ready node is up");
    timeline.print("create with gardenlet's reconcile OSC (s since the Worker was created):");
    for step in [
        "Machine created (MCM)",
        "node-init ran: bootstrap finished",
        "node agent's client CSR approved",
        "OSC applied (agent)",
        "kubelet started",
        "Node Ready",
    ] {
        assert!(
            timeline.at(step).is_some(),
            "{step} seen: {:?}",
            timeline.sorted()
        );
    }
    // gardenlet's registerWithTaints: the Node came with the critical-components taint, and
    // the shoot GRM's node-critical-components controller removed it (often faster than the
    // timeline's 250 ms sampler sees it).
    let grm_log = landscape.shoot.resource_manager_log();
    assert!(
        grm_log.lines().any(|line| line
            .contains("All node-critical components got ready, removing taint")
            && line.contains(&first_ready)),
        "GRM removed the taint of {first_ready}; GRM log:\n{grm_log}"
    );

    let status = worker.status.unwrap();
    assert_eq!(status.machine_deployments.len(), 1);
    let listed = landscape
        .machines()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
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
    let reconcile = Api::<OperatingSystemConfig>::namespaced(
        landscape.env.client.clone(),
        &landscape.env.namespace,
    )
    .get(&format!("{key}-original"))
    .await
    .unwrap();
    let reconcile = serde_json::to_value(&reconcile).unwrap();
    let checked = landscape
        .cloud
        .with_node(&first_ready, |node| {
            gardenlets_kubelet_runs_on(node, &reconcile, &landscape.assets)
        })
        .expect("the Ready node is up");
    eprintln!("machines e2e: gardenlet's kubelet on {first_ready}: {checked}");
    gardenlets_kubelet_shows_on_the_node(&shoot, &first_ready, &key).await;

    let (timeline, sampling) = sampler(true);
    timeline.record("Worker deleted (gardenlet's delete)");
    let deleting = Instant::now();
    support::gardener::confirm_and_delete(&landscape.workers(), "worker").await;
    let took = landscape.check_deleted(deleting).await;
    timeline.record("nothing left (checked)");
    // One more look of the sampler (the Worker may have gone since its last).
    tokio::time::sleep(Duration::from_millis(300)).await;
    sampling.abort();
    timeline.print("delete (s since the Worker was deleted):");
    eprintln!("machines e2e: Worker deleted in {took:.1} s");
}

/// On `node`: the kubelet configuration is gardenlet's as created in `reconcile` (with the
/// test's overrides), kubelet runs gardenlet's binary with gardenlet's flags, and every file and
/// unit of the OSC is there. Returns a summary.
fn gardenlets_kubelet_runs_on(node: &Node, reconcile: &Value, assets: &std::path::Path) -> String {
    let files = reconcile["spec"]["files"].as_array().unwrap();
    let shipped = files
        .iter()
        .find(|f| f["path"] == "/var/lib/kubelet/config/kubelet")
        .unwrap();
    let wanted = support::node::decoded_kubelet_config(shipped);
    let on_node: Value = serde_norway::from_slice(
        &node
            .machine
            .read_file("/var/lib/kubelet/config/kubelet")
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        on_node, wanted,
        "the node's kubelet configuration is the OSC's"
    );
    // gardenlet's values (not the test's former AlwaysAllow/anonymous-off-only configuration).
    assert_eq!(on_node["authorization"]["mode"], "Webhook");
    assert_eq!(on_node["authentication"]["webhook"]["enabled"], true);
    assert_eq!(on_node["authentication"]["anonymous"]["enabled"], false);
    assert_eq!(
        on_node["authentication"]["x509"]["clientCAFile"],
        "/var/lib/kubelet/ca.crt"
    );
    assert_eq!(on_node["protectKernelDefaults"], true);
    assert_eq!(on_node["serverTLSBootstrap"], true);
    assert_eq!(on_node["rotateCertificates"], true);
    assert_eq!(
        on_node["kubeReserved"],
        json!({"cpu": "80m", "memory": "1Gi"})
    );
    assert_eq!(on_node["evictionHard"]["memory.available"], "100Mi");
    assert_eq!(on_node["maxPods"], 110);
    assert_eq!(on_node["clusterDNS"], json!([CLUSTER_DNS]));
    assert_eq!(on_node["clusterDomain"], "cluster.local");
    assert_eq!(
        on_node["featureGates"],
        json!({"KubeletInUserNamespace": true})
    );
    // The test's overrides.
    assert_eq!(on_node["cgroupDriver"], "cgroupfs");
    assert_eq!(on_node["failCgroupV1"], false);

    // kubelet is gardenlet's binary (the hyperkube image's /kubelet) with gardenlet's flags.
    // MainPID is 0 while kubelet restarts: ask again (for up to 30 s).
    let mut cmdline = String::new();
    for _ in 0..60 {
        let pid = node.machine.unit_property("kubelet.service", "MainPID");
        if pid != "0" {
            cmdline = node
                .machine
                .run(&["cat", &format!("/proc/{pid}/cmdline")])
                .stdout;
            if !cmdline.is_empty() {
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let argv: Vec<String> = cmdline
        .split('\0')
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect();
    assert_eq!(
        argv.first().map(String::as_str),
        Some("/opt/bin/kubelet"),
        "{argv:?}"
    );
    for flag in [
        "--bootstrap-kubeconfig=/var/lib/kubelet/kubeconfig-bootstrap",
        "--config=/var/lib/kubelet/config/kubelet",
        "--kubeconfig=/var/lib/kubelet/kubeconfig-real",
        "--container-runtime-endpoint=unix:///run/containerd/containerd.sock",
        "--runtime-cgroups=/system.slice/containerd.service",
        &format!("--node-labels=worker.gardener.cloud/kubernetes-version={KUBERNETES_VERSION}"),
        &format!("--node-ip={}", support::node::NODE_IP),
    ] {
        assert!(
            argv.iter().any(|a| a == flag),
            "kubelet runs with {flag}: {argv:?}"
        );
    }
    let binary = node.machine.read_file("/opt/bin/kubelet").unwrap();
    let built = std::fs::read(assets.join("kubelet")).unwrap();
    assert!(
        binary == built,
        "/opt/bin/kubelet is the kubelet of the hyperkube image"
    );

    for file in files {
        let path = file["path"].as_str().unwrap();
        assert!(node.machine.exists(path), "{path} of the OSC on the node");
    }
    let units = reconcile["spec"]["units"].as_array().unwrap();
    for unit in units.iter().filter(|u| u["content"].is_string()) {
        let path = format!("/etc/systemd/system/{}", unit["name"].as_str().unwrap());
        assert!(node.machine.exists(&path), "{path} of the OSC on the node");
    }
    let states: Vec<String> = [
        "kubelet.service",
        "containerd.service",
        "systemd-sysctl.service",
        "updatecacerts.service",
        "sshd-ensurer.service",
        "containerd-logrotate.timer",
    ]
    .iter()
    .map(|unit| format!("{unit} {}", node.machine.unit_property(unit, "ActiveState")))
    .collect();
    format!(
        "{} files and {} units of gardenlet's OSC on the node; kubelet restarts {}; {}",
        files.len(),
        units.len(),
        node.machine.unit_property("kubelet.service", "NRestarts"),
        states.join(", ")
    )
}

/// In the shoot: the Node shows gardenlet's kubelet configuration — its labels, allocatable = capacity − kubeReserved − evictionHard — and kubelet
/// asked for a serving certificate (`serverTLSBootstrap`).
async fn gardenlets_kubelet_shows_on_the_node(shoot: &Client, name: &str, key: &str) {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
    let node = Api::<KubeNode>::all(shoot.clone()).get(name).await.unwrap();
    let labels = node.labels();
    for (label, value) in [
        (
            "worker.gardener.cloud/kubernetes-version",
            KUBERNETES_VERSION,
        ),
        ("worker.gardener.cloud/pool", POOL),
        ("worker.gardener.cloud/gardener-node-agent-secret-name", key),
        ("node.kubernetes.io/role", "node"),
        ("worker.gardener.cloud/cri-name", "containerd"),
    ] {
        assert_eq!(
            labels.get(label).map(String::as_str),
            Some(value),
            "{label}"
        );
    }
    let status = node.status.clone().unwrap();
    let (capacity, allocatable) = (status.capacity.unwrap(), status.allocatable.unwrap());
    let memory = |q: &BTreeMap<String, Quantity>| bytes(&q["memory"].0);
    assert_eq!(
        memory(&capacity) - memory(&allocatable),
        (1024 + 100) * 1024 * 1024,
        "allocatable memory = capacity − kubeReserved 1Gi − evictionHard 100Mi"
    );
    let millicores = |q: &BTreeMap<String, Quantity>| millicores(&q["cpu"].0);
    assert_eq!(
        millicores(&capacity) - millicores(&allocatable),
        80,
        "allocatable CPU = capacity − kubeReserved 80m"
    );
    let csrs = Api::<CertificateSigningRequest>::all(shoot.clone());
    let user = format!("system:node:{name}");
    wait_for("kubelet's serving CSR", Duration::from_secs(60), || async {
        let list = csrs
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        list.items
            .iter()
            .find(|c| {
                c.spec.signer_name == "kubernetes.io/kubelet-serving"
                    && c.spec.username.as_deref() == Some(user.as_str())
            })
            .map(|_| ())
            .ok_or_else(|| format!("{} CSRs, none for serving from {user}", list.items.len()))
    })
    .await;
}

/// A memory quantity (`Ki`, `Mi`, `Gi` or plain bytes) in bytes.
fn bytes(quantity: &str) -> i64 {
    let units = [("Ki", 1 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30)];
    for (suffix, factor) in units {
        if let Some(number) = quantity.strip_suffix(suffix) {
            return number.parse::<i64>().unwrap() * factor;
        }
    }
    quantity.parse().unwrap()
}

/// A CPU quantity (`1920m` or whole cores) in millicores.
fn millicores(quantity: &str) -> i64 {
    match quantity.strip_suffix('m') {
        Some(number) => number.parse().unwrap(),
        None => quantity.parse::<i64>().unwrap() * 1000,
    }
}

/// Bad input: the cloud refuses the machine's image. The Worker's lastError says so in one
/// sentence (MCM's failed machine with the driver's words), and its delete leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the node components: make e2e-machines"]
async fn a_machine_the_driver_refuses_fails_the_worker_with_the_drivers_words() {
    let (
        mut landscape,
        RollingPool {
            key,
            user_data_secret,
            ..
        },
    ) = Landscape::with_rolling_pool().await;
    landscape.start_machine_controllers();
    let mut refused = pool(POOL, &key, &user_data_secret, 1);
    refused["providerConfig"] = json!({
        "apiVersion": "node.extensions.config.gardener.cloud/v1alpha1",
        "kind": "WorkerConfig",
        "image": "local/machine:nobody-offers-this",
    });
    landscape.create_worker(json!([refused])).await;
    let workers = landscape.workers();
    let error = wait_for("the Worker's lastError", STAGE_TIMEOUT, || async {
        let worker = workers.get("worker").await.map_err(|e| e.to_string())?;
        worker
            .status
            .and_then(|s| s.default.last_error)
            .map(|e| e.description)
            .filter(|d| d.contains("failed"))
            .ok_or_else(|| landscape.diagnostics())
    })
    .await;
    eprintln!("machines e2e: the Worker says: {error}");
    assert!(
        error.contains("image \"local/machine:nobody-offers-this\" is not offered by this cloud"),
        "{error}"
    );
    assert_eq!(error.lines().count(), 1, "one sentence: {error}");
    assert!(landscape.cloud.node_names().is_empty(), "no node booted");
    landscape.delete_worker_and_check_nothing_is_left().await;
}

/// What the sampler saw of one pool's machines, every [`SAMPLE_PERIOD`].
#[derive(Debug, Default, Clone, Copy)]
struct Extremes {
    /// How many samples, and the longest time between two.
    gaps: Gaps,
    /// Most machines at once (neither deleted nor Terminating).
    most_machines: usize,
    /// Most wanted machines missing a Running one.
    most_unavailable: usize,
    /// Samples in which the Worker reported the new in-place hash while a machine was not
    /// yet owned by a MachineSet of the new class (MCM moves a machine there once its node
    /// reported `update-result=successful`).
    hash_before_update: usize,
}

/// An in-place pool's new hash, watched by [`sample`].
#[derive(Clone)]
struct HashWatch {
    workers: Api<Worker>,
    sets: Api<MachineSet>,
    pool: String,
    hash: String,
    /// The end of the new class's name (`-<class hash>`).
    class_suffix: String,
}

impl Extremes {
    /// Nothing seen yet; gaps count from now.
    fn from_now() -> Self {
        Extremes {
            gaps: Gaps::start(tokio::time::Instant::now()),
            ..Extremes::default()
        }
    }

    /// What the sampler saw until now (the time since its last sample counts as a gap).
    fn until_now(seen: &Mutex<Extremes>) -> Self {
        let mut extremes = *seen.lock().unwrap();
        extremes.gaps = extremes.gaps.until(tokio::time::Instant::now());
        extremes
    }

    /// The extremes rest on samples at most [`MAX_SAMPLE_GAP`] apart.
    fn assert_dense(&self, step: &str) {
        let longest = self.gaps.longest;
        assert!(
            longest <= MAX_SAMPLE_GAP,
            "{step}: {longest:?} between two samples, more than {MAX_SAMPLE_GAP:?}: {self:?}"
        );
    }

    /// Scaling from `before` to `size` machines (maxSurge 1, maxUnavailable 0): never more
    /// machines than the larger of the two (a scale needs no surge), and no machine that ran
    /// stopped running before its replacement or the scale-down (only the machines being
    /// added are missing a Running one).
    fn assert_scaled_within_budget(&self, before: usize, size: usize) {
        self.assert_dense(&format!("scale {before} → {size}"));
        assert!(
            self.most_machines <= before.max(size),
            "scale {before} → {size}: at most {} machines: {self:?}",
            before.max(size)
        );
        assert!(
            self.most_unavailable <= size.saturating_sub(before),
            "scale {before} → {size}: at most {} of {size} without a Running machine: {self:?}",
            size.saturating_sub(before)
        );
    }
}

impl HashWatch {
    async fn reported(&self) -> bool {
        let Ok(worker) = self.workers.get("worker").await else {
            return false;
        };
        worker
            .status
            .and_then(|s| s.in_place_updates)
            .and_then(|u| u.worker_pool_to_hash_map.get(&self.pool).cloned())
            .as_deref()
            == Some(self.hash.as_str())
    }

    /// Whether every machine is owned by a MachineSet of the new class.
    async fn all_moved(&self, machines: &[McmMachine]) -> bool {
        let Ok(sets) = self.sets.list(&ListParams::default()).await else {
            return false;
        };
        let new_sets: Vec<String> = sets
            .items
            .iter()
            .filter(|s| {
                s.spec
                    .template
                    .as_ref()
                    .and_then(|t| t.spec.as_ref())
                    .and_then(|t| t.class.as_ref())
                    .is_some_and(|c| c.name.ends_with(&self.class_suffix))
            })
            .map(ResourceExt::name_any)
            .collect();
        machines.iter().all(|m| {
            m.owner_references()
                .iter()
                .any(|o| new_sets.contains(&o.name))
        })
    }
}

/// (machines of the class ending in `suffix`, all machines) in the namespace.
async fn machines_of_class(
    machines: &Api<McmMachine>,
    suffix: &str,
) -> Result<(usize, usize), String> {
    let list = machines
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let of_class = list
        .items
        .iter()
        .filter(|m| {
            m.spec
                .class
                .as_ref()
                .is_some_and(|c| c.name.ends_with(suffix))
        })
        .count();
    Ok((of_class, list.items.len()))
}

/// Samples the namespace's Machines every [`SAMPLE_PERIOD`] (a fixed schedule) against
/// `wanted` until aborted, and with `hash` whether the Worker reports the new hash too early.
fn sample(
    machines: Api<McmMachine>,
    wanted: Arc<AtomicUsize>,
    seen: Arc<Mutex<Extremes>>,
    hash: Option<HashWatch>,
) -> tokio::task::JoinHandle<()> {
    on_schedule(SAMPLE_PERIOD, move || {
        let (machines, wanted, seen, hash) =
            (machines.clone(), wanted.clone(), seen.clone(), hash.clone());
        async move { sample_once(&machines, &wanted, &seen, hash.as_ref()).await }
    })
}

/// One sample of [`sample`].
async fn sample_once(
    machines: &Api<McmMachine>,
    wanted: &AtomicUsize,
    seen: &Mutex<Extremes>,
    hash: Option<&HashWatch>,
) {
    let reported = match hash {
        Some(watch) => watch.reported().await,
        None => false,
    };
    let Ok(list) = machines.list(&ListParams::default()).await else {
        return;
    };
    if let Some(watch) = hash.filter(|_| reported)
        && !watch.all_moved(&list.items).await
    {
        seen.lock().unwrap().hash_before_update += 1;
    }
    // As MCM's MachineSet controller counts (`manageReplicas`): a machine in phase
    // Terminating is on its way out even before its deletionTimestamp is set.
    let alive: Vec<&McmMachine> = list
        .items
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none() && phase(m) != Some("Terminating"))
        .collect();
    let running = alive.iter().filter(|m| phase(m) == Some("Running")).count();
    let wanted = wanted.load(Ordering::SeqCst);
    let mut seen = seen.lock().unwrap();
    seen.gaps.sample(tokio::time::Instant::now());
    seen.most_machines = seen.most_machines.max(alive.len());
    seen.most_unavailable = seen.most_unavailable.max(wanted.saturating_sub(running));
}

/// The sampler's density check cannot be failed by a slow list: with each list taking
/// 450 ms, or even 2 s (a loaded machine), the samples stay on the 500-ms schedule (or one
/// list apart), while the old loop — a 500-ms sleep after each list — fell short of the
/// count its old check wanted (2 per second, less 4). Paused time: 136 s pass at once.
#[tokio::test(start_paused = true)]
async fn sampling_keeps_its_schedule_when_a_list_is_slow() {
    let run = Duration::from_secs(136);
    for list_takes in [Duration::from_millis(450), Duration::from_secs(2)] {
        let seen = Arc::new(Mutex::new(Extremes::from_now()));
        let sampler = on_schedule(SAMPLE_PERIOD, {
            let seen = seen.clone();
            move || {
                let seen = seen.clone();
                async move {
                    tokio::time::sleep(list_takes).await;
                    seen.lock()
                        .unwrap()
                        .gaps
                        .sample(tokio::time::Instant::now());
                }
            }
        });
        tokio::time::sleep(run).await;
        let seen = Extremes::until_now(&seen);
        sampler.abort();
        seen.assert_dense(&format!("lists of {list_takes:?}"));
        let old_check = 2 * run.as_secs() as usize - 4;
        let old_loop = (run.as_secs_f64() / (list_takes + SAMPLE_PERIOD).as_secs_f64()) as usize;
        assert!(old_loop < old_check, "the old loop failed the old check");
        let on_schedule =
            (run.as_secs_f64() / list_takes.max(SAMPLE_PERIOD).as_secs_f64()) as usize;
        assert!(
            seen.gaps.samples + 1 >= on_schedule,
            "lists of {list_takes:?}: {} samples, {on_schedule} expected",
            seen.gaps.samples
        );
        eprintln!(
            "lists of {list_takes:?}: {} samples in {run:?} (the old loop: {old_loop}, its check wanted {old_check}), longest gap {:?}",
            seen.gaps.samples, seen.gaps.longest
        );
    }
}

/// A landscape wait fails on a stall, not on a slow run: a pool that gains a Running
/// machine every minute is waited for over 10 minutes (twice [`STAGE_TIMEOUT`]), one stuck
/// at 8 of 10 fails after [`STAGE_TIMEOUT`]. Paused time.
#[tokio::test(start_paused = true)]
async fn a_wait_lasts_while_it_progresses_and_fails_once_it_stalls() {
    let started = tokio::time::Instant::now();
    let running = move || (started.elapsed().as_secs() / 60) as usize;
    let took = wait_while_progressing("10 machines", STAGE_TIMEOUT, || async {
        match running() {
            10.. => Ok(started.elapsed()),
            n => Err(Observed {
                progress: format!("{n} Running"),
                last: format!("{n} of 10"),
            }),
        }
    })
    .await;
    assert!(took >= Duration::from_secs(600), "{took:?}");

    let stalled = tokio::spawn(async {
        wait_while_progressing("10 machines", STAGE_TIMEOUT, || async {
            Err::<(), _>(Observed {
                progress: "8 Running".into(),
                last: "8 of 10".into(),
            })
        })
        .await
    });
    let since = tokio::time::Instant::now();
    let panic = stalled.await.unwrap_err().into_panic();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(
        message.starts_with("no progress for 300s") && message.contains("stuck at: 8 Running"),
        "{message}"
    );
    let stalled_for = since.elapsed();
    assert!(
        stalled_for >= STAGE_TIMEOUT && stalled_for < STAGE_TIMEOUT + Duration::from_secs(1),
        "{stalled_for:?}"
    );
}

/// MCM's phase of a machine.
fn phase(machine: &McmMachine) -> Option<&str> {
    machine
        .status
        .as_ref()
        .and_then(|s| s.current_status.as_ref())
        .and_then(|c| c.phase.as_deref())
}

/// The impact preview of giving the stored Worker `pools` (what [`patch_pools`] does next),
/// as a user gets it: `gardener-extension-node render worker -f NEW --previous OLD --cluster
/// CLUSTER --impact -o json` on the Worker and Cluster as they are in the seed. Returns the
/// pool's verdict and reasons, printed with `what`.
async fn preview(
    landscape: &Landscape,
    pools: &Value,
    pool: &str,
    what: &str,
) -> (String, Vec<String>) {
    let workers = landscape.workers();
    let stored = workers.get("worker").await.unwrap();
    let mut previous = serde_json::to_value(&stored).unwrap();
    previous["metadata"]["managedFields"] = Value::Null;
    let mut new = previous.clone();
    new["spec"]["pools"] = pools.clone();
    let cluster = Api::<Cluster>::all(landscape.env.client.clone())
        .get(&landscape.namespace)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, value: &Value| {
        let path = dir.path().join(name);
        std::fs::write(&path, serde_json::to_vec(value).unwrap()).unwrap();
        path
    };
    let (new_file, previous_file) = (file("new.json", &new), file("previous.json", &previous));
    let cluster_file = file("cluster.json", &serde_json::to_value(&cluster).unwrap());
    let run = |format: &str| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_gardener-extension-node"))
            .args(["render", "worker", "-f"])
            .arg(&new_file)
            .arg("--previous")
            .arg(&previous_file)
            .arg("--cluster")
            .arg(&cluster_file)
            .args(["--impact", "-o", format])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "render worker --impact: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    eprintln!(
        "machines e2e: preview of {what}:\n{}",
        run("text").trim_end()
    );
    let json: Value = serde_json::from_str(&run("json")).unwrap();
    let found = json["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == pool)
        .cloned()
        .unwrap_or_else(|| panic!("{pool} in {json}"));
    let reasons = found["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().map_or_else(|| r.to_string(), str::to_string))
        .collect();
    (found["impact"].as_str().unwrap().to_string(), reasons)
}

/// The names of the Machines, sorted.
async fn machine_names(machines: &Api<McmMachine>) -> Vec<String> {
    let mut names: Vec<String> = machines
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    names.sort();
    names
}

/// Every Node's name with the checksum of the configuration its agent applied.
async fn node_checksums(shoot: &Client) -> Vec<(String, Option<String>)> {
    let mut checksums: Vec<_> = Api::<KubeNode>::all(shoot.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|n| {
            (
                n.name_any(),
                n.annotations().get("checksum/cloud-config-data").cloned(),
            )
        })
        .collect();
    checksums.sort();
    checksums
}

async fn patch_pools(workers: &Api<Worker>, pools: Value) {
    workers
        .patch(
            "worker",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"pools": pools}})),
        )
        .await
        .unwrap();
    support::gardener::annotate(workers, "worker", "reconcile").await;
}

/// The longer lifecycle (`make e2e-machines-lifecycle`): a pool of 2 (maxSurge 1,
/// maxUnavailable 0) is rolled by a new node-agent key — with MCM core down for a while in
/// the middle — then scaled to 3 and to 1, then deleted; machines sampled at 2 Hz throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the node components: make e2e-machines-lifecycle"]
async fn lifecycle_a_rolling_pool_rolls_and_scales_within_its_budget() {
    let (
        mut landscape,
        RollingPool {
            key,
            user_data_secret,
        },
    ) = Landscape::with_rolling_pool().await;
    landscape.start_machine_controllers();
    let wanted = Arc::new(AtomicUsize::new(2));
    let applied = Instant::now();
    landscape
        .create_worker(json!([pool(POOL, &key, &user_data_secret, 2)]))
        .await;
    landscape.worker_ready(LastOperationType::Create).await;
    eprintln!(
        "machines e2e: Worker applied → 2 machines, Worker ready in {:.1} s",
        since(applied)
    );

    // Roll: a new node-agent key (gardenlet's new OSCs), MCM core killed mid-way.
    let seen = Arc::new(Mutex::new(Extremes::from_now()));
    let sampler = sample(landscape.machines(), wanted.clone(), seen.clone(), None);
    let new_key = format!("gardener-node-agent-{POOL}-2");
    let new_user_data = landscape.provision_pool(POOL, &new_key).await;
    let rolling = Instant::now();
    let workers = landscape.workers();
    let new_pools = json!([pool(POOL, &new_key, &new_user_data, 2)]);
    let (verdict, reasons) = preview(&landscape, &new_pools, POOL, "a new node-agent key").await;
    assert_eq!(verdict, "roll", "{reasons:?}");
    let machines_before_roll = machine_names(&landscape.machines()).await;
    patch_pools(&workers, new_pools).await;
    let new_class = format!("-{}", class_hash(&new_key, &[]));
    let machines = landscape.machines();
    landscape
        .wait("a machine of the new class", || async {
            match machines_of_class(&machines, &new_class).await? {
                (0, _) => Err(landscape.diagnostics()),
                _ => Ok(()),
            }
        })
        .await;
    let controllers = landscape.controllers.as_mut().unwrap();
    controllers.stop_core();
    let stopped = Instant::now();
    // Its leader Lease goes stale after 15 s + 15 s of grace; the next rollout poll says so.
    let said = wait_for(
        "the Worker saying that MCM is not running",
        Duration::from_secs(120),
        || async {
            let worker = workers.get("worker").await.map_err(|e| e.to_string())?;
            match last_operation(&worker) {
                Some((_, _, description))
                    if description.contains("machine-controller-manager is not running: ") =>
                {
                    Ok(description)
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    eprintln!(
        "machines e2e: MCM core down during the roll; after {:.1} s the Worker says {said:?}",
        since(stopped)
    );
    assert!(
        said.contains(&format!(
            "its leader Lease {}/machine-controller-manager was last renewed",
            landscape.namespace
        )),
        "{said}"
    );
    landscape.controllers.as_mut().unwrap().start_core();
    landscape.worker_ready(LastOperationType::Reconcile).await;
    assert_eq!(
        machines_of_class(&machines, &new_class).await.unwrap(),
        (2, 2),
        "every machine of the new class"
    );
    let roll = Extremes::until_now(&seen);
    eprintln!(
        "machines e2e: rolling update in {:.1} s: {roll:?}",
        since(rolling)
    );
    roll.assert_dense("rolling update");
    assert!(roll.most_machines <= 3, "maxSurge 1: {roll:?}");
    assert_eq!(roll.most_unavailable, 0, "maxUnavailable 0: {roll:?}");
    let machines_after_roll = machine_names(&machines).await;
    assert!(
        machines_after_roll
            .iter()
            .all(|m| !machines_before_roll.contains(m)),
        "preview said roll: new machines replace the old ones"
    );
    eprintln!(
        "machines e2e: preview roll ({reasons:?}) — observed: machines {machines_before_roll:?} replaced by {machines_after_roll:?}"
    );

    // Labels and taints only: the preview says unchanged; no machine is replaced and no
    // node restarts a unit (the node-agent Secret is the same).
    let mut labelled = pool(POOL, &new_key, &new_user_data, 2);
    labelled["labels"] = json!({"e2e.gardener.cloud/preview": "labels-only"});
    labelled["taints"] = json!([{"key": "e2e.gardener.cloud/preview", "value": "taint", "effect": "PreferNoSchedule"}]);
    let labelled = json!([labelled]);
    let (verdict, reasons) = preview(&landscape, &labelled, POOL, "labels and taints").await;
    assert_eq!(verdict, "unchanged", "{reasons:?}");
    let checksums_before = node_checksums(&landscape.shoot_client).await;
    patch_pools(&workers, labelled).await;
    landscape.worker_ready(LastOperationType::Reconcile).await;
    // MCM applies the pool's labels and taints to the running nodes.
    let shoot = landscape.shoot_client.clone();
    let applied = Instant::now();
    landscape
        .wait("the new label on every node", || async {
            let nodes = Api::<KubeNode>::all(shoot.clone())
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items;
            let without: Vec<String> = nodes
                .iter()
                .filter(|n| {
                    n.labels()
                        .get("e2e.gardener.cloud/preview")
                        .map(String::as_str)
                        != Some("labels-only")
                })
                .map(ResourceExt::name_any)
                .collect();
            if nodes.is_empty() || !without.is_empty() {
                return Err(format!("nodes without the label: {without:?}"));
            }
            Ok(())
        })
        .await;
    let labelled_after = applied.elapsed();
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(
        machine_names(&machines).await,
        machines_after_roll,
        "preview said unchanged: the same machines"
    );
    assert_eq!(
        node_checksums(&landscape.shoot_client).await,
        checksums_before,
        "preview said unchanged: the nodes keep their configuration"
    );
    eprintln!(
        "machines e2e: preview unchanged ({reasons:?}) — observed: the same machines {machines_after_roll:?}, the label on every node {labelled_after:.1?} after the Worker was ready, node checksums unchanged 20 s later"
    );

    // Scale up to 3 and down to 1.
    let mut before = 2;
    for size in [3, 1] {
        *seen.lock().unwrap() = Extremes::from_now();
        wanted.store(size, Ordering::SeqCst);
        let scaling = Instant::now();
        let mut scaled_pool = pool(POOL, &new_key, &new_user_data, size as i32);
        scaled_pool["labels"] = json!({"e2e.gardener.cloud/preview": "labels-only"});
        scaled_pool["taints"] = json!([{"key": "e2e.gardener.cloud/preview", "value": "taint", "effect": "PreferNoSchedule"}]);
        let scaled_pools = json!([scaled_pool]);
        let (verdict, reasons) = preview(
            &landscape,
            &scaled_pools,
            POOL,
            &format!("a scale to {size}"),
        )
        .await;
        assert_eq!(verdict, "unchanged", "a size is no new class: {reasons:?}");
        patch_pools(&workers, scaled_pools).await;
        landscape.worker_ready(LastOperationType::Reconcile).await;
        let shoot = landscape.shoot_client.clone();
        landscape
            .wait(&format!("{size} Ready Nodes"), || async {
                let ready = ready_nodes(&shoot).await;
                let machines = machines
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| e.to_string())?;
                if ready.len() == size && machines.items.len() == size {
                    Ok(())
                } else {
                    Err(format!(
                        "{} Ready, {} machines",
                        ready.len(),
                        machines.items.len()
                    ))
                }
            })
            .await;
        let scaled = Extremes::until_now(&seen);
        eprintln!(
            "machines e2e: scaled to {size} in {:.1} s: {scaled:?}",
            since(scaling)
        );
        scaled.assert_scaled_within_budget(before, size);
        before = size;
    }
    sampler.abort();
    let took = landscape.delete_worker_and_check_nothing_is_left().await;
    eprintln!("machines e2e: Worker deleted in {took:.1} s");
}

/// The in-place lifecycle (`make e2e-machines-lifecycle`): an `AutoInPlaceUpdate` pool of 2
/// (maxSurge 0, maxUnavailable 1) gets a new kubelet reservation — gardenlet's new reconcile
/// OSC and the Worker's new `kubeletConfig` — and real MCM updates the same machines through
/// its in-place flow with our agent; the Worker reports the pool's new hash only after every
/// machine was updated. Sampled at 2 Hz; then deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the node components: make e2e-machines-lifecycle"]
async fn lifecycle_an_in_place_pool_is_updated_through_mcms_in_place_flow() {
    use gardener_extension_node::api::worker::WorkerPool;
    use gardener_extension_node::controllers::worker::in_place;

    let pool_name = "inplace";
    let mut landscape = Landscape::start().await;
    let key = format!("gardener-node-agent-{pool_name}");
    let before = InPlace {
        os_version: nodes_os_version(),
        kube_reserved_memory: "100Mi".into(),
    };
    let provisioned = landscape
        .provision_pool_with(pool_name, &key, Some(&before))
        .await;
    landscape.start_machine_controllers();
    let in_place_pool = |in_place: &InPlace| {
        let mut pool = pool(pool_name, &key, &provisioned.user_data_secret, 2);
        pool["updateStrategy"] = json!("AutoInPlaceUpdate");
        pool["maxSurge"] = json!(0);
        pool["maxUnavailable"] = json!(1);
        pool["kubeletConfig"] = in_place.kubelet_config();
        pool
    };
    let applied = Instant::now();
    landscape
        .create_worker(json!([in_place_pool(&before)]))
        .await;
    landscape.worker_ready(LastOperationType::Create).await;
    eprintln!(
        "machines e2e: in-place pool: 2 machines, Worker ready in {:.1} s",
        since(applied)
    );
    let machines = landscape.machines();
    let names = |list: &[McmMachine]| -> Vec<(String, Option<String>)> {
        let mut names: Vec<_> = list
            .iter()
            .map(|m| (m.name_any(), m.labels().get("node").cloned()))
            .collect();
        names.sort();
        names
    };
    let machines_before = names(&machines.list(&ListParams::default()).await.unwrap().items);

    // gardenlet's change: the reconcile OSC first, then the Worker.
    let after = InPlace {
        kube_reserved_memory: "200Mi".into(),
        ..before.clone()
    };
    let new_pool = in_place_pool(&after);
    let expected_hash = in_place::update_hash(
        &serde_json::from_value::<WorkerPool>(new_pool.clone()).unwrap(),
        None,
    )
    .unwrap();
    let watch = HashWatch {
        workers: landscape.workers(),
        sets: Api::namespaced(landscape.env.client.clone(), &landscape.env.namespace),
        pool: pool_name.into(),
        hash: expected_hash.clone(),
        class_suffix: format!("-{}", class_hash_in_place(&key, &expected_hash, &[])),
    };
    let seen = Arc::new(Mutex::new(Extremes::from_now()));
    let sampler = sample(
        machines.clone(),
        Arc::new(AtomicUsize::new(2)),
        seen.clone(),
        Some(watch.clone()),
    );
    let (verdict, reasons) = preview(
        &landscape,
        &json!([new_pool.clone()]),
        pool_name,
        "a new kubelet reservation of an in-place pool",
    )
    .await;
    assert_eq!(verdict, "in-place", "{reasons:?}");
    let updating = Instant::now();
    landscape
        .change_reconcile_osc(&after.apply_to(&provisioned.reconcile))
        .await;
    patch_pools(&landscape.workers(), json!([new_pool])).await;
    let worker = landscape.worker_ready(LastOperationType::Reconcile).await;
    let took = since(updating);
    sampler.abort();
    let update = Extremes::until_now(&seen);
    eprintln!("machines e2e: in-place update in {took:.1} s: {update:?}");
    for (_, node) in &machines_before {
        let node = node.as_deref().unwrap();
        let config = landscape
            .cloud
            .with_node(node, |n| {
                n.machine.read_file("/var/lib/kubelet/config/kubelet")
            })
            .unwrap()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&config).contains("kubeReserved: {memory: \"200Mi\"}"),
            "{node} runs the new kubelet configuration"
        );
    }
    let list = machines.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(names(&list), machines_before, "the same machines and nodes");
    eprintln!(
        "machines e2e: preview in-place ({reasons:?}) — observed: the same machines {machines_before:?} run the new kubelet configuration"
    );
    assert!(
        watch.all_moved(&list).await,
        "every machine moved to the new class's set"
    );
    assert_eq!(
        worker
            .status
            .unwrap()
            .in_place_updates
            .unwrap()
            .worker_pool_to_hash_map[pool_name],
        expected_hash
    );
    update.assert_dense("in-place update");
    assert!(update.most_unavailable <= 1, "maxUnavailable 1: {update:?}");
    assert!(update.most_machines <= 2, "no new machines: {update:?}");
    assert_eq!(
        update.hash_before_update, 0,
        "the new hash only after every machine was updated: {update:?}"
    );
    let took = landscape.delete_worker_and_check_nothing_is_left().await;
    eprintln!("machines e2e: Worker deleted in {took:.1} s");
}

/// Bad input (`make e2e-machines-lifecycle`): the driver dies in the middle of its create
/// call — the cloud has accepted the machine and boots it, MCM never got the answer. The
/// restarted driver finds the machine (MCM asks for its status first), MCM adopts it: one
/// node, the Worker succeeds, and its delete leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the node components: make e2e-machines-lifecycle"]
async fn lifecycle_a_driver_crash_mid_create_leaves_one_machine_and_no_orphan() {
    let (
        mut landscape,
        RollingPool {
            key,
            user_data_secret,
            ..
        },
    ) = Landscape::with_rolling_pool().await;
    let mut held = landscape.cloud.hold_creates();
    landscape.start_machine_controllers();
    landscape
        .create_worker(json!([pool(POOL, &key, &user_data_secret, 1)]))
        .await;
    let machine = tokio::time::timeout(STAGE_TIMEOUT, held.recv())
        .await
        .expect("the driver's create call")
        .unwrap();
    let controllers = landscape.controllers.as_mut().unwrap();
    controllers.stop_machine_controller();
    eprintln!("machines e2e: the driver died in the create call of {machine}");
    landscape.cloud.release_creates();
    tokio::time::sleep(Duration::from_secs(2)).await;
    landscape
        .controllers
        .as_mut()
        .unwrap()
        .start_machine_controller();
    let worker = landscape.worker_ready(LastOperationType::Create).await;
    assert_eq!(worker.status.unwrap().machine_deployments.len(), 1);
    let listed = landscape
        .machines()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        listed[0].name_any(),
        machine,
        "the held machine was adopted"
    );
    assert_eq!(
        landscape.cloud.node_names().len(),
        1,
        "no second node: {:?}",
        landscape.cloud.machines()
    );
    let took = landscape.delete_worker_and_check_nothing_is_left().await;
    eprintln!("machines e2e: Worker deleted in {took:.1} s");
}

/// A slow cloud (`make e2e-machines-lifecycle`): our driver runs provider-local's blocking
/// create (`--create-wait-until-running`, the create call returns once the cloud runs the
/// machine) and the cloud starts each boot only after [`SLOW_BOOT`], so the create blocks for
/// more than a minute, as provider-local's does while its machine Pod is pending. All the
/// while MCM holds the Machine in its creation flow (no providerID yet), and the Worker says
/// so honestly: Processing, waiting for the machine to become available — never done, failed,
/// nor "machine-controller-manager is not running" (its Leases are renewed; the Worker asks
/// once its wait has lasted 30 s). Then the Worker is deleted in the middle of the slow
/// create: MCM starts the machine's termination only once the create has returned (and, as
/// the Machine changed meanwhile, MCM v0.62.1's write of the providerID then fails on a
/// conflict: the termination finds the node by asking the driver), and the deletion completes
/// and leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the node components: make e2e-machines-lifecycle"]
async fn lifecycle_a_slow_create_is_reported_as_one_and_a_delete_during_it_completes() {
    /// How long the cloud lets a machine wait before it boots.
    const SLOW_BOOT: Duration = Duration::from_secs(70);
    /// How long the Worker is watched before it is deleted (the create still blocks).
    const WATCHED: Duration = Duration::from_secs(45);
    let (
        mut landscape,
        RollingPool {
            key,
            user_data_secret,
            ..
        },
    ) = Landscape::with_rolling_pool().await;
    landscape.cloud.delay_boots(SLOW_BOOT);
    landscape.start_machine_controllers_with(true);
    landscape
        .create_worker(json!([pool(POOL, &key, &user_data_secret, 1)]))
        .await;
    let (machines, workers) = (landscape.machines(), landscape.workers());
    let machine = landscape
        .wait("the Machine accepted by the cloud", || async {
            let list = machines
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            match (list.items.first(), landscape.cloud.machines().is_empty()) {
                (Some(machine), false) => Ok(machine.name_any()),
                (machine, _) => Err(format!(
                    "Machine {:?}, cloud {:?}",
                    machine.map(ResourceExt::name_any),
                    landscape.cloud.machines()
                )),
            }
        })
        .await;
    let accepted = Instant::now();

    // While the create blocks: what the Worker says, every second.
    let mut said: Vec<String> = Vec::new();
    while accepted.elapsed() < WATCHED {
        let worker = workers.get("worker").await.unwrap();
        let (kind, state, description) = last_operation(&worker).unwrap();
        assert_eq!(
            (kind, state),
            (LastOperationType::Create, LastOperationState::Processing),
            "after {:.1} s of the slow create: {description}",
            since(accepted)
        );
        assert!(
            !description.contains("is not running"),
            "MCM runs, its create call only blocks: {description}"
        );
        let provider_id = machines.get(&machine).await.unwrap().spec.provider_id;
        assert_eq!(provider_id, None, "the create call still blocks");
        if said.last() != Some(&description) {
            eprintln!(
                "machines e2e: slow create, {:.1} s: the Worker says {description:?}",
                since(accepted)
            );
            said.push(description);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let last = said.last().unwrap();
    assert!(
        last.starts_with(
            "Reconciling the Worker: waiting until machines are available (0/1 desired \
             machine(s) available, 1/1 machine(s) updated, 1 machine(s) pending"
        ),
        "one machine pending: {last}"
    );

    // Deleted in the middle of the slow create.
    let deleting = Instant::now();
    support::gardener::confirm_and_delete(&workers, "worker").await;
    // The create call returns once the cloud has told the driver the machine runs; only
    // then does MCM's termination of the Machine start ("machine ... is in creation flow.
    // Deletion cannot proceed").
    let blocked = landscape
        .wait("the create call returning", || async {
            let worker = workers.get_opt("worker").await.map_err(|e| e.to_string())?;
            if let Some((_, _, description)) = worker.as_ref().and_then(last_operation) {
                assert!(!description.contains("is not running"), "{description}");
            }
            landscape
                .cloud
                .accepted_until_told_running(&machine)
                .ok_or_else(|| format!("cloud: {:?}", landscape.cloud.machines()))
        })
        .await;
    eprintln!(
        "machines e2e: the create call blocked {:.1} s (deletion requested {:.1} s into it)",
        blocked.as_secs_f64(),
        (deleting - accepted).as_secs_f64()
    );
    assert!(
        blocked >= Duration::from_secs(60),
        "the create blocked at least 60 s: {blocked:?}"
    );
    let took = landscape.check_deleted(deleting).await;
    eprintln!("machines e2e: Worker deleted during the slow create in {took:.1} s");
}

/// Removes every finalizer of `name` and deletes it: gardenlet's shallow delete of the
/// machine objects after a migration (MCM is down, so nothing reaches the machines).
async fn shallow_delete<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let _ = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await;
    let _ = api.delete(name, &kube::api::DeleteParams::default()).await;
}

async fn shallow_delete_all<K>(api: &Api<K>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for object in api.list(&ListParams::default()).await.unwrap().items {
        shallow_delete(api, &object.name_any()).await;
    }
}

/// The machines as (name, node, provider ID), sorted.
fn machine_identities(machines: &[McmMachine]) -> Vec<(String, String, String)> {
    let mut identities: Vec<_> = machines
        .iter()
        .map(|m| {
            (
                m.name_any(),
                m.labels().get("node").cloned().unwrap_or_default(),
                m.spec.provider_id.clone().unwrap_or_default(),
            )
        })
        .collect();
    identities.sort();
    identities
}

/// Control-plane migration with the real MCM (`make e2e-machines-lifecycle`): MCM stops (as
/// gardenlet scales it down), the Worker migrates, gardenlet records the machine state (by
/// gardener's own code: `support::gardener::gardenlet_machine_state`) and shallow-deletes;
/// in another seed namespace of the same shoot the Worker restores from that state, MCM
/// starts there and adopts the very machines (the nodes never stopped); then the
/// Worker's delete there leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the node components: make e2e-machines-lifecycle"]
async fn lifecycle_migrate_and_restore_keep_the_machines_running() {
    use gardener_extension_node::api::machine::{MachineClass, MachineDeployment};

    let (
        mut landscape,
        RollingPool {
            key,
            user_data_secret,
            ..
        },
    ) = Landscape::with_rolling_pool().await;
    landscape.start_machine_controllers();
    landscape
        .create_worker(json!([pool(POOL, &key, &user_data_secret, 2)]))
        .await;
    landscape.worker_ready(LastOperationType::Create).await;
    let source = landscape.namespace.clone();
    let before = machine_identities(
        &landscape
            .machines()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items,
    );
    assert_eq!(before.len(), 2);

    // Source seed: MCM down, migrate, machine state, shallow delete.
    let migrating = Instant::now();
    landscape.controllers = None;
    let workers = landscape.workers();
    support::gardener::annotate(&workers, "worker", "migrate").await;
    landscape.worker_ready(LastOperationType::Migrate).await;
    // gardenlet's record (shootstate.Deploy) and its restore into the destination Worker
    // (RestoreExtensionObjectState, which also fails if our Worker left a state of its own),
    // by gardener's own code.
    let destination = format!("{source}-restored");
    let recorded = support::gardener::gardenlet_machine_state(&source, &destination).await;
    let extension_states = recorded.shoot_state["spec"]["extensions"].as_array();
    assert!(
        extension_states.is_none_or(|states| states.iter().all(|s| s["kind"] != "Worker")),
        "no Worker state of ours beside gardenlet's machine state: {}",
        recorded.shoot_state
    );
    let state = recorded.worker_state;
    assert!(!state.is_null(), "gardenlet recorded the machines");
    support::gardener::confirm_and_delete(&workers, "worker").await;
    support::gardener::wait_gone(&workers, "worker").await;
    shallow_delete_all(&landscape.api::<McmMachine>()).await;
    shallow_delete_all(&landscape.api::<MachineSet>()).await;
    shallow_delete_all(&landscape.api::<MachineDeployment>()).await;
    shallow_delete_all(&landscape.api::<MachineClass>()).await;
    eprintln!(
        "machines e2e: migrated and shallow-deleted in {:.1} s",
        since(migrating)
    );

    // Destination: another namespace of the same shoot (technical ID of the source).
    let restoring = Instant::now();
    let client = landscape.env.client.clone();
    support::create_namespace(&client, &destination).await;
    let mut cluster = fixtures::cluster_json(&destination);
    cluster["spec"]["shoot"]["status"]["technicalID"] = json!(source);
    Api::<Cluster>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(cluster).unwrap(),
        )
        .await
        .unwrap();
    let source_secrets = Api::<Secret>::namespaced(client.clone(), &source);
    let destination_secrets = Api::<Secret>::namespaced(client.clone(), &destination);
    for name in [user_data_secret.as_str(), "cloudprovider"] {
        let secret = source_secrets.get(name).await.unwrap();
        let copy: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": destination},
            "data": secret.data,
        }))
        .unwrap();
        destination_secrets
            .create(&PostParams::default(), &copy)
            .await
            .unwrap();
    }
    landscape.namespace = destination.clone();
    let mut worker = fixtures::worker_json(&destination);
    worker["spec"]["pools"] = json!([pool(POOL, &key, &user_data_secret, 2)]);
    let workers = landscape.workers();
    support::gardener::create_waiting_for_state(&workers, worker, state).await;
    support::gardener::annotate(&workers, "worker", "restore").await;
    let machines = landscape.machines();
    landscape
        .wait("the machines restored", || async {
            let list = machines
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let restored = machine_identities(&list.items);
            if restored == before {
                Ok(())
            } else {
                Err(format!("{restored:?}"))
            }
        })
        .await;
    landscape.start_machine_controllers();
    landscape.worker_ready(LastOperationType::Restore).await;
    eprintln!(
        "machines e2e: restored, MCM adopted the machines in {:.1} s",
        since(restoring)
    );
    let after = machine_identities(&machines.list(&ListParams::default()).await.unwrap().items);
    assert_eq!(after, before, "the same machines, nodes and provider IDs");
    assert_eq!(
        landscape.cloud.node_names().len(),
        2,
        "no machine was created again: {:?}",
        landscape.cloud.machines()
    );
    assert_eq!(ready_nodes(&landscape.shoot_client).await.len(), 2);
    let took = landscape.delete_worker_and_check_nothing_is_left().await;
    eprintln!("machines e2e: Worker deleted in {took:.1} s");
}

/// The mean memory of the cloud's nodes: (VmRSS sum, cgroup anonymous, cgroup page cache) in MiB.
fn mean_node_memory(cloud: &NodeCloud) -> (f64, f64, f64) {
    let memories: Vec<_> = cloud
        .node_names()
        .iter()
        .filter_map(|n| cloud.with_node(n, Node::memory))
        .collect();
    let count = memories.len().max(1) as f64;
    let mean = |f: &dyn Fn(&support::node::NodeMemory) -> u64| {
        memories.iter().map(f).sum::<u64>() as f64 / count / 1024.0
    };
    (
        mean(&|m| m.rss_sum_kib),
        mean(&|m| m.cgroup_anon_kib),
        mean(&|m| m.cgroup_cache_kib),
    )
}

/// At pool scale (`make bench-machines`, figures into docs/benchmarks.md): a pool of 10 over
/// 3 zones (maxSurge 2, maxUnavailable 1, distributed over the zones as upstream does) created
/// by the real MCM, then rolled by a new node-agent key (Machines sampled at 2 Hz), then
/// changed disruptively in place through the agents' rollout budget derived from the same
/// maxUnavailable (Nodes and slot Leases sampled at 2 Hz).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the node components: make bench-machines"]
async fn pool_at_scale_is_created_and_rolled_by_the_real_mcm() {
    const SIZE: usize = 10;
    let (
        mut landscape,
        RollingPool {
            key,
            user_data_secret,
        },
    ) = Landscape::with_rolling_pool().await;
    landscape.start_machine_controllers();
    let scaled = |key: &str, user_data: &str| {
        let mut pool = pool(POOL, key, user_data, SIZE as i32);
        pool["zones"] = json!(["a", "b", "c"]);
        pool["maxSurge"] = json!(2);
        pool["maxUnavailable"] = json!(1);
        pool
    };
    landscape
        .list_pool_in_cluster(json!({
            "name": POOL,
            "machine": {"type": "local", "image": {"name": "debian", "version": "13.2"}},
            "minimum": SIZE, "maximum": SIZE, "maxSurge": 2, "maxUnavailable": 1,
            "zones": ["a", "b", "c"],
        }))
        .await;
    let wanted = Arc::new(AtomicUsize::new(SIZE));
    let seen = Arc::new(Mutex::new(Extremes::from_now()));
    let sampler = sample(landscape.machines(), wanted, seen.clone(), None);
    let creating = Instant::now();
    landscape
        .create_worker(json!([scaled(&key, &user_data_secret)]))
        .await;
    landscape.worker_ready(LastOperationType::Create).await;
    let created_in = since(creating);
    let shoot = landscape.shoot_client.clone();
    landscape
        .wait("10 Ready Nodes", || async {
            let ready = ready_nodes(&shoot).await.len();
            (ready == SIZE)
                .then_some(())
                .ok_or(format!("{ready} Ready"))
        })
        .await;
    let created = Extremes::until_now(&seen);
    let memory = mean_node_memory(&landscape.cloud);
    eprintln!(
        "machines e2e: pool of {SIZE} created in {created_in:.1} s: {created:?}, memory {memory:?}"
    );

    *seen.lock().unwrap() = Extremes::from_now();
    let new_key = format!("gardener-node-agent-{POOL}-2");
    let Provisioned {
        user_data_secret: new_user_data,
        reconcile,
    } = landscape.provision_pool_with(POOL, &new_key, None).await;
    let rolling = Instant::now();
    patch_pools(
        &landscape.workers(),
        json!([scaled(&new_key, &new_user_data)]),
    )
    .await;
    landscape.worker_ready(LastOperationType::Reconcile).await;
    let new_class = format!("-{}", class_hash(&new_key, &[]));
    let machines = landscape.machines();
    landscape
        .wait("every machine of the new class", || async {
            match machines_of_class(&machines, &new_class).await? {
                (new, all) if new == SIZE && all == SIZE => Ok(()),
                (new, all) => Err(format!("{new} new of {all}")),
            }
        })
        .await;
    let rolled_in = since(rolling);
    sampler.abort();
    let rolled = Extremes::until_now(&seen);
    eprintln!("machines e2e: pool of {SIZE} rolled in {rolled_in:.1} s: {rolled:?}");

    // Step 2: a kubelet-restarting change in place, through the agents' disruptive rollout
    // (budget = the pool's maxUnavailable 1, from the Cluster).
    let shoot = landscape.shoot_client.clone();
    let before = in_place_rollout::secret_checksum(&shoot, &new_key).await;
    // Every node runs the current OSC first: a node's first apply is quiet (nothing runs
    // there yet), so a node still joining would take the change without a slot.
    let current = before.clone().expect("the rolled pool's node-agent Secret");
    in_place_rollout::sample_until_rolled_out(&shoot, &new_key, SIZE, &current, STAGE_TIMEOUT)
        .await;
    let changing = Instant::now();
    landscape
        .change_reconcile_osc(&in_place_rollout::with_kubelet_drop_in(&reconcile))
        .await;
    let (checksum, budget) =
        in_place_rollout::new_secret(&shoot, &new_key, before.as_deref()).await;
    assert_eq!(budget, "1", "the budget from maxUnavailable 1");
    let in_place =
        in_place_rollout::sample_until_rolled_out(&shoot, &new_key, SIZE, &checksum, STAGE_TIMEOUT)
            .await;
    let in_place_in = since(changing);
    eprintln!(
        "machines e2e: disruptive change in place on {SIZE} nodes in {in_place_in:.1} s: {in_place:?}"
    );

    let deleted_in = landscape.delete_worker_and_check_nothing_is_left().await;

    // The per-zone surges allow 4+1, 3+1 and 3 machines.
    let surge = match rolled.most_machines.saturating_sub(SIZE + 2) {
        0 => "The machines stayed within the per-zone surges (4+1, 3+1, 3).".to_string(),
        over => format!(
            "The most machines seen exceeded the per-zone surges (4+1, 3+1, 3) by {over} in a \
             sample: MCM's scale-up of a new MachineSet (`NewISNewReplicas`) counts the sets' \
             `status.replicas` (`GetActualReplicaCountForMachineSets`), which trail the \
             Machines, so a set may scale up before an old one's count has dropped; MCM's own \
             safety controller (`--machine-safety-overshooting-period`) exists for such \
             overshoots."
        ),
    };
    let body = format!(
        "## Machines: a pool of {SIZE} over 3 zones with the real machine-controller-manager\n\n\
         Command: `make bench-machines` (`pool_at_scale_is_created_and_rolled_by_the_real_mcm` in \
         `test/machines_e2e.rs`): MCM v0.62.1 core and its machine controller with our nspawn \
         driver against the node cloud of the tests; each machine a systemd-nspawn node that runs \
         gardenlet's provision content, pulls our agent from a loopback registry, bootstraps \
         through the CSR flow and joins with kubelet and containerd 2.x; pool of {SIZE}, zones \
         a/b/c, maxSurge 2 and maxUnavailable 1 (per zone as upstream distributes them: surge \
         1/1/0, unavailable 1/0/0); the rolling update by a new node-agent key. Machines sampled \
         every 500 ms; machines = neither deleted nor in phase Terminating (as MCM's MachineSet \
         controller counts them); unavailable = wanted machines without a `Running` one; 2 \
         cores.\n\n\
         | step | duration | samples | most machines | most unavailable |\n\
         |---|---:|---:|---:|---:|\n\
         | create (Worker applied → ready, {SIZE} Nodes Ready) | {created_in:.1} s | {} | {} | {} |\n\
         | rolling update (new key → every machine of the new class) | {rolled_in:.1} s | {} | {} | {} |\n\
         | delete (→ no Machine, Node or node) | {deleted_in:.1} s | — | — | — |\n\n\
         Then, before the delete, a disruptive change in place: gardenlet's reconcile OSC of \
         the rolled pool gets a drop-in on kubelet; our OSC controller ships it with the \
         rollout budget it derives from the pool's maxUnavailable in the Cluster (1), and the \
         agents apply it one slot at a time, each node held until Ready and healthy again \
         (`docs/agent.md#disruptive-rollout`). Nodes and slot Leases sampled every 500 ms; \
         unavailable = Nodes not Ready or holding a slot.\n\n\
         | step | duration | samples | most unavailable | most NotReady | most slot holders | nodes that held a slot |\n\
         |---|---:|---:|---:|---:|---:|---:|\n\
         | disruptive change in place, budget 1 (OSC changed → every Node applied, Ready, no slot held) | {in_place_in:.1} s | {} | {} | {} | {} | {} |\n\n\
         Memory of the fixture per node ({SIZE} nodes, mean, after the create): VmRSS sum \
         {:.1} MiB, cgroup anonymous {:.1} MiB, cgroup page cache {:.1} MiB.\n\n\
         The budget MCM applies is per zone: zone c gets maxSurge 0 and maxUnavailable 0, which \
         MCM's `ResolveFenceposts` turns into maxUnavailable 1 (`deployment_util.go`), so the \
         pool may lose 2 machines at once (zones a and c) although its maxUnavailable is 1 — \
         upstream's distribution, not ours (`DistributePositiveIntOrPercent`). {surge}\n\n",
        created.gaps.samples,
        created.most_machines,
        created.most_unavailable,
        rolled.gaps.samples,
        rolled.most_machines,
        rolled.most_unavailable,
        in_place.samples,
        in_place.most_unavailable,
        in_place.most_not_ready,
        in_place.most_holders,
        in_place.holders.len(),
        memory.0,
        memory.1,
        memory.2,
    );
    support::benchmarks::write_section("machines", &body);
    created.assert_dense("create");
    rolled.assert_dense("rolling update");
    // MCM's effective budget: zone a's 1 and zone c's fencepost 1 (see the section text).
    assert!(
        rolled.most_unavailable <= 2,
        "unavailable within MCM's per-zone budget: {rolled:?}"
    );
    assert!(
        in_place.most_unavailable <= 1 && in_place.most_holders <= 1,
        "the disruptive change within the budget of 1: {in_place:?}"
    );
    assert_eq!(
        in_place.holders.len(),
        SIZE,
        "every node took the slot: {in_place:?}"
    );
}
