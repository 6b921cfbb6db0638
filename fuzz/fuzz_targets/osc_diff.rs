//! The agent's OSC diff (`agent::pipeline::changes::compute`): what an apply writes, deletes, restarts.
//!
//! Input: bytes that drive a generator of two OSCs (the last applied one and the new one)
//! from small pools of paths, unit names, contents and flags, so that the two often share
//! files and units and differ in details. Both go through the agent's decoder and
//! validation, as on a node. Properties:
//! - diffing an OSC against itself leaves no work (no file, unit, command, deletion, no
//!   containerd restart);
//! - without a last-applied OSC, every file and unit is work;
//! - diffing old → new: every changed file and unit is in the new OSC; exactly the paths and
//!   units only in the old one are deleted; nothing is both changed and deleted; commands are
//!   only for changed units; an unchanged file (same everything) is never rewritten;
//! - the journal (written to disk after every step, so a killed agent resumes) survives its
//!   own YAML round trip.

#![no_main]

use std::collections::BTreeSet;

use arbitrary::{Result, Unstructured};
use gardener_extension_node::agent::pipeline::changes::{Side, compute};
use gardener_extension_node::agent::pipeline::journal::Journal;
use gardener_extension_node::agent::pipeline::osc::{self, NodeOsc};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

const PATHS: &[&str] = &["/etc/a", "/etc/b", "/etc/c/d", "/var/lib/e", "/opt/bin/f"];
const UNITS: &[&str] = &["a.service", "b.service", "c.timer", "kubelet.service"];
const DROP_INS: &[&str] = &["10-a.conf", "20-b.conf"];
const CONTENTS: &[&str] = &["", "one\n", "two\n", "$HOME `date`\n"];
const COMMANDS: &[Option<&str>] = &[None, Some("start"), Some("restart"), Some("stop")];

fn pick<'a, T>(u: &mut Unstructured<'_>, from: &'a [T]) -> Result<&'a T> {
    u.choose(from)
}

fn file(u: &mut Unstructured<'_>) -> Result<Value> {
    let path = *pick(u, PATHS)?;
    let content = *pick(u, CONTENTS)?;
    let mut file = json!({"path": path, "content": {"inline": {"encoding": "", "data": content}}});
    if u.arbitrary()? {
        file["content"] = json!({"inline": {"encoding": "b64", "data": base64_of(content)}});
    }
    if u.arbitrary()? {
        file["permissions"] = json!(*pick(u, &[0o600u32, 0o644, 0o755])?);
    }
    Ok(file)
}

fn base64_of(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn unit(u: &mut Unstructured<'_>) -> Result<Value> {
    let mut unit = json!({"name": *pick(u, UNITS)?});
    if let Some(command) = *pick(u, COMMANDS)? {
        unit["command"] = json!(command);
    }
    if u.arbitrary()? {
        unit["enable"] = json!(u.arbitrary::<bool>()?);
    }
    if u.arbitrary()? {
        unit["content"] = json!(format!(
            "[Service]\nExecStart=/bin/{}\n",
            pick(u, CONTENTS)?.trim()
        ));
    }
    let drop_ins: Vec<Value> = (0..u.int_in_range(0..=2)?)
        .map(|_| Ok(json!({"name": *pick(u, DROP_INS)?, "content": *pick(u, CONTENTS)?})))
        .collect::<Result<_>>()?;
    if !drop_ins.is_empty() {
        unit["dropIns"] = json!(drop_ins);
    }
    if u.arbitrary()? {
        unit["filePaths"] = json!([*pick(u, PATHS)?]);
    }
    Ok(unit)
}

fn osc(u: &mut Unstructured<'_>) -> Result<Value> {
    let files: Vec<Value> = (0..u.int_in_range(0..=4)?)
        .map(|_| file(u))
        .collect::<Result<_>>()?;
    let units: Vec<Value> = (0..u.int_in_range(0..=3)?)
        .map(|_| unit(u))
        .collect::<Result<_>>()?;
    let extension_files: Vec<Value> = (0..u.int_in_range(0..=1)?)
        .map(|_| file(u))
        .collect::<Result<_>>()?;
    let mut spec = json!({"files": files, "units": units});
    if u.arbitrary()? {
        spec["criConfig"] = json!({
            "name": "containerd",
            "cgroupDriver": *pick(u, &["systemd", "cgroupfs"])?,
            "containerd": {"sandboxImage": *pick(u, &["pause:3.9", "pause:3.10"])?}
        });
    }
    Ok(json!({"spec": spec, "status": {"extensionFiles": extension_files}}))
}

/// Decodes and validates as the agent does; `None` when it refuses.
fn accepted(value: &Value) -> Option<NodeOsc> {
    let text = serde_norway::to_string(value).ok()?;
    let decoded = osc::decode(text.as_bytes()).ok()?;
    osc::validate(&decoded).ok()?;
    Some(decoded)
}

/// The paths of owned (journal) or borrowed (merged view) files.
fn paths<F: std::borrow::Borrow<gardener_extension_node::api::operatingsystemconfig::File>>(
    files: &[F],
) -> BTreeSet<String> {
    files.iter().map(|f| f.borrow().path.clone()).collect()
}

fn round_trip(journal: &Journal) {
    let text = journal.render().expect("the journal renders");
    assert_eq!(
        Journal::parse(&text).as_ref(),
        Some(journal),
        "journal round trip\n{text}"
    );
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let (Ok(old), Ok(new)) = (osc(&mut u), osc(&mut u)) else {
        return;
    };
    let (Some(old), Some(new)) = (accepted(&old), accepted(&new)) else {
        return;
    };
    let host = "node-0";
    let (old_effective, new_effective) = (osc::effective(&old, host), osc::effective(&new, host));
    let old_side = Side {
        osc: &old,
        effective: &old_effective,
    };
    let new_side = Side {
        osc: &new,
        effective: &new_effective,
    };

    let same = compute(Some(new_side), new_side, "sum");
    assert!(
        same.files.changed.is_empty() && same.files.deleted.is_empty(),
        "{same:?}"
    );
    assert!(
        same.units.changed.is_empty() && same.units.deleted.is_empty(),
        "{same:?}"
    );
    assert!(same.units.commands.is_empty(), "{same:?}");
    assert!(!same.containerd.config_file_changed, "{same:?}");
    round_trip(&same);

    let fresh = compute(None, new_side, "sum");
    assert_eq!(paths(&fresh.files.changed), paths(&new_effective.files));
    let fresh_units: BTreeSet<&str> = fresh
        .units
        .changed
        .iter()
        .map(|c| c.unit.name.as_str())
        .collect();
    let new_units: BTreeSet<&str> = new_effective
        .units
        .iter()
        .map(|u| u.name.as_str())
        .collect();
    assert_eq!(fresh_units, new_units);
    round_trip(&fresh);

    let journal = compute(Some(old_side), new_side, "sum");
    let old_paths = paths(&old_effective.files);
    let new_paths = paths(&new_effective.files);
    let changed = paths(&journal.files.changed);
    let deleted = paths(&journal.files.deleted);
    assert!(changed.is_subset(&new_paths), "{journal:?}");
    assert_eq!(deleted, &old_paths - &new_paths, "{journal:?}");
    assert!(changed.is_disjoint(&deleted), "{journal:?}");
    for file in &new_effective.files {
        let unchanged = old_effective
            .files
            .iter()
            .filter(|f| f.path == file.path)
            .count()
            == 1
            && new_effective
                .files
                .iter()
                .filter(|f| f.path == file.path)
                .count()
                == 1
            && old_effective.files.iter().any(|f| f == file);
        if unchanged {
            assert!(
                !changed.contains(&file.path),
                "unchanged {} rewritten: {journal:?}",
                file.path
            );
        }
    }
    let old_units: BTreeSet<&str> = old_effective
        .units
        .iter()
        .map(|u| u.name.as_str())
        .collect();
    let changed_units: BTreeSet<&str> = journal
        .units
        .changed
        .iter()
        .map(|c| c.unit.name.as_str())
        .collect();
    let deleted_units: BTreeSet<&str> = journal
        .units
        .deleted
        .iter()
        .map(|u| u.name.as_str())
        .collect();
    assert!(changed_units.is_subset(&new_units), "{journal:?}");
    assert_eq!(deleted_units, &old_units - &new_units, "{journal:?}");
    for command in &journal.units.commands {
        assert!(changed_units.contains(command.name.as_str()), "{journal:?}");
    }
    round_trip(&journal);
});
