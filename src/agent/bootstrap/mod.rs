//! `gardener-node-agent bootstrap`: the first run on a new node, started by gardenlet's
//! `gardener-node-init` after it copied the binary out of the `gardener-node-agent` image
//! (`docs/agent.md#bootstrap`). It installs and starts the node agent's unit and ends; the
//! agent then gets its credentials and applies the OSC. [`rules`] holds the unit and the data
//! volume choice (pure), [`steps`] the I/O.

pub mod rules;
pub mod steps;

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use tracing::info;

use crate::agent::config::{ConfigError, read_configuration, resolve_config_dir};
use crate::agent::ports::host::{HostError, SystemHost};
use crate::agent::ports::paths::{DEFAULT_BASE_DIR, Paths};

/// Flags of `bootstrap` (gardener-node-agent's: `--config-dir`).
#[derive(Debug, Clone, Args)]
pub struct BootstrapArgs {
    /// Folder with the configuration and credentials gardenlet's user data wrote.
    #[arg(long, env = "NODE_AGENT_CONFIG_DIR", default_value = DEFAULT_BASE_DIR)]
    pub config_dir: PathBuf,

    /// The NodeAgentConfiguration file (default: the newest `config-*.yaml` or `config.yaml`
    /// in the config dir, as the agent picks it).
    #[arg(long, env = "NODE_AGENT_CONFIG_FILE")]
    pub config_file: Option<PathBuf>,

    /// D-Bus address of the system bus (systemd).
    #[arg(
        long,
        env = "SYSTEM_BUS_ADDRESS",
        default_value = "unix:path=/run/dbus/system_bus_socket"
    )]
    pub system_bus_address: String,
}

/// Why the bootstrap failed (gardener-node-init fails with it and systemd retries the unit).
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// The configuration could not be read.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A step failed.
    #[error("{step}")]
    Step {
        /// What was being done.
        step: &'static str,
        /// Cause.
        #[source]
        source: HostError,
    },
    /// The config dir cannot be written into the node agent's unit.
    #[error(transparent)]
    Unit(#[from] rules::UnitRefused),
    /// `bootstrap.kubeletDataVolumeSize` is set but no disk fits.
    #[error(
        "no kubelet data device: no unformatted, unmounted disk of exactly {0} bytes (bootstrap.kubeletDataVolumeSize)"
    )]
    NoDataDevice(i64),
}

/// Runs the bootstrap (see the module docs).
pub async fn run(args: BootstrapArgs) -> Result<(), BootstrapError> {
    // The unit names the config dir as given (a link keeps working if it is moved); the
    // bootstrap works in the folder it leads to (`crate::agent::config` module docs).
    let unit_config_dir = unit_config_dir(&args.config_dir)?;
    let config_dir = resolve_config_dir(&args.config_dir)?;
    let (config_file, config) = read_configuration(&config_dir, args.config_file)?;
    info!(config = %config_file.display(), "starting the bootstrap");
    let paths = Paths::new(&config_dir);
    let host = SystemHost::new(
        args.system_bus_address,
        Duration::from_secs(60),
        String::new(),
        String::new(),
        paths.temp(),
    );
    steps::temp_dir(&host, &paths)?;
    if let Some(size) = config
        .bootstrap
        .as_ref()
        .and_then(|b| b.kubelet_data_volume_size)
    {
        steps::kubelet_data_volume(&host, &paths, size).await?;
    }
    steps::install_unit(&host, &paths, &unit_config_dir).await?;
    steps::check_connectivity(&config, &paths).await;
    info!("bootstrap finished");
    Ok(())
}

/// `--config-dir` as the unit's ExecStart names it: as given, made absolute (systemd starts
/// the agent in `/`). Checked before anything is done: UTF-8 without control characters
/// ([`rules::UnitRefused`]).
fn unit_config_dir(config_dir: &Path) -> Result<String, BootstrapError> {
    let absolute = std::path::absolute(config_dir).map_err(|source| ConfigError::Read {
        path: config_dir.display().to_string(),
        source,
    })?;
    let text = absolute
        .to_str()
        .ok_or_else(|| rules::UnitRefused::NotUtf8(absolute.display().to_string()))?;
    rules::node_agent_unit(text)?;
    Ok(text.to_string())
}
