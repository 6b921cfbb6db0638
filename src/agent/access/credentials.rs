//! How the agent authenticates to the shoot's API server.
//!
//! Supported, in this order of precedence:
//!
//! 1. `--kubeconfig` (or `$KUBECONFIG`);
//! 2. `clientConnection.kubeconfig` of the configuration;
//! 3. `<config-dir>/credentials/kubeconfig` — where gardener-node-agent keeps the kubeconfig of
//!    its client certificate, and where a provisioning script can put one;
//! 4. `<config-dir>/credentials/token` — a bearer token file (gardener-node-agent's pre-v1.108
//!    credentials), used with `apiServer.server` and the CA from `apiServer.caFile`,
//!    `apiServer.caBundle` or `<config-dir>/cluster-ca.crt`. The file is re-read while the
//!    agent runs, so a token rotated by the token sync takes effect without a restart;
//! 5. `<config-dir>/credentials/bootstrap-token` alone — a new machine: the token is traded
//!    for a client certificate and `credentials/kubeconfig` is written
//!    ([`crate::agent::client_certificate`]), which is then path 3.
//!
//! Whichever it is, the kubeconfig goes through [`crate::kubeconfig::load`]: its users may
//! authenticate with embedded client certificate and key, a token, a token file or user name
//! and password, never with a program (`exec`, `auth-provider`), certificate files or
//! impersonation — gardener-node-agent's own rule for its kubeconfig.

use std::path::{Path, PathBuf};

use base64::Engine;
use kube::config::Kubeconfig;

use crate::api::nodeagent::NodeAgentConfiguration;
use crate::kubeconfig::KubeconfigError;

use crate::agent::ports::paths::Paths;

/// Where the credentials come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A kubeconfig file.
    Kubeconfig(PathBuf),
    /// A bearer token file plus `apiServer` from the configuration.
    TokenFile(PathBuf),
    /// Only a bootstrap token: a client certificate is to be asked for first.
    BootstrapToken(PathBuf),
}

/// How a kubeconfig names the API server's CA (defined beside the kubeconfigs that carry it).
pub use crate::agent::client_certificate::rules::CaSource;

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// Nothing usable.
    #[error(
        "no credentials: none of --kubeconfig, clientConnection.kubeconfig, {kubeconfig}, {token}, {bootstrap_token} exists"
    )]
    Missing {
        /// The kubeconfig path looked at.
        kubeconfig: String,
        /// The token path looked at.
        token: String,
        /// The bootstrap token path looked at.
        bootstrap_token: String,
    },
    /// `apiServer.server` is empty but a token file or a bootstrap token needs it.
    #[error("{0} needs apiServer.server in the configuration")]
    NoServer(&'static str),
    /// A file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The kubeconfig does not load, or is refused.
    #[error("loading the credentials")]
    Kubeconfig(#[source] crate::kubeconfig::KubeconfigError),
}

/// Chooses the credentials by the precedence in the module docs; `exists` tells which files
/// are there.
pub fn choose(
    flag: Option<&Path>,
    configured: &str,
    paths: &Paths,
    exists: impl Fn(&Path) -> bool,
) -> Result<Source, CredentialsError> {
    if let Some(flag) = flag {
        return Ok(Source::Kubeconfig(flag.to_path_buf()));
    }
    if !configured.is_empty() {
        return Ok(Source::Kubeconfig(PathBuf::from(configured)));
    }
    let kubeconfig = paths.kubeconfig();
    if exists(&kubeconfig) {
        return Ok(Source::Kubeconfig(kubeconfig));
    }
    let token = paths.token();
    if exists(&token) {
        return Ok(Source::TokenFile(token));
    }
    let bootstrap = paths.bootstrap_token();
    if exists(&bootstrap) {
        return Ok(Source::BootstrapToken(bootstrap));
    }
    Err(CredentialsError::Missing {
        kubeconfig: kubeconfig.display().to_string(),
        token: token.display().to_string(),
        bootstrap_token: bootstrap.display().to_string(),
    })
}

/// The kubeconfig (YAML) for a token file: server from the configuration, CA inline.
pub fn token_kubeconfig(server: &str, ca_pem: Option<&[u8]>, token_file: &Path) -> String {
    let server = if server.contains("://") {
        server.to_string()
    } else {
        format!("https://{server}")
    };
    let ca = ca_pem
        .map(|pem| {
            format!(
                "    certificate-authority-data: {}\n",
                base64::engine::general_purpose::STANDARD.encode(pem)
            )
        })
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: node-agent\n  cluster:\n    server: {server}\n{ca}users:\n- name: node-agent\n  user:\n    tokenFile: {}\ncontexts:\n- name: node-agent\n  context:\n    cluster: node-agent\n    user: node-agent\ncurrent-context: node-agent\n",
        token_file.display()
    )
}

/// Builds the client configuration from `source`.
pub async fn client_config(
    source: &Source,
    config: &NodeAgentConfiguration,
    paths: &Paths,
) -> Result<kube::Config, CredentialsError> {
    let (kubeconfig, path) = match source {
        Source::Kubeconfig(path) => {
            let display = path.display().to_string();
            let kubeconfig = Kubeconfig::read_from(path).map_err(|source| {
                CredentialsError::Kubeconfig(KubeconfigError::Read {
                    path: display.clone(),
                    source,
                })
            })?;
            (kubeconfig, display)
        }
        Source::BootstrapToken(token_path) => {
            let server = server(config, "credentials/bootstrap-token")?;
            let ca = ca_source(config, paths, |path| path.exists());
            let token = read_token(token_path)?;
            let kubeconfig =
                crate::agent::client_certificate::rules::bootstrap_kubeconfig(server, &ca, &token);
            (kubeconfig, token_path.display().to_string())
        }
        Source::TokenFile(token) => {
            server(config, "credentials/token")?;
            let ca = ca_bundle(config, paths)?;
            let yaml = token_kubeconfig(&config.api_server.server, ca.as_deref(), token);
            let display = token.display().to_string();
            let kubeconfig = Kubeconfig::from_yaml(&yaml).map_err(|source| {
                CredentialsError::Kubeconfig(KubeconfigError::Read {
                    path: display.clone(),
                    source,
                })
            })?;
            (kubeconfig, display)
        }
    };
    crate::kubeconfig::load(kubeconfig, &path)
        .await
        .map_err(CredentialsError::Kubeconfig)
}

/// `apiServer.server`, which `what` needs.
pub fn server<'a>(
    config: &'a NodeAgentConfiguration,
    what: &'static str,
) -> Result<&'a str, CredentialsError> {
    match config.api_server.server.as_str() {
        "" => Err(CredentialsError::NoServer(what)),
        server => Ok(server),
    }
}

/// How the agent's kubeconfigs name the CA: `apiServer.caFile`, else `apiServer.caBundle`,
/// else `cluster-ca.crt` when it `exists`, else the system's roots.
pub fn ca_source(
    config: &NodeAgentConfiguration,
    paths: &Paths,
    exists: impl Fn(&Path) -> bool,
) -> CaSource {
    if let Some(file) = config
        .api_server
        .ca_file
        .as_deref()
        .filter(|f| !f.is_empty())
    {
        return CaSource::File(file.to_string());
    }
    if let Some(bundle) = &config.api_server.ca_bundle {
        return CaSource::Data(bundle.0.clone());
    }
    let default = paths.cluster_ca();
    if exists(&default) {
        return CaSource::File(default.display().to_string());
    }
    CaSource::System
}

/// The bootstrap token, trimmed.
pub fn read_token(path: &Path) -> Result<String, CredentialsError> {
    let bytes = crate::safe_fs::read_at_most(path, 4096)
        .map_err(|source| CredentialsError::Read {
            path: path.display().to_string(),
            source: std::io::Error::other(source),
        })?
        .unwrap_or_default();
    Ok(String::from_utf8_lossy(&bytes).trim().to_string())
}

/// The API server CA: `apiServer.caFile`, else `apiServer.caBundle`, else `cluster-ca.crt`.
fn ca_bundle(
    config: &NodeAgentConfiguration,
    paths: &Paths,
) -> Result<Option<Vec<u8>>, CredentialsError> {
    match ca_source(config, paths, |path| path.exists()) {
        CaSource::File(path) => std::fs::read(&path)
            .map(Some)
            .map_err(|source| CredentialsError::Read { path, source }),
        CaSource::Data(pem) => Ok(Some(pem)),
        CaSource::System => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn choose_with(
        flag: Option<&str>,
        configured: &str,
        present: &[&str],
    ) -> Result<Source, CredentialsError> {
        let paths = Paths::new("/var/lib/gardener-node-agent");
        let present: BTreeSet<PathBuf> = present
            .iter()
            .map(|name| paths.credentials().join(name))
            .collect();
        choose(flag.map(Path::new), configured, &paths, |path| {
            present.contains(path)
        })
    }

    #[test]
    fn precedence() {
        let all = ["kubeconfig", "token", "bootstrap-token"];
        assert_eq!(
            choose_with(Some("/k"), "/c", &all).unwrap(),
            Source::Kubeconfig("/k".into())
        );
        assert_eq!(
            choose_with(None, "/c", &all).unwrap(),
            Source::Kubeconfig("/c".into())
        );
        assert_eq!(
            choose_with(None, "", &all).unwrap(),
            Source::Kubeconfig("/var/lib/gardener-node-agent/credentials/kubeconfig".into())
        );
        assert_eq!(
            choose_with(None, "", &["token", "bootstrap-token"]).unwrap(),
            Source::TokenFile("/var/lib/gardener-node-agent/credentials/token".into())
        );
        assert_eq!(
            choose_with(None, "", &["bootstrap-token"]).unwrap(),
            Source::BootstrapToken(
                "/var/lib/gardener-node-agent/credentials/bootstrap-token".into()
            )
        );
        assert!(matches!(
            choose_with(None, "", &[]),
            Err(CredentialsError::Missing { .. })
        ));
    }

    /// Issue #26 item 1, on the node: a kubeconfig that names a program is refused before
    /// anything could run it.
    #[tokio::test]
    async fn a_kubeconfig_with_a_program_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster:\n    \
             server: https://127.0.0.1:1\ncontexts:\n- name: c\n  context:\n    cluster: c\n    \
             user: node-agent\nusers:\n- name: node-agent\n  user:\n    exec:\n      \
             apiVersion: client.authentication.k8s.io/v1\n      command: /bin/true\n",
        )
        .unwrap();
        let paths = Paths::new(dir.path());
        let error = client_config(
            &Source::Kubeconfig(path.clone()),
            &NodeAgentConfiguration::default(),
            &paths,
        )
        .await
        .unwrap_err();
        let text = crate::error_chain::printable(&error);
        assert!(
            text.contains(&format!(
                "kubeconfig {} is refused: user \"node-agent\" sets exec",
                path.display()
            )),
            "{text}"
        );
    }

    #[tokio::test]
    async fn token_file_kubeconfig_loads() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "abc").unwrap();
        let yaml = token_kubeconfig("api.example:6443", Some(b"not-a-real-pem"), &token);
        assert!(
            yaml.contains("server: https://api.example:6443\n"),
            "{yaml}"
        );
        let kubeconfig = Kubeconfig::from_yaml(&yaml).unwrap();
        assert_eq!(
            kubeconfig.auth_infos[0]
                .auth_info
                .as_ref()
                .unwrap()
                .token_file
                .as_deref(),
            Some(token.to_str().unwrap())
        );
        // The rendered kubeconfig passes the component rule and loads.
        let mut config = NodeAgentConfiguration::default();
        config.api_server.server = "api.example:6443".into();
        let ca = rcgen::generate_simple_self_signed(vec!["ca".into()]).unwrap();
        config.api_server.ca_bundle = Some(k8s_openapi::ByteString(ca.cert.pem().into_bytes()));
        let loaded = client_config(
            &Source::TokenFile(token.clone()),
            &config,
            &Paths::new(dir.path()),
        )
        .await
        .unwrap();
        assert_eq!(loaded.cluster_url.host(), Some("api.example"));
    }
}
