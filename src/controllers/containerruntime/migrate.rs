//! Migrate (source seed): for the pool's MR and the shared MR, set `keepObjects=true` so the
//! shoot keeps its RuntimeClass and DaemonSet, then delete the MR and its secrets and wait.
//! The source namespace is left clean; the destination seed's restore recreates the MRs.

use super::{Error, GVisorActuator, SHARED_MANAGED_RESOURCE, installation_managed_resource};
use crate::api::ContainerRuntime;
use crate::extension::managed_resource;
use crate::extension::{Outcome, Request};

/// Keeps the shoot objects and removes the MRs from the seed.
pub async fn migrate(
    actuator: &GVisorActuator,
    request: &Request<'_, ContainerRuntime>,
) -> Result<Outcome, Error> {
    let namespace = request.namespace();
    let pool_mr = installation_managed_resource(&request.object.spec.worker_pool.name);
    for name in [pool_mr.as_str(), SHARED_MANAGED_RESOURCE] {
        managed_resource::set_keep_objects(&actuator.client, namespace, name, true).await?;
        if !managed_resource::delete_and_wait(
            &actuator.client,
            actuator.seed_cache(),
            namespace,
            name,
            true,
        )
        .await?
        {
            return Ok(managed_resource::pending_deletion(&format!(
                "ManagedResource {name}"
            )));
        }
    }
    Ok(Outcome::done())
}
