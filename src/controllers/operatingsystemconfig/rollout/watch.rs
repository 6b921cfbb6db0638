//! Keeps the [`rules::CONDITION_TYPE`] condition of the `reconcile` OSCs whose
//! node-agent secret we ship, by listing the pool's Nodes in the shoot (the I/O around
//! [`rules`]; runs beside the OSC controller, under its leadership).
//!
//! What it reads: a reflector on our access Secrets only (label
//! [`rules::LABEL_ACCESS`]; each names its OSC as controller owner and carries the
//! pool, the shipped checksum and, once gardener-resource-manager has written it, the shoot
//! token), the OSC store of the controller, the Clusters of the [`SeedCache`], and — once per
//! token — the shoot's generic token kubeconfig Secret for the API server's address and CA.
//! The shoot client is built from exactly that address, that CA and our token
//! ([`crate::kubeconfig::shoot_endpoint`]): a generic token kubeconfig with any other field
//! (a program to run, a file to read, other credentials) is refused, and the OSC condition
//! says so (`Unknown`, [`rules::REASON_KUBECONFIG_UNUSABLE`], naming the Secret). A token
//! that is no printable ASCII ([`rules::check_token`]: a line break, a control character) is
//! refused likewise ([`rules::REASON_TOKEN_UNUSABLE`]) and never reaches a client builder.
//!
//! One shoot never holds up another: every [`INTERVAL`] a round starts one [`step`] per OSC
//! to look at, each a task of its own bounded by [`step::STEP_TIMEOUT`] (and its requests by
//! [`step::CONNECT_TIMEOUT`] and [`step::REQUEST_TIMEOUT`]); an OSC whose step is still
//! running is skipped until it ends, the others go on. A shoot that does not answer in time
//! turns its condition `Unknown` ([`rules::REASON_SHOOT_UNREACHABLE`]). A step that panics is
//! logged (error, naming the OSC) and the OSC is looked at again the next round; should the
//! round loop itself panic, [`run`] logs it and starts it again after [`INTERVAL`], so the
//! watch never stops while the operator runs.
//!
//! What it costs: every [`INTERVAL`], one list of the pool's Nodes (label selector) per OSC
//! whose condition does not say yet that every node runs the shipped checksum, or whose
//! steering settings changed (then one GET and at most one write of the pool's Lease); for an
//! OSC whose rollout is complete one list every [`step::QUIET_LOOK_INTERVAL`] (drift the
//! agents report); nothing for a hibernated or deleting shoot. It writes the
//! OSC status only when the condition changes (from the stored OSC, with its resourceVersion
//! as precondition: a conflict is retried the next round).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::rules;
use super::step::{self, Context, Key, Step, Target};
use crate::extension::cache::{ObjectStore, SeedCache, SyncedStore};

/// How often unfinished rollouts are looked at.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// Our access Secrets, stored whole (the token is what [`run`] builds shoot clients with).
pub type AccessSecrets = SyncedStore<Secret>;

/// Starts the reflector on our access Secrets (until `shutdown`); its store is read by
/// [`run`] and by the OSC runs, which write an access Secret only when the stored one differs.
pub fn access_secrets(client: &Client, shutdown: &CancellationToken) -> AccessSecrets {
    let config = watcher::Config::default().labels(&format!("{}=true", rules::LABEL_ACCESS));
    SyncedStore::start(Api::all(client.clone()), config, shutdown)
}

/// Runs until `shutdown` (see the module docs); `access` is [`access_secrets`]'. Supervises
/// the round loop: a panic in it is logged and the loop starts again after [`INTERVAL`].
pub async fn run(
    client: Client,
    cache: SeedCache,
    oscs: ObjectStore,
    access: AccessSecrets,
    shutdown: CancellationToken,
) {
    let context = Arc::new(Context::new(client, cache));
    loop {
        let rounds = tokio::spawn(rounds(
            Arc::clone(&context),
            oscs.clone(),
            access.store.clone(),
            shutdown.clone(),
        ));
        match rounds.await {
            Ok(()) => return,
            Err(error) => tracing::error!(
                error = %describe(error),
                "the node-agent rollout watch failed; starting it again"
            ),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(INTERVAL) => {}
        }
    }
}

async fn rounds(
    context: Arc<Context>,
    oscs: ObjectStore,
    access: Store<Secret>,
    shutdown: CancellationToken,
) {
    let mut steps = Steps::default();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(INTERVAL) => {}
        }
        let ready = tokio::select! {
            _ = shutdown.cancelled() => break,
            ready = access.wait_until_ready() => ready,
        };
        if ready.is_err() {
            break;
        }
        round(&context, &oscs, &access, &mut steps);
    }
}

/// Starts a step for every OSC to look at whose previous step has ended.
fn round(context: &Arc<Context>, oscs: &ObjectStore, access: &Store<Secret>, steps: &mut Steps) {
    steps.reap();
    let secrets = access.state();
    for secret in &secrets {
        let Some(step) = step_for(context, secret, oscs) else {
            continue;
        };
        if steps.running(&step.key) {
            tracing::debug!(namespace = %step.key.0, osc = %step.target.osc_name, "previous look still running");
            continue;
        }
        steps.start(Arc::clone(context), step);
    }
    // Forget the clients and stop the steps of access Secrets that are gone.
    let live: HashSet<Key> = secrets
        .iter()
        .filter_map(|s| Some((s.namespace()?, s.name_any())))
        .collect();
    context.retain_clients(|key| live.contains(key));
    steps.retain(|key| live.contains(key));
}

/// The step for `secret`'s OSC, when its rollout is to be looked at.
fn step_for(context: &Context, secret: &Secret, oscs: &ObjectStore) -> Option<Step> {
    let namespace = secret.namespace()?;
    let target = Target::of(secret, oscs, |pool| context.budget(&namespace, pool))?;
    let key = (namespace.clone(), secret.name_any());
    let carried = context.carries(&key, &target.wanted);
    let quiet = target.complete() && carried && !context.quiet_look_due(&key);
    if quiet || !context.shoot_running(&namespace) {
        return None;
    }
    let data = secret.data.as_ref().and_then(|d| d.get("token"));
    let Some(token) = rules::check_token(data.map(|t| t.0.as_slice())) else {
        tracing::debug!(%namespace, osc = %target.osc_name, "no shoot token yet");
        return None;
    };
    context.looking(&key);
    Some(Step {
        key,
        token: token.map(str::to_string),
        target,
    })
}

/// The steps started and not reaped yet, by access Secret; aborted when dropped (shutdown,
/// or the round loop panicking).
#[derive(Default)]
struct Steps {
    tasks: HashMap<Key, (String, JoinHandle<()>)>,
}

impl Steps {
    fn start(&mut self, context: Arc<Context>, step: Step) {
        let key = step.key.clone();
        let osc = step.target.osc_name.clone();
        let task = tokio::spawn(async move { step::run(&context, step).await });
        self.tasks.insert(key, (osc, task));
    }

    fn running(&self, key: &Key) -> bool {
        self.tasks.contains_key(key)
    }

    /// Removes the ended steps; logs those that panicked.
    fn reap(&mut self) {
        self.tasks.retain(|(namespace, _), (osc, task)| {
            if !task.is_finished() {
                return true;
            }
            if let Some(Err(error)) = task.now_or_never() {
                tracing::error!(%namespace, %osc, error = %describe(error), "looking at the node-agent rollout failed; trying again next round");
            }
            false
        });
    }

    fn retain(&mut self, live: impl Fn(&Key) -> bool) {
        self.tasks.retain(|key, (_, task)| {
            let keep = live(key);
            if !keep {
                task.abort();
            }
            keep
        });
    }
}

impl Drop for Steps {
    fn drop(&mut self) {
        for (_, task) in self.tasks.values() {
            task.abort();
        }
    }
}

/// A failed task in one line: its panic message, or that it was cancelled.
fn describe(error: tokio::task::JoinError) -> String {
    if !error.is_panic() {
        return error.to_string();
    }
    let payload = error.into_panic();
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string());
    format!("panicked: {message}")
}
