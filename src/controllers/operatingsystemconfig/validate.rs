//! Checks of an OperatingSystemConfig's units and files that both renderers run before
//! anything else (pure). What a node agent would refuse, or what no node could apply, is a
//! configuration error at the seed — a `lastError` gardenlet shows — instead of a Secret
//! shipped to every node of the pool and refused there.
//!
//! Rules (the agent's, `agent::pipeline::osc::validate`; paths and names from `osc_rules`):
//! - a file path is absolute and normalised: starts with `/`, does not end with `/`, has no
//!   empty, `.` or `..` component, no control character;
//! - file permissions are mode bits (at most `0o7777`);
//! - each file path appears once among the OSC's files (per `hostName`);
//! - a unit's `filePaths` name files of the OSC (its own files or the extension files added
//!   for its OS type), with the same path rules;
//! - unit and drop-in names are plain file names, unit names with a systemd unit suffix.

use std::collections::{BTreeMap, BTreeSet};

use crate::api::operatingsystemconfig::{ContainerdConfig, File, Unit};
use crate::osc_rules::{NameKind, path_problem};

/// The most a Secret's data may hold (the API server's limit).
pub const MAX_SECRET_DATA_BYTES: usize = 1024 * 1024;

/// Why units or files are refused. Every variant needs a spec change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// A file path that is not absolute and normalised.
    #[error("file path {path:?} {reason}")]
    Path {
        /// The path (shortened).
        path: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// `imageRef` content without an image or with a path in the image that is not absolute
    /// and normalised.
    #[error("file {path}: imageRef {reason}")]
    ImageRef {
        /// The file's path.
        path: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A `criConfig.containerd` entry the node agent cannot apply.
    #[error("criConfig.containerd: {0}")]
    Containerd(String),
    /// Permissions beyond the mode bits.
    #[error("file {path}: permissions {mode} are more than mode bits (at most 4095 = 0o7777)")]
    Permissions {
        /// The path.
        path: String,
        /// The value.
        mode: u32,
    },
    /// Two files with one path.
    #[error("file path {path} appears {count} times; each file path may appear only once")]
    DuplicatePath {
        /// The path.
        path: String,
        /// How often.
        count: usize,
    },
    /// A `filePaths` entry that is not a valid path or names no file of the OSC.
    #[error("unit {unit}: filePaths entry {path:?} {reason}")]
    UnitFilePath {
        /// The unit.
        unit: String,
        /// The entry (shortened).
        path: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A unit or drop-in name that is not a plain file name, or a unit name systemd does not
    /// take for a unit.
    #[error("{what} name {name:?} {reason}")]
    Name {
        /// `unit` or `drop-in`.
        what: &'static str,
        /// The name (shortened).
        name: String,
        /// What is wrong.
        reason: &'static str,
    },
}

fn shorten(text: &str) -> String {
    match text.char_indices().nth(256) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

fn check_name(kind: NameKind, name: &str) -> Result<(), SpecError> {
    match kind.problem(name) {
        Some(reason) => Err(SpecError::Name {
            what: kind.as_str(),
            name: shorten(name),
            reason,
        }),
        None => Ok(()),
    }
}

/// Checks `units` and `files`; `extension_files` are files the OS type adds, which units may
/// name in `filePaths`. Reports the first problem.
pub fn validate(units: &[Unit], files: &[File], extension_files: &[File]) -> Result<(), SpecError> {
    // Per host: files with different `hostName`s may share a path.
    let mut counts: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for file in files {
        if let Some(reason) = path_problem(&file.path) {
            return Err(SpecError::Path {
                path: shorten(&file.path),
                reason,
            });
        }
        if let Some(mode) = file.permissions.filter(|mode| *mode > 0o7777) {
            return Err(SpecError::Permissions {
                path: shorten(&file.path),
                mode,
            });
        }
        if let Some(image) = &file.content.image_ref {
            let reason = if image.image.is_empty() {
                Some("needs an image")
            } else {
                path_problem(&image.file_path_in_image).map(|_| {
                    "filePathInImage must be absolute and normalised (no '.', '..' or empty components)"
                })
            };
            if let Some(reason) = reason {
                return Err(SpecError::ImageRef {
                    path: shorten(&file.path),
                    reason,
                });
            }
        }
        let host = file.host_name.as_deref().unwrap_or_default();
        *counts.entry((file.path.as_str(), host)).or_default() += 1;
    }
    if let Some(((path, _), count)) = counts.iter().find(|(_, count)| **count > 1) {
        return Err(SpecError::DuplicatePath {
            path: (*path).to_string(),
            count: *count,
        });
    }
    let known: BTreeSet<&str> = files
        .iter()
        .chain(extension_files)
        .map(|f| f.path.as_str())
        .collect();
    for unit in units {
        check_name(NameKind::Unit, &unit.name)?;
        for drop_in in &unit.drop_ins {
            check_name(NameKind::DropIn, &drop_in.name)?;
        }
        for path in &unit.file_paths {
            let reason = path_problem(path).or_else(|| {
                (!known.contains(path.as_str()))
                    .then_some("names no file of this OperatingSystemConfig")
            });
            if let Some(reason) = reason {
                return Err(SpecError::UnitFilePath {
                    unit: unit.name.clone(),
                    path: shorten(path),
                    reason,
                });
            }
        }
    }
    Ok(())
}

/// Checks `criConfig.containerd` as the node agent does: plugin paths of non-empty keys,
/// plugin values that are objects, registry upstreams that are plain names (they become
/// folder names under the hosts dir).
pub fn validate_containerd(config: Option<&ContainerdConfig>) -> Result<(), SpecError> {
    let Some(config) = config else {
        return Ok(());
    };
    for plugin in &config.plugins {
        if plugin.path.is_empty() || plugin.path.iter().any(String::is_empty) {
            return Err(SpecError::Containerd(format!(
                "plugin path {:?} must be non-empty keys",
                plugin.path.iter().map(|k| shorten(k)).collect::<Vec<_>>()
            )));
        }
        if plugin.values.as_ref().is_some_and(|v| !v.is_object()) {
            return Err(SpecError::Containerd(format!(
                "plugin {:?}: values must be an object",
                plugin.path.iter().map(|k| shorten(k)).collect::<Vec<_>>()
            )));
        }
    }
    for registry in &config.registries {
        let name = registry.upstream.as_str();
        let plain = !name.is_empty()
            && name != "."
            && name != ".."
            && !name.contains('/')
            && !name.contains('\0');
        if !plain {
            return Err(SpecError::Containerd(format!(
                "registry upstream {:?} must be a plain name (no '/', not '.' or '..')",
                shorten(name)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn files(paths: &[&str]) -> Vec<File> {
        paths
            .iter()
            .map(|p| {
                serde_json::from_value(
                    json!({"path": p, "content": {"inline": {"encoding": "", "data": "x"}}}),
                )
                .unwrap_or_else(|e| panic!("{e}"))
            })
            .collect()
    }

    fn unit(name: &str, file_paths: &[&str], drop_in: &str) -> Unit {
        serde_json::from_value(json!({
            "name": name,
            "filePaths": file_paths,
            "dropIns": [{"name": drop_in, "content": "[Service]\n"}],
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// One row per rule (the bad-input table of `test/bad_input_operator.rs` runs them
    /// against a real API server).
    #[test]
    fn rules() {
        let ok = unit("a.service", &["/etc/a"], "10-a.conf");
        let extension = files(&["/etc/extension"]);
        type Row<'a> = (&'a str, Vec<File>, Vec<Unit>, Option<&'a str>);
        let rows: Vec<Row<'_>> = vec![
            (
                "valid",
                files(&["/etc/a", "/etc/b"]),
                vec![ok.clone()],
                None,
            ),
            (
                "relative path",
                files(&["etc/a"]),
                vec![],
                Some("\"etc/a\" must be absolute"),
            ),
            (
                "dot-dot",
                files(&["/etc/../root/x"]),
                vec![],
                Some("'.' or '..'"),
            ),
            ("dot", files(&["/etc/./x"]), vec![], Some("'.' or '..'")),
            (
                "double slash",
                files(&["/etc//x"]),
                vec![],
                Some("empty component"),
            ),
            (
                "trailing slash",
                files(&["/etc/x/"]),
                vec![],
                Some("not end with '/'"),
            ),
            (
                "control character",
                files(&["/etc/x\ny"]),
                vec![],
                Some("control characters"),
            ),
            ("root", files(&["/"]), vec![], Some("not end with '/'")),
            (
                "duplicate",
                files(&["/etc/a", "/etc/a"]),
                vec![],
                Some("/etc/a appears 2 times"),
            ),
            (
                "filePaths naming an absent file",
                files(&["/etc/a"]),
                vec![unit("a.service", &["/etc/absent"], "10-a.conf")],
                Some("unit a.service: filePaths entry \"/etc/absent\" names no file"),
            ),
            (
                "filePaths naming an extension file",
                files(&["/etc/a"]),
                vec![unit("a.service", &["/etc/extension"], "10-a.conf")],
                None,
            ),
            (
                "filePaths not normalised",
                files(&["/etc/a"]),
                vec![unit("a.service", &["/etc/../etc/a"], "10-a.conf")],
                Some("'.' or '..'"),
            ),
            (
                "unit name with a slash",
                files(&["/etc/a"]),
                vec![unit("../a.service", &[], "10-a.conf")],
                Some("unit name \"../a.service\""),
            ),
            (
                "permissions beyond mode bits",
                vec![{
                    let mut file = files(&["/etc/a"]).remove(0);
                    file.permissions = Some(0o10644);
                    file
                }],
                vec![],
                Some("file /etc/a: permissions 4516 are more than mode bits"),
            ),
            (
                "unit name without a suffix",
                files(&["/etc/a"]),
                vec![unit("example", &[], "10-a.conf")],
                Some("unit name \"example\" needs a systemd unit suffix"),
            ),
            (
                "drop-in name dot-dot",
                files(&["/etc/a"]),
                vec![unit("a.service", &[], "..")],
                Some("drop-in name \"..\""),
            ),
        ];
        for (name, files, units, expected) in rows {
            let result = validate(&units, &files, &extension);
            match expected {
                None => assert_eq!(result, Ok(()), "{name}"),
                Some(text) => {
                    let message = result.err().map(|e| e.to_string()).unwrap_or_default();
                    assert!(message.contains(text), "{name}: {message}");
                }
            }
        }
    }

    #[test]
    fn image_refs_and_containerd_settings_follow_the_agents_rules() {
        let image = |image: &str, path: &str| -> Vec<File> {
            vec![
                serde_json::from_value(json!({"path": "/opt/bin/x", "content": {"imageRef": {"image": image, "filePathInImage": path}}}))
                    .unwrap_or_else(|e| panic!("{e}")),
            ]
        };
        assert_eq!(validate(&[], &image("registry/x:1", "/x"), &[]), Ok(()));
        let error = |r: Result<(), SpecError>| r.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error(validate(&[], &image("", "/x"), &[])).contains("imageRef needs an image"));
        assert!(error(validate(&[], &image("r/x:1", "x/../y"), &[])).contains("filePathInImage"));

        let containerd = |mut value: serde_json::Value| -> ContainerdConfig {
            value["sandboxImage"] = json!("registry.k8s.io/pause:3.10");
            serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"))
        };
        let ok = containerd(
            json!({"plugins": [{"path": ["a", "b"], "values": {"k": "v"}}], "registries": [{"upstream": "docker.io"}]}),
        );
        assert_eq!(validate_containerd(Some(&ok)), Ok(()));
        assert_eq!(validate_containerd(None), Ok(()));
        for (bad, text) in [
            (json!({"plugins": [{"path": []}]}), "must be non-empty keys"),
            (
                json!({"plugins": [{"path": ["a", ""]}]}),
                "must be non-empty keys",
            ),
            (
                json!({"plugins": [{"path": ["a"], "values": 5}]}),
                "values must be an object",
            ),
            (
                json!({"registries": [{"upstream": "../etc"}]}),
                "must be a plain name",
            ),
            (
                json!({"registries": [{"upstream": ""}]}),
                "must be a plain name",
            ),
        ] {
            let message = error(validate_containerd(Some(&containerd(bad.clone()))));
            assert!(message.contains(text), "{bad}: {message}");
        }
    }

    #[test]
    fn long_values_are_shortened_in_messages() {
        let long = format!("relative/{}", "x".repeat(100_000));
        let message = validate(&[], &files(&[&long]), &[])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(message.len() < 400, "{} bytes", message.len());
    }
}
