//! Certificates and keys for the local control plane: a CA, the kube-apiserver serving
//! certificate (for `127.0.0.1` and `localhost`), an admin client certificate in group
//! `system:masters`, and the service-account signing key. The CA's key is kept too:
//! kube-controller-manager's `kubernetes.io/kube-apiserver-client` signer issues client
//! certificates with it (see `ControlPlaneOptions::csr_signing`), which kube-apiserver then
//! accepts, since its `--client-ca-file` is the same CA.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// PEM material of the local control plane.
#[derive(Debug, Clone)]
pub struct Pki {
    /// The CA certificate (trust anchor for clients and for client certificates).
    pub ca_cert: String,
    /// The CA's private key (ECDSA P-256, PKCS#8): the key of kube-controller-manager's
    /// client certificate signer.
    pub ca_key: String,
    /// The kube-apiserver serving certificate.
    pub serving_cert: String,
    /// Its private key.
    pub serving_key: String,
    /// The admin client certificate (`CN=admin`, `O=system:masters`).
    pub admin_cert: String,
    /// Its private key.
    pub admin_key: String,
    /// The service-account token signing key (ECDSA P-256, PKCS#8).
    pub service_account_key: String,
    /// Its public key, which kube-apiserver uses to verify tokens.
    pub service_account_public_key: String,
}

/// Generates fresh PKI material. Pure apart from randomness; nothing is written.
pub fn generate() -> Result<Pki, rcgen::Error> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "gardener-extension-node local CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate()?;
    let ca_key_pem = ca_key.serialize_pem();
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key)?;

    let serving_key = KeyPair::generate()?;
    let mut serving =
        CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
    serving
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let serving_cert = serving.signed_by(&serving_key, &ca)?;

    let admin_key = KeyPair::generate()?;
    let mut admin = CertificateParams::new(Vec::<String>::new())?;
    admin.distinguished_name.push(DnType::CommonName, "admin");
    admin
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let admin_cert = admin.signed_by(&admin_key, &ca)?;

    let service_account = KeyPair::generate()?;
    Ok(Pki {
        ca_cert: ca.pem(),
        ca_key: ca_key_pem,
        serving_cert: serving_cert.pem(),
        serving_key: serving_key.serialize_pem(),
        admin_cert: admin_cert.pem(),
        admin_key: admin_key.serialize_pem(),
        service_account_key: service_account.serialize_pem(),
        service_account_public_key: service_account.public_key_pem(),
    })
}

/// A self-signed serving certificate and key for `127.0.0.1`/`localhost` (PEM), for local
/// servers nobody verifies (e.g. gardener-resource-manager's unused webhook port).
pub fn self_signed_serving() -> Result<(String, String), rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut params =
        CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
    params
        .distinguished_name
        .push(DnType::CommonName, "gardener-extension-node local server");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}
