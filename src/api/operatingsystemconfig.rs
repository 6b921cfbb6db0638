//! The `OperatingSystemConfig` resource (`extensions.gardener.cloud/v1alpha1`, namespaced, short
//! name `osc`) and its unit/file types.
//!
//! gardenlet creates two OSCs per worker pool (purpose `provision` and `reconcile`); the OS
//! extension turns them into user data and reports extra units/files in the status. The same
//! [`Unit`] and [`File`] types are reused by the node agent, which reads the `osc.yaml` Secret
//! that gardenlet writes into the shoot, so every type here ignores unknown fields.

use chrono::{DateTime, Utc};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::common::{
    DefaultSpec, DefaultStatus, ExtensionObject, SecretReference, date_time_schema,
    raw_value_schema, rfc3339_seconds,
};

/// Spec of an OperatingSystemConfig. If the deletion timestamp is set, the spec is immutable.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "extensions.gardener.cloud",
    version = "v1alpha1",
    kind = "OperatingSystemConfig",
    plural = "operatingsystemconfigs",
    shortname = "osc",
    namespaced,
    status = "OperatingSystemConfigStatus",
    derive = "PartialEq",
    doc = "OperatingSystemConfig is a specification for a OperatingSystemConfig resource",
    printcolumn = r#"{"name": "Type", "type": "string", "jsonPath": ".spec.type", "description": "The type of the operating system configuration."}"#,
    printcolumn = r#"{"name": "Purpose", "type": "string", "jsonPath": ".spec.purpose", "description": "The purpose of the operating system configuration."}"#,
    printcolumn = r#"{"name": "Status", "type": "string", "jsonPath": ".status.lastOperation.state", "description": "Status of operating system configuration."}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp", "description": "creation timestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct OperatingSystemConfigSpec {
    /// Common extension spec fields; `type` is the OS (machine image) name.
    #[serde(flatten)]
    pub default: DefaultSpec,
    /// Whether the config is for first boot (`provision`) or the running node (`reconcile`). Immutable.
    pub purpose: OperatingSystemConfigPurpose,
    /// systemd units to install.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<Unit>,
    /// Files to write.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<File>,
    /// Container runtime interface configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cri_config: Option<CriConfig>,
    /// In-place update information (only for `reconcile` OSCs of in-place pools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_updates: Option<InPlaceUpdates>,
}

/// Purpose of an OperatingSystemConfig.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OperatingSystemConfigPurpose {
    /// First-boot configuration, rendered into the machine's user data.
    Provision,
    /// Configuration applied on running nodes by the node agent.
    Reconcile,
}

/// A systemd unit.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Unit {
    /// Unit name, e.g. `containerd.service`.
    pub name: String,
    /// Command to run for the unit after it changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<UnitCommand>,
    /// Whether the unit is enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    /// Unit file content; absent for units that only get drop-ins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Drop-in files for the unit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drop_ins: Vec<DropIn>,
    /// Paths of files (from `files`) whose change restarts the unit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub file_paths: Vec<String>,
}

/// Command for a systemd unit.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum UnitCommand {
    /// Start the unit.
    Start,
    /// Restart the unit.
    Restart,
    /// Stop the unit.
    Stop,
}

/// A drop-in configuration file of a systemd unit.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DropIn {
    /// Drop-in file name, e.g. `10-env.conf`.
    pub name: String,
    /// Drop-in file content.
    pub content: String,
}

/// A file on the node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct File {
    /// Absolute path of the file.
    pub path: String,
    /// File mode as a decimal number (e.g. 420 for 0644); absent means 0600 (as the node agent writes files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<i32>")]
    pub permissions: Option<u32>,
    /// Host name the file is meant for; only that host writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_name: Option<String>,
    /// Where the content comes from.
    pub content: FileContent,
}

/// Content of a [`File`]: exactly one of `inline`, `secretRef` or `imageRef`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileContent {
    /// Content given inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<FileContentInline>,
    /// Content taken from a Secret in the OSC's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<FileContentSecretRef>,
    /// Content extracted from a container image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_ref: Option<FileContentImageRef>,
    /// Put the content into user data as-is (no encoding), e.g. for per-machine placeholders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transmit_unencoded: Option<bool>,
}

/// Inline file content.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileContentInline {
    /// Encoding of `data`: empty for plain text or `b64` for base64.
    pub encoding: String,
    /// The (possibly encoded) content.
    pub data: String,
}

/// File content from a Secret.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileContentSecretRef {
    /// Secret name.
    pub name: String,
    /// Data key in the Secret.
    pub data_key: String,
}

/// File content from a container image.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileContentImageRef {
    /// Image reference.
    pub image: String,
    /// Path of the file inside the image.
    pub file_path_in_image: String,
}

/// Container runtime interface configuration of an OSC.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CriConfig {
    /// CRI name. Immutable.
    pub name: CriName,
    /// cgroup driver of kubelet and the runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_driver: Option<CgroupDriver>,
    /// containerd configuration (only meaningful for `reconcile` OSCs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containerd: Option<ContainerdConfig>,
}

/// Name of a container runtime interface.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CriName {
    /// containerd, the only supported CRI.
    Containerd,
}

/// cgroup driver.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CgroupDriver {
    /// The cgroupfs driver.
    Cgroupfs,
    /// The systemd driver.
    Systemd,
}

/// containerd configuration of an OSC.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerdConfig {
    /// Registry mirrors and hosts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub registries: Vec<RegistryConfig>,
    /// Pause (sandbox) image.
    pub sandbox_image: String,
    /// Changes to containerd's plugin configuration.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<PluginConfig>,
}

/// Configuration of one upstream registry (`hosts.toml`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistryConfig {
    /// Upstream registry name, e.g. `docker.io`.
    pub upstream: String,
    /// URL of the upstream registry itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Mirror hosts, in order of preference.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<RegistryHost>,
    /// Wait for a host to answer before writing the configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_probe: Option<bool>,
}

/// A mirror host of a registry.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistryHost {
    /// Host URL.
    pub url: String,
    /// Allowed operations (`pull`, `resolve`, `push`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<RegistryCapability>,
    /// CA certificate files for the host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ca_certs: Vec<String>,
    /// Treat the URL path as the full API path (containerd `override_path`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub override_path: Option<bool>,
}

/// An operation a registry host may be used for.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RegistryCapability {
    /// Pull content.
    Pull,
    /// Resolve names to digests.
    Resolve,
    /// Push content.
    Push,
}

/// A change to containerd's plugin configuration.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginConfig {
    /// Whether to add (default) or remove the entry at `path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<PluginPathOperation>,
    /// Path below `plugins` in containerd's configuration.
    pub path: Vec<String>,
    /// JSON object to put at `path`; absent means only the table is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "raw_value_schema")]
    pub values: Option<Value>,
}

/// Operation of a [`PluginConfig`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PluginPathOperation {
    /// Add or update the entry.
    Add,
    /// Remove the entry.
    Remove,
}

/// In-place update information of an OSC spec.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceUpdates {
    /// Desired operating system version.
    pub operating_system_version: String,
    /// Desired kubelet version.
    pub kubelet: String,
    /// Credentials rotation state relevant for the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_rotation: Option<CredentialsRotation>,
}

/// Credentials rotation information for in-place updates.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialsRotation {
    /// Certificate authority rotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_authorities: Option<RotationInitiation>,
    /// Service account key rotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_key: Option<RotationInitiation>,
}

/// When a credentials rotation was last initiated.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RotationInitiation {
    /// Last initiation time of the rotation.
    #[serde(
        default,
        with = "rfc3339_seconds::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "date_time_schema")]
    pub last_initiation_time: Option<DateTime<Utc>>,
}

/// Status of an OperatingSystemConfig.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperatingSystemConfigStatus {
    /// Common extension status fields.
    #[serde(flatten)]
    pub default: DefaultStatus,
    /// Units the OS extension adds on top of the spec.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extension_units: Vec<Unit>,
    /// Files the OS extension adds on top of the spec.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extension_files: Vec<File>,
    /// Reference to the Secret with the generated user data (`provision` OSCs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_config: Option<CloudConfig>,
    /// In-place update instructions for the node agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_updates: Option<InPlaceUpdatesStatus>,
}

/// Reference to the generated user data.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloudConfig {
    /// Secret holding the user data under key `cloud_config`.
    pub secret_ref: SecretReference,
}

/// In-place update part of an OSC status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceUpdatesStatus {
    /// How to update the operating system in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_update: Option<OsUpdate>,
}

/// Command that updates the operating system in place.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OsUpdate {
    /// Command to run.
    pub command: String,
    /// Arguments of the command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
}

impl ExtensionObject for OperatingSystemConfig {
    fn default_spec(&self) -> &DefaultSpec {
        &self.spec.default
    }

    fn default_status(&self) -> Option<&DefaultStatus> {
        self.status.as_ref().map(|s| &s.default)
    }
}

impl OperatingSystemConfig {
    /// Spec units followed by the extension units from the status (the set a node applies).
    pub fn all_units(&self) -> impl Iterator<Item = &Unit> {
        let extra = self.status.iter().flat_map(|s| s.extension_units.iter());
        self.spec.units.iter().chain(extra)
    }

    /// Spec files followed by the extension files from the status (the set a node applies).
    pub fn all_files(&self) -> impl Iterator<Item = &File> {
        let extra = self.status.iter().flat_map(|s| s.extension_files.iter());
        self.spec.files.iter().chain(extra)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    /// Shaped like the `osc.yaml` key of the Secret gardenlet writes into the shoot: a YAML
    /// OperatingSystemConfig with unit/file content inline, plus fields we do not model.
    const OSC_YAML: &str = r#"
apiVersion: extensions.gardener.cloud/v1alpha1
kind: OperatingSystemConfig
metadata:
  creationTimestamp: null
  name: gardener-node-agent-worker-a-77ac3
  namespace: kube-system
  labels:
    worker.gardener.cloud/pool: worker-a
spec:
  type: ubuntu
  purpose: reconcile
  reloadConfigFilePath: /old/removed/field
  units:
  - name: containerd.service
    dropIns:
    - name: 30-env.conf
      content: |
        [Service]
        Environment="PATH=/var/bin/containerruntimes:$PATH"
    filePaths:
    - /etc/containerd/conf.d/gvisor.toml
  - name: kubelet.service
    command: restart
    enable: true
    content: |
      [Unit]
      Description=kubelet
    futureUnitField: x
  files:
  - path: /var/lib/gardener-node-agent/config-v1.150.0.yaml
    permissions: 384
    content:
      inline:
        encoding: b64
        data: YXBpVmVyc2lvbjogdjE=
  - path: /var/lib/gardener-node-agent/machine-name
    permissions: 416
    hostName: machine-0
    content:
      inline:
        encoding: ""
        data: <<MACHINE_NAME>>
      transmitUnencoded: true
  - path: /opt/bin/gardener-node-agent
    permissions: 493
    content:
      imageRef:
        image: registry.example/node-agent:v1
        filePathInImage: /gardener-node-agent
  - path: /etc/secret
    content:
      secretRef:
        name: my-secret
        dataKey: key
  criConfig:
    name: containerd
    cgroupDriver: systemd
    containerd:
      sandboxImage: registry.k8s.io/pause:3.10
      registries:
      - upstream: docker.io
        server: https://registry-1.docker.io
        hosts:
        - url: https://mirror.example
          capabilities: [pull, resolve]
          caCerts: [/etc/ca.pem]
        readinessProbe: true
      plugins:
      - path: [io.containerd.grpc.v1.cri, containerd, runtimes, runsc]
        values:
          runtime_type: io.containerd.runsc.v1
      - op: remove
        path: [foo]
  inPlaceUpdates:
    operatingSystemVersion: "24.04"
    kubelet: 1.33.1
    credentialsRotation:
      certificateAuthorities:
        lastInitiationTime: "2024-05-01T10:00:00Z"
status:
  extensionUnits:
  - name: os-extension.service
    content: "[Service]"
  extensionFiles:
  - path: /etc/os-extension.conf
    content:
      inline:
        encoding: ""
        data: hello
  cloudConfig:
    secretRef:
      name: osc-result
      namespace: shoot--dev--local
  inPlaceUpdates:
    osUpdate:
      command: /usr/bin/update
      args: [--yes]
  command: /old/removed/status-field
"#;

    #[test]
    fn osc_yaml_like_gardenlet_writes_it_parses() {
        let osc: OperatingSystemConfig = serde_norway::from_str(OSC_YAML).unwrap();
        assert_eq!(OperatingSystemConfig::plural(&()), "operatingsystemconfigs");
        assert_eq!(osc.spec.default.type_, "ubuntu");
        assert_eq!(osc.spec.purpose, OperatingSystemConfigPurpose::Reconcile);

        let kubelet = &osc.spec.units[1];
        assert_eq!(kubelet.command, Some(UnitCommand::Restart));
        assert_eq!(kubelet.enable, Some(true));
        assert!(osc.spec.units[0].content.is_none());
        assert_eq!(osc.spec.units[0].drop_ins[0].name, "30-env.conf");

        let files = &osc.spec.files;
        assert_eq!(files[0].permissions, Some(0o600));
        assert_eq!(files[0].content.inline.as_ref().unwrap().encoding, "b64");
        assert_eq!(files[1].content.transmit_unencoded, Some(true));
        assert_eq!(files[1].host_name.as_deref(), Some("machine-0"));
        assert_eq!(
            files[2]
                .content
                .image_ref
                .as_ref()
                .unwrap()
                .file_path_in_image,
            "/gardener-node-agent"
        );
        assert_eq!(
            files[3].content.secret_ref.as_ref().unwrap().data_key,
            "key"
        );
        assert_eq!(files[3].permissions, None);

        let cri = osc.spec.cri_config.as_ref().unwrap();
        assert_eq!(cri.cgroup_driver, Some(CgroupDriver::Systemd));
        let containerd = cri.containerd.as_ref().unwrap();
        assert_eq!(
            containerd.registries[0].hosts[0].capabilities,
            [RegistryCapability::Pull, RegistryCapability::Resolve]
        );
        assert_eq!(containerd.plugins[0].op, None);
        assert_eq!(containerd.plugins[1].op, Some(PluginPathOperation::Remove));
        assert_eq!(
            containerd.plugins[0].values.as_ref().unwrap()["runtime_type"],
            "io.containerd.runsc.v1"
        );

        let status = osc.status.as_ref().unwrap();
        assert_eq!(
            status.cloud_config.as_ref().unwrap().secret_ref.name,
            "osc-result"
        );
        assert_eq!(
            status
                .in_place_updates
                .as_ref()
                .unwrap()
                .os_update
                .as_ref()
                .unwrap()
                .args,
            ["--yes"]
        );
        assert_eq!(osc.all_units().count(), 3);
        assert_eq!(osc.all_files().count(), 5);

        // Round trip: unknown fields are dropped, everything else survives.
        let json = serde_json::to_value(&osc).unwrap();
        assert!(json["spec"].get("reloadConfigFilePath").is_none());
        assert!(json["status"].get("command").is_none());
        assert!(json["spec"]["units"][1].get("futureUnitField").is_none());
        assert_eq!(json["spec"]["files"][0]["permissions"], 384);
        assert_eq!(
            json["spec"]["files"][1]["content"]["inline"]["encoding"],
            ""
        );
        assert_eq!(
            json["spec"]["inPlaceUpdates"]["credentialsRotation"]["certificateAuthorities"]["lastInitiationTime"],
            "2024-05-01T10:00:00Z"
        );
        let back: OperatingSystemConfig = serde_json::from_value(json).unwrap();
        assert_eq!(back, osc);
        let yaml = serde_norway::to_string(&osc).unwrap();
        let back: OperatingSystemConfig = serde_norway::from_str(&yaml).unwrap();
        assert_eq!(back, osc);
    }

    #[test]
    fn provision_osc_minimal() {
        let osc: OperatingSystemConfig = serde_json::from_value(serde_json::json!({
            "apiVersion": "extensions.gardener.cloud/v1alpha1",
            "kind": "OperatingSystemConfig",
            "metadata": {"name": "x-init", "namespace": "shoot--a--b"},
            "spec": {"type": "ubuntu", "purpose": "provision", "criConfig": {"name": "containerd"}},
        }))
        .unwrap();
        assert_eq!(osc.spec.purpose, OperatingSystemConfigPurpose::Provision);
        assert!(osc.status.is_none());
        let json = serde_json::to_value(&osc.spec).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"type": "ubuntu", "purpose": "provision", "criConfig": {"name": "containerd"}})
        );
    }
}
