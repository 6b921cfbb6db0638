//! The pools' rollout as the seed sees it (`docs/agent.md#disruptive-rollout`, "Seen from
//! the seed"): [`rules`] (pure: the OSC condition from the pool's Nodes, the shoot access
//! objects, which tokens may be sent), [`steering`] (pure: the settings and pause the seed
//! carries to the pool's Lease in the shoot), [`watch`] (the task beside the OSC controller that
//! starts one bounded step per shoot every round and keeps itself running) and [`step`] (one
//! shoot's I/O: list the Nodes, write the condition, carry the settings, within its time
//! limits).

pub mod rules;
pub mod steering;
pub mod step;
pub mod watch;
