//! Builders and an in-memory [`Host`] for the agent's unit tests. Compiled only for tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::api::operatingsystemconfig::{
    DropIn, File, FileContent, FileContentImageRef, FileContentInline, FileContentSecretRef, Unit,
    UnitCommand,
};

use crate::agent::ports::cluster::Secrets;
use crate::agent::ports::host::{Host, HostError};

/// A plain inline file.
pub fn inline_file(path: &str, data: &str) -> File {
    File {
        path: path.into(),
        permissions: None,
        host_name: None,
        content: FileContent {
            inline: Some(FileContentInline {
                encoding: String::new(),
                data: data.into(),
            }),
            ..FileContent::default()
        },
    }
}

/// A file from a secret.
pub fn secret_file(path: &str, secret: &str, key: &str) -> File {
    File {
        path: path.into(),
        permissions: None,
        host_name: None,
        content: FileContent {
            secret_ref: Some(FileContentSecretRef {
                name: secret.into(),
                data_key: key.into(),
            }),
            ..FileContent::default()
        },
    }
}

/// A file extracted from an image.
pub fn image_file(path: &str, image: &str, path_in_image: &str) -> File {
    File {
        path: path.into(),
        permissions: Some(0o755),
        host_name: None,
        content: FileContent {
            image_ref: Some(FileContentImageRef {
                image: image.into(),
                file_path_in_image: path_in_image.into(),
            }),
            ..FileContent::default()
        },
    }
}

/// A unit with nothing set.
pub fn unit(name: &str) -> Unit {
    Unit {
        name: name.into(),
        command: None,
        enable: None,
        content: None,
        drop_ins: Vec::new(),
        file_paths: Vec::new(),
    }
}

/// A drop-in.
pub fn drop_in(name: &str, content: &str) -> DropIn {
    DropIn {
        name: name.into(),
        content: content.into(),
    }
}

/// What the fake host was asked to do with systemd, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Reload,
    Enable(String),
    Disable(String),
    Job(String, UnitCommand),
}

/// An in-memory node: files with modes, a set of units systemd "knows", recorded systemd
/// calls, and jobs that can be made to fail.
#[derive(Default)]
pub struct FakeHost {
    pub files: Mutex<BTreeMap<PathBuf, (Vec<u8>, u32)>>,
    pub ops: Mutex<Vec<Op>>,
    pub known_units: Mutex<BTreeSet<String>>,
    pub failing_jobs: Mutex<BTreeSet<String>>,
    pub writes: Mutex<Vec<PathBuf>>,
    /// Files whose content was read (whole, or compared with `holds`).
    pub reads: Mutex<Vec<PathBuf>>,
    pub default_containerd_config: String,
}

impl FakeHost {
    pub fn content(&self, path: &str) -> Option<String> {
        self.files
            .lock()
            .unwrap()
            .get(Path::new(path))
            .map(|(content, _)| String::from_utf8_lossy(content).into_owned())
    }

    pub fn file_mode(&self, path: &str) -> Option<u32> {
        self.files
            .lock()
            .unwrap()
            .get(Path::new(path))
            .map(|(_, mode)| *mode)
    }

    pub fn put(&self, path: &str, content: &str, mode: u32) {
        self.files
            .lock()
            .unwrap()
            .insert(PathBuf::from(path), (content.as_bytes().to_vec(), mode));
    }

    pub fn take_ops(&self) -> Vec<Op> {
        std::mem::take(&mut *self.ops.lock().unwrap())
    }

    pub fn take_writes(&self) -> Vec<PathBuf> {
        std::mem::take(&mut *self.writes.lock().unwrap())
    }

    /// Jobs in the order they ran.
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
        self.reads.lock().unwrap().push(path.to_path_buf());
        Ok(self
            .files
            .lock()
            .unwrap()
            .get(path)
            .map(|(content, _)| content.clone()))
    }

    fn write(&self, path: &Path, content: &[u8], mode: u32) -> Result<(), HostError> {
        self.writes.lock().unwrap().push(path.to_path_buf());
        self.files
            .lock()
            .unwrap()
            .insert(path.to_path_buf(), (content.to_vec(), mode));
        Ok(())
    }

    fn mode(&self, path: &Path) -> Result<Option<u32>, HostError> {
        Ok(self.files.lock().unwrap().get(path).map(|(_, mode)| *mode))
    }

    fn set_mode(&self, path: &Path, mode: u32) -> Result<(), HostError> {
        if let Some(entry) = self.files.lock().unwrap().get_mut(path) {
            entry.1 = mode;
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> Result<bool, HostError> {
        Ok(self.files.lock().unwrap().remove(path).is_some())
    }

    fn remove_dir_if_empty(&self, path: &Path) -> Result<bool, HostError> {
        Ok(!self
            .files
            .lock()
            .unwrap()
            .keys()
            .any(|p| p.starts_with(path)))
    }

    fn remove_dir_all(&self, path: &Path) -> Result<bool, HostError> {
        let mut files = self.files.lock().unwrap();
        let before = files.len();
        files.retain(|p, _| !p.starts_with(path));
        Ok(files.len() != before)
    }

    fn create_dir_all(&self, _path: &Path) -> Result<(), HostError> {
        Ok(())
    }

    async fn daemon_reload(&self) -> Result<(), HostError> {
        self.ops.lock().unwrap().push(Op::Reload);
        Ok(())
    }

    async fn enable_unit(&self, unit: &str) -> Result<(), HostError> {
        self.ops.lock().unwrap().push(Op::Enable(unit.into()));
        Ok(())
    }

    async fn disable_unit(&self, unit: &str) -> Result<(), HostError> {
        self.ops.lock().unwrap().push(Op::Disable(unit.into()));
        Ok(())
    }

    async fn unit_job(&self, unit: &str, command: UnitCommand) -> Result<(), HostError> {
        if self.failing_jobs.lock().unwrap().contains(unit) {
            return Err(HostError::Command {
                command: format!("{command:?} {unit}"),
                status: "failed".into(),
                stderr: "injected".into(),
            });
        }
        self.ops.lock().unwrap().push(Op::Job(unit.into(), command));
        Ok(())
    }

    async fn unit_known(&self, unit: &str) -> Result<bool, HostError> {
        Ok(self.known_units.lock().unwrap().contains(unit))
    }

    async fn unit_health(&self, _unit: &str) -> Result<crate::systemd::UnitHealth, HostError> {
        Ok(crate::systemd::UnitHealth {
            active_state: "active".into(),
            sub_state: "running".into(),
            ..crate::systemd::UnitHealth::default()
        })
    }

    async fn kubelet_healthy(&self) -> bool {
        true
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

/// Secrets from a map.
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
