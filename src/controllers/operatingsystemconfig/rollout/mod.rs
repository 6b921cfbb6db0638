//! The pools' rollout as the seed sees it (`docs/agent.md#disruptive-rollout`, "Seen from
//! the seed"): [`rules`] (pure: the OSC condition from the pool's Nodes, the shoot access
//! objects) and [`watch`] (the task beside the OSC controller that lists the Nodes and keeps
//! the condition).

pub mod rules;
pub mod watch;
