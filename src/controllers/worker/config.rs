//! Validation of a worker pool's `providerConfig` (pure).
//!
//! Our pool configuration is a small allow-listed object:
//!
//! ```yaml
//! providerConfig:
//!   apiVersion: node.extensions.config.gardener.cloud/v1alpha1
//!   kind: WorkerConfig
//!   image: registry.example/machine:v1.2.3   # optional
//! ```
//!
//! `image` overrides the machine image reference the driver boots (it is copied into the
//! MachineClass `providerSpec.image.reference` and into the pool hash, so changing it rolls the
//! pool). Anything else — another `apiVersion`/`kind`, an unknown field, a non-string or
//! empty image — is a configuration error naming the field, written to `lastError` before any
//! object is touched.

use serde_json::Value;

/// `apiVersion` of [`PoolConfig`].
pub const API_VERSION: &str = "node.extensions.config.gardener.cloud/v1alpha1";
/// `kind` of [`PoolConfig`].
pub const KIND: &str = "WorkerConfig";
/// The fields we accept.
pub const ACCEPTED_FIELDS: [&str; 3] = ["apiVersion", "kind", "image"];

/// A validated pool `providerConfig`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolConfig {
    /// Image reference override.
    pub image: Option<String>,
}

/// Why a pool `providerConfig` is rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Not an object.
    #[error("providerConfig must be an object")]
    NotAnObject,
    /// Wrong `apiVersion`/`kind`.
    #[error(
        "providerConfig has apiVersion {api_version:?} and kind {kind:?}; expected apiVersion {API_VERSION:?} and kind {KIND:?}"
    )]
    WrongType {
        /// What was given.
        api_version: String,
        /// What was given.
        kind: String,
    },
    /// A field we do not know.
    #[error("providerConfig has unknown field {0:?}; accepted fields: apiVersion, kind, image")]
    UnknownField(String),
    /// `image` is not a non-empty string.
    #[error("providerConfig.image must be a non-empty string")]
    BadImage,
}

fn shorten(text: &str) -> String {
    match text.char_indices().nth(64) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// Validates a pool's `providerConfig` (absent = no configuration).
pub fn validate(provider_config: Option<&Value>) -> Result<Option<PoolConfig>, ConfigError> {
    let Some(config) = provider_config else {
        return Ok(None);
    };
    let Value::Object(fields) = config else {
        return Err(ConfigError::NotAnObject);
    };
    let text = |key: &str| {
        fields
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    if api_version != API_VERSION || kind != KIND {
        return Err(ConfigError::WrongType {
            api_version: shorten(&api_version),
            kind: shorten(&kind),
        });
    }
    if let Some(unknown) = fields
        .keys()
        .find(|k| !ACCEPTED_FIELDS.contains(&k.as_str()))
    {
        return Err(ConfigError::UnknownField(shorten(unknown)));
    }
    let image = match fields.get("image") {
        None => None,
        Some(Value::String(image)) if !image.trim().is_empty() => Some(image.clone()),
        Some(_) => return Err(ConfigError::BadImage),
    };
    Ok(Some(PoolConfig { image }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(extra: Value) -> Value {
        let mut base = json!({"apiVersion": API_VERSION, "kind": KIND});
        if let (Value::Object(base), Value::Object(extra)) = (&mut base, extra) {
            base.extend(extra);
        }
        base
    }

    #[test]
    fn absent_and_minimal_configs_are_accepted() {
        assert_eq!(validate(None), Ok(None));
        assert_eq!(
            validate(Some(&config(json!({})))),
            Ok(Some(PoolConfig::default()))
        );
        assert_eq!(
            validate(Some(&config(json!({"image": "reg/m:1"})))),
            Ok(Some(PoolConfig {
                image: Some("reg/m:1".into())
            }))
        );
    }

    #[test]
    fn rejections_name_the_problem() {
        let cases = [
            (json!("text"), ConfigError::NotAnObject),
            (
                json!({"apiVersion": "v1", "kind": "WorkerConfig"}),
                ConfigError::WrongType {
                    api_version: "v1".into(),
                    kind: "WorkerConfig".into(),
                },
            ),
            (
                config(json!({"imag": "x"})),
                ConfigError::UnknownField("imag".into()),
            ),
            (config(json!({"image": ""})), ConfigError::BadImage),
            (config(json!({"image": 3})), ConfigError::BadImage),
        ];
        for (input, expected) in cases {
            assert_eq!(validate(Some(&input)), Err(expected.clone()), "{input}");
        }
        let message = ConfigError::UnknownField("imag".into()).to_string();
        assert!(message.contains("\"imag\"") && message.contains("accepted fields"));
    }
}
