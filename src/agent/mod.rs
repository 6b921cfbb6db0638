//! The on-node agent, `gardener-extension-node agent`: applies the node's
//! OperatingSystemConfig through systemd, as a drop-in for gardener-node-agent (same config
//! file, same secret, same on-node paths, same Node annotation and labels; the upstream rules
//! are in `docs/agent.md#the-gardener-node-agent-contract`).
//!
//! Pipeline of one OSC apply, each step its own module:
//!
//! 1. [`osc`]: decode `osc.yaml` from the secret, validate it (nothing touches the disk
//!    before this passes), merge spec and status. Pure.
//! 2. [`changes`]: diff against `last-applied-osc.yaml` into a [`journal::Journal`]. Pure.
//! 3. [`apply`]: work through the journal on the [`host::Host`] — files, containerd config
//!    ([`crate::containerd::cri`]), units, daemon-reload, parallel unit jobs, deletions —
//!    rewriting the journal after every item, so a killed agent resumes where it stopped.
//! 4. [`controller`]: report on the Node (checksum annotation, labels, events — unit job
//!    events aggregated by [`unit_events`]).
//!
//! For OSCs with `spec.inPlaceUpdates` (GEP-31), [`in_place_update`] runs around step 3:
//! the in-place flags, machine-controller-manager's `ReadyForUpdate` gate, the OS update
//! command and the Node's `update-result` (decisions in [`in_place`]).
//!
//! Around it: [`config`] (flags + NodeAgentConfiguration), [`credentials`] (which kubeconfig
//! or token), [`cluster`] (the narrowly scoped API calls), [`delay`] (reconciliation delay),
//! [`lease`] (the node Lease, renewed from its own thread: [`heartbeat`]), [`serial`] (serial
//! reconciliation lock), [`token`] (token sync), [`drift`] (drift repair), [`unit_check`] (the
//! `SystemdUnitsReady` condition), [`metrics`].
//! See `docs/agent.md` for the node layout and the supported bootstrap path.

pub mod apply;
pub mod changes;
pub mod cluster;
pub mod config;
pub mod controller;
pub mod credentials;
pub mod delay;
pub mod drift;
pub mod heartbeat;
pub mod host;
pub mod in_place;
pub mod in_place_update;
pub mod journal;
pub mod lease;
pub mod metrics;
pub mod osc;
pub mod paths;
pub mod rollout;
/// The agent's link-safe file helpers, shared with the installer since they moved to the crate
/// root ([`crate::safe_fs`]); kept here so `agent::safe_fs` paths keep working.
pub use crate::safe_fs;
pub mod serial;
pub mod token;
pub mod unit_check;
pub mod unit_events;

#[cfg(test)]
pub(crate) mod testing;

use std::sync::Arc;

use tracing::info;

pub use config::AgentArgs;

use crate::http::{Readiness, ServerState};

/// Why the agent could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Flags or config file.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// No usable credentials.
    #[error(transparent)]
    Credentials(#[from] credentials::CredentialsError),
    /// The API client could not be built.
    #[error("building the API client")]
    Client(#[source] kube::Error),
    /// The metrics server could not bind.
    #[error("serving metrics on {address}")]
    Metrics {
        /// The address.
        address: std::net::SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Signal handling could not be set up.
    #[error("installing signal handlers")]
    Signal(#[source] std::io::Error),
    /// The heartbeat thread could not be started.
    #[error("starting the heartbeat thread")]
    Heartbeat(#[source] std::io::Error),
}

/// Runs the agent until it is stopped or must restart itself.
pub async fn run(args: AgentArgs) -> Result<(), AgentError> {
    let settings = config::load(args)?;
    info!(
        config = %settings.config_file.display(),
        secret = %settings.secret_name,
        hostname = %settings.hostname,
        drift_check_interval = ?settings.drift_check_interval,
        "starting the node agent"
    );
    let source = credentials::choose(
        settings.kubeconfig_flag.as_deref(),
        &settings.config.client_connection.kubeconfig,
        &settings.paths,
        |path| path.exists(),
    )?;
    info!(credentials = ?source, "credentials");
    let client_config =
        credentials::client_config(&source, &settings.config, &settings.paths).await?;
    let client =
        crate::kubeconfig::build(client_config.clone(), "agent").map_err(AgentError::Client)?;
    for leftover in journal::remove_leftover_temp_files(&settings.paths) {
        info!(path = %leftover.display(), "removed a temporary file a killed agent left");
    }

    let mut registry = crate::metrics::new_registry();
    let metrics = metrics::Metrics::register(&mut registry);
    let readiness = Readiness::default();
    let listener = tokio::net::TcpListener::bind(settings.metrics_address)
        .await
        .map_err(|source| AgentError::Metrics {
            address: settings.metrics_address,
            source,
        })?;
    let state = ServerState {
        registry: Arc::new(registry),
        readiness: readiness.clone(),
    };
    info!(address = %settings.metrics_address, "serving /metrics, /healthz and /readyz");
    let server = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, crate::http::router(state)).await {
            tracing::error!(%error, "metrics server stopped");
        }
    });

    let host = host::SystemHost::new(
        settings.system_bus_address.clone(),
        settings.unit_job_timeout,
        settings.containerd_address.clone(),
        settings.containerd_namespace.clone(),
        settings.paths.temp(),
    );
    let agent = Arc::new(controller::Agent {
        events: cluster::NodeEvents::new(&client, &settings.hostname),
        serial: tokio::sync::Mutex::new(serial::SerialLock::new(&client, &settings.hostname)),
        reported_budget: std::sync::Mutex::default(),
        secrets: cluster::ApiSecrets::new(&client),
        client,
        host: Arc::new(host),
        metrics,
        token_trigger: Arc::new(tokio::sync::Notify::new()),
        settings,
    });
    let result = agent.run(readiness, client_config).await;
    server.abort();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::testing::inline_file;

    /// Issue #26 item 7: what the agent shows of an error (log fields, event notes) is one
    /// line without terminal escapes, whatever the OSC or a command put into it.
    #[test]
    fn errors_are_shown_on_one_line_without_control_characters() {
        let mut osc = osc::NodeOsc::default();
        osc.spec
            .files
            .push(inline_file("/etc/\u{1b}[2J\nforged: line", "x"));
        let rejected = osc::validate(&osc).unwrap_err();
        let shown = rejected.to_string();
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert!(
            shown.contains(
                "file `/etc/\\u{1b}[2J\\nforged: line`: path must not contain control characters"
            ),
            "{shown}"
        );
        // serde quotes the refused value: `unknown variant `x<ESC>[2J<LF>y``.
        let decode = osc::decode(b"spec: {units: [{name: a.service, command: \"x\\e[2J\\ny\"}]}\n")
            .unwrap_err()
            .to_string();
        assert!(decode.contains("x\\u{1b}[2J\\ny"), "{decode}");
        assert!(!decode.chars().any(char::is_control), "{decode:?}");

        let failed = host::HostError::Command {
            command: "ctr images pull".into(),
            status: "exit status: 1".into(),
            stderr: "pulling \u{1b}]0;title\u{7}\nerror".into(),
        };
        let wrapped = apply::ApplyError::Host {
            step: "extracting /x from image\u{1b}[31m".into(),
            source: failed,
        };
        assert_eq!(
            crate::error_chain::printable(&wrapped),
            "extracting /x from image\\u{1b}[31m: `ctr images pull` failed (exit status: 1): pulling \\u{1b}]0;title\\u{7}\\nerror"
        );
    }
}
