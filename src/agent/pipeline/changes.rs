//! Diff of the new OSC against `last-applied-osc.yaml` (`docs/agent.md#diff-rules`): which
//! files to write and delete, which units to write, restart, stop and remove, whether
//! containerd's config changed. Pure; the result is the [`Journal`] the apply step works through.
//!
//! Rules, each with a unit test below:
//! 1. No last-applied OSC: every file and unit (with all drop-ins) is changed, every unit
//!    gets a command, containerd's config counts as changed.
//! 2. Files are compared by path after merging spec and status: a path only in the old OSC is
//!    deleted; a new path or any difference (permissions, content, encoding, reference,
//!    `hostName`, `transmitUnencoded`) is changed; a file that only moved between spec and
//!    status is not.
//! 3. Units are compared by name after merging: a name only in the old OSC is deleted; a new
//!    unit, any difference, or a `filePaths` entry naming a changed file makes it changed.
//! 4. For a changed existing unit, drop-ins are diffed by name: gone = deleted, new or
//!    different = changed; unchanged drop-ins are not rewritten.
//! 5. The command for a changed unit is `stop` when `enable: false` or `command: stop`,
//!    otherwise `restart` (`start` and no command both restart). Unchanged units get none.
//! 6. containerd's config changed when the old OSC had no containerd configuration, or the
//!    sandbox image, plugins or cgroup driver differ.
//! 7. Registries: every registry of the new OSC is (re)written, an upstream only in the old
//!    OSC is deleted.

use crate::api::operatingsystemconfig::{ContainerdConfig, CriName, File, Unit, UnitCommand};

use crate::agent::pipeline::journal::{
    ChangedUnit, CommandEntry, ContainerdChanges, DropInChanges, FileChanges, Journal,
    RegistryChanges, UnitChanges,
};
use crate::agent::pipeline::osc::{Effective, NodeOsc};

/// An OSC with its merged view.
#[derive(Debug, Clone, Copy)]
pub struct Side<'a> {
    /// The OSC as decoded (for `criConfig`).
    pub osc: &'a NodeOsc,
    /// Its merged units and files.
    pub effective: &'a Effective<'a>,
}

/// The containerd configuration of an OSC whose CRI is containerd.
pub fn containerd_config(osc: &NodeOsc) -> Option<&ContainerdConfig> {
    let cri = osc.spec.cri_config.as_ref()?;
    match cri.name {
        CriName::Containerd => cri.containerd.as_ref(),
    }
}

/// The command for a changed unit (rule 5).
pub fn command_for(unit: &Unit) -> UnitCommand {
    if unit.enable == Some(false) || unit.command == Some(UnitCommand::Stop) {
        UnitCommand::Stop
    } else {
        UnitCommand::Restart
    }
}

/// Computes the work to get from `old` (the last applied OSC, if any) to `new`.
pub fn compute(old: Option<Side<'_>>, new: Side<'_>, checksum: &str) -> Journal {
    let Some(old) = old else {
        return everything(new, checksum);
    };
    let files = diff_files(old.effective, new.effective);
    let changed_paths: Vec<&str> = files.changed.iter().map(|f| f.path.as_str()).collect();
    let units = diff_units(old.effective, new.effective, &changed_paths);
    let containerd = match (containerd_config(old.osc), containerd_config(new.osc)) {
        (_, None) => ContainerdChanges::default(),
        (None, Some(new_config)) => ContainerdChanges {
            config_file_changed: true,
            registries: RegistryChanges {
                desired: new_config.registries.clone(),
                ..RegistryChanges::default()
            },
        },
        (Some(old_config), Some(new_config)) => {
            let cgroup = |osc: &NodeOsc| osc.spec.cri_config.as_ref().and_then(|c| c.cgroup_driver);
            ContainerdChanges {
                config_file_changed: old_config.sandbox_image != new_config.sandbox_image
                    || old_config.plugins != new_config.plugins
                    || cgroup(old.osc) != cgroup(new.osc),
                registries: diff_registries(old_config, new_config),
            }
        }
    };
    Journal {
        operating_system_config_checksum: checksum.to_string(),
        files,
        units,
        containerd,
        ..Journal::default()
    }
}

/// Rule 1: no last-applied OSC.
fn everything(new: Side<'_>, checksum: &str) -> Journal {
    let units = &new.effective.units;
    Journal {
        operating_system_config_checksum: checksum.to_string(),
        files: FileChanges {
            changed: unique_files(new.effective.files.iter().copied()),
            deleted: Vec::new(),
        },
        units: UnitChanges {
            changed: units
                .iter()
                .map(|unit| ChangedUnit {
                    unit: unit.clone(),
                    drop_ins_changes: DropInChanges {
                        changed: unit.drop_ins.clone(),
                        deleted: Vec::new(),
                    },
                })
                .collect(),
            commands: units
                .iter()
                .map(|unit| CommandEntry {
                    name: unit.name.clone(),
                    command: command_for(unit),
                })
                .collect(),
            deleted: Vec::new(),
        },
        containerd: ContainerdChanges {
            config_file_changed: containerd_config(new.osc).is_some(),
            registries: RegistryChanges {
                desired: containerd_config(new.osc)
                    .map(|c| c.registries.clone())
                    .unwrap_or_default(),
                ..RegistryChanges::default()
            },
        },
        ..Journal::default()
    }
}

/// Rule 2.
fn diff_files(old: &Effective<'_>, new: &Effective<'_>) -> FileChanges {
    let deleted = unique_files(
        old.files
            .iter()
            .copied()
            .filter(|file| new.file(&file.path).is_none()),
    );
    let changed = unique_files(
        new.files
            .iter()
            .copied()
            .filter(|file| old.file(&file.path) != Some(*file)),
    );
    FileChanges { changed, deleted }
}

/// Rules 3–5.
fn diff_units(old: &Effective<'_>, new: &Effective<'_>, changed_files: &[&str]) -> UnitChanges {
    let deleted = old
        .units
        .iter()
        .filter(|unit| new.unit(&unit.name).is_none())
        .cloned()
        .collect();
    let mut changed = Vec::new();
    let mut commands = Vec::new();
    for unit in &new.units {
        let file_changed = unit
            .file_paths
            .iter()
            .any(|path| changed_files.contains(&path.as_str()));
        let drop_ins_changes = match old.unit(&unit.name) {
            None => DropInChanges {
                changed: unit.drop_ins.clone(),
                deleted: Vec::new(),
            },
            Some(previous) if previous != unit || file_changed => DropInChanges {
                changed: unit
                    .drop_ins
                    .iter()
                    .filter(|d| !previous.drop_ins.contains(d))
                    .cloned()
                    .collect(),
                deleted: previous
                    .drop_ins
                    .iter()
                    .filter(|d| !unit.drop_ins.iter().any(|n| n.name == d.name))
                    .cloned()
                    .collect(),
            },
            Some(_) => continue,
        };
        changed.push(ChangedUnit {
            unit: unit.clone(),
            drop_ins_changes,
        });
        commands.push(CommandEntry {
            name: unit.name.clone(),
            command: command_for(unit),
        });
    }
    UnitChanges {
        changed,
        commands,
        deleted,
    }
}

/// Rule 7: every new registry is written (cheap, and its hosts.toml is then known to be
/// current); an upstream only in the old OSC is deleted.
fn diff_registries(old: &ContainerdConfig, new: &ContainerdConfig) -> RegistryChanges {
    RegistryChanges {
        upstreams_to_probe: Vec::new(),
        desired: new.registries.clone(),
        deleted: old
            .registries
            .iter()
            .filter(|registry| {
                !new.registries
                    .iter()
                    .any(|n| n.upstream == registry.upstream)
            })
            .cloned()
            .collect(),
    }
}

/// Keeps the first file of each path (the merged list may name a path twice).
fn unique_files<'a>(files: impl Iterator<Item = &'a File>) -> Vec<File> {
    let mut out: Vec<File> = Vec::new();
    for file in files {
        if !out.iter().any(|f| f.path == file.path) {
            out.push(file.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::pipeline::osc::effective;
    use crate::agent::testing::{drop_in, inline_file, unit};
    use crate::api::operatingsystemconfig::{
        CgroupDriver, CriConfig, PluginConfig, RegistryConfig,
    };

    fn journal(old: Option<&NodeOsc>, new: &NodeOsc) -> Journal {
        let new_effective = effective(new, "node");
        let old_effective = old.map(|osc| effective(osc, "node"));
        let old_side = old
            .zip(old_effective.as_ref())
            .map(|(osc, effective)| Side { osc, effective });
        compute(
            old_side,
            Side {
                osc: new,
                effective: &new_effective,
            },
            "sum",
        )
    }

    fn with_containerd(osc: &mut NodeOsc, sandbox: &str) {
        osc.spec.cri_config = Some(CriConfig {
            name: CriName::Containerd,
            cgroup_driver: Some(CgroupDriver::Systemd),
            containerd: Some(ContainerdConfig {
                registries: Vec::new(),
                sandbox_image: sandbox.into(),
                plugins: Vec::new(),
            }),
        });
    }

    fn paths(files: &[File]) -> Vec<&str> {
        files.iter().map(|f| f.path.as_str()).collect()
    }

    fn names(drop_ins: &[crate::api::operatingsystemconfig::DropIn]) -> Vec<&str> {
        drop_ins.iter().map(|d| d.name.as_str()).collect()
    }

    fn commands(journal: &Journal) -> Vec<(&str, UnitCommand)> {
        journal
            .units
            .commands
            .iter()
            .map(|c| (c.name.as_str(), c.command))
            .collect()
    }

    #[test]
    fn rule1_first_apply_changes_everything() {
        let mut new = NodeOsc::default();
        new.spec.files.push(inline_file("/a", "1"));
        new.status.extension_files.push(inline_file("/b", "2"));
        let mut a = unit("a.service");
        a.drop_ins.push(drop_in("10.conf", "x"));
        new.spec.units.push(a);
        let mut stopped = unit("s.service");
        stopped.enable = Some(false);
        new.spec.units.push(stopped);
        with_containerd(&mut new, "pause:1");
        let journal = journal(None, &new);
        assert_eq!(journal.operating_system_config_checksum, "sum");
        assert_eq!(paths(&journal.files.changed), ["/a", "/b"]);
        assert_eq!(
            names(&journal.units.changed[0].drop_ins_changes.changed),
            ["10.conf"]
        );
        assert_eq!(
            commands(&journal),
            [
                ("a.service", UnitCommand::Restart),
                ("s.service", UnitCommand::Stop)
            ]
        );
        assert!(journal.containerd.config_file_changed);
        assert!(journal.files.deleted.is_empty() && journal.units.deleted.is_empty());
    }

    #[test]
    fn rule2_files_by_path_and_content() {
        let mut old = NodeOsc::default();
        old.spec.files.push(inline_file("/same", "1"));
        old.spec.files.push(inline_file("/moves", "1"));
        old.spec.files.push(inline_file("/edited", "1"));
        old.spec.files.push(inline_file("/mode", "1"));
        old.spec.files.push(inline_file("/gone", "1"));
        let mut new = NodeOsc::default();
        new.spec.files.push(inline_file("/same", "1"));
        new.status.extension_files.push(inline_file("/moves", "1"));
        new.spec.files.push(inline_file("/edited", "2"));
        let mut mode = inline_file("/mode", "1");
        mode.permissions = Some(0o644);
        new.spec.files.push(mode);
        new.spec.files.push(inline_file("/new", "1"));
        let journal = journal(Some(&old), &new);
        assert_eq!(paths(&journal.files.changed), ["/edited", "/mode", "/new"]);
        assert_eq!(paths(&journal.files.deleted), ["/gone"]);
        assert!(journal.units.commands.is_empty());
    }

    #[test]
    fn rule3_units_changed_by_content_or_by_a_listed_file() {
        let mut old = NodeOsc::default();
        old.spec.files.push(inline_file("/conf-a", "1"));
        old.spec.files.push(inline_file("/conf-b", "1"));
        let mut reads_a = unit("reads-a.service");
        reads_a.file_paths.push("/conf-a".into());
        let mut reads_b = unit("reads-b.service");
        reads_b.file_paths.push("/conf-b".into());
        let mut edited = unit("edited.service");
        edited.content = Some("old".into());
        old.spec.units.extend([
            reads_a.clone(),
            reads_b.clone(),
            edited.clone(),
            unit("gone.service"),
        ]);

        let mut new = old.clone();
        new.spec.files[0] = inline_file("/conf-a", "2");
        new.spec.units.retain(|u| u.name != "gone.service");
        new.spec.units[2].content = Some("new".into());
        new.spec.units.push(unit("added.service"));
        let journal = journal(Some(&old), &new);
        let changed: Vec<_> = journal
            .units
            .changed
            .iter()
            .map(|u| u.unit.name.as_str())
            .collect();
        assert_eq!(
            changed,
            ["reads-a.service", "edited.service", "added.service"]
        );
        assert_eq!(
            journal
                .units
                .deleted
                .iter()
                .map(|u| u.name.as_str())
                .collect::<Vec<_>>(),
            ["gone.service"]
        );
        assert!(
            !commands(&journal)
                .iter()
                .any(|(name, _)| *name == "reads-b.service"),
            "a unit whose files did not change is not touched"
        );
    }

    #[test]
    fn rule4_drop_ins_diffed_by_name() {
        let mut old = NodeOsc::default();
        let mut u = unit("u.service");
        u.drop_ins = vec![
            drop_in("keep.conf", "1"),
            drop_in("edit.conf", "1"),
            drop_in("gone.conf", "1"),
        ];
        old.spec.units.push(u);
        let mut new = NodeOsc::default();
        let mut u = unit("u.service");
        u.drop_ins = vec![
            drop_in("keep.conf", "1"),
            drop_in("edit.conf", "2"),
            drop_in("new.conf", "1"),
        ];
        new.spec.units.push(u);
        let journal = journal(Some(&old), &new);
        assert_eq!(
            names(&journal.units.changed[0].drop_ins_changes.changed),
            ["edit.conf", "new.conf"]
        );
        assert_eq!(
            names(&journal.units.changed[0].drop_ins_changes.deleted),
            ["gone.conf"]
        );
    }

    #[test]
    fn rule5_commands() {
        let with = |enable: Option<bool>, command: Option<UnitCommand>| {
            let mut u = unit("u.service");
            u.enable = enable;
            u.command = command;
            command_for(&u)
        };
        assert_eq!(with(None, None), UnitCommand::Restart);
        assert_eq!(
            with(Some(true), Some(UnitCommand::Start)),
            UnitCommand::Restart
        );
        assert_eq!(with(None, Some(UnitCommand::Restart)), UnitCommand::Restart);
        assert_eq!(
            with(Some(false), Some(UnitCommand::Start)),
            UnitCommand::Stop
        );
        assert_eq!(with(Some(true), Some(UnitCommand::Stop)), UnitCommand::Stop);

        let mut old = NodeOsc::default();
        old.spec.units.push(unit("same.service"));
        let new = old.clone();
        assert!(
            journal(Some(&old), &new).units.commands.is_empty(),
            "unchanged units get no command"
        );
    }

    #[test]
    fn rule6_containerd_config_changes() {
        let mut old = NodeOsc::default();
        let mut new = NodeOsc::default();
        with_containerd(&mut new, "pause:1");
        assert!(
            journal(Some(&old), &new).containerd.config_file_changed,
            "old had none"
        );
        with_containerd(&mut old, "pause:1");
        assert!(
            !journal(Some(&old), &new).containerd.config_file_changed,
            "same"
        );
        with_containerd(&mut new, "pause:2");
        assert!(
            journal(Some(&old), &new).containerd.config_file_changed,
            "sandbox image"
        );
        with_containerd(&mut new, "pause:1");
        if let Some(cri) = new.spec.cri_config.as_mut() {
            cri.cgroup_driver = Some(CgroupDriver::Cgroupfs);
        }
        assert!(
            journal(Some(&old), &new).containerd.config_file_changed,
            "cgroup driver"
        );
        with_containerd(&mut new, "pause:1");
        if let Some(c) = new
            .spec
            .cri_config
            .as_mut()
            .and_then(|c| c.containerd.as_mut())
        {
            c.plugins.push(PluginConfig {
                op: None,
                path: vec!["x".into()],
                values: None,
            });
        }
        assert!(
            journal(Some(&old), &new).containerd.config_file_changed,
            "plugins"
        );
        let without = NodeOsc::default();
        assert!(
            !journal(Some(&old), &without).containerd.config_file_changed,
            "new has none"
        );
    }

    #[test]
    fn rule7_registries() {
        let registry = |upstream: &str, server: &str| RegistryConfig {
            upstream: upstream.into(),
            server: Some(server.into()),
            hosts: Vec::new(),
            readiness_probe: None,
        };
        let mut old = NodeOsc::default();
        with_containerd(&mut old, "p");
        let mut new = old.clone();
        if let Some(c) = old
            .spec
            .cri_config
            .as_mut()
            .and_then(|c| c.containerd.as_mut())
        {
            c.registries = vec![
                registry("same", "a"),
                registry("edit", "a"),
                registry("gone", "a"),
            ];
        }
        if let Some(c) = new
            .spec
            .cri_config
            .as_mut()
            .and_then(|c| c.containerd.as_mut())
        {
            c.registries = vec![
                registry("same", "a"),
                registry("edit", "b"),
                registry("new", "a"),
            ];
        }
        let journal = journal(Some(&old), &new);
        let upstreams = |registries: &[RegistryConfig]| {
            registries
                .iter()
                .map(|r| r.upstream.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            upstreams(&journal.containerd.registries.desired),
            ["same", "edit", "new"]
        );
        assert_eq!(upstreams(&journal.containerd.registries.deleted), ["gone"]);
    }
}
