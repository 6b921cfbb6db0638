//! The kubeconfigs the agent writes and reads its credentials through, in gardener-node-agent's
//! layout: its own (client certificate), the bootstrap one it asks for its first certificate
//! with, and kubelet's bootstrap kubeconfig. Pure builders; [`crate::agent::access::credentials`]
//! and [`crate::agent::client_certificate`] use them.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kube::config::{
    AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};

/// The names of the cluster, user and context of the kubeconfig (GNA's).
pub const KUBECONFIG_NAME: &str = "node-agent";
/// The names in kubelet's bootstrap kubeconfig (GNA's).
pub const KUBELET_BOOTSTRAP_NAME: &str = "kubelet-bootstrap";
/// The names in the kubeconfig the agent asks for its first certificate with.
pub const AGENT_BOOTSTRAP_NAME: &str = "node-agent-bootstrap";
/// How a kubeconfig names the API server's CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaSource {
    /// A file (GNA writes `certificate-authority: <config-dir>/cluster-ca.crt`, so a CA
    /// rotation that rewrites the file reaches the kubeconfig).
    File(String),
    /// The PEM itself.
    Data(Vec<u8>),
    /// None: the system's roots.
    System,
}

/// The agent's kubeconfig with the certificate and key (PEM) embedded, GNA's layout.
pub fn kubeconfig(server: &str, ca: &CaSource, cert_pem: &str, key_pem: &str) -> Kubeconfig {
    let auth = AuthInfo {
        client_certificate_data: Some(STANDARD.encode(cert_pem)),
        client_key_data: Some(STANDARD.encode(key_pem).into()),
        ..AuthInfo::default()
    };
    named_kubeconfig(KUBECONFIG_NAME, server, ca, auth)
}

/// Kubelet's bootstrap kubeconfig: the bootstrap token (trimmed), GNA's layout.
pub fn kubelet_bootstrap_kubeconfig(server: &str, ca: &CaSource, token: &str) -> Kubeconfig {
    named_kubeconfig(KUBELET_BOOTSTRAP_NAME, server, ca, token_auth(token))
}

/// The kubeconfig the agent asks for its first certificate with: the bootstrap token.
pub fn bootstrap_kubeconfig(server: &str, ca: &CaSource, token: &str) -> Kubeconfig {
    named_kubeconfig(AGENT_BOOTSTRAP_NAME, server, ca, token_auth(token))
}

fn token_auth(token: &str) -> AuthInfo {
    AuthInfo {
        token: Some(token.trim().to_string().into()),
        ..AuthInfo::default()
    }
}

pub(crate) fn named_kubeconfig(
    name: &str,
    server: &str,
    ca: &CaSource,
    auth: AuthInfo,
) -> Kubeconfig {
    let server = if server.contains("://") {
        server.to_string()
    } else {
        format!("https://{server}")
    };
    let (file, data) = match ca {
        CaSource::File(path) => (Some(path.clone()), None),
        CaSource::Data(pem) => (None, Some(STANDARD.encode(pem))),
        CaSource::System => (None, None),
    };
    Kubeconfig {
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        clusters: vec![NamedCluster {
            name: name.into(),
            cluster: Some(Cluster {
                server: Some(server),
                certificate_authority: file,
                certificate_authority_data: data,
                ..Cluster::default()
            }),
            other: Default::default(),
        }],
        auth_infos: vec![NamedAuthInfo {
            name: name.into(),
            auth_info: Some(auth),
            other: Default::default(),
        }],
        contexts: vec![NamedContext {
            name: name.into(),
            context: Some(Context {
                cluster: name.into(),
                user: Some(name.into()),
                ..Context::default()
            }),
            other: Default::default(),
        }],
        current_context: Some(name.into()),
        ..Kubeconfig::default()
    }
}
