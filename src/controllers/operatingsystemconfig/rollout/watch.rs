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
//! says so (`Unknown`, [`rules::REASON_KUBECONFIG_UNUSABLE`], naming the Secret).
//!
//! What it costs: every [`INTERVAL`], one list of the pool's Nodes (label selector) per OSC
//! whose condition does not say yet that every node runs the shipped checksum; nothing for
//! an OSC whose rollout is complete, nothing for a hibernated or deleting shoot. It writes the
//! OSC status only when the condition changes (from the stored OSC, with its resourceVersion
//! as precondition: a conflict is retried the next round).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::Utc;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::rules::{self, ANNOTATION_POOL, ANNOTATION_SHIPPED_CHECKSUM, CONDITION_TYPE};
use crate::api::OperatingSystemConfig;
use crate::api::common::Condition;
use crate::controllers::operatingsystemconfig::nodeagent;
use crate::extension::cache::{ObjectStore, SeedCache, SyncedStore};

/// How often unfinished rollouts are looked at.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// Shoot clients by access Secret (namespace, name), with the token each was built with.
type ShootClients = HashMap<(String, String), (String, Client)>;

/// Why one OSC's rollout could not be looked at (logged; the next round tries again).
#[derive(Debug, thiserror::Error)]
enum WatchError {
    #[error("the shoot's generic token kubeconfig Secret {0} is missing or has no kubeconfig")]
    NoKubeconfig(String),
    #[error("the shoot's generic token kubeconfig is unusable")]
    Kubeconfig(#[source] crate::kubeconfig::KubeconfigError),
    #[error("building the shoot client")]
    Client(#[source] kube::Error),
    #[error("{what}")]
    Api {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
}

impl WatchError {
    /// The generic token kubeconfig Secret is missing or refused: only someone changing it
    /// helps, so the OSC condition says so (other errors are logged and retried).
    fn is_unusable_kubeconfig(&self) -> bool {
        matches!(
            self,
            WatchError::NoKubeconfig(_) | WatchError::Kubeconfig(_)
        )
    }
}

/// Our access Secrets, stored whole (the token is what [`run`] builds shoot clients with).
pub type AccessSecrets = SyncedStore<Secret>;

/// Starts the reflector on our access Secrets (until `shutdown`); its store is read by
/// [`run`] and by the OSC runs, which write an access Secret only when the stored one differs.
pub fn access_secrets(client: &Client, shutdown: &CancellationToken) -> AccessSecrets {
    let config = watcher::Config::default().labels(&format!("{}=true", rules::LABEL_ACCESS));
    SyncedStore::start(Api::all(client.clone()), config, shutdown)
}

/// Runs until `shutdown` (see the module docs); `store` is [`access_secrets`]'.
pub async fn run(
    client: Client,
    cache: SeedCache,
    oscs: ObjectStore,
    access: AccessSecrets,
    shutdown: CancellationToken,
) {
    let store = access.store;
    let mut clients = ShootClients::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(INTERVAL) => {}
        }
        let ready = tokio::select! {
            _ = shutdown.cancelled() => break,
            ready = store.wait_until_ready() => ready,
        };
        if ready.is_err() {
            break;
        }
        round(&client, &cache, &oscs, &store, &mut clients).await;
    }
}

async fn round(
    client: &Client,
    cache: &SeedCache,
    oscs: &ObjectStore,
    access: &Store<Secret>,
    clients: &mut ShootClients,
) {
    let secrets = access.state();
    for secret in &secrets {
        let namespace = secret.namespace().unwrap_or_default();
        let Some(target) = Target::of(secret, oscs) else {
            continue;
        };
        if target.complete() || !shoot_running(cache, &namespace) {
            continue;
        }
        let Some(token) = token_of(secret) else {
            tracing::debug!(%namespace, osc = %target.osc_name, "no shoot token yet");
            continue;
        };
        let key = (namespace.clone(), secret.name_any());
        if let Err(error) = observe(client, cache, clients, key, &token, &target).await {
            let message = crate::error_chain::chain(&error);
            tracing::warn!(%namespace, osc = %target.osc_name, error = %message, "rollout status not updated");
            if error.is_unusable_kubeconfig() {
                report_unusable(client, &namespace, &target, &message).await;
            }
        }
    }
    // Forget the clients of access Secrets that are gone.
    let live: HashSet<(String, String)> = secrets
        .iter()
        .filter_map(|s| Some((s.namespace()?, s.name_any())))
        .collect();
    clients.retain(|key, _| live.contains(key));
}

/// One OSC whose rollout is watched.
struct Target {
    osc_name: String,
    key: String,
    pool: String,
    checksum: String,
    previous: Option<Condition>,
    /// The OSC's other conditions and its resourceVersion, as the store has them: the write
    /// replaces only ours, and fails (to be retried next round) if the OSC moved meanwhile.
    others: Vec<Condition>,
    resource_version: Option<String>,
}

/// The part of a stored OSC [`Target::of`] reads.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct StoredConditions {
    status: StoredStatus,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct StoredStatus {
    conditions: Vec<Condition>,
}

impl Target {
    /// The OSC the access Secret belongs to, when it still exists and is not being deleted.
    fn of(secret: &Secret, oscs: &ObjectStore) -> Option<Self> {
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
        let (ours, others): (Vec<Condition>, Vec<Condition>) = object
            .decode::<StoredConditions>()
            .map(|stored| stored.status.conditions)
            .unwrap_or_default()
            .into_iter()
            .partition(|c| c.type_ == CONDITION_TYPE);
        Some(Target {
            osc_name: owner.name.clone(),
            key: nodeagent::key_of(&owner.name).to_string(),
            pool: annotations.get(ANNOTATION_POOL)?.clone(),
            checksum: annotations.get(ANNOTATION_SHIPPED_CHECKSUM)?.clone(),
            previous: ours.into_iter().next(),
            others,
            resource_version: object.resource_version.clone(),
        })
    }

    /// Whether the condition already says that every node runs this checksum.
    fn complete(&self) -> bool {
        rules::is_complete(self.previous.as_ref(), &self.checksum)
    }
}

/// The shoot has nodes to look at: known, not hibernated, not being deleted.
fn shoot_running(cache: &SeedCache, namespace: &str) -> bool {
    cache.cluster(namespace).is_some_and(|cluster| {
        cluster
            .shoot()
            .is_ok_and(|shoot| !shoot.is_hibernation_enabled() && !shoot.is_being_deleted())
    })
}

fn token_of(secret: &Secret) -> Option<String> {
    let token = secret.data.as_ref()?.get("token")?;
    String::from_utf8(token.0.clone())
        .ok()
        .filter(|t| !t.is_empty())
}

async fn observe(
    client: &Client,
    cache: &SeedCache,
    clients: &mut ShootClients,
    key: (String, String),
    token: &str,
    target: &Target,
) -> Result<(), WatchError> {
    let namespace = key.0.as_str();
    let shoot = match clients.get(&key) {
        Some((known, shoot)) if known == token => shoot.clone(),
        _ => {
            let shoot = shoot_client(client, cache, namespace, token).await?;
            clients.insert(key.clone(), (token.to_string(), shoot.clone()));
            shoot
        }
    };
    let selector = format!(
        "{}={}",
        crate::api::constants::LABEL_WORKER_POOL,
        target.pool
    );
    let nodes = Api::<Node>::all(shoot)
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| WatchError::Api {
            what: "listing the pool's Nodes in the shoot",
            source,
        })?;
    let summary = rules::summarize(&nodes.items, &target.pool, &target.key, &target.checksum);
    let condition = rules::condition(
        &summary,
        &target.checksum,
        target.previous.as_ref(),
        Utc::now(),
    );
    if target.previous.as_ref() == Some(&condition) {
        return Ok(());
    }
    write_condition(client, namespace, target, condition).await
}

/// Sets the condition to `Unknown` with `message` (the Secret and why it is unusable), unless
/// it says so already; a failed write is logged and retried the next round.
async fn report_unusable(client: &Client, namespace: &str, target: &Target, message: &str) {
    let condition = rules::unusable_kubeconfig(message, target.previous.as_ref(), Utc::now());
    if target.previous.as_ref() == Some(&condition) {
        return;
    }
    if let Err(error) = write_condition(client, namespace, target, condition).await {
        tracing::warn!(%namespace, osc = %target.osc_name, error = %crate::error_chain::chain(&error), "rollout condition not updated");
    }
}

/// Replaces our condition in the OSC's `status.conditions`, keeping any others.
async fn write_condition(
    client: &Client,
    namespace: &str,
    target: &Target,
    condition: Condition,
) -> Result<(), WatchError> {
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
        .map_err(|source| WatchError::Api {
            what: "writing the OSC condition",
            source,
        })?;
    Ok(())
}

/// A client for the shoot: address and CA from the generic token kubeconfig (nothing else of
/// it), the token of our access Secret.
async fn shoot_client(
    client: &Client,
    cache: &SeedCache,
    namespace: &str,
    token: &str,
) -> Result<Client, WatchError> {
    let secret_name = cache
        .cluster(namespace)
        .map(|c| c.generic_token_kubeconfig_secret_name().to_string())
        .unwrap_or_else(|| crate::api::constants::GENERIC_TOKEN_KUBECONFIG_SECRET_NAME.to_string());
    let secret_key = format!("{namespace}/{secret_name}");
    let secret = Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(&secret_name)
        .await
        .map_err(|source| WatchError::Api {
            what: "reading the generic token kubeconfig",
            source,
        })?
        .ok_or_else(|| WatchError::NoKubeconfig(secret_key.clone()))?;
    let yaml = secret
        .data
        .as_ref()
        .and_then(|d| d.get("kubeconfig"))
        .and_then(|k| String::from_utf8(k.0.clone()).ok())
        .ok_or_else(|| WatchError::NoKubeconfig(secret_key.clone()))?;
    let origin = format!("Secret {secret_key}");
    let endpoint =
        crate::kubeconfig::shoot_endpoint(&yaml, &origin).map_err(WatchError::Kubeconfig)?;
    let config = crate::kubeconfig::token_config(&endpoint, token, &origin)
        .await
        .map_err(WatchError::Kubeconfig)?;
    crate::kubeconfig::build(config, "operator").map_err(WatchError::Client)
}
