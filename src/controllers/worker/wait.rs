//! Bounded waits without blocking a worker thread.
//!
//! A wait (rollout, deletion) is a series of runs that each look once and return
//! `Outcome::Pending`, so the work queue requeues the Worker. [`WaitTracker`] remembers, per
//! Worker and wait kind, when the series started; once it has lasted longer than its bound
//! the run fails instead (and the series restarts with the next run), as Gardener's 5-minute
//! `retry.UntilTimeout` does. A new `metadata.generation` starts a new series, and so does
//! any run that ends (done or failed: the actuator forgets the Worker's waits then), just as
//! every upstream reconcile attempt waits afresh. The start times live in memory: an operator
//! restart restarts the bound, which only lengthens it.
//!
//! Time is passed in, so the bookkeeping is tested without sleeping.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::poll::Fingerprint;

/// Which wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitKind {
    /// Until the wanted deployments are rolled out (or hibernated).
    Rollout,
    /// Until every machine object is gone.
    Deletion,
    /// Until the deployments the cleanup deleted are gone.
    UnwantedDeletion,
    /// Until machine-controller-manager holds the credentials secret (delete).
    CredentialsAcquired,
    /// Until machine-controller-manager has let go of the credentials secret (delete).
    CredentialsReleased,
}

/// A step of a multi-run operation that must not be repeated within its series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// Delete re-deployed the classes.
    ClassesRedeployed,
    /// Delete saw machine-controller-manager hold the credentials secret.
    CredentialsAcquired,
    /// Delete labelled the machines and deleted the deployments, classes and class secrets.
    MachineObjectsDeleted,
}

/// namespace/name of a Worker plus the wait kind.
type Key = (String, String, WaitKind);

/// Start times of running waits.
#[derive(Debug, Default)]
pub struct WaitTracker {
    started: Mutex<HashMap<Key, (Option<i64>, Instant)>>,
    /// Per Worker (namespace, name): what the running series deployed ([`super::poll`]).
    deployed: Mutex<HashMap<(String, String), Fingerprint>>,
    /// Per Worker (namespace, name): the steps the running series has done.
    done: Mutex<std::collections::HashSet<(String, String, Step)>>,
    /// Per Worker (namespace, name): the pools' user data the running series read, and for
    /// which request.
    user_data: Mutex<HashMap<(String, String), (SeriesRequest, UserData)>>,
}

/// The pools' user data by pool name.
pub type UserData = std::collections::BTreeMap<String, Vec<u8>>;

/// What a series of runs was asked for: the Worker's `metadata.generation` and gardenlet's
/// `gardener.cloud/timestamp` annotation. gardenlet changes one of them whenever it wants the
/// Worker to take new user data (a new Secret name is a new generation; a new OSC comes with a
/// new timestamp), so the runs of one series may reuse what its first run read, as upstream's
/// reconcile reads the user data once and then only polls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesRequest {
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// The `gardener.cloud/timestamp` annotation.
    pub timestamp: Option<String>,
}

/// How a wait stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitState {
    /// Still within the bound; waited so far.
    Within(Duration),
    /// The bound is exceeded; waited so far. The series is forgotten.
    Exceeded(Duration),
}

impl WaitTracker {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<Key, (Option<i64>, Instant)>> {
        self.started.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes that the Worker `namespace/name` (at `generation`) is still waiting at `now`.
    pub fn waiting(
        &self,
        namespace: &str,
        name: &str,
        kind: WaitKind,
        generation: Option<i64>,
        now: Instant,
        bound: Duration,
    ) -> WaitState {
        let key = (namespace.to_string(), name.to_string(), kind);
        let mut entries = self.entries();
        let start = match entries.get(&key) {
            Some((seen, start)) if *seen == generation => *start,
            _ => {
                entries.insert(key.clone(), (generation, now));
                now
            }
        };
        let waited = now.saturating_duration_since(start);
        if waited > bound {
            entries.remove(&key);
            WaitState::Exceeded(waited)
        } else {
            WaitState::Within(waited)
        }
    }

    /// How long the Worker `namespace/name` (at `generation`) has been in its `kind` wait at
    /// `now`; zero when no such wait runs. Unlike [`Self::waiting`] it starts nothing.
    pub fn waited(
        &self,
        namespace: &str,
        name: &str,
        kind: WaitKind,
        generation: Option<i64>,
        now: Instant,
    ) -> Duration {
        let key = (namespace.to_string(), name.to_string(), kind);
        match self.entries().get(&key) {
            Some((seen, start)) if *seen == generation => now.saturating_duration_since(*start),
            _ => Duration::ZERO,
        }
    }

    /// Forgets every wait of the Worker (it finished or failed), and what it deployed.
    pub fn forget(&self, namespace: &str, name: &str) {
        self.entries()
            .retain(|(ns, n, _), _| !(ns == namespace && n == name));
        self.deployments()
            .remove(&(namespace.to_string(), name.to_string()));
        self.steps_done()
            .retain(|(ns, n, _)| !(ns == namespace && n == name));
        self.series_user_data()
            .remove(&(namespace.to_string(), name.to_string()));
    }

    fn series_user_data(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(String, String), (SeriesRequest, UserData)>> {
        self.user_data.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The user data the running series of the Worker read for `request`, if it did.
    pub fn user_data(
        &self,
        namespace: &str,
        name: &str,
        request: &SeriesRequest,
    ) -> Option<UserData> {
        self.series_user_data()
            .get(&(namespace.to_string(), name.to_string()))
            .filter(|(read_for, _)| read_for == request)
            .map(|(_, data)| data.clone())
    }

    /// Notes the user data the running series of the Worker read for `request`.
    pub fn note_user_data(
        &self,
        namespace: &str,
        name: &str,
        request: SeriesRequest,
        data: UserData,
    ) {
        self.series_user_data()
            .insert((namespace.to_string(), name.to_string()), (request, data));
    }

    fn steps_done(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashSet<(String, String, Step)>> {
        self.done.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the running series of the Worker has done `step`.
    pub fn has_done(&self, namespace: &str, name: &str, step: Step) -> bool {
        self.steps_done()
            .contains(&(namespace.to_string(), name.to_string(), step))
    }

    /// Notes that the running series of the Worker has done `step`.
    pub fn note_done(&self, namespace: &str, name: &str, step: Step) {
        self.steps_done()
            .insert((namespace.to_string(), name.to_string(), step));
    }

    fn deployments(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Fingerprint>> {
        self.deployed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the running series of the Worker deployed, if it deployed anything yet.
    pub fn deployed(&self, namespace: &str, name: &str) -> Option<Fingerprint> {
        self.deployments()
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Notes that the running series of the Worker deployed `fingerprint`.
    pub fn note_deployed(&self, namespace: &str, name: &str, fingerprint: Fingerprint) {
        self.deployments()
            .insert((namespace.to_string(), name.to_string()), fingerprint);
    }

    /// Number of running waits (for tests and metrics).
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    /// Whether no wait is running.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: Duration = Duration::from_secs(300);

    #[test]
    fn user_data_is_reused_within_a_series_for_the_same_request_only() {
        let tracker = WaitTracker::default();
        let request = |generation, timestamp: &str| SeriesRequest {
            generation: Some(generation),
            timestamp: Some(timestamp.to_string()),
        };
        let data = UserData::from([("a".to_string(), b"#!/bin/bash".to_vec())]);
        assert_eq!(tracker.user_data("ns", "w", &request(1, "t1")), None);
        tracker.note_user_data("ns", "w", request(1, "t1"), data.clone());
        assert_eq!(tracker.user_data("ns", "w", &request(1, "t1")), Some(data));
        assert_eq!(
            tracker.user_data("ns", "w", &request(2, "t1")),
            None,
            "new generation"
        );
        assert_eq!(
            tracker.user_data("ns", "w", &request(1, "t2")),
            None,
            "new timestamp"
        );
        tracker.forget("ns", "w");
        assert_eq!(
            tracker.user_data("ns", "w", &request(1, "t1")),
            None,
            "series over"
        );
    }

    #[test]
    fn how_long_a_wait_runs_is_read_without_starting_one() {
        let tracker = WaitTracker::default();
        let t0 = Instant::now();
        let waited =
            |generation, now| tracker.waited("ns", "w", WaitKind::Rollout, Some(generation), now);
        assert_eq!(waited(1, t0), Duration::ZERO);
        assert!(tracker.is_empty(), "reading starts no wait");
        tracker.waiting("ns", "w", WaitKind::Rollout, Some(1), t0, BOUND);
        assert_eq!(
            waited(1, t0 + Duration::from_secs(40)),
            Duration::from_secs(40)
        );
        assert_eq!(
            waited(2, t0 + Duration::from_secs(40)),
            Duration::ZERO,
            "a new generation is a new series"
        );
    }

    #[test]
    fn a_wait_is_bounded_and_restarts_after_exceeding() {
        let tracker = WaitTracker::default();
        let t0 = Instant::now();
        let at = |secs| t0 + Duration::from_secs(secs);
        let wait = |now| tracker.waiting("ns", "w", WaitKind::Rollout, Some(1), now, BOUND);
        assert_eq!(wait(t0), WaitState::Within(Duration::ZERO));
        assert_eq!(wait(at(120)), WaitState::Within(Duration::from_secs(120)));
        assert_eq!(wait(at(300)), WaitState::Within(BOUND));
        assert_eq!(wait(at(301)), WaitState::Exceeded(Duration::from_secs(301)));
        // The next run starts a new series.
        assert_eq!(wait(at(302)), WaitState::Within(Duration::ZERO));
    }

    #[test]
    fn a_new_generation_or_forget_restarts_the_series() {
        let tracker = WaitTracker::default();
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(200);
        tracker.waiting("ns", "w", WaitKind::Rollout, Some(1), t0, BOUND);
        assert_eq!(
            tracker.waiting("ns", "w", WaitKind::Rollout, Some(2), later, BOUND),
            WaitState::Within(Duration::ZERO)
        );
        tracker.waiting("ns", "w", WaitKind::Deletion, Some(2), t0, BOUND);
        tracker.waiting("ns", "other", WaitKind::Deletion, Some(2), t0, BOUND);
        assert_eq!(tracker.len(), 3);
        tracker.forget("ns", "w");
        assert_eq!(tracker.len(), 1);
    }

    #[test]
    fn steps_are_remembered_until_forget() {
        let tracker = WaitTracker::default();
        assert!(!tracker.has_done("ns", "w", Step::ClassesRedeployed));
        tracker.note_done("ns", "w", Step::ClassesRedeployed);
        assert!(tracker.has_done("ns", "w", Step::ClassesRedeployed));
        assert!(!tracker.has_done("ns", "w", Step::CredentialsAcquired));
        assert!(!tracker.has_done("ns", "other", Step::ClassesRedeployed));
        tracker.forget("ns", "w");
        assert!(!tracker.has_done("ns", "w", Step::ClassesRedeployed));
    }

    #[test]
    fn kinds_are_tracked_separately() {
        let tracker = WaitTracker::default();
        let t0 = Instant::now();
        tracker.waiting("ns", "w", WaitKind::Rollout, None, t0, BOUND);
        assert_eq!(
            tracker.waiting(
                "ns",
                "w",
                WaitKind::Deletion,
                None,
                t0 + Duration::from_secs(400),
                BOUND
            ),
            WaitState::Within(Duration::ZERO)
        );
    }
}
