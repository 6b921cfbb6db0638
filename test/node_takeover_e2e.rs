//! e2e (`make e2e-takeover`): our agent enters nodes the way gardener-node-agent does, with
//! real components only (docs/agent.md#bootstrap-and-client-certificates,
//! docs/operations.md#switching-a-landscapes-nodes-to-this-agent).
//!
//! ```text
//! gardenlet's nodeinit code ─► provision OSC ─► our operator ─► user data ─► node (nspawn)
//!   (provision-osc)                                                │ node-init: ctr pulls the
//! crane registry on loopback ◄─────────────────────────────────────┘ image, `bootstrap`
//! shoot: bootstrap tokens, KCM signers + kubelet CSR approver, GRM's CSR approver (Machine in seed)
//! ```
//!
//! Two pools in one shoot, each booted from gardenlet's own provision content (rendered by
//! gardener v1.149.3's `nodeinit.Config`, `support::gardenlet_osc`) through our OSC
//! controller's user data, with a bootstrap token Secret and a Machine as
//! machine-controller-manager creates them:
//! - pool `ours`: the image-vector entry `gardener-node-agent` points at our `node-agent`
//!   image. The node-init script pulls it from the registry, our binary bootstraps, gets its
//!   client certificate through the real approver and signer, applies the reconcile OSC,
//!   kubelet joins through the bootstrap kubeconfig the agent wrote, the Node turns Ready.
//!   Then: a certificate renewal (new serial, no unit restarted), kubelet hung with SIGSTOP and
//!   restarted by the health check with GNA's events, the restart annotation honoured and
//!   removed.
//! - pool `gna`: the entry points at real gardener-node-agent v1.149.3, which bootstraps the
//!   node. Then gardenlet's reconcile OSC switches the image to ours (what the image-vector
//!   overwrite does): GNA installs our binary and restarts its unit, ours runs on GNA's
//!   credentials and renews GNA's certificate. Then back: ours installs GNA, GNA runs again
//!   and renews the certificate ours issued.
//!
//! The test plays gardenlet (Cluster and OSCs in the seed, the RBAC of TLS bootstrapping in
//! the shoot), machine-controller-manager (bootstrap token, Machine, placeholders) and
//! cloud-init (runs the user data). Both agents are authorized as in a Gardener shoot: no RBAC
//! for node agents, GRM's node-agent authorizer webhook decides by the Machine (its node-
//! template label names the pool's Secret) and the Node (kubelet registers it with gardenlet's
//! pool labels).
//!
//! Needs root, the node components and a static build of our binary; `make e2e-takeover`
//! provides them, and `cargo test` skips this file (`#[ignore]`).

#![allow(clippy::unwrap_used, clippy::panic)]

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gardener_extension_node::agent::client_certificate::rules::client_certificate;
use gardener_extension_node::api::{Cluster, OperatingSystemConfig};
use gardener_extension_node::kubeconfig::x509::{CertificateFacts, first_certificate_facts};
use k8s_openapi::api::core::v1::{Node as KubeNode, Secret};
use kube::api::{Patch, PatchParams, PostParams};
use kube::config::Kubeconfig;
use kube::{Api, Client};
use serde_json::{Value, json};
use support::gardenlet_osc::{GardenletOsc, PoolFacts, render, with_node_agent_image};
use support::node::{KUBELET_UNIT, Node, NodeOptions, NodeOsc};
use support::node_agent_identity::{create_bootstrap_token, create_machine};
use support::oci::{Image, ImageFile};
use support::registry::Registry;
use support::shoot::Shoot;

/// kube-controller-manager's `--cluster-signing-duration`, for node agents and kubelets alike.
/// Certificates are backdated by 5 min, so with GNA's 80–88 % rule a node agent renews 84–122 s
/// after each issue, and kubelet (70–90 %) 36–132 s after. Long enough that kubelet's
/// certificate, fresh when it is hung, outlives the health check's minute and the restart.
const SIGNING: Duration = Duration::from_secs(180);
const STAGE_TIMEOUT: Duration = Duration::from_secs(240);
const KUBERNETES_VERSION: &str = "1.36.3";
const PAUSE_IMAGE: &str = "e2e.local/pause:e2e";
const AGENT_UNIT: &str = "gardener-node-agent.service";
const AGENT_BINARY: &str = "/opt/bin/gardener-node-agent";
const KUBECONFIG: &str = "/var/lib/gardener-node-agent/credentials/kubeconfig";
const BOOTSTRAP_TOKEN: &str = "/var/lib/gardener-node-agent/credentials/bootstrap-token";
const KUBELET_CERTIFICATE: &str = "/var/lib/kubelet/pki/kubelet-client-current.pem";
const RESTART_ANNOTATION: &str = "worker.gardener.cloud/restart-systemd-services";

fn required_env(name: &str) -> PathBuf {
    PathBuf::from(
        std::env::var(name).unwrap_or_else(|_| {
            panic!("{name} is not set: run this test with `make e2e-takeover`")
        }),
    )
}

fn since(started: Instant) -> f64 {
    started.elapsed().as_secs_f64()
}

/// The image a landscape points `gardener-node-agent` at: `/gardener-node-agent` is `binary`.
fn node_agent_image(reference: &str, binary: &Path) -> Image {
    Image {
        reference: reference.into(),
        entrypoint: vec!["/gardener-node-agent".into()],
        files: vec![ImageFile::executable("/gardener-node-agent", binary)],
    }
}

/// The serial and validity of the certificate in a node's `credentials/kubeconfig`.
fn certificate_in(node: &Node) -> Option<CertificateFacts> {
    let text = node.machine.read_file(KUBECONFIG).ok()?;
    let kubeconfig = Kubeconfig::from_yaml(&String::from_utf8_lossy(&text)).ok()?;
    first_certificate_facts(&client_certificate(&kubeconfig)?)
}

fn unix_now() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(now.as_secs()).unwrap()
}

/// The sha256 of the program the agent unit's main process runs, once it runs (GNA exits to
/// use a renewed certificate, and systemd starts it again 5 s later).
async fn running_agent_sha(node: &Node) -> String {
    let script = format!("sha256sum /proc/$(systemctl show -P MainPID {AGENT_UNIT})/exe");
    node.wait_until(
        "the agent unit's program",
        Duration::from_secs(30),
        || async {
            let output = node.machine.sh(&script);
            match output.stdout.split_whitespace().next() {
                Some(sha) if output.success() => Ok(sha.to_string()),
                _ => Err(format!("not running: {}", output.stderr.trim())),
            }
        },
    )
    .await
    .0
}

fn sha256_of_file(node: &Node, path: &str) -> String {
    support::agent::sha256_hex(&node.machine.read_file(path).unwrap_or_default())
}

async fn node_ready(nodes: &Api<KubeNode>, name: &str) -> Result<(), String> {
    let found = nodes
        .get_opt(name)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no Node yet")?;
    let conditions = found.status.and_then(|s| s.conditions).unwrap_or_default();
    if conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
    {
        Ok(())
    } else {
        Err(format!("{conditions:?}"))
    }
}

/// One shoot, its seed namespace, the registry and the operator, shared by both pools.
struct Landscape {
    env: support::TestEnv,
    shoot: Shoot,
    shoot_client: Client,
    registry: Registry,
    assets: PathBuf,
    static_binary: PathBuf,
    images: tempfile::TempDir,
    _operator: support::operator::OperatorProcess,
}

impl Landscape {
    async fn start() -> Self {
        let assets = required_env("ENVTEST_ASSETS");
        let static_binary = required_env("E2E_STATIC_BINARY");
        let env = support::env().await;
        let shoot = Shoot::start_for_node_agents(&env, SIGNING).await;
        let shoot_client = shoot.client().await;
        let registry = Registry::start(&assets);
        registry.push(&node_agent_image(
            &format!("{}/gardener/node-agent:ours", registry.host()),
            &static_binary,
        ));
        registry.push(&node_agent_image(
            &format!("{}/gardener/node-agent:gna-v1.149.3", registry.host()),
            &assets.join("gardener-node-agent"),
        ));
        registry.push(&Image {
            reference: format!("{}/gardener/node-agent:no-binary", registry.host()),
            entrypoint: vec!["/bin/true".into()],
            files: vec![ImageFile::executable("/bin/true", "/bin/true")],
        });
        let images = tempfile::Builder::new()
            .prefix("gen-takeover-images-")
            .tempdir()
            .unwrap();
        support::node::write_pause_archive(images.path(), PAUSE_IMAGE);
        let cluster: Cluster =
            serde_json::from_value(support::fixtures::cluster_json(&env.namespace)).unwrap();
        Api::<Cluster>::all(env.client.clone())
            .create(&PostParams::default(), &cluster)
            .await
            .unwrap();
        let operator = support::operator::OperatorProcess::start(
            &env.kubeconfig,
            &["--controllers=operatingsystemconfig"],
        );
        Self {
            env,
            shoot,
            shoot_client,
            registry,
            assets,
            static_binary,
            images,
            _operator: operator,
        }
    }

    fn image(&self, tag: &str) -> String {
        format!("{}/gardener/node-agent:{tag}", self.registry.host())
    }

    fn boot(&self) -> Node {
        let mut node = Node::boot(&NodeOptions {
            assets: self.assets.clone(),
            agent_binary: self.static_binary.clone(),
            images: self.images.path().to_path_buf(),
            apiserver_port: self.shoot.plane.apiserver_port(),
        })
        .unwrap_or_else(|e| panic!("{e}"));
        node.forward(self.registry.port());
        node.prepare_node_image(&self.registry.host());
        node
    }
}

/// A pool with one machine, provisioned from gardenlet's content with `tag`'s image.
struct Pool {
    key: String,
    node: Node,
    gardenlet: GardenletOsc,
    reconcile: Value,
}

impl Pool {
    async fn provision(landscape: &Landscape, pool: &str, tag: &str) -> Self {
        let started = Instant::now();
        let node = landscape.boot();
        let node_name = node.name().to_string();
        eprintln!(
            "takeover e2e [{node_name}]: pool {pool}, booted in {:.1} s",
            since(started)
        );
        let (env, shoot_client) = (&landscape.env, &landscape.shoot_client);
        let key = format!("gardener-node-agent-{pool}");
        let repository = format!("{}/gardener/node-agent", landscape.registry.host());
        let gardenlet = render(
            &landscape.assets,
            &PoolFacts {
                namespace: &env.namespace,
                pool,
                key: &key,
                server_url: &landscape.shoot.plane.server_url(),
                ca_pem: landscape.shoot.plane.ca_pem(),
                kubernetes_version: KUBERNETES_VERSION,
                node_agent_image: (&repository, tag),
            },
        );
        gardenlet.install_shoot_rbac(shoot_client).await;
        let node_osc = NodeOsc::bootstrapping(
            landscape.shoot.plane.server_url(),
            landscape.shoot.plane.ca_pem(),
            pool,
            &key,
            PAUSE_IMAGE,
        );
        let reconcile =
            gardenlet.reconcile(node_osc.cri_config(), &node_osc.files(), &node_osc.units());
        gardenlet
            .create_oscs(&env.client, &env.namespace, &reconcile)
            .await;

        // machine-controller-manager's part: the bootstrap token, the Machine, the placeholders.
        let token = create_bootstrap_token(shoot_client, Duration::from_secs(3600)).await;
        let machine_name = format!("machine-{node_name}");
        create_machine(&env.client, &env.namespace, &machine_name, &node_name, &key).await;
        let user_data =
            support::agent::user_data(&env.client, &env.namespace, &key, STAGE_TIMEOUT).await;
        let provisioned = Instant::now();
        node.run_user_data(&user_data, &token, &machine_name);
        let pool = Self {
            key,
            node,
            gardenlet,
            reconcile,
        };
        pool.wait_until_joined(&landscape.shoot_client, provisioned)
            .await;
        pool
    }

    /// The timeline after the user data ran: image pulled, certificate issued, Node Ready.
    async fn wait_until_joined(&self, shoot: &Client, provisioned: Instant) {
        let node = &self.node;
        let image_binary = self.gardenlet.node_agent_image();
        node.wait_until(
            &format!("the node agent pulled from {image_binary}"),
            STAGE_TIMEOUT,
            || async {
                if node.machine.exists(AGENT_BINARY) {
                    Ok(())
                } else {
                    Err("no binary yet".to_string())
                }
            },
        )
        .await;
        eprintln!(
            "takeover e2e [{}]: image pulled {:.1} s after the user data started",
            node.name(),
            since(provisioned)
        );
        node.wait_until("the client certificate", STAGE_TIMEOUT, || async {
            certificate_in(node)
                .map(|_| ())
                .ok_or_else(|| "no credentials/kubeconfig yet".to_string())
        })
        .await;
        eprintln!(
            "takeover e2e [{}]: certificate issued {:.1} s after the user data started",
            node.name(),
            since(provisioned)
        );
        let nodes = Api::<KubeNode>::all(shoot.clone());
        let name = node.name().to_string();
        node.wait_until("the Node is Ready", STAGE_TIMEOUT, || {
            node_ready(&nodes, &name)
        })
        .await;
        eprintln!(
            "takeover e2e [{}]: Node Ready {:.1} s after the user data started",
            node.name(),
            since(provisioned)
        );
        node.wait_until(
            "the bootstrap token removed after the first apply",
            STAGE_TIMEOUT,
            || async {
                if node.machine.exists(BOOTSTRAP_TOKEN) {
                    Err("still there".to_string())
                } else {
                    Ok(())
                }
            },
        )
        .await;
    }

    /// Changes the reconcile OSC as gardenlet does, and waits for the node to report it.
    async fn reconcile_with(&mut self, seed: &support::TestEnv, shoot: &Client, reconcile: Value) {
        let checksum = self.change_reconcile(seed, shoot, reconcile).await;
        let nodes = Api::<KubeNode>::all(shoot.clone());
        let node_name = self.node.name().to_string();
        self.node
            .wait_until(
                "the node reports the changed OSC",
                STAGE_TIMEOUT,
                || async {
                    let reported = nodes
                        .get(&node_name)
                        .await
                        .map_err(|e| e.to_string())?
                        .metadata
                        .annotations
                        .unwrap_or_default()
                        .get("checksum/cloud-config-data")
                        .cloned();
                    if reported.as_deref() == Some(checksum.as_str()) {
                        Ok(())
                    } else {
                        Err(format!("node reports {reported:?}, secret {checksum}"))
                    }
                },
            )
            .await;
    }

    /// Changes the reconcile OSC as gardenlet does; returns the node-agent Secret's new
    /// checksum once our operator and GRM delivered it.
    async fn change_reconcile(
        &mut self,
        seed: &support::TestEnv,
        shoot: &Client,
        reconcile: Value,
    ) -> String {
        let secrets = Api::<Secret>::namespaced(shoot.clone(), "kube-system");
        let checksum_of = |secret: Secret| {
            secret
                .metadata
                .annotations
                .unwrap_or_default()
                .get("checksum/data-script")
                .cloned()
        };
        let old = checksum_of(secrets.get(&self.key).await.unwrap());
        let oscs = Api::<OperatingSystemConfig>::namespaced(seed.client.clone(), &seed.namespace);
        let name = reconcile["metadata"]["name"].as_str().unwrap().to_string();
        let patch = json!({"spec": reconcile["spec"].clone(),
                           "metadata": {"annotations": {"gardener.cloud/operation": "reconcile"}}});
        oscs.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
        self.reconcile = reconcile;
        let key = self.key.clone();
        self.node
            .wait_until("the changed node-agent Secret", STAGE_TIMEOUT, || async {
                match checksum_of(secrets.get(&key).await.map_err(|e| e.to_string())?) {
                    Some(new) if Some(&new) != old.as_ref() => Ok(new),
                    _ => Err("the secret still has the old content".to_string()),
                }
            })
            .await
            .0
    }
}

/// Waits for a certificate with a serial other than `old`'s; returns it.
async fn renewed(node: &Node, old: &CertificateFacts, what: &str) -> CertificateFacts {
    node.wait_until(what, STAGE_TIMEOUT, || async {
        match certificate_in(node) {
            Some(now) if now.serial != old.serial => Ok(now),
            other => Err(format!("still {:?}", other.map(|c| c.serial))),
        }
    })
    .await
    .0
}

/// Renewal by our agent: a new serial, and no unit restarted for it.
async fn renewal_restarts_nothing(pool: &Pool) {
    let node = &pool.node;
    let invocation = |unit: &str| node.machine.unit_property(unit, "InvocationID");
    let units = [AGENT_UNIT, KUBELET_UNIT, "containerd.service"];
    let before: Vec<String> = units.iter().map(|u| invocation(u)).collect();
    let first = certificate_in(node).unwrap();
    let started = Instant::now();
    let second = renewed(node, &first, "a renewed certificate").await;
    eprintln!(
        "takeover e2e [{}]: renewal {:.1} s after the first certificate's issue ({:.1} s waited), serial {} -> {}",
        node.name(),
        (second.not_before - first.not_before) as f64,
        since(started),
        first.serial,
        second.serial
    );
    let after: Vec<String> = units.iter().map(|u| invocation(u)).collect();
    assert_eq!(
        before, after,
        "no unit restarted for the renewal ({units:?})"
    );
}

/// kubelet hung (SIGSTOP): restarted by the health check after GNA's minute, with its events.
async fn hung_kubelet_is_restarted(pool: &Pool, shoot: &Client) {
    let node = &pool.node;
    let name = node.name().to_string();
    // A hung kubelet does not rotate its certificate: start with one that outlives the hang.
    node.wait_until(
        "a kubelet certificate valid for 150 s more",
        STAGE_TIMEOUT,
        || async {
            // A link to an absolute path of the node: read inside it.
            let pem = node.machine.run(&["cat", KUBELET_CERTIFICATE]).stdout;
            let facts = first_certificate_facts(pem.as_bytes()).ok_or("no certificate")?;
            let left = facts.not_after - unix_now();
            if left >= 150 {
                Ok(())
            } else {
                Err(format!("{left} s left"))
            }
        },
    )
    .await;
    let before = node.machine.unit_property(KUBELET_UNIT, "InvocationID");
    let pid = node.machine.unit_property(KUBELET_UNIT, "MainPID");
    node.machine
        .run(&["kill", "-STOP", &pid])
        .expect_success("stop kubelet");
    let stopped = Instant::now();
    internal_ip_is_restored(node, shoot).await;
    node.wait_until(
        "kubelet restarted by the health check",
        Duration::from_secs(240),
        || async {
            if node.machine.unit_property(KUBELET_UNIT, "InvocationID") == before {
                Err("same kubelet".to_string())
            } else {
                Ok(())
            }
        },
    )
    .await;
    let after = since(stopped);
    eprintln!("takeover e2e [{name}]: kubelet restarted {after:.1} s after SIGSTOP");
    assert!(
        after >= 60.0,
        "restarted before a minute of failure: {after:.1} s"
    );
    let notes = support::agent::core_event_messages(shoot, &name, "kubelet").await;
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("Kubelet is unhealthy for more than 1m0s, restarting it.")),
        "GNA's restart event: {notes:?}"
    );
    let nodes = Api::<KubeNode>::all(shoot.clone());
    node.wait_until("the Node Ready again", STAGE_TIMEOUT, || {
        node_ready(&nodes, &name)
    })
    .await;
}

/// GNA's lost-internal-IP rule while kubelet is hung (so kubelet does not write the addresses
/// itself): the Node's addresses cleared, the agent writes the last internal IP back with GNA's
/// events.
async fn internal_ip_is_restored(node: &Node, shoot: &Client) {
    let name = node.name().to_string();
    let nodes = Api::<KubeNode>::all(shoot.clone());
    let cleared = json!({"status": {"addresses": []}});
    nodes
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&cleared))
        .await
        .unwrap();
    node.wait_until(
        "the lost internal IP written back by the agent",
        Duration::from_secs(90),
        || async {
            let addresses = nodes
                .get(&name)
                .await
                .map_err(|e| e.to_string())?
                .status
                .and_then(|s| s.addresses)
                .unwrap_or_default();
            let back = addresses
                .iter()
                .any(|a| a.type_ == "InternalIP" && a.address == support::node::NODE_IP);
            if back {
                Ok(())
            } else {
                Err(format!("addresses {addresses:?}"))
            }
        },
    )
    .await;
    // The Normal event follows the status patch, so it may land a moment after the IP.
    node.wait_until(
        "the lost and restored IP events",
        Duration::from_secs(30),
        || async {
            let notes = support::agent::core_event_messages(shoot, &name, "kubelet").await;
            let missing: Vec<&str> = [
                "Node status does neither have an internal nor an external IP, try to recover from last known internal IP: 10.88.0.1",
                "Updated the lost internal IP address of node status to the previous known: 10.88.0.1 ",
            ]
            .into_iter()
            .filter(|expected| !notes.iter().any(|n| n == expected))
            .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!("missing {missing:?} among {notes:?}"))
            }
        },
    )
    .await;
}

/// The restart annotation: containerd restarted, the annotation removed.
async fn restart_annotation_is_honoured(pool: &Pool, shoot: &Client) {
    let node = &pool.node;
    let name = node.name().to_string();
    let before = node
        .machine
        .unit_property("containerd.service", "InvocationID");
    let nodes = Api::<KubeNode>::all(shoot.clone());
    let patch = json!({"metadata": {"annotations": {RESTART_ANNOTATION: "containerd"}}});
    nodes
        .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    node.wait_until(
        "containerd restarted and the restart annotation removed",
        STAGE_TIMEOUT,
        || async {
            let annotations = nodes
                .get(&name)
                .await
                .map_err(|e| e.to_string())?
                .metadata
                .annotations
                .unwrap_or_default();
            let restarted = node
                .machine
                .unit_property("containerd.service", "InvocationID")
                != before;
            if restarted && !annotations.contains_key(RESTART_ANNOTATION) {
                Ok(())
            } else {
                Err(format!(
                    "restarted: {restarted}, annotation: {:?}",
                    annotations.get(RESTART_ANNOTATION)
                ))
            }
        },
    )
    .await;
}

/// gardenlet's OSC names an image without `/gardener-node-agent`: the apply fails with an
/// `OSCApplyFailed` event naming the file, is retried, and the agent's binary, its credentials
/// and the node stay as they were; the next good OSC is applied.
async fn an_image_without_the_binary_changes_nothing(landscape: &Landscape, pool: &mut Pool) {
    let binary_before = sha256_of_file(&pool.node, AGENT_BINARY);
    let certificate_before = certificate_in(&pool.node).unwrap();
    let good = pool.reconcile.clone();
    let shoot = &landscape.shoot_client;
    let broken = with_node_agent_image(&good, &landscape.image("no-binary"));
    pool.change_reconcile(&landscape.env, shoot, broken).await;
    let name = pool.node.name().to_string();
    let (note, _) = pool
        .node
        .wait_until(
            "OSCApplyFailed for the image without the binary",
            STAGE_TIMEOUT,
            || async {
                support::agent::node_events(shoot, &name, "OSCApplyFailed")
                    .await
                    .into_iter()
                    .filter_map(|e| e.note)
                    .find(|note| note.contains("no-binary"))
                    .ok_or_else(|| "no such event yet".to_string())
            },
        )
        .await;
    eprintln!("takeover e2e [{name}]: image without the binary: {note}");
    assert!(
        note.contains("/gardener-node-agent"),
        "the note names the missing file: {note}"
    );
    assert_eq!(
        sha256_of_file(&pool.node, AGENT_BINARY),
        binary_before,
        "the binary is kept"
    );
    let certificate = certificate_in(&pool.node).expect("credentials/kubeconfig intact");
    assert!(certificate.not_after >= certificate_before.not_after);
    pool.reconcile_with(&landscape.env, shoot, good).await;
}

/// One hand-over through gardenlet's reconcile OSC: the agent's binary from the image `tag`
/// (whose program has sha256 `sha`) is installed by the agent running now, the unit runs it,
/// and it renews `before`. Returns the renewed certificate.
async fn hand_over(
    landscape: &Landscape,
    pool: &mut Pool,
    (tag, sha): (&str, &str),
    before: &CertificateFacts,
    what: &str,
) -> CertificateFacts {
    let started = Instant::now();
    let changed = with_node_agent_image(&pool.reconcile, &landscape.image(tag));
    pool.reconcile_with(&landscape.env, &landscape.shoot_client, changed)
        .await;
    assert_eq!(
        sha256_of_file(&pool.node, AGENT_BINARY),
        sha,
        "{tag}'s binary installed"
    );
    let renewed = renewed(&pool.node, before, &format!("{what}: a new certificate")).await;
    assert_eq!(
        running_agent_sha(&pool.node).await,
        sha,
        "{tag}'s program runs the unit"
    );
    eprintln!(
        "takeover e2e [{}]: {what} in {:.1} s",
        pool.node.name(),
        since(started)
    );
    renewed
}

/// GNA's node taken over by ours through gardenlet's OSC, ours renews GNA's certificate; then
/// back to GNA, which renews the certificate ours got.
async fn takeover_and_back(landscape: &Landscape, pool: &mut Pool) {
    let ours_sha = support::agent::sha256_hex(&std::fs::read(&landscape.static_binary).unwrap());
    let gna_sha = support::agent::sha256_hex(
        &std::fs::read(landscape.assets.join("gardener-node-agent")).unwrap(),
    );
    assert_eq!(
        sha256_of_file(&pool.node, AGENT_BINARY),
        gna_sha,
        "GNA bootstrapped the node"
    );
    let gna_certificate = certificate_in(&pool.node).unwrap();

    let ours_certificate = hand_over(
        landscape,
        pool,
        ("ours", &ours_sha),
        &gna_certificate,
        "taken over and renewed by ours",
    )
    .await;
    let after = hand_over(
        landscape,
        pool,
        ("gna-v1.149.3", &gna_sha),
        &ours_certificate,
        "back to GNA and renewed by it",
    )
    .await;
    assert_ne!(after.serial, gna_certificate.serial);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the node components and a static binary: make e2e-takeover"]
async fn nodes_enter_through_gardenlets_provision_content_and_change_hands_with_gardener_node_agent()
 {
    let landscape = Landscape::start().await;
    let (mut ours, mut gna) = tokio::join!(
        Pool::provision(&landscape, "ours", "ours"),
        Pool::provision(&landscape, "gna", "gna-v1.149.3"),
    );
    let shoot = &landscape.shoot_client;
    tokio::join!(
        async {
            renewal_restarts_nothing(&ours).await;
            hung_kubelet_is_restarted(&ours, shoot).await;
            restart_annotation_is_honoured(&ours, shoot).await;
            an_image_without_the_binary_changes_nothing(&landscape, &mut ours).await;
        },
        takeover_and_back(&landscape, &mut gna),
    );
}
