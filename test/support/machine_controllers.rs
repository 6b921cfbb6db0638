//! Test support: the real machine-controller-manager v0.62.1 and a machine driver of the
//! same framework, as processes against the test control plane — what gardenlet deploys into
//! a shoot's seed namespace (`machine-controller-manager` Deployment, MCM core plus the
//! provider's machine controller).
//!
//! Both are built by `hack/envtest.sh` from their Go modules (MCM core from
//! `github.com/gardener/machine-controller-manager`, provider-local's machine controller from
//! gardener v1.149.3, our `machine-provider-nspawn` from `hack/envtest/components`). They
//! watch one namespace of the seed (`--control-kubeconfig`) and the shoot's Nodes
//! (`--target-kubeconfig`, or `none` without a shoot), run with leader election (their Leases
//! in that namespace) on free loopback ports, log to files (printed when a test fails), and never outlive the test
//! binary (process group plus [`super::spawn_child_watchdog`]).

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Which machine driver runs beside MCM core.
#[derive(Debug, Clone)]
pub enum Driver {
    /// gardener's provider-local machine controller (Pods in the seed as machines).
    ProviderLocal,
    /// Ours: machines from the node cloud at this URL (`support::node_cloud`).
    Nspawn {
        /// The node cloud's base URL.
        url: String,
        /// provider-local's blocking create: the create call returns only once the cloud
        /// runs the machine (at most 10 minutes, as provider-local waits for its Pod;
        /// `--create-wait-until-running`).
        blocking_create: bool,
    },
}

/// Where the controllers point.
#[derive(Debug, Clone)]
pub struct Targets<'a> {
    /// `hack/envtest.sh`'s folder.
    pub assets: &'a Path,
    /// The seed's admin kubeconfig (YAML).
    pub seed_kubeconfig: &'a str,
    /// The shoot's admin kubeconfig (YAML); `None` runs with `--target-kubeconfig=none`.
    pub shoot_kubeconfig: Option<&'a str>,
    /// The shoot's namespace in the seed.
    pub namespace: &'a str,
}

/// One running controller.
struct Controller {
    name: &'static str,
    child: Child,
    watchdog: Child,
    log: PathBuf,
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
    }
}

/// MCM core and a driver, running.
pub struct MachineControllers {
    dir: tempfile::TempDir,
    assets: PathBuf,
    /// The flags both take: the kubeconfigs (written once into `dir`) and the namespace.
    common_args: Vec<String>,
    driver: Driver,
    core: Option<Controller>,
    machine_controller: Option<Controller>,
}

impl MachineControllers {
    /// Starts MCM core and the machine controller of `driver`.
    pub fn start(targets: &Targets<'_>, driver: Driver) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("gen-mcm-")
            .tempdir()
            .expect("MCM folder");
        let write = |name: &str, kubeconfig: &str| {
            let path = dir.path().join(name);
            fs::write(&path, kubeconfig).expect("kubeconfig written");
            path.display().to_string()
        };
        let seed = write("seed.kubeconfig", targets.seed_kubeconfig);
        let target = match targets.shoot_kubeconfig {
            Some(shoot) => write("shoot.kubeconfig", shoot),
            None => "none".to_string(),
        };
        let common_args = vec![
            format!("--control-kubeconfig={seed}"),
            format!("--target-kubeconfig={target}"),
            format!("--namespace={}", targets.namespace),
            // As gardenlet runs them: each keeps its leader Lease in the namespace, which the
            // Worker reads to tell a stopped MCM (`mcm_liveness`). The identity is the host
            // name, so a restarted process takes its Lease back at once.
            "--leader-elect=true".to_string(),
            "--address=127.0.0.1".to_string(),
            "--v=3".to_string(),
        ];
        let mut controllers = Self {
            dir,
            assets: targets.assets.to_path_buf(),
            common_args,
            driver,
            core: None,
            machine_controller: None,
        };
        controllers.start_core();
        controllers.start_machine_controller();
        controllers
    }

    /// Starts MCM core again (after [`Self::stop_core`]).
    pub fn start_core(&mut self) {
        self.core = Some(self.spawn("machine-controller-manager", &[]));
    }

    /// Stops MCM core (SIGKILL), e.g. to test the Worker without it.
    pub fn stop_core(&mut self) {
        self.core = None;
    }

    /// Starts the machine controller again (after [`Self::stop_machine_controller`]).
    pub fn start_machine_controller(&mut self) {
        let (binary, extra): (&'static str, Vec<String>) = match &self.driver {
            Driver::ProviderLocal => ("machine-controller-manager-provider-local", Vec::new()),
            Driver::Nspawn {
                url,
                blocking_create,
            } => {
                let mut flags = vec![format!("--node-cloud-url={url}")];
                if *blocking_create {
                    flags.push("--create-wait-until-running=10m".to_string());
                }
                ("machine-provider-nspawn", flags)
            }
        };
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        self.machine_controller = Some(self.spawn(binary, &extra));
    }

    /// Stops the machine controller (SIGKILL): a driver crash.
    pub fn stop_machine_controller(&mut self) {
        self.machine_controller = None;
    }

    fn spawn(&self, binary: &'static str, extra: &[&str]) -> Controller {
        let log = self.dir.path().join(format!("{binary}.log"));
        let out = fs::File::create(&log).expect("log file");
        let mut command = Command::new(self.assets.join(binary));
        command
            .args(&self.common_args)
            .arg(format!("--port={}", super::agent::free_port()))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .process_group(0);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("{binary} does not start: {e} (run hack/envtest.sh)"));
        let watchdog = super::spawn_child_watchdog(child.id());
        Controller {
            name: binary,
            child,
            watchdog,
            log,
        }
    }

    /// The last `lines` lines of each controller's log, for failure messages.
    pub fn logs(&self, lines: usize) -> String {
        [&self.core, &self.machine_controller]
            .into_iter()
            .flatten()
            .map(|c| {
                let text = fs::read_to_string(&c.log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(lines).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {} ---\n{}\n", c.name, tail.join("\n"))
            })
            .collect()
    }
}
