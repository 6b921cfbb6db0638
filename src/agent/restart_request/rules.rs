//! What a restart request asks for (pure). The annotation is written by whoever may patch the
//! Node, so every name is checked before it reaches systemd.

/// The Node annotation: comma-separated unit names, `.service` optional.
pub const ANNOTATION_RESTART_SERVICES: &str = "worker.gardener.cloud/restart-systemd-services";
/// Longest unit name systemd accepts.
const MAX_UNIT_NAME: usize = 255;

/// The units one annotation value names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestartRequest {
    /// Units to restart now, in the order named, each once.
    pub units: Vec<String>,
    /// The agent's own unit is named: restarted last, after the annotation is removed.
    pub own_unit: bool,
    /// Entries that are no unit name systemd would accept (quoted as given, control
    /// characters escaped).
    pub refused: Vec<String>,
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
        if !is_unit_name(&unit) {
            request
                .refused
                .push(crate::printable::escape_controls(entry).into_owned());
        } else if unit == own_unit {
            request.own_unit = true;
        } else if !request.units.contains(&unit) {
            request.units.push(unit);
        }
    }
    request
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
        assert!(request.refused.is_empty());
        assert_eq!(parse("", OWN), RestartRequest::default());
    }

    #[test]
    fn what_systemd_would_not_take_is_refused() {
        let long = "a".repeat(300);
        let request = parse(
            &format!("../etc/x,-flag,a b,x\u{1b}[2J,{long},.service,ok@1"),
            OWN,
        );
        assert_eq!(request.units, ["ok@1.service"]);
        assert_eq!(request.refused.len(), 6, "{:?}", request.refused);
        assert!(request.refused.iter().all(|r| !r.contains('\u{1b}')));
        assert!(!request.own_unit);
    }
}
