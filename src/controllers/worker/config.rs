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
//! `image` overrides the image the driver boots instead of the one the CloudProfile lists
//! ([`super::machine_image`]): it becomes the MachineClass `providerSpec.image` and enters the
//! pool hash, so changing it rolls the pool. Anything else — another `apiVersion`/`kind`, an unknown field, a non-string or
//! empty image — is a configuration error naming the field, written to `lastError` before any
//! object is touched.

use serde_json::Value;

use crate::api::provider_config::{Envelope, EnvelopeError};

/// `apiVersion` of [`PoolConfig`].
pub const API_VERSION: &str = "node.extensions.config.gardener.cloud/v1alpha1";
/// `kind` of [`PoolConfig`].
pub const KIND: &str = "WorkerConfig";
/// The fields we accept.
pub const ACCEPTED_FIELDS: [&str; 3] = ["apiVersion", "kind", "image"];

/// The outside of a `WorkerConfig`.
const ENVELOPE: Envelope = Envelope {
    api_version: API_VERSION,
    kind: KIND,
    fields: &ACCEPTED_FIELDS,
};

/// A validated pool `providerConfig`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolConfig {
    /// Image reference override.
    pub image: Option<String>,
}

/// Why a pool `providerConfig` is rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Not an object of `WorkerConfig`, or an unknown field.
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    /// `image` is not a non-empty string.
    #[error("providerConfig.image must be a non-empty string")]
    BadImage,
}

/// Validates a pool's `providerConfig` (absent = no configuration).
pub fn validate(provider_config: Option<&Value>) -> Result<Option<PoolConfig>, ConfigError> {
    let Some(config) = provider_config else {
        return Ok(None);
    };
    let fields = ENVELOPE.open(config)?;
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
            (json!("text"), EnvelopeError::NotAnObject.into()),
            (
                json!({"apiVersion": "v1", "kind": "WorkerConfig"}),
                EnvelopeError::WrongType {
                    api_version: Some("v1".into()),
                    kind: Some("WorkerConfig".into()),
                    expected_api_version: API_VERSION,
                    expected_kind: KIND,
                }
                .into(),
            ),
            (
                config(json!({"imag": "x"})),
                EnvelopeError::UnknownField {
                    field: "imag".into(),
                    accepted: "apiVersion, kind, image".into(),
                }
                .into(),
            ),
            (config(json!({"image": ""})), ConfigError::BadImage),
            (config(json!({"image": 3})), ConfigError::BadImage),
        ];
        for (input, expected) in cases {
            assert_eq!(validate(Some(&input)), Err(expected.clone()), "{input}");
        }
        let message = validate(Some(&config(json!({"imag": "x"}))))
            .unwrap_err()
            .to_string();
        assert_eq!(
            message,
            "providerConfig has unknown field \"imag\"; accepted fields: apiVersion, kind, image"
        );
    }
}
