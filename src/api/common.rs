//! Building blocks shared by every `extensions.gardener.cloud/v1alpha1` kind.
//!
//! Mirrors the common spec (`type`, `class`, `providerConfig`) and status (`lastOperation`,
//! `lastError`, `conditions`, ...) that gardenlet expects on ContainerRuntime,
//! OperatingSystemConfig and Worker objects, plus the serde and schema helpers the other modules
//! of [`crate::api`] use for timestamps and schema-less ("raw") objects. Pure types, no I/O.

use std::fmt;

use chrono::{DateTime, Utc};
use k8s_openapi::api::autoscaling::v1::CrossVersionObjectReference;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// Spec fields common to all extension kinds; flattened into each kind's spec.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefaultSpec {
    /// Type of the extension resource; selects the responsible controller.
    #[serde(rename = "type")]
    pub type_: String,
    /// Extension class (`shoot`, `seed` or `garden`); absent means `shoot`. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Provider-specific configuration, opaque to Gardener (usually carries its own apiVersion/kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "raw_object_schema")]
    pub provider_config: Option<Value>,
}

impl DefaultSpec {
    /// The class, with an absent or empty value treated as `shoot` (as the upstream library does).
    pub fn class_or_default(&self) -> &str {
        match self.class.as_deref() {
            None | Some("") => "shoot",
            Some(class) => class,
        }
    }
}

/// Status fields common to all extension kinds; flattened into each kind's status.
///
/// `lastError: None` is omitted when serialising; a status patch that must clear the field has
/// to send an explicit JSON `null` itself.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefaultStatus {
    /// Most recent `metadata.generation` for which an operation finished (successfully or not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The last operation on the resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<LastOperation>,
    /// The last error of an operation; absent after a successful operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<LastError>,
    /// Health conditions of the resource.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Provider-specific status, opaque to Gardener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "raw_object_schema")]
    pub provider_status: Option<Value>,
    /// Controller-private state that must survive a control-plane migration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "raw_object_schema")]
    pub state: Option<Value>,
    /// Named references to objects in the same namespace that belong to `state`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<NamedResourceReference>,
}

/// A named reference to an object in the same namespace (`status.resources[]`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamedResourceReference {
    /// Name under which `state` refers to the object.
    pub name: String,
    /// Reference to the object (`apiVersion`, `kind`, `name`).
    pub resource_ref: CrossVersionObjectReference,
}

/// Reference to an object by name in the same namespace.
///
/// Like the core/v1 type, but `name` is optional with default `""`, as in the upstream CRDs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalObjectReference {
    /// Name of the referent.
    #[serde(default)]
    pub name: String,
}

/// Reference to a Secret, possibly in another namespace.
///
/// Like the core/v1 type, but with a plain `name` (upstream writers always set it).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    /// Name of the Secret.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Namespace of the Secret; absent means the referring object's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// Selects a key of a Secret in the same namespace.
///
/// Like the core/v1 type, but `name` is optional with default `""`, as in the upstream CRDs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeySelector {
    /// Name of the Secret.
    #[serde(default)]
    pub name: String,
    /// Data key in the Secret.
    pub key: String,
    /// Whether the Secret or key may be missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

/// Kind of an operation on an extension object.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum LastOperationType {
    /// First reconciliation of a new object.
    Create,
    /// Any later reconciliation.
    Reconcile,
    /// Deletion.
    Delete,
    /// Control-plane migration on the source seed.
    Migrate,
    /// Control-plane restoration on the destination seed.
    Restore,
    /// Live migration (Shoots only; never written by extensions).
    LiveMigrate,
}

impl LastOperationType {
    /// The name as written in `lastOperation.type` and used as an event's action.
    pub fn as_str(self) -> &'static str {
        match self {
            LastOperationType::Create => "Create",
            LastOperationType::Reconcile => "Reconcile",
            LastOperationType::Delete => "Delete",
            LastOperationType::Migrate => "Migrate",
            LastOperationType::Restore => "Restore",
            LastOperationType::LiveMigrate => "LiveMigrate",
        }
    }
}

/// State of an operation on an extension object.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum LastOperationState {
    /// The operation is running.
    Processing,
    /// The operation finished successfully.
    Succeeded,
    /// The operation failed and will be retried.
    Error,
    /// The operation failed permanently (set by gardenlet on Shoots).
    Failed,
    /// The operation waits to be started.
    Pending,
    /// The operation was aborted.
    Aborted,
}

/// Status of a [`Condition`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// The state is not known (the default of new conditions).
    Unknown,
    /// The condition is being established.
    Progressing,
}

/// Information about the last operation on a resource.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastOperation {
    /// Type of the last operation: Create, Reconcile, Delete, Migrate or Restore.
    #[serde(rename = "type")]
    pub type_: LastOperationType,
    /// State of the last operation: Processing, Succeeded, Error, Failed, Pending or Aborted.
    pub state: LastOperationState,
    /// Progress of the last operation in percent (0-100).
    pub progress: i32,
    /// Human readable description of the last operation.
    pub description: String,
    /// Last time the operation state changed (RFC3339, second precision).
    #[serde(with = "rfc3339_seconds")]
    #[schemars(schema_with = "date_time_schema")]
    pub last_update_time: DateTime<Utc>,
}

/// Information about the last error of an operation.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastError {
    /// Human readable description of the error.
    pub description: String,
    /// ID of the task that caused the error (never set by extensions).
    #[serde(default, rename = "taskID", skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Well-defined error codes of the error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub codes: Vec<ErrorCode>,
    /// Last time the error was reported (RFC3339, second precision).
    #[serde(
        default,
        with = "rfc3339_seconds::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "date_time_schema")]
    pub last_update_time: Option<DateTime<Utc>>,
}

/// A Gardener condition (used in extension and ManagedResource status).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type of the condition, e.g. `ResourcesApplied`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Status of the condition: True, False, Unknown or Progressing.
    pub status: ConditionStatus,
    /// Last time the status changed (RFC3339, second precision).
    #[serde(with = "rfc3339_seconds")]
    #[schemars(schema_with = "date_time_schema")]
    pub last_transition_time: DateTime<Utc>,
    /// Last time reason, message or codes changed (RFC3339, second precision).
    #[serde(with = "rfc3339_seconds")]
    #[schemars(schema_with = "date_time_schema")]
    pub last_update_time: DateTime<Utc>,
    /// Machine-readable reason of the last transition.
    pub reason: String,
    /// Human readable details of the last transition.
    pub message: String,
    /// Well-defined error codes in case the condition reports a problem.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub codes: Vec<ErrorCode>,
}

/// Well-defined Gardener error code (`ERR_*`), attached to [`LastError`] and [`Condition`].
///
/// Codes unknown to this crate are kept verbatim in [`ErrorCode::Other`], so newer upstream codes
/// never break deserialisation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// `ERR_INFRA_UNAUTHENTICATED`: the credentials are invalid.
    InfraUnauthenticated,
    /// `ERR_INFRA_UNAUTHORIZED`: the credentials lack permissions.
    InfraUnauthorized,
    /// `ERR_INFRA_QUOTA_EXCEEDED`: an infrastructure quota is exhausted.
    InfraQuotaExceeded,
    /// `ERR_INFRA_RATE_LIMITS_EXCEEDED`: infrastructure rate limits were hit.
    InfraRateLimitsExceeded,
    /// `ERR_INFRA_DEPENDENCIES`: dependent infrastructure objects block the operation.
    InfraDependencies,
    /// `ERR_RETRYABLE_INFRA_DEPENDENCIES`: like `ERR_INFRA_DEPENDENCIES`, but retryable.
    RetryableInfraDependencies,
    /// `ERR_INFRA_RESOURCES_DEPLETED`: the infrastructure has no capacity left.
    InfraResourcesDepleted,
    /// `ERR_CLEANUP_CLUSTER_RESOURCES`: cluster resources could not be cleaned up.
    CleanupClusterResources,
    /// `ERR_CONFIGURATION_PROBLEM`: the configuration is invalid; a human must fix it.
    ConfigurationProblem,
    /// `ERR_RETRYABLE_CONFIGURATION_PROBLEM`: a configuration problem that may resolve itself.
    RetryableConfigurationProblem,
    /// `ERR_PROBLEMATIC_WEBHOOK`: a webhook in the shoot blocks the operation.
    ProblematicWebhook,
    /// Any other code, kept verbatim.
    Other(String),
}

impl ErrorCode {
    const KNOWN: [(ErrorCode, &'static str); 11] = [
        (ErrorCode::InfraUnauthenticated, "ERR_INFRA_UNAUTHENTICATED"),
        (ErrorCode::InfraUnauthorized, "ERR_INFRA_UNAUTHORIZED"),
        (ErrorCode::InfraQuotaExceeded, "ERR_INFRA_QUOTA_EXCEEDED"),
        (
            ErrorCode::InfraRateLimitsExceeded,
            "ERR_INFRA_RATE_LIMITS_EXCEEDED",
        ),
        (ErrorCode::InfraDependencies, "ERR_INFRA_DEPENDENCIES"),
        (
            ErrorCode::RetryableInfraDependencies,
            "ERR_RETRYABLE_INFRA_DEPENDENCIES",
        ),
        (
            ErrorCode::InfraResourcesDepleted,
            "ERR_INFRA_RESOURCES_DEPLETED",
        ),
        (
            ErrorCode::CleanupClusterResources,
            "ERR_CLEANUP_CLUSTER_RESOURCES",
        ),
        (ErrorCode::ConfigurationProblem, "ERR_CONFIGURATION_PROBLEM"),
        (
            ErrorCode::RetryableConfigurationProblem,
            "ERR_RETRYABLE_CONFIGURATION_PROBLEM",
        ),
        (ErrorCode::ProblematicWebhook, "ERR_PROBLEMATIC_WEBHOOK"),
    ];

    /// The exact wire string, e.g. `ERR_CONFIGURATION_PROBLEM`.
    pub fn as_str(&self) -> &str {
        if let ErrorCode::Other(code) = self {
            return code;
        }
        Self::KNOWN
            .iter()
            .find(|(known, _)| known == self)
            .map_or("", |(_, s)| s)
    }

    /// Parses a wire string; unknown strings become [`ErrorCode::Other`].
    pub fn parse(s: &str) -> ErrorCode {
        Self::KNOWN
            .iter()
            .find(|(_, known)| *known == s)
            .map_or_else(|| ErrorCode::Other(s.to_owned()), |(code, _)| code.clone())
    }

    /// Whether gardenlet gives up on a Shoot at once when an error carries this code
    /// (`HasNonRetryableErrorCode` upstream).
    pub fn is_non_retryable(&self) -> bool {
        matches!(
            self,
            ErrorCode::InfraUnauthenticated
                | ErrorCode::InfraUnauthorized
                | ErrorCode::InfraQuotaExceeded
                | ErrorCode::InfraRateLimitsExceeded
                | ErrorCode::InfraDependencies
                | ErrorCode::ConfigurationProblem
                | ErrorCode::ProblematicWebhook
        )
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        Ok(ErrorCode::parse(&s))
    }
}

impl JsonSchema for ErrorCode {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ErrorCode".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Well-defined Gardener error code, e.g. ERR_CONFIGURATION_PROBLEM.",
            "type": "string",
        })
    }
}

/// Behaviour shared by the namespaced extension kinds (ContainerRuntime, OperatingSystemConfig,
/// Worker), so generic reconciler code can read the common spec and status of any of them.
pub trait ExtensionObject {
    /// The common spec part.
    fn default_spec(&self) -> &DefaultSpec;
    /// The common status part, if a status was written.
    fn default_status(&self) -> Option<&DefaultStatus>;
}

/// Parses a boolean the way Go's `strconv.ParseBool` does: `1 t T TRUE true True` are true,
/// `0 f F FALSE false False` are false, anything else is `None`.
pub fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Schema of a schema-less JSON object (`providerConfig`, `providerStatus`, `state`, ...):
/// `type: object` with `x-kubernetes-preserve-unknown-fields: true`.
pub fn raw_object_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Schema of an arbitrary JSON value (Go `apiextensionsv1.JSON`): no type, unknown fields kept.
pub fn raw_value_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Schema of a timestamp: `type: string`, `format: date-time`.
pub fn date_time_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "format": "date-time",
    })
}

/// Serde adapter for `DateTime<Utc>` as RFC3339 at second precision (`2024-05-01T10:00:00Z`),
/// the format Go's `metav1.Time` uses. Any RFC3339 string is accepted when reading.
pub mod rfc3339_seconds {
    use chrono::{DateTime, SecondsFormat, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    /// Serialises at second precision with a `Z` suffix.
    pub fn serialize<S: Serializer>(
        time: &DateTime<Utc>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&time.to_rfc3339_opts(SecondsFormat::Secs, true))
    }

    /// Parses any RFC3339 timestamp and converts it to UTC.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<DateTime<Utc>, D::Error> {
        let s = String::deserialize(deserializer)?;
        DateTime::parse_from_rfc3339(&s)
            .map(|t| t.with_timezone(&Utc))
            .map_err(serde::de::Error::custom)
    }

    /// The same for `Option<DateTime<Utc>>`; `null` reads as `None`.
    pub mod option {
        use chrono::{DateTime, Utc};
        use serde::{Deserialize, Deserializer, Serializer};

        /// Serialises `Some` like [`super::serialize`] and `None` as `null`.
        pub fn serialize<S: Serializer>(
            time: &Option<DateTime<Utc>>,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            match time {
                Some(time) => super::serialize(time, serializer),
                None => serializer.serialize_none(),
            }
        }

        /// Parses an optional RFC3339 timestamp.
        pub fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Option<DateTime<Utc>>, D::Error> {
            let s = Option::<String>::deserialize(deserializer)?;
            s.map(|s| {
                DateTime::parse_from_rfc3339(&s)
                    .map(|t| t.with_timezone(&Utc))
                    .map_err(serde::de::Error::custom)
            })
            .transpose()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    const STATUS_YAML: &str = r#"
observedGeneration: 3
lastOperation:
  type: Reconcile
  state: Error
  progress: 50
  description: "Error reconciling ContainerRuntime: boom"
  lastUpdateTime: "2024-05-01T10:00:00Z"
lastError:
  description: "Error reconciling ContainerRuntime: boom"
  taskID: some-task
  codes: [ERR_CONFIGURATION_PROBLEM, ERR_SOMETHING_NEW]
  lastUpdateTime: "2024-05-01T10:00:00.123456Z"
conditions:
- type: ResourcesApplied
  status: Progressing
  lastTransitionTime: "2024-05-01T10:00:00+02:00"
  lastUpdateTime: "2024-05-01T10:00:00Z"
  reason: ApplyProgressing
  message: applying
providerStatus:
  apiVersion: example/v1
  anything: [1, 2]
state:
  foo: bar
resources:
- name: secret
  resourceRef:
    apiVersion: v1
    kind: Secret
    name: my-secret
someFutureField: ignored
"#;

    #[test]
    fn default_status_round_trips() {
        let status: DefaultStatus = serde_norway::from_str(STATUS_YAML).unwrap();
        assert_eq!(status.observed_generation, Some(3));
        let op = status.last_operation.as_ref().unwrap();
        assert_eq!(op.type_, LastOperationType::Reconcile);
        assert_eq!(op.state, LastOperationState::Error);
        let err = status.last_error.as_ref().unwrap();
        assert_eq!(err.task_id.as_deref(), Some("some-task"));
        assert_eq!(
            err.codes,
            vec![
                ErrorCode::ConfigurationProblem,
                ErrorCode::Other("ERR_SOMETHING_NEW".into())
            ]
        );
        let cond = &status.conditions[0];
        assert_eq!(cond.status, ConditionStatus::Progressing);
        assert_eq!(
            cond.last_transition_time,
            Utc.with_ymd_and_hms(2024, 5, 1, 8, 0, 0).unwrap()
        );
        assert_eq!(status.resources[0].resource_ref.kind, "Secret");

        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["lastError"]["taskID"], "some-task");
        assert_eq!(json["lastError"]["lastUpdateTime"], "2024-05-01T10:00:00Z");
        assert_eq!(json["lastError"]["codes"][1], "ERR_SOMETHING_NEW");
        assert_eq!(
            json["conditions"][0]["lastTransitionTime"],
            "2024-05-01T08:00:00Z"
        );
        assert!(json.get("someFutureField").is_none());
        let back: DefaultStatus = serde_json::from_value(json).unwrap();
        assert_eq!(back.last_operation, status.last_operation);
        assert_eq!(back.conditions, status.conditions);
        assert_eq!(back.state, status.state);
    }

    #[test]
    fn empty_status_serialises_to_empty_object_and_omits_last_error() {
        let json = serde_json::to_value(DefaultStatus::default()).unwrap();
        assert_eq!(json, serde_json::json!({}));
        let status = DefaultStatus {
            observed_generation: Some(1),
            ..Default::default()
        };
        let json = serde_json::to_string(&status).unwrap();
        assert!(!json.contains("lastError"));
    }

    #[test]
    fn error_codes_have_exact_strings() {
        for (code, s) in ErrorCode::KNOWN {
            assert_eq!(code.as_str(), s);
            assert_eq!(ErrorCode::parse(s), code);
            assert_eq!(
                serde_json::to_value(&code).unwrap(),
                Value::String(s.into())
            );
        }
        assert!(ErrorCode::ConfigurationProblem.is_non_retryable());
        assert!(!ErrorCode::RetryableConfigurationProblem.is_non_retryable());
        assert!(!ErrorCode::Other("X".into()).is_non_retryable());
    }

    #[test]
    fn operation_enums_have_exact_strings() {
        let types = [
            (LastOperationType::Create, "Create"),
            (LastOperationType::Reconcile, "Reconcile"),
            (LastOperationType::Delete, "Delete"),
            (LastOperationType::Migrate, "Migrate"),
            (LastOperationType::Restore, "Restore"),
        ];
        for (t, s) in types {
            assert_eq!(serde_json::to_value(t).unwrap(), Value::String(s.into()));
        }
        let states = [
            (LastOperationState::Processing, "Processing"),
            (LastOperationState::Succeeded, "Succeeded"),
            (LastOperationState::Error, "Error"),
            (LastOperationState::Failed, "Failed"),
            (LastOperationState::Pending, "Pending"),
            (LastOperationState::Aborted, "Aborted"),
        ];
        for (t, s) in states {
            assert_eq!(serde_json::to_value(t).unwrap(), Value::String(s.into()));
        }
    }

    #[test]
    fn go_bool_parsing_matches_strconv() {
        for s in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_go_bool(s), Some(true), "{s}");
        }
        for s in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_go_bool(s), Some(false), "{s}");
        }
        for s in ["", "yes", "tRUE", " true"] {
            assert_eq!(parse_go_bool(s), None, "{s}");
        }
    }

    #[test]
    fn default_spec_class_defaults_to_shoot() {
        let mut spec = DefaultSpec::default();
        assert_eq!(spec.class_or_default(), "shoot");
        spec.class = Some(String::new());
        assert_eq!(spec.class_or_default(), "shoot");
        spec.class = Some("seed".into());
        assert_eq!(spec.class_or_default(), "seed");
    }
}
