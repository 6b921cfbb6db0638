//! When a node applies a new OSC (`docs/agent.md#reconciliation-delay`,
//! `#disruptive-rollout`): [`delay`] (the reconciliation delay), [`slots`] (the serial and
//! rollout slot Leases) and [`rules`] (pure: is a change disruptive, may the node go on, hold
//! or stop); the controller's rollout flow does the rest of the I/O.

pub mod delay;
pub mod rules;
pub mod slots;
