//! Integration: how the controllers run and stop, against the real kube-apiserver.
//!
//! - Every worker of a kind reconciles: with `--max-concurrent-reconciles=N`, N slow runs
//!   are in flight at once (kube-runtime's store readiness wakes one waiter only, see
//!   docs/architecture.md#store-readiness-wakes-one-waiter; ours wakes every one).
//! - The operator binary stops within 5 s of SIGTERM while it works through many objects.
//! - A spec edit alone waits (with a log line saying so), and the README's `kubectl
//!   annotate` line makes it run.
//! - On SIGTERM the leader gives its Lease up only after its run in flight was cut off at the
//!   end of the grace, not while it still runs (issue 41 item 6).

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use gardener_extension_node::api::{
    Cluster, ContainerRuntime, LastOperationType, ManagedResource, OperatingSystemConfig,
};
use gardener_extension_node::extension::cache::ObjectStore;
use gardener_extension_node::extension::controller::{self, ControllerOptions};
use gardener_extension_node::extension::error::{Classify, RetryPolicy};
use gardener_extension_node::extension::events::EventPublisher;
use gardener_extension_node::extension::metrics::ControllerMetrics;
use gardener_extension_node::extension::predicate::Filter;
use gardener_extension_node::extension::reconciler::Reconciler;
use gardener_extension_node::extension::{Actuator, Outcome, Request};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::gardener::{check_ready, confirm_and_delete, wait_ready};
use support::operator::OperatorProcess;
use support::{fixtures, wait_for};
use tokio_util::sync::CancellationToken;

/// The operators of these tests watch all namespaces, so the tests take turns.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long each run of the slow actuator takes.
const SLOW_RUN: Duration = Duration::from_millis(1500);

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

impl Classify for Never {
    fn category(&self) -> &'static str {
        "never"
    }
}

/// What the slow actuator counts.
#[derive(Default)]
struct Counts {
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    runs: AtomicUsize,
}

/// An actuator whose every run takes [`SLOW_RUN`] and is counted in [`Counts`].
struct SlowActuator(Arc<Counts>);

impl Counts {
    async fn run(&self) -> Result<Outcome, Never> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(SLOW_RUN).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(Outcome::done())
    }
}

impl Actuator for SlowActuator {
    type Object = ContainerRuntime;
    type Error = Never;

    async fn reconcile(&self, _: &Request<'_, ContainerRuntime>) -> Result<Outcome, Never> {
        self.0.run().await
    }
    async fn delete(&self, _: &Request<'_, ContainerRuntime>) -> Result<Outcome, Never> {
        self.0.run().await
    }
    async fn force_delete(&self, _: &Request<'_, ContainerRuntime>) -> Result<Outcome, Never> {
        self.0.run().await
    }
    async fn migrate(&self, _: &Request<'_, ContainerRuntime>) -> Result<Outcome, Never> {
        self.0.run().await
    }
    async fn restore(&self, _: &Request<'_, ContainerRuntime>) -> Result<Outcome, Never> {
        self.0.run().await
    }
}

async fn create_cluster(env: &support::TestEnv) {
    let clusters: Api<Cluster> = Api::all(env.client.clone());
    clusters
        .create(&PostParams::default(), &fixtures::cluster(&env.namespace))
        .await
        .unwrap();
}

async fn create_container_runtimes(env: &support::TestEnv, count: usize) {
    let api: Api<ContainerRuntime> = Api::namespaced(env.client.clone(), &env.namespace);
    for i in 0..count {
        let mut cr = fixtures::container_runtime_json(&env.namespace, &format!("pool-{i}"));
        cr["metadata"]["annotations"] = json!({"gardener.cloud/operation": "reconcile"});
        api.create(&PostParams::default(), &serde_json::from_value(cr).unwrap())
            .await
            .unwrap();
    }
}

/// Five workers, ten slow runs: five at once, in two waves; and a shutdown in the middle of
/// the second wave returns within the grace.
#[tokio::test]
async fn every_worker_reconciles_and_a_shutdown_does_not_wait_for_idle_workers() {
    let _serial = SERIAL.lock().await;
    let env = support::env().await;
    create_cluster(&env).await;
    create_container_runtimes(&env, 10).await;

    let actuator = Arc::new(Counts::default());
    let objects = ObjectStore::default();
    let mut registry = prometheus_client::registry::Registry::default();
    let reconciler = Arc::new(Reconciler {
        client: env.client.clone(),
        actuator: SlowActuator(Arc::clone(&actuator)),
        filter: Filter {
            classes: vec!["shoot".into()],
            types: vec!["gvisor".into()],
            ignore_operation_annotation: false,
        },
        events: EventPublisher::new(env.client.clone()),
        metrics: ControllerMetrics::register(&mut registry),
        cache: None,
        objects: Some(objects.clone()),
        read_fresh: Default::default(),
        woken: Default::default(),
    });
    let shutdown = CancellationToken::new();
    let (synced, _ready) = tokio::sync::oneshot::channel();
    let options = ControllerOptions {
        max_concurrent: 5,
        retry: RetryPolicy::default(),
    };
    let started = Instant::now();
    let run = tokio::spawn(controller::run(
        reconciler,
        options,
        objects,
        Default::default(),
        synced,
        None,
        shutdown.clone(),
    ));

    wait_for("ten runs", Duration::from_secs(60), || async {
        match actuator.runs.load(Ordering::SeqCst) {
            10.. => Ok(()),
            n => Err(format!("{n} runs")),
        }
    })
    .await;
    let two_waves = started.elapsed();
    assert_eq!(
        actuator.most_in_flight.load(Ordering::SeqCst),
        5,
        "five workers run five objects at once"
    );
    assert!(
        two_waves < SLOW_RUN * 5,
        "ten runs of {SLOW_RUN:?} with five workers took {two_waves:?}"
    );
    let text = gardener_extension_node::metrics::encode(&registry).unwrap();
    assert!(
        text.contains(r#"controller_max_concurrent_reconciles{kind="ContainerRuntime"} 5"#),
        "{text}"
    );

    // Ask for five more runs and stop while they are in flight.
    let api: Api<ContainerRuntime> = Api::namespaced(env.client.clone(), &env.namespace);
    for i in 0..5 {
        api.patch(
            &format!("gvisor-pool-{i}"),
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"gardener.cloud/operation": "reconcile"}}}),
            ),
        )
        .await
        .unwrap();
    }
    wait_for("runs in flight", Duration::from_secs(30), || async {
        match actuator.in_flight.load(Ordering::SeqCst) {
            1.. => Ok(()),
            _ => Err("none".to_string()),
        }
    })
    .await;
    let stopping = Instant::now();
    shutdown.cancel();
    tokio::time::timeout(controller::SHUTDOWN_GRACE + Duration::from_secs(1), run)
        .await
        .expect("the controller stops within its grace")
        .unwrap();
    eprintln!(
        "10 runs of {SLOW_RUN:?} with 5 workers: {two_waves:?}; stopped {:?} after the shutdown",
        stopping.elapsed()
    );
}

/// The operator binary, busy with many ContainerRuntimes and five workers, exits by itself
/// within 5 s of SIGTERM; and again while it is idle.
#[tokio::test]
async fn sigterm_stops_the_operator_within_five_seconds_under_load() {
    let _serial = SERIAL.lock().await;
    let env = support::env().await;
    create_cluster(&env).await;
    let mut operator = OperatorProcess::start(&env.kubeconfig, &["--max-concurrent-reconciles=5"]);
    wait_for("operator ready", Duration::from_secs(60), || async {
        match operator.http_get("/readyz").await {
            Some((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    create_container_runtimes(&env, 60).await;
    wait_for("runs under way", Duration::from_secs(60), || async {
        let log = operator.log_text();
        match log.matches("gvisor-pool-").count() {
            n if n >= 5 => Ok(()),
            n => Err(format!("{n} log lines name a pool")),
        }
    })
    .await;
    let busy = operator.terminate(Duration::from_secs(5));
    let log = operator.log_text();
    let busy = busy.unwrap_or_else(|| panic!("still running 5 s after SIGTERM under load:\n{log}"));
    assert!(log.contains("shutting down"), "{log}");

    // Idle: everything reconciled before the signal.
    operator.restart();
    let api: Api<ContainerRuntime> = Api::namespaced(env.client.clone(), &env.namespace);
    wait_for("all ready", Duration::from_secs(180), || async {
        let list = api
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?;
        let waiting = list
            .items
            .iter()
            .filter(|cr| check_ready(*cr, LastOperationType::Create).is_err())
            .count();
        if waiting == 0 {
            Ok(())
        } else {
            Err(format!("{waiting} not ready"))
        }
    })
    .await;
    let idle = operator
        .terminate(Duration::from_secs(5))
        .unwrap_or_else(|| {
            panic!(
                "still running 5 s after SIGTERM while idle:\n{}",
                operator.log_text()
            )
        });
    eprintln!("SIGTERM to exit: {busy:?} under load, {idle:?} idle");
}

/// The README's line, as a user copies it from there.
fn readme_annotate_line() -> String {
    let readme = std::fs::read_to_string(support::repo_root().join("README.md")).unwrap();
    readme
        .lines()
        .map(str::trim)
        .find(|l| {
            l.starts_with("kubectl")
                && l.contains(" annotate ")
                && l.contains("gardener.cloud/operation=reconcile")
        })
        .expect("README shows a kubectl annotate line")
        .to_string()
}

/// An edit of a Succeeded object's spec does not run it, and the operator says why once; the
/// README's `kubectl annotate` line (kubeconfig and namespace swapped for the test's) runs
/// it, and the annotation is gone afterwards.
#[tokio::test]
async fn an_edit_waits_for_the_annotation_that_the_readme_shows() {
    let _serial = SERIAL.lock().await;
    let env = support::env().await;
    create_cluster(&env).await;
    let operator = OperatorProcess::start(&env.kubeconfig, &[]);
    let api: Api<ContainerRuntime> = Api::namespaced(env.client.clone(), &env.namespace);
    let mut cr = fixtures::container_runtime_json(&env.namespace, "worker-a");
    cr["metadata"]["annotations"] = json!({"gardener.cloud/operation": "reconcile"});
    api.create(&PostParams::default(), &serde_json::from_value(cr).unwrap())
        .await
        .unwrap();
    let first = wait_for("created", Duration::from_secs(60), || async {
        let cr = api
            .get("gvisor-worker-a")
            .await
            .map_err(|e| e.to_string())?;
        check_ready(&cr, LastOperationType::Create)?;
        Ok(cr)
    })
    .await;
    let first_update = first
        .status
        .clone()
        .unwrap()
        .default
        .last_operation
        .unwrap()
        .last_update_time;

    api.patch(
        "gvisor-worker-a",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"providerConfig": {"configFlags": {"net-raw": "false"}}}})),
    )
    .await
    .unwrap();
    wait_for("the waiting line", Duration::from_secs(30), || async {
        let log = operator.log_text();
        match log
            .matches("spec changed; it is reconciled once annotated")
            .count()
        {
            1 => Ok(()),
            n => Err(format!("{n} lines\n{log}")),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let edited = api.get("gvisor-worker-a").await.unwrap();
    let status = edited.status.clone().unwrap().default;
    assert_eq!(
        status.last_operation.unwrap().last_update_time,
        first_update,
        "no run"
    );
    assert_ne!(status.observed_generation, edited.metadata.generation);

    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(kubeconfig.path(), &env.kubeconfig).unwrap();
    let line = readme_annotate_line()
        .replace(
            "dev/local-env/kubeconfig",
            &kubeconfig.path().display().to_string(),
        )
        .replace("shoot--local--local", &env.namespace);
    let output = std::process::Command::new("sh")
        .args(["-c", &line])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{line}: {}",
        String::from_utf8_lossy(&output.stderr)
    );

    let ran = wait_for("the annotated run", Duration::from_secs(60), || async {
        let cr = api
            .get("gvisor-worker-a")
            .await
            .map_err(|e| e.to_string())?;
        let status = cr.status.clone().ok_or("no status")?.default;
        if status.observed_generation != cr.metadata.generation {
            return Err(format!("observed {:?}", status.observed_generation));
        }
        Ok(cr)
    })
    .await;
    assert!(
        !ran.annotations().contains_key("gardener.cloud/operation"),
        "the annotation is removed by the run"
    );
    check_ready(&ran, LastOperationType::Reconcile).unwrap();
}

/// A finalizer of nobody: holds a deleted ManagedResource, so that a delete run waits for it
/// inline (up to `INLINE_DELETE_WAIT`, 10 s) and is in flight when the operator is stopped.
const HOLD: &str = "example.com/test-hold";

/// Issue 41 item 6: the leader, stopped by SIGTERM while an OSC delete run waits for its
/// ManagedResource, keeps its Lease until that run was cut off at the end of the controllers'
/// grace, and only then releases it (a standby would otherwise reconcile beside the run).
#[tokio::test]
async fn sigterm_releases_the_lease_only_after_the_run_in_flight_was_cut_off() {
    let _serial = SERIAL.lock().await;
    let env = support::env().await;
    create_cluster(&env).await;
    let args = [
        "--leader-election=true".to_string(),
        format!("--leader-election-namespace={}", env.namespace),
        format!("--heartbeat-namespace={}", env.namespace),
        "--controllers=operatingsystemconfig".to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut operator = OperatorProcess::start(&env.kubeconfig, &args);
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &env.namespace);
    let holder = || async {
        leases
            .get("gardener-extension-node-leader-election")
            .await
            .ok()
            .and_then(|l| l.spec?.holder_identity)
            .filter(|h| !h.is_empty())
    };
    wait_for("a leader", Duration::from_secs(60), || async {
        holder().await.ok_or_else(|| "no holder".to_string())
    })
    .await;

    let oscs: Api<OperatingSystemConfig> = Api::namespaced(env.client.clone(), &env.namespace);
    let mut osc = fixtures::operating_system_config_json(
        &env.namespace,
        &format!("{}-original", fixtures::OSC_KEY),
        "reconcile",
    );
    osc["spec"]["files"]
        .as_array_mut()
        .unwrap()
        .retain(|f| f["content"].get("secretRef").is_none());
    osc["metadata"]["annotations"] = json!({"gardener.cloud/operation": "reconcile"});
    let name = oscs
        .create(
            &PostParams::default(),
            &serde_json::from_value(osc).unwrap(),
        )
        .await
        .unwrap()
        .name_any();
    wait_ready(&oscs, &name, LastOperationType::Create).await;
    let mrs: Api<ManagedResource> = Api::namespaced(env.client.clone(), &env.namespace);
    let mr = format!("extension-osc-{}", fixtures::OSC_KEY);
    mrs.patch(
        &mr,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": [HOLD]}})),
    )
    .await
    .unwrap();
    confirm_and_delete(&oscs, &name).await;
    wait_for(
        "the delete run waiting for the ManagedResource",
        Duration::from_secs(30),
        || async {
            let mr = mrs.get(&mr).await.map_err(|e| e.to_string())?;
            mr.metadata
                .deletion_timestamp
                .map(|_| ())
                .ok_or_else(|| "not deleted yet".to_string())
        },
    )
    .await;

    // SIGTERM while the run waits (it would for up to 10 s); watch the Lease meanwhile.
    let sent = Instant::now();
    let stopping = std::thread::spawn(move || {
        let took = operator.terminate(Duration::from_secs(8));
        (took, operator)
    });
    let released = wait_for("the Lease released", Duration::from_secs(10), || async {
        match holder().await {
            None => Ok(sent.elapsed()),
            Some(h) => Err(format!("held by {h} {:?} after SIGTERM", sent.elapsed())),
        }
    })
    .await;
    let (took, operator) = stopping.join().unwrap();
    let log = operator.log_text();
    let took = took.unwrap_or_else(|| panic!("still running 8 s after SIGTERM:\n{log}"));
    eprintln!("SIGTERM at 0: Lease released after {released:?}, exited after {took:?}");
    let cut_off = log
        .find("runs still in flight after the shutdown grace; cut off")
        .unwrap_or_else(|| panic!("no run was in flight at SIGTERM:\n{log}"));
    let release = log
        .find("released leadership")
        .unwrap_or_else(|| panic!("the Lease was not released:\n{log}"));
    assert!(
        released >= controller::SHUTDOWN_GRACE,
        "the Lease was released {released:?} after SIGTERM, while the run was still in flight \
         (cut off only after {:?}):\n{log}",
        controller::SHUTDOWN_GRACE
    );
    assert!(
        cut_off < release,
        "released before the run was cut off:\n{log}"
    );
    assert!(
        took < Duration::from_secs(5),
        "exited {took:?} after SIGTERM"
    );
    mrs.patch(
        &mr,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
}
