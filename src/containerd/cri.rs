//! The node agent's containerd settings (`docs/agent.md#containerd-settings`): what an
//! OperatingSystemConfig's `criConfig` asks of `config.toml`, applied with the same
//! TOML-preserving editor the gVisor installer uses. Pure.
//!
//! Per file version (see [`ConfigVersion`]) the settings live under different keys:
//!
//! | setting | version 1 / 2 (`cri` / `io.containerd.grpc.v1.cri`) | version 3 / 4 |
//! |---|---|---|
//! | registry hosts dir | `<cri>.registry.config_path` | `io.containerd.cri.v1.images`.`registry.config_path` |
//! | sandbox image | `<cri>.sandbox_image` | `io.containerd.cri.v1.images`.`pinned_images.sandbox` |
//! | cgroup driver | `<cri>.containerd.runtimes.runc.options.SystemdCgroup` | `io.containerd.cri.v1.runtime`.… same |
//! | CNI binaries | `<cri>.cni.bin_dir` | `io.containerd.cri.v1.runtime`.`cni.bin_dir` (containerd ≥ 2.2: `bin_dirs = [...]`) |
//!
//! plus the top-level `imports` gaining `/etc/containerd/conf.d/*.toml`, and each
//! `criConfig.containerd.plugins` entry: `add` merges the JSON object's top-level keys into
//! the table at `plugins.<path>` (creating it; a nested object replaces what is there),
//! `remove` deletes the sub-tree. A plugin path written for containerd 1.x
//! (`io.containerd.grpc.v1.cri`, `containerd`, `runtimes`, …) is moved to
//! `io.containerd.cri.v1.runtime` for version 3/4 files, and to the short `cri` key for
//! version-1 files, so one OSC serves every node. Unlike upstream (which re-encodes the whole
//! file) everything else in the file stays byte for byte, and an up-to-date file renders
//! identically, so "the text changed" is a reliable restart signal.

use serde_json::Value as Json;
use toml_edit::{Array, DocumentMut, InlineTable, Item, Table, Value};

use crate::api::operatingsystemconfig::{PluginConfig, PluginPathOperation, RegistryConfig};

use super::runtime::{DEFAULT_RUNTIME_NAME, DEFAULT_RUNTIME_TYPE};
use super::{ConfigVersion, ContainerdConfig, Error};

/// containerd's folder for registry `hosts.toml` files.
pub const CERTS_DIR: &str = "/etc/containerd/certs.d";
/// The drop-in folder containerd imports.
pub const CONF_D_DIR: &str = "/etc/containerd/conf.d";
/// The `imports` entry for [`CONF_D_DIR`].
pub const CONF_D_IMPORT: &str = "/etc/containerd/conf.d/*.toml";
/// Where CNI plugins live.
pub const CNI_BIN_DIR: &str = "/opt/cni/bin";
/// The main config file.
pub const CONFIG_FILE: &str = "/etc/containerd/config.toml";

/// The CRI images plugin of version 3/4 files.
const CRI_IMAGES_V3: &str = "io.containerd.cri.v1.images";
/// The CRI plugin ID of version-2 files, used in OSC plugin paths.
const CRI_PLUGIN_V2: &str = "io.containerd.grpc.v1.cri";

/// What `criConfig` asks for.
#[derive(Debug, Clone, Copy)]
pub struct CriSettings<'a> {
    /// The pause image.
    pub sandbox_image: &'a str,
    /// `SystemdCgroup` of the runc runtime (`None`: leave as is).
    pub systemd_cgroup: Option<bool>,
    /// Plugin edits, in order.
    pub plugins: &'a [PluginConfig],
    /// containerd is 2.2 or newer (CNI `bin_dirs` instead of `bin_dir` in version 3/4 files).
    pub cni_bin_dirs: bool,
}

/// The settings' keys for one file version.
struct Keys {
    registry_config_path: Vec<&'static str>,
    sandbox_image: Vec<&'static str>,
    cni_plugin: &'static str,
}

fn keys(version: ConfigVersion) -> Keys {
    let runtime = version.cri_runtime_plugin();
    match version {
        ConfigVersion::V1 | ConfigVersion::V2 => Keys {
            registry_config_path: vec!["plugins", runtime, "registry", "config_path"],
            sandbox_image: vec!["plugins", runtime, "sandbox_image"],
            cni_plugin: runtime,
        },
        ConfigVersion::V3 | ConfigVersion::V4 => Keys {
            registry_config_path: vec!["plugins", CRI_IMAGES_V3, "registry", "config_path"],
            sandbox_image: vec!["plugins", CRI_IMAGES_V3, "pinned_images", "sandbox"],
            cni_plugin: runtime,
        },
    }
}

impl ContainerdConfig {
    /// Applies `settings`; returns the names of the settings that changed the document
    /// (empty: byte-identical). On error the document is unchanged.
    pub fn apply_cri(&mut self, settings: &CriSettings<'_>) -> Result<Vec<String>, Error> {
        let mut next = self.clone();
        let version = next.version();
        let keys = keys(version);
        let mut changed = Vec::new();
        let mut note = |did: bool, what: &str| {
            if did {
                changed.push(what.to_string());
            }
        };

        let did = next.set_value(&keys.registry_config_path, Value::from(CERTS_DIR))?;
        note(did, "registry config_path");
        let did = next.add_import(CONF_D_IMPORT)?;
        note(did, "imports");
        let did = next.set_value(&keys.sandbox_image, Value::from(settings.sandbox_image))?;
        note(did, "sandbox image");
        let cni = ["plugins", keys.cni_plugin, "cni"];
        let did = if settings.cni_bin_dirs && version >= ConfigVersion::V3 {
            let dirs = Value::Array(Array::from_iter([CNI_BIN_DIR]));
            let set = next.set_value(&[cni.as_slice(), &["bin_dirs"]].concat(), dirs)?;
            next.remove(&[cni.as_slice(), &["bin_dir"]].concat())? || set
        } else {
            next.set_value(
                &[cni.as_slice(), &["bin_dir"]].concat(),
                Value::from(CNI_BIN_DIR),
            )?
        };
        note(did, "CNI bin dir");
        if let Some(systemd) = settings.systemd_cgroup {
            let runc = [version.runtimes_path().as_slice(), &[DEFAULT_RUNTIME_NAME]].concat();
            let mut did = next.set_value(
                &[runc.as_slice(), &["options", "SystemdCgroup"]].concat(),
                Value::from(systemd),
            )?;
            // A runc entry without a type breaks containerd 1.x (the file's runtimes replace the
            // built-in ones); give it the built-in type.
            did |= next.ensure_runtime_type(&runc)?;
            note(did, "cgroup driver");
        }
        for plugin in settings.plugins {
            let path = plugin_path(version, &plugin.path);
            let path: Vec<&str> = path.iter().map(String::as_str).collect();
            let did = match plugin.op.unwrap_or(PluginPathOperation::Add) {
                PluginPathOperation::Remove => next.remove(&path)?,
                PluginPathOperation::Add => match &plugin.values {
                    None => next.ensure_table(&path)?,
                    Some(Json::Object(values)) => {
                        let mut did = next.ensure_table(&path)?;
                        for (key, value) in values {
                            let child = [path.as_slice(), &[key.as_str()]].concat();
                            did |= next.set_json(&child, value)?;
                        }
                        // A runtime added this way must not make runc disappear.
                        if is_runtime_entry(version, &path) {
                            did |= next.ensure_default_runtime()?.is_some();
                        }
                        did
                    }
                    Some(_) => {
                        return Err(Error::InvalidPluginValues {
                            path: super::config::display_path(&path),
                        });
                    }
                },
            };
            note(
                did,
                &format!("plugin {}", super::config::display_path(&path)),
            );
        }
        *self = next;
        Ok(changed)
    }

    /// Appends `entry` to the top-level `imports` array unless it is there.
    fn add_import(&mut self, entry: &str) -> Result<bool, Error> {
        let mut imports = match self.get(&["imports"]) {
            Some(Item::Value(Value::Array(array))) => array.clone(),
            Some(other) => {
                return Err(Error::NotATable {
                    path: "imports (must be an array)".into(),
                    found: other.type_name(),
                });
            }
            None => Array::new(),
        };
        if imports.iter().any(|value| value.as_str() == Some(entry)) {
            return Ok(false);
        }
        imports.push(entry);
        self.set_value(&["imports"], Value::Array(imports))
    }

    /// Sets `runtime_type` of the runtime table at `path` when it has none.
    fn ensure_runtime_type(&mut self, path: &[&str]) -> Result<bool, Error> {
        let type_path = [path, &["runtime_type"]].concat();
        if self.get(&type_path).is_some() {
            return Ok(false);
        }
        self.set_value(&type_path, Value::from(DEFAULT_RUNTIME_TYPE))
    }

    /// Writes a JSON value at `path`: objects become tables whose keys are exactly the
    /// object's (keys not in it are removed), everything else a value. `null` is skipped.
    fn set_json(&mut self, path: &[&str], value: &Json) -> Result<bool, Error> {
        match value {
            Json::Null => Ok(false),
            Json::Object(map) => {
                let mut did = false;
                if self.get(path).is_some() && !self.has_table(path) {
                    did |= self.remove(path)?;
                }
                for key in self.table_keys(path) {
                    if !map.contains_key(&key) {
                        did |= self.remove(&[path, &[key.as_str()]].concat())?;
                    }
                }
                if map.is_empty() {
                    did |= self.ensure_table(path)?;
                }
                for (key, child) in map {
                    did |= self.set_json(&[path, &[key.as_str()]].concat(), child)?;
                }
                Ok(did)
            }
            scalar => {
                let mut did = false;
                if self.has_table(path) {
                    did |= self.remove(path)?;
                }
                Ok(self.set_value(path, json_to_toml(scalar))? || did)
            }
        }
    }
}

/// True when `path` is `plugins.<cri>.containerd.runtimes.<name>`.
fn is_runtime_entry(version: ConfigVersion, path: &[&str]) -> bool {
    path.len() == 5 && path[..4] == version.runtimes_path()
}

/// `plugins` + the OSC's path, moved to the CRI plugin key of the file's version.
pub fn plugin_path(version: ConfigVersion, path: &[String]) -> Vec<String> {
    let mut full = vec!["plugins".to_string()];
    full.extend(path.iter().cloned());
    let starts_with_runtimes = path.len() >= 3
        && path[0] == CRI_PLUGIN_V2
        && path[1] == "containerd"
        && path[2] == "runtimes";
    match version {
        ConfigVersion::V1 if path.first().is_some_and(|p| p == CRI_PLUGIN_V2) => {
            full[1] = version.cri_runtime_plugin().to_string();
        }
        ConfigVersion::V3 | ConfigVersion::V4 if starts_with_runtimes => {
            full[1] = version.cri_runtime_plugin().to_string();
        }
        _ => {}
    }
    full
}

/// A JSON scalar or array as a TOML value (objects inside arrays become inline tables).
fn json_to_toml(value: &Json) -> Value {
    match value {
        Json::Bool(b) => Value::from(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::from(i),
            None => Value::from(n.as_f64().unwrap_or(0.0)),
        },
        Json::String(s) => Value::from(s.as_str()),
        Json::Array(items) => Value::Array(
            items
                .iter()
                .filter(|item| !item.is_null())
                .map(json_to_toml)
                .collect(),
        ),
        Json::Object(map) => {
            let mut table = InlineTable::new();
            for (key, child) in map {
                if !child.is_null() {
                    table.insert(key, json_to_toml(child));
                }
            }
            Value::InlineTable(table)
        }
        Json::Null => Value::from(""),
    }
}

/// `(major, minor)` from `containerd --version` output, e.g.
/// `containerd github.com/containerd/containerd/v2 v2.2.0 1c4457e` → `(2, 2)`.
pub fn parse_containerd_version(output: &str) -> Option<(u64, u64)> {
    let version = output.split_whitespace().nth(2)?;
    let version = version.strip_prefix('v').unwrap_or(version);
    let mut parts = version.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The `hosts.toml` for one registry (`/etc/containerd/certs.d/<upstream>/hosts.toml`).
pub fn render_hosts_toml(registry: &RegistryConfig) -> String {
    let mut document = DocumentMut::new();
    if let Some(server) = &registry.server {
        document["server"] = toml_edit::value(server.as_str());
    }
    let mut hosts = Table::new();
    hosts.set_implicit(true);
    for host in &registry.hosts {
        let mut table = Table::new();
        let capabilities: Array = if host.capabilities.is_empty() {
            Array::from_iter(["pull", "resolve"])
        } else {
            host.capabilities
                .iter()
                .map(|capability| {
                    serde_json::to_value(capability)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default()
                })
                .collect()
        };
        table["capabilities"] = toml_edit::value(capabilities);
        if !host.ca_certs.is_empty() {
            table["ca"] =
                toml_edit::value(Array::from_iter(host.ca_certs.iter().map(String::as_str)));
        }
        if host.override_path == Some(true) {
            table["override_path"] = toml_edit::value(true);
        }
        hosts.insert(&host.url, Item::Table(table));
    }
    document.insert("host", Item::Table(hosts));
    format!("# managed by gardener-extension-node agent\n{}", document)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::operatingsystemconfig::{RegistryCapability, RegistryHost};
    use serde_json::json;

    fn settings<'a>(plugins: &'a [PluginConfig]) -> CriSettings<'a> {
        CriSettings {
            sandbox_image: "registry.k8s.io/pause:3.10",
            systemd_cgroup: Some(true),
            plugins,
            cni_bin_dirs: false,
        }
    }

    fn runsc(op: Option<PluginPathOperation>) -> PluginConfig {
        PluginConfig {
            op,
            path: vec![
                "io.containerd.grpc.v1.cri".into(),
                "containerd".into(),
                "runtimes".into(),
                "runsc".into(),
            ],
            values: Some(
                json!({"runtime_type": "io.containerd.runsc.v1", "options": {"TypeUrl": "io.containerd.runsc.v1.options"}}),
            ),
        }
    }

    #[test]
    fn version_2_keys_and_idempotency() {
        let text = "version = 2\n# operator comment\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  enable_selinux = false\n";
        let mut config = ContainerdConfig::parse(text).unwrap();
        let plugins = [runsc(None)];
        let changed = config.apply_cri(&settings(&plugins)).unwrap();
        assert_eq!(
            changed,
            [
                "registry config_path",
                "imports",
                "sandbox image",
                "CNI bin dir",
                "cgroup driver",
                "plugin plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runsc"
            ]
        );
        let cri = "io.containerd.grpc.v1.cri";
        assert_eq!(
            config.get_str(&["plugins", cri, "sandbox_image"]),
            Some("registry.k8s.io/pause:3.10")
        );
        assert_eq!(
            config.get_str(&["plugins", cri, "registry", "config_path"]),
            Some(CERTS_DIR)
        );
        assert_eq!(
            config.get_str(&["plugins", cri, "cni", "bin_dir"]),
            Some(CNI_BIN_DIR)
        );
        let runc = ["plugins", cri, "containerd", "runtimes", "runc"];
        assert_eq!(
            config
                .get(&[runc.as_slice(), &["options", "SystemdCgroup"]].concat())
                .and_then(Item::as_bool),
            Some(true)
        );
        assert_eq!(
            config.get_str(&[runc.as_slice(), &["runtime_type"]].concat()),
            Some(DEFAULT_RUNTIME_TYPE)
        );
        assert_eq!(
            config.get_str(&[
                "plugins",
                cri,
                "containerd",
                "runtimes",
                "runsc",
                "options",
                "TypeUrl"
            ]),
            Some("io.containerd.runsc.v1.options")
        );
        let rendered = config.render();
        assert!(rendered.contains("# operator comment\n"), "{rendered}");
        assert!(rendered.contains("enable_selinux = false"), "{rendered}");
        assert!(
            rendered.contains("imports = [\"/etc/containerd/conf.d/*.toml\"]"),
            "{rendered}"
        );

        // Applying again changes nothing, byte for byte.
        let mut again = ContainerdConfig::parse(&rendered).unwrap();
        assert!(again.apply_cri(&settings(&plugins)).unwrap().is_empty());
        assert_eq!(again.render(), rendered);
    }

    #[test]
    fn version_3_keys_and_runtime_path_rewrite() {
        let mut config = ContainerdConfig::parse("version = 3\n").unwrap();
        let plugins = [runsc(None)];
        let mut with_dirs = settings(&plugins);
        with_dirs.cni_bin_dirs = true;
        config.apply_cri(&with_dirs).unwrap();
        assert_eq!(
            config.get_str(&[
                "plugins",
                "io.containerd.cri.v1.images",
                "pinned_images",
                "sandbox"
            ]),
            Some("registry.k8s.io/pause:3.10")
        );
        assert_eq!(
            config.get_str(&[
                "plugins",
                "io.containerd.cri.v1.images",
                "registry",
                "config_path"
            ]),
            Some(CERTS_DIR)
        );
        assert!(
            config
                .get(&["plugins", "io.containerd.cri.v1.runtime", "cni", "bin_dir"])
                .is_none()
        );
        assert_eq!(
            config
                .get(&["plugins", "io.containerd.cri.v1.runtime", "cni", "bin_dirs"])
                .map(|i| i.to_string().trim().to_string()),
            Some("[\"/opt/cni/bin\"]".to_string())
        );
        assert_eq!(
            config.get_str(&[
                "plugins",
                "io.containerd.cri.v1.runtime",
                "containerd",
                "runtimes",
                "runsc",
                "runtime_type"
            ]),
            Some("io.containerd.runsc.v1")
        );
        assert!(!config.has_table(&["plugins", "io.containerd.grpc.v1.cri"]));
    }

    #[test]
    fn version_1_uses_the_short_cri_key() {
        let mut config = ContainerdConfig::parse("").unwrap();
        let plugins = [runsc(None)];
        config.apply_cri(&settings(&plugins)).unwrap();
        assert_eq!(
            config.get_str(&["plugins", "cri", "sandbox_image"]),
            Some("registry.k8s.io/pause:3.10")
        );
        assert_eq!(
            config.get_str(&[
                "plugins",
                "cri",
                "containerd",
                "runtimes",
                "runsc",
                "runtime_type"
            ]),
            Some("io.containerd.runsc.v1")
        );
    }

    #[test]
    fn add_merges_top_level_and_replaces_nested_remove_deletes() {
        let text = "version = 2\n[plugins.x]\n  keep = 1\n  [plugins.x.nested]\n    old = true\n    same = 'a'\n";
        let mut config = ContainerdConfig::parse(text).unwrap();
        let plugins = [PluginConfig {
            op: Some(PluginPathOperation::Add),
            path: vec!["x".into()],
            values: Some(json!({"nested": {"same": "a", "new": 2}, "list": [1, 2], "flag": false})),
        }];
        config.apply_cri(&settings(&plugins)).unwrap();
        assert_eq!(
            config
                .get(&["plugins", "x", "keep"])
                .and_then(Item::as_integer),
            Some(1),
            "top-level merge keeps keys"
        );
        assert!(
            config.get(&["plugins", "x", "nested", "old"]).is_none(),
            "nested object replaces"
        );
        assert_eq!(
            config
                .get(&["plugins", "x", "nested", "new"])
                .and_then(Item::as_integer),
            Some(2)
        );
        assert_eq!(
            config
                .get(&["plugins", "x", "flag"])
                .and_then(Item::as_bool),
            Some(false)
        );

        let removal = [PluginConfig {
            op: Some(PluginPathOperation::Remove),
            path: vec!["x".into(), "nested".into()],
            values: None,
        }];
        let changed = config.apply_cri(&settings(&removal)).unwrap();
        assert_eq!(changed, ["plugin plugins.x.nested"]);
        assert!(!config.has_table(&["plugins", "x", "nested"]));
        assert!(
            config.apply_cri(&settings(&removal)).unwrap().is_empty(),
            "removing twice is a no-op"
        );

        let create_only = [PluginConfig {
            op: None,
            path: vec!["empty".into()],
            values: None,
        }];
        assert_eq!(
            config.apply_cri(&settings(&create_only)).unwrap(),
            ["plugin plugins.empty"]
        );
        assert!(
            config.render().contains("[plugins.empty]"),
            "{}",
            config.render()
        );

        let bad = [PluginConfig {
            op: None,
            path: vec!["y".into()],
            values: Some(json!([1])),
        }];
        let before = config.render();
        assert!(matches!(
            config.apply_cri(&settings(&bad)),
            Err(Error::InvalidPluginValues { .. })
        ));
        assert_eq!(config.render(), before, "unchanged on error");
    }

    #[test]
    fn containerd_versions_parse() {
        assert_eq!(
            parse_containerd_version(
                "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+b1"
            ),
            Some((1, 6))
        );
        assert_eq!(
            parse_containerd_version("containerd containerd.io 1.7.27 05044ec0"),
            Some((1, 7))
        );
        assert_eq!(
            parse_containerd_version(
                "containerd github.com/containerd/containerd/v2 v2.2.0 1c4457e"
            ),
            Some((2, 2))
        );
        assert_eq!(parse_containerd_version("garbage"), None);
    }

    #[test]
    fn hosts_toml() {
        let registry = RegistryConfig {
            upstream: "docker.io".into(),
            server: Some("https://registry-1.docker.io".into()),
            hosts: vec![
                RegistryHost {
                    url: "https://mirror.example".into(),
                    capabilities: vec![RegistryCapability::Pull],
                    ca_certs: vec!["/etc/ca.pem".into()],
                    override_path: Some(true),
                },
                RegistryHost {
                    url: "http://second:5000".into(),
                    capabilities: vec![],
                    ca_certs: vec![],
                    override_path: None,
                },
            ],
            readiness_probe: None,
        };
        let text = render_hosts_toml(&registry);
        assert_eq!(
            text,
            "# managed by gardener-extension-node agent\nserver = \"https://registry-1.docker.io\"\n\n[host.\"https://mirror.example\"]\ncapabilities = [\"pull\"]\nca = [\"/etc/ca.pem\"]\noverride_path = true\n\n[host.\"http://second:5000\"]\ncapabilities = [\"pull\", \"resolve\"]\n"
        );
        assert!(text.parse::<DocumentMut>().is_ok());
    }
}
