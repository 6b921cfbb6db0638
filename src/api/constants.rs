//! Well-known annotation keys, label keys and values, finalizers and Secret data keys.
//!
//! These strings are part of the contract between gardenlet, gardener-resource-manager,
//! machine-controller-manager and extensions; they must match upstream byte for byte. Every
//! other module refers to them from here instead of repeating the literals.

/// Annotation that asks an extension to act (`reconcile`, `migrate`, `restore`, `wait-for-state`).
pub const ANNOTATION_OPERATION: &str = "gardener.cloud/operation";
/// Value of [`ANNOTATION_OPERATION`]: reconcile now. The controller removes it before working.
pub const OPERATION_RECONCILE: &str = "reconcile";
/// Value of [`ANNOTATION_OPERATION`]: migrate away (source seed). Removed after success.
pub const OPERATION_MIGRATE: &str = "migrate";
/// Value of [`ANNOTATION_OPERATION`]: restore from `status.state` (destination seed). Removed after success.
pub const OPERATION_RESTORE: &str = "restore";
/// Value of [`ANNOTATION_OPERATION`]: do nothing until the value changes. Never removed by extensions.
pub const OPERATION_WAIT_FOR_STATE: &str = "wait-for-state";

/// Annotation carrying the RFC3339 time at which gardenlet last requested an operation.
pub const ANNOTATION_TIMESTAMP: &str = "gardener.cloud/timestamp";
/// Annotation that must be `true` before gardener-resource-manager admits deleting an extension object.
pub const ANNOTATION_CONFIRMATION_DELETION: &str = "confirmation.gardener.cloud/deletion";
/// Annotation on a Shoot (seen in `Cluster.spec.shoot`) that requests force deletion; parsed as a Go bool.
pub const ANNOTATION_CONFIRMATION_FORCE_DELETION: &str =
    "confirmation.gardener.cloud/force-deletion";
/// Annotation on a Cluster naming the Secret that holds the generic token kubeconfig.
pub const ANNOTATION_GENERIC_TOKEN_KUBECONFIG_SECRET_NAME: &str =
    "generic-token-kubeconfig.secret.gardener.cloud/name";
/// Name of the generic token kubeconfig Secret when the Cluster annotation is absent.
pub const GENERIC_TOKEN_KUBECONFIG_SECRET_NAME: &str = "generic-token-kubeconfig";

/// Label with the role of a namespace or object, e.g. [`ROLE_SHOOT`] on shoot control-plane namespaces.
pub const LABEL_ROLE: &str = "gardener.cloud/role";
/// Value of [`LABEL_ROLE`] on shoot control-plane namespaces in the seed.
pub const ROLE_SHOOT: &str = "shoot";

/// Finalizer of the ContainerRuntime controller.
pub const FINALIZER_CONTAINER_RUNTIME: &str = "extensions.gardener.cloud/containerruntime";
/// Finalizer of the OperatingSystemConfig controller (plural, as upstream).
pub const FINALIZER_OPERATING_SYSTEM_CONFIG: &str =
    "extensions.gardener.cloud/operatingsystemconfigs";
/// Finalizer of the Worker controller.
pub const FINALIZER_WORKER: &str = "extensions.gardener.cloud/worker";

/// Node/pool label with the worker pool name.
pub const LABEL_WORKER_POOL: &str = "worker.gardener.cloud/pool";
/// Legacy node/pool label with the worker pool name (still set by gardenlet).
pub const LABEL_WORKER_POOL_LEGACY: &str = "worker.garden.sapcloud.io/group";
/// Node label with the CRI name of the pool (`containerd`).
pub const LABEL_CRI_NAME: &str = "worker.gardener.cloud/cri-name";
/// Prefix of the node label `containerruntime.worker.gardener.cloud/<type>=true`.
pub const LABEL_PREFIX_CONTAINER_RUNTIME: &str = "containerruntime.worker.gardener.cloud/";
/// Node label with the gardener-node-agent secret name (the OSC key) of the pool.
pub const LABEL_NODE_AGENT_SECRET_NAME: &str =
    "worker.gardener.cloud/gardener-node-agent-secret-name";
/// Node annotation the node agent sets to the checksum of the configuration it applied (what
/// gardenlet counts updated nodes by).
pub const ANNOTATION_NODE_CHECKSUM: &str = "checksum/cloud-config-data";
/// Node condition our agent writes for its disruptive rollout (`docs/agent.md`); `False` on
/// a node where the rollout stopped.
pub const NODE_CONDITION_DISRUPTIVE_ROLLOUT: &str = "DisruptiveRolloutHealthy";
/// Node condition the node agent keeps about drift of the node from its applied
/// configuration: `True` while drift stays on the node (reported only, or its repair waits
/// for a rollout slot), `False` otherwise (`docs/agent.md#drift-repair`).
pub const NODE_CONDITION_DRIFT: &str = "NodeAgentDrift";
/// machine-controller-manager's Machine/Node condition type of an in-place update.
pub const CONDITION_IN_PLACE_UPDATE: &str = "InPlaceUpdate";
/// Reason of [`CONDITION_IN_PLACE_UPDATE`] while a machine only may be updated.
pub const REASON_CANDIDATE_FOR_UPDATE: &str = "CandidateForUpdate";
/// Reason of [`CONDITION_IN_PLACE_UPDATE`] once the node is drained and may be updated.
pub const REASON_READY_FOR_UPDATE: &str = "ReadyForUpdate";

/// The shoot namespace of the node-agent Secrets, their Leases and the agents' ServiceAccounts.
pub const NAMESPACE_KUBE_SYSTEM: &str = "kube-system";

/// Annotation on a node-agent (OSC) Secret that turns the node agent's disruptive rollout on
/// and gives its budget: how many nodes of the pool may apply a disruptive change at once
/// (`docs/agent.md#disruptive-rollout`). Written by the OSC controller where it ships the
/// Secret, from the pool's `maxUnavailable`.
pub const ANNOTATION_ROLLOUT_BUDGET: &str = "node.extensions.gardener.cloud/rollout-budget";
/// Annotation with more units whose restart is disruptive (comma-separated), on the
/// node-agent Secret or carried to the pool's Lease ([`ROLLOUT_STEERING_ANNOTATIONS`]).
pub const ANNOTATION_DISRUPTIVE_UNITS: &str = "node.extensions.gardener.cloud/disruptive-units";
/// Annotation: seconds a node has after a disruptive apply to be healthy.
pub const ANNOTATION_ROLLOUT_HEALTH_TIMEOUT: &str =
    "node.extensions.gardener.cloud/rollout-health-timeout";
/// Annotation: seconds the pods that were ready before a disruptive apply are waited for.
pub const ANNOTATION_ROLLOUT_SETTLE_TIMEOUT: &str =
    "node.extensions.gardener.cloud/rollout-settle-timeout";
/// Annotation on a pool's `reconcile` OperatingSystemConfig in the seed that pauses the
/// pool's node-agent rollout (any non-empty value, e.g. why): the operator carries it to the
/// pool's Lease in the shoot, where the node agents read it (`docs/usage.md#pause-a-rollout`).
pub const ANNOTATION_ROLLOUT_PAUSED: &str = "node.extensions.gardener.cloud/rollout-paused";
/// The rollout settings the operator carries from the seed to the pool's Lease
/// `kube-system/<node-agent secret name>` in the shoot, where the node agents read them
/// whoever ships the Secret (`docs/agent.md#steered-from-the-seed`).
pub const ROLLOUT_STEERING_ANNOTATIONS: [&str; 5] = [
    ANNOTATION_ROLLOUT_BUDGET,
    ANNOTATION_DISRUPTIVE_UNITS,
    ANNOTATION_ROLLOUT_HEALTH_TIMEOUT,
    ANNOTATION_ROLLOUT_SETTLE_TIMEOUT,
    ANNOTATION_ROLLOUT_PAUSED,
];
/// The largest value of [`ANNOTATION_ROLLOUT_BUDGET`]: the OSC controller writes at most this,
/// and the node agent takes anything larger (or not a positive integer) as 1 and reports it.
pub const MAX_ROLLOUT_BUDGET: u32 = 32;

/// Directory on nodes where container runtime binaries are installed (`spec.binaryPath`).
pub const CONTAINER_RUNTIME_BINARY_PATH: &str = "/var/bin/containerruntimes";

/// Data key of the OSC Secret in the shoot that holds the serialised OperatingSystemConfig.
pub const DATA_KEY_OPERATING_SYSTEM_CONFIG: &str = "osc.yaml";
/// Data key of the OSC result Secret in the seed that holds the user data.
pub const DATA_KEY_CLOUD_CONFIG: &str = "cloud_config";

/// Value of the `origin` label on our ManagedResources (gardener-resource-manager stamps it
/// on the objects it applies for them as `resources.gardener.cloud/origin`).
pub const ORIGIN: &str = "gardener-extension-node";
/// Label that lets gardener-resource-manager's garbage collector delete unreferenced secrets.
pub const LABEL_GARBAGE_COLLECTABLE: &str =
    "resources.gardener.cloud/garbage-collectable-reference";
