//! Finalizer and annotation changes on extension objects.
//!
//! Adding and removing our finalizer uses a merge patch that carries the object's
//! resourceVersion, so a concurrent change makes it fail with a conflict (and the object is
//! retried) instead of clobbering another controller's finalizer. Removing *all* finalizers
//! after a successful migrate is a plain merge patch (`finalizers: null`), as upstream does.
//! NotFound counts as done everywhere.

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::api::constants::ANNOTATION_OPERATION;

/// Adds `finalizer` if missing; returns the updated object (or the input if nothing changed).
pub async fn add<K>(api: &Api<K>, object: &K, finalizer: &str) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    if object.finalizers().iter().any(|f| f == finalizer) {
        return Ok(object.clone());
    }
    let mut finalizers = object.finalizers().to_vec();
    finalizers.push(finalizer.to_string());
    patch_with_precondition(api, object, json!(finalizers)).await
}

/// Adds `finalizer` and removes the `gardener.cloud/operation` annotation in one merge patch
/// that carries the resourceVersion (a concurrent change makes it fail with a conflict, as
/// [`add`]): the first run of a new object needs both, and one request does both.
pub async fn add_removing_operation_annotation<K>(
    api: &Api<K>,
    object: &K,
    finalizer: &str,
) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let mut finalizers = object.finalizers().to_vec();
    if !finalizers.iter().any(|f| f == finalizer) {
        finalizers.push(finalizer.to_string());
    }
    let body = json!({
        "metadata": {
            "finalizers": finalizers,
            "annotations": {ANNOTATION_OPERATION: null},
            "resourceVersion": object.resource_version(),
        }
    });
    ignore_not_found(
        api.patch(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::Merge(body),
        )
        .await,
    )
}

/// Removes `finalizer` if present. Returns the updated object, or `None` when the object is
/// gone (the removal let the API server delete it, or it was deleted meanwhile).
pub async fn remove<K>(api: &Api<K>, object: &K, finalizer: &str) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    if !object.finalizers().iter().any(|f| f == finalizer) {
        return Ok(Some(object.clone()));
    }
    let finalizers: Vec<&String> = object
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .collect();
    ignore_not_found(patch_with_precondition(api, object, json!(finalizers)).await)
}

/// Removes every finalizer (after a successful migrate).
pub async fn remove_all<K>(api: &Api<K>, object: &K) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    if object.finalizers().is_empty() {
        return Ok(Some(object.clone()));
    }
    let body = json!({"metadata": {"finalizers": null}});
    ignore_not_found(
        api.patch(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::Merge(body),
        )
        .await,
    )
}

/// Removes the `gardener.cloud/operation` annotation (no precondition, as upstream).
pub async fn remove_operation_annotation<K>(
    api: &Api<K>,
    object: &K,
) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    if !object.annotations().contains_key(ANNOTATION_OPERATION) {
        return Ok(Some(object.clone()));
    }
    let body = json!({"metadata": {"annotations": {ANNOTATION_OPERATION: null}}});
    ignore_not_found(
        api.patch(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::Merge(body),
        )
        .await,
    )
}

async fn patch_with_precondition<K>(
    api: &Api<K>,
    object: &K,
    finalizers: serde_json::Value,
) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let body = json!({
        "metadata": {
            "finalizers": finalizers,
            "resourceVersion": object.resource_version(),
        }
    });
    api.patch(
        &object.name_any(),
        &PatchParams::default(),
        &Patch::Merge(body),
    )
    .await
}

/// Maps NotFound to `Ok(None)`.
pub fn ignore_not_found<T>(result: Result<T, kube::Error>) -> Result<Option<T>, kube::Error> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(error) if is_not_found(&error) => Ok(None),
        Err(error) => Err(error),
    }
}

/// Whether the API answered 404.
pub fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// Whether the API answered 409 (conflict or already exists).
pub fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}
