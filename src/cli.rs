//! Command line of the `gardener-extension-node` binary (clap derive).
//!
//! Every flag has a long name and an environment fallback; defaults show in `--help`.
//! `main` only parses, initialises logging, builds the runtime [`Command::runtime`] asks for
//! and calls [`Command::run`].

use clap::{Parser, Subcommand};

use crate::telemetry::LogFormat;

/// A Gardener extension for shoot worker nodes.
#[derive(Debug, Parser)]
#[command(name = "gardener-extension-node", version, about)]
pub struct Cli {
    /// Log line format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,

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
            | Command::GvisorInstall(_)
            | Command::Render(_)
            | Command::Crds(_) => RuntimeFlavor::CurrentThread,
        }
    }

    /// glibc malloc tunables the subcommand runs with ([`crate::malloc_tuning`]): the node
    /// agent, which stays up on every node, returns large freed blocks at once.
    pub fn malloc_tunables(&self) -> Option<&'static str> {
        match self {
            Command::Agent(_) => Some(crate::malloc_tuning::AGENT_TUNABLES),
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
            Command::GvisorInstall(args) => Ok(crate::gvisor_install::run(args).await?),
            Command::Render(command) => command.run(),
        }
    }
}
