//! Test support for the node agent: a booted machine (real systemd, `support::nspawn`) with
//! the agent installed as `gardener-node-agent.service`, credentials limited by RBAC to what
//! the agent may touch, the Node object the agent looks for, and OSC secrets.
//!
//! The machine shares the host's network, so the agent reaches the test kube-apiserver on
//! host loopback and its metrics port is reachable from the test (each machine gets a free
//! port). Its host name is the machine name, which is also the Node's name.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use gardener_extension_node::api::OperatingSystemConfig;
use gardener_extension_node::kubeconfig::render_token_kubeconfig;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Node, Secret, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use sha2::Digest;

use super::TestEnv;
use super::nspawn::{Machine, MachineOptions};

/// Where the binary is bind-mounted in the machine.
pub const BIN_IN_MACHINE: &str = "/opt/gardener-extension-node/gardener-extension-node";
/// The agent's unit.
pub const AGENT_UNIT: &str = "gardener-node-agent.service";
/// The agent's config dir.
pub const CONFIG_DIR: &str = "/var/lib/gardener-node-agent";
/// Node annotation the agent reports the applied checksum in.
pub const NODE_CHECKSUM: &str = "checksum/cloud-config-data";
/// Kubernetes version the tests configure.
pub const KUBERNETES_VERSION: &str = "1.36.3";

/// sha256 hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

/// A free port on host loopback (the machine shares the host network).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Boots a machine with `binary` mounted at [`BIN_IN_MACHINE`].
pub fn boot(binary: &str) -> Machine {
    Machine::boot(MachineOptions {
        bind_ro: vec![(PathBuf::from(binary), PathBuf::from(BIN_IN_MACHINE))],
        ..MachineOptions::default()
    })
    .unwrap_or_else(|error| panic!("{error}"))
}

/// Creates the Node for `name` (label `kubernetes.io/hostname=<name>`), as kubelet would.
pub async fn create_node(client: &Client, name: &str) -> Node {
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some([("kubernetes.io/hostname".to_string(), name.to_string())].into()),
            ..ObjectMeta::default()
        },
        ..Node::default()
    };
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap()
}

/// A kubeconfig for a ServiceAccount that may do exactly what the node-agent authorizer
/// allows for one node (`docs/agent.md#authorizer-limits`): get/list/watch the named secrets in
/// kube-system (list/watch only with a name field selector), list nodes (host name lookup),
/// get/watch/patch its Node and patch its status, get/update its Lease and the serial lock
/// Lease named like its OSC secret (the first of `secrets`), create leases, create/patch events.
pub async fn limited_kubeconfig(env: &TestEnv, node: &str, secrets: &[&str]) -> String {
    let token = limited_token(env, node, secrets).await;
    render_token_kubeconfig(&env.server_url, &env.ca_pem, &token)
}

/// [`limited_kubeconfig`] in any cluster (ServiceAccount in `kube-system`).
pub async fn limited_kubeconfig_in(
    client: &Client,
    server_url: &str,
    ca_pem: &str,
    node: &str,
    secrets: &[&str],
) -> String {
    let token = limited_token_in(client, "kube-system", node, secrets).await;
    render_token_kubeconfig(server_url, ca_pem, &token)
}

/// The bearer token behind [`limited_kubeconfig`].
pub async fn limited_token(env: &TestEnv, node: &str, secrets: &[&str]) -> String {
    limited_token_in(&env.client, &env.namespace, node, secrets).await
}

/// [`limited_token`] in any cluster: the ServiceAccount lives in `ns`. The Leases it may use
/// are `gardener-node-agent-<node>` and `<secret>` (the first of `secrets`; the serial lock and
/// every rollout slot live in that one Lease, docs/agent.md#slots), as the node-agent
/// authorizer admits, and it may create any; nothing else — no `<secret>-<i>` Lease.
pub async fn limited_token_in(client: &Client, ns: &str, node: &str, secrets: &[&str]) -> String {
    let sa = format!("agent-{node}");
    let lease = format!("gardener-node-agent-{node}");
    // What the node-agent authorizer admits: the node's own Lease and the Lease named like
    // its OSC secret (the serial lock and every rollout slot); the OSC secret comes first in
    // `secrets`.
    let leases: Vec<&str> = std::iter::once(lease.as_str())
        .chain(secrets.first().copied())
        .collect();
    let pp = PostParams::default();
    let subject = json!([{"kind": "ServiceAccount", "name": sa, "namespace": ns}]);
    Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create(
            &pp,
            &from_json::<ServiceAccount>(json!({"metadata": {"name": sa, "namespace": ns}})),
        )
        .await
        .unwrap();
    let roles = [
        (
            "kube-system",
            json!([
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"], "resourceNames": secrets},
                // get/update to take and release; list/watch (with `metadata.name=`) to watch
                // the serial lock while waiting for it, as the node-agent authorizer admits.
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update", "list", "watch"], "resourceNames": leases},
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
            from_json(json!({"metadata": {"name": sa, "namespace": namespace}, "rules": rules}));
        Api::<Role>::namespaced(client.clone(), namespace)
            .create(&pp, &role)
            .await
            .unwrap();
        let binding: RoleBinding = from_json(json!({
            "metadata": {"name": sa, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sa},
            "subjects": subject,
        }));
        Api::<RoleBinding>::namespaced(client.clone(), namespace)
            .create(&pp, &binding)
            .await
            .unwrap();
    }
    let cluster_role: ClusterRole = from_json(json!({
        "metadata": {"name": sa},
        "rules": [
            // After an in-place update: the pods on the node (listed by `spec.nodeName`).
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "delete"]},
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "watch", "patch"], "resourceNames": [node]},
            {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"], "resourceNames": [node]},
            // The authorizer admits pod lists with `spec.nodeName=<node>` only; RBAC cannot
            // say that, so the role is wider than what the agent asks for.
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        ],
    }));
    Api::<ClusterRole>::all(client.clone())
        .create(&pp, &cluster_role)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = from_json(json!({
        "metadata": {"name": sa},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": sa},
        "subjects": subject,
    }));
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&pp, &binding)
        .await
        .unwrap();
    let request: TokenRequest = from_json(json!({"spec": {"expirationSeconds": 3600}}));
    Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create_token_request(&sa, &pp, &request)
        .await
        .unwrap()
        .status
        .and_then(|status| status.token)
        .unwrap()
}

/// A typed object from JSON.
fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

/// A client with `kubeconfig`.
pub async fn client_for(kubeconfig: &str) -> Client {
    let config = gardener_extension_node::kubeconfig::config_from_yaml(kubeconfig)
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

/// The node-agent secret in kube-system for `osc_yaml`, as gardenlet renders it.
pub fn osc_secret(name: &str, osc_yaml: &str) -> Secret {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": "kube-system",
            "annotations": {"checksum/data-script": sha256_hex(osc_yaml.as_bytes())},
            "labels": {"gardener.cloud/role": "operating-system-config", "worker.gardener.cloud/pool": "e2e"},
        },
        "data": {"osc.yaml": base64::engine::general_purpose::STANDARD.encode(osc_yaml)},
    }))
    .unwrap()
}

/// Creates or replaces the OSC secret; returns its checksum.
pub async fn put_osc(client: &Client, name: &str, osc_yaml: &str) -> String {
    put_osc_annotated(client, name, osc_yaml, &[]).await
}

/// [`put_osc`] with more annotations on the secret.
pub async fn put_osc_annotated(
    client: &Client,
    name: &str,
    osc_yaml: &str,
    annotations: &[(&str, &str)],
) -> String {
    let api = Api::<Secret>::namespaced(client.clone(), "kube-system");
    let mut secret = osc_secret(name, osc_yaml);
    secret
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .extend(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        );
    match api.get_opt(name).await.unwrap() {
        Some(existing) => {
            secret.metadata.resource_version = existing.metadata.resource_version;
            api.replace(name, &PostParams::default(), &secret)
                .await
                .unwrap();
        }
        None => {
            api.create(&PostParams::default(), &secret).await.unwrap();
        }
    }
    sha256_hex(osc_yaml.as_bytes())
}

/// Creates or replaces a plain secret in kube-system.
pub async fn put_secret(client: &Client, name: &str, data: &[(&str, &[u8])]) {
    let api = Api::<Secret>::namespaced(client.clone(), "kube-system");
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(key, value)| {
            (
                key.to_string(),
                json!(base64::engine::general_purpose::STANDARD.encode(value)),
            )
        })
        .collect();
    let mut secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": "kube-system"},
        "data": data,
    }))
    .unwrap();
    match api.get_opt(name).await.unwrap() {
        Some(existing) => {
            secret.metadata.resource_version = existing.metadata.resource_version;
            api.replace(name, &PostParams::default(), &secret)
                .await
                .unwrap();
        }
        None => {
            api.create(&PostParams::default(), &secret).await.unwrap();
        }
    }
}

/// An inline file entry (plain).
pub fn plain_file(path: &str, data: &str, permissions: Option<u32>) -> Value {
    let mut file = json!({"path": path, "content": {"inline": {"encoding": "", "data": data}}});
    if let Some(mode) = permissions {
        file["permissions"] = json!(mode);
    }
    file
}

/// An inline file entry (base64).
pub fn b64_file(path: &str, bytes: &[u8], permissions: Option<u32>) -> Value {
    let mut file = json!({"path": path, "content": {"inline": {"encoding": "b64", "data": base64::engine::general_purpose::STANDARD.encode(bytes)}}});
    if let Some(mode) = permissions {
        file["permissions"] = json!(mode);
    }
    file
}

/// A secretRef file entry.
pub fn secret_ref_file(path: &str, secret: &str, key: &str) -> Value {
    json!({"path": path, "content": {"secretRef": {"name": secret, "dataKey": key}}})
}

/// A long-running service unit.
pub fn service(name: &str, description: &str) -> Value {
    json!({
        "name": name,
        "enable": true,
        "command": "start",
        "content": format!("[Unit]\nDescription={description}\n[Service]\nExecStart=/bin/sleep infinity\n[Install]\nWantedBy=multi-user.target\n"),
    })
}

/// `osc.yaml` from spec units and files (plus optional criConfig), serialised like gardenlet.
pub fn osc_yaml(units: &[Value], files: &[Value], cri: Option<Value>) -> String {
    let mut spec = json!({"type": "", "purpose": "", "units": units, "files": files});
    if let Some(cri) = cri {
        spec["criConfig"] = cri;
    }
    let osc = json!({
        "apiVersion": "extensions.gardener.cloud/v1alpha1",
        "kind": "OperatingSystemConfig",
        "metadata": {"creationTimestamp": null},
        "spec": spec,
        "status": {},
    });
    serde_norway::to_string(&osc).unwrap()
}

/// What the agent in a machine is configured with.
pub struct AgentSetup {
    /// The OSC secret.
    pub secret_name: String,
    /// Its kubeconfig.
    pub kubeconfig: String,
    /// API server URL (config `apiServer.server`).
    pub server_url: String,
    /// API server CA.
    pub ca_pem: String,
    /// `--drift-check-interval`.
    pub drift_interval: String,
    /// Token sync configs (secret, path).
    pub token_sync: Vec<(String, String)>,
    /// Extra environment for the agent (e.g. RUST_LOG).
    pub binary_in_machine: String,
}

/// The node agent's configuration file.
pub fn config_yaml(setup: &AgentSetup) -> String {
    let sync: Vec<Value> = setup
        .token_sync
        .iter()
        .map(|(secret, path)| json!({"secretName": secret, "path": path}))
        .collect();
    serde_norway::to_string(&json!({
        "apiVersion": "nodeagent.config.gardener.cloud/v1alpha1",
        "kind": "NodeAgentConfiguration",
        "apiServer": {"server": setup.server_url, "caFile": format!("{CONFIG_DIR}/cluster-ca.crt")},
        "controllers": {
            "operatingSystemConfig": {"secretName": setup.secret_name, "kubernetesVersion": KUBERNETES_VERSION},
            "token": {"syncConfigs": sync, "syncPeriod": "15s"},
        },
    }))
    .unwrap()
}

/// The agent's unit as the test installs it.
pub fn agent_unit(setup: &AgentSetup, metrics_port: u16) -> String {
    format!(
        "[Unit]\nDescription=gardener-extension-node agent\nAfter=network-online.target\n[Service]\nEnvironment=RUST_LOG=info,gardener_extension_node=debug\nExecStart={bin} --log-format json agent --config-dir={CONFIG_DIR} --drift-check-interval={drift} --metrics-bind-address=127.0.0.1:{metrics_port}\nRestart=always\nRestartSec=1\n[Install]\nWantedBy=multi-user.target\n",
        bin = setup.binary_in_machine,
        drift = setup.drift_interval,
    )
}

/// Writes the agent's config, CA and kubeconfig into `machine`, installs and starts its
/// unit; returns the agent's metrics port (reachable from the host when the machine shares
/// its network).
pub fn install_agent(machine: &Machine, setup: &AgentSetup) -> u16 {
    let kubeconfig = (
        format!("{CONFIG_DIR}/credentials/kubeconfig"),
        setup.kubeconfig.clone(),
    );
    install_agent_with(machine, setup, &[kubeconfig])
}

/// [`install_agent`] with `credentials` (path, content; written 0600) instead of the
/// kubeconfig: e.g. a bootstrap token and the machine name of a new machine.
pub fn install_agent_with(
    machine: &Machine,
    setup: &AgentSetup,
    credentials: &[(String, String)],
) -> u16 {
    let metrics_port = free_port();
    let mut files = vec![
        (
            format!("{CONFIG_DIR}/config-v1.120.0.yaml"),
            config_yaml(setup),
            0o600,
        ),
        (
            format!("{CONFIG_DIR}/cluster-ca.crt"),
            setup.ca_pem.clone(),
            0o644,
        ),
        (
            format!("/etc/systemd/system/{AGENT_UNIT}"),
            agent_unit(setup, metrics_port),
            0o644,
        ),
    ];
    for (path, content) in credentials {
        files.push((path.clone(), content.clone(), 0o600));
    }
    for (path, content, mode) in files {
        machine.write_file(path, content.as_bytes(), mode).unwrap();
    }
    machine
        .run(&["systemctl", "daemon-reload"])
        .expect_success("daemon-reload");
    machine
        .run(&["systemctl", "start", AGENT_UNIT])
        .expect_success("start the agent");
    metrics_port
}

/// A machine running the agent.
pub struct AgentMachine {
    /// The machine.
    pub machine: Machine,
    /// Node (= host) name.
    pub node: String,
    /// The agent's metrics port on host loopback.
    pub metrics_port: u16,
}

impl AgentMachine {
    /// Writes config, CA and kubeconfig, installs and starts the agent unit.
    pub fn start(machine: Machine, setup: &AgentSetup) -> Self {
        let metrics_port = install_agent(&machine, setup);
        Self::started(machine, metrics_port)
    }

    /// A machine whose agent [`install_agent_with`] started on `metrics_port`.
    pub fn started(machine: Machine, metrics_port: u16) -> Self {
        let node = machine.name().to_string();
        AgentMachine {
            machine,
            node,
            metrics_port,
        }
    }

    /// The agent's log (all invocations).
    pub fn log(&self) -> String {
        self.machine.journal(AGENT_UNIT)
    }

    /// `/metrics` of the agent.
    pub fn metrics(&self) -> String {
        http_get(self.metrics_port, "/metrics")
    }

    /// A unit's InvocationID.
    pub fn invocation(&self, unit: &str) -> String {
        self.machine.unit_property(unit, "InvocationID")
    }

    /// `systemctl is-enabled`.
    pub fn enablement(&self, unit: &str) -> String {
        self.machine
            .run(&["systemctl", "is-enabled", unit])
            .stdout
            .trim()
            .to_string()
    }

    /// A file's mode as octal text (`stat -c %a`).
    pub fn mode(&self, path: &str) -> String {
        self.machine
            .run(&["stat", "-c", "%a", path])
            .expect_success("stat")
            .stdout
            .trim()
            .to_string()
    }
}

/// GET on host loopback; the body.
pub fn http_get(port: u16, path: &str) -> String {
    try_http_get(port, path).unwrap()
}

/// GET on host loopback; the body, or why there is none.
pub fn try_http_get(port: u16, path: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default())
}

/// Waits until the Node's checksum annotation is `checksum`; panics with the agent's log.
pub async fn wait_for_checksum(
    client: &Client,
    agent: &AgentMachine,
    checksum: &str,
    timeout: Duration,
) {
    let api = Api::<Node>::all(client.clone());
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last = None;
    while tokio::time::Instant::now() < deadline {
        let node = api.get(&agent.node).await.unwrap();
        last = node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(NODE_CHECKSUM))
            .cloned();
        if last.as_deref() == Some(checksum) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "node {} did not report {checksum} within {timeout:?} (last {last:?}); agent log:\n{}",
        agent.node,
        agent.log()
    );
}

/// The Node's checksum annotation.
pub async fn node_checksum(client: &Client, node: &str) -> Option<String> {
    let node = Api::<Node>::all(client.clone()).get(node).await.unwrap();
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(NODE_CHECKSUM))
        .cloned()
}

/// Events on the Node with `reason`.
pub async fn node_events(client: &Client, node: &str, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|event| {
            event.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node)
                && event.reason.as_deref() == Some(reason)
        })
        .collect()
}

/// The messages of the core/v1 events (the API GNA's health checks record with) in `default`
/// about Node `node` with `reason`.
pub async fn core_event_messages(client: &Client, node: &str, reason: &str) -> Vec<String> {
    Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.name.as_deref() == Some(node) && e.reason.as_deref() == Some(reason)
        })
        .filter_map(|e| e.message)
        .collect()
}

/// gardenlet's two OSCs of one pool, as the chain tests create them in the seed. The
/// provision OSC carries the agent's configuration, the CA, the placeholders MCM fills in
/// and the agent's unit; the reconcile OSC what the node must run, always including the
/// agent's own unit and configuration (so the agent restarts itself once, as with
/// gardenlet's OSCs).
pub struct PoolOscs {
    /// The seed namespace.
    pub namespace: String,
    /// The node-agent secret's name (`<key>-init` and `<key>-original` are the OSCs).
    pub key: String,
    /// The worker pool.
    pub pool: String,
    /// The API server the agent talks to, and its CA.
    pub server_url: String,
    /// PEM.
    pub ca_pem: String,
    /// The agent's unit file.
    pub agent_unit_content: String,
}

impl PoolOscs {
    fn config_path() -> String {
        format!("{CONFIG_DIR}/config-v1.120.0.yaml")
    }

    /// The agent's configuration as an OSC file.
    pub fn config_file(&self) -> Value {
        let config = format!(
            "apiVersion: nodeagent.config.gardener.cloud/v1alpha1\nkind: NodeAgentConfiguration\napiServer:\n  server: {}\n  caFile: {CONFIG_DIR}/cluster-ca.crt\ncontrollers:\n  operatingSystemConfig:\n    secretName: {}\n    kubernetesVersion: {KUBERNETES_VERSION}\n",
            self.server_url, self.key
        );
        b64_file(&Self::config_path(), config.as_bytes(), Some(0o600))
    }

    /// The agent's unit as an OSC unit.
    pub fn agent_unit(&self) -> Value {
        json!({
            "name": AGENT_UNIT, "enable": true, "command": "start",
            "content": self.agent_unit_content,
            "filePaths": [Self::config_path()],
        })
    }

    fn object(&self, name: String, purpose: &str, mut spec: Value) -> OperatingSystemConfig {
        spec["type"] = json!("debian");
        spec["purpose"] = json!(purpose);
        from_json(json!({
            "apiVersion": "extensions.gardener.cloud/v1alpha1",
            "kind": "OperatingSystemConfig",
            "metadata": {"name": name, "namespace": self.namespace,
                         "labels": {"worker.gardener.cloud/pool": self.pool},
                         "annotations": {"gardener.cloud/operation": "reconcile"}},
            "spec": spec,
        }))
    }

    /// The provision OSC `<key>-init`.
    pub fn provision(&self) -> OperatingSystemConfig {
        let placeholder = |path: String, mode: u32, data: &str| {
            json!({"path": path, "permissions": mode,
                   "content": {"transmitUnencoded": true, "inline": {"encoding": "", "data": data}}})
        };
        self.object(
            format!("{}-init", self.key),
            "provision",
            json!({
                "criConfig": {"name": "containerd"},
                "files": [
                    self.config_file(),
                    b64_file(&format!("{CONFIG_DIR}/cluster-ca.crt"), self.ca_pem.as_bytes(), Some(0o644)),
                    placeholder(format!("{CONFIG_DIR}/credentials/token"), 0o600, "<<BOOTSTRAP_TOKEN>>"),
                    placeholder(format!("{CONFIG_DIR}/machine-name"), 0o640, "<<MACHINE_NAME>>"),
                ],
                "units": [self.agent_unit()],
            }),
        )
    }

    /// The reconcile OSC `<key>-original`: the agent's file and unit, then these.
    pub fn reconcile(&self, cri: Value, files: &[Value], units: &[Value]) -> OperatingSystemConfig {
        let mut all_files = vec![self.config_file()];
        all_files.extend_from_slice(files);
        let mut all_units = vec![self.agent_unit()];
        all_units.extend_from_slice(units);
        self.object(
            format!("{}-original", self.key),
            "reconcile",
            json!({"criConfig": cri, "files": all_files, "units": all_units}),
        )
    }

    /// Creates both OSCs in the seed.
    pub async fn create(&self, seed: &Client, reconcile: &OperatingSystemConfig) {
        let oscs = Api::<OperatingSystemConfig>::namespaced(seed.clone(), &self.namespace);
        for osc in [&self.provision(), reconcile] {
            oscs.create(&PostParams::default(), osc).await.unwrap();
        }
    }

    /// The user data our operator rendered from the provision OSC (its result secret).
    pub async fn user_data(&self, seed: &Client, timeout: Duration) -> String {
        user_data(seed, &self.namespace, &self.key, timeout).await
    }
}

/// The user data our operator rendered from the provision OSC `<key>-init` in `namespace` of
/// the seed (its result Secret `osc-result-<key>-init`), once it is there.
pub async fn user_data(seed: &Client, namespace: &str, key: &str, timeout: Duration) -> String {
    let secrets = Api::<Secret>::namespaced(seed.clone(), namespace);
    let name = format!("osc-result-{key}-init");
    crate::support::wait_for("user data", timeout, || async {
        let secret = secrets
            .get_opt(&name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no result secret yet")?;
        let data = secret
            .data
            .and_then(|d| d.get("cloud_config").cloned())
            .ok_or("no cloud_config")?;
        String::from_utf8(data.0).map_err(|e| e.to_string())
    })
    .await
}

/// Host paths that must all exist before [`fake_kubelet_healthz`] answers `ok` (see
/// [`KubeletHealthyOnceThere`]).
static HEALTHY_ONCE_THERE: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// While alive, [`fake_kubelet_healthz`] answers `503` until `path` (a host path, e.g. a file a
/// kubelet stand-in writes once it has read its credentials) exists — as a real kubelet's
/// health endpoint comes up only after its client certificate bootstrap. Other tests of the
/// process only wait a moment longer.
pub struct KubeletHealthyOnceThere(PathBuf);

impl KubeletHealthyOnceThere {
    /// Registers `path`.
    pub fn new(path: PathBuf) -> Self {
        HEALTHY_ONCE_THERE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(path.clone());
        KubeletHealthyOnceThere(path)
    }
}

impl Drop for KubeletHealthyOnceThere {
    fn drop(&mut self) {
        HEALTHY_ONCE_THERE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|p| p != &self.0);
    }
}

/// Plays kubelet's health endpoint on 127.0.0.1:10248 (the machines share the host's network)
/// for the rest of the test process, so the tests that need it can run at the same time;
/// `false` when the port is taken by something else (a kubelet on this host).
pub fn fake_kubelet_healthz() -> bool {
    static SERVING: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SERVING.get_or_init(|| {
        let Ok(listener) = TcpListener::bind("127.0.0.1:10248") else {
            return false;
        };
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let mut request = [0u8; 512];
                let _ = stream.read(&mut request);
                let healthy = HEALTHY_ONCE_THERE
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .iter()
                    .all(|p| p.exists());
                let answer: &[u8] = if healthy {
                    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
                } else {
                    b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 9\r\n\r\nstarting\n"
                };
                let _ = stream.write_all(answer);
            }
        });
        true
    })
}
