//! Starting the OperatingSystemConfig controller (what Gardener's per-kind `add.go` does) with
//! its two side tasks: the node-agent secret hand-over ([`super::handover::run`]) and the
//! rollout watch that writes the pools' rollout condition ([`super::rollout::watch::run`]);
//! its runs are woken when a Cluster's rollout budgets change ([`super::budget_wake`]).

use super::handover::{self, NodeAgentSecrets};
use super::{OscActuator, budget_wake, rollout, user_data_secrets};
use crate::extension::predicate::Filter;
use crate::extension::start::{Setup, Started, Store};

/// Starts the controller and its side tasks for the OSCs `filter` accepts.
pub fn add(setup: &Setup, filter: Filter, node_agent_secrets: NodeAgentSecrets) -> Started {
    let access_secrets = rollout::watch::access_secrets(&setup.client, &setup.shutdown);
    let actuator = OscActuator::new(
        setup.client.clone(),
        Some(setup.cache.clone()),
        setup.events.clone(),
        node_agent_secrets,
    )
    .with_access_secrets(access_secrets.clone())
    .with_user_data_secrets(user_data_secrets::start(&setup.client, &setup.shutdown));
    let store = Store::default();
    let handover = tokio::spawn(handover::run(
        actuator.clone(),
        filter.clone(),
        store.objects.clone(),
        setup.shutdown.clone(),
    ));
    let rollout_watch = tokio::spawn(rollout::watch::run(
        setup.client.clone(),
        setup.cache.clone(),
        store.objects.clone(),
        access_secrets,
        setup.shutdown.clone(),
    ));
    let wake = budget_wake::wake_on_budget_changes(setup.cache.clone());
    let views = actuator.clone();
    let mut started = setup.start(actuator, filter, store, Some(wake));
    started.tasks.extend([handover, rollout_watch]);
    // Ready once the controller's store and the actuator's own views are listed.
    let (ready, synced) = tokio::sync::oneshot::channel();
    let controller_synced = std::mem::replace(&mut started.synced, synced);
    tokio::spawn(async move {
        if controller_synced.await.is_ok() {
            views.wait_synced().await;
            let _ = ready.send(());
        }
    });
    started
}
