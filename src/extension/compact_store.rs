//! A watch-fed store that keeps each object as its JSON text, indexed by namespace: the
//! store of each extension kind's objects ([`super::controller`] fills it, runs and actuators
//! read it) and of the Clusters in [`super::cache::SeedCache`].
//!
//! Why text: kube-runtime's reflector keeps objects as decoded trees, and a small object as
//! a `serde_json::Value` tree costs about 8 KiB (every JSON object is a B-tree with room for
//! eleven entries), a ContainerRuntime's text about 1 KiB. A reader decodes what it needs on
//! each read, which costs microseconds against a run's milliseconds of API calls
//! (docs/benchmarks.md, the scale curve).
//!
//! The store follows the watch the way kube-runtime's reflector does: a (re)list is
//! collected aside and replaces the stored objects at its end, so a relist never shows a
//! half-filled store; [`CompactStore::synced`] resolves for every waiter once the first
//! list is in (kube-runtime's readiness wakes only one,
//! docs/architecture.md#store-readiness-wakes-one-waiter).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use kube::runtime::watcher::Event;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// One stored object: the fields every reader looks at, and the object as JSON text.
#[derive(Debug)]
pub struct StoredObject {
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// Whether `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    json: Box<str>,
}

impl StoredObject {
    /// The object as `object` encodes it (`None` when it does not encode).
    pub fn of<K: kube::Resource + Serialize>(object: &K) -> Option<Self> {
        let meta = object.meta();
        Some(StoredObject {
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
            deleting: meta.deletion_timestamp.is_some(),
            json: serde_json::to_string(object).ok()?.into_boxed_str(),
        })
    }

    /// The object (or the part of it `T` names) decoded from the stored text.
    pub fn decode<T: DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_str(&self.json)
    }
}

/// Objects by namespace ("" for cluster-scoped ones), then by name.
type ByNamespace = HashMap<String, HashMap<String, Arc<StoredObject>>>;

#[derive(Default)]
struct Inner {
    live: ByNamespace,
    /// The objects of a (re)list in progress.
    relisting: Option<ByNamespace>,
}

/// The store (cheap to clone: every clone reads and writes the same objects).
#[derive(Clone)]
pub struct CompactStore {
    inner: Arc<RwLock<Inner>>,
    synced: tokio::sync::watch::Sender<bool>,
}

impl Default for CompactStore {
    fn default() -> Self {
        CompactStore {
            inner: Arc::default(),
            synced: tokio::sync::watch::Sender::new(false),
        }
    }
}

impl std::fmt::Debug for CompactStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompactStore").finish_non_exhaustive()
    }
}

impl CompactStore {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The object `namespace/name` (`namespace` "" for a cluster-scoped one).
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<StoredObject>> {
        self.read().live.get(namespace)?.get(name).cloned()
    }

    /// The objects of `namespace`, with their names.
    pub fn in_namespace(&self, namespace: &str) -> Vec<(String, Arc<StoredObject>)> {
        self.read()
            .live
            .get(namespace)
            .into_iter()
            .flatten()
            .map(|(name, object)| (name.clone(), Arc::clone(object)))
            .collect()
    }

    /// Every stored object, with its namespace and name.
    pub fn all(&self) -> Vec<(String, String, Arc<StoredObject>)> {
        let inner = self.read();
        let objects = inner.live.iter().flat_map(|(namespace, by_name)| {
            by_name
                .iter()
                .map(|(name, object)| (namespace.clone(), name.clone(), Arc::clone(object)))
        });
        objects.collect()
    }

    /// How many objects are stored.
    pub fn len(&self) -> usize {
        self.read().live.values().map(HashMap::len).sum()
    }

    /// Whether no object is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resolves once the first list is in (for every waiter).
    pub async fn synced(&self) {
        let mut synced = self.synced.subscribe();
        let _ = synced.wait_for(|synced| *synced).await;
    }

    /// Marks the store as holding its first list without a watch (a store nobody fills).
    pub fn mark_synced(&self) {
        self.synced.send_replace(true);
    }

    /// `events` with each event taken in ([`Self::apply`]) before it is passed on.
    pub fn fed_by<S, K>(&self, events: S) -> impl futures::Stream<Item = S::Item> + use<S, K>
    where
        S: futures::Stream<Item = Result<Event<K>, kube::runtime::watcher::Error>>,
        K: kube::Resource + Serialize,
    {
        let store = self.clone();
        futures::StreamExt::inspect(events, move |event| {
            if let Ok(event) = event {
                store.apply(event);
            }
        })
    }

    /// Takes one watch event in. An object that does not encode is left out (and logged).
    pub fn apply<K: kube::Resource + Serialize>(&self, event: &Event<K>) {
        match event {
            Event::Init => self.write().relisting = Some(HashMap::new()),
            Event::InitApply(object) => {
                if let Some((namespace, name, stored)) = entry(object) {
                    let mut inner = self.write();
                    let target = match inner.relisting.as_mut() {
                        Some(relisting) => relisting,
                        None => &mut inner.live,
                    };
                    target.entry(namespace).or_default().insert(name, stored);
                }
            }
            Event::InitDone => {
                {
                    let mut inner = self.write();
                    if let Some(relisted) = inner.relisting.take() {
                        inner.live = relisted;
                    }
                }
                self.synced.send_replace(true);
            }
            Event::Apply(object) => {
                if let Some((namespace, name, stored)) = entry(object) {
                    self.write()
                        .live
                        .entry(namespace)
                        .or_default()
                        .insert(name, stored);
                }
            }
            Event::Delete(object) => {
                let meta = object.meta();
                let namespace = meta.namespace.clone().unwrap_or_default();
                let mut inner = self.write();
                if let Some(by_name) = inner.live.get_mut(&namespace) {
                    by_name.remove(meta.name.as_deref().unwrap_or_default());
                    if by_name.is_empty() {
                        inner.live.remove(&namespace);
                        shrink_when_sparse(&mut inner.live);
                    } else {
                        shrink_when_sparse(by_name);
                    }
                }
            }
        }
    }
}

/// Gives a map's spare room back when it uses less than a quarter of it (a seed that lost
/// thousands of objects does not keep their slots).
pub(crate) fn shrink_when_sparse<K: std::hash::Hash + Eq, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 64 && map.len() < map.capacity() / 4 {
        map.shrink_to_fit();
    }
}

fn entry<K: kube::Resource + Serialize>(object: &K) -> Option<(String, String, Arc<StoredObject>)> {
    let meta = object.meta();
    let name = meta.name.clone()?;
    let namespace = meta.namespace.clone().unwrap_or_default();
    let Some(stored) = StoredObject::of(object) else {
        tracing::warn!(%namespace, %name, "object does not encode as JSON; not stored");
        return None;
    };
    Some((namespace, name, Arc::new(stored)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::{ApiResource, DynamicObject};
    use serde_json::json;

    fn object(namespace: &str, name: &str, value: u32) -> DynamicObject {
        let resource = ApiResource::erase::<crate::api::ContainerRuntime>(&());
        let mut object = DynamicObject::new(name, &resource).within(namespace);
        object.metadata.uid = Some(format!("uid-{name}"));
        object.data = json!({"spec": {"value": value}});
        object
    }

    fn value(store: &CompactStore, namespace: &str, name: &str) -> Option<u64> {
        let stored = store.get(namespace, name)?;
        let object: serde_json::Value = stored.decode().ok()?;
        object["spec"]["value"].as_u64()
    }

    #[tokio::test]
    async fn a_relist_replaces_the_objects_at_its_end() {
        let store = CompactStore::default();
        store.apply::<DynamicObject>(&Event::Init);
        store.apply(&Event::InitApply(object("a", "one", 1)));
        assert!(store.is_empty(), "nothing shown before the list is in");
        store.apply::<DynamicObject>(&Event::InitDone);
        store.synced().await;
        assert_eq!(value(&store, "a", "one"), Some(1));
        assert_eq!(
            store.get("a", "one").unwrap().uid.as_deref(),
            Some("uid-one")
        );

        store.apply(&Event::Apply(object("a", "two", 2)));
        store.apply::<DynamicObject>(&Event::Init);
        store.apply(&Event::InitApply(object("a", "two", 3)));
        assert_eq!(value(&store, "a", "one"), Some(1), "kept while relisting");
        store.apply::<DynamicObject>(&Event::InitDone);
        assert_eq!(
            value(&store, "a", "one"),
            None,
            "deleted while the watch was down"
        );
        assert_eq!(value(&store, "a", "two"), Some(3));
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn objects_are_found_by_namespace_and_leave_on_delete() {
        let store = CompactStore::default();
        for (namespace, name) in [("a", "x"), ("a", "y"), ("b", "x")] {
            store.apply(&Event::Apply(object(namespace, name, 0)));
        }
        let mut names: Vec<String> = store
            .in_namespace("a")
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        names.sort();
        assert_eq!(names, ["x", "y"]);
        store.apply(&Event::Delete(object("a", "x", 0)));
        store.apply(&Event::Delete(object("a", "y", 0)));
        assert!(store.in_namespace("a").is_empty());
        assert_eq!(store.len(), 1);
        assert!(store.get("b", "x").is_some());
    }

    #[tokio::test]
    async fn every_waiter_learns_that_the_first_list_is_in() {
        let store = CompactStore::default();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move { store.synced().await })
            })
            .collect();
        tokio::task::yield_now().await;
        store.apply::<DynamicObject>(&Event::Init);
        store.apply::<DynamicObject>(&Event::InitDone);
        for waiter in waiters {
            tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
                .await
                .expect("woken")
                .expect("joined");
        }
    }
}
