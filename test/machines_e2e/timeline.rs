//! The lifecycle timeline of `machines_of_the_real_mcm_boot_join_and_leave`: when each step of
//! a machine's way from the Worker to a Ready Node (and back out) happened, in seconds since
//! the Worker was created (or deleted), printed to stderr.
//!
//! Two sources, on one clock (the nodes share the host's kernel, so the node journal's
//! `__REALTIME_TIMESTAMP` and the host's wall clock agree):
//! - a [`Sampler`] task looks at the seed and the shoot every 250 ms: the Machine, the CSRs of
//!   the shoot (the node agent's, kubelet's client and serving ones), the Node, the Worker;
//! - [`Timeline::read_node_journal`] reads the node's journal once the node is Ready: its
//!   boot, node-init's bootstrap, the agent's client certificate and applied OSC, kubelet's
//!   start.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use gardener_extension_node::api::machine::Machine as McmMachine;
use gardener_extension_node::api::{LastOperationState, LastOperationType, Worker};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node as KubeNode;
use kube::api::ListParams;
use kube::{Api, Client};
use serde_json::Value;

use crate::support::node::Node;

/// The taint gardenlet's kubelet configuration registers the Node with
/// (`registerWithTaints`); MCM keeps the Machine `Pending` while it is there, and GRM's
/// node-critical-components controller removes it once the node-critical pods are ready.
pub const CRITICAL_COMPONENTS_TAINT: &str = "node.gardener.cloud/critical-components-not-ready";
/// The timeline's event of a Node seen with [`CRITICAL_COMPONENTS_TAINT`].
pub const NODE_TAINTED: &str = "Node registered with the critical-components taint";
/// The timeline's event of that Node seen without it again (GRM removed it).
pub const TAINT_LIFTED: &str = "critical-components taint removed (GRM)";

/// The first time each event was seen, in seconds since the start.
#[derive(Clone)]
pub struct Timeline {
    started: DateTime<Utc>,
    events: Arc<Mutex<BTreeMap<String, f64>>>,
}

impl Timeline {
    /// A timeline whose zero is now.
    pub fn starting_now() -> Self {
        Self {
            started: Utc::now(),
            events: Arc::default(),
        }
    }

    /// Records `event` at `at`, unless it was seen before.
    fn record_at(&self, event: &str, at: DateTime<Utc>) {
        let seconds = (at - self.started).num_microseconds().unwrap_or(0) as f64 / 1e6;
        self.events
            .lock()
            .unwrap()
            .entry(event.to_string())
            .or_insert(seconds);
    }

    /// Records `event` now, unless it was seen before.
    pub fn record(&self, event: &str) {
        self.record_at(event, Utc::now());
    }

    /// When `event` was seen, if it was.
    pub fn at(&self, event: &str) -> Option<f64> {
        self.events.lock().unwrap().get(event).copied()
    }

    /// The events in the order they happened.
    pub fn sorted(&self) -> Vec<(String, f64)> {
        let mut events: Vec<_> = self
            .events
            .lock()
            .unwrap()
            .iter()
            .map(|(e, s)| (e.clone(), *s))
            .collect();
        events.sort_by(|a, b| a.1.total_cmp(&b.1));
        events
    }

    /// Prints the timeline under `title`.
    pub fn print(&self, title: &str) {
        let lines: String = self
            .sorted()
            .iter()
            .map(|(event, seconds)| format!("  {seconds:7.1} s  {event}\n"))
            .collect();
        eprintln!("machines e2e: {title}\n{lines}");
    }

    /// Reads the node's journal: the first entry of each step (see the module docs).
    pub fn read_node_journal(&self, node: &Node) {
        // (event, unit or "" for the whole journal, what the message contains)
        let steps: [(&str, &str, &str); 7] = [
            (
                "node booted (systemd: startup finished)",
                "",
                "Startup finished",
            ),
            ("node-init started", "gardener-node-init.service", ""),
            (
                "node-init ran: bootstrap finished",
                "gardener-node-init.service",
                "bootstrap finished",
            ),
            ("agent started", "gardener-node-agent.service", ""),
            (
                "agent bootstrapped: client certificate issued",
                "gardener-node-agent.service",
                "client certificate issued and written",
            ),
            (
                "OSC applied (agent)",
                "gardener-node-agent.service",
                "OSC applied",
            ),
            ("kubelet started", "kubelet.service", "Started "),
        ];
        for (event, unit, needle) in steps {
            let mut args = vec!["journalctl", "--no-pager", "-o", "json"];
            if !unit.is_empty() {
                args.extend(["-u", unit]);
            }
            let journal = node.machine.run(&args).stdout;
            let first = journal
                .lines()
                .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                .find(|entry| message(entry).contains(needle));
            let at = first.as_ref().and_then(|entry| {
                let micros: i64 = entry["__REALTIME_TIMESTAMP"].as_str()?.parse().ok()?;
                DateTime::from_timestamp_micros(micros)
            });
            if let Some(at) = at {
                self.record_at(event, at);
            }
        }
    }
}

/// An entry's message: a string, or bytes when it holds control characters (colours).
fn message(entry: &Value) -> String {
    match &entry["MESSAGE"] {
        Value::String(text) => text.clone(),
        Value::Array(bytes) => {
            let bytes: Vec<u8> = bytes
                .iter()
                .filter_map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
                .collect();
            String::from_utf8_lossy(&bytes).into_owned()
        }
        _ => String::new(),
    }
}

/// What the sampler looks at.
pub struct Sampler {
    pub machines: Api<McmMachine>,
    pub workers: Api<Worker>,
    pub shoot: Client,
}

impl Sampler {
    /// Looks every 250 ms until aborted; `deleting` names the events of a delete instead.
    pub fn spawn(self, timeline: Timeline, deleting: bool) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(Duration::from_millis(250));
            loop {
                ticks.tick().await;
                if deleting {
                    self.look_at_delete(&timeline).await;
                } else {
                    self.look_at_create(&timeline).await;
                }
            }
        })
    }

    async fn look_at_create(&self, timeline: &Timeline) {
        if let Ok(machines) = self.machines.list(&ListParams::default()).await {
            if !machines.items.is_empty() {
                timeline.record("Machine created (MCM)");
            }
        }
        let csrs = Api::<CertificateSigningRequest>::all(self.shoot.clone());
        if let Ok(csrs) = csrs.list(&ListParams::default()).await {
            for csr in csrs.items {
                let whose = match csr.spec.signer_name.as_str() {
                    "kubernetes.io/kube-apiserver-client" => "node agent's client CSR",
                    "kubernetes.io/kube-apiserver-client-kubelet" => "kubelet's client CSR",
                    "kubernetes.io/kubelet-serving" => "kubelet's serving CSR",
                    _ => continue,
                };
                timeline.record(&format!("{whose} created"));
                let status = csr.status.unwrap_or_default();
                let approved = status
                    .conditions
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Approved" && c.status == "True");
                if approved {
                    timeline.record(&format!("{whose} approved"));
                }
                if status.certificate.is_some() {
                    timeline.record(&format!("{whose} signed"));
                }
            }
        }
        if let Ok(nodes) = Api::<KubeNode>::all(self.shoot.clone())
            .list(&ListParams::default())
            .await
        {
            for node in nodes.items {
                timeline.record("Node registered");
                let tainted = node
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|t| t.iter().any(|t| t.key == CRITICAL_COMPONENTS_TAINT));
                if tainted {
                    timeline.record(NODE_TAINTED);
                } else if timeline.at(NODE_TAINTED).is_some() {
                    timeline.record(TAINT_LIFTED);
                }
                if is_ready(&node) {
                    timeline.record("Node Ready");
                }
            }
        }
        if let Ok(Some(worker)) = self.workers.get_opt("worker").await {
            let succeeded = worker
                .status
                .as_ref()
                .and_then(|s| s.default.last_operation.as_ref())
                .is_some_and(|o| {
                    o.type_ == LastOperationType::Create && o.state == LastOperationState::Succeeded
                });
            if succeeded {
                timeline.record("Worker Succeeded");
            }
        }
    }

    async fn look_at_delete(&self, timeline: &Timeline) {
        if let Ok(machines) = self.machines.list(&ListParams::default()).await {
            if machines
                .items
                .iter()
                .any(|m| m.metadata.deletion_timestamp.is_some())
            {
                timeline.record("Machine deleting (MCM)");
            }
            if machines.items.is_empty() {
                timeline.record("Machine gone (node powered off)");
            }
        }
        if let Ok(nodes) = Api::<KubeNode>::all(self.shoot.clone())
            .list(&ListParams::default())
            .await
        {
            if nodes.items.iter().all(|n| !is_ready(n)) {
                timeline.record("no Node Ready");
            }
            if nodes.items.is_empty() {
                timeline.record("Node gone");
            }
        }
        if let Ok(None) = self.workers.get_opt("worker").await {
            timeline.record("Worker gone");
        }
    }
}

fn is_ready(node: &KubeNode) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
