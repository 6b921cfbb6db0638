//! The real gardener-resource-manager (GRM) for tests and `make start`, built from
//! `github.com/gardener/gardener` by `hack/envtest.sh`.
//!
//! In a landscape, each shoot namespace of a seed runs a GRM that reads the ManagedResources
//! of that namespace (the *source*, the seed) and applies their manifests into the shoot (the
//! *target*). [`ResourceManager::start`] runs the same binary the same way between two local
//! control planes ([`super::ControlPlane`]): only the ManagedResource, health, token
//! requestor and node-critical-components controllers run (no garbage collector, no leader
//! election; the one webhook is the node-agent authorizer, when asked for), so what
//! the tests see is the apply/delete/keepObjects/origin behaviour of the real component. With
//! [`ResourceManagerOptions::csr_approver_machine_namespace`] its CSR approver runs too, as in
//! a shoot's GRM: it approves or denies the node-agent client certificate requests of the
//! target against the Machines of the source, and with
//! [`ResourceManagerOptions::node_agent_authorizer`] it serves the node-agent authorizer
//! webhook the target's kube-apiserver asks ([`super::node_agent_authorizer`]). With
//! [`ResourceManagerOptions::network_policy`] its NetworkPolicy controller runs against the
//! target as in a seed's GRM: it turns the `networking.resources.gardener.cloud/*` annotations
//! of the Services in the namespaces it handles into NetworkPolicies
//! ([`NetworkPolicyController::seed`] handles the namespaces a seed's GRM does).
//!
//! Like the control plane, the process runs in a process group of its own that a watchdog
//! kills when the owning process is gone, and [`ResourceManager::stop`] (also on drop) kills
//! it at once.

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use super::controlplane::{
    ControlPlaneError, free_ports, io_error, log_tail, spawn_watchdog, write_file,
};

/// Name of the binary in the assets folder.
pub const BINARY: &str = "gardener-resource-manager";

/// How a resource manager is started.
#[derive(Debug, Clone)]
pub struct ResourceManagerOptions {
    /// Folder with the `gardener-resource-manager` binary (printed by `hack/envtest.sh`).
    pub assets: PathBuf,
    /// Folder for its configuration, serving certificate and log; emptied first unless
    /// `reuse_state` is set.
    pub state_dir: PathBuf,
    /// Keep the ports and the serving certificate of an earlier start in `state_dir` (the
    /// configuration is written again, so kubeconfig paths and periods follow the options);
    /// not with a [`Self::node_agent_authorizer`], which brings its own.
    pub reuse_state: bool,
    /// Kubeconfig file of the cluster holding the ManagedResources (the seed).
    pub source_kubeconfig: PathBuf,
    /// Kubeconfig file of the cluster the manifests are applied to (the shoot).
    pub target_kubeconfig: PathBuf,
    /// Source namespaces to handle; empty means all.
    pub namespaces: Vec<String>,
    /// How often every ManagedResource is applied again although nothing changed (GRM's
    /// default is one minute; tests that look for two owners fighting use less).
    pub sync_period: Duration,
    /// How often the health of the applied objects is checked.
    pub health_sync_period: Duration,
    /// Remove `state_dir` once the process is gone.
    pub remove_state_on_exit: bool,
    /// Run GRM's CSR approver (`controllers.csrApprover`) with the Machines of this source
    /// namespace: it approves a `kubernetes.io/kube-apiserver-client` CSR for
    /// `gardener.cloud:node-agent:machine:<name>` from a bootstrap token when the Machine
    /// `<name>` exists there and no Node named by its `node` label does yet, and one from the
    /// node-agent user itself (renewal) when requester and common name match; other node-agent
    /// CSRs are denied. Off when `None`.
    pub csr_approver_machine_namespace: Option<String>,
    /// Serve the node-agent authorizer webhook the control plane was started with (its port
    /// and certificate replace GRM's own webhook port and certificate). Off when `None`.
    pub node_agent_authorizer: Option<super::NodeAgentAuthorizer>,
    /// Run GRM's NetworkPolicy controller (`controllers.networkPolicy`) against the target.
    /// Off when `None`.
    pub network_policy: Option<NetworkPolicyController>,
    /// The class of ManagedResources it handles (`controllers.resourceClass`; `seed` for the
    /// seed's own instance). GRM's default (`resources`, which takes MRs without a class) when
    /// `None`.
    pub resource_class: Option<String>,
}

/// What GRM's NetworkPolicy controller is started with.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkPolicyController {
    /// The namespaces whose Services it handles (`namespaceSelectors`); empty means all. A
    /// Service elsewhere gets no policies, and those made for it before are deleted.
    pub namespace_selectors: Vec<LabelSelector>,
}

impl NetworkPolicyController {
    /// As in a seed, where gardenlet configures GRM (gardener v1.149): shoot, extension,
    /// istio-system and istio-ingress namespaces (`gardener.cloud/role`), those of exposure
    /// class handlers, and `garden`, the one of the seed's own Prometheus.
    pub fn seed() -> Self {
        let role = |role: &str| LabelSelector {
            match_labels: Some([("gardener.cloud/role".to_string(), role.to_string())].into()),
            ..Default::default()
        };
        let exposure_class_handlers = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "handler.exposureclass.gardener.cloud/name".into(),
                operator: "Exists".into(),
                values: None,
            }]),
            ..Default::default()
        };
        let garden = LabelSelector {
            match_labels: Some(
                [(
                    "kubernetes.io/metadata.name".to_string(),
                    "garden".to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        };
        NetworkPolicyController {
            namespace_selectors: vec![
                role("shoot"),
                role("extension"),
                role("istio-system"),
                role("istio-ingress"),
                exposure_class_handlers,
                garden,
            ],
        }
    }
}

/// A running gardener-resource-manager.
#[derive(Debug)]
pub struct ResourceManager {
    options: ResourceManagerOptions,
    child: Option<Child>,
    watchdog: Option<Child>,
    health_port: u16,
}

const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// The shortest sync period GRM accepts.
pub const MIN_SYNC_PERIOD: Duration = Duration::from_secs(15);

/// `ports` with the webhook's first: the authorizer's port was chosen before (kube-apiserver's
/// configuration names it), so the other two are chosen again while one of them is that port.
fn with_webhook_port(ports: [u16; 3], webhook: u16) -> Result<[u16; 3], ControlPlaneError> {
    let mut ports = ports;
    for _ in 0..10 {
        if ports[1] != webhook && ports[2] != webhook {
            break;
        }
        ports = free_ports()?;
    }
    Ok([webhook, ports[1], ports[2]])
}

/// GRM's configuration file (pure): only the ManagedResource, health, token requestor and
/// node-critical-components controllers, and the CSR approver, the NetworkPolicy controller
/// and the node-agent authorizer when asked for.
pub fn render_config(
    options: &ResourceManagerOptions,
    ports: [u16; 3],
    cert_dir: &Path,
) -> serde_json::Value {
    let [webhook_port, health_port, metrics_port] = ports;
    // GRM rejects sync periods below 15 s.
    let seconds = |d: Duration| format!("{}s", d.as_secs().max(MIN_SYNC_PERIOD.as_secs()));
    let csr_approver = match &options.csr_approver_machine_namespace {
        Some(namespace) => serde_json::json!({
            "enabled": true,
            "concurrentSyncs": 1,
            "machineNamespace": namespace,
        }),
        None => serde_json::json!({"enabled": false}),
    };
    let network_policy = match &options.network_policy {
        Some(controller) => serde_json::json!({
            "enabled": true,
            "concurrentSyncs": 5,
            "namespaceSelectors": controller.namespace_selectors,
        }),
        None => serde_json::json!({"enabled": false}),
    };
    serde_json::json!({
        "apiVersion": "resourcemanager.config.gardener.cloud/v1alpha1",
        "kind": "ResourceManagerConfiguration",
        "sourceClientConnection": {
            "kubeconfig": options.source_kubeconfig.display().to_string(),
            "namespaces": options.namespaces,
            "qps": 100.0,
            "burst": 130,
        },
        "targetClientConnection": {
            "kubeconfig": options.target_kubeconfig.display().to_string(),
            "qps": 100.0,
            "burst": 130,
        },
        "leaderElection": {"leaderElect": false},
        "logLevel": "info",
        "logFormat": "json",
        "server": {
            "webhooks": {
                "bindAddress": "127.0.0.1",
                "port": webhook_port,
                "tls": {"serverCertDir": cert_dir.display().to_string()},
            },
            "healthProbes": {"bindAddress": "127.0.0.1", "port": health_port},
            "metrics": {"bindAddress": "127.0.0.1", "port": metrics_port},
        },
        "controllers": {
            "resourceClass": options.resource_class,
            "garbageCollector": {"enabled": false},
            "health": {"concurrentSyncs": 5, "syncPeriod": seconds(options.health_sync_period)},
            "csrApprover": csr_approver,
            "managedResource": {
                "concurrentSyncs": 5,
                "syncPeriod": seconds(options.sync_period),
                "alwaysUpdate": false,
                "managedByLabelValue": "gardener",
            },
            "networkPolicy": network_policy,
            // As in a shoot: removes the critical-components taint gardenlet's kubelet
            // configuration registers Nodes with, once their node-critical pods are ready.
            "nodeCriticalComponents": {"enabled": true, "concurrentSyncs": 5},
            "nodeAgentReconciliationDelay": {"enabled": false},
            // Shoot access secrets (the OSC controller's node-agent rollout status).
            "tokenRequestor": {"enabled": true, "concurrentSyncs": 2},
        },
        "webhooks": options
            .node_agent_authorizer
            .as_ref()
            .map(super::NodeAgentAuthorizer::resource_manager_webhooks)
            .unwrap_or_else(|| serde_json::json!({})),
    })
}

impl ResourceManager {
    /// Starts GRM and waits until its `/readyz` answers 200 (its caches of both clusters are
    /// synced).
    pub async fn start(options: ResourceManagerOptions) -> Result<Self, ControlPlaneError> {
        let binary = options.assets.join(BINARY);
        if !binary.is_file() {
            return Err(ControlPlaneError::MissingBinary {
                binary: BINARY,
                dir: options.assets.display().to_string(),
            });
        }
        let state = options.state_dir.clone();
        let cert_dir = state.join("certs");
        let config_path = state.join("config.yaml");
        // The authorizer brings its own serving certificate and port (kube-apiserver's webhook
        // configuration names both), so a GRM serving it never reuses earlier ones.
        let previous = if options.reuse_state && options.node_agent_authorizer.is_none() {
            previous_ports(&config_path, &cert_dir).filter(|ports| {
                ports
                    .iter()
                    .all(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok())
            })
        } else {
            None
        };
        let ports = match previous {
            Some(ports) => ports,
            None => {
                if !options.reuse_state && state.exists() {
                    fs::remove_dir_all(&state).map_err(io_error(&state))?;
                }
                fs::create_dir_all(&cert_dir).map_err(io_error(&cert_dir))?;
                let (cert, key) = match &options.node_agent_authorizer {
                    Some(authorizer) => (
                        authorizer.serving_cert.clone(),
                        authorizer.serving_key.clone(),
                    ),
                    None => super::pki::self_signed_serving().map_err(ControlPlaneError::Pki)?,
                };
                write_file(&cert_dir.join("tls.crt"), &cert)?;
                write_file(&cert_dir.join("tls.key"), &key)?;
                free_ports()?
            }
        };
        let ports = match &options.node_agent_authorizer {
            Some(authorizer) => with_webhook_port(ports, authorizer.port)?,
            None => ports,
        };
        let config = render_config(&options, ports, &cert_dir);
        write_file(&config_path, &config.to_string())?;

        let log = state.join("gardener-resource-manager.log");
        let file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(io_error(&log))?;
        let stderr = file.try_clone().map_err(io_error(&log))?;
        let child = Command::new(&binary)
            .arg(format!("--config={}", config_path.display()))
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(stderr)
            .process_group(0)
            .spawn()
            .map_err(|source| ControlPlaneError::Spawn {
                binary: BINARY,
                source,
            })?;
        let watchdog = spawn_watchdog(child.id(), &state, options.remove_state_on_exit, true)?;
        let mut manager = ResourceManager {
            options,
            child: Some(child),
            watchdog: Some(watchdog),
            health_port: ports[1],
        };
        manager.wait_ready().await?;
        Ok(manager)
    }

    /// The log file (JSON lines).
    pub fn log_path(&self) -> PathBuf {
        self.options.state_dir.join("gardener-resource-manager.log")
    }

    /// Kills the process (idempotent).
    pub fn stop(&mut self) {
        for child in [&mut self.child, &mut self.watchdog] {
            if let Some(mut c) = child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        if self.options.remove_state_on_exit {
            let _ = fs::remove_dir_all(&self.options.state_dir);
        }
    }

    async fn wait_ready(&mut self) -> Result<(), ControlPlaneError> {
        let started = Instant::now();
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(ControlPlaneError::Exited {
                    binary: BINARY,
                    status: status.to_string(),
                    log_tail: log_tail(&self.log_path()),
                });
            }
            if http_status(self.health_port, "/readyz") == Some(200) {
                return Ok(());
            }
            if started.elapsed() > READY_TIMEOUT {
                return Err(ControlPlaneError::NotReady(
                    READY_TIMEOUT,
                    log_tail(&self.log_path()),
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

impl Drop for ResourceManager {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The webhook, health and metrics ports of the configuration an earlier start wrote, when
/// it and the serving certificate are there.
fn previous_ports(config: &Path, cert_dir: &Path) -> Option<[u16; 3]> {
    if !cert_dir.join("tls.crt").is_file() || !cert_dir.join("tls.key").is_file() {
        return None;
    }
    let value: serde_json::Value = serde_json::from_str(&fs::read_to_string(config).ok()?).ok()?;
    let port = |pointer: &str| {
        value
            .pointer(pointer)
            .and_then(serde_json::Value::as_u64)
            .and_then(|p| u16::try_from(p).ok())
    };
    Some([
        port("/server/webhooks/port")?,
        port("/server/healthProbes/port")?,
        port("/server/metrics/port")?,
    ])
}

/// The status code of a plain HTTP GET on loopback, `None` when nothing answers.
fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 32];
    let read = stream.read(&mut head).ok()?;
    let line = std::str::from_utf8(&head[..read]).ok()?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_runs_only_the_managed_resource_and_health_controllers() {
        let options = ResourceManagerOptions {
            assets: PathBuf::from("/assets"),
            state_dir: PathBuf::from("/state"),
            source_kubeconfig: PathBuf::from("/seed.kubeconfig"),
            target_kubeconfig: PathBuf::from("/shoot.kubeconfig"),
            namespaces: vec!["shoot--a--b".into()],
            sync_period: Duration::from_secs(20),
            health_sync_period: Duration::from_millis(500),
            remove_state_on_exit: true,
            reuse_state: false,
            csr_approver_machine_namespace: None,
            node_agent_authorizer: None,
            network_policy: None,
            resource_class: None,
        };
        let config = render_config(&options, [1, 2, 3], Path::new("/certs"));
        assert_eq!(
            config["sourceClientConnection"]["namespaces"][0],
            "shoot--a--b"
        );
        assert_eq!(
            config["targetClientConnection"]["kubeconfig"],
            "/shoot.kubeconfig"
        );
        assert_eq!(
            config["controllers"]["managedResource"]["syncPeriod"],
            "20s"
        );
        // Shorter periods are raised to what GRM accepts.
        assert_eq!(config["controllers"]["health"]["syncPeriod"], "15s");
        for disabled in ["garbageCollector", "csrApprover", "networkPolicy"] {
            assert_eq!(
                config["controllers"][disabled]["enabled"], false,
                "{disabled}"
            );
        }
        assert_eq!(config["leaderElection"]["leaderElect"], false);
        assert_eq!(config["server"]["healthProbes"]["port"], 2);

        let approving = ResourceManagerOptions {
            csr_approver_machine_namespace: Some("shoot--a--b".into()),
            ..options
        };
        let config = render_config(&approving, [1, 2, 3], Path::new("/certs"));
        assert_eq!(
            config["controllers"]["csrApprover"],
            serde_json::json!({"enabled": true, "concurrentSyncs": 1, "machineNamespace": "shoot--a--b"})
        );
        assert_eq!(config["controllers"]["garbageCollector"]["enabled"], false);
        assert_eq!(config["webhooks"], serde_json::json!({}));

        let authorizing = ResourceManagerOptions {
            node_agent_authorizer: Some(crate::devenv::NodeAgentAuthorizer {
                port: 1,
                serving_cert: String::new(),
                serving_key: String::new(),
                machine_namespace: Some("shoot--a--b".into()),
            }),
            ..approving
        };
        let config = render_config(&authorizing, [1, 2, 3], Path::new("/certs"));
        assert_eq!(
            config["webhooks"]["nodeAgentAuthorizer"]["machineNamespace"],
            "shoot--a--b"
        );

        let seed = ResourceManagerOptions {
            network_policy: Some(NetworkPolicyController::seed()),
            resource_class: None,
            ..authorizing
        };
        let config = render_config(&seed, [1, 2, 3], Path::new("/certs"));
        let controller = &config["controllers"]["networkPolicy"];
        assert_eq!(controller["enabled"], true);
        let selectors = controller["namespaceSelectors"].as_array().unwrap();
        assert_eq!(selectors.len(), 6);
        assert!(
            selectors.contains(
                &serde_json::json!({"matchLabels": {"gardener.cloud/role": "extension"}})
            )
        );
        assert!(selectors.contains(
            &serde_json::json!({"matchLabels": {"kubernetes.io/metadata.name": "garden"}})
        ));
        assert!(selectors.contains(&serde_json::json!({"matchExpressions": [
            {"key": "handler.exposureclass.gardener.cloud/name", "operator": "Exists"}
        ]})));
    }

    #[test]
    fn a_restart_reads_the_ports_back_from_the_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let options = ResourceManagerOptions {
            assets: PathBuf::from("/assets"),
            state_dir: dir.path().to_path_buf(),
            source_kubeconfig: PathBuf::from("/seed.kubeconfig"),
            target_kubeconfig: PathBuf::from("/shoot.kubeconfig"),
            namespaces: Vec::new(),
            sync_period: Duration::from_secs(60),
            health_sync_period: Duration::from_secs(30),
            remove_state_on_exit: false,
            reuse_state: true,
            csr_approver_machine_namespace: None,
            node_agent_authorizer: None,
            network_policy: None,
            resource_class: None,
        };
        let certs = dir.path().join("certs");
        let config = dir.path().join("config.yaml");
        fs::create_dir_all(&certs).unwrap();
        fs::write(
            &config,
            render_config(&options, [4001, 4002, 4003], &certs).to_string(),
        )
        .unwrap();
        // Without the serving certificate there is nothing to pick up.
        assert_eq!(previous_ports(&config, &certs), None);
        fs::write(certs.join("tls.crt"), "crt").unwrap();
        fs::write(certs.join("tls.key"), "key").unwrap();
        assert_eq!(previous_ports(&config, &certs), Some([4001, 4002, 4003]));
    }
}
