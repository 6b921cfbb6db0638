//! Test support: the real helm (built by `hack/envtest.sh` from its Go module, path printed by
//! `hack/helm.sh`), run in the repository root, for the tests of the chart gardenlet installs
//! (`charts/gardener-extension-node`).

use std::path::PathBuf;
use std::process::Command;

use gardener_extension_node::devenv::apply;
use kube::api::DynamicObject;

/// The chart, relative to the repository root.
pub const CHART: &str = "charts/gardener-extension-node";

/// The helm binary.
pub fn binary() -> PathBuf {
    let output = Command::new("bash")
        .arg(super::repo_root().join("hack/helm.sh"))
        .output()
        .expect("hack/helm.sh runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    PathBuf::from(
        String::from_utf8(output.stdout)
            .expect("helm path is UTF-8")
            .trim(),
    )
}

/// Runs helm with `args`; panics unless it succeeds. Returns stdout and stderr.
pub fn run(args: &[&str]) -> (String, String) {
    let output = Command::new(binary())
        .args(args)
        .current_dir(super::repo_root())
        .output()
        .expect("helm runs");
    let stdout = String::from_utf8(output.stdout).expect("helm stdout is UTF-8");
    let stderr = String::from_utf8(output.stderr).expect("helm stderr is UTF-8");
    assert!(
        output.status.success(),
        "helm {args:?} failed:\n{stdout}\n{stderr}"
    );
    (stdout, stderr)
}

/// `helm template` of the chart with its default values as release `release` in `namespace`,
/// as gardenlet renders it for a ControllerInstallation (release: the ControllerRegistration's
/// name; namespace: `extension-<ControllerInstallation>`).
pub fn template(release: &str, namespace: &str) -> Vec<DynamicObject> {
    let (manifests, _) = run(&["template", release, CHART, "--namespace", namespace]);
    apply::parse_documents(&manifests, "helm template").expect("rendered chart parses")
}
