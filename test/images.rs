//! The images `make images` builds and `make push-images` pushes (`hack/images.sh`): OCI image
//! layouts written without a container daemon, pushed with crane into a real OCI registry on
//! loopback (`support::registry`, crane's), and read back from there with crane:
//!
//! - each passes `crane validate` (digests, sizes, diff ids), with OCI media types;
//! - each holds exactly the files of the Dockerfile stage of the same name (root-owned, 0755),
//!   with its user, entrypoint and command, so the script and the Dockerfile cannot drift;
//! - the binary's layer is one blob in the operator and the installation image;
//! - each entrypoint, with the image's command, taken from the exported file system and run,
//!   starts the right subcommand (`operator`, `gvisor-install`, the node agent under
//!   gardener-node-agent's name);
//! - the same inputs give the same digests.
//!
//! The test packs the test build of the binary (dynamically linked: `ALLOW_DYNAMIC=1`) and
//! stand-ins for runsc and its shim; `make images` packs the static release binary and the
//! pinned gVisor, the result is in docs/operations.md#install.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use gardener_extension_node::devenv;
use serde_json::Value;
use support::registry::Registry;

const TAG: &str = "v9.9.9-test";
const IMAGES: [&str; 3] = ["operator", "gvisor-installation", "node-agent"];

/// What a Dockerfile stage puts into its image.
#[derive(Debug, Default)]
struct Stage {
    /// Destinations of its `COPY` lines.
    copies: Vec<String>,
    user: Option<String>,
    entrypoint: Option<Vec<String>>,
    cmd: Option<Vec<String>>,
}

/// The stages of the Dockerfile by name, and every `-o <path>` its builds write.
fn dockerfile() -> (BTreeMap<String, Stage>, Vec<String>) {
    let text = std::fs::read_to_string(support::repo_root().join("Dockerfile")).unwrap();
    let mut stages = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(from) = line.strip_prefix("FROM ") {
            let name = from.split(" AS ").nth(1).unwrap().trim().to_string();
            stages.insert(name.clone(), Stage::default());
            current = Some(name);
            continue;
        }
        let Some(stage) = current.as_ref().and_then(|n| stages.get_mut(n)) else {
            continue;
        };
        if let Some(copy) = line.strip_prefix("COPY ") {
            stage
                .copies
                .push(copy.split_whitespace().last().unwrap().to_string());
        } else if let Some(user) = line.strip_prefix("USER ") {
            stage.user = Some(user.trim().to_string());
        } else if let Some(json) = line.strip_prefix("ENTRYPOINT ") {
            stage.entrypoint = Some(serde_json::from_str(json).unwrap());
        } else if let Some(json) = line.strip_prefix("CMD ") {
            stage.cmd = Some(serde_json::from_str(json).unwrap());
        }
    }
    let outputs = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "-o")
        .map(|w| w[1].trim_end_matches(';').to_string())
        .collect();
    (stages, outputs)
}

fn crane(assets: &Path, args: &[&str]) -> Vec<u8> {
    let output = Command::new(assets.join("crane"))
        .arg("--insecure")
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "crane {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

fn crane_json(assets: &Path, args: &[&str]) -> Value {
    serde_json::from_slice(&crane(assets, args)).unwrap()
}

/// Runs `hack/images.sh <mode>` with `env`, returns stdout.
fn images_sh(mode: &str, env: &[(&str, &Path)], registry: &str) -> String {
    let output = Command::new("bash")
        .arg(support::repo_root().join("hack/images.sh"))
        .arg(mode)
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .env("REGISTRY", registry)
        .env("TAG", TAG)
        .env("GZIP_LEVEL", "1")
        .env("ALLOW_DYNAMIC", "1")
        .env("INSECURE", "1")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "hack/images.sh {mode}: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Stand-ins for runsc and containerd-shim-runsc-v1.
fn gvisor_stand_ins(dir: &Path) -> PathBuf {
    let gvisor = dir.join("gvisor");
    std::fs::create_dir_all(&gvisor).unwrap();
    for name in ["runsc", "containerd-shim-runsc-v1"] {
        let path = gvisor.join(name);
        std::fs::write(&path, format!("#!/bin/sh\necho {name}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    gvisor
}

/// The manifest digests `build` printed, by image.
fn printed_digests(stdout: &str) -> BTreeMap<String, String> {
    stdout
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let name = words.next()?;
            let digest = words.next()?;
            (IMAGES.contains(&name) && digest.starts_with("sha256:"))
                .then(|| (name.to_string(), digest.to_string()))
        })
        .collect()
}

/// Regular files of an exported file system: path → (mode, uid, gid), and the tar itself
/// unpacked into `root`.
fn exported(assets: &Path, reference: &str, root: &Path) -> BTreeMap<String, (u32, u64, u64)> {
    let tar_path = root.with_extension("tar");
    crane(assets, &["export", reference, tar_path.to_str().unwrap()]);
    let mut files = BTreeMap::new();
    let mut archive = tar::Archive::new(std::fs::File::open(&tar_path).unwrap());
    for entry in archive.entries().unwrap() {
        let entry = entry.unwrap();
        let header = entry.header();
        if header.entry_type().is_file() {
            let path = format!("/{}", entry.path().unwrap().display());
            files.insert(
                path,
                (
                    header.mode().unwrap() & 0o7777,
                    header.uid().unwrap(),
                    header.gid().unwrap(),
                ),
            );
        }
    }
    std::fs::create_dir_all(root).unwrap();
    tar::Archive::new(std::fs::File::open(&tar_path).unwrap())
        .unpack(root)
        .unwrap();
    files
}

#[test]
fn images_are_the_dockerfile_stages_and_run_their_subcommands() {
    let assets = devenv::resolve_assets(None, &support::repo_root()).unwrap();
    let work = tempfile::tempdir().unwrap();
    let gvisor = gvisor_stand_ins(work.path());
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_gardener-extension-node"));
    let registry = Registry::start(&assets);
    let prefix = format!("{}/team/gne", registry.host());

    // The same inputs give the same digests (a small binary: the layers' bytes do not matter).
    let small = work.path().join("small");
    std::fs::write(&small, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&small, std::fs::Permissions::from_mode(0o755)).unwrap();
    let twice: Vec<_> = ["a", "b"]
        .iter()
        .map(|run| {
            let out = work.path().join(run);
            printed_digests(&images_sh(
                "build",
                &[
                    ("BINARY", small.as_path()),
                    ("GVISOR_DIR", gvisor.as_path()),
                    ("IMAGES_DIR", out.as_path()),
                ],
                &prefix,
            ))
        })
        .collect();
    assert_eq!(twice[0].len(), 3, "{twice:?}");
    assert_eq!(twice[0], twice[1]);

    let layouts = work.path().join("images");
    let crane_binary = assets.join("crane");
    let env = [
        ("BINARY", binary.as_path()),
        ("GVISOR_DIR", gvisor.as_path()),
        ("IMAGES_DIR", layouts.as_path()),
        ("CRANE", crane_binary.as_path()),
    ];
    let built = printed_digests(&images_sh("build", &env, &prefix));
    assert_eq!(built.len(), 3, "{built:?}");
    let pushed = images_sh("push", &env, &prefix);
    for image in IMAGES {
        let line = format!("{prefix}/{image}:{TAG}  {prefix}/{image}@{}", built[image]);
        assert!(pushed.lines().any(|l| l == line), "{line} not in {pushed}");
    }
    assert_eq!(
        std::fs::read_to_string(layouts.join("pushed.txt"))
            .unwrap()
            .lines()
            .count(),
        3
    );

    let (stages, build_outputs) = dockerfile();
    let mut binary_layers = Vec::new();
    for image in IMAGES {
        let reference = format!("{prefix}/{image}:{TAG}");
        crane(&assets, &["validate", "--remote", &reference]);
        let manifest = crane_json(&assets, &["manifest", &reference]);
        assert_eq!(
            manifest["mediaType"], "application/vnd.oci.image.manifest.v1+json",
            "{image}"
        );
        let layers = manifest["layers"].as_array().unwrap();
        assert!(
            layers
                .iter()
                .all(|l| l["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"),
            "{image}: {manifest}"
        );
        if image != "node-agent" {
            binary_layers.push(layers[0]["digest"].clone());
        }

        // User, entrypoint and command as the Dockerfile's stage.
        let stage = &stages[image];
        let config = crane_json(&assets, &["config", &reference]);
        let process = &config["config"];
        assert_eq!(config["os"], "linux", "{image}");
        assert_eq!(config["architecture"], "amd64", "{image}");
        assert_eq!(
            process["User"].as_str().filter(|u| !u.is_empty()),
            stage.user.as_deref(),
            "{image}: USER"
        );
        let entrypoint: Vec<String> =
            serde_json::from_value(process["Entrypoint"].clone()).unwrap();
        assert_eq!(
            Some(&entrypoint),
            stage.entrypoint.as_ref(),
            "{image}: ENTRYPOINT"
        );
        let cmd: Option<Vec<String>> = serde_json::from_value(process["Cmd"].clone()).unwrap();
        assert_eq!(cmd, stage.cmd, "{image}: CMD");

        // Exactly the stage's files: a COPY destination is a file, or a folder holding what
        // the Dockerfile's builds write into it.
        let root = work.path().join(format!("root-{image}"));
        let files = exported(&assets, &reference, &root);
        let mut expected: Vec<String> = Vec::new();
        for destination in &stage.copies {
            let below: Vec<String> = build_outputs
                .iter()
                .filter(|o| o.starts_with(&format!("{destination}/")))
                .cloned()
                .collect();
            if below.is_empty() {
                expected.push(destination.clone());
            } else {
                expected.extend(below);
            }
        }
        expected.sort();
        assert_eq!(
            files.keys().cloned().collect::<Vec<_>>(),
            expected,
            "{image}: files"
        );
        for (path, owner_mode) in &files {
            assert_eq!(*owner_mode, (0o755, 0, 0), "{image}: {path}");
        }

        // The entrypoint with the image's command starts the right subcommand.
        let mut line: Vec<String> = entrypoint.clone();
        line.extend(cmd.unwrap_or_default());
        let program = root.join(line[0].trim_start_matches('/'));
        let output = Command::new(&program)
            .args(&line[1..])
            .arg("--help")
            .output()
            .unwrap();
        let help = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{image}: {line:?} --help: {help}");
        let usage = match image {
            "operator" => "Usage: gardener-extension-node operator",
            "gvisor-installation" => "Usage: gardener-extension-node gvisor-install",
            _ => "Usage: gardener-node-agent agent",
        };
        assert!(help.contains(usage), "{image}: {line:?} --help: {help}");
    }
    assert_eq!(binary_layers.len(), 2);
    assert_eq!(
        binary_layers[0], binary_layers[1],
        "the binary's layer is one blob"
    );
}

/// The script refuses a dynamically linked binary (a FROM-scratch image has no loader) unless
/// told otherwise, and references that are not references.
#[test]
fn the_script_refuses_a_dynamic_binary_and_bad_references() {
    let work = tempfile::tempdir().unwrap();
    let run = |env: &[(&str, &str)]| {
        let output = Command::new("bash")
            .arg(support::repo_root().join("hack/images.sh"))
            .arg("build")
            .env_remove("ALLOW_DYNAMIC")
            .env("IMAGES_DIR", work.path().join("out"))
            .env("GVISOR_DIR", work.path())
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(!output.status.success(), "{env:?} accepted");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let binary = env!("CARGO_BIN_EXE_gardener-extension-node");
    let readelf = Command::new("readelf").arg("--version").output();
    if readelf.is_ok_and(|o| o.status.success()) {
        let stderr = run(&[("BINARY", binary)]);
        assert!(stderr.contains("is dynamically linked"), "{stderr}");
    }
    let stderr = run(&[("BINARY", binary), ("REGISTRY", "Not/A Registry")]);
    assert!(stderr.contains("is not a repository prefix"), "{stderr}");
    let stderr = run(&[("BINARY", binary), ("TAG", "a/b")]);
    assert!(stderr.contains("is not an image tag"), "{stderr}");
    assert!(!work.path().join("out").exists());
}
