//! containerd config schema versions and the plugin IDs each one expects. Pure.
//!
//! containerd reads the top-level `version` key: none means 1 (containerd 1.x short plugin
//! names such as `cri`), 2 is the containerd 1.x format with full plugin IDs, 3 is containerd
//! 2.0–2.2 (the CRI plugin split into `io.containerd.cri.v1.runtime` and
//! `io.containerd.cri.v1.images`), 4 is containerd 2.3 (same plugin layout as 3). A runtime
//! placed under another version's key is silently ignored by containerd (or, for an unknown
//! key in some versions, stops it from starting), which is the upstream install script's bug
//! this module exists to avoid.

use toml_edit::{DocumentMut, Item, Value};

use super::Error;

/// A containerd config schema version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigVersion {
    /// No `version` key or `version = 1`: containerd 1.x short plugin names.
    V1,
    /// `version = 2`: containerd 1.3–1.7 full plugin IDs; containerd 2.x migrates it on load.
    V2,
    /// `version = 3`: containerd 2.0–2.2.
    V3,
    /// `version = 4`: containerd 2.3.
    V4,
}

/// The CRI plugin's short name, used as its key in version-1 files.
const CRI_PLUGIN_V1: &str = "cri";
/// The CRI plugin's ID in version-2 files (containerd 1.x).
const CRI_PLUGIN_V2: &str = "io.containerd.grpc.v1.cri";
/// The CRI runtime plugin's ID in version-3 and version-4 files (containerd 2.x).
const CRI_RUNTIME_PLUGIN_V3: &str = "io.containerd.cri.v1.runtime";

impl ConfigVersion {
    /// Maps the integer of a `version = N` line; `None` for unknown versions.
    pub fn from_number(number: i64) -> Option<Self> {
        match number {
            1 => Some(Self::V1),
            2 => Some(Self::V2),
            3 => Some(Self::V3),
            4 => Some(Self::V4),
            _ => None,
        }
    }

    /// The number written in the file (`V1` → 1, also for files without a `version`).
    pub fn number(self) -> i64 {
        match self {
            Self::V1 => 1,
            Self::V2 => 2,
            Self::V3 => 3,
            Self::V4 => 4,
        }
    }

    /// Detects the version of a parsed config: no `version` key means 1.
    ///
    /// Fails for a `version` that is not an integer or not in 1–4, so that callers never
    /// guess a plugin key for a schema they do not know.
    pub fn detect(document: &DocumentMut) -> Result<Self, Error> {
        match document.get("version") {
            None | Some(Item::None) => Ok(Self::V1),
            Some(Item::Value(Value::Integer(number))) => {
                let number = *number.value();
                Self::from_number(number).ok_or(Error::UnsupportedVersion(number))
            }
            // The type only: the value is file content and is not echoed.
            Some(other) => Err(Error::InvalidVersion(other.type_name())),
        }
    }

    /// Key under `plugins` of the CRI plugin that holds `containerd.runtimes` in this version.
    pub fn cri_runtime_plugin(self) -> &'static str {
        match self {
            Self::V1 => CRI_PLUGIN_V1,
            Self::V2 => CRI_PLUGIN_V2,
            Self::V3 | Self::V4 => CRI_RUNTIME_PLUGIN_V3,
        }
    }

    /// Path of the CRI runtimes table (`plugins.<cri>.containerd.runtimes`) in this version.
    pub fn runtimes_path(self) -> [&'static str; 4] {
        [
            "plugins",
            self.cri_runtime_plugin(),
            "containerd",
            "runtimes",
        ]
    }

    /// The CRI runtime plugin keys of the *other* versions: where a runtime registered for
    /// the wrong version would sit. Deduplicated and never equal to this version's key.
    pub fn foreign_cri_runtime_plugins(self) -> Vec<&'static str> {
        let own = self.cri_runtime_plugin();
        [CRI_PLUGIN_V1, CRI_PLUGIN_V2, CRI_RUNTIME_PLUGIN_V3]
            .into_iter()
            .filter(|plugin| *plugin != own)
            .collect()
    }
}

impl std::fmt::Display for ConfigVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.number())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detect(text: &str) -> Result<ConfigVersion, Error> {
        ConfigVersion::detect(&text.parse::<DocumentMut>().unwrap())
    }

    #[test]
    fn detects_each_known_version() {
        assert_eq!(detect("").unwrap(), ConfigVersion::V1);
        assert_eq!(detect("# only a comment\n").unwrap(), ConfigVersion::V1);
        assert_eq!(detect("[plugins.cri]\n").unwrap(), ConfigVersion::V1);
        assert_eq!(detect("version = 1").unwrap(), ConfigVersion::V1);
        assert_eq!(detect("version = 2").unwrap(), ConfigVersion::V2);
        assert_eq!(detect("version=3\n").unwrap(), ConfigVersion::V3);
        assert_eq!(
            detect("  version   =   4 # 2.3\n").unwrap(),
            ConfigVersion::V4
        );
    }

    #[test]
    fn version_key_inside_a_table_is_not_the_file_version() {
        let text = "[plugins.foo]\nversion = 3\n";
        assert_eq!(detect(text).unwrap(), ConfigVersion::V1);
    }

    #[test]
    fn rejects_unknown_and_malformed_versions() {
        assert!(matches!(
            detect("version = 5"),
            Err(Error::UnsupportedVersion(5))
        ));
        assert!(matches!(
            detect("version = 0"),
            Err(Error::UnsupportedVersion(0))
        ));
        assert!(matches!(
            detect("version = \"2\""),
            Err(Error::InvalidVersion("string"))
        ));
        let error = detect("version = 2.0").unwrap_err();
        assert_eq!(
            error.to_string(),
            "containerd config has a `version` that is not an integer (it is a TOML float); write e.g. `version = 2`"
        );
    }

    #[test]
    fn plugin_keys_per_version() {
        assert_eq!(ConfigVersion::V1.cri_runtime_plugin(), "cri");
        assert_eq!(
            ConfigVersion::V2.cri_runtime_plugin(),
            "io.containerd.grpc.v1.cri"
        );
        assert_eq!(
            ConfigVersion::V3.cri_runtime_plugin(),
            "io.containerd.cri.v1.runtime"
        );
        assert_eq!(
            ConfigVersion::V4.cri_runtime_plugin(),
            "io.containerd.cri.v1.runtime"
        );
        assert_eq!(
            ConfigVersion::V2.runtimes_path(),
            [
                "plugins",
                "io.containerd.grpc.v1.cri",
                "containerd",
                "runtimes"
            ]
        );
    }

    #[test]
    fn foreign_plugin_keys_exclude_own_key() {
        assert_eq!(
            ConfigVersion::V1.foreign_cri_runtime_plugins(),
            ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime"]
        );
        assert_eq!(
            ConfigVersion::V2.foreign_cri_runtime_plugins(),
            ["cri", "io.containerd.cri.v1.runtime"]
        );
        for version in [ConfigVersion::V3, ConfigVersion::V4] {
            assert_eq!(
                version.foreign_cri_runtime_plugins(),
                ["cri", "io.containerd.grpc.v1.cri"]
            );
        }
    }

    #[test]
    fn numbers_round_trip() {
        for number in 1..=4 {
            let version = ConfigVersion::from_number(number).unwrap();
            assert_eq!(version.number(), number);
            assert_eq!(version.to_string(), number.to_string());
        }
        assert_eq!(ConfigVersion::from_number(-1), None);
    }
}
