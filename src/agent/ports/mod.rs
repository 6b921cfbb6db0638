//! What the agent talks to outside the process, behind narrow interfaces so the rest is
//! testable: [`host`] (files, systemd, commands: the [`host::Host`] trait and its real
//! implementation; [`program`] runs a program for it; [`fake_host`] is the in-memory one the
//! agent's tests run), [`paths`] (the on-node locations GNA uses) and [`cluster`] (the few API
//! calls the agent makes: Node, Secrets, events). File access that follows no link is
//! [`crate::safe_fs`].

pub mod cluster;
pub mod fake_host;
pub mod host;
pub mod paths;
pub mod program;

use std::sync::Arc;

use kube::Client;

use crate::agent::metrics::Metrics;
use cluster::{ApiSecrets, NodeEvents};
use paths::Paths;

/// The ports the agent's features share, built once by
/// [`crate::agent::controller::Agent::new`] and handed to each feature's steps; what a
/// feature needs besides (its settings, its state) it gets on its own.
pub struct Ports<H> {
    /// The API client (it follows a renewed certificate).
    pub client: Client,
    /// The node.
    pub host: Arc<H>,
    /// The agent's on-node paths.
    pub paths: Paths,
    /// Events on the Node.
    pub events: Arc<NodeEvents>,
    /// The agent's metrics.
    pub metrics: Metrics,
    /// `secretRef` and token reads.
    pub secrets: ApiSecrets,
}

impl<H> Ports<H> {
    /// A Warning (`warning`) or Normal event on `node` ([`NodeEvents::report`]: best effort,
    /// a failure is logged and counted).
    pub async fn event(&self, node: &cluster::NodeMeta, warning: bool, reason: &str, note: String) {
        self.events
            .report(&self.metrics, node, warning, reason, note)
            .await;
    }
}

impl<H> Clone for Ports<H> {
    fn clone(&self) -> Self {
        Ports {
            client: self.client.clone(),
            host: self.host.clone(),
            paths: self.paths.clone(),
            events: self.events.clone(),
            metrics: self.metrics.clone(),
            secrets: self.secrets.clone(),
        }
    }
}
