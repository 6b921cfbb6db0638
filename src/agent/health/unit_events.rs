//! The per-unit events gardener-node-agent emits for unit jobs (gardener
//! `pkg/nodeagent/dbus/dbus.go`: reasons `SystemDUnitStart`, `SystemDUnitStop`,
//! `SystemDUnitRestart`; note `processed <op> of unit <name>`, Warning with
//! ` failed with error <error>` appended), aggregated per apply (`docs/agent.md#events`):
//! one event per reason and type, listing the units, so a first apply that restarts 50 units
//! sends one `SystemDUnitRestart` event instead of 50. Pure.

use crate::api::operatingsystemconfig::UnitCommand;

use crate::agent::pipeline::apply::FailedJob;
use crate::agent::pipeline::journal::CommandEntry;

/// Reason of start jobs.
pub const REASON_START: &str = "SystemDUnitStart";
/// Reason of stop jobs.
pub const REASON_STOP: &str = "SystemDUnitStop";
/// Reason of restart jobs.
pub const REASON_RESTART: &str = "SystemDUnitRestart";
/// Longest note written (the events API allows 1 KiB).
const MAX_NOTE: usize = 1000;

/// One event to publish on the Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitEvent {
    /// Warning (a job failed) or Normal.
    pub warning: bool,
    /// One of the `REASON_*` constants.
    pub reason: &'static str,
    /// The note.
    pub note: String,
}

fn reason_and_operation(command: UnitCommand) -> (&'static str, &'static str) {
    match command {
        UnitCommand::Start => (REASON_START, "start"),
        UnitCommand::Stop => (REASON_STOP, "stop"),
        UnitCommand::Restart => (REASON_RESTART, "restart"),
    }
}

/// The events for the jobs of one apply: for each command, one Normal event naming the
/// units whose job succeeded (`processed restart of unit a.service` or `… of units a.service,
/// b.service`) and one Warning event with GNA's text for each failed unit, joined by `"; "`.
/// Notes longer than 1000 bytes end with `(+N more)`. Order: start, stop, restart; Normal
/// before Warning.
pub fn aggregate(done: &[CommandEntry], failed: &[FailedJob]) -> Vec<UnitEvent> {
    let mut events = Vec::new();
    for command in [UnitCommand::Start, UnitCommand::Stop, UnitCommand::Restart] {
        let (reason, operation) = reason_and_operation(command);
        let mut units: Vec<&str> = done
            .iter()
            .filter(|entry| entry.command == command)
            .map(|entry| entry.name.as_str())
            .collect();
        units.sort_unstable();
        units.dedup();
        if !units.is_empty() {
            let prefix = if units.len() == 1 {
                format!("processed {operation} of unit ")
            } else {
                format!("processed {operation} of units ")
            };
            events.push(UnitEvent {
                warning: false,
                reason,
                note: bounded(&prefix, &units, ", "),
            });
        }
        let mut failures: Vec<String> = failed
            .iter()
            .filter(|job| job.command == command)
            .map(|job| {
                format!(
                    "processed {operation} of unit {} failed with error {}",
                    job.unit, job.error
                )
            })
            .collect();
        failures.sort_unstable();
        if !failures.is_empty() {
            let parts: Vec<&str> = failures.iter().map(String::as_str).collect();
            events.push(UnitEvent {
                warning: true,
                reason,
                note: bounded("", &parts, "; "),
            });
        }
    }
    events
}

/// `prefix` and as many `parts` (joined by `separator`) as fit in [`MAX_NOTE`], then
/// `(+N more)` for the rest. A single part that is too long is cut.
fn bounded(prefix: &str, parts: &[&str], separator: &str) -> String {
    let mut note = prefix.to_string();
    for (index, part) in parts.iter().enumerate() {
        let rest = parts.len() - index;
        let tail = format!(" (+{rest} more)");
        let sep = if index == 0 { "" } else { separator };
        if index > 0 && note.len() + sep.len() + part.len() + tail.len() > MAX_NOTE {
            note.push_str(&tail);
            return note;
        }
        note.push_str(sep);
        note.push_str(part);
    }
    if note.len() > MAX_NOTE {
        let mut cut = MAX_NOTE;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, command: UnitCommand) -> CommandEntry {
        CommandEntry {
            name: name.into(),
            command,
        }
    }

    #[test]
    fn one_event_per_command_and_type_with_gnas_wording() {
        let done = [
            entry("b.service", UnitCommand::Restart),
            entry("a.service", UnitCommand::Restart),
            entry("s.service", UnitCommand::Stop),
        ];
        let failed = [FailedJob {
            unit: "c.service".into(),
            command: UnitCommand::Restart,
            error: "job failed".into(),
        }];
        assert_eq!(
            aggregate(&done, &failed),
            vec![
                UnitEvent {
                    warning: false,
                    reason: "SystemDUnitStop",
                    note: "processed stop of unit s.service".into()
                },
                UnitEvent {
                    warning: false,
                    reason: "SystemDUnitRestart",
                    note: "processed restart of units a.service, b.service".into()
                },
                UnitEvent {
                    warning: true,
                    reason: "SystemDUnitRestart",
                    note: "processed restart of unit c.service failed with error job failed".into()
                },
            ]
        );
        assert!(aggregate(&[], &[]).is_empty());
    }

    #[test]
    fn fifty_units_are_one_event_within_the_note_limit() {
        let done: Vec<CommandEntry> = (0..50)
            .map(|i| {
                entry(
                    &format!("unit-with-a-longish-name-{i:02}.service"),
                    UnitCommand::Restart,
                )
            })
            .collect();
        let events = aggregate(&done, &[]);
        assert_eq!(events.len(), 1);
        let note = &events[0].note;
        assert!(note.len() <= 1000, "{}", note.len());
        assert!(
            note.starts_with("processed restart of units unit-with-a-longish-name-00.service, ")
        );
        assert!(note.ends_with(" more)"), "{note}");
    }
}
