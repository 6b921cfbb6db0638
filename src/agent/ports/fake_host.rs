//! An in-memory node for the agent's tests: [`FakeHost`] implements [`Host`] with files in a
//! map, systemd calls recorded in order, programs recorded with scripted results and probes
//! that answer what a test set. The unit tests of the features run their steps on it, and
//! `test/agent_in_process.rs` runs the whole [`crate::agent::controller::Agent`] on it
//! against a real kube-apiserver (gardener-node-agent tests its reconciler the same way, with
//! a fake D-Bus and an in-memory file system). It is compiled into the library (not only for
//! unit tests) so the integration tests can build an agent; the binary never constructs one.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::agent::ports::cluster::Secrets;
use crate::agent::ports::host::{Host, HostError, ProgramOutput};
use crate::api::operatingsystemconfig::UnitCommand;

/// What the fake host was asked to do with systemd, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `daemon-reload`.
    Reload,
    /// A unit enabled.
    Enable(String),
    /// A unit disabled.
    Disable(String),
    /// A job run for a unit.
    Job(String, UnitCommand),
}

/// An in-memory node: files with modes, a set of units systemd "knows", recorded systemd
/// calls and programs, jobs and programs that can be made to fail, and probes answering what
/// the test set (healthy by default).
#[derive(Default)]
pub struct FakeHost {
    /// Files and their modes.
    pub files: Mutex<BTreeMap<PathBuf, (Vec<u8>, u32)>>,
    /// systemd calls in order.
    pub ops: Mutex<Vec<Op>>,
    /// Units systemd has loaded.
    pub known_units: Mutex<BTreeSet<String>>,
    /// Units whose jobs fail.
    pub failing_jobs: Mutex<BTreeSet<String>>,
    /// Files written, in order.
    pub writes: Mutex<Vec<PathBuf>>,
    /// Files whose content was read (whole, or compared with `holds`).
    pub reads: Mutex<Vec<PathBuf>>,
    /// What `containerd config default` prints.
    pub default_containerd_config: String,
    /// Programs run (program and arguments), in order.
    pub programs: Mutex<Vec<(String, Vec<String>)>>,
    /// The results of the next program runs, first first; a run with none left succeeds.
    pub program_results: Mutex<VecDeque<Result<(), ProgramOutput>>>,
    /// Files a successful program run writes (what an OS update leaves: a new os-release).
    pub program_writes: Mutex<Vec<(PathBuf, Vec<u8>)>>,
    /// Why kubelet is unhealthy (`None`: healthy).
    pub kubelet_problem: Mutex<Option<String>>,
    /// Why containerd is unhealthy (`None`: healthy).
    pub containerd_problem: Mutex<Option<String>>,
    /// The kernel's host name (empty: none, which is no change).
    pub kernel_hostname: Mutex<String>,
    /// Addresses of this machine.
    pub local_addresses: Mutex<BTreeSet<IpAddr>>,
}

/// The data behind `mutex`, also after a panic of another test thread held it.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FakeHost {
    /// A file's content as text.
    pub fn content(&self, path: &str) -> Option<String> {
        lock(&self.files)
            .get(Path::new(path))
            .map(|(content, _)| String::from_utf8_lossy(content).into_owned())
    }

    /// A file's mode.
    pub fn file_mode(&self, path: &str) -> Option<u32> {
        lock(&self.files)
            .get(Path::new(path))
            .map(|(_, mode)| *mode)
    }

    /// Puts a file.
    pub fn put(&self, path: &str, content: &str, mode: u32) {
        lock(&self.files).insert(PathBuf::from(path), (content.as_bytes().to_vec(), mode));
    }

    /// The systemd calls so far, forgetting them.
    pub fn take_ops(&self) -> Vec<Op> {
        std::mem::take(&mut *lock(&self.ops))
    }

    /// The files written so far, forgetting them.
    pub fn take_writes(&self) -> Vec<PathBuf> {
        std::mem::take(&mut *lock(&self.writes))
    }

    /// The programs run so far.
    pub fn programs_run(&self) -> Vec<(String, Vec<String>)> {
        lock(&self.programs).clone()
    }

    /// Makes kubelet's health probe answer `health`.
    pub fn set_kubelet_health(&self, health: Result<(), String>) {
        *lock(&self.kubelet_problem) = health.err();
    }

    /// Jobs sorted by unit.
    pub fn jobs(ops: &[Op]) -> Vec<(String, UnitCommand)> {
        let mut jobs: Vec<_> = ops
            .iter()
            .filter_map(|op| match op {
                Op::Job(unit, command) => Some((unit.clone(), *command)),
                _ => None,
            })
            .collect();
        jobs.sort_by(|a, b| a.0.cmp(&b.0));
        jobs
    }
}

impl Host for FakeHost {
    fn read(&self, path: &Path) -> Result<Option<Vec<u8>>, HostError> {
        lock(&self.reads).push(path.to_path_buf());
        Ok(lock(&self.files)
            .get(path)
            .map(|(content, _)| content.clone()))
    }

    fn write(&self, path: &Path, content: &[u8], mode: u32) -> Result<(), HostError> {
        lock(&self.writes).push(path.to_path_buf());
        lock(&self.files).insert(path.to_path_buf(), (content.to_vec(), mode));
        Ok(())
    }

    fn mode(&self, path: &Path) -> Result<Option<u32>, HostError> {
        Ok(lock(&self.files).get(path).map(|(_, mode)| *mode))
    }

    fn set_mode(&self, path: &Path, mode: u32) -> Result<(), HostError> {
        if let Some(entry) = lock(&self.files).get_mut(path) {
            entry.1 = mode;
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> Result<bool, HostError> {
        Ok(lock(&self.files).remove(path).is_some())
    }

    fn remove_dir_if_empty(&self, path: &Path) -> Result<bool, HostError> {
        Ok(!lock(&self.files).keys().any(|p| p.starts_with(path)))
    }

    fn remove_dir_all(&self, path: &Path) -> Result<bool, HostError> {
        let mut files = lock(&self.files);
        let before = files.len();
        files.retain(|p, _| !p.starts_with(path));
        Ok(files.len() != before)
    }

    fn create_dir_all(&self, _path: &Path) -> Result<(), HostError> {
        Ok(())
    }

    async fn daemon_reload(&self) -> Result<(), HostError> {
        lock(&self.ops).push(Op::Reload);
        Ok(())
    }

    async fn enable_unit(&self, unit: &str) -> Result<(), HostError> {
        lock(&self.ops).push(Op::Enable(unit.into()));
        Ok(())
    }

    async fn disable_unit(&self, unit: &str) -> Result<(), HostError> {
        lock(&self.ops).push(Op::Disable(unit.into()));
        Ok(())
    }

    async fn unit_job(&self, unit: &str, command: UnitCommand) -> Result<(), HostError> {
        if lock(&self.failing_jobs).contains(unit) {
            return Err(HostError::Command {
                command: format!("{command:?} {unit}"),
                status: "failed".into(),
                stderr: "injected".into(),
            });
        }
        lock(&self.ops).push(Op::Job(unit.into(), command));
        Ok(())
    }

    async fn unit_known(&self, unit: &str) -> Result<bool, HostError> {
        Ok(lock(&self.known_units).contains(unit))
    }

    async fn unit_health(&self, _unit: &str) -> Result<crate::systemd::UnitHealth, HostError> {
        Ok(crate::systemd::UnitHealth {
            active_state: "active".into(),
            sub_state: "running".into(),
            ..crate::systemd::UnitHealth::default()
        })
    }

    fn read_system_file(&self, path: &Path) -> Result<Option<Vec<u8>>, HostError> {
        Ok(lock(&self.files)
            .get(path)
            .map(|(content, _)| content.clone()))
    }

    fn kernel_hostname(&self) -> io::Result<String> {
        Ok(lock(&self.kernel_hostname).clone())
    }

    fn is_local_address(&self, ip: IpAddr) -> bool {
        lock(&self.local_addresses).contains(&ip)
    }

    async fn run_program(
        &self,
        program: &str,
        args: &[String],
        _timeout: Duration,
    ) -> Result<(), ProgramOutput> {
        lock(&self.programs).push((program.to_string(), args.to_vec()));
        let result = lock(&self.program_results).pop_front().unwrap_or(Ok(()));
        if result.is_ok() {
            let writes = lock(&self.program_writes).clone();
            let mut files = lock(&self.files);
            for (path, content) in writes {
                files.insert(path, (content, 0o644));
            }
        }
        result
    }

    async fn kubelet_health(&self, _timeout: Duration) -> Result<(), String> {
        lock(&self.kubelet_problem).clone().map_or(Ok(()), Err)
    }

    async fn containerd_health(&self, _timeout: Duration) -> Result<(), String> {
        lock(&self.containerd_problem).clone().map_or(Ok(()), Err)
    }

    async fn containerd_default_config(&self) -> Result<String, HostError> {
        Ok(self.default_containerd_config.clone())
    }

    async fn containerd_version(&self) -> Option<(u64, u64)> {
        Some((1, 7))
    }

    async fn extract_image_file(
        &self,
        image: &str,
        path_in_image: &str,
        target: &Path,
        mode: u32,
    ) -> Result<(), HostError> {
        self.write(target, format!("{image}:{path_in_image}").as_bytes(), mode)
    }
}

/// Secrets from a map: `(name, key)` → data.
#[derive(Default)]
pub struct MapSecrets(pub BTreeMap<(String, String), Vec<u8>>);

impl Secrets for MapSecrets {
    async fn secret_data(&self, name: &str, key: &str) -> Result<Vec<u8>, String> {
        self.0
            .get(&(name.to_string(), key.to_string()))
            .cloned()
            .ok_or_else(|| format!("secret {name} has no key {key}"))
    }
}
