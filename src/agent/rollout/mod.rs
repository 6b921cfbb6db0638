//! When a node applies a new OSC (`docs/agent.md#reconciliation-delay`,
//! `#disruptive-rollout`): [`delay`] (the reconciliation delay), [`slots`] (the serial lock and
//! the rollout's slots, all in one Lease), [`lock_watch`] (that Lease watched while waiting) and [`rules`] (pure: is a change disruptive, may the node go on, hold
//! or stop), [`steering`] (pure: the settings and pause the seed carries on the pool's Lease),
//! [`steering_watch`] (that Lease followed) and [`steps`] (the rest of the I/O around an apply, for the controller's reconcile).

pub mod delay;
pub mod lock_watch;
pub mod rules;
pub mod slots;
pub mod steering;
pub mod steering_watch;
pub mod steps;
