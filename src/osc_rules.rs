//! The rules an OperatingSystemConfig's file paths and unit names follow on a node (pure).
//!
//! One set of rules for both sides of the hand-over: the operator refuses an OSC that breaks
//! them before it ships anything (`controllers::operatingsystemconfig::validate`, the
//! provision renderer), and the node agent refuses it before it changes anything on disk
//! (`agent::pipeline::osc::validate`). Keeping them in one place is what guarantees that nothing the
//! operator accepts is refused on the nodes (the `osc_yaml` fuzz target checks it).

/// Unit name suffixes systemd knows.
pub const UNIT_SUFFIXES: [&str; 11] = [
    ".service",
    ".socket",
    ".timer",
    ".path",
    ".mount",
    ".automount",
    ".swap",
    ".target",
    ".slice",
    ".scope",
    ".device",
];

/// Why `path` is not an absolute, normalised path of a file, if it is not: it must start
/// with `/`, not end with `/`, and have no empty, `.` or `..` component and no control
/// character (NUL included).
pub fn path_problem(path: &str) -> Option<&'static str> {
    if !path.starts_with('/') {
        return Some("must be absolute");
    }
    if path.ends_with('/') {
        return Some("must name a file, not end with '/'");
    }
    if path.chars().any(char::is_control) {
        return Some("must not contain control characters");
    }
    // Path::components would hide `.` and repeated slashes; look at the raw segments.
    path.split('/').skip(1).find_map(|segment| match segment {
        "" => Some("must not contain an empty component ('//')"),
        "." | ".." => Some("must not contain '.' or '..' components"),
        _ => None,
    })
}

/// Why `name` is not a plain file name (a unit's drop-in), if it is not.
pub fn file_name_problem(name: &str) -> Option<&'static str> {
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.chars().any(char::is_control);
    (!plain).then_some("must be a plain file name (no '/', not '.' or '..', no control characters)")
}

/// Why `name` is not a unit name (a plain file name with a suffix systemd knows), if it is
/// not.
pub fn unit_name_problem(name: &str) -> Option<&'static str> {
    file_name_problem(name).or_else(|| {
        let known = UNIT_SUFFIXES
            .iter()
            .any(|suffix| name.len() > suffix.len() && name.ends_with(suffix));
        (!known).then_some(
            "needs a systemd unit suffix (.service, .socket, .timer, .path, .mount, .automount, .swap, .target, .slice, .scope, .device)",
        )
    })
}

/// What a checked name names: a unit or one of its drop-ins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameKind {
    /// A unit: a plain file name with a systemd suffix.
    Unit,
    /// A drop-in of a unit: a plain file name.
    DropIn,
}

impl NameKind {
    /// `unit` or `drop-in`, as error messages name it.
    pub fn as_str(self) -> &'static str {
        match self {
            NameKind::Unit => "unit",
            NameKind::DropIn => "drop-in",
        }
    }

    /// Why `name` is not a valid name of this kind, if it is not.
    pub fn problem(self, name: &str) -> Option<&'static str> {
        match self {
            NameKind::Unit => unit_name_problem(name),
            NameKind::DropIn => file_name_problem(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_normalised_paths_pass() {
        for good in [
            "/etc/a",
            "/a",
            "/opt/bin/x.y",
            "/etc/..hidden",
            "/etc/a.",
            "/e t c/a",
        ] {
            assert_eq!(path_problem(good), None, "{good}");
        }
    }

    #[test]
    fn every_other_path_is_refused_with_its_reason() {
        let cases = [
            ("", "must be absolute"),
            ("etc/a", "must be absolute"),
            ("/", "must name a file, not end with '/'"),
            ("/etc/", "must name a file, not end with '/'"),
            ("/etc//a", "must not contain an empty component ('//')"),
            ("/etc/./a", "must not contain '.' or '..' components"),
            ("/etc/../passwd", "must not contain '.' or '..' components"),
            ("/..", "must not contain '.' or '..' components"),
            ("/etc/a\0b", "must not contain control characters"),
            ("/etc/a\nb", "must not contain control characters"),
        ];
        for (bad, reason) in cases {
            assert_eq!(path_problem(bad), Some(reason), "{bad:?}");
        }
    }

    #[test]
    fn names() {
        assert_eq!(file_name_problem("10-limits.conf"), None);
        for bad in ["", ".", "..", "../x.conf", "a/b", "a\0b", "a\tb"] {
            assert!(file_name_problem(bad).is_some(), "{bad:?}");
            assert!(unit_name_problem(bad).is_some(), "{bad:?}");
        }
        for good in ["kubelet.service", "a.timer", "var-lib.mount", "x.device"] {
            assert_eq!(unit_name_problem(good), None, "{good}");
        }
        for bad in ["kubelet", ".service", "kubelet.conf", "kubelet.service.d"] {
            assert!(
                unit_name_problem(bad).is_some_and(|reason| reason.contains("suffix")),
                "{bad}"
            );
        }
    }
}
