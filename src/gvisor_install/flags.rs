//! runsc flags: where they come from, how they are parsed and validated, and the
//! `runsc.toml` they render to. Pure.
//!
//! **Canonical form** (what the operator passes in `GVISOR_RUNSC_FLAGS`): one `key=value`
//! per line, sorted by key, no quotes, no spaces around `=`, e.g.
//!
//! ```text
//! debug=true
//! debug-log=/var/log/runsc/%ID%/gvisor-%COMMAND%.log
//! net-raw=true
//! ```
//!
//! Also accepted, line by line: the TOML form of `runsc.toml` and of upstream's rendered
//! ConfigMap, `key = "value"` (a value starting with `"` or `'` is read as a TOML string).
//! Blank lines and lines starting with `#` are ignored. Anything else is rejected with the
//! line number and the reason, never the line's text (a `--runsc-flags` path may name a file
//! that holds secrets): a line without `=`, a key that is not lowercase letters, digits and
//! dashes, an empty value, an unquoted value with quotes or backslashes, a control character,
//! or a key given twice. Only keys are echoed, and only once they are known to be lowercase
//! letters, digits and dashes. Each flag must then pass the operator's allow-list,
//! [`check_runsc_flag`] (one function for both), so a value such as `true,debug=true` or an
//! unknown flag fails the run before any host file changes. Input order does not matter: keys are always rendered sorted, so the
//! same flags give the same bytes (upstream rendered a Go map in random order and restarted
//! containerd for nothing).
//!
//! **Profiles** ([`Profiles`]): the lines before any header are the default profile's (runtime
//! handler `runsc`); a line `[name]` starts the flags of profile `name` (handler
//! `runsc-<name>`, its own runsc config file), `name` being lowercase letters, digits and
//! dashes, at most 56 characters, starting and ending with a letter or digit. `[runsc_config]`
//! (the table header of runsc.toml) continues the default profile. So a text without headers
//! is what it was before profiles came.
//!
//! **File or inline** (`--runsc-flags` / `GVISOR_RUNSC_FLAGS`): a value containing `=` or a
//! line starting with `[` is the flags themselves (every flag line has a `=`, every profile
//! a header); any other value is the path of a file holding them; an empty value means no
//! flags.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::str::FromStr;

use toml_edit::Value;

use crate::api::gvisor::{FlagRejection, check_runsc_flag};

/// The table runsc reads its flags from in the file `ConfigPath` points to.
pub const RUNSC_CONFIG_TABLE: &str = "runsc_config";

/// Why runsc flags were rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagsError {
    /// A line that is not a flag. The line itself is not kept: it may come from a file
    /// that is not a flags file at all (a password hash, say), and this message reaches the
    /// pod's termination message.
    #[error("line {line}: {reason}; write one `key=value` per line")]
    Malformed {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A flag the allow-list does not accept, or a value it refuses.
    #[error("line {line}: flag `{key}` is not accepted: {reason}")]
    NotAllowed {
        /// 1-based line number.
        line: usize,
        /// The key.
        key: String,
        /// Why, and what is accepted.
        reason: String,
    },
    /// The same key twice.
    #[error("line {line}: flag `{key}` is given twice; keep one")]
    Duplicate {
        /// 1-based line number of the second occurrence.
        line: usize,
        /// The key.
        key: String,
    },
    /// A `[...]` line that is not a profile header. The name is not echoed.
    #[error(
        "line {line}: a profile header is `[name]`, the name lowercase letters, digits and dashes, at most {MAX_PROFILE_NAME} characters, starting and ending with a letter or digit"
    )]
    InvalidProfile {
        /// 1-based line number.
        line: usize,
    },
    /// The same profile twice.
    #[error("line {line}: profile `{name}` is given twice; keep one")]
    DuplicateProfile {
        /// 1-based line number of the second header.
        line: usize,
        /// The profile.
        name: String,
    },
}

/// The longest profile name (`gvisor-<name>` is a RuntimeClass name, at most 63 characters).
pub const MAX_PROFILE_NAME: usize = 56;

/// Whether `name` is a valid profile name (see the module docs); the installer builds file
/// names and handler names from it only then.
pub fn valid_profile_name(name: &str) -> bool {
    let alphanumeric = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !name.is_empty()
        && name.len() <= MAX_PROFILE_NAME
        && name.chars().all(|c| alphanumeric(c) || c == '-')
        && name.starts_with(alphanumeric)
        && name.ends_with(alphanumeric)
}

/// The flags of every profile: the default one and the named ones, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Profiles {
    /// The default profile (handler `runsc`).
    pub default: RunscFlags,
    /// The named profiles.
    pub named: BTreeMap<String, RunscFlags>,
}

impl Profiles {
    /// Parses flags with profile headers (see the module docs).
    pub fn parse(text: &str) -> Result<Self, FlagsError> {
        let mut profiles = Profiles::default();
        let mut section: Option<String> = None;
        let mut lines: Vec<(usize, &str)> = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let trimmed = raw.trim();
            let Some(header) = trimmed.strip_prefix('[') else {
                lines.push((line, raw));
                continue;
            };
            profiles.close(section.take(), &lines)?;
            lines.clear();
            let name = header
                .strip_suffix(']')
                .ok_or(FlagsError::InvalidProfile { line })?;
            if name == RUNSC_CONFIG_TABLE && profiles.named.is_empty() {
                continue;
            }
            if !valid_profile_name(name) {
                return Err(FlagsError::InvalidProfile { line });
            }
            if profiles.named.contains_key(name) {
                return Err(FlagsError::DuplicateProfile {
                    line,
                    name: name.to_string(),
                });
            }
            profiles
                .named
                .insert(name.to_string(), RunscFlags::default());
            section = Some(name.to_string());
        }
        profiles.close(section, &lines)?;
        Ok(profiles)
    }

    /// Parses `lines` into the flags of `section` (`None`: the default profile, which may
    /// have lines before and after a `[runsc_config]` header).
    fn close(
        &mut self,
        section: Option<String>,
        lines: &[(usize, &str)],
    ) -> Result<(), FlagsError> {
        let parsed = RunscFlags::parse_lines(lines.iter().copied())?;
        let flags = match section {
            None => &mut self.default,
            Some(name) => self.named.entry(name).or_default(),
        };
        for (key, value) in parsed.0 {
            let line = lines.first().map_or(1, |(line, _)| *line);
            if flags.0.insert(key.clone(), value).is_some() {
                return Err(FlagsError::Duplicate { line, key });
            }
        }
        Ok(())
    }

    /// Every profile: `None` for the default one, then the named ones by name.
    pub fn iter(&self) -> impl Iterator<Item = (Option<&str>, &RunscFlags)> {
        std::iter::once((None, &self.default)).chain(
            self.named
                .iter()
                .map(|(name, flags)| (Some(name.as_str()), flags)),
        )
    }
}

/// Where the flags come from, decided from the flag's value alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlagsSource {
    /// Empty value: no flags.
    None,
    /// The value holds `=`: it is the flags.
    Inline(String),
    /// No `=`: the path of a file with the flags.
    File(PathBuf),
}

impl FlagsSource {
    /// Classifies a `--runsc-flags` value (see the module docs).
    pub fn from_arg(value: &str) -> Self {
        let trimmed = value.trim();
        if trimmed.is_empty() {
            Self::None
        } else if trimmed.contains('=') || trimmed.lines().any(|l| l.trim().starts_with('[')) {
            Self::Inline(value.to_string())
        } else {
            Self::File(PathBuf::from(trimmed))
        }
    }
}

/// Validated runsc flags, ordered by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunscFlags(BTreeMap<String, String>);

impl RunscFlags {
    /// Parses flags in either accepted form (see the module docs), without profile headers.
    pub fn parse(text: &str) -> Result<Self, FlagsError> {
        Self::parse_lines(
            text.lines()
                .enumerate()
                .map(|(index, raw)| (index + 1, raw)),
        )
    }

    /// Parses numbered lines (1-based numbers, kept for the messages).
    fn parse_lines<'a>(lines: impl Iterator<Item = (usize, &'a str)>) -> Result<Self, FlagsError> {
        let mut flags = BTreeMap::new();
        for (line, raw) in lines {
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let malformed = |reason| FlagsError::Malformed { line, reason };
            let (key, value) = trimmed
                .split_once('=')
                .ok_or_else(|| malformed("expected `key=value`"))?;
            let key = key.trim();
            if !valid_key(key) {
                return Err(malformed(
                    "flag names are lowercase letters, digits and dashes",
                ));
            }
            let value = parse_value(value.trim()).map_err(malformed)?;
            let value = check_runsc_flag(key, &value).map_err(|rejection| {
                FlagsError::NotAllowed {
                    line,
                    key: key.to_string(),
                    reason: match rejection {
                        FlagRejection::Unknown => "unknown flag; accepted: debug, debug-log, net-raw, nvproxy, panic-signal, platform".to_string(),
                        FlagRejection::InvalidValue { expected } => format!("expected {expected}"),
                    },
                }
            })?;
            if flags.insert(key.to_string(), value).is_some() {
                return Err(FlagsError::Duplicate {
                    line,
                    key: key.to_string(),
                });
            }
        }
        Ok(Self(flags))
    }

    /// The flags in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// True when there are no flags.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The canonical `key=value` lines, sorted (what the operator should pass).
    pub fn to_canonical(&self) -> String {
        self.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
    }

    /// The content of `runsc.toml`: `[runsc_config]` and one `key = "value"` line per flag
    /// in key order. Values are always strings (runsc parses an unquoted number as int64
    /// and fails; upstream's fix b4980786).
    pub fn render_runsc_toml(&self) -> String {
        let mut text = format!("[{RUNSC_CONFIG_TABLE}]\n");
        for (key, value) in self.iter() {
            text.push_str(&format!("{key} = {}\n", Value::from(value)));
        }
        text
    }

    /// [`Self::render_runsc_toml`] for the shim of an installed version: `binary_name`, the
    /// host path of that version's `runsc`, first (the shim runs it instead of looking
    /// `runsc` up on its `PATH`; see [`super::versions`]).
    pub fn render_shim_config(&self, binary_name: &str) -> String {
        format!(
            "binary_name = {}\n\n{}",
            Value::from(binary_name),
            self.render_runsc_toml()
        )
    }
}

fn valid_key(key: &str) -> bool {
    key.chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

fn parse_value(raw: &str) -> Result<String, &'static str> {
    let value = if raw.starts_with('"') || raw.starts_with('\'') {
        match Value::from_str(raw) {
            Ok(Value::String(string)) => string.into_value(),
            _ => return Err("the quoted value is not one valid TOML string"),
        }
    } else {
        if raw.contains(['"', '\'', '\\']) {
            return Err("an unquoted value must not contain quotes or backslashes");
        }
        raw.to_string()
    };
    if value.is_empty() {
        return Err("the value is empty");
    }
    if value.chars().any(char::is_control) {
        return Err("the value contains a control character");
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(text: &str) -> Vec<(String, String)> {
        RunscFlags::parse(text)
            .unwrap()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn canonical_and_toml_forms_parse_to_the_same_flags() {
        let canonical = "debug=true\ndebug-log=/var/log/runsc/%ID%/gvisor-%COMMAND%.log\nnet-raw=false\npanic-signal=9\n";
        let toml = "  net-raw = \"false\"\n\n# comment\npanic-signal = '9'\ndebug = \"true\"\ndebug-log = \"/var/log/runsc/%ID%/gvisor-%COMMAND%.log\"";
        let expected = pairs(&[
            ("debug", "true"),
            ("debug-log", "/var/log/runsc/%ID%/gvisor-%COMMAND%.log"),
            ("net-raw", "false"),
            ("panic-signal", "9"),
        ]);
        assert_eq!(flags(canonical), expected);
        assert_eq!(flags(toml), expected);
        assert_eq!(
            RunscFlags::parse(toml).unwrap().to_canonical(),
            canonical,
            "canonical output is sorted key=value lines"
        );
    }

    #[test]
    fn render_is_sorted_and_quoted_whatever_the_input_order() {
        let a = RunscFlags::parse("nvproxy=true\nnet-raw=true\npanic-signal=15\n").unwrap();
        let b = RunscFlags::parse("panic-signal=15\nnvproxy = \"true\"\nnet-raw=true").unwrap();
        assert_eq!(a, b);
        assert_eq!(
            a.render_runsc_toml(),
            "[runsc_config]\nnet-raw = \"true\"\nnvproxy = \"true\"\npanic-signal = \"15\"\n"
        );
        assert_eq!(a.render_runsc_toml(), b.render_runsc_toml());
    }

    #[test]
    fn no_flags_render_the_bare_table() {
        let empty = RunscFlags::parse("\n  \n").unwrap();
        assert!(empty.is_empty());
        assert_eq!(empty.render_runsc_toml(), "[runsc_config]\n");
        assert_eq!(
            empty.render_shim_config("/var/bin/containerruntimes/gvisor/0123456789abcdef/runsc"),
            "binary_name = \"/var/bin/containerruntimes/gvisor/0123456789abcdef/runsc\"\n\n[runsc_config]\n"
        );
        assert_eq!(
            RunscFlags::default().render_runsc_toml(),
            "[runsc_config]\n"
        );
    }

    #[test]
    fn rendered_file_is_valid_toml_with_string_values() {
        let flags =
            RunscFlags::parse("debug-log=/var/log/runsc/%ID%/gvisor-%COMMAND%.log\npanic-signal=9")
                .unwrap();
        let document: toml_edit::DocumentMut = flags.render_runsc_toml().parse().unwrap();
        assert_eq!(document["runsc_config"]["panic-signal"].as_str(), Some("9"));
        assert_eq!(
            document["runsc_config"]["debug-log"].as_str(),
            Some("/var/log/runsc/%ID%/gvisor-%COMMAND%.log")
        );
    }

    #[test]
    fn malformed_lines_are_rejected_with_their_number() {
        for (text, line, reason) in [
            ("net-raw", 1, "expected `key=value`"),
            (
                "nvproxy=true\nNet-Raw=true",
                2,
                "flag names are lowercase letters, digits and dashes",
            ),
            (
                "=true",
                1,
                "flag names are lowercase letters, digits and dashes",
            ),
            (
                "-x=1",
                1,
                "flag names are lowercase letters, digits and dashes",
            ),
            (
                "net raw=true",
                1,
                "flag names are lowercase letters, digits and dashes",
            ),
            ("net-raw=", 1, "the value is empty"),
            ("net-raw = \"\"", 1, "the value is empty"),
            (
                "net-raw=tr\"ue",
                1,
                "an unquoted value must not contain quotes or backslashes",
            ),
            (
                "net-raw = \"true",
                1,
                "the quoted value is not one valid TOML string",
            ),
            (
                "net-raw = \"a\" \"b\"",
                1,
                "the quoted value is not one valid TOML string",
            ),
            (
                "net-raw = \"a\\nb\"",
                1,
                "the value contains a control character",
            ),
        ] {
            match RunscFlags::parse(text) {
                Err(FlagsError::Malformed {
                    line: got_line,
                    reason: got_reason,
                }) => {
                    assert_eq!((got_line, got_reason), (line, reason), "{text:?}");
                }
                other => panic!("{text:?}: expected a malformed-line error, got {other:?}"),
            }
        }
    }

    #[test]
    fn errors_never_echo_the_line() {
        let hash = "$6$rounds=5000$saltsalt$Qq0Jf1dPd5X3";
        for text in [
            format!("root:{hash}:19000:0:99999:7:::"),
            format!("root = \"{hash}\n"),
            format!("debug=true\nx\u{1b}[2J{hash}"),
            format!("debug={hash}"),
        ] {
            let message = RunscFlags::parse(&text).unwrap_err().to_string();
            assert!(!message.contains("saltsalt"), "{message}");
            assert!(!message.contains(char::is_control), "{message:?}");
        }
        assert_eq!(
            RunscFlags::parse("root:x:0:0:root:/root:/bin/bash")
                .unwrap_err()
                .to_string(),
            "line 1: expected `key=value`; write one `key=value` per line"
        );
    }

    #[test]
    fn flags_outside_the_operators_allow_list_are_rejected() {
        for (text, key) in [
            ("net-raw=true,debug=true", "net-raw"),
            ("debug=true\nnet-raw=yes", "net-raw"),
            ("platform=ptrace", "platform"),
            ("debug-log=/tmp/elsewhere.log", "debug-log"),
            ("panic-signal=65", "panic-signal"),
            ("nvproxy = \"false\"", "nvproxy"),
        ] {
            match RunscFlags::parse(text) {
                Err(FlagsError::NotAllowed { key: got, .. }) => assert_eq!(got, key, "{text:?}"),
                other => panic!("{text:?}: expected NotAllowed, got {other:?}"),
            }
        }
        let error = RunscFlags::parse("net-raw=true,debug=true").unwrap_err();
        assert_eq!(
            error.to_string(),
            "line 1: flag `net-raw` is not accepted: expected \"true\" or \"false\""
        );
        // The installer writes what the operator would: a signal number without zeros.
        assert_eq!(
            RunscFlags::parse("panic-signal=06").unwrap().to_canonical(),
            "panic-signal=6\n"
        );
    }

    #[test]
    fn duplicate_keys_are_rejected() {
        let error = RunscFlags::parse("net-raw=true\nnet-raw = \"false\"").unwrap_err();
        assert_eq!(
            error,
            FlagsError::Duplicate {
                line: 2,
                key: "net-raw".into()
            }
        );
        assert_eq!(
            error.to_string(),
            "line 2: flag `net-raw` is given twice; keep one"
        );
    }

    #[test]
    fn source_is_inline_when_it_has_an_equals_sign() {
        assert_eq!(FlagsSource::from_arg(""), FlagsSource::None);
        assert_eq!(FlagsSource::from_arg(" \n"), FlagsSource::None);
        assert_eq!(
            FlagsSource::from_arg("net-raw=true\n"),
            FlagsSource::Inline("net-raw=true\n".into())
        );
        assert_eq!(
            FlagsSource::from_arg("/etc/gvisor/flags\n"),
            FlagsSource::File(PathBuf::from("/etc/gvisor/flags"))
        );
    }

    #[test]
    fn profiles_are_sections_after_the_default_profiles_lines() {
        let profiles = Profiles::parse(
            "net-raw=true\n[debug]\ndebug=true\ndebug-log=/var/log/runsc/%ID%/gvisor-%COMMAND%.log\n[fast]\nplatform=kvm\n[empty]\n",
        )
        .unwrap();
        assert_eq!(profiles.default.to_canonical(), "net-raw=true\n");
        let named: Vec<(&str, String)> = profiles
            .iter()
            .filter_map(|(name, flags)| Some((name?, flags.to_canonical())))
            .collect();
        assert_eq!(
            named,
            [
                (
                    "debug",
                    "debug=true\ndebug-log=/var/log/runsc/%ID%/gvisor-%COMMAND%.log\n".to_string()
                ),
                ("empty", String::new()),
                ("fast", "platform=kvm\n".to_string()),
            ]
        );
        assert_eq!(
            Profiles::parse("net-raw=true\n").unwrap(),
            Profiles {
                default: RunscFlags::parse("net-raw=true").unwrap(),
                named: BTreeMap::new()
            },
            "no headers: the default profile alone, as before profiles came"
        );
        let runsc_toml = RunscFlags::parse("net-raw=true")
            .unwrap()
            .render_runsc_toml();
        assert_eq!(
            Profiles::parse(&runsc_toml).unwrap().default.to_canonical(),
            "net-raw=true\n",
            "a runsc.toml reads as the default profile"
        );
        assert_eq!(
            FlagsSource::from_arg("[debug]\n"),
            FlagsSource::Inline("[debug]\n".into())
        );
    }

    #[test]
    fn bad_profile_headers_are_rejected_without_echoing_them() {
        for (text, line) in [
            ("[Debug]", 1),
            ("net-raw=true\n[a/b]", 2),
            ("[a", 1),
            ("[]", 1),
            ("[-a]", 1),
            ("[../../etc/shadow]", 1),
            ("[a]\n[runsc_config]", 2),
        ] {
            let error = Profiles::parse(text).unwrap_err();
            assert_eq!(error, FlagsError::InvalidProfile { line }, "{text:?}");
            assert!(!error.to_string().contains("shadow"));
        }
        assert_eq!(
            Profiles::parse("[a]\n[a]").unwrap_err().to_string(),
            "line 2: profile `a` is given twice; keep one"
        );
        assert!(matches!(
            Profiles::parse("net-raw=true\n[runsc_config]\nnet-raw=false"),
            Err(FlagsError::Duplicate { .. })
        ));
        assert!(matches!(
            Profiles::parse("[a]\nplatform=ptrace"),
            Err(FlagsError::NotAllowed { line: 2, .. })
        ));
        assert!(valid_profile_name(&"x".repeat(MAX_PROFILE_NAME)));
        assert!(!valid_profile_name(&"x".repeat(MAX_PROFILE_NAME + 1)));
    }
}
