//! What one reconcile of the agent ends with: [`Reconciled`] or [`ReconcileError`]. Shared
//! by the controller's gates and the rollout's steps ([`crate::agent::rollout::steps`]); an
//! in-place [`Halt`] becomes one.

use std::time::Duration;

use crate::agent::in_place::steps::Halt;
use crate::agent::pipeline::apply::ApplyError;
use crate::agent::pipeline::osc::InvalidOsc;

/// Why a reconcile did not finish.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The OSC is invalid; nothing was touched.
    #[error(transparent)]
    Invalid(#[from] InvalidOsc),
    /// Applying failed part-way; the journal has the rest.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// An in-place update step failed ([`crate::agent::in_place::steps`]).
    #[error("in-place update")]
    InPlace(#[from] crate::agent::in_place::steps::InPlaceError),
    /// Reporting on the Node failed.
    #[error("patching node {0}")]
    Node(String, #[source] kube::Error),
    /// Taking or releasing the serial lock (or a rollout slot) failed.
    #[error("serial reconciliation lock kube-system/{0}")]
    SerialLock(String, #[source] kube::Error),
    /// The disruptive rollout's state file could not be written or removed.
    #[error("rollout state file")]
    RolloutState(#[source] crate::agent::ports::host::HostError),
}

impl ReconcileError {
    /// The `category` label of the error metric.
    pub fn category(&self) -> &'static str {
        match self {
            ReconcileError::Invalid(_) => "invalid-osc",
            ReconcileError::Apply(error) => error.category(),
            ReconcileError::InPlace(error) => error.category(),
            ReconcileError::Node(..) => "node-patch",
            ReconcileError::SerialLock(..) => "serial-lock",
            ReconcileError::RolloutState(..) => "rollout-state",
        }
    }
}

/// What a reconcile ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reconciled {
    /// No secret.
    NoSecret,
    /// The Node already reports this checksum.
    UpToDate,
    /// In-place update pending: wait until the Node changes (machine-controller-manager makes
    /// it ready for the update; [`crate::agent::in_place::steps`]).
    AwaitingNode,
    /// In-place update failed (reported on the Node) or waits for the reboot: nothing more
    /// until the secret changes or the sync period passes.
    InPlaceStopped,
    /// Applied (and reported when the Node is known).
    Applied,
    /// The agent's own unit changed: exit so systemd starts the new one.
    RestartSelf,
    /// Serial reconciliation: another node holds the lock; try again when it is released
    /// (the lock is watched meanwhile) or after this long at the latest.
    AwaitingLock(Duration),
    /// A disruptive change waits for one of `slots` rollout slots; try again when one is
    /// released (the Lease is watched meanwhile) or after `retry_in` at the latest.
    AwaitingSlot {
        /// Until the next look at the latest.
        retry_in: Duration,
        /// How many slots the pool has.
        slots: u32,
    },
    /// A disruptive change was applied; its slot is held until the node is healthy: check
    /// again after this long.
    Holding(Duration),
    /// The disruptive rollout stopped on this node (kept until resumed).
    Stopped,
    /// The seed paused the pool's rollout ([`crate::agent::rollout::steering`]) and this node
    /// has not started applying the secret's content: nothing until the pause is lifted (the
    /// pool's Lease is watched) or the sync period passes.
    Paused,
}

impl From<Halt> for Reconciled {
    fn from(halt: Halt) -> Self {
        match halt {
            Halt::AwaitNode => Reconciled::AwaitingNode,
            Halt::Stopped => Reconciled::InPlaceStopped,
        }
    }
}
