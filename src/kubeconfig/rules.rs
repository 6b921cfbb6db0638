//! What a kubeconfig may contain before [`super`] builds a client from it (pure).
//!
//! A kubeconfig can make the process that loads it run a program (`exec`, `auth-provider`
//! with `cmd-path`), read files (`client-certificate`, `client-key`), or act as someone else
//! (`as`, `as-groups`, …). Whoever may write the kubeconfig would then act with the rights of
//! this process: for the operator, anyone who may write a Secret in a shoot namespace. So
//! every kubeconfig the binary loads is held against an allow-list first:
//!
//! - [`check_component`]: a component's own kubeconfig (the operator's `--kubeconfig` or
//!   `$KUBECONFIG`, the agent's credentials) — its users may authenticate with embedded client
//!   certificate and key, a token, a token file, or user name and password. This is the rule
//!   gardener's own components apply (`ValidateConfigWithAllowList` in
//!   `pkg/client/kubernetes/client.go`, with `tokenFile` allowed). Cluster fields are not
//!   restricted (they run nothing and act as nobody).
//! - [`shoot_endpoint`]: the generic token kubeconfig of a shoot namespace, from which the
//!   operator takes nothing but its cluster's `server` and `certificate-authority-data` (the
//!   token comes from our own access Secret). Any other field, in any cluster or user, is
//!   refused, so that a changed Secret fails loudly instead of being half-used.
//!
//! Both also refuse an embedded client certificate that is not X.509 v3 ([`super::x509`]),
//! naming the user, because rustls would refuse it later with a message that does not.
//! [`check_component`] also refuses a `token` that cannot be an `Authorization` header
//! ([`check_bearer_token`]): kube-rs would panic on it when the client is built.
//!
//! [`check_bearer_token`] is the one rule for a bearer token, wherever one becomes a header:
//! the kubeconfigs above, the agent's bootstrap token (trimmed first, as gardener-node-agent
//! trims it) and every client [`super::build`] builds.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kube::config::Kubeconfig;
use serde::Serialize;

use super::x509;

/// Fields a user of a component kubeconfig may set.
pub const COMPONENT_USER_FIELDS: &[&str] = &[
    "client-certificate-data",
    "client-key-data",
    "token",
    "tokenFile",
    "username",
    "password",
];

/// Fields a user of a generic token kubeconfig may set (both are replaced by our token).
pub const SHOOT_USER_FIELDS: &[&str] = &["token", "tokenFile"];

/// Fields a cluster of a generic token kubeconfig may set.
pub const SHOOT_CLUSTER_FIELDS: &[&str] = &["server", "certificate-authority-data"];

/// Why a kubeconfig is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// A user sets fields outside the allow-list.
    #[error(
        "user {user:?} sets {fields}: only {allowed} are accepted (a kubeconfig may not make \
         this process run a program, read a file other than a token file, or act as another user)"
    )]
    UserFields {
        /// The user's name in the kubeconfig.
        user: String,
        /// The refused fields, comma-separated.
        fields: String,
        /// The allowed fields, comma-separated.
        allowed: String,
    },
    /// A cluster sets fields outside the allow-list.
    #[error("cluster {cluster:?} sets {fields}: only {allowed} are accepted")]
    ClusterFields {
        /// The cluster's name in the kubeconfig.
        cluster: String,
        /// The refused fields, comma-separated.
        fields: String,
        /// The allowed fields, comma-separated.
        allowed: String,
    },
    /// An embedded client certificate is not X.509 v3.
    #[error(
        "client certificate of kubeconfig user {user:?} is X.509 v{version}; rustls accepts \
         only v3 certificates: re-issue it as v3"
    )]
    CertificateVersion {
        /// The user's name in the kubeconfig.
        user: String,
        /// The certificate's version (1 or 2).
        version: u32,
    },
    /// A user's `token` cannot be sent as a bearer token.
    #[error("user {user:?} sets a token that cannot be sent: {problem}")]
    Token {
        /// The user's name in the kubeconfig.
        user: String,
        /// What is wrong with it.
        problem: TokenRefused,
    },
    /// The cluster to use cannot be found.
    #[error("{0}")]
    NoCluster(String),
    /// The cluster lacks a field the client needs.
    #[error("cluster {cluster:?} has no {field}")]
    Missing {
        /// The cluster's name in the kubeconfig.
        cluster: String,
        /// The missing field.
        field: &'static str,
    },
    /// The server is not an `https://` URL (the token would travel in the clear).
    #[error("cluster {cluster:?} has server {server:?}, which is not an https:// URL")]
    NotHttps {
        /// The cluster's name in the kubeconfig.
        cluster: String,
        /// Its server.
        server: String,
    },
}

/// Why a bearer token cannot be sent. The token itself is never part of the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenRefused {
    /// Nothing (or only whitespace).
    #[error("the token is empty")]
    Empty,
    /// A character an `Authorization` header cannot carry, or one no token has.
    #[error(
        "the token has {what} at byte {at} of {length}: a bearer token is one word of visible \
         ASCII characters (whitespace around the token in a file is trimmed, inside it is refused)"
    )]
    Character {
        /// What it is (`a line break`, `a space`, ...).
        what: &'static str,
        /// Its byte offset.
        at: usize,
        /// The token's length in bytes.
        length: usize,
    },
}

/// Checks that `token` can be sent as `Authorization: Bearer <token>`: not empty, and only
/// visible ASCII (`!` to `~`). Stricter than the header's own rule (which lets spaces, tabs
/// and bytes over 127 through): a Kubernetes token — a bootstrap token, a service account's
/// JWT — never has them, and a space or a line break inside one is a damaged file.
pub fn check_bearer_token(token: &str) -> Result<(), TokenRefused> {
    if token.is_empty() {
        return Err(TokenRefused::Empty);
    }
    match token.bytes().position(|b| !b.is_ascii_graphic()) {
        None => Ok(()),
        Some(at) => Err(TokenRefused::Character {
            what: character_name(token.as_bytes()[at]),
            at,
            length: token.len(),
        }),
    }
}

/// The token of a token file: whitespace around it trimmed (gardener-node-agent's
/// `strings.TrimSpace`, client-go's for token files), then [`check_bearer_token`].
pub fn trimmed_bearer_token(file: &str) -> Result<&str, TokenRefused> {
    let token = file.trim();
    check_bearer_token(token).map(|()| token)
}

fn character_name(byte: u8) -> &'static str {
    match byte {
        b'\n' => "a line break",
        b'\r' => "a carriage return",
        b'\t' => "a tab",
        b' ' => "a space",
        0x80.. => "a non-ASCII character",
        _ => "a control character",
    }
}

/// The address and CA of a shoot's API server, as a generic token kubeconfig names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `server` of the current context's cluster (an `https://` URL).
    pub server: String,
    /// Its `certificate-authority-data` (base64 of PEM).
    pub certificate_authority_data: String,
}

/// Checks a component's own kubeconfig (see the module docs).
pub fn check_component(kubeconfig: &Kubeconfig) -> Result<(), Refused> {
    check_users(kubeconfig, COMPONENT_USER_FIELDS)?;
    check_tokens(kubeconfig)?;
    check_certificates(kubeconfig)
}

/// Every user's `token` can be sent as it is ([`check_bearer_token`]; kube-rs does not trim
/// it).
fn check_tokens(kubeconfig: &Kubeconfig) -> Result<(), Refused> {
    for named in &kubeconfig.auth_infos {
        let Some(token) = named.auth_info.as_ref().and_then(|a| a.token.as_ref()) else {
            continue;
        };
        check_bearer_token(secrecy::ExposeSecret::expose_secret(token)).map_err(|problem| {
            Refused::Token {
                user: named.name.clone(),
                problem,
            }
        })?;
    }
    Ok(())
}

/// Checks a generic token kubeconfig and returns the server and CA of its current context's
/// cluster (see the module docs).
pub fn shoot_endpoint(kubeconfig: &Kubeconfig) -> Result<Endpoint, Refused> {
    check_users(kubeconfig, SHOOT_USER_FIELDS)?;
    for named in &kubeconfig.clusters {
        let refused = refused_fields(&named.cluster, SHOOT_CLUSTER_FIELDS);
        if !refused.is_empty() {
            return Err(Refused::ClusterFields {
                cluster: named.name.clone(),
                fields: refused.join(", "),
                allowed: SHOOT_CLUSTER_FIELDS.join(", "),
            });
        }
    }
    let (name, cluster) = current_cluster(kubeconfig)?;
    let missing = |field| Refused::Missing {
        cluster: name.to_string(),
        field,
    };
    let server = cluster.server.clone().ok_or_else(|| missing("server"))?;
    if !server.starts_with("https://") {
        return Err(Refused::NotHttps {
            cluster: name.to_string(),
            server,
        });
    }
    let certificate_authority_data = cluster
        .certificate_authority_data
        .clone()
        .ok_or_else(|| missing("certificate-authority-data"))?;
    Ok(Endpoint {
        server,
        certificate_authority_data,
    })
}

/// Every user sets only `allowed` fields.
fn check_users(kubeconfig: &Kubeconfig, allowed: &[&str]) -> Result<(), Refused> {
    for named in &kubeconfig.auth_infos {
        let refused = refused_fields(&named.auth_info, allowed);
        if !refused.is_empty() {
            return Err(Refused::UserFields {
                user: named.name.clone(),
                fields: refused.join(", "),
                allowed: allowed.join(", "),
            });
        }
    }
    Ok(())
}

/// Every embedded client certificate that can be read is X.509 v3. One that cannot be read is
/// left to the client, which names the problem itself.
fn check_certificates(kubeconfig: &Kubeconfig) -> Result<(), Refused> {
    for named in &kubeconfig.auth_infos {
        let Some(data) = named
            .auth_info
            .as_ref()
            .and_then(|a| a.client_certificate_data.as_deref())
        else {
            continue;
        };
        let Ok(pem) = STANDARD.decode(data.trim()) else {
            continue;
        };
        match x509::first_certificate_version(&pem) {
            Some(version) if version != 3 => {
                return Err(Refused::CertificateVersion {
                    user: named.name.clone(),
                    version,
                });
            }
            _ => {}
        }
    }
    Ok(())
}

/// The fields `value` sets (its keys as the kubeconfig spells them) that `allowed` does not
/// list. A value that does not serialize to a mapping is refused as a whole.
fn refused_fields<T: Serialize>(value: &Option<T>, allowed: &[&str]) -> Vec<String> {
    let Some(value) = value else {
        return Vec::new();
    };
    match serde_json::to_value(value) {
        Ok(serde_json::Value::Object(fields)) => {
            let mut refused: Vec<String> = fields
                .into_iter()
                .filter(|(name, value)| !value.is_null() && !allowed.contains(&name.as_str()))
                .map(|(name, _)| name)
                .collect();
            refused.sort();
            refused
        }
        _ => vec!["<unreadable>".to_string()],
    }
}

/// The cluster of the current context, with its name.
fn current_cluster(kubeconfig: &Kubeconfig) -> Result<(&str, &kube::config::Cluster), Refused> {
    let context_name = kubeconfig
        .current_context
        .as_deref()
        .ok_or_else(|| Refused::NoCluster("it has no current-context".into()))?;
    let context = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.as_ref())
        .ok_or_else(|| {
            Refused::NoCluster(format!(
                "its current-context {context_name:?} is not defined"
            ))
        })?;
    kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| Some((c.name.as_str(), c.cluster.as_ref()?)))
        .ok_or_else(|| {
            Refused::NoCluster(format!(
                "context {context_name:?} names cluster {:?}, which is not defined",
                context.cluster
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// gardenlet's generic token kubeconfig (`generic-token-kubeconfig` in a shoot namespace).
    const GENERIC: &str = "apiVersion: v1\nkind: Config\ncurrent-context: shoot--p--s\n\
        clusters:\n- name: shoot--p--s\n  cluster:\n    server: https://kube-apiserver\n    \
        certificate-authority-data: Q0E=\n\
        contexts:\n- name: shoot--p--s\n  context:\n    cluster: shoot--p--s\n    user: shoot--p--s\n\
        users:\n- name: shoot--p--s\n  user:\n    tokenFile: /var/run/secrets/gardener.cloud/shoot/generic-kubeconfig/token\n";

    fn parse(yaml: &str) -> Kubeconfig {
        Kubeconfig::from_yaml(yaml).unwrap()
    }

    /// [`GENERIC`] with `extra` appended to its user (indented as a user field).
    fn with_user_fields(extra: &str) -> Kubeconfig {
        parse(&format!("{GENERIC}{extra}"))
    }

    #[test]
    fn the_generic_token_kubeconfig_yields_server_and_ca() {
        assert_eq!(
            shoot_endpoint(&parse(GENERIC)).unwrap(),
            Endpoint {
                server: "https://kube-apiserver".into(),
                certificate_authority_data: "Q0E=".into(),
            }
        );
        let with_token = with_user_fields("    token: abc\n");
        assert!(shoot_endpoint(&with_token).is_ok());
    }

    #[test]
    fn programs_files_credentials_and_impersonation_are_refused_in_a_generic_kubeconfig() {
        let cases = [
            (
                "    auth-provider:\n      name: gcp\n      config:\n        cmd-path: /tmp/x\n",
                "auth-provider",
            ),
            (
                "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /tmp/x\n",
                "exec",
            ),
            ("    username: u\n    password: p\n", "password, username"),
            (
                "    client-certificate: /etc/cert.pem\n",
                "client-certificate",
            ),
            ("    client-key-data: S0VZ\n", "client-key-data"),
            (
                "    as: admin\n    as-groups: [system:masters]\n",
                "as, as-groups",
            ),
            ("    unknown-field: 1\n", "unknown-field"),
        ];
        for (extra, fields) in cases {
            let error = shoot_endpoint(&with_user_fields(extra)).unwrap_err();
            assert_eq!(
                error,
                Refused::UserFields {
                    user: "shoot--p--s".into(),
                    fields: fields.into(),
                    allowed: "token, tokenFile".into(),
                },
                "{extra}"
            );
        }
    }

    #[test]
    fn a_generic_kubeconfig_gives_nothing_but_an_https_server_and_its_ca() {
        let cluster_field = |field: &str| {
            GENERIC.replace(
                "    server: https://kube-apiserver\n",
                &format!("    server: https://kube-apiserver\n    {field}\n"),
            )
        };
        for (field, name) in [
            ("insecure-skip-tls-verify: true", "insecure-skip-tls-verify"),
            (
                "certificate-authority: /etc/ca.pem",
                "certificate-authority",
            ),
            ("proxy-url: http://proxy:3128", "proxy-url"),
            ("tls-server-name: other", "tls-server-name"),
        ] {
            let error = shoot_endpoint(&parse(&cluster_field(field))).unwrap_err();
            assert!(
                matches!(&error, Refused::ClusterFields { fields, .. } if fields == name),
                "{error}"
            );
        }
        let plain = GENERIC.replace("https://kube-apiserver", "http://kube-apiserver");
        assert!(matches!(
            shoot_endpoint(&parse(&plain)),
            Err(Refused::NotHttps { .. })
        ));
        let no_ca = GENERIC.replace("    certificate-authority-data: Q0E=\n", "");
        assert_eq!(
            shoot_endpoint(&parse(&no_ca)).unwrap_err().to_string(),
            "cluster \"shoot--p--s\" has no certificate-authority-data"
        );
        let no_context = GENERIC.replace("current-context: shoot--p--s\n", "");
        assert_eq!(
            shoot_endpoint(&parse(&no_context)).unwrap_err().to_string(),
            "it has no current-context"
        );
    }

    #[test]
    fn a_component_kubeconfig_may_authenticate_but_not_run_read_or_impersonate() {
        for allowed in [
            "    token: abc\n",
            "    username: u\n    password: p\n",
            "    client-key-data: S0VZ\n",
        ] {
            assert_eq!(
                check_component(&with_user_fields(allowed)),
                Ok(()),
                "{allowed}"
            );
        }
        for (extra, fields) in [
            (
                "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /tmp/x\n",
                "exec",
            ),
            ("    auth-provider:\n      name: oidc\n", "auth-provider"),
            (
                "    client-certificate: /c\n    client-key: /k\n",
                "client-certificate, client-key",
            ),
            ("    as: admin\n", "as"),
        ] {
            let error = check_component(&with_user_fields(extra)).unwrap_err();
            assert!(
                matches!(&error, Refused::UserFields { fields: f, .. } if f == fields),
                "{error}"
            );
        }
        // Cluster fields are the component's own business.
        let insecure = GENERIC.replace(
            "    certificate-authority-data: Q0E=\n",
            "    insecure-skip-tls-verify: true\n",
        );
        assert_eq!(check_component(&parse(&insecure)), Ok(()));
    }

    /// Issue #41 item 3: a token with a line break, a space or a control character in it is
    /// refused with where and what, never with the token.
    #[test]
    fn a_token_that_cannot_be_a_header_is_refused_without_showing_it() {
        assert_eq!(check_bearer_token("abcdef.0123456789abcdef"), Ok(()));
        assert_eq!(
            trimmed_bearer_token(" abcdef.0123456789abcdef\r\n\n"),
            Ok("abcdef.0123456789abcdef")
        );
        for (file, what, at) in [
            ("abcdef.01234\n56789abcdef\n", "a line break", 12),
            ("abcdef.01234\r56789abcdef", "a carriage return", 12),
            ("abcdef 0123456789abcdef", "a space", 6),
            ("abcdef.0123456789abc\tdef", "a tab", 20),
            ("abc\u{7f}def", "a control character", 3),
            ("abcdef\0", "a control character", 6),
            ("abcd\u{e9}f", "a non-ASCII character", 4),
        ] {
            let refused = trimmed_bearer_token(file).unwrap_err();
            let TokenRefused::Character {
                what: got,
                at: got_at,
                ..
            } = &refused
            else {
                panic!("{file:?}: {refused:?}");
            };
            assert_eq!((*got, *got_at), (what, at), "{file:?}");
            let text = refused.to_string();
            assert!(!text.contains("abc"), "{text}");
        }
        assert_eq!(trimmed_bearer_token(" \n"), Err(TokenRefused::Empty));
        // Not trimmed in a kubeconfig: kube-rs sends the token as it is.
        let error = check_component(&with_user_fields("    token: \"abc\\n\"\n")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "user \"shoot--p--s\" sets a token that cannot be sent: the token has a line break \
             at byte 3 of 4: a bearer token is one word of visible ASCII characters (whitespace \
             around the token in a file is trimmed, inside it is refused)"
        );
    }

    #[test]
    fn an_x509_v1_client_certificate_is_named_with_its_user() {
        let v1 = STANDARD.encode(include_str!(
            "../../test/fixtures/kubeconfig/x509-v1-client.crt"
        ));
        let kubeconfig = with_user_fields(&format!(
            "    client-certificate-data: {v1}\n    client-key-data: S0VZ\n"
        ));
        let error = check_component(&kubeconfig).unwrap_err();
        assert_eq!(
            error.to_string(),
            "client certificate of kubeconfig user \"shoot--p--s\" is X.509 v1; rustls accepts \
             only v3 certificates: re-issue it as v3"
        );
        let v3 = rcgen::generate_simple_self_signed(vec!["client".into()]).unwrap();
        let kubeconfig = with_user_fields(&format!(
            "    client-certificate-data: {}\n",
            STANDARD.encode(v3.cert.pem())
        ));
        assert_eq!(check_component(&kubeconfig), Ok(()));
    }
}
