//! e2e of the disruptive rollout (`make e2e-rollout`; `docs/agent.md#disruptive-rollout`) on
//! four real nodes: systemd-nspawn machines (`support::node`) with our agent (static build),
//! containerd 2.x and kubelet, against a real shoot control plane (kube-apiserver and
//! kube-controller-manager) on loopback. The test plays gardenlet: it writes the pool's
//! node-agent secret into the shoot, with the rollout annotations our operator writes; and
//! MCM: the Machines in the seed and a bootstrap token per node. The agents authenticate with
//! the client certificates they get through GRM's CSR approver and are authorized by GRM's
//! node-agent authorizer, as in a Gardener shoot: every slot is in the one Lease it admits
//! (the OSC Secret's name).
//!
//! 1. Every node applies the first OSC at once (a first apply is quiet) and becomes Ready.
//! 2. Budget 2, a change to kubelet's unit: every node restarts kubelet once; a sampler reads
//!    the Nodes, the slot Leases and the workload pods (one per node, with a readiness probe)
//!    every 400 ms (2.5 Hz) and never sees more than 2 NotReady nodes, slot holders or nodes
//!    with an unready pod; of the kubelet restarts (from the nodes' journals) no three fall
//!    within the minimum hold of 10 s.
//! 3. Budget 1, a change that breaks kubelet: the first node stops (condition
//!    `DisruptiveRolloutHealthy=False/NotHealthy`, a `DisruptiveRolloutStopped` event) and
//!    keeps slot 0; the other three never apply it. The resume annotation on that node makes
//!    it apply the same OSC again; it stops again, the others still wait.
//! 4. A fixed OSC: the stopped node takes its own slot again first, then the others follow one
//!    at a time; all four end up on it, Ready, with every slot released.
//!
//! The same fixture with one node serves the health check's e2e (`make e2e-health`): a hung
//! kubelet restarted by the agent.
//!
//! Needs root, `hack/envtest.sh --node` and `E2E_STATIC_BINARY`; `cargo test` skips it
//! (`#[ignore]`).

#![allow(clippy::unwrap_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gardener_extension_node::agent::rollout::slots;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node as KubeNode, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::agent::{
    AgentSetup, CONFIG_DIR, NODE_CHECKSUM, install_agent_with, osc_yaml, put_osc_annotated,
};
use support::node::{AGENT_BINARY, KUBELET_UNIT, Node, NodeOptions, NodeOsc};
use support::node_agent_identity::{
    NODE_AGENT_SECRET_LABEL, allow_bootstrappers, create_bootstrap_token, create_machine,
};

const NODES: usize = 4;
const SECRET: &str = "gardener-node-agent-rollout-e2e";
const PAUSE_IMAGE: &str = "e2e.local/pause:e2e";
/// How long the agents' client certificates are valid: no renewal within the test.
const CERTIFICATE_VALIDITY: Duration = Duration::from_secs(24 * 3600);
const BUDGET_ANNOTATION: &str = "node.extensions.gardener.cloud/rollout-budget";
const CONDITION: &str = "DisruptiveRolloutHealthy";
const RESUME_ANNOTATION: &str = "node.extensions.gardener.cloud/rollout-resume";
/// The agent's minimum hold after a disruptive apply (`rollout::MIN_HOLD`).
const MIN_HOLD: Duration = Duration::from_secs(10);
/// Health bound the test's secret sets (the default is 300 s).
const HEALTH_TIMEOUT_SECONDS: u64 = 40;
const SAMPLE_EVERY: Duration = Duration::from_millis(400);
const STAGE_TIMEOUT: Duration = Duration::from_secs(300);

fn required_env(name: &str) -> PathBuf {
    PathBuf::from(
        std::env::var(name)
            .unwrap_or_else(|_| panic!("{name} is not set: run this test with `make e2e-rollout`")),
    )
}

/// The pool's OSC with a drop-in on kubelet (`None`: none).
fn osc_with_kubelet_drop_in(osc: &NodeOsc, drop_in: Option<&str>) -> String {
    let mut units = osc.units();
    if let Some(content) = drop_in {
        let kubelet = units
            .iter_mut()
            .find(|u| u["name"] == KUBELET_UNIT)
            .unwrap();
        kubelet["dropIns"] = json!([{"name": "50-rollout-e2e.conf", "content": content}]);
    }
    osc_yaml(&units, &osc.files(), Some(osc.cri_config()))
}

/// Creates or replaces the pool's secret with the rollout annotations; returns the checksum.
async fn put_pool_osc(client: &Client, osc_yaml: &str, budget: u32) -> String {
    let budget = budget.to_string();
    let health_timeout = HEALTH_TIMEOUT_SECONDS.to_string();
    put_osc_annotated(
        client,
        SECRET,
        osc_yaml,
        &[
            (BUDGET_ANNOTATION, budget.as_str()),
            (
                "node.extensions.gardener.cloud/rollout-health-timeout",
                health_timeout.as_str(),
            ),
            (
                "node.extensions.gardener.cloud/rollout-settle-timeout",
                "30",
            ),
        ],
    )
    .await
}

#[derive(Debug, Clone, Default)]
struct Sample {
    at: f64,
    not_ready: Vec<String>,
    holders: Vec<String>,
    /// (node, reported checksum).
    checksums: Vec<(String, String)>,
    /// Nodes with a workload pod that is not Ready.
    unready_pods_on: Vec<String>,
}

/// Reads the Nodes and the slot Leases every [`SAMPLE_EVERY`] until [`Sampler::finish`].
struct Sampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<Sample>>,
}

impl Sampler {
    fn start(client: Client) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let task = sample(client, stop.clone());
        Sampler { stop, task }
    }

    /// Stops sampling; prints and returns the samples with the largest NotReady and slot
    /// holder counts seen.
    async fn finish(self, what: &str) -> (Vec<Sample>, usize, usize) {
        self.stop.store(true, Ordering::SeqCst);
        let samples = self.task.await.unwrap();
        let max_not_ready = max_of(&samples, |s| s.not_ready.len());
        let max_holders = max_of(&samples, |s| s.holders.len());
        let max_unready_pods = max_of(&samples, |s| s.unready_pods_on.len());
        eprintln!(
            "rollout e2e: {what}: {} samples over {:.0} s, max NotReady {max_not_ready}, max slot holders {max_holders}, max nodes with unready pods {max_unready_pods}",
            samples.len(),
            span(&samples)
        );
        (samples, max_not_ready, max_holders)
    }
}

fn sample(client: Client, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Vec<Sample>> {
    tokio::spawn(async move {
        let nodes = Api::<KubeNode>::all(client.clone());
        let pods = Api::<Pod>::namespaced(client.clone(), "default");
        let leases = Api::<Lease>::namespaced(client, "kube-system");
        let started = Instant::now();
        let mut samples = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            let tick = Instant::now();
            let mut sample = Sample {
                at: started.elapsed().as_secs_f64(),
                ..Sample::default()
            };
            if let Ok(list) = pods.list(&Default::default()).await {
                for pod in list.items {
                    let node = pod.spec.and_then(|s| s.node_name).unwrap_or_default();
                    let ready = pod
                        .status
                        .and_then(|s| s.conditions)
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True");
                    if !ready && !sample.unready_pods_on.contains(&node) {
                        sample.unready_pods_on.push(node);
                    }
                }
            }
            if let Ok(list) = nodes.list(&Default::default()).await {
                for node in list.items {
                    let name = node.metadata.name.clone().unwrap_or_default();
                    if let Some(reported) = node
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(NODE_CHECKSUM))
                    {
                        sample.checksums.push((name.clone(), reported.clone()));
                    }
                    let ready = node
                        .status
                        .and_then(|s| s.conditions)
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True");
                    if !ready {
                        sample.not_ready.push(name);
                    }
                }
            }
            // Every slot is in the one Lease named like the secret (docs/agent.md#slots).
            if let Ok(Some(lease)) = leases.get_opt(SECRET).await {
                for (slot, holder) in slots::holders(&lease) {
                    sample.holders.push(format!("slot{slot}={holder}"));
                }
            }
            samples.push(sample);
            tokio::time::sleep(SAMPLE_EVERY.saturating_sub(tick.elapsed())).await;
        }
        samples
    })
}

fn max_of(samples: &[Sample], f: impl Fn(&Sample) -> usize) -> usize {
    samples.iter().map(f).max().unwrap_or_default()
}

/// Seconds the samples cover.
fn span(samples: &[Sample]) -> f64 {
    samples.last().map(|s| s.at).unwrap_or_default()
}

/// Unix seconds after `since` at which systemd started kubelet on `node` (systemd's "Started
/// kubelet" lines; kubelet logs a line of that text itself).
fn kubelet_starts(node: &Node, since: f64) -> Vec<f64> {
    let out = node.machine.run(&[
        "journalctl",
        "--no-pager",
        "-o",
        "short-unix",
        "-u",
        KUBELET_UNIT,
    ]);
    out.stdout
        .lines()
        .filter(|line| line.contains("systemd[1]: Started kubelet"))
        .filter_map(|line| line.split_whitespace().next()?.parse::<f64>().ok())
        .filter(|at| *at >= since)
        .collect()
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

async fn node_state(
    client: &Client,
    name: &str,
) -> (Option<String>, bool, Option<(String, String)>) {
    let Some(node) = Api::<KubeNode>::all(client.clone())
        .get_opt(name)
        .await
        .unwrap()
    else {
        return (None, false, None);
    };
    let checksum = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(NODE_CHECKSUM))
        .cloned();
    let conditions = node.status.and_then(|s| s.conditions).unwrap_or_default();
    let ready = conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let rollout = conditions
        .iter()
        .find(|c| c.type_ == CONDITION)
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()));
    (checksum, ready, rollout)
}

/// The holders of every slot (all in the Lease named like the secret).
async fn slot_holders(client: &Client) -> Vec<String> {
    Api::<Lease>::namespaced(client.clone(), "kube-system")
        .get_opt(SECRET)
        .await
        .unwrap()
        .map(|lease| slots::holders(&lease))
        .unwrap_or_default()
        .into_iter()
        .map(|(_, holder)| holder)
        .collect()
}

/// Waits until every node reports `checksum`, is Ready, has the rollout condition True (when
/// `condition`) and no slot is held.
async fn wait_rolled_out(
    client: &Client,
    nodes: &[Node],
    checksum: &str,
    condition: bool,
    what: &str,
) {
    let started = Instant::now();
    loop {
        let mut pending = Vec::new();
        for node in nodes {
            let (reported, ready, rollout) = node_state(client, node.name()).await;
            let rollout_ok =
                !condition || rollout.as_ref().is_some_and(|(status, _)| status == "True");
            if reported.as_deref() != Some(checksum) || !ready || !rollout_ok {
                pending.push(format!(
                    "{}: checksum {:?}, ready {ready}, {CONDITION} {rollout:?}",
                    node.name(),
                    reported.map(|c| c[..8].to_string())
                ));
            }
        }
        let holders = slot_holders(client).await;
        if pending.is_empty() && holders.is_empty() {
            eprintln!(
                "rollout e2e: {what} after {:.1} s",
                started.elapsed().as_secs_f64()
            );
            return;
        }
        if started.elapsed() > STAGE_TIMEOUT {
            let logs: Vec<String> = nodes
                .iter()
                .map(|n| n.describe("gardener-node-agent.service"))
                .collect();
            panic!(
                "{what}: not done after {STAGE_TIMEOUT:?}: {pending:?}, holders {holders:?}\n{}",
                logs.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Starts a sampler and writes the pool's OSC with `drop_in` on kubelet and `budget`; returns
/// when it started (unix seconds), the sampler and the new checksum.
async fn start_change(
    client: &Client,
    osc: &NodeOsc,
    drop_in: &str,
    budget: u32,
) -> (f64, Sampler, String) {
    let since = unix_now();
    let sampling = Sampler::start(client.clone());
    let checksum = put_pool_osc(
        client,
        &osc_with_kubelet_drop_in(osc, Some(drop_in)),
        budget,
    )
    .await;
    (since, sampling, checksum)
}

/// Only `stopped` runs the `broken` OSC and holds slot 0; every other node still reports
/// `previous`, is Ready and has not restarted kubelet since `since`.
async fn assert_only_one_broken(
    client: &Client,
    nodes: &[Node],
    stopped: &str,
    broken: &str,
    previous: &str,
    since: f64,
) {
    for node in nodes {
        let (reported, ready, _) = node_state(client, node.name()).await;
        if node.name() == stopped {
            assert_eq!(reported.as_deref(), Some(broken));
            continue;
        }
        let name = node.name();
        assert_eq!(reported.as_deref(), Some(previous), "{name}");
        assert!(ready, "{name} not Ready");
        let kubelet = node.machine.unit_property(KUBELET_UNIT, "ActiveState");
        assert_eq!(kubelet, "active", "{name}");
        assert!(kubelet_starts(node, since).is_empty(), "{name}");
    }
    assert_eq!(slot_holders(client).await, [stopped]);
}

/// Fails unless the Node `node` has an event with `reason`.
async fn assert_event(client: &Client, node: &str, reason: &str) {
    let events = Api::<Event>::namespaced(client.clone(), "default")
        .list(&Default::default())
        .await
        .unwrap();
    assert!(
        events.items.iter().any(|e| {
            e.reason.as_deref() == Some(reason) && e.involved_object.name.as_deref() == Some(node)
        }),
        "no {reason} event on {node}"
    );
}

/// No `budget + 1` kubelet starts (all nodes) within [`MIN_HOLD`] of each other.
fn assert_spaced(starts: &mut [f64], budget: usize, what: &str) {
    starts.sort_by(f64::total_cmp);
    for window in starts.windows(budget + 1) {
        let span = window[budget] - window[0];
        assert!(
            span >= MIN_HOLD.as_secs_f64() - 0.5,
            "{what}: {} kubelet starts within {span:.1} s: {starts:?}",
            budget + 1
        );
    }
}

/// One pod per node (bound to it, no scheduler needed) with a readiness probe every 20 s, for
/// the sampler to watch whether a kubelet restart costs the workload its readiness (kubelet
/// v1.36 kept it in our runs). Waits until all are Ready.
async fn start_workload(client: &Client, nodes: &[Node]) {
    let pods = Api::<Pod>::namespaced(client.clone(), "default");
    for node in nodes {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("workload-{}", node.name()), "namespace": "default"},
            "spec": {
                "nodeName": node.name(),
                "automountServiceAccountToken": false,
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "main", "image": PAUSE_IMAGE, "imagePullPolicy": "Never",
                    "readinessProbe": {
                        "exec": {"command": ["/bin/busybox", "true"]},
                        "periodSeconds": 20,
                    },
                }],
            },
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let started = Instant::now();
    loop {
        let list = pods.list(&Default::default()).await.unwrap();
        let ready = list
            .items
            .iter()
            .filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        if ready == nodes.len() {
            eprintln!(
                "rollout e2e: workload pods Ready after {:.1} s",
                started.elapsed().as_secs_f64()
            );
            return;
        }
        assert!(
            started.elapsed() < STAGE_TIMEOUT,
            "workload pods not Ready: {:?}",
            list.items
                .iter()
                .map(|p| (p.metadata.name.clone(), p.status.clone()))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Four nodes running the pool's first OSC (applied everywhere at once: a first apply is
/// quiet). Fields drop in order: the nodes before the control planes they talk to.
struct Fixture {
    nodes: Vec<Node>,
    osc: NodeOsc,
    client: Client,
    _images: tempfile::TempDir,
    shoot: support::shoot::Shoot,
    env: support::TestEnv,
}

/// Who ships the pool's node-agent Secret into the shoot in a fixture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shipper {
    /// The test writes it (with the rollout annotations our operator writes where it ships).
    Test,
    /// gardenlet's ManagedResource `shoot-gardener-node-agent` in the seed namespace, written
    /// as gardenlet writes it (`origin=gardener`, no class, no rollout annotation on the
    /// Secret), applied into the shoot by the real gardener-resource-manager.
    Gardenlet,
}

/// gardenlet's ManagedResource for the node-agent Secrets.
const GARDENLET_MR: &str = "shoot-gardener-node-agent";

/// Ships the pool's Secret with `osc_yaml` through gardenlet's ManagedResource (a new
/// manifest Secret, the MR pointed at it, as gardenlet updates it); returns the checksum.
async fn ship_as_gardenlet(env: &support::TestEnv, osc_yaml: &str) -> String {
    use gardener_extension_node::api::ManagedResource;
    use gardener_extension_node::extension::managed_resource;
    let secret = support::agent::osc_secret(SECRET, osc_yaml);
    let checksum = secret.metadata.annotations.as_ref().unwrap()["checksum/data-script"].clone();
    let data = BTreeMap::from([(
        format!("secret__kube-system__{SECRET}.yaml"),
        serde_json::to_vec(&secret).unwrap(),
    )]);
    let name = managed_resource::secret_name(GARDENLET_MR, &data);
    let manifests = managed_resource::render_secret(&env.namespace, &name, &data);
    let secrets =
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(env.client.clone(), &env.namespace);
    if secrets.get_opt(&name).await.unwrap().is_none() {
        secrets
            .create(&PostParams::default(), &manifests)
            .await
            .unwrap();
    }
    let mut mr =
        managed_resource::render_managed_resource(&env.namespace, GARDENLET_MR, &name, false);
    mr.metadata.labels = Some([("origin".to_string(), "gardener".to_string())].into());
    Api::<ManagedResource>::namespaced(env.client.clone(), &env.namespace)
        .patch(
            GARDENLET_MR,
            &PatchParams::apply("gardenlet").force(),
            &Patch::Apply(&mr),
        )
        .await
        .unwrap();
    checksum
}

/// Writes the first OSC (with the rollout on when `budget` is set), boots `count` nodes with
/// their agents and waits until all run it; returns the fixture and the first checksum.
async fn fixture(budget: Option<u32>, count: usize) -> (Fixture, String) {
    fixture_with(budget, count, "10m", Shipper::Test).await
}

/// [`fixture`] with the agents' drift check every `drift_interval` (a Go duration) and the
/// Secret shipped by `shipper`.
async fn fixture_with(
    budget: Option<u32>,
    count: usize,
    drift_interval: &str,
    shipper: Shipper,
) -> (Fixture, String) {
    let assets = required_env("ENVTEST_ASSETS");
    let static_binary = required_env("E2E_STATIC_BINARY");
    let env = support::env().await;
    let shoot = support::shoot::Shoot::start_for_node_agents(&env, CERTIFICATE_VALIDITY).await;
    let client = shoot.client().await;
    allow_bootstrappers(&client).await;
    let server_url = shoot.plane.server_url();
    let ca_pem = shoot.plane.ca_pem().to_string();
    let port = shoot.plane.apiserver_port();
    let images = tempfile::tempdir().unwrap();
    support::node::write_pause_archive(images.path(), PAUSE_IMAGE);

    // One kubelet credential for the pool (a ServiceAccount bound to system:node).
    let osc = NodeOsc {
        server_url: server_url.clone(),
        ca_pem: ca_pem.clone(),
        kubelet_credentials: support::node::KubeletCredentials::Token(
            support::node::kubelet_token(&client, "rollout-pool").await,
        ),
        labels: BTreeMap::from([
            ("worker.gardener.cloud/pool".into(), "rollout".into()),
            (NODE_AGENT_SECRET_LABEL.into(), SECRET.into()),
        ]),
        sandbox_image: PAUSE_IMAGE.into(),
    };
    let first_yaml = osc_with_kubelet_drop_in(&osc, None);
    let first = match (shipper, budget) {
        (Shipper::Gardenlet, _) => {
            let checksum = ship_as_gardenlet(&env, &first_yaml).await;
            support::wait_for(
                "the Secret in the shoot through GRM",
                STAGE_TIMEOUT,
                || async {
                    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
                        client.clone(),
                        "kube-system",
                    )
                    .get_opt(SECRET)
                    .await
                    .map_err(|e| e.to_string())?
                    .map(drop)
                    .ok_or_else(|| "not yet".to_string())
                },
            )
            .await;
            checksum
        }
        (Shipper::Test, Some(budget)) => put_pool_osc(&client, &first_yaml, budget).await,
        (Shipper::Test, None) => put_osc_annotated(&client, SECRET, &first_yaml, &[]).await,
    };
    let mut nodes = Vec::new();
    for _ in 0..count {
        let node = Node::boot(&NodeOptions {
            assets: assets.clone(),
            agent_binary: static_binary.clone(),
            images: images.path().to_path_buf(),
            apiserver_port: port,
        })
        .unwrap_or_else(|e| panic!("{e}"));
        // MCM's part: the Machine (its node template names the pool's Secret), a bootstrap
        // token and the machine name; the agent gets its client certificate through GRM's
        // approver and is authorized by GRM's node-agent authorizer.
        let name = node.name().to_string();
        let machine_name = format!("machine-{name}");
        create_machine(&env.client, &env.namespace, &machine_name, &name, SECRET).await;
        let token = create_bootstrap_token(&client, Duration::from_secs(3600)).await;
        install_agent_with(
            &node.machine,
            &AgentSetup {
                secret_name: SECRET.into(),
                kubeconfig: String::new(),
                server_url: server_url.clone(),
                ca_pem: ca_pem.clone(),
                drift_interval: drift_interval.into(),
                token_sync: vec![],
                binary_in_machine: AGENT_BINARY.into(),
            },
            &[
                (format!("{CONFIG_DIR}/credentials/bootstrap-token"), token),
                (format!("{CONFIG_DIR}/machine-name"), machine_name),
            ],
        );
        nodes.push(node);
    }
    wait_rolled_out(&client, &nodes, &first, false, "first OSC on all nodes").await;
    start_workload(&client, &nodes).await;
    let fixture = Fixture {
        nodes,
        osc,
        client,
        _images: images,
        shoot,
        env,
    };
    (fixture, first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the node components and a static binary: make e2e-rollout"]
async fn disruptive_changes_roll_out_within_the_budget_stop_on_failure_and_resume() {
    // 1. Four nodes; the first OSC is applied everywhere at once.
    let (fixture, _) = fixture(Some(2), NODES).await;
    let (client, osc, nodes) = (&fixture.client, &fixture.osc, fixture.nodes.as_slice());

    // 2. Budget 2: a kubelet-restarting change.
    let (since, sampling, second) =
        start_change(client, osc, "[Service]\nEnvironment=ROLLOUT_E2E=2\n", 2).await;
    wait_rolled_out(
        client,
        nodes,
        &second,
        true,
        "budget 2: change on all nodes",
    )
    .await;
    let (samples, max_not_ready, max_holders) = sampling.finish("budget 2").await;
    // Whatever a restart does to the workload pods' readiness, never on more nodes than the
    // budget.
    let max_unready_pods = max_of(&samples, |s| s.unready_pods_on.len());
    assert!(max_unready_pods <= 2, "{samples:?}");
    let mut starts: Vec<f64> = Vec::new();
    for node in nodes {
        let node_starts = kubelet_starts(node, since);
        assert_eq!(node_starts.len(), 1, "{}: {node_starts:?}", node.name());
        starts.extend(node_starts);
    }
    eprintln!(
        "rollout e2e: budget 2: kubelet starts {:?}",
        starts
            .iter()
            .map(|s| format!("{:.1}", s - since))
            .collect::<Vec<_>>()
    );
    assert!(samples.len() >= 10, "{samples:?}");
    assert!(max_not_ready <= 2, "{samples:?}");
    assert!(max_holders <= 2, "{samples:?}");
    assert!(
        samples
            .iter()
            .any(|s| s.holders.iter().any(|h| h.starts_with("slot1="))),
        "slot 1 was never used: {samples:?}"
    );
    assert_spaced(&mut starts, 2, "budget 2");
    // At least one of the two that waited was woken by its watch of the slot Lease
    // (src/agent/rollout/lock_watch.rs: the log line is written when the watch finds a slot
    // free, a release or a free slot right when the watch starts), not only by its 5 s look.
    let woken = nodes
        .iter()
        .filter(|n| {
            n.machine
                .journal(support::agent::AGENT_UNIT)
                .contains("disruptive rollout: a slot is free")
        })
        .count();
    assert!(woken >= 1, "no waiting agent was woken by a slot release");

    // 3. Budget 1: a change that breaks kubelet stops on the first node.
    let (since, sampling, broken) = start_change(
        client,
        osc,
        "[Service]\nExecStart=\nExecStart=/usr/local/sbin/kubelet --no-such-flag-rollout-e2e\n",
        1,
    )
    .await;
    let started = Instant::now();
    let stopped_node = support::wait_for(
        "a node stopping the broken rollout",
        STAGE_TIMEOUT,
        || async {
            for node in nodes {
                let (_, _, rollout) = node_state(client, node.name()).await;
                if rollout
                    .as_ref()
                    .is_some_and(|(status, reason)| status == "False" && reason == "NotHealthy")
                {
                    return Ok(node.name().to_string());
                }
            }
            Err("none stopped".to_string())
        },
    )
    .await;
    eprintln!(
        "rollout e2e: broken change stopped on {stopped_node} after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // Others keep waiting: give them time to (wrongly) move on.
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_only_one_broken(client, nodes, &stopped_node, &broken, &second, since).await;
    assert_event(client, &stopped_node, "DisruptiveRolloutStopped").await;

    // 3b. The resume annotation: the stopped node takes it (removes it, an event), applies the
    // same OSC again, is held and stops again; the others still do not move.
    let resumed_at = k8s_openapi::jiff::Timestamp::now();
    Api::<KubeNode>::all(client.clone())
        .patch_metadata(
            &stopped_node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {RESUME_ANNOTATION: "e2e"}}})),
        )
        .await
        .unwrap();
    let started = Instant::now();
    support::wait_for("the resumed node to stop again", STAGE_TIMEOUT, || async {
        let node = Api::<KubeNode>::all(client.clone())
            .get(&stopped_node)
            .await
            .unwrap();
        let annotated = node
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(RESUME_ANNOTATION));
        let stopped_again = node
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| {
                c.type_ == CONDITION
                    && c.status == "False"
                    && c.last_transition_time
                        .as_ref()
                        .is_some_and(|t| t.0 > resumed_at)
            });
        if !annotated && stopped_again {
            Ok(())
        } else {
            Err(format!(
                "annotation still there: {annotated}, stopped again: {stopped_again}"
            ))
        }
    })
    .await;
    eprintln!(
        "rollout e2e: resumed by annotation, stopped again after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_event(client, &stopped_node, "DisruptiveRolloutResumed").await;
    assert_only_one_broken(client, nodes, &stopped_node, &broken, &second, since).await;
    let (samples, max_not_ready, max_holders) = sampling.finish("broken change").await;
    assert!(max_holders <= 1, "{samples:?}");
    assert!(max_not_ready <= 1, "{samples:?}");

    // 4. A fixed OSC resumes: the stopped node first (it holds the slot), then the others.
    let (since, sampling, fixed) =
        start_change(client, osc, "[Service]\nEnvironment=ROLLOUT_E2E=4\n", 1).await;
    wait_rolled_out(client, nodes, &fixed, true, "fixed OSC on all nodes").await;
    let (samples, max_not_ready, max_holders) = sampling.finish("fixed OSC").await;
    let mut starts: Vec<(f64, String)> = Vec::new();
    for node in nodes {
        let node_starts = kubelet_starts(node, since);
        assert!(
            !node_starts.is_empty(),
            "{}: kubelet not restarted",
            node.name()
        );
        starts.extend(
            node_starts
                .into_iter()
                .map(|s| (s, node.name().to_string())),
        );
    }
    starts.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Who reported the fixed checksum first (the sampler's view).
    let first_fixed = samples
        .iter()
        .flat_map(|s| s.checksums.iter())
        .find(|(_, reported)| *reported == fixed)
        .map(|(node, _)| node.clone());
    assert_eq!(
        first_fixed.as_deref(),
        Some(stopped_node.as_str()),
        "the stopped node goes first"
    );
    eprintln!(
        "rollout e2e: fixed OSC: kubelet starts {:?}",
        starts
            .iter()
            .map(|(s, n)| format!("{n}@{:.1}", s - since))
            .collect::<Vec<_>>()
    );
    assert!(max_holders <= 1, "{samples:?}");
    assert!(max_not_ready <= 1, "{samples:?}");
    // The other three restart kubelet once each, at least the minimum hold apart.
    let mut others: Vec<f64> = starts
        .iter()
        .filter(|(_, n)| *n != stopped_node)
        .map(|(s, _)| *s)
        .collect();
    assert_eq!(others.len(), NODES - 1, "{starts:?}");
    assert_spaced(&mut others, 1, "fixed OSC");
}

/// One way of rolling a kubelet-restarting change out, for the comparison.
struct Mode {
    name: &'static str,
    /// Secret annotations besides the checksum.
    annotations: Vec<(&'static str, String)>,
    /// gardener-resource-manager's per-node `reconciliation-delay` (node index → seconds).
    delays: Option<fn(usize) -> u64>,
    /// Whether the rollout's condition marks the end (slots released after the hold).
    rollout: bool,
}

/// The largest number of kubelet starts within any window of `window` seconds.
/// The nodes reporting `checksum`.
async fn reporting(client: &Client, nodes: &[Node], checksum: &str) -> Vec<String> {
    let mut on = Vec::new();
    for node in nodes {
        if node_state(client, node.name()).await.0.as_deref() == Some(checksum) {
            on.push(node.name().to_string());
        }
    }
    on
}

/// The annotation `key` of the pool's Lease.
async fn lease_annotation(client: &Client, key: &str) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), "kube-system")
        .get_opt(SECRET)
        .await
        .unwrap()
        .and_then(|lease| lease.metadata.annotations)
        .and_then(|a| a.get(key).cloned())
}

/// Waits until the pool's Lease has `key` = `want` (`None`: absent); returns when.
async fn wait_lease(client: &Client, key: &str, want: Option<&str>) -> Instant {
    support::wait_for(
        &format!("the pool's Lease with {key}={want:?}"),
        STAGE_TIMEOUT,
        || async {
            let value = lease_annotation(client, key).await;
            (value.as_deref() == want)
                .then_some(())
                .ok_or(format!("{value:?}"))
        },
    )
    .await;
    Instant::now()
}

/// Our operator beside gardenlet's ManagedResource, as in a landscape: the shoot's Cluster,
/// gardenlet's generic token kubeconfig, the pool's `reconcile` OSC (annotated with the
/// rollout settings the pool gets: budget 1, the test's timeouts) and the operator with its
/// OSC controller; it carries them to the pool's Lease through the token the real
/// gardener-resource-manager's token requestor gives it and the RBAC of its rollout
/// ManagedResource.
async fn operator_beside_gardenlet(fixture: &Fixture) -> support::operator::OperatorProcess {
    use gardener_extension_node::api::{Cluster, OperatingSystemConfig};
    let env = &fixture.env;
    let cluster = support::fixtures::cluster_with_pools(&env.namespace, &["rollout"]);
    Api::<Cluster>::all(env.client.clone())
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let generic = gardener_extension_node::devenv::apply::generic_token_kubeconfig(
        &env.namespace,
        &fixture.shoot.plane.server_url(),
        fixture.shoot.plane.ca_pem(),
    );
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(env.client.clone(), &env.namespace)
        .create(
            &PostParams::default(),
            &serde_json::from_value(generic).unwrap(),
        )
        .await
        .unwrap();
    let health_timeout = HEALTH_TIMEOUT_SECONDS.to_string();
    let mut osc = support::fixtures::operating_system_config_json(
        &env.namespace,
        &format!("{SECRET}-original"),
        "reconcile",
    );
    osc["spec"]["files"]
        .as_array_mut()
        .unwrap()
        .retain(|f| f["content"].get("secretRef").is_none());
    osc["metadata"]["labels"] = json!({"worker.gardener.cloud/pool": "rollout"});
    osc["metadata"]["annotations"] = json!({
        "gardener.cloud/operation": "reconcile",
        BUDGET_ANNOTATION: "1",
        "node.extensions.gardener.cloud/rollout-health-timeout": health_timeout,
        "node.extensions.gardener.cloud/rollout-settle-timeout": "30",
    });
    Api::<OperatingSystemConfig>::namespaced(env.client.clone(), &env.namespace)
        .create(
            &PostParams::default(),
            &serde_json::from_value(osc).unwrap(),
        )
        .await
        .unwrap();
    support::operator::OperatorProcess::start(
        &env.kubeconfig,
        &["--controllers=operatingsystemconfig"],
    )
}

/// Sets (or with `None` removes) an annotation of the pool's reconcile OSC in the seed.
async fn annotate_osc(env: &support::TestEnv, key: &str, value: Option<&str>) {
    use gardener_extension_node::api::OperatingSystemConfig;
    Api::<OperatingSystemConfig>::namespaced(env.client.clone(), &env.namespace)
        .patch(
            &format!("{SECRET}-original"),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
        )
        .await
        .unwrap();
}

/// Issue 45 items 2–4 on four real nodes as in a landscape: gardenlet's ManagedResource
/// ships the pool's Secret through the real gardener-resource-manager (no rollout annotation
/// on it), and our operator carries the rollout settings from the pool's OSC to the pool's
/// Lease. Budget 1 turns the disruptive rollout on; a pause (annotation on the OSC) set as
/// soon as the first node reports a kubelet change holds every node that had not started for
/// 60 s; removing it resumes; then the same kubelet drop-in rewritten on all four nodes at
/// once is repaired in turn: no two kubelet restarts within the minimum hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the node components and a static binary: make e2e-steering"]
async fn the_seed_pauses_the_rollout_and_a_fleet_wide_drift_is_repaired_in_turn() {
    const PAUSED: &str = "node.extensions.gardener.cloud/rollout-paused";
    const DROP_IN: &str = "/etc/systemd/system/kubelet.service.d/50-rollout-e2e.conf";
    let (fixture, _) = fixture_with(None, NODES, "5s", Shipper::Gardenlet).await;
    let client = &fixture.client;
    let env = &fixture.env;
    let operator_started = Instant::now();
    let operator = operator_beside_gardenlet(&fixture).await;
    wait_lease(client, BUDGET_ANNOTATION, Some("1")).await;
    eprintln!(
        "steering e2e: the operator carried budget 1 to the pool's Lease {:.1} s after it started",
        operator_started.elapsed().as_secs_f64()
    );

    // A kubelet change through gardenlet's ManagedResource; paused as soon as the first node
    // reports it.
    let drop_in = "[Service]\nEnvironment=ROLLOUT_E2E=steered\n";
    let started = Instant::now();
    let second =
        ship_as_gardenlet(env, &osc_with_kubelet_drop_in(&fixture.osc, Some(drop_in))).await;
    let first_node = loop {
        let on = reporting(client, &fixture.nodes, &second).await;
        if let Some(first) = on.first() {
            break first.clone();
        }
        assert!(started.elapsed() < STAGE_TIMEOUT, "no node took the change");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let reported_at = started.elapsed();
    annotate_osc(env, PAUSED, Some("rollout e2e")).await;
    let annotated_at = started.elapsed();
    let on_lease = wait_lease(client, PAUSED, Some("rollout e2e")).await;
    let paused_at = on_lease.duration_since(started);
    let on_at_pause = reporting(client, &fixture.nodes, &second).await;
    let holders_at_pause = slot_holders(client).await;
    eprintln!(
        "steering e2e: {first_node} reported the change at {:.1} s; OSC annotated at {:.1} s; pause on the Lease at {:.1} s with {on_at_pause:?} on the change, slot holders {holders_at_pause:?}",
        reported_at.as_secs_f64(),
        annotated_at.as_secs_f64(),
        paused_at.as_secs_f64()
    );
    let quiet_until = Instant::now() + Duration::from_secs(60);
    let mut holders_seen: Vec<String> = Vec::new();
    while Instant::now() < quiet_until {
        let on = reporting(client, &fixture.nodes, &second).await;
        for holder in slot_holders(client).await {
            if !holders_seen.contains(&holder) {
                holders_seen.push(holder);
            }
        }
        assert!(
            on.iter().all(|node| on_at_pause.contains(node)),
            "paused: no node starts the change: {on:?} now, {on_at_pause:?} at the pause"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(
        holders_seen
            .iter()
            .all(|h| on_at_pause.contains(h) || holders_at_pause.contains(h)),
        "paused: no new slot taken: {holders_seen:?}"
    );
    let still = reporting(client, &fixture.nodes, &second).await;
    eprintln!(
        "steering e2e: 60 s paused, at {:.1} s still {still:?} on the change, slot holders seen {holders_seen:?}",
        started.elapsed().as_secs_f64()
    );
    annotate_osc(env, PAUSED, None).await;
    let resume_asked = started.elapsed();
    let resumed = wait_lease(client, PAUSED, None)
        .await
        .duration_since(started);
    wait_rolled_out(client, &fixture.nodes, &second, true, "after the resume").await;
    eprintln!(
        "steering e2e: resume asked at {:.1} s, on the Lease at {:.1} s, all four on the change at {:.1} s",
        resume_asked.as_secs_f64(),
        resumed.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );

    // The same careless rewrite of kubelet's drop-in on every node at once.
    let since = unix_now();
    for node in &fixture.nodes {
        node.machine
            .write_file(
                DROP_IN,
                b"[Service]\nEnvironment=ROLLOUT_E2E=tampered\n",
                0o644,
            )
            .unwrap();
    }
    let tampered = Instant::now();
    let mut starts = loop {
        let restored = fixture.nodes.iter().all(|node| {
            node.machine.read_file(DROP_IN).ok().as_deref() == Some(drop_in.as_bytes())
        });
        let starts: Vec<Vec<f64>> = fixture
            .nodes
            .iter()
            .map(|node| kubelet_starts(node, since))
            .collect();
        let free = slot_holders(client).await.is_empty();
        if restored && free && starts.iter().all(|s| !s.is_empty()) {
            break starts.into_iter().flatten().collect::<Vec<f64>>();
        }
        assert!(
            tampered.elapsed() < STAGE_TIMEOUT,
            "fleet drift not repaired: restored {restored}, slots free {free}, kubelet starts {starts:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    starts.sort_by(f64::total_cmp);
    let at_once = max_within(&starts, MIN_HOLD.as_secs_f64());
    eprintln!(
        "steering e2e: fleet drift repaired in {:.1} s; kubelet starts at {:?} s after the rewrite; most within one hold: {at_once}",
        tampered.elapsed().as_secs_f64(),
        starts
            .iter()
            .map(|t| format!("{:.1}", t - since))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        starts.len(),
        NODES,
        "one kubelet restart per node: {starts:?}"
    );
    assert_spaced(&mut starts, 1, "fleet drift");
    let log = operator.log_text();
    assert!(!log.contains("panicked"), "{log}");
}

fn max_within(starts: &[f64], window: f64) -> usize {
    let mut sorted = starts.to_vec();
    sorted.sort_by(f64::total_cmp);
    (0..sorted.len())
        .map(|i| {
            sorted[i..]
                .iter()
                .take_while(|s| **s - sorted[i] < window)
                .count()
        })
        .max()
        .unwrap_or_default()
}

/// GNA's behaviours (emulated by our agent, which follows GNA's reconciliation delay and serial
/// lock) against the disruptive rollout, on the same four nodes: one kubelet-restarting change
/// per mode; writes the `rollout` section of docs/benchmarks.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a measurement, not a check: make bench-rollout"]
async fn compare_rollout_modes() {
    let (fixture, _) = fixture(None, NODES).await;
    let (client, osc, nodes) = (&fixture.client, &fixture.osc, fixture.nodes.as_slice());
    let nodes_api = Api::<KubeNode>::all(client.clone());
    let modes = [
        Mode {
            name: "GNA, no delay (all nodes at once)",
            annotations: vec![],
            delays: None,
            rollout: false,
        },
        Mode {
            name: "GNA, reconciliation delay spread over 60 s (GRM's linear spread, max shortened from 5 min)",
            annotations: vec![],
            delays: Some(|i| (i as u64) * 60 / NODES as u64),
            rollout: false,
        },
        Mode {
            name: "GNA serial mode (`reconciliation.osc.node-agent.gardener.cloud/serial`)",
            annotations: vec![(
                "reconciliation.osc.node-agent.gardener.cloud/serial",
                "true".into(),
            )],
            delays: None,
            rollout: false,
        },
        Mode {
            name: "disruptive rollout, budget 1",
            annotations: vec![(BUDGET_ANNOTATION, "1".into())],
            delays: None,
            rollout: true,
        },
        Mode {
            name: "disruptive rollout, budget 2",
            annotations: vec![(BUDGET_ANNOTATION, "2".into())],
            delays: None,
            rollout: true,
        },
    ];
    let mut rows = Vec::new();
    for (round, mode) in modes.iter().enumerate() {
        let delay_key = "node-agent.gardener.cloud/reconciliation-delay";
        for (i, node) in nodes.iter().enumerate() {
            let delay = mode.delays.map(|f| format!("{}s", f(i)));
            nodes_api
                .patch_metadata(
                    node.name(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {delay_key: delay}}})),
                )
                .await
                .unwrap();
        }
        // The agents read the delay from their Node watch: let it arrive.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let since = unix_now();
        let sampling = Sampler::start(client.clone());
        let started = Instant::now();
        let annotations: Vec<(&str, &str)> = mode
            .annotations
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .collect();
        let checksum = put_osc_annotated(
            client,
            SECRET,
            &osc_with_kubelet_drop_in(
                osc,
                Some(&format!("[Service]\nEnvironment=ROLLOUT_BENCH={round}\n")),
            ),
            &annotations,
        )
        .await;
        wait_rolled_out(client, nodes, &checksum, mode.rollout, mode.name).await;
        let total = started.elapsed();
        let (samples, max_not_ready, _) = sampling.finish(mode.name).await;
        let max_unready_pods = max_of(&samples, |s| s.unready_pods_on.len());
        let starts: Vec<f64> = nodes
            .iter()
            .flat_map(|node| kubelet_starts(node, since))
            .collect();
        assert_eq!(starts.len(), NODES, "{}: {starts:?}", mode.name);
        let mut sorted = starts.clone();
        sorted.sort_by(f64::total_cmp);
        let first_to_last = sorted[NODES - 1] - sorted[0];
        rows.push(format!(
            "| {} | {:.1} s | {first_to_last:.1} s | {} | {max_unready_pods} | {} |\n",
            mode.name,
            total.as_secs_f64(),
            max_within(&starts, MIN_HOLD.as_secs_f64()),
            max_not_ready,
        ));
    }
    let mut body = String::from(
        "## Rolling a kubelet-restarting change out: GNA's modes and the disruptive rollout\n\n\
         Command: `make bench-rollout` (`compare_rollout_modes` in `test/rollout_e2e.rs`): four \
         systemd-nspawn nodes with our agent (static debug build), containerd 2.x and kubelet \
         against a real kube-apiserver and kube-controller-manager on loopback; per mode one change \
         of kubelet's unit (a drop-in), one after the other on the same nodes; 2 cores. GNA's modes \
         are played by our agent, which follows GNA's reconciliation-delay annotation and serial \
         lock (`docs/agent.md`). Total: secret written → every node reports the checksum (and, for \
         the rollout, has released its slot after the health hold). NotReady: the largest number of \
         Nodes not `Ready` in one sample (400 ms). Unready pods: one pod per node (a readiness \
         probe every 20 s); the largest number of nodes with that pod not Ready in one sample. \
         What a kubelet restart can cost is the pods' readiness (kubernetes/kubernetes#100277); \
         kubelet v1.36 kept it across its restarts in these runs and the Node stayed Ready, so \
         the column that tells the modes apart is how many kubelets restart close together.\n\n\
         | mode | total | first to last kubelet restart | most kubelet restarts within 10 s | most nodes with an unready pod at once | max NotReady |\n\
         |---|---|---|---|---|---|\n",
    );
    for row in rows {
        body.push_str(&row);
    }
    body.push_str(&format!(
        "\nMeasured on {}.\n",
        chrono::Utc::now().format("%Y-%m-%d")
    ));
    println!("{body}");
    support::benchmarks::write_section("rollout", &body);
}

/// The health check (`docs/agent.md#health-checks`, `make e2e-health`): kubelet hung with
/// SIGSTOP fails its `/healthz`; the agent says so, restarts it once it has failed for a
/// minute (GNA's threshold, probed every 30 s), with GNA's events, and the Node is Ready again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the node components and a static binary: make e2e-health"]
async fn a_hung_kubelet_is_restarted_by_the_health_check() {
    let (fixture, _) = fixture(None, 1).await;
    let (client, node) = (&fixture.client, &fixture.nodes[0]);
    let name = node.name().to_string();
    let machine = &node.machine;
    let before = machine.unit_property(KUBELET_UNIT, "InvocationID");
    let pid = machine.unit_property(KUBELET_UNIT, "MainPID");
    machine
        .run(&["kill", "-STOP", &pid])
        .expect_success("stop kubelet");
    let stopped = Instant::now();
    while machine.unit_property(KUBELET_UNIT, "InvocationID") == before {
        assert!(
            stopped.elapsed() < Duration::from_secs(180),
            "kubelet not restarted; agent log:\n{}",
            machine.journal(support::agent::AGENT_UNIT)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let restarted_after = stopped.elapsed();
    eprintln!(
        "health e2e: kubelet restarted {:.1} s after SIGSTOP",
        restarted_after.as_secs_f64()
    );
    assert!(
        restarted_after >= Duration::from_secs(60),
        "restarted before a minute of failure: {restarted_after:?}"
    );
    let notes = support::agent::core_event_messages(client, &name, "kubelet").await;
    for expected in [
        "Kubelet is unhealthy, health check error:",
        "Kubelet is unhealthy for more than 1m0s, restarting it.",
    ] {
        assert!(
            notes.iter().any(|n| n.starts_with(expected)),
            "{expected}: {notes:?}"
        );
    }
    assert_event(client, &name, "SystemDUnitRestart").await;
    let deadline = Instant::now() + STAGE_TIMEOUT;
    loop {
        let ready = Api::<KubeNode>::all(client.clone())
            .get(&name)
            .await
            .unwrap()
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if ready {
            break;
        }
        assert!(Instant::now() < deadline, "node not Ready again");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!(
        "health e2e: node Ready again {:.1} s after SIGSTOP",
        stopped.elapsed().as_secs_f64()
    );
}
