//! How errors of an actuator are classified (codes, configuration vs transient, metric
//! category) and the errors of the generic reconciler itself.

use std::time::Duration;

use crate::api::ErrorCode;

/// What the generic reconciler needs to know about an actuator's error.
pub trait Classify: std::error::Error + Send + Sync + 'static {
    /// Gardener error codes carried by the error (written to `lastError.codes`).
    fn codes(&self) -> Vec<ErrorCode> {
        Vec::new()
    }

    /// A bounded label for metrics and events, e.g. `render` or `apply`.
    fn category(&self) -> &'static str;

    /// Whether a human must change the spec (then no hot retry). Defaults to "carries
    /// `ERR_CONFIGURATION_PROBLEM`".
    fn is_configuration_problem(&self) -> bool {
        self.codes().contains(&ErrorCode::ConfigurationProblem)
    }
}

/// Errors of the generic reconciler (API calls around the actuator).
#[derive(Debug, thiserror::Error)]
pub enum ReconcilerError {
    /// Reading the object failed.
    #[error("reading {kind} {name}")]
    Get {
        /// Kind.
        kind: &'static str,
        /// namespace/name.
        name: String,
        /// Cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// The Cluster of a shoot namespace does not exist (yet).
    #[error("Cluster {name} not found")]
    ClusterMissing {
        /// Cluster name (= namespace).
        name: String,
    },
    /// Reading the Cluster failed.
    #[error("reading Cluster {name}")]
    Cluster {
        /// Cluster name (= namespace).
        name: String,
        /// Cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// The Cluster's embedded Shoot does not decode.
    #[error("Cluster {name} has a shoot that does not decode")]
    ShootDecode {
        /// Cluster name.
        name: String,
        /// Cause.
        #[source]
        source: serde_json::Error,
    },
    /// Reading the Namespace failed.
    #[error("reading Namespace {name}")]
    Namespace {
        /// Namespace name.
        name: String,
        /// Cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// A metadata patch (annotation, finalizers) failed.
    #[error("patching {what} of {name}")]
    Metadata {
        /// What was patched.
        what: &'static str,
        /// namespace/name.
        name: String,
        /// Cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// A status patch failed.
    #[error("patching status of {name}")]
    Status {
        /// namespace/name.
        name: String,
        /// Cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// The object is stored (the CRD admitted it) but does not decode as our type, e.g. a
    /// unit `command` other than start/restart/stop under Gardener's CRDs.
    #[error("{kind} {name} does not decode; fix the spec")]
    Decode {
        /// Kind.
        kind: &'static str,
        /// namespace/name.
        name: String,
        /// Cause.
        #[source]
        source: serde_json::Error,
    },
}

impl Classify for ReconcilerError {
    fn codes(&self) -> Vec<ErrorCode> {
        match self {
            ReconcilerError::Decode { .. } => vec![ErrorCode::ConfigurationProblem],
            _ => Vec::new(),
        }
    }

    fn category(&self) -> &'static str {
        match self {
            ReconcilerError::Decode { .. } => "decode",
            ReconcilerError::Get { .. } => "get",
            ReconcilerError::Cluster { .. }
            | ReconcilerError::ClusterMissing { .. }
            | ReconcilerError::ShootDecode { .. } => "cluster",
            ReconcilerError::Namespace { .. } => "namespace",
            ReconcilerError::Metadata { .. } => "metadata",
            ReconcilerError::Status { .. } => "status",
        }
    }
}

/// A classified failure of one reconcile run, as the controller loop handles it.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// The error with its causes.
    pub message: String,
    /// Gardener error codes.
    pub codes: Vec<ErrorCode>,
    /// Metric/event category.
    pub category: &'static str,
    /// Whether the user must change the spec.
    pub configuration_problem: bool,
}

impl Failure {
    /// A run that took longer than `limit` and was cut off.
    pub fn timed_out(limit: std::time::Duration) -> Self {
        Failure {
            message: format!("the run took longer than {limit:?} and was cut off; it is retried"),
            codes: Vec::new(),
            category: "run-timeout",
            configuration_problem: false,
        }
    }

    /// Classifies `error`.
    pub fn of<E: Classify>(error: &E) -> Self {
        Failure {
            message: crate::error_chain::chain(error),
            codes: error.codes(),
            category: error.category(),
            configuration_problem: error.is_configuration_problem(),
        }
    }
}

impl From<ReconcilerError> for Failure {
    fn from(error: ReconcilerError) -> Self {
        Failure::of(&error)
    }
}

/// Retry delays: exponential per object for transient errors, a long fixed delay for
/// configuration problems (gardenlet re-annotates the object when the user fixes the spec).
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// First delay after a transient error.
    pub base: Duration,
    /// Upper bound of the exponential delay.
    pub max: Duration,
    /// Delay after a configuration problem.
    pub configuration: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_millis(500),
            max: Duration::from_secs(300),
            configuration: Duration::from_secs(600),
        }
    }
}

impl RetryPolicy {
    /// Delay before retry number `failures` (1 = first retry).
    pub fn delay(&self, failures: u32, configuration_problem: bool) -> Duration {
        if configuration_problem {
            return self.configuration;
        }
        let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(20));
        self.base.saturating_mul(factor).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_retries_grow_exponentially_up_to_the_cap() {
        let p = RetryPolicy::default();
        assert_eq!(p.delay(1, false), Duration::from_millis(500));
        assert_eq!(p.delay(2, false), Duration::from_secs(1));
        assert_eq!(p.delay(4, false), Duration::from_secs(4));
        assert_eq!(p.delay(50, false), Duration::from_secs(300));
    }

    #[test]
    fn configuration_problems_are_not_hot_retried() {
        let p = RetryPolicy::default();
        assert_eq!(p.delay(1, true), Duration::from_secs(600));
    }
}
