//! Starting the gVisor ContainerRuntime controller (what Gardener's per-kind `add.go` does):
//! the actuator over the seed cache and the kind's own object store. No side tasks.

use super::render::Templates;
use super::{Caches, GVisorActuator, Options};
use crate::extension::predicate::Filter;
use crate::extension::start::{Setup, Started, Store};
use crate::imagevector::ImageVector;

/// Starts the controller for the ContainerRuntimes `filter` accepts. `templates` and `images`
/// are loaded by the caller before it serves, so bad ones stop the operator at start.
pub fn add(
    setup: &Setup,
    filter: Filter,
    templates: Templates,
    images: ImageVector,
    options: Options,
) -> Started {
    let store = Store::default();
    let caches = Caches {
        seed: setup.cache.clone(),
        runtimes: store.objects.clone(),
    };
    let actuator = GVisorActuator::new(
        setup.client.clone(),
        templates,
        images,
        setup.events.clone(),
        options,
        Some(caches),
    );
    setup.start(actuator, filter, store, None)
}
