//! Validation of the gVisor `providerConfig` (`GVisorConfiguration`), pure.
//!
//! Turns `spec.providerConfig` into [`GVisorSettings`]: the default profile (the top-level
//! `configFlags`, `platform` and `overhead`: RuntimeClass `gvisor`, handler `runsc`) and the
//! named `profiles` (each its own RuntimeClass `gvisor-<name>`, handler `runsc-<name>` and
//! runsc config file). Each profile's final, sorted `runsc` flags are written by the
//! installer to its runsc config file. Flag allow-list: `net-raw` (`"true"`/`"false"`),
//! `debug` (`"true"`, adds the debug-log path), `nvproxy` (`"true"`), `panic-signal` (a
//! signal number 1–64); `platform` is `systrap` (runsc's default, written as nothing) or
//! `kvm` (written as the flag `platform = "kvm"`). Anything else is a configuration error
//! that names the bad key and the accepted ones; upstream silently drops such input. Flags
//! are sorted, so an unchanged config renders byte-identical output (upstream's Go map order
//! could roll DaemonSets), and a config without profiles, platform or overhead renders what
//! it rendered before profiles came. How profiles of several pools become RuntimeClasses:
//! [`super::profiles`]; docs/usage.md ("gVisor profiles").

use serde_json::{Map, Value};

use crate::api::gvisor::{
    FlagRejection, GVISOR_CONFIGURATION_API_VERSION, GVISOR_CONFIGURATION_KIND, USER_FLAGS,
    check_runsc_flag,
};
use crate::api::provider_config::{Envelope, EnvelopeError, shorten};
use crate::api::quantity::Quantity;

/// The runsc flags we accept.
pub const ACCEPTED_FLAGS: [&str; 4] = USER_FLAGS;
/// The top-level fields of `GVisorConfiguration`.
pub const ACCEPTED_FIELDS: [&str; 7] = [
    "apiVersion",
    "kind",
    "configFlags",
    "platform",
    "overhead",
    "profiles",
    "testImageTag",
];
/// The fields of one entry of `profiles`.
pub const PROFILE_FIELDS: [&str; 4] = ["name", "configFlags", "platform", "overhead"];
/// The most named profiles one pool may have (each is a RuntimeClass, a containerd runtime
/// handler and a file on every node of the pool).
pub const MAX_PROFILES: usize = 8;
/// The longest profile name: `gvisor-<name>` is a RuntimeClass name and `runsc-<name>` a
/// file name part, both at most a DNS label (63 characters).
pub const MAX_PROFILE_NAME: usize = 63 - "gvisor-".len();
/// The outside of a `GVisorConfiguration`.
const ENVELOPE: Envelope = Envelope {
    api_version: GVISOR_CONFIGURATION_API_VERSION,
    kind: GVISOR_CONFIGURATION_KIND,
    fields: &ACCEPTED_FIELDS,
};
pub use crate::api::gvisor::DEBUG_LOG_PATH;

/// The gVisor platform a profile runs its sandboxes on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Platform {
    /// `systrap`, runsc's default: works on every machine.
    #[default]
    Systrap,
    /// `kvm`: needs `/dev/kvm` on the node (bare metal or nested virtualisation).
    Kvm,
}

impl Platform {
    /// The name in `providerConfig` and in runsc's `platform` flag.
    pub fn name(self) -> &'static str {
        match self {
            Platform::Systrap => "systrap",
            Platform::Kvm => "kvm",
        }
    }
}

/// A RuntimeClass `overhead.podFixed`: canonical quantities (`resource.Quantity.String()`).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Overhead {
    /// CPU, e.g. `100m`.
    pub cpu: Option<String>,
    /// Memory, e.g. `64Mi`.
    pub memory: Option<String>,
}

/// One runtime profile: a containerd runtime handler with its runsc config, and a
/// RuntimeClass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Profile {
    /// `None` for the default profile (the top-level fields).
    pub name: Option<String>,
    /// Final runsc flags, sorted by key (`platform` among them when it is `kvm`).
    pub runsc_flags: Vec<(String, String)>,
    /// The platform.
    pub platform: Platform,
    /// The overhead the user asked for; `None`: the measured default
    /// ([`super::profiles`]).
    pub overhead: Option<Overhead>,
}

impl Profile {
    /// The RuntimeClass: `gvisor`, or `gvisor-<name>`.
    pub fn runtime_class(&self) -> String {
        runtime_class_name(self.name.as_deref())
    }

    /// The containerd runtime handler: `runsc`, or `runsc-<name>`.
    pub fn handler(&self) -> String {
        crate::gvisor_install::plan::handler_name(self.name.as_deref())
    }

    fn flags_text(&self) -> String {
        self.runsc_flags
            .iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect()
    }
}

/// The RuntimeClass of a profile (`None`: the default one): `gvisor`, or `gvisor-<name>`.
pub fn runtime_class_name(profile: Option<&str>) -> String {
    match profile {
        None => "gvisor".to_string(),
        Some(name) => format!("gvisor-{name}"),
    }
}

/// A validated configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GVisorSettings {
    /// The default profile (RuntimeClass `gvisor`).
    pub default: Profile,
    /// The named profiles, sorted by name.
    pub profiles: Vec<Profile>,
    /// `testImageTag`, for the test-repository override.
    pub test_image_tag: Option<String>,
}

impl GVisorSettings {
    /// The flags as the installer reads them from `GVISOR_RUNSC_FLAGS`: the default
    /// profile's `key=value` lines, then for each named profile a `[name]` line and its
    /// lines. Without named profiles exactly the default profile's lines (as before
    /// profiles came, so no installation DaemonSet rolls for them).
    pub fn flags_text(&self) -> String {
        let mut text = self.default.flags_text();
        for profile in &self.profiles {
            let name = profile.name.as_deref().unwrap_or_default();
            text.push_str(&format!("[{name}]\n{}", profile.flags_text()));
        }
        text
    }

    /// The default profile, then the named ones.
    pub fn all_profiles(&self) -> impl Iterator<Item = &Profile> {
        std::iter::once(&self.default).chain(&self.profiles)
    }

    /// Whether any profile runs on `kvm`.
    pub fn wants_kvm(&self) -> bool {
        self.all_profiles().any(|p| p.platform == Platform::Kvm)
    }
}

/// Why a `providerConfig` is rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Not an object of `GVisorConfiguration`, or an unknown top-level field.
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    /// `configFlags` is not a map.
    #[error("{at}configFlags must be a map of flag name to string value")]
    FlagsNotAMap {
        /// `providerConfig.` or `providerConfig.profiles[name].`.
        at: String,
    },
    /// `testImageTag` is not a string.
    #[error("providerConfig.testImageTag must be a string")]
    TestImageTagNotAString,
    /// A flag value is not a string.
    #[error("configFlags.{key} must be a string, e.g. {key}: \"true\" (quoted)")]
    NotAString {
        /// The flag.
        key: String,
    },
    /// A flag we do not accept.
    #[error(
        "configFlags has unknown flag {key:?}; accepted flags: debug, net-raw, nvproxy, panic-signal (the platform is its own field)"
    )]
    UnknownFlag {
        /// The flag (shortened to 64 characters).
        key: String,
    },
    /// A value we do not accept.
    #[error("configFlags.{key} has invalid value {value:?}; expected {expected}")]
    InvalidValue {
        /// The flag.
        key: String,
        /// The value (shortened to 64 characters).
        value: String,
        /// What is accepted.
        expected: &'static str,
    },
    /// `platform` is not `systrap` or `kvm`.
    #[error("{at}platform has invalid value {value}; expected \"systrap\" or \"kvm\"")]
    InvalidPlatform {
        /// Where.
        at: String,
        /// The value (shortened, JSON).
        value: String,
    },
    /// `overhead` is not a map of `cpu` and/or `memory` to a non-negative quantity.
    #[error("{at}overhead {reason}")]
    InvalidOverhead {
        /// Where.
        at: String,
        /// What is wrong, with the accepted form.
        reason: String,
    },
    /// `profiles` is not a list of objects.
    #[error("providerConfig.profiles must be a list of objects with the fields {}", PROFILE_FIELDS.join(", "))]
    ProfilesNotAList,
    /// Too many profiles.
    #[error("providerConfig.profiles has {count} entries; at most {MAX_PROFILES} are accepted")]
    TooManyProfiles {
        /// How many were given.
        count: usize,
    },
    /// An unknown field in a profile.
    #[error("providerConfig.profiles[{index}] has unknown field {field:?}; accepted fields: {}", PROFILE_FIELDS.join(", "))]
    UnknownProfileField {
        /// 0-based position.
        index: usize,
        /// The field (shortened).
        field: String,
    },
    /// A profile name that is not a DNS label of at most [`MAX_PROFILE_NAME`] characters.
    #[error(
        "providerConfig.profiles[{index}].name {name} is not a valid profile name: lowercase letters, digits and '-', starting and ending with a letter or digit, at most {MAX_PROFILE_NAME} characters (it becomes RuntimeClass gvisor-<name>)"
    )]
    InvalidProfileName {
        /// 0-based position.
        index: usize,
        /// The name (shortened, JSON).
        name: String,
    },
    /// Two profiles with the same name.
    #[error("providerConfig.profiles has the name {name:?} twice; profile names must be unique")]
    DuplicateProfile {
        /// The name.
        name: String,
    },
}

/// Validates `spec.providerConfig` (absent = the default profile without flags).
pub fn validate(provider_config: Option<&Value>) -> Result<GVisorSettings, ConfigError> {
    let Some(config) = provider_config else {
        return Ok(GVisorSettings::default());
    };
    let fields = ENVELOPE.open(config)?;
    let test_image_tag = match fields.get("testImageTag") {
        None | Some(Value::Null) => None,
        Some(Value::String(tag)) if tag.is_empty() => None,
        Some(Value::String(tag)) => Some(tag.clone()),
        Some(_) => return Err(ConfigError::TestImageTagNotAString),
    };
    let default = profile(None, fields, "providerConfig.")?;
    let profiles = named_profiles(fields.get("profiles"))?;
    Ok(GVisorSettings {
        default,
        profiles,
        test_image_tag,
    })
}

/// The profile of `fields` (the top level or one entry of `profiles`).
fn profile(
    name: Option<String>,
    fields: &Map<String, Value>,
    at: &str,
) -> Result<Profile, ConfigError> {
    let mut runsc_flags = Vec::new();
    match fields.get("configFlags") {
        None | Some(Value::Null) => {}
        Some(Value::Object(flags)) => {
            for (key, value) in flags {
                let Value::String(value) = value else {
                    return Err(ConfigError::NotAString { key: shorten(key) });
                };
                runsc_flags.extend(validate_flag(key, value)?);
            }
        }
        Some(_) => return Err(ConfigError::FlagsNotAMap { at: at.to_string() }),
    }
    let platform = platform(fields.get("platform"), at)?;
    if platform == Platform::Kvm {
        runsc_flags.push(("platform".to_string(), platform.name().to_string()));
    }
    runsc_flags.sort();
    Ok(Profile {
        name,
        runsc_flags,
        platform,
        overhead: overhead(fields.get("overhead"), at)?,
    })
}

fn platform(value: Option<&Value>, at: &str) -> Result<Platform, ConfigError> {
    match value {
        None | Some(Value::Null) => Ok(Platform::Systrap),
        Some(Value::String(text)) if text == "systrap" => Ok(Platform::Systrap),
        Some(Value::String(text)) if text == "kvm" => Ok(Platform::Kvm),
        Some(other) => Err(ConfigError::InvalidPlatform {
            at: at.to_string(),
            value: shorten(&other.to_string()),
        }),
    }
}

fn overhead(value: Option<&Value>, at: &str) -> Result<Option<Overhead>, ConfigError> {
    let invalid = |reason: String| ConfigError::InvalidOverhead {
        at: at.to_string(),
        reason,
    };
    let fields = match value {
        None | Some(Value::Null) => return Ok(None),
        // `{}`: no overhead at all (instead of the measured default, `super::profiles`).
        Some(Value::Object(fields)) if fields.is_empty() => return Ok(Some(Overhead::default())),
        Some(Value::Object(fields)) => fields,
        Some(_) => {
            return Err(invalid(
                "must be a map with cpu and/or memory, e.g. {cpu: 100m, memory: 64Mi}".into(),
            ));
        }
    };
    let mut overhead = Overhead::default();
    for (key, value) in fields {
        let slot = match key.as_str() {
            "cpu" => &mut overhead.cpu,
            "memory" => &mut overhead.memory,
            _ => {
                return Err(invalid(format!(
                    "has unknown resource {:?}; accepted: cpu, memory",
                    shorten(key)
                )));
            }
        };
        let text = match value {
            Value::String(text) => text.clone(),
            Value::Number(number) => number.to_string(),
            _ => {
                return Err(invalid(format!(
                    "{key} must be a quantity, e.g. 100m or 64Mi"
                )));
            }
        };
        let quantity = Quantity::parse(&text)
            .filter(|q| q.nanos() >= 0)
            .ok_or_else(|| {
                invalid(format!(
                    "{key} has invalid value {:?}; expected a non-negative quantity, e.g. 100m or 64Mi",
                    shorten(&text)
                ))
            })?;
        *slot = Some(quantity.canonical());
    }
    Ok(Some(overhead))
}

fn named_profiles(value: Option<&Value>) -> Result<Vec<Profile>, ConfigError> {
    let entries = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(entries)) => entries,
        Some(_) => return Err(ConfigError::ProfilesNotAList),
    };
    if entries.len() > MAX_PROFILES {
        return Err(ConfigError::TooManyProfiles {
            count: entries.len(),
        });
    }
    let mut profiles: Vec<Profile> = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let Value::Object(fields) = entry else {
            return Err(ConfigError::ProfilesNotAList);
        };
        if let Some(field) = fields
            .keys()
            .find(|k| !PROFILE_FIELDS.contains(&k.as_str()))
        {
            return Err(ConfigError::UnknownProfileField {
                index,
                field: shorten(field),
            });
        }
        let name = profile_name(fields.get("name"), index)?;
        if profiles
            .iter()
            .any(|p| p.name.as_deref() == Some(name.as_str()))
        {
            return Err(ConfigError::DuplicateProfile { name });
        }
        let at = format!("providerConfig.profiles[{name}].");
        profiles.push(profile(Some(name), fields, &at)?);
    }
    profiles.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(profiles)
}

fn profile_name(value: Option<&Value>, index: usize) -> Result<String, ConfigError> {
    let invalid = |shown: String| ConfigError::InvalidProfileName { index, name: shown };
    let Some(Value::String(name)) = value else {
        return Err(invalid(value.map_or_else(
            || "(missing)".to_string(),
            |v| shorten(&v.to_string()),
        )));
    };
    let alphanumeric = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let valid = !name.is_empty()
        && name.len() <= MAX_PROFILE_NAME
        && name.chars().all(|c| alphanumeric(c) || c == '-')
        && name.starts_with(alphanumeric)
        && name.ends_with(alphanumeric);
    if valid {
        Ok(name.clone())
    } else {
        Err(invalid(format!("{:?}", shorten(name))))
    }
}

/// One flag to its runsc entries: the allow-list is [`check_runsc_flag`] (shared with the
/// installer), restricted to [`USER_FLAGS`]; `debug` also turns on the debug log.
fn validate_flag(key: &str, value: &str) -> Result<Vec<(String, String)>, ConfigError> {
    if !USER_FLAGS.contains(&key) {
        return Err(ConfigError::UnknownFlag { key: shorten(key) });
    }
    let value = match check_runsc_flag(key, value) {
        Ok(value) => value,
        Err(FlagRejection::Unknown) => {
            return Err(ConfigError::UnknownFlag { key: shorten(key) });
        }
        Err(FlagRejection::InvalidValue { expected }) => {
            return Err(ConfigError::InvalidValue {
                key: key.to_string(),
                value: shorten(value),
                expected,
            });
        }
    };
    let mut entries = vec![(key.to_string(), value)];
    if key == "debug" {
        entries.push(("debug-log".to_string(), DEBUG_LOG_PATH.to_string()));
    }
    Ok(entries)
}

/// A `GVisorConfiguration` with `fields` (an object) besides `apiVersion` and `kind`: the
/// providerConfig the unit tests of this controller start from.
#[cfg(test)]
pub(crate) fn provider_config(fields: Value) -> Value {
    let mut config = serde_json::json!({
        "apiVersion": GVISOR_CONFIGURATION_API_VERSION,
        "kind": GVISOR_CONFIGURATION_KIND,
    });
    if let (Some(config), Value::Object(fields)) = (config.as_object_mut(), fields) {
        config.extend(fields);
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(flags: Value) -> Value {
        json!({
            "apiVersion": GVISOR_CONFIGURATION_API_VERSION,
            "kind": GVISOR_CONFIGURATION_KIND,
            "configFlags": flags,
        })
    }

    /// One row per accepted and rejected value of each flag.
    #[test]
    fn flag_allow_list() {
        let debug_log = ("debug-log", DEBUG_LOG_PATH);
        type Row = (
            &'static str,
            &'static str,
            Vec<(&'static str, &'static str)>,
        );
        let accepted: Vec<Row> = vec![
            ("net-raw", "true", vec![("net-raw", "true")]),
            ("net-raw", "false", vec![("net-raw", "false")]),
            ("debug", "true", vec![("debug", "true"), debug_log]),
            ("nvproxy", "true", vec![("nvproxy", "true")]),
            ("panic-signal", "6", vec![("panic-signal", "6")]),
            ("panic-signal", "1", vec![("panic-signal", "1")]),
            ("panic-signal", "64", vec![("panic-signal", "64")]),
            ("panic-signal", "06", vec![("panic-signal", "6")]),
        ];
        for (key, value, expected) in accepted {
            let got = validate(Some(&config(json!({ key: value }))))
                .unwrap_or_else(|e| panic!("{key}={value}: {e}"));
            let expected: Vec<(String, String)> = expected
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            assert_eq!(got.default.runsc_flags, expected, "{key}={value}");
        }
        let rejected = [
            ("net-raw", "yes"),
            ("net-raw", "True"),
            ("net-raw", ""),
            ("debug", "false"),
            ("debug", "1"),
            ("nvproxy", "false"),
            ("panic-signal", "0"),
            ("panic-signal", "65"),
            ("panic-signal", "-6"),
            ("panic-signal", "SIGABRT"),
            ("panic-signal", "6.0"),
        ];
        for (key, value) in rejected {
            let error = validate(Some(&config(json!({ key: value })))).unwrap_err();
            assert!(
                matches!(error, ConfigError::InvalidValue { .. }),
                "{key}={value}: {error:?}"
            );
            assert!(error.to_string().contains(key), "{error}");
        }
    }

    #[test]
    fn unknown_flags_name_the_key_and_the_accepted_ones() {
        for key in ["platform", "network", "net_raw", "--net-raw", "debug-log"] {
            let error = validate(Some(&config(json!({ key: "true" })))).unwrap_err();
            let text = error.to_string();
            assert!(
                text.contains(key)
                    && text.contains("accepted flags: debug, net-raw, nvproxy, panic-signal"),
                "{text}"
            );
        }
    }

    #[test]
    fn flags_are_sorted_whatever_the_input_order() {
        let got = validate(Some(&config(
            json!({"panic-signal": "6", "net-raw": "true", "debug": "true", "nvproxy": "true"}),
        )))
        .unwrap();
        let keys: Vec<&str> = got
            .default
            .runsc_flags
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(
            keys,
            ["debug", "debug-log", "net-raw", "nvproxy", "panic-signal"]
        );
        assert_eq!(
            got.flags_text(),
            format!(
                "debug=true\ndebug-log={DEBUG_LOG_PATH}\nnet-raw=true\nnvproxy=true\npanic-signal=6\n"
            )
        );
    }

    #[test]
    fn structural_errors() {
        assert_eq!(validate(None).unwrap(), GVisorSettings::default());
        assert_eq!(
            validate(Some(&json!("x"))).unwrap_err(),
            ConfigError::Envelope(EnvelopeError::NotAnObject)
        );
        assert!(matches!(
            validate(Some(&json!({"apiVersion": "v1", "kind": "ConfigMap"}))).unwrap_err(),
            ConfigError::Envelope(EnvelopeError::WrongType { .. })
        ));
        assert!(matches!(
            validate(Some(&json!({"configFlags": {}}))).unwrap_err(),
            ConfigError::Envelope(EnvelopeError::WrongType { .. })
        ));
        let mut with_typo = config(json!({}));
        with_typo["configFlag"] = json!({"net-raw": "true"});
        assert_eq!(
            validate(Some(&with_typo)).unwrap_err().to_string(),
            "providerConfig has unknown field \"configFlag\"; accepted fields: apiVersion, kind, configFlags, platform, overhead, profiles, testImageTag"
        );
        assert_eq!(
            validate(Some(&config(json!(["net-raw"])))).unwrap_err(),
            ConfigError::FlagsNotAMap {
                at: "providerConfig.".into()
            }
        );
        assert_eq!(
            validate(Some(&config(json!({"net-raw": true})))).unwrap_err(),
            ConfigError::NotAString {
                key: "net-raw".into()
            }
        );
        let huge = "x".repeat(100_000);
        let text = validate(Some(&config(json!({ huge.clone(): "true" }))))
            .unwrap_err()
            .to_string();
        assert!(text.len() < 300, "messages stay short: {}", text.len());
        let mut tag = config(json!({}));
        tag["testImageTag"] = json!("v1.2.3");
        assert_eq!(
            validate(Some(&tag)).unwrap().test_image_tag.as_deref(),
            Some("v1.2.3")
        );
        tag["testImageTag"] = json!(5);
        assert_eq!(
            validate(Some(&tag)).unwrap_err(),
            ConfigError::TestImageTagNotAString
        );
    }

    fn with(fields: Value) -> Value {
        provider_config(fields)
    }

    #[test]
    fn profiles_are_sorted_and_each_gets_its_class_handler_and_flags() {
        let settings = validate(Some(&with(json!({
            "configFlags": {"net-raw": "true"},
            "overhead": {"cpu": "0.1", "memory": "65536Ki"},
            "profiles": [
                {"name": "fast", "platform": "kvm", "overhead": {"memory": "96Mi"}},
                {"name": "debug", "configFlags": {"debug": "true"}, "platform": "systrap"},
            ],
        }))))
        .unwrap();
        assert_eq!(settings.default.runtime_class(), "gvisor");
        assert_eq!(settings.default.handler(), "runsc");
        assert_eq!(
            settings.default.overhead,
            Some(Overhead {
                cpu: Some("100m".into()),
                memory: Some("64Mi".into())
            }),
            "canonical quantities"
        );
        let names: Vec<_> = settings
            .profiles
            .iter()
            .map(|p| (p.runtime_class(), p.handler(), p.platform))
            .collect();
        assert_eq!(
            names,
            [
                (
                    "gvisor-debug".into(),
                    "runsc-debug".into(),
                    Platform::Systrap
                ),
                ("gvisor-fast".into(), "runsc-fast".into(), Platform::Kvm),
            ]
        );
        assert!(settings.wants_kvm());
        assert_eq!(
            settings.flags_text(),
            format!(
                "net-raw=true\n[debug]\ndebug=true\ndebug-log={DEBUG_LOG_PATH}\n[fast]\nplatform=kvm\n"
            )
        );
    }

    /// Without profiles, platform or overhead the installer gets the bytes it got before
    /// profiles came: no installation DaemonSet rolls on the upgrade.
    #[test]
    fn a_config_without_profiles_renders_the_flags_it_rendered_before() {
        let settings = validate(Some(&with(json!({
            "configFlags": {"net-raw": "true"},
            "platform": "systrap",
        }))))
        .unwrap();
        assert_eq!(settings.flags_text(), "net-raw=true\n");
        assert!(!settings.wants_kvm());
        assert_eq!(validate(None).unwrap().flags_text(), "");
    }

    #[test]
    fn bad_profiles_are_refused_with_where_and_what() {
        let cases = [
            (
                json!({"platform": "ptrace"}),
                "providerConfig.platform has invalid value \"ptrace\"; expected \"systrap\" or \"kvm\"",
            ),
            (
                json!({"platform": 5}),
                "providerConfig.platform has invalid value 5",
            ),
            (
                json!({"configFlags": {"platform": "kvm"}}),
                "the platform is its own field",
            ),
            (
                json!({"overhead": {"gpu": "1"}}),
                "providerConfig.overhead has unknown resource \"gpu\"; accepted: cpu, memory",
            ),
            (
                json!({"overhead": {"memory": "-1Mi"}}),
                "providerConfig.overhead memory has invalid value \"-1Mi\"; expected a non-negative quantity",
            ),
            (
                json!({"overhead": {"cpu": "lots"}}),
                "cpu has invalid value \"lots\"",
            ),
            (
                json!({"overhead": []}),
                "providerConfig.overhead must be a map with cpu and/or memory",
            ),
            (
                json!({"overhead": "64Mi"}),
                "providerConfig.overhead must be a map",
            ),
            (
                json!({"profiles": {"name": "a"}}),
                "providerConfig.profiles must be a list of objects",
            ),
            (
                json!({"profiles": ["a"]}),
                "providerConfig.profiles must be a list of objects",
            ),
            (
                json!({"profiles": [{"name": "a", "flags": {}}]}),
                "providerConfig.profiles[0] has unknown field \"flags\"; accepted fields: name, configFlags, platform, overhead",
            ),
            (
                json!({"profiles": [{}]}),
                "providerConfig.profiles[0].name (missing) is not a valid profile name",
            ),
            (
                json!({"profiles": [{"name": "Debug"}]}),
                "providerConfig.profiles[0].name \"Debug\" is not a valid profile name",
            ),
            (
                json!({"profiles": [{"name": "-a"}]}),
                "is not a valid profile name",
            ),
            (
                json!({"profiles": [{"name": "a-"}]}),
                "is not a valid profile name",
            ),
            (
                json!({"profiles": [{"name": "a/b"}]}),
                "is not a valid profile name",
            ),
            (
                json!({"profiles": [{"name": "x".repeat(MAX_PROFILE_NAME + 1)}]}),
                "at most 56 characters",
            ),
            (
                json!({"profiles": [{"name": "a"}, {"name": "a"}]}),
                "providerConfig.profiles has the name \"a\" twice",
            ),
            (
                json!({"profiles": [{"name": "a", "platform": "vm"}]}),
                "providerConfig.profiles[a].platform has invalid value \"vm\"",
            ),
            (
                json!({"profiles": [{"name": "a", "configFlags": "debug"}]}),
                "providerConfig.profiles[a].configFlags must be a map",
            ),
            (
                json!({"profiles": [{"name": "a", "configFlags": {"debug": "no"}}]}),
                "configFlags.debug has invalid value \"no\"",
            ),
        ];
        for (fields, needle) in cases {
            let text = validate(Some(&with(fields.clone())))
                .map(|s| format!("accepted: {s:?}"))
                .unwrap_or_else(|e| e.to_string());
            assert!(text.contains(needle), "{fields}: {text}");
            assert!(text.len() < 400, "short: {text}");
        }
        let many: Vec<Value> = (0..=MAX_PROFILES)
            .map(|i| json!({"name": format!("p{i}")}))
            .collect();
        assert_eq!(
            validate(Some(&with(json!({"profiles": many})))).unwrap_err(),
            ConfigError::TooManyProfiles {
                count: MAX_PROFILES + 1
            }
        );
        let longest = "x".repeat(MAX_PROFILE_NAME);
        let settings = validate(Some(&with(json!({"profiles": [{"name": longest}]})))).unwrap();
        assert_eq!(settings.profiles[0].runtime_class().len(), 63);
    }
}
