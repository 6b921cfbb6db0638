//! The operator's read cache: stores ([`CompactStore`]) of the seed objects the controllers read on
//! every run, each filled by one watch and shared by all controllers, so a run reads what a
//! watch already delivered instead of sending a GET or a list.
//!
//! - **Clusters**, slim ([`slim_cluster`]): name, resourceVersion, annotations and the fields
//!   of the shoot that [`crate::api::ShootView`] reads; the CloudProfile and Seed are dropped
//!   (the Worker, which needs them, reads its Cluster with a GET). Every change is also
//!   announced ([`SeedCache::cluster_changes`]) for kinds that wake their objects on it;
//! - **our ManagedResources** (label `origin=gardener-extension-node`), without the list of
//!   applied objects ([`slim_managed_resource`]): a run compares the rendered MR with the
//!   stored one and writes only a difference;
//! - **the garbage-collectable secrets** (label
//!   `resources.gardener.cloud/garbage-collectable-reference=true`), name and namespace only:
//!   the manifest secrets are named by content, so the name says whether the content is
//!   there, and the data (up to a few hundred KiB per secret) is never held.
//!
//! `managedFields` are dropped before an object is stored (they are often larger than the
//! object and nobody reads them). Kind-specific stores beside these use [`SyncedStore`]. What
//! the cache remembers of its own writes ([`Written`]) and its per-MR locks are dropped once
//! old or unused, so a seed that loses thousands of objects gives the memory back.
//!
//! A store lags behind the API server by the watch latency, so writes never trust it blindly:
//! a missing object is read with a GET before it is treated as absent where that matters
//! (deletions), the manifest secret is created by a server-side apply that is a no-op when
//! it exists, and [`Written`] remembers our own writes: the resourceVersion and content of
//! each MR we applied (a store entry older than that is not taken for the current state, and
//! an MR we just wrote with the same content is not written again), the MRs we deleted and
//! the secrets we created (so runs right after ours do not repeat the request while the
//! watch has not caught up).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Config};
use kube::{Client, Resource};
use tokio_util::sync::CancellationToken;

use super::compact_store::CompactStore;
pub(crate) use super::compact_store::shrink_when_sparse;
use super::watch_error::WatchErrorLog;
use crate::api::constants::{LABEL_GARBAGE_COLLECTABLE, ORIGIN};
use crate::api::{Cluster, ManagedResource};

/// One async lock per MR (namespace, name).
type Locks = Arc<Mutex<HashMap<(String, String), Arc<tokio::sync::Mutex<()>>>>>;

/// The shared stores (cheap to clone: every clone reads the same stores).
#[derive(Clone)]
pub struct SeedCache {
    /// All Clusters, slim ([`slim_cluster`]).
    pub clusters: CompactStore,
    /// Our ManagedResources, slim ([`slim_managed_resource`]).
    pub managed_resources: CompactStore,
    /// Names of the garbage-collectable secrets.
    pub secrets: CompactStore,
    /// Our own writes the stores may not show yet.
    pub written: Written,
    /// The name of every Cluster the store took a change or deletion of (after the store has
    /// it; not for the first list), for kinds that wake their objects on Cluster changes
    /// ([`SeedCache::cluster_changes`]).
    cluster_changes: tokio::sync::broadcast::Sender<String>,
    /// One lock per MR (namespace, name): runs of sibling objects that write the same MR
    /// (the shared gVisor MR of a namespace) take turns, so the second sees the first's write
    /// in [`Written`] instead of repeating it. Unused entries are dropped as the map grows.
    locks: Locks,
}

impl std::fmt::Debug for SeedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeedCache").finish_non_exhaustive()
    }
}

impl SeedCache {
    /// Starts the watches (ended by `shutdown`); the stores fill in the background, see
    /// [`SeedCache::synced`]. The ManagedResource and secret watches run only with
    /// `shoot_resources` (the controllers that read them are enabled, and the chart grants
    /// the `watch` on secrets only then); otherwise those stores stay empty.
    pub fn start(client: &Client, shutdown: &CancellationToken, shoot_resources: bool) -> Self {
        let clusters = CompactStore::default();
        let (cluster_changes, _) = tokio::sync::broadcast::channel(CLUSTER_CHANGES_BUFFER);
        let changes = cluster_changes.clone();
        let cluster_list = Config::default().page_size(CLUSTER_LIST_PAGE);
        let cluster_events = watcher::watcher(Api::<Cluster>::all(client.clone()), cluster_list)
            .default_backoff()
            .modify(slim_cluster);
        spawn(
            clusters.fed_by(cluster_events).inspect(move |event| {
                if let Ok(watcher::Event::Apply(cluster) | watcher::Event::Delete(cluster)) = event
                    && let Some(name) = &cluster.metadata.name
                {
                    // No receiver (no kind listens) is fine.
                    let _ = changes.send(name.clone());
                }
            }),
            shutdown,
        );
        let managed_resources = CompactStore::default();
        let secrets = CompactStore::default();
        if !shoot_resources {
            // Nobody fills them: ready (and empty) at once.
            managed_resources.mark_synced();
            secrets.mark_synced();
            return SeedCache {
                clusters,
                managed_resources,
                secrets,
                written: Written::default(),
                cluster_changes,
                locks: Arc::default(),
            };
        }
        let written = Written::default();
        let managed_resource_events = watcher::watcher(
            Api::<ManagedResource>::all(client.clone()),
            Config::default().labels(&format!("origin={ORIGIN}")),
        )
        .default_backoff()
        .modify(slim_managed_resource);
        let confirm = written.clone();
        spawn(
            managed_resources
                .fed_by(managed_resource_events)
                .inspect(move |event| confirm.confirm(Confirmed::ManagedResource, event)),
            shutdown,
        );
        let secret_events = watcher::watcher(
            Api::<PartialObjectMeta<Secret>>::all(client.clone()),
            Config::default().labels(&format!("{LABEL_GARBAGE_COLLECTABLE}=true")),
        )
        .default_backoff()
        .modify(|s| s.metadata = name_only(&s.metadata));
        let confirm = written.clone();
        spawn(
            secrets
                .fed_by(secret_events)
                .inspect(move |event| confirm.confirm(Confirmed::Secret, event)),
            shutdown,
        );
        SeedCache {
            clusters,
            managed_resources,
            secrets,
            written,
            cluster_changes,
            locks: Arc::default(),
        }
    }

    /// The names of the Clusters that change or go from now on. A receiver that falls more
    /// than [`CLUSTER_CHANGES_BUFFER`] names behind is told so (`Lagged`) and must look at
    /// every stored Cluster.
    pub fn cluster_changes(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.cluster_changes.subscribe()
    }

    /// Takes the lock of MR `namespace/name` (held until the guard is dropped).
    pub async fn lock(&self, namespace: &str, name: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
            if locks.len() >= LOCKS_PRUNE_AT && locks.len().is_power_of_two() {
                // Nobody holds or waits for a lock only this map refers to.
                locks.retain(|_, lock| Arc::strong_count(lock) > 1);
                shrink_when_sparse(&mut locks);
            }
            Arc::clone(
                locks
                    .entry((namespace.to_string(), name.to_string()))
                    .or_default(),
            )
        };
        lock.lock_owned().await
    }

    /// Resolves once every store holds its first list (runs before that would see empty
    /// stores and send the reads the cache is there to save).
    pub async fn synced(&self) {
        self.clusters.synced().await;
        self.managed_resources.synced().await;
        self.secrets.synced().await;
    }

    /// The stored Cluster `name`, decoded (`None` also when it does not decode: the caller
    /// reads it with a GET and reports what is wrong with it).
    pub fn cluster(&self, name: &str) -> Option<Arc<Cluster>> {
        let stored = self.clusters.get("", name)?;
        stored.decode().ok().map(Arc::new)
    }

    /// The stored MR `namespace/name`, unless our last write of it is newer than the store.
    pub fn managed_resource(&self, namespace: &str, name: &str) -> Option<ManagedResource> {
        let stored = self.managed_resources.get(namespace, name)?;
        self.written
            .is_current(namespace, name, stored.resource_version.as_deref())
            .then(|| stored.decode().ok())
            .flatten()
    }

    /// The stored MR `namespace/name` as the store has it (whatever we wrote since).
    pub fn stored_managed_resource(&self, namespace: &str, name: &str) -> Option<ManagedResource> {
        self.managed_resources.get(namespace, name)?.decode().ok()
    }

    /// Whether our MR `namespace/name` is surely absent: the store lacks it and we have not
    /// applied it since (an MR we wrote a moment ago may not be in the store yet).
    pub fn knows_absent(&self, namespace: &str, name: &str) -> bool {
        self.managed_resources.get(namespace, name).is_none()
            && !self.written.has_applied(namespace, name)
    }

    /// Whether secret `namespace/name` exists as far as we know: we created it, or the store
    /// has it and we did not delete it.
    pub fn has_secret(&self, namespace: &str, name: &str) -> bool {
        match self.written.secret(namespace, name) {
            Some(exists) => exists,
            None => self.secrets.get(namespace, name).is_some(),
        }
    }

    /// Names of the stored garbage-collectable secrets of `namespace`.
    pub fn secret_names(&self, namespace: &str) -> Vec<String> {
        self.secrets
            .in_namespace(namespace)
            .into_iter()
            .map(|(name, _)| name)
            .filter(|name| self.written.secret(namespace, name) != Some(false))
            .collect()
    }

    /// Names of our ManagedResources of `namespace` as far as we know them: stored and not
    /// being deleted, unless our last write deleted them, plus those we applied since the
    /// store last showed them (sorted, each once).
    pub fn known_managed_resource_names(&self, namespace: &str) -> Vec<String> {
        let mut names: std::collections::BTreeSet<String> = self
            .managed_resource_names(namespace)
            .into_iter()
            .filter(|name| {
                !self.written.deleted(namespace, name) && !self.written.deleting(namespace, name)
            })
            .collect();
        names.extend(self.written.applied_names(namespace));
        names.into_iter().collect()
    }

    /// Names of our stored ManagedResources of `namespace` that are not being deleted.
    pub fn managed_resource_names(&self, namespace: &str) -> Vec<String> {
        self.managed_resources
            .in_namespace(namespace)
            .into_iter()
            .filter(|(_, stored)| !stored.deleting)
            .map(|(name, _)| name)
            .collect()
    }
}

/// What the store keeps of a Cluster: its name, resourceVersion and annotations, and of
/// `spec.shoot` only the fields [`crate::api::ShootView`] reads (re-encoded from the view, so
/// a run decodes the same view from it). The CloudProfile and the Seed, the bulk of a Cluster,
/// are dropped: the kinds that read them (the Worker) read the Cluster with a GET. A shoot
/// that does not decode is kept as it is, so the run reports the decode error.
pub fn slim_cluster(cluster: &mut Cluster) {
    cluster.metadata = kube::api::ObjectMeta {
        name: cluster.metadata.name.take(),
        resource_version: cluster.metadata.resource_version.take(),
        annotations: cluster.metadata.annotations.take(),
        ..Default::default()
    };
    cluster.spec.cloud_profile = serde_json::Value::Null;
    cluster.spec.seed = None;
    if let Ok(view) = cluster.shoot()
        && let Ok(slim) = serde_json::to_value(&view)
    {
        cluster.spec.shoot = slim;
    }
}

/// What the store keeps of our ManagedResources: what the runs compare (metadata without
/// managed fields, the spec, the observed generation and the conditions with messages cut at
/// [`MAX_STORED_MESSAGE`]). `status.resources`, the list of every applied object, is
/// dropped.
pub fn slim_managed_resource(mr: &mut ManagedResource) {
    mr.metadata.managed_fields = None;
    if let Some(status) = mr.status.as_mut() {
        status.resources = Vec::new();
        status.secrets_data_checksum = None;
        for condition in &mut status.conditions {
            let message = &mut condition.message;
            if message.len() > MAX_STORED_MESSAGE {
                let mut end = MAX_STORED_MESSAGE;
                while !message.is_char_boundary(end) {
                    end -= 1;
                }
                message.truncate(end);
            }
        }
    }
}

/// The longest condition message a stored ManagedResource keeps (runs quote at most the
/// first line, within 300 characters).
pub const MAX_STORED_MESSAGE: usize = 1024;

/// Only name and namespace (what a stored secret's presence needs).
fn name_only(meta: &kube::api::ObjectMeta) -> kube::api::ObjectMeta {
    kube::api::ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        ..Default::default()
    }
}

/// From this many MR locks on, unused ones are dropped whenever the count reaches a power of
/// two (so the map stays within twice the MRs in use).
const LOCKS_PRUNE_AT: usize = 256;

/// How many Cluster changes a receiver of [`SeedCache::cluster_changes`] may fall behind.
pub const CLUSTER_CHANGES_BUFFER: usize = 1024;

/// Clusters per page of the Cluster watch's (re)list. A Cluster embeds its Shoot, Seed and
/// CloudProfile (tens of KiB each); kube-runtime's default of 500 per page decodes up to
/// 500 whole Clusters at once before [`slim_cluster`] drops most of them, and glibc keeps the
/// high-water mark of that (12 MiB at 500 shoots, docs/benchmarks.md, the scale curve).
pub const CLUSTER_LIST_PAGE: u32 = 50;

/// How long our own write stands in for a store that has not shown it yet: far above the
/// watch latency, short enough that an object someone else deletes is written again by the
/// next run.
pub const TRUST_OWN_WRITE: Duration = Duration::from_secs(5);

/// Our own last writes of ManagedResources by namespace/name, and the manifest secrets we
/// created. resourceVersions are etcd revisions (integers) on every kube-apiserver; one that
/// does not parse counts as stale, so the caller reads or writes instead of trusting the
/// store.
#[derive(Clone, Default)]
pub struct Written(Arc<Mutex<WrittenState>>);

#[derive(Default)]
struct WrittenState {
    managed_resources: HashMap<(String, String), Write>,
    /// `true`: created by us; `false`: deleted by us; and when.
    secrets: HashMap<(String, String), (bool, Instant)>,
    /// When entries older than [`FORGET_WRITES_AFTER`] were last dropped.
    pruned: Option<Instant>,
}

/// How long a write is remembered: far beyond any watch latency, so by then the stores show
/// it; forgetting keeps the memory of a seed whose objects come and go bounded.
pub const FORGET_WRITES_AFTER: Duration = Duration::from_secs(300);

/// How often old writes are dropped (on the next write after this long).
const PRUNE_WRITES_EVERY: Duration = Duration::from_secs(60);

impl WrittenState {
    /// Drops the writes older than [`FORGET_WRITES_AFTER`] when due, and gives the maps'
    /// spare room back after large deletions.
    fn prune_if_due(&mut self) {
        if self
            .pruned
            .is_some_and(|at| at.elapsed() < PRUNE_WRITES_EVERY)
        {
            return;
        }
        self.pruned = Some(Instant::now());
        self.managed_resources
            .retain(|_, write| write.at().elapsed() < FORGET_WRITES_AFTER);
        self.secrets
            .retain(|_, (_, at)| at.elapsed() < FORGET_WRITES_AFTER);
        shrink_when_sparse(&mut self.managed_resources);
        shrink_when_sparse(&mut self.secrets);
    }
}

/// Our last write of one MR.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Write {
    /// Applied: the resourceVersion the API server answered, what we applied and when.
    Applied {
        version: u64,
        content: String,
        at: Instant,
    },
    /// Deleted, and gone at once (when).
    Deleted { at: Instant },
    /// Deletion started but waits for finalizers: the resourceVersion that carries the
    /// deletionTimestamp (a stored copy older than it still looks alive) and when.
    Deleting { version: u64, at: Instant },
}

impl Write {
    fn at(&self) -> Instant {
        match self {
            Write::Applied { at, .. } | Write::Deleted { at } | Write::Deleting { at, .. } => *at,
        }
    }
}

/// Which of our writes a store event may confirm.
#[derive(Debug, Clone, Copy)]
enum Confirmed {
    ManagedResource,
    Secret,
}

impl Written {
    /// Forgets the writes a store event shows arrived: an apply of an MR once the store holds
    /// that version or a newer one, a deletion once the store dropped the object, a secret's
    /// creation or deletion once the store agrees. From then on the store tells what the
    /// entry would have, so what is remembered stays as small as the writes in flight.
    fn confirm<K: Resource>(
        &self,
        kind: Confirmed,
        event: &Result<watcher::Event<K>, watcher::Error>,
    ) {
        let (object, present) = match event {
            Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => (object, true),
            Ok(watcher::Event::Delete(object)) => (object, false),
            _ => return,
        };
        let meta = object.meta();
        let key = (
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        );
        let mut state = self.state();
        match kind {
            Confirmed::ManagedResource => {
                let stored = meta
                    .resource_version
                    .as_deref()
                    .and_then(|v| v.parse::<u64>().ok());
                let arrived = match state.managed_resources.get(&key) {
                    Some(Write::Applied { version, .. }) => {
                        present && stored.is_some_and(|stored| stored >= *version)
                    }
                    Some(Write::Deleted { .. } | Write::Deleting { .. }) => !present,
                    None => false,
                };
                if arrived {
                    state.managed_resources.remove(&key);
                }
            }
            Confirmed::Secret => {
                if state
                    .secrets
                    .get(&key)
                    .is_some_and(|(exists, _)| *exists == present)
                {
                    state.secrets.remove(&key);
                }
            }
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, WrittenState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The state for a write (old writes dropped first when due).
    fn state_for_write(&self) -> std::sync::MutexGuard<'_, WrittenState> {
        let mut state = self.state();
        state.prune_if_due();
        state
    }

    /// Records an apply of `content` (a digest of what was applied) answered with
    /// `resource_version`.
    pub fn record_applied(
        &self,
        namespace: &str,
        name: &str,
        resource_version: Option<&str>,
        content: &str,
    ) {
        let key = (namespace.to_string(), name.to_string());
        let mut state = self.state_for_write();
        match resource_version.and_then(|v| v.parse().ok()) {
            Some(version) => {
                state.managed_resources.insert(
                    key,
                    Write::Applied {
                        version,
                        content: content.to_string(),
                        at: Instant::now(),
                    },
                );
            }
            None => {
                state.managed_resources.remove(&key);
            }
        }
    }

    /// Records that our delete of the MR removed it at once.
    pub fn record_deleted(&self, namespace: &str, name: &str) {
        self.state_for_write().managed_resources.insert(
            (namespace.to_string(), name.to_string()),
            Write::Deleted { at: Instant::now() },
        );
    }

    /// Records that our delete of the MR started its deletion (finalizers still pending),
    /// answered with `resource_version`: only a stored copy at least that new tells what the
    /// MR is from then on (an older one does not show the deletion). Without a version, our
    /// last write is forgotten.
    pub fn record_deleting(&self, namespace: &str, name: &str, resource_version: Option<&str>) {
        let key = (namespace.to_string(), name.to_string());
        let mut state = self.state_for_write();
        match resource_version.and_then(|v| v.parse().ok()) {
            Some(version) => {
                let at = Instant::now();
                state
                    .managed_resources
                    .insert(key, Write::Deleting { version, at });
            }
            None => {
                state.managed_resources.remove(&key);
            }
        }
    }

    /// Whether our last write deleted the MR (and nothing applied it since).
    pub fn deleted(&self, namespace: &str, name: &str) -> bool {
        self.state()
            .managed_resources
            .get(&(namespace.to_string(), name.to_string()))
            .is_some_and(|write| matches!(write, Write::Deleted { .. }))
    }

    /// Whether our last write of the MR (still remembered) started a deletion that waited
    /// for finalizers.
    pub fn deleting(&self, namespace: &str, name: &str) -> bool {
        self.state()
            .managed_resources
            .get(&(namespace.to_string(), name.to_string()))
            .is_some_and(|write| matches!(write, Write::Deleting { .. }))
    }

    /// Whether our last write applied exactly `content` to the MR within [`TRUST_OWN_WRITE`]
    /// (after that an MR missing from the store was deleted by someone else, not unseen).
    pub fn applied(&self, namespace: &str, name: &str, content: &str) -> bool {
        matches!(
            self.state().managed_resources.get(&(namespace.to_string(), name.to_string())),
            Some(Write::Applied { content: c, at, .. })
                if c == content && at.elapsed() < TRUST_OWN_WRITE
        )
    }

    /// Names of the MRs of `namespace` whose last write (still remembered) was an apply.
    pub fn applied_names(&self, namespace: &str) -> Vec<String> {
        self.state()
            .managed_resources
            .iter()
            .filter(|((ns, _), write)| ns == namespace && matches!(write, Write::Applied { .. }))
            .map(|((_, name), _)| name.clone())
            .collect()
    }

    /// Whether our last write of the MR (still remembered) was an apply.
    pub fn has_applied(&self, namespace: &str, name: &str) -> bool {
        matches!(
            self.state()
                .managed_resources
                .get(&(namespace.to_string(), name.to_string())),
            Some(Write::Applied { .. })
        )
    }

    /// Whether a stored MR with `resource_version` is at least as new as our last write.
    pub fn is_current(&self, namespace: &str, name: &str, resource_version: Option<&str>) -> bool {
        match self
            .state()
            .managed_resources
            .get(&(namespace.to_string(), name.to_string()))
        {
            None => true,
            Some(Write::Deleted { .. }) => false,
            Some(Write::Applied { version, .. } | Write::Deleting { version, .. }) => {
                resource_version
                    .and_then(|v| v.parse::<u64>().ok())
                    .is_some_and(|stored| stored >= *version)
            }
        }
    }

    /// Records a secret we created (`true`) or deleted (`false`).
    pub fn record_secret(&self, namespace: &str, name: &str, exists: bool) {
        self.state_for_write().secrets.insert(
            (namespace.to_string(), name.to_string()),
            (exists, Instant::now()),
        );
    }

    /// Whether our last write created (`Some(true)`) or deleted (`Some(false)`) the secret.
    pub fn secret(&self, namespace: &str, name: &str) -> Option<bool> {
        self.state()
            .secrets
            .get(&(namespace.to_string(), name.to_string()))
            .map(|(exists, _)| *exists)
    }
}

/// The store of an extension kind's objects, kept by the kind's controller watch
/// ([`super::controller`]) and read by its runs and its actuator.
pub type ObjectStore = super::compact_store::CompactStore;

/// A reflector store of one label-selected kind beside [`SeedCache`], with its own "first
/// list is in" flag: kube-runtime's readiness future wakes only one waiter
/// (docs/architecture.md#store-readiness-wakes-one-waiter), and runs only need to know
/// whether a missing object is really missing.
#[derive(Clone)]
pub struct SyncedStore<K: Resource<DynamicType = ()> + 'static> {
    /// The stored objects.
    pub store: Store<K>,
    synced: tokio::sync::watch::Sender<bool>,
}

impl<K> SyncedStore<K>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
    K: Send + Sync + 'static,
{
    /// Starts a watch of the objects `config` selects (until `shutdown`), stored without
    /// their `managedFields`.
    pub fn start(api: Api<K>, config: Config, shutdown: &CancellationToken) -> Self {
        let (store, writer) = reflector::store();
        let synced = tokio::sync::watch::Sender::new(false);
        let mark = synced.clone();
        spawn(
            watcher::watcher(api, config)
                .default_backoff()
                .modify(|object| object.meta_mut().managed_fields = None)
                .reflect(writer)
                .inspect(move |event| {
                    if matches!(event, Ok(watcher::Event::InitDone)) {
                        mark.send_replace(true);
                    }
                }),
            shutdown,
        );
        SyncedStore { store, synced }
    }

    /// Whether the store holds its first list (before, a missing object says nothing).
    pub fn synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Resolves once the store holds its first list (any number of waiters).
    pub async fn wait_synced(&self) {
        let _ = self.synced.subscribe().wait_for(|synced| *synced).await;
    }

    /// The stored object `namespace/name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.store.get(&ObjectRef::new(name).within(namespace))
    }
}

fn spawn<S, K>(stream: S, shutdown: &CancellationToken)
where
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    K: Resource<DynamicType = ()> + Send + 'static,
{
    let shutdown = shutdown.clone();
    let mut errors = WatchErrorLog::new(K::kind(&()), &ApiResource::erase::<K>(&()));
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                next = stream.next() => match next {
                    Some(Ok(event)) => errors.observed(&event),
                    Some(Err(error)) => errors.error(&error),
                    None => return,
                },
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster() -> Cluster {
        serde_json::from_value(json!({
            "apiVersion": "extensions.gardener.cloud/v1alpha1", "kind": "Cluster",
            "metadata": {"name": "shoot--a--b", "resourceVersion": "7", "uid": "u",
                "labels": {"l": "v"},
                "annotations": {"generic-token-kubeconfig.secret.gardener.cloud/name": "gtk"}},
            "spec": {
                "cloudProfile": {"spec": {"machineImages": [{"name": "debian", "versions": [{"version": "13.2"}]}]}},
                "seed": {"metadata": {"name": "seed"}, "spec": {"provider": {"type": "local"}}},
                "shoot": {
                    "metadata": {"name": "b", "namespace": "garden-a",
                        "annotations": {"confirmation.gardener.cloud/force-deletion": "true"},
                        "deletionTimestamp": "2026-12-05T10:00:00Z"},
                    "spec": {
                        "hibernation": {"enabled": true},
                        "kubernetes": {"version": "1.36.3", "kubelet": {"maxPods": 110}},
                        "networking": {"ipFamilies": ["IPv4"]},
                        "provider": {"type": "local", "workers": [{
                            "name": "pool", "minimum": 2, "maximum": 4, "maxUnavailable": "50%",
                            "machine": {"type": "local", "image": {"name": "debian", "version": "13.2"}},
                            "cri": {"name": "containerd", "containerRuntimes": [{"type": "gvisor"}]},
                            "zones": ["a"]
                        }]},
                        "secretBindingName": "dropped"
                    },
                    "status": {"technicalID": "shoot--a--b",
                        "lastOperation": {"type": "Reconcile", "state": "Failed", "progress": 10}}
                }
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_slim_cluster_decodes_to_the_same_shoot_view_and_keeps_the_annotations() {
        let full = cluster();
        let mut slim = full.clone();
        slim_cluster(&mut slim);
        assert_eq!(slim.shoot().unwrap(), full.shoot().unwrap());
        assert!(slim.shoot().unwrap().is_failed());
        assert_eq!(slim.generic_token_kubeconfig_secret_name(), "gtk");
        assert_eq!(slim.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(slim.spec.cloud_profile, serde_json::Value::Null);
        assert_eq!(slim.spec.seed, None);
        let size = |c: &Cluster| serde_json::to_vec(c).unwrap().len();
        assert!(
            size(&slim) < size(&full),
            "{} < {}",
            size(&slim),
            size(&full)
        );
    }

    #[test]
    fn a_shoot_that_does_not_decode_is_kept() {
        let mut odd = cluster();
        odd.spec.shoot = json!("not an object");
        slim_cluster(&mut odd);
        assert_eq!(odd.spec.shoot, json!("not an object"));
        assert!(odd.shoot().is_err());
    }

    #[test]
    fn a_slim_managed_resource_keeps_what_runs_compare() {
        let mut mr: ManagedResource = serde_json::from_value(json!({
            "metadata": {"name": "mr", "namespace": "ns", "labels": {"origin": "o"},
                "managedFields": [{"manager": "x"}]},
            "spec": {"secretRefs": [{"name": "s"}], "keepObjects": false},
            "status": {"observedGeneration": 3,
                "conditions": [{"type": "ResourcesApplied", "status": "False",
                    "lastTransitionTime": "2026-12-05T10:00:00Z", "lastUpdateTime": "2026-12-05T10:00:00Z",
                    "reason": "R", "message": "é".repeat(1000)}],
                "resources": [{"apiVersion": "v1", "kind": "Secret", "name": "x", "namespace": "kube-system"}],
                "secretsDataChecksum": "abc"}
        }))
        .unwrap();
        let spec = mr.spec.clone();
        slim_managed_resource(&mut mr);
        let status = mr.status.as_ref().unwrap();
        assert_eq!(mr.spec, spec);
        assert!(mr.metadata.managed_fields.is_none());
        assert_eq!(status.observed_generation, Some(3));
        assert!(status.resources.is_empty());
        let message = &status.conditions[0].message;
        assert!(message.len() <= MAX_STORED_MESSAGE && message.starts_with("éé"));
    }

    #[test]
    fn old_writes_are_forgotten_and_recent_ones_kept() {
        let written = Written::default();
        written.record_deleted("ns", "old");
        written.record_secret("ns", "old-secret", true);
        {
            let mut state = written.state();
            let long_ago = Instant::now() - FORGET_WRITES_AFTER - Duration::from_secs(1);
            for write in state.managed_resources.values_mut() {
                *write = Write::Deleted { at: long_ago };
            }
            for (_, at) in state.secrets.values_mut() {
                *at = long_ago;
            }
            state.pruned = Some(long_ago);
        }
        written.record_applied("ns", "new", Some("5"), "c");
        assert!(!written.deleted("ns", "old"), "forgotten");
        assert_eq!(written.secret("ns", "old-secret"), None, "forgotten");
        assert!(written.has_applied("ns", "new"), "kept");
    }

    #[test]
    fn a_store_entry_older_than_our_write_is_not_current() {
        let written = Written::default();
        assert!(written.is_current("ns", "mr", Some("5")), "nothing written");
        written.record_applied("ns", "mr", Some("10"), "a");
        assert!(!written.is_current("ns", "mr", Some("9")));
        assert!(written.is_current("ns", "mr", Some("10")));
        assert!(written.is_current("ns", "mr", Some("11")));
        assert!(!written.is_current("ns", "mr", Some("not-a-number")));
        assert!(!written.is_current("ns", "mr", None));
        assert!(written.applied("ns", "mr", "a"));
        assert!(!written.applied("ns", "mr", "b"));
        written.record_deleted("ns", "mr");
        assert!(written.deleted("ns", "mr"));
        assert!(!written.is_current("ns", "mr", Some("11")), "deleted by us");
        assert!(!written.applied("ns", "mr", "a"));
        written.record_applied("ns", "mr", None, "a");
        assert!(written.is_current("ns", "mr", Some("1")), "forgotten");
    }

    #[test]
    fn a_store_entry_older_than_our_deletion_is_not_current() {
        let written = Written::default();
        written.record_applied("ns", "mr", Some("10"), "a");
        written.record_deleting("ns", "mr", Some("12"));
        assert!(written.deleting("ns", "mr"));
        assert!(!written.has_applied("ns", "mr"));
        assert!(
            !written.applied("ns", "mr", "a"),
            "the apply is no longer ours to trust"
        );
        assert!(!written.deleted("ns", "mr"), "not gone yet");
        assert!(
            !written.is_current("ns", "mr", Some("11")),
            "still looks alive"
        );
        assert!(written.is_current("ns", "mr", Some("12")));
        written.record_deleting("ns", "mr", None);
        assert!(!written.deleting("ns", "mr"), "no version: forgotten");
        assert!(written.is_current("ns", "mr", Some("1")));
    }

    #[test]
    fn writes_the_store_shows_are_forgotten() {
        let mr = |version: &str| -> ManagedResource {
            serde_json::from_value(json!({
                "metadata": {"name": "mr", "namespace": "ns", "resourceVersion": version},
                "spec": {"secretRefs": []}
            }))
            .unwrap()
        };
        let written = Written::default();
        written.record_applied("ns", "mr", Some("10"), "a");
        written.confirm(
            Confirmed::ManagedResource,
            &Ok(watcher::Event::Apply(mr("9"))),
        );
        assert!(
            written.has_applied("ns", "mr"),
            "an older version confirms nothing"
        );
        written.confirm(
            Confirmed::ManagedResource,
            &Ok(watcher::Event::Apply(mr("10"))),
        );
        assert!(!written.has_applied("ns", "mr"), "the store has it now");

        written.record_deleting("ns", "mr", Some("11"));
        written.confirm(
            Confirmed::ManagedResource,
            &Ok(watcher::Event::Apply(mr("11"))),
        );
        assert!(written.deleting("ns", "mr"), "still there, deleting");
        written.confirm(
            Confirmed::ManagedResource,
            &Ok(watcher::Event::Delete(mr("11"))),
        );
        assert!(!written.deleting("ns", "mr"), "gone from the store");

        let secret = |name: &str| PartialObjectMeta::<Secret> {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some("ns".to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        written.record_secret("ns", "s", false);
        written.confirm(Confirmed::Secret, &Ok(watcher::Event::Apply(secret("s"))));
        assert_eq!(
            written.secret("ns", "s"),
            Some(false),
            "the store still lists it"
        );
        written.confirm(Confirmed::Secret, &Ok(watcher::Event::Delete(secret("s"))));
        assert_eq!(written.secret("ns", "s"), None);
    }

    #[test]
    fn our_secret_writes_are_remembered() {
        let written = Written::default();
        assert_eq!(written.secret("ns", "s"), None);
        written.record_secret("ns", "s", true);
        assert_eq!(written.secret("ns", "s"), Some(true));
        assert_eq!(written.secret("other", "s"), None);
        written.record_secret("ns", "s", false);
        assert_eq!(written.secret("ns", "s"), Some(false));
    }
}
