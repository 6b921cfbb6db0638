//! The `--uninstall` run: remove the runsc runtime from config.toml and delete runsc.toml,
//! restart containerd if either changed. Binaries stay. See [`super`] for when it runs.

use tracing::info;

use crate::containerd::files;

use super::plan::{self, BINARIES};
use super::{Error, Settings};

/// Removes runsc from containerd on the host described by `settings`.
pub(super) async fn run(settings: &Settings) -> Result<(), Error> {
    let settings = &settings.resolve_links()?;
    let config_path = settings.containerd_config.host_str();
    let current = super::read_config(settings)?;
    let config_plan =
        plan::config_uninstall(current.as_deref()).map_err(|source| Error::Config {
            path: config_path.clone(),
            source,
        })?;
    // Anything at runsc.toml's path counts, a link too: removing it removes the link itself.
    let runsc_present = files::exists(&settings.runsc_config.local).map_err(Error::Host)?;

    let mut changed_files = Vec::new();
    if config_plan.new_text.is_some() {
        changed_files.push(config_path.clone());
    }
    if runsc_present {
        changed_files.push(settings.runsc_config.host_str());
    }
    let restart = super::ContainerdRestart::plan(settings, &changed_files)?;

    match &config_plan.new_text {
        Some(text) => {
            super::write_containerd_config(settings, text)?;
            info!(
                action = "removed",
                path = %config_path,
                version = config_plan.version.number(),
                removed_misplaced = ?config_plan.edit.removed_misplaced,
                "containerd config: runsc runtime removed"
            );
        }
        None => info!(
            action = "up-to-date",
            path = %config_path,
            "containerd config: no runsc runtime to remove"
        ),
    }

    let runsc_path = settings.runsc_config.host_str();
    if files::remove_if_exists(&settings.runsc_config.local).map_err(Error::Host)? {
        info!(action = "removed", path = %runsc_path, "runsc config removed");
    } else {
        info!(action = "up-to-date", path = %runsc_path, "no runsc config to remove");
    }

    info!(
        action = "kept",
        binaries = ?BINARIES,
        dir = %settings.bin_dir.host_str(),
        "binaries kept: running gVisor sandboxes still need them"
    );

    restart.finish(settings).await
}
