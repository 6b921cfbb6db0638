//! Delete: remove the pool's MR (waiting unless force-deleting), then the shared MR, but only
//! when no other gvisor ContainerRuntime without deletion timestamp remains in the namespace.
//! Removing a MR lets the shoot's resource manager delete the DaemonSet / RuntimeClass.

use kube::Api;
use kube::api::ListParams;

use super::{Error, GVisorActuator, SHARED_MANAGED_RESOURCE, TYPE, installation_managed_resource};
use crate::api::ContainerRuntime;
use crate::extension::managed_resource;
use crate::extension::{Outcome, Request};

/// `wait = false` is force deletion: delete without waiting.
pub async fn delete(
    actuator: &GVisorActuator,
    request: &Request<'_, ContainerRuntime>,
    wait: bool,
) -> Result<Outcome, Error> {
    let namespace = request.namespace();
    let pool_mr = installation_managed_resource(&request.object.spec.worker_pool.name);
    if !managed_resource::delete_and_wait(&actuator.client, namespace, &pool_mr, wait).await? {
        return Ok(managed_resource::pending_deletion(&format!(
            "ManagedResource {pool_mr}"
        )));
    }
    if another_pool_uses_gvisor(actuator, request).await? {
        tracing::info!(
            "another gvisor ContainerRuntime remains; keeping the shared ManagedResource"
        );
        return Ok(Outcome::done());
    }
    if !managed_resource::delete_and_wait(
        &actuator.client,
        namespace,
        SHARED_MANAGED_RESOURCE,
        wait,
    )
    .await?
    {
        return Ok(managed_resource::pending_deletion(&format!(
            "ManagedResource {SHARED_MANAGED_RESOURCE}"
        )));
    }
    Ok(Outcome::done())
}

async fn another_pool_uses_gvisor(
    actuator: &GVisorActuator,
    request: &Request<'_, ContainerRuntime>,
) -> Result<bool, Error> {
    let namespace = request.namespace();
    let api: Api<ContainerRuntime> = Api::namespaced(actuator.client.clone(), namespace);
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|source| Error::List {
            namespace: namespace.to_string(),
            source: Box::new(source),
        })?;
    Ok(list.items.iter().any(|other| {
        other.metadata.name.as_deref() != Some(request.name())
            && other.spec.default.type_ == TYPE
            && other.metadata.deletion_timestamp.is_none()
    }))
}
