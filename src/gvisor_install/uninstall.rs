//! The `--uninstall` run: remove every runsc runtime handler of ours (every profile's) from
//! config.toml and delete their runsc config files, restart containerd if anything changed,
//! then remove every gVisor version no running sandbox uses (those in use go while the run
//! waits, [`super::installed_versions`]). See [`super`] for when it runs.

use tracing::info;

use crate::containerd::files;

use super::installed_versions;
use super::plan;
use super::{Error, Settings};

/// Removes runsc from containerd on the host described by `settings`; returns the settings
/// with the host's links resolved.
pub(super) async fn run(settings: &Settings) -> Result<Settings, Error> {
    let resolved = settings.resolve_links()?;
    remove_handlers(&resolved).await?;
    installed_versions::remove_unused(&resolved, None)?.log();
    Ok(resolved)
}

/// Removes the handlers and runsc configs, restarting containerd when that changed a file.
async fn remove_handlers(settings: &Settings) -> Result<(), Error> {
    let config_path = settings.containerd_config.host_str();
    let current = super::read_config(settings)?;
    let config_plan =
        plan::config_uninstall(current.as_deref()).map_err(|source| Error::Config {
            path: config_path.clone(),
            source,
        })?;
    // Anything at a runsc config's path counts, a link too: removing it removes the link
    // itself. The default profile's file always, the named profiles' of the handlers removed.
    let mut configs = vec![settings.runsc_config.clone()];
    configs.extend(
        config_plan
            .removed
            .iter()
            .filter(|handler| plan::profile_of(handler).is_some())
            .map(|handler| super::install::removed_profile_config(settings, handler)),
    );
    let mut present = Vec::new();
    for path in configs {
        if files::exists(&path.local).map_err(Error::Host)? {
            present.push(path);
        }
    }

    let mut changed_files = Vec::new();
    if config_plan.new_text.is_some() {
        changed_files.push(config_path.clone());
    }
    changed_files.extend(present.iter().map(|p| p.host_str()));
    let restart = super::ContainerdRestart::plan(settings, &changed_files)?;

    match &config_plan.new_text {
        Some(text) => {
            super::write_containerd_config(settings, text)?;
            info!(
                action = "removed",
                path = %config_path,
                version = config_plan.version.number(),
                removed = ?config_plan.removed,
                removed_misplaced = ?config_plan.edit.removed_misplaced,
                "containerd config: runsc runtime handlers removed"
            );
        }
        None => info!(
            action = "up-to-date",
            path = %config_path,
            "containerd config: no runsc runtime to remove"
        ),
    }

    for path in &present {
        files::remove_if_exists(&path.local).map_err(Error::Host)?;
        info!(action = "removed", path = %path.host_str(), "runsc config removed");
    }
    if present.is_empty() {
        info!(action = "up-to-date", path = %settings.runsc_config.host_str(), "no runsc config to remove");
    }

    restart.finish(settings).await
}
