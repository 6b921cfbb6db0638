//! Starting one controller of a kind: what every kind's `add` (Gardener's per-kind `add.go`)
//! calls with its actuator. [`Setup`] holds the pieces all controllers of one operator share
//! (client, seed cache, event publisher, metrics, options, the shutdown token); [`Setup::start`]
//! builds the kind's [`Reconciler`] over them and spawns [`controller::run`]. The operator
//! builds one `Setup` and loops over the enabled kinds (`crate::operator`).

use std::sync::Arc;

use kube::Client;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::Actuator;
use super::ExtensionKind;
use super::cache::{ObjectStore, SeedCache};
use super::controller::{self, ControllerOptions, ObjectIndex, WakeNamespaces};
use super::events::EventPublisher;
use super::metrics::ControllerMetrics;
use super::object_metrics::Source;
use super::predicate::Filter;
use super::reconciler::Reconciler;

/// What every controller of one operator shares.
#[derive(Clone)]
pub struct Setup {
    /// The seed client.
    pub client: Client,
    /// The seed cache every controller reads (synced before any controller starts).
    pub cache: SeedCache,
    /// Events on the extension objects.
    pub events: EventPublisher,
    /// The controllers' metric families.
    pub metrics: ControllerMetrics,
    /// Concurrency and retries.
    pub options: ControllerOptions,
    /// Cancelled on SIGTERM or lost leadership: every task started here stops.
    pub shutdown: CancellationToken,
}

/// The tasks a kind started and the signal that its controller processed its first list.
pub struct Started {
    /// The controller and its side tasks; the operator waits for them on shutdown.
    pub tasks: Vec<JoinHandle<()>>,
    /// Fires once the controller's store holds its first list (readiness).
    pub synced: oneshot::Receiver<()>,
    /// The kind's objects as its watch indexes them, for the object gauges.
    pub source: Source,
}

/// The store a controller fills from its watch and reads objects from.
#[derive(Default)]
pub struct Store {
    /// The objects (also handed to side tasks that look at the same objects); the
    /// controller's watch fills them.
    pub objects: ObjectStore,
}

impl Setup {
    /// Starts the controller of `actuator`'s kind for the objects `filter` accepts, filling
    /// `store`; `wake` names namespaces to run again from a source of the kind's own
    /// ([`WakeNamespaces`]). Side tasks the kind starts itself go into the returned
    /// [`Started::tasks`] next to it.
    pub fn start<A: Actuator>(
        &self,
        actuator: A,
        filter: Filter,
        store: Store,
        wake: Option<WakeNamespaces>,
    ) -> Started {
        let reconciler = Arc::new(Reconciler {
            client: self.client.clone(),
            actuator,
            filter,
            events: self.events.clone(),
            metrics: self.metrics.clone(),
            cache: Some(self.cache.clone()),
            objects: Some(store.objects.clone()),
            read_fresh: Default::default(),
            woken: Default::default(),
        });
        let (sender, synced) = oneshot::channel();
        let index = ObjectIndex::default();
        let source = Source {
            kind: A::Object::KIND,
            index: index.clone(),
        };
        let task = tokio::spawn(controller::run(
            reconciler,
            self.options,
            store.objects,
            index,
            sender,
            wake,
            self.shutdown.clone(),
        ));
        Started {
            tasks: vec![task],
            synced,
            source,
        }
    }
}
