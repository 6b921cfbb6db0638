//! One shoot's step of the rollout watch ([`super::watch`]): list the pool's Nodes in the
//! shoot and write the OSC condition ([`super::rules`] decides it). The I/O of the watch,
//! bounded so that one shoot never holds up another: each step runs as a task of its own
//! (the watch starts it and reaps it), connecting to the shoot takes at most
//! [`CONNECT_TIMEOUT`], each read or write on the connection at most [`REQUEST_TIMEOUT`],
//! and the whole step at most [`STEP_TIMEOUT`].
//!
//! A step that cannot look at the nodes logs why (warning, naming the namespace and OSC)
//! and, when only someone acting helps or the shoot did not answer, says so in the
//! condition (`Unknown`, see [`rules::Unobservable`]); other errors are retried the next
//! round.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use chrono::Utc;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::rules::{
    self, ANNOTATION_POOL, ANNOTATION_SHIPPED_CHECKSUM, CONDITION_TYPE, TokenRefused, Unobservable,
};
use super::steering;
use crate::api::OperatingSystemConfig;
use crate::api::common::Condition;
use crate::controllers::operatingsystemconfig::nodeagent;
use crate::extension::cache::{ObjectStore, SeedCache};

/// How long connecting to a shoot's API server (TCP and TLS) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one read or write on the connection to a shoot's API server, and one request
/// to the seed, may wait.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one shoot's whole step may take (client, list, condition write).
pub const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// An access Secret by (namespace, name).
pub type Key = (String, String);

/// What every step shares: the seed client and cache, and the shoot clients by access
/// Secret with the token each was built with (built once per token).
pub struct Context {
    client: Client,
    cache: SeedCache,
    clients: Mutex<HashMap<Key, (String, Client)>>,
    /// The steering annotations last carried to each access Secret's pool Lease
    /// ([`steering`]); a step carries them again only when they differ.
    carried: Mutex<HashMap<Key, BTreeMap<String, String>>>,
    /// When each access Secret's pool was last looked at (a complete rollout is looked at
    /// again every [`QUIET_LOOK_INTERVAL`], for drift).
    looked: Mutex<HashMap<Key, std::time::Instant>>,
}

/// How often the Nodes of a pool whose rollout is complete are looked at again: drift the
/// agents report on their Nodes (`NodeAgentDrift`) reaches the condition within this.
pub const QUIET_LOOK_INTERVAL: Duration = Duration::from_secs(300);

impl Context {
    /// A context without shoot clients yet.
    pub fn new(client: Client, cache: SeedCache) -> Self {
        Context {
            client,
            cache,
            clients: Mutex::default(),
            carried: Mutex::default(),
            looked: Mutex::default(),
        }
    }

    /// Forgets the shoot clients and carried settings of access Secrets not in `live`.
    pub fn retain_clients(&self, live: impl Fn(&Key) -> bool) {
        self.clients_map().retain(|key, _| live(key));
        self.carried_map().retain(|key, _| live(key));
        self.looked_map().retain(|key, _| live(key));
    }

    fn looked_map(&self) -> std::sync::MutexGuard<'_, HashMap<Key, std::time::Instant>> {
        self.looked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a pool whose rollout is complete is due for its look ([`QUIET_LOOK_INTERVAL`]).
    pub fn quiet_look_due(&self, key: &Key) -> bool {
        self.looked_map()
            .get(key)
            .is_none_or(|at| at.elapsed() >= QUIET_LOOK_INTERVAL)
    }

    /// Notes that `key`'s pool is looked at now.
    pub fn looking(&self, key: &Key) {
        self.looked_map()
            .insert(key.clone(), std::time::Instant::now());
    }

    fn carried_map(&self) -> std::sync::MutexGuard<'_, HashMap<Key, BTreeMap<String, String>>> {
        // Inserts and removals only: a panicking step leaves the map whole.
        self.carried.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the pool Lease of `key` was last given `wanted` by this process.
    pub fn carries(&self, key: &Key, wanted: &BTreeMap<String, String>) -> bool {
        self.carried_map().get(key) == Some(wanted)
    }

    /// The pool's rollout budget from the shoot's Cluster ([`nodeagent::rollout_budget`]);
    /// `None` when the Cluster or the pool is not known.
    pub fn budget(&self, namespace: &str, pool: &str) -> Option<u32> {
        let cluster = self.cache.cluster(namespace)?;
        let shoot = cluster.shoot().ok()?;
        shoot.worker(pool).map(nodeagent::rollout_budget)
    }

    fn clients_map(&self) -> std::sync::MutexGuard<'_, HashMap<Key, (String, Client)>> {
        // A step that panicked while holding the lock left the map whole (inserts only).
        self.clients.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn known_client(&self, key: &Key, token: &str) -> Option<Client> {
        match self.clients_map().get(key) {
            Some((known, client)) if known == token => Some(client.clone()),
            _ => None,
        }
    }

    /// Whether the shoot of `namespace` has nodes to look at: known, not hibernated, not
    /// being deleted.
    pub fn shoot_running(&self, namespace: &str) -> bool {
        self.cache.cluster(namespace).is_some_and(|cluster| {
            cluster
                .shoot()
                .is_ok_and(|shoot| !shoot.is_hibernation_enabled() && !shoot.is_being_deleted())
        })
    }
}

/// Why one OSC's rollout could not be looked at.
#[derive(Debug, thiserror::Error)]
enum StepError {
    #[error("the shoot's generic token kubeconfig Secret {0} is missing or has no kubeconfig")]
    NoKubeconfig(String),
    #[error("the shoot's generic token kubeconfig is unusable")]
    Kubeconfig(#[source] crate::kubeconfig::KubeconfigError),
    #[error("the token in access Secret {secret} is unusable")]
    Token {
        secret: String,
        #[source]
        source: TokenRefused,
    },
    #[error("building the shoot client")]
    Client(#[source] kube::Error),
    #[error("{what}")]
    Api {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("{what}: no answer within {}s", .limit.as_secs())]
    TimedOut { what: &'static str, limit: Duration },
}

impl StepError {
    /// Whether the condition says so, and with which reason: a refused kubeconfig or token
    /// (only someone changing it helps) and a shoot that did not answer in time.
    fn unobservable(&self) -> Option<Unobservable> {
        match self {
            StepError::NoKubeconfig(_) | StepError::Kubeconfig(_) => Some(Unobservable::Kubeconfig),
            StepError::Token { .. } => Some(Unobservable::Token),
            StepError::TimedOut { .. } => Some(Unobservable::Unreachable),
            StepError::Api { source, .. } if timed_out(source) => Some(Unobservable::Unreachable),
            _ => None,
        }
    }
}

/// Whether an I/O time limit ended `error` (a connect, read or write timeout of the client).
fn timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(cause) = current {
        if cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        current = cause.source();
    }
    false
}

/// One OSC whose rollout is watched.
pub struct Target {
    /// The OSC's name.
    pub osc_name: String,
    key: String,
    pool: String,
    checksum: String,
    previous: Option<Condition>,
    /// The steering annotations the pool's Lease should carry ([`steering::wanted`]).
    pub wanted: BTreeMap<String, String>,
    /// The OSC's other conditions and its resourceVersion, as the store has them: the write
    /// replaces only ours, and fails (to be retried next round) if the OSC moved meanwhile.
    others: Vec<Condition>,
    resource_version: Option<String>,
}

/// The part of a stored OSC [`Target::of`] reads.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct StoredConditions {
    metadata: StoredMetadata,
    status: StoredStatus,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct StoredMetadata {
    annotations: BTreeMap<String, String>,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct StoredStatus {
    conditions: Vec<Condition>,
}

impl Target {
    /// The OSC the access Secret belongs to, when it still exists and is not being deleted;
    /// `budget` maps its pool to the budget the Shoot gives it ([`Context::budget`]).
    pub fn of(
        secret: &Secret,
        oscs: &ObjectStore,
        budget: impl FnOnce(&str) -> Option<u32>,
    ) -> Option<Self> {
        let annotations = secret.metadata.annotations.as_ref()?;
        let owner = secret
            .owner_references()
            .iter()
            .find(|o| o.kind == "OperatingSystemConfig" && o.controller == Some(true))?;
        let namespace = secret.namespace()?;
        let object = oscs.get(&namespace, &owner.name)?;
        if object.deleting || object.uid.as_deref() != Some(owner.uid.as_str()) {
            return None;
        }
        let stored = object.decode::<StoredConditions>().unwrap_or_default();
        let (ours, others): (Vec<Condition>, Vec<Condition>) = stored
            .status
            .conditions
            .into_iter()
            .partition(|c| c.type_ == CONDITION_TYPE);
        let pool = annotations.get(ANNOTATION_POOL)?.clone();
        Some(Target {
            osc_name: owner.name.clone(),
            key: nodeagent::key_of(&owner.name).to_string(),
            wanted: steering::wanted(Some(&stored.metadata.annotations), budget(&pool)),
            pool,
            checksum: annotations.get(ANNOTATION_SHIPPED_CHECKSUM)?.clone(),
            previous: ours.into_iter().next(),
            others,
            resource_version: object.resource_version.clone(),
        })
    }

    /// Whether the condition already says that every node runs this checksum.
    pub fn complete(&self) -> bool {
        rules::is_complete(self.previous.as_ref(), &self.checksum)
    }
}

/// One step: the access Secret `key`, its token as [`rules::check_token`] judged it, the OSC.
pub struct Step {
    /// The access Secret.
    pub key: Key,
    /// Its token.
    pub token: Result<String, TokenRefused>,
    /// The OSC.
    pub target: Target,
}

/// Runs `step` within [`STEP_TIMEOUT`]; logs a failure and, where `StepError::unobservable`
/// says so, writes it into the condition.
pub async fn run(context: &Context, step: Step) {
    let outcome = tokio::time::timeout(STEP_TIMEOUT, observe(context, &step))
        .await
        .unwrap_or(Err(StepError::TimedOut {
            what: "looking at the pool's Nodes in the shoot",
            limit: STEP_TIMEOUT,
        }));
    let Err(error) = outcome else {
        return;
    };
    let namespace = step.key.0.as_str();
    let message = crate::error_chain::chain(&error);
    tracing::warn!(%namespace, osc = %step.target.osc_name, error = %message, "rollout status not updated");
    if let Some(why) = error.unobservable() {
        let message = match (&error, why) {
            (StepError::Api { .. }, Unobservable::Unreachable) => format!(
                "the shoot's API server did not answer in time (connecting {}s, each read or write {}s): {message}",
                CONNECT_TIMEOUT.as_secs(),
                REQUEST_TIMEOUT.as_secs()
            ),
            _ => message,
        };
        report_unobservable(context, namespace, &step.target, why, &message).await;
    }
}

async fn observe(context: &Context, step: &Step) -> Result<(), StepError> {
    let namespace = step.key.0.as_str();
    let token = step.token.as_ref().map_err(|source| StepError::Token {
        secret: format!("{namespace}/{}", step.key.1),
        source: source.clone(),
    })?;
    let shoot = match context.known_client(&step.key, token) {
        Some(shoot) => shoot,
        None => {
            let shoot = shoot_client(context, namespace, token).await?;
            context
                .clients_map()
                .insert(step.key.clone(), (token.clone(), shoot.clone()));
            shoot
        }
    };
    let target = &step.target;
    let selector = format!(
        "{}={}",
        crate::api::constants::LABEL_WORKER_POOL,
        target.pool
    );
    let nodes = Api::<Node>::all(shoot.clone())
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| StepError::Api {
            what: "listing the pool's Nodes in the shoot",
            source,
        })?;
    let mut summary = rules::summarize(&nodes.items, &target.pool, &target.key, &target.checksum);
    summary.paused = steering::paused(&target.wanted).map(str::to_string);
    let condition = rules::condition(
        &summary,
        &target.checksum,
        target.previous.as_ref(),
        Utc::now(),
    );
    if target.previous.as_ref() != Some(&condition) {
        write_condition(&context.client, namespace, target, condition).await?;
    }
    if !context.carries(&step.key, &target.wanted) {
        let leases = Api::namespaced(shoot, crate::api::constants::NAMESPACE_KUBE_SYSTEM);
        carry(&leases, target).await?;
        context
            .carried_map()
            .insert(step.key.clone(), target.wanted.clone());
    }
    Ok(())
}

/// Gives the pool's Lease `kube-system/<key>` the steering annotations `target.wanted`
/// ([`steering::lease_patch`]: only those keys, not the slots or the `spec`), creating it
/// with them when no agent has yet (the agents keep what they read when they write).
async fn carry(leases: &Api<Lease>, target: &Target) -> Result<(), StepError> {
    let api_error = |what| move |source| StepError::Api { what, source };
    let what = "reading the pool's Lease in the shoot";
    let lease = leases.get_opt(&target.key).await.map_err(api_error(what))?;
    let current = lease.as_ref().and_then(|l| l.metadata.annotations.as_ref());
    let Some(patch) = steering::lease_patch(current, &target.wanted) else {
        return Ok(());
    };
    tracing::info!(osc = %target.osc_name, lease = %target.key, settings = ?target.wanted, "carrying the rollout settings to the pool's Lease");
    if lease.is_some() {
        let what = "annotating the pool's Lease in the shoot";
        leases
            .patch(&target.key, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(api_error(what))?;
        return Ok(());
    }
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(target.key.clone()),
            annotations: Some(target.wanted.clone()),
            ..ObjectMeta::default()
        },
        spec: None,
    };
    let what = "creating the pool's Lease in the shoot";
    leases
        .create(&PostParams::default(), &lease)
        .await
        .map_err(api_error(what))?;
    Ok(())
}

/// Sets the condition to `Unknown` for `why` with `message`, unless it says so already; a
/// failed write is logged and retried the next round.
async fn report_unobservable(
    context: &Context,
    namespace: &str,
    target: &Target,
    why: Unobservable,
    message: &str,
) {
    let condition = rules::unobservable(why, message, target.previous.as_ref(), Utc::now());
    if target.previous.as_ref() == Some(&condition) {
        return;
    }
    let write = write_condition(&context.client, namespace, target, condition);
    let result = tokio::time::timeout(REQUEST_TIMEOUT, write)
        .await
        .unwrap_or(Err(StepError::TimedOut {
            what: "writing the OSC condition",
            limit: REQUEST_TIMEOUT,
        }));
    if let Err(error) = result {
        tracing::warn!(%namespace, osc = %target.osc_name, error = %crate::error_chain::chain(&error), "rollout condition not updated");
    }
}

/// Replaces our condition in the OSC's `status.conditions`, keeping any others.
async fn write_condition(
    client: &Client,
    namespace: &str,
    target: &Target,
    condition: Condition,
) -> Result<(), StepError> {
    tracing::info!(%namespace, osc = %target.osc_name, status = ?condition.status, reason = %condition.reason, message = %condition.message, "node-agent rollout");
    let mut conditions = target.others.clone();
    conditions.push(condition);
    let mut patch = json!({"status": {"conditions": conditions}});
    if let Some(version) = &target.resource_version {
        patch["metadata"] = json!({"resourceVersion": version});
    }
    Api::<OperatingSystemConfig>::namespaced(client.clone(), namespace)
        .patch_status(
            &target.osc_name,
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
        .map_err(|source| StepError::Api {
            what: "writing the OSC condition",
            source,
        })?;
    Ok(())
}

/// A client for the shoot: address and CA from the generic token kubeconfig (nothing else of
/// it), the token of our access Secret (checked by [`rules::check_token`]), and the time
/// limits of the module docs.
async fn shoot_client(
    context: &Context,
    namespace: &str,
    token: &str,
) -> Result<Client, StepError> {
    let secret_name = context
        .cache
        .cluster(namespace)
        .map(|c| c.generic_token_kubeconfig_secret_name().to_string())
        .unwrap_or_else(|| crate::api::constants::GENERIC_TOKEN_KUBECONFIG_SECRET_NAME.to_string());
    let secret_key = format!("{namespace}/{secret_name}");
    let secret = Api::<Secret>::namespaced(context.client.clone(), namespace)
        .get_opt(&secret_name)
        .await
        .map_err(|source| StepError::Api {
            what: "reading the generic token kubeconfig",
            source,
        })?
        .ok_or_else(|| StepError::NoKubeconfig(secret_key.clone()))?;
    let yaml = secret
        .data
        .as_ref()
        .and_then(|d| d.get("kubeconfig"))
        .and_then(|k| String::from_utf8(k.0.clone()).ok())
        .ok_or_else(|| StepError::NoKubeconfig(secret_key.clone()))?;
    let origin = format!("Secret {secret_key}");
    let endpoint =
        crate::kubeconfig::shoot_endpoint(&yaml, &origin).map_err(StepError::Kubeconfig)?;
    let mut config = crate::kubeconfig::token_config(&endpoint, token, &origin)
        .await
        .map_err(StepError::Kubeconfig)?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(REQUEST_TIMEOUT);
    config.write_timeout = Some(REQUEST_TIMEOUT);
    crate::kubeconfig::build(config, "operator").map_err(StepError::Client)
}
