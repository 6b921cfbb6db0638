//! kubelet and containerd kept alive as gardener-node-agent v1.149.3 does
//! (`pkg/nodeagent/controller/healthcheck`; `docs/agent.md#health-checks`): every
//! [`rules::CHECK_INTERVAL`] kubelet's `/healthz` and containerd's version API are asked; one
//! that stays unhealthy for [`rules::MAX_FAILURE`] is restarted, with GNA's events. [`rules`]
//! decides (pure), [`steps`] probes, reports and restarts.

pub mod rules;
pub mod steps;
