//! Migrate (source seed): leave the seed clean without touching the shoot.
//!
//! - `reconcile` OSCs: `keepObjects=true` on the node-agent ManagedResource, so the nodes keep
//!   their `kube-system/<key>` secret, then delete the ManagedResource and wait. The
//!   destination seed's restore re-creates it and adopts the kept secret.
//! - `provision` OSCs: nothing. The user-data Secret is owned by the OSC and goes with it when
//!   gardenlet deletes the migrated object; restore renders it anew from the spec, so no
//!   state needs to travel (`status.state` stays empty).

use super::{Error, OscActuator, monitoring, node_agent_managed_resource, osc_key, rollout};
use crate::api::OperatingSystemConfig;
use crate::api::operatingsystemconfig::OperatingSystemConfigPurpose;
use crate::extension::managed_resource;
use crate::extension::{Outcome, Request};

/// Keeps the shoot objects and removes the ManagedResource from the seed.
pub async fn migrate(
    actuator: &OscActuator,
    request: &Request<'_, OperatingSystemConfig>,
) -> Result<Outcome, Error> {
    let osc = request.object;
    if osc.spec.purpose == OperatingSystemConfigPurpose::Reconcile {
        let namespace = request.namespace();
        let rollout_mr = rollout::rules::managed_resource_name(osc_key(osc));
        for mr in [node_agent_managed_resource(osc), rollout_mr] {
            managed_resource::set_keep_objects(&actuator.client, namespace, &mr, true).await?;
            if !managed_resource::delete_and_wait(
                &actuator.client,
                actuator.cache.as_ref(),
                namespace,
                &mr,
                true,
            )
            .await?
            {
                return Ok(managed_resource::pending_deletion(&format!(
                    "ManagedResource {mr}"
                )));
            }
        }
        monitoring::step::keep_in_step(actuator, namespace, osc_key(osc), false).await?;
    }
    Ok(Outcome::done())
}
