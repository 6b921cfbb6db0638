//! Who ships the node-agent secrets of a shoot: another ManagedResource or this extension
//! (`--node-agent-secrets=auto|always|never`), decided per Secret.
//!
//! Current gardenlet releases render the secret `kube-system/<key>` of every worker pool
//! themselves and ship them through their ManagedResource `shoot-gardener-node-agent`
//! (label `origin=gardener`) in the shoot namespace (gardener
//! `pkg/gardenlet/operation/botanist/operatingsystemconfig.go`); a later release may rename
//! or relabel it, and another extension may ship some of them. Two ManagedResources owning
//! one object make gardener-resource-manager flip its `resources.gardener.cloud/origin`
//! between them on every sync, and the deletion of either one would delete the Secret. So in
//! `auto` mode (the default) we ship a pool's Secret only while no other ManagedResource
//! manages it ([`claims`]: any name, any label, from its `status.resources`), and hand it over
//! in both directions without it leaving the shoot where the contract lets us:
//!
//! - **another ManagedResource claims it**: ours is released — ignored and
//!   `keepObjects: true`, then deleted with its secrets — so the Secret stays and the other
//!   ManagedResource adopts it. Secrets nobody else lists stay ours, also in the same
//!   namespace.
//! - **the claim ends** (the other one drops it, disappears or starts deleting): the OSC is
//!   shipped again right away; our ManagedResource adopts the Secret.
//!
//! The Secret we ship carries `resources.gardener.cloud/keep-object: "true"`: a node needs it
//! to join and to apply its configuration, so no ManagedResource deletion may remove it while
//! another owner may still want it (gardener-resource-manager keeps objects with that
//! annotation and leaves it in place when another ManagedResource adopts the object). When
//! we delete an OSC whose Secret we own, the stamp is removed first ([`super::delete`]), so a
//! removed pool's Secret still leaves the shoot. A Secret the other ManagedResource created
//! never had the stamp: when that one is deleted with `keepObjects: false`,
//! gardener-resource-manager may delete the Secret before ours is applied
//! (docs/operations.md#node-agent-secrets says what remains).
//!
//! [`watch`] feeds [`claims::SecretClaims`] from one watch on the ManagedResources that are
//! not ours; [`run`] performs the hand-overs of a namespace when its claims change. The OSC
//! reconcile reads the same view, so both agree on who ships.

pub mod claims;
pub mod watch;

use std::collections::HashSet;
use std::sync::Arc;

use kube::api::ListParams;
use kube::{Api, ResourceExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Error, OscActuator, nodeagent, reconcile};
use crate::api::constants::ORIGIN;
use crate::api::operatingsystemconfig::OperatingSystemConfigPurpose;
use crate::api::{ExtensionObject, LastOperationType, ManagedResource, OperatingSystemConfig};
use crate::extension::cache::ObjectStore;
use crate::extension::managed_resource;
use crate::extension::operation;
use crate::extension::predicate::Filter;

/// `--node-agent-secrets`: who ships the node-agent secrets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum NodeAgentSecrets {
    /// Ship ours for each Secret no other ManagedResource manages.
    #[default]
    Auto,
    /// Always ship ours (landscapes where nothing else ships them).
    Always,
    /// Never ship ours (and release any we shipped before).
    Never,
}

impl NodeAgentSecrets {
    /// Whether we ship a Secret that another ManagedResource manages (`claimed`) or not
    /// (pure).
    pub fn we_ship(self, claimed: bool) -> bool {
        match self {
            NodeAgentSecrets::Auto => !claimed,
            NodeAgentSecrets::Always => true,
            NodeAgentSecrets::Never => false,
        }
    }
}

/// When a failed hand-over is tried again.
const RETRY: std::time::Duration = std::time::Duration::from_secs(10);

/// Watches the other ManagedResources and hands Secrets over when a namespace's claims
/// change, until `shutdown`. The initial pass also brings every namespace to the mode (a
/// `never` operator releases what an earlier configuration shipped).
pub async fn run(
    actuator: OscActuator,
    filter: Filter,
    oscs: ObjectStore,
    shutdown: CancellationToken,
) {
    let (changes, mut changed) = mpsc::unbounded_channel::<watch::Change>();
    let claims = Arc::clone(&actuator.claims);
    let client = actuator.client.clone();
    let retries = changes.clone();
    let watch = tokio::spawn(async move {
        watch::watch_other_managed_resources(client, claims, changes).await;
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
            None => initial_pass(&actuator, &filter, &oscs).await,
        };
        if let Err(error) = result {
            tracing::error!(error = %crate::error_chain::chain(&error), retry_in = ?RETRY, "node-agent secret hand-over failed");
            let retries = retries.clone();
            tokio::spawn(async move {
                tokio::time::sleep(RETRY).await;
                let _ = retries.send(next);
            });
        }
    }
    watch.abort();
}

/// After start-up: release ours wherever we must not ship, and ship where ours is missing
/// (other ManagedResources may have come or gone while we were not running). Only the
/// namespaces where one of these is due are handed over: a namespace whose Secrets another
/// ManagedResource manages and where we have none costs no request (a restart in a seed where
/// gardenlet ships them all lists nothing per namespace).
async fn initial_pass(
    actuator: &OscActuator,
    filter: &Filter,
    oscs: &ObjectStore,
) -> Result<(), Error> {
    let ours = list_ours(actuator, None).await?;
    let mut namespaces: HashSet<String> = ours.iter().filter_map(|mr| mr.namespace()).collect();
    let existing: HashSet<(String, String)> = ours
        .iter()
        .map(|mr| (mr.namespace().unwrap_or_default(), mr.name_any()))
        .collect();
    // From the controller's store, one OSC decoded at a time: a seed-wide list would hold
    // every OSC of the seed at once (100 MiB at 5,000, docs/benchmarks.md).
    oscs.synced().await;
    let stored = oscs.all();
    let all = stored
        .iter()
        .filter_map(|(_, _, stored)| stored.decode::<OperatingSystemConfig>().ok());
    for osc in all.filter(|osc| shippable(osc, filter)) {
        let namespace = osc.namespace().unwrap_or_default();
        let mr = super::node_agent_managed_resource(&osc);
        if !existing.contains(&(namespace.clone(), mr))
            && actuator.ships_node_agent_secret(&osc).await?
        {
            namespaces.insert(namespace);
        }
    }
    for namespace in namespaces {
        hand_over(actuator, filter, &namespace).await?;
    }
    Ok(())
}

/// Brings every node-agent Secret of one namespace to the side the mode and the other
/// ManagedResources' claims ask for: ours released where another one manages the Secret,
/// shipped where nobody does.
pub async fn hand_over(
    actuator: &OscActuator,
    filter: &Filter,
    namespace: &str,
) -> Result<(), Error> {
    for mr in list_ours(actuator, Some(namespace)).await? {
        let name = mr.name_any();
        let key = name
            .strip_prefix(nodeagent::MANAGED_RESOURCE_PREFIX)
            .unwrap_or(&name);
        let (ours, owner) = actuator.ships_secret(namespace, key).await?;
        if !ours {
            tracing::info!(%namespace, managed_resource = %name, owner = owner.as_deref().unwrap_or("none (--node-agent-secrets=never)"), "releasing the node-agent secret (keepObjects)");
            release(actuator, namespace, &name).await?;
        }
    }
    if actuator.node_agent_secrets == NodeAgentSecrets::Never {
        return Ok(());
    }
    let oscs: Api<OperatingSystemConfig> = Api::namespaced(actuator.client.clone(), namespace);
    let list = oscs
        .list(&ListParams::default())
        .await
        .map_err(list_error("OperatingSystemConfigs", namespace))?;
    // The pools' budgets come from the Cluster, read once for the namespace when an OSC
    // is to be shipped; without it the next reconcile adds them.
    let mut cluster = None;
    for listed in list.items.iter().filter(|osc| shippable(osc, filter)) {
        if !actuator.ships_node_agent_secret(listed).await? {
            continue;
        }
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
        tracing::info!(%namespace, osc = %osc.name_any(), "shipping the node-agent secret");
        if cluster.is_none() {
            cluster = Some(
                crate::extension::cluster::lookup(
                    &actuator.client,
                    actuator.cache.as_ref(),
                    namespace,
                )
                .await
                .ok()
                .flatten(),
            );
        }
        let shoot = cluster.as_ref().and_then(Option::as_ref).map(|c| &c.shoot);
        reconcile::ship_node_agent_secret(actuator, &osc, shoot).await?;
    }
    Ok(())
}

/// Leaves the shoot's Secret in place and removes our ManagedResource and its secrets
/// ([`managed_resource::release_objects`]: GRM does not apply ours once more on the way out,
/// so the other ManagedResource is the only one writing the Secret from then on).
pub async fn release(actuator: &OscActuator, namespace: &str, name: &str) -> Result<(), Error> {
    managed_resource::release_objects(&actuator.client, actuator.cache.as_ref(), namespace, name)
        .await?;
    if let Some(key) = name.strip_prefix(super::nodeagent::MANAGED_RESOURCE_PREFIX) {
        super::monitoring::step::keep_in_step(actuator, namespace, key, false).await?;
    }
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
        for (mode, claimed, ours) in rows {
            assert_eq!(mode.we_ship(claimed), ours, "{mode:?} claimed={claimed}");
        }
    }
}
