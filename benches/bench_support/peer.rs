//! Test support: the Go extensions the benches measure side by side with the operator
//! ("peers"), run against the test control plane like [`crate::support::operator::OperatorProcess`]:
//! a child process in its own process group with a watchdog, so it never outlives the test
//! binary. The binaries come from `hack/peers.sh`, which builds them from the published source
//! archives in `../shared/peers/` and caches them outside the repository.
//!
//! Each peer gets the flags it needs to run against the plain test kube-apiserver (no
//! cluster, no leader election, loopback ports) and nothing that changes how it reconciles;
//! [`PeerProcess::described_flags`] lists them for the bench's text.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A Go extension measured beside ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// gardener-extension-runtime-gvisor: ContainerRuntime of type `gvisor`.
    RuntimeGvisor,
    /// gardener-extension-os-gardenlinux: OperatingSystemConfig of type `gardenlinux`.
    OsGardenlinux,
    /// gardener-extension-provider-local (gardener v1.149.3): its Worker controller, Worker of
    /// type `local`.
    ProviderLocal,
}

impl Peer {
    /// Its name in `hack/peers.sh` and `../shared/peers/<name>.tar.gz`.
    pub fn name(self) -> &'static str {
        match self {
            Peer::RuntimeGvisor => "runtime-gvisor",
            Peer::OsGardenlinux => "os-gardenlinux",
            Peer::ProviderLocal => "provider-local",
        }
    }

    /// Its binary (`./cmd/<binary>` in its module).
    pub fn binary(self) -> &'static str {
        match self {
            Peer::RuntimeGvisor => "gardener-extension-runtime-gvisor",
            Peer::OsGardenlinux => "gardener-extension-os-gardenlinux",
            Peer::ProviderLocal => "gardener-extension-provider-local",
        }
    }

    /// The controller whose start ("Starting workers") means the peer reconciles.
    fn main_controller(self) -> &'static str {
        match self {
            Peer::RuntimeGvisor => "containerruntime",
            Peer::OsGardenlinux => "operatingsystemconfig",
            Peer::ProviderLocal => "worker",
        }
    }

    /// Its flag for the main controller's workers: provider-local runs many controllers and
    /// prefixes each one's options with its name.
    fn max_concurrent_reconciles_flag(self) -> &'static str {
        match self {
            Peer::RuntimeGvisor | Peer::OsGardenlinux => "--max-concurrent-reconciles",
            Peer::ProviderLocal => "--worker-max-concurrent-reconciles",
        }
    }

    /// Whether a request's `User-Agent` is the peer's: controller-runtime's client sends
    /// `<binary>/<version> (<os>/<arch>) kubernetes/<commit>`.
    pub fn is_client(self, user_agent: &str) -> bool {
        user_agent
            .strip_prefix(self.binary())
            .is_some_and(|rest| rest.starts_with('/'))
    }

    /// Builds the peer with `hack/peers.sh` (at once when cached) and returns its binary, or
    /// why it cannot be built (the script's last words on stderr). The script's progress goes
    /// to this process's stderr as well.
    pub fn build(self) -> Result<PathBuf, String> {
        let script = crate::support::repo_root().join("hack/peers.sh");
        let output = Command::new("bash")
            .arg(&script)
            .arg(self.name())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("hack/peers.sh does not run: {e}"))?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        eprint!("{stderr}");
        if !output.status.success() {
            let why = stderr
                .lines()
                .rev()
                .find(|l| l.starts_with("peers: "))
                .map(|l| l.trim_start_matches("peers: ").to_string())
                .unwrap_or_else(|| {
                    let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
                    format!(
                        "hack/peers.sh failed ({}): {}",
                        output.status,
                        tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
                    )
                });
            return Err(why);
        }
        let folder = String::from_utf8_lossy(&output.stdout);
        let binary =
            Path::new(folder.lines().last().unwrap_or_default().trim()).join(self.binary());
        if binary.is_file() {
            Ok(binary)
        } else {
            Err(format!(
                "hack/peers.sh printed no folder holding {}",
                self.binary()
            ))
        }
    }
}

/// What a peer is started with besides its own flags; the same values ours gets.
#[derive(Debug, Clone)]
pub struct PeerOptions {
    /// `--max-concurrent-reconciles` (ours: 5 by default).
    pub max_concurrent_reconciles: usize,
    /// `--heartbeat-namespace` (must exist).
    pub heartbeat_namespace: String,
}

/// A running peer.
pub struct PeerProcess {
    child: Child,
    watchdog: Child,
    peer: Peer,
    /// Its log file.
    pub log: PathBuf,
    /// The flags it was started with, machine paths replaced by what they are.
    described: Vec<String>,
    /// The folder holding the kubeconfig, the webhook certificates and the log; removed on
    /// drop unless the test failed.
    dir: Option<PathBuf>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

impl PeerProcess {
    /// Starts `peer` from `binary` against the API server of `kubeconfig`.
    ///
    /// Every peer: `--kubeconfig`, `--leader-election=false`, `--metrics-bind-address` and
    /// `--health-bind-address` on free loopback ports, `--heartbeat-namespace`,
    /// `--max-concurrent-reconciles`, `--ignore-operation-annotation=false` (as their charts
    /// and gardenlet: act on the operation annotation). os-gardenlinux and provider-local also
    /// get their webhook server's flags (URL mode on a free loopback port, certificates
    /// generated into a folder of this run) and `--disable-webhooks=*`: their webhooks mutate
    /// what gardenlet or other components write (gardenlinux OSCs; provider-local's control
    /// plane, shoot and node webhooks), which is not the measured controller's work, and a
    /// registered webhook configuration would outlive the peer and intercept the next run's
    /// writes. provider-local runs only `--controllers=worker,heartbeat`: the others reconcile
    /// kinds the bench does not create.
    pub fn start(peer: Peer, binary: &Path, kubeconfig: &str, options: &PeerOptions) -> Self {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!(
            "gardener-extension-node-peer-{}-{}-{n}",
            peer.name(),
            std::process::id()
        ));
        fs::create_dir_all(&dir).expect("peer dir");
        let kubeconfig_path = dir.join("kubeconfig");
        fs::write(&kubeconfig_path, kubeconfig).expect("kubeconfig written");
        let log = dir.join(format!("{}.log", peer.name()));

        // (flag, value as described in the bench's text)
        let mut args: Vec<(String, String)> = vec![
            (
                format!("--kubeconfig={}", kubeconfig_path.display()),
                "--kubeconfig=<the admin kubeconfig>".into(),
            ),
            (
                "--leader-election=false".into(),
                "--leader-election=false".into(),
            ),
            (
                format!("--metrics-bind-address=127.0.0.1:{}", free_port()),
                "--metrics-bind-address=127.0.0.1:<free port>".into(),
            ),
            (
                format!("--health-bind-address=127.0.0.1:{}", free_port()),
                "--health-bind-address=127.0.0.1:<free port>".into(),
            ),
            (
                format!("--heartbeat-namespace={}", options.heartbeat_namespace),
                format!("--heartbeat-namespace={}", options.heartbeat_namespace),
            ),
            (
                format!(
                    "{}={}",
                    peer.max_concurrent_reconciles_flag(),
                    options.max_concurrent_reconciles
                ),
                format!(
                    "{}={}",
                    peer.max_concurrent_reconciles_flag(),
                    options.max_concurrent_reconciles
                ),
            ),
            (
                "--ignore-operation-annotation=false".into(),
                "--ignore-operation-annotation=false".into(),
            ),
        ];
        if peer == Peer::ProviderLocal {
            // Only the controller measured, and its heartbeat as every peer has one.
            args.push((
                "--controllers=worker,heartbeat".into(),
                "--controllers=worker,heartbeat".into(),
            ));
        }
        if matches!(peer, Peer::OsGardenlinux | Peer::ProviderLocal) {
            let port = free_port();
            let certs = dir.join("webhook-certs");
            fs::create_dir_all(&certs).expect("webhook cert dir");
            args.extend([
                ("--disable-webhooks=*".into(), "--disable-webhooks=*".into()),
                (
                    "--webhook-config-mode=url".into(),
                    "--webhook-config-mode=url".into(),
                ),
                (
                    format!("--webhook-config-url=127.0.0.1:{port}"),
                    "--webhook-config-url=127.0.0.1:<free port>".into(),
                ),
                (
                    "--webhook-config-server-host=127.0.0.1".into(),
                    "--webhook-config-server-host=127.0.0.1".into(),
                ),
                (
                    format!("--webhook-config-server-port={port}"),
                    "--webhook-config-server-port=<that port>".into(),
                ),
                (
                    format!("--webhook-config-cert-dir={}", certs.display()),
                    "--webhook-config-cert-dir=<a folder of the run>".into(),
                ),
            ]);
        }

        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log file");
        let err = out.try_clone().expect("log file");
        let child = Command::new(binary)
            .args(args.iter().map(|(flag, _)| flag))
            // Read when no flag sets them; the flags above are all it gets.
            .env_remove("LEADER_ELECTION_NAMESPACE")
            .env_remove("WEBHOOK_CONFIG_NAMESPACE")
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("{} starts: {e}", binary.display()));
        let watchdog = crate::support::spawn_child_watchdog(child.id());
        PeerProcess {
            child,
            watchdog,
            peer,
            log,
            described: args.into_iter().map(|(_, described)| described).collect(),
            dir: Some(dir),
        }
    }

    /// Which peer this is.
    pub fn peer(&self) -> Peer {
        self.peer
    }

    /// The flags it was started with, machine paths and ports replaced by what they are.
    pub fn described_flags(&self) -> &[String] {
        &self.described
    }

    /// Waits until its main controller has started its workers (its caches have synced);
    /// panics with the log's tail when it exits or `timeout` passes first.
    pub async fn wait_started(&mut self, timeout: Duration) {
        let wanted = format!("\"controller\":\"{}\"", self.peer.main_controller());
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let text = self.log_text();
            if text
                .lines()
                .any(|l| l.contains("Starting workers") && l.contains(&wanted))
            {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{} exited ({status}) before starting; log tail:\n{}",
                    self.peer.binary(),
                    tail(&text)
                );
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "{} has not started its {} workers after {timeout:?}; log tail:\n{}",
                    self.peer.binary(),
                    self.peer.main_controller(),
                    tail(&text)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The peer's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU time (user + system) it has used so far, in seconds.
    pub fn cpu_seconds(&self) -> Option<f64> {
        crate::support::process::cpu_seconds(self.child.id())
    }

    /// Current resident set size (VmRSS) in KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        crate::support::process::rss_kib(self.child.id())
    }

    /// Peak resident set size (VmHWM) in KiB.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        crate::support::process::peak_rss_kib(self.child.id())
    }

    /// SIGKILLs the peer and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        self.kill();
        // A failed bench keeps the log for the person reading the failure.
        if let Some(dir) = self.dir.take().filter(|_| !std::thread::panicking()) {
            let _ = fs::remove_dir_all(dir);
        }
    }
}
