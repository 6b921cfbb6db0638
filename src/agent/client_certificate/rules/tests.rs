use k8s_openapi::api::certificates::v1::CertificateSigningRequestCondition;

use super::*;
use crate::agent::access::kubeconfigs::{kubeconfig, kubelet_bootstrap_kubeconfig};

#[test]
fn the_machine_name_is_the_first_line_and_an_object_name() {
    assert_eq!(
        machine_name("shoot--p--s-pool-abc12\n").unwrap(),
        "shoot--p--s-pool-abc12"
    );
    assert_eq!(machine_name("  m-1 \nsecond line").unwrap(), "m-1");
    assert_eq!(machine_name("\nm-1"), Err(MachineNameError::Empty));
    assert_eq!(machine_name(""), Err(MachineNameError::Empty));
    for hostile in ["../etc", "a b", "M-1", "-a", "a-", "a/b", "a\u{1b}[2J"] {
        let error = machine_name(hostile).unwrap_err();
        assert!(matches!(error, MachineNameError::Invalid(_)), "{hostile:?}");
        assert!(!error.to_string().chars().any(char::is_control), "{error}");
    }
    assert!(machine_name(&"a".repeat(254)).is_err());
    assert!(machine_name(&"a".repeat(253)).is_ok());
}

#[test]
fn the_request_is_gna_s_and_named_after_key_and_subject() {
    let request = signing_request("m-1", b"key one", "PEM");
    let spec = &request.spec;
    assert_eq!(spec.signer_name, "kubernetes.io/kube-apiserver-client");
    assert_eq!(spec.expiration_seconds, Some(2_592_000));
    assert_eq!(
        spec.usages.as_deref().unwrap(),
        ["digital signature", "key encipherment", "client auth"]
    );
    assert_eq!(spec.request.0, b"PEM");
    let name = request.metadata.name.clone().unwrap();
    assert!(name.starts_with("node-agent-csr-"), "{name}");
    assert!(name.len() <= 253 && !name.contains('/'), "{name}");
    // The same key and machine give the same name; another key or machine another.
    assert_eq!(
        signing_request("m-1", b"key one", "other PEM")
            .metadata
            .name,
        Some(name.clone())
    );
    assert_ne!(
        signing_request("m-1", b"key two", "PEM").metadata.name,
        Some(name.clone())
    );
    assert_ne!(
        signing_request("m-2", b"key one", "PEM").metadata.name,
        Some(name)
    );
    assert_eq!(common_name("m-1"), "gardener.cloud:node-agent:machine:m-1");
}

fn condition(type_: &str, reason: &str) -> CertificateSigningRequestCondition {
    CertificateSigningRequestCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some("because".into()),
        ..CertificateSigningRequestCondition::default()
    }
}

#[test]
fn the_status_tells_pending_issued_denied_failed() {
    assert_eq!(request_state(None), RequestState::Pending);
    let mut status = CertificateSigningRequestStatus {
        conditions: Some(vec![condition("Approved", "RequestApproved")]),
        ..CertificateSigningRequestStatus::default()
    };
    assert_eq!(request_state(Some(&status)), RequestState::Pending);
    status.certificate = Some(k8s_openapi::ByteString(b"CERT".to_vec()));
    assert_eq!(
        request_state(Some(&status)),
        RequestState::Issued("CERT".into())
    );
    status.conditions = Some(vec![condition("Denied", "RequestDenied")]);
    assert_eq!(
        request_state(Some(&status)),
        RequestState::Denied("RequestDenied: because".into())
    );
    status.conditions = Some(vec![condition("Failed", "SignerValidationFailure")]);
    assert!(matches!(
        request_state(Some(&status)),
        RequestState::Failed(_)
    ));
}

#[test]
fn kubeconfigs_have_gna_s_names_and_embed_the_credentials() {
    let ca = CaSource::File("/var/lib/gardener-node-agent/cluster-ca.crt".into());
    let yaml = serde_norway::to_string(&kubeconfig("api.example:443", &ca, "CERT", "KEY")).unwrap();
    for line in [
        "server: https://api.example:443",
        "certificate-authority: /var/lib/gardener-node-agent/cluster-ca.crt",
        &format!("client-certificate-data: {}", STANDARD.encode("CERT")),
        &format!("client-key-data: {}", STANDARD.encode("KEY")),
        "current-context: node-agent",
    ] {
        assert!(yaml.contains(line), "{line}\n{yaml}");
    }
    assert!(!yaml.contains("null"), "{yaml}");
    let parsed = Kubeconfig::from_yaml(&yaml).unwrap();
    assert_eq!(client_certificate(&parsed).unwrap(), b"CERT");
    // A renewal replaces the certificate and key and keeps the rest.
    let renewed = with_certificate(&parsed, "NEW", "NEWKEY").unwrap();
    assert_eq!(client_certificate(&renewed).unwrap(), b"NEW");
    assert_eq!(
        serde_json::to_value(&renewed.clusters).unwrap(),
        serde_json::to_value(&parsed.clusters).unwrap()
    );

    let kubelet = kubelet_bootstrap_kubeconfig(
        "https://api.example",
        &CaSource::Data(b"PEM".to_vec()),
        "abcdef.0123456789abcdef\n",
    );
    let yaml = serde_norway::to_string(&kubelet).unwrap();
    assert!(yaml.contains("token: abcdef.0123456789abcdef\n"), "{yaml}");
    assert!(
        yaml.contains("current-context: kubelet-bootstrap"),
        "{yaml}"
    );
    assert!(yaml.contains(&format!(
        "certificate-authority-data: {}",
        STANDARD.encode("PEM")
    )));
}

#[test]
fn renewal_is_due_between_80_and_88_percent_of_the_lifetime() {
    let facts = CertificateFacts {
        serial: "01".into(),
        not_before: 1_000,
        not_after: 2_000,
    };
    assert_eq!(renewal_due(&facts, 0.0), 1_800);
    assert_eq!(renewal_due(&facts, 0.999_999), 1_879);
    assert_eq!(renewal_due(&facts, 7.0), 1_880);
    // Retries: a tenth of what is left, within 10 s and 5 min.
    assert_eq!(retry_after(&facts, 1_900), Duration::from_secs(10));
    assert_eq!(retry_after(&facts, 2_500), Duration::from_secs(10));
    let long = CertificateFacts {
        not_after: 1_000 + 30 * 24 * 3600,
        ..facts
    };
    assert_eq!(retry_after(&long, 1_000), Duration::from_secs(300));
}

#[test]
fn kubelet_is_bootstrapped_only_with_a_token_and_without_its_own_credentials() {
    assert!(kubelet_needs_bootstrap(true, false));
    assert!(!kubelet_needs_bootstrap(true, true));
    assert!(!kubelet_needs_bootstrap(false, false));
}

/// kubelet's `kubeconfig-real` as kubelet writes it after its certificate bootstrap.
const KUBELET_REAL: &str = "apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: T0xEIENB
    server: https://old.example
  name: default-cluster
contexts:
- context:
    cluster: default-cluster
    namespace: default
    user: default-auth
  name: default-context
current-context: default-context
preferences: {}
users:
- name: default-auth
  user:
    client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem
    client-key: /var/lib/kubelet/pki/kubelet-client-current.pem
";

#[test]
fn kubelet_is_bootstrapped_again_from_kubeconfig_real_with_its_certificate_embedded() {
    let real = Kubeconfig::from_yaml(KUBELET_REAL).unwrap();
    let pem = b"-----BEGIN CERTIFICATE-----\nC\n-----END CERTIFICATE-----\n-----BEGIN EC PRIVATE KEY-----\nK\n-----END EC PRIVATE KEY-----\n";
    let ca = CaSource::File("/var/lib/gardener-node-agent/cluster-ca.crt".into());
    let written = kubelet_rebootstrap_kubeconfig(&real, "https://api.example", &ca, Some(pem));

    // One cluster, GNA's name, the agent's server and CA file (not the old embedded CA).
    assert_eq!(written.clusters.len(), 1);
    assert_eq!(written.clusters[0].name, "default-cluster");
    let cluster = written.clusters[0].cluster.as_ref().unwrap();
    assert_eq!(cluster.server.as_deref(), Some("https://api.example"));
    assert_eq!(
        cluster.certificate_authority.as_deref(),
        Some("/var/lib/gardener-node-agent/cluster-ca.crt")
    );
    assert_eq!(cluster.certificate_authority_data, None);
    // One user, GNA's name: certificate and key are both the PEM file's content, embedded
    // (GNA's ClientCertificateData/ClientKeyData), not paths.
    assert_eq!(written.auth_infos.len(), 1);
    assert_eq!(written.auth_infos[0].name, "default-auth");
    let user = written.auth_infos[0].auth_info.as_ref().unwrap();
    assert_eq!(user.client_certificate, None);
    assert_eq!(user.client_key, None);
    assert_eq!(
        STANDARD
            .decode(user.client_certificate_data.as_deref().unwrap())
            .unwrap(),
        pem
    );
    let key = serde_json::to_value(&written.auth_infos[0]).unwrap();
    assert_eq!(
        key["user"]["client-key-data"].as_str(),
        Some(STANDARD.encode(pem).as_str())
    );
    // kubelet's context is kept and points at the new names.
    assert_eq!(written.current_context.as_deref(), Some("default-context"));
    let context = written.contexts[0].context.as_ref().unwrap();
    assert_eq!(context.cluster, "default-cluster");
    assert_eq!(context.user.as_deref(), Some("default-auth"));

    // Without kubelet's certificate file (GNA: empty data) no credentials are embedded.
    let written = kubelet_rebootstrap_kubeconfig(&real, "api.example", &ca, None);
    let user = written.auth_infos[0].auth_info.as_ref().unwrap();
    assert_eq!(user.client_certificate_data, None);
    assert!(user.client_key_data.is_none());
    assert_eq!(
        written.clusters[0]
            .cluster
            .as_ref()
            .unwrap()
            .server
            .as_deref(),
        Some("https://api.example")
    );
}

#[test]
fn kubelet_is_bootstrapped_again_from_kubeconfig_real_else_from_its_bootstrap_kubeconfig() {
    assert_eq!(
        kubelet_rebootstrap(true, false),
        KubeletRebootstrap::FromReal
    );
    assert_eq!(
        kubelet_rebootstrap(true, true),
        KubeletRebootstrap::FromReal
    );
    assert_eq!(
        kubelet_rebootstrap(false, true),
        KubeletRebootstrap::Bootstrap
    );
    assert_eq!(
        kubelet_rebootstrap(false, false),
        KubeletRebootstrap::Impossible
    );
}

#[test]
fn a_certificate_not_valid_by_this_clock_names_the_skew() {
    let facts = CertificateFacts {
        serial: "0a".into(),
        not_before: 1_000,
        not_after: 2_000,
    };
    assert_eq!(clock_skew(&facts, 1_500), None);
    assert_eq!(clock_skew(&facts, 1_000), None);
    let behind = clock_skew(&facts, 400).unwrap();
    assert!(
        behind.contains("valid only from 600 s from now"),
        "{behind}"
    );
    assert!(behind.contains("the clock is behind"), "{behind}");
    let ahead = clock_skew(&facts, 2_030).unwrap();
    assert!(ahead.contains("expired 30 s ago"), "{ahead}");
}

/// A certificate for `key` valid from `not_before` to `not_after` (Unix seconds), signed by
/// another key (the signature is the API server's business, not the agent's).
fn issued_for(key: &rcgen::KeyPair, not_before: i64, not_after: i64) -> String {
    let at = |unix: i64| rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs(unix as u64);
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.not_before = at(not_before);
    params.not_after = at(not_after);
    let issuer = rcgen::Issuer::new(
        rcgen::CertificateParams::new(Vec::<String>::new()).unwrap(),
        rcgen::KeyPair::generate().unwrap(),
    );
    params.signed_by(key, &issuer).unwrap().pem()
}

/// Issue #41 item 5: only a certificate for the request's key, valid now by the API server's
/// clock and of a bounded size is taken.
#[test]
fn an_issued_certificate_is_taken_only_for_our_key_valid_now_and_small() {
    let key = rcgen::KeyPair::generate().unwrap();
    let ours = key.public_key_raw();
    let now = 1_800_000_000;
    // kube-controller-manager's: backdated 5 min, 90 s ahead.
    let good = issued_for(&key, now - 300, now + 90);
    let facts = check_issued(good.as_bytes(), ours, now).unwrap();
    assert_eq!(facts.not_after, now + 90);
    // The node's clock does not matter here: valid by the API server's clock is enough.
    assert!(clock_skew(&facts, now + 3600).is_some());

    let other = rcgen::KeyPair::generate().unwrap();
    let refused = check_issued(
        issued_for(&other, now - 300, now + 90).as_bytes(),
        ours,
        now,
    );
    assert!(
        matches!(&refused, Err(IssuedRefused::OtherKey { .. })),
        "{refused:?}"
    );
    let expired = check_issued(
        issued_for(&key, now - 7200, now - 3600).as_bytes(),
        ours,
        now,
    );
    assert!(
        matches!(&expired, Err(IssuedRefused::Expired { ago: 3600, .. })),
        "{expired:?}"
    );
    // Up to 5 min ahead is the signer's clock; more is refused.
    assert!(check_issued(issued_for(&key, now + 300, now + 900).as_bytes(), ours, now).is_ok());
    let later = check_issued(issued_for(&key, now + 301, now + 900).as_bytes(), ours, now);
    assert!(
        matches!(&later, Err(IssuedRefused::NotYetValid { ahead: 301, .. })),
        "{later:?}"
    );
    // A chain over the bound, even one that starts with a good certificate.
    let chain = good.repeat(MAX_ISSUED_BYTES / good.len() + 1);
    let large = check_issued(chain.as_bytes(), ours, now).unwrap_err();
    assert!(
        large
            .to_string()
            .starts_with(&format!("it is {} bytes, more than the 65536", chain.len())),
        "{large}"
    );
    assert_eq!(
        check_issued(b"not a certificate", ours, now),
        Err(IssuedRefused::NotACertificate)
    );
}
