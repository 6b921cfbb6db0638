//! Starting the Worker controller (what Gardener's per-kind `add.go` does): the actuator, and
//! the Machine watch that wakes a namespace's Worker when one of its machines changes
//! ([`super::machine_watch`]).

use futures::StreamExt;

use super::{WorkerActuator, machine_watch};
use crate::extension::predicate::Filter;
use crate::extension::start::{Setup, Started, Store};

/// Starts the controller for the Workers `filter` accepts.
pub fn add(setup: &Setup, filter: Filter) -> Started {
    let actuator = WorkerActuator::new(setup.client.clone(), setup.events.clone());
    let wake = machine_watch::namespaces_to_wake(setup.client.clone()).boxed();
    setup.start(actuator, filter, Store::default(), Some(wake))
}
