//! The agent's settings: command-line flags ([`AgentArgs`]) plus the NodeAgentConfiguration
//! file gardenlet (or our operator) writes into `--config-dir`, resolved once at start into
//! [`Settings`].
//!
//! Which config file: gardener-node-agent reads `config-<its own version>.yaml`, a name it
//! derives from the version baked into its binary. This agent is not that binary, so it takes
//! `--config-file` when given, otherwise the most recently written `config-*.yaml` (or
//! `config.yaml`) in the folder ([`choose_config_file`]): after an update gardenlet writes the
//! new version's file next to the old one, and the newest one is the one it means.
//!
//! The config dir may be a symbolic link (or have one on its way), as gardener-node-agent,
//! which uses it as given, allows — `/var/lib/gardener-node-agent` on a data disk, say. It
//! is resolved once at start ([`resolve_config_dir`]) and the agent works in the resolved
//! folder from then on: the folder is named by the agent's own unit (root's), and inside it,
//! where every file is read and written through [`crate::safe_fs`], links stay refused.
//! The configuration file is read bounded ([`MAX_CONFIG_BYTES`]) and never from a FIFO or a
//! device; one found in the config dir not through a link, one given by `--config-file`
//! following links (whoever names it may point at a mounted ConfigMap's file).

use crate::agent::pipeline::drift::rules::DriftMode;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use clap::Args;

use crate::api::nodeagent::{NodeAgentConfiguration, TokenSecretSyncConfig};

use crate::agent::ports::paths::{DEFAULT_BASE_DIR, Paths};
use crate::go_duration::parse as parse_go_duration;

/// The unit gardenlet's OSC installs the node agent as.
pub const DEFAULT_UNIT_NAME: &str = "gardener-node-agent.service";
/// Shortest period upstream accepts for its controllers.
const MIN_SYNC_PERIOD: Duration = Duration::from_secs(15);

/// Flags of `gardener-extension-node agent`.
#[derive(Debug, Clone, Args)]
pub struct AgentArgs {
    /// Folder with the configuration, credentials and the agent's state.
    #[arg(long, env = "NODE_AGENT_CONFIG_DIR", default_value = DEFAULT_BASE_DIR)]
    pub config_dir: PathBuf,

    /// The NodeAgentConfiguration file [default: the newest config-*.yaml in --config-dir].
    #[arg(long, env = "NODE_AGENT_CONFIG_FILE")]
    pub config_file: Option<PathBuf>,

    /// Kubeconfig of the shoot API server; overrides clientConnection.kubeconfig and
    /// credentials/ in --config-dir.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// How often the files and unit files of the last applied OSC are compared with the disk
    /// and repaired (Go duration, e.g. 10m, 30s).
    #[arg(long, env = "DRIFT_CHECK_INTERVAL", default_value = "10m", value_parser = parse_interval)]
    pub drift_check_interval: Duration,

    /// What the agent does with drift from the applied configuration: `repair` (restarts
    /// within the rollout's budget and health hold) or `report` (log, metric, event, Node
    /// condition; the node is left as it is).
    #[arg(long, env = "DRIFT_MODE", value_enum, default_value_t = DriftMode::Repair)]
    pub drift_mode: DriftMode,

    /// Address of /metrics and /healthz [default: 127.0.0.1 and the configuration's
    /// server.metrics.port (2752)].
    #[arg(long, env = "METRICS_BIND_ADDRESS")]
    pub metrics_bind_address: Option<SocketAddr>,

    /// Host name the Node is looked up by (label kubernetes.io/hostname) [default: the
    /// kernel's host name, lower-cased].
    #[arg(long, env = "NODE_AGENT_HOSTNAME")]
    pub hostname: Option<String>,

    /// The agent's own systemd unit: when the OSC changes it, the agent exits after
    /// daemon-reload so systemd starts the new one.
    #[arg(long, env = "NODE_AGENT_UNIT", default_value = DEFAULT_UNIT_NAME)]
    pub unit_name: String,

    /// D-Bus address of the system bus (systemd).
    #[arg(
        long,
        env = "SYSTEM_BUS_ADDRESS",
        default_value = "unix:path=/run/dbus/system_bus_socket"
    )]
    pub system_bus_address: String,

    /// How long a unit start/stop/restart job is waited for (Go duration).
    #[arg(long, env = "UNIT_JOB_TIMEOUT", default_value = "60s", value_parser = parse_interval)]
    pub unit_job_timeout: Duration,

    /// containerd socket, for extracting imageRef files.
    #[arg(
        long,
        env = "CONTAINERD_ADDRESS",
        default_value = "/run/containerd/containerd.sock"
    )]
    pub containerd_address: String,

    /// containerd namespace images are pulled into.
    #[arg(long, env = "CONTAINERD_NAMESPACE", default_value = "default")]
    pub containerd_namespace: String,
}

/// A Go duration flag that must be positive.
fn parse_interval(text: &str) -> Result<Duration, String> {
    let parsed = parse_go_duration(text).map_err(|error| error.to_string())?;
    if parsed.negative || parsed.magnitude.is_zero() {
        return Err(format!("`{text}` must be a positive duration"));
    }
    Ok(parsed.magnitude)
}

/// The largest configuration file read (gardenlet's is about 1 KiB).
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file was refused or could not be read (a FIFO, too large, ...).
    #[error(transparent)]
    File(#[from] crate::safe_fs::SafeFsError),
    /// `--config-dir` is not a folder.
    #[error("--config-dir {0} is not a folder")]
    NotAFolder(String),
    /// No config file in the folder.
    #[error(
        "no config-*.yaml or config.yaml in {0}; is the node provisioned? (or pass --config-file)"
    )]
    NotFound(String),
    /// The folder or file could not be read.
    #[error("reading {path}")]
    Read {
        /// The path.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a NodeAgentConfiguration.
    #[error("{path} is not a valid NodeAgentConfiguration")]
    Parse {
        /// The file.
        path: String,
        /// Cause.
        #[source]
        source: serde_norway::Error,
    },
    /// A required or constrained value is wrong.
    #[error("{path}: {problem}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        problem: String,
    },
    /// The host name could not be read.
    #[error("reading the host name")]
    Hostname(#[source] std::io::Error),
}

/// Everything the agent runs with, resolved at start.
#[derive(Debug, Clone)]
pub struct Settings {
    /// State and unit paths.
    pub paths: Paths,
    /// The configuration file that was read.
    pub config_file: PathBuf,
    /// Its content, defaulted.
    pub config: NodeAgentConfiguration,
    /// The OSC secret in `kube-system`.
    pub secret_name: String,
    /// Written to the Node label `worker.gardener.cloud/kubernetes-version`.
    pub kubernetes_version: Option<String>,
    /// Re-check of the OSC even without events.
    pub sync_period: Duration,
    /// Token secrets to copy to files.
    pub token_sync_configs: Vec<TokenSecretSyncConfig>,
    /// Period of the token copies.
    pub token_sync_period: Duration,
    /// Period of the drift check.
    pub drift_check_interval: Duration,
    /// `--drift-mode`.
    pub drift_mode: DriftMode,
    /// Where /metrics and /healthz listen.
    pub metrics_address: SocketAddr,
    /// Serve them on the Node's `InternalIP` too, at the same port: true when no address was
    /// given (neither `--metrics-bind-address` nor `server.metrics.bindAddress`), see
    /// [`crate::agent::metrics_server`].
    pub metrics_on_node_ip: bool,
    /// This host's name (lower case).
    pub hostname: String,
    /// The host name was given by `--hostname` (so a changed kernel host name changes
    /// nothing).
    pub hostname_fixed: bool,
    /// The agent's own unit.
    pub own_unit: String,
    /// The system bus.
    pub system_bus_address: String,
    /// Unit job timeout.
    pub unit_job_timeout: Duration,
    /// containerd socket.
    pub containerd_address: String,
    /// containerd namespace.
    pub containerd_namespace: String,
    /// `--kubeconfig`.
    pub kubeconfig_flag: Option<PathBuf>,
}

/// Picks the config file among `(file name, modification time)` entries: names
/// `config.yaml` or `config-<anything>.yaml`, newest first, then the greatest name.
pub fn choose_config_file(entries: &[(String, SystemTime)]) -> Option<String> {
    entries
        .iter()
        .filter(|(name, _)| {
            name == "config.yaml"
                || (name.starts_with("config-")
                    && name.ends_with(".yaml")
                    && name.len() > "config-.yaml".len())
        })
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)))
        .map(|(name, _)| name.clone())
}

/// Reads the flags and the config file into [`Settings`].
pub fn load(args: AgentArgs) -> Result<Settings, ConfigError> {
    let AgentArgs {
        config_dir,
        config_file,
        kubeconfig,
        drift_check_interval,
        drift_mode,
        metrics_bind_address,
        hostname,
        unit_name,
        system_bus_address,
        unit_job_timeout,
        containerd_address,
        containerd_namespace,
    } = args;
    let config_dir = resolve_config_dir(&config_dir)?;
    let (config_file, config) = read_configuration(&config_dir, config_file)?;
    let display = config_file.display().to_string();
    let invalid = |problem: String| ConfigError::Invalid {
        path: display.clone(),
        problem,
    };
    let osc = &config.controllers.operating_system_config;
    if osc.secret_name.is_empty() {
        return Err(invalid(
            "controllers.operatingSystemConfig.secretName is required".into(),
        ));
    }
    let period = |value: Option<kube::core::Duration>, field: &str, default: Duration| {
        let period = value.map_or(default, Duration::from);
        if period < MIN_SYNC_PERIOD {
            return Err(invalid(format!("{field} must be at least 15s")));
        }
        Ok(period)
    };
    let sync_period = period(
        osc.sync_period,
        "controllers.operatingSystemConfig.syncPeriod",
        Duration::from_secs(600),
    )?;
    let token = &config.controllers.token;
    let token_sync_period = period(
        token.sync_period,
        "controllers.token.syncPeriod",
        Duration::from_secs(3600),
    )?;
    let mut seen = std::collections::BTreeSet::new();
    for sync in &token.sync_configs {
        if sync.secret_name.is_empty() || sync.path.is_empty() {
            return Err(invalid(
                "controllers.token.syncConfigs need secretName and path".into(),
            ));
        }
        crate::agent::pipeline::osc::check_path(&sync.path).map_err(|problem| {
            invalid(format!(
                "controllers.token.syncConfigs path {}: {problem}",
                sync.path
            ))
        })?;
        if !seen.insert(sync.path.clone()) {
            return Err(invalid(format!(
                "controllers.token.syncConfigs path {} is used twice",
                sync.path
            )));
        }
    }
    let metrics_on_node_ip = metrics_bind_address.is_none()
        && config
            .server
            .metrics
            .as_ref()
            .is_none_or(|server| server.bind_address.trim().is_empty());
    let metrics_address = metrics_bind_address.unwrap_or_else(|| {
        let server = config.server.metrics.clone().unwrap_or_default();
        let ip = server
            .bind_address
            .parse::<IpAddr>()
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        SocketAddr::new(ip, server.port)
    });
    let hostname_fixed = hostname.is_some();
    let hostname = match hostname {
        Some(name) => name,
        None => {
            std::fs::read_to_string("/proc/sys/kernel/hostname").map_err(ConfigError::Hostname)?
        }
    }
    .trim()
    .to_lowercase();
    Ok(Settings {
        paths: Paths::new(config_dir),
        config_file,
        secret_name: osc.secret_name.clone(),
        kubernetes_version: osc.kubernetes_version.clone().filter(|v| !v.is_empty()),
        sync_period,
        token_sync_configs: token.sync_configs.clone(),
        token_sync_period,
        drift_check_interval,
        drift_mode,
        metrics_address,
        metrics_on_node_ip,
        hostname,
        hostname_fixed,
        own_unit: unit_name,
        system_bus_address,
        unit_job_timeout,
        containerd_address,
        containerd_namespace,
        kubeconfig_flag: kubeconfig,
        config,
    })
}

/// `--config-dir` with its links resolved (see the module docs): an absolute path without
/// links, so that [`crate::safe_fs`] can work below it. A link is said in the log.
pub fn resolve_config_dir(config_dir: &Path) -> Result<PathBuf, ConfigError> {
    let shown = config_dir.display().to_string();
    let resolved = std::fs::canonicalize(config_dir).map_err(|source| ConfigError::Read {
        path: shown.clone(),
        source,
    })?;
    if !resolved.is_dir() {
        return Err(ConfigError::NotAFolder(shown));
    }
    if resolved != config_dir {
        tracing::info!(
            config_dir = %shown,
            resolved = %resolved.display(),
            "the config dir is reached through a link; working in the folder it leads to"
        );
    }
    Ok(resolved)
}

/// The NodeAgentConfiguration: `config_file` when given (links followed), else the one
/// [`choose_config_file`] picks in `config_dir` (which [`resolve_config_dir`] resolved; no
/// link followed); at most [`MAX_CONFIG_BYTES`], never a FIFO or a device; with the path it
/// was read from.
pub fn read_configuration(
    config_dir: &Path,
    config_file: Option<PathBuf>,
) -> Result<(PathBuf, NodeAgentConfiguration), ConfigError> {
    let (config_file, bytes) = match config_file {
        Some(file) => {
            let bytes = crate::safe_fs::read_following_links(&file, MAX_CONFIG_BYTES)?;
            (file, bytes)
        }
        None => {
            let file = find_config_file(config_dir)?;
            let bytes = crate::safe_fs::read_at_most(&file, MAX_CONFIG_BYTES)?
                .ok_or_else(|| ConfigError::NotFound(config_dir.display().to_string()))?;
            (file, bytes)
        }
    };
    let display = config_file.display().to_string();
    let text = String::from_utf8(bytes).map_err(|error| ConfigError::Read {
        path: display.clone(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, error),
    })?;
    let config = NodeAgentConfiguration::from_yaml(&text).map_err(|source| ConfigError::Parse {
        path: display,
        source,
    })?;
    Ok((config_file, config))
}

fn find_config_file(dir: &Path) -> Result<PathBuf, ConfigError> {
    let read_error = |source| ConfigError::Read {
        path: dir.display().to_string(),
        source,
    };
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_error)? {
        let entry = entry.map_err(read_error)?;
        let Ok(metadata) = entry.metadata() else {
            continue;
        };
        if !metadata.is_file() {
            continue;
        }
        let modified = metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        entries.push((entry.file_name().to_string_lossy().into_owned(), modified));
    }
    choose_config_file(&entries)
        .map(|name| dir.join(name))
        .ok_or_else(|| ConfigError::NotFound(dir.display().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_config_file_wins() {
        let t = |secs| SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        let entries = vec![
            ("config-v1.110.0.yaml".to_string(), t(10)),
            ("config-v1.111.0.yaml".to_string(), t(20)),
            ("config.yaml.bak".to_string(), t(30)),
            ("cluster-ca.crt".to_string(), t(40)),
            ("config-.yaml".to_string(), t(50)),
            ("last-applied-osc.yaml".to_string(), t(60)),
        ];
        assert_eq!(
            choose_config_file(&entries).as_deref(),
            Some("config-v1.111.0.yaml")
        );
        let tie = vec![
            ("config-a.yaml".to_string(), t(1)),
            ("config-b.yaml".to_string(), t(1)),
            ("config.yaml".to_string(), t(0)),
        ];
        assert_eq!(choose_config_file(&tie).as_deref(), Some("config-b.yaml"));
        assert_eq!(choose_config_file(&[]), None);
    }

    fn args(dir: &Path) -> AgentArgs {
        AgentArgs {
            config_dir: dir.to_path_buf(),
            config_file: None,
            kubeconfig: None,
            drift_check_interval: Duration::from_secs(600),
            drift_mode: DriftMode::Repair,
            metrics_bind_address: None,
            hostname: Some("Node-A".into()),
            unit_name: DEFAULT_UNIT_NAME.into(),
            system_bus_address: String::new(),
            unit_job_timeout: Duration::from_secs(60),
            containerd_address: String::new(),
            containerd_namespace: String::new(),
        }
    }

    #[test]
    fn loads_and_validates_the_gardenlet_config() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config-v1.120.0.yaml"),
            "apiVersion: nodeagent.config.gardener.cloud/v1alpha1\nkind: NodeAgentConfiguration\napiServer:\n  server: https://api\ncontrollers:\n  operatingSystemConfig:\n    secretName: gardener-node-agent-pool\n    kubernetesVersion: 1.33.1\n  token:\n    syncPeriod: 12h\n    syncConfigs:\n    - secretName: gardener-valitail\n      path: /var/lib/valitail/auth-token\n",
        )
        .unwrap();
        let settings = load(args(dir.path())).unwrap();
        assert_eq!(settings.secret_name, "gardener-node-agent-pool");
        assert_eq!(settings.kubernetes_version.as_deref(), Some("1.33.1"));
        assert_eq!(settings.sync_period, Duration::from_secs(600));
        assert_eq!(settings.token_sync_period, Duration::from_secs(12 * 3600));
        assert_eq!(settings.metrics_address, "127.0.0.1:2752".parse().unwrap());
        assert!(
            settings.metrics_on_node_ip,
            "no address given: the node's too"
        );
        assert_eq!(settings.hostname, "node-a");
        let mut explicit = args(dir.path());
        explicit.metrics_bind_address = "127.0.0.1:2752".parse().ok();
        assert!(!load(explicit).unwrap().metrics_on_node_ip);

        std::fs::write(dir.path().join("config-v1.121.0.yaml"), "controllers: {}\n").unwrap();
        let error = load(args(dir.path())).unwrap_err();
        assert!(
            error.to_string().contains("secretName is required"),
            "{error}"
        );

        std::fs::write(
            dir.path().join("config-v1.122.0.yaml"),
            "controllers:\n  operatingSystemConfig:\n    secretName: s\n    syncPeriod: 1s\n",
        )
        .unwrap();
        let error = load(args(dir.path())).unwrap_err();
        assert!(error.to_string().contains("at least 15s"), "{error}");

        let empty = tempfile::tempdir().unwrap();
        assert!(matches!(
            load(args(empty.path())),
            Err(ConfigError::NotFound(_))
        ));
    }

    const MINIMAL: &str = "controllers:\n  operatingSystemConfig:\n    secretName: s\n";

    /// Issue #41 item 8: a config dir that is a link is followed once; the agent then works
    /// in the folder it leads to, where its no-link file rules hold.
    #[test]
    fn a_linked_config_dir_is_resolved_and_worked_in() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let real = base.join("data").join("gardener-node-agent");
        std::fs::create_dir_all(&real).unwrap();
        std::fs::write(real.join("config-v1.149.3.yaml"), MINIMAL).unwrap();
        let link = base.join("gardener-node-agent");
        std::os::unix::fs::symlink(&real, &link).unwrap();

        let settings = load(args(&link)).unwrap();
        assert_eq!(settings.paths.base(), real.as_path());
        assert_eq!(settings.config_file, real.join("config-v1.149.3.yaml"));
        // What the agent writes there goes through safe_fs, which refuses links on the way.
        crate::safe_fs::write(&settings.paths.last_applied(), b"state", 0o600).unwrap();

        std::fs::write(base.join("file"), "").unwrap();
        assert!(matches!(
            load(args(&base.join("file"))),
            Err(ConfigError::NotAFolder(_))
        ));
        assert!(matches!(
            load(args(&base.join("missing"))),
            Err(ConfigError::Read { .. })
        ));
    }

    /// Runs `f` on another thread; `None` when it has not returned within 10 s (it blocks).
    fn within_10s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || send.send(f()));
        receive.recv_timeout(Duration::from_secs(10)).ok()
    }

    /// Issue #41 item 9: the configuration file is read bounded, and a FIFO (given or found)
    /// is refused instead of blocking the start.
    #[test]
    fn the_config_file_is_bounded_and_never_a_fifo() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let padded = format!("{MINIMAL}{}", "# padding\n".repeat(120_000));
        std::fs::write(base.join("config.yaml"), &padded).unwrap();
        let error = load(args(&base)).unwrap_err();
        assert!(
            error.to_string().contains("is larger than 1048576 bytes"),
            "{error}"
        );

        let fifo = base.join("fifo.yaml");
        crate::safe_fs::tests::mkfifo(&fifo);
        let mut given = args(&base);
        given.config_file = Some(fifo);
        let loaded = within_10s(move || load(given).map(|_| ()).map_err(|e| e.to_string()));
        let Some(Err(error)) = loaded else {
            panic!("a FIFO as --config-file: {loaded:?}");
        };
        assert!(error.contains("is a FIFO, not a regular file"), "{error}");

        // A link as --config-file is followed (a mounted ConfigMap's file is one).
        std::fs::write(base.join("config.yaml"), MINIMAL).unwrap();
        let mut linked = args(&base);
        let link = base.join("linked.yaml");
        std::os::unix::fs::symlink(base.join("config.yaml"), &link).unwrap();
        linked.config_file = Some(link);
        assert_eq!(load(linked).unwrap().secret_name, "s");
    }

    #[test]
    fn intervals_must_be_positive_go_durations() {
        assert_eq!(parse_interval("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_interval("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse_interval("0s").is_err());
        assert!(parse_interval("-1s").is_err());
        assert!(parse_interval("10").is_err());
    }
}
