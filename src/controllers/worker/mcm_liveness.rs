//! Is machine-controller-manager running? (pure) — read from the leader Leases its two
//! processes keep in the shoot's seed namespace while a rollout or a deletion is waited for,
//! so a Worker waiting on a dead MCM says so in one sentence instead of "waiting for the
//! deployments" (rollout) or "waiting until the machine objects are deleted" (deletion).
//!
//! gardenlet runs MCM core and the provider's machine controller with leader election on
//! (their default); each keeps a `coordination.k8s.io` Lease in its `--namespace`:
//! `machine-controller-manager` (MCM core, `cmd/machine-controller-manager/app`) and
//! `machine-controller` (the provider framework, `pkg/util/provider/app`), renewed every
//! 2 s with a 15 s lease duration by default. A Lease renewed longer ago than its duration
//! plus [`GRACE`] means nobody runs that process. A missing Lease says nothing (a MCM not
//! started yet, or one without leader election), and neither does a Lease without a renew
//! time. The I/O (two GETs, only once a wait has lasted [`super::SLOW_WAIT`]) is
//! `objects::machine_controller_down`, asked by the rollout wait
//! ([`super::reconcile`]) and by the deletion's waits ([`super::delete`]).

use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::Lease;

/// The Leases to look at, with the process each one stands for.
pub const LEASES: [(&str, &str); 2] = [
    ("machine-controller-manager", "machine-controller-manager"),
    (
        "machine-controller",
        "the provider's machine controller of machine-controller-manager",
    ),
];

/// Seconds past the lease duration before a Lease counts as abandoned (a leader renews
/// every couple of seconds; an API server under load may delay one renewal).
pub const GRACE: i64 = 15;

/// The lease duration when a Lease has none (client-go's and MCM's default).
const DEFAULT_DURATION: i64 = 15;

/// A process whose leader Lease is abandoned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abandoned {
    /// The process (one of [`LEASES`]).
    pub process: String,
    /// `namespace/name` of its Lease.
    pub lease: String,
    /// Seconds since the last renewal.
    pub silent: i64,
    /// The Lease's duration in seconds.
    pub duration: i64,
}

impl Abandoned {
    /// The sentence for the Worker's `lastOperation`.
    pub fn sentence(&self) -> String {
        format!(
            "{} is not running: its leader Lease {} was last renewed {} s ago (lease duration {} s)",
            self.process, self.lease, self.silent, self.duration
        )
    }

    /// The same without the seconds, which grow with every poll: the note of the one
    /// Warning event per wait.
    pub fn event_note(&self) -> String {
        format!(
            "{} is not running: its leader Lease {} is no longer renewed",
            self.process, self.lease
        )
    }
}

/// The process behind `lease` when it has stopped renewing it, else `None`.
pub fn abandoned(process: &str, lease: &Lease, now: DateTime<Utc>) -> Option<Abandoned> {
    let spec = lease.spec.as_ref()?;
    let renewed =
        DateTime::<Utc>::from_timestamp_millis(spec.renew_time.as_ref()?.0.as_millisecond())?;
    let duration = spec
        .lease_duration_seconds
        .map_or(DEFAULT_DURATION, i64::from)
        .max(1);
    let silent = (now - renewed).num_seconds();
    (silent > duration + GRACE).then(|| Abandoned {
        process: process.to_string(),
        lease: format!(
            "{}/{}",
            lease.metadata.namespace.as_deref().unwrap_or_default(),
            lease.metadata.name.as_deref().unwrap_or_default()
        ),
        silent,
        duration,
    })
}

/// One sentence when the process behind `lease` has stopped renewing it, else `None`.
pub fn not_running(process: &str, lease: &Lease, now: DateTime<Utc>) -> Option<String> {
    abandoned(process, lease, now).map(|a| a.sentence())
}

/// A deletion wait's message while machine-controller-manager is not running: what is wrong
/// first, then what the wait is for — nothing else deletes the machines.
pub fn deletion_stalled(abandoned: &Abandoned, waiting: &str) -> String {
    format!(
        "{}; the deletion goes on once it runs again ({waiting})",
        abandoned.sentence()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lease(renewed: &str, duration: Option<i32>) -> Lease {
        serde_json::from_value(json!({
            "metadata": {"name": "machine-controller-manager", "namespace": "shoot--a--b"},
            "spec": {
                "holderIdentity": "mcm-0",
                "renewTime": renewed,
                "leaseDurationSeconds": duration,
            }
        }))
        .unwrap()
    }

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().unwrap()
    }

    #[test]
    fn a_lease_renewed_within_its_duration_and_grace_is_alive() {
        let lease = lease("2026-12-05T10:00:00.000000Z", Some(15));
        assert_eq!(not_running("mcm", &lease, at("2026-12-05T10:00:30Z")), None);
    }

    #[test]
    fn a_lease_silent_past_its_duration_and_grace_names_the_process_and_the_lease() {
        let lease = lease("2026-12-05T10:00:00.000000Z", Some(15));
        assert_eq!(
            not_running(
                "machine-controller-manager",
                &lease,
                at("2026-12-05T10:00:42Z")
            )
            .as_deref(),
            Some(
                "machine-controller-manager is not running: its leader Lease \
                 shoot--a--b/machine-controller-manager was last renewed 42 s ago (lease \
                 duration 15 s)"
            )
        );
    }

    #[test]
    fn a_missing_duration_counts_as_the_default_and_a_zero_one_as_one_second() {
        let missing = lease("2026-12-05T10:00:00.000000Z", None);
        assert!(not_running("mcm", &missing, at("2026-12-05T10:00:30Z")).is_none());
        assert!(not_running("mcm", &missing, at("2026-12-05T10:00:31Z")).is_some());
        let zero = lease("2026-12-05T10:00:00.000000Z", Some(0));
        assert!(not_running("mcm", &zero, at("2026-12-05T10:00:17Z")).is_some());
    }

    #[test]
    fn a_lease_without_spec_or_renew_time_says_nothing() {
        let bare: Lease =
            serde_json::from_value(json!({"metadata": {"name": "machine-controller"}})).unwrap();
        assert!(not_running("mcm", &bare, at("2030-01-01T00:00:00Z")).is_none());
        let unrenewed: Lease = serde_json::from_value(
            json!({"metadata": {"name": "machine-controller"}, "spec": {"holderIdentity": "x"}}),
        )
        .unwrap();
        assert!(not_running("mcm", &unrenewed, at("2030-01-01T00:00:00Z")).is_none());
    }

    #[test]
    fn a_stalled_deletion_names_the_process_first_and_its_event_note_stays_the_same() {
        let lease = lease("2026-12-05T10:00:00.000000Z", Some(15));
        let at_42 = abandoned(
            "machine-controller-manager",
            &lease,
            at("2026-12-05T10:00:42Z"),
        );
        let at_47 = abandoned(
            "machine-controller-manager",
            &lease,
            at("2026-12-05T10:00:47Z"),
        );
        let (at_42, at_47) = (at_42.unwrap(), at_47.unwrap());
        assert_eq!(
            deletion_stalled(&at_42, "waiting until 1 machine deployment(s) are deleted"),
            "machine-controller-manager is not running: its leader Lease \
             shoot--a--b/machine-controller-manager was last renewed 42 s ago (lease duration \
             15 s); the deletion goes on once it runs again (waiting until 1 machine \
             deployment(s) are deleted)"
        );
        assert_eq!(at_42.event_note(), at_47.event_note());
        assert_eq!(
            at_42.event_note(),
            "machine-controller-manager is not running: its leader Lease \
             shoot--a--b/machine-controller-manager is no longer renewed"
        );
    }

    #[test]
    fn a_renew_time_in_the_future_is_alive() {
        let lease = lease("2026-12-05T10:05:00.000000Z", Some(15));
        assert!(not_running("mcm", &lease, at("2026-12-05T10:00:00Z")).is_none());
    }
}
