//! Where a run may write on the host, decided before anything is touched. Pure.
//!
//! A run writes into four places: `--bin-dir` (the two binaries), `--containerd-config`,
//! `--runsc-config` and the restart marker ([`RESTART_MARKER`]). Two rules keep
//! a mistyped flag, or a link on the host, from making one of them another or a system file:
//!
//! - **No overlap**: no two of the four may be the same path, and none may lie inside
//!   another (`--runsc-config` equal to `--containerd-config` would overwrite containerd's
//!   config with runsc's; a config inside `--bin-dir` could be a binary's name).
//! - **No system folder**: the folder written into (`--bin-dir` itself, the parent folder
//!   of each file) must not be one of [`SYSTEM_FOLDERS`] (`/etc`, `/usr/bin`, `/`, ...) nor
//!   lie inside one of [`SYSTEM_TREES`] (`/proc`, `/sys`, `/dev`, `/boot`). `--bin-dir=/etc`
//!   would drop executables into `/etc`, `--runsc-config=/etc/shadow` replace the shadow
//!   file. Folders of their own below them (`/etc/containerd`, `/var/bin/containerruntimes`)
//!   are fine.
//!
//! The run checks both rules twice: on the paths as given (from the flags alone) and on the
//! paths after the host's links are resolved inside the host root, so a link
//! `/var/bin/containerruntimes -> /etc` or `/etc/containerd/config.toml -> runsc.toml` is
//! refused like the flag that names the same place.

use std::fmt;
use std::path::{Path, PathBuf};

/// Host path of the marker that says "containerd still needs a restart" (see
/// [`super`]'s docs on crash safety).
pub const RESTART_MARKER: &str = "/var/lib/gardener-extension-node/gvisor-install.restart-pending";

/// Folders a run never writes into directly. Their own subfolders (`/etc/containerd`) are
/// allowed, except below [`SYSTEM_TREES`].
pub const SYSTEM_FOLDERS: &[&str] = &[
    "/",
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/home",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/srv",
    "/sys",
    "/tmp",
    "/usr",
    "/usr/bin",
    "/usr/lib",
    "/usr/lib32",
    "/usr/lib64",
    "/usr/libexec",
    "/usr/local",
    "/usr/local/bin",
    "/usr/local/lib",
    "/usr/local/sbin",
    "/usr/sbin",
    "/usr/share",
    "/var",
    "/var/lib",
    "/var/log",
    "/var/tmp",
];

/// Trees a run never writes anywhere into: kernel interfaces, devices and the boot loader's.
pub const SYSTEM_TREES: &[&str] = &["/boot", "/dev", "/proc", "/sys"];

/// Whether a place is a folder the run writes into or a file it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Files are written inside it (`--bin-dir`).
    Folder,
    /// Written itself (config.toml, runsc.toml, the marker).
    File,
}

/// One place a run writes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// How the user names it: `--bin-dir`, ..., `the restart marker`.
    pub name: &'static str,
    /// The host path as given.
    pub given: PathBuf,
    /// The host path checked (absolute, normal components only): `given`, or where links
    /// on the host lead from it.
    pub path: PathBuf,
    /// Folder or file.
    pub kind: Kind,
}

impl Target {
    /// `path`, or `given -> path` when links lead elsewhere (for messages).
    fn shown(&self) -> String {
        if self.given == self.path {
            self.path.display().to_string()
        } else {
            format!("{} -> {}", self.given.display(), self.path.display())
        }
    }

    /// The folder the run writes into for this target.
    fn folder(&self) -> &Path {
        match self.kind {
            Kind::Folder => &self.path,
            Kind::File => self.path.parent().unwrap_or(Path::new("/")),
        }
    }
}

/// Whether the checked paths are the flags' own or the ones links on the host lead to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// As given on the command line.
    Given,
    /// After following links on the host (inside the host root).
    Resolved,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stage::Given => Ok(()),
            Stage::Resolved => f.write_str(" (after following links on the host)"),
        }
    }
}

/// Why the places of a run were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// Two places are the same path, or one lies inside the other.
    #[error("{name} ({path}) {relation} {other} ({other_path}){stage}; give each its own path")]
    Overlap {
        /// The first place.
        name: &'static str,
        /// Its path (`given -> resolved` when links lead elsewhere).
        path: String,
        /// `is the same path as` or `lies inside`.
        relation: &'static str,
        /// The other place.
        other: &'static str,
        /// Its path.
        other_path: String,
        /// Given or resolved.
        stage: Stage,
    },
    /// A place writes into a system folder.
    #[error(
        "{name} ({path}) writes into the system folder {folder}{stage}; use a path of its own, such as the default {example}"
    )]
    SystemFolder {
        /// The place.
        name: &'static str,
        /// Its path (`given -> resolved` when links lead elsewhere).
        path: String,
        /// The system folder it writes into (or below).
        folder: String,
        /// Where such a place belongs by default.
        example: &'static str,
        /// Given or resolved.
        stage: Stage,
    },
}

/// Checks `targets` against both rules (see the module docs); the first violation found.
/// Of two equal places the one listed first is named first.
pub fn check(targets: &[Target], stage: Stage) -> Result<(), TargetError> {
    for target in targets {
        check_folder(target, stage)?;
    }
    for (index, a) in targets.iter().enumerate() {
        for b in &targets[index + 1..] {
            check_pair(a, b, stage)?;
        }
    }
    Ok(())
}

fn check_folder(target: &Target, stage: Stage) -> Result<(), TargetError> {
    let folder = target.folder();
    let exact = SYSTEM_FOLDERS
        .iter()
        .find(|system| folder == Path::new(system));
    let inside = || {
        SYSTEM_TREES
            .iter()
            .find(|tree| folder.starts_with(Path::new(tree)))
    };
    match exact.or_else(inside) {
        Some(system) => Err(TargetError::SystemFolder {
            name: target.name,
            path: target.shown(),
            folder: (*system).to_string(),
            example: default_for(target.name),
            stage,
        }),
        None => Ok(()),
    }
}

fn check_pair(a: &Target, b: &Target, stage: Stage) -> Result<(), TargetError> {
    let (inner, outer, relation) = if a.path == b.path {
        (a, b, "is the same path as")
    } else if a.path.starts_with(&b.path) {
        (a, b, "lies inside")
    } else if b.path.starts_with(&a.path) {
        (b, a, "lies inside")
    } else {
        return Ok(());
    };
    Err(TargetError::Overlap {
        name: inner.name,
        path: inner.shown(),
        relation,
        other: outer.name,
        other_path: outer.shown(),
        stage,
    })
}

/// The default place for the flag `name` (for the error's hint).
fn default_for(name: &str) -> &'static str {
    match name {
        "--bin-dir" => "/var/bin/containerruntimes",
        "--containerd-config" => "/etc/containerd/config.toml",
        "--runsc-config" => "/etc/containerd/runsc.toml",
        _ => RESTART_MARKER,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(bin: &str, config: &str, runsc: &str, marker: &str) -> Vec<Target> {
        let target = |name, path: &str, kind| Target {
            name,
            given: PathBuf::from(path),
            path: PathBuf::from(path),
            kind,
        };
        // In the order `Settings::targets` lists them.
        vec![
            target("--bin-dir", bin, Kind::Folder),
            target("--runsc-config", runsc, Kind::File),
            target("--containerd-config", config, Kind::File),
            target("the restart marker", marker, Kind::File),
        ]
    }

    const MARKER: &str = super::RESTART_MARKER;

    #[test]
    fn the_defaults_and_their_usual_variants_pass() {
        for (bin, config, runsc) in [
            (
                "/var/bin/containerruntimes",
                "/etc/containerd/config.toml",
                "/etc/containerd/runsc.toml",
            ),
            (
                "/opt/bin",
                "/usr/share/containerd/config.toml",
                "/etc/gvisor/runsc.toml",
            ),
        ] {
            assert_eq!(
                check(&targets(bin, config, runsc, MARKER), Stage::Given),
                Ok(())
            );
        }
    }

    #[test]
    fn equal_or_nested_places_are_refused() {
        let error = check(
            &targets(
                "/var/bin/containerruntimes",
                "/etc/containerd/config.toml",
                "/etc/containerd/config.toml",
                MARKER,
            ),
            Stage::Resolved,
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "--runsc-config (/etc/containerd/config.toml) is the same path as --containerd-config (/etc/containerd/config.toml) (after following links on the host); give each its own path"
        );
        let mut linked = targets(
            "/var/bin/containerruntimes",
            "/etc/containerd/config.toml",
            "/etc/containerd/runsc.toml",
            MARKER,
        );
        linked[2].path = PathBuf::from("/etc/containerd/runsc.toml");
        assert_eq!(
            check(&linked, Stage::Resolved).unwrap_err().to_string(),
            "--runsc-config (/etc/containerd/runsc.toml) is the same path as --containerd-config (/etc/containerd/config.toml -> /etc/containerd/runsc.toml) (after following links on the host); give each its own path"
        );
        for (bin, config, runsc, marker, inner, outer) in [
            (
                "/var/bin/containerruntimes",
                "/var/bin/containerruntimes/runsc",
                "/etc/containerd/runsc.toml",
                MARKER,
                "--containerd-config",
                "--bin-dir",
            ),
            (
                "/var/bin/x",
                "/etc/containerd/config.toml",
                "/etc/containerd/config.toml/runsc.toml",
                MARKER,
                "--runsc-config",
                "--containerd-config",
            ),
            (
                "/var/lib/gardener-extension-node",
                "/etc/containerd/config.toml",
                "/etc/containerd/runsc.toml",
                MARKER,
                "the restart marker",
                "--bin-dir",
            ),
            (
                "/var/bin/x",
                "/etc/containerd/config.toml",
                MARKER,
                MARKER,
                "--runsc-config",
                "the restart marker",
            ),
        ] {
            match check(&targets(bin, config, runsc, marker), Stage::Given) {
                Err(TargetError::Overlap { name, other, .. }) => {
                    assert_eq!((name, other), (inner, outer), "{bin} {config} {runsc}")
                }
                other => panic!("{bin} {config} {runsc}: expected an overlap, got {other:?}"),
            }
        }
    }

    #[test]
    fn system_folders_are_refused() {
        for (bin, config, runsc, refused, folder) in [
            (
                "/etc",
                "/etc/containerd/config.toml",
                "/etc/containerd/runsc.toml",
                "--bin-dir",
                "/etc",
            ),
            (
                "/usr/bin",
                "/etc/containerd/config.toml",
                "/etc/containerd/runsc.toml",
                "--bin-dir",
                "/usr/bin",
            ),
            (
                "/",
                "/etc/containerd/config.toml",
                "/etc/containerd/runsc.toml",
                "--bin-dir",
                "/",
            ),
            (
                "/proc/self/cwd",
                "/etc/containerd/config.toml",
                "/etc/containerd/runsc.toml",
                "--bin-dir",
                "/proc",
            ),
            (
                "/var/bin/containerruntimes",
                "/etc/containerd/config.toml",
                "/etc/shadow",
                "--runsc-config",
                "/etc",
            ),
            (
                "/var/bin/containerruntimes",
                "/config.toml",
                "/etc/containerd/runsc.toml",
                "--containerd-config",
                "/",
            ),
            (
                "/var/bin/containerruntimes",
                "/etc/containerd/config.toml",
                "/dev/shm/gvisor/runsc.toml",
                "--runsc-config",
                "/dev",
            ),
        ] {
            match check(&targets(bin, config, runsc, MARKER), Stage::Given) {
                Err(TargetError::SystemFolder {
                    name, folder: got, ..
                }) => assert_eq!((name, got.as_str()), (refused, folder), "{bin} {runsc}"),
                other => panic!("{bin} {runsc}: expected a system folder, got {other:?}"),
            }
        }
        let error = check(
            &targets(
                "/etc",
                "/etc/containerd/config.toml",
                "/etc/containerd/runsc.toml",
                MARKER,
            ),
            Stage::Given,
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "--bin-dir (/etc) writes into the system folder /etc; use a path of its own, such as the default /var/bin/containerruntimes"
        );
    }
}
