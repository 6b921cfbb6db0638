//! The Node annotation `worker.gardener.cloud/restart-systemd-services`, as gardener-node-agent
//! v1.149.3 honours it (`pkg/nodeagent/controller/node`; `docs/agent.md#restart-annotation`):
//! the units it names are restarted, the annotation is removed, and the agent's own unit, when
//! named, is restarted last. Unlike GNA, the annotation is removed before anything restarts
//! (a request is acted on at most once), units that would stop the machine and template
//! instances are refused, at most [`rules::MAX_UNITS`] units restart per request, and the
//! restarts run beside the main loop, not in it. [`rules`] reads the annotation (pure),
//! [`steps`] removes it, restarts and reports.

pub mod rules;
pub mod steps;
