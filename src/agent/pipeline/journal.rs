//! The crash-safe journal `last-computed-osc-changes.yaml`: the work one OSC apply still has
//! to do, in gardener-node-agent's format field for field, so either agent finishes what the
//! other started (format and rules: `docs/agent.md#journal-format`,
//! `#the-journal-and-crash-safety`). Pure apart from (de)serialisation and [`load`] /
//! [`persist`].
//!
//! Invariants kept here: a journal for the secret's checksum is resumed as it is, any other is
//! replaced before anything is done; after success it stays with empty lists; [`persist`]
//! never writes more than [`MAX_JOURNAL_BYTES`] (what the agent reads back), and a journal that
//! cannot be read counts as absent.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::agent::ports::host::{Host, HostError};
use crate::agent::ports::paths::{Paths, STATE_FILE_MODE};
use crate::api::operatingsystemconfig::{DropIn, File, RegistryConfig, Unit, UnitCommand};
use crate::safe_fs::{self, SafeFsError};

/// Remaining work of one apply.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Journal {
    /// Checksum of the OSC this work belongs to.
    #[serde(default)]
    pub operating_system_config_checksum: String,
    /// Unit work.
    #[serde(default)]
    pub units: UnitChanges,
    /// File work.
    #[serde(default)]
    pub files: FileChanges,
    /// containerd work.
    #[serde(default)]
    pub containerd: ContainerdChanges,
    /// The agent's own unit changed: exit after daemon-reload so systemd starts the new one.
    #[serde(default)]
    pub must_restart_node_agent: bool,
    /// In-place update flags (gardener-node-agent's): computed for OSCs with
    /// `spec.inPlaceUpdates` and cleared step by step by [`crate::agent::in_place::steps`].
    #[serde(default)]
    pub in_place_updates: InPlaceUpdateFlags,
}

/// Files to write and to delete.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FileChanges {
    /// Files to (re)write.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<File>,
    /// Files to delete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deleted: Vec<File>,
}

/// Units to write, commands to run, units to remove.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UnitChanges {
    /// Units whose file, drop-ins or enablement must be written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<ChangedUnit>,
    /// Jobs to run after daemon-reload.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<CommandEntry>,
    /// Units no longer in the OSC.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deleted: Vec<Unit>,
}

/// A unit to write: the unit and its drop-in work.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ChangedUnit {
    /// The unit.
    #[serde(flatten)]
    pub unit: Unit,
    /// Its drop-in work.
    #[serde(default)]
    pub drop_ins_changes: DropInChanges,
}

/// Drop-ins of one unit to write and to delete.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DropInChanges {
    /// Drop-ins to write.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<DropIn>,
    /// Drop-ins to delete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deleted: Vec<DropIn>,
}

/// One unit job.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CommandEntry {
    /// Unit name.
    pub name: String,
    /// `restart` or `stop` (a `start` in the OSC is run as restart, as upstream does).
    pub command: UnitCommand,
}

/// containerd work.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContainerdChanges {
    /// config.toml changed: restart containerd after the unit commands.
    #[serde(default)]
    pub config_file_changed: bool,
    /// Registry `hosts.toml` work.
    #[serde(default)]
    pub registries: RegistryChanges,
}

/// Registry work.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RegistryChanges {
    /// Upstreams gardener-node-agent would probe before writing (this agent does not probe;
    /// kept so a journal written by gardener-node-agent round-trips).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstreams_to_probe: Vec<String>,
    /// Registries whose `hosts.toml` must be written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub desired: Vec<RegistryConfig>,
    /// Registries whose folder must be removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deleted: Vec<RegistryConfig>,
}

/// gardener-node-agent's in-place update flags.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceUpdateFlags {
    /// OS update pending.
    #[serde(default)]
    pub operating_system: bool,
    /// kubelet flags.
    #[serde(default)]
    pub kubelet: KubeletFlags,
    /// CA rotation flags.
    #[serde(default)]
    pub certificate_authorities_rotation: CaRotationFlags,
    /// Service account key rotation pending.
    #[serde(default)]
    pub service_account_key_rotation: bool,
}

/// kubelet in-place flags.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct KubeletFlags {
    /// Minor version bump.
    #[serde(default)]
    pub minor_version: bool,
    /// Config change.
    #[serde(default)]
    pub config: bool,
    /// CPU manager policy change.
    #[serde(default)]
    pub cpu_manager_policy: bool,
}

/// CA rotation flags.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CaRotationFlags {
    /// kubelet.
    #[serde(default)]
    pub kubelet: bool,
    /// The node agent.
    #[serde(default)]
    pub node_agent: bool,
}

impl Journal {
    /// An empty journal for `checksum` (nothing to do).
    pub fn done(checksum: &str) -> Self {
        Journal {
            operating_system_config_checksum: checksum.to_string(),
            ..Journal::default()
        }
    }

    /// True when no work this agent does is left (in-place flags are not its work).
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Parses a journal file; `None` when it does not parse (it is then recomputed).
    pub fn parse(text: &str) -> Option<Self> {
        serde_norway::from_str(text).ok()
    }

    /// The YAML written to disk.
    pub fn render(&self) -> Result<String, serde_norway::Error> {
        serde_norway::to_string(self)
    }

    /// How many items are left (for logs).
    pub fn remaining(&self) -> usize {
        let drop_ins: usize = self
            .units
            .changed
            .iter()
            .map(|u| u.drop_ins_changes.changed.len() + u.drop_ins_changes.deleted.len())
            .sum();
        self.files.changed.len()
            + self.files.deleted.len()
            + self.units.changed.len()
            + drop_ins
            + self.units.commands.len()
            + self.units.deleted.len()
            + usize::from(self.containerd.config_file_changed)
            + self.containerd.registries.desired.len()
            + self.containerd.registries.deleted.len()
            + usize::from(self.must_restart_node_agent)
    }

    /// A file was written.
    pub fn complete_file_changed(&mut self, path: &str) {
        self.files.changed.retain(|f| f.path != path);
    }

    /// A file was deleted.
    pub fn complete_file_deleted(&mut self, path: &str) {
        self.files.deleted.retain(|f| f.path != path);
    }

    /// A drop-in of a changed unit was written.
    pub fn complete_drop_in_changed(&mut self, unit: &str, drop_in: &str) {
        if let Some(entry) = self.units.changed.iter_mut().find(|u| u.unit.name == unit) {
            entry.drop_ins_changes.changed.retain(|d| d.name != drop_in);
        }
    }

    /// A drop-in of a changed unit was deleted.
    pub fn complete_drop_in_deleted(&mut self, unit: &str, drop_in: &str) {
        if let Some(entry) = self.units.changed.iter_mut().find(|u| u.unit.name == unit) {
            entry.drop_ins_changes.deleted.retain(|d| d.name != drop_in);
        }
    }

    /// A changed unit is fully written (file, drop-ins, enablement).
    pub fn complete_unit_changed(&mut self, unit: &str) {
        self.units.changed.retain(|u| u.unit.name != unit);
    }

    /// A deleted unit is gone; `then` is a job that must still run for it (a drop-in-only
    /// unit that lost its drop-ins is restarted), recorded in the same write.
    pub fn complete_unit_deleted(&mut self, unit: &str, then: Option<CommandEntry>) {
        self.units.deleted.retain(|u| u.name != unit);
        if let Some(command) = then
            && !self.units.commands.iter().any(|c| c.name == command.name)
        {
            self.units.commands.push(command);
        }
    }

    /// A unit job finished.
    pub fn complete_command(&mut self, unit: &str) {
        self.units.commands.retain(|c| c.name != unit);
    }

    /// Removes the command for `unit` (the agent's own unit: restarting it is done by exiting).
    pub fn take_command(&mut self, unit: &str) -> Option<CommandEntry> {
        let index = self.units.commands.iter().position(|c| c.name == unit)?;
        Some(self.units.commands.remove(index))
    }

    /// A registry `hosts.toml` was written.
    pub fn complete_registry_desired(&mut self, upstream: &str) {
        self.containerd
            .registries
            .desired
            .retain(|r| r.upstream != upstream);
    }

    /// A registry folder was removed.
    pub fn complete_registry_deleted(&mut self, upstream: &str) {
        self.containerd
            .registries
            .deleted
            .retain(|r| r.upstream != upstream);
    }
}

/// The journal to resume for the secret's `checksum`: the one on disk if it parses and is
/// for that checksum; `None` means compute a new one.
pub fn resumable(on_disk: Option<&str>, checksum: &str) -> Option<Journal> {
    on_disk
        .and_then(Journal::parse)
        .filter(|journal| journal.operating_system_config_checksum == checksum)
}

/// The journal on disk ([`Paths::journal`]) if it is for `checksum` (see [`resumable`]). One
/// that cannot be read ([`unreadable`]) is logged and counts as none: the changes are then
/// computed again, and the next [`persist`] replaces it.
pub fn load<H: Host>(
    host: &H,
    paths: &Paths,
    checksum: &str,
) -> Result<Option<Journal>, HostError> {
    let on_disk = match host.read(&paths.journal()) {
        Ok(on_disk) => on_disk,
        Err(error) if unreadable(&error) => {
            tracing::warn!(error = %crate::error_chain::printable(&error), "the journal cannot be read; computing the changes again (the next journal write replaces it)");
            None
        }
        Err(error) => return Err(error),
    };
    let text = on_disk.map(|bytes| String::from_utf8_lossy(&bytes).into_owned());
    Ok(resumable(text.as_deref(), checksum))
}

/// Whether a failed read of the journal means it can never be read as it is (too large, or
/// not a regular file), rather than that reading failed this time.
pub fn unreadable(error: &HostError) -> bool {
    matches!(
        error,
        HostError::Fs(SafeFsError::TooLarge { .. } | SafeFsError::NotRegular { .. })
    )
}

/// The largest journal [`persist`] writes: the most the host reads back
/// ([`safe_fs::MAX_READ_BYTES`]).
pub const MAX_JOURNAL_BYTES: u64 = safe_fs::MAX_READ_BYTES;

/// Why [`persist`] failed.
#[derive(Debug)]
pub enum PersistError {
    /// The journal could not be serialised, or would be larger than [`MAX_JOURNAL_BYTES`].
    Encode(String),
    /// Writing the file failed.
    Write(HostError),
}

/// Writes `journal` to [`Paths::journal`] (atomically, through the host), unless its text is
/// larger than [`MAX_JOURNAL_BYTES`]: a journal the agent could not read back would stop every
/// later apply.
pub fn persist<H: Host>(host: &H, paths: &Paths, journal: &Journal) -> Result<(), PersistError> {
    let text = journal
        .render()
        .map_err(|error| PersistError::Encode(error.to_string()))?;
    if text.len() as u64 > MAX_JOURNAL_BYTES {
        return Err(PersistError::Encode(format!(
            "{} bytes, more than the {MAX_JOURNAL_BYTES} bytes the agent reads back; not written",
            text.len()
        )));
    }
    host.write(&paths.journal(), text.as_bytes(), STATE_FILE_MODE)
        .map_err(PersistError::Write)
}

/// Removes the temporary files that state writes of a killed agent left in the config dir
/// (`.<state file>.tmp.<pid>.<n>`, see [`safe_fs::is_leftover_temp_of`]); returns them. Run
/// at start, before anything writes there. The config dir is the agent's own (root only);
/// failures are logged and skipped.
pub fn remove_leftover_temp_files(paths: &Paths) -> Vec<PathBuf> {
    let state_files = [paths.journal(), paths.last_applied(), paths.rollout_state()];
    let names: Vec<String> = state_files
        .iter()
        .filter_map(|path| path.file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .collect();
    let Ok(entries) = std::fs::read_dir(paths.base()) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let entry_name = entry.file_name().to_string_lossy().into_owned();
        if !names
            .iter()
            .any(|name| safe_fs::is_leftover_temp_of(&entry_name, name))
        {
            continue;
        }
        let path = entry.path();
        match remove_regular(&path) {
            Ok(true) => removed.push(path),
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "removing a leftover temporary file failed")
            }
        }
    }
    removed
}

/// Removes `path` when it is a regular file (a link is never followed).
fn remove_regular(path: &Path) -> std::io::Result<bool> {
    if !std::fs::symlink_metadata(path)?.file_type().is_file() {
        return Ok(false);
    }
    std::fs::remove_file(path).map(|()| true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::testing::{drop_in, inline_file, unit};

    fn registry(upstream: &str) -> RegistryConfig {
        RegistryConfig {
            upstream: upstream.into(),
            server: None,
            hosts: Vec::new(),
            readiness_probe: None,
        }
    }

    fn sample() -> Journal {
        let mut kubelet = unit("a.service");
        kubelet.content = Some("[Service]\n".into());
        kubelet.drop_ins.push(drop_in("10-a.conf", "x"));
        Journal {
            operating_system_config_checksum: "abc".into(),
            files: FileChanges {
                changed: vec![inline_file("/etc/a", "1"), inline_file("/etc/b", "2")],
                deleted: vec![inline_file("/etc/old", "0")],
            },
            units: UnitChanges {
                changed: vec![ChangedUnit {
                    unit: kubelet,
                    drop_ins_changes: DropInChanges {
                        changed: vec![drop_in("10-a.conf", "x")],
                        deleted: vec![drop_in("20-b.conf", "y")],
                    },
                }],
                commands: vec![
                    CommandEntry {
                        name: "a.service".into(),
                        command: UnitCommand::Restart,
                    },
                    CommandEntry {
                        name: "b.service".into(),
                        command: UnitCommand::Stop,
                    },
                ],
                deleted: vec![unit("old.service")],
            },
            containerd: ContainerdChanges {
                config_file_changed: true,
                registries: RegistryChanges {
                    upstreams_to_probe: Vec::new(),
                    desired: vec![registry("docker.io")],
                    deleted: vec![],
                },
            },
            must_restart_node_agent: false,
            in_place_updates: InPlaceUpdateFlags::default(),
        }
    }

    #[test]
    fn renders_and_parses_gardener_node_agents_format() {
        let text = sample().render().unwrap();
        assert!(
            text.starts_with("operatingSystemConfigChecksum: abc\n"),
            "{text}"
        );
        for expected in [
            "  changed:\n  - name: a.service\n    content: |\n      [Service]\n",
            "    dropInsChanges:\n      changed:\n      - name: 10-a.conf\n",
            "  commands:\n  - name: a.service\n    command: restart\n",
            "  deleted:\n  - name: old.service\n",
            "files:\n  changed:\n  - path: /etc/a\n",
            "configFileChanged: true",
            "mustRestartNodeAgent: false",
            "inPlaceUpdates:\n  operatingSystem: false\n",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
        assert_eq!(Journal::parse(&text), Some(sample()));
        assert!(Journal::done("abc").is_empty());
        assert!(!sample().is_empty());
        assert_eq!(sample().remaining(), 11);
    }

    /// What gardener-node-agent (Go, sigs.k8s.io/yaml) writes mid-apply and when done.
    #[test]
    fn reads_what_gardener_node_agent_writes() {
        let go_mid_apply = r#"containerd:
  configFileChanged: false
  registries: {}
files:
  changed:
  - content:
      inline:
        data: aGVsbG8=
        encoding: b64
    path: /etc/hello
    permissions: 420
inPlaceUpdates:
  certificateAuthoritiesRotation:
    kubelet: false
    nodeAgent: false
  kubelet:
    config: false
    cpuManagerPolicy: false
    minorVersion: false
  operatingSystem: false
  serviceAccountKeyRotation: false
mustRestartNodeAgent: true
operatingSystemConfigChecksum: 5e1f
units:
  changed:
  - content: |
      [Service]
    dropInsChanges: {}
    enable: true
    name: kubelet.service
  commands:
  - command: restart
    name: kubelet.service
"#;
        let journal = resumable(Some(go_mid_apply), "5e1f").unwrap();
        assert_eq!(journal.files.changed[0].permissions, Some(0o644));
        assert_eq!(journal.units.changed[0].unit.enable, Some(true));
        assert!(journal.must_restart_node_agent);
        assert_eq!(journal.remaining(), 4);
        let go_done = "containerd:\n  configFileChanged: false\n  registries: {}\nfiles: {}\ninPlaceUpdates:\n  operatingSystem: false\nmustRestartNodeAgent: false\noperatingSystemConfigChecksum: 5e1f\nunits: {}\n";
        assert!(resumable(Some(go_done), "5e1f").unwrap().is_empty());
    }

    #[test]
    fn resumes_only_the_same_checksum() {
        let text = sample().render().unwrap();
        assert_eq!(resumable(Some(&text), "abc"), Some(sample()));
        assert_eq!(resumable(Some(&text), "other"), None);
        assert_eq!(resumable(None, "abc"), None);
        assert_eq!(resumable(Some("{{ torn write"), "abc"), None);
        // Journal writes are atomic (temp + fsync + rename), so a torn file never reaches
        // here from our own writes; if one did, it must not resume with a wrong meaning.
        let truncated = &text[..text.len() / 2];
        if let Some(journal) = resumable(Some(truncated), "abc") {
            assert_eq!(journal.operating_system_config_checksum, "abc");
        }
    }

    /// Issue #26 item 3: a journal larger than the agent reads back is never written (the
    /// apply stops before its first item), and one found on disk (left by an older agent) no
    /// longer wedges the agent: it is recomputed and replaced.
    #[test]
    fn a_journal_too_large_to_read_back_is_not_written_and_one_on_disk_is_recomputed() {
        let paths = Paths::new("/var/lib/gardener-node-agent");
        let host = crate::agent::testing::FakeHost::default();
        let mut large = Journal::done("abc");
        let data = "x".repeat(MAX_JOURNAL_BYTES as usize);
        large.files.changed.push(inline_file("/etc/large", &data));
        let error = match persist(&host, &paths, &large) {
            Err(PersistError::Encode(message)) => message,
            other => panic!("{other:?}"),
        };
        assert!(
            error.contains("more than the 16777216 bytes the agent reads back"),
            "{error}"
        );
        assert!(host.take_writes().is_empty(), "nothing written");
        persist(&host, &paths, &sample()).unwrap();
        assert_eq!(host.take_writes(), [paths.journal()]);

        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::new(dir.path());
        let system = crate::agent::ports::host::SystemHost::new(
            "unix:path=/nonexistent".into(),
            std::time::Duration::from_secs(1),
            "/nonexistent".into(),
            "k8s.io".into(),
            dir.path().join("tmp"),
        );
        let file = std::fs::File::create(paths.journal()).unwrap();
        file.set_len(MAX_JOURNAL_BYTES + 1).unwrap();
        let read = system.read(&paths.journal()).unwrap_err();
        assert!(unreadable(&read), "{read}");
        assert_eq!(load(&system, &paths, "abc").unwrap(), None);
        persist(&system, &paths, &sample()).unwrap();
        assert_eq!(load(&system, &paths, "abc").unwrap(), Some(sample()));
    }

    #[test]
    fn leftover_temporary_files_of_state_writes_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::new(dir.path());
        let own_temp = format!(
            ".last-computed-osc-changes.yaml.tmp.{}.0",
            std::process::id()
        );
        let names = [
            (".last-computed-osc-changes.yaml.tmp.1.0", false),
            (".last-applied-osc.yaml.tmp.4294967.12", false),
            (".rollout-state.json.tmp.77.3", false),
            // This process's own (a write in progress), other files, other shapes: kept.
            (own_temp.as_str(), true),
            (".kubeconfig.tmp.1.0", true),
            (".last-applied-osc.yaml.tmp.1", true),
            ("last-applied-osc.yaml", true),
        ];
        for (name, _) in &names {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        // A link named like a leftover is not followed, and not removed.
        let target = dir.path().join("target");
        std::fs::write(&target, b"keep").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join(".rollout-state.json.tmp.5.5"))
            .unwrap();
        let mut removed = remove_leftover_temp_files(&paths);
        removed.sort();
        let mut expected: Vec<PathBuf> = names
            .iter()
            .filter(|(_, kept)| !kept)
            .map(|(name, _)| dir.path().join(name))
            .collect();
        expected.sort();
        assert_eq!(removed, expected);
        for (name, kept) in &names {
            assert_eq!(dir.path().join(name).exists(), *kept, "{name}");
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    }

    #[test]
    fn completing_items_removes_exactly_them() {
        let mut journal = sample();
        journal.complete_file_changed("/etc/a");
        assert_eq!(journal.files.changed, [inline_file("/etc/b", "2")]);
        journal.complete_drop_in_changed("a.service", "10-a.conf");
        journal.complete_drop_in_deleted("a.service", "20-b.conf");
        assert_eq!(
            journal.units.changed[0].drop_ins_changes,
            DropInChanges::default()
        );
        journal.complete_unit_changed("a.service");
        assert!(journal.units.changed.is_empty());
        journal.complete_unit_deleted(
            "old.service",
            Some(CommandEntry {
                name: "old.service".into(),
                command: UnitCommand::Restart,
            }),
        );
        assert!(journal.units.deleted.is_empty());
        assert_eq!(journal.units.commands.len(), 3);
        journal.complete_command("a.service");
        journal.complete_command("b.service");
        assert_eq!(
            journal.take_command("old.service").map(|c| c.command),
            Some(UnitCommand::Restart)
        );
        assert_eq!(journal.take_command("old.service"), None);
        journal.complete_file_changed("/etc/b");
        journal.complete_file_deleted("/etc/old");
        journal.complete_registry_desired("docker.io");
        journal.containerd.config_file_changed = false;
        assert!(journal.is_empty(), "{journal:?}");
    }
}
