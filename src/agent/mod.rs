//! The on-node agent, `gardener-extension-node agent`: applies the node's
//! OperatingSystemConfig through systemd, as a drop-in for gardener-node-agent (same config
//! file, same secret, same on-node paths, same Node annotation and labels; the upstream rules
//! are in `docs/agent.md#the-gardener-node-agent-contract`).
//!
//! The folders read as the agent's architecture (module map: `docs/architecture.md#module-map`);
//! a feature's pure decisions are its `rules`, its I/O its `steps`, which get the shared
//! [`ports::Ports`] and the feature's own settings:
//!
//! - [`controller`]: the main loop — watches, when to reconcile; one reconcile as a sequence of
//!   gates from the secret to the Node's report.
//! - [`pipeline`]: one OSC apply, `osc → changes → journal → apply`, plus drift repair.
//! - [`in_place`]: GEP-31 in-place updates before and after an apply.
//! - [`rollout`]: the reconciliation delay, the serial lock and the disruptive rollout's slots.
//! - [`restart_request`]: the Node's request to restart units.
//! - [`self_healing`]: kubelet and containerd probed and restarted.
//! - [`health`]: the `SystemdUnitsReady` condition, unit events, the host name check.
//! - [`bootstrap`]: `gardener-node-agent bootstrap`, the agent's unit on a new node.
//! - [`access`]: the agent's credentials, kubeconfigs and token sync.
//! - [`client_certificate`]: the client certificate from a bootstrap token, and its renewal.
//! - [`liveness`]: the node Lease on its own thread.
//! - [`ports`]: everything outside the process — the host ([`ports::host::Host`], and the
//!   in-memory [`ports::fake_host::FakeHost`] the tests run the agent on), the on-node paths,
//!   the narrowly scoped API calls.
//! - [`config`] (flags + NodeAgentConfiguration), [`outcome`] (what a reconcile ends with),
//!   [`error`] (why the agent stopped), [`metrics`] and where they are served
//!   ([`metrics_server`]).

pub mod access;
pub mod bootstrap;
pub mod client_certificate;
pub mod config;
pub mod controller;
pub mod error;
pub mod health;
pub mod in_place;
pub mod liveness;
pub mod metrics;
pub mod metrics_server;
pub mod outcome;
pub mod pipeline;
pub mod ports;
pub mod restart_request;
pub mod rollout;
pub mod self_healing;

#[cfg(test)]
pub(crate) mod testing;

use std::sync::Arc;

use tracing::info;

pub use config::AgentArgs;
pub use error::AgentError;

use crate::agent::access::credentials::Source;
use crate::http::{Readiness, ServerState};

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
    let source = access::credentials::choose(
        settings.kubeconfig_flag.as_deref(),
        &settings.config.client_connection.kubeconfig,
        &settings.paths,
        |path| path.exists(),
    )?;
    info!(credentials = ?source, "credentials");
    client_certificate::lifecycle::kubelet(
        &settings.config,
        &settings.paths,
        &settings.paths.kubelet_dir(),
    );
    let Some(source) = certificate_if_new(source, &settings).await? else {
        return Ok(());
    };
    // GNA renews only the certificate of its own kubeconfig, so do we.
    let renews_certificate = source == Source::Kubeconfig(settings.paths.kubeconfig());
    let client_config =
        access::credentials::client_config(&source, &settings.config, &settings.paths).await?;
    let credentials = access::switching_client::Credentials::new(client_config);
    for leftover in pipeline::journal::remove_leftover_temp_files(&settings.paths) {
        info!(path = %leftover.display(), "removed a temporary file a killed agent left");
    }

    let mut registry = crate::metrics::new_registry();
    let metrics = metrics::Metrics::register(&mut registry);
    if renews_certificate {
        metrics.register_certificate(&mut registry);
    }
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
    let router = crate::http::router(state);
    info!(address = %settings.metrics_address, "serving /metrics, /healthz and /readyz");
    let mut servers = vec![tokio::spawn(metrics_server::serve(
        listener,
        router.clone(),
    ))];
    if settings.metrics_on_node_ip {
        let client = credentials.client("agent").map_err(AgentError::Client)?;
        servers.push(tokio::spawn(metrics_server::serve_on_node_ip(
            client,
            settings.hostname.clone(),
            settings.metrics_address.port(),
            router,
            metrics.clone(),
        )));
    }

    let host = ports::host::SystemHost::new(
        settings.system_bus_address.clone(),
        settings.unit_job_timeout,
        settings.containerd_address.clone(),
        settings.containerd_namespace.clone(),
        settings.paths.temp(),
    );
    let agent = controller::Agent::new(
        settings,
        credentials,
        renews_certificate,
        Arc::new(host),
        metrics,
    )
    .map_err(AgentError::Client)?;
    let result = Arc::new(agent).run(readiness).await;
    for server in servers {
        server.abort();
    }
    result
}

/// On a new machine (only a bootstrap token): the client certificate first, asked for until it
/// is issued; then the kubeconfig it was written to. `None`: stopped (SIGTERM, SIGINT) before.
async fn certificate_if_new(
    source: Source,
    settings: &config::Settings,
) -> Result<Option<Source>, AgentError> {
    let Source::BootstrapToken(token) = source else {
        return Ok(Some(source));
    };
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(AgentError::Signal)?;
    tokio::select! {
        () = client_certificate::lifecycle::bootstrap(&settings.config, &settings.paths, &token) => {
            Ok(Some(Source::Kubeconfig(settings.paths.kubeconfig())))
        }
        _ = terminate.recv() => {
            info!("stopping before the client certificate was issued");
            Ok(None)
        }
        _ = tokio::signal::ctrl_c() => {
            info!("stopping before the client certificate was issued");
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::testing::inline_file;

    /// Issue #26 item 7: what the agent shows of an error (log fields, event notes) is one
    /// line without terminal escapes, whatever the OSC or a command put into it.
    #[test]
    fn errors_are_shown_on_one_line_without_control_characters() {
        let mut osc = pipeline::osc::NodeOsc::default();
        osc.spec
            .files
            .push(inline_file("/etc/\u{1b}[2J\nforged: line", "x"));
        let rejected = pipeline::osc::validate(&osc).unwrap_err();
        let shown = rejected.to_string();
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert!(
            shown.contains(
                "file `/etc/\\u{1b}[2J\\nforged: line`: path must not contain control characters"
            ),
            "{shown}"
        );
        // serde quotes the refused value: `unknown variant `x<ESC>[2J<LF>y``.
        let decode = pipeline::osc::decode(
            b"spec: {units: [{name: a.service, command: \"x\\e[2J\\ny\"}]}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(decode.contains("x\\u{1b}[2J\\ny"), "{decode}");
        assert!(!decode.chars().any(char::is_control), "{decode:?}");

        let failed = ports::host::HostError::Command {
            command: "ctr images pull".into(),
            status: "exit status: 1".into(),
            stderr: "pulling \u{1b}]0;title\u{7}\nerror".into(),
        };
        let wrapped = pipeline::apply::ApplyError::Host {
            step: "extracting /x from image\u{1b}[31m".into(),
            source: failed,
        };
        assert_eq!(
            crate::error_chain::printable(&wrapped),
            "extracting /x from image\\u{1b}[31m: `ctr images pull` failed (exit status: 1): pulling \\u{1b}]0;title\\u{7}\\nerror"
        );
    }
}
