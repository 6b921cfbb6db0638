//! Test support: waits bounded by the progress they observe, not by the wall clock, and
//! samplers that keep a fixed schedule.
//!
//! A wait on a landscape (machines booting, a pool rolling) lasts as long as the machine
//! running it is busy. A fixed bound either fails a run that is still moving (`make
//! bench-machines` once stopped at its 300-s bound in the middle of a roll, 8 of 10 new
//! machines running) or must be so long that a real hang costs all of it.
//! [`wait_while_progressing`] fails only when what it observes has not changed for `stall`,
//! with [`HARD_CAP`] far above any run as a last resort.
//!
//! A sampler that sleeps a fixed time after each look samples less often the slower its
//! look is (`make e2e-machines-lifecycle` once failed its "2 Hz" count on a loaded machine:
//! 249 samples in 136.2 s where it wanted 268, while every rollout property held).
//! [`on_schedule`] looks every `period` from its start (a look slower than the period
//! delays the next one, no burst to catch up), and [`Gaps`] records what a sampler's result
//! depends on: the longest time between two samples.

use std::future::Future;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};

/// The longest any progressing wait may take.
pub const HARD_CAP: Duration = Duration::from_secs(1800);

/// What one look of [`wait_while_progressing`] saw when the wait is not over yet.
#[derive(Debug, Clone)]
pub struct Observed {
    /// What counts as progress: the wait goes on while this changes.
    pub progress: String,
    /// What to print when the wait fails.
    pub last: String,
}

/// Polls `check` every 500 ms until it returns `Ok`; panics once its
/// [`Observed::progress`] has not changed for `stall`, or after [`HARD_CAP`].
pub async fn wait_while_progressing<T, F, Fut>(what: &str, stall: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Observed>>,
{
    let started = Instant::now();
    let mut changed = started;
    let mut seen: Option<String> = None;
    loop {
        let observed = match check().await {
            Ok(value) => return value,
            Err(observed) => observed,
        };
        let now = Instant::now();
        if seen.as_deref() != Some(observed.progress.as_str()) {
            changed = now;
            seen = Some(observed.progress.clone());
        }
        assert!(
            now - changed < stall,
            "no progress for {stall:?} ({:?} in all) waiting for {what}; stuck at: {}\nlast: {}",
            now - started,
            observed.progress,
            observed.last
        );
        assert!(
            now - started < HARD_CAP,
            "still not done after {HARD_CAP:?} waiting for {what}; last: {}",
            observed.last
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Runs `look` every `period` from now on, on a fixed schedule, until the task is aborted.
pub fn on_schedule<F, Fut>(period: Duration, mut look: F) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            look().await;
        }
    })
}

/// How densely a sampler sampled.
#[derive(Debug, Default, Clone, Copy)]
pub struct Gaps {
    /// Samples taken.
    pub samples: usize,
    /// The longest time between two samples (and from [`Gaps::start`] to the first).
    pub longest: Duration,
    last: Option<Instant>,
}

impl Gaps {
    /// Counts from `at` (the first sample's gap is measured from there).
    pub fn start(at: Instant) -> Self {
        Gaps {
            last: Some(at),
            ..Gaps::default()
        }
    }

    /// Notes a sample taken at `at`.
    pub fn sample(&mut self, at: Instant) {
        if let Some(last) = self.last {
            self.longest = self.longest.max(at.saturating_duration_since(last));
        }
        self.last = Some(at);
        self.samples += 1;
    }

    /// These gaps with the time from the last sample to `now` counted as one more (a
    /// sampler that stopped sampling shows as one long gap): what a sampler saw until `now`.
    pub fn until(&self, now: Instant) -> Self {
        let mut gaps = *self;
        if let Some(last) = self.last {
            gaps.longest = gaps.longest.max(now.saturating_duration_since(last));
        }
        gaps
    }
}
