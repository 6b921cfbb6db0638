//! Benchmark: 200 OperatingSystemConfigs (gardenlet's pairs per worker pool: `provision` and
//! `reconcile`) in 50 shoot namespaces on a real kube-apiserver, through create, reconcile
//! (gardenlet annotates all) and delete; the operator (`--controllers=operatingsystemconfig`)
//! and gardener-extension-os-gardenlinux (the Go peer, built by `hack/peers.sh`) measured in
//! the same run, alternating, on the same kube-apiserver (`bench_support::side_by_side`). Writes
//! its section of `docs/benchmarks.md`.
//!
//! Run: `cargo bench --bench operatingsystemconfig` (release build of the operator).

#![allow(clippy::unwrap_used, clippy::panic, dead_code)] // a measuring tool, not a controller

#[path = "bench_support/mod.rs"]
mod bench_support;
#[path = "../test/support/mod.rs"]
mod support;

use std::time::Duration;

use bench_support::peer::Peer;
use bench_support::side_by_side::{self, Side, Workload};
use gardener_extension_node::api::{Cluster, ManagedResource, OperatingSystemConfig};
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::{Api, Client};
use support::{Crds, fixtures};

const NAMESPACES: usize = 50;
/// Worker pools per shoot and their node-agent keys (`gardener-node-agent-<pool>-<hash>`).
const POOLS: [(&str, &str); 2] = [
    ("worker-a", "gardener-node-agent-worker-a-0123456789abcdef"),
    ("worker-b", "gardener-node-agent-worker-b-fedcba9876543210"),
];
/// Per pool gardenlet's provision OSC `<key>-init` and reconcile OSC `<key>-original`.
const TOTAL: usize = NAMESPACES * POOLS.len() * 2;
/// Runs per side.
const RUNS: usize = 3;
/// How long a contender must have been silent before a phase's count is closed.
const QUIET: Duration = Duration::from_secs(3);
/// `--max-concurrent-reconciles` of both (ours' default, the peer's chart's).
const WORKERS: usize = 5;
const SECTION: &str = "operatingsystemconfig";
const PHASES: [(&str, &str); 3] = side_by_side::GARDENLET_PHASES;
/// The phase in which nothing changes but gardenlet's annotation.
const STEADY_STATE: usize = 1;
/// The OSC type ours serves (`--os-types` default `debian,ubuntu`).
const OURS_TYPE: &str = "debian";
/// The OSC type the peer serves.
const PEER_TYPE: &str = "gardenlinux";
/// gardenlet's ManagedResource that ships the node-agent secrets in a current seed.
const GARDENLET_MR: &str = fixtures::GARDENLET_NODE_AGENT_MR;
/// The Secret the fixture's `secretRef` file reads.
const FILE_SECRET: &str = "example-secret";

/// The OSCs of the bench, as gardenlet handles them.
struct OperatingSystemConfigs {
    client: Client,
    namespaces: Vec<String>,
}

/// gardenlet's OSC of `purpose` for `pool`, of `type_`, with the reconcile annotation.
fn osc(
    namespace: &str,
    pool: &str,
    key: &str,
    purpose: &str,
    type_: &str,
) -> OperatingSystemConfig {
    let mut osc = fixtures::gardenlet_osc(namespace, pool, key, purpose);
    osc.spec.default.type_ = type_.to_string();
    osc
}

impl OperatingSystemConfigs {
    /// gardenlet creates every OSC with the reconcile annotation, of the type `side` serves.
    async fn create_all(&self, side: Side) {
        let type_ = match side {
            Side::Ours => OURS_TYPE,
            Side::Peer => PEER_TYPE,
        };
        let creates = self.namespaces.iter().flat_map(|namespace| {
            POOLS.iter().flat_map(move |(pool, key)| {
                ["provision", "reconcile"].map(|purpose| {
                    let api: Api<OperatingSystemConfig> =
                        Api::namespaced(self.client.clone(), namespace);
                    let object = osc(namespace, pool, key, purpose, type_);
                    async move {
                        api.create(&PostParams::default(), &object).await.unwrap();
                    }
                })
            })
        });
        futures::future::join_all(creates).await;
    }
}

impl Workload for OperatingSystemConfigs {
    fn phases(&self) -> &[(&'static str, &'static str)] {
        &PHASES
    }

    async fn act(&self, phase: usize, side: Side) {
        side_by_side::gardenlet_acts::<OperatingSystemConfig>(
            &self.client,
            phase,
            self.create_all(side),
        )
        .await;
    }

    async fn settled(&self, phase: usize) {
        side_by_side::gardenlet_phase_done::<OperatingSystemConfig>(&self.client, phase, TOTAL)
            .await;
    }

    async fn clean(&self) {
        side_by_side::delete_all_in::<OperatingSystemConfig>(
            &self.client,
            &self.namespaces,
            |_| false,
        )
        .await;
        side_by_side::delete_all_in::<ManagedResource>(&self.client, &self.namespaces, |name| {
            name == GARDENLET_MR
        })
        .await;
        side_by_side::delete_all_in::<Secret>(&self.client, &self.namespaces, |name| {
            name == FILE_SECRET
        })
        .await;
    }
}

/// The fixture Cluster with both pools of [`POOLS`].
fn cluster(namespace: &str) -> Cluster {
    fixtures::cluster_with_pools(namespace, &POOLS.map(|(pool, _)| pool))
}

#[tokio::main]
async fn main() {
    if !support::benchmarks::invoked_by_cargo_bench() {
        return;
    }
    support::enable_audit_log();
    // Gardener's own CRDs, as a seed has them: the peer reads and writes them too.
    let env = support::env_with(Crds::Upstream).await;

    let mut namespaces = Vec::new();
    for i in 0..NAMESPACES {
        let namespace = format!("shoot--bench--{i:02}");
        support::create_namespace(&env.client, &namespace).await;
        Api::<Cluster>::all(env.client.clone())
            .create(&PostParams::default(), &cluster(&namespace))
            .await
            .unwrap();
        let secret: Secret = serde_json::from_value(fixtures::osc_file_secret_json(
            &namespace,
            "from a secret\n",
        ))
        .unwrap();
        Api::<Secret>::namespaced(env.client.clone(), &namespace)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        Api::<ManagedResource>::namespaced(env.client.clone(), &namespace)
            .create(
                &PostParams::default(),
                &fixtures::gardenlet_node_agent_managed_resource(&namespace),
            )
            .await
            .unwrap();
        namespaces.push(namespace);
    }
    let workload = OperatingSystemConfigs {
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
            peer: Peer::OsGardenlinux,
            ours_flags: &["--controllers=operatingsystemconfig"],
            workers: WORKERS,
            runs: RUNS,
            quiet: QUIET,
            periodic: side_by_side::is_lease_request,
        },
    )
    .await;

    let peer = Peer::OsGardenlinux.binary();
    let tables = side_by_side::render_tables(&PHASES, peer, &ours, &figures, Some(STEADY_STATE));
    let peer_flags = side_by_side::described_flags(&peer_flags);
    let targets = match figures.summary() {
        Some(theirs) => {
            let all = PHASES.len();
            let (o, t) = (&ours.phases[all], &theirs.phases[all]);
            let ratio = o.requests / t.requests.max(1.0);
            format!(
                "≤ 0.5× the peer's requests over all phases (issue #30): {ratio:.2}× ({}); ",
                if ratio <= 0.5 { "met" } else { "missed" }
            )
        }
        None => String::new(),
    };
    let steady_404 = ours.phases[STEADY_STATE].not_found;

    let section = format!(
        "## OperatingSystemConfig: {TOTAL} objects in {NAMESPACES} namespaces, beside \
         gardener-extension-os-gardenlinux\n\n\
         Command: `cargo bench --bench operatingsystemconfig` (operator built in the bench \
         profile; the peer built from its published source by `hack/peers.sh`, bdea3804 = \
         v0.47.0-6, gardener v1.149.3; real kube-apiserver {kube} + etcd on loopback with \
         Gardener's CRDs; {cores} cores). Each namespace has a Cluster with two worker pools \
         and, per pool, gardenlet's pair of OSCs: `<key>-init` (purpose `provision`) and \
         `<key>-original` (purpose `reconcile`), both the fixture OSC of the tests (a unit with \
         a drop-in, inline, base64, secret-referenced and unencoded files); the namespace \
         also holds the Secret the `secretRef` file reads and gardenlet's ManagedResource \
         `{GARDENLET_MR}` as a seed with gardenlet v1.149.3 has it (so ours, with the default \
         `--node-agent-secrets=auto`, leaves shipping the node-agent secrets to gardenlet, as \
         the peer does). The OSCs differ only in `spec.type`: `{OURS_TYPE}` for ours (it serves \
         `--os-types`, default `debian,ubuntu`), `{PEER_TYPE}` for the peer. In one sitting \
         the two run alternately, {RUNS} runs each (ours, peer, ours, peer, …), each from a \
         fresh process, with every OSC, their Secrets and ManagedResources removed between \
         runs. A phase's time runs from gardenlet's first write (the bench plays gardenlet) \
         until every OSC passes gardenlet's readiness check (or is gone); its requests are \
         the contender's (`User-Agent`) in kube-apiserver's audit log from then until it has \
         sent nothing but periodic requests (below) for {quiet:?}, CPU is the contender's user + system time over the same \
         span, kube-apiserver CPU the API server's (it also serves the bench's writes and its \
         watch of the objects, alike for both, and its own work over the phase's span, so a \
         longer phase costs more). Figures are medians of the runs. The periodic \
         requests, both heartbeats (their Lease), count in the phase they fall into but do \
         not hold it open; the table gives them apart.\n\n\
         Flags: ours `{ours_flags}`; the peer {peer_flags} (its chart's client settings: QPS \
         100, burst 130, set in its code). Both run their controller with {WORKERS} \
         workers, and a heartbeat.\n\n\
         {provenance}\n\n\
         {tables}\n\
         Targets: {targets}no requests answered 404 in steady state (the reconcile phase): \
         {steady_404} ({steady_met}).\n\n\
         Measured on {date}.\n{stored}",
        kube = "v1.36.3",
        cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        quiet = QUIET,
        ours_flags = ours_flags.join(" "),
        provenance = figures.provenance(peer),
        steady_met = if steady_404 == 0.0 { "met" } else { "missed" },
        date = ours.date,
        stored = figures.stored(),
    );
    println!("{section}");
    support::benchmarks::write_section(SECTION, &section);
}
