//! The Node annotation `worker.gardener.cloud/restart-systemd-services`, as gardener-node-agent
//! v1.149.3 honours it (`pkg/nodeagent/controller/node`; `docs/agent.md#restart-annotation`):
//! the units it names are restarted, the annotation is removed, and the agent's own unit, when
//! named, is restarted last, after the removal (else it would restart itself forever).
//! [`rules`] reads the annotation (pure), [`steps`] restarts and reports.

pub mod rules;
pub mod steps;
