//! In-place updates (GEP-31, `docs/agent.md#in-place-updates`) around an apply: [`rules`]
//! decides (pure: which update, whether the node may go on), [`steps`] does the I/O (the
//! in-place flags, machine-controller-manager's `ReadyForUpdate` gate, the OS update command,
//! the Node's `update-result`), [`flow`] puts them around the apply for the controller's
//! reconcile.

pub mod flow;
pub mod rules;
pub mod steps;
