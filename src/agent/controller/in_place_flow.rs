//! The controller's part of in-place updates (GEP-31): [`Agent::reconcile`] calls
//! [`Agent::in_place_before`] right before and [`Agent::in_place_after`] right after the apply
//! of an OSC; both do nothing for an OSC without `spec.inPlaceUpdates`. The steps are in
//! [`in_place_update`], the decisions in [`crate::agent::in_place::rules`]
//! (`docs/agent.md#in-place-updates`).

use std::time::Duration;

use kube::ResourceExt;
use tracing::warn;

use super::{Agent, ReconcileError, Reconciled};
use crate::agent::in_place::steps::{self, Finished, Prepared};
use crate::agent::pipeline::changes::Side;
use crate::agent::pipeline::osc::NodeOsc;
use crate::agent::ports::cluster::NodeMeta;
use crate::agent::ports::host::Host;

/// How long kubelet may take to be healthy after kubelet changes (GNA's 5 minutes).
const KUBELET_TIMEOUT: Duration = Duration::from_secs(300);

impl<H: Host + 'static> Agent<H> {
    /// What the in-place steps need.
    fn in_place_context(&self) -> steps::Context<'_, H> {
        steps::Context {
            client: &self.client,
            host: self.host.as_ref(),
            paths: &self.settings.paths,
            retry: steps::RetryPolicy::default(),
            kubelet_timeout: KUBELET_TIMEOUT,
        }
    }

    /// Before the apply ([`steps::prepare`]) of `new` over `old` (the last applied
    /// OSC): `Some` ends the reconcile (the node waits for machine-controller-manager, or the
    /// update failed).
    pub(super) async fn in_place_before(
        &self,
        new: Side<'_>,
        old: Option<Side<'_>>,
        checksum: &str,
        node: Option<&NodeMeta>,
    ) -> Result<Option<Reconciled>, ReconcileError> {
        if new.osc.spec.in_place_updates.is_none() {
            return Ok(None);
        }
        let node = node.map(ResourceExt::name_any);
        let prepared = steps::prepare(
            &self.in_place_context(),
            new,
            old,
            checksum,
            node.as_deref(),
        )
        .await?;
        Ok(match prepared {
            Prepared::Apply => None,
            Prepared::Wait => Some(Reconciled::AwaitingNode),
            Prepared::Stopped(reason) => {
                warn!(%reason, "in-place update stopped");
                Some(Reconciled::InPlaceStopped)
            }
        })
    }

    /// After the apply ([`steps::finish`]): `Some` ends the reconcile before the
    /// checksum is reported (the update failed, or the node must reboot first).
    pub(super) async fn in_place_after(
        &self,
        osc: &NodeOsc,
        checksum: &str,
        node: Option<&NodeMeta>,
    ) -> Result<Option<Reconciled>, ReconcileError> {
        let node = node.map(ResourceExt::name_any);
        let finished = steps::finish(
            &self.in_place_context(),
            osc,
            checksum,
            node.as_deref(),
            &self.token_trigger,
        )
        .await?;
        Ok(match finished {
            Finished::Done => None,
            Finished::Stopped(reason) => {
                warn!(%reason, "in-place update stopped");
                Some(Reconciled::InPlaceStopped)
            }
        })
    }
}
