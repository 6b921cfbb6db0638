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
//! - without the Machine GRM denies it, and the agent's error carries GRM's reason.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::time::Duration;

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
    node_agent_identity::create_machine(&env.client, &env.namespace, machine, "node-machine-a")
        .await;
    let (shoot, admin, bootstrap, bootstrap_user) = shoot_and_bootstrap_client(&env).await;
    node_agent_identity::allow_node_agents(
        &admin,
        "node-machine-a",
        "gardener-node-agent-worker-a",
    )
    .await;

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
