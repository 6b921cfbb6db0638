//! The install run: check every input, then the binaries into their version's folder
//! ([`super::versions`]), config.toml (a runtime handler per profile, starting that version's
//! shim), the profiles' runsc config files (running that version's runsc), a containerd
//! restart when a config file changed, and the removal of versions no sandbox uses any more.
//! See [`super`] for the order and why.

use std::path::{Path, PathBuf};

use tracing::info;

use crate::containerd::files;
use crate::safe_fs;

use super::flags::{FlagsSource, Profiles, RunscFlags};
use super::installed_versions;
use super::plan::{self, BINARIES, Handler};
use super::refusal_events::{self, Refused};
use super::versions;
use super::{Error, HostPath, Settings};

/// The shim's file name.
const SHIM: &str = BINARIES[1];
/// runsc's file name.
const RUNSC: &str = BINARIES[0];

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

/// One profile to install: its handler and its runsc config file.
struct ProfileFile {
    /// `None`: the default profile.
    name: Option<String>,
    handler: String,
    path: HostPath,
    flags: RunscFlags,
}

/// What an install run leaves for the wait after it.
pub(super) struct Installed {
    /// The settings with the host's links resolved.
    pub settings: Settings,
    /// The installed version.
    pub version: String,
}

/// Installs runsc into containerd on the host described by `settings`: every profile the
/// node can run, each its runtime handler and runsc config file; handlers and files of
/// profiles no longer asked for (or refused) go; then versions nothing runs any more.
pub(super) async fn run(settings: &Settings) -> Result<Installed, Error> {
    // Everything that can be wrong with the input fails here, before any write.
    let profiles = read_flags(&settings.flags)?;
    let settings = settings.resolve_links()?;
    let version = installed_version(&settings)?;
    install_version(&settings, &version, profiles).await?;
    let cleanup = installed_versions::remove_unused(&settings, Some(&version));
    match cleanup {
        Ok(cleanup) => cleanup.log(),
        Err(error) => {
            tracing::warn!(error = %crate::error_chain::printable(&error), "removing gVisor versions no sandbox uses failed; the next look retries")
        }
    }
    Ok(Installed { settings, version })
}

/// Installs `version` (binaries, handlers, runsc configs, restart) on a resolved host.
async fn install_version(
    settings: &Settings,
    version: &str,
    profiles: Profiles,
) -> Result<(), Error> {
    let binaries = plan_binaries(settings, version)?;
    let (wanted, refused) = profile_files(settings, profiles)?;
    let current_config = super::read_config(settings)?;
    let config_path = settings.containerd_config.host_str();
    let bin_dir = settings.bin_dir.host_str();
    let handlers: Vec<Handler> = wanted
        .iter()
        .map(|p| Handler {
            name: p.handler.clone(),
            runsc_config: p.path.host_str(),
            shim: versions::binary_path(&bin_dir, version, SHIM),
        })
        .collect();
    let runsc = versions::binary_path(&bin_dir, version, RUNSC);
    let config_plan =
        plan::config_install(current_config.as_deref(), &handlers).map_err(|source| {
            Error::Config {
                path: config_path.clone(),
                source,
            }
        })?;
    // Each file rewritten unless it already is exactly this file; a link or FIFO there is
    // replaced.
    let mut writes = Vec::new();
    for profile in &wanted {
        let text = profile.flags.render_shim_config(&runsc);
        if !files::holds(&profile.path.local, text.as_bytes()).map_err(Error::Host)? {
            writes.push((profile, text));
        }
    }
    let mut removals = Vec::new();
    for handler in &config_plan.removed {
        let path = removed_profile_config(settings, handler);
        if files::exists(&path.local).map_err(Error::Host)? {
            removals.push(path);
        }
    }

    let mut changed_files = Vec::new();
    if config_plan.new_text.is_some() {
        changed_files.push(config_path.clone());
    }
    changed_files.extend(writes.iter().map(|(p, _)| p.path.host_str()));
    changed_files.extend(removals.iter().map(HostPath::host_str));
    let restart = super::ContainerdRestart::plan(settings, &changed_files)?;

    // Binaries first: containerd must not see the runtime before its shim exists.
    for binary in &binaries {
        apply_binary(binary)?;
    }
    log_config(&config_plan, &config_path, settings, &handlers)?;
    for (profile, text) in &writes {
        files::write_atomic(
            &profile.path.local,
            text.as_bytes(),
            files::DEFAULT_FILE_MODE,
        )
        .map_err(Error::Host)?;
        info!(action = "updated", profile = profile.name.as_deref().unwrap_or("default"), path = %profile.path.host_str(), flags = profile.flags.iter().count(), "runsc config written");
    }
    for profile in wanted
        .iter()
        .filter(|p| !writes.iter().any(|(w, _)| w.handler == p.handler))
    {
        info!(action = "up-to-date", profile = profile.name.as_deref().unwrap_or("default"), path = %profile.path.host_str(), "runsc config unchanged");
    }
    for path in &removals {
        files::remove_if_exists(&path.local).map_err(Error::Host)?;
        info!(action = "removed", path = %path.host_str(), "runsc config of a profile no longer installed removed");
    }
    for (profile, reason) in &refused {
        tracing::error!(
            action = "refused",
            profile = profile.as_deref().unwrap_or("default"),
            reason,
            "gVisor profile not installed on this node"
        );
    }
    // Before the restart: a refusal is reported even when the restart then fails.
    if let (Some(node), false) = (&settings.node_name, refused.is_empty()) {
        refusal_events::publish(node, &refused).await;
    }
    restart.finish(settings).await
}

/// Writes config.toml when the plan changes it and logs what happened.
fn log_config(
    config_plan: &plan::ConfigPlan,
    config_path: &str,
    settings: &Settings,
    handlers: &[Handler],
) -> Result<(), Error> {
    let handlers: Vec<&str> = handlers.iter().map(|h| h.name.as_str()).collect();
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
                handlers = ?handlers,
                removed = ?config_plan.removed,
                removed_misplaced = ?config_plan.edit.removed_misplaced,
                added_default_runtime = ?config_plan.edit.added_default_runtime,
                "containerd config: runsc runtime handlers registered"
            );
        }
        None => info!(
            action = "up-to-date",
            path = %config_path,
            version = config_plan.version.number(),
            handlers = ?handlers,
            "containerd config: runsc runtime handlers already registered"
        ),
    }
    Ok(())
}

/// The runsc config of a handler of ours being removed.
pub(super) fn removed_profile_config(settings: &Settings, handler: &str) -> HostPath {
    settings.profile_config(plan::profile_of(handler))
}

/// The profiles to install, and those refused on this node with the reason: a `kvm` profile
/// where [`Settings::kvm_device`] is not a character device. Fails when a named profile's
/// file would be another place the run writes (config.toml, the marker).
fn profile_files(
    settings: &Settings,
    profiles: Profiles,
) -> Result<(Vec<ProfileFile>, Vec<Refused>), Error> {
    let kvm = is_char_device(&settings.kvm_device);
    let mut wanted = Vec::new();
    let mut refused = Vec::new();
    for (name, flags) in profiles.iter() {
        let path = settings.profile_config(name);
        if path.local == settings.containerd_config.local
            || path.local == settings.restart_marker.local
        {
            return Err(Error::ProfileTarget {
                profile: name.unwrap_or("default").to_string(),
                path: path.host_str(),
            });
        }
        let name = name.map(str::to_string);
        if flags.iter().any(|(k, v)| k == "platform" && v == "kvm") && !kvm {
            refused.push((
                name,
                format!(
                    "platform kvm needs {} (a character device), which this node does not have",
                    settings.kvm_device.display()
                ),
            ));
            continue;
        }
        wanted.push(ProfileFile {
            handler: plan::handler_name(name.as_deref()),
            name,
            path,
            flags: flags.clone(),
        });
    }
    Ok((wanted, refused))
}

fn is_char_device(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_char_device())
}

/// Reads and validates the runsc flags of every profile. A flags file is a path in this container (links
/// followed, e.g. a mounted ConfigMap): only a regular file of at most
/// [`files::MAX_READ_BYTES`] is read, opened without blocking.
fn read_flags(source: &FlagsSource) -> Result<Profiles, Error> {
    let text = match source {
        FlagsSource::None => return Ok(Profiles::default()),
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
    Profiles::parse(&text).map_err(Error::Flags)
}

/// Checks both binaries exist in the image and returns their version.
fn installed_version(settings: &Settings) -> Result<String, Error> {
    for name in BINARIES {
        if !settings.source_dir.join(name).is_file() {
            return Err(Error::MissingBinary {
                name,
                dir: settings.source_dir.display().to_string(),
            });
        }
    }
    installed_versions::version_of_source(&settings.source_dir)
}

/// Decides what to do with each binary in the folder of `version`.
fn plan_binaries(settings: &Settings, version: &str) -> Result<Vec<Binary>, Error> {
    let folder = installed_versions::version_dir(settings, version);
    BINARIES
        .iter()
        .map(|&name| {
            let source = settings.source_dir.join(name);
            // In the resolved folder; a link at the binary's own path is not followed, the
            // copy replaces it.
            let target = HostPath {
                host: folder.host.join(name),
                local: folder.local.join(name),
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
