//! In-place updates (GEP-31, `docs/agent.md#in-place-updates`) around an apply: [`rules`]
//! decides (pure: which update, whether the node may go on), [`steps`] does the I/O (the
//! in-place flags, machine-controller-manager's `ReadyForUpdate` gate, the OS update command,
//! the Node's `update-result`); the controller's reconcile calls [`steps::prepare`] before the
//! apply and [`steps::finish`] after it.

pub mod rules;
pub mod steps;
