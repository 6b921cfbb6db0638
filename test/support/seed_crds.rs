//! The CustomResourceDefinitions a Gardener seed serves beside ours (prometheus-operator's,
//! the VerticalPodAutoscaler's), as gardener v1.149.3 ships them in `example/seed-crds/`, read
//! from the Go module cache (`go mod download`, where `hack/envtest.sh` fetched gardener) and
//! installed into a test API server, so what we render for a seed meets the real schemas.

use std::path::PathBuf;

use gardener_extension_node::devenv;
use kube::Client;
use serde_json::Value;

/// The folder of gardener's seed CRDs in the Go module cache.
pub fn folder() -> PathBuf {
    let components = super::repo_root().join("hack/envtest/components");
    let output = std::process::Command::new("go")
        .args(["mod", "download", "-json", "github.com/gardener/gardener"])
        .current_dir(&components)
        .output()
        .expect("go runs");
    assert!(
        output.status.success(),
        "go mod download github.com/gardener/gardener: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let module: Value = serde_json::from_slice(&output.stdout).unwrap();
    PathBuf::from(module["Dir"].as_str().unwrap()).join("example/seed-crds")
}

/// Installs the seed CRDs `names` (file names without `10-crd-` and `.yaml`, e.g.
/// `monitoring.coreos.com_prometheusrules`) and waits until they are established.
pub async fn install(client: &Client, names: &[&str]) {
    let source = folder();
    let crds = tempfile::tempdir().unwrap();
    for name in names {
        let file = format!("10-crd-{name}.yaml");
        std::fs::copy(source.join(&file), crds.path().join(&file))
            .unwrap_or_else(|e| panic!("{}: {e}", source.join(&file).display()));
    }
    devenv::apply::install_crds(client, crds.path())
        .await
        .unwrap();
}
