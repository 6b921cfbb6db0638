//! The shoot and seed side of a node agent's identity, set up the way Gardener and
//! machine-controller-manager (MCM) set it up in a landscape, for a shoot from
//! [`super::shoot::Shoot::start_for_node_agents`]:
//!
//! - [`create_bootstrap_token`]: the bootstrap token MCM creates in the shoot for each new
//!   machine (and writes into its user data);
//! - [`allow_bootstrappers`]: gardener's node-agent RBAC ManagedResource, which lets
//!   bootstrap tokens (group `system:bootstrappers`) create and read CSRs;
//! - [`allow_node_agents`]: what GRM's node-agent authorizer webhook grants the group
//!   `gardener.cloud:node-agents`, as RBAC (the webhook does not run in the tests);
//! - [`create_machine`]: the Machine in the seed that GRM's CSR approver looks up.

use std::io::Read;

use chrono::Utc;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
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

/// Grants the group `gardener.cloud:node-agents` what a node agent on `node` may do, as in
/// docs/agent.md "What it may access": the OSC secret `osc_secret` in `kube-system`, its
/// Leases (`gardener-node-agent-<node>` and the serial lock named like the OSC secret), events
/// in `default`, its own Node and its status, Node lists, Pod lists and deletions; plus
/// CertificateSigningRequests create and get, for renewing its client certificate. The same
/// rules `agent::limited_token_in` gives a ServiceAccount, here for the group of node-agent
/// client certificates.
///
/// In a real shoot nothing of this is RBAC: GRM's node-agent authorizer webhook decides for
/// the group `gardener.cloud:node-agents`, per machine (own Node and Leases, the OSC secret
/// of its pool, only CSRs of its own user). This RBAC stands in for the webhook until it runs
/// in the tests, and being per group it is wider: every node agent of the shoot gets the
/// rights of every `node` it was called for. Idempotent.
pub async fn allow_node_agents(shoot: &Client, node: &str, osc_secret: &str) {
    let name = format!("gardener.cloud:node-agents:{node}");
    let lease = format!("gardener-node-agent-{node}");
    let subjects = json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": NODE_AGENTS_GROUP}]);
    let roles = [
        (
            "kube-system",
            json!([
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"], "resourceNames": [osc_secret]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update", "list", "watch"], "resourceNames": [lease, osc_secret]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
            ]),
        ),
        (
            "default",
            json!([{"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}]),
        ),
    ];
    for (namespace, rules) in roles {
        let role: Role =
            from_json(json!({"metadata": {"name": name, "namespace": namespace}, "rules": rules}));
        create_or_keep(Api::<Role>::namespaced(shoot.clone(), namespace), &role).await;
        let binding: RoleBinding = from_json(json!({
            "metadata": {"name": name, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": subjects,
        }));
        create_or_keep(
            Api::<RoleBinding>::namespaced(shoot.clone(), namespace),
            &binding,
        )
        .await;
    }
    let cluster_role: ClusterRole = from_json(json!({
        "metadata": {"name": name},
        "rules": [
            // After an in-place update: the pods on the node (listed by `spec.nodeName`); the
            // authorizer admits only that field selector, RBAC cannot say so.
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "delete"]},
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "watch", "patch"], "resourceNames": [node]},
            {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"], "resourceNames": [node]},
            // Certificate renewal; the authorizer admits get only for CSRs of the own user.
            {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"], "verbs": ["create", "get"]},
        ],
    }));
    create_or_keep(Api::<ClusterRole>::all(shoot.clone()), &cluster_role).await;
    let binding: ClusterRoleBinding = from_json(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": subjects,
    }));
    create_or_keep(Api::<ClusterRoleBinding>::all(shoot.clone()), &binding).await;
}

/// What real gardener-node-agent v1.149.3 asks for beyond what [`allow_node_agents`] gives
/// this agent (GRM's authorizer grants both to node agents): it watches its CSRs while it
/// waits for a certificate, and updates (not patches) its Node. Idempotent.
pub async fn allow_gardener_node_agent_extras(shoot: &Client) {
    let name = "e2e:gardener-node-agent-extras";
    let role: ClusterRole = from_json(json!({
        "metadata": {"name": name},
        "rules": [
            {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"], "verbs": ["list", "watch"]},
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["update"]},
        ],
    }));
    create_or_keep(Api::<ClusterRole>::all(shoot.clone()), &role).await;
    let binding: ClusterRoleBinding = from_json(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": NODE_AGENTS_GROUP}],
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

/// Creates a minimal Machine `namespace/name` in the seed, joined as Node `node` (label
/// `node=<node>`, as MCM sets it once the node registered; GRM's CSR approver reads the node
/// name from it).
pub async fn create_machine(seed: &Client, namespace: &str, name: &str, node: &str) {
    let resource = machine_resource();
    let mut machine = DynamicObject::new(name, &resource).within(namespace);
    machine.metadata.labels = Some([("node".to_string(), node.to_string())].into());
    machine.data = json!({"spec": {"class": {"kind": "MachineClass", "name": "x"}}});
    Api::<DynamicObject>::namespaced_with(seed.clone(), namespace, &resource)
        .create(&PostParams::default(), &machine)
        .await
        .expect("machine created");
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
