//! Command line of the `gardener-extension-node` binary (clap derive).
//!
//! Every flag has a long name and an environment fallback; defaults show in `--help`.
//! `main` only parses, initialises logging, builds the runtime [`Command::runtime`] asks for
//! and calls [`Command::run`].

use clap::{Parser, Subcommand};

use crate::printable::escape_controls;
use crate::telemetry::LogFormat;

/// A Gardener extension for shoot worker nodes.
#[derive(Debug, Parser)]
#[command(name = "gardener-extension-node", version, about)]
pub struct Cli {
    /// Log line format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,

    /// On failure, print the error's backtrace too (when one was captured: run with
    /// `RUST_BACKTRACE=1` or `RUST_LIB_BACKTRACE=1`). Without it a failure prints the error
    /// and its causes only; `RUST_LIB_BACKTRACE=1` alone has the same effect as this flag.
    #[arg(long, global = true)]
    pub debug: bool,

    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the seed-side controllers (ContainerRuntime gvisor, OperatingSystemConfig, Worker).
    Operator(crate::operator::OperatorArgs),
    /// Run the on-node agent that applies the OperatingSystemConfig of its node.
    Agent(crate::agent::AgentArgs),
    /// Install and start the node agent's unit on a new node (what `gardener-node-agent
    /// bootstrap` does; gardenlet's `gardener-node-init` runs it).
    AgentBootstrap(crate::agent::bootstrap::BootstrapArgs),
    /// Install gVisor (runsc) into the node's containerd; run by the installation DaemonSet.
    GvisorInstall(crate::gvisor_install::GvisorInstallArgs),
    /// Print the manifests the operator would create for an object, without a cluster.
    #[command(subcommand)]
    Render(crate::render::RenderCommand),
    /// Print the CustomResourceDefinitions of every kind this extension reads or writes.
    Crds(crate::crds::CrdsArgs),
    /// Development: start a local control plane with the example objects and run the operator.
    LocalEnv(crate::devenv::LocalEnvArgs),
}

/// The Tokio runtime a subcommand runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeFlavor {
    /// A worker thread per core: the operator and the local environment reconcile many
    /// objects at once.
    MultiThread,
    /// One thread: the node-side commands (agent, gvisor-install) do one thing at a time and
    /// wait on I/O, so more threads would only add stacks and allocator arenas to the node's
    /// memory; the one-shot commands need no more either.
    CurrentThread,
}

impl Command {
    /// The runtime this subcommand runs on.
    pub fn runtime(&self) -> RuntimeFlavor {
        match self {
            Command::Operator(_) | Command::LocalEnv(_) => RuntimeFlavor::MultiThread,
            Command::Agent(_)
            | Command::AgentBootstrap(_)
            | Command::GvisorInstall(_)
            | Command::Render(_)
            | Command::Crds(_) => RuntimeFlavor::CurrentThread,
        }
    }

    /// glibc malloc tunables the subcommand runs with ([`crate::malloc_tuning`]): the node
    /// agent, which stays up on every node, and the operator return large freed blocks at
    /// once.
    pub fn malloc_tunables(&self) -> Option<&'static str> {
        match self {
            Command::Agent(_) => Some(crate::malloc_tuning::AGENT_TUNABLES),
            Command::Operator(_) => Some(crate::malloc_tuning::OPERATOR_TUNABLES),
            _ => None,
        }
    }

    /// Runs the subcommand to completion.
    pub async fn run(self) -> anyhow::Result<()> {
        match self {
            Command::Operator(args) => crate::operator::run(args).await,
            Command::Crds(args) => crate::crds::run(args),
            Command::LocalEnv(args) => crate::devenv::run_local_env(args).await,
            Command::Agent(args) => Ok(crate::agent::run(args).await?),
            Command::AgentBootstrap(args) => Ok(crate::agent::bootstrap::run(args).await?),
            Command::GvisorInstall(args) => Ok(crate::gvisor_install::run(args).await?),
            Command::Render(command) => command.run(),
        }
    }
}

/// The name gardenlet's node-init and the node agent's unit call the binary by.
pub const GARDENER_NODE_AGENT: &str = "gardener-node-agent";

/// The command line as this binary reads it. Called as [`GARDENER_NODE_AGENT`] (`argv[0]`), it
/// takes gardener-node-agent's command line: `bootstrap [flags]` becomes `agent-bootstrap
/// [flags]` and anything else `agent [flags]` (the unit runs `gardener-node-agent
/// --config-dir=...`). Under any other name the arguments stay as they are.
pub fn as_invoked(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let called = args
        .first()
        .and_then(|program| std::path::Path::new(program).file_name())
        .is_some_and(|name| name == GARDENER_NODE_AGENT);
    if !called {
        return args;
    }
    let mut rest = args.into_iter();
    let program = rest.next().unwrap_or_default();
    let mut rest = rest.peekable();
    let subcommand = if rest.peek().is_some_and(|first| first == "bootstrap") {
        rest.next();
        "agent-bootstrap"
    } else {
        "agent"
    };
    std::iter::once(program)
        .chain(std::iter::once(subcommand.into()))
        .chain(rest)
        .collect()
}

/// Whether a failure prints the error's backtrace: with `--debug`, or when
/// `RUST_LIB_BACKTRACE=1` asks for library backtraces. `RUST_BACKTRACE=1` alone does not:
/// it is meant for panics, and a user error (a missing file, a bad flag value) is not one.
pub fn wants_backtrace(debug: bool, rust_lib_backtrace: Option<&std::ffi::OsStr>) -> bool {
    debug || rust_lib_backtrace.is_some_and(|v| v != "0" && !v.is_empty())
}

/// The text a failed command prints on stderr: `Error: ` and the error with its causes,
/// `a: b: c` (a cause whose text the error already ends with is not repeated, see
/// [`crate::error_chain::chain`]), or anyhow's report with the backtrace when
/// `backtrace` is set. Control characters that paths or values in the messages carry are
/// escaped ([`crate::printable::escape_controls`]); only the multi-line backtrace report
/// keeps its own line breaks.
pub fn error_report(error: &anyhow::Error, backtrace: bool) -> String {
    if backtrace {
        format!("Error: {error:?}")
            .split('\n')
            .map(escape_controls)
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        let error: &(dyn std::error::Error + 'static) = error.as_ref();
        let report = format!("Error: {}", crate::error_chain::chain(error));
        escape_controls(&report).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::*;

    #[test]
    fn called_as_gardener_node_agent_it_takes_its_command_line() {
        let line = |args: &[&str]| -> Vec<String> {
            as_invoked(args.iter().map(std::ffi::OsString::from).collect())
                .into_iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(
            line(&[
                "/opt/bin/gardener-node-agent",
                "bootstrap",
                "--config-dir=/x"
            ]),
            [
                "/opt/bin/gardener-node-agent",
                "agent-bootstrap",
                "--config-dir=/x"
            ]
        );
        assert_eq!(
            line(&["/opt/bin/gardener-node-agent", "--config-dir=/x"]),
            ["/opt/bin/gardener-node-agent", "agent", "--config-dir=/x"]
        );
        assert_eq!(
            line(&["gardener-node-agent"]),
            ["gardener-node-agent", "agent"]
        );
        // Under its own name nothing changes, nor for a name that only contains it.
        for args in [
            &["gardener-extension-node", "bootstrap"][..],
            &["/x/gardener-node-agent-old", "bootstrap"][..],
        ] {
            assert_eq!(line(args), args);
        }
        let parsed = Cli::try_parse_from(as_invoked(
            [
                "/opt/bin/gardener-node-agent",
                "bootstrap",
                "--config-dir=/x",
            ]
            .map(std::ffi::OsString::from)
            .to_vec(),
        ))
        .unwrap();
        assert!(
            matches!(parsed.command, Command::AgentBootstrap(a) if a.config_dir.as_os_str() == "/x")
        );
    }

    #[test]
    fn backtraces_only_on_request() {
        assert!(!wants_backtrace(false, None));
        assert!(!wants_backtrace(false, Some(OsStr::new("0"))));
        assert!(!wants_backtrace(false, Some(OsStr::new(""))));
        assert!(wants_backtrace(false, Some(OsStr::new("1"))));
        assert!(wants_backtrace(true, None));
    }

    #[test]
    fn the_report_is_the_chain_on_one_line() {
        let error = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_report(&error, false), "Error: outer: inner");
        assert!(error_report(&error, true).contains("Caused by:"));
    }

    /// kube-rs's errors embed their cause's text and name it as source too: printed once.
    #[test]
    fn a_cause_the_error_already_quotes_is_printed_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("invalid private key: {0}")]
        struct Quoting(#[source] std::io::Error);
        let cause = std::io::Error::other("invalid peer certificate");
        let error = anyhow::Error::from(Quoting(cause)).context("building the API client");
        assert_eq!(
            error_report(&error, false),
            "Error: building the API client: invalid private key: invalid peer certificate"
        );
    }

    #[test]
    fn the_report_escapes_control_characters() {
        let error = anyhow::anyhow!("reading /x\u{1b}[2J\ny").context("outer");
        assert_eq!(
            error_report(&error, false),
            "Error: outer: reading /x\\u{1b}[2J\\ny"
        );
        let with_backtrace = error_report(&error, true);
        assert!(with_backtrace.contains("/x\\u{1b}[2J"), "{with_backtrace}");
        assert!(!with_backtrace.contains('\u{1b}'));
    }
}
