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
use base64::engine::general_purpose::STANDARD;
use kube::config::Kubeconfig;

use crate::api::nodeagent::NodeAgentConfiguration;
use crate::kubeconfig::KubeconfigError;
use crate::kubeconfig::rules::{TokenRefused, trimmed_bearer_token};

use crate::agent::ports::paths::Paths;

/// The largest CA bundle read (all public roots of a distribution are about 200 KiB).
pub const MAX_CA_BYTES: u64 = 1024 * 1024;

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
pub use crate::agent::access::kubeconfigs::CaSource;

/// The most bytes of a credentials file read or written (a kubeconfig with a certificate
/// chain is a few kB).
pub const MAX_CREDENTIALS_BYTES: u64 = 256 * 1024;
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
    /// A file was refused or could not be read ([`read_named_file`]).
    #[error(transparent)]
    File(crate::safe_fs::SafeFsError),
    /// A token file holds no token that can be sent.
    #[error("{path} holds no usable bearer token")]
    Token {
        /// The file.
        path: String,
        /// What is wrong with it.
        #[source]
        problem: TokenRefused,
    },
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
        .map(|pem| format!("    certificate-authority-data: {}\n", STANDARD.encode(pem)))
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
    let kubeconfig = match source {
        Source::Kubeconfig(path) => read_kubeconfig(path, paths)?,
        Source::BootstrapToken(token_path) => {
            let server = server(config, "credentials/bootstrap-token")?;
            let ca = ca_source(config, paths, |path| path.exists());
            let token = read_token(token_path)?;
            crate::agent::access::kubeconfigs::bootstrap_kubeconfig(server, &ca, &token)
        }
        Source::TokenFile(token) => {
            server(config, "credentials/token")?;
            let ca = ca_bundle(config, paths)?;
            let yaml = token_kubeconfig(&config.api_server.server, ca.as_deref(), token);
            Kubeconfig::from_yaml(&yaml).map_err(|source| {
                CredentialsError::Kubeconfig(KubeconfigError::Read {
                    path: token.display().to_string(),
                    source,
                })
            })?
        }
    };
    let (Source::Kubeconfig(path) | Source::BootstrapToken(path) | Source::TokenFile(path)) =
        source;
    from_kubeconfig(kubeconfig, path, paths).await
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

/// The bootstrap token: whitespace around it trimmed, as gardener-node-agent does; a token
/// that still cannot be sent as a header (a line break inside it, say) is refused
/// ([`crate::kubeconfig::rules::trimmed_bearer_token`]).
pub fn read_token(path: &Path) -> Result<String, CredentialsError> {
    let bytes = crate::safe_fs::read_at_most(path, 4096)
        .map_err(|source| CredentialsError::Read {
            path: path.display().to_string(),
            source: std::io::Error::other(source),
        })?
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    trimmed_bearer_token(&text)
        .map(str::to_string)
        .map_err(|problem| CredentialsError::Token {
            path: path.display().to_string(),
            problem,
        })
}

/// The API server CA: `apiServer.caFile`, else `apiServer.caBundle`, else `cluster-ca.crt`.
fn ca_bundle(
    config: &NodeAgentConfiguration,
    paths: &Paths,
) -> Result<Option<Vec<u8>>, CredentialsError> {
    match ca_source(config, paths, |path| path.exists()) {
        CaSource::File(path) => read_named_file(Path::new(&path), paths, MAX_CA_BYTES).map(Some),
        CaSource::Data(pem) => Ok(Some(pem)),
        CaSource::System => Ok(None),
    }
}

/// The kubeconfig file at `path` ([`read_named_file`], at most [`MAX_CREDENTIALS_BYTES`]).
pub fn read_kubeconfig(path: &Path, paths: &Paths) -> Result<Kubeconfig, CredentialsError> {
    let bytes = read_named_file(path, paths, MAX_CREDENTIALS_BYTES)?;
    Kubeconfig::from_yaml(&String::from_utf8_lossy(&bytes)).map_err(|source| {
        CredentialsError::Kubeconfig(KubeconfigError::Read {
            path: path.display().to_string(),
            source,
        })
    })
}

/// The client configuration of `kubeconfig`, read from (or to be written to) `path`: the CA
/// files its clusters name are read here ([`read_named_file`], at most [`MAX_CA_BYTES`]) and
/// embedded, so kube-rs reads no file of its own but a token file; relative paths are taken
/// from `path`'s folder, as kube-rs takes them. Then [`crate::kubeconfig::load`].
pub async fn from_kubeconfig(
    mut kubeconfig: Kubeconfig,
    path: &Path,
    paths: &Paths,
) -> Result<kube::Config, CredentialsError> {
    let folder = path.parent().unwrap_or(Path::new("/"));
    for named in &mut kubeconfig.clusters {
        let Some(cluster) = named.cluster.as_mut() else {
            continue;
        };
        if let Some(file) = cluster.certificate_authority.take() {
            let pem = read_named_file(&named_path(folder, &file, paths), paths, MAX_CA_BYTES)?;
            cluster.certificate_authority_data = Some(STANDARD.encode(pem));
        }
    }
    for named in &mut kubeconfig.auth_infos {
        if let Some(file) = named.auth_info.as_mut().and_then(|a| a.token_file.as_mut()) {
            *file = folder.join(&*file).display().to_string();
        }
    }
    crate::kubeconfig::load(kubeconfig, &path.display().to_string())
        .await
        .map_err(CredentialsError::Kubeconfig)
}

/// The file `name` that a kubeconfig in `folder` names: relative to `folder`; inside the config
/// dir with `.` and `..` taken away by their names (no link there could make that differ from
/// the file system's view: links there are refused), elsewhere as the kernel resolves it.
fn named_path(folder: &Path, name: &str, paths: &Paths) -> PathBuf {
    let joined = folder.join(name);
    let plain = lexical(&joined);
    if plain.starts_with(paths.base()) {
        plain
    } else {
        joined
    }
}

/// `path` with `.` and `..` taken away by their names.
fn lexical(path: &Path) -> PathBuf {
    let mut plain = PathBuf::new();
    for component in path.components() {
        match component {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                plain.pop();
            }
            other => plain.push(other),
        }
    }
    plain
}

/// A file the credentials come from, at most `limit` bytes; anything but a regular file (a
/// FIFO, a device) is refused before it is opened, and the open does not block. Inside the
/// config dir (`paths.base()`, resolved at start) no link is followed, as for every file the
/// agent keeps there ([`crate::safe_fs::read_at_most`]). Elsewhere the path was named
/// explicitly — `--kubeconfig`, `clientConnection.kubeconfig`, `apiServer.caFile`, a
/// kubeconfig's `certificate-authority` — by whoever writes the agent's unit or configuration,
/// and links are followed ([`crate::safe_fs::read_following_links`]): a mounted ConfigMap's
/// files and a distribution's CA bundle (`/etc/ssl/certs/ca-certificates.crt`) are links.
pub fn read_named_file(
    path: &Path,
    paths: &Paths,
    limit: u64,
) -> Result<Vec<u8>, CredentialsError> {
    if path.starts_with(paths.base()) {
        crate::safe_fs::read_at_most(path, limit)
            .map_err(CredentialsError::File)?
            .ok_or_else(|| CredentialsError::Read {
                path: path.display().to_string(),
                source: std::io::ErrorKind::NotFound.into(),
            })
    } else {
        crate::safe_fs::read_following_links(path, limit).map_err(CredentialsError::File)
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

    /// A kubeconfig with a client certificate whose cluster names its CA with `ca` (a
    /// `certificate-authority` line or a `certificate-authority-data` one), followed by
    /// `padding` bytes of comment.
    fn kubeconfig_yaml(ca: &str, padding: usize) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["client".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster:\n    \
             server: https://127.0.0.1:1\n    {ca}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    \
             user: u\nusers:\n- name: u\n  user:\n    client-certificate-data: {}\n    \
             client-key-data: {}\n{}",
            STANDARD.encode(cert.pem()),
            STANDARD.encode(key.serialize_pem()),
            "#\n".repeat(padding / 2)
        )
    }

    fn ca_pem() -> String {
        rcgen::generate_simple_self_signed(vec!["ca".into()])
            .unwrap()
            .cert
            .pem()
    }

    /// [`client_config`] of `source` on a thread of its own: `None` when it has not returned
    /// within 10 s (a read blocks).
    fn load_within_10s(source: Source, paths: Paths) -> Option<Result<(), String>> {
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let loaded = runtime.block_on(client_config(
                &source,
                &NodeAgentConfiguration::default(),
                &paths,
            ));
            send.send(
                loaded
                    .map(|_| ())
                    .map_err(|error| crate::error_chain::printable(&error)),
            )
        });
        receive
            .recv_timeout(std::time::Duration::from_secs(10))
            .ok()
    }

    /// Issue #41 item 9: `credentials/kubeconfig` is read without following a link, at most
    /// 256 KiB; the CA file it names likewise (never a FIFO, at most 1 MiB); a kubeconfig and
    /// CA outside the config dir (`--kubeconfig`, named explicitly) through links, but as
    /// bounded and never from a FIFO.
    #[test]
    fn credentials_files_are_bounded_never_fifos_and_links_only_outside_the_config_dir() {
        let (_dir, root) = crate::safe_fs::tests::temp();
        let paths = Paths::new(root.join("config"));
        std::fs::create_dir_all(paths.credentials()).unwrap();
        let own = Source::Kubeconfig(paths.kubeconfig());
        let elsewhere = root.join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        let embedded = format!("certificate-authority-data: {}", STANDARD.encode(ca_pem()));

        // Loads as it is; through a link it is refused in the config dir.
        std::fs::write(paths.kubeconfig(), kubeconfig_yaml(&embedded, 0)).unwrap();
        assert_eq!(load_within_10s(own.clone(), paths.clone()), Some(Ok(())));
        std::fs::rename(paths.kubeconfig(), elsewhere.join("kubeconfig")).unwrap();
        std::os::unix::fs::symlink(elsewhere.join("kubeconfig"), paths.kubeconfig()).unwrap();
        let loaded = load_within_10s(own.clone(), paths.clone());
        assert!(
            matches!(&loaded, Some(Err(e)) if e.contains("is a symbolic link, not a regular file")),
            "{loaded:?}"
        );
        // ... and followed where it was named explicitly.
        let flag = Source::Kubeconfig(root.join("flag-kubeconfig"));
        std::os::unix::fs::symlink(elsewhere.join("kubeconfig"), root.join("flag-kubeconfig"))
            .unwrap();
        assert_eq!(load_within_10s(flag, paths.clone()), Some(Ok(())));
        std::fs::remove_file(paths.kubeconfig()).unwrap();

        // Over 256 KiB.
        std::fs::write(paths.kubeconfig(), kubeconfig_yaml(&embedded, 300 * 1024)).unwrap();
        let loaded = load_within_10s(own.clone(), paths.clone());
        assert!(
            matches!(&loaded, Some(Err(e)) if e.contains("is larger than 262144 bytes")),
            "{loaded:?}"
        );

        // The CA file it names: relative to the kubeconfig's folder, read here and embedded.
        let ca_line = "certificate-authority: ../cluster-ca.crt";
        std::fs::write(paths.kubeconfig(), kubeconfig_yaml(ca_line, 0)).unwrap();
        std::fs::write(paths.cluster_ca(), ca_pem()).unwrap();
        assert_eq!(load_within_10s(own.clone(), paths.clone()), Some(Ok(())));
        std::fs::write(paths.cluster_ca(), "#\n".repeat(600 * 1024)).unwrap();
        let loaded = load_within_10s(own.clone(), paths.clone());
        assert!(
            matches!(&loaded, Some(Err(e)) if e.contains("is larger than 1048576 bytes")),
            "{loaded:?}"
        );
        std::fs::remove_file(paths.cluster_ca()).unwrap();
        crate::safe_fs::tests::mkfifo(&paths.cluster_ca());
        let loaded = load_within_10s(own.clone(), paths.clone());
        assert!(
            matches!(&loaded, Some(Err(e)) if e.contains("is a FIFO, not a regular file")),
            "a FIFO as the CA file: {loaded:?}"
        );

        // A FIFO as --kubeconfig.
        let fifo = root.join("fifo-kubeconfig");
        crate::safe_fs::tests::mkfifo(&fifo);
        let loaded = load_within_10s(Source::Kubeconfig(fifo), paths.clone());
        assert!(
            matches!(&loaded, Some(Err(e)) if e.contains("is a FIFO, not a regular file")),
            "a FIFO as --kubeconfig: {loaded:?}"
        );
    }

    /// Issue #41 item 3: the bootstrap token is trimmed as GNA trims it; one with a line break
    /// inside is refused with the file and the place, not the token.
    #[test]
    fn the_bootstrap_token_is_trimmed_and_a_broken_one_refused() {
        let (_dir, root) = crate::safe_fs::tests::temp();
        let token = root.join("bootstrap-token");
        std::fs::write(&token, "  abcdef.0123456789abcdef\n").unwrap();
        assert_eq!(read_token(&token).unwrap(), "abcdef.0123456789abcdef");
        std::fs::write(&token, "abcdef.01234\n56789abcdef\n").unwrap();
        let error = crate::error_chain::printable(&read_token(&token).unwrap_err());
        assert_eq!(
            error,
            format!(
                "{} holds no usable bearer token: the token has a line break at byte 12 of 24: \
                 a bearer token is one word of visible ASCII characters (whitespace around the \
                 token in a file is trimmed, inside it is refused)",
                token.display()
            )
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
