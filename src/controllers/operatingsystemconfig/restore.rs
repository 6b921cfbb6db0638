//! Restore (destination seed): the OSC controller keeps no state (everything follows from the
//! spec and referenced Secrets), so restore is reconcile: the user data is rendered again, and
//! the node-agent ManagedResource is re-created with `keepObjects=false`, adopting the secret
//! the shoot kept during migrate.

use super::{Error, OscActuator, reconcile};
use crate::api::OperatingSystemConfig;
use crate::extension::{Outcome, Request};

/// Same as [`reconcile::reconcile`].
pub async fn restore(
    actuator: &OscActuator,
    request: &Request<'_, OperatingSystemConfig>,
) -> Result<Outcome, Error> {
    reconcile::reconcile(actuator, request).await
}
