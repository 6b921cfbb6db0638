//! The edited configs against a real containerd: Debian's `containerd` package (installed by
//! `hack/install-deps.sh`) loads each edited file with `containerd --config <file> config
//! dump`, and the runsc runtime must show up under the CRI plugin of the merged config it
//! prints, next to the default `runc`.
//!
//! Debian 12 ships containerd 1.6, which reads config versions 1 and 2 (it migrates 1 to 2
//! in the dump). It does not know versions 3 and 4 (containerd 2.x): it loads such files
//! without complaint but ignores their `io.containerd.cri.v1.runtime` plugin, so a v3/v4
//! check here would prove nothing; those versions are covered by the fixture tests in
//! `containerd_config.rs`. Whether the running daemon's CRI plugin accepts the runtime is
//! checked in `gvisor_install_e2e.rs`. The unrepaired upstream file (runsc under the v1 key
//! `plugins.cri` in a version-2 file) is refused outright by containerd 1.6 ("invalid plugin
//! key URI"), i.e. upstream's bug stopped containerd from starting.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

use gardener_extension_node::containerd::ContainerdConfig;
use gardener_extension_node::gvisor_install::plan;

const RUNSC_CONFIG: &str = "/etc/containerd/runsc.toml";
const SHIM: &str = "/var/bin/containerruntimes/gvisor/0123456789abcdef/containerd-shim-runsc-v1";

/// The default profile's handler, as the installer registers it.
fn runsc_handler() -> Vec<plan::Handler> {
    vec![plan::Handler {
        name: plan::RUNTIME_NAME.to_string(),
        runsc_config: RUNSC_CONFIG.to_string(),
        shim: SHIM.to_string(),
    }]
}
const CRI: &str = "io.containerd.grpc.v1.cri";

fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("test/fixtures/containerd")
        .join(format!("{name}.toml"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `containerd --config <path> config dump`, parsed.
fn dump(path: &Path) -> ContainerdConfig {
    let output = Command::new("containerd")
        .arg("--config")
        .arg(path)
        .args(["config", "dump"])
        .output()
        .unwrap_or_else(|e| {
            panic!("running containerd: {e}; install Debian's containerd (hack/install-deps.sh)")
        });
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        output.status.success(),
        "containerd rejected {}:\n{}\n{}",
        path.display(),
        String::from_utf8_lossy(&output.stderr),
        std::fs::read_to_string(path).unwrap_or_default()
    );
    ContainerdConfig::parse(&stdout)
        .unwrap_or_else(|e| panic!("dump does not parse: {e}\n{stdout}"))
}

fn runtime_value<'a>(
    config: &'a ContainerdConfig,
    runtime: &str,
    rest: &[&str],
) -> Option<&'a str> {
    let path: Vec<&str> = ["plugins", CRI, "containerd", "runtimes", runtime]
        .into_iter()
        .chain(rest.iter().copied())
        .collect();
    config.get_str(&path)
}

fn write_installed(dir: &Path, name: &str, input: Option<&str>) -> PathBuf {
    let plan = plan::config_install(input, &runsc_handler()).unwrap();
    let text = plan
        .new_text
        .unwrap_or_else(|| input.unwrap_or_default().to_string());
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn debian_containerd_sees_runsc_under_the_cri_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let mut cases: Vec<(String, Option<String>)> = vec![("missing".into(), None)];
    for name in [
        "empty",
        "v1",
        "v1-explicit",
        "v2-debian",
        "v2-node",
        "v2-installed",
        "v2-wrong-key",
        "v2-comments",
    ] {
        cases.push((name.into(), Some(fixture(name))));
    }
    for (name, input) in &cases {
        let path = write_installed(dir.path(), name, input.as_deref());
        let config = dump(&path);
        assert_eq!(config.version().number(), 2, "{name}: dump is version 2");
        assert_eq!(
            runtime_value(&config, "runsc", &["runtime_type"]),
            Some("io.containerd.runsc.v1"),
            "{name}: runsc runtime_type"
        );
        assert_eq!(
            runtime_value(&config, "runsc", &["options", "TypeUrl"]),
            Some("io.containerd.runsc.v1.options"),
            "{name}: runsc TypeUrl"
        );
        assert_eq!(
            runtime_value(&config, "runsc", &["options", "ConfigPath"]),
            Some(RUNSC_CONFIG),
            "{name}: runsc ConfigPath"
        );
        assert_eq!(
            runtime_value(&config, "runsc", &["runtime_path"]),
            Some(SHIM),
            "{name}: runsc runtime_path (the installed version's shim)"
        );
        // The default runtime must survive: containerd 1.6 replaces its built-in runtime
        // map with the file's, and the CRI plugin fails without `runc`.
        assert_eq!(
            runtime_value(&config, "runc", &["runtime_type"]),
            Some("io.containerd.runc.v2"),
            "{name}: runc kept"
        );
        assert_eq!(
            config.get_str(&["plugins", CRI, "containerd", "default_runtime_name"]),
            Some("runc"),
            "{name}"
        );
    }
}

#[test]
fn debian_containerd_refuses_the_unrepaired_upstream_file() {
    // The check above can fail: the upstream script's `plugins.cri` table in a version-2
    // file does not even load in containerd 1.6 — containerd would not start on that node.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wrong-key.toml");
    std::fs::write(&path, fixture("v2-wrong-key")).unwrap();
    let output = Command::new("containerd")
        .arg("--config")
        .arg(&path)
        .args(["config", "dump"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("invalid plugin key URI \"cri\""),
        "{stderr}"
    );
}

#[test]
fn debian_containerd_drops_runc_when_a_file_defines_only_runsc() {
    // Why set_runtime adds `runc`: without it, containerd 1.6 keeps only the file's runtimes.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runsc-only.toml");
    std::fs::write(
        &path,
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runsc]\nruntime_type = \"io.containerd.runsc.v1\"\n",
    )
    .unwrap();
    let config = dump(&path);
    assert_eq!(
        runtime_value(&config, "runsc", &["runtime_type"]),
        Some("io.containerd.runsc.v1")
    );
    assert_eq!(runtime_value(&config, "runc", &["runtime_type"]), None);
}

#[test]
fn uninstalled_config_loads_without_runsc() {
    let dir = tempfile::tempdir().unwrap();
    let installed = plan::config_install(Some(&fixture("v2-node")), &runsc_handler())
        .unwrap()
        .new_text
        .unwrap();
    let removed = plan::config_uninstall(Some(&installed))
        .unwrap()
        .new_text
        .unwrap();
    let path = dir.path().join("uninstalled.toml");
    std::fs::write(&path, removed).unwrap();
    let config = dump(&path);
    assert_eq!(runtime_value(&config, "runsc", &["runtime_type"]), None);
    // The node's own runc settings are still in effect.
    let systemd_cgroup = config
        .get(&[
            "plugins",
            CRI,
            "containerd",
            "runtimes",
            "runc",
            "options",
            "SystemdCgroup",
        ])
        .and_then(|item| item.as_bool());
    assert_eq!(systemd_cgroup, Some(true));
}
