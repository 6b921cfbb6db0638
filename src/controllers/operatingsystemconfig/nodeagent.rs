//! The node-agent config secret of a `reconcile` OperatingSystemConfig (pure), in the format
//! gardenlet produces (`docs/agent.md#node-agent-secret`; upstream
//! `pkg/component/extensions/operatingsystemconfig/original/components/nodeagent/secrets.go`),
//! so that our agent and gardener-node-agent read the same thing:
//!
//! - Secret `kube-system/<key>`, `<key>` = the OSC name without its `-original` suffix;
//! - data key `osc.yaml`: an OperatingSystemConfig holding only `spec.{units, files, criConfig,
//!   inPlaceUpdates}` and `status.{extensionUnits, extensionFiles, inPlaceUpdates}`, every
//!   `secretRef` file replaced by its data as inline `b64`. Like gardenlet's (Go) encoding it
//!   carries `metadata: {}`, `spec.type: ""` and `spec.purpose: ""`, and all keys sorted;
//! - annotation `checksum/data-script` = sha256 hex of the `osc.yaml` bytes (the node agent
//!   compares it with its node's annotation and applies only on a change);
//! - labels `gardener.cloud/role=operating-system-config`, `worker.gardener.cloud/pool=<pool>`;
//! - ours only: annotation `node.extensions.gardener.cloud/rollout-budget` when the shoot's
//!   pool is known ([`rollout_budget`]), which turns on the node agent's disruptive rollout
//!   (`docs/agent.md#disruptive-rollout`; gardener-node-agent ignores it).
//!
//! Rendering is byte-stable: the same OSC, extension status and Secret data give the same
//! bytes, so the checksum (and the nodes) only move when the content does. The Secret is
//! shipped into the shoot by the ManagedResource [`managed_resource_name`].

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::content::{self, ContentError, ENCODING_B64, ReferencedSecrets, Resolved};
use super::extensions::Extensions;
use crate::api::ErrorCode;
use crate::api::cluster::ShootWorker;
use crate::api::constants::{
    ANNOTATION_ROLLOUT_BUDGET, DATA_KEY_OPERATING_SYSTEM_CONFIG, LABEL_ROLE, LABEL_WORKER_POOL,
    MAX_ROLLOUT_BUDGET,
};
use crate::api::operatingsystemconfig::{File, FileContentInline, OperatingSystemConfig};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Namespace of the node-agent secrets in the shoot.
pub const NAMESPACE: &str = "kube-system";
/// Annotation with the sha256 of `osc.yaml`.
pub const ANNOTATION_CHECKSUM: &str = "checksum/data-script";
/// Value of `gardener.cloud/role` on node-agent secrets.
pub const ROLE_OPERATING_SYSTEM_CONFIG: &str = "operating-system-config";
/// Suffix of the names of `reconcile` OSCs.
pub const ORIGINAL_SUFFIX: &str = "-original";
/// Prefix of our ManagedResources for node-agent secrets.
pub const MANAGED_RESOURCE_PREFIX: &str = "extension-osc-";
/// gardener-resource-manager leaves objects with this annotation in place when a
/// ManagedResource that applied them is deleted (see [`super::handover`] for why the
/// node-agent Secret carries it).
pub const ANNOTATION_KEEP_OBJECT: &str = "resources.gardener.cloud/keep-object";

/// Why the node-agent secret cannot be rendered.
#[derive(Debug, thiserror::Error)]
pub enum NodeAgentError {
    /// A file's content does not resolve.
    #[error(transparent)]
    Content(#[from] ContentError),
    /// The OSC lacks the pool label gardenlet always sets.
    #[error("the OperatingSystemConfig has no label {LABEL_WORKER_POOL}")]
    MissingPool,
    /// The OSC has no name.
    #[error("the OperatingSystemConfig has no name")]
    MissingName,
    /// Encoding `osc.yaml` or the manifest failed.
    #[error("encoding {what} as YAML")]
    Encode {
        /// What was encoded.
        what: &'static str,
        /// Cause.
        #[source]
        source: serde_norway::Error,
    },
    /// Converting a type to JSON failed.
    #[error("converting {what} to JSON")]
    Json {
        /// What was converted.
        what: &'static str,
        /// Cause.
        #[source]
        source: serde_json::Error,
    },
}

impl NodeAgentError {
    /// Gardener codes: the content's own, `ERR_CONFIGURATION_PROBLEM` for a missing label or
    /// name, none for encoding failures (a bug, not the user's).
    pub fn codes(&self) -> Vec<ErrorCode> {
        match self {
            NodeAgentError::Content(error) => error.codes(),
            NodeAgentError::MissingPool | NodeAgentError::MissingName => {
                vec![ErrorCode::ConfigurationProblem]
            }
            NodeAgentError::Encode { .. } | NodeAgentError::Json { .. } => Vec::new(),
        }
    }
}

/// The rendered secret of one `reconcile` OSC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAgentSecret {
    /// `<key>`: secret name in `kube-system`.
    pub name: String,
    /// The worker pool.
    pub pool: String,
    /// The `osc.yaml` text.
    pub osc_yaml: String,
    /// The disruptive rollout's budget for the pool ([`rollout_budget`]); `None`: no
    /// annotation (the pool is not known).
    pub rollout_budget: Option<u32>,
}

impl NodeAgentSecret {
    /// sha256 hex of `osc.yaml`.
    pub fn checksum(&self) -> String {
        hex::encode(Sha256::digest(self.osc_yaml.as_bytes()))
    }

    /// The Secret object.
    pub fn to_secret(&self) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(NAMESPACE.to_string()),
                annotations: Some(
                    [
                        Some((ANNOTATION_CHECKSUM.to_string(), self.checksum())),
                        Some((ANNOTATION_KEEP_OBJECT.to_string(), "true".to_string())),
                        self.rollout_budget
                            .map(|b| (ANNOTATION_ROLLOUT_BUDGET.to_string(), b.to_string())),
                    ]
                    .into_iter()
                    .flatten()
                    .collect(),
                ),
                labels: Some(
                    [
                        (
                            LABEL_ROLE.to_string(),
                            ROLE_OPERATING_SYSTEM_CONFIG.to_string(),
                        ),
                        (LABEL_WORKER_POOL.to_string(), self.pool.clone()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            data: Some(
                [(
                    DATA_KEY_OPERATING_SYSTEM_CONFIG.to_string(),
                    ByteString(self.osc_yaml.as_bytes().to_vec()),
                )]
                .into(),
            ),
            ..Default::default()
        }
    }

    /// The Secret as a YAML manifest (what the ManagedResource carries).
    pub fn manifest(&self) -> Result<String, NodeAgentError> {
        let value =
            serde_json::to_value(self.to_secret()).map_err(|source| NodeAgentError::Json {
                what: "the node-agent Secret",
                source,
            })?;
        serde_norway::to_string(&sorted(value)).map_err(|source| NodeAgentError::Encode {
            what: "the node-agent Secret",
            source,
        })
    }

    /// The data of the ManagedResource: one key, `secret__kube-system__<name>.yaml`.
    pub fn managed_resource_data(&self) -> Result<BTreeMap<String, Vec<u8>>, NodeAgentError> {
        Ok(BTreeMap::from([(
            format!("secret__{NAMESPACE}__{}.yaml", self.name),
            self.manifest()?.into_bytes(),
        )]))
    }
}

/// Whether ManagedResource data we rendered still asks to keep the Secret (pure).
pub fn keeps_object(data: &BTreeMap<String, Vec<u8>>) -> bool {
    let marker = format!("{ANNOTATION_KEEP_OBJECT}:");
    data.values()
        .any(|manifest| String::from_utf8_lossy(manifest).contains(&marker))
}

/// The same ManagedResource data without the keep-object annotation, so that deleting the
/// ManagedResource afterwards removes the Secret from the shoot (pure).
pub fn without_keep_object(
    data: &BTreeMap<String, Vec<u8>>,
) -> Result<BTreeMap<String, Vec<u8>>, NodeAgentError> {
    let mut out = BTreeMap::new();
    for (key, manifest) in data {
        let mut value: Value =
            serde_norway::from_slice(manifest).map_err(|source| NodeAgentError::Encode {
                what: "the shipped node-agent Secret",
                source,
            })?;
        if let Some(annotations) = value
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.remove(ANNOTATION_KEEP_OBJECT);
        }
        let text =
            serde_norway::to_string(&sorted(value)).map_err(|source| NodeAgentError::Encode {
                what: "the node-agent Secret",
                source,
            })?;
        out.insert(key.clone(), text.into_bytes());
    }
    Ok(out)
}

/// The disruptive rollout's budget for `worker` (pure): its `maxUnavailable` resolved against
/// the pool's `minimum` (a percentage rounded down, as Kubernetes resolves `maxUnavailable`),
/// at least 1. The minimum, not the maximum: the pool always has that many nodes, so the
/// budget never lets more than that share of a small pool go at once. Gardener's default
/// `maxUnavailable` is 0 (machines are replaced with surge); an in-place rollout with 0 slots
/// would never move, hence at least 1. At most [`MAX_ROLLOUT_BUDGET`], the most slots the
/// node agent accepts. A percentage that does not parse counts as absent.
pub fn rollout_budget(worker: &ShootWorker) -> u32 {
    let resolved = match &worker.max_unavailable {
        None => 0,
        Some(IntOrString::Int(count)) => i64::from(*count),
        Some(IntOrString::String(text)) => crate::api::percent::parse_percent(text.trim())
            .map_or(0, |percent| {
                i64::from(percent) * i64::from(worker.minimum.max(0)) / 100
            }),
    };
    u32::try_from(resolved.clamp(1, i64::from(MAX_ROLLOUT_BUDGET))).unwrap_or(1)
}

/// `<key>` of an OSC: its name without the `-original` suffix.
pub fn key_of(osc_name: &str) -> &str {
    osc_name.strip_suffix(ORIGINAL_SUFFIX).unwrap_or(osc_name)
}

/// Our ManagedResource for the secret of OSC key `key`: `extension-osc-<key>`. One per OSC
/// key rather than one per pool: while a pool rolls to a new key, gardenlet keeps both OSCs
/// (the old one until no machine uses it), and a shared per-pool ManagedResource would flip
/// between their secrets with every reconcile. For in-place pools the key is the pool's
/// (`gardener-node-agent-<pool>`), so there it is one per pool.
pub fn managed_resource_name(key: &str) -> String {
    format!("{MANAGED_RESOURCE_PREFIX}{key}")
}

/// Renders the node-agent secret of a `reconcile` OSC with `extensions` as its extension
/// status. Every file is resolved (so bad encodings and missing Secrets fail here, not on the
/// nodes); `secretRef` files become inline `b64`, others are kept as they are.
pub fn render(
    osc: &OperatingSystemConfig,
    extensions: &Extensions,
    secrets: &ReferencedSecrets,
) -> Result<NodeAgentSecret, NodeAgentError> {
    let name = osc
        .metadata
        .name
        .as_deref()
        .ok_or(NodeAgentError::MissingName)?;
    let pool = osc
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(LABEL_WORKER_POOL))
        .filter(|pool| !pool.is_empty())
        .ok_or(NodeAgentError::MissingPool)?;
    let files = inline_secret_refs(&osc.spec.files, secrets)?;
    let extension_files = inline_secret_refs(&extensions.files, secrets)?;

    let mut spec = Map::new();
    spec.insert("type".into(), json!(""));
    spec.insert("purpose".into(), json!(""));
    insert_list(&mut spec, "units", &osc.spec.units)?;
    insert_list(&mut spec, "files", &files)?;
    if let Some(cri) = &osc.spec.cri_config {
        spec.insert("criConfig".into(), to_json("spec.criConfig", cri)?);
    }
    if let Some(in_place) = &osc.spec.in_place_updates {
        spec.insert(
            "inPlaceUpdates".into(),
            to_json("spec.inPlaceUpdates", in_place)?,
        );
    }
    let mut status = Map::new();
    insert_list(&mut status, "extensionUnits", &extensions.units)?;
    insert_list(&mut status, "extensionFiles", &extension_files)?;
    if let Some(in_place) = &extensions.in_place {
        status.insert(
            "inPlaceUpdates".into(),
            to_json("status.inPlaceUpdates", in_place)?,
        );
    }
    let document = json!({
        "apiVersion": "extensions.gardener.cloud/v1alpha1",
        "kind": "OperatingSystemConfig",
        "metadata": {},
        "spec": spec,
        "status": status,
    });
    let osc_yaml =
        serde_norway::to_string(&sorted(document)).map_err(|source| NodeAgentError::Encode {
            what: "osc.yaml",
            source,
        })?;
    Ok(NodeAgentSecret {
        name: key_of(name).to_string(),
        pool: pool.clone(),
        osc_yaml,
        rollout_budget: None,
    })
}

fn inline_secret_refs(
    files: &[File],
    secrets: &ReferencedSecrets,
) -> Result<Vec<File>, NodeAgentError> {
    files
        .iter()
        .map(|file| {
            let resolved = content::resolve(file, secrets)?;
            let mut file = file.clone();
            if file.content.secret_ref.is_some() {
                if let Resolved::Data(bytes) = resolved {
                    file.content.secret_ref = None;
                    file.content.inline = Some(FileContentInline {
                        encoding: ENCODING_B64.to_string(),
                        data: content::encode_b64(&bytes),
                    });
                }
            }
            Ok(file)
        })
        .collect()
}

fn insert_list<T: serde::Serialize>(
    map: &mut Map<String, Value>,
    key: &'static str,
    items: &[T],
) -> Result<(), NodeAgentError> {
    if !items.is_empty() {
        map.insert(key.to_string(), to_json(key, items)?);
    }
    Ok(())
}

fn to_json<T: serde::Serialize + ?Sized>(
    what: &'static str,
    value: &T,
) -> Result<Value, NodeAgentError> {
    serde_json::to_value(value).map_err(|source| NodeAgentError::Json { what, source })
}

/// The value with every object's keys in ascending order (as Go's YAML encoding writes them),
/// whatever order serde_json's map keeps.
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::operatingsystemconfig::extensions;

    /// A reconcile OSC shaped like gardenlet's, with a secretRef file, an imageRef file and
    /// containerd configuration.
    fn osc() -> OperatingSystemConfig {
        serde_norway::from_str(
            r#"
apiVersion: extensions.gardener.cloud/v1alpha1
kind: OperatingSystemConfig
metadata:
  name: gardener-node-agent-worker-a-0123456789abcdef-original
  namespace: shoot--dev--local
  labels:
    worker.gardener.cloud/pool: worker-a
spec:
  type: debian
  purpose: reconcile
  units:
  - name: gardener-node-agent.service
    enable: true
    content: |
      [Service]
      ExecStart=/opt/bin/gardener-node-agent --config-dir=/var/lib/gardener-node-agent
    filePaths:
    - /opt/bin/gardener-node-agent
  files:
  - path: /opt/bin/gardener-node-agent
    permissions: 493
    content:
      imageRef:
        image: registry.example/gardener-node-agent:v1.150.0
        filePathInImage: /gardener-node-agent
  - path: /var/lib/gardener-node-agent/config.yaml
    permissions: 384
    content:
      secretRef:
        name: node-agent-config
        dataKey: config.yaml
  - path: /etc/motd
    content:
      inline:
        encoding: ""
        data: "welcome $USER\n"
  criConfig:
    name: containerd
    cgroupDriver: systemd
    containerd:
      sandboxImage: registry.k8s.io/pause:3.10
      plugins:
      - path: [io.containerd.grpc.v1.cri, containerd, runtimes, runsc]
        values:
          runtime_type: io.containerd.runsc.v1
          options: {TypeUrl: io.containerd.runsc.v1.options, ConfigPath: /etc/containerd/runsc.toml}
"#,
        )
        .unwrap()
    }

    fn secrets() -> ReferencedSecrets {
        let mut secrets = ReferencedSecrets::default();
        secrets.insert(
            "node-agent-config",
            [(
                "config.yaml".to_string(),
                b"apiVersion: nodeagent.config.gardener.cloud/v1alpha1\n".to_vec(),
            )]
            .into(),
        );
        secrets
    }

    #[test]
    fn keep_object_stamp_comes_off_and_nothing_else_changes() {
        let secret = NodeAgentSecret {
            name: "gardener-node-agent-p1-0123".into(),
            pool: "p1".into(),
            osc_yaml: "spec: {}\n".into(),
            rollout_budget: None,
        };
        let data = secret.managed_resource_data().unwrap();
        assert!(keeps_object(&data));
        let unstamped = without_keep_object(&data).unwrap();
        assert!(!keeps_object(&unstamped));
        let text = String::from_utf8(unstamped.values().next().unwrap().clone()).unwrap();
        assert!(text.contains(ANNOTATION_CHECKSUM), "{text}");
        assert!(text.contains("osc.yaml"), "{text}");
        // Idempotent.
        assert_eq!(without_keep_object(&unstamped).unwrap(), unstamped);
    }

    #[test]
    fn osc_yaml_snapshot() {
        let rendered = render(&osc(), &extensions::for_os_type("debian"), &secrets()).unwrap();
        insta::assert_snapshot!(rendered.osc_yaml);
    }

    #[test]
    fn manifest_snapshot() {
        let rendered = render(&osc(), &extensions::for_os_type("debian"), &secrets()).unwrap();
        insta::assert_snapshot!(rendered.manifest().unwrap());
    }

    #[test]
    fn secret_carries_name_labels_and_the_checksum_of_osc_yaml() {
        let rendered = render(&osc(), &extensions::for_os_type("debian"), &secrets()).unwrap();
        assert_eq!(
            rendered.name,
            "gardener-node-agent-worker-a-0123456789abcdef"
        );
        let secret = rendered.to_secret();
        assert_eq!(secret.metadata.namespace.as_deref(), Some("kube-system"));
        let labels = secret.metadata.labels.unwrap();
        assert_eq!(labels["gardener.cloud/role"], "operating-system-config");
        assert_eq!(labels["worker.gardener.cloud/pool"], "worker-a");
        let data = &secret.data.unwrap()["osc.yaml"].0;
        assert_eq!(
            secret.metadata.annotations.unwrap()["checksum/data-script"],
            hex::encode(Sha256::digest(data))
        );
    }

    #[test]
    fn osc_yaml_holds_only_the_node_relevant_fields_with_secret_refs_inlined() {
        let rendered = render(&osc(), &extensions::for_os_type("debian"), &secrets()).unwrap();
        let value: Value = serde_norway::from_str(&rendered.osc_yaml).unwrap();
        assert_eq!(value["metadata"], json!({}));
        let spec_keys: Vec<&String> = value["spec"].as_object().unwrap().keys().collect();
        assert_eq!(
            spec_keys,
            ["criConfig", "files", "purpose", "type", "units"]
        );
        let file = &value["spec"]["files"][1];
        assert!(file["content"].get("secretRef").is_none());
        assert_eq!(file["content"]["inline"]["encoding"], "b64");
        assert_eq!(
            file["content"]["inline"]["data"],
            content::encode_b64(b"apiVersion: nodeagent.config.gardener.cloud/v1alpha1\n")
        );
        assert_eq!(
            value["status"]["extensionUnits"][0]["dropIns"][0]["name"],
            extensions::CONTAINERD_LIMITS_DROP_IN
        );
        // It parses back as an OSC apart from the empty purpose gardenlet's format carries.
        let mut typed = value.clone();
        typed["spec"]["purpose"] = json!("reconcile");
        let back: OperatingSystemConfig = serde_json::from_value(typed).unwrap();
        assert_eq!(back.spec.units, osc().spec.units);
        assert_eq!(back.spec.cri_config, osc().spec.cri_config);
        assert_eq!(back.spec.files[0], osc().spec.files[0]);
        assert_eq!(back.spec.files[2], osc().spec.files[2]);
    }

    #[test]
    fn rendering_is_byte_stable_and_follows_content() {
        let extensions = extensions::for_os_type("debian");
        let first = render(&osc(), &extensions, &secrets()).unwrap();
        let again = render(&osc(), &extensions, &secrets()).unwrap();
        assert_eq!(first, again);
        let mut changed = osc();
        changed.spec.files[2]
            .content
            .inline
            .as_mut()
            .unwrap()
            .data
            .push('!');
        let other = render(&changed, &extensions, &secrets()).unwrap();
        assert_ne!(first.checksum(), other.checksum());
        // Changed Secret data changes the checksum too.
        let mut secrets = secrets();
        secrets.insert(
            "node-agent-config",
            [("config.yaml".to_string(), b"other".to_vec())].into(),
        );
        assert_ne!(
            first.checksum(),
            render(&osc(), &extensions, &secrets).unwrap().checksum()
        );
    }

    #[test]
    fn status_is_empty_without_extensions() {
        let rendered = render(&osc(), &Extensions::default(), &secrets()).unwrap();
        let value: Value = serde_norway::from_str(&rendered.osc_yaml).unwrap();
        assert_eq!(value["status"], json!({}));
    }

    #[test]
    fn tricky_text_round_trips() {
        let mut osc = osc();
        let text = "OSC_EOF\n  leading: spaces\ttab\r\n'quote' \"double\" $HOME `x` #hash\n\n";
        osc.spec.files[2].content.inline.as_mut().unwrap().data = text.into();
        let rendered = render(&osc, &Extensions::default(), &secrets()).unwrap();
        let value: Value = serde_norway::from_str(&rendered.osc_yaml).unwrap();
        assert_eq!(value["spec"]["files"][2]["content"]["inline"]["data"], text);
    }

    #[test]
    fn missing_pool_label_and_missing_secret_are_reported() {
        let mut unlabelled = osc();
        unlabelled.metadata.labels = None;
        let error = render(&unlabelled, &Extensions::default(), &secrets()).unwrap_err();
        assert_eq!(error.codes(), vec![ErrorCode::ConfigurationProblem]);
        let error = render(
            &osc(),
            &Extensions::default(),
            &ReferencedSecrets::default(),
        )
        .unwrap_err();
        assert!(error.to_string().contains("node-agent-config"), "{error}");
        assert_eq!(
            error.codes(),
            vec![ErrorCode::RetryableConfigurationProblem]
        );
    }

    #[test]
    fn the_rollout_budget_is_max_unavailable_of_the_minimum_and_at_least_one() {
        let pool = |max_unavailable: Option<IntOrString>, minimum| ShootWorker {
            name: "a".into(),
            minimum,
            maximum: 10,
            max_unavailable,
            ..ShootWorker::default()
        };
        let pct = |p: &str| Some(IntOrString::String(p.into()));
        assert_eq!(rollout_budget(&pool(None, 4)), 1);
        assert_eq!(rollout_budget(&pool(Some(IntOrString::Int(0)), 4)), 1);
        assert_eq!(rollout_budget(&pool(Some(IntOrString::Int(3)), 4)), 3);
        assert_eq!(rollout_budget(&pool(pct("50%"), 4)), 2);
        assert_eq!(rollout_budget(&pool(pct("30%"), 10)), 3);
        // Rounded down, then at least one.
        assert_eq!(rollout_budget(&pool(pct("25%"), 3)), 1);
        assert_eq!(rollout_budget(&pool(pct("100%"), 0)), 1);
        assert_eq!(rollout_budget(&pool(pct("lots"), 4)), 1);
        assert_eq!(rollout_budget(&pool(Some(IntOrString::Int(-2)), 4)), 1);
        // Never more than the node agent accepts.
        assert_eq!(
            rollout_budget(&pool(Some(IntOrString::Int(1000)), 2000)),
            32
        );
        assert_eq!(rollout_budget(&pool(pct("50%"), 1000)), 32);
    }

    #[test]
    fn the_budget_annotation_is_written_only_when_known() {
        let mut secret = render(&osc(), &Extensions::default(), &secrets()).unwrap();
        let annotations = secret.to_secret().metadata.annotations.unwrap();
        assert!(!annotations.contains_key(ANNOTATION_ROLLOUT_BUDGET));
        secret.rollout_budget = Some(2);
        let annotations = secret.to_secret().metadata.annotations.unwrap();
        assert_eq!(annotations[ANNOTATION_ROLLOUT_BUDGET], "2");
        assert_eq!(annotations[ANNOTATION_CHECKSUM], secret.checksum());
    }

    #[test]
    fn keys_and_managed_resource_names() {
        assert_eq!(
            key_of("gardener-node-agent-p-0123-original"),
            "gardener-node-agent-p-0123"
        );
        assert_eq!(key_of("custom"), "custom");
        assert_eq!(
            managed_resource_name("gardener-node-agent-p"),
            "extension-osc-gardener-node-agent-p"
        );
    }
}
