//! Benchmark: 200 gVisor ContainerRuntimes in 50 shoot namespaces on a real kube-apiserver,
//! through the three phases of their life: create, reconcile (gardenlet annotates all),
//! delete; the operator and gardener-extension-runtime-gvisor (the Go peer, built by
//! `hack/peers.sh`) measured in the same run, alternating, on the same kube-apiserver
//! (`bench_support::side_by_side`). Per phase: the time until every object passes gardenlet's
//! readiness check (or is gone), the requests (kube-apiserver's audit log, by `User-Agent`),
//! CPU time and the kube-apiserver's CPU time; per run the peak RSS. Writes its section of
//! `docs/benchmarks.md`.
//!
//! Run: `cargo bench --bench containerruntime` (release build of the operator).

#![allow(clippy::unwrap_used, clippy::panic, dead_code)] // a measuring tool, not a controller

#[path = "bench_support/mod.rs"]
mod bench_support;
#[path = "../test/support/mod.rs"]
mod support;

use std::time::Duration;

use bench_support::peer::Peer;
use bench_support::side_by_side::{self, Side, Workload};
use gardener_extension_node::api::{Cluster, ContainerRuntime, ManagedResource};
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;
use support::{Crds, fixtures};

const NAMESPACES: usize = 50;
const PER_NAMESPACE: usize = 4;
const TOTAL: usize = NAMESPACES * PER_NAMESPACE;
/// Runs per side.
const RUNS: usize = 3;
/// How long a contender must have been silent before a phase's count is closed.
const QUIET: Duration = Duration::from_secs(3);
/// `--max-concurrent-reconciles` of both (ours' default, the peer's chart's).
const WORKERS: usize = 5;
const SECTION: &str = "containerruntime";
const PHASES: [(&str, &str); 3] = side_by_side::GARDENLET_PHASES;

/// The ContainerRuntimes of the bench, as gardenlet handles them.
struct ContainerRuntimes {
    client: Client,
    namespaces: Vec<String>,
}

impl ContainerRuntimes {
    /// gardenlet creates every object with the reconcile annotation.
    async fn create_all(&self) {
        let creates = self.namespaces.iter().flat_map(|namespace| {
            (0..PER_NAMESPACE).map(|p| {
                let api: Api<ContainerRuntime> = Api::namespaced(self.client.clone(), namespace);
                let mut cr = fixtures::container_runtime_json(namespace, &format!("pool-{p}"));
                cr["metadata"]["annotations"] = json!({"gardener.cloud/operation": "reconcile"});
                async move {
                    api.create(&PostParams::default(), &serde_json::from_value(cr).unwrap())
                        .await
                        .unwrap();
                }
            })
        });
        futures::future::join_all(creates).await;
    }
}

impl Workload for ContainerRuntimes {
    fn phases(&self) -> &[(&'static str, &'static str)] {
        &PHASES
    }

    async fn act(&self, phase: usize, _side: Side) {
        side_by_side::gardenlet_acts::<ContainerRuntime>(&self.client, phase, self.create_all())
            .await;
    }

    async fn settled(&self, phase: usize) {
        side_by_side::gardenlet_phase_done::<ContainerRuntime>(&self.client, phase, TOTAL).await;
    }

    async fn clean(&self) {
        side_by_side::delete_all_in::<ContainerRuntime>(&self.client, &self.namespaces, |_| false)
            .await;
        side_by_side::delete_all_in::<ManagedResource>(&self.client, &self.namespaces, |_| false)
            .await;
        side_by_side::delete_all_in::<Secret>(&self.client, &self.namespaces, |_| false).await;
    }
}

/// The requests that come periodically whatever the phase: both sides' heartbeat (its Lease)
/// and the peer's health check, which writes every ContainerRuntime's status with an update
/// every 30 s (ours patches status and has no such check).
fn periodic(key: &str) -> bool {
    side_by_side::is_lease_request(key) || key.starts_with("update containerruntimes/status")
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
            .create(&PostParams::default(), &fixtures::cluster(&namespace))
            .await
            .unwrap();
        namespaces.push(namespace);
    }
    let workload = ContainerRuntimes {
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
            peer: Peer::RuntimeGvisor,
            ours_flags: &[
                // The peer does not uninstall gVisor from the nodes, and no
                // gardener-resource-manager runs here to roll an uninstall DaemonSet out: the
                // same work is a deletion without it.
                "--controllers=containerruntime",
                "--gvisor-uninstall-timeout-seconds=0",
            ],
            workers: WORKERS,
            runs: RUNS,
            quiet: QUIET,
            periodic,
        },
    )
    .await;
    let peer = Peer::RuntimeGvisor.binary();
    let tables = side_by_side::render_tables(&PHASES, peer, &ours, &figures, None);
    let peer_flags = side_by_side::described_flags(&peer_flags);
    let create = &ours.phases[0];
    let requests_target = match figures.summary() {
        Some(theirs) => {
            let worst = (0..PHASES.len())
                .map(|i| {
                    let (o, t) = (&ours.phases[i], &theirs.phases[i]);
                    (o.requests - o.periodic) / (t.requests - t.periodic).max(1.0)
                })
                .fold(0.0, f64::max);
            format!(
                "{:.2}× in the worst phase, without the periodic requests ({})",
                worst,
                if worst <= 0.5 { "met" } else { "missed" }
            )
        }
        None => "not comparable in this run".to_string(),
    };

    let all = PHASES.len();
    let rate = match figures.summary() {
        Some(theirs) => format!(
            "{:.1} requests/s over all phases here",
            theirs.phases[all].requests / theirs.phases[all].time_s.max(0.001)
        ),
        None => "about 10 requests/s".to_string(),
    };
    let section = format!(
        "## ContainerRuntime (gVisor): {TOTAL} objects in {NAMESPACES} namespaces, beside \
         gardener-extension-runtime-gvisor\n\n\
         Command: `cargo bench --bench containerruntime` (operator built in the bench profile; \
         the peer built from its published source by `hack/peers.sh`, 0f375df3 = v0.44.0-5, \
         gardener v1.149.3; real kube-apiserver {kube} + etcd on loopback with Gardener's \
         CRDs; {cores} cores). In one sitting the two run alternately, {RUNS} runs each (ours, \
         peer, ours, peer, …), each from a fresh process over the same {TOTAL} \
         ContainerRuntimes, with every object, ManagedResource and Secret removed between \
         runs. A phase's time runs from gardenlet's first write (the bench plays gardenlet) \
         until every object passes gardenlet's readiness check (or is gone); its requests \
         are the contender's (`User-Agent`) in kube-apiserver's audit log from then until \
         it has sent nothing but periodic requests (below) for {quiet:?}, CPU is the contender's user + system time over \
         the same span, kube-apiserver CPU the API server's (it also serves the bench's \
         writes and its watch of the objects, alike for both, and its own work over the \
         phase's span, so a longer phase costs more). Figures are medians of the runs. \
         Periodic requests count in the phase they fall into but do not hold it open: both \
         heartbeats (their Lease) and the peer's health check, which updates the status of \
         every ContainerRuntime every 30 s whatever happens (`update containerruntimes/status`; \
         ours patches status and has no such check); the table gives them apart and the \
         requests without them.\n\n\
         Flags: ours `{ours_flags}` (`--gvisor-uninstall-timeout-seconds=0` as the peer has \
         no uninstall); the peer {peer_flags}. The peer has no client rate flags: its \
         client runs with client-go's defaults, QPS 5 and burst 10, which bound it ({rate}); \
         ours has no client-side limiter. Both run their controller with \
         {WORKERS} workers; the peer also runs its health-check and heartbeat controllers, \
         ours its heartbeat.\n\n\
         {provenance}\n\n\
         {tables}\n\
         Targets: ≤ 0.5× the peer's requests in each phase (issue #17): {requests_target}; \
         first create → all ready < 20 s: {create_time:.2} s; peak RSS < 30 MiB: \
         {peak:.1} MiB.\n\n\
         Before issue #17 (same bench, 2026-12-01, the peer's figures then measured \
         separately): 3,112 / 2,400 / 3,393 requests in 5.98 s / 6.05 s / 4.95 s, peak RSS \
         15.1 MiB. Every read was a GET or a list: per run 2 secret GETs, a GET of the \
         Cluster and of the object, a list of ContainerRuntimes and one of \
         ManagedResources; per deletion 4 ManagedResource GETs. Reads now come from \
         reflector stores, and a write goes out only for a change (docs/architecture.md, \
         \"Reads from caches, writes only of changes\"). The floor of the create phase is \
         4.5 requests per object: the annotation-and-finalizer patch, the pool's secret and \
         MR, a quarter of the shared ones and the Succeeded status. A first create publishes \
         no `Reconciled` event (docs/contract.md, \"Reconcile\").\n\n\
         Measured on {date}.\n{stored}",
        kube = "v1.36.3",
        cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        quiet = QUIET,
        ours_flags = ours_flags.join(" "),
        provenance = figures.provenance(peer),
        create_time = create.time_s,
        peak = ours.peak_rss_mib,
        date = ours.date,
        stored = figures.stored(),
    );
    println!("{section}");
    support::benchmarks::write_section(SECTION, &section);
}
