//! Benchmark: the scale curves (`make bench-scale`). gVisor ContainerRuntimes and
//! OperatingSystemConfigs at 200, 2,000 and 5,000 objects (4 per shoot namespace: 4 pools, or
//! gardenlet's two OSCs of 2 pools) on one real kube-apiserver. Each point gets a fresh
//! operator (`OPERATOR_BINARY`, which `make bench-scale` sets to the image's static build;
//! else the bench build), and each phase is timed until every object passes gardenlet's
//! readiness check (or is gone):
//!
//! 1. create;
//! 2. reconcile (gardenlet annotates all);
//! 3. restart at the largest point only: the operator is killed and started again. Until
//!    `/readyz`, and what it sends for unchanged objects;
//! 4. delete.
//!
//! Per point it reports:
//! - requests per object (the operator's `User-Agent` in the audit log, 404 and 409 counted
//!   apart);
//! - the operator's peak RSS (VmHWM) and RSS per object;
//! - RSS after every object is deleted against RSS at start;
//! - CPU seconds of the operator and of kube-apiserver per phase;
//! - the most and mean reconciles in flight (`controller_active_workers`, sampled every
//!   250 ms).
//!
//! At 2,000 ContainerRuntimes the create phase also runs with 1, 5 and 20 workers, so the
//! curve shows whether the workers or the API server bound the throughput. Writes the sections
//! `scale` and `scale-operatingsystemconfig` of `docs/benchmarks.md`.
//!
//! Run: `make bench-scale`. `BENCH_SCALE_POINTS=200,2000` measures fewer points and
//! `BENCH_SCALE_KINDS=containerruntime` one kind (the sections say what ran).

#![allow(clippy::unwrap_used, clippy::panic, dead_code)] // a measuring tool, not a controller

#[path = "bench_support/mod.rs"]
mod bench_support;
#[path = "../test/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bench_support::side_by_side;
use futures::StreamExt;
use gardener_extension_node::api::{
    Cluster, ContainerRuntime, ManagedResource, OperatingSystemConfig,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde_json::json;
use support::audit::{self, AuditLog, Mix};
use support::operator::OperatorProcess;
use support::{fixtures, wait_for};

const PER_NAMESPACE: usize = 4;
const POINTS: [usize; 3] = [200, 2_000, 5_000];
/// Where the worker counts are compared, and with which counts.
const CONCURRENCY_AT: usize = 2_000;
const WORKERS: [usize; 3] = [1, 5, 20];
/// The operator's default `--max-concurrent-reconciles`.
const DEFAULT_WORKERS: usize = 5;
/// How long the operator must have been silent before a phase's count is closed.
const QUIET: Duration = Duration::from_secs(3);
/// Requests sent in parallel by the bench's own client (creates, annotations, deletes).
const CLIENT_PARALLEL: usize = 32;
/// How long the operator idles after the deletion before its RSS is taken again: longer than
/// the HTTP client keeps an idle connection (90 s) and its buffers.
const IDLE: Duration = Duration::from_secs(100);
/// The longest any phase may take.
const PHASE_TIMEOUT: Duration = Duration::from_secs(900);

/// The operator's requests: its `User-Agent` names the subcommand.
fn from_operator(user_agent: &str) -> bool {
    user_agent.starts_with("gardener-extension-node/") && user_agent.ends_with("(operator)")
}

/// One phase as measured.
#[derive(Debug, Clone, Default)]
struct Phase {
    seconds: f64,
    requests: Mix,
    operator_cpu: f64,
    apiserver_cpu: f64,
    in_flight: InFlight,
}

/// Reconciles in flight, sampled from the operator's metrics.
#[derive(Debug, Clone, Copy, Default)]
struct InFlight {
    most: u64,
    mean: f64,
}

/// One point of the curve.
#[derive(Debug, Clone, Default)]
struct Point {
    objects: usize,
    create: Phase,
    reconcile: Phase,
    restart: Option<Restart>,
    delete: Phase,
    rss_start_kib: u64,
    peak_kib: u64,
    rss_after_delete_kib: u64,
    /// RSS once the operator has been idle for [`IDLE`] after the deletion (curve points only).
    rss_idle_kib: Option<u64>,
}

/// The restart at the largest point.
#[derive(Debug, Clone, Default)]
struct Restart {
    ready_seconds: f64,
    requests: Mix,
}

fn writes(mix: &Mix) -> usize {
    mix.iter()
        .filter(|(key, _)| {
            ["create ", "update ", "patch ", "delete "]
                .iter()
                .any(|verb| key.starts_with(verb))
        })
        .map(|(_, n)| n)
        .sum()
}

/// Samples `gardener_extension_node_controller_active_workers{kind="<kind>"}` every
/// 250 ms until stopped.
fn sample_in_flight(
    address: String,
    kind: Kind,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<InFlight> {
    let metric = format!("controller_active_workers{{kind=\"{}\"}} ", kind.name());
    tokio::spawn(async move {
        let (mut most, mut sum, mut samples) = (0u64, 0u64, 0u64);
        while !stop.load(Ordering::SeqCst) {
            if let Some((200, body)) = OperatorProcess::http_get_at(&address, "/metrics").await
                && let Some(value) = body
                    .lines()
                    .find_map(|line| line.split_once(metric.as_str()).map(|(_, value)| value))
                && let Ok(value) = value.trim().parse::<u64>()
            {
                most = most.max(value);
                sum += value;
                samples += 1;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        InFlight {
            most,
            mean: if samples == 0 {
                0.0
            } else {
                sum as f64 / samples as f64
            },
        }
    })
}

/// The measurement around one phase: CPU of both processes, reconciles in flight, requests.
struct Meter<'a> {
    operator: &'a OperatorProcess,
    log: &'a mut AuditLog,
    started: Instant,
    operator_cpu: f64,
    apiserver_cpu: f64,
    stop: Arc<AtomicBool>,
    sampler: tokio::task::JoinHandle<InFlight>,
}

impl<'a> Meter<'a> {
    fn start(operator: &'a OperatorProcess, kind: Kind, log: &'a mut AuditLog) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        Meter {
            sampler: sample_in_flight(operator.http_address.clone(), kind, stop.clone()),
            operator_cpu: operator.cpu_seconds().unwrap_or_default(),
            apiserver_cpu: apiserver_cpu(),
            started: Instant::now(),
            operator,
            log,
            stop,
        }
    }

    /// Ends the phase once the operator has been quiet (its time ends at `done`).
    async fn finish(self, done: Instant) -> Phase {
        let seconds = done.duration_since(self.started).as_secs_f64();
        let requests = self
            .log
            .take_coded_when_quiet(from_operator, QUIET, |_| false)
            .await;
        self.stop.store(true, Ordering::SeqCst);
        let in_flight = self.sampler.await.unwrap_or_default();
        Phase {
            seconds,
            requests,
            operator_cpu: self.operator.cpu_seconds().unwrap_or_default() - self.operator_cpu,
            apiserver_cpu: apiserver_cpu() - self.apiserver_cpu,
            in_flight,
        }
    }
}

fn apiserver_cpu() -> f64 {
    support::apiserver_pid()
        .and_then(support::process::cpu_seconds)
        .unwrap_or_default()
}

/// Starts an operator with `workers` and waits for `/readyz`; returns it and the seconds.
async fn start_operator(kubeconfig: &str, kind: Kind, workers: usize) -> (OperatorProcess, f64) {
    let workers = format!("--max-concurrent-reconciles={workers}");
    let started = Instant::now();
    let operator = OperatorProcess::start(
        kubeconfig,
        &[
            kind.controllers(),
            "--gvisor-uninstall-timeout-seconds=0",
            &workers,
        ],
    );
    wait_ready(&operator).await;
    (operator, started.elapsed().as_secs_f64())
}

async fn wait_ready(operator: &OperatorProcess) {
    wait_for("operator ready", Duration::from_secs(120), || async {
        match operator.http_get("/readyz").await {
            Some((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// The kind a curve measures, and what gardenlet does with its objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// gVisor ContainerRuntimes, one per pool (4 pools per shoot).
    ContainerRuntime,
    /// gardenlet's OperatingSystemConfig pairs (`provision` and `reconcile`) of 2 pools per
    /// shoot, with gardenlet's node-agent ManagedResource in the namespace as a current seed
    /// has it (so ours ships no node-agent secret; no gardener-resource-manager runs here).
    OperatingSystemConfig,
}

/// Worker pools of an OSC shoot and their node-agent keys.
const OSC_POOLS: [(&str, &str); 2] = [
    ("worker-a", "gardener-node-agent-worker-a-0123456789abcdef"),
    ("worker-b", "gardener-node-agent-worker-b-fedcba9876543210"),
];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::ContainerRuntime => "ContainerRuntime",
            Kind::OperatingSystemConfig => "OperatingSystemConfig",
        }
    }

    fn section(self) -> &'static str {
        match self {
            Kind::ContainerRuntime => "scale",
            Kind::OperatingSystemConfig => "scale-operatingsystemconfig",
        }
    }

    fn controllers(self) -> &'static str {
        match self {
            Kind::ContainerRuntime => "--controllers=containerruntime",
            Kind::OperatingSystemConfig => "--controllers=operatingsystemconfig",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Kind::ContainerRuntime => "cr",
            Kind::OperatingSystemConfig => "osc",
        }
    }

    /// What a shoot namespace has before the objects come: the Cluster, and for OSCs the
    /// Secret their `secretRef` file reads and gardenlet's node-agent ManagedResource.
    async fn prepare(self, client: &Client, namespace: &str) {
        match self {
            Kind::ContainerRuntime => {
                create(Api::all(client.clone()), fixtures::cluster(namespace)).await;
            }
            Kind::OperatingSystemConfig => {
                let pools: Vec<&str> = OSC_POOLS.iter().map(|(pool, _)| *pool).collect();
                create(
                    Api::all(client.clone()),
                    fixtures::cluster_with_pools(namespace, &pools),
                )
                .await;
                let secret: Secret = serde_json::from_value(fixtures::osc_file_secret_json(
                    namespace,
                    "from a secret\n",
                ))
                .unwrap();
                create(in_namespace(client, namespace), secret).await;
                let gardenlets = fixtures::gardenlet_node_agent_managed_resource(namespace);
                create(in_namespace(client, namespace), gardenlets).await;
            }
        }
    }

    /// Removes what [`Kind::prepare`] created (no namespace controller runs here, so the
    /// namespaces stay, empty).
    async fn clean(self, client: &Client, namespace: String) {
        let params = DeleteParams::default();
        let _ = Api::<Cluster>::all(client.clone())
            .delete(&namespace, &params)
            .await;
        if self == Kind::OperatingSystemConfig {
            let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
            let _ = secrets.delete("example-secret", &params).await;
            let mrs: Api<ManagedResource> = Api::namespaced(client.clone(), &namespace);
            let _ = mrs.delete(fixtures::GARDENLET_NODE_AGENT_MR, &params).await;
        }
    }

    /// gardenlet creates the objects of `namespace`, each with the reconcile annotation.
    async fn create_objects(self, client: &Client, namespace: &str) {
        match self {
            Kind::ContainerRuntime => {
                for pool in 0..PER_NAMESPACE {
                    let mut cr =
                        fixtures::container_runtime_json(namespace, &format!("pool-{pool}"));
                    cr["metadata"]["annotations"] =
                        json!({"gardener.cloud/operation": "reconcile"});
                    let cr: ContainerRuntime = serde_json::from_value(cr).unwrap();
                    create(in_namespace(client, namespace), cr).await;
                }
            }
            Kind::OperatingSystemConfig => {
                for (pool, key) in OSC_POOLS {
                    for purpose in ["provision", "reconcile"] {
                        let osc = fixtures::gardenlet_osc(namespace, pool, key, purpose);
                        create(in_namespace(client, namespace), osc).await;
                    }
                }
            }
        }
    }

    async fn annotate_all(self, client: &Client) {
        match self {
            Kind::ContainerRuntime => annotate_every::<ContainerRuntime>(client).await,
            Kind::OperatingSystemConfig => annotate_every::<OperatingSystemConfig>(client).await,
        }
    }

    async fn delete_all(self, client: &Client, namespaces: &[String]) {
        match self {
            Kind::ContainerRuntime => delete_in::<ContainerRuntime>(client, namespaces).await,
            Kind::OperatingSystemConfig => {
                delete_in::<OperatingSystemConfig>(client, namespaces).await
            }
        }
    }

    async fn wait_all_ready(self, client: &Client, total: usize) -> Instant {
        match self {
            Kind::ContainerRuntime => {
                side_by_side::wait_all_ready(&Api::<ContainerRuntime>::all(client.clone()), total)
                    .await
            }
            Kind::OperatingSystemConfig => {
                let all = Api::<OperatingSystemConfig>::all(client.clone());
                side_by_side::wait_all_ready(&all, total).await
            }
        }
        Instant::now()
    }

    async fn wait_all_gone(self, client: &Client) -> Instant {
        match self {
            Kind::ContainerRuntime => {
                side_by_side::wait_all_gone(&Api::<ContainerRuntime>::all(client.clone())).await
            }
            Kind::OperatingSystemConfig => {
                side_by_side::wait_all_gone(&Api::<OperatingSystemConfig>::all(client.clone()))
                    .await
            }
        }
        Instant::now()
    }
}

/// Creates `object` through `api`.
async fn create<K>(api: Api<K>, object: K)
where
    K: kube::Resource + Clone + serde::Serialize + DeserializeOwned + std::fmt::Debug,
{
    api.create(&PostParams::default(), &object).await.unwrap();
}

fn in_namespace<K>(client: &Client, namespace: &str) -> Api<K>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    Api::namespaced(client.clone(), namespace)
}

/// Creates the namespaces of a point (`shoot--scale<tag>--<i>`) with what `kind` needs.
async fn create_namespaces(client: &Client, kind: Kind, tag: &str, count: usize) -> Vec<String> {
    let names: Vec<String> = (0..count)
        .map(|i| format!("shoot--scale{tag}--{i:04}"))
        .collect();
    futures::stream::iter(names.clone())
        .for_each_concurrent(CLIENT_PARALLEL, |namespace| async move {
            support::create_namespace(client, &namespace).await;
            kind.prepare(client, &namespace).await;
        })
        .await;
    names
}

async fn create_objects(client: &Client, kind: Kind, namespaces: &[String]) {
    futures::stream::iter(namespaces)
        .for_each_concurrent(CLIENT_PARALLEL / PER_NAMESPACE, |namespace| {
            kind.create_objects(client, namespace)
        })
        .await;
}

/// gardenlet's shoot reconcile: the `reconcile` annotation with a timestamp on every object.
async fn annotate_every<K>(client: &Client)
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let timestamp = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let objects = Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    futures::stream::iter(objects)
        .for_each_concurrent(CLIENT_PARALLEL, |object| {
            let patch = json!({"metadata": {"annotations": {
                "gardener.cloud/operation": "reconcile",
                "gardener.cloud/timestamp": timestamp,
            }}});
            async move {
                let namespace = object.meta().namespace.clone().unwrap_or_default();
                let name = object.meta().name.clone().unwrap_or_default();
                Api::<K>::namespaced(client.clone(), &namespace)
                    .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .unwrap();
            }
        })
        .await;
}

async fn delete_in<K>(client: &Client, namespaces: &[String])
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    futures::stream::iter(namespaces.to_vec())
        .for_each_concurrent(CLIENT_PARALLEL, |namespace| async move {
            Api::<K>::namespaced(client.clone(), &namespace)
                .delete_collection(&DeleteParams::default(), &ListParams::default())
                .await
                .unwrap();
        })
        .await;
}

/// RSS once it has settled (two samples 2 s apart within 5 %), at most 20 s.
async fn settled_rss(operator: &OperatorProcess) -> u64 {
    let mut last = operator.rss_kib().unwrap_or_default();
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = operator.rss_kib().unwrap_or_default();
        if now.abs_diff(last) * 20 <= last.max(1) {
            return now;
        }
        last = now;
    }
    last
}

/// One point of the curve with `workers`; `restart` adds the restart phase.
async fn measure_point(
    env: &support::TestEnv,
    kind: Kind,
    objects: usize,
    workers: usize,
    restart: bool,
    curve: bool,
) -> Point {
    let tag = format!("{}{objects}w{workers}", kind.tag());
    let namespaces = create_namespaces(&env.client, kind, &tag, objects / PER_NAMESPACE).await;
    let (mut operator, _) = start_operator(&env.kubeconfig, kind, workers).await;
    let mut log = AuditLog::from_end(support::audit_log_path());
    log.take_when_quiet(from_operator, QUIET).await;
    let rss_start_kib = settled_rss(&operator).await;

    let meter = Meter::start(&operator, kind, &mut log);
    create_objects(&env.client, kind, &namespaces).await;
    let done = kind.wait_all_ready(&env.client, objects).await;
    let create = meter.finish(done).await;

    let meter = Meter::start(&operator, kind, &mut log);
    kind.annotate_all(&env.client).await;
    let done = kind.wait_all_ready(&env.client, objects).await;
    let reconcile = meter.finish(done).await;

    // The restart below starts a new process: its high-water mark counts from there.
    let peak_before_restart_kib = operator.peak_rss_kib().unwrap_or_default();
    let restart = if restart {
        operator.kill();
        log.take(|_| true);
        let started = Instant::now();
        operator.restart();
        wait_ready(&operator).await;
        let ready_seconds = started.elapsed().as_secs_f64();
        let requests = log
            .take_coded_when_quiet(from_operator, QUIET, |_| false)
            .await;
        Some(Restart {
            ready_seconds,
            requests,
        })
    } else {
        None
    };

    let meter = Meter::start(&operator, kind, &mut log);
    kind.delete_all(&env.client, &namespaces).await;
    let done = kind.wait_all_gone(&env.client).await;
    let delete = meter.finish(done).await;
    let rss_after_delete_kib = settled_rss(&operator).await;
    let rss_idle_kib = if curve {
        tokio::time::sleep(IDLE).await;
        Some(settled_rss(&operator).await)
    } else {
        None
    };
    let peak_kib = operator
        .peak_rss_kib()
        .unwrap_or_default()
        .max(peak_before_restart_kib);
    operator.kill();
    futures::stream::iter(namespaces)
        .for_each_concurrent(CLIENT_PARALLEL, |namespace| {
            kind.clean(&env.client, namespace)
        })
        .await;
    Point {
        objects,
        create,
        reconcile,
        restart,
        delete,
        rss_start_kib,
        peak_kib,
        rss_after_delete_kib,
        rss_idle_kib,
    }
}

/// The kinds to measure: `BENCH_SCALE_KINDS` (`containerruntime`, `operatingsystemconfig`,
/// comma-separated), both by default.
fn kinds() -> Vec<Kind> {
    let wanted = std::env::var("BENCH_SCALE_KINDS").unwrap_or_default();
    let all = [Kind::ContainerRuntime, Kind::OperatingSystemConfig];
    let chosen: Vec<Kind> = all
        .into_iter()
        .filter(|kind| {
            wanted
                .split(',')
                .any(|w| w.trim() == kind.name().to_lowercase())
        })
        .collect();
    if chosen.is_empty() {
        all.to_vec()
    } else {
        chosen
    }
}

fn points() -> Vec<usize> {
    std::env::var("BENCH_SCALE_POINTS")
        .ok()
        .map(|list| {
            list.split(',')
                .filter_map(|n| n.trim().parse().ok())
                .filter(|n: &usize| *n >= PER_NAMESPACE)
                .collect()
        })
        .filter(|list: &Vec<usize>| !list.is_empty())
        .unwrap_or_else(|| POINTS.to_vec())
}

/// Which operator binary ran, as the section says it.
fn operator_binary() -> String {
    match std::env::var("OPERATOR_BINARY") {
        Ok(path) if path.contains("-musl/release/") => {
            "the image's binary (static, musl, release profile)".to_string()
        }
        Ok(path) => format!(
            "`{}`",
            std::path::Path::new(&path)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ),
        Err(_) => "the bench build (glibc, release profile)".to_string(),
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn phase_cells(phase: &Phase, objects: usize) -> String {
    let total = audit::total(&phase.requests);
    format!(
        "{:.1} s | {:.2} | {} / {} | {:.1} s | {:.1} s | {} / {:.1}",
        phase.seconds,
        total as f64 / objects as f64,
        audit::answered(&phase.requests, 404),
        audit::answered(&phase.requests, 409),
        phase.operator_cpu,
        phase.apiserver_cpu,
        phase.in_flight.most,
        phase.in_flight.mean,
    )
}

fn render(kind: Kind, points: &[Point], concurrency: &[(usize, Phase)]) -> String {
    let mut curve = String::new();
    for point in points {
        let n = point.objects;
        for (name, phase) in [
            ("create → all ready", &point.create),
            ("reconcile → all ready", &point.reconcile),
            ("delete → all gone", &point.delete),
        ] {
            curve.push_str(&format!("| {n} | {name} | {} |\n", phase_cells(phase, n)));
        }
    }
    let mut memory = String::new();
    for point in points {
        let n = point.objects;
        let per_object = (point.peak_kib.saturating_sub(point.rss_start_kib)) as f64 / n as f64;
        let versus_start = |kib: u64| {
            let back = kib as f64 / point.rss_start_kib.max(1) as f64;
            format!("{:.1} MiB | {:+.0} %", mib(kib), (back - 1.0) * 100.0)
        };
        memory.push_str(&format!(
            "| {n} | {:.1} MiB | {:.1} MiB | {per_object:.1} KiB | {} | {} |\n",
            mib(point.rss_start_kib),
            mib(point.peak_kib),
            versus_start(point.rss_after_delete_kib),
            point.rss_idle_kib.map_or("— | —".to_string(), versus_start),
        ));
    }
    let mut workers = String::new();
    for (count, phase) in concurrency {
        workers.push_str(&format!(
            "| {count} | {} |\n",
            phase_cells(phase, CONCURRENCY_AT)
        ));
    }
    let workers = if workers.is_empty() {
        String::new()
    } else {
        format!(
            "Workers at {CONCURRENCY_AT} objects (create phase, `--max-concurrent-reconciles`):\n\n\
             | workers | time | requests / object | answered 404 / 409 | operator CPU | \
             kube-apiserver CPU | in flight (most / mean) |\n\
             |---:|---:|---:|---:|---:|---:|---:|\n{workers}\n"
        )
    };
    let restart = points
        .iter()
        .filter_map(|p| p.restart.as_ref().map(|r| (p.objects, r)))
        .map(|(n, r)| {
            format!(
                "| {n} | {:.2} s | {} | {} | {} |\n",
                r.ready_seconds,
                audit::total(&r.requests),
                writes(&r.requests),
                audit::describe(&r.requests),
            )
        })
        .collect::<String>();
    let measured: Vec<String> = points.iter().map(|p| p.objects.to_string()).collect();
    format!(
        "## Scale curve: {kind}s at {}\n\n\
         Command: `make bench-scale` (`benches/scale.rs`, operator: {binary}, one real \
         kube-apiserver v1.36.3 + etcd on loopback, {cores} cores, shared by the bench's client \
         ({CLIENT_PARALLEL} requests in parallel), the operator and the API server). 4 objects \
         per shoot namespace, a fresh operator per point (`--max-concurrent-reconciles=\
         {DEFAULT_WORKERS}`). A phase runs from the bench's first request to the moment every \
         object passes gardenlet's readiness check (or is gone). Requests are the operator's \
         (its `User-Agent` in the audit log) until it has been silent for {QUIET:?}. In flight \
         = `controller_active_workers{{kind=\"{kind}\"}}`, sampled every 250 ms. {about}\n\n\
         | objects | phase | time | requests / object | answered 404 / 409 | operator CPU | \
         kube-apiserver CPU | in flight (most / mean) |\n\
         |---:|---|---:|---:|---:|---:|---:|---:|\n{curve}\n\
         Memory (VmRSS when settled; peak = VmHWM, at the largest point the higher of the \
         processes before and after the restart; per object = (peak − start) / objects; \
         after = every object deleted, settled; idle = {IDLE:?} later):\n\n\
         | objects | RSS at start | peak RSS | per object | RSS after delete | after vs start | \
         RSS idle after delete | idle vs start |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|\n{memory}\n\
         {workers}\
         Restart at the largest point (every object unchanged; the operator killed and started \
         again):\n\n\
         | objects | start → /readyz | requests until quiet | writes | mix |\n\
         |---:|---:|---:|---:|---|\n{restart}\n\
         Measured on {date}.\n",
        measured.join(" → "),
        kind = kind.name(),
        binary = operator_binary(),
        about = match kind {
            Kind::ContainerRuntime => "",
            Kind::OperatingSystemConfig => {
                "Per shoot gardenlet's `provision` and `reconcile` OSC of two pools, the \
                 Secret a `secretRef` file reads and gardenlet's node-agent ManagedResource (as \
                 in a current seed, so ours ships no node-agent secret)."
            }
        },
        cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        date = chrono::Utc::now().format("%Y-%m-%d"),
    )
}

#[tokio::main]
async fn main() {
    if !support::benchmarks::invoked_by_cargo_bench() {
        return;
    }
    support::enable_audit_log();
    let env = support::env().await;
    let points_wanted = points();
    let largest = points_wanted.iter().copied().max().unwrap_or_default();
    for kind in kinds() {
        let mut points = Vec::new();
        for objects in &points_wanted {
            let restart = *objects == largest;
            let point = measure_point(&env, kind, *objects, DEFAULT_WORKERS, restart, true).await;
            eprintln!("scale: {kind:?} {objects} objects: {point:?}");
            points.push(point);
        }
        let mut concurrency = Vec::new();
        if kind == Kind::ContainerRuntime && points_wanted.contains(&CONCURRENCY_AT) {
            for workers in WORKERS {
                let phase = if workers == DEFAULT_WORKERS {
                    points
                        .iter()
                        .find(|p| p.objects == CONCURRENCY_AT)
                        .map(|p| p.create.clone())
                        .unwrap_or_default()
                } else {
                    measure_point(&env, kind, CONCURRENCY_AT, workers, false, false)
                        .await
                        .create
                };
                eprintln!("scale: {workers} workers: {phase:?}");
                concurrency.push((workers, phase));
            }
        }
        let section = render(kind, &points, &concurrency);
        println!("{section}");
        support::benchmarks::write_section(kind.section(), &section);
    }
}
