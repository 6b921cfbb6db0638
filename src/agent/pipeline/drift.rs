//! Drift repair (our addition; gardener-node-agent only reports drift once at start): every
//! `--drift-check-interval` the files, unit files and drop-ins of the last applied OSC are
//! compared with the disk; whatever differs is rewritten from the OSC, the units it affects
//! are restarted, and the repairs are counted and logged.
//!
//! What counts as drift:
//! - an inline or `secretRef` file whose bytes differ or that is missing (rewritten; units
//!   listing it in `filePaths` restarted); a `secretRef` is read again for the comparison;
//! - an `imageRef` file that is missing (extracted again); its bytes are not compared,
//!   which would mean pulling and mounting the image every interval, nor read: presence and
//!   mode come from its metadata;
//! - anything other than a regular file in an OSC file's place (a link, a FIFO): replaced by
//!   the file, never followed, so a link cannot make a repair read or chmod its target;
//! - any OSC file whose mode differs (mode set; nothing restarted);
//! - a unit file or drop-in whose bytes differ or that is missing (rewritten, then
//!   daemon-reload and a restart of that unit).
//!
//! Units the OSC wants stopped (`enable: false` or `command: stop`) are never restarted by a
//! repair. Enablement is not checked.

use std::collections::BTreeSet;
use std::path::Path;

use crate::api::operatingsystemconfig::UnitCommand;

use crate::agent::pipeline::apply::{self, ApplyError, UNIT_FILE_MODE};
use crate::agent::pipeline::changes::command_for;
use crate::agent::pipeline::journal::Journal;
use crate::agent::pipeline::osc::Effective;
use crate::agent::ports::Ports;
use crate::agent::ports::cluster::{NodeMeta, Secrets};
use crate::agent::ports::host::Host;
use crate::agent::ports::paths::Paths;

/// One drift check of the node against `effective` (the last applied OSC): what drifted,
/// nothing changed yet — `None` while an apply has work left in the journal (it rewrites
/// anyway) or when the check failed (logged and counted). The controller decides what to do
/// with it ([`rules::decide`], `crate::agent::controller`'s drift turn).
pub async fn find<H: Host>(
    ports: &Ports<H>,
    effective: &Effective<'_>,
    own_unit: &str,
) -> Option<Findings> {
    let journal = ports
        .host
        .read(&ports.paths.journal())
        .ok()
        .flatten()
        .and_then(|bytes| Journal::parse(&String::from_utf8_lossy(&bytes)));
    if journal.is_some_and(|journal| !journal.is_empty()) {
        return None;
    }
    ports.metrics.drift_checks.inc();
    let found = detect(
        ports.host.as_ref(),
        &ports.secrets,
        effective,
        &ports.paths,
        own_unit,
    )
    .await;
    match found {
        Ok(findings) => Some(findings),
        Err(error) => {
            ports.metrics.error("drift", error.category());
            tracing::warn!(error = %crate::error_chain::printable(&error), "drift check failed");
            None
        }
    }
}

/// Repairs `findings` and reports it ([`report_repairs`]); a failure is logged, counted and
/// returned.
pub async fn repair_and_report<H: Host>(
    ports: &Ports<H>,
    node: Option<&NodeMeta>,
    effective: &Effective<'_>,
    findings: &Findings,
) -> Result<Report, ApplyError> {
    let repaired = repair(
        ports.host.as_ref(),
        &ports.secrets,
        effective,
        &ports.paths,
        findings,
    )
    .await;
    match &repaired {
        Ok(report) => report_repairs(ports, node, report).await,
        Err(error) => {
            ports.metrics.error("drift", error.category());
            tracing::warn!(error = %crate::error_chain::printable(error), "drift repair failed");
        }
    }
    repaired
}

/// Counts, logs and reports what a check repaired.
pub async fn report_repairs<H: Host>(ports: &Ports<H>, node: Option<&NodeMeta>, report: &Report) {
    ports.metrics.drift("file", report.files.len());
    ports.metrics.drift("mode", report.modes.len());
    ports.metrics.drift("unit-file", report.unit_files.len());
    for _ in &report.restarted {
        ports.metrics.unit_job("restart", "drift");
    }
    tracing::warn!(files = ?report.files, modes = ?report.modes, unit_files = ?report.unit_files, restarted = ?report.restarted, "drift repaired");
    let Some(node) = node else { return };
    let note = format!(
        "restored {} file(s), {} mode(s), {} unit file(s); restarted: {}",
        report.files.len(),
        report.modes.len(),
        report.unit_files.len(),
        report.restarted.join(", ")
    );
    ports.event(node, true, "DriftRepaired", note).await;
}

/// What one check found and did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    /// Files rewritten (content differed or missing).
    pub files: Vec<String>,
    /// Files whose mode was set back.
    pub modes: Vec<String>,
    /// Unit files and drop-ins rewritten (paths).
    pub unit_files: Vec<String>,
    /// Units restarted because of the repairs.
    pub restarted: Vec<String>,
}

impl Report {
    /// Number of repairs (files, modes, unit files).
    pub fn repairs(&self) -> usize {
        self.files.len() + self.modes.len() + self.unit_files.len()
    }
}

/// What a check found drifted ([`detect`]), before anything is repaired.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Findings {
    /// Files whose content differs or that are missing.
    pub files: Vec<String>,
    /// Files whose mode differs.
    pub modes: Vec<String>,
    /// Unit files and drop-ins that differ or are missing (paths).
    pub unit_files: Vec<String>,
    /// Units the repair restarts ([`units_to_restart`], never the agent's own).
    pub restart: Vec<String>,
}

impl Findings {
    /// Whether nothing drifted.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.modes.is_empty() && self.unit_files.is_empty()
    }

    /// One line for logs, events and the Node condition.
    pub fn summary(&self) -> String {
        let restarts = if self.restart.is_empty() {
            "none".to_string()
        } else {
            self.restart.join(", ")
        };
        format!(
            "{} file(s), {} mode(s), {} unit file(s) differ from the applied configuration; restarts to repair: {restarts}",
            self.files.len(),
            self.modes.len(),
            self.unit_files.len()
        )
    }
}

/// The units a repair must restart: those whose unit file or drop-ins were rewritten and
/// those listing a rewritten file, except units meant to be stopped. Sorted, unique.
pub fn units_to_restart(
    effective: &Effective<'_>,
    rewritten_files: &[String],
    rewritten_units: &BTreeSet<String>,
) -> Vec<String> {
    effective
        .units
        .iter()
        .filter(|unit| {
            rewritten_units.contains(&unit.name)
                || unit
                    .file_paths
                    .iter()
                    .any(|path| rewritten_files.contains(path))
        })
        .filter(|unit| command_for(unit) == UnitCommand::Restart)
        .map(|unit| unit.name.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Checks the node against `effective` (the last applied OSC) and repairs what drifted
/// ([`detect`], then [`repair`]). `own_unit` is never restarted (a repaired agent unit takes
/// effect on its next restart).
pub async fn check_and_repair<H: Host, S: Secrets>(
    host: &H,
    secrets: &S,
    effective: &Effective<'_>,
    paths: &Paths,
    own_unit: &str,
) -> Result<Report, ApplyError> {
    let findings = detect(host, secrets, effective, paths, own_unit).await?;
    repair(host, secrets, effective, paths, &findings).await
}

/// What drifted from `effective` (the last applied OSC), read only: nothing on the node is
/// changed. `own_unit` is never among the units to restart.
pub async fn detect<H: Host, S: Secrets>(
    host: &H,
    secrets: &S,
    effective: &Effective<'_>,
    paths: &Paths,
    own_unit: &str,
) -> Result<Findings, ApplyError> {
    let mut findings = Findings::default();
    let host_error = |step: String| move |source| ApplyError::Host { step, source };
    for file in &effective.files {
        let path = Path::new(&file.path);
        let rewrite = match apply::file_content(secrets, file).await? {
            Some(desired) => !host
                .holds(path, &desired)
                .map_err(host_error(format!("reading {}", file.path)))?,
            // imageRef: metadata only (a regular file is there or not).
            None => host
                .mode(path)
                .map_err(host_error(format!("inspecting {}", file.path)))?
                .is_none(),
        };
        if rewrite {
            findings.files.push(file.path.clone());
        } else if host
            .mode(path)
            .map_err(host_error(format!("inspecting {}", file.path)))?
            != Some(apply::file_mode(file))
        {
            findings.modes.push(file.path.clone());
        }
    }
    let mut rewritten_units = BTreeSet::new();
    for (unit, path, content) in unit_targets(effective, paths) {
        let holds = host
            .holds(&path, content.as_bytes())
            .map_err(host_error(format!("reading {}", path.display())))?;
        if !holds {
            findings.unit_files.push(path.display().to_string());
            rewritten_units.insert(unit.to_string());
        }
    }
    findings.restart = units_to_restart(effective, &findings.files, &rewritten_units)
        .into_iter()
        .filter(|unit| unit != own_unit)
        .collect();
    Ok(findings)
}

/// Every unit file and drop-in of `effective` with its unit's name, path and content.
fn unit_targets<'e>(
    effective: &'e Effective<'_>,
    paths: &Paths,
) -> Vec<(&'e str, std::path::PathBuf, &'e str)> {
    let mut targets = Vec::new();
    for unit in &effective.units {
        if let Some(content) = &unit.content {
            targets.push((
                unit.name.as_str(),
                paths.unit_file(&unit.name),
                content.as_str(),
            ));
        }
        for drop_in in &unit.drop_ins {
            targets.push((
                unit.name.as_str(),
                paths.drop_in(&unit.name, &drop_in.name),
                drop_in.content.as_str(),
            ));
        }
    }
    targets
}

/// Repairs what [`detect`] found: rewrites the drifted files (a `secretRef` read again) and
/// unit files, sets modes back, reloads systemd when a unit file changed and restarts
/// `findings.restart`.
pub async fn repair<H: Host, S: Secrets>(
    host: &H,
    secrets: &S,
    effective: &Effective<'_>,
    paths: &Paths,
    findings: &Findings,
) -> Result<Report, ApplyError> {
    let mut report = Report::default();
    let host_error = |step: String| move |source| ApplyError::Host { step, source };
    for file in &effective.files {
        if findings.files.contains(&file.path) {
            apply::write_file(host, secrets, file).await?;
            report.files.push(file.path.clone());
        } else if findings.modes.contains(&file.path) {
            host.set_mode(Path::new(&file.path), apply::file_mode(file))
                .map_err(host_error(format!("changing the mode of {}", file.path)))?;
            report.modes.push(file.path.clone());
        }
    }
    for (_, path, content) in unit_targets(effective, paths) {
        if findings.unit_files.contains(&path.display().to_string()) {
            apply::write_if_different(host, &path, content.as_bytes(), UNIT_FILE_MODE)?;
            report.unit_files.push(path.display().to_string());
        }
    }
    if !report.unit_files.is_empty() {
        host.daemon_reload()
            .await
            .map_err(host_error("daemon-reload".to_string()))?;
    }
    let jobs = findings.restart.iter().map(|unit| async move {
        (
            unit.clone(),
            host.unit_job(unit, UnitCommand::Restart).await,
        )
    });
    let mut failures = Vec::new();
    for (unit, result) in futures::future::join_all(jobs).await {
        match result {
            Ok(()) => report.restarted.push(unit),
            Err(error) => failures.push(apply::FailedJob {
                unit,
                command: UnitCommand::Restart,
                error: crate::error_chain::printable(&error),
            }),
        }
    }
    if !failures.is_empty() {
        return Err(ApplyError::Commands(failures));
    }
    Ok(report)
}

pub mod rules;

#[cfg(test)]
mod tests;
