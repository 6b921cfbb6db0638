//! Building a [`kube::Client`] from a kubeconfig file or the in-cluster environment, and
//! writing the admin kubeconfig of the local control plane.
//!
//! Every client the binary builds goes through [`build`], which sets the `User-Agent`
//! `gardener-extension-node/<version> (<subcommand>)`: an API server's audit log then tells
//! the operator's, the agent's and the local environment's requests apart from each other and
//! from other clients (kube-rs sends no `User-Agent` of its own).

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kube::config::{KubeConfigOptions, Kubeconfig};

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
    /// The configuration (file or in-cluster) is incomplete or invalid.
    #[error("loading client configuration")]
    Config(#[source] kube::config::InferConfigError),
    /// The kubeconfig does not produce a client configuration.
    #[error("kubeconfig {path} yields no usable client configuration")]
    Custom {
        /// The file.
        path: String,
        /// Cause.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The client could not be built (TLS set-up).
    #[error("building the API client")]
    Client(#[source] kube::Error),
}

/// Loads client configuration from `path`, or infers it (in-cluster, then `$KUBECONFIG`)
/// when `path` is `None`.
pub async fn config(path: Option<&Path>) -> Result<kube::Config, KubeconfigError> {
    match path {
        Some(path) => {
            let display = path.display().to_string();
            let kubeconfig =
                Kubeconfig::read_from(path).map_err(|source| KubeconfigError::Read {
                    path: display.clone(),
                    source,
                })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|source| KubeconfigError::Custom {
                    path: display,
                    source,
                })
        }
        None => kube::Config::infer().await.map_err(KubeconfigError::Config),
    }
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
/// `User-Agent` the configuration may carry). Fails only where [`kube::Client::try_from`]
/// does (TLS set-up), or on a subcommand name that is no valid header value.
pub fn build(mut config: kube::Config, subcommand: &str) -> Result<kube::Client, kube::Error> {
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

/// Parses a rendered kubeconfig into a client configuration.
pub async fn config_from_yaml(yaml: &str) -> Result<kube::Config, KubeconfigError> {
    let kubeconfig = Kubeconfig::from_yaml(yaml).map_err(|source| KubeconfigError::Read {
        path: "<inline>".into(),
        source,
    })?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|source| KubeconfigError::Custom {
            path: "<inline>".into(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
