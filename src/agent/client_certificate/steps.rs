//! The I/O of the client certificate ([`super::rules`] decides): asking the API server for a
//! certificate, reading and writing the kubeconfigs and the files they come from, removing
//! the bootstrap files. Every file is read through [`crate::safe_fs`] with a bound (a node's
//! links, FIFOs and huge files are refused) and written atomically with mode 0600, so a crash
//! leaves the old credentials or the new ones, never half of either.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{Api, PostParams};
use kube::config::Kubeconfig;
use tracing::debug;

use super::rules::{self, IssuedRefused, MachineNameError, RequestState};
use crate::agent::access::credentials::MAX_CREDENTIALS_BYTES;
use crate::kubeconfig::x509::{self, CertificateFacts};
use crate::safe_fs::{self, SafeFsError};

/// Mode of every credentials file.
pub const CREDENTIALS_MODE: u32 = 0o600;
/// The longest wait between two reads of a pending request.
const MAX_POLL: Duration = Duration::from_secs(2);

/// Why no certificate was obtained or stored.
#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    /// The key or the request could not be made.
    #[error("generating the key and the certificate request")]
    Key(#[source] rcgen::Error),
    /// The API server does not accept the credentials the request was sent with.
    #[error(
        "creating CertificateSigningRequest {name}: the API server does not accept these credentials (401 Unauthorized): a bootstrap token that is wrong, expired or deleted, or a certificate it does not trust"
    )]
    Unauthorized {
        /// The request.
        name: String,
    },
    /// The API server refused the request otherwise.
    #[error("creating CertificateSigningRequest {name}")]
    Create {
        /// The request.
        name: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The request could not be read back.
    #[error("reading CertificateSigningRequest {name}")]
    Read {
        /// The request.
        name: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The approver denied it.
    #[error("CertificateSigningRequest {name} was denied ({why})")]
    Denied {
        /// The request.
        name: String,
        /// Reason and message of the condition.
        why: String,
    },
    /// The signer failed it.
    #[error("CertificateSigningRequest {name} failed ({why})")]
    Failed {
        /// The request.
        name: String,
        /// Reason and message of the condition.
        why: String,
    },
    /// Nobody answered in time.
    #[error("CertificateSigningRequest {name} was not issued within {timeout:?}")]
    Timeout {
        /// The request.
        name: String,
        /// How long it was waited for.
        timeout: Duration,
    },
    /// What was issued is not taken ([`rules::check_issued`]).
    #[error(
        "the certificate issued for CertificateSigningRequest {name} is refused; the credentials in use stay"
    )]
    Refused {
        /// The request.
        name: String,
        /// Why.
        #[source]
        why: IssuedRefused,
    },
    /// The `machine-name` file is missing.
    #[error("{0} does not exist: the machine name is needed for the certificate")]
    NoMachineName(String),
    /// The `machine-name` file does not name a machine.
    #[error("{path}")]
    MachineName {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: MachineNameError,
    },
    /// A file is missing.
    #[error("{0} does not exist")]
    Missing(String),
    /// A file could not be read or written.
    #[error(transparent)]
    File(#[from] SafeFsError),
    /// A kubeconfig does not read or render.
    #[error("{path} is not a kubeconfig: {message}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// The kubeconfig would be larger than is read back.
    #[error(
        "{path} would be {size} bytes, more than the {MAX_CREDENTIALS_BYTES} that are read back; it is not written"
    )]
    TooLarge {
        /// The file.
        path: String,
        /// Its size.
        size: usize,
    },
    /// The kubeconfig has no embedded client certificate of its current user.
    #[error("{0} has no client certificate of its current user: there is nothing to renew")]
    NoCertificate(String),
}

/// A certificate and its key (PEM).
pub struct Issued {
    /// The certificate, as the signer issued it.
    pub cert_pem: String,
    /// The private key (PKCS #8).
    pub key_pem: String,
    /// Its serial and validity.
    pub facts: CertificateFacts,
}

/// Asks for a certificate for `machine` with a new ECDSA P-256 key and waits (GET, from every
/// 250 ms up to every 2 s) until it is issued, denied or failed, or `timeout` passes. What is
/// issued is taken only when [`rules::check_issued`] takes it, judged by the API server's
/// clock: the request's `creationTimestamp` plus the time since it was created.
pub async fn request(
    client: &kube::Client,
    machine: &str,
    timeout: Duration,
) -> Result<Issued, CertificateError> {
    let key = rcgen::KeyPair::generate().map_err(CertificateError::Key)?;
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, rules::common_name(machine));
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, rules::ORGANISATION);
    let request_pem = params
        .serialize_request(&key)
        .and_then(|request| request.pem())
        .map_err(CertificateError::Key)?;
    let csr = rules::signing_request(machine, key.public_key_raw(), &request_pem);
    let name = csr.metadata.name.clone().unwrap_or_default();
    let api = Api::<CertificateSigningRequest>::all(client.clone());
    let created =
        api.create(&PostParams::default(), &csr)
            .await
            .map_err(|source| match source {
                kube::Error::Api(status) if status.code == 401 => {
                    CertificateError::Unauthorized { name: name.clone() }
                }
                source => CertificateError::Create {
                    name: name.clone(),
                    source,
                },
            })?;
    let created_here = Instant::now();
    debug!(%name, "CertificateSigningRequest created");
    let cert_pem = wait_for_certificate(&api, &name, timeout).await?;
    let server_now = server_now(&created, created_here);
    let facts = rules::check_issued(cert_pem.as_bytes(), key.public_key_raw(), server_now)
        .map_err(|why| CertificateError::Refused {
            name: name.clone(),
            why,
        })?;
    Ok(Issued {
        cert_pem,
        key_pem: key.serialize_pem(),
        facts,
    })
}

/// The API server's clock now (Unix seconds): the `creationTimestamp` it gave `created` plus
/// the time since then by this process's monotonic clock; the node's clock when the request
/// has no creation time.
fn server_now(created: &CertificateSigningRequest, created_here: Instant) -> i64 {
    let since = i64::try_from(created_here.elapsed().as_secs()).unwrap_or(i64::MAX);
    created
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or_else(unix_now, |time| time.0.as_second())
        .saturating_add(since)
}

async fn wait_for_certificate(
    api: &Api<CertificateSigningRequest>,
    name: &str,
    timeout: Duration,
) -> Result<String, CertificateError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut pause = Duration::from_millis(250);
    loop {
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_POLL);
        let csr = api
            .get(name)
            .await
            .map_err(|source| CertificateError::Read {
                name: name.to_string(),
                source,
            })?;
        match rules::request_state(csr.status.as_ref()) {
            RequestState::Issued(pem) => return Ok(pem),
            RequestState::Denied(why) => {
                return Err(CertificateError::Denied {
                    name: name.to_string(),
                    why,
                });
            }
            RequestState::Failed(why) => {
                return Err(CertificateError::Failed {
                    name: name.to_string(),
                    why,
                });
            }
            RequestState::Pending if tokio::time::Instant::now() >= deadline => {
                return Err(CertificateError::Timeout {
                    name: name.to_string(),
                    timeout,
                });
            }
            RequestState::Pending => {}
        }
    }
}

/// The machine name from the `machine-name` file.
pub fn read_machine_name(path: &Path) -> Result<String, CertificateError> {
    let text = read_text(path)?.ok_or_else(|| CertificateError::NoMachineName(shown(path)))?;
    rules::machine_name(&text).map_err(|source| CertificateError::MachineName {
        path: shown(path),
        source,
    })
}

/// A credentials file as text (`None`: it does not exist).
pub fn read_text(path: &Path) -> Result<Option<String>, CertificateError> {
    let bytes = safe_fs::read_at_most(path, MAX_CREDENTIALS_BYTES)?;
    Ok(bytes.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
}

/// The kubeconfig at `path`.
pub fn read_kubeconfig(path: &Path) -> Result<Kubeconfig, CertificateError> {
    let text = read_text(path)?.ok_or_else(|| CertificateError::Missing(shown(path)))?;
    Kubeconfig::from_yaml(&text).map_err(|error| CertificateError::Kubeconfig {
        path: shown(path),
        message: error.to_string(),
    })
}

/// The serial and validity of the client certificate in the kubeconfig at `path`.
pub fn current_certificate(path: &Path) -> Result<CertificateFacts, CertificateError> {
    let kubeconfig = read_kubeconfig(path)?;
    rules::client_certificate(&kubeconfig)
        .and_then(|pem| x509::first_certificate_facts(&pem))
        .ok_or_else(|| CertificateError::NoCertificate(shown(path)))
}

/// Writes `kubeconfig` to `path` (atomically, 0600); one larger than is read back
/// ([`MAX_CREDENTIALS_BYTES`]) is not written.
pub fn write_kubeconfig(path: &Path, kubeconfig: &Kubeconfig) -> Result<(), CertificateError> {
    let yaml =
        serde_norway::to_string(kubeconfig).map_err(|error| CertificateError::Kubeconfig {
            path: shown(path),
            message: error.to_string(),
        })?;
    if yaml.len() as u64 > MAX_CREDENTIALS_BYTES {
        return Err(CertificateError::TooLarge {
            path: shown(path),
            size: yaml.len(),
        });
    }
    safe_fs::write(path, yaml.as_bytes(), CREDENTIALS_MODE)?;
    Ok(())
}

/// kubelet's bootstrap kubeconfig.
pub fn kubelet_bootstrap_path(kubelet_dir: &Path) -> PathBuf {
    kubelet_dir.join("kubeconfig-bootstrap")
}

/// Whether kubelet has credentials of its own (`kubeconfig-real` or its client certificate).
pub fn kubelet_has_credentials(kubelet_dir: &Path) -> bool {
    [
        kubelet_dir.join(rules::KUBELET_KUBECONFIG_REAL),
        kubelet_dir
            .join(rules::KUBELET_PKI)
            .join(rules::KUBELET_CLIENT_CURRENT),
    ]
    .iter()
    .any(|path| path.symlink_metadata().is_ok())
}

/// Removes the bootstrap token and kubelet's bootstrap kubeconfig (GNA does so once an OSC is
/// applied and the Node exists); returns the files that were there.
pub fn remove_bootstrap_files(
    bootstrap_token: &Path,
    kubelet_dir: &Path,
) -> Result<Vec<PathBuf>, SafeFsError> {
    let mut removed = Vec::new();
    for path in [
        bootstrap_token.to_path_buf(),
        kubelet_bootstrap_path(kubelet_dir),
    ] {
        if safe_fs::remove_file(&path)? {
            removed.push(path);
        }
    }
    Ok(removed)
}

/// What [`rebootstrap_kubelet_files`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeletRebootstrapped {
    /// The bootstrap kubeconfig was written from `kubeconfig-real` (with kubelet's current
    /// certificate embedded when it was there).
    Written {
        /// Whether kubelet's current client certificate was embedded.
        with_certificate: bool,
    },
    /// There was no `kubeconfig-real`; kubelet's existing bootstrap kubeconfig is used.
    ExistingBootstrap,
}

/// kubelet's files for bootstrapping it again after a certificate authority rotation (GNA's
/// `rebootstrapKubelet` up to the restart): its bootstrap kubeconfig written from
/// `kubeconfig-real` ([`rules::kubelet_rebootstrap_kubeconfig`], 0600), then
/// `kubeconfig-real` and the `pki` folder removed, so that kubelet, restarted, asks for a new
/// certificate. Files are read and written through [`crate::safe_fs`] (links and FIFOs are
/// refused). Fails when there is neither `kubeconfig-real` nor a bootstrap kubeconfig.
pub fn rebootstrap_kubelet_files(
    kubelet_dir: &Path,
    server: &str,
    ca: &crate::agent::access::kubeconfigs::CaSource,
) -> Result<KubeletRebootstrapped, CertificateError> {
    let real_path = kubelet_dir.join(rules::KUBELET_KUBECONFIG_REAL);
    let bootstrap_path = kubelet_bootstrap_path(kubelet_dir);
    let pki = kubelet_dir.join(rules::KUBELET_PKI);
    let real = read_text(&real_path)?;
    let bootstrap_exists = matches!(
        safe_fs::entry(&bootstrap_path)?,
        safe_fs::Entry::Regular { .. }
    );
    let done = match rules::kubelet_rebootstrap(real.is_some(), bootstrap_exists) {
        rules::KubeletRebootstrap::FromReal => {
            let real =
                Kubeconfig::from_yaml(real.as_deref().unwrap_or_default()).map_err(|error| {
                    CertificateError::Kubeconfig {
                        path: shown(&real_path),
                        message: error.to_string(),
                    }
                })?;
            let client_pem = safe_fs::read_at_most(
                &pki.join(rules::KUBELET_CLIENT_CURRENT),
                MAX_CREDENTIALS_BYTES,
            )?;
            let kubeconfig =
                rules::kubelet_rebootstrap_kubeconfig(&real, server, ca, client_pem.as_deref());
            write_kubeconfig(&bootstrap_path, &kubeconfig)?;
            KubeletRebootstrapped::Written {
                with_certificate: client_pem.is_some(),
            }
        }
        rules::KubeletRebootstrap::Bootstrap => KubeletRebootstrapped::ExistingBootstrap,
        rules::KubeletRebootstrap::Impossible => {
            return Err(CertificateError::Missing(format!(
                "{} (and {})",
                shown(&bootstrap_path),
                shown(&real_path)
            )));
        }
    };
    safe_fs::remove_file(&real_path)?;
    remove_folder(&pki)?;
    Ok(done)
}

/// Removes the folder `path` with what is in it (links inside are removed, not followed; a
/// link on the way to it is refused); `false` when it was not there.
fn remove_folder(path: &Path) -> Result<bool, SafeFsError> {
    safe_fs::check_folders(path)?;
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(SafeFsError::Io {
            action: "removing the folder",
            path: shown(path),
            source,
        }),
    }
}

/// This node's clock, Unix seconds.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn shown(path: &Path) -> String {
    path.display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_files_are_written_whole_with_0600_and_hostile_ones_refused() {
        let (_dir, base) = crate::safe_fs::tests::temp();
        let path = base.join("credentials").join("kubeconfig");
        let kubeconfig = crate::agent::access::kubeconfigs::kubeconfig(
            "https://api",
            &crate::agent::access::credentials::CaSource::System,
            "CERT",
            "KEY",
        );
        write_kubeconfig(&path, &kubeconfig).unwrap();
        let mode = std::fs::metadata(&path).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o600
        );
        assert_eq!(
            read_kubeconfig(&path).unwrap().current_context,
            kubeconfig.current_context
        );
        // A certificate that is no certificate: nothing to renew, said with the path.
        let error = current_certificate(&path).unwrap_err();
        assert!(
            error.to_string().contains("has no client certificate"),
            "{error}"
        );

        // A FIFO or a link where the machine name is expected is not opened.
        let fifo = base.join("machine-name");
        crate::safe_fs::tests::mkfifo(&fifo);
        assert!(matches!(
            read_machine_name(&fifo),
            Err(CertificateError::File(_))
        ));
        let missing = base.join("nothing");
        assert!(matches!(
            read_machine_name(&missing),
            Err(CertificateError::NoMachineName(_))
        ));
    }

    #[test]
    fn bootstrap_files_are_removed_once_and_kubelet_credentials_are_seen() {
        let (_dir, base) = crate::safe_fs::tests::temp();
        let token = base.join("bootstrap-token");
        let kubelet = base.join("kubelet");
        std::fs::create_dir_all(kubelet.join("pki")).unwrap();
        std::fs::write(&token, "t").unwrap();
        std::fs::write(kubelet_bootstrap_path(&kubelet), "k").unwrap();
        assert!(!kubelet_has_credentials(&kubelet));
        std::fs::write(kubelet.join("pki/kubelet-client-current.pem"), "p").unwrap();
        assert!(kubelet_has_credentials(&kubelet));
        assert_eq!(remove_bootstrap_files(&token, &kubelet).unwrap().len(), 2);
        assert!(remove_bootstrap_files(&token, &kubelet).unwrap().is_empty());
    }

    #[test]
    fn kubelet_is_bootstrapped_again_from_its_own_files_and_links_are_refused() {
        let (_dir, base) = crate::safe_fs::tests::temp();
        let kubelet = base.join("kubelet");
        let pki = kubelet.join("pki");
        std::fs::create_dir_all(&pki).unwrap();
        let real = kubelet.join("kubeconfig-real");
        let current = pki.join("kubelet-client-current.pem");
        std::fs::write(
            &real,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: default-cluster\n  cluster: {server: https://old}\ncontexts:\n- name: default-context\n  context: {cluster: default-cluster, user: default-auth}\ncurrent-context: default-context\nusers:\n- name: default-auth\n  user: {client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem}\n",
        )
        .unwrap();
        std::fs::write(&current, "CERT AND KEY").unwrap();
        std::fs::write(pki.join("kubelet-client-2026.pem"), "old").unwrap();
        let ca = crate::agent::access::kubeconfigs::CaSource::File(
            "/var/lib/gardener-node-agent/cluster-ca.crt".into(),
        );

        let done = rebootstrap_kubelet_files(&kubelet, "https://api", &ca).unwrap();
        assert_eq!(
            done,
            KubeletRebootstrapped::Written {
                with_certificate: true
            }
        );
        let bootstrap = kubelet_bootstrap_path(&kubelet);
        let mode = std::fs::metadata(&bootstrap).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o600
        );
        let written = read_kubeconfig(&bootstrap).unwrap();
        assert_eq!(written.auth_infos[0].name, "default-auth");
        assert_eq!(
            written.auth_infos[0]
                .auth_info
                .as_ref()
                .unwrap()
                .client_certificate_data
                .as_deref(),
            Some("Q0VSVCBBTkQgS0VZ")
        );
        assert!(!real.exists() && !pki.exists());

        // Again (a crash after the removal): the bootstrap kubeconfig written before is used.
        assert_eq!(
            rebootstrap_kubelet_files(&kubelet, "https://api", &ca).unwrap(),
            KubeletRebootstrapped::ExistingBootstrap
        );
        assert!(bootstrap.exists());
        // Neither file: nothing to bootstrap kubelet with.
        std::fs::remove_file(&bootstrap).unwrap();
        let error = rebootstrap_kubelet_files(&kubelet, "https://api", &ca).unwrap_err();
        assert!(matches!(error, CertificateError::Missing(_)), "{error}");

        // A link as kubeconfig-real is not followed.
        let elsewhere = base.join("elsewhere");
        std::fs::write(&elsewhere, "x").unwrap();
        std::os::unix::fs::symlink(&elsewhere, &real).unwrap();
        let error = rebootstrap_kubelet_files(&kubelet, "https://api", &ca).unwrap_err();
        assert!(matches!(error, CertificateError::File(_)), "{error}");
        assert!(!bootstrap.exists());
    }
}
