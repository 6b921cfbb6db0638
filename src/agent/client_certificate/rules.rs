//! The agent's client certificate as gardener-node-agent v1.149.3 asks for it (pure): the
//! CertificateSigningRequest, what its status says, whether an issued certificate is taken
//! ([`check_issued`]; GNA takes whatever the signer wrote), the kubeconfig that carries the
//! certificate, when to renew it, and kubelet's bootstrap kubeconfig.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec, CertificateSigningRequestStatus,
};
use kube::api::ObjectMeta;
use kube::config::{AuthInfo, Kubeconfig};
use sha2::Digest;

use crate::agent::access::kubeconfigs::{CaSource, named_kubeconfig};
use crate::kubeconfig::x509::{self, CertificateFacts};

/// The user name prefix of a node agent (`gardener.cloud:node-agent:machine:<machine>`).
pub const USER_PREFIX: &str = "gardener.cloud:node-agent:machine:";
/// The group (certificate organisation) of node agents.
pub const ORGANISATION: &str = "gardener.cloud:node-agents";
/// The signer gardener-resource-manager's approver and kube-controller-manager serve.
pub const SIGNER: &str = "kubernetes.io/kube-apiserver-client";
/// The lifetime asked for (720 h, GNA's); the signer may cap it (`--cluster-signing-duration`).
pub const EXPIRATION_SECONDS: i32 = 30 * 24 * 3600;
/// What the certificate is for.
pub const USAGES: [&str; 3] = ["digital signature", "key encipherment", "client auth"];
/// The longest machine name taken from the `machine-name` file.
const MAX_MACHINE_NAME: usize = 253;

/// Why the `machine-name` file cannot name the machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MachineNameError {
    /// Its first line is empty.
    #[error("the machine-name file is empty")]
    Empty,
    /// Its first line is no object name.
    #[error(
        "the machine-name file holds {0:?}, which is not a machine name (at most 253 characters of a-z, 0-9, '-' and '.')"
    )]
    Invalid(String),
}

/// The machine name: the first line of the `machine-name` file (which machine-controller-manager
/// filled in through `<<MACHINE_NAME>>`), trimmed; it must be an object name.
pub fn machine_name(file: &str) -> Result<String, MachineNameError> {
    let name = file.lines().next().unwrap_or_default().trim();
    if name.is_empty() {
        return Err(MachineNameError::Empty);
    }
    let valid = name.len() <= MAX_MACHINE_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !valid {
        let shown: String = name.chars().take(80).collect();
        return Err(MachineNameError::Invalid(
            crate::printable::escape_controls(&shown).into_owned(),
        ));
    }
    Ok(name.to_string())
}

/// `gardener.cloud:node-agent:machine:<machine>`.
pub fn common_name(machine: &str) -> String {
    format!("{USER_PREFIX}{machine}")
}

/// The CertificateSigningRequest for the PEM request `request_pem` of the key whose public key
/// is `public_key_der`. Its name is derived from the key and the subject, so asking again with
/// the same key (after a crash) finds the request already made.
pub fn signing_request(
    machine: &str,
    public_key_der: &[u8],
    request_pem: &str,
) -> CertificateSigningRequest {
    let mut digest = sha2::Sha512_256::new();
    digest.update(public_key_der);
    digest.update(common_name(machine));
    digest.update(ORGANISATION);
    for usage in USAGES {
        digest.update(usage);
    }
    CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(format!(
                "node-agent-csr-{}",
                URL_SAFE_NO_PAD.encode(digest.finalize())
            )),
            ..ObjectMeta::default()
        },
        spec: CertificateSigningRequestSpec {
            request: k8s_openapi::ByteString(request_pem.as_bytes().to_vec()),
            signer_name: SIGNER.to_string(),
            expiration_seconds: Some(EXPIRATION_SECONDS),
            usages: Some(USAGES.iter().map(|u| u.to_string()).collect()),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    }
}

/// Where a request stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestState {
    /// Not decided or not signed yet.
    Pending,
    /// Signed: the certificate (PEM).
    Issued(String),
    /// Denied by the approver: its reason and message.
    Denied(String),
    /// The signer failed: its reason and message.
    Failed(String),
}

/// What the request's status says (a denial or failure wins over a certificate).
pub fn request_state(status: Option<&CertificateSigningRequestStatus>) -> RequestState {
    let Some(status) = status else {
        return RequestState::Pending;
    };
    for condition in status.conditions.iter().flatten() {
        if condition.status != "True" {
            continue;
        }
        let why = format!(
            "{}: {}",
            condition.reason.as_deref().unwrap_or("no reason"),
            condition.message.as_deref().unwrap_or("no message")
        );
        match condition.type_.as_str() {
            "Denied" => return RequestState::Denied(why),
            "Failed" => return RequestState::Failed(why),
            _ => {}
        }
    }
    match &status.certificate {
        Some(certificate) if !certificate.0.is_empty() => {
            RequestState::Issued(String::from_utf8_lossy(&certificate.0).into_owned())
        }
        _ => RequestState::Pending,
    }
}

/// The most bytes of an issued certificate (with its chain) that are taken. A client
/// certificate with a chain of a few intermediates is a few KiB; this keeps the kubeconfig it
/// goes into (base64, with the key) far below what is read back
/// ([`crate::agent::access::credentials::MAX_CREDENTIALS_BYTES`]).
pub const MAX_ISSUED_BYTES: usize = 64 * 1024;
/// How far before the API server's clock an issued certificate may begin: the signer's clock
/// may be off the API server's, and signers backdate (kube-controller-manager by 5 min).
pub const SIGNER_CLOCK_TOLERANCE: i64 = 300;

/// Why an issued certificate is not taken (the credentials in use stay).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IssuedRefused {
    /// Larger than [`MAX_ISSUED_BYTES`].
    #[error("it is {size} bytes, more than the {limit} a client certificate with its chain needs")]
    TooLarge {
        /// Its size.
        size: usize,
        /// [`MAX_ISSUED_BYTES`].
        limit: usize,
    },
    /// Not an X.509 certificate.
    #[error("it does not read as an X.509 certificate")]
    NotACertificate,
    /// Its public key is not the key the request was made with.
    #[error(
        "certificate {serial} is for another key than the one the request was made with: the \
         signer did not sign this request"
    )]
    OtherKey {
        /// Its serial.
        serial: String,
    },
    /// It ends before it begins.
    #[error("certificate {serial} ends ({not_after}) before it begins ({not_before})")]
    Inverted {
        /// Its serial.
        serial: String,
        /// `notBefore`, Unix seconds.
        not_before: i64,
        /// `notAfter`, Unix seconds.
        not_after: i64,
    },
    /// Expired by the API server's clock.
    #[error("certificate {serial} expired {ago} s ago by the API server's clock")]
    Expired {
        /// Its serial.
        serial: String,
        /// How long ago.
        ago: i64,
    },
    /// Valid only later than [`SIGNER_CLOCK_TOLERANCE`] from now by the API server's clock.
    #[error("certificate {serial} is valid only from {ahead} s from now by the API server's clock")]
    NotYetValid {
        /// Its serial.
        serial: String,
        /// How far ahead.
        ahead: i64,
    },
}

/// Whether the certificate `pem` issued for a request made with the key whose public key is
/// `public_key` is taken, and its facts when it is: at most [`MAX_ISSUED_BYTES`], an X.509
/// certificate for exactly that key, and valid at `server_now` — the API server's clock (which
/// decides whether it authenticates), not the node's: a new certificate that is not valid by
/// the node's clock says the node's clock is off ([`clock_skew`], a warning), while one that
/// is not valid by the API server's would leave the node without working credentials.
pub fn check_issued(
    pem: &[u8],
    public_key: &[u8],
    server_now: i64,
) -> Result<CertificateFacts, IssuedRefused> {
    if pem.len() > MAX_ISSUED_BYTES {
        return Err(IssuedRefused::TooLarge {
            size: pem.len(),
            limit: MAX_ISSUED_BYTES,
        });
    }
    let facts = x509::first_certificate_facts(pem).ok_or(IssuedRefused::NotACertificate)?;
    let serial = facts.serial.clone();
    if x509::first_certificate_public_key(pem).as_deref() != Some(public_key) {
        return Err(IssuedRefused::OtherKey { serial });
    }
    if facts.not_after <= facts.not_before {
        return Err(IssuedRefused::Inverted {
            serial,
            not_before: facts.not_before,
            not_after: facts.not_after,
        });
    }
    if facts.not_after <= server_now {
        return Err(IssuedRefused::Expired {
            serial,
            ago: server_now - facts.not_after,
        });
    }
    if facts.not_before > server_now + SIGNER_CLOCK_TOLERANCE {
        return Err(IssuedRefused::NotYetValid {
            serial,
            ahead: facts.not_before - server_now,
        });
    }
    Ok(facts)
}

/// The same kubeconfig with the current user's certificate and key replaced (a renewal keeps
/// the cluster as it is, also one GNA wrote). `None` when there is no current user.
pub fn with_certificate(
    kubeconfig: &Kubeconfig,
    cert_pem: &str,
    key_pem: &str,
) -> Option<Kubeconfig> {
    let mut renewed = kubeconfig.clone();
    let user = current_user(kubeconfig)?;
    let auth = renewed.auth_infos[user]
        .auth_info
        .get_or_insert_with(AuthInfo::default);
    auth.client_certificate_data = Some(STANDARD.encode(cert_pem));
    auth.client_key_data = Some(STANDARD.encode(key_pem).into());
    Some(renewed)
}

/// The embedded client certificate (PEM) of the current user, when there is one.
pub fn client_certificate(kubeconfig: &Kubeconfig) -> Option<Vec<u8>> {
    let auth = kubeconfig.auth_infos[current_user(kubeconfig)?]
        .auth_info
        .as_ref()?;
    STANDARD
        .decode(auth.client_certificate_data.as_deref()?.trim())
        .ok()
}

/// Where the current context's user is among the kubeconfig's users.
fn current_user(kubeconfig: &Kubeconfig) -> Option<usize> {
    let current = kubeconfig.current_context.as_deref()?;
    let user = kubeconfig
        .contexts
        .iter()
        .find(|named| named.name == current)?
        .context
        .as_ref()?
        .user
        .as_deref()?;
    kubeconfig
        .auth_infos
        .iter()
        .position(|named| named.name == user)
}

/// When to renew a certificate valid for `facts` (Unix seconds): GNA's
/// `notBefore + 0.8 × lifetime × (1 + 0.1 × jitter)`, `jitter` in `[0, 1)` — between 80 % and
/// 88 % of the lifetime.
pub fn renewal_due(facts: &CertificateFacts, jitter: f64) -> i64 {
    let lifetime = (facts.not_after - facts.not_before).max(0) as f64;
    let offset = lifetime * 0.8 * (1.0 + 0.1 * jitter.clamp(0.0, 1.0));
    facts.not_before + offset as i64
}

/// How long to wait before renewing again after a failed attempt at `now`: a tenth of the time
/// the certificate has left, between 10 s and 5 min (so an expiring certificate is tried often).
pub fn retry_after(facts: &CertificateFacts, now: i64) -> Duration {
    let left = (facts.not_after - now).max(0) as u64;
    Duration::from_secs((left / 10).clamp(10, 300))
}

/// What is wrong with the node's clock when a certificate valid for `facts` is not valid at
/// `now` by it (not yet, or no longer): the renewal schedule follows this clock, so this is
/// told in a log line and an event. `None` when the clock agrees.
pub fn clock_skew(facts: &CertificateFacts, now: i64) -> Option<String> {
    if now < facts.not_before {
        Some(format!(
            "the client certificate {} is valid only from {} s from now by this node's clock: the clock is behind, and certificate renewals are timed by it",
            facts.serial,
            facts.not_before - now
        ))
    } else if now >= facts.not_after {
        Some(format!(
            "the client certificate {} expired {} s ago by this node's clock: if it was just issued the clock is ahead, and certificate renewals are timed by it",
            facts.serial,
            now - facts.not_after
        ))
    } else {
        None
    }
}

/// Whether kubelet gets a bootstrap kubeconfig: only with a bootstrap token, and only while
/// kubelet has no credentials of its own (`kubeconfig-real`, `pki/kubelet-client-current.pem`).
pub fn kubelet_needs_bootstrap(bootstrap_token: bool, kubelet_credentials: bool) -> bool {
    bootstrap_token && !kubelet_credentials
}

/// kubelet's kubeconfig once it has its own client certificate (in kubelet's folder).
pub const KUBELET_KUBECONFIG_REAL: &str = "kubeconfig-real";
/// kubelet's bootstrap kubeconfig (in kubelet's folder).
pub const KUBELET_KUBECONFIG_BOOTSTRAP: &str = "kubeconfig-bootstrap";
/// kubelet's certificate folder (in kubelet's folder).
pub const KUBELET_PKI: &str = "pki";
/// kubelet's current client certificate and key, one PEM file (in [`KUBELET_PKI`]).
pub const KUBELET_CLIENT_CURRENT: &str = "kubelet-client-current.pem";
/// The cluster of the kubeconfig kubelet is bootstrapped again with (GNA's).
pub const KUBELET_REBOOTSTRAP_CLUSTER: &str = "default-cluster";
/// The user of the kubeconfig kubelet is bootstrapped again with (GNA's).
pub const KUBELET_REBOOTSTRAP_USER: &str = "default-auth";

/// How kubelet is bootstrapped again after a certificate authority rotation (GNA's
/// `rebootstrapKubelet`), by the files in its folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeletRebootstrap {
    /// `kubeconfig-real` is there: its bootstrap kubeconfig is written from it
    /// ([`kubelet_rebootstrap_kubeconfig`]).
    FromReal,
    /// No `kubeconfig-real`, but a bootstrap kubeconfig (kubelet never got its certificate,
    /// or an earlier attempt got this far): that one is used.
    Bootstrap,
    /// Neither: kubelet cannot be bootstrapped again.
    Impossible,
}

/// Which way kubelet is bootstrapped again ([`KubeletRebootstrap`]).
pub fn kubelet_rebootstrap(real_exists: bool, bootstrap_exists: bool) -> KubeletRebootstrap {
    match (real_exists, bootstrap_exists) {
        (true, _) => KubeletRebootstrap::FromReal,
        (false, true) => KubeletRebootstrap::Bootstrap,
        (false, false) => KubeletRebootstrap::Impossible,
    }
}

/// kubelet's bootstrap kubeconfig after a certificate authority rotation, as GNA writes it:
/// `real` (kubelet's `kubeconfig-real`) with its clusters replaced by
/// [`KUBELET_REBOOTSTRAP_CLUSTER`] (`server`, the CA as the agent names it) and its users by
/// [`KUBELET_REBOOTSTRAP_USER`], whose certificate and key are both the content of kubelet's
/// current client certificate file `client_pem` (certificate and key in one PEM), embedded as
/// data — kubelet asks for a new certificate with the old one. The contexts are `real`'s
/// (kubelet's own point at these names).
pub fn kubelet_rebootstrap_kubeconfig(
    real: &Kubeconfig,
    server: &str,
    ca: &CaSource,
    client_pem: Option<&[u8]>,
) -> Kubeconfig {
    let named = named_kubeconfig(
        KUBELET_REBOOTSTRAP_CLUSTER,
        server,
        ca,
        AuthInfo {
            client_certificate_data: client_pem.map(|pem| STANDARD.encode(pem)),
            client_key_data: client_pem.map(|pem| STANDARD.encode(pem).into()),
            ..AuthInfo::default()
        },
    );
    let mut kubeconfig = real.clone();
    kubeconfig.clusters = named.clusters;
    kubeconfig.auth_infos = named.auth_infos;
    kubeconfig.auth_infos[0].name = KUBELET_REBOOTSTRAP_USER.into();
    kubeconfig
}

#[cfg(test)]
mod tests;
