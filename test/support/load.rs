//! A shoot-shaped load for the resilience tests (`test/resilience_*.rs`), and the checks that
//! it converged with nothing duplicated, orphaned or lost.
//!
//! Per shoot namespace, as gardenlet creates them: a Cluster; `runtimes` gVisor
//! ContainerRuntimes `gvisor-pool-<i>`; the two OperatingSystemConfigs of pool `worker-a` —
//! the provision OSC `pool-a-init`, whose user data Secret `osc-result-pool-a-init` the Worker
//! references, and the reconcile OSC `<key>-original`, whose node-agent Secret goes into a
//! ManagedResource; one Worker (one pool, one zone, minimum 1); the Secret `example-secret`
//! the OSCs' `secretRef` file reads. So the Worker depends on the OSC controller's output,
//! as in a real seed. [`Mcm`] plays machine-controller-manager.
//!
//! Counts: the `reduced` scale unless `RESILIENCE_FULL=1` (`make test-resilience`) asks for
//! the `full` one.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use gardener_extension_node::api::machine::{Machine, MachineClass, MachineDeployment, MachineSet};
use gardener_extension_node::api::{
    Cluster, ContainerRuntime, ExtensionObject, LastOperationType, ManagedResource,
    OperatingSystemConfig, Worker,
};
use gardener_extension_node::extension::ExtensionKind;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ListParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::fixtures::{self, OSC_KEY};
use super::gardener::check_ready;
use super::mcm::Mcm;
use super::operator::OperatorProcess;
use super::{TestEnv, wait_for};

/// Name of the provision OSC (its user data Secret is the fixture Worker's).
pub const PROVISION_OSC: &str = "pool-a-init";
/// The user data Secret of [`PROVISION_OSC`].
pub const USER_DATA_SECRET: &str = "osc-result-pool-a-init";
/// The fixture Worker's name.
pub const WORKER: &str = "worker";
/// The shared RuntimeClass ManagedResource of every gVisor shoot.
pub const SHARED_MR: &str = "extension-runtime-gvisor";
/// Value of the Secret the OSCs' `secretRef` file reads.
pub const FILE_SECRET_VALUE: &str = "from a secret\n";

/// Whether the full counts were asked for (`RESILIENCE_FULL=1`, `make test-resilience`).
pub fn full_run() -> bool {
    std::env::var("RESILIENCE_FULL").is_ok_and(|v| v == "1" || v == "true")
}

/// `reduced` under `make test`, `full` under `make test-resilience`.
pub fn pick<T>(reduced: T, full: T) -> T {
    if full_run() { full } else { reduced }
}

/// The seed of a randomised test: `RESILIENCE_SEED` to replay one, else derived from the
/// process id and the clock. Printed by the caller.
pub fn seed() -> u64 {
    std::env::var("RESILIENCE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or_default();
            (u64::from(std::process::id()) << 32) ^ u64::from(nanos)
        })
}

/// A small deterministic generator (64-bit LCG; the upper bits are used), so a printed seed
/// replays the same choices.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Starts at `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    /// A number in `[low, high)`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        low + (self.0 >> 33) % high.saturating_sub(low).max(1)
    }
}

/// The operations whose success counts as "ready" for a freshly created object: `Create`, or
/// `Reconcile` when a retry after an error or a restart ran as one.
pub const CREATED: &[LastOperationType] =
    &[LastOperationType::Create, LastOperationType::Reconcile];

/// One shoot namespace of the load.
pub struct Shoot {
    /// Its namespace and admin client.
    pub env: TestEnv,
    /// Number of ContainerRuntimes (`gvisor-pool-0` …).
    pub runtimes: usize,
    /// machine-controller-manager for this namespace.
    pub mcm: Mcm,
}

/// Labels and annotations a test adds to every extension object it creates.
#[derive(Debug, Clone, Default)]
pub struct Extra {
    /// `metadata.annotations` besides gardenlet's.
    pub annotations: BTreeMap<String, String>,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// Finalizers of other controllers.
    pub finalizers: Vec<String>,
}

fn api<K>(env: &TestEnv) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    Api::namespaced(env.client.clone(), &env.namespace)
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl Shoot {
    /// A shoot namespace (`env`) with its Cluster (`adjust` changes the fixture) and the
    /// referenced Secret; no extension object yet.
    pub async fn prepare(env: TestEnv, runtimes: usize, adjust: impl FnOnce(&mut Value)) -> Self {
        let mut cluster = fixtures::cluster_json(&env.namespace);
        adjust(&mut cluster);
        Api::<Cluster>::all(env.client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(cluster).expect("cluster fixture"),
            )
            .await
            .expect("Cluster created");
        let secret: Secret = serde_json::from_value(fixtures::osc_file_secret_json(
            &env.namespace,
            FILE_SECRET_VALUE,
        ))
        .expect("secret fixture");
        api::<Secret>(&env)
            .create(&PostParams::default(), &secret)
            .await
            .expect("example-secret created");
        let mcm = Mcm::new(&env);
        Shoot { env, runtimes, mcm }
    }

    /// Names of the ContainerRuntimes.
    pub fn runtime_names(&self) -> Vec<String> {
        (0..self.runtimes)
            .map(|i| format!("gvisor-pool-{i}"))
            .collect()
    }

    /// Names of the OperatingSystemConfigs.
    pub fn osc_names(&self) -> Vec<String> {
        vec![PROVISION_OSC.to_string(), format!("{OSC_KEY}-original")]
    }

    /// The extension objects as gardenlet creates them, with `gardener.cloud/operation:
    /// <operation>` and a timestamp, plus `extra`.
    pub fn objects(&self, operation: &str, extra: &Extra) -> Vec<Value> {
        let namespace = &self.env.namespace;
        let mut objects: Vec<Value> = (0..self.runtimes)
            .map(|i| fixtures::container_runtime_json(namespace, &format!("pool-{i}")))
            .collect();
        objects.push(fixtures::operating_system_config_json(
            namespace,
            PROVISION_OSC,
            "provision",
        ));
        objects.push(fixtures::operating_system_config_json(
            namespace,
            &format!("{OSC_KEY}-original"),
            "reconcile",
        ));
        objects.push(fixtures::worker_json(namespace));
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
        for object in &mut objects {
            let mut annotations = json!({
                "gardener.cloud/operation": operation,
                "gardener.cloud/timestamp": now,
            });
            for (k, v) in &extra.annotations {
                annotations[k] = json!(v);
            }
            object["metadata"]["annotations"] = annotations;
            let labels = object["metadata"]["labels"]
                .as_object_mut()
                .map(std::mem::take)
                .unwrap_or_default();
            let mut labels = Value::Object(labels);
            for (k, v) in &extra.labels {
                labels[k] = json!(v);
            }
            object["metadata"]["labels"] = labels;
            if !extra.finalizers.is_empty() {
                object["metadata"]["finalizers"] = json!(extra.finalizers);
            }
        }
        objects
    }

    /// Creates every extension object (see [`Shoot::objects`]).
    pub async fn create_objects(&self, operation: &str, extra: &Extra) {
        for object in self.objects(operation, extra) {
            let kind = object["kind"].as_str().unwrap_or_default().to_string();
            match kind.as_str() {
                "ContainerRuntime" => create::<ContainerRuntime>(&self.env, object).await,
                "OperatingSystemConfig" => create::<OperatingSystemConfig>(&self.env, object).await,
                _ => create::<Worker>(&self.env, object).await,
            }
        }
    }

    /// Number of extension objects.
    pub fn object_count(&self) -> usize {
        self.runtimes + 3
    }

    /// How many extension objects pass gardenlet's readiness check for one of `operations`,
    /// and which do not (with the reason). Lets machine-controller-manager act first.
    pub async fn readiness(
        &self,
        operations: &[LastOperationType],
    ) -> Result<(usize, Vec<String>), String> {
        self.mcm.sync().await?;
        let mut ready = 0;
        let mut not_ready = Vec::new();
        let mut tally = |name: String, result: Result<(), String>| match result {
            Ok(()) => ready += 1,
            Err(reason) => not_ready.push(format!("{}/{name}: {reason}", self.env.namespace)),
        };
        for cr in list::<ContainerRuntime>(&self.env).await? {
            tally(cr.name_any(), ready_for(&cr, operations));
        }
        for osc in list::<OperatingSystemConfig>(&self.env).await? {
            tally(osc.name_any(), ready_for(&osc, operations));
        }
        for worker in list::<Worker>(&self.env).await? {
            tally(worker.name_any(), ready_for(&worker, operations));
        }
        Ok((ready, not_ready))
    }

    /// Every object the controllers own exists exactly once, and nothing else of theirs:
    /// the ManagedResources and their Secrets, the user data Secret, and the machine objects
    /// (one class, class Secret, deployment, set; `machines` machines).
    pub async fn check_children(&self, machines: usize) -> Result<(), String> {
        let env = &self.env;
        let mut want_mrs: BTreeSet<String> = (0..self.runtimes)
            .map(|i| format!("extension-runtime-gvisor-installation-pool-{i}"))
            .collect();
        want_mrs.insert(SHARED_MR.to_string());
        want_mrs.insert(format!("extension-osc-{OSC_KEY}"));
        // The pool's rollout steering (budget, pause) reaches its agents through the Lease
        // this ManagedResource gives our operator access to, in every node-agent-secrets mode.
        want_mrs.insert(
            gardener_extension_node::controllers::operatingsystemconfig::rollout::rules::managed_resource_name(OSC_KEY),
        );
        let mrs = list::<ManagedResource>(env).await?;
        let have_mrs: BTreeSet<String> = mrs.iter().map(|m| m.name_any()).collect();
        if have_mrs != want_mrs || mrs.len() != want_mrs.len() {
            return Err(format!(
                "{}: ManagedResources {have_mrs:?}, want {want_mrs:?}",
                env.namespace
            ));
        }
        let referenced: BTreeSet<String> = mrs
            .iter()
            .flat_map(|m| m.spec.secret_refs.iter().map(|r| r.name.clone()))
            .collect();
        let secrets = list::<Secret>(env).await?;
        let mr_secrets: BTreeSet<String> = secrets
            .iter()
            .map(|s| s.name_any())
            .filter(|n| n.starts_with("managedresource-"))
            .collect();
        if mr_secrets != referenced || referenced.len() != want_mrs.len() {
            return Err(format!(
                "{}: ManagedResource Secrets {mr_secrets:?}, referenced {referenced:?} (duplicates or orphans)",
                env.namespace
            ));
        }
        let results: Vec<String> = secrets
            .iter()
            .map(|s| s.name_any())
            .filter(|n| n.starts_with("osc-result-"))
            .collect();
        if results != [USER_DATA_SECRET] {
            return Err(format!("{}: user data Secrets {results:?}", env.namespace));
        }
        let class_secrets = secrets
            .iter()
            .filter(|s| {
                s.labels().get("gardener.cloud/purpose").map(String::as_str) == Some("machineclass")
            })
            .count();
        let counts = (
            list::<MachineClass>(env).await?.len(),
            class_secrets,
            list::<MachineDeployment>(env).await?.len(),
            list::<MachineSet>(env).await?.len(),
            list::<Machine>(env).await?.len(),
        );
        if counts != (1, 1, 1, 1, machines) {
            return Err(format!(
                "{}: (classes, class secrets, deployments, sets, machines) = {counts:?}, want (1, 1, 1, 1, {machines})",
                env.namespace
            ));
        }
        Ok(())
    }

    /// Every extension object carries our finalizer and every finalizer in `others`.
    pub async fn check_finalizers(&self, others: &[String]) -> Result<(), String> {
        let mut problems = Vec::new();
        let mut check = |name: String, finalizers: &[String], ours: &str| {
            for wanted in others.iter().map(String::as_str).chain([ours]) {
                if !finalizers.iter().any(|f| f == wanted) {
                    problems.push(format!("{name} lacks finalizer {wanted}: {finalizers:?}"));
                }
            }
        };
        for o in list::<ContainerRuntime>(&self.env).await? {
            check(o.name_any(), o.finalizers(), ContainerRuntime::FINALIZER);
        }
        for o in list::<OperatingSystemConfig>(&self.env).await? {
            check(
                o.name_any(),
                o.finalizers(),
                OperatingSystemConfig::FINALIZER,
            );
        }
        for o in list::<Worker>(&self.env).await? {
            check(o.name_any(), o.finalizers(), Worker::FINALIZER);
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

/// gardenlet's readiness check for any of `operations`.
pub fn ready_for<K>(object: &K, operations: &[LastOperationType]) -> Result<(), String>
where
    K: Resource + ExtensionObject,
{
    let mut last = String::from("no operation given");
    for operation in operations {
        match check_ready(object, *operation) {
            Ok(()) => return Ok(()),
            Err(reason) => last = reason,
        }
    }
    Err(last)
}

async fn create<K>(env: &TestEnv, object: Value)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).expect("fixture decodes");
    api::<K>(env)
        .create(&PostParams::default(), &object)
        .await
        .expect("extension object created");
}

/// All objects of a kind in the shoot namespace.
pub async fn list<K>(env: &TestEnv) -> Result<Vec<K>, String>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    api::<K>(env)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(err)
}

/// Creates `count` shoots of `runtimes` ContainerRuntimes each, the first in `first` (the
/// namespace [`super::env`] made when it started the control plane).
pub async fn prepare_shoots(first: TestEnv, count: usize, runtimes: usize) -> Vec<Shoot> {
    let mut shoots = vec![Shoot::prepare(first, runtimes, |_| {}).await];
    for _ in 1..count {
        shoots.push(Shoot::prepare(super::env().await, runtimes, |_| {}).await);
    }
    shoots
}

/// Ready objects over all shoots, and the first few that are not.
pub async fn readiness(
    shoots: &[Shoot],
    operations: &[LastOperationType],
) -> Result<(usize, Vec<String>), String> {
    let mut ready = 0;
    let mut not_ready = Vec::new();
    for shoot in shoots {
        let (r, n) = shoot.readiness(operations).await?;
        ready += r;
        not_ready.extend(n);
    }
    Ok((ready, not_ready))
}

/// Waits until every object of every shoot is ready for one of `operations`.
pub async fn wait_all_ready(shoots: &[Shoot], operations: &[LastOperationType], timeout: Duration) {
    let total: usize = shoots.iter().map(Shoot::object_count).sum();
    wait_for("every extension object ready", timeout, || async {
        let (ready, not_ready) = readiness(shoots, operations).await?;
        if ready == total {
            Ok(())
        } else {
            Err(format!(
                "{ready}/{total} ready; e.g. {:?}",
                not_ready.iter().take(5).collect::<Vec<_>>()
            ))
        }
    })
    .await
}

/// Sum of `…controller_reconciles_total` by `result` label (`success`, `pending`, `error`),
/// read from the operator's `/metrics`.
pub async fn reconcile_counts(operator: &OperatorProcess) -> BTreeMap<String, u64> {
    let (status, body) = operator
        .http_get("/metrics")
        .await
        .expect("the operator serves /metrics");
    assert_eq!(status, 200, "{body}");
    let counts = parse_reconcile_counts(&body);
    assert!(
        !counts.is_empty(),
        "no controller_reconciles_total sample in:\n{body}"
    );
    counts
}

/// Sums `controller_reconciles_total` samples of an exposition text by their `result`.
pub fn parse_reconcile_counts(text: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        // The registry prefixes every name (`gardener_extension_node_controller_…`).
        let Some((name, rest)) = line.split_once('{') else {
            continue;
        };
        if !name.ends_with("controller_reconciles_total") {
            continue;
        }
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let result = labels
            .split(',')
            .find_map(|l| l.strip_prefix("result=\""))
            .map(|r| r.trim_end_matches('"').to_string())
            .unwrap_or_default();
        let value: f64 = value.trim().parse().unwrap_or_default();
        *counts.entry(result).or_insert(0) += value as u64;
    }
    counts
}

/// Total of all results of [`reconcile_counts`].
pub fn total(counts: &BTreeMap<String, u64>) -> u64 {
    counts.values().sum()
}

/// The fault a restart scenario injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// kube-apiserver killed and started again (same port, same etcd).
    ApiServer,
    /// etcd killed and started again (same ports, same data).
    Etcd,
}

/// Scenarios 1 and 2: the operator reconciles the whole load; once the first objects are
/// ready (the rest still in flight), the control plane process is killed and restarted.
/// Afterwards every object is ready, every child exists exactly once, no finalizer is lost,
/// and the operator never exited. Prints a `RESULT` line for `docs/reliability.md`.
pub async fn control_plane_restart(fault: Fault) {
    let (shoot_count, runtimes) = pick((2, 5), (5, 10));
    let first = super::env().await;
    let kubeconfig = first.kubeconfig.clone();
    let shoots = prepare_shoots(first, shoot_count, runtimes).await;
    let total: usize = shoots.iter().map(Shoot::object_count).sum();
    // Everything is there before the operator starts, so its first list enqueues the whole
    // load at once; the fault comes right after that list, while the work is in flight.
    for shoot in &shoots {
        shoot.create_objects("reconcile", &Extra::default()).await;
    }
    let seed = seed();
    println!("RESILIENCE_SEED={seed}");
    let delay = Duration::from_millis(Rng::new(seed).range(0, 300));
    let operator = OperatorProcess::start(&kubeconfig, &[]);
    let started = tokio::time::Instant::now();
    wait_for("operator ready", Duration::from_secs(120), || async {
        match operator.http_get("/readyz").await {
            Some((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    tokio::time::sleep(delay).await;
    let ready_at_fault = quick_ready_count(&shoots).await;
    let fault_at = started.elapsed();
    let down = tokio::time::Instant::now();
    match fault {
        Fault::ApiServer => super::restart_apiserver().await,
        Fault::Etcd => super::restart_etcd().await,
    }
    let outage = down.elapsed();
    wait_all_ready(&shoots, CREATED, Duration::from_secs(300)).await;
    let converged = started.elapsed();
    for shoot in &shoots {
        shoot
            .check_children(1)
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", operator.log_text()));
        shoot
            .check_finalizers(&[])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let (status, _) = operator.http_get("/healthz").await.expect("operator alive");
    assert_eq!(status, 200);
    let log = operator.log_text();
    assert!(!log.contains("panicked"), "the operator panicked:\n{log}");
    let counts = reconcile_counts(&operator).await;
    println!(
        "RESULT fault={fault:?} shoots={shoot_count} containerruntimes={} oscs={} workers={} objects={total} ready_at_fault={ready_at_fault} fault_after_ready={}ms fault_after_start={:.1}s outage={:.1}s converged_after_start={:.1}s reconciles={counts:?}",
        shoot_count * runtimes,
        shoot_count * 2,
        shoot_count,
        delay.as_millis(),
        fault_at.as_secs_f64(),
        outage.as_secs_f64(),
        converged.as_secs_f64(),
    );
}

/// Ready extension objects, counted from one list per kind and shoot (no MCM pass), so the
/// count is taken within a few milliseconds of the fault.
async fn quick_ready_count(shoots: &[Shoot]) -> usize {
    let mut ready = 0;
    for shoot in shoots {
        let env = &shoot.env;
        let crs = list::<ContainerRuntime>(env).await.unwrap_or_default();
        let oscs = list::<OperatingSystemConfig>(env).await.unwrap_or_default();
        let workers = list::<Worker>(env).await.unwrap_or_default();
        ready += crs
            .iter()
            .filter(|o| ready_for(*o, CREATED).is_ok())
            .count()
            + oscs
                .iter()
                .filter(|o| ready_for(*o, CREATED).is_ok())
                .count()
            + workers
                .iter()
                .filter(|o| ready_for(*o, CREATED).is_ok())
                .count();
    }
    ready
}
