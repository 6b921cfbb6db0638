//! The agent's API calls, all narrowly scoped so that a role allowing only the node's own
//! objects is enough (`docs/agent.md#authorizer-limits`):
//!
//! | what | request |
//! |---|---|
//! | find the Node | `LIST nodes?labelSelector=kubernetes.io/hostname=<host>` (metadata only; once, until found) |
//! | watch the Node | `LIST/WATCH nodes?fieldSelector=metadata.name=<node>` (metadata only) |
//! | watch the OSC secret | `LIST/WATCH secrets -n kube-system?fieldSelector=metadata.name=<secret>` (metadata only) |
//! | read the OSC secret | `GET secrets/<secret> -n kube-system` when its resourceVersion moved |
//! | `secretRef` files, token sync | `GET secrets/<name> -n kube-system` |
//! | report | `PATCH nodes/<node>` (merge), `POST events` (events.k8s.io, namespace `default`) |
//! | `SystemdUnitsReady` | `PATCH nodes/<node>/status` (strategic merge) when it changed; `GET nodes/<node>` once per process, before the first write |
//! | lease | `PUT leases/gardener-node-agent-<node> -n kube-system` (GET/POST only at start, after a conflict or when it is gone) |
//! | serial lock | `GET`, then `POST/PUT leases/<secret> -n kube-system` around an apply (only when the secret asks for it) |
//! | rollout slots | as the serial lock, the same Lease (slot i ≥ 1 an annotation of it); `LIST nodes?labelSelector=worker.gardener.cloud/pool=<pool>&limit=<budget>` (metadata only) before taking or renewing one, when the budget is above 1 |
//! | waiting for the lock or a slot | `WATCH leases -n kube-system` with `fieldSelector=metadata.name=<secret>` (metadata only), while waiting only |
//!
//! Nothing lists or watches a resource without a selector naming the object. Watches carry
//! metadata only (`PartialObjectMetadata`): a Node's status (images, conditions) and the
//! secret's `osc.yaml` can be hundreds of KiB, and a watch connection keeps buffers as large
//! as the largest event it carried. The secret's data is read with a GET when it changed.

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, ObjectReference, Pod, Secret};
use kube::api::{ListParams, PartialObjectMeta, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

/// Namespace of the OSC secret, the token secrets and the lease.
pub const NAMESPACE: &str = "kube-system";
/// Node label the Node is found by.
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
/// Secret annotation with the OSC checksum.
pub const ANNOTATION_SECRET_CHECKSUM: &str = "checksum/data-script";
pub use crate::api::constants::ANNOTATION_NODE_CHECKSUM;
/// Node label with the kubelet's Kubernetes version.
pub const LABEL_KUBERNETES_VERSION: &str = "worker.gardener.cloud/kubernetes-version";
/// Node role label of worker nodes.
pub const LABEL_ROLE_WORKER: &str = "node-role.kubernetes.io/worker";
/// Node role label of control-plane nodes.
pub const LABEL_ROLE_CONTROL_PLANE: &str = "node-role.kubernetes.io/control-plane";
/// The file whose presence makes a node a control-plane node.
pub const KUBE_APISERVER_MANIFEST: &str = "/etc/kubernetes/manifests/kube-apiserver.yaml";
/// The agent's view of its Node: metadata only (name, uid, labels, annotations).
pub type NodeMeta = PartialObjectMeta<Node>;
/// The OSC secret's metadata, as its watch delivers it.
pub type SecretMeta = PartialObjectMeta<Secret>;

/// Events are reported as this controller.
pub const REPORTING_CONTROLLER: &str = "gardener-extension-node-agent";

/// Why finding the Node failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeLookupError {
    /// The list failed.
    #[error("listing nodes with {LABEL_HOSTNAME}={0}")]
    List(String, #[source] kube::Error),
    /// Two nodes claim this host.
    #[error("{count} nodes have {LABEL_HOSTNAME}={hostname}; refusing to guess")]
    Ambiguous {
        /// The host name.
        hostname: String,
        /// How many.
        count: usize,
    },
}

/// The Node whose `kubernetes.io/hostname` label is `hostname`; `None` if there is none yet.
pub async fn find_node(
    client: &Client,
    hostname: &str,
) -> Result<Option<NodeMeta>, NodeLookupError> {
    let list = Api::<NodeMeta>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{LABEL_HOSTNAME}={hostname}")))
        .await
        .map_err(|error| NodeLookupError::List(hostname.to_string(), error))?;
    match list.items.len() {
        0 | 1 => Ok(list.items.into_iter().next()),
        count => Err(NodeLookupError::Ambiguous {
            hostname: hostname.to_string(),
            count,
        }),
    }
}

/// How many Nodes carry `worker.gardener.cloud/pool=<pool>`, counted up to `limit` (one
/// metadata-only page of at most `limit` items).
pub async fn count_pool_nodes(
    client: &Client,
    pool: &str,
    limit: u32,
) -> Result<usize, kube::Error> {
    let selector = format!("{}={pool}", crate::api::constants::LABEL_WORKER_POOL);
    let list = Api::<NodeMeta>::all(client.clone())
        .list(&ListParams::default().labels(&selector).limit(limit))
        .await?;
    Ok(list.items.len())
}

/// The OSC secret's metadata, and nothing else, as a stream of watch events (retrying with
/// backoff).
pub fn watch_secret(
    client: &Client,
    name: &str,
) -> impl Stream<Item = watcher::Result<watcher::Event<SecretMeta>>> + Send + use<> {
    watch_one(Api::namespaced(client.clone(), NAMESPACE), name)
}

/// The OSC secret itself; `None` when it does not exist.
pub async fn get_secret(client: &Client, name: &str) -> Result<Option<Secret>, kube::Error> {
    Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .get_opt(name)
        .await
}

/// The own Node's metadata, and nothing else, as a stream of watch events (retrying with
/// backoff).
pub fn watch_node(
    client: &Client,
    name: &str,
) -> impl Stream<Item = watcher::Result<watcher::Event<NodeMeta>>> + Send + use<> {
    watch_one(Api::all(client.clone()), name)
}

/// The Lease `kube-system/<name>` (the serial lock), and nothing else, as a stream of watch
/// events (retrying with backoff). GNA watches it the same way, so the node-agent authorizer
/// admits it.
pub fn watch_lease(
    client: &Client,
    name: &str,
) -> impl Stream<Item = watcher::Result<watcher::Event<Lease>>> + Send + use<> {
    watch_one(Api::namespaced(client.clone(), NAMESPACE), name)
}

/// The object `name` of `api`, and nothing else (field selector `metadata.name`), as a
/// stream of watch events retrying with backoff.
fn watch_one<K>(
    api: Api<K>,
    name: &str,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + use<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    watcher(
        api,
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .default_backoff()
}

/// The latest state of a single watched object: `Some(object)`, or `None` when it is gone.
/// Folds the watcher's initial list into one update.
pub fn latest<K: Clone + Send + 'static>(
    stream: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send,
    on_error: impl Fn(&watcher::Error) + Send + 'static,
) -> impl Stream<Item = Option<K>> + Send {
    let mut initial: Option<K> = None;
    stream.filter_map(move |event| {
        let update = match event {
            Ok(watcher::Event::Init) => {
                initial = None;
                None
            }
            Ok(watcher::Event::InitApply(object)) => {
                initial = Some(object);
                None
            }
            Ok(watcher::Event::InitDone) => Some(initial.take()),
            Ok(watcher::Event::Apply(object)) => Some(Some(object)),
            Ok(watcher::Event::Delete(_)) => Some(None),
            Err(error) => {
                on_error(&error);
                None
            }
        };
        futures::future::ready(update)
    })
}

/// Marks the Node as up to date with `checksum` (merge patch of the annotation, the
/// kubernetes-version label and the role label).
pub async fn mark_applied(
    client: &Client,
    node: &str,
    checksum: &str,
    kubernetes_version: Option<&str>,
    control_plane: bool,
) -> Result<(), kube::Error> {
    let role = if control_plane {
        LABEL_ROLE_CONTROL_PLANE
    } else {
        LABEL_ROLE_WORKER
    };
    let mut labels = serde_json::Map::new();
    labels.insert(role.to_string(), json!(""));
    if let Some(version) = kubernetes_version {
        labels.insert(LABEL_KUBERNETES_VERSION.to_string(), json!(version));
    }
    let patch = json!({
        "metadata": {
            "annotations": { ANNOTATION_NODE_CHECKSUM: checksum },
            "labels": labels,
        }
    });
    merge_patch_node_metadata(client, node, &patch).await
}

/// Merge patch of the Node's metadata (`patch` is `{"metadata": {…}}`; a `null` value
/// removes a key). The response (the whole Node) is only checked for success.
pub async fn merge_patch_node_metadata(
    client: &Client,
    node: &str,
    patch: &serde_json::Value,
) -> Result<(), kube::Error> {
    Api::<Node>::all(client.clone())
        .patch_metadata(node, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(drop)
}

/// The Node's metadata as it is now (a GET; `None`: it is gone).
pub async fn get_node_meta(client: &Client, node: &str) -> Result<Option<NodeMeta>, kube::Error> {
    Api::<Node>::all(client.clone())
        .get_metadata_opt(node)
        .await
}

/// The Node's condition of `type_` (one full GET of the Node: at the first unit check of a
/// process, and at every health check of a node held by the disruptive rollout).
pub async fn node_condition(
    client: &Client,
    node: &str,
    type_: &str,
) -> Result<Option<NodeCondition>, kube::Error> {
    let node = Api::<Node>::all(client.clone()).get(node).await?;
    Ok(node
        .status
        .and_then(|status| status.conditions)
        .and_then(|conditions| conditions.into_iter().find(|c| c.type_ == type_)))
}

/// Sets one condition on the Node's status (strategic merge: the other conditions stay).
pub async fn patch_node_condition(
    client: &Client,
    node: &str,
    condition: &NodeCondition,
) -> Result<(), kube::Error> {
    let patch = json!({ "status": { "conditions": [condition] } });
    Api::<Node>::all(client.clone())
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .map(drop)
}

/// The pods bound to `node` (one LIST with the field selector `spec.nodeName=<node>`, the only
/// pod list the node-agent authorizer admits).
pub async fn pods_on_node(client: &Client, node: &str) -> Result<Vec<Pod>, kube::Error> {
    let params = pods_on_node_params(node);
    Ok(Api::<Pod>::all(client.clone()).list(&params).await?.items)
}

/// The list parameters of the pods bound to `node`: the field selector
/// `spec.nodeName=<node>`, the only pod list the node-agent authorizer admits.
pub fn pods_on_node_params(node: &str) -> ListParams {
    ListParams::default().fields(&format!("spec.nodeName={node}"))
}

/// Removes the annotation `key` from the Node (merge patch with `null`; absent: a no-op).
pub async fn remove_node_annotation(
    client: &Client,
    node: &str,
    key: &str,
) -> Result<(), kube::Error> {
    let patch = json!({ "metadata": { "annotations": { key: null } } });
    merge_patch_node_metadata(client, node, &patch).await
}

/// Reads `secretRef` file content (a GET of `kube-system/<name>` on a node).
pub trait Secrets: Send + Sync {
    /// The bytes under `key` of secret `name`.
    fn secret_data(
        &self,
        name: &str,
        key: &str,
    ) -> impl std::future::Future<Output = Result<Vec<u8>, String>> + Send;
}

/// `secretRef` content from `kube-system`, read with a direct GET (no cache, no list).
#[derive(Clone)]
pub struct ApiSecrets {
    api: Api<Secret>,
}

impl ApiSecrets {
    /// Reads from `kube-system` with `client`.
    pub fn new(client: &Client) -> Self {
        ApiSecrets {
            api: Api::namespaced(client.clone(), NAMESPACE),
        }
    }

    /// The secret `name`.
    pub async fn get(&self, name: &str) -> Result<Secret, kube::Error> {
        self.api.get(name).await
    }
}

impl Secrets for ApiSecrets {
    async fn secret_data(&self, name: &str, key: &str) -> Result<Vec<u8>, String> {
        let secret = self
            .api
            .get(name)
            .await
            .map_err(|error| error.to_string())?;
        secret
            .data
            .as_ref()
            .and_then(|data| data.get(key))
            .map(|value| value.0.clone())
            .ok_or_else(|| format!("secret {NAMESPACE}/{name} has no key {key}"))
    }
}

/// Events on the own Node (best effort: a failed write is logged, never fatal).
///
/// Repeats of the same reason and note are folded into one event series (kube's
/// [`Recorder`] patches the count); a new note for a reason starts a new event, because the
/// recorder would otherwise keep the first note on the series.
pub struct NodeEvents {
    client: Client,
    reporter: Reporter,
    state: tokio::sync::Mutex<(Recorder, std::collections::HashMap<String, String>)>,
}

impl NodeEvents {
    /// Reports as [`REPORTING_CONTROLLER`], instance = host name.
    pub fn new(client: &Client, hostname: &str) -> Self {
        let reporter = Reporter {
            controller: REPORTING_CONTROLLER.to_string(),
            instance: Some(hostname.to_string()),
        };
        NodeEvents {
            state: tokio::sync::Mutex::new((
                Recorder::new(client.clone(), reporter.clone()),
                std::collections::HashMap::new(),
            )),
            client: client.clone(),
            reporter,
        }
    }

    /// Publishes a Warning (`warning`) or Normal event; a failure is logged and counted in
    /// `metrics`, never returned: an event is worth one attempt, not a failed reconcile.
    pub async fn report(
        &self,
        metrics: &crate::agent::metrics::Metrics,
        node: &NodeMeta,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        let type_ = if warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        if let Err(error) = self.publish(node, type_, reason, note).await {
            metrics.error("event", "api");
            tracing::warn!(%error, reason, "publishing an event failed");
        }
    }

    async fn publish(
        &self,
        node: &NodeMeta,
        type_: EventType,
        reason: &str,
        note: String,
    ) -> Result<(), kube::Error> {
        // Notes quote OSC strings and command output; `kubectl describe node` prints them to
        // a terminal as they are.
        let mut note = crate::printable::escape_controls(&note).into_owned();
        // The events API caps notes at 1 KiB.
        if note.len() > 1000 {
            let mut cut = 1000;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
        }
        let reference = ObjectReference {
            api_version: Some(Node::api_version(&()).to_string()),
            kind: Some(Node::kind(&()).to_string()),
            name: Some(node.name_any()),
            uid: node.metadata.uid.clone(),
            ..ObjectReference::default()
        };
        let mut state = self.state.lock().await;
        let (recorder, last_notes) = &mut *state;
        if last_notes.get(reason).is_some_and(|last| *last != note) {
            *recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        }
        last_notes.insert(reason.to_string(), note.clone());
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: "Reconcile".to_string(),
            secondary: None,
        };
        recorder.publish(&event, &reference).await
    }
}
