//! The envelope all of our `providerConfig` objects share (pure): a JSON/YAML object with
//! our `apiVersion` and `kind` and only allow-listed top-level fields. The ContainerRuntime
//! (`GVisorConfiguration`) and Worker pool (`WorkerConfig`) validators open it here, then
//! check their own fields. Values from the input are shortened in messages, so a huge key
//! cannot blow up `lastError`.

use serde_json::{Map, Value};

/// What a `providerConfig` must look like on the outside.
#[derive(Debug, Clone, Copy)]
pub struct Envelope {
    /// The expected `apiVersion`.
    pub api_version: &'static str,
    /// The expected `kind`.
    pub kind: &'static str,
    /// Every top-level field accepted (`apiVersion` and `kind` included).
    pub fields: &'static [&'static str],
}

/// Why a `providerConfig` is not one of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// Not a JSON/YAML object.
    #[error("providerConfig must be an object")]
    NotAnObject,
    /// Wrong or missing `apiVersion`/`kind`.
    #[error(
        "providerConfig has {} and {}; expected apiVersion {expected_api_version:?} and kind {expected_kind:?}",
        given("apiVersion", api_version.as_deref()),
        given("kind", kind.as_deref())
    )]
    WrongType {
        /// What was given (shortened); `None` when the field is missing, empty or not a
        /// string.
        api_version: Option<String>,
        /// What was given (shortened); `None` as for `api_version`.
        kind: Option<String>,
        /// What is expected.
        expected_api_version: &'static str,
        /// What is expected.
        expected_kind: &'static str,
    },
    /// A top-level field that is not allow-listed.
    #[error("providerConfig has unknown field {field:?}; accepted fields: {accepted}")]
    UnknownField {
        /// The field (shortened).
        field: String,
        /// The accepted fields, comma-separated.
        accepted: String,
    },
}

impl Envelope {
    /// The object's fields, once `config` is an object of this envelope.
    pub fn open<'a>(&self, config: &'a Value) -> Result<&'a Map<String, Value>, EnvelopeError> {
        let Value::Object(fields) = config else {
            return Err(EnvelopeError::NotAnObject);
        };
        let text = |key: &str| {
            fields
                .get(key)
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
        };
        let (api_version, kind) = (text("apiVersion"), text("kind"));
        if api_version != Some(self.api_version) || kind != Some(self.kind) {
            return Err(EnvelopeError::WrongType {
                api_version: api_version.map(shorten),
                kind: kind.map(shorten),
                expected_api_version: self.api_version,
                expected_kind: self.kind,
            });
        }
        if let Some(unknown) = fields.keys().find(|k| !self.fields.contains(&k.as_str())) {
            return Err(EnvelopeError::UnknownField {
                field: shorten(unknown),
                accepted: self.fields.join(", "),
            });
        }
        Ok(fields)
    }
}

/// `apiVersion "v1"` for a given value, `no apiVersion` for a missing one.
fn given(field: &str, value: Option<&str>) -> String {
    match value {
        Some(value) => format!("{field} {value:?}"),
        None => format!("no {field}"),
    }
}

/// `text` cut to 64 characters (with `…`), for values from the input in messages.
pub fn shorten(text: &str) -> String {
    match text.char_indices().nth(64) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const EXAMPLE: Envelope = Envelope {
        api_version: "example.gardener.cloud/v1alpha1",
        kind: "Example",
        fields: &["apiVersion", "kind", "size"],
    };

    #[test]
    fn an_object_of_the_envelope_opens() {
        let config =
            json!({"apiVersion": "example.gardener.cloud/v1alpha1", "kind": "Example", "size": 3});
        let fields = EXAMPLE
            .open(&config)
            .map(|fields| fields.get("size").cloned());
        assert_eq!(fields, Ok(Some(json!(3))));
    }

    #[test]
    fn everything_else_is_refused_with_a_short_message() {
        let long = "x".repeat(10_000);
        let cases = [
            (json!("text"), "providerConfig must be an object".to_string()),
            (
                json!({"apiVersion": "v1", "kind": "Example"}),
                "providerConfig has apiVersion \"v1\" and kind \"Example\"; expected apiVersion \"example.gardener.cloud/v1alpha1\" and kind \"Example\"".to_string(),
            ),
            (
                json!({"kind": "Example"}),
                "providerConfig has no apiVersion and kind \"Example\"; expected apiVersion \"example.gardener.cloud/v1alpha1\" and kind \"Example\"".to_string(),
            ),
            (
                json!({}),
                "providerConfig has no apiVersion and no kind; expected apiVersion \"example.gardener.cloud/v1alpha1\" and kind \"Example\"".to_string(),
            ),
            (
                json!({"apiVersion": "", "kind": 3}),
                "providerConfig has no apiVersion and no kind; expected apiVersion \"example.gardener.cloud/v1alpha1\" and kind \"Example\"".to_string(),
            ),
            (
                json!({"apiVersion": "example.gardener.cloud/v1alpha1", "kind": "Example", "sise": 3}),
                "providerConfig has unknown field \"sise\"; accepted fields: apiVersion, kind, size"
                    .to_string(),
            ),
        ];
        for (config, message) in cases {
            let error = EXAMPLE.open(&config).map(|_| ()).unwrap_err();
            assert_eq!(error.to_string(), message);
        }
        let huge = json!({"apiVersion": "example.gardener.cloud/v1alpha1", "kind": "Example", long.clone(): 1});
        let message = EXAMPLE.open(&huge).map(|_| ()).unwrap_err().to_string();
        assert!(message.len() < 200, "{message}");
    }
}
