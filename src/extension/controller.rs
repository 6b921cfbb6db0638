//! The controller loop of one extension kind: a watch feeding the [`predicate`] rules into a
//! [`WorkQueue`], and `max_concurrent` workers running the [`Reconciler`].
//!
//! The watch keeps, per object its filter accepts, a [`Fingerprint`] for the update rule and
//! the object's [`Tracked`] state for the object gauges (the [`ObjectIndex`], read by
//! [`super::object_metrics`]). It also fills the kind's object store ([`ObjectStore`], every
//! object of the kind without `managedFields`), from which the runs and the actuator read.
//! Namespace wake-ups enqueue every object of a namespace: in ignore-operation-annotation
//! mode from a second watch on Clusters, and from a kind's own source ([`WakeNamespaces`]; the
//! Worker's comes from its Machines).
//!
//! [`predicate`]: super::predicate

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::{StreamExt, TryStreamExt};
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::cache::ObjectStore;
use super::error::RetryPolicy;
use super::object_states::{self, Tracked};
use super::predicate::{self, Fingerprint};
use super::queue::WorkQueue;
use super::reconciler::{Next, Reconciler};
use super::watch_error::WatchErrorLog;
use super::{Actuator, ExtensionKind};
use crate::api::constants::{ANNOTATION_OPERATION, OPERATION_RECONCILE};
use crate::api::{Cluster, DefaultSpec, LastOperation};

/// namespace/name of an object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// Tuning of one controller.
#[derive(Debug, Clone, Copy)]
pub struct ControllerOptions {
    /// Workers, i.e. objects reconciled at the same time (`--max-concurrent-reconciles`).
    pub max_concurrent: usize,
    /// Retry delays.
    pub retry: RetryPolicy,
}

/// What the watch keeps of one object its filter accepts.
#[derive(Debug, Clone)]
struct Seen {
    /// For the update rule.
    fingerprint: Fingerprint,
    /// The object's state for the object gauges.
    tracked: Tracked,
}

/// What the watch keeps of every object of the kind its filter accepts (its fingerprint and
/// its [`Tracked`] state), until the object is deleted or missing from a relist. Shared with
/// the object gauges ([`super::object_metrics`]); a clone reads the same entries.
#[derive(Debug, Clone, Default)]
pub struct ObjectIndex(Arc<Mutex<HashMap<ObjectKey, Seen>>>);

impl ObjectIndex {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Seen>> {
        lock(&self.0)
    }

    /// Records a watch event of the object `key` (accepted by the filter) at `now` (unix
    /// seconds) and returns the fingerprint from before, `None` on first sight.
    fn record(
        &self,
        key: ObjectKey,
        meta: &kube::api::ObjectMeta,
        last: Option<&LastOperation>,
        now: i64,
    ) -> Option<Fingerprint> {
        let mut index = self.lock();
        let previous = index.get(&key);
        let tracked = object_states::track(
            previous.map(|p| p.tracked),
            last,
            meta.creation_timestamp.as_ref().map(|t| t.0.as_second()),
            now,
        );
        let seen = Seen {
            fingerprint: Fingerprint::of(meta),
            tracked,
        };
        index.insert(key, seen).map(|p| p.fingerprint)
    }

    /// The tracked state of every indexed object (copied out, so the lock is held briefly).
    pub fn tracked(&self) -> Vec<Tracked> {
        self.lock().values().map(|seen| seen.tracked).collect()
    }
}

/// A stream of namespaces whose objects of the controller's kind should run again.
pub type WakeNamespaces = futures::stream::BoxStream<'static, String>;

/// Runs the controller until `shutdown`, keeping `store` (the reconciler's and actuator's
/// object store) and `index` (see [`ObjectIndex`]). `synced` fires once the first list of the
/// watch has been processed (the basis of `/readyz`); `wake` adds namespaces to run again
/// from a kind's own source.
pub async fn run<A: Actuator>(
    reconciler: Arc<Reconciler<A>>,
    options: ControllerOptions,
    store: ObjectStore,
    index: ObjectIndex,
    synced: oneshot::Sender<()>,
    wake: Option<WakeNamespaces>,
    shutdown: CancellationToken,
) {
    let queue = Arc::new(WorkQueue::<ObjectKey>::new());
    let failures: Arc<Mutex<HashMap<ObjectKey, u32>>> = Arc::default();
    let kind = A::Object::KIND;

    let watch = tokio::spawn(watch_objects(
        Arc::clone(&reconciler),
        Arc::clone(&queue),
        index.clone(),
        store,
        synced,
    ));
    // In ignore-operation-annotation mode every queued run counts; a kind's own wake-ups
    // are marked on the reconciler so that their runs are not taken for stale entries.
    let cluster_watch = reconciler.filter.ignore_operation_annotation.then(|| {
        tokio::spawn(wake_namespaces(
            cluster_namespaces(reconciler.client.clone()),
            Arc::clone(&queue),
            index.clone(),
            None::<Arc<Reconciler<A>>>,
        ))
    });
    let own_wake = wake.map(|namespaces| {
        tokio::spawn(wake_namespaces(
            namespaces,
            Arc::clone(&queue),
            index.clone(),
            Some(Arc::clone(&reconciler)),
        ))
    });

    // The store takes the first list in at its end, so before that it is empty: a run must
    // not take that for "no objects" (the gVisor sweep would delete the installations of
    // every pool). One wait here, before any worker starts.
    let ready = async {
        if let Some(store) = &reconciler.objects {
            store.synced().await;
        }
    };
    reconciler
        .metrics
        .set_max_concurrent(kind, options.max_concurrent.max(1));
    let mut workers = tokio::task::JoinSet::new();
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = ready => for _ in 0..options.max_concurrent.max(1) {
            workers.spawn(work(Arc::clone(&reconciler), Arc::clone(&queue), Arc::clone(&failures), options.retry));
        },
    }

    shutdown.cancelled().await;
    queue.shut_down();
    watch.abort();
    for task in cluster_watch.into_iter().chain(own_wake) {
        task.abort();
    }
    // Workers finish their current run: a run interrupted mid-way is safe (idempotent), but
    // letting it end keeps status and events consistent on a graceful shutdown. A run that
    // waits longer than the grace (an actuator polling for a deletion) is cut off, so that
    // the process stops within seconds of SIGTERM. A cut-off run is waited for until it is
    // gone (dropped at its next await), so none of it runs on once this returns: the leader
    // Lease is released only after that (docs/contract.md#leader-election).
    let finished = async { while workers.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, finished)
        .await
        .is_err()
    {
        tracing::warn!(kind, grace = ?SHUTDOWN_GRACE, "runs still in flight after the shutdown grace; cut off");
        workers.abort_all();
        while workers.join_next().await.is_some() {}
    }
    tracing::info!(kind, "controller stopped");
}

/// How long a shutdown waits for the runs in flight.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// One worker: takes keys off `queue` and runs them until the queue shuts down.
async fn work<A: Actuator>(
    reconciler: Arc<Reconciler<A>>,
    queue: Arc<WorkQueue<ObjectKey>>,
    failures: Arc<Mutex<HashMap<ObjectKey, u32>>>,
    retry: RetryPolicy,
) {
    let kind = A::Object::KIND;
    while let Some(key) = queue.next().await {
        reconciler.metrics.set_queue_depth(kind, queue.len());
        let result = {
            let _active = reconciler.metrics.active_worker(kind);
            reconciler.reconcile(&key.namespace, &key.name).await
        };
        queue.done(&key);
        match result {
            Ok(Next::Done) => {
                lock(&failures).remove(&key);
            }
            Ok(Next::After(delay)) => {
                lock(&failures).remove(&key);
                queue.add_after(key, delay);
            }
            Err(failure) => {
                let attempts = {
                    let mut failures = lock(&failures);
                    let count = failures.entry(key.clone()).or_insert(0);
                    *count += 1;
                    *count
                };
                let delay = retry.delay(attempts, failure.configuration_problem);
                tracing::error!(
                    kind,
                    namespace = %key.namespace,
                    name = %key.name,
                    error = %failure.message,
                    category = failure.category,
                    attempts,
                    retry_in = ?delay,
                    "reconcile failed"
                );
                queue.add_after(key, delay);
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

fn key_of<K: kube::Resource>(object: &K) -> ObjectKey {
    ObjectKey {
        namespace: object.meta().namespace.clone().unwrap_or_default(),
        name: object.meta().name.clone().unwrap_or_default(),
    }
}

/// The parts of a watched object the queue rules need, read leniently: an object the CRD
/// admitted but our types cannot decode (e.g. an unknown unit `command` under Gardener's
/// CRDs) must neither break the watch for every other object of the kind (a typed list fails
/// as a whole, so the controller would never sync again after a restart) nor be dropped: it
/// is queued like any other object, and the run reports why it does not decode.
struct Watched {
    meta: kube::api::ObjectMeta,
    spec: DefaultSpec,
    last: Option<LastOperation>,
}

impl Watched {
    /// `None` when not even `spec.type`/`spec.class` decode (then no filter can accept it).
    fn of(object: DynamicObject) -> Option<Self> {
        let spec = serde_json::from_value(object.data.get("spec")?.clone()).ok()?;
        let last = object
            .data
            .get("status")
            .and_then(|s| s.get("lastOperation"))
            .and_then(|l| serde_json::from_value(l.clone()).ok());
        Some(Watched {
            meta: object.metadata,
            spec,
            last,
        })
    }
}

async fn watch_objects<A: Actuator>(
    reconciler: Arc<Reconciler<A>>,
    queue: Arc<WorkQueue<ObjectKey>>,
    fingerprints: ObjectIndex,
    store: ObjectStore,
    synced: oneshot::Sender<()>,
) {
    let kind = A::Object::KIND;
    let resource = ApiResource::erase::<A::Object>(&());
    let api: Api<DynamicObject> = Api::all_with(reconciler.client.clone(), &resource);
    let mut errors = WatchErrorLog::new(kind, &resource);
    // The store is updated before an event reaches the queue rules, so a run queued by an
    // event reads at least that version.
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|o| o.metadata.managed_fields = None)
        .boxed();
    let mut synced = Some(synced);
    // Keys seen during a (re)list, to forget objects deleted while the watch was down.
    let mut relisted: Option<HashSet<ObjectKey>> = None;
    loop {
        let event = match stream.try_next().await {
            Ok(Some(event)) => event,
            Ok(None) => return,
            Err(error) => {
                errors.error(&error);
                continue;
            }
        };
        errors.observed(&event);
        store.apply(&event);
        match event {
            Event::Init => relisted = Some(HashSet::new()),
            Event::InitApply(object) => {
                if let Some(seen) = relisted.as_mut() {
                    seen.insert(key_of(&object));
                }
                observe(&reconciler, &queue, &fingerprints, object);
            }
            Event::InitDone => {
                if let Some(seen) = relisted.take() {
                    fingerprints.lock().retain(|key, _| seen.contains(key));
                }
                if let Some(sender) = synced.take() {
                    tracing::info!(kind, "initial list processed");
                    let _ = sender.send(());
                }
            }
            Event::Apply(object) => observe(&reconciler, &queue, &fingerprints, object),
            Event::Delete(object) => {
                let mut fingerprints = fingerprints.lock();
                fingerprints.remove(&key_of(&object));
                crate::extension::compact_store::shrink_when_sparse(&mut fingerprints);
            }
        }
        reconciler.metrics.set_queue_depth(kind, queue.len());
    }
}

fn observe<A: Actuator>(
    reconciler: &Reconciler<A>,
    queue: &WorkQueue<ObjectKey>,
    fingerprints: &ObjectIndex,
    object: DynamicObject,
) {
    let key = key_of(&object);
    let Some(object) = Watched::of(object) else {
        tracing::warn!(namespace = %key.namespace, name = %key.name, "object without a readable spec.type; ignored");
        return;
    };
    if !reconciler.filter.accepts(&object.spec) {
        return;
    }
    let meta = &object.meta;
    let now = chrono::Utc::now().timestamp();
    let previous = fingerprints.record(key.clone(), meta, object.last.as_ref(), now);
    let enqueue = match previous {
        None => predicate::on_create(&reconciler.filter, meta, object.last.as_ref()),
        Some(old) => {
            if predicate::waits_for_annotation(&reconciler.filter, &old, meta) {
                tracing::info!(
                    kind = A::Object::KIND,
                    namespace = %key.namespace,
                    name = %key.name,
                    generation = meta.generation,
                    "spec changed; it is reconciled once annotated with {ANNOTATION_OPERATION}={OPERATION_RECONCILE} (gardenlet sets it; by hand: kubectl annotate --overwrite)"
                );
            }
            predicate::on_update(&reconciler.filter, &old, meta)
        }
    };
    if enqueue {
        tracing::debug!(namespace = %key.namespace, name = %key.name, "enqueued");
        queue.add(key);
    }
}

/// The namespace of every Cluster event (a Cluster is named like its shoot namespace).
fn cluster_namespaces(client: kube::Client) -> WakeNamespaces {
    let api: Api<Cluster> = Api::all(client);
    watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .filter_map(|next| futures::future::ready(next.ok().map(|c| c.name_any())))
        .boxed()
}

/// Enqueues every known object of each namespace `namespaces` yields, marking it as woken
/// on `mark` (see [`Reconciler::woken`]).
async fn wake_namespaces<A: Actuator>(
    mut namespaces: WakeNamespaces,
    queue: Arc<WorkQueue<ObjectKey>>,
    fingerprints: ObjectIndex,
    mark: Option<Arc<Reconciler<A>>>,
) {
    while let Some(namespace) = namespaces.next().await {
        let keys: Vec<ObjectKey> = fingerprints
            .lock()
            .keys()
            .filter(|k| k.namespace == namespace)
            .cloned()
            .collect();
        for key in keys {
            tracing::debug!(namespace = %key.namespace, name = %key.name, "woken");
            if let Some(reconciler) = &mark {
                lock(&reconciler.woken).insert((key.namespace.clone(), key.name.clone()));
            }
            queue.add(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::extension::object_states::State;

    #[test]
    fn the_index_keeps_the_fingerprint_and_follows_the_state() {
        let index = ObjectIndex::default();
        let key = ObjectKey {
            namespace: "shoot--a--b".into(),
            name: "pool".into(),
        };
        let mut meta = kube::api::ObjectMeta {
            generation: Some(1),
            creation_timestamp: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap(),
            )),
            ..Default::default()
        };
        assert_eq!(index.record(key.clone(), &meta, None, 1_060), None);
        assert_eq!(
            index.tracked(),
            [Tracked {
                state: State::NoOperation,
                unfinished_since: Some(1_000)
            }]
        );
        let error: LastOperation = serde_json::from_value(serde_json::json!({
            "type": "Create", "state": "Error", "progress": 50, "description": "x",
            "lastUpdateTime": "1970-01-01T00:20:00Z"
        }))
        .unwrap();
        meta.generation = Some(2);
        let previous = index.record(key.clone(), &meta, Some(&error), 1_300);
        assert_eq!(
            previous.map(|p| p == Fingerprint::of(&meta)),
            Some(false),
            "the fingerprint from before the event"
        );
        assert_eq!(
            index.tracked(),
            [Tracked {
                state: State::Error,
                unfinished_since: Some(1_000)
            }],
            "still unfinished since its creation"
        );
    }

    /// The upstream behaviour `run` works around (docs/architecture.md#store-readiness-wakes-one-waiter):
    /// of several tasks waiting for a store's readiness, kube-runtime 5.0 wakes only the one
    /// that polled last, and the others never learn that the store is ready. When this test
    /// fails after an upgrade, upstream fixed it and the note can go.
    #[tokio::test(flavor = "current_thread")]
    async fn kube_runtime_store_readiness_wakes_only_the_last_waiter() {
        let mut writer =
            kube::runtime::reflector::store::Writer::<DynamicObject>::new(ApiResource::erase::<
                crate::api::Worker,
            >(&()));
        let store = writer.as_reader();
        let woken = Arc::new(AtomicUsize::new(0));
        for _ in 0..3 {
            let store = store.clone();
            let woken = Arc::clone(&woken);
            tokio::spawn(async move {
                let _ = store.wait_until_ready().await;
                woken.fetch_add(1, Ordering::SeqCst);
            });
        }
        // Every waiter polls once and parks.
        tokio::task::yield_now().await;
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(store.wait_until_ready().await.is_ok(), "the store is ready");
        assert_eq!(woken.load(Ordering::SeqCst), 1, "one of three waiters woke");
    }
}
