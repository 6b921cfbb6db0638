//! Registrations for a landscape's own images (`make generate-registrations`,
//! docs/operations.md#install). `hack/generate-controller-registration.sh --registry … --tag …`
//! writes the four registrations and gardenlet's node-agent image vector overwrite; every image
//! reference they lead to follows the given registry and tag, none of the defaults is left:
//!
//! - each ControllerDeployment's embedded chart (`helm.rawChart`, base64 tgz) rendered by helm
//!   with the ControllerDeployment's values, as gardenlet renders it: every `image` of every
//!   object (the operator's Deployment);
//! - where the ContainerRuntime controller runs: the rendered image vector overwrite ConfigMap,
//!   wired to the operator (`IMAGEVECTOR_OVERWRITE` names the mounted file), resolved by the
//!   operator's own image vector code, and the gVisor installation DaemonSet the operator's
//!   binary renders with it (`render containerruntime`);
//! - gardenlet's overwrite: entry `gardener-node-agent`.
//!
//! The same check on the default registrations under `example/` must report each default
//! (so a value the generator forgets to substitute fails this test), and bad input is refused.
//!
//! helm is the project's (`hack/helm.sh`, built by `hack/envtest.sh`).

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use gardener_extension_node::devenv::apply;
use gardener_extension_node::imagevector::{DEFAULT_IMAGES, ImageVector};
use kube::api::DynamicObject;
use serde_json::Value;

const REGISTRY: &str = "registry.example.test:5000/team/gne";
const TAG: &str = "v9.9.9-test";

/// The registrations the generator writes (file, release name gardenlet gives the chart).
const REGISTRATIONS: [(&str, &str); 4] = [
    ("controller-registration.yaml", "gardener-extension-node"),
    (
        "controller-registration-gvisor.yaml",
        "gardener-extension-node-gvisor",
    ),
    (
        "controller-registration-os.yaml",
        "gardener-extension-node-os",
    ),
    (
        "controller-registration-worker.yaml",
        "gardener-extension-node-worker",
    ),
];
const GARDENLET_OVERWRITE: &str = "gardenlet-imagevector-overwrite.yaml";

fn run_script(args: &[&str]) -> std::process::Output {
    Command::new("bash")
        .arg(support::repo_root().join("hack/generate-controller-registration.sh"))
        .args(args)
        .output()
        .unwrap()
}

/// Generates registrations for `REGISTRY`/`TAG` into a temporary folder.
fn generate_custom() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let output = run_script(&[
        "--registry",
        REGISTRY,
        "--tag",
        TAG,
        dir.path().to_str().unwrap(),
    ]);
    assert!(
        output.status.success(),
        "generator failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    dir
}

fn helm() -> PathBuf {
    let output = Command::new("bash")
        .arg(support::repo_root().join("hack/helm.sh"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    PathBuf::from(String::from_utf8(output.stdout).unwrap().trim())
}

fn kind(object: &DynamicObject) -> &str {
    object
        .types
        .as_ref()
        .map(|t| t.kind.as_str())
        .unwrap_or_default()
}

/// One image reference and where it was found.
#[derive(Debug)]
struct Found {
    place: String,
    /// `operator`, `gvisor-installation` or `node-agent`: which image it must be.
    image: &'static str,
    reference: String,
}

/// Everything the check looks at in a folder of registrations.
#[derive(Debug, Default)]
struct Scan {
    found: Vec<Found>,
    /// Texts in which no default may appear: rendered manifests and overwrites.
    texts: Vec<(String, String)>,
    /// Problems that are not a single reference (a missing overwrite, unwired ConfigMap).
    problems: Vec<String>,
}

/// Every string value under a key `image`, with its JSON path.
fn images_in(value: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let child_path = format!("{path}.{key}");
                match child {
                    Value::String(s) if key == "image" => out.push((child_path, s.clone())),
                    _ => images_in(child, &child_path, out),
                }
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                images_in(child, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// The operator container's `--controllers=` value of a rendered Deployment.
fn controllers(deployment: &Value) -> String {
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|a| a.as_str()?.strip_prefix("--controllers="))
        .unwrap()
        .to_string()
}

/// Whether the Deployment hands `config_map`'s `images_overwrite.yaml` to the operator as
/// `IMAGEVECTOR_OVERWRITE`.
fn overwrite_is_wired(deployment: &Value, config_map: &str) -> bool {
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let Some(path) = container["env"].as_array().and_then(|env| {
        env.iter()
            .find(|e| e["name"] == "IMAGEVECTOR_OVERWRITE")
            .and_then(|e| e["value"].as_str())
    }) else {
        return false;
    };
    let Some(volume) = pod["volumes"].as_array().and_then(|volumes| {
        volumes
            .iter()
            .find(|v| v["configMap"]["name"] == config_map)
            .and_then(|v| v["name"].as_str())
    }) else {
        return false;
    };
    container["volumeMounts"].as_array().is_some_and(|mounts| {
        mounts.iter().any(|m| {
            m["name"] == volume
                && m["mountPath"].as_str().is_some_and(|dir| {
                    Path::new(dir).join("images_overwrite.yaml") == Path::new(path)
                })
        })
    })
}

/// Renders the embedded chart of `deployment` (a ControllerDeployment) with its values as
/// release `release`, the way gardenlet does, and returns the manifests.
fn render_chart(helm: &Path, work: &Path, release: &str, deployment: &DynamicObject) -> String {
    let raw = deployment.data["helm"]["rawChart"].as_str().unwrap();
    let chart = work.join(format!("{release}.tgz"));
    std::fs::write(
        &chart,
        base64::engine::general_purpose::STANDARD
            .decode(raw)
            .unwrap(),
    )
    .unwrap();
    let values = work.join(format!("{release}-values.json"));
    let helm_values = deployment.data["helm"]
        .get("values")
        .cloned()
        .unwrap_or(Value::Null);
    std::fs::write(&values, serde_json::to_string(&helm_values).unwrap()).unwrap();
    let output = Command::new(helm)
        .args(["template", release])
        .arg(&chart)
        .args(["--namespace", &format!("extension-{release}"), "--values"])
        .arg(&values)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "helm template {release}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The gVisor installation manifests the operator's binary renders for a ContainerRuntime,
/// with `overwrite` as `IMAGEVECTOR_OVERWRITE` (none: the embedded default).
fn render_gvisor(work: &Path, overwrite: Option<&Path>) -> String {
    let object = work.join("containerruntime.json");
    let runtime = support::fixtures::container_runtime_json("shoot--p--s", "worker-a");
    std::fs::write(&object, serde_json::to_string(&runtime).unwrap()).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_gardener-extension-node"));
    command
        .args(["render", "containerruntime", "-f"])
        .arg(&object)
        .env_remove("IMAGEVECTOR_OVERWRITE")
        .env_remove("GVISOR_INSTALLATION_TEST_REPOSITORY");
    if let Some(path) = overwrite {
        command.env("IMAGEVECTOR_OVERWRITE", path);
    }
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "render containerruntime: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Names of the embedded image vector's entries.
fn default_image_names() -> Vec<String> {
    let vector: Value = serde_norway::from_str(DEFAULT_IMAGES).unwrap();
    vector["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

/// Collects every image reference the registrations in `dir` lead to.
fn scan(dir: &Path) -> Scan {
    let helm = helm();
    let work = tempfile::tempdir().unwrap();
    let mut scan = Scan::default();
    for (file, release) in REGISTRATIONS {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        let objects = apply::parse_documents(&text, file).unwrap();
        let deployment = objects
            .iter()
            .find(|o| kind(o) == "ControllerDeployment")
            .unwrap_or_else(|| panic!("{file}: no ControllerDeployment"));
        let manifests = render_chart(&helm, work.path(), release, deployment);
        scan.texts
            .push((format!("{file}: rendered chart"), manifests.clone()));
        let rendered = apply::parse_documents(&manifests, "helm template").unwrap();
        let mut images = Vec::new();
        for object in &rendered {
            let place = format!(
                "{file}: {}/{}",
                kind(object),
                object.metadata.name.as_deref().unwrap_or("?")
            );
            images_in(&serde_json::to_value(object).unwrap(), &place, &mut images);
        }
        assert!(!images.is_empty(), "{file}: the chart renders no image");
        for (place, reference) in images {
            scan.found.push(Found {
                place,
                image: "operator",
                reference,
            });
        }

        // The gVisor installation image: only where the ContainerRuntime controller runs.
        let operator = rendered
            .iter()
            .find(|o| kind(o) == "Deployment")
            .map(|o| serde_json::to_value(o).unwrap())
            .unwrap();
        if !controllers(&operator).contains("containerruntime") {
            continue;
        }
        let overwrite = rendered.iter().find(|o| {
            kind(o) == "ConfigMap"
                && o.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.ends_with("-imagevector-overwrite"))
        });
        let overwrite_file = match overwrite {
            None => {
                scan.problems.push(format!(
                    "{file}: runs the ContainerRuntime controller without an image vector overwrite"
                ));
                None
            }
            Some(config_map) => {
                let name = config_map.metadata.name.clone().unwrap();
                if !overwrite_is_wired(&operator, &name) {
                    scan.problems.push(format!(
                        "{file}: ConfigMap {name} is not the operator's IMAGEVECTOR_OVERWRITE"
                    ));
                }
                let content = config_map.data["data"]["images_overwrite.yaml"]
                    .as_str()
                    .unwrap()
                    .to_string();
                let path = work.path().join(format!("{release}-overwrite.yaml"));
                std::fs::write(&path, &content).unwrap();
                scan.texts
                    .push((format!("{file}: ConfigMap {name}"), content));
                Some(path)
            }
        };
        // As the operator resolves it: every entry of the embedded vector.
        let vector = match &overwrite_file {
            Some(path) => ImageVector::load_with_overwrite(path).unwrap(),
            None => ImageVector::from_yaml(DEFAULT_IMAGES, None).unwrap(),
        };
        for name in default_image_names() {
            scan.found.push(Found {
                place: format!("{file}: the operator's image vector, entry {name}"),
                image: "gvisor-installation",
                reference: vector.get(&name).unwrap().to_string(),
            });
        }
        // What the operator's binary renders into the shoot with it.
        let shoot = render_gvisor(work.path(), overwrite_file.as_deref());
        let mut images = Vec::new();
        for document in serde_norway::Deserializer::from_str(&shoot) {
            use serde::Deserialize;
            let value = Value::deserialize(document).unwrap();
            images_in(
                &value,
                &format!("{file}: render containerruntime"),
                &mut images,
            );
        }
        assert!(
            !images.is_empty(),
            "{file}: no image in the gVisor installation"
        );
        for (place, reference) in images {
            scan.found.push(Found {
                place,
                image: "gvisor-installation",
                reference,
            });
        }
        scan.texts
            .push((format!("{file}: render containerruntime"), shoot));
    }

    // gardenlet's overwrite for the node-agent image.
    match std::fs::read_to_string(dir.join(GARDENLET_OVERWRITE)) {
        Err(_) => scan
            .problems
            .push(format!("no {GARDENLET_OVERWRITE} for the node-agent image")),
        Ok(text) => {
            let overwrite: Value = serde_norway::from_str(&text).unwrap();
            let entries = overwrite["images"].as_array().unwrap();
            assert_eq!(entries.len(), 1, "{text}");
            assert_eq!(entries[0]["name"], "gardener-node-agent", "{text}");
            scan.found.push(Found {
                place: format!("{GARDENLET_OVERWRITE}: gardener-node-agent"),
                image: "node-agent",
                reference: format!(
                    "{}:{}",
                    entries[0]["repository"].as_str().unwrap(),
                    entries[0]["tag"].as_str().unwrap()
                ),
            });
            scan.texts.push((GARDENLET_OVERWRITE.into(), text));
        }
    }
    scan
}

/// The defaults no rendered text may contain once registry and tag are given: the chart's
/// operator image and the image vector's entries, as repositories and as `:<tag>`.
fn defaults() -> Vec<String> {
    let values: Value = serde_norway::from_str(
        &std::fs::read_to_string(
            support::repo_root().join("charts/gardener-extension-node/values.yaml"),
        )
        .unwrap(),
    )
    .unwrap();
    let mut defaults = vec![
        values["image"]["repository"].as_str().unwrap().to_string(),
        format!(":{}", values["image"]["tag"].as_str().unwrap()),
    ];
    let vector: Value = serde_norway::from_str(DEFAULT_IMAGES).unwrap();
    for entry in vector["images"].as_array().unwrap() {
        defaults.push(entry["repository"].as_str().unwrap().to_string());
        defaults.push(format!(":{}", entry["tag"].as_str().unwrap()));
    }
    defaults.sort();
    defaults.dedup();
    defaults
}

/// Every way `scan` misses `registry`/`tag`.
fn violations(scan: &Scan, registry: &str, tag: &str) -> Vec<String> {
    let mut violations = scan.problems.clone();
    for found in &scan.found {
        let expected = format!("{registry}/{}:{tag}", found.image);
        if found.reference != expected {
            violations.push(format!(
                "{}: {} (expected {expected})",
                found.place, found.reference
            ));
        }
    }
    for (place, text) in &scan.texts {
        for default in defaults() {
            if text.contains(&default) {
                violations.push(format!("{place}: contains the default {default}"));
            }
        }
    }
    violations
}

#[test]
fn every_image_follows_the_given_registry_and_tag() {
    let dir = generate_custom();
    let scanned = scan(dir.path());
    let reported = violations(&scanned, REGISTRY, TAG);
    assert!(reported.is_empty(), "{reported:#?}");

    // What was looked at: the operator in all four, the installation image in the two that run
    // the ContainerRuntime controller (resolved and rendered), the node agent once.
    let count = |image: &str| scanned.found.iter().filter(|f| f.image == image).count();
    assert_eq!(count("operator"), 4, "{:#?}", scanned.found);
    assert_eq!(
        count("gvisor-installation"),
        2 * (default_image_names().len() + 1),
        "{:#?}",
        scanned.found
    );
    assert_eq!(count("node-agent"), 1, "{:#?}", scanned.found);
    for (file, _) in REGISTRATIONS {
        let text = std::fs::read_to_string(dir.path().join(file)).unwrap();
        assert!(
            text.contains(&format!("--registry {REGISTRY} --tag {TAG}")),
            "{file}: the header names how it was generated"
        );
    }
}

/// The check finds what the generator would leave behind: run on the default registrations,
/// it reports the operator image of each file, the installation image where gVisor runs, and
/// the missing node-agent overwrite.
#[test]
fn the_check_reports_every_default_left_behind() {
    let example = scan(&support::repo_root().join("example"));
    let reported = violations(&example, REGISTRY, TAG);
    for (file, _) in REGISTRATIONS {
        assert!(
            reported
                .iter()
                .any(|v| v.starts_with(&format!("{file}: Deployment/"))
                    && v.contains("gardener-extension-node/operator:")),
            "{file}: operator image not reported: {reported:#?}"
        );
    }
    for file in [
        "controller-registration.yaml",
        "controller-registration-gvisor.yaml",
    ] {
        for what in [
            "without an image vector overwrite",
            "the operator's image vector, entry runtime-gvisor-installation: gardener-extension-node/gvisor-installation:",
            "render containerruntime",
        ] {
            assert!(
                reported
                    .iter()
                    .any(|v| v.starts_with(&format!("{file}: ")) && v.contains(what)),
                "{file}: {what} not reported: {reported:#?}"
            );
        }
    }
    assert!(
        reported
            .iter()
            .any(|v| v == &format!("no {GARDENLET_OVERWRITE} for the node-agent image")),
        "{reported:#?}"
    );

    // One value not substituted is enough: a registration whose installation image keeps the
    // default tag.
    let dir = generate_custom();
    let file = dir.path().join("controller-registration-gvisor.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let broken = text.replacen(
        &format!("gvisor-installation\"\n        tag: \"{TAG}\""),
        "gvisor-installation\"\n        tag: \"v0.1.0\"",
        1,
    );
    assert_ne!(
        broken, text,
        "the installation image's tag is where expected"
    );
    std::fs::write(&file, broken).unwrap();
    let reported = violations(&scan(dir.path()), REGISTRY, TAG);
    assert!(
        reported
            .iter()
            .any(|v| v.starts_with("controller-registration-gvisor.yaml: ")
                && v.contains(&format!("{REGISTRY}/gvisor-installation:v0.1.0"))),
        "{reported:#?}"
    );
}

/// Either flag alone takes the other's default; bad input is refused before anything is
/// written.
#[test]
fn defaults_fill_in_and_bad_references_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let output = run_script(&["--registry", REGISTRY, dir.path().to_str().unwrap()]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(dir.path().join("controller-registration-os.yaml")).unwrap();
    let version = format!("v{}", env!("CARGO_PKG_VERSION"));
    assert!(
        text.contains(&format!(
            "repository: \"{REGISTRY}/operator\"\n      tag: \"{version}\""
        )),
        "{text}"
    );

    for (flag, value, message) in [
        (
            "--registry",
            "Registry.Example/Team",
            "is not a repository prefix",
        ),
        (
            "--registry",
            "registry.example/team gne",
            "is not a repository prefix",
        ),
        ("--tag", "v1/2", "is not an image tag"),
        ("--tag", "-v1", "is not an image tag"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let output = run_script(&[&format!("{flag}={value}"), dir.path().to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{flag} {value} accepted");
        assert!(stderr.contains(message), "{flag} {value}: {stderr}");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "{flag} {value}: something was written"
        );
    }
}
