//! `render osc --impact` (pure): what a change of an OperatingSystemConfig does on the nodes.
//!
//! For a reconcile OSC both node-agent secrets are rendered as the OSC controller renders
//! them ([`crate::controllers::operatingsystemconfig::reconcile::render_node_agent_secret`]);
//! their `osc.yaml` is read as the node agent reads it (decoded, validated, with the
//! containerd drop-in it adds) and run through the agent's own steps with the previous one
//! as `last-applied-osc.yaml`:
//!
//! - the diff ([`crate::agent::pipeline::changes::compute`]): files written and deleted, units
//!   written (then `daemon-reload`), restarted, stopped, removed, containerd's config;
//! - the disruptive rollout's classification ([`crate::agent::rollout::rules::classify`],
//!   without units marked disruptive by annotation, which the preview cannot know): a kubelet
//!   or containerd restart (or stop, removal, containerd config) goes through the rollout,
//!   with its budget, where the rollout is on;
//! - the in-place flags ([`crate::agent::in_place::rules::flags`]), with the previous OSC's
//!   operating system version as the node's (the nodes run what it asked for).
//!
//! A provision OSC only reaches machines created from now on: [`super::provision`].
//! [`impact`] picks one or the other for a pair, refusing a reconcile OSC compared with a
//! provision one.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, bail};
use serde::Serialize;

use super::pairs::Pair;
use super::provision::{self, ProvisionImpact};
use crate::agent::in_place::rules as in_place;
use crate::agent::pipeline::apply::inject_containerd_drop_in;
use crate::agent::pipeline::changes::{self, Side};
use crate::agent::pipeline::journal::{InPlaceUpdateFlags, Journal};
use crate::agent::pipeline::osc::{self as node_osc, NodeOsc};
use crate::agent::rollout::rules::{self as rollout, ANNOTATION_DISRUPTIVE_UNITS, Change};
use crate::api::OperatingSystemConfig;
use crate::api::operatingsystemconfig::{OperatingSystemConfigPurpose, UnitCommand};
use crate::controllers::operatingsystemconfig::content::ReferencedSecrets;
use crate::controllers::operatingsystemconfig::nodeagent::NodeAgentSecret;
use crate::controllers::operatingsystemconfig::reconcile::render_node_agent_secret;

/// The impact of one OSC change.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum OscImpact {
    /// A reconcile OSC: what every node of the pool does.
    Reconcile(Box<NodeImpact>),
    /// A provision OSC: the user data of new machines.
    Provision(ProvisionImpact),
}

/// Files a node writes and deletes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FileWork {
    /// Paths written.
    pub written: Vec<String>,
    /// Paths deleted.
    pub deleted: Vec<String>,
}

/// Drop-ins of one unit a node writes and deletes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DropInWork {
    /// Drop-ins written.
    pub written: Vec<String>,
    /// Drop-ins deleted.
    pub deleted: Vec<String>,
}

/// Units a node writes, restarts, stops and removes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnitWork {
    /// Units whose file, drop-ins or enablement are written (then `daemon-reload`).
    pub written: Vec<String>,
    /// The drop-in work of written units that have some.
    pub drop_ins: BTreeMap<String, DropInWork>,
    /// Units restarted.
    pub restarted: Vec<String>,
    /// Units stopped.
    pub stopped: Vec<String>,
    /// Units removed.
    pub removed: Vec<String>,
}

/// What every node of a pool does when the node-agent secret changes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeImpact {
    /// Always `reconcile`.
    pub purpose: &'static str,
    /// Namespace of the OSC.
    pub namespace: String,
    /// Name of the OSC.
    pub name: String,
    /// The node-agent secret (`kube-system/<name>` in the shoot).
    pub secret: String,
    /// The pool.
    pub pool: String,
    /// `osc.yaml` (and so the secret's `checksum/data-script`) changes: every node applies.
    pub checksum_changed: bool,
    /// Nothing changes on the nodes.
    pub unchanged: bool,
    /// Files.
    pub files: FileWork,
    /// Units.
    pub units: UnitWork,
    /// containerd's `config.toml` is rewritten and containerd restarted.
    pub containerd_config_changed: bool,
    /// Registry mirrors (upstreams) whose `hosts.toml` folder is removed.
    pub registries_removed: Vec<String>,
    /// The change goes through the disruptive rollout.
    pub disruptive: bool,
    /// Why (`restart kubelet.service`).
    pub disruptive_because: Vec<String>,
    /// The change is an in-place update the node waits for machine-controller-manager with.
    pub in_place_update: bool,
    /// Why (which in-place flags).
    pub in_place_update_because: Vec<String>,
    /// What else to know.
    pub notes: Vec<String>,
}

/// The impact of `pair` (see the module docs); `files` name the two files in messages.
pub fn impact(
    pair: &Pair<OperatingSystemConfig>,
    secrets: &ReferencedSecrets,
    files: super::pairs::Files<'_>,
) -> anyhow::Result<OscImpact> {
    let purpose = |osc: &OperatingSystemConfig| osc.spec.purpose;
    match (purpose(&pair.previous), purpose(&pair.new)) {
        (OperatingSystemConfigPurpose::Reconcile, OperatingSystemConfigPurpose::Reconcile) => {
            node_impact(pair, secrets, files).map(|node| OscImpact::Reconcile(Box::new(node)))
        }
        (OperatingSystemConfigPurpose::Provision, OperatingSystemConfigPurpose::Provision) => {
            provision::impact(pair, secrets, files).map(OscImpact::Provision)
        }
        (previous, new) => bail!(
            "{}: {} is a {} OSC, but in --previous {} a {} one: a {} OSC cannot be compared with a {} one",
            files.new,
            crate::render::input::describe(&pair.new),
            purpose_name(new),
            files.previous,
            purpose_name(previous),
            purpose_name(new),
            purpose_name(previous),
        ),
    }
}

/// `reconcile` or `provision`.
pub fn purpose_name(purpose: OperatingSystemConfigPurpose) -> &'static str {
    match purpose {
        OperatingSystemConfigPurpose::Reconcile => "reconcile",
        OperatingSystemConfigPurpose::Provision => "provision",
    }
}

/// The hint for two single OSCs of different names ([`super::pairs::pair`]).
pub fn mismatch_hint(new: &OperatingSystemConfig, previous: &OperatingSystemConfig) -> String {
    let (new, previous) = (new.spec.purpose, previous.spec.purpose);
    if new != previous {
        return format!(
            "a {} OSC cannot be compared with a {} one",
            purpose_name(new),
            purpose_name(previous)
        );
    }
    "another name is another node-agent secret: gardenlet names a rolling pool's OSCs after what needs new machines, so the pool's nodes are replaced, not updated; `render worker --impact` previews that".to_string()
}

/// A reconcile OSC's secret and the OSC the agent reads from it.
struct NodeSide {
    secret: NodeAgentSecret,
    osc: NodeOsc,
}

/// Renders `osc`'s node-agent secret as the controller does and reads it as the agent does
/// (decode, validate, the containerd drop-in).
fn node_side(osc: &OperatingSystemConfig, secrets: &ReferencedSecrets) -> anyhow::Result<NodeSide> {
    let (secret, _) = render_node_agent_secret(osc, secrets)
        .map_err(|e| anyhow::anyhow!(crate::error_chain::chain(&e)))?;
    let mut node = node_osc::decode(secret.osc_yaml.as_bytes())
        .context("the node agent does not decode its osc.yaml")?;
    node_osc::validate(&node).context("the node agent refuses its osc.yaml")?;
    inject_containerd_drop_in(&mut node);
    Ok(NodeSide { secret, osc: node })
}

fn node_impact(
    pair: &Pair<OperatingSystemConfig>,
    secrets: &ReferencedSecrets,
    files: super::pairs::Files<'_>,
) -> anyhow::Result<NodeImpact> {
    let describe = crate::render::input::describe(&pair.new);
    let before = node_side(&pair.previous, secrets)
        .with_context(|| format!("--previous {}: {describe}", files.previous))?;
    let after =
        node_side(&pair.new, secrets).with_context(|| format!("{}: {describe}", files.new))?;
    // No host name: files meant for one host are left out (noted below).
    let (old_effective, new_effective) = (
        node_osc::effective(&before.osc, ""),
        node_osc::effective(&after.osc, ""),
    );
    let journal = changes::compute(
        Some(Side {
            osc: &before.osc,
            effective: &old_effective,
        }),
        Side {
            osc: &after.osc,
            effective: &new_effective,
        },
        &after.secret.checksum(),
    );
    let change = rollout::classify(&journal, &BTreeSet::new());
    let current_os = before
        .osc
        .spec
        .in_place_updates
        .as_ref()
        .map(|u| u.operating_system_version.as_str());
    let flags = in_place::flags(Some(&before.osc), &after.osc, current_os)
        .with_context(|| format!("{}: {describe}: the in-place update flags", files.new))?;
    let mut found = summarize(&journal, &change, &flags);
    found.in_place_update_because = in_place_because(&flags, &before.osc, &after.osc);
    found.checksum_changed = before.secret.checksum() != after.secret.checksum();
    found.namespace = pair.new.metadata.namespace.clone().unwrap_or_default();
    found.name = pair.new.metadata.name.clone().unwrap_or_default();
    found.secret = after.secret.name.clone();
    found.pool = after.secret.pool.clone();
    if has_host_files(&before.osc) || has_host_files(&after.osc) {
        found
            .notes
            .push("files for one host (hostName) are left out".to_string());
    }
    Ok(found)
}

/// Whether `osc` has files meant for one host only.
fn has_host_files(osc: &NodeOsc) -> bool {
    osc.spec
        .files
        .iter()
        .chain(&osc.status.extension_files)
        .any(|f| f.host_name.as_deref().is_some_and(|h| !h.is_empty()))
}

/// The node impact of the agent's `journal`, its rollout `change` and in-place `flags`
/// (names, checksum and the in-place reasons are filled in by the caller).
pub fn summarize(journal: &Journal, change: &Change, flags: &InPlaceUpdateFlags) -> NodeImpact {
    let files = FileWork {
        written: journal
            .files
            .changed
            .iter()
            .map(|f| f.path.clone())
            .collect(),
        deleted: journal
            .files
            .deleted
            .iter()
            .map(|f| f.path.clone())
            .collect(),
    };
    let units = unit_work(journal);
    let disruptive_because = match change {
        Change::Quiet => Vec::new(),
        Change::Disruptive(why) => why.clone(),
    };
    let registries_removed: Vec<String> = journal
        .containerd
        .registries
        .deleted
        .iter()
        .map(|r| r.upstream.clone())
        .collect();
    let in_place_update = in_place::any(flags);
    let unchanged = files == FileWork::default()
        && units == UnitWork::default()
        && !journal.containerd.config_file_changed
        && registries_removed.is_empty()
        && !in_place_update;
    let mut notes = Vec::new();
    let other_units = units
        .restarted
        .iter()
        .chain(&units.stopped)
        .chain(&units.removed)
        .any(|u| !rollout::ALWAYS_DISRUPTIVE.contains(&u.as_str()));
    if disruptive_because.is_empty() && other_units {
        notes.push(format!(
            "a unit marked with {ANNOTATION_DISRUPTIVE_UNITS} would make it disruptive too; the preview does not know those marks"
        ));
    }
    NodeImpact {
        purpose: "reconcile",
        namespace: String::new(),
        name: String::new(),
        secret: String::new(),
        pool: String::new(),
        checksum_changed: true,
        unchanged,
        files,
        units,
        containerd_config_changed: journal.containerd.config_file_changed,
        registries_removed,
        disruptive: !disruptive_because.is_empty(),
        disruptive_because,
        in_place_update,
        in_place_update_because: Vec::new(),
        notes,
    }
}

/// The unit work of `journal`.
fn unit_work(journal: &Journal) -> UnitWork {
    let commanded = |wanted: UnitCommand| -> Vec<String> {
        journal
            .units
            .commands
            .iter()
            .filter(|c| match wanted {
                UnitCommand::Stop => c.command == UnitCommand::Stop,
                _ => c.command != UnitCommand::Stop,
            })
            .map(|c| c.name.clone())
            .collect()
    };
    let drop_ins = journal
        .units
        .changed
        .iter()
        .filter(|u| {
            !u.drop_ins_changes.changed.is_empty() || !u.drop_ins_changes.deleted.is_empty()
        })
        .map(|u| {
            let names = |list: &[crate::api::operatingsystemconfig::DropIn]| {
                list.iter().map(|d| d.name.clone()).collect()
            };
            let work = DropInWork {
                written: names(&u.drop_ins_changes.changed),
                deleted: names(&u.drop_ins_changes.deleted),
            };
            (u.unit.name.clone(), work)
        })
        .collect();
    UnitWork {
        written: journal
            .units
            .changed
            .iter()
            .map(|u| u.unit.name.clone())
            .collect(),
        drop_ins,
        restarted: commanded(UnitCommand::Restart),
        stopped: commanded(UnitCommand::Stop),
        removed: journal
            .units
            .deleted
            .iter()
            .map(|u| u.name.clone())
            .collect(),
    }
}

/// The in-place flags in words, with the versions they compare.
fn in_place_because(flags: &InPlaceUpdateFlags, before: &NodeOsc, after: &NodeOsc) -> Vec<String> {
    let ((old_os, old_kubelet), (new_os, new_kubelet)) = (versions(before), versions(after));
    let mut because = Vec::new();
    if flags.operating_system {
        because.push(format!("operating system version {old_os} → {new_os}"));
    }
    if flags.kubelet.minor_version {
        because.push(format!(
            "kubelet minor version {old_kubelet} → {new_kubelet}"
        ));
    }
    if flags.kubelet.config {
        because.push("kubelet reservations or eviction thresholds".to_string());
    }
    if flags.kubelet.cpu_manager_policy {
        because.push("kubelet CPU manager policy".to_string());
    }
    if flags.certificate_authorities_rotation.kubelet {
        because.push("certificate authorities rotation".to_string());
    }
    if flags.service_account_key_rotation {
        because.push("service account key rotation".to_string());
    }
    because
}

/// The operating system and kubelet versions an OSC's `spec.inPlaceUpdates` asks for.
fn versions(osc: &NodeOsc) -> (&str, &str) {
    osc.spec
        .in_place_updates
        .as_ref()
        .map(|u| (u.operating_system_version.as_str(), u.kubelet.as_str()))
        .unwrap_or_default()
}

/// `a, b` or `-`.
fn list(items: &[String]) -> String {
    if items.is_empty() {
        "-".to_string()
    } else {
        items.join(", ")
    }
}

impl NodeImpact {
    /// The text output (see the module docs).
    pub fn text(&self) -> String {
        if self.unchanged {
            let why = if self.checksum_changed {
                "osc.yaml changes, so every node runs an apply, which changes nothing"
            } else {
                "the node-agent secret is the same: the nodes do nothing"
            };
            return format!("unchanged: no file, no unit ({why})\n");
        }
        let mut lines = vec![
            format!(
                "node-agent secret {} (pool {}): every node of the pool applies the change",
                self.secret, self.pool
            ),
            format!("files written: {}", list(&self.files.written)),
            format!("files deleted: {}", list(&self.files.deleted)),
            format!("units written (daemon-reload): {}", self.written_units()),
            format!("units restarted: {}", list(&self.units.restarted)),
            format!("units stopped: {}", list(&self.units.stopped)),
            format!("units removed: {}", list(&self.units.removed)),
            self.containerd_line(),
            self.rollout_line(),
            self.in_place_line(),
        ];
        lines.extend(self.notes.iter().map(|note| format!("note: {note}")));
        lines.iter().map(|l| format!("{l}\n")).collect()
    }

    fn written_units(&self) -> String {
        let units: Vec<String> = self
            .units
            .written
            .iter()
            .map(|unit| match self.units.drop_ins.get(unit) {
                None => unit.clone(),
                Some(work) => {
                    let mut parts = Vec::new();
                    if !work.written.is_empty() {
                        parts.push(format!("drop-ins written: {}", work.written.join(", ")));
                    }
                    if !work.deleted.is_empty() {
                        parts.push(format!("drop-ins deleted: {}", work.deleted.join(", ")));
                    }
                    format!("{unit} ({})", parts.join("; "))
                }
            })
            .collect();
        list(&units)
    }

    fn containerd_line(&self) -> String {
        let mut line = if self.containerd_config_changed {
            "containerd config: changes (containerd.service is restarted for it)".to_string()
        } else {
            "containerd config: unchanged".to_string()
        };
        if !self.registries_removed.is_empty() {
            line.push_str(&format!(
                "; registry mirrors removed: {}",
                self.registries_removed.join(", ")
            ));
        }
        line
    }

    fn rollout_line(&self) -> String {
        if self.disruptive {
            format!(
                "disruptive: {} — goes through the disruptive rollout with its budget where the rollout is on; elsewhere every node applies it at once",
                self.disruptive_because.join(", ")
            )
        } else {
            "quiet: no kubelet or containerd restart; the disruptive rollout does not hold it back"
                .to_string()
        }
    }

    fn in_place_line(&self) -> String {
        if self.in_place_update {
            format!(
                "in-place update: yes — {}; a node applies the change once machine-controller-manager has made it ready (InPlaceUpdate/ReadyForUpdate)",
                self.in_place_update_because.join(", ")
            )
        } else {
            "in-place update: no".to_string()
        }
    }
}

impl super::Impact for OscImpact {
    fn text(&self) -> String {
        match self {
            OscImpact::Reconcile(node) => node.text(),
            OscImpact::Provision(provision) => provision.text(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::pipeline::journal::{ChangedUnit, CommandEntry, DropInChanges};
    use crate::agent::testing::{drop_in, inline_file, unit};
    use serde_json::json;

    fn journal_with(restart: &[&str]) -> Journal {
        let mut journal = Journal::done("sum");
        for name in restart {
            journal.units.changed.push(ChangedUnit {
                unit: unit(name),
                drop_ins_changes: DropInChanges::default(),
            });
            journal.units.commands.push(CommandEntry {
                name: name.to_string(),
                command: UnitCommand::Restart,
            });
        }
        journal
    }

    #[test]
    fn a_kubelet_restart_is_disruptive() {
        let mut journal = journal_with(&["kubelet.service"]);
        journal.units.changed[0].drop_ins_changes.changed = vec![drop_in("20-x.conf", "a")];
        let change = rollout::classify(&journal, &BTreeSet::new());
        let mut found = summarize(&journal, &change, &InPlaceUpdateFlags::default());
        found.secret = "gna-a".into();
        found.pool = "a".into();
        assert!(found.disruptive);
        assert_eq!(found.disruptive_because, ["restart kubelet.service"]);
        assert_eq!(
            found.text(),
            "node-agent secret gna-a (pool a): every node of the pool applies the change\n\
             files written: -\n\
             files deleted: -\n\
             units written (daemon-reload): kubelet.service (drop-ins written: 20-x.conf)\n\
             units restarted: kubelet.service\n\
             units stopped: -\n\
             units removed: -\n\
             containerd config: unchanged\n\
             disruptive: restart kubelet.service — goes through the disruptive rollout with its budget where the rollout is on; elsewhere every node applies it at once\n\
             in-place update: no\n"
        );
    }

    #[test]
    fn another_unit_restart_is_quiet_and_says_what_would_make_it_disruptive() {
        let mut journal = journal_with(&["app.service"]);
        journal
            .files
            .changed
            .push(inline_file("/etc/app.conf", "2"));
        let change = rollout::classify(&journal, &BTreeSet::new());
        let found = summarize(&journal, &change, &InPlaceUpdateFlags::default());
        assert!(!found.disruptive && !found.unchanged);
        assert_eq!(found.files.written, ["/etc/app.conf"]);
        assert_eq!(found.units.restarted, ["app.service"]);
        let text = found.text();
        assert!(
            text.contains(
                "\nquiet: no kubelet or containerd restart; the disruptive rollout does not hold it back\n"
            ),
            "{text}"
        );
        assert!(
            text.ends_with("note: a unit marked with node.extensions.gardener.cloud/disruptive-units would make it disruptive too; the preview does not know those marks\n"),
            "{text}"
        );
    }

    #[test]
    fn a_containerd_config_change_is_disruptive_and_stops_are_stops() {
        let mut journal = Journal::done("sum");
        journal.containerd.config_file_changed = true;
        journal.units.commands.push(CommandEntry {
            name: "old.service".into(),
            command: UnitCommand::Stop,
        });
        journal.units.deleted.push(unit("gone.service"));
        let change = rollout::classify(&journal, &BTreeSet::new());
        let found = summarize(&journal, &change, &InPlaceUpdateFlags::default());
        assert_eq!(
            found.disruptive_because,
            ["restart containerd.service (config)"]
        );
        assert_eq!(found.units.stopped, ["old.service"]);
        assert_eq!(found.units.removed, ["gone.service"]);
        assert!(found.units.restarted.is_empty());
    }

    #[test]
    fn nothing_to_do_is_unchanged() {
        let journal = Journal::done("sum");
        let mut found = summarize(&journal, &Change::Quiet, &InPlaceUpdateFlags::default());
        assert!(found.unchanged);
        found.checksum_changed = false;
        assert_eq!(
            found.text(),
            "unchanged: no file, no unit (the node-agent secret is the same: the nodes do nothing)\n"
        );
        // An in-place flag alone is not "unchanged".
        let flags = InPlaceUpdateFlags {
            operating_system: true,
            ..InPlaceUpdateFlags::default()
        };
        assert!(!summarize(&journal, &Change::Quiet, &flags).unchanged);
    }

    #[test]
    fn the_json_has_every_field() {
        let journal = journal_with(&["kubelet.service"]);
        let change = rollout::classify(&journal, &BTreeSet::new());
        let found = summarize(&journal, &change, &InPlaceUpdateFlags::default());
        let value = serde_json::to_value(OscImpact::Reconcile(Box::new(found))).unwrap();
        assert_eq!(
            value,
            json!({
                "purpose": "reconcile", "namespace": "", "name": "", "secret": "", "pool": "",
                "checksumChanged": true, "unchanged": false,
                "files": {"written": [], "deleted": []},
                "units": {"written": ["kubelet.service"], "dropIns": {},
                          "restarted": ["kubelet.service"], "stopped": [], "removed": []},
                "containerdConfigChanged": false, "registriesRemoved": [],
                "disruptive": true, "disruptiveBecause": ["restart kubelet.service"],
                "inPlaceUpdate": false, "inPlaceUpdateBecause": [], "notes": [],
            })
        );
    }

    #[test]
    fn in_place_flags_are_named_with_their_versions() {
        let mut before = NodeOsc::default();
        before.spec.in_place_updates = Some(crate::api::operatingsystemconfig::InPlaceUpdates {
            operating_system_version: "13.1".into(),
            kubelet: "1.35.2".into(),
            credentials_rotation: None,
        });
        let mut after = before.clone();
        if let Some(spec) = after.spec.in_place_updates.as_mut() {
            spec.operating_system_version = "13.2".into();
            spec.kubelet = "1.36.0".into();
        }
        let flags = in_place::flags(Some(&before), &after, Some("13.1")).unwrap();
        assert_eq!(
            in_place_because(&flags, &before, &after),
            [
                "operating system version 13.1 → 13.2",
                "kubelet minor version 1.35.2 → 1.36.0"
            ]
        );
    }
}
