//! The shoot and seed side of a node agent's identity, set up the way Gardener and
//! machine-controller-manager (MCM) set it up in a landscape, for a shoot from
//! [`super::shoot::Shoot::start_for_node_agents`]:
//!
//! - [`create_bootstrap_token`]: the bootstrap token MCM creates in the shoot for each new
//!   machine (and writes into its user data);
//! - [`allow_bootstrappers`]: gardener's node-agent RBAC ManagedResource, which lets
//!   bootstrap tokens (group `system:bootstrappers`) create and read CSRs;
//! - [`create_machine`]: the Machine in the seed that GRM's CSR approver and its node-agent
//!   authorizer look up;
//! - [`create_pool_node`]: the Node as kubelet registers it with gardenlet's pool labels.
//!
//! No RBAC for the group `gardener.cloud:node-agents`: gardener v1.149.3 grants node agents
//! none (its node-agent RBAC binds only `system:bootstrappers` and `system:nodes`,
//! `original/components/nodeagent/rbac.go`); GRM's node-agent authorizer webhook decides
//! every request of a node agent (`support::shoot::Shoot::start_for_node_agents`).

use std::io::Read;

use chrono::Utc;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::{Api, Client};
use serde_json::{Value, json};

/// The group of every node-agent client certificate (its `O`).
pub const NODE_AGENTS_GROUP: &str = "gardener.cloud:node-agents";
/// The user name prefix of a node agent (`CN=gardener.cloud:node-agent:machine:<machine>`).
pub const NODE_AGENT_USER_PREFIX: &str = "gardener.cloud:node-agent:machine:";
/// The group of bootstrap-token users.
pub const BOOTSTRAPPERS_GROUP: &str = "system:bootstrappers";

/// `len` random characters of `[a-z0-9]`, as bootstrap token ids and secrets have them.
pub fn random_token_chars(len: usize) -> String {
    const CHARSET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut urandom = std::fs::File::open("/dev/urandom").expect("/dev/urandom opens");
    let mut out = String::with_capacity(len);
    let mut byte = [0u8; 1];
    while out.len() < len {
        urandom.read_exact(&mut byte).expect("/dev/urandom reads");
        // Rejection sampling: 252 = 7 * 36, so every character is equally likely.
        if byte[0] < 252 {
            out.push(CHARSET[usize::from(byte[0]) % CHARSET.len()] as char);
        }
    }
    out
}

/// Creates a bootstrap token in the shoot as MCM does for a new machine: Secret
/// `kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token`, usable for
/// authentication and signing, expiring after `ttl`. Returns the token `<id>.<secret>`,
/// which authenticates as `system:bootstrap:<id>` in group `system:bootstrappers`.
pub async fn create_bootstrap_token(shoot: &Client, ttl: std::time::Duration) -> String {
    let id = random_token_chars(6);
    let secret = random_token_chars(16);
    let expiration = (Utc::now() + chrono::Duration::from_std(ttl).expect("ttl fits"))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let object: Secret = from_json(json!({
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {
            "description": "A bootstrap token for a test machine, as MachineControllerManager generates it.",
            "token-id": id,
            "token-secret": secret,
            "expiration": expiration,
            "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true",
        },
    }));
    Api::<Secret>::namespaced(shoot.clone(), "kube-system")
        .create(&PostParams::default(), &object)
        .await
        .expect("bootstrap token secret created");
    format!("{id}.{secret}")
}

/// Lets bootstrap tokens request client certificates: ClusterRoleBinding
/// `system:node-bootstrapper` of the default ClusterRole `system:node-bootstrapper`
/// (certificatesigningrequests create, get, list, watch) for group `system:bootstrappers`, the
/// binding gardener's node-agent RBAC ManagedResource creates in every shoot (that one also
/// binds the kubelet client CSR roles, which node agents do not need). Idempotent.
pub async fn allow_bootstrappers(shoot: &Client) {
    let binding: ClusterRoleBinding = from_json(json!({
        "metadata": {"name": "system:node-bootstrapper"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node-bootstrapper"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": BOOTSTRAPPERS_GROUP}],
    }));
    create_or_keep(Api::<ClusterRoleBinding>::all(shoot.clone()), &binding).await;
}

/// The `machine.sapcloud.io/v1alpha1` Machines resource.
pub fn machine_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("machine.sapcloud.io", "v1alpha1", "Machine"),
        "machines",
    )
}

/// The Node label naming a pool's node-agent Secret (gardener's
/// `worker.gardener.cloud/gardener-node-agent-secret-name`).
pub const NODE_AGENT_SECRET_LABEL: &str = "worker.gardener.cloud/gardener-node-agent-secret-name";

/// Creates a minimal Machine `namespace/name` in the seed, joined as Node `node` (label
/// `node=<node>`, as MCM sets it once the node registered; GRM's CSR approver and its
/// authorizer read the node name from it), of a pool whose node-agent Secret is `osc_secret`
/// (the node template's label, as our Worker writes it; the authorizer admits exactly that
/// Secret).
pub async fn create_machine(
    seed: &Client,
    namespace: &str,
    name: &str,
    node: &str,
    osc_secret: &str,
) {
    let resource = machine_resource();
    let mut machine = DynamicObject::new(name, &resource).within(namespace);
    machine.metadata.labels = Some([("node".to_string(), node.to_string())].into());
    machine.data = json!({"spec": {
        "class": {"kind": "MachineClass", "name": "x"},
        "nodeTemplate": {"metadata": {"labels": {NODE_AGENT_SECRET_LABEL: osc_secret}}},
    }});
    Api::<DynamicObject>::namespaced_with(seed.clone(), namespace, &resource)
        .create(&PostParams::default(), &machine)
        .await
        .expect("machine created");
}

/// Creates the Node `name` as kubelet registers it in a Gardener shoot: with gardenlet's pool
/// labels from its `--node-labels`, of which the authorizer reads the node-agent Secret's
/// name (the Lease it admits besides `gardener-node-agent-<node>`).
pub async fn create_pool_node(shoot: &Client, name: &str, osc_secret: &str) -> Node {
    let node: Node = from_json(json!({"metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name,
        NODE_AGENT_SECRET_LABEL: osc_secret,
    }}}));
    Api::<Node>::all(shoot.clone())
        .create(&PostParams::default(), &node)
        .await
        .expect("node created")
}

/// Creates `object`; one that exists already (409) is kept as it is.
pub async fn create_or_keep<K>(api: Api<K>, object: &K)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => panic!("creating {:?}: {error}", object.meta().name),
    }
}

/// A typed object from JSON.
fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("object from JSON")
}
