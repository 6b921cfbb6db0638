//! Building a [`kube::Client`] from a kubeconfig file or the in-cluster environment, and
//! writing the admin kubeconfig of the local control plane.
//!
//! Every client the binary builds goes through [`build`], which sets the `User-Agent`
//! `gardener-extension-node/<version> (<subcommand>)`: an API server's audit log then tells
//! the operator's, the agent's and the local environment's requests apart from each other and
//! from other clients (kube-rs sends no `User-Agent` of its own).
//!
//! Every kubeconfig the binary loads is checked by [`rules`] before kube-rs sees it: a
//! component's own kubeconfig through [`load`] (the operator's `--kubeconfig`/`$KUBECONFIG`,
//! the agent's credentials, the local environment), a shoot's generic token kubeconfig through
//! [`shoot_endpoint`] and [`token_config`], which build the client from nothing but the
//! server, the CA and our token. So no kubeconfig makes this process run a program.

pub mod rules;
pub mod x509;

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kube::config::{
    AuthInfo, Cluster, Context, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster,
    NamedContext,
};

pub use rules::{Endpoint, Refused};

/// Errors while loading client configuration.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    /// The kubeconfig file could not be read or parsed.
    #[error("reading kubeconfig {path}")]
    Read {
        /// The file.
        path: String,
        /// Cause.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The kubeconfig file could not be read (missing, a FIFO, too large, unreadable).
    #[error("reading kubeconfig")]
    File(#[source] crate::safe_fs::SafeFsError),
    /// Neither a kubeconfig (`--kubeconfig`, `$KUBECONFIG`, `~/.kube/config`) nor the
    /// in-cluster environment is there.
    #[error(
        "no client configuration: no --kubeconfig, $KUBECONFIG unset, no ~/.kube/config, and \
         not running in a pod"
    )]
    Missing(#[source] kube::config::InClusterError),
    /// The kubeconfig does not produce a client configuration.
    #[error("kubeconfig {path} yields no usable client configuration")]
    Custom {
        /// The file.
        path: String,
        /// Cause.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The kubeconfig sets fields [`rules`] refuses.
    #[error("kubeconfig {path} is refused")]
    Refused {
        /// The file (or the Secret) it came from.
        path: String,
        /// Cause.
        #[source]
        source: Refused,
    },
    /// The client could not be built (TLS set-up).
    #[error("building the API client")]
    Client(#[source] kube::Error),
}

/// Loads client configuration from `path`, or infers it when `path` is `None`: from
/// `$KUBECONFIG` or `~/.kube/config` when one reads, else in-cluster (as
/// [`kube::Config::infer`] does). A kubeconfig goes through [`load`].
pub async fn config(path: Option<&Path>) -> Result<kube::Config, KubeconfigError> {
    match path {
        Some(path) => from_file(path).await,
        None => match Kubeconfig::read() {
            Ok(kubeconfig) => {
                let mut config = load(kubeconfig, &inferred_path()).await?;
                config.apply_debug_overrides();
                Ok(config)
            }
            // A kubeconfig that is there but does not read is reported as such (one path:
            // through `from_file`, whose errors name it plainly); none at all falls back to
            // in-cluster, as `kube::Config::infer` does.
            Err(source) => match kubeconfig_named() {
                Named::One(path) => from_file(&path).await,
                Named::Several => Err(KubeconfigError::Read {
                    path: inferred_path(),
                    source,
                }),
                Named::None => kube::Config::incluster().map_err(KubeconfigError::Missing),
            },
        },
    }
}

/// The largest kubeconfig file read: far more than any kubeconfig with embedded certificates.
pub const MAX_KUBECONFIG_BYTES: u64 = 1024 * 1024;

/// Client configuration from the kubeconfig at `path`, read bounded and through links (a
/// mounted Secret's file is a link), then [`load`]ed.
async fn from_file(path: &Path) -> Result<kube::Config, KubeconfigError> {
    let display = path.display().to_string();
    let bytes = crate::safe_fs::read_following_links(path, MAX_KUBECONFIG_BYTES)
        .map_err(KubeconfigError::File)?;
    let text = String::from_utf8_lossy(&bytes);
    let kubeconfig = Kubeconfig::from_yaml(&text).map_err(|source| KubeconfigError::Read {
        path: display.clone(),
        source,
    })?;
    load(kubeconfig, &display).await
}

/// Which kubeconfig a run without `--kubeconfig` names.
enum Named {
    /// `$KUBECONFIG` with one path, or `~/.kube/config` that exists.
    One(std::path::PathBuf),
    /// `$KUBECONFIG` with several paths (kube-rs merges them; its error speaks for itself).
    Several,
    /// Neither: the in-cluster configuration is next.
    None,
}

/// The kubeconfig a run without `--kubeconfig` reads ([`Named`]).
fn kubeconfig_named() -> Named {
    match std::env::var_os("KUBECONFIG").filter(|value| !value.is_empty()) {
        Some(value) if value.to_string_lossy().contains(':') => Named::Several,
        Some(value) => Named::One(value.into()),
        None => match std::env::var_os("HOME") {
            Some(home) => {
                let path = std::path::PathBuf::from(home).join(".kube/config");
                if path.exists() {
                    Named::One(path)
                } else {
                    Named::None
                }
            }
            None => Named::None,
        },
    }
}

/// How [`config`] names an inferred kubeconfig in errors.
fn inferred_path() -> String {
    std::env::var("KUBECONFIG")
        .ok()
        .filter(|value| !value.is_empty())
        .unwrap_or_else(|| "~/.kube/config".into())
}

/// Client configuration from a component's own kubeconfig (read from `path`, which errors
/// name), after [`rules::check_component`].
pub async fn load(kubeconfig: Kubeconfig, path: &str) -> Result<kube::Config, KubeconfigError> {
    rules::check_component(&kubeconfig).map_err(|source| KubeconfigError::Refused {
        path: path.to_string(),
        source,
    })?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|source| KubeconfigError::Custom {
            path: path.to_string(),
            source,
        })
}

/// The server and CA of a shoot's generic token kubeconfig (`yaml`, from `path`, which errors
/// name), after [`rules::shoot_endpoint`].
pub fn shoot_endpoint(yaml: &str, path: &str) -> Result<Endpoint, KubeconfigError> {
    let kubeconfig = Kubeconfig::from_yaml(yaml).map_err(|source| KubeconfigError::Read {
        path: path.to_string(),
        source,
    })?;
    rules::shoot_endpoint(&kubeconfig).map_err(|source| KubeconfigError::Refused {
        path: path.to_string(),
        source,
    })
}

/// Client configuration for exactly `endpoint` with the bearer token `token`: nothing else of
/// the kubeconfig `endpoint` came from (`path`, which errors name) reaches the client.
pub async fn token_config(
    endpoint: &Endpoint,
    token: &str,
    path: &str,
) -> Result<kube::Config, KubeconfigError> {
    const NAME: &str = "shoot";
    let kubeconfig = Kubeconfig {
        clusters: vec![NamedCluster {
            name: NAME.into(),
            cluster: Some(Cluster {
                server: Some(endpoint.server.clone()),
                certificate_authority_data: Some(endpoint.certificate_authority_data.clone()),
                ..Cluster::default()
            }),
            ..NamedCluster::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: NAME.into(),
            auth_info: Some(AuthInfo {
                token: Some(token.to_string().into()),
                ..AuthInfo::default()
            }),
            ..NamedAuthInfo::default()
        }],
        contexts: vec![NamedContext {
            name: NAME.into(),
            context: Some(Context {
                cluster: NAME.into(),
                user: Some(NAME.into()),
                ..Context::default()
            }),
            ..NamedContext::default()
        }],
        current_context: Some(NAME.into()),
        ..Kubeconfig::default()
    };
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|source| KubeconfigError::Custom {
            path: path.to_string(),
            source,
        })
}

/// Builds a client for `subcommand` (see [`build`]); the configuration as [`config`] loads it.
pub async fn client(
    path: Option<&Path>,
    subcommand: &str,
) -> Result<kube::Client, KubeconfigError> {
    let config = config(path).await?;
    build(config, subcommand).map_err(KubeconfigError::Client)
}

/// `gardener-extension-node/<version> (<subcommand>)` (pure).
pub fn user_agent(subcommand: &str) -> String {
    format!(
        "gardener-extension-node/{} ({subcommand})",
        env!("CARGO_PKG_VERSION")
    )
}

/// Builds a client from `config` that sends [`user_agent`] with every request (replacing a
/// `User-Agent` the configuration may carry). Fails where [`kube::Client::try_from`] does
/// (TLS set-up), on a subcommand name that is no valid header value, and on a bearer token
/// that is no valid header value ([`rules::check_bearer_token`], as
/// [`kube::Error::Service`]): kube-rs would panic on that one (`token is not valid header`),
/// so every client of the binary — the agent's, the bootstrap's, the operator's shoot
/// clients — gets an error instead.
pub fn build(mut config: kube::Config, subcommand: &str) -> Result<kube::Client, kube::Error> {
    if let Some(token) = &config.auth_info.token {
        rules::check_bearer_token(secrecy::ExposeSecret::expose_secret(token))
            .map_err(|problem| kube::Error::Service(Box::new(problem)))?;
    }
    let value = http::HeaderValue::from_str(&user_agent(subcommand))
        .map_err(|e| kube::Error::HttpError(http::Error::from(e)))?;
    config
        .headers
        .retain(|(name, _)| name != http::header::USER_AGENT);
    config.headers.push((http::header::USER_AGENT, value));
    kube::Client::try_from(config)
}

/// Renders a kubeconfig that authenticates with a client certificate (PEM inputs).
pub fn render_client_cert_kubeconfig(
    server: &str,
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: admin\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\ncontexts:\n- name: local\n  context:\n    cluster: local\n    user: admin\ncurrent-context: local\n",
        ca = STANDARD.encode(ca_pem),
        cert = STANDARD.encode(cert_pem),
        key = STANDARD.encode(key_pem),
    )
}

/// Renders a kubeconfig that authenticates with a bearer token.
pub fn render_token_kubeconfig(server: &str, ca_pem: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: user\n  user:\n    token: {token}\ncontexts:\n- name: local\n  context:\n    cluster: local\n    user: user\ncurrent-context: local\n",
        ca = STANDARD.encode(ca_pem),
    )
}

/// Parses a rendered kubeconfig into a client configuration (through [`load`]).
pub async fn config_from_yaml(yaml: &str) -> Result<kube::Config, KubeconfigError> {
    let path = "<inline>";
    let kubeconfig = Kubeconfig::from_yaml(yaml).map_err(|source| KubeconfigError::Read {
        path: path.into(),
        source,
    })?;
    load(kubeconfig, path).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error_chain::chain;

    #[test]
    fn the_user_agent_names_version_and_subcommand() {
        assert_eq!(
            user_agent("operator"),
            format!(
                "gardener-extension-node/{} (operator)",
                env!("CARGO_PKG_VERSION")
            )
        );
        assert!(http::HeaderValue::from_str(&user_agent("local-env")).is_ok());
    }

    /// A kubeconfig file in `dir` whose user `name` has the fields `user` (YAML, indented as
    /// user fields); its CA is a fresh self-signed certificate.
    fn kubeconfig_file(dir: &Path, name: &str, user: &str) -> std::path::PathBuf {
        let ca = rcgen::generate_simple_self_signed(vec!["ca".into()]).unwrap();
        let yaml = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster:\n    \
             server: https://127.0.0.1:1\n    certificate-authority-data: {}\ncontexts:\n- name: c\n  \
             context:\n    cluster: c\n    user: {name}\nusers:\n- name: {name}\n  user:\n{user}",
            STANDARD.encode(ca.cert.pem())
        );
        let path = dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&path, yaml).unwrap();
        path
    }

    /// Issue #25 item 7: an X.509 v1 client certificate gets one clear message instead of
    /// rustls's `UnsupportedCertVersion`, three times over.
    #[tokio::test]
    async fn an_x509_v1_client_certificate_is_named_once() {
        let dir = tempfile::tempdir().unwrap();
        let certificate = include_str!("../test/fixtures/kubeconfig/x509-v1-client.crt");
        // Any key does: rustls looks at the certificate's version before comparing keys.
        let key = rcgen::KeyPair::generate().unwrap().serialize_pem();
        let user = format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            STANDARD.encode(certificate),
            STANDARD.encode(key)
        );
        let path = kubeconfig_file(dir.path(), "v1-client", &user);
        let Err(error) = client(Some(&path), "operator").await else {
            panic!("the kubeconfig was accepted");
        };
        let expected = format!(
            "kubeconfig {} is refused: client certificate of kubeconfig user \"v1-client\" is \
             X.509 v1; rustls accepts only v3 certificates: re-issue it as v3",
            path.display()
        );
        assert_eq!(chain(&error), expected);
        assert_eq!(
            crate::cli::error_report(&anyhow::Error::from(error), false),
            format!("Error: {expected}")
        );
    }

    /// Issue #41 item 3: a token that is no header value is an error of `build`, not kube-rs's
    /// panic, for every way a token reaches a client configuration.
    #[tokio::test]
    async fn a_token_that_is_no_header_value_is_an_error_not_a_panic() {
        let ca = rcgen::generate_simple_self_signed(vec!["ca".into()]).unwrap();
        let endpoint = Endpoint {
            server: "https://127.0.0.1:1".into(),
            certificate_authority_data: STANDARD.encode(ca.cert.pem()),
        };
        let config = token_config(&endpoint, "abc\ndef", "Secret ns/name")
            .await
            .unwrap();
        let built =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| build(config, "operator")));
        let Ok(Err(error)) = built else {
            panic!("not an error: {:?}", built.map(|b| b.map(|_| "a client")));
        };
        assert_eq!(
            chain(&error),
            "ServiceError: the token has a line break at byte 3 of 7: a bearer token is one word \
             of visible ASCII characters (whitespace around the token in a file is trimmed, \
             inside it is refused)"
        );
        let good = token_config(&endpoint, "abcdef.0123456789abcdef", "Secret ns/name")
            .await
            .unwrap();
        assert!(build(good, "operator").is_ok());
    }

    #[tokio::test]
    async fn a_shoot_client_gets_server_ca_and_token_only() {
        let ca = rcgen::generate_simple_self_signed(vec!["ca".into()]).unwrap();
        let endpoint = Endpoint {
            server: "https://api.shoot.example:6443".into(),
            certificate_authority_data: STANDARD.encode(ca.cert.pem()),
        };
        let config = token_config(&endpoint, "the-token", "Secret ns/name")
            .await
            .unwrap();
        assert_eq!(config.cluster_url.host(), Some("api.shoot.example"));
        assert_eq!(config.cluster_url.port_u16(), Some(6443));
        assert_eq!(config.root_cert.as_ref().map(Vec::len), Some(1));
        assert!(!config.accept_invalid_certs);
        assert_eq!(config.proxy_url, None);
        let auth = serde_json::to_value(&config.auth_info).unwrap();
        let fields: Vec<&str> = auth
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(fields, ["token"]);
        assert_eq!(auth["token"], "the-token");
    }
}
