//! Who ships the node-agent secrets of a shoot: gardenlet or this extension
//! (`--node-agent-secrets=auto|always|never`).
//!
//! Current gardenlet releases render the secret `kube-system/<key>` of every worker pool
//! themselves and ship them through their ManagedResource `shoot-gardener-node-agent`
//! (label `origin=gardener`) in the shoot namespace (gardener
//! `pkg/gardenlet/operation/botanist/operatingsystemconfig.go`). Two ManagedResources owning
//! one object make gardener-resource-manager flip its `resources.gardener.cloud/origin`
//! between them on every sync, and the deletion of either one would delete the Secret. So in
//! `auto` mode (the default) we ship ours only while that ManagedResource is absent, and hand
//! the Secret over in both directions without it ever leaving the shoot:
//!
//! - **gardenlet's appears**: ours is released — ignored and `keepObjects: true`, then
//!   deleted with its secrets — so the Secret stays and gardenlet's ManagedResource adopts it.
//! - **gardenlet's disappears** (or starts deleting): every `reconcile` OSC of ours in the
//!   namespace is shipped again right away; our ManagedResource adopts the Secret.
//!
//! The Secret we ship carries `resources.gardener.cloud/keep-object: "true"`: a node needs it
//! to join and to apply its configuration, so no ManagedResource deletion may remove it while
//! another owner may still want it (gardener-resource-manager keeps objects with that
//! annotation and leaves it in place when another ManagedResource adopts the object). When
//! we delete an OSC whose Secret we own, the stamp is removed first ([`super::delete`]), so a
//! removed pool's Secret still leaves the shoot.
//!
//! [`GardenletDelivery`] is fed by one watch on ManagedResources named
//! `shoot-gardener-node-agent` (a field selector: nothing else is transferred); [`run`]
//! performs the hand-overs when the set of namespaces changes. The OSC reconcile reads the
//! same set, so both agree on who ships.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures::{StreamExt, TryStreamExt};
use kube::api::ListParams;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Error, OscActuator, nodeagent, reconcile};
use crate::api::operatingsystemconfig::OperatingSystemConfigPurpose;
use crate::api::{ExtensionObject, LastOperationType, ManagedResource, OperatingSystemConfig};
use crate::extension::managed_resource::{self, ORIGIN};
use crate::extension::operation;
use crate::extension::predicate::Filter;

/// Name of gardenlet's ManagedResource for the node-agent secrets.
pub const GARDENLET_MANAGED_RESOURCE: &str = "shoot-gardener-node-agent";
/// Value of the `origin` label on gardenlet's ManagedResources.
pub const GARDENLET_ORIGIN: &str = "gardener";

/// `--node-agent-secrets`: who ships the node-agent secrets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum NodeAgentSecrets {
    /// Ship ours only while gardenlet's ManagedResource is absent in the namespace.
    #[default]
    Auto,
    /// Always ship ours (gardenlets that do not ship them).
    Always,
    /// Never ship ours (and release any we shipped before).
    Never,
}

impl NodeAgentSecrets {
    /// Whether we ship in a namespace where gardenlet does (`gardenlet_ships`) or not (pure).
    pub fn we_ship(self, gardenlet_ships: bool) -> bool {
        match self {
            NodeAgentSecrets::Auto => !gardenlet_ships,
            NodeAgentSecrets::Always => true,
            NodeAgentSecrets::Never => false,
        }
    }
}

/// Whether gardenlet's ManagedResource counts as shipping: present, labelled as gardenlet's,
/// and not being deleted (pure).
pub fn gardenlet_ships(managed_resource: &ManagedResource) -> bool {
    managed_resource.name_any() == GARDENLET_MANAGED_RESOURCE
        && managed_resource.labels().get("origin").map(String::as_str) == Some(GARDENLET_ORIGIN)
        && managed_resource.metadata.deletion_timestamp.is_none()
}

/// How long a reconcile waits for the first list of gardenlet's ManagedResources before it
/// fails (and is retried with backoff) instead of guessing.
pub const SYNC_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// When a failed hand-over is tried again.
const RETRY: std::time::Duration = std::time::Duration::from_secs(10);

/// The namespaces in which gardenlet ships the node-agent secrets, as last seen by the watch.
#[derive(Debug)]
pub struct GardenletDelivery {
    namespaces: Mutex<HashSet<String>>,
    synced: tokio::sync::watch::Sender<bool>,
}

impl Default for GardenletDelivery {
    fn default() -> Self {
        GardenletDelivery {
            namespaces: Mutex::default(),
            synced: tokio::sync::watch::Sender::new(false),
        }
    }
}

impl GardenletDelivery {
    /// Whether gardenlet ships in `namespace`; waits (up to [`SYNC_WAIT`]) for the watch's
    /// first list so a reconcile right after start-up never decides on an empty set.
    pub async fn ships(&self, namespace: &str) -> Result<bool, Error> {
        let mut synced = self.synced.subscribe();
        let waited = tokio::time::timeout(SYNC_WAIT, synced.wait_for(|synced| *synced)).await;
        if !matches!(waited, Ok(Ok(_))) {
            return Err(Error::DeliveryUnknown);
        }
        Ok(self.lock().contains(namespace))
    }

    /// Records the state of one namespace; returns whether it changed.
    fn set(&self, namespace: &str, ships: bool) -> bool {
        let mut namespaces = self.lock();
        if ships {
            namespaces.insert(namespace.to_string())
        } else {
            namespaces.remove(namespace)
        }
    }

    /// Replaces the whole set (after a (re)list); returns the namespaces that changed.
    fn replace(&self, now: HashSet<String>) -> Vec<String> {
        let mut namespaces = self.lock();
        let changed = namespaces.symmetric_difference(&now).cloned().collect();
        *namespaces = now;
        changed
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.namespaces.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Watches gardenlet's ManagedResources and hands the secrets over when a namespace changes
/// sides, until `shutdown`. In `always`/`never` mode only the initial pass runs (a `never`
/// operator releases what an earlier configuration shipped).
pub async fn run(actuator: OscActuator, filter: Filter, shutdown: CancellationToken) {
    let (changes, mut changed) = mpsc::unbounded_channel::<Option<String>>();
    let delivery = Arc::clone(&actuator.delivery);
    let client = actuator.client.clone();
    let retries = changes.clone();
    let watch = tokio::spawn(async move {
        watch_gardenlet(client, delivery, changes).await;
    });
    loop {
        let next = tokio::select! {
            _ = shutdown.cancelled() => break,
            next = changed.recv() => next,
        };
        let Some(next) = next else { break };
        // `None`: the first list is in; look at every namespace once.
        let result = match &next {
            Some(namespace) => hand_over(&actuator, &filter, namespace).await,
            None => initial_pass(&actuator, &filter).await,
        };
        if let Err(error) = result {
            tracing::error!(error = %crate::extension::error::chain(&error), retry_in = ?RETRY, "node-agent secret hand-over failed");
            let retries = retries.clone();
            tokio::spawn(async move {
                tokio::time::sleep(RETRY).await;
                let _ = retries.send(next);
            });
        }
    }
    watch.abort();
}

async fn watch_gardenlet(
    client: kube::Client,
    delivery: Arc<GardenletDelivery>,
    changes: mpsc::UnboundedSender<Option<String>>,
) {
    let api: Api<ManagedResource> = Api::all(client);
    let config = watcher::Config::default()
        .fields(&format!("metadata.name={GARDENLET_MANAGED_RESOURCE}"))
        .labels(&format!("origin={GARDENLET_ORIGIN}"));
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let mut relisted: Option<HashSet<String>> = None;
    let mut first = true;
    loop {
        let event = match stream.try_next().await {
            Ok(Some(event)) => event,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(%error, "watch of gardenlet's node-agent ManagedResources failed; retrying");
                continue;
            }
        };
        let mut changed = Vec::new();
        match event {
            Event::Init => relisted = Some(HashSet::new()),
            Event::InitApply(mr) => {
                if let Some(seen) = relisted.as_mut()
                    && gardenlet_ships(&mr)
                {
                    seen.insert(mr.namespace().unwrap_or_default());
                }
            }
            Event::InitDone => {
                if let Some(seen) = relisted.take() {
                    changed = delivery.replace(seen);
                }
                if first {
                    first = false;
                    delivery.synced.send_replace(true);
                    let _ = changes.send(None);
                    continue;
                }
            }
            Event::Apply(mr) => {
                let namespace = mr.namespace().unwrap_or_default();
                if delivery.set(&namespace, gardenlet_ships(&mr)) {
                    changed.push(namespace);
                }
            }
            Event::Delete(mr) => {
                let namespace = mr.namespace().unwrap_or_default();
                if delivery.set(&namespace, false) {
                    changed.push(namespace);
                }
            }
        }
        for namespace in changed {
            tracing::info!(%namespace, gardenlet_ships = delivery.lock().contains(&namespace), "node-agent secret delivery changed sides");
            let _ = changes.send(Some(namespace));
        }
    }
}

/// After start-up: release ours wherever we must not ship, and ship where ours is missing
/// (gardenlet's ManagedResource may have come or gone while we were not running).
async fn initial_pass(actuator: &OscActuator, filter: &Filter) -> Result<(), Error> {
    let ours = list_ours(actuator, None).await?;
    let mut namespaces: HashSet<String> = ours.iter().filter_map(|mr| mr.namespace()).collect();
    let oscs: Api<OperatingSystemConfig> = Api::all(actuator.client.clone());
    let all = oscs
        .list(&ListParams::default())
        .await
        .map_err(list_error("OperatingSystemConfigs", ""))?;
    let existing: HashSet<(String, String)> = ours
        .iter()
        .map(|mr| (mr.namespace().unwrap_or_default(), mr.name_any()))
        .collect();
    for osc in all.items.iter().filter(|osc| shippable(osc, filter)) {
        let namespace = osc.namespace().unwrap_or_default();
        let mr = super::node_agent_managed_resource(osc);
        if !existing.contains(&(namespace.clone(), mr)) {
            namespaces.insert(namespace);
        }
    }
    for namespace in namespaces {
        hand_over(actuator, filter, &namespace).await?;
    }
    Ok(())
}

/// Brings one namespace to the side the mode and gardenlet's ManagedResource ask for.
pub async fn hand_over(
    actuator: &OscActuator,
    filter: &Filter,
    namespace: &str,
) -> Result<(), Error> {
    let gardenlet = actuator.delivery.ships(namespace).await?;
    if actuator.node_agent_secrets.we_ship(gardenlet) {
        let oscs: Api<OperatingSystemConfig> = Api::namespaced(actuator.client.clone(), namespace);
        let list = oscs
            .list(&ListParams::default())
            .await
            .map_err(list_error("OperatingSystemConfigs", namespace))?;
        // The pools' budgets come from the Cluster, read once for the namespace when an OSC
        // is to be shipped; without it the next reconcile adds them.
        let mut cluster = None;
        for listed in list.items.iter().filter(|osc| shippable(osc, filter)) {
            // Read it again right before writing: the list may be older than a migrate
            // gardenlet has asked for since.
            let Some(osc) = oscs
                .get_opt(&listed.name_any())
                .await
                .map_err(list_error("OperatingSystemConfigs", namespace))?
                .filter(|osc| shippable(osc, filter))
            else {
                continue;
            };
            tracing::info!(%namespace, osc = %osc.name_any(), "taking over the node-agent secret");
            if cluster.is_none() {
                cluster = Some(
                    crate::extension::cluster::lookup(&actuator.client, None, namespace)
                        .await
                        .ok()
                        .flatten(),
                );
            }
            let shoot = cluster.as_ref().and_then(Option::as_ref).map(|c| &c.shoot);
            reconcile::ship_node_agent_secret(actuator, &osc, shoot).await?;
        }
    } else {
        for mr in list_ours(actuator, Some(namespace)).await? {
            tracing::info!(%namespace, managed_resource = %mr.name_any(), gardenlet, "releasing the node-agent secret (keepObjects) to gardenlet");
            release(actuator, namespace, &mr.name_any()).await?;
        }
    }
    Ok(())
}

/// Leaves the shoot's Secret in place and removes our ManagedResource and its secrets
/// ([`managed_resource::release_objects`]: GRM does not apply ours once more on the way out,
/// so gardenlet's ManagedResource is the only one writing the Secret from then on).
pub async fn release(actuator: &OscActuator, namespace: &str, name: &str) -> Result<(), Error> {
    managed_resource::release_objects(&actuator.client, namespace, name).await?;
    Ok(())
}

/// A `reconcile` OSC of ours that is live: not deleting, not migrated, not waiting for state.
fn shippable(osc: &OperatingSystemConfig, filter: &Filter) -> bool {
    let last = osc
        .default_status()
        .and_then(|status| status.last_operation.as_ref());
    let deleting = osc.metadata.deletion_timestamp.is_some();
    // A migrate or restore that is asked for or unfinished belongs to the reconciler alone:
    // shipping here would put the secret back behind a migrate that just removed it.
    let plain_reconcile = matches!(
        operation::operation_type(osc.annotations(), deleting, last),
        LastOperationType::Reconcile | LastOperationType::Create
    );
    osc.spec.purpose == OperatingSystemConfigPurpose::Reconcile
        && filter.accepts(osc.default_spec())
        && !deleting
        && plain_reconcile
        && !operation::is_waiting_for_state(osc.annotations())
        && !operation::is_migrated(last)
}

/// Our node-agent ManagedResources (label `origin=<ours>`, name `extension-osc-*`).
async fn list_ours(
    actuator: &OscActuator,
    namespace: Option<&str>,
) -> Result<Vec<ManagedResource>, Error> {
    let api: Api<ManagedResource> = match namespace {
        Some(namespace) => Api::namespaced(actuator.client.clone(), namespace),
        None => Api::all(actuator.client.clone()),
    };
    let list = api
        .list(&ListParams::default().labels(&format!("origin={ORIGIN}")))
        .await
        .map_err(list_error(
            "ManagedResources",
            namespace.unwrap_or_default(),
        ))?;
    Ok(list
        .items
        .into_iter()
        .filter(|mr| {
            mr.name_any()
                .starts_with(nodeagent::MANAGED_RESOURCE_PREFIX)
        })
        .collect())
}

fn list_error(what: &'static str, namespace: &str) -> impl FnOnce(kube::Error) -> Error {
    let namespace = namespace.to_string();
    move |source| Error::List {
        what,
        namespace,
        source: Box::new(source),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mr(name: &str, origin: &str, deleting: bool) -> ManagedResource {
        let mut value = json!({
            "apiVersion": "resources.gardener.cloud/v1alpha1",
            "kind": "ManagedResource",
            "metadata": {"name": name, "namespace": "shoot--a--b", "labels": {"origin": origin}},
            "spec": {"secretRefs": []}
        });
        if deleting {
            value["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn modes() {
        use NodeAgentSecrets::*;
        let rows = [
            (Auto, false, true),
            (Auto, true, false),
            (Always, true, true),
            (Always, false, true),
            (Never, false, false),
            (Never, true, false),
        ];
        for (mode, gardenlet, ours) in rows {
            assert_eq!(
                mode.we_ship(gardenlet),
                ours,
                "{mode:?} gardenlet={gardenlet}"
            );
        }
    }

    #[test]
    fn only_gardenlets_live_managed_resource_counts() {
        assert!(gardenlet_ships(&mr(
            GARDENLET_MANAGED_RESOURCE,
            "gardener",
            false
        )));
        assert!(!gardenlet_ships(&mr(
            GARDENLET_MANAGED_RESOURCE,
            "gardener",
            true
        )));
        assert!(!gardenlet_ships(&mr(
            GARDENLET_MANAGED_RESOURCE,
            "someone",
            false
        )));
        assert!(!gardenlet_ships(&mr("shoot-other", "gardener", false)));
    }

    #[tokio::test(start_paused = true)]
    async fn an_unsynced_view_is_an_error_not_a_guess() {
        let delivery = GardenletDelivery::default();
        assert!(matches!(
            delivery.ships("a").await,
            Err(Error::DeliveryUnknown)
        ));
    }

    #[tokio::test]
    async fn delivery_reports_changes_only() {
        let delivery = GardenletDelivery::default();
        assert!(delivery.set("a", true));
        assert!(!delivery.set("a", true));
        assert!(delivery.set("a", false));
        assert!(!delivery.set("b", false));
        delivery.set("a", true);
        let mut changed = delivery.replace(["b".to_string()].into());
        changed.sort();
        assert_eq!(changed, vec!["a".to_string(), "b".to_string()]);
        delivery.synced.send_replace(true);
        assert!(delivery.ships("b").await.unwrap());
        assert!(!delivery.ships("a").await.unwrap());
    }
}
