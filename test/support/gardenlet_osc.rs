//! Test support: the node agent's part of a worker pool's OperatingSystemConfigs as gardenlet
//! v1.149.3 computes it, by gardenlet's own code: `provision-osc` of
//! `hack/envtest/components/provision-osc` (built by `hack/envtest.sh`) calls gardener's
//! `nodeinit.Config` and its gardener-node-agent component and prints the result.
//!
//! The image of the node agent comes from gardener's image vector with
//! `IMAGEVECTOR_OVERWRITE` set to the overwrite docs/operations.md gives for switching a
//! landscape's nodes, so what a test boots from is what such a landscape ships.
//!
//! [`render_reconcile`] renders the whole reconcile OSC (`<key>-original`) of a pool with
//! `reconcile-osc` of `hack/envtest/components/reconcile-osc`: gardener's `original.Config`
//! (kubelet, containerd, kernel settings, journald, root certificates, sshd-ensurer, the node
//! agent) with the labels and criConfig gardenlet's deployer adds; its images (hyperkube for
//! the kubelet binary, the pause container, the node agent) from the image vector with the
//! overwrite pointing at the test's registry.

use std::path::Path;
use std::process::Command;

use gardener_extension_node::api::OperatingSystemConfig;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{Value, json};

use super::node_agent_identity::create_or_keep;

/// A pool's node-agent content from gardenlet.
#[derive(Debug, Clone)]
pub struct GardenletOsc {
    /// The provision OSC (`metadata`, `spec`; purpose provision): the node-init script and
    /// unit, the agent's configuration, the CA, the bootstrap token and machine name
    /// placeholders.
    pub provision: Value,
    /// The node-agent component of the reconcile OSC: its unit.
    pub node_agent_units: Vec<Value>,
    /// The node-agent component of the reconcile OSC: configuration, CA and the binary as an
    /// `imageRef` file.
    pub node_agent_files: Vec<Value>,
    /// The ClusterRoleBindings gardenlet ships into the shoot for TLS bootstrapping.
    pub rbac: Vec<Value>,
}

/// What [`render`] needs.
pub struct PoolFacts<'a> {
    /// The seed namespace.
    pub namespace: &'a str,
    /// The worker pool.
    pub pool: &'a str,
    /// The node-agent Secret's name in the shoot (`<key>-init` is the provision OSC).
    pub key: &'a str,
    /// The shoot API server's URL.
    pub server_url: &'a str,
    /// Its CA (PEM).
    pub ca_pem: &'a str,
    /// The pool's Kubernetes version.
    pub kubernetes_version: &'a str,
    /// The repository and tag the image-vector overwrite gives `gardener-node-agent`.
    pub node_agent_image: (&'a str, &'a str),
}

/// Runs gardenlet's rendering for `facts` with the binaries in `assets`.
pub fn render(assets: &Path, facts: &PoolFacts) -> GardenletOsc {
    let work = tempfile::Builder::new()
        .prefix("gen-gardenlet-osc-")
        .tempdir()
        .expect("folder");
    let ca = work.path().join("ca.crt");
    std::fs::write(&ca, facts.ca_pem).expect("CA written");
    let overwrite = work.path().join("imagevector-overwrite.yaml");
    let (repository, tag) = facts.node_agent_image;
    std::fs::write(
        &overwrite,
        format!(
            "images:\n- name: gardener-node-agent\n  repository: {repository}\n  tag: \"{tag}\"\n"
        ),
    )
    .expect("overwrite written");
    let output = Command::new(assets.join("provision-osc"))
        .env("IMAGEVECTOR_OVERWRITE", &overwrite)
        .args(["--name", &format!("{}-init", facts.key)])
        .args(["--namespace", facts.namespace, "--pool", facts.pool])
        .args(["--secret-name", facts.key, "--server", facts.server_url])
        .arg("--ca-file")
        .arg(&ca)
        .args(["--kubernetes-version", facts.kubernetes_version])
        .output()
        .expect("provision-osc runs (hack/envtest.sh builds it)");
    assert!(
        output.status.success(),
        "provision-osc: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut rendered: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let mut provision = rendered["provision"].take();
    provision["metadata"]["annotations"] = json!({"gardener.cloud/operation": "reconcile"});
    let array = |value: &Value| value.as_array().cloned().unwrap_or_default();
    GardenletOsc {
        provision: json!({
            "apiVersion": provision["apiVersion"],
            "kind": provision["kind"],
            "metadata": provision["metadata"],
            "spec": provision["spec"],
        }),
        node_agent_units: array(&rendered["nodeAgent"]["units"]),
        node_agent_files: array(&rendered["nodeAgent"]["files"]),
        rbac: array(&rendered["rbac"]),
    }
}

/// What [`render_reconcile`] needs beyond [`PoolFacts`]: the shoot's values gardenlet puts
/// into a pool's reconcile OSC.
pub struct ShootFacts<'a> {
    /// The pool as the Shoot's `spec.provider.workers[]` entry (machine image, CRI, kubelet
    /// configuration, labels, update strategy).
    pub worker: &'a Value,
    /// The cluster DNS address (kubelet's `clusterDNS`).
    pub cluster_dns: &'a str,
    /// The CA kubelet trusts for client certificates (PEM; gardenlet's `ca-kubelet`).
    pub kubelet_ca_pem: &'a str,
    /// The repository and tag the image-vector overwrite gives `hyperkube` (whose `/kubelet`
    /// the OSC installs as `/opt/bin/kubelet`).
    pub hyperkube_image: (&'a str, &'a str),
    /// The repository and tag the overwrite gives `pause-container` (containerd's sandbox).
    pub pause_image: (&'a str, &'a str),
}

/// Runs gardenlet's rendering of the pool's reconcile OSC (`<key>-original`) with the binaries
/// in `assets`: the OSC as JSON, with gardenlet's `reconcile` operation annotation.
pub fn render_reconcile(assets: &Path, facts: &PoolFacts, shoot: &ShootFacts) -> Value {
    let work = tempfile::Builder::new()
        .prefix("gen-gardenlet-reconcile-osc-")
        .tempdir()
        .expect("folder");
    let (ca, kubelet_ca) = (
        work.path().join("ca.crt"),
        work.path().join("kubelet-ca.crt"),
    );
    std::fs::write(&ca, facts.ca_pem).expect("CA written");
    std::fs::write(&kubelet_ca, shoot.kubelet_ca_pem).expect("kubelet CA written");
    let overwrite = work.path().join("imagevector-overwrite.yaml");
    let entries: String = [
        ("gardener-node-agent", facts.node_agent_image),
        ("hyperkube", shoot.hyperkube_image),
        ("pause-container", shoot.pause_image),
    ]
    .iter()
    .map(|(name, (repository, tag))| {
        format!("- name: {name}\n  repository: {repository}\n  tag: \"{tag}\"\n")
    })
    .collect();
    std::fs::write(&overwrite, format!("images:\n{entries}")).expect("overwrite written");
    let output = Command::new(assets.join("reconcile-osc"))
        .env("IMAGEVECTOR_OVERWRITE", &overwrite)
        .args(["--namespace", facts.namespace, "--key", facts.key])
        .args(["--worker", &shoot.worker.to_string()])
        .args(["--kubernetes-version", facts.kubernetes_version])
        .args([
            "--server",
            facts.server_url,
            "--cluster-dns",
            shoot.cluster_dns,
        ])
        .arg("--ca-file")
        .arg(&ca)
        .arg("--kubelet-ca-file")
        .arg(&kubelet_ca)
        .output()
        .expect("reconcile-osc runs (hack/envtest.sh builds it)");
    assert!(
        output.status.success(),
        "reconcile-osc: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let osc: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let mut metadata = osc["metadata"].clone();
    metadata["annotations"] = json!({"gardener.cloud/operation": "reconcile"});
    json!({
        "apiVersion": osc["apiVersion"],
        "kind": osc["kind"],
        "metadata": metadata,
        "spec": osc["spec"],
    })
}

impl GardenletOsc {
    /// The reconcile OSC `<key>-original` of the pool: gardenlet's node-agent component,
    /// then `cri`, `files` and `units` (the node's containerd and kubelet).
    pub fn reconcile(&self, cri: Value, files: &[Value], units: &[Value]) -> Value {
        let mut metadata = self.provision["metadata"].clone();
        let name = metadata["name"].as_str().unwrap_or_default();
        metadata["name"] = json!(name.replace("-init", "-original"));
        let mut all_files = self.node_agent_files.clone();
        all_files.extend_from_slice(files);
        let mut all_units = self.node_agent_units.clone();
        all_units.extend_from_slice(units);
        json!({
            "apiVersion": self.provision["apiVersion"],
            "kind": self.provision["kind"],
            "metadata": metadata,
            "spec": {"type": self.provision["spec"]["type"], "purpose": "reconcile",
                     "criConfig": cri, "files": all_files, "units": all_units},
        })
    }

    /// gardenlet's part in the shoot for the pool's nodes to bootstrap: its TLS-bootstrapping
    /// ClusterRoleBindings (node agents get no RBAC: GRM's authorizer decides for them).
    pub async fn install_shoot_rbac(&self, shoot: &Client) {
        for binding in &self.rbac {
            let binding: ClusterRoleBinding =
                serde_json::from_value(binding.clone()).expect("a ClusterRoleBinding");
            create_or_keep(Api::all(shoot.clone()), &binding).await;
        }
    }

    /// Creates the provision OSC and `reconcile` in `namespace` of the seed, as gardenlet does.
    pub async fn create_oscs(&self, seed: &Client, namespace: &str, reconcile: &Value) {
        let oscs = Api::<OperatingSystemConfig>::namespaced(seed.clone(), namespace);
        for osc in [&self.provision, reconcile] {
            let osc: OperatingSystemConfig =
                serde_json::from_value(osc.clone()).expect("an OperatingSystemConfig");
            oscs.create(&PostParams::default(), &osc)
                .await
                .expect("OSC created");
        }
    }

    /// The node agent's image in the reconcile OSC (the `imageRef` of its binary).
    pub fn node_agent_image(&self) -> String {
        self.node_agent_files
            .iter()
            .find_map(|file| file["content"]["imageRef"]["image"].as_str())
            .unwrap_or_default()
            .to_string()
    }
}

/// `reconcile` with the node agent's binary taken from `image` instead: what gardenlet
/// writes after the image vector's `gardener-node-agent` entry changed.
pub fn with_node_agent_image(reconcile: &Value, image: &str) -> Value {
    let mut changed = reconcile.clone();
    if let Some(files) = changed["spec"]["files"].as_array_mut() {
        for file in files {
            if file["content"]["imageRef"].is_object()
                && file["path"] == "/opt/bin/gardener-node-agent"
            {
                file["content"]["imageRef"]["image"] = json!(image);
            }
        }
    }
    changed
}
