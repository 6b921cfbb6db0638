//! What a restart request asks for (pure). The annotation is written by whoever may patch the
//! Node, so every name is checked before it reaches systemd: names systemd would not accept,
//! services that change the machine's state (power off, reboot, halt, kexec, suspend,
//! hibernate, rescue or emergency mode) and instances of template units are refused, and at
//! most [`MAX_UNITS`] units are restarted per request (`docs/agent.md#restart-annotation`).

/// The Node annotation: comma-separated unit names, `.service` optional.
pub const ANNOTATION_RESTART_SERVICES: &str = "worker.gardener.cloud/restart-systemd-services";
/// Most units one request restarts (the agent's own unit not counted); further names are
/// ignored and reported.
pub const MAX_UNITS: usize = 50;
/// Longest unit name systemd accepts.
const MAX_UNIT_NAME: usize = 255;
/// Most names one log line or event note lists; the rest are counted.
pub const MAX_LISTED: usize = 10;
/// Most bytes of names one listing holds (an event note may have 1 KiB in all; a unit name up
/// to 255 bytes).
pub const MAX_LISTING: usize = 600;
/// Longest quote of an entry that is no unit name (it may be as long as the annotation).
const MAX_QUOTED: usize = 64;

/// Words of a service name (split at `-`, `_`, `.`) that mark a unit changing the machine's
/// state: systemd's `systemd-poweroff`, `-reboot`, `-soft-reboot`, `-halt`, `-kexec`,
/// `-suspend`, `-hibernate`, `-hybrid-sleep`, `-suspend-then-hibernate`, `-sysupdate-reboot`
/// and the like of distributions or vendors.
const MACHINE_STATE_WORDS: &[&str] = &[
    "poweroff",
    "reboot",
    "halt",
    "kexec",
    "shutdown",
    "suspend",
    "hibernate",
    "sleep",
];
/// Services of systemd that end normal operation or open a root shell on a console.
const MACHINE_STATE_UNITS: &[&str] = &["rescue", "emergency", "debug-shell", "systemd-exit"];

/// The units one annotation value names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestartRequest {
    /// Units to restart now, in the order named, each once, at most [`MAX_UNITS`].
    pub units: Vec<String>,
    /// The agent's own unit is named: restarted last.
    pub own_unit: bool,
    /// Entries that are no unit name systemd would accept (quoted as given, control
    /// characters escaped, cut at 64 characters).
    pub invalid: Vec<String>,
    /// Units that would change the machine's state ([`Verdict::MachineState`]).
    pub machine_state: Vec<String>,
    /// Instances of template units ([`Verdict::Template`]).
    pub templates: Vec<String>,
    /// Units beyond [`MAX_UNITS`], not restarted.
    pub ignored: Vec<String>,
}

/// What the agent does with one named service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Restart it.
    Restart,
    /// Not a name systemd would accept.
    Invalid,
    /// It would power off, reboot, halt, kexec, suspend or hibernate the machine, or take it
    /// to rescue or emergency mode: one request would stop the node (and, with GNA's order,
    /// do it again after every boot).
    MachineState,
    /// A template or an instance of one (`name@instance.service`): systemd makes an instance
    /// of any name on demand, so `modprobe@<module>` loads a kernel module and `user@<uid>`
    /// starts a user's service manager; nothing an operator restarts.
    Template,
}

/// The verdict on `unit` (with its `.service` suffix).
pub fn judge(unit: &str) -> Verdict {
    if !is_unit_name(unit) {
        return Verdict::Invalid;
    }
    let stem = unit.strip_suffix(".service").unwrap_or(unit);
    if stem.contains('@') {
        return Verdict::Template;
    }
    let lowered = stem.to_ascii_lowercase();
    let changes_state = MACHINE_STATE_UNITS.contains(&lowered.as_str())
        || lowered
            .split(['-', '_', '.'])
            .any(|word| MACHINE_STATE_WORDS.contains(&word));
    if changes_state {
        Verdict::MachineState
    } else {
        Verdict::Restart
    }
}

/// Reads `value` for an agent running as `own_unit`. Entries are trimmed and empty ones
/// skipped (GNA passes `" a"` on as `" a.service"`, which systemd refuses); a name without a
/// suffix gets `.service`, as in GNA.
pub fn parse(value: &str, own_unit: &str) -> RestartRequest {
    let mut request = RestartRequest::default();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let unit = if entry.ends_with(".service") {
            entry.to_string()
        } else {
            format!("{entry}.service")
        };
        let list = match judge(&unit) {
            Verdict::Invalid => {
                push_once(&mut request.invalid, quote(entry));
                continue;
            }
            Verdict::MachineState => &mut request.machine_state,
            Verdict::Template => &mut request.templates,
            Verdict::Restart if unit == own_unit => {
                request.own_unit = true;
                continue;
            }
            Verdict::Restart if request.units.len() < MAX_UNITS => &mut request.units,
            Verdict::Restart if request.units.contains(&unit) => continue,
            Verdict::Restart => &mut request.ignored,
        };
        push_once(list, unit);
    }
    request
}

/// `names` for a log line or an event note: at most [`MAX_LISTED`] names in at most
/// [`MAX_LISTING`] bytes (the first always), then how many more.
pub fn listing(names: &[String]) -> String {
    let mut text = String::new();
    let mut listed = 0;
    for name in names.iter().take(MAX_LISTED) {
        if listed > 0 && text.len() + 2 + name.len() > MAX_LISTING {
            break;
        }
        if listed > 0 {
            text.push_str(", ");
        }
        text.push_str(name);
        listed += 1;
    }
    if names.len() > listed {
        text.push_str(&format!(" (and {} more)", names.len() - listed));
    }
    text
}

/// The Warning notes for what a request does not restart, one per kind (empty kinds left
/// out), each listing at most [`MAX_LISTED`] names.
pub fn refusal_notes(request: &RestartRequest) -> Vec<String> {
    let mut notes = Vec::new();
    let mut note = |names: &[String], why: String| {
        if !names.is_empty() {
            notes.push(format!("not restarted, {why}: {}", listing(names)));
        }
    };
    note(&request.invalid, "not a unit name".into());
    note(
        &request.machine_state,
        "would power off, reboot, halt, suspend or rescue the machine".into(),
    );
    note(
        &request.templates,
        "an instance of a template unit (made of any name on demand)".into(),
    );
    note(
        &request.ignored,
        format!(
            "{} more than the {MAX_UNITS} units one request may name",
            request.ignored.len()
        ),
    );
    notes
}

fn push_once(list: &mut Vec<String>, name: String) {
    if !list.contains(&name) {
        list.push(name);
    }
}

/// An entry as it may be quoted: control characters escaped, at most [`MAX_QUOTED`]
/// characters.
fn quote(entry: &str) -> String {
    let escaped = crate::printable::escape_controls(entry);
    match escaped.char_indices().nth(MAX_QUOTED) {
        Some((cut, _)) => format!("{}…", &escaped[..cut]),
        None => escaped.into_owned(),
    }
}

/// A service unit name systemd accepts: ASCII letters, digits and `:-_.\@`, not starting
/// with `.` or `-`, at most 255 bytes.
fn is_unit_name(unit: &str) -> bool {
    let stem = unit.strip_suffix(".service").unwrap_or_default();
    !stem.is_empty()
        && unit.len() <= MAX_UNIT_NAME
        && !stem.starts_with(['.', '-'])
        && unit
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ":-_.\\@".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN: &str = "gardener-node-agent.service";

    #[test]
    fn names_get_their_suffix_and_the_own_unit_goes_last() {
        let request = parse(
            "kubelet, containerd.service,kubelet,,gardener-node-agent",
            OWN,
        );
        assert_eq!(request.units, ["kubelet.service", "containerd.service"]);
        assert!(request.own_unit);
        assert!(request.invalid.is_empty());
        assert_eq!(parse("", OWN), RestartRequest::default());
    }

    #[test]
    fn what_systemd_would_not_take_is_refused() {
        let long = "a".repeat(300);
        let request = parse(
            &format!("../etc/x,-flag,a b,x\u{1b}[2J,{long},.service,ok"),
            OWN,
        );
        assert_eq!(request.units, ["ok.service"]);
        assert_eq!(request.invalid.len(), 6, "{:?}", request.invalid);
        assert!(request.invalid.iter().all(|r| !r.contains('\u{1b}')));
        // A long entry is quoted, not copied.
        assert!(request.invalid.contains(&format!("{}…", "a".repeat(64))));
        assert!(!request.own_unit);
    }

    /// Issue #41 item 4: GNA restarts (starts) whatever is named; `systemd-poweroff` powered
    /// the machine off, `modprobe@…` and `user@0` were started.
    #[test]
    fn units_that_stop_the_machine_and_template_instances_are_refused() {
        for unit in [
            "systemd-poweroff.service",
            "systemd-reboot.service",
            "systemd-halt.service",
            "systemd-kexec.service",
            "systemd-soft-reboot.service",
            "systemd-suspend.service",
            "systemd-hibernate.service",
            "systemd-hybrid-sleep.service",
            "systemd-suspend-then-hibernate.service",
            "systemd-sysupdate-reboot.service",
            "systemd-exit.service",
            "rescue.service",
            "emergency.service",
            "debug-shell.service",
            "Systemd-PowerOff.service",
        ] {
            assert_eq!(judge(unit), Verdict::MachineState, "{unit}");
        }
        for unit in [
            "user@0.service",
            "modprobe@dummy.service",
            "getty@tty1.service",
            "systemd-fsck@dev-sda1.service",
            "user@.service",
        ] {
            assert_eq!(judge(unit), Verdict::Template, "{unit}");
        }
        for unit in [
            "kubelet.service",
            "containerd.service",
            "dbus.service",
            "systemd-journald.service",
            "systemd-resolved.service",
            "systemd-logind.service",
            "sshd.service",
            "halted-jobs-cleaner2.service",
        ] {
            assert_eq!(judge(unit), Verdict::Restart, "{unit}");
        }
        let request = parse("systemd-poweroff, app, user@0, systemd-reboot.service", OWN);
        assert_eq!(request.units, ["app.service"]);
        assert_eq!(
            request.machine_state,
            ["systemd-poweroff.service", "systemd-reboot.service"]
        );
        assert_eq!(request.templates, ["user@0.service"]);
        assert_eq!(
            refusal_notes(&request),
            [
                "not restarted, would power off, reboot, halt, suspend or rescue the machine: systemd-poweroff.service, systemd-reboot.service",
                "not restarted, an instance of a template unit (made of any name on demand): user@0.service",
            ]
        );
    }

    /// Issue #41 item 7: 1,000 names were all tried, and logged in one 49 KB line.
    #[test]
    fn at_most_max_units_are_restarted_and_listings_are_bounded() {
        let value = (0..1000)
            .map(|n| format!("unit-{n}"))
            .collect::<Vec<_>>()
            .join(",");
        // Repeats of restarted names are neither restarted twice nor counted as ignored.
        let request = parse(&format!("{value},unit-0,gardener-node-agent"), OWN);
        assert_eq!(request.units.len(), MAX_UNITS);
        assert_eq!(request.units[0], "unit-0.service");
        assert_eq!(request.ignored.len(), 1000 - MAX_UNITS);
        assert_eq!(request.ignored[0], format!("unit-{MAX_UNITS}.service"));
        assert!(request.own_unit);
        let notes = refusal_notes(&request);
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].starts_with(
                "not restarted, 950 more than the 50 units one request may name: unit-50.service, "
            ),
            "{}",
            notes[0]
        );
        assert!(
            notes[0].ends_with("unit-59.service (and 940 more)"),
            "{}",
            notes[0]
        );
        assert!(listing(&request.units).len() < 300);
        assert_eq!(listing(&[]), "");
        // Long names: fewer listed, the count still said (an event note has 1 KiB).
        let long: Vec<String> = (0..20)
            .map(|n| format!("{n:02}-{}.service", "x".repeat(240)))
            .collect();
        let text = listing(&long);
        assert!(text.len() < 700, "{}", text.len());
        assert!(text.ends_with(" (and 18 more)"), "{text}");
        let one = listing(&long[..1]);
        assert_eq!(one, long[0]);
    }
}
