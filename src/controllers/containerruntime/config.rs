//! Validation of the gVisor `providerConfig` (`GVisorConfiguration`), pure.
//!
//! Turns `spec.providerConfig` into the final, sorted `runsc` flags written to
//! `/etc/containerd/runsc.toml` by the installer. Allow-list: `net-raw` (`"true"`/`"false"`),
//! `debug` (`"true"`, adds the debug-log path), `nvproxy` (`"true"`), `panic-signal` (a signal
//! number 1–64). Anything else is a configuration error that names the bad key and the
//! accepted ones; upstream silently drops such input. Flags are sorted, so an unchanged
//! config renders byte-identical output (upstream's Go map order could roll DaemonSets).

use serde_json::Value;

use crate::api::gvisor::{
    FlagRejection, GVISOR_CONFIGURATION_API_VERSION, GVISOR_CONFIGURATION_KIND, USER_FLAGS,
    check_runsc_flag,
};
use crate::api::provider_config::{Envelope, EnvelopeError, shorten};

/// The runsc flags we accept.
pub const ACCEPTED_FLAGS: [&str; 4] = USER_FLAGS;
/// The top-level fields of `GVisorConfiguration`.
pub const ACCEPTED_FIELDS: [&str; 4] = ["apiVersion", "kind", "configFlags", "testImageTag"];
/// The outside of a `GVisorConfiguration`.
const ENVELOPE: Envelope = Envelope {
    api_version: GVISOR_CONFIGURATION_API_VERSION,
    kind: GVISOR_CONFIGURATION_KIND,
    fields: &ACCEPTED_FIELDS,
};
pub use crate::api::gvisor::DEBUG_LOG_PATH;

/// A validated configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GVisorSettings {
    /// Final runsc flags, sorted by key.
    pub runsc_flags: Vec<(String, String)>,
    /// `testImageTag`, for the test-repository override.
    pub test_image_tag: Option<String>,
}

impl GVisorSettings {
    /// The flags as `key=value` lines, the form the installer reads from
    /// `GVISOR_RUNSC_FLAGS`.
    pub fn flags_text(&self) -> String {
        self.runsc_flags
            .iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect()
    }
}

/// Why a `providerConfig` is rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Not an object of `GVisorConfiguration`, or an unknown top-level field.
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    /// `configFlags` is not a map.
    #[error("providerConfig.configFlags must be a map of flag name to string value")]
    FlagsNotAMap,
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
        "configFlags has unknown flag {key:?}; accepted flags: debug, net-raw, nvproxy, panic-signal"
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
}

/// Validates `spec.providerConfig` (absent = no flags).
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
        Some(_) => return Err(ConfigError::FlagsNotAMap),
    }
    runsc_flags.sort();
    Ok(GVisorSettings {
        runsc_flags,
        test_image_tag,
    })
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
            assert_eq!(got.runsc_flags, expected, "{key}={value}");
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
        let keys: Vec<&str> = got.runsc_flags.iter().map(|(k, _)| k.as_str()).collect();
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
            "providerConfig has unknown field \"configFlag\"; accepted fields: apiVersion, kind, configFlags, testImageTag"
        );
        assert_eq!(
            validate(Some(&config(json!(["net-raw"])))).unwrap_err(),
            ConfigError::FlagsNotAMap
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
}
