//! Thin API helpers shared by the Worker operations: server-side apply with our field
//! manager, lists, deletes that treat NotFound as done, the user data lookup, the
//! force-deletion label, scaling machine-controller-manager, reading its leader Leases and the
//! Worker status patch.
//! Every failure becomes [`Error::Api`] naming the action and the object.

use std::fmt::Debug;

use chrono::Utc;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::mcm_liveness;
use super::{
    Error, FORCE_DELETION_TRUE, LABEL_FORCE_DELETION, LABEL_PURPOSE, MCM_DEPLOYMENT,
    PURPOSE_MACHINE_CLASS,
};
use crate::api::Machine;
use crate::api::worker::{Worker, WorkerPool};
use crate::extension::finalizer::is_not_found;
use crate::extension::managed_resource::FIELD_MANAGER;

/// How many API calls of one step run at the same time.
pub const PARALLEL: usize = 16;

fn api_error(
    action: &'static str,
    kind: &'static str,
    name: String,
) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Api {
        action,
        kind,
        name,
        source: Box::new(source),
    }
}

/// Selects the class secrets (`gardener.cloud/purpose=machineclass`).
pub fn class_secret_selector() -> ListParams {
    ListParams::default().labels(&format!("{LABEL_PURPOSE}={PURPOSE_MACHINE_CLASS}"))
}

/// A namespaced API of `K`.
pub fn api<K>(client: &Client, namespace: &str) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
{
    Api::namespaced(client.clone(), namespace)
}

/// A namespaced dynamic API of the kind of `K` (keeps fields our types do not model).
pub fn dynamic_api<K>(client: &Client, namespace: &str) -> Api<DynamicObject>
where
    K: Resource<DynamicType = ()>,
{
    Api::namespaced_with(client.clone(), namespace, &ApiResource::erase::<K>(&()))
}

/// Server-side applies `object` with our field manager, forcing ownership.
pub async fn apply<K>(api: &Api<K>, object: &K, kind: &'static str) -> Result<K, Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + Debug,
{
    let name = object.name_any();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map_err(api_error("applying", kind, name))
}

/// Lists `K` in the API's namespace.
pub async fn list<K>(api: &Api<K>, params: &ListParams, kind: &'static str) -> Result<Vec<K>, Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    api.list(params)
        .await
        .map(|list| list.items)
        .map_err(api_error("listing", kind, String::new()))
}

/// Reads `name`; `None` when it does not exist.
pub async fn get<K>(api: &Api<K>, name: &str, kind: &'static str) -> Result<Option<K>, Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    api.get_opt(name)
        .await
        .map_err(api_error("reading", kind, name.to_string()))
}

/// Deletes `name`; `false` when it was already gone.
pub async fn delete<K>(api: &Api<K>, name: &str, kind: &'static str) -> Result<bool, Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(true),
        Err(error) if is_not_found(&error) => Ok(false),
        Err(error) => Err(api_error("deleting", kind, name.to_string())(error)),
    }
}

/// Deletes every object of `api`'s kind and namespace that `selector` matches, in one
/// request (`deletecollection`, as upstream's `DeleteAllOf`); returns how many the API server
/// deleted or marked for deletion (those already deleting included).
pub async fn delete_all<K>(
    api: &Api<K>,
    selector: &ListParams,
    kind: &'static str,
    namespace: &str,
) -> Result<usize, Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    api.delete_collection(&DeleteParams::default(), selector)
        .await
        .map(|answer| answer.map_left(|list| list.items.len()).left_or(0))
        .map_err(api_error("deleting all", kind, namespace.to_string()))
}

/// How many objects of `K` in `namespace` match `selector` (their metadata listed only).
pub async fn count<K>(
    client: &Client,
    namespace: &str,
    selector: &ListParams,
    kind: &'static str,
) -> Result<usize, Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug,
{
    api::<K>(client, namespace)
        .list_metadata(selector)
        .await
        .map(|list| list.items.len())
        .map_err(api_error("listing", kind, namespace.to_string()))
}

/// The bytes of `pool`'s user data (`userDataSecretRef`), which must exist and be non-empty.
pub async fn user_data(
    client: &Client,
    namespace: &str,
    pool: &WorkerPool,
) -> Result<Vec<u8>, Error> {
    let reference = &pool.user_data_secret_ref;
    let secret = api::<Secret>(client, namespace)
        .get_opt(&reference.name)
        .await
        .map_err(api_error(
            "reading",
            "Secret",
            format!("{namespace}/{}", reference.name),
        ))?
        .ok_or_else(|| Error::UserDataSecretMissing {
            pool: pool.name.clone(),
            namespace: namespace.to_string(),
            secret: reference.name.clone(),
        })?;
    secret
        .data
        .and_then(|mut data| data.remove(&reference.key))
        .map(|bytes| bytes.0)
        .filter(|bytes| !bytes.is_empty())
        .ok_or_else(|| Error::UserDataKeyMissing {
            pool: pool.name.clone(),
            secret: reference.name.clone(),
            key: reference.key.clone(),
        })
}

/// Labels every Machine of the namespace `force-deletion=True`; returns how many were newly
/// labelled.
pub async fn mark_machines_for_force_deletion(
    client: &Client,
    namespace: &str,
) -> Result<usize, Error> {
    let machines = api::<Machine>(client, namespace);
    let unmarked: Vec<String> = list(&machines, &ListParams::default(), "Machine")
        .await?
        .into_iter()
        .filter(|m| {
            m.labels().get(LABEL_FORCE_DELETION).map(String::as_str) != Some(FORCE_DELETION_TRUE)
        })
        .map(|m| m.name_any())
        .collect();
    for name in &unmarked {
        let body = json!({"metadata": {"labels": {LABEL_FORCE_DELETION: FORCE_DELETION_TRUE}}});
        match machines
            .patch(name, &PatchParams::default(), &Patch::Merge(body))
            .await
        {
            Ok(_) => {}
            Err(error) if is_not_found(&error) => {}
            Err(error) => return Err(api_error("labelling", "Machine", name.clone())(error)),
        }
    }
    Ok(unmarked.len())
}

/// Sets `spec.replicas` of the `machine-controller-manager` Deployment if it exists and
/// differs; returns the previous value when something was changed.
pub async fn scale_machine_controller_manager(
    client: &Client,
    namespace: &str,
    replicas: i32,
) -> Result<Option<i32>, Error> {
    let deployments = api::<Deployment>(client, namespace);
    let name = format!("{namespace}/{MCM_DEPLOYMENT}");
    let Some(deployment) = deployments
        .get_opt(MCM_DEPLOYMENT)
        .await
        .map_err(api_error("reading", "Deployment", name.clone()))?
    else {
        return Ok(None);
    };
    let current = deployment.spec.and_then(|s| s.replicas).unwrap_or(1);
    if current == replicas {
        return Ok(None);
    }
    deployments
        .patch(
            MCM_DEPLOYMENT,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .map_err(api_error("scaling", "Deployment", name))?;
    Ok(Some(current))
}

/// `spec.replicas` of the `machine-controller-manager` Deployment, `None` when there is none.
pub async fn machine_controller_manager_replicas(
    client: &Client,
    namespace: &str,
) -> Result<Option<i32>, Error> {
    let name = format!("{namespace}/{MCM_DEPLOYMENT}");
    let deployment = api::<Deployment>(client, namespace)
        .get_opt(MCM_DEPLOYMENT)
        .await
        .map_err(api_error("reading", "Deployment", name))?;
    Ok(deployment.map(|d| d.spec.and_then(|s| s.replicas).unwrap_or(1)))
}

/// The first of machine-controller-manager's processes whose leader Lease is abandoned
/// ([`mcm_liveness`]); `None` when both look alive or cannot be read (a failed read only loses
/// the hint, so it is logged at debug level and not returned).
pub async fn machine_controller_down(
    client: &Client,
    namespace: &str,
) -> Option<mcm_liveness::Abandoned> {
    let leases = api::<Lease>(client, namespace);
    for (name, process) in mcm_liveness::LEASES {
        match leases.get_opt(name).await {
            Ok(Some(lease)) => {
                if let Some(abandoned) = mcm_liveness::abandoned(process, &lease, Utc::now()) {
                    return Some(abandoned);
                }
            }
            Ok(None) => {}
            Err(error) => {
                tracing::debug!(%error, lease = name, "reading machine-controller-manager's Lease failed");
                return None;
            }
        }
    }
    None
}

/// Deletes machine-controller-manager's pods (label `selector`); returns their names.
pub async fn delete_pods(
    client: &Client,
    namespace: &str,
    selector: &str,
) -> Result<Vec<String>, Error> {
    let pods = api::<k8s_openapi::api::core::v1::Pod>(client, namespace);
    let mut deleted = Vec::new();
    for pod in list(&pods, &ListParams::default().labels(selector), "Pod").await? {
        let name = pod.name_any();
        if delete(&pods, &name, "Pod").await? {
            deleted.push(name);
        }
    }
    Ok(deleted)
}

/// Merge-patches `status` of the Worker through `/status`.
pub async fn patch_worker_status(
    client: &Client,
    worker: &Worker,
    status: Value,
) -> Result<Worker, Error> {
    let namespace = worker.metadata.namespace.as_deref().unwrap_or_default();
    let name = worker.name_any();
    api::<Worker>(client, namespace)
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .map_err(api_error(
            "patching the status of",
            "Worker",
            format!("{namespace}/{name}"),
        ))
}
