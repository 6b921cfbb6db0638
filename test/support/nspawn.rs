//! Test support: a real systemd, booted with `systemd-nspawn`, for node-side e2e tests.
//!
//! ```text
//! let machine = Machine::boot(MachineOptions::default()).expect("machine boots");
//! machine.write_file("/etc/containerd/config.toml", b"version = 2\n", 0o644)?;
//! machine.run(&["systemctl", "start", "containerd"]).expect_success("start containerd");
//! machine.wait_for_unit_state("containerd.service", "active", Duration::from_secs(30))?;
//! let id = machine.unit_property("containerd.service", "InvocationID");
//! ```
//!
//! How it boots: `systemd-nspawn --volatile=yes -D / --register=no --keep-unit --boot`. The
//! container's root is a fresh tmpfs with the host's `/usr` mounted read-only, so whatever
//! Debian packages are installed on the host (containerd, runsc, ...) are there, while
//! `/etc`, `/var` and `/run` start empty and vanish with the container. systemd boots into
//! `basic.target` by default (`systemd.unit=` on its command line), so only what a test
//! starts runs — not every service the host happens to have installed — and boot takes a
//! second or two. `systemd.firstboot=off` skips the interactive first-boot questions.
//!
//! What it needed in the sandbox it was written in (Debian 12, systemd 252 from
//! `systemd-container`, no systemd as PID 1 on the host, cgroup v1/v2 hybrid, root):
//! - `--register=no` and `--keep-unit`: there is no host systemd/machined to register with
//!   or to create a scope unit (without `--keep-unit` nspawn fails with "Failed to open
//!   system bus").
//! - `--console=passive` and stdin from `/dev/null`: no TTY in tests.
//! - Nothing else: Debian's containerd 1.6 starts and serves inside with nspawn's default
//!   capabilities and mounts (nspawn warns that some capabilities are not in the bounding
//!   set; harmless). The host network is shared unless
//!   [`MachineOptions::private_network`] is set, so services inside can reach a
//!   kube-apiserver on host loopback.
//!
//! Cgroups: each machine starts in folders of its own below this process's cgroup
//! (`gen-machine-<pid>-<n>` in every hierarchy), so its cgroup namespace is rooted there.
//! Machines of one test binary must not share a cgroup: their systemds would both manage
//! `system.slice/<unit>`, and one stopping a unit kills the other's process of that unit.
//!
//! Reaching it: commands run through `nsenter -t <leader> -a` (every namespace of the
//! container's PID 1, the "leader"), with a clean environment (`PATH` only, plus what the
//! caller adds). Files go in and out through `/proc/<leader>/root`, and the container's
//! system bus is `unix:path=/proc/<leader>/root/run/dbus/system_bus_socket`, so host-side
//! D-Bus clients (zbus) can talk to its systemd directly.
//!
//! Clean-up: [`Machine::stop`] (also on drop) SIGKILLs the leader, which ends every process
//! of the container's PID namespace, and nspawn exits and removes its mounts. A watchdog
//! (`sh`, in its own process group) polls the test binary and does the same once it is
//! gone, so a machine held in a `static`, a panic or a SIGKILL of the test binary leaves no
//! container behind.

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// `PATH` of commands run in the container.
const CONTAINER_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

static MACHINE_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// How to boot a machine.
#[derive(Debug, Clone)]
pub struct MachineOptions {
    /// The unit systemd boots into.
    pub target: String,
    /// Read-only bind mounts: (host path, path in the container). Files and folders.
    pub bind_ro: Vec<(PathBuf, PathBuf)>,
    /// Read-write bind mounts: (host path, path in the container).
    pub bind: Vec<(PathBuf, PathBuf)>,
    /// Give the container its own network namespace with only loopback.
    pub private_network: bool,
    /// How long to wait for `systemctl is-system-running --wait`.
    pub boot_timeout: Duration,
    /// More `systemd-nspawn` options (e.g. `--capability=all`).
    pub extra_args: Vec<String>,
    /// Environment of `systemd-nspawn` itself (e.g. `SYSTEMD_SECCOMP=0`).
    pub nspawn_env: Vec<(String, String)>,
    /// Host folders (e.g. behind a read-write bind) removed once the machine is gone, also
    /// by the watchdog.
    pub scratch_dirs: Vec<PathBuf>,
}

impl Default for MachineOptions {
    fn default() -> Self {
        Self {
            target: "basic.target".into(),
            bind_ro: Vec::new(),
            bind: Vec::new(),
            private_network: false,
            boot_timeout: Duration::from_secs(60),
            extra_args: Vec::new(),
            nspawn_env: Vec::new(),
            scratch_dirs: Vec::new(),
        }
    }
}

/// Why a machine did not boot or a wait timed out.
#[derive(Debug)]
pub enum NspawnError {
    /// A required tool is missing or we are not root.
    Prerequisite(String),
    /// nspawn could not be started.
    Spawn(io::Error),
    /// nspawn exited or systemd did not come up; the console log is attached.
    Boot {
        /// What went wrong.
        reason: String,
        /// nspawn's and systemd's console output.
        console: String,
    },
    /// A unit did not reach the state in time.
    UnitState {
        /// The unit.
        unit: String,
        /// The state waited for.
        wanted: String,
        /// The last state seen.
        last: String,
        /// `systemctl status` and the journal tail.
        status: String,
    },
}

impl std::fmt::Display for NspawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Prerequisite(what) => write!(f, "cannot boot a machine: {what}"),
            Self::Spawn(error) => write!(f, "starting systemd-nspawn: {error}"),
            Self::Boot { reason, console } => {
                write!(
                    f,
                    "machine did not boot: {reason}\n--- console ---\n{console}"
                )
            }
            Self::UnitState {
                unit,
                wanted,
                last,
                status,
            } => write!(
                f,
                "{unit} did not become {wanted} (last: {last})\n--- status ---\n{status}"
            ),
        }
    }
}

impl std::error::Error for NspawnError {}

/// Output of a command run in the container.
#[derive(Debug)]
pub struct CommandOutput {
    /// Exit status of `nsenter`, which is the command's.
    pub status: ExitStatus,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl CommandOutput {
    /// True on exit code 0.
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// Panics with both streams unless the command succeeded; returns self otherwise.
    #[track_caller]
    pub fn expect_success(self, what: &str) -> Self {
        assert!(
            self.success(),
            "{what} failed ({})\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }
}

/// A booted container running systemd as its PID 1.
pub struct Machine {
    name: String,
    leader: u32,
    nspawn: Mutex<Option<Child>>,
    watchdog: Mutex<Option<Child>>,
    console_log: PathBuf,
    cgroups: Vec<PathBuf>,
    scratch_dirs: Vec<PathBuf>,
    _work_dir: tempfile::TempDir,
}

impl Machine {
    /// Checks that this host can boot machines: root, `systemd-nspawn` and `nsenter`.
    pub fn check_prerequisites() -> Result<(), NspawnError> {
        let uid = Command::new("id")
            .arg("-u")
            .output()
            .map_err(NspawnError::Spawn)?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            return Err(NspawnError::Prerequisite("tests must run as root".into()));
        }
        for tool in ["systemd-nspawn", "nsenter"] {
            let found = Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .stdout(Stdio::null())
                .status()
                .map_err(NspawnError::Spawn)?
                .success();
            if !found {
                return Err(NspawnError::Prerequisite(format!(
                    "{tool} not found; run hack/install-deps.sh (Debian package systemd-container / util-linux)"
                )));
            }
        }
        Ok(())
    }

    /// Boots a machine and waits until systemd reports the boot finished (`running` or
    /// `degraded`).
    pub fn boot(options: MachineOptions) -> Result<Self, NspawnError> {
        Self::boot_named(options, Self::reserve_name())
    }

    /// A fresh machine name (`gen-<pid>-<n>`), for [`Self::boot_named`]: a caller that must
    /// say the name before the machine boots (a machine provider's create call) reserves it.
    pub fn reserve_name() -> String {
        format!(
            "gen-{}-{}",
            std::process::id(),
            MACHINE_COUNTER.fetch_add(1, Ordering::SeqCst)
        )
    }

    /// [`Self::boot`] under a name from [`Self::reserve_name`] (also the host name).
    pub fn boot_named(options: MachineOptions, name: String) -> Result<Self, NspawnError> {
        Self::check_prerequisites()?;
        // Every machine gets cgroup folders of its own: two machines in one cgroup would
        // share `system.slice/<unit>`, and one's systemd stopping a unit would kill the
        // other's process of that unit (seen as dbus-daemon resetting connections and
        // "Failed to attach to cgroup" when containerd restarted).
        remove_stale_cgroups();
        let cgroups = create_cgroups(&format!("{CGROUP_PREFIX}{}", &name["gen-".len()..]))
            .map_err(NspawnError::Prerequisite)?;
        // From here on the folders are the machine's: a failed boot removes them.
        Self::start(name, options, cgroups.clone()).inspect_err(|_| remove_cgroups(&cgroups))
    }

    /// Starts nspawn in `cgroups` and waits for the boot.
    fn start(
        name: String,
        options: MachineOptions,
        cgroups: Vec<PathBuf>,
    ) -> Result<Self, NspawnError> {
        let work_dir = tempfile::Builder::new()
            .prefix("gen-nspawn-")
            .tempdir()
            .map_err(NspawnError::Spawn)?;
        let console_log = work_dir.path().join("console.log");
        let log = fs::File::create(&console_log).map_err(NspawnError::Spawn)?;
        let log_err = log.try_clone().map_err(NspawnError::Spawn)?;

        // With cgroups to join, a shell moves itself into them and then becomes nspawn.
        let mut command = if cgroups.is_empty() {
            Command::new("systemd-nspawn")
        } else {
            let procs: Vec<String> = cgroups
                .iter()
                .map(|dir| dir.join("cgroup.procs").display().to_string())
                .collect();
            let mut command = Command::new("sh");
            command
                .args([
                    "-c",
                    "for f in $GEN_CGROUP_PROCS; do echo $$ > \"$f\" || exit 125; done; exec \"$@\"",
                    "sh",
                    "systemd-nspawn",
                ])
                .env("GEN_CGROUP_PROCS", procs.join(" "));
            command
        };
        command
            .args(["--quiet", "--volatile=yes", "--directory=/"])
            .args(["--register=no", "--keep-unit", "--console=passive"])
            .arg(format!("--machine={name}"));
        if options.private_network {
            command.arg("--private-network");
        }
        command.args(&options.extra_args);
        command.envs(options.nspawn_env.iter().map(|(k, v)| (k, v)));
        for (host, inside) in &options.bind_ro {
            command.arg(format!("--bind-ro={}:{}", host.display(), inside.display()));
        }
        for (host, inside) in &options.bind {
            command.arg(format!("--bind={}:{}", host.display(), inside.display()));
        }
        command
            .arg("--boot")
            .arg("systemd.firstboot=off")
            .arg(format!("systemd.unit={}", options.target))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            // Its own group: a Ctrl-C of `cargo test` reaches the watchdog's kill, not nspawn's
            // graceful shutdown path first.
            .process_group(0);
        let mut nspawn = command.spawn().map_err(NspawnError::Spawn)?;

        let started = Instant::now();
        let leader = loop {
            if let Some(leader) = find_leader(nspawn.id()) {
                break leader;
            }
            if let Ok(Some(status)) = nspawn.try_wait() {
                return Err(NspawnError::Boot {
                    reason: format!("systemd-nspawn exited ({status})"),
                    console: read_log(&console_log),
                });
            }
            if started.elapsed() > options.boot_timeout {
                let _ = nspawn.kill();
                let _ = nspawn.wait();
                return Err(NspawnError::Boot {
                    reason: "no systemd appeared in the container".into(),
                    console: read_log(&console_log),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let watchdog = spawn_watchdog(leader, &cgroups, &options.scratch_dirs).map_err(|e| {
            kill(leader);
            NspawnError::Spawn(e)
        })?;
        let machine = Self {
            name,
            leader,
            nspawn: Mutex::new(Some(nspawn)),
            watchdog: Mutex::new(Some(watchdog)),
            console_log,
            cgroups,
            scratch_dirs: options.scratch_dirs.clone(),
            _work_dir: work_dir,
        };
        machine.wait_for_boot(started, options.boot_timeout)?;
        Ok(machine)
    }

    /// The machine (and host) name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The machine's cgroup folders on the host, one per hierarchy.
    pub fn cgroups(&self) -> &[PathBuf] {
        &self.cgroups
    }

    /// Host PID of the container's PID 1 (systemd).
    pub fn leader_pid(&self) -> u32 {
        self.leader
    }

    /// The container's root as seen from the host (`/proc/<leader>/root`).
    pub fn root(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root", self.leader))
    }

    /// Host-side path of `path` (absolute, in the container).
    pub fn host_path(&self, path: impl AsRef<Path>) -> PathBuf {
        let path = path.as_ref();
        self.root().join(path.strip_prefix("/").unwrap_or(path))
    }

    /// D-Bus address of the container's system bus, usable from the host.
    pub fn system_bus_address(&self) -> String {
        format!(
            "unix:path={}",
            self.host_path("/run/dbus/system_bus_socket").display()
        )
    }

    /// A command that runs `program` in the container (all its namespaces), with only
    /// `PATH` set; add arguments, environment and stdio as with any [`Command`].
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new("nsenter");
        command
            .env_clear()
            .env("PATH", CONTAINER_PATH)
            .args(["-t", &self.leader.to_string(), "-a", "--", program])
            .stdin(Stdio::null());
        command
    }

    /// Runs a command in the container and captures its output.
    pub fn run(&self, args: &[&str]) -> CommandOutput {
        let (program, rest) = args.split_first().expect("a command to run");
        let mut command = self.command(program);
        command.args(rest);
        output_of(command)
    }

    /// Runs a shell script (`sh -c`) in the container and captures its output.
    pub fn sh(&self, script: &str) -> CommandOutput {
        self.run(&["sh", "-c", script])
    }

    /// Writes a file in the container (parents created), with `mode`.
    pub fn write_file(&self, path: impl AsRef<Path>, content: &[u8], mode: u32) -> io::Result<()> {
        let target = self.host_path(path);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::write(&target, content)?;
        fs::set_permissions(&target, fs::Permissions::from_mode(mode))
    }

    /// Copies a host file into the container, with `mode`.
    pub fn copy_in(&self, source: &Path, path: impl AsRef<Path>, mode: u32) -> io::Result<()> {
        let content = fs::read(source)?;
        self.write_file(path, &content, mode)
    }

    /// Reads a file of the container.
    pub fn read_file(&self, path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
        fs::read(self.host_path(path))
    }

    /// True when the path exists in the container. A symlink counts as existing without
    /// being followed: an absolute link target would resolve on the host, not in here.
    pub fn exists(&self, path: impl AsRef<Path>) -> bool {
        fs::symlink_metadata(self.host_path(path)).is_ok()
    }

    /// The target of a symlink in the container, as written in the link.
    pub fn read_link(&self, path: impl AsRef<Path>) -> io::Result<PathBuf> {
        fs::read_link(self.host_path(path))
    }

    /// One property of a unit (`systemctl show -P`), trimmed; empty if unset.
    pub fn unit_property(&self, unit: &str, property: &str) -> String {
        self.run(&["systemctl", "show", "-P", property, "--", unit])
            .stdout
            .trim()
            .to_string()
    }

    /// Waits until the unit's `ActiveState` is `wanted`; fails early when it becomes
    /// `failed` while waiting for something else.
    pub fn wait_for_unit_state(
        &self,
        unit: &str,
        wanted: &str,
        timeout: Duration,
    ) -> Result<(), NspawnError> {
        let started = Instant::now();
        loop {
            let state = self.unit_property(unit, "ActiveState");
            if state == wanted {
                return Ok(());
            }
            if (state == "failed" && wanted != "failed") || started.elapsed() > timeout {
                let status = self.sh(&format!(
                    "systemctl status --no-pager -- '{unit}'; journalctl --no-pager -n 30 -u '{unit}'"
                ));
                return Err(NspawnError::UnitState {
                    unit: unit.to_string(),
                    wanted: wanted.to_string(),
                    last: state,
                    status: format!("{}{}", status.stdout, status.stderr),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The journal of a unit (message text only), all invocations.
    pub fn journal(&self, unit: &str) -> String {
        self.run(&["journalctl", "--no-pager", "-o", "cat", "-u", unit])
            .stdout
    }

    /// The journal of one invocation of a unit (by InvocationID).
    pub fn journal_of_invocation(&self, invocation_id: &str) -> String {
        self.run(&[
            "journalctl",
            "--no-pager",
            "-o",
            "cat",
            &format!("_SYSTEMD_INVOCATION_ID={invocation_id}"),
        ])
        .stdout
    }

    /// What nspawn and systemd printed on the console so far.
    pub fn console(&self) -> String {
        read_log(&self.console_log)
    }

    /// Kills the container and waits for nspawn to exit. Idempotent.
    pub fn stop(&self) {
        let nspawn = self.nspawn.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut nspawn) = nspawn {
            // SIGKILL to the PID namespace's init ends every process in it; nspawn then
            // tears down its mounts and exits.
            kill(self.leader);
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = nspawn.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = nspawn.kill();
            let _ = nspawn.wait();
        }
        // The watchdog stays until the folders are gone: should this process exit while
        // they are still being removed, it finishes the removal.
        remove_cgroups(&self.cgroups);
        for dir in &self.scratch_dirs {
            let _ = fs::remove_dir_all(dir);
        }
        let watchdog = self
            .watchdog
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(mut watchdog) = watchdog {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }

    fn wait_for_boot(&self, started: Instant, timeout: Duration) -> Result<(), NspawnError> {
        let mut last = String::new();
        while started.elapsed() < timeout {
            // Fails while systemd's private socket is not up yet; then blocks until the
            // boot transaction is done — bounded by what is left of `timeout`, since a boot
            // job that never finishes would block it for good.
            let left = timeout.saturating_sub(started.elapsed()).as_secs().max(1);
            let output = self.run(&[
                "timeout",
                &left.to_string(),
                "systemctl",
                "is-system-running",
                "--wait",
            ]);
            let state = output.stdout.trim().to_string();
            if state == "running" || state == "degraded" {
                return Ok(());
            }
            last = format!("{state} {}", output.stderr.trim());
            std::thread::sleep(Duration::from_millis(50));
        }
        self.stop();
        Err(NspawnError::Boot {
            reason: format!("systemd did not finish booting in {timeout:?} (last: {last})"),
            console: self.console(),
        })
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The container's PID 1 among nspawn's children: comm `systemd`, PID 1 in its namespace.
fn find_leader(nspawn: u32) -> Option<u32> {
    let children = fs::read_to_string(format!("/proc/{nspawn}/task/{nspawn}/children")).ok()?;
    children
        .split_whitespace()
        .filter_map(|pid| pid.parse::<u32>().ok())
        .find(|pid| {
            let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let pid_one_inside = status
                .lines()
                .find(|line| line.starts_with("NSpid:"))
                .and_then(|line| line.split_whitespace().last())
                == Some("1");
            comm.trim() == "systemd" && pid_one_inside
        })
}

/// Kills the container when this test binary is gone (even after SIGKILL or a panic).
/// Killing the leader is enough: nspawn notices and exits by itself. A zombie owner (dead,
/// not yet reaped by its parent) counts as gone.
fn spawn_watchdog(leader: u32, cgroups: &[PathBuf], scratch: &[PathBuf]) -> io::Result<Child> {
    // Removing a cgroup fails while its last processes are still exiting: a few tries.
    let remove: String = cgroups
        .iter()
        .map(|dir| {
            format!(
                " i=0; while [ -d '{0}' ] && [ $i -lt {tries} ]; do i=$((i+1)); \
                 find '{0}' -depth -type d -exec rmdir {{}} + 2>/dev/null; sleep 0.5; done;",
                dir.display().to_string().replace('\'', ""),
                tries = CGROUP_REMOVAL_PATIENCE.as_millis() / 500,
            )
        })
        .collect();
    let scratch: String = scratch
        .iter()
        .map(|dir| format!(" rm -rf '{}';", dir.display().to_string().replace('\'', "")))
        .collect();
    let script = format!(
        "while [ -e /proc/{owner} ] && ! grep -q '^State:[[:space:]]*Z' /proc/{owner}/status 2>/dev/null; \
         do sleep 0.2; done; kill -KILL {leader} 2>/dev/null;{remove}{scratch} exit 0",
        owner = std::process::id(),
    );
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
}

/// Prefix of each machine's cgroup folders, followed by the owning test process's PID and
/// a counter (`gen-machine-<pid>-<n>`; `hack/check-orphans.sh` looks for it too).
const CGROUP_PREFIX: &str = "gen-machine-";

/// This process's cgroup folder in each mounted hierarchy, from `/proc/self/cgroup`.
fn own_cgroups() -> Vec<PathBuf> {
    let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir("/sys/fs/cgroup") else {
        return found;
    };
    for entry in entries.flatten() {
        let mount = entry.path();
        let hierarchy = entry.file_name().to_string_lossy().into_owned();
        let path = own.lines().find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let matches = if hierarchy == "unified" {
                id == "0"
            } else {
                controllers
                    .split(',')
                    .any(|c| c == hierarchy || c == format!("name={hierarchy}"))
            };
            matches.then(|| path.trim_start_matches('/').to_string())
        });
        if let Some(path) = path
            && mount.join("cgroup.procs").exists()
        {
            found.push(mount.join(path));
        }
    }
    found
}

/// A folder `name` below this process's cgroup in every hierarchy (cpuset: with the
/// parent's CPUs and memory nodes, which v1 requires before a process may join). `name`
/// starts with [`CGROUP_PREFIX`] and this process's PID, so [`remove_stale_cgroups`] and
/// `hack/check-orphans.sh` can tell when it is left over.
fn create_cgroups(name: &str) -> Result<Vec<PathBuf>, String> {
    let mut created = Vec::new();
    for parent in own_cgroups() {
        let dir = parent.join(name);
        if let Err(e) = fs::create_dir(&dir) {
            remove_cgroups(&created);
            return Err(format!("cgroup {}: {e}", dir.display()));
        }
        created.push(dir.clone());
        for file in ["cpuset.cpus", "cpuset.mems"] {
            if let Ok(value) = fs::read_to_string(parent.join(file)) {
                if let Err(e) = fs::write(dir.join(file), value.trim()) {
                    remove_cgroups(&created);
                    return Err(format!("{}: {e}", dir.join(file).display()));
                }
            }
        }
    }
    Ok(created)
}

/// Removes the cgroup folders of machines whose test process is gone.
fn remove_stale_cgroups() {
    for parent in own_cgroups() {
        let Ok(entries) = fs::read_dir(&parent) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let owner = name
                .strip_prefix(CGROUP_PREFIX)
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok());
            if let Some(owner) = owner
                && !Path::new(&format!("/proc/{owner}")).exists()
            {
                remove_cgroups(&[entry.path()]);
            }
        }
    }
}

/// How long a machine's cgroup folders are retried after its processes were killed. On a
/// loaded host, the last processes of a machine (containerd, kubelet, their shims) can take
/// several seconds to exit, and a folder cannot be removed before; CI once saw a memory
/// folder outlive a 5 s budget.
const CGROUP_REMOVAL_PATIENCE: Duration = Duration::from_secs(30);

/// Removes cgroup folders deepest first, retrying while their processes finish exiting.
fn remove_cgroups(cgroups: &[PathBuf]) {
    let tries = CGROUP_REMOVAL_PATIENCE.as_millis() / 250;
    for dir in cgroups {
        for _ in 0..tries {
            if !dir.exists() {
                break;
            }
            let mut folders: Vec<PathBuf> = walk_folders(dir);
            folders.sort_by_key(|folder| std::cmp::Reverse(folder.components().count()));
            for folder in folders {
                let _ = fs::remove_dir(folder);
            }
            if dir.exists() {
                std::thread::sleep(Duration::from_millis(250));
            }
        }
    }
}

fn walk_folders(dir: &Path) -> Vec<PathBuf> {
    let mut found = vec![dir.to_path_buf()];
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                found.extend(walk_folders(&entry.path()));
            }
        }
    }
    found
}

fn kill(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

fn output_of(mut command: Command) -> CommandOutput {
    let output = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("nsenter runs");
    CommandOutput {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn read_log(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut file) = fs::File::open(path) {
        let _ = file.read_to_string(&mut text);
    }
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}
