//! What the installer will write, computed from what is on the host. Pure: text in, text
//! (or "unchanged") out; the install and uninstall runs (`install.rs`, `uninstall.rs`) do the
//! reading and writing around it.

use super::flags::valid_profile_name;
use crate::containerd::{self, ConfigVersion, ContainerdConfig, RuntimeEdit, RuntimeEntry};

/// The CRI runtime handler name of the default profile (the RuntimeClass `gvisor` has
/// `handler: runsc`); a named profile's is `runsc-<name>` ([`handler_name`]).
pub const RUNTIME_NAME: &str = "runsc";
/// The shim type containerd maps to `containerd-shim-runsc-v1`.
pub const RUNTIME_TYPE: &str = "io.containerd.runsc.v1";
/// The options type the runsc shim expects.
pub const OPTIONS_TYPE_URL: &str = "io.containerd.runsc.v1.options";
/// The binaries the installation image ships and we install, in install order.
pub const BINARIES: [&str; 2] = ["runsc", "containerd-shim-runsc-v1"];

/// The runtime handler of a profile: `runsc` for the default one, `runsc-<name>`.
pub fn handler_name(profile: Option<&str>) -> String {
    match profile {
        None => RUNTIME_NAME.to_string(),
        Some(name) => format!("{RUNTIME_NAME}-{name}"),
    }
}

/// The file name of a named profile's runsc config, beside the default profile's
/// (`--runsc-config`): `runsc-<name>.toml`.
pub fn profile_config_file(name: &str) -> String {
    format!("{RUNSC_CONFIG_PREFIX}{name}.toml")
}

/// What every named profile's runsc config file name starts with.
pub const RUNSC_CONFIG_PREFIX: &str = "runsc-";

/// One runtime handler to register: its name, the host paths of its runsc config and of
/// the shim of the installed version ([`super::versions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handler {
    /// `runsc` or `runsc-<profile>`.
    pub name: String,
    /// Host path of its runsc config (`ConfigPath`).
    pub runsc_config: String,
    /// Host path of the shim containerd starts for it (`runtime_path`).
    pub shim: String,
}

/// A runtime entry of type `runsc` for `handler`: containerd starts its version's shim and
/// points it at its runsc config (host paths).
pub fn runsc_entry(handler: &Handler) -> RuntimeEntry {
    RuntimeEntry {
        runtime_type: RUNTIME_TYPE.to_string(),
        runtime_path: Some(handler.shim.clone()),
        options: vec![
            ("TypeUrl".to_string(), OPTIONS_TYPE_URL.to_string()),
            ("ConfigPath".to_string(), handler.runsc_config.clone()),
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
    /// What the runtime edits did, together.
    pub edit: RuntimeEdit,
    /// Our handlers removed because no profile asks for them any more (or, uninstalling,
    /// all of them): their runsc config files go too.
    pub removed: Vec<String>,
    /// The new file content, or `None` when the file stays byte-identical.
    pub new_text: Option<String>,
}

/// Plans registering `handlers` in the config text `current` (`None`: no file) and removing
/// our other handlers ([`ours`]).
///
/// Fails for invalid TOML, unknown versions and non-table keys on a runtime's path; the
/// caller then writes nothing.
pub fn config_install(
    current: Option<&str>,
    handlers: &[Handler],
) -> Result<ConfigPlan, containerd::Error> {
    let mut config = ContainerdConfig::parse_or_default(current)?;
    let mut edit = RuntimeEdit::default();
    for handler in handlers {
        merge(
            &mut edit,
            config.set_runtime(&handler.name, &runsc_entry(handler))?,
        );
    }
    let stale: Vec<String> = ours(&config)
        .into_iter()
        .filter(|name| !handlers.iter().any(|h| &h.name == name))
        .collect();
    for name in &stale {
        merge(&mut edit, config.remove_runtime(name)?);
    }
    Ok(finish(config, edit, stale, current))
}

/// Plans removing every handler of ours (under every version's key) from `current`. A
/// missing or empty file stays as it is.
pub fn config_uninstall(current: Option<&str>) -> Result<ConfigPlan, containerd::Error> {
    let Some(text) = current.filter(|text| !text.trim().is_empty()) else {
        return Ok(ConfigPlan {
            version: ContainerdConfig::parse_or_default(None)?.version(),
            from_default: false,
            edit: RuntimeEdit::default(),
            removed: Vec::new(),
            new_text: None,
        });
    };
    let mut config = ContainerdConfig::parse(text)?;
    let mut edit = config.remove_runtime(RUNTIME_NAME)?;
    let mut removed = Vec::new();
    if edit.changed() {
        removed.push(RUNTIME_NAME.to_string());
    }
    for name in ours(&config) {
        merge(&mut edit, config.remove_runtime(&name)?);
        removed.push(name);
    }
    Ok(finish(config, edit, removed, current))
}

/// The handlers of ours in `config` under this version's key: `runsc`, and `runsc-<name>`
/// of type [`RUNTIME_TYPE`] with a valid profile name (a handler someone else named
/// `runsc-…` with another shim is not ours).
pub fn ours(config: &ContainerdConfig) -> Vec<String> {
    let runtimes = config.version().runtimes_path();
    config
        .table_keys(&runtimes)
        .into_iter()
        .filter(|name| {
            let type_path = [runtimes.as_slice(), &[name.as_str(), "runtime_type"]].concat();
            let is_runsc = config.get_str(&type_path) == Some(RUNTIME_TYPE);
            name == RUNTIME_NAME || (is_runsc && profile_of(name).is_some())
        })
        .collect()
}

/// The profile of a handler name `runsc-<name>`, when `name` is a valid profile name.
pub fn profile_of(handler: &str) -> Option<&str> {
    handler
        .strip_prefix(RUNSC_CONFIG_PREFIX)
        .filter(|name| valid_profile_name(name))
}

fn merge(total: &mut RuntimeEdit, edit: RuntimeEdit) {
    total.removed_misplaced.extend(edit.removed_misplaced);
    total.updated |= edit.updated;
    if total.added_default_runtime.is_none() {
        total.added_default_runtime = edit.added_default_runtime;
    }
}

fn finish(
    config: ContainerdConfig,
    edit: RuntimeEdit,
    removed: Vec<String>,
    current: Option<&str>,
) -> ConfigPlan {
    let rendered = config.render();
    ConfigPlan {
        version: config.version(),
        from_default: config.from_default(),
        edit,
        removed,
        new_text: (current != Some(rendered.as_str())).then_some(rendered),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHIM: &str =
        "/var/bin/containerruntimes/gvisor/0123456789abcdef/containerd-shim-runsc-v1";

    fn default_handler() -> Vec<Handler> {
        vec![Handler {
            name: RUNTIME_NAME.into(),
            runsc_config: "/etc/containerd/runsc.toml".into(),
            shim: SHIM.into(),
        }]
    }

    fn handler(name: &str) -> Handler {
        Handler {
            name: handler_name(Some(name)),
            runsc_config: format!("/etc/containerd/{}", profile_config_file(name)),
            shim: SHIM.into(),
        }
    }

    #[test]
    fn profiles_come_and_go_and_nobody_elses_handlers_are_touched() {
        let theirs = "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\nruntime_type = \"io.containerd.runc.v2\"\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runsc-theirs]\nruntime_type = \"io.containerd.kata.v2\"\n";
        let mut wanted = default_handler();
        wanted.extend([handler("debug"), handler("fast")]);
        let first = config_install(Some(theirs), &wanted).unwrap();
        assert!(first.removed.is_empty());
        let text = first.new_text.unwrap();
        let config = ContainerdConfig::parse(&text).unwrap();
        assert_eq!(ours(&config), ["runsc", "runsc-debug", "runsc-fast"]);
        assert!(!ours(&config).contains(&"runsc-theirs".to_string()));
        let runtimes = config.version().runtimes_path();
        assert_eq!(
            config.get_str(
                &[
                    runtimes.as_slice(),
                    &["runsc-fast", "options", "ConfigPath"]
                ]
                .concat()
            ),
            Some("/etc/containerd/runsc-fast.toml")
        );
        assert_eq!(config_install(Some(&text), &wanted).unwrap().new_text, None);

        let fewer = config_install(Some(&text), &[handler("debug")]).unwrap();
        assert_eq!(
            fewer.removed,
            ["runsc", "runsc-fast"],
            "the default profile refused too"
        );
        let config = ContainerdConfig::parse(fewer.new_text.as_deref().unwrap()).unwrap();
        assert_eq!(ours(&config), ["runsc-debug"]);
        assert!(config.has_table(&[runtimes.as_slice(), &["runsc-theirs"]].concat()));

        let gone = config_uninstall(Some(&text)).unwrap();
        assert_eq!(gone.removed, ["runsc", "runsc-debug", "runsc-fast"]);
        assert_eq!(gone.new_text.as_deref(), Some(theirs));
    }

    #[test]
    fn handler_names_with_odd_profiles_are_not_ours() {
        for (handler, profile) in [
            ("runsc-debug", Some("debug")),
            ("runsc-", None),
            ("runsc-../x", None),
            ("runsc-A", None),
            ("runsc", None),
        ] {
            assert_eq!(profile_of(handler), profile, "{handler}");
        }
    }

    #[test]
    fn missing_config_is_created_with_runsc_and_runc() {
        let plan = config_install(None, &default_handler()).unwrap();
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
            config.get_str(&[runtimes.as_slice(), &["runsc", "runtime_path"]].concat()),
            Some(SHIM)
        );
        assert_eq!(
            config.get_str(&[runtimes.as_slice(), &["runc", "runtime_type"]].concat()),
            Some("io.containerd.runc.v2")
        );
    }

    #[test]
    fn an_upgrade_points_every_handler_at_the_new_shim() {
        let first = config_install(None, &default_handler())
            .unwrap()
            .new_text
            .unwrap();
        let new_shim = SHIM.replace("0123456789abcdef", "fedcba9876543210");
        let mut upgraded = default_handler();
        upgraded[0].shim = new_shim.clone();
        let plan = config_install(Some(&first), &upgraded).unwrap();
        assert!(plan.edit.updated);
        let config = ContainerdConfig::parse(plan.new_text.as_deref().unwrap()).unwrap();
        let runtimes = config.version().runtimes_path();
        assert_eq!(
            config.get_str(&[runtimes.as_slice(), &["runsc", "runtime_path"]].concat()),
            Some(new_shim.as_str())
        );
    }

    #[test]
    fn installed_config_plans_no_change() {
        let first = config_install(Some("version = 3\n"), &default_handler())
            .unwrap()
            .new_text
            .unwrap();
        let second = config_install(Some(&first), &default_handler()).unwrap();
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
        let installed = config_install(Some(original), &default_handler())
            .unwrap()
            .new_text
            .unwrap();
        let removed = config_uninstall(Some(&installed)).unwrap();
        assert!(removed.edit.updated);
        assert_eq!(removed.new_text.as_deref(), Some(original));
    }
}
