//! The install run: check every input, then binaries, config.toml, runsc.toml, and a
//! containerd restart when a config file changed. See [`super`] for the order and why.

use std::path::{Path, PathBuf};

use tracing::info;

use crate::containerd::files;
use crate::safe_fs;

use super::flags::{FlagsSource, RunscFlags};
use super::plan::{self, BINARIES};
use super::{Error, HostPath, Settings};

/// Mode of the installed binaries.
const BINARY_MODE: u32 = 0o755;

/// What to do with one binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BinaryAction {
    /// Absent or different content: copy.
    Install,
    /// Same content, wrong mode: chmod.
    FixMode,
    /// Nothing.
    UpToDate,
}

struct Binary {
    name: &'static str,
    source: PathBuf,
    target: HostPath,
    action: BinaryAction,
}

/// Installs runsc into containerd on the host described by `settings`.
pub(super) async fn run(settings: &Settings) -> Result<(), Error> {
    // Everything that can be wrong with the input fails here, before any write.
    let flags = read_flags(&settings.flags)?;
    let settings = &settings.resolve_links()?;
    let binaries = plan_binaries(settings)?;
    let current_config = super::read_config(settings)?;
    let config_path = settings.containerd_config.host_str();
    let config_plan =
        plan::config_install(current_config.as_deref(), &settings.runsc_config.host_str())
            .map_err(|source| Error::Config {
                path: config_path.clone(),
                source,
            })?;
    // Rewritten unless it already is exactly this file; a link or FIFO there is replaced.
    let wanted_runsc = flags.render_runsc_toml();
    let runsc_toml = (!files::holds(&settings.runsc_config.local, wanted_runsc.as_bytes())
        .map_err(Error::Host)?)
    .then_some(wanted_runsc);

    let mut changed_files = Vec::new();
    if config_plan.new_text.is_some() {
        changed_files.push(config_path.clone());
    }
    if runsc_toml.is_some() {
        changed_files.push(settings.runsc_config.host_str());
    }
    let restart = super::ContainerdRestart::plan(settings, &changed_files)?;

    // Binaries first: containerd must not see the runtime before its shim exists.
    for binary in &binaries {
        apply_binary(binary)?;
    }

    match &config_plan.new_text {
        Some(text) => {
            super::write_containerd_config(settings, text)?;
            let action = if config_plan.from_default {
                "created"
            } else if !config_plan.edit.removed_misplaced.is_empty() {
                "repaired"
            } else {
                "updated"
            };
            info!(
                action,
                path = %config_path,
                version = config_plan.version.number(),
                removed_misplaced = ?config_plan.edit.removed_misplaced,
                added_default_runtime = ?config_plan.edit.added_default_runtime,
                "containerd config: runsc runtime registered"
            );
        }
        None => info!(
            action = "up-to-date",
            path = %config_path,
            version = config_plan.version.number(),
            "containerd config: runsc runtime already registered"
        ),
    }

    let runsc_path = settings.runsc_config.host_str();
    match &runsc_toml {
        Some(text) => {
            files::write_atomic(
                &settings.runsc_config.local,
                text.as_bytes(),
                files::DEFAULT_FILE_MODE,
            )
            .map_err(Error::Host)?;
            info!(action = "updated", path = %runsc_path, flags = flags.iter().count(), "runsc config written");
        }
        None => info!(action = "up-to-date", path = %runsc_path, "runsc config unchanged"),
    }

    restart.finish(settings).await
}

/// Reads and validates the runsc flags. A flags file is a path in this container (links
/// followed, e.g. a mounted ConfigMap): only a regular file of at most
/// [`files::MAX_READ_BYTES`] is read, opened without blocking.
fn read_flags(source: &FlagsSource) -> Result<RunscFlags, Error> {
    let text = match source {
        FlagsSource::None => return Ok(RunscFlags::default()),
        FlagsSource::Inline(text) => text.clone(),
        FlagsSource::File(path) => {
            let shown = path.display().to_string();
            let file_error = |source| Error::FlagsFile {
                path: shown.clone(),
                source,
            };
            let bytes =
                safe_fs::read_following_links(path, files::MAX_READ_BYTES).map_err(file_error)?;
            String::from_utf8(bytes).map_err(|_| {
                file_error(safe_fs::SafeFsError::Io {
                    action: "reading (not UTF-8)",
                    path: shown.clone(),
                    source: std::io::ErrorKind::InvalidData.into(),
                })
            })?
        }
    };
    RunscFlags::parse(&text).map_err(Error::Flags)
}

/// Checks both binaries exist in the image and decides what to do with each.
fn plan_binaries(settings: &Settings) -> Result<Vec<Binary>, Error> {
    BINARIES
        .iter()
        .map(|&name| {
            let source = settings.source_dir.join(name);
            if !source.is_file() {
                return Err(Error::MissingBinary {
                    name,
                    dir: settings.source_dir.display().to_string(),
                });
            }
            // In the resolved folder; a link at the binary's own path is not followed, the
            // copy replaces it.
            let target = HostPath {
                host: settings.bin_dir.host.join(name),
                local: settings.bin_dir.local.join(name),
            };
            let action = binary_action(&source, &target.local)?;
            Ok(Binary {
                name,
                source,
                target,
                action,
            })
        })
        .collect()
}

fn binary_action(source: &Path, target: &Path) -> Result<BinaryAction, Error> {
    if !files::same_content(source, target).map_err(Error::Host)? {
        return Ok(BinaryAction::Install);
    }
    let mode = files::mode_of(target).map_err(Error::Host)?;
    Ok(if mode == Some(BINARY_MODE) {
        BinaryAction::UpToDate
    } else {
        BinaryAction::FixMode
    })
}

fn apply_binary(binary: &Binary) -> Result<(), Error> {
    let path = binary.target.host_str();
    match binary.action {
        BinaryAction::Install => {
            files::copy_atomic(&binary.source, &binary.target.local, BINARY_MODE)
                .map_err(Error::Host)?;
            info!(action = "installed", binary = binary.name, path = %path, "binary installed");
        }
        BinaryAction::FixMode => {
            files::set_mode(&binary.target.local, BINARY_MODE).map_err(Error::Host)?;
            info!(action = "mode-fixed", binary = binary.name, path = %path, "binary mode set to 0755");
        }
        BinaryAction::UpToDate => {
            info!(action = "up-to-date", binary = binary.name, path = %path, "binary up to date");
        }
    }
    Ok(())
}
