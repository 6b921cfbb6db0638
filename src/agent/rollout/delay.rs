//! The reconciliation delay: how long an OSC *update* waits before it is applied
//! (`docs/agent.md#reconciliation-delay`). Pure.
//!
//! gardener-resource-manager spreads the nodes of a shoot over a window by writing the Node
//! annotation `node-agent.gardener.cloud/reconciliation-delay` with a Go duration string
//! (`time.Duration.String()`, so values like `1m33.333333333s` occur). The agent reads it when
//! an update arrives; creates (including the first sight of the secret after a start) apply at
//! once. A missing or unparsable annotation falls back to the last delay that did parse, so a
//! broken annotation never makes a whole fleet restart kubelet at the same moment.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::go_duration::{DurationError, parse as parse_go_duration};

/// Node annotation with the reconciliation delay (a Go duration string).
pub const ANNOTATION_RECONCILIATION_DELAY: &str = "node-agent.gardener.cloud/reconciliation-delay";

/// The delay an OSC update waits for, from the Node's annotations.
///
/// `last_good` is the most recent delay that parsed (0 before any); it is returned when the
/// node is unknown, has no annotation or the annotation does not parse (the error is
/// returned alongside so the caller can log it). A parsed value replaces `last_good`.
pub fn reconciliation_delay(
    annotations: Option<&BTreeMap<String, String>>,
    last_good: Duration,
) -> (Duration, Option<DurationError>) {
    let Some(value) = annotations.and_then(|a| a.get(ANNOTATION_RECONCILIATION_DELAY)) else {
        return (last_good, None);
    };
    match parse_go_duration(value.trim()) {
        Ok(parsed) => (parsed.as_wait(), None),
        Err(error) => (last_good, Some(error)),
    }
}

/// What an observed version of the secret's `osc.yaml` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// First sight since start or since the secret was gone ("create"): apply now.
    Now,
    /// Same data as last seen: nothing to do.
    Nothing,
    /// Changed data ("update"): apply after the reconciliation delay.
    AfterDelay,
}

/// Classifies a secret observation by the digest of its `osc.yaml` against the digest last
/// seen (`None`: none seen).
pub fn trigger(last_seen: Option<&[u8; 32]>, current: &[u8; 32]) -> Trigger {
    match last_seen {
        None => Trigger::Now,
        Some(seen) if seen == current => Trigger::Nothing,
        Some(_) => Trigger::AfterDelay,
    }
}

/// When work is due given what is already scheduled: an earlier due time is never pushed
/// back by a later event (like a delaying work queue).
pub fn earliest<T: Ord + Copy>(scheduled: Option<T>, new: T) -> T {
    scheduled.map_or(new, |current| current.min(new))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_apply_now_updates_after_the_delay_repeats_never() {
        let a = [1u8; 32];
        let b = [2u8; 32];
        assert_eq!(trigger(None, &a), Trigger::Now);
        assert_eq!(trigger(Some(&a), &a), Trigger::Nothing);
        assert_eq!(trigger(Some(&a), &b), Trigger::AfterDelay);
        assert_eq!(earliest(None, 5), 5);
        assert_eq!(earliest(Some(3), 5), 3, "a later update does not postpone");
        assert_eq!(earliest(Some(9), 5), 5);
    }

    #[test]
    fn delay_from_node_annotations_with_fallback() {
        let last = Duration::from_secs(7);
        let annotations = |value: &str| {
            BTreeMap::from([(
                ANNOTATION_RECONCILIATION_DELAY.to_string(),
                value.to_string(),
            )])
        };
        assert_eq!(
            reconciliation_delay(None, last),
            (last, None),
            "node unknown"
        );
        assert_eq!(
            reconciliation_delay(Some(&BTreeMap::new()), last),
            (last, None),
            "no annotation"
        );
        assert_eq!(
            reconciliation_delay(Some(&annotations("1m33.5s")), last),
            (Duration::from_millis(93_500), None)
        );
        assert_eq!(
            reconciliation_delay(Some(&annotations("-5s")), last),
            (Duration::ZERO, None)
        );
        let (delay, error) = reconciliation_delay(Some(&annotations("soon")), last);
        assert_eq!(delay, last, "unparsable falls back");
        assert!(error.is_some());
    }
}
