//! Kubernetes Events on extension objects, one per operation outcome.
//!
//! Publishing is best effort: a failed event write is logged and never fails a reconcile.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// The controller name events are reported under.
pub const REPORTING_CONTROLLER: &str = "gardener-extension-node";

/// Publishes events for the operator.
#[derive(Clone)]
pub struct EventPublisher {
    recorder: Recorder,
}

impl std::fmt::Debug for EventPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventPublisher").finish_non_exhaustive()
    }
}

impl EventPublisher {
    /// A publisher reporting as [`REPORTING_CONTROLLER`], instance = pod name (env
    /// `POD_NAME`) or host name.
    pub fn new(client: Client) -> Self {
        let instance = std::env::var("POD_NAME")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok());
        let reporter = Reporter {
            controller: REPORTING_CONTROLLER.to_string(),
            instance,
        };
        EventPublisher {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// Publishes a Normal event.
    pub async fn normal(
        &self,
        regarding: &ObjectReference,
        reason: &str,
        action: &str,
        note: String,
    ) {
        self.publish(regarding, EventType::Normal, reason, action, note)
            .await;
    }

    /// Publishes a Warning event.
    pub async fn warning(
        &self,
        regarding: &ObjectReference,
        reason: &str,
        action: &str,
        note: String,
    ) {
        self.publish(regarding, EventType::Warning, reason, action, note)
            .await;
    }

    async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        // The events API caps notes at 1 KiB.
        let note = truncate(note, 1000);
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: action.to_string(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, regarding).await {
            tracing::warn!(%error, reason, "publishing event failed");
        }
    }
}

fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut cut = max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(super::truncate("äöü".to_string(), 3), "ä");
        assert_eq!(super::truncate("abc".to_string(), 10), "abc");
    }
}
