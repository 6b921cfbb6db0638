//! What the object gauges show, computed without I/O or a clock (times are unix seconds
//! passed in): per extension kind, how many of our objects are in each
//! `status.lastOperation.state`, and for the unfinished ones, the longest time one of them
//! has been unfinished.
//!
//! Where it sits: the controller's watch ([`super::controller`]) calls [`track`] on every
//! event of an object its class and type filter accepts and keeps the result next to the
//! object's fingerprint. Every 30 s the leader's gauge task ([`super::object_metrics`]) calls
//! [`tally`] over everything the watches keep. No API request is made for either.
//!
//! **Unfinished** is every state but `Succeeded`, including no `lastOperation` at all. An
//! object's unfinished time starts when the watch sees it leave `Succeeded` (or see it for the
//! first time unfinished) and ends when it shows `Succeeded` again. A change between
//! unfinished states does not restart it. A retry of an `Error` that takes longer than a
//! second writes `Processing` before its next `Error`, and a waiting Worker alternates between
//! `Processing` and `Error` every bounded wait. Either way the object has not finished.
//!
//! Why not the age of `lastOperation.lastUpdateTime`: every status write rewrites it
//! ([`super::status`]). That includes each retry of an `Error` (exponential backoff up to 5
//! minutes, 10 for configuration problems) and each poll of a waiting operation (a Worker
//! polls every 5 s). So its age tells when the operator last wrote, not how long an object has
//! been stuck. It is used once: for an object first seen unfinished (the first list after a
//! leader starts, or a change the watch delivers late), the unfinished time starts at its
//! `lastUpdateTime`, when the object was last written with an unfinished state. An object
//! with no `lastOperation` counts from its `creationTimestamp`. Both undercount and never
//! overcount. After a leader change, an object that had been stuck for hours counts again
//! from its last status write.

use std::collections::BTreeMap;

use crate::api::{LastOperation, LastOperationState};

/// An object's `status.lastOperation.state`, or [`State::NoOperation`] when it has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    /// `Succeeded`.
    Succeeded,
    /// `Processing`.
    Processing,
    /// `Error`.
    Error,
    /// `Failed`.
    Failed,
    /// `Pending`.
    Pending,
    /// `Aborted`.
    Aborted,
    /// No `lastOperation` yet (label value `None`).
    NoOperation,
}

impl State {
    /// Every state, in label order.
    pub const ALL: [State; 7] = [
        State::Succeeded,
        State::Processing,
        State::Error,
        State::Failed,
        State::Pending,
        State::Aborted,
        State::NoOperation,
    ];

    /// The state of an object whose last operation is `last`.
    pub fn of(last: Option<&LastOperation>) -> Self {
        match last.map(|l| l.state) {
            None => State::NoOperation,
            Some(LastOperationState::Succeeded) => State::Succeeded,
            Some(LastOperationState::Processing) => State::Processing,
            Some(LastOperationState::Error) => State::Error,
            Some(LastOperationState::Failed) => State::Failed,
            Some(LastOperationState::Pending) => State::Pending,
            Some(LastOperationState::Aborted) => State::Aborted,
        }
    }

    /// The `state` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Succeeded => "Succeeded",
            State::Processing => "Processing",
            State::Error => "Error",
            State::Failed => "Failed",
            State::Pending => "Pending",
            State::Aborted => "Aborted",
            State::NoOperation => "None",
        }
    }

    /// Whether the object is done (nothing more to do until it is asked again).
    pub fn finished(self) -> bool {
        self == State::Succeeded
    }
}

/// What the watch keeps per object for the gauges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tracked {
    /// The current state.
    pub state: State,
    /// Since when (unix seconds) the object has been unfinished; `None` when it is finished.
    pub unfinished_since: Option<i64>,
}

/// The entry of an object after a watch event showed its last operation `last`.
/// `previous` is the entry from before the event (`None` on first sight), `created` its
/// `creationTimestamp`, `now` the time of the event (all unix seconds).
pub fn track(
    previous: Option<Tracked>,
    last: Option<&LastOperation>,
    created: Option<i64>,
    now: i64,
) -> Tracked {
    let state = State::of(last);
    if state.finished() {
        return Tracked {
            state,
            unfinished_since: None,
        };
    }
    let since = match (previous.and_then(|p| p.unfinished_since), last) {
        // Still unfinished: the clock goes on.
        (Some(since), _) => since,
        // Written unfinished at `lastUpdateTime`, so unfinished at least since then (a
        // clock ahead of ours, e.g. a `gardener.cloud/timestamp` from gardenlet, counts as now).
        (None, Some(last)) => last.last_update_time.timestamp(),
        // Never operated on: since its creation, when seen for the first time.
        (None, None) if previous.is_none() => created.unwrap_or(now),
        // Its lastOperation went away after a success: from now.
        (None, None) => now,
    };
    Tracked {
        state,
        unfinished_since: Some(since.min(now)),
    }
}

/// The gauge values of one sample.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Objects by kind and state.
    pub objects: BTreeMap<(&'static str, State), u64>,
    /// By kind and unfinished state: the longest time (seconds) an object now in that state
    /// has been unfinished; 0 when none is.
    pub unfinished_seconds_max: BTreeMap<(&'static str, State), i64>,
}

/// The gauge values for `objects` (kind and entry of each object) at `now`. Every state of
/// each kind in `kinds` gets a value (0 when no object has it), so a series drops to 0
/// instead of vanishing; `unfinished_seconds_max` has no `Succeeded` series.
pub fn tally(
    kinds: &[&'static str],
    objects: impl IntoIterator<Item = (&'static str, Tracked)>,
    now: i64,
) -> Tally {
    let mut tally = Tally::default();
    for &kind in kinds {
        for state in State::ALL {
            tally.objects.insert((kind, state), 0);
            if !state.finished() {
                tally.unfinished_seconds_max.insert((kind, state), 0);
            }
        }
    }
    for (kind, tracked) in objects {
        *tally.objects.entry((kind, tracked.state)).or_insert(0) += 1;
        if let Some(since) = tracked.unfinished_since {
            let age = now.saturating_sub(since).max(0);
            let max = tally
                .unfinished_seconds_max
                .entry((kind, tracked.state))
                .or_insert(0);
            *max = (*max).max(age);
        }
    }
    tally
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};

    use super::*;
    use crate::api::LastOperationType;

    const NOW: i64 = 1_800_000_000;

    fn last(state: LastOperationState, at: i64) -> LastOperation {
        LastOperation {
            type_: LastOperationType::Reconcile,
            state,
            progress: 1,
            description: String::new(),
            last_update_time: DateTime::<Utc>::from_timestamp(at, 0).unwrap(),
        }
    }

    #[test]
    fn first_sight_of_an_unfinished_object_counts_from_its_last_status_write() {
        let error = last(LastOperationState::Error, NOW - 120);
        let tracked = track(None, Some(&error), Some(NOW - 9_000), NOW);
        assert_eq!(tracked.state, State::Error);
        assert_eq!(tracked.unfinished_since, Some(NOW - 120));
    }

    #[test]
    fn an_object_without_last_operation_counts_from_its_creation() {
        let tracked = track(None, None, Some(NOW - 600), NOW);
        assert_eq!(tracked.state, State::NoOperation);
        assert_eq!(tracked.unfinished_since, Some(NOW - 600));
        assert_eq!(track(None, None, None, NOW).unfinished_since, Some(NOW));
    }

    #[test]
    fn retries_and_polls_do_not_restart_the_clock_and_a_success_ends_it() {
        let mut tracked = track(
            None,
            Some(&last(LastOperationState::Processing, NOW)),
            None,
            NOW,
        );
        // A waiting Worker: Processing rewritten every 5 s, an Error after each bounded wait.
        for (step, state) in [
            LastOperationState::Processing,
            LastOperationState::Error,
            LastOperationState::Processing,
            LastOperationState::Error,
        ]
        .into_iter()
        .enumerate()
        {
            let at = NOW + 300 * (step as i64 + 1);
            tracked = track(Some(tracked), Some(&last(state, at)), None, at);
            assert_eq!(tracked.unfinished_since, Some(NOW), "step {step}");
        }
        let done = NOW + 1_500;
        tracked = track(
            Some(tracked),
            Some(&last(LastOperationState::Succeeded, done)),
            None,
            done,
        );
        assert_eq!(
            tracked,
            Tracked {
                state: State::Succeeded,
                unfinished_since: None
            }
        );
        // The next reconcile starts a new clock at its first write.
        let again = done + 3_600;
        tracked = track(
            Some(tracked),
            Some(&last(LastOperationState::Processing, again)),
            None,
            again + 2,
        );
        assert_eq!(tracked.unfinished_since, Some(again));
    }

    #[test]
    fn a_last_update_time_ahead_of_our_clock_counts_as_now() {
        let ahead = last(LastOperationState::Processing, NOW + 30);
        assert_eq!(
            track(None, Some(&ahead), None, NOW).unfinished_since,
            Some(NOW)
        );
    }

    #[test]
    fn a_last_operation_that_goes_away_after_a_success_counts_from_now() {
        let succeeded = track(
            None,
            Some(&last(LastOperationState::Succeeded, NOW - 50)),
            None,
            NOW - 50,
        );
        let cleared = track(Some(succeeded), None, Some(NOW - 9_000), NOW);
        assert_eq!(cleared.state, State::NoOperation);
        assert_eq!(cleared.unfinished_since, Some(NOW));
    }

    #[test]
    fn the_tally_counts_by_kind_and_state_with_zeros_and_the_oldest_unfinished_age() {
        let unfinished = |state, since| Tracked {
            state,
            unfinished_since: Some(since),
        };
        let done = Tracked {
            state: State::Succeeded,
            unfinished_since: None,
        };
        let objects = [
            ("Worker", done),
            ("Worker", done),
            ("Worker", unfinished(State::Processing, NOW - 60)),
            ("Worker", unfinished(State::Processing, NOW - 2_000)),
            ("Worker", unfinished(State::Error, NOW - 10)),
            ("ContainerRuntime", unfinished(State::NoOperation, NOW - 5)),
            // Clock skew never yields a negative age.
            ("ContainerRuntime", unfinished(State::Error, NOW + 5)),
        ];
        let tally = tally(&["ContainerRuntime", "Worker"], objects, NOW);
        assert_eq!(tally.objects.len(), 14, "every state of both kinds");
        assert_eq!(tally.objects[&("Worker", State::Succeeded)], 2);
        assert_eq!(tally.objects[&("Worker", State::Processing)], 2);
        assert_eq!(tally.objects[&("Worker", State::Error)], 1);
        assert_eq!(tally.objects[&("Worker", State::Failed)], 0);
        assert_eq!(tally.objects[&("ContainerRuntime", State::NoOperation)], 1);
        assert_eq!(
            tally.unfinished_seconds_max.len(),
            12,
            "no Succeeded series"
        );
        assert_eq!(
            tally.unfinished_seconds_max[&("Worker", State::Processing)],
            2_000
        );
        assert_eq!(tally.unfinished_seconds_max[&("Worker", State::Error)], 10);
        assert_eq!(tally.unfinished_seconds_max[&("Worker", State::Pending)], 0);
        assert_eq!(
            tally.unfinished_seconds_max[&("ContainerRuntime", State::NoOperation)],
            5
        );
        assert_eq!(
            tally.unfinished_seconds_max[&("ContainerRuntime", State::Error)],
            0
        );
    }

    #[test]
    fn every_state_has_its_gardener_label() {
        let labels: Vec<&str> = State::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            labels,
            [
                "Succeeded",
                "Processing",
                "Error",
                "Failed",
                "Pending",
                "Aborted",
                "None"
            ]
        );
        assert_eq!(State::of(None), State::NoOperation);
    }
}
