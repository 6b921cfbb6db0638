//! In-place updates around one apply: the agent's reconcile calls [`before`] right before and
//! [`after`] right after the apply of an OSC; both do nothing for an OSC without
//! `spec.inPlaceUpdates`. The I/O is [`steps`]', the decisions
//! [`crate::agent::in_place::rules`]'.

use std::time::Duration;

use kube::ResourceExt;
use tokio::sync::Notify;
use tracing::warn;

use crate::agent::in_place::steps::{self, Context, Finished, InPlaceError, Prepared};
use crate::agent::pipeline::changes::Side;
use crate::agent::pipeline::osc::NodeOsc;
use crate::agent::ports::cluster::NodeMeta;
use crate::agent::ports::host::Host;

/// Why the reconcile ends before or after the apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Halt {
    /// The node waits for machine-controller-manager to make it ready for the update.
    AwaitNode,
    /// The update failed (reported on the Node) or the node must reboot first.
    Stopped,
}

/// How long kubelet may take to be healthy after kubelet changes (GNA's 5 minutes).
pub const KUBELET_TIMEOUT: Duration = Duration::from_secs(300);

/// Before the apply ([`steps::prepare`]) of `new` over `old` (the last applied OSC): `Some`
/// ends the reconcile (the node waits for machine-controller-manager, or the update failed).
pub async fn before<H: Host>(
    context: &Context<'_, H>,
    new: Side<'_>,
    old: Option<Side<'_>>,
    checksum: &str,
    node: Option<&NodeMeta>,
) -> Result<Option<Halt>, InPlaceError> {
    if new.osc.spec.in_place_updates.is_none() {
        return Ok(None);
    }
    let node = node.map(ResourceExt::name_any);
    let prepared = steps::prepare(context, new, old, checksum, node.as_deref()).await?;
    Ok(match prepared {
        Prepared::Apply => None,
        Prepared::Wait => Some(Halt::AwaitNode),
        Prepared::Stopped(reason) => {
            warn!(%reason, "in-place update stopped");
            Some(Halt::Stopped)
        }
    })
}

/// After the apply ([`steps::finish`]): `Some` ends the reconcile before the checksum is
/// reported (the update failed, or the node must reboot first). `token_trigger` wakes the
/// token sync when the update rotated credentials.
pub async fn after<H: Host>(
    context: &Context<'_, H>,
    osc: &NodeOsc,
    checksum: &str,
    node: Option<&NodeMeta>,
    token_trigger: &Notify,
) -> Result<Option<Halt>, InPlaceError> {
    let node = node.map(ResourceExt::name_any);
    let finished = steps::finish(context, osc, checksum, node.as_deref(), token_trigger).await?;
    Ok(match finished {
        Finished::Done => None,
        Finished::Stopped(reason) => {
            warn!(%reason, "in-place update stopped");
            Some(Halt::Stopped)
        }
    })
}
