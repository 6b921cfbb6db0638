//! A real control plane for tests and `make start`: etcd, kube-apiserver and (optionally)
//! kube-controller-manager, built from their Go modules by `hack/envtest.sh`, started on free
//! loopback ports.
//!
//! kube-controller-manager runs only the controllers that make sense without nodes or a
//! cloud (see [`CONTROLLERS`]): garbage collection, namespace deletion, DaemonSet/Deployment
//! status, service-account tokens. So foreground deletions finish, a deleted namespace goes
//! away, and a DaemonSet gets a status that gardener-resource-manager's health check reads.
//! With [`ControlPlaneOptions::csr_signing`] the plane also has what a Gardener shoot has for
//! node-agent client certificates and kubelet's TLS bootstrap: bootstrap-token
//! authentication, the Node authorizer before RBAC, and in kube-controller-manager
//! ([`CSR_SIGNING_CONTROLLERS`]) the `kubernetes.io/kube-apiserver-client` and
//! `kubernetes.io/kube-apiserver-client-kubelet` signers (the plane's CA), the approver of
//! kubelet client CSRs and the bootstrap token cleaner.
//!
//! With [`ControlPlaneOptions::reuse_state`] (`make start`) a start picks up what the state
//! folder holds from the previous one — ports ([`STATE_FILE`]), certificates and keys, etcd's
//! data — so objects, kubeconfigs and the API server URL survive a restart. Without it
//! (tests) the folder is emptied and everything is new.
//!
//! All processes run in one process group. A small watchdog (`sh`) polls the owning process
//! and kills the whole group when it is gone, so neither a panic nor a SIGKILL of the owner
//! leaves kube-apiserver or etcd behind. [`ControlPlane::stop`] (also run on drop) kills the
//! group right away.

use std::fs;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::pki::{self, Pki};

/// Errors while starting or stopping the control plane.
#[derive(Debug, thiserror::Error)]
pub enum ControlPlaneError {
    /// A binary is missing from the assets folder.
    #[error("{binary} not found in {dir}; run hack/envtest.sh")]
    MissingBinary {
        /// The binary name.
        binary: &'static str,
        /// The assets folder.
        dir: String,
    },
    /// File system work in the state folder failed.
    #[error("preparing {path}")]
    Io {
        /// What was being written or read.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Certificate generation failed.
    #[error("generating certificates")]
    Pki(#[source] rcgen::Error),
    /// A process could not be started.
    #[error("starting {binary}")]
    Spawn {
        /// The binary name.
        binary: &'static str,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A process exited while we waited for it to become ready.
    #[error("{binary} exited during start-up ({status}); last log lines:\n{log_tail}")]
    Exited {
        /// The binary name.
        binary: &'static str,
        /// Its exit status.
        status: String,
        /// The end of its log file.
        log_tail: String,
    },
    /// kube-apiserver did not report ready in time.
    #[error("kube-apiserver not ready after {0:?}; last log lines:\n{1}")]
    NotReady(Duration, String),
    /// The admin kubeconfig does not load.
    #[error("loading the admin kubeconfig")]
    Kubeconfig(#[source] crate::kubeconfig::KubeconfigError),
    /// The options contradict each other.
    #[error("invalid control plane options: {0}")]
    Options(&'static str),
}

/// Where the binaries are and where state goes.
#[derive(Debug, Clone)]
pub struct ControlPlaneOptions {
    /// Folder with `kube-apiserver` and `etcd` (printed by `hack/envtest.sh`).
    pub assets: PathBuf,
    /// Folder for certificates, etcd data, logs and the kubeconfig; created if missing and
    /// emptied first unless `reuse_state` is set.
    pub state_dir: PathBuf,
    /// Start on what `state_dir` holds from an earlier start (same ports, certificates and
    /// etcd data); start fresh when it holds nothing complete. Recorded ports that another
    /// process has taken meanwhile are replaced by free ones (with a warning).
    pub reuse_state: bool,
    /// Remove `state_dir` once the control plane is gone (tests); keep it for inspection
    /// otherwise (`make start`).
    pub remove_state_on_exit: bool,
    /// Also run kube-controller-manager (needs `kube-controller-manager` in `assets`).
    pub controller_manager: bool,
    /// Also run kube-scheduler (needs `kube-scheduler` in `assets`; `hack/envtest.sh --node`):
    /// a shoot with nodes, where DaemonSet and workload pods must be placed.
    pub scheduler: bool,
    /// Write kube-apiserver's audit log (metadata of every request, one JSON line each, with
    /// user agent and user) to `audit.log` in `state_dir`: benchmarks count a client's
    /// requests there, since `apiserver_request_total` has no label telling clients apart.
    pub audit_log: bool,
    /// Bootstrap-token authentication (`--enable-bootstrap-token-auth`) and
    /// kube-controller-manager's `kubernetes.io/kube-apiserver-client` signer, which issues
    /// certificates for approved CertificateSigningRequests with at most this duration
    /// (`--cluster-signing-duration`), signed by the plane's CA (`ca.crt`/`ca.key`, also
    /// kube-apiserver's `--client-ca-file`, so issued certificates authenticate), plus the
    /// bootstrap token cleaner: what a Gardener shoot has for node-agent client certificates.
    /// Also kubelet's TLS bootstrap as in a shoot: the `kube-apiserver-client-kubelet` signer
    /// (same CA and duration), kube-controller-manager's approver of kubelet client CSRs (it
    /// approves what RBAC's `nodeclient`/`selfnodeclient` roles allow) and the Node authorizer
    /// (`--authorization-mode=Node,RBAC`). Needs `controller_manager`.
    pub csr_signing: Option<Duration>,
    /// Authorize node agents with GRM's node-agent authorizer webhook after `Node` and `RBAC`,
    /// as gardenlet configures a shoot ([`super::node_agent_authorizer`]); the GRM serving it
    /// is started afterwards with the same value. `None`: `Node` (with `csr_signing`) and
    /// `RBAC` only.
    pub node_agent_authorizer: Option<super::NodeAgentAuthorizer>,
}

/// `--audit-log-maxsize` in MB: far beyond what a benchmark writes (a scale run writes a few
/// hundred MB).
const AUDIT_LOG_MAX_MB: u32 = 1_000_000;

/// The audit policy of [`ControlPlaneOptions::audit_log`]: metadata of every request, one
/// event when the response is complete (a watch also logs when its response starts).
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n";

/// The file in the state folder that records the ports of a control plane.
pub const STATE_FILE: &str = "control-plane.json";

/// What a state folder records besides the certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct RecordedPorts {
    etcd: u16,
    etcd_peer: u16,
    apiserver: u16,
}

/// The PKI files of a state folder, by field of [`Pki`]. A reused folder must have all of
/// them; one from before `ca.key` was kept starts fresh.
const PKI_FILES: [&str; 8] = [
    "ca.crt",
    "ca.key",
    "apiserver.crt",
    "apiserver.key",
    "admin.crt",
    "admin.key",
    "sa.key",
    "sa.pub",
];

/// The kube-controller-manager controllers a local control plane runs.
pub const CONTROLLERS: &str = "garbage-collector-controller,namespace-controller,daemonset-controller,\
deployment-controller,replicaset-controller,serviceaccount-controller,serviceaccount-token-controller,\
root-ca-certificate-publisher-controller,node-lifecycle-controller";

/// The kube-controller-manager controllers [`ControlPlaneOptions::csr_signing`] adds: the CSR
/// signers, the approver of kubelet client CSRs and the cleaner of expired bootstrap tokens
/// (names as kube-controller-manager v1.36 `--controllers` knows them).
pub const CSR_SIGNING_CONTROLLERS: &str = "certificatesigningrequest-signing-controller,\
certificatesigningrequest-approving-controller,token-cleaner-controller";

/// A running etcd + kube-apiserver pair.
#[derive(Debug)]
pub struct ControlPlane {
    options: ControlPlaneOptions,
    pki: Pki,
    etcd_port: u16,
    etcd_peer_port: u16,
    apiserver_port: u16,
    etcd: Option<Child>,
    apiserver: Option<Child>,
    controller_manager: Option<Child>,
    scheduler: Option<Child>,
    watchdog: Option<Child>,
    process_group: u32,
    kubeconfig: String,
    reused: bool,
}

const READY_TIMEOUT: Duration = Duration::from_secs(120);

impl ControlPlane {
    /// Starts etcd and kube-apiserver and waits until `/readyz` answers `ok`.
    pub async fn start(options: ControlPlaneOptions) -> Result<Self, ControlPlaneError> {
        if options.csr_signing.is_some() && !options.controller_manager {
            return Err(ControlPlaneError::Options(
                "csr_signing needs controller_manager: kube-controller-manager signs the CSRs",
            ));
        }
        let mut binaries = vec!["etcd", "kube-apiserver"];
        if options.controller_manager {
            binaries.push("kube-controller-manager");
        }
        if options.scheduler {
            binaries.push("kube-scheduler");
        }
        for binary in binaries {
            if !options.assets.join(binary).is_file() {
                return Err(ControlPlaneError::MissingBinary {
                    binary,
                    dir: options.assets.display().to_string(),
                });
            }
        }
        let state = &options.state_dir;
        let previous = if options.reuse_state {
            read_previous(state)
        } else {
            None
        };
        let reused = previous.is_some();
        let (pki, ports) = match previous {
            Some((pki, ports)) => (pki, usable_ports(ports).await?),
            None => {
                if options.reuse_state {
                    // Nothing complete to pick up: only etcd's data goes, so logs and the
                    // other planes' folders inside this one stay.
                    remove_if_present(&state.join("etcd"))?;
                } else if state.exists() {
                    fs::remove_dir_all(state).map_err(io_error(state))?;
                }
                let pki = pki::generate().map_err(ControlPlaneError::Pki)?;
                let [etcd, etcd_peer, apiserver] = free_ports()?;
                (
                    pki,
                    RecordedPorts {
                        etcd,
                        etcd_peer,
                        apiserver,
                    },
                )
            }
        };
        fs::create_dir_all(state.join("etcd")).map_err(io_error(state))?;
        fs::set_permissions(state.join("etcd"), fs::Permissions::from_mode(0o700))
            .map_err(io_error(state))?;
        for (name, content) in PKI_FILES.iter().zip(pki_contents(&pki)) {
            write_file(&state.join(name), content)?;
        }
        let state_file = state.join(STATE_FILE);
        let recorded =
            serde_json::to_string_pretty(&ports).map_err(|source| ControlPlaneError::Io {
                path: state_file.display().to_string(),
                source: source.into(),
            })?;
        write_file(&state_file, &recorded)?;
        let RecordedPorts {
            etcd: etcd_port,
            etcd_peer: etcd_peer_port,
            apiserver: apiserver_port,
        } = ports;
        let server = format!("https://127.0.0.1:{apiserver_port}");
        let kubeconfig = crate::kubeconfig::render_client_cert_kubeconfig(
            &server,
            &pki.ca_cert,
            &pki.admin_cert,
            &pki.admin_key,
        );
        write_file(&state.join("kubeconfig"), &kubeconfig)?;

        let mut plane = ControlPlane {
            options,
            pki,
            etcd_port,
            etcd_peer_port,
            apiserver_port,
            etcd: None,
            apiserver: None,
            controller_manager: None,
            scheduler: None,
            watchdog: None,
            process_group: 0,
            kubeconfig,
            reused,
        };
        let etcd = plane.spawn_etcd(0)?;
        plane.process_group = etcd.id();
        plane.etcd = Some(etcd);
        plane.watchdog = Some(plane.spawn_watchdog()?);
        plane.apiserver = Some(plane.spawn_apiserver()?);
        plane.wait_ready().await?;
        if plane.options.controller_manager {
            plane.controller_manager = Some(plane.spawn_controller_manager()?);
        }
        if plane.options.scheduler {
            plane.scheduler = Some(plane.spawn_scheduler()?);
        }
        Ok(plane)
    }

    /// Whether this start picked up the state of an earlier one (see
    /// [`ControlPlaneOptions::reuse_state`]); `false` when everything is new.
    pub fn reused_state(&self) -> bool {
        self.reused
    }

    /// The admin kubeconfig (client certificate in `system:masters`).
    pub fn kubeconfig(&self) -> &str {
        &self.kubeconfig
    }

    /// Path of the admin kubeconfig file.
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.options.state_dir.join("kubeconfig")
    }

    /// The API server URL.
    pub fn server_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.apiserver_port)
    }

    /// The API server's port on loopback.
    pub fn apiserver_port(&self) -> u16 {
        self.apiserver_port
    }

    /// The CA certificate (PEM) that signed the serving certificate.
    pub fn ca_pem(&self) -> &str {
        &self.pki.ca_cert
    }

    /// Client configuration for the admin identity.
    pub async fn admin_config(&self) -> Result<kube::Config, ControlPlaneError> {
        crate::kubeconfig::config_from_yaml(&self.kubeconfig)
            .await
            .map_err(ControlPlaneError::Kubeconfig)
    }

    /// Kills kube-apiserver and starts it again on the same port against the same etcd;
    /// returns once it is ready. For fault-injection tests.
    pub async fn restart_apiserver(&mut self) -> Result<(), ControlPlaneError> {
        if let Some(mut child) = self.apiserver.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.apiserver = Some(self.spawn_apiserver()?);
        self.wait_ready().await
    }

    /// Kills etcd and starts it again on the same ports and data; returns once the API
    /// server is ready again. For fault-injection tests.
    pub async fn restart_etcd(&mut self) -> Result<(), ControlPlaneError> {
        if let Some(mut child) = self.etcd.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.etcd = Some(self.spawn_etcd(self.process_group)?);
        self.wait_ready().await
    }

    /// Kills every process of the control plane (idempotent).
    pub fn stop(&mut self) {
        if self.process_group != 0 {
            // The group contains etcd and kube-apiserver, even if one was restarted.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.process_group)])
                .stderr(Stdio::null())
                .status();
        }
        for child in [
            &mut self.etcd,
            &mut self.apiserver,
            &mut self.controller_manager,
            &mut self.scheduler,
            &mut self.watchdog,
        ] {
            if let Some(mut c) = child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        self.process_group = 0;
        if self.options.remove_state_on_exit {
            let _ = fs::remove_dir_all(&self.options.state_dir);
        }
    }

    fn spawn_etcd(&self, group: u32) -> Result<Child, ControlPlaneError> {
        let state = &self.options.state_dir;
        let client_url = format!("http://127.0.0.1:{}", self.etcd_port);
        let peer_url = format!("http://127.0.0.1:{}", self.etcd_peer_port);
        let mut command = Command::new(self.options.assets.join("etcd"));
        command
            .arg("--name=default")
            .arg(format!("--data-dir={}", state.join("etcd").display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=default={peer_url}"))
            .arg("--unsafe-no-fsync=true")
            .arg("--log-level=warn")
            .process_group(group as i32);
        spawn_logged(command, "etcd", &state.join("etcd.log"))
    }

    fn spawn_apiserver(&self) -> Result<Child, ControlPlaneError> {
        let state = &self.options.state_dir;
        let path = |name: &str| state.join(name).display().to_string();
        let mut command = Command::new(self.options.assets.join("kube-apiserver"));
        command
            .arg(format!(
                "--etcd-servers=http://127.0.0.1:{}",
                self.etcd_port
            ))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg(format!("--secure-port={}", self.apiserver_port))
            .arg(format!("--cert-dir={}", path("certs")))
            .arg(format!("--tls-cert-file={}", path("apiserver.crt")))
            .arg(format!("--tls-private-key-file={}", path("apiserver.key")))
            .arg(format!("--client-ca-file={}", path("ca.crt")))
            .arg(self.authorization_flag()?)
            .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
            // As in a Gardener shoot: tokens gardener-resource-manager's token requestor asks
            // for carry the audience `gardener`.
            .arg("--api-audiences=https://kubernetes.default.svc.cluster.local,gardener")
            .arg(format!("--service-account-key-file={}", path("sa.pub")))
            .arg(format!(
                "--service-account-signing-key-file={}",
                path("sa.key")
            ))
            .arg("--service-cluster-ip-range=10.0.0.0/24")
            .arg("--allow-privileged=true")
            .arg("--enable-priority-and-fairness=false")
            .arg("--v=1")
            .process_group(self.process_group as i32);
        if self.options.csr_signing.is_some() {
            command.arg("--enable-bootstrap-token-auth=true");
        }
        if self.options.audit_log {
            let policy = state.join("audit-policy.yaml");
            fs::write(&policy, AUDIT_POLICY).map_err(|source| ControlPlaneError::Io {
                path: policy.display().to_string(),
                source,
            })?;
            command
                .arg(format!("--audit-policy-file={}", policy.display()))
                .arg(format!("--audit-log-path={}", path("audit.log")))
                .arg("--audit-log-format=json")
                .arg("--audit-log-mode=blocking")
                // Never rotated (0 means lumberjack's 100 MB): a reader counting from an
                // offset would lose every request after a rotation.
                .arg(format!("--audit-log-maxsize={AUDIT_LOG_MAX_MB}"));
        }
        spawn_logged(command, "kube-apiserver", &state.join("kube-apiserver.log"))
    }

    /// `--authorization-config` for the node-agent authorizer (its files written into the
    /// state folder), else `--authorization-mode`.
    fn authorization_flag(&self) -> Result<String, ControlPlaneError> {
        let state = &self.options.state_dir;
        if let Some(authorizer) = &self.options.node_agent_authorizer {
            let kubeconfig = state.join("authorization-webhook.kubeconfig");
            write_file(&kubeconfig, &authorizer.webhook_kubeconfig())?;
            let config = state.join("authorization-config.json");
            write_file(
                &config,
                &super::NodeAgentAuthorizer::authorization_config(&kubeconfig),
            )?;
            return Ok(format!("--authorization-config={}", config.display()));
        }
        Ok(if self.options.csr_signing.is_some() {
            "--authorization-mode=Node,RBAC".to_string()
        } else {
            "--authorization-mode=RBAC".to_string()
        })
    }

    fn spawn_controller_manager(&self) -> Result<Child, ControlPlaneError> {
        let state = &self.options.state_dir;
        let mut command = Command::new(self.options.assets.join("kube-controller-manager"));
        command
            .args(controller_manager_args(state, self.options.csr_signing))
            .process_group(self.process_group as i32);
        spawn_logged(
            command,
            "kube-controller-manager",
            &state.join("kube-controller-manager.log"),
        )
    }

    fn spawn_scheduler(&self) -> Result<Child, ControlPlaneError> {
        let state = &self.options.state_dir;
        let kubeconfig = state.join("kubeconfig").display().to_string();
        let mut command = Command::new(self.options.assets.join("kube-scheduler"));
        command
            .arg(format!("--kubeconfig={kubeconfig}"))
            .arg(format!("--authentication-kubeconfig={kubeconfig}"))
            .arg(format!("--authorization-kubeconfig={kubeconfig}"))
            .arg("--leader-elect=false")
            .arg("--secure-port=0")
            .arg("--v=1")
            .process_group(self.process_group as i32);
        spawn_logged(command, "kube-scheduler", &state.join("kube-scheduler.log"))
    }

    /// A shell that kills the group once the owning process (this one) is gone. It does not
    /// stop when the group's first process exits: fault-injection tests restart etcd, the
    /// group's leader.
    fn spawn_watchdog(&self) -> Result<Child, ControlPlaneError> {
        spawn_watchdog(
            self.process_group,
            &self.options.state_dir,
            self.options.remove_state_on_exit,
            false,
        )
    }

    async fn wait_ready(&mut self) -> Result<(), ControlPlaneError> {
        let config = self.admin_config().await?;
        let started = Instant::now();
        loop {
            for (binary, child, log) in [
                ("etcd", &mut self.etcd, "etcd.log"),
                ("kube-apiserver", &mut self.apiserver, "kube-apiserver.log"),
            ] {
                if let Some(c) = child.as_mut()
                    && let Ok(Some(status)) = c.try_wait()
                {
                    return Err(ControlPlaneError::Exited {
                        binary,
                        status: status.to_string(),
                        log_tail: log_tail(&self.options.state_dir.join(log)),
                    });
                }
            }
            // Probe the port first: the client logs every refused connection as an error.
            let listening =
                std::net::TcpStream::connect(("127.0.0.1", self.apiserver_port)).is_ok();
            if listening && let Ok(client) = crate::kubeconfig::build(config.clone(), "local-env") {
                let request = http::Request::get("/readyz").body(Vec::new());
                if let Ok(request) = request
                    && let Ok(body) = client.request_text(request).await
                    && body.trim() == "ok"
                {
                    return Ok(());
                }
            }
            if started.elapsed() > READY_TIMEOUT {
                return Err(ControlPlaneError::NotReady(
                    READY_TIMEOUT,
                    log_tail(&self.options.state_dir.join("kube-apiserver.log")),
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// kube-controller-manager's flags for a plane in `state` (pure).
fn controller_manager_args(state: &Path, csr_signing: Option<Duration>) -> Vec<String> {
    let path = |name: &str| state.join(name).display().to_string();
    let controllers = match csr_signing {
        Some(_) => format!("{CONTROLLERS},{CSR_SIGNING_CONTROLLERS}"),
        None => CONTROLLERS.to_string(),
    };
    let mut args = vec![
        format!("--kubeconfig={}", path("kubeconfig")),
        format!("--controllers={controllers}"),
        "--leader-elect=false".to_string(),
        // No serving port: nothing scrapes it locally.
        "--secure-port=0".to_string(),
        format!("--service-account-private-key-file={}", path("sa.key")),
        format!("--root-ca-file={}", path("ca.crt")),
        "--concurrent-gc-syncs=5".to_string(),
        "--v=1".to_string(),
    ];
    if let Some(duration) = csr_signing {
        for signer in ["kube-apiserver-client", "kubelet-client"] {
            args.extend([
                format!("--cluster-signing-{signer}-cert-file={}", path("ca.crt")),
                format!("--cluster-signing-{signer}-key-file={}", path("ca.key")),
            ]);
        }
        args.push(format!(
            "--cluster-signing-duration={}",
            go_duration(duration)
        ));
    }
    args
}

/// `duration` as Go's `time.ParseDuration` reads it (`90s`, `1500ms`), exactly.
fn go_duration(duration: Duration) -> String {
    if duration.subsec_nanos() == 0 {
        format!("{}s", duration.as_secs())
    } else if duration.subsec_nanos() % 1_000_000 == 0 {
        format!("{}ms", duration.as_millis())
    } else {
        format!("{}ns", duration.as_nanos())
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A shell that kills process group `group` once this process is gone (or, with
/// `end_with_group`, once the group's leader is gone), then removes `state` if asked.
pub(super) fn spawn_watchdog(
    group: u32,
    state: &Path,
    remove_state: bool,
    end_with_group: bool,
) -> Result<Child, ControlPlaneError> {
    let cleanup = if remove_state {
        format!(
            "sleep 0.5; rm -rf '{}'",
            state.display().to_string().replace('\'', "")
        )
    } else {
        String::from("true")
    };
    let group_alive = if end_with_group {
        format!(" && kill -0 {group} 2>/dev/null")
    } else {
        String::new()
    };
    let script = format!(
        "while kill -0 {owner} 2>/dev/null{group_alive}; do sleep 0.2; done; kill -KILL -{group} 2>/dev/null; {cleanup}; exit 0",
        owner = std::process::id(),
    );
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|source| ControlPlaneError::Spawn {
            binary: "sh (watchdog)",
            source,
        })
}

pub(super) fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> ControlPlaneError + '_ {
    move |source| ControlPlaneError::Io {
        path: path.display().to_string(),
        source,
    }
}

pub(super) fn write_file(path: &Path, content: &str) -> Result<(), ControlPlaneError> {
    fs::write(path, content).map_err(io_error(path))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(io_error(path))
}

fn spawn_logged(
    mut command: Command,
    binary: &'static str,
    log: &Path,
) -> Result<Child, ControlPlaneError> {
    let file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(io_error(log))?;
    let stderr = file.try_clone().map_err(io_error(log))?;
    command
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(stderr)
        .spawn()
        .map_err(|source| ControlPlaneError::Spawn { binary, source })
}

pub(super) fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

fn pki_contents(pki: &Pki) -> [&str; 8] {
    [
        &pki.ca_cert,
        &pki.ca_key,
        &pki.serving_cert,
        &pki.serving_key,
        &pki.admin_cert,
        &pki.admin_key,
        &pki.service_account_key,
        &pki.service_account_public_key,
    ]
}

/// The certificates and ports an earlier start left in `state`, when all of them are there
/// and etcd has data.
fn read_previous(state: &Path) -> Option<(Pki, RecordedPorts)> {
    let ports: RecordedPorts =
        serde_json::from_str(&fs::read_to_string(state.join(STATE_FILE)).ok()?).ok()?;
    let [
        ca_cert,
        ca_key,
        serving_cert,
        serving_key,
        admin_cert,
        admin_key,
        sa_key,
        sa_pub,
    ] = PKI_FILES.map(|name| fs::read_to_string(state.join(name)).ok());
    let pki = Pki {
        ca_cert: ca_cert?,
        ca_key: ca_key?,
        serving_cert: serving_cert?,
        serving_key: serving_key?,
        admin_cert: admin_cert?,
        admin_key: admin_key?,
        service_account_key: sa_key?,
        service_account_public_key: sa_pub?,
    };
    let has_data = fs::read_dir(state.join("etcd")).ok()?.next().is_some();
    has_data.then_some((pki, ports))
}

/// How long a recorded port may stay taken before new ports are chosen: the processes of a
/// previous start may still be on their way out.
const PORT_WAIT: Duration = Duration::from_secs(10);

/// `recorded`, once all three ports are free; new free ports when one stays taken for
/// [`PORT_WAIT`] (the state is still used; clients need the new kubeconfig).
async fn usable_ports(recorded: RecordedPorts) -> Result<RecordedPorts, ControlPlaneError> {
    let started = Instant::now();
    loop {
        let taken = [recorded.etcd, recorded.etcd_peer, recorded.apiserver]
            .into_iter()
            .find(|port| TcpListener::bind(("127.0.0.1", *port)).is_err());
        let Some(port) = taken else {
            return Ok(recorded);
        };
        if started.elapsed() > PORT_WAIT {
            let holder = crate::http::port_holder(port)
                .map(|h| h.to_string())
                .unwrap_or_else(|| "another process".to_string());
            let [etcd, etcd_peer, apiserver] = free_ports()?;
            tracing::warn!(
                port,
                %holder,
                apiserver,
                "a recorded port of the control plane is taken; starting on new ports (the kubeconfig changes)"
            );
            return Ok(RecordedPorts {
                etcd,
                etcd_peer,
                apiserver,
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn remove_if_present(path: &Path) -> Result<(), ControlPlaneError> {
    match fs::remove_dir_all(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(io_error(path)(error)),
        _ => Ok(()),
    }
}

/// Reserves three distinct free loopback ports (bound together so they differ).
pub(super) fn free_ports() -> Result<[u16; 3], ControlPlaneError> {
    let bind = || {
        TcpListener::bind("127.0.0.1:0").map_err(|source| ControlPlaneError::Io {
            path: "127.0.0.1:0".into(),
            source,
        })
    };
    let listeners = [bind()?, bind()?, bind()?];
    let mut ports = [0u16; 3];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener
            .local_addr()
            .map_err(|source| ControlPlaneError::Io {
                path: "127.0.0.1:0".into(),
                source,
            })?
            .port();
    }
    Ok(ports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csr_signing_adds_the_signer_and_the_token_cleaner_to_kube_controller_manager() {
        let state = Path::new("/state");
        let plain = controller_manager_args(state, None);
        assert!(plain.contains(&format!("--controllers={CONTROLLERS}")));
        assert!(!plain.iter().any(|a| a.starts_with("--cluster-signing")));

        let signing = controller_manager_args(state, Some(Duration::from_secs(90)));
        assert!(signing.contains(&format!(
            "--controllers={CONTROLLERS},certificatesigningrequest-signing-controller,\
             certificatesigningrequest-approving-controller,token-cleaner-controller"
        )));
        for flag in [
            "--cluster-signing-kube-apiserver-client-cert-file=/state/ca.crt",
            "--cluster-signing-kube-apiserver-client-key-file=/state/ca.key",
            "--cluster-signing-kubelet-client-cert-file=/state/ca.crt",
            "--cluster-signing-kubelet-client-key-file=/state/ca.key",
            "--cluster-signing-duration=90s",
        ] {
            assert!(signing.iter().any(|a| a == flag), "{flag} in {signing:?}");
        }
    }

    #[test]
    fn durations_are_written_as_go_reads_them() {
        assert_eq!(go_duration(Duration::from_secs(90)), "90s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(go_duration(Duration::from_nanos(1_000_001)), "1000001ns");
    }

    #[test]
    fn a_reused_state_folder_needs_the_ca_key() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path();
        let pki = pki::generate().unwrap();
        for (name, content) in PKI_FILES.iter().zip(pki_contents(&pki)) {
            fs::write(state.join(name), content).unwrap();
        }
        let ports = RecordedPorts {
            etcd: 1,
            etcd_peer: 2,
            apiserver: 3,
        };
        fs::write(
            state.join(STATE_FILE),
            serde_json::to_string(&ports).unwrap(),
        )
        .unwrap();
        fs::create_dir_all(state.join("etcd/member")).unwrap();
        let (read, read_ports) = read_previous(state).unwrap();
        assert_eq!(read.ca_key, pki.ca_key);
        assert_eq!(read_ports, ports);
        // A folder from before the CA key was kept starts fresh.
        fs::remove_file(state.join("ca.key")).unwrap();
        assert!(read_previous(state).is_none());
    }
}
