//! Integration: the rollout watch (the OSC condition `NodeAgentRollout`) keeps every shoot's
//! condition going while one shoot misbehaves (issue 41 item 2), against real kube-apiservers:
//! the seed of the test binary and a second one playing the shoot whose Nodes are counted.
//!
//! - One shoot's API server completes the TLS handshake and never answers (a loopback TLS
//!   listener of the test): the other shoot's condition still follows its Nodes, and the
//!   hanging shoot's condition turns `Unknown` (`ShootUnreachable`).
//! - One shoot's access Secret holds a token with a line break: the other shoot's condition
//!   still follows its Nodes, the bad one says `Unknown` (`ShootTokenUnusable`), nothing
//!   panics and the operator answers `/healthz`.
//!
//! No gardener-resource-manager runs here: the test writes the shoot token into our access
//! Secret as its token requestor would (a ServiceAccount token that may list Nodes), and the
//! generic token kubeconfig Secret as gardenlet would.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use gardener_extension_node::api::common::Condition;
use gardener_extension_node::api::{
    Cluster, ConditionStatus, LastOperationType, OperatingSystemConfig,
};
use gardener_extension_node::controllers::operatingsystemconfig::rollout::rules;
use gardener_extension_node::devenv::{self, ControlPlane, ControlPlaneOptions};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Node, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use support::gardener::wait_ready;
use support::operator::OperatorProcess;
use support::{TestEnv, fixtures, wait_for};

/// The operators of these tests look at every namespace: the tests take turns.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const WAIT: Duration = Duration::from_secs(90);
/// How soon the good shoot's condition must follow its Nodes: two rounds of the watch and
/// some slack, far less than the hanging shoot would hold a round without time limits.
const FOLLOWS_WITHIN: Duration = Duration::from_secs(30);
const POOL: &str = "worker-a";

/// A shoot control plane (etcd and kube-apiserver) with two Nodes of [`POOL`].
struct Shoot {
    plane: ControlPlane,
    admin: Client,
}

impl Shoot {
    async fn start(name: &str) -> Shoot {
        let dir = std::env::temp_dir().join(format!(
            "gardener-extension-node-rollout-watch-{}-{name}",
            std::process::id()
        ));
        let assets = devenv::resolve_assets(None, &support::repo_root()).unwrap();
        let plane = ControlPlane::start(ControlPlaneOptions {
            assets,
            state_dir: dir,
            remove_state_on_exit: true,
            reuse_state: false,
            controller_manager: false,
            scheduler: false,
            audit_log: false,
            csr_signing: None,
            node_agent_authorizer: None,
        })
        .await
        .unwrap();
        let admin = Client::try_from(plane.admin_config().await.unwrap()).unwrap();
        for node in ["node-a", "node-b"] {
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": node, "labels": {"worker.gardener.cloud/pool": POOL}},
            }))
            .unwrap();
            Api::<Node>::all(admin.clone())
                .create(&PostParams::default(), &node)
                .await
                .unwrap();
        }
        Shoot { plane, admin }
    }

    /// A token of a ServiceAccount that may list Nodes, as GRM's token requestor gets one.
    async fn node_reader_token(&self) -> String {
        let pp = PostParams::default();
        let name = "rollout-reader";
        let account: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::<ServiceAccount>::namespaced(self.admin.clone(), "kube-system")
            .create(&pp, &account)
            .await
            .unwrap();
        let role: ClusterRole = serde_json::from_value(json!({
            "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}],
        }))
        .unwrap();
        Api::<ClusterRole>::all(self.admin.clone())
            .create(&pp, &role)
            .await
            .unwrap();
        let binding: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "kube-system"}],
        }))
        .unwrap();
        Api::<ClusterRoleBinding>::all(self.admin.clone())
            .create(&pp, &binding)
            .await
            .unwrap();
        let request: TokenRequest =
            serde_json::from_value(json!({"spec": {"expirationSeconds": 3600}})).unwrap();
        Api::<ServiceAccount>::namespaced(self.admin.clone(), "kube-system")
            .create_token_request(name, &pp, &request)
            .await
            .unwrap()
            .status
            .unwrap()
            .token
            .unwrap()
    }

    /// Sets the checksum annotation of the shoot's Nodes.
    async fn report(&self, checksums: [(&str, &str); 2]) {
        for (node, checksum) in checksums {
            Api::<Node>::all(self.admin.clone())
                .patch(
                    node,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {
                        "checksum/cloud-config-data": checksum
                    }}})),
                )
                .await
                .unwrap();
        }
    }
}

/// A loopback TLS server that completes every handshake and then never answers (it reads
/// and drops what it is sent): a shoot API server that hangs.
struct HangingServer {
    url: String,
    ca_pem: String,
    handshakes: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl HangingServer {
    async fn start() -> HangingServer {
        use tokio::io::AsyncReadExt;
        use tokio_rustls::rustls;

        let pki = devenv::pki::generate().unwrap();
        let certs = vec![pem_der(&pki.serving_cert).into()];
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(pem_der(&pki.serving_key).into());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let handshakes = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&handshakes);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let counted = Arc::clone(&counted);
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    counted.fetch_add(1, Ordering::SeqCst);
                    let mut buffer = [0u8; 4096];
                    while matches!(tls.read(&mut buffer).await, Ok(n) if n > 0) {}
                    // The client gave up: keep nothing open.
                });
            }
        });
        HangingServer {
            url,
            ca_pem: pki.ca_cert,
            handshakes,
            task,
        }
    }
}

impl Drop for HangingServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The DER of the first PEM block of `pem`.
fn pem_der(pem: &str) -> Vec<u8> {
    use base64::Engine;
    let body: String = pem
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap()
}

/// One seed namespace with its Cluster, a generic token kubeconfig for `server` and `ca_pem`,
/// and a `reconcile` OSC whose rollout the watch looks at.
struct Namespace {
    env: TestEnv,
    osc: String,
}

impl Namespace {
    async fn create(server: &str, ca_pem: &str) -> Namespace {
        let env = support::env().await;
        let cluster: Cluster =
            serde_json::from_value(fixtures::cluster_json(&env.namespace)).unwrap();
        Api::<Cluster>::all(env.client.clone())
            .create(&PostParams::default(), &cluster)
            .await
            .unwrap();
        let generic = devenv::apply::generic_token_kubeconfig(&env.namespace, server, ca_pem);
        secrets(&env)
            .create(
                &PostParams::default(),
                &serde_json::from_value(generic).unwrap(),
            )
            .await
            .unwrap();
        let osc = format!("{}-original", fixtures::OSC_KEY);
        let mut object = fixtures::operating_system_config_json(&env.namespace, &osc, "reconcile");
        object["spec"]["files"]
            .as_array_mut()
            .unwrap()
            .retain(|f| f["content"].get("secretRef").is_none());
        object["metadata"]["annotations"] = json!({"gardener.cloud/operation": "reconcile"});
        oscs(&env)
            .create(
                &PostParams::default(),
                &serde_json::from_value(object).unwrap(),
            )
            .await
            .unwrap();
        Namespace { env, osc }
    }

    fn access_secret(&self) -> String {
        format!(
            "shoot-access-{}",
            rules::service_account_name(fixtures::OSC_KEY)
        )
    }

    /// Waits for the OSC to be ready and our access Secret to be there; writes `token` into
    /// the access Secret (as GRM's token requestor does); returns the shipped checksum.
    async fn give_token(&self, token: &[u8]) -> String {
        wait_ready(&oscs(&self.env), &self.osc, LastOperationType::Create).await;
        let secret = wait_for("our access Secret", WAIT, || async {
            secrets(&self.env)
                .get_opt(&self.access_secret())
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "not there yet".to_string())
        })
        .await;
        secrets(&self.env)
            .patch(
                &self.access_secret(),
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"token": base64_of(token)}})),
            )
            .await
            .unwrap();
        secret.metadata.annotations.unwrap()[rules::ANNOTATION_SHIPPED_CHECKSUM].clone()
    }

    /// Waits until our condition has `status` and a message containing `needle`.
    async fn wait_condition(
        &self,
        status: ConditionStatus,
        needle: &str,
        within: Duration,
    ) -> Condition {
        wait_for(
            &format!("{} {status:?} with {needle:?}", self.env.namespace),
            within,
            || async {
                let osc = oscs(&self.env)
                    .get(&self.osc)
                    .await
                    .map_err(|e| e.to_string())?;
                let condition = osc
                    .status
                    .and_then(|s| {
                        s.default
                            .conditions
                            .into_iter()
                            .find(|c| c.type_ == rules::CONDITION_TYPE)
                    })
                    .ok_or("no condition yet")?;
                if condition.status == status && condition.message.contains(needle) {
                    Ok(condition)
                } else {
                    Err(format!("{condition:?}"))
                }
            },
        )
        .await
    }

    /// Takes the namespace out of the watch (no Cluster: no running shoot) for the next test.
    async fn retire(&self) {
        let _ = Api::<Cluster>::all(self.env.client.clone())
            .delete(&self.env.namespace, &Default::default())
            .await;
    }
}

fn secrets(env: &TestEnv) -> Api<Secret> {
    Api::namespaced(env.client.clone(), &env.namespace)
}

fn oscs(env: &TestEnv) -> Api<OperatingSystemConfig> {
    Api::namespaced(env.client.clone(), &env.namespace)
}

fn base64_of(bytes: &[u8]) -> Value {
    use base64::Engine;
    Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// The good shoot's condition: one of two Nodes on `checksum` (Progressing), then, once the
/// second reports it, complete within [`FOLLOWS_WITHIN`]; returns how long that took.
async fn good_shoot_follows(shoot: &Shoot, good: &Namespace, checksum: &str) -> Duration {
    shoot
        .report([("node-a", checksum), ("node-b", "older")])
        .await;
    good.wait_condition(ConditionStatus::Progressing, "1/2 nodes", WAIT)
        .await;
    shoot
        .report([("node-a", checksum), ("node-b", checksum)])
        .await;
    let changed = Instant::now();
    good.wait_condition(ConditionStatus::True, "2/2 nodes", FOLLOWS_WITHIN)
        .await;
    changed.elapsed()
}

fn start_operator(env: &TestEnv) -> OperatorProcess {
    OperatorProcess::start(&env.kubeconfig, &["--controllers=operatingsystemconfig"])
}

async fn assert_healthy(operator: &OperatorProcess) {
    let health = operator.http_get("/healthz").await;
    assert_eq!(
        health.as_ref().map(|h| h.0),
        Some(200),
        "{health:?}\n{}",
        operator.log_text()
    );
    let log = operator.log_text();
    assert!(!log.contains("panicked"), "{log}");
}

/// A shoot whose API server completes TLS and never answers holds up only its own
/// condition: the other shoot's follows its Nodes within two rounds, and the hanging one
/// turns `Unknown`.
#[tokio::test]
async fn a_shoot_api_server_that_never_answers_does_not_stop_the_other_shoots_condition() {
    let _serial = SERIAL.lock().await;
    let shoot = Shoot::start("hang").await;
    let hanging = HangingServer::start().await;
    let good = Namespace::create(&shoot.plane.server_url(), shoot.plane.ca_pem()).await;
    let hung = Namespace::create(&hanging.url, &hanging.ca_pem).await;
    let operator = start_operator(&good.env);

    hung.give_token(b"a-token-the-hanging-server-never-reads")
        .await;
    wait_for("a step stuck on the hanging server", WAIT, || async {
        match hanging.handshakes.load(Ordering::SeqCst) {
            0 => Err("no TLS handshake yet".to_string()),
            _ => Ok(()),
        }
    })
    .await;
    let checksum = good
        .give_token(shoot.node_reader_token().await.as_bytes())
        .await;
    let took = good_shoot_follows(&shoot, &good, &checksum).await;
    eprintln!("the good shoot's condition followed its Nodes after {took:?}");

    let unreachable = hung
        .wait_condition(ConditionStatus::Unknown, "", WAIT)
        .await;
    assert_eq!(
        unreachable.reason,
        rules::REASON_SHOOT_UNREACHABLE,
        "{unreachable:?}"
    );
    assert!(
        unreachable.message.contains("did not answer in time"),
        "{}",
        unreachable.message
    );
    eprintln!("the hanging shoot's condition: {}", unreachable.message);
    assert_healthy(&operator).await;
    good.retire().await;
    hung.retire().await;
}

/// A token with a line break in one shoot's access Secret is that shoot's error (condition
/// `Unknown`, `ShootTokenUnusable`), not a panic that ends the watch: the other shoot's
/// condition goes on following its Nodes, and the operator is healthy.
#[tokio::test]
async fn a_token_with_a_line_break_does_not_stop_the_other_shoots_condition() {
    let _serial = SERIAL.lock().await;
    let shoot = Shoot::start("token").await;
    let bad = Namespace::create(&shoot.plane.server_url(), shoot.plane.ca_pem()).await;
    let good = Namespace::create(&shoot.plane.server_url(), shoot.plane.ca_pem()).await;
    let operator = start_operator(&good.env);

    bad.give_token(b"first-line\nsecond-line").await;
    let checksum = good
        .give_token(shoot.node_reader_token().await.as_bytes())
        .await;
    let took = good_shoot_follows(&shoot, &good, &checksum).await;
    eprintln!("the good shoot's condition followed its Nodes after {took:?}");
    let refused = bad
        .wait_condition(ConditionStatus::Unknown, "line break", WAIT)
        .await;
    assert_eq!(refused.reason, rules::REASON_TOKEN_UNUSABLE, "{refused:?}");
    eprintln!("the bad token's condition: {}", refused.message);
    assert!(
        refused.message.contains(&bad.access_secret()),
        "names the Secret: {}",
        refused.message
    );
    assert_healthy(&operator).await;
    good.retire().await;
    bad.retire().await;
}
