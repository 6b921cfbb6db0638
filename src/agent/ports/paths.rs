//! Where the agent keeps its state and writes units: the on-node layout of
//! gardener-node-agent (`docs/agent.md#node-agent-layout`), so either agent can take over a
//! node.
//!
//! ```text
//! /var/lib/gardener-node-agent/              --config-dir
//!   config-<version>.yaml                    NodeAgentConfiguration (written by the OSC)
//!   cluster-ca.crt                           API server CA (written by the OSC)
//!   credentials/kubeconfig                   the agent's kubeconfig (provisioning or CSR flow)
//!   credentials/token                        bearer token (legacy path)
//!   credentials/bootstrap-token              bootstrap token for the CSR flow
//!   last-applied-osc.yaml                    the last completely applied OSC (0600)
//!   last-computed-osc-changes.yaml           the journal (0600)
//!   tmp/                                     image mounts
//!   machine-name                             the machine's name (for the client certificate)
//! /var/lib/kubelet/kubeconfig-bootstrap      kubelet's bootstrap kubeconfig (new machines)
//! /etc/systemd/system/<unit>                 unit files (0600)
//! /etc/systemd/system/<unit>.d/<drop-in>     drop-ins (0600)
//! ```

use std::path::{Path, PathBuf};

/// The default `--config-dir`.
pub const DEFAULT_BASE_DIR: &str = "/var/lib/gardener-node-agent";
/// Where unit files go.
pub const SYSTEMD_DIR: &str = "/etc/systemd/system";
/// kubelet's folder (its bootstrap kubeconfig and credentials).
pub const KUBELET_DIR: &str = "/var/lib/kubelet";
/// Mode of the agent's state files.
pub const STATE_FILE_MODE: u32 = 0o600;

/// The agent's paths below a base folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    base: PathBuf,
    systemd_dir: PathBuf,
}

impl Paths {
    /// Paths below `base` (the config dir), units in `/etc/systemd/system`.
    pub fn new(base: impl Into<PathBuf>) -> Self {
        Paths {
            base: base.into(),
            systemd_dir: PathBuf::from(SYSTEMD_DIR),
        }
    }

    /// Same, with units in `systemd_dir` (tests).
    pub fn with_systemd_dir(base: impl Into<PathBuf>, systemd_dir: impl Into<PathBuf>) -> Self {
        Paths {
            base: base.into(),
            systemd_dir: systemd_dir.into(),
        }
    }

    /// The config dir.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// `last-applied-osc.yaml`.
    pub fn last_applied(&self) -> PathBuf {
        self.base.join("last-applied-osc.yaml")
    }

    /// `last-computed-osc-changes.yaml`.
    pub fn journal(&self) -> PathBuf {
        self.base.join("last-computed-osc-changes.yaml")
    }

    /// `rollout-state.json`: the disruptive rollout's hold or stop (ours; GNA has none).
    pub fn rollout_state(&self) -> PathBuf {
        self.base.join("rollout-state.json")
    }

    /// `credentials/`.
    pub fn credentials(&self) -> PathBuf {
        self.base.join("credentials")
    }

    /// `credentials/kubeconfig`.
    pub fn kubeconfig(&self) -> PathBuf {
        self.credentials().join("kubeconfig")
    }

    /// `credentials/token`.
    pub fn token(&self) -> PathBuf {
        self.credentials().join("token")
    }

    /// `credentials/bootstrap-token`.
    pub fn bootstrap_token(&self) -> PathBuf {
        self.credentials().join("bootstrap-token")
    }

    /// `cluster-ca.crt`.
    pub fn cluster_ca(&self) -> PathBuf {
        self.base.join("cluster-ca.crt")
    }

    /// `machine-name`.
    pub fn machine_name(&self) -> PathBuf {
        self.base.join("machine-name")
    }

    /// kubelet's folder, [`KUBELET_DIR`].
    pub fn kubelet_dir(&self) -> PathBuf {
        PathBuf::from(KUBELET_DIR)
    }

    /// `tmp/`.
    pub fn temp(&self) -> PathBuf {
        self.base.join("tmp")
    }

    /// The unit file of `unit`.
    pub fn unit_file(&self, unit: &str) -> PathBuf {
        self.systemd_dir.join(unit)
    }

    /// The drop-in folder of `unit`.
    pub fn drop_in_dir(&self, unit: &str) -> PathBuf {
        self.systemd_dir.join(format!("{unit}.d"))
    }

    /// A drop-in of `unit`.
    pub fn drop_in(&self, unit: &str, drop_in: &str) -> PathBuf {
        self.drop_in_dir(unit).join(drop_in)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_gardener_node_agent() {
        let paths = Paths::new(DEFAULT_BASE_DIR);
        assert_eq!(
            paths.last_applied(),
            Path::new("/var/lib/gardener-node-agent/last-applied-osc.yaml")
        );
        assert_eq!(
            paths.journal(),
            Path::new("/var/lib/gardener-node-agent/last-computed-osc-changes.yaml")
        );
        assert_eq!(
            paths.kubeconfig(),
            Path::new("/var/lib/gardener-node-agent/credentials/kubeconfig")
        );
        assert_eq!(
            paths.drop_in("containerd.service", "30-env_config.conf"),
            Path::new("/etc/systemd/system/containerd.service.d/30-env_config.conf")
        );
    }
}
