//! kubelet and containerd kept alive as gardener-node-agent v1.149.3 does
//! (`pkg/nodeagent/controller/healthcheck`; `docs/agent.md#health-checks`): every
//! [`rules::CHECK_INTERVAL`] kubelet's `/healthz` and containerd's version API are asked; one
//! that stays unhealthy for [`rules::MAX_FAILURE`] is restarted, with GNA's events; a Node
//! that lost its addresses gets its last internal IP back. [`rules`] and [`addresses`] decide
//! (pure), [`steps`] probes, reports, restarts and writes.

pub mod addresses;
pub mod rules;
pub mod steps;
