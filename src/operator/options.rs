//! Flags of `gardener-extension-node operator`, named as upstream Gardener extensions name
//! them, so the chart passes the same values gardenlet's conventions expect.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{ArgAction, Args, ValueEnum};

use crate::controllers::operatingsystemconfig::handover::NodeAgentSecrets;

/// The controllers the operator can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum)]
pub enum ControllerName {
    /// ContainerRuntime of type gvisor.
    Containerruntime,
    /// OperatingSystemConfig of the types in `--os-types`.
    Operatingsystemconfig,
    /// Worker of the types in `--worker-types`.
    Worker,
}

/// Flags of `operator`.
#[derive(Debug, Clone, Args)]
pub struct OperatorArgs {
    /// Kubeconfig of the seed cluster; in-cluster configuration when unset.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Address of the HTTP server for /healthz, /readyz and /metrics.
    #[arg(long, env = "HTTP_BIND_ADDRESS", default_value = "0.0.0.0:8080")]
    pub http_bind_address: SocketAddr,

    /// Extension classes whose objects we handle (objects without class count as `shoot`).
    #[arg(
        long,
        env = "EXTENSION_CLASSES",
        value_delimiter = ',',
        default_value = "shoot"
    )]
    pub extension_classes: Vec<String>,

    /// Objects reconciled at the same time, per kind.
    #[arg(long, env = "MAX_CONCURRENT_RECONCILES", default_value_t = 5,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1000))]
    pub max_concurrent_reconciles: usize,

    /// React to spec (generation) changes instead of the gardener.cloud/operation annotation.
    #[arg(long, env = "IGNORE_OPERATION_ANNOTATION", default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub ignore_operation_annotation: bool,

    /// Namespace of the heartbeat Lease `gardener-extension-heartbeat` (the chart passes the
    /// release namespace).
    #[arg(long, env = "HEARTBEAT_NAMESPACE", default_value = "default")]
    pub heartbeat_namespace: String,

    /// Seconds between heartbeat renewals.
    #[arg(long, env = "HEARTBEAT_RENEW_INTERVAL_SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub heartbeat_renew_interval_seconds: u64,

    /// Elect a leader among replicas (disable only for local runs).
    #[arg(long, env = "LEADER_ELECTION", default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub leader_election: bool,

    /// Name of the leader election Lease.
    #[arg(
        long,
        env = "LEADER_ELECTION_ID",
        default_value = "gardener-extension-node-leader-election"
    )]
    pub leader_election_id: String,

    /// Namespace of the leader election Lease (the chart sets it from the downward API).
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE", default_value = "default")]
    pub leader_election_namespace: String,

    /// Version of the Gardener that deployed us (informational, logged).
    #[arg(long, env = "GARDENER_VERSION")]
    pub gardener_version: Option<String>,

    /// Controllers to run (comma-separated).
    #[arg(
        long,
        env = "CONTROLLERS",
        value_delimiter = ',',
        value_enum,
        default_value = "containerruntime,operatingsystemconfig,worker"
    )]
    pub controllers: Vec<ControllerName>,

    /// Worker types (infrastructure providers) the Worker controller handles.
    #[arg(
        long,
        env = "WORKER_TYPES",
        value_delimiter = ',',
        default_value = "local"
    )]
    pub worker_types: Vec<String>,

    /// OperatingSystemConfig types (machine image names) the OSC controller handles.
    #[arg(
        long,
        env = "OS_TYPES",
        value_delimiter = ',',
        default_value = "debian,ubuntu"
    )]
    pub os_types: Vec<String>,

    /// Who ships the node-agent config secret of each `reconcile` OperatingSystemConfig into
    /// the shoot: `auto` ships ours only while the shoot namespace has no gardenlet
    /// ManagedResource `shoot-gardener-node-agent` (and hands the secrets over when it comes
    /// or goes), `always` always, `never` never.
    #[arg(long, env = "NODE_AGENT_SECRETS", value_enum, default_value_t = NodeAgentSecrets::Auto)]
    pub node_agent_secrets: NodeAgentSecrets,

    /// Repository of a test installation image; used with `testImageTag` in a gVisor
    /// providerConfig (testing unreleased images only).
    #[arg(long, env = "GVISOR_INSTALLATION_TEST_REPOSITORY")]
    pub gvisor_installation_test_repository: Option<String>,

    /// Seconds a gVisor ContainerRuntime deletion waits, from its deletion timestamp, for the
    /// pool's nodes to uninstall gVisor (runsc removed from containerd's config) before it
    /// gives up with a `GVisorUninstallIncomplete` Warning event and deletes anyway. 0 turns
    /// the uninstall off: the installation is deleted at once and nodes keep the runtime
    /// entry (upstream's behaviour).
    #[arg(long, env = "GVISOR_UNINSTALL_TIMEOUT_SECONDS", default_value_t = 600)]
    pub gvisor_uninstall_timeout_seconds: u64,

    /// Machine types that offer `/dev/kvm` (comma-separated, `*` for any text, e.g.
    /// `*.metal`): a gVisor profile may ask for the `kvm` platform only on pools of these
    /// types. Empty (the default): no pool may.
    #[arg(long, env = "GVISOR_KVM_MACHINE_TYPES", value_delimiter = ',')]
    pub gvisor_kvm_machine_types: Vec<String>,
}

impl OperatorArgs {
    /// Defaults for a local run against `kubeconfig` (no leader election).
    pub fn local(kubeconfig: PathBuf, http_bind_address: SocketAddr) -> Self {
        OperatorArgs {
            kubeconfig: Some(kubeconfig),
            http_bind_address,
            extension_classes: vec!["shoot".into()],
            max_concurrent_reconciles: 5,
            ignore_operation_annotation: false,
            heartbeat_namespace: "default".into(),
            heartbeat_renew_interval_seconds: 30,
            leader_election: false,
            leader_election_id: "gardener-extension-node-leader-election".into(),
            leader_election_namespace: "default".into(),
            gardener_version: None,
            controllers: vec![
                ControllerName::Containerruntime,
                ControllerName::Operatingsystemconfig,
                ControllerName::Worker,
            ],
            worker_types: vec![crate::controllers::worker::DEFAULT_TYPE.into()],
            os_types: vec!["debian".into(), "ubuntu".into()],
            node_agent_secrets: NodeAgentSecrets::Auto,
            gvisor_installation_test_repository: None,
            gvisor_uninstall_timeout_seconds: 600,
            gvisor_kvm_machine_types: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;

    #[derive(Debug, Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: OperatorArgs,
    }

    #[test]
    fn zero_concurrent_reconciles_is_refused() {
        let error = Wrapper::try_parse_from(["operator", "--max-concurrent-reconciles=0"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains("--max-concurrent-reconciles"), "{error}");
        assert!(error.contains("1.."), "names the range: {error}");
        let parsed =
            Wrapper::try_parse_from(["operator", "--max-concurrent-reconciles=1"]).unwrap();
        assert_eq!(parsed.args.max_concurrent_reconciles, 1);
    }

    #[test]
    fn the_uninstall_timeout_defaults_to_ten_minutes_and_zero_is_accepted() {
        let parsed = Wrapper::try_parse_from(["operator"]).unwrap();
        assert_eq!(parsed.args.gvisor_uninstall_timeout_seconds, 600);
        let parsed =
            Wrapper::try_parse_from(["operator", "--gvisor-uninstall-timeout-seconds=0"]).unwrap();
        assert_eq!(parsed.args.gvisor_uninstall_timeout_seconds, 0);
        let help = Wrapper::command().render_long_help().to_string();
        assert!(help.contains("GVISOR_UNINSTALL_TIMEOUT_SECONDS"), "{help}");
    }

    #[test]
    fn the_controllers_default_is_shown_and_parsed_comma_separated() {
        let help = Wrapper::command().render_long_help().to_string();
        assert!(
            help.contains("[default: containerruntime,operatingsystemconfig,worker]"),
            "{help}"
        );
        let parsed = Wrapper::try_parse_from(["operator"]).unwrap();
        assert_eq!(
            parsed.args.controllers,
            [
                ControllerName::Containerruntime,
                ControllerName::Operatingsystemconfig,
                ControllerName::Worker
            ]
        );
        let parsed =
            Wrapper::try_parse_from(["operator", "--controllers=worker,containerruntime"]).unwrap();
        assert_eq!(
            parsed.args.controllers,
            [ControllerName::Worker, ControllerName::Containerruntime]
        );
    }
}
