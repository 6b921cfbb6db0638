//! The steps of one apply, in the order of [`super`]'s module docs (the numbers there). Each
//! works through its part of the journal and marks every item done as soon as it is
//! ([`Progress::update`] rewrites the journal on disk), so a killed agent resumes at the next
//! item.

use std::path::Path;
use std::sync::Mutex;

use super::{
    ApplyError, CONTAINERD_FILE_MODE, CONTAINERD_UNIT, FailedJob, Input, STATE_FILE_MODE, Summary,
    UNIT_FILE_MODE, ensure_containerd_config, file_content, host_error, persist, write_file,
    write_if_different,
};
use crate::agent::pipeline::changes;
use crate::agent::pipeline::journal::{ChangedUnit, CommandEntry, Journal};
use crate::agent::pipeline::osc;
use crate::agent::ports::cluster::Secrets;
use crate::agent::ports::host::Host;
use crate::agent::ports::paths::Paths;
use crate::api::operatingsystemconfig::{Unit, UnitCommand};
use crate::containerd::cri;

/// The journal of an apply in progress, shared by its steps (the unit jobs update it from
/// several futures at once).
pub(super) struct Progress<'a, H> {
    host: &'a H,
    paths: &'a Paths,
    journal: Mutex<Journal>,
}

impl<'a, H: Host> Progress<'a, H> {
    pub(super) fn new(host: &'a H, paths: &'a Paths, journal: Journal) -> Self {
        Progress {
            host,
            paths,
            journal: Mutex::new(journal),
        }
    }

    /// Changes the journal and writes it to disk.
    pub(super) fn update(&self, change: impl FnOnce(&mut Journal)) -> Result<(), ApplyError> {
        let mut guard = self.journal.lock().unwrap_or_else(|e| e.into_inner());
        change(&mut guard);
        persist(self.host, self.paths, &guard)
    }

    /// The journal as it is now.
    pub(super) fn snapshot(&self) -> Journal {
        self.journal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Referenced Secrets before anything on the node changes: a missing Secret or key fails the
/// apply here instead of after some files were already written.
pub(super) async fn check_secrets<H: Host, S: Secrets>(
    progress: &Progress<'_, H>,
    secrets: &S,
) -> Result<(), ApplyError> {
    for file in progress.snapshot().files.changed {
        if file.content.secret_ref.is_some() {
            file_content(secrets, &file).await?;
        }
    }
    Ok(())
}

/// Containerd's config; a changed text marks containerd for restart.
pub(super) async fn containerd_config<H: Host>(
    progress: &Progress<'_, H>,
    input: Input<'_>,
    summary: &mut Summary,
) -> Result<(), ApplyError> {
    if changes::containerd_config(input.osc).is_some()
        && ensure_containerd_config(progress.host, input.osc).await?
    {
        summary.containerd_config_written = true;
        progress.update(|j| j.containerd.config_file_changed = true)?;
    }
    Ok(())
}

/// A command for the agent's own unit becomes `mustRestartNodeAgent`.
pub(super) fn defer_own_unit<H: Host>(
    progress: &Progress<'_, H>,
    input: Input<'_>,
) -> Result<(), ApplyError> {
    let own = progress
        .snapshot()
        .units
        .commands
        .iter()
        .any(|c| c.name == input.own_unit);
    if own {
        progress.update(|j| {
            j.take_command(input.own_unit);
            j.must_restart_node_agent = true;
        })?;
    }
    Ok(())
}

/// Files: inline and secretRef first, then imageRef (the slow ones).
pub(super) async fn write_files<H: Host, S: Secrets>(
    progress: &Progress<'_, H>,
    secrets: &S,
    summary: &mut Summary,
) -> Result<(), ApplyError> {
    for images in [false, true] {
        for file in progress.snapshot().files.changed {
            if file.content.image_ref.is_some() != images {
                continue;
            }
            write_file(progress.host, secrets, &file).await?;
            summary.files_written.push(file.path.clone());
            progress.update(|j| j.complete_file_changed(&file.path))?;
        }
    }
    Ok(())
}

/// Registry `hosts.toml` files.
pub(super) fn write_registries<H: Host>(progress: &Progress<'_, H>) -> Result<(), ApplyError> {
    for registry in progress.snapshot().containerd.registries.desired {
        let path = Path::new(cri::CERTS_DIR)
            .join(&registry.upstream)
            .join("hosts.toml");
        progress
            .host
            .write(
                &path,
                cri::render_hosts_toml(&registry).as_bytes(),
                CONTAINERD_FILE_MODE,
            )
            .map_err(host_error(format!("writing {}", path.display())))?;
        progress.update(|j| j.complete_registry_desired(&registry.upstream))?;
    }
    Ok(())
}

/// Changed units, one after the other.
pub(super) async fn write_units<H: Host>(
    progress: &Progress<'_, H>,
    input: Input<'_>,
    summary: &mut Summary,
) -> Result<(), ApplyError> {
    for changed in progress.snapshot().units.changed {
        write_unit(progress, input, &changed).await?;
        summary.units_written.push(changed.unit.name.clone());
        progress.update(|j| j.complete_unit_changed(&changed.unit.name))?;
    }
    Ok(())
}

/// One changed unit: its file, its changed and deleted drop-ins, enable or disable.
async fn write_unit<H: Host>(
    progress: &Progress<'_, H>,
    input: Input<'_>,
    changed: &ChangedUnit,
) -> Result<(), ApplyError> {
    let (host, paths) = (progress.host, progress.paths);
    let name = changed.unit.name.as_str();
    // gardener-node-agent removes completed drop-ins from the journal's unit, so whether the
    // unit has drop-ins is taken from the OSC itself when it is there.
    let unit = input.effective.unit(name).unwrap_or(&changed.unit);
    if let Some(content) = &unit.content {
        write_if_different(
            host,
            &paths.unit_file(name),
            content.as_bytes(),
            UNIT_FILE_MODE,
        )?;
    }
    for drop_in in &changed.drop_ins_changes.changed {
        write_if_different(
            host,
            &paths.drop_in(name, &drop_in.name),
            drop_in.content.as_bytes(),
            UNIT_FILE_MODE,
        )?;
        progress.update(|j| j.complete_drop_in_changed(name, &drop_in.name))?;
    }
    for drop_in in &changed.drop_ins_changes.deleted {
        let path = paths.drop_in(name, &drop_in.name);
        host.remove_file(&path)
            .map_err(host_error(format!("removing {}", path.display())))?;
        progress.update(|j| j.complete_drop_in_deleted(name, &drop_in.name))?;
    }
    if unit.drop_ins.is_empty() {
        let dir = paths.drop_in_dir(name);
        host.remove_dir_if_empty(&dir)
            .map_err(host_error(format!("removing {}", dir.display())))?;
    }
    if name == input.own_unit || unit.enable != Some(false) {
        host.enable_unit(name)
            .await
            .map_err(host_error(format!("enabling {name}")))
    } else {
        host.disable_unit(name)
            .await
            .map_err(host_error(format!("disabling {name}")))
    }
}

/// Deleted units, one after the other.
pub(super) async fn delete_units<H: Host>(
    progress: &Progress<'_, H>,
    summary: &mut Summary,
) -> Result<(), ApplyError> {
    for old in progress.snapshot().units.deleted {
        let then = delete_unit(progress, &old).await?;
        summary.units_deleted.push(old.name.clone());
        progress.update(|j| j.complete_unit_deleted(&old.name, then))?;
    }
    Ok(())
}

/// One deleted unit: with content → disable, stop, delete; its drop-ins removed. Returns the
/// restart a unit we only added drop-ins to needs to run without them.
async fn delete_unit<H: Host>(
    progress: &Progress<'_, H>,
    old: &Unit,
) -> Result<Option<CommandEntry>, ApplyError> {
    let (host, paths) = (progress.host, progress.paths);
    let name = old.name.as_str();
    let unit_file = paths.unit_file(name);
    let has_file = old.content.is_some()
        && host
            .read(&unit_file)
            .map_err(host_error(format!("reading {}", unit_file.display())))?
            .is_some();
    if has_file {
        host.disable_unit(name)
            .await
            .map_err(host_error(format!("disabling {name}")))?;
        host.unit_job(name, UnitCommand::Stop)
            .await
            .map_err(host_error(format!("stopping {name}")))?;
        host.remove_file(&unit_file)
            .map_err(host_error(format!("removing {}", unit_file.display())))?;
    }
    for drop_in in &old.drop_ins {
        let path = paths.drop_in(name, &drop_in.name);
        host.remove_file(&path)
            .map_err(host_error(format!("removing {}", path.display())))?;
    }
    let dir = paths.drop_in_dir(name);
    host.remove_dir_if_empty(&dir)
        .map_err(host_error(format!("removing {}", dir.display())))?;
    // A unit we only added drop-ins to stays, but must run without them. (Upstream restarts
    // it only when its file is in /etc/systemd/system; any unit systemd knows is restarted
    // here.)
    let drop_ins_only = old.content.is_none() && !old.drop_ins.is_empty();
    if drop_ins_only
        && host
            .unit_known(name)
            .await
            .map_err(host_error(format!("looking up {name}")))?
    {
        return Ok(Some(CommandEntry {
            name: name.to_string(),
            command: UnitCommand::Restart,
        }));
    }
    Ok(None)
}

/// Unit jobs, in parallel; each done job is marked at once, the failed ones fail the
/// apply together.
pub(super) async fn run_unit_jobs<H: Host>(
    progress: &Progress<'_, H>,
    summary: &mut Summary,
) -> Result<(), ApplyError> {
    let commands = progress.snapshot().units.commands;
    let jobs = commands.iter().map(|command| async {
        let result = progress.host.unit_job(&command.name, command.command).await;
        if result.is_ok() {
            progress.update(|j| j.complete_command(&command.name))?;
        }
        Ok::<_, ApplyError>((command.clone(), result))
    });
    let mut failures = Vec::new();
    for outcome in futures::future::join_all(jobs).await {
        let (command, result) = outcome?;
        match result {
            Ok(()) => summary.commands.push(command),
            Err(error) => failures.push(FailedJob {
                unit: command.name,
                command: command.command,
                error: crate::error_chain::printable(&error),
            }),
        }
    }
    if !failures.is_empty() {
        return Err(ApplyError::Commands(failures));
    }
    Ok(())
}

/// After the jobs: containerd restarted when its config changed and no job restarted it.
pub(super) async fn restart_containerd<H: Host>(
    progress: &Progress<'_, H>,
    summary: &mut Summary,
) -> Result<(), ApplyError> {
    if !progress.snapshot().containerd.config_file_changed {
        return Ok(());
    }
    let restarted_by_a_job = summary.commands.iter().any(|c| c.name == CONTAINERD_UNIT);
    if !restarted_by_a_job {
        progress
            .host
            .unit_job(CONTAINERD_UNIT, UnitCommand::Restart)
            .await
            .map_err(|error| {
                ApplyError::Commands(vec![FailedJob {
                    unit: CONTAINERD_UNIT.to_string(),
                    command: UnitCommand::Restart,
                    error: crate::error_chain::printable(&error),
                }])
            })?;
        summary.commands.push(CommandEntry {
            name: CONTAINERD_UNIT.to_string(),
            command: UnitCommand::Restart,
        });
    }
    progress.update(|j| j.containerd.config_file_changed = false)
}

/// Removed registries, then removed files.
pub(super) fn remove_deleted<H: Host>(
    progress: &Progress<'_, H>,
    summary: &mut Summary,
) -> Result<(), ApplyError> {
    let host = progress.host;
    for registry in progress.snapshot().containerd.registries.deleted {
        let dir = Path::new(cri::CERTS_DIR).join(&registry.upstream);
        host.remove_dir_all(&dir)
            .map_err(host_error(format!("removing {}", dir.display())))?;
        progress.update(|j| j.complete_registry_deleted(&registry.upstream))?;
    }
    for file in progress.snapshot().files.deleted {
        host.remove_file(Path::new(&file.path))
            .map_err(host_error(format!("removing {}", file.path)))?;
        summary.files_deleted.push(file.path.clone());
        progress.update(|j| j.complete_file_deleted(&file.path))?;
    }
    Ok(())
}

/// `last-applied-osc.yaml`: what the next apply and the drift check compare with.
pub(super) fn record_last_applied<H: Host>(host: &H, input: Input<'_>) -> Result<(), ApplyError> {
    let text = osc::encode(input.osc).map_err(|error| ApplyError::Encode {
        what: "last-applied-osc.yaml",
        message: error.to_string(),
    })?;
    host.write(
        &input.paths.last_applied(),
        text.as_bytes(),
        STATE_FILE_MODE,
    )
    .map_err(host_error("writing last-applied-osc.yaml"))
}
