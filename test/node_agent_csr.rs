//! Node-agent client certificates through the real CSR flow of a Gardener shoot, with real
//! components only: a shoot control plane with bootstrap-token authentication and
//! kube-controller-manager's `kubernetes.io/kube-apiserver-client` signer, and the real
//! gardener-resource-manager (GRM) whose CSR approver checks the Machines in the test's seed
//! namespace (`support::shoot::Shoot::start_for_node_agents`). The requests are the agent's
//! own (`agent::client_certificate::steps::request`), without a machine around it
//! (`test/agent_certificate.rs` runs the whole agent):
//!
//! - sent with the machine's bootstrap token, the request is approved by GRM when the Machine
//!   exists in the seed and its Node does not yet, and issued by kube-controller-manager with
//!   the shoot's short signing duration; the certificate and key authenticate as
//!   `gardener.cloud:node-agent:machine:<m>` in group `gardener.cloud:node-agents`, and a
//!   renewal sent with that certificate is approved for its own user too;
//! - without the Machine GRM denies it, and the agent's error carries GRM's reason;
//! - a hostile signer (the test itself, on a control plane without kube-controller-manager)
//!   that approves the agent's renewal request and writes a certificate for another key, an
//!   expired one or a chain over 1 MB: the agent refuses each, keeps its old credentials and
//!   says so in a Warning event on its Node.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::time::Duration;

use base64::Engine;

use gardener_extension_node::agent::client_certificate::steps::{self, CertificateError};
use gardener_extension_node::kubeconfig::{
    config_from_yaml, render_client_cert_kubeconfig, render_token_kubeconfig,
};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;
use support::node_agent_identity::{
    self, BOOTSTRAPPERS_GROUP, NODE_AGENT_USER_PREFIX, NODE_AGENTS_GROUP,
};
use support::shoot::Shoot;

/// kube-controller-manager's `--cluster-signing-duration` in these shoots.
const SIGNING: Duration = Duration::from_secs(90);
/// kube-controller-manager backdates notBefore by 5 minutes (and, for certificates shorter
/// than 8 h, not notAfter: `pkg/controller/certificates/authority/policies.go`).
const KCM_BACKDATE: Duration = Duration::from_secs(300);
const DECISION_TIMEOUT: Duration = Duration::from_secs(60);

/// A shoot for node agents, its admin client, and a client of a new bootstrap token (once
/// kube-apiserver knows the token) with its user name.
async fn shoot_and_bootstrap_client(env: &support::TestEnv) -> (Shoot, Client, Client, String) {
    let shoot = Shoot::start_for_node_agents(env, SIGNING).await;
    let admin = shoot.client().await;
    node_agent_identity::allow_bootstrappers(&admin).await;
    let token = node_agent_identity::create_bootstrap_token(&admin, Duration::from_secs(600)).await;
    let bootstrap = client_for(&render_token_kubeconfig(
        &shoot.server_url(),
        &shoot.ca_pem(),
        &token,
    ))
    .await;
    let user = format!("system:bootstrap:{}", token.split('.').next().unwrap());
    let (username, groups) = whoami(&bootstrap).await;
    assert_eq!(username, user);
    assert!(
        groups.iter().any(|g| g == BOOTSTRAPPERS_GROUP),
        "{groups:?}"
    );
    (shoot, admin, bootstrap, user)
}

#[tokio::test]
async fn a_bootstrap_token_request_for_an_existing_machine_is_approved_and_issued() {
    let env = support::env().await;
    let machine = "machine-a";
    node_agent_identity::create_machine(
        &env.client,
        &env.namespace,
        machine,
        "node-machine-a",
        "gardener-node-agent-worker-a",
    )
    .await;
    // No RBAC for the node agent: the renewal below goes through GRM's node-agent
    // authorizer (CSR create, and get of its own user's request).
    let (shoot, admin, bootstrap, bootstrap_user) = shoot_and_bootstrap_client(&env).await;

    let issued_at = chrono::Utc::now().timestamp();
    let issued = steps::request(&bootstrap, machine, DECISION_TIMEOUT)
        .await
        .unwrap_or_else(|error| {
            panic!(
                "{error:?}; GRM log:\n{}",
                tail(&shoot.resource_manager_log(), 30)
            )
        });
    let csr = only_request_of(&admin, &bootstrap_user).await;
    assert_eq!(
        approval_reason(&csr).as_deref(),
        Some("RequestApproved"),
        "{:?}",
        csr.status
    );

    // The signer's duration, not the 30 days asked for.
    let facts = &issued.facts;
    let lifetime = (facts.not_after - facts.not_before) as u64;
    assert!(lifetime <= (SIGNING + KCM_BACKDATE).as_secs(), "{facts:?}");
    let remaining = facts.not_after - issued_at;
    assert!(
        (0..=SIGNING.as_secs() as i64 + 5).contains(&remaining),
        "{facts:?}, issued at {issued_at}"
    );
    println!("issued certificate {facts:?}: {lifetime} s in all, {remaining} s left");

    // The certificate authenticates as the node agent of the machine.
    let agent = client_for(&render_client_cert_kubeconfig(
        &shoot.server_url(),
        &shoot.ca_pem(),
        &issued.cert_pem,
        &issued.key_pem,
    ))
    .await;
    let user = format!("{NODE_AGENT_USER_PREFIX}{machine}");
    let (username, groups) = whoami(&agent).await;
    assert_eq!(username, user);
    assert!(
        groups.iter().any(|g| g == NODE_AGENTS_GROUP),
        "groups {groups:?}"
    );

    // GRM's node-agent authorizer decides for it: a Secret that is not its pool's is refused
    // with the webhook's reason (RBAC has no opinion on node agents).
    let refused =
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(agent.clone(), "kube-system")
            .get("gardener-node-agent-worker-b")
            .await;
    match refused {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{status:?}");
            assert!(
                status
                    .message
                    .contains("gardener-node-agent can only access secrets"),
                "{status:?}"
            );
        }
        other => panic!("a foreign Secret was not refused: {other:?}"),
    }

    // Renewal: the node agent asks with its own certificate, and GRM approves its own user.
    let renewed = steps::request(&agent, machine, DECISION_TIMEOUT)
        .await
        .unwrap();
    assert_ne!(renewed.facts.serial, issued.facts.serial);
    let csr = only_request_of(&admin, &user).await;
    assert_eq!(
        approval_reason(&csr).as_deref(),
        Some("RequestApproved"),
        "{:?}",
        csr.status
    );
}

#[tokio::test]
async fn a_bootstrap_token_request_without_a_machine_is_denied_with_grm_s_reason() {
    let env = support::env().await;
    let (_shoot, admin, bootstrap, user) = shoot_and_bootstrap_client(&env).await;
    let error = match steps::request(&bootstrap, "machine-unknown", DECISION_TIMEOUT).await {
        Err(error) => error,
        Ok(_) => panic!("a request without a Machine was issued"),
    };
    let CertificateError::Denied { why, .. } = &error else {
        panic!("not a denial: {error:?}");
    };
    assert!(
        why.starts_with("RequestDenied: ") && why.contains("does not exist"),
        "{why}"
    );
    // Nothing is issued for a denied request, also not a little later.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let csr = only_request_of(&admin, &user).await;
    assert!(
        csr.status
            .as_ref()
            .and_then(|s| s.certificate.as_ref())
            .is_none(),
        "a denied request got a certificate"
    );
}

/// What the hostile signer writes into `status.certificate`.
#[derive(Debug, Clone, Copy)]
enum Hostile {
    /// A certificate valid now, for a key of its own.
    OtherKey,
    /// A certificate for the request's key that expired an hour ago.
    Expired,
    /// A certificate for the request's key, valid now, followed by 1.2 MB of chain.
    HugeChain,
}

/// Issue #41 item 5: a renewal whose request is approved and "issued" by a hostile signer.
/// Each certificate is refused: the kubeconfig keeps its bytes, the agent's clients keep
/// working with the old certificate, and a Warning event on the Node says why.
#[tokio::test]
async fn a_certificate_for_another_key_an_expired_one_or_a_huge_chain_leaves_the_old_credentials() {
    use gardener_extension_node::agent::access::credentials::{self, Source};
    use gardener_extension_node::agent::access::switching_client::Credentials;
    use gardener_extension_node::agent::client_certificate::lifecycle::{
        REASON_RENEWAL_FAILED, Renewal, Renewer, renew_reported,
    };
    use gardener_extension_node::agent::ports::paths::Paths;
    use gardener_extension_node::api::nodeagent::NodeAgentConfiguration;

    // The shared control plane has no kube-controller-manager: the test is the only signer.
    let env = support::env().await;
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::new(dir.path().canonicalize().unwrap());
    std::fs::create_dir_all(paths.credentials()).unwrap();
    std::fs::write(paths.machine_name(), "machine-hostile\n").unwrap();
    // The old credentials: the admin's client certificate, which works.
    std::fs::write(paths.kubeconfig(), &env.kubeconfig).unwrap();
    let before = std::fs::read(paths.kubeconfig()).unwrap();
    let mut config = NodeAgentConfiguration::default();
    config.api_server.server = env.server_url.clone();
    let source = Source::Kubeconfig(paths.kubeconfig());
    let credentials = Credentials::new(
        credentials::client_config(&source, &config, &paths)
            .await
            .unwrap(),
    );
    let client = credentials.client("agent").unwrap();
    let node = format!("node-hostile-{}", env.namespace);
    support::agent::create_node(&env.client, &node).await;
    let meta = Api::<k8s_openapi::api::core::v1::Node>::all(env.client.clone())
        .get_metadata(&node)
        .await
        .unwrap();
    let mut registry = gardener_extension_node::metrics::new_registry();
    let renewal = Renewal {
        renewer: std::sync::Arc::new(Renewer::new(
            credentials.clone(),
            client.clone(),
            config,
            paths.clone(),
        )),
        events: std::sync::Arc::new(
            gardener_extension_node::agent::ports::cluster::NodeEvents::new(&client, &node),
        ),
        node: tokio::sync::watch::channel(Some(meta)).1,
        metrics: gardener_extension_node::agent::metrics::Metrics::register(&mut registry),
    };
    let current = steps::current_certificate(&paths.kubeconfig()).unwrap();

    for (hostile, why) in [
        (
            Hostile::OtherKey,
            "is for another key than the one the request was made with",
        ),
        (Hostile::Expired, "s ago by the API server's clock"),
        (
            Hostile::HugeChain,
            "bytes, more than the 65536 a client certificate with its chain needs",
        ),
    ] {
        let signer = tokio::spawn(sign_next_request(env.client.clone(), hostile));
        let renewed = tokio::time::timeout(DECISION_TIMEOUT, renew_reported(&renewal, &current));
        renewed
            .await
            .unwrap_or_else(|_| panic!("{hostile:?}: no answer"));
        let name = signer.await.unwrap();
        assert_eq!(
            std::fs::read(paths.kubeconfig()).unwrap(),
            before,
            "{hostile:?}: the kubeconfig was replaced"
        );
        client
            .apiserver_version()
            .await
            .unwrap_or_else(|error| panic!("{hostile:?}: the old credentials fail: {error}"));
        let notes: Vec<String> =
            support::agent::node_events(&env.client, &node, REASON_RENEWAL_FAILED)
                .await
                .into_iter()
                .filter_map(|event| event.note)
                .collect();
        let expected = format!(
            "the certificate issued for CertificateSigningRequest {name} is refused; the \
             credentials in use stay"
        );
        assert!(
            notes
                .iter()
                .any(|note| note.contains(&expected) && note.contains(why)),
            "{hostile:?}: events {notes:#?}"
        );
        println!("{hostile:?}: refused, event {expected}: ...{why}");
    }
}

/// Plays a hostile signer for the next CertificateSigningRequest without a certificate:
/// approves it and writes `hostile`'s certificate into its status. Returns its name.
async fn sign_next_request(admin: Client, hostile: Hostile) -> String {
    use kube::api::{Patch, PatchParams};
    let api = Api::<CertificateSigningRequest>::all(admin);
    let csr = support::wait_for("a request to sign", DECISION_TIMEOUT, || {
        let api = api.clone();
        async move {
            api.list(&Default::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .into_iter()
                .find(|csr| {
                    csr.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_none()
                })
                .ok_or_else(|| "none yet".to_string())
        }
    })
    .await;
    let name = csr.metadata.name.clone().unwrap();
    let approved = json!({"status": {"conditions": [{
        "type": "Approved", "status": "True", "reason": "HostileSigner", "message": "test",
    }]}});
    api.patch_approval(&name, &PatchParams::default(), &Patch::Merge(&approved))
        .await
        .unwrap();
    let pem = hostile_certificate(&csr.spec.request.0, hostile);
    let issued =
        json!({"status": {"certificate": base64::engine::general_purpose::STANDARD.encode(pem)}});
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&issued))
        .await
        .unwrap();
    name
}

/// The certificate the hostile signer issues for the PEM certificate request `request`.
fn hostile_certificate(request: &[u8], hostile: Hostile) -> String {
    let requested = RequestKey(request_public_key(request));
    let now = chrono::Utc::now().timestamp();
    let at = |unix: i64| rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs(unix as u64);
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    let (not_before, not_after) = match hostile {
        Hostile::Expired => (now - 7200, now - 3600),
        Hostile::OtherKey | Hostile::HugeChain => (now - 60, now + 3600),
    };
    params.not_before = at(not_before);
    params.not_after = at(not_after);
    let issuer = rcgen::Issuer::new(
        rcgen::CertificateParams::new(Vec::<String>::new()).unwrap(),
        rcgen::KeyPair::generate().unwrap(),
    );
    let other = rcgen::KeyPair::generate().unwrap();
    let leaf = match hostile {
        Hostile::OtherKey => params.signed_by(&other, &issuer),
        Hostile::Expired | Hostile::HugeChain => params.signed_by(&requested, &issuer),
    }
    .unwrap()
    .pem();
    match hostile {
        Hostile::HugeChain => {
            let filler = rcgen::generate_simple_self_signed(vec!["filler".into()])
                .unwrap()
                .cert
                .pem();
            let chain = filler.repeat(1_200_000 / filler.len() + 1);
            format!("{leaf}{chain}")
        }
        Hostile::OtherKey | Hostile::Expired => leaf,
    }
}

/// The public key (EC point) of a certificate request the agent made (ECDSA P-256).
struct RequestKey(Vec<u8>);

impl rcgen::PublicKeyData for RequestKey {
    fn der_bytes(&self) -> &[u8] {
        &self.0
    }

    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        &rcgen::PKCS_ECDSA_P256_SHA256
    }
}

/// `subjectPublicKeyInfo.subjectPublicKey` of the PEM PKCS #10 request `pem`:
/// `CertificationRequest ::= SEQUENCE { SEQUENCE { version, subject, subjectPKInfo, [0] }, ... }`.
fn request_public_key(pem: &[u8]) -> Vec<u8> {
    let text = std::str::from_utf8(pem).unwrap();
    let body: String = text
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap();
    yasna::parse_der(&der, |request| {
        request.read_sequence(|request| {
            let key = request.next().read_sequence(|info| {
                info.next().read_der()?;
                info.next().read_der()?;
                let key = info.next().read_sequence(|spki| {
                    spki.next().read_der()?;
                    Ok(spki.next().read_bitvec_bytes()?.0)
                })?;
                info.next().read_der()?;
                Ok(key)
            })?;
            request.next().read_der()?;
            request.next().read_der()?;
            Ok(key)
        })
    })
    .unwrap()
}

async fn client_for(kubeconfig: &str) -> Client {
    Client::try_from(config_from_yaml(kubeconfig).await.unwrap()).unwrap()
}

/// The one CertificateSigningRequest `user` sent.
async fn only_request_of(admin: &Client, user: &str) -> CertificateSigningRequest {
    let mut requests: Vec<_> = Api::<CertificateSigningRequest>::all(admin.clone())
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|csr| csr.spec.username.as_deref() == Some(user))
        .collect();
    assert_eq!(requests.len(), 1, "requests of {user}");
    requests.remove(0)
}

/// The reason of the request's `Approved` condition.
fn approval_reason(csr: &CertificateSigningRequest) -> Option<String> {
    csr.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Approved" && c.status == "True")?
        .reason
        .clone()
}

/// The user and groups `client` authenticates as (SelfSubjectReview, which every
/// authenticated user may create). Retried for a few seconds: kube-apiserver sees a new
/// bootstrap token Secret through its informer.
async fn whoami(client: &Client) -> (String, Vec<String>) {
    let review: SelfSubjectReview = serde_json::from_value(json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "SelfSubjectReview",
    }))
    .unwrap();
    let api = Api::<SelfSubjectReview>::all(client.clone());
    let review = support::wait_for("a SelfSubjectReview", Duration::from_secs(10), || {
        let api = api.clone();
        let review = review.clone();
        async move {
            api.create(&PostParams::default(), &review)
                .await
                .map_err(|e| e.to_string())
        }
    })
    .await;
    let user = review.status.and_then(|s| s.user_info).unwrap_or_default();
    (
        user.username.unwrap_or_default(),
        user.groups.unwrap_or_default(),
    )
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
