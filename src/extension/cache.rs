//! The operator's read cache: reflector stores of the seed objects the controllers read on
//! every run, each filled by one watch and shared by all controllers, so a run reads what a
//! watch already delivered instead of sending a GET or a list.
//!
//! - **Clusters**, whole (the shoot spec is what the runs read);
//! - **our ManagedResources** (label `origin=gardener-extension-node`), whole: a run compares
//!   the rendered MR with the stored one and writes only a difference;
//! - **the garbage-collectable secrets** (label
//!   `resources.gardener.cloud/garbage-collectable-reference=true`), metadata only: the
//!   manifest secrets are named by content, so the name says whether the content is there,
//!   and the data (up to a few hundred KiB per secret) is never held.
//!
//! `managedFields` are dropped before an object is stored (they are often larger than the
//! object and nobody reads them).
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
use kube::api::{Api, ApiResource, DynamicObject, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Config};
use kube::{Client, Resource};
use tokio_util::sync::CancellationToken;

use super::watch_error::WatchErrorLog;
use crate::api::constants::{LABEL_GARBAGE_COLLECTABLE, ORIGIN};
use crate::api::{Cluster, ManagedResource};

/// One async lock per MR (namespace, name).
type Locks = Arc<Mutex<HashMap<(String, String), Arc<tokio::sync::Mutex<()>>>>>;

/// The shared stores (cheap to clone: every clone reads the same stores).
#[derive(Clone)]
pub struct SeedCache {
    /// All Clusters.
    pub clusters: Store<Cluster>,
    /// Our ManagedResources.
    pub managed_resources: Store<ManagedResource>,
    /// Metadata of the garbage-collectable secrets.
    pub secrets: Store<PartialObjectMeta<Secret>>,
    /// Our own writes the stores may not show yet.
    pub written: Written,
    /// One lock per MR (namespace, name): runs of sibling objects that write the same MR
    /// (the shared gVisor MR of a namespace) take turns, so the second sees the first's write
    /// in [`Written`] instead of repeating it. An entry is a few dozen bytes and stays.
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
        let (clusters, writer) = reflector::store();
        spawn(
            watcher::watcher(Api::<Cluster>::all(client.clone()), Config::default())
                .default_backoff()
                .modify(|c| c.metadata.managed_fields = None)
                .reflect(writer),
            shutdown,
        );
        let (managed_resources, writer) = reflector::store();
        let (secrets, secrets_writer) = reflector::store();
        if !shoot_resources {
            // Dropping the writers makes the stores ready (and empty) at once.
            return SeedCache {
                clusters,
                managed_resources,
                secrets,
                written: Written::default(),
                locks: Arc::default(),
            };
        }
        spawn(
            watcher::watcher(
                Api::<ManagedResource>::all(client.clone()),
                Config::default().labels(&format!("origin={ORIGIN}")),
            )
            .default_backoff()
            .modify(|m| m.metadata.managed_fields = None)
            .reflect(writer),
            shutdown,
        );
        spawn(
            watcher::watcher(
                Api::<PartialObjectMeta<Secret>>::all(client.clone()),
                Config::default().labels(&format!("{LABEL_GARBAGE_COLLECTABLE}=true")),
            )
            .default_backoff()
            .modify(|s| s.metadata.managed_fields = None)
            .reflect(secrets_writer),
            shutdown,
        );
        SeedCache {
            clusters,
            managed_resources,
            secrets,
            written: Written::default(),
            locks: Arc::default(),
        }
    }

    /// Takes the lock of MR `namespace/name` (held until the guard is dropped).
    pub async fn lock(&self, namespace: &str, name: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
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
        let _ = self.clusters.wait_until_ready().await;
        let _ = self.managed_resources.wait_until_ready().await;
        let _ = self.secrets.wait_until_ready().await;
    }

    /// The stored Cluster `name`.
    pub fn cluster(&self, name: &str) -> Option<Arc<Cluster>> {
        self.clusters.get(&ObjectRef::new(name))
    }

    /// The stored MR `namespace/name`, unless our last write of it is newer than the store.
    pub fn managed_resource(&self, namespace: &str, name: &str) -> Option<Arc<ManagedResource>> {
        let stored = self
            .managed_resources
            .get(&ObjectRef::new(name).within(namespace))?;
        self.written
            .is_current(namespace, name, stored.meta().resource_version.as_deref())
            .then_some(stored)
    }

    /// Whether secret `namespace/name` exists as far as we know: we created it, or the store
    /// has it and we did not delete it.
    pub fn has_secret(&self, namespace: &str, name: &str) -> bool {
        match self.written.secret(namespace, name) {
            Some(exists) => exists,
            None => self
                .secrets
                .get(&ObjectRef::new(name).within(namespace))
                .is_some(),
        }
    }

    /// Names of the stored garbage-collectable secrets of `namespace`.
    pub fn secret_names(&self, namespace: &str) -> Vec<String> {
        self.secrets
            .state()
            .iter()
            .filter(|s| s.metadata.namespace.as_deref() == Some(namespace))
            .filter_map(|s| s.metadata.name.clone())
            .filter(|name| self.written.secret(namespace, name) != Some(false))
            .collect()
    }

    /// Names of our stored ManagedResources of `namespace` that are not being deleted.
    pub fn managed_resource_names(&self, namespace: &str) -> Vec<String> {
        self.managed_resources
            .state()
            .iter()
            .filter(|m| m.metadata.namespace.as_deref() == Some(namespace))
            .filter(|m| m.metadata.deletion_timestamp.is_none())
            .filter_map(|m| m.metadata.name.clone())
            .collect()
    }
}

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
    /// `true`: created by us; `false`: deleted by us.
    secrets: HashMap<(String, String), bool>,
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
    /// Deleted, and gone at once.
    Deleted,
}

impl Written {
    fn state(&self) -> std::sync::MutexGuard<'_, WrittenState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
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
        let mut state = self.state();
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
        self.state()
            .managed_resources
            .insert((namespace.to_string(), name.to_string()), Write::Deleted);
    }

    /// Forgets our last write of the MR (its deletion started but waits for finalizers: only
    /// the store can tell when it is gone).
    pub fn forget(&self, namespace: &str, name: &str) {
        self.state()
            .managed_resources
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// Whether our last write deleted the MR (and nothing applied it since).
    pub fn deleted(&self, namespace: &str, name: &str) -> bool {
        self.state()
            .managed_resources
            .get(&(namespace.to_string(), name.to_string()))
            == Some(&Write::Deleted)
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

    /// Whether a stored MR with `resource_version` is at least as new as our last write.
    pub fn is_current(&self, namespace: &str, name: &str, resource_version: Option<&str>) -> bool {
        match self
            .state()
            .managed_resources
            .get(&(namespace.to_string(), name.to_string()))
        {
            None => true,
            Some(Write::Deleted) => false,
            Some(Write::Applied { version, .. }) => resource_version
                .and_then(|v| v.parse::<u64>().ok())
                .is_some_and(|stored| stored >= *version),
        }
    }

    /// Records a secret we created (`true`) or deleted (`false`).
    pub fn record_secret(&self, namespace: &str, name: &str, exists: bool) {
        self.state()
            .secrets
            .insert((namespace.to_string(), name.to_string()), exists);
    }

    /// Whether our last write created (`Some(true)`) or deleted (`Some(false)`) the secret.
    pub fn secret(&self, namespace: &str, name: &str) -> Option<bool> {
        self.state()
            .secrets
            .get(&(namespace.to_string(), name.to_string()))
            .copied()
    }
}

/// The store of an extension kind's objects, kept by the kind's controller watch
/// ([`super::controller`]) and read by its runs and its actuator.
pub type ObjectStore = Store<DynamicObject>;

/// A writer and reader pair for an extension kind `K`'s objects.
pub fn object_store<K: Resource<DynamicType = ()>>()
-> (ObjectStore, reflector::store::Writer<DynamicObject>) {
    let writer = reflector::store::Writer::new(ApiResource::erase::<K>(&()));
    (writer.as_reader(), writer)
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
