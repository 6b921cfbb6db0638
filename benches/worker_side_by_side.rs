//! Benchmark: 20 Workers (one per shoot namespace, 2 pools × 3 zones each) on a real
//! kube-apiserver with the real machine-controller-manager v0.62.1 in every namespace, through
//! create, reconcile (gardenlet annotates all) and delete; the operator (`--controllers=worker`)
//! and gardener-extension-provider-local's Worker controller (gardener v1.149.3, the Go peer,
//! built by `hack/peers.sh`) measured in the same run, alternating, on the same kube-apiserver
//! (`bench_support::side_by_side`). Writes its section of `docs/benchmarks.md`.
//!
//! The pools are autoscaled pools at their minimum of 0 machines: MCM core turns every
//! MachineDeployment into a MachineSet and reports it available, and no machine has to boot.
//! What a machine costs the Worker is measured with booting nodes by `make bench-machines`.
//!
//! Run: `cargo bench --bench worker_side_by_side` (release build of the operator).

#![allow(clippy::unwrap_used, clippy::panic, dead_code)] // a measuring tool, not a controller

#[path = "bench_support/mod.rs"]
mod bench_support;
#[path = "../test/support/mod.rs"]
mod support;

use std::time::Duration;

use bench_support::peer::Peer;
use bench_support::side_by_side::{self, Side, Workload};
use gardener_extension_node::api::machine::{Machine, MachineClass, MachineDeployment, MachineSet};
use gardener_extension_node::api::{Cluster, Worker};
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{Value, json};
use support::machine_controllers::{Driver, MachineControllers, Targets};
use support::{Crds, fixtures};

const NAMESPACES: usize = 20;
/// Worker pools per shoot and their node-agent keys (`gardener-node-agent-<pool>-<hash>`).
const POOLS: [(&str, &str); 2] = [
    ("worker-a", "gardener-node-agent-worker-a-0123456789abcdef"),
    ("worker-b", "gardener-node-agent-worker-b-fedcba9876543210"),
];
const ZONES: [&str; 3] = ["0", "1", "2"];
/// MachineDeployments (and MachineClasses) per Worker.
const DEPLOYMENTS: usize = POOLS.len() * ZONES.len();
/// Runs per side.
const RUNS: usize = 3;
/// How long a contender must have been silent before a phase's count is closed.
const QUIET: Duration = Duration::from_secs(3);
/// `--max-concurrent-reconciles` of both (ours' default, the peer's chart's).
const WORKERS: usize = 5;
const SECTION: &str = "worker-side-by-side";
const PHASES: [(&str, &str); 3] = side_by_side::GARDENLET_PHASES;
/// The phase in which nothing changes but gardenlet's annotation.
const STEADY_STATE: usize = 1;
/// gardenlet's credentials Secret of the shoot (`spec.secretRef`).
const CLOUDPROVIDER: &str = "cloudprovider";

/// The Workers of the bench, as gardenlet handles them.
struct Workers {
    client: Client,
    namespaces: Vec<String>,
}

/// The user-data Secret gardenlet writes for `pool` (its provision OSC's result).
fn user_data_secret(pool: &str) -> String {
    format!("osc-result-{pool}-init")
}

/// An autoscaled pool of `name` over [`ZONES`] at its minimum of 0, as gardenlet writes it.
fn pool(name: &str, key: &str) -> Value {
    json!({
        "name": name,
        "machineType": "local",
        "machineImage": {"name": "debian", "version": "13.2"},
        "minimum": 0,
        "maximum": 6,
        "maxSurge": 1,
        "maxUnavailable": 0,
        "zones": ZONES,
        "userDataSecretRef": {"name": user_data_secret(name), "key": "cloud_config"},
        "nodeAgentSecretName": key,
        "kubernetesVersion": "1.36.3",
        "updateStrategy": "AutoRollingUpdate",
        // gardenlet's node template: the machine type's resources from the CloudProfile.
        "nodeTemplate": {"capacity": {"cpu": "1", "gpu": "0", "memory": "1Gi"}},
    })
}

/// gardenlet's Worker of `namespace` with both pools of [`POOLS`], created with the reconcile
/// annotation and a timestamp.
fn worker(namespace: &str) -> Worker {
    let mut worker = fixtures::worker_json(namespace);
    worker["metadata"]["annotations"] = json!({
        "gardener.cloud/operation": "reconcile",
        "gardener.cloud/timestamp": chrono::Utc::now().to_rfc3339(),
    });
    worker["spec"]["pools"] = POOLS.iter().map(|(name, key)| pool(name, key)).collect();
    serde_json::from_value(worker).unwrap()
}

impl Workers {
    /// gardenlet creates every Worker with the reconcile annotation.
    async fn create_all(&self) {
        let creates = self.namespaces.iter().map(|namespace| {
            let api: Api<Worker> = Api::namespaced(self.client.clone(), namespace);
            let object = worker(namespace);
            async move {
                api.create(&PostParams::default(), &object).await.unwrap();
            }
        });
        futures::future::join_all(creates).await;
    }
}

impl Workload for Workers {
    fn phases(&self) -> &[(&'static str, &'static str)] {
        &PHASES
    }

    async fn act(&self, phase: usize, _side: Side) {
        side_by_side::gardenlet_acts::<Worker>(&self.client, phase, self.create_all()).await;
    }

    async fn settled(&self, phase: usize) {
        side_by_side::gardenlet_phase_done::<Worker>(&self.client, phase, NAMESPACES).await;
    }

    async fn clean(&self) {
        let (client, namespaces) = (&self.client, &self.namespaces);
        side_by_side::delete_all_in::<Worker>(client, namespaces, |_| false).await;
        side_by_side::delete_all_in::<MachineDeployment>(client, namespaces, |_| false).await;
        side_by_side::delete_all_in::<MachineSet>(client, namespaces, |_| false).await;
        side_by_side::delete_all_in::<Machine>(client, namespaces, |_| false).await;
        side_by_side::delete_all_in::<MachineClass>(client, namespaces, |_| false).await;
        let fixture = |name: &str| {
            name == CLOUDPROVIDER || POOLS.iter().any(|(pool, _)| name == user_data_secret(pool))
        };
        side_by_side::delete_all_in::<Secret>(client, namespaces, fixture).await;
    }
}

/// What gardenlet puts into a shoot namespace before the Worker: the Cluster, the
/// `cloudprovider` Secret (provider-local's form: a kubeconfig of the cluster its machines go
/// to, here the seed) and each pool's user data.
async fn prepare_namespace(client: &Client, kubeconfig: &str, namespace: &str) {
    use base64::Engine;
    support::create_namespace(client, namespace).await;
    let mut cluster = serde_json::to_value(fixtures::cluster_with_pools(
        namespace,
        &POOLS.map(|(p, _)| p),
    ))
    .unwrap();
    // A Shoot as the API server defaults it: provider-local's Worker reads its IP families.
    cluster["spec"]["shoot"]["spec"]["networking"] =
        json!({"type": "calico", "nodes": "10.10.0.0/16", "ipFamilies": ["IPv4"]});
    Api::<Cluster>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(cluster).unwrap(),
        )
        .await
        .unwrap();
    let encode = |data: &[u8]| base64::engine::general_purpose::STANDARD.encode(data);
    let secrets = Api::<Secret>::namespaced(client.clone(), namespace);
    let mut objects = vec![json!({
        "metadata": {"name": CLOUDPROVIDER, "namespace": namespace},
        "data": {"kubeconfig": encode(kubeconfig.as_bytes())}
    })];
    for (pool, _) in POOLS {
        objects.push(json!({
            "metadata": {"name": user_data_secret(pool), "namespace": namespace},
            "data": {"cloud_config": encode(format!("#!/bin/bash\necho {pool}\n").as_bytes())}
        }));
    }
    for object in objects {
        let secret: Secret = serde_json::from_value(object).unwrap();
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }
}

#[tokio::main]
async fn main() {
    if !support::benchmarks::invoked_by_cargo_bench() {
        return;
    }
    support::enable_audit_log();
    // Gardener's and MCM's own CRDs, as a seed has them.
    let env = support::env_with(Crds::Upstream).await;
    let assets = gardener_extension_node::devenv::resolve_assets(None, &support::repo_root())
        .expect("envtest binaries");

    let mut namespaces = Vec::new();
    let mut machine_controllers = Vec::new();
    for i in 0..NAMESPACES {
        let namespace = format!("shoot--bench--{i:02}");
        prepare_namespace(&env.client, &env.kubeconfig, &namespace).await;
        // What gardenlet runs in every shoot namespace: MCM core and the provider's machine
        // controller (provider-local's, the driver of Worker type `local`). No shoot here:
        // no machine is created, so none has to join one.
        machine_controllers.push(MachineControllers::start(
            &Targets {
                assets: &assets,
                seed_kubeconfig: &env.kubeconfig,
                shoot_kubeconfig: None,
                namespace: &namespace,
            },
            Driver::ProviderLocal,
        ));
        namespaces.push(namespace);
    }
    let workload = Workers {
        client: env.client.clone(),
        namespaces,
    };
    let side_by_side::Comparison {
        ours,
        peer: figures,
        peer_flags,
        ours_flags,
    } = side_by_side::contest(
        &workload,
        &env.client,
        &env.kubeconfig,
        &side_by_side::Contest {
            section: SECTION,
            peer: Peer::ProviderLocal,
            ours_flags: &["--controllers=worker"],
            workers: WORKERS,
            runs: RUNS,
            quiet: QUIET,
            periodic: side_by_side::is_lease_request,
        },
    )
    .await;
    drop(machine_controllers);

    let peer = Peer::ProviderLocal.binary();
    let tables = side_by_side::render_tables(&PHASES, peer, &ours, &figures, Some(STEADY_STATE));
    let steady_404 = ours.phases[STEADY_STATE].not_found;
    let section = format!(
        "## Worker: {NAMESPACES} Workers of {DEPLOYMENTS} MachineDeployments, beside \
         provider-local's Worker controller\n\n\
         Command: `cargo bench --bench worker_side_by_side` (operator built in the bench \
         profile; the peer gardener-extension-provider-local of gardener v1.149.3, built by \
         `hack/peers.sh` from the Go module proxy with the dependency versions of the other Go \
         components; real kube-apiserver {kube} + etcd on loopback with Gardener's and MCM's \
         CRDs; {cores} cores). Each of the {NAMESPACES} shoot namespaces has a Cluster, \
         gardenlet's `cloudprovider` Secret and the user data of two pools, and runs what \
         gardenlet runs there: the real machine-controller-manager v0.62.1 (MCM core) and \
         provider-local's machine controller, each with leader election. Each namespace gets \
         one Worker of type `local` with two autoscaled pools over 3 zones at their minimum of \
         0 machines (so {DEPLOYMENTS} MachineClasses, class Secrets and MachineDeployments; MCM \
         core makes a MachineSet of each and reports the deployments available; what booting \
         machines cost is in the section \"Machines\"). In one sitting the two run alternately, \
         {RUNS} runs each (ours, peer, ours, peer, …), each from a fresh process, with every \
         Worker and machine object removed between runs. A phase's time runs from gardenlet's \
         first write (the bench plays gardenlet) until every Worker passes gardenlet's \
         readiness check (or is gone); its requests are the contender's (`User-Agent`) in \
         kube-apiserver's audit log from then until it has sent nothing but periodic requests \
         (both heartbeats' Lease) for {quiet:?}; CPU is the contender's user + system time over \
         the same span, kube-apiserver CPU the API server's (it also serves the {mcm} MCM \
         processes, alike for both). Figures are medians of the runs.\n\n\
         Flags: ours `{ours_flags}`; the peer {peer_flags} (its client settings: QPS 100, \
         burst 130, set in its code). Both run their Worker controller with {WORKERS} workers, \
         and a heartbeat; the peer's other controllers (control plane, infrastructure, health \
         checks, …) are off, as they reconcile kinds the bench does not create.\n\n\
         {provenance}\n\n\
         {tables}\n\
         No requests answered 404 in steady state (the reconcile phase): {steady_404} \
         ({steady_met}).\n\n\
         What the two do differently: the peer reads from informer caches of every Cluster, \
         Secret, MachineClass, MachineDeployment, MachineSet and Machine of the seed (their \
         lists and watches come at its start, outside the phases, and its memory holds them), \
         and patches every class secret, class and deployment on every reconcile; ours reads \
         with namespaced GETs and lists (the Cluster, the user data, the machine objects while \
         it waits) and writes only what differs (docs/architecture.md, \"Reads from caches, \
         writes only of changes\"). Both poll a rollout every 5 s.\n\n\
         Measured on {date}.\n{stored}",
        kube = "v1.36.3",
        cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        mcm = 2 * NAMESPACES,
        quiet = QUIET,
        ours_flags = ours_flags.join(" "),
        peer_flags = side_by_side::described_flags(&peer_flags),
        provenance = figures.provenance(peer),
        steady_met = if steady_404 == 0.0 { "met" } else { "missed" },
        date = ours.date,
        stored = figures.stored(),
    );
    println!("{section}");
    support::benchmarks::write_section(SECTION, &section);
}
