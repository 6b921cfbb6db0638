//! The seed-side operator: connects to the seed's API server, serves `/healthz`, `/readyz`
//! and `/metrics`, wins leader election, renews the heartbeat and runs the extension
//! controllers until SIGTERM or Ctrl-C.
//!
//! Readiness: a replica waiting for leadership is ready (it serves probes and would take
//! over); the leader is ready once every controller has processed its first list.
//!
//! Metrics on `/metrics`: the controllers' families, `leader` and the heartbeat's last
//! renewal ([`crate::extension::liveness_metrics`]; `leader` is 1 from winning the Lease, or
//! from the start without leader election), and, once the controllers have listed their
//! objects, the object gauges ([`crate::extension::object_metrics`]).
//!
//! Shutdown (SIGTERM, Ctrl-C, lost leadership): the controllers stop first — each lets its
//! runs in flight end within its grace and cuts off the rest — while the leader keeps
//! renewing its Lease; only then is the Lease released, so a standby starts reconciling
//! after the old leader's last run, not beside it. Controllers that did not stop within
//! `STOP_TIMEOUT` (4 s) leave the Lease to expire instead (docs/contract.md#leader-election).

mod options;
#[cfg(test)]
mod shipped_monitoring;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

pub use options::{ControllerName, OperatorArgs};

use crate::controllers::{containerruntime, operatingsystemconfig, worker};
use crate::extension::cache::SeedCache;
use crate::extension::controller::ControllerOptions;
use crate::extension::error::RetryPolicy;
use crate::extension::events::EventPublisher;
use crate::extension::heartbeat;
use crate::extension::leader::{LeaderElector, Timings};
use crate::extension::liveness_metrics::LivenessMetrics;
use crate::extension::metrics::ControllerMetrics;
use crate::extension::object_metrics::{self, ObjectMetrics, Source};
use crate::extension::predicate::Filter;
use crate::extension::start::Setup;
use crate::http::{Readiness, ServerState};
use crate::imagevector::ImageVector;

/// Runs the operator until a shutdown signal arrives.
pub async fn run(args: OperatorArgs) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    tokio::spawn(forward_signals(shutdown.clone()));
    run_until(args, shutdown).await
}

/// Runs the operator until `shutdown` is cancelled (tests cancel it to stop an operator).
/// The HTTP port is bound first: when it is taken, nothing else starts.
pub async fn run_until(args: OperatorArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    let listener = crate::http::bind(args.http_bind_address)?;
    run_serving(args, listener, shutdown).await
}

/// Runs the operator with its HTTP server on `listener` (bound by the caller with
/// [`crate::http::bind`], as `local-env` does before it starts the control plane) until
/// `shutdown` is cancelled.
pub async fn run_serving(
    args: OperatorArgs,
    listener: std::net::TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    if let Ok(address) = listener.local_addr() {
        tracing::info!(http = %address, "HTTP port bound; connecting to the seed API server");
    }
    let client = crate::kubeconfig::client(args.kubeconfig.as_deref(), "operator")
        .await
        .context("connecting to the seed API server")?;
    let version = client
        .apiserver_version()
        .await
        .context("reading the API server version")?;
    tracing::info!(
        server_version = %version.git_version,
        gardener_version = args.gardener_version.as_deref().unwrap_or("unknown"),
        "connected to the seed API server"
    );
    // Everything that can fail on bad configuration fails here, before serving.
    let templates =
        containerruntime::render::Templates::new().context("parsing the gVisor templates")?;
    let images = ImageVector::load().context("loading the image vector")?;

    let Metrics {
        registry,
        controllers: metrics,
        liveness,
        objects: object_gauges,
    } = Metrics::register();
    let readiness = Readiness::default();
    let server = spawn_server(listener, registry, readiness.clone(), shutdown.clone());

    let identity = identity();
    let elector = args.leader_election.then(|| {
        LeaderElector::new(
            client.clone(),
            &args.leader_election_namespace,
            &args.leader_election_id,
            &identity,
            Timings::default(),
        )
    });
    let mut leadership = None;
    if let Some(elector) = elector {
        readiness.set_ready();
        if !elector.acquire(&shutdown).await {
            return finish(server, None, true).await;
        }
        readiness.set_not_ready();
        leadership = Some(Leadership::keep(elector, liveness.clone(), &shutdown));
    }
    liveness.set_leader(true);

    tokio::spawn(heartbeat::run(
        client.clone(),
        args.heartbeat_namespace.clone(),
        identity.clone(),
        Duration::from_secs(args.heartbeat_renew_interval_seconds),
        liveness.clone(),
        shutdown.clone(),
    ));

    // One cache for every controller; runs start once it holds its first lists.
    let cache = SeedCache::start(
        &client,
        &shutdown,
        args.controllers.contains(&ControllerName::Containerruntime)
            || args
                .controllers
                .contains(&ControllerName::Operatingsystemconfig),
    );
    tokio::select! {
        _ = shutdown.cancelled() => return finish(server, leadership, true).await,
        _ = cache.synced() => tracing::info!("seed cache synced"),
    }
    let setup = Setup {
        client: client.clone(),
        cache,
        events: EventPublisher::new(client.clone()),
        metrics,
        options: ControllerOptions {
            max_concurrent: args.max_concurrent_reconciles.max(1),
            retry: RetryPolicy::default(),
        },
        shutdown: shutdown.clone(),
    };
    let (controllers, synced, sources) = start_kinds(&args, &setup, &templates, &images);
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = futures::future::join_all(synced) => {
            tracing::info!("all controllers synced; ready");
            readiness.set_ready();
            tokio::spawn(object_metrics::run(sources, object_gauges, shutdown.clone()));
        }
    }
    shutdown.cancelled().await;
    readiness.set_not_ready();
    tracing::info!("shutting down");
    // Each controller stops its runs within its grace; side tasks (hand-over, rollout watch)
    // stop at their next step. The bound keeps SIGTERM prompt whatever a task waits for.
    let stopped = futures::future::join_all(controllers);
    let stopped = tokio::time::timeout(STOP_TIMEOUT, stopped).await.is_ok();
    if !stopped {
        tracing::warn!(timeout = ?STOP_TIMEOUT, "controllers did not stop in time; exiting anyway, leaving the leader Lease to expire");
    }
    finish(server, leadership, stopped).await
}

/// The operator's metric families in the registry `/metrics` encodes.
struct Metrics {
    registry: Registry,
    controllers: ControllerMetrics,
    liveness: LivenessMetrics,
    objects: ObjectMetrics,
}

impl Metrics {
    fn register() -> Self {
        let mut registry = crate::metrics::new_registry();
        let controllers = ControllerMetrics::register(&mut registry);
        let liveness = LivenessMetrics::register(&mut registry);
        let objects = ObjectMetrics::register(&mut registry);
        Metrics {
            registry,
            controllers,
            liveness,
            objects,
        }
    }
}

/// How long the operator waits for its controllers after a shutdown signal (a little more
/// than a controller's [`crate::extension::controller::SHUTDOWN_GRACE`]).
const STOP_TIMEOUT: Duration = Duration::from_secs(4);

/// Starts every enabled kind once, in the order given: each starts itself and its side tasks
/// (its `add`); this only picks the kinds and their flags. Returns the tasks to wait for on
/// shutdown, one "first list processed" signal per kind and the kinds' objects for the object
/// gauges.
fn start_kinds(
    args: &OperatorArgs,
    setup: &Setup,
    templates: &containerruntime::render::Templates,
    images: &ImageVector,
) -> (
    Vec<tokio::task::JoinHandle<()>>,
    Vec<tokio::sync::oneshot::Receiver<()>>,
    Vec<Source>,
) {
    let filter = |types: Vec<String>| Filter {
        classes: args.extension_classes.clone(),
        types,
        ignore_operation_annotation: args.ignore_operation_annotation,
    };
    let mut tasks = Vec::new();
    let mut synced = Vec::new();
    let mut sources = Vec::new();
    for name in dedup(&args.controllers) {
        let started = match name {
            ControllerName::Containerruntime => containerruntime::add::add(
                setup,
                filter(vec![containerruntime::TYPE.to_string()]),
                templates.clone(),
                images.clone(),
                containerruntime::Options {
                    test_repository: args.gvisor_installation_test_repository.clone(),
                    uninstall_timeout: Duration::from_secs(args.gvisor_uninstall_timeout_seconds),
                    kvm_machine_types: args
                        .gvisor_kvm_machine_types
                        .iter()
                        .map(|t| t.trim().to_string())
                        .filter(|t| !t.is_empty())
                        .collect(),
                },
            ),
            ControllerName::Operatingsystemconfig => operatingsystemconfig::add::add(
                setup,
                filter(args.os_types.clone()),
                args.node_agent_secrets,
            ),
            ControllerName::Worker => worker::add::add(setup, filter(args.worker_types.clone())),
        };
        tasks.extend(started.tasks);
        synced.push(started.synced);
        sources.push(started.source);
    }
    (tasks, synced, sources)
}

type ServerTask = tokio::task::JoinHandle<std::io::Result<()>>;

/// The Lease this replica holds: renewed by a task until [`Leadership::hand_over`].
struct Leadership {
    elector: LeaderElector,
    renewing: tokio::task::JoinHandle<Result<(), crate::extension::leader::LeaderError>>,
    /// Ends the renewals (cancelled by [`Leadership::hand_over`] only, not by `shutdown`:
    /// the Lease stays ours while the controllers stop).
    renew_until: CancellationToken,
}

impl Leadership {
    /// Renews the Lease won by `elector` in a task; losing it sets `leader` to 0 and cancels
    /// `shutdown` (the controllers stop and the process exits; the pod restarts as a
    /// follower).
    fn keep(
        elector: LeaderElector,
        liveness: LivenessMetrics,
        shutdown: &CancellationToken,
    ) -> Self {
        let renew_until = CancellationToken::new();
        let stop = shutdown.clone();
        let renewer = elector.clone();
        let until = renew_until.clone();
        let renewing = tokio::spawn(async move {
            let result = renewer.keep(&until).await;
            if result.is_err() {
                liveness.set_leader(false);
                stop.cancel();
            }
            result
        });
        Leadership {
            elector,
            renewing,
            renew_until,
        }
    }

    /// Stops renewing; releases the Lease when the controllers `stopped` (no run in flight
    /// any more), else leaves it to expire. Fails if leadership had been lost.
    async fn hand_over(self, stopped: bool) -> anyhow::Result<()> {
        self.renew_until.cancel();
        self.renewing.await.context("leader election task")??;
        if stopped {
            self.elector.release().await;
        }
        Ok(())
    }
}

fn spawn_server(
    listener: std::net::TcpListener,
    registry: Registry,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> ServerTask {
    let state = ServerState {
        registry: Arc::new(registry),
        readiness,
    };
    tokio::spawn(async move {
        crate::http::serve(listener, state, async move { shutdown.cancelled().await }).await
    })
}

/// Waits for the HTTP server (it stops with `shutdown`), then hands leadership over
/// ([`Leadership::hand_over`]; `stopped`: no controller run is in flight any more).
async fn finish(
    server: ServerTask,
    leadership: Option<Leadership>,
    stopped: bool,
) -> anyhow::Result<()> {
    server
        .await
        .context("HTTP server task")?
        .context("HTTP server")?;
    if let Some(leadership) = leadership {
        leadership.hand_over(stopped).await?;
    }
    Ok(())
}

fn dedup(names: &[ControllerName]) -> Vec<ControllerName> {
    let mut seen = Vec::new();
    for name in names {
        if !seen.contains(name) {
            seen.push(*name);
        }
    }
    seen
}

/// This replica's identity for leases: the pod name (downward API) or host name, plus a
/// random suffix so a restarted process never mistakes an old lease for its own.
fn identity() -> String {
    let base = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "gardener-extension-node".to_string());
    let suffix: u32 = std::process::id() ^ (chrono::Utc::now().timestamp_subsec_nanos());
    format!("{base}_{suffix:08x}")
}

/// Cancels `token` on SIGINT or SIGTERM.
pub async fn forward_signals(token: CancellationToken) {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
    tracing::info!("shutdown signal received");
    token.cancel();
}
