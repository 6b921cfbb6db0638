//! Starting the OperatingSystemConfig controller (what Gardener's per-kind `add.go` does) with
//! its two side tasks: the node-agent secret hand-over ([`super::handover::run`]) and the
//! rollout watch that writes the pools' rollout condition ([`super::rollout::watch::run`]).

use super::handover::{self, NodeAgentSecrets};
use super::{OscActuator, rollout};
use crate::api::OperatingSystemConfig;
use crate::extension::predicate::Filter;
use crate::extension::start::{Setup, Started, Store};

/// Starts the controller and its side tasks for the OSCs `filter` accepts.
pub fn add(setup: &Setup, filter: Filter, node_agent_secrets: NodeAgentSecrets) -> Started {
    let actuator = OscActuator::new(
        setup.client.clone(),
        setup.events.clone(),
        node_agent_secrets,
    );
    let handover = tokio::spawn(handover::run(
        actuator.clone(),
        filter.clone(),
        setup.shutdown.clone(),
    ));
    let store = Store::of::<OperatingSystemConfig>();
    let rollout_watch = tokio::spawn(rollout::watch::run(
        setup.client.clone(),
        setup.cache.clone(),
        store.objects.clone(),
        setup.shutdown.clone(),
    ));
    let mut started = setup.start(actuator, filter, store, None);
    started.tasks.extend([handover, rollout_watch]);
    started
}
