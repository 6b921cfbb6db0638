//! `GVisorConfiguration`: the `providerConfig` of gVisor ContainerRuntime objects.
//!
//! Users put it into `shoot.spec.provider.workers[].cri.containerRuntimes[].providerConfig`;
//! gardenlet copies it verbatim into `ContainerRuntime.spec.providerConfig`. Decoded leniently
//! (unknown fields ignored); the flags are validated by the ContainerRuntime controller. Not a CRD.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `apiVersion` of [`GVisorConfiguration`].
pub const GVISOR_CONFIGURATION_API_VERSION: &str =
    "gvisor.runtime.extensions.config.gardener.cloud/v1alpha1";
/// `kind` of [`GVisorConfiguration`].
pub const GVISOR_CONFIGURATION_KIND: &str = "GVisorConfiguration";

/// The runsc flags a user may set in `configFlags`.
pub const USER_FLAGS: [&str; 4] = ["debug", "net-raw", "nvproxy", "panic-signal"];
/// Where runsc writes debug logs when `debug` is on; the operator adds `debug-log` with this
/// value, so the installer accepts `debug-log` with exactly this value and nothing else.
pub const DEBUG_LOG_PATH: &str = "/var/log/runsc/%ID%/gvisor-%COMMAND%.log";

/// Why one runsc flag is refused by [`check_runsc_flag`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagRejection {
    /// The flag is not on the allow-list.
    Unknown,
    /// The flag is known but the value is not accepted; says what is.
    InvalidValue {
        /// What is accepted.
        expected: &'static str,
    },
}

/// The one allow-list of runsc flags, shared by the operator (on `configFlags`) and by
/// `gvisor-install` (on the flags it is given): `net-raw` (`true`/`false`), `debug` (`true`),
/// `nvproxy` (`true`), `panic-signal` (a signal number 1 to 64), `debug-log` (exactly
/// [`DEBUG_LOG_PATH`]) and `platform` (`systrap` or `kvm`); the operator adds the last two
/// (from `debug` and from a profile's `platform`), users cannot set them in `configFlags`,
/// see [`USER_FLAGS`].
/// Returns the value to write (a signal number without leading zeros). Pure.
pub fn check_runsc_flag(key: &str, value: &str) -> Result<String, FlagRejection> {
    let invalid = |expected| Err(FlagRejection::InvalidValue { expected });
    match key {
        "net-raw" => match value {
            "true" | "false" => Ok(value.to_string()),
            _ => invalid("\"true\" or \"false\""),
        },
        "debug" => match value {
            "true" => Ok(value.to_string()),
            _ => invalid("\"true\" (leave the flag out to disable debugging)"),
        },
        "nvproxy" => match value {
            "true" => Ok(value.to_string()),
            _ => invalid("\"true\" (leave the flag out to disable nvproxy)"),
        },
        "panic-signal" => match value.parse::<u8>() {
            Ok(signal) if (1..=64).contains(&signal) => Ok(signal.to_string()),
            _ => invalid("a signal number from 1 to 64, e.g. \"6\""),
        },
        "debug-log" => match value {
            DEBUG_LOG_PATH => Ok(value.to_string()),
            _ => invalid("the path the operator sets with `debug`"),
        },
        "platform" => match value {
            "systrap" | "kvm" => Ok(value.to_string()),
            _ => invalid("\"systrap\" or \"kvm\" (the operator sets it from a profile's platform)"),
        },
        _ => Err(FlagRejection::Unknown),
    }
}

/// Configuration of the gVisor runtime for one worker pool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GVisorConfiguration {
    /// Must be `gvisor.runtime.extensions.config.gardener.cloud/v1alpha1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Must be `GVisorConfiguration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The default profile (RuntimeClass `gvisor`).
    #[serde(flatten)]
    pub default: GVisorProfileSettings,
    /// Named profiles: each its own RuntimeClass `gvisor-<name>` and runtime handler
    /// `runsc-<name>` (docs/usage.md, "gVisor profiles").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiles: Option<Vec<GVisorProfile>>,
    /// Overrides the image tag of the gVisor installation image (testing only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_image_tag: Option<String>,
}

/// One named profile of a [`GVisorConfiguration`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GVisorProfile {
    /// Lowercase letters, digits and `-`, at most 56 characters.
    pub name: String,
    /// Its settings.
    #[serde(flatten)]
    pub settings: GVisorProfileSettings,
}

/// What a profile sets: the default one at the top level of a [`GVisorConfiguration`], a
/// named one in [`GVisorProfile`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GVisorProfileSettings {
    /// Extra `runsc` flags (without leading dashes), e.g. `net-raw: "true"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_flags: Option<BTreeMap<String, String>>,
    /// `systrap` (default) or `kvm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// RuntimeClass `overhead.podFixed` (`cpu`, `memory`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead: Option<BTreeMap<String, String>>,
}

impl GVisorConfiguration {
    /// A configuration with the expected `apiVersion` and `kind` and no settings.
    pub fn new() -> Self {
        GVisorConfiguration {
            api_version: Some(GVISOR_CONFIGURATION_API_VERSION.to_owned()),
            kind: Some(GVISOR_CONFIGURATION_KIND.to_owned()),
            ..Default::default()
        }
    }

    /// Whether `apiVersion` and `kind` name this type (both must be present and exact).
    pub fn has_expected_type(&self) -> bool {
        self.api_version.as_deref() == Some(GVISOR_CONFIGURATION_API_VERSION)
            && self.kind.as_deref() == Some(GVISOR_CONFIGURATION_KIND)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_provider_config_and_ignores_unknown_fields() {
        let config: GVisorConfiguration = serde_norway::from_str(
            r#"
apiVersion: gvisor.runtime.extensions.config.gardener.cloud/v1alpha1
kind: GVisorConfiguration
configFlags:
  net-raw: "true"
  debug: "false"
testImageTag: v0.1.0
somethingElse: 1
"#,
        )
        .unwrap();
        assert!(config.has_expected_type());
        let flags = config.default.config_flags.as_ref().unwrap();
        assert_eq!(flags["net-raw"], "true");
        assert_eq!(config.test_image_tag.as_deref(), Some("v0.1.0"));

        let json = serde_json::to_value(&config).unwrap();
        assert!(json.get("somethingElse").is_none());
        let back: GVisorConfiguration = serde_json::from_value(json).unwrap();
        assert_eq!(back, config);
    }

    #[test]
    fn new_has_type_meta_only() {
        let json = serde_json::to_value(GVisorConfiguration::new()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "apiVersion": GVISOR_CONFIGURATION_API_VERSION,
                "kind": GVISOR_CONFIGURATION_KIND,
            })
        );
        let wrong: GVisorConfiguration = serde_json::from_value(
            serde_json::json!({"apiVersion": "x/v1", "kind": "GVisorConfiguration"}),
        )
        .unwrap();
        assert!(!wrong.has_expected_type());
    }
}
