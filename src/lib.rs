//! gardener-extension-node: a Gardener extension for the worker nodes of shoot clusters.
//!
//! The crate builds one binary with several subcommands (see [`cli`]). The library half
//! exists so that the integration tests under `test/` can use the same code:
//!
//! - [`api`]: Rust types of every kind we read or write (no I/O).
//! - [`extension`]: the generic Gardener extension reconciler (contract, status, finalizers).
//! - [`controllers`]: the actuators (gVisor ContainerRuntime, OperatingSystemConfig, Worker).
//! - [`operator`]: the seed-side controllers and their HTTP endpoints.
//! - [`devenv`]: a local control plane (etcd + kube-apiserver) for `make start` and the tests.
//! - [`crds`]: generation of `crds/` from the types in [`api`].
//! - [`gvisor_install`]: the `gvisor-install` subcommand the installation DaemonSet runs.
//! - [`agent`]: the on-node agent (`agent` subcommand) that applies a node's
//!   OperatingSystemConfig through systemd (see `docs/agent.md`).
//! - [`containerd`], [`systemd`], [`safe_fs`]: node-side building blocks shared by the
//!   installer and the agent (TOML-preserving containerd config edits; a systemd D-Bus
//!   client; file access that follows no link and waits on no FIFO).
//! - [`stdout`]: a subcommand's output, a closed pipe taken as the end.
//! - [`error_chain`]: an error and its causes as one line, the crate's one formatter.
//! - [`printable`]: control characters in text from outside made visible before it is shown.
//! - [`go_duration`]: Go's `time.Duration` strings, read and printed.
//! - [`root_path`]: resolving a path inside a root folder, links included (the installer's
//!   host root, an image the agent copies a file from).

pub mod agent;
pub mod api;
pub mod cli;
pub mod containerd;
pub mod controllers;
pub mod crds;
pub mod devenv;
pub mod error_chain;
pub mod extension;
pub mod go_duration;
pub mod gvisor_install;
pub mod http;
pub mod imagevector;
pub mod kubeconfig;
pub mod malloc_tuning;
pub mod metrics;
pub mod operator;
pub mod osc_rules;
pub mod printable;
pub mod render;
pub mod root_path;
pub mod safe_fs;
pub mod stdout;
pub mod systemd;
pub mod telemetry;
