//! Restore (destination seed): the gVisor extension keeps no state, so restore is reconcile;
//! it recreates both MRs with `keepObjects=false`, adopting the objects the shoot kept.

use super::{Error, GVisorActuator, reconcile};
use crate::api::ContainerRuntime;
use crate::extension::{Outcome, Request};

/// Same as [`reconcile::reconcile`].
pub async fn restore(
    actuator: &GVisorActuator,
    request: &Request<'_, ContainerRuntime>,
) -> Result<Outcome, Error> {
    reconcile::reconcile(actuator, request).await
}
