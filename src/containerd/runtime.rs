//! Registering and removing CRI runtime handlers (`plugins.<cri>.containerd.runtimes.<name>`)
//! under the key the file's version needs. Pure.
//!
//! Two containerd behaviours shape this module:
//! - A runtime under another version's plugin key is ignored by containerd (the upstream
//!   gVisor script's `plugins.cri` entries in version-2 files). [`ContainerdConfig::set_runtime`]
//!   moves such an entry: it removes every entry of that name under a foreign key and writes
//!   the right one.
//! - containerd 1.x replaces its built-in runtime map with the file's as soon as the file
//!   defines any runtime, so a file that only gains `runsc` loses `runc`, and the CRI plugin
//!   then fails with "no corresponding runtime configured in `containerd.runtimes` for
//!   `default_runtime_name = "runc"`" (seen with Debian's containerd 1.6). So when the default
//!   runtime `runc` is not defined in the file, `set_runtime` defines it as containerd's
//!   built-in default does (`runtime_type = "io.containerd.runc.v2"`).

use toml_edit::Value;

use super::config::display_path;
use super::{ContainerdConfig, Error};

/// containerd's default runtime handler name (`default_runtime_name` when unset).
pub const DEFAULT_RUNTIME_NAME: &str = "runc";
/// The `runtime_type` containerd's built-in `runc` entry has.
pub const DEFAULT_RUNTIME_TYPE: &str = "io.containerd.runc.v2";

/// A runtime handler entry: its shim type and string options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeEntry {
    /// `runtime_type`, e.g. `io.containerd.runsc.v1`.
    pub runtime_type: String,
    /// `runtime_path`: the shim binary containerd starts for this handler (instead of
    /// looking `containerd-shim-<type>` up on its `PATH`); `None` leaves the key as it is.
    pub runtime_path: Option<String>,
    /// Keys of the `options` sub-table, written in this order when created.
    pub options: Vec<(String, String)>,
}

/// What [`ContainerdConfig::set_runtime`] or [`ContainerdConfig::remove_runtime`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeEdit {
    /// Entries of the same name removed from another version's plugin key (dotted paths).
    pub removed_misplaced: Vec<String>,
    /// The entry under the right key was created or changed (set) or removed (remove).
    pub updated: bool,
    /// The default runtime added so containerd keeps it (see the module docs).
    pub added_default_runtime: Option<String>,
}

impl RuntimeEdit {
    /// True when the document changed.
    pub fn changed(&self) -> bool {
        self.updated || !self.removed_misplaced.is_empty() || self.added_default_runtime.is_some()
    }
}

impl ContainerdConfig {
    /// Path of runtime `name` under the CRI plugin key of this file's version.
    pub fn runtime_path<'a>(&self, name: &'a str) -> Vec<&'a str> {
        let mut path: Vec<&'a str> = self.version().runtimes_path().to_vec();
        path.push(name);
        path
    }

    /// Makes runtime `name` exactly `entry` (keys the entry does not mention are kept), under
    /// the key this version needs; removes entries of the same name under other versions'
    /// keys; defines `runc` if the file lacks the default runtime.
    ///
    /// Idempotent: a second call changes nothing and reports no change. On error the
    /// document is unchanged.
    pub fn set_runtime(&mut self, name: &str, entry: &RuntimeEntry) -> Result<RuntimeEdit, Error> {
        let mut next = self.clone();
        let mut edit = RuntimeEdit {
            removed_misplaced: next.remove_misplaced_runtime(name)?,
            ..RuntimeEdit::default()
        };
        // The default runtime first, so it reads before the new one in a file that had none.
        edit.added_default_runtime = next.ensure_default_runtime()?;
        let path = next.runtime_path(name);
        let mut changed = next.set_value(
            &[path.as_slice(), &["runtime_type"]].concat(),
            Value::from(entry.runtime_type.as_str()),
        )?;
        if let Some(runtime_path) = &entry.runtime_path {
            changed |= next.set_value(
                &[path.as_slice(), &["runtime_path"]].concat(),
                Value::from(runtime_path.as_str()),
            )?;
        }
        for (key, value) in &entry.options {
            changed |= next.set_value(
                &[path.as_slice(), &["options", key.as_str()]].concat(),
                Value::from(value.as_str()),
            )?;
        }
        edit.updated = changed;
        *self = next;
        Ok(edit)
    }

    /// Removes runtime `name` under this version's key and under every other version's key.
    /// Tables left empty go too. Idempotent; on error the document is unchanged.
    pub fn remove_runtime(&mut self, name: &str) -> Result<RuntimeEdit, Error> {
        let mut next = self.clone();
        let removed_misplaced = next.remove_misplaced_runtime(name)?;
        let path = next.runtime_path(name);
        let updated = next.remove(&path)?;
        *self = next;
        Ok(RuntimeEdit {
            removed_misplaced,
            updated,
            added_default_runtime: None,
        })
    }

    fn remove_misplaced_runtime(&mut self, name: &str) -> Result<Vec<String>, Error> {
        let mut removed = Vec::new();
        for plugin in self.version().foreign_cri_runtime_plugins() {
            let path = ["plugins", plugin, "containerd", "runtimes", name];
            if self.remove(&path)? {
                removed.push(display_path(&path));
            }
        }
        Ok(removed)
    }

    /// Defines `runc` when the default runtime is `runc` and the file does not define it;
    /// returns the name it defined.
    pub fn ensure_default_runtime(&mut self) -> Result<Option<String>, Error> {
        let runtimes = self.version().runtimes_path();
        let default_name = self
            .get_str(&[
                "plugins",
                self.version().cri_runtime_plugin(),
                "containerd",
                "default_runtime_name",
            ])
            .unwrap_or(DEFAULT_RUNTIME_NAME);
        if default_name != DEFAULT_RUNTIME_NAME
            || self.has_table(&[runtimes.as_slice(), &[DEFAULT_RUNTIME_NAME]].concat())
        {
            return Ok(None);
        }
        self.set_value(
            &[runtimes.as_slice(), &[DEFAULT_RUNTIME_NAME, "runtime_type"]].concat(),
            Value::from(DEFAULT_RUNTIME_TYPE),
        )?;
        Ok(Some(DEFAULT_RUNTIME_NAME.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::containerd::ConfigVersion;

    fn runsc() -> RuntimeEntry {
        RuntimeEntry {
            runtime_type: "io.containerd.runsc.v1".into(),
            runtime_path: None,
            options: vec![
                ("TypeUrl".into(), "io.containerd.runsc.v1.options".into()),
                ("ConfigPath".into(), "/etc/containerd/runsc.toml".into()),
            ],
        }
    }

    fn assert_runsc_at(config: &ContainerdConfig, plugin: &str) {
        let base = ["plugins", plugin, "containerd", "runtimes", "runsc"];
        let at = |rest: &[&'static str]| [base.as_slice(), rest].concat();
        assert_eq!(
            config.get_str(&at(&["runtime_type"])),
            Some("io.containerd.runsc.v1")
        );
        assert_eq!(
            config.get_str(&at(&["options", "TypeUrl"])),
            Some("io.containerd.runsc.v1.options")
        );
        assert_eq!(
            config.get_str(&at(&["options", "ConfigPath"])),
            Some("/etc/containerd/runsc.toml")
        );
    }

    #[test]
    fn registers_under_the_key_of_each_version() {
        for (text, plugin) in [
            ("", "cri"),
            ("version = 1\n", "cri"),
            ("version = 2\n", "io.containerd.grpc.v1.cri"),
            ("version = 3\n", "io.containerd.cri.v1.runtime"),
            ("version = 4\n", "io.containerd.cri.v1.runtime"),
        ] {
            let mut config = ContainerdConfig::parse(text).unwrap();
            let edit = config.set_runtime("runsc", &runsc()).unwrap();
            assert!(edit.updated && edit.changed(), "{text}");
            assert_eq!(edit.added_default_runtime.as_deref(), Some("runc"));
            assert_runsc_at(&config, plugin);
            assert_eq!(
                config.get_str(&[
                    "plugins",
                    plugin,
                    "containerd",
                    "runtimes",
                    "runc",
                    "runtime_type"
                ]),
                Some(DEFAULT_RUNTIME_TYPE)
            );
        }
    }

    #[test]
    fn second_set_is_a_no_op() {
        let mut config = ContainerdConfig::parse("version = 2\n").unwrap();
        config.set_runtime("runsc", &runsc()).unwrap();
        let first = config.render();
        let edit = config.set_runtime("runsc", &runsc()).unwrap();
        assert_eq!(edit, RuntimeEdit::default());
        assert!(!edit.changed());
        assert_eq!(config.render(), first);
    }

    #[test]
    fn existing_runc_and_custom_default_runtime_are_left_alone() {
        let text = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\nruntime_type = \"io.containerd.runc.v2\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\nSystemdCgroup = true\n";
        let mut config = ContainerdConfig::parse(text).unwrap();
        let edit = config.set_runtime("runsc", &runsc()).unwrap();
        assert_eq!(edit.added_default_runtime, None);
        assert!(config.render().starts_with(text));

        let text = "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd]\ndefault_runtime_name = \"crun\"\n";
        let mut config = ContainerdConfig::parse(text).unwrap();
        let edit = config.set_runtime("runsc", &runsc()).unwrap();
        assert_eq!(edit.added_default_runtime, None);
        assert!(!config.render().contains("runc"));
    }

    #[test]
    fn moves_an_entry_from_a_foreign_key() {
        let text = "\
version = 2

[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]
  runtime_type = \"io.containerd.runc.v2\"

[plugins.cri.containerd.runtimes.runsc]
  runtime_type = \"io.containerd.runsc.v1\"
[plugins.cri.containerd.runtimes.runsc.options]
  TypeUrl = \"io.containerd.runsc.v1.options\"
  ConfigPath = \"/etc/containerd/runsc.toml\"
";
        let mut config = ContainerdConfig::parse(text).unwrap();
        let edit = config.set_runtime("runsc", &runsc()).unwrap();
        assert_eq!(
            edit.removed_misplaced,
            ["plugins.cri.containerd.runtimes.runsc"]
        );
        assert!(edit.updated);
        assert!(!config.has_table(&["plugins", "cri"]));
        assert_runsc_at(&config, "io.containerd.grpc.v1.cri");
        let rendered = config.render();
        assert!(!rendered.contains("plugins.cri"), "{rendered}");
    }

    #[test]
    fn v3_entry_under_the_v2_key_is_moved() {
        let text = "version = 3\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runsc]\nruntime_type = \"io.containerd.runsc.v1\"\n";
        let mut config = ContainerdConfig::parse(text).unwrap();
        assert_eq!(config.version(), ConfigVersion::V3);
        let edit = config.set_runtime("runsc", &runsc()).unwrap();
        assert_eq!(
            edit.removed_misplaced,
            ["plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runsc"]
        );
        assert_runsc_at(&config, "io.containerd.cri.v1.runtime");
    }

    #[test]
    fn partial_entry_is_completed_and_extra_keys_are_kept() {
        let text = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runsc]\nruntime_type = \"io.containerd.runsc.v1\"\npod_annotations = [\"dev.gvisor.*\"]\n";
        let mut config = ContainerdConfig::parse(text).unwrap();
        let edit = config.set_runtime("runsc", &runsc()).unwrap();
        assert!(edit.updated);
        assert_runsc_at(&config, "io.containerd.grpc.v1.cri");
        assert!(
            config
                .render()
                .contains("pod_annotations = [\"dev.gvisor.*\"]")
        );
    }

    #[test]
    fn remove_takes_every_spelling_and_is_idempotent() {
        let mut config = ContainerdConfig::parse("version = 2\n").unwrap();
        config.set_runtime("runsc", &runsc()).unwrap();
        config
            .set_value(
                &[
                    "plugins",
                    "cri",
                    "containerd",
                    "runtimes",
                    "runsc",
                    "runtime_type",
                ],
                "io.containerd.runsc.v1".into(),
            )
            .unwrap();
        let edit = config.remove_runtime("runsc").unwrap();
        assert!(edit.updated);
        assert_eq!(
            edit.removed_misplaced,
            ["plugins.cri.containerd.runtimes.runsc"]
        );
        assert_eq!(
            config.render(),
            "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\nruntime_type = \"io.containerd.runc.v2\"\n"
        );
        let again = config.remove_runtime("runsc").unwrap();
        assert!(!again.changed());
    }

    #[test]
    fn failed_edit_leaves_the_document_unchanged() {
        let text = "version = 2\n[plugins.cri.containerd.runtimes.runsc]\nruntime_type = \"x\"\n[plugins.\"io.containerd.grpc.v1.cri\"]\ncontainerd = 5\n";
        let mut config = ContainerdConfig::parse(text).unwrap();
        let error = config.set_runtime("runsc", &runsc()).unwrap_err();
        assert!(matches!(error, Error::NotATable { .. }), "{error}");
        assert_eq!(config.render(), text);
        assert!(config.remove_runtime("runsc").is_err());
        assert_eq!(config.render(), text);
    }
}
