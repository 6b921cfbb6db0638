//! What the installer will write, computed from what is on the host. Pure: text in, text
//! (or "unchanged") out; the install and uninstall runs (`install.rs`, `uninstall.rs`) do the
//! reading and writing around it.

use crate::containerd::{self, ConfigVersion, ContainerdConfig, RuntimeEdit, RuntimeEntry};

/// The CRI runtime handler name (the RuntimeClass `gvisor` has `handler: runsc`).
pub const RUNTIME_NAME: &str = "runsc";
/// The shim type containerd maps to `containerd-shim-runsc-v1`.
pub const RUNTIME_TYPE: &str = "io.containerd.runsc.v1";
/// The options type the runsc shim expects.
pub const OPTIONS_TYPE_URL: &str = "io.containerd.runsc.v1.options";
/// The binaries the installation image ships and we install, in install order.
pub const BINARIES: [&str; 2] = ["runsc", "containerd-shim-runsc-v1"];

/// The `runsc` runtime entry, pointing the shim at `runsc_config` (a host path).
pub fn runsc_entry(runsc_config: &str) -> RuntimeEntry {
    RuntimeEntry {
        runtime_type: RUNTIME_TYPE.to_string(),
        options: vec![
            ("TypeUrl".to_string(), OPTIONS_TYPE_URL.to_string()),
            ("ConfigPath".to_string(), runsc_config.to_string()),
        ],
    }
}

/// The planned change of containerd's config.toml.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigPlan {
    /// The file's schema version (2 when it starts from the default).
    pub version: ConfigVersion,
    /// The file was missing or empty and starts from [`containerd::DEFAULT_CONFIG`].
    pub from_default: bool,
    /// What the runtime edit did.
    pub edit: RuntimeEdit,
    /// The new file content, or `None` when the file stays byte-identical.
    pub new_text: Option<String>,
}

/// Plans registering runsc in the config text `current` (`None`: no file).
///
/// Fails for invalid TOML, unknown versions and non-table keys on the runtime's path; the
/// caller then writes nothing.
pub fn config_install(
    current: Option<&str>,
    runsc_config: &str,
) -> Result<ConfigPlan, containerd::Error> {
    let mut config = ContainerdConfig::parse_or_default(current)?;
    let edit = config.set_runtime(RUNTIME_NAME, &runsc_entry(runsc_config))?;
    Ok(finish(config, edit, current))
}

/// Plans removing runsc (under every version's key) from `current`. A missing or empty file
/// stays as it is.
pub fn config_uninstall(current: Option<&str>) -> Result<ConfigPlan, containerd::Error> {
    let Some(text) = current.filter(|text| !text.trim().is_empty()) else {
        return Ok(ConfigPlan {
            version: ContainerdConfig::parse_or_default(None)?.version(),
            from_default: false,
            edit: RuntimeEdit::default(),
            new_text: None,
        });
    };
    let mut config = ContainerdConfig::parse(text)?;
    let edit = config.remove_runtime(RUNTIME_NAME)?;
    Ok(finish(config, edit, current))
}

fn finish(config: ContainerdConfig, edit: RuntimeEdit, current: Option<&str>) -> ConfigPlan {
    let rendered = config.render();
    ConfigPlan {
        version: config.version(),
        from_default: config.from_default(),
        edit,
        new_text: (current != Some(rendered.as_str())).then_some(rendered),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_config_is_created_with_runsc_and_runc() {
        let plan = config_install(None, "/etc/containerd/runsc.toml").unwrap();
        assert!(plan.from_default);
        assert_eq!(plan.version, ConfigVersion::V2);
        let text = plan.new_text.unwrap();
        assert!(text.starts_with(containerd::DEFAULT_CONFIG));
        let config = ContainerdConfig::parse(&text).unwrap();
        let runtimes = [
            "plugins",
            "io.containerd.grpc.v1.cri",
            "containerd",
            "runtimes",
        ];
        assert_eq!(
            config.get_str(&[runtimes.as_slice(), &["runsc", "options", "ConfigPath"]].concat()),
            Some("/etc/containerd/runsc.toml")
        );
        assert_eq!(
            config.get_str(&[runtimes.as_slice(), &["runc", "runtime_type"]].concat()),
            Some("io.containerd.runc.v2")
        );
    }

    #[test]
    fn installed_config_plans_no_change() {
        let first = config_install(Some("version = 3\n"), "/etc/containerd/runsc.toml")
            .unwrap()
            .new_text
            .unwrap();
        let second = config_install(Some(&first), "/etc/containerd/runsc.toml").unwrap();
        assert_eq!(second.new_text, None);
        assert!(!second.edit.changed());
    }

    #[test]
    fn uninstall_of_missing_or_clean_config_plans_nothing() {
        assert_eq!(config_uninstall(None).unwrap().new_text, None);
        assert_eq!(config_uninstall(Some("")).unwrap().new_text, None);
        assert_eq!(
            config_uninstall(Some("version = 2\n")).unwrap().new_text,
            None
        );
    }

    #[test]
    fn uninstall_reverses_install_of_an_existing_runc_config() {
        let original = "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\nruntime_type = \"io.containerd.runc.v2\"\n";
        let installed = config_install(Some(original), "/etc/containerd/runsc.toml")
            .unwrap()
            .new_text
            .unwrap();
        let removed = config_uninstall(Some(&installed)).unwrap();
        assert!(removed.edit.updated);
        assert_eq!(removed.new_text.as_deref(), Some(original));
    }
}
