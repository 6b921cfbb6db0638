//! Applying YAML manifests of any kind (server-side apply), and installing CRDs.
//!
//! Used by `make start` to load `crds/` and `example/`, and by the test support code.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::{Api, Client, ResourceExt};
use serde::Deserialize;

/// The field manager of development-time applies.
pub const FIELD_MANAGER: &str = "gardener-extension-node-devenv";

/// Errors while reading or applying manifests.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// A file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file or folder.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A document is not valid YAML or has no `apiVersion`/`kind`.
    #[error("document {index} of {source_name} does not parse")]
    Parse {
        /// Where the document came from.
        source_name: String,
        /// Its position in the stream (0-based).
        index: usize,
        /// Cause.
        #[source]
        source: serde_norway::Error,
    },
    /// A document lacks `apiVersion` or `kind`.
    #[error("object {name} in {source_name} has no apiVersion/kind")]
    MissingType {
        /// Where the document came from.
        source_name: String,
        /// The object name.
        name: String,
    },
    /// The API server does not know the kind.
    #[error("kind {gvk:?} is not served")]
    Discovery {
        /// The kind.
        gvk: GroupVersionKind,
        /// Cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// The API server rejected the object.
    #[error("applying {kind} {name}")]
    Apply {
        /// The kind.
        kind: String,
        /// The object name (with namespace).
        name: String,
        /// Cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// CRDs did not become established in time.
    #[error("CRD {0} not established after {1:?}")]
    NotEstablished(String, Duration),
}

/// Splits a multi-document YAML stream into objects, skipping empty documents.
pub fn parse_documents(text: &str, source_name: &str) -> Result<Vec<DynamicObject>, ApplyError> {
    let mut objects = Vec::new();
    for (index, document) in serde_norway::Deserializer::from_str(text).enumerate() {
        let value =
            serde_json::Value::deserialize(document).map_err(|source| ApplyError::Parse {
                source_name: source_name.to_string(),
                index,
                source,
            })?;
        if value.is_null() {
            continue;
        }
        let object: DynamicObject =
            serde_json::from_value(value.clone()).map_err(|_| ApplyError::MissingType {
                source_name: source_name.to_string(),
                name: value
                    .pointer("/metadata/name")
                    .and_then(|n| n.as_str())
                    .unwrap_or("<unnamed>")
                    .to_string(),
            })?;
        if object.types.is_none() {
            return Err(ApplyError::MissingType {
                source_name: source_name.to_string(),
                name: object.name_any(),
            });
        }
        objects.push(object);
    }
    Ok(objects)
}

/// Reads every `*.yaml` file of `dir` (sorted by name, not recursive) into objects.
pub fn read_dir(dir: &Path) -> Result<Vec<DynamicObject>, ApplyError> {
    let read_error = |source| ApplyError::Read {
        path: dir.display().to_string(),
        source,
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(read_error)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    let mut objects = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|source| ApplyError::Read {
            path: file.display().to_string(),
            source,
        })?;
        objects.extend(parse_documents(&text, &file.display().to_string())?);
    }
    Ok(objects)
}

/// Server-side applies `object`; namespaced objects without a namespace go to
/// `default_namespace`. With `dry_run` the server validates and admits but stores nothing.
pub async fn apply_object(
    client: &Client,
    object: &DynamicObject,
    default_namespace: &str,
    dry_run: bool,
) -> Result<DynamicObject, ApplyError> {
    let name = object.name_any();
    let types = object.types.clone().unwrap_or_default();
    let gvk = GroupVersionKind::try_from(&types).map_err(|_| ApplyError::MissingType {
        source_name: "object".into(),
        name: name.clone(),
    })?;
    let (resource, capabilities) =
        kube::discovery::pinned_kind(client, &gvk)
            .await
            .map_err(|source| ApplyError::Discovery {
                gvk: gvk.clone(),
                source: Box::new(source),
            })?;
    let api: Api<DynamicObject> = match capabilities.scope {
        Scope::Cluster => Api::all_with(client.clone(), &resource),
        Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            object.namespace().as_deref().unwrap_or(default_namespace),
            &resource,
        ),
    };
    let mut params = PatchParams::apply(FIELD_MANAGER).force();
    params.dry_run = dry_run;
    api.patch(&name, &params, &Patch::Apply(object))
        .await
        .map_err(|source| ApplyError::Apply {
            kind: gvk.kind.clone(),
            name: match object.namespace() {
                Some(ns) => format!("{ns}/{name}"),
                None => name.clone(),
            },
            source: Box::new(source),
        })
}

/// Applies objects in order. CRDs are waited for before later objects are applied.
pub async fn apply_all(
    client: &Client,
    objects: &[DynamicObject],
    default_namespace: &str,
) -> Result<(), ApplyError> {
    for object in objects {
        apply_object(client, object, default_namespace, false).await?;
        if object
            .types
            .as_ref()
            .is_some_and(|t| t.kind == "CustomResourceDefinition")
        {
            wait_established(client, &object.name_any()).await?;
        }
        tracing::debug!(name = %object.name_any(), "applied");
    }
    Ok(())
}

/// Reads the CRDs of `dir` and installs them, waiting until each is established.
pub async fn install_crds(client: &Client, dir: &Path) -> Result<(), ApplyError> {
    let objects = read_dir(dir)?;
    apply_all(client, &objects, "default").await
}

const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(30);

async fn wait_established(client: &Client, name: &str) -> Result<(), ApplyError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let deadline = tokio::time::Instant::now() + ESTABLISH_TIMEOUT;
    loop {
        if let Ok(crd) = api.get(name).await {
            let established = crd
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                return Ok(());
            }
        }
        if tokio::time::Instant::now() > deadline {
            return Err(ApplyError::NotEstablished(
                name.to_string(),
                ESTABLISH_TIMEOUT,
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The generic token kubeconfig Secret gardenlet keeps in every shoot namespace (pure): the
/// shoot's address and CA, and a token file its users mount (extensions replace the user's
/// token with their own, e.g. the OSC controller's rollout status).
pub fn generic_token_kubeconfig(namespace: &str, server: &str, ca_pem: &str) -> serde_json::Value {
    let kubeconfig = crate::agent::access::credentials::token_kubeconfig(
        server,
        Some(ca_pem.as_bytes()),
        Path::new("/var/run/secrets/gardener.cloud/shoot/token/token"),
    );
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": crate::api::constants::GENERIC_TOKEN_KUBECONFIG_SECRET_NAME, "namespace": namespace},
        "stringData": {"kubeconfig": kubeconfig},
    })
}

/// Writes [`generic_token_kubeconfig`] into the namespace of every Cluster, as gardenlet does.
pub async fn apply_generic_token_kubeconfigs(
    client: &Client,
    server: &str,
    ca_pem: &str,
) -> anyhow::Result<()> {
    let clusters = Api::<crate::api::Cluster>::all(client.clone())
        .list(&kube::api::ListParams::default())
        .await?;
    for cluster in clusters {
        let namespace = cluster.name_any();
        let secret: DynamicObject =
            serde_json::from_value(generic_token_kubeconfig(&namespace, server, ca_pem))?;
        apply_object(client, &secret, &namespace, false).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_multi_document_streams_and_skips_empty_ones() {
        let text = "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n  namespace: a\n";
        let objects = parse_documents(text, "inline").unwrap();
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[1].types.as_ref().unwrap().kind, "ConfigMap");
        assert_eq!(objects[1].namespace().as_deref(), Some("a"));
    }

    #[test]
    fn rejects_documents_without_a_kind() {
        let error = parse_documents("metadata:\n  name: x\n", "inline").unwrap_err();
        assert!(matches!(error, ApplyError::MissingType { .. }), "{error:?}");
    }

    #[test]
    fn rejects_broken_yaml_with_the_document_index() {
        let error =
            parse_documents("apiVersion: v1\nkind: A\n---\n: : :\n  - [", "f.yaml").unwrap_err();
        assert!(
            matches!(error, ApplyError::Parse { index: 1, .. }),
            "{error:?}"
        );
    }

    #[test]
    fn the_generic_token_kubeconfig_points_at_the_shoot_with_a_token_file() {
        let secret =
            generic_token_kubeconfig("shoot--local--local", "https://127.0.0.1:6443", "PEM");
        assert_eq!(secret["metadata"]["name"], "generic-token-kubeconfig");
        let kubeconfig = secret["stringData"]["kubeconfig"].as_str().unwrap();
        let parsed = kube::config::Kubeconfig::from_yaml(kubeconfig).unwrap();
        let cluster = parsed.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        let user = parsed.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(
            user.token_file.as_deref(),
            Some("/var/run/secrets/gardener.cloud/shoot/token/token")
        );
    }
}
